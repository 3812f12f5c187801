//! What the mounted plugin's parts share: the configuration, the route it measures
//! against, the request journal, the host's controls, the per-session controllers and
//! pending rests, and the UI samples; plus the one way they all measure a session
//! (freeze the pricing from the journal, then sample).

use std::collections::HashMap;
use std::sync::Arc;

use ccare_agent::controls::Controls;
use ccare_core::{Locale, Message, SessionId};
use ccare_meter::{Meter, MeterConfig};
use parking_lot::Mutex;
use serde::Serialize;
use serde_json::Value;

use crate::boundary::NoticeScan;
use crate::budget::{Budget, resolve};
use crate::config::CareConfig;
use crate::hysteresis::{HysteresisController, HysteresisThresholds};
use crate::journal::{DigestCache, JournalDigest, RequestJournal};
use crate::metrics::{ContextCareMetrics, MetricInputs};
use crate::plugin::RouteSnapshot;
use crate::pricing::{
    FileTexts, FrozenPricing, ImagePricing, Price, PriceCache, Pricer, PricingBasis, PricingError,
    calibrate_each,
};
use ccare_session::DerivedView;

/// The controls source of context-care (CC-CTL-1).
pub(crate) const CONTROL_SOURCE: &str = "context-care";

/// Why the plugin could not measure: the meter or pricing failed, or the journal could
/// not be read or flushed.
#[derive(Debug, thiserror::Error)]
pub enum CareError {
    /// The route's meter could not be built (e.g. its tokenizer file is unreadable).
    #[error("context-care: the token meter failed: {0}")]
    Meter(String),
    /// Pricing failed (e.g. an image price mismatch).
    #[error("context-care: pricing failed: {0}")]
    Pricing(String),
    /// The request journal failed (CC-JNL-1: flush rethrows a retained write error).
    #[error("context-care: the request journal failed: {0}")]
    Journal(#[from] ccare_agent::domains::DomainError),
}

/// The latest process-local sample of one session, which the UI reads first
/// (CC-MET-5): refreshed at every boundary and every `context_status` call, even when
/// reporting is off.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct UiSample {
    /// The metrics.
    #[serde(flatten)]
    pub metrics: ContextCareMetrics,
    /// When it was taken (ms since the epoch, the host clock).
    pub at: i64,
    /// Whether the session's maintenance controller is armed (CC-HYS-1).
    pub armed: bool,
}

/// The UI samples of every session, shared by the plugin handle and its mounted parts.
#[derive(Debug, Clone, Default)]
pub(crate) struct Samples(Arc<Mutex<HashMap<SessionId, UiSample>>>);

impl Samples {
    pub(crate) fn set(&self, session: &SessionId, sample: UiSample) {
        self.0.lock().insert(session.clone(), sample);
    }

    pub(crate) fn get(&self, session: &SessionId) -> Option<UiSample> {
        self.0.lock().get(session).cloned()
    }
}

