//! The maintenance records of the request journal (CC-JNL-3): each action's record,
//! built as the journal stores it (field order included), and the one way they are
//! written. A record that cannot be written is logged, never failing the action.

use ccare_session::Session;
use serde_json::{Value, json};

use crate::care::Care;
use crate::range::{Proposal, SeqRange};
use crate::repair::RepairAttempt;
use crate::summary::{Committed, SummaryFailure};

/// How many ranked candidates a maintenance record keeps (CC-JNL-3 `comparisons`).
pub const JOURNALED_COMPARISONS: usize = 20;

/// A failure as a record's `error`: `{code, message}`.
pub(super) fn error_value(failure: &SummaryFailure) -> Value {
    json!({"code": failure.code, "message": failure.message})
}

/// A summary over `range` refused at execution because `control` is off
/// (`CONTROL_DISABLED`, CC-SUM-1 / A29).
pub(super) fn control_disabled(
    operation_id: &str,
    reason: &str,
    before_seq: u64,
    range: SeqRange,
    control: &str,
) -> Value {
    json!({
        "operationId": operation_id,
        "action": "summary",
        "reason": reason,
        "phase": "failed",
        "outcome": "failed",
        "beforeSeq": before_seq,
        "sourceSeqs": [range.start, range.end],
        "error": {"code": "CONTROL_DISABLED", "message": format!("{control} is off")},
    })
}

/// A summary's `selection`: the rule of the chosen candidate and the best few ranked
/// candidates (a long session has thousands, and a record must stay small).
pub(super) fn summary_selection(proposal: &Proposal) -> Value {
    json!({
        "rule": proposal.candidate.rule.as_str(),
        // The best few only: a long session has thousands of candidates, and a
        // journal record must stay small.
        "comparisons": serde_json::to_value(
            &proposal.comparisons[..proposal.comparisons.len().min(JOURNALED_COMPARISONS)]
        )
        .unwrap_or(Value::Null),
        "comparisonCount": proposal.comparisons.len(),
    })
}

/// What a summary's `started` record holds.
pub(super) struct SummaryStarted<'a> {
    pub(super) operation_id: &'a str,
    pub(super) before_generation: u64,
    pub(super) reason: &'a str,
    pub(super) before_seq: u64,
    pub(super) source_seqs: Vec<u64>,
    pub(super) proposal_key: &'a str,
    pub(super) selection: Value,
}

/// A summary's record as it starts (`phase: started`).
pub(super) fn summary_started(started: SummaryStarted<'_>) -> Value {
    json!({
        "operationId": started.operation_id,
        "action": "summary",
        "beforeGeneration": started.before_generation,
        "reason": started.reason,
        "phase": "started",
        "beforeSeq": started.before_seq,
        "sourceSeqs": started.source_seqs,
        "proposalKey": started.proposal_key,
        "selection": started.selection,
    })
}

/// Completes a summary's `started` record with how it settled: committed (the
/// replacement, the call and its savings) or failed (`no-useful-range` when the memo
/// remembers it, CC-MNT-5). `after_seq` and `after_generation` are read after it.
pub(super) fn summary_settled(
    data: &mut Value,
    result: &Result<Committed, SummaryFailure>,
    repairs: &[RepairAttempt],
    after_seq: u64,
    after_generation: u64,
) {
    let Some(object) = data.as_object_mut() else {
        return;
    };
    if !repairs.is_empty() {
        object.insert("repairs".to_owned(), json!(repairs));
    }
    match result {
        Ok(committed) => {
            object.insert("phase".to_owned(), json!("committed"));
            object.insert("outcome".to_owned(), json!("committed"));
            object.insert("compactionId".to_owned(), json!(committed.compaction_id));
            object.insert("beforeInput".to_owned(), json!(committed.before));
            object.insert("afterInput".to_owned(), json!(committed.after));
            object.insert("afterSeq".to_owned(), json!(after_seq));
            object.insert("afterGeneration".to_owned(), json!(after_generation));
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
            object.insert("afterSeq".to_owned(), json!(after_seq));
            object.insert("afterGeneration".to_owned(), json!(after_generation));
        }
    }
}

