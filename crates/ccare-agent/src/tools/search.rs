//! `session_search {query, limit?}`: a case-insensitive search of the raw session log,
//! shadowed events included — the recovery path that handoff notes and compaction
//! summaries point to (spec H-TOOL-1, H-LOG-3).
//!
//! # What is searched
//!
//! Every committed event, live or shadowed by a replace. For `user/message`,
//! `assistant/message` and `tool/result` the searched text is what the model would
//! care about: text and reasoning, each tool call's name and arguments, and tool-result
//! content (block texts joined by newlines). For `compaction/summary` it is the
//! `summary`. Any other event (or one whose payload does not decode) is searched by
//! its raw `data` JSON.
//!
//! # What is left out
//!
//! The running call itself. The events appended after the call started cannot be in
//! the snapshot, but the step's `assistant/message` — which carries this very call,
//! query included, in its tool-call arguments — and the `tool/call` marker are. So the
//! search skips every event whose seq is at or after the `assistant/message` holding a
//! tool call with the context's `call_id` (when no such message exists, e.g. a call
//! made outside a step, nothing is skipped). Earlier results of the same batch are
//! skipped with it; they are in the model's context anyway.
//!
//! # Output
//!
//! One line per hit, newest (highest seq) first:
//! `seq=<n> kind=<type> time=<RFC 3339 UTC> [shadowed] <excerpt>`, where `[shadowed]`
//! appears only for a surface event that a replace has taken off the surface, and the
//! excerpt is about 160 characters around the first match, whitespace runs flattened to
//! one space, with `…` where it was cut. More hits than `limit` add a last line that
//! counts the rest.
//!
//! Times are formatted here with the civil-from-days algorithm (H. Hinnant): twenty
//! lines of pure arithmetic instead of a date-time dependency for one UTC format; the
//! event time is the Clock reading (H-GEN-1) and may be anything an `i64` holds.

use std::borrow::Cow;
use std::collections::HashSet;
use std::sync::Arc;

use ccare_core::kinds::{self, CompactionSummary};
use ccare_core::{ContentBlock, Event, Message};
use ccare_llm::{CancellationToken, ToolSpec};
use serde::Deserialize;
use serde_json::{Value, json};

use crate::tool::{BoxFuture, Concurrency, Tool, ToolContext, ToolDef, ToolFailure, ToolOutcome};
use crate::tools::{codes, object_arguments, required_string, run_blocking};

/// How many characters of context an excerpt shows, match included.
const EXCERPT_CHARS: usize = 160;

/// `session_search {query, limit?}`: finds events of the current session's raw log
/// whose text contains `query` (case-insensitive), newest first. Parallel-safe.
///
/// See the module docs for what is searched, what is skipped and the output format.
/// Fails with `INVALID_ARGUMENTS` for a blank query or a `limit` below 1, and with
/// `CANCELLED` when the turn is cancelled mid-search.
#[derive(Debug, Clone)]
pub struct SessionSearch {
    def: ToolDef,
}

impl SessionSearch {
    /// The tool name.
    pub const NAME: &'static str = "session_search";
    /// Hits shown when the call gives no `limit`.
    pub const DEFAULT_LIMIT: usize = 20;
    /// The largest `limit`; larger values are clamped to it.
    pub const MAX_LIMIT: usize = 100;

    /// The tool.
    pub fn new() -> Self {
        let description = format!(
            "Search this session's complete event log, including earlier conversation that \
             was compacted (summarized) and is no longer in your context. Case-insensitive \
             substring match over message texts, reasoning, tool calls and tool results, and \
             compaction summaries. Returns one line per matching event, newest first: \
             `seq=<n> kind=<type> time=<UTC time> [shadowed] <excerpt>`; `[shadowed]` marks \
             events that are no longer in your context. Use it to recover exact details that \
             a summary or handoff note refers to. `limit` defaults to {} (at most {}).",
            Self::DEFAULT_LIMIT,
            Self::MAX_LIMIT
        );
        let input_schema = json!({
            "type": "object",
            "properties": {
                "query": {
                    "type": "string",
                    "minLength": 1,
                    "description": "Text to look for, matched case-insensitively as a substring."
                },
                "limit": {
                    "type": "integer",
                    "minimum": 1,
                    "description": format!(
                        "Most hits to return (default {}; values above {} count as {}).",
                        Self::DEFAULT_LIMIT, Self::MAX_LIMIT, Self::MAX_LIMIT
                    )
                }
            },
            "required": ["query"],
            "additionalProperties": false
        });
        Self {
            def: ToolDef {
                spec: ToolSpec {
                    name: Self::NAME.to_owned(),
                    description: description.into(),
                    input_schema: input_schema.into(),
                },
                concurrency: Concurrency::ParallelSafe,
                timeout_ms: None,
                validates_own_arguments: false,
            },
        }
    }
}

