//! The one pipeline every request passes, whatever route it is for (H-HTTP-1..4), in
//! this order:
//!
//! 1. the fence (H-HTTP-3): `Host`, `Origin`, `Sec-Fetch-Site` → 403;
//! 2. the route: no route for the path → 404 `not-found`;
//! 3. the method: not one the route answers → 405 `method-not-allowed` with `Allow`
//!    (`HEAD` is answered as `GET`);
//! 4. authentication unless the route is public (H-HTTP-2) → 401 `unauthorized` (a
//!    route that takes client keys, the gateway's with `[gateway] pass_through_keys`,
//!    takes any other bearer as the client's own API key: GW-1); a
//!    cookie-authenticated unsafe method also needs `Origin` or
//!    `Sec-Fetch-Site: same-origin` → 403 `origin-rejected`;
//! 5. the body, read up to the route's limit (1 MiB unless the route sets its own:
//!    the gateway's chat route) and never kept past it → 413 `request-too-large` (the
//!    rest of an oversized body, up to 16 MiB within 5 s, is read and dropped first,
//!    so the client reads the answer instead of a broken pipe);
//! 6. a non-empty body of an unsafe method must be `application/json` → 415
//!    `json-required` (an empty body needs no media type: `POST .../cancel`);
//! 7. the handler, on its own task (a panic is a 500 `internal`, and a client that
//!    goes away does not abort a command half-done);
//! 8. the response with the security headers ([`super::reply`]).

use std::sync::Arc;

use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::header::{
    ALLOW, CONNECTION, CONTENT_LENGTH, CONTENT_TYPE, HeaderValue, TRANSFER_ENCODING,
    WWW_AUTHENTICATE,
};
use axum::http::request::Parts;
use axum::http::{HeaderMap, Response};
use ccare_agent::routes::{Caller, Method, RouteAuth, RouteReply, RouteRequest};
use futures_util::StreamExt as _;

use super::auth::{Auth, Credential};
use super::fence::{Fence, ORIGIN_REJECTED};
use super::reply::{JSON, Streaming, into_response};
use super::table::{Matched, Table};

/// The largest request body of a route that sets no limit of its own (H-HTTP-1, API-5).
pub const BODY_LIMIT: usize = 1024 * 1024;

/// How much of a refused, oversized body is read and thrown away before the 413 goes
/// out, and for how long at most: a client still writing its body when the server
/// closes gets a broken pipe instead of the answer, so a body of a plausible size is
/// drained first (the connection still closes after the answer).
const REFUSED_DRAIN_LIMIT: usize = 16 * 1024 * 1024;
const REFUSED_DRAIN_TIME: std::time::Duration = std::time::Duration::from_secs(5);

/// What the pipeline needs, shared by every request.
#[derive(Debug)]
pub(crate) struct Pipeline {
    pub(crate) table: Table,
    pub(crate) fence: Fence,
    pub(crate) auth: Arc<Auth>,
    pub(crate) streaming: Streaming,
}

/// axum's fallback handler: every request comes here.
pub(crate) async fn serve(
    State(pipeline): State<Arc<Pipeline>>,
    request: Request,
) -> Response<Body> {
    let has_body = request.headers().contains_key(TRANSFER_ENCODING)
        || request
            .headers()
            .get(CONTENT_LENGTH)
            .is_some_and(|length| length.as_bytes() != b"0");
    let (reply, body_read) = pipeline.answer(request).await;
    let mut response = into_response(reply, &pipeline.streaming);
    if has_body && !body_read {
        // The unread body is still on the wire: this connection cannot carry another
        // request, so say so instead of letting the client reuse it.
        response
            .headers_mut()
            .insert(CONNECTION, HeaderValue::from_static("close"));
    }
    response
}

/// The route's methods for `Allow`, `HEAD` with `GET`.
fn allow(methods: impl Iterator<Item = Method>) -> String {
    let mut names = Vec::new();
    for method in methods {
        names.push(method.as_str());
        if method == Method::Get {
            names.push("HEAD");
        }
    }
    names.join(", ")
}

