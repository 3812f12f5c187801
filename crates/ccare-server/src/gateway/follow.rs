//! Following one gateway turn in its session's ordered stream (ACT-4) and turning it
//! into what an OpenAI client is answered: the text and reasoning pieces as they
//! stream, then the outcome (the whole answer, the upstream's usage summed over the
//! turn's requests, why it ended).
//!
//! The follower runs as its own task holding the session's actor, so a client that
//! disconnects mid-answer neither stops the turn nor loses the client view: when the
//! turn ends well, the view is recorded with the answer appended.
//!
//! A turn that calls the client's tools (GW-4) stops in the awaiting-tools state
//! (ACT-3): the outcome carries those calls (`finish_reason: tool_calls`); calls of
//! the host's own tools ran server-side and are never reported. If the follower
//! falls behind and is resubscribed (`Lagged`), pieces dropped meanwhile cannot be
//! replayed: from then on each committed `assistant/message` supplies what was not
//! streamed of it, so the client still gets every character once.
//!
//! A stream-watch abort (SW-9) ends the turn `aborted` with a hook cause and queues
//! the resume steer first, so a new turn starts without the agent going idle. The
//! follower then keeps following (GW-5): the client gets one answer under one id,
//! the aborted partial (already streamed, so kept in both answer forms) then the
//! resumed text starting a new paragraph, one finish and the usage the upstream
//! reported (the cut request reports none). When no resume follows (SW-11, the
//! agent goes idle), the abort is the answer's failure as before.

use ccare_agent::{EventStream, StreamItem};
use ccare_app::AgentHandle;
use ccare_core::kinds::{AssistantReply, CancelCause, TurnEnd, TurnEndReason, TurnFailure};
use ccare_core::{ContentBlock, LlmFailure, TokenUsage};
use ccare_llm::Chunk;
use ccare_session::AppendError;
use tokio::sync::mpsc;

use crate::gateway::view::{
    ClientView, Prior, TurnMark, Views, answer_text, calls_suffix, next_hash,
};
use crate::gateway::wire::{FunctionCall, ToolCallOut};

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
    /// Maintenance operations (their journal ids) that changed the upstream request,
    /// sent before the first piece or the end (GW-7).
    Compacted(Vec<String>),
    /// The turn ended.
    End(Box<Outcome>),
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
    /// `stop`, `length` or `tool_calls`.
    pub(crate) finish: String,
    /// The client's tool calls the turn awaits (GW-4), in call order.
    pub(crate) tool_calls: Vec<ToolCallOut>,
    /// The seq of the `turn/end` (`None` while the turn awaits tools).
    pub(crate) end_seq: Option<u64>,
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
        /// Whether asking again can help (a 5xx answered with `x-should-retry:
        /// false` when not: a loop stream watch stopped would only loop again).
        retry: bool,
    },
}

