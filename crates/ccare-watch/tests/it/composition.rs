//! The real composition the plugin tests run in: the kernel's test host
//! (`ccare_agent::testing`) over a SQLite file at a path, its scripted provider `s`
//! answering with the given replies, nothing mounted, and agents on new or stored
//! sessions (as a new process would open them). Each test module mounts what it needs.

use std::path::Path;
use std::sync::Arc;

use ccare_agent::testing::{TestHost, TestHostBuilder};
use ccare_agent::{Agent, Host};
use ccare_core::SessionId;
use ccare_llm::script::ScriptProvider;
use ccare_session::{Session, Sessions};
use serde_json::Value;

pub(crate) struct Composition {
    pub(crate) host: Arc<Host>,
    pub(crate) sessions: Arc<Sessions>,
    pub(crate) script: ScriptProvider,
    kit: TestHost,
}

impl Composition {
    /// The host over the SQLite file `db`, the model answering `replies` in order.
    pub(crate) fn new(db: &Path, replies: &[Value]) -> Self {
        Self::built(Self::builder(replies).sqlite_file(db))
    }

    /// The host over `store` (e.g. a `FailingStore`), the model answering `replies`
    /// in order.
    pub(crate) fn over(store: Arc<dyn ccare_store::Store>, replies: &[Value]) -> Self {
        Self::built(Self::builder(replies).store(store))
    }

    /// The test host's builder, its scripted model answering `replies` in order.
    fn builder(replies: &[Value]) -> TestHostBuilder {
        let text: Vec<String> = replies.iter().map(Value::to_string).collect();
        TestHost::builder(&text.join("\n"))
    }

    fn built(builder: TestHostBuilder) -> Self {
        let kit = builder.build().unwrap();
        Self {
            host: Arc::clone(kit.host()),
            sessions: Arc::clone(kit.sessions()),
            script: kit.script().clone(),
            kit,
        }
    }

    /// An agent on model `s/<model>`, on a new session or the stored `resume`.
    pub(crate) async fn agent(&self, model: &str, resume: Option<&SessionId>) -> (Session, Agent) {
        let session = match resume {
            Some(id) => self.kit.open(id).await.unwrap(),
            None => self.kit.session().await.unwrap(),
        };
        let agent = self.kit.agent(&session, &format!("s/{model}"));
        (session, agent)
    }
}
