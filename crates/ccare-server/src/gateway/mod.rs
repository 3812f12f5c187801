//! The OpenAI-compatible gateway (server.md §3, GW-1..GW-7), first landing:
//! `GET /v1/models` and `POST /v1/chat/completions` (streaming and not) for plain
//! conversations, as routes in the host's route table (owner `server`).
//!
//! A request is mapped to a session (GW-2, `find`) and holds it until the client view
//! its answer leaves is recorded (`admission`), only the messages the session has
//! not seen are entered (GW-3), and the turn runs to its end in the session's actor
//! through the `Agents` registry — context care, stream watch and budgets apply as for
//! `ccare chat`. The answer (`answer`) is built from the session's ordered stream
//! (`follow`). Every response names the session in `x-ccare-session` once it is known
//! (GW-7). Refusals (`refusal`) are OpenAI-shaped and, when retrying cannot help,
//! carry `x-should-retry: false` (GW-6).
//!
//! The client view (`view`) is a few rows in the store's KV domain `gateway`, beside the
//! session's log: the chain hash after each client message.
//!
//! A client's retry of a request whose turn failed (an SDK retrying a 429) is not a
//! new message: the message the failed turn logged is resent ([`resend`]), so the
//! model reads it once; a new conversation's failed first turn, which has no view yet,
//! is remembered in memory (`unanswered`) so that its retry goes back to its session.
//!
//! With `[gateway] pass_through_keys` (GW-1), a bearer that is not the server token is
//! the client's own API key (`owner`): its turns run with it as the agent's per-turn
//! credential (memory only), the sessions it creates record only its hash, and only it
//! continues them.
//!
//! Client tools (GW-4): the request's `tools` are the turn's caller-executed tools
//! (ACT-3, validated as the sessions API does); a turn that calls them is answered
//! with `tool_calls` (`finish_reason: tool_calls`) and the next request's `tool`
//! messages are its `ToolResults`. The host's own tools run server-side, unseen.

mod admission;
mod answer;
mod find;
mod follow;
mod owner;
mod parts;
pub mod refusal;
mod unanswered;
mod view;
pub mod wire;

use std::collections::BTreeSet;
use std::sync::Arc;

use ccare_agent::routes::{
    Method, RouteDoc, RouteError, RouteReply, RouteRequest, RouteSpec, Routes,
};
use ccare_agent::{CallerResult, Command, resend};
use ccare_core::{ContentBlock, JsonObject, SessionId};
use tokio::sync::mpsc;

use crate::ServerContext;
use crate::api::errors;
use crate::api::sessions::META_MODEL;

pub use answer::COMPACTED_HEADER;
pub use answer::DONE;
pub use find::{SESSION_HEADER, TRANSCRIPT_DIVERGED};
pub use owner::META_OWNER;
pub use refusal::{BAD_TRANSCRIPT, MODEL_NOT_FOUND, SHOULD_RETRY};
pub use view::DOMAIN;

use admission::{Admissions, Admitted};
use answer::Answering;
use find::Identity;
use follow::{Item, Recording};
use owner::Owner;
use unanswered::Unanswered;
use view::{Prior, Views};
use wire::{ChatRequest, ModelEntry, ModelList};

/// Our code of tool results that do not answer exactly the calls the client got.
pub const TOOL_RESULTS_MISMATCH: &str = ccare_agent::TOOL_RESULTS_MISMATCH;

/// The session metadata key marking a session the gateway created.
pub const META_ORIGIN: &str = "origin";
/// [`META_ORIGIN`]'s value on the sessions the gateway created.
pub const ORIGIN_GATEWAY: &str = "gateway";

