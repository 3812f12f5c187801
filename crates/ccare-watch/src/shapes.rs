//! The pre-step loop shapes (LS-1, LS-2) over a committed reply, and the mild/severe
//! response (LS-3).
//!
//! The input is the reply's reasoning and text joined by `\n` ([`reply_input`]). Fenced
//! blocks (a trimmed line like ```` ``` ````, ```` ```rust ```` or `~~~` toggles a fence)
//! are ignored with their fences. A line counts if its trimmed form has at least 2
//! UTF-16 units; the window is the last 80 counted lines. The four shapes are checked in
//! order, each only if enabled, and the first match wins.
//!
//! ```
//! use ccare_watch::shapes::{ShapeEvidence, ShapeId, detect};
//!
//! let reply = format!("计划\n说明\n{}", "（做。）\n".repeat(40));
//! let hit = detect(&reply, |_| true).unwrap();
//! assert_eq!(hit.shape(), ShapeId::LineRepeat);
//! assert!(hit.severe);
//! assert_eq!(hit.evidence, ShapeEvidence::LineRepeat("（做。）".into()));
//! assert_eq!((hit.count, hit.of_lines, hit.percent), (40, 42, 95));
//! ```

use std::collections::HashMap;

use serde::Serialize;

use crate::engine::{js_trim, prefix_within_units, utf16_len};

/// The window of counted lines (LS-1).
pub const SHAPE_WINDOW: usize = 80;
/// The shortest counted line, trimmed, in UTF-16 units (LS-1).
pub const MIN_COUNTED_LEN: usize = 2;
/// The longest line, trimmed, that can be a filler line (LS-2).
pub const MAX_FILLER_LEN: usize = 6;
/// The characters that make a short line a filler line (LS-2).
pub const FILLER_CHARS: &str = "做干搞走来了好嗯对是吧呢啊呀行成可以继续那就先再";
/// The longest line, trimmed, that can be part of a cycle (LS-2).
pub const MAX_CYCLE_LINE_LEN: usize = 8;
/// The delimiters that end a prefix (LS-2).
pub const PREFIX_DELIMITERS: [char; 5] = ['，', ',', '：', ':', '、'];
/// The latest UTF-16 index a prefix delimiter may have: within the first 4 units.
pub const MAX_PREFIX_DELIMITER_INDEX: usize = 3;
/// The UTF-16 units of a line a `line-repeat` hit names (MV-LOOP).
pub const REPORTED_LINE_UNITS: usize = 40;

/// A loop shape (LS-2), in checking order.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum ShapeId {
    /// `line-repeat`: one line dominates.
    LineRepeat,
    /// `filler-lines`: many short filler lines.
    FillerLines,
    /// `line-cycle`: a few short lines take turns.
    LineCycle,
    /// `prefix-monotony`: most lines start the same way.
    PrefixMonotony,
}

impl ShapeId {
    /// Every shape, in the order they are checked.
    pub const ALL: [ShapeId; 4] = [
        ShapeId::LineRepeat,
        ShapeId::FillerLines,
        ShapeId::LineCycle,
        ShapeId::PrefixMonotony,
    ];

    /// The shape's id, e.g. `line-repeat` (its rule is `loop-<id>`).
    pub fn as_str(self) -> &'static str {
        match self {
            ShapeId::LineRepeat => "line-repeat",
            ShapeId::FillerLines => "filler-lines",
            ShapeId::LineCycle => "line-cycle",
            ShapeId::PrefixMonotony => "prefix-monotony",
        }
    }

    /// Whether the shape has a `clean` executor at all (RC-1: `loop-{line-repeat,
    /// filler-lines}`).
    pub fn has_cleaner(self) -> bool {
        matches!(self, ShapeId::LineRepeat | ShapeId::FillerLines)
    }
}

/// What a shape found, as MV-LOOP names it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "shape", content = "value", rename_all = "kebab-case")]
pub enum ShapeEvidence {
    /// The top line, cut to its first 40 UTF-16 units.
    LineRepeat(String),
    /// Filler lines: [`ShapeHit::count`] is how many.
    FillerLines,
    /// The (up to) three short lines of the cycle, most frequent first.
    LineCycle(Vec<String>),
    /// The shared prefix, delimiter included (e.g. `嗯，`).
    PrefixMonotony(String),
}

