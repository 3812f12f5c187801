//! The status notice at each step boundary (CC-NTC-1, CC-NTC-2): the same levels the
//! `context_status` tool reports, entered as the last message of the step's batch when
//! the model-visible text changed.

use std::sync::Arc;

use ccare_agent::{BoundaryContext, BoundaryContributor, BoxFuture, HookError};
use ccare_core::{ContentBlock, Extra, Locale, Message, PluginSource, Source};
use serde_json::{Value, json};

use crate::config::CareConfig;
use crate::metrics::ContextCareMetrics;
use crate::plugin::RouteSnapshot;
use crate::status_tool::sample;
use crate::texts::{StatusParts, render_status};

/// The source kind of status notices (CC-NTC-1).
pub const STATE_SOURCE: &str = "plugin:context-care:state";

/// Contributes the status notice; registered last so it prices everything before it.
pub(crate) struct StatusNotice {
    pub(crate) config: Arc<CareConfig>,
    pub(crate) route: Option<Arc<RouteSnapshot>>,
    pub(crate) locale: Locale,
}

fn first_text(message: &Message) -> Option<&str> {
    message.content.iter().find_map(|block| match block {
        ContentBlock::Text(text) => Some(text.text.as_str()),
        ContentBlock::Reasoning(_)
        | ContentBlock::ToolCall(_)
        | ContentBlock::ToolResult(_)
        | ContentBlock::Image(_)
        | ContentBlock::Unknown(_) => None,
    })
}

fn is_state(message: &Message) -> bool {
    matches!(&message.source, Some(Source::Plugin(plugin)) if plugin.kind == STATE_SOURCE)
}

fn notice(text: &str, metrics: &ContextCareMetrics) -> Message {
    let sampled = serde_json::to_value(metrics).unwrap_or(Value::Null);
    let mut extra = Extra::new();
    extra.insert(
        "contextCare".to_owned(),
        json!({
            "fatigueValue": sampled.get("fatigueValue").cloned().unwrap_or(Value::Null),
            "wakefulnessValue": sampled.get("wakefulnessValue").cloned().unwrap_or(Value::Null),
        }),
    );
    extra.insert(
        "contextCareTrace".to_owned(),
        json!({"trigger": "budget-state", "outcome": null}),
    );
    let mut message = Message::from_blocks(vec![ContentBlock::text(text)]);
    message.source = Some(Source::Plugin(Box::new(PluginSource {
        kind: STATE_SOURCE.to_owned(),
        plugin: None,
        form: Some("notice".to_owned()),
        summary: Some("Context state".to_owned()),
        sections: None,
        extra,
    })));
    message
}

impl StatusNotice {
    fn render<'m>(
        &self,
        messages: impl IntoIterator<Item = &'m Message>,
    ) -> Result<(String, ContextCareMetrics), HookError> {
        let metrics = match &self.route {
            Some(route) => sample(&self.config, route, messages)
                .map_err(|failure| HookError::new(failure.to_string()))?,
            None => ContextCareMetrics::UNKNOWN,
        };
        let text = render_status(
            self.locale,
            &metrics,
            StatusParts {
                report: true,
                advice: true,
                outcome: None,
            },
        );
        Ok((text, metrics))
    }
}

impl BoundaryContributor for StatusNotice {
    fn contribute<'a>(
        &'a self,
        context: &'a BoundaryContext<'a>,
    ) -> BoxFuture<'a, Result<Vec<Message>, HookError>> {
        Box::pin(async move {
            let view = context.hook.session.derived_view();
            let last = view
                .messages
                .iter()
                .rev()
                .find(|derived| is_state(&derived.message))
                .and_then(|derived| first_text(&derived.message).map(str::to_owned));
            let batch = || {
                view.messages
                    .iter()
                    .map(|derived| &*derived.message)
                    .chain(context.entered.iter())
            };
            // Price the exact notice (CC-NTC-2, CC-DEF-4): sample without it, then with
            // it; the second text is what the model will see.
            let (first, metrics) = self.render(batch())?;
            if first.is_empty() {
                return Ok(Vec::new());
            }
            let draft = notice(&first, &metrics);
            let (text, metrics) = self.render(batch().chain(std::iter::once(&draft)))?;
            if text.is_empty() || last.as_deref() == Some(text.as_str()) {
                return Ok(Vec::new());
            }
            Ok(vec![notice(&text, &metrics)])
        })
    }
}
