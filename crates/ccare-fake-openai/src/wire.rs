//! The wire shapes: `chat.completion.chunk` SSE events for a stream, and the assembled
//! `chat.completion` object for a non-streaming answer.

use std::collections::BTreeMap;

use serde_json::{Map, Value, json};

use crate::script::{Script, Step};

/// Fields every chunk of one response shares.
#[derive(Debug, Clone)]
pub(crate) struct ResponseMeta {
    pub(crate) id: String,
    pub(crate) created_secs: u64,
    pub(crate) model: String,
}

/// Turns the steps of one script into SSE bytes, one step at a time.
#[derive(Debug)]
pub(crate) struct StreamEncoder {
    meta: ResponseMeta,
    role_sent: bool,
    /// DeepSeek placement: the usage to attach to the finish chunk at this step index.
    attach_usage: Option<(usize, Value)>,
}

impl StreamEncoder {
    pub(crate) fn new(meta: ResponseMeta, script: &Script) -> StreamEncoder {
        let attach_usage = if script.deepseek_usage {
            let last_finish_idx = script
                .steps
                .iter()
                .rposition(|step| matches!(step, Step::Finish(_)));
            let last_usage = script.steps.iter().rev().find_map(|step| match step {
                Step::Usage(usage) => Some(usage.clone()),
                _ => None,
            });
            match (last_finish_idx, last_usage) {
                (Some(finish_idx), Some(usage)) => Some((finish_idx, usage)),
                _ => None,
            }
        } else {
            None
        };
        StreamEncoder {
            meta,
            role_sent: false,
            attach_usage,
        }
    }

    /// The bytes for step `step_idx`, or `None` if it sends nothing by itself
    /// (a delay, or a usage attached to the finish chunk).
    pub(crate) fn encode(&mut self, step_idx: usize, step: &Step) -> Option<Vec<u8>> {
        match step {
            Step::Text(text) => {
                let mut delta = self.delta_start(false);
                delta.insert("content".to_owned(), Value::String(text.clone()));
                Some(self.choice_event(delta, Value::Null, None))
            }
            Step::Reasoning(text) => {
                let mut delta = self.delta_start(false);
                delta.insert("content".to_owned(), Value::Null);
                delta.insert("reasoning_content".to_owned(), Value::String(text.clone()));
                Some(self.choice_event(delta, Value::Null, None))
            }
            Step::ToolCall {
                index,
                id,
                name,
                arguments,
            } => {
                let mut delta = self.delta_start(true);
                delta.insert(
                    "tool_calls".to_owned(),
                    json!([tool_call_delta(
                        *index,
                        id.as_deref(),
                        name.as_deref(),
                        arguments
                    )]),
                );
                Some(self.choice_event(delta, Value::Null, None))
            }
            Step::Usage(usage) => {
                if self.attach_usage.is_some() {
                    return None;
                }
                let chunk = json!({
                    "id": self.meta.id,
                    "object": "chat.completion.chunk",
                    "created": self.meta.created_secs,
                    "model": self.meta.model,
                    "choices": [],
                    "usage": usage,
                });
                Some(sse_event(&chunk.to_string()))
            }
            Step::Finish(reason) => {
                let usage = match &self.attach_usage {
                    Some((finish_idx, usage)) if *finish_idx == step_idx => Some(usage.clone()),
                    _ => None,
                };
                Some(self.choice_event(Map::new(), Value::String(reason.clone()), usage))
            }
            Step::Raw(raw) => Some(sse_event(raw)),
            Step::RawBytes(bytes) => Some(bytes.clone()),
            Step::Delay(_) => None,
        }
    }

    /// A delta object, with `"role": "assistant"` on the first delta of the response.
    /// OpenAI's role chunk for a tool call also says `"content": null`.
    fn delta_start(&mut self, null_content: bool) -> Map<String, Value> {
        let mut delta = Map::new();
        if !self.role_sent {
            self.role_sent = true;
            delta.insert("role".to_owned(), Value::String("assistant".to_owned()));
            if null_content {
                delta.insert("content".to_owned(), Value::Null);
            }
        }
        delta
    }

