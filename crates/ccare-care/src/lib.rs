//! The context-care plugin (spec context-care.md). Its pure logic, everything it
//! decides that needs no I/O (so each rule can be tested on its own vectors):
//!
//! - [`config`]: the `[plugins.context-care]` table, strict, with its load errors
//!   (CC-CFG-1) and the per-route budgets (CC-BUD-4).
//! - [`metrics`]: fatigue and wakefulness values, levels, colours and the
//!   `uncalibrated` display (CC-MET-1..5).
//! - [`pricing`]: what a request costs in input tokens, calibrated from the request
//!   journal (CC-PRC-1..4).
//! - [`budget`]: `C`, `R`, `H`, `S`, `L` and the tail of a route, their validity, the
//!   phase and budget kind of a request, and the local refusal at ready (CC-BUD-1..6).
//! - [`hysteresis`]: the per-session controller that arms at `S` and releases below `L`
//!   (CC-HYS-1).
//! - [`range`]: the rest range, its balanced summary candidates and their ranking
//!   (CC-MNT-2..4); [`range_nodes`] turns a session's surface into its nodes and gives
//!   the deep rest's clear range (CC-DEEP-1).
//! - [`memo`]: the no-useful-range memo key (CC-MNT-5).
//! - [`texts`]: the model-visible texts in `en` and `zh` (CC-GEN-2, CC-GEN-3) and the
//!   status text (CC-NTC-3, CC-NTC-4).
//!
//! How they fit at a boundary: pricing gives `Q` and the retained tokens; [`budget::resolve`]
//! gives the budget of the routed request; [`metrics::ContextCareMetrics::sample`] turns
//! both into the numbers of the status notice; the session's
//! [`hysteresis::HysteresisController`] decides whether automatic maintenance runs; at
//! ready, [`budget::preflight`] decides whether the adapter is called at all.
//!
//! The mounted plugin ([`ContextCare`]) wires them to the host: [`journal`] (the
//! request journal in its storage domain, CC-JNL), the request gate (CC-BUD-6), the
//! [`boundary`] (CC-BND, the status notice CC-NTC) with [`maintenance`] (pruning,
//! summary passes, requested and deep rests, CC-MNT, CC-DEEP) and its [`summary`]
//! transaction (CC-SUM) on the summary route resolved once at mount (`route.rs`: the
//! `summary` table, else `[agent] compaction_model`, else the conversation route,
//! CC-SUM-1), overflow recovery (CC-OVF), the done-[`ledger`] (CC-EXT-2),
//! and the tools `context_status` and [`rest_tool`] `context_rest` (CC-TOOL). A host
//! may register [`SummaryRepair`] hooks ([`ContextCare::with_summary_repair`]) that
//! repair a failed summary call's selection (CC-SUM-4).
//! [`series`] charts a session: one point per request boundary and the maintenance
//! operations between them (API-4, UI-7).
//! While mounted it serves the management [`routes`] (`/context-care/actions`,
//! `/prompts`, `/rules`: HR-1..3, RC-9) through the host's route table.
//!
//! ```
//! use ccare_care::budget::{self, BudgetPhase, RouteInfo};
//! use ccare_care::config::{CareConfig, RoutePurpose};
//! use ccare_care::hysteresis::HysteresisController;
//!
//! let config = CareConfig::from_json(&serde_json::json!({"safety_tokens": 100})).unwrap();
//! let route = RouteInfo {
//!     provider: "local",
//!     model: "fake-model",
//!     purpose: RoutePurpose::Conversation,
//!     physical_window_tokens: Some(10_000),
//!     max_tokens: None,
//!     adapter_default_max_tokens: Some(1_000),
//! };
//! let budget = budget::resolve(&config, route).unwrap().unwrap();
//! assert_eq!((budget.hard_input, budget.soft_input), (8_900, 8_000));
//! assert_eq!(budget::assess(8_000, Some(&budget)).phase, BudgetPhase::Soft);
//! let mut controller = HysteresisController::new();
//! assert!(controller.observe_budget(8_000, Some(&budget)).is_armed());
//! ```

pub mod boundary;
pub mod budget;
mod care;
pub mod config;
pub mod controls_catalog;
mod gate;
mod guidance;
pub mod hysteresis;
pub mod journal;
pub mod ledger;
mod lifecycle;
pub mod maintenance;
pub mod memo;
pub mod metrics;
pub mod numeric;
mod overflow;
mod plugin;
pub mod pricing;
mod quiet;
pub mod range;
pub mod range_nodes;
mod repair;
pub mod report;
pub mod rest_tool;
mod route;
pub mod routes;
pub mod series;
mod status_tool;
pub mod summary;
pub mod texts;
pub mod undo;

pub use boundary::STATE_SOURCE;
pub use care::{CareError, UiSample};
pub use plugin::{ContextCare, RouteSnapshot};
pub use repair::{RepairAttempt, RepairError, RepairRejection, RepairRequest, SummaryRepair};
pub use rest_tool::{CONTEXT_REST, REQUEST_SOURCE};
pub use series::Series;
pub use status_tool::CONTEXT_STATUS;
