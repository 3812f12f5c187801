//! CC-NTC-1/2: the status notice is the last message of a step's batch and is entered
//! only when its model-visible text changed.

use ccare_care::STATE_SOURCE;
use ccare_core::kinds::TurnEndReason;
use ccare_core::{ContentBlock, Source};
use serde_json::{Value, json};

use crate::rig::rig;

#[tokio::test]
async fn cc_ntc_1_the_notice_ends_the_batch_and_cc_ntc_2_is_not_repeated_unchanged() {
    let rig = rig(
        "{\"text\": \"one\"}\n{\"text\": \"two\"}",
        json!({"quiet_start": false}),
        Some(16_000),
        true,
    )
    .await;
    let (agent, session, script) = (&rig.agent, &rig.session, &rig.script);
    agent.prompt("first");
    assert_eq!(agent.when_idle().await, Some(TurnEndReason::Completed));
    agent.prompt("second");
    assert_eq!(agent.when_idle().await, Some(TurnEndReason::Completed));

    let first = &script.requests()[0];
    let last = first.config.messages.last().unwrap();
    let Some(Source::Plugin(source)) = &last.message.source else {
        panic!("{last:?}")
    };
    assert_eq!(source.kind, STATE_SOURCE);
    assert_eq!(source.summary.as_deref(), Some("Context state"));
    assert!(
        source
            .extra
            .get("contextCare")
            .is_some_and(|value| value.get("fatigueValue").is_some())
    );
    let ContentBlock::Text(text) = &last.message.content[0] else {
        panic!()
    };
    assert!(
        text.text.starts_with("<context-care>\nFatigue: "),
        "{}",
        text.text
    );
    assert!(
        !text.text.chars().any(|c| c.is_ascii_digit()),
        "no numbers in the text"
    );

    let notices: Vec<Value> = session.with_log(|log| {
        log.events()
            .iter()
            .filter(|event| {
                event.kind() == "user/message" && event.data_json().contains(STATE_SOURCE)
            })
            .map(|event| serde_json::from_str(event.data_json()).unwrap())
            .collect()
    });
    assert_eq!(
        notices.len(),
        1,
        "the second turn's levels did not change, so no second notice"
    );
    let second = &script.requests()[1];
    let texts: Vec<String> = second
        .config
        .messages
        .iter()
        .filter_map(|message| match &message.message.content[0] {
            ContentBlock::Text(text) => Some(text.text.clone()),
            _ => None,
        })
        .collect();
    assert_eq!(texts.last().map(String::as_str), Some("second"));
}
