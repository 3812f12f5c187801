//! The agent's own instructions: the first sections of the system prompt, before every
//! plugin section.
//!
//! [`install`] registers, in this order:
//!
//! 1. `instructions:base`: a short base prompt of ours (en/zh, `texts.rs`) naming the
//!    tools the host has registered when `install` runs, so call it after the plugins
//!    are mounted.
//! 2. `instructions:file`: the agent's configured instructions, either the inline
//!    `[agent] instructions` text or the text of `[agent] instructions_file`. Setting
//!    both is an error ([`InstructionsError::Both`]): one source, so what the model
//!    reads is never a guess about how two texts were merged.
//! 3. `instructions:agents-md`: the workspace's `AGENTS.md` (the convention Codex,
//!    Goose and others follow), when present and `agents_md` is on.
//!
//! Every text is taken byte for byte (a file's bytes must be UTF-8); an empty text adds
//! no section. The sections are fixed at install time, so every request of a process
//! carries the same bytes and the provider's prompt cache keeps hitting. Installing
//! again replaces the previous instruction sections.

mod texts;

use std::path::{Path, PathBuf};

use ccare_core::Locale;

use crate::hooks::Registered;
use crate::host::{Host, SystemSection};

/// The section name prefix every instruction section carries (`ccare context status`
/// shows each such section as its own category).
pub const SECTION_PREFIX: &str = "instructions:";
/// The base prompt's section name.
pub const BASE_SECTION: &str = "instructions:base";
/// The configured instructions' section name.
pub const FILE_SECTION: &str = "instructions:file";
/// The workspace `AGENTS.md` section name.
pub const AGENTS_MD_SECTION: &str = "instructions:agents-md";
/// The name of the workspace file read for [`AGENTS_MD_SECTION`].
pub const AGENTS_MD_FILE: &str = "AGENTS.md";

/// The `order` of [`BASE_SECTION`]: the lowest there is, so the instructions come
/// before every plugin section (plugin sections use `0`; context care's guidance is
/// appended after all host sections by its request hook).
pub const BASE_ORDER: i32 = i32::MIN;
/// The `order` of [`FILE_SECTION`].
pub const FILE_ORDER: i32 = i32::MIN + 1;
/// The `order` of [`AGENTS_MD_SECTION`].
pub const AGENTS_MD_ORDER: i32 = i32::MIN + 2;

/// Where the agent's instructions come from (`[agent] instructions`,
/// `[agent] instructions_file`, the workspace).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InstructionsConfig {
    /// `[agent] instructions`: inline text.
    pub instructions: Option<String>,
    /// `[agent] instructions_file`: a UTF-8 file; a relative path is joined to
    /// `workspace` (resolve it against the config file's folder before, if wanted).
    pub instructions_file: Option<PathBuf>,
    /// The agent's workspace: where `AGENTS.md` is looked for.
    pub workspace: PathBuf,
    /// Whether the workspace's `AGENTS.md` is read.
    pub agents_md: bool,
    /// Whether the default base prompt is installed (`[agent] base_prompt`; off for a
    /// bare agent whose system prompt is entirely the user's).
    pub base: bool,
}

impl InstructionsConfig {
    /// No configured instructions, `AGENTS.md` read from `workspace`.
    pub fn new(workspace: impl Into<PathBuf>) -> Self {
        Self {
            instructions: None,
            instructions_file: None,
            workspace: workspace.into(),
            agents_md: true,
            base: true,
        }
    }
}

/// Where an installed section's text came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum InstructionsOrigin {
    /// Our base prompt.
    Base,
    /// `[agent] instructions`.
    Inline,
    /// A file: `instructions_file` or `AGENTS.md`, by its path as read.
    File(PathBuf),
}

/// One installed section.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InstalledSection {
    /// The section as registered.
    pub section: SystemSection,
    /// Where its text came from.
    pub origin: InstructionsOrigin,
}

/// What [`install`] registered, in prompt order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InstalledInstructions {
    /// The sections, base first.
    pub sections: Vec<InstalledSection>,
}

impl InstalledInstructions {
    /// The section named `name`, if installed.
    pub fn section(&self, name: &str) -> Option<&InstalledSection> {
        self.sections
            .iter()
            .find(|installed| installed.section.name == name)
    }
}

