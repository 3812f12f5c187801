//! An incremental Server-Sent Events parser for untrusted bytes from the network
//! (spec H-LLM-7: the OpenAI-compatible / DeepSeek adapter uses its own SSE parser;
//! H-TEST-3: it is covered by property and fuzz tests).
//!
//! [`SseParser`] follows the WHATWG EventSource "parsing an event stream" rules
//! (<https://html.spec.whatwg.org/multipage/server-sent-events.html#event-stream-interpretation>):
//!
//! - one UTF-8 byte order mark at the very start of the stream is skipped, also when it is
//!   split across feeds;
//! - lines end with CRLF, LF or CR, and a CR at the end of one feed followed by an LF at
//!   the start of the next is one line end;
//! - lines starting with `:` are comments; `name:value` drops one leading space from the
//!   value; a line without a colon is a field name with an empty value; unknown fields are
//!   ignored;
//! - `data` lines are joined with `\n`; a blank line dispatches the event if a `data`
//!   field was seen, and otherwise only resets the event type;
//! - `id` persists across events until changed (an `id` containing NUL is ignored);
//!   `retry` is taken only when it is all ASCII digits.
//!
//! Where this parser deliberately differs from the browser algorithm:
//!
//! - **Invalid UTF-8 is an error** ([`SseError::InvalidUtf8`], naming the line), not a
//!   silent U+FFFD replacement: a provider that sends broken bytes has a bug we want to
//!   see, and replacing would corrupt JSON payloads without a trace.
//! - **Memory is bounded** by two limits ([`SseParser::with_limits`]): the length of one
//!   line and the size of one event's data. Exceeding either is an error.
//! - **At end of stream an unterminated event is dispatched if it has data**
//!   ([`SseParser::finish`]). WHATWG discards it, but providers sometimes close the
//!   connection right after the last `data:` line without the final blank line, and
//!   dropping that event would lose the end of an answer or its usage chunk.
//! - **Errors are sticky**: once [`SseParser::feed`] or [`SseParser::finish`] has failed,
//!   the stream is broken and every later call returns the same error. Events completed
//!   before the failing line have already been appended to `out`.
//!
//! The parser never panics and does not depend on how the bytes are split: feeding a
//! stream in any pieces gives the same events (or the same error) as feeding it whole.
//!
//! ```
//! use ccare_llm::sse::SseParser;
//!
//! let mut parser = SseParser::new();
//! let mut events = Vec::new();
//! parser.feed(b"data: {\"a\":1}\r", &mut events).unwrap();
//! parser.feed(b"\n\r\ndata: [DONE]\n\n", &mut events).unwrap();
//! parser.finish(&mut events).unwrap();
//! assert_eq!(events.len(), 2);
//! assert_eq!(events[0].data, "{\"a\":1}");
//! assert_eq!(events[0].line, 1);
//! assert!(events[1].is_done());
//! assert_eq!(events[1].line, 3);
//! ```

use std::mem;

/// The UTF-8 byte order mark, skipped once at the start of a stream.
const BOM: &[u8; 3] = b"\xEF\xBB\xBF";

/// One dispatched Server-Sent Event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SseEvent {
    /// The `event:` field (the event type), or `None` when no non-empty type was given,
    /// which EventSource treats as `"message"` (see [`SseEvent::event_type`]).
    pub event: Option<String>,
    /// The `data:` lines of the event joined with `\n`, without a trailing newline.
    pub data: String,
    /// The stream's last event ID when this event was dispatched (EventSource
    /// `lastEventId`): an `id:` field holds for later events until another `id:` changes
    /// it, and an empty `id:` clears it to `None`.
    pub id: Option<String>,
    /// The 1-based line number of the event's first field line, for error messages that
    /// point into the raw stream (comment lines before it do not count).
    pub line: u64,
}

