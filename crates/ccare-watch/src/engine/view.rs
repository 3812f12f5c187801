//! The view a trigger judges (SW-2): the recent text as chunks, the window of recent
//! lines with their counts, and the open line. Every operation costs O(|delta|) or
//! O(`LINE_WINDOW`), never the accumulated text (SW-3).

use std::collections::VecDeque;

use super::lines::LineWindow;
use super::text::{DeltaScan, js_trim, scan_delta, suffix_within_units, utf16_len};

/// The most text a view keeps, in UTF-16 units (SW-2).
pub const TEXT_LIMIT: usize = 16_384;
/// How many recent lines the line window holds (SW-2).
pub const LINE_WINDOW: usize = 80;
/// The shortest trimmed line, in UTF-16 units, that joins the line window (SW-2).
pub const MIN_LINE_LEN: usize = 3;
/// The most of the open (unterminated) line a view keeps, in UTF-16 units (SW-2).
pub const LINE_LIMIT: usize = 4_096;
/// The default `everyChars` of a windowed trigger: new UTF-16 units between checks (SW-2).
pub const WINDOWED_EVERY: usize = 300;

/// One kept piece of streamed text: its length in bytes and in UTF-16 units. The
/// pieces lie back to back in the view's buffer. A kept piece has at most
/// `TEXT_LIMIT` units, so at most 4 × `TEXT_LIMIT` bytes: `u32` holds both, and the
/// small entry keeps the ring of thousands of chunks in few cache lines.
#[derive(Debug, Clone, Copy)]
struct TextChunk {
    bytes: u32,
    units: u32,
}

impl TextChunk {
    fn bytes(self) -> usize {
        self.bytes as usize
    }

    fn units(self) -> usize {
        self.units as usize
    }
}

/// Below this many dropped bytes the buffer is not compacted: moving a few bytes
/// often costs more than keeping them.
const MIN_COMPACT: usize = 4_096;

/// The streamed text one trigger sees (SW-2): kept as chunks and never concatenated,
/// split into lines at `\n`, with an 80-line window of the recent ones.
///
/// The chunks lie back to back in one buffer that is compacted in place once the
/// dropped text outweighs the kept, so a delta costs O(|delta|) amortized and, once
/// the buffers have grown, allocates nothing (SW-3).
///
/// ```
/// use ccare_watch::engine::View;
///
/// let mut view = View::new();
/// assert_eq!(view.push("ab\n{}\n\n   \nreal line\nopen"), 1);
/// assert_eq!(view.lines().iter().collect::<Vec<_>>(), ["real line"]);
/// assert_eq!(view.open_line(), "open");
/// ```
#[derive(Debug, Clone, Default)]
pub struct View {
    /// The kept text is `buffer[start..]`: the chunks, oldest first.
    buffer: String,
    start: usize,
    chunks: VecDeque<TextChunk>,
    text_units: usize,
    /// The open line; may hold up to twice `LINE_LIMIT` units, cut lazily so that a
    /// long line costs O(1) per character (read it through [`View::open_line`]).
    open_line: String,
    open_units: usize,
    lines: LineWindow,
}

impl View {
    /// An empty view, as at the start of an attempt.
    pub fn new() -> Self {
        Self::default()
    }

    /// Appends one delta and returns how many lines joined the window.
    ///
    /// The text keeps at most the delta's last `TEXT_LIMIT` units and drops its oldest
    /// chunks while it is over the limit and more than one chunk remains. Each `\n`
    /// ends the open line: the line (its last `LINE_LIMIT` units) is trimmed and joins
    /// the window if it has at least `MIN_LINE_LEN` units.
    pub fn push(&mut self, delta: &str) -> usize {
        self.push_scanned(delta, scan_delta(delta))
    }

