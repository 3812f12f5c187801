//! One turn: its steps, in the phase order of spec H-LOOP-5, and how it ends
//! (H-LOOP-6, H-HOOK-5/6/7, H-CANCEL-2).
//!
//! Per turn the log reads `turn/start`, the opening `user/message` (logged and flushed
//! before any hook runs), then per step `step/start`, the entered plugin messages,
//! `request/header` and `request/context` when they change, `assistant/message` (or
//! `assistant/attempt` for a failed or silent attempt), `tool/call` + `tool/result`
//! pairs, `step/end`; finally `turn/end` with its reason.

use std::sync::Arc;

use ccare_core::kinds::{
    AssistantAttempt, AssistantMessage, AttemptOutcome, HostFailure, LlmRetry, StepEnd, StepStart,
    TurnEndReason, TurnStart, UserMessage,
};
use ccare_core::{EventData, EventDraft, FailureCode, LlmFailure, Message, Source, SurfaceOp};
use ccare_llm::{Assembled, Assembler, Chunk, Finish, PreparedCall};
use futures_util::StreamExt;
use serde_json::Value;

use crate::agent::{Agent, CancelCause, LiveChunk};
use crate::dispatch::run_tools;
use ccare_llm::RequestMessage;

use crate::hooks::{
    BoundaryContext, HookContext, PreStepDecision, PreStepInput, RequestErrorDecision,
    SettledOutcome, Settlement, StreamContext, StreamVerdict,
};
use crate::inbox::Entry;
use crate::request::{build_call, log_delta, log_request, same_messages};

/// Why a turn stopped early, carried up to `run_turn`.
pub(crate) enum Stop {
    /// End the turn with this reason.
    End(TurnEndReason),
}

pub(crate) type StepResult<T> = Result<T, Stop>;

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

pub(crate) fn typed<T: EventData>(data: &T) -> StepResult<EventDraft> {
    EventDraft::typed(data).map_err(|error| {
        Stop::End(TurnEndReason::Error {
            failure: HostFailure::new("ENCODE_FAILED", error.to_string()).into(),
        })
    })
}

pub(crate) async fn flush(agent: &Agent) -> StepResult<()> {
    agent.inner.session.flush().await.map_err(|error| {
        Stop::End(TurnEndReason::Error {
            failure: HostFailure::new(error.code(), error.to_string()).into(),
        })
    })
}

fn aborted(agent: &Agent) -> TurnEndReason {
    let cause = agent.cancel_cause().unwrap_or(CancelCause::User);
    TurnEndReason::Aborted { cause }
}

/// Runs one turn opened by `opening` and returns how it ended (already logged).
pub(crate) async fn run_turn(agent: &Agent, opening: Entry) -> TurnEndReason {
    // Controls are read before the first turn even when the caller never restored the
    // inbox, so no rule reports `storage-unavailable` merely for not being read yet.
    let controls = &agent.inner.host.controls;
    if !controls.is_loaded(agent.inner.session.id())
        && let Err(error) = controls.load(agent.inner.session.id()).await
    {
        tracing::warn!(session = %agent.inner.session.id(), %error, "controls unavailable");
    }
    let turn = agent.inner.session.with_log(|log| log.state().last_turn) + 1;
    let reason = match turn_body(agent, turn, opening).await {
        Ok(reason) | Err(Stop::End(reason)) => reason,
    };
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
    reason
}

