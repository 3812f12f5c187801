//! The prune executor (CC-MNT-1): in the session's queue, reads the tool results the
//! planner may prune, follows [`plan_prune`], and writes each prune (a
//! `compaction/prune` marker, then the pruned result replacing the original) and the
//! action's record.

use ccare_core::kinds::{CompactionPrune, PrunedResult, ToolResult};
use ccare_core::{EventDraft, SurfaceOp};

use super::Context;
use super::plan::{plan_prune, prune_scope};
use super::records;
use crate::care::{Care, Frozen};

impl Care {
    /// Tool-result pruning (CC-MNT-1): every live result longer than
    /// [`super::PRUNE_ABOVE_CHARS`] code points, except the results the model has not
    /// seen yet (those after the latest assistant message), keeps its head and tail
    /// around a marker line. Returns how many results were pruned.
    pub(crate) async fn prune(
        &self,
        context: &Context<'_>,
        frozen: &Frozen,
        reason: &'static str,
    ) -> usize {
        let Ok(_queue) = self.enter_queue(context).await else {
            return 0;
        };
        let session = context.session;
        let view = session.derived_view();
        let results: Vec<(u64, ToolResult)> = prune_scope(&view)
            .iter()
            .filter_map(|derived| {
                let event = session.with_log(|log| log.event_at(derived.seq).cloned())?;
                if event.kind() != ccare_core::kinds::TOOL_RESULT {
                    return None;
                }
                event
                    .decode::<ToolResult>()
                    .ok()
                    .map(|result| (derived.seq, result))
            })
            .collect();
        let Ok(pricer) = frozen.pricing.pricer(&frozen.meter) else {
            return 0;
        };
        let steps = plan_prune(self.locale, results, &pricer);
        let mut pruned = 0;
        let operation_id = uuid::Uuid::now_v7().to_string();
        let before_seq = session.head();
        let mut replacements = Vec::new();
        for step in steps {
            let seq = step.seq;
            let Ok(marker) = EventDraft::typed(&CompactionPrune {
                pruned: vec![PrunedResult {
                    seq,
                    before_tokens: step.before_tokens,
                    after_tokens: step.after_tokens,
                }],
            }) else {
                break;
            };
            let Ok(marker) = session.append(marker) else {
                break;
            };
            let replacement = ToolResult {
                message: step.pruned,
                ..step.result
            };
            let Ok(draft) = EventDraft::typed(&replacement) else {
                break;
            };
            match session.append(
                draft
                    .with_surface(SurfaceOp::Replace {
                        start_seq: seq,
                        end_seq: seq,
                    })
                    .with_sources(vec![marker.seq(), seq]),
            ) {
                Ok(event) => {
                    pruned += 1;
                    replacements.push(records::prune_replacement(event.seq(), seq));
                }
                Err(error) => {
                    tracing::warn!(session = %session.id(), %error, "prune refused");
                    break;
                }
            }
        }
        if pruned > 0 {
            if let Err(error) = session.flush().await {
                tracing::error!(session = %session.id(), %error, "prune not durable");
            }
            let data = records::prune_completed(
                &operation_id,
                reason,
                before_seq,
                session.head(),
                replacements,
            );
            self.record(session, &operation_id, context.now_ms, data)
                .await;
        }
        pruned
    }
}
