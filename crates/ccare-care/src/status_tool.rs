//! The `context_status` tool (CC-TOOL-1): the status text with the report forced on.
//!
//! First version, and what it leaves out:
//! - The load it prices is the request the model would see now, reduced to the
//!   session's derived view (`ctx.session.derived_view().messages`): no system prompt,
//!   no tool definitions, no pending inputs, no prompt segments (CC-MET-4 adds them;
//!   they land with the boundary). Retained is the same surface price.
//! - The route is the one the binary handed to [`crate::ContextCare::with_route`] at
//!   mount; without one both metrics are `unknown` (CC-MET-3).
//! - Pricing uses the meter's own estimate (no journal calibration yet).
//! - Advice is always on (controls are not wired yet); no outcome line.
//! - The UI sample is not updated yet (there is no sample store).

use std::sync::Arc;

use ccare_agent::tools::codes;
use ccare_agent::{BoxFuture, Concurrency, Tool, ToolContext, ToolDef, ToolFailure, ToolOutcome};
use ccare_core::{ContentBlock, Locale, Message};
use ccare_llm::ToolSpec;
use ccare_meter::{Meter, MeterConfig};
use serde_json::{Value, json};

use crate::budget::{RouteInfo, resolve};
use crate::config::{CareConfig, RoutePurpose};
use crate::metrics::{ContextCareMetrics, MetricInputs};
use crate::plugin::RouteSnapshot;
use crate::pricing::{FileTexts, FrozenPricing, ImagePricing, PricingBasis};
use crate::texts::{StatusParts, render_status, status_texts};

/// The tool's name.
pub const CONTEXT_STATUS: &str = "context_status";

/// The `context_status` tool.
pub(crate) struct StatusTool {
    def: ToolDef,
    config: Arc<CareConfig>,
    route: Option<Arc<RouteSnapshot>>,
    locale: Locale,
}

impl StatusTool {
    pub(crate) fn new(
        config: Arc<CareConfig>,
        route: Option<Arc<RouteSnapshot>>,
        locale: Locale,
    ) -> Self {
        Self {
            def: ToolDef {
                spec: ToolSpec {
                    name: CONTEXT_STATUS.to_owned(),
                    description: status_texts(locale).status_tool_description.to_owned(),
                    input_schema: json!({
                        "type": "object",
                        "properties": {},
                        "additionalProperties": false
                    }),
                },
                concurrency: Concurrency::ParallelSafe,
                timeout_ms: None,
                validates_own_arguments: true,
            },
            config,
            route,
            locale,
        }
    }
}

impl Tool for StatusTool {
    fn def(&self) -> &ToolDef {
        &self.def
    }

    fn call(&self, context: ToolContext, arguments: Value) -> BoxFuture<'static, ToolOutcome> {
        let config = Arc::clone(&self.config);
        let route = self.route.clone();
        let locale = self.locale;
        Box::pin(async move {
            check_arguments(&arguments)?;
            if context.cancel.is_cancelled() {
                return Err(ToolFailure::new(
                    codes::CANCELLED,
                    "context_status was cancelled before it ran.",
                ));
            }
            let view = context.session.derived_view();
            let messages = view.messages.iter().map(|derived| &*derived.message);
            let metrics = match route {
                Some(route) => sample(&config, &route, messages)?,
                None => ContextCareMetrics::UNKNOWN,
            };
            let text = render_status(
                locale,
                &metrics,
                StatusParts {
                    report: true,
                    advice: true,
                    outcome: None,
                },
            );
            Ok(vec![ContentBlock::text(text)])
        })
    }
}

/// Refuses anything but `{}` (CC-TOOL-1): null, a non-object, or any key.
fn check_arguments(arguments: &Value) -> Result<(), ToolFailure> {
    match arguments {
        Value::Object(map) if map.is_empty() => Ok(()),
        Value::Object(map) => {
            let keys: Vec<&str> = map.keys().map(String::as_str).collect();
            Err(ToolFailure::new(
                codes::INVALID_ARGUMENTS,
                format!(
                    "context_status takes no arguments; call it with {{}} (got key(s): {}).",
                    keys.join(", ")
                ),
            ))
        }
        Value::Null | Value::Bool(_) | Value::Number(_) | Value::String(_) | Value::Array(_) => {
            Err(ToolFailure::new(
                codes::INVALID_ARGUMENTS,
                format!(
                    "context_status takes no arguments; call it with {{}} (got {}).",
                    kind_of(arguments)
                ),
            ))
        }
    }
}

fn kind_of(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

/// Prices the surface on the route and samples both metrics. An invalid budget on the
/// route counts as unknown capacity (the request gate reports it as an error).
pub(crate) fn sample<'m>(
    config: &CareConfig,
    route: &RouteSnapshot,
    messages: impl IntoIterator<Item = &'m Message>,
) -> Result<ContextCareMetrics, ToolFailure> {
    let Ok(budget) = resolve(
        config,
        RouteInfo {
            provider: &route.provider,
            model: &route.model,
            purpose: RoutePurpose::Conversation,
            physical_window_tokens: route.context_window,
            max_tokens: None,
            adapter_default_max_tokens: route.max_output_tokens.map(u64::from),
        },
    ) else {
        return Ok(ContextCareMetrics::UNKNOWN);
    };
    let meter = Meter::new(&MeterConfig {
        image_tokens: route.image_tokens,
        tokenizer: route.tokenizer.clone(),
        ..MeterConfig::default()
    })
    .map_err(|error| ToolFailure::new(codes::INTERNAL, error.to_string()))?;
    let frozen = FrozenPricing::capture(
        &meter,
        PricingBasis::meter_estimate(&meter),
        ImagePricing::FixedEstimate,
        FileTexts::default(),
    );
    let pricer = frozen
        .pricer(&meter)
        .map_err(|error| ToolFailure::new(codes::INTERNAL, error.to_string()))?;
    let price = pricer
        .request(None, messages, &Value::Null)
        .map_err(|error| ToolFailure::new(codes::INTERNAL, error.to_string()))?;
    let retained = price.messages_total().value(price.scale);
    Ok(ContextCareMetrics::sample(
        config,
        MetricInputs {
            load_tokens: price.q() as f64,
            retained_tokens: retained,
            capacity_tokens: budget.map(|budget| budget.capacity as f64),
            route_known: true,
        },
    ))
}