/// Registers the gateway's routes (owner `server`), and makes every actor of a
/// session the gateway created start with [`hidden_tools`] hidden, so a turn its
/// actor runs before the next gateway request (the inbox an earlier process left, a
/// command through the sessions API) offers the same tools.
pub fn register(routes: &Routes, context: &ServerContext) -> Result<(), RouteError> {
    context.agents.set_start_options(|header, options| {
        if created_here(&header.meta_json) {
            options.hidden_tools = hidden_tools();
        }
    });
    let models_context = context.clone();
    let models = RouteSpec::new(
        path("/v1/models")?,
        Arc::new(move |_request: RouteRequest| {
            let context = models_context.clone();
            async move { models(&context) }
        }),
    )
    .method(
        Method::Get,
        RouteDoc::new("The configured model routes, as OpenAI's model list (GW-1)")
            .response::<ModelList>(),
    );
    let chat_context = context.clone();
    let admissions = Arc::new(Admissions::default());
    let unanswered = Arc::new(Unanswered::default());
    let chat = RouteSpec::new(
        path("/v1/chat/completions")?,
        Arc::new(move |request: RouteRequest| {
            let context = chat_context.clone();
            let admissions = Arc::clone(&admissions);
            let unanswered = Arc::clone(&unanswered);
            async move { completions(&context, &admissions, &unanswered, &request).await }
        }),
    )
    .method(
        Method::Post,
        RouteDoc::new(
            "OpenAI chat completions over a durable session (GW-1..3, GW-5..7): the session is found from x-ccare-session, x-session-id, x-session-affinity, prompt_cache_key, user or the message chain; `stream: true` answers chat.completion.chunk events then [DONE]",
        )
        .request::<ChatRequest>()
        .response::<wire::Completion>(),
    );
    // GW-1: with pass-through on, a bearer that is not the server token is the
    // client's own API key, on these two routes only.
    let (models, chat) = if context.booted.gateway.pass_through_keys {
        (models.client_keys(), chat.client_keys())
    } else {
        (models, chat)
    };
    // A client sends its whole transcript every time: `[gateway] max_request_mib`,
    // not the API's 1 MiB.
    let chat = chat.body_limit(context.booted.gateway.max_request_bytes);
    // The server's own refusals (401, 413, ...) in OpenAI's shape too (GW-6).
    let (models, chat) = (
        models.refusals(refusal::from_api),
        chat.refusals(refusal::from_api),
    );
    routes.register(crate::api::OWNER, models)?;
    routes.register(crate::api::OWNER, chat)?;
    Ok(())
}

/// An exact route path, with the route table's error.
fn path(pattern: &str) -> Result<ccare_agent::routes::RoutePath, RouteError> {
    Ok(ccare_agent::routes::RoutePath::exact(pattern)?)
}

/// The configured routes, then the `[gateway] models` aliases.
fn models(context: &ServerContext) -> RouteReply {
    let entry = |id: String, route: &str| ModelEntry {
        owned_by: route
            .split_once('/')
            .map_or_else(String::new, |(provider, _)| provider.to_owned()),
        id,
        object: "model",
        created: 0,
    };
    let mut data: Vec<ModelEntry> = context
        .booted
        .host
        .llm()
        .routes()
        .into_iter()
        .map(|route| entry(route.name.clone(), &route.name))
        .collect();
    data.extend(
        context
            .booted
            .gateway
            .models
            .iter()
            .map(|(alias, route)| entry(alias.clone(), route)),
    );
    RouteReply::json(
        200,
        &ModelList {
            object: "list",
            data,
        },
    )
}

/// The route `model` names: a `[gateway] models` alias, `<provider>/<model>` as
/// configured, or a bare model name exactly one configured route serves.
fn resolve_model(context: &ServerContext, model: &str) -> Result<String, RouteReply> {
    let llm = context.booted.host.llm();
    if let Some(route) = context.booted.gateway.models.get(model) {
        return match llm.route(route) {
            Ok(_) => Ok(route.clone()),
            Err(_) => Err(refusal::unknown_model(model)),
        };
    }
    let routes = llm.routes();
    if routes.iter().any(|route| route.name == model) {
        return Ok(model.to_owned());
    }
    let suffix = format!("/{model}");
    let mut bare = routes.iter().filter(|route| route.name.ends_with(&suffix));
    match (bare.next(), bare.next()) {
        (Some(route), None) => Ok(route.name.clone()),
        _ if model.contains('/') && llm.route(model).is_ok() => Ok(model.to_owned()),
        _ => Err(refusal::unknown_model(model)),
    }
}

fn now_secs() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |elapsed| elapsed.as_secs())
}

/// The client's tools as the turn's caller-executed tools, validated as the sessions
/// API validates them (a 400 naming `tools[i].…`).
fn client_tools(body: &ChatRequest) -> Result<Vec<ccare_llm::ToolSpec>, RouteReply> {
    let declarations = body
        .tools
        .iter()
        .flatten()
        .map(|tool| crate::api::types::ToolDeclaration {
            name: tool.function.name.clone(),
            description: tool.function.description.clone().unwrap_or_default(),
            input_schema: tool
                .function
                .parameters
                .clone()
                .unwrap_or_else(|| serde_json::json!({"type": "object", "properties": {}})),
        })
        .collect();
    crate::api::commands::tool_specs(declarations).map_err(refusal::from_api)
}

