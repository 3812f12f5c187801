//! The tool-loop guard (EX-1) as a kernel tool gate: per session, the pure
//! [`crate::tool_loop::ToolLoop`] sees each call before it runs and each result after
//! it is logged; the reminder is injected for the next step, a refusal answers the call
//! with an error result that cites the earlier one.

use std::collections::HashMap;

use ccare_agent::controls::Controls;
use ccare_agent::{ToolFailure, ToolGate, ToolGateContext};
use ccare_core::{Locale, SessionId, ToolCallBlock, ToolResultBlock};
use parking_lot::Mutex;

use super::{SOURCE, notice_message};
use crate::tool_loop::{Before, ToolLoop, ToolLoopConfig, digest};

/// The code of a refused repeat call.
pub const TOOL_LOOP_STOPPED: &str = "TOOL_LOOP_STOPPED";
/// The notices' source kind.
pub const TOOL_LOOP_KIND: &str = "plugin:context-care:tool-loop";
/// The notices' label.
pub const LABEL_TOOL_LOOP: &str = "Tool loop detected";

/// The gate; one per mounted plugin.
pub(crate) struct ToolLoopGate {
    pub(crate) config: ToolLoopConfig,
    pub(crate) locale: Locale,
    pub(crate) controls: Controls,
    pub(crate) sessions: Mutex<HashMap<SessionId, ToolLoop>>,
}

impl ToolLoopGate {
    fn enabled(&self, session: &SessionId, action: &str) -> bool {
        self.controls
            .decide(session, SOURCE, "tool-loop", action)
            .is_enabled()
    }
}

fn args_digest(call: &ToolCallBlock) -> String {
    digest(
        &call
            .raw_arguments
            .clone()
            .unwrap_or_else(|| call.arguments.to_string()),
    )
}

fn result_digest(result: &ToolResultBlock) -> String {
    digest(&serde_json::to_string(&result.content).unwrap_or_default())
}

impl ToolGate for ToolLoopGate {
    fn before(&self, context: &ToolGateContext, call: &ToolCallBlock) -> Result<(), ToolFailure> {
        let session = context.session.id();
        if !self.enabled(session, "stop") {
            return Ok(());
        }
        let live: Vec<u64> = context
            .session
            .derived_view()
            .messages
            .iter()
            .map(|derived| derived.seq)
            .collect();
        let decision = self
            .sessions
            .lock()
            .entry(session.clone())
            .or_default()
            .before(&self.config, &call.name, &args_digest(call), |seq| {
                live.contains(&seq)
            });
        match decision {
            Before::Run => Ok(()),
            Before::Refuse { count, first_seq } => Err(ToolFailure::new(
                TOOL_LOOP_STOPPED,
                super::texts::tool_loop_refused(self.locale, &call.name, count, first_seq),
            )),
            Before::Pointer { count, first_seq } => {
                context.inbox.inject(notice_message(
                    TOOL_LOOP_KIND,
                    LABEL_TOOL_LOOP,
                    super::texts::tool_loop_pointer(self.locale, &call.name, count, first_seq),
                ));
                Ok(())
            }
        }
    }

    fn after(
        &self,
        context: &ToolGateContext,
        call: &ToolCallBlock,
        result: &ToolResultBlock,
        seq: u64,
    ) {
        let session = context.session.id();
        let reached = self
            .sessions
            .lock()
            .entry(session.clone())
            .or_default()
            .after(
                &self.config,
                &call.name,
                &args_digest(call),
                &result_digest(result),
                seq,
            );
        if let Some(count) = reached
            && self.enabled(session, "notice")
        {
            context.inbox.inject(notice_message(
                TOOL_LOOP_KIND,
                LABEL_TOOL_LOOP,
                super::texts::tool_loop_reminder(self.locale, &call.name, count),
            ));
        }
    }
}