impl Default for SessionSearch {
    fn default() -> Self {
        Self::new()
    }
}

impl Tool for SessionSearch {
    fn def(&self) -> &ToolDef {
        &self.def
    }

    fn call(&self, context: ToolContext, arguments: Value) -> BoxFuture<'static, ToolOutcome> {
        Box::pin(async move {
            let arguments = object_arguments(&arguments)?;
            let query = required_string(arguments, "query")?.to_owned();
            if query.trim().is_empty() {
                return Err(ToolFailure::new(
                    codes::INVALID_ARGUMENTS,
                    "`query` must not be empty",
                ));
            }
            let limit = limit_argument(arguments.get("limit"))?;
            // Snapshot under the session lock (cheap `Arc` clones), search outside it.
            let (events, live) = context.session.with_log(|log| {
                let live: HashSet<u64> = log.live_seqs().into_iter().collect();
                (log.events().to_vec(), live)
            });
            let call_id = context.call_id;
            let cancel = context.cancel;
            let text =
                run_blocking(move || search(&events, &live, &call_id, &query, limit, &cancel))
                    .await?;
            Ok(vec![ContentBlock::text(text)])
        })
    }
}

fn limit_argument(value: Option<&Value>) -> Result<usize, ToolFailure> {
    let invalid = || {
        ToolFailure::new(
            codes::INVALID_ARGUMENTS,
            "`limit` must be an integer of at least 1",
        )
    };
    let limit = match value {
        None | Some(Value::Null) => return Ok(SessionSearch::DEFAULT_LIMIT),
        Some(Value::Number(number)) => match number.as_u64() {
            Some(limit) => limit,
            // JSON Schema counts `5.0` as an integer.
            None => match number.as_f64() {
                Some(float) if float.fract() == 0.0 && float >= 1.0 => {
                    if float >= SessionSearch::MAX_LIMIT as f64 {
                        SessionSearch::MAX_LIMIT as u64
                    } else {
                        float as u64
                    }
                }
                Some(_) | None => return Err(invalid()),
            },
        },
        Some(_) => return Err(invalid()),
    };
    if limit == 0 {
        return Err(invalid());
    }
    Ok(usize::try_from(limit)
        .unwrap_or(SessionSearch::MAX_LIMIT)
        .min(SessionSearch::MAX_LIMIT))
}

fn search(
    events: &[Arc<Event>],
    live: &HashSet<u64>,
    call_id: &str,
    query: &str,
    limit: usize,
    cancel: &CancellationToken,
) -> Result<String, ToolFailure> {
    let boundary = own_message_seq(events, call_id).unwrap_or(u64::MAX);
    let needle = fold(query);
    let mut lines = Vec::new();
    let mut matching = 0_usize;
    for (index, event) in events.iter().rev().enumerate() {
        if index % 256 == 0 && cancel.is_cancelled() {
            return Err(ToolFailure::new(
                codes::CANCELLED,
                "the turn was cancelled during the search",
            ));
        }
        if event.seq() >= boundary {
            continue;
        }
        let text = searchable_text(event);
        let Some((start, end)) = find_folded(&text, &needle) else {
            continue;
        };
        matching += 1;
        if lines.len() < limit {
            let shadowed = event.surface().is_some() && !live.contains(&event.seq());
            lines.push(format!(
                "seq={} kind={} time={}{} {}",
                event.seq(),
                event.kind(),
                format_rfc3339_utc(event.time_ms()),
                if shadowed { " [shadowed]" } else { "" },
                excerpt(&text, start, end)
            ));
        }
    }
    if matching == 0 {
        return Ok(format!("no events match \"{query}\""));
    }
    let omitted = matching - lines.len();
    if omitted > 0 {
        let hint = if limit < SessionSearch::MAX_LIMIT {
            format!(
                "; raise `limit` (at most {}) to see more",
                SessionSearch::MAX_LIMIT
            )
        } else {
            String::new()
        };
        lines.push(format!("({omitted} older matching events not shown{hint})"));
    }
    Ok(lines.join("\n"))
}

#[derive(Deserialize)]
struct MessageHolder {
    message: Message,
}

/// The seq of the `assistant/message` that holds the tool call `call_id`, searching
/// from the newest event.
fn own_message_seq(events: &[Arc<Event>], call_id: &str) -> Option<u64> {
    events
        .iter()
        .rev()
        .filter(|event| event.kind() == kinds::ASSISTANT_MESSAGE)
        .find(|event| {
            serde_json::from_str::<MessageHolder>(event.data_json())
                .is_ok_and(|holder| holder.message.tool_calls().any(|call| call.id == call_id))
        })
        .map(|event| event.seq())
}