/// The `tool` messages that answer the calls the session awaits, as its
/// `ToolResults`, and what the client wrote after them (its user's words, an agent's
/// environment details), as the message the resumed turn reads next; a 400
/// `TOOL_RESULTS_MISMATCH` naming the call otherwise.
fn tool_results(
    new: &[wire::ChatMessage],
    seen: usize,
    awaiting: &[String],
) -> Result<(Vec<CallerResult>, Option<ccare_core::Message>), RouteReply> {
    let answered = new
        .iter()
        .position(|message| message.role != "tool")
        .unwrap_or(new.len());
    let (answers, after) = new.split_at(answered);
    let mut results = Vec::with_capacity(answers.len());
    for (index, message) in answers.iter().enumerate() {
        let Some(call_id) = message.tool_call_id.clone() else {
            return Err(refusal::bad_transcript(format!(
                "messages: the tool message (new message {index}) has no tool_call_id"
            )));
        };
        if !awaiting.contains(&call_id) {
            return Err(refusal::refuse(
                400,
                TOOL_RESULTS_MISMATCH,
                format!(
                    "messages: a tool message answers the call {call_id:?}, which this gateway never sent; the session awaits results for {awaiting:?}"
                ),
            ));
        }
        if results
            .iter()
            .any(|result: &CallerResult| result.call_id == call_id)
        {
            return Err(refusal::refuse(
                400,
                TOOL_RESULTS_MISMATCH,
                format!("messages: the call {call_id:?} is answered twice"),
            ));
        }
        let content = parts::blocks(message, seen + index).map_err(refusal::bad_transcript)?;
        results.push(CallerResult {
            call_id,
            content,
            is_error: false,
        });
    }
    let missing: Vec<&String> = awaiting
        .iter()
        .filter(|id| results.iter().all(|result| &result.call_id != *id))
        .collect();
    if !missing.is_empty() {
        if let Some(message) = after.first() {
            return Err(refusal::bad_transcript(format!(
                "messages: the session awaits results for the tool calls {missing:?}; a {:?} message cannot come before them (new message {answered})",
                message.role
            )));
        }
        return Err(refusal::refuse(
            400,
            TOOL_RESULTS_MISMATCH,
            format!(
                "messages: no tool message answers the calls {missing:?}; every call of the answer needs its result"
            ),
        ));
    }
    if after.is_empty() {
        return Ok((results, None));
    }
    let next = new_message(after, seen + answered)?;
    Ok((results, Some(next)))
}

/// How many of the request's first new messages are `original`, the user message a
/// turn that failed after the last answer the client saw logged (the client sends them
/// again, followed by new ones): the session logged them as one user message with
/// their blocks. 0 when they are not, or when they are all the request adds (that is
/// a resend).
fn already_entered(
    original: &ccare_core::Message,
    new: &[wire::ChatMessage],
    seen: usize,
) -> usize {
    (1..new.len())
        .find(|&count| {
            new_message(&new[..count], seen)
                .is_ok_and(|message| message.content == original.content)
        })
        .unwrap_or(0)
}

/// The resend (a message with the original's words) and the id of the logged user
/// message it resends, when `new` is only `tool` messages whose
/// results the found session already logged, after the last answer the client saw,
/// in a turn that then failed ([`resend::resendable_results`]); `None` otherwise.
fn resent_results(
    found: &find::Found,
    new: &[wire::ChatMessage],
) -> Option<(ccare_core::Message, String)> {
    let call_ids: Option<Vec<String>> = new
        .iter()
        .map(|message| {
            (message.role == "tool")
                .then(|| message.tool_call_id.clone())
                .flatten()
        })
        .collect();
    let original =
        resend::resendable_results(found.handle.session(), Some(found.after_seq), &call_ids?)?;
    // The resend's own message: a fresh id, the original's words.
    Some((user_message(original.content)?, original.id?))
}

/// The kernel's user message (a fresh id, source `user`) with `content`.
fn user_message(content: Vec<ContentBlock>) -> Option<ccare_core::Message> {
    let Command::UserInput { mut message, .. } = Command::prompt("") else {
        return None;
    };
    message.content = content;
    Some(message)
}

