//! The invariant checker (TC-7): a pre-commit validator that can veto a reading, and
//! [`check_log`], which runs the same checks over a stored or imported log.
//!
//! Every `user/message` whose source says `{kind: "plugin", plugin: "time-context"}`
//! is checked against the log before it; other events pass. Each finding names its
//! rule (`TC-7.1` … `TC-7.6`).

use std::sync::Arc;

use ccare_core::{Event, kinds};
use ccare_session::{Candidate, SessionLog, Validator, Veto};
use serde_json::{Value, json};

use crate::events::{self, PLUGIN};
use crate::render::{Wording, parse_reading, parse_timestamp};

/// The validator's (and its plugin's) name.
pub const VALIDATOR: &str = "time-context-invariant";

/// The TC-7 validator, to register with a session registry (or mount through
/// [`crate::TimeContextInvariant`]).
pub fn invariant_validator() -> Arc<dyn Validator> {
    Arc::new(Invariant)
}

/// Checks every reading of an existing log against the events before it. Returns the
/// seq of each offending reading with the first finding, naming its rule.
pub fn check_log(log: &SessionLog) -> Vec<(u64, String)> {
    let events = log.events();
    events
        .iter()
        .enumerate()
        .filter_map(|(index, event)| {
            check_event(&events[..index], event)
                .err()
                .map(|finding| (event.seq(), finding))
        })
        .collect()
}

/// Checks one event against the log before it (what the validator runs).
pub fn check_event(prefix: &[Arc<Event>], event: &Event) -> Result<(), String> {
    let Some(message) = events::reading_message(event) else {
        return Ok(());
    };
    check_reading(prefix, event, &message)
}

struct Invariant;

impl Validator for Invariant {
    fn name(&self) -> &str {
        VALIDATOR
    }

    fn check(&self, log: &SessionLog, candidate: &Candidate) -> Result<(), Veto> {
        check_event(log.events(), candidate.event()).map_err(Veto::new)
    }
}

/// Where the reading sits: the open turn and step and the index of its `step/start`.
struct Position {
    turn_start: usize,
    step_start: usize,
}

fn number(event: &Event, key: &str) -> Option<u64> {
    let data: Value = serde_json::from_str(event.data_json()).ok()?;
    data.get(key)?.as_u64()
}

fn check_reading(prefix: &[Arc<Event>], event: &Event, message: &Value) -> Result<(), String> {
    // TC-7.1 (content) and TC-7.3 (source).
    let blocks = message
        .get("content")
        .and_then(Value::as_array)
        .map(Vec::as_slice)
        .unwrap_or_default();
    let text = match blocks {
        [block] if block.get("type").and_then(Value::as_str) == Some("text") => block
            .get("text")
            .and_then(Value::as_str)
            .ok_or("TC-7.1: the reading's text block has no text")?,
        _ => {
            return Err(format!(
                "TC-7.1: a reading has exactly one text block, found {} block(s)",
                blocks.len()
            ));
        }
    };
    let expected_source = json!({
        "kind": "plugin",
        "plugin": PLUGIN,
        "form": "snapshot",
        "sections": [{"name": PLUGIN, "text": text}],
    });
    if message.get("source") != Some(&expected_source) {
        return Err(format!(
            "TC-7.3: the source must be exactly {expected_source}, got {}",
            message.get("source").cloned().unwrap_or(Value::Null)
        ));
    }
    let reading = parse_reading(text).map_err(|why| format!("TC-7.1: {why}"))?;
    // TC-7.2: turn and step are the open turn and the step being prepared.
    if reading.turn == 0 || reading.step == 0 {
        return Err(format!(
            "TC-7.2: turn and step must be at least 1, got turn {} step {}",
            reading.turn, reading.step
        ));
    }
    let position = position(prefix, reading.turn, reading.step)?;
    // TC-7.4: step 1 if and only if the "model-visible message" wording.
    match (reading.step == 1, reading.wording) {
        (true, Wording::FirstStep) | (false, Wording::LaterStep) => {}
        (true, Wording::LaterStep) => {
            return Err("TC-7.4: step 1 must say \"preceding model-visible message\"".to_owned());
        }
        (false, Wording::FirstStep) => {
            return Err(format!(
                "TC-7.4: step {} must say \"preceding step context\", not \"preceding model-visible message\"",
                reading.step
            ));
        }
    }
    // TC-7.5: the timestamp parses and is not later than the event.
    let (_, second) = parse_timestamp(&reading.timestamp).ok_or_else(|| {
        format!(
            "TC-7.5: timestamp {:?} does not parse as YYYY-MM-DDTHH:mm:ss±HH:MM[Zone]",
            reading.timestamp
        )
    })?;
    let earliest_ms = second.saturating_mul(1000);
    if earliest_ms > event.time_ms() {
        return Err(format!(
            "TC-7.5: timestamp {} is later than the event's durable time {} ms",
            reading.timestamp,
            event.time_ms()
        ));
    }
    // The sampled instant lies in this window.
    let latest_ms = earliest_ms.saturating_add(999).min(event.time_ms());
    // TC-7.6: the elapsed value agrees with a TC-4 baseline.
    let candidates = baselines(prefix, &position, reading.step);
    match reading.elapsed_seconds {
        None => match candidates.first() {
            Some(Some((seq, _))) => Err(format!(
                "TC-7.6: elapsed is unavailable but the baseline is the event at seq {seq}"
            )),
            Some(None) | None => Ok(()),
        },
        Some(elapsed) => {
            let known: Vec<(u64, i64)> = candidates.iter().flatten().copied().collect();
            if known.is_empty() {
                return Err(format!(
                    "TC-7.6: elapsed {} but there is no baseline (expected unavailable)",
                    reading.elapsed_text
                ));
            }
            let fits = known.iter().any(|&(_, baseline)| {
                let low = earliest_ms.saturating_sub(baseline).max(0) / 1000;
                let high = latest_ms.saturating_sub(baseline).max(0) / 1000;
                (low..=high).contains(&elapsed)
            });
            if fits {
                return Ok(());
            }
            let (seq, baseline) = known[0];
            Err(format!(
                "TC-7.6: elapsed {} does not match the baseline at seq {seq} ({} ms after it)",
                reading.elapsed_text,
                earliest_ms.saturating_sub(baseline)
            ))
        }
    }
}

