//! Building a conversation request from the log, and logging its header and context
//! when they change (spec H-LOOP-5 phase 4, H-SURF-5, H-SESS-4).

use std::sync::Arc;

use ccare_core::Role;
use ccare_core::kinds::{
    ASSISTANT_MESSAGE, AdapterDefaults, AssistantMessage, HeaderBody, HeaderExt, HeaderReason,
    REQUEST_CONTEXT, REQUEST_HEADER, ReplacedMessage, RequestConfig, RequestContext, RequestDelta,
    RequestEnvelope, RequestHeader, RequestOnly, RequestTool, SeriesConfig, SeriesHeader,
};
use ccare_llm::{CallConfig, PreparedCall, Purpose, RequestMessage};

use crate::agent::Agent;
use crate::turn::{StepResult, append, typed};

/// The call for the next step: the agent's options, the host's system prompt and
/// tools, and the session's derived view.
pub(crate) fn build_call(agent: &Agent) -> CallConfig {
    let options = agent.inner.options.lock().clone();
    // Built straight from the log's derived messages (the fold `derived_view()`
    // snapshots), so a step does not also copy every message into a snapshot and drop
    // it: at 10,000 messages that was about 0.15 ms a step. Lock order as in
    // `log_request`: the agent's state, then the session.
    let mut missing = Vec::new();
    let mut messages = {
        let state = agent.inner.state.lock();
        agent.inner.session.with_log(|log| {
            let derived = log.derived_messages();
            let mut messages = Vec::with_capacity(derived.len());
            for derived in derived {
                let origin = match derived.role {
                    Role::User => None,
                    Role::Assistant => match state.origins.get(&derived.seq) {
                        Some(origin) => origin.clone(),
                        None => {
                            missing.push((messages.len(), derived.seq));
                            None
                        }
                    },
                };
                messages.push(RequestMessage {
                    role: derived.role,
                    message: Arc::clone(&derived.message),
                    origin,
                });
            }
            messages
        })
    };
    if !missing.is_empty() {
        // Assistant messages this agent has not seen yet (an earlier process): read
        // their provider once from the log and remember it.
        let mut found = Vec::with_capacity(missing.len());
        for &(index, seq) in &missing {
            let provider = agent
                .inner
                .session
                .event_at(seq)
                .filter(|event| event.kind() == ASSISTANT_MESSAGE)
                .and_then(|event| event.decode::<AssistantMessage>().ok())
                .map(|message| Arc::<str>::from(message.provider));
            found.push((index, seq, provider));
        }
        let mut state = agent.inner.state.lock();
        for (index, seq, provider) in found {
            messages[index].origin.clone_from(&provider);
            state.origins.insert(seq, provider);
        }
    }
    let host = &agent.inner.host;
    // The host's tools this agent offers, then the ones the open turn declared for the
    // caller (ACT-3).
    let caller_tools = crate::external::turn_tools(agent);
    let mut tools = host.tools.read().specs();
    let mut hidden = options.hidden_tools;
    // A host tool the turn's caller declared a tool of the same name for (a hidden
    // name, free when it was declared) stays hidden while the turn is open, even if a
    // later request of the caller hides less: a name is offered once, the caller's.
    hidden.extend(
        caller_tools
            .iter()
            .filter(|caller| tools.iter().any(|tool| tool.name == caller.name))
            .map(|caller| caller.name.clone()),
    );
    let system = host.system_prompt_hiding(&hidden, !caller_tools.is_empty());
    tools.retain(|tool| !hidden.contains(&tool.name));
    tools.extend(caller_tools);
    CallConfig {
        model: options.model,
        max_tokens: options.max_tokens,
        temperature: options.temperature,
        reasoning_effort: options.reasoning_effort,
        system,
        tools,
        messages,
        purpose: Purpose::Conversation,
        ext: options.request_fields,
        credential: options.credential,
    }
}

