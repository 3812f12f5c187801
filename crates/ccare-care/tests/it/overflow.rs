//! Overflow recovery (CC-OVF-1 .. CC-OVF-3) through the real loop: a provider's
//! context-window refusal and the gate's local refusal are recovered by a summary and
//! retried with proof, or the original failure stands.

use ccare_agent::controls::{Patch, PatchOp};
use ccare_core::kinds::TurnEndReason;
use serde_json::{Value, json};

use crate::rig::{Rig, rig};

const SUMMARY: &str = "## Primary Request and Intent\n- earlier parts\n## Next Step\n- continue";

fn lorem(repeats: usize) -> String {
    "lorem ipsum dolor sit amet ".repeat(repeats)
}

fn script(lines: &[Value]) -> String {
    lines
        .iter()
        .map(Value::to_string)
        .collect::<Vec<_>>()
        .join("\n")
}

async fn switch(rig: &Rig, rule: &str, action: &str, enabled: bool) {
    let controls = rig.host.controls();
    controls.load(rig.session.id()).await.unwrap();
    let revision = controls.snapshot(rig.session.id()).revision;
    controls
        .patch(
            rig.session.id(),
            Patch {
                revision,
                source_id: "context-care".to_owned(),
                rule_id: rule.to_owned(),
                op: PatchOp::Toggle {
                    action_id: action.to_owned(),
                    enabled,
                },
            },
            rig.session.head(),
        )
        .await
        .unwrap();
}

fn overflow() -> Value {
    json!({"failure": {"code": "CONTEXT_WINDOW_EXCEEDED", "message": "maximum context length exceeded"}})
}

#[tokio::test]
async fn cc_ovf_a_provider_overflow_is_summarized_and_retried_with_proof() {
    let rig = rig(
        &script(&[
            json!({"text": "one"}),
            json!({"text": "two"}),
            overflow(),
            json!({"expect": {"purpose": "compaction"}, "text": SUMMARY}),
            json!({"text": "recovered"}),
        ]),
        json!({}),
        Some(64_000),
        true,
    )
    .await;
    rig.turn(&lorem(300)).await;
    rig.turn(&lorem(300)).await;
    assert_eq!(rig.turn("third").await, Some(TurnEndReason::Completed));
    let attempts = rig.events("assistant/attempt");
    assert_eq!(attempts.len(), 1);
    assert_eq!(attempts[0].1["failure"]["code"], "CONTEXT_WINDOW_EXCEEDED");
    assert_eq!(rig.events("compaction/start")[0].1["trigger"], "overflow");
    let requests = rig.script.requests();
    assert_eq!(requests.len(), 5);
    // The retry is smaller than the refused request and carries the checkpoint.
    let size = |index: usize| {
        serde_json::to_string(
            &requests[index]
                .config
                .messages
                .iter()
                .map(|m| &*m.message)
                .collect::<Vec<_>>(),
        )
        .unwrap()
        .len()
    };
    assert!(size(4) < size(2), "{} vs {}", size(4), size(2));
    let answer = rig.events("assistant/message").pop().unwrap().1;
    assert_eq!(answer["message"]["content"][0]["text"], "recovered");
}

#[tokio::test]
async fn cc_ovf_3_without_overflow_retry_the_original_failure_stands() {
    let rig = rig(
        &script(&[
            json!({"text": "one"}),
            overflow(),
            json!({"expect": {"purpose": "compaction"}, "text": SUMMARY}),
        ]),
        json!({}),
        Some(64_000),
        true,
    )
    .await;
    switch(&rig, "overflow", "retry", false).await;
    rig.turn(&lorem(300)).await;
    let end = rig.turn("second").await;
    let Some(TurnEndReason::Error { failure }) = end else {
        panic!("{end:?}")
    };
    let failure = serde_json::to_value(&failure).unwrap();
    assert_eq!(
        failure["code"], "CONTEXT_WINDOW_EXCEEDED",
        "the original failure"
    );
    assert_eq!(
        rig.events("compaction/end").len(),
        1,
        "the summary still ran"
    );
}

