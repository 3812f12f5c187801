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
    let live: std::collections::HashSet<u64> = session
        .derived_view()
        .messages
        .iter()
        .map(|derived| derived.seq)
        .collect();
    let failed_sources: std::collections::HashSet<u64> =
        failed.source_seqs.iter().copied().collect();
    session.with_log(|log| {
        let sources_of = |seq: u64| -> Vec<u64> {
            log.event_at(seq)
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
                    if failed_sources.contains(&source) && !live.contains(&source) {
                        return true;
                    }
                    stack.extend(sources_of(source));
                }
                false
            })
    })
}

/// CC-OVF-3: whether a retry is justified, given (a) `replaced` (see
/// [`replaced_a_failed_source`]) and `current`, the price of the surface messages now
/// on the failed request's frozen basis. All of:
///
/// - (a) a failed source was replaced since the failure;
/// - (b) the history really got smaller: `current` is below the failed request's
///   surface price (a replacement that saves nothing would retry into the same wall);
/// - (c) after a local refusal (`REQUEST_BUDGET_EXCEEDED`), the rebuilt request's Q
///   (everything else the failed request carried plus `current`) is within the hard
///   input budget `H` it was refused against, so the retry is not refused again on
///   the spot. An unknown `H` cannot refuse, and a provider's refusal has no local `H`
///   to check: (b) is all the evidence there is.
///
/// Pure, so the spec's vectors can be checked without a session.
fn proof_holds(replaced: bool, current: u64, failed: &DispatchSnapshot, code: FailureCode) -> bool {
    let progressed = replaced && current < failed.surface_tokens;
    let fits = code != FailureCode::RequestBudgetExceeded
        || failed.hard_input.is_none_or(|hard| {
            i64::try_from(failed.other_tokens.saturating_add(current)).unwrap_or(i64::MAX) <= hard
        });
    progressed && fits
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
        if !matches!(
            failure.code,
            FailureCode::RequestBudgetExceeded | FailureCode::ContextWindowExceeded
        ) || context.cancel.is_cancelled()
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
        // CC-OVF-2: on the frozen dispatch pricing, as the failed request was priced.
        let frozen = &failed.frozen;
        let maintenance = Context {
            session,
            batch: &[],
            turn: Some(context.turn),
            cancel: context.cancel.clone(),
            now_ms: context.clock.now_ms(),
        };
        if care.enabled(id, "overflow", "prune") {
            care.prune(&maintenance, frozen, "overflow").await;
        }
        if care.llm.is_some() && care.summary_model.is_some() {
            let view = session.derived_view();
            if let Ok(nodes) = nodes(&view, frozen)
                && let Ok(Some(range)) = select_rest_range(&nodes, 0, 0)
            {
                if care.enabled(id, "overflow", "summary") {
                    // Errors are journaled by the action; the proof is still checked.
                    let _ = care
                        .summary_over(
                            &maintenance,
                            frozen,
                            &nodes,
                            range,
                            0,
                            "overflow",
                            Value::Null,
                        )
                        .await;
                } else {
                    // CC-SUM-1: refused at execution, journaled.
                    care.journal_control_disabled(
                        session,
                        "overflow",
                        range,
                        "overflow.summary",
                        maintenance.now_ms,
                    )
                    .await;
                }
            }
        }
        let view = session.derived_view();
        // The same measure as the gate's `surface_tokens`, on the frozen basis.
        let current = frozen
            .pricing
            .pricer(&frozen.meter)
            .and_then(|pricer| {
                frozen
                    .surface_total(&pricer, &view)
                    .map(|total| total.ceil(pricer.text_scale()))
            })
            .map_err(|error| crate::care::CareError::Pricing(error.to_string()))?;
        let replaced = replaced_a_failed_source(session, &failed);
        if proof_holds(replaced, current, &failed, failure.code)
            && care.enabled(id, "overflow", "retry")
        {
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

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use std::sync::Arc;

    use ccare_core::kinds::UserMessage;
    use ccare_core::{ContentBlock, EventDraft, Message, SurfaceOp, SystemClock};
    use ccare_session::{Registry, Session, Sessions, SessionsConfig};
    use ccare_store::{MemoryStore, Store};

    use super::*;

    async fn session() -> Session {
        let sessions = Sessions::new(
            Arc::new(MemoryStore::new()) as Arc<dyn Store>,
            Arc::new(SystemClock),
            Arc::new(Registry::with_host_defaults()),
            SessionsConfig::default(),
        );
        sessions.create(None, Default::default()).await.unwrap()
    }

    fn user(text: &str) -> EventDraft {
        EventDraft::typed(&UserMessage {
            message: Message::from_blocks(vec![ContentBlock::text(text)]),
        })
        .unwrap()
        .with_surface(SurfaceOp::Append)
    }

    fn replace(over: u64, sources: Vec<u64>) -> EventDraft {
        user("checkpoint")
            .with_surface(SurfaceOp::Replace {
                start_seq: over,
                end_seq: over,
            })
            .with_sources(sources)
    }

    /// The failed request of CC-OVF-3's vectors: sources [a, b], cost 100, built at the
    /// log revision given.
    fn failed(sources: Vec<u64>, log_revision: u64) -> DispatchSnapshot {
        let meter = ccare_meter::Meter::default();
        DispatchSnapshot {
            log_revision,
            source_seqs: sources,
            surface_tokens: 100,
            other_tokens: 0,
            hard_input: None,
            frozen: crate::care::Frozen {
                meter: meter.clone(),
                pricing: crate::pricing::FrozenPricing::capture(
                    &meter,
                    crate::pricing::PricingBasis::meter_estimate(&meter),
                    crate::pricing::ImagePricing::FixedEstimate,
                    crate::pricing::FileTexts::default(),
                ),
                tools_raw: 0,
                header_key: None,
                prices: None,
            },
        }
    }

    #[tokio::test]
    async fn cc_ovf_3_a_replace_after_the_failure_over_a_failed_source_is_progress() {
        let session = session().await;
        let a = session.append(user("one")).unwrap().seq();
        let b = session.append(user("two")).unwrap().seq();
        let revision = session.head();
        session.append(replace(a, vec![a])).unwrap();
        assert!(replaced_a_failed_source(
            &session,
            &failed(vec![a, b], revision)
        ));
    }

    #[tokio::test]
    async fn cc_ovf_3_a_replace_before_the_failure_is_not_progress() {
        let session = session().await;
        let a = session.append(user("one")).unwrap().seq();
        let b = session.append(user("two")).unwrap().seq();
        session.append(replace(a, vec![a])).unwrap();
        let revision = session.head();
        assert!(!replaced_a_failed_source(
            &session,
            &failed(vec![a, b], revision)
        ));
    }

    #[tokio::test]
    async fn cc_ovf_3_a_replace_over_other_sources_is_not_progress() {
        let session = session().await;
        let a = session.append(user("one")).unwrap().seq();
        let b = session.append(user("two")).unwrap().seq();
        let c = session.append(user("three")).unwrap().seq();
        let revision = session.head();
        session.append(replace(c, vec![c])).unwrap();
        assert!(!replaced_a_failed_source(
            &session,
            &failed(vec![a, b], revision)
        ));
    }

    #[tokio::test]
    async fn cc_ovf_3_an_ancestor_replace_covers_its_sources_recursively() {
        let session = session().await;
        let a = session.append(user("one")).unwrap().seq();
        let b = session.append(user("two")).unwrap().seq();
        // A first checkpoint over `a`, then one over that checkpoint after the failure.
        let first = session.append(replace(a, vec![a])).unwrap().seq();
        let revision = session.head();
        session.append(replace(first, vec![first])).unwrap();
        assert!(replaced_a_failed_source(
            &session,
            &failed(vec![a, b], revision)
        ));
    }

    /// CC-OVF-3's vector failure `{logRevision 10, sources [1,2], cost 100}`, carrying
    /// `other_tokens` besides its surface and refused against `hard_input`.
    fn vector_failure(other_tokens: u64, hard_input: Option<i64>) -> DispatchSnapshot {
        DispatchSnapshot {
            other_tokens,
            hard_input,
            ..failed(vec![1, 2], 10)
        }
    }

    /// Whether a retry is proved after `code`, with a failed source replaced (a) and
    /// the surface now priced at `current`.
    fn check(current: u64, failed: &DispatchSnapshot, code: FailureCode) -> bool {
        proof_holds(/*replaced*/ true, current, failed, code)
    }

    #[test]
    fn cc_ovf_3_b_a_replace_that_halves_the_cost_is_progress() {
        let failed = vector_failure(0, None);
        assert!(check(50, &failed, FailureCode::ContextWindowExceeded));
        assert!(check(99, &failed, FailureCode::ContextWindowExceeded));
    }

    #[test]
    fn cc_ovf_3_b_a_replace_that_saves_nothing_is_not_progress() {
        let failed = vector_failure(0, None);
        assert!(!check(100, &failed, FailureCode::ContextWindowExceeded));
        assert!(!check(150, &failed, FailureCode::ContextWindowExceeded));
        assert!(!check(100, &failed, FailureCode::RequestBudgetExceeded));
    }

    #[test]
    fn cc_ovf_3_a_a_smaller_history_without_a_replace_is_not_progress() {
        let failed = vector_failure(0, None);
        assert!(!proof_holds(
            /*replaced*/ false,
            50,
            &failed,
            FailureCode::ContextWindowExceeded
        ));
    }

    #[test]
    fn cc_ovf_3_c_a_budget_refusal_retries_when_the_rebuilt_q_is_within_h() {
        // Q = other 30 + current 50 = 80.
        let at_h = vector_failure(30, Some(80));
        assert!(check(50, &at_h, FailureCode::RequestBudgetExceeded));
        let below_h = vector_failure(30, Some(1_000));
        assert!(check(50, &below_h, FailureCode::RequestBudgetExceeded));
    }

    #[test]
    fn cc_ovf_3_c_a_budget_refusal_does_not_retry_when_the_rebuilt_q_exceeds_h() {
        // Q = 80 > H = 79, although the history shrank (b holds).
        let failed = vector_failure(30, Some(79));
        assert!(!check(50, &failed, FailureCode::RequestBudgetExceeded));
        // Everything else alone is over H.
        let others_over = vector_failure(200, Some(100));
        assert!(!check(1, &others_over, FailureCode::RequestBudgetExceeded));
    }

    #[test]
    fn cc_ovf_3_c_a_budget_refusal_with_unknown_h_retries() {
        let failed = vector_failure(30, None);
        assert!(check(50, &failed, FailureCode::RequestBudgetExceeded));
    }

    #[test]
    fn cc_ovf_3_c_only_applies_to_budget_refusals() {
        // A provider's refusal is not held to the local H: (b) is the proof.
        let failed = vector_failure(30, Some(79));
        assert!(check(50, &failed, FailureCode::ContextWindowExceeded));
    }

    #[test]
    fn cc_ovf_3_c_a_huge_q_saturates_instead_of_wrapping() {
        let failed = vector_failure(u64::MAX, Some(i64::MAX - 1));
        assert!(!check(50, &failed, FailureCode::RequestBudgetExceeded));
    }
}
