//! OP-5 and OP-6: the feedback episode of one (session, rule) as a pure state machine.
//!
//! The plugin keeps one [`Episode`] per (sessionId, ruleId) in the storage domain
//! `context_care_output_feedback` (the type is serde camelCase for that). It feeds each
//! eligible output through [`Episode::observe_output`], which may create a
//! [`PendingFeedback`]; the delivery side then reserves, dispatches or supersedes that
//! pending. Nothing here does I/O or knows routes: choosing which pendings a request
//! carries (`carryFromOtherRoute`) is the plugin's job.
//!
//! A finished pending (dispatched, superseded or exhausted) leaves `pending` and is kept
//! as `lastDelivery`, so a new one can be created.

use serde::{Deserialize, Serialize};

use super::config::OutputPatternConfig;
use super::metrics::{Evidence, Measurement};
use super::trigger::{TriggerKind, WindowSample, evaluate_trigger, window_totals};

/// The state of one (session, rule) feedback episode (OP-5).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Episode {
    /// The rule version this episode was built for; a change resets the episode.
    pub rule_version: String,
    /// The rule spec's fingerprint (e.g. [`OutputPatternConfig::fingerprint`]); a
    /// change resets the episode.
    pub spec_fingerprint: String,
    /// The seq of the last observed output; outputs at or below it are skipped.
    /// `None` before the first one (event seqs start at 0).
    #[serde(default)]
    pub last_seq: Option<u64>,
    /// Outputs observed so far.
    pub completed: u64,
    /// No new pending is created while `completed` ≤ this.
    pub cooldown_until: u64,
    /// Consecutive healthy, measured outputs without a hit.
    pub healthy: u64,
    /// The last `windowOutputs` outputs, oldest first.
    pub window: Vec<WindowSample>,
    /// The feedback waiting to be delivered, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pending: Option<PendingFeedback>,
    /// The last pending that finished, with its final status.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_delivery: Option<PendingFeedback>,
}

/// Feedback created by a trigger, waiting for the next natural request (OP-5, OP-6).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PendingFeedback {
    /// Identifies this pending; a reservation must name it (OP-6).
    pub segment_id: String,
    /// The seq of the output that triggered it.
    pub seq: u64,
    /// Which trigger fired.
    pub trigger: TriggerKind,
    /// N: for `single-output` the output's, for `window` ΣN over the window.
    pub statements: u64,
    /// K, likewise.
    pub hit_statements: u64,
    /// H, likewise.
    pub hits: u64,
    /// Evidence from the triggering output (at most `maxEvidence`).
    pub evidence: Vec<Evidence>,
    /// How many times it was reserved for a request.
    pub deliveries: u32,
    /// `maxDeliveries` when it was created.
    pub max_deliveries: u32,
    /// Where it stands.
    pub status: PendingStatus,
}

/// Delivery status of a pending feedback (OP-6).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum PendingStatus {
    /// Created, never reserved.
    Pending,
    /// Reserved for a request that may or may not have reached the provider; a crash
    /// leaves it here and it is delivered again, up to `maxDeliveries`.
    DeliveryUnknown,
    /// Delivered on a dispatched request.
    Dispatched,
    /// Replaced by feedback dispatched on another route.
    Superseded,
    /// Dropped after `maxDeliveries` deliveries that never dispatched.
    Exhausted,
}

/// What kind of output is observed; only [`OutputKind::Complete`] can count as healthy
/// (GEN-4, OP-5).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum OutputKind {
    /// A committed, non-interrupted `assistant/message` whose attempt had no stream
    /// abort.
    Complete,
    /// A failed output.
    Failed,
    /// An interrupted output.
    Interrupted,
    /// A summary output.
    Summary,
}

/// What [`Episode::observe_output`] did.
#[derive(Debug, Clone, PartialEq)]
pub enum ObserveOutcome {
    /// Step 1: the seq was not above `lastSeq`; nothing changed.
    Skipped {
        /// The episode's `lastSeq`.
        last_seq: u64,
    },
    /// Steps 2–5 ran.
    Observed(Observation),
}

