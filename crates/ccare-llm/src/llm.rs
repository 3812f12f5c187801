//! The LLM layer's front door: routes from config, `prepare_call`, retries
//! (spec H-LLM-1, H-LLM-2, H-LLM-6).

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;

use ccare_core::{FailureCode, LlmFailure};
use tokio_util::sync::CancellationToken;

use crate::attempts::Attempts;
use crate::chunk::ChunkStream;
use crate::config::{ConfigError, LlmConfig};
use crate::openai::OpenAiAdapter;
use crate::provider::Provider;
use crate::purpose::Purpose;
use crate::request::CallConfig;
use crate::retry::RetryPolicy;
use crate::route::{
    DEFAULT_IMAGE_TOKENS, ModelConfig, ProviderConfig, ProviderKind, Route, builtin_model,
    split_model_ref,
};
use crate::script::ScriptProvider;

struct ProviderEntry {
    config: ProviderConfig,
    adapter: Arc<dyn Provider>,
}

/// Routes calls to providers. Built once from config; cheap to share behind an `Arc`.
pub struct Llm {
    providers: BTreeMap<String, ProviderEntry>,
    models: BTreeMap<String, ModelConfig>,
    purpose_models: BTreeMap<Purpose, String>,
    deepseek_tokenizer: Option<PathBuf>,
}

impl std::fmt::Debug for Llm {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Llm")
            .field("providers", &self.providers.keys().collect::<Vec<_>>())
            .field("models", &self.models)
            .field("purpose_models", &self.purpose_models)
            .finish()
    }
}

/// One configured route, as `ccare models` lists it.
#[derive(Debug, Clone, PartialEq)]
pub struct RouteInfo {
    /// `"<provider>/<model>"`.
    pub name: String,
    /// The provider's kind.
    pub kind: ProviderKind,
    /// The context window, when known.
    pub context_window: Option<u64>,
    /// The default output limit, when known.
    pub max_output_tokens: Option<u32>,
    /// The tokenizer that makes counts exact, when one is configured or installed.
    pub tokenizer: Option<PathBuf>,
}

impl Llm {
    /// Builds every provider of `config`. `env` reads environment variables (API keys);
    /// an unreadable script or an invalid endpoint is an error naming the config key.
    pub fn from_config(
        config: LlmConfig,
        env: &dyn Fn(&str) -> Option<String>,
    ) -> Result<Self, ConfigError> {
        let mut providers = BTreeMap::new();
        for (name, provider) in &config.providers {
            let adapter: Arc<dyn Provider> = match provider.kind {
                ProviderKind::Openai | ProviderKind::Deepseek => {
                    Arc::new(OpenAiAdapter::new(name, provider, env)?)
                }
                ProviderKind::Script => Arc::new(ScriptProvider::from_config(name, provider)?),
            };
            providers.insert(
                name.clone(),
                ProviderEntry {
                    config: provider.clone(),
                    adapter,
                },
            );
        }
        let llm = Self {
            providers,
            models: config.models,
            purpose_models: config.purpose_models,
            deepseek_tokenizer: config.deepseek_tokenizer,
        };
        for key in llm.models.keys() {
            llm.check_model_ref(&format!("models.{key:?}"), key)?;
        }
        for (purpose, model) in &llm.purpose_models {
            llm.check_model_ref(&format!("routes.{purpose}"), model)?;
        }
        Ok(llm)
    }

    fn check_model_ref(&self, key: &str, model_ref: &str) -> Result<(), ConfigError> {
        let Some((provider, _)) = split_model_ref(model_ref) else {
            return Err(ConfigError::invalid(
                key,
                "\"<provider>/<model>\"",
                format!("{model_ref:?}"),
            ));
        };
        if !self.providers.contains_key(provider) {
            return Err(ConfigError::invalid(
                key,
                format!(
                    "a configured provider (one of {:?})",
                    self.providers.keys().collect::<Vec<_>>()
                ),
                format!("{provider:?}"),
            ));
        }
        Ok(())
    }

    /// Adds or replaces a provider with a custom adapter (tests, embedding hosts).
    pub fn insert_provider(
        &mut self,
        name: &str,
        config: ProviderConfig,
        adapter: Arc<dyn Provider>,
    ) {
        self.providers
            .insert(name.to_owned(), ProviderEntry { config, adapter });
    }

