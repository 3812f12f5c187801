//! The OpenAI chat-completions wire shapes the gateway reads and writes (GW-1, GW-5,
//! GW-6), with their schemas for the OpenAPI document.
//!
//! Requests are read leniently: OpenAI clients send many fields the gateway does not
//! use (`store`, `metadata`, …) and an SDK upgrade must not turn them into 400s, so
//! unknown fields are ignored rather than refused. A field whose answer the client
//! would miss is refused instead: `logprobs: true`, the older `functions` and
//! `function_call`. The sampling fields the upstream request
//! carries (`temperature`, the output limit, `reasoning_effort`) are passed on, and so
//! are [`ChatRequest::passed_fields`] (`stop`, `seed`, `response_format`, the checked
//! `tool_choice`, ...).

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// `POST /v1/chat/completions`'s body: the fields the gateway reads.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
pub struct ChatRequest {
    /// `<provider>/<model>`, or a bare model name one configured route serves.
    pub model: String,
    /// The whole conversation as the client sees it.
    pub messages: Vec<ChatMessage>,
    /// Whether to answer as server-sent events.
    #[serde(default)]
    pub stream: Option<bool>,
    /// Streaming options.
    #[serde(default)]
    pub stream_options: Option<StreamOptions>,
    /// A session key (GW-2).
    #[serde(default)]
    pub user: Option<String>,
    /// A session key preferred over `user` (GW-2).
    #[serde(default)]
    pub prompt_cache_key: Option<String>,
    /// The client's tools: the turn's caller-executed tools (GW-4, ACT-3).
    #[serde(default)]
    pub tools: Option<Vec<ChatTool>>,
    /// Sampling temperature (0 to 2), sent upstream; absent: the route's default.
    #[serde(default)]
    pub temperature: Option<f64>,
    /// The output limit, sent upstream as `max_tokens`; preferred over `max_tokens`.
    #[serde(default)]
    pub max_completion_tokens: Option<u32>,
    /// The older name of the output limit; absent both: the route's
    /// `max_output_tokens`.
    #[serde(default)]
    pub max_tokens: Option<u32>,
    /// Reasoning effort (`low`, `medium`, `high`, …), sent upstream as given.
    #[serde(default)]
    pub reasoning_effort: Option<String>,
    /// How many choices: only 1 is answered.
    #[serde(default)]
    pub n: Option<u32>,
    /// Stop sequences (a string or a list), sent upstream as given.
    #[serde(default)]
    pub stop: Option<serde_json::Value>,
    /// A sampling seed, sent upstream.
    #[serde(default)]
    pub seed: Option<i64>,
    /// Nucleus sampling, sent upstream.
    #[serde(default)]
    pub top_p: Option<f64>,
    /// Frequency penalty, sent upstream.
    #[serde(default)]
    pub frequency_penalty: Option<f64>,
    /// Presence penalty, sent upstream.
    #[serde(default)]
    pub presence_penalty: Option<f64>,
    /// The answer's format (`{"type": "json_object"}`, a JSON schema), sent upstream
    /// as given.
    #[serde(default)]
    pub response_format: Option<serde_json::Value>,
    /// Whether the model may call several tools in one answer, sent upstream.
    #[serde(default)]
    pub parallel_tool_calls: Option<bool>,
    /// How the model must use the client's tools; read by [`ChatRequest::tool_choice`].
    /// Kept as JSON here so that a shape the gateway does not take is a 400 naming
    /// `tool_choice`, not an unreadable body.
    #[serde(default)]
    pub tool_choice: Option<serde_json::Value>,
    /// Log probabilities: `true` is refused (the gateway does not return them yet),
    /// rather than answered without them.
    #[serde(default)]
    pub logprobs: Option<bool>,
    /// The function declarations of OpenAI's older function calling: refused (the
    /// model would not see them), `tools` replace them.
    #[serde(default)]
    pub functions: Option<serde_json::Value>,
    /// The older function calling's choice: refused with `functions`.
    #[serde(default)]
    pub function_call: Option<serde_json::Value>,
}