/// A loop shape found in a reply (LS-2): what MV-LOOP reports, "count of the last N
/// lines, P%".
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ShapeHit {
    /// The shape and what it names.
    pub evidence: ShapeEvidence,
    /// Severe shapes may be cleaned instead of reminded (LS-3).
    pub severe: bool,
    /// The top line's count, the filler lines, the cycle's lines, or the top prefix's
    /// count.
    pub count: usize,
    /// N: the window's counted lines, or for `filler-lines` all lines from the window's
    /// first line on, blanks included.
    pub of_lines: usize,
    /// P: `count / of_lines` in percent, rounded.
    pub percent: u32,
}

/// How the pre-step responds to a shape (LS-3).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ShapeResponse {
    /// Remind the model with MV-LOOP (not aborted).
    Remind,
    /// Leave it to the cleanup executor, which cleans the request copy.
    Clean,
}

impl ShapeHit {
    /// The shape found.
    pub fn shape(&self) -> ShapeId {
        match self.evidence {
            ShapeEvidence::LineRepeat(_) => ShapeId::LineRepeat,
            ShapeEvidence::FillerLines => ShapeId::FillerLines,
            ShapeEvidence::LineCycle(_) => ShapeId::LineCycle,
            ShapeEvidence::PrefixMonotony(_) => ShapeId::PrefixMonotony,
        }
    }

    /// LS-3: a mild shape is reminded; a severe one is cleaned when its cleanup executor
    /// (`loop-<id>.clean`) is active, else reminded. The caller still skips when the last
    /// user message is a loop notice or the stream watch already handled the message.
    pub fn response(&self, cleaner_active: bool) -> ShapeResponse {
        if self.severe && cleaner_active && self.shape().has_cleaner() {
            ShapeResponse::Clean
        } else {
            ShapeResponse::Remind
        }
    }
}

/// The LS-1 input: the reply's reasoning and text joined by `\n`; an empty part adds
/// no line.
pub fn reply_input(reasoning: &str, text: &str) -> String {
    match (reasoning.is_empty(), text.is_empty()) {
        (true, _) => text.to_owned(),
        (false, true) => reasoning.to_owned(),
        (false, false) => format!("{reasoning}\n{text}"),
    }
}

/// Whether a trimmed line toggles a fence: ``^(`{3,}|~{3,})[\w+-]*$`` with `\w` the
/// ASCII word characters.
pub fn is_fence(trimmed: &str) -> bool {
    let Some(mark) = trimmed.chars().next().filter(|ch| *ch == '`' || *ch == '~') else {
        return false;
    };
    let run = trimmed.len() - trimmed.trim_start_matches(mark).len();
    run >= 3
        && trimmed
            .get(run..)
            .unwrap_or_default()
            .chars()
            .all(|ch| ch.is_ascii_alphanumeric() || matches!(ch, '_' | '+' | '-'))
}

/// The lines a reply is judged on (LS-1).
struct ShapeLines<'a> {
    /// The last `SHAPE_WINDOW` counted lines, trimmed, oldest first.
    window: Vec<&'a str>,
    /// All lines outside fences from the window's first line on, blanks included.
    all_lines: usize,
}

impl<'a> ShapeLines<'a> {
    fn new(input: &'a str) -> Self {
        let mut kept = Vec::new();
        let mut in_fence = false;
        for raw in input.split('\n') {
            let line = js_trim(raw);
            if is_fence(line) {
                in_fence = !in_fence;
            } else if !in_fence {
                kept.push(line);
            }
        }
        let counted: Vec<usize> = kept
            .iter()
            .enumerate()
            .filter(|(_, line)| utf16_len(line) >= MIN_COUNTED_LEN)
            .map(|(index, _)| index)
            .collect();
        let first = counted.len().saturating_sub(SHAPE_WINDOW);
        let span_start = counted.get(first).copied().unwrap_or(kept.len());
        Self {
            window: counted
                .get(first..)
                .unwrap_or_default()
                .iter()
                .filter_map(|index| kept.get(*index).copied())
                .collect(),
            all_lines: kept.len() - span_start,
        }
    }
}

/// Counts keys in first-occurrence order: `(key, count)`.
fn tally<'a>(keys: impl IntoIterator<Item = &'a str>) -> Vec<(&'a str, usize)> {
    let mut positions: HashMap<&str, usize> = HashMap::new();
    let mut counts: Vec<(&str, usize)> = Vec::new();
    for key in keys {
        match positions.get(key) {
            Some(position) => {
                if let Some(entry) = counts.get_mut(*position) {
                    entry.1 += 1;
                }
            }
            None => {
                positions.insert(key, counts.len());
                counts.push((key, 1));
            }
        }
    }
    counts
}

/// The first key with the highest count.
fn first_max<'a>(counts: &[(&'a str, usize)]) -> Option<(&'a str, usize)> {
    counts.iter().copied().fold(None, |best, entry| match best {
        Some((_, count)) if count >= entry.1 => best,
        _ => Some(entry),
    })
}

