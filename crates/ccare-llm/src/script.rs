//! The scripted provider (spec H-LLM-8): replies read from a JSONL file, for tests,
//! demos and trying configurations offline.
//!
//! One reply per line; blank lines and lines starting with `#` are skipped. A reply
//! is an object with any of:
//!
//! | field | meaning |
//! |---|---|
//! | `text` | answer text, streamed word by word |
//! | `reasoning` | reasoning streamed before the text |
//! | `tool_calls` | `[{"name", "arguments", "id"?}]`; the finish becomes `tool-calls` |
//! | `echo` | `true`: answer with the last user message's text |
//! | `failure` | `{"code", "message"}`: the call fails with that code (e.g. `CONTEXT_WINDOW_EXCEEDED`) |
//! | `chunks` | raw chunks (H-LLM-3 JSON) sent as they are; the finish must be among them |
//! | `finish` | `stop` (default) or `length` |
//! | `usage` | `{"input", "cache_read", "cache_write", "output", "reasoning"}`; by default a rough estimate (4 characters a token) |
//! | `delay_ms` | pause before each chunk |
//! | `expect` | `{"contains"?, "purpose"?}`: checks on the request; a mismatch fails the call with `INVALID_REQUEST` |
//!
//! Each request takes the next reply; when none is left the call fails (`UNKNOWN`,
//! "script exhausted"), so a test notices an unexpected extra request. The built-in
//! demo script (a provider of kind `script` without a `script` file) echoes forever.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use ccare_core::{
    ContentBlock, FailureCode, LlmFailure, ReasoningBlock, Role, TextBlock, TokenUsage,
};
use parking_lot::Mutex;
use serde::Deserialize;
use serde_json::Value;
use tokio_util::sync::CancellationToken;

use crate::assemble::tool_call_block;
use crate::chunk::{BlockKind, Chunk, ChunkStream, Finish};
use crate::config::ConfigError;
use crate::provider::{Provider, TaskStream};
use crate::purpose::Purpose;
use crate::request::GenerateRequest;
use crate::route::ProviderConfig;

/// One scripted reply (a line of the script).
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ScriptReply {
    /// Answer text.
    #[serde(default)]
    pub text: Option<String>,
    /// Reasoning streamed before the text.
    #[serde(default)]
    pub reasoning: Option<String>,
    /// Tool calls.
    #[serde(default)]
    pub tool_calls: Vec<ScriptToolCall>,
    /// Answer with the last user message's text.
    #[serde(default)]
    pub echo: bool,
    /// Fail the call.
    #[serde(default)]
    pub failure: Option<ScriptFailure>,
    /// Raw chunks.
    #[serde(default)]
    pub chunks: Option<Vec<Chunk>>,
    /// `stop` or `length`.
    #[serde(default)]
    pub finish: Option<String>,
    /// Reported usage.
    #[serde(default)]
    pub usage: Option<TokenUsage>,
    /// Pause before each chunk.
    #[serde(default)]
    pub delay_ms: Option<u64>,
    /// Checks on the request.
    #[serde(default)]
    pub expect: Option<ScriptExpect>,
}

/// A scripted tool call.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ScriptToolCall {
    /// The tool name.
    pub name: String,
    /// The arguments (any JSON; a string is sent as raw argument text).
    #[serde(default)]
    pub arguments: Value,
    /// The call id; generated when absent.
    #[serde(default)]
    pub id: Option<String>,
}

/// A scripted failure.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ScriptFailure {
    /// The failure code.
    pub code: FailureCode,
    /// Its message.
    #[serde(default)]
    pub message: Option<String>,
    /// A `Retry-After` to report.
    #[serde(default)]
    pub retry_after_ms: Option<u64>,
}

/// Checks a reply makes on the request it answers.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ScriptExpect {
    /// The last user message's text must contain this.
    #[serde(default)]
    pub contains: Option<String>,
    /// The request's purpose.
    #[serde(default)]
    pub purpose: Option<Purpose>,
}

/// A script line that could not be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("line {line}: {message}")]
pub struct ScriptError {
    /// The 1-based line.
    pub line: usize,
    /// What was wrong.
    pub message: String,
}

/// Parses a script: one reply per line, blank and `#` lines skipped.
pub fn parse_script(text: &str) -> Result<Vec<(usize, ScriptReply)>, ScriptError> {
    let mut replies = Vec::new();
    for (index, line) in text.lines().enumerate() {
        let trimmed = line.trim();
        if trimmed.is_empty() || trimmed.starts_with('#') {
            continue;
        }
        let reply: ScriptReply = serde_json::from_str(trimmed).map_err(|error| ScriptError {
            line: index + 1,
            message: error.to_string(),
        })?;
        if let Some(finish) = &reply.finish
            && !matches!(finish.as_str(), "stop" | "length")
        {
            return Err(ScriptError {
                line: index + 1,
                message: format!("finish must be \"stop\" or \"length\", found {finish:?}"),
            });
        }
        replies.push((index + 1, reply));
    }
    Ok(replies)
}

struct State {
    next: usize,
    requests: Vec<GenerateRequest>,
}

