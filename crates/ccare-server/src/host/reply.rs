//! Turning a handler's [`RouteReply`] into an HTTP response: the body by kind (JSON,
//! bytes, a chunked stream, server-sent events with keep-alive comments) and the
//! headers every response carries (H-HTTP-4): `cache-control: no-store` and
//! `x-content-type-options: nosniff`.

use std::convert::Infallible;
use std::time::Duration;

use axum::body::Body;
use axum::http::header::{CACHE_CONTROL, CONTENT_TYPE, HeaderName, HeaderValue};
use axum::http::{Response, StatusCode};
use ccare_agent::routes::{ReplyBody, RouteReply, SseFrame};
use futures_util::stream::{BoxStream, StreamExt as _};
use tokio::sync::watch;

/// The media type of JSON bodies.
pub(crate) const JSON: &str = "application/json";

/// The comment sent on an idle event stream.
pub const KEEP_ALIVE: &[u8] = b": keep-alive\n\n";

/// How streamed bodies end: at shutdown, so a graceful stop does not wait for
/// event streams that never end by themselves.
#[derive(Debug, Clone)]
pub(crate) struct Streaming {
    /// The idle time after which an event stream gets a keep-alive comment.
    pub(crate) keep_alive: Duration,
    /// Turns `true` when the server stops.
    pub(crate) stopping: watch::Receiver<bool>,
}

/// One event in the `text/event-stream` format. Line breaks in `event`/`id` would
/// forge fields, so they are dropped; `data` is split into one `data:` line each.
pub(crate) fn encode_frame(frame: &SseFrame) -> Vec<u8> {
    let single_line = |text: &str| text.replace(['\r', '\n'], "");
    let mut out = String::new();
    if let Some(event) = &frame.event {
        out.push_str("event: ");
        out.push_str(&single_line(event));
        out.push('\n');
    }
    if let Some(id) = &frame.id {
        out.push_str("id: ");
        out.push_str(&single_line(id));
        out.push('\n');
    }
    let data = frame.data.replace("\r\n", "\n").replace('\r', "\n");
    for line in data.split('\n') {
        out.push_str("data: ");
        out.push_str(line);
        out.push('\n');
    }
    out.push('\n');
    out.into_bytes()
}

/// Waits until `stopping` turns true (or its sender is gone).
async fn stopped(mut stopping: watch::Receiver<bool>) {
    // An error means the server is gone: stop too.
    let _ = stopping.wait_for(|stop| *stop).await;
}

/// `frames` as SSE bytes with a keep-alive comment after each idle `keep_alive`,
/// ending when the frames end (and, through [`chunks_body`], when the server stops).
fn event_bytes(
    frames: BoxStream<'static, SseFrame>,
    streaming: &Streaming,
) -> BoxStream<'static, Vec<u8>> {
    let keep_alive = streaming.keep_alive;
    futures_util::stream::unfold(frames, move |mut frames| async move {
        match tokio::time::timeout(keep_alive, frames.next()).await {
            Ok(Some(frame)) => Some((encode_frame(&frame), frames)),
            Ok(None) => None,
            Err(_) => Some((KEEP_ALIVE.to_vec(), frames)),
        }
    })
    .boxed()
}

fn chunks_body(chunks: BoxStream<'static, Vec<u8>>, streaming: &Streaming) -> Body {
    let chunks = chunks
        .take_until(stopped(streaming.stopping.clone()))
        .map(Ok::<_, Infallible>);
    Body::from_stream(chunks)
}

/// The response for `reply`, with the security headers.
pub(crate) fn into_response(reply: RouteReply, streaming: &Streaming) -> Response<Body> {
    let status = StatusCode::from_u16(reply.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    let (content_type, body) = match reply.body {
        ReplyBody::Empty => (None, Body::empty()),
        ReplyBody::Json(bytes) => (Some(JSON.to_owned()), Body::from(bytes)),
        ReplyBody::Bytes {
            content_type,
            bytes,
        } => (Some(content_type), Body::from(bytes)),
        ReplyBody::Stream {
            content_type,
            chunks,
        } => (Some(content_type), chunks_body(chunks, streaming)),
        ReplyBody::Events(frames) => (
            Some("text/event-stream".to_owned()),
            chunks_body(event_bytes(frames, streaming), streaming),
        ),
    };
    let mut response = Response::new(body);
    *response.status_mut() = status;
    let headers = response.headers_mut();
    for (name, value) in reply.headers {
        // A header a handler got wrong is dropped (logged), never a panic.
        match (
            HeaderName::try_from(name.as_str()),
            HeaderValue::try_from(value.as_str()),
        ) {
            (Ok(name), Ok(value)) => {
                headers.append(name, value);
            }
            _ => {
                tracing::warn!(header = %name, "a route's reply header is not valid HTTP; dropped")
            }
        }
    }
    if let Some(content_type) = content_type
        && let Ok(value) = HeaderValue::try_from(content_type)
    {
        headers.insert(CONTENT_TYPE, value);
    }
    headers.insert(CACHE_CONTROL, HeaderValue::from_static("no-store"));
    headers.insert(
        HeaderName::from_static("x-content-type-options"),
        HeaderValue::from_static("nosniff"),
    );
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn api_3_frames_are_encoded_with_one_data_line_per_line() {
        let frame = SseFrame {
            event: Some("message_end\nid: 9".into()),
            id: Some("7".into()),
            data: "{\"a\":1}\nsecond".into(),
        };
        assert_eq!(
            String::from_utf8(encode_frame(&frame)).ok(),
            Some("event: message_endid: 9\nid: 7\ndata: {\"a\":1}\ndata: second\n\n".to_owned())
        );
        assert_eq!(
            String::from_utf8(encode_frame(&SseFrame::default())).ok(),
            Some("data: \n\n".to_owned())
        );
    }
}