/// `tool_choice` as the gateway takes it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ToolChoice {
    /// `none`: the model answers in text and calls no tool.
    None,
    /// `auto`: the model decides (what leaving it out means).
    Auto,
    /// `required`: the model must call one or more of the client's tools. The gateway
    /// offers only the client's tools for that request, so the answer always goes back
    /// to the client with tool calls and no gateway-owned tool is forced in a loop.
    Required,
    /// The model must call this function of the client's tools.
    Function(String),
}

impl ToolChoice {
    /// The value sent upstream.
    pub fn to_json(&self) -> serde_json::Value {
        match self {
            Self::None => serde_json::Value::from("none"),
            Self::Auto => serde_json::Value::from("auto"),
            Self::Required => serde_json::Value::from("required"),
            Self::Function(name) => {
                serde_json::json!({"type": "function", "function": {"name": name}})
            }
        }
    }
}

/// `tool_choice` on the wire: a mode, or a named function.
#[derive(Deserialize)]
#[serde(untagged)]
enum ToolChoiceWire {
    /// `none`, `auto` or `required`.
    Mode(String),
    /// `{"type": "function", "function": {"name": …}}`.
    Named {
        #[serde(rename = "type")]
        kind: String,
        function: NamedFunction,
    },
}

/// The function a named `tool_choice` forces.
#[derive(Deserialize)]
struct NamedFunction {
    name: String,
}

/// The shapes `tool_choice` takes, for its 400.
const TOOL_CHOICE_SHAPES: &str =
    r#"send "none", "auto", "required" or {"type": "function", "function": {"name": …}}"#;

impl ChatRequest {
    /// The output limit the client asked for, if any.
    pub fn output_limit(&self) -> Option<u32> {
        self.max_completion_tokens.or(self.max_tokens)
    }

    /// The fields sent upstream as they are, for this request's model calls.
    pub fn passed_fields(&self) -> serde_json::Map<String, serde_json::Value> {
        let mut fields = serde_json::Map::new();
        let mut put = |key: &str, value: Option<serde_json::Value>| {
            if let Some(value) = value.filter(|value| !value.is_null()) {
                fields.insert(key.to_owned(), value);
            }
        };
        put("stop", self.stop.clone());
        put("seed", self.seed.map(serde_json::Value::from));
        put("top_p", self.top_p.map(serde_json::Value::from));
        put(
            "frequency_penalty",
            self.frequency_penalty.map(serde_json::Value::from),
        );
        put(
            "presence_penalty",
            self.presence_penalty.map(serde_json::Value::from),
        );
        put("response_format", self.response_format.clone());
        put(
            "parallel_tool_calls",
            self.parallel_tool_calls.map(serde_json::Value::from),
        );
        put(
            "tool_choice",
            self.tool_choice()
                .ok()
                .flatten()
                .map(|choice| choice.to_json()),
        );
        fields
    }

    /// The request's `tool_choice`, checked against its `tools`: a function it names
    /// must be one of them, and `required` needs one. `Err` says what is wrong, naming
    /// the field.
    pub fn tool_choice(&self) -> Result<Option<ToolChoice>, String> {
        let Some(value) = self.tool_choice.as_ref().filter(|value| !value.is_null()) else {
            return Ok(None);
        };
        let declared = |name: &str| {
            self.tools
                .iter()
                .flatten()
                .any(|tool| tool.function.name == name)
        };
        match ToolChoiceWire::deserialize(value) {
            Ok(ToolChoiceWire::Mode(mode)) => match mode.as_str() {
                "none" => Ok(Some(ToolChoice::None)),
                "auto" => Ok(Some(ToolChoice::Auto)),
                "required" if self.tools.as_ref().is_some_and(|tools| !tools.is_empty()) => {
                    Ok(Some(ToolChoice::Required))
                }
                "required" => {
                    Err("tool_choice: \"required\" needs at least one tool in tools".to_owned())
                }
                other => Err(format!(
                    "tool_choice: {other:?} is not a mode the gateway takes; {TOOL_CHOICE_SHAPES}"
                )),
            },
            Ok(ToolChoiceWire::Named { kind, function }) if kind == "function" => {
                if declared(&function.name) {
                    Ok(Some(ToolChoice::Function(function.name)))
                } else {
                    Err(format!(
                        "tool_choice: names the function {:?}, which is not one of tools",
                        function.name
                    ))
                }
            }
            Ok(ToolChoiceWire::Named { kind, .. }) => Err(format!(
                "tool_choice: type {kind:?} is not one the gateway takes; {TOOL_CHOICE_SHAPES}"
            )),
            Err(_) => Err(format!(
                "tool_choice: {value} is not a shape the gateway takes; {TOOL_CHOICE_SHAPES}"
            )),
        }
    }

