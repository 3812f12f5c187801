//! The summary transaction (CC-SUM-2 .. CC-SUM-6): earlier history is summarized by the
//! provider (purpose `compaction`) and replaced by a checkpoint, only if the complete
//! request gets cheaper on the frozen pricing basis.
//!
//! The log of one committed summary: `compaction/start`, `compaction/summary`, the
//! replacing `user/message` (surface `Replace` over the selected span, its sources
//! citing the start, the summary and every shadowed seq), `compaction/end`. Any error
//! after the start appends `compaction/end{error}` and leaves the history as it was.
//!
//! The summary request is one user message: a transcript of the selected messages
//! (tool calls and results as text, so no provider sees a tool history without its
//! tools) followed by the instruction. Each call is a side request of the host
//! (`ccare_agent::SideRequests`, MP-3): the request hooks edit it and the segments
//! serving purpose `compaction` (scoped prompts) append their request-only message,
//! which is priced with it and recorded in `compaction/summary.request_delta`. It must
//! fit the summary route's own hard input
//! budget (CC-BUD-5); the largest balanced candidate that fits is summarized, and a
//! context-window refusal moves to the next smaller one within `summary.max_retries`.
//!
//! A failed call is first offered to the registered repair hooks (CC-SUM-4,
//! [`crate::SummaryRepair`]): a repair the surface proves (inside the selection, cheaper)
//! re-selects the repaired span at minFresh 0 and the transaction tries again from
//! its largest fitting candidate. Every attempt is returned to the caller for the
//! action's journal record, and a committed summary lists them in `compaction/summary`
//! (`repairs`).

use std::sync::Arc;

use ccare_agent::{HookContext, SettledOutcome, Settlement, SideCall, SideRequests};
use ccare_core::kinds::{
    CompactionEnd, CompactionStart, CompactionSummary, RequestDelta, RequestOnly, UserMessage,
};
use ccare_core::{ContentBlock, EventDraft, ManualClock, Message, Source, SurfaceOp, TokenUsage};
use ccare_llm::{CallConfig, CancellationToken, Finish, Purpose, RequestMessage};
use ccare_session::Session;
use serde_json::{Value, json};

use crate::budget::{RouteInfo, resolve};
use crate::care::{Care, Frozen};
use crate::config::RoutePurpose;
use crate::range::{RangeNode, SeqRange, summary_candidates};
use crate::range_nodes::is_own;
use crate::repair::{RepairAttempt, RepairCheck, RepairRejection, RepairRequest, SurfaceSnapshot};
use crate::texts::{SUMMARY_INSTRUCTION, maintenance_texts};

/// Why a summary did not commit; `code` is the spec's (`SUMMARY_NOT_SMALLER`, …) or the
/// provider's failure code.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{code}: {message}")]
pub struct SummaryFailure {
    /// A stable code.
    pub code: String,
    /// What happened.
    pub message: String,
}

impl SummaryFailure {
    fn new(code: &str, message: impl Into<String>) -> Self {
        Self {
            code: code.to_owned(),
            message: message.into(),
        }
    }

    /// Whether this failure means the selection cannot usefully be summarized, so the
    /// memo remembers it (CC-MNT-5).
    pub fn is_no_useful_range(&self) -> bool {
        matches!(
            self.code.as_str(),
            "SUMMARY_NOT_SMALLER" | "SUMMARY_INPUT_BUDGET" | "SUMMARY_EMPTY"
        )
    }
}

/// A committed summary.
#[derive(Debug, Clone, PartialEq)]
pub struct Committed {
    /// The transaction id.
    pub compaction_id: String,
    /// The seq of the replacing checkpoint.
    pub checkpoint_seq: u64,
    /// The seqs it shadowed.
    pub shadowed: Vec<u64>,
    /// The conversation request's `Q` before and after, on the frozen basis.
    pub before: u64,
    /// See `before`.
    pub after: u64,
    /// The summary call.
    pub call_id: String,
    /// What the provider reported for it.
    pub usage: Option<TokenUsage>,
    /// CC-SUM-5 coverage: `chunks`, `dropped`, `leafSeqs`, `parentCheckpointSeqs`,
    /// `depth`.
    pub coverage: Value,
    /// What failed after the checkpoint was live (closing the transaction, the flush):
    /// recorded, never turning the commit into a failure.
    pub secondary_failures: Vec<SummaryFailure>,
    /// The meter's (unscaled) tokens of what it shadowed minus the checkpoint's.
    pub heuristic_saving: u64,
}

/// What a summary needs of its caller.
pub(crate) struct SummaryRun<'a> {
    pub(crate) session: &'a Session,
    pub(crate) frozen: &'a Frozen,
    /// The pending batch and request-only messages of the conversation request.
    pub(crate) batch: &'a [Message],
    pub(crate) turn: Option<u32>,
    /// Why: `automatic`, `requested` or `overflow`.
    pub(crate) reason: &'static str,
    pub(crate) operation_id: &'a str,
    pub(crate) cancel: CancellationToken,
    /// When the action began (ms since the epoch, the host clock), for the journal.
    pub(crate) now_ms: i64,
}

