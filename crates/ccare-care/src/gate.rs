//! The request gate (CC-BUD-6, CC-JNL-2): every request is priced on its own route,
//! journaled `ready` and made durable, then compared with the hard input budget `H`;
//! over `H` it is refused with `REQUEST_BUDGET_EXCEEDED` and never reaches the
//! provider. The gate's lifecycle callbacks write the rest of the record: dispatched,
//! settled, or not dispatched.

mod hashes;
mod tools;

pub(crate) use hashes::HashMemo;
pub(crate) use tools::{SystemPrices, ToolsMemo};

use std::sync::Arc;

use ccare_agent::{BoxFuture, HookContext, IdleHook, RequestGate, Settlement};
use ccare_core::{FailureCode, LlmFailure};
use ccare_llm::{PreparedCall, Purpose};

use crate::budget::{Preflight, RouteInfo, assess, preflight, resolve};
use crate::care::{Care, meter_for};
use crate::config::RoutePurpose;
use crate::journal::records::{RecordRoute, RequestRecord, SourceHeader};
use crate::pricing::{FileTexts, FrozenPricing, ImagePricing, Price, RequestPrice, calibrate_each};

/// The gate; one per mounted plugin.
pub(crate) struct BudgetGate {
    pub(crate) care: Arc<Care>,
}

fn purpose_of(purpose: Purpose) -> RoutePurpose {
    match purpose {
        Purpose::Conversation => RoutePurpose::Conversation,
        Purpose::Compaction => RoutePurpose::Compaction,
        Purpose::SessionTitle => RoutePurpose::SessionTitle,
    }
}

fn purpose_name(purpose: Purpose) -> &'static str {
    match purpose {
        Purpose::Conversation => "conversation",
        Purpose::Compaction => "compaction",
        Purpose::SessionTitle => "session-title",
    }
}

fn internal(error: impl std::fmt::Display) -> LlmFailure {
    LlmFailure::new(FailureCode::Unknown, error.to_string())
}

