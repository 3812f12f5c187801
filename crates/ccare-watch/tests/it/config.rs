//! SW-1, SW-5 trigger configuration: the serde shape, the defaults, validation errors.

use ccare_watch::engine::{
    ActionId, DetectorConfig, LineRepeatParams, Mode, Scope, TriggerConfig, TriggerError, Triggers,
};
use serde_json::{Value, json};

use crate::marker_trigger;

fn error(configs: Value) -> TriggerError {
    Triggers::from_json(&configs).unwrap_err()
}

#[test]
fn sw_5_the_default_triggers_are_exact() {
    let defaults = serde_json::to_value(TriggerConfig::defaults()).unwrap();
    assert_eq!(
        defaults,
        json!([
            {"id": "line-repeat",
             "detector": {"kind": "line-repeat",
                          "params": {"minLines": 30, "minCount": 30, "minRatio": 0.35, "minRun": 12}},
             "scope": "combined", "mode": "windowed", "everyChars": 300,
             "actions": ["notice", "abort", "resume"]},
            {"id": "time-anxiety",
             "detector": {"kind": "phrase", "params": {"phrases": [
                 "时间不够", "时间有限", "时间不多", "时间紧迫", "没时间了", "来不及", "加快速度",
                 "得加快", "抓紧时间", "节省时间", "浪费时间", "太耗时", "时间成本"]}},
             "scope": "reasoning", "mode": "incremental", "actions": ["notice"]},
            {"id": "context-anxiety",
             "detector": {"kind": "phrase", "params": {"phrases": [
                 "上下文不够", "上下文有限", "上下文不多", "上下文快满", "上下文紧张", "上下文吃紧",
                 "上下文压力", "上下文成本", "节省上下文", "省点上下文", "会话太长", "趁还没压缩",
                 "趁压缩之前", "趁上下文还够", "免得被压缩"]}},
             "scope": "reasoning", "mode": "incremental", "actions": ["notice"]},
        ])
    );
    let triggers = Triggers::defaults();
    assert_eq!(Triggers::from_json(&defaults).unwrap(), triggers);
    assert_eq!(
        triggers.get("line-repeat").unwrap().every_chars(),
        Some(300)
    );
    assert_eq!(
        triggers.get("time-anxiety").unwrap().scope(),
        Scope::Reasoning
    );
}

#[test]
fn sw_1_a_trigger_parses_from_the_spec_shape() {
    let triggers = Triggers::from_json(&json!([{
        "id": "lr",
        "detector": {"kind": "line-repeat", "params": {"minLines": 10, "minRun": 5}},
        "scope": "text", "mode": "windowed", "everyChars": 40,
        "actions": ["notice", "abort", "resume", "nope"],
    }]))
    .unwrap();
    let trigger = &triggers.as_slice()[0];
    assert_eq!(
        trigger.config().detector,
        DetectorConfig::LineRepeat(LineRepeatParams {
            min_lines: 10,
            min_run: 5,
            ..LineRepeatParams::default()
        })
    );
    assert_eq!(trigger.config().mode, Mode::Windowed);
    assert_eq!(trigger.actions()[3], ActionId::Unknown("nope".into()));
}

#[test]
fn sw_1_snake_case_keys_are_accepted_too() {
    let triggers = Triggers::from_json(&json!([{
        "id": "lr",
        "detector": {"kind": "line-repeat", "params": {"min_lines": 10, "min_count": 9, "min_ratio": 0.5, "min_run": 4}},
        "scope": "combined", "mode": "windowed", "every_chars": 40, "actions": ["notice"],
    }]))
    .unwrap();
    assert_eq!(triggers.as_slice()[0].every_chars(), Some(40));
}

#[test]
fn sw_1_defaults_fill_mode_every_chars_and_params() {
    let triggers = Triggers::from_json(&json!([
        {"id": "a", "detector": {"kind": "line-repeat", "params": {}}, "scope": "text",
         "mode": "windowed", "actions": ["notice"]},
        {"id": "b", "detector": {"kind": "phrase", "params": {"phrases": ["x"]}}, "scope": "text",
         "actions": ["notice"]},
    ]))
    .unwrap();
    assert_eq!(triggers.as_slice()[0].every_chars(), Some(300));
    assert_eq!(triggers.as_slice()[1].every_chars(), None);
}