/// The per-session state of the plugin, derived from the journal when a process first
/// sees the session ([`Care::ensure_session`]).
#[derive(Debug, Default)]
pub(crate) struct SessionCare {
    /// The session's own maintenance controller (CC-HYS-1).
    pub(crate) controller: HysteresisController,
    /// A `context_rest` call is queued and its boundary has not run yet.
    pub(crate) rest_pending: bool,
    /// The surface's replace generation when the current boundary's pre-step began.
    pub(crate) generation_at_boundary: Option<u64>,
    /// What the latest conversation request was priced at (CC-OVF-1's dispatch-pricing
    /// snapshot), taken by overflow recovery.
    pub(crate) last_dispatch: Option<DispatchSnapshot>,
    /// Overflow recoveries since the last idle or committed answer (CC-OVF-1).
    pub(crate) overflow_retries: u64,
    /// The session's maintenance queue (CC-SER-1): prune, summary, deep rest and
    /// overflow work on one session run one at a time, in arrival order (tokio's mutex
    /// is fair); sessions are independent.
    pub(crate) queue: Arc<tokio::sync::Mutex<()>>,
    /// Each seen message's memo part (CC-MNT-5), by seq: a message at a seq never
    /// changes, so it is hashed and priced once.
    pub(crate) memo_parts: HashMap<u64, crate::memo::MemoPart>,
    /// The unscaled prices of the session's surface messages, kept between boundaries
    /// (issue 14 target 1): every measurement of the session's view on a [`Frozen`]
    /// of this session prices only what changed since the last.
    pub(crate) prices: Arc<Mutex<PriceCache>>,
    /// What the gate hashed of the session's latest request, so the next one hashes
    /// only its new messages.
    pub(crate) hashes: Arc<Mutex<crate::gate::HashMemo>>,
    /// The latest pricing [`Care::freeze`] captured, with what it read of the journal.
    pub(crate) frozen: Option<FrozenAt>,
    /// The session's journal records as the latest freeze decoded them.
    pub(crate) digests: Arc<Mutex<DigestCache>>,
    /// Where the latest status notice is on the session's surface.
    pub(crate) notices: Arc<Mutex<NoticeScan>>,
}

/// A pricing [`Care::freeze`] captured, with the session's journal write stamp read
/// before the flush it followed ([`RequestJournal::writes`]): while the stamp is
/// unchanged, the session's journal is too, and so is the pricing it would capture.
#[derive(Debug, Clone)]
pub(crate) struct FrozenAt {
    /// The session's journal write stamp.
    pub(crate) writes: u64,
    /// The pricing.
    pub(crate) frozen: Frozen,
    /// Whether the journal it was calibrated on shows anything compacted or refused
    /// (`quiet.rs`).
    pub(crate) eventful: bool,
}

/// A conversation request as the gate priced it, for the overflow proof (CC-OVF-3).
#[derive(Debug, Clone)]
pub(crate) struct DispatchSnapshot {
    /// The session's log head when it was built (`logRevision`).
    pub(crate) log_revision: u64,
    /// The surface seqs it carried.
    pub(crate) source_seqs: Vec<u64>,
    /// The price of those surface messages.
    pub(crate) surface_tokens: u64,
    /// Everything else it carried: system, tools, request-only messages.
    pub(crate) other_tokens: u64,
    /// Its route's hard input budget, when known.
    pub(crate) hard_input: Option<i64>,
    /// The pricing it was checked on; recovery prices on it (CC-OVF-2: "on the frozen
    /// dispatch pricing"), so the proof compares like with like.
    pub(crate) frozen: Frozen,
}

/// A pricing frozen for one action (CC-PRC-4) with what the journal says of the latest
/// conversation request's header.
#[derive(Clone)]
pub(crate) struct Frozen {
    pub(crate) meter: Meter,
    pub(crate) pricing: FrozenPricing,
    /// The unscaled tool tokens of the latest conversation request (0 before the first).
    pub(crate) tools_raw: u64,
    /// The calibration header key of the latest conversation request (route, sampling,
    /// tools), `None` before the first; part of the no-useful-range memo (CC-MNT-5).
    pub(crate) header_key: Option<String>,
    /// The session's price cache, which measurements of its view go through (`None`:
    /// price every message afresh).
    pub(crate) prices: Option<Arc<Mutex<PriceCache>>>,
}

impl Frozen {
    /// The unscaled price of the messages of `view` (`price([…messages])`), through the
    /// session's price cache when there is one.
    pub(crate) fn surface_total(
        &self,
        pricer: &Pricer<'_>,
        view: &DerivedView,
    ) -> Result<Price, PricingError> {
        self.messages_total(pricer, view.content_generation, None, &view.messages)
    }

