//! API-1: the stored sessions — list (paged, newest first), create, one session with its
//! live state, export (the JSONL of `ccare sessions export`, byte for byte) and fork.
//!
//! Reads need no lease (they go through the session engine's read-only `load` /
//! `export`, which flush a session this process drives first), so they work while a
//! turn runs here or in another process. Creating goes through the `Agents` registry
//! like every write.

use std::sync::Arc;

use ccare_agent::routes::{Method, RouteDoc, RouteError, RouteReply, RouteRequest, RouteSpec};
use ccare_core::SessionId;
use ccare_session::{Session, SessionHeader};
use ccare_store::SessionQuery;
use serde::Deserialize;

use crate::ServerContext;
use crate::api::errors::{self, INVALID_QUERY, UNKNOWN_MODEL, UNKNOWN_PROFILE};
use crate::api::types::{
    CreateSession, DEFAULT_PAGE, ForkBody, LeaseHolderInfo, LiveState, MAX_PAGE, PageQuery,
    SessionDetail, SessionPage, SessionSummary,
};
use crate::api::{body_or_default, handler, path};

/// The media type of an export.
pub const NDJSON: &str = "application/x-ndjson";

/// The session metadata key that holds the model a session was created with.
pub const META_MODEL: &str = "model";

/// The routes of API-1.
pub(super) fn routes(context: &ServerContext) -> Result<Vec<RouteSpec>, RouteError> {
    Ok(vec![
        RouteSpec::new(
            path("/api/sessions")?,
            handler(context, |context, request| async move {
                match request.method {
                    Method::Post => create(&context, &request).await,
                    _ => list(&context, &request).await,
                }
            }),
        )
        .method(
            Method::Get,
            RouteDoc::new("List the stored sessions, newest first, one page at a time")
                .response::<SessionPage>()
                .query("limit", "Sessions per page, 1..=200 (default 50)")
                .query("offset", "Sessions to skip (default 0)"),
        )
        .method(
            Method::Post,
            RouteDoc::new("Create a session (201 with its record)")
                .request::<CreateSession>()
                .response::<SessionSummary>(),
        ),
        RouteSpec::new(
            path("/api/sessions/{id}")?,
            handler(context, |context, request| async move {
                detail(&context, &request).await
            }),
        )
        .method(
            Method::Get,
            RouteDoc::new("A session's record and live state").response::<SessionDetail>(),
        ),
        RouteSpec::new(
            path("/api/sessions/{id}/export")?,
            handler(context, |context, request| async move {
                export(&context, &request).await
            }),
        )
        .method(
            Method::Get,
            RouteDoc::new(
                "The session as JSONL, byte for byte what `ccare sessions export` writes",
            )
            .response_media(NDJSON),
        ),
        RouteSpec::new(
            path("/api/sessions/{id}/fork")?,
            handler(context, |context, request| async move {
                fork(&context, &request).await
            }),
        )
        .method(
            Method::Post,
            RouteDoc::new("Fork the session after `atSeq` into a new one (201 with its record)")
                .request::<ForkBody>()
                .response::<SessionSummary>(),
        ),
    ])
}

/// The summary of an open session.
pub(crate) fn summary_of(header: &SessionHeader, head: u64) -> SessionSummary {
    SessionSummary {
        id: header.id.as_str().to_owned(),
        created_at: ccare_core::rfc3339_utc(header.created_ms),
        created_ms: header.created_ms,
        events: head,
        parent: header
            .parent
            .as_ref()
            .map(|parent| parent.as_str().to_owned()),
        seed_length: header.seed_length,
    }
}

/// A page's bounds, or a 400 `invalid-query` naming the parameter.
fn page_bounds(query: &PageQuery) -> Result<(u64, u64), RouteReply> {
    let number = |name: &str, value: &Option<String>, default: u64, range: (u64, u64)| {
        let Some(text) = value else {
            return Ok(default);
        };
        match text.parse::<u64>() {
            Ok(number) if (range.0..=range.1).contains(&number) => Ok(number),
            _ => Err(RouteReply::error(
                400,
                INVALID_QUERY,
                format!(
                    "{name}: expected an integer in {}..={}, got {text:?}",
                    range.0, range.1
                ),
            )),
        }
    };
    let limit = number("limit", &query.limit, DEFAULT_PAGE, (1, MAX_PAGE))?;
    let offset = number("offset", &query.offset, 0, (0, u64::MAX))?;
    Ok((limit, offset))
}