impl SseEvent {
    /// Whether this is OpenAI's end-of-stream marker, `data: [DONE]`; its data is not
    /// JSON and must not be parsed as a chunk.
    pub fn is_done(&self) -> bool {
        self.data == "[DONE]"
    }

    /// The event type as EventSource reports it: the `event:` field, or `"message"` when
    /// there was none.
    pub fn event_type(&self) -> &str {
        self.event.as_deref().unwrap_or("message")
    }
}

/// Why a stream could not be parsed. Each variant names the 1-based line where parsing
/// stopped, so a log entry can point into the raw bytes.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SseError {
    /// A line is not valid UTF-8. The parser does not replace bytes lossily: a provider
    /// that sends broken UTF-8 has a bug that must be visible.
    #[error("SSE line {line} is not valid UTF-8")]
    InvalidUtf8 {
        /// The line that failed to decode.
        line: u64,
    },
    /// A line is longer than the parser's line limit (terminator not counted); reading
    /// further would let a peer make us buffer without bound.
    #[error("SSE line {line} is longer than the line limit of {limit} bytes")]
    LineTooLong {
        /// The line that is too long.
        line: u64,
        /// The limit in bytes, as given to [`SseParser::with_limits`].
        limit: usize,
    },
    /// An event's data (all its `data:` lines joined) grew past the event limit.
    #[error("SSE event data at line {line} exceeds the event limit of {limit} bytes")]
    EventTooLarge {
        /// The `data:` line that pushed the event over the limit.
        line: u64,
        /// The limit in bytes, as given to [`SseParser::with_limits`].
        limit: usize,
    },
}

impl SseError {
    /// The 1-based line number where parsing stopped.
    pub fn line(&self) -> u64 {
        match self {
            SseError::InvalidUtf8 { line }
            | SseError::LineTooLong { line, .. }
            | SseError::EventTooLarge { line, .. } => *line,
        }
    }
}

/// An incremental SSE parser: feed it bytes as they arrive with [`SseParser::feed`], then
/// call [`SseParser::finish`] at end of stream. It keeps only the unfinished line and the
/// unfinished event between calls, both bounded by its limits.
#[derive(Debug, Clone)]
pub struct SseParser {
    /// Longest line accepted, in bytes without the terminator.
    max_line: usize,
    /// Largest event data accepted, in bytes.
    max_event: usize,
    /// Bytes of a line whose terminator has not arrived yet; while `bom_checked` is false
    /// it holds the first (at most 3) bytes of the stream.
    partial_line: Vec<u8>,
    /// Whether the start of the stream has been checked for a byte order mark.
    bom_checked: bool,
    /// The previous feed ended with CR, so an LF at the start of the next feed belongs to
    /// that line end.
    skip_lf: bool,
    /// Lines consumed so far.
    line: u64,
    /// The event type buffer.
    event_type: String,
    /// The data buffer, without the trailing `\n` WHATWG keeps.
    data: String,
    /// Whether a `data` field was seen since the last dispatch.
    has_data: bool,
    /// The line of the first field of the event being built, if any field was seen.
    event_line: Option<u64>,
    /// The last event ID buffer (empty = none); persists across events.
    last_event_id: String,
    /// The last valid `retry:` value.
    retry_ms: Option<u64>,
    /// The error that broke the stream; every later call returns it.
    failed: Option<SseError>,
}

impl Default for SseParser {
    fn default() -> Self {
        SseParser::new()
    }
}

impl SseParser {
    /// The default line limit: 8 MiB, far above any real chunk, low enough to refuse a
    /// peer that never sends a newline.
    pub const DEFAULT_MAX_LINE: usize = 8 * 1024 * 1024;
    /// The default event limit: 16 MiB of joined `data:`.
    pub const DEFAULT_MAX_EVENT: usize = 16 * 1024 * 1024;

    /// A parser with the default limits ([`Self::DEFAULT_MAX_LINE`],
    /// [`Self::DEFAULT_MAX_EVENT`]).
    pub fn new() -> Self {
        SseParser::with_limits(Self::DEFAULT_MAX_LINE, Self::DEFAULT_MAX_EVENT)
    }

