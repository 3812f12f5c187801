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
use crate::texts::{StatusParts, StatusTexts, render_status, status_texts};

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
                    description: status_texts(care.locale).status_tool_description.into(),
                    input_schema: json!({
                        "type": "object",
                        "properties": {},
                        "additionalProperties": false
                    })
                    .into(),
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
            let texts = status_texts(care.locale);
            check_arguments(texts, &arguments)?;
            if context.cancel.is_cancelled() {
                return Err(ToolFailure::new(codes::CANCELLED, texts.error_cancelled));
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
                    state_unknown: false,
                },
            );
            Ok(vec![ContentBlock::text(text)])
        })
    }
}

/// Refuses anything but `{}` (CC-TOOL-1): null, a non-object, or any key; the message
/// in the session's locale (CC-GEN-2).
fn check_arguments(texts: &StatusTexts, arguments: &Value) -> Result<(), ToolFailure> {
    let got = match arguments {
        Value::Object(map) if map.is_empty() => return Ok(()),
        Value::Object(map) => {
            let keys: Vec<&str> = map.keys().map(String::as_str).collect();
            texts.error_got_keys.replace("{keys}", &keys.join(", "))
        }
        Value::Null => texts.kind_names[0].to_owned(),
        Value::Bool(_) => texts.kind_names[1].to_owned(),
        Value::Number(_) => texts.kind_names[2].to_owned(),
        Value::String(_) => texts.kind_names[3].to_owned(),
        Value::Array(_) => texts.kind_names[4].to_owned(),
    };
    Err(ToolFailure::new(
        codes::INVALID_ARGUMENTS,
        texts.error_arguments.replace("{got}", &got),
    ))
}
