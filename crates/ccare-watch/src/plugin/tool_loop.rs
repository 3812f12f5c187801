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
                texts::refused(self.locale, &call.name, count, first_seq),
            )),
            Before::Pointer { count, first_seq } => {
                context.inbox.inject(notice_message(
                    TOOL_LOOP_KIND,
                    LABEL_TOOL_LOOP,
                    texts::pointer(self.locale, &call.name, count, first_seq),
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
                texts::reminder(self.locale, &call.name, count),
            ));
        }
    }
}

/// The guard's model-visible texts, en and zh.
mod texts {
    use ccare_core::Locale;

    fn wrap(line: String) -> String {
        format!("<context-care>\n{line}\n</context-care>")
    }

    pub(super) fn reminder(locale: Locale, tool: &str, count: u32) -> String {
        wrap(match locale {
            Locale::En => format!(
                "You have called {tool} with the same arguments {count} times in a row and got the same result each time. Calling it again will not change the result: use the result you have, or change the approach."
            ),
            Locale::Zh => format!(
                "你已经连续 {count} 次用相同参数调用 {tool}，每次结果都相同。再次调用不会改变结果：请使用已有结果，或换一种做法。"
            ),
        })
    }

    pub(super) fn refused(locale: Locale, tool: &str, count: u32, first_seq: u64) -> String {
        match locale {
            Locale::En => format!(
                "context-care did not run this call: {tool} with these arguments already returned the same result {} times in a row (first at log seq {first_seq}). Use that result, or change the approach.",
                count - 1
            ),
            Locale::Zh => format!(
                "context-care 没有执行这次调用：{tool} 用这些参数已经连续 {} 次返回相同结果（首次在日志序号 {first_seq}）。请使用该结果，或换一种做法。",
                count - 1
            ),
        }
    }

    pub(super) fn pointer(locale: Locale, tool: &str, count: u32, first_seq: u64) -> String {
        wrap(match locale {
            Locale::En => format!(
                "This is the {count}th identical call of {tool}. Its earlier result (log seq {first_seq}) was compacted: the checkpoint summarizes it, and session_search finds the original."
            ),
            Locale::Zh => format!(
                "这是第 {count} 次相同的 {tool} 调用。它较早的结果（日志序号 {first_seq}）已被压缩：检查点对其做了摘要，session_search 可以找到原文。"
            ),
        })
    }
}