/// Whether a `Content-Type` is JSON (`application/json`, parameters allowed).
fn is_json(headers: &HeaderMap) -> bool {
    headers
        .get(CONTENT_TYPE)
        .and_then(|value| value.to_str().ok())
        .and_then(|value| value.split(';').next())
        .is_some_and(|essence| essence.trim().eq_ignore_ascii_case(JSON))
}

fn too_large(limit: usize) -> RouteReply {
    RouteReply::error(
        413,
        "request-too-large",
        format!("the request body is over {limit} bytes"),
    )
}

/// Reads the body, refusing it as soon as it passes `limit` bytes.
async fn read_body(headers: &HeaderMap, body: Body, limit: usize) -> Result<Vec<u8>, RouteReply> {
    let declared = headers
        .get(CONTENT_LENGTH)
        .and_then(|value| value.to_str().ok())
        .and_then(|value| value.parse::<u64>().ok());
    let mut stream = body.into_data_stream();
    if declared.is_some_and(|length| length > limit as u64) {
        if declared.is_some_and(|length| length <= REFUSED_DRAIN_LIMIT as u64) {
            drain(&mut stream, 0).await;
        }
        return Err(too_large(limit));
    }
    // A large body (the gateway's transcripts) is read without growing the buffer again
    // and again.
    let expected = declared.and_then(|length| usize::try_from(length).ok());
    let mut bytes = Vec::with_capacity(expected.unwrap_or(0).min(limit));
    while let Some(chunk) = stream.next().await {
        let chunk = chunk.map_err(|error| {
            RouteReply::error(
                400,
                "bad-request",
                format!("reading the request body: {error}"),
            )
        })?;
        if bytes.len() + chunk.len() > limit {
            drain(&mut stream, bytes.len() + chunk.len()).await;
            return Err(too_large(limit));
        }
        bytes.extend_from_slice(&chunk);
    }
    Ok(bytes)
}

/// Reads and drops the rest of a refused body, `seen` bytes of it read already, until
/// it ends, passes [`REFUSED_DRAIN_LIMIT`] or [`REFUSED_DRAIN_TIME`] runs out.
async fn drain(
    stream: &mut (impl futures_util::Stream<Item = Result<axum::body::Bytes, axum::Error>> + Unpin),
    mut seen: usize,
) {
    let reading = async {
        while seen <= REFUSED_DRAIN_LIMIT {
            match stream.next().await {
                Some(Ok(chunk)) => seen += chunk.len(),
                Some(Err(_)) | None => return,
            }
        }
    };
    let _ = tokio::time::timeout(REFUSED_DRAIN_TIME, reading).await;
}

impl Pipeline {
    /// The reply, and whether the request body was read to its end.
    async fn answer(&self, request: Request) -> (RouteReply, bool) {
        let (parts, body) = request.into_parts();
        let (method, matched, caller) = match self.check(&parts) {
            Ok(found) => found,
            Err(reply) => {
                // The route's own shape for the server's refusals, where it has one.
                let reshape = self
                    .table
                    .find(parts.uri.path())
                    .and_then(|matched| matched.entry.spec.refusals);
                let reply = match reshape {
                    Some(reshape) => reshape(reply),
                    None => reply,
                };
                return (reply, false);
            }
        };
        let reshape = |reply: RouteReply| match matched.entry.spec.refusals {
            Some(reshape) => reshape(reply),
            None => reply,
        };
        let limit = matched.entry.spec.body_limit.unwrap_or(BODY_LIMIT);
        let bytes = match read_body(&parts.headers, body, limit).await {
            Ok(bytes) => bytes,
            Err(reply) => return (reshape(reply), false),
        };
        if method.is_unsafe() && !bytes.is_empty() && !is_json(&parts.headers) {
            let reply = RouteReply::error(
                415,
                "json-required",
                "a request body must be sent as application/json",
            );
            return (reshape(reply), true);
        }
        (
            self.handle(&parts, method, matched, caller, bytes).await,
            true,
        )
    }

