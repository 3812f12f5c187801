//! The `context-care` plugin as mounted: its configuration, its controls source, the
//! request gate with the request journal (CC-BUD-6, CC-JNL-2), the boundary with its
//! status notice and maintenance (CC-BND, CC-NTC, CC-MNT), overflow recovery (CC-OVF),
//! the tools `context_status`, `context_rest` and `ledger` (CC-TOOL, CC-EXT-2), and the
//! summary repair hooks a host registers (CC-SUM-4).
//!
//! Mounted by `[plugins.context-care]`.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, OnceLock};

use ccare_agent::{MountError, Plugin, PluginScope};
use ccare_core::{Locale, SessionId};
use ccare_llm::Route;
use parking_lot::Mutex;
use serde_json::Value;

use crate::boundary::{Boundary, GenerationMark};
use crate::care::{Care, CareError, Samples, UiSample};
use crate::config::CareConfig;
use crate::controls_catalog::context_care_catalog;
use crate::gate::{BudgetGate, JournalFlush};
use crate::guidance::Guidance;
use crate::journal::RequestJournal;
use crate::repair::SummaryRepair;
use crate::report::ContextReport;
use crate::rest_tool::RestTool;
use crate::status_tool::StatusTool;
use ccare_session::Session;

/// The `context-care` plugin.
///
/// `ContextCare::default()` knows no route and speaks English: `context_status` then
/// reports both metrics as `unknown`. The binary hands it the conversation route with
/// [`ContextCare::with_route`] and the project locale with [`ContextCare::with_locale`].
#[derive(Clone, Default)]
pub struct ContextCare {
    route: Option<Arc<RouteSnapshot>>,
    locale: Locale,
    samples: Samples,
    pub(crate) mounted: Arc<OnceLock<Arc<Care>>>,
    repairs: Vec<Arc<dyn SummaryRepair>>,
}

impl std::fmt::Debug for ContextCare {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter
            .debug_struct("ContextCare")
            .field("route", &self.route)
            .field("locale", &self.locale)
            .field("mounted", &self.mounted.get().is_some())
            .field(
                "summary_repairs",
                &self
                    .repairs
                    .iter()
                    .map(|repair| repair.name())
                    .collect::<Vec<_>>(),
            )
            .finish_non_exhaustive()
    }
}

impl ContextCare {
    /// The plugin with the route `context_status` measures against (the conversation
    /// route the agent is configured with).
    #[must_use]
    pub fn with_route(mut self, route: RouteSnapshot) -> Self {
        self.route = Some(Arc::new(route));
        self
    }

    /// The latest UI sample of a session (CC-MET-5): refreshed at every boundary and
    /// every `context_status` call, even when reporting is off; `None` before the
    /// first. Shared by every clone of this handle and the plugin it mounted.
    pub fn ui_sample(&self, session: &SessionId) -> Option<UiSample> {
        self.samples.get(session)
    }

    /// How many sessions the mounted plugin holds in-memory state for (controllers and
    /// caches): the sessions this process drives or drove since they were last closed
    /// ([`crate::lifecycle`]); `None` until mounted.
    pub fn sessions_in_memory(&self) -> Option<usize> {
        Some(self.mounted.get()?.session_count())
    }

    /// How many request-journal rows (records and their index rows) the mounted
    /// plugin holds in memory: those of the sessions this process drives, not of every
    /// session ever journaled (`journal/residency.rs`); `None` until mounted.
    pub fn journal_rows_in_memory(&self) -> Option<usize> {
        Some(self.mounted.get()?.journal.rows_in_memory())
    }

    /// A fresh sample of `session` (what its next request would cost), appending
    /// nothing; `None` until this handle has been mounted.
    pub async fn report(&self, session: &Session) -> Option<Result<ContextReport, CareError>> {
        let care = Arc::clone(self.mounted.get()?);
        Some(care.report(session).await)
    }

