//! HTTP routes as an extension point (host.md H-HTTP-1): the host and its plugins
//! register routes here; `ccare serve` (the server crate) serves them.
//!
//! The kernel knows no HTTP framework. A route is a [`RouteSpec`]: a path pattern
//! (exact, with `{name}` segments, or a prefix), the methods it answers, whether it
//! needs authentication, one [`RouteDoc`] per method (the OpenAPI operation, schemas
//! generated from Rust types with `schemars`), and a [`RouteHandler`] that turns a
//! framework-free [`RouteRequest`] into a [`RouteReply`]. The server owns everything
//! in front of the handler — the Host/Origin fence, authentication, size and media-type
//! limits, security headers — so a route cannot be served without going through them
//! (H-HTTP-2..4): a handler never sees a request that failed them.
//!
//! [`Routes`] is the table: registration is by owner (a plugin's name, or `host`),
//! a second route with the same path pattern fails with `ROUTE_CONFLICT`, and
//! [`Routes::remove_owner`] drops a plugin's routes when it unmounts. The table has a
//! generation counter so a server can rebuild its matcher when the table changes.

use std::collections::BTreeMap;
use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use futures_util::stream::BoxStream;
use parking_lot::RwLock;
use serde::Serialize;
use serde::de::DeserializeOwned;

/// The error code of a route whose path pattern is already registered (H-HTTP-1).
pub const ROUTE_CONFLICT: &str = "ROUTE_CONFLICT";

/// The error code of a request whose body or query does not parse (400).
pub const BAD_REQUEST: &str = "bad-request";

/// An HTTP method a route answers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Method {
    /// `GET` (also answers `HEAD` where the server supports it).
    Get,
    /// `POST`.
    Post,
    /// `PUT`.
    Put,
    /// `PATCH`.
    Patch,
    /// `DELETE`.
    Delete,
}

impl Method {
    /// The method's name on the wire, upper case.
    pub fn as_str(self) -> &'static str {
        match self {
            Method::Get => "GET",
            Method::Post => "POST",
            Method::Put => "PUT",
            Method::Patch => "PATCH",
            Method::Delete => "DELETE",
        }
    }

    /// The method of a wire name (case-sensitive, as HTTP is); `None` for others.
    pub fn parse(name: &str) -> Option<Self> {
        Some(match name {
            "GET" => Method::Get,
            "POST" => Method::Post,
            "PUT" => Method::Put,
            "PATCH" => Method::Patch,
            "DELETE" => Method::Delete,
            _ => return None,
        })
    }

    /// Whether the method may change state (H-HTTP-3: cookie-authenticated unsafe
    /// methods need a same-origin proof; API-5: writes must be JSON).
    pub fn is_unsafe(self) -> bool {
        !matches!(self, Method::Get)
    }
}

impl fmt::Display for Method {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        formatter.write_str(self.as_str())
    }
}

/// Whether a route needs the bearer token or the session cookie (H-HTTP-2).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RouteAuth {
    /// Authenticated: the usual case.
    Required,
    /// Open to anyone who passes the fence: only the login route and the login page.
    Public,
}

/// A route's path: a pattern of `/`-separated segments, each literal or a `{name}`
/// parameter, matched exactly or as a prefix.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RoutePath {
    pattern: String,
    prefix: bool,
}

/// A path pattern that cannot be a route.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("route path {pattern:?}: {reason}")]
pub struct RoutePathError {
    /// The pattern given.
    pub pattern: String,
    /// What is wrong with it.
    pub reason: &'static str,
}

impl RoutePath {
    /// A path matched exactly; `{name}` segments match any one segment and are passed
    /// to the handler as [`RouteRequest::params`].
    pub fn exact(pattern: &str) -> Result<Self, RoutePathError> {
        Self::checked(pattern, false)
    }

    /// Every path that starts with `pattern` (which must end with `/`); the rest of
    /// the path is [`RouteRequest::rest`]. For a static file tree or a UI.
    pub fn prefix(pattern: &str) -> Result<Self, RoutePathError> {
        if !pattern.ends_with('/') {
            return Err(RoutePathError {
                pattern: pattern.to_owned(),
                reason: "a prefix must end with '/'",
            });
        }
        Self::checked(pattern, true)
    }

