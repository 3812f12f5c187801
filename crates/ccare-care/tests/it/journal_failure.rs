//! CC-JNL-1: a journal write that fails is surfaced, never swallowed: the request it
//! would have recorded does not leave, and the turn ends naming the failure.

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

/// A memory store whose KV writes to the journal's domain fail while `broken` is set.
struct BrokenJournal {
    inner: MemoryStore,
    broken: AtomicBool,
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

#[tokio::test]
async fn cc_jnl_1_a_failed_journal_write_keeps_the_request_home_and_says_why() {
    let store = Arc::new(BrokenJournal {
        inner: MemoryStore::new(),
        broken: AtomicBool::new(false),
    });
    let registry = Arc::new(Registry::with_host_defaults());
    let sessions = Arc::new(Sessions::new(
        Arc::clone(&store) as Arc<dyn Store>,
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
        session,
        Arc::new(SystemClock),
        AgentOptions::new("s/small"),
    );

    agent.prompt("works");
    assert_eq!(agent.when_idle().await, Some(TurnEndReason::Completed));
    store.broken.store(true, Ordering::SeqCst);
    agent.prompt("the disk is full now");
    let end = agent.when_idle().await;
    let Some(TurnEndReason::Error { failure }) = end else {
        panic!("{end:?}")
    };
    let message = failure["message"].as_str().unwrap();
    assert!(message.contains("disk full"), "{failure}");
    assert!(message.contains("context_care_requests"), "{failure}");
    assert_eq!(script.requests().len(), 1, "the second request never left");
}
