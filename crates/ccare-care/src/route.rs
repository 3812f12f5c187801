//! The summary route (CC-SUM-1, host H-LLM-2): where context-care's summary calls go,
//! resolved once at mount in the order
//! 1. the plugin's `summary.provider` / `summary.model` (set together or not at all:
//!    a half table is refused at load, [`crate::config::ConfigError::HalfSummaryRoute`]),
//! 2. `[agent] compaction_model` (the LLM layer's purpose route for `compaction`),
//! 3. the conversation route the plugin was handed.
//!
//! The calls are then prepared on exactly that route (`Llm::prepare_exact`), so the
//! purpose route never overrides an explicit table. "A provider exists" (CC-BND-2 R4,
//! CC-CTL-1, CC-MNT-6) means a summary route resolved and the conversation route is
//! known: the commit proof (CC-SUM-5) prices the conversation request on it.

use ccare_llm::{Llm, Purpose};

use crate::config::SummaryConfig;
use crate::plugin::RouteSnapshot;

/// Why no summary can run; the reason `maintenance.summary` reports (CC-CTL-1).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum NoSummaryRoute {
    /// No table, no compaction model and no conversation route.
    NoRoute,
    /// A summary route resolves, but the plugin does not know the conversation route,
    /// so no summary could be proven smaller.
    NoConversationRoute,
}

impl NoSummaryRoute {
    /// The stable kebab-case reason of the unavailable control.
    pub(crate) fn reason(self) -> &'static str {
        match self {
            NoSummaryRoute::NoRoute => "no-summary-route",
            NoSummaryRoute::NoConversationRoute => "no-conversation-route",
        }
    }
}

/// The summary route, `"<provider>/<model>"`, or why there is none. An explicit table
/// naming a provider the LLM layer does not know is an error naming the key.
pub(crate) fn summary_route(
    summary: &SummaryConfig,
    llm: &Llm,
    conversation: Option<&RouteSnapshot>,
) -> Result<Result<String, NoSummaryRoute>, String> {
    let resolved = match (&summary.provider, &summary.model) {
        (Some(provider), Some(model)) => {
            let name = format!("{provider}/{model}");
            llm.route(&name)
                .map_err(|failure| format!("summary.provider: {}", failure.message))?;
            Some(name)
        }
        // A half table never loads (CC-SUM-1); read it as absent.
        _ => llm.purpose_model(Purpose::Compaction).map(str::to_owned),
    }
    .or_else(|| conversation.map(|route| format!("{}/{}", route.provider, route.model)));
    Ok(match (resolved, conversation) {
        (None, _) => Err(NoSummaryRoute::NoRoute),
        (Some(_), None) => Err(NoSummaryRoute::NoConversationRoute),
        (Some(name), Some(_)) => Ok(name),
    })
}
