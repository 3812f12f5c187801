//! The detectors (SW-4): `marker` and `phrase` over the text with a carry between
//! deltas, and `line-repeat` over a view's line window. Detectors only judge; the
//! engine schedules them and the caller acts (SW-1).

use serde::{Deserialize, Serialize};

use super::automaton::{PhraseAutomaton, ScanState};
use super::lines::LineWindow;
use super::text::{DeltaScan, prefix_within_units};

/// The UTF-16 units of a line a line-repeat report names (SW-4 `line[0..40]`).
pub const REPORTED_LINE_UNITS: usize = 40;

/// What a detector found: the evidence a firing carries (SW-4).
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "kind", rename_all = "kebab-case")]
pub enum Evidence {
    /// The `marker` detector saw its marker.
    Marker {
        /// The marker.
        marker: String,
    },
    /// The `phrase` detector saw one of its phrases.
    Phrase {
        /// The phrase found: of the phrases ending earliest, the first listed.
        phrase: String,
    },
    /// The `line-repeat` detector found a repeated line.
    LineRepeat(LineRepeatReport),
}

/// The `line-repeat` report `{line, count, total, ratio, run}` (SW-4).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct LineRepeatReport {
    /// The named line, cut to its first 40 UTF-16 units: the worst line, or the run's
    /// line when only the run hit.
    pub line: String,
    /// How often the named line is in the window.
    pub count: usize,
    /// How many lines the window holds.
    pub total: usize,
    /// `count / total`, rounded to 2 decimals.
    pub ratio: f64,
    /// The longest run of the named line in the window.
    pub run: usize,
}

/// The `line-repeat` thresholds (SW-4, SW-6); the defaults are the streaming abort's.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields, default)]
pub struct LineRepeatParams {
    /// Lines the window needs before it is judged (default 30).
    #[serde(alias = "min_lines")]
    pub min_lines: usize,
    /// The worst line's count that hits, with `min_ratio` (default 30).
    #[serde(alias = "min_count")]
    pub min_count: usize,
    /// The worst line's share of the window that hits, with `min_count` (default 0.35).
    #[serde(alias = "min_ratio")]
    pub min_ratio: f64,
    /// The run of identical lines that hits on its own (default 12).
    #[serde(alias = "min_run")]
    pub min_run: usize,
}

impl Default for LineRepeatParams {
    fn default() -> Self {
        Self {
            min_lines: 30,
            min_count: 30,
            min_ratio: 0.35,
            min_run: 12,
        }
    }
}

/// Judges a line window (SW-4): with at least `min_lines` lines, the worst line hits if
/// `count ≥ min_count` and `count/total ≥ min_ratio`; otherwise the longest run hits if
/// it reaches `min_run`, and the report names the run's line. O(`LINE_WINDOW`).
pub(crate) fn line_repeat(window: &LineWindow, params: &LineRepeatParams) -> Option<Evidence> {
    let total = window.len();
    if total == 0 || total < params.min_lines {
        return None;
    }
    // The worst line's count is the window's highest count, known without a scan; the
    // worst line itself is looked up only when it hits.
    let count = window.max_count();
    let by_count = count >= params.min_count && ratio(count, total) >= params.min_ratio;
    let (line, count, run) = if by_count {
        let (worst, count) = window.worst()?;
        let (_, _, worst_run) = window.runs(Some(worst))?;
        (worst, count, worst_run)
    } else {
        // A run of a line is at most that line's count, so at most the highest count:
        // below `min_run` no run can hit, and the window need not be walked.
        if count < params.min_run {
            return None;
        }
        let (run_line, longest, _) = window.runs(None)?;
        if longest < params.min_run {
            return None;
        }
        (run_line, window.count_of(run_line), longest)
    };
    Some(Evidence::LineRepeat(LineRepeatReport {
        line: prefix_within_units(window.text(line), REPORTED_LINE_UNITS).to_owned(),
        count,
        total,
        ratio: (ratio(count, total) * 100.0).round() / 100.0,
        run,
    }))
}

#[allow(clippy::cast_precision_loss)] // counts are at most LINE_WINDOW
fn ratio(count: usize, total: usize) -> f64 {
    count as f64 / total as f64
}

/// A validated, non-empty-phrase list with what a scan needs: its automaton and the
/// carry length (longest phrase − 1, in characters).
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct PhraseList {
    phrases: Box<[Box<str>]>,
    automaton: PhraseAutomaton,
    carry_chars: usize,
}

impl PhraseList {
    /// Builds the list; every phrase must be non-empty (validated by the config).
    pub(crate) fn new(phrases: &[String]) -> Self {
        let longest = phrases
            .iter()
            .map(|phrase| phrase.chars().count())
            .max()
            .unwrap_or(0);
        Self {
            phrases: phrases
                .iter()
                .map(|phrase| phrase.as_str().into())
                .collect(),
            automaton: PhraseAutomaton::new(phrases.iter().map(String::as_str)),
            carry_chars: longest.saturating_sub(1),
        }
    }

