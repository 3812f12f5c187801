//! Budget resolution and the local dispatch check (CC-BUD-1..6).
//!
//! [`resolve`] turns the config and one route into a [`Budget`]: the capacity `C`, the
//! output reserve `R`, the hard input `H`, the soft input `S`, the release target `L`
//! and the compaction tail, checked for validity (CC-BUD-2). [`assess`] places a
//! request's input `Q` against it (phase, deficits, budget kind, CC-BUD-3), and
//! [`preflight`] is the refusal decision at ready (CC-BUD-6). All of it is arithmetic;
//! the caller prices the request and writes the journal.

use std::fmt;

use ccare_core::json::MAX_SAFE_INTEGER;
use ccare_core::{FailureCode, LlmFailure};
use serde::{Deserialize, Serialize};

use crate::config::{CareConfig, RoutePurpose};

/// What the budget needs to know about a route (CC-BUD-1, CC-BUD-4).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RouteInfo<'a> {
    /// The provider's config name; route budgets match it exactly.
    pub provider: &'a str,
    /// The model name; route budgets match it exactly.
    pub model: &'a str,
    /// The request purpose (CC-BUD-4, CC-BUD-5).
    pub purpose: RoutePurpose,
    /// The model's physical context window (`[models] context_window`); counts only when
    /// > 0 (CC-BUD-1). Values above 2^53 − 1 are read as 2^53 − 1.
    pub physical_window_tokens: Option<u64>,
    /// The request's explicit `maxTokens` (`completionSource: explicit`).
    pub max_tokens: Option<u64>,
    /// The adapter default (`[models] max_output_tokens`), used when the request sets
    /// none (`completionSource: adapter-default`).
    pub adapter_default_max_tokens: Option<u64>,
}

/// Where `R` came from (CC-BUD-1).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub enum CompletionSource {
    /// The request's own `maxTokens`.
    #[serde(rename = "explicit")]
    Explicit,
    /// The adapter's default.
    #[serde(rename = "adapter-default")]
    AdapterDefault,
    /// Neither: `R = 0`.
    #[serde(rename = "absent")]
    Absent,
}

/// A resolved, valid budget (CC-BUD-1, CC-BUD-2). Only [`resolve`] makes one, so every
/// value satisfies CC-BUD-2: `H > 0`, `0 < S ≤ H`, `0 ≤ tail < S`, `L > 0`.
///
/// Serialized in camelCase for the journal's `budget` and the UI.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
#[non_exhaustive]
pub struct Budget {
    /// The purpose it was resolved for.
    pub purpose: RoutePurpose,
    /// `C = min(known capacities)`: the physical window and the policy capacity.
    pub capacity: i64,
    /// The physical window, when known (> 0).
    pub physical_window: Option<i64>,
    /// The policy capacity `contextBudgetTokens` (route override first), when set.
    pub policy_capacity: Option<i64>,
    /// `billingInputCeilingTokens` (route override first), when set.
    pub billing_input_ceiling: Option<i64>,
    /// `R = maxTokens ?? adapterDefault ?? 0`: the output reserve.
    pub max_tokens: i64,
    /// Where `R` came from.
    pub completion_source: CompletionSource,
    /// The safety in force (`summarySafetyTokens ?? safetyTokens` for compaction).
    pub safety_tokens: i64,
    /// The burst in force (0 for compaction, CC-BUD-5).
    pub burst_tokens: i64,
    /// The release margin in force (0 for compaction, CC-BUD-5).
    pub release_margin_tokens: i64,
    /// `retainTokens` in force: the config's, or 0 for compaction (CC-BUD-5).
    pub retain_tokens: Option<i64>,
    /// `H = min(C−R−safety, billing−safety)`: the hard input.
    pub hard_input: i64,
    /// `physical−R−safety`, when the physical window is known.
    pub physical_input: Option<i64>,
    /// `S = min(floor(budgetRatio·C), H−burst)`: the soft input, where the hysteresis
    /// controller arms.
    pub soft_input: i64,
    /// `L = S−releaseMargin`: the release target, below which the controller disarms.
    pub release_target: i64,
    /// `tail = retainTokens ?? floor(retainRatio·(C−R))`: the history kept by compaction.
    pub tail: i64,
}