/// The message the session is given: the blocks of each new client message (system
/// messages and assistant messages the client wrote itself included; a user message's
/// images as images), the first of them the `seen`-th of the request's messages, or a
/// 400 naming what cannot be entered yet.
///
/// Tool calls the gateway did not make (history from before the gateway, or from a
/// session the client's own trimming left: the transcript no longer extends any view,
/// so it starts a new session) are entered as text, each call as `[tool call NAME]
/// ARGUMENTS` and its result as `[tool result NAME]` then the result, the labels a
/// summary uses: the model reads what happened, and the client is not refused for
/// history it sent the way OpenAI's API takes it. Every such call must be answered by
/// a `tool` message after it, and every `tool` message must answer one of them, as
/// that API requires.
fn new_message(new: &[wire::ChatMessage], seen: usize) -> Result<ccare_core::Message, RouteReply> {
    if new.is_empty() {
        return Err(refusal::bad_transcript(
            "the messages add nothing the session has not answered: the last message must be a new user message",
        ));
    }
    if new
        .last()
        .is_some_and(|message| message.role == "assistant")
    {
        return Err(refusal::bad_transcript(
            "messages: the last message is an assistant message the gateway did not answer; the last message must be a new user message",
        ));
    }
    let mut blocks = Vec::with_capacity(new.len());
    let mut users = 0_usize;
    // The foreign calls not answered yet: (id, name), in call order.
    let mut open: Vec<(String, String)> = Vec::new();
    for (index, message) in new.iter().enumerate() {
        let at = seen + index;
        let mut label = None;
        match message.role.as_str() {
            "user" => users += 1,
            "system" | "developer" => {}
            // Words the client wrote for the assistant (Aider's few-shot examples and
            // acknowledgements, a reply from another session) are entered as text, as
            // system messages are.
            "assistant" => {}
            "tool" => {
                let call = message.tool_call_id.as_deref().unwrap_or("");
                let Some(position) = open.iter().position(|(id, _)| id == call) else {
                    return Err(refusal::refuse(
                        400,
                        TOOL_RESULTS_MISMATCH,
                        format!(
                            "messages: a tool message answers the call {call:?}, which this gateway never sent (the session awaits no tool results)"
                        ),
                    ));
                };
                let (_, name) = open.remove(position);
                label = Some(format!("[tool result {name}]"));
            }
            "function" => {
                return Err(refusal::bad_transcript(
                    "messages: a \"function\" message the gateway did not answer cannot be entered yet (only new system, user and assistant messages continue a session)",
                ));
            }
            other => {
                return Err(refusal::bad_transcript(format!(
                    "messages: unknown role {other:?}"
                )));
            }
        }
        if let Some((id, name)) = open.first()
            && message.role != "tool"
        {
            return Err(refusal::bad_transcript(format!(
                "messages[{at}]: the tool call {id:?} ({name}) has no tool message answering it before the next message"
            )));
        }
        let calls = message
            .tool_calls
            .as_ref()
            .map(view::read_calls)
            .unwrap_or_default();
        let content = parts::blocks(message, at).map_err(refusal::bad_transcript)?;
        let empty = content.iter().all(|block| match block {
            ContentBlock::Text(text) => text.text.trim().is_empty(),
            _ => false,
        });
        if empty && calls.is_empty() && label.is_none() {
            return Err(refusal::bad_transcript(format!(
                "messages: the new {} message is empty",
                message.role
            )));
        }
        if let Some(label) = label {
            blocks.push(ContentBlock::text(label));
        }
        if !empty {
            blocks.extend(content);
        }
        for (id, name, arguments) in calls {
            blocks.push(ContentBlock::text(format!(
                "[tool call {name}] {arguments}"
            )));
            open.push((id, name));
        }
    }
    if let Some((id, name)) = open.first() {
        return Err(refusal::bad_transcript(format!(
            "messages: the tool call {id:?} ({name}) has no tool message answering it"
        )));
    }
    if users == 0 {
        return Err(refusal::bad_transcript(
            "the new messages hold no user message to answer",
        ));
    }
    user_message(blocks).ok_or_else(|| refusal::error(500, "INTERNAL", "a prompt is a user input"))
}

