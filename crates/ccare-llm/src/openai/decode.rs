//! Turning chat-completions responses into chunks (spec H-LLM-3, H-LLM-7).
//!
//! [`Translator`] reads one SSE `data:` payload at a time: `reasoning_content` becomes
//! a reasoning block, `content` a text block, `tool_calls[i]` one tool-call block per
//! call index; usage maps DeepSeek's and OpenAI's cache fields. Anything that breaks
//! the wire contract is a `STREAM_PROTOCOL` failure naming the SSE line.

use std::borrow::Cow;

use ccare_core::{ContentBlock, FailureCode, LlmFailure, ReasoningBlock, TextBlock, TokenUsage};
use serde::Deserialize;
use serde_json::Value;

use crate::assemble::tool_call_block;
use crate::chunk::{BlockKind, Chunk, Finish};
use crate::openai::errors;

#[derive(Deserialize)]
struct WireChunk<'a> {
    #[serde(default, borrow)]
    choices: Vec<WireChoice<'a>>,
    #[serde(default)]
    usage: Option<WireUsage>,
    #[serde(default)]
    error: Option<Value>,
}

#[derive(Deserialize)]
struct WireChoice<'a> {
    #[serde(default, borrow)]
    delta: Option<WireDelta<'a>>,
    #[serde(default, borrow)]
    message: Option<WireDelta<'a>>,
    #[serde(default, borrow)]
    finish_reason: Option<Cow<'a, str>>,
}

#[derive(Deserialize)]
struct WireDelta<'a> {
    #[serde(default, borrow)]
    content: Option<Cow<'a, str>>,
    #[serde(default, borrow)]
    reasoning_content: Option<Cow<'a, str>>,
    #[serde(default, borrow)]
    reasoning: Option<Cow<'a, str>>,
    #[serde(default, borrow)]
    tool_calls: Option<Vec<WireToolCall<'a>>>,
    #[serde(default, borrow)]
    role: Option<Cow<'a, str>>,
    /// Fields this adapter does not interpret (e.g. `refusal`, `annotations`): kept
    /// on the message, never dropped.
    #[serde(flatten)]
    extra: ccare_core::JsonObject,
}

#[derive(Deserialize)]
struct WireToolCall<'a> {
    #[serde(default)]
    index: Option<u32>,
    #[serde(default, borrow)]
    id: Option<Cow<'a, str>>,
    #[serde(default, borrow)]
    function: Option<WireFunction<'a>>,
}

#[derive(Deserialize)]
struct WireFunction<'a> {
    #[serde(default, borrow)]
    name: Option<Cow<'a, str>>,
    #[serde(default, borrow)]
    arguments: Option<Cow<'a, str>>,
}

#[derive(Deserialize)]
struct WireUsage {
    #[serde(default)]
    prompt_tokens: Option<i64>,
    #[serde(default)]
    completion_tokens: Option<i64>,
    #[serde(default)]
    prompt_cache_hit_tokens: Option<i64>,
    #[serde(default)]
    prompt_cache_miss_tokens: Option<i64>,
    #[serde(default)]
    prompt_tokens_details: Option<PromptDetails>,
    #[serde(default)]
    completion_tokens_details: Option<CompletionDetails>,
}

#[derive(Deserialize)]
struct PromptDetails {
    #[serde(default)]
    cached_tokens: Option<i64>,
}

#[derive(Deserialize)]
struct CompletionDetails {
    #[serde(default)]
    reasoning_tokens: Option<i64>,
}

struct ToolSlot {
    block: u32,
    id: String,
    name: String,
    arguments: String,
}

struct Prose {
    block: u32,
    kind: BlockKind,
    text: String,
}

/// Translates one response's SSE payloads into chunks.
pub(crate) struct Translator {
    call_id: String,
    next_block: u32,
    prose: Option<Prose>,
    tools: Vec<ToolSlot>,
    finish: Option<Finish>,
    usage: Option<TokenUsage>,
    extra: ccare_core::JsonObject,
}

fn protocol(line: u64, message: impl std::fmt::Display) -> LlmFailure {
    LlmFailure::new(
        FailureCode::StreamProtocol,
        format!("SSE line {line}: {message}"),
    )
}

impl Translator {
    /// A translator for the call `call_id` (used to name tool calls that come without an id).
    pub(crate) fn new(call_id: &str) -> Self {
        Self {
            call_id: call_id.to_owned(),
            next_block: 0,
            prose: None,
            tools: Vec::new(),
            finish: None,
            usage: None,
            extra: ccare_core::JsonObject::new(),
        }
    }