/// The effects of observing one output (steps 2–5 of OP-5).
#[derive(Debug, Clone, PartialEq)]
pub struct Observation {
    /// Step 3: the pending dropped as `exhausted`, if any.
    pub exhausted: Option<PendingFeedback>,
    /// Step 4: a non-zero cooldown was cleared by enough healthy outputs.
    pub rearmed: bool,
    /// Step 5: what the triggers decided.
    pub decision: TriggerDecision,
}

/// Step 5 of OP-5.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TriggerDecision {
    /// No trigger held.
    NotTriggered,
    /// A trigger held and a pending was created.
    Created(TriggerKind),
    /// A trigger held, but a pending already waits.
    PendingExists(TriggerKind),
    /// A trigger held within the cooldown (`completed` ≤ `cooldownUntil`).
    CoolingDown(TriggerKind),
}

/// Why a delivery step was refused (OP-6).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum DeliveryError {
    /// There is no pending feedback.
    #[error("no pending feedback")]
    NoPending,
    /// The pending is not the one the request was built with.
    #[error("pending feedback changed before dispatch (expected {expected}, found {found})")]
    Changed {
        /// The segment id the caller holds.
        expected: String,
        /// The segment id of the current pending.
        found: String,
    },
    /// The pending was delivered `maxDeliveries` times already.
    #[error("pending feedback {segment_id} is exhausted after {deliveries} deliveries")]
    Exhausted {
        /// The pending's segment id.
        segment_id: String,
        /// Its deliveries.
        deliveries: u32,
    },
    /// Dispatch without a reservation first.
    #[error("pending feedback {segment_id} was not reserved")]
    NotReserved {
        /// The pending's segment id.
        segment_id: String,
    },
}

/// Values the feedback text template takes from the request, not the episode (OP-6).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FeedbackContext<'a> {
    /// `{boundModelLabel}`: the route the feedback is delivered on, `provider/model`.
    pub bound_model_label: &'a str,
    /// `{sourceModel}`: the model whose output triggered the feedback.
    pub source_model: &'a str,
}

impl Episode {
    /// A fresh episode for a rule version and spec.
    pub fn new(rule_version: impl Into<String>, spec_fingerprint: impl Into<String>) -> Self {
        Episode {
            rule_version: rule_version.into(),
            spec_fingerprint: spec_fingerprint.into(),
            last_seq: None,
            completed: 0,
            cooldown_until: 0,
            healthy: 0,
            window: Vec::new(),
            pending: None,
            last_delivery: None,
        }
    }

    /// Resets the episode when the rule version or spec changed (OP-5); returns whether
    /// it did.
    pub fn reset_if_changed(&mut self, rule_version: &str, spec_fingerprint: &str) -> bool {
        if self.rule_version == rule_version && self.spec_fingerprint == spec_fingerprint {
            return false;
        }
        *self = Episode::new(rule_version, spec_fingerprint);
        true
    }

    /// Observes one eligible output (OP-5 steps 1–5), given its measurement.
    pub fn observe_output(
        &mut self,
        config: &OutputPatternConfig,
        seq: u64,
        measurement: &Measurement,
        kind: OutputKind,
    ) -> ObserveOutcome {
        // 1. Skip what was already seen.
        if let Some(last_seq) = self.last_seq
            && last_seq >= seq
        {
            return ObserveOutcome::Skipped { last_seq };
        }
        self.last_seq = Some(seq);
        // 2.
        self.completed += 1;
        // 3. Drop a pending that used up its deliveries.
        let exhausted = match self.pending.take() {
            Some(mut pending) if pending.deliveries >= pending.max_deliveries => {
                pending.status = PendingStatus::Exhausted;
                self.last_delivery = Some(pending.clone());
                Some(pending)
            }
            still_pending => {
                self.pending = still_pending;
                None
            }
        };
        // 4. Count healthy, hit-free outputs; enough of them clear the cooldown.
        let hit_free = measurement
            .metrics()
            .is_some_and(|metrics| metrics.hit_statements == 0);
        self.healthy = if kind == OutputKind::Complete && hit_free {
            self.healthy + 1
        } else {
            0
        };
        let mut rearmed = false;
        if self.healthy >= u64::from(config.rearm_healthy_outputs) {
            rearmed = self.cooldown_until != 0;
            self.cooldown_until = 0;
        }
        // 5. Trigger over the window that now ends with this output.
        self.window.push(WindowSample::new(seq, measurement));
        let window_len = config.window_outputs as usize;
        if self.window.len() > window_len {
            self.window.drain(..self.window.len() - window_len);
        }
        let decision = match evaluate_trigger(config, measurement, &self.window) {
            None => TriggerDecision::NotTriggered,
            Some(trigger) if self.pending.is_some() => TriggerDecision::PendingExists(trigger),
            Some(trigger) if self.completed <= self.cooldown_until => {
                TriggerDecision::CoolingDown(trigger)
            }
            Some(trigger) => {
                self.pending = Some(self.new_pending(config, seq, trigger, measurement));
                self.cooldown_until = self.completed + u64::from(config.cooldown_completed_outputs);
                TriggerDecision::Created(trigger)
            }
        };
        ObserveOutcome::Observed(Observation {
            exhausted,
            rearmed,
            decision,
        })
    }

