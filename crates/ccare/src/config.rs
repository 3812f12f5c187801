//! `ccare.toml`: finding it, reading it strictly, and falling back to the environment
//! (DESIGN.md §5 "the configuration contract", spec H-CFG-1, H-CFG-2).
//!
//! The file is found via `--config`, `$CCARE_CONFIG`, `./ccare.toml`, then
//! `$CCARE_HOME/ccare.toml`. Unknown keys are errors that name the file and the key
//! path. With no file, or a file without `[providers]`, the providers come from the
//! environment (`DEEPSEEK_API_KEY`, `OPENAI_API_KEY`, else the scripted demo).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use ccare_core::Locale;
use ccare_llm::{LlmConfig, ModelConfig, ProviderConfig, ProviderKind, Purpose, env_defaults};
use serde::Deserialize;

/// Where `scripts/fetch-tokenizer.sh` installs the DeepSeek-V4 tokenizer, under the
/// data directory; routes of kind `deepseek` count exactly with it when it is there.
pub(crate) const DEEPSEEK_TOKENIZER: &str = "tokenizers/deepseek-v4/tokenizer.json";

/// The whole file. Tables the host does not read yet are refused rather than ignored.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct ConfigFile {
    #[serde(default)]
    agent: AgentTable,
    #[serde(default)]
    providers: BTreeMap<String, ProviderConfig>,
    #[serde(default)]
    models: BTreeMap<String, ModelConfig>,
    #[serde(default)]
    plugins: BTreeMap<String, toml::Table>,
    #[serde(default, rename = "loop")]
    loop_table: LoopTable,
}

/// `[loop]` (spec H-LOOP-6, H-HOOK-5, H-TOOL-2, H-CANCEL-2).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct LoopTable {
    /// Steps per turn before `STEP_LIMIT`.
    #[serde(default = "default_max_steps")]
    pub(crate) max_steps_per_turn: u32,
    /// Request-error retries per step.
    #[serde(default = "default_max_request_retries")]
    pub(crate) max_request_retries: u32,
    /// Parallel-safe tool calls at once.
    #[serde(default = "default_tool_pool")]
    pub(crate) tool_pool: usize,
    /// Grace for running tool bodies after a cancel.
    #[serde(default = "default_tool_cancel_grace_ms")]
    pub(crate) tool_cancel_grace_ms: u64,
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

impl Default for LoopTable {
    fn default() -> Self {
        Self {
            max_steps_per_turn: default_max_steps(),
            max_request_retries: default_max_request_retries(),
            tool_pool: default_tool_pool(),
            tool_cancel_grace_ms: default_tool_cancel_grace_ms(),
        }
    }
}

/// `[agent]`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct AgentTable {
    #[serde(default)]
    model: Option<String>,
    #[serde(default)]
    compaction_model: Option<String>,
    #[serde(default)]
    workspace: Option<PathBuf>,
    #[serde(default)]
    locale: Option<Locale>,
}

/// Settings resolved from the file, the environment and the command line.
#[derive(Debug)]
pub(crate) struct Settings {
    /// The file read, if any.
    pub(crate) source: Option<PathBuf>,
    /// Providers, models and purpose routes.
    pub(crate) llm: LlmConfig,
    /// The conversation model, `"<provider>/<model>"`.
    pub(crate) model: String,
    /// Something to tell the user on stderr (e.g. the scripted fallback).
    pub(crate) notice: Option<String>,
    /// The root of the file tools.
    pub(crate) workspace: PathBuf,
    /// The language of model-visible notices.
    pub(crate) locale: Locale,
    /// `[loop]`.
    pub(crate) loop_limits: LoopTable,
    /// `[plugins.*]` tables, validated when the plugins mount.
    #[allow(dead_code)]
    pub(crate) plugins: BTreeMap<String, toml::Table>,
}

/// Where the file is looked for, in order.
fn candidates(
    flag: Option<&Path>,
    home: &Path,
    env: &dyn Fn(&str) -> Option<String>,
) -> Vec<(PathBuf, bool)> {
    if let Some(path) = flag {
        return vec![(path.to_path_buf(), true)];
    }
    if let Some(path) = env("CCARE_CONFIG").filter(|path| !path.is_empty()) {
        return vec![(PathBuf::from(path), true)];
    }
    vec![
        (PathBuf::from("ccare.toml"), false),
        (home.join("ccare.toml"), false),
    ]
}

/// Command-line overrides.
#[derive(Debug, Default)]
pub(crate) struct Overrides {
    /// `--model`.
    pub(crate) model: Option<String>,
    /// `--provider script:FILE.jsonl`.
    pub(crate) provider: Option<String>,
}

/// Loads the settings. Errors name the file and the key.
pub(crate) fn load(
    flag: Option<&Path>,
    home: &Path,
    overrides: &Overrides,
    env: &dyn Fn(&str) -> Option<String>,
) -> anyhow::Result<Settings> {
    let mut found = None;
    for (path, required) in candidates(flag, home, env) {
        match std::fs::read_to_string(&path) {
            Ok(text) => {
                found = Some((path, text));
                break;
            }
            Err(error) if error.kind() == std::io::ErrorKind::NotFound && !required => {}
            Err(error) => anyhow::bail!("cannot read config {}: {error}", path.display()),
        }
    }
    let (source, file) = match found {
        Some((path, text)) => {
            let file =
                parse(&text).map_err(|message| anyhow::anyhow!("{}: {message}", path.display()))?;
            (Some(path), file)
        }
        None => (None, ConfigFile::default()),
    };
    let base = source
        .as_deref()
        .and_then(Path::parent)
        .map(Path::to_path_buf)
        .unwrap_or_default();
    let origin = source.as_ref().map_or_else(
        || "the command line".to_owned(),
        |path| path.display().to_string(),
    );
    let mut settings = resolve(file, source, &base, overrides, env)
        .map_err(|message| anyhow::anyhow!("{origin}: {message}"))?;
    let installed = home.join(DEEPSEEK_TOKENIZER);
    if installed.is_file() {
        settings.llm.deepseek_tokenizer = Some(installed);
    }
    Ok(settings)
}

