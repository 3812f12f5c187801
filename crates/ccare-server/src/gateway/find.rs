//! Which session a chat-completions request belongs to (GW-2), and which of its
//! messages the session has not seen (GW-3).
//!
//! In order: header `x-ccare-session` (a session id, which must exist); headers
//! `x-session-id`, `x-session-affinity`, then body `prompt_cache_key`, then `user`
//! (a client key, bound to the session the gateway creates for it); else the chain
//! hash over the message list: the session whose client view the request's messages
//! extend. A known session whose view the request does not extend (an edited or
//! regenerated message) is refused for now (409 `TRANSCRIPT_DIVERGED`); forks land
//! with the next step.

use ccare_agent::routes::{RouteReply, RouteRequest};
use ccare_app::{AgentHandle, WhenBusy};
use ccare_core::SessionId;

use crate::ServerContext;
use crate::api::errors;
use crate::gateway::refusal;
use crate::gateway::view::{ClientView, Views};
use crate::gateway::wire::{ChatMessage, ChatRequest};

/// The header naming the session, on requests and every response (GW-7).
pub const SESSION_HEADER: &str = "x-ccare-session";
/// Our code of a request that rewrites what a known session's client saw.
pub const TRANSCRIPT_DIVERGED: &str = "TRANSCRIPT_DIVERGED";

/// How the request named its session.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Identity {
    /// `x-ccare-session`.
    Session(String),
    /// A client key (header or body).
    Key(String),
    /// Nothing: the chain hash decides.
    Chain,
}

/// The request's identity, by GW-2's order.
pub(crate) fn identity(request: &RouteRequest, body: &ChatRequest) -> Identity {
    let header = |name: &str| {
        request
            .header(name)
            .map(str::trim)
            .filter(|value| !value.is_empty())
            .map(str::to_owned)
    };
    if let Some(id) = header(SESSION_HEADER) {
        return Identity::Session(id);
    }
    header("x-session-id")
        .or_else(|| header("x-session-affinity"))
        .or_else(|| body.prompt_cache_key.clone().filter(|key| !key.is_empty()))
        .or_else(|| body.user.clone().filter(|key| !key.is_empty()))
        .map_or(Identity::Chain, Identity::Key)
}

/// The session found (its actor started) and how many of the request's messages its
/// client view already holds; `None`: a new session is needed.
pub(crate) async fn existing(
    context: &ServerContext,
    views: &Views,
    identity: &Identity,
    messages: &[ChatMessage],
    hashes: &[String],
) -> Result<Option<(AgentHandle, usize)>, RouteReply> {
    let store_error = |error: ccare_store::StoreError| {
        refusal::error(503, error.code(), format!("the gateway's rows: {error}"))
    };
    let (id, view) = match identity {
        Identity::Session(text) => {
            let id = SessionId::new(text.clone()).map_err(|error| {
                refusal::refuse(400, errors::INVALID_SESSION_ID, error.to_string())
            })?;
            let view = views.view(&id).await.map_err(store_error)?;
            (id, view)
        }
        Identity::Key(key) => match views.session_for_key(key).await.map_err(store_error)? {
            Some(id) => {
                let view = views.view(&id).await.map_err(store_error)?;
                (id, view)
            }
            None => return Ok(None),
        },
        Identity::Chain => {
            let mut found = None;
            // The longest known prefix that is not the whole request (the last
            // message is the new one). A client view ends with the gateway's answer,
            // so only prefixes ending with an assistant message are looked up: one
            // read for a plain continuation, none for a new conversation.
            for seen in (1..hashes.len()).rev() {
                let ends_with_answer = messages
                    .get(seen - 1)
                    .is_some_and(|message| message.role == "assistant");
                let Some(hash) = hashes.get(seen - 1).filter(|_| ends_with_answer) else {
                    continue;
                };
                if let Some(id) = views.session_for_chain(hash).await.map_err(store_error)? {
                    let view = views.view(&id).await.map_err(store_error)?;
                    if view.hashes.len() == seen && view.last() == Some(hash.as_str()) {
                        found = Some((id, view));
                        break;
                    }
                }
            }
            match found {
                Some(found) => found,
                None => return Ok(None),
            }
        }
    };
    let seen = extends(&view, hashes).ok_or_else(|| {
        refusal::refuse(
            409,
            TRANSCRIPT_DIVERGED,
            format!(
                "the messages do not extend session {}'s conversation ({} messages known): an edited or regenerated message needs a fork, which this gateway does not make yet; drop the session key to start a new session",
                id.as_str(),
                view.hashes.len()
            ),
        )
        .with_header(SESSION_HEADER, id.as_str())
    })?;
    let handle = context
        .agents
        .get_or_start(&id, WhenBusy::Fail)
        .await
        .map_err(|error| refusal::from_api(errors::app_error(&error)))?;
    Ok(Some((handle, seen)))
}

/// How many of the request's messages `view` holds, when the request extends it.
fn extends(view: &ClientView, hashes: &[String]) -> Option<usize> {
    let seen = view.hashes.len();
    match view.last() {
        None => Some(0),
        Some(last)
            if seen < hashes.len() && hashes.get(seen - 1).map(String::as_str) == Some(last) =>
        {
            Some(seen)
        }
        Some(_) => None,
    }
}
