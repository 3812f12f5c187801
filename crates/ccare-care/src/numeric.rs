//! The projection `contextCareNumeric` (CC-NTC-6, v1): the latest status notice of a
//! session, folded from its log, for a UI that has no live sample (after a restart, or
//! in another process). Levels are parsed from the notice's level line in either
//! locale; numbers come only from the notice's `contextCare` metadata, and only when
//! finite and within 0..=100 (never derived from a level, CC-MET-5).

use ccare_core::Event;
use ccare_session::Projection;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::boundary::STATE_SOURCE;
use crate::texts::{EN, StatusTexts, ZH};

/// The projection's key.
pub const NUMERIC_KEY: &str = "contextCareNumeric";

/// The folded state: the last status notice's levels and numbers.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct NumericState {
    /// The fatigue level id (`normal`, …, `unknown`), when a level line was found.
    pub fatigue: Option<String>,
    /// The fatigue value, or null.
    pub fatigue_value: Option<f64>,
    /// The wakefulness level id (`low`, …, `unknown`), when a level line was found.
    pub wakefulness: Option<String>,
    /// The wakefulness value, or null.
    pub wakefulness_value: Option<f64>,
    /// The seq of the notice it was read from.
    pub sampled_seq: Option<u64>,
}

/// The projection; register it with the host (`PluginScope::projection`).
#[derive(Debug, Clone, Copy, Default)]
pub struct NumericProjection;

const FATIGUE_IDS: [&str; 4] = ["normal", "elevated", "high", "very-high"];
const WAKEFULNESS_IDS: [&str; 4] = ["low", "normal", "elevated", "high"];

fn level_id(
    texts: &StatusTexts,
    grade: &str,
    grades: &[&str; 4],
    ids: [&'static str; 4],
) -> Option<&'static str> {
    if grade == texts.unknown {
        return Some("unknown");
    }
    grades
        .iter()
        .position(|candidate| *candidate == grade)
        .and_then(|index| ids.get(index).copied())
}

/// Parses a level line `<Fatigue>[:：] <grade>[;；] <wakefulness>[:：] <grade>[.。]` of
/// either locale into level ids.
pub fn parse_level_line(line: &str) -> Option<(&'static str, &'static str)> {
    for texts in [&EN, &ZH] {
        let Some(rest) = line.strip_prefix(texts.fatigue_label) else {
            continue;
        };
        let rest = rest.trim_start_matches([':', '：']).trim_start();
        let Some((fatigue, rest)) = rest.split_once([';', '；']) else {
            continue;
        };
        let rest = rest.trim_start();
        let Some(rest) = rest.strip_prefix(texts.wakefulness_label) else {
            continue;
        };
        let wakefulness = rest
            .trim_start_matches([':', '：'])
            .trim()
            .trim_end_matches(['.', '。']);
        let fatigue = level_id(texts, fatigue.trim(), &texts.fatigue_grades, FATIGUE_IDS)?;
        let wakefulness = level_id(
            texts,
            wakefulness,
            &texts.wakefulness_grades,
            WAKEFULNESS_IDS,
        )?;
        return Some((fatigue, wakefulness));
    }
    None
}

fn value(metadata: Option<&Value>, key: &str) -> Option<f64> {
    metadata?
        .get(key)?
        .as_f64()
        .filter(|value| value.is_finite() && (0.0..=100.0).contains(value))
}

impl Projection for NumericProjection {
    type State = NumericState;

    fn key(&self) -> &str {
        NUMERIC_KEY
    }

    fn version(&self) -> u32 {
        1
    }

    fn init(&self) -> NumericState {
        NumericState::default()
    }

    fn apply(&self, _state: &NumericState, event: &Event) -> Option<NumericState> {
        if event.kind() != ccare_core::kinds::USER_MESSAGE {
            return None;
        }
        let data: Value = serde_json::from_str(event.data_json()).ok()?;
        let message = data.get("message")?;
        let source = message.get("source")?;
        if source.get("kind").and_then(Value::as_str) != Some(STATE_SOURCE) {
            return None;
        }
        let levels = message
            .get("content")
            .and_then(Value::as_array)
            .and_then(|blocks| blocks.iter().find_map(|block| block.get("text")?.as_str()))
            .and_then(|text| text.lines().find_map(parse_level_line));
        let metadata = source.get("contextCare");
        Some(NumericState {
            fatigue: levels.map(|(fatigue, _)| fatigue.to_owned()),
            fatigue_value: value(metadata, "fatigueValue"),
            wakefulness: levels.map(|(_, wakefulness)| wakefulness.to_owned()),
            wakefulness_value: value(metadata, "wakefulnessValue"),
            sampled_seq: Some(event.seq()),
        })
    }
}
