//! Storage failures around context-care: a journal write that fails is surfaced, never
//! swallowed (CC-JNL-1): the request it would have recorded does not leave, and the
//! turn ends naming the failure. A summary whose checkpoint is live when the log write
//! fails is journaled as committed with the failure beside it (CC-SUM-5 secondary
//! failures), not as history kept.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use ccare_agent::{Agent, AgentOptions, Host};
use ccare_care::{ContextCare, RouteSnapshot};
use ccare_core::kinds::TurnEndReason;
use ccare_core::{SessionId, SystemClock};
use ccare_llm::script::ScriptProvider;
use ccare_llm::{Llm, LlmConfig, ModelConfig, ProviderConfig, ProviderKind};
use ccare_session::{Registry, Sessions, SessionsConfig};
use ccare_store::{
    Incarnation, KvEntry, KvPage, MemoryStore, NewSession, ReadRange, SessionQuery, SessionRecord,
    Store, StoreError, StoreFuture, StoredEvent, Ticket,
};
use serde_json::json;

/// A memory store whose KV writes to the journal's domain fail while `broken` is set,
/// and whose event appends fail while `broken_end` is set and the batch holds a
/// `compaction/end`.
struct BrokenJournal {
    inner: MemoryStore,
    broken: AtomicBool,
    broken_end: AtomicBool,
}

impl Store for BrokenJournal {
    fn create_session(&self, session: NewSession, events: Vec<StoredEvent>) -> Ticket<Incarnation> {
        self.inner.create_session(session, events)
    }
    fn append(
        &self,
        session: &SessionId,
        expected_seq: u64,
        events: Vec<StoredEvent>,
    ) -> Ticket<u64> {
        if self.broken_end.load(Ordering::SeqCst)
            && events
                .iter()
                .any(|event| event.json.contains("\"compaction/end\""))
        {
            return Box::pin(std::future::ready(Err(StoreError::Backend {
                operation: "append",
                message: "disk full".to_owned(),
            })));
        }
        self.inner.append(session, expected_seq, events)
    }
    fn kv_cas(
        &self,
        domain: &str,
        key: &str,
        expected_version: Option<u64>,
        value: Option<Vec<u8>>,
    ) -> Ticket<Option<u64>> {
        if domain.contains("context_care_requests") && self.broken.load(Ordering::SeqCst) {
            return Box::pin(std::future::ready(Err(StoreError::Backend {
                operation: "kv_cas",
                message: "disk full".to_owned(),
            })));
        }
        self.inner.kv_cas(domain, key, expected_version, value)
    }
    fn flush(&self) -> Ticket<()> {
        self.inner.flush()
    }
    fn session(&self, id: &SessionId) -> StoreFuture<'_, Option<SessionRecord>> {
        self.inner.session(id)
    }
    fn list_sessions(&self, query: SessionQuery) -> StoreFuture<'_, Vec<SessionRecord>> {
        self.inner.list_sessions(query)
    }
    fn read(&self, id: &SessionId, range: ReadRange) -> StoreFuture<'_, Vec<StoredEvent>> {
        self.inner.read(id, range)
    }
    fn kv_get(&self, domain: &str, key: &str) -> StoreFuture<'_, Option<KvEntry>> {
        self.inner.kv_get(domain, key)
    }
    fn kv_scan(
        &self,
        domain: &str,
        prefix: &str,
        page: KvPage,
    ) -> StoreFuture<'_, Vec<(String, KvEntry)>> {
        self.inner.kv_scan(domain, prefix, page)
    }
}

/// The composition over `store`: the scripted provider on `s/small` (16,000 window),
/// context-care mounted with `config`, one agent on a fresh session.
async fn composition(
    store: &Arc<BrokenJournal>,
    script: &str,
    config: serde_json::Value,
) -> (Agent, ScriptProvider) {
    let registry = Arc::new(Registry::with_host_defaults());
    let sessions = Arc::new(Sessions::new(
        Arc::clone(store) as Arc<dyn Store>,
        Arc::new(SystemClock),
        Arc::clone(&registry),
        SessionsConfig::default(),
    ));
    let script = ScriptProvider::from_jsonl(script).unwrap();
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
        &config,
    )
    .unwrap();
    let session = sessions.create(None, Default::default()).await.unwrap();
    let agent = Agent::new(
        host,
        session,
        Arc::new(SystemClock),
        AgentOptions::new("s/small"),
    );
    (agent, script)
}

fn broken_store() -> Arc<BrokenJournal> {
    Arc::new(BrokenJournal {
        inner: MemoryStore::new(),
        broken: AtomicBool::new(false),
        broken_end: AtomicBool::new(false),
    })
}

#[tokio::test]
async fn cc_jnl_1_a_failed_journal_write_keeps_the_request_home_and_says_why() {
    let store = broken_store();
    let (agent, script) = composition(
        &store,
        "{\"text\": \"one\"}\n{\"text\": \"two\"}",
        json!({}),
    )
    .await;

    agent.prompt("works");
    assert_eq!(agent.when_idle().await, Some(TurnEndReason::Completed));
    store.broken.store(true, Ordering::SeqCst);
    agent.prompt("the disk is full now");
    let end = agent.when_idle().await;
    let Some(TurnEndReason::Error { failure }) = end else {
        panic!("{end:?}")
    };
    let failure = serde_json::to_value(&failure).unwrap();
    let message = failure["message"].as_str().unwrap();
    assert!(message.contains("disk full"), "{failure}");
    assert!(message.contains("context_care_requests"), "{failure}");
    assert_eq!(script.requests().len(), 1, "the second request never left");
}

#[tokio::test]
async fn cc_sum_5_a_live_checkpoint_whose_log_write_fails_is_committed_with_a_secondary_failure() {
    let store = broken_store();
    let summary = json!({"expect": {"purpose": "compaction"}, "text": crate::rest::SUMMARY});
    let script = [
        json!({"text": "read it"}).to_string(),
        crate::rest::rest_call(json!({"note": crate::rest::note(1200)})),
        summary.to_string(),
        json!({"text": "continuing"}).to_string(),
    ]
    .join("\n");
    let (agent, _script) = composition(&store, &script, json!({"retain_tokens": 100})).await;
    agent.prompt(crate::rest::lorem(400));
    assert_eq!(agent.when_idle().await, Some(TurnEndReason::Completed));
    store.broken_end.store(true, Ordering::SeqCst);
    agent.prompt("now rest");
    agent.when_idle().await;
    let domains = ccare_agent::domains::Domains::new(Arc::clone(&store) as Arc<dyn Store>);
    let domain = domains
        .open(
            ccare_agent::domains::DomainSpec::new("context_care_requests", 1)
                .table(ccare_agent::domains::TableSpec::new("records")),
            "reader",
        )
        .await
        .unwrap();
    let actions: Vec<serde_json::Value> = domain
        .table("records")
        .unwrap()
        .entries("action_")
        .into_iter()
        .map(|(_, value)| value["data"].clone())
        .collect();
    assert_eq!(actions.len(), 1, "{actions:?}");
    assert_eq!(actions[0]["outcome"], "committed", "{}", actions[0]);
    let secondary = actions[0]["secondaryFailures"].as_array().unwrap();
    assert_eq!(secondary.len(), 1);
    assert!(
        secondary[0]["message"]
            .as_str()
            .unwrap()
            .contains("disk full"),
        "{secondary:?}"
    );
}
