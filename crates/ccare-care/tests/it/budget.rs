//! CC-BUD-1..6: resolution, validity, phases and kinds, route budgets, the compaction
//! purpose and the local refusal, on the spec's vectors and hand-computed ones.

#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use ccare_care::budget::{
    self, Budget, BudgetAssessment, BudgetError, BudgetKind, BudgetPhase, BudgetViolation,
    CompletionSource, FailureOrigin, InvalidBudget, Preflight, RouteInfo,
};
use ccare_care::config::{CareConfig, RoutePurpose};
use ccare_core::FailureCode;
use serde_json::{Value, json};

/// The §4 vector config: policy 262144, safety 2048, burst 8192, margin 4096.
fn vector_config(extra: Value) -> CareConfig {
    let mut table = json!({
        "context_budget_tokens": 262_144,
        "safety_tokens": 2048,
        "burst_tokens": 8192,
        "release_margin_tokens": 4096,
    });
    if let (Some(table), Some(extra)) = (table.as_object_mut(), extra.as_object()) {
        table.extend(extra.clone());
    }
    CareConfig::from_json(&table).unwrap()
}

/// The §4 vector route: physical 1048576, maxTokens 8192.
fn vector_route() -> RouteInfo<'static> {
    RouteInfo {
        provider: "p",
        model: "m",
        purpose: RoutePurpose::Conversation,
        physical_window_tokens: Some(1_048_576),
        max_tokens: Some(8192),
        adapter_default_max_tokens: None,
    }
}

fn bare_route(physical_window_tokens: Option<u64>) -> RouteInfo<'static> {
    RouteInfo {
        provider: "p",
        model: "m",
        purpose: RoutePurpose::Conversation,
        physical_window_tokens,
        max_tokens: None,
        adapter_default_max_tokens: None,
    }
}

fn resolved(config: &CareConfig, route: RouteInfo<'_>) -> Budget {
    budget::resolve(config, route).unwrap().unwrap()
}

fn invalid(config: &CareConfig, route: RouteInfo<'_>) -> InvalidBudget {
    budget::resolve(config, route).unwrap_err()
}

#[test]
fn cc_bud_1_vector_q_280000_is_hard_and_policy() {
    let budget = resolved(&vector_config(json!({})), vector_route());
    assert_eq!(budget.capacity, 262_144);
    assert_eq!(budget.physical_window, Some(1_048_576));
    assert_eq!(budget.policy_capacity, Some(262_144));
    assert_eq!(budget.billing_input_ceiling, None);
    assert_eq!(budget.max_tokens, 8192);
    assert_eq!(budget.completion_source, CompletionSource::Explicit);
    // H = 262144 − 8192 − 2048.
    assert_eq!(budget.hard_input, 251_904);
    // physicalInput = 1048576 − 8192 − 2048.
    assert_eq!(budget.physical_input, Some(1_038_336));
    // S = min(floor(0.8·262144) = 209715, 251904 − 8192 = 243712).
    assert_eq!(budget.soft_input, 209_715);
    assert_eq!(budget.release_target, 205_619);
    // tail = floor(0.16·(262144 − 8192)) = floor(40632.32).
    assert_eq!(budget.tail, 40_632);
    assert_eq!(
        budget::assess(280_000, Some(&budget)),
        BudgetAssessment {
            input_tokens: 280_000,
            phase: BudgetPhase::Hard,
            hard_input: Some(251_904),
            hard_deficit: Some(28_096),
            physical_deficit: Some(0),
            budget_kind: Some(BudgetKind::Policy),
        }
    );
}

#[test]
fn cc_bud_3_vector_q_1100000_is_both() {
    let budget = resolved(&vector_config(json!({})), vector_route());
    assert_eq!(
        budget::assess(1_100_000, Some(&budget)),
        BudgetAssessment {
            input_tokens: 1_100_000,
            phase: BudgetPhase::Hard,
            hard_input: Some(251_904),
            hard_deficit: Some(848_096),
            physical_deficit: Some(61_664),
            budget_kind: Some(BudgetKind::Both),
        }
    );
}