/// The gate's check of one prepared request of `session` (any purpose): price it on its
/// own route, journal it `ready` and make that durable, then refuse it over `H`
/// (CC-BUD-6, CC-JNL-2). The conversation's gate and the summary transaction both call
/// it, so a summary request is journaled and budget-checked like any other.
pub(crate) async fn check_request(
    care: &Care,
    session: &ccare_session::Session,
    call: &PreparedCall,
    now_ms: i64,
) -> Result<(), LlmFailure> {
    let route = &call.route;
    let config = &call.config;
    let explicit = config
        .max_tokens
        .filter(|tokens| Some(*tokens) != route.max_output_tokens);
    let budget = resolve(
        &care.config,
        RouteInfo {
            provider: &route.provider,
            model: &route.model,
            purpose: purpose_of(config.purpose),
            physical_window_tokens: route.context_window,
            max_tokens: explicit.map(u64::from),
            adapter_default_max_tokens: route.max_output_tokens.map(u64::from),
        },
    )
    .map_err(|invalid| LlmFailure::new(FailureCode::InvalidRequest, invalid.to_string()))?;
    // `ToolSpec` serializes as `{name, description, input_schema}`.
    let tools = care.tools.form(&config.tools);
    let header = SourceHeader {
        provider: route.provider.clone(),
        model: route.model.clone(),
        reasoning_effort: config.reasoning_effort.clone(),
        temperature: config.temperature,
        max_tokens: config.max_tokens,
    };
    let header_key = tools.header_key(&header);
    // The dispatch check prices its final route itself (CC-PRC-4), calibrated on
    // the session's settled requests of this header (CC-PRC-3).
    let session_id = session.id();
    let journal = &care.journal;
    journal.flush_for(session_id).await.map_err(internal)?;
    let entries = journal.list(session_id).await.map_err(internal)?;
    // Decoded once per record version, shared with the boundary's freeze.
    let digests = care.with_session(session_id, |state| Arc::clone(&state.digests));
    let digest = digests.lock().digest(&entries);
    let meter = meter_for(Some(&crate::plugin::RouteSnapshot::of(route))).map_err(internal)?;
    let basis = calibrate_each(digest.records(), &header_key, meter.basis().into());
    let frozen = FrozenPricing::capture(
        &meter,
        basis,
        ImagePricing::FixedEstimate,
        FileTexts::default(),
    );
    let pricer = frozen.pricer(&meter).map_err(internal)?;
    let view = session.derived_view();
    // A conversation request is built from the surface: its messages' prices come from
    // the session's price cache (the same numbers, issue 14 target 1). Other purposes
    // may price on another meter, so they leave the cache alone.
    let prices = (config.purpose == Purpose::Conversation).then(|| care.price_cache(session_id));
    let cached = crate::care::Frozen {
        meter: meter.clone(),
        pricing: frozen.clone(),
        tools_raw: 0,
        header_key: None,
        prices: prices.clone(),
    };
    let surface_total = cached.surface_total(&pricer, &view);
    // The tools and the system prompt are the same on every request of a host: their
    // prices on the frozen meter are kept (`tools.rs`).
    let fingerprint = frozen.meter();
    let tools_tokens = tools.tokens(fingerprint, |value| pricer.tools(value));
    let system = config.system.as_deref().map(|prompt| Price {
        text: care
            .system_prices
            .tokens(fingerprint, prompt, |prompt| pricer.system(prompt).text),
        visual: 0,
    });
    let price = request_price(&pricer, prices.as_deref(), config, system, tools_tokens)
        .map_err(internal)?;
    let q = price.q();
    let surface_tokens = surface_total
        .map(|total| total.ceil(pricer.text_scale()))
        .unwrap_or(0);
    if config.purpose == Purpose::Conversation {
        let snapshot = crate::care::DispatchSnapshot {
            log_revision: session.head(),
            source_seqs: view.messages.iter().map(|derived| derived.seq).collect(),
            surface_tokens,
            other_tokens: q.saturating_sub(surface_tokens),
            hard_input: budget.as_ref().map(|budget| budget.hard_input),
            frozen: crate::care::Frozen {
                tools_raw: price.tools,
                header_key: Some(header_key.clone()),
                ..cached
            },
        };
        care.with_session(session.id(), |state| {
            state.last_dispatch = Some(snapshot);
        });
    }
    let source_seqs: Vec<u64> = view.messages.iter().map(|derived| derived.seq).collect();
    // The session's own memo, locked alone (not the plugin's session map) while the
    // new messages are hashed.
    let memo = care.with_session(session_id, |state| Arc::clone(&state.hashes));
    let hashes = hashes::request_hashes(
        &mut memo.lock(),
        &view.messages,
        config.system.as_deref(),
        &config.messages,
        &tools.canonical,
    );
    let record = RequestRecord {
        call_id: call.call_id.clone(),
        log_revision: session.head(),
        source_seqs,
        source_header: header,
        source_messages_hash: hashes.source_messages,
        purpose: purpose_name(config.purpose).to_owned(),
        route: RecordRoute {
            provider: route.provider.clone(),
            model: route.model.clone(),
            max_tokens: config.max_tokens,
            reasoning_effort: config.reasoning_effort.clone(),
            temperature: config.temperature,
        },
        input_hash: hashes.input,
        pricing_basis: frozen.basis().clone(),
        assessment: assess(q, budget.as_ref()),
        budget,
        raw_input: price.raw_input(),
        tools_tokens: price.tools,
        input_tokens: q,
        calibration_header_key: header_key,
    };
    journal
        .ready(session_id, now_ms, &record)
        .await
        .map_err(internal)?;
    let budget = record.budget;
    // Persisted before the decision (CC-BUD-6).
    journal
        .flush_call(&record.call_id)
        .await
        .map_err(internal)?;
    match preflight(q, budget.as_ref()) {
        Preflight::Dispatch => Ok(()),
        Preflight::Refuse(refusal) => Err(refusal.to_llm_failure(&route.provider, &route.model)),
    }
}

