//! Following one gateway turn in its session's ordered stream (ACT-4) and turning it
//! into what an OpenAI client is answered: the text and reasoning pieces as they
//! stream, then the outcome (the whole answer, the upstream's usage summed over the
//! turn's requests, why it ended).
//!
//! The follower runs as its own task holding the session's actor, so a client that
//! disconnects mid-answer neither stops the turn nor loses the client view: when the
//! turn ends well, the view is recorded with the answer appended.

use ccare_agent::{EventStream, StreamItem};
use ccare_app::AgentHandle;
use ccare_core::kinds::{AssistantMessage, TurnEnd, TurnEndReason, TurnFailure};
use ccare_core::{ContentBlock, LlmFailure, TokenUsage};
use ccare_llm::Chunk;
use tokio::sync::mpsc;

use crate::gateway::view::{ClientView, Views, next_hash};

/// What the follower reports, in order: pieces, then one [`Item::End`].
#[derive(Debug, Clone)]
pub(crate) enum Item {
    /// A piece of the answer's text.
    Text {
        /// The provider call it streamed from.
        call_id: String,
        /// The piece.
        text: String,
    },
    /// A piece of the model's reasoning.
    Reasoning {
        /// The provider call it streamed from.
        call_id: String,
        /// The piece.
        text: String,
    },
    /// The turn ended.
    End(Outcome),
}

/// How the turn ended.
#[derive(Debug, Clone, Default)]
pub(crate) struct Outcome {
    /// The first provider call of the turn (the answer's id).
    pub(crate) call_id: Option<String>,
    /// The whole answer's text.
    pub(crate) text: String,
    /// The whole reasoning.
    pub(crate) reasoning: String,
    /// The upstream's usage, summed; `None` when no request reported any.
    pub(crate) usage: Option<TokenUsage>,
    /// `stop` or `length`.
    pub(crate) finish: String,
    /// Why the turn failed, when it did.
    pub(crate) failure: Option<Failure>,
}

/// Why a turn gave no answer.
#[derive(Debug, Clone)]
pub(crate) enum Failure {
    /// A provider call failed or a request gate refused it.
    Llm(LlmFailure),
    /// The host ended the turn: `status`, our `code`, a message.
    Host {
        /// The HTTP status to answer.
        status: u16,
        /// Our stable code.
        code: String,
        /// What happened.
        message: String,
    },
}

/// What the follower needs to record the client view once the turn ended well.
#[derive(Debug)]
pub(crate) struct Recording {
    /// The rows.
    pub(crate) views: Views,
    /// The chain hashes of the request's messages.
    pub(crate) hashes: Vec<String>,
}

/// Follows the turn that the command sent after `stream` was opened starts, sending
/// its items to `items`, then records the client view.
pub(crate) async fn follow(
    handle: AgentHandle,
    mut stream: EventStream,
    items: mpsc::UnboundedSender<Item>,
    recording: Recording,
) {
    let mut outcome = Outcome {
        finish: "stop".to_owned(),
        ..Outcome::default()
    };
    let mut streamed: Vec<String> = Vec::new();
    loop {
        let Some(item) = stream.next().await else {
            outcome.failure = Some(host_failure(
                500,
                "TURN_LOST",
                "the session's stream ended before the turn did",
            ));
            break;
        };
        match item {
            StreamItem::Delta { live, .. } => {
                let piece = match live.chunk {
                    Chunk::TextDelta { text, .. } => Item::Text {
                        call_id: live.call_id.clone(),
                        text,
                    },
                    Chunk::ReasoningDelta { text, .. } => Item::Reasoning {
                        call_id: live.call_id.clone(),
                        text,
                    },
                    _ => continue,
                };
                if !streamed.contains(&live.call_id) {
                    streamed.push(live.call_id);
                }
                // A client that went away still lets the turn finish.
                let _ = items.send(piece);
            }
            StreamItem::Event(event) => match event.kind() {
                ccare_core::kinds::ASSISTANT_MESSAGE => {
                    let Ok(message) = event.decode::<AssistantMessage>() else {
                        continue;
                    };
                    absorb(&mut outcome, &message, &streamed, &items);
                }
                ccare_core::kinds::TURN_END => {
                    if let Ok(end) = event.decode::<TurnEnd>() {
                        conclude(&mut outcome, end.reason);
                    }
                    break;
                }
                _ => {}
            },
            StreamItem::AwaitingTools { .. } => {
                outcome.failure = Some(host_failure(
                    400,
                    "CLIENT_TOOLS_UNSUPPORTED",
                    "the turn waits for tool results, which this gateway does not take yet",
                ));
                break;
            }
            StreamItem::Idle { .. } => {}
            StreamItem::Lagged { resume_from } => {
                stream = handle.agent().subscribe_from(resume_from);
            }
        }
    }
    if outcome.failure.is_none() {
        let mut hashes = recording.hashes;
        let previous = hashes.last().cloned().unwrap_or_default();
        hashes.push(next_hash(&previous, "assistant", &outcome.text));
        let view = ClientView { hashes };
        if let Err(error) = recording.views.record(handle.session().id(), &view).await {
            tracing::warn!(%error, session = %handle.session().id().as_str(), "the gateway's client view was not recorded");
        }
    }
    let _ = items.send(Item::End(outcome));
    drop(handle);
}

