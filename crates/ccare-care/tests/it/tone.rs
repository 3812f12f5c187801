//! CC-GEN-2 and CC-GEN-3: every model-visible text exists in English and Chinese and
//! keeps the tone rules: levels only (no numbers, percentages or countdowns), no claim
//! of memory loss, degraded ability or hallucination, no urgency or alarm.

use ccare_care::texts::{
    EN, EN_AUTO, EN_GUIDANCE, EN_REST, GuidanceTexts, RestTexts, StatusTexts, ZH, ZH_AUTO,
    ZH_GUIDANCE, ZH_REST, catalog,
};
use ccare_core::Locale;
use serde_json::json;

use crate::rest::{lorem, note, rest_call};
use crate::rig::rig_with;

fn status_texts(texts: &StatusTexts) -> Vec<&'static str> {
    let mut all = vec![
        texts.estimate,
        texts.uncalibrated,
        texts.status_tool_description,
    ];
    for advice in [
        texts.advice_normal,
        texts.advice_elevated,
        texts.advice_high,
        texts.advice_very_high,
    ] {
        all.extend_from_slice(advice);
    }
    all
}

fn rest_texts(texts: &RestTexts) -> Vec<&'static str> {
    vec![
        texts.tool_description,
        texts.note_description,
        texts.deep_description,
        texts.recovery_description,
        texts.error_unknown_key,
        texts.error_not_object,
        texts.error_note_length,
        texts.error_recovery_length,
        texts.error_deep_needs_recovery,
        texts.error_already_scheduled,
        texts.error_no_session,
        texts.error_cancelled,
        texts.note_header,
        texts.recovery_header,
        texts.scheduled,
        texts.scheduled_then_continue,
        texts.outcome_already_reduced,
        texts.outcome_deep_nothing_to_clear,
        texts.outcome_deep_done,
        texts.outcome_no_provider,
        texts.outcome_no_proposal,
        texts.outcome_memo_hit,
        texts.outcome_committed,
        texts.outcome_error,
        texts.outcome_executor_unavailable,
    ]
}

fn guidance_texts(texts: &GuidanceTexts) -> Vec<&'static str> {
    let mut all = vec![texts.heading];
    all.extend(texts.lines.iter().map(|(_, line)| *line));
    all
}

/// Negations the texts are allowed to contain: they deny the claim, not make it.
const NEGATIONS: [&str; 4] = [
    "not evidence of memory loss, hallucination or impairment",
    "not a diagnosis of memory loss",
    "不是记忆丧失、幻觉或能力受损的证据",
    "不是记忆丧失的诊断",
];

const FORBIDDEN_EN: [&str; 16] = [
    "forget",
    "forgot",
    "memory loss",
    "hallucinat",
    "degrad",
    "impair",
    "countdown",
    "remaining",
    "urgent",
    "hurry",
    "immediately",
    "warning",
    "danger",
    "%",
    // T4: no threat of what will happen to the next request.
    "refuse",
    "reject",
];
const FORBIDDEN_ZH: [&str; 12] = [
    "遗忘",
    "忘记",
    "失忆",
    "记忆丧失",
    "幻觉",
    "衰退",
    "倒计时",
    "剩余",
    "紧急",
    "危险",
    "拒绝",
    "驳回",
];

fn scrub(text: &str) -> String {
    NEGATIONS
        .iter()
        .fold(text.to_lowercase(), |text, negation| {
            text.replace(negation, "")
        })
}

#[test]
fn cc_gen_2_every_text_has_both_locales() {
    for (en, zh) in status_texts(&EN).iter().zip(status_texts(&ZH)) {
        assert!(!en.is_empty() && !zh.is_empty());
        assert_ne!(*en, zh);
    }
    for (en, zh) in rest_texts(&EN_REST).iter().zip(rest_texts(&ZH_REST)) {
        assert!(!en.is_empty() && !zh.is_empty());
        assert_ne!(*en, zh);
    }
    for (en, zh) in guidance_texts(&EN_GUIDANCE)
        .iter()
        .zip(guidance_texts(&ZH_GUIDANCE))
    {
        assert_ne!(*en, zh);
    }
}

#[test]
fn cc_gen_3_no_claim_of_loss_no_alarm_no_countdown_in_either_locale() {
    let english = status_texts(&EN)
        .into_iter()
        .chain(rest_texts(&EN_REST))
        .chain(guidance_texts(&EN_GUIDANCE));
    for text in english {
        let scrubbed = scrub(text);
        for word in FORBIDDEN_EN {
            assert!(!scrubbed.contains(word), "{word:?} in {text:?}");
        }
    }
    let chinese = status_texts(&ZH)
        .into_iter()
        .chain(rest_texts(&ZH_REST))
        .chain(guidance_texts(&ZH_GUIDANCE));
    for text in chinese {
        let scrubbed = scrub(text);
        for word in FORBIDDEN_ZH {
            assert!(!scrubbed.contains(word), "{word:?} in {text:?}");
        }
    }
}

