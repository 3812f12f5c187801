//! The summary transaction (CC-SUM-2 .. CC-SUM-6): earlier history is summarized by the
//! provider (purpose `compaction`) and replaced by a checkpoint, only if the complete
//! request gets cheaper on the frozen pricing basis.
//!
//! The log of one committed summary: `compaction/start`, `compaction/summary`, the
//! replacing `user/message` (surface `Replace` over the selected span, its sources
//! citing the start, the summary and every shadowed seq), `compaction/end`. Any error
//! after the start appends `compaction/end{error}` and leaves the history as it was.
//!
//! The summary request is one user message: a transcript of the selected messages
//! (tool calls and results as text, so no provider sees a tool history without its
//! tools) followed by the instruction. It must fit the summary route's own hard input
//! budget (CC-BUD-5); the largest balanced candidate that fits is summarized, and a
//! context-window refusal moves to the next smaller one within `summary.max_retries`.

use ccare_core::kinds::{CompactionEnd, CompactionStart, UserMessage};
use ccare_core::{ContentBlock, EventDraft, Message, Source, SurfaceOp, TokenUsage};
use ccare_llm::{Assembler, CallConfig, CancellationToken, Finish, Purpose, RequestMessage};
use ccare_session::Session;
use futures_util::StreamExt;
use serde_json::{Value, json};

use crate::budget::{RouteInfo, resolve};
use crate::care::{Care, Frozen};
use crate::config::RoutePurpose;
use crate::range::{RangeNode, SeqRange, summary_candidates};
use crate::texts::{CHECKPOINT_FRAMING, SUMMARY_INSTRUCTION};

/// Why a summary did not commit; `code` is the spec's (`SUMMARY_NOT_SMALLER`, …) or the
/// provider's failure code.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{code}: {message}")]
pub struct SummaryFailure {
    /// A stable code.
    pub code: String,
    /// What happened.
    pub message: String,
}

impl SummaryFailure {
    fn new(code: &str, message: impl Into<String>) -> Self {
        Self {
            code: code.to_owned(),
            message: message.into(),
        }
    }

    /// Whether this failure means the selection cannot usefully be summarized, so the
    /// memo remembers it (CC-MNT-5).
    pub fn is_no_useful_range(&self) -> bool {
        matches!(
            self.code.as_str(),
            "SUMMARY_NOT_SMALLER" | "SUMMARY_INPUT_BUDGET" | "SUMMARY_EMPTY"
        )
    }
}

/// A committed summary.
#[derive(Debug, Clone, PartialEq)]
pub struct Committed {
    /// The transaction id.
    pub compaction_id: String,
    /// The seq of the replacing checkpoint.
    pub checkpoint_seq: u64,
    /// The seqs it shadowed.
    pub shadowed: Vec<u64>,
    /// The conversation request's `Q` before and after, on the frozen basis.
    pub before: u64,
    /// See `before`.
    pub after: u64,
    /// The summary call.
    pub call_id: String,
    /// What the provider reported for it.
    pub usage: Option<TokenUsage>,
}

/// What a summary needs of its caller.
pub(crate) struct SummaryRun<'a> {
    pub(crate) session: &'a Session,
    pub(crate) frozen: &'a Frozen,
    /// The pending batch and request-only messages of the conversation request.
    pub(crate) batch: &'a [Message],
    pub(crate) turn: Option<u32>,
    /// Why: `automatic`, `requested` or `overflow`.
    pub(crate) reason: &'static str,
    pub(crate) operation_id: &'a str,
    pub(crate) cancel: CancellationToken,
}

