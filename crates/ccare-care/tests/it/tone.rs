//! CC-GEN-2 and CC-GEN-3: every model-visible text exists in English and Chinese and
//! keeps the tone rules: levels only (no numbers, percentages or countdowns), no claim
//! of memory loss, degraded ability or hallucination, no urgency or alarm.

use ccare_care::texts::{
    EN, EN_GUIDANCE, EN_REST, GuidanceTexts, RestTexts, StatusTexts, ZH, ZH_GUIDANCE, ZH_REST,
};

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

const FORBIDDEN_EN: [&str; 14] = [
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
];
const FORBIDDEN_ZH: [&str; 10] = [
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
