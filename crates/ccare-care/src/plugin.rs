//! The `context-care` plugin as mounted today: its configuration, its controls source,
//! the hard input budget checked before every request leaves (CC-BUD-6), and the
//! `context_status` tool (CC-TOOL-1).
//!
//! Mounted by `[plugins.context-care]`. The rest of the plugin (journal, notices,
//! `context_rest`, maintenance) builds on the pure modules of this crate and lands next.

use std::path::PathBuf;
use std::sync::Arc;

use ccare_agent::controls::context_care_catalog;
use ccare_agent::{HookContext, Plugin, PluginScope, RequestGate};
use ccare_core::{FailureCode, LlmFailure, Locale};
use ccare_llm::{PreparedCall, Purpose, Route};
use ccare_meter::{Meter, MeterConfig};
use serde_json::{Value, json};

use crate::budget::{Preflight, RouteInfo, preflight, resolve};
use crate::config::{CareConfig, RoutePurpose};
use crate::notice::StatusNotice;
use crate::pricing::{FileTexts, FrozenPricing, ImagePricing, PricingBasis};
use crate::status_tool::StatusTool;

/// The `context-care` plugin.
///
/// `ContextCare::default()` knows no route and speaks English: `context_status` then
/// reports both metrics as `unknown`. The binary hands it the conversation route with
/// [`ContextCare::with_route`] and the project locale with [`ContextCare::with_locale`].
#[derive(Debug, Clone, Default)]
pub struct ContextCare {
    route: Option<Arc<RouteSnapshot>>,
    locale: Locale,
}

impl ContextCare {
    /// The plugin with the route `context_status` measures against (the conversation
    /// route the agent is configured with).
    #[must_use]
    pub fn with_route(mut self, route: RouteSnapshot) -> Self {
        self.route = Some(Arc::new(route));
        self
    }

    /// The plugin with the locale of its model-visible texts (CC-GEN-2).
    #[must_use]
    pub fn with_locale(mut self, locale: Locale) -> Self {
        self.locale = locale;
        self
    }
}

/// What context-care needs of a route to price a request and find its capacity,
/// captured when the plugin is built.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RouteSnapshot {
    /// The provider's config name.
    pub provider: String,
    /// The model name as the provider knows it.
    pub model: String,
    /// The physical context window, when known.
    pub context_window: Option<u64>,
    /// The adapter's default output limit, when known.
    pub max_output_tokens: Option<u32>,
    /// What one image costs in tokens.
    pub image_tokens: u64,
    /// A tokenizer for exact counts, when configured.
    pub tokenizer: Option<PathBuf>,
}

impl RouteSnapshot {
    /// The snapshot of a resolved route.
    pub fn of(route: &Route) -> Self {
        Self {
            provider: route.provider.clone(),
            model: route.model.clone(),
            context_window: route.context_window,
            max_output_tokens: route.max_output_tokens,
            image_tokens: route.image_tokens,
            tokenizer: route.tokenizer.clone(),
        }
    }
}

impl Plugin for ContextCare {
    fn name(&self) -> &str {
        "context-care"
    }

    fn mount(&self, config: &Value, scope: &mut PluginScope<'_>) -> Result<(), String> {
        let config = Arc::new(CareConfig::from_json(config)?);
        scope.control_source(context_care_catalog())?;
        scope.tool(Arc::new(StatusTool::new(
            Arc::clone(&config),
            self.route.clone(),
            self.locale,
        )))?;
        scope.boundary(
            Arc::new(StatusNotice {
                config: Arc::clone(&config),
                route: self.route.clone(),
                locale: self.locale,
            }),
            i32::MAX,
        );
        scope.request_gate(Arc::new(BudgetGate { config }));
        Ok(())
    }
}

/// Refuses a request whose complete input is over the hard input budget `H` of its
/// route (CC-BUD-6): `REQUEST_BUDGET_EXCEEDED`, and the provider is never called.
struct BudgetGate {
    config: Arc<CareConfig>,
}

fn purpose_of(purpose: Purpose) -> RoutePurpose {
    match purpose {
        Purpose::Conversation => RoutePurpose::Conversation,
        Purpose::Compaction => RoutePurpose::Compaction,
        Purpose::SessionTitle => RoutePurpose::SessionTitle,
    }
}

impl RequestGate for BudgetGate {
    fn check(&self, _context: &HookContext, call: &PreparedCall) -> Result<(), LlmFailure> {
        let route = &call.route;
        let explicit = call
            .config
            .max_tokens
            .filter(|tokens| Some(*tokens) != route.max_output_tokens);
        let budget = resolve(
            &self.config,
            RouteInfo {
                provider: &route.provider,
                model: &route.model,
                purpose: purpose_of(call.config.purpose),
                physical_window_tokens: route.context_window,
                max_tokens: explicit.map(u64::from),
                adapter_default_max_tokens: route.max_output_tokens.map(u64::from),
            },
        )
        .map_err(|invalid| LlmFailure::new(FailureCode::InvalidRequest, invalid.to_string()))?;
        let Some(budget) = budget else {
            // No capacity known: dispatched unchecked (CC-BUD-1).
            return Ok(());
        };
        let meter = Meter::new(&MeterConfig {
            image_tokens: route.image_tokens,
            tokenizer: route.tokenizer.clone(),
            ..MeterConfig::default()
        })
        .map_err(|error| LlmFailure::new(FailureCode::InvalidRequest, error.to_string()))?;
        let frozen = FrozenPricing::capture(
            &meter,
            PricingBasis::meter_estimate(&meter),
            ImagePricing::FixedEstimate,
            FileTexts::default(),
        );
        let pricer = frozen
            .pricer(&meter)
            .map_err(|error| LlmFailure::new(FailureCode::Unknown, error.to_string()))?;
        let tools: Value = if call.config.tools.is_empty() {
            Value::Null
        } else {
            Value::Array(
                call.config
                    .tools
                    .iter()
                    .map(|tool| {
                        json!({
                            "name": tool.name,
                            "description": tool.description,
                            "input_schema": tool.input_schema,
                        })
                    })
                    .collect(),
            )
        };
        let price = pricer
            .request(
                call.config.system.as_deref(),
                call.config.messages.iter().map(|message| &*message.message),
                &tools,
            )
            .map_err(|error| LlmFailure::new(FailureCode::Unknown, error.to_string()))?;
        match preflight(price.q(), Some(&budget)) {
            Preflight::Dispatch => Ok(()),
            Preflight::Refuse(refusal) => {
                Err(refusal.to_llm_failure(&route.provider, &route.model))
            }
        }
    }
}
