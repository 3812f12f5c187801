//! `context_rest` (CC-TOOL-2 .. CC-TOOL-4) and the rest outcome at its boundary
//! (CC-BND-2), with the status controls of CC-CTL-3: argument checks on the spec's
//! rules, then real turns where the model calls the tool through the loop.

use ccare_agent::ToolFailure;
use ccare_agent::controls::{Patch, PatchOp};
use ccare_care::rest_tool::{advertised_max, check_rest_arguments, ecmascript_trim, rest_length};
use ccare_care::texts::{EN, EN_REST, ZH_REST};
use ccare_care::{REQUEST_SOURCE, STATE_SOURCE};
use ccare_core::Locale;
use ccare_core::kinds::TurnEndReason;
use serde_json::{Value, json};

use crate::rig::{Rig, rig};

fn check(arguments: Value) -> Result<ccare_care::rest_tool::RestRequest, ToolFailure> {
    check_rest_arguments(&arguments, 1000, 10_000, Locale::En)
}

pub(crate) fn note(length: usize) -> String {
    "n".repeat(length)
}

#[test]
fn cc_tool_2_the_advertised_maximum() {
    assert_eq!(advertised_max(1000, 10_000), 8000);
    assert_eq!(advertised_max(9000, 10_000), 9000);
    assert_eq!(advertised_max(100, 5000), 5000);
}

#[test]
fn cc_tool_3_lengths_are_utf16_units_after_an_ecmascript_trim() {
    assert_eq!(rest_length("\u{FEFF} \t\n abc \u{2028}\u{3000}"), 3);
    assert_eq!(
        rest_length("😀"),
        2,
        "a non-BMP character is two UTF-16 units"
    );
    assert_eq!(rest_length("中文"), 2);
    assert_eq!(
        ecmascript_trim("\u{85}x\u{85}"),
        "\u{85}x\u{85}",
        "NEL is not ECMAScript white space"
    );
}

#[test]
fn cc_tool_3_checks_in_order_with_the_advertised_range() {
    let error = check(json!({"note": note(1200), "extra": 1})).unwrap_err();
    assert_eq!(error.code, "INVALID_ARGUMENTS");
    assert_eq!(error.message, EN_REST.error_unknown_key);
    assert!(
        ["note", "deep", "recovery"]
            .iter()
            .all(|key| error.message.contains(key))
    );

    let error = check(json!({"note": note(999)})).unwrap_err();
    assert_eq!(
        error.message,
        "The note must be between 1000 and 8000 characters; it has 999."
    );
    // The tolerance up to max_note_chars is accepted but never shown.
    assert!(check(json!({"note": note(10_000)})).is_ok());
    let error = check(json!({"note": note(10_001)})).unwrap_err();
    assert!(error.message.contains("1000 and 8000"), "{}", error.message);
    assert!(error.message.contains("10001"), "{}", error.message);
    // Surrounding white space does not count; an emoji counts twice.
    assert!(check(json!({"note": format!("   {}   ", note(999))})).is_err());
    assert!(check(json!({"note": format!("{}😀", note(998))})).is_ok());
    // A non-string note, or no object at all, counts as N = 0.
    assert!(
        check(json!({"note": 5}))
            .unwrap_err()
            .message
            .ends_with("it has 0.")
    );
    let error = check(json!("just text")).unwrap_err();
    assert!(error.message.ends_with("it has 0."), "{}", error.message);
    assert!(check(Value::Null).is_err());

    let error = check(json!({"note": note(1200), "recovery": 7})).unwrap_err();
    assert!(
        error.message.starts_with("The recovery path must be"),
        "{}",
        error.message
    );
    let error = check(json!({"note": note(1200), "recovery": "grep for it"})).unwrap_err();
    assert!(error.message.ends_with("it has 11."), "{}", error.message);

    let error = check(json!({"note": note(1200), "deep": true})).unwrap_err();
    assert_eq!(error.message, EN_REST.error_deep_needs_recovery);
    // Only the literal `true` makes a rest deep.
    let request = check(json!({"note": note(1200), "deep": "true"})).unwrap();
    assert!(!request.deep);
    let request = check(json!({"note": note(1200), "deep": true, "recovery": note(1000)})).unwrap();
    assert!(request.deep);
}

#[test]
fn cc_gen_2_the_chinese_errors_fill_the_same_numbers() {
    let error = check_rest_arguments(&json!({"note": "短"}), 1000, 10_000, Locale::Zh).unwrap_err();
    assert_eq!(
        error.message,
        "笔记长度必须在 1000 到 8000 个字符之间；当前为 1。"
    );
    assert_ne!(ZH_REST.scheduled, EN_REST.scheduled);
}

pub(crate) fn rest_call(arguments: Value) -> String {
    json!({"tool_calls": [{"name": "context_rest", "arguments": arguments}]}).to_string()
}

fn tool_results(rig: &Rig) -> Vec<Value> {
    rig.events("tool/result")
        .into_iter()
        .map(|(_, data)| data["message"]["content"][0].clone())
        .collect()
}

pub(crate) fn plugin_messages(rig: &Rig, kind: &str) -> Vec<Value> {
    rig.user_messages()
        .into_iter()
        .filter(|message| message["source"]["kind"] == kind)
        .collect()
}

pub(crate) fn text(message: &Value) -> &str {
    message["content"][0]["text"].as_str().unwrap()
}

#[tokio::test]
async fn cc_tool_4_a_rest_is_scheduled_then_reported_at_the_next_boundary() {
    let handoff = format!("Goal: ship the parser. {}", note(1000));
    let script = [
        rest_call(json!({"note": handoff})),
        r#"{"text": "resting done"}"#.to_owned(),
    ]
    .join("\n");
    let rig = rig(&script, json!({}), Some(16_000), true).await;
    assert_eq!(
        rig.turn("please checkpoint").await,
        Some(TurnEndReason::Completed)
    );

    // A10: the advertised schema has a minimum and never a maximum.
    let requests = rig.script.requests();
    let tool = requests[0]
        .config
        .tools
        .iter()
        .find(|tool| tool.name == "context_rest")
        .unwrap();
    let schema = &tool.input_schema;
    assert_eq!(schema["properties"]["note"]["minLength"], 1000);
    assert!(!schema.to_string().contains("maxLength"), "{schema}");
    assert_eq!(schema["required"], json!(["note"]));
    assert_eq!(schema["additionalProperties"], false);
    let note_help = schema["properties"]["note"]["description"]
        .as_str()
        .unwrap();
    assert!(note_help.contains("1000 and 8000"), "{note_help}");

    let results = tool_results(&rig);
    assert_eq!(results.len(), 1);
    let result = &results[0];
    assert_eq!(result["is_error"], false, "{result}");
    assert_eq!(
        result["content"][0]["text"],
        format!("{} {}", EN_REST.scheduled, EN_REST.scheduled_then_continue)
    );

    let requests = plugin_messages(&rig, REQUEST_SOURCE);
    assert_eq!(requests.len(), 1);
    let request = &requests[0];
    assert_eq!(text(request), format!("{}\n{handoff}", EN_REST.note_header));
    assert_eq!(request["source"]["form"], "notice");
    assert_eq!(
        request["source"]["plugin"], "context-care",
        "A11: the producer"
    );
    assert_eq!(request["source"]["summary"], "History compaction requested");
    assert_eq!(request["source"]["contextRest"], json!({"deep": false}));
    assert_eq!(
        request["source"]["contextCareTrace"],
        json!({"trigger": "context_rest", "deep": false})
    );

    // The boundary that carried the request reports on it, in the last message.
    let states = plugin_messages(&rig, STATE_SOURCE);
    let report = states.last().unwrap();
    let users = rig.user_messages();
    let position = |wanted: &Value| users.iter().position(|message| message == wanted).unwrap();
    assert_eq!(
        position(report),
        position(request) + 1,
        "the notice ends the batch"
    );
    let trace = &report["source"]["contextCareTrace"];
    assert_eq!(trace["trigger"], "rest-result");
    assert_eq!(trace["outcome"], "no-proposal");
    let lines: Vec<&str> = text(report).lines().collect();
    assert!(lines.contains(&EN_REST.outcome_no_proposal), "{lines:#?}");
    assert!(
        lines.contains(&EN.estimate),
        "a requested rest reports: {lines:#?}"
    );
}