    fn checked(pattern: &str, prefix: bool) -> Result<Self, RoutePathError> {
        let error = |reason| RoutePathError {
            pattern: pattern.to_owned(),
            reason,
        };
        if !pattern.starts_with('/') {
            return Err(error("a path must start with '/'"));
        }
        let body = pattern.strip_suffix('/').unwrap_or(pattern);
        let mut names = Vec::new();
        for segment in body.split('/').skip(1) {
            if segment.is_empty() && body.len() > 1 {
                return Err(error("empty segment"));
            }
            if let Some(name) = segment.strip_prefix('{') {
                let Some(name) = name.strip_suffix('}') else {
                    return Err(error("a parameter must be a whole '{name}' segment"));
                };
                if name.is_empty() || !name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
                    return Err(error("a parameter name is letters, digits and '_'"));
                }
                if names.contains(&name) {
                    return Err(error("a parameter name appears twice"));
                }
                names.push(name);
            } else if segment.contains(['{', '}', '*', '?', '#', '%']) {
                return Err(error("a literal segment may not contain { } * ? # %"));
            }
        }
        Ok(Self {
            pattern: pattern.to_owned(),
            prefix,
        })
    }

    /// The pattern as given, e.g. `/api/sessions/{id}`.
    pub fn pattern(&self) -> &str {
        &self.pattern
    }

    /// Whether it matches every path under it.
    pub fn is_prefix(&self) -> bool {
        self.prefix
    }

    /// The parameter names, in order.
    pub fn params(&self) -> Vec<&str> {
        self.pattern
            .split('/')
            .filter_map(|segment| segment.strip_prefix('{')?.strip_suffix('}'))
            .collect()
    }

    /// The pattern with parameter names erased: two routes with the same shape
    /// conflict whatever their parameters are called.
    fn shape(&self) -> String {
        let shape = self
            .pattern
            .split('/')
            .map(|segment| {
                if segment.starts_with('{') {
                    "{}"
                } else {
                    segment
                }
            })
            .collect::<Vec<_>>()
            .join("/");
        if self.prefix {
            format!("{shape}*")
        } else {
            shape
        }
    }
}

/// What the OpenAPI document says about one method of a route (API-5): generated from
/// Rust types, never hand-written.
#[derive(Debug, Clone)]
pub struct RouteDoc {
    /// One line: what the operation does.
    pub summary: String,
    /// The JSON Schema (2020-12, as OpenAPI 3.1 uses) of the JSON request body, if any.
    pub request: Option<serde_json::Value>,
    /// The media type of a successful response (`application/json`, `text/event-stream`,
    /// `application/x-ndjson`, `text/html`, ...).
    pub response_type: String,
    /// The JSON Schema of a successful JSON response, if it is JSON.
    pub response: Option<serde_json::Value>,
    /// The query parameters: `(name, description)`.
    pub query: Vec<(String, String)>,
}

impl RouteDoc {
    /// An operation with `summary` and no documented body yet.
    pub fn new(summary: impl Into<String>) -> Self {
        Self {
            summary: summary.into(),
            request: None,
            response_type: "application/json".to_owned(),
            response: None,
            query: Vec::new(),
        }
    }

    /// Documents a JSON request body of type `T`.
    pub fn request<T: schemars::JsonSchema>(mut self) -> Self {
        self.request = Some(schema_of::<T>());
        self
    }

    /// Documents a JSON response body of type `T`.
    pub fn response<T: schemars::JsonSchema>(mut self) -> Self {
        self.response_type = "application/json".to_owned();
        self.response = Some(schema_of::<T>());
        self
    }

    /// Documents a non-JSON response of `media_type`.
    pub fn response_media(mut self, media_type: impl Into<String>) -> Self {
        self.response_type = media_type.into();
        self.response = None;
        self
    }

    /// Documents a query parameter.
    pub fn query(mut self, name: impl Into<String>, description: impl Into<String>) -> Self {
        self.query.push((name.into(), description.into()));
        self
    }
}

