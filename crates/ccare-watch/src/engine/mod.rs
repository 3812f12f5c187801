//! The stream watch engine (SW-1 .. SW-11): the detect side of the watch.
//!
//! Detectors judge, the engine keeps views and schedules, and the caller acts (SW-1).
//! One [`StreamWatch`] per agent reads that agent's stream frames synchronously and
//! returns the [`Firing`]s of its triggers; the caller runs their actions with
//! [`Firing::run`] and keeps the per-agent [`LoopPolicy`] (notice record, consecutive
//! aborts). Nothing here does I/O or knows host types.
//!
//! Split invariance: the same text gives the same firings however it is split into
//! deltas. Phrases report the occurrence that ends first, windowed checks fall exactly
//! on every `everyChars`-th unit, incremental line checks on every line that joins the
//! window, and the firings of one delta are ordered by where in it they hit.
//!
//! ```
//! use ccare_watch::engine::{ActionId, Evidence, Frame, StreamWatch, Triggers};
//!
//! let mut watch = StreamWatch::new(Triggers::defaults());
//! watch.observe(Frame::Start);
//! let mut firings = Vec::new();
//! for delta in ["嗯，", "时间", "不够"] {
//!     firings.extend(watch.observe(Frame::Reasoning(delta)));
//! }
//! assert_eq!(firings.len(), 1);
//! assert_eq!(&*firings[0].trigger, "time-anxiety");
//! assert_eq!(firings[0].evidence, Evidence::Phrase { phrase: "时间不够".into() });
//! assert_eq!(firings[0].actions, [ActionId::Notice]);
//! ```

mod action;
mod automaton;
mod config;
mod detect;
mod lines;
mod policy;
mod text;
mod view;

use std::collections::VecDeque;
use std::sync::Arc;

pub use action::{ActionId, ActionOutcome, ActionRecord, Firing, FiringRecord};
pub use config::{
    CONTEXT_ANXIETY_PHRASES, DetectorConfig, MAX_TRIGGER_ID_CHARS, MarkerParams, Mode,
    PhraseParams, Scope, TIME_ANXIETY_PHRASES, Trigger, TriggerConfig, TriggerError, Triggers,
};
pub use detect::{Evidence, LineRepeatParams, LineRepeatReport, REPORTED_LINE_UNITS};
pub use lines::LineWindow;
pub use policy::{LoopPolicy, MAX_AUTO_RESUME, NoticeDecision};
pub use view::{LINE_LIMIT, LINE_WINDOW, MIN_LINE_LEN, TEXT_LIMIT, View, WINDOWED_EVERY};

pub(crate) use text::{js_trim, prefix_within_units, utf16_len};

use config::Detector;
use detect::{PhraseList, PhraseScan, line_repeat};
use text::{DeltaScan, scan_delta, suffix_within_units};

/// How many recent firings a watch keeps for display (SW-7 "≤40 kept").
pub const RECENT_FIRINGS: usize = 40;

