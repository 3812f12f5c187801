//! Summary repair hooks (CC-SUM-4): a requested rest whose first summary call fails,
//! with hooks registered through `ContextCare::with_summary_repair`. Each scenario
//! reads the outcome back from the log, the journal and the provider's recorded
//! requests: an accepted repair is summarized again and commits; a hook `Ok` without a
//! change, a change outside the selection, a larger replacement, a hook error and the
//! repair limit leave the original failure standing.
//!
//! The rest scenario's surface at its boundary: the long prompt (seq 1), the status
//! notice, the assistant's answer, "now rest" (selected), then the rest call and its
//! result (retained).

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use ccare_agent::BoxFuture;
use ccare_care::{RepairError, RepairRequest, STATE_SOURCE, SummaryRepair};
use ccare_core::kinds::{ToolResult, TurnEndReason, UserMessage};
use ccare_core::{ContentBlock, EventDraft, Message, Source, SurfaceOp};
use ccare_llm::{GenerateRequest, Purpose};
use parking_lot::Mutex;
use serde_json::{Value, json};

use crate::rest::{SUMMARY, lorem};
use crate::rig::{Rig, rig_with};

/// What a hook was asked: the failure code, the selection and the snapshot head.
#[derive(Debug, Clone, PartialEq)]
struct Asked {
    code: String,
    selection: Vec<u64>,
    snapshot_head: u64,
}

/// How a test hook answers.
enum Action {
    /// Replaces the largest selected user message with `lorem(repeats)`.
    ReplaceLargestSelected { repeats: usize },
    /// Answers `Ok` and writes nothing.
    Nothing,
    /// Shortens the live tool result outside the selection (the rest call's).
    ReplaceOutside,
    /// Answers an error.
    Fail,
}

struct Hook {
    name: &'static str,
    action: Action,
    asked: Mutex<Vec<Asked>>,
    calls: AtomicUsize,
}

impl Hook {
    fn new(name: &'static str, action: Action) -> Arc<Self> {
        Arc::new(Self {
            name,
            action,
            asked: Mutex::new(Vec::new()),
            calls: AtomicUsize::new(0),
        })
    }

    fn calls(&self) -> usize {
        self.calls.load(Ordering::SeqCst)
    }
}

fn text_len(message: &Message) -> usize {
    message
        .content
        .iter()
        .map(|block| match block {
            ContentBlock::Text(text) => text.text.len(),
            _ => 0,
        })
        .sum()
}

impl SummaryRepair for Hook {
    fn name(&self) -> &str {
        self.name
    }

    fn repair<'a>(&'a self, request: RepairRequest<'a>) -> BoxFuture<'a, Result<(), RepairError>> {
        Box::pin(async move {
            self.calls.fetch_add(1, Ordering::SeqCst);
            self.asked.lock().push(Asked {
                code: request.failure.code.clone(),
                selection: request.selection.to_vec(),
                snapshot_head: request.snapshot_head,
            });
            let session = request.session;
            let view = session.derived_view();
            match self.action {
                Action::Nothing => Ok(()),
                Action::Fail => Err(RepairError::new("the offload store is unavailable")),
                Action::ReplaceLargestSelected { repeats } => {
                    let Some(largest) = view
                        .messages
                        .iter()
                        .filter(|derived| request.selection.contains(&derived.seq))
                        .filter(|derived| {
                            matches!(&derived.message.source, Some(Source::User { .. }))
                        })
                        .max_by_key(|derived| text_len(&derived.message))
                    else {
                        return Err(RepairError::new("no user message selected"));
                    };
                    let mut replacement =
                        Message::from_blocks(vec![ContentBlock::text(lorem(repeats))]);
                    replacement.source = Some(Source::user());
                    let draft = EventDraft::typed(&UserMessage {
                        message: replacement,
                    })
                    .unwrap()
                    .with_surface(SurfaceOp::Replace {
                        start_seq: largest.seq,
                        end_seq: largest.seq,
                    })
                    .with_sources(vec![largest.seq]);
                    session
                        .append(draft)
                        .map_err(|error| RepairError::new(error.to_string()))?;
                    Ok(())
                }
                Action::ReplaceOutside => {
                    let Some(outside) = view.messages.iter().rev().find(|derived| {
                        !request.selection.contains(&derived.seq)
                            && derived
                                .message
                                .content
                                .iter()
                                .any(|block| matches!(block, ContentBlock::ToolResult(_)))
                    }) else {
                        return Err(RepairError::new("no tool result outside the selection"));
                    };
                    let event = session
                        .with_log(|log| log.event_at(outside.seq).cloned())
                        .unwrap();
                    let mut result: ToolResult = event.decode().unwrap();
                    if let Some(ContentBlock::ToolResult(block)) =
                        result.message.content.first_mut()
                    {
                        block.content = vec![ContentBlock::text("(shortened)")];
                    }
                    let draft = EventDraft::typed(&result)
                        .unwrap()
                        .with_surface(SurfaceOp::Replace {
                            start_seq: outside.seq,
                            end_seq: outside.seq,
                        })
                        .with_sources(vec![outside.seq]);
                    session
                        .append(draft)
                        .map_err(|error| RepairError::new(error.to_string()))?;
                    Ok(())
                }
            }
        })
    }
}

