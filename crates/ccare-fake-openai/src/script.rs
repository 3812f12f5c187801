//! What the fake server answers: [`Reply`], the chunk [`Script`] with its builder,
//! [`Step`] and [`End`].

use std::time::Duration;

use serde_json::{Value, json};

use crate::usage::openai_usage;

/// The model name a [`Script`] reports unless told otherwise.
pub const DEFAULT_MODEL: &str = "fake-model";

/// One scripted answer to one `POST /v1/chat/completions`.
///
/// Replies are queued with [`FakeServer::push`](crate::FakeServer::push) and consumed in
/// FIFO order, one per chat-completions request.
#[derive(Debug, Clone, PartialEq)]
pub enum Reply {
    /// Answers as a stream if the request had `"stream": true`, else as one
    /// `chat.completion` JSON assembled from the same chunks.
    Chunks(Script),
    /// An HTTP error: status, extra headers (e.g. `Retry-After`), body text (e.g.
    /// OpenAI's `{"error":{..., "code":"context_length_exceeded"}}`).
    ///
    /// Without a `content-type` among `headers`, the server sends
    /// `application/json` when `body` parses as JSON and `text/plain; charset=utf-8`
    /// otherwise.
    Http {
        /// The HTTP status code. An invalid code (outside 100..=999) is answered as 500.
        status: u16,
        /// Extra response headers, sent in order (a name may repeat).
        headers: Vec<(String, String)>,
        /// The response body, verbatim.
        body: String,
    },
}

impl Reply {
    /// A simple successful stream answering `answer`.
    ///
    /// The text is split after each space (`"Hello big world"` → `"Hello "`, `"big "`,
    /// `"world"`; an empty answer gives one empty chunk), followed by `finish("stop")`
    /// and a usage chunk of [`openai_usage`]`(10, 0, n_chunks, 0)`, then `[DONE]`.
    pub fn text(answer: &str) -> Reply {
        let mut script = Script::new();
        let mut n_chunks: u64 = 0;
        for piece in answer.split_inclusive(' ') {
            script = script.text(piece);
            n_chunks += 1;
        }
        if n_chunks == 0 {
            script = script.text("");
            n_chunks = 1;
        }
        let script = script
            .finish("stop")
            .usage(openai_usage(10, 0, n_chunks, 0));
        Reply::Chunks(script)
    }

    /// OpenAI's context overflow: HTTP 400 with `code: "context_length_exceeded"`.
    ///
    /// Body: `{"error":{"message":"This model's maximum context length is 8192 tokens.
    /// However, your messages resulted in 9000 tokens. Please reduce the length of the
    /// messages.","type":"invalid_request_error","param":"messages",
    /// "code":"context_length_exceeded"}}`.
    pub fn overflow() -> Reply {
        let body = json!({
            "error": {
                "message": "This model's maximum context length is 8192 tokens. However, your messages resulted in 9000 tokens. Please reduce the length of the messages.",
                "type": "invalid_request_error",
                "param": "messages",
                "code": "context_length_exceeded"
            }
        });
        Reply::http(400, body.to_string())
    }

    /// DeepSeek's context overflow: HTTP 400 whose `code` is only
    /// `"invalid_request_error"`, so a client must recognise it by its message
    /// (`"This model's maximum context length is 65536 tokens. However, you requested
    /// 70000 tokens (69000 in the messages, 1000 in the completion). ..."`).
    pub fn deepseek_overflow() -> Reply {
        let body = json!({
            "error": {
                "message": "This model's maximum context length is 65536 tokens. However, you requested 70000 tokens (69000 in the messages, 1000 in the completion). Please reduce the length of the messages or completion.",
                "type": "invalid_request_error",
                "param": null,
                "code": "invalid_request_error"
            }
        });
        Reply::http(400, body.to_string())
    }

    /// HTTP 429 with `Retry-After: <retry_after_secs>` and OpenAI's
    /// `code: "rate_limit_exceeded"` body.
    pub fn rate_limited(retry_after_secs: u64) -> Reply {
        let body = json!({
            "error": {
                "message": "Rate limit reached for requests. Please try again later.",
                "type": "requests",
                "param": null,
                "code": "rate_limit_exceeded"
            }
        });
        Reply::Http {
            status: 429,
            headers: vec![("retry-after".to_owned(), retry_after_secs.to_string())],
            body: body.to_string(),
        }
    }

    /// An HTTP reply with `status`, no extra headers and `body`.
    pub fn http(status: u16, body: impl Into<String>) -> Reply {
        Reply::Http {
            status,
            headers: Vec::new(),
            body: body.into(),
        }
    }
}

impl From<Script> for Reply {
    fn from(script: Script) -> Reply {
        Reply::Chunks(script)
    }
}

/// A scripted chat completion: the chunks to send, in order, and how the stream ends.
///
/// Build one with the chained methods:
///
/// ```
/// use ccare_fake_openai::{End, Script, openai_usage};
/// let script = Script::new()
///     .text("Hel")
///     .delay_ms(50)
///     .text("lo")
///     .finish("stop")
///     .usage(openai_usage(12, 0, 2, 0))
///     .end(End::Done);
/// assert_eq!(script.steps.len(), 5);
/// ```
#[derive(Debug, Clone, PartialEq)]
pub struct Script {
    /// The steps, sent in order.
    pub steps: Vec<Step>,
    /// The `model` field of every chunk; [`DEFAULT_MODEL`] unless set.
    pub model: String,
    /// How a stream ends after the last step.
    pub end: End,
    /// DeepSeek placement of usage: when true and the script has a [`Step::Finish`],
    /// the last [`Step::Usage`] object is attached as `"usage"` to the last finish
    /// chunk (as DeepSeek streams do) and no separate `"choices": []` usage chunk is
    /// sent. When false (OpenAI with `stream_options.include_usage`), each `Usage`
    /// step is its own chunk with `"choices": []`.
    pub deepseek_usage: bool,
    /// The `id` of every chunk; `chatcmpl-fake-N` (N counts responses from 1) if `None`.
    pub id: Option<String>,
}