    /// Reads one SSE event: a chunk payload, or `[DONE]`, which ends the response.
    /// Returns whether the response ended.
    pub(crate) fn sse_event(
        &mut self,
        event: &crate::sse::SseEvent,
        out: &mut Vec<Chunk>,
    ) -> Result<bool, LlmFailure> {
        if event.is_done() {
            self.end(event.line, out)?;
            return Ok(true);
        }
        self.event(&event.data, event.line, out)?;
        Ok(false)
    }

    /// Reads one `data:` payload (not `[DONE]`) that started at SSE line `line`.
    pub(crate) fn event(
        &mut self,
        data: &str,
        line: u64,
        out: &mut Vec<Chunk>,
    ) -> Result<(), LlmFailure> {
        let chunk: WireChunk<'_> = serde_json::from_str(data)
            .map_err(|error| protocol(line, format_args!("malformed chunk JSON: {error}")))?;
        if let Some(error) = &chunk.error {
            let mut failure = errors::from_stream_error(error);
            failure.message = format!("SSE line {line}: {}", failure.message);
            return Err(failure);
        }
        for choice in chunk.choices {
            let delta = choice.delta.or(choice.message);
            if let Some(delta) = delta {
                self.delta(delta, line, out)?;
            }
            if let Some(reason) = choice.finish_reason {
                self.finish_reason(&reason, line)?;
            }
        }
        if let Some(usage) = chunk.usage {
            self.usage = Some(map_usage(&usage).map_err(|message| protocol(line, message))?);
        }
        Ok(())
    }

    fn delta(
        &mut self,
        delta: WireDelta<'_>,
        line: u64,
        out: &mut Vec<Chunk>,
    ) -> Result<(), LlmFailure> {
        let _ = delta.role;
        for (key, value) in delta.extra {
            match (value, self.extra.get_mut(&key)) {
                (Value::Null, _) => {}
                (Value::String(more), Some(Value::String(text))) => text.push_str(&more),
                (value, _) => {
                    self.extra.insert(key, value);
                }
            }
        }
        let reasoning = delta.reasoning_content.or(delta.reasoning);
        let has_content = reasoning.as_ref().is_some_and(|text| !text.is_empty())
            || delta.content.as_ref().is_some_and(|text| !text.is_empty())
            || delta
                .tool_calls
                .as_ref()
                .is_some_and(|calls| !calls.is_empty());
        if has_content && self.finish.is_some() {
            return Err(protocol(line, "content arrived after the finish reason"));
        }
        if let Some(text) = reasoning
            && !text.is_empty()
        {
            let block = self.prose_block(BlockKind::Reasoning, out);
            out.push(Chunk::ReasoningDelta {
                index: block,
                text: text.into_owned(),
                signature: None,
            });
            self.push_prose(&out[out.len() - 1]);
        }
        if let Some(text) = delta.content
            && !text.is_empty()
        {
            let block = self.prose_block(BlockKind::Text, out);
            out.push(Chunk::TextDelta {
                index: block,
                text: text.into_owned(),
            });
            self.push_prose(&out[out.len() - 1]);
        }
        for call in delta.tool_calls.unwrap_or_default() {
            self.tool_delta(call, line, out)?;
        }
        Ok(())
    }

    fn push_prose(&mut self, chunk: &Chunk) {
        if let Some(prose) = &mut self.prose {
            match chunk {
                Chunk::TextDelta { text, .. } | Chunk::ReasoningDelta { text, .. } => {
                    prose.text.push_str(text)
                }
                Chunk::BlockStart { .. }
                | Chunk::ToolCallDelta { .. }
                | Chunk::BlockEnd { .. }
                | Chunk::MessageExtra { .. }
                | Chunk::Usage(_)
                | Chunk::Retry(_)
                | Chunk::Finish(_) => {}
            }
        }
    }

    /// The open prose block of `kind`, closing a prose block of the other kind first.
    fn prose_block(&mut self, kind: BlockKind, out: &mut Vec<Chunk>) -> u32 {
        if let Some(prose) = &self.prose {
            if prose.kind == kind {
                return prose.block;
            }
            self.close_prose(out);
        }
        let block = self.next_block;
        self.next_block += 1;
        out.push(Chunk::BlockStart {
            index: block,
            kind,
            id: None,
            name: None,
        });
        self.prose = Some(Prose {
            block,
            kind,
            text: String::new(),
        });
        block
    }

    fn close_prose(&mut self, out: &mut Vec<Chunk>) {
        if let Some(prose) = self.prose.take() {
            let block = match prose.kind {
                BlockKind::Reasoning => ContentBlock::Reasoning(ReasoningBlock {
                    text: prose.text,
                    signature: None,
                    opaque: false,
                    extra: ccare_core::Extra::new(),
                }),
                BlockKind::Text | BlockKind::ToolCall => ContentBlock::Text(TextBlock {
                    text: prose.text,
                    extra: ccare_core::Extra::new(),
                }),
            };
            out.push(Chunk::BlockEnd {
                index: prose.block,
                block,
            });
        }
    }

