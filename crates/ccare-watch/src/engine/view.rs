//! The view a trigger judges (SW-2): the recent text as chunks, the window of recent
//! lines with their counts, and the open line. Every operation costs O(|delta|) or
//! O(`LINE_WINDOW`), never the accumulated text (SW-3).

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;

use super::text::{js_trim, suffix_within_units, utf16_len};

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

/// One kept piece of streamed text with its length in UTF-16 units.
#[derive(Debug, Clone)]
struct TextChunk {
    text: Box<str>,
    units: usize,
}

/// The streamed text one trigger sees (SW-2): kept as chunks and never concatenated,
/// split into lines at `\n`, with an 80-line window of the recent ones.
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
        if delta.is_empty() {
            return 0;
        }
        self.push_text(delta);
        let mut joined = 0;
        for piece in delta.split_inclusive('\n') {
            match piece.strip_suffix('\n') {
                Some(rest) => {
                    self.extend_open_line(rest);
                    if self.end_line() {
                        joined += 1;
                    }
                }
                None => self.extend_open_line(piece),
            }
        }
        joined
    }

    /// The kept text's length in UTF-16 units.
    pub fn text_len(&self) -> usize {
        self.text_units
    }

    /// The kept text, oldest chunk first.
    pub fn chunks(&self) -> impl Iterator<Item = &str> {
        self.chunks.iter().map(|chunk| &*chunk.text)
    }

    /// The open line: its last `LINE_LIMIT` units, not trimmed.
    pub fn open_line(&self) -> &str {
        suffix_within_units(&self.open_line, LINE_LIMIT)
    }

    /// The window of recent lines.
    pub fn lines(&self) -> &LineWindow {
        &self.lines
    }

    /// The kept text's last `units` UTF-16 units (whole characters), copied: what a
    /// windowed text detector reads at a check. O(`units`).
    pub(crate) fn recent_text(&self, units: usize) -> String {
        let mut taken = Vec::new();
        let mut remaining = units;
        for chunk in self.chunks.iter().rev() {
            if remaining == 0 {
                break;
            }
            if chunk.units <= remaining {
                taken.push(&*chunk.text);
                remaining -= chunk.units;
            } else {
                taken.push(suffix_within_units(&chunk.text, remaining));
                remaining = 0;
            }
        }
        taken.iter().rev().copied().collect()
    }

    fn push_text(&mut self, delta: &str) {
        let mut units = utf16_len(delta);
        let mut kept = delta;
        if units > TEXT_LIMIT {
            kept = suffix_within_units(delta, TEXT_LIMIT);
            units = utf16_len(kept);
        }
        self.chunks.push_back(TextChunk {
            text: kept.into(),
            units,
        });
        self.text_units += units;
        while self.text_units > TEXT_LIMIT && self.chunks.len() > 1 {
            if let Some(oldest) = self.chunks.pop_front() {
                self.text_units -= oldest.units;
            }
        }
    }

    fn extend_open_line(&mut self, piece: &str) {
        if piece.is_empty() {
            return;
        }
        self.open_line.push_str(piece);
        self.open_units += utf16_len(piece);
        if self.open_units > 2 * LINE_LIMIT {
            let kept = suffix_within_units(&self.open_line, LINE_LIMIT);
            let cut = self.open_line.len() - kept.len();
            self.open_line.drain(..cut);
            self.open_units = utf16_len(&self.open_line);
        }
    }

    /// Ends the open line at a `\n`; true if it joined the window.
    fn end_line(&mut self) -> bool {
        let line = js_trim(suffix_within_units(&self.open_line, LINE_LIMIT));
        let joins = utf16_len(line) >= MIN_LINE_LEN;
        if joins {
            self.lines.push(line);
        }
        self.open_line.clear();
        self.open_units = 0;
        joins
    }
}

/// How often a line is in the window and when its key was inserted (for ties).
#[derive(Debug, Clone, Copy)]
struct LineStat {
    count: usize,
    inserted: u64,
}