impl Default for Script {
    fn default() -> Script {
        Script {
            steps: Vec::new(),
            model: DEFAULT_MODEL.to_owned(),
            end: End::Done,
            deepseek_usage: false,
            id: None,
        }
    }
}

impl Script {
    /// An empty script: no steps, model [`DEFAULT_MODEL`], [`End::Done`].
    pub fn new() -> Script {
        Script::default()
    }

    /// Appends any step.
    pub fn step(mut self, step: Step) -> Script {
        self.steps.push(step);
        self
    }

    /// Appends a `delta.content` chunk.
    pub fn text(self, text: impl Into<String>) -> Script {
        self.step(Step::Text(text.into()))
    }

    /// Appends a `delta.reasoning_content` chunk (DeepSeek reasoner).
    pub fn reasoning(self, text: impl Into<String>) -> Script {
        self.step(Step::Reasoning(text.into()))
    }

    /// Appends one `delta.tool_calls` chunk for the call at `index`. Give `id` and
    /// `name` on the first delta of an index (then `"type": "function"` is sent too)
    /// and `None` on the argument continuations.
    pub fn tool_call(
        self,
        index: u32,
        id: Option<&str>,
        name: Option<&str>,
        arguments: impl Into<String>,
    ) -> Script {
        self.step(Step::ToolCall {
            index,
            id: id.map(str::to_owned),
            name: name.map(str::to_owned),
            arguments: arguments.into(),
        })
    }

    /// Appends a usage step (see [`Step::Usage`] and [`Script::deepseek_usage`]).
    pub fn usage(self, usage: Value) -> Script {
        self.step(Step::Usage(usage))
    }

    /// Appends a chunk with this `finish_reason`.
    pub fn finish(self, reason: impl Into<String>) -> Script {
        self.step(Step::Finish(reason.into()))
    }

    /// Appends `data: <raw>\n\n`, verbatim.
    pub fn raw(self, raw: impl Into<String>) -> Script {
        self.step(Step::Raw(raw.into()))
    }

    /// Appends bytes written verbatim to the stream.
    pub fn raw_bytes(self, bytes: impl Into<Vec<u8>>) -> Script {
        self.step(Step::RawBytes(bytes.into()))
    }

    /// Appends a pause before the next step.
    pub fn delay(self, duration: Duration) -> Script {
        self.step(Step::Delay(duration))
    }

    /// Appends a pause of `delay_ms` milliseconds before the next step.
    pub fn delay_ms(self, delay_ms: u64) -> Script {
        self.delay(Duration::from_millis(delay_ms))
    }

    /// Sets how the stream ends.
    pub fn end(mut self, end: End) -> Script {
        self.end = end;
        self
    }

    /// Sets the `model` field of the chunks.
    pub fn model(mut self, model: impl Into<String>) -> Script {
        self.model = model.into();
        self
    }

    /// Sets the `id` field of the chunks.
    pub fn id(mut self, id: impl Into<String>) -> Script {
        self.id = Some(id.into());
        self
    }

    /// Chooses DeepSeek's usage placement (see [`Script::deepseek_usage`] the field).
    pub fn deepseek_usage(mut self, deepseek_usage: bool) -> Script {
        self.deepseek_usage = deepseek_usage;
        self
    }
}

/// One step of a [`Script`].
#[derive(Debug, Clone, PartialEq)]
pub enum Step {
    /// A chunk with `delta.content`.
    Text(String),
    /// A chunk with `delta.reasoning_content` (and `delta.content: null`, as DeepSeek
    /// sends it).
    Reasoning(String),
    /// One `delta.tool_calls` entry. The first delta of an index should carry `id` and
    /// `name`; a delta with an `id` also carries `"type": "function"`.
    ToolCall {
        /// The tool call's `index`.
        index: u32,
        /// The call id, e.g. `call_abc`; sent only if `Some`.
        id: Option<String>,
        /// The function name; sent only if `Some`.
        name: Option<String>,
        /// A fragment of the JSON arguments (always sent, may be empty).
        arguments: String,
    },
    /// A final chunk with `"choices": []` and this `"usage"` object, as
    /// `stream_options.include_usage` produces (but see [`Script::deepseek_usage`]).
    Usage(Value),
    /// A chunk with an empty delta and this `finish_reason` (`"stop"`, `"length"`,
    /// `"tool_calls"`, `"content_filter"` or anything).
    Finish(String),
    /// One SSE event sent verbatim as `data: <raw>\n\n` (for malformed-JSON tests).
    Raw(String),
    /// Bytes written verbatim (comments, CRLF, BOM tests).
    RawBytes(Vec<u8>),
    /// Sleep before the next step. Each step goes to the socket as soon as it is
    /// produced, so a delay is observable by the client.
    Delay(Duration),
}

/// How a streamed [`Script`] ends after its last step.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum End {
    /// Send `data: [DONE]\n\n`, then end the body cleanly.
    #[default]
    Done,
    /// End the body cleanly without `[DONE]`.
    Close,
    /// Abort the connection mid-body (the chunked body never gets its terminator), so
    /// the client sees a transport error rather than a clean end.
    Disconnect,
    /// Keep the connection open, sending nothing, until the server is dropped (then the
    /// connection is aborted).
    Stall,
}
