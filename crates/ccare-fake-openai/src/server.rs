//! The HTTP side: [`FakeServer`] (bind, serve, queue, record) and [`RecordedRequest`].

use std::collections::VecDeque;
use std::io;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::{Request, State};
use axum::http::header::{CACHE_CONTROL, CONTENT_TYPE};
use axum::http::{HeaderName, HeaderValue, Method, StatusCode};
use axum::response::Response;
use axum::serve::ListenerExt;
use parking_lot::Mutex;
use serde_json::{Value, json};
use tokio::net::TcpListener;
use tokio::sync::watch;

use crate::script::{DEFAULT_MODEL, End, Reply, Script, Step};
use crate::wire::{ResponseMeta, SSE_DONE, StreamEncoder, assemble};

/// The body of the 500 sent when a chat-completions request finds no scripted reply.
pub const NO_REPLY_LEFT_BODY: &str =
    r#"{"error":{"message":"fake server: no scripted reply left"}}"#;

/// How long a stream pauses before aborting its connection, so the chunks already
/// produced reach the socket first.
const FLUSH_BEFORE_ABORT: Duration = Duration::from_millis(20);

/// A fake OpenAI-compatible server on `127.0.0.1`, serving in a spawned tokio task.
///
/// Routes:
/// - `POST /v1/chat/completions`: pops the next [`Reply`] (FIFO). With none left it
///   answers 500 with [`NO_REPLY_LEFT_BODY`].
/// - `GET /v1/models`: lists `fake-model`.
/// - anything else: 404 with an OpenAI-style error body.
///
/// Every request, on any route, is recorded before it is answered (unless
/// [`FakeServer::keep_requests`] turned that off).
///
/// Dropping the server stops accepting connections, aborts stalled and delayed
/// streams, and closes idle connections.
#[derive(Debug)]
pub struct FakeServer {
    shared: Arc<Shared>,
    address: SocketAddr,
    shutdown: watch::Sender<bool>,
}

/// One request the server received.
#[derive(Debug, Clone)]
pub struct RecordedRequest {
    /// The HTTP method, e.g. `POST`.
    pub method: String,
    /// The URI path without the query, e.g. `/v1/chat/completions`.
    pub path: String,
    /// The headers in received order, names lowercased (values lossily decoded as
    /// UTF-8).
    pub headers: Vec<(String, String)>,
    /// The body parsed as JSON; `Value::Null` if it is not JSON (or empty).
    pub body: Value,
    /// The body as text (lossily decoded as UTF-8).
    pub raw_body: String,
    /// When the server finished reading the request.
    pub at: Instant,
}

impl RecordedRequest {
    /// The first value of header `name` (matched case-insensitively).
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(header_name, _)| header_name.eq_ignore_ascii_case(name))
            .map(|(_, value)| value.as_str())
    }
}

/// Answers a request when no queued reply is left (see [`FakeServer::respond_with`]).
pub type Responder = Arc<dyn Fn(&RecordedRequest) -> Reply + Send + Sync>;

struct Shared {
    replies: Mutex<VecDeque<Reply>>,
    responder: Mutex<Option<Responder>>,
    /// Shared with the responder that answers each one, so recording costs no copy.
    requests: Mutex<Vec<Arc<RecordedRequest>>>,
    /// Whether `requests` keeps what comes in ([`FakeServer::keep_requests`]).
    keep_requests: AtomicBool,
    n_requests: watch::Sender<usize>,
    n_responses: AtomicU64,
    /// Script steps written to sockets by streamed replies, all requests together.
    steps_sent: Arc<AtomicU64>,
    shutdown: watch::Receiver<bool>,
}

impl std::fmt::Debug for Shared {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter
            .debug_struct("Shared")
            .field("replies", &self.replies.lock().len())
            .field("responder", &self.responder.lock().is_some())
            .field("requests", &self.requests.lock().len())
            .finish_non_exhaustive()
    }
}

