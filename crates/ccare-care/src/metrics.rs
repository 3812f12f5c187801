//! Fatigue and wakefulness (CC-MET-1..5): two estimates, each a value in 0..100 with
//! one decimal plus a level, or `unknown` with no value.
//!
//! Fatigue follows the load of the next request against the budget share of the
//! capacity; wakefulness follows the retained history against the wakefulness share.
//! The model sees levels only (CC-MET-5); numbers live in metadata and the UI.

use serde::{Deserialize, Serialize};

use crate::config::CareConfig;

/// The inputs of one sample (CC-MET-4). The caller prices them; this module only does
/// the arithmetic.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct MetricInputs {
    /// `load`: `ceil(surface + tools + price(pending batch) + promptCost)` plus the
    /// notice about to be appended (CC-MET-4). Negative values count as 0.
    pub load_tokens: f64,
    /// `retained`: the priced surface nodes only, without tools, the system prompt,
    /// pending inputs or request-only segments (CC-MET-4). Negative values count as 0.
    pub retained_tokens: f64,
    /// `C`, e.g. [`crate::budget::Budget::capacity`]; `None`, non-finite or ≤ 0 means
    /// unknown (CC-MET-3).
    pub capacity_tokens: Option<f64>,
    /// Whether a provider/model has been routed yet; before that both metrics are
    /// unknown (CC-MET-3).
    pub route_known: bool,
}

/// One sample of both metrics, as the `contextCare` metadata and the UI record it
/// (CC-NTC-1, CC-NTC-6): `{fatigue, fatigueValue, wakefulness, wakefulnessValue}`.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ContextCareMetrics {
    /// The fatigue level, `unknown` when the value is null.
    pub fatigue: FatigueLevel,
    /// The rounded fatigue value in 0..100, or null (CC-MET-1, CC-MET-3).
    pub fatigue_value: Option<f64>,
    /// The wakefulness level, `unknown` when the value is null.
    pub wakefulness: WakefulnessLevel,
    /// The rounded wakefulness value in 0..100, or null (CC-MET-1, CC-MET-3).
    pub wakefulness_value: Option<f64>,
}

impl ContextCareMetrics {
    /// Both metrics unknown, values null (CC-MET-3).
    pub const UNKNOWN: Self = Self {
        fatigue: FatigueLevel::Unknown,
        fatigue_value: None,
        wakefulness: WakefulnessLevel::Unknown,
        wakefulness_value: None,
    };

    /// Samples both metrics (CC-MET-1..3).
    pub fn sample(config: &CareConfig, inputs: MetricInputs) -> Self {
        let Some(capacity) = known_capacity(inputs) else {
            return Self::UNKNOWN;
        };
        let fatigue_value = fatigue_value(config, inputs.load_tokens, capacity);
        let wakefulness_value = wakefulness_value(config, inputs.retained_tokens, capacity);
        Self {
            fatigue: fatigue_value.map_or(FatigueLevel::Unknown, |value| {
                FatigueLevel::from_index(level_index(value))
            }),
            fatigue_value,
            wakefulness: wakefulness_value.map_or(WakefulnessLevel::Unknown, |value| {
                WakefulnessLevel::from_index(level_index(value))
            }),
            wakefulness_value,
        }
    }
}

/// `fatigueValue = r(100·(max(0,load)/(C·budgetRatio))^fatigueExponent)` (CC-MET-1), for
/// a known capacity (finite and > 0). `None` for a NaN load (`f64::max` would hide it).
pub fn fatigue_value(config: &CareConfig, load_tokens: f64, capacity_tokens: f64) -> Option<f64> {
    if load_tokens.is_nan() {
        return None;
    }
    let share = load_tokens.max(0.0) / (capacity_tokens * config.budget_ratio);
    finite_rounded(100.0 * share.powf(config.fatigue_exponent))
}

/// `wakefulnessValue = r(100·sqrt(max(0,retained)/(C·wakefulnessRatio)))` (CC-MET-1), for
/// a known capacity. `None` for a NaN input.
pub fn wakefulness_value(
    config: &CareConfig,
    retained_tokens: f64,
    capacity_tokens: f64,
) -> Option<f64> {
    if retained_tokens.is_nan() {
        return None;
    }
    let share = retained_tokens.max(0.0) / (capacity_tokens * config.wakefulness_ratio);
    finite_rounded(100.0 * share.sqrt())
}

