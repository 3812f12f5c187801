//! The step loop (H-LOOP-5): each step runs its phases in order, the step boundary
//! (phases 1-2, [`super::boundary`]), `step/start` with the entered messages (phase
//! 3), the request and its stream (phases 4-5, [`super::attempts`]), then the tools
//! and `step/end` ([`super::step_end`]), until the turn ends or reaches
//! `loop.max_steps_per_turn`.

use std::sync::Arc;

use ccare_core::Source;
use ccare_core::kinds::{HostFailure, StepEnd, StepStart, TurnEndReason};

use super::attempts::request_step;
use super::boundary::{Entered, claim, pre_step, restore_unentered};
use super::step_end::end_step;
use super::{StepResult, Stop, aborted, append, log_user, order_inbox, typed};
use crate::agent::Agent;
use crate::hooks::HookContext;
use crate::inbox::Entry;

/// Runs the steps of turn `turn` after step `done` (0 for a new turn) until it ends;
/// `plugin_messages` holds the opening plugin message (if any) and `user_logged` says
/// whether a user message was logged.
pub(super) async fn run_steps(
    agent: &Agent,
    turn: u32,
    done: u32,
    mut plugin_messages: Vec<Entry>,
    mut user_logged: bool,
) -> StepResult<TurnEndReason> {
    let max_steps = agent.inner.options.lock().max_steps_per_turn;
    let mut step = done;
    loop {
        if step >= max_steps {
            return Ok(TurnEndReason::Error {
                failure: HostFailure::new(
                    "STEP_LIMIT",
                    format!("the turn reached loop.max_steps_per_turn ({max_steps}) steps"),
                )
                .into(),
            });
        }
        step += 1;
        // Phase 1: claim next-step entries; the user's are logged at once.
        claim(agent, &mut plugin_messages, &mut user_logged)?;
        let token = agent.turn_token();
        if token.is_cancelled() {
            restore_unentered(agent, std::mem::take(&mut plugin_messages));
            return Ok(aborted(agent));
        }
        // Phase 2: pre-step and the boundary contributors.
        let context = HookContext {
            session: agent.inner.session.clone(),
            turn,
            step,
            cancel: token.clone(),
            clock: Arc::clone(&agent.inner.clock),
        };
        let hooks = agent.inner.host.hooks.read().clone();
        let Entered { messages, ids } =
            pre_step(agent, &context, &hooks, &mut plugin_messages, user_logged).await?;
        // Phase 3: step/start and the entered messages, after the rows the boundary's
        // and the turn-stopping hooks queued are handed to the store (durable no
        // later than step/start).
        order_inbox(agent).await;
        append(agent, typed(&StepStart { turn, step })?)?;
        for mut message in messages {
            if message.source.is_none() {
                message.source = Some(Source::plugin_notice("host"));
            }
            log_user(agent, message)?;
        }
        agent.forget(&ids);
        // Phases 4-5: request and stream, with request-error retries.
        let outcome = request_step(agent, turn, step, &context, &hooks).await;
        let (message, finish) = match outcome {
            Ok(done) => done,
            Err(Stop::Await) => return Err(Stop::Await),
            Err(Stop::End(reason)) => {
                append(
                    agent,
                    typed(&StepEnd {
                        turn,
                        step,
                        interrupted: matches!(reason, TurnEndReason::Aborted { .. }),
                        repair: false,
                    })?,
                )?;
                return Ok(reason);
            }
        };
        // Phase 6: tools, then step/end; the turn goes on or ends.
        if let Some(reason) = end_step(agent, &context, &hooks, &message, finish).await? {
            return Ok(reason);
        }
    }
}
