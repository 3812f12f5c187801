//! The host's event types and their typed payloads (spec H-EVT-1, H-EVT-2).
//!
//! Each type string is defined once, here, beside its payload struct; every reader
//! decodes that struct, and every writer encodes it, so a payload has one shape. The
//! structs keep the field order (and `null` versus absent) the log has always had, so
//! a stored event decodes and encodes back to its exact bytes. A field a payload does
//! not know is dropped on decode; the stored `data` keeps it.

use std::borrow::Cow;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::event::{EventData, EventPart};
use crate::message::Message;

mod attempt;
mod compaction;
mod request;
mod turn_end;

pub use attempt::{AssistantAttempt, AttemptOutcome, LlmRetry};
pub use compaction::{CompactionPrune, CompactionSummary, PrunedResult};
pub use request::{
    AdapterDefaults, HeaderBody, HeaderExt, HeaderReason, ReplacedMessage, RequestConfig,
    RequestContext, RequestDelta, RequestEnvelope, RequestHeader, RequestOnly, RequestTool,
    SeriesConfig, SeriesHeader,
};
pub use turn_end::{CancelCause, HostFailure, TurnEndReason, TurnFailure};

/// How a type is registered: whether it may be skipped and whether it may carry a
/// surface op.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EventTypeSpec {
    /// The type string; plugin types are `<plugin>/<name>`.
    pub name: Cow<'static, str>,
    /// Whether readers that do not know it may skip it.
    pub ignorable: bool,
    /// Whether it may carry a surface op (append or replace).
    pub surface_capable: bool,
}

impl EventTypeSpec {
    /// A required type without a surface op.
    pub const fn plain(name: &'static str) -> Self {
        Self {
            name: Cow::Borrowed(name),
            ignorable: false,
            surface_capable: false,
        }
    }

    /// A required type that may carry a surface op.
    pub const fn surface(name: &'static str) -> Self {
        Self {
            name: Cow::Borrowed(name),
            ignorable: false,
            surface_capable: true,
        }
    }

    /// An ignorable type.
    pub const fn ignorable(name: &'static str) -> Self {
        Self {
            name: Cow::Borrowed(name),
            ignorable: true,
            surface_capable: false,
        }
    }
}

/// `turn/start`.
pub const TURN_START: &str = "turn/start";
/// `turn/end`.
pub const TURN_END: &str = "turn/end";
/// `step/start`.
pub const STEP_START: &str = "step/start";
/// `step/end`.
pub const STEP_END: &str = "step/end";
/// `user/message` (surface).
pub const USER_MESSAGE: &str = "user/message";
/// `assistant/message` (surface).
pub const ASSISTANT_MESSAGE: &str = "assistant/message";
/// `assistant/attempt`.
pub const ASSISTANT_ATTEMPT: &str = "assistant/attempt";
/// `tool/call`.
pub const TOOL_CALL: &str = "tool/call";
/// `tool/result` (surface).
pub const TOOL_RESULT: &str = "tool/result";
/// `request/header`.
pub const REQUEST_HEADER: &str = "request/header";
/// `request/context`.
pub const REQUEST_CONTEXT: &str = "request/context";
/// `compaction/start`.
pub const COMPACTION_START: &str = "compaction/start";
/// `compaction/summary`.
pub const COMPACTION_SUMMARY: &str = "compaction/summary";
/// `compaction/end`.
pub const COMPACTION_END: &str = "compaction/end";
/// `compaction/prune`.
pub const COMPACTION_PRUNE: &str = "compaction/prune";
/// `compaction/undo` (CC-EXT-3): carries a `Restore` surface op.
pub const COMPACTION_UNDO: &str = "compaction/undo";
/// `session/end-seed`.
pub const SESSION_END_SEED: &str = "session/end-seed";
/// `llm/retry` (ignorable).
pub const LLM_RETRY: &str = "llm/retry";

/// Every type the host itself writes (the table in H-EVT-2).
pub const HOST_EVENT_TYPES: &[EventTypeSpec] = &[
    EventTypeSpec::plain(TURN_START),
    EventTypeSpec::plain(TURN_END),
    EventTypeSpec::plain(STEP_START),
    EventTypeSpec::plain(STEP_END),
    EventTypeSpec::surface(USER_MESSAGE),
    EventTypeSpec::surface(ASSISTANT_MESSAGE),
    EventTypeSpec::plain(ASSISTANT_ATTEMPT),
    EventTypeSpec::plain(TOOL_CALL),
    EventTypeSpec::surface(TOOL_RESULT),
    EventTypeSpec::plain(REQUEST_HEADER),
    EventTypeSpec::plain(REQUEST_CONTEXT),
    EventTypeSpec::plain(COMPACTION_START),
    EventTypeSpec::plain(COMPACTION_SUMMARY),
    EventTypeSpec::plain(COMPACTION_END),
    EventTypeSpec::plain(COMPACTION_PRUNE),
    EventTypeSpec::surface(COMPACTION_UNDO),
    EventTypeSpec::plain(SESSION_END_SEED),
    EventTypeSpec::ignorable(LLM_RETRY),
];