async fn turn_body(agent: &Agent, turn: u32, opening: Entry) -> StepResult<TurnEndReason> {
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
    let max_steps = agent.inner.options.lock().max_steps_per_turn;
    let mut step = 0u32;
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
        let claimed = agent.inner.state.lock().inbox.take_next_step();
        for entry in claimed {
            if entry.is_user() {
                log_user(agent, entry.message)?;
                agent.forget(&[entry.id]);
                user_logged = true;
            } else {
                plugin_messages.push(entry);
            }
        }
        let token = agent.turn_token();
        if token.is_cancelled() {
            restore_unentered(agent, std::mem::take(&mut plugin_messages));
            return Ok(aborted(agent));
        }
        // Phase 2: pre-step.
        let context = HookContext {
            session: agent.inner.session.clone(),
            turn,
            step,
            cancel: token.clone(),
            clock: Arc::clone(&agent.inner.clock),
        };
        let hooks = agent.inner.host.hooks.read().clone();
        let input = PreStepInput {
            messages: plugin_messages
                .iter()
                .map(|entry| entry.message.clone())
                .collect(),
        };
        let decision = tokio::select! {
            biased;
            () = token.cancelled() => {
                restore_unentered(agent, std::mem::take(&mut plugin_messages));
                return Ok(aborted(agent));
            }
            decision = hooks.pre_step(&context, input) => decision,
        };
        let entered = match decision {
            Err(error) => {
                return Ok(hook_failed("pre-step", &error));
            }
            Ok(PreStepDecision::Reject { by, detail }) => {
                let ids: Vec<u64> = plugin_messages.iter().map(|entry| entry.id).collect();
                agent.forget(&ids);
                let unentered = plugin_messages
                    .iter()
                    .map(|entry| serde_json::to_value(&entry.message).unwrap_or(Value::Null))
                    .collect();
                return Ok(TurnEndReason::Blocked {
                    by,
                    detail,
                    unentered,
                });
            }
            Ok(PreStepDecision::Enter(messages)) => messages,
        };
        let entered_ids: Vec<u64> = plugin_messages.drain(..).map(|entry| entry.id).collect();
        if step == 1 && entered.is_empty() && !user_logged {
            agent.forget(&entered_ids);
            return Ok(TurnEndReason::Completed);
        }
        // Boundary notices follow what the pre-step chain entered, in priority order.
        let mut entered = entered;
        let request_only: Vec<Message> = if hooks.boundary.is_empty() {
            Vec::new()
        } else {
            hooks
                .segments
                .iter()
                .flat_map(|segment| segment.hook.preview(&context))
                .collect()
        };
        for (_, contributor) in &hooks.boundary {
            let boundary = BoundaryContext {
                hook: &context,
                entered: &entered,
                request_only: &request_only,
            };
            match contributor.hook.contribute(&boundary).await {
                Ok(contribution) => {
                    let mut index = 0;
                    entered.retain(|_| {
                        let keep = !contribution.withdraw.contains(&index);
                        index += 1;
                        keep
                    });
                    entered.extend(contribution.notices);
                }
                Err(error) => {
                    return Ok(hook_failed(
                        "boundary",
                        &error.attributed(&contributor.owner),
                    ));
                }
            }
        }
        // A cancel that arrived while the contributors ran (they see the token and end
        // early, e.g. a summary in progress) stops the step here: nothing is logged and
        // no request leaves.
        if token.is_cancelled() {
            restore_unentered(agent, std::mem::take(&mut plugin_messages));
            return Ok(aborted(agent));
        }
        // Phase 3: step/start and the entered messages.
        append(agent, typed(&StepStart { turn, step })?)?;
        for mut message in entered {
            if message.source.is_none() {
                message.source = Some(Source::plugin_notice("host"));
            }
            log_user(agent, message)?;
        }
        agent.forget(&entered_ids);
        // Phases 4-5: request and stream, with request-error retries.
        let outcome = request_step(agent, turn, step, &context, &hooks).await;
        let (message, finish) = match outcome {
            Ok(done) => done,
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
        // Phase 6: tools, then step/end.
        let cancelled_in_tools = run_tools(agent, turn, step, &message, &token).await?;
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
            return Ok(aborted(agent));
        }
        match finish {
            Finish::ToolCalls => {}
            Finish::Length => return Ok(TurnEndReason::MaxTokens),
            Finish::Stop | Finish::Aborted | Finish::Error { .. } => {
                if agent.inner.state.lock().inbox.has_next_step() {
                    continue;
                }
                let stopping_context = HookContext {
                    step: 0,
                    ..context.clone()
                };
                let mut steered = false;
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
                            steered = true;
                            break;
                        }
                        Ok(None) => {}
                        Err(error) => {
                            return Ok(hook_failed(
                                "turn-stopping",
                                &error.attributed(&hook.owner),
                            ));
                        }
                    }
                }
                if !steered {
                    return Ok(TurnEndReason::Completed);
                }
            }
        }
    }
}

fn hook_failed(hook: &str, error: &crate::hooks::HookError) -> TurnEndReason {
    TurnEndReason::Error {
        failure: HostFailure::hook(hook, error.plugin.clone(), error.message.clone()).into(),
    }
}

fn restore_unentered(agent: &Agent, entries: Vec<Entry>) {
    let mut state = agent.inner.state.lock();
    let keep = state
        .active
        .as_ref()
        .is_some_and(|active| active.keep_inbox);
    if keep {
        state.inbox.restore_front(entries);
    }
}

fn log_user(agent: &Agent, message: Message) -> StepResult<()> {
    append(
        agent,
        typed(&UserMessage { message })?.with_surface(SurfaceOp::Append),
    )?;
    Ok(())
}