#[test]
fn cc_bud_1_vector_billing_ceiling_lowers_h() {
    let budget = resolved(
        &vector_config(json!({"billing_input_ceiling_tokens": 240_000})),
        vector_route(),
    );
    // H = min(251904, 240000 − 2048).
    assert_eq!(budget.hard_input, 237_952);
    assert_eq!(budget.billing_input_ceiling, Some(240_000));
    assert_eq!(budget.soft_input, 209_715);
    let assessment = budget::assess(235_000, Some(&budget));
    assert_eq!(assessment.phase, BudgetPhase::Soft);
    assert_eq!(assessment.budget_kind, None);
    // Over billing − safety is a policy overrun.
    assert_eq!(
        budget::assess(237_953, Some(&budget)).budget_kind,
        Some(BudgetKind::Policy)
    );
    assert_eq!(budget::assess(237_952, Some(&budget)).budget_kind, None);
}

#[test]
fn cc_bud_2_vector_max_tokens_262144_is_invalid() {
    let route = RouteInfo {
        max_tokens: Some(262_144),
        ..vector_route()
    };
    let error = invalid(&vector_config(json!({})), route);
    assert_eq!(
        error.violation,
        BudgetViolation::HardInputNotPositive { hard_input: -2048 }
    );
    assert_eq!(
        error.to_string(),
        "invalid resolved budget: capacity 262144, maxTokens 262144, safetyTokens 2048, \
         burstTokens 8192, retainTokens unset, releaseMarginTokens 4096 (hard input -2048 <= 0)"
    );
    let error: BudgetError = error.into();
    assert!(error.to_string().starts_with("invalid resolved budget"));
}

#[test]
fn cc_bud_1_vector_no_capacity_is_unknown() {
    // `{input 50000}`: no physical window, no policy → H undefined.
    let config = CareConfig::default();
    assert_eq!(budget::resolve(&config, bare_route(None)), Ok(None));
    assert_eq!(budget::resolve_capacity(&config, bare_route(None)), None);
    let assessment = budget::assess(50_000, None);
    assert_eq!(
        assessment,
        BudgetAssessment {
            input_tokens: 50_000,
            phase: BudgetPhase::Unknown,
            hard_input: None,
            hard_deficit: None,
            physical_deficit: None,
            budget_kind: None,
        }
    );
    assert_eq!(
        serde_json::to_value(assessment).unwrap(),
        json!({"inputTokens": 50_000, "phase": "unknown"})
    );
    // A billing ceiling alone is not a capacity.
    let billing_only =
        CareConfig::from_json(&json!({"billing_input_ceiling_tokens": 1000})).unwrap();
    assert_eq!(budget::resolve(&billing_only, bare_route(None)), Ok(None));
    // A window of 0 does not count.
    assert_eq!(budget::resolve(&config, bare_route(Some(0))), Ok(None));
}

#[test]
fn cc_bud_1_vector_completion_sources() {
    let config = CareConfig::default();
    let adapter_default = RouteInfo {
        adapter_default_max_tokens: Some(4000),
        ..bare_route(Some(100_000))
    };
    let budget = resolved(&config, adapter_default);
    assert_eq!(
        (budget.completion_source, budget.max_tokens),
        (CompletionSource::AdapterDefault, 4000)
    );
    let explicit = RouteInfo {
        max_tokens: Some(1000),
        ..adapter_default
    };
    let budget = resolved(&config, explicit);
    assert_eq!(
        (budget.completion_source, budget.max_tokens),
        (CompletionSource::Explicit, 1000)
    );
    // `{physical 10000, input 1}` → absent; worked by hand with the defaults:
    // C 10000, R 0, H 10000, S min(8000, 10000) = 8000, L 8000, tail floor(1600).
    let budget = resolved(&config, bare_route(Some(10_000)));
    assert_eq!(budget.completion_source, CompletionSource::Absent);
    assert_eq!(
        (
            budget.capacity,
            budget.max_tokens,
            budget.hard_input,
            budget.physical_input,
            budget.soft_input,
            budget.release_target,
            budget.tail
        ),
        (10_000, 0, 10_000, Some(10_000), 8000, 8000, 1600)
    );
    assert_eq!(budget::assess(1, Some(&budget)).phase, BudgetPhase::Normal);
}

