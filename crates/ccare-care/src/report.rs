//! A fresh sample for the user (issue: `ccare context status`, `/status` in chat):
//! what the session's next request would cost and how loaded it is, computed on
//! demand from the log and the journal exactly as the next boundary would, appending
//! nothing.

use ccare_core::{Message, SessionId, Source};
use ccare_session::{DerivedMessage, Session, SessionLog};
use serde::Serialize;

use crate::budget::{Budget, BudgetAssessment, assess};
use crate::care::{Care, CareError, Frozen};
use crate::journal::records::MaintenanceView;
use crate::metrics::ContextCareMetrics;
use crate::pricing::Price;

/// The section name prefix of the agent's own instructions (`ccare_agent::instructions`):
/// each such section is a category of its own.
const INSTRUCTIONS_PREFIX: &str = ccare_agent::instructions::SECTION_PREFIX;

/// One part of the next request and what it costs: each instruction section of the
/// system prompt by its name (`instructions:base`, `instructions:file`,
/// `instructions:agents-md`), `system` (the other system-prompt sections), `guidance`
/// (context care's own section, CC-NTC-5), `tools` and `messages` (the retained
/// history). Tokens are estimated on the report's basis (text scale applied) and counted
/// without the per-request overheads, so they need not sum to `inputTokens` (which, per
/// CC-MET-4, leaves the system prompt out).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, schemars::JsonSchema)]
pub struct Category {
    /// The category's name.
    pub name: String,
    /// Its estimated input tokens.
    pub tokens: u64,
}

/// Where the capacity `C` comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, schemars::JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum CapacitySource {
    /// The model's physical context window.
    ContextWindow,
    /// The configured policy capacity (`context_budget_tokens`, or a route budget).
    ContextBudgetTokens,
}

/// One fresh sample of a session, for people (CC-MET-5 numbers included).
#[derive(Debug, Clone, PartialEq, Serialize, schemars::JsonSchema)]
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
    /// The parts of the next request with their tokens, in request order; a part with
    /// nothing in it (no such section, no tools yet) is left out.
    pub categories: Vec<Category>,
}

impl Care {
    /// Samples `session` now (flushing the journal first), changing nothing.
    pub(crate) async fn report(&self, session: &Session) -> Result<ContextReport, CareError> {
        let frozen = self.report_basis(session.id()).await?;
        let view = session.derived_view();
        let injected = session.with_log(injected_messages);
        self.report_of(session.id(), &frozen, &view.messages, &injected)
    }

    /// The same report of a log read without opening its session
    /// (`Sessions::load`: no lease, no repair), for readers of a session another
    /// process may be driving (issue 15 item 7).
    pub(crate) async fn report_log(&self, log: &SessionLog) -> Result<ContextReport, CareError> {
        self.ensure_controls(log.id()).await;
        let frozen = self.report_basis(log.id()).await?;
        self.report_of(
            log.id(),
            &frozen,
            log.derived_messages(),
            &injected_messages(log),
        )
    }

    /// The session's controls in memory, read from the store if this process has not
    /// (no session is opened for a read): the guidance category and the management
    /// routes' decisions follow the stored choices. A failed read leaves them
    /// reporting `storage-unavailable` (RC-6), which is what a reader then sees.
    pub(crate) async fn ensure_controls(&self, session: &SessionId) {
        if !self.controls.is_loaded(session) {
            // The failure is kept by the controls themselves (RC-6).
            let _ = self.controls.load(session).await;
        }
    }

    /// The session's state ensured, the journal flushed and the pricing frozen: what
    /// both reports start from, as the next boundary would.
    async fn report_basis(&self, session: &SessionId) -> Result<Frozen, CareError> {
        self.ensure_id(session).await?;
        self.freeze(session).await
    }

