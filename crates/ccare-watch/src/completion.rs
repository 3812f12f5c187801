//! The completion observer's pure part (spec watch-rules-ui.md §5): what counts as
//! completion wording (CO-1), its config (CO-2), the state of one (session, source)
//! and its transitions (CO-3, CO-4), and the outbox notice with its delivery
//! bookkeeping (CO-6). No I/O and no host types: [`crate::plugin`] reads the session
//! log, stores these records in the storage domains and delivers the notice.
//!
//! # CO-1 without a regex engine
//!
//! The spec writes the patterns as JavaScript regular expressions. They are plain
//! alternations of literals, so they are matched here by hand, with the same semantics:
//! - the English patterns are case-insensitive without the `u` flag, where JavaScript
//!   only folds a character onto ASCII when it is ASCII itself (`ſ` never matches `s`,
//!   the Kelvin sign never matches `k`): for these ASCII-only literals that is exactly
//!   [`u8::eq_ignore_ascii_case`];
//! - `\b` is ASCII: a word character is `[A-Za-z0-9_]`, so `é` or `完` next to a literal
//!   is a boundary;
//! - `[\s\S]{0,24}` counts UTF-16 code units (no `u` flag: an astral character is two);
//! - a search returns the leftmost match, and at one position the first alternative
//!   that matches, in the order written.
//!
//! A regex crate would add a dependency and a second reading of the same semantics
//! (its `\b` and case folding are Unicode by default) for ten literals.

use std::fmt::Write as _;

use ccare_core::strict::{self, Problem, StrictError};
use serde::{Deserialize, Deserializer, Serialize};
use serde_json::Value;
use sha2::{Digest, Sha256};

use crate::pattern::extract_statements;

/// CO-1, English: `/\b(?:done|complete|completed|finished|successfully finished|task
/// complete|all set)\b/i`, alternatives in the spec's order.
pub const EN_COMPLETION: &[&str] = &[
    "done",
    "complete",
    "completed",
    "finished",
    "successfully finished",
    "task complete",
    "all set",
];

/// CO-1, Chinese: `/(?:已完成|完成了|任务完成|处理完毕|全部完成|搞定)/u`.
pub const ZH_COMPLETION: &[&str] = &[
    "已完成",
    "完成了",
    "任务完成",
    "处理完毕",
    "全部完成",
    "搞定",
];

/// CO-1, the English negation's first half: `\b(?:not|never|isn't|is not|unfinished)\b`.
pub const EN_NEGATORS: &[&str] = &["not", "never", "isn't", "is not", "unfinished"];

/// CO-1, the English negation's second half: `\b(?:done|complete|completed|finished)\b`.
pub const EN_NEGATED: &[&str] = &["done", "complete", "completed", "finished"];

/// CO-1, the English negation's gap `[\s\S]{0,24}`, in UTF-16 code units.
pub const EN_NEGATION_GAP: usize = 24;

/// CO-1, the Chinese negation: `/(?:未完成|没完成|没有完成|尚未完成|还没完成|未搞定)/u`.
pub const ZH_NEGATIONS: &[&str] = &[
    "未完成",
    "没完成",
    "没有完成",
    "尚未完成",
    "还没完成",
    "未搞定",
];

/// The source whose outputs the observer reads (CO-3): the assistant's replies.
pub const SOURCE_ASSISTANT: &str = "assistant";

/// Keys longer than this many chars are hashed (CO-3).
pub const MAX_PLAIN_KEY_CHARS: usize = 250;

/// Completion wording found in an output (CO-1).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Completion {
    /// The matched wording, as written (`DONE`, `完成了`).
    pub label: String,
    /// The statement it was found in.
    pub line: String,
}

