//! CC-MET-1..5: values, rounding, levels, unknown, colours and the UI display.

#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use ccare_care::config::CareConfig;
use ccare_care::metrics::{
    Colour, ContextCareMetrics, FatigueLevel, MetricDisplay, MetricInputs, WakefulnessLevel,
    level_index, recorded_metric_value, round_metric,
};
use serde_json::json;

fn inputs(load_tokens: f64, retained_tokens: f64, capacity_tokens: Option<f64>) -> MetricInputs {
    MetricInputs {
        load_tokens,
        retained_tokens,
        capacity_tokens,
        route_known: true,
    }
}

fn sample(
    load_tokens: f64,
    retained_tokens: f64,
    capacity_tokens: Option<f64>,
) -> ContextCareMetrics {
    ContextCareMetrics::sample(
        &CareConfig::default(),
        inputs(load_tokens, retained_tokens, capacity_tokens),
    )
}

fn metrics(
    fatigue: FatigueLevel,
    fatigue_value: Option<f64>,
    wakefulness: WakefulnessLevel,
    wakefulness_value: Option<f64>,
) -> ContextCareMetrics {
    ContextCareMetrics {
        fatigue,
        fatigue_value,
        wakefulness,
        wakefulness_value,
    }
}

#[test]
fn cc_met_1_acceptance_a1_vectors() {
    let capacity = Some(10_000.0);
    assert_eq!(
        sample(0.0, 0.0, capacity),
        metrics(
            FatigueLevel::Normal,
            Some(0.0),
            WakefulnessLevel::Low,
            Some(0.0)
        )
    );
    assert_eq!(
        sample(8000.0, 4000.0, capacity),
        metrics(
            FatigueLevel::VeryHigh,
            Some(100.0),
            WakefulnessLevel::High,
            Some(100.0)
        )
    );
    // 100·(4000/8000)^1.5 = 35.355… → 35.4; 100·sqrt(100/3333.3…) = 17.320… → 17.3.
    assert_eq!(
        sample(4000.0, 100.0, capacity),
        metrics(
            FatigueLevel::Elevated,
            Some(35.4),
            WakefulnessLevel::Low,
            Some(17.3)
        )
    );
    assert_eq!(sample(4000.0, 100.0, None), ContextCareMetrics::UNKNOWN);
}

#[test]
fn cc_met_1_values_are_capped_at_100_and_floored_at_0() {
    let sampled = sample(1e12, 1e12, Some(10_000.0));
    assert_eq!(
        (sampled.fatigue_value, sampled.wakefulness_value),
        (Some(100.0), Some(100.0))
    );
    let negative = sample(-500.0, -1.0, Some(10_000.0));
    assert_eq!(
        negative,
        metrics(
            FatigueLevel::Normal,
            Some(0.0),
            WakefulnessLevel::Low,
            Some(0.0)
        )
    );
}

#[test]
fn cc_met_1_config_ratios_and_exponent_apply() {
    let config = CareConfig {
        budget_ratio: 0.5,
        wakefulness_ratio: 0.25,
        fatigue_exponent: 1.0,
        ..CareConfig::default()
    };
    // Fatigue: 100·1000/(10000·0.5) = 20; wakefulness: 100·sqrt(625/2500) = 50.
    let sampled = ContextCareMetrics::sample(&config, inputs(1000.0, 625.0, Some(10_000.0)));
    assert_eq!(
        sampled,
        metrics(
            FatigueLevel::Normal,
            Some(20.0),
            WakefulnessLevel::Normal,
            Some(50.0)
        )
    );
}

#[test]
fn cc_met_1_rounding_is_half_up_to_one_decimal() {
    assert_eq!(round_metric(35.355), 35.4);
    assert_eq!(round_metric(17.3205), 17.3);
    assert_eq!(round_metric(0.05), 0.1);
    assert_eq!(round_metric(0.04), 0.0);
    assert_eq!(round_metric(29.96), 30.0);
    assert_eq!(round_metric(29.94), 29.9);
    assert_eq!(round_metric(100.04), 100.0);
    assert_eq!(round_metric(250.0), 100.0);
}

