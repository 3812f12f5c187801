//! `request/header` and `request/context`: what a conversation request carried beyond
//! the log's derived view, logged when it changes (H-LOOP-5 phase 4, H-SURF-5).

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::event::EventData;
use crate::message::{Message, Role};

use super::{REQUEST_CONTEXT, REQUEST_HEADER};

/// Why a `request/header` was written.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum HeaderReason {
    /// The first request of a fresh session.
    Initial,
    /// The first request of this agent on a session that already has a header.
    Resume,
    /// The envelope (route, limits, system prompt, tools) changed.
    Change,
    /// A request carried more than the header and the view: a series delta.
    Series,
}

impl HeaderReason {
    /// The reason as logged.
    pub fn as_str(self) -> &'static str {
        match self {
            HeaderReason::Initial => "initial",
            HeaderReason::Resume => "resume",
            HeaderReason::Change => "change",
            HeaderReason::Series => "series",
        }
    }
}

/// `request/header{header, reason, ext?}`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RequestHeader {
    /// The envelope, or for a series delta the call it belongs to.
    pub header: HeaderBody,
    /// Why it was written.
    pub reason: HeaderReason,
    /// For a series delta: what the request carried beyond the view.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ext: Option<HeaderExt>,
}

impl EventData for RequestHeader {
    const KIND: &'static str = REQUEST_HEADER;
}

/// The `header` of a `request/header`: a full envelope (`initial`, `resume`,
/// `change`), or the call a series delta belongs to (`series`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum HeaderBody {
    /// `{config, system, tools, adapter_defaults}`.
    Envelope(RequestEnvelope),
    /// `{config{call_id}}`.
    Series(SeriesHeader),
}

/// Everything a conversation request carries besides its messages.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RequestEnvelope {
    /// The route and the sampling options.
    pub config: RequestConfig,
    /// The system prompt (`null` when there is none).
    pub system: Option<String>,
    /// The tools offered, in order.
    #[serde(default)]
    pub tools: Vec<RequestTool>,
    /// The adapter's defaults for what the config leaves open.
    #[serde(default)]
    pub adapter_defaults: AdapterDefaults,
}

/// The route and options of a request (`null` for an option left unset).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RequestConfig {
    /// The provider (config name).
    pub provider: String,
    /// The model.
    pub model: String,
    /// The output limit asked for.
    pub max_tokens: Option<u32>,
    /// The sampling temperature.
    pub temperature: Option<f64>,
    /// The reasoning effort.
    pub reasoning_effort: Option<String>,
    /// Why the call was made (`conversation`, ...).
    pub purpose: String,
}

/// A tool as the request offered it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RequestTool {
    /// The name the model calls it by.
    pub name: String,
    /// What it does, for the model; shared like the schema.
    pub description: std::sync::Arc<str>,
    /// The JSON Schema of its arguments, as sent; shared with the request's tool (an
    /// agent keeps its last envelope, and every session's would otherwise hold a copy
    /// of every schema).
    pub input_schema: std::sync::Arc<Value>,
}

/// The adapter's defaults.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct AdapterDefaults {
    /// The route's output limit (`null` when it has none).
    pub max_output_tokens: Option<u32>,
}

/// The `header` of a series delta.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SeriesHeader {
    /// Names the call.
    pub config: SeriesConfig,
}

/// The call a series delta belongs to.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SeriesConfig {
    /// The provider call.
    pub call_id: String,
}

/// The `ext` of a `request/header`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct HeaderExt {
    /// What the request carried beyond the header and the view.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub request_delta: Option<RequestDelta>,
}

/// What a request carried beyond the header and the log's view (H-SURF-5, MP-3): the
/// full message list when request hooks edited it, and the request-only messages of
/// each segment. Also kept on `compaction/summary` for a summary call's request-only
/// messages.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct RequestDelta {
    /// The message list as the request hooks left it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replace_messages: Option<Vec<ReplacedMessage>>,
    /// The request-only messages, by segment owner.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub append_request_only: Option<Vec<RequestOnly>>,
}

/// One message of an edited request.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ReplacedMessage {
    /// Its role in the request.
    pub role: Role,
    /// The message.
    pub message: Message,
}

/// The request-only messages one segment owner added.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RequestOnly {
    /// The owner (plugin names joined by `+` when several were joined into one message).
    pub plugin: String,
    /// The messages, in order.
    pub messages: Vec<Message>,
}

/// `request/context{provider, model, context_window}`: written when the route's
/// provider, model or window changed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RequestContext {
    /// The provider (config name).
    pub provider: String,
    /// The model.
    pub model: String,
    /// The model's context window (`null` when unknown).
    #[serde(default)]
    pub context_window: Option<u64>,
}

impl EventData for RequestContext {
    const KIND: &'static str = REQUEST_CONTEXT;
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kinds::tests::round_trip;

    // The fixtures are events today's agent wrote with the scripted provider.

    const INITIAL: &str = r#"{"seq":3,"time_ms":1796152503246,"type":"request/header","data":{"header":{"config":{"provider":"s","model":"scripted","max_tokens":1024,"temperature":null,"reasoning_effort":null,"purpose":"conversation"},"system":null,"tools":[],"adapter_defaults":{"max_output_tokens":1024}},"reason":"initial"}}"#;

    const SERIES: &str = r#"{"seq":5,"time_ms":1796152503246,"type":"request/header","data":{"header":{"config":{"call_id":"01a23308-2bce-7528-b094-25d9a3617984"}},"reason":"series","ext":{"request_delta":{"append_request_only":[{"plugin":"reminders","messages":[{"content":[{"type":"text","text":"stay short"}]}]}]}}}}"#;

    const CONTEXT: &str = r#"{"seq":4,"time_ms":1796152503246,"type":"request/context","data":{"provider":"s","model":"scripted","context_window":16000}}"#;

    #[test]
    fn request_header_round_trips_todays_bytes() {
        let initial: RequestHeader = round_trip(INITIAL);
        assert_eq!(initial.reason, HeaderReason::Initial);
        assert!(
            matches!(&initial.header, HeaderBody::Envelope(envelope) if envelope.config.max_tokens == Some(1024))
        );
        let series: RequestHeader = round_trip(SERIES);
        assert_eq!(series.reason, HeaderReason::Series);
        assert!(
            matches!(&series.header, HeaderBody::Series(header) if header.config.call_id == "01a23308-2bce-7528-b094-25d9a3617984")
        );
    }

    #[test]
    fn request_context_round_trips_todays_bytes() {
        let context: RequestContext = round_trip(CONTEXT);
        assert_eq!(context.context_window, Some(16_000));
    }
}