    /// The pending a request may carry now: not finished and not out of deliveries.
    pub fn deliverable_pending(&self) -> Option<&PendingFeedback> {
        self.pending
            .as_ref()
            .filter(|pending| pending.is_deliverable())
    }

    /// Reserves the pending for a request built with `segment_id` (OP-6): deliveries+1,
    /// status `delivery-unknown`.
    pub fn reserve(&mut self, segment_id: &str) -> Result<&PendingFeedback, DeliveryError> {
        let pending = self.matching_pending(segment_id)?;
        if !pending.is_deliverable() {
            return Err(DeliveryError::Exhausted {
                segment_id: pending.segment_id.clone(),
                deliveries: pending.deliveries,
            });
        }
        pending.deliveries += 1;
        pending.status = PendingStatus::DeliveryUnknown;
        Ok(pending)
    }

    /// Marks the reserved pending `dispatched` once its request reached the provider;
    /// it becomes `lastDelivery` (OP-6).
    pub fn mark_dispatched(&mut self, segment_id: &str) -> Result<PendingFeedback, DeliveryError> {
        let pending = self.matching_pending(segment_id)?;
        if pending.status != PendingStatus::DeliveryUnknown {
            return Err(DeliveryError::NotReserved {
                segment_id: pending.segment_id.clone(),
            });
        }
        self.finish(PendingStatus::Dispatched)
            .ok_or(DeliveryError::NoPending)
    }

    /// Marks the pending `superseded`, because feedback was dispatched on another route
    /// that did not carry it (OP-6); it becomes `lastDelivery`.
    pub fn supersede(&mut self) -> Option<PendingFeedback> {
        self.finish(PendingStatus::Superseded)
    }

    fn matching_pending(
        &mut self,
        segment_id: &str,
    ) -> Result<&mut PendingFeedback, DeliveryError> {
        let pending = self.pending.as_mut().ok_or(DeliveryError::NoPending)?;
        if pending.segment_id != segment_id {
            return Err(DeliveryError::Changed {
                expected: segment_id.to_owned(),
                found: pending.segment_id.clone(),
            });
        }
        Ok(pending)
    }

    fn finish(&mut self, status: PendingStatus) -> Option<PendingFeedback> {
        let mut pending = self.pending.take()?;
        pending.status = status;
        self.last_delivery = Some(pending.clone());
        Some(pending)
    }

    fn new_pending(
        &self,
        config: &OutputPatternConfig,
        seq: u64,
        trigger: TriggerKind,
        measurement: &Measurement,
    ) -> PendingFeedback {
        let metrics = measurement.metrics();
        let (statements, hit_statements, hits) = match trigger {
            TriggerKind::SingleOutput => metrics.map_or((0, 0, 0), |metrics| {
                (
                    u64::from(metrics.statements),
                    u64::from(metrics.hit_statements),
                    u64::from(metrics.hits),
                )
            }),
            TriggerKind::Window => {
                let totals = window_totals(config, &self.window);
                (totals.statements, totals.hit_statements, totals.hits)
            }
        };
        PendingFeedback {
            segment_id: format!("{}:{}:{seq}", self.rule_version, self.spec_fingerprint),
            seq,
            trigger,
            statements,
            hit_statements,
            hits,
            evidence: metrics
                .map(|metrics| metrics.evidence.clone())
                .unwrap_or_default(),
            deliveries: 0,
            max_deliveries: config.max_deliveries,
            status: PendingStatus::Pending,
        }
    }
}