async fn completions(
    context: &ServerContext,
    admissions: &Arc<Admissions>,
    unanswered: &Unanswered,
    request: &RouteRequest,
) -> RouteReply {
    let body: ChatRequest = match serde_json::from_slice(&request.body) {
        Ok(body) => body,
        Err(error) => {
            return refusal::refuse(400, refusal::INVALID_REQUEST, format!("body: {error}"));
        }
    };
    if body.messages.is_empty() {
        return refusal::bad_transcript("messages: at least one message is required");
    }
    if let Some(problem) = body.fields_problem() {
        return refusal::refuse(400, refusal::INVALID_REQUEST, problem);
    }
    let model = match resolve_model(context, &body.model) {
        Ok(model) => model,
        Err(reply) => return reply,
    };
    let owner = Owner::of(&request.caller);
    let views = Views::new(Arc::clone(context.booted.host.sessions().store()), &owner);
    let identity = find::identity(request, &body);
    let hashes = view::chain(&body.messages);
    let lookup = Lookup {
        context,
        views: &views,
        owner: &owner,
        identity: &identity,
        messages: &body.messages,
        hashes: &hashes,
    };
    let (mut found, mut admitted) = match lookup.admitted(admissions, &request.gone).await {
        Ok(found) => found,
        Err(reply) => return reply,
    };
    // A new conversation found by its messages alone: the same transcript again after
    // its first turn failed goes back to that session ([`unanswered`]).
    let first_turn = (identity == Identity::Chain)
        .then(|| hashes.last().map(|last| Unanswered::key(&owner, last)))
        .flatten();
    if found.is_none()
        && let Some(key) = &first_turn
        && let Some((again, held)) = recall_first_turn(context, admissions, unanswered, key).await
    {
        found = Some(again);
        admitted = Some(held);
    }
    let fresh_or_recalled = found.as_ref().is_none_or(|found| found.seen == 0);
    let tools = match client_tools(&body) {
        Ok(tools) => tools,
        Err(reply) => return reply,
    };
    let seen = found.as_ref().map_or(0, |found| found.seen);
    let new = body.messages.get(seen..).unwrap_or_default();
    let awaiting = found
        .as_ref()
        .map(|found| found.handle.agent().awaiting_tools())
        .unwrap_or_default();
    let named = |reply: RouteReply, found: &Option<find::Found>| match found {
        Some(found) => reply.with_header(SESSION_HEADER, found.handle.session().id().as_str()),
        None => reply,
    };
    // GW-3: results the session already logged, sent again because the turn they
    // resumed failed (an SDK retrying a 429), run that turn again: the message it
    // answers is resent, with the results in place.
    let results_resent = match &found {
        Some(found) if awaiting.is_empty() => resent_results(found, new),
        _ => None,
    };
    let input = if let Some((message, original)) = results_resent {
        Input::Message {
            message,
            resends: Some(original),
        }
    } else if awaiting.is_empty() {
        // GW-3: the user message a turn that failed after the client's last answer
        // logged. Sent again before new ones, it is in the session already: only what
        // follows it is new. Sent again alone (an SDK's retry of a 429, a retry after
        // a store error or a timeout), it is resent, so the model reads it once.
        let failed = found
            .as_ref()
            .and_then(|found| resend::unanswered(found.handle.session(), Some(found.after_seq)));
        let entered = failed
            .as_ref()
            .map_or(0, |(original, _)| already_entered(original, new, seen));
        match new_message(&new[entered..], seen + entered) {
            Ok(message) => {
                let resends = failed
                    .filter(|(original, cut_short)| {
                        !cut_short && original.content == message.content
                    })
                    .and_then(|(original, _)| original.id);
                Input::Message { message, resends }
            }
            Err(reply) => return named(reply, &found),
        }
    } else {
        match tool_results(new, seen, &awaiting) {
            Ok((results, next)) => Input::Results(results, next),
            Err(reply) => return named(reply, &found),
        }
    };
    let (handle, marks, after_seq, prior) = match found {
        Some(found) => (found.handle, found.marks, found.after_seq, found.prior),
        None => {
            let mut meta = JsonObject::new();
            meta.insert(
                META_MODEL.to_owned(),
                serde_json::Value::from(model.as_str()),
            );
            meta.insert(
                META_ORIGIN.to_owned(),
                serde_json::Value::from(ORIGIN_GATEWAY),
            );
            if let Some(hash) = owner.hash() {
                meta.insert(META_OWNER.to_owned(), serde_json::Value::from(hash));
            }
            let handle = match context.agents.create_queued(meta).await {
                Ok(handle) => handle,
                Err(error) => return refusal::from_api(errors::app_error(&error)),
            };
            // Held before its key names it, so a request that finds it by the key
            // waits for this one's answer.
            admitted = admissions.try_admit(handle.session().id());
            if let Identity::Key(key) = &identity
                && let Err(error) = views.rebind_key(key, handle.session().id()).await
            {
                return refusal::error(503, error.code(), format!("the gateway's rows: {error}"));
            }
            (handle, Vec::new(), 0, Prior::Fresh)
        }
    };
    let session = handle.session().id().as_str().to_owned();
    let hidden = hidden_for(&body, &handle.agent().host().tool_names());
    let resent = |mut message: ccare_core::Message, resends: Option<String>| {
        if let Some(original) = &resends {
            resend::mark_resend(&mut message, original);
        }
        message
    };
    let (command, read_next) = match input {
        Input::Results(results, next) => (Command::ToolResults(results), next),
        Input::Message { message, resends } if tools.is_empty() => (
            Command::UserInput {
                message: resent(message, resends),
                options: None,
            },
            None,
        ),
        Input::Message { message, resends } => {
            // The kernel's message declaring the tools (names checked against the
            // host tools a gateway session offers), with the client's blocks.
            match crate::api::commands::message_with_tools(&handle, String::new(), tools, &hidden) {
                Ok(mut declared) => {
                    declared.content = message.content;
                    let command = Command::UserInput {
                        message: resent(declared, resends),
                        options: None,
                    };
                    (command, None)
                }
                Err(reply) => {
                    return refusal::from_api(reply).with_header(SESSION_HEADER, session);
                }
            }
        }
    };
    let recording = follow::Recording {
        views,
        hashes,
        marks,
        after_seq,
        prior,
        care: context.booted.care.clone(),
        admitted,
    };
    let credential = owner.credential().cloned();
    let turn = Turn {
        hidden,
        model,
        credential,
        command,
        read_next,
        recording,
    };
    let reply = run(handle, &body, turn, &request.gone).await;
    if fresh_or_recalled && let Some(key) = first_turn {
        // Refused before anything streamed with what a client retries (429, 5xx; not
        // the 400-class refusals retrying cannot fix): its retry comes back here.
        let retried = reply.status == 429 || reply.status >= 500;
        match SessionId::new(session.clone()) {
            Ok(id) if retried => unanswered.remember(key, id),
            _ => unanswered.forget(&key),
        }
    }
    reply.with_header(SESSION_HEADER, session)
}

