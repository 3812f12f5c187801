//! `GET /context-care/actions?sessionId&limit&offset` (watch-rules-ui.md §9, HR-2): the
//! journal's maintenance records of a session (CC-JNL-3, the records `ccare context
//! actions --json` prints), oldest first, paged; with what admits automatic
//! maintenance now ([`Admission`]) and the live sample ([`LiveSample`]).
//!
//! The records hold ids, seqs, token counts, reasons and errors: never a system
//! prompt, a tool schema or a raw model output (HR-2).

use std::sync::Arc;

use ccare_agent::routes::{
    Method, RouteDoc, RouteHandler, RoutePath, RoutePathError, RouteReply, RouteRequest, RouteSpec,
};
use ccare_core::SessionId;
use serde::Serialize;

use super::query::{self, INVALID_QUERY, Page};
use super::{LiveSample, Management};
use crate::care::CONTROL_SOURCE;
use crate::report::ActionRecord;

/// The route's path.
pub const PATH: &str = "/context-care/actions";
/// The code of a journal that cannot be read (HR §9 table).
pub const JOURNAL_UNAVAILABLE: &str = "journal-unavailable";

/// The context-care actions automatic maintenance may take, as `(rule, action)`
/// (CC-CTL-1): what [`Admission::actions`] reports.
const MAINTENANCE_ACTIONS: [(&str, &str); 5] = [
    ("maintenance", "prune"),
    ("maintenance", "summary"),
    ("overflow", "prune"),
    ("overflow", "summary"),
    ("overflow", "retry"),
];

/// One page of a session's maintenance actions.
#[derive(Debug, Clone, PartialEq, Serialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ActionsPage {
    /// What admits automatic maintenance now.
    pub admission: Admission,
    /// The live sample.
    pub current_state: LiveSample,
    /// The page's records, oldest first.
    pub actions: Vec<ActionRecord>,
    /// How many records the session has.
    pub total: u64,
    /// The index of the page's first record.
    pub offset: u64,
    /// The offset of the next page; `null` on the last.
    pub next_offset: Option<u64>,
}

/// What admits automatic maintenance in a session now: whether the hysteresis
/// controller is armed (CC-HYS-1) and each maintenance action's control decision
/// (RC-3, CC-CTL-2).
#[derive(Debug, Clone, PartialEq, Serialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Admission {
    /// Whether the session's load armed automatic maintenance (it releases below the
    /// release target).
    pub armed: bool,
    /// The context-care maintenance actions and what the controls decide for each.
    pub actions: Vec<ActionAdmission>,
}

/// One maintenance action's control decision.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ActionAdmission {
    /// The rule (`maintenance`, `overflow`).
    pub rule_id: String,
    /// The action (`prune`, `summary`, `retry`).
    pub action_id: String,
    /// Whether it may run now.
    pub enabled: bool,
    /// The decision (`enabled`, `action-disabled`, `rule-paused`, …).
    pub reason: String,
}

/// The route, answering `GET`.
pub(crate) fn route(management: Management) -> Result<RouteSpec, RoutePathError> {
    let handler: Arc<dyn RouteHandler> = Arc::new(move |request: RouteRequest| {
        let management = management.clone();
        async move {
            match page(&management, &request).await {
                Ok(page) => RouteReply::json(200, &page),
                Err(reply) => reply,
            }
        }
    });
    Ok(RouteSpec::new(RoutePath::exact(PATH)?, handler).method(
        Method::Get,
        RouteDoc::new("A session's maintenance actions from the context-care journal, paged")
            .response::<ActionsPage>()
            .query("sessionId", "The session (required)")
            .query("limit", "Records per page, 1..200 (required)")
            .query("offset", "The index of the first record, ≥ 0 (default 0)"),
    ))
}

async fn page(management: &Management, request: &RouteRequest) -> Result<ActionsPage, RouteReply> {
    let pairs = query::pairs(request, INVALID_QUERY)?;
    query::only(&pairs, &["sessionId", "limit", "offset"], INVALID_QUERY)?;
    let id = query::session_id(&pairs, INVALID_QUERY)?;
    let page = Page::of(&pairs)?;
    let loaded = management.load(&id).await?;
    let records = actions(management, &id).await?;
    let (slice, next_offset) = page.slice(&records);
    management.ensure_controls(&id).await;
    Ok(ActionsPage {
        admission: admission_of(management, &id).await?,
        current_state: management.sample(&loaded),
        actions: slice.to_vec(),
        total: records.len() as u64,
        offset: page.offset,
        next_offset,
    })
}

/// The session's maintenance records, oldest first; 500 `journal-unavailable` when the
/// journal cannot be read.
async fn actions(management: &Management, id: &SessionId) -> Result<Vec<ActionRecord>, RouteReply> {
    management
        .care
        .actions_of(id)
        .await
        .map_err(|error| RouteReply::error(500, JOURNAL_UNAVAILABLE, error.to_string()))
}

/// What admits automatic maintenance in the session now (its controls loaded).
pub(super) async fn admission_of(
    management: &Management,
    id: &SessionId,
) -> Result<Admission, RouteReply> {
    let care = &management.care;
    let armed = care
        .armed_now(id)
        .await
        .map_err(|error| RouteReply::error(500, JOURNAL_UNAVAILABLE, error.to_string()))?;
    Ok(Admission {
        armed,
        actions: MAINTENANCE_ACTIONS
            .iter()
            .map(|(rule, action)| {
                let decision = care.controls.decide(id, CONTROL_SOURCE, rule, action);
                ActionAdmission {
                    rule_id: (*rule).to_owned(),
                    action_id: (*action).to_owned(),
                    enabled: decision.is_enabled(),
                    reason: decision.as_str().to_owned(),
                }
            })
            .collect(),
    })
}