#[test]
fn cc_bud_1_worked_example_small_window() {
    // Window 16000, adapter default 1024, safety 500, burst 1000, margin 2000, retain 3000:
    // H = 16000 − 1024 − 500 = 14476; S = min(floor(12800), 13476) = 12800;
    // L = 10800; tail = 3000 (retainTokens overrides the ratio).
    let config = CareConfig::from_json(&json!({
        "safety_tokens": 500,
        "burst_tokens": 1000,
        "release_margin_tokens": 2000,
        "retain_tokens": 3000,
    }))
    .unwrap();
    let route = RouteInfo {
        adapter_default_max_tokens: Some(1024),
        ..bare_route(Some(16_000))
    };
    let budget = resolved(&config, route);
    assert_eq!(
        (
            budget.hard_input,
            budget.soft_input,
            budget.release_target,
            budget.tail,
            budget.retain_tokens
        ),
        (14_476, 12_800, 10_800, 3000, Some(3000))
    );
    // Burst binds when it is large: burst 4000 → S = min(12800, 10476) = 10476.
    let config = CareConfig {
        burst_tokens: 4000,
        ..config
    };
    assert_eq!(resolved(&config, route).soft_input, 10_476);
}

#[test]
fn cc_bud_1_json_shape() {
    let budget = resolved(&vector_config(json!({})), vector_route());
    assert_eq!(
        serde_json::to_value(&budget).unwrap(),
        json!({
            "purpose": "conversation",
            "capacity": 262_144,
            "physicalWindow": 1_048_576,
            "policyCapacity": 262_144,
            "billingInputCeiling": null,
            "maxTokens": 8192,
            "completionSource": "explicit",
            "safetyTokens": 2048,
            "burstTokens": 8192,
            "releaseMarginTokens": 4096,
            "retainTokens": null,
            "hardInput": 251_904,
            "physicalInput": 1_038_336,
            "softInput": 209_715,
            "releaseTarget": 205_619,
            "tail": 40_632,
        })
    );
}

#[test]
fn cc_bud_1_q_comes_from_a_finite_non_negative_price() {
    assert_eq!(budget::input_tokens_from_price(0.0), Ok(0));
    assert_eq!(budget::input_tokens_from_price(1.2), Ok(2));
    assert_eq!(budget::input_tokens_from_price(5.0), Ok(5));
    for bad in [-0.1, f64::NAN, f64::INFINITY] {
        let error = budget::input_tokens_from_price(bad).unwrap_err();
        assert_eq!(
            error.to_string(),
            format!("request input price must be a finite number >= 0, got {bad}")
        );
    }
}

#[test]
fn cc_bud_2_soft_input_not_positive() {
    // H = 10000, S = min(8000, 10000 − 10000) = 0.
    let config = CareConfig::from_json(&json!({"burst_tokens": 10_000})).unwrap();
    let error = invalid(&config, bare_route(Some(10_000)));
    assert_eq!(
        error.to_string(),
        "invalid resolved budget: capacity 10000, maxTokens 0, safetyTokens 0, burstTokens \
         10000, retainTokens unset, releaseMarginTokens 0 (soft input 0 <= 0)"
    );
    let config = CareConfig::from_json(&json!({"burst_tokens": 9999, "retain_tokens": 0})).unwrap();
    assert_eq!(resolved(&config, bare_route(Some(10_000))).soft_input, 1);
}