/// What the follower needs to record the client view once the turn ended well.
#[derive(Debug)]
pub(crate) struct Recording {
    /// The rows.
    pub(crate) views: Views,
    /// The chain hashes of the request's messages.
    pub(crate) hashes: Vec<String>,
    /// The fork points of the view the request extends.
    pub(crate) marks: Vec<TurnMark>,
    /// The last seq the client's previous answer saw.
    pub(crate) after_seq: u64,
    /// What the request knows of the session's rows ([`Views::record`] reads
    /// nothing more for a session it created or found).
    pub(crate) prior: Prior,
    /// Context care, whose journal names the maintenance operations.
    pub(crate) care: Option<ccare_care::ContextCare>,
    /// The session held for this request, let go once the view is recorded.
    pub(crate) admitted: Option<super::admission::Admitted>,
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
    let mut pieces = Pieces::default();
    // Set from a plugin's abort until the resumed turn starts (or the agent idles).
    let mut awaiting_resume = false;
    // Set when the resumed turn starts, until its first text piece.
    let mut seam = false;
    let mut calls: Vec<ccare_core::ToolCallBlock> = Vec::new();
    let after_seq = recording.after_seq;
    // Maintenance since the client's previous answer (between turns) counts too.
    let mut maintenance = Maintenance {
        seen: handle.session().with_log(|log| {
            let events = log.events();
            let first = events.partition_point(|event| event.seq() <= after_seq);
            events[first..].iter().any(|event| is_maintenance(event))
        }),
        reported: false,
    };
    // The turn end after which the agent was seen idle with a turn following it (the
    // resume is on its way through the stream): not waited for again.
    let mut idle_seen_after = None;
    // Set once the client went away (its answer was dropped): the turn is cancelled.
    let mut client_gone = false;
    // Resolves once the agent is idle (made once: the loop runs per streamed piece);
    // `idle_checked` is set once it resolved with the session writable.
    let agent = handle.agent().clone();
    let idle = async move { agent.when_idle().await };
    tokio::pin!(idle);
    let mut idle_checked = false;
    loop {
        // While an abort waits for its resume, the agent going idle ends the answer too:
        // the stream's `Idle` item is transient and is lost when the follower lags.
        let waiting = awaiting_resume && idle_seen_after != outcome.end_seq;
        let next = tokio::select! {
            item = stream.next() => Some(item),
            _ = handle.agent().when_idle(), if waiting => None,
            // A turn whose session a store error fenced (its creation, an append) logs
            // no `turn/end` and the stream sends nothing more: the agent's own record of
            // how it ended is the answer's failure.
            ended = &mut idle, if !waiting && !idle_checked => {
                match handle.session().fence() {
                    Some(fence) => {
                        if let Some(reason) = ended {
                            conclude(&mut outcome, reason);
                        }
                        if outcome.failure.is_none() {
                            // Named as an append to the session fails, as the API names it.
                            let fenced = AppendError::Fenced {
                                session: handle.session().id().clone(),
                                cause: fence,
                            };
                            outcome.failure =
                                Some(host_failure(500, fenced.code(), &fenced.to_string()));
                        }
                        break;
                    }
                    None => {
                        idle_checked = true;
                        continue;
                    }
                }
            }
            () = items.closed(), if !client_gone => {
                client_gone = true;
                stop_for_gone_client(&handle);
                continue;
            }
        };
        let Some(next) = next else {
            idle_seen_after = outcome.end_seq;
            if resumed_after(&handle, outcome.end_seq) {
                continue;
            }
            break;
        };
        let Some(item) = next else {
            if awaiting_resume {
                break;
            }
            outcome.failure = Some(host_failure(
                500,
                "TURN_LOST",
                "the session's stream ended before the turn did",
            ));
            break;
        };
        match item {
            StreamItem::Delta { live, .. } => {
                let (piece, reasoning) = match live.chunk {
                    Chunk::TextDelta { text, .. } => (text, false),
                    Chunk::ReasoningDelta { text, .. } => (text, true),
                    _ => continue,
                };
                if pieces.lagged {
                    continue;
                }
                let sent = pieces.sent.entry(live.call_id.clone()).or_default();
                let item = if reasoning {
                    sent.1.push_str(&piece);
                    Item::Reasoning {
                        call_id: live.call_id,
                        text: piece,
                    }
                } else {
                    sent.0.push_str(&piece);
                    open_seam(&mut outcome, &mut seam, &live.call_id, &items);
                    Item::Text {
                        call_id: live.call_id,
                        text: piece,
                    }
                };
                maintenance
                    .report(&handle, recording.care.as_ref(), after_seq, &items)
                    .await;
                // A client that went away is noticed by `items.closed()`.
                let _ = items.send(item);
            }
            StreamItem::Event(event) => {
                match event.kind() {
                    _ if is_maintenance(&event) => maintenance.seen = true,
                    ccare_core::kinds::ASSISTANT_MESSAGE => {
                        maintenance
                            .report(&handle, recording.care.as_ref(), after_seq, &items)
                            .await;
                        let Ok(message) = event.decode_part::<AssistantReply>() else {
                            continue;
                        };
                        calls.extend(message.message.content.iter().filter_map(
                            |block| match block {
                                ContentBlock::ToolCall(call) => Some(call.clone()),
                                _ => None,
                            },
                        ));
                        absorb(&mut outcome, &message, &pieces, &mut seam, &items);
                    }
                    ccare_core::kinds::TURN_START if awaiting_resume => {
                        // The resumed turn (SW-9): the same answer goes on, unless
                        // nobody is left to read it.
                        awaiting_resume = false;
                        outcome.failure = None;
                        seam = true;
                        if client_gone {
                            stop_for_gone_client(&handle);
                        }
                    }
                    ccare_core::kinds::TURN_END => {
                        if let Ok(end) = event.decode::<TurnEnd>() {
                            awaiting_resume = matches!(
                                end.reason,
                                TurnEndReason::Aborted {
                                    cause: CancelCause::Hook { .. }
                                }
                            );
                            conclude(&mut outcome, end.reason);
                        }
                        outcome.end_seq = Some(event.seq());
                        if !awaiting_resume {
                            break;
                        }
                    }
                    _ => {}
                }
            }
            StreamItem::AwaitingTools { call_ids, .. } => {
                outcome.tool_calls = call_ids
                    .iter()
                    .filter_map(|id| calls.iter().find(|call| &call.id == id))
                    .map(client_call)
                    .collect();
                outcome.finish = "tool_calls".to_owned();
                break;
            }
            // No resume followed the abort: it stays the answer's failure.
            StreamItem::Idle { .. } if awaiting_resume => break,
            StreamItem::Idle { .. } => {}
            StreamItem::Lagged { resume_from } => {
                pieces.lagged = true;
                stream = handle.agent().subscribe_from(resume_from);
            }
        }
    }
    if outcome.failure.is_none() {
        let mut hashes = recording.hashes;
        let previous = hashes.last().cloned().unwrap_or_default();
        let called: Vec<(String, String, String)> = outcome
            .tool_calls
            .iter()
            .map(|call| {
                (
                    call.id.clone(),
                    call.function.name.clone(),
                    call.function.arguments.clone(),
                )
            })
            .collect();
        let text = format!("{}{}", answer_text(&outcome.text), calls_suffix(&called));
        hashes.push(next_hash(&previous, "assistant", &text));
        let mut marks = recording.marks;
        if let Some(seq) = outcome.end_seq {
            marks.push(TurnMark {
                messages: hashes.len(),
                seq,
            });
        }
        let head = handle.session().head().saturating_sub(1);
        let view = ClientView {
            hashes,
            marks,
            head,
        };
        if let Err(error) = recording
            .views
            .record(handle.session().id(), &view, recording.prior)
            .await
        {
            tracing::warn!(%error, session = %handle.session().id().as_str(), "the gateway's client view was not recorded");
        }
    }
    // The next request of the session finds the view this answer left.
    drop(recording.admitted);
    maintenance.reported = false;
    maintenance
        .report(&handle, recording.care.as_ref(), after_seq, &items)
        .await;
    let _ = items.send(Item::End(Box::new(outcome)));
    drop(handle);
}

