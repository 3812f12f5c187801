//! Model-scoped prompts (MP-1 .. MP-3) and the delivery of output-pattern feedback
//! (OP-5, OP-6), as part of the `stream-watch` plugin.
//!
//! - [`config`]: the strict `model_scoped_prompts` rules ([`parse_prompt_rules`],
//!   MP-1) and the pure MP-2 match [`PromptRule::applies`].
//! - [`prompts_catalog`] is the second controls source, `stream-watch:prompts`, with one
//!   rule `prompt:<ruleId>[notice]` per configured rule (RC-1).
//! - `segment`: the request segment and the route tracking it needs. A request hook
//!   notes the route and purpose of the call being prepared (a request segment is told
//!   only the call id), a request segment appends ONE request-only user message
//!   (prompts, then feedback, joined by a blank line; source kind [`PROMPTS_KIND`])
//!   after every surface message (MP-3), also to the side calls of a purpose some rule
//!   names (context care's summaries, purpose `compaction`, go through the host's
//!   `SideRequests`), and, when an `output-pattern` rule exists, the feedback episodes
//!   are observed at pre-step time and delivered through the segment.
//! - `feedback`: the episodes in the storage domain [`FEEDBACK_DOMAIN`].
//! - [`register`] wires it all in.
//!
//! The previous route is the last dispatched route of the call's purpose (MP-2): the
//! plugin's own gate records every dispatch; for a session this process has not
//! dispatched on, it is a fact of the session log, never of another plugin's store
//! (DESIGN.md §3), see [`last_dispatched_route`].
//!
//! The kernel logs the segment's message in the request's `request/header{reason:
//! series}` delta; its provenance (`contextCarePrompt{callId, segments, message}`)
//! travels in the message's source, so it lands in that same delta. A side call has
//! no `request/header`: its caller logs the message with its own events (context care
//! in `compaction/summary.request_delta`).

pub mod config;
mod feedback;
mod segment;

use ccare_agent::PluginScope;
use ccare_agent::controls::{ControlAction, ControlRule, ControlSource};

pub use config::{PromptConfigError, PromptRule, PromptTrigger, RouteRef, parse_prompt_rules};
pub use feedback::{EPISODES_TABLE, FEEDBACK_DOMAIN, episode_key};
pub use segment::last_dispatched_route;

/// The `[plugins.stream-watch]` key of the rules (MP-1).
pub const CONFIG_KEY: &str = "model_scoped_prompts";
/// The controls source of the prompt rules: one rule `prompt:<ruleId>` each, with the
/// action `notice` (RC-1). Separate from the watch's own `stream-watch` source.
pub const PROMPTS_SOURCE: &str = "stream-watch:prompts";
/// The source kind of the request-only message (MP-3, GEN-2).
pub const PROMPTS_KIND: &str = "plugin:context-care:scoped-prompts";
/// The key of the message's provenance in its source (MP-3 `contextCarePrompt`).
pub const PROVENANCE_KEY: &str = "contextCarePrompt";
/// The only action of a prompt rule's control.
pub const PROMPT_ACTION: &str = "notice";

/// The control rule of a prompt rule: `prompt:<ruleId>` (RC-1).
pub fn control_rule_id(rule_id: &str) -> String {
    format!("prompt:{rule_id}")
}

/// The controls source `stream-watch:prompts` (RC-1): `prompt:<ruleId>[notice]` for
/// every configured rule, in config order, on by default.
pub fn prompts_catalog(rules: &[PromptRule]) -> ControlSource {
    let rules = rules
        .iter()
        .map(|rule| {
            ControlRule::new(
                rule.control_rule_id(),
                vec![ControlAction::new(PROMPT_ACTION)],
            )
        })
        .collect();
    ControlSource {
        plugin: Some(super::SOURCE.to_owned()),
        ..ControlSource::new(PROMPTS_SOURCE, rules)
    }
}

/// Validates the `model_scoped_prompts` rules and registers them into the
/// `stream-watch` plugin's scope: the controls source [`PROMPTS_SOURCE`], a request
/// hook (the call's route and purpose), the request segment, and for
/// `output-pattern` rules a pre-step hook (observation) and a request gate (makes a
/// reservation durable before dispatch). No rules: nothing is registered.
pub fn register(
    rules: Vec<PromptRule>,
    scope: &mut PluginScope<'_>,
) -> Result<(), ccare_agent::MountError> {
    if rules.is_empty() {
        return Ok(());
    }
    scope.control_source(prompts_catalog(&rules))?;
    segment::install(rules, scope);
    Ok(())
}
