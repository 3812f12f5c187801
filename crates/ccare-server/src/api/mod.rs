//! The sessions API (server.md API-1..4): sessions, commands, the event stream and
//! context, as routes in the host's route table, over the `Agents` registry.
//!
//! Modules, one job each: `sessions` (API-1: list, create, one session, export, fork),
//! `commands` (API-2: messages, tool results, cancel), `events` (API-3: the SSE
//! stream), `context` (API-4), `info` (the served profile and its locale, for the web
//! UI), `types` (the bodies with their schemas), `errors` (the engine's errors as
//! `{error, message}` replies with the CLI's codes).
//!
//! Every route is authenticated ([`RouteSpec::new`]'s default); the host's fence,
//! limits and headers stand in front of all of them.

pub(crate) mod commands;
mod context;
pub mod errors;
pub mod events;
pub mod info;
pub mod sessions;
pub mod types;

use std::future::Future;
use std::sync::Arc;

use ccare_agent::routes::{RouteError, RouteHandler, RoutePath, RouteReply, RouteRequest, Routes};
use serde::de::DeserializeOwned;

use crate::ServerContext;

/// The owner name the server's own routes are registered under.
pub const OWNER: &str = "server";

/// Registers the sessions API's routes.
pub fn register(routes: &Routes, context: &ServerContext) -> Result<(), RouteError> {
    let specs = [
        sessions::routes(context)?,
        commands::routes(context)?,
        events::routes(context)?,
        context::routes(context)?,
        info::routes(context)?,
    ];
    for spec in specs.into_iter().flatten() {
        routes.register(OWNER, spec)?;
    }
    Ok(())
}

/// An exact route path.
fn path(pattern: &str) -> Result<RoutePath, RouteError> {
    Ok(RoutePath::exact(pattern)?)
}

/// A route handler calling `answer` with the server's context.
fn handler<F, Fut>(context: &ServerContext, answer: F) -> Arc<dyn RouteHandler>
where
    F: Fn(ServerContext, RouteRequest) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = RouteReply> + Send + 'static,
{
    let context = context.clone();
    Arc::new(move |request| answer(context.clone(), request))
}

/// The JSON body as `T`, or `T::default()` when the body is empty (optional bodies).
fn body_or_default<T: DeserializeOwned + Default>(request: &RouteRequest) -> Result<T, RouteReply> {
    if request.body.iter().all(u8::is_ascii_whitespace) {
        Ok(T::default())
    } else {
        request.json()
    }
}
