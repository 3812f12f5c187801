//! One-step undo of a compaction (CC-EXT-3): a summary, prune or deep rest that
//! replaced part of the surface is undone by *appending* `compaction/undo` events that
//! carry `Restore{replace_seq}` (H-SURF-1): each replace node the action appended
//! leaves the surface and the nodes it shadowed are live again. Nothing is deleted.
//!
//! Refused, with a typed [`UndoError`] and nothing appended, when the action is
//! unknown, appended nothing, was undone already, is not the latest undoable action
//! (a later replace node is still live, or its own nodes are shadowed), a turn is
//! running, or the restored request would exceed the soft threshold `S`: the restored
//! input `Q` is priced on the frozen basis exactly as the request gate prices a request
//! (the latest conversation header's tools plus the restored surface, CC-PRC-4), and
//! the undo runs only if `Q ≤ S`, so it never arms maintenance that would compact the
//! same history again. A committed undo is journaled as a maintenance record of action
//! `undo` (CC-JNL-3). It runs in the session's maintenance queue, by the caller that
//! drives the session (the CLI under the lease, the server through its actor).

use std::sync::Arc;

use ccare_core::kinds::{self, CompactionUndo};
use ccare_core::{Clock as _, EventDraft, SurfaceOp, SystemClock};
use ccare_session::Session;
use serde::Serialize;
use serde_json::json;

use crate::care::{Care, CareError};
use crate::report::ActionRecord;

/// The actions an undo can take back.
const UNDOABLE: [&str; 3] = ["summary", "prune", "deep-rest"];

/// Why an undo was refused or failed. Each variant has a stable code
/// ([`UndoError::code`]).
#[derive(Debug, thiserror::Error)]
pub enum UndoError {
    /// No maintenance action with that operation id in the session's journal.
    #[error("no maintenance action {op:?} in session {session}")]
    UnknownAction {
        /// The operation id asked for.
        op: String,
        /// The session.
        session: String,
    },
    /// The action is not a summary, prune or deep rest, or it appended no replace node.
    #[error("action {op} ({action}) replaced nothing that could be restored")]
    NothingToUndo {
        /// The operation id.
        op: String,
        /// Its action.
        action: String,
    },
    /// The action was undone already (by the `compaction/undo` at `seq`).
    #[error("action {op} was already undone (seq {seq})")]
    AlreadyUndone {
        /// The operation id.
        op: String,
        /// The seq of the undo event.
        seq: u64,
    },
    /// A later replace is live (only the latest compaction can be undone), or the
    /// action's nodes are no longer on the surface.
    #[error("action {op} is not the latest undoable compaction: {why}; undo the later one first")]
    NotLatest {
        /// The operation id.
        op: String,
        /// What is in the way.
        why: String,
    },
    /// A turn (or a compaction) is running in the session.
    #[error("session {0} is busy: a turn or a compaction is running; undo between turns")]
    Busy(String),
    /// The restored request would exceed the soft threshold `S`.
    #[error(
        "undoing {op} would bring the next request to {restored_input} tokens, over the soft threshold {soft_input}; history stays compacted"
    )]
    OverSoftThreshold {
        /// The operation id.
        op: String,
        /// `Q` after the undo (frozen basis).
        restored_input: u64,
        /// `S`.
        soft_input: i64,
    },
    /// The route's capacity is unknown, so `Q ≤ S` cannot be shown.
    #[error(
        "the route's context capacity is unknown, so the restored request cannot be checked against the soft threshold"
    )]
    BudgetUnknown,
    /// Pricing or the journal failed.
    #[error(transparent)]
    Care(#[from] CareError),
    /// The undo could not be appended or made durable.
    #[error("the undo could not be written: {0}")]
    Write(String),
}