#[test]
fn cc_met_2_levels_use_the_rounded_value() {
    // Acceptance A2: 29.9, 29.96, 60, 85 → 0, 1, 2, 3.
    let levels: Vec<u8> = [29.9, 29.96, 60.0, 85.0]
        .into_iter()
        .map(|value| level_index(round_metric(value)))
        .collect();
    assert_eq!(levels, vec![0, 1, 2, 3]);
    // The one-decimal rounding moves only values from x.x5 up: 29.5 stays 29.5 (level 0),
    // 29.94 rounds down, 29.95 rounds up to 30.0.
    for (raw, rounded, level) in [
        (29.4, 29.4, 0),
        (29.5, 29.5, 0),
        (29.94, 29.9, 0),
        (29.95, 30.0, 1),
        (29.96, 30.0, 1),
        (30.0, 30.0, 1),
        (59.94, 59.9, 1),
        (59.95, 60.0, 2),
        (84.94, 84.9, 2),
        (84.95, 85.0, 3),
        (100.0, 100.0, 3),
    ] {
        assert_eq!(round_metric(raw), rounded, "{raw}");
        assert_eq!(level_index(round_metric(raw)), level, "{raw}");
    }
    // The raw value 29.96 would be level 0; the rounded one is level 1 (CC-MET-2).
    assert_eq!(level_index(29.96), 0);
}

#[test]
fn cc_met_2_levels_use_the_rounded_value_in_a_sample() {
    let linear = CareConfig {
        fatigue_exponent: 1.0,
        ..CareConfig::default()
    };
    // 100·2396.8/8000 = 29.96 → 30.0 → elevated (the spec's own example).
    let sampled = ContextCareMetrics::sample(&linear, inputs(2396.8, 0.0, Some(10_000.0)));
    assert_eq!(
        (sampled.fatigue, sampled.fatigue_value),
        (FatigueLevel::Elevated, Some(30.0))
    );
    // 100·2392/8000 = 29.9 → normal.
    let sampled = ContextCareMetrics::sample(&linear, inputs(2392.0, 0.0, Some(10_000.0)));
    assert_eq!(
        (sampled.fatigue, sampled.fatigue_value),
        (FatigueLevel::Normal, Some(29.9))
    );
}

#[test]
fn cc_met_2_level_names() {
    let fatigue: Vec<&str> = (0..4)
        .map(|i| FatigueLevel::from_index(i).as_str())
        .collect();
    assert_eq!(fatigue, vec!["normal", "elevated", "high", "very-high"]);
    let wakefulness: Vec<&str> = (0..4)
        .map(|i| WakefulnessLevel::from_index(i).as_str())
        .collect();
    assert_eq!(wakefulness, vec!["low", "normal", "elevated", "high"]);
    assert_eq!(FatigueLevel::Unknown.as_str(), "unknown");
    assert_eq!(WakefulnessLevel::Unknown.as_str(), "unknown");
    for index in 0..4 {
        assert_eq!(FatigueLevel::from_index(index).index(), Some(index));
        assert_eq!(WakefulnessLevel::from_index(index).index(), Some(index));
    }
    assert_eq!(FatigueLevel::Unknown.index(), None);
}

#[test]
fn cc_met_3_unknown_capacity_or_route() {
    for capacity in [
        None,
        Some(0.0),
        Some(-1.0),
        Some(f64::NAN),
        Some(f64::INFINITY),
        Some(f64::NEG_INFINITY),
    ] {
        assert_eq!(
            sample(4000.0, 100.0, capacity),
            ContextCareMetrics::UNKNOWN,
            "{capacity:?}"
        );
    }
    let unrouted = MetricInputs {
        route_known: false,
        ..inputs(4000.0, 100.0, Some(10_000.0))
    };
    assert_eq!(
        ContextCareMetrics::sample(&CareConfig::default(), unrouted),
        ContextCareMetrics::UNKNOWN
    );
}

#[test]
fn cc_met_3_a_nan_input_leaves_that_metric_unknown() {
    let sampled = sample(f64::NAN, 100.0, Some(10_000.0));
    assert_eq!(
        sampled,
        metrics(
            FatigueLevel::Unknown,
            None,
            WakefulnessLevel::Low,
            Some(17.3)
        )
    );
}