    fn choice_event(
        &self,
        delta: Map<String, Value>,
        finish_reason: Value,
        usage: Option<Value>,
    ) -> Vec<u8> {
        let mut chunk = json!({
            "id": self.meta.id,
            "object": "chat.completion.chunk",
            "created": self.meta.created_secs,
            "model": self.meta.model,
            "choices": [{
                "index": 0,
                "delta": Value::Object(delta),
                "finish_reason": finish_reason,
            }],
        });
        if let (Some(usage), Value::Object(chunk)) = (usage, &mut chunk) {
            chunk.insert("usage".to_owned(), usage);
        }
        sse_event(&chunk.to_string())
    }
}

fn tool_call_delta(index: u32, id: Option<&str>, name: Option<&str>, arguments: &str) -> Value {
    let mut call = Map::new();
    call.insert("index".to_owned(), json!(index));
    if let Some(id) = id {
        call.insert("id".to_owned(), json!(id));
        call.insert("type".to_owned(), json!("function"));
    }
    let mut function = Map::new();
    if let Some(name) = name {
        function.insert("name".to_owned(), json!(name));
    }
    function.insert("arguments".to_owned(), json!(arguments));
    call.insert("function".to_owned(), Value::Object(function));
    Value::Object(call)
}

/// `data: <payload>\n\n`.
pub(crate) fn sse_event(payload: &str) -> Vec<u8> {
    format!("data: {payload}\n\n").into_bytes()
}

/// The terminating SSE event.
pub(crate) const SSE_DONE: &[u8] = b"data: [DONE]\n\n";