/// The JSON Schema of `T`, as a JSON value for the OpenAPI document.
pub fn schema_of<T: schemars::JsonSchema>() -> serde_json::Value {
    serde_json::Value::from(schemars::schema_for!(T))
}

/// A request as a handler sees it: it has passed the fence, authentication, and the
/// size and media-type limits.
#[derive(Debug, Clone)]
pub struct RouteRequest {
    /// The method.
    pub method: Method,
    /// The full path as sent (percent-decoding is the handler's business).
    pub path: String,
    /// The `{name}` parameters of the route's pattern, by name.
    pub params: BTreeMap<String, String>,
    /// For a prefix route: the path after the prefix.
    pub rest: String,
    /// The raw query string, without `?` (empty when none).
    pub query: String,
    /// Request headers, names in lower case, in the order sent.
    pub headers: Vec<(String, String)>,
    /// The body (at most the route's limit: [`RouteSpec::body_limit`], else the
    /// server's 1 MiB).
    pub body: Vec<u8>,
    /// Who the request authenticated as.
    pub caller: Caller,
    /// Cancelled when the client goes away (its connection closed) before the handler
    /// returned. A handler doing long work only for this client (the gateway's whole
    /// answer) may stop; one that must finish what it started ignores it.
    pub gone: ccare_llm::CancellationToken,
}

/// Who a request authenticated as.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Caller {
    /// The server's token (bearer or a browser login), or a public route.
    Server,
    /// A bearer that is not the server's token, on a route that accepts client keys
    /// ([`RouteSpec::client_keys`]) while `[gateway] pass_through_keys` is on: the
    /// client's own API key, forwarded upstream for its requests (GW-1). Its `Debug`
    /// is redacted.
    ClientKey(ccare_llm::ApiCredential),
}

impl RouteRequest {
    /// A path parameter, or a 400 reply naming it.
    pub fn param(&self, name: &str) -> Result<&str, RouteReply> {
        self.params.get(name).map(String::as_str).ok_or_else(|| {
            RouteReply::error(400, BAD_REQUEST, format!("missing path parameter {name}"))
        })
    }

    /// The first header of that name (lower case).
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(key, _)| key == name)
            .map(|(_, value)| value.as_str())
    }

    /// The query string decoded into `T`, or a 400 reply saying what was wrong.
    pub fn query<T: DeserializeOwned>(&self) -> Result<T, RouteReply> {
        serde_urlencoded::from_str(&self.query)
            .map_err(|error| RouteReply::error(400, BAD_REQUEST, format!("query string: {error}")))
    }

    /// The body decoded as JSON into `T`, or a 400 reply saying what was wrong and
    /// where (line and column).
    pub fn json<T: DeserializeOwned>(&self) -> Result<T, RouteReply> {
        serde_json::from_slice(&self.body)
            .map_err(|error| RouteReply::error(400, BAD_REQUEST, format!("request body: {error}")))
    }
}

/// One server-sent event (API-3).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct SseFrame {
    /// `event:`; none for the default `message` type.
    pub event: Option<String>,
    /// `id:`, which a reconnecting client sends back as `Last-Event-ID`.
    pub id: Option<String>,
    /// `data:` (may contain newlines; the server splits them into lines).
    pub data: String,
}

/// A reply's body.
pub enum ReplyBody {
    /// No body.
    Empty,
    /// A serialized JSON document.
    Json(Vec<u8>),
    /// Bytes of a given media type.
    Bytes {
        /// The `content-type`.
        content_type: String,
        /// The body.
        bytes: Vec<u8>,
    },
    /// A body streamed in chunks of a given media type (e.g. JSONL of an export).
    Stream {
        /// The `content-type`.
        content_type: String,
        /// The chunks.
        chunks: BoxStream<'static, Vec<u8>>,
    },
    /// A `text/event-stream`; the server adds keep-alive comments (API-3).
    Events(BoxStream<'static, SseFrame>),
}

impl fmt::Debug for ReplyBody {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ReplyBody::Empty => formatter.write_str("Empty"),
            ReplyBody::Json(bytes) => write!(formatter, "Json({} bytes)", bytes.len()),
            ReplyBody::Bytes {
                content_type,
                bytes,
            } => write!(formatter, "Bytes({content_type}, {} bytes)", bytes.len()),
            ReplyBody::Stream { content_type, .. } => write!(formatter, "Stream({content_type})"),
            ReplyBody::Events(_) => formatter.write_str("Events"),
        }
    }
}