/// The session a new conversation's failed first turn left for the transcript `key`,
/// held for this request, when it is remembered, still there and free; `None` starts a
/// new session as usual.
async fn recall_first_turn(
    context: &ServerContext,
    admissions: &Arc<Admissions>,
    unanswered: &Unanswered,
    key: &str,
) -> Option<(find::Found, Admitted)> {
    let id = unanswered.recall(key)?;
    let held = admissions.try_admit(&id)?;
    let handle = context
        .agents
        .get_or_reopen(&id, ccare_app::WhenBusy::Fail)
        .await
        .ok()?;
    let found = find::Found {
        handle,
        seen: 0,
        marks: Vec::new(),
        after_seq: 0,
        prior: Prior::Fresh,
    };
    Some((found, held))
}

/// How many times a request that found its session held by another request waits for
/// it and looks its session up again before it is `SESSION_BUSY`.
const MAX_ADMISSION_WAITS: usize = 3;

/// What a request's session is looked up by ([`find::existing`]).
struct Lookup<'a> {
    context: &'a ServerContext,
    views: &'a Views,
    owner: &'a Owner,
    identity: &'a Identity,
    messages: &'a [wire::ChatMessage],
    hashes: &'a [String],
}

impl Lookup<'_> {
    async fn find(&self) -> Result<Option<find::Found>, RouteReply> {
        find::existing(
            self.context,
            self.views,
            self.owner,
            self.identity,
            self.messages,
            self.hashes,
        )
        .await
    }

    /// The session the request continues, held for it ([`admission`]). A session
    /// another request holds is waited for (up to [`BUSY_GRACE`]) and the request is
    /// looked up again against the client view that request left: its messages may
    /// now be a regenerated answer (a fork) rather than new ones.
    async fn admitted(
        &self,
        admissions: &Arc<Admissions>,
        gone: &ccare_llm::CancellationToken,
    ) -> Result<(Option<find::Found>, Option<Admitted>), RouteReply> {
        let mut found = self.find().await?;
        for _ in 0..MAX_ADMISSION_WAITS {
            let Some(session) = found
                .as_ref()
                .map(|found| found.handle.session().id().clone())
            else {
                return Ok((None, None));
            };
            if let Some(admitted) = admissions.try_admit(&session) {
                return Ok((found, Some(admitted)));
            }
            drop(found);
            let Some(admitted) = admissions.admit(&session, BUSY_GRACE).await else {
                return Err(busy().with_header(SESSION_HEADER, session.as_str()));
            };
            // A client that left while it waited: nothing is looked up (or forked) for it.
            if gone.is_cancelled() {
                return Err(client_gone());
            }
            found = self.find().await?;
            if found
                .as_ref()
                .is_some_and(|found| found.handle.session().id() == admitted.session())
            {
                return Ok((found, Some(admitted)));
            }
        }
        Err(busy())
    }
}