fn text_of(message: &Message) -> String {
    let mut parts = Vec::new();
    for block in &message.content {
        match block {
            ContentBlock::Text(text) => parts.push(text.text.clone()),
            ContentBlock::ToolCall(call) => parts.push(format!(
                "[tool call {}] {}",
                call.name,
                serde_json::to_string(&call.arguments).unwrap_or_default()
            )),
            ContentBlock::ToolResult(result) => {
                let body: Vec<String> = result
                    .content
                    .iter()
                    .map(|inner| match inner {
                        ContentBlock::Text(text) => text.text.clone(),
                        _ => "[non-text content]".to_owned(),
                    })
                    .collect();
                parts.push(format!(
                    "[tool result {}{}]\n{}",
                    result.name,
                    if result.is_error { ", error" } else { "" },
                    body.join("\n")
                ));
            }
            ContentBlock::Image(_) => parts.push("[image]".to_owned()),
            ContentBlock::Reasoning(_) | ContentBlock::Unknown(_) => {}
        }
    }
    parts.join("\n")
}

/// The transcript of the selected messages, then the instruction (CC-SUM-2, CC-SUM-6).
fn summary_request(messages: &[&Message]) -> Message {
    let mut transcript = String::from("<transcript>\n");
    for message in messages {
        let label = match &message.source {
            Some(Source::CompactCheckpoint { .. }) => "earlier checkpoint",
            _ if message
                .content
                .iter()
                .any(|block| matches!(block, ContentBlock::ToolResult(_))) =>
            {
                "tool"
            }
            _ if message
                .content
                .iter()
                .any(|block| matches!(block, ContentBlock::ToolCall(_))) =>
            {
                "assistant"
            }
            Some(_) => "user",
            None => "assistant",
        };
        transcript.push_str(&format!("[{label}]\n{}\n\n", text_of(message)));
    }
    transcript.push_str("</transcript>\n\n");
    transcript.push_str(SUMMARY_INSTRUCTION);
    let mut request = Message::from_blocks(vec![ContentBlock::text(transcript)]);
    request.source = Some(Source::user());
    request
}

impl Care {
    /// Runs one summary transaction over `selection` (CC-SUM-2 .. CC-SUM-5): the
    /// largest balanced candidate whose request fits the summary route is summarized;
    /// when none fits, consecutive fitting chunks of the largest are summarized and
    /// merged (CC-EXT-1). A failed call is offered to the repair hooks (CC-SUM-4);
    /// returns the outcome with every repair attempt, for the action's journal record.
    pub(crate) async fn summarize_with_repairs(
        &self,
        run: &SummaryRun<'_>,
        nodes: &[RangeNode],
        selection: SeqRange,
        min_fresh: u64,
    ) -> (Result<Committed, SummaryFailure>, Vec<RepairAttempt>) {
        let mut repairs = Vec::new();
        let result = self
            .run_transaction(run, nodes, selection, min_fresh, &mut repairs)
            .await;
        (result, repairs)
    }

    /// The transaction of [`Care::summarize_with_repairs`], recording repair attempts
    /// into `repairs` as they happen.
    async fn run_transaction(
        &self,
        run: &SummaryRun<'_>,
        nodes: &[RangeNode],
        selection: SeqRange,
        min_fresh: u64,
        repairs: &mut Vec<RepairAttempt>,
    ) -> Result<Committed, SummaryFailure> {
        let session = run.session;
        if let Some(open) = session.with_log(|log| log.state().open_compaction.clone()) {
            return Err(SummaryFailure::new(
                "COMPACTION_BUSY",
                format!("compaction {open} is still open"),
            ));
        }
        let (Some(_), Some(side)) = (self.llm.as_deref(), self.side.as_ref()) else {
            return Err(SummaryFailure::new(
                "NO_PROVIDER",
                "no LLM layer to summarize with",
            ));
        };
        // CC-SUM-1: resolved at mount (`crate::route`); `None` also when the
        // conversation route, which the commit proof prices on, is unknown.
        let Some(model) = self.summary_model.clone() else {
            return Err(SummaryFailure::new("NO_PROVIDER", "no summary route"));
        };
        let mut view = session.derived_view();
        let before = self
            .measure_view(run.frozen, &view, run.batch.iter())
            .map_err(|error| SummaryFailure::new("PRICING_FAILED", error.to_string()))?
            .load;
        let mut nodes = nodes.to_vec();
        let mut candidates = summary_candidates(&nodes, selection, min_fresh)
            .map_err(|error| SummaryFailure::new(error.code(), error.to_string()))?;
        let Some(mut largest) = candidates.first().cloned() else {
            return Err(SummaryFailure::new(
                "SUMMARY_INPUT_BUDGET",
                "no balanced prefix of the selection has enough fresh text",
            ));
        };
        let mut transaction = Transaction {
            care: self,
            side,
            hook: hook_context(run),
            run,
            model,
            compaction_id: uuid::Uuid::now_v7().to_string(),
            start_seq: None,
            calls: 0,
            snapshot: SurfaceSnapshot::of(&view),
            snapshot_head: session.head(),
            repaired_before: None,
            repair_attempts: 0,
            repairs,
        };
        let max_retries = self.config.summary.max_retries.unwrap_or(0);
        let mut retries = 0u64;
        let mut last_error = None;
        let mut any_fits = false;
        let mut index = 0;
        while let Some(candidate) = candidates.get(index).cloned() {
            index += 1;
            let request = transaction.request_for(&view, &candidate);
            // Prepared once: what is priced here (hooks and segments applied) is what
            // is sent; a candidate that does not fit releases its reservations.
            let side = match transaction.prepare(&request) {
                Ok(side) => side,
                Err(failure) => return transaction.abort(failure),
            };
            match transaction.fits_call(&side) {
                Ok(true) => {}
                Ok(false) => {
                    side.release();
                    continue;
                }
                Err(failure) => return transaction.abort(failure),
            }
            let fitted_before = any_fits;
            any_fits = true;
            let calls_before = transaction.calls;
            match transaction.call(side).await {
                Ok(output) => {
                    let coverage =
                        json!({"chunks": [[candidate.first(), candidate.last()]], "dropped": []});
                    return transaction
                        .commit(&candidate, output, before, coverage)
                        .await;
                }
                Err(failure) => {
                    // CC-SUM-4: an exhausted call limit ends with the last error.
                    if failure.code == "SUMMARY_CALL_LIMIT" {
                        return transaction.abort(last_error.unwrap_or(failure));
                    }
                    // The gate refused it locally (its calibrated price is over the
                    // summary route's H): like a candidate that does not fit, the next
                    // smaller one is tried and no retry is spent (A24).
                    if transaction.calls == calls_before
                        && failure.code == "REQUEST_BUDGET_EXCEEDED"
                    {
                        any_fits = fitted_before;
                        last_error = Some(failure);
                        continue;
                    }
                    // A dispatched call that failed (not cancelled) may be repaired.
                    if transaction.calls > calls_before && failure.code != "ABORTED" {
                        match transaction.repair(&failure, &candidate, &nodes).await {
                            Repair::Accepted(repaired) => match repaired.candidates() {
                                Ok((repaired_largest, repaired_candidates)) => {
                                    // Again from the largest fitting candidate.
                                    view = session.derived_view();
                                    largest = repaired_largest;
                                    candidates = repaired_candidates;
                                    nodes = repaired.nodes;
                                    index = 0;
                                    any_fits = false;
                                    last_error = Some(failure);
                                    continue;
                                }
                                Err(error) => return transaction.abort(error),
                            },
                            Repair::Stop => return transaction.abort(failure),
                            Repair::None => {}
                        }
                    }
                    let overflow = matches!(
                        failure.code.as_str(),
                        "CONTEXT_WINDOW_EXCEEDED" | "REQUEST_BUDGET_EXCEEDED"
                    );
                    if overflow && retries < max_retries {
                        retries += 1;
                        last_error = Some(failure);
                        continue;
                    }
                    return transaction.abort(failure);
                }
            }
        }
        if any_fits {
            return transaction.abort(last_error.unwrap_or_else(|| {
                SummaryFailure::new(
                    "SUMMARY_INPUT_BUDGET",
                    "no candidate fits the summary route",
                )
            }));
        }
        // CC-EXT-1: nothing fits whole; summarize fitting chunks and merge them.
        transaction.chunked(&view, &nodes, &largest, before).await
    }
}

