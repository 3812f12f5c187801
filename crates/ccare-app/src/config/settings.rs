//! [`Settings`]: the config as the boot uses it, every value validated and defaulted.
//! Host scope (providers, store, loop, validators, http) is held once; each profile
//! ([`Profile`]) holds what its agents get (model, workspace, locale, instructions,
//! plugins, tools), already looked up agent → profile → host (H-CFG-4).

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::PathBuf;

use ccare_core::Locale;
use ccare_llm::LlmConfig;
use ccare_session::LoadPolicy;
use ccare_store::Durability;
use serde::Deserialize;

use crate::error::AppError;

/// The id of the profile the top-level `[agent]` and `[plugins.*]` tables configure.
pub const DEFAULT_PROFILE: &str = "default";

/// The default [`HostSettings::actor_idle_ms`] (ACT-1: five minutes).
pub const DEFAULT_ACTOR_IDLE_MS: u64 = 300_000;

/// The default [`HostSettings::lease_ms`] (ACT-1: thirty seconds).
pub const DEFAULT_LEASE_MS: u64 = 30_000;

/// The shortest [`HostSettings::lease_ms`] accepted: one second, so that renewing at a
/// third of it leaves room for a slow disk.
pub const MIN_LEASE_MS: u64 = 1_000;

/// The default [`HttpSettings::addr`].
pub const DEFAULT_HTTP_ADDR: &str = "127.0.0.1:7878";

/// Everything `ccare.toml`, the environment and the command line say.
#[derive(Debug, Clone)]
pub struct Settings {
    /// The file read, if any.
    pub source: Option<PathBuf>,
    /// Providers and models (host scope); each profile adds its compaction route.
    pub llm: LlmConfig,
    /// Something to tell the user on stderr (e.g. the scripted fallback).
    pub notice: Option<String>,
    /// `[host]`.
    pub host: HostSettings,
    /// `[store]`.
    pub store: StoreSettings,
    /// `[loop]`.
    pub loop_limits: LoopLimits,
    /// `[validators]`.
    pub validators: LoadPolicy,
    /// `[http]`.
    pub http: HttpSettings,
    /// `[gateway]`.
    pub gateway: GatewaySettings,
    /// Every profile by id, [`DEFAULT_PROFILE`] included.
    pub profiles: BTreeMap<String, Profile>,
}

impl Settings {
    /// Where errors say a value came from: the file, else the command line.
    pub fn origin(&self) -> String {
        self.source.as_ref().map_or_else(
            || "the command line".to_owned(),
            |path| path.display().to_string(),
        )
    }

    /// The profile `id` (`None`: the default profile), or [`AppError::UnknownProfile`].
    pub fn profile(&self, id: Option<&str>) -> Result<&Profile, AppError> {
        let id = id.unwrap_or(DEFAULT_PROFILE);
        self.profiles
            .get(id)
            .ok_or_else(|| AppError::UnknownProfile {
                id: id.to_owned(),
                known: self.profiles.keys().cloned().collect(),
            })
    }
}

/// `[host]` (host scope, H-CFG-4).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostSettings {
    /// The host's IANA zone (`[host] time_zone`): time-context renders in it when its
    /// own table names no `time_zone`. `None`: the process zone.
    pub time_zone: Option<String>,
    /// How long an idle session actor lives before it stops (ACT-1), ms.
    pub actor_idle_ms: u64,
    /// How long a session lease lasts unless renewed (ACT-1), ms: a holder that dies on
    /// another machine blocks the session at most this long (one on this machine not at
    /// all). Renewed every third of it while the session is driven.
    pub lease_ms: u64,
}

/// The store backends of this build.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StoreKind {
    /// The embedded SQLite store (H-STORE-3).
    Sqlite,
}

/// `[store]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoreSettings {
    /// The backend.
    pub kind: StoreKind,
    /// The database file (default `$CCARE_HOME/ccare.db`).
    pub path: PathBuf,
    /// H-STORE-4's window, ms.
    pub commit_window_ms: u64,
    /// How long a write waits for another program's lock on the database before it
    /// fails, ms (default 5000).
    pub busy_timeout_ms: u64,
    /// When an append is durable (H-STORE-5).
    pub durability: Durability,
}

/// `[http]`, validated now and used by `ccare serve`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HttpSettings {
    /// The address to listen on.
    pub addr: SocketAddr,
    /// The env var holding the bearer token (H-HTTP-2).
    pub token_env: Option<String>,
    /// Host names the fence trusts besides loopback (H-HTTP-3).
    pub trusted_hosts: Vec<String>,
}

/// `[gateway]`, validated now and used by the gateway of `ccare serve` (server.md GW-1).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GatewaySettings {
    /// Bare model names a client may send as `model`, each mapped to a configured
    /// `"<provider>/<model>"` route (checked at load: the provider exists).
    pub models: BTreeMap<String, String>,
    /// `pass_through_keys` (default false): a gateway client may authenticate with
    /// its own API key instead of the server token; that key is then sent upstream
    /// for its requests (memory only) and the sessions it creates belong to it.
    pub pass_through_keys: bool,
    /// `max_request_mib` (default [`GatewaySettings::DEFAULT_MAX_REQUEST_MIB`]) in
    /// bytes: the largest chat-completions body the gateway reads. A client sends its
    /// whole transcript on every request, so the API's 1 MiB would refuse a long
    /// session, the very kind the gateway is for.
    pub max_request_bytes: usize,
}

