//! The HTTP host: serving the route table behind the fence and auth.
//!
//! - [`server`]: [`Server::start`] / [`Server::shutdown`], the lifecycle.
//! - [`dispatch`]: the one pipeline every request passes (its doc gives the order).
//! - [`table`]: matching a path against the table, recompiled when it changes.
//! - [`fence`]: `Host` / `Origin` / `Sec-Fetch-Site` (H-HTTP-3).
//! - [`auth`]: the bearer token and the login cookie (H-HTTP-2).
//! - [`token`]: where the token comes from (`[http] token_env`, `$CCARE_HOME/http-token`).
//! - [`reply`]: responses, SSE encoding and keep-alives, the security headers.
//! - [`own`]: the host's own routes (login, OpenAPI).
//! - [`openapi`]: the OpenAPI 3.1 document (API-5).

pub(crate) mod auth;
pub(crate) mod dispatch;
pub(crate) mod error;
pub(crate) mod fence;
pub(crate) mod openapi;
pub(crate) mod own;
pub(crate) mod reply;
pub(crate) mod server;
pub(crate) mod table;
pub(crate) mod token;

pub use auth::{SESSION_COOKIE, Token};
pub use dispatch::BODY_LIMIT;
pub use error::ServerError;
pub use openapi::{OpenApi, PREFIX_REST, document, openapi_path};
pub use own::{AUTH_SESSION, LoginReply, LoginRequest, OPENAPI};
pub use reply::KEEP_ALIVE as KEEP_ALIVE_COMMENT;
pub use server::{DRAIN, KEEP_ALIVE, ServeOptions, Server, Shutdown};
pub use token::{TOKEN_FILE, TokenSource, resolve_token};
