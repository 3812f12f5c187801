//! Quiet start (issue 19 item 4, `quiet_start`): a fresh session's requests carry no
//! status notice while both levels are at their calm start and nothing was compacted
//! or refused; the first notice is exactly the seed's; `quiet_start = false` restores
//! the seed's notice at every boundary whose text changed. The same conversation runs
//! twice on the real composition (SQLite, scripted provider) and the requests the
//! provider received are compared.

use ccare_care::STATE_SOURCE;
use ccare_core::kinds::TurnEndReason;
use ccare_core::{ContentBlock, Source};
use ccare_llm::GenerateRequest;
use serde_json::{Value, json};

use crate::rig::{Rig, rig};

/// The status notice a request ends with, if it ends with one: its text.
fn trailing_notice(request: &GenerateRequest) -> Option<String> {
    let last = request.config.messages.last()?;
    let Some(Source::Plugin(source)) = &last.message.source else {
        return None;
    };
    if source.kind != STATE_SOURCE {
        return None;
    }
    match &last.message.content[0] {
        ContentBlock::Text(text) => Some(text.text.clone()),
        other => panic!("a notice of text, got {other:?}"),
    }
}

/// The texts of the status notices in the session's log, in order.
fn logged_notices(rig: &Rig) -> Vec<String> {
    rig.events("user/message")
        .into_iter()
        .filter(|(_, data)| data["message"]["source"]["kind"] == STATE_SOURCE)
        .map(|(_, data)| {
            data["message"]["content"][0]["text"]
                .as_str()
                .unwrap()
                .to_owned()
        })
        .collect()
}

const THREE_ANSWERS: &str = "{\"text\": \"one\"}\n{\"text\": \"two\"}\n{\"text\": \"three\"}";

/// Two short turns (both levels stay at their lowest), then a long prompt that lifts
/// wakefulness to `normal`.
async fn conversation(config: Value) -> Rig {
    let rig = rig(THREE_ANSWERS, config, Some(16_000), true).await;
    assert_eq!(rig.turn("hi").await, Some(TurnEndReason::Completed));
    assert_eq!(rig.turn("and again").await, Some(TurnEndReason::Completed));
    let long = "lorem ipsum dolor sit amet ".repeat(160);
    assert_eq!(rig.turn(&long).await, Some(TurnEndReason::Completed));
    rig
}

const CALM: &str = "<context-care>\nFatigue: normal; wakefulness: low.";
const RISEN: &str = "<context-care>\nFatigue: normal; wakefulness: normal.";

#[tokio::test]
async fn a_fresh_session_carries_no_notice_until_a_level_leaves_its_calm_start() {
    let quiet = conversation(json!({})).await;
    let seed = conversation(json!({"quiet_start": false})).await;
    let quiet_notices: Vec<Option<String>> = quiet
        .script
        .requests()
        .iter()
        .map(trailing_notice)
        .collect();
    let seed_notices: Vec<Option<String>> =
        seed.script.requests().iter().map(trailing_notice).collect();

    // The seed's behaviour: the calm notice at the first boundary, nothing while the
    // text is unchanged, the risen notice when wakefulness rises.
    assert_eq!(seed_notices.len(), 3);
    assert!(
        seed_notices[0].as_deref().unwrap().starts_with(CALM),
        "{seed_notices:?}"
    );
    assert_eq!(seed_notices[1], None);
    assert!(
        seed_notices[2].as_deref().unwrap().starts_with(RISEN),
        "{seed_notices:?}"
    );

    // Quiet: nothing at the calm start, then exactly the seed's notice.
    assert_eq!(quiet_notices.len(), 3);
    assert_eq!(quiet_notices[..2], [None, None]);
    assert_eq!(quiet_notices[2], seed_notices[2]);
    // The first request is the user's question and nothing after it.
    let first = &quiet.script.requests()[0];
    assert_eq!(first.config.messages.len(), 1);
    assert!(matches!(
        &first.config.messages[0].message.content[0],
        ContentBlock::Text(text) if text.text == "hi"
    ));
    // The log holds the one notice the model saw.
    assert_eq!(logged_notices(&quiet), [quiet_notices[2].clone().unwrap()]);
    assert_eq!(logged_notices(&seed).len(), 2);
}

#[tokio::test]
async fn the_context_status_tool_and_the_ui_sample_are_unaffected() {
    let rig = rig(
        "{\"tool_calls\": [{\"name\": \"context_status\", \"arguments\": {}, \"id\": \"c1\"}]}\n{\"text\": \"ok\"}",
        json!({}),
        Some(16_000),
        true,
    )
    .await;
    assert_eq!(
        rig.turn("how loaded are you?").await,
        Some(TurnEndReason::Completed)
    );
    let requests = rig.script.requests();
    assert_eq!(
        requests.iter().map(trailing_notice).collect::<Vec<_>>(),
        [None, None]
    );
    // The tool still answers with the status text.
    let results = rig.events("tool/result");
    let text = results[0].1["message"]["content"][0]["content"][0]["text"]
        .as_str()
        .unwrap()
        .to_owned();
    assert!(text.starts_with(CALM), "{text}");
    // The UI sample is refreshed at every boundary, quiet or not.
    let sample = rig.care.ui_sample(rig.session.id()).unwrap();
    assert_eq!(sample.metrics.fatigue.as_str(), "normal");
    assert_eq!(sample.metrics.wakefulness.as_str(), "low");
    assert!(sample.metrics.fatigue_value.is_some());
}

#[tokio::test]
async fn a_requested_rest_ends_the_quiet_start_even_at_calm_levels() {
    let note = "n".repeat(1200);
    let recovery = format!("search the log for the plan. {}", "r".repeat(1000));
    let rest = json!({"tool_calls": [{"name": "context_rest", "arguments": {"note": note, "deep": true, "recovery": recovery}, "id": "c1"}]});
    let rig = rig(
        &format!("{rest}\n{{\"text\": \"rested\"}}"),
        json!({}),
        Some(16_000),
        true,
    )
    .await;
    assert_eq!(rig.turn("rest now").await, Some(TurnEndReason::Completed));
    let notices: Vec<Option<String>> = rig.script.requests().iter().map(trailing_notice).collect();
    assert_eq!(notices.len(), 2);
    assert_eq!(notices[0], None, "calm start: no notice");
    let result = notices[1].as_deref().unwrap();
    assert!(result.starts_with("<context-care>\n"), "{result}");
    let logged = rig.events("user/message");
    let trace = logged
        .iter()
        .rev()
        .find(|(_, data)| data["message"]["source"]["kind"] == STATE_SOURCE)
        .map(|(_, data)| data["message"]["source"]["contextCareTrace"].clone())
        .unwrap();
    assert_eq!(trace["trigger"], "rest-result");
}
