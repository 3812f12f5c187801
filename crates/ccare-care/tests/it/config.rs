//! CC-CFG-1 and CC-BUD-4: the config table, its defaults and every load error.

#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use ccare_care::config::{
    CareConfig, ConfigError, PROVIDER_USAGE_RATIO_WARNING, RangeStrategy, RouteBudget,
    RoutePurpose, SummaryConfig,
};
use serde_json::{Value, json};

fn error(config: Value) -> String {
    CareConfig::from_json(&config).unwrap_err()
}

fn load(config: Value) -> CareConfig {
    CareConfig::from_json(&config).unwrap()
}

#[test]
fn cc_cfg_1_defaults() {
    let config = load(json!({}));
    assert_eq!(config, CareConfig::default());
    assert_eq!(config.budget_ratio, 0.8);
    assert_eq!(config.wakefulness_ratio, 1.0 / 3.0);
    assert_eq!(config.retain_ratio, 0.16);
    assert_eq!(config.fatigue_exponent, 1.5);
    assert_eq!(config.min_fresh_tokens, 1024);
    assert_eq!(config.min_note_chars, 1000);
    assert_eq!(config.max_note_chars, 10_000);
    assert_eq!(config.range_strategy, RangeStrategy::BasicPrefix);
    assert_eq!(config.expected_checkpoint_tokens, None);
    assert_eq!(
        (
            config.safety_tokens,
            config.burst_tokens,
            config.release_margin_tokens
        ),
        (0, 0, 0)
    );
    assert_eq!(config.summary_safety_tokens, None);
    assert_eq!(config.effective_summary_safety_tokens(), 0);
    assert_eq!(config.retain_tokens, None);
    assert_eq!(config.context_budget_tokens, None);
    assert_eq!(config.billing_input_ceiling_tokens, None);
    assert!(config.route_budgets.is_empty());
    assert_eq!(config.max_overflow_retries, 1);
    assert_eq!(config.max_passes, None);
    assert_eq!(config.pass_limit(), 2);
    assert_eq!(config.max_summary_repair_retries, None);
    assert_eq!(config.max_summary_calls_per_action, None);
    assert_eq!(config.summary, SummaryConfig::default());
    assert!(config.quiet_start);
    assert_eq!(config.journal_keep, 1024);
    assert!(config.warnings.is_empty());
    assert_eq!(config.advertised_max_note_chars(), 8000);
}

#[test]
fn quiet_start_is_a_boolean() {
    assert!(load(json!({"quiet_start": true})).quiet_start);
    assert!(!load(json!({"quiet_start": false})).quiet_start);
    assert_eq!(
        error(json!({"quiet_start": "no"})),
        "quiet_start must be true or false, got \"no\""
    );
    assert_eq!(
        error(json!({"quiet_start": 0})),
        "quiet_start must be true or false, got 0"
    );
}

#[test]
fn cc_cfg_1_every_key_is_read() {
    let config = load(json!({
        "budget_ratio": 0.7,
        "wakefulness_ratio": 0.5,
        "retain_ratio": 0.1,
        "fatigue_exponent": 2,
        "min_fresh_tokens": 10,
        "min_note_chars": 100,
        "max_note_chars": 200,
        "range_strategy": "target-prefix",
        "expected_checkpoint_tokens": 0,
        "safety_tokens": 1,
        "burst_tokens": 2,
        "release_margin_tokens": 3,
        "summary_safety_tokens": 4,
        "retain_tokens": 0,
        "context_budget_tokens": 5,
        "billing_input_ceiling_tokens": 6.0,
        "route_budgets": [],
        "max_overflow_retries": 0,
        "max_passes": 1,
        "max_summary_repair_retries": 0,
        "max_summary_calls_per_action": 1,
        "summary": {"provider": "p", "model": "m", "max_tokens": 7, "max_retries": 0},
        "quiet_start": false,
        "journal_keep": 9,
    }));
    let expected = CareConfig {
        budget_ratio: 0.7,
        wakefulness_ratio: 0.5,
        retain_ratio: 0.1,
        fatigue_exponent: 2.0,
        min_fresh_tokens: 10,
        min_note_chars: 100,
        max_note_chars: 200,
        range_strategy: RangeStrategy::TargetPrefix,
        expected_checkpoint_tokens: Some(0),
        safety_tokens: 1,
        burst_tokens: 2,
        release_margin_tokens: 3,
        summary_safety_tokens: Some(4),
        retain_tokens: Some(0),
        context_budget_tokens: Some(5),
        billing_input_ceiling_tokens: Some(6),
        route_budgets: Vec::new(),
        max_overflow_retries: 0,
        max_passes: Some(1),
        max_summary_repair_retries: Some(0),
        max_summary_calls_per_action: Some(1),
        summary: SummaryConfig {
            provider: Some("p".to_owned()),
            model: Some("m".to_owned()),
            max_tokens: Some(7),
            max_retries: Some(0),
        },
        quiet_start: false,
        journal_keep: 9,
        warnings: Vec::new(),
    };
    assert_eq!(config, expected);
    assert_eq!(config.effective_summary_safety_tokens(), 4);
    assert_eq!(config.pass_limit(), 1);
    // P = min(maxNoteChars, max(8000, minNoteChars)) (CC-TOOL-2).
    assert_eq!(config.advertised_max_note_chars(), 200);
    let wide = load(json!({"min_note_chars": 9000, "max_note_chars": 12000}));
    assert_eq!(wide.advertised_max_note_chars(), 9000);
}

