//! Phase 6 of a step and what follows it (H-LOOP-6): the tool calls of the committed message are
//! dispatched (`tool/call` + `tool/result` pairs, [`crate::dispatch`]); calls of the
//! turn's caller-executed tools are handed to the caller and the step awaits their
//! results, open (ACT-3, [`crate::external`]); otherwise `step/end` is written, and the finish decides whether the turn goes on: tool calls continue,
//! `length` ends it, otherwise the next step's entries or a turn-stopping hook's steer
//! continue it, else it completes.

use ccare_core::kinds::{StepEnd, TurnEndReason};
use ccare_core::{Message, ToolCallBlock};
use ccare_llm::Finish;

use super::{StepResult, Stop, aborted, append, flush, hook_failed, order_inbox, typed};
use crate::agent::Agent;
use crate::dispatch::{answer_aborted, hand_to_caller, run_tools};
use crate::external::turn_tools;
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
    let external: Vec<String> = turn_tools(agent)
        .into_iter()
        .map(|tool| tool.name)
        .collect();
    let mut cancelled_in_tools = run_tools(agent, turn, step, message, token, &external).await?;
    // What the tools queued (an inject, a steer) is durable before the step ends or
    // awaits its caller.
    order_inbox(agent).await;
    // Caller-executed calls (ACT-3): after the local ones, handed to the caller, and the
    // step waits, open, unless the turn was cancelled meanwhile.
    let caller_calls: Vec<ToolCallBlock> = message
        .tool_calls()
        .filter(|call| external.contains(&call.name))
        .cloned()
        .collect();
    if !caller_calls.is_empty() {
        if !token.is_cancelled() {
            hand_to_caller(agent, turn, step, &caller_calls)?;
            flush(agent).await?;
        }
        if !token.is_cancelled() {
            agent.signal_awaiting_tools(caller_calls.into_iter().map(|call| call.id).collect());
            return Err(Stop::Await);
        }
        cancelled_in_tools = true;
        for call in &caller_calls {
            answer_aborted(agent, turn, step, call)?;
        }
    }
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
