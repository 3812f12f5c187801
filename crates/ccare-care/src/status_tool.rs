//! The `context_status` tool (CC-TOOL-1): the status text with the report forced on,
//! advice as its control says, no outcome and no pending inputs; the UI sample is
//! refreshed. It prices the session's surface with the session's frozen, calibrated
//! pricing (CC-PRC-3/4), exactly as the boundary does.

use std::sync::Arc;

use ccare_agent::tools::codes;
use ccare_agent::{BoxFuture, Concurrency, Tool, ToolContext, ToolDef, ToolFailure, ToolOutcome};
use ccare_core::ContentBlock;
use ccare_llm::ToolSpec;
use serde_json::{Value, json};

use crate::care::{Care, UiSample};
use crate::texts::{StatusParts, render_status, status_texts};

/// The tool's name.
pub const CONTEXT_STATUS: &str = "context_status";

/// The `context_status` tool.
pub(crate) struct StatusTool {
    def: ToolDef,
    care: Arc<Care>,
}

impl StatusTool {
    pub(crate) fn new(care: Arc<Care>) -> Self {
        Self {
            def: ToolDef {
                spec: ToolSpec {
                    name: CONTEXT_STATUS.to_owned(),
                    description: status_texts(care.locale).status_tool_description.to_owned(),
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
            care,
        }
    }
}

impl Tool for StatusTool {
    fn def(&self) -> &ToolDef {
        &self.def
    }

    fn call(&self, context: ToolContext, arguments: Value) -> BoxFuture<'static, ToolOutcome> {
        let care = Arc::clone(&self.care);
        Box::pin(async move {
            check_arguments(&arguments)?;
            if context.cancel.is_cancelled() {
                return Err(ToolFailure::new(
                    codes::CANCELLED,
                    "context_status was cancelled before it ran.",
                ));
            }
            let id = context.session.id().clone();
            let internal = |error: crate::care::CareError| {
                ToolFailure::new(codes::INTERNAL, error.to_string())
            };
            let (_, measured) = care.sample_now(&context.session).await.map_err(internal)?;
            care.samples.set(
                &id,
                UiSample {
                    metrics: measured.metrics,
                    at: context.clock.now_ms(),
                    armed: care.with_session(&id, |state| state.controller.is_armed()),
                },
            );
            let text = render_status(
                care.locale,
                &measured.metrics,
                StatusParts {
                    report: true,
                    advice: care.enabled(&id, "state", "advice"),
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
