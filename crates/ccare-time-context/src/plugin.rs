//! The `time-context` plugin: its outermost pre-step hook samples the clock, decides
//! from the raw durable log whether a reading is due (TC-3) and what it measures from
//! (TC-4), and adds the reading to the step's batch.

use std::sync::Arc;

use ccare_agent::{
    BoxFuture, HookContext, HookError, MountError, Plugin, PluginScope, PreStepDecision,
    PreStepHook, PreStepInput, PreStepNext,
};
use ccare_core::{ContentBlock, Event, Extra, Message, PluginSource, Source};
use serde_json::{Value, json};

use crate::config::TimeContextConfig;
use crate::events::{self, PLUGIN};
use crate::invariant::invariant_validator;
use crate::render::render_reading;

/// The time-context plugin (name `time-context`). Mount the companion
/// [`TimeContextInvariant`] too to check every reading before it is committed.
#[derive(Debug, Clone, Copy, Default)]
pub struct TimeContext;

impl Plugin for TimeContext {
    fn name(&self) -> &str {
        PLUGIN
    }

    fn mount(&self, config: &Value, scope: &mut PluginScope<'_>) -> Result<(), MountError> {
        let config = TimeContextConfig::from_json(config).map_err(MountError::Config)?;
        scope.pre_step(Arc::new(ReadingHook { config }), /*outermost*/ true);
        Ok(())
    }
}

/// The invariant checker of TC-7 as a plugin of its own (name
/// `time-context-invariant`, no configuration): it registers
/// [`invariant_validator`].
#[derive(Debug, Clone, Copy, Default)]
pub struct TimeContextInvariant;

impl Plugin for TimeContextInvariant {
    fn name(&self) -> &str {
        crate::invariant::VALIDATOR
    }

    fn mount(&self, config: &Value, scope: &mut PluginScope<'_>) -> Result<(), MountError> {
        match config.as_object() {
            Some(table) => {
                if let Some(key) = table.keys().next() {
                    return Err(MountError::Config(format!("unknown config {key}")));
                }
            }
            None => {
                return Err(MountError::Config(format!(
                    "the config must be a table, got {config}"
                )));
            }
        }
        scope.validator(invariant_validator());
        Ok(())
    }
}

/// The source every reading carries (TC-3.2).
pub fn reading_source(text: &str) -> Source {
    Source::Plugin(Box::new(PluginSource {
        kind: "plugin".to_owned(),
        plugin: Some(PLUGIN.to_owned()),
        form: Some("snapshot".to_owned()),
        summary: None,
        sections: Some(json!([{"name": PLUGIN, "text": text}])),
        extra: Extra::new(),
    }))
}

/// The reading message for `text`: one text block, the time-context source.
pub fn reading_message(text: &str) -> Message {
    let mut message = Message::from_blocks(vec![ContentBlock::text(text)]);
    message.source = Some(reading_source(text));
    message
}

/// Whether a reading is due at `now_ms` (TC-3.3, TC-3.4), given the raw log.
pub fn reading_due(events: &[Arc<Event>], now_ms: i64, refresh_interval_ms: u64) -> bool {
    if refresh_interval_ms == 0 {
        return true;
    }
    match events::latest_reading_ms(events) {
        None => true,
        Some(latest_ms) if now_ms < latest_ms => true,
        Some(latest_ms) => {
            u64::try_from(now_ms.saturating_sub(latest_ms)).unwrap_or(0) >= refresh_interval_ms
        }
    }
}

/// The durable time a reading of `step` measures from (TC-4), given the raw log as it
/// is when the reading is sampled: for step 1 the newest model-visible message, for
/// later steps the previous reading of the same turn.
pub fn baseline_ms(events: &[Arc<Event>], step: u32) -> Option<i64> {
    if step <= 1 {
        events::newest_message_ms(events)
    } else {
        events::same_turn_reading_ms(events)
    }
}

struct ReadingHook {
    config: TimeContextConfig,
}

impl ReadingHook {
    /// The reading for this attempt, if one is due.
    fn reading(&self, context: &HookContext) -> Result<Option<Message>, HookError> {
        let now_ms = context.clock.now_ms();
        let planned = context.session.with_log(|log| {
            let events = log.events();
            reading_due(events, now_ms, self.config.refresh_interval_ms)
                .then(|| baseline_ms(events, context.step))
        });
        let Some(baseline) = planned else {
            return Ok(None);
        };
        let text = render_reading(
            &self.config.zone,
            now_ms,
            context.turn,
            context.step,
            baseline,
        )
        .map_err(HookError::new)?;
        Ok(Some(reading_message(&text)))
    }
}

impl PreStepHook for ReadingHook {
    fn call<'a>(
        &'a self,
        context: &'a HookContext,
        mut input: PreStepInput,
        next: PreStepNext<'a>,
    ) -> BoxFuture<'a, Result<PreStepDecision, HookError>> {
        Box::pin(async move {
            // TC-3.1: only attempts whose cancellation has not fired. The reading goes
            // after the claimed plugin entries, before what inner hooks add (H-LOOP-5).
            if !context.cancel.is_cancelled()
                && let Some(message) = self.reading(context)?
            {
                input.messages.push(message);
            }
            next.run(input).await
        })
    }
}