/// Finds completion wording in the prose of a model output (CO-1): statements as OP-2
/// splits them (blockquotes, code and HTML never count); a negated statement is skipped;
/// otherwise the English pattern, then the Chinese one; the first hit wins.
pub fn detect_completion(text: &str) -> Option<Completion> {
    extract_statements(text).into_iter().find_map(|statement| {
        if is_negated(&statement.text) {
            return None;
        }
        let label = find_english(&statement.text, EN_COMPLETION)
            .map(|(start, end)| statement.text[start..end].to_owned())
            .or_else(|| find_literal(&statement.text, ZH_COMPLETION).map(str::to_owned))?;
        Some(Completion {
            label,
            line: statement.text,
        })
    })
}

/// Whether a statement negates completion (CO-1): either negation pattern matches.
pub fn is_negated(statement: &str) -> bool {
    find_literal(statement, ZH_NEGATIONS).is_some() || english_negation(statement)
}

/// `\b` at byte `index` of ASCII-or-not text: the word-ness of the bytes on each side
/// differs (a non-ASCII byte is never a word character, as in JavaScript's `\b`).
fn is_boundary(bytes: &[u8], index: usize) -> bool {
    let word =
        |byte: Option<&u8>| byte.is_some_and(|&byte| byte.is_ascii_alphanumeric() || byte == b'_');
    let before = index.checked_sub(1).and_then(|before| bytes.get(before));
    word(before) != word(bytes.get(index))
}

/// The end of `\b<literal>\b` matched case-insensitively (ASCII) at byte `start`.
fn english_at(bytes: &[u8], start: usize, literal: &str) -> Option<usize> {
    let end = start.checked_add(literal.len())?;
    let candidate = bytes.get(start..end)?;
    (candidate.eq_ignore_ascii_case(literal.as_bytes())
        && is_boundary(bytes, start)
        && is_boundary(bytes, end))
    .then_some(end)
}

/// The leftmost `\b(?:a|b|…)\b` match (case-insensitive, ASCII), as a byte range.
fn find_english(text: &str, literals: &[&str]) -> Option<(usize, usize)> {
    let bytes = text.as_bytes();
    (0..bytes.len()).find_map(|start| {
        literals
            .iter()
            .find_map(|literal| english_at(bytes, start, literal))
            .map(|end| (start, end))
    })
}

/// The leftmost match of an alternation of literals (case-sensitive): the literal of
/// the first alternative that matches at the leftmost position.
fn find_literal<'a>(text: &str, literals: &[&'a str]) -> Option<&'a str> {
    text.char_indices().find_map(|(start, _)| {
        literals
            .iter()
            .find(|literal| text[start..].starts_with(**literal))
            .copied()
    })
}

/// The English negation: a negator, then at most [`EN_NEGATION_GAP`] UTF-16 code units
/// of anything, then a completion word, each with `\b` on both sides. Backtracking tries
/// every pair, so this holds when any pair fits.
fn english_negation(text: &str) -> bool {
    let bytes = text.as_bytes();
    (0..bytes.len()).any(|start| {
        EN_NEGATORS.iter().any(|negator| {
            let Some(gap_start) = english_at(bytes, start, negator) else {
                return false;
            };
            let mut units = 0;
            for (offset, char) in text[gap_start..].char_indices() {
                let position = gap_start + offset;
                if EN_NEGATED
                    .iter()
                    .any(|word| english_at(bytes, position, word).is_some())
                {
                    return true;
                }
                units += char.len_utf16();
                if units > EN_NEGATION_GAP {
                    return false;
                }
            }
            false
        })
    })
}

/// Why a `completion` config table was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CompletionConfigError {
    /// The value is not a table.
    #[error("completion must be a table, got {0}")]
    NotATable(String),
    /// A key the config does not have (the table is strict).
    #[error("completion: unknown config {0}")]
    UnknownKey(String),
    /// A key holds a value of the wrong type or range.
    #[error("completion.{key}: expected {expected}, got {got}")]
    Invalid {
        /// The key.
        key: String,
        /// What it must be.
        expected: String,
        /// What it was.
        got: String,
    },
    /// Any other refusal of the table's shape, as the strict reader words it.
    #[error("completion: {0}")]
    Table(StrictError),
}