/// `r(v) = round_half_up(min(100, v)·10)/10` (CC-MET-1). For the non-negative values
/// the metrics produce, `f64::round` is exactly round-half-up of the product.
pub fn round_metric(value: f64) -> f64 {
    (value.min(100.0) * 10.0).round() / 10.0
}

/// The level index of a **rounded** value (CC-MET-2): `<30` → 0, `<60` → 1, `<85` → 2,
/// otherwise 3. Pass the output of [`round_metric`], never the raw value.
pub fn level_index(rounded_value: f64) -> u8 {
    if rounded_value < 30.0 {
        0
    } else if rounded_value < 60.0 {
        1
    } else if rounded_value < 85.0 {
        2
    } else {
        3
    }
}

/// A fatigue level (CC-MET-2), serialized as its id.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, schemars::JsonSchema)]
pub enum FatigueLevel {
    /// No capacity or route (CC-MET-3).
    #[serde(rename = "unknown")]
    Unknown,
    /// Level 0.
    #[serde(rename = "normal")]
    Normal,
    /// Level 1.
    #[serde(rename = "elevated")]
    Elevated,
    /// Level 2.
    #[serde(rename = "high")]
    High,
    /// Level 3.
    #[serde(rename = "very-high")]
    VeryHigh,
}

impl FatigueLevel {
    /// The level for an index 0..=3 (CC-MET-2); anything above 3 is very high.
    pub fn from_index(index: u8) -> Self {
        match index {
            0 => FatigueLevel::Normal,
            1 => FatigueLevel::Elevated,
            2 => FatigueLevel::High,
            _ => FatigueLevel::VeryHigh,
        }
    }

    /// The index 0..=3, or `None` for unknown.
    pub fn index(self) -> Option<u8> {
        match self {
            FatigueLevel::Unknown => None,
            FatigueLevel::Normal => Some(0),
            FatigueLevel::Elevated => Some(1),
            FatigueLevel::High => Some(2),
            FatigueLevel::VeryHigh => Some(3),
        }
    }

    /// The level id: `normal, elevated, high, very-high` or `unknown` (CC-MET-2).
    pub fn as_str(self) -> &'static str {
        match self {
            FatigueLevel::Unknown => "unknown",
            FatigueLevel::Normal => "normal",
            FatigueLevel::Elevated => "elevated",
            FatigueLevel::High => "high",
            FatigueLevel::VeryHigh => "very-high",
        }
    }

    /// The UI colour: green / blue / orange / red, grey when unknown (CC-MET-5).
    pub fn colour(self) -> Colour {
        match self {
            FatigueLevel::Unknown => Colour::Grey,
            FatigueLevel::Normal => Colour::Green,
            FatigueLevel::Elevated => Colour::Blue,
            FatigueLevel::High => Colour::Orange,
            FatigueLevel::VeryHigh => Colour::Red,
        }
    }
}

/// A wakefulness level (CC-MET-2), serialized as its id.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, schemars::JsonSchema)]
pub enum WakefulnessLevel {
    /// No capacity or route (CC-MET-3).
    #[serde(rename = "unknown")]
    Unknown,
    /// Level 0.
    #[serde(rename = "low")]
    Low,
    /// Level 1.
    #[serde(rename = "normal")]
    Normal,
    /// Level 2.
    #[serde(rename = "elevated")]
    Elevated,
    /// Level 3.
    #[serde(rename = "high")]
    High,
}

impl WakefulnessLevel {
    /// The level for an index 0..=3 (CC-MET-2); anything above 3 is high.
    pub fn from_index(index: u8) -> Self {
        match index {
            0 => WakefulnessLevel::Low,
            1 => WakefulnessLevel::Normal,
            2 => WakefulnessLevel::Elevated,
            _ => WakefulnessLevel::High,
        }
    }

    /// The index 0..=3, or `None` for unknown.
    pub fn index(self) -> Option<u8> {
        match self {
            WakefulnessLevel::Unknown => None,
            WakefulnessLevel::Low => Some(0),
            WakefulnessLevel::Normal => Some(1),
            WakefulnessLevel::Elevated => Some(2),
            WakefulnessLevel::High => Some(3),
        }
    }

