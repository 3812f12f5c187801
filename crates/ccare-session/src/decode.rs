//! Typed decoding of the host's event payloads, done once per event.
//!
//! Every consumer inside the engine (surface rules, the log state, validators, the
//! derived view) reads this enum instead of poking at JSON.

use std::sync::Arc;

use ccare_core::kinds::ToolError;
use ccare_core::kinds::{
    self, AssistantAttempt, CompactionEnd, CompactionStart, CompactionSummary, SessionEndSeed,
    StepEnd, StepStart, ToolCall, ToolResult, TurnEnd, TurnStart,
};
use ccare_core::{Event, EventData, EventError, JsonObject, Message, Role};
use serde::Deserialize;
use serde::de::DeserializeOwned;
use serde_json::Value;

use crate::one_pass::OnePassMessage;

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

// One-pass twins of the payloads that carry a message (issue 14): the same fields with
// the same types, the message read by `OnePassMessage`. When a twin declines, the
// payload is decoded again by the type above, whose result or error is the answer.

#[derive(Deserialize)]
struct UserMessageOnePass {
    message: OnePassMessage,
}

#[derive(Deserialize)]
struct AssistantHeadOnePass {
    turn: u32,
    step: u32,
    message: OnePassMessage,
}

#[derive(Deserialize)]
struct ToolResultOnePass {
    turn: u32,
    step: u32,
    message: OnePassMessage,
    #[serde(default)]
    error: Option<ToolError>,
    #[serde(default)]
    meta: Option<Value>,
    #[serde(default)]
    repair: bool,
}

/// `data` read by the one-pass twin `F`, else by `exact` (whose result or error counts).
fn one_pass<F: DeserializeOwned, T>(
    event: &Event,
    lift: impl FnOnce(F) -> T,
    exact: impl FnOnce(&Event) -> Result<T, EventError>,
) -> Result<T, EventError> {
    match serde_json::from_str::<F>(event.data_json()) {
        Ok(twin) => Ok(lift(twin)),
        Err(_) => exact(event),
    }
}

/// Decodes the payload of a message-bearing event from the object it was just encoded
/// from (its strings moved, not parsed again), in one pass. `None` when the kind carries
/// no message or a twin declines: then [`decode`] reads the event's text, and its result
/// or error is the answer. The text is the object's serialisation, so a one-pass decode
/// of either is the same value.
pub(crate) fn decode_object(kind: &str, data: JsonObject) -> Option<Decoded> {
    let data = Value::Object(data);
    let decoded = match kind {
        kinds::USER_MESSAGE => {
            let twin: UserMessageOnePass = serde_json::from_value(data).ok()?;
            Decoded::UserMessage(Arc::new(compact(twin.message.0)))
        }
        kinds::ASSISTANT_MESSAGE => {
            let twin: AssistantHeadOnePass = serde_json::from_value(data).ok()?;
            Decoded::AssistantMessage {
                turn: twin.turn,
                step: twin.step,
                message: Arc::new(compact(twin.message.0)),
            }
        }
        kinds::TOOL_RESULT => {
            let twin: ToolResultOnePass = serde_json::from_value(data).ok()?;
            let result = ToolResult {
                turn: twin.turn,
                step: twin.step,
                message: twin.message.0,
                error: twin.error,
                meta: twin.meta,
                repair: twin.repair,
            };
            let call_id = result.call_id().map(str::to_owned)?;
            Decoded::ToolResult {
                turn: result.turn,
                step: result.step,
                call_id,
                message: Arc::new(compact(result.message)),
            }
        }
        _ => return None,
    };
    Some(decoded)
}

fn typed<T: EventData>(event: &Event) -> Result<T, EventError> {
    event.decode::<T>()
}

fn shaped<T: DeserializeOwned>(event: &Event) -> Result<T, EventError> {
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
        kinds::USER_MESSAGE => {
            let message = one_pass(
                event,
                |twin: UserMessageOnePass| twin.message.0,
                |event| typed::<kinds::UserMessage>(event).map(|user| user.message),
            )?;
            Decoded::UserMessage(Arc::new(compact(message)))
        }
        kinds::ASSISTANT_MESSAGE => {
            let head = one_pass(
                event,
                |twin: AssistantHeadOnePass| AssistantHead {
                    turn: twin.turn,
                    step: twin.step,
                    message: twin.message.0,
                },
                shaped::<AssistantHead>,
            )?;
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
            let result = one_pass(
                event,
                |twin: ToolResultOnePass| ToolResult {
                    turn: twin.turn,
                    step: twin.step,
                    message: twin.message.0,
                    error: twin.error,
                    meta: twin.meta,
                    repair: twin.repair,
                },
                typed::<ToolResult>,
            )?;
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