fn host_failure(status: u16, code: &str, message: &str) -> Failure {
    Failure::Host {
        status,
        code: code.to_owned(),
        message: message.to_owned(),
    }
}

/// Adds an assistant message to the outcome; a message whose call streamed no pieces
/// (a provider that does not stream) is sent whole.
fn absorb(
    outcome: &mut Outcome,
    message: &AssistantMessage,
    streamed: &[String],
    items: &mpsc::UnboundedSender<Item>,
) {
    if outcome.call_id.is_none() {
        outcome.call_id = Some(message.call_id.clone());
    }
    let mut text = String::new();
    let mut reasoning = String::new();
    for block in &message.message.content {
        match block {
            ContentBlock::Text(block) => text.push_str(&block.text),
            ContentBlock::Reasoning(block) => reasoning.push_str(&block.text),
            _ => {}
        }
    }
    if !streamed.contains(&message.call_id) {
        if !reasoning.is_empty() {
            let _ = items.send(Item::Reasoning {
                call_id: message.call_id.clone(),
                text: reasoning.clone(),
            });
        }
        if !text.is_empty() {
            let _ = items.send(Item::Text {
                call_id: message.call_id.clone(),
                text: text.clone(),
            });
        }
    }
    outcome.text.push_str(&text);
    outcome.reasoning.push_str(&reasoning);
    if let Some(usage) = message.usage {
        let sum = outcome.usage.get_or_insert_with(TokenUsage::default);
        sum.input = sum.input.saturating_add(usage.input);
        sum.cache_read = sum.cache_read.saturating_add(usage.cache_read);
        sum.cache_write = sum.cache_write.saturating_add(usage.cache_write);
        sum.output = sum.output.saturating_add(usage.output);
        sum.reasoning = sum.reasoning.saturating_add(usage.reasoning);
    }
    outcome.finish = if message.finish == "length" {
        "length".to_owned()
    } else {
        "stop".to_owned()
    };
}

/// Reads why the turn ended into the outcome.
fn conclude(outcome: &mut Outcome, reason: TurnEndReason) {
    match reason {
        TurnEndReason::Completed => {}
        TurnEndReason::MaxTokens => outcome.finish = "length".to_owned(),
        TurnEndReason::Error { failure } => {
            outcome.failure = Some(match failure {
                TurnFailure::Llm(failure) => Failure::Llm(failure),
                TurnFailure::Host(failure) => Failure::Host {
                    status: 500,
                    code: failure.code,
                    message: failure.message,
                },
            });
        }
        TurnEndReason::Blocked { by, detail, .. } => {
            outcome.failure = Some(Failure::Host {
                status: 400,
                code: "TURN_BLOCKED".to_owned(),
                message: format!("{by} refused the request: {detail}"),
            });
        }
        TurnEndReason::Aborted { cause } => {
            outcome.failure = Some(Failure::Host {
                status: 500,
                code: "TURN_ABORTED".to_owned(),
                message: format!("the turn was cancelled ({cause:?})"),
            });
        }
        TurnEndReason::Interrupted => {
            outcome.failure = Some(host_failure(
                500,
                "TURN_INTERRUPTED",
                "the turn was interrupted",
            ));
        }
    }
}
