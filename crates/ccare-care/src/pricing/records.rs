//! What calibration reads of the request journal (CC-PRC-3 over CC-JNL-2): each
//! record's kind, outcome and usage, and whether it is an eligible sample.

use ccare_core::TokenUsage;
use serde::{Deserialize, Serialize};

use super::calibration::{CALIBRATION_EVENT_TYPE, CALIBRATION_PURPOSE};
use super::price::RawInput;

/// Which store a journal record comes from (CC-JNL-1 `kind`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum JournalRecordKind {
    /// A request record (CC-JNL-2).
    Request,
    /// A maintenance record (CC-JNL-3); never calibrates, but counts as a record.
    Maintenance,
}

/// CC-JNL-2 settled outcomes, plus the undispatched failure.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum RequestOutcome {
    /// The reply completed.
    Completed,
    /// The provider call failed.
    Failed,
    /// The reply was interrupted.
    Interrupted,
    /// The request was refused before dispatch.
    NotDispatched,
}

/// A journal record's `usage`, as written: fields may be missing.
///
/// CC-PRC-3 needs `inputTokens` present; the cache fields count as 0 when absent;
/// output tokens never count as input.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RecordUsage {
    /// Uncached input tokens.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub input_tokens: Option<u64>,
    /// Input tokens read from the cache.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cache_read_tokens: Option<u64>,
    /// Input tokens written to the cache.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cache_write_tokens: Option<u64>,
    /// Output tokens; never part of the prompt.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output_tokens: Option<u64>,
}

impl RecordUsage {
    /// CC-PRC-3 `prompt = inputTokens + cacheReadTokens + cacheWriteTokens`; `None`
    /// when `inputTokens` is absent.
    pub fn prompt_tokens(&self) -> Option<u64> {
        let input = self.input_tokens?;
        Some(
            input
                .saturating_add(self.cache_read_tokens.unwrap_or(0))
                .saturating_add(self.cache_write_tokens.unwrap_or(0)),
        )
    }
}

impl From<TokenUsage> for RecordUsage {
    /// Usage as the host reports it (H-LLM-4): every field present.
    fn from(usage: TokenUsage) -> Self {
        RecordUsage {
            input_tokens: Some(usage.input),
            cache_read_tokens: Some(usage.cache_read),
            cache_write_tokens: Some(usage.cache_write),
            output_tokens: Some(usage.output),
        }
    }
}

/// What calibration reads of one journal record (CC-PRC-3, fields of CC-JNL-2).
///
/// The caller maps each record of the session's journal, request or maintenance, to
/// one of these (after flushing it, CC-PRC-4).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CalibrationRecord {
    /// Request or maintenance.
    pub kind: JournalRecordKind,
    /// `callId` (empty for a maintenance record).
    pub call_id: String,
    /// `dispatched:true` was written.
    pub dispatched: bool,
    /// The settled outcome, if any.
    pub outcome: Option<RequestOutcome>,
    /// `purpose`: `conversation`, `compaction`, `session-title`, ….
    pub purpose: Option<String>,
    /// The settled `eventType`, e.g. `assistant/message`.
    pub event_type: Option<String>,
    /// The settled `eventSeq`: the order calibration walks in.
    pub event_seq: Option<u64>,
    /// `calibrationHeaderKey`
    /// ([`calibration_header_key`](super::calibration_header_key)).
    pub header_key: Option<String>,
    /// `rawInput`.
    pub raw_input: Option<RawInput>,
    /// `usage`.
    pub usage: Option<RecordUsage>,
}

impl CalibrationRecord {
    /// A maintenance record: it makes the journal non-empty and nothing else.
    pub fn maintenance() -> Self {
        CalibrationRecord {
            kind: JournalRecordKind::Maintenance,
            call_id: String::new(),
            dispatched: false,
            outcome: None,
            purpose: None,
            event_type: None,
            event_seq: None,
            header_key: None,
            raw_input: None,
            usage: None,
        }
    }

    /// CC-PRC-3 eligibility: a dispatched, completed `conversation` request settled as
    /// `assistant/message` (with an `eventSeq` to order it by), of the header
    /// `header_key`, with `rawInput.textTokens > 0` and `usage.inputTokens` present.
    /// Whether its prompt covers its raw estimate is checked later, by
    /// [`calibrate`](super::calibrate).
    pub fn is_eligible(&self, header_key: &str) -> bool {
        self.kind == JournalRecordKind::Request
            && self.dispatched
            && self.outcome == Some(RequestOutcome::Completed)
            && self.purpose.as_deref() == Some(CALIBRATION_PURPOSE)
            && self.event_type.as_deref() == Some(CALIBRATION_EVENT_TYPE)
            && self.event_seq.is_some()
            && self.header_key.as_deref() == Some(header_key)
            && self.raw_input.is_some_and(|raw| raw.text_tokens > 0)
            && self.usage.is_some_and(|usage| usage.input_tokens.is_some())
    }
}
