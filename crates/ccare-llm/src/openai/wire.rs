//! Building the chat-completions request body (spec H-LLM-7).
//!
//! Each derived message becomes one wire message, in order; consecutive user messages
//! are never merged. Tool results go out as `role: tool`, and their images move to a
//! user message right after. Reasoning is echoed only where the route asks for it and
//! only for assistant messages the same provider wrote.
//!
//! A block the wire cannot carry (an unknown block type, or a block in a role that has
//! no place for it) is refused with [`Unsupported`] instead of being left out, so the
//! model never sees less than the log says (H-MSG-1).

use ccare_core::{ContentBlock, ImageBlock, JsonObject, Role, ToolCallBlock};
use serde::Serialize;
use serde::ser::{SerializeMap, Serializer};
use serde_json::{Value, json};

use crate::request::{CallConfig, GenerateRequest, RequestMessage, ToolSpec};

/// A block of the request that a chat-completions body cannot carry; the call fails
/// with `UNSUPPORTED_CONTENT` before anything is sent.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum Unsupported {
    /// A block directly in a message.
    #[error(
        "message {index} ({role}) holds a block of type {kind:?}, which an OpenAI-compatible request cannot carry"
    )]
    Block {
        /// The message's position in the request, from 1 (the system prompt not counted).
        index: usize,
        /// `user` or `assistant`.
        role: &'static str,
        /// The block's type as the log spells it.
        kind: String,
    },
    /// A block inside a tool result (only text and images go out as tool output).
    #[error(
        "message {index} ({role}) holds a tool result with a block of type {kind:?}, which an OpenAI-compatible request cannot carry"
    )]
    InToolResult {
        /// The message's position in the request, from 1.
        index: usize,
        /// `user` or `assistant`.
        role: &'static str,
        /// The inner block's type as the log spells it.
        kind: String,
    },
}

/// The type name of a block as the log spells it (`text`, `tool-call`, or an unknown
/// block's own `type`).
fn kind_of(block: &ContentBlock) -> String {
    match block {
        ContentBlock::Text(_) => "text".to_owned(),
        ContentBlock::Reasoning(_) => "reasoning".to_owned(),
        ContentBlock::ToolCall(_) => "tool-call".to_owned(),
        ContentBlock::ToolResult(_) => "tool-result".to_owned(),
        ContentBlock::Image(_) => "image".to_owned(),
        ContentBlock::Unknown(object) => match object.get("type") {
            Some(Value::String(kind)) => kind.clone(),
            _ => "unknown".to_owned(),
        },
    }
}

/// The JSON body of one request, borrowing what it can from the request: written out
/// once, straight into the bytes sent (the tools' schemas are never copied).
///
/// Its keys in order: `model`, `messages`, `tools` (when there are any), `max_tokens`,
/// `temperature`, `reasoning_effort` (each when set), `stream`, `stream_options` (when
/// streaming), then the route's `ext` keys; an `ext` key that names one of those
/// replaces its value in place.
pub(crate) struct RequestBody<'a> {
    model: &'a str,
    messages: Vec<Value>,
    tools: &'a [ToolSpec],
    max_tokens: Option<u32>,
    temperature: Option<serde_json::Number>,
    reasoning_effort: Option<&'a str>,
    stream: bool,
    ext: &'a JsonObject,
}

/// A tool as chat completions offer it: `{type: "function", function: {…}}`.
#[derive(Serialize)]
struct WireTool<'a> {
    r#type: &'static str,
    function: WireFunction<'a>,
}

#[derive(Serialize)]
struct WireFunction<'a> {
    name: &'a str,
    description: &'a str,
    parameters: &'a Value,
}

/// The tools of a body, written out as they are read.
struct WireTools<'a>(&'a [ToolSpec]);

impl Serialize for WireTools<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_seq(self.0.iter().map(|tool| WireTool {
            r#type: "function",
            function: WireFunction {
                name: &tool.name,
                description: &tool.description,
                parameters: &tool.input_schema,
            },
        }))
    }
}

impl Serialize for RequestBody<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut map = serializer.serialize_map(None)?;
        let mut own = Vec::with_capacity(8);
        macro_rules! entry {
            ($key:literal, $value:expr) => {{
                own.push($key);
                match self.ext.get($key) {
                    Some(replaced) => map.serialize_entry($key, replaced)?,
                    None => map.serialize_entry($key, $value)?,
                }
            }};
        }
        entry!("model", self.model);
        entry!("messages", &self.messages);
        if !self.tools.is_empty() {
            entry!("tools", &WireTools(self.tools));
        }
        if let Some(max_tokens) = self.max_tokens {
            entry!("max_tokens", &max_tokens);
        }
        if let Some(temperature) = &self.temperature {
            entry!("temperature", temperature);
        }
        if let Some(effort) = self.reasoning_effort {
            entry!("reasoning_effort", effort);
        }
        entry!("stream", &self.stream);
        if self.stream {
            entry!(
                "stream_options",
                &StreamOptions {
                    include_usage: true
                }
            );
        }
        for (key, value) in self.ext {
            if !own.contains(&key.as_str()) {
                map.serialize_entry(key, value)?;
            }
        }
        map.end()
    }
}

#[derive(Serialize)]
struct StreamOptions {
    include_usage: bool,
}

/// The body for `request`, streaming or not, or the first block it cannot carry.
pub(crate) fn request_body(
    request: &GenerateRequest,
    stream: bool,
) -> Result<RequestBody<'_>, Unsupported> {
    let config = &request.config;
    Ok(RequestBody {
        model: &request.route.model,
        messages: messages(
            config,
            &request.route.provider,
            request.route.reasoning_echo,
        )?,
        tools: &config.tools,
        max_tokens: config.max_tokens,
        temperature: config.temperature.and_then(serde_json::Number::from_f64),
        reasoning_effort: config.reasoning_effort.as_deref(),
        stream,
        ext: &config.ext,
    })
}