fn rest_call() -> String {
    json!({"tool_calls": [{"name": "context_rest", "arguments": {"note": "n".repeat(1200)}}]})
        .to_string()
}

fn failure() -> String {
    json!({"expect": {"purpose": "compaction"}, "failure": {"code": "INVALID_REQUEST", "message": "bad summary request"}}).to_string()
}

fn summary() -> String {
    json!({"expect": {"purpose": "compaction"}, "text": SUMMARY}).to_string()
}

/// A requested rest whose first summary call fails with `INVALID_REQUEST`, then (when
/// `second_summary`) a summary; the hooks are registered in order.
async fn rest_with(hooks: &[Arc<Hook>], config: Value, second_summary: bool) -> Rig {
    let mut script = vec![r#"{"text": "read it"}"#.to_owned(), rest_call(), failure()];
    if second_summary {
        script.push(summary());
    }
    script.push(r#"{"text": "continuing"}"#.to_owned());
    let hooks: Vec<Arc<dyn SummaryRepair>> = hooks
        .iter()
        .map(|hook| Arc::clone(hook) as Arc<dyn SummaryRepair>)
        .collect();
    let rig = rig_with(&script.join("\n"), config, Some(64_000), &|care| {
        hooks.iter().fold(care, |care, hook| {
            care.with_summary_repair(Arc::clone(hook))
        })
    })
    .await;
    rig.turn(&lorem(400)).await;
    assert_eq!(
        rig.turn("now rest").await,
        Some(TurnEndReason::Completed),
        "the user's turn goes on"
    );
    rig
}

fn summary_requests(rig: &Rig) -> Vec<GenerateRequest> {
    rig.script
        .requests()
        .into_iter()
        .filter(|request| request.config.purpose == Purpose::Compaction)
        .collect()
}

fn transcript(request: &GenerateRequest) -> String {
    match &request.config.messages[0].message.content[0] {
        ContentBlock::Text(text) => text.text.clone(),
        _ => String::new(),
    }
}

/// The summary action's journal record, as another process reads it.
async fn action(rig: &Rig) -> Value {
    let records: Vec<Value> = rig
        .journal()
        .await
        .into_iter()
        .filter(|(key, _)| key.starts_with("action_"))
        .map(|(_, record)| record["data"].clone())
        .filter(|data| data["action"] == "summary")
        .collect();
    assert_eq!(records.len(), 1, "one summary action");
    records[0].clone()
}

/// The rest outcome the boundary reported (CC-BND-2).
fn outcome(rig: &Rig) -> Value {
    rig.user_messages()
        .into_iter()
        .rfind(|message| message["source"]["kind"] == STATE_SOURCE)
        .unwrap()["source"]["contextCareTrace"]["outcome"]
        .clone()
}

fn checkpoints(rig: &Rig) -> Vec<Value> {
    rig.user_messages()
        .into_iter()
        .filter(|message| message["source"]["kind"] == "compact-checkpoint")
        .collect()
}

/// The live seqs of the session's surface.
fn live(rig: &Rig) -> Vec<u64> {
    rig.session
        .derived_view()
        .messages
        .iter()
        .map(|derived| derived.seq)
        .collect()
}

/// The original failure stands: the transaction closed with the provider's code after
/// one summary call, nothing was summarized, the rest reports R8 and the journal
/// records the failure.
async fn assert_original_failure_stands(rig: &Rig) -> Value {
    assert_eq!(
        rig.compaction_kinds(),
        ["compaction/start", "compaction/end"]
    );
    let ends = rig.events("compaction/end");
    assert_eq!(ends[0].1["error"], "INVALID_REQUEST");
    assert_eq!(summary_requests(rig).len(), 1, "one summary call");
    assert!(checkpoints(rig).is_empty());
    assert_eq!(outcome(rig), "error");
    let action = action(rig).await;
    assert_eq!(action["outcome"], "failed");
    assert_eq!(action["phase"], "failed");
    assert_eq!(action["error"]["code"], "INVALID_REQUEST");
    action
}

#[tokio::test]
async fn cc_sum_4_an_accepted_repair_is_summarized_again_and_commits() {
    let shrink = Hook::new("shrink", Action::ReplaceLargestSelected { repeats: 100 });
    let rig = rest_with(&[Arc::clone(&shrink)], json!({"retain_tokens": 100}), true).await;
    // The hook saw the failure and the selection: the long prompt up to "now rest".
    let asked = shrink.asked.lock().clone();
    assert_eq!(asked.len(), 1);
    assert_eq!(asked[0].code, "INVALID_REQUEST");
    assert_eq!(asked[0].selection.first(), Some(&1));
    let starts = rig.events("compaction/start");
    assert_eq!(starts.len(), 1, "one transaction");
    assert_eq!(asked[0].snapshot_head, starts[0].0, "opened at the head");
    // Its replacement of the long prompt, after the start.
    let replacement = rig
        .events("user/message")
        .into_iter()
        .find(|(_, data)| data["message"]["content"][0]["text"] == lorem(100))
        .map(|(seq, _)| seq)
        .unwrap();
    assert!(replacement > starts[0].0);
    assert_eq!(
        rig.compaction_kinds(),
        ["compaction/start", "compaction/summary", "compaction/end"]
    );
    // The second call summarized the repaired selection, smaller than the first.
    let requests = summary_requests(&rig);
    assert_eq!(requests.len(), 2);
    assert!(transcript(&requests[0]).contains(&lorem(400)));
    assert!(!transcript(&requests[1]).contains(&lorem(400)));
    assert!(transcript(&requests[1]).contains(&lorem(100)));
    assert!(transcript(&requests[1]).contains("now rest"));
    // The checkpoint shadows the replacement, and its coverage reaches the original.
    let (_, summary_event) = rig.events("compaction/summary").remove(0);
    let shadowed: Vec<u64> =
        serde_json::from_value(summary_event["shadowed_seqs"].clone()).unwrap();
    assert_eq!(shadowed.first(), Some(&replacement));
    assert!(!shadowed.contains(&1));
    assert_eq!(
        summary_event["repairs"],
        json!([{"hook": "shrink", "code": "INVALID_REQUEST", "accepted": true}])
    );
    let checkpoint = checkpoints(&rig).pop().unwrap();
    let leaves = &checkpoint["source"]["trace"]["coverage"]["leafSeqs"];
    assert!(leaves.as_array().unwrap().contains(&json!(1)));
    assert!(!leaves.as_array().unwrap().contains(&json!(replacement)));
    assert!(!live(&rig).contains(&replacement), "summarized away");
    // compaction/end is the live transaction's, not crash repair's (H-SESS-5).
    let ends = rig.events("compaction/end");
    assert_eq!(ends.len(), 1);
    assert_eq!(
        ends[0].1,
        json!({"compaction_id": starts[0].1["compaction_id"]})
    );
    assert_eq!(outcome(&rig), "committed");
    let action = action(&rig).await;
    assert_eq!(action["outcome"], "committed");
    assert_eq!(
        action["repairs"],
        json!([{"hook": "shrink", "code": "INVALID_REQUEST", "accepted": true}])
    );
}

#[tokio::test]
async fn cc_sum_4_a_hook_ok_without_a_durable_change_authorizes_nothing() {
    let nothing = Hook::new("nothing", Action::Nothing);
    let rig = rest_with(
        &[Arc::clone(&nothing)],
        json!({"retain_tokens": 100}),
        false,
    )
    .await;
    assert_eq!(nothing.calls(), 1);
    let action = assert_original_failure_stands(&rig).await;
    assert_eq!(
        action["repairs"],
        json!([{"hook": "nothing", "code": "INVALID_REQUEST", "accepted": false, "rejected": "no-replacement"}])
    );
    assert!(live(&rig).contains(&1), "the long prompt is still live");
}

#[tokio::test]
async fn cc_sum_4_a_change_outside_the_selection_is_rejected() {
    let outside = Hook::new("outside", Action::ReplaceOutside);
    let rig = rest_with(
        &[Arc::clone(&outside)],
        json!({"retain_tokens": 100}),
        false,
    )
    .await;
    assert_eq!(outside.calls(), 1);
    // The hook did write: the rest call's result, outside the selection, was replaced.
    let selection = outside.asked.lock()[0].selection.clone();
    let shortened: Vec<u64> = rig
        .events("tool/result")
        .into_iter()
        .filter(|(_, data)| data["message"]["content"][0]["content"][0]["text"] == "(shortened)")
        .map(|(seq, _)| seq)
        .collect();
    assert_eq!(shortened.len(), 1);
    assert!(live(&rig).contains(&shortened[0]));
    assert!(!selection.contains(&shortened[0]));
    let action = assert_original_failure_stands(&rig).await;
    assert_eq!(
        action["repairs"],
        json!([{"hook": "outside", "code": "INVALID_REQUEST", "accepted": false, "rejected": "outside-changed"}])
    );
}

#[tokio::test]
async fn cc_sum_4_a_larger_replacement_is_rejected() {
    let grow = Hook::new("grow", Action::ReplaceLargestSelected { repeats: 800 });
    let rig = rest_with(&[Arc::clone(&grow)], json!({"retain_tokens": 100}), false).await;
    assert_eq!(grow.calls(), 1);
    let grown = rig
        .events("user/message")
        .into_iter()
        .find(|(_, data)| data["message"]["content"][0]["text"] == lorem(800))
        .map(|(seq, _)| seq)
        .unwrap();
    assert!(live(&rig).contains(&grown), "the hook replaced the prompt");
    let action = assert_original_failure_stands(&rig).await;
    assert_eq!(
        action["repairs"],
        json!([{"hook": "grow", "code": "INVALID_REQUEST", "accepted": false, "rejected": "not-cheaper"}])
    );
}

#[tokio::test]
async fn cc_sum_4_max_summary_repair_retries_zero_never_calls_a_hook() {
    let shrink = Hook::new("shrink", Action::ReplaceLargestSelected { repeats: 100 });
    let rig = rest_with(
        &[Arc::clone(&shrink)],
        json!({"retain_tokens": 100, "max_summary_repair_retries": 0}),
        false,
    )
    .await;
    assert_eq!(shrink.calls(), 0);
    let action = assert_original_failure_stands(&rig).await;
    assert_eq!(action.get("repairs"), None);
    assert!(live(&rig).contains(&1), "the long prompt is still live");
}

#[tokio::test]
async fn cc_sum_4_the_repair_limit_counts_every_hook_called() {
    let nothing = Hook::new("nothing", Action::Nothing);
    let shrink = Hook::new("shrink", Action::ReplaceLargestSelected { repeats: 100 });
    let rig = rest_with(
        &[Arc::clone(&nothing), Arc::clone(&shrink)],
        json!({"retain_tokens": 100, "max_summary_repair_retries": 1}),
        false,
    )
    .await;
    assert_eq!((nothing.calls(), shrink.calls()), (1, 0));
    let action = assert_original_failure_stands(&rig).await;
    assert_eq!(
        action["repairs"],
        json!([{"hook": "nothing", "code": "INVALID_REQUEST", "accepted": false, "rejected": "no-replacement"}])
    );
}

#[tokio::test]
async fn cc_sum_4_a_hook_error_never_replaces_the_failure_and_the_next_hook_repairs() {
    let failing = Hook::new("failing", Action::Fail);
    let shrink = Hook::new("shrink", Action::ReplaceLargestSelected { repeats: 100 });
    let rig = rest_with(
        &[Arc::clone(&failing), Arc::clone(&shrink)],
        json!({"retain_tokens": 100}),
        true,
    )
    .await;
    assert_eq!((failing.calls(), shrink.calls()), (1, 1));
    assert_eq!(
        rig.compaction_kinds(),
        ["compaction/start", "compaction/summary", "compaction/end"]
    );
    assert_eq!(summary_requests(&rig).len(), 2);
    let action = action(&rig).await;
    assert_eq!(action["outcome"], "committed");
    assert_eq!(
        action["repairs"],
        json!([
            {"hook": "failing", "code": "INVALID_REQUEST", "accepted": false, "rejected": "hook-failed"},
            {"hook": "shrink", "code": "INVALID_REQUEST", "accepted": true},
        ])
    );
}

#[tokio::test]
async fn cc_sum_4_an_exhausted_call_limit_after_a_repair_ends_with_the_last_error() {
    let shrink = Hook::new("shrink", Action::ReplaceLargestSelected { repeats: 100 });
    let rig = rest_with(
        &[Arc::clone(&shrink)],
        json!({"retain_tokens": 100, "max_summary_calls_per_action": 1}),
        false,
    )
    .await;
    // The repair was accepted, but the limit allows no second dispatch: the last
    // error, not SUMMARY_CALL_LIMIT, closes the transaction.
    assert_eq!(shrink.calls(), 1);
    let action = assert_original_failure_stands(&rig).await;
    assert_eq!(
        action["repairs"],
        json!([{"hook": "shrink", "code": "INVALID_REQUEST", "accepted": true}])
    );
}