/// The text of an event that the search looks at (see the module docs).
fn searchable_text(event: &Event) -> Cow<'_, str> {
    let raw = Cow::Borrowed(event.data_json());
    match event.kind() {
        kinds::USER_MESSAGE | kinds::ASSISTANT_MESSAGE | kinds::TOOL_RESULT => {
            match serde_json::from_str::<MessageHolder>(event.data_json()) {
                Ok(holder) => Cow::Owned(message_text(&holder.message.content)),
                Err(_) => raw,
            }
        }
        kinds::COMPACTION_SUMMARY => match event.decode::<CompactionSummary>() {
            Ok(summary) => Cow::Owned(summary.summary),
            Err(_) => raw,
        },
        _ => raw,
    }
}

fn message_text(blocks: &[ContentBlock]) -> String {
    let mut parts: Vec<String> = Vec::new();
    for block in blocks {
        match block {
            ContentBlock::Text(text) => parts.push(text.text.clone()),
            ContentBlock::Reasoning(reasoning) => {
                if !reasoning.text.is_empty() {
                    parts.push(reasoning.text.clone());
                }
            }
            ContentBlock::ToolCall(call) => {
                let arguments = match &call.raw_arguments {
                    Some(raw) => raw.clone(),
                    None => call.arguments.to_string(),
                };
                parts.push(format!("{} {arguments}", call.name));
            }
            ContentBlock::ToolResult(result) => parts.push(message_text(&result.content)),
            ContentBlock::Image(_) => {}
            ContentBlock::Unknown(object) => {
                parts.push(Value::Object(object.clone()).to_string());
            }
        }
    }
    parts.join("\n")
}

/// Lower-cases char by char, so that byte offsets map back to the original text.
fn fold(text: &str) -> String {
    text.chars().flat_map(char::to_lowercase).collect()
}

/// The byte range in `text` of the first case-insensitive match of `needle` (already
/// folded), widened to whole characters.
fn find_folded(text: &str, needle: &str) -> Option<(usize, usize)> {
    let position = fold(text).find(needle)?;
    let match_end = position + needle.len();
    let mut folded = 0;
    let mut start = None;
    for (index, character) in text.char_indices() {
        let after = folded + character.to_lowercase().map(char::len_utf8).sum::<usize>();
        if start.is_none() && position < after {
            start = Some(index);
        }
        if match_end <= after {
            return start.map(|start| (start, index + character.len_utf8()));
        }
        folded = after;
    }
    None
}

/// About [`EXCERPT_CHARS`] characters centred on the match at `start..end` (bytes),
/// whitespace flattened, `…` at cut ends.
fn excerpt(text: &str, start: usize, end: usize) -> String {
    let before = text.get(..start).unwrap_or("").chars().count();
    let matched = text.get(start..end).unwrap_or("").chars().count();
    let total = before + text.get(start..).unwrap_or("").chars().count();
    let lead = (EXCERPT_CHARS - matched.min(EXCERPT_CHARS)) / 2;
    let mut first = before.saturating_sub(lead);
    let last = (first + EXCERPT_CHARS).min(total);
    first = first.min(last.saturating_sub(EXCERPT_CHARS));
    let byte_at = |chars: usize| {
        text.char_indices()
            .nth(chars)
            .map_or(text.len(), |(index, _)| index)
    };
    let window = text.get(byte_at(first)..byte_at(last)).unwrap_or("");
    let flat = window.split_whitespace().collect::<Vec<_>>().join(" ");
    format!(
        "{}{flat}{}",
        if first > 0 { "…" } else { "" },
        if last < total { "…" } else { "" }
    )
}

/// Formats epoch milliseconds as RFC 3339 UTC with whole seconds, e.g.
/// `2026-12-01T03:40:05Z` (milliseconds are dropped, rounding toward the past).
pub(crate) fn format_rfc3339_utc(time_ms: i64) -> String {
    let seconds = time_ms.div_euclid(1000);
    let days = seconds.div_euclid(86_400);
    let of_day = seconds.rem_euclid(86_400);
    let (year, month, day) = civil_from_days(days);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}Z",
        of_day / 3600,
        of_day % 3600 / 60,
        of_day % 60
    )
}