/// Finds the open turn and step (TC-7.2) and checks that no request header of the step
/// precedes the reading.
fn position(prefix: &[Arc<Event>], turn: u64, step: u64) -> Result<Position, String> {
    let turn_start = prefix
        .iter()
        .rposition(|event| matches!(event.kind(), kinds::TURN_START | kinds::TURN_END));
    let turn_start = match turn_start {
        Some(index) if prefix[index].kind() == kinds::TURN_START => index,
        _ => {
            return Err(format!(
                "TC-7.2: reading for turn {turn} outside an open turn"
            ));
        }
    };
    let open_turn = number(&prefix[turn_start], "turn").unwrap_or(0);
    if open_turn != turn {
        return Err(format!(
            "TC-7.2: reading for turn {turn} but turn {open_turn} is open"
        ));
    }
    let step_event = prefix[turn_start..]
        .iter()
        .rposition(|event| matches!(event.kind(), kinds::STEP_START | kinds::STEP_END))
        .map(|offset| turn_start + offset);
    let step_start = match step_event {
        Some(index) if prefix[index].kind() == kinds::STEP_START => index,
        _ => {
            return Err(format!(
                "TC-7.2: reading for turn {turn} step {step} outside an open step"
            ));
        }
    };
    let open_step = number(&prefix[step_start], "step").unwrap_or(0);
    if open_step != step {
        return Err(format!(
            "TC-7.2: reading for step {step} but step {open_step} is being prepared"
        ));
    }
    if let Some(late) = prefix[step_start..].iter().find(|event| {
        matches!(
            event.kind(),
            kinds::REQUEST_HEADER
                | kinds::ASSISTANT_MESSAGE
                | kinds::ASSISTANT_ATTEMPT
                | kinds::TOOL_CALL
                | kinds::TOOL_RESULT
        )
    }) {
        return Err(format!(
            "TC-7.2: reading for step {step} after the step's {} (seq {})",
            late.kind(),
            late.seq()
        ));
    }
    Ok(Position {
        turn_start,
        step_start,
    })
}

/// The baselines a reading may have measured from, as `(seq, durable ms)`; `None`
/// means "no baseline". The first entry is the strictest (what the log held before
/// the step's pre-step chain could append anything).
///
/// Step 1 (TC-4.1): the reading was sampled after the turn's user messages were logged
/// and before `step/start`; inner pre-step hooks (compaction) may have appended between
/// the two, so the newest message before the last user-sourced message of the window,
/// and each message after it, are all accepted. Later steps (TC-4.2): the newest
/// reading of the turn before this step's `step/start`.
fn baselines(prefix: &[Arc<Event>], position: &Position, step: u64) -> Vec<Option<(u64, i64)>> {
    let before_step = &prefix[..position.step_start];
    if step > 1 {
        let reading = before_step[position.turn_start..]
            .iter()
            .rev()
            .find(|event| events::is_reading(event))
            .map(|event| (event.seq(), event.time_ms()));
        return vec![reading];
    }
    let window_start = before_step[position.turn_start..]
        .iter()
        .rposition(|event| is_user_sourced(event))
        .map_or(position.turn_start + 1, |offset| {
            position.turn_start + offset + 1
        });
    let newest = |events: &[Arc<Event>]| {
        events
            .iter()
            .rev()
            .find(|event| events::is_model_visible_message(event))
            .map(|event| (event.seq(), event.time_ms()))
    };
    let mut candidates = vec![newest(&before_step[..window_start])];
    candidates.extend(
        before_step[window_start..]
            .iter()
            .filter(|event| events::is_model_visible_message(event))
            .map(|event| Some((event.seq(), event.time_ms()))),
    );
    candidates
}

/// A `user/message` whose source is a person's (`kind: "user"`, or no source).
fn is_user_sourced(event: &Event) -> bool {
    if event.kind() != kinds::USER_MESSAGE {
        return false;
    }
    let data: Option<Value> = serde_json::from_str(event.data_json()).ok();
    match data
        .as_ref()
        .and_then(|data| data.pointer("/message/source"))
    {
        None | Some(Value::Null) => true,
        Some(source) => source.get("kind").and_then(Value::as_str) == Some("user"),
    }
}
