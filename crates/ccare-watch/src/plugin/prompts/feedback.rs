//! The feedback episodes of `output-pattern` rules (OP-5, OP-6) in the storage domain
//! [`FEEDBACK_DOMAIN`]: one row `<session>/<rule>` per (session, rule), holding the
//! pure [`Episode`] of `crate::pattern`.
//!
//! The domain opens on first use (at the first pre-step), once per mounted plugin.
//! The store is the only truth: every read is of acknowledged rows, and every change
//! is a [`Table::update`] whose closure applies the transition to the stored episode
//! in queue order, so a read that is a little behind never loses a count. Writes from
//! the synchronous segment callbacks are queued; the pre-step and the request gate
//! await them ([`FeedbackStore::flush`]) before they matter.
//!
//! A fresh episode (none stored, or the rule's version or detector changed) starts
//! after the log's current end: outputs written before the rule applied to the
//! session are history, not input.

use std::sync::Arc;

use ccare_agent::domains::{Domain, DomainSpec, PluginDomains, Table, TableSpec};
use ccare_core::kinds::{ASSISTANT_MESSAGE, AssistantMessage};
use ccare_core::{Event, SessionId};
use ccare_llm::CancellationToken;
use ccare_session::Session;
use parking_lot::Mutex;
use serde::Deserialize;

use super::{PromptRule, RouteRef};
use crate::pattern::{Episode, Measurement, OutputKind, OutputPatternConfig, measure};

/// The storage domain of the feedback episodes (OP-5).
pub const FEEDBACK_DOMAIN: &str = "context_care_output_feedback";
/// Its one table; keys are [`episode_key`]s.
pub const EPISODES_TABLE: &str = "episodes";
/// The schema version of [`FEEDBACK_DOMAIN`].
const DOMAIN_VERSION: u64 = 1;

/// The row of the (session, rule) episode: `<session>/<rule>` (writes partition by
/// session).
pub fn episode_key(session: &SessionId, rule_id: &str) -> String {
    format!("{session}/{rule_id}")
}

/// What the observation needs of one `output-pattern` rule, its controls decided.
pub(super) struct RuleInput<'a> {
    pub(super) rule: &'a PromptRule,
    pub(super) detector: &'a OutputPatternConfig,
    /// `prompt:<ruleId>.notice` is on.
    pub(super) eligible: bool,
    /// Outputs at or below this seq never count (RC-5).
    pub(super) since_seq: i64,
}

/// The stored episode at `key`, if it decodes.
pub(super) fn read_episode(table: &Table, key: &str) -> Option<Episode> {
    table
        .get(key)
        .and_then(|value| Episode::deserialize(value.as_ref()).ok())
}

/// The lazily opened domain of one mounted plugin.
pub(super) struct FeedbackStore {
    domains: PluginDomains,
    slot: Mutex<Slot>,
}

enum Slot {
    Closed,
    /// Someone is opening it; the token fires when that ends either way.
    Opening(CancellationToken),
    Open(Domain),
}

/// What [`FeedbackStore::domain`] does next.
enum Next {
    Ready(Domain),
    Wait(CancellationToken),
    OpenIt(CancellationToken),
}

/// Resets the slot when an open is abandoned midway, and always wakes the waiters.
struct Opening<'a> {
    slot: &'a Mutex<Slot>,
    token: CancellationToken,
}

impl Drop for Opening<'_> {
    fn drop(&mut self) {
        let mut slot = self.slot.lock();
        if matches!(&*slot, Slot::Opening(_)) {
            *slot = Slot::Closed;
        }
        drop(slot);
        self.token.cancel();
    }
}

impl FeedbackStore {
    pub(super) fn new(domains: PluginDomains) -> Self {
        FeedbackStore {
            domains,
            slot: Mutex::new(Slot::Closed),
        }
    }

    /// The episodes table, once the domain is open.
    pub(super) fn table(&self) -> Option<Table> {
        match &*self.slot.lock() {
            Slot::Open(domain) => domain.table(EPISODES_TABLE).ok(),
            Slot::Closed | Slot::Opening(_) => None,
        }
    }

    /// The domain, opening it on first use; `None` while it cannot be opened (the
    /// next call tries again).
    async fn domain(&self) -> Option<Domain> {
        loop {
            let next = {
                let mut slot = self.slot.lock();
                match &*slot {
                    Slot::Open(domain) => Next::Ready(domain.clone()),
                    Slot::Opening(token) => Next::Wait(token.clone()),
                    Slot::Closed => {
                        let token = CancellationToken::new();
                        *slot = Slot::Opening(token.clone());
                        Next::OpenIt(token)
                    }
                }
            };
            match next {
                Next::Ready(domain) => return Some(domain),
                Next::Wait(token) => token.cancelled().await,
                Next::OpenIt(token) => {
                    let opening = Opening {
                        slot: &self.slot,
                        token,
                    };
                    let spec = DomainSpec::new(FEEDBACK_DOMAIN, DOMAIN_VERSION)
                        .table(TableSpec::by_first_segment(EPISODES_TABLE));
                    let opened = self.domains.open(spec).await.ok();
                    *opening.slot.lock() = match &opened {
                        Some(domain) => Slot::Open(domain.clone()),
                        None => Slot::Closed,
                    };
                    drop(opening);
                    return opened;
                }
            }
        }
    }

