//! The requested-rest executor (CC-BND-2): follows [`plan_rest`], checking the memo
//! before a summary (R6), and hands a deep rest to the deep-rest executor.

use ccare_core::Message;

use super::plan::{RestInputs, RestPlan, plan_rest, rank_input};
use super::{Context, RestOutcome};
use crate::care::{Care, Frozen, Measured};

impl Care {
    /// A requested rest (CC-BND-2): a summary with no fallback, or a deep rest. Returns
    /// the outcome and whether the rest message leaves the batch (R3).
    pub(crate) async fn requested(
        &self,
        context: &Context<'_>,
        frozen: &Frozen,
        rest: &Message,
        deep: bool,
        reduced_here: bool,
        measured: &Measured,
    ) -> (RestOutcome, bool) {
        let view = context.session.derived_view();
        let plan = plan_rest(RestInputs {
            deep,
            reduced_here,
            view: &view,
            frozen,
            // R4: no summary route resolves (CC-SUM-1, `crate::route`).
            summary_route: self.summary_model.is_some() && self.llm.is_some(),
            rank: rank_input(&self.config, measured, false),
        });
        match plan {
            RestPlan::Outcome(outcome) => (outcome, false),
            RestPlan::Deep { nodes, shadowed } => {
                match self
                    .deep_rest(context, frozen, &nodes, &shadowed, rest)
                    .await
                {
                    Ok(()) => (RestOutcome::DeepDone, true),
                    Err(failure) => {
                        tracing::warn!(session = %context.session.id(), %failure, "deep rest not performed");
                        (RestOutcome::Error, false)
                    }
                }
            }
            RestPlan::Summary { nodes, proposal } => {
                let key =
                    self.proposal_key(context.session, &nodes, proposal.candidate.range(), frozen);
                if self.memo_hit(context.session, &key).await {
                    return (RestOutcome::MemoHit, false);
                }
                match self
                    .summary_action(context, frozen, &nodes, &proposal, "requested")
                    .await
                {
                    Ok(_) => (RestOutcome::Committed, false),
                    Err(_) => (RestOutcome::Error, false),
                }
            }
        }
    }
}