/// Replies from a script, in order, and records every request it gets.
#[derive(Clone)]
pub struct ScriptProvider {
    replies: Arc<Vec<(usize, ScriptReply)>>,
    looping: bool,
    state: Arc<Mutex<State>>,
}

impl std::fmt::Debug for ScriptProvider {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ScriptProvider")
            .field("replies", &self.replies.len())
            .field("looping", &self.looping)
            .finish_non_exhaustive()
    }
}

const DEMO_SCRIPT: &str = r#"{"echo": true}"#;

impl ScriptProvider {
    /// A provider answering with `replies` once each.
    pub fn new(replies: Vec<ScriptReply>) -> Self {
        Self::from_parsed(
            replies
                .into_iter()
                .enumerate()
                .map(|(at, reply)| (at + 1, reply))
                .collect(),
            false,
        )
    }

    fn from_parsed(replies: Vec<(usize, ScriptReply)>, looping: bool) -> Self {
        Self {
            replies: Arc::new(replies),
            looping,
            state: Arc::new(Mutex::new(State {
                next: 0,
                requests: Vec::new(),
            })),
        }
    }

    /// Parses a script text.
    pub fn from_jsonl(text: &str) -> Result<Self, ScriptError> {
        Ok(Self::from_parsed(parse_script(text)?, false))
    }

    /// Reads a script file.
    pub fn from_file(path: &Path) -> Result<Self, String> {
        let text = std::fs::read_to_string(path)
            .map_err(|error| format!("cannot read script {}: {error}", path.display()))?;
        Self::from_jsonl(&text).map_err(|error| format!("script {} {error}", path.display()))
    }

    /// The built-in demo: echoes the last user message, forever.
    pub fn demo() -> Self {
        let replies = parse_script(DEMO_SCRIPT).unwrap_or_default();
        Self::from_parsed(replies, true)
    }

    /// The provider for `[providers.<name>] kind = "script"`: its `script` file, or the
    /// built-in demo when none is set.
    pub fn from_config(name: &str, config: &ProviderConfig) -> Result<Self, ConfigError> {
        match &config.script {
            None => Ok(Self::demo()),
            Some(path) => Self::from_file(path).map_err(|message| ConfigError::Script {
                key: format!("providers.{name}.script"),
                message,
            }),
        }
    }

    /// Every request received so far, in order.
    pub fn requests(&self) -> Vec<GenerateRequest> {
        self.state.lock().requests.clone()
    }

    /// How many replies are left (`usize::MAX` for a looping script).
    pub fn remaining(&self) -> usize {
        if self.looping {
            return usize::MAX;
        }
        self.replies.len().saturating_sub(self.state.lock().next)
    }
}

impl Provider for ScriptProvider {
    fn stream(&self, request: GenerateRequest, cancel: CancellationToken) -> ChunkStream {
        let reply = {
            let mut state = self.state.lock();
            state.requests.push(request.clone());
            let at = state.next;
            state.next += 1;
            if self.looping && !self.replies.is_empty() {
                self.replies.get(at % self.replies.len()).cloned()
            } else {
                self.replies.get(at).cloned()
            }
        };
        let total = self.replies.len();
        let delay = reply
            .as_ref()
            .and_then(|(_, reply)| reply.delay_ms)
            .map(Duration::from_millis);
        TaskStream::spawn(move |out| async move {
            let chunks = match reply {
                None => vec![Chunk::Finish(Finish::Error {
                    failure: LlmFailure::new(
                        FailureCode::Unknown,
                        format!(
                            "script exhausted: the script has {total} replies and this is request {}",
                            total + 1
                        ),
                    ),
                })],
                Some((line, reply)) => render(line, &reply, &request),
            };
            for chunk in chunks.into_iter() {
                if let Some(delay) = delay.filter(|_| chunk.is_content()) {
                    tokio::select! {
                        biased;
                        () = cancel.cancelled() => {
                            let _ = out.send(Chunk::Finish(Finish::Aborted)).await;
                            return;
                        }
                        () = tokio::time::sleep(delay) => {}
                    }
                }
                if cancel.is_cancelled() {
                    let _ = out.send(Chunk::Finish(Finish::Aborted)).await;
                    return;
                }
                let last = matches!(chunk, Chunk::Finish(_));
                if !out.send(chunk).await || last {
                    return;
                }
            }
        })
    }
}

fn last_user_text(request: &GenerateRequest) -> String {
    let Some(message) = request
        .config
        .messages
        .iter()
        .rev()
        .find(|message| message.role == Role::User)
    else {
        return String::new();
    };
    let mut text = String::new();
    for block in &message.message.content {
        if let ContentBlock::Text(block) = block {
            text.push_str(&block.text);
        }
    }
    text
}

fn request_chars(request: &GenerateRequest) -> usize {
    let mut chars = request
        .config
        .system
        .as_ref()
        .map_or(0, |system| system.chars().count());
    for message in &request.config.messages {
        chars +=
            serde_json::to_string(&message.message.content).map_or(0, |json| json.chars().count());
    }
    chars
}