/// CC-SUM-5 coverage of `selected`: expanding each node's `sourceEventSeqs`
/// recursively, the leaf seqs (original messages), the checkpoints passed through, and
/// the depth (how many summaries deep the oldest leaf is). `compaction/*` markers are
/// not leaves.
fn lineage(session: &Session, selected: &[u64]) -> (Vec<u64>, Vec<u64>, u64) {
    session.with_log(|log| {
        let event_at = |seq: u64| log.event_at(seq);
        let mut leaves = Vec::new();
        let mut parents = Vec::new();
        let mut depth = 0u64;
        let mut stack: Vec<(u64, u64)> = selected.iter().map(|seq| (*seq, 0)).collect();
        let mut seen = std::collections::HashSet::new();
        while let Some((seq, level)) = stack.pop() {
            if !seen.insert(seq) {
                continue;
            }
            let Some(event) = event_at(seq) else {
                continue;
            };
            if event.kind().starts_with("compaction/") {
                continue;
            }
            let sources: Vec<u64> = event
                .source_event_seqs()
                .iter()
                .copied()
                .filter(|source| {
                    event_at(*source).is_some_and(|event| !event.kind().starts_with("compaction/"))
                })
                .collect();
            if sources.is_empty() {
                leaves.push(seq);
                depth = depth.max(level);
                continue;
            }
            let checkpoint = event.decode::<UserMessage>().is_ok_and(|user| {
                matches!(user.message.source, Some(Source::CompactCheckpoint { .. }))
            });
            // A pruned result stands for its original at the same depth; a checkpoint
            // is one summary deeper.
            let next = if checkpoint {
                parents.push(seq);
                level + 1
            } else {
                level
            };
            stack.extend(sources.into_iter().map(|source| (source, next)));
        }
        leaves.sort_unstable();
        parents.sort_unstable();
        (leaves, parents, depth)
    })
}

/// The checkpoint that replaces summarized history (CC-SUM-5): the framing block, the
/// summary inside `<compacted-summary>` tags, then the done-ledger when it has items.
pub(crate) fn checkpoint_message(
    locale: ccare_core::Locale,
    compaction_id: &str,
    summary: &str,
    ledger: Option<&str>,
    trace: Value,
) -> Message {
    let mut blocks = vec![
        ContentBlock::text(maintenance_texts(locale).checkpoint_framing),
        ContentBlock::text(format!(
            "<compacted-summary>\n{summary}\n</compacted-summary>"
        )),
    ];
    // The done-ledger follows verbatim, never rewritten by the summary (CC-EXT-2).
    if let Some(ledger) = ledger {
        blocks.push(ContentBlock::text(ledger));
    }
    let mut message = Message::from_blocks(blocks);
    message.source = Some(Source::CompactCheckpoint {
        compaction_id: compaction_id.to_owned(),
        producer: "context-care".to_owned(),
        trace: Some(Box::new(trace)),
        extra: ccare_core::Extra::new(),
    });
    message
}