/// The budget phase of a request (CC-BUD-1, CC-BUD-3).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum BudgetPhase {
    /// No capacity known: dispatch unchecked, no automatic maintenance.
    Unknown,
    /// `Q < S`.
    Normal,
    /// `S ≤ Q ≤ H`.
    Soft,
    /// `Q > H`.
    Hard,
}

/// Which limit a request is over (CC-BUD-3).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum BudgetKind {
    /// Over `physicalInput` only.
    Physical,
    /// Over `policy−R−safety` or `billing−safety` only.
    Policy,
    /// Over both.
    Both,
}

/// A request's input placed against a budget (CC-BUD-3). `hardInput` and the deficits
/// are absent when the phase is unknown.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct BudgetAssessment {
    /// `Q`.
    pub input_tokens: u64,
    /// The phase.
    pub phase: BudgetPhase,
    /// `H`, when a capacity is known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hard_input: Option<i64>,
    /// `max(0, Q−H)`, when a capacity is known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hard_deficit: Option<i64>,
    /// `max(0, Q−physicalInput)`, when the physical window is known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub physical_deficit: Option<i64>,
    /// The budget kind, absent when no limit is exceeded.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub budget_kind: Option<BudgetKind>,
}

/// A budget error (CC-BUD-1, CC-BUD-2).
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum BudgetError {
    /// The resolved values break CC-BUD-2.
    #[error(transparent)]
    Invalid(#[from] InvalidBudget),
    /// A request price that is not a finite number ≥ 0 (CC-BUD-1).
    #[error("request input price must be a finite number >= 0, got {price}")]
    InvalidInputPrice {
        /// The price found.
        price: f64,
    },
}

/// `invalid resolved budget` (CC-BUD-2), naming capacity, maxTokens, safetyTokens,
/// burstTokens, retainTokens and releaseMarginTokens, then the broken condition.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "invalid resolved budget: capacity {capacity}, maxTokens {max_tokens}, safetyTokens {safety_tokens}, burstTokens {burst_tokens}, retainTokens {retain}, releaseMarginTokens {release_margin_tokens} ({violation})",
    retain = OptionalTokens(*retain_tokens)
)]
pub struct InvalidBudget {
    /// `C`.
    pub capacity: i64,
    /// `R`.
    pub max_tokens: i64,
    /// The safety in force.
    pub safety_tokens: i64,
    /// The burst in force.
    pub burst_tokens: i64,
    /// `retainTokens` in force (`unset` in the message when absent).
    pub retain_tokens: Option<i64>,
    /// The release margin in force.
    pub release_margin_tokens: i64,
    /// The first broken condition, in the order CC-BUD-2 lists them.
    pub violation: BudgetViolation,
}

/// The broken CC-BUD-2 condition, with the values involved.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BudgetViolation {
    /// `H ≤ 0`.
    HardInputNotPositive {
        /// `H`.
        hard_input: i64,
    },
    /// `S ≤ 0`.
    SoftInputNotPositive {
        /// `S`.
        soft_input: i64,
    },
    /// `S > H`.
    SoftInputAboveHardInput {
        /// `S`.
        soft_input: i64,
        /// `H`.
        hard_input: i64,
    },
    /// `tail < 0`.
    TailNegative {
        /// `tail`.
        tail: i64,
    },
    /// `tail ≥ S`.
    TailNotBelowSoftInput {
        /// `tail`.
        tail: i64,
        /// `S`.
        soft_input: i64,
    },
    /// `L ≤ 0`.
    ReleaseTargetNotPositive {
        /// `L`.
        release_target: i64,
    },
}