    /// Steps 1-4: the fence, the route, the method, authentication (and who the
    /// request authenticated as).
    fn check(&self, parts: &Parts) -> Result<(Method, Matched, Caller), RouteReply> {
        let headers = &parts.headers;
        if let Err((code, message)) = self.fence.check(headers) {
            return Err(RouteReply::error(403, code, message));
        }
        let path = parts.uri.path();
        let Some(matched) = self.table.find(path) else {
            return Err(RouteReply::error(
                404,
                "not-found",
                format!("no route for {path}"),
            ));
        };
        let spec = &matched.entry.spec;
        let asked = if parts.method == axum::http::Method::HEAD {
            Some(Method::Get)
        } else {
            Method::parse(parts.method.as_str())
        };
        let Some(method) = asked.filter(|method| spec.methods.contains_key(method)) else {
            let allowed = allow(spec.methods.keys().copied());
            return Err(RouteReply::error(
                405,
                "method-not-allowed",
                format!(
                    "{} answers {allowed}, not {}",
                    spec.path.pattern(),
                    parts.method
                ),
            )
            .with_header(ALLOW.as_str(), allowed));
        };
        let mut caller = Caller::Server;
        if spec.auth == RouteAuth::Required {
            match self.auth.check(headers) {
                Some(Credential::Bearer) => {}
                Some(Credential::Cookie)
                    if !method.is_unsafe() || Fence::same_site_proof(headers) => {}
                Some(Credential::Cookie) => {
                    return Err(RouteReply::error(
                        403,
                        ORIGIN_REJECTED,
                        "a cookie-authenticated write needs an Origin or Sec-Fetch-Site: same-origin header",
                    ));
                }
                // GW-1 pass-through: on a route that takes client keys, a bearer
                // that is not the token is the client's own API key.
                None if spec.client_keys
                    && let Some(key) = super::auth::bearer(headers) =>
                {
                    caller = Caller::ClientKey(ccare_llm::ApiCredential::new(key));
                }
                None => {
                    return Err(RouteReply::error(
                        401,
                        "unauthorized",
                        "send Authorization: Bearer TOKEN or log in with POST /api/auth/session",
                    )
                    .with_header(WWW_AUTHENTICATE.as_str(), "Bearer"));
                }
            }
        }
        Ok((method, matched, caller))
    }

    /// Step 7: the handler, on its own task.
    async fn handle(
        &self,
        parts: &Parts,
        method: Method,
        matched: Matched,
        caller: Caller,
        body: Vec<u8>,
    ) -> RouteReply {
        let spec = &matched.entry.spec;
        let route_request = RouteRequest {
            method,
            path: parts.uri.path().to_owned(),
            params: matched.params.clone(),
            rest: matched.rest.clone(),
            query: parts.uri.query().unwrap_or_default().to_owned(),
            headers: parts
                .headers
                .iter()
                .filter_map(|(name, value)| {
                    Some((name.as_str().to_owned(), value.to_str().ok()?.to_owned()))
                })
                .collect(),
            body,
            caller,
            gone: ccare_llm::CancellationToken::new(),
        };
        // The server drops this future when the client's connection closes; the
        // handler runs in its own task (a panic becomes a 500), so it is told.
        let gone = route_request.gone.clone().drop_guard();
        let handler = Arc::clone(&spec.handler);
        let pattern = spec.path.pattern().to_owned();
        let handled = tokio::spawn(async move { handler.handle(route_request).await }).await;
        // Answered: a streamed reply's body goes on with the client there.
        gone.disarm();
        match handled {
            Ok(reply) => reply,
            Err(error) => {
                tracing::error!(route = %pattern, %error, "a route handler failed");
                RouteReply::error(500, "internal", format!("the handler of {pattern} failed"))
            }
        }
    }
}