fn text_of(message: &Message) -> String {
    let mut parts = Vec::new();
    for block in &message.content {
        match block {
            ContentBlock::Text(text) => parts.push(text.text.clone()),
            ContentBlock::ToolCall(call) => parts.push(format!(
                "[tool call {}] {}",
                call.name,
                serde_json::to_string(&call.arguments).unwrap_or_default()
            )),
            ContentBlock::ToolResult(result) => {
                let body: Vec<String> = result
                    .content
                    .iter()
                    .map(|inner| match inner {
                        ContentBlock::Text(text) => text.text.clone(),
                        _ => "[non-text content]".to_owned(),
                    })
                    .collect();
                parts.push(format!(
                    "[tool result {}{}]\n{}",
                    result.name,
                    if result.is_error { ", error" } else { "" },
                    body.join("\n")
                ));
            }
            ContentBlock::Image(_) => parts.push("[image]".to_owned()),
            ContentBlock::Reasoning(_) | ContentBlock::Unknown(_) => {}
        }
    }
    parts.join("\n")
}

/// The transcript of the selected messages, then the instruction (CC-SUM-2, CC-SUM-6).
fn summary_request(messages: &[&Message]) -> Message {
    let mut transcript = String::from("<transcript>\n");
    for message in messages {
        let label = match &message.source {
            Some(Source::CompactCheckpoint { .. }) => "earlier checkpoint",
            _ if message
                .content
                .iter()
                .any(|block| matches!(block, ContentBlock::ToolResult(_))) =>
            {
                "tool"
            }
            _ if message
                .content
                .iter()
                .any(|block| matches!(block, ContentBlock::ToolCall(_))) =>
            {
                "assistant"
            }
            Some(_) => "user",
            None => "assistant",
        };
        transcript.push_str(&format!("[{label}]\n{}\n\n", text_of(message)));
    }
    transcript.push_str("</transcript>\n\n");
    transcript.push_str(SUMMARY_INSTRUCTION);
    let mut request = Message::from_blocks(vec![ContentBlock::text(transcript)]);
    request.source = Some(Source::user());
    request
}

/// Whether a message is context-care's own (its notices): kept out of transcripts.
fn is_own(message: &Message) -> bool {
    matches!(&message.source, Some(Source::Plugin(plugin)) if plugin.kind.starts_with("plugin:context-care:"))
}