#[test]
fn cc_met_1_serializes_with_the_spec_field_names() {
    let sampled = sample(4000.0, 100.0, Some(10_000.0));
    assert_eq!(
        serde_json::to_value(sampled).unwrap(),
        json!({"fatigue": "elevated", "fatigueValue": 35.4, "wakefulness": "low", "wakefulnessValue": 17.3})
    );
    assert_eq!(
        serde_json::to_value(ContextCareMetrics::UNKNOWN).unwrap(),
        json!({"fatigue": "unknown", "fatigueValue": null, "wakefulness": "unknown", "wakefulnessValue": null})
    );
    let very_high = metrics(
        FatigueLevel::VeryHigh,
        Some(100.0),
        WakefulnessLevel::High,
        Some(100.0),
    );
    let text = serde_json::to_string(&very_high).unwrap();
    assert_eq!(
        text,
        r#"{"fatigue":"very-high","fatigueValue":100.0,"wakefulness":"high","wakefulnessValue":100.0}"#
    );
    let back: ContextCareMetrics = serde_json::from_str(&text).unwrap();
    assert_eq!(back, very_high);
}

#[test]
fn cc_met_5_colours() {
    let fatigue: Vec<Colour> = (0..4)
        .map(|i| FatigueLevel::from_index(i).colour())
        .collect();
    assert_eq!(
        fatigue,
        vec![Colour::Green, Colour::Blue, Colour::Orange, Colour::Red]
    );
    let wakefulness: Vec<Colour> = (0..4)
        .map(|i| WakefulnessLevel::from_index(i).colour())
        .collect();
    assert_eq!(
        wakefulness,
        vec![Colour::Orange, Colour::Blue, Colour::Teal, Colour::Green]
    );
    assert_eq!(FatigueLevel::Unknown.colour(), Colour::Grey);
    assert_eq!(WakefulnessLevel::Unknown.colour(), Colour::Grey);
}

#[test]
fn cc_met_5_display_percent_with_at_most_one_decimal() {
    assert_eq!(
        MetricDisplay::fatigue(FatigueLevel::Elevated, Some(35.4)),
        MetricDisplay {
            percent: Some("35.4%".to_owned()),
            level: "elevated",
            colour: Colour::Blue,
            uncalibrated: false,
        }
    );
    assert_eq!(
        MetricDisplay::wakefulness(WakefulnessLevel::Normal, Some(30.0)).percent,
        Some("30%".to_owned())
    );
    assert_eq!(
        MetricDisplay::fatigue(FatigueLevel::VeryHigh, Some(100.0)).percent,
        Some("100%".to_owned())
    );
    assert_eq!(
        MetricDisplay::fatigue(FatigueLevel::Normal, Some(12.345)).percent,
        Some("12.3%".to_owned())
    );
}

#[test]
fn cc_met_5_uncalibrated_is_grey_and_never_derives_a_number() {
    // Acceptance A3: a stored notice without numbers → grey "uncalibrated" plus the level.
    assert_eq!(
        MetricDisplay::fatigue(FatigueLevel::High, None),
        MetricDisplay {
            percent: None,
            level: "high",
            colour: Colour::Grey,
            uncalibrated: true,
        }
    );
    assert_eq!(
        MetricDisplay::wakefulness(WakefulnessLevel::Unknown, None),
        MetricDisplay {
            percent: None,
            level: "unknown",
            colour: Colour::Grey,
            uncalibrated: true,
        }
    );
    // Numbers outside 0..100 or non-finite are not numbers (CC-NTC-6).
    for bad in [f64::NAN, f64::INFINITY, -0.1, 100.1] {
        let display = MetricDisplay::fatigue(FatigueLevel::Elevated, Some(bad));
        assert!(display.uncalibrated && display.percent.is_none(), "{bad}");
        assert_eq!(recorded_metric_value(bad), None);
    }
    assert_eq!(recorded_metric_value(0.0), Some(0.0));
    assert_eq!(recorded_metric_value(100.0), Some(100.0));
    // An unknown level with a stray number stays uncalibrated.
    assert!(MetricDisplay::fatigue(FatigueLevel::Unknown, Some(40.0)).uncalibrated);
}