    /// [`Frozen::surface_total`] of a surface's messages at `content_generation`: a
    /// view's, or (with its `replace_generation`) the live log's
    /// [`ccare_session::SessionLog::derived_messages`], which only grow between two
    /// replaces ([`PriceCache::surface_total_grown`]).
    pub(crate) fn messages_total(
        &self,
        pricer: &Pricer<'_>,
        content_generation: u64,
        replace_generation: Option<u64>,
        messages: &[ccare_session::DerivedMessage],
    ) -> Result<Price, PricingError> {
        match &self.prices {
            Some(prices) => {
                let mut prices = prices.lock();
                match replace_generation {
                    Some(replace) => {
                        prices.surface_total_grown(pricer, content_generation, replace, messages)
                    }
                    None => prices.surface_total(pricer, content_generation, messages),
                }
            }
            None => pricer
                .request(
                    None,
                    messages.iter().map(|derived| &*derived.message),
                    &Value::Null,
                )
                .map(|price| price.messages_total()),
        }
    }

    /// The unscaled price of each message of `view`, in order, through the session's
    /// price cache when there is one.
    pub(crate) fn surface_prices(
        &self,
        pricer: &Pricer<'_>,
        view: &DerivedView,
    ) -> Result<Vec<Price>, PricingError> {
        match &self.prices {
            Some(prices) => {
                prices
                    .lock()
                    .surface_prices(pricer, view.content_generation, &view.messages)
            }
            None => view
                .messages
                .iter()
                .map(|derived| pricer.message(&derived.message))
                .collect(),
        }
    }
}

impl std::fmt::Debug for Frozen {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter
            .debug_struct("Frozen")
            .field("pricing", &self.pricing)
            .field("tools_raw", &self.tools_raw)
            .field("header_key", &self.header_key)
            .finish_non_exhaustive()
    }
}

/// One sample of a session: the metrics and what they came from.
#[derive(Debug, Clone)]
pub(crate) struct Measured {
    pub(crate) metrics: ContextCareMetrics,
    /// `Q`: the load in tokens, rounded up.
    pub(crate) load: u64,
    /// The route's conversation budget, when capacity is known and valid.
    pub(crate) budget: Option<Budget>,
}

/// The shared state of a mounted plugin.
pub(crate) struct Care {
    pub(crate) config: Arc<CareConfig>,
    pub(crate) route: Option<Arc<RouteSnapshot>>,
    pub(crate) locale: Locale,
    pub(crate) journal: RequestJournal,
    pub(crate) ledger: crate::ledger::Ledger,
    pub(crate) controls: Controls,
    /// The summary route, `"<provider>/<model>"` (CC-SUM-1, [`crate::route`]); `None`
    /// when no summary can run (R4 "no provider", `maintenance.summary` unavailable).
    pub(crate) summary_model: Option<String>,
    /// The host's LLM layer, for summaries (`None` in hosts without one).
    pub(crate) llm: Option<std::sync::Arc<ccare_llm::Llm>>,
    /// The host's side requests: summary calls run its request hooks and the segments
    /// serving purpose `compaction` (MP-3, [`ccare_agent::SideRequests`]).
    pub(crate) side: Option<ccare_agent::SideRequests>,
    /// Cancelled when the plugin is unmounted: a running summary stops (CC-SER-1).
    pub(crate) lifetime: ccare_llm::CancellationToken,
    pub(crate) sessions: Mutex<HashMap<SessionId, SessionCare>>,
    pub(crate) samples: Samples,
    /// The summary repair hooks, tried in order after a failed summary call (CC-SUM-4).
    pub(crate) repairs: Vec<Arc<dyn crate::repair::SummaryRepair>>,
    /// The host's system-prompt sections, live: the report prices each part of the next
    /// request's system prompt (`report.rs` categories).
    pub(crate) system_sections: ccare_agent::SystemSections,
    /// The latest tools the request gate wrote out ([`crate::gate::ToolsMemo`]).
    pub(crate) tools: crate::gate::ToolsMemo,
    /// The latest system prompt the request gate priced ([`crate::gate::SystemPrices`]).
    pub(crate) system_prices: crate::gate::SystemPrices,
}