impl Care {
    /// Runs one summary transaction over `selection` (CC-SUM-2 .. CC-SUM-5).
    pub(crate) async fn summarize(
        &self,
        run: &SummaryRun<'_>,
        nodes: &[RangeNode],
        selection: SeqRange,
        min_fresh: u64,
    ) -> Result<Committed, SummaryFailure> {
        let session = run.session;
        if let Some(open) = session.with_log(|log| log.state().open_compaction.clone()) {
            return Err(SummaryFailure::new(
                "COMPACTION_BUSY",
                format!("compaction {open} is still open"),
            ));
        }
        let Some(llm) = self.llm.as_ref() else {
            return Err(SummaryFailure::new(
                "NO_PROVIDER",
                "no LLM layer to summarize with",
            ));
        };
        let Some(route) = self.route.as_deref() else {
            return Err(SummaryFailure::new("NO_PROVIDER", "no conversation route"));
        };
        let view = session.derived_view();
        let snapshot = (view.head, view.replace_generation);
        let before = self
            .measure(
                run.frozen,
                view.messages.iter().map(|derived| &*derived.message),
                run.batch.iter(),
            )
            .map_err(|error| SummaryFailure::new("PRICING_FAILED", error.to_string()))?
            .load;
        let candidates = summary_candidates(nodes, selection, min_fresh)
            .map_err(|error| SummaryFailure::new(error.code(), error.to_string()))?;
        if candidates.is_empty() {
            return Err(SummaryFailure::new(
                "SUMMARY_INPUT_BUDGET",
                "no balanced prefix of the selection has enough fresh text",
            ));
        }
        let model = match (&self.config.summary.provider, &self.config.summary.model) {
            (Some(provider), Some(model)) => format!("{provider}/{model}"),
            _ => format!("{}/{}", route.provider, route.model),
        };
        let pricer = run
            .frozen
            .pricing
            .pricer(&run.frozen.meter)
            .map_err(|error| SummaryFailure::new("PRICING_FAILED", error.to_string()))?;
        let by_seq = |seq: u64| {
            view.messages
                .iter()
                .find(|derived| derived.seq == seq)
                .map(|derived| &*derived.message)
        };
        let compaction_id = uuid::Uuid::now_v7().to_string();
        let mut started = false;
        let mut last_error = None;
        let max_retries = self.config.summary.max_retries.unwrap_or(0);
        let mut retries = 0u64;
        let mut calls = 0u64;
        for candidate in &candidates {
            let messages: Vec<&Message> = candidate
                .iter()
                .filter_map(|seq| by_seq(*seq))
                .filter(|message| !is_own(message))
                .collect();
            let request = summary_request(&messages);
            let config = CallConfig {
                model: model.clone(),
                max_tokens: self
                    .config
                    .summary
                    .max_tokens
                    .and_then(|tokens| u32::try_from(tokens).ok()),
                messages: vec![RequestMessage::user(request.clone())],
                purpose: Purpose::Compaction,
                ..CallConfig::default()
            };
            let call = llm
                .prepare_call(config)
                .map_err(|failure| SummaryFailure::new(failure.code.as_str(), failure.message))?;
            // CC-SUM-2: fits the summary route's own H (CC-BUD-5), or H is unknown.
            let budget = resolve(
                &self.config,
                RouteInfo {
                    provider: &call.route.provider,
                    model: &call.route.model,
                    purpose: RoutePurpose::Compaction,
                    physical_window_tokens: call.route.context_window,
                    max_tokens: call.config.max_tokens.map(u64::from),
                    adapter_default_max_tokens: call.route.max_output_tokens.map(u64::from),
                },
            )
            .ok()
            .flatten();
            let q = pricer
                .request(None, std::iter::once(&request), &Value::Null)
                .map(|price| price.q())
                .map_err(|error| SummaryFailure::new("PRICING_FAILED", error.to_string()))?;
            if budget
                .as_ref()
                .is_some_and(|budget| i64::try_from(q).unwrap_or(i64::MAX) > budget.hard_input)
            {
                last_error = Some(SummaryFailure::new(
                    "SUMMARY_INPUT_BUDGET",
                    format!("the summary request ({q} tokens) exceeds the summary route's budget"),
                ));
                continue;
            }
            if let Some(limit) = self.config.max_summary_calls_per_action
                && calls >= limit
            {
                return self.abort(
                    session,
                    &compaction_id,
                    started,
                    last_error.unwrap_or_else(|| {
                        SummaryFailure::new("SUMMARY_CALL_LIMIT", "summary call limit reached")
                    }),
                );
            }
            if !started {
                let start = EventDraft::typed(&CompactionStart {
                    compaction_id: compaction_id.clone(),
                    turn: run.turn,
                    trigger: run.reason.to_owned(),
                })
                .map_err(|error| SummaryFailure::new("ENCODE_FAILED", error.to_string()))?;
                session
                    .append(start)
                    .map_err(|error| SummaryFailure::new(error.code(), error.to_string()))?;
                started = true;
            }
            calls += 1;
            let call_id = call.call_id.clone();
            let summary_model = (call.route.provider.clone(), call.route.model.clone());
            let max_tokens = call.config.max_tokens;
            let mut stream = call.stream(run.cancel.child_token());
            let mut assembler = Assembler::new();
            let mut protocol = None;
            while let Some(chunk) = stream.next().await {
                if let Err(failure) = assembler.push(&chunk) {
                    protocol = Some(failure);
                    break;
                }
            }
            drop(stream);
            let assembled = match protocol {
                Some(failure) => assembler.fail(failure),
                None => assembler.finish(),
            };
            let failure = match &assembled.finish {
                Finish::Stop => None,
                Finish::Length => Some(SummaryFailure::new(
                    "MAX_TOKENS",
                    "the summary hit its output limit",
                )),
                Finish::ToolCalls => Some(SummaryFailure::new(
                    "UNSUPPORTED_CONTENT",
                    "the summary called a tool",
                )),
                Finish::Aborted => {
                    Some(SummaryFailure::new("ABORTED", "the summary was cancelled"))
                }
                Finish::Error { failure } => Some(SummaryFailure::new(
                    failure.code.as_str(),
                    failure.message.clone(),
                )),
            };
            if let Some(failure) = failure {
                let overflow = matches!(
                    failure.code.as_str(),
                    "CONTEXT_WINDOW_EXCEEDED" | "REQUEST_BUDGET_EXCEEDED"
                );
                if overflow && retries < max_retries {
                    retries += 1;
                    last_error = Some(failure);
                    continue;
                }
                return self.abort(session, &compaction_id, started, failure);
            }
            let message = assembled.message();
            if message.content.iter().any(|block| {
                matches!(
                    block,
                    ContentBlock::ToolCall(_) | ContentBlock::Image(_) | ContentBlock::Unknown(_)
                )
            }) {
                return self.abort(
                    session,
                    &compaction_id,
                    started,
                    SummaryFailure::new("UNSUPPORTED_CONTENT", "the summary is not only text"),
                );
            }
            let summary: Vec<String> = message
                .content
                .iter()
                .filter_map(|block| match block {
                    ContentBlock::Text(text) => Some(text.text.clone()),
                    _ => None,
                })
                .collect();
            let summary = summary.join("\n");
            if summary.trim().is_empty() {
                return self.abort(
                    session,
                    &compaction_id,
                    started,
                    SummaryFailure::new("SUMMARY_EMPTY", "the summary has no text"),
                );
            }
            // CC-SUM-5: commit only over an unchanged surface, only if smaller.
            let now = session.derived_view();
            if now.replace_generation != snapshot.1
                || candidate
                    .iter()
                    .any(|seq| !now.messages.iter().any(|m| m.seq == *seq))
            {
                return self.abort(
                    session,
                    &compaction_id,
                    started,
                    SummaryFailure::new(
                        "SUMMARY_SURFACE_CHANGED",
                        "the history changed while it was being summarized",
                    ),
                );
            }
            let (Some(&start_seq), Some(&end_seq)) = (candidate.first(), candidate.last()) else {
                continue;
            };
            let trace = json!({
                "producer": "context-care",
                "trigger": "summary",
                "reason": run.reason,
                "operationId": run.operation_id,
                "sourceSeqs": candidate,
                "callId": call_id,
            });
            let ledger = self
                .ledger
                .current(session.id())
                .await
                .ok()
                .and_then(|items| crate::ledger::render_ledger(&items));
            let checkpoint = checkpoint_message(&compaction_id, &summary, ledger.as_deref(), trace);
            let after = self
                .measure(
                    run.frozen,
                    now.messages
                        .iter()
                        .filter(|derived| derived.seq < start_seq || derived.seq > end_seq)
                        .map(|derived| &*derived.message)
                        .chain(std::iter::once(&checkpoint)),
                    run.batch.iter(),
                )
                .map_err(|error| SummaryFailure::new("PRICING_FAILED", error.to_string()))?
                .load;
            if after >= before {
                return self.abort(
                    session,
                    &compaction_id,
                    started,
                    SummaryFailure::new(
                        "SUMMARY_NOT_SMALLER",
                        format!("the checkpoint would make the request {after} tokens, not less than {before}"),
                    ),
                );
            }
            let shadowed_tokens: u64 = nodes
                .iter()
                .filter(|node| candidate.contains(&node.seq))
                .map(|node| node.tokens)
                .sum();
            let summary_event = EventDraft::new(
                ccare_core::kinds::COMPACTION_SUMMARY,
                object(json!({
                    "compaction_id": compaction_id,
                    "summary": summary,
                    "raw_output": serde_json::to_value(&message).unwrap_or(Value::Null),
                    "usage": assembled.usage,
                    "provider": summary_model.0,
                    "model": summary_model.1,
                    "max_tokens": max_tokens,
                    "llm_stream_call": true,
                    "call_id": call_id,
                    "shadowed_range": [start_seq, end_seq],
                    "shadowed_seqs": candidate,
                    "shadowed_tokens": shadowed_tokens,
                })),
            );
            let summary_seq = session
                .append(summary_event)
                .map_err(|error| SummaryFailure::new(error.code(), error.to_string()))?
                .seq();
            let start_event = session.with_log(|log| {
                log.events()
                    .iter()
                    .rev()
                    .find(|event| event.kind() == ccare_core::kinds::COMPACTION_START)
                    .map(|event| event.seq())
            });
            let mut sources: Vec<u64> = start_event.into_iter().collect();
            sources.push(summary_seq);
            sources.extend(candidate.iter().copied());
            let replace = EventDraft::typed(&UserMessage {
                message: checkpoint,
            })
            .map_err(|error| SummaryFailure::new("ENCODE_FAILED", error.to_string()))?
            .with_surface(SurfaceOp::Replace { start_seq, end_seq })
            .with_sources(sources);
            let checkpoint_seq = match session.append(replace) {
                Ok(event) => event.seq(),
                Err(error) => {
                    return self.abort(
                        session,
                        &compaction_id,
                        started,
                        SummaryFailure::new(error.code(), error.to_string()),
                    );
                }
            };
            let end = EventDraft::typed(&CompactionEnd {
                compaction_id: compaction_id.clone(),
                error: None,
                repair: false,
            })
            .map_err(|error| SummaryFailure::new("ENCODE_FAILED", error.to_string()))?;
            session
                .append(end)
                .map_err(|error| SummaryFailure::new(error.code(), error.to_string()))?;
            session
                .flush()
                .await
                .map_err(|error| SummaryFailure::new(error.code(), error.to_string()))?;
            return Ok(Committed {
                compaction_id,
                checkpoint_seq,
                shadowed: candidate.clone(),
                before,
                after,
                call_id,
                usage: assembled.usage,
            });
        }
        self.abort(
            session,
            &compaction_id,
            started,
            last_error.unwrap_or_else(|| {
                SummaryFailure::new(
                    "SUMMARY_INPUT_BUDGET",
                    "no candidate fits the summary route",
                )
            }),
        )
    }