fn is_false(value: &bool) -> bool {
    !*value
}

/// `turn/start{turn}`: turns are 1-based and monotonic.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TurnStart {
    /// The turn number.
    pub turn: u32,
}

impl EventData for TurnStart {
    const KIND: &'static str = TURN_START;
}

/// `turn/end{turn, reason}`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TurnEnd {
    /// The turn number.
    pub turn: u32,
    /// Why it ended.
    pub reason: TurnEndReason,
    /// Set when crash repair wrote it.
    #[serde(default, skip_serializing_if = "is_false")]
    pub repair: bool,
}

impl EventData for TurnEnd {
    const KIND: &'static str = TURN_END;
}

/// `step/start{turn, step}`: steps are 1-based per turn.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StepStart {
    /// The turn number.
    pub turn: u32,
    /// The step number.
    pub step: u32,
}

impl EventData for StepStart {
    const KIND: &'static str = STEP_START;
}

/// `step/end{turn, step, interrupted?}`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StepEnd {
    /// The turn number.
    pub turn: u32,
    /// The step number.
    pub step: u32,
    /// Set when the step was cut short.
    #[serde(default, skip_serializing_if = "is_false")]
    pub interrupted: bool,
    /// Set when crash repair wrote it.
    #[serde(default, skip_serializing_if = "is_false")]
    pub repair: bool,
}

impl EventData for StepEnd {
    const KIND: &'static str = STEP_END;
}

/// `user/message{message}`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct UserMessage {
    /// The message; its `source` says who wrote it.
    pub message: Message,
}

impl EventData for UserMessage {
    const KIND: &'static str = USER_MESSAGE;
}

/// `assistant/message{turn, step, call_id, provider, model, message, usage?, finish,
/// interrupted?, stream[]}`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AssistantMessage {
    /// The turn number.
    pub turn: u32,
    /// The step number.
    pub step: u32,
    /// The provider call that produced it.
    pub call_id: String,
    /// The provider name.
    pub provider: String,
    /// The model name.
    pub model: String,
    /// The assembled message.
    pub message: Message,
    /// Token usage, when the provider reported it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub usage: Option<crate::usage::TokenUsage>,
    /// `stop`, `length`, `tool-calls`, `aborted`, ...
    pub finish: String,
    /// Set when the output was cut short and only its visible prefix is kept.
    #[serde(default, skip_serializing_if = "is_false")]
    pub interrupted: bool,
    /// The lossless stream records (H-EVT-4).
    #[serde(default)]
    pub stream: Vec<Value>,
}

impl EventData for AssistantMessage {
    const KIND: &'static str = ASSISTANT_MESSAGE;
}

/// An `assistant/message` without its stream records: the message, its route, usage
/// and finish, as most readers need them. Decoding it skips `stream` (one JSON value
/// per streamed delta, the bulk of a long answer's event) instead of building it.
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct AssistantReply {
    /// The turn number.
    pub turn: u32,
    /// The step number.
    pub step: u32,
    /// The provider call that produced it.
    pub call_id: String,
    /// The provider name.
    pub provider: String,
    /// The model name.
    pub model: String,
    /// The assembled message.
    pub message: Message,
    /// Token usage, when the provider reported it.
    #[serde(default)]
    pub usage: Option<crate::usage::TokenUsage>,
    /// `stop`, `length`, `tool-calls`, `aborted`, ...
    pub finish: String,
    /// Set when the output was cut short and only its visible prefix is kept.
    #[serde(default)]
    pub interrupted: bool,
}

impl EventPart for AssistantReply {
    const OF: &'static str = ASSISTANT_MESSAGE;
}

/// Who runs a tool call (ACT-3): the host, or the caller that declared the tool.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Executor {
    /// The host runs the body (the default; old logs carry no `executor`).
    Host,
    /// The caller runs it and answers with `ToolResults`; until then the step awaits.
    Caller,
}

/// `tool/call{turn, step, call_id, name, arguments, executor?}`: the dispatch marker
/// written just before a tool body runs, or, with `executor: "caller"`, the marker of a
/// call handed to the caller (ACT-3).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolCall {
    /// The turn number.
    pub turn: u32,
    /// The step number.
    pub step: u32,
    /// The tool-call block id.
    pub call_id: String,
    /// The tool name.
    pub name: String,
    /// The arguments.
    #[serde(default)]
    pub arguments: Value,
    /// Who runs the call; absent means the host (ACT-3, additive).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub executor: Option<Executor>,
}

impl EventData for ToolCall {
    const KIND: &'static str = TOOL_CALL;
}

/// A tool failure code and message.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolError {
    /// `SCREAMING_SNAKE` code, e.g. `TOOL_NOT_STARTED`.
    pub code: String,
    /// Human-readable detail.
    pub message: String,
}