/// The observer's config (CO-2), `[plugins.stream-watch] completion = {…}`; each key
/// is optional and defaults to the spec's value.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CompletionConfig {
    /// How long after a completion the next one is not observed (`cooldown_ms`,
    /// 300 000).
    pub cooldown_ms: u64,
    /// Outputs longer than this many UTF-16 code units are not read
    /// (`max_observed_chars`, 65 536).
    pub max_observed_chars: usize,
    /// Whether the control's `notice` action is on by default (`notifications`, true).
    pub notifications: bool,
    /// How often one notice may be sent (`max_deliveries`, 2).
    pub max_deliveries: u32,
}

impl Default for CompletionConfig {
    fn default() -> Self {
        Self {
            cooldown_ms: 300_000,
            max_observed_chars: 65_536,
            notifications: true,
            max_deliveries: 2,
        }
    }
}

/// The `completion` table as written, read by the shared strict reader.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct CompletionTable {
    #[serde(default, deserialize_with = "cooldown")]
    cooldown_ms: Option<u64>,
    #[serde(default, deserialize_with = "positive_usize")]
    max_observed_chars: Option<usize>,
    #[serde(default, deserialize_with = "strict::boolean")]
    notifications: Option<bool>,
    #[serde(default, deserialize_with = "positive_u32")]
    max_deliveries: Option<u32>,
}

/// Any JSON integer >= 0: `a non-negative integer`.
fn cooldown<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Option<u64>, D::Error> {
    strict::check(deserializer, "a non-negative integer", Value::as_u64).map(Some)
}

/// `a positive integer` that fits a `usize`.
fn positive_usize<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Option<usize>, D::Error> {
    strict::check(deserializer, "a positive integer", |value| {
        value
            .as_u64()
            .filter(|chars| *chars > 0)
            .and_then(|chars| usize::try_from(chars).ok())
    })
    .map(Some)
}

/// `a positive integer of at most 4294967295` (one that fits a `u32`).
fn positive_u32<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Option<u32>, D::Error> {
    strict::check(
        deserializer,
        "a positive integer of at most 4294967295",
        |value| {
            value
                .as_u64()
                .filter(|count| *count > 0)
                .and_then(|count| u32::try_from(count).ok())
        },
    )
    .map(Some)
}

impl From<StrictError> for CompletionConfigError {
    fn from(error: StrictError) -> Self {
        match error.problem {
            Problem::UnknownKey => CompletionConfigError::UnknownKey(error.path),
            Problem::Invalid { found, .. } if error.path.is_empty() => {
                CompletionConfigError::NotATable(found)
            }
            Problem::Invalid { expected, found } => CompletionConfigError::Invalid {
                key: error.path,
                expected,
                got: found,
            },
            // Every key is optional and has no alias: not reached today.
            problem @ (Problem::Missing | Problem::Duplicate | Problem::Other(_)) => {
                CompletionConfigError::Table(StrictError {
                    path: error.path,
                    problem,
                })
            }
        }
    }
}

impl CompletionConfig {
    /// Reads the config table strictly: unknown keys and wrong types are errors;
    /// `max_observed_chars` and `max_deliveries` must be positive.
    pub fn from_json(table: &Value) -> Result<Self, CompletionConfigError> {
        let table: CompletionTable = strict::from_value(table)?;
        let defaults = Self::default();
        Ok(Self {
            cooldown_ms: table.cooldown_ms.unwrap_or(defaults.cooldown_ms),
            max_observed_chars: table
                .max_observed_chars
                .unwrap_or(defaults.max_observed_chars),
            notifications: table.notifications.unwrap_or(defaults.notifications),
            max_deliveries: table.max_deliveries.unwrap_or(defaults.max_deliveries),
        })
    }
}

