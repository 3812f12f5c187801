//! The context series of a session (server.md API-4, watch-rules-ui.md UI-7): one point
//! per request boundary over the whole session, and the maintenance operations between
//! them, for the UI's fatigue and wakefulness charts.
//!
//! Read-only: computed from the request journal (its conversation request records and
//! its maintenance records, CC-JNL-2/3) and the session's log as read without opening
//! it (no lease, no repair, nothing appended), so a session another process drives can
//! be charted too.
//!
//! Where each number comes from:
//! - `inputTokens`, `capacity`, `budget` and `phase` are the request record's own (the
//!   `Q`, `C`, `H`, `S`, `L` it was checked against when it was built).
//! - `fatiguePct` / `wakefulnessPct` and the level names come from the
//!   `contextCareNumeric` projection (CC-NTC-6) as it stood when the request was built:
//!   the latest status notice at or before the point's `eventSeq` (`sampledSeq` names
//!   it). Numbers come only from the notice's `contextCare` metadata, exactly as the
//!   notice recorded them (already rounded to one decimal, CC-MET-1), never derived from
//!   a level (CC-MET-5); a point before any notice (quiet start) or whose notice had no
//!   number reads null, which a chart shows as a grey gap. A boundary that appended no
//!   notice (its text was the surface's last one) keeps the previous notice's numbers:
//!   `sampledSeq` older than the previous point's `eventSeq` says so.

use ccare_agent::domains::DomainError;
use ccare_core::Event;
use ccare_session::{Projection, SessionLog};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::budget::BudgetPhase;
use crate::care::CareError;
use crate::journal::JournalEntry;
use crate::numeric::{NumericProjection, NumericState};
use crate::plugin::ContextCare;
use crate::pricing::{JournalRecordKind, RequestOutcome};

/// The purpose of the requests that are boundaries of the conversation (summary and
/// title requests are not points).
const CONVERSATION: &str = "conversation";

/// The context series of one session (API-4, UI-7).
#[derive(Debug, Clone, PartialEq, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Series {
    /// The session.
    pub session_id: String,
    /// One point per conversation request the journal holds, oldest first.
    pub points: Vec<SeriesPoint>,
    /// The maintenance operations (summaries, prunes, deep rests, …), oldest first.
    pub operations: Vec<SeriesOperation>,
    /// `journal_keep`: the journal keeps this many request records (and as many
    /// maintenance records) per session; older ones were trimmed.
    pub journal_keep: u64,
    /// Whether the journal reached `journalKeep` request records, so the session's
    /// earliest boundaries may be missing from `points`.
    pub truncated: bool,
}

/// One request boundary: the conversation request built there.
#[derive(Debug, Clone, PartialEq, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SeriesPoint {
    /// When the request was built (ms since the epoch, the host clock).
    pub at: i64,
    /// The provider call.
    pub call_id: String,
    /// The seq of the session's last event when the request was built (the seq it
    /// followed); null when the log was empty.
    pub event_seq: Option<u64>,
    /// `Q`: the request's input tokens as the plugin priced it (CC-MET-4).
    pub input_tokens: u64,
    /// `C`, when a capacity was known.
    pub capacity: Option<i64>,
    /// The thresholds it was checked against, when a capacity was known.
    pub budget: Option<SeriesBudget>,
    /// Where `Q` stood against them.
    pub phase: Option<BudgetPhase>,
    /// How the request ended (`completed`, `failed`, `interrupted`, `not-dispatched`);
    /// null while it runs or when it was never settled.
    pub outcome: Option<String>,
    /// Fatigue in 0–100 with at most one decimal, or null (uncalibrated, or no notice
    /// yet).
    pub fatigue_pct: Option<f64>,
    /// Wakefulness in 0–100 with at most one decimal, or null.
    pub wakefulness_pct: Option<f64>,
    /// The fatigue level id (`normal`, `elevated`, `high`, `very-high`, `unknown`), or
    /// null before any notice.
    pub fatigue: Option<String>,
    /// The wakefulness level id (`low`, `normal`, `elevated`, `high`, `unknown`), or
    /// null before any notice.
    pub wakefulness: Option<String>,
    /// The seq of the status notice the numbers and levels were read from.
    pub sampled_seq: Option<u64>,
}

/// A request's thresholds (CC-BUD-1).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SeriesBudget {
    /// `H`: the hard input limit.
    pub hard_input: i64,
    /// `S`: the soft threshold, where automatic maintenance arms.
    pub soft_input: i64,
    /// `L`: the release target, below which it disarms.
    pub release_target: i64,
}

/// One maintenance operation (CC-JNL-3) between points.
#[derive(Debug, Clone, PartialEq, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SeriesOperation {
    /// When it started (ms since the epoch).
    pub at: i64,
    /// The seq of the first replace node it appended; null when it appended none
    /// (failed, no useful range, still running).
    pub seq: Option<u64>,
    /// The operation id.
    pub operation_id: String,
    /// The action: `summary`, `prune`, `deep-rest`, ….
    pub kind: String,
    /// Why it ran: `requested`, `soft-threshold`, `overflow`, ….
    pub reason: Option<String>,
    /// How it ended: `committed` or `failed`; null while it runs.
    pub outcome: Option<String>,
    /// The next request's input before it (tokens).
    pub input_before: Option<u64>,
    /// The next request's input after it (tokens).
    pub input_after: Option<u64>,
    /// The index in `points` of the first point after it (by seq when it appended a
    /// node, else by time); null when no point follows yet.
    pub next_point: Option<usize>,
}

