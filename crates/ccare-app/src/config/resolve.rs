//! From the file's tables to [`Settings`]: defaults, paths against the config file's
//! folder, the environment fallback for providers, and the profile lookup order
//! agent → profile → host (H-CFG-4): a command-line flag (the agent's own option)
//! wins, then `[profiles.<id>.agent]`, then the top-level `[agent]` (the default
//! profile), then the built-in default.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use ccare_core::json::MAX_SAFE_INTEGER;
use ccare_llm::{LlmConfig, ModelConfig, ProviderConfig, ProviderKind, env_defaults};
use ccare_session::LoadPolicy;
use ccare_store::{Durability, SqliteConfig};

use crate::config::Overrides;
use crate::config::file::{
    AgentTable, ConfigFile, GatewayTable, HttpTable, ProfileTable, StoreTable,
};
use crate::config::plugins;
use crate::config::settings::{
    BuiltinTool, DEFAULT_ACTOR_IDLE_MS, DEFAULT_HTTP_ADDR, DEFAULT_LEASE_MS, DEFAULT_PROFILE,
    GatewaySettings, HostSettings, HttpSettings, LoopLimits, Profile, Settings, StoreKind,
    StoreSettings,
};
use crate::config::values;
use crate::home::Home;

/// The longest `[store] commit_window_ms` accepted: a minute. Longer is surely a typo
/// (the writer never waits that long anyway, H-STORE-4).
const MAX_COMMIT_WINDOW_MS: u64 = 60_000;

/// The longest `[store] busy_timeout_ms` accepted: ten minutes. Every write group
/// waits up to this long on another program's lock, so longer reads as a hang.
const MAX_BUSY_TIMEOUT_MS: u64 = 600_000;