/// A handler's answer.
#[derive(Debug)]
pub struct RouteReply {
    /// The HTTP status code.
    pub status: u16,
    /// Extra response headers (the server adds its security headers itself).
    pub headers: Vec<(String, String)>,
    /// The body.
    pub body: ReplyBody,
}

/// The JSON error body every route uses (H-HTTP-4, API-5): `{error, message}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, serde::Deserialize, schemars::JsonSchema)]
pub struct ErrorBody {
    /// The machine-readable code (the CLI's codes, e.g. `SESSION_BUSY`).
    pub error: String,
    /// What was wrong, for people.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
}

impl RouteReply {
    /// A JSON reply of `value` with `status`. A value that cannot be serialized (a
    /// map with non-string keys) is a 500 naming the failure, never a panic.
    pub fn json<T: Serialize + ?Sized>(status: u16, value: &T) -> Self {
        match serde_json::to_vec(value) {
            Ok(bytes) => Self {
                status,
                headers: Vec::new(),
                body: ReplyBody::Json(bytes),
            },
            Err(error) => Self::error(500, "internal", format!("serializing the reply: {error}")),
        }
    }

    /// An error reply `{error: code, message}`.
    pub fn error(status: u16, code: impl Into<String>, message: impl Into<String>) -> Self {
        let body = ErrorBody {
            error: code.into(),
            message: Some(message.into()),
        };
        let bytes = serde_json::to_vec(&body).unwrap_or_default();
        Self {
            status,
            headers: Vec::new(),
            body: ReplyBody::Json(bytes),
        }
    }

    /// Bytes of `content_type` with `status`.
    pub fn bytes(status: u16, content_type: impl Into<String>, bytes: Vec<u8>) -> Self {
        Self {
            status,
            headers: Vec::new(),
            body: ReplyBody::Bytes {
                content_type: content_type.into(),
                bytes,
            },
        }
    }

    /// A 200 streamed body of `content_type`.
    pub fn stream(content_type: impl Into<String>, chunks: BoxStream<'static, Vec<u8>>) -> Self {
        Self {
            status: 200,
            headers: Vec::new(),
            body: ReplyBody::Stream {
                content_type: content_type.into(),
                chunks,
            },
        }
    }

    /// A 200 event stream.
    pub fn events(frames: BoxStream<'static, SseFrame>) -> Self {
        Self {
            status: 200,
            headers: Vec::new(),
            body: ReplyBody::Events(frames),
        }
    }

    /// Adds a response header.
    pub fn with_header(mut self, name: impl Into<String>, value: impl Into<String>) -> Self {
        self.headers.push((name.into(), value.into()));
        self
    }
}

/// The future a handler returns.
pub type RouteFuture = Pin<Box<dyn Future<Output = RouteReply> + Send>>;

/// Turns a request into a reply. Implemented for every
/// `Fn(RouteRequest) -> impl Future<Output = RouteReply>` closure.
pub trait RouteHandler: Send + Sync + 'static {
    /// Answers one request.
    fn handle(&self, request: RouteRequest) -> RouteFuture;
}

impl<F, Fut> RouteHandler for F
where
    F: Fn(RouteRequest) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = RouteReply> + Send + 'static,
{
    fn handle(&self, request: RouteRequest) -> RouteFuture {
        Box::pin(self(request))
    }
}

