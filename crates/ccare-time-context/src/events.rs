//! Reading the raw durable log (TC-3.5, TC-4): every event, shadowed ones included.

use std::sync::Arc;

use ccare_core::Event;
use ccare_core::kinds;
use serde_json::Value;

/// The plugin's name, also the `plugin` of a reading's source.
pub(crate) const PLUGIN: &str = "time-context";

/// Whether `event` is a `user/message` attributed to time-context (source
/// `{kind: "plugin", plugin: "time-context", …}`), whatever its shape otherwise.
pub(crate) fn is_reading(event: &Event) -> bool {
    reading_message(event).is_some()
}

/// The `message` of a time-context reading, decoded, or `None` for any other event.
pub(crate) fn reading_message(event: &Event) -> Option<Value> {
    if event.kind() != kinds::USER_MESSAGE || !event.data_json().contains(PLUGIN) {
        return None;
    }
    let mut data: Value = serde_json::from_str(event.data_json()).ok()?;
    let message = data.get_mut("message")?.take();
    let source = message.get("source")?;
    let attributed = source.get("kind").and_then(Value::as_str) == Some("plugin")
        && source.get("plugin").and_then(Value::as_str) == Some(PLUGIN);
    attributed.then_some(message)
}

/// Whether `event` is a model-visible message: a step-1 baseline candidate (TC-4.1).
pub(crate) fn is_model_visible_message(event: &Event) -> bool {
    matches!(
        event.kind(),
        kinds::USER_MESSAGE | kinds::ASSISTANT_MESSAGE | kinds::TOOL_RESULT
    )
}

/// The durable time of the newest reading of the session (TC-3.5).
pub(crate) fn latest_reading_ms(events: &[Arc<Event>]) -> Option<i64> {
    events
        .iter()
        .rev()
        .find(|event| is_reading(event))
        .map(|event| event.time_ms())
}

/// The durable time of the newest model-visible message (TC-4.1).
pub(crate) fn newest_message_ms(events: &[Arc<Event>]) -> Option<i64> {
    events
        .iter()
        .rev()
        .find(|event| is_model_visible_message(event))
        .map(|event| event.time_ms())
}

/// The durable time of the newest reading after the latest `turn/start` (TC-4.2).
pub(crate) fn same_turn_reading_ms(events: &[Arc<Event>]) -> Option<i64> {
    events
        .iter()
        .rev()
        .take_while(|event| event.kind() != kinds::TURN_START)
        .find(|event| is_reading(event))
        .map(|event| event.time_ms())
}