    fn tool_delta(
        &mut self,
        call: WireToolCall<'_>,
        line: u64,
        out: &mut Vec<Chunk>,
    ) -> Result<(), LlmFailure> {
        let position = match call.index {
            Some(index) => usize::try_from(index).unwrap_or(usize::MAX),
            None if call.id.is_some() => self.tools.len(),
            None => self.tools.len().saturating_sub(1),
        };
        let (name, arguments) = match call.function {
            Some(function) => (function.name, function.arguments),
            None => (None, None),
        };
        if position == self.tools.len() {
            let Some(name) = name.filter(|name| !name.is_empty()) else {
                return Err(protocol(
                    line,
                    format_args!("tool call {position} starts without a function name"),
                ));
            };
            self.close_prose(out);
            let id = match call.id {
                Some(id) if !id.is_empty() => id.into_owned(),
                Some(_) | None => format!("call_{}_{position}", self.call_id),
            };
            let block = self.next_block;
            self.next_block += 1;
            out.push(Chunk::BlockStart {
                index: block,
                kind: BlockKind::ToolCall,
                id: Some(id.clone()),
                name: Some(name.clone().into_owned()),
            });
            self.tools.push(ToolSlot {
                block,
                id,
                name: name.into_owned(),
                arguments: String::new(),
            });
        } else if position > self.tools.len() {
            return Err(protocol(
                line,
                format_args!(
                    "tool call {position} arrives before tool call {} (a gap in tool_calls indexes)",
                    self.tools.len()
                ),
            ));
        } else if let (Some(slot), Some(id)) = (self.tools.get(position), &call.id)
            && !id.is_empty()
            && slot.id != *id
        {
            return Err(protocol(
                line,
                format_args!(
                    "tool call {position} changes its id from {:?} to {id:?}",
                    slot.id
                ),
            ));
        }
        if let Some(arguments) = arguments
            && !arguments.is_empty()
            && let Some(slot) = self.tools.get_mut(position)
        {
            slot.arguments.push_str(&arguments);
            out.push(Chunk::ToolCallDelta {
                index: slot.block,
                arguments: arguments.into_owned(),
            });
        }
        Ok(())
    }

    fn finish_reason(&mut self, reason: &str, line: u64) -> Result<(), LlmFailure> {
        let finish = match reason {
            "stop" | "eos" | "end_turn" if !self.tools.is_empty() => Finish::ToolCalls,
            "stop" | "eos" | "end_turn" => Finish::Stop,
            "tool_calls" | "function_call" => Finish::ToolCalls,
            "length" => Finish::Length,
            "content_filter" => Finish::Error {
                failure: LlmFailure::new(
                    FailureCode::ContentFiltered,
                    "the provider withheld the output (content_filter)",
                ),
            },
            "insufficient_system_resource" => Finish::Error {
                failure: LlmFailure::new(
                    FailureCode::ProviderUnavailable,
                    "the provider ran out of capacity mid-answer (insufficient_system_resource)",
                ),
            },
            other => {
                return Err(protocol(
                    line,
                    format_args!("unknown finish_reason {other:?}"),
                ));
            }
        };
        if self.finish.is_none() {
            self.finish = Some(finish);
        }
        Ok(())
    }

    /// Ends the response (at `[DONE]` or a clean end of the body): closes the blocks,
    /// reports usage and the finish. Without a finish reason the response is a
    /// `STREAM_PROTOCOL` failure.
    pub(crate) fn end(&mut self, line: u64, out: &mut Vec<Chunk>) -> Result<(), LlmFailure> {
        let Some(finish) = self.finish.take() else {
            return Err(protocol(line, "the stream ended without a finish_reason"));
        };
        if matches!(finish, Finish::Stop | Finish::Length | Finish::ToolCalls) {
            self.close_prose(out);
            for slot in std::mem::take(&mut self.tools) {
                let block = tool_call_block(slot.id, slot.name, slot.arguments);
                out.push(Chunk::BlockEnd {
                    index: slot.block,
                    block: ContentBlock::ToolCall(block),
                });
            }
        }
        if !self.extra.is_empty() {
            out.push(Chunk::MessageExtra {
                fields: std::mem::take(&mut self.extra),
            });
        }
        if let Some(usage) = self.usage.take() {
            out.push(Chunk::Usage(usage));
        }
        out.push(Chunk::Finish(finish));
        Ok(())
    }

    /// Usage seen so far (reported even when the stream fails later).
    pub(crate) fn take_usage(&mut self) -> Option<TokenUsage> {
        self.usage.take()
    }
}

