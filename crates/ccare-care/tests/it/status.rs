//! The status text (CC-NTC-3, CC-NTC-4) in both locales, and the `context_status` tool
//! (CC-TOOL-1) called by the model through the real agent loop (SQLite store, scripted
//! provider).

#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use ccare_agent::testing::{self, TestHost};
use ccare_care::metrics::{ContextCareMetrics, FatigueLevel, WakefulnessLevel};
use ccare_care::texts::{EN, StatusParts, StatusTexts, ZH, advice, render_status};
use ccare_care::{ContextCare, RouteSnapshot};
use ccare_core::Locale;
use ccare_core::kinds::TurnEndReason;
use ccare_llm::ModelConfig;
use ccare_llm::script::ScriptProvider;
use ccare_session::Session;
use serde_json::Value;

const ALL_ON: StatusParts<'static> = StatusParts {
    report: true,
    advice: true,
    outcome: None,
    state_unknown: false,
};

fn metrics(fatigue: FatigueLevel, wakefulness: WakefulnessLevel) -> ContextCareMetrics {
    ContextCareMetrics {
        fatigue,
        fatigue_value: Some(42.5),
        wakefulness,
        wakefulness_value: Some(7.25),
    }
}

const FATIGUE: [FatigueLevel; 5] = [
    FatigueLevel::Unknown,
    FatigueLevel::Normal,
    FatigueLevel::Elevated,
    FatigueLevel::High,
    FatigueLevel::VeryHigh,
];
const WAKEFULNESS: [WakefulnessLevel; 5] = [
    WakefulnessLevel::Unknown,
    WakefulnessLevel::Low,
    WakefulnessLevel::Normal,
    WakefulnessLevel::Elevated,
    WakefulnessLevel::High,
];

const EN_HIGH_LOW: &str = "<context-care>
Fatigue: high; wakefulness: low.
These levels are estimates of load from the latest request and of the retained history; they are not a deadline.
A high-load recommendation applies: first save the goal, verified results and unfinished work, then tidy the context as the policy describes.
A summary keeps the threads of the work, so context_rest with a detailed handoff note is a good next step.
</context-care>";

const EN_NORMAL_LOW: &str = "<context-care>
Fatigue: normal; wakefulness: low.
These levels are estimates of load from the latest request and of the retained history; they are not a deadline.
Carry on with the task.
</context-care>";

const EN_UNKNOWN: &str = "<context-care>
Fatigue: unknown; wakefulness: unknown.
These levels are estimates of load from the latest request and of the retained history; they are not a deadline.
The context capacity is not calibrated yet, so the levels are unknown; do not guess them from the length of the conversation.
Carry on with the task.
</context-care>";

const ZH_HIGH_LOW: &str = "<context-care>
疲劳度：高；唤醒值：低。
以上等级是依据最近一次请求和保留的历史得出的负载估计，不是截止期限。
已适用高负载建议：先保存目标、已验证的结果和未完成的工作，再按策略整理上下文。
摘要会保留工作的脉络，因此下一步适合调用 context_rest 并附上详细的交接笔记。
</context-care>";

const ZH_VERY_HIGH_ELEVATED: &str = "<context-care>
疲劳度：很高；唤醒值：偏高。
以上等级是依据最近一次请求和保留的历史得出的负载估计，不是截止期限。
预算压力很高。下一步请把目标、结果、未完成的工作和关键路径保存到文件。
然后按配置的步骤用 context_rest 进行深度休息（交接笔记和找回路径会替换可清除的历史），查看报告的结果，再继续工作。
变化的只是请求中保留的文本：原始内容仍可在日志和检查点中查到，你的身份、目标和判断归属都不变。
</context-care>";

const ZH_UNKNOWN: &str = "<context-care>
疲劳度：未知；唤醒值：未知。
以上等级是依据最近一次请求和保留的历史得出的负载估计，不是截止期限。
上下文容量尚未校准，因此等级未知；请不要凭对话长度去推测。
照常继续当前任务。
</context-care>";

