//! `ccare.toml`: finding it, reading it strictly, and falling back to the environment
//! (DESIGN.md §5 "the configuration contract", spec H-CFG-1..4).
//!
//! The file is found via `--config`, `$CCARE_CONFIG`, `./ccare.toml`, then
//! `$CCARE_HOME/ccare.toml`. Unknown keys are errors that name the file, the key path
//! and the value. With no file, or a file without `[providers]`, the providers come
//! from the environment (`DEEPSEEK_API_KEY`, `OPENAI_API_KEY`, else the scripted demo).
//! Every profile is resolved at load, so a bad profile is refused even when another
//! one is used ("config is read once").
//!
//! - `file.rs`: the serde shape of the file.
//! - `resolve.rs`: defaults, paths, the environment fallback, the profile lookup.
//! - `plugins.rs`: which plugins a profile mounts, with which tables.
//! - `values.rs`: single-value checks (addresses, env var and host names).
//! - `settings.rs`: the public result, [`Settings`].

mod file;
mod plugins;
mod resolve;
mod settings;
mod values;

use std::path::{Path, PathBuf};

pub use settings::{
    BuiltinTool, DEFAULT_ACTOR_IDLE_MS, DEFAULT_HTTP_ADDR, DEFAULT_LEASE_MS, DEFAULT_PROFILE,
    GatewaySettings, HostSettings, HttpSettings, LoopLimits, MIN_LEASE_MS, PluginMount, Profile,
    Settings, StoreKind, StoreSettings,
};

use crate::error::AppError;
use crate::home::Home;

/// Where `scripts/fetch-tokenizer.sh` installs the DeepSeek-V4 tokenizer, under the
/// data directory; routes of kind `deepseek` count exactly with it when it is there.
pub const DEEPSEEK_TOKENIZER: &str = "tokenizers/deepseek-v4/tokenizer.json";

/// Command-line overrides: the agent level of the lookup order (H-CFG-4).
#[derive(Debug, Clone, Default)]
pub struct Overrides {
    /// `--model`.
    pub model: Option<String>,
    /// `--provider script:FILE.jsonl`.
    pub provider: Option<String>,
}

/// Where the file is looked for, in order; `true` marks a file that must exist.
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

/// Finds, reads and resolves the config. `flag` is `--config`; `env` reads the
/// environment (`CCARE_CONFIG`, the provider keys). Errors name the file and the key.
pub fn load(
    flag: Option<&Path>,
    home: &Home,
    overrides: &Overrides,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<Settings, AppError> {
    let mut found = None;
    for (path, required) in candidates(flag, &home.dir, env) {
        match std::fs::read_to_string(&path) {
            Ok(text) => {
                found = Some((path, text));
                break;
            }
            Err(error) if error.kind() == std::io::ErrorKind::NotFound && !required => {}
            Err(error) => return Err(AppError::ReadConfig { path, error }),
        }
    }
    let (source, text) = match found {
        Some((path, text)) => (Some(path), Some(text)),
        None => (None, None),
    };
    let origin = source.as_ref().map_or_else(
        || "the command line".to_owned(),
        |path| path.display().to_string(),
    );
    let file = match &text {
        Some(text) => parse(text).map_err(|message| AppError::config(&origin, message))?,
        None => file::ConfigFile::default(),
    };
    let base = source
        .as_deref()
        .and_then(Path::parent)
        .map(Path::to_path_buf)
        .unwrap_or_default();
    let mut settings = resolve::resolve(file, source, &base, home, overrides, env)
        .map_err(|message| AppError::config(&origin, message))?;
    let installed = home.dir.join(DEEPSEEK_TOKENIZER);
    if installed.is_file() {
        settings.llm.deepseek_tokenizer = Some(installed);
    }
    Ok(settings)
}

/// Loads a config from `text` as if read from `path` (tests, tools that hold the
/// text already).
pub fn load_text(
    text: &str,
    path: &Path,
    home: &Home,
    overrides: &Overrides,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<Settings, AppError> {
    let origin = path.display().to_string();
    let file = parse(text).map_err(|message| AppError::config(&origin, message))?;
    let base = path.parent().map(Path::to_path_buf).unwrap_or_default();
    resolve::resolve(file, Some(path.to_path_buf()), &base, home, overrides, env)
        .map_err(|message| AppError::config(&origin, message))
}

/// Parses the text strictly: an error is `key.path: message`, and an unknown key also
/// shows the value found there.
fn parse(text: &str) -> Result<file::ConfigFile, String> {
    let table: toml::Table =
        toml::from_str(text).map_err(|error| error.to_string().trim_end().to_owned())?;
    let root = toml::Value::Table(table);
    serde_path_to_error::deserialize(root.clone()).map_err(|error| {
        let path = error.path().to_string();
        let inner = error.inner().to_string();
        // toml repeats the table on a second line ("in `providers.local`"); the path
        // already says where.
        let message = inner.lines().next().unwrap_or_default();
        if path == "." {
            return message.to_owned();
        }
        let found = message
            .starts_with("unknown field")
            .then(|| value_at(&root, error.path()))
            .flatten()
            .map(|value| format!(", found {}", plugins::shown(value)))
            .unwrap_or_default();
        format!("{path}: {message}{found}")
    })
}

/// The value at a serde path in the raw table.
fn value_at<'a>(
    root: &'a toml::Value,
    path: &serde_path_to_error::Path,
) -> Option<&'a toml::Value> {
    let mut value = root;
    for segment in path.iter() {
        value = match segment {
            serde_path_to_error::Segment::Map { key } => value.get(key.as_str())?,
            serde_path_to_error::Segment::Seq { index } => value.get(*index)?,
            serde_path_to_error::Segment::Enum { .. } | serde_path_to_error::Segment::Unknown => {
                return None;
            }
        };
    }
    Some(value)
}
