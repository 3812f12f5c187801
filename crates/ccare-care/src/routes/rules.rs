//! `GET|PATCH /context-care/rules?sessionId` (watch-rules-ui.md RC-4, RC-9, §9): a
//! session's rule controls as the UI shows them, with the live context-care sample,
//! and one change to them.
//!
//! A session no actor runs has its controls loaded from the store for the read (the
//! row only: no actor is started, no lease taken). A PATCH carries `revision` and
//! exactly one of a toggle, a pause or a reset (`PatchRequest`, at most 65536 bytes);
//! it is answered only once the compare-and-swap is durable (`Controls::patch` awaits
//! it), with the snapshot after it. Errors: 400 `invalid-control-request`, 404
//! `session-unavailable` / `rule-unavailable` / `action-unavailable`, 409
//! `revision-conflict`, 413 `request-too-large`, 503 `storage-unavailable` /
//! `controls-closed`.

use std::sync::Arc;

use ccare_agent::controls::{ControlsError, Patch, PatchRequest, Snapshot};
use ccare_agent::routes::{
    Method, RouteDoc, RouteHandler, RoutePath, RoutePathError, RouteReply, RouteRequest, RouteSpec,
};
use ccare_core::SessionId;
use serde::Serialize;

use super::query::{self, INVALID_QUERY};
use super::{LiveSample, Management};

/// The route's path.
pub const PATH: &str = "/context-care/rules";
/// The largest PATCH body (HR §9 table), below the server's 1 MiB.
pub const MAX_BODY: usize = 65_536;
/// The code of a PATCH body that is not one valid change (HR §9 table).
pub const INVALID_CONTROL_REQUEST: &str = "invalid-control-request";

/// A session's controls with the live sample (RC-9).
#[derive(Debug, Clone, PartialEq, Serialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RulesSnapshot {
    /// The controls: `sessionId`, `revision`, `storageError?`, `sources`.
    #[serde(flatten)]
    pub controls: Snapshot,
    /// The live context-care sample.
    pub sample: LiveSample,
}

/// The route, answering `GET` and `PATCH`.
pub(crate) fn route(management: Management) -> Result<RouteSpec, RoutePathError> {
    let handler: Arc<dyn RouteHandler> = Arc::new(move |request: RouteRequest| {
        let management = management.clone();
        async move {
            let answered = match request.method {
                Method::Patch => patch(&management, &request).await,
                _ => snapshot(&management, &request).await,
            };
            match answered {
                Ok(snapshot) => RouteReply::json(200, &snapshot),
                Err(reply) => reply,
            }
        }
    });
    Ok(RouteSpec::new(RoutePath::exact(PATH)?, handler)
        .method(
            Method::Get,
            RouteDoc::new("A session's rule controls with the live context-care sample")
                .response::<RulesSnapshot>()
                .query("sessionId", "The session (required)"),
        )
        .method(
            Method::Patch,
            RouteDoc::new(
                "Changes one rule of a session's controls against its revision; answered once durable",
            )
            .request::<PatchRequest>()
            .response::<RulesSnapshot>()
            .query("sessionId", "The session (required)"),
        ))
}

/// The session of the query (`sessionId`, nothing else).
fn session(request: &RouteRequest) -> Result<SessionId, RouteReply> {
    let pairs = query::pairs(request, INVALID_QUERY)?;
    query::only(&pairs, &["sessionId"], INVALID_QUERY)?;
    query::session_id(&pairs, INVALID_QUERY)
}

async fn snapshot(
    management: &Management,
    request: &RouteRequest,
) -> Result<RulesSnapshot, RouteReply> {
    let id = session(request)?;
    let loaded = management.load(&id).await?;
    management.ensure_controls(&id).await;
    Ok(RulesSnapshot {
        controls: management.care.controls.snapshot(&id),
        sample: management.sample(&loaded),
    })
}

async fn patch(
    management: &Management,
    request: &RouteRequest,
) -> Result<RulesSnapshot, RouteReply> {
    if request.body.len() > MAX_BODY {
        return Err(RouteReply::error(
            413,
            "request-too-large",
            format!(
                "a rules patch is at most {MAX_BODY} bytes, got {}",
                request.body.len()
            ),
        ));
    }
    let id = session(request)?;
    let body: PatchRequest = serde_json::from_slice(&request.body).map_err(|error| {
        RouteReply::error(
            400,
            INVALID_CONTROL_REQUEST,
            format!("request body: {error}"),
        )
    })?;
    let change = Patch::try_from(body).map_err(refusal)?;
    let loaded = management.load(&id).await?;
    management.ensure_controls(&id).await;
    let controls = &management.care.controls;
    controls
        .patch(&id, change, loaded.log.head())
        .await
        .map_err(refusal)?;
    Ok(RulesSnapshot {
        controls: controls.snapshot(&id),
        sample: management.sample(&loaded),
    })
}

/// A refused change as its HTTP reply (RC-4, RC-6).
fn refusal(error: ControlsError) -> RouteReply {
    let status = match &error {
        ControlsError::RevisionConflict { .. } => 409,
        ControlsError::RuleUnavailable { .. }
        | ControlsError::ReadOnly { .. }
        | ControlsError::ActionUnavailable { .. } => 404,
        ControlsError::ControlsClosed | ControlsError::StorageUnavailable { .. } => 503,
        _ => 400,
    };
    let code = if status == 400 {
        INVALID_CONTROL_REQUEST
    } else {
        error.code()
    };
    RouteReply::error(status, code, error.to_string())
}
