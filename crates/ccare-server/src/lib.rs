//! context-care's HTTP host (spec host.md H-HTTP-1..4, server.md §2): what `ccare serve`
//! runs.
//!
//! Every route — the server's own, and those plugins registered while they mounted —
//! lives in the host's route table (`ccare_agent::routes`). The server serves that
//! table and nothing else, and puts the same checks in front of every route: the
//! Host/Origin/`Sec-Fetch-Site` fence, then authentication (bearer token or session
//! cookie), the 1 MiB body limit, JSON-only writes, 405 with `Allow`, and the security
//! headers. A handler never sees a request that failed them (enforced by construction:
//! handlers are framework-free and reachable only through the dispatcher).
//!
//! Modules: `host` (the dispatcher, fence, auth, token file, OpenAPI document and the
//! server's lifecycle) and `api` (the sessions API over the `Agents` registry,
//! API-1..4).

pub mod api;
pub mod gateway;
mod host;
mod ui;

pub use host::{
    AUTH_SESSION, BODY_LIMIT, DRAIN, KEEP_ALIVE, KEEP_ALIVE_COMMENT, LoginReply, LoginRequest,
    OPENAPI, OpenApi, PREFIX_REST, SESSION_COOKIE, ServeOptions, Server, ServerError, Shutdown,
    TOKEN_FILE, Token, TokenSource, document, openapi_path, resolve_token,
};

use std::sync::Arc;

use ccare_app::{Agents, Booted};

/// What the server's own route handlers share: the default profile's host and its
/// session actors.
#[derive(Clone)]
pub struct ServerContext {
    /// The booted default profile.
    pub booted: Arc<Booted>,
    /// The session actors every front end goes through (ACT-1).
    pub agents: Agents,
}

impl std::fmt::Debug for ServerContext {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter
            .debug_struct("ServerContext")
            .field("booted", &self.booted)
            .finish_non_exhaustive()
    }
}