    /// The route `model_ref` (`"<provider>/<model>"`) resolves to.
    pub fn route(&self, model_ref: &str) -> Result<Route, LlmFailure> {
        let Some((provider, model)) = split_model_ref(model_ref) else {
            return Err(LlmFailure::new(
                FailureCode::InvalidRequest,
                format!("model {model_ref:?} is not of the form \"<provider>/<model>\""),
            ));
        };
        let Some(entry) = self.providers.get(provider) else {
            return Err(LlmFailure::new(
                FailureCode::InvalidRequest,
                format!("model {model_ref:?} names provider {provider:?}, which is not configured"),
            ));
        };
        let builtin = builtin_model(entry.config.kind, model);
        let configured = self.models.get(model_ref).cloned().unwrap_or_default();
        let tokenizer = configured.tokenizer.or(builtin.tokenizer).or_else(|| {
            (entry.config.kind == ProviderKind::Deepseek)
                .then(|| self.deepseek_tokenizer.clone())
                .flatten()
        });
        Ok(Route {
            provider: provider.to_owned(),
            kind: entry.config.kind,
            model: model.to_owned(),
            context_window: configured.context_window.or(builtin.context_window),
            max_output_tokens: configured.max_output_tokens.or(builtin.max_output_tokens),
            reasoning_echo: configured
                .reasoning_echo
                .or(builtin.reasoning_echo)
                .unwrap_or(false),
            image_tokens: configured
                .image_tokens
                .or(builtin.image_tokens)
                .unwrap_or(DEFAULT_IMAGE_TOKENS),
            tokenizer,
            retry: RetryPolicy {
                max_attempts: entry.config.max_attempts.max(1),
                ..RetryPolicy::default()
            },
        })
    }

    /// The model a purpose routes to: its own route when configured (e.g. `[agent]
    /// compaction_model`), else the conversation model given.
    pub fn model_for(&self, purpose: Purpose, conversation_model: &str) -> String {
        self.purpose_models
            .get(&purpose)
            .cloned()
            .unwrap_or_else(|| conversation_model.to_owned())
    }

    /// The model `purpose` has its own route to (e.g. `[agent] compaction_model`),
    /// `None` when it falls back to the conversation route (H-LLM-2).
    pub fn purpose_model(&self, purpose: Purpose) -> Option<&str> {
        self.purpose_models.get(&purpose).map(String::as_str)
    }

    /// Every route config names: the `[models]` entries, plus the purpose routes.
    pub fn routes(&self) -> Vec<RouteInfo> {
        let mut names: Vec<String> = self.models.keys().cloned().collect();
        for model in self.purpose_models.values() {
            if !names.contains(model) {
                names.push(model.clone());
            }
        }
        names
            .into_iter()
            .filter_map(|name| {
                let route = self.route(&name).ok()?;
                Some(RouteInfo {
                    name,
                    kind: route.kind,
                    context_window: route.context_window,
                    max_output_tokens: route.max_output_tokens,
                    tokenizer: route.tokenizer,
                })
            })
            .collect()
    }

    /// Pins the route of `config` (the purpose's own route when one is configured) and
    /// resolves the output limit (H-LLM-1).
    pub fn prepare_call(&self, mut config: CallConfig) -> Result<PreparedCall, LlmFailure> {
        if config.purpose != Purpose::Conversation
            && let Some(model) = self.purpose_models.get(&config.purpose)
        {
            config.model.clone_from(model);
        }
        self.prepare_exact(config)
    }

    /// Pins exactly the route `config.model` names, without the purpose's own route,
    /// and resolves the output limit (H-LLM-1): for a caller that resolved the
    /// purpose's route itself (context-care's summary route, where an explicit
    /// `summary.provider/model` wins over `[agent] compaction_model`, CC-SUM-1).
    pub fn prepare_exact(&self, mut config: CallConfig) -> Result<PreparedCall, LlmFailure> {
        let route = self.route(&config.model)?;
        let Some(entry) = self.providers.get(&route.provider) else {
            return Err(LlmFailure::new(
                FailureCode::InvalidRequest,
                format!("provider {:?} is not configured", route.provider),
            ));
        };
        if config.max_tokens.is_none() {
            config.max_tokens = route.max_output_tokens;
        }
        Ok(PreparedCall {
            call_id: uuid::Uuid::now_v7().to_string(),
            route,
            config,
            adapter: Arc::clone(&entry.adapter),
        })
    }
}

/// A call with its route pinned. Streaming consumes it, so a prepared call is used
/// at most once (H-LLM-1's `PREPARED_CALL_CONSUMED` is a compile error here).
pub struct PreparedCall {
    /// The call's id.
    pub call_id: String,
    /// The pinned route.
    pub route: Route,
    /// The call, with `max_tokens` resolved.
    pub config: CallConfig,
    adapter: Arc<dyn Provider>,
}

impl std::fmt::Debug for PreparedCall {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PreparedCall")
            .field("call_id", &self.call_id)
            .field("route", &self.route)
            .finish_non_exhaustive()
    }
}

impl PreparedCall {
    /// Streams the call. Transient failures before the first content chunk are
    /// retried per the route's policy, each announced by a [`Chunk::Retry`]; after
    /// content has streamed a failure ends the stream as it is. Cancelling ends the
    /// stream with `finish{aborted}`, also while waiting to retry.
    pub fn stream(self, cancel: CancellationToken) -> ChunkStream {
        Attempts::stream(self.call_id, self.route, self.config, self.adapter, cancel)
    }
}