#[test]
fn cc_bud_2_tail_not_below_soft_input() {
    let config = CareConfig::from_json(&json!({"retain_tokens": 8000})).unwrap();
    let error = invalid(&config, bare_route(Some(10_000)));
    assert_eq!(
        error.violation,
        BudgetViolation::TailNotBelowSoftInput {
            tail: 8000,
            soft_input: 8000
        }
    );
    assert_eq!(
        error.to_string(),
        "invalid resolved budget: capacity 10000, maxTokens 0, safetyTokens 0, burstTokens 0, \
         retainTokens 8000, releaseMarginTokens 0 (tail 8000 >= soft input 8000)"
    );
    let config = CareConfig::from_json(&json!({"retain_tokens": 7999})).unwrap();
    assert_eq!(resolved(&config, bare_route(Some(10_000))).tail, 7999);
    // retainTokens 0 is legal (CC-CFG-1).
    let config = CareConfig::from_json(&json!({"retain_tokens": 0})).unwrap();
    assert_eq!(resolved(&config, bare_route(Some(10_000))).tail, 0);
}

#[test]
fn cc_bud_2_release_target_not_positive() {
    let config = CareConfig::from_json(&json!({"release_margin_tokens": 8000})).unwrap();
    let error = invalid(&config, bare_route(Some(10_000)));
    assert_eq!(
        error.to_string(),
        "invalid resolved budget: capacity 10000, maxTokens 0, safetyTokens 0, burstTokens 0, \
         retainTokens unset, releaseMarginTokens 8000 (release target 0 <= 0)"
    );
    let config = CareConfig::from_json(&json!({"release_margin_tokens": 7999})).unwrap();
    assert_eq!(
        resolved(&config, bare_route(Some(10_000))).release_target,
        1
    );
}

#[test]
fn cc_bud_2_unreachable_conditions_still_have_messages() {
    // With burst ≥ 0 and retainTokens ≥ 0, S > H and tail < 0 cannot come out of the
    // config (H ≤ 0 is caught first); their messages are still defined.
    assert_eq!(
        BudgetViolation::SoftInputAboveHardInput {
            soft_input: 5,
            hard_input: 4
        }
        .to_string(),
        "soft input 5 > hard input 4"
    );
    assert_eq!(
        BudgetViolation::TailNegative { tail: -1 }.to_string(),
        "tail -1 < 0"
    );
    // A window below R fails on H first.
    let route = RouteInfo {
        max_tokens: Some(20_000),
        ..bare_route(Some(10_000))
    };
    assert_eq!(
        invalid(&CareConfig::default(), route).violation,
        BudgetViolation::HardInputNotPositive {
            hard_input: -10_000
        }
    );
}

#[test]
fn cc_bud_3_phase_boundaries() {
    let budget = resolved(&vector_config(json!({})), vector_route());
    let phase = |q: u64| budget::assess(q, Some(&budget)).phase;
    assert_eq!(phase(0), BudgetPhase::Normal);
    assert_eq!(phase(209_714), BudgetPhase::Normal);
    assert_eq!(phase(209_715), BudgetPhase::Soft);
    assert_eq!(phase(251_904), BudgetPhase::Soft);
    assert_eq!(phase(251_905), BudgetPhase::Hard);
    let deficit = |q: u64| budget::assess(q, Some(&budget)).hard_deficit;
    assert_eq!(deficit(251_904), Some(0));
    assert_eq!(deficit(251_905), Some(1));
}

#[test]
fn cc_bud_3_budget_kind_boundaries() {
    // Physical window below the policy capacity: C = 100000 = the window.
    let config =
        CareConfig::from_json(&json!({"context_budget_tokens": 120_000, "safety_tokens": 1000}))
            .unwrap();
    let route = RouteInfo {
        max_tokens: Some(4000),
        ..bare_route(Some(100_000))
    };
    let budget = resolved(&config, route);
    // physicalInput = 100000 − 4000 − 1000 = 95000; policy − R − safety = 115000.
    assert_eq!(
        (budget.hard_input, budget.physical_input),
        (95_000, Some(95_000))
    );
    let kind = |q: u64| budget::assess(q, Some(&budget)).budget_kind;
    assert_eq!(kind(95_000), None);
    assert_eq!(kind(95_001), Some(BudgetKind::Physical));
    assert_eq!(kind(115_000), Some(BudgetKind::Physical));
    assert_eq!(kind(115_001), Some(BudgetKind::Both));
    // With no physical window, there is no physical kind and no physical deficit.
    let policy_only = resolved(
        &config,
        RouteInfo {
            physical_window_tokens: None,
            ..route
        },
    );
    let assessment = budget::assess(200_000, Some(&policy_only));
    assert_eq!(assessment.budget_kind, Some(BudgetKind::Policy));
    assert_eq!(assessment.physical_deficit, None);
    assert_eq!(policy_only.physical_input, None);
}

