//! The step boundary (CC-BND-1, CC-BND-2, CC-NTC-1, CC-NTC-2, CC-HYS-1): after the
//! pre-step chain has fixed the batch, context-care flushes its journal, freezes the
//! session's pricing, samples the load, moves the session's hysteresis controller,
//! reports the outcome of a requested rest, and appends the status notice as the last
//! message of the batch when its model-visible text changed (or a rest was requested),
//! except at a quiet start (`quiet.rs`).
//!
//! Maintenance itself (prune, summary passes, a requested summary or deep rest) lives
//! in [`crate::maintenance`]; the boundary decides when it runs and reports it.

mod notices;

use std::sync::Arc;

use ccare_agent::{
    BoundaryContext, BoundaryContribution, BoundaryContributor, BoxFuture, HookContext, HookError,
    PreStepDecision, PreStepHook, PreStepInput, PreStepNext,
};
use ccare_core::{ContentBlock, Extra, Message, PluginSource, Source};
use serde_json::{Value, json};

use crate::budget::{BudgetPhase, assess};
use crate::care::{Care, Measured, UiSample};
use crate::maintenance::{AutoBand, RestOutcome};
use crate::metrics::ContextCareMetrics;
use crate::rest_tool::REQUEST_SOURCE;
use crate::texts::{AutoTexts, RestTexts, StatusParts, auto_texts, render_status, rest_texts};

pub(crate) use notices::NoticeScan;

/// The source kind of status notices (CC-NTC-1).
pub const STATE_SOURCE: &str = "plugin:context-care:state";

impl RestOutcome {
    /// The id written to the notice's `contextCareTrace.outcome`.
    pub fn id(self) -> &'static str {
        match self {
            RestOutcome::AlreadyReduced => "already-reduced",
            RestOutcome::DeepNothingToClear => "deep-nothing-to-clear",
            RestOutcome::DeepDone => "deep-done",
            RestOutcome::NoProvider => "no-provider",
            RestOutcome::NoProposal => "no-proposal",
            RestOutcome::MemoHit => "memo-hit",
            RestOutcome::Committed => "committed",
            RestOutcome::Error => "error",
        }
    }

    /// The outcome line in a locale's catalog.
    pub fn line(self, texts: &RestTexts) -> &'static str {
        match self {
            RestOutcome::AlreadyReduced => texts.outcome_already_reduced,
            RestOutcome::DeepNothingToClear => texts.outcome_deep_nothing_to_clear,
            RestOutcome::DeepDone => texts.outcome_deep_done,
            RestOutcome::NoProvider => texts.outcome_no_provider,
            RestOutcome::NoProposal => texts.outcome_no_proposal,
            RestOutcome::MemoHit => texts.outcome_memo_hit,
            RestOutcome::Committed => texts.outcome_committed,
            RestOutcome::Error => texts.outcome_error,
        }
    }
}

impl AutoBand {
    /// The id written to the notice's `contextCareTrace.outcome`.
    pub fn id(self) -> &'static str {
        match self {
            AutoBand::WithinTarget => "auto-within-target",
            AutoBand::AboveTarget => "auto-above-target",
            AutoBand::AboveHard => "auto-above-hard",
        }
    }

    /// The outcome line in a locale's catalog.
    pub fn line(self, texts: &AutoTexts) -> &'static str {
        match self {
            AutoBand::WithinTarget => texts.within_target,
            AutoBand::AboveTarget => texts.above_target,
            AutoBand::AboveHard => texts.above_hard,
        }
    }
}

/// Records the surface's replace generation before the inner pre-step participants
/// run (CC-BND-1 step 1), so the boundary can tell whether they reduced the history.
pub(crate) struct GenerationMark {
    pub(crate) care: Arc<Care>,
}

impl PreStepHook for GenerationMark {
    fn call<'a>(
        &'a self,
        context: &'a HookContext,
        input: PreStepInput,
        next: PreStepNext<'a>,
    ) -> BoxFuture<'a, Result<PreStepDecision, HookError>> {
        Box::pin(async move {
            self.care
                .ensure_session(&context.session)
                .await
                .map_err(hook_error)?;
            let generation = context
                .session
                .with_log(ccare_session::SessionLog::replace_generation);
            self.care.with_session(context.session.id(), |state| {
                state.generation_at_boundary = Some(generation);
            });
            next.run(input).await
        })
    }
}

/// The boundary contributor; registered last, so it prices every notice before it.
pub(crate) struct Boundary {
    pub(crate) care: Arc<Care>,
}

fn first_text(message: &Message) -> Option<&str> {
    message.content.iter().find_map(|block| match block {
        ContentBlock::Text(text) => Some(text.text.as_str()),
        ContentBlock::Reasoning(_)
        | ContentBlock::ToolCall(_)
        | ContentBlock::ToolResult(_)
        | ContentBlock::Image(_)
        | ContentBlock::Unknown(_) => None,
    })
}

