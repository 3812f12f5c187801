//! The `context-care` plugin as mounted today: its configuration, its controls source,
//! and the hard input budget checked before every request leaves (CC-BUD-6).
//!
//! Mounted by `[plugins.context-care]`. The rest of the plugin (journal, notices,
//! tools, maintenance) builds on the pure modules of this crate and lands next.

use std::sync::Arc;

use ccare_agent::controls::context_care_catalog;
use ccare_agent::{HookContext, Plugin, PluginScope, RequestGate};
use ccare_core::{FailureCode, LlmFailure, Message};
use ccare_llm::{PreparedCall, Purpose};
use ccare_meter::{Meter, MeterConfig};
use serde_json::{Value, json};

use crate::budget::{Preflight, RouteInfo, preflight, resolve};
use crate::config::{CareConfig, RoutePurpose};
use crate::pricing::{FileTexts, FrozenPricing, ImagePricing, PricingBasis};

/// The `context-care` plugin.
#[derive(Debug, Default)]
pub struct ContextCare;

impl Plugin for ContextCare {
    fn name(&self) -> &str {
        "context-care"
    }

    fn mount(&self, config: &Value, scope: &mut PluginScope<'_>) -> Result<(), String> {
        let config = CareConfig::from_json(config)?;
        scope.control_source(context_care_catalog())?;
        scope.request_gate(Arc::new(BudgetGate {
            config: Arc::new(config),
        }));
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
        let messages: Vec<Message> = call
            .config
            .messages
            .iter()
            .map(|message| (*message.message).clone())
            .collect();
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
            .request(call.config.system.as_deref(), &messages, &tools)
            .map_err(|error| LlmFailure::new(FailureCode::Unknown, error.to_string()))?;
        match preflight(price.q(), Some(&budget)) {
            Preflight::Dispatch => Ok(()),
            Preflight::Refuse(refusal) => {
                Err(refusal.to_llm_failure(&route.provider, &route.model))
            }
        }
    }
}
