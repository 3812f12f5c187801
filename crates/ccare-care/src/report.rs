//! A fresh sample for the user (issue: `ccare context status`, `/status` in chat):
//! what the session's next request would cost and how loaded it is, computed on
//! demand from the log and the journal exactly as the next boundary would, appending
//! nothing.

use ccare_core::{Message, Source};
use ccare_session::Session;
use serde::Serialize;

use crate::budget::{Budget, BudgetAssessment, assess};
use crate::care::{Care, CareError};
use crate::metrics::ContextCareMetrics;

/// Where the capacity `C` comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum CapacitySource {
    /// The model's physical context window.
    ContextWindow,
    /// The configured policy capacity (`context_budget_tokens`, or a route budget).
    ContextBudgetTokens,
}

/// One fresh sample of a session, for people (CC-MET-5 numbers included).
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ContextReport {
    /// The metrics.
    pub metrics: ContextCareMetrics,
    /// `Q` of the next request as this plugin measures it (CC-MET-4).
    pub input_tokens: u64,
    /// `C` and where it comes from, when known.
    pub capacity: Option<(u64, CapacitySource)>,
    /// `C`, `R`, `H`, `S`, `L` and the rest, when capacity is known.
    pub budget: Option<Budget>,
    /// The phase and deficits of `Q`.
    pub assessment: BudgetAssessment,
    /// `pricingBasis.kind`: `usage-calibrated`, `uncalibrated-estimate`, `heuristic` or
    /// `exact`.
    pub calibration: &'static str,
    /// The text scale applied to estimates.
    pub text_scale: f64,
    /// Tokens of the messages plugins entered during the latest turn (notices,
    /// readings, rest requests), on the same basis.
    pub injected_tokens: u64,
    /// Whether automatic maintenance is armed (CC-HYS-1).
    pub armed: bool,
}

impl Care {
    /// Samples `session` now (flushing the journal first), changing nothing.
    pub(crate) async fn report(&self, session: &Session) -> Result<ContextReport, CareError> {
        let (frozen, measured) = self.sample_now(session).await?;
        let last_turn = session.with_log(|log| log.state().last_turn);
        let injected: Vec<Message> = session.with_log(|log| {
            let mut turn = 0;
            let mut injected = Vec::new();
            for event in log.events().iter() {
                if let Ok(start) = event.decode::<ccare_core::kinds::TurnStart>() {
                    turn = start.turn;
                } else if turn == last_turn
                    && let Ok(user) = event.decode::<ccare_core::kinds::UserMessage>()
                    && matches!(user.message.source, Some(Source::Plugin(_)))
                {
                    injected.push(user.message);
                }
            }
            injected
        });
        let pricer = frozen
            .pricing
            .pricer(&frozen.meter)
            .map_err(|error| CareError::Pricing(error.to_string()))?;
        let injected_tokens = pricer
            .request(None, injected.iter(), &serde_json::Value::Null)
            .map_err(|error| CareError::Pricing(error.to_string()))?
            .messages_total()
            .ceil(pricer.text_scale());
        let capacity = measured.budget.as_ref().map(|budget| {
            let source = match (budget.physical_window, budget.policy_capacity) {
                (Some(physical), Some(policy)) if policy < physical => {
                    CapacitySource::ContextBudgetTokens
                }
                (None, Some(_)) => CapacitySource::ContextBudgetTokens,
                _ => CapacitySource::ContextWindow,
            };
            (u64::try_from(budget.capacity).unwrap_or(0), source)
        });
        Ok(ContextReport {
            metrics: measured.metrics,
            input_tokens: measured.load,
            capacity,
            assessment: assess(measured.load, measured.budget.as_ref()),
            budget: measured.budget,
            calibration: frozen.pricing.basis().kind(),
            text_scale: frozen.pricing.text_scale().as_f64(),
            injected_tokens,
            armed: self.with_session(session.id(), |state| state.controller.is_armed()),
        })
    }
}