/// Resolves the file. Errors are `key.path: expected …, found …`, without the origin.
pub(crate) fn resolve(
    mut file: ConfigFile,
    source: Option<PathBuf>,
    base: &Path,
    home: &Home,
    overrides: &Overrides,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<Settings, String> {
    for provider in file.providers.values_mut() {
        if let Some(script) = &provider.script {
            provider.script = Some(base.join(script));
        }
    }
    for (name, model) in &mut file.models {
        if let Some(tokenizer) = &model.tokenizer {
            model.tokenizer = Some(base.join(tokenizer));
        }
        model_limits(name, model)?;
    }
    loop_limits(&file.loop_table)?;
    let mut notice = None;
    let mut llm = LlmConfig {
        providers: file.providers,
        models: file.models,
        purpose_models: BTreeMap::new(),
        deepseek_tokenizer: None,
    };
    // The model the environment's fallback provider serves, when the file has none.
    let mut fallback_model = None;
    if llm.providers.is_empty() {
        let defaults = env_defaults(env);
        llm.providers = defaults.config.providers;
        for (name, config) in defaults.config.models {
            llm.models.entry(name).or_insert(config);
        }
        fallback_model = Some(defaults.model);
        notice = defaults.notice;
    }
    // The agent level: the command line's choice of model.
    let mut model_flag = None;
    if let Some(spec) = &overrides.provider {
        let Some(path) = spec.strip_prefix("script:") else {
            return Err(format!(
                "--provider: expected script:FILE.jsonl, found {spec:?}"
            ));
        };
        let mut provider = ProviderConfig::new(ProviderKind::Script);
        provider.script = Some(PathBuf::from(path));
        llm.providers.insert("script".to_owned(), provider);
        llm.models.entry("script/scripted".to_owned()).or_default();
        model_flag = Some("script/scripted".to_owned());
        notice = None;
    }
    if let Some(flag) = &overrides.model {
        model_flag = Some(flag.clone());
    }
    let host = host_settings(&file.host)?;
    let store = store_settings(&file.store, base, home)?;
    let validators = LoadPolicy {
        strict: file.validators.strict_load.unwrap_or(false),
        allow: file.validators.allow,
        deny: file.validators.deny.unwrap_or_default(),
    };
    let http = http_settings(&file.http)?;
    let gateway = gateway_settings(&file.gateway, &llm)?;
    let defaults = ProfileInputs {
        model_flag: model_flag.as_deref(),
        fallback_model: fallback_model.as_deref(),
        top: &file.agent,
        top_plugins: &file.plugins,
        base,
        host_zone: host.time_zone.as_deref(),
    };
    let mut profiles = BTreeMap::new();
    let implicit_default = ProfileTable::default();
    let default_table = file
        .profiles
        .get(DEFAULT_PROFILE)
        .unwrap_or(&implicit_default);
    let explicit_default = file.profiles.contains_key(DEFAULT_PROFILE);
    profiles.insert(
        DEFAULT_PROFILE.to_owned(),
        profile(DEFAULT_PROFILE, default_table, explicit_default, &defaults)?,
    );
    for (id, table) in &file.profiles {
        if id == DEFAULT_PROFILE {
            continue;
        }
        profiles.insert(id.clone(), profile(id, table, true, &defaults)?);
    }
    Ok(Settings {
        source,
        llm,
        notice,
        host,
        store,
        loop_limits: file.loop_table,
        validators,
        http,
        gateway,
        profiles,
    })
}

/// `[gateway]`: each alias names a route of a configured provider; `pass_through_keys`
/// (off by default) lets the gateway's clients send their own API keys upstream;
/// `max_request_mib` (1 to 1024, default 32) bounds a chat-completions body.
fn gateway_settings(table: &GatewayTable, llm: &LlmConfig) -> Result<GatewaySettings, String> {
    for (alias, route) in &table.models {
        if alias.trim().is_empty() || alias.contains('/') {
            return Err(format!(
                "gateway.models: an alias is a bare model name (no \"/\", not empty), found {alias:?}"
            ));
        }
        match route.split_once('/') {
            Some((provider, model))
                if !model.is_empty() && llm.providers.contains_key(provider) => {}
            Some((provider, model)) if !model.is_empty() => {
                return Err(format!(
                    "gateway.models.{alias}: no provider named {provider:?} is configured (in {route:?})"
                ));
            }
            _ => {
                return Err(format!(
                    "gateway.models.{alias}: expected \"<provider>/<model>\", found {route:?}"
                ));
            }
        }
    }
    let max_request_mib = table
        .max_request_mib
        .unwrap_or(GatewaySettings::DEFAULT_MAX_REQUEST_MIB);
    if !(1..=GatewaySettings::MAX_REQUEST_MIB).contains(&max_request_mib) {
        return Err(format!(
            "gateway.max_request_mib: expected 1 to {}, found {max_request_mib}",
            GatewaySettings::MAX_REQUEST_MIB
        ));
    }
    Ok(GatewaySettings {
        models: table.models.clone(),
        pass_through_keys: table.pass_through_keys.unwrap_or(false),
        max_request_bytes: super::settings::mib(max_request_mib),
    })
}

/// What every profile is resolved against.
struct ProfileInputs<'a> {
    model_flag: Option<&'a str>,
    fallback_model: Option<&'a str>,
    top: &'a AgentTable,
    top_plugins: &'a BTreeMap<String, toml::Table>,
    base: &'a Path,
    host_zone: Option<&'a str>,
}