    /// The level id: `low, normal, elevated, high` or `unknown` (CC-MET-2).
    pub fn as_str(self) -> &'static str {
        match self {
            WakefulnessLevel::Unknown => "unknown",
            WakefulnessLevel::Low => "low",
            WakefulnessLevel::Normal => "normal",
            WakefulnessLevel::Elevated => "elevated",
            WakefulnessLevel::High => "high",
        }
    }

    /// The UI colour: orange / blue / teal / green, grey when unknown (CC-MET-5).
    pub fn colour(self) -> Colour {
        match self {
            WakefulnessLevel::Unknown => Colour::Grey,
            WakefulnessLevel::Low => Colour::Orange,
            WakefulnessLevel::Normal => Colour::Blue,
            WakefulnessLevel::Elevated => Colour::Teal,
            WakefulnessLevel::High => Colour::Green,
        }
    }
}

/// A UI colour (CC-MET-5).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Colour {
    /// Fatigue 0, wakefulness 3.
    Green,
    /// Level 1 of both.
    Blue,
    /// Fatigue 2, wakefulness 0.
    Orange,
    /// Fatigue 3.
    Red,
    /// Wakefulness 2.
    Teal,
    /// Uncalibrated.
    Grey,
}

/// How the UI shows one metric (CC-MET-5).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct MetricDisplay {
    /// `35.4%`, `30%`: 0–100 with at most one decimal; `None` when uncalibrated.
    pub percent: Option<String>,
    /// The level id (`unknown` included); shown even when uncalibrated.
    pub level: &'static str,
    /// The level's colour, or grey when uncalibrated.
    pub colour: Colour,
    /// Grey "uncalibrated": C unknown, or the record has no usable number. A number is
    /// never derived from a level (CC-MET-5).
    pub uncalibrated: bool,
}

impl MetricDisplay {
    /// The fatigue display for a level and a recorded value. A value that is not finite
    /// or not within 0..100 counts as absent (CC-NTC-6).
    pub fn fatigue(level: FatigueLevel, value: Option<f64>) -> Self {
        Self::new(
            level.as_str(),
            level.index().is_none(),
            level.colour(),
            value,
        )
    }

    /// The wakefulness display for a level and a recorded value; as
    /// [`MetricDisplay::fatigue`].
    pub fn wakefulness(level: WakefulnessLevel, value: Option<f64>) -> Self {
        Self::new(
            level.as_str(),
            level.index().is_none(),
            level.colour(),
            value,
        )
    }

    fn new(level: &'static str, level_unknown: bool, colour: Colour, value: Option<f64>) -> Self {
        match value.and_then(recorded_metric_value) {
            Some(value) if !level_unknown => Self {
                percent: Some(format_percent(value)),
                level,
                colour,
                uncalibrated: false,
            },
            Some(_) | None => Self {
                percent: None,
                level,
                colour: Colour::Grey,
                uncalibrated: true,
            },
        }
    }
}

/// A recorded metric value as the projection accepts it: finite and within 0..100,
/// otherwise `None` (CC-NTC-6).
pub fn recorded_metric_value(value: f64) -> Option<f64> {
    (value.is_finite() && (0.0..=100.0).contains(&value)).then_some(value)
}

/// `35.4%`, `30%`, `100%`: one decimal at most, trailing `.0` dropped (CC-MET-5).
fn format_percent(value: f64) -> String {
    let tenths = (value * 10.0).round();
    if tenths % 10.0 == 0.0 {
        format!("{:.0}%", tenths / 10.0)
    } else {
        format!("{:.1}%", tenths / 10.0)
    }
}

fn known_capacity(inputs: MetricInputs) -> Option<f64> {
    if !inputs.route_known {
        return None;
    }
    inputs
        .capacity_tokens
        .filter(|capacity| capacity.is_finite() && *capacity > 0.0)
}

fn finite_rounded(raw_value: f64) -> Option<f64> {
    if raw_value.is_nan() {
        return None;
    }
    Some(round_metric(raw_value))
}