#[test]
fn cc_gen_3_t1_no_number_in_what_the_model_reads_about_its_state() {
    // The rest tool's length range is about the note, not the state; everything else
    // the model reads about its context carries no number at all.
    let state_texts = status_texts(&EN)
        .into_iter()
        .chain(status_texts(&ZH))
        .chain(guidance_texts(&EN_GUIDANCE))
        .chain(guidance_texts(&ZH_GUIDANCE))
        .chain([&EN_REST, &ZH_REST].into_iter().flat_map(|texts| {
            [
                texts.scheduled,
                texts.outcome_already_reduced,
                texts.outcome_deep_nothing_to_clear,
                texts.outcome_deep_done,
                texts.outcome_no_provider,
                texts.outcome_no_proposal,
                texts.outcome_memo_hit,
                texts.outcome_committed,
                texts.outcome_error,
                texts.outcome_executor_unavailable,
            ]
        }));
    for text in state_texts {
        assert!(!text.chars().any(|c| c.is_ascii_digit()), "{text:?}");
    }
}

#[test]
fn cc_gen_3_t4_the_automatic_outcome_lines_make_no_threat() {
    for texts in [EN_AUTO, ZH_AUTO] {
        for line in [texts.within_target, texts.above_target, texts.above_hard] {
            let scrubbed = scrub(line);
            for word in FORBIDDEN_EN.iter().chain(FORBIDDEN_ZH.iter()) {
                assert!(!scrubbed.contains(word), "{word:?} in {line:?}");
            }
            assert!(!line.chars().any(|c| c.is_ascii_digit()), "{line:?}");
        }
    }
}

/// Every model-visible text of the plugin, by id, from the library's own catalog: the
/// two locales list the same ids, and no Chinese text is the English one.
#[test]
fn cc_gen_2_the_catalog_has_every_text_in_both_locales() {
    let en = catalog(Locale::En);
    let zh = catalog(Locale::Zh);
    let ids = |texts: &[(&'static str, &'static str)]| -> Vec<&'static str> {
        texts.iter().map(|(id, _)| *id).collect()
    };
    assert_eq!(ids(&en), ids(&zh));
    for wanted in [
        "checkpoint.framing",
        "prune.marker",
        "chunk.header",
        "chunk.left_out",
        "status.error_arguments",
        "status.error_cancelled",
        "auto.above_hard",
        "rest.outcome_error",
        "guidance.heading",
    ] {
        assert!(ids(&en).contains(&wanted), "{wanted} is not in the catalog");
    }
    for ((id, en), (_, zh)) in en.iter().zip(&zh) {
        assert!(!en.is_empty() && !zh.is_empty(), "{id}");
        assert_ne!(en, zh, "{id} is not translated");
        assert!(
            zh.chars().any(|c| ('\u{4e00}'..='\u{9fff}').contains(&c)),
            "{id} in zh has no Chinese: {zh:?}"
        );
    }
}

/// CC-GEN-3 over the whole catalog, so a new text cannot skip the tone check.
#[test]
fn cc_gen_3_every_catalog_text_keeps_the_tone_rules() {
    for (locale, forbidden) in [
        (Locale::En, FORBIDDEN_EN.as_slice()),
        (Locale::Zh, FORBIDDEN_ZH.as_slice()),
    ] {
        for (id, text) in catalog(locale) {
            let scrubbed = scrub(text);
            for word in forbidden {
                assert!(!scrubbed.contains(word), "{word:?} in {id}: {text:?}");
            }
        }
    }
}

#[tokio::test]
async fn cc_gen_2_context_status_errors_speak_the_locale() {
    let script = [
        json!({"tool_calls": [
            {"name": "context_status", "arguments": {"verbose": true}},
            {"name": "context_status", "arguments": [1]},
        ]})
        .to_string(),
        r#"{"text": "好的"}"#.to_owned(),
    ]
    .join("\n");
    let rig = rig_with(&script, json!({}), Some(16_000), &|care| {
        care.with_locale(Locale::Zh)
    })
    .await;
    rig.turn("状态").await;
    let results: Vec<String> = rig
        .events("tool/result")
        .into_iter()
        .map(|(_, data)| {
            data["message"]["content"][0]["content"][0]["text"]
                .as_str()
                .unwrap()
                .to_owned()
        })
        .collect();
    assert_eq!(
        results,
        [
            "INVALID_ARGUMENTS: context_status 不接受参数；请以 {} 调用（收到键：verbose）。",
            "INVALID_ARGUMENTS: context_status 不接受参数；请以 {} 调用（收到数组）。",
        ]
    );
}

#[tokio::test]
async fn cc_gen_2_a_chinese_session_gets_a_chinese_checkpoint_framing() {
    let script = [
        r#"{"text": "read it"}"#.to_owned(),
        rest_call(json!({"note": note(1200)})),
        json!({"expect": {"purpose": "compaction"}, "text": crate::rest::SUMMARY}).to_string(),
        r#"{"text": "continuing"}"#.to_owned(),
    ]
    .join("\n");
    let rig = rig_with(
        &script,
        json!({"retain_tokens": 100}),
        Some(64_000),
        &|care| care.with_locale(Locale::Zh),
    )
    .await;
    rig.turn(&lorem(400)).await;
    rig.turn("now rest").await;
    let checkpoint = rig
        .user_messages()
        .into_iter()
        .find(|message| message["source"]["kind"] == "compact-checkpoint")
        .unwrap();
    let framing = catalog(Locale::Zh)
        .into_iter()
        .find(|(id, _)| *id == "checkpoint.framing")
        .unwrap()
        .1;
    assert_eq!(checkpoint["content"][0]["text"], framing);
}
