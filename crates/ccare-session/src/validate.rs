//! Pre-commit validators (spec H-VAL) and the host's built-in ones (H-VAL-4).
//!
//! A validator sees the whole prefix and the candidate with its final seq and time. It
//! does no I/O and never appends; its first veto refuses the append (no seq consumed).

use std::sync::Arc;

use crate::decode::Decoded;
use crate::log::{Candidate, SessionLog};

/// A validator's refusal.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Veto {
    /// Why, naming the rule.
    pub message: String,
}

impl Veto {
    /// A veto with `message`.
    pub fn new(message: impl Into<String>) -> Self {
        Self {
            message: message.into(),
        }
    }
}

/// A synchronous pre-commit check (H-VAL-1).
pub trait Validator: Send + Sync + 'static {
    /// A stable name, used in `VETOED{validator}` and in `validators.allow/deny`.
    fn name(&self) -> &str;

    /// Checks `candidate` against the prefix `log`.
    fn check(&self, log: &SessionLog, candidate: &Candidate) -> Result<(), Veto>;
}

/// Runs one validator; a panic counts as a veto (H-VAL-2). The one place appends and
/// load audits call validators through.
pub(crate) fn run_check(
    validator: &dyn Validator,
    log: &SessionLog,
    candidate: &Candidate,
) -> Result<(), Veto> {
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        validator.check(log, candidate)
    }))
    .unwrap_or_else(|_| Err(Veto::new("the validator panicked")))
}

/// The built-in validators, in the order they run.
pub fn builtin_validators() -> Vec<Arc<dyn Validator>> {
    vec![
        Arc::new(TurnStepNesting),
        Arc::new(ToolPairing),
        Arc::new(SingleOpenCompaction),
    ]
}

/// Turns and steps nest and count up from 1: `turn/start` only when no turn is open,
/// `step/start` only inside the open turn, model output only inside the open step, and
/// a turn closes only after its step.
#[derive(Debug, Clone, Copy, Default)]
pub struct TurnStepNesting;

impl Validator for TurnStepNesting {
    fn name(&self) -> &str {
        "turn-step-nesting"
    }

    fn check(&self, log: &SessionLog, candidate: &Candidate) -> Result<(), Veto> {
        let state = log.state();
        let in_step = |turn: u32, step: u32, what: &str| match state.open_step {
            Some(open) if open == (turn, step) => Ok(()),
            Some((open_turn, open_step)) => Err(Veto::new(format!(
                "{what} names turn {turn} step {step}, but the open step is turn {open_turn} step {open_step}"
            ))),
            None => Err(Veto::new(format!("{what} outside an open step"))),
        };
        match candidate.decoded() {
            Decoded::TurnStart(start) => {
                if let Some(open) = state.open_turn {
                    return Err(Veto::new(format!(
                        "turn {} starts while turn {open} is open",
                        start.turn
                    )));
                }
                if start.turn != state.last_turn + 1 {
                    return Err(Veto::new(format!(
                        "turn {} does not follow turn {}",
                        start.turn, state.last_turn
                    )));
                }
                Ok(())
            }
            Decoded::TurnEnd(end) => {
                if state.open_turn != Some(end.turn) {
                    return Err(Veto::new(format!(
                        "turn/end for turn {}, which is not open",
                        end.turn
                    )));
                }
                if let Some((_, step)) = state.open_step {
                    return Err(Veto::new(format!(
                        "turn {} ends while step {step} is open",
                        end.turn
                    )));
                }
                Ok(())
            }
            Decoded::StepStart(start) => {
                if state.open_turn != Some(start.turn) {
                    return Err(Veto::new(format!(
                        "step/start names turn {}, which is not open",
                        start.turn
                    )));
                }
                if let Some((_, step)) = state.open_step {
                    return Err(Veto::new(format!(
                        "step {} starts while step {step} is open",
                        start.step
                    )));
                }
                if start.step != state.last_step + 1 {
                    return Err(Veto::new(format!(
                        "step {} does not follow step {}",
                        start.step, state.last_step
                    )));
                }
                Ok(())
            }
            Decoded::StepEnd(end) => in_step(end.turn, end.step, "step/end"),
            Decoded::AssistantMessage { turn, step, .. } => {
                in_step(*turn, *step, "assistant/message")
            }
            Decoded::AssistantAttempt { turn, step } => in_step(*turn, *step, "assistant/attempt"),
            Decoded::ToolCall(marker) => in_step(marker.turn, marker.step, "tool/call"),
            Decoded::ToolResult { turn, step, .. } => {
                if candidate
                    .event()
                    .surface()
                    .is_some_and(|op| op != ccare_core::SurfaceOp::Append)
                {
                    // A replacing result (pruning) rewrites history; it is not part of a step.
                    return Ok(());
                }
                in_step(*turn, *step, "tool/result")
            }
            Decoded::UserMessage(_)
            | Decoded::CompactionStart(_)
            | Decoded::CompactionSummary { .. }
            | Decoded::CompactionEnd(_)
            | Decoded::EndSeed
            | Decoded::Other => Ok(()),
        }
    }
}