/// One profile: `table` over the top-level tables. `named` says whether the profile
/// has a `[profiles.<id>]` table of its own (its keys are then named in errors).
fn profile(
    id: &str,
    table: &ProfileTable,
    named: bool,
    inputs: &ProfileInputs<'_>,
) -> Result<Profile, String> {
    let agent = &table.agent;
    let model = inputs
        .model_flag
        .map(str::to_owned)
        .or_else(|| agent.model.clone())
        .or_else(|| inputs.top.model.clone())
        .or_else(|| inputs.fallback_model.map(str::to_owned));
    let Some(model) = model else {
        let key = if named {
            format!("profiles.{id}.agent.model")
        } else {
            "agent.model".to_owned()
        };
        return Err(format!(
            "{key}: expected \"<provider>/<model>\", found nothing (set [agent] model)"
        ));
    };
    let workspace = inputs.base.join(
        agent
            .workspace
            .clone()
            .or_else(|| inputs.top.workspace.clone())
            .unwrap_or_else(|| PathBuf::from(".")),
    );
    // The two instruction keys are one choice: a profile that sets either replaces
    // both of the top-level ones, so a profile's file never meets [agent]'s text.
    let (instructions, instructions_file, prefix) =
        if agent.instructions.is_some() || agent.instructions_file.is_some() {
            (
                &agent.instructions,
                &agent.instructions_file,
                format!("profiles.{id}.agent"),
            )
        } else {
            (
                &inputs.top.instructions,
                &inputs.top.instructions_file,
                "agent".to_owned(),
            )
        };
    if instructions.is_some() && instructions_file.is_some() {
        return Err(format!(
            "{prefix}.instructions_file: expected either {prefix}.instructions or {prefix}.instructions_file, found both"
        ));
    }
    let instructions_file = match instructions_file {
        None => None,
        Some(file) => {
            let path = inputs.base.join(file);
            if !path.is_file() {
                return Err(format!(
                    "{prefix}.instructions_file: expected an instructions file, found no file at {}",
                    path.display()
                ));
            }
            Some(path)
        }
    };
    let plugin_overrides = named.then_some((id, &table.plugins));
    let plugins = plugins::resolve(inputs.top_plugins, plugin_overrides, inputs.host_zone)?;
    let tools = match &table.tools {
        None => BuiltinTool::ALL.to_vec(),
        Some(names) => {
            let mut tools = Vec::new();
            for name in names {
                let Some(tool) = BuiltinTool::named(name) else {
                    let known: Vec<&str> =
                        BuiltinTool::ALL.iter().map(|tool| tool.name()).collect();
                    return Err(format!(
                        "profiles.{id}.tools: expected built-in tool names ({}), found {name:?}",
                        known.join(", ")
                    ));
                };
                if !tools.contains(&tool) {
                    tools.push(tool);
                }
            }
            tools
        }
    };
    Ok(Profile {
        id: id.to_owned(),
        model,
        compaction_model: agent
            .compaction_model
            .clone()
            .or_else(|| inputs.top.compaction_model.clone()),
        workspace,
        locale: agent.locale.or(inputs.top.locale).unwrap_or_default(),
        instructions: instructions.clone(),
        instructions_file,
        base_prompt: agent.base_prompt.or(inputs.top.base_prompt).unwrap_or(true),
        plugins,
        tools,
    })
}

fn host_settings(table: &crate::config::file::HostTable) -> Result<HostSettings, String> {
    if let Some(zone) = &table.time_zone {
        values::time_zone(zone).map_err(|message| format!("host.time_zone: {message}"))?;
    }
    let actor_idle_ms = match table.actor_idle_ms {
        None => DEFAULT_ACTOR_IDLE_MS,
        Some(value) => values::positive_safe(value)
            .map_err(|message| format!("host.actor_idle_ms: {message}"))?,
    };
    let lease_ms = match table.lease_ms {
        None => DEFAULT_LEASE_MS,
        Some(value) => {
            values::lease_ms(value).map_err(|message| format!("host.lease_ms: {message}"))?
        }
    };
    Ok(HostSettings {
        time_zone: table.time_zone.clone(),
        actor_idle_ms,
        lease_ms,
    })
}