impl FakeServer {
    /// Binds `127.0.0.1:0` and serves on the current tokio runtime.
    pub async fn start() -> io::Result<FakeServer> {
        let listener = TcpListener::bind(("127.0.0.1", 0)).await?;
        let address = listener.local_addr()?;
        let (shutdown, shutdown_rx) = watch::channel(false);
        let shared = Arc::new(Shared {
            replies: Mutex::new(VecDeque::new()),
            responder: Mutex::new(None),
            requests: Mutex::new(Vec::new()),
            keep_requests: AtomicBool::new(true),
            n_requests: watch::Sender::new(0),
            n_responses: AtomicU64::new(0),
            steps_sent: Arc::new(AtomicU64::new(0)),
            shutdown: shutdown_rx.clone(),
        });
        let router = Router::new()
            .fallback(handle)
            .with_state(Arc::clone(&shared));
        // A real upstream streams with TCP_NODELAY: without it, Nagle holds each small
        // chunk until the client's delayed ACK (about 40 ms on Linux) of the last, and
        // a paced answer arrives in lumps, late.
        let listener = listener.tap_io(|stream| {
            // Only latency depends on it; the answer is the same without.
            let _ = stream.set_nodelay(true);
        });
        let serve =
            axum::serve(listener, router).with_graceful_shutdown(wait_for_shutdown(shutdown_rx));
        tokio::spawn(async move {
            // Serving only ends on shutdown; an accept error has no one to report to.
            let _ = serve.await;
        });
        Ok(FakeServer {
            shared,
            address,
            shutdown,
        })
    }

    /// The OpenAI base URL, `http://127.0.0.1:PORT/v1`.
    pub fn base_url(&self) -> String {
        format!("http://{}/v1", self.address)
    }

    /// The bound address.
    pub fn address(&self) -> SocketAddr {
        self.address
    }

    /// Queues `reply` for the next chat-completions request (FIFO).
    pub fn push(&self, reply: impl Into<Reply>) {
        self.shared.replies.lock().push_back(reply.into());
    }

    /// Answers every request that finds the reply queue empty with `responder(request)`,
    /// for simulations whose replies depend on what was asked (e.g. the purpose header).
    pub fn respond_with(
        &self,
        responder: impl Fn(&RecordedRequest) -> Reply + Send + Sync + 'static,
    ) {
        *self.shared.responder.lock() = Some(Arc::new(responder));
    }

    /// Whether requests are kept for [`FakeServer::requests`] (on at start). A bench that
    /// sends tens of thousands of requests turns it off, so the fake's own memory does
    /// not grow with each one in the process being measured. Requests are still counted
    /// for [`FakeServer::wait_for_requests`], which then returns only those kept.
    pub fn keep_requests(&self, keep: bool) {
        self.shared.keep_requests.store(keep, Ordering::SeqCst);
    }

    /// How many script steps streamed replies have written to their sockets so far, all
    /// requests together: a client that cancels mid-stream stops this count early.
    pub fn steps_sent(&self) -> u64 {
        self.shared.steps_sent.load(Ordering::SeqCst)
    }

    /// How many queued replies no request has taken yet.
    pub fn remaining(&self) -> usize {
        self.shared.replies.lock().len()
    }

    /// Every request received so far, in order.
    pub fn requests(&self) -> Vec<RecordedRequest> {
        self.shared
            .requests
            .lock()
            .iter()
            .map(|recorded| RecordedRequest::clone(recorded))
            .collect()
    }

    /// Waits until at least `n` requests were received or `timeout` passed, then
    /// returns all requests received so far (fewer than `n` on timeout).
    pub async fn wait_for_requests(&self, n: usize, timeout: Duration) -> Vec<RecordedRequest> {
        let mut n_requests = self.shared.n_requests.subscribe();
        // A timeout is reported by the length of the result.
        let _ = tokio::time::timeout(timeout, n_requests.wait_for(|count| *count >= n)).await;
        self.requests()
    }
}

impl Drop for FakeServer {
    fn drop(&mut self) {
        self.shutdown.send_replace(true);
    }
}

/// Resolves once the server is dropped.
async fn wait_for_shutdown(mut shutdown: watch::Receiver<bool>) {
    // An error means the sender is gone, which is a shutdown too.
    let _ = shutdown.wait_for(|stop| *stop).await;
}

/// Sleeps for `duration`; false if the server was dropped first.
async fn sleep_unless_shutdown(duration: Duration, shutdown: &watch::Receiver<bool>) -> bool {
    tokio::select! {
        () = tokio::time::sleep(duration) => true,
        () = wait_for_shutdown(shutdown.clone()) => false,
    }
}

