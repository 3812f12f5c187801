//! The deep-rest executor (CC-DEEP-2): in the session's queue, checks the selection
//! ([`check_deep`]), builds the checkpoint ([`plan_deep`]) and, only if it is smaller
//! than the history it clears, writes the compaction (`compaction/start`, the
//! `compaction/summary` of the handoff, the replacing checkpoint, `compaction/end`)
//! without a model call; every outcome is journaled.

use ccare_core::kinds::{CompactionEnd, CompactionStart, CompactionSummary, UserMessage};
use ccare_core::{EventDraft, Message, SurfaceOp};

use super::Context;
use super::plan::{DeepInputs, check_deep, plan_deep};
use super::records::{self, DeepCommitted};
use crate::care::{Care, Frozen};
use crate::range::RangeNode;
use crate::summary::SummaryFailure;

impl Care {
    /// A deep rest refused before anything was written: journaled as a failed
    /// `deep-rest` (CC-DEEP-2 "audited as deep-rest, requested"), then returned.
    async fn deep_refused(
        &self,
        context: &Context<'_>,
        operation_id: &str,
        shadowed: &[u64],
        error: SummaryFailure,
    ) -> Result<(), SummaryFailure> {
        let session = context.session;
        let data = records::deep_refused(operation_id, session.head(), shadowed, &error);
        self.record(session, operation_id, context.now_ms, data)
            .await;
        Err(error)
    }

    /// CC-DEEP-2: the handoff (the rest message's text) replaces the clearable history
    /// without a model call, only if it is smaller.
    pub(super) async fn deep_rest(
        &self,
        context: &Context<'_>,
        frozen: &Frozen,
        nodes: &[RangeNode],
        shadowed: &[u64],
        rest: &Message,
    ) -> Result<(), SummaryFailure> {
        let _queue = self.enter_queue(context).await?;
        let session = context.session;
        // CC-DEEP-2 is synchronous from the checks to the last append: everything that
        // needs an await (the queue, the done-ledger) comes first.
        let ledger = self
            .ledger
            .current(session.id())
            .await
            .ok()
            .and_then(|items| crate::ledger::render_ledger(&items));
        let operation_id = uuid::Uuid::now_v7().to_string();
        let failure = |code: &str, message: &str| SummaryFailure {
            code: code.to_owned(),
            message: message.to_owned(),
        };
        let view = session.derived_view();
        let compaction_open = session.with_log(|log| log.state().open_compaction.is_some());
        let (start_seq, end_seq) = match check_deep(compaction_open, &view, shadowed) {
            Ok(span) => span,
            Err(error) => {
                return self
                    .deep_refused(context, &operation_id, shadowed, error)
                    .await;
            }
        };
        let compaction_id = uuid::Uuid::now_v7().to_string();
        let plan = plan_deep(DeepInputs {
            frozen,
            nodes,
            view: &view,
            shadowed,
            rest,
            ledger,
            compaction_id: &compaction_id,
            operation_id: &operation_id,
        })?;
        let before_seq = session.head();
        let mut data = records::deep_started(
            &operation_id,
            before_seq,
            shadowed,
            plan.selected,
            plan.replacement_tokens,
        );
        if plan.is_larger_than_history() {
            let error = failure(
                "HANDOFF_LARGER_THAN_HISTORY",
                "handoff-larger-than-history; history retained",
            );
            records::deep_failed(&mut data, &error);
            self.record(session, &operation_id, context.now_ms, data)
                .await;
            return Err(error);
        }
        let append = |draft: EventDraft| {
            session
                .append(draft)
                .map_err(|error| failure(error.code(), &error.to_string()))
        };
        let start = append(
            EventDraft::typed(&CompactionStart {
                compaction_id: compaction_id.clone(),
                turn: context.turn,
                trigger: "deep-rest".to_owned(),
            })
            .map_err(|error| failure("ENCODE_FAILED", &error.to_string()))?,
        )?;
        let route = self.route.as_deref();
        let committed = (|| {
            let summary = append(
                EventDraft::typed(&CompactionSummary {
                    compaction_id: compaction_id.clone(),
                    summary: plan.handoff.clone(),
                    raw_output: None,
                    usage: None,
                    provider: route.map_or_else(String::new, |route| route.provider.clone()),
                    model: route.map_or_else(String::new, |route| route.model.clone()),
                    max_tokens: None,
                    llm_stream_call: false,
                    call_id: None,
                    shadowed_range: [start_seq, end_seq],
                    shadowed_seqs: shadowed.to_vec(),
                    shadowed_tokens: plan.heuristic,
                    coverage: None,
                    repairs: None,
                    request_delta: None,
                })
                .map_err(|error| failure("ENCODE_FAILED", &error.to_string()))?,
            )?;
            let mut sources = vec![start.seq(), summary.seq()];
            sources.extend_from_slice(shadowed);
            let checkpoint = append(
                EventDraft::typed(&UserMessage {
                    message: plan.replacement,
                })
                .map_err(|error| failure("ENCODE_FAILED", &error.to_string()))?
                .with_surface(SurfaceOp::Replace { start_seq, end_seq })
                .with_sources(sources),
            )?;
            append(
                EventDraft::typed(&CompactionEnd {
                    compaction_id: compaction_id.clone(),
                    error: None,
                    repair: false,
                })
                .map_err(|error| failure("ENCODE_FAILED", &error.to_string()))?,
            )?;
            Ok::<u64, SummaryFailure>(checkpoint.seq())
        })();
        let outcome = match committed {
            Ok(checkpoint_seq) => {
                records::deep_committed(
                    &mut data,
                    DeepCommitted {
                        compaction_id: &compaction_id,
                        after_seq: session.head(),
                        checkpoint_seq,
                        start_seq,
                        end_seq,
                        shadowed,
                    },
                );
                Ok(())
            }
            Err(error) => {
                if let Ok(draft) = EventDraft::typed(&CompactionEnd {
                    compaction_id: compaction_id.clone(),
                    error: Some(error.code.clone()),
                    repair: false,
                }) {
                    let _ = session.append(draft);
                }
                records::deep_failed(&mut data, &error);
                Err(error)
            }
        };
        if let Err(error) = session.flush().await {
            tracing::error!(session = %session.id(), %error, "deep rest not durable");
        }
        self.record(session, &operation_id, context.now_ms, data)
            .await;
        outcome
    }
}