fn count(name: &str, value: Option<i64>) -> Result<u64, String> {
    match value {
        None => Ok(0),
        Some(number) => {
            u64::try_from(number).map_err(|_| format!("usage.{name} is negative ({number})"))
        }
    }
}

/// Maps a wire usage object: DeepSeek's `prompt_cache_hit_tokens` / `miss` when
/// present, else OpenAI's `prompt_tokens_details.cached_tokens`.
fn map_usage(usage: &WireUsage) -> Result<TokenUsage, String> {
    let prompt = count("prompt_tokens", usage.prompt_tokens)?;
    let output = count("completion_tokens", usage.completion_tokens)?;
    let reasoning = count(
        "completion_tokens_details.reasoning_tokens",
        usage
            .completion_tokens_details
            .as_ref()
            .and_then(|details| details.reasoning_tokens),
    )?;
    let (input, cache_read) =
        if usage.prompt_cache_hit_tokens.is_some() || usage.prompt_cache_miss_tokens.is_some() {
            let hit = count("prompt_cache_hit_tokens", usage.prompt_cache_hit_tokens)?;
            let miss = match usage.prompt_cache_miss_tokens {
                Some(_) => count("prompt_cache_miss_tokens", usage.prompt_cache_miss_tokens)?,
                None => prompt.saturating_sub(hit),
            };
            (miss, hit)
        } else {
            let cached = count(
                "prompt_tokens_details.cached_tokens",
                usage
                    .prompt_tokens_details
                    .as_ref()
                    .and_then(|details| details.cached_tokens),
            )?;
            if cached > prompt {
                return Err(format!(
                    "usage reports {cached} cached tokens of only {prompt} prompt tokens"
                ));
            }
            (prompt - cached, cached)
        };
    if reasoning > output {
        return Err(format!(
            "usage reports {reasoning} reasoning tokens of only {output} completion tokens"
        ));
    }
    Ok(TokenUsage {
        input,
        cache_read,
        cache_write: 0,
        output,
        reasoning,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(lines: &[&str]) -> Result<Vec<Chunk>, LlmFailure> {
        let mut translator = Translator::new("t");
        let mut out = Vec::new();
        for (at, line) in lines.iter().enumerate() {
            translator.event(line, at as u64 + 1, &mut out)?;
        }
        translator.end(lines.len() as u64 + 1, &mut out)?;
        Ok(out)
    }

    #[test]
    fn h_llm_7_deepseek_usage_maps_cache_hits() {
        let chunks = run(&[
            r#"{"choices":[{"index":0,"delta":{"content":"hi"},"finish_reason":"stop"}]}"#,
            r#"{"choices":[],"usage":{"prompt_tokens":100,"completion_tokens":20,"prompt_cache_hit_tokens":64,"prompt_cache_miss_tokens":36,"completion_tokens_details":{"reasoning_tokens":5}}}"#,
        ]);
        let usage = chunks.ok().and_then(|chunks| {
            chunks.into_iter().find_map(|chunk| match chunk {
                Chunk::Usage(usage) => Some(usage),
                _ => None,
            })
        });
        assert_eq!(
            usage,
            Some(TokenUsage {
                input: 36,
                cache_read: 64,
                cache_write: 0,
                output: 20,
                reasoning: 5
            })
        );
    }

    #[test]
    fn h_llm_7_bad_wire_input_names_the_line() {
        let cases: [(&[&str], &str); 5] = [
            (
                &[r#"{"choices":[{"delta":{"content":"a"}}]}"#, "{not json"],
                "SSE line 2: malformed chunk JSON",
            ),
            (
                &[r#"{"choices":[{"delta":{},"finish_reason":"banana"}]}"#],
                "SSE line 1: unknown finish_reason \"banana\"",
            ),
            (
                &[
                    r#"{"choices":[{"delta":{"tool_calls":[{"index":1,"id":"c","function":{"name":"f","arguments":""}}]}}]}"#,
                ],
                "SSE line 1: tool call 1 arrives before tool call 0",
            ),
            (
                &[r#"{"choices":[],"usage":{"prompt_tokens":-3}}"#],
                "SSE line 1: usage.prompt_tokens is negative (-3)",
            ),
            (
                &[r#"{"choices":[{"delta":{"content":"a"}}]}"#],
                "SSE line 2: the stream ended without a finish_reason",
            ),
        ];
        for (lines, expected) in cases {
            let failure = run(lines).err();
            assert_eq!(
                failure.as_ref().map(|f| f.code),
                Some(FailureCode::StreamProtocol),
                "{lines:?}"
            );
            let message = failure.map(|f| f.message).unwrap_or_default();
            assert!(
                message.starts_with(expected),
                "{message} does not start with {expected}"
            );
        }
    }
}