fn tokens_of(chars: usize) -> u64 {
    u64::try_from(chars.div_ceil(4)).unwrap_or(u64::MAX)
}

/// Splits text into word-sized deltas (each word with the whitespace after it).
fn words(text: &str) -> Vec<String> {
    let mut pieces = Vec::new();
    let mut current = String::new();
    let mut in_space = false;
    for character in text.chars() {
        let space = character.is_whitespace();
        if in_space && !space && !current.is_empty() {
            pieces.push(std::mem::take(&mut current));
        }
        in_space = space;
        current.push(character);
    }
    if !current.is_empty() {
        pieces.push(current);
    }
    pieces
}

fn render(line: usize, reply: &ScriptReply, request: &GenerateRequest) -> Vec<Chunk> {
    if let Some(expect) = &reply.expect {
        if let Some(purpose) = expect.purpose
            && purpose != request.config.purpose
        {
            return vec![fail(
                FailureCode::InvalidRequest,
                format!(
                    "script line {line} expected a {purpose} request, got {}",
                    request.config.purpose
                ),
            )];
        }
        if let Some(needle) = &expect.contains {
            let text = last_user_text(request);
            if !text.contains(needle.as_str()) {
                return vec![fail(
                    FailureCode::InvalidRequest,
                    format!(
                        "script line {line} expected the last user message to contain {needle:?}, got {text:?}"
                    ),
                )];
            }
        }
    }
    if let Some(failure) = &reply.failure {
        let mut llm_failure = LlmFailure::new(
            failure.code,
            failure
                .message
                .clone()
                .unwrap_or_else(|| format!("scripted failure on line {line}")),
        );
        llm_failure.retry_after_ms = failure.retry_after_ms;
        return vec![Chunk::Finish(Finish::Error {
            failure: llm_failure,
        })];
    }
    if let Some(chunks) = &reply.chunks {
        return chunks.clone();
    }
    let mut chunks = Vec::new();
    let mut index = 0u32;
    let mut output_chars = 0usize;
    if let Some(reasoning) = &reply.reasoning {
        output_chars += reasoning.chars().count();
        chunks.push(Chunk::BlockStart {
            index,
            kind: BlockKind::Reasoning,
            id: None,
            name: None,
        });
        for piece in words(reasoning) {
            chunks.push(Chunk::ReasoningDelta {
                index,
                text: piece,
                signature: None,
            });
        }
        chunks.push(Chunk::BlockEnd {
            index,
            block: ContentBlock::Reasoning(ReasoningBlock {
                text: reasoning.clone(),
                signature: None,
                opaque: false,
                extra: ccare_core::Extra::new(),
            }),
        });
        index += 1;
    }
    let text = if reply.echo {
        Some(format!(
            "(scripted demo provider) You said: {}",
            last_user_text(request)
        ))
    } else {
        reply.text.clone()
    };
    if let Some(text) = text {
        output_chars += text.chars().count();
        chunks.push(Chunk::BlockStart {
            index,
            kind: BlockKind::Text,
            id: None,
            name: None,
        });
        for piece in words(&text) {
            chunks.push(Chunk::TextDelta { index, text: piece });
        }
        chunks.push(Chunk::BlockEnd {
            index,
            block: ContentBlock::Text(TextBlock {
                text,
                extra: ccare_core::Extra::new(),
            }),
        });
        index += 1;
    }
    for (position, call) in reply.tool_calls.iter().enumerate() {
        let id = call
            .id
            .clone()
            .unwrap_or_else(|| format!("call_{}_{}_{position}", request.call_id, request.attempt));
        let arguments = match &call.arguments {
            Value::String(raw) => raw.clone(),
            Value::Null => String::new(),
            other => other.to_string(),
        };
        output_chars += call.name.chars().count() + arguments.chars().count();
        chunks.push(Chunk::BlockStart {
            index,
            kind: BlockKind::ToolCall,
            id: Some(id.clone()),
            name: Some(call.name.clone()),
        });
        chunks.push(Chunk::ToolCallDelta {
            index,
            arguments: arguments.clone(),
        });
        chunks.push(Chunk::BlockEnd {
            index,
            block: ContentBlock::ToolCall(tool_call_block(id, call.name.clone(), arguments)),
        });
        index += 1;
    }
    let usage = reply.usage.unwrap_or_else(|| TokenUsage {
        input: tokens_of(request_chars(request)),
        output: tokens_of(output_chars),
        reasoning: reply
            .reasoning
            .as_ref()
            .map_or(0, |text| tokens_of(text.chars().count())),
        ..TokenUsage::default()
    });
    chunks.push(Chunk::Usage(usage));
    let finish = match (reply.finish.as_deref(), reply.tool_calls.is_empty()) {
        (Some("length"), _) => Finish::Length,
        (_, false) => Finish::ToolCalls,
        _ => Finish::Stop,
    };
    chunks.push(Chunk::Finish(finish));
    chunks
}

fn fail(code: FailureCode, message: String) -> Chunk {
    Chunk::Finish(Finish::Error {
        failure: LlmFailure::new(code, message),
    })
}