/// One frame of an agent's stream (SW-1).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Frame<'a> {
    /// A new attempt starts: every trigger's per-attempt state is cleared.
    Start,
    /// A `text-delta`; an empty one is ignored.
    Text(&'a str),
    /// A `reasoning-delta`; an empty one is ignored.
    Reasoning(&'a str),
}

/// The control state a trigger was last evaluated under (SW-7): a change resets it.
#[derive(Debug, Clone, PartialEq)]
struct Controls {
    epoch: Arc<str>,
    /// Per action of the trigger, in its order.
    enabled: Box<[bool]>,
}

/// What one trigger keeps for the current attempt; cleared by `start` and by a control
/// change. Only the parts its detector and mode use ever allocate.
#[derive(Debug, Clone, Default)]
struct AttemptState {
    scan: PhraseScan,
    view: View,
    /// New UTF-16 units since the last windowed check.
    since_check: usize,
}

/// One trigger's state in one watch.
#[derive(Debug, Clone)]
struct TriggerState {
    controls: Controls,
    /// Per action: used in this attempt (marked before it runs, SW-7).
    fired: Box<[bool]>,
    /// One of its actions is enabled and unused: kept in step with `controls` and
    /// `fired`, so the per-delta check reads one flag.
    armed: bool,
    attempt: AttemptState,
}

impl TriggerState {
    fn new(trigger: &Trigger) -> Self {
        let actions = trigger.actions().len();
        Self {
            controls: Controls {
                epoch: Arc::from(""),
                enabled: vec![true; actions].into(),
            },
            fired: vec![false; actions].into(),
            armed: actions > 0,
            attempt: AttemptState {
                // `line-repeat` reads only the view's lines: its view keeps no text.
                view: match trigger.detector() {
                    Detector::LineRepeat(_) => View::lines_only(),
                    Detector::Phrases { .. } => View::new(),
                },
                ..AttemptState::default()
            },
        }
    }

    /// Clears the per-attempt state and the fired marks.
    fn reset(&mut self) {
        self.attempt.clear();
        self.fired.iter_mut().for_each(|fired| *fired = false);
        self.armed = self.compute_armed();
    }

    /// Applies controls; a change resets the trigger without replay (SW-7).
    fn apply_controls(
        &mut self,
        trigger: &Trigger,
        epoch: &str,
        enabled: impl Fn(&ActionId) -> bool,
    ) {
        let flags = trigger.actions().iter().map(&enabled);
        let same = *self.controls.epoch == *epoch
            && flags.clone().eq(self.controls.enabled.iter().copied());
        if same {
            return;
        }
        self.controls = Controls {
            epoch: Arc::from(epoch),
            enabled: flags.collect(),
        };
        self.reset();
    }

    /// Evaluated only while one of its actions is enabled and unused (SW-7).
    fn is_armed(&self) -> bool {
        self.armed
    }

    fn compute_armed(&self) -> bool {
        self.controls
            .enabled
            .iter()
            .zip(self.fired.iter())
            .any(|(enabled, fired)| *enabled && !*fired)
    }
}

impl AttemptState {
    /// Clears it as at the start of an attempt, keeping the view's buffers.
    fn clear(&mut self) {
        self.scan = PhraseScan::default();
        self.view.clear();
        self.since_check = 0;
    }

    /// Reads one delta (scanned as `scan`) for `trigger`; the first hit as `(end byte
    /// in delta, evidence)`.
    #[inline]
    fn feed(
        &mut self,
        trigger: &Trigger,
        delta: &str,
        scan: DeltaScan,
    ) -> Option<(usize, Evidence)> {
        match (trigger.detector(), trigger.every_chars()) {
            (Detector::Phrases { list, marker }, None) => self
                .scan
                .feed(list, delta, scan)
                .map(|(end, index)| (end, phrase_evidence(list, index, *marker))),
            (Detector::LineRepeat(params), None) => {
                let mut offset = 0;
                for piece in delta.split_inclusive('\n') {
                    offset += piece.len();
                    if self.view.push(piece) > 0
                        && let Some(evidence) = line_repeat(self.view.lines(), params)
                    {
                        return Some((offset, evidence));
                    }
                }
                None
            }
            (detector, Some(every)) => self.feed_windowed(detector, every, delta, scan),
        }
    }

    /// A windowed trigger: the delta is pushed up to each `every`-th new unit exactly,
    /// and the detector judges the view there (SW-2).
    fn feed_windowed(
        &mut self,
        detector: &Detector,
        every: usize,
        delta: &str,
        scan: DeltaScan,
    ) -> Option<(usize, Evidence)> {
        if self.since_check + scan.units < every {
            // No check falls in this delta.
            self.view.push_scanned(delta, scan);
            self.since_check += scan.units;
            return None;
        }
        let mut offset = 0;
        while let Some(rest) = delta.get(offset..).filter(|rest| !rest.is_empty()) {
            let (bytes, units) = split_at_units(rest, every.saturating_sub(self.since_check));
            self.view.push(rest.get(..bytes).unwrap_or_default());
            offset += bytes;
            self.since_check += units;
            if self.since_check >= every {
                let new_units = std::mem::take(&mut self.since_check);
                if let Some(evidence) = judge_view(detector, &self.view, new_units) {
                    return Some((offset, evidence));
                }
            }
        }
        None
    }
}

/// Judges a windowed trigger's view: `line-repeat` its line window, `marker`/`phrase`
/// the kept text, reporting only occurrences that end in the last `new_units` units
/// (older ones were judged at an earlier check). O(`LINE_WINDOW`) or O(`new_units` +
/// longest phrase).
fn judge_view(detector: &Detector, view: &View, new_units: usize) -> Option<Evidence> {
    match detector {
        Detector::LineRepeat(params) => line_repeat(view.lines(), params),
        Detector::Phrases { list, marker } => {
            let text = view.recent_text(new_units + 2 * list.carry_chars());
            let from = text.len() - suffix_within_units(text, new_units).len();
            list.earliest_after(text, from)
                .map(|(_, index)| phrase_evidence(list, index, *marker))
        }
    }
}

fn phrase_evidence(list: &PhraseList, index: usize, marker: bool) -> Evidence {
    let found = list.get(index).to_owned();
    if marker {
        Evidence::Marker { marker: found }
    } else {
        Evidence::Phrase { phrase: found }
    }
}

/// The shortest prefix of `text` with at least `need` UTF-16 units (all of it if
/// shorter): `(bytes, units)`.
fn split_at_units(text: &str, need: usize) -> (usize, usize) {
    let mut units = 0;
    for (index, ch) in text.char_indices() {
        units += ch.len_utf16();
        if units >= need {
            return (index + ch.len_utf8(), units);
        }
    }
    (text.len(), units)
}

/// Whether a trigger of `scope` reads a delta of `source` (`Text` or `Reasoning`).
fn reads(scope: Scope, source: Scope) -> bool {
    scope == Scope::Combined || scope == source
}

/// The stream watch of one agent (SW-1, SW-7): per trigger its controls, fired marks,
/// view and detector state. `observe` is synchronous and O(|delta| + longest phrase)
/// per trigger, independent of the text read so far (SW-3).
///
/// Until [`StreamWatch::set_controls`] is called every action is enabled under the
/// empty epoch.
#[derive(Debug, Clone)]
pub struct StreamWatch {
    triggers: Triggers,
    states: Vec<TriggerState>,
    readers: Readers,
    recent: VecDeque<FiringRecord>,
}

/// The triggers that read each source, in trigger order: a delta visits only its own.
#[derive(Debug, Clone)]
struct Readers {
    text: Box<[usize]>,
    reasoning: Box<[usize]>,
}

impl Readers {
    fn new(triggers: &Triggers) -> Self {
        let of = |source| {
            triggers
                .as_slice()
                .iter()
                .enumerate()
                .filter(|(_, trigger)| reads(trigger.scope(), source))
                .map(|(index, _)| index)
                .collect()
        };
        Self {
            text: of(Scope::Text),
            reasoning: of(Scope::Reasoning),
        }
    }
}

impl StreamWatch {
    /// A watch over `triggers`, with every action enabled under the empty epoch.
    pub fn new(triggers: Triggers) -> Self {
        let states = triggers.as_slice().iter().map(TriggerState::new).collect();
        Self {
            readers: Readers::new(&triggers),
            triggers,
            states,
            recent: VecDeque::new(),
        }
    }

    /// The triggers this watch evaluates.
    pub fn triggers(&self) -> &Triggers {
        &self.triggers
    }

    /// Reads one frame and returns the firings it caused, in the order they hit (ties in
    /// trigger order). Each firing's actions are already marked as used (SW-7).
    pub fn observe(&mut self, frame: Frame<'_>) -> Vec<Firing> {
        let (source, delta) = match frame {
            Frame::Start => {
                self.states.iter_mut().for_each(TriggerState::reset);
                return Vec::new();
            }
            Frame::Text(delta) => (Scope::Text, delta),
            Frame::Reasoning(delta) => (Scope::Reasoning, delta),
        };
        if delta.is_empty() {
            return Vec::new();
        }
        let readers = match source {
            Scope::Text => &self.readers.text,
            _ => &self.readers.reasoning,
        };
        if readers.is_empty() {
            return Vec::new();
        }
        let scan = scan_delta(delta);
        let triggers = self.triggers.as_slice();
        let mut hits = Vec::new();
        for &index in readers.iter() {
            let (Some(trigger), Some(state)) = (triggers.get(index), self.states.get_mut(index))
            else {
                continue;
            };
            if !state.is_armed() {
                continue;
            }
            if let Some((offset, evidence)) = state.attempt.feed(trigger, delta, scan) {
                hits.push((offset, index, evidence));
            }
        }
        if hits.is_empty() {
            return Vec::new();
        }
        hits.sort_by_key(|(offset, index, _)| (*offset, *index));
        hits.into_iter()
            .filter_map(|(_, index, evidence)| self.fire(index, evidence))
            .collect()
    }

    /// Marks the trigger's enabled, unused actions and builds its firing.
    fn fire(&mut self, index: usize, evidence: Evidence) -> Option<Firing> {
        let trigger = self.triggers.as_slice().get(index)?;
        let state = self.states.get_mut(index)?;
        let mut actions = Vec::new();
        for ((action, enabled), fired) in trigger
            .actions()
            .iter()
            .zip(state.controls.enabled.iter())
            .zip(state.fired.iter_mut())
        {
            if *enabled && !*fired {
                *fired = true;
                actions.push(action.clone());
            }
        }
        state.armed = state.compute_armed();
        let firing = Firing {
            trigger: Arc::clone(trigger.shared_id()),
            epoch: Arc::clone(&state.controls.epoch),
            evidence,
            actions,
        };
        if self.recent.len() == RECENT_FIRINGS {
            self.recent.pop_front();
        }
        self.recent.push_back(FiringRecord {
            firing: firing.clone(),
            actions: None,
        });
        Some(firing)
    }

    /// Sets every trigger's controls (SW-7): the control epoch and whether each action
    /// is enabled. A trigger whose `(epoch, flags)` changed loses its state, view and
    /// fired marks; nothing read before is replayed. Cheap when nothing changed, so it
    /// may be called before every frame.
    pub fn set_controls(&mut self, epoch: &str, enabled: impl Fn(&str, &ActionId) -> bool) {
        for (trigger, state) in self.triggers.as_slice().iter().zip(self.states.iter_mut()) {
            state.apply_controls(trigger, epoch, |action| enabled(trigger.id(), action));
        }
    }

    /// Sets one trigger's controls, for epochs kept per rule; false if no trigger has
    /// this id.
    pub fn set_trigger_controls(
        &mut self,
        trigger: &str,
        epoch: &str,
        enabled: impl Fn(&ActionId) -> bool,
    ) -> bool {
        let found = self
            .triggers
            .as_slice()
            .iter()
            .zip(self.states.iter_mut())
            .find(|(candidate, _)| candidate.id() == trigger);
        match found {
            Some((trigger, state)) => {
                state.apply_controls(trigger, epoch, enabled);
                true
            }
            None => false,
        }
    }

    /// Whether the trigger is still evaluated in this attempt: one of its actions is
    /// enabled and unused (SW-7). False for an unknown id.
    pub fn is_armed(&self, trigger: &str) -> bool {
        self.position(trigger)
            .and_then(|index| self.states.get(index))
            .is_some_and(TriggerState::is_armed)
    }

    /// The trigger's current view (empty for a trigger that keeps none). A
    /// `line-repeat` trigger's view keeps its lines and open line but no text chunks
    /// (its detector never reads them): its `text_len` is 0.
    pub fn view(&self, trigger: &str) -> Option<&View> {
        let index = self.position(trigger)?;
        self.states.get(index).map(|state| &state.attempt.view)
    }

    /// The last `RECENT_FIRINGS` firings of this watch, oldest first, across attempts,
    /// each with what became of its actions once the caller recorded it (SW-7).
    pub fn recent_firings(&self) -> impl Iterator<Item = &FiringRecord> {
        self.recent.iter()
    }

    /// Keeps what [`Firing::run`] returned for `firing` in its firing record (SW-7), so
    /// an unknown or failing action stays visible after the run: the newest kept
    /// record of this firing that has none yet. False if it is no longer kept (more
    /// than `RECENT_FIRINGS` firings since) or was already recorded.
    pub fn record_actions(&mut self, firing: &Firing, actions: Vec<ActionRecord>) -> bool {
        match self
            .recent
            .iter_mut()
            .rev()
            .find(|record| record.actions.is_none() && record.firing == *firing)
        {
            Some(record) => {
                record.actions = Some(actions);
                true
            }
            None => false,
        }
    }

    fn position(&self, trigger: &str) -> Option<usize> {
        self.triggers
            .as_slice()
            .iter()
            .position(|candidate| candidate.id() == trigger)
    }
}