async fn list(context: &ServerContext, request: &RouteRequest) -> RouteReply {
    let query = match request.query::<PageQuery>() {
        Ok(query) => query,
        Err(reply) => return reply,
    };
    let (limit, offset) = match page_bounds(&query) {
        Ok(bounds) => bounds,
        Err(reply) => return reply,
    };
    let records = match context
        .booted
        .host
        .sessions()
        .list(SessionQuery::default())
        .await
    {
        Ok(records) => records,
        Err(error) => return errors::session_error(&error),
    };
    let total = u64::try_from(records.len()).unwrap_or(u64::MAX);
    let sessions: Vec<SessionSummary> = records
        .iter()
        .skip(usize::try_from(offset).unwrap_or(usize::MAX))
        .take(usize::try_from(limit).unwrap_or(usize::MAX))
        .map(SessionSummary::of)
        .collect();
    let end = offset.saturating_add(limit);
    let page = SessionPage {
        sessions,
        total,
        offset,
        next_offset: (end < total).then_some(end),
    };
    RouteReply::json(200, &page)
}

async fn create(context: &ServerContext, request: &RouteRequest) -> RouteReply {
    let body: CreateSession = match body_or_default(request) {
        Ok(body) => body,
        Err(reply) => return reply,
    };
    let served = &context.booted.profile.id;
    if let Some(profile) = &body.profile
        && profile != served
    {
        return RouteReply::error(
            400,
            UNKNOWN_PROFILE,
            format!(
                "profile: this server serves only the {served:?} profile, not {profile:?} (start `ccare serve --profile {profile}` to serve it)"
            ),
        );
    }
    let mut meta = ccare_core::JsonObject::new();
    if let Some(model) = &body.model {
        if let Err(failure) = context.booted.host.llm().route(model) {
            return RouteReply::error(
                400,
                UNKNOWN_MODEL,
                format!("model: {model:?}: {}", failure.message),
            );
        }
        meta.insert(
            META_MODEL.to_owned(),
            serde_json::Value::from(model.as_str()),
        );
    }
    let handle = match context.agents.create(meta).await {
        Ok(handle) => handle,
        Err(error) => return errors::app_error(&error),
    };
    let summary = summary_of(handle.session().header(), handle.session().head());
    // The actor stops when idle; nothing runs until a command comes.
    drop(handle);
    RouteReply::json(201, &summary)
}

/// A session's metadata as the API reads it.
#[derive(Debug, Default, Deserialize)]
struct SessionMeta {
    #[serde(default)]
    model: Option<String>,
}

/// The model `session` was created with, when `POST /api/sessions` chose one.
pub(crate) fn session_model(session: &Session) -> Option<String> {
    serde_json::from_str::<SessionMeta>(&session.header().meta_json)
        .ok()
        .and_then(|meta| meta.model)
}

async fn detail(context: &ServerContext, request: &RouteRequest) -> RouteReply {
    let id = match request.param("id").and_then(errors::session_id) {
        Ok(id) => id,
        Err(reply) => return reply,
    };
    let sessions = context.booted.host.sessions();
    let (summary, state, open_calls, active, fence) = match context.agents.running(&id).await {
        Some(handle) => {
            let session = handle.session();
            let fence = session.fence().map(|error| error.to_string());
            let open_calls = session.with_log(|log| log.state().awaiting_calls());
            let state = if !open_calls.is_empty() {
                LiveState::AwaitingTools
            } else if handle.agent().is_busy() {
                LiveState::Running
            } else {
                LiveState::Idle
            };
            // A fenced session's memory holds events the store refused: only the
            // durable ones are the session's.
            let summary = summary_of(session.header(), session.kept_head());
            (summary, state, open_calls, true, fence)
        }
        None => {
            let loaded = match sessions.load(&id).await {
                Ok(loaded) => loaded,
                Err(error) => return errors::session_error(&error),
            };
            let open_calls = loaded.log.state().awaiting_calls();
            let state = if !open_calls.is_empty() {
                LiveState::AwaitingTools
            } else if loaded.log.state().open_turn.is_some() {
                LiveState::Running
            } else {
                LiveState::Idle
            };
            let summary = summary_of(&loaded.header, loaded.log.head());
            (summary, state, open_calls, false, None)
        }
    };
    let held_by = if active {
        None
    } else {
        held_by(context, &id).await
    };
    let detail = SessionDetail {
        head_seq: summary.events.checked_sub(1),
        session: summary,
        state,
        open_calls,
        active,
        held_by,
        fence,
    };
    RouteReply::json(200, &detail)
}