impl GatewaySettings {
    /// The default `max_request_mib`: a transcript of several million tokens.
    pub const DEFAULT_MAX_REQUEST_MIB: u32 = 32;
    /// The largest `max_request_mib` accepted: a body is held in memory whole.
    pub const MAX_REQUEST_MIB: u32 = 1024;
}

impl Default for GatewaySettings {
    fn default() -> Self {
        Self {
            models: BTreeMap::new(),
            pass_through_keys: false,
            max_request_bytes: mib(Self::DEFAULT_MAX_REQUEST_MIB),
        }
    }
}

/// `count` MiB in bytes.
pub(crate) fn mib(count: u32) -> usize {
    usize::try_from(count)
        .unwrap_or(usize::MAX)
        .saturating_mul(1024 * 1024)
}

/// `[loop]` (spec H-LOOP-6, H-HOOK-5, H-TOOL-2, H-CANCEL-2).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LoopLimits {
    /// Steps per turn before `STEP_LIMIT`.
    #[serde(default = "default_max_steps")]
    pub max_steps_per_turn: u32,
    /// Request-error retries per step.
    #[serde(default = "default_max_request_retries")]
    pub max_request_retries: u32,
    /// Parallel-safe tool calls at once.
    #[serde(default = "default_tool_pool")]
    pub tool_pool: usize,
    /// Grace for running tool bodies after a cancel.
    #[serde(default = "default_tool_cancel_grace_ms")]
    pub tool_cancel_grace_ms: u64,
}

fn default_max_steps() -> u32 {
    200
}
fn default_max_request_retries() -> u32 {
    3
}
fn default_tool_pool() -> usize {
    10
}
fn default_tool_cancel_grace_ms() -> u64 {
    5_000
}

impl Default for LoopLimits {
    fn default() -> Self {
        Self {
            max_steps_per_turn: default_max_steps(),
            max_request_retries: default_max_request_retries(),
            tool_pool: default_tool_pool(),
            tool_cancel_grace_ms: default_tool_cancel_grace_ms(),
        }
    }
}

/// One profile: what an agent started under it gets.
#[derive(Debug, Clone, PartialEq)]
pub struct Profile {
    /// The id (`default` for the top-level tables).
    pub id: String,
    /// The conversation route, `"<provider>/<model>"`.
    pub model: String,
    /// The summary route (`compaction_model`), if set.
    pub compaction_model: Option<String>,
    /// The root of the file tools.
    pub workspace: PathBuf,
    /// The language of model-visible notices.
    pub locale: Locale,
    /// Inline instructions (`instructions`).
    pub instructions: Option<String>,
    /// The instructions file (`instructions_file`), resolved against the config
    /// file's folder; it existed at load.
    pub instructions_file: Option<PathBuf>,
    /// Whether our base prompt opens the system prompt (`base_prompt`, default true).
    pub base_prompt: bool,
    /// The plugins this profile mounts, in mount order, with their tables
    /// (`enabled` stripped).
    pub plugins: Vec<PluginMount>,
    /// The built-in tools, in registration order.
    pub tools: Vec<BuiltinTool>,
}

impl Profile {
    /// The table a mounted plugin gets, if `name` is mounted.
    pub fn plugin(&self, name: &str) -> Option<&PluginMount> {
        self.plugins.iter().find(|plugin| plugin.name == name)
    }
}

/// A plugin to mount and its table.
#[derive(Debug, Clone, PartialEq)]
pub struct PluginMount {
    /// The plugin's name (`context-care`, …).
    pub name: String,
    /// Its table as the plugin's strict config reads it (`{}` for defaults).
    pub config: serde_json::Value,
    /// Where the table came from, for messages (`plugins.context-care`, or
    /// `default` when no table named it).
    pub key: String,
}

/// The built-in tools a profile can choose among (`tools = [...]`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BuiltinTool {
    /// `read_file`.
    ReadFile,
    /// `write_file`.
    WriteFile,
    /// `list_files`.
    ListFiles,
    /// `session_search`.
    SessionSearch,
}

impl BuiltinTool {
    /// Every built-in tool, in registration order.
    pub const ALL: [BuiltinTool; 4] = [
        BuiltinTool::ReadFile,
        BuiltinTool::WriteFile,
        BuiltinTool::ListFiles,
        BuiltinTool::SessionSearch,
    ];

    /// The tool's name as the model sees it.
    pub fn name(self) -> &'static str {
        match self {
            BuiltinTool::ReadFile => "read_file",
            BuiltinTool::WriteFile => "write_file",
            BuiltinTool::ListFiles => "list_files",
            BuiltinTool::SessionSearch => "session_search",
        }
    }

    /// The tool named `name`.
    pub fn named(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|tool| tool.name() == name)
    }
}