fn plugin_kind(message: &Message) -> Option<&str> {
    match &message.source {
        Some(Source::Plugin(plugin)) => Some(plugin.kind.as_str()),
        _ => None,
    }
}

/// Whether a queued rest asks for a deep rest (`contextRest.deep`).
fn is_deep(message: &Message) -> bool {
    match &message.source {
        Some(Source::Plugin(plugin)) => {
            plugin
                .extra
                .get("contextRest")
                .and_then(|rest| rest.get("deep"))
                == Some(&Value::Bool(true))
        }
        _ => false,
    }
}

/// The status notice message (CC-NTC-1).
fn notice(text: &str, metrics: &ContextCareMetrics, trace: Value) -> Message {
    let mut extra = Extra::new();
    extra.insert(
        "contextCare".to_owned(),
        json!({
            "fatigueValue": metrics.fatigue_value,
            "wakefulnessValue": metrics.wakefulness_value,
        }),
    );
    extra.insert("contextCareTrace".to_owned(), trace);
    let mut message = Message::from_blocks(vec![ContentBlock::text(text)]);
    message.source = Some(Source::Plugin(Box::new(PluginSource {
        kind: STATE_SOURCE.to_owned(),
        plugin: Some("context-care".to_owned()),
        form: Some("notice".to_owned()),
        summary: Some("Context state".to_owned()),
        sections: None,
        extra,
    })));
    message
}

fn hook_error(error: impl std::fmt::Display) -> HookError {
    HookError::new(error.to_string())
}

