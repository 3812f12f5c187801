//! CC-EXT-3 over HTTP: `GET /context-care/actions/{op}` (what a compaction replaced
//! beside its checkpoint text) and `POST /context-care/actions/{op}/undo` (through the
//! session's actor): a deep rest the model asks for on the fake provider, its detail,
//! its undo (200, the prompt live again in the export), a second undo (409
//! `ALREADY_UNDONE`), an unknown action (404); then an automatic compaction at the
//! soft threshold, whose undo would bring the request back over S (409
//! `UNDO_OVER_SOFT_THRESHOLD`).

use ccare_fake_openai::{Reply, Script};
use reqwest::Method;
use serde_json::{Value, json};

use crate::events::{Sse, create_session, export, export_events, prompt};
use crate::rig::{Rig, error_of, ok_json};

/// A prompt of roughly 2 000 tokens.
fn long_message(turn: usize) -> String {
    format!(
        "Turn {turn}: please read this. {}",
        "The quick brown fox jumps over the lazy dog while the parser reads its input. "
            .repeat(100)
    )
}

async fn undo(rig: &Rig, id: &str, op: &str) -> reqwest::Response {
    rig.authed(
        Method::POST,
        &format!("/context-care/actions/{op}/undo?sessionId={id}"),
    )
    .send()
    .await
    .unwrap()
}

async fn actions(rig: &Rig, id: &str) -> Vec<Value> {
    let page: Value = rig
        .get_json(&format!("/context-care/actions?sessionId={id}&limit=200"))
        .await;
    page["actions"].as_array().unwrap().clone()
}

