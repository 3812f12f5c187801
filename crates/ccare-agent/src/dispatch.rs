//! Running the tool calls of a step (spec H-TOOL-1, H-TOOL-2, H-CANCEL-2).
//!
//! Calls run in block order. Consecutive parallel-safe calls share the tool pool; an
//! exclusive call is a barrier. Before any body runs, its `tool/call` marker is logged
//! and flushed, so a crash mid-body is repaired as `TOOL_OUTCOME_UNKNOWN`. Results
//! are appended in block order. Bad calls (unknown tool, arguments that fail the
//! schema or are not JSON) get an error result without running anything; after a
//! cancel, calls not yet dispatched get `ABORTED_BEFORE_DISPATCH`, and bodies still
//! running after the grace period `TOOL_OUTCOME_UNKNOWN`. Calls of the turn's
//! caller-executed tools are not run here: they get a `tool/call{executor: "caller"}`
//! marker and wait for the caller (ACT-3).

use std::sync::Arc;
use std::time::Duration;

use ccare_core::kinds::{Executor, ToolCall, ToolError, ToolResult};
use ccare_core::{ContentBlock, Message, SurfaceOp, ToolCallBlock, ToolResultBlock};
use ccare_llm::CancellationToken;
use ccare_session::TOOL_OUTCOME_UNKNOWN;
use serde_json::Value;
use tokio::sync::Semaphore;

use crate::agent::Agent;
use crate::tool::{Concurrency, Tool, ToolContext, ToolOutcome};
use crate::toolbox::check_arguments;
use crate::turn::{ABORTED_BEFORE_DISPATCH, StepResult, append, flush, typed};

/// A call ready to run, or already answered.
enum Planned {
    Run {
        tool: Arc<dyn Tool>,
        arguments: Value,
    },
    Answer(ToolOutcome),
}

fn failure(code: &str, message: String) -> ToolOutcome {
    Err(crate::tool::ToolFailure::new(code, message))
}

fn plan(agent: &Agent, call: &ToolCallBlock) -> Planned {
    let hidden = agent.inner.options.lock().hidden_tools.contains(&call.name);
    let found = if hidden {
        None
    } else {
        agent.inner.host.tools.read().get(&call.name)
    };
    let Some((tool, validator)) = found else {
        return Planned::Answer(failure(
            "TOOL_NOT_FOUND",
            format!("there is no tool named {:?}", call.name),
        ));
    };
    if let Some(raw) = &call.raw_arguments {
        return Planned::Answer(failure(
            "INVALID_ARGUMENTS",
            format!("the arguments are not valid JSON: {raw:?}"),
        ));
    }
    if let Some(validator) = validator
        && let Err(problems) = check_arguments(&validator, &call.arguments)
    {
        return Planned::Answer(failure("INVALID_ARGUMENTS", problems));
    }
    let gates = agent.inner.host.hooks.read().tool_gates.clone();
    if !gates.is_empty() {
        let context = gate_context(agent);
        for gate in &gates {
            if let Err(refusal) = gate.hook.before(&context, call) {
                return Planned::Answer(Err(refusal));
            }
        }
    }
    Planned::Run {
        tool,
        arguments: call.arguments.clone(),
    }
}

