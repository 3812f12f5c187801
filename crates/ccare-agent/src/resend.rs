//! Resending a user message that got no answer: what a client does when its request
//! failed (an upstream 429 the SDK retries, a store error, a timeout that cancelled the
//! turn) and it sends the same request again.
//!
//! The message is already in the log, so logging it again would give the model the
//! same words twice. A resend is a [`crate::Command::UserInput`] whose message names
//! the message it resends in its `resends` field ([`mark_resend`]). It opens a turn
//! like any user input, but its `user/message` is logged off the surface: the log
//! keeps the resend (its words, its turn's tools, who sent it) for the audit, and the
//! model reads the original once, with whatever the failed turns left on the surface
//! after it (the calls and results of the host's tools). A resend is refused
//! ([`crate::CommandError::NotResendable`]) unless the original is a `user/message` on
//! the surface, no turn since it was answered, and the model's words are not the last
//! thing on the surface after it (an answer cut short when the client went away: the
//! message is then sent anew, so the request does not end with the model's words).

use ccare_core::kinds::{
    ASSISTANT_MESSAGE, TOOL_RESULT, TURN_END, ToolResult, TurnEnd, TurnEndReason, USER_MESSAGE,
    UserMessage,
};
use ccare_core::{ContentBlock, Event, Message};
use ccare_session::Session;

/// The `user/message` field naming the message a resend resends.
pub const RESENDS_FIELD: &str = "resends";

/// The id of the message `message` resends, when it is a resend.
pub fn resent_id(message: &Message) -> Option<&str> {
    message
        .extra
        .get(RESENDS_FIELD)
        .and_then(serde_json::Value::as_str)
}

/// Marks `message` as a resend of the logged user message `original`.
pub fn mark_resend(message: &mut Message, original: &str) {
    message
        .extra
        .insert(RESENDS_FIELD.to_owned(), serde_json::Value::from(original));
}

/// The last user message on the surface after seq `after` (`None`: the whole log)
/// that no turn since answered, and whether the model's cut-short words follow it on
/// the surface: what a client that got an error may send again, alone (a resend) or
/// followed by new messages (which are then all it adds).
pub fn unanswered(session: &Session, after: Option<u64>) -> Option<(Message, bool)> {
    session.with_log(|log| {
        let events = log.events();
        let first = first_after(events, after);
        let (position, original) =
            events[first..]
                .iter()
                .enumerate()
                .rev()
                .find_map(|(offset, event)| {
                    original_message(event).map(|message| (first + offset, message))
                })?;
        let since = &events[position + 1..];
        if answered_after(since) {
            return None;
        }
        Some((original, ends_with_answer(since)))
    })
}

/// The user message to resend for a client that sends again the results of its tool
/// calls whose turn then failed (the SDK retrying a 429 of the request that carried
/// them): after seq `after`, the session logged the results of `call_ids`, each once,
/// and no turn since was answered. The message is the last user message on the surface
/// before those results, the one the turn answers; resending it runs the turn again
/// with the results in place.
pub fn resendable_results(
    session: &Session,
    after: Option<u64>,
    call_ids: &[String],
) -> Option<Message> {
    if call_ids.is_empty() {
        return None;
    }
    session.with_log(|log| {
        let events = log.events();
        let first = first_after(events, after);
        let since = &events[first..];
        let mut answered: Vec<(usize, String)> = since
            .iter()
            .enumerate()
            .filter(|(_, event)| event.kind() == TOOL_RESULT && event.surface().is_some())
            .flat_map(|(offset, event)| {
                result_call_ids(event)
                    .into_iter()
                    .map(move |id| (first + offset, id))
            })
            // The host's own calls the resumed turn made are not the client's to send.
            .filter(|(_, id)| call_ids.contains(id))
            .collect();
        let position = answered.first()?.0;
        answered.sort_by(|left, right| left.1.cmp(&right.1));
        let mut wanted: Vec<&String> = call_ids.iter().collect();
        wanted.sort();
        let same = answered.len() == wanted.len()
            && answered
                .iter()
                .zip(&wanted)
                .all(|((_, id), wanted)| id == *wanted);
        if !same || answered_after(since) || ends_with_answer(since) {
            return None;
        }
        events[..position]
            .iter()
            .rev()
            .find_map(|event| original_message(event))
    })
}

/// The index of the first of `events` after seq `after` (0 with `None`).
fn first_after(events: &[std::sync::Arc<Event>], after: Option<u64>) -> usize {
    after.map_or(0, |after| {
        events.partition_point(|event| event.seq() <= after)
    })
}

/// The calls a `tool/result` answers.
fn result_call_ids(event: &Event) -> Vec<String> {
    event
        .decode::<ToolResult>()
        .map(|result| {
            result
                .message
                .content
                .into_iter()
                .filter_map(|block| match block {
                    ContentBlock::ToolResult(block) => Some(block.call_id),
                    _ => None,
                })
                .collect()
        })
        .unwrap_or_default()
}

/// Why `original` cannot be resent in `session`; `None` when it can.
pub(crate) fn refusal(session: &Session, original: &str) -> Option<&'static str> {
    session.with_log(|log| {
        if !log.state().awaiting_calls().is_empty() {
            return Some("a turn awaits the caller's tool results");
        }
        let events = log.events();
        let Some(position) = events.iter().rposition(|event| {
            event.kind() == USER_MESSAGE
                && event.data_json().contains(original)
                && original_message(event)
                    .and_then(|message| message.id)
                    .as_deref()
                    == Some(original)
        }) else {
            return Some("no user message on the surface has that id");
        };
        let since = &events[position + 1..];
        if answered_after(since) {
            return Some("a turn since it was answered");
        }
        // A request must not end with the model's own words: the message is sent anew.
        ends_with_answer(since).then_some("the model's interrupted answer follows it")
    })
}

/// The message of a `user/message` on the surface (not a resend).
fn original_message(event: &Event) -> Option<Message> {
    if event.kind() != USER_MESSAGE || event.surface().is_none() {
        return None;
    }
    event.decode::<UserMessage>().ok().map(|user| user.message)
}

/// Whether the last of `events` on the surface is the model's (an answer cut short:
/// the client went away, the turn was cancelled).
fn ends_with_answer(events: &[std::sync::Arc<Event>]) -> bool {
    events
        .iter()
        .rev()
        .find(|event| event.surface().is_some())
        .is_some_and(|event| event.kind() == ASSISTANT_MESSAGE)
}

/// Whether a turn among `events` ended with an answer the caller got.
fn answered_after(events: &[std::sync::Arc<Event>]) -> bool {
    events
        .iter()
        .filter(|event| event.kind() == TURN_END)
        .filter_map(|event| event.decode::<TurnEnd>().ok())
        .any(|end| {
            matches!(
                end.reason,
                TurnEndReason::Completed | TurnEndReason::MaxTokens
            )
        })
}
