//! Automatic summary passes and what stops them (CC-MNT-5, CC-MNT-6, CC-DEF-6): the
//! pass limit, the no-useful-range memo and its keys, and a requested rest that did
//! nothing while the request is over `H` falling through to the automatic loop.

use ccare_core::kinds::TurnEndReason;
use serde_json::{Value, json};

use ccare_care::texts::{EN_AUTO, EN_REST};
use ccare_care::{REQUEST_SOURCE, STATE_SOURCE};

use crate::rest::{Dump, lorem, note, plugin_messages, rest_call, text};
use crate::rig::{Rig, rig};

fn summary_reply(text: &str) -> String {
    json!({"expect": {"purpose": "compaction"}, "text": text}).to_string()
}

async fn five_turns(config: Value, summaries: &[String]) -> Rig {
    let mut script: Vec<String> = (0..4).map(|_| r#"{"text": "ok"}"#.to_owned()).collect();
    script.extend(summaries.iter().cloned());
    script.push(r#"{"text": "after"}"#.to_owned());
    let rig = rig(&script.join("\n"), config, Some(16_000), true).await;
    for turn in 0..5 {
        assert_eq!(
            rig.turn(&format!("{turn} {}", lorem(400))).await,
            Some(TurnEndReason::Completed),
            "turn {turn}"
        );
    }
    rig
}

/// The summary requests the provider received.
fn summary_calls(rig: &Rig) -> usize {
    rig.script
        .requests()
        .iter()
        .filter(|request| request.config.purpose == ccare_llm::Purpose::Compaction)
        .count()
}

fn last_notice(rig: &Rig) -> Value {
    plugin_messages(rig, STATE_SOURCE).pop().unwrap()
}

// Five turns of ~2,650 tokens on a 16k window (H 15,000, S = L = 12,800): the fifth
// boundary is at 14,643 and arms the controller. A first summary of ~7,900 tokens
// leaves 13,535, still above L, so a second pass runs over the checkpoint
// (basic-prefix) and ends within the target.

#[tokio::test]
async fn a26_cc_mnt_6_without_max_passes_the_limit_is_two() {
    let rig = five_turns(
        json!({}),
        &[summary_reply(&lorem(1500)), summary_reply(&lorem(100))],
    )
    .await;
    let actions = rig.actions().await;
    let rules: Vec<(&Value, &Value)> = actions
        .iter()
        .map(|action| (&action["selection"]["rule"], &action["outcome"]))
        .collect();
    assert_eq!(
        rules,
        [
            (&json!("fresh-summary"), &json!("committed")),
            (&json!("basic-prefix"), &json!("committed")),
        ]
    );
    assert_eq!(actions[0]["beforeInput"], 14_643);
    assert_eq!(actions[0]["afterInput"], 13_535, "still above L = 12,800");
    assert_eq!(actions[1]["beforeInput"], 13_535);
    // CC-SUM-5 coverage in the journal: the second pass summarized the first's
    // checkpoint, so it stands for the same leaves one summary deeper.
    assert_eq!(actions[0]["coverage"]["depth"], 0);
    // CC-JNL-3: the replace generation moved, and the meter's own count shrank.
    assert!(actions[0]["afterGeneration"].as_u64() > actions[0]["beforeGeneration"].as_u64());
    assert!(actions[0]["heuristicSaving"].as_u64().unwrap() > 1_000);
    assert_eq!(actions[1]["coverage"]["depth"], 1);
    assert_eq!(
        actions[1]["coverage"]["parentCheckpointSeqs"],
        json!([actions[0]["replacements"][0]["newSeq"]])
    );
    assert_eq!(
        actions[1]["coverage"]["leafSeqs"],
        actions[0]["coverage"]["leafSeqs"]
    );
    assert_eq!(summary_calls(&rig), 2);
    let notice = last_notice(&rig);
    assert_eq!(
        notice["source"]["contextCareTrace"]["outcome"],
        "auto-within-target"
    );
}

#[tokio::test]
async fn a26_cc_mnt_6_max_passes_one_stops_after_one_pass_above_the_target() {
    let rig = five_turns(json!({"max_passes": 1}), &[summary_reply(&lorem(1500))]).await;
    let actions = rig.actions().await;
    assert_eq!(actions.len(), 1, "one pass");
    assert_eq!(actions[0]["afterInput"], 13_535);
    assert_eq!(summary_calls(&rig), 1);
    let notice = last_notice(&rig);
    assert_eq!(
        notice["source"]["contextCareTrace"]["outcome"],
        "auto-above-target"
    );
    assert!(text(&notice).contains(EN_AUTO.above_target));
    assert!(
        rig.care
            .ui_sample(rig.session.id())
            .is_some_and(|sample| sample.armed),
        "still armed above L"
    );
}

/// Rewrites the user message at `seq` in place (a replace over it citing it), as an
/// edit of the history would.
fn rewrite(rig: &Rig, seq: u64, text: &str) {
    let edited = ccare_core::Message::from_blocks(vec![ccare_core::ContentBlock::text(text)]);
    rig.session
        .append(
            ccare_core::EventDraft::typed(&ccare_core::kinds::UserMessage { message: edited })
                .unwrap()
                .with_surface(ccare_core::SurfaceOp::Replace {
                    start_seq: seq,
                    end_seq: seq,
                })
                .with_sources(vec![seq]),
        )
        .unwrap();
}

fn dump_call() -> String {
    json!({"tool_calls": [{"name": "dump", "arguments": {}}]}).to_string()
}

#[tokio::test]
async fn a26_cc_mnt_5_a_memo_hit_stops_the_loop_with_no_call() {
    // The fifth prompt (shorter, ~1,660 tokens) arms the controller; the summary comes
    // back larger than what it replaces (SUMMARY_NOT_SMALLER, memoized). The model
    // then calls a small tool twice: the log grows and a new notice may land, but the
    // retained tail still begins at turn 4's prompt, so both later boundaries select
    // the same range and the memo skips them without a call.
    let mut script: Vec<String> = (0..4).map(|_| r#"{"text": "ok"}"#.to_owned()).collect();
    script.extend([
        summary_reply(&lorem(3000)),
        dump_call(),
        dump_call(),
        r#"{"text": "after"}"#.to_owned(),
    ]);
    let rig = rig(&script.join("\n"), json!({}), Some(16_000), true).await;
    rig.host.add_tool(std::sync::Arc::new(Dump(20))).unwrap();
    for turn in 0..4 {
        rig.turn(&format!("{turn} {}", lorem(400))).await;
    }
    assert_eq!(
        rig.turn(&format!("4 {}", lorem(250))).await,
        Some(TurnEndReason::Completed)
    );
    assert_eq!(summary_calls(&rig), 1, "the later boundaries made no call");
    assert_eq!(
        rig.events("tool/result").len(),
        2,
        "three boundaries while armed"
    );
    let actions = rig.actions().await;
    assert_eq!(actions.len(), 1, "a memo hit is no action");
    assert_eq!(actions[0]["phase"], "no-useful-range");
    assert_eq!(actions[0]["error"]["code"], "SUMMARY_NOT_SMALLER");
    assert_eq!(
        actions[0]["afterGeneration"], actions[0]["beforeGeneration"],
        "nothing replaced"
    );
    let ends = rig.events("compaction/end");
    assert_eq!(ends.len(), 1);
    assert!(rig.events("compaction/summary").is_empty(), "history kept");
    assert!(
        rig.care
            .ui_sample(rig.session.id())
            .is_some_and(|sample| sample.armed)
    );
}

#[tokio::test]
async fn a22_cc_mnt_5_the_memo_sequence_skip_skip_run_run_makes_three_calls() {
    // As above: the fifth boundary's summary is not smaller and is memoized (call 1);
    // a step later only the log and the notice changed: skipped. The reply of the
    // next step reports 3% more input than the meter estimated, so the scale moves
    // from 1 to 1.03: the same selection runs again (call 2). Then, between turns, the
    // task text of turn 0 is rewritten in place: it runs once more (call 3).
    let mut script: Vec<String> = (0..4).map(|_| r#"{"text": "ok"}"#.to_owned()).collect();
    // The request after the second boundary is estimated at 14,033 raw tokens.
    let rescaled = json!({
        "tool_calls": [{"name": "dump", "arguments": {}}],
        "usage": {"input": 14_454},
    })
    .to_string();
    script.extend([
        summary_reply(&lorem(3000)),
        dump_call(),
        rescaled,
        summary_reply(&lorem(3000)),
        r#"{"text": "after"}"#.to_owned(),
        summary_reply(&lorem(3000)),
        r#"{"text": "done"}"#.to_owned(),
    ]);
    let rig = rig(&script.join("\n"), json!({}), Some(16_000), true).await;
    rig.host.add_tool(std::sync::Arc::new(Dump(20))).unwrap();
    for turn in 0..4 {
        rig.turn(&format!("{turn} {}", lorem(400))).await;
    }
    assert_eq!(
        rig.turn(&format!("4 {}", lorem(250))).await,
        Some(TurnEndReason::Completed)
    );
    assert_eq!(summary_calls(&rig), 2, "run, skip, run");
    // The task text of turn 0 changes (same size), as an edit of the history would.
    let (task_seq, task) = rig.events("user/message")[0].clone();
    assert!(
        task["message"]["content"][0]["text"]
            .as_str()
            .unwrap()
            .starts_with("0 ")
    );
    rewrite(&rig, task_seq, &format!("X {}", lorem(400)));
    assert_eq!(rig.turn("go on").await, Some(TurnEndReason::Completed));
    assert_eq!(summary_calls(&rig), 3, "skip, skip, run, run: three calls");
    let actions = rig.actions().await;
    let phases: Vec<&Value> = actions.iter().map(|action| &action["phase"]).collect();
    assert_eq!(phases, [&json!("no-useful-range"); 3]);
    let keys: std::collections::BTreeSet<&str> = actions
        .iter()
        .map(|action| action["proposalKey"].as_str().unwrap())
        .collect();
    assert_eq!(keys.len(), 3, "each run had a new key");
    // The same span each time: only the scale, then the task's content changed (the
    // edited task carries the replacement's seq, newer than every seq after it).
    assert_eq!(actions[0]["sourceSeqs"], actions[1]["sourceSeqs"]);
    let mut third = actions[2]["sourceSeqs"].as_array().unwrap().clone();
    assert!(third[0].as_u64().unwrap() > task_seq, "the edited task");
    third[0] = json!(task_seq);
    assert_eq!(Value::Array(third), actions[1]["sourceSeqs"]);
}

#[tokio::test]
async fn cc_def_6_a_rest_that_did_nothing_over_h_falls_through_to_the_automatic_loop() {
    // Four turns (~11,600 tokens, below S); then the model asks for a rest and dumps a
    // long result in the same step, which takes the next request over H. The rest
    // finds nothing to do (R5: with min_fresh_tokens this high no fresh range exists,
    // and a requested rest has no fallback), so the automatic loop runs after it
    // (basic-prefix) and the notice reports both outcomes.
    let both = json!({"tool_calls": [
        {"name": "context_rest", "arguments": {"note": note(1200)}},
        {"name": "dump", "arguments": {}},
    ]})
    .to_string();
    let mut script: Vec<String> = (0..4).map(|_| r#"{"text": "ok"}"#.to_owned()).collect();
    script.extend([
        both,
        summary_reply(crate::rest::SUMMARY),
        r#"{"text": "rested"}"#.to_owned(),
    ]);
    let rig = rig(
        &script.join("\n"),
        json!({"min_fresh_tokens": 1_000_000}),
        Some(16_000),
        true,
    )
    .await;
    rig.host
        .add_tool(std::sync::Arc::new(Dump(16_000)))
        .unwrap();
    for turn in 0..4 {
        rig.turn(&format!("{turn} {}", lorem(400))).await;
    }
    assert_eq!(rig.turn("rest now").await, Some(TurnEndReason::Completed));
    let notice = last_notice(&rig);
    let trace = &notice["source"]["contextCareTrace"];
    assert_eq!(trace["trigger"], "rest-result");
    assert_eq!(trace["outcome"], "no-proposal");
    assert_eq!(trace["automaticOutcome"], "auto-within-target");
    let body = text(&notice);
    let rest_line = body.find(EN_REST.outcome_no_proposal).unwrap();
    let auto_line = body.find(EN_AUTO.within_target).unwrap();
    assert!(rest_line < auto_line, "the rest's outcome first: {body}");
    let actions = rig.actions().await;
    assert_eq!(actions.len(), 1);
    assert_eq!(actions[0]["reason"], "automatic");
    assert_eq!(actions[0]["selection"]["rule"], "basic-prefix");
    assert_eq!(actions[0]["outcome"], "committed");
    assert!(
        actions[0]["beforeInput"].as_u64().unwrap() > 15_000,
        "over H"
    );
    // The rest message stays (only a deep rest withdraws it), and nothing was refused.
    assert_eq!(plugin_messages(&rig, REQUEST_SOURCE).len(), 1);
    assert!(
        rig.journal()
            .await
            .iter()
            .all(|(_, record)| record["data"]["outcome"] != "not-dispatched")
    );
}

#[tokio::test]
async fn cc_sum_5_a_selection_that_begins_with_an_edited_message_still_gets_smaller() {
    // The first prompt is rewritten in place, so the selection's first node carries a
    // newer seq than the nodes after it; the surface order, not the seq, bounds it.
    let script = [
        r#"{"text": "read it"}"#.to_owned(),
        rest_call(json!({"note": note(1200)})),
        summary_reply(crate::rest::SUMMARY),
        r#"{"text": "continuing"}"#.to_owned(),
    ]
    .join("\n");
    let rig = rig(&script, json!({"retain_tokens": 100}), Some(64_000), true).await;
    rig.turn(&lorem(400)).await;
    let (task_seq, _) = rig.events("user/message")[0].clone();
    rewrite(&rig, task_seq, &format!("edited {}", lorem(400)));
    rig.turn("now rest").await;
    let actions = rig.actions().await;
    assert_eq!(actions.len(), 1);
    assert_eq!(
        actions[0]["outcome"], "committed",
        "{}",
        actions[0]["error"]
    );
    assert!(actions[0]["afterInput"].as_u64() < actions[0]["beforeInput"].as_u64());
    assert_eq!(
        last_notice(&rig)["source"]["contextCareTrace"]["outcome"],
        "committed"
    );
}