    /// Closes an open transaction with the error and returns it.
    fn abort(
        &self,
        session: &Session,
        compaction_id: &str,
        started: bool,
        failure: SummaryFailure,
    ) -> Result<Committed, SummaryFailure> {
        if started {
            let end = CompactionEnd {
                compaction_id: compaction_id.to_owned(),
                error: Some(failure.code.clone()),
                repair: false,
            };
            if let Ok(draft) = EventDraft::typed(&end)
                && let Err(error) = session.append(draft)
            {
                tracing::error!(session = %session.id(), %error, "compaction/end not written");
            }
        }
        Err(failure)
    }
}

fn object(value: Value) -> ccare_core::JsonObject {
    match value {
        Value::Object(object) => object,
        _ => ccare_core::JsonObject::new(),
    }
}

/// The checkpoint that replaces summarized history (CC-SUM-5): the framing block, the
/// summary inside `<compacted-summary>` tags, then the done-ledger when it has items.
pub(crate) fn checkpoint_message(
    compaction_id: &str,
    summary: &str,
    ledger: Option<&str>,
    trace: Value,
) -> Message {
    let mut blocks = vec![
        ContentBlock::text(CHECKPOINT_FRAMING),
        ContentBlock::text(format!(
            "<compacted-summary>\n{summary}\n</compacted-summary>"
        )),
    ];
    // The done-ledger follows verbatim, never rewritten by the summary (CC-EXT-2).
    if let Some(ledger) = ledger {
        blocks.push(ContentBlock::text(ledger));
    }
    let mut message = Message::from_blocks(blocks);
    message.source = Some(Source::CompactCheckpoint {
        compaction_id: compaction_id.to_owned(),
        producer: "context-care".to_owned(),
        trace: Some(Box::new(trace)),
        extra: ccare_core::Extra::new(),
    });
    message
}