/// The hook context of a summary's calls: the session, the turn whose boundary (or
/// overflow recovery) runs it (0 outside a turn), step 0 (a summary call is not a step's
/// request), the action's cancel signal, and the host time the action began, fixed for
/// the whole transaction (the maintenance context carries that instant, not the clock).
fn hook_context(run: &SummaryRun<'_>) -> HookContext {
    HookContext {
        session: run.session.clone(),
        turn: run.turn.unwrap_or(0),
        step: 0,
        cancel: run.cancel.clone(),
        clock: Arc::new(ManualClock::new(run.now_ms)),
    }
}

/// The output of one summary call.
struct Output {
    /// The request-only messages the call carried, as `request/header` series deltas
    /// record them (`[{plugin, messages}]`, MP-3); empty when none.
    request_only: Vec<RequestOnly>,
    summary: String,
    raw: Message,
    usage: Option<TokenUsage>,
    call_id: String,
    provider: String,
    model: String,
    max_tokens: Option<u32>,
}

/// One summary transaction in progress: its id, whether `compaction/start` was written,
/// how many calls it made, and its repairs (CC-SUM-4).
struct Transaction<'a, 'r> {
    care: &'a Care,
    /// The host's side requests: every call runs the request hooks and the segments
    /// serving purpose `compaction` (MP-3).
    side: &'a SideRequests,
    /// The context those hooks and segments see.
    hook: HookContext,
    run: &'a SummaryRun<'a>,
    model: String,
    compaction_id: String,
    /// The seq of its `compaction/start` while the transaction is open: the checkpoint
    /// cites it, the journal's summary-call records settle on it, and an abort closes it.
    start_seq: Option<u64>,
    calls: u64,
    /// The surface when the transaction opened, or after its latest accepted repair.
    snapshot: SurfaceSnapshot,
    /// The log head when the transaction opened: replacements are at or after it.
    snapshot_head: u64,
    /// The conversation request's `Q` after the latest accepted repair: a checkpoint
    /// must beat the repaired history, not only the original.
    repaired_before: Option<u64>,
    /// Repair hooks called in this action (`max_summary_repair_retries`).
    repair_attempts: u64,
    repairs: &'r mut Vec<RepairAttempt>,
}

/// What the repair hooks made of a failed call.
enum Repair {
    /// No hook repaired, and the surface is as the transaction last accepted it.
    None,
    /// A repair was accepted.
    Accepted(Repaired),
    /// A rejected repair changed the surface: nothing more can commit.
    Stop,
}

/// The surface after an accepted repair.
struct Repaired {
    /// Every node, priced on the frozen basis.
    nodes: Vec<RangeNode>,
    /// The seqs now in the selection's place.
    selection: Vec<u64>,
}

impl Repaired {
    /// CC-SUM-4: the candidates over the repaired selection at minFresh 0, largest
    /// first, and the largest.
    fn candidates(&self) -> Result<(Vec<u64>, Vec<Vec<u64>>), SummaryFailure> {
        let (Some(&start), Some(&end)) = (self.selection.first(), self.selection.last()) else {
            return Err(SummaryFailure::new(
                "SUMMARY_INPUT_BUDGET",
                "the repaired selection is empty",
            ));
        };
        let candidates = summary_candidates(&self.nodes, SeqRange { start, end }, 0)
            .map_err(|error| SummaryFailure::new(error.code(), error.to_string()))?;
        let Some(largest) = candidates.first().cloned() else {
            return Err(SummaryFailure::new(
                "SUMMARY_INPUT_BUDGET",
                "the repaired selection has no balanced prefix",
            ));
        };
        Ok((largest, candidates))
    }
}

impl Transaction<'_, '_> {
    fn fail<T>(&self, code: &str, message: impl Into<String>) -> Result<T, SummaryFailure> {
        Err(SummaryFailure::new(code, message))
    }

    /// The summary request of `seqs` (own notices left out).
    fn request_for(&self, view: &ccare_session::DerivedView, seqs: &[u64]) -> Message {
        // `seqs` is a span of the surface, so surface order is its order.
        let wanted: std::collections::HashSet<u64> = seqs.iter().copied().collect();
        let messages: Vec<&Message> = view
            .messages
            .iter()
            .filter(|derived| wanted.contains(&derived.seq))
            .map(|derived| &*derived.message)
            .filter(|message| !is_own(message))
            .collect();
        summary_request(&messages)
    }

    fn config(&self, request: &Message) -> CallConfig {
        CallConfig {
            model: self.model.clone(),
            max_tokens: self
                .care
                .config
                .summary
                .max_tokens
                .and_then(|tokens| u32::try_from(tokens).ok()),
            messages: vec![RequestMessage::user(request.clone())],
            purpose: Purpose::Compaction,
            ..CallConfig::default()
        }
    }

    /// Prepares the summary call of `request` as a side request (MP-3): the request
    /// hooks edit it, the exact summary route is pinned (CC-SUM-1), and the segments
    /// serving `compaction` reserve their request-only message for it.
    fn prepare(&self, request: &Message) -> Result<SideCall, SummaryFailure> {
        self.side
            .prepare(&self.hook, self.config(request))
            .map_err(|error| SummaryFailure::new(error.code(), error.to_string()))
    }

    /// CC-SUM-2: whether `request` fits the summary route's own `H` (CC-BUD-5), as
    /// [`Transaction::fits_call`] on its prepared call, whose reservations are then
    /// released (nothing is sent).
    fn fits(&self, request: &Message) -> Result<bool, SummaryFailure> {
        let side = self.prepare(request)?;
        let fits = self.fits_call(&side);
        side.release();
        fits
    }