fn live_user_texts(export: &str) -> Vec<String> {
    // Replays the surface ops of the exported log: the texts of live user messages.
    let mut surface: Vec<(u64, Option<String>)> = Vec::new();
    let mut shadowed: std::collections::HashMap<u64, Vec<(u64, Option<String>)>> =
        std::collections::HashMap::new();
    for line in export_events(export).lines() {
        let event: Value = serde_json::from_str(line).unwrap();
        let seq = event["seq"].as_u64().unwrap();
        let text = (event["type"] == "user/message")
            .then(|| {
                event["data"]["message"]["content"][0]["text"]
                    .as_str()
                    .map(str::to_owned)
            })
            .flatten();
        match event["surface"]["op"].as_str() {
            Some("append") => surface.push((seq, text)),
            Some("replace") => {
                let start = event["surface"]["start_seq"].as_u64().unwrap();
                let end = event["surface"]["end_seq"].as_u64().unwrap();
                let a = surface.iter().position(|(s, _)| *s == start).unwrap();
                let b = surface.iter().position(|(s, _)| *s == end).unwrap();
                let removed: Vec<_> = surface.splice(a..=b, [(seq, text)]).collect();
                shadowed.insert(seq, removed);
            }
            Some("restore") => {
                let target = event["surface"]["replace_seq"].as_u64().unwrap();
                let at = surface.iter().position(|(s, _)| *s == target).unwrap();
                surface.splice(at..=at, shadowed.remove(&target).unwrap());
            }
            _ => {}
        }
    }
    surface.into_iter().filter_map(|(_, text)| text).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cc_ext_3_a_deep_rest_is_shown_then_undone_once_over_http() {
    let rig = Rig::start().await;
    let recovery = format!("search the log for 'fox'. {}", "r".repeat(1000));
    let arguments = json!({"note": "n".repeat(1200), "deep": true, "recovery": recovery});
    rig.fake.push(Reply::text("read it"));
    rig.fake.push(Reply::Chunks(
        Script::new()
            .tool_call(
                0,
                Some("call_rest"),
                Some("context_rest"),
                arguments.to_string(),
            )
            .finish("tool_calls"),
    ));
    rig.fake.push(Reply::text("continuing"));
    let id = create_session(&rig).await;
    let mut sse = Sse::open(&rig, &format!("/api/sessions/{id}/events"), None).await;
    let first = long_message(0);
    prompt(&rig, &id, &first).await;
    sse.until_idle().await;
    prompt(&rig, &id, "now rest deeply").await;
    sse.until_idle().await;
    let before = export(&rig, &id).await;
    assert!(
        !live_user_texts(&before).contains(&first),
        "the prompt is shadowed"
    );

    let deep = actions(&rig, &id)
        .await
        .into_iter()
        .find(|record| record["data"]["action"] == "deep-rest")
        .unwrap();
    assert_eq!(deep["data"]["outcome"], "committed");
    let op = deep["data"]["operationId"].as_str().unwrap().to_owned();

    // The detail: the shadowed prompt beside the checkpoint's text.
    let detail_path = format!("/context-care/actions/{op}?sessionId={id}");
    let detail: Value = rig.get_json(&detail_path).await;
    assert_eq!(detail["operationId"], json!(op));
    assert_eq!(detail["action"], "deep-rest");
    assert_eq!(detail["reason"], "requested");
    assert_eq!(detail["undoneAtSeq"], Value::Null);
    assert_eq!(detail["beforeInput"], deep["data"]["beforeInput"]);
    let replaced = &detail["replacements"].as_array().unwrap()[0];
    assert_eq!(replaced["live"], json!(true));
    let shadowed = replaced["shadowed"].as_array().unwrap();
    assert!(
        shadowed
            .iter()
            .any(|event| event["kind"] == "user/message" && event["text"] == json!(first)),
        "{shadowed:?}"
    );
    let checkpoint = replaced["checkpoint"]["text"].as_str().unwrap();
    assert!(checkpoint.ends_with(&recovery), "{checkpoint}");
    assert_eq!(export(&rig, &id).await, before, "reading appended nothing");

    // The undo, once durable.
    let outcome: Value = ok_json(undo(&rig, &id, &op).await).await;
    assert_eq!(outcome["undoes"], json!(op));
    assert_eq!(outcome["restoredSeqs"], json!([replaced["newSeq"]]));
    let undo_seq = outcome["undoSeqs"][0].as_u64().unwrap();
    assert!(outcome["afterInput"].as_u64() > outcome["beforeInput"].as_u64());
    let after = export(&rig, &id).await;
    assert!(after.starts_with(before.trim_end()), "nothing deleted");
    assert!(
        live_user_texts(&after).contains(&first),
        "the prompt is live again"
    );
    let detail: Value = rig.get_json(&detail_path).await;
    assert_eq!(detail["undoneAtSeq"], json!(undo_seq));
    assert_eq!(detail["replacements"][0]["live"], json!(false));
    let journaled = actions(&rig, &id).await;
    let record = journaled
        .iter()
        .find(|record| record["data"]["action"] == "undo")
        .unwrap();
    assert_eq!(record["data"]["undoes"], json!(op));
    assert_eq!(record["data"]["operationId"], outcome["operationId"]);

    // Twice: refused, nothing appended.
    let (status, code, message) = error_of(undo(&rig, &id, &op).await).await;
    assert_eq!((status, code.as_str()), (409, "ALREADY_UNDONE"));
    assert_eq!(
        message,
        format!("action {op} was already undone (seq {undo_seq})")
    );
    assert_eq!(export(&rig, &id).await, after);
    // Unknown action and unknown session.
    let (status, code, _) = error_of(undo(&rig, &id, "nope").await).await;
    assert_eq!((status, code.as_str()), (404, "unknown-action"));
    let (status, code, _) = error_of(
        rig.get(&format!("/context-care/actions/nope?sessionId={id}"))
            .await,
    )
    .await;
    assert_eq!((status, code.as_str()), (404, "unknown-action"));
    let (status, code, _) =
        error_of(undo(&rig, "01900000-0000-7000-8000-000000000000", &op).await).await;
    assert_eq!((status, code.as_str()), (404, "session-unavailable"));
}

/// The summary the fake model writes for a compaction request.
const SUMMARY: &str = "## Primary Request and Intent\n- read the seeded history\n## Key Technical Concepts\n(none)\n## Files and Code\n(none)\n## Errors and Fixes\n(none)\n## Pending Jobs\n(none)\n## Current Work\n- reading\n## Next Step\n- continue\n## Critical Context\n(none)";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cc_ext_3_undoing_an_automatic_compaction_over_the_soft_threshold_is_409() {
    let rig = Rig::start().await;
    rig.fake.respond_with(|request| {
        if request.header("x-ccare-purpose") == Some("compaction") {
            Reply::Chunks(
                Script::new()
                    .text(SUMMARY)
                    .usage(ccare_fake_openai::openai_usage(5000, 0, 120, 0))
                    .finish("stop"),
            )
        } else {
            Reply::text("noted")
        }
    });
    let id = create_session(&rig).await;
    let mut sse = Sse::open(&rig, &format!("/api/sessions/{id}/events"), None).await;
    let mut summary = None;
    for turn in 0..10 {
        prompt(&rig, &id, &long_message(turn)).await;
        sse.until_idle().await;
        summary = actions(&rig, &id).await.into_iter().find(|record| {
            record["data"]["action"] == "summary" && record["data"]["outcome"] == "committed"
        });
        if summary.is_some() {
            break;
        }
    }
    let summary = summary.expect("context care compacted within 10 turns");
    let op = summary["data"]["operationId"].as_str().unwrap().to_owned();
    let detail: Value = rig
        .get_json(&format!("/context-care/actions/{op}?sessionId={id}"))
        .await;
    assert_eq!(detail["action"], "summary");
    assert_eq!(
        detail["summaryUsage"]["output"],
        json!(120),
        "{}",
        detail["summaryUsage"]
    );
    assert_eq!(detail["summaryUsage"]["input"], json!(5000));
    assert!(
        detail["coverage"]["leafSeqs"]
            .as_array()
            .is_some_and(|seqs| !seqs.is_empty()),
        "{detail}"
    );
    let checkpoint = detail["replacements"][0]["checkpoint"]["text"]
        .as_str()
        .unwrap();
    assert!(checkpoint.contains("<compacted-summary>"), "{checkpoint}");
    let before = export(&rig, &id).await;
    let (status, code, message) = error_of(undo(&rig, &id, &op).await).await;
    assert_eq!(
        (status, code.as_str()),
        (409, "UNDO_OVER_SOFT_THRESHOLD"),
        "{message}"
    );
    assert!(
        message.ends_with("over the soft threshold 12800; history stays compacted"),
        "{message}"
    );
    assert_eq!(export(&rig, &id).await, before, "nothing appended");
}