impl fmt::Display for BudgetViolation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            BudgetViolation::HardInputNotPositive { hard_input } => {
                write!(f, "hard input {hard_input} <= 0")
            }
            BudgetViolation::SoftInputNotPositive { soft_input } => {
                write!(f, "soft input {soft_input} <= 0")
            }
            BudgetViolation::SoftInputAboveHardInput {
                soft_input,
                hard_input,
            } => write!(f, "soft input {soft_input} > hard input {hard_input}"),
            BudgetViolation::TailNegative { tail } => write!(f, "tail {tail} < 0"),
            BudgetViolation::TailNotBelowSoftInput { tail, soft_input } => {
                write!(f, "tail {tail} >= soft input {soft_input}")
            }
            BudgetViolation::ReleaseTargetNotPositive { release_target } => {
                write!(f, "release target {release_target} <= 0")
            }
        }
    }
}

struct OptionalTokens(Option<i64>);

impl fmt::Display for OptionalTokens {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.0 {
            Some(tokens) => write!(f, "{tokens}"),
            None => f.write_str("unset"),
        }
    }
}

/// `C = min(physical window, contextBudgetTokens)` over whichever are known, with the
/// route budget overriding the global policy capacity (CC-MET-4, CC-BUD-1, CC-BUD-4).
/// `None`: no capacity known. This is the metrics' C even when [`resolve`] fails.
pub fn resolve_capacity(config: &CareConfig, route: RouteInfo<'_>) -> Option<i64> {
    let physical_window = known_physical_window(route);
    let policy_capacity = policy_values(config, route).0;
    min_known(physical_window, policy_capacity)
}

/// Resolves the budget of a route (CC-BUD-1, CC-BUD-4, CC-BUD-5) and checks it
/// (CC-BUD-2). `Ok(None)` is the `unknown` phase: no capacity is known, dispatch is
/// unchecked and there is no automatic maintenance.
pub fn resolve(config: &CareConfig, route: RouteInfo<'_>) -> Result<Option<Budget>, InvalidBudget> {
    let physical_window = known_physical_window(route);
    let (policy_capacity, billing_input_ceiling) = policy_values(config, route);
    let Some(capacity) = min_known(physical_window, policy_capacity) else {
        return Ok(None);
    };
    let (max_tokens, completion_source) = match (route.max_tokens, route.adapter_default_max_tokens)
    {
        (Some(explicit), _) => (tokens(explicit), CompletionSource::Explicit),
        (None, Some(default)) => (tokens(default), CompletionSource::AdapterDefault),
        (None, None) => (0, CompletionSource::Absent),
    };
    let compaction = route.purpose == RoutePurpose::Compaction;
    let (safety_tokens, burst_tokens, release_margin_tokens, retain_tokens) = if compaction {
        (
            tokens(config.effective_summary_safety_tokens()),
            0,
            0,
            Some(0),
        )
    } else {
        (
            tokens(config.safety_tokens),
            tokens(config.burst_tokens),
            tokens(config.release_margin_tokens),
            config.retain_tokens.map(tokens),
        )
    };

    let window_hard_input = capacity - max_tokens - safety_tokens;
    let hard_input = match billing_input_ceiling {
        Some(billing) => window_hard_input.min(billing - safety_tokens),
        None => window_hard_input,
    };
    let physical_input = physical_window.map(|physical| physical - max_tokens - safety_tokens);
    let soft_input = floor_share(config.budget_ratio, capacity).min(hard_input - burst_tokens);
    let tail =
        retain_tokens.unwrap_or_else(|| floor_share(config.retain_ratio, capacity - max_tokens));
    let release_target = soft_input - release_margin_tokens;

    let violation = if hard_input <= 0 {
        Some(BudgetViolation::HardInputNotPositive { hard_input })
    } else if soft_input <= 0 {
        Some(BudgetViolation::SoftInputNotPositive { soft_input })
    } else if soft_input > hard_input {
        Some(BudgetViolation::SoftInputAboveHardInput {
            soft_input,
            hard_input,
        })
    } else if tail < 0 {
        Some(BudgetViolation::TailNegative { tail })
    } else if tail >= soft_input {
        Some(BudgetViolation::TailNotBelowSoftInput { tail, soft_input })
    } else if release_target <= 0 {
        Some(BudgetViolation::ReleaseTargetNotPositive { release_target })
    } else {
        None
    };
    if let Some(violation) = violation {
        return Err(InvalidBudget {
            capacity,
            max_tokens,
            safety_tokens,
            burst_tokens,
            retain_tokens,
            release_margin_tokens,
            violation,
        });
    }

    Ok(Some(Budget {
        purpose: route.purpose,
        capacity,
        physical_window,
        policy_capacity,
        billing_input_ceiling,
        max_tokens,
        completion_source,
        safety_tokens,
        burst_tokens,
        release_margin_tokens,
        retain_tokens,
        hard_input,
        physical_input,
        soft_input,
        release_target,
        tail,
    }))
}