/// Runs every call of `message` except those of the caller-executed tools named in
/// `external` (ACT-3); returns whether a cancel interrupted them.
pub(crate) async fn run_tools(
    agent: &Agent,
    turn: u32,
    step: u32,
    message: &Message,
    token: &CancellationToken,
    external: &[String],
) -> StepResult<bool> {
    let calls: Vec<ToolCallBlock> = message
        .tool_calls()
        .filter(|call| !external.contains(&call.name))
        .cloned()
        .collect();
    if calls.is_empty() {
        return Ok(false);
    }
    let (pool, grace) = {
        let options = agent.inner.options.lock();
        (
            options.tool_pool.max(1),
            Duration::from_millis(options.tool_cancel_grace_ms),
        )
    };
    let mut index = 0;
    let mut interrupted = false;
    while index < calls.len() {
        // The next batch: one exclusive call, or a run of parallel-safe ones.
        let mut batch = Vec::new();
        while index < calls.len() {
            let call = &calls[index];
            let planned = plan(agent, call);
            let exclusive = match &planned {
                Planned::Run { tool, .. } => tool.def().concurrency == Concurrency::Exclusive,
                Planned::Answer(_) => false,
            };
            if exclusive && !batch.is_empty() {
                break;
            }
            batch.push((call.clone(), planned));
            index += 1;
            if exclusive {
                break;
            }
        }
        if token.is_cancelled() {
            interrupted = true;
            for (call, _) in batch {
                answer(
                    agent,
                    turn,
                    step,
                    &call,
                    failure(
                        ABORTED_BEFORE_DISPATCH,
                        "the turn was cancelled before this call ran".to_owned(),
                    ),
                )?;
            }
            continue;
        }
        let mut dispatched = false;
        for (call, planned) in &batch {
            if matches!(planned, Planned::Run { .. }) {
                append(
                    agent,
                    typed(&ToolCall {
                        turn,
                        step,
                        call_id: call.id.clone(),
                        name: call.name.clone(),
                        arguments: call.arguments.clone(),
                        executor: None,
                    })?,
                )?;
                dispatched = true;
            }
        }
        if dispatched {
            flush(agent).await?;
        }
        let semaphore = Arc::new(Semaphore::new(pool));
        let mut running = Vec::with_capacity(batch.len());
        for (call, planned) in batch {
            match planned {
                Planned::Answer(outcome) => running.push((call, Err(outcome))),
                Planned::Run { tool, arguments } => {
                    let context = ToolContext {
                        session: agent.inner.session.clone(),
                        call_id: call.id.clone(),
                        turn,
                        step,
                        cancel: token.clone(),
                        inbox: crate::tool::Injector::new(agent.clone()),
                        clock: Arc::clone(&agent.inner.clock),
                    };
                    let timeout = tool.def().timeout_ms.map(Duration::from_millis);
                    let semaphore = Arc::clone(&semaphore);
                    let body = tool.call(context, arguments);
                    let name = call.name.clone();
                    let handle = tokio::spawn(async move {
                        let _permit = semaphore.acquire_owned().await;
                        match timeout {
                            Some(limit) => match tokio::time::timeout(limit, body).await {
                                Ok(outcome) => outcome,
                                Err(_) => failure(
                                    "TOOL_TIMEOUT",
                                    format!(
                                        "{name} did not finish within {} ms",
                                        limit.as_millis()
                                    ),
                                ),
                            },
                            None => body.await,
                        }
                    });
                    running.push((call, Ok(handle)));
                }
            }
        }
        for (call, job) in running {
            let outcome = match job {
                Err(outcome) => outcome,
                Ok(mut handle) => {
                    let finished = tokio::select! {
                        biased;
                        joined = &mut handle => Some(joined),
                        () = token.cancelled() => None,
                    };
                    let joined = match finished {
                        Some(joined) => Some(joined),
                        None => {
                            interrupted = true;
                            tokio::time::timeout(grace, &mut handle).await.ok()
                        }
                    };
                    match joined {
                        Some(Ok(outcome)) => outcome,
                        Some(Err(join_error)) => failure(
                            "TOOL_FAILED",
                            format!("the tool stopped unexpectedly: {join_error}"),
                        ),
                        None => {
                            handle.abort();
                            failure(
                                TOOL_OUTCOME_UNKNOWN,
                                "the turn was cancelled while this call ran; whether it took effect is unknown".to_owned(),
                            )
                        }
                    }
                }
            };
            answer(agent, turn, step, &call, outcome)?;
        }
    }
    Ok(interrupted)
}

/// Logs `tool/call{executor: "caller"}` for each call handed to the caller (ACT-3); the
/// caller answers them with `ToolResults`.
pub(crate) fn hand_to_caller(
    agent: &Agent,
    turn: u32,
    step: u32,
    calls: &[ToolCallBlock],
) -> StepResult<()> {
    for call in calls {
        append(
            agent,
            typed(&ToolCall {
                turn,
                step,
                call_id: call.id.clone(),
                name: call.name.clone(),
                arguments: call.arguments.clone(),
                executor: Some(Executor::Caller),
            })?,
        )?;
    }
    Ok(())
}

/// Answers `call` with `ABORTED_BEFORE_DISPATCH` (the turn was cancelled first).
pub(crate) fn answer_aborted(
    agent: &Agent,
    turn: u32,
    step: u32,
    call: &ToolCallBlock,
) -> StepResult<()> {
    answer(
        agent,
        turn,
        step,
        call,
        failure(
            ABORTED_BEFORE_DISPATCH,
            "the turn was cancelled before this call ran".to_owned(),
        ),
    )
}

fn gate_context(agent: &Agent) -> crate::hooks::ToolGateContext {
    crate::hooks::ToolGateContext {
        session: agent.inner.session.clone(),
        inbox: crate::tool::Injector::new(agent.clone()),
    }
}

fn answer(
    agent: &Agent,
    turn: u32,
    step: u32,
    call: &ToolCallBlock,
    outcome: ToolOutcome,
) -> StepResult<()> {
    let (content, error) = match outcome {
        Ok(content) => (content, None),
        Err(failure) => (
            vec![ContentBlock::text(format!(
                "{}: {}",
                failure.code, failure.message
            ))],
            Some(ToolError {
                code: failure.code,
                message: failure.message,
            }),
        ),
    };
    let block = ToolResultBlock {
        call_id: call.id.clone(),
        name: call.name.clone(),
        content,
        is_error: error.is_some(),
        extra: ccare_core::Extra::new(),
    };
    let result = ToolResult {
        turn,
        step,
        message: Message::from_blocks(vec![ContentBlock::ToolResult(block)]),
        error,
        meta: None,
        repair: false,
    };
    let event = append(agent, typed(&result)?.with_surface(SurfaceOp::Append))?;
    let gates = agent.inner.host.hooks.read().tool_gates.clone();
    if !gates.is_empty()
        && let Some(ContentBlock::ToolResult(block)) = result.message.content.first()
    {
        let context = gate_context(agent);
        for gate in &gates {
            gate.hook.after(&context, call, block, event.seq());
        }
    }
    Ok(())
}
