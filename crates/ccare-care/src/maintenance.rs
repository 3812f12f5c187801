//! Maintenance at the boundary (CC-MNT-1, CC-MNT-5, CC-MNT-6, CC-DEEP-2, CC-BND-2,
//! CC-DEF-2): tool-result pruning, the automatic summary passes while the session's
//! controller is armed, a requested rest (summary or deep), the no-useful-range memo,
//! and the maintenance records of the journal (CC-JNL-3).
//!
//! Errors of automatic maintenance never fail the user's turn: they are logged and
//! journaled, the history keeps what was committed, and the request gate and overflow
//! recovery remain the safety nets (CC-DEF-2).

use ccare_core::kinds::{
    CompactionEnd, CompactionPrune, CompactionStart, CompactionSummary, PrunedResult, ToolResult,
    UserMessage,
};
use ccare_core::{ContentBlock, EventDraft, Message, Source, SurfaceOp};
use ccare_llm::CancellationToken;
use ccare_session::Session;
use serde_json::{Value, json};

use crate::budget::Budget;
use crate::care::{Care, Frozen, Measured};
use crate::journal::JournalEntry;
use crate::range::{Proposal, RangeNode, RankInput, SeqRange, propose};
use crate::range_nodes::{deep_clear_range, nodes};
use crate::summary::{Committed, SummaryFailure, SummaryRun};

/// A tool result longer than this many code points is pruned (CC-MNT-1).
pub const PRUNE_ABOVE_CHARS: usize = 8192;
/// What a pruned result keeps of its start, in code points.
pub const PRUNE_KEEP_HEAD: usize = 4096;
/// What a pruned result keeps of its end, in code points.
pub const PRUNE_KEEP_TAIL: usize = 1024;

/// How many ranked candidates a maintenance record keeps (CC-JNL-3 `comparisons`).
pub const JOURNALED_COMPARISONS: usize = 20;

/// What a requested rest came to (CC-BND-2).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RestOutcome {
    /// R1: the history was already reduced at this boundary.
    AlreadyReduced,
    /// R2: a deep rest with nothing clearable beyond the system head.
    DeepNothingToClear,
    /// R3: the deep rest replaced the clearable history.
    DeepDone,
    /// R4: no summary provider.
    NoProvider,
    /// R5: no range worth summarizing outside the retained recent part.
    NoProposal,
    /// R6: the selection was already found not reducible.
    MemoHit,
    /// R7: earlier history was summarized.
    Committed,
    /// R8: the requested path failed.
    Error,
}

/// The band automatic maintenance ended in (CC-BND-2 "Auto", CC-DEF-3).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AutoBand {
    /// Below the release target `L`.
    WithinTarget,
    /// At or above `L`, within `H`.
    AboveTarget,
    /// Above `H`.
    AboveHard,
}

impl AutoBand {
    /// The band of a load against a budget.
    pub fn of(load: u64, budget: &Budget) -> Self {
        let load = i64::try_from(load).unwrap_or(i64::MAX);
        if load < budget.release_target {
            AutoBand::WithinTarget
        } else if load <= budget.hard_input {
            AutoBand::AboveTarget
        } else {
            AutoBand::AboveHard
        }
    }
}

/// What the caller of a maintenance action provides.
pub(crate) struct Context<'a> {
    pub(crate) session: &'a Session,
    /// The pending batch and request-only messages of the conversation request.
    pub(crate) batch: &'a [Message],
    pub(crate) turn: Option<u32>,
    pub(crate) cancel: CancellationToken,
    pub(crate) now_ms: i64,
}

fn error_value(failure: &SummaryFailure) -> Value {
    json!({"code": failure.code, "message": failure.message})
}

impl Care {
    fn retain_for(&self, budget: Option<&Budget>) -> u64 {
        budget
            .map(|budget| u64::try_from(budget.tail).unwrap_or(0))
            .or(self.config.retain_tokens)
            .unwrap_or(0)
    }