    /// The report of `messages` (the derived view) and `injected` (the latest turn's
    /// plugin messages) on the frozen basis.
    fn report_of(
        &self,
        session: &SessionId,
        frozen: &Frozen,
        messages: &[DerivedMessage],
        injected: &[Message],
    ) -> Result<ContextReport, CareError> {
        let measured = self.measure(
            frozen,
            messages.iter().map(|derived| &*derived.message),
            std::iter::empty(),
        )?;
        let pricer = frozen
            .pricing
            .pricer(&frozen.meter)
            .map_err(|error| CareError::Pricing(error.to_string()))?;
        let injected_tokens = pricer
            .request(None, injected.iter(), &serde_json::Value::Null)
            .map_err(|error| CareError::Pricing(error.to_string()))?
            .messages_total()
            .ceil(pricer.text_scale());
        let categories =
            self.categories(session, messages, &frozen.meter, &pricer, frozen.tools_raw)?;
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
            armed: self.with_session(session, |state| state.controller.is_armed()),
            categories,
        })
    }

    /// The categories of the next request of `session` (see [`Category`]).
    fn categories(
        &self,
        session: &SessionId,
        messages: &[DerivedMessage],
        meter: &ccare_meter::Meter,
        pricer: &crate::pricing::Pricer<'_>,
        tools_raw: u64,
    ) -> Result<Vec<Category>, CareError> {
        let scale = pricer.text_scale();
        let text_tokens = |text: &str| {
            Price {
                text: meter.text(text),
                visual: 0,
            }
            .ceil(scale)
        };
        let mut categories = Vec::new();
        let mut other = Vec::new();
        for section in self.system_sections.snapshot() {
            if section.name.starts_with(INSTRUCTIONS_PREFIX) {
                categories.push(Category {
                    tokens: text_tokens(&section.text),
                    name: section.name,
                });
            } else {
                other.push(section.text);
            }
        }
        let messages = pricer
            .request(
                None,
                messages.iter().map(|derived| &*derived.message),
                &serde_json::Value::Null,
            )
            .map_err(|error| CareError::Pricing(error.to_string()))?
            .messages_total()
            .ceil(scale);
        let tools = Price {
            text: tools_raw,
            visual: 0,
        }
        .ceil(scale);
        let rest = [
            (
                "system",
                (!other.is_empty()).then(|| text_tokens(&other.join("\n\n"))),
            ),
            (
                "guidance",
                self.guidance(session).map(|text| text_tokens(&text)),
            ),
            ("tools", Some(tools)),
            ("messages", Some(messages)),
        ];
        categories.extend(
            rest.into_iter()
                .filter_map(|(name, tokens)| {
                    tokens
                        .filter(|tokens| *tokens > 0)
                        .map(|tokens| (name, tokens))
                })
                .map(|(name, tokens)| Category {
                    name: name.to_owned(),
                    tokens,
                }),
        );
        Ok(categories)
    }
}

/// The messages plugins entered during the log's latest turn (notices, readings, rest
/// requests).
fn injected_messages(log: &SessionLog) -> Vec<Message> {
    let last_turn = log.state().last_turn;
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
    let width = report
        .categories
        .iter()
        .map(|category| category.name.chars().count())
        .max()
        .unwrap_or(0);
    for category in &report.categories {
        lines.push(format!(
            "category     {:<width$}  {} tokens",
            category.name, category.tokens
        ));
    }
    lines
}

/// One maintenance action as the journal recorded it (CC-JNL-3), for people and for
/// `GET /context-care/actions`.
#[derive(Debug, Clone, PartialEq, Serialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ActionRecord {
    /// When it started (ms since the epoch).
    pub at: i64,
    /// The record's fields: `operationId`, `action`, `reason`, `phase`, `outcome`,
    /// `beforeInput`, `afterInput`, `replacements`, `error`, ….
    pub data: serde_json::Value,
}

impl ActionRecord {
    /// The record's fields as the typed view reads them.
    pub fn view(&self) -> MaintenanceView<'_> {
        MaintenanceView::of(&self.data)
    }

    /// The operation id.
    pub fn operation_id(&self) -> &str {
        self.view().operation_id.unwrap_or_default()
    }

    /// One line: id, action, reason, outcome, and the input before → after (the caller
    /// prints `at` in its own time format).
    pub fn line(&self) -> String {
        let view = self.view();
        let text = |field: Option<&str>| field.unwrap_or("-").to_owned();
        let tokens = |field: Option<u64>| field.map_or_else(|| "-".to_owned(), |n| n.to_string());
        let mut line = format!(
            "{}  {} {} {}",
            view.operation_id.unwrap_or_default(),
            text(view.action),
            text(view.reason),
            text(view.outcome),
        );
        if view.before_input.is_some() {
            line.push_str(&format!(
                "  input {} → {}",
                tokens(view.before_input),
                tokens(view.after_input)
            ));
        }
        if let Some(error) = &view.error {
            line.push_str(&format!("  error {}", error.code));
        }
        line
    }
}

impl Care {
    /// The session's maintenance actions, oldest first.
    pub(crate) async fn actions(&self, session: &Session) -> Result<Vec<ActionRecord>, CareError> {
        self.actions_of(session.id()).await
    }

    /// [`Care::actions`] by id: the journal needs no open session.
    pub(crate) async fn actions_of(
        &self,
        session: &SessionId,
    ) -> Result<Vec<ActionRecord>, CareError> {
        self.journal.flush().await?;
        Ok(self
            .journal
            .list(session)
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
