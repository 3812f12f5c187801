//! The summary executor (CC-MNT-5, CC-MNT-6, CC-JNL-3): one journaled, memoized
//! summary over a range, and the automatic passes that run them while the session's
//! controller is armed, each pass as [`plan_pass`] decides.

use ccare_session::Session;
use serde_json::Value;

use super::Context;
use super::plan::{PassPlan, pass_allowed, plan_pass, rank_input};
use super::records::{self, SummaryStarted};
use crate::care::{Care, Frozen, Measured};
use crate::range::{Proposal, RangeNode, SeqRange};
use crate::summary::{Committed, SummaryFailure, SummaryRun};

impl Care {
    /// CC-SUM-1 / A29: a summary that would have run over `range` is refused at
    /// execution because `control` (`maintenance.summary` or `overflow.summary`) is off;
    /// journaled as `CONTROL_DISABLED` (CC-JNL-3), and nothing runs.
    pub(crate) async fn journal_control_disabled(
        &self,
        session: &Session,
        reason: &'static str,
        range: SeqRange,
        control: &str,
        now_ms: i64,
    ) {
        let operation_id = uuid::Uuid::now_v7().to_string();
        let data = records::control_disabled(&operation_id, reason, session.head(), range, control);
        self.record(session, &operation_id, now_ms, data).await;
    }

    /// One summary over a proposal, journaled (CC-JNL-3) and memoized (CC-MNT-5).
    pub(super) async fn summary_action(
        &self,
        context: &Context<'_>,
        frozen: &Frozen,
        nodes: &[RangeNode],
        proposal: &Proposal,
        reason: &'static str,
    ) -> Result<Committed, SummaryFailure> {
        self.summary_over(
            context,
            frozen,
            nodes,
            proposal.candidate.range(),
            proposal.summary_min_fresh_tokens,
            reason,
            records::summary_selection(proposal),
        )
        .await
    }

    /// One summary over `range`, journaled (CC-JNL-3) and memoized (CC-MNT-5).
    #[allow(clippy::too_many_arguments)]
    pub(crate) async fn summary_over(
        &self,
        context: &Context<'_>,
        frozen: &Frozen,
        nodes: &[RangeNode],
        range: SeqRange,
        min_fresh: u64,
        reason: &'static str,
        selection: Value,
    ) -> Result<Committed, SummaryFailure> {
        let _queue = self.enter_queue(context).await?;
        let operation_id = uuid::Uuid::now_v7().to_string();
        let key = self.proposal_key(context.session, nodes, range, frozen);
        let generation = || context.session.derived_view().replace_generation;
        let mut data = records::summary_started(SummaryStarted {
            operation_id: &operation_id,
            before_generation: generation(),
            reason,
            before_seq: context.session.head(),
            source_seqs: range.seqs(nodes),
            proposal_key: &key,
            selection,
        });
        self.record(context.session, &operation_id, context.now_ms, data.clone())
            .await;
        let run = SummaryRun {
            session: context.session,
            frozen,
            batch: context.batch,
            turn: context.turn,
            reason,
            operation_id: &operation_id,
            cancel: context.cancel.clone(),
            now_ms: context.now_ms,
        };
        let (result, repairs) = self
            .summarize_with_repairs(&run, nodes, range, min_fresh)
            .await;
        records::summary_settled(
            &mut data,
            &result,
            &repairs,
            context.session.head(),
            generation(),
        );
        self.record(context.session, &operation_id, context.now_ms, data)
            .await;
        result
    }

    /// Automatic maintenance while the session's controller is armed (CC-MNT-6):
    /// prune once, then summary passes up to the pass limit. Returns the passes run
    /// and the load after them; errors are journaled and end the loop (CC-DEF-2).
    pub(crate) async fn automatic(
        &self,
        context: &Context<'_>,
        frozen: &Frozen,
        mut measured: Measured,
    ) -> (u32, Measured) {
        let session = context.session;
        let id = session.id();
        let remeasure =
            |care: &Care| care.measure_view(frozen, &session.derived_view(), context.batch.iter());
        if self.enabled(id, "maintenance", "prune")
            && self.prune(context, frozen, "automatic").await > 0
        {
            if let Ok(next) = remeasure(self) {
                measured = next;
            }
            self.with_session(id, |state| {
                state
                    .controller
                    .observe_budget(measured.load, measured.budget.as_ref())
            });
        }
        let limit = self.config.pass_limit();
        let mut passes = 0u32;
        while pass_allowed(
            self.with_session(id, |state| state.controller.is_armed()),
            passes,
            limit,
            self.llm.is_some() && self.summary_model.is_some(),
        ) {
            let view = session.derived_view();
            // CC-SUM-1 / A29: the `maintenance.summary` gate is at execution.
            let summary_enabled = self.enabled(id, "maintenance", "summary");
            let rank = rank_input(&self.config, &measured, true);
            let (nodes, proposal) = match plan_pass(&view, frozen, summary_enabled, &rank) {
                PassPlan::Stop => break,
                PassPlan::NoProposal(error) => {
                    tracing::warn!(session = %id, %error, "no maintenance proposal");
                    break;
                }
                PassPlan::Disabled(range) => {
                    // A summary that would have run is journaled as CONTROL_DISABLED,
                    // and nothing runs.
                    self.journal_control_disabled(
                        session,
                        "automatic",
                        range,
                        "maintenance.summary",
                        context.now_ms,
                    )
                    .await;
                    break;
                }
                PassPlan::Summarize { nodes, proposal } => (nodes, proposal),
            };
            let key = self.proposal_key(session, &nodes, proposal.candidate.range(), frozen);
            if self.memo_hit(session, &key).await {
                break;
            }
            match self
                .summary_action(context, frozen, &nodes, &proposal, "automatic")
                .await
            {
                Ok(_) => passes += 1,
                Err(failure) => {
                    tracing::warn!(session = %id, %failure, "automatic summary failed; history kept");
                    break;
                }
            }
            match remeasure(self) {
                Ok(next) => measured = next,
                Err(_) => break,
            }
            self.with_session(id, |state| {
                state
                    .controller
                    .observe_budget(measured.load, measured.budget.as_ref())
            });
        }
        (passes, measured)
    }
}