    /// What is wrong with the sampling fields or `tool_choice`, naming the field;
    /// `None`: nothing.
    pub fn fields_problem(&self) -> Option<String> {
        if self.logprobs == Some(true) {
            return Some(
                "logprobs: the gateway does not return log probabilities; leave it out or send false"
                    .to_owned(),
            );
        }
        let legacy = [
            ("functions", &self.functions),
            ("function_call", &self.function_call),
        ];
        if let Some((field, _)) = legacy
            .iter()
            .find(|(_, value)| value.as_ref().is_some_and(|value| !value.is_null()))
        {
            return Some(format!(
                "{field}: the older function-calling fields are not taken; declare the functions in tools (and choose with tool_choice)"
            ));
        }
        if self.n.is_some_and(|n| n != 1) {
            return Some(
                "n: the gateway answers with one choice; send n = 1 or leave it out".to_owned(),
            );
        }
        if let Some(temperature) = self.temperature
            && !(0.0..=2.0).contains(&temperature)
        {
            return Some(format!("temperature: {temperature} is outside 0 to 2"));
        }
        let limits = [
            ("max_completion_tokens", self.max_completion_tokens),
            ("max_tokens", self.max_tokens),
        ];
        if let Some((field, _)) = limits.iter().find(|(_, limit)| *limit == Some(0)) {
            return Some(format!("{field}: must be at least 1"));
        }
        if self
            .reasoning_effort
            .as_deref()
            .is_some_and(|effort| effort.trim().is_empty())
        {
            return Some("reasoning_effort: must not be empty".to_owned());
        }
        self.tool_choice().err()
    }
}

/// One of the client's tools, in OpenAI's shape.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
pub struct ChatTool {
    /// Always `function`.
    #[serde(rename = "type", default)]
    pub kind: Option<String>,
    /// The function.
    pub function: FunctionDeclaration,
}

/// A client tool's function.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
pub struct FunctionDeclaration {
    /// The name the model calls it by.
    pub name: String,
    /// What it does, for the model.
    #[serde(default)]
    pub description: Option<String>,
    /// The JSON Schema of its arguments (an object schema; absent: no arguments).
    #[serde(default)]
    pub parameters: Option<serde_json::Value>,
}

/// `stream_options`.
#[derive(Debug, Clone, Default, Deserialize, JsonSchema)]
pub struct StreamOptions {
    /// Whether a last chunk with `choices: []` carries the usage.
    #[serde(default)]
    pub include_usage: Option<bool>,
}

/// One message of the client's conversation.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
pub struct ChatMessage {
    /// `system`, `developer`, `user`, `assistant` or `tool`.
    pub role: String,
    /// A string, or a list of content parts.
    #[serde(default)]
    pub content: Option<ChatContent>,
    /// Tool calls of an assistant message (read leniently: only `id`,
    /// `function.name` and `function.arguments` matter).
    #[serde(default)]
    pub tool_calls: Option<serde_json::Value>,
    /// The call a `tool` message answers.
    #[serde(default)]
    pub tool_call_id: Option<String>,
}

