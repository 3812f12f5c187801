//! The sessions API's request and response bodies (API-1..4): typed, `camelCase` on
//! the wire like every HTTP body of the specs (watch-rules-ui.md's naming note), with
//! their JSON Schemas generated for the OpenAPI document (API-5).
//!
//! Request bodies refuse unknown fields, so a misspelt field is a 400 naming it
//! instead of a silently ignored option.

use ccare_store::SessionRecord;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use ccare_core::rfc3339_utc;

/// The most sessions one page of `GET /api/sessions` holds.
pub const MAX_PAGE: u64 = 200;
/// A page's size when the query names none.
pub const DEFAULT_PAGE: u64 = 50;

/// One stored session, as `ccare sessions list --json` describes it (in camelCase).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SessionSummary {
    /// The session id.
    pub id: String,
    /// Creation time, RFC 3339 in UTC with milliseconds.
    pub created_at: String,
    /// Creation time, ms since the epoch.
    pub created_ms: i64,
    /// How many durable events it has (the next seq to write).
    pub events: u64,
    /// The session it was forked from.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parent: Option<String>,
    /// How many events it inherited from `parent`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub seed_length: Option<u64>,
}

impl SessionSummary {
    /// The summary of a stored record.
    pub fn of(record: &SessionRecord) -> Self {
        Self {
            id: record.id.as_str().to_owned(),
            created_at: rfc3339_utc(record.created_ms),
            created_ms: record.created_ms,
            events: record.head,
            parent: record
                .parent
                .as_ref()
                .map(|parent| parent.as_str().to_owned()),
            seed_length: record.seed_length,
        }
    }
}

/// `GET /api/sessions`: one page of sessions, newest first.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SessionPage {
    /// The sessions of this page, newest first.
    pub sessions: Vec<SessionSummary>,
    /// How many sessions are stored.
    pub total: u64,
    /// The offset of this page's first session.
    pub offset: u64,
    /// The offset of the next page; null on the last page.
    pub next_offset: Option<u64>,
}

/// The query of `GET /api/sessions`, as sent (checked by the handler so a bad value is
/// a 400 `invalid-query` naming the parameter).
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PageQuery {
    /// `1..=200`, default 50.
    pub limit: Option<String>,
    /// `≥ 0`, default 0.
    pub offset: Option<String>,
}

/// `POST /api/sessions`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct CreateSession {
    /// `"<provider>/<model>"` the session's turns use instead of the profile's model
    /// (kept in the session's metadata, so it holds across restarts).
    #[serde(default)]
    pub model: Option<String>,
    /// The profile; only the default profile is served by `ccare serve` today.
    #[serde(default)]
    pub profile: Option<String>,
}

/// What a session is doing now.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum LiveState {
    /// A turn runs, or waking work is queued.
    Running,
    /// Nothing runs and nothing waits.
    Idle,
    /// A turn waits for caller-executed tool results (`openCalls`, ACT-3).
    AwaitingTools,
}

/// Who else drives a session (its lease's holder, ACT-1).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct LeaseHolderInfo {
    /// The holder's host name.
    pub host: String,
    /// The holder's process id.
    pub pid: u32,
    /// When the lease expires unless renewed, ms since the epoch.
    pub expires_ms: i64,
}

/// `GET /api/sessions/{id}`: the record and its live state.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SessionDetail {
    /// The stored record.
    #[serde(flatten)]
    pub session: SessionSummary,
    /// The seq of its last event; null while it has none.
    pub head_seq: Option<u64>,
    /// What it is doing now.
    pub state: LiveState,
    /// The caller-executed calls it awaits results for (empty unless awaiting-tools).
    pub open_calls: Vec<String>,
    /// Whether this server runs an actor of it now.
    pub active: bool,
    /// Another process holding its lease, when one does (commands then answer 409
    /// `SESSION_BUSY`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub held_by: Option<LeaseHolderInfo>,
    /// The store error that fenced its actor here (H-STORE-6: nothing more is
    /// appended until the session is opened again, which repairs it); absent while
    /// it is writable.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fence: Option<String>,
}

/// `POST /api/sessions/{id}/fork`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct ForkBody {
    /// The last inherited event's seq (must end no turn midway); default the source's
    /// last event.
    #[serde(default)]
    pub at_seq: Option<u64>,
}

/// How a message enters a session.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum MessageMode {
    /// Opens a turn; queued after the turns before it when the session is busy.
    #[default]
    Prompt,
    /// Enters the running turn at its next step (or opens a turn when idle).
    Steer,
    /// Queued for the turn after the running one (the same as `prompt`: a turn-opening
    /// message, queued in order).
    Followup,
}

