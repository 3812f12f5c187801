//! The turn, step, tool-call and compaction state of a log, folded event by event.
//!
//! Validators read it to check nesting and pairing (H-VAL-4); crash repair reads it to
//! know what to close (H-SESS-5). The fold never fails: it tolerates the odd shapes an
//! audited-but-not-strict log may have.

use crate::decode::Decoded;

/// A tool call of the latest assistant message in the open step.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PendingCall {
    /// The tool-call block id.
    pub id: String,
    /// The tool name.
    pub name: String,
    /// Whether its `tool/call` dispatch marker was written.
    pub dispatched: bool,
    /// Whether a `tool/result` answered it.
    pub answered: bool,
    /// Whether its marker hands it to the caller (`executor: "caller"`, ACT-3).
    pub caller: bool,
}

/// The open structure of a log at its head.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LogState {
    /// The first seq written by this session itself (after a fork's seed), H-SESS-3.
    pub first_live_seq: u64,
    /// The highest turn number started.
    pub last_turn: u32,
    /// The open turn, if any.
    pub open_turn: Option<u32>,
    /// The seq of the open turn's `turn/start` (where its events begin).
    pub open_turn_seq: Option<u64>,
    /// The highest step number started in the current turn.
    pub last_step: u32,
    /// The open step `(turn, step)`, if any.
    pub open_step: Option<(u32, u32)>,
    /// The calls of the latest assistant message in the open step.
    pub calls: Vec<PendingCall>,
    /// The open compaction after `first_live_seq`, if any.
    pub open_compaction: Option<String>,
}

impl LogState {
    /// Calls not yet answered.
    pub fn unanswered_calls(&self) -> impl Iterator<Item = &PendingCall> {
        self.calls.iter().filter(|call| !call.answered)
    }

    /// The ids of the calls the open step awaits from the caller (ACT-3): non-empty only
    /// when every unanswered call of the step was handed to the caller, the durable
    /// awaiting-tools state that repair, validators and reload leave alone.
    pub fn awaiting_calls(&self) -> Vec<String> {
        if self.open_step.is_none() {
            return Vec::new();
        }
        let mut open = self.unanswered_calls().peekable();
        if open.peek().is_none() {
            return Vec::new();
        }
        let mut ids = Vec::new();
        for call in open {
            if !(call.dispatched && call.caller) {
                return Vec::new();
            }
            ids.push(call.id.clone());
        }
        ids
    }

    /// Folds one event at `seq`.
    pub(crate) fn apply(&mut self, seq: u64, decoded: &Decoded) {
        match decoded {
            Decoded::TurnStart(start) => {
                self.last_turn = self.last_turn.max(start.turn);
                self.open_turn = Some(start.turn);
                self.open_turn_seq = Some(seq);
                self.last_step = 0;
                self.open_step = None;
                self.calls.clear();
            }
            Decoded::TurnEnd(_) => {
                self.open_turn = None;
                self.open_turn_seq = None;
                self.open_step = None;
                self.calls.clear();
            }
            Decoded::StepStart(start) => {
                self.last_step = self.last_step.max(start.step);
                self.open_step = Some((start.turn, start.step));
                self.calls.clear();
            }
            Decoded::StepEnd(_) => {
                self.open_step = None;
                self.calls.clear();
            }
            Decoded::AssistantMessage { message, .. } => {
                self.calls = message
                    .tool_calls()
                    .map(|call| PendingCall {
                        id: call.id.clone(),
                        name: call.name.clone(),
                        dispatched: false,
                        answered: false,
                        caller: false,
                    })
                    .collect();
            }
            Decoded::ToolCall(marker) => {
                if let Some(call) = self.calls.iter_mut().find(|call| call.id == marker.call_id) {
                    call.dispatched = true;
                    call.caller = marker.executor == Some(ccare_core::kinds::Executor::Caller);
                }
            }
            Decoded::ToolResult { call_id, .. } => {
                if let Some(call) = self.calls.iter_mut().find(|call| &call.id == call_id) {
                    call.answered = true;
                }
            }
            Decoded::CompactionStart(start) => {
                if seq >= self.first_live_seq {
                    self.open_compaction = Some(start.compaction_id.clone());
                }
            }
            Decoded::CompactionEnd(end) => {
                if self.open_compaction.as_deref() == Some(end.compaction_id.as_str()) {
                    self.open_compaction = None;
                }
            }
            Decoded::EndSeed => {
                self.first_live_seq = seq;
                self.open_compaction = None;
            }
            Decoded::UserMessage(_)
            | Decoded::AssistantAttempt { .. }
            | Decoded::CompactionSummary { .. }
            | Decoded::Other => {}
        }
    }
}