    /// A parser that refuses lines longer than `max_line` bytes (terminator not counted)
    /// and events whose joined data is longer than `max_event` bytes, so that memory stays
    /// bounded whatever the peer sends.
    pub fn with_limits(max_line: usize, max_event: usize) -> Self {
        SseParser {
            max_line,
            max_event,
            partial_line: Vec::new(),
            bom_checked: false,
            skip_lf: false,
            line: 0,
            event_type: String::new(),
            data: String::new(),
            has_data: false,
            event_line: None,
            last_event_id: String::new(),
            retry_ms: None,
            failed: None,
        }
    }

    /// Parses the next bytes of the stream and appends every event they complete to
    /// `out`. Bytes may be split anywhere, even inside a UTF-8 character or a CRLF.
    ///
    /// On error, events completed before the failing line are already in `out`, and the
    /// parser stays failed: later calls return the same error.
    pub fn feed(&mut self, bytes: &[u8], out: &mut Vec<SseEvent>) -> Result<(), SseError> {
        if let Some(error) = &self.failed {
            return Err(error.clone());
        }
        let result = self.feed_inner(bytes, out);
        if let Err(error) = &result {
            self.failed = Some(error.clone());
        }
        result
    }

    /// Ends the stream: a final line without a terminator is processed, and an event that
    /// has data but was not closed by a blank line is dispatched (WHATWG discards it;
    /// providers sometimes close without the final blank line, see the module docs).
    ///
    /// Afterwards the parser is ready for a new stream (a reconnect): the line count,
    /// the byte order mark check and the event buffers start over, while
    /// [`Self::last_event_id`] and [`Self::retry_ms`] are kept, as EventSource keeps
    /// them across reconnections. A failed parser stays failed.
    pub fn finish(&mut self, out: &mut Vec<SseEvent>) -> Result<(), SseError> {
        if let Some(error) = &self.failed {
            return Err(error.clone());
        }
        let result = self.finish_inner(out);
        if let Err(error) = &result {
            self.failed = Some(error.clone());
        }
        result
    }

    /// The reconnection time from the last valid `retry:` field, in milliseconds. A value
    /// that is not all ASCII digits, or does not fit in `u64`, is ignored.
    pub fn retry_ms(&self) -> Option<u64> {
        self.retry_ms
    }

    /// The last event ID set by an `id:` field (`None` if never set or set empty), to send
    /// as `Last-Event-ID` when reconnecting.
    pub fn last_event_id(&self) -> Option<&str> {
        non_empty(&self.last_event_id)
    }

    /// The number of lines consumed so far in the current stream.
    pub fn line(&self) -> u64 {
        self.line
    }

    fn feed_inner(&mut self, mut bytes: &[u8], out: &mut Vec<SseEvent>) -> Result<(), SseError> {
        if !self.bom_checked {
            // Collect the first 3 bytes of the stream in `partial_line` to compare them
            // with the byte order mark, however the stream is split.
            let wanted = BOM.len().saturating_sub(self.partial_line.len());
            let (head, rest) = bytes.split_at(wanted.min(bytes.len()));
            self.partial_line.extend_from_slice(head);
            bytes = rest;
            if BOM.starts_with(&self.partial_line) {
                if self.partial_line.len() < BOM.len() {
                    return Ok(());
                }
                self.partial_line.clear();
                self.bom_checked = true;
            } else {
                // Not a BOM: those bytes are the start of the first line.
                self.bom_checked = true;
                let start = mem::take(&mut self.partial_line);
                self.scan(&start, out)?;
            }
        }
        self.scan(bytes, out)
    }