/// The state key of a (session, source) (CO-3): each code point as 6 lowercase hex
/// digits, written `session_source`, so any id gives a key of `[a-z0-9_]`; a key over
/// [`MAX_PLAIN_KEY_CHARS`] becomes `sha256_<hex sha256(JSON [sessionId, sourceId])>`.
pub fn state_key(session_id: &str, source_id: &str) -> String {
    let plain_len = 6 * (session_id.chars().count() + source_id.chars().count()) + 1;
    if plain_len <= MAX_PLAIN_KEY_CHARS {
        let mut key = String::with_capacity(plain_len);
        push_code_points(&mut key, session_id);
        key.push('_');
        push_code_points(&mut key, source_id);
        return key;
    }
    let json = Value::Array(vec![session_id.into(), source_id.into()]).to_string();
    format!("sha256_{}", sha256_hex(&json))
}

/// Appends each code point of `text` as 6 lowercase hex digits.
fn push_code_points(out: &mut String, text: &str) {
    for char in text.chars() {
        // Writing to a String cannot fail.
        let _ = write!(out, "{:06x}", u32::from(char));
    }
}

/// The key of the notice of one completed output (CO-6): the hex SHA-256 of
/// `JSON {sessionId, eventSeq}`.
pub fn notice_key(session_id: &str, event_seq: u64) -> String {
    let json = serde_json::json!({"sessionId": session_id, "eventSeq": event_seq}).to_string();
    sha256_hex(&json)
}

fn sha256_hex(text: &str) -> String {
    let mut hex = String::with_capacity(64);
    for byte in Sha256::digest(text.as_bytes()) {
        // Writing to a String cannot fail.
        let _ = write!(hex, "{byte:02x}");
    }
    hex
}

/// An observed completion waiting for its output to be settled (CO-3 `pending`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PendingCompletion {
    /// The output: its attempt id, or `committed:<eventSeq>`.
    pub occurrence_id: String,
    /// The wording found.
    pub label: String,
    /// The statement it was found in.
    pub line: String,
}

impl PendingCompletion {
    /// The pending completion of the committed output at `event_seq`.
    pub fn committed(event_seq: u64, completion: Completion) -> Self {
        Self {
            occurrence_id: committed_occurrence(event_seq),
            label: completion.label,
            line: completion.line,
        }
    }
}

/// The occurrence id of the committed output at `event_seq` (CO-3).
pub fn committed_occurrence(event_seq: u64) -> String {
    format!("committed:{event_seq}")
}

/// The completion state of one (session, source) (CO-3), stored under [`state_key`].
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CompletionState {
    /// The completion observed in an output not settled yet.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pending: Option<PendingCompletion>,
    /// Until when (ms since the epoch) no completion is observed.
    #[serde(default)]
    pub cooldown_until: i64,
    /// The occurrence the last completion was settled for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub completed_occurrence_id: Option<String>,
}

/// What [`CompletionState::observe`] decided (CO-4).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ObserveOutcome {
    /// The control is off: nothing observed, no cooldown spent (decided by the host).
    Disabled,
    /// The output is too long to read (decided by the host).
    Unavailable,
    /// No completion wording.
    Ignored,
    /// A completion came within the cooldown.
    Cooldown,
    /// The completion is pending; `changed` says whether the state must be written
    /// (false when the same completion was already pending).
    Pending {
        /// Whether the state changed.
        changed: bool,
    },
}

/// What [`CompletionState::settle`] decided (CO-4).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SettleOutcome {
    /// The pending completion belonged to the settled output: it is complete, the
    /// cooldown runs, and it may be published.
    Completed(PendingCompletion),
    /// Nothing pending, or a pending completion of another output: nothing changes.
    Recovery,
}

impl CompletionState {
    /// CO-4 `observe` at `now_ms`: no candidate → ignored; within the cooldown →
    /// cooldown; the same pending → pending, unchanged; otherwise the candidate becomes
    /// the pending completion.
    pub fn observe(&mut self, candidate: Option<PendingCompletion>, now_ms: i64) -> ObserveOutcome {
        let Some(candidate) = candidate else {
            return ObserveOutcome::Ignored;
        };
        if self.cooldown_until > now_ms {
            return ObserveOutcome::Cooldown;
        }
        if self.pending.as_ref() == Some(&candidate) {
            return ObserveOutcome::Pending { changed: false };
        }
        self.pending = Some(candidate);
        ObserveOutcome::Pending { changed: true }
    }