    /// CC-SUM-2: whether the prepared call fits the summary route's own `H`
    /// (CC-BUD-5), priced whole: system prompt, transcript and request-only messages
    /// (MP-3); an unknown `H` fits.
    fn fits_call(&self, side: &SideCall) -> Result<bool, SummaryFailure> {
        let call = side.call();
        let budget = resolve(
            &self.care.config,
            RouteInfo {
                provider: &call.route.provider,
                model: &call.route.model,
                purpose: RoutePurpose::Compaction,
                physical_window_tokens: call.route.context_window,
                max_tokens: call.config.max_tokens.map(u64::from),
                adapter_default_max_tokens: call.route.max_output_tokens.map(u64::from),
            },
        )
        .ok()
        .flatten();
        let Some(budget) = budget else {
            return Ok(true);
        };
        let pricer = self
            .run
            .frozen
            .pricing
            .pricer(&self.run.frozen.meter)
            .map_err(|error| SummaryFailure::new("PRICING_FAILED", error.to_string()))?;
        let tools: Value = if call.config.tools.is_empty() {
            Value::Null
        } else {
            serde_json::to_value(&call.config.tools).unwrap_or(Value::Null)
        };
        let q = pricer
            .request(
                call.config.system.as_deref(),
                call.config.messages.iter().map(|message| &*message.message),
                &tools,
            )
            .map(|price| price.q())
            .map_err(|error| SummaryFailure::new("PRICING_FAILED", error.to_string()))?;
        Ok(i64::try_from(q).unwrap_or(i64::MAX) <= budget.hard_input)
    }

    /// Opens the transaction (once) and makes one summary call (CC-SUM-3), prepared by
    /// [`Transaction::prepare`]. Its segments hear `dispatched` once the provider
    /// answered (even with a reply the summary then refuses), and `release` when it
    /// was refused, failed or was cancelled.
    async fn call(&mut self, side: SideCall) -> Result<Output, SummaryFailure> {
        if let Some(limit) = self.care.config.max_summary_calls_per_action
            && self.calls >= limit
        {
            return self.fail("SUMMARY_CALL_LIMIT", "summary call limit reached");
        }
        let session = self.run.session;
        if self.care.lifetime.is_cancelled() {
            return self.fail("ABORTED", "context-care was unmounted");
        }
        if self.start_seq.is_none() {
            let start = EventDraft::typed(&CompactionStart {
                compaction_id: self.compaction_id.clone(),
                turn: self.run.turn,
                trigger: self.run.reason.to_owned(),
            })
            .map_err(|error| SummaryFailure::new("ENCODE_FAILED", error.to_string()))?;
            let start = session
                .append(start)
                .map_err(|error| SummaryFailure::new(error.code(), error.to_string()))?;
            self.start_seq = Some(start.seq());
        }
        let call = side.call();
        let call_id = call.call_id.clone();
        // Like every request (CC-BUD-6, CC-JNL-2): journaled `ready` and durable, then
        // refused here if its calibrated price is over the summary route's H. A local
        // refusal is not a dispatch and does not count as a call (CC-SUM-4).
        let journal = &self.care.journal;
        if let Err(failure) =
            crate::gate::check_request(self.care, session, call, self.run.now_ms).await
        {
            // An unmount or cancel while the record was written is what happened, not
            // the journal error it caused.
            if self.care.lifetime.is_cancelled() || self.run.cancel.is_cancelled() {
                return self.fail("ABORTED", "the summary was cancelled");
            }
            if let Err(error) = journal.not_dispatched(&call_id, &failure) {
                tracing::warn!(call = %call_id, %error, "context-care journal: refusal not recorded");
            }
            return self.fail(failure.code.as_str(), failure.message);
        }
        self.calls += 1;
        if let Err(error) = journal.dispatched(&call_id) {
            tracing::warn!(call = %call_id, %error, "context-care journal: dispatched not recorded");
        }
        let (provider, model) = (call.route.provider.clone(), call.route.model.clone());
        let max_tokens = call.config.max_tokens;
        let request_only: Vec<RequestOnly> = side
            .request_only()
            .iter()
            .map(|(plugin, messages)| RequestOnly {
                plugin: plugin.clone(),
                messages: messages.clone(),
            })
            .collect();
        // The signal is any(caller, lifetime) (CC-SER-1): an unmount stops the call.
        let token = self.run.cancel.child_token();
        let lifetime = self.care.lifetime.clone();
        // The segments hear how it ended from `complete` (dispatched once answered).
        let completing = side.complete(token.clone());
        tokio::pin!(completing);
        let assembled = loop {
            tokio::select! {
                assembled = &mut completing => break assembled,
                () = lifetime.cancelled(), if !token.is_cancelled() => token.cancel(),
            }
        };
        // Settled on the transaction's `compaction/start` (the call has no event of its
        // own; a committed summary's usage is also in `compaction/summary`).
        let settlement = Settlement {
            call_id: call_id.clone(),
            attempt: 1,
            outcome: match assembled.finish {
                Finish::Stop | Finish::Length | Finish::ToolCalls => SettledOutcome::Completed,
                Finish::Aborted => SettledOutcome::Interrupted,
                Finish::Error { .. } => SettledOutcome::Failed,
            },
            event_seq: self.start_seq.unwrap_or_default(),
            event_type: ccare_core::kinds::COMPACTION_START,
            usage: assembled.usage,
        };
        if let Err(error) = journal.settled(&settlement) {
            tracing::warn!(call = %call_id, %error, "context-care journal: settlement not recorded");
        }
        match &assembled.finish {
            Finish::Stop => {}
            Finish::Length => return self.fail("MAX_TOKENS", "the summary hit its output limit"),
            Finish::ToolCalls => {
                return self.fail("UNSUPPORTED_CONTENT", "the summary called a tool");
            }
            Finish::Aborted => return self.fail("ABORTED", "the summary was cancelled"),
            Finish::Error { failure } => {
                return self.fail(failure.code.as_str(), failure.message.clone());
            }
        }
        let message = assembled.message();
        if message.content.iter().any(|block| {
            matches!(
                block,
                ContentBlock::ToolCall(_) | ContentBlock::Image(_) | ContentBlock::Unknown(_)
            )
        }) {
            return self.fail("UNSUPPORTED_CONTENT", "the summary is not only text");
        }
        let summary = message.joined_text("\n");
        if summary.trim().is_empty() {
            return self.fail("SUMMARY_EMPTY", "the summary has no text");
        }
        Ok(Output {
            request_only,
            summary,
            raw: message.clone(),
            usage: assembled.usage,
            call_id,
            provider,
            model,
            max_tokens,
        })
    }