    fn finish_inner(&mut self, out: &mut Vec<SseEvent>) -> Result<(), SseError> {
        // A BOM prefix that never completed is ordinary line content.
        if !self.partial_line.is_empty() {
            let line = mem::take(&mut self.partial_line);
            self.check_line_length(line.len())?;
            self.process_line(&line, out)?;
        }
        if self.has_data {
            self.dispatch(out);
        }
        let last_event_id = mem::take(&mut self.last_event_id);
        let retry_ms = self.retry_ms;
        *self = SseParser::with_limits(self.max_line, self.max_event);
        self.last_event_id = last_event_id;
        self.retry_ms = retry_ms;
        Ok(())
    }

    /// Splits `bytes` into lines, processing complete ones and keeping the unterminated
    /// tail in `partial_line`.
    fn scan(&mut self, mut bytes: &[u8], out: &mut Vec<SseEvent>) -> Result<(), SseError> {
        if self.skip_lf && !bytes.is_empty() {
            self.skip_lf = false;
            if bytes[0] == b'\n' {
                bytes = &bytes[1..];
            }
        }
        while let Some(end) = memchr::memchr2(b'\n', b'\r', bytes) {
            let (content, terminator) = bytes.split_at(end);
            let terminator_len = match terminator {
                [b'\r', b'\n', ..] => 2,
                [b'\r'] => {
                    // The LF of a CRLF may come with the next feed.
                    self.skip_lf = true;
                    1
                }
                _ => 1,
            };
            if self.partial_line.is_empty() {
                self.check_line_length(content.len())?;
                self.process_line(content, out)?;
            } else {
                self.check_line_length(self.partial_line.len().saturating_add(content.len()))?;
                let mut line = mem::take(&mut self.partial_line);
                line.extend_from_slice(content);
                let result = self.process_line(&line, out);
                // Keep the buffer's capacity for the next partial line.
                line.clear();
                self.partial_line = line;
                result?;
            }
            bytes = terminator.get(terminator_len..).unwrap_or_default();
        }
        if !bytes.is_empty() {
            self.check_line_length(self.partial_line.len().saturating_add(bytes.len()))?;
            self.partial_line.extend_from_slice(bytes);
        }
        Ok(())
    }

    /// Fails if a line of `len` bytes, the next one to be consumed, is over the limit.
    fn check_line_length(&self, len: usize) -> Result<(), SseError> {
        if len > self.max_line {
            return Err(SseError::LineTooLong {
                line: self.line.saturating_add(1),
                limit: self.max_line,
            });
        }
        Ok(())
    }

    /// Interprets one complete line (without its terminator).
    fn process_line(&mut self, line: &[u8], out: &mut Vec<SseEvent>) -> Result<(), SseError> {
        self.line = self.line.saturating_add(1);
        let line_number = self.line;
        let text =
            std::str::from_utf8(line).map_err(|_| SseError::InvalidUtf8 { line: line_number })?;
        if text.is_empty() {
            if self.has_data {
                self.dispatch(out);
            } else {
                // WHATWG: an empty data buffer dispatches nothing but resets the type.
                self.event_type.clear();
                self.event_line = None;
            }
            return Ok(());
        }
        if text.starts_with(':') {
            return Ok(());
        }
        let (name, value) = match memchr::memchr(b':', line) {
            Some(colon) => {
                let value = &text[colon + 1..];
                (&text[..colon], value.strip_prefix(' ').unwrap_or(value))
            }
            None => (text, ""),
        };
        if self.event_line.is_none() {
            self.event_line = Some(line_number);
        }
        match name {
            "data" => {
                let separator = usize::from(self.has_data);
                let new_len = self
                    .data
                    .len()
                    .saturating_add(separator)
                    .saturating_add(value.len());
                if new_len > self.max_event {
                    return Err(SseError::EventTooLarge {
                        line: line_number,
                        limit: self.max_event,
                    });
                }
                if self.has_data {
                    self.data.push('\n');
                }
                self.data.push_str(value);
                self.has_data = true;
            }
            "event" => {
                self.event_type.clear();
                self.event_type.push_str(value);
            }
            // An id containing NUL is ignored, like unknown fields.
            "id" if !value.contains('\0') => {
                self.last_event_id.clear();
                self.last_event_id.push_str(value);
            }
            "retry" => {
                // Digits only: `parse` alone would also accept a leading `+`.
                if value.bytes().all(|byte| byte.is_ascii_digit())
                    && let Ok(retry_ms) = value.parse::<u64>()
                {
                    self.retry_ms = Some(retry_ms);
                }
            }
            _ => {}
        }
        Ok(())
    }

