//! The view a trigger judges (SW-2): the recent text as chunks, the window of recent
//! lines with their counts, and the open line. Every operation costs O(|delta|) or
//! O(`LINE_WINDOW`), never the accumulated text (SW-3).

use std::collections::VecDeque;

use super::lines::LineWindow;
use super::text::{
    DeltaScan, js_trim_bytes, scan_bytes, scan_delta, suffix_within_units, utf16_len,
};

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
/// the buffers have grown, allocates nothing (SW-3). The open line is not copied: it
/// is the buffer's tail from where the last `\n` left it, so a delta is copied once.
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
    /// The kept text is `buffer[start..]`: the chunks, oldest first. Bytes, so that a
    /// short delta is copied in the loop that measures it; only whole `&str`s are
    /// appended and it is only cut at their boundaries or after a `\n`, so every range
    /// read back is UTF-8 (see [`utf8`]).
    buffer: Vec<u8>,
    start: usize,
    chunks: VecDeque<TextChunk>,
    text_units: usize,
    /// The open line is `buffer[open_start..]` (it may begin before `start`: the text
    /// drops whole chunks, the open line keeps units); it may hold up to twice
    /// `LINE_LIMIT` units, cut lazily so that a long line costs O(1) per character
    /// (read it through [`View::open_line`]).
    open_start: usize,
    open_units: usize,
    /// Where an oversized delta's first line is joined to the open line before it.
    scratch: String,
    lines: LineWindow,
    /// Keeps the lines and the open line only, no text chunks: the view of a detector
    /// that never reads the text (`line-repeat`), which then costs one copy per delta.
    lines_only: bool,
}

impl View {
    /// An empty view, as at the start of an attempt.
    pub fn new() -> Self {
        Self::default()
    }

    /// A view that keeps the line window and the open line but no text (its
    /// `text_len` stays 0 and it has no chunks): for a detector that reads only lines.
    pub(crate) fn lines_only() -> Self {
        Self {
            lines_only: true,
            ..Self::default()
        }
    }

    /// Appends one delta and returns how many lines joined the window.
    ///
    /// The text keeps at most the delta's last `TEXT_LIMIT` units and drops its oldest
    /// chunks while it is over the limit and more than one chunk remains. Each `\n`
    /// ends the open line: the line (its last `LINE_LIMIT` units) is trimmed and joins
    /// the window if it has at least `MIN_LINE_LEN` units.
    pub fn push(&mut self, delta: &str) -> usize {
        self.push_counted(delta).1
    }

    /// [`View::push`] that also returns the delta's [`DeltaScan`].
    #[inline]
    pub(crate) fn push_counted(&mut self, delta: &str) -> (DeltaScan, usize) {
        let scan = scan_delta(delta);
        (scan, self.push_scanned(delta, scan))
    }

    /// [`View::push`] of a delta the caller already scanned.
    #[inline]
    pub(crate) fn push_scanned(&mut self, delta: &str, scan: DeltaScan) -> usize {
        if self.lines_only && !scan.newline && scan.units <= TEXT_LIMIT {
            // No text chunks to keep and no line ends: the open line grows.
            self.extend_open_line(delta, scan);
            return 0;
        }
        self.push_lines_or_text(delta, scan)
    }

    /// [`View::push_scanned`] of a delta that ends a line or whose text is kept: out
    /// of line, so that the common case above stays small where it is inlined.
    #[inline(never)]
    fn push_lines_or_text(&mut self, delta: &str, scan: DeltaScan) -> usize {
        if delta.is_empty() {
            return 0;
        }
        if scan.units > TEXT_LIMIT {
            return self.push_oversized(delta);
        }
        let at = self.push_text(delta, scan.units);
        self.read_lines(delta, scan, at)
    }

    /// Appends a delta (scanned as `scan`) without a `\n` to a lines-only view: the
    /// open line grows and nothing joins the window.
    #[inline(always)]
    fn extend_open_line(&mut self, delta: &str, scan: DeltaScan) {
        debug_assert_eq!(scan, scan_delta(delta), "the scan is of this delta");
        self.compact_if_needed();
        let bytes = delta.as_bytes();
        if bytes.len() <= 8 {
            // A short delta as the word its scan loaded: a fixed eight-byte copy and a
            // cut back to its length instead of a `memcpy` call for a few bytes.
            let end = self.buffer.len() + bytes.len();
            self.buffer.extend_from_slice(&scan.word.to_le_bytes());
            self.buffer.truncate(end);
        } else {
            self.buffer.extend_from_slice(bytes);
        }
        self.open_units += scan.units;
        self.cut_open_line();
    }