    /// CC-SUM-4: offers the failed call's `selection` to the repair hooks in order,
    /// while `max_summary_repair_retries` allows, until one repair is accepted. Each
    /// attempt is recorded; a hook error is logged and the original failure stands.
    async fn repair(
        &mut self,
        failure: &SummaryFailure,
        selection: &[u64],
        nodes: &[RangeNode],
    ) -> Repair {
        let care = self.care;
        let session = self.run.session;
        for hook in &care.repairs {
            if care
                .config
                .max_summary_repair_retries
                .is_some_and(|limit| self.repair_attempts >= limit)
                || self.run.cancel.is_cancelled()
                || care.lifetime.is_cancelled()
            {
                break;
            }
            self.repair_attempts += 1;
            let cancel = self.run.cancel.child_token();
            let outcome = hook
                .repair(RepairRequest {
                    session,
                    failure,
                    selection,
                    snapshot_head: self.snapshot_head,
                    cancel: &cancel,
                })
                .await;
            let after = session.derived_view();
            let verdict = match outcome {
                Ok(()) => self.check_repair(selection, nodes, &after),
                Err(error) => {
                    tracing::warn!(session = %session.id(), hook = hook.name(), %error, code = %failure.code, "summary repair hook failed; the original failure stands");
                    Err(RepairRejection::HookFailed)
                }
            };
            self.repairs.push(RepairAttempt {
                hook: hook.name().to_owned(),
                code: failure.code.clone(),
                accepted: verdict.is_ok(),
                rejected: verdict.as_ref().err().copied(),
            });
            match verdict {
                Ok(repaired) => {
                    match self.care.measure(
                        self.run.frozen,
                        after.messages.iter().map(|derived| &*derived.message),
                        self.run.batch.iter(),
                    ) {
                        Ok(measured) => self.repaired_before = Some(measured.load),
                        Err(error) => {
                            tracing::warn!(session = %session.id(), %error, "the repaired request could not be priced");
                            return Repair::Stop;
                        }
                    }
                    self.snapshot = SurfaceSnapshot::of(&after);
                    tracing::info!(session = %session.id(), hook = hook.name(), code = %failure.code, "summary repair accepted");
                    return Repair::Accepted(repaired);
                }
                Err(rejection) => {
                    tracing::info!(session = %session.id(), hook = hook.name(), code = %failure.code, ?rejection, "summary repair rejected");
                    if !self.snapshot.matches(&after) {
                        return Repair::Stop;
                    }
                }
            }
        }
        Repair::None
    }

    /// The CC-SUM-4 acceptance checks of the surface `after` a hook's `Ok`.
    fn check_repair(
        &self,
        selection: &[u64],
        nodes: &[RangeNode],
        after: &ccare_session::DerivedView,
    ) -> Result<Repaired, RepairRejection> {
        let after_nodes = crate::range_nodes::nodes(after, self.run.frozen)
            .map_err(|_| RepairRejection::PricingFailed)?;
        let check = RepairCheck {
            session: self.run.session,
            before: &self.snapshot,
            selection,
            snapshot_head: self.snapshot_head,
            before_nodes: nodes,
        };
        let selection = check.accept(after, &after_nodes)?;
        Ok(Repaired {
            nodes: after_nodes,
            selection,
        })
    }