fn messages(
    config: &CallConfig,
    provider: &str,
    reasoning_echo: bool,
) -> Result<Vec<Value>, Unsupported> {
    let mut out = Vec::with_capacity(config.messages.len() + 1);
    if let Some(system) = &config.system {
        out.push(json!({"role": "system", "content": system}));
    }
    for (position, message) in config.messages.iter().enumerate() {
        let index = position + 1;
        match message.role {
            Role::User => user_messages(message, index, &mut out)?,
            Role::Assistant => {
                let echo = reasoning_echo && message.origin.as_deref() == Some(provider);
                out.push(assistant_message(message, index, echo)?);
            }
        }
    }
    Ok(out)
}

fn user_messages(
    message: &RequestMessage,
    index: usize,
    out: &mut Vec<Value>,
) -> Result<(), Unsupported> {
    let refuse = |block: &ContentBlock| Unsupported::Block {
        index,
        role: "user",
        kind: kind_of(block),
    };
    let mut parts = Vec::new();
    let mut moved_images = Vec::new();
    for block in &message.message.content {
        match block {
            ContentBlock::ToolResult(result) => {
                let mut text = String::new();
                for inner in &result.content {
                    match inner {
                        ContentBlock::Text(inner) => {
                            if !text.is_empty() {
                                text.push('\n');
                            }
                            text.push_str(&inner.text);
                        }
                        ContentBlock::Image(image) => moved_images.push(image_part(image)),
                        ContentBlock::Reasoning(_)
                        | ContentBlock::ToolCall(_)
                        | ContentBlock::ToolResult(_)
                        | ContentBlock::Unknown(_) => {
                            return Err(Unsupported::InToolResult {
                                index,
                                role: "user",
                                kind: kind_of(inner),
                            });
                        }
                    }
                }
                out.push(json!({"role": "tool", "tool_call_id": result.call_id, "content": text}));
            }
            ContentBlock::Text(text) => parts.push(json!({"type": "text", "text": text.text})),
            ContentBlock::Image(image) => parts.push(image_part(image)),
            ContentBlock::Reasoning(_) | ContentBlock::ToolCall(_) | ContentBlock::Unknown(_) => {
                return Err(refuse(block));
            }
        }
    }
    if !parts.is_empty() {
        out.push(json!({"role": "user", "content": user_content(parts)}));
    }
    if !moved_images.is_empty() {
        out.push(json!({"role": "user", "content": moved_images}));
    }
    Ok(())
}

/// Text-only content goes out as one string (what every compatible server accepts);
/// anything with images as an array of parts.
fn user_content(parts: Vec<Value>) -> Value {
    let all_text = parts
        .iter()
        .all(|part| part.get("type").and_then(Value::as_str) == Some("text"));
    if !all_text {
        return Value::Array(parts);
    }
    let texts: Vec<&str> = parts
        .iter()
        .filter_map(|part| part.get("text").and_then(Value::as_str))
        .collect();
    Value::String(texts.join("\n\n"))
}

fn image_part(image: &ImageBlock) -> Value {
    let url = match (&image.data, &image.uri) {
        (Some(data), _) => format!("data:{};base64,{data}", image.media_type),
        (None, Some(uri)) => uri.clone(),
        (None, None) => String::new(),
    };
    match &image.detail {
        Some(detail) => json!({"type": "image_url", "image_url": {"url": url, "detail": detail}}),
        None => json!({"type": "image_url", "image_url": {"url": url}}),
    }
}

/// One assistant wire message. Reasoning that is opaque, or not echoed on this route, is
/// left out by design (H-MSG-1: it goes back only to the provider that produced it);
/// anything else without a place on the wire is refused.
fn assistant_message(
    message: &RequestMessage,
    index: usize,
    echo_reasoning: bool,
) -> Result<Value, Unsupported> {
    let mut text = String::new();
    let mut reasoning = String::new();
    let mut calls = Vec::new();
    for block in &message.message.content {
        match block {
            ContentBlock::Text(block) => text.push_str(&block.text),
            ContentBlock::Reasoning(block) if !block.opaque => reasoning.push_str(&block.text),
            ContentBlock::ToolCall(call) => calls.push(tool_call(call)),
            ContentBlock::Reasoning(_) => {}
            ContentBlock::ToolResult(_) | ContentBlock::Image(_) | ContentBlock::Unknown(_) => {
                return Err(Unsupported::Block {
                    index,
                    role: "assistant",
                    kind: kind_of(block),
                });
            }
        }
    }
    let mut wire = JsonObject::new();
    wire.insert("role".into(), Value::String("assistant".into()));
    wire.insert(
        "content".into(),
        if text.is_empty() && !calls.is_empty() {
            Value::Null
        } else {
            Value::String(text)
        },
    );
    if echo_reasoning && !reasoning.is_empty() {
        wire.insert("reasoning_content".into(), Value::String(reasoning));
    }
    if !calls.is_empty() {
        wire.insert("tool_calls".into(), Value::Array(calls));
    }
    Ok(Value::Object(wire))
}

fn tool_call(call: &ToolCallBlock) -> Value {
    let arguments = match &call.raw_arguments {
        Some(raw) => raw.clone(),
        None => call.arguments.to_string(),
    };
    json!({
        "id": call.id,
        "type": "function",
        "function": {"name": call.name, "arguments": arguments},
    })
}