impl Care {
    /// Whether the context-care action `rule.action` is enabled for the session now
    /// (CC-CTL-2 decision order).
    pub(crate) fn enabled(&self, session: &SessionId, rule: &str, action: &str) -> bool {
        self.controls
            .decide(session, CONTROL_SOURCE, rule, action)
            .is_enabled()
    }

    /// Makes sure the session's state exists, deriving it from durable data the first
    /// time this process sees the session (so consecutive processes behave like one):
    /// the controller replays the journal's conversation requests (their `Q` against
    /// their budget's `S` and `L`). A rest queued by an earlier process needs no
    /// state: it waits in the agent's durable inbox and reaches the next boundary,
    /// before the model can ask again.
    pub(crate) async fn ensure_session(
        &self,
        session: &ccare_session::Session,
    ) -> Result<(), CareError> {
        self.ensure_id(session.id()).await
    }

    /// [`Care::ensure_session`] by id: for readers that hold a loaded log rather than
    /// an open session (the read-only report, the management routes).
    pub(crate) async fn ensure_id(&self, session: &SessionId) -> Result<(), CareError> {
        if self.sessions.lock().contains_key(session) {
            return Ok(());
        }
        self.journal.keep_resident(session).await?;
        let controller = self.replayed_controller(session).await?;
        self.sessions
            .lock()
            .entry(session.clone())
            .or_insert(SessionCare {
                controller,
                rest_pending: false,
                generation_at_boundary: None,
                last_dispatch: None,
                overflow_retries: 0,
                queue: Arc::default(),
                memo_parts: HashMap::new(),
                prices: Arc::default(),
                hashes: Arc::default(),
                frozen: None,
                digests: Arc::default(),
                notices: Arc::default(),
            });
        Ok(())
    }

    /// Whether the session's maintenance controller is armed (CC-HYS-1), changing no
    /// state: this process's controller when it has one, else the journal's replay.
    /// For readers (the management routes) of a session this process may never drive,
    /// whose state must then still be derived when it first does.
    pub(crate) async fn armed_now(&self, session: &SessionId) -> Result<bool, CareError> {
        let held = self
            .sessions
            .lock()
            .get(session)
            .map(|state| state.controller.is_armed());
        match held {
            Some(armed) => Ok(armed),
            None => Ok(self.replayed_controller(session).await?.is_armed()),
        }
    }

    /// The controller the journal's conversation requests leave (their `Q` against
    /// their budget's `S` and `L`).
    async fn replayed_controller(
        &self,
        session: &SessionId,
    ) -> Result<HysteresisController, CareError> {
        let entries = self.journal.list(session).await?;
        let mut controller = HysteresisController::new();
        for entry in &entries {
            let request = entry.request();
            if request.purpose != Some("conversation") {
                continue;
            }
            let (Some(q), Some(budget)) = (request.input_tokens, request.budget) else {
                continue;
            };
            let thresholds =
                budget
                    .soft_input
                    .zip(budget.release_target)
                    .map(|(soft_input, release_target)| HysteresisThresholds {
                        soft_input,
                        release_target,
                    });
            controller.observe(q, thresholds);
        }
        Ok(controller)
    }

    /// Drops the session's per-session state (a closed session, [`crate::lifecycle`]);
    /// its next use rebuilds it from the store.
    pub(crate) fn forget_session(&self, session: &SessionId) {
        self.sessions.lock().remove(session);
        self.journal.release(session);
    }

    /// How many sessions this process holds per-session state for.
    pub(crate) fn session_count(&self) -> usize {
        self.sessions.lock().len()
    }

    /// Runs `f` on the session's state.
    pub(crate) fn with_session<T>(
        &self,
        session: &SessionId,
        f: impl FnOnce(&mut SessionCare) -> T,
    ) -> T {
        f(self.sessions.lock().entry(session.clone()).or_default())
    }

