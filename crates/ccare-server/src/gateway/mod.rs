//! The OpenAI-compatible gateway (server.md §3, GW-1..GW-7), first landing:
//! `GET /v1/models` and `POST /v1/chat/completions` (streaming and not) for plain
//! conversations, as routes in the host's route table (owner `server`).
//!
//! A request is mapped to a session (GW-2, `find`), only the messages the session has
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
//! Not yet: client tools (GW-4), forks of edited transcripts, pass-through keys and
//! the `[gateway]` config, `x-ccare-compacted`.

mod answer;
mod find;
mod follow;
pub mod refusal;
mod view;
pub mod wire;

use std::sync::Arc;

use ccare_agent::Command;
use ccare_agent::routes::{
    Method, RouteDoc, RouteError, RouteReply, RouteRequest, RouteSpec, Routes,
};
use ccare_core::{ContentBlock, JsonObject};
use tokio::sync::mpsc;

use crate::ServerContext;
use crate::api::errors;
use crate::api::sessions::META_MODEL;

pub use answer::DONE;
pub use find::{SESSION_HEADER, TRANSCRIPT_DIVERGED};
pub use refusal::{BAD_TRANSCRIPT, MODEL_NOT_FOUND, SHOULD_RETRY};
pub use view::DOMAIN;

use answer::Answering;
use find::Identity;
use follow::{Item, Recording};
use view::Views;
use wire::{ChatRequest, ModelEntry, ModelList};

/// The session metadata key marking a session the gateway created.
pub const META_ORIGIN: &str = "origin";