    /// Reads the lines of `delta`, which lies whole at `buffer[at..]`: each line is a
    /// range of the buffer, from the open line's start to its `\n`.
    #[inline]
    fn read_lines(&mut self, delta: &str, scan: DeltaScan, at: usize) -> usize {
        if !scan.newline {
            self.open_units += scan.units;
            self.cut_open_line();
            return 0;
        }
        let Self {
            buffer,
            open_start,
            open_units,
            lines,
            ..
        } = self;
        let mut joined = 0;
        let mut from = 0;
        let mut line_units = *open_units;
        let bytes = delta.as_bytes();
        for (index, &byte) in bytes.iter().enumerate() {
            if byte != b'\n' {
                continue;
            }
            line_units += scan_bytes(bytes.get(from..index).unwrap_or_default()).units;
            let line = buffer.get(*open_start..at + index).unwrap_or_default();
            joined += usize::from(end_line(lines, line, line_units));
            from = index + 1;
            *open_start = at + from;
            line_units = 0;
        }
        *open_units = scan_bytes(bytes.get(from..).unwrap_or_default()).units;
        self.cut_open_line();
        joined
    }

    /// Empties the view, as at the start of an attempt, keeping its buffers.
    pub(crate) fn clear(&mut self) {
        self.buffer.clear();
        self.start = 0;
        self.chunks.clear();
        self.text_units = 0;
        self.open_start = 0;
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
            let text = utf8(self.buffer.get(*at..*at + chunk.bytes()));
            *at += chunk.bytes();
            Some(text)
        })
    }

    /// The open line: its last `LINE_LIMIT` units, not trimmed.
    pub fn open_line(&self) -> &str {
        suffix_within_units(self.open_text(), LINE_LIMIT)
    }

    /// The window of recent lines.
    pub fn lines(&self) -> &LineWindow {
        &self.lines
    }

    /// The kept text's last `units` UTF-16 units (whole characters): what a windowed
    /// text detector reads at a check. O(`units`), nothing copied.
    pub(crate) fn recent_text(&self, units: usize) -> &str {
        suffix_within_units(utf8(self.buffer.get(self.start..)), units)
    }

    /// The open line as kept (possibly longer than `LINE_LIMIT` units).
    fn open_text(&self) -> &str {
        utf8(self.buffer.get(self.open_start..))
    }

    /// Appends `kept` (at most `TEXT_LIMIT` units) as a chunk, dropping the oldest
    /// chunks over the limit; returns where it lies in the buffer.
    fn push_text(&mut self, kept: &str, units: usize) -> usize {
        self.compact_if_needed();
        let at = self.buffer.len();
        self.buffer.extend_from_slice(kept.as_bytes());
        self.push_chunk(kept.len(), units);
        at
    }

    /// Compacts the buffer once the bytes neither the text nor the open line holds
    /// outweigh the rest.
    #[inline]
    fn compact_if_needed(&mut self) {
        let keep_from = if self.lines_only {
            self.open_start
        } else {
            self.start.min(self.open_start)
        };
        if keep_from >= MIN_COMPACT && keep_from >= self.buffer.len() - keep_from {
            self.compact(keep_from);
        }
    }

    /// Records the piece of `bytes` and `units` just appended as the newest chunk (at
    /// most `TEXT_LIMIT` units), dropping the oldest chunks over the limit.
    #[inline]
    fn push_chunk(&mut self, bytes: usize, units: usize) {
        if self.lines_only {
            return;
        }
        let (Ok(bytes32), Ok(units32)) = (u32::try_from(bytes), u32::try_from(units)) else {
            return;
        };
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

    /// Drops the buffer's first `keep_from` bytes, which neither the text nor the open
    /// line holds any more.
    #[cold]
    fn compact(&mut self, keep_from: usize) {
        self.buffer.drain(..keep_from);
        self.start = self.start.saturating_sub(keep_from);
        self.open_start -= keep_from;
    }

    /// A delta of more than `TEXT_LIMIT` units: the text keeps only its last
    /// `TEXT_LIMIT` units, so its lines are read from the delta itself, the first one
    /// joined to the open line in the scratch buffer.
    fn push_oversized(&mut self, delta: &str) -> usize {
        let kept = suffix_within_units(delta, TEXT_LIMIT);
        let mut joined = 0;
        let mut rest = delta;
        let mut first = true;
        while let Some(index) = rest.bytes().position(|byte| byte == b'\n') {
            let piece = rest.get(..index).unwrap_or_default();
            let piece_units = utf16_len(piece);
            let ended = if first && piece_units < LINE_LIMIT && self.open_units > 0 {
                let mut scratch = std::mem::take(&mut self.scratch);
                scratch.clear();
                scratch.push_str(self.open_text());
                scratch.push_str(piece);
                let ended = end_line(
                    &mut self.lines,
                    scratch.as_bytes(),
                    self.open_units + piece_units,
                );
                self.scratch = scratch;
                ended
            } else {
                end_line(&mut self.lines, piece.as_bytes(), piece_units)
            };
            joined += usize::from(ended);
            first = false;
            rest = rest.get(index + 1..).unwrap_or_default();
        }
        let kept_units = utf16_len(kept);
        let at = self.push_text(kept, kept_units);
        if first {
            // No `\n`: the open line goes on, and its last units are all in `kept`.
            self.open_start = at;
            self.open_units = kept_units;
        } else if rest.len() <= kept.len() {
            self.open_start = self.buffer.len() - rest.len();
            self.open_units = utf16_len(rest);
        } else {
            self.open_start = at;
            self.open_units = kept_units;
        }
        self.cut_open_line();
        joined
    }

    /// Cuts the open line to its last `LINE_LIMIT` units once it holds twice that.
    #[inline]
    fn cut_open_line(&mut self) {
        if self.open_units > 2 * LINE_LIMIT {
            self.cut_open_line_now();
        }
    }

    /// [`View::cut_open_line`] once it is due: once per `LINE_LIMIT` units at most.
    #[cold]
    fn cut_open_line_now(&mut self) {
        let open = self.open_text();
        let kept = suffix_within_units(open, LINE_LIMIT);
        let (cut, units) = (open.len() - kept.len(), utf16_len(kept));
        self.open_start += cut;
        self.open_units = units;
    }
}