/// Cancels the turn of a client that went away (its connection closed before the
/// answer ended: an agent's stop button, a timeout), as a user's cancel: the model
/// stops generating (and being paid for), the partial answer is kept in the session
/// as interrupted, and the session is free at once for the client's next request.
/// No client view is recorded for the aborted answer, so that request is read
/// against the view before it.
fn stop_for_gone_client(handle: &AgentHandle) {
    let agent = handle.agent().clone();
    tracing::info!(session = %handle.session().id().as_str(), "the gateway's client went away; its turn is cancelled");
    tokio::spawn(async move { agent.cancel(CancelCause::User, true).await });
}

/// Whether `event` is maintenance that changes the next request: a committed
/// compaction or a prune.
fn is_maintenance(event: &ccare_core::Event) -> bool {
    match event.kind() {
        ccare_core::kinds::COMPACTION_PRUNE => true,
        ccare_core::kinds::COMPACTION_END => event
            .decode::<ccare_core::kinds::CompactionEnd>()
            .is_ok_and(|end| end.error.is_none()),
        _ => false,
    }
}

/// The maintenance the follower saw, reported once before the first piece and again
/// (all of it) before the end.
struct Maintenance {
    seen: bool,
    reported: bool,
}

impl Maintenance {
    /// Sends [`Item::Compacted`] with the journal's committed operations since
    /// `after_seq`, when maintenance was seen and not reported yet.
    async fn report(
        &mut self,
        handle: &AgentHandle,
        care: Option<&ccare_care::ContextCare>,
        after_seq: u64,
        items: &mpsc::UnboundedSender<Item>,
    ) {
        if !self.seen || self.reported {
            return;
        }
        self.reported = true;
        let Some(care) = care else {
            return;
        };
        let log = handle.session().with_log(Clone::clone);
        let ids: Vec<String> = match care.series(&log).await {
            Some(Ok(series)) => series
                .operations
                .into_iter()
                .filter(|operation| operation.outcome.as_deref() == Some("committed"))
                .filter(|operation| operation.seq.is_some_and(|seq| seq > after_seq))
                .map(|operation| operation.operation_id)
                .collect(),
            Some(Err(error)) => {
                tracing::warn!(%error, "the gateway could not read the maintenance journal");
                Vec::new()
            }
            None => Vec::new(),
        };
        if !ids.is_empty() {
            let _ = items.send(Item::Compacted(ids));
        }
    }
}

