//! What a request asks for (spec H-HOOK-3) and what an adapter receives (H-LLM-1).

use std::sync::Arc;

use ccare_core::{JsonObject, Message, Role};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::credential::ApiCredential;
use crate::purpose::Purpose;
use crate::route::Route;

/// A tool as the model is told about it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolSpec {
    /// The name the model calls it by.
    pub name: String,
    /// What it does, for the model; shared like the schema.
    pub description: Arc<str>,
    /// The JSON Schema of its arguments, shared: every request of every session offers
    /// the host's tools, and copying their schemas per request cost more than the rest
    /// of building it.
    pub input_schema: Arc<Value>,
}

impl ToolSpec {
    /// Whether `other` offers the same tool: the same name and description and an
    /// equal schema ([`same_schema`]).
    pub fn same_as(&self, other: &ToolSpec) -> bool {
        self.name == other.name
            && self.description == other.description
            && same_schema(&self.input_schema, &other.input_schema)
    }
}

/// Whether two tool schemas are equal. A schema is mostly the very one shared by every
/// request, which is seen without walking it.
pub fn same_schema(a: &Arc<Value>, b: &Arc<Value>) -> bool {
    Arc::ptr_eq(a, b) || a == b
}

/// One message of a request, as the derived view gives it.
#[derive(Debug, Clone, PartialEq)]
pub struct RequestMessage {
    /// `user` (prompts, notices, tool results) or `assistant`.
    pub role: Role,
    /// The message; shared with the derived view, never copied.
    pub message: Arc<Message>,
    /// For assistant messages: the provider (config name) that wrote it, so adapters
    /// know whose reasoning they may echo back (H-LLM-7 `reasoning_echo`).
    pub origin: Option<Arc<str>>,
}

impl RequestMessage {
    /// A user message.
    pub fn user(message: Message) -> Self {
        Self {
            role: Role::User,
            message: Arc::new(message),
            origin: None,
        }
    }

    /// An assistant message written by `origin`.
    pub fn assistant(message: Message, origin: Option<Arc<str>>) -> Self {
        Self {
            role: Role::Assistant,
            message: Arc::new(message),
            origin,
        }
    }
}

/// The editable configuration of one call (H-HOOK-3): request hooks change it before
/// it is prepared.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct CallConfig {
    /// `"<provider>/<model>"`.
    pub model: String,
    /// The output limit; the route's default when `None`.
    pub max_tokens: Option<u32>,
    /// Sampling temperature.
    pub temperature: Option<f64>,
    /// Reasoning effort, for providers that take one.
    pub reasoning_effort: Option<String>,
    /// The system prompt.
    pub system: Option<String>,
    /// The tools offered.
    pub tools: Vec<ToolSpec>,
    /// The conversation, in order.
    pub messages: Vec<RequestMessage>,
    /// Why the call is made.
    pub purpose: Purpose,
    /// Extra top-level request fields, sent as they are (provider-specific options).
    pub ext: JsonObject,
    /// The API key of the caller this call is made for (a gateway client's own key,
    /// `[gateway] pass_through_keys`), used instead of the provider's configured key;
    /// `None`: the configured key. Memory only, never logged (its `Debug` is redacted).
    pub credential: Option<ApiCredential>,
}

/// What an adapter receives: the call with its route pinned and limits resolved.
#[derive(Debug, Clone)]
pub struct GenerateRequest {
    /// The call's id, shared by all attempts.
    pub call_id: String,
    /// The attempt, from 1.
    pub attempt: u32,
    /// The pinned route.
    pub route: Route,
    /// The call; `max_tokens` is already resolved against the route. Shared by every
    /// attempt, never copied (a long conversation is large).
    pub config: Arc<CallConfig>,
}