impl PendingFeedback {
    /// Whether a request may still carry it: `pending` or `delivery-unknown` with
    /// deliveries left.
    pub fn is_deliverable(&self) -> bool {
        matches!(
            self.status,
            PendingStatus::Pending | PendingStatus::DeliveryUnknown
        ) && self.deliveries < self.max_deliveries
    }
}

/// Fills the rule's feedback text (OP-6): `{boundModelLabel} {sourceModel} {H} {K} {N}
/// {examples}`. One pass, so substituted values are never expanded again; any other
/// `{…}` is left as written. `{examples}` is the evidence statements, one per line as
/// `- text`, with runs of whitespace (blanked code) collapsed.
pub fn render_feedback_text(
    template: &str,
    pending: &PendingFeedback,
    context: &FeedbackContext<'_>,
) -> String {
    let mut rendered = String::with_capacity(template.len());
    let mut rest = template;
    while let Some(open_idx) = rest.find('{') {
        rendered.push_str(&rest[..open_idx]);
        let after_open = &rest[open_idx + 1..];
        let value = after_open.find('}').and_then(|close_idx| {
            let name = &after_open[..close_idx];
            let value = match name {
                "boundModelLabel" => context.bound_model_label.to_owned(),
                "sourceModel" => context.source_model.to_owned(),
                "H" => pending.hits.to_string(),
                "K" => pending.hit_statements.to_string(),
                "N" => pending.statements.to_string(),
                "examples" => examples_text(&pending.evidence),
                _ => return None,
            };
            Some((value, close_idx))
        });
        match value {
            Some((value, close_idx)) => {
                rendered.push_str(&value);
                rest = &after_open[close_idx + 1..];
            }
            None => {
                rendered.push('{');
                rest = after_open;
            }
        }
    }
    rendered.push_str(rest);
    rendered
}