/// A message for a session another request or driver is answering.
fn busy() -> RouteReply {
    refusal::error(
        409,
        "SESSION_BUSY",
        "the session is answering another request; retry when it is done",
    )
}

/// How long a message for a session that is still running a turn waits for the agent
/// to go idle before it is refused as `SESSION_BUSY`. A client gets its answer at the
/// turn's end, a moment before the agent is idle (its idle hooks still run), and sends
/// its next message at once; that message waits instead of failing. A request that
/// really overlaps another turn of its session is still refused, a second late.
const BUSY_GRACE: std::time::Duration = std::time::Duration::from_secs(1);

/// Whether `handle`'s agent is idle now or within [`BUSY_GRACE`].
async fn idle_soon(handle: &ccare_app::AgentHandle) -> bool {
    let agent = handle.agent();
    if !agent.is_busy() {
        return true;
    }
    tokio::time::timeout(BUSY_GRACE, agent.when_idle())
        .await
        .is_ok()
        && !agent.is_busy()
}

/// The host tools a gateway session neither offers upstream nor runs (GW-4): the
/// workspace tools, which would act on the server's folder, not the client's. The
/// gateway owns the rest (`context_status`, `context_rest`, `session_search`, the
/// ledger); a client's tool may take one of these names, and a client's tool named
/// like a gateway-owned one shadows it ([`hidden_for`]).
fn hidden_tools() -> BTreeSet<String> {
    ccare_agent::tools::WORKSPACE_TOOLS
        .iter()
        .map(|name| (*name).to_owned())
        .collect()
}

/// The host tools hidden for `body`'s request, of the host tools `host_tools`: the
/// workspace tools ([`hidden_tools`]); a gateway-owned tool the client declared a tool
/// of the same name for, which the client's shadows for the request (a finance
/// agent's `ledger` is its own, and refusing the name would break the client); and
/// with `tool_choice: required`, every host tool, since `required` means one of the
/// client's tools: the model cannot then be forced to call a gateway-owned one step
/// after step, and the answer goes back to the client with its calls.
fn hidden_for(body: &ChatRequest, host_tools: &[String]) -> BTreeSet<String> {
    let mut hidden = hidden_tools();
    if matches!(body.tool_choice(), Ok(Some(wire::ToolChoice::Required))) {
        hidden.extend(host_tools.iter().cloned());
        return hidden;
    }
    hidden.extend(
        body.tools
            .iter()
            .flatten()
            .map(|tool| &tool.function.name)
            .filter(|name| host_tools.contains(name))
            .cloned(),
    );
    hidden
}

/// The origin field of a session's metadata.
#[derive(serde::Deserialize)]
struct OriginMeta {
    #[serde(default)]
    origin: Option<String>,
}

/// Whether a session's metadata (`meta_json`) marks it as created by the gateway; an
/// unreadable one does not.
fn created_here(meta_json: &str) -> bool {
    serde_json::from_str::<OriginMeta>(meta_json)
        .is_ok_and(|meta| meta.origin.as_deref() == Some(ORIGIN_GATEWAY))
}

/// What the request gives the session.
enum Input {
    /// A user message: a new one, or a resend of the logged user message a failed turn
    /// answered ([`resend`]).
    Message {
        /// The message.
        message: ccare_core::Message,
        /// The id of the message it resends, when it is a resend.
        resends: Option<String>,
    },
    /// The results of the calls it awaits, and what the client wrote after them.
    Results(Vec<CallerResult>, Option<ccare_core::Message>),
}

/// Our code (never sent) of a request whose client went away before its answer.
const CLIENT_GONE: &str = "CLIENT_GONE";