#[test]
fn cc_ntc_3_english_texts_are_exact() {
    let high_low = metrics(FatigueLevel::High, WakefulnessLevel::Low);
    assert_eq!(render_status(Locale::En, &high_low, ALL_ON), EN_HIGH_LOW);
    let normal_low = metrics(FatigueLevel::Normal, WakefulnessLevel::Low);
    assert_eq!(
        render_status(Locale::En, &normal_low, ALL_ON),
        EN_NORMAL_LOW
    );
}

#[test]
fn cc_ntc_3_chinese_texts_are_exact() {
    let high_low = metrics(FatigueLevel::High, WakefulnessLevel::Low);
    assert_eq!(render_status(Locale::Zh, &high_low, ALL_ON), ZH_HIGH_LOW);
    let very_high = metrics(FatigueLevel::VeryHigh, WakefulnessLevel::Elevated);
    assert_eq!(
        render_status(Locale::Zh, &very_high, ALL_ON),
        ZH_VERY_HIGH_ELEVATED
    );
}

#[test]
fn cc_ntc_3_high_low_with_everything_on_is_six_lines() {
    let high_low = metrics(FatigueLevel::High, WakefulnessLevel::Low);
    for locale in [Locale::En, Locale::Zh] {
        let text = render_status(locale, &high_low, ALL_ON);
        assert_eq!(text.split('\n').count(), 6, "{text}");
    }
}

#[test]
fn cc_ntc_3_unknown_capacity_adds_the_uncalibrated_line_and_normal_advice() {
    let unknown = ContextCareMetrics::UNKNOWN;
    assert_eq!(render_status(Locale::En, &unknown, ALL_ON), EN_UNKNOWN);
    assert_eq!(render_status(Locale::Zh, &unknown, ALL_ON), ZH_UNKNOWN);
}

#[test]
fn cc_ntc_3_nothing_between_the_tags_is_the_empty_string() {
    let none = StatusParts {
        report: false,
        advice: false,
        outcome: None,
        state_unknown: false,
    };
    for fatigue in FATIGUE {
        for wakefulness in WAKEFULNESS {
            for locale in [Locale::En, Locale::Zh] {
                assert_eq!(
                    render_status(locale, &metrics(fatigue, wakefulness), none),
                    ""
                );
            }
        }
    }
}

#[test]
fn cc_ntc_3_parts_go_in_order_and_the_outcome_sits_before_the_advice() {
    let parts = StatusParts {
        report: false,
        advice: true,
        outcome: Some("OUTCOME"),
        state_unknown: false,
    };
    let text = render_status(
        Locale::En,
        &metrics(FatigueLevel::Elevated, WakefulnessLevel::High),
        parts,
    );
    let lines: Vec<&str> = text.split('\n').collect();
    assert_eq!(lines.len(), 4);
    assert_eq!(lines[0], "<context-care>");
    assert_eq!(lines[1], "OUTCOME");
    assert_eq!(lines[2], EN.advice_elevated[0]);
    assert_eq!(lines[3], "</context-care>");
    let outcome_only = StatusParts {
        report: false,
        advice: false,
        outcome: Some("OUTCOME"),
        state_unknown: false,
    };
    assert_eq!(
        render_status(Locale::Zh, &ContextCareMetrics::UNKNOWN, outcome_only),
        "<context-care>\nOUTCOME\n</context-care>"
    );
}

/// `<FatigueLabel>[:：]\s*<grade>[;；]\s*<WakeLabel>[:：]\s*<grade>[.。]`, by hand:
/// returns the two grades.
fn parse_level_line<'a>(line: &'a str, texts: &StatusTexts) -> Option<(&'a str, &'a str)> {
    fn separator(rest: &str, allowed: [char; 2]) -> Option<&str> {
        let mut chars = rest.chars();
        let first = chars.next()?;
        allowed
            .contains(&first)
            .then(|| chars.as_str().trim_start())
    }
    let rest = line.strip_prefix(texts.fatigue_label)?;
    let rest = separator(rest, [':', '：'])?;
    let end = rest.find([';', '；'])?;
    let (fatigue, rest) = rest.split_at(end);
    let rest = separator(rest, [';', '；'])?;
    let rest = rest.strip_prefix(texts.wakefulness_label)?;
    let rest = separator(rest, [':', '：'])?;
    let wakefulness = rest.strip_suffix('.').or_else(|| rest.strip_suffix('。'))?;
    Some((fatigue, wakefulness))
}

