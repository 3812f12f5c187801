//! Phase 5 of a step: one attempt streamed, its chunks fed to the stream observers and
//! live subscribers, and what it produced committed: `assistant/message` (complete or
//! interrupted) or `assistant/attempt`, then settled with the gates.

use std::sync::Arc;

use ccare_core::kinds::{AssistantAttempt, AssistantMessage, AttemptOutcome, LlmRetry};
use ccare_core::{EventDraft, LlmFailure, Message, SurfaceOp};
use ccare_llm::{Assembled, Assembler, Chunk, Finish, PreparedCall};
use futures_util::StreamExt;
use serde_json::Value;

use super::{StepResult, append, order_inbox, typed};
use crate::agent::{Agent, CancelCause, LiveChunk};
use crate::hooks::{HookContext, SettledOutcome, Settlement, StreamContext, StreamVerdict};

/// How one attempt ended.
pub(super) enum Streamed {
    /// The reply completed: the committed message and its finish.
    Done {
        message: Box<Message>,
        finish: Finish,
    },
    /// The turn was cancelled while it streamed.
    Aborted,
    /// The attempt failed.
    Failed(LlmFailure),
}

/// Streams one attempt, feeding observers and live subscribers, and commits what it
/// produced: `assistant/message` (complete or interrupted) or `assistant/attempt`.
pub(super) async fn stream_call(
    agent: &Agent,
    context: &HookContext,
    attempt: u32,
    call: PreparedCall,
    hooks: &crate::hooks::Hooks,
) -> StepResult<Streamed> {
    let (turn, step) = (context.turn, context.step);
    let route = call.route.clone();
    let call_id = call.call_id.clone();
    let stream_context = StreamContext {
        call_id: call_id.clone(),
        attempt,
        turn,
        step,
        route: route.clone(),
        session: agent.inner.session.id().clone(),
        inbox: crate::tool::Injector::new(agent.clone()),
    };
    let token = agent.turn_token();
    let mut stream = call.stream(token.child_token());
    let mut assembler = Assembler::new();
    let mut recorder = ccare_llm::records::StreamRecorder::new();
    let mut protocol = None;
    while let Some(chunk) = stream.next().await {
        recorder.push(&chunk, agent.inner.clock.now_ms());
        if let Chunk::Retry(notice) = &chunk {
            let retry = typed(&LlmRetry {
                call_id: call_id.clone(),
                attempt: notice.attempt,
                code: notice.failure.code,
                delay_ms: notice.delay_ms,
            })?
            .ignorable();
            append(agent, retry)?;
        }
        for hook in &hooks.stream {
            if let StreamVerdict::Cancel { reason } = hook.hook.on_chunk(&stream_context, &chunk) {
                agent.cancel_from_hook(CancelCause::Hook {
                    plugin: hook.owner.clone(),
                    reason,
                });
            }
        }
        // Nobody listening: nothing to copy.
        agent.inner.live.send_with(|| {
            Arc::new(LiveChunk {
                turn,
                step,
                call_id: call_id.clone(),
                chunk: chunk.clone(),
                after_seq: agent.inner.session.head().saturating_sub(1),
            })
        });
        if let Err(failure) = assembler.push(&chunk) {
            protocol = Some(failure.on_route(&route.provider, &route.model));
            break;
        }
    }
    drop(stream);
    // What the stream observers queued (a watch's notice or resume) is durable before
    // the attempt is committed.
    order_inbox(agent).await;
    let records = recorder.to_json();
    let assembled: Assembled = match protocol {
        Some(failure) => assembler.fail(failure),
        None => assembler.finish(),
    };
    let usage = assembled.usage;
    let (streamed, event, outcome) = match assembled.finish.clone() {
        finish @ (Finish::Stop | Finish::Length | Finish::ToolCalls) => {
            let message = assembled.message();
            let event = log_assistant(
                agent,
                &AssistantMessage {
                    turn,
                    step,
                    call_id: call_id.clone(),
                    provider: route.provider.clone(),
                    model: route.model.clone(),
                    message: message.clone(),
                    usage,
                    finish: finish.as_str().to_owned(),
                    interrupted: false,
                    stream: records,
                },
            )?;
            let streamed = Streamed::Done {
                message: Box::new(message),
                finish,
            };
            (streamed, event, SettledOutcome::Completed)
        }
        Finish::Aborted => {
            let visible = assembled.visible_prefix();
            let event = if visible.content.is_empty() {
                append(
                    agent,
                    attempt_draft(
                        turn,
                        step,
                        &call_id,
                        attempt,
                        AttemptOutcome::Aborted,
                        None,
                        records,
                    )?,
                )?
            } else {
                log_assistant(
                    agent,
                    &AssistantMessage {
                        turn,
                        step,
                        call_id: call_id.clone(),
                        provider: route.provider.clone(),
                        model: route.model.clone(),
                        message: visible,
                        usage,
                        finish: "aborted".to_owned(),
                        interrupted: true,
                        stream: records,
                    },
                )?
            };
            (Streamed::Aborted, event, SettledOutcome::Interrupted)
        }
        Finish::Error { failure } => {
            if agent.turn_token().is_cancelled() {
                let event = append(
                    agent,
                    attempt_draft(
                        turn,
                        step,
                        &call_id,
                        attempt,
                        AttemptOutcome::Aborted,
                        None,
                        records,
                    )?,
                )?;
                (Streamed::Aborted, event, SettledOutcome::Interrupted)
            } else {
                let event = append(
                    agent,
                    attempt_draft(
                        turn,
                        step,
                        &call_id,
                        attempt,
                        AttemptOutcome::Failed,
                        Some(&failure),
                        records,
                    )?,
                )?;
                (Streamed::Failed(failure), event, SettledOutcome::Failed)
            }
        }
    };
    let settlement = Settlement {
        call_id,
        attempt,
        outcome,
        event_seq: event.seq(),
        event_type: if event.kind() == ccare_core::kinds::ASSISTANT_MESSAGE {
            ccare_core::kinds::ASSISTANT_MESSAGE
        } else {
            ccare_core::kinds::ASSISTANT_ATTEMPT
        },
        usage,
    };
    for gate in &hooks.gates {
        gate.hook.settled(context, &settlement);
    }
    Ok(streamed)
}

/// The `assistant/attempt` of an attempt that produced no message.
pub(super) fn attempt_draft(
    turn: u32,
    step: u32,
    call_id: &str,
    attempt: u32,
    outcome: AttemptOutcome,
    failure: Option<&LlmFailure>,
    stream: Vec<Value>,
) -> StepResult<EventDraft> {
    typed(&AssistantAttempt {
        turn,
        step,
        call_id: call_id.to_owned(),
        attempt,
        outcome,
        stream,
        failure: failure.cloned(),
    })
}

/// Logs an `assistant/message` (complete, or the visible prefix of an interrupted one)
/// on the surface and records the provider that wrote it, so a later request knows
/// whose reasoning it may send back.
fn log_assistant(agent: &Agent, message: &AssistantMessage) -> StepResult<Arc<ccare_core::Event>> {
    let event = append(agent, typed(message)?.with_surface(SurfaceOp::Append))?;
    agent
        .inner
        .state
        .lock()
        .origins
        .insert(event.seq(), Some(Arc::from(message.provider.as_str())));
    Ok(event)
}
