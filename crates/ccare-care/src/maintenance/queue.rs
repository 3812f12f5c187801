//! What every maintenance action shares: the session's queue (CC-SER-1) and the
//! no-useful-range memo (CC-MNT-5), its key and whether the journal already holds it.

use ccare_session::Session;

use super::Context;
use crate::care::{Care, Frozen};
use crate::journal::JournalEntry;
use crate::range::{RangeNode, SeqRange};
use crate::summary::SummaryFailure;

impl Care {
    /// Waits for this session's turn in the maintenance queue (CC-SER-1). The wait ends
    /// with `ABORTED` when the caller cancels or the plugin is unmounted (the signal is
    /// any(caller, lifetime)); the guard keeps the queue until it is dropped.
    pub(crate) async fn enter_queue(
        &self,
        context: &Context<'_>,
    ) -> Result<tokio::sync::OwnedMutexGuard<()>, SummaryFailure> {
        let queue = self.with_session(context.session.id(), |state| {
            std::sync::Arc::clone(&state.queue)
        });
        let aborted = |message: &str| SummaryFailure {
            code: "ABORTED".to_owned(),
            message: message.to_owned(),
        };
        tokio::select! {
            guard = queue.lock_owned() => {
                if self.lifetime.is_cancelled() {
                    Err(aborted("context-care was unmounted"))
                } else {
                    Ok(guard)
                }
            }
            () = self.lifetime.cancelled() => Err(aborted("context-care was unmounted")),
            () = context.cancel.cancelled() => Err(aborted("the caller cancelled")),
        }
    }

    /// CC-MNT-5 `proposalKey` of `range` ([`crate::memo`]); each message's part is
    /// computed once per seq and kept in the session's state.
    pub(super) fn proposal_key(
        &self,
        session: &Session,
        nodes: &[RangeNode],
        range: SeqRange,
        frozen: &Frozen,
    ) -> String {
        let pricer = frozen.pricing.pricer(&frozen.meter).ok();
        let seqs: std::collections::HashSet<u64> = range.seqs(nodes).into_iter().collect();
        let view = session.derived_view();
        let selected: Vec<&ccare_session::DerivedMessage> = view
            .messages
            .iter()
            .filter(|derived| seqs.contains(&derived.seq))
            .filter(|derived| !crate::range_nodes::is_own(&derived.message))
            .collect();
        // Known parts under the session lock; new ones computed outside it (hashing a
        // long session's messages the first time takes milliseconds), then kept.
        let known: Vec<Option<crate::memo::MemoPart>> = self.with_session(session.id(), |state| {
            selected
                .iter()
                .map(|derived| state.memo_parts.get(&derived.seq).copied())
                .collect()
        });
        let parts: Vec<(u64, crate::memo::MemoPart)> = selected
            .iter()
            .zip(known)
            .map(|(derived, known)| {
                let part = known.unwrap_or_else(|| crate::memo::MemoPart {
                    digest: crate::memo::message_digest(&derived.message),
                    price: pricer
                        .as_ref()
                        .and_then(|pricer| pricer.message(&derived.message).ok()),
                });
                (derived.seq, part)
            })
            .collect();
        self.with_session(session.id(), |state| {
            state.memo_parts.extend(parts.iter().copied());
        });
        let route = self
            .route
            .as_deref()
            .map(|route| format!("{}/{}", route.provider, route.model));
        crate::memo::proposal_key(
            parts,
            &crate::memo::MemoPolicy {
                scale: frozen.pricing.text_scale().as_f64(),
                header: frozen.header_key.as_deref(),
                route: route.as_deref(),
                summary: &self.config.summary,
            },
        )
    }

    /// Whether the journal already found the selection of `key` not reducible
    /// (a `no-useful-range` record, CC-MNT-5); an unreadable journal is no hit.
    pub(super) async fn memo_hit(&self, session: &Session, key: &str) -> bool {
        match self.journal.list(session.id()).await {
            Ok(entries) => entries.iter().any(|entry: &JournalEntry| {
                let action = entry.maintenance();
                action.phase == Some("no-useful-range") && action.proposal_key == Some(key)
            }),
            Err(_) => false,
        }
    }
}
