//! Installing a profile's instructions (`[agent] instructions`, `instructions_file`,
//! `base_prompt`, the workspace's `AGENTS.md`) through `ccare_agent::instructions`.
//! `base_prompt = false` (a bare agent: a raw model, or a system prompt entirely the
//! user's) leaves out the kernel's base prompt and keeps the configured and
//! `AGENTS.md` sections.

use ccare_agent::instructions::install;
use ccare_agent::{Host, InstalledInstructions, InstructionsConfig};

use crate::config::Profile;
use crate::error::AppError;

/// Installs `profile`'s instructions into `host`; call it once the tools and plugins
/// are registered, so the base prompt names every tool.
pub(crate) fn install_instructions(
    host: &Host,
    profile: &Profile,
) -> Result<InstalledInstructions, AppError> {
    let config = InstructionsConfig {
        instructions: profile.instructions.clone(),
        // Absolute already: resolved against the config file's folder at load.
        instructions_file: profile.instructions_file.clone(),
        workspace: profile.workspace.clone(),
        agents_md: true,
        base: profile.base_prompt,
    };
    Ok(install(host, &config, profile.locale)?)
}