/// The reply to a request whose client went away. Nobody reads it; what matters is
/// that the request stops (dropping its answer's receiver tells the follower).
fn client_gone() -> RouteReply {
    refusal::error(
        499,
        CLIENT_GONE,
        "the client closed the connection before its answer",
    )
}

/// What a request's turn runs with.
struct Turn {
    /// The host tools hidden for it.
    hidden: BTreeSet<String>,
    /// Its route.
    model: String,
    /// The client's own key, or `None`: the configured key.
    credential: Option<ccare_llm::ApiCredential>,
    /// What it sends the session.
    command: Command,
    /// With tool results: what the client wrote after them, which the resumed turn
    /// reads at its next step.
    read_next: Option<ccare_core::Message>,
    /// What its answer records.
    recording: Recording,
}

/// Runs the turn and answers it. A client that went away (`gone`) before the command
/// is sent gets nothing started; once the turn is followed, the request stops waiting
/// for its answer and the follower cancels the turn (`follow::stop_for_gone_client`).
async fn run(
    handle: ccare_app::AgentHandle,
    body: &ChatRequest,
    turn: Turn,
    gone: &ccare_llm::CancellationToken,
) -> RouteReply {
    let Turn {
        hidden,
        model,
        credential,
        command,
        read_next,
        recording,
    } = turn;
    // Results for an awaiting step wait for its driver to let go (`tool_results`). A
    // message for a session still finishing a turn waits for it a moment first.
    if matches!(command, Command::UserInput { .. }) && !idle_soon(&handle).await {
        return busy();
    }
    let current = handle.agent().options();
    let mut wanted = current.clone();
    wanted.model = model;
    wanted.credential = credential;
    wanted.hidden_tools = hidden;
    // The client's sampling fields for this request; those it leaves out fall back to
    // the route's defaults, not to what an earlier request asked for.
    wanted.temperature = body.temperature;
    wanted.max_tokens = body.output_limit();
    wanted.reasoning_effort.clone_from(&body.reasoning_effort);
    wanted.request_fields = body.passed_fields();
    let options = (wanted != current).then_some(wanted);
    let command = match command {
        Command::UserInput { message, .. } => Command::UserInput { message, options },
        other => {
            if let Some(options) = options
                && let Err(error) = handle.agent().send(Command::SetOptions(options)).await
            {
                return refusal::from_api(errors::command_error(&error));
            }
            other
        }
    };
    // A client that left while the request waited (for the agent to go idle) gets
    // nothing started for it.
    if gone.is_cancelled() {
        return client_gone();
    }
    let after = handle.session().head().checked_sub(1);
    let stream = handle.agent().subscribe_from(after);
    // Queued (durably) before the results resume the turn, for the step after them:
    // the model reads the results, then the client's words, as the client sent them.
    if let Some(message) = read_next
        && let Err(error) = handle.agent().send(Command::Inject(message)).await
    {
        return refusal::from_api(errors::command_error(&error));
    }
    if let Err(error) = handle.agent().send(command).await {
        return refusal::from_api(errors::command_error(&error));
    }
    let (sender, mut items) = mpsc::unbounded_channel();
    tokio::spawn(follow::follow(handle, stream, sender, recording));
    let answering = Answering {
        model: body.model.clone(),
        created: now_secs(),
        include_usage: body
            .stream_options
            .as_ref()
            .and_then(|options| options.include_usage)
            .unwrap_or(false),
    };
    if body.stream != Some(true) {
        return tokio::select! {
            reply = answer::whole(&answering, items) => reply,
            () = gone.cancelled() => client_gone(),
        };
    }
    // Wait for the first piece: a turn refused before anything streamed is answered
    // with its error status, not a 200 stream.
    let mut compacted = Vec::new();
    let first = loop {
        let item = tokio::select! {
            item = items.recv() => item,
            () = gone.cancelled() => return client_gone(),
        };
        match item {
            Some(Item::Compacted(ids)) => compacted.extend(ids),
            other => break other,
        }
    };
    let reply = match first {
        None => refusal::error(500, "TURN_LOST", "the turn's follower stopped"),
        Some(Item::End(outcome)) => match &outcome.failure {
            Some(failure) => answer::failure_reply(failure),
            None => answer::streamed(answering, Item::End(outcome), items),
        },
        Some(first) => answer::streamed(answering, first, items),
    };
    answer::with_compacted(reply, &compacted)
}
