//! [`TestHost`]: a host composed as in production (a SQLite store, the session engine
//! with the host's registry, the LLM layer) with only the model and the clock faked.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use ccare_core::{Clock, SessionId, SystemClock};
use ccare_llm::script::ScriptProvider;
use ccare_llm::{Llm, LlmConfig, ModelConfig, ProviderConfig, ProviderKind, Purpose};
use ccare_session::{Registry, Session, Sessions, SessionsConfig};
use ccare_store::{SqliteConfig, SqliteStore, Store};
use tempfile::TempDir;

use super::error::KitError;
use crate::{Agent, AgentOptions, Host};

/// The scripted provider's name: every model `s/<name>` is answered by the script.
const SCRIPT_PROVIDER: &str = "s";
/// The database's file name inside the kit's directory.
const DB_FILE: &str = "ccare.db";

/// Where the host's events and KV rows live.
enum StoreChoice {
    /// `ccare.db` in a fresh temporary directory the kit owns.
    TempDir,
    /// A SQLite file the caller owns.
    File(PathBuf),
    /// A store the caller built (e.g. a [`super::FailingStore`]).
    Given(Arc<dyn Store>),
}

/// How a [`TestHost`] is composed; [`TestHostBuilder::build`] makes it.
pub struct TestHostBuilder {
    script: String,
    store: StoreChoice,
    clock: Arc<dyn Clock>,
    llm: LlmConfig,
    env: BTreeMap<String, String>,
}

impl TestHostBuilder {
    /// The SQLite file at `path`, which the caller owns.
    #[must_use]
    pub fn sqlite_file(mut self, path: impl Into<PathBuf>) -> Self {
        self.store = StoreChoice::File(path.into());
        self
    }

    /// `store` instead of a SQLite file (e.g. a [`super::FailingStore`]).
    #[must_use]
    pub fn store(mut self, store: Arc<dyn Store>) -> Self {
        self.store = StoreChoice::Given(store);
        self
    }

    /// The clock of the session engine and of every agent (the system's by default).
    #[must_use]
    pub fn clock(mut self, clock: Arc<dyn Clock>) -> Self {
        self.clock = clock;
        self
    }

    /// The model `name` (`"<provider>/<model>"`) with its limits, e.g. a context window.
    #[must_use]
    pub fn model(mut self, name: impl Into<String>, model: ModelConfig) -> Self {
        self.llm.models.insert(name.into(), model);
        self
    }

    /// Routes `purpose` to the model `model_ref` (`[agent] compaction_model`, H-LLM-2).
    #[must_use]
    pub fn purpose_model(mut self, purpose: Purpose, model_ref: impl Into<String>) -> Self {
        self.llm.purpose_models.insert(purpose, model_ref.into());
        self
    }

    /// `config` as the LLM layer's configuration (other providers and models, e.g. an
    /// OpenAI endpoint on a fake server); the scripted provider `s` is added to it, and
    /// [`TestHostBuilder::model`] / [`TestHostBuilder::purpose_model`] called after this
    /// add to it.
    #[must_use]
    pub fn llm_config(mut self, config: LlmConfig) -> Self {
        self.llm = config;
        self
    }

    /// The environment variable `name` as the LLM layer reads it (API keys); the
    /// process environment is never read.
    #[must_use]
    pub fn env(mut self, name: impl Into<String>, value: impl Into<String>) -> Self {
        self.env.insert(name.into(), value.into());
        self
    }

