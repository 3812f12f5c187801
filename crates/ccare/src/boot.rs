//! Building the host an agent runs in from the settings: store, session engine, LLM
//! layer, built-in tools.

use std::sync::Arc;

use ccare_agent::tools::{FileLimits, Workspace, builtin_tools};
use ccare_agent::{Agent, AgentOptions, Host, Plugin};
use ccare_core::{SessionId, SystemClock};
use ccare_llm::Llm;
use ccare_session::{Registry, Session};

use crate::Failure;
use crate::config::Settings;
use crate::home::Home;

/// A ready host and the settings it came from.
pub(crate) struct Booted {
    pub(crate) host: Arc<Host>,
    pub(crate) options: AgentOptions,
    /// The conversation route's meter, loaded at start-up so a bad tokenizer stops
    /// the start (H-TOK-3). Never read: holding it keeps the tokenizer in the meter's
    /// process-wide cache (weak references), so the meters context-care builds per
    /// request share this one load instead of reloading the file.
    #[allow(dead_code)]
    pub(crate) meter: ccare_meter::Meter,
    /// The context-care plugin's handle when `[plugins.context-care]` mounted it: the
    /// UI samples `/status` shows.
    pub(crate) care: Option<ccare_care::ContextCare>,
}

/// Builds the host: an invalid config or workspace is bad input (exit 2).
pub(crate) fn boot(settings: &Settings, home: &Home) -> Result<Booted, Failure> {
    let llm = Llm::from_config(settings.llm.clone(), &|name| std::env::var(name).ok()).map_err(
        |error| {
            let origin = settings
                .source
                .as_ref()
                .map_or_else(|| "config".to_owned(), |path| path.display().to_string());
            Failure::bad_input(anyhow::anyhow!("{origin}: {error}"))
        },
    )?;
    let route = llm.route(&settings.model).map_err(|failure| {
        Failure::bad_input(anyhow::anyhow!("agent.model: {}", failure.message))
    })?;
    // H-TOK-3: a tokenizer that does not load is a startup error, not a silent estimate.
    let meter = ccare_meter::Meter::new(&ccare_meter::MeterConfig {
        image_tokens: route.image_tokens,
        tokenizer: route.tokenizer.clone(),
        ..ccare_meter::MeterConfig::default()
    })
    .map_err(|error| {
        Failure::bad_input(anyhow::anyhow!(
            "models.{:?}.tokenizer: {error}",
            route.name()
        ))
    })?;
    let registry = Arc::new(Registry::with_host_defaults());
    let sessions = home
        .sessions_with(Arc::clone(&registry), settings.locale)
        .map_err(Failure::failed)?;
    let host = Arc::new(Host::new(Arc::new(llm), Arc::new(sessions), registry));
    std::fs::create_dir_all(&settings.workspace).map_err(|error| {
        Failure::bad_input(anyhow::anyhow!(
            "agent.workspace: cannot create {}: {error}",
            settings.workspace.display()
        ))
    })?;
    let workspace = Workspace::new(settings.workspace.clone()).map_err(|error| {
        Failure::bad_input(anyhow::anyhow!(
            "agent.workspace: {} is not usable: {error}",
            settings.workspace.display()
        ))
    })?;
    for tool in builtin_tools(workspace, FileLimits::default()) {
        host.add_tool(tool)
            .map_err(|error| Failure::failed(anyhow::anyhow!(error)))?;
    }
    let care = ccare_care::ContextCare::default()
        .with_route(ccare_care::RouteSnapshot::of(&route))
        .with_locale(settings.locale);
    mount_plugins(&host, settings, &care)?;
    let care = settings
        .plugins
        .contains_key("context-care")
        .then_some(care);
    let mut options = AgentOptions::new(settings.model.clone());
    options.max_steps_per_turn = settings.loop_limits.max_steps_per_turn;
    options.max_request_retries = settings.loop_limits.max_request_retries;
    options.tool_pool = settings.loop_limits.tool_pool;
    options.tool_cancel_grace_ms = settings.loop_limits.tool_cancel_grace_ms;
    Ok(Booted {
        host,
        options,
        meter,
        care,
    })
}

/// The plugins this build knows, by `[plugins.<name>]` table name.
fn known_plugins(
    care: &ccare_care::ContextCare,
    locale: ccare_core::Locale,
) -> Vec<Box<dyn Plugin>> {
    vec![
        Box::new(ccare_time_context::TimeContext),
        Box::new(ccare_time_context::TimeContextInvariant),
        Box::new(care.clone()),
        Box::new(ccare_watch::plugin::StreamWatchPlugin::default().with_locale(locale)),
    ]
}

/// Mounts every plugin whose table is present (H-CFG-3): an unknown name or a refused
/// config is bad input naming the plugin.
fn mount_plugins(
    host: &Host,
    settings: &Settings,
    care: &ccare_care::ContextCare,
) -> Result<(), Failure> {
    let known = known_plugins(care, settings.locale);
    for (name, table) in &settings.plugins {
        let Some(plugin) = known.iter().find(|plugin| plugin.name() == name) else {
            let names: Vec<&str> = known.iter().map(|plugin| plugin.name()).collect();
            return Err(Failure::bad_input(anyhow::anyhow!(
                "plugins.{name}: no such plugin in this build (known: {})",
                if names.is_empty() {
                    "none yet".to_owned()
                } else {
                    names.join(", ")
                }
            )));
        };
        let config = serde_json::to_value(table).map_err(Failure::bad_input)?;
        host.mount(plugin.as_ref(), &config)
            .map_err(|error| Failure::bad_input(anyhow::anyhow!("{error}")))?;
    }
    Ok(())
}

impl Booted {
    /// Opens `id` (with crash repair) or creates a new session.
    pub(crate) async fn session(&self, id: Option<&str>) -> Result<Session, Failure> {
        let sessions = self.host.sessions();
        match id {
            Some(id) => {
                let id = SessionId::new(id.to_owned()).map_err(Failure::bad_input)?;
                Ok(sessions.open(&id).await?)
            }
            None => Ok(sessions.create(None, Default::default()).await?),
        }
    }

    /// An agent on `session`.
    pub(crate) fn agent(&self, session: Session) -> Agent {
        Agent::new(
            Arc::clone(&self.host),
            session,
            Arc::new(SystemClock),
            self.options.clone(),
        )
    }
}