/// `Q = ceil(complete input price)`, which must be finite and ≥ 0 (CC-GEN-1, CC-BUD-1).
/// Prices above 2^53 − 1 are read as 2^53 − 1.
pub fn input_tokens_from_price(price: f64) -> Result<u64, BudgetError> {
    if !price.is_finite() || price < 0.0 {
        return Err(BudgetError::InvalidInputPrice { price });
    }
    let ceiled = price.ceil();
    // Exact for every integral float up to 2^53; larger ones saturate.
    let input_tokens = ceiled as u64;
    Ok(input_tokens.min(MAX_SAFE_INTEGER))
}

/// Places `Q` against a budget (CC-BUD-3); `None` gives the `unknown` phase (CC-BUD-1).
pub fn assess(input_tokens: u64, budget: Option<&Budget>) -> BudgetAssessment {
    let Some(budget) = budget else {
        return BudgetAssessment {
            input_tokens,
            phase: BudgetPhase::Unknown,
            hard_input: None,
            hard_deficit: None,
            physical_deficit: None,
            budget_kind: None,
        };
    };
    let q = tokens(input_tokens);
    let phase = if q > budget.hard_input {
        BudgetPhase::Hard
    } else if q >= budget.soft_input {
        BudgetPhase::Soft
    } else {
        BudgetPhase::Normal
    };
    let over_physical = budget
        .physical_input
        .is_some_and(|physical_input| q > physical_input);
    let over_policy = budget
        .policy_capacity
        .is_some_and(|policy| q > policy - budget.max_tokens - budget.safety_tokens)
        || budget
            .billing_input_ceiling
            .is_some_and(|billing| q > billing - budget.safety_tokens);
    let budget_kind = match (over_physical, over_policy) {
        (true, true) => Some(BudgetKind::Both),
        (true, false) => Some(BudgetKind::Physical),
        (false, true) => Some(BudgetKind::Policy),
        (false, false) => None,
    };
    BudgetAssessment {
        input_tokens,
        phase,
        hard_input: Some(budget.hard_input),
        hard_deficit: Some((q - budget.hard_input).max(0)),
        physical_deficit: budget
            .physical_input
            .map(|physical_input| (q - physical_input).max(0)),
        budget_kind,
    }
}

/// The dispatch decision at ready (CC-BUD-6).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Preflight {
    /// Hand the request to the adapter: `Q ≤ H`, or no capacity is known (unchecked).
    Dispatch,
    /// Never call the adapter; finish with this error and journal `not-dispatched`.
    Refuse(Box<Refusal>),
}

/// Where a refusal came from (CC-BUD-6).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum FailureOrigin {
    /// The local check at ready.
    Preflight,
}

/// `failure{code, message}` of a refusal (CC-BUD-6, CC-JNL-2).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RefusalFailure {
    /// Always `REQUEST_BUDGET_EXCEEDED`.
    pub code: FailureCode,
    /// `Request input <Q> exceeds hard input budget <H>`.
    pub message: String,
}

/// The terminal error of a locally refused request (CC-BUD-6):
/// `{failure, origin:'preflight', budget, budgetKind}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Refusal {
    /// `{code:'REQUEST_BUDGET_EXCEEDED', message:'Request input <Q> exceeds hard input
    /// budget <H>'}`.
    pub failure: RefusalFailure,
    /// `preflight`.
    pub origin: FailureOrigin,
    /// The budget the request was checked against.
    pub budget: Budget,
    /// Which limit it is over (CC-BUD-3).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub budget_kind: Option<BudgetKind>,
}