#[test]
fn cc_bud_4_vector_route_budget_overrides_per_field() {
    let config = CareConfig::from_json(&json!({
        "context_budget_tokens": 100_000,
        "billing_input_ceiling_tokens": 90_000,
        "route_budgets": [
            {"provider": "p", "model": "m", "purpose": "conversation", "context_budget_tokens": 262_144},
        ],
    }))
    .unwrap();
    let route = bare_route(Some(1_048_576));
    let matched = resolved(&config, route);
    assert_eq!(matched.capacity, 262_144);
    assert_eq!(budget::resolve_capacity(&config, route), Some(262_144));
    // Per field: the billing ceiling stays global.
    assert_eq!(matched.billing_input_ceiling, Some(90_000));
    assert_eq!(matched.hard_input, 90_000);
    // Compaction purpose or another provider → global.
    let compaction = RouteInfo {
        purpose: RoutePurpose::Compaction,
        ..route
    };
    assert_eq!(resolved(&config, compaction).capacity, 100_000);
    let other_provider = RouteInfo {
        provider: "q",
        ..route
    };
    assert_eq!(resolved(&config, other_provider).capacity, 100_000);
    let other_model = RouteInfo {
        model: "m2",
        ..route
    };
    assert_eq!(resolved(&config, other_model).capacity, 100_000);
}

#[test]
fn cc_bud_4_route_budget_gives_a_capacity_without_a_window() {
    let config = CareConfig::from_json(&json!({"route_budgets": [
        {"provider": "p", "model": "m", "purpose": "session-title", "context_budget_tokens": 5000},
    ]}))
    .unwrap();
    let title = RouteInfo {
        purpose: RoutePurpose::SessionTitle,
        ..bare_route(None)
    };
    assert_eq!(resolved(&config, title).capacity, 5000);
    assert_eq!(budget::resolve(&config, bare_route(None)), Ok(None));
}

#[test]
fn cc_bud_5_compaction_uses_summary_safety_and_zero_burst_margin_retain() {
    let config = CareConfig::from_json(&json!({
        "safety_tokens": 2048,
        "summary_safety_tokens": 1000,
        "burst_tokens": 8192,
        "release_margin_tokens": 4096,
        "retain_tokens": 5000,
    }))
    .unwrap();
    let route = RouteInfo {
        purpose: RoutePurpose::Compaction,
        max_tokens: Some(4000),
        ..bare_route(Some(100_000))
    };
    let budget = resolved(&config, route);
    // H = 100000 − 4000 − 1000 = 95000; S = min(80000, 95000 − 0); L = S; tail 0.
    assert_eq!(
        (
            budget.safety_tokens,
            budget.burst_tokens,
            budget.release_margin_tokens,
            budget.retain_tokens,
            budget.hard_input,
            budget.soft_input,
            budget.release_target,
            budget.tail
        ),
        (1000, 0, 0, Some(0), 95_000, 80_000, 80_000, 0)
    );
    // Without summarySafetyTokens the compaction safety is safetyTokens.
    let config = CareConfig {
        summary_safety_tokens: None,
        ..config
    };
    let budget = resolved(&config, route);
    assert_eq!((budget.safety_tokens, budget.hard_input), (2048, 93_952));
    // The conversation purpose keeps burst, margin and retain.
    let conversation = resolved(
        &config,
        RouteInfo {
            purpose: RoutePurpose::Conversation,
            ..route
        },
    );
    assert_eq!(
        (
            conversation.burst_tokens,
            conversation.release_margin_tokens,
            conversation.tail
        ),
        (8192, 4096, 5000)
    );
}

