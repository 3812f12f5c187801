//! One real composition for the plugin tests: the kernel's test host
//! (`ccare_agent::testing`) over a SQLite file in a temp dir, its scripted provider on
//! route `s/small`, `context-care` mounted, and one agent on a fresh session. This rig
//! adds only what context care needs (the route snapshot, the plugin, the journal).
//! Journal records are read back through a second store handle on the same file, as
//! another process would see them.

use std::sync::Arc;

use ccare_agent::domains::{DomainSpec, Domains, TableSpec};
use ccare_agent::testing::{self, TestHost};
use ccare_agent::{Agent, AgentOptions, Host};
use ccare_care::{ContextCare, RouteSnapshot};
use ccare_llm::ModelConfig;
use ccare_llm::script::ScriptProvider;
use ccare_session::{Session, Sessions};
use ccare_store::Store;
use serde_json::Value;
use tempfile::TempDir;

pub(crate) struct Rig {
    pub(crate) dir: TempDir,
    pub(crate) host: Arc<Host>,
    pub(crate) agent: Agent,
    pub(crate) session: Session,
    pub(crate) script: ScriptProvider,
    pub(crate) care: ContextCare,
    pub(crate) sessions: Arc<Sessions>,
    kit: TestHost,
}

/// The rig with `window` as the model's context window (`None`: the scripted
/// adapter's default for any model, 16,000; see `acceptance::a13_…` for a route of
/// unknown capacity) and
/// `with_route` deciding whether the plugin knows the route.
pub(crate) async fn rig(script: &str, config: Value, window: Option<u64>, with_route: bool) -> Rig {
    rig_in(
        tempfile::tempdir().unwrap(),
        script,
        config,
        window,
        with_route,
        None,
        AgentOptions::new("s/small"),
    )
    .await
}

/// The rig with the plugin handle passed through `extend` before it is mounted (e.g.
/// to register summary repair hooks), the route known.
pub(crate) async fn rig_with(
    script: &str,
    config: Value,
    window: Option<u64>,
    extend: &dyn Fn(ContextCare) -> ContextCare,
) -> Rig {
    build(
        tempfile::tempdir().unwrap(),
        script,
        config,
        window,
        true,
        None,
        AgentOptions::new("s/small"),
        Vec::new(),
        None,
        extend,
    )
    .await
}

/// The rig with a second model `s/tiny` of context window `tiny_window` (and 500 output
/// tokens), e.g. a small summary route.
pub(crate) async fn rig_with_tiny(
    script: &str,
    config: Value,
    window: u64,
    tiny_window: u64,
) -> Rig {
    let tiny = ModelConfig {
        context_window: Some(tiny_window),
        max_output_tokens: Some(500),
        ..ModelConfig::default()
    };
    build(
        tempfile::tempdir().unwrap(),
        script,
        config,
        Some(window),
        true,
        None,
        AgentOptions::new("s/small"),
        vec![("s/tiny".to_owned(), tiny)],
        None,
        &|care| care,
    )
    .await
}

/// The rig with the models `s/tiny` and `s/mid` beside `s/small` (window 64,000) and,
/// when given, `[agent] compaction_model` routing purpose `compaction` to `compaction`
/// (H-LLM-2): for the summary route's resolution order (CC-SUM-1).
pub(crate) async fn rig_with_compaction_route(
    script: &str,
    config: Value,
    compaction: Option<&str>,
    with_route: bool,
) -> Result<Rig, String> {
    let model = || ModelConfig {
        context_window: Some(64_000),
        max_output_tokens: Some(1_000),
        ..ModelConfig::default()
    };
    try_build(
        tempfile::tempdir().unwrap(),
        script,
        config,
        Some(64_000),
        with_route,
        None,
        AgentOptions::new("s/small"),
        vec![
            ("s/tiny".to_owned(), model()),
            ("s/mid".to_owned(), model()),
        ],
        compaction.map(str::to_owned),
        &|care| care,
    )
    .await
}

/// The rig on an existing directory, reopening `session` when given (as a new process
/// would), with the agent's `options`.
pub(crate) async fn rig_in(
    dir: TempDir,
    script: &str,
    config: Value,
    window: Option<u64>,
    with_route: bool,
    session: Option<&ccare_core::SessionId>,
    options: AgentOptions,
) -> Rig {
    build(
        dir,
        script,
        config,
        window,
        with_route,
        session,
        options,
        Vec::new(),
        None,
        &|care| care,
    )
    .await
}

#[allow(clippy::too_many_arguments)]
async fn build(
    dir: TempDir,
    script: &str,
    config: Value,
    window: Option<u64>,
    with_route: bool,
    session: Option<&ccare_core::SessionId>,
    options: AgentOptions,
    models: Vec<(String, ModelConfig)>,
    compaction: Option<String>,
    extend: &dyn Fn(ContextCare) -> ContextCare,
) -> Rig {
    try_build(
        dir, script, config, window, with_route, session, options, models, compaction, extend,
    )
    .await
    .unwrap()
}