    /// `read` of the latest status notice on the session's surface as its log holds it
    /// now (`None`: there is none), read under the session's lock.
    pub(crate) fn latest_notice<T>(
        &self,
        session: &ccare_session::Session,
        read: impl FnOnce(Option<&ccare_session::DerivedMessage>) -> T,
    ) -> T {
        let scan = self.with_session(session.id(), |state| Arc::clone(&state.notices));
        session.with_log(|log| read(scan.lock().latest(log)))
    }

    /// The session's price cache (created with its state).
    pub(crate) fn price_cache(&self, session: &SessionId) -> Arc<Mutex<PriceCache>> {
        self.with_session(session, |state| Arc::clone(&state.prices))
    }

    /// The conversation budget of the plugin's route; `None` when capacity is unknown
    /// or the budget is invalid (the request gate reports an invalid one as an error).
    pub(crate) fn conversation_budget(&self) -> Option<Budget> {
        let route = self.route.as_deref()?;
        resolve(&self.config, route.conversation_info())
            .ok()
            .flatten()
    }

    /// Flushes the journal, then freezes the session's pricing (CC-PRC-4): the scale
    /// calibrated on the latest conversation header's real usage (CC-PRC-3).
    /// Unchanged journal, unchanged pricing: while no write of the session's journal
    /// records was queued since its latest freeze, it is reused as it was captured
    /// (other sessions' writes leave it as it is); otherwise only the records written
    /// since are decoded again ([`DigestCache`]).
    pub(crate) async fn freeze(&self, session: &SessionId) -> Result<Frozen, CareError> {
        let writes = self.journal.writes(session);
        self.journal.flush_for(session).await?;
        if let Some(frozen) = self.with_session(session, |state| {
            state
                .frozen
                .as_ref()
                .filter(|frozen| frozen.writes == writes)
                .map(|frozen| frozen.frozen.clone())
        }) {
            return Ok(frozen);
        }
        let entries = self.journal.list(session).await?;
        let meter = meter_for(self.route.as_deref())?;
        let digests = self.with_session(session, |state| Arc::clone(&state.digests));
        let digest: JournalDigest = digests.lock().digest(&entries);
        let basis = match &digest.header_key {
            Some(key) => calibrate_each(digest.records(), key, meter.basis().into()),
            None if entries.is_empty() => PricingBasis::meter_estimate(&meter),
            None => PricingBasis::UncalibratedEstimate,
        };
        let pricing = FrozenPricing::capture(
            &meter,
            basis,
            ImagePricing::FixedEstimate,
            FileTexts::default(),
        );
        let frozen = Frozen {
            meter,
            pricing,
            tools_raw: digest.tools_raw,
            header_key: digest.header_key,
            prices: Some(self.price_cache(session)),
        };
        self.with_session(session, |state| {
            state.frozen = Some(FrozenAt {
                writes,
                frozen: frozen.clone(),
                eventful: digest.eventful,
            });
        });
        Ok(frozen)
    }

    /// Samples the session as it stands (no pending batch): its state ensured, the
    /// journal flushed, the pricing frozen, the surface measured. What `context_status`
    /// and the fresh report both start from.
    pub(crate) async fn sample_now(
        &self,
        session: &ccare_session::Session,
    ) -> Result<(Frozen, Measured), CareError> {
        self.ensure_session(session).await?;
        let frozen = self.freeze(session.id()).await?;
        let measured = self.measure_view(&frozen, &session.derived_view(), std::iter::empty())?;
        Ok((frozen, measured))
    }

    /// Prepares the session's next boundary while it is idle, appending and recording
    /// nothing: its state ensured, the pricing frozen on the journal as it stands, and
    /// every surface message priced into the session's price cache. The boundary then
    /// reuses the frozen pricing (unless the journal changed since) and prices only
    /// what it adds.
    pub(crate) async fn warm(&self, session: &ccare_session::Session) -> Result<(), CareError> {
        self.ensure_session(session).await?;
        let frozen = self.freeze(session.id()).await?;
        self.measure_live(&frozen, session, std::iter::empty())?;
        Ok(())
    }