impl UndoError {
    /// The stable code.
    pub fn code(&self) -> &'static str {
        match self {
            UndoError::UnknownAction { .. } => "UNKNOWN_ACTION",
            UndoError::NothingToUndo { .. } => "NOTHING_TO_UNDO",
            UndoError::AlreadyUndone { .. } => "ALREADY_UNDONE",
            UndoError::NotLatest { .. } => "UNDO_NOT_LATEST",
            UndoError::Busy(_) => "SESSION_BUSY",
            UndoError::OverSoftThreshold { .. } => "UNDO_OVER_SOFT_THRESHOLD",
            UndoError::BudgetUnknown => "UNDO_BUDGET_UNKNOWN",
            UndoError::Care(_) => "CONTEXT_CARE_FAILED",
            UndoError::Write(_) => "UNDO_WRITE_FAILED",
        }
    }

    /// Whether it is a refusal (nothing was wrong but the request): the caller's
    /// exit 2 / HTTP 409 (404 for an unknown action), against a failure.
    pub fn is_refusal(&self) -> bool {
        !matches!(self, UndoError::Care(_) | UndoError::Write(_))
    }
}

/// What a committed undo did.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct UndoOutcome {
    /// The undo's own maintenance record (`action: undo`).
    pub operation_id: String,
    /// The action undone.
    pub undoes: String,
    /// The replace nodes taken off the surface.
    pub restored_seqs: Vec<u64>,
    /// The nodes live again.
    pub revived_seqs: Vec<u64>,
    /// The `compaction/undo` events appended.
    pub undo_seqs: Vec<u64>,
    /// The next request's input before the undo (tokens, frozen basis).
    pub before_input: u64,
    /// The next request's input after the undo (tokens, frozen basis).
    pub after_input: u64,
    /// The soft threshold `S` it was checked against.
    pub soft_input: i64,
}

impl UndoOutcome {
    /// One line for people.
    pub fn line(&self) -> String {
        format!(
            "undid {}: {} event(s) live again, input {} → {} (soft threshold {}); undo record {}",
            self.undoes,
            self.revived_seqs.len(),
            self.before_input,
            self.after_input,
            self.soft_input,
            self.operation_id
        )
    }
}

/// The seq of the `compaction/undo` that undid `op`, if any.
fn undone_at(session: &Session, op: &str) -> Option<u64> {
    session.with_log(|log| {
        log.events()
            .iter()
            .filter(|event| event.kind() == kinds::COMPACTION_UNDO)
            .find(|event| {
                event
                    .decode::<CompactionUndo>()
                    .is_ok_and(|undo| undo.operation_id == op)
            })
            .map(|event| event.seq())
    })
}

