//! The answer to a chat-completions request, from the turn follower's items: one
//! `chat.completion` object, or (GW-5) `chat.completion.chunk`s as plain `data:`
//! server-sent events — the first with `role`, then `content` / `reasoning_content`
//! pieces, then the `finish_reason` chunk, with `include_usage` a last chunk with
//! `choices: []` and the real usage (every other chunk `usage: null`), then
//! `data: [DONE]`.

use std::collections::VecDeque;

use ccare_agent::routes::{RouteReply, SseFrame};
use futures_util::StreamExt as _;
use serde::Serialize;
use tokio::sync::mpsc;

use crate::gateway::follow::{Failure, Item, Outcome};
use crate::gateway::refusal;
use crate::gateway::wire::{
    AnswerMessage, Choice, ChunkChoice, Completion, CompletionChunk, Delta, ErrorDetail,
    ErrorReply, ToolCallDelta, Usage, UsageField,
};

/// The last frame of every stream.
pub const DONE: &str = "[DONE]";

/// The header naming the maintenance operations (compactions, prunes) that changed
/// the upstream request of this response (GW-7), comma-separated.
pub const COMPACTED_HEADER: &str = "x-ccare-compacted";

/// `reply` with [`COMPACTED_HEADER`] when `ids` is not empty.
pub(crate) fn with_compacted(reply: RouteReply, ids: &[String]) -> RouteReply {
    let mut unique: Vec<&str> = Vec::with_capacity(ids.len());
    for id in ids {
        if !unique.contains(&id.as_str()) {
            unique.push(id);
        }
    }
    if unique.is_empty() {
        reply
    } else {
        reply.with_header(COMPACTED_HEADER, unique.join(", "))
    }
}

/// Who is answered, and how.
#[derive(Debug, Clone)]
pub(crate) struct Answering {
    /// The model the client asked for (echoed).
    pub(crate) model: String,
    /// Unix seconds.
    pub(crate) created: u64,
    /// Whether the stream ends with a usage chunk.
    pub(crate) include_usage: bool,
}

/// `chatcmpl-<the turn's first provider call>`.
fn answer_id(call_id: Option<&str>) -> String {
    format!("chatcmpl-{}", call_id.unwrap_or("none"))
}

/// The error reply of a failed turn.
pub(crate) fn failure_reply(failure: &Failure) -> RouteReply {
    match failure {
        Failure::Llm(failure) => refusal::llm_failure(failure),
        Failure::Host {
            status,
            code,
            message,
            retry,
        } if !*retry || (400..500).contains(status) => {
            refusal::refuse(*status, code, message.clone())
        }
        Failure::Host {
            status,
            code,
            message,
            ..
        } => refusal::error(*status, code, message.clone()),
    }
}

/// The non-streamed answer: waits for the turn's end.
pub(crate) async fn whole(
    answering: &Answering,
    mut items: mpsc::UnboundedReceiver<Item>,
) -> RouteReply {
    let mut outcome = None;
    let mut compacted = Vec::new();
    while let Some(item) = items.recv().await {
        match item {
            Item::End(end) => {
                outcome = Some(end);
                break;
            }
            Item::Compacted(ids) => compacted.extend(ids),
            _ => {}
        }
    }
    let Some(outcome) = outcome else {
        return refusal::error(500, "TURN_LOST", "the turn's follower stopped");
    };
    if let Some(failure) = &outcome.failure {
        return with_compacted(failure_reply(failure), &compacted);
    }
    with_compacted(
        RouteReply::json(200, &completion(answering, &outcome)),
        &compacted,
    )
}

fn completion(answering: &Answering, outcome: &Outcome) -> Completion {
    Completion {
        id: answer_id(outcome.call_id.as_deref()),
        object: "chat.completion",
        created: answering.created,
        model: answering.model.clone(),
        choices: vec![Choice {
            index: 0,
            message: AnswerMessage {
                role: "assistant",
                content: (!outcome.text.is_empty() || outcome.tool_calls.is_empty())
                    .then(|| outcome.text.clone()),
                reasoning_content: (!outcome.reasoning.is_empty())
                    .then(|| outcome.reasoning.clone()),
                tool_calls: (!outcome.tool_calls.is_empty()).then(|| outcome.tool_calls.clone()),
            },
            finish_reason: outcome.finish.clone(),
        }],
        usage: outcome.usage.as_ref().map(Usage::of),
    }
}

/// The streamed answer. `first` is the follower's first item (already awaited, so a
/// turn refused before any piece streamed was answered with an error status instead).
pub(crate) fn streamed(
    answering: Answering,
    first: Item,
    items: mpsc::UnboundedReceiver<Item>,
) -> RouteReply {
    let mut chunker = Chunker {
        answering,
        id: None,
        items,
        pending: VecDeque::new(),
        finished: false,
    };
    chunker.push(first);
    RouteReply::events(futures_util::stream::unfold(chunker, Chunker::next_frame).boxed())
}