/// A message's content: a string or parts.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(untagged)]
pub enum ChatContent {
    /// Plain text.
    Text(String),
    /// Content parts; the text parts are read.
    Parts(Vec<ContentPart>),
}

/// One content part.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
pub struct ContentPart {
    /// `text` or `image_url` (others are refused naming the part).
    #[serde(rename = "type")]
    pub kind: String,
    /// The text of a `text` part.
    #[serde(default)]
    pub text: Option<String>,
    /// The image of an `image_url` part.
    #[serde(default)]
    pub image_url: Option<ImageUrl>,
}

/// An `image_url` part's image.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
pub struct ImageUrl {
    /// `data:image/<type>;base64,<data>`, or an `http(s)` URL the upstream fetches.
    pub url: String,
    /// `auto`, `low` or `high`.
    #[serde(default)]
    pub detail: Option<String>,
}

impl ChatMessage {
    /// The message's text: the string, or its text parts joined (its images are
    /// read by `parts`).
    pub fn text(&self) -> String {
        match &self.content {
            None => String::new(),
            Some(ChatContent::Text(text)) => text.clone(),
            Some(ChatContent::Parts(parts)) => parts
                .iter()
                .filter(|part| part.kind == "text")
                .filter_map(|part| part.text.as_deref())
                .collect::<Vec<_>>()
                .join(""),
        }
    }
}

/// `GET /v1/models`'s answer.
#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct ModelList {
    /// Always `list`.
    pub object: &'static str,
    /// The configured routes.
    pub data: Vec<ModelEntry>,
}

/// One configured route as a model.
#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct ModelEntry {
    /// `<provider>/<model>`.
    pub id: String,
    /// Always `model`.
    pub object: &'static str,
    /// Always 0: routes have no creation time.
    pub created: u64,
    /// The provider's config name.
    pub owned_by: String,
}

/// Token usage in OpenAI's shape, from the upstream's real usage.
#[derive(Debug, Clone, Copy, Serialize, JsonSchema)]
pub struct Usage {
    /// Input tokens, cached ones included.
    pub prompt_tokens: u64,
    /// Output tokens, reasoning included.
    pub completion_tokens: u64,
    /// Their sum.
    pub total_tokens: u64,
    /// The cached share of the input.
    pub prompt_tokens_details: PromptDetails,
    /// The reasoning share of the output.
    pub completion_tokens_details: CompletionDetails,
}

/// `usage.prompt_tokens_details`.
#[derive(Debug, Clone, Copy, Serialize, JsonSchema)]
pub struct PromptDetails {
    /// Input tokens read from the provider's cache.
    pub cached_tokens: u64,
}

/// `usage.completion_tokens_details`.
#[derive(Debug, Clone, Copy, Serialize, JsonSchema)]
pub struct CompletionDetails {
    /// Reasoning tokens.
    pub reasoning_tokens: u64,
}

impl Usage {
    /// OpenAI's shape of `usage`.
    pub fn of(usage: &ccare_core::TokenUsage) -> Self {
        let prompt = usage.input_total();
        Self {
            prompt_tokens: prompt,
            completion_tokens: usage.output,
            total_tokens: prompt.saturating_add(usage.output),
            prompt_tokens_details: PromptDetails {
                cached_tokens: usage.cache_read,
            },
            completion_tokens_details: CompletionDetails {
                reasoning_tokens: usage.reasoning,
            },
        }
    }
}

/// A non-streamed answer.
#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct Completion {
    /// `chatcmpl-…`.
    pub id: String,
    /// Always `chat.completion`.
    pub object: &'static str,
    /// Unix seconds.
    pub created: u64,
    /// The model the client asked for.
    pub model: String,
    /// One choice.
    pub choices: Vec<Choice>,
    /// The upstream's usage, summed over the turn's requests.
    pub usage: Option<Usage>,
}

/// The one choice of a non-streamed answer.
#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct Choice {
    /// Always 0.
    pub index: u32,
    /// The assistant's message.
    pub message: AnswerMessage,
    /// `stop`, `length` or `tool_calls`.
    pub finish_reason: String,
}

