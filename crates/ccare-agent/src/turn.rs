//! One turn: its steps, in the phase order of spec H-LOOP-5, and how it ends
//! (H-LOOP-6, H-HOOK-5/6/7, H-CANCEL-2).
//!
//! Per turn the log reads `turn/start`, the opening `user/message` (logged and flushed
//! before any hook runs), then per step `step/start`, the entered plugin messages,
//! `request/header` and `request/context` when they change, `assistant/message` (or
//! `assistant/attempt` for a failed or silent attempt), `tool/call` + `tool/result`
//! pairs, `step/end`; finally `turn/end` with its reason.
//!
//! [`run_turn`] is the entry point: it opens the turn, runs its steps and writes
//! `turn/end`. One module per phase: `step` runs the steps in phase order; `boundary`
//! claims the next-step entries and runs the pre-step chain and the boundary
//! contributors (phases 1-2); `attempts` prepares, logs, gates and retries the request
//! (phase 4); `stream` streams one attempt and commits what it produced (phase 5);
//! `step_end` runs the tools, writes `step/end` and decides whether the turn goes on
//! (phase 6 and the turn-stopping hooks). `log` holds the appends every phase shares,
//! `request_only` the MP-3 join of request-only messages.

use ccare_core::EventDraft;
use ccare_core::kinds::{HostFailure, TurnEndReason, TurnStart};

use crate::agent::{Agent, CancelCause};
use crate::inbox::Entry;

mod attempts;
mod boundary;
mod log;
mod request_only;
mod step;
mod step_end;
mod stream;

pub(crate) use log::{append, flush, order_inbox, settle_inbox, typed};
pub(crate) use request_only::join_request_only;

use log::log_user;

/// Why a turn stopped early, carried up to `run_turn`.
pub(crate) enum Stop {
    /// End the turn with this reason.
    End(TurnEndReason),
    /// The step awaits caller-executed results (ACT-3): the turn stays open, no
    /// `turn/end` is written.
    Await,
}

pub(crate) type StepResult<T> = Result<T, Stop>;

/// The failure code of an aborted-before-dispatch or unknown-outcome tool result.
pub const ABORTED_BEFORE_DISPATCH: &str = "ABORTED_BEFORE_DISPATCH";

/// Runs one turn opened by `opening` and returns how it ended (already logged), or
/// `None` when it awaits caller-executed results (ACT-3) and stays open.
pub(crate) async fn run_turn(agent: &Agent, opening: Entry) -> Option<TurnEndReason> {
    load_controls(agent).await;
    let turn = agent.inner.session.with_log(|log| log.state().last_turn) + 1;
    let result = turn_body(agent, turn, opening).await;
    finish_turn(agent, turn, result).await
}

/// Goes on with turn `turn` after its step `step` got the caller's results (ACT-3):
/// the next step, and so on until the turn ends or awaits again.
pub(crate) async fn resume_turn(agent: &Agent, turn: u32, step: u32) -> Option<TurnEndReason> {
    load_controls(agent).await;
    let result = step::run_steps(agent, turn, step, Vec::new(), true).await;
    finish_turn(agent, turn, result).await
}

/// Controls are read before the first turn even when the caller never restored the
/// inbox, so no rule reports `storage-unavailable` merely for not being read yet.
async fn load_controls(agent: &Agent) {
    let controls = &agent.inner.host.controls;
    if !controls.is_loaded(agent.inner.session.id())
        && let Err(error) = controls.load(agent.inner.session.id()).await
    {
        tracing::warn!(session = %agent.inner.session.id(), %error, "controls unavailable");
    }
}

/// Writes `turn/end` for a turn that ended; nothing for one that awaits tools.
async fn finish_turn(
    agent: &Agent,
    turn: u32,
    result: StepResult<TurnEndReason>,
) -> Option<TurnEndReason> {
    let reason = match result {
        Ok(reason) | Err(Stop::End(reason)) => reason,
        Err(Stop::Await) => return None,
    };
    // What the turn's plugins and tools queued is durable before its end is.
    order_inbox(agent).await;
    let end = ccare_core::kinds::TurnEnd {
        turn,
        reason: reason.clone(),
        repair: false,
    };
    if let Ok(draft) = EventDraft::typed(&end)
        && agent.inner.session.append(draft).is_ok()
    {
        let _ = agent.inner.session.flush().await;
    }
    Some(reason)
}

/// Opens the turn (`turn/start`, the opening user message logged and flushed before
/// any hook runs, or the opening plugin message kept for the pre-step chain), then
/// runs its steps.
async fn turn_body(agent: &Agent, turn: u32, opening: Entry) -> StepResult<TurnEndReason> {
    // The opening entry's row (an idle hook's, written in the background) first.
    order_inbox(agent).await;
    append(agent, typed(&TurnStart { turn })?)?;
    let mut plugin_messages = Vec::new();
    let mut user_logged = false;
    if opening.is_user() {
        log_user(agent, opening.message)?;
        agent.forget(&[opening.id]);
        user_logged = true;
    } else {
        plugin_messages.push(opening);
    }
    flush(agent).await?;
    step::run_steps(agent, turn, 0, plugin_messages, user_logged).await
}

/// What the driver and the resume of an awaiting turn do once a turn they ran ended
/// (or began to await, `None`): record it, make what it queued or deleted in the inbox
/// durable, then wake the `when_idle` waiters — one block for both, so that neither
/// reports idle before the inbox is durable.
pub(crate) async fn after_turn(agent: &Agent, reason: Option<TurnEndReason>) {
    agent.record_turn_end(reason);
    settle_inbox(agent).await;
    agent.bump_idle();
}

/// A turn ended by cancellation, with the cause recorded on the agent (the user's when
/// none is).
fn aborted(agent: &Agent) -> TurnEndReason {
    let cause = agent.cancel_cause().unwrap_or(CancelCause::User);
    TurnEndReason::Aborted { cause }
}

/// A turn ended by a failing hook of chain `hook`, attributed to its plugin.
fn hook_failed(hook: &str, error: &crate::hooks::HookError) -> TurnEndReason {
    hook_failed_unentered(hook, error, Vec::new())
}

/// [`hook_failed`] listing the plugin messages the step had claimed and never entered
/// (a failing pre-step or boundary hook, H-HOOK-7).
fn hook_failed_unentered(
    hook: &str,
    error: &crate::hooks::HookError,
    unentered: Vec<serde_json::Value>,
) -> TurnEndReason {
    let failure = HostFailure::hook(hook, error.plugin.clone(), error.message.clone());
    TurnEndReason::Error {
        failure: failure.with_unentered(unentered).into(),
    }
}