/// What was streamed to the client, per provider call.
#[derive(Debug, Default)]
struct Pieces {
    /// `(text, reasoning)` sent per call id.
    sent: std::collections::HashMap<String, (String, String)>,
    /// Whether the follower lagged: pieces are then held back and each committed
    /// message supplies what was not sent of it.
    lagged: bool,
}

impl Pieces {
    /// What of `whole` (a call's committed text or reasoning) the client has not got.
    fn rest<'a>(&self, call_id: &str, whole: &'a str, reasoning: bool) -> &'a str {
        let sent = self.sent.get(call_id).map_or(
            "",
            |(text, thought)| {
                if reasoning { thought } else { text }
            },
        );
        whole
            .strip_prefix(sent)
            .unwrap_or(if sent.is_empty() { whole } else { "" })
    }
}

/// A caller-executed call as the client is to get it: arguments as JSON text (the
/// raw text when the model's was not JSON).
fn client_call(call: &ccare_core::ToolCallBlock) -> ToolCallOut {
    let arguments = call.raw_arguments.clone().unwrap_or_else(|| {
        if call.arguments.is_null() {
            "{}".to_owned()
        } else {
            call.arguments.to_string()
        }
    });
    ToolCallOut {
        id: call.id.clone(),
        kind: "function",
        function: FunctionCall {
            name: call.name.clone(),
            arguments,
        },
    }
}

/// Whether the session's log holds a turn start after the turn that ended at `end`.
fn resumed_after(handle: &ccare_app::AgentHandle, end: Option<u64>) -> bool {
    let Some(end) = end else {
        return false;
    };
    handle.session().with_log(|log| {
        let events = log.events();
        let first = events.partition_point(|event| event.seq() <= end);
        events[first..]
            .iter()
            .any(|event| event.kind() == ccare_core::kinds::TURN_START)
    })
}

fn host_failure(status: u16, code: &str, message: &str) -> Failure {
    Failure::Host {
        status,
        code: code.to_owned(),
        message: message.to_owned(),
        retry: true,
    }
}

