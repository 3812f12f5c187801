//! A session's log read back, and one prompt run to the end of its turn.

use ccare_core::kinds::TurnEndReason;
use ccare_session::Session;
use serde_json::Value;

use crate::Agent;

/// Sends `prompt` as the user and waits until the agent is idle: the reason the last
/// turn ended (`None` if no turn ran).
pub async fn turn(agent: &Agent, prompt: impl Into<String>) -> Option<TurnEndReason> {
    agent.prompt(prompt);
    agent.when_idle().await
}

/// The types of the session's events, in log order.
pub fn kinds(session: &Session) -> Vec<String> {
    session.with_log(|log| {
        log.events()
            .iter()
            .map(|event| event.kind().to_owned())
            .collect()
    })
}

/// The data of every event of type `kind`, in log order.
pub fn events_of(session: &Session, kind: &str) -> Vec<Value> {
    seq_events_of(session, kind)
        .into_iter()
        .map(|(_, data)| data)
        .collect()
}

/// `(seq, data)` of every event of type `kind`, in log order. Data that is not JSON
/// (never written by the engine) reads as `null`.
pub fn seq_events_of(session: &Session, kind: &str) -> Vec<(u64, Value)> {
    session.with_log(|log| {
        log.events()
            .iter()
            .filter(|event| event.kind() == kind)
            .map(|event| {
                (
                    event.seq(),
                    serde_json::from_str(event.data_json()).unwrap_or_default(),
                )
            })
            .collect()
    })
}
