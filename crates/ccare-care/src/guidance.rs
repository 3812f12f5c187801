//! The guidance section (CC-NTC-5): a stable part of the system prompt of every
//! conversation request, after the host's sections, whose eight lines are switched by
//! the session's `guidance-<id>` controls. It changes only when those controls are
//! edited, so the prompt cache keeps hitting.

use std::sync::Arc;

use ccare_agent::{HookContext, HookError, RequestHook};
use ccare_llm::{CallConfig, Purpose};

use crate::care::Care;
use crate::texts::render_guidance;

impl Care {
    /// The session's guidance section now, `None` when every line is off.
    pub(crate) fn guidance(&self, session: &ccare_core::SessionId) -> Option<String> {
        render_guidance(self.locale, |id| {
            self.enabled(session, &format!("guidance-{id}"), "notice")
        })
    }
}

/// Appends the guidance section to the system prompt of conversation requests.
pub(crate) struct Guidance {
    pub(crate) care: Arc<Care>,
}

impl RequestHook for Guidance {
    fn edit(&self, context: &HookContext, config: &mut CallConfig) -> Result<(), HookError> {
        if config.purpose != Purpose::Conversation {
            return Ok(());
        }
        let Some(section) = self.care.guidance(context.session.id()) else {
            return Ok(());
        };
        config.system = Some(match config.system.take() {
            Some(system) if !system.is_empty() => format!("{system}\n\n{section}"),
            _ => section,
        });
        Ok(())
    }
}