#[tokio::test]
async fn cc_tool_3_a_second_rest_while_one_is_pending_is_already_scheduled() {
    let arguments = json!({"note": note(1200)});
    let both = json!({"tool_calls": [
        {"name": "context_rest", "arguments": arguments},
        {"name": "context_rest", "arguments": arguments},
    ]})
    .to_string();
    let script = [both, r#"{"text": "ok"}"#.to_owned()].join("\n");
    let rig = rig(&script, json!({}), Some(16_000), true).await;
    rig.turn("rest twice").await;
    let results = tool_results(&rig);
    assert_eq!(results.len(), 2);
    assert_eq!(results[0]["is_error"], false);
    assert_eq!(results[1]["is_error"], true);
    let failure = results[1]["content"][0]["text"].as_str().unwrap();
    assert!(failure.contains("ALREADY_SCHEDULED"), "{failure}");
    assert!(
        failure.contains(EN_REST.error_already_scheduled),
        "{failure}"
    );
    assert_eq!(
        plugin_messages(&rig, REQUEST_SOURCE).len(),
        1,
        "one rest queued"
    );
}

#[tokio::test]
async fn cc_bnd_2_r4_without_a_provider_the_rest_is_not_performed() {
    let script = [
        rest_call(json!({"note": note(1200)})),
        r#"{"text": "ok"}"#.to_owned(),
    ]
    .join("\n");
    let rig = rig(&script, json!({}), Some(16_000), false).await;
    rig.turn("rest").await;
    let request = plugin_messages(&rig, REQUEST_SOURCE).pop().unwrap();
    assert_eq!(request["source"]["summary"], "History compaction requested");
    let report = plugin_messages(&rig, STATE_SOURCE).pop().unwrap();
    assert_eq!(
        report["source"]["contextCareTrace"]["outcome"],
        "no-provider"
    );
    assert!(
        text(&report)
            .lines()
            .any(|line| line == EN_REST.outcome_no_provider)
    );
    assert!(rig.events("compaction/start").is_empty());
}

#[tokio::test]
async fn cc_deep_2_a_deep_rest_replaces_the_history_with_the_handoff_and_no_model_call() {
    let recovery = format!(
        "search the log for 'lorem'; notes in notes.md. {}",
        note(1000)
    );
    let script = [
        r#"{"text": "read it"}"#.to_owned(),
        rest_call(json!({"note": note(1200), "deep": true, "recovery": recovery})),
        r#"{"text": "continuing"}"#.to_owned(),
    ]
    .join("\n");
    let rig = rig(&script, json!({}), Some(64_000), true).await;
    rig.turn(&lorem(800)).await;
    rig.turn("now rest deeply").await;
    // R3: the checkpoint carries the note and recovery; the rest message left the batch.
    assert!(
        plugin_messages(&rig, REQUEST_SOURCE).is_empty(),
        "withdrawn"
    );
    let starts = rig.events("compaction/start");
    assert_eq!(starts.len(), 1);
    assert_eq!(starts[0].1["trigger"], "deep-rest");
    let summaries = rig.events("compaction/summary");
    assert_eq!(summaries[0].1["provider"], "s");
    let checkpoint = rig
        .user_messages()
        .into_iter()
        .find(|message| message["source"]["kind"] == "compact-checkpoint")
        .unwrap();
    let handoff = text(&checkpoint);
    assert!(handoff.starts_with(EN_REST.note_header), "{handoff}");
    assert!(handoff.ends_with(&recovery));
    assert_eq!(rig.events("compaction/end").len(), 1);
    assert_eq!(rig.events("compaction/end")[0].1.get("error"), None);
    // The prompt is gone from the surface (still in the log); no summary call was made.
    let view = rig.session.derived_view();
    assert!(
        !view
            .messages
            .iter()
            .any(|derived| ccare_core::ContentBlock::text(lorem(800)) == derived.message.content[0]),
        "the prompt is shadowed"
    );
    assert_eq!(rig.script.requests().len(), 3, "no summary request");
    let last = rig.script.requests().pop().unwrap();
    let texts: Vec<String> = last
        .config
        .messages
        .iter()
        .filter_map(|message| match &message.message.content[0] {
            ccare_core::ContentBlock::Text(text) => Some(text.text.clone()),
            _ => None,
        })
        .collect();
    assert!(
        texts.iter().any(|text| text == handoff),
        "the next request carries the handoff"
    );
    let report = plugin_messages(&rig, STATE_SOURCE).pop().unwrap();
    assert_eq!(report["source"]["contextCareTrace"]["outcome"], "deep-done");
    // Journaled as a committed deep rest.
    let journal = rig.journal().await;
    let action = journal
        .iter()
        .find(|(key, _)| key.starts_with("action_"))
        .map(|(_, record)| record["data"].clone())
        .unwrap();
    assert_eq!(action["action"], "deep-rest");
    assert_eq!(action["outcome"], "committed");
    assert!(action["afterInput"].as_u64() < action["beforeInput"].as_u64());
}

pub(crate) const SUMMARY: &str = "## Primary Request and Intent\n- read the lorem text\n## Key Technical Concepts\n(none)\n## Files and Code\n(none)\n## Errors and Fixes\n(none)\n## Pending Jobs\n(none)\n## Current Work\n- resting\n## Next Step\n- continue\n## Critical Context\n(none)";

#[tokio::test]
async fn cc_sum_5_a_requested_summary_commits_a_checkpoint_and_keeps_the_rest_message() {
    let summary = json!({"expect": {"purpose": "compaction"}, "text": SUMMARY}).to_string();
    let script = [
        r#"{"text": "read it"}"#.to_owned(),
        rest_call(json!({"note": note(1200)})),
        summary,
        r#"{"text": "continuing"}"#.to_owned(),
    ]
    .join("\n");
    let rig = rig(&script, json!({"retain_tokens": 100}), Some(64_000), true).await;
    rig.turn(&lorem(400)).await;
    assert_eq!(rig.turn("now rest").await, Some(TurnEndReason::Completed));
    // The log of one committed summary (CC-SUM-5), in order.
    let kinds = rig.compaction_kinds();
    assert_eq!(
        kinds,
        ["compaction/start", "compaction/summary", "compaction/end"]
    );
    let summary_event = &rig.events("compaction/summary")[0].1;
    assert_eq!(summary_event["summary"], SUMMARY);
    let checkpoint = rig
        .user_messages()
        .into_iter()
        .find(|message| message["source"]["kind"] == "compact-checkpoint")
        .unwrap();
    assert_eq!(
        checkpoint["content"][0]["text"],
        ccare_care::texts::CHECKPOINT_FRAMING
    );
    assert_eq!(
        checkpoint["content"][1]["text"],
        format!("<compacted-summary>\n{SUMMARY}\n</compacted-summary>")
    );
    assert_eq!(checkpoint["source"]["trace"]["reason"], "requested");
    // R7: the rest message stays verbatim, the notice reports the commit.
    assert_eq!(plugin_messages(&rig, REQUEST_SOURCE).len(), 1);
    let report = plugin_messages(&rig, STATE_SOURCE).pop().unwrap();
    assert_eq!(report["source"]["contextCareTrace"]["outcome"], "committed");
    // The summary request went out with purpose compaction, carrying the transcript.
    let requests = rig.script.requests();
    assert_eq!(requests.len(), 4);
    assert_eq!(requests[2].config.purpose, ccare_llm::Purpose::Compaction);
    // The next conversation request carries the checkpoint, not the long prompt.
    let next = &requests[3];
    assert!(next.config.messages.iter().all(|message| {
        message.message.content.first() != Some(&ccare_core::ContentBlock::text(lorem(400)))
    }));
    let journal = rig.journal().await;
    let action = journal
        .iter()
        .find(|(key, _)| key.starts_with("action_"))
        .map(|(_, record)| record["data"].clone())
        .unwrap();
    assert_eq!(action["action"], "summary");
    assert_eq!(action["reason"], "requested");
    assert_eq!(action["outcome"], "committed");
    assert!(action["afterInput"].as_u64().unwrap() < action["beforeInput"].as_u64().unwrap());
    // The summary call has its own request record (CC-JNL-2), settled on the
    // transaction's compaction/start, and the action names it.
    let summary_call = journal
        .iter()
        .map(|(_, record)| &record["data"])
        .find(|data| data["purpose"] == "compaction")
        .unwrap();
    assert_eq!(summary_call["callId"], action["callId"]);
    assert_eq!(summary_call["dispatched"], true);
    assert_eq!(summary_call["outcome"], "completed");
    assert_eq!(summary_call["eventType"], "compaction/start");
    assert_eq!(
        summary_call["eventSeq"],
        rig.events("compaction/start")[0].0
    );
    assert!(summary_call["usage"]["inputTokens"].as_u64().unwrap() > 0);
    assert!(summary_call["inputTokens"].as_u64().unwrap() > 0);
}

#[tokio::test]
async fn cc_sum_5_a_summary_that_is_not_smaller_is_rejected_and_history_kept() {
    let huge = lorem(600);
    let summary = json!({"expect": {"purpose": "compaction"}, "text": huge}).to_string();
    let script = [
        r#"{"text": "read it"}"#.to_owned(),
        rest_call(json!({"note": note(1200)})),
        summary,
        r#"{"text": "continuing"}"#.to_owned(),
    ]
    .join("\n");
    let rig = rig(&script, json!({"retain_tokens": 100}), Some(64_000), true).await;
    rig.turn(&lorem(400)).await;
    rig.turn("now rest").await;
    let ends = rig.events("compaction/end");
    assert_eq!(ends.len(), 1);
    assert_eq!(ends[0].1["error"], "SUMMARY_NOT_SMALLER");
    assert!(rig.events("compaction/summary").is_empty());
    assert!(
        !rig.user_messages()
            .iter()
            .any(|message| message["source"]["kind"] == "compact-checkpoint")
    );
    let report = plugin_messages(&rig, STATE_SOURCE).pop().unwrap();
    assert_eq!(report["source"]["contextCareTrace"]["outcome"], "error");
    // Memoized: the journal holds a no-useful-range record.
    let journal = rig.journal().await;
    assert!(
        journal
            .iter()
            .any(|(_, record)| record["data"]["phase"] == "no-useful-range")
    );
}

pub(crate) async fn patch(rig: &Rig, rule: &str, action: &str, enabled: bool) {
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

#[tokio::test]
async fn cc_ctl_3_report_off_drops_the_levels_but_a_requested_rest_still_reports() {
    let script = [
        r#"{"text": "plain"}"#.to_owned(),
        rest_call(json!({"note": note(1200)})),
        r#"{"text": "ok"}"#.to_owned(),
    ]
    .join("\n");
    let rig = rig(&script, json!({"quiet_start": false}), Some(16_000), true).await;
    patch(&rig, "state", "report", false).await;
    rig.turn("hello").await;
    let plain = plugin_messages(&rig, STATE_SOURCE);
    assert_eq!(plain.len(), 1);
    assert_eq!(
        text(&plain[0]),
        format!("<context-care>\n{}\n</context-care>", EN.advice_normal[0]),
        "advice only"
    );
    rig.turn("now rest").await;
    let report = plugin_messages(&rig, STATE_SOURCE).pop().unwrap();
    assert!(
        text(&report).contains(EN.estimate),
        "explicit rest forces the report"
    );
}

#[tokio::test]
async fn cc_ctl_3_advice_off_keeps_the_outcome() {
    let script = [
        rest_call(json!({"note": note(1200)})),
        r#"{"text": "ok"}"#.to_owned(),
    ]
    .join("\n");
    let rig = rig(&script, json!({}), Some(16_000), true).await;
    patch(&rig, "state", "advice", false).await;
    rig.turn("rest").await;
    let report = plugin_messages(&rig, STATE_SOURCE).pop().unwrap();
    let body = text(&report);
    assert!(body.contains(EN_REST.outcome_no_proposal), "{body}");
    assert!(!body.contains(EN.advice_normal[0]), "{body}");
}

#[tokio::test]
async fn cc_met_5_every_boundary_refreshes_the_ui_sample() {
    let rig = rig(r#"{"text": "one"}"#, json!({}), Some(16_000), true).await;
    assert!(rig.care.ui_sample(rig.session.id()).is_none());
    patch(&rig, "state", "report", false).await;
    patch(&rig, "state", "advice", false).await;
    rig.turn("hello").await;
    assert!(
        plugin_messages(&rig, STATE_SOURCE).is_empty(),
        "nothing to say"
    );
    let sample = rig.care.ui_sample(rig.session.id()).unwrap();
    assert!(sample.metrics.fatigue_value.is_some());
    assert!(sample.at > 0);
}

pub(crate) fn lorem(repeats: usize) -> String {
    "lorem ipsum dolor sit amet ".repeat(repeats)
}

#[tokio::test]
async fn cc_hys_1_each_session_has_its_own_controller() {
    // S = floor(0.8 · 16000) = 12800 with the defaults; a ~13k-token prompt arms it.
    let rig = rig(
        "{\"text\": \"one\"}\n{\"text\": \"two\"}",
        json!({}),
        Some(16_000),
        true,
    )
    .await;
    let (light, light_session) = rig.another().await;
    rig.turn(&lorem(2000)).await;
    light.prompt("hello");
    light.when_idle().await;
    assert!(rig.care.ui_sample(rig.session.id()).unwrap().armed);
    assert!(!rig.care.ui_sample(light_session.id()).unwrap().armed);
}

fn system_of(rig: &Rig, index: usize) -> Option<String> {
    rig.script.requests()[index].config.system.clone()
}

#[tokio::test]
async fn cc_ntc_5_the_guidance_section_follows_its_controls() {
    use ccare_care::texts::EN_GUIDANCE;
    let script = [
        r#"{"text": "one"}"#,
        r#"{"text": "two"}"#,
        r#"{"text": "three"}"#,
    ]
    .join("\n");
    let rig = rig(&script, json!({}), Some(16_000), true).await;
    rig.turn("first").await;
    let all: Vec<&str> = EN_GUIDANCE.lines.iter().map(|(_, line)| *line).collect();
    assert_eq!(
        system_of(&rig, 0).unwrap(),
        format!("{}\n{}", EN_GUIDANCE.heading, all.join("\n"))
    );
    patch(&rig, "guidance-hesitation", "notice", false).await;
    rig.turn("second").await;
    assert_eq!(
        system_of(&rig, 1).unwrap(),
        format!("{}\n{}", EN_GUIDANCE.heading, all[..7].join("\n"))
    );
    for (id, _) in &EN_GUIDANCE.lines[..7] {
        patch(&rig, &format!("guidance-{id}"), "notice", false).await;
    }
    rig.turn("third").await;
    assert_eq!(system_of(&rig, 2), None, "every line off: no section");
}

#[test]
fn cc_ntc_6_levels_parse_from_either_locale() {
    use ccare_care::numeric::parse_level_line;
    assert_eq!(
        parse_level_line("Fatigue: very-high; wakefulness: low."),
        Some(("very-high", "low"))
    );
    assert_eq!(
        parse_level_line("疲劳度：偏高；唤醒值：未知。"),
        Some(("elevated", "unknown"))
    );
    assert_eq!(parse_level_line("Fatigue: tired; wakefulness: low."), None);
    assert_eq!(parse_level_line("These levels are estimates"), None);
}

#[tokio::test]
async fn cc_ntc_6_the_projection_follows_the_latest_notice() {
    use ccare_care::numeric::{NUMERIC_KEY, NumericProjection};
    let rig = rig(
        r#"{"text": "one"}"#,
        json!({"quiet_start": false}),
        Some(16_000),
        true,
    )
    .await;
    rig.turn("hello").await;
    let state = rig
        .session
        .state_of::<NumericProjection>(NUMERIC_KEY)
        .await
        .unwrap();
    let notice = rig.events("user/message").pop().unwrap();
    assert_eq!(state.sampled_seq, Some(notice.0));
    assert_eq!(state.fatigue.as_deref(), Some("normal"));
    assert_eq!(state.wakefulness.as_deref(), Some("low"));
    let metadata = &notice.1["message"]["source"]["contextCare"];
    assert_eq!(state.fatigue_value, metadata["fatigueValue"].as_f64());
    assert!(state.fatigue_value.is_some());
}

#[tokio::test]
async fn a_pending_rest_and_the_armed_controller_outlive_the_process() {
    use crate::rig::rig_in;
    use ccare_agent::AgentOptions;
    // Process 1: the model asks for a rest in the turn's only step, so the rest waits
    // in the durable inbox when the process ends; the prompt arms the controller.
    let mut options = AgentOptions::new("s/small");
    options.max_steps_per_turn = 1;
    let config = json!({"release_margin_tokens": 4000});
    let first = rig_in(
        tempfile::tempdir().unwrap(),
        &rest_call(json!({"note": note(1200)})),
        config.clone(),
        Some(16_000),
        true,
        None,
        options,
    )
    .await;
    first.turn(&lorem(2000)).await;
    assert!(first.care.ui_sample(first.session.id()).unwrap().armed);
    assert!(
        plugin_messages(&first, REQUEST_SOURCE).is_empty(),
        "not delivered yet"
    );
    let Rig {
        dir,
        session,
        agent,
        ..
    } = first;
    let id = session.id().clone();
    drop(agent);

    // Process 2, with a larger window: S = 16000, L = 12000, and the session's Q sits
    // between them, so the controller stays armed only if it was derived as armed.
    let script = [
        rest_call(json!({"note": note(1300)})),
        r#"{"text": "ok"}"#.to_owned(),
    ]
    .join("\n");
    let second = rig_in(
        dir,
        &script,
        config,
        Some(20_000),
        true,
        Some(&id),
        AgentOptions::new("s/small"),
    )
    .await;
    second.agent.restore_inbox().await.unwrap();
    second.agent.when_idle().await;
    second.turn("continue").await;
    assert!(
        second.care.ui_sample(&id).unwrap().armed,
        "derived from the journal"
    );
    let requests = plugin_messages(&second, REQUEST_SOURCE);
    assert_eq!(requests.len(), 2, "{requests:#?}");
    assert!(
        text(&requests[0]).ends_with(&note(1200)),
        "the first process's rest"
    );
    assert!(
        text(&requests[1]).ends_with(&note(1300)),
        "then the new one"
    );
    let report = plugin_messages(&second, STATE_SOURCE).pop().unwrap();
    assert_eq!(
        report["source"]["contextCareTrace"]["trigger"],
        "rest-result"
    );
    // It was delivered before the model spoke, so a new request is no longer a repeat.
    let last = tool_results(&second).pop().unwrap();
    assert_eq!(last["is_error"], false, "{last}");
}

#[test]
fn a9_a10_the_spec_note_vectors() {
    for (arguments, n) in [
        (json!({"note": ""}), 0),
        (json!({"note": note(999)}), 999),
        (json!({"note": note(10_001)}), 10_001),
        (Value::Null, 0),
        (json!({}), 0),
        (json!({"note": 42}), 0),
        (json!([]), 0),
    ] {
        let error = check(arguments.clone()).unwrap_err();
        assert!(
            error
                .message
                .ends_with(&format!("between 1000 and 8000 characters; it has {n}.")),
            "{arguments}: {}",
            error.message
        );
        assert!(!error.message.contains("10000"), "{}", error.message);
    }
    for length in [8000, 8001, 10_000] {
        assert!(check(json!({"note": note(length)})).is_ok(), "{length}");
    }
    let error = check(json!({"note": note(1200), "x": 1})).unwrap_err();
    assert_eq!(error.message, EN_REST.error_unknown_key);
}

/// A plugin whose request segment adds one large request-only message to each request.
struct BigSegment;

impl ccare_agent::RequestSegment for BigSegment {
    fn preview(&self, _context: &ccare_agent::HookContext) -> Vec<ccare_core::Message> {
        vec![ccare_core::Message::from_blocks(vec![
            ccare_core::ContentBlock::text(lorem(600)),
        ])]
    }
    fn reserve(
        &self,
        context: &ccare_agent::HookContext,
        _call_id: &str,
    ) -> Vec<ccare_core::Message> {
        self.preview(context)
    }
    fn dispatched(&self, _context: &ccare_agent::HookContext, _call_id: &str) {}
    fn release(&self, _context: &ccare_agent::HookContext, _call_id: &str) {}
}

impl ccare_agent::Plugin for BigSegment {
    fn name(&self) -> &str {
        "big-segment"
    }
    fn mount(
        &self,
        _config: &Value,
        scope: &mut ccare_agent::PluginScope<'_>,
    ) -> Result<(), ccare_agent::MountError> {
        scope.request_segment(std::sync::Arc::new(BigSegment));
        Ok(())
    }
}

#[tokio::test]
async fn cc_met_4_request_only_segments_count_in_the_load_not_in_what_is_retained() {
    let plain = rig(
        r#"{"text": "one"}"#,
        json!({"quiet_start": false}),
        Some(16_000),
        true,
    )
    .await;
    let segmented = rig(
        r#"{"text": "one"}"#,
        json!({"quiet_start": false}),
        Some(16_000),
        true,
    )
    .await;
    segmented.host.mount(&BigSegment, &json!({})).unwrap();
    plain.turn("hello").await;
    segmented.turn("hello").await;
    let values = |rig: &Rig| {
        let notice = plugin_messages(rig, STATE_SOURCE).pop().unwrap();
        let metadata = notice["source"]["contextCare"].clone();
        (
            metadata["fatigueValue"].as_f64().unwrap(),
            metadata["wakefulnessValue"].as_f64().unwrap(),
        )
    };
    let (plain_fatigue, plain_wakefulness) = values(&plain);
    let (fatigue, wakefulness) = values(&segmented);
    assert!(fatigue > plain_fatigue, "{fatigue} vs {plain_fatigue}");
    assert_eq!(
        wakefulness, plain_wakefulness,
        "segments are not retained history"
    );
}

#[tokio::test]
async fn a3_a_stored_notice_without_numbers_reads_as_levels_with_null_values() {
    use ccare_care::numeric::{NUMERIC_KEY, NumericProjection};
    let rig = rig(r#"{"text": "one"}"#, json!({}), Some(16_000), true).await;
    let mut message = ccare_core::Message::from_blocks(vec![ccare_core::ContentBlock::text(
        "<context-care>\n疲劳度：高；唤醒值：正常。\n</context-care>",
    )]);
    message.source = Some(ccare_core::Source::Plugin(Box::new(
        ccare_core::PluginSource {
            kind: STATE_SOURCE.to_owned(),
            plugin: Some("context-care".to_owned()),
            form: Some("notice".to_owned()),
            summary: Some("Context state".to_owned()),
            sections: None,
            extra: ccare_core::Extra::new(),
        },
    )));
    let draft = ccare_core::EventDraft::typed(&ccare_core::kinds::UserMessage { message })
        .unwrap()
        .with_surface(ccare_core::SurfaceOp::Append);
    let event = rig.session.append(draft).unwrap();
    let state = rig
        .session
        .state_of::<NumericProjection>(NUMERIC_KEY)
        .await
        .unwrap();
    assert_eq!(state.sampled_seq, Some(event.seq()));
    assert_eq!(state.fatigue.as_deref(), Some("high"));
    assert_eq!(state.wakefulness.as_deref(), Some("normal"));
    assert_eq!((state.fatigue_value, state.wakefulness_value), (None, None));
}

#[tokio::test]
async fn cc_mnt_6_crossing_s_summarizes_automatically_and_reports_the_band() {
    let summary = json!({"expect": {"purpose": "compaction"}, "text": SUMMARY}).to_string();
    let mut script: Vec<String> = (0..4).map(|_| r#"{"text": "ok"}"#.to_owned()).collect();
    script.push(summary);
    script.push(r#"{"text": "after"}"#.to_owned());
    let rig = rig(&script.join("\n"), json!({}), Some(16_000), true).await;
    for turn in 0..5 {
        assert_eq!(
            rig.turn(&format!("{turn} {}", lorem(400))).await,
            Some(TurnEndReason::Completed),
            "turn {turn}"
        );
    }
    let starts = rig.events("compaction/start");
    assert_eq!(starts.len(), 1, "one automatic pass");
    assert_eq!(starts[0].1["trigger"], "automatic");
    let report = plugin_messages(&rig, STATE_SOURCE).pop().unwrap();
    assert_eq!(
        report["source"]["contextCareTrace"]["trigger"],
        "budget-state"
    );
    assert_eq!(
        report["source"]["contextCareTrace"]["outcome"],
        "auto-within-target"
    );
    assert!(text(&report).contains(ccare_care::texts::EN_AUTO.within_target));
    // The latest prompt is kept verbatim; the earlier ones live on in the checkpoint.
    let requests = rig.script.requests();
    let last = requests.last().unwrap();
    let firsts: Vec<String> = last
        .config
        .messages
        .iter()
        .filter_map(|message| match message.message.content.first() {
            Some(ccare_core::ContentBlock::Text(text)) => Some(text.text.chars().take(2).collect()),
            _ => None,
        })
        .collect();
    assert!(firsts.contains(&"4 ".to_owned()), "{firsts:?}");
    assert!(!firsts.contains(&"0 ".to_owned()), "{firsts:?}");
    let journal = rig.journal().await;
    let action = journal
        .iter()
        .find(|(key, _)| key.starts_with("action_"))
        .map(|(_, record)| record["data"].clone())
        .unwrap();
    assert_eq!(action["reason"], "automatic");
    assert_eq!(action["outcome"], "committed");
    assert!(
        rig.care
            .ui_sample(rig.session.id())
            .is_some_and(|sample| !sample.armed),
        "released below L"
    );
}

/// A tool whose result is `size` characters long.
pub(crate) struct Dump(pub(crate) usize);

impl ccare_agent::Tool for Dump {
    fn def(&self) -> &ccare_agent::ToolDef {
        static DEF: std::sync::OnceLock<ccare_agent::ToolDef> = std::sync::OnceLock::new();
        DEF.get_or_init(|| ccare_agent::ToolDef {
            spec: ccare_llm::ToolSpec {
                name: "dump".to_owned(),
                description: "prints a lot".into(),
                input_schema: json!({"type": "object"}).into(),
            },
            concurrency: ccare_agent::Concurrency::ParallelSafe,
            timeout_ms: None,
            validates_own_arguments: false,
        })
    }
    fn call(
        &self,
        _context: ccare_agent::ToolContext,
        _arguments: Value,
    ) -> ccare_agent::BoxFuture<'static, ccare_agent::ToolOutcome> {
        let size = self.0;
        Box::pin(async move {
            let text: String = (0..size)
                .map(|index| if index % 50 == 49 { '\n' } else { 'x' })
                .collect();
            Ok(vec![ccare_core::ContentBlock::text(format!(
                "BEGIN{text}END"
            ))])
        })
    }
}

#[tokio::test]
async fn cc_mnt_1_an_armed_boundary_prunes_seen_long_tool_results() {
    let script = [
        r#"{"tool_calls": [{"name": "dump", "arguments": {}}]}"#,
        r#"{"text": "seen it"}"#,
        r#"{"text": "next"}"#,
    ]
    .join("\n");
    let rig = rig(&script, json!({}), Some(16_000), true).await;
    rig.host
        .add_tool(std::sync::Arc::new(Dump(45_000)))
        .unwrap();
    rig.turn("dump it").await;
    assert!(
        rig.events("compaction/prune").is_empty(),
        "not before the model saw it"
    );
    rig.turn("go on").await;
    let prunes = rig.events("compaction/prune");
    assert_eq!(prunes.len(), 1);
    let results = rig.events("tool/result");
    assert_eq!(results.len(), 2, "the original and its replacement");
    let (original_seq, original) = &results[0];
    let (_, replacement) = &results[1];
    assert_eq!(prunes[0].1["pruned"][0]["seq"], *original_seq);
    let block = &replacement["message"]["content"][0];
    assert_eq!(
        block["call_id"],
        original["message"]["content"][0]["call_id"]
    );
    let pruned = block["content"][0]["text"].as_str().unwrap();
    assert!(pruned.starts_with("BEGIN"), "head kept");
    assert!(pruned.ends_with("END"), "tail kept");
    assert!(pruned.contains("characters pruned by context-care"));
    let full = original["message"]["content"][0]["content"][0]["text"]
        .as_str()
        .unwrap();
    assert_eq!(
        pruned,
        ccare_care::maintenance::prune_text(ccare_core::Locale::En, full)
    );
    assert_eq!(
        pruned.chars().count(),
        4096 + 1024
            + pruned
                .lines()
                .find(|line| line.contains("pruned"))
                .unwrap()
                .chars()
                .count()
            + 2
    );
    // The next request carries the pruned result, and the prune is journaled.
    let last = rig.script.requests().pop().unwrap();
    let carried = last.config.messages.iter().any(|message| {
        matches!(message.message.content.first(), Some(ccare_core::ContentBlock::ToolResult(result))
            if matches!(result.content.first(), Some(ccare_core::ContentBlock::Text(text)) if text.text == pruned))
    });
    assert!(carried);
    let journal = rig.journal().await;
    assert!(
        journal
            .iter()
            .any(|(_, record)| record["data"]["action"] == "prune")
    );
}

fn ledger_call(arguments: Value) -> String {
    json!({"tool_calls": [{"name": "ledger", "arguments": arguments}]}).to_string()
}

#[tokio::test]
async fn cc_ext_2_the_done_ledger_rides_verbatim_in_every_checkpoint() {
    use ccare_care::texts::EN_LEDGER;
    let summary = json!({"expect": {"purpose": "compaction"}, "text": SUMMARY}).to_string();
    let script = [
        ledger_call(json!({"id": "parser", "text": "SSE parser written and tested", "status": "done", "evidence_seqs": [1]})),
        ledger_call(json!({"id": "parser", "text": "again", "status": "done"})),
        ledger_call(json!({"id": "docs", "text": "README section", "status": "pending", "evidence_seqs": [99999]})),
        ledger_call(json!({})),
        r#"{"text": "noted"}"#.to_owned(),
        rest_call(json!({"note": note(1200)})),
        summary,
        r#"{"text": "continuing"}"#.to_owned(),
    ]
    .join("\n");
    let rig = rig(&script, json!({"retain_tokens": 100}), Some(64_000), true).await;
    rig.turn(&lorem(400)).await;
    rig.turn("rest now").await;
    let results = tool_results(&rig);
    let texts: Vec<&str> = results
        .iter()
        .map(|result| result["content"][0]["text"].as_str().unwrap())
        .collect();
    assert_eq!(texts[0], format!("{} parser", EN_LEDGER.recorded));
    assert_eq!(
        texts[1],
        format!("{} parser", EN_LEDGER.already_done),
        "a reminder, not a refusal"
    );
    assert_eq!(results[1]["is_error"], false);
    assert_eq!(
        results[2]["is_error"], true,
        "evidence must exist: {}",
        texts[2]
    );
    let listing = "<done-ledger>\n- [done] parser: SSE parser written and tested (evidence: seq 1)\n</done-ledger>";
    assert_eq!(texts[3], listing);
    let checkpoint = rig
        .user_messages()
        .into_iter()
        .find(|message| message["source"]["kind"] == "compact-checkpoint")
        .unwrap();
    assert_eq!(
        checkpoint["content"][2]["text"], listing,
        "after the summary, verbatim"
    );
}

#[tokio::test]
async fn cc_ext_1_a_selection_too_large_for_the_summary_route_is_summarized_in_chunks() {
    use crate::rig::rig_with_tiny;
    // The summary route s/tiny: H = 3000 − 500 = 2500. The first, ~4k-token prompt fits
    // no summary request, so no prefix fits whole: it is dropped (never truncated) and
    // the ~2k-token turns after it are summarized one chunk each, then merged.
    let part = |n: usize| {
        json!({"expect": {"purpose": "compaction"}, "text": format!("summary of part {n}")})
            .to_string()
    };
    let mut script: Vec<String> = (0..4).map(|_| r#"{"text": "ok"}"#.to_owned()).collect();
    script.push(rest_call(json!({"note": note(1200)})));
    script.extend([part(1), part(2), part(3)]);
    script.push(r#"{"text": "continuing"}"#.to_owned());
    let rig = rig_with_tiny(
        &script.join("\n"),
        json!({"retain_tokens": 100, "summary": {"provider": "s", "model": "tiny"}}),
        64_000,
        3_000,
    )
    .await;
    for (turn, size) in [(0, 600), (1, 300), (2, 300), (3, 300)] {
        rig.turn(&format!("{turn} {}", lorem(size))).await;
    }
    rig.turn("rest now").await;
    let summary = &rig.events("compaction/summary")[0].1;
    let coverage = &summary["coverage"];
    assert_eq!(
        coverage["chunks"].as_array().unwrap().len(),
        3,
        "{coverage}"
    );
    assert!(
        !coverage["dropped"].as_array().unwrap().is_empty(),
        "{coverage}"
    );
    let text = summary["summary"].as_str().unwrap();
    assert!(text.contains("### Part 1 of 3"), "{text}");
    assert!(text.contains("summary of part 3"), "{text}");
    assert!(text.contains("Left out of this summary"), "{text}");
    let requests = rig.script.requests();
    let summaries = requests
        .iter()
        .filter(|request| request.config.purpose == ccare_llm::Purpose::Compaction)
        .count();
    assert_eq!(summaries, 3);
    let report = plugin_messages(&rig, STATE_SOURCE).pop().unwrap();
    assert_eq!(report["source"]["contextCareTrace"]["outcome"], "committed");
}

#[tokio::test]
async fn a17_a_provider_error_on_a_requested_rest_is_r8_and_history_is_kept() {
    let failure = json!({"expect": {"purpose": "compaction"}, "failure": {"code": "INVALID_REQUEST", "message": "bad summary request"}}).to_string();
    let script = [
        r#"{"text": "read it"}"#.to_owned(),
        rest_call(json!({"note": note(1200)})),
        failure,
        r#"{"text": "continuing"}"#.to_owned(),
    ]
    .join("\n");
    let rig = rig(&script, json!({"retain_tokens": 100}), Some(64_000), true).await;
    rig.turn(&lorem(400)).await;
    assert_eq!(
        rig.turn("now rest").await,
        Some(TurnEndReason::Completed),
        "the user's turn goes on"
    );
    let ends = rig.events("compaction/end");
    assert_eq!(ends.len(), 1);
    assert_eq!(ends[0].1["error"], "INVALID_REQUEST");
    assert!(rig.events("compaction/summary").is_empty());
    let report = plugin_messages(&rig, STATE_SOURCE).pop().unwrap();
    assert_eq!(report["source"]["contextCareTrace"]["outcome"], "error");
    assert!(text(&report).contains(EN_REST.outcome_error));
}

#[tokio::test]
async fn a17_cc_bnd_2_r8_the_notice_says_unknown_and_carries_no_levels_or_numbers() {
    let failure = json!({"expect": {"purpose": "compaction"}, "failure": {"code": "INVALID_REQUEST", "message": "bad summary request"}}).to_string();
    let script = [
        r#"{"text": "read it"}"#.to_owned(),
        rest_call(json!({"note": note(1200)})),
        failure,
        r#"{"text": "continuing"}"#.to_owned(),
    ]
    .join("\n");
    let rig = rig(&script, json!({"retain_tokens": 100}), Some(64_000), true).await;
    rig.turn(&lorem(400)).await;
    rig.turn("now rest").await;
    let report = plugin_messages(&rig, STATE_SOURCE).pop().unwrap();
    assert_eq!(report["source"]["contextCareTrace"]["outcome"], "error");
    // State unknown (R8): the level line reads unknown, no estimate or calibration
    // claim, the outcome line, then the advice of an unknown level.
    let expected = [
        "<context-care>",
        "Fatigue: unknown; wakefulness: unknown.",
        EN_REST.outcome_error,
        EN.advice_normal[0],
        "</context-care>",
    ]
    .join("\n");
    assert_eq!(text(&report), expected);
    assert_eq!(
        report["source"]["contextCare"],
        json!({"fatigueValue": null, "wakefulnessValue": null}),
        "no numbers while the state is unknown"
    );
}

/// An inner pre-step participant that replaces the first user message whenever a rest
/// request is in the batch (as another compactor would).
struct InnerReplacer;

impl ccare_agent::PreStepHook for InnerReplacer {
    fn call<'a>(
        &'a self,
        context: &'a ccare_agent::HookContext,
        input: ccare_agent::PreStepInput,
        next: ccare_agent::PreStepNext<'a>,
    ) -> ccare_agent::BoxFuture<'a, Result<ccare_agent::PreStepDecision, ccare_agent::HookError>>
    {
        Box::pin(async move {
            let resting = input.messages.iter().any(|message| {
                matches!(&message.source, Some(ccare_core::Source::Plugin(plugin)) if plugin.kind == REQUEST_SOURCE)
            });
            if resting {
                let view = context.session.derived_view();
                if let Some(first) = view.messages.first() {
                    let replacement =
                        ccare_core::Message::from_blocks(vec![ccare_core::ContentBlock::text(
                            "(replaced by another compactor)",
                        )]);
                    let draft = ccare_core::EventDraft::typed(&ccare_core::kinds::UserMessage {
                        message: replacement,
                    })
                    .unwrap()
                    .with_surface(ccare_core::SurfaceOp::Replace {
                        start_seq: first.seq,
                        end_seq: first.seq,
                    })
                    .with_sources(vec![first.seq]);
                    context.session.append(draft).unwrap();
                }
            }
            next.run(input).await
        })
    }
}

impl ccare_agent::Plugin for InnerReplacer {
    fn name(&self) -> &str {
        "inner-replacer"
    }
    fn mount(
        &self,
        _config: &Value,
        scope: &mut ccare_agent::PluginScope<'_>,
    ) -> Result<(), ccare_agent::MountError> {
        scope.pre_step(std::sync::Arc::new(InnerReplacer), false);
        Ok(())
    }
}

#[tokio::test]
async fn a16_a_rest_after_an_inner_replacement_is_r1_with_no_compaction() {
    let script = [
        r#"{"text": "read it"}"#.to_owned(),
        rest_call(json!({"note": note(1200)})),
        r#"{"text": "continuing"}"#.to_owned(),
    ]
    .join("\n");
    let rig = rig(&script, json!({"retain_tokens": 100}), Some(64_000), true).await;
    rig.host.mount(&InnerReplacer, &json!({})).unwrap();
    rig.turn(&lorem(400)).await;
    rig.turn("now rest").await;
    let report = plugin_messages(&rig, STATE_SOURCE).pop().unwrap();
    assert_eq!(
        report["source"]["contextCareTrace"]["outcome"],
        "already-reduced"
    );
    assert!(
        rig.events("compaction/start").is_empty(),
        "no extra compaction"
    );
    assert_eq!(rig.script.requests().len(), 3, "no summary call");
}

/// A requested rest whose summary call takes two seconds, returned once that call is
/// in flight (its `compaction/start` is in the log) and the turn still running.
async fn rest_with_a_slow_summary_in_flight() -> Rig {
    let slow =
        json!({"expect": {"purpose": "compaction"}, "text": SUMMARY, "delay_ms": 2000}).to_string();
    let script = [
        r#"{"text": "read it"}"#.to_owned(),
        rest_call(json!({"note": note(1200)})),
        slow,
        r#"{"text": "continuing"}"#.to_owned(),
    ]
    .join("\n");
    let rig = rig(&script, json!({"retain_tokens": 100}), Some(64_000), true).await;
    rig.turn(&lorem(400)).await;
    rig.agent.prompt("now rest");
    let started = std::time::Instant::now();
    while rig.events("compaction/start").is_empty() {
        assert!(
            started.elapsed() < std::time::Duration::from_secs(10),
            "no summary started"
        );
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    rig
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a27_unmounting_during_a_summary_aborts_it_and_closes_the_compaction() {
    // The summary call is in flight; unmount.
    let rig = rest_with_a_slow_summary_in_flight().await;
    assert!(rig.host.unmount("context-care"));
    let unmounted = std::time::Instant::now();
    rig.agent.when_idle().await;
    assert!(
        unmounted.elapsed() < std::time::Duration::from_millis(1500),
        "aborted at once"
    );
    let ends = rig.events("compaction/end");
    assert_eq!(ends.len(), 1);
    assert_eq!(ends[0].1["error"], "ABORTED");
    assert!(rig.events("compaction/summary").is_empty(), "no compaction");
}

#[tokio::test]
async fn a24_a_context_window_refusal_of_the_summary_retries_a_smaller_candidate() {
    let overflow = json!({"expect": {"purpose": "compaction"}, "failure": {"code": "CONTEXT_WINDOW_EXCEEDED", "message": "too long"}}).to_string();
    let summary = json!({"expect": {"purpose": "compaction"}, "text": SUMMARY}).to_string();
    let mut script: Vec<String> = (0..3).map(|_| r#"{"text": "ok"}"#.to_owned()).collect();
    script.push(rest_call(json!({"note": note(1200)})));
    script.extend([overflow, summary]);
    script.push(r#"{"text": "continuing"}"#.to_owned());
    let rig = rig(
        &script.join("\n"),
        json!({"retain_tokens": 100, "summary": {"max_retries": 1}}),
        Some(64_000),
        true,
    )
    .await;
    for turn in 0..3 {
        rig.turn(&format!("{turn} {}", lorem(300))).await;
    }
    rig.turn("rest now").await;
    let requests = rig.script.requests();
    let summaries: Vec<&ccare_llm::GenerateRequest> = requests
        .iter()
        .filter(|request| request.config.purpose == ccare_llm::Purpose::Compaction)
        .collect();
    assert_eq!(summaries.len(), 2, "one retry");
    let size =
        |request: &ccare_llm::GenerateRequest| match &request.config.messages[0].message.content[0]
        {
            ccare_core::ContentBlock::Text(text) => text.text.len(),
            _ => 0,
        };
    assert!(
        size(summaries[1]) < size(summaries[0]),
        "the retry is a smaller candidate"
    );
    let report = plugin_messages(&rig, STATE_SOURCE).pop().unwrap();
    assert_eq!(report["source"]["contextCareTrace"]["outcome"], "committed");
    assert_eq!(rig.events("compaction/start").len(), 1, "one transaction");
}

#[tokio::test]
async fn a18_cc_def_2_an_automatic_summary_error_never_fails_the_users_turn() {
    let failure = json!({"expect": {"purpose": "compaction"}, "failure": {"code": "INVALID_REQUEST", "message": "no"}}).to_string();
    let mut script: Vec<String> = (0..4).map(|_| r#"{"text": "ok"}"#.to_owned()).collect();
    script.push(failure);
    script.push(r#"{"text": "still answering"}"#.to_owned());
    let rig = rig(&script.join("\n"), json!({}), Some(16_000), true).await;
    for turn in 0..5 {
        assert_eq!(
            rig.turn(&format!("{turn} {}", lorem(400))).await,
            Some(TurnEndReason::Completed),
            "turn {turn}"
        );
    }
    let ends = rig.events("compaction/end");
    assert_eq!(ends.len(), 1);
    assert_eq!(ends[0].1["error"], "INVALID_REQUEST");
    let journal = rig.journal().await;
    let action = journal
        .iter()
        .find(|(key, _)| key.starts_with("action_"))
        .map(|(_, record)| record["data"].clone())
        .unwrap();
    assert_eq!(action["reason"], "automatic");
    assert_eq!(action["outcome"], "failed");
    assert_eq!(action["error"]["code"], "INVALID_REQUEST");
    let last = rig.events("assistant/message").pop().unwrap().1;
    assert_eq!(last["message"]["content"][0]["text"], "still answering");
}

#[tokio::test]
async fn a29_a_disabled_automatic_summary_is_journaled_control_disabled_and_never_runs() {
    let script: Vec<String> = (0..5).map(|_| r#"{"text": "ok"}"#.to_owned()).collect();
    let rig = rig(&script.join("\n"), json!({}), Some(16_000), true).await;
    patch(&rig, "maintenance", "summary", false).await;
    for turn in 0..5 {
        assert_eq!(
            rig.turn(&format!("{turn} {}", lorem(400))).await,
            Some(TurnEndReason::Completed)
        );
    }
    assert!(rig.events("compaction/start").is_empty(), "nothing ran");
    assert!(
        rig.script
            .requests()
            .iter()
            .all(|request| request.config.purpose == ccare_llm::Purpose::Conversation)
    );
    let journal = rig.journal().await;
    let action = journal
        .iter()
        .find(|(key, _)| key.starts_with("action_"))
        .map(|(_, record)| record["data"].clone())
        .unwrap();
    assert_eq!(action["error"]["code"], "CONTROL_DISABLED");
    assert_eq!(action["reason"], "automatic");
}

#[tokio::test]
async fn a15_a_handoff_larger_than_the_history_keeps_it_and_writes_no_events() {
    use ccare_care::rest_tool::{RestRequest, rest_message};
    let rig = rig(
        "{\"text\": \"hi\"}\n{\"text\": \"ok\"}",
        json!({}),
        Some(64_000),
        true,
    )
    .await;
    rig.turn("short").await;
    // A deep rest queued directly (as a restarted process would find it in the inbox).
    let request = RestRequest {
        note: note(6000),
        deep: true,
        recovery: Some(note(4000)),
    };
    rig.agent
        .inject(rest_message(&request, ccare_core::Locale::En));
    rig.turn("next").await;
    assert!(rig.events("compaction/start").is_empty(), "no events");
    assert!(rig.events("compaction/end").is_empty());
    let report = plugin_messages(&rig, STATE_SOURCE).pop().unwrap();
    assert_eq!(report["source"]["contextCareTrace"]["outcome"], "error");
    assert_eq!(
        plugin_messages(&rig, REQUEST_SOURCE).len(),
        1,
        "the rest message stays"
    );
    let journal = rig.journal().await;
    let action = journal
        .iter()
        .find(|(key, _)| key.starts_with("action_"))
        .map(|(_, record)| record["data"].clone())
        .unwrap();
    assert_eq!(action["error"]["code"], "HANDOFF_LARGER_THAN_HISTORY");
    assert_eq!(
        action["error"]["message"],
        "handoff-larger-than-history; history retained"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a17_cc_bnd_3_cancelling_the_turn_mid_summary_aborts_it_and_compacts_nothing() {
    let rig = rest_with_a_slow_summary_in_flight().await;
    let cancelled = std::time::Instant::now();
    rig.agent
        .cancel(ccare_agent::CancelCause::User, false)
        .await;
    let end = rig.agent.when_idle().await;
    assert!(
        cancelled.elapsed() < std::time::Duration::from_millis(1500),
        "the summary call was cut, not waited for"
    );
    assert!(
        matches!(end, Some(TurnEndReason::Aborted { .. })),
        "the abort propagates: {end:?}"
    );
    let ends = rig.events("compaction/end");
    assert_eq!(ends.len(), 1);
    assert_eq!(ends[0].1["error"], "ABORTED");
    assert!(rig.events("compaction/summary").is_empty(), "no compaction");
    assert!(
        !rig.user_messages()
            .iter()
            .any(|message| message["source"]["kind"] == "compact-checkpoint")
    );
    assert_eq!(
        rig.script.requests().len(),
        3,
        "no conversation request after the abort"
    );
}
