//! Building the host a profile's agents run in: the LLM layer and the conversation
//! route's meter, the store and the session engine, the built-in tools, the plugins,
//! the validator policy and the agent's instructions (`ccare_agent::instructions`).

use std::sync::Arc;

use ccare_agent::tools::{FileLimits, Workspace, builtin_tools};
use ccare_agent::{AgentOptions, Host, InstalledInstructions};
use ccare_llm::{Llm, Purpose};
use ccare_session::Registry;
use ccare_store::Store;

use crate::config::{DEFAULT_PROFILE, Profile, Settings};
use crate::error::AppError;
use crate::mount::mount_plugins;

/// A ready host for one profile.
///
/// One `Booted` per profile: a host's hooks, tools and plugins are the profile's, and
/// its registry holds the profile's plugin event types and validators. Agents on it
/// are started only through the [`crate::Agents`] registry ([`crate::Agents::of`]),
/// so a process never runs two on one session.
pub struct Booted {
    /// The host every agent of the profile shares.
    pub host: Arc<Host>,
    /// The agent options the profile and `[loop]` give.
    pub options: AgentOptions,
    /// The profile this host was built for.
    pub profile: Profile,
    /// The conversation route's meter, loaded at start-up so a bad tokenizer stops
    /// the start (H-TOK-3). Holding it keeps the tokenizer in the meter's process-wide
    /// cache (weak references), so the meters context care builds per request share
    /// this one load instead of reloading the file.
    pub meter: ccare_meter::Meter,
    /// The context-care handle when the profile mounts it: the samples `/status` and
    /// `ccare context status` show.
    pub care: Option<ccare_care::ContextCare>,
    /// The instruction sections installed (base prompt, configured instructions, the
    /// workspace's `AGENTS.md`), in prompt order.
    pub instructions: InstalledInstructions,
    /// `[host] lease_ms`: how long the lease of a session this host drives lasts
    /// unless renewed ([`Booted::drive`], ACT-1).
    pub lease_ms: u64,
    /// `[host] actor_idle_ms`: how long an unused session actor of
    /// [`crate::Agents`] keeps running before it stops (ACT-1).
    pub actor_idle_ms: u64,
    /// `[gateway]`: the model aliases the OpenAI-compatible gateway accepts.
    pub gateway: crate::config::GatewaySettings,
}

impl std::fmt::Debug for Booted {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter
            .debug_struct("Booted")
            .field("profile", &self.profile.id)
            .field("host", &self.host)
            .finish_non_exhaustive()
    }
}

/// The key a profile's agent value is named by in errors.
fn agent_key(profile: &Profile, key: &str) -> String {
    if profile.id == DEFAULT_PROFILE {
        format!("agent.{key}")
    } else {
        format!("profiles.{}.agent.{key}", profile.id)
    }
}