    /// CO-4 `settle` of the output `occurrence_id` at `now_ms`: when the pending
    /// completion is that output's, it completes (`cooldownUntil = now + cooldown`,
    /// `completedOccurrenceId` set, the pending cleared); otherwise recovery, and a
    /// pending completion of another output is left for its own settle or recover.
    pub fn settle(&mut self, occurrence_id: &str, now_ms: i64, cooldown_ms: u64) -> SettleOutcome {
        match self.pending.take() {
            Some(pending) if pending.occurrence_id == occurrence_id => {
                self.cooldown_until =
                    now_ms.saturating_add(i64::try_from(cooldown_ms).unwrap_or(i64::MAX));
                self.completed_occurrence_id = Some(pending.occurrence_id.clone());
                SettleOutcome::Completed(pending)
            }
            other => {
                self.pending = other;
                SettleOutcome::Recovery
            }
        }
    }

    /// CO-4 `recover`: clears the pending completion, spending no cooldown. Returns
    /// whether the state changed.
    pub fn recover(&mut self) -> bool {
        self.pending.take().is_some()
    }
}

/// Where a notice is in its delivery (CO-6).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum NoticeStatus {
    /// Published, never reserved.
    Pending,
    /// Reserved for a request whose outcome is not known yet (or was lost in a crash).
    DeliveryUnknown,
    /// Sent with a request that was answered.
    Dispatched,
    /// A newer notice of the session was dispatched instead.
    Superseded,
}

/// One completion notice in the outbox (CO-6), stored under [`notice_key`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CompletionNotice {
    /// The session.
    pub session_id: String,
    /// The seq of the completed output.
    pub event_seq: u64,
    /// The route that wrote it, `provider/model`.
    pub route: String,
    /// The wording found.
    pub label: String,
    /// The statement it was found in.
    pub line: String,
    /// How often it was reserved for a request.
    pub deliveries: u32,
    /// How often it may be.
    pub max_deliveries: u32,
    /// Where it is.
    pub status: NoticeStatus,
}

impl CompletionNotice {
    /// A freshly published notice.
    pub fn publish(
        session_id: &str,
        event_seq: u64,
        route: &str,
        completion: &PendingCompletion,
        max_deliveries: u32,
    ) -> Self {
        Self {
            session_id: session_id.to_owned(),
            event_seq,
            route: route.to_owned(),
            label: completion.label.clone(),
            line: completion.line.clone(),
            deliveries: 0,
            max_deliveries,
            status: NoticeStatus::Pending,
        }
    }

    /// Whether it is still open: pending, or reserved without a known outcome.
    pub fn is_open(&self) -> bool {
        matches!(
            self.status,
            NoticeStatus::Pending | NoticeStatus::DeliveryUnknown
        )
    }

    /// Whether a conversation request on `route` may carry it: open, on exactly that
    /// route, with deliveries left (a crash redelivers up to `maxDeliveries`).
    pub fn is_eligible(&self, route: &str) -> bool {
        self.is_open() && self.route == route && self.deliveries < self.max_deliveries
    }

    /// Reserve: one more delivery, outcome unknown.
    pub fn reserve(&mut self) {
        self.deliveries = self.deliveries.saturating_add(1);
        self.status = NoticeStatus::DeliveryUnknown;
    }
}

/// The newest (highest `eventSeq`) of the notices a request on `route` may carry
/// (CO-6 collect): only that one is delivered. Each notice comes with its key.
pub fn newest_eligible<K>(
    notices: impl IntoIterator<Item = (K, CompletionNotice)>,
    route: &str,
) -> Option<(K, CompletionNotice)> {
    notices
        .into_iter()
        .filter(|(_, notice)| notice.is_eligible(route))
        .max_by_key(|(_, notice)| notice.event_seq)
}
