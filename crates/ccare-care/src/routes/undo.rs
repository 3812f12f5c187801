//! `POST /context-care/actions/{op}/undo?sessionId` (CC-EXT-3): undoes one compaction
//! ([`crate::undo`]) through the session's driver — the agent actor this server runs
//! for it (started, taking the lease, when it is not running), installed on the host
//! as its session driver. Answered 200 with the [`UndoOutcome`] once the undo events
//! and the journal record are durable; 409 with the refusal's code and reason
//! (`UNDO_OVER_SOFT_THRESHOLD`, `ALREADY_UNDONE`, `UNDO_NOT_LATEST`, `SESSION_BUSY`,
//! …); 404 `unknown-action` / `session-unavailable`; 503 when no driver is installed.
//! No body is read.

use std::sync::Arc;

use ccare_agent::driver::{DriverError, DriverSlot};
use ccare_agent::routes::{
    Method, RouteDoc, RouteHandler, RoutePath, RoutePathError, RouteReply, RouteRequest, RouteSpec,
};

use super::detail::{session, unknown_action};
use super::{Management, SESSION_UNAVAILABLE};
use crate::undo::{UndoError, UndoOutcome};

/// The route's path.
pub const PATH: &str = "/context-care/actions/{op}/undo";
/// The code when this process runs no session driver (nothing could append).
pub const NO_DRIVER: &str = "driver-unavailable";

/// The route, answering `POST`.
pub(crate) fn route(
    management: Management,
    driver: DriverSlot,
) -> Result<RouteSpec, RoutePathError> {
    let handler: Arc<dyn RouteHandler> = Arc::new(move |request: RouteRequest| {
        let management = management.clone();
        let driver = driver.clone();
        async move {
            match undo(&management, &driver, &request).await {
                Ok(outcome) => RouteReply::json(200, &outcome),
                Err(reply) => reply,
            }
        }
    });
    Ok(RouteSpec::new(RoutePath::exact(PATH)?, handler).method(
        Method::Post,
        RouteDoc::new(
            "Undoes one compaction (summary, prune, deep rest) by appending a restore; only if the restored request stays within the soft threshold",
        )
        .response::<UndoOutcome>()
        .query("sessionId", "The session (required)"),
    ))
}

async fn undo(
    management: &Management,
    driver: &DriverSlot,
    request: &RouteRequest,
) -> Result<UndoOutcome, RouteReply> {
    let id = session(request)?;
    let op = request.param("op").unwrap_or_default().to_owned();
    // An unknown session or action is answered without starting an actor.
    management.load(&id).await?;
    let Some(driver) = driver.get() else {
        return Err(RouteReply::error(
            503,
            NO_DRIVER,
            "this process drives no sessions, so nothing can be appended",
        ));
    };
    let driven = driver.drive(&id).await.map_err(|error| match error {
        DriverError::UnknownSession(_) => {
            RouteReply::error(404, SESSION_UNAVAILABLE, format!("no session {id}"))
        }
        DriverError::Busy(message) => RouteReply::error(409, "SESSION_BUSY", message),
        DriverError::Failed(message) => RouteReply::error(503, "session-unavailable", message),
    })?;
    let outcome = management.care.undo(&driven.session, &op).await;
    drop(driven);
    outcome.map_err(|error| match &error {
        UndoError::UnknownAction { .. } => unknown_action(&op, &id),
        refused if refused.is_refusal() => {
            RouteReply::error(409, refused.code(), refused.to_string())
        }
        failed => RouteReply::error(500, failed.code(), failed.to_string()),
    })
}