/// `count / of` in percent, rounded half up.
fn percent(count: usize, of: usize) -> u32 {
    if of == 0 {
        return 0;
    }
    u32::try_from((count * 200 + of) / (2 * of)).unwrap_or(u32::MAX)
}

fn hit(evidence: ShapeEvidence, severe: bool, count: usize, of_lines: usize) -> ShapeHit {
    ShapeHit {
        evidence,
        severe,
        count,
        of_lines,
        percent: percent(count, of_lines),
    }
}

/// `line-repeat`: the top line (first max) has ≥15 and ≥20% of the window; severe at
/// ≥70%.
fn line_repeat(lines: &ShapeLines<'_>) -> Option<ShapeHit> {
    let total = lines.window.len();
    let (line, count) = first_max(&tally(lines.window.iter().copied()))?;
    (count >= 15 && count * 5 >= total).then(|| {
        hit(
            ShapeEvidence::LineRepeat(prefix_within_units(line, REPORTED_LINE_UNITS).to_owned()),
            count * 10 >= total * 7,
            count,
            total,
        )
    })
}

fn is_filler(line: &str) -> bool {
    utf16_len(line) <= MAX_FILLER_LEN && line.chars().any(|ch| FILLER_CHARS.contains(ch))
}

/// `filler-lines`: ≥5 counted lines of ≤6 units with a filler character, and ≥40% of all
/// lines (blanks included); severe at ≥50%.
fn filler_lines(lines: &ShapeLines<'_>) -> Option<ShapeHit> {
    let fillers = lines.window.iter().filter(|line| is_filler(line)).count();
    let all = lines.all_lines;
    (fillers >= 5 && fillers * 5 >= all * 2)
        .then(|| hit(ShapeEvidence::FillerLines, fillers * 2 >= all, fillers, all))
}

/// `line-cycle`: a window of ≥24 lines whose top 3 lines of ≤8 units cover ≥60%.
fn line_cycle(lines: &ShapeLines<'_>) -> Option<ShapeHit> {
    let total = lines.window.len();
    if total < 24 {
        return None;
    }
    let short = lines
        .window
        .iter()
        .copied()
        .filter(|line| utf16_len(line) <= MAX_CYCLE_LINE_LEN);
    let mut counts = tally(short);
    counts.sort_by_key(|(_, count)| std::cmp::Reverse(*count));
    counts.truncate(3);
    let covered: usize = counts.iter().map(|(_, count)| count).sum();
    (covered > 0 && covered * 5 >= total * 3).then(|| {
        let cycle = counts.iter().map(|(line, _)| (*line).to_owned()).collect();
        hit(ShapeEvidence::LineCycle(cycle), false, covered, total)
    })
}

/// A line's prefix: the text through its first delimiter if that is within the first 4
/// UTF-16 units.
fn prefix(line: &str) -> Option<&str> {
    let mut units = 0;
    for (index, ch) in line.char_indices() {
        if units > MAX_PREFIX_DELIMITER_INDEX {
            return None;
        }
        if PREFIX_DELIMITERS.contains(&ch) {
            return line.get(..index + ch.len_utf8());
        }
        units += ch.len_utf16();
    }
    None
}

/// `prefix-monotony`: a window of ≥10 lines whose top prefix has ≥10 and ≥50%.
fn prefix_monotony(lines: &ShapeLines<'_>) -> Option<ShapeHit> {
    let total = lines.window.len();
    if total < 10 {
        return None;
    }
    let (top, count) = first_max(&tally(lines.window.iter().filter_map(|line| prefix(line))))?;
    (count >= 10 && count * 2 >= total).then(|| {
        hit(
            ShapeEvidence::PrefixMonotony(top.to_owned()),
            false,
            count,
            total,
        )
    })
}

/// Finds the first loop shape of LS-2 in `input` (see [`reply_input`]), checking a shape
/// only if `enabled(shape)` (its `loop-<id>.notice` is on).
pub fn detect(input: &str, enabled: impl Fn(ShapeId) -> bool) -> Option<ShapeHit> {
    let lines = ShapeLines::new(input);
    if lines.window.is_empty() {
        return None;
    }
    ShapeId::ALL
        .into_iter()
        .filter(|shape| enabled(*shape))
        .find_map(|shape| match shape {
            ShapeId::LineRepeat => line_repeat(&lines),
            ShapeId::FillerLines => filler_lines(&lines),
            ShapeId::LineCycle => line_cycle(&lines),
            ShapeId::PrefixMonotony => prefix_monotony(&lines),
        })
}