    /// CC-EXT-1: the largest candidate in consecutive balanced chunks that each fit the
    /// summary route, summarized one by one and merged into one checkpoint. A balanced
    /// segment that alone does not fit is never truncated into a request: it is left
    /// out of the summary and recorded as dropped (it stays searchable in the log).
    async fn chunked(
        mut self,
        view: &ccare_session::DerivedView,
        nodes: &[RangeNode],
        largest: &[u64],
        before: u64,
    ) -> Result<Committed, SummaryFailure> {
        // Balanced segments of the candidate, in order.
        let by_seq: std::collections::HashMap<u64, &RangeNode> =
            nodes.iter().map(|node| (node.seq, node)).collect();
        let mut segments: Vec<Vec<u64>> = Vec::new();
        let mut current = Vec::new();
        let mut balance: i64 = 0;
        for seq in largest {
            let Some(node) = by_seq.get(seq) else {
                continue;
            };
            balance += i64::from(node.tool_calls) - i64::from(node.tool_results);
            current.push(*seq);
            if balance == 0 {
                segments.push(std::mem::take(&mut current));
            }
        }
        let mut chunks: Vec<Vec<u64>> = Vec::new();
        let mut dropped: Vec<u64> = Vec::new();
        let mut open: Vec<u64> = Vec::new();
        for segment in segments {
            let mut grown = open.clone();
            grown.extend_from_slice(&segment);
            // After an accepted repair the transaction is open: an error closes it.
            let grown_fits = match self.fits(&self.request_for(view, &grown)) {
                Ok(fits) => fits,
                Err(failure) => return self.abort(failure),
            };
            if grown_fits {
                open = grown;
                continue;
            }
            if !open.is_empty() {
                chunks.push(std::mem::take(&mut open));
            }
            let segment_fits = match self.fits(&self.request_for(view, &segment)) {
                Ok(fits) => fits,
                Err(failure) => return self.abort(failure),
            };
            if segment_fits {
                open = segment;
            } else {
                dropped.extend(segment);
            }
        }
        if !open.is_empty() {
            chunks.push(open);
        }
        if chunks.is_empty() {
            return self.abort(SummaryFailure::new(
                "SUMMARY_INPUT_BUDGET",
                "no part of the selection fits the summary route",
            ));
        }
        let mut parts = Vec::new();
        let mut last = None;
        for (index, chunk) in chunks.iter().enumerate() {
            let request = self.request_for(view, chunk);
            let side = match self.prepare(&request) {
                Ok(side) => side,
                Err(failure) => return self.abort(failure),
            };
            match self.call(side).await {
                Ok(output) => {
                    let header = maintenance_texts(self.care.locale)
                        .chunk_header
                        .replace("{index}", &(index + 1).to_string())
                        .replace("{count}", &chunks.len().to_string())
                        .replace(
                            "{first}",
                            &chunk.first().copied().unwrap_or_default().to_string(),
                        )
                        .replace(
                            "{last}",
                            &chunk.last().copied().unwrap_or_default().to_string(),
                        );
                    parts.push(format!("{header}\n{}", output.summary));
                    last = Some(output);
                }
                Err(failure) => return self.abort(failure),
            }
        }
        let Some(mut output) = last else {
            return self.abort(SummaryFailure::new(
                "SUMMARY_EMPTY",
                "no part was summarized",
            ));
        };
        if !dropped.is_empty() {
            let seqs = dropped
                .iter()
                .map(u64::to_string)
                .collect::<Vec<_>>()
                .join(", ");
            parts.push(
                maintenance_texts(self.care.locale)
                    .chunk_left_out
                    .replace("{seqs}", &seqs),
            );
        }
        output.summary = parts.join("\n\n");
        let coverage = json!({
            "chunks": chunks.iter().map(|chunk| json!([chunk.first(), chunk.last()])).collect::<Vec<_>>(),
            "dropped": dropped,
        });
        self.commit(largest, output, before, coverage).await
    }

