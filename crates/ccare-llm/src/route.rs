//! Routes and the model registry (spec H-LLM-1, H-LLM-2): which provider and model a
//! call goes to, with the limits budgets and metrics rely on.

use std::collections::BTreeMap;
use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use crate::retry::RetryPolicy;

/// What kind of endpoint a provider is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum ProviderKind {
    /// An OpenAI-compatible chat-completions endpoint.
    Openai,
    /// DeepSeek's chat-completions endpoint (cache-hit usage, reasoning echo).
    Deepseek,
    /// Scripted replies from a JSONL file, offline.
    Script,
}

impl ProviderKind {
    /// The name used in config.
    pub fn as_str(self) -> &'static str {
        match self {
            ProviderKind::Openai => "openai",
            ProviderKind::Deepseek => "deepseek",
            ProviderKind::Script => "script",
        }
    }
}

/// `[providers.<name>]`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ProviderConfig {
    /// `openai`, `deepseek` or `script`.
    pub kind: ProviderKind,
    /// The endpoint root, e.g. `https://api.deepseek.com` or `http://127.0.0.1:8080/v1`;
    /// requests go to `<base_url>/chat/completions`.
    #[serde(default)]
    pub base_url: Option<String>,
    /// The name of the env var holding the API key.
    #[serde(default)]
    pub api_key_env: Option<String>,
    /// For `kind = "script"`: the JSONL script file.
    #[serde(default)]
    pub script: Option<PathBuf>,
    /// Stream responses (default) or ask for one JSON answer.
    #[serde(default = "default_true")]
    pub stream: bool,
    /// How long a stream may stay silent before the call fails with `TIMEOUT`.
    #[serde(default = "default_idle_timeout_ms")]
    pub idle_timeout_ms: u64,
    /// How long connecting may take.
    #[serde(default = "default_connect_timeout_ms")]
    pub connect_timeout_ms: u64,
    /// Attempts per call for transient failures (H-LLM-6), including the first.
    #[serde(default = "default_max_attempts")]
    pub max_attempts: u32,
    /// Extra headers sent with every request.
    #[serde(default)]
    pub headers: BTreeMap<String, String>,
}

fn default_true() -> bool {
    true
}
fn default_idle_timeout_ms() -> u64 {
    120_000
}
fn default_connect_timeout_ms() -> u64 {
    10_000
}
fn default_max_attempts() -> u32 {
    3
}

impl ProviderConfig {
    /// A provider of `kind` with every option at its default.
    pub fn new(kind: ProviderKind) -> Self {
        Self {
            kind,
            base_url: None,
            api_key_env: None,
            script: None,
            stream: true,
            idle_timeout_ms: default_idle_timeout_ms(),
            connect_timeout_ms: default_connect_timeout_ms(),
            max_attempts: default_max_attempts(),
            headers: BTreeMap::new(),
        }
    }
}

/// `[models."<provider>/<model>"]`: overrides of what the adapter knows.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ModelConfig {
    /// The context window in tokens; budgets and metrics need it.
    #[serde(default)]
    pub context_window: Option<u64>,
    /// The output limit used when a request sets none.
    #[serde(default)]
    pub max_output_tokens: Option<u32>,
    /// Resend readable reasoning of earlier assistant messages (DeepSeek thinking mode
    /// with tool calls requires it).
    #[serde(default)]
    pub reasoning_echo: Option<bool>,
    /// What one image costs in tokens.
    #[serde(default)]
    pub image_tokens: Option<u64>,
    /// A `tokenizer.json` that makes token counts exact.
    #[serde(default)]
    pub tokenizer: Option<PathBuf>,
}

/// A pinned route: everything a call needs to know about where it goes.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Route {
    /// The provider's config name.
    pub provider: String,
    /// The provider's kind.
    pub kind: ProviderKind,
    /// The model name as the provider knows it.
    pub model: String,
    /// The context window, when known.
    pub context_window: Option<u64>,
    /// The default output limit, when known.
    pub max_output_tokens: Option<u32>,
    /// Whether earlier reasoning is echoed back.
    pub reasoning_echo: bool,
    /// What one image costs in tokens.
    pub image_tokens: u64,
    /// A tokenizer for exact counts, when configured (or the kind's default).
    pub tokenizer: Option<PathBuf>,
    /// The retry policy for transient failures.
    pub retry: RetryPolicy,
}

impl Route {
    /// `"<provider>/<model>"`.
    pub fn name(&self) -> String {
        format!("{}/{}", self.provider, self.model)
    }
}

/// Splits `"<provider>/<model>"` at the first slash (model names may hold slashes).
pub fn split_model_ref(model_ref: &str) -> Option<(&str, &str)> {
    let (provider, model) = model_ref.split_once('/')?;
    if provider.is_empty() || model.is_empty() {
        return None;
    }
    Some((provider, model))
}

/// What an adapter kind knows about a model when config says nothing.
pub(crate) fn builtin_model(kind: ProviderKind, model: &str) -> ModelConfig {
    match (kind, model) {
        (ProviderKind::Deepseek, "deepseek-chat" | "deepseek-reasoner") => ModelConfig {
            context_window: Some(131_072),
            max_output_tokens: Some(8_192),
            reasoning_echo: Some(true),
            image_tokens: None,
            tokenizer: None,
        },
        (ProviderKind::Deepseek, _) => ModelConfig {
            reasoning_echo: Some(true),
            ..ModelConfig::default()
        },
        (ProviderKind::Script, _) => ModelConfig {
            context_window: Some(16_000),
            max_output_tokens: Some(1_024),
            ..ModelConfig::default()
        },
        (ProviderKind::Openai, _) => ModelConfig::default(),
    }
}

/// The image price when neither config nor adapter sets one (H-TOK-2).
pub const DEFAULT_IMAGE_TOKENS: u64 = 1024;