    /// [`ContextCare::report`] of a log read without opening its session
    /// (`Sessions::load`: no lease, no crash repair, nothing appended), for readers of
    /// a session another process may be driving; `None` until mounted.
    pub async fn report_loaded(
        &self,
        log: &ccare_session::SessionLog,
    ) -> Option<Result<ContextReport, CareError>> {
        let care = Arc::clone(self.mounted.get()?);
        Some(care.report_log(log).await)
    }

    /// The session's maintenance actions from the journal (CC-JNL-3) by id, oldest
    /// first, reading no session; `None` until mounted.
    pub async fn actions_of(
        &self,
        session: &SessionId,
    ) -> Option<Result<Vec<crate::report::ActionRecord>, CareError>> {
        let care = Arc::clone(self.mounted.get()?);
        Some(care.actions_of(session).await)
    }

    /// Undoes maintenance action `op` of `session` (CC-EXT-3, [`crate::undo`]): the
    /// caller drives the session (holds its lease). `None` until mounted.
    pub async fn undo(
        &self,
        session: &Session,
        op: &str,
    ) -> Option<Result<crate::undo::UndoOutcome, crate::undo::UndoError>> {
        let care = Arc::clone(self.mounted.get()?);
        Some(care.undo(session, op).await)
    }

    /// The session's maintenance actions from the journal (CC-JNL-3), oldest first;
    /// `None` until this handle has been mounted.
    pub async fn actions(
        &self,
        session: &Session,
    ) -> Option<Result<Vec<crate::report::ActionRecord>, CareError>> {
        let care = Arc::clone(self.mounted.get()?);
        Some(care.actions(session).await)
    }

    /// Runs the mounted plugin's step boundary (CC-BND-1) on `context`, as the host
    /// does after its pre-step chain: for hosts that drive steps themselves and for the
    /// `plan` bench, which times it alone. `None` until this handle has been mounted.
    pub async fn boundary(
        &self,
        context: &ccare_agent::BoundaryContext<'_>,
    ) -> Option<Result<ccare_agent::BoundaryContribution, ccare_agent::HookError>> {
        let care = Arc::clone(self.mounted.get()?);
        Some(Boundary { care }.run(context).await)
    }

    /// Runs the mounted plugin's request gate (CC-BUD-6, CC-JNL-2) on `call`, as the
    /// host does before a call is handed off: prices it, journals its `ready` record
    /// and compares it with the hard input budget. For hosts that drive requests
    /// themselves and for the `plan` bench. `None` until this handle has been mounted.
    pub async fn check_request(
        &self,
        context: &ccare_agent::HookContext,
        call: &ccare_llm::PreparedCall,
    ) -> Option<Result<(), ccare_core::LlmFailure>> {
        let care = Arc::clone(self.mounted.get()?);
        Some(
            crate::gate::check_request(&care, &context.session, call, context.clock.now_ms()).await,
        )
    }

    /// The plugin with the locale of its model-visible texts (CC-GEN-2).
    #[must_use]
    pub fn with_locale(mut self, locale: Locale) -> Self {
        self.locale = locale;
        self
    }

    /// The plugin with one more summary repair hook (CC-SUM-4), tried after the ones
    /// registered before it when a summary call fails. Hooks registered after the
    /// plugin was mounted take effect at its next mount.
    #[must_use]
    pub fn with_summary_repair(mut self, repair: Arc<dyn SummaryRepair>) -> Self {
        self.repairs.push(repair);
        self
    }
}

/// What context-care needs of a route to price a request and find its capacity,
/// captured when the plugin is built.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RouteSnapshot {
    /// The provider's config name.
    pub provider: String,
    /// The model name as the provider knows it.
    pub model: String,
    /// The physical context window, when known.
    pub context_window: Option<u64>,
    /// The adapter's default output limit, when known.
    pub max_output_tokens: Option<u32>,
    /// What one image costs in tokens.
    pub image_tokens: u64,
    /// A tokenizer for exact counts, when configured.
    pub tokenizer: Option<PathBuf>,
}

