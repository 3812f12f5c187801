//! Maintenance at the boundary (CC-MNT-1, CC-MNT-5, CC-MNT-6, CC-DEEP-2, CC-BND-2,
//! CC-DEF-2): tool-result pruning, the automatic summary passes while the session's
//! controller is armed, a requested rest (summary or deep), the no-useful-range memo,
//! and the maintenance records of the journal (CC-JNL-3).
//!
//! Errors of automatic maintenance never fail the user's turn: they are logged and
//! journaled, the history keeps what was committed, and the request gate and overflow
//! recovery remain the safety nets (CC-DEF-2).
//!
//! The parts: `plan` is the pure planner (what an action does, from plain inputs: no
//! I/O, no session writes); one executor per action follows its plan and writes the
//! events: `prune` (CC-MNT-1), `passes` (one journaled summary, and the automatic
//! passes, CC-MNT-6), `rest` (a requested rest, CC-BND-2) and `deep` (the deep rest,
//! CC-DEEP-2); `queue` holds what they share (the session's queue, CC-SER-1, and the
//! memo, CC-MNT-5) and `records` the journal records they write (CC-JNL-3).

use ccare_core::Message;
use ccare_llm::CancellationToken;
use ccare_session::Session;

use crate::budget::Budget;

mod deep;
mod passes;
mod plan;
mod prune;
mod queue;
mod records;
mod rest;

pub use plan::{PRUNE_ABOVE_CHARS, PRUNE_KEEP_HEAD, PRUNE_KEEP_TAIL, prune_text, pruned_result};
pub use records::JOURNALED_COMPARISONS;

/// What a requested rest came to (CC-BND-2).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RestOutcome {
    /// R1: the history was already reduced at this boundary.
    AlreadyReduced,
    /// R2: a deep rest with nothing clearable beyond the system head.
    DeepNothingToClear,
    /// R3: the deep rest replaced the clearable history.
    DeepDone,
    /// R4: no summary provider.
    NoProvider,
    /// R5: no range worth summarizing outside the retained recent part.
    NoProposal,
    /// R6: the selection was already found not reducible.
    MemoHit,
    /// R7: earlier history was summarized.
    Committed,
    /// R8: the requested path failed.
    Error,
}

/// The band automatic maintenance ended in (CC-BND-2 "Auto", CC-DEF-3).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AutoBand {
    /// Below the release target `L`.
    WithinTarget,
    /// At or above `L`, within `H`.
    AboveTarget,
    /// Above `H`.
    AboveHard,
}

impl AutoBand {
    /// The band of a load against a budget.
    pub fn of(load: u64, budget: &Budget) -> Self {
        let load = i64::try_from(load).unwrap_or(i64::MAX);
        if load < budget.release_target {
            AutoBand::WithinTarget
        } else if load <= budget.hard_input {
            AutoBand::AboveTarget
        } else {
            AutoBand::AboveHard
        }
    }
}

/// What the caller of a maintenance action provides.
pub(crate) struct Context<'a> {
    pub(crate) session: &'a Session,
    /// The pending batch and request-only messages of the conversation request.
    pub(crate) batch: &'a [Message],
    pub(crate) turn: Option<u32>,
    pub(crate) cancel: CancellationToken,
    pub(crate) now_ms: i64,
}

#[cfg(test)]
mod tests;
