//! The mounted `context-care` plugin in real composition (SQLite store, scripted
//! provider, the agent loop): CC-BUD-6 — a request over the hard input budget never
//! reaches the provider and ends the turn with `REQUEST_BUDGET_EXCEEDED`.

#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use std::sync::Arc;

use ccare_agent::{Agent, AgentOptions, Host};
use ccare_care::ContextCare;
use ccare_core::SystemClock;
use ccare_core::kinds::TurnEndReason;
use ccare_llm::script::ScriptProvider;
use ccare_llm::{Llm, LlmConfig, ModelConfig, ProviderConfig, ProviderKind};
use ccare_session::{Registry, Sessions, SessionsConfig};
use ccare_store::{SqliteConfig, SqliteStore, Store};
use serde_json::{Value, json};

async fn run(prompt: &str, config: Value) -> (Option<TurnEndReason>, ScriptProvider, Vec<Value>) {
    let dir = tempfile::tempdir().unwrap();
    let store = SqliteStore::open(SqliteConfig::new(dir.path().join("ccare.db"))).unwrap();
    let registry = Arc::new(Registry::with_host_defaults());
    let sessions = Arc::new(Sessions::new(
        Arc::new(store) as Arc<dyn Store>,
        Arc::new(SystemClock),
        Arc::clone(&registry),
        SessionsConfig::default(),
    ));
    let script = ScriptProvider::from_jsonl("{\"text\": \"fits\"}").unwrap();
    let mut llm_config = LlmConfig::default();
    llm_config
        .providers
        .insert("s".into(), ProviderConfig::new(ProviderKind::Script));
    llm_config.models.insert(
        "s/small".into(),
        ModelConfig {
            context_window: Some(4_000),
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
    let host = Arc::new(Host::new(Arc::new(llm), Arc::clone(&sessions), registry));
    host.mount(&ContextCare::default(), &config).unwrap();
    let session = sessions.create(None, Default::default()).await.unwrap();
    let agent = Agent::new(
        host,
        session.clone(),
        Arc::new(SystemClock),
        AgentOptions::new("s/small"),
    );
    agent.prompt(prompt);
    let end = agent.when_idle().await;
    let attempts = session.with_log(|log| {
        log.events()
            .iter()
            .filter(|event| event.kind() == "assistant/attempt")
            .map(|event| serde_json::from_str(event.data_json()).unwrap())
            .collect()
    });
    (end, script, attempts)
}

#[tokio::test]
async fn cc_bud_6_a_request_over_the_hard_budget_never_leaves_the_machine() {
    let (end, script, attempts) = run(&"lorem ipsum dolor sit amet ".repeat(600), json!({})).await;
    let Some(TurnEndReason::Error { failure }) = end else {
        panic!("{end:?}")
    };
    assert_eq!(failure["code"], "REQUEST_BUDGET_EXCEEDED");
    let message = failure["message"].as_str().unwrap();
    assert!(
        message.starts_with("Request input ") && message.contains(" exceeds hard input budget "),
        "{message}"
    );
    assert!(
        script.requests().is_empty(),
        "the provider was never called"
    );
    assert_eq!(attempts.len(), 1);
    assert_eq!(attempts[0]["outcome"], "failed");
    assert_eq!(attempts[0]["failure"]["code"], "REQUEST_BUDGET_EXCEEDED");
}

#[tokio::test]
async fn cc_bud_6_a_request_within_the_budget_is_dispatched() {
    let (end, script, attempts) = run("a short question", json!({})).await;
    assert_eq!(end, Some(TurnEndReason::Completed));
    assert_eq!(script.requests().len(), 1);
    assert!(attempts.is_empty());
}

#[test]
fn cc_cfg_1_a_bad_table_is_a_load_error_prefixed_with_the_plugin() {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let dir = tempfile::tempdir().unwrap();
        let store = SqliteStore::open(SqliteConfig::new(dir.path().join("c.db"))).unwrap();
        let registry = Arc::new(Registry::with_host_defaults());
        let sessions = Arc::new(Sessions::new(
            Arc::new(store) as Arc<dyn Store>,
            Arc::new(SystemClock),
            Arc::clone(&registry),
            SessionsConfig::default(),
        ));
        let llm = Llm::from_config(LlmConfig::default(), &|_| None).unwrap();
        let host = Host::new(Arc::new(llm), sessions, registry);
        let error = host
            .mount(&ContextCare::default(), &json!({"budgetRatio": 0.5}))
            .unwrap_err();
        assert_eq!(
            error.to_string(),
            "context-care: unknown config budgetRatio"
        );
        assert!(host.mounted().is_empty());
    });
}
