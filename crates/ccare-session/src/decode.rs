//! Typed decoding of the host's event payloads, done once per event.
//!
//! Every consumer inside the engine (surface rules, the log state, validators, the
//! derived view) reads this enum instead of poking at JSON.

use std::sync::Arc;

use ccare_core::kinds::{
    self, AssistantAttempt, CompactionEnd, CompactionStart, CompactionSummary, SessionEndSeed,
    StepEnd, StepStart, ToolCall, ToolResult, TurnEnd, TurnStart,
};
use ccare_core::{Event, EventData, EventError, Message, Role};
use serde::Deserialize;

/// The parts of a host event the engine reads.
#[derive(Debug, Clone)]
pub enum Decoded {
    /// `turn/start`.
    TurnStart(TurnStart),
    /// `turn/end`.
    TurnEnd(TurnEnd),
    /// `step/start`.
    StepStart(StepStart),
    /// `step/end`.
    StepEnd(StepEnd),
    /// `user/message`.
    UserMessage(Arc<Message>),
    /// `assistant/message` (only the fields the engine needs).
    AssistantMessage {
        /// The turn number.
        turn: u32,
        /// The step number.
        step: u32,
        /// The message.
        message: Arc<Message>,
    },
    /// `assistant/attempt`.
    AssistantAttempt {
        /// The turn number.
        turn: u32,
        /// The step number.
        step: u32,
    },
    /// `tool/call`.
    ToolCall(ToolCall),
    /// `tool/result`.
    ToolResult {
        /// The turn number.
        turn: u32,
        /// The step number.
        step: u32,
        /// The call it answers.
        call_id: String,
        /// The message holding the result block.
        message: Arc<Message>,
    },
    /// `compaction/start`.
    CompactionStart(CompactionStart),
    /// `compaction/summary` (its id only).
    CompactionSummary {
        /// The transaction id.
        compaction_id: String,
    },
    /// `compaction/end`.
    CompactionEnd(CompactionEnd),
    /// `session/end-seed`.
    EndSeed,
    /// Any other type: opaque to the engine.
    Other,
}

#[derive(Deserialize)]
struct AssistantHead {
    turn: u32,
    step: u32,
    message: Message,
}

fn typed<T: EventData>(event: &Event) -> Result<T, EventError> {
    event.decode::<T>()
}

fn shaped<T: serde::de::DeserializeOwned>(event: &Event) -> Result<T, EventError> {
    serde_json::from_str(event.data_json()).map_err(|error| EventError::Decode {
        seq: event.seq(),
        kind: event.kind().to_owned(),
        message: error.to_string(),
    })
}

/// A decoded message without spare capacity: the log keeps it as long as it is open.
fn compact(mut message: Message) -> Message {
    message.shrink_to_fit();
    message
}

/// Decodes a host event; other types decode to [`Decoded::Other`].
pub fn decode(event: &Event) -> Result<Decoded, EventError> {
    let decoded = match event.kind() {
        kinds::TURN_START => Decoded::TurnStart(typed(event)?),
        kinds::TURN_END => Decoded::TurnEnd(typed(event)?),
        kinds::STEP_START => Decoded::StepStart(typed(event)?),
        kinds::STEP_END => Decoded::StepEnd(typed(event)?),
        kinds::USER_MESSAGE => Decoded::UserMessage(Arc::new(compact(
            typed::<kinds::UserMessage>(event)?.message,
        ))),
        kinds::ASSISTANT_MESSAGE => {
            let head: AssistantHead = shaped(event)?;
            Decoded::AssistantMessage {
                turn: head.turn,
                step: head.step,
                message: Arc::new(compact(head.message)),
            }
        }
        kinds::ASSISTANT_ATTEMPT => {
            let attempt: AssistantAttempt = typed(event)?;
            Decoded::AssistantAttempt {
                turn: attempt.turn,
                step: attempt.step,
            }
        }
        kinds::TOOL_CALL => Decoded::ToolCall(typed(event)?),
        kinds::TOOL_RESULT => {
            let result: ToolResult = typed(event)?;
            let call_id =
                result
                    .call_id()
                    .map(str::to_owned)
                    .ok_or_else(|| EventError::Decode {
                        seq: event.seq(),
                        kind: event.kind().to_owned(),
                        message: "message has no tool-result block".to_owned(),
                    })?;
            Decoded::ToolResult {
                turn: result.turn,
                step: result.step,
                call_id,
                message: Arc::new(compact(result.message)),
            }
        }
        kinds::COMPACTION_START => Decoded::CompactionStart(typed(event)?),
        kinds::COMPACTION_SUMMARY => Decoded::CompactionSummary {
            compaction_id: typed::<CompactionSummary>(event)?.compaction_id,
        },
        kinds::COMPACTION_END => Decoded::CompactionEnd(typed(event)?),
        kinds::SESSION_END_SEED => {
            typed::<SessionEndSeed>(event)?;
            Decoded::EndSeed
        }
        _ => Decoded::Other,
    };
    Ok(decoded)
}

impl Decoded {
    /// The model message this event derives to (H-SURF-3), if any.
    pub fn derived_message(&self) -> Option<(Role, &Arc<Message>)> {
        match self {
            Decoded::UserMessage(message) => Some((Role::User, message)),
            Decoded::AssistantMessage { message, .. } => {
                (!message.is_empty()).then_some((Role::Assistant, message))
            }
            Decoded::ToolResult { message, .. } => Some((Role::User, message)),
            Decoded::TurnStart(_)
            | Decoded::TurnEnd(_)
            | Decoded::StepStart(_)
            | Decoded::StepEnd(_)
            | Decoded::AssistantAttempt { .. }
            | Decoded::ToolCall(_)
            | Decoded::CompactionStart(_)
            | Decoded::CompactionSummary { .. }
            | Decoded::CompactionEnd(_)
            | Decoded::EndSeed
            | Decoded::Other => None,
        }
    }
}