/// The assistant's message of a non-streamed answer.
#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct AnswerMessage {
    /// Always `assistant`.
    pub role: &'static str,
    /// The answer's text; `null` when the answer is only tool calls.
    pub content: Option<String>,
    /// The model's reasoning, passed through, when it had any.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reasoning_content: Option<String>,
    /// The client's tool calls the model made (GW-4); absent when none.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tool_calls: Option<Vec<ToolCallOut>>,
}

/// One tool call the client is to run, in OpenAI's shape.
#[derive(Debug, Clone, PartialEq, Serialize, JsonSchema)]
pub struct ToolCallOut {
    /// The call id its `tool` message must cite.
    pub id: String,
    /// Always `function`.
    #[serde(rename = "type")]
    pub kind: &'static str,
    /// The function called.
    pub function: FunctionCall,
}

/// The function of a tool call.
#[derive(Debug, Clone, PartialEq, Serialize, JsonSchema)]
pub struct FunctionCall {
    /// The tool's name.
    pub name: String,
    /// The arguments as a JSON text.
    pub arguments: String,
}

/// A streamed tool call: the whole call in one delta, at its index (from 0).
#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct ToolCallDelta {
    /// The call's position in the answer, from 0.
    pub index: u32,
    /// The call id.
    pub id: String,
    /// Always `function`.
    #[serde(rename = "type")]
    pub kind: &'static str,
    /// The function called.
    pub function: FunctionCall,
}

/// One streamed chunk.
#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct CompletionChunk {
    /// The same id on every chunk of an answer.
    pub id: String,
    /// Always `chat.completion.chunk`.
    pub object: &'static str,
    /// Unix seconds, the same on every chunk.
    pub created: u64,
    /// The model the client asked for.
    pub model: String,
    /// One choice, or none on the usage chunk.
    pub choices: Vec<ChunkChoice>,
    /// `null` on every chunk but the usage chunk; absent without `include_usage`.
    #[serde(skip_serializing_if = "UsageField::is_absent")]
    pub usage: UsageField,
}

/// A chunk's `usage` field: absent, `null`, or the usage.
#[derive(Debug, Clone, Copy, JsonSchema)]
pub enum UsageField {
    /// Without `include_usage`.
    Absent,
    /// `null`.
    Null,
    /// The usage.
    Usage(Usage),
}

impl UsageField {
    fn is_absent(&self) -> bool {
        matches!(self, UsageField::Absent)
    }
}

impl Serialize for UsageField {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        match self {
            UsageField::Absent | UsageField::Null => serializer.serialize_none(),
            UsageField::Usage(usage) => usage.serialize(serializer),
        }
    }
}

/// A chunk's choice.
#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct ChunkChoice {
    /// Always 0.
    pub index: u32,
    /// What this chunk adds.
    pub delta: Delta,
    /// `null` until the final chunk.
    pub finish_reason: Option<String>,
}

/// What a chunk adds to the answer.
#[derive(Debug, Clone, Default, Serialize, JsonSchema)]
pub struct Delta {
    /// `assistant` on the first chunk.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub role: Option<&'static str>,
    /// A piece of the answer's text.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub content: Option<String>,
    /// A piece of the model's reasoning.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reasoning_content: Option<String>,
    /// The client's tool calls (GW-4).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tool_calls: Option<Vec<ToolCallDelta>>,
}

/// An error in OpenAI's shape (GW-6).
#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct ErrorReply {
    /// The error.
    pub error: ErrorDetail,
}

/// `error`.
#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct ErrorDetail {
    /// What went wrong, for a person.
    pub message: String,
    /// OpenAI's error type: `invalid_request_error`, `api_error`, …
    #[serde(rename = "type")]
    pub kind: String,
    /// Our stable code, e.g. `REQUEST_BUDGET_EXCEEDED`, or OpenAI's `model_not_found`.
    pub code: String,
}