/// Phases 4 and 5 of one step: returns the committed assistant message and its
/// finish, or the reason the turn ends.
async fn request_step(
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
        let epoch = controls.epoch(agent.inner.session.id());
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
            refused.is_none() && controls.epoch(agent.inner.session.id()) != epoch;
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

enum Streamed {
    Done {
        message: Box<Message>,
        finish: Finish,
    },
    Aborted,
    Failed(LlmFailure),
}

/// Streams one attempt, feeding observers and live subscribers, and commits what it
/// produced: `assistant/message` (complete or interrupted) or `assistant/attempt`.
async fn stream_call(
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
        let _ = agent.inner.live.send(LiveChunk {
            turn,
            step,
            call_id: call_id.clone(),
            chunk: chunk.clone(),
        });
        if let Err(failure) = assembler.push(&chunk) {
            protocol = Some(failure.on_route(&route.provider, &route.model));
            break;
        }
    }
    drop(stream);
    let records = recorder.to_json();
    let assembled: Assembled = match protocol {
        Some(failure) => assembler.fail(failure),
        None => assembler.finish(),
    };
    let usage = assembled.usage;
    let (streamed, event, outcome) = match assembled.finish.clone() {
        finish @ (Finish::Stop | Finish::Length | Finish::ToolCalls) => {
            let message = assembled.message();
            let event = append(
                agent,
                typed(&AssistantMessage {
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
                })?
                .with_surface(SurfaceOp::Append),
            )?;
            agent
                .inner
                .state
                .lock()
                .origins
                .insert(event.seq(), Some(Arc::from(route.provider.as_str())));
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
                let event = append(
                    agent,
                    typed(&AssistantMessage {
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
                    })?
                    .with_surface(SurfaceOp::Append),
                )?;
                agent
                    .inner
                    .state
                    .lock()
                    .origins
                    .insert(event.seq(), Some(Arc::from(route.provider.as_str())));
                event
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

fn attempt_draft(
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

/// Joins the request-only messages of every segment into one user message (MP-3): the
/// text of each, in order, separated by a blank line; other blocks kept in place; the
/// first message's source, with `extra.segments` listing every part's source kind. A
/// single message is left as it is.
pub(crate) fn join_request_only(parts: Vec<(String, Vec<Message>)>) -> Vec<(String, Vec<Message>)> {
    let count: usize = parts.iter().map(|(_, messages)| messages.len()).sum();
    if count <= 1 {
        return parts;
    }
    let owners: Vec<String> = parts.iter().map(|(owner, _)| owner.clone()).collect();
    let messages: Vec<Message> = parts
        .into_iter()
        .flat_map(|(_, messages)| messages)
        .collect();
    let kinds: Vec<Value> = messages
        .iter()
        .map(|message| match &message.source {
            Some(Source::Plugin(plugin)) if plugin.kind == "plugin" => Value::String(format!(
                "plugin:{}",
                plugin.plugin.as_deref().unwrap_or_default()
            )),
            Some(source) => Value::String(source.kind().to_owned()),
            None => Value::Null,
        })
        .collect();
    let mut blocks: Vec<ccare_core::ContentBlock> = Vec::new();
    let mut text = String::new();
    for message in &messages {
        for block in &message.content {
            match block {
                ccare_core::ContentBlock::Text(part) => {
                    if !text.is_empty() {
                        text.push_str("\n\n");
                    }
                    text.push_str(&part.text);
                }
                other => {
                    if !text.is_empty() {
                        blocks.push(ccare_core::ContentBlock::text(std::mem::take(&mut text)));
                    }
                    blocks.push(other.clone());
                }
            }
        }
    }
    if !text.is_empty() {
        blocks.push(ccare_core::ContentBlock::text(text));
    }
    let mut joined = Message::from_blocks(blocks);
    joined.source = messages.first().and_then(|message| message.source.clone());
    if let Some(Source::Plugin(plugin)) = &mut joined.source {
        plugin
            .extra
            .insert("segments".to_owned(), Value::Array(kinds));
    }
    vec![(owners.join("+"), vec![joined])]
}

/// How many times in a row a request is prepared again because the controls changed
/// before dispatch (RC-8) before the turn ends with `CONTROL_CHANGED`.
const MAX_CONTROL_CHANGES: u32 = 3;

/// The failure code of an aborted-before-dispatch or unknown-outcome tool result.
pub const ABORTED_BEFORE_DISPATCH: &str = "ABORTED_BEFORE_DISPATCH";