/// Adds an assistant message to the outcome and sends what of it the client has not
/// got: all of it for a provider that does not stream, the rest after a lag.
fn absorb(
    outcome: &mut Outcome,
    message: &AssistantReply,
    pieces: &Pieces,
    seam: &mut bool,
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
    let rest = pieces.rest(&message.call_id, &reasoning, true);
    if !rest.is_empty() {
        let _ = items.send(Item::Reasoning {
            call_id: message.call_id.clone(),
            text: rest.to_owned(),
        });
    }
    let rest = pieces.rest(&message.call_id, &text, false);
    if !rest.is_empty() {
        open_seam(outcome, seam, &message.call_id, items);
        let _ = items.send(Item::Text {
            call_id: message.call_id.clone(),
            text: rest.to_owned(),
        });
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

/// Before the resumed turn's first text piece (`seam` set): ends the aborted partial's
/// paragraph, in the outcome and to the client, so the resumed text starts a new one.
fn open_seam(
    outcome: &mut Outcome,
    seam: &mut bool,
    call_id: &str,
    items: &mpsc::UnboundedSender<Item>,
) {
    if !std::mem::take(seam) {
        return;
    }
    let gap = paragraph_gap(&outcome.text);
    if gap.is_empty() {
        return;
    }
    outcome.text.push_str(gap);
    let _ = items.send(Item::Text {
        call_id: call_id.to_owned(),
        text: gap.to_owned(),
    });
}

/// What `text` needs to end a paragraph: nothing when empty or already ended.
fn paragraph_gap(text: &str) -> &'static str {
    if text.is_empty() || text.ends_with("\n\n") {
        ""
    } else if text.ends_with('\n') {
        "\n"
    } else {
        "\n\n"
    }
}

/// What the client is told of a cancelled turn, by who cancelled it.
fn cancelled(cause: &CancelCause) -> String {
    match cause {
        CancelCause::Hook { plugin, reason } => format!("{plugin} stopped the answer: {reason}"),
        CancelCause::User => "the turn was cancelled by the user".to_owned(),
        CancelCause::Shutdown => "the turn was cancelled: the server is shutting down".to_owned(),
        CancelCause::Timeout => "the turn was cancelled: a deadline passed".to_owned(),
    }
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
                    retry: true,
                },
            });
        }
        TurnEndReason::Blocked { by, detail, .. } => {
            outcome.failure = Some(Failure::Host {
                status: 400,
                code: "TURN_BLOCKED".to_owned(),
                message: format!("{by} refused the request: {detail}"),
                retry: false,
            });
        }
        TurnEndReason::Aborted { cause } => {
            // A shutdown or a deadline may go better next time; a loop a plugin
            // stopped, or a user's cancel, would not.
            let retry = matches!(cause, CancelCause::Shutdown | CancelCause::Timeout);
            outcome.failure = Some(Failure::Host {
                status: 500,
                code: "TURN_ABORTED".to_owned(),
                message: cancelled(&cause),
                retry,
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_lagged_answer_gets_only_what_was_not_streamed() {
        let mut pieces = Pieces::default();
        assert_eq!(pieces.rest("c1", "Hello world", false), "Hello world");
        pieces
            .sent
            .insert("c1".to_owned(), ("Hel".to_owned(), String::new()));
        pieces.lagged = true;
        assert_eq!(pieces.rest("c1", "Hello world", false), "lo world");
        assert_eq!(pieces.rest("c1", "thinking", true), "thinking");
        assert_eq!(pieces.rest("c1", "Hel", false), "");
        // A committed text that does not extend what streamed adds nothing.
        assert_eq!(pieces.rest("c1", "Bye", false), "");
    }

    /// GW-5: the resumed text after an abort starts a new paragraph, whatever the
    /// cut partial ended with.
    #[test]
    fn a_resumed_answer_starts_a_new_paragraph() {
        assert_eq!(paragraph_gap(""), "");
        assert_eq!(paragraph_gap("same line ag"), "\n\n");
        assert_eq!(paragraph_gap("same line again\n"), "\n");
        assert_eq!(paragraph_gap("done.\n\n"), "");
    }
}
