//! OP-7: the acceptance fixture `fixture-1` (AC-14 .. AC-17), exactly as the spec lists
//! it.

use super::config::{Locale, OutputPatternConfig, PhraseConfig, ThresholdRow, WindowThresholds};

/// The detector `fixture-1` (OP-7): zh; limits 20000/200/10/10/30; phrases
/// `claim/claim 不能宣称`, `overlap/claim 宣称`, `action/action 不会做`,
/// `wording/wording 不写成`; meta prefixes `规则匹配`, `词表示例`; threshold rows
/// `{5,4,3,.35,0}` and `{3,3,3,0,3}`; window 3 outputs `{2,2,6,2,.25}`; cooldown 2,
/// rearm 2, maxDeliveries 2. Its `detectorVersion` (not given by the spec) is
/// `fixture-1`.
pub fn fixture_1() -> OutputPatternConfig {
    let phrase = |id: &str, family: &str, literal: &str| PhraseConfig {
        id: id.to_owned(),
        family: family.to_owned(),
        literal: literal.to_owned(),
    };
    OutputPatternConfig {
        detector_version: "fixture-1".to_owned(),
        locale: Locale::Zh,
        max_text_chars: 20_000,
        max_statements: 200,
        max_evidence: 10,
        max_phrases: 10,
        max_phrase_chars: 30,
        phrases: vec![
            phrase("claim", "claim", "不能宣称"),
            phrase("overlap", "claim", "宣称"),
            phrase("action", "action", "不会做"),
            phrase("wording", "wording", "不写成"),
        ],
        meta_prefixes: vec!["规则匹配".to_owned(), "词表示例".to_owned()],
        thresholds: vec![
            ThresholdRow {
                min_statements: 5,
                min_hits: 4,
                min_hit_statements: 3,
                min_density: 0.35,
                min_family_statements: 0,
            },
            ThresholdRow {
                min_statements: 3,
                min_hits: 3,
                min_hit_statements: 3,
                min_density: 0.0,
                min_family_statements: 3,
            },
        ],
        window_outputs: 3,
        window: WindowThresholds {
            min_outputs: 2,
            min_hits_per_output: 2,
            min_hits: 6,
            min_family_outputs: 2,
            min_density: 0.25,
        },
        cooldown_completed_outputs: 2,
        rearm_healthy_outputs: 2,
        max_deliveries: 2,
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    #[test]
    fn op_7_fixture_1_is_valid() {
        fixture_1().validate().unwrap();
    }
}
