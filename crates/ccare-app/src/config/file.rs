//! The shape of `ccare.toml` as serde reads it: strict tables (an unknown key is an
//! error naming its path, H-CFG-2), optional values, no meaning yet. `resolve.rs` gives
//! them meaning and defaults.

use std::collections::BTreeMap;
use std::path::PathBuf;

use ccare_core::Locale;
use ccare_llm::{ModelConfig, ProviderConfig};
use serde::Deserialize;

use crate::config::settings::LoopLimits;

/// The whole file.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct ConfigFile {
    /// `[agent]`: the default profile's agent.
    #[serde(default)]
    pub(crate) agent: AgentTable,
    /// `[providers.<name>]`.
    #[serde(default)]
    pub(crate) providers: BTreeMap<String, ProviderConfig>,
    /// `[models."<provider>/<model>"]`.
    #[serde(default)]
    pub(crate) models: BTreeMap<String, ModelConfig>,
    /// `[plugins.<name>]`: the default profile's plugins.
    #[serde(default)]
    pub(crate) plugins: BTreeMap<String, toml::Table>,
    /// `[loop]`.
    #[serde(default, rename = "loop")]
    pub(crate) loop_table: LoopLimits,
    /// `[host]`.
    #[serde(default)]
    pub(crate) host: HostTable,
    /// `[store]`.
    #[serde(default)]
    pub(crate) store: StoreTable,
    /// `[validators]`.
    #[serde(default)]
    pub(crate) validators: ValidatorsTable,
    /// `[http]`.
    #[serde(default)]
    pub(crate) http: HttpTable,
    /// `[gateway]`: the OpenAI-compatible gateway (server.md GW-1).
    #[serde(default)]
    pub(crate) gateway: GatewayTable,
    /// `[profiles.<id>]`.
    #[serde(default)]
    pub(crate) profiles: BTreeMap<String, ProfileTable>,
}

/// `[gateway]`.
#[derive(Debug, Default, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct GatewayTable {
    /// Bare model names a client may ask for → `"<provider>/<model>"` routes.
    #[serde(default)]
    pub(crate) models: BTreeMap<String, String>,
    /// Whether a gateway client's own `Authorization` key is accepted and forwarded
    /// upstream (default false).
    #[serde(default)]
    pub(crate) pass_through_keys: Option<bool>,
    /// The largest `/v1/chat/completions` body, in MiB (default 32).
    #[serde(default)]
    pub(crate) max_request_mib: Option<u32>,
}

/// `[agent]` and `[profiles.<id>.agent]`.
#[derive(Debug, Default, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct AgentTable {
    /// `"<provider>/<model>"`.
    #[serde(default)]
    pub(crate) model: Option<String>,
    /// The summary route, `"<provider>/<model>"`.
    #[serde(default)]
    pub(crate) compaction_model: Option<String>,
    /// The file tools' root, relative to the config file's folder.
    #[serde(default)]
    pub(crate) workspace: Option<PathBuf>,
    /// `en` | `zh`.
    #[serde(default)]
    pub(crate) locale: Option<Locale>,
    /// Inline instructions, after the base prompt.
    #[serde(default)]
    pub(crate) instructions: Option<String>,
    /// A file of instructions, relative to the config file's folder.
    #[serde(default)]
    pub(crate) instructions_file: Option<PathBuf>,
    /// `false`: no base prompt of ours (a bare agent).
    #[serde(default)]
    pub(crate) base_prompt: Option<bool>,
}

/// `[profiles.<id>]`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct ProfileTable {
    /// `[profiles.<id>.agent]`: overrides `[agent]` key by key.
    #[serde(default)]
    pub(crate) agent: AgentTable,
    /// `[profiles.<id>.plugins.<name>]`: merged over `[plugins.<name>]`.
    #[serde(default)]
    pub(crate) plugins: BTreeMap<String, toml::Table>,
    /// `tools = [...]`: the built-in tools this profile's agent gets (default: all).
    #[serde(default)]
    pub(crate) tools: Option<Vec<String>>,
}

/// `[host]`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct HostTable {
    /// An IANA zone: the host's zone (time-context's default).
    #[serde(default)]
    pub(crate) time_zone: Option<String>,
    /// How long an idle session actor lives (ACT-1).
    #[serde(default)]
    pub(crate) actor_idle_ms: Option<u64>,
    /// How long a session lease lasts unless renewed (ACT-1).
    #[serde(default)]
    pub(crate) lease_ms: Option<u64>,
}

/// `[store]`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct StoreTable {
    /// `sqlite` (the only backend of this build).
    #[serde(default)]
    pub(crate) kind: Option<String>,
    /// The database file, relative to the config file's folder.
    #[serde(default)]
    pub(crate) path: Option<PathBuf>,
    /// H-STORE-4's window.
    #[serde(default)]
    pub(crate) commit_window_ms: Option<u64>,
    /// How long a write waits for another program's lock on the file.
    #[serde(default)]
    pub(crate) busy_timeout_ms: Option<u64>,
    /// `group` | `per-append`.
    #[serde(default)]
    pub(crate) durability: Option<String>,
}

/// `[validators]`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct ValidatorsTable {
    /// Violations found by a load or import audit are fatal.
    #[serde(default)]
    pub(crate) strict_load: Option<bool>,
    /// Only these validators audit.
    #[serde(default)]
    pub(crate) allow: Option<Vec<String>>,
    /// These validators never audit.
    #[serde(default)]
    pub(crate) deny: Option<Vec<String>>,
}

/// `[http]`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct HttpTable {
    /// `ccare serve`'s socket address.
    #[serde(default)]
    pub(crate) addr: Option<String>,
    /// The env var holding the API token.
    #[serde(default)]
    pub(crate) token_env: Option<String>,
    /// Host names the fence accepts besides loopback.
    #[serde(default)]
    pub(crate) trusted_hosts: Option<Vec<String>>,
}