impl Care {
    /// Undoes maintenance action `op` of `session` (see the module doc).
    pub(crate) async fn undo(&self, session: &Session, op: &str) -> Result<UndoOutcome, UndoError> {
        self.ensure_session(session).await?;
        let queue = self.with_session(session.id(), |state| Arc::clone(&state.queue));
        let _queue = queue.lock_owned().await;
        let records = self.actions(session).await?;
        let record = find(&records, op).ok_or_else(|| UndoError::UnknownAction {
            op: op.to_owned(),
            session: session.id().to_string(),
        })?;
        if let Some(seq) = undone_at(session, op) {
            return Err(UndoError::AlreadyUndone {
                op: op.to_owned(),
                seq,
            });
        }
        let view = record.view();
        let action = view.action.unwrap_or("-").to_owned();
        let mut targets: Vec<u64> = view
            .replacements
            .iter()
            .filter_map(|replacement| replacement.new_seq)
            .collect();
        if !UNDOABLE.contains(&action.as_str()) || targets.is_empty() {
            return Err(UndoError::NothingToUndo {
                op: op.to_owned(),
                action,
            });
        }
        // Newest first: each restore finds its node where the later ones left it.
        targets.sort_unstable_by(|a, b| b.cmp(a));
        targets.dedup();
        let (busy, latest, blocked, after) = session.with_log(|log| {
            let busy = log.state().open_turn.is_some() || log.state().open_compaction.is_some();
            let latest = log
                .surface()
                .iter()
                .map(|node| node.seq)
                .filter(|seq| log.is_restorable(*seq))
                .max();
            let blocked = targets.iter().copied().find(|seq| !log.is_restorable(*seq));
            (busy, latest, blocked, log.messages_after_restore(&targets))
        });
        if busy {
            return Err(UndoError::Busy(session.id().to_string()));
        }
        let not_latest = |why: String| UndoError::NotLatest {
            op: op.to_owned(),
            why,
        };
        if let Some(seq) = blocked {
            return Err(not_latest(format!(
                "its replace node {seq} is no longer on the surface"
            )));
        }
        if let Some(latest) = latest
            && !targets.contains(&latest)
        {
            return Err(not_latest(format!("the replace node {latest} is later")));
        }
        let Some(after) = after else {
            return Err(not_latest("its nodes cannot be restored".to_owned()));
        };
        let frozen = self.freeze(session.id()).await?;
        let before = self.measure_view(&frozen, &session.derived_view(), std::iter::empty())?;
        let restored = self.measure(
            &frozen,
            after.iter().map(|derived| &*derived.message),
            std::iter::empty(),
        )?;
        let Some(budget) = restored.budget else {
            return Err(UndoError::BudgetUnknown);
        };
        let restored_input = restored.load;
        if i64::try_from(restored_input).unwrap_or(i64::MAX) > budget.soft_input {
            return Err(UndoError::OverSoftThreshold {
                op: op.to_owned(),
                restored_input,
                soft_input: budget.soft_input,
            });
        }
        let before_seq = session.head();
        let before_generation = session.with_log(|log| log.replace_generation());
        let revived: Vec<u64> = session.with_log(|log| {
            let mut revived: Vec<u64> = targets
                .iter()
                .flat_map(|seq| log.shadowed_by(*seq))
                .collect();
            revived.sort_unstable();
            revived
        });
        let mut undo_seqs = Vec::with_capacity(targets.len());
        for &replace_seq in &targets {
            let draft = EventDraft::typed(&CompactionUndo {
                operation_id: op.to_owned(),
                replace_seq,
            })
            .map_err(|error| UndoError::Write(error.to_string()))?
            .with_surface(SurfaceOp::Restore { replace_seq })
            .with_sources(vec![replace_seq]);
            let event = session
                .append(draft)
                .map_err(|error| UndoError::Write(error.to_string()))?;
            undo_seqs.push(event.seq());
        }
        session
            .flush()
            .await
            .map_err(|error| UndoError::Write(error.to_string()))?;
        let operation_id = uuid::Uuid::now_v7().to_string();
        let data = json!({
            "operationId": operation_id,
            "action": "undo",
            "reason": "requested",
            "phase": "completed",
            "outcome": "committed",
            "undoes": op,
            "beforeSeq": before_seq,
            "beforeInput": before.load,
            "afterSeq": session.head(),
            "afterInput": restored_input,
            "softInput": budget.soft_input,
            "beforeGeneration": before_generation,
            "afterGeneration": session.with_log(|log| log.replace_generation()),
            "restoredSeqs": targets,
            "revivedSeqs": revived,
            "undoSeqs": undo_seqs,
            "replacements": [],
        });
        self.journal
            .maintenance(session.id(), &operation_id, SystemClock.now_ms(), data)
            .await
            .map_err(CareError::from)?;
        self.journal.flush().await.map_err(CareError::from)?;
        Ok(UndoOutcome {
            operation_id,
            undoes: op.to_owned(),
            restored_seqs: targets,
            revived_seqs: revived,
            undo_seqs,
            before_input: before.load,
            after_input: restored_input,
            soft_input: budget.soft_input,
        })
    }
}

/// The record of `op` among `records`.
pub(crate) fn find<'r>(records: &'r [ActionRecord], op: &str) -> Option<&'r ActionRecord> {
    records.iter().find(|record| record.operation_id() == op)
}