/// A route to register.
#[derive(Clone)]
pub struct RouteSpec {
    /// Where it answers.
    pub path: RoutePath,
    /// Whether it needs authentication.
    pub auth: RouteAuth,
    /// The methods it answers, each with its OpenAPI operation.
    pub methods: BTreeMap<Method, RouteDoc>,
    /// Whether a bearer that is not the server's token is accepted as the client's
    /// own API key ([`Caller::ClientKey`]): the gateway's routes while `[gateway]
    /// pass_through_keys` is on (GW-1). Every other route requires the server token.
    pub client_keys: bool,
    /// The largest body it reads, in bytes; `None`: the server's limit (1 MiB,
    /// H-HTTP-1). The gateway's chat route takes more: a client sends its whole
    /// transcript on every request, and a long session's passes 1 MiB.
    pub body_limit: Option<usize>,
    /// How the server's own refusals of a request for this route (the fence, 401,
    /// 405, 413, 415: `{error, message}` replies) are rewritten before they go out;
    /// `None`: as they are. The gateway's routes answer in OpenAI's error shape (GW-6),
    /// so a client's SDK reads them as it reads the gateway's own.
    pub refusals: Option<fn(RouteReply) -> RouteReply>,
    /// What answers.
    pub handler: Arc<dyn RouteHandler>,
}

impl fmt::Debug for RouteSpec {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        formatter
            .debug_struct("RouteSpec")
            .field("path", &self.path)
            .field("auth", &self.auth)
            .field("client_keys", &self.client_keys)
            .field("body_limit", &self.body_limit)
            .field("refusals", &self.refusals.is_some())
            .field("methods", &self.methods.keys().collect::<Vec<_>>())
            .finish_non_exhaustive()
    }
}

impl RouteSpec {
    /// An authenticated route at `path` with no methods yet.
    pub fn new(path: RoutePath, handler: Arc<dyn RouteHandler>) -> Self {
        Self {
            path,
            auth: RouteAuth::Required,
            methods: BTreeMap::new(),
            client_keys: false,
            body_limit: None,
            refusals: None,
            handler,
        }
    }

    /// Rewrites the server's own refusals of this route's requests with `reshape`
    /// ([`RouteSpec::refusals`]).
    pub fn refusals(mut self, reshape: fn(RouteReply) -> RouteReply) -> Self {
        self.refusals = Some(reshape);
        self
    }

    /// Reads bodies of up to `bytes` instead of the server's limit (a larger body is
    /// 413 `request-too-large`).
    pub fn body_limit(mut self, bytes: usize) -> Self {
        self.body_limit = Some(bytes);
        self
    }

    /// Answers `method`, documented by `doc`.
    pub fn method(mut self, method: Method, doc: RouteDoc) -> Self {
        self.methods.insert(method, doc);
        self
    }

    /// Accepts a bearer that is not the server's token as the client's own API key
    /// (GW-1 `[gateway] pass_through_keys`): the handler sees
    /// [`Caller::ClientKey`].
    pub fn client_keys(mut self) -> Self {
        self.client_keys = true;
        self
    }

    /// Makes the route public (login only: H-HTTP-2).
    pub fn public(mut self) -> Self {
        self.auth = RouteAuth::Public;
        self
    }
}

/// A route could not be registered.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RouteError {
    /// Another route has the same path pattern (`ROUTE_CONFLICT`).
    #[error("{ROUTE_CONFLICT}: {pattern} is already registered by {holder}")]
    Conflict {
        /// The pattern.
        pattern: String,
        /// Who registered it first.
        holder: String,
    },
    /// The route answers no method.
    #[error("route {0}: no methods")]
    NoMethods(String),
    /// The route's path pattern is not one ([`RoutePath::exact`] refused it).
    #[error(transparent)]
    Path(#[from] RoutePathError),
}

impl RouteError {
    /// The machine-readable code.
    pub fn code(&self) -> &'static str {
        match self {
            RouteError::Conflict { .. } => ROUTE_CONFLICT,
            RouteError::NoMethods(_) | RouteError::Path(_) => "ROUTE_INVALID",
        }
    }
}

/// A registered route and its owner.
#[derive(Debug, Clone)]
pub struct RouteEntry {
    /// The plugin name, or `host` / `server`.
    pub owner: String,
    /// The route.
    pub spec: RouteSpec,
}

/// The route table of a host. Cheap to clone; clones share it.
#[derive(Debug, Clone, Default)]
pub struct Routes {
    inner: Arc<RoutesInner>,
}

