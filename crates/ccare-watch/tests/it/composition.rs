//! The real composition the plugin tests run in: a SQLite store at a path, the
//! scripted provider `s` answering with the given replies, a host with nothing mounted,
//! and agents on new or stored sessions (as a new process would open them). Each test
//! module mounts what it needs.

use std::path::Path;
use std::sync::Arc;

use ccare_agent::{Agent, AgentOptions, Host};
use ccare_core::{SessionId, SystemClock};
use ccare_llm::script::ScriptProvider;
use ccare_llm::{Llm, LlmConfig, ProviderConfig, ProviderKind};
use ccare_session::{Registry, Session, Sessions, SessionsConfig};
use ccare_store::{SqliteConfig, SqliteStore, Store};
use serde_json::Value;

pub(crate) struct Composition {
    pub(crate) host: Arc<Host>,
    pub(crate) sessions: Arc<Sessions>,
    pub(crate) script: ScriptProvider,
}

impl Composition {
    /// The host over the SQLite file `db`, the model answering `replies` in order.
    pub(crate) fn new(db: &Path, replies: &[Value]) -> Self {
        let store = SqliteStore::open(SqliteConfig::new(db)).unwrap();
        let registry = Arc::new(Registry::with_host_defaults());
        let sessions = Arc::new(Sessions::new(
            Arc::new(store) as Arc<dyn Store>,
            Arc::new(SystemClock),
            Arc::clone(&registry),
            SessionsConfig::default(),
        ));
        let text: Vec<String> = replies.iter().map(Value::to_string).collect();
        let script = ScriptProvider::from_jsonl(&text.join("\n")).unwrap();
        let mut config = LlmConfig::default();
        config
            .providers
            .insert("s".into(), ProviderConfig::new(ProviderKind::Script));
        let mut llm = Llm::from_config(config, &|_| None).unwrap();
        llm.insert_provider(
            "s",
            ProviderConfig::new(ProviderKind::Script),
            Arc::new(script.clone()),
        );
        let host = Arc::new(Host::new(Arc::new(llm), Arc::clone(&sessions), registry));
        Self {
            host,
            sessions,
            script,
        }
    }

    /// An agent on model `s/<model>`, on a new session or the stored `resume`.
    pub(crate) async fn agent(&self, model: &str, resume: Option<&SessionId>) -> (Session, Agent) {
        let session = match resume {
            Some(id) => self.sessions.open(id).await.unwrap(),
            None => self
                .sessions
                .create(None, Default::default())
                .await
                .unwrap(),
        };
        let agent = Agent::new(
            Arc::clone(&self.host),
            session.clone(),
            Arc::new(SystemClock),
            AgentOptions::new(format!("s/{model}")),
        );
        (session, agent)
    }
}
