//! CC-NTC-1/2: the status notice is the last message of a step's batch and is entered
//! only when its model-visible text changed.

#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use std::sync::Arc;

use ccare_agent::{Agent, AgentOptions, Host};
use ccare_care::{ContextCare, RouteSnapshot, STATE_SOURCE};
use ccare_core::kinds::TurnEndReason;
use ccare_core::{ContentBlock, Source, SystemClock};
use ccare_llm::script::ScriptProvider;
use ccare_llm::{Llm, LlmConfig, ModelConfig, ProviderConfig, ProviderKind};
use ccare_session::{Registry, Sessions, SessionsConfig};
use ccare_store::{SqliteConfig, SqliteStore, Store};
use serde_json::{Value, json};

#[tokio::test]
async fn cc_ntc_1_the_notice_ends_the_batch_and_cc_ntc_2_is_not_repeated_unchanged() {
    let dir = tempfile::tempdir().unwrap();
    let store = SqliteStore::open(SqliteConfig::new(dir.path().join("ccare.db"))).unwrap();
    let registry = Arc::new(Registry::with_host_defaults());
    let sessions = Arc::new(Sessions::new(
        Arc::new(store) as Arc<dyn Store>,
        Arc::new(SystemClock),
        Arc::clone(&registry),
        SessionsConfig::default(),
    ));
    let script = ScriptProvider::from_jsonl("{\"text\": \"one\"}\n{\"text\": \"two\"}").unwrap();
    let mut llm_config = LlmConfig::default();
    llm_config
        .providers
        .insert("s".into(), ProviderConfig::new(ProviderKind::Script));
    llm_config.models.insert(
        "s/small".into(),
        ModelConfig {
            context_window: Some(16_000),
            max_output_tokens: Some(1_000),
            ..ModelConfig::default()
        },
    );
    let mut llm = Llm::from_config(llm_config, &|_| None).unwrap();
    llm.insert_provider(
        "s",
        ProviderConfig::new(ProviderKind::Script),
        Arc::new(script.clone()),
    );
    let route = llm.route("s/small").unwrap();
    let host = Arc::new(Host::new(Arc::new(llm), Arc::clone(&sessions), registry));
    host.mount(
        &ContextCare::default().with_route(RouteSnapshot::of(&route)),
        &json!({}),
    )
    .unwrap();
    let session = sessions.create(None, Default::default()).await.unwrap();
    let agent = Agent::new(
        host,
        session.clone(),
        Arc::new(SystemClock),
        AgentOptions::new("s/small"),
    );
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