/// Tool calls pair with results: a dispatch marker names an unanswered call of the
/// latest assistant message and comes at most once, and a step ends only when every
/// call has its result.
#[derive(Debug, Clone, Copy, Default)]
pub struct ToolPairing;

impl Validator for ToolPairing {
    fn name(&self) -> &str {
        "tool-pairing"
    }

    fn check(&self, log: &SessionLog, candidate: &Candidate) -> Result<(), Veto> {
        let state = log.state();
        match candidate.decoded() {
            Decoded::ToolCall(marker) => {
                match state.calls.iter().find(|call| call.id == marker.call_id) {
                    None => Err(Veto::new(format!(
                        "tool/call '{}' names no call of the latest assistant message",
                        marker.call_id
                    ))),
                    Some(call) if call.dispatched => Err(Veto::new(format!(
                        "tool/call '{}' was already dispatched",
                        marker.call_id
                    ))),
                    Some(call) if call.answered => Err(Veto::new(format!(
                        "tool/call '{}' was already answered",
                        marker.call_id
                    ))),
                    Some(_) => Ok(()),
                }
            }
            Decoded::StepEnd(end) => match state.unanswered_calls().next() {
                Some(call) => Err(Veto::new(format!(
                    "step {} ends with call '{}' unanswered",
                    end.step, call.id
                ))),
                None => Ok(()),
            },
            Decoded::AssistantMessage { .. } => match state.unanswered_calls().next() {
                Some(call) => Err(Veto::new(format!(
                    "a new assistant message while call '{}' is unanswered",
                    call.id
                ))),
                None => Ok(()),
            },
            Decoded::TurnStart(_)
            | Decoded::TurnEnd(_)
            | Decoded::StepStart(_)
            | Decoded::UserMessage(_)
            | Decoded::AssistantAttempt { .. }
            | Decoded::ToolResult { .. }
            | Decoded::CompactionStart(_)
            | Decoded::CompactionSummary { .. }
            | Decoded::CompactionEnd(_)
            | Decoded::EndSeed
            | Decoded::Other => Ok(()),
        }
    }
}

/// At most one `compaction/start` is open after `first_live_seq`, and summaries and ends
/// name the open one.
#[derive(Debug, Clone, Copy, Default)]
pub struct SingleOpenCompaction;

impl Validator for SingleOpenCompaction {
    fn name(&self) -> &str {
        "single-open-compaction"
    }

    fn check(&self, log: &SessionLog, candidate: &Candidate) -> Result<(), Veto> {
        let open = log.state().open_compaction.as_deref();
        match candidate.decoded() {
            Decoded::CompactionStart(start) => match open {
                Some(open) => Err(Veto::new(format!(
                    "compaction {} starts while compaction {open} is open",
                    start.compaction_id
                ))),
                None => Ok(()),
            },
            Decoded::CompactionSummary { compaction_id } => {
                if open != Some(compaction_id.as_str()) {
                    return Err(Veto::new(format!(
                        "compaction/summary for {compaction_id}, which is not open"
                    )));
                }
                Ok(())
            }
            Decoded::CompactionEnd(end) => {
                if open != Some(end.compaction_id.as_str()) {
                    return Err(Veto::new(format!(
                        "compaction/end for {}, which is not open",
                        end.compaction_id
                    )));
                }
                Ok(())
            }
            Decoded::TurnStart(_)
            | Decoded::TurnEnd(_)
            | Decoded::StepStart(_)
            | Decoded::StepEnd(_)
            | Decoded::UserMessage(_)
            | Decoded::AssistantMessage { .. }
            | Decoded::AssistantAttempt { .. }
            | Decoded::ToolCall(_)
            | Decoded::ToolResult { .. }
            | Decoded::EndSeed
            | Decoded::Other => Ok(()),
        }
    }
}