    fn rank_input(&self, measured: &Measured, allow_fallback: bool) -> RankInput {
        RankInput {
            retain: self.retain_for(measured.budget.as_ref()),
            min_fresh_tokens: self.config.min_fresh_tokens,
            load: measured.load,
            release_target: measured.budget.as_ref().map_or(0, |budget| {
                u64::try_from(budget.release_target).unwrap_or(0)
            }),
            strategy: self.config.range_strategy,
            expected_checkpoint_tokens: self.config.expected_checkpoint_tokens,
            allow_fallback,
        }
    }

    /// CC-MNT-5 `proposalKey` of `range` ([`crate::memo`]); each message's part is
    /// computed once per seq and kept in the session's state.
    fn proposal_key(
        &self,
        session: &Session,
        nodes: &[RangeNode],
        range: SeqRange,
        frozen: &Frozen,
    ) -> String {
        let pricer = frozen.pricing.pricer(&frozen.meter).ok();
        let seqs: std::collections::HashSet<u64> = range.seqs(nodes).into_iter().collect();
        let view = session.derived_view();
        let selected: Vec<&ccare_session::DerivedMessage> = view
            .messages
            .iter()
            .filter(|derived| seqs.contains(&derived.seq))
            .filter(|derived| !crate::range_nodes::is_own(&derived.message))
            .collect();
        // Known parts under the session lock; new ones computed outside it (hashing a
        // long session's messages the first time takes milliseconds), then kept.
        let known: Vec<Option<crate::memo::MemoPart>> = self.with_session(session.id(), |state| {
            selected
                .iter()
                .map(|derived| state.memo_parts.get(&derived.seq).copied())
                .collect()
        });
        let parts: Vec<(u64, crate::memo::MemoPart)> = selected
            .iter()
            .zip(known)
            .map(|(derived, known)| {
                let part = known.unwrap_or_else(|| crate::memo::MemoPart {
                    digest: crate::memo::message_digest(&derived.message),
                    price: pricer
                        .as_ref()
                        .and_then(|pricer| pricer.message(&derived.message).ok()),
                });
                (derived.seq, part)
            })
            .collect();
        self.with_session(session.id(), |state| {
            state.memo_parts.extend(parts.iter().copied());
        });
        let route = self
            .route
            .as_deref()
            .map(|route| format!("{}/{}", route.provider, route.model));
        crate::memo::proposal_key(
            parts,
            &crate::memo::MemoPolicy {
                scale: frozen.pricing.text_scale().as_f64(),
                header: frozen.header_key.as_deref(),
                route: route.as_deref(),
                summary: &self.config.summary,
            },
        )
    }

    async fn memo_hit(&self, session: &Session, key: &str) -> bool {
        match self.journal.list(session.id()).await {
            Ok(entries) => entries.iter().any(|entry: &JournalEntry| {
                let action = entry.maintenance();
                action.phase == Some("no-useful-range") && action.proposal_key == Some(key)
            }),
            Err(_) => false,
        }
    }