fn store_settings(table: &StoreTable, base: &Path, home: &Home) -> Result<StoreSettings, String> {
    let kind = match table.kind.as_deref() {
        None | Some("sqlite") => StoreKind::Sqlite,
        Some(other) => {
            return Err(format!(
                "store.kind: expected \"sqlite\" (the only store of this build), found {other:?}"
            ));
        }
    };
    let durability = match table.durability.as_deref() {
        None => Durability::default(),
        Some(text) => Durability::parse(text).ok_or_else(|| {
            format!("store.durability: expected \"group\" or \"per-append\", found {text:?}")
        })?,
    };
    let commit_window_ms = at_most_ms(
        "store.commit_window_ms",
        table.commit_window_ms,
        SqliteConfig::DEFAULT_COMMIT_WINDOW_MS,
        MAX_COMMIT_WINDOW_MS,
    )?;
    let busy_timeout_ms = at_most_ms(
        "store.busy_timeout_ms",
        table.busy_timeout_ms,
        SqliteConfig::DEFAULT_BUSY_TIMEOUT_MS,
        MAX_BUSY_TIMEOUT_MS,
    )?;
    let path = match &table.path {
        None => home.database(),
        Some(path) if path.as_os_str().is_empty() => {
            return Err("store.path: expected the database file, found \"\"".to_owned());
        }
        Some(path) => base.join(path),
    };
    Ok(StoreSettings {
        kind,
        path,
        commit_window_ms,
        busy_timeout_ms,
        durability,
    })
}

/// `[models."<name>"]`'s numbers: a window and an output limit of at least one token,
/// and no number the session log cannot carry exactly (the window is logged with every
/// `request/context`; past 2^53 - 1 each turn would fail to log it).
fn model_limits(name: &str, model: &ModelConfig) -> Result<(), String> {
    if let Some(window) = model.context_window {
        values::positive_safe(window)
            .map_err(|error| format!("models.{name}.context_window: {error}"))?;
    }
    if model.max_output_tokens == Some(0) {
        return Err(format!(
            "models.{name}.max_output_tokens: expected a positive integer, found 0"
        ));
    }
    if let Some(tokens) = model.image_tokens
        && tokens > MAX_SAFE_INTEGER
    {
        return Err(format!(
            "models.{name}.image_tokens: expected at most {MAX_SAFE_INTEGER}, found {tokens}"
        ));
    }
    Ok(())
}

/// `[loop]`: a turn takes at least one step and a tool pool at least one call (0
/// would end every turn `STEP_LIMIT` or run no parallel-safe call).
fn loop_limits(limits: &LoopLimits) -> Result<(), String> {
    if limits.max_steps_per_turn == 0 {
        return Err("loop.max_steps_per_turn: expected at least 1, found 0".to_owned());
    }
    if limits.tool_pool == 0 {
        return Err("loop.tool_pool: expected at least 1, found 0".to_owned());
    }
    Ok(())
}

/// A duration in ms at `key`: `default` when absent, refused above `max`.
fn at_most_ms(key: &str, value: Option<u64>, default: u64, max: u64) -> Result<u64, String> {
    match value {
        None => Ok(default),
        Some(value) if value <= max => Ok(value),
        Some(value) => Err(format!("{key}: expected at most {max} (ms), found {value}")),
    }
}

fn http_settings(table: &HttpTable) -> Result<HttpSettings, String> {
    let addr = values::socket_addr(table.addr.as_deref().unwrap_or(DEFAULT_HTTP_ADDR))
        .map_err(|message| format!("http.addr: {message}"))?;
    if let Some(name) = &table.token_env {
        values::env_var_name(name).map_err(|message| format!("http.token_env: {message}"))?;
    }
    let trusted_hosts = table.trusted_hosts.clone().unwrap_or_default();
    for (index, host) in trusted_hosts.iter().enumerate() {
        values::host_name(host)
            .map_err(|message| format!("http.trusted_hosts[{index}]: {message}"))?;
    }
    Ok(HttpSettings {
        addr,
        token_env: table.token_env.clone(),
        trusted_hosts,
    })
}