impl Refusal {
    /// The failure as the LLM layer carries it, on the refused route, with the
    /// refusal's `origin`, `budget` and `budgetKind` (CC-BUD-6), so the turn's terminal
    /// error says which limit was hit and that the provider was never called.
    pub fn to_llm_failure(&self, provider: &str, model: &str) -> LlmFailure {
        let budget = match serde_json::to_value(&self.budget) {
            Ok(serde_json::Value::Object(budget)) => budget,
            _ => ccare_core::JsonObject::new(),
        };
        let origin = match self.origin {
            FailureOrigin::Preflight => ccare_core::FailureOrigin::Preflight,
        };
        let budget_kind = self.budget_kind.map(|kind| match kind {
            BudgetKind::Physical => ccare_core::RefusalBudgetKind::Physical,
            BudgetKind::Policy => ccare_core::RefusalBudgetKind::Policy,
            BudgetKind::Both => ccare_core::RefusalBudgetKind::Both,
        });
        LlmFailure::new(self.failure.code, self.failure.message.clone())
            .on_route(provider, model)
            .with_refusal(ccare_core::LocalRefusal {
                origin,
                budget,
                budget_kind,
            })
    }
}

/// The local refusal decision (CC-BUD-6): refuse when `Q > H`, otherwise dispatch. With no
/// capacity known the request is dispatched unchecked (CC-BUD-1). The caller has already
/// priced the final request and persisted the ready record.
pub fn preflight(input_tokens: u64, budget: Option<&Budget>) -> Preflight {
    let Some(budget) = budget else {
        return Preflight::Dispatch;
    };
    if tokens(input_tokens) <= budget.hard_input {
        return Preflight::Dispatch;
    }
    let assessment = assess(input_tokens, Some(budget));
    Preflight::Refuse(Box::new(Refusal {
        failure: RefusalFailure {
            code: FailureCode::RequestBudgetExceeded,
            message: format!(
                "Request input {input_tokens} exceeds hard input budget {}",
                budget.hard_input
            ),
        },
        origin: FailureOrigin::Preflight,
        budget: budget.clone(),
        budget_kind: assessment.budget_kind,
    }))
}

fn known_physical_window(route: RouteInfo<'_>) -> Option<i64> {
    route
        .physical_window_tokens
        .filter(|window| *window > 0)
        .map(tokens)
}

/// `(contextBudgetTokens, billingInputCeilingTokens)`, each the exact route budget's when
/// it sets one, else the global one (CC-BUD-4).
fn policy_values(config: &CareConfig, route: RouteInfo<'_>) -> (Option<i64>, Option<i64>) {
    let route_budget = config.route_budget(route.provider, route.model, route.purpose);
    let policy_capacity = route_budget
        .and_then(|entry| entry.context_budget_tokens)
        .or(config.context_budget_tokens);
    let billing = route_budget
        .and_then(|entry| entry.billing_input_ceiling_tokens)
        .or(config.billing_input_ceiling_tokens);
    (policy_capacity.map(tokens), billing.map(tokens))
}

fn min_known(first: Option<i64>, second: Option<i64>) -> Option<i64> {
    match (first, second) {
        (Some(first), Some(second)) => Some(first.min(second)),
        (Some(only), None) | (None, Some(only)) => Some(only),
        (None, None) => None,
    }
}

/// `floor(ratio·tokens)`, as the original computes it in doubles.
fn floor_share(ratio: f64, tokens: i64) -> i64 {
    // `tokens` is within ±2^54, exact enough in f64; the floor is integral.
    (ratio * tokens as f64).floor() as i64
}

/// A token count as a signed value, saturated at 2^53 − 1 so sums cannot overflow.
fn tokens(count: u64) -> i64 {
    i64::try_from(count.min(MAX_SAFE_INTEGER)).unwrap_or(i64::MAX)
}