/// CC-PRC-2 `priceRequest` of `config`, as [`crate::pricing::Pricer::request`] gives
/// it: each message that is the very message the price cache holds at its place (the
/// surface the request was built from) takes its cached price, any other is priced.
/// `system` and `tools` are the prices of the request's system prompt (`None`: it has
/// none) and tools, as [`crate::pricing::Pricer::system`] and
/// [`crate::pricing::Pricer::tools`] give them.
fn request_price(
    pricer: &crate::pricing::Pricer<'_>,
    prices: Option<&parking_lot::Mutex<crate::pricing::PriceCache>>,
    config: &ccare_llm::CallConfig,
    system: Option<Price>,
    tools: u64,
) -> Result<RequestPrice, crate::pricing::PricingError> {
    let cache = prices.map(parking_lot::Mutex::lock);
    let mut position = 0;
    let mut messages = Vec::with_capacity(config.messages.len());
    for message in &config.messages {
        let hit = cache.as_ref().and_then(|cache| {
            // The next surface message, or the one after it (a surface message the
            // request hooks rewrote is priced afresh).
            [position, position + 1].into_iter().find_map(|at| {
                cache
                    .at(pricer, at, &message.message)
                    .map(|price| (at, price))
            })
        });
        let price = match hit {
            Some((at, price)) => {
                position = at + 1;
                price
            }
            None => pricer.message(&message.message)?,
        };
        messages.push(price);
    }
    Ok(RequestPrice {
        system: system.unwrap_or_default(),
        messages,
        tools,
        scale: pricer.text_scale(),
    })
}

impl RequestGate for BudgetGate {
    fn check<'a>(
        &'a self,
        context: &'a HookContext,
        call: &'a PreparedCall,
    ) -> BoxFuture<'a, Result<(), LlmFailure>> {
        Box::pin(check_request(
            &self.care,
            &context.session,
            call,
            context.clock.now_ms(),
        ))
    }

    fn dispatched(&self, _context: &HookContext, call: &PreparedCall) {
        if let Err(error) = self.care.journal.dispatched(&call.call_id) {
            tracing::warn!(call = %call.call_id, %error, "context-care journal: dispatched not recorded");
        }
    }

    fn not_dispatched(&self, _context: &HookContext, call_id: &str, failure: &LlmFailure) {
        if let Err(error) = self.care.journal.not_dispatched(call_id, failure) {
            tracing::warn!(call = %call_id, %error, "context-care journal: refusal not recorded");
        }
    }

    fn settled(&self, context: &HookContext, settlement: &Settlement) {
        if settlement.outcome == ccare_agent::SettledOutcome::Completed {
            // CC-OVF-1: a committed answer resets the overflow retries.
            self.care.with_session(context.session.id(), |state| {
                state.overflow_retries = 0;
            });
        }
        if let Err(error) = self.care.journal.settled(settlement) {
            tracing::warn!(call = %settlement.call_id, %error, "context-care journal: settlement not recorded");
        }
    }
}

/// Makes the journal durable whenever an agent goes idle, so a turn's settlement is
/// on disk (and visible to another reader) once the agent is idle, then samples the
/// session so its next request's boundary starts warm.
pub(crate) struct JournalFlush {
    pub(crate) care: Arc<Care>,
}

impl IdleHook for JournalFlush {
    fn on_idle<'a>(&'a self, session: &'a ccare_session::Session) -> BoxFuture<'a, ()> {
        Box::pin(async move {
            // CC-OVF-1: idle resets the overflow retries.
            self.care
                .with_session(session.id(), |state| state.overflow_retries = 0);
            if let Err(error) = self.care.journal.flush().await {
                tracing::error!(session = %session.id(), %error, "context-care journal: write failed");
                return;
            }
            // Freeze the pricing on the settled journal and price the answer that just
            // ended, while nothing waits: the next boundary finds both kept and prices
            // only what it adds. A failure here is the next boundary's to report.
            if let Err(error) = self.care.warm(session).await {
                tracing::debug!(session = %session.id(), %error, "context-care: idle sample left to the next boundary");
            }
        })
    }
}