/// Writes `request/header` when this agent has not written one yet (`initial` on a
/// fresh session, `resume` otherwise) or when the envelope changed (`change`), and
/// `request/context` when the route's provider, model or window changed.
pub(crate) fn log_request(agent: &Agent, call: &PreparedCall) -> StepResult<()> {
    let context = RequestContext {
        provider: call.route.provider.clone(),
        model: call.route.model.clone(),
        context_window: call.route.context_window,
    };
    let (write_header, reason, write_context) = {
        let state = agent.inner.state.lock();
        let reason = match &state.last_header {
            None => {
                let logged_before = agent
                    .inner
                    .session
                    .with_log(|log| log.last_of_kind(REQUEST_HEADER).is_some());
                if logged_before {
                    HeaderReason::Resume
                } else {
                    HeaderReason::Initial
                }
            }
            Some(_) => HeaderReason::Change,
        };
        // Compared in place: the envelope (every tool schema copied) is built only to
        // be logged.
        let write_header = !state
            .last_header
            .as_ref()
            .is_some_and(|last| envelope_is(last, call));
        let write_context = state.last_context.as_ref() != Some(&context)
            && agent.inner.session.with_log(|log| {
                log.last_of_kind(REQUEST_CONTEXT)
                    .and_then(|event| event.decode::<RequestContext>().ok())
                    .is_none_or(|logged| logged != context)
            });
        (write_header, reason, write_context)
    };
    if write_header {
        let header = RequestHeader {
            header: HeaderBody::Envelope(envelope_of(call)),
            reason,
            ext: None,
        };
        append(agent, typed(&header)?)?;
        if let HeaderBody::Envelope(envelope) = header.header {
            agent.inner.state.lock().last_header = Some(envelope);
        }
    }
    if write_context {
        append(agent, typed(&context)?)?;
    }
    agent.inner.state.lock().last_context = Some(context);
    Ok(())
}

/// The `request/header` envelope of `call` (H-SESS-4).
fn envelope_of(call: &PreparedCall) -> RequestEnvelope {
    let config = &call.config;
    RequestEnvelope {
        config: RequestConfig {
            provider: call.route.provider.clone(),
            model: call.route.model.clone(),
            max_tokens: config.max_tokens,
            temperature: config.temperature,
            reasoning_effort: config.reasoning_effort.clone(),
            purpose: config.purpose.as_str().to_owned(),
        },
        system: config.system.clone(),
        tools: config
            .tools
            .iter()
            .map(|tool| RequestTool {
                name: tool.name.clone(),
                description: tool.description.clone(),
                input_schema: tool.input_schema.clone(),
            })
            .collect(),
        adapter_defaults: AdapterDefaults {
            max_output_tokens: call.route.max_output_tokens,
        },
    }
}

/// Whether `envelope_of(call)` would equal `last`, without building it. Destructured
/// whole, so a field added to the envelope cannot be left out of the comparison.
fn envelope_is(last: &RequestEnvelope, call: &PreparedCall) -> bool {
    let RequestEnvelope {
        config:
            RequestConfig {
                provider,
                model,
                max_tokens,
                temperature,
                reasoning_effort,
                purpose,
            },
        system,
        tools,
        adapter_defaults: AdapterDefaults { max_output_tokens },
    } = last;
    let config = &call.config;
    *provider == call.route.provider
        && *model == call.route.model
        && *max_tokens == config.max_tokens
        && *temperature == config.temperature
        && *reasoning_effort == config.reasoning_effort
        && purpose == config.purpose.as_str()
        && *system == config.system
        && *max_output_tokens == call.route.max_output_tokens
        && tools.len() == config.tools.len()
        && tools.iter().zip(&config.tools).all(|(logged, tool)| {
            let RequestTool {
                name,
                description,
                input_schema,
            } = logged;
            *name == tool.name
                && *description == tool.description
                && ccare_llm::same_schema(input_schema, &tool.input_schema)
        })
}

/// Whether two request message lists are the same messages (by identity: the view's
/// messages are shared `Arc`s, so an unedited list is pointer-equal).
pub(crate) fn same_messages(a: &[RequestMessage], b: &[RequestMessage]) -> bool {
    a.len() == b.len()
        && a.iter().zip(b).all(|(left, right)| {
            left.role == right.role && Arc::ptr_eq(&left.message, &right.message)
        })
}

/// Logs what a request carries beyond the header and the log's view (H-SURF-5): the
/// full message list when request hooks edited it, and the request-only segment
/// messages, as `request/header{reason: series, ext.request_delta}`.
pub(crate) fn log_delta(
    agent: &Agent,
    call: &PreparedCall,
    replaced: Option<&[RequestMessage]>,
    segments: &[(String, Vec<ccare_core::Message>)],
) -> StepResult<()> {
    if replaced.is_none() && segments.is_empty() {
        return Ok(());
    }
    let delta = RequestDelta {
        replace_messages: replaced.map(|messages| {
            messages
                .iter()
                .map(|message| ReplacedMessage {
                    role: message.role,
                    message: (*message.message).clone(),
                })
                .collect()
        }),
        append_request_only: (!segments.is_empty()).then(|| {
            segments
                .iter()
                .map(|(plugin, messages)| RequestOnly {
                    plugin: plugin.clone(),
                    messages: messages.clone(),
                })
                .collect()
        }),
    };
    append(
        agent,
        typed(&RequestHeader {
            header: HeaderBody::Series(SeriesHeader {
                config: SeriesConfig {
                    call_id: call.call_id.clone(),
                },
            }),
            reason: HeaderReason::Series,
            ext: Some(HeaderExt {
                request_delta: Some(delta),
            }),
        })?,
    )?;
    Ok(())
}
