//! Phase 6 of a step and what follows it (H-LOOP-6): the tool calls of the committed message are
//! dispatched (`tool/call` + `tool/result` pairs, [`crate::dispatch`]), `step/end` is
//! written, and the finish decides whether the turn goes on: tool calls continue,
//! `length` ends it, otherwise the next step's entries or a turn-stopping hook's steer
//! continue it, else it completes.

use ccare_core::Message;
use ccare_core::kinds::{StepEnd, TurnEndReason};
use ccare_llm::Finish;

use super::{StepResult, aborted, append, hook_failed, typed};
use crate::agent::Agent;
use crate::dispatch::run_tools;
use crate::hooks::{HookContext, Hooks};

/// Runs the tools of `message`, writes `step/end`, and returns how the turn ends, or
/// `None` when it goes on with another step.
pub(super) async fn end_step(
    agent: &Agent,
    context: &HookContext,
    hooks: &Hooks,
    message: &Message,
    finish: Finish,
) -> StepResult<Option<TurnEndReason>> {
    let (turn, step, token) = (context.turn, context.step, &context.cancel);
    let cancelled_in_tools = run_tools(agent, turn, step, message, token).await?;
    append(
        agent,
        typed(&StepEnd {
            turn,
            step,
            interrupted: cancelled_in_tools,
            repair: false,
        })?,
    )?;
    if token.is_cancelled() {
        return Ok(Some(aborted(agent)));
    }
    match finish {
        Finish::ToolCalls => Ok(None),
        Finish::Length => Ok(Some(TurnEndReason::MaxTokens)),
        Finish::Stop | Finish::Aborted | Finish::Error { .. } => {
            if agent.inner.state.lock().inbox.has_next_step() {
                return Ok(None);
            }
            turn_stopping(agent, context, hooks).await
        }
    }
}

/// The turn-stopping hooks, in order (H-LOOP-6 `stop`): the first that steers puts its message
/// at the front of the inbox and the turn goes on (`None`); with none it completes.
async fn turn_stopping(
    agent: &Agent,
    context: &HookContext,
    hooks: &Hooks,
) -> StepResult<Option<TurnEndReason>> {
    let stopping_context = HookContext {
        step: 0,
        ..context.clone()
    };
    for hook in &hooks.turn_stopping {
        match hook.hook.on_stopping(&stopping_context).await {
            Ok(Some(message)) => {
                let entry = agent
                    .inner
                    .state
                    .lock()
                    .inbox
                    .push_front(crate::inbox::Target::Steer, message);
                agent.persist(&entry);
                return Ok(None);
            }
            Ok(None) => {}
            Err(error) => {
                return Ok(Some(hook_failed(
                    "turn-stopping",
                    &error.attributed(&hook.owner),
                )));
            }
        }
    }
    Ok(Some(TurnEndReason::Completed))
}
