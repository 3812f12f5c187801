//! Phase 4 of a step: the request and its attempts. Each attempt is built from the log,
//! edited by the request hooks, given the segments' request-only messages, logged
//! (`request/header`, `request/context`), checked by the gates and the controls epoch
//! (RC-8), then streamed ([`super::stream`]); a refused or failed attempt is prepared
//! again as the request-error hooks and the retry limits allow.

use ccare_core::kinds::{AttemptOutcome, TurnEndReason};
use ccare_core::{FailureCode, LlmFailure, Message};
use ccare_llm::{Finish, RequestMessage};

use super::request_only::join_request_only;
use super::stream::{Streamed, attempt_draft, stream_call};
use super::{StepResult, Stop, aborted, append, flush, hook_failed};
use crate::agent::Agent;
use crate::hooks::{HookContext, RequestErrorDecision};
use crate::request::{build_call, log_delta, log_request, same_messages};

/// How many times in a row a request is prepared again because the controls changed
/// before dispatch (RC-8) before the turn ends with `CONTROL_CHANGED`.
const MAX_CONTROL_CHANGES: u32 = 3;

/// Phases 4 and 5 of one step: returns the committed assistant message and its
/// finish, or the reason the turn ends.
pub(super) async fn request_step(
    agent: &Agent,
    turn: u32,
    step: u32,
    context: &HookContext,
    hooks: &crate::hooks::Hooks,
) -> StepResult<(Message, Finish)> {
    let max_retries = agent.inner.options.lock().max_request_retries;
    let mut attempt = 0u32;
    let mut control_changes = 0u32;
    loop {
        attempt += 1;
        let mut config = build_call(agent);
        let from_log = config.messages.clone();
        for hook in &hooks.request {
            if let Err(error) = hook.hook.edit(context, &mut config) {
                return Err(Stop::End(hook_failed(
                    "request",
                    &error.attributed(&hook.owner),
                )));
            }
        }
        let edited = !same_messages(&from_log, &config.messages);
        let mut call = match agent.inner.host.llm.prepare_call(config) {
            Ok(call) => call,
            Err(failure) => {
                return Err(Stop::End(TurnEndReason::Error {
                    failure: failure.into(),
                }));
            }
        };
        // RC-8: the controls epoch this request is prepared under, rechecked before the
        // stream starts.
        let controls = &agent.inner.host.controls;
        let epoch = controls.epoch_token(agent.inner.session.id());
        // Request-only messages follow every surface message, on this request only.
        let mut segment_messages = Vec::new();
        let mut reserved = Vec::new();
        for segment in &hooks.segments {
            let messages = segment.hook.reserve(context, &call.call_id);
            if !messages.is_empty() {
                segment_messages.push((segment.owner.clone(), messages));
            }
            reserved.push(segment);
        }
        // MP-3: every request-only message of the request goes out as ONE user message,
        // in segment order, after every surface message.
        let segment_messages = join_request_only(segment_messages);
        for (_, messages) in &segment_messages {
            for message in messages {
                call.config
                    .messages
                    .push(RequestMessage::user(message.clone()));
            }
        }
        let logged = log_request(agent, &call).and_then(|()| {
            log_delta(
                agent,
                &call,
                edited.then_some(&call.config.messages[..]),
                &segment_messages,
            )
        });
        if let Err(stop) = logged {
            for segment in &reserved {
                segment.hook.release(context, &call.call_id);
            }
            return Err(stop);
        }
        let mut refused = None;
        for gate in &hooks.gates {
            if let Err(failure) = gate.hook.check(context, &call).await {
                refused = Some(failure.on_route(&call.route.provider, &call.route.model));
                break;
            }
        }
        let control_changed =
            refused.is_none() && controls.epoch_token(agent.inner.session.id()) != epoch;
        if control_changed {
            refused = Some(
                LlmFailure::new(
                    FailureCode::ControlChanged,
                    "the rule controls changed before dispatch; the request is prepared again",
                )
                .on_route(&call.route.provider, &call.route.model),
            );
        }
        let call_id = call.call_id.clone();
        let streamed = match refused {
            Some(failure) => {
                for gate in &hooks.gates {
                    gate.hook.not_dispatched(context, &call_id, &failure);
                }
                append(
                    agent,
                    attempt_draft(
                        turn,
                        step,
                        &call_id,
                        attempt,
                        AttemptOutcome::Failed,
                        Some(&failure),
                        Vec::new(),
                    )?,
                )?;
                flush(agent).await?;
                Ok(Streamed::Failed(failure))
            }
            None => match flush(agent).await {
                Ok(()) => {
                    for gate in &hooks.gates {
                        gate.hook.dispatched(context, &call);
                    }
                    stream_call(agent, context, attempt, call, hooks).await
                }
                Err(stop) => {
                    let failure = LlmFailure::new(
                        FailureCode::Unknown,
                        "the session log could not be flushed before dispatch",
                    );
                    for gate in &hooks.gates {
                        gate.hook.not_dispatched(context, &call_id, &failure);
                    }
                    Err(stop)
                }
            },
        };
        let answered = matches!(streamed, Ok(Streamed::Done { .. }));
        for segment in &reserved {
            if answered {
                segment.hook.dispatched(context, &call_id);
            } else {
                segment.hook.release(context, &call_id);
            }
        }
        match streamed? {
            Streamed::Done { message, finish } => return Ok((*message, finish)),
            Streamed::Aborted => return Err(Stop::End(aborted(agent))),
            Streamed::Failed(failure)
                if failure.code == FailureCode::ControlChanged
                    && control_changes < MAX_CONTROL_CHANGES
                    && !context.cancel.is_cancelled() =>
            {
                // RC-8: prepared again under the new controls, without asking the
                // request-error hooks.
                control_changes += 1;
                continue;
            }
            Streamed::Failed(failure) => {
                // In order; the first `Retry` wins and later hooks are not asked.
                let mut retry = false;
                for hook in &hooks.request_error {
                    if hook.hook.on_error(context, &failure, attempt).await
                        == RequestErrorDecision::Retry
                    {
                        retry = true;
                        break;
                    }
                }
                if retry && attempt <= max_retries && !context.cancel.is_cancelled() {
                    continue;
                }
                return Err(Stop::End(TurnEndReason::Error {
                    failure: failure.into(),
                }));
            }
        }
    }
}