#[test]
fn cc_cfg_1_unknown_keys_name_the_path_without_the_host_prefix() {
    assert_eq!(error(json!({"foo": 1})), "unknown config foo");
    // The original's camelCase spelling is not ours (spec naming note).
    assert_eq!(
        error(json!({"budgetRatio": 0.8})),
        "unknown config budgetRatio"
    );
    assert_eq!(
        error(json!({"summary": {"maxTokens": 1}})),
        "unknown config summary.maxTokens"
    );
    assert_eq!(
        error(
            json!({"route_budgets": [{"provider": "p", "model": "m", "purpose": "conversation", "x": 1}]})
        ),
        "unknown config route_budgets[0].x"
    );
    // Keys of other plugins or of the project are unknown here too.
    assert_eq!(error(json!({"locale": "en"})), "unknown config locale");
    assert_eq!(
        error(json!({"model_scoped_prompts": []})),
        "unknown config model_scoped_prompts"
    );
    assert!(matches!(
        CareConfig::parse(&json!({"foo": 1})),
        Err(ConfigError::UnknownKey { key }) if key == "foo"
    ));
}

#[test]
fn cc_cfg_1_the_table_must_be_an_object() {
    assert_eq!(error(json!([])), "the config must be a table, got []");
    assert_eq!(error(json!(1)), "the config must be a table, got 1");
}

#[test]
fn cc_cfg_1_ratios_are_in_the_open_unit_interval() {
    for key in [
        "budget_ratio",
        "wakefulness_ratio",
        "retain_ratio",
        "soft_budget_ratio",
        "hard_budget_ratio",
        "hysteresis_ratio",
        "auxiliary_budget_ratio",
    ] {
        for bad in [
            json!(0),
            json!(1),
            json!(-0.5),
            json!(1.5),
            json!("0.5"),
            json!(null),
        ] {
            assert_eq!(
                error(json!({ key: bad })),
                format!("{key} must be a number in (0, 1), got {bad}"),
            );
        }
    }
    assert_eq!(
        error(json!({"budget_ratio": 1})),
        "budget_ratio must be a number in (0, 1), got 1"
    );
}

#[test]
fn cc_cfg_1_retain_ratio_must_be_below_budget_ratio() {
    assert_eq!(
        error(json!({"budget_ratio": 0.5, "retain_ratio": 0.5})),
        "retain_ratio must be below budget_ratio (0.5), got 0.5"
    );
    assert_eq!(
        error(json!({"retain_ratio": 0.9})),
        "retain_ratio must be below budget_ratio (0.8), got 0.9"
    );
    load(json!({"budget_ratio": 0.5, "retain_ratio": 0.49}));
}

#[test]
fn cc_cfg_1_fatigue_exponent_is_positive() {
    for bad in [json!(0), json!(-1), json!("2")] {
        assert_eq!(
            error(json!({"fatigue_exponent": bad})),
            format!("fatigue_exponent must be a finite number > 0, got {bad}")
        );
    }
    assert_eq!(
        load(json!({"fatigue_exponent": 0.25})).fatigue_exponent,
        0.25
    );
}

#[test]
fn cc_cfg_1_positive_integers() {
    for key in [
        "min_fresh_tokens",
        "min_note_chars",
        "max_note_chars",
        "context_budget_tokens",
        "billing_input_ceiling_tokens",
    ] {
        for bad in [
            json!(0),
            json!(-1),
            json!(1.5),
            json!("5"),
            json!(9_007_199_254_740_992_u64),
        ] {
            assert_eq!(
                error(json!({ key: bad })),
                format!("{key} must be a positive integer, got {bad}"),
            );
        }
    }
}