fn examples_text(evidence: &[Evidence]) -> String {
    evidence
        .iter()
        .map(|evidence| {
            let words: Vec<&str> = evidence.text.split_whitespace().collect();
            format!("- {}", words.join(" "))
        })
        .collect::<Vec<_>>()
        .join("\n")
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;
    use crate::pattern::{fixture_1, measure};

    const HOT: &str = "我不会做第一项。\n我不会做第二项。\n我不会做第三项。";
    const CLEAN: &str = "证据已经查验。\n任务继续。";
    const AC_16_LOW: &str = "我不会做。\n我不会做。\n已核对。\n已测试。\n已记录。\n继续执行。";

    fn episode() -> Episode {
        Episode::new("1", fixture_1().fingerprint())
    }

    fn observe(episode: &mut Episode, seq: u64, text: &str) -> ObserveOutcome {
        observe_kind(episode, seq, text, OutputKind::Complete)
    }

    fn observe_kind(
        episode: &mut Episode,
        seq: u64,
        text: &str,
        kind: OutputKind,
    ) -> ObserveOutcome {
        let config = fixture_1();
        episode.observe_output(&config, seq, &measure(&config, text), kind)
    }

    fn decision(outcome: ObserveOutcome) -> TriggerDecision {
        match outcome {
            ObserveOutcome::Observed(observation) => observation.decision,
            ObserveOutcome::Skipped { .. } => panic!("skipped"),
        }
    }

    fn created() -> TriggerDecision {
        TriggerDecision::Created(TriggerKind::SingleOutput)
    }

    fn dispatch_pending(episode: &mut Episode) {
        let segment_id = episode.pending.as_ref().unwrap().segment_id.clone();
        episode.reserve(&segment_id).unwrap();
        episode.mark_dispatched(&segment_id).unwrap();
    }

    #[test]
    fn op_5_trigger_creates_pending_and_starts_cooldown() {
        let mut episode = episode();
        assert_eq!(decision(observe(&mut episode, 10, HOT)), created());
        assert_eq!((episode.completed, episode.cooldown_until), (1, 3));
        let pending = episode.pending.clone().unwrap();
        assert_eq!(pending.status, PendingStatus::Pending);
        assert_eq!(
            (pending.statements, pending.hit_statements, pending.hits),
            (3, 3, 3)
        );
        assert_eq!(
            (pending.seq, pending.deliveries, pending.max_deliveries),
            (10, 0, 2)
        );
        assert_eq!(pending.evidence.len(), 3);
        assert_eq!(episode.deliverable_pending(), Some(&pending));
    }

    #[test]
    fn op_5_step_1_skips_seqs_at_or_below_last_seq() {
        let mut episode = episode();
        observe(&mut episode, 0, CLEAN);
        let before = episode.clone();
        assert_eq!(
            observe(&mut episode, 0, HOT),
            ObserveOutcome::Skipped { last_seq: 0 }
        );
        observe(&mut episode, 5, CLEAN);
        assert_eq!(
            observe(&mut episode, 4, HOT),
            ObserveOutcome::Skipped { last_seq: 5 }
        );
        assert_eq!(
            observe(&mut episode, 5, HOT),
            ObserveOutcome::Skipped { last_seq: 5 }
        );
        assert_eq!(episode.completed, before.completed + 1);
        assert!(episode.pending.is_none());
    }

    #[test]
    fn op_5_step_5_pending_blocks_a_second_pending() {
        let mut episode = episode();
        observe(&mut episode, 1, HOT);
        let first = episode.pending.clone().unwrap();
        for seq in 2..6 {
            assert_eq!(
                decision(observe(&mut episode, seq, HOT)),
                TriggerDecision::PendingExists(TriggerKind::SingleOutput)
            );
        }
        assert_eq!(episode.pending, Some(first));
    }

    #[test]
    fn op_5_step_5_cooldown_counts_completed_outputs() {
        let mut episode = episode();
        observe(&mut episode, 1, HOT);
        dispatch_pending(&mut episode);
        // completed 2 and 3 are within cooldownUntil = 3.
        assert_eq!(
            decision(observe(&mut episode, 2, HOT)),
            TriggerDecision::CoolingDown(TriggerKind::SingleOutput)
        );
        assert_eq!(
            decision(observe(&mut episode, 3, HOT)),
            TriggerDecision::CoolingDown(TriggerKind::SingleOutput)
        );
        assert_eq!(decision(observe(&mut episode, 4, HOT)), created());
        assert_eq!(episode.cooldown_until, 6);
    }

    #[test]
    fn op_5_step_4_healthy_outputs_rearm() {
        let mut config = fixture_1();
        config.cooldown_completed_outputs = 10;
        let mut episode = Episode::new("1", config.fingerprint());
        let observe = |episode: &mut Episode, seq: u64, text: &str, kind: OutputKind| match episode
            .observe_output(&config, seq, &measure(&config, text), kind)
        {
            ObserveOutcome::Observed(observation) => observation,
            ObserveOutcome::Skipped { .. } => panic!("skipped"),
        };
        observe(&mut episode, 1, HOT, OutputKind::Complete);
        dispatch_pending(&mut episode);
        assert_eq!(episode.cooldown_until, 11);
        let first_healthy = observe(&mut episode, 2, CLEAN, OutputKind::Complete);
        assert!(!first_healthy.rearmed);
        assert_eq!((episode.healthy, episode.cooldown_until), (1, 11));
        let second_healthy = observe(&mut episode, 3, CLEAN, OutputKind::Complete);
        assert!(second_healthy.rearmed);
        assert_eq!((episode.healthy, episode.cooldown_until), (2, 0));
        let retrigger = observe(&mut episode, 4, HOT, OutputKind::Complete);
        assert_eq!(retrigger.decision, created());
        assert_eq!((episode.healthy, episode.cooldown_until), (0, 14));
    }

    #[test]
    fn op_5_step_4_unhealthy_or_unmeasured_outputs_break_the_streak() {
        for breaker in [
            OutputKind::Failed,
            OutputKind::Interrupted,
            OutputKind::Summary,
        ] {
            let mut episode = episode();
            observe(&mut episode, 1, HOT);
            dispatch_pending(&mut episode);
            observe(&mut episode, 2, CLEAN);
            observe_kind(&mut episode, 3, CLEAN, breaker);
            assert_eq!(episode.healthy, 0, "{breaker:?}");
            assert_eq!(episode.cooldown_until, 3, "{breaker:?}");
        }
        let mut episode = episode();
        observe(&mut episode, 1, CLEAN);
        observe(&mut episode, 2, &"x".repeat(20001));
        assert_eq!(episode.healthy, 0);
        assert_eq!(
            episode.window[1],
            WindowSample::Unavailable {
                seq: 2,
                reason: crate::pattern::UnavailableReason::MaxTextChars
            }
        );
    }

    #[test]
    fn op_5_window_keeps_the_last_window_outputs() {
        let mut episode = episode();
        for seq in 1..=5 {
            observe(&mut episode, seq, CLEAN);
        }
        let seqs: Vec<u64> = episode.window.iter().map(WindowSample::seq).collect();
        assert_eq!(seqs, [3, 4, 5]);
    }

    #[test]
    fn op_5_ac_16_window_trigger_through_the_episode() {
        let mut episode = episode();
        assert_eq!(
            decision(observe(&mut episode, 1, AC_16_LOW)),
            TriggerDecision::NotTriggered
        );
        assert_eq!(
            decision(observe(&mut episode, 2, AC_16_LOW)),
            TriggerDecision::NotTriggered
        );
        assert_eq!(
            decision(observe(&mut episode, 3, AC_16_LOW)),
            TriggerDecision::Created(TriggerKind::Window)
        );
        let pending = episode.pending.clone().unwrap();
        assert_eq!(
            (pending.statements, pending.hit_statements, pending.hits),
            (18, 6, 6)
        );
        assert_eq!(pending.evidence.len(), 2);
    }

    #[test]
    fn op_5_a_version_or_spec_change_resets() {
        let mut episode = episode();
        observe(&mut episode, 1, HOT);
        let fingerprint = fixture_1().fingerprint();
        assert!(!episode.reset_if_changed("1", &fingerprint));
        assert!(episode.pending.is_some());
        assert!(episode.reset_if_changed("2", &fingerprint));
        assert_eq!(episode, Episode::new("2", fingerprint.clone()));
        observe(&mut episode, 1, HOT);
        assert!(episode.reset_if_changed("2", "other-spec"));
        assert_eq!(episode.completed, 0);
        assert_eq!(episode.last_seq, None);
    }

    #[test]
    fn op_6_reserve_checks_the_segment_id() {
        let mut episode = episode();
        assert_eq!(episode.reserve("x"), Err(DeliveryError::NoPending));
        observe(&mut episode, 1, HOT);
        let error = episode.reserve("stale").unwrap_err();
        assert!(
            error
                .to_string()
                .contains("pending feedback changed before dispatch"),
            "{error}"
        );
        assert_eq!(episode.pending.as_ref().unwrap().deliveries, 0);
        let segment_id = episode.pending.as_ref().unwrap().segment_id.clone();
        let reserved = episode.reserve(&segment_id).unwrap();
        assert_eq!(
            (reserved.deliveries, reserved.status),
            (1, PendingStatus::DeliveryUnknown)
        );
    }

    #[test]
    fn op_6_dispatch_needs_a_reservation_and_finishes_the_pending() {
        let mut episode = episode();
        observe(&mut episode, 1, HOT);
        let segment_id = episode.pending.as_ref().unwrap().segment_id.clone();
        assert!(matches!(
            episode.mark_dispatched(&segment_id),
            Err(DeliveryError::NotReserved { .. })
        ));
        episode.reserve(&segment_id).unwrap();
        let dispatched = episode.mark_dispatched(&segment_id).unwrap();
        assert_eq!(dispatched.status, PendingStatus::Dispatched);
        assert_eq!(episode.pending, None);
        assert_eq!(episode.last_delivery, Some(dispatched));
        assert_eq!(
            episode.mark_dispatched(&segment_id),
            Err(DeliveryError::NoPending)
        );
    }

    #[test]
    fn op_6_ac_18_crash_redelivers_then_exhausts_and_rearms_the_trigger() {
        let mut episode = episode();
        observe(&mut episode, 1, HOT);
        let segment_id = episode.pending.as_ref().unwrap().segment_id.clone();
        episode.reserve(&segment_id).unwrap();
        // Crash: never dispatched; the next request delivers it again.
        assert!(episode.deliverable_pending().is_some());
        assert_eq!(episode.reserve(&segment_id).unwrap().deliveries, 2);
        assert_eq!(episode.deliverable_pending(), None);
        assert!(matches!(
            episode.reserve(&segment_id),
            Err(DeliveryError::Exhausted { deliveries: 2, .. })
        ));
        // Past the cooldown, the next output drops it (step 3) and may trigger anew.
        observe(&mut episode, 2, CLEAN);
        observe(&mut episode, 3, CLEAN);
        let outcome = observe(&mut episode, 4, HOT);
        let ObserveOutcome::Observed(observation) = outcome else {
            panic!("skipped");
        };
        // The exhausted pending was dropped at seq 2, the first output after it ran out.
        assert_eq!(observation.exhausted, None);
        assert_eq!(observation.decision, created());
        assert_eq!(
            episode.last_delivery.as_ref().unwrap().status,
            PendingStatus::Exhausted
        );
        assert_eq!(episode.pending.as_ref().unwrap().seq, 4);
    }

    #[test]
    fn op_5_step_3_exhausted_is_dropped_before_the_trigger() {
        let mut config = fixture_1();
        config.cooldown_completed_outputs = 0;
        let mut episode = Episode::new("1", config.fingerprint());
        let hot = measure(&config, HOT);
        episode.observe_output(&config, 1, &hot, OutputKind::Complete);
        let segment_id = episode.pending.as_ref().unwrap().segment_id.clone();
        episode.reserve(&segment_id).unwrap();
        episode.reserve(&segment_id).unwrap();
        let ObserveOutcome::Observed(observation) =
            episode.observe_output(&config, 2, &hot, OutputKind::Complete)
        else {
            panic!("skipped");
        };
        let exhausted = observation.exhausted.unwrap();
        assert_eq!(
            (exhausted.status, exhausted.deliveries),
            (PendingStatus::Exhausted, 2)
        );
        assert_eq!(observation.decision, created());
        assert_ne!(episode.pending.as_ref().unwrap().segment_id, segment_id);
    }

    #[test]
    fn op_6_supersede_finishes_the_pending() {
        let mut episode = episode();
        assert_eq!(episode.supersede(), None);
        observe(&mut episode, 1, HOT);
        let superseded = episode.supersede().unwrap();
        assert_eq!(superseded.status, PendingStatus::Superseded);
        assert_eq!(episode.pending, None);
        assert_eq!(episode.last_delivery, Some(superseded));
    }

    #[test]
    fn op_6_template_substitutes_every_placeholder_once() {
        let mut episode = episode();
        observe(
            &mut episode,
            1,
            "先说 `code` 我不会做这个。\n我不会做第二项。\n我不会做第三项。",
        );
        let pending = episode.pending.clone().unwrap();
        let context = FeedbackContext {
            bound_model_label: "p/m",
            source_model: "{H}",
        };
        let rendered = render_feedback_text(
            "{boundModelLabel} from {sourceModel}: H={H} K={K} N={N} {unknown} {\n{examples}{",
            &pending,
            &context,
        );
        assert_eq!(
            rendered,
            "p/m from {H}: H=3 K=3 N=3 {unknown} {\n- 先说 我不会做这个。\n- 我不会做第二项。\n- 我不会做第三项。{"
        );
    }

    #[test]
    fn op_5_episode_serializes_camel_case() {
        let mut episode = episode();
        observe(&mut episode, 1, HOT);
        let json = serde_json::to_value(&episode).unwrap();
        for key in [
            "ruleVersion",
            "specFingerprint",
            "lastSeq",
            "completed",
            "cooldownUntil",
            "healthy",
            "window",
            "pending",
        ] {
            assert!(json.get(key).is_some(), "{key}");
        }
        assert!(json.get("lastDelivery").is_none());
        assert_eq!(json["pending"]["status"], "pending");
        assert_eq!(json["pending"]["trigger"], "single-output");
        assert_eq!(
            json["pending"]["segmentId"],
            episode.pending.as_ref().unwrap().segment_id.as_str()
        );
        let back: Episode = serde_json::from_value(json).unwrap();
        assert_eq!(back, episode);
    }
}