    /// Opens the store and composes the host: nothing mounted, no tools.
    pub fn build(self) -> Result<TestHost, KitError> {
        let (store, db, dir): (Arc<dyn Store>, _, _) = match self.store {
            StoreChoice::TempDir => {
                let dir = tempfile::tempdir()?;
                let path = dir.path().join(DB_FILE);
                let store = SqliteStore::open(SqliteConfig::new(&path))?;
                (Arc::new(store), Some(path), Some(dir))
            }
            StoreChoice::File(path) => {
                let store = SqliteStore::open(SqliteConfig::new(&path))?;
                (Arc::new(store), Some(path), None)
            }
            StoreChoice::Given(store) => (store, None, None),
        };
        let registry = Arc::new(Registry::with_host_defaults());
        let sessions = Arc::new(Sessions::new(
            store,
            Arc::clone(&self.clock),
            Arc::clone(&registry),
            SessionsConfig::default(),
        ));
        let script = ScriptProvider::from_jsonl(&self.script)?;
        let mut config = self.llm;
        config.providers.insert(
            SCRIPT_PROVIDER.to_owned(),
            ProviderConfig::new(ProviderKind::Script),
        );
        let env = self.env;
        let mut llm = Llm::from_config(config, &|name| env.get(name).cloned())?;
        llm.insert_provider(
            SCRIPT_PROVIDER,
            ProviderConfig::new(ProviderKind::Script),
            Arc::new(script.clone()),
        );
        let host = Arc::new(Host::new(Arc::new(llm), Arc::clone(&sessions), registry));
        Ok(TestHost {
            host,
            sessions,
            script,
            clock: self.clock,
            db,
            dir,
        })
    }
}

/// A host over a real store and session engine whose model is the scripted provider
/// `s`: the composition every integration test runs in (H-TEST-1/2). Plugins are
/// mounted on [`TestHost::host`]; the provider's received requests are read from
/// [`TestHost::script`].
pub struct TestHost {
    host: Arc<Host>,
    sessions: Arc<Sessions>,
    script: ScriptProvider,
    clock: Arc<dyn Clock>,
    db: Option<PathBuf>,
    /// Last, so the directory outlives the store's handles when the kit is dropped.
    dir: Option<TempDir>,
}

impl TestHost {
    /// A builder whose provider `s` answers `script` (JSONL replies, one a line; see
    /// `ccare_llm::script`), over `ccare.db` in a fresh temporary directory, on the
    /// system clock, with no model limits configured.
    pub fn builder(script: &str) -> TestHostBuilder {
        TestHostBuilder {
            script: script.to_owned(),
            store: StoreChoice::TempDir,
            clock: Arc::new(SystemClock),
            llm: LlmConfig::default(),
            env: BTreeMap::new(),
        }
    }

    /// The host (mount plugins and add tools here).
    pub fn host(&self) -> &Arc<Host> {
        &self.host
    }

    /// The session engine over the store.
    pub fn sessions(&self) -> &Arc<Sessions> {
        &self.sessions
    }

    /// The scripted provider: its replies and the requests it received.
    pub fn script(&self) -> &ScriptProvider {
        &self.script
    }

    /// The clock of the session engine and the agents.
    pub fn clock(&self) -> &Arc<dyn Clock> {
        &self.clock
    }

    /// The SQLite file, unless the host was built over a given store.
    pub fn db_path(&self) -> Option<&Path> {
        self.db.as_deref()
    }

    /// The temporary directory the kit owns, if it owns one.
    pub fn dir(&self) -> Option<&Path> {
        self.dir.as_ref().map(TempDir::path)
    }

    /// A new, empty session.
    pub async fn session(&self) -> Result<Session, KitError> {
        Ok(self.sessions.create(None, Default::default()).await?)
    }

    /// The stored session `id`, opened (and repaired) as a new process would.
    pub async fn open(&self, id: &SessionId) -> Result<Session, KitError> {
        Ok(self.sessions.open(id).await?)
    }

    /// An agent on `session` answering with `model` (e.g. `"s/small"`), default options.
    pub fn agent(&self, session: &Session, model: &str) -> Agent {
        self.agent_with(session, AgentOptions::new(model))
    }

    /// An agent on `session` with `options`, on the kit's clock.
    pub fn agent_with(&self, session: &Session, options: AgentOptions) -> Agent {
        Agent::new(
            Arc::clone(&self.host),
            session.clone(),
            Arc::clone(&self.clock),
            options,
        )
    }

    /// A second store handle on the same SQLite file, reading what is durable as
    /// another process would.
    pub fn reopen_store(&self) -> Result<SqliteStore, KitError> {
        let path = self.db.as_deref().ok_or(KitError::NoFile)?;
        Ok(SqliteStore::open(SqliteConfig::new(path))?)
    }
}
