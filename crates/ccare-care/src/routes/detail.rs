//! `GET /context-care/actions/{op}?sessionId` (CC-EXT-3, issue 16 item 4): one
//! maintenance action in detail — why it ran, what it replaced (each replaced range
//! with the shadowed events' text beside the checkpoint's text: what `ccare context
//! diff` prints), the input before → after, the summary call's usage, the coverage,
//! and whether it can be undone now.
//!
//! Only conversation messages are shown (user, assistant, tool-result text): never a
//! system prompt, a tool schema or a raw model output (HR-2).

use std::sync::Arc;

use ccare_agent::routes::{
    Method, RouteDoc, RouteHandler, RoutePath, RoutePathError, RouteReply, RouteRequest, RouteSpec,
};
use ccare_core::kinds::{self, AssistantMessage, CompactionUndo, ToolResult, UserMessage};
use ccare_core::{ContentBlock, Event, SessionId, TokenUsage};
use ccare_session::SessionLog;
use serde::{Deserialize, Serialize};

use super::Management;
use super::actions::JOURNAL_UNAVAILABLE;
use super::query::{self, INVALID_QUERY};
use crate::report::ActionRecord;

/// The route's path.
pub const PATH: &str = "/context-care/actions/{op}";
/// The code of an operation id the session's journal does not hold.
pub const UNKNOWN_ACTION: &str = "unknown-action";

/// One maintenance action in detail.
#[derive(Debug, Clone, PartialEq, Serialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ActionDetail {
    /// The operation id.
    pub operation_id: String,
    /// When it started (ms since the epoch).
    pub at: i64,
    /// `summary`, `prune`, `deep-rest`, `undo`, ….
    pub action: Option<String>,
    /// Why it ran: `automatic`, `requested`, `overflow`.
    pub reason: Option<String>,
    /// How it ended: `committed`, `noop`, `partial`, `failed`.
    pub outcome: Option<String>,
    /// The error code, when it failed.
    pub error_code: Option<String>,
    /// The next request's input before (tokens, frozen basis).
    pub before_input: Option<u64>,
    /// The next request's input after (tokens, frozen basis).
    pub after_input: Option<u64>,
    /// What it replaced, one entry per replace node it appended.
    pub replacements: Vec<ReplacedRange>,
    /// The summary call's usage (a summary only).
    pub summary_usage: Option<SummaryUsage>,
    /// What the summary covers (a summary only).
    pub coverage: Option<Coverage>,
    /// The seq of the `compaction/undo` that undid it, if one did.
    pub undone_at_seq: Option<u64>,
    /// The action it undid (an undo only).
    pub undoes: Option<String>,
}

/// One replaced range: the shadowed events and the node that took their place.
#[derive(Debug, Clone, PartialEq, Serialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ReplacedRange {
    /// The replace node's seq.
    pub new_seq: Option<u64>,
    /// The first shadowed seq.
    pub old_start_seq: Option<u64>,
    /// The last shadowed seq.
    pub old_end_seq: Option<u64>,
    /// Whether the replace node is on the surface now.
    pub live: bool,
    /// The shadowed conversation events, in order.
    pub shadowed: Vec<EventText>,
    /// The replace node (the checkpoint, the pruned result).
    pub checkpoint: Option<EventText>,
}

/// A conversation event as text.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct EventText {
    /// Its seq.
    pub seq: u64,
    /// Its type (`user/message`, `assistant/message`, `tool/result`).
    pub kind: String,
    /// Its text, reasoning and tool-result text blocks, one per line; tool calls as
    /// `[tool call <name>]`.
    pub text: String,
}

/// A summary call's token usage.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SummaryUsage {
    /// Uncached input tokens.
    pub input: u64,
    /// Cache-read input tokens.
    pub cache_read: u64,
    /// Cache-write input tokens.
    pub cache_write: u64,
    /// Output tokens (reasoning included).
    pub output: u64,
}

/// What a summary covers (CC-SUM-5).
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase", default)]
pub struct Coverage {
    /// The original events it stands for.
    pub leaf_seqs: Vec<u64>,
    /// The earlier checkpoints it folds in.
    pub parent_checkpoint_seqs: Vec<u64>,
    /// How deep the checkpoints nest.
    pub depth: u64,
}

/// The fields of a record's data the detail reads beyond the shared view.
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", default)]
struct Extra {
    usage: Option<TokenUsage>,
    coverage: Option<Coverage>,
    undoes: Option<String>,
}

/// The route, answering `GET`.
pub(crate) fn route(management: Management) -> Result<RouteSpec, RoutePathError> {
    let handler: Arc<dyn RouteHandler> = Arc::new(move |request: RouteRequest| {
        let management = management.clone();
        async move {
            match detail(&management, &request).await {
                Ok(detail) => RouteReply::json(200, &detail),
                Err(reply) => reply,
            }
        }
    });
    Ok(RouteSpec::new(RoutePath::exact(PATH)?, handler).method(
        Method::Get,
        RouteDoc::new(
            "One maintenance action: what it replaced beside the checkpoint text, input before and after, usage and coverage",
        )
        .response::<ActionDetail>()
        .query("sessionId", "The session (required)"),
    ))
}