    /// Emits the event being built and resets the per-event buffers.
    fn dispatch(&mut self, out: &mut Vec<SseEvent>) {
        let event = if self.event_type.is_empty() {
            None
        } else {
            Some(mem::take(&mut self.event_type))
        };
        out.push(SseEvent {
            event,
            data: mem::take(&mut self.data),
            id: non_empty(&self.last_event_id).map(str::to_owned),
            line: self.event_line.take().unwrap_or(self.line),
        });
        self.has_data = false;
    }
}

fn non_empty(text: &str) -> Option<&str> {
    if text.is_empty() { None } else { Some(text) }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use super::*;

    /// Feeds `chunks` in order, then finishes; panics on error.
    fn parse_chunks(chunks: &[&[u8]]) -> Vec<SseEvent> {
        let mut parser = SseParser::new();
        let mut events = Vec::new();
        for chunk in chunks {
            parser.feed(chunk, &mut events).unwrap();
        }
        parser.finish(&mut events).unwrap();
        events
    }

    fn parse(stream: &str) -> Vec<SseEvent> {
        parse_chunks(&[stream.as_bytes()])
    }

    /// Feeds `stream` whole and one byte at a time; both must agree.
    fn parse_both_ways(stream: &[u8]) -> Result<Vec<SseEvent>, (Vec<SseEvent>, SseError)> {
        let run = |chunks: Vec<&[u8]>| {
            let mut parser = SseParser::new();
            let mut events = Vec::new();
            for chunk in chunks {
                if let Err(error) = parser.feed(chunk, &mut events) {
                    return Err((events, error));
                }
            }
            match parser.finish(&mut events) {
                Ok(()) => Ok(events),
                Err(error) => Err((events, error)),
            }
        };
        let whole = run(vec![stream]);
        let bytewise = run(stream.chunks(1).collect());
        assert_eq!(whole, bytewise);
        whole
    }

    fn event(data: &str, line: u64) -> SseEvent {
        SseEvent {
            event: None,
            data: data.to_owned(),
            id: None,
            line,
        }
    }

    #[test]
    fn h_llm_7_simple_events_with_line_numbers() {
        let events = parse("data: a\n\ndata: b\n\n");
        assert_eq!(events, vec![event("a", 1), event("b", 3)]);
    }

    #[test]
    fn h_llm_7_bom_is_skipped() {
        assert_eq!(parse("\u{FEFF}data: a\n\n"), vec![event("a", 1)]);
    }

    #[test]
    fn h_llm_7_bom_split_across_feeds() {
        let events = parse_chunks(&[b"\xEF", b"\xBB", b"\xBFdata: a\n\n"]);
        assert_eq!(events, vec![event("a", 1)]);
        let events = parse_chunks(&[b"\xEF\xBB", b"\xBF", b"data: a\n\n"]);
        assert_eq!(events, vec![event("a", 1)]);
    }

    #[test]
    fn h_llm_7_only_first_bom_is_skipped() {
        // A second BOM is part of the field name, which is then unknown.
        assert_eq!(
            parse("\u{FEFF}\u{FEFF}data: a\n\ndata: b\n\n"),
            vec![event("b", 3)]
        );
    }

    #[test]
    fn h_llm_7_short_stream_starting_like_bom() {
        // Bytes that start like a BOM but are not one are ordinary content.
        assert_eq!(
            parse_both_ways(b"\n\xEF\xBB"),
            Err((vec![], SseError::InvalidUtf8 { line: 2 }))
        );
        assert_eq!(
            parse_both_ways(b"\xEF\xBB"),
            Err((vec![], SseError::InvalidUtf8 { line: 1 }))
        );
        assert_eq!(parse_both_ways(b"da"), Ok(vec![]));
        assert_eq!(parse_both_ways(b"\n\n"), Ok(vec![]));
    }

    #[test]
    fn h_llm_7_crlf_line_ends() {
        let events = parse("data: a\r\ndata: b\r\n\r\ndata: c\r\n\r\n");
        assert_eq!(events, vec![event("a\nb", 1), event("c", 4)]);
    }

    #[test]
    fn h_llm_7_crlf_split_across_feeds() {
        let events = parse_chunks(&[b"data: a\r", b"\n", b"\r", b"\ndata: b\r", b"\n\r", b"\n"]);
        assert_eq!(events, vec![event("a", 1), event("b", 3)]);
    }

    #[test]
    fn h_llm_7_cr_only_line_ends() {
        let events = parse("data: a\rdata: b\r\rdata: c\r\r");
        assert_eq!(events, vec![event("a\nb", 1), event("c", 4)]);
        // CR at the end of a feed followed by CR: two line ends, not one.
        let events = parse_chunks(&[b"data: a\r", b"\rdata: b\r", b"\r"]);
        assert_eq!(events, vec![event("a", 1), event("b", 3)]);
    }

    #[test]
    fn h_llm_7_lf_after_cr_only_skipped_once() {
        // `\r\n\n`: CRLF then LF, a blank line.
        let events = parse_chunks(&[b"data: a\r", b"\n", b"\n"]);
        assert_eq!(events, vec![event("a", 1)]);
        // The skipped LF survives empty feeds.
        let events = parse_chunks(&[b"data: a\r", b"", b"\ndata: b\n\n"]);
        assert_eq!(events, vec![event("a\nb", 1)]);
    }

    #[test]
    fn h_llm_7_multi_line_data() {
        let events = parse("data: one\ndata:two\ndata:  three\ndata\ndata:\n\n");
        assert_eq!(events, vec![event("one\ntwo\n three\n\n", 1)]);
    }

    #[test]
    fn h_llm_7_empty_data_line_dispatches_empty_event() {
        assert_eq!(parse("data\n\n"), vec![event("", 1)]);
    }

    #[test]
    fn h_llm_7_comments_are_ignored() {
        let events = parse(": keep-alive\n\n: OPENROUTER PROCESSING\ndata: a\n: inside\n\n");
        assert_eq!(events, vec![event("a", 4)]);
    }

    #[test]
    fn h_llm_7_field_without_colon_and_unknown_fields() {
        let events = parse("foo: bar\ndata: x\nbaz\n\n");
        assert_eq!(events, vec![event("x", 1)]);
        // Field names are case-sensitive.
        assert_eq!(parse("Data: x\n\n"), vec![]);
    }

    #[test]
    fn h_llm_7_value_keeps_further_colons_and_spaces() {
        let events = parse("data: {\"a\": \"b:c\"}  \n\n");
        assert_eq!(events, vec![event("{\"a\": \"b:c\"}  ", 1)]);
    }

    #[test]
    fn h_llm_7_event_type() {
        let events = parse("event: delta\ndata: x\n\ndata: y\n\n");
        assert_eq!(events[0].event.as_deref(), Some("delta"));
        assert_eq!(events[0].event_type(), "delta");
        assert_eq!(events[1].event, None, "the type does not carry over");
        assert_eq!(events[1].event_type(), "message");
        // An empty type means the default.
        assert_eq!(parse("event:\ndata: x\n\n")[0].event, None);
    }

    #[test]
    fn h_llm_7_event_type_reset_by_blank_line_without_data() {
        let events = parse("event: ping\n\ndata: x\n\n");
        assert_eq!(events, vec![event("x", 3)]);
    }

    #[test]
    fn h_llm_7_retry_valid() {
        let mut parser = SseParser::new();
        let mut events = Vec::new();
        parser.feed(b"retry: 3000\n\n", &mut events).unwrap();
        assert_eq!(parser.retry_ms(), Some(3000));
        assert!(events.is_empty(), "retry alone dispatches nothing");
        parser.feed(b"retry:0\n", &mut events).unwrap();
        assert_eq!(parser.retry_ms(), Some(0));
    }

    #[test]
    fn h_llm_7_retry_invalid_is_ignored() {
        let mut parser = SseParser::new();
        let mut events = Vec::new();
        parser.feed(b"retry: 1500\n", &mut events).unwrap();
        for invalid in [
            "retry: -1\n",
            "retry: +5\n",
            "retry: 1.5\n",
            "retry: 12a\n",
            "retry:\n",
            "retry\n",
            "retry:  7\n",
            "retry: 99999999999999999999999\n",
        ] {
            parser.feed(invalid.as_bytes(), &mut events).unwrap();
            assert_eq!(parser.retry_ms(), Some(1500), "{invalid:?}");
        }
    }

    #[test]
    fn h_llm_7_done_marker() {
        let events = parse("data: {\"x\":1}\n\ndata: [DONE]\n\n");
        assert!(!events[0].is_done());
        assert!(events[1].is_done());
        assert!(!parse("data:  [DONE]\n\n")[0].is_done());
    }

    #[test]
    fn h_llm_7_id_persists_and_resets() {
        let events = parse("id: 1\ndata: a\n\ndata: b\n\nid\ndata: c\n\n");
        assert_eq!(events[0].id.as_deref(), Some("1"));
        assert_eq!(events[1].id.as_deref(), Some("1"));
        assert_eq!(events[2].id, None);
    }

    #[test]
    fn h_llm_7_id_with_nul_is_ignored() {
        let mut parser = SseParser::new();
        let mut events = Vec::new();
        parser
            .feed(b"id: 7\ndata: a\n\nid: 8\0x\ndata: b\n\n", &mut events)
            .unwrap();
        assert_eq!(events[1].id.as_deref(), Some("7"));
        assert_eq!(parser.last_event_id(), Some("7"));
    }

    #[test]
    fn h_llm_7_final_event_without_blank_line_is_dispatched() {
        assert_eq!(
            parse("data: a\n\ndata: b\n"),
            vec![event("a", 1), event("b", 3)]
        );
        // Without any terminator at all.
        assert_eq!(
            parse("data: a\n\ndata: b"),
            vec![event("a", 1), event("b", 3)]
        );
        // Without data there is nothing to dispatch.
        assert_eq!(parse("data: a\n\nevent: x\nid: 3"), vec![event("a", 1)]);
    }

    #[test]
    fn h_llm_7_finish_starts_a_new_stream() {
        let mut parser = SseParser::new();
        let mut events = Vec::new();
        parser
            .feed(b"id: 5\nretry: 10\ndata: a", &mut events)
            .unwrap();
        parser.finish(&mut events).unwrap();
        assert_eq!(parser.line(), 0);
        assert_eq!(parser.last_event_id(), Some("5"));
        assert_eq!(parser.retry_ms(), Some(10));
        parser
            .feed(b"\xEF\xBB\xBFdata: b\n\n", &mut events)
            .unwrap();
        assert_eq!(events[1].data, "b");
        assert_eq!(events[1].id.as_deref(), Some("5"));
        assert_eq!(events[1].line, 1);
    }

    #[test]
    fn h_llm_7_line_counts_lines_consumed() {
        let mut parser = SseParser::new();
        let mut events = Vec::new();
        parser.feed(b"data: a\r\n\r\n: c", &mut events).unwrap();
        assert_eq!(parser.line(), 2);
        parser.finish(&mut events).unwrap();
        assert_eq!(events, vec![event("a", 1)]);
    }

    #[test]
    fn h_llm_7_line_too_long() {
        let mut parser = SseParser::with_limits(8, 100);
        let mut events = Vec::new();
        parser.feed(b"data: 12\n\n", &mut events).unwrap();
        let error = parser.feed(b"data: 123\n", &mut events).unwrap_err();
        assert_eq!(error, SseError::LineTooLong { line: 3, limit: 8 });
        assert_eq!(
            error.to_string(),
            "SSE line 3 is longer than the line limit of 8 bytes"
        );
        assert_eq!(events, vec![event("12", 1)]);
        // The error is sticky.
        assert_eq!(parser.feed(b"\n", &mut events), Err(error.clone()));
        assert_eq!(parser.finish(&mut events), Err(error));
    }

    #[test]
    fn h_llm_7_line_too_long_detected_before_terminator() {
        let mut parser = SseParser::with_limits(8, 100);
        let mut events = Vec::new();
        parser.feed(b"data: ", &mut events).unwrap();
        let error = parser.feed(b"123", &mut events).unwrap_err();
        assert_eq!(error, SseError::LineTooLong { line: 1, limit: 8 });
    }

    #[test]
    fn h_llm_7_event_too_large() {
        let mut parser = SseParser::with_limits(100, 5);
        let mut events = Vec::new();
        parser.feed(b"data: ab\ndata: cd\n\n", &mut events).unwrap();
        assert_eq!(events, vec![event("ab\ncd", 1)]);
        let error = parser
            .feed(b"data: ab\n\ndata: abc\ndata: de\n", &mut events)
            .unwrap_err();
        assert_eq!(error, SseError::EventTooLarge { line: 7, limit: 5 });
        assert_eq!(error.line(), 7);
        assert_eq!(
            error.to_string(),
            "SSE event data at line 7 exceeds the event limit of 5 bytes"
        );
        assert_eq!(events.len(), 2);
    }

    #[test]
    fn h_llm_7_invalid_utf8_names_the_line() {
        let result = parse_both_ways(b"data: a\n\n: ok\ndata: \xFF\n\n");
        let (events, error) = result.unwrap_err();
        assert_eq!(events, vec![event("a", 1)]);
        assert_eq!(error, SseError::InvalidUtf8 { line: 4 });
        assert_eq!(error.to_string(), "SSE line 4 is not valid UTF-8");
    }

    #[test]
    fn h_llm_7_invalid_utf8_in_comment_and_final_line() {
        let (_, error) = parse_both_ways(b"\r\n:\xC3\x28\r\n").unwrap_err();
        assert_eq!(error, SseError::InvalidUtf8 { line: 2 });
        let (_, error) = parse_both_ways(b"data: a\r\rdata: \xE2\x82").unwrap_err();
        assert_eq!(error, SseError::InvalidUtf8 { line: 3 });
    }

    #[test]
    fn h_llm_7_utf8_split_across_feeds() {
        let bytes = "data: héllo €\n\n".as_bytes();
        for split in 0..bytes.len() {
            let (head, tail) = bytes.split_at(split);
            assert_eq!(parse_chunks(&[head, tail]), vec![event("héllo €", 1)]);
        }
    }

    #[test]
    fn h_test_3_every_split_of_a_mixed_stream_agrees() {
        let stream: &[u8] =
            b"\xEF\xBB\xBF: hi\r\nevent: e\rid: 1\ndata: a\r\n\r\ndata:b\r\rretry: 5\n\ndata: c";
        let whole = parse_both_ways(stream).unwrap();
        assert_eq!(whole.len(), 3);
        for split in 0..=stream.len() {
            for second in split..=stream.len() {
                let chunks = [&stream[..split], &stream[split..second], &stream[second..]];
                assert_eq!(parse_chunks(&chunks), whole, "split at {split}, {second}");
            }
        }
    }
}