#[tokio::test]
async fn cc_ovf_a_local_refusal_is_recovered_when_the_rebuilt_request_fits_h() {
    // H = 16000 − 1000 = 15000. Automatic summaries are off, so the history reaches
    // the gate whole; the refused request is summarized and fits on retry.
    let rig = rig(
        &script(&[
            json!({"text": "one"}),
            json!({"text": "two"}),
            json!({"expect": {"purpose": "compaction"}, "text": SUMMARY}),
            json!({"text": "fits now"}),
        ]),
        json!({}),
        Some(16_000),
        true,
    )
    .await;
    switch(&rig, "maintenance", "summary", false).await;
    rig.turn(&lorem(400)).await;
    rig.turn(&lorem(400)).await;
    assert_eq!(rig.turn(&lorem(1500)).await, Some(TurnEndReason::Completed));
    let attempts = rig.events("assistant/attempt");
    assert_eq!(attempts[0].1["failure"]["code"], "REQUEST_BUDGET_EXCEEDED");
    assert_eq!(
        rig.script.requests().len(),
        4,
        "the refused request never left"
    );
    let journal = rig.journal().await;
    let outcomes: Vec<&Value> = journal
        .iter()
        .filter(|(key, _)| key.starts_with("call_"))
        .map(|(_, record)| &record["data"]["outcome"])
        .collect();
    assert!(outcomes.contains(&&json!("not-dispatched")));
    assert!(outcomes.contains(&&json!("completed")));
}

#[tokio::test]
async fn cc_ovf_1_retries_are_bounded() {
    // max_overflow_retries 1: a second overflow in the same series is not recovered.
    let rig = rig(
        &script(&[
            json!({"text": "one"}),
            overflow(),
            json!({"expect": {"purpose": "compaction"}, "text": SUMMARY}),
            overflow(),
        ]),
        json!({}),
        Some(64_000),
        true,
    )
    .await;
    rig.turn(&lorem(300)).await;
    let end = rig.turn("second").await;
    assert!(matches!(end, Some(TurnEndReason::Error { .. })), "{end:?}");
    assert_eq!(rig.events("assistant/attempt").len(), 2);
    assert_eq!(rig.events("compaction/start").len(), 1);
}

#[tokio::test]
async fn cc_sum_1_overflow_summary_off_is_journaled_as_control_disabled() {
    // CC-SUM-1: the overflow summary is gated at execution. With `overflow.summary` off
    // the range it would have summarized is journaled as CONTROL_DISABLED, nothing is
    // summarized, and without proof (CC-OVF-3) the provider's failure stands.
    let rig = rig(
        &script(&[json!({"text": "one"}), overflow()]),
        json!({}),
        Some(64_000),
        true,
    )
    .await;
    switch(&rig, "overflow", "summary", false).await;
    rig.turn(&lorem(300)).await;
    let end = rig.turn("second").await;
    let Some(TurnEndReason::Error { failure }) = end else {
        panic!("{end:?}")
    };
    let failure = serde_json::to_value(&failure).unwrap();
    assert_eq!(
        failure["code"], "CONTEXT_WINDOW_EXCEEDED",
        "the original failure"
    );
    assert_eq!(rig.events("assistant/attempt").len(), 1, "no retry");
    assert_eq!(rig.script.requests().len(), 2, "no summary call, no retry");
    assert!(rig.events("compaction/start").is_empty());
    assert!(rig.events("compaction/summary").is_empty());
    // What would have been summarized: everything before the last node ("second").
    let first_prompt = rig.events("user/message")[0].0;
    let first_answer = rig.events("assistant/message")[0].0;
    let actions = rig.actions().await;
    assert_eq!(actions.len(), 1, "{actions:#?}");
    let action = &actions[0];
    assert_eq!(action["action"], "summary");
    assert_eq!(action["reason"], "overflow");
    assert_eq!(action["phase"], "failed");
    assert_eq!(action["outcome"], "failed");
    assert_eq!(
        action["error"],
        json!({"code": "CONTROL_DISABLED", "message": "overflow.summary is off"})
    );
    assert_eq!(action["sourceSeqs"], json!([first_prompt, first_answer]));
    assert!(action["beforeSeq"].as_u64().unwrap() > first_answer);
}