/// [`build`], returning the plugin's mount error instead of panicking on it.
#[allow(clippy::too_many_arguments)]
async fn try_build(
    dir: TempDir,
    script: &str,
    config: Value,
    window: Option<u64>,
    with_route: bool,
    session: Option<&ccare_core::SessionId>,
    options: AgentOptions,
    models: Vec<(String, ModelConfig)>,
    compaction: Option<String>,
    extend: &dyn Fn(ContextCare) -> ContextCare,
) -> Result<Rig, String> {
    let mut builder = TestHost::builder(script)
        .sqlite_file(dir.path().join("ccare.db"))
        .model(
            "s/small",
            ModelConfig {
                context_window: window,
                max_output_tokens: Some(1_000),
                ..ModelConfig::default()
            },
        );
    for (name, model) in models {
        builder = builder.model(name, model);
    }
    if let Some(compaction) = compaction {
        builder = builder.purpose_model(ccare_llm::Purpose::Compaction, compaction);
    }
    let kit = builder.build().unwrap();
    let route = kit.host().llm().route("s/small").unwrap();
    let care = extend(if with_route {
        ContextCare::default().with_route(RouteSnapshot::of(&route))
    } else {
        ContextCare::default()
    });
    kit.host()
        .mount(&care, &config)
        .map_err(|error| error.to_string())?;
    let session = match session {
        Some(id) => kit.open(id).await.unwrap(),
        None => kit.session().await.unwrap(),
    };
    let agent = kit.agent_with(&session, options);
    Ok(Rig {
        dir,
        host: Arc::clone(kit.host()),
        agent,
        session,
        script: kit.script().clone(),
        care,
        sessions: Arc::clone(kit.sessions()),
        kit,
    })
}

impl Rig {
    /// A second agent on a fresh session of the same host (the same mounted plugin).
    pub(crate) async fn another(&self) -> (Agent, Session) {
        let session = self.kit.session().await.unwrap();
        (self.kit.agent(&session, "s/small"), session)
    }

    /// Runs one prompt to the end of its turn.
    pub(crate) async fn turn(&self, prompt: &str) -> Option<ccare_core::kinds::TurnEndReason> {
        testing::turn(&self.agent, prompt).await
    }

    /// Opens the rig's (closed) session again, as its next use does, and runs one
    /// prompt to the end of its turn on a new agent of it.
    pub(crate) async fn turn_after_reopen(
        &self,
        prompt: &str,
    ) -> Option<ccare_core::kinds::TurnEndReason> {
        let session = self.sessions.open(self.session.id()).await.unwrap();
        let agent = Agent::new(
            Arc::clone(&self.host),
            session,
            Arc::new(ccare_core::SystemClock),
            AgentOptions::new("s/small"),
        );
        testing::turn(&agent, prompt).await
    }

    /// A second store handle on the rig's SQLite file, as another process opens it.
    pub(crate) fn reopen_store(&self) -> ccare_store::SqliteStore {
        self.kit.reopen_store().unwrap()
    }

    /// The journal's records as a fresh store handle reads them from the file, in key
    /// order: `(key, record)`.
    pub(crate) async fn journal(&self) -> Vec<(String, Value)> {
        let store = self.kit.reopen_store().unwrap();
        let domains = Domains::new(Arc::new(store) as Arc<dyn Store>);
        let domain = domains
            .open(
                DomainSpec::new("context_care_requests", 1).table(TableSpec::new("records")),
                "reader",
            )
            .await
            .unwrap();
        domain
            .table("records")
            .unwrap()
            .entries("")
            .into_iter()
            .map(|(key, value)| (key, (*value).clone()))
            .collect()
    }

    /// The data of every event of `kind`, in log order, with its seq.
    pub(crate) fn events(&self, kind: &str) -> Vec<(u64, Value)> {
        testing::seq_events_of(&self.session, kind)
    }

    /// The kinds of the log's `compaction/*` events, in order.
    pub(crate) fn compaction_kinds(&self) -> Vec<String> {
        self.session.with_log(|log| {
            log.events()
                .iter()
                .map(|event| event.kind().to_owned())
                .filter(|kind| kind.starts_with("compaction/"))
                .collect()
        })
    }

    /// The data of the journal's maintenance records (`action_…`), in key order.
    pub(crate) async fn actions(&self) -> Vec<Value> {
        self.journal()
            .await
            .into_iter()
            .filter(|(key, _)| key.starts_with("action_"))
            .map(|(_, record)| record["data"].clone())
            .collect()
    }

    /// The user messages of the log, in order, as JSON.
    pub(crate) fn user_messages(&self) -> Vec<Value> {
        self.events("user/message")
            .into_iter()
            .map(|(_, data)| data["message"].clone())
            .collect()
    }
}
