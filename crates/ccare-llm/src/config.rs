//! The LLM layer's share of `ccare.toml`: providers, models, purpose routes
//! (DESIGN.md §5, spec H-LLM-2, H-CFG-1), and the defaults used when there is no file.

use std::collections::BTreeMap;
use std::path::PathBuf;

use crate::purpose::Purpose;
use crate::route::{ModelConfig, ProviderConfig, ProviderKind};

/// Everything the LLM layer needs from configuration.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct LlmConfig {
    /// `[providers.<name>]`.
    pub providers: BTreeMap<String, ProviderConfig>,
    /// `[models."<provider>/<model>"]`.
    pub models: BTreeMap<String, ModelConfig>,
    /// Purposes with their own route, e.g. compaction from `[agent] compaction_model`.
    pub purpose_models: BTreeMap<Purpose, String>,
    /// The tokenizer routes of kind `deepseek` use unless their model sets one.
    pub deepseek_tokenizer: Option<PathBuf>,
}

/// An invalid LLM configuration, naming the key.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ConfigError {
    /// A value is not what the key expects.
    #[error("{key}: expected {expected}, found {found}")]
    Invalid {
        /// The key path, e.g. `providers.local.base_url`.
        key: String,
        /// What was expected.
        expected: String,
        /// What was found.
        found: String,
    },
    /// A script file could not be read or parsed.
    #[error("{key}: {message}")]
    Script {
        /// The key path of the script setting.
        key: String,
        /// What went wrong, naming the file and line.
        message: String,
    },
}

impl ConfigError {
    /// An `Invalid` error.
    pub fn invalid(key: &str, expected: impl Into<String>, found: impl Into<String>) -> Self {
        ConfigError::Invalid {
            key: key.to_owned(),
            expected: expected.into(),
            found: found.into(),
        }
    }
}

/// The provider setup chosen when no config file names one (DESIGN.md §5).
#[derive(Debug, Clone, PartialEq)]
pub struct EnvDefaults {
    /// The providers and models.
    pub config: LlmConfig,
    /// The conversation model, `"<provider>/<model>"`.
    pub model: String,
    /// What to tell the user on stderr, if anything (the scripted fallback).
    pub notice: Option<String>,
}

/// The default DeepSeek endpoint.
pub const DEEPSEEK_BASE_URL: &str = "https://api.deepseek.com";
/// The default OpenAI endpoint.
pub const OPENAI_BASE_URL: &str = "https://api.openai.com/v1";
/// The model chosen with `DEEPSEEK_API_KEY` and no config.
pub const DEEPSEEK_DEFAULT_MODEL: &str = "deepseek/deepseek-chat";
/// The model chosen with `OPENAI_API_KEY` and no config.
pub const OPENAI_DEFAULT_MODEL: &str = "openai/gpt-4o-mini";
/// The scripted demo model chosen when no key is set.
pub const DEMO_MODEL: &str = "demo/scripted";

/// With no config file: `DEEPSEEK_API_KEY` selects DeepSeek (`DEEPSEEK_BASE_URL`
/// overrides the endpoint); else `OPENAI_API_KEY` (+ `OPENAI_BASE_URL`) selects an
/// OpenAI-compatible endpoint; else the built-in scripted demo provider.
pub fn env_defaults(env: &dyn Fn(&str) -> Option<String>) -> EnvDefaults {
    let set = |name: &str| env(name).filter(|value| !value.trim().is_empty());
    let mut config = LlmConfig::default();
    if set("DEEPSEEK_API_KEY").is_some() {
        let mut provider = ProviderConfig::new(ProviderKind::Deepseek);
        provider.base_url =
            Some(set("DEEPSEEK_BASE_URL").unwrap_or_else(|| DEEPSEEK_BASE_URL.to_owned()));
        provider.api_key_env = Some("DEEPSEEK_API_KEY".to_owned());
        config.providers.insert("deepseek".to_owned(), provider);
        config
            .models
            .insert(DEEPSEEK_DEFAULT_MODEL.to_owned(), ModelConfig::default());
        return EnvDefaults {
            config,
            model: DEEPSEEK_DEFAULT_MODEL.to_owned(),
            notice: None,
        };
    }
    if set("OPENAI_API_KEY").is_some() {
        let mut provider = ProviderConfig::new(ProviderKind::Openai);
        provider.base_url =
            Some(set("OPENAI_BASE_URL").unwrap_or_else(|| OPENAI_BASE_URL.to_owned()));
        provider.api_key_env = Some("OPENAI_API_KEY".to_owned());
        config.providers.insert("openai".to_owned(), provider);
        config
            .models
            .insert(OPENAI_DEFAULT_MODEL.to_owned(), ModelConfig::default());
        return EnvDefaults {
            config,
            model: OPENAI_DEFAULT_MODEL.to_owned(),
            notice: None,
        };
    }
    config
        .providers
        .insert("demo".to_owned(), ProviderConfig::new(ProviderKind::Script));
    config
        .models
        .insert(DEMO_MODEL.to_owned(), ModelConfig::default());
    EnvDefaults {
        config,
        model: DEMO_MODEL.to_owned(),
        notice: Some(
            "no API key found (DEEPSEEK_API_KEY, OPENAI_API_KEY) and no ccare.toml: using the scripted demo provider"
                .to_owned(),
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env_of(pairs: &'static [(&'static str, &'static str)]) -> impl Fn(&str) -> Option<String> {
        move |name| {
            pairs
                .iter()
                .find(|(key, _)| *key == name)
                .map(|(_, value)| (*value).to_owned())
        }
    }

    #[test]
    fn design_5_deepseek_key_wins_and_base_url_overrides() {
        let defaults = env_defaults(&env_of(&[
            ("DEEPSEEK_API_KEY", "sk-d"),
            ("DEEPSEEK_BASE_URL", "http://proxy/v1"),
            ("OPENAI_API_KEY", "sk-o"),
        ]));
        assert_eq!(defaults.model, "deepseek/deepseek-chat");
        assert_eq!(defaults.notice, None);
        let provider = defaults.config.providers.get("deepseek");
        assert_eq!(
            provider.and_then(|p| p.base_url.as_deref()),
            Some("http://proxy/v1")
        );
        assert_eq!(provider.map(|p| p.kind), Some(ProviderKind::Deepseek));
    }

    #[test]
    fn design_5_openai_key_then_scripted_fallback_with_a_notice() {
        let openai = env_defaults(&env_of(&[("OPENAI_API_KEY", "sk-o")]));
        assert_eq!(openai.model, "openai/gpt-4o-mini");
        assert_eq!(
            openai
                .config
                .providers
                .get("openai")
                .and_then(|p| p.base_url.as_deref()),
            Some("https://api.openai.com/v1")
        );
        let none = env_defaults(&env_of(&[("DEEPSEEK_API_KEY", " ")]));
        assert_eq!(none.model, "demo/scripted");
        assert!(
            none.notice
                .is_some_and(|notice| notice.contains("scripted demo provider"))
        );
    }
}
