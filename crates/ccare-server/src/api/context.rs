//! API-4: context care's view of a session — `GET /api/sessions/{id}/context`, the JSON
//! `ccare context status --json` prints (a fresh sample of what the next request would
//! cost; nothing is appended).
//!
//! The sample is taken on the session's actor (started from the store when it is not
//! running, which takes its lease: a session another process drives is 409
//! `SESSION_BUSY`), so it reads the log exactly as the next boundary will. A profile
//! that turns context care off answers 409 `CONTEXT_CARE_OFF`.
//!
//! `GET /api/sessions/{id}/context/series` (for UI-7's charts) is read-only: the log is
//! read without opening the session (no lease, no repair, nothing appended) and the
//! points and operations come from the request journal ([`ccare_care::series`]), so a
//! session this server or another process drives is charted while it runs.

use ccare_agent::routes::{Method, RouteDoc, RouteError, RouteReply, RouteRequest, RouteSpec};
use ccare_app::WhenBusy;
use ccare_care::report::ContextReport;
use ccare_care::series::Series;

use crate::ServerContext;
use crate::api::errors::{self, CONTEXT_CARE_OFF};
use crate::api::{handler, path};

/// The routes of API-4.
pub(super) fn routes(context: &ServerContext) -> Result<Vec<RouteSpec>, RouteError> {
    Ok(vec![
        RouteSpec::new(
            path("/api/sessions/{id}/context")?,
            handler(context, |context, request| async move {
                status(&context, &request).await
            }),
        )
        .method(
            Method::Get,
            RouteDoc::new(
                "A fresh context-care sample of the session: what `ccare context status --json` prints",
            )
            .response::<ContextReport>(),
        ),
        RouteSpec::new(
            path("/api/sessions/{id}/context/series")?,
            handler(context, |context, request| async move {
                series(&context, &request).await
            }),
        )
        .method(
            Method::Get,
            RouteDoc::new(
                "The session's context series for charts: one point per request boundary (input tokens, capacity, budget, fatigue and wakefulness %) and the maintenance operations between them; read-only",
            )
            .response::<Series>(),
        ),
    ])
}

/// 409 `CONTEXT_CARE_OFF`: the profile does not mount context care.
fn care_off(context: &ServerContext) -> RouteReply {
    RouteReply::error(
        409,
        CONTEXT_CARE_OFF,
        format!(
            "context-care is not mounted: the {} profile turns it off ([plugins.context-care] enabled = false)",
            context.booted.profile.id
        ),
    )
}

/// 503 `CONTEXT_CARE_OFF`: configured, but the plugin did not mount.
fn care_unmounted() -> RouteReply {
    RouteReply::error(
        503,
        CONTEXT_CARE_OFF,
        "context-care was configured but is not mounted",
    )
}

async fn series(context: &ServerContext, request: &RouteRequest) -> RouteReply {
    let id = match request.param("id").and_then(errors::session_id) {
        Ok(id) => id,
        Err(reply) => return reply,
    };
    let Some(care) = &context.booted.care else {
        return care_off(context);
    };
    let loaded = match context.booted.host.sessions().load(&id).await {
        Ok(loaded) => loaded,
        Err(error) => return errors::session_error(&error),
    };
    match care.series(&loaded.log).await {
        Some(Ok(series)) => RouteReply::json(200, &series),
        Some(Err(error)) => RouteReply::error(503, "CONTEXT_CARE_FAILED", error.to_string()),
        None => care_unmounted(),
    }
}

async fn status(context: &ServerContext, request: &RouteRequest) -> RouteReply {
    let id = match request.param("id").and_then(errors::session_id) {
        Ok(id) => id,
        Err(reply) => return reply,
    };
    let Some(care) = &context.booted.care else {
        return care_off(context);
    };
    let handle = match context.agents.get_or_start(&id, WhenBusy::Fail).await {
        Ok(handle) => handle,
        Err(error) => return errors::app_error(&error),
    };
    match care.report(handle.session()).await {
        Some(Ok(report)) => RouteReply::json(200, &report),
        Some(Err(error)) => RouteReply::error(500, "CONTEXT_CARE_FAILED", error.to_string()),
        None => care_unmounted(),
    }
}