fn percent(value: Option<f64>, level: &str) -> String {
    match value {
        Some(value) => format!("{}% ({level})", (value * 10.0).round() / 10.0),
        None => "uncalibrated".to_owned(),
    }
}

/// The report as lines for a terminal: one `name  value` per line.
pub fn render_report(report: &ContextReport) -> Vec<String> {
    let metrics = &report.metrics;
    let mut lines = vec![
        format!(
            "fatigue      {}",
            percent(metrics.fatigue_value, metrics.fatigue.as_str())
        ),
        format!(
            "wakefulness  {}",
            percent(metrics.wakefulness_value, metrics.wakefulness.as_str())
        ),
        format!(
            "input        {} tokens (next request, estimated)",
            report.input_tokens
        ),
    ];
    match (&report.capacity, &report.budget) {
        (Some((capacity, source)), Some(budget)) => {
            let source = match source {
                CapacitySource::ContextWindow => "context window",
                CapacitySource::ContextBudgetTokens => "context_budget_tokens",
            };
            lines.push(format!("capacity     {capacity} tokens ({source})"));
            lines.push(format!(
                "budget       C {} · R {} · H {} · S {} · L {}",
                budget.capacity,
                budget.max_tokens,
                budget.hard_input,
                budget.soft_input,
                budget.release_target
            ));
        }
        _ => lines.push("capacity     unknown (no context window configured)".to_owned()),
    }
    let phase = serde_json::to_value(report.assessment.phase)
        .ok()
        .and_then(|value| value.as_str().map(str::to_owned))
        .unwrap_or_default();
    lines.push(format!(
        "phase        {phase}{}",
        if report.armed {
            " · maintenance armed"
        } else {
            ""
        }
    ));
    lines.push(format!(
        "calibration  {} × {}",
        report.calibration,
        (report.text_scale * 1000.0).round() / 1000.0
    ));
    lines.push(format!(
        "injected     {} tokens this turn",
        report.injected_tokens
    ));
    lines
}

/// One maintenance action as the journal recorded it (CC-JNL-3), for people.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ActionRecord {
    /// When it started (ms since the epoch).
    pub at: i64,
    /// The record's fields: `operationId`, `action`, `reason`, `phase`, `outcome`,
    /// `beforeInput`, `afterInput`, `replacements`, `error`, ….
    pub data: serde_json::Value,
}

impl ActionRecord {
    /// The operation id.
    pub fn operation_id(&self) -> &str {
        self.data
            .get("operationId")
            .and_then(serde_json::Value::as_str)
            .unwrap_or_default()
    }

    /// One line: id, action, reason, outcome, and the input before → after (the caller
    /// prints `at` in its own time format).
    pub fn line(&self) -> String {
        let field = |key: &str| {
            self.data
                .get(key)
                .map(|value| match value {
                    serde_json::Value::String(text) => text.clone(),
                    serde_json::Value::Null => "-".to_owned(),
                    other => other.to_string(),
                })
                .unwrap_or_else(|| "-".to_owned())
        };
        let mut line = format!(
            "{}  {} {} {}",
            self.operation_id(),
            field("action"),
            field("reason"),
            field("outcome"),
        );
        if self.data.get("beforeInput").is_some() {
            line.push_str(&format!(
                "  input {} → {}",
                field("beforeInput"),
                field("afterInput")
            ));
        }
        if let Some(error) = self.data.get("error").filter(|error| !error.is_null()) {
            line.push_str(&format!(
                "  error {}",
                error
                    .get("code")
                    .and_then(serde_json::Value::as_str)
                    .unwrap_or_default()
            ));
        }
        line
    }
}

impl Care {
    /// The session's maintenance actions, oldest first.
    pub(crate) async fn actions(&self, session: &Session) -> Result<Vec<ActionRecord>, CareError> {
        self.journal.flush().await?;
        Ok(self
            .journal
            .list(session.id())
            .await?
            .into_iter()
            .filter(|entry| entry.kind == crate::pricing::JournalRecordKind::Maintenance)
            .map(|entry| ActionRecord {
                at: entry.at,
                data: entry.data().clone(),
            })
            .collect())
    }
}