#[test]
fn sw_1_unknown_keys_are_rejected_everywhere() {
    let mut top = marker_trigger("x", "text", &["notice"]);
    top["extra"] = 1.into();
    let mut detector = marker_trigger("x", "text", &["notice"]);
    detector["detector"]["extra"] = 1.into();
    let mut params = marker_trigger("x", "text", &["notice"]);
    params["detector"]["params"]["extra"] = 1.into();
    for config in [top, detector, params] {
        assert!(matches!(error(json!([config])), TriggerError::Shape(_)));
    }
    let mut scope = marker_trigger("x", "text", &["notice"]);
    scope["scope"] = "both".into();
    assert!(matches!(error(json!([scope])), TriggerError::Shape(_)));
    let kind = json!([{"id": "k", "detector": {"kind": "regex", "params": {}}, "scope": "text", "actions": ["notice"]}]);
    assert!(matches!(error(kind), TriggerError::Shape(_)));
}

#[test]
fn sw_1_validation_errors_are_typed() {
    let base = || marker_trigger("x", "text", &["notice"]);
    let with = |key: &str, value: Value| {
        let mut config = base();
        config[key] = value;
        json!([config])
    };
    assert_eq!(
        error(with("id", "".into())),
        TriggerError::BadId { chars: 0 }
    );
    assert_eq!(
        error(with("id", "é".repeat(257).into())),
        TriggerError::BadId { chars: 257 }
    );
    assert_eq!(
        error(json!([base(), base()])),
        TriggerError::DuplicateId("m".into())
    );
    assert_eq!(
        error(json!([marker_trigger("", "text", &["notice"])])),
        TriggerError::EmptyMarker {
            trigger: "m".into()
        }
    );
    assert_eq!(
        error(with(
            "detector",
            json!({"kind": "phrase", "params": {"phrases": ["a", ""]}})
        )),
        TriggerError::EmptyPhrase {
            trigger: "m".into(),
            index: 1
        }
    );
    assert_eq!(
        error(with("everyChars", 10.into())),
        TriggerError::EveryCharsWithoutWindow {
            trigger: "m".into()
        }
    );
    let mut zero = base();
    zero["mode"] = "windowed".into();
    zero["everyChars"] = 0.into();
    assert_eq!(
        error(json!([zero])),
        TriggerError::ZeroEveryChars {
            trigger: "m".into()
        }
    );
    assert_eq!(
        error(with("actions", json!([]))),
        TriggerError::NoActions {
            trigger: "m".into()
        }
    );
    assert_eq!(
        error(with("actions", json!(["notice", "notice"]))),
        TriggerError::DuplicateAction {
            trigger: "m".into(),
            action: "notice".into()
        }
    );
    assert_eq!(
        error(with("actions", json!(["resume", "abort"]))),
        TriggerError::ResumeWithoutAbort {
            trigger: "m".into()
        }
    );
    for (params, param) in [
        (json!({"minLines": 0}), "minLines"),
        (json!({"minLines": 81}), "minLines"),
        (json!({"minCount": 0}), "minCount"),
        (json!({"minRatio": 1.5}), "minRatio"),
        (json!({"minRatio": -0.1}), "minRatio"),
        (json!({"minRun": 0}), "minRun"),
    ] {
        let config = with("detector", json!({"kind": "line-repeat", "params": params}));
        match error(config) {
            TriggerError::BadLineRepeatParam { param: found, .. } => assert_eq!(found, param),
            other => panic!("{other:?}"),
        }
    }
}

#[test]
fn sw_1_errors_read_well() {
    let message = error(json!([marker_trigger("", "text", &["notice"])])).to_string();
    assert_eq!(message, "trigger m: marker is empty");
}

#[test]
fn sw_1_params_are_required_and_empty_line_repeat_params_take_the_defaults() {
    let without = json!([
        {"id": "a", "detector": {"kind": "line-repeat"}, "scope": "text", "actions": ["notice"]},
    ]);
    assert_eq!(
        error(without),
        TriggerError::Shape("missing field `params`".into())
    );
    let empty = Triggers::from_json(&json!([
        {"id": "a", "detector": {"kind": "line-repeat", "params": {}}, "scope": "text", "actions": ["notice"]},
    ]))
    .unwrap();
    assert_eq!(
        empty.as_slice()[0].config().detector,
        DetectorConfig::LineRepeat(LineRepeatParams::default())
    );
}