    /// The phrase at `index`.
    pub(crate) fn get(&self, index: usize) -> &str {
        self.phrases.get(index).map_or("", |phrase| phrase)
    }

    /// How many characters a windowed scan reads before its new text: the longest
    /// phrase − 1, so an occurrence that ends in the new text is seen whole.
    pub(crate) fn carry_chars(&self) -> usize {
        self.carry_chars
    }

    /// The phrase occurrence in `haystack` that ends earliest after byte `from`, ties
    /// going to the first listed: `(end byte, phrase index)`. Occurrences ending at or
    /// before `from` were judged by an earlier scan. O(|haystack|).
    pub(crate) fn earliest_after(&self, haystack: &str, from: usize) -> Option<(usize, usize)> {
        let mut state = self.automaton.start();
        self.automaton.feed_after(&mut state, haystack, from)
    }
}

/// An incremental `marker`/`phrase` scan: the automaton state the text read so far
/// leaves, which stands for the spec's carry of the last `longest − 1` characters
/// (SW-4), so an occurrence split over deltas is found. Cost per delta O(|delta|),
/// nothing copied (SW-3).
#[derive(Debug, Clone, Default)]
pub(crate) struct PhraseScan {
    state: ScanState,
}

impl PhraseScan {
    /// Reads one delta (scanned as `scan`); returns the first hit as `(end byte in
    /// delta, phrase index)`. An ASCII delta for a list without ASCII bytes moves the
    /// automaton to its start without a walk: every byte of it does.
    #[inline]
    pub(crate) fn feed(
        &mut self,
        list: &PhraseList,
        delta: &str,
        scan: DeltaScan,
    ) -> Option<(usize, usize)> {
        if scan.ascii && !list.automaton.reads_ascii() {
            self.state = list.automaton.start();
            return None;
        }
        list.automaton.feed(&mut self.state, delta)
    }

    /// How many characters are carried now (at most the longest phrase − 1: a state
    /// that ends the longest phrase can only go on through a shorter suffix).
    #[cfg(test)]
    pub(crate) fn carried_chars(&self, list: &PhraseList) -> usize {
        list.automaton
            .carried_chars(self.state)
            .min(list.carry_chars())
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use super::super::text::scan_delta;
    use super::*;

    fn list(phrases: &[&str]) -> PhraseList {
        PhraseList::new(&phrases.iter().map(|p| (*p).to_owned()).collect::<Vec<_>>())
    }

    #[test]
    fn sw_4_marker_carry_stays_below_marker_length() {
        let marker = list(&["XYZZY"]);
        let mut scan = PhraseScan::default();
        for _ in 0..10_000 {
            assert_eq!(scan.feed(&marker, "ab,cd", scan_delta("ab,cd")), None);
        }
        assert!(scan.carried_chars(&marker) <= 4);
        let mut hits = 0;
        for delta in ["AB", "XY", "Z", "ZY", "CD", "XYZZY"] {
            hits += usize::from(scan.feed(&marker, delta, scan_delta(delta)).is_some());
        }
        assert_eq!(hits, 2, "XY|Z|ZY and XYZZY");
    }

    /// An ASCII delta skips the walk of a list without ASCII bytes, and still breaks a
    /// phrase begun before it; a list with ASCII bytes walks it.
    #[test]
    fn sw_4_an_ascii_delta_resets_a_list_without_ascii() {
        let cjk = list(&["时间不够"]);
        assert!(!cjk.automaton.reads_ascii());
        let mut scan = PhraseScan::default();
        let mut feed = |delta: &str| scan.feed(&cjk, delta, scan_delta(delta));
        assert_eq!(feed("时间"), None);
        assert_eq!(feed("x"), None);
        assert_eq!(feed("不够"), None);
        assert_eq!(feed("时间不"), None);
        assert_eq!(feed("够"), Some((3, 0)));
        let mixed = list(&["时间x"]);
        assert!(mixed.automaton.reads_ascii());
        let mut scan = PhraseScan::default();
        assert_eq!(scan.feed(&mixed, "时间", scan_delta("时间")), None);
        assert_eq!(scan.feed(&mixed, "x", scan_delta("x")), Some((1, 0)));
    }

    #[test]
    fn sw_4_phrase_hit_reports_the_earliest_end_then_first_listed() {
        let phrases = list(&["AB", "C", "XC"]);
        assert_eq!(phrases.earliest_after("CAB", 0), Some((1, 1)));
        assert_eq!(phrases.earliest_after("XC", 0), Some((2, 1)));
        assert_eq!(phrases.earliest_after("AB", 2), None);
    }

    #[test]
    fn sw_4_overlapping_occurrence_after_the_carry_is_found() {
        let phrases = list(&["aa"]);
        assert_eq!(phrases.earliest_after("aaa", 2), Some((3, 0)));
    }
}