    /// Waits for the session's queued episode writes. A failed write is dropped here:
    /// the store keeps what it acknowledged, and that is what is read next.
    pub(super) async fn flush(&self, session: &SessionId) {
        let Some(domain) = self.domain().await else {
            return;
        };
        let Ok(table) = domain.table(EPISODES_TABLE) else {
            return;
        };
        let partition = table.partition(&episode_key(session, ""));
        // An error is reported once and then dropped; there is nobody to tell here.
        let _flushed = domain.flush(partition.as_deref()).await;
    }

    /// OP-5 for each rule: feeds the session's outputs on the rule's route that the
    /// episode has not seen (non-interrupted `assistant/message`s, text blocks joined
    /// by a blank line, above `lastSeq` and the control's `sinceSeq`) to its episode,
    /// and waits until that is written. A rule whose control is off takes no input.
    pub(super) async fn observe(&self, session: &Session, rules: &[RuleInput<'_>]) {
        if rules.is_empty() {
            return;
        }
        self.flush(session.id()).await;
        let Some(table) = self.table() else {
            return;
        };
        for input in rules {
            let key = episode_key(session.id(), &input.rule.rule_id);
            let version = input.rule.version.clone();
            let fingerprint = input.detector.fingerprint();
            let stored = read_episode(&table, &key).filter(|episode| {
                episode.rule_version == version && episode.spec_fingerprint == fingerprint
            });
            let outputs = match &stored {
                // Fresh: it starts after the log's current end.
                None => Vec::new(),
                Some(episode) if input.eligible => session.with_log(|log| {
                    outputs_after(
                        log.events(),
                        &input.rule.route,
                        episode.last_seq,
                        input.since_seq,
                    )
                }),
                Some(_) => continue,
            };
            if stored.is_some() && outputs.is_empty() {
                continue;
            }
            let measured: Vec<(u64, Measurement)> = outputs
                .iter()
                .map(|(seq, text)| (*seq, measure(input.detector, text)))
                .collect();
            let baseline = session.head().checked_sub(1);
            let detector = input.detector.clone();
            let written = table.update(&key, move |current| {
                let mut episode = current
                    .and_then(|value| Episode::deserialize(value).ok())
                    .filter(|episode| {
                        episode.rule_version == version && episode.spec_fingerprint == fingerprint
                    })
                    .unwrap_or_else(|| {
                        let mut fresh = Episode::new(version.clone(), fingerprint.clone());
                        fresh.last_seq = baseline;
                        fresh
                    });
                for (seq, measurement) in &measured {
                    // Outputs at or below `lastSeq` are skipped by the episode itself.
                    episode.observe_output(&detector, *seq, measurement, OutputKind::Complete);
                }
                serde_json::to_value(&episode)
                    .ok()
                    .or_else(|| current.cloned())
            });
            if let Ok(ticket) = written {
                // A failed write leaves the stored episode; the next step tries again.
                let _written = ticket.await;
            }
        }
    }

    /// OP-6 reserve: deliveries+1, `delivery-unknown`, if the pending is still the one
    /// named (queued).
    pub(super) fn reserve(&self, key: &str, segment_id: &str) {
        let segment_id = segment_id.to_owned();
        self.change(key, move |episode| episode.reserve(&segment_id).is_ok());
    }

    /// OP-6 dispatch: the reserved pending is `dispatched` (queued).
    pub(super) fn dispatched(&self, key: &str, segment_id: &str) {
        let segment_id = segment_id.to_owned();
        self.change(key, move |episode| {
            episode.mark_dispatched(&segment_id).is_ok()
        });
    }

    /// OP-6: a pending of another route becomes `superseded` (queued).
    pub(super) fn supersede(&self, key: &str) {
        self.change(key, |episode| episode.supersede().is_some());
    }

    /// Queues `change` over the stored episode; it returns whether it changed it.
    fn change(&self, key: &str, mut change: impl FnMut(&mut Episode) -> bool + Send + 'static) {
        let Some(table) = self.table() else {
            return;
        };
        // Dropping the ticket keeps the write; an error waits for the next flush.
        let _ticket = table.update(key, move |current| {
            let value = current?;
            let Ok(mut episode) = Episode::deserialize(value) else {
                return Some(value.clone());
            };
            if !change(&mut episode) {
                return Some(value.clone());
            }
            Some(serde_json::to_value(&episode).unwrap_or_else(|_| value.clone()))
        });
    }
}

/// The `(seq, text)` of each non-interrupted `assistant/message` on `route` above
/// `last_seq` and `since_seq`, oldest first.
fn outputs_after(
    events: &[Arc<Event>],
    route: &RouteRef,
    last_seq: Option<u64>,
    since_seq: i64,
) -> Vec<(u64, String)> {
    let mut outputs: Vec<(u64, String)> = events
        .iter()
        .rev()
        .take_while(|event| last_seq.is_none_or(|last_seq| event.seq() > last_seq))
        .filter(|event| event.kind() == ASSISTANT_MESSAGE)
        .filter(|event| i64::try_from(event.seq()).is_ok_and(|seq| seq > since_seq))
        .filter_map(|event| {
            let message = event.decode::<AssistantMessage>().ok()?;
            (!message.interrupted
                && message.provider == route.provider
                && message.model == route.model)
                .then(|| (event.seq(), message.message.joined_text("\n\n")))
        })
        .collect();
    outputs.reverse();
    outputs
}