/// What a point reads of a request record's `data`.
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", default)]
struct PointView<'a> {
    #[serde(borrow)]
    call_id: Option<&'a str>,
    #[serde(borrow)]
    purpose: Option<&'a str>,
    log_revision: Option<u64>,
    input_tokens: Option<u64>,
    budget: Option<BudgetNumbers>,
    assessment: Option<AssessmentPhase>,
    outcome: Option<RequestOutcome>,
}

/// What a point reads of a recorded budget.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct BudgetNumbers {
    capacity: i64,
    hard_input: i64,
    soft_input: i64,
    release_target: i64,
}

/// What a point reads of a recorded assessment.
#[derive(Debug, Deserialize)]
struct AssessmentPhase {
    phase: BudgetPhase,
}

/// The wire name of an outcome (its serde name).
fn outcome_name(outcome: RequestOutcome) -> Option<String> {
    serde_json::to_value(outcome)
        .ok()
        .and_then(|value| value.as_str().map(str::to_owned))
}

impl Series {
    /// The series of `log` from its journal `entries` (oldest first, as
    /// [`crate::journal::RequestJournal::list`] gives them), with `journal_keep`.
    pub fn of(log: &SessionLog, entries: &[JournalEntry], journal_keep: u64) -> Self {
        let notices = notices(log.events().iter().map(|event| &**event));
        let mut requests = 0_u64;
        let mut points = Vec::new();
        let mut operations = Vec::new();
        for entry in entries {
            match entry.kind {
                JournalRecordKind::Request => {
                    requests += 1;
                    if let Some(point) = point(entry, &notices) {
                        points.push(point);
                    }
                }
                JournalRecordKind::Maintenance => operations.push(operation(entry)),
            }
        }
        for operation in &mut operations {
            operation.next_point = points.iter().position(|point| match operation.seq {
                Some(seq) => point.event_seq.is_some_and(|after| after >= seq),
                None => point.at >= operation.at,
            });
        }
        Self {
            session_id: log.id().as_str().to_owned(),
            points,
            operations,
            journal_keep,
            truncated: requests >= journal_keep,
        }
    }
}

/// Every status notice of the log as the projection folds it, by seq.
fn notices<'e>(events: impl Iterator<Item = &'e Event>) -> Vec<NumericState> {
    let projection = NumericProjection;
    let init = projection.init();
    events
        .filter_map(|event| projection.apply(&init, event))
        .collect()
}

/// The point of a conversation request record; `None` for any other request.
fn point(entry: &JournalEntry, notices: &[NumericState]) -> Option<SeriesPoint> {
    let view = PointView::deserialize(entry.data()).ok()?;
    if view.purpose != Some(CONVERSATION) {
        return None;
    }
    let event_seq = view.log_revision.and_then(|head| head.checked_sub(1));
    // The projection as it stood when the request was built: the last notice at or
    // before the seq it followed.
    let before = event_seq.map_or(0, |seq| {
        notices.partition_point(|notice| notice.sampled_seq.is_some_and(|at| at <= seq))
    });
    let sample = before
        .checked_sub(1)
        .and_then(|index| notices.get(index))
        .cloned()
        .unwrap_or_default();
    Some(SeriesPoint {
        at: entry.at,
        call_id: view.call_id.unwrap_or_default().to_owned(),
        event_seq,
        input_tokens: view.input_tokens.unwrap_or(0),
        capacity: view.budget.as_ref().map(|budget| budget.capacity),
        budget: view.budget.as_ref().map(|budget| SeriesBudget {
            hard_input: budget.hard_input,
            soft_input: budget.soft_input,
            release_target: budget.release_target,
        }),
        phase: view.assessment.map(|assessment| assessment.phase),
        outcome: view.outcome.and_then(outcome_name),
        fatigue_pct: sample.fatigue_value,
        wakefulness_pct: sample.wakefulness_value,
        fatigue: sample.fatigue,
        wakefulness: sample.wakefulness,
        sampled_seq: sample.sampled_seq,
    })
}

/// The operation of a maintenance record.
fn operation(entry: &JournalEntry) -> SeriesOperation {
    let view = entry.maintenance();
    let text = |field: Option<&str>| field.map(str::to_owned);
    SeriesOperation {
        at: entry.at,
        seq: view
            .replacements
            .iter()
            .find_map(|replacement| replacement.new_seq),
        operation_id: view.operation_id.unwrap_or_default().to_owned(),
        kind: view.action.unwrap_or_default().to_owned(),
        reason: text(view.reason),
        outcome: text(view.outcome),
        input_before: view.before_input,
        input_after: view.after_input,
        next_point: None,
    }
}

impl ContextCare {
    /// The context series of `log` (a session read without opening it:
    /// `Sessions::load`), from the mounted plugin's journal, flushed first; `None`
    /// until this handle has been mounted.
    pub async fn series(&self, log: &SessionLog) -> Option<Result<Series, CareError>> {
        let care = std::sync::Arc::clone(self.mounted.get()?);
        let entries = async {
            care.journal.flush().await?;
            care.journal.list(log.id()).await
        };
        let entries: Result<Vec<JournalEntry>, DomainError> = entries.await;
        Some(
            entries
                .map(|entries| Series::of(log, &entries, care.config.journal_keep))
                .map_err(CareError::from),
        )
    }
}