/// Days since 1970-01-01 to a proleptic Gregorian (year, month, day).
fn civil_from_days(days: i64) -> (i64, i64, i64) {
    let shifted = days + 719_468; // days since 0000-03-01
    let era = shifted.div_euclid(146_097);
    let day_of_era = shifted.rem_euclid(146_097);
    let year_of_era =
        (day_of_era - day_of_era / 1460 + day_of_era / 36_524 - day_of_era / 146_096) / 365;
    let day_of_year = day_of_era - (365 * year_of_era + year_of_era / 4 - year_of_era / 100);
    let month_from_march = (5 * day_of_year + 2) / 153;
    let day = day_of_year - (153 * month_from_march + 2) / 5 + 1;
    let month = if month_from_march < 10 {
        month_from_march + 3
    } else {
        month_from_march - 9
    };
    let year = year_of_era + era * 400 + i64::from(month <= 2);
    (year, month, day)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rfc3339_known_instants() {
        assert_eq!(format_rfc3339_utc(0), "1970-01-01T00:00:00Z");
        assert_eq!(format_rfc3339_utc(-1), "1969-12-31T23:59:59Z");
        assert_eq!(format_rfc3339_utc(951_782_400_000), "2000-02-29T00:00:00Z");
        assert_eq!(
            format_rfc3339_utc(1_796_096_405_999),
            "2026-12-01T03:40:05Z"
        );
        assert_eq!(
            format_rfc3339_utc(4_107_542_399_000),
            "2100-02-28T23:59:59Z"
        );
        assert_eq!(
            format_rfc3339_utc(4_107_542_400_000),
            "2100-03-01T00:00:00Z"
        );
        assert_eq!(
            format_rfc3339_utc(-2_208_988_800_000),
            "1900-01-01T00:00:00Z"
        );
    }

    #[test]
    fn civil_from_days_round_trips_every_day_of_four_centuries() {
        // Walk day by day from 1600-01-01 and check the calendar advances correctly.
        let mut expected = (1600_i64, 1_i64, 1_i64);
        let start = -135_140; // 1600-01-01
        for days in start..start + 146_097 {
            assert_eq!(civil_from_days(days), expected, "day {days}");
            let (year, month, day) = expected;
            let leap = year % 4 == 0 && (year % 100 != 0 || year % 400 == 0);
            let length = match month {
                2 if leap => 29,
                2 => 28,
                4 | 6 | 9 | 11 => 30,
                _ => 31,
            };
            expected = if day < length {
                (year, month, day + 1)
            } else if month < 12 {
                (year, month + 1, 1)
            } else {
                (year + 1, 1, 1)
            };
        }
    }

    #[test]
    fn folded_match_maps_back_to_original_bytes() {
        let text = "Straße İstanbul ÄÖÜ end";
        let needle = fold("istanbul");
        // 'İ' lower-cases to two chars (i, U+0307), so "istanbul" does not match at the
        // İ; a match that starts inside a folded character maps to the whole character.
        assert_eq!(find_folded(text, &needle), None);
        let found = find_folded(text, &fold("STANBUL äöü"));
        assert_eq!(
            found.map(|(start, end)| &text[start..end]),
            Some("stanbul ÄÖÜ")
        );
        let found = find_folded(text, &fold("i\u{307}s"));
        assert_eq!(found.map(|(start, end)| &text[start..end]), Some("İs"));
    }

    #[test]
    fn excerpt_windows_and_ellipses() {
        let short = "one\ntwo\t three";
        assert_eq!(excerpt(short, 4, 7), "one two three");
        let long = format!("{}NEEDLE{}", "a".repeat(200), "b".repeat(200));
        let cut = excerpt(&long, 200, 206);
        assert_eq!(cut, format!("…{}NEEDLE{}…", "a".repeat(77), "b".repeat(77)));
        let near_end = format!("{}NEEDLE", "a".repeat(300));
        assert_eq!(
            excerpt(&near_end, 300, 306),
            format!("…{}NEEDLE", "a".repeat(154))
        );
    }

    #[test]
    fn limit_rules() {
        assert_eq!(limit_argument(None).ok(), Some(20));
        assert_eq!(limit_argument(Some(&json!(5))).ok(), Some(5));
        assert_eq!(limit_argument(Some(&json!(5.0))).ok(), Some(5));
        assert_eq!(limit_argument(Some(&json!(1000))).ok(), Some(100));
        assert_eq!(limit_argument(Some(&json!(1e300))).ok(), Some(100));
        for bad in [json!(0), json!(-3), json!(2.5), json!("7"), json!(true)] {
            assert_eq!(
                limit_argument(Some(&bad)).err().map(|failure| failure.code),
                Some("INVALID_ARGUMENTS".to_owned()),
                "{bad}"
            );
        }
    }
}