#[test]
fn cc_ntc_3_the_level_line_parses_in_both_locales() {
    for (locale, texts) in [(Locale::En, &EN), (Locale::Zh, &ZH)] {
        for (fatigue_index, fatigue) in FATIGUE.into_iter().enumerate() {
            for (wake_index, wakefulness) in WAKEFULNESS.into_iter().enumerate() {
                let text = render_status(locale, &metrics(fatigue, wakefulness), ALL_ON);
                let line = text.split('\n').nth(1).unwrap();
                let (fatigue_grade, wake_grade) = parse_level_line(line, texts)
                    .unwrap_or_else(|| panic!("not parseable: {line}"));
                let expected_fatigue = match fatigue_index {
                    0 => texts.unknown,
                    index => texts.fatigue_grades[index - 1],
                };
                let expected_wake = match wake_index {
                    0 => texts.unknown,
                    index => texts.wakefulness_grades[index - 1],
                };
                assert_eq!(
                    (fatigue_grade, wake_grade),
                    (expected_fatigue, expected_wake)
                );
            }
        }
    }
    // The English grades are the level ids (CC-NTC-3).
    for fatigue in FATIGUE {
        let text = render_status(Locale::En, &metrics(fatigue, WakefulnessLevel::Low), ALL_ON);
        let line = text.split('\n').nth(1).unwrap();
        assert_eq!(parse_level_line(line, &EN).unwrap().0, fatigue.as_str());
    }
    for wakefulness in WAKEFULNESS {
        let text = render_status(
            Locale::En,
            &metrics(FatigueLevel::Normal, wakefulness),
            ALL_ON,
        );
        let line = text.split('\n').nth(1).unwrap();
        assert_eq!(parse_level_line(line, &EN).unwrap().1, wakefulness.as_str());
    }
}

#[test]
fn cc_gen_3_t1_no_digit_in_any_text() {
    for locale in [Locale::En, Locale::Zh] {
        for fatigue in FATIGUE {
            for wakefulness in WAKEFULNESS {
                let text = render_status(locale, &metrics(fatigue, wakefulness), ALL_ON);
                assert!(!text.chars().any(|c| c.is_ascii_digit()), "{text}");
            }
        }
    }
    for texts in [&EN, &ZH] {
        assert!(
            !texts
                .status_tool_description
                .chars()
                .any(|c| c.is_ascii_digit())
        );
    }
}

#[test]
fn cc_ntc_4_advice_is_distinct_per_level_with_the_spec_line_counts() {
    for texts in [&EN, &ZH] {
        let levels = [
            FatigueLevel::Normal,
            FatigueLevel::Elevated,
            FatigueLevel::High,
            FatigueLevel::VeryHigh,
        ];
        let counts: Vec<usize> = levels
            .iter()
            .map(|level| advice(texts, *level).len())
            .collect();
        assert_eq!(counts, [1, 1, 2, 3]);
        let mut lines: Vec<&str> = levels
            .iter()
            .flat_map(|level| advice(texts, *level).iter().copied())
            .collect();
        lines.sort_unstable();
        lines.dedup();
        assert_eq!(lines.len(), 7, "every advice line is distinct");
        assert_eq!(
            advice(texts, FatigueLevel::Unknown),
            advice(texts, FatigueLevel::Normal)
        );
    }
}

// ---- the tool in real composition ----

struct Run {
    end: Option<TurnEndReason>,
    session: Session,
    script: ScriptProvider,
}