struct Chunker {
    answering: Answering,
    /// Set with the first chunk.
    id: Option<String>,
    items: mpsc::UnboundedReceiver<Item>,
    pending: VecDeque<SseFrame>,
    finished: bool,
}

fn data<T: Serialize>(value: &T) -> SseFrame {
    SseFrame {
        event: None,
        id: None,
        data: serde_json::to_string(value).unwrap_or_else(|_| "null".to_owned()),
    }
}

impl Chunker {
    async fn next_frame(mut self) -> Option<(SseFrame, Self)> {
        loop {
            if let Some(frame) = self.pending.pop_front() {
                return Some((frame, self));
            }
            if self.finished {
                return None;
            }
            match self.items.recv().await {
                Some(item) => self.push(item),
                None => {
                    self.push_error(&Failure::Host {
                        status: 500,
                        code: "TURN_LOST".to_owned(),
                        message: "the turn's follower stopped".to_owned(),
                        retry: true,
                    });
                    self.finish();
                }
            }
        }
    }

    fn usage_field(&self) -> UsageField {
        if self.answering.include_usage {
            UsageField::Null
        } else {
            UsageField::Absent
        }
    }

    fn chunk(&self, choices: Vec<ChunkChoice>, usage: UsageField) -> SseFrame {
        data(&CompletionChunk {
            id: self.id.clone().unwrap_or_else(|| answer_id(None)),
            object: "chat.completion.chunk",
            created: self.answering.created,
            model: self.answering.model.clone(),
            choices,
            usage,
        })
    }

    fn delta(&self, delta: Delta, finish_reason: Option<String>) -> SseFrame {
        self.chunk(
            vec![ChunkChoice {
                index: 0,
                delta,
                finish_reason,
            }],
            self.usage_field(),
        )
    }

    /// The first chunk (`role: assistant`), once the answer's id is known.
    fn open(&mut self, call_id: Option<&str>) {
        if self.id.is_some() {
            return;
        }
        self.id = Some(answer_id(call_id));
        let frame = self.delta(
            Delta {
                role: Some("assistant"),
                content: Some(String::new()),
                ..Delta::default()
            },
            None,
        );
        self.pending.push_back(frame);
    }

    fn push(&mut self, item: Item) {
        match item {
            // Reported in the headers when known before the first piece; later ones
            // are in the journal (headers are gone by then).
            Item::Compacted(_) => {}
            Item::Text { call_id, text } => {
                self.open(Some(&call_id));
                let frame = self.delta(
                    Delta {
                        content: Some(text),
                        ..Delta::default()
                    },
                    None,
                );
                self.pending.push_back(frame);
            }
            Item::Reasoning { call_id, text } => {
                self.open(Some(&call_id));
                let frame = self.delta(
                    Delta {
                        reasoning_content: Some(text),
                        ..Delta::default()
                    },
                    None,
                );
                self.pending.push_back(frame);
            }
            Item::End(outcome) => {
                self.open(outcome.call_id.as_deref());
                match &outcome.failure {
                    Some(failure) => self.push_error(failure),
                    None => {
                        if !outcome.tool_calls.is_empty() {
                            let calls = outcome
                                .tool_calls
                                .iter()
                                .zip(0_u32..)
                                .map(|(call, index)| ToolCallDelta {
                                    index,
                                    id: call.id.clone(),
                                    kind: "function",
                                    function: call.function.clone(),
                                })
                                .collect();
                            let frame = self.delta(
                                Delta {
                                    tool_calls: Some(calls),
                                    ..Delta::default()
                                },
                                None,
                            );
                            self.pending.push_back(frame);
                        }
                        let frame = self.delta(Delta::default(), Some(outcome.finish.clone()));
                        self.pending.push_back(frame);
                        if self.answering.include_usage {
                            let usage = outcome
                                .usage
                                .as_ref()
                                .map(Usage::of)
                                .map_or(UsageField::Null, UsageField::Usage);
                            let frame = self.chunk(Vec::new(), usage);
                            self.pending.push_back(frame);
                        }
                    }
                }
                self.finish();
            }
        }
    }

    /// A failure after the stream began: an `{error}` data frame, as OpenAI sends one
    /// (the SDKs raise it).
    fn push_error(&mut self, failure: &Failure) {
        let (code, message) = match failure {
            Failure::Llm(failure) => (failure.code.as_str().to_owned(), failure.message.clone()),
            Failure::Host { code, message, .. } => (code.clone(), message.clone()),
        };
        self.pending.push_back(data(&ErrorReply {
            error: ErrorDetail {
                message,
                kind: "api_error".to_owned(),
                code,
            },
        }));
    }

    fn finish(&mut self) {
        self.finished = true;
        self.pending.push_back(SseFrame {
            event: None,
            id: None,
            data: DONE.to_owned(),
        });
    }
}