impl RouteSnapshot {
    /// The route as a conversation request that sets no `max_tokens` meets it (the
    /// mount's budget check and [`crate::care::Care::conversation_budget`]).
    pub(crate) fn conversation_info(&self) -> crate::budget::RouteInfo<'_> {
        crate::budget::RouteInfo {
            provider: &self.provider,
            model: &self.model,
            purpose: crate::config::RoutePurpose::Conversation,
            physical_window_tokens: self.context_window,
            max_tokens: None,
            adapter_default_max_tokens: self.max_output_tokens.map(u64::from),
        }
    }

    /// The snapshot of a resolved route.
    pub fn of(route: &Route) -> Self {
        Self {
            provider: route.provider.clone(),
            model: route.model.clone(),
            context_window: route.context_window,
            max_output_tokens: route.max_output_tokens,
            image_tokens: route.image_tokens,
            tokenizer: route.tokenizer.clone(),
        }
    }
}

impl Plugin for ContextCare {
    fn name(&self) -> &str {
        "context-care"
    }

    fn mount(&self, config: &Value, scope: &mut PluginScope<'_>) -> Result<(), MountError> {
        let config = Arc::new(CareConfig::from_json(config).map_err(MountError::Config)?);
        if let Some(route) = self.route.as_deref() {
            // A budget every conversation request of the configured route would fail
            // with (CC-BUD-2) is a config error: said now, not at each turn.
            crate::budget::resolve(&config, route.conversation_info()).map_err(|invalid| {
                MountError::Config(format!(
                    "the conversation route {}/{}: {invalid}",
                    route.provider, route.model
                ))
            })?;
        }
        let llm = scope.llm();
        let summary_route =
            crate::route::summary_route(&config.summary, &llm, self.route.as_deref())
                .map_err(MountError::Config)?;
        // CC-CTL-1: `maintenance.summary` is available iff a summary route resolves.
        let mut catalog = context_care_catalog();
        if let (Err(missing), Some(action)) =
            (&summary_route, catalog.action_mut("maintenance", "summary"))
        {
            action.available = false;
            action.reason = Some(missing.reason().to_owned());
        }
        scope.control_source(catalog)?;
        scope.projection(ccare_session::erase(crate::numeric::NumericProjection))?;
        let journal = RequestJournal::new(scope.domains()).with_keep(config.journal_keep);
        let care = Arc::new(Care {
            config,
            route: self.route.clone(),
            locale: self.locale,
            journal,
            ledger: crate::ledger::Ledger::new(scope.domains()),
            controls: scope.controls(),
            summary_model: summary_route.ok(),
            llm: Some(llm),
            side: Some(scope.side_requests()),
            lifetime: scope.lifetime(),
            sessions: Mutex::new(HashMap::new()),
            samples: self.samples.clone(),
            repairs: self.repairs.clone(),
            system_sections: scope.system_sections(),
            tools: crate::gate::ToolsMemo::default(),
            system_prices: crate::gate::SystemPrices::default(),
        });
        scope.tool(Arc::new(StatusTool::new(Arc::clone(&care))))?;
        scope.request(Arc::new(Guidance {
            care: Arc::clone(&care),
        }));
        scope.tool(Arc::new(RestTool::new(Arc::clone(&care))))?;
        scope.tool(Arc::new(crate::ledger::LedgerTool::new(Arc::clone(&care))))?;
        scope.pre_step(
            Arc::new(GenerationMark {
                care: Arc::clone(&care),
            }),
            true,
        );
        scope.boundary(
            Arc::new(Boundary {
                care: Arc::clone(&care),
            }),
            i32::MAX,
        );
        scope.request_error(Arc::new(crate::overflow::OverflowRecovery {
            care: Arc::clone(&care),
        }));
        scope.idle(Arc::new(JournalFlush {
            care: Arc::clone(&care),
        }));
        scope.observer(Arc::new(crate::lifecycle::SessionLifecycle {
            care: Arc::clone(&care),
        }));
        // The management routes (HR-1..3, RC-9): they live exactly while it is mounted.
        let sessions = scope.sessions();
        crate::routes::register(scope, Arc::clone(&care), sessions)?;
        let _ = self.mounted.set(Arc::clone(&care));
        scope.request_gate(Arc::new(BudgetGate { care }));
        Ok(())
    }
}