async fn handle(State(shared): State<Arc<Shared>>, request: Request) -> Response {
    let (parts, body) = request.into_parts();
    let raw_bytes = match axum::body::to_bytes(body, usize::MAX).await {
        Ok(bytes) => bytes,
        Err(error) => {
            return json_response(
                StatusCode::BAD_REQUEST,
                error_body(&format!(
                    "fake server: could not read the request body: {error}"
                )),
            );
        }
    };
    let body_json = serde_json::from_slice::<Value>(&raw_bytes).unwrap_or(Value::Null);
    let recorded = Arc::new(RecordedRequest {
        method: parts.method.to_string(),
        path: parts.uri.path().to_owned(),
        headers: parts
            .headers
            .iter()
            .map(|(name, value)| {
                (
                    name.as_str().to_ascii_lowercase(),
                    String::from_utf8_lossy(value.as_bytes()).into_owned(),
                )
            })
            .collect(),
        body: body_json,
        raw_body: String::from_utf8_lossy(&raw_bytes).into_owned(),
        at: Instant::now(),
    });
    let wants_stream = recorded.body.get("stream") == Some(&Value::Bool(true));
    let responder = shared.responder.lock().clone();
    let answered = responder.map(|responder| (responder, Arc::clone(&recorded)));
    shared.record(recorded);

    match (&parts.method, parts.uri.path()) {
        (&Method::POST, "/v1/chat/completions") => {
            let queued = shared.replies.lock().pop_front();
            let reply = queued.or_else(|| {
                answered
                    .as_ref()
                    .map(|(responder, request)| responder(request))
            });
            match reply {
                None => json_response(
                    StatusCode::INTERNAL_SERVER_ERROR,
                    NO_REPLY_LEFT_BODY.to_owned(),
                ),
                Some(Reply::Http {
                    status,
                    headers,
                    body,
                }) => http_response(status, &headers, body),
                Some(Reply::Chunks(script)) => {
                    let meta = shared.meta(&script);
                    if wants_stream {
                        stream_response(
                            meta,
                            script,
                            shared.shutdown.clone(),
                            Arc::clone(&shared.steps_sent),
                        )
                    } else {
                        complete_response(meta, script, shared.shutdown.clone()).await
                    }
                }
            }
        }
        (&Method::GET, "/v1/models") => json_response(
            StatusCode::OK,
            json!({
                "object": "list",
                "data": [{
                    "id": DEFAULT_MODEL,
                    "object": "model",
                    "created": 0,
                    "owned_by": "ccare-fake-openai",
                }],
            })
            .to_string(),
        ),
        (method, path) => json_response(
            StatusCode::NOT_FOUND,
            error_body(&format!("fake server: no route for {method} {path}")),
        ),
    }
}

impl Shared {
    fn record(&self, recorded: Arc<RecordedRequest>) {
        if self.keep_requests.load(Ordering::SeqCst) {
            self.requests.lock().push(recorded);
        }
        self.n_requests.send_modify(|count| *count += 1);
    }

    fn meta(&self, script: &Script) -> ResponseMeta {
        let response_number = self.n_responses.fetch_add(1, Ordering::Relaxed) + 1;
        ResponseMeta {
            id: script
                .id
                .clone()
                .unwrap_or_else(|| format!("chatcmpl-fake-{response_number}")),
            created_secs: SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .map(|since_epoch| since_epoch.as_secs())
                .unwrap_or(0),
            model: script.model.clone(),
        }
    }
}

fn error_body(message: &str) -> String {
    json!({ "error": { "message": message } }).to_string()
}

fn json_response(status: StatusCode, body: String) -> Response {
    let mut response = Response::new(Body::from(body));
    *response.status_mut() = status;
    response
        .headers_mut()
        .insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
    response
}

fn http_response(status: u16, headers: &[(String, String)], body: String) -> Response {
    let status = StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    let mut response = Response::new(Body::from(body.clone()));
    *response.status_mut() = status;
    for (name, value) in headers {
        let (Ok(header_name), Ok(header_value)) = (
            HeaderName::try_from(name.as_str()),
            HeaderValue::try_from(value.as_str()),
        ) else {
            return json_response(
                StatusCode::INTERNAL_SERVER_ERROR,
                error_body(&format!(
                    "fake server: invalid scripted header {name:?}: {value:?}"
                )),
            );
        };
        response.headers_mut().append(header_name, header_value);
    }
    if !response.headers().contains_key(CONTENT_TYPE) {
        let content_type = if serde_json::from_str::<Value>(&body).is_ok() {
            "application/json"
        } else {
            "text/plain; charset=utf-8"
        };
        response
            .headers_mut()
            .insert(CONTENT_TYPE, HeaderValue::from_static(content_type));
    }
    response
}

/// A body item: a chunk of bytes, or the error that makes hyper abort the connection.
type Frame = Result<Bytes, io::Error>;