    /// CC-SUM-5: commits the checkpoint over `candidate` if the request gets smaller.
    async fn commit(
        mut self,
        candidate: &[u64],
        output: Output,
        before: u64,
        coverage: Value,
    ) -> Result<Committed, SummaryFailure> {
        let session = self.run.session;
        let now = session.derived_view();
        let live: std::collections::HashSet<u64> =
            now.messages.iter().map(|derived| derived.seq).collect();
        if candidate.iter().any(|seq| !live.contains(seq)) {
            return self.abort(SummaryFailure::new(
                "SUMMARY_SURFACE_CHANGED",
                "the history changed while it was being summarized",
            ));
        }
        let (Some(&start_seq), Some(&end_seq)) = (candidate.first(), candidate.last()) else {
            return self.abort(SummaryFailure::new("SUMMARY_EMPTY", "nothing selected"));
        };
        // CC-SUM-5 coverage: the leaves and earlier checkpoints the selection stands for.
        let mut coverage = coverage;
        if let Some(object) = coverage.as_object_mut() {
            let (leaves, parents, depth) = lineage(session, candidate);
            object.insert("leafSeqs".to_owned(), json!(leaves));
            object.insert("parentCheckpointSeqs".to_owned(), json!(parents));
            object.insert("depth".to_owned(), json!(depth));
        }
        let trace = json!({
            "producer": "context-care",
            "trigger": "summary",
            "reason": self.run.reason,
            "operationId": self.run.operation_id,
            "sourceSeqs": candidate,
            "callId": output.call_id,
            "coverage": coverage,
        });
        let ledger = self
            .care
            .ledger
            .current(session.id())
            .await
            .ok()
            .and_then(|items| crate::ledger::render_ledger(&items));
        let checkpoint = checkpoint_message(
            self.care.locale,
            &self.compaction_id,
            &output.summary,
            ledger.as_deref(),
            trace,
        );
        let in_candidate: std::collections::HashSet<u64> = candidate.iter().copied().collect();
        let after = self
            .care
            .measure(
                self.run.frozen,
                // The surface with the checkpoint in the candidate's place (by
                // membership: a replaced node's seq is newer than those after it).
                now.messages
                    .iter()
                    .filter(|derived| !in_candidate.contains(&derived.seq))
                    .map(|derived| &*derived.message)
                    .chain(std::iter::once(&checkpoint)),
                self.run.batch.iter(),
            )
            .map_err(|error| SummaryFailure::new("PRICING_FAILED", error.to_string()))?
            .load;
        // After a repair, the checkpoint must beat the repaired history.
        let baseline = self.repaired_before.unwrap_or(before);
        if after >= baseline {
            return self.abort(SummaryFailure::new(
                "SUMMARY_NOT_SMALLER",
                format!(
                    "the checkpoint would make the request {after} tokens, not less than {baseline}"
                ),
            ));
        }
        // `shadowedTokenCount` is the meter's (unscaled) sum (CC-SUM-5), and
        // `heuristicSaving` (CC-JNL-3) what the checkpoint saves on that basis.
        let (shadowed_tokens, checkpoint_tokens) =
            match self.run.frozen.pricing.pricer(&self.run.frozen.meter) {
                Ok(pricer) => {
                    let raw = |message: &Message| {
                        pricer
                            .message(message)
                            .map_or(0, |price| price.text + price.visual)
                    };
                    let shadowed: u64 = now
                        .messages
                        .iter()
                        .filter(|derived| in_candidate.contains(&derived.seq))
                        .map(|derived| raw(&derived.message))
                        .sum();
                    (shadowed, raw(&checkpoint))
                }
                Err(error) => {
                    return self.abort(SummaryFailure::new("PRICING_FAILED", error.to_string()));
                }
            };
        // MP-3: `request_delta` holds the request-only messages of the call `call_id`
        // names (a summary call writes no `request/header`), in the shape of a series
        // delta; absent when the call carried none, as in every older log.
        let summary_event = EventDraft::typed(&CompactionSummary {
            compaction_id: self.compaction_id.clone(),
            summary: output.summary,
            raw_output: Some(output.raw),
            usage: Some(output.usage),
            provider: output.provider,
            model: output.model,
            max_tokens: Some(output.max_tokens),
            llm_stream_call: true,
            call_id: Some(output.call_id.clone()),
            shadowed_range: [start_seq, end_seq],
            shadowed_seqs: candidate.to_vec(),
            shadowed_tokens,
            coverage: coverage.as_object().cloned(),
            repairs: (!self.repairs.is_empty()).then(|| {
                self.repairs
                    .iter()
                    .map(|repair| serde_json::to_value(repair).unwrap_or(Value::Null))
                    .collect()
            }),
            request_delta: (!output.request_only.is_empty()).then(|| RequestDelta {
                replace_messages: None,
                append_request_only: Some(output.request_only),
            }),
        });
        let summary_event = match summary_event {
            Ok(draft) => draft,
            Err(error) => {
                return self.abort(SummaryFailure::new("ENCODE_FAILED", error.to_string()));
            }
        };
        let summary_seq = match session.append(summary_event) {
            Ok(event) => event.seq(),
            Err(error) => return self.abort(SummaryFailure::new(error.code(), error.to_string())),
        };
        let mut sources: Vec<u64> = self.start_seq.into_iter().collect();
        sources.push(summary_seq);
        sources.extend(candidate.iter().copied());
        let replace = match EventDraft::typed(&UserMessage {
            message: checkpoint,
        }) {
            Ok(draft) => draft
                .with_surface(SurfaceOp::Replace { start_seq, end_seq })
                .with_sources(sources),
            Err(error) => {
                return self.abort(SummaryFailure::new("ENCODE_FAILED", error.to_string()));
            }
        };
        let checkpoint_seq = match session.append(replace) {
            Ok(event) => event.seq(),
            Err(error) => return self.abort(SummaryFailure::new(error.code(), error.to_string())),
        };
        // The checkpoint is live from here on: what still fails (closing the
        // transaction, making it durable) is a secondary failure of a committed summary,
        // recorded with it, never a reason to report the history as kept (CC-SUM-5).
        let mut secondary = Vec::new();
        let closed = EventDraft::typed(&CompactionEnd {
            compaction_id: self.compaction_id.clone(),
            error: None,
            repair: false,
        })
        .map_err(|error| SummaryFailure::new("ENCODE_FAILED", error.to_string()))
        .and_then(|end| {
            session
                .append(end)
                .map_err(|error| SummaryFailure::new(error.code(), error.to_string()))
        });
        if let Err(failure) = closed {
            tracing::error!(session = %session.id(), %failure, "compaction/end not written after the checkpoint");
            secondary.push(failure);
        }
        // Closed (or closing failed, recorded above): an abort must not close it again.
        self.start_seq = None;
        if let Err(error) = session.flush().await {
            tracing::error!(session = %session.id(), %error, "the committed summary is not durable");
            secondary.push(SummaryFailure::new(error.code(), error.to_string()));
        }
        Ok(Committed {
            compaction_id: self.compaction_id,
            checkpoint_seq,
            shadowed: candidate.to_vec(),
            before,
            after,
            call_id: output.call_id,
            usage: output.usage,
            coverage,
            secondary_failures: secondary,
            heuristic_saving: shadowed_tokens.saturating_sub(checkpoint_tokens),
        })
    }

    /// Closes an open transaction with the error and returns it.
    fn abort<T>(&self, failure: SummaryFailure) -> Result<T, SummaryFailure> {
        if self.start_seq.is_some() {
            let end = CompactionEnd {
                compaction_id: self.compaction_id.clone(),
                error: Some(failure.code.clone()),
                repair: false,
            };
            let session = self.run.session;
            if let Ok(draft) = EventDraft::typed(&end)
                && let Err(error) = session.append(draft)
            {
                tracing::error!(session = %session.id(), %error, "compaction/end not written");
            }
        }
        Err(failure)
    }
}
