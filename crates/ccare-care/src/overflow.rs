//! Overflow recovery (CC-OVF-1 .. CC-OVF-3): when a conversation request is refused for
//! its size (`CONTEXT_WINDOW_EXCEEDED` from the provider, `REQUEST_BUDGET_EXCEEDED`
//! from the gate), prune and summarize on the frozen dispatch pricing, then retry only
//! with proof that the history really got smaller; otherwise the original failure
//! stands. Retries are bounded by `max_overflow_retries` and reset on idle and on each
//! committed answer.

use std::sync::Arc;

use ccare_agent::{BoxFuture, HookContext, RequestErrorDecision, RequestErrorHook};
use ccare_core::{FailureCode, LlmFailure};
use ccare_session::Session;
use serde_json::Value;

use crate::care::{Care, DispatchSnapshot};
use crate::maintenance::Context;
use crate::range::select_rest_range;
use crate::range_nodes::nodes;

/// The request-error hook; one per mounted plugin.
pub(crate) struct OverflowRecovery {
    pub(crate) care: Arc<Care>,
}

/// CC-OVF-3 (a): a live replacement written since the failed request whose recursive
/// sources cover one of the failed request's sources that is no longer live.
pub(crate) fn replaced_a_failed_source(session: &Session, failed: &DispatchSnapshot) -> bool {
    let live: Vec<u64> = session
        .derived_view()
        .messages
        .iter()
        .map(|derived| derived.seq)
        .collect();
    session.with_log(|log| {
        let events = log.events();
        let sources_of = |seq: u64| -> Vec<u64> {
            usize::try_from(seq)
                .ok()
                .and_then(|index| events.get(index))
                .filter(|event| event.seq() == seq)
                .map(|event| event.source_event_seqs().to_vec())
                .unwrap_or_default()
        };
        live.iter()
            .filter(|seq| **seq >= failed.log_revision)
            .any(|seq| {
                // Expand the sources recursively (bounded by the log's size).
                let mut stack = sources_of(*seq);
                let mut seen = std::collections::HashSet::new();
                while let Some(source) = stack.pop() {
                    if !seen.insert(source) {
                        continue;
                    }
                    if failed.source_seqs.contains(&source) && !live.contains(&source) {
                        return true;
                    }
                    stack.extend(sources_of(source));
                }
                false
            })
    })
}

impl OverflowRecovery {
    async fn recover(
        &self,
        context: &HookContext,
        failure: &LlmFailure,
    ) -> Result<RequestErrorDecision, crate::care::CareError> {
        let care = &self.care;
        let session = &context.session;
        let id = session.id();
        let budget_exceeded = failure.code == FailureCode::RequestBudgetExceeded;
        if !(budget_exceeded || failure.code == FailureCode::ContextWindowExceeded)
            || context.cancel.is_cancelled()
        {
            return Ok(RequestErrorDecision::Pass);
        }
        let any_on = ["prune", "summary", "retry"]
            .iter()
            .any(|action| care.enabled(id, "overflow", action));
        // The snapshot is always released, whatever happens next.
        let Some(failed) = care.with_session(id, |state| state.last_dispatch.take()) else {
            return Ok(RequestErrorDecision::Pass);
        };
        if !any_on {
            return Ok(RequestErrorDecision::Pass);
        }
        let allowed = care.with_session(id, |state| {
            if state.overflow_retries < care.config.max_overflow_retries {
                state.overflow_retries += 1;
                true
            } else {
                false
            }
        });
        if !allowed {
            return Ok(RequestErrorDecision::Pass);
        }
        let frozen = care.freeze(id).await?;
        let maintenance = Context {
            session,
            batch: &[],
            turn: Some(context.turn),
            cancel: context.cancel.clone(),
            now_ms: context.clock.now_ms(),
        };
        if care.enabled(id, "overflow", "prune") {
            care.prune(&maintenance, &frozen, "overflow").await;
        }
        if care.llm.is_some() && care.route.is_some() && care.enabled(id, "overflow", "summary") {
            let view = session.derived_view();
            if let Ok(nodes) = nodes(&view, &frozen)
                && let Ok(Some(range)) = select_rest_range(&nodes, 0, 0)
            {
                // Errors are journaled by the action; the proof is still checked.
                let _ = care
                    .summary_over(
                        &maintenance,
                        &frozen,
                        &nodes,
                        range,
                        0,
                        "overflow",
                        Value::Null,
                    )
                    .await;
            }
        }
        let view = session.derived_view();
        // The same measure as the gate's `surface_tokens`, on the frozen basis.
        let current = frozen
            .pricing
            .pricer(&frozen.meter)
            .and_then(|pricer| {
                pricer.request(
                    None,
                    view.messages.iter().map(|derived| &*derived.message),
                    &Value::Null,
                )
            })
            .map(|price| price.q())
            .map_err(|error| crate::care::CareError::Pricing(error.to_string()))?;
        let progressed =
            replaced_a_failed_source(session, &failed) && current < failed.surface_tokens;
        let fits = !budget_exceeded
            || failed.hard_input.is_none_or(|hard| {
                i64::try_from(failed.other_tokens.saturating_add(current)).unwrap_or(i64::MAX)
                    <= hard
            });
        if progressed && fits && care.enabled(id, "overflow", "retry") {
            Ok(RequestErrorDecision::Retry)
        } else {
            Ok(RequestErrorDecision::Pass)
        }
    }
}

impl RequestErrorHook for OverflowRecovery {
    fn on_error<'a>(
        &'a self,
        context: &'a HookContext,
        failure: &'a LlmFailure,
        _attempt: u32,
    ) -> BoxFuture<'a, RequestErrorDecision> {
        Box::pin(async move {
            match self.recover(context, failure).await {
                Ok(decision) => decision,
                Err(error) => {
                    tracing::warn!(session = %context.session.id(), %error, "overflow recovery failed; the original failure stands");
                    RequestErrorDecision::Pass
                }
            }
        })
    }
}