fn abort_error(why: &str) -> io::Error {
    io::Error::new(
        io::ErrorKind::ConnectionAborted,
        format!("fake server: {why}"),
    )
}

/// Produces the frames of one streamed script, step by step, lazily: each frame is
/// written to the socket before the next step (and its delay) runs.
struct StreamState {
    script: Script,
    encoder: StreamEncoder,
    next_step_idx: usize,
    finished: bool,
    shutdown: watch::Receiver<bool>,
    sent: Arc<AtomicU64>,
}

impl StreamState {
    async fn next_frame(&mut self) -> Option<Frame> {
        loop {
            if self.finished {
                return None;
            }
            let step_idx = self.next_step_idx;
            let Some(step) = self.script.steps.get(step_idx) else {
                self.finished = true;
                return self.end_frame().await;
            };
            self.next_step_idx += 1;
            if let Step::Delay(duration) = step {
                if !sleep_unless_shutdown(*duration, &self.shutdown).await {
                    self.finished = true;
                    return Some(Err(abort_error("server dropped")));
                }
                continue;
            }
            if let Some(bytes) = self.encoder.encode(step_idx, step) {
                self.sent.fetch_add(1, Ordering::SeqCst);
                return Some(Ok(Bytes::from(bytes)));
            }
        }
    }

    async fn end_frame(&mut self) -> Option<Frame> {
        match self.script.end {
            End::Done => Some(Ok(Bytes::from_static(SSE_DONE))),
            End::Close => None,
            End::Disconnect => {
                // Pending once more lets hyper flush what it has before the abort.
                let _ = sleep_unless_shutdown(FLUSH_BEFORE_ABORT, &self.shutdown).await;
                Some(Err(abort_error("scripted disconnect")))
            }
            End::Stall => {
                wait_for_shutdown(self.shutdown.clone()).await;
                Some(Err(abort_error("server dropped")))
            }
        }
    }
}

fn stream_response(
    meta: ResponseMeta,
    script: Script,
    shutdown: watch::Receiver<bool>,
    sent: Arc<AtomicU64>,
) -> Response {
    let encoder = StreamEncoder::new(meta, &script);
    let state = StreamState {
        script,
        encoder,
        next_step_idx: 0,
        finished: false,
        shutdown,
        sent,
    };
    let frames = futures_util::stream::unfold(state, |mut state| async move {
        let frame = state.next_frame().await?;
        Some((frame, state))
    });
    let mut response = Response::new(Body::from_stream(frames));
    let headers = response.headers_mut();
    headers.insert(CONTENT_TYPE, HeaderValue::from_static("text/event-stream"));
    headers.insert(CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    response
}

/// A non-streaming answer: waits the sum of the script's delays, then sends the
/// assembled `chat.completion`. `End::Disconnect` sends the first half of the JSON and
/// aborts; `End::Stall` never answers (until the server is dropped).
async fn complete_response(
    meta: ResponseMeta,
    script: Script,
    shutdown: watch::Receiver<bool>,
) -> Response {
    let total_delay: Duration = script
        .steps
        .iter()
        .map(|step| match step {
            Step::Delay(duration) => *duration,
            _ => Duration::ZERO,
        })
        .sum();
    let mut dropped = !sleep_unless_shutdown(total_delay, &shutdown).await;
    if script.end == End::Stall && !dropped {
        wait_for_shutdown(shutdown.clone()).await;
        dropped = true;
    }
    if dropped {
        let frames = futures_util::stream::iter([Frame::Err(abort_error("server dropped"))]);
        return Response::new(Body::from_stream(frames));
    }
    let body = assemble(&meta, &script).to_string();
    match script.end {
        End::Done | End::Close | End::Stall => json_response(StatusCode::OK, body),
        End::Disconnect => {
            let half = Bytes::from(body.into_bytes());
            let half = half.slice(..half.len() / 2);
            let frames = futures_util::stream::unfold(
                (Some(half), Some(shutdown)),
                |(half, shutdown)| async move {
                    if let Some(half) = half {
                        return Some((Frame::Ok(half), (None, shutdown)));
                    }
                    let shutdown = shutdown?;
                    let _ = sleep_unless_shutdown(FLUSH_BEFORE_ABORT, &shutdown).await;
                    Some((Frame::Err(abort_error("scripted disconnect")), (None, None)))
                },
            );
            let mut response = Response::new(Body::from_stream(frames));
            response
                .headers_mut()
                .insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
            response
        }
    }
}