#[derive(Debug, Default)]
struct RoutesInner {
    entries: RwLock<Vec<RouteEntry>>,
    generation: AtomicU64,
}

impl Routes {
    /// Registers `spec` for `owner`; a path with the same shape (parameter names
    /// aside) already registered is [`RouteError::Conflict`].
    pub fn register(&self, owner: &str, spec: RouteSpec) -> Result<(), RouteError> {
        if spec.methods.is_empty() {
            return Err(RouteError::NoMethods(spec.path.pattern().to_owned()));
        }
        let shape = spec.path.shape();
        let mut entries = self.inner.entries.write();
        if let Some(held) = entries
            .iter()
            .find(|entry| entry.spec.path.shape() == shape)
        {
            return Err(RouteError::Conflict {
                pattern: spec.path.pattern().to_owned(),
                holder: held.owner.clone(),
            });
        }
        entries.push(RouteEntry {
            owner: owner.to_owned(),
            spec,
        });
        self.inner.generation.fetch_add(1, Ordering::Release);
        Ok(())
    }

    /// Removes every route `owner` registered; returns how many.
    pub fn remove_owner(&self, owner: &str) -> usize {
        let mut entries = self.inner.entries.write();
        let before = entries.len();
        entries.retain(|entry| entry.owner != owner);
        let removed = before - entries.len();
        if removed > 0 {
            self.inner.generation.fetch_add(1, Ordering::Release);
        }
        removed
    }

    /// Every registered route, in registration order.
    pub fn list(&self) -> Vec<RouteEntry> {
        self.inner.entries.read().clone()
    }

    /// A counter that changes whenever the table does.
    pub fn generation(&self) -> u64 {
        self.inner.generation.load(Ordering::Acquire)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    async fn ok(_: RouteRequest) -> RouteReply {
        RouteReply::json(200, &"ok")
    }

    fn spec(pattern: &str) -> RouteSpec {
        let path = match RoutePath::exact(pattern) {
            Ok(path) => path,
            Err(error) => panic!("{error}"),
        };
        RouteSpec::new(path, Arc::new(ok)).method(Method::Get, RouteDoc::new("test"))
    }

    #[test]
    fn h_http_1_a_route_with_the_same_shape_conflicts_and_unmount_frees_it() {
        let routes = Routes::default();
        assert_eq!(routes.register("a", spec("/x/{id}")), Ok(()));
        let conflict = routes.register("b", spec("/x/{name}"));
        assert_eq!(
            conflict.as_ref().map_err(RouteError::code),
            Err(ROUTE_CONFLICT)
        );
        assert_eq!(
            conflict.map_err(|error| error.to_string()),
            Err("ROUTE_CONFLICT: /x/{name} is already registered by a".to_owned())
        );
        assert_eq!(routes.register("b", spec("/x/{id}/y")), Ok(()));
        let generation = routes.generation();
        assert_eq!(routes.remove_owner("a"), 1);
        assert_ne!(routes.generation(), generation);
        assert_eq!(routes.register("b", spec("/x/{name}")), Ok(()));
    }

    #[test]
    fn h_http_1_bad_patterns_are_refused_with_the_reason() {
        for (pattern, reason) in [
            ("x", "a path must start with '/'"),
            ("/a//b", "empty segment"),
            ("/a/{id", "a parameter must be a whole '{name}' segment"),
            ("/a/{i-d}", "a parameter name is letters, digits and '_'"),
            ("/a/{id}/{id}", "a parameter name appears twice"),
            ("/a*", "a literal segment may not contain { } * ? # %"),
        ] {
            assert_eq!(
                RoutePath::exact(pattern).map_err(|error| error.reason),
                Err(reason),
                "{pattern}"
            );
        }
        assert!(RoutePath::prefix("/ui").is_err());
        assert!(RoutePath::exact("/").is_ok());
        assert_eq!(
            RoutePath::exact("/api/sessions/{id}/events").map(|path| path
                .params()
                .into_iter()
                .map(str::to_owned)
                .collect::<Vec<_>>()),
            Ok(vec!["id".to_owned()])
        );
    }
}