/// Why the instructions could not be installed. Each names the key or path to fix.
#[derive(Debug, thiserror::Error)]
pub enum InstructionsError {
    /// Both inline instructions and a file were configured.
    #[error(
        "agent.instructions and agent.instructions_file are both set: set one of them \
         (the file is {})",
        .file.display()
    )]
    Both {
        /// The configured file.
        file: PathBuf,
    },
    /// The instructions file does not exist.
    #[error("agent.instructions_file: {} does not exist", .path.display())]
    Missing {
        /// The path looked at.
        path: PathBuf,
    },
    /// A file exists but could not be read (permissions, a folder, I/O).
    #[error("{key}: cannot read {}: {source}", .path.display())]
    Unreadable {
        /// What the file is: `agent.instructions_file` or `AGENTS.md`.
        key: &'static str,
        /// The path read.
        path: PathBuf,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },
    /// A file is not UTF-8.
    #[error("{key}: {} is not UTF-8 (invalid byte at offset {offset})", .path.display())]
    NotUtf8 {
        /// What the file is: `agent.instructions_file` or `AGENTS.md`.
        key: &'static str,
        /// The path read.
        path: PathBuf,
        /// The offset of the first invalid byte.
        offset: usize,
    },
}

/// The base instructions' text for an agent offering the host tools `tools`, and
/// tools the caller declared for the turn when `caller_tools`.
pub(crate) fn base_text(locale: Locale, tools: &[String], caller_tools: bool) -> String {
    texts::render_base(locale, tools, caller_tools)
}

/// The key naming the instructions file in errors.
const FILE_KEY: &str = "agent.instructions_file";
/// The key naming `AGENTS.md` in errors.
const AGENTS_MD_KEY: &str = "AGENTS.md";

/// Reads the configured texts and registers the instruction sections into `host`
/// (replacing any installed before). Nothing is registered when an error is returned.
pub fn install(
    host: &Host,
    config: &InstructionsConfig,
    locale: Locale,
) -> Result<InstalledInstructions, InstructionsError> {
    let installed = read(host, config, locale)?;
    *host.base_locale.write() = config.base.then_some(locale);
    let mut sections = host.sections.write();
    sections.retain(|registered| !registered.hook.name.starts_with(SECTION_PREFIX));
    for installed in &installed.sections {
        sections.push(Registered {
            owner: "host".to_owned(),
            hook: installed.section.clone(),
        });
    }
    Ok(InstalledInstructions {
        sections: installed.sections,
    })
}

/// The sections `config` asks for, read but not registered.
fn read(
    host: &Host,
    config: &InstructionsConfig,
    locale: Locale,
) -> Result<InstalledInstructions, InstructionsError> {
    let mut sections = Vec::new();
    if config.base {
        sections.push(InstalledSection {
            section: SystemSection {
                name: BASE_SECTION.to_owned(),
                order: BASE_ORDER,
                text: texts::render_base(locale, &host.tool_names(), false),
            },
            origin: InstructionsOrigin::Base,
        });
    }
    let configured = match (&config.instructions, &config.instructions_file) {
        (Some(_), Some(file)) => return Err(InstructionsError::Both { file: file.clone() }),
        (Some(text), None) => Some((text.clone(), InstructionsOrigin::Inline)),
        (None, Some(file)) => {
            let path = config.workspace.join(file);
            match read_text(&path, FILE_KEY)? {
                Some(text) => Some((text, InstructionsOrigin::File(path))),
                None => return Err(InstructionsError::Missing { path }),
            }
        }
        (None, None) => None,
    };
    if let Some((text, origin)) = configured {
        push_nonempty(&mut sections, FILE_SECTION, FILE_ORDER, text, origin);
    }
    if config.agents_md {
        let path = config.workspace.join(AGENTS_MD_FILE);
        if let Some(text) = read_text(&path, AGENTS_MD_KEY)? {
            push_nonempty(
                &mut sections,
                AGENTS_MD_SECTION,
                AGENTS_MD_ORDER,
                text,
                InstructionsOrigin::File(path),
            );
        }
    }
    Ok(InstalledInstructions { sections })
}

/// Adds a section unless `text` is empty.
fn push_nonempty(
    sections: &mut Vec<InstalledSection>,
    name: &str,
    order: i32,
    text: String,
    origin: InstructionsOrigin,
) {
    if text.is_empty() {
        return;
    }
    sections.push(InstalledSection {
        section: SystemSection {
            name: name.to_owned(),
            order,
            text,
        },
        origin,
    });
}

/// The UTF-8 text of `path`; `None` when it does not exist.
fn read_text(path: &Path, key: &'static str) -> Result<Option<String>, InstructionsError> {
    let bytes = match std::fs::read(path) {
        Ok(bytes) => bytes,
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(source) => {
            return Err(InstructionsError::Unreadable {
                key,
                path: path.to_owned(),
                source,
            });
        }
    };
    String::from_utf8(bytes)
        .map(Some)
        .map_err(|error| InstructionsError::NotUtf8 {
            key,
            path: path.to_owned(),
            offset: error.utf8_error().valid_up_to(),
        })
}
