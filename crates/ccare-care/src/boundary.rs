//! The step boundary (CC-BND-1, CC-BND-2, CC-NTC-1, CC-NTC-2, CC-HYS-1): after the
//! pre-step chain has fixed the batch, context-care flushes its journal, freezes the
//! session's pricing, samples the load, moves the session's hysteresis controller,
//! reports the outcome of a requested rest, and appends the status notice as the last
//! message of the batch when its model-visible text changed (or a rest was requested).
//!
//! What this build does not do yet (the maintenance issue): prune, summary passes and
//! deep rest. The controller is observed and kept per session, but no automatic pass
//! runs; a requested rest that would need compaction is answered with the
//! `executor-unavailable` outcome, which says plainly that nothing was done.

use std::sync::Arc;

use ccare_agent::{
    BoundaryContext, BoundaryContributor, BoxFuture, HookContext, HookError, PreStepDecision,
    PreStepHook, PreStepInput, PreStepNext,
};
use ccare_core::{ContentBlock, Extra, Message, PluginSource, Source};
use serde_json::{Value, json};

use crate::budget::assess;
use crate::care::{Care, Measured, UiSample};
use crate::metrics::ContextCareMetrics;
use crate::rest_tool::REQUEST_SOURCE;
use crate::texts::{RestTexts, StatusParts, render_status, rest_texts};

/// The source kind of status notices (CC-NTC-1).
pub const STATE_SOURCE: &str = "plugin:context-care:state";

/// What came of a requested rest at its boundary (CC-BND-2).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RestOutcome {
    /// R1: the history was already reduced at this boundary.
    AlreadyReduced,
    /// R2: a deep rest with nothing clearable beyond the system head.
    DeepNothingToClear,
    /// R4: no summary provider.
    NoProvider,
    /// R5: no range worth summarizing outside the retained recent part.
    NoProposal,
    /// R8: the requested path failed (e.g. the surface could not be measured).
    Error,
    /// A range exists, but this build cannot compact yet.
    ExecutorUnavailable,
}

