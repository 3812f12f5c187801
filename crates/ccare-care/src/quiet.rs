//! Quiet start (issue 19; `quiet_start`, default on): care is mounted by default, so it
//! stays silent until there is something to act on. A small model that finds a status
//! notice after the user's first question tends to answer the notice instead.
//!
//! A session is at its **calm start** when all of these hold at a boundary:
//! - both levels are at their lowest (CC-MET-2): fatigue `normal` and wakefulness `low`,
//!   or `unknown` (no capacity known: nothing the model could act on);
//! - no rest was requested at this boundary and it has no outcome (nothing compacted
//!   here, CC-BND-2);
//! - no status notice is on the surface yet (the first notice is the one that matters);
//! - nothing was ever compacted or refused in the session: the surface was never
//!   replaced (replace generation 0), and the journal holds no maintenance record and
//!   no request refused before dispatch.
//!
//! At a calm start the boundary appends no notice (and prices none). From the first
//! boundary that is not calm, the notice is exactly the seed's (CC-NTC-1..3), and once
//! one is on the surface the CC-NTC-2 rules apply as they are. `context_status`, the UI
//! sample and the guidance section are unaffected. `quiet_start = false` restores the
//! seed's behaviour: a notice at the first boundary.

use ccare_session::Session;

use crate::care::{Care, CareError};
use crate::journal::calibration_record;
use crate::metrics::{ContextCareMetrics, FatigueLevel, WakefulnessLevel};
use crate::pricing::{JournalRecordKind, RequestOutcome};

/// Whether both levels are at their calm start: fatigue `normal` or `unknown`,
/// wakefulness `low` or `unknown`.
pub(crate) fn calm_levels(metrics: &ContextCareMetrics) -> bool {
    matches!(
        metrics.fatigue,
        FatigueLevel::Normal | FatigueLevel::Unknown
    ) && matches!(
        metrics.wakefulness,
        WakefulnessLevel::Low | WakefulnessLevel::Unknown
    )
}

impl Care {
    /// Whether the boundary of `session` stays quiet: `quiet_start` is on, the levels
    /// `metrics` are calm, `acted` (a rest requested or an outcome at this boundary) is
    /// false, and the session is still fresh (no notice on the surface, nothing ever
    /// compacted or refused).
    pub(crate) async fn quiet_start(
        &self,
        session: &Session,
        metrics: &ContextCareMetrics,
        acted: bool,
    ) -> Result<bool, CareError> {
        if !self.config.quiet_start || acted || !calm_levels(metrics) {
            return Ok(false);
        }
        let noticed = self.latest_notice(session, |notice| notice.is_some());
        let replace_generation = session.with_log(ccare_session::SessionLog::replace_generation);
        if noticed || replace_generation != 0 {
            return Ok(false);
        }
        // The latest freeze read the session's journal after a flush; while no write of
        // the session was queued since, what it read stands (and the records are not
        // listed again at every boundary).
        let writes = self.journal.writes(session.id());
        let known = self.with_session(session.id(), |state| {
            state
                .frozen
                .as_ref()
                .filter(|frozen| frozen.writes == writes)
                .map(|frozen| frozen.eventful)
        });
        if let Some(eventful) = known {
            return Ok(!eventful);
        }
        let entries = self.journal.list(session.id()).await?;
        let eventful = entries.iter().any(|entry| {
            entry.kind == JournalRecordKind::Maintenance
                || calibration_record(entry).outcome == Some(RequestOutcome::NotDispatched)
        });
        Ok(!eventful)
    }
}
