//! CC-HYS-1: the per-session controller.

#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use ccare_care::budget::{self, RouteInfo};
use ccare_care::config::{CareConfig, RoutePurpose};
use ccare_care::hysteresis::{HysteresisController, HysteresisThresholds, HysteresisTransition};
use serde_json::json;

/// The §4 vector budget: S 209715, L 205619.
fn vector_thresholds() -> HysteresisThresholds {
    let config = CareConfig::from_json(&json!({
        "context_budget_tokens": 262_144,
        "safety_tokens": 2048,
        "burst_tokens": 8192,
        "release_margin_tokens": 4096,
    }))
    .unwrap();
    let route = RouteInfo {
        provider: "p",
        model: "m",
        purpose: RoutePurpose::Conversation,
        physical_window_tokens: Some(1_048_576),
        max_tokens: Some(8192),
        adapter_default_max_tokens: None,
    };
    let budget = budget::resolve(&config, route).unwrap().unwrap();
    HysteresisThresholds::of(&budget)
}

#[test]
fn cc_hys_1_vector() {
    let thresholds = vector_thresholds();
    assert_eq!(
        thresholds,
        HysteresisThresholds {
            soft_input: 209_715,
            release_target: 205_619
        }
    );
    let mut controller = HysteresisController::new();
    let sequence: Vec<bool> = [209_714, 209_715, 205_619, 205_618]
        .into_iter()
        .map(|q| controller.observe(q, Some(thresholds)).is_armed())
        .collect();
    // 209714 off, 209715 on, 205619 on, 205618 off.
    assert_eq!(sequence, vec![false, true, true, false]);
}

#[test]
fn cc_hys_1_transitions() {
    let thresholds = Some(vector_thresholds());
    let mut controller = HysteresisController::new();
    assert!(!controller.is_armed());
    assert_eq!(
        controller.observe(100, thresholds),
        HysteresisTransition::StayedUnarmed
    );
    // Unarmed inside the band: stays unarmed (arming needs Q ≥ S).
    assert_eq!(
        controller.observe(207_000, thresholds),
        HysteresisTransition::StayedUnarmed
    );
    assert_eq!(
        controller.observe(300_000, thresholds),
        HysteresisTransition::Armed
    );
    assert!(controller.is_armed());
    // A pass brings Q below S but not below L: maintenance keeps running.
    assert_eq!(
        controller.observe(209_000, thresholds),
        HysteresisTransition::StayedArmed
    );
    assert_eq!(
        controller.observe(205_619, thresholds),
        HysteresisTransition::StayedArmed
    );
    // Back above S while armed: still armed.
    assert_eq!(
        controller.observe(250_000, thresholds),
        HysteresisTransition::StayedArmed
    );
    assert_eq!(
        controller.observe(205_618, thresholds),
        HysteresisTransition::Disarmed
    );
    assert!(!controller.is_armed());
    // Released: the band no longer holds it.
    assert_eq!(
        controller.observe(209_714, thresholds),
        HysteresisTransition::StayedUnarmed
    );
}

#[test]
fn cc_hys_1_never_armed_while_capacity_is_unknown() {
    let mut controller = HysteresisController::new();
    assert_eq!(
        controller.observe(u64::MAX, None),
        HysteresisTransition::StayedUnarmed
    );
    controller.observe(300_000, Some(vector_thresholds()));
    assert!(controller.is_armed());
    // The capacity becomes unknown (e.g. a route without a window): disarm.
    assert_eq!(
        controller.observe(300_000, None),
        HysteresisTransition::Disarmed
    );
    assert!(!controller.is_armed());
    assert_eq!(
        controller.observe_budget(300_000, None),
        HysteresisTransition::StayedUnarmed
    );
}

#[test]
fn cc_hys_1_reads_the_thresholds_from_a_budget() {
    let config = CareConfig::from_json(&json!({"release_margin_tokens": 1000})).unwrap();
    let route = RouteInfo {
        provider: "p",
        model: "m",
        purpose: RoutePurpose::Conversation,
        physical_window_tokens: Some(10_000),
        max_tokens: None,
        adapter_default_max_tokens: None,
    };
    let budget = budget::resolve(&config, route).unwrap().unwrap();
    // S 8000, L 7000.
    let mut controller = HysteresisController::new();
    assert!(!controller.observe_budget(7999, Some(&budget)).is_armed());
    assert!(controller.observe_budget(8000, Some(&budget)).is_armed());
    assert!(controller.observe_budget(7000, Some(&budget)).is_armed());
    assert!(!controller.observe_budget(6999, Some(&budget)).is_armed());
}

#[test]
fn cc_hys_1_sessions_are_independent() {
    let thresholds = Some(vector_thresholds());
    let mut first = HysteresisController::new();
    let second = HysteresisController::new();
    first.observe(300_000, thresholds);
    assert!(first.is_armed());
    assert!(!second.is_armed());
}

#[test]
fn cc_hys_1_state_serializes() {
    let mut controller = HysteresisController::new();
    assert_eq!(
        serde_json::to_value(controller).unwrap(),
        json!({"armed": false})
    );
    controller.observe(300_000, Some(vector_thresholds()));
    let text = serde_json::to_string(&controller).unwrap();
    assert_eq!(text, r#"{"armed":true}"#);
    let back: HysteresisController = serde_json::from_str(&text).unwrap();
    assert_eq!(back, controller);
    assert!(back.is_armed());
    assert_eq!(
        serde_json::to_value(HysteresisTransition::StayedArmed).unwrap(),
        json!("stayed-armed")
    );
}
