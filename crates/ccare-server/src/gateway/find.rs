//! Which session a chat-completions request belongs to (GW-2), and which of its
//! messages the session has not seen (GW-3).
//!
//! In order: header `x-ccare-session` (a session id, which must exist); headers
//! `x-session-id`, `x-session-affinity`, then body `prompt_cache_key`, then `user`
//! (a client key, bound to the session the gateway creates for it); else the chain
//! hash over the message list: the session whose client view the request's messages
//! extend, or the session whose fork point (a turn mark) it passes. A known session
//! whose view the request does not extend (an edited or regenerated message) is
//! forked at the last turn end inside the shared prefix (`Sessions::fork`, as
//! `POST /api/sessions/{id}/fork`) and the fork is continued; a divergence before the
//! first answer starts a new session. A client key is rebound to the fork. A key
//! whose session the request does not continue (several conversations share it: an
//! end user's id in `user`, a `prompt_cache_key` per prompt template) falls back to
//! the chain hash, and is rebound to the session found there.
//!
//! A session is continued only for its owner (`owner`, GW-1 pass-through): the rows
//! it is found by are the owner's, and its metadata must name the same owner.

use ccare_agent::routes::{RouteReply, RouteRequest};
use ccare_app::{AgentHandle, WhenBusy};
use ccare_core::SessionId;

use crate::ServerContext;
use crate::api::errors;
use crate::gateway::owner::Owner;
use crate::gateway::refusal;
use crate::gateway::view::{ClientView, Prior, TurnMark, Views};
use crate::gateway::wire::{ChatMessage, ChatRequest};

/// The header naming the session, on requests and every response (GW-7).
pub const SESSION_HEADER: &str = "x-ccare-session";
/// Our code of a request that rewrites what a known session's client saw and cannot
/// be forked (kept for clients that match on it).
pub const TRANSCRIPT_DIVERGED: &str = "TRANSCRIPT_DIVERGED";

/// A session the request continues.
#[derive(Debug)]
pub(crate) struct Found {
    /// Its actor.
    pub(crate) handle: AgentHandle,
    /// How many of the request's messages its client view holds.
    pub(crate) seen: usize,
    /// The view's fork points up to `seen`.
    pub(crate) marks: Vec<TurnMark>,
    /// The last seq the client's answer saw (maintenance after it is reported, GW-7).
    pub(crate) after_seq: u64,
    /// What was read of its rows, so recording the next view reads nothing.
    pub(crate) prior: Prior,
}

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

