//! The management routes context-care registers while it mounts (watch-rules-ui.md
//! §9, HR-1..3, RC-9; issue 15 item 5), so they exist exactly while the plugin is
//! mounted:
//!
//! - `GET /context-care/actions` ([`actions`]): the journal's maintenance records,
//!   paged, with what admits automatic maintenance now and the live sample;
//! - `GET /context-care/prompts` ([`prompts`]): every prompt, notice and reading
//!   plugins entered into the session, with its provenance, paged, located by `seq`;
//! - `GET|PATCH /context-care/rules` ([`rules`]): the session's rule controls (RC-9)
//!   and one change to them (RC-4);
//! - `GET /context-care/actions/{op}` ([`detail`]): one action, what it replaced
//!   beside the checkpoint text (CC-EXT-3);
//! - `POST /context-care/actions/{op}/undo` ([`undo`]): undoes one compaction through
//!   the session's driver (CC-EXT-3), the one route here that appends.
//!
//! All are authenticated (the server's fence and auth run before a handler) and read
//! sessions with `Sessions::load`, which reads and audits without repairing: a read
//! takes no lease and appends nothing, so a session an actor of this server (or
//! another process) is driving stays readable. Here: the session lookup and the query
//! parsing they share ([`query`]), and the live sample ([`LiveSample`]).

pub mod actions;
pub mod detail;
pub mod prompts;
mod query;
pub mod rules;
pub mod undo;

use std::sync::Arc;

use ccare_agent::routes::{RoutePathError, RouteReply};
use ccare_agent::{MountError, PluginScope};
use ccare_core::SessionId;
use ccare_session::{LoadedSession, SessionError, Sessions};
use serde::Serialize;

use crate::care::Care;
use crate::numeric::{NumericProjection, NumericState};

/// The error code of an unknown session (HR-1).
pub const SESSION_UNAVAILABLE: &str = "session-unavailable";
/// The error code of a store that cannot be read.
pub const STORAGE_UNAVAILABLE: &str = "storage-unavailable";

/// What every handler shares: the mounted plugin and the host's session engine.
#[derive(Clone)]
pub(crate) struct Management {
    pub(crate) care: Arc<Care>,
    pub(crate) sessions: Arc<Sessions>,
}

impl Management {
    /// The session named by `id`, read without opening it (no lease, no repair); 404
    /// `session-unavailable` when there is none, 503 when the store cannot be read.
    pub(crate) async fn load(&self, id: &SessionId) -> Result<LoadedSession, RouteReply> {
        match self.sessions.load(id).await {
            Ok(loaded) => Ok(loaded),
            Err(SessionError::UnknownSession(_)) => Err(unknown_session(id)),
            Err(error) => Err(RouteReply::error(
                503,
                STORAGE_UNAVAILABLE,
                format!("session {id}: {error}"),
            )),
        }
    }

    /// The session's controls in memory, loaded from the store if this process has
    /// not (a session no actor runs): see `Care::ensure_controls`.
    pub(crate) async fn ensure_controls(&self, id: &SessionId) {
        self.care.ensure_controls(id).await;
    }

    /// The live sample of the session (see [`LiveSample`]).
    pub(crate) fn sample(&self, loaded: &LoadedSession) -> LiveSample {
        LiveSample::of(self.care.samples.get(&loaded.header.id), loaded)
    }
}

/// 404 `session-unavailable` naming the session (HR-1).
fn unknown_session(id: &SessionId) -> RouteReply {
    RouteReply::error(404, SESSION_UNAVAILABLE, format!("no session {id}"))
}

/// Registers the management routes into the plugin's scope.
pub(crate) fn register(
    scope: &mut PluginScope<'_>,
    care: Arc<Care>,
    sessions: Arc<Sessions>,
) -> Result<(), MountError> {
    let driver = scope.session_driver();
    let management = Management { care, sessions };
    let path = |error: RoutePathError| MountError::Config(error.to_string());
    scope.route(actions::route(management.clone()).map_err(path)?)?;
    scope.route(prompts::route(management.clone()).map_err(path)?)?;
    scope.route(rules::route(management.clone()).map_err(path)?)?;
    scope.route(detail::route(management.clone()).map_err(path)?)?;
    scope.route(undo::route(management, driver).map_err(path)?)?;
    Ok(())
}

/// Where a [`LiveSample`] comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, schemars::JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum SampleSource {
    /// This process's latest sample, refreshed at every boundary and every
    /// `context_status` call (CC-MET-5).
    Boundary,
    /// The session's latest status notice, folded from its log (`contextCareNumeric`,
    /// CC-NTC-6): the session has had no boundary in this process.
    Log,
    /// Neither: no boundary here and no status notice in the log.
    None,
}

/// The live context-care sample of a session (RC-9 `sample`, UI-1): the latest
/// boundary sample, otherwise the latest status notice of the log. A number is never
/// derived from a level (CC-MET-5): a value is `null` where the source has none.
#[derive(Debug, Clone, PartialEq, Serialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct LiveSample {
    /// Where it comes from.
    pub source: SampleSource,
    /// The fatigue level id (`normal`, `elevated`, `high`, `very-high`, `unknown`).
    pub fatigue: Option<String>,
    /// The fatigue value in 0..100, or null.
    pub fatigue_value: Option<f64>,
    /// The wakefulness level id (`low`, `normal`, `elevated`, `high`, `unknown`).
    pub wakefulness: Option<String>,
    /// The wakefulness value in 0..100, or null.
    pub wakefulness_value: Option<f64>,
    /// When a boundary sample was taken (ms since the epoch, the host clock).
    pub at: Option<i64>,
    /// Whether automatic maintenance is armed (boundary samples, CC-HYS-1).
    pub armed: Option<bool>,
    /// The seq of the status notice a log sample was read from.
    pub sampled_seq: Option<u64>,
}

impl LiveSample {
    fn of(boundary: Option<crate::care::UiSample>, loaded: &LoadedSession) -> Self {
        if let Some(sample) = boundary {
            let metrics = sample.metrics;
            return Self {
                source: SampleSource::Boundary,
                fatigue: Some(metrics.fatigue.as_str().to_owned()),
                fatigue_value: metrics.fatigue_value,
                wakefulness: Some(metrics.wakefulness.as_str().to_owned()),
                wakefulness_value: metrics.wakefulness_value,
                at: Some(sample.at),
                armed: Some(sample.armed),
                sampled_seq: None,
            };
        }
        let projection = NumericProjection;
        let init = <NumericProjection as ccare_session::Projection>::init(&projection);
        let folded: Option<NumericState> = loaded.log.events().iter().rev().find_map(|event| {
            <NumericProjection as ccare_session::Projection>::apply(&projection, &init, event)
        });
        match folded {
            Some(state) => Self {
                source: SampleSource::Log,
                fatigue: state.fatigue,
                fatigue_value: state.fatigue_value,
                wakefulness: state.wakefulness,
                wakefulness_value: state.wakefulness_value,
                at: None,
                armed: None,
                sampled_seq: state.sampled_seq,
            },
            None => Self {
                source: SampleSource::None,
                fatigue: None,
                fatigue_value: None,
                wakefulness: None,
                wakefulness_value: None,
                at: None,
                armed: None,
                sampled_seq: None,
            },
        }
    }
}