    /// Waits for this session's turn in the maintenance queue (CC-SER-1). The wait ends
    /// with `ABORTED` when the caller cancels or the plugin is unmounted (the signal is
    /// any(caller, lifetime)); the guard keeps the queue until it is dropped.
    pub(crate) async fn enter_queue(
        &self,
        context: &Context<'_>,
    ) -> Result<tokio::sync::OwnedMutexGuard<()>, SummaryFailure> {
        let queue = self.with_session(context.session.id(), |state| {
            std::sync::Arc::clone(&state.queue)
        });
        let aborted = |message: &str| SummaryFailure {
            code: "ABORTED".to_owned(),
            message: message.to_owned(),
        };
        tokio::select! {
            guard = queue.lock_owned() => {
                if self.lifetime.is_cancelled() {
                    Err(aborted("context-care was unmounted"))
                } else {
                    Ok(guard)
                }
            }
            () = self.lifetime.cancelled() => Err(aborted("context-care was unmounted")),
            () = context.cancel.cancelled() => Err(aborted("the caller cancelled")),
        }
    }

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
        self.record(
            session,
            &operation_id,
            now_ms,
            json!({
                "operationId": operation_id,
                "action": "summary",
                "reason": reason,
                "phase": "failed",
                "outcome": "failed",
                "beforeSeq": session.head(),
                "sourceSeqs": [range.start, range.end],
                "error": {"code": "CONTROL_DISABLED", "message": format!("{control} is off")},
            }),
        )
        .await;
    }

    async fn record(&self, session: &Session, operation_id: &str, at: i64, data: Value) {
        if let Err(error) = self
            .journal
            .maintenance(session.id(), operation_id, at, data)
            .await
        {
            tracing::error!(session = %session.id(), %error, "context-care journal: maintenance not recorded");
        }
    }

    /// One summary over a proposal, journaled (CC-JNL-3) and memoized (CC-MNT-5).
    async fn summary_action(
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
            json!({
                "rule": proposal.candidate.rule.as_str(),
                // The best few only: a long session has thousands of candidates, and a
                // journal record must stay small.
                "comparisons": serde_json::to_value(
                    &proposal.comparisons[..proposal.comparisons.len().min(JOURNALED_COMPARISONS)]
                )
                .unwrap_or(Value::Null),
                "comparisonCount": proposal.comparisons.len(),
            }),
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
        let before_seq = context.session.head();
        let generation = || context.session.derived_view().replace_generation;
        let mut data = json!({
            "operationId": operation_id,
            "action": "summary",
            "beforeGeneration": generation(),
            "reason": reason,
            "phase": "started",
            "beforeSeq": before_seq,
            "sourceSeqs": range.seqs(nodes),
            "proposalKey": key,
            "selection": selection,
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
        if let Some(object) = data.as_object_mut() {
            if !repairs.is_empty() {
                object.insert("repairs".to_owned(), json!(repairs));
            }
            match &result {
                Ok(committed) => {
                    object.insert("phase".to_owned(), json!("committed"));
                    object.insert("outcome".to_owned(), json!("committed"));
                    object.insert("compactionId".to_owned(), json!(committed.compaction_id));
                    object.insert("beforeInput".to_owned(), json!(committed.before));
                    object.insert("afterInput".to_owned(), json!(committed.after));
                    object.insert("afterSeq".to_owned(), json!(context.session.head()));
                    object.insert("afterGeneration".to_owned(), json!(generation()));
                    object.insert(
                        "routeSaving".to_owned(),
                        json!(committed.before.saturating_sub(committed.after)),
                    );
                    object.insert(
                        "replacements".to_owned(),
                        json!([{
                            "newSeq": committed.checkpoint_seq,
                            "oldStartSeq": committed.shadowed.first(),
                            "oldEndSeq": committed.shadowed.last(),
                            "sourceSeqs": committed.shadowed,
                        }]),
                    );
                    object.insert("callId".to_owned(), json!(committed.call_id));
                    object.insert("usage".to_owned(), json!(committed.usage));
                    object.insert("coverage".to_owned(), committed.coverage.clone());
                    object.insert(
                        "heuristicSaving".to_owned(),
                        json!(committed.heuristic_saving),
                    );
                    if !committed.secondary_failures.is_empty() {
                        object.insert(
                            "secondaryFailures".to_owned(),
                            Value::Array(
                                committed
                                    .secondary_failures
                                    .iter()
                                    .map(error_value)
                                    .collect(),
                            ),
                        );
                    }
                }
                Err(failure) => {
                    let phase = if failure.is_no_useful_range() {
                        "no-useful-range"
                    } else {
                        "failed"
                    };
                    object.insert("phase".to_owned(), json!(phase));
                    object.insert("outcome".to_owned(), json!("failed"));
                    object.insert("error".to_owned(), error_value(failure));
                    object.insert("afterSeq".to_owned(), json!(context.session.head()));
                    object.insert("afterGeneration".to_owned(), json!(generation()));
                }
            }
        }
        self.record(context.session, &operation_id, context.now_ms, data)
            .await;
        result
    }

    /// Tool-result pruning (CC-MNT-1): every live result longer than
    /// [`PRUNE_ABOVE_CHARS`] code points, except the results the model has not seen
    /// yet (those after the latest assistant message), keeps its head and tail around
    /// a marker line. Returns how many results were pruned.
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
        // Positions, not seqs: a replaced node carries a newer seq than those after it.
        let last_assistant = view
            .messages
            .iter()
            .rposition(|derived| derived.role == ccare_core::Role::Assistant)
            .unwrap_or(0);
        let events: Vec<(u64, ToolResult)> = view
            .messages
            .iter()
            .take(last_assistant)
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
        let mut pruned = 0;
        let operation_id = uuid::Uuid::now_v7().to_string();
        let before_seq = session.head();
        let mut replacements = Vec::new();
        for (seq, result) in events {
            let Some(pruned_message) = pruned_result(self.locale, &result.message) else {
                continue;
            };
            let before_tokens = pricer
                .message(&result.message)
                .map_or(0, |price| price.text);
            let after_tokens = pricer
                .message(&pruned_message)
                .map_or(0, |price| price.text);
            let Ok(marker) = EventDraft::typed(&CompactionPrune {
                pruned: vec![PrunedResult {
                    seq,
                    before_tokens,
                    after_tokens,
                }],
            }) else {
                break;
            };
            let Ok(marker) = session.append(marker) else {
                break;
            };
            let replacement = ToolResult {
                message: pruned_message,
                ..result
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
                    replacements.push(json!({"newSeq": event.seq(), "oldStartSeq": seq, "oldEndSeq": seq, "sourceSeqs": [seq]}));
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
            self.record(
                session,
                &operation_id,
                context.now_ms,
                json!({
                    "operationId": operation_id,
                    "action": "prune",
                    "reason": reason,
                    "phase": "completed",
                    "outcome": "committed",
                    "beforeSeq": before_seq,
                    "afterSeq": session.head(),
                    "replacements": replacements,
                }),
            )
            .await;
        }
        pruned
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
        let remeasure = |care: &Care| {
            let view = session.derived_view();
            care.measure(
                frozen,
                view.messages.iter().map(|derived| &*derived.message),
                context.batch.iter(),
            )
        };
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
        let limit = self.config.max_passes.unwrap_or(2);
        let mut passes = 0u32;
        while self.with_session(id, |state| state.controller.is_armed())
            && u64::from(passes) < limit
            && self.llm.is_some()
            && self.summary_model.is_some()
        {
            let view = session.derived_view();
            let Ok(nodes) = nodes(&view, frozen) else {
                break;
            };
            if !self.enabled(id, "maintenance", "summary") {
                // CC-SUM-1 / A29: the gate is at execution; a summary that would have
                // run is journaled as CONTROL_DISABLED, and nothing runs.
                if let Ok(Some(proposal)) = propose(&nodes, &self.rank_input(&measured, true)) {
                    self.journal_control_disabled(
                        session,
                        "automatic",
                        proposal.candidate.range(),
                        "maintenance.summary",
                        context.now_ms,
                    )
                    .await;
                }
                break;
            }
            let proposal = match propose(&nodes, &self.rank_input(&measured, true)) {
                Ok(Some(proposal)) => proposal,
                Ok(None) => break,
                Err(error) => {
                    tracing::warn!(session = %id, %error, "no maintenance proposal");
                    break;
                }
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
        if !deep && reduced_here {
            return (RestOutcome::AlreadyReduced, false);
        }
        let view = context.session.derived_view();
        let Ok(nodes) = nodes(&view, frozen) else {
            return (RestOutcome::Error, false);
        };
        if deep {
            return match deep_clear_range(&nodes) {
                None => (RestOutcome::DeepNothingToClear, false),
                Some(clear) => match self
                    .deep_rest(context, frozen, &nodes, &clear.shadowed_seqs, rest)
                    .await
                {
                    Ok(()) => (RestOutcome::DeepDone, true),
                    Err(failure) => {
                        tracing::warn!(session = %context.session.id(), %failure, "deep rest not performed");
                        (RestOutcome::Error, false)
                    }
                },
            };
        }
        // R4: no summary route resolves (CC-SUM-1, `crate::route`).
        if self.summary_model.is_none() || self.llm.is_none() {
            return (RestOutcome::NoProvider, false);
        }
        let proposal = match propose(&nodes, &self.rank_input(measured, false)) {
            Ok(Some(proposal)) => proposal,
            Ok(None) => return (RestOutcome::NoProposal, false),
            Err(_) => return (RestOutcome::Error, false),
        };
        let key = self.proposal_key(context.session, &nodes, proposal.candidate.range(), frozen);
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
        self.record(
            session,
            operation_id,
            context.now_ms,
            json!({
                "operationId": operation_id,
                "action": "deep-rest",
                "reason": "requested",
                "phase": "failed",
                "outcome": "failed",
                "beforeSeq": session.head(),
                "afterSeq": session.head(),
                "sourceSeqs": shadowed,
                "error": error_value(&error),
            }),
        )
        .await;
        Err(error)
    }

    /// CC-DEEP-2: the handoff (the rest message's text) replaces the clearable history
    /// without a model call, only if it is smaller.
    async fn deep_rest(
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
        if session.with_log(|log| log.state().open_compaction.is_some()) {
            let error = failure("COMPACTION_BUSY", "a compaction is still open");
            return self
                .deep_refused(context, &operation_id, shadowed, error)
                .await;
        }
        let shadowed_set: std::collections::HashSet<u64> = shadowed.iter().copied().collect();
        let live: Vec<u64> = session
            .derived_view()
            .messages
            .iter()
            .map(|derived| derived.seq)
            .filter(|seq| shadowed_set.contains(seq))
            .collect();
        if live != shadowed {
            let error = failure(
                "HANDOFF_SOURCE_CHANGED",
                "handoff source changed; history retained",
            );
            return self
                .deep_refused(context, &operation_id, shadowed, error)
                .await;
        }
        let (Some(&start_seq), Some(&end_seq)) = (shadowed.first(), shadowed.last()) else {
            let error = failure("NOTHING_TO_CLEAR", "nothing to clear");
            return self
                .deep_refused(context, &operation_id, shadowed, error)
                .await;
        };
        let compaction_id = uuid::Uuid::now_v7().to_string();
        let handoff = rest.joined_text("\n");
        let mut blocks = vec![ContentBlock::text(handoff.clone())];
        if let Some(ledger) = ledger {
            blocks.push(ContentBlock::text(ledger));
        }
        let mut replacement = Message::from_blocks(blocks);
        replacement.source = Some(Source::CompactCheckpoint {
            compaction_id: compaction_id.clone(),
            producer: "context-care".to_owned(),
            trace: Some(Box::new(
                json!({"trigger": "deep-rest", "operationId": operation_id}),
            )),
            extra: ccare_core::Extra::new(),
        });
        let pricer = frozen
            .pricing
            .pricer(&frozen.meter)
            .map_err(|error| failure("PRICING_FAILED", &error.to_string()))?;
        let replacement_tokens = pricer
            .message(&replacement)
            .map(|price| price.ceil(pricer.text_scale()))
            .map_err(|error| failure("PRICING_FAILED", &error.to_string()))?;
        let selected: u64 = nodes
            .iter()
            .filter(|node| shadowed_set.contains(&node.seq))
            .map(|node| node.tokens)
            .sum();
        // `shadowedTokenCount` is the meter's (unscaled) sum (CC-DEEP-2).
        let heuristic: u64 = session
            .derived_view()
            .messages
            .iter()
            .filter(|derived| shadowed_set.contains(&derived.seq))
            .filter_map(|derived| pricer.message(&derived.message).ok())
            .map(|price| price.text + price.visual)
            .sum();
        let before_seq = session.head();
        let mut data = json!({
            "operationId": operation_id,
            "action": "deep-rest",
            "reason": "requested",
            "beforeSeq": before_seq,
            "sourceSeqs": shadowed,
            "beforeInput": selected,
            "afterInput": replacement_tokens,
        });
        if replacement_tokens >= selected {
            let error = failure(
                "HANDOFF_LARGER_THAN_HISTORY",
                "handoff-larger-than-history; history retained",
            );
            if let Some(object) = data.as_object_mut() {
                object.insert("phase".to_owned(), json!("failed"));
                object.insert("outcome".to_owned(), json!("failed"));
                object.insert("error".to_owned(), error_value(&error));
            }
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
                    summary: handoff.clone(),
                    raw_output: None,
                    usage: None,
                    provider: route.map_or_else(String::new, |route| route.provider.clone()),
                    model: route.map_or_else(String::new, |route| route.model.clone()),
                    max_tokens: None,
                    llm_stream_call: false,
                    call_id: None,
                    shadowed_range: [start_seq, end_seq],
                    shadowed_seqs: shadowed.to_vec(),
                    shadowed_tokens: heuristic,
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
                    message: replacement,
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
            Ok(checkpoint) => {
                if let Some(object) = data.as_object_mut() {
                    object.insert("phase".to_owned(), json!("committed"));
                    object.insert("outcome".to_owned(), json!("committed"));
                    object.insert("compactionId".to_owned(), json!(compaction_id));
                    object.insert("afterSeq".to_owned(), json!(session.head()));
                    object.insert(
                        "replacements".to_owned(),
                        json!([{"newSeq": checkpoint, "oldStartSeq": start_seq, "oldEndSeq": end_seq, "sourceSeqs": shadowed}]),
                    );
                }
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
                if let Some(object) = data.as_object_mut() {
                    object.insert("phase".to_owned(), json!("failed"));
                    object.insert("outcome".to_owned(), json!("failed"));
                    object.insert("error".to_owned(), error_value(&error));
                }
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

/// The pruned form of a tool-result message, or `None` when nothing in it is longer
/// than [`PRUNE_ABOVE_CHARS`] code points; the marker in `locale`.
pub fn pruned_result(locale: ccare_core::Locale, message: &Message) -> Option<Message> {
    let mut changed = false;
    let content = message
        .content
        .iter()
        .map(|block| match block {
            ContentBlock::ToolResult(result) => {
                let mut result = result.clone();
                result.content = result
                    .content
                    .iter()
                    .map(|inner| match inner {
                        ContentBlock::Text(text)
                            if text.text.chars().count() > PRUNE_ABOVE_CHARS =>
                        {
                            changed = true;
                            ContentBlock::text(prune_text(locale, &text.text))
                        }
                        other => other.clone(),
                    })
                    .collect();
                ContentBlock::ToolResult(result)
            }
            other => other.clone(),
        })
        .collect();
    changed.then(|| Message {
        content,
        ..message.clone()
    })
}

/// Keeps the first [`PRUNE_KEEP_HEAD`] and last [`PRUNE_KEEP_TAIL`] code points of
/// `text` around a line, in `locale`, saying how much was pruned.
pub fn prune_text(locale: ccare_core::Locale, text: &str) -> String {
    let chars: Vec<char> = text.chars().collect();
    let head: String = chars.iter().take(PRUNE_KEEP_HEAD).collect();
    let tail: String = chars
        .iter()
        .skip(chars.len().saturating_sub(PRUNE_KEEP_TAIL))
        .collect();
    let removed = chars
        .len()
        .saturating_sub(PRUNE_KEEP_HEAD + PRUNE_KEEP_TAIL);
    let marker = crate::texts::maintenance_texts(locale)
        .prune_marker
        .replace("{n}", &removed.to_string());
    format!("{head}\n{marker}\n{tail}")
}

#[cfg(test)]
#[path = "maintenance_tests.rs"]
mod tests;