/// Registers the gateway's routes (owner `server`).
pub fn register(routes: &Routes, context: &ServerContext) -> Result<(), RouteError> {
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
    let chat = RouteSpec::new(
        path("/v1/chat/completions")?,
        Arc::new(move |request: RouteRequest| {
            let context = chat_context.clone();
            async move { completions(&context, &request).await }
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
    routes.register(crate::api::OWNER, models)?;
    routes.register(crate::api::OWNER, chat)?;
    Ok(())
}

/// An exact route path, with the route table's error.
fn path(pattern: &str) -> Result<ccare_agent::routes::RoutePath, RouteError> {
    Ok(ccare_agent::routes::RoutePath::exact(pattern)?)
}

fn models(context: &ServerContext) -> RouteReply {
    let data = context
        .booted
        .host
        .llm()
        .routes()
        .into_iter()
        .map(|route| ModelEntry {
            owned_by: route
                .name
                .split_once('/')
                .map_or_else(String::new, |(provider, _)| provider.to_owned()),
            id: route.name,
            object: "model",
            created: 0,
        })
        .collect();
    RouteReply::json(
        200,
        &ModelList {
            object: "list",
            data,
        },
    )
}

/// The route `model` names: `<provider>/<model>` as configured, or a bare model name
/// exactly one configured route serves.
fn resolve_model(context: &ServerContext, model: &str) -> Result<String, RouteReply> {
    let llm = context.booted.host.llm();
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

/// The message the session is given: one text block per new client message (system
/// messages the client added included), or a 400 naming what cannot be entered yet.
fn new_message(new: &[wire::ChatMessage]) -> Result<ccare_core::Message, RouteReply> {
    if new.is_empty() {
        return Err(refusal::bad_transcript(
            "the messages add nothing the session has not answered: the last message must be a new user message",
        ));
    }
    let mut blocks = Vec::with_capacity(new.len());
    let mut users = 0_usize;
    for message in new {
        match message.role.as_str() {
            "user" => users += 1,
            "system" | "developer" => {}
            "assistant" | "tool" | "function" => {
                return Err(refusal::bad_transcript(format!(
                    "messages: a {:?} message the gateway did not answer cannot be entered yet (only new system and user messages continue a session)",
                    message.role
                )));
            }
            other => {
                return Err(refusal::bad_transcript(format!(
                    "messages: unknown role {other:?}"
                )));
            }
        }
        if message.has_non_text_part() {
            return Err(refusal::bad_transcript(
                "messages: only text content parts are supported yet",
            ));
        }
        let text = message.text();
        if text.trim().is_empty() {
            return Err(refusal::bad_transcript(format!(
                "messages: the new {} message is empty",
                message.role
            )));
        }
        blocks.push(ContentBlock::text(text));
    }
    if users == 0 {
        return Err(refusal::bad_transcript(
            "the new messages hold no user message to answer",
        ));
    }
    // The kernel's user message (a fresh id, source `user`), with the client's blocks.
    let Command::UserInput { mut message, .. } = Command::prompt("") else {
        return Err(refusal::error(500, "INTERNAL", "a prompt is a user input"));
    };
    message.content = blocks;
    Ok(message)
}

async fn completions(context: &ServerContext, request: &RouteRequest) -> RouteReply {
    let body: ChatRequest = match serde_json::from_slice(&request.body) {
        Ok(body) => body,
        Err(error) => {
            return refusal::refuse(400, refusal::INVALID_REQUEST, format!("body: {error}"));
        }
    };
    if body.messages.is_empty() {
        return refusal::bad_transcript("messages: at least one message is required");
    }
    let model = match resolve_model(context, &body.model) {
        Ok(model) => model,
        Err(reply) => return reply,
    };
    let views = Views::new(Arc::clone(context.booted.host.sessions().store()));
    let identity = find::identity(request, &body);
    let hashes = view::chain(&body.messages);
    let found = match find::existing(context, &views, &identity, &body.messages, &hashes).await {
        Ok(found) => found,
        Err(reply) => return reply,
    };
    let seen = found.as_ref().map_or(0, |(_, seen)| *seen);
    let message = match new_message(body.messages.get(seen..).unwrap_or_default()) {
        Ok(message) => message,
        Err(reply) => {
            return match &found {
                Some((handle, _)) => {
                    reply.with_header(SESSION_HEADER, handle.session().id().as_str())
                }
                None => reply,
            };
        }
    };
    let handle = match found {
        Some((handle, _)) => handle,
        None => {
            let mut meta = JsonObject::new();
            meta.insert(
                META_MODEL.to_owned(),
                serde_json::Value::from(model.as_str()),
            );
            meta.insert(META_ORIGIN.to_owned(), serde_json::Value::from("gateway"));
            let handle = match context.agents.create(meta).await {
                Ok(handle) => handle,
                Err(error) => return refusal::from_api(errors::app_error(&error)),
            };
            if let Identity::Key(key) = &identity
                && let Err(error) = views.bind_key(key, handle.session().id()).await
            {
                return refusal::error(503, error.code(), format!("the gateway's rows: {error}"));
            }
            handle
        }
    };
    let session = handle.session().id().as_str().to_owned();
    let reply = run(handle, &body, model, message, views, hashes).await;
    reply.with_header(SESSION_HEADER, session)
}

/// Runs the turn and answers it.
async fn run(
    handle: ccare_app::AgentHandle,
    body: &ChatRequest,
    model: String,
    message: ccare_core::Message,
    views: Views,
    hashes: Vec<String>,
) -> RouteReply {
    if handle.agent().is_busy() {
        return refusal::error(
            409,
            "SESSION_BUSY",
            "the session is answering another request; retry when it is done",
        );
    }
    let mut options = handle.agent().options();
    let options = (options.model != model).then(|| {
        options.model = model;
        options
    });
    let after = handle.session().head().checked_sub(1);
    let stream = handle.agent().subscribe_from(after);
    if let Err(error) = handle
        .agent()
        .send(Command::UserInput { message, options })
        .await
    {
        return refusal::from_api(errors::command_error(&error));
    }
    let (sender, mut items) = mpsc::unbounded_channel();
    tokio::spawn(follow::follow(
        handle,
        stream,
        sender,
        Recording { views, hashes },
    ));
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
        return answer::whole(&answering, items).await;
    }
    // Wait for the first piece: a turn refused before anything streamed is answered
    // with its error status, not a 200 stream.
    match items.recv().await {
        None => refusal::error(500, "TURN_LOST", "the turn's follower stopped"),
        Some(Item::End(outcome)) => match &outcome.failure {
            Some(failure) => answer::failure_reply(failure),
            None => answer::streamed(answering, Item::End(outcome), items),
        },
        Some(first) => answer::streamed(answering, first, items),
    }
}