#[test]
fn cc_cfg_1_note_bounds_are_ordered() {
    assert_eq!(
        error(json!({"min_note_chars": 10000})),
        "min_note_chars must be below max_note_chars (10000), got 10000"
    );
    assert_eq!(
        error(json!({"max_note_chars": 999})),
        "min_note_chars must be below max_note_chars (999), got 1000"
    );
}

#[test]
fn cc_cfg_1_non_negative_token_counts() {
    for key in [
        "safety_tokens",
        "burst_tokens",
        "release_margin_tokens",
        "summary_safety_tokens",
        "retain_tokens",
        "expected_checkpoint_tokens",
        "max_overflow_retries",
        "max_summary_repair_retries",
    ] {
        for bad in [json!(-1), json!(0.5), json!(true)] {
            assert_eq!(
                error(json!({ key: bad })),
                format!("{key} must be a non-negative integer, got {bad}"),
            );
        }
        // 0 is legal for all of them (`retain_tokens: 0` explicitly, CC-CFG-1).
        load(json!({ key: 0 }));
    }
    // The CC-BUD vector: `safetyTokens −1` → config error.
    assert_eq!(
        error(json!({"safety_tokens": -1})),
        "safety_tokens must be a non-negative integer, got -1"
    );
}

#[test]
fn cc_cfg_1_counts_of_at_least_one() {
    for key in ["max_passes", "max_summary_calls_per_action", "journal_keep"] {
        assert_eq!(
            error(json!({ key: 0 })),
            format!("{key} must be an integer >= 1, got 0")
        );
        assert_eq!(
            error(json!({ key: "2" })),
            format!("{key} must be an integer >= 1, got \"2\"")
        );
    }
}

#[test]
fn cc_cfg_1_range_strategy() {
    assert_eq!(
        error(json!({"range_strategy": "largest"})),
        "range_strategy must be basic-prefix or target-prefix, got \"largest\""
    );
    assert_eq!(
        error(json!({"range_strategy": "target-prefix"})),
        "range_strategy \"target-prefix\" needs expected_checkpoint_tokens (an integer >= 0), got none"
    );
    let config = load(json!({"range_strategy": "target-prefix", "expected_checkpoint_tokens": 50}));
    assert_eq!(config.range_strategy, RangeStrategy::TargetPrefix);
    assert_eq!(config.expected_checkpoint_tokens, Some(50));
    // Under basic-prefix the prediction is optional and still read (CC-MNT-4 uses `?? 0`).
    let basic = load(json!({"expected_checkpoint_tokens": 50}));
    assert_eq!(basic.range_strategy, RangeStrategy::BasicPrefix);
    assert_eq!(basic.expected_checkpoint_tokens, Some(50));
}

#[test]
fn cc_cfg_1_summary_is_strict() {
    assert_eq!(
        error(json!({"summary": 1})),
        "summary must be a table, got 1"
    );
    assert_eq!(
        error(json!({"summary": {"max_tokens": 0}})),
        "summary.max_tokens must be a positive integer, got 0"
    );
    assert_eq!(
        error(json!({"summary": {"max_retries": -1}})),
        "summary.max_retries must be a non-negative integer, got -1"
    );
    assert_eq!(
        error(json!({"summary": {"provider": " "}})),
        "summary.provider must be a non-blank string, got \" \""
    );
    assert_eq!(
        error(json!({"summary": {"model": 3}})),
        "summary.model must be a non-blank string, got 3"
    );
    assert_eq!(
        load(json!({"summary": {}})).summary,
        SummaryConfig::default()
    );
}

#[test]
fn cc_cfg_1_provider_usage_ratio_is_accepted_with_a_warning() {
    let config = load(json!({"provider_usage_ratio": 5}));
    assert_eq!(
        config.warnings,
        vec![PROVIDER_USAGE_RATIO_WARNING.to_owned()]
    );
    assert_eq!(
        config,
        CareConfig {
            warnings: config.warnings.clone(),
            ..CareConfig::default()
        }
    );
}

#[test]
fn cc_cfg_1_legacy_ratios_drive_nothing() {
    let config = load(json!({
        "soft_budget_ratio": 0.72,
        "hard_budget_ratio": 0.8,
        "hysteresis_ratio": 0.05,
        "auxiliary_budget_ratio": 0.12,
    }));
    assert_eq!(config, CareConfig::default());
}

