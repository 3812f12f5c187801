//! `ActionRecord::line` and `operation_id` (what `ccare context actions` prints after
//! the time, and what `context diff --op` matches) read a maintenance record through
//! the typed `MaintenanceView`: the exact line for a committed, a failed and a running
//! action, `-` for what a record lacks.

use ccare_care::report::ActionRecord;
use serde_json::json;

fn record(data: serde_json::Value) -> ActionRecord {
    ActionRecord {
        at: 1_796_096_405_000,
        data,
    }
}

#[test]
fn a_committed_summary_shows_its_input_before_and_after() {
    let action = record(json!({
        "operationId": "op-1",
        "action": "summary",
        "beforeGeneration": 0,
        "reason": "requested",
        "phase": "committed",
        "outcome": "committed",
        "beforeInput": 9000,
        "afterInput": 1200,
        "replacements": [{"newSeq": 12, "oldStartSeq": 1, "oldEndSeq": 10, "sourceSeqs": [1, 3, 10]}],
    }));
    assert_eq!(action.operation_id(), "op-1");
    assert_eq!(
        action.line(),
        "op-1  summary requested committed  input 9000 → 1200"
    );
    assert_eq!(action.view().replacements[0].source_seqs, [1, 3, 10]);
}

#[test]
fn a_failed_deep_rest_names_its_error_code() {
    let action = record(json!({
        "operationId": "op-2",
        "action": "deep-rest",
        "reason": "requested",
        "beforeSeq": 14,
        "sourceSeqs": [1, 3],
        "beforeInput": 5000,
        "afterInput": 800,
        "phase": "failed",
        "outcome": "failed",
        "error": {"code": "SUMMARY_EMPTY", "message": "nothing selected"},
    }));
    assert_eq!(
        action.line(),
        "op-2  deep-rest requested failed  input 5000 → 800  error SUMMARY_EMPTY"
    );
}

#[test]
fn a_running_action_shows_a_dash_for_its_missing_outcome() {
    let action = record(json!({
        "operationId": "op-3",
        "action": "summary",
        "reason": "soft-threshold",
        "phase": "started",
    }));
    assert_eq!(action.operation_id(), "op-3");
    assert_eq!(action.line(), "op-3  summary soft-threshold -");
    let empty = record(json!({}));
    assert_eq!(empty.operation_id(), "");
    assert_eq!(empty.line(), "  - - -");
}