/// The kernel's test host (`s/small`: 4,000 tokens) with the plugin `plugin` builds
/// from the route, one prompt run to the end of its turn.
async fn run(plugin: impl FnOnce(RouteSnapshot) -> ContextCare, script: &str) -> Run {
    let kit = TestHost::builder(script)
        .model(
            "s/small",
            ModelConfig {
                context_window: Some(4_000),
                max_output_tokens: Some(1_000),
                ..ModelConfig::default()
            },
        )
        .build()
        .unwrap();
    let route = RouteSnapshot::of(&kit.host().llm().route("s/small").unwrap());
    kit.host()
        .mount(&plugin(route), &serde_json::json!({}))
        .unwrap();
    let session = kit.session().await.unwrap();
    let agent = kit.agent(&session, "s/small");
    let end = testing::turn(&agent, "how full is the context?").await;
    Run {
        end,
        session,
        script: kit.script().clone(),
    }
}

fn tool_results(session: &Session) -> Vec<Value> {
    testing::events_of(session, "tool/result")
}

const CALL_STATUS: &str = r#"{"tool_calls": [{"name": "context_status", "arguments": {}, "id": "c1"}]}
{"text": "ok"}"#;

#[tokio::test]
async fn cc_tool_1_the_model_reads_the_status_text_through_the_loop() {
    let run = run(
        |route| ContextCare::default().with_route(route),
        CALL_STATUS,
    )
    .await;
    assert_eq!(run.end, Some(TurnEndReason::Completed));
    let results = tool_results(&run.session);
    assert_eq!(results.len(), 1);
    assert!(results[0]["error"].is_null(), "{}", results[0]);
    assert_eq!(
        results[0]["message"]["content"][0]["content"][0]["text"],
        EN_NORMAL_LOW
    );
    // The schema is advertised exactly.
    let requests = run.script.requests();
    assert_eq!(requests.len(), 2);
    let tool = requests[0]
        .config
        .tools
        .iter()
        .find(|tool| tool.name == "context_status")
        .unwrap();
    assert_eq!(
        *tool.input_schema,
        serde_json::json!({"type":"object","properties":{},"additionalProperties":false})
    );
}

#[tokio::test]
async fn cc_tool_1_without_a_route_both_metrics_are_unknown_in_the_locale() {
    let run = run(
        |_route| ContextCare::default().with_locale(Locale::Zh),
        CALL_STATUS,
    )
    .await;
    assert_eq!(run.end, Some(TurnEndReason::Completed));
    let results = tool_results(&run.session);
    assert_eq!(
        results[0]["message"]["content"][0]["content"][0]["text"],
        ZH_UNKNOWN
    );
}

#[tokio::test]
async fn cc_tool_1_any_argument_other_than_an_empty_object_is_refused() {
    // Raw argument text `null` reaches the tool as JSON null (an absent argument text
    // is `{}` by the kernel's convention, so it is not a refusal case).
    let script = r#"{"tool_calls": [{"name": "context_status", "arguments": "null", "id": "a"}, {"name": "context_status", "arguments": [], "id": "b"}, {"name": "context_status", "arguments": {"verbose": true}, "id": "c"}]}
{"text": "ok"}"#;
    let run = run(|route| ContextCare::default().with_route(route), script).await;
    assert_eq!(run.end, Some(TurnEndReason::Completed));
    let results = tool_results(&run.session);
    assert_eq!(results.len(), 3, "{results:?}");
    let errors: Vec<(&str, &str)> = results
        .iter()
        .map(|result| {
            (
                result["error"]["code"].as_str().unwrap(),
                result["error"]["message"].as_str().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        errors,
        [
            (
                "INVALID_ARGUMENTS",
                "context_status takes no arguments; call it with {} (got null)."
            ),
            (
                "INVALID_ARGUMENTS",
                "context_status takes no arguments; call it with {} (got an array)."
            ),
            (
                "INVALID_ARGUMENTS",
                "context_status takes no arguments; call it with {} (got key(s): verbose)."
            ),
        ]
    );
}
