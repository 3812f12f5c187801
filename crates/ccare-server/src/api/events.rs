//! API-3: a session's ordered stream (ACT-4) as server-sent events.
//!
//! - A committed event is `event: <its type>`, `id: <its seq>`, `data: <the event's
//!   JSON>` — exactly the line `export` writes for it — sent once durable.
//! - A streamed chunk is `event: delta` with `{afterSeq, turn, step, callId, chunk}`
//!   and no `id:`: deltas are transient, so a client resuming with `Last-Event-ID`
//!   (the last event's seq) gets every committed event after it, the completed message
//!   included, and the live deltas from then on.
//! - `event: idle` `{afterSeq}` and `event: awaiting-tools` `{afterSeq, callIds}` mark
//!   the session's transitions.
//!
//! `?from=SEQ` is the first seq sent (default 0: the whole log, then live);
//! `Last-Event-ID` overrides it and resumes after that seq. A subscriber that falls
//! behind is resubscribed inside the server from the last event it was sent, so the
//! client sees neither a gap nor a duplicate. The stream starts the session's actor
//! when it is not running (taking its lease: a session another process drives is 409
//! `SESSION_BUSY`) and holds it while the client is connected, so it stays live; the
//! host adds the keep-alive comments.

use ccare_agent::routes::{
    BAD_REQUEST, Method, RouteDoc, RouteError, RouteReply, RouteRequest, RouteSpec, SseFrame,
};
use ccare_agent::{EventStream, StreamItem};
use ccare_app::{AgentHandle, WhenBusy};
use futures_util::StreamExt as _;
use serde::Serialize;

use crate::ServerContext;
use crate::api::errors::{self, INVALID_QUERY};
use crate::api::types::{AwaitingToolsData, DeltaData, EventsQuery, IdleData};
use crate::api::{handler, path};

/// The `event:` of a streamed chunk.
pub const DELTA: &str = "delta";
/// The `event:` of the session going idle.
pub const IDLE: &str = "idle";
/// The `event:` of a turn waiting for caller-executed tool results.
pub const AWAITING_TOOLS: &str = "awaiting-tools";

/// The routes of API-3.
pub(super) fn routes(context: &ServerContext) -> Result<Vec<RouteSpec>, RouteError> {
    Ok(vec![
        RouteSpec::new(
            path("/api/sessions/{id}/events")?,
            handler(context, |context, request| async move {
                events(&context, &request).await
            }),
        )
        .method(
            Method::Get,
            RouteDoc::new(
                "The session's committed events (replayed, then live) with its deltas and idle / awaiting-tools transitions, as server-sent events; Last-Event-ID resumes",
            )
            .response_media("text/event-stream")
            .query("from", "The first seq to send (default 0); Last-Event-ID overrides it"),
        ),
    ])
}

/// The last seq the client already has (`None`: send from seq 0), from
/// `Last-Event-ID` or else `from`.
fn cursor(request: &RouteRequest) -> Result<Option<u64>, RouteReply> {
    if let Some(last) = request.header("last-event-id") {
        let last = last.trim();
        return last.parse::<u64>().map(Some).map_err(|_| {
            RouteReply::error(
                400,
                BAD_REQUEST,
                format!("Last-Event-ID: expected the seq of an event, got {last:?}"),
            )
        });
    }
    let query: EventsQuery = request.query()?;
    match query.from {
        None => Ok(None),
        Some(text) => match text.parse::<u64>() {
            Ok(from) => Ok(from.checked_sub(1)),
            Err(_) => Err(RouteReply::error(
                400,
                INVALID_QUERY,
                format!("from: expected a seq (an integer ≥ 0), got {text:?}"),
            )),
        },
    }
}

async fn events(context: &ServerContext, request: &RouteRequest) -> RouteReply {
    let after = match request
        .param("id")
        .and_then(errors::session_id)
        .and_then(|id| cursor(request).map(|after| (id, after)))
    {
        Ok(found) => found,
        Err(reply) => return reply,
    };
    let (id, after) = after;
    let handle = match context.agents.get_or_start(&id, WhenBusy::Fail).await {
        Ok(handle) => handle,
        Err(error) => return errors::app_error(&error),
    };
    let stream = handle.agent().subscribe_from(after);
    let follow = Follow { handle, stream };
    RouteReply::events(futures_util::stream::unfold(follow, Follow::next_frame).boxed())
}

/// One client's subscription, holding the actor while it is connected.
struct Follow {
    handle: AgentHandle,
    stream: EventStream,
}

impl Follow {
    async fn next_frame(mut self) -> Option<(SseFrame, Self)> {
        loop {
            let frame = match self.stream.next().await? {
                StreamItem::Event(event) => SseFrame {
                    event: Some(event.kind().to_owned()),
                    id: Some(event.seq().to_string()),
                    data: event.raw_json().to_owned(),
                },
                StreamItem::Delta { after_seq, live } => transient(
                    DELTA,
                    &DeltaData {
                        after_seq,
                        turn: live.turn,
                        step: live.step,
                        call_id: &live.call_id,
                        chunk: &live.chunk,
                    },
                ),
                StreamItem::Idle { after_seq } => transient(IDLE, &IdleData { after_seq }),
                StreamItem::AwaitingTools {
                    after_seq,
                    call_ids,
                } => transient(
                    AWAITING_TOOLS,
                    &AwaitingToolsData {
                        after_seq,
                        call_ids: &call_ids,
                    },
                ),
                StreamItem::Lagged { resume_from } => {
                    // Everything before the lag was sent; continue from there.
                    self.stream = self.handle.agent().subscribe_from(resume_from);
                    continue;
                }
            };
            return Some((frame, self));
        }
    }
}

/// A frame without an id (not a resume point).
fn transient<T: Serialize>(event: &str, data: &T) -> SseFrame {
    SseFrame {
        event: Some(event.to_owned()),
        id: None,
        data: serde_json::to_string(data).unwrap_or_else(|_| "null".to_owned()),
    }
}