impl MessageMode {
    /// Every mode's wire name, for error messages.
    pub const NAMES: [&'static str; 3] = ["prompt", "steer", "followup"];

    /// The mode of a wire name.
    pub fn parse(name: &str) -> Option<Self> {
        match name {
            "prompt" => Some(Self::Prompt),
            "steer" => Some(Self::Steer),
            "followup" => Some(Self::Followup),
            _ => None,
        }
    }
}

/// `POST /api/sessions/{id}/messages`.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct MessageBody {
    /// The message text.
    pub text: String,
    /// `prompt` (default), `steer` or `followup`; checked by the handler so a bad
    /// value is refused naming the field.
    #[serde(default)]
    #[schemars(with = "Option<MessageMode>")]
    pub mode: Option<String>,
    /// Tools of this message's turn that the caller runs (ACT-3), the set `ccare run
    /// --external-tools` declares: when the model calls one, the turn waits in
    /// `awaiting-tools` for `POST …/tool-results`. Their names must differ from each
    /// other and from the host's tools.
    #[serde(default)]
    pub tools: Vec<ToolDeclaration>,
}

/// The longest tool name a provider accepts.
pub const MAX_TOOL_NAME: usize = 64;

/// A caller-executed tool, as the model is told about it.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct ToolDeclaration {
    /// The name the model calls it by: 1–64 of `A–Z a–z 0–9 _ -`.
    pub name: String,
    /// What it does, for the model.
    #[serde(default)]
    pub description: String,
    /// The JSON Schema of its arguments: an object schema (`"type": "object"`).
    pub input_schema: serde_json::Value,
}

impl ToolDeclaration {
    /// What is wrong with this declaration, as `(field, problem)` (the field relative
    /// to the declaration); `None` when it can be offered to a model.
    pub fn problem(&self) -> Option<(&'static str, String)> {
        let name_ok = (1..=MAX_TOOL_NAME).contains(&self.name.len())
            && self
                .name
                .bytes()
                .all(|byte| byte.is_ascii_alphanumeric() || byte == b'_' || byte == b'-');
        if !name_ok {
            return Some((
                "name",
                format!(
                    "expected 1-{MAX_TOOL_NAME} characters of A-Z a-z 0-9 _ -, got {:?}",
                    self.name
                ),
            ));
        }
        match &self.input_schema {
            serde_json::Value::Object(schema) => match schema.get("type") {
                Some(serde_json::Value::String(kind)) if kind == "object" => None,
                Some(other) => Some((
                    "inputSchema",
                    format!("expected an object schema (\"type\": \"object\"), got type {other}"),
                )),
                None => Some((
                    "inputSchema",
                    "expected an object schema (\"type\": \"object\"), got no type".to_owned(),
                )),
            },
            other => Some((
                "inputSchema",
                format!("expected a JSON Schema object, got {other}"),
            )),
        }
    }
}

/// One caller-executed call's result.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct ToolResultItem {
    /// The call it answers.
    pub call_id: String,
    /// The result's text, as the model will read it.
    pub text: String,
    /// Whether the call failed.
    #[serde(default)]
    pub is_error: bool,
}

/// `POST /api/sessions/{id}/tool-results`: exactly the open calls' results (ACT-3).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ToolResultsBody {
    /// One result per open call.
    pub results: Vec<ToolResultItem>,
}

/// `POST /api/sessions/{id}/cancel` (the body may be empty).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct CancelBody {
    /// Keep the messages queued before the cancel (H-CANCEL-3); default false.
    #[serde(default)]
    pub keep_inbox: bool,
}

/// A command's answer (202): it is durable and will be applied in order.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Accepted {
    /// Always true.
    pub accepted: bool,
    /// The seq the command's events will follow (the session's last event when it
    /// was accepted; null for an empty session): `GET …/events` with `Last-Event-ID`
    /// set to it shows what the command does.
    pub after_seq: Option<u64>,
}

/// The query of `GET /api/sessions/{id}/events`.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EventsQuery {
    /// The first seq to send (default 0); `Last-Event-ID` overrides it.
    pub from: Option<String>,
}

/// The `data:` of a `delta` event: a streamed chunk and the seq it follows.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct DeltaData<'a, C: Serialize> {
    /// The seq of the event the chunk follows.
    pub after_seq: u64,
    /// The turn.
    pub turn: u32,
    /// The step.
    pub step: u32,
    /// The model call.
    pub call_id: &'a str,
    /// The chunk (`{type: text-delta, index, text}`, …).
    pub chunk: &'a C,
}

/// The `data:` of an `idle` event.
#[derive(Debug, Clone, Copy, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct IdleData {
    /// The seq of the event it follows.
    pub after_seq: u64,
}

/// The `data:` of an `awaiting-tools` event.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct AwaitingToolsData<'a> {
    /// The seq of the event it follows.
    pub after_seq: u64,
    /// The open caller-executed calls.
    pub call_ids: &'a [String],
}