/// The session found (its actor started; a fork when the request diverged) and how
/// many of the request's messages its client view already holds; `None`: a new
/// session is needed.
pub(crate) async fn existing(
    context: &ServerContext,
    views: &Views,
    owner: &Owner,
    identity: &Identity,
    messages: &[ChatMessage],
    hashes: &[String],
) -> Result<Option<Found>, RouteReply> {
    let store_error = |error: ccare_store::StoreError| {
        refusal::error(503, error.code(), format!("the gateway's rows: {error}"))
    };
    // The view and the session's record (its owner) are read at once.
    let read = |id: SessionId| async move {
        let store = context.booted.host.sessions().store();
        let (stored, record) = futures_util::future::try_join(views.view(&id), store.session(&id))
            .await
            .map_err(store_error)?;
        Ok::<_, RouteReply>((id, stored, record))
    };
    // The session the message chain names, with the version of the chain row it was
    // found by (none when found by a fork point).
    let by_chain = || async {
        // The longest known prefix that is not the whole request (the last message is
        // the new one).
        for (seen, hash) in answer_prefixes(messages, hashes) {
            if let Some(row) = views.session_for_chain(hash).await.map_err(store_error)? {
                let (id, stored, record) = read(row.session).await?;
                if stored.view.hashes.len() == seen && stored.view.last() == Some(hash.as_str()) {
                    return Ok(Some(((id, stored, record), Some(row.version))));
                }
            }
        }
        // No view ends there: an edited or regenerated message after a turn end of a
        // known session (its fork point).
        for (_, hash) in answer_prefixes(messages, hashes) {
            if let Some(id) = views.session_for_mark(hash).await.map_err(store_error)? {
                return Ok(Some((read(id).await?, None)));
            }
        }
        Ok::<_, RouteReply>(None)
    };
    // The version of the chain row the session was found by, when it was.
    let mut chain = None;
    // Whether the request's key is to name the session found (it named another).
    let mut rebind = false;
    let (id, stored, record) = match identity {
        Identity::Session(text) => {
            let id = SessionId::new(text.clone()).map_err(|error| {
                refusal::refuse(400, errors::INVALID_SESSION_ID, error.to_string())
            })?;
            read(id).await?
        }
        Identity::Key(key) => {
            let keyed = match views.session_for_key(key).await.map_err(store_error)? {
                Some(id) => Some(read(id).await?),
                None => None,
            };
            match keyed {
                Some(keyed) if continues(&keyed.1.view, hashes) => keyed,
                // A key several conversations share (an end user's id in `user`, a
                // `prompt_cache_key` per prompt template, OpenAI's advice for it)
                // names the last one used: the chain finds the one this request
                // continues, and the key names it from now on.
                keyed => match by_chain().await? {
                    Some((found, version)) => {
                        chain = version;
                        rebind = keyed.as_ref().is_none_or(|keyed| keyed.0 != found.0);
                        found
                    }
                    None => match keyed {
                        Some(keyed) => keyed,
                        None => return Ok(None),
                    },
                },
            }
        }
        Identity::Chain => match by_chain().await? {
            Some((found, version)) => {
                chain = version;
                found
            }
            None => return Ok(None),
        },
    };
    // GW-1 tenancy: only the owner continues a session. Another owner's session is
    // not found: an explicit id answers exactly as an unknown one, anything else
    // starts a new session.
    let owned = record.is_some_and(|record| owner.owns(&record.meta_json));
    if !owned {
        return match identity {
            Identity::Session(_) => Err(refusal::from_api(errors::session_error(
                &ccare_session::SessionError::UnknownSession(id),
            ))),
            Identity::Key(_) | Identity::Chain => Ok(None),
        };
    }
    if rebind && let Identity::Key(key) = identity {
        views.rebind_key(key, &id).await.map_err(store_error)?;
    }
    let prior = Prior::Read {
        version: stored.version,
        last: stored.view.last().map(str::to_owned),
        chain,
    };
    let view = stored.view;
    let (id, seen, marks, after_seq, prior) = match extends(&view, hashes) {
        Some(seen) => (id, seen, view.marks, view.head, prior),
        None => match fork_point(&view, hashes) {
            Some(mark) => {
                let sessions = context.booted.host.sessions();
                let forked = sessions
                    .fork(&id, Some(mark.seq), None)
                    .await
                    .map_err(|error| {
                        refusal::refuse(
                            409,
                            TRANSCRIPT_DIVERGED,
                            format!(
                                "the messages diverge from session {}'s conversation after message {} and the fork there failed: {error}",
                                id.as_str(),
                                mark.messages
                            ),
                        )
                        .with_header(SESSION_HEADER, id.as_str())
                    })?;
                let fork = forked.id().clone();
                drop(forked);
                if let Identity::Key(key) = identity {
                    views.rebind_key(key, &fork).await.map_err(store_error)?;
                }
                let marks = view
                    .marks
                    .iter()
                    .copied()
                    .filter(|known| known.messages <= mark.messages)
                    .collect();
                // The fork is a new session: it has no view row yet.
                (fork, mark.messages, marks, mark.seq, Prior::Fresh)
            }
            // Diverged before the first answer: nothing to keep.
            None => return Ok(None),
        },
    };
    let handle = context
        .agents
        .get_or_reopen(&id, WhenBusy::Fail)
        .await
        .map_err(|error| refusal::from_api(errors::app_error(&error)))?;
    Ok(Some(Found {
        handle,
        seen,
        marks,
        after_seq,
        prior,
    }))
}

/// Where a request that diverges from `view` forks it: the last turn mark inside the
/// prefix they share, leaving at least one new message.
fn fork_point(view: &ClientView, hashes: &[String]) -> Option<TurnMark> {
    let shared = view
        .hashes
        .iter()
        .zip(hashes)
        .take_while(|(known, sent)| known == sent)
        .count();
    view.marks
        .iter()
        .copied()
        .filter(|mark| mark.messages <= shared && mark.messages < hashes.len())
        .max_by_key(|mark| mark.messages)
}

/// The request's prefixes a client view can end with, longest first, as (how many
/// messages, the chain hash after them): a view ends with the gateway's answer, so
/// only prefixes ending with an assistant message, and never the whole request (its
/// last message is the new one). One lookup for a plain continuation, none for a new
/// conversation.
fn answer_prefixes<'a>(
    messages: &'a [ChatMessage],
    hashes: &'a [String],
) -> impl Iterator<Item = (usize, &'a String)> {
    (1..hashes.len()).rev().filter_map(move |seen| {
        let ends_with_answer = messages
            .get(seen - 1)
            .is_some_and(|message| message.role == "assistant");
        hashes
            .get(seen - 1)
            .filter(|_| ends_with_answer)
            .map(|hash| (seen, hash))
    })
}

/// Whether the request continues `view`: extends it, or forks it at a turn end.
fn continues(view: &ClientView, hashes: &[String]) -> bool {
    extends(view, hashes).is_some() || fork_point(view, hashes).is_some()
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