/// The non-streaming `chat.completion` object the same steps add up to.
///
/// `content` is the concatenated text (`null` without text steps); `reasoning_content`
/// and `tool_calls` (ordered by index, fragments concatenated) appear only if scripted;
/// `finish_reason` is the last finish step's (`null` if none); `usage` is the last
/// usage step's and is absent if none. Raw steps are ignored.
pub(crate) fn assemble(meta: &ResponseMeta, script: &Script) -> Value {
    let mut content: Option<String> = None;
    let mut reasoning: Option<String> = None;
    let mut tool_calls: BTreeMap<u32, (Option<String>, Option<String>, String)> = BTreeMap::new();
    let mut finish_reason = Value::Null;
    let mut usage: Option<Value> = None;
    for step in &script.steps {
        match step {
            Step::Text(text) => content.get_or_insert_with(String::new).push_str(text),
            Step::Reasoning(text) => reasoning.get_or_insert_with(String::new).push_str(text),
            Step::ToolCall {
                index,
                id,
                name,
                arguments,
            } => {
                let entry = tool_calls.entry(*index).or_default();
                if entry.0.is_none() {
                    entry.0.clone_from(id);
                }
                if let Some(name) = name {
                    entry.1.get_or_insert_with(String::new).push_str(name);
                }
                entry.2.push_str(arguments);
            }
            Step::Usage(value) => usage = Some(value.clone()),
            Step::Finish(reason) => finish_reason = Value::String(reason.clone()),
            Step::Raw(_) | Step::RawBytes(_) | Step::Delay(_) => {}
        }
    }
    let mut message = Map::new();
    message.insert("role".to_owned(), json!("assistant"));
    message.insert("content".to_owned(), json!(content));
    if let Some(reasoning) = reasoning {
        message.insert("reasoning_content".to_owned(), json!(reasoning));
    }
    if !tool_calls.is_empty() {
        let calls: Vec<Value> = tool_calls
            .into_values()
            .map(|(id, name, arguments)| {
                json!({
                    "id": id,
                    "type": "function",
                    "function": { "name": name, "arguments": arguments },
                })
            })
            .collect();
        message.insert("tool_calls".to_owned(), Value::Array(calls));
    }
    let mut completion = json!({
        "id": meta.id,
        "object": "chat.completion",
        "created": meta.created_secs,
        "model": meta.model,
        "choices": [{
            "index": 0,
            "message": Value::Object(message),
            "finish_reason": finish_reason,
        }],
    });
    if let (Some(usage), Value::Object(completion)) = (usage, &mut completion) {
        completion.insert("usage".to_owned(), usage);
    }
    completion
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use super::*;
    use crate::script::Script;

    fn meta() -> ResponseMeta {
        ResponseMeta {
            id: "chatcmpl-fake-1".to_owned(),
            created_secs: 7,
            model: "fake-model".to_owned(),
        }
    }

    fn check(script: &Script, expect: &str) {
        let mut encoder = StreamEncoder::new(meta(), script);
        let mut out = Vec::new();
        for (step_idx, step) in script.steps.iter().enumerate() {
            if let Some(bytes) = encoder.encode(step_idx, step) {
                out.extend(bytes);
            }
        }
        assert_eq!(String::from_utf8(out).unwrap(), expect);
    }

    #[test]
    fn role_only_on_first_delta() {
        check(
            &Script::new().text("a").text("b"),
            concat!(
                r#"data: {"id":"chatcmpl-fake-1","object":"chat.completion.chunk","created":7,"model":"fake-model","choices":[{"index":0,"delta":{"role":"assistant","content":"a"},"finish_reason":null}]}"#,
                "\n\n",
                r#"data: {"id":"chatcmpl-fake-1","object":"chat.completion.chunk","created":7,"model":"fake-model","choices":[{"index":0,"delta":{"content":"b"},"finish_reason":null}]}"#,
                "\n\n",
            ),
        );
    }

    #[test]
    fn tool_call_deltas() {
        check(
            &Script::new()
                .tool_call(0, Some("call_1"), Some("read"), "")
                .tool_call(0, None, None, "{}"),
            concat!(
                r#"data: {"id":"chatcmpl-fake-1","object":"chat.completion.chunk","created":7,"model":"fake-model","choices":[{"index":0,"delta":{"role":"assistant","content":null,"tool_calls":[{"index":0,"id":"call_1","type":"function","function":{"name":"read","arguments":""}}]},"finish_reason":null}]}"#,
                "\n\n",
                r#"data: {"id":"chatcmpl-fake-1","object":"chat.completion.chunk","created":7,"model":"fake-model","choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":"{}"}}]},"finish_reason":null}]}"#,
                "\n\n",
            ),
        );
    }

    #[test]
    fn openai_usage_is_its_own_chunk() {
        check(
            &Script::new()
                .finish("stop")
                .usage(json!({"total_tokens": 1})),
            concat!(
                r#"data: {"id":"chatcmpl-fake-1","object":"chat.completion.chunk","created":7,"model":"fake-model","choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}"#,
                "\n\n",
                r#"data: {"id":"chatcmpl-fake-1","object":"chat.completion.chunk","created":7,"model":"fake-model","choices":[],"usage":{"total_tokens":1}}"#,
                "\n\n",
            ),
        );
    }

    #[test]
    fn deepseek_usage_rides_on_the_finish_chunk() {
        check(
            &Script::new()
                .deepseek_usage(true)
                .reasoning("r")
                .usage(json!({"total_tokens": 1}))
                .finish("stop"),
            concat!(
                r#"data: {"id":"chatcmpl-fake-1","object":"chat.completion.chunk","created":7,"model":"fake-model","choices":[{"index":0,"delta":{"role":"assistant","content":null,"reasoning_content":"r"},"finish_reason":null}]}"#,
                "\n\n",
                r#"data: {"id":"chatcmpl-fake-1","object":"chat.completion.chunk","created":7,"model":"fake-model","choices":[{"index":0,"delta":{},"finish_reason":"stop"}],"usage":{"total_tokens":1}}"#,
                "\n\n",
            ),
        );
    }

    #[test]
    fn raw_steps_are_verbatim() {
        check(
            &Script::new()
                .raw("{not json")
                .raw_bytes(b": comment\r\n\r\n".to_vec()),
            "data: {not json\n\n: comment\r\n\r\n",
        );
    }

    #[test]
    fn assembly_without_text_has_null_content() {
        let assembled = assemble(&meta(), &Script::new().finish("length"));
        assert_eq!(
            assembled,
            json!({
                "id": "chatcmpl-fake-1",
                "object": "chat.completion",
                "created": 7,
                "model": "fake-model",
                "choices": [{
                    "index": 0,
                    "message": {"role": "assistant", "content": null},
                    "finish_reason": "length",
                }],
            })
        );
    }
}