    /// Samples the metrics (CC-MET-4): `retained` is the surface; the load adds the
    /// latest header's tools and `batch` (pending messages, the notice to come).
    pub(crate) fn measure<'m>(
        &self,
        frozen: &Frozen,
        surface: impl IntoIterator<Item = &'m Message>,
        batch: impl IntoIterator<Item = &'m Message>,
    ) -> Result<Measured, CareError> {
        self.measure_with(frozen, batch, |pricer| {
            pricer
                .request(None, surface, &Value::Null)
                .map(|surface| surface.messages_total())
        })
    }

    /// [`Care::measure`] with the messages of `view` as the surface, priced through the
    /// session's price cache (`frozen.prices`): the same numbers, the unchanged
    /// messages not priced again.
    pub(crate) fn measure_view<'m>(
        &self,
        frozen: &Frozen,
        view: &DerivedView,
        batch: impl IntoIterator<Item = &'m Message>,
    ) -> Result<Measured, CareError> {
        self.measure_with(frozen, batch, |pricer| frozen.surface_total(pricer, view))
    }

    /// [`Care::measure_view`] of the session's surface as its log holds it now, read
    /// under the session's lock instead of from a [`DerivedView`] snapshot: a snapshot
    /// at a new head copies every message (about 0.1 ms at 10,000), which a boundary
    /// after one new message has no need for.
    pub(crate) fn measure_live<'m>(
        &self,
        frozen: &Frozen,
        session: &ccare_session::Session,
        batch: impl IntoIterator<Item = &'m Message>,
    ) -> Result<Measured, CareError> {
        self.measure_with(frozen, batch, |pricer| {
            session.with_log(|log| {
                frozen.messages_total(
                    pricer,
                    log.content_generation(),
                    Some(log.replace_generation()),
                    log.derived_messages(),
                )
            })
        })
    }

    fn measure_with<'m>(
        &self,
        frozen: &Frozen,
        batch: impl IntoIterator<Item = &'m Message>,
        surface: impl FnOnce(&Pricer<'_>) -> Result<Price, PricingError>,
    ) -> Result<Measured, CareError> {
        if self.route.is_none() {
            return Ok(Measured {
                metrics: ContextCareMetrics::UNKNOWN,
                load: 0,
                budget: None,
            });
        }
        let pricer = frozen
            .pricing
            .pricer(&frozen.meter)
            .map_err(|error| CareError::Pricing(error.to_string()))?;
        let scale = pricer.text_scale();
        let retained = surface(&pricer).map_err(|error| CareError::Pricing(error.to_string()))?;
        let batch = pricer
            .request(None, batch, &Value::Null)
            .map_err(|error| CareError::Pricing(error.to_string()))?;
        let everything = retained
            .plus(batch.messages_total())
            .plus(crate::pricing::Price {
                text: frozen.tools_raw,
                visual: 0,
            });
        let load = everything.ceil(scale);
        let budget = self.conversation_budget();
        let metrics = ContextCareMetrics::sample(
            &self.config,
            MetricInputs {
                load_tokens: load as f64,
                retained_tokens: retained.value(scale),
                capacity_tokens: budget.as_ref().map(|budget| budget.capacity as f64),
                route_known: true,
            },
        );
        Ok(Measured {
            metrics,
            load,
            budget,
        })
    }
}

/// The meter of a route (its tokenizer when configured, the heuristic otherwise).
pub(crate) fn meter_for(route: Option<&RouteSnapshot>) -> Result<Meter, CareError> {
    let config = match route {
        Some(route) => MeterConfig {
            image_tokens: route.image_tokens,
            tokenizer: route.tokenizer.clone(),
            ..MeterConfig::default()
        },
        None => MeterConfig::default(),
    };
    Meter::new(&config).map_err(|error| CareError::Meter(error.to_string()))
}