#[test]
fn cc_bud_4_route_budgets_are_read() {
    let config = load(json!({"route_budgets": [
        {"provider": "p", "model": "m", "purpose": "conversation", "context_budget_tokens": 262144},
        {"provider": "p", "model": "m", "purpose": "compaction", "billing_input_ceiling_tokens": 1000},
        {"provider": "p", "model": "m", "purpose": "session-title"},
    ]}));
    assert_eq!(
        config.route_budgets,
        vec![
            RouteBudget {
                provider: "p".to_owned(),
                model: "m".to_owned(),
                purpose: RoutePurpose::Conversation,
                context_budget_tokens: Some(262_144),
                billing_input_ceiling_tokens: None,
            },
            RouteBudget {
                provider: "p".to_owned(),
                model: "m".to_owned(),
                purpose: RoutePurpose::Compaction,
                context_budget_tokens: None,
                billing_input_ceiling_tokens: Some(1000),
            },
            RouteBudget {
                provider: "p".to_owned(),
                model: "m".to_owned(),
                purpose: RoutePurpose::SessionTitle,
                context_budget_tokens: None,
                billing_input_ceiling_tokens: None,
            },
        ]
    );
    assert_eq!(
        config
            .route_budget("p", "m", RoutePurpose::Conversation)
            .and_then(|entry| entry.context_budget_tokens),
        Some(262_144)
    );
    // Exact matching only: no prefix, case or family guessing.
    assert!(
        config
            .route_budget("p", "M", RoutePurpose::Conversation)
            .is_none()
    );
    assert!(
        config
            .route_budget("p", "m-large", RoutePurpose::Conversation)
            .is_none()
    );
    assert!(
        config
            .route_budget("q", "m", RoutePurpose::Conversation)
            .is_none()
    );
}

#[test]
fn cc_bud_4_route_budget_errors() {
    assert_eq!(
        error(json!({"route_budgets": {}})),
        "route_budgets must be an array of tables, got {}"
    );
    assert_eq!(
        error(json!({"route_budgets": [1]})),
        "route_budgets[0] must be a table, got 1"
    );
    assert_eq!(
        error(json!({"route_budgets": [{"model": "m", "purpose": "conversation"}]})),
        "route_budgets[0].provider is required (a non-blank string)"
    );
    assert_eq!(
        error(json!({"route_budgets": [{"provider": "p", "purpose": "conversation"}]})),
        "route_budgets[0].model is required (a non-blank string)"
    );
    assert_eq!(
        error(
            json!({"route_budgets": [{"provider": "", "model": "m", "purpose": "conversation"}]})
        ),
        "route_budgets[0].provider must be a non-blank string, got \"\""
    );
    assert_eq!(
        error(
            json!({"route_budgets": [{"provider": "p", "model": "  ", "purpose": "conversation"}]})
        ),
        "route_budgets[0].model must be a non-blank string, got \"  \""
    );
    assert_eq!(
        error(json!({"route_budgets": [{"provider": "p", "model": "m"}]})),
        "route_budgets[0].purpose is required (conversation, compaction or session-title)"
    );
    assert_eq!(
        error(json!({"route_budgets": [{"provider": "p", "model": "m", "purpose": "title"}]})),
        "route_budgets[0].purpose must be conversation, compaction or session-title, got \"title\""
    );
    assert_eq!(
        error(json!({"route_budgets": [
            {"provider": "p", "model": "m", "purpose": "conversation", "context_budget_tokens": 0}
        ]})),
        "route_budgets[0].context_budget_tokens must be a positive integer, got 0"
    );
    assert_eq!(
        error(json!({"route_budgets": [
            {"provider": "p", "model": "m", "purpose": "conversation", "billing_input_ceiling_tokens": -5}
        ]})),
        "route_budgets[0].billing_input_ceiling_tokens must be a positive integer, got -5"
    );
}

#[test]
fn cc_bud_4_duplicate_triple_fails() {
    let message = error(json!({"route_budgets": [
        {"provider": "p", "model": "m", "purpose": "conversation", "context_budget_tokens": 1},
        {"provider": "p", "model": "m", "purpose": "compaction"},
        {"provider": "p", "model": "m", "purpose": "conversation", "billing_input_ceiling_tokens": 2},
    ]}));
    assert!(message.starts_with("duplicate route budget"), "{message}");
    assert_eq!(
        message,
        "duplicate route budget route_budgets[2]: provider \"p\", model \"m\", purpose conversation (as route_budgets[0])"
    );
}