    /// [`View::push`] of a delta the caller already scanned.
    pub(crate) fn push_scanned(&mut self, delta: &str, scan: DeltaScan) -> usize {
        if delta.is_empty() {
            return 0;
        }
        self.push_text(delta, scan.units);
        if !scan.newline {
            self.extend_open_line(delta, scan.units);
            return 0;
        }
        let mut joined = 0;
        let mut rest = delta;
        while let Some(at) = rest.bytes().position(|byte| byte == b'\n') {
            let line = rest.get(..at).unwrap_or_default();
            self.extend_open_line(line, utf16_len(line));
            if self.end_line() {
                joined += 1;
            }
            rest = rest.get(at + 1..).unwrap_or_default();
        }
        self.extend_open_line(rest, utf16_len(rest));
        joined
    }

    /// Empties the view, as at the start of an attempt, keeping its buffers.
    pub(crate) fn clear(&mut self) {
        self.buffer.clear();
        self.start = 0;
        self.chunks.clear();
        self.text_units = 0;
        self.open_line.clear();
        self.open_units = 0;
        self.lines.clear();
    }

    /// The kept text's length in UTF-16 units.
    pub fn text_len(&self) -> usize {
        self.text_units
    }

    /// The kept text, oldest chunk first.
    pub fn chunks(&self) -> impl Iterator<Item = &str> {
        self.chunks.iter().scan(self.start, |at, chunk| {
            let text = self
                .buffer
                .get(*at..*at + chunk.bytes())
                .unwrap_or_default();
            *at += chunk.bytes();
            Some(text)
        })
    }

    /// The open line: its last `LINE_LIMIT` units, not trimmed.
    pub fn open_line(&self) -> &str {
        suffix_within_units(&self.open_line, LINE_LIMIT)
    }

    /// The window of recent lines.
    pub fn lines(&self) -> &LineWindow {
        &self.lines
    }

    /// The kept text's last `units` UTF-16 units (whole characters): what a windowed
    /// text detector reads at a check. O(`units`), nothing copied.
    pub(crate) fn recent_text(&self, units: usize) -> &str {
        suffix_within_units(self.buffer.get(self.start..).unwrap_or_default(), units)
    }

    fn push_text(&mut self, delta: &str, units: usize) {
        let (kept, units) = if units > TEXT_LIMIT {
            let kept = suffix_within_units(delta, TEXT_LIMIT);
            (kept, utf16_len(kept))
        } else {
            (delta, units)
        };
        if self.start >= MIN_COMPACT && self.start >= self.buffer.len() - self.start {
            self.buffer.drain(..self.start);
            self.start = 0;
        }
        let (Ok(bytes32), Ok(units32)) = (u32::try_from(kept.len()), u32::try_from(units)) else {
            return;
        };
        self.buffer.push_str(kept);
        self.chunks.push_back(TextChunk {
            bytes: bytes32,
            units: units32,
        });
        self.text_units += units;
        while self.text_units > TEXT_LIMIT && self.chunks.len() > 1 {
            if let Some(oldest) = self.chunks.pop_front() {
                self.text_units -= oldest.units();
                self.start += oldest.bytes();
            }
        }
    }

    fn extend_open_line(&mut self, piece: &str, units: usize) {
        if piece.is_empty() {
            return;
        }
        self.open_line.push_str(piece);
        self.open_units += units;
        if self.open_units > 2 * LINE_LIMIT {
            let kept = suffix_within_units(&self.open_line, LINE_LIMIT);
            let cut = self.open_line.len() - kept.len();
            self.open_line.drain(..cut);
            self.open_units = utf16_len(&self.open_line);
        }
    }

    /// Ends the open line at a `\n`; true if it joined the window.
    fn end_line(&mut self) -> bool {
        let whole = if self.open_units <= LINE_LIMIT {
            self.open_line.as_str()
        } else {
            suffix_within_units(&self.open_line, LINE_LIMIT)
        };
        let line = js_trim(whole);
        let joins = utf16_len(line) >= MIN_LINE_LEN;
        if joins {
            self.lines.push(line);
        }
        self.open_line.clear();
        self.open_units = 0;
        joins
    }
}