/// The last `LINE_WINDOW` lines with synced counts (SW-2): a line's count is how often
/// it is in the window, and a key whose count drops to 0 is deleted, so a line that
/// comes back is inserted anew (this is the insertion order ties go by, SW-4).
///
/// Identical lines in the window share one allocation, so runs compare by pointer.
#[derive(Debug, Clone, Default)]
pub struct LineWindow {
    order: VecDeque<Arc<str>>,
    stats: HashMap<Arc<str>, LineStat>,
    next_insert: u64,
}

impl LineWindow {
    /// How many lines are in the window (at most `LINE_WINDOW`).
    pub fn len(&self) -> usize {
        self.order.len()
    }

    /// Whether the window has no line yet.
    pub fn is_empty(&self) -> bool {
        self.order.is_empty()
    }

    /// The lines in the window, oldest first.
    pub fn iter(&self) -> impl Iterator<Item = &str> {
        self.order.iter().map(|line| &**line)
    }

    /// How often `line` is in the window (0 if it has no key).
    pub fn count(&self, line: &str) -> usize {
        self.stats.get(line).map_or(0, |stat| stat.count)
    }

    /// How many distinct lines have a key; every key has a count of at least 1.
    pub fn distinct(&self) -> usize {
        self.stats.len()
    }

    /// The window's lines with their counts, each distinct line once, in no order.
    pub fn counts(&self) -> impl Iterator<Item = (&str, usize)> {
        self.stats.iter().map(|(line, stat)| (&**line, stat.count))
    }

    /// Adds a line and evicts the oldest beyond `LINE_WINDOW`, keeping counts in sync.
    pub(crate) fn push(&mut self, line: &str) {
        let key = match self.stats.get_key_value(line) {
            Some((key, _)) => Arc::clone(key),
            None => Arc::from(line),
        };
        let next_insert = &mut self.next_insert;
        let stat = self.stats.entry(Arc::clone(&key)).or_insert_with(|| {
            *next_insert += 1;
            LineStat {
                count: 0,
                inserted: *next_insert,
            }
        });
        stat.count += 1;
        self.order.push_back(key);
        while self.order.len() > LINE_WINDOW {
            if let Some(oldest) = self.order.pop_front() {
                self.decrement(&oldest);
            }
        }
    }

    fn decrement(&mut self, line: &Arc<str>) {
        let emptied = match self.stats.get_mut(line) {
            Some(stat) => {
                stat.count = stat.count.saturating_sub(1);
                stat.count == 0
            }
            None => false,
        };
        if emptied {
            self.stats.remove(line);
        }
    }

    /// The worst line (SW-4): the highest count, ties going to the earliest inserted key.
    pub(crate) fn worst(&self) -> Option<(&Arc<str>, usize)> {
        self.stats
            .iter()
            .min_by_key(|(_, stat)| (std::cmp::Reverse(stat.count), stat.inserted))
            .map(|(line, stat)| (line, stat.count))
    }

    /// The longest run of identical adjacent lines in the window (ties to the earliest)
    /// and, if `of` is given, the longest run of that line: `(line, run, run_of)`.
    pub(crate) fn runs(&self, of: Option<&Arc<str>>) -> Option<(&Arc<str>, usize, usize)> {
        let mut best: Option<(&Arc<str>, usize)> = None;
        let mut best_of = 0;
        let mut current: Option<(&Arc<str>, usize)> = None;
        for line in &self.order {
            let run = match current {
                Some((previous, run)) if Arc::ptr_eq(previous, line) => run + 1,
                _ => 1,
            };
            current = Some((line, run));
            if best.is_none_or(|(_, longest)| run > longest) {
                best = Some((line, run));
            }
            if of.is_some_and(|wanted| Arc::ptr_eq(wanted, line)) {
                best_of = best_of.max(run);
            }
        }
        best.map(|(line, run)| (line, run, best_of))
    }
}