impl RestOutcome {
    /// The id written to the notice's `contextCareTrace.outcome`.
    pub fn id(self) -> &'static str {
        match self {
            RestOutcome::AlreadyReduced => "already-reduced",
            RestOutcome::DeepNothingToClear => "deep-nothing-to-clear",
            RestOutcome::NoProvider => "no-provider",
            RestOutcome::NoProposal => "no-proposal",
            RestOutcome::Error => "error",
            RestOutcome::ExecutorUnavailable => "executor-unavailable",
        }
    }

    /// The outcome line in a locale's catalog.
    pub fn line(self, texts: &RestTexts) -> &'static str {
        match self {
            RestOutcome::AlreadyReduced => texts.outcome_already_reduced,
            RestOutcome::DeepNothingToClear => texts.outcome_deep_nothing_to_clear,
            RestOutcome::NoProvider => texts.outcome_no_provider,
            RestOutcome::NoProposal => texts.outcome_no_proposal,
            RestOutcome::Error => texts.outcome_error,
            RestOutcome::ExecutorUnavailable => texts.outcome_executor_unavailable,
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
            let generation = context.session.derived_view().replace_generation;
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
    async fn run(&self, context: &BoundaryContext<'_>) -> Result<Vec<Message>, HookError> {
        let care = &self.care;
        let session = &context.hook.session;
        let id = session.id();
        care.ensure_session(session).await.map_err(hook_error)?;
        let rest = context
            .entered
            .iter()
            .find(|message| plugin_kind(message) == Some(REQUEST_SOURCE));
        let generation_at_start = care.with_session(id, |state| {
            if rest.is_some() {
                state.rest_pending = false;
            }
            state.generation_at_boundary.take()
        });
        let frozen = care.freeze(id).await.map_err(hook_error)?;
        let view = session.derived_view();
        let surface = || view.messages.iter().map(|derived| &*derived.message);
        // CC-MET-4: the pending batch and the request-only segments (promptCost) count
        // in the load, not in what is retained.
        let batch = || context.entered.iter().chain(context.request_only.iter());
        let measured = care
            .measure(&frozen, surface(), batch())
            .map_err(hook_error)?;
        let armed = care.with_session(id, |state| {
            if rest.is_none() {
                // Automatic maintenance runs while the controller is armed (CC-HYS-1);
                // the passes themselves are the maintenance issue's.
                state
                    .controller
                    .observe_budget(measured.load, measured.budget.as_ref());
            }
            state.controller.is_armed()
        });
        let outcome = rest.map(|rest| {
            self.rest_outcome(
                rest,
                generation_at_start.is_some_and(|start| start != view.replace_generation),
                &view,
                &frozen,
                &measured,
            )
        });
        let texts = rest_texts(care.locale);
        let parts = StatusParts {
            report: rest.is_some() || care.enabled(id, "state", "report"),
            advice: care.enabled(id, "state", "advice"),
            outcome: outcome.map(|outcome| outcome.line(texts)),
        };
        let trace = |measured: &Measured| {
            json!({
                "trigger": if rest.is_some() { "rest-result" } else { "budget-state" },
                "budget": assess(measured.load, measured.budget.as_ref()),
                "outcome": outcome.map(RestOutcome::id),
            })
        };
        // Price the exact notice (CC-NTC-2, CC-DEF-4): sample without it, then with it;
        // the second text is what the model sees.
        let first = render_status(care.locale, &measured.metrics, parts);
        let (text, measured) = if first.is_empty() {
            (first, measured)
        } else {
            let draft = notice(&first, &measured.metrics, trace(&measured));
            let with_notice = care
                .measure(&frozen, surface(), batch().chain(std::iter::once(&draft)))
                .map_err(hook_error)?;
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
        let last = view
            .messages
            .iter()
            .rev()
            .find(|derived| plugin_kind(&derived.message) == Some(STATE_SOURCE))
            .and_then(|derived| first_text(&derived.message));
        if text.is_empty() || (rest.is_none() && last == Some(text.as_str())) {
            return Ok(Vec::new());
        }
        Ok(vec![notice(&text, &measured.metrics, trace(&measured))])
    }

    /// CC-BND-2 for the outcomes this build can reach without compacting.
    fn rest_outcome(
        &self,
        rest: &Message,
        reduced_here: bool,
        view: &ccare_session::DerivedView,
        frozen: &crate::care::Frozen,
        measured: &Measured,
    ) -> RestOutcome {
        let deep = is_deep(rest);
        if !deep && reduced_here {
            return RestOutcome::AlreadyReduced;
        }
        if self.care.route.is_none() {
            return RestOutcome::NoProvider;
        }
        let Ok(nodes) = crate::range_nodes::nodes(view, frozen) else {
            return RestOutcome::Error;
        };
        if deep {
            return match crate::range_nodes::deep_clear_range(&nodes) {
                None => RestOutcome::DeepNothingToClear,
                Some(_) => RestOutcome::ExecutorUnavailable,
            };
        }
        let config = &self.care.config;
        // CC-MNT-4 setup: retain = budget.tail ?? retainTokens ?? 0; no fallback for an
        // explicit rest (R5).
        let retain = measured
            .budget
            .as_ref()
            .map(|budget| u64::try_from(budget.tail).unwrap_or(0))
            .or(config.retain_tokens)
            .unwrap_or(0);
        let release_target = measured.budget.as_ref().map_or(0, |budget| {
            u64::try_from(budget.release_target).unwrap_or(0)
        });
        let proposal = crate::range::propose(
            &nodes,
            &crate::range::RankInput {
                retain,
                min_fresh_tokens: config.min_fresh_tokens,
                load: measured.load,
                release_target,
                strategy: config.range_strategy,
                expected_checkpoint_tokens: config.expected_checkpoint_tokens,
                allow_fallback: false,
            },
        );
        match proposal {
            Ok(None) => RestOutcome::NoProposal,
            Ok(Some(_)) => RestOutcome::ExecutorUnavailable,
            Err(_) => RestOutcome::Error,
        }
    }
}

impl BoundaryContributor for Boundary {
    fn contribute<'a>(
        &'a self,
        context: &'a BoundaryContext<'a>,
    ) -> BoxFuture<'a, Result<Vec<Message>, HookError>> {
        Box::pin(self.run(context))
    }
}
