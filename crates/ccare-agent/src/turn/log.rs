//! What every phase of a turn writes to the session log: an append, a typed draft and
//! a flush, each turning a refusal into the end of the turn, and a logged user message.

use std::sync::Arc;

use ccare_core::kinds::{HostFailure, TurnEndReason, UserMessage};
use ccare_core::{EventData, EventDraft, Message, SurfaceOp};

use super::{StepResult, Stop};
use crate::agent::Agent;

/// Appends an event; a refused append ends the turn with an error (the session is
/// fenced or a validator vetoed: nothing more can be written safely).
pub(crate) fn append(agent: &Agent, draft: EventDraft) -> StepResult<Arc<ccare_core::Event>> {
    agent.inner.session.append(draft).map_err(|error| {
        tracing::error!(session = %agent.inner.session.id(), %error, "append refused");
        Stop::End(TurnEndReason::Error {
            failure: HostFailure::new(error.code(), error.to_string()).into(),
        })
    })
}

/// Encodes `data` as a draft; a value that cannot be encoded ends the turn with
/// `ENCODE_FAILED`.
pub(crate) fn typed<T: EventData>(data: &T) -> StepResult<EventDraft> {
    EventDraft::typed(data).map_err(|error| {
        Stop::End(TurnEndReason::Error {
            failure: HostFailure::new("ENCODE_FAILED", error.to_string()).into(),
        })
    })
}

/// Makes the session log durable; a failed flush ends the turn with its error.
pub(crate) async fn flush(agent: &Agent) -> StepResult<()> {
    agent.inner.session.flush().await.map_err(|error| {
        Stop::End(TurnEndReason::Error {
            failure: HostFailure::new(error.code(), error.to_string()).into(),
        })
    })
}

/// Waits until every inbox row queued so far for the session (a plugin's or a tool's
/// steer or inject, written in the background) is durable: where a turn is over and
/// nothing is appended after it (ACT-2 "durable before acknowledged"). Costs no store
/// call when no row is outstanding. A row that could not be written is reported here
/// and stays queued in memory for this process. Before an event, [`order_inbox`] is
/// enough.
pub(crate) async fn settle_inbox(agent: &Agent) {
    let host = &agent.inner.host;
    let session = agent.inner.session.id();
    if let Err(error) = host.inbox.settle(host, session.as_str()).await {
        tracing::warn!(%session, %error, "an inbox row is not durable");
    }
}

/// The inbox barrier before an event the kernel appends (ACT-2 "durable before
/// acknowledged", in order): waits until every inbox row queued so far for the session
/// has been handed to the store, which commits in call order, so each is durable no
/// later than the event appended next — without a commit of its own. Costs nothing
/// when no row is outstanding. Where nothing is appended after it (the turn is over,
/// the agent goes idle), [`settle_inbox`] waits for durability itself.
pub(crate) async fn order_inbox(agent: &Agent) {
    let host = &agent.inner.host;
    host.inbox
        .order(host, agent.inner.session.id().as_str())
        .await;
}

/// Logs `message` as a `user/message`: on the surface, unless it resends a message
/// the model already reads ([`crate::resend`]).
pub(super) fn log_user(agent: &Agent, message: Message) -> StepResult<()> {
    let resend = crate::resend::resent_id(&message).is_some();
    let draft = typed(&UserMessage { message })?;
    append(
        agent,
        if resend {
            draft
        } else {
            draft.with_surface(SurfaceOp::Append)
        },
    )?;
    Ok(())
}