/// Builds the host of `profile` (`None`: the default profile) over the store
/// `[store]` names. `env` reads the provider keys. An invalid config or workspace is
/// bad input ([`AppError::is_bad_input`]).
pub fn boot(
    settings: &Settings,
    profile: Option<&str>,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<Booted, AppError> {
    boot_with(settings, profile, env, None)
}

/// [`boot`] over `store` instead of the one `[store]` names: for an embedder that
/// brings its own store, or a test that makes the store fail under a running server.
pub fn boot_over(
    settings: &Settings,
    profile: Option<&str>,
    env: &dyn Fn(&str) -> Option<String>,
    store: Arc<dyn Store>,
) -> Result<Booted, AppError> {
    boot_with(settings, profile, env, Some(store))
}

/// The boot over `store`, or (`None`) over the `[store]` store, opened once the
/// profile's model and tokenizer are known to be usable (a bad config creates no file).
fn boot_with(
    settings: &Settings,
    profile: Option<&str>,
    env: &dyn Fn(&str) -> Option<String>,
    store: Option<Arc<dyn Store>>,
) -> Result<Booted, AppError> {
    let profile = settings.profile(profile)?.clone();
    let origin = settings
        .source
        .as_ref()
        .map_or_else(|| "config".to_owned(), |path| path.display().to_string());
    let mut llm_config = settings.llm.clone();
    if let Some(compaction) = &profile.compaction_model {
        llm_config
            .purpose_models
            .insert(Purpose::Compaction, compaction.clone());
    }
    let llm = Llm::from_config(llm_config, env)
        .map_err(|error| AppError::config(&origin, error.to_string()))?;
    let route = llm
        .route(&profile.model)
        .map_err(|failure| AppError::Config {
            origin: origin.clone(),
            message: format!("{}: {}", agent_key(&profile, "model"), failure.message),
        })?;
    // H-TOK-3: a tokenizer that does not load is a startup error, not a silent estimate.
    let meter = ccare_meter::Meter::new(&ccare_meter::MeterConfig {
        image_tokens: route.image_tokens,
        tokenizer: route.tokenizer.clone(),
        ..ccare_meter::MeterConfig::default()
    })
    .map_err(|error| AppError::Config {
        origin: origin.clone(),
        message: format!("models.{:?}.tokenizer: {error}", route.name()),
    })?;
    let registry = Arc::new(Registry::with_host_defaults());
    let store = match store {
        Some(store) => store,
        None => crate::store::open_store(settings)?,
    };
    let sessions = crate::store::sessions(settings, store, Arc::clone(&registry), profile.locale);
    let host = Arc::new(Host::new(Arc::new(llm), Arc::new(sessions), registry));
    let workspace_key = agent_key(&profile, "workspace");
    std::fs::create_dir_all(&profile.workspace).map_err(|error| AppError::Config {
        origin: origin.clone(),
        message: format!(
            "{workspace_key}: cannot create {}: {error}",
            profile.workspace.display()
        ),
    })?;
    let workspace =
        Workspace::new(profile.workspace.clone()).map_err(|error| AppError::Config {
            origin: origin.clone(),
            message: format!(
                "{workspace_key}: {} is not usable: {error}",
                profile.workspace.display()
            ),
        })?;
    let chosen: Vec<&str> = profile.tools.iter().map(|tool| tool.name()).collect();
    for tool in builtin_tools(workspace, FileLimits::default()) {
        if chosen.contains(&tool.def().spec.name.as_str()) {
            host.add_tool(tool).map_err(AppError::Tool)?;
        }
    }
    let care = ccare_care::ContextCare::default()
        .with_route(ccare_care::RouteSnapshot::of(&route))
        .with_locale(profile.locale);
    let care = mount_plugins(&host, &profile, &care)?.then_some(care);
    check_validator_names(settings, &host, &origin)?;
    // After the tools and the plugins, so the base prompt names every tool the agent has.
    let instructions = crate::instructions::install_instructions(&host, &profile)?;
    let mut options = AgentOptions::new(profile.model.clone());
    options.max_steps_per_turn = settings.loop_limits.max_steps_per_turn;
    options.max_request_retries = settings.loop_limits.max_request_retries;
    options.tool_pool = settings.loop_limits.tool_pool;
    options.tool_cancel_grace_ms = settings.loop_limits.tool_cancel_grace_ms;
    Ok(Booted {
        host,
        options,
        profile,
        meter,
        care,
        instructions,
        lease_ms: settings.host.lease_ms,
        actor_idle_ms: settings.host.actor_idle_ms,
        gateway: settings.gateway.clone(),
    })
}

/// `[validators] allow / deny` name only validators this host has (H-VAL-3), once the
/// plugins registered theirs. The time-context invariant counts even when its plugin
/// is not mounted: `ccare sessions check` runs it on every log.
fn check_validator_names(settings: &Settings, host: &Host, origin: &str) -> Result<(), AppError> {
    let mut known = host.sessions().registry().validator_names();
    if !known
        .iter()
        .any(|name| name == ccare_time_context::VALIDATOR)
    {
        known.push(ccare_time_context::VALIDATOR.to_owned());
    }
    settings
        .validators
        .check_names(&known)
        .map_err(|error| AppError::config(origin, error.to_string()))
}