/// `tool/result{turn, step, message{[tool-result]}, error?, meta?}`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolResult {
    /// The turn number.
    pub turn: u32,
    /// The step number.
    pub step: u32,
    /// A message holding one tool-result block.
    pub message: Message,
    /// The failure, if the tool did not succeed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<ToolError>,
    /// Tool-specific metadata.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub meta: Option<Value>,
    /// Set when crash repair wrote it.
    #[serde(default, skip_serializing_if = "is_false")]
    pub repair: bool,
}

impl EventData for ToolResult {
    const KIND: &'static str = TOOL_RESULT;
}

impl ToolResult {
    /// The call id this result answers (from its first tool-result block).
    pub fn call_id(&self) -> Option<&str> {
        self.message
            .tool_results()
            .next()
            .map(|block| block.call_id.as_str())
    }
}

/// `compaction/start{compaction_id, turn?, trigger}`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CompactionStart {
    /// Identifies the transaction.
    pub compaction_id: String,
    /// The turn it ran in, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub turn: Option<u32>,
    /// What started it.
    pub trigger: String,
}

impl EventData for CompactionStart {
    const KIND: &'static str = COMPACTION_START;
}

/// `compaction/end{compaction_id, error?}`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CompactionEnd {
    /// Identifies the transaction.
    pub compaction_id: String,
    /// The failure code, when it did not complete.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// Set when crash repair wrote it.
    #[serde(default, skip_serializing_if = "is_false")]
    pub repair: bool,
}

impl EventData for CompactionEnd {
    const KIND: &'static str = COMPACTION_END;
}

/// `compaction/undo{operation_id, replace_seq}`: a one-step undo of a maintenance
/// action (CC-EXT-3). It carries `Restore{replace_seq}` and cites the undone node.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CompactionUndo {
    /// The maintenance action undone (its journal `operationId`).
    pub operation_id: String,
    /// The replace node taken off the surface.
    pub replace_seq: u64,
}

impl EventData for CompactionUndo {
    const KIND: &'static str = COMPACTION_UNDO;
}

/// `session/end-seed{inherited}`: the first event a fork writes itself.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SessionEndSeed {
    /// Always true: everything before this event was inherited.
    pub inherited: bool,
}

impl EventData for SessionEndSeed {
    const KIND: &'static str = SESSION_END_SEED;
}

#[cfg(test)]
pub(crate) mod tests {
    use crate::event::{Event, EventData, EventDraft};

    /// Decodes `line` as `T` and encodes it back at the same seq and time, asserting
    /// the exact bytes come back; returns the decoded payload.
    pub(crate) fn round_trip<T: EventData>(line: &str) -> T {
        let event = Event::parse(line);
        assert!(event.is_ok(), "{event:?}");
        let Ok(event) = event else {
            unreachable!("asserted");
        };
        assert_eq!(event.kind(), T::KIND);
        let decoded = event.decode::<T>();
        assert!(decoded.is_ok(), "{line}: {:?}", decoded.err());
        let Ok(decoded) = decoded else {
            unreachable!("asserted");
        };
        let mut draft = EventDraft::typed(&decoded)
            .map(|draft| draft.with_sources(event.source_event_seqs().to_vec()));
        if let (Ok(draft), Some(surface)) = (&mut draft, event.surface()) {
            draft.surface = Some(surface);
        }
        if let Ok(draft) = &mut draft {
            draft.ignorable = event.is_ignorable();
        }
        let encoded = draft.and_then(|draft| Event::encode(event.seq(), event.time_ms(), draft));
        assert_eq!(
            encoded.as_ref().map(Event::raw_json),
            Ok(line),
            "the typed payload writes back today's bytes"
        );
        decoded
    }

    /// [`round_trip`] for an ignorable kind (asserts the flag is kept).
    pub(crate) fn round_trip_ignorable<T: EventData>(line: &str) -> T {
        assert!(
            Event::parse(line).is_ok_and(|event| event.is_ignorable()),
            "{line}"
        );
        round_trip(line)
    }

    #[test]
    fn an_assistant_reply_reads_the_message_without_its_stream() {
        let line = r#"{"seq":7,"time_ms":1,"type":"assistant/message","data":{"turn":2,"step":1,"call_id":"c1","provider":"p","model":"m","message":{"content":[{"type":"text","text":"hi"}]},"usage":{"input":3,"cache_read":0,"cache_write":0,"output":1,"reasoning":0},"finish":"stop","interrupted":true,"stream":[{"type":"text","text":"h"},{"type":"text","text":"i"}]}}"#;
        let full = round_trip::<super::AssistantMessage>(line);
        assert_eq!(full.stream.len(), 2);
        let Ok(event) = Event::parse(line) else {
            unreachable!("round_trip parsed it");
        };
        let reply = event.decode_part::<super::AssistantReply>();
        assert_eq!(
            reply,
            Ok(super::AssistantReply {
                turn: full.turn,
                step: full.step,
                call_id: full.call_id,
                provider: full.provider,
                model: full.model,
                message: full.message,
                usage: full.usage,
                finish: full.finish,
                interrupted: full.interrupted,
            })
        );
    }
}