fn parse(text: &str) -> Result<ConfigFile, String> {
    let table: toml::Table =
        toml::from_str(text).map_err(|error| error.to_string().trim_end().to_owned())?;
    serde_path_to_error::deserialize(toml::Value::Table(table)).map_err(|error| {
        let path = error.path().to_string();
        let inner = error.inner().to_string();
        // toml repeats the table on a second line ("in `providers.local`"); the path
        // already says where.
        let message = inner.lines().next().unwrap_or_default();
        if path == "." {
            message.to_owned()
        } else {
            format!("{path}: {message}")
        }
    })
}

fn resolve(
    mut file: ConfigFile,
    source: Option<PathBuf>,
    base: &Path,
    overrides: &Overrides,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<Settings, String> {
    for provider in file.providers.values_mut() {
        if let Some(script) = &provider.script {
            provider.script = Some(base.join(script));
        }
    }
    for model in file.models.values_mut() {
        if let Some(tokenizer) = &model.tokenizer {
            model.tokenizer = Some(base.join(tokenizer));
        }
    }
    let mut notice = None;
    let mut llm = LlmConfig {
        providers: file.providers,
        models: file.models,
        purpose_models: BTreeMap::new(),
        deepseek_tokenizer: None,
    };
    let mut model = file.agent.model.clone();
    if llm.providers.is_empty() {
        let defaults = env_defaults(env);
        llm.providers = defaults.config.providers;
        for (name, config) in defaults.config.models {
            llm.models.entry(name).or_insert(config);
        }
        model.get_or_insert(defaults.model);
        notice = defaults.notice;
    }
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
        model = Some("script/scripted".to_owned());
        notice = None;
    }
    if let Some(flag) = &overrides.model {
        model = Some(flag.clone());
    }
    let Some(model) = model else {
        return Err(
            "agent.model: expected \"<provider>/<model>\", found nothing (set [agent] model)"
                .to_owned(),
        );
    };
    if let Some(compaction) = file.agent.compaction_model {
        llm.purpose_models.insert(Purpose::Compaction, compaction);
    }
    let workspace = base.join(file.agent.workspace.unwrap_or_else(|| PathBuf::from(".")));
    Ok(Settings {
        source,
        llm,
        model,
        notice,
        workspace,
        locale: file.agent.locale.unwrap_or_default(),
        loop_limits: file.loop_table,
        plugins: file.plugins,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn no_env(_: &str) -> Option<String> {
        None
    }

    fn settings(text: &str) -> Result<Settings, String> {
        let file = parse(text)?;
        resolve(
            file,
            None,
            Path::new("/cfg"),
            &Overrides::default(),
            &no_env,
        )
    }

    #[test]
    fn h_cfg_2_unknown_keys_name_the_key_path() {
        let error = settings(
            "[providers.local]\nkind = \"openai\"\nbase_url = \"http://x/v1\"\ncolour = 1\n",
        )
        .err();
        let error = error.unwrap_or_default();
        assert!(
            error.starts_with("providers.local.colour: unknown field `colour`"),
            "{error}"
        );
        let error = settings("[models.\"local/m\"]\ncontext_window = \"big\"\n")
            .err()
            .unwrap_or_default();
        assert!(
            error.starts_with(
                "models.local/m.context_window: invalid type: string \"big\", expected u64"
            ),
            "{error}"
        );
        let error = settings("[loop]\nmax_step_per_turn = 3\n")
            .err()
            .unwrap_or_default();
        assert!(
            error.starts_with("loop.max_step_per_turn: unknown field `max_step_per_turn`"),
            "{error}"
        );
        let error = settings("[store]\ncommit_window_ms = 3\n")
            .err()
            .unwrap_or_default();
        assert!(error.starts_with("store: unknown field `store`"), "{error}");
    }

    #[test]
    fn design_5_contract_example_loads() {
        let loaded = settings(
            r#"
[agent]
model = "local/fake-model"
workspace = "."
locale = "zh"

[providers.local]
kind = "openai"
base_url = "http://127.0.0.1:8080/v1"
api_key_env = "OPENAI_API_KEY"

[models."local/fake-model"]
context_window = 16000
max_output_tokens = 1024

[plugins.time-context]
time_zone = "UTC"
"#,
        );
        let loaded = loaded.map_err(|error| error.to_string());
        let Ok(loaded) = loaded else {
            panic!("{loaded:?}");
        };
        assert_eq!(loaded.model, "local/fake-model");
        assert_eq!(loaded.locale, Locale::Zh);
        assert_eq!(loaded.notice, None);
        assert_eq!(
            loaded
                .llm
                .models
                .get("local/fake-model")
                .and_then(|model| model.context_window),
            Some(16000)
        );
        assert!(loaded.plugins.contains_key("time-context"));
    }

    #[test]
    fn design_5_no_file_falls_back_to_the_scripted_demo_with_a_notice() {
        let loaded = resolve(
            ConfigFile::default(),
            None,
            Path::new(""),
            &Overrides::default(),
            &no_env,
        );
        let Ok(loaded) = loaded else {
            panic!("{loaded:?}");
        };
        assert_eq!(loaded.model, "demo/scripted");
        assert!(loaded.notice.is_some());
    }
}