/// One replacement of a prune: the pruned result at `new_seq` replaces `seq`.
pub(super) fn prune_replacement(new_seq: u64, seq: u64) -> Value {
    json!({"newSeq": new_seq, "oldStartSeq": seq, "oldEndSeq": seq, "sourceSeqs": [seq]})
}

/// A completed prune (CC-MNT-1).
pub(super) fn prune_completed(
    operation_id: &str,
    reason: &str,
    before_seq: u64,
    after_seq: u64,
    replacements: Vec<Value>,
) -> Value {
    json!({
        "operationId": operation_id,
        "action": "prune",
        "reason": reason,
        "phase": "completed",
        "outcome": "committed",
        "beforeSeq": before_seq,
        "afterSeq": after_seq,
        "replacements": replacements,
    })
}

/// A deep rest refused before anything was written (CC-DEEP-2 "audited as deep-rest,
/// requested"); `head` is both its `beforeSeq` and its `afterSeq`.
pub(super) fn deep_refused(
    operation_id: &str,
    head: u64,
    shadowed: &[u64],
    error: &SummaryFailure,
) -> Value {
    json!({
        "operationId": operation_id,
        "action": "deep-rest",
        "reason": "requested",
        "phase": "failed",
        "outcome": "failed",
        "beforeSeq": head,
        "afterSeq": head,
        "sourceSeqs": shadowed,
        "error": error_value(error),
    })
}

/// A deep rest's record before it settles: what it clears and what it costs before and
/// after (`beforeInput`, `afterInput`).
pub(super) fn deep_started(
    operation_id: &str,
    before_seq: u64,
    shadowed: &[u64],
    before_input: u64,
    after_input: u64,
) -> Value {
    json!({
        "operationId": operation_id,
        "action": "deep-rest",
        "reason": "requested",
        "beforeSeq": before_seq,
        "sourceSeqs": shadowed,
        "beforeInput": before_input,
        "afterInput": after_input,
    })
}

/// Completes a deep rest's record as failed with `error`.
pub(super) fn deep_failed(data: &mut Value, error: &SummaryFailure) {
    if let Some(object) = data.as_object_mut() {
        object.insert("phase".to_owned(), json!("failed"));
        object.insert("outcome".to_owned(), json!("failed"));
        object.insert("error".to_owned(), error_value(error));
    }
}

/// What a committed deep rest adds to its record.
pub(super) struct DeepCommitted<'a> {
    pub(super) compaction_id: &'a str,
    pub(super) after_seq: u64,
    pub(super) checkpoint_seq: u64,
    pub(super) start_seq: u64,
    pub(super) end_seq: u64,
    pub(super) shadowed: &'a [u64],
}

/// Completes a deep rest's record as committed: the checkpoint replaced the range.
pub(super) fn deep_committed(data: &mut Value, committed: DeepCommitted<'_>) {
    if let Some(object) = data.as_object_mut() {
        object.insert("phase".to_owned(), json!("committed"));
        object.insert("outcome".to_owned(), json!("committed"));
        object.insert("compactionId".to_owned(), json!(committed.compaction_id));
        object.insert("afterSeq".to_owned(), json!(committed.after_seq));
        object.insert(
            "replacements".to_owned(),
            json!([{"newSeq": committed.checkpoint_seq, "oldStartSeq": committed.start_seq, "oldEndSeq": committed.end_seq, "sourceSeqs": committed.shadowed}]),
        );
    }
}

impl Care {
    /// Writes one maintenance record of `operation_id` at `at`; a failure is logged and
    /// the action goes on (CC-DEF-2).
    pub(super) async fn record(&self, session: &Session, operation_id: &str, at: i64, data: Value) {
        if let Err(error) = self
            .journal
            .maintenance(session.id(), operation_id, at, data)
            .await
        {
            tracing::error!(session = %session.id(), %error, "context-care journal: maintenance not recorded");
        }
    }
}