/// The session of the query (`sessionId`, nothing else).
pub(super) fn session(request: &RouteRequest) -> Result<SessionId, RouteReply> {
    let pairs = query::pairs(request, INVALID_QUERY)?;
    query::only(&pairs, &["sessionId"], INVALID_QUERY)?;
    query::session_id(&pairs, INVALID_QUERY)
}

/// 404 `unknown-action` naming the operation and the session.
pub(super) fn unknown_action(op: &str, id: &SessionId) -> RouteReply {
    RouteReply::error(
        404,
        UNKNOWN_ACTION,
        format!("no maintenance action {op:?} in session {id}"),
    )
}

async fn detail(
    management: &Management,
    request: &RouteRequest,
) -> Result<ActionDetail, RouteReply> {
    let id = session(request)?;
    let op = request.param("op").unwrap_or_default().to_owned();
    let loaded = management.load(&id).await?;
    let records = management
        .care
        .actions_of(&id)
        .await
        .map_err(|error| RouteReply::error(500, JOURNAL_UNAVAILABLE, error.to_string()))?;
    let record = crate::undo::find(&records, &op).ok_or_else(|| unknown_action(&op, &id))?;
    Ok(detail_of(record, &loaded.log))
}

/// The detail of `record` against the session's log.
pub fn detail_of(record: &ActionRecord, log: &SessionLog) -> ActionDetail {
    let view = record.view();
    let extra: Extra = Extra::deserialize(&record.data).unwrap_or_default();
    let live: Vec<u64> = log.live_seqs();
    let text_of = |seq: u64| {
        log.event_at(seq).and_then(|event| {
            message_text(event).map(|text| EventText {
                seq,
                kind: event.kind().to_owned(),
                text,
            })
        })
    };
    let replacements = view
        .replacements
        .iter()
        .map(|replacement| ReplacedRange {
            new_seq: replacement.new_seq,
            old_start_seq: replacement.old_start_seq,
            old_end_seq: replacement.old_end_seq,
            live: replacement.new_seq.is_some_and(|seq| live.contains(&seq)),
            shadowed: replacement
                .source_seqs
                .iter()
                .filter_map(|seq| text_of(*seq))
                .collect(),
            checkpoint: replacement.new_seq.and_then(text_of),
        })
        .collect();
    let op = record.operation_id();
    let undone_at_seq = log
        .events()
        .iter()
        .filter(|event| event.kind() == kinds::COMPACTION_UNDO)
        .find(|event| {
            event
                .decode::<CompactionUndo>()
                .is_ok_and(|undo| undo.operation_id == op)
        })
        .map(|event| event.seq());
    let owned = |field: Option<&str>| field.map(str::to_owned);
    ActionDetail {
        operation_id: op.to_owned(),
        at: record.at,
        action: owned(view.action),
        reason: owned(view.reason),
        outcome: owned(view.outcome),
        error_code: view.error.as_ref().map(|error| error.code.clone()),
        before_input: view.before_input,
        after_input: view.after_input,
        replacements,
        summary_usage: extra.usage.map(|usage| SummaryUsage {
            input: usage.input,
            cache_read: usage.cache_read,
            cache_write: usage.cache_write,
            output: usage.output,
        }),
        coverage: extra.coverage,
        undone_at_seq,
        undoes: extra.undoes,
    }
}

/// The text of a conversation event (user, assistant, tool result); `None` for
/// anything else (markers, headers).
fn message_text(event: &Event) -> Option<String> {
    let message = match event.kind() {
        kinds::USER_MESSAGE => event.decode::<UserMessage>().ok()?.message,
        kinds::TOOL_RESULT => event.decode::<ToolResult>().ok()?.message,
        kinds::ASSISTANT_MESSAGE => event.decode::<AssistantMessage>().ok()?.message,
        _ => return None,
    };
    let lines: Vec<String> = message
        .content
        .iter()
        .filter_map(|block| match block {
            ContentBlock::Text(text) => Some(text.text.clone()),
            ContentBlock::Reasoning(reasoning) => Some(reasoning.text.clone()),
            ContentBlock::ToolResult(result) => Some(
                result
                    .content
                    .iter()
                    .filter_map(|block| match block {
                        ContentBlock::Text(text) => Some(text.text.as_str()),
                        _ => None,
                    })
                    .collect::<Vec<_>>()
                    .join("\n"),
            ),
            ContentBlock::ToolCall(call) => Some(format!("[tool call {}]", call.name)),
            ContentBlock::Image(_) | ContentBlock::Unknown(_) => None,
        })
        .collect();
    Some(lines.join("\n"))
}