impl Boundary {
    pub(crate) async fn run(
        &self,
        context: &BoundaryContext<'_>,
    ) -> Result<BoundaryContribution, HookError> {
        let care = &self.care;
        let session = &context.hook.session;
        let id = session.id();
        care.ensure_session(session).await.map_err(hook_error)?;
        let rest_index = context
            .entered
            .iter()
            .position(|message| plugin_kind(message) == Some(REQUEST_SOURCE));
        let rest = rest_index.and_then(|index| context.entered.get(index));
        let generation_at_start = care.with_session(id, |state| {
            if rest.is_some() {
                state.rest_pending = false;
            }
            state.generation_at_boundary.take()
        });
        // CC-BND-1 steps 2-4: flush the journal, freeze pricing, sample.
        let frozen = care.freeze(id).await.map_err(hook_error)?;
        // CC-MET-4: the pending batch and the request-only segments (promptCost) count
        // in the load, not in what is retained.
        let batch: Vec<Message> = context
            .entered
            .iter()
            .chain(context.request_only.iter())
            .cloned()
            .collect();
        let measure = |batch: &[Message], extra: Option<&Message>| {
            care.measure_live(&frozen, session, batch.iter().chain(extra))
                .map_err(hook_error)
        };
        let measured = measure(&batch, None)?;
        let maintenance = crate::maintenance::Context {
            session,
            batch: &batch,
            turn: Some(context.hook.turn),
            cancel: context.hook.cancel.clone(),
            now_ms: context.hook.clock.now_ms(),
        };
        let mut withdraw = Vec::new();
        // The rest's outcome, then the automatic band; both when a rest falls through.
        let mut outcomes: Vec<(&'static str, &'static str)> = Vec::new();
        let rest_texts_ = rest_texts(care.locale);
        // CC-BND-1 step 7: automatic maintenance while armed (CC-HYS-1, CC-MNT-6).
        let (maintenance_, frozen_) = (&maintenance, &frozen);
        let automatic = |measured: Measured| async move {
            let armed = care.with_session(id, |state| {
                state
                    .controller
                    .observe_budget(measured.load, measured.budget.as_ref())
                    .is_armed()
            });
            if !armed {
                return (measured, None);
            }
            let (passes, after) = care.automatic(maintenance_, frozen_, measured).await;
            // The band it ended in, as an outcome (CC-BND-2 "Auto", CC-DEF-3).
            let band = (passes > 0)
                .then_some(after.budget.as_ref())
                .flatten()
                .map(|budget| AutoBand::of(after.load, budget))
                .map(|band| (band.id(), band.line(auto_texts(care.locale))));
            (after, band)
        };
        let measured = if let Some(rest) = rest {
            // A requested rest (CC-BND-1 step 8); the automatic loop does not run, except
            // as the fall-through below.
            let deep = is_deep(rest);
            let reduced_here = generation_at_start.is_some_and(|start| {
                start != session.with_log(ccare_session::SessionLog::replace_generation)
            });
            let (result, leaves) = if care.summary_model.is_none() && !deep {
                (RestOutcome::NoProvider, false)
            } else {
                care.requested(&maintenance, &frozen, rest, deep, reduced_here, &measured)
                    .await
            };
            if leaves && let Some(index) = rest_index {
                withdraw.push(index);
            }
            outcomes.push((result.id(), result.line(rest_texts_)));
            let remaining: Vec<Message> = batch
                .iter()
                .enumerate()
                .filter(|(index, _)| !(leaves && Some(*index) == rest_index))
                .map(|(_, message)| message.clone())
                .collect();
            let after_rest = measure(&remaining, None)?;
            // CC-DEF-6: a rest that did nothing (R4-R6) while the request is over H
            // falls through to the automatic loop, and both outcomes are reported.
            let over_hard =
                assess(after_rest.load, after_rest.budget.as_ref()).phase == BudgetPhase::Hard;
            if over_hard
                && matches!(
                    result,
                    RestOutcome::NoProvider | RestOutcome::NoProposal | RestOutcome::MemoHit
                )
            {
                let (after, band) = automatic(after_rest).await;
                outcomes.extend(band);
                after
            } else {
                after_rest
            }
        } else if measured.budget.is_some() {
            let (after, band) = automatic(measured).await;
            outcomes.extend(band);
            after
        } else {
            care.with_session(id, |state| {
                state.controller.observe_budget(measured.load, None);
            });
            measured
        };
        let armed = care.with_session(id, |state| state.controller.is_armed());
        let kept: Vec<Message> = batch
            .iter()
            .enumerate()
            .filter(|(index, _)| !withdraw.contains(index))
            .map(|(_, message)| message.clone())
            .collect();
        let outcome_lines = outcomes
            .iter()
            .map(|(_, line)| *line)
            .collect::<Vec<_>>()
            .join("\n");
        // R8: after an error on the requested path the state is unknown (CC-BND-2): the
        // notice shows no measured level and carries no number.
        let state_unknown = outcomes.first().map(|(id, _)| *id) == Some(RestOutcome::Error.id());
        let parts = StatusParts {
            report: rest.is_some() || care.enabled(id, "state", "report"),
            advice: care.enabled(id, "state", "advice"),
            outcome: (!outcomes.is_empty()).then_some(outcome_lines.as_str()),
            state_unknown,
        };
        let shown = |metrics: &ContextCareMetrics| {
            if state_unknown {
                ContextCareMetrics::UNKNOWN
            } else {
                *metrics
            }
        };
        let trace = |measured: &Measured| {
            let mut trace = json!({
                "trigger": if rest.is_some() { "rest-result" } else { "budget-state" },
                "budget": assess(measured.load, measured.budget.as_ref()),
                "outcome": outcomes.first().map(|(id, _)| *id),
            });
            if let (Some(object), Some((fallthrough, _))) = (trace.as_object_mut(), outcomes.get(1))
            {
                object.insert("automaticOutcome".to_owned(), json!(fallthrough));
            }
            trace
        };
        // Quiet start (`quiet.rs`): at a calm start there is no notice to price.
        let acted = rest.is_some() || !outcomes.is_empty();
        let quiet = care
            .quiet_start(session, &measured.metrics, acted)
            .await
            .map_err(hook_error)?;
        // Price the exact notice (CC-NTC-2, CC-DEF-4): sample without it, then with it;
        // the second text is what the model sees.
        let first = if quiet {
            String::new()
        } else {
            render_status(care.locale, &measured.metrics, parts)
        };
        let (text, measured) = if first.is_empty() {
            (first, measured)
        } else {
            let draft = notice(&first, &shown(&measured.metrics), trace(&measured));
            let with_notice = measure(&kept, Some(&draft))?;
            (
                render_status(care.locale, &with_notice.metrics, parts),
                with_notice,
            )
        };
        care.samples.set(
            id,
            UiSample {
                metrics: measured.metrics,
                at: context.hook.clock.now_ms(),
                armed,
            },
        );
        let last = care.latest_notice(session, |notice| {
            notice
                .and_then(|derived| first_text(&derived.message))
                .map(str::to_owned)
        });
        let notices = if text.is_empty()
            || (rest.is_none() && outcomes.is_empty() && last.as_deref() == Some(text.as_str()))
        {
            Vec::new()
        } else {
            vec![notice(&text, &shown(&measured.metrics), trace(&measured))]
        };
        Ok(BoundaryContribution { notices, withdraw })
    }
}

impl BoundaryContributor for Boundary {
    fn contribute<'a>(
        &'a self,
        context: &'a BoundaryContext<'a>,
    ) -> BoxFuture<'a, Result<BoundaryContribution, HookError>> {
        Box::pin(async move { self.run(context).await })
    }
}