/// The live holder of `id`'s lease, if any (an unreadable lease reads as none: this
/// is information, the lease itself is checked when a command starts an actor).
async fn held_by(context: &ServerContext, id: &SessionId) -> Option<LeaseHolderInfo> {
    let store = context.booted.host.sessions().store();
    let lease = store.lease(id).await.ok()??;
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .ok()
        .and_then(|elapsed| i64::try_from(elapsed.as_millis()).ok())?;
    (lease.expires_ms > now).then_some(LeaseHolderInfo {
        host: lease.holder.host,
        pid: lease.holder.pid,
        expires_ms: lease.expires_ms,
    })
}

async fn export(context: &ServerContext, request: &RouteRequest) -> RouteReply {
    let id = match request.param("id").and_then(errors::session_id) {
        Ok(id) => id,
        Err(reply) => return reply,
    };
    // `Sessions::export` writes to a `dyn Write`, which is not `Send`, so its future
    // cannot live in a handler's: it runs to completion on a blocking thread instead.
    let sessions = Arc::clone(context.booted.host.sessions());
    let runtime = tokio::runtime::Handle::current();
    let exported = tokio::task::spawn_blocking(move || {
        let mut bytes = Vec::new();
        runtime
            .block_on(sessions.export(&id, &mut bytes))
            .map(|()| bytes)
    })
    .await;
    match exported {
        Ok(Ok(bytes)) => RouteReply::bytes(200, NDJSON, bytes),
        Ok(Err(error)) => errors::session_error(&error),
        Err(error) => RouteReply::error(500, "INTERNAL", format!("export: {error}")),
    }
}

async fn fork(context: &ServerContext, request: &RouteRequest) -> RouteReply {
    let id = match request.param("id").and_then(errors::session_id) {
        Ok(id) => id,
        Err(reply) => return reply,
    };
    let body: ForkBody = match body_or_default(request) {
        Ok(body) => body,
        Err(reply) => return reply,
    };
    let sessions = context.booted.host.sessions();
    let forked = match sessions.fork(&id, body.at_seq, None).await {
        Ok(session) => session,
        Err(error) => return errors::session_error(&error),
    };
    let summary = summary_of(forked.header(), forked.head());
    // The engine opened the new session; nobody drives it until a command starts its
    // actor (which takes its lease and opens it again).
    let new_id = forked.id().clone();
    drop(forked);
    if let Err(error) = sessions.close(&new_id).await {
        return errors::session_error(&error);
    }
    RouteReply::json(201, &summary)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bounds(limit: Option<&str>, offset: Option<&str>) -> Result<(u64, u64), u16> {
        page_bounds(&PageQuery {
            limit: limit.map(str::to_owned),
            offset: offset.map(str::to_owned),
        })
        .map_err(|reply| reply.status)
    }

    #[test]
    fn api_1_limit_is_1_to_200_and_defaults_to_50() {
        assert_eq!(bounds(None, None), Ok((50, 0)));
        assert_eq!(bounds(Some("1"), Some("7")), Ok((1, 7)));
        assert_eq!(bounds(Some("200"), None), Ok((200, 0)));
        assert_eq!(bounds(Some("0"), None), Err(400));
        assert_eq!(bounds(Some("201"), None), Err(400));
        assert_eq!(bounds(Some("x"), None), Err(400));
        assert_eq!(bounds(None, Some("-1")), Err(400));
    }
}