#[test]
fn cc_bud_6_refusal_exactly_above_h() {
    let budget = resolved(&vector_config(json!({})), vector_route());
    assert_eq!(
        budget::preflight(251_904, Some(&budget)),
        Preflight::Dispatch
    );
    assert_eq!(budget::preflight(0, Some(&budget)), Preflight::Dispatch);
    let Preflight::Refuse(refusal) = budget::preflight(251_905, Some(&budget)) else {
        panic!("Q = H + 1 must be refused");
    };
    assert_eq!(refusal.failure.code, FailureCode::RequestBudgetExceeded);
    assert_eq!(
        refusal.failure.message,
        "Request input 251905 exceeds hard input budget 251904"
    );
    assert_eq!(refusal.origin, FailureOrigin::Preflight);
    assert_eq!(refusal.budget, budget);
    assert_eq!(refusal.budget_kind, Some(BudgetKind::Policy));
    let json = serde_json::to_value(&*refusal).unwrap();
    assert_eq!(
        json["failure"],
        json!({"code": "REQUEST_BUDGET_EXCEEDED", "message": "Request input 251905 exceeds hard input budget 251904"})
    );
    assert_eq!(json["origin"], "preflight");
    assert_eq!(json["budgetKind"], "policy");
    assert_eq!(json["budget"]["hardInput"], 251_904);
    let failure = refusal.to_llm_failure("p", "m");
    assert_eq!(failure.code, FailureCode::RequestBudgetExceeded);
    assert_eq!(
        (failure.provider.as_str(), failure.model.as_str()),
        ("p", "m")
    );
}

#[test]
fn cc_bud_6_vector_280000_is_refused_with_policy_kind() {
    let budget = resolved(&vector_config(json!({})), vector_route());
    let Preflight::Refuse(refusal) = budget::preflight(280_000, Some(&budget)) else {
        panic!("Q 280000 > H 251904 must be refused");
    };
    assert_eq!(
        refusal.failure.message,
        "Request input 280000 exceeds hard input budget 251904"
    );
    assert_eq!(refusal.budget_kind, Some(BudgetKind::Policy));
    let Preflight::Refuse(both) = budget::preflight(1_100_000, Some(&budget)) else {
        panic!("Q 1100000 must be refused");
    };
    assert_eq!(both.budget_kind, Some(BudgetKind::Both));
}

#[test]
fn cc_bud_6_unknown_capacity_is_unchecked() {
    assert_eq!(budget::preflight(u64::MAX, None), Preflight::Dispatch);
}

#[tokio::test]
async fn cc_bud_2_a_conversation_route_every_request_would_fail_on_is_refused_at_mount() {
    // A 2000-token window with a 1000-token output limit and 1500 tokens of safety
    // leaves no input: every conversation request would fail CC-BUD-2, so mounting
    // says so instead, naming the route.
    let kit = ccare_agent::testing::TestHost::builder("{\"text\": \"unused\"}")
        .model(
            "s/tight",
            ccare_llm::ModelConfig {
                context_window: Some(2_000),
                max_output_tokens: Some(1_000),
                ..ccare_llm::ModelConfig::default()
            },
        )
        .build()
        .unwrap();
    let route = kit.host().llm().route("s/tight").unwrap();
    let care = ccare_care::ContextCare::default().with_route(ccare_care::RouteSnapshot::of(&route));
    let refused = kit
        .host()
        .mount(&care, &json!({"safety_tokens": 1500}))
        .unwrap_err();
    assert_eq!(
        refused.to_string(),
        "context-care: the conversation route s/tight: invalid resolved budget: capacity 2000, \
         maxTokens 1000, safetyTokens 1500, burstTokens 0, retainTokens unset, \
         releaseMarginTokens 0 (hard input -500 <= 0)"
    );
    assert!(kit.host().mounted().is_empty());
    // The same route with room for input mounts.
    kit.host()
        .mount(&care, &json!({"safety_tokens": 500}))
        .unwrap();
}