#[tokio::test]
async fn a25_the_retry_count_resets_after_a_committed_reply_in_a_later_turn() {
    // max_overflow_retries 1 (the default). Unlike `cc_ovf_1_retries_are_bounded` (two
    // overflows in one series), the second overflow comes after the recovered answer
    // committed, so it is recovered again.
    let rig = rig(
        &script(&[
            json!({"text": "one"}),
            overflow(),
            json!({"expect": {"purpose": "compaction"}, "text": SUMMARY}),
            json!({"text": "recovered"}),
            overflow(),
            json!({"expect": {"purpose": "compaction"}, "text": SUMMARY}),
            json!({"text": "recovered again"}),
        ]),
        json!({}),
        Some(64_000),
        true,
    )
    .await;
    rig.turn(&lorem(300)).await;
    assert_eq!(rig.turn(&lorem(300)).await, Some(TurnEndReason::Completed));
    assert_eq!(rig.turn(&lorem(300)).await, Some(TurnEndReason::Completed));
    let attempts = rig.events("assistant/attempt");
    assert_eq!(attempts.len(), 2);
    assert!(
        attempts
            .iter()
            .all(|(_, data)| data["failure"]["code"] == "CONTEXT_WINDOW_EXCEEDED")
    );
    let starts = rig.events("compaction/start");
    assert_eq!(starts.len(), 2, "a second summary");
    assert!(starts.iter().all(|(_, data)| data["trigger"] == "overflow"));
    assert_eq!(rig.events("compaction/end").len(), 2);
    assert!(
        rig.events("compaction/end")
            .iter()
            .all(|(_, data)| data.get("error").is_none_or(Value::is_null)),
        "both summaries committed"
    );
    assert_eq!(rig.script.requests().len(), 7, "every scripted reply used");
    let answers: Vec<Value> = rig
        .events("assistant/message")
        .into_iter()
        .map(|(_, data)| data["message"]["content"][0]["text"].clone())
        .collect();
    assert_eq!(
        answers,
        [json!("one"), json!("recovered"), json!("recovered again")]
    );
}

#[tokio::test]
async fn a25_the_retry_count_resets_after_a_committed_reply_within_a_turn() {
    // The same, inside one turn (no idle in between): the recovered answer commits with
    // a tool call, and the next step's overflow is recovered again. Only the committed
    // reply can have reset the count here.
    let rig = rig(
        &script(&[
            json!({"text": "one"}),
            overflow(),
            json!({"expect": {"purpose": "compaction"}, "text": SUMMARY}),
            json!({"tool_calls": [{"name": "context_status", "arguments": {}}]}),
            overflow(),
            json!({"expect": {"purpose": "compaction"}, "text": SUMMARY}),
            json!({"text": "done"}),
        ]),
        json!({}),
        Some(64_000),
        true,
    )
    .await;
    rig.turn(&lorem(300)).await;
    assert_eq!(rig.turn(&lorem(300)).await, Some(TurnEndReason::Completed));
    assert_eq!(
        rig.events("turn/start").len(),
        2,
        "one turn after the first"
    );
    assert_eq!(rig.events("assistant/attempt").len(), 2);
    assert_eq!(rig.events("compaction/start").len(), 2, "a second summary");
    assert_eq!(rig.events("tool/result").len(), 1);
    assert_eq!(rig.script.requests().len(), 7, "every scripted reply used");
    let answer = rig.events("assistant/message").pop().unwrap().1;
    assert_eq!(answer["message"]["content"][0]["text"], "done");
}