/// The UTF-8 text of a buffer range; every range the view reads back is UTF-8 (see
/// `View::buffer`), so the empty fallback is never taken.
fn utf8(bytes: Option<&[u8]>) -> &str {
    bytes
        .and_then(|bytes| std::str::from_utf8(bytes).ok())
        .unwrap_or_default()
}

/// Ends a line of `units` UTF-16 units at a `\n`: its last `LINE_LIMIT` units,
/// trimmed, join the window if they have at least `MIN_LINE_LEN` units; true if so.
/// The line is the bytes of a whole UTF-8 text (a range of the view's buffer), read as
/// bytes so that it is not validated once more.
fn end_line(lines: &mut LineWindow, line: &[u8], units: usize) -> bool {
    let whole = if units <= LINE_LIMIT {
        line
    } else {
        suffix_within_units(utf8(Some(line)), LINE_LIMIT).as_bytes()
    };
    let line = js_trim_bytes(whole);
    // A character has at most four bytes: 12 bytes hold at least 3 characters, so at
    // least 3 units, without counting them.
    let joins = line.len() >= 4 * MIN_LINE_LEN || scan_bytes(line).units >= MIN_LINE_LEN;
    if joins {
        lines.push(line);
    }
    joins
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use super::super::text::js_trim;
    use super::*;

    /// SW-2's open line and lines the plain way: the whole open line as a string.
    #[derive(Default)]
    struct Reference {
        open: String,
        lines: Vec<String>,
    }

    impl Reference {
        fn push(&mut self, delta: &str) {
            for (index, piece) in delta.split('\n').enumerate() {
                if index > 0 {
                    let line = js_trim(suffix_within_units(&self.open, LINE_LIMIT));
                    if utf16_len(line) >= MIN_LINE_LEN {
                        self.lines.push(line.to_owned());
                    }
                    self.open.clear();
                }
                self.open.push_str(piece);
            }
        }
    }

    #[test]
    fn sw_2_lines_and_open_line_match_the_plain_view_in_both_forms() {
        let pieces = ["ab", "c😀", "\n", "  same line \n", "时间", "x", "\r\n"];
        let mut seed: u32 = 11;
        for lines_only in [false, true] {
            let mut view = if lines_only {
                View::lines_only()
            } else {
                View::new()
            };
            let mut reference = Reference::default();
            for step in 0..4_000 {
                seed = seed.wrapping_mul(1_103_515_245).wrapping_add(12_345);
                let pick = (seed >> 16) as usize;
                let delta = match step % 500 {
                    // Oversized deltas, with and without a line end, and long lines.
                    17 => "y".repeat(TEXT_LIMIT + 5),
                    33 => format!("{}\n{}\nzz", "q".repeat(5_000), "w".repeat(TEXT_LIMIT)),
                    71 => format!("ab\n{}", "é".repeat(TEXT_LIMIT + 1)),
                    99 => "k".repeat(3 * LINE_LIMIT),
                    _ => pieces[pick % pieces.len()].repeat(1 + pick / 7 % 3),
                };
                let joined = view.push(&delta);
                let before = reference.lines.len();
                reference.push(&delta);
                assert_eq!(joined, reference.lines.len() - before, "step {step}");
                assert_eq!(
                    view.open_line(),
                    suffix_within_units(&reference.open, LINE_LIMIT),
                    "step {step}"
                );
            }
            let kept: Vec<&str> = view.lines().iter().collect();
            let start = reference.lines.len() - kept.len();
            assert_eq!(kept, reference.lines[start..]);
            assert_eq!(kept.len(), LINE_WINDOW);
            assert_eq!(view.text_len() == 0, lines_only);
        }
    }
}
