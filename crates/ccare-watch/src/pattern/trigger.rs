//! OP-4: the two triggers over measured outputs.
//!
//! - `single-output` looks at one output: ANY threshold row holds.
//! - `window` looks at the measured samples among the last `windowOutputs` outputs (the
//!   current one included) and needs ALL of its conditions.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::config::{OutputPatternConfig, ThresholdRow};
use super::metrics::{Measurement, Metrics, UnavailableReason};

/// Which trigger fired (OP-4).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum TriggerKind {
    /// One output crossed a threshold row.
    SingleOutput,
    /// The recent outputs crossed the window thresholds together.
    Window,
}

/// What the `window` trigger remembers of one output (OP-5 `window[]`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(
    tag = "status",
    rename_all = "camelCase",
    rename_all_fields = "camelCase"
)]
pub enum WindowSample {
    /// A measured output.
    Measured {
        /// The output's event seq.
        seq: u64,
        /// N.
        statements: u32,
        /// K.
        hit_statements: u32,
        /// H.
        hits: u32,
        /// Families with a kept hit, sorted.
        families: Vec<String>,
    },
    /// An output that was not measured; it takes a place in the window but counts
    /// for nothing.
    Unavailable {
        /// The output's event seq.
        seq: u64,
        /// Which limit it exceeded.
        reason: UnavailableReason,
    },
}

/// Sums over the measured samples of a window, for the `window` trigger and the
/// feedback text.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct WindowTotals {
    /// ΣN.
    pub statements: u64,
    /// ΣK.
    pub hit_statements: u64,
    /// ΣH.
    pub hits: u64,
    /// Measured samples whose K reaches `minHitsPerOutput`.
    pub outputs_over_min_hits: u64,
    /// The most samples any one family has a hit in.
    pub max_family_outputs: u64,
}

impl WindowSample {
    /// The sample of output `seq` with the given measurement.
    pub fn new(seq: u64, measurement: &Measurement) -> Self {
        match measurement {
            Measurement::Measured(metrics) => WindowSample::Measured {
                seq,
                statements: metrics.statements,
                hit_statements: metrics.hit_statements,
                hits: metrics.hits,
                families: metrics.hit_families.clone(),
            },
            Measurement::Unavailable { reason } => WindowSample::Unavailable {
                seq,
                reason: *reason,
            },
        }
    }

    /// The output's event seq.
    pub fn seq(&self) -> u64 {
        match self {
            WindowSample::Measured { seq, .. } | WindowSample::Unavailable { seq, .. } => *seq,
        }
    }
}

/// The index of the first threshold row that holds for `metrics`, if any (OP-4
/// `single-output`).
pub fn single_output_row(config: &OutputPatternConfig, metrics: &Metrics) -> Option<usize> {
    config
        .thresholds
        .iter()
        .position(|row| row_holds(row, metrics))
}

/// Whether one threshold row holds: N, H, K, D (non-null) and J reach their minimums.
pub fn row_holds(row: &ThresholdRow, metrics: &Metrics) -> bool {
    metrics.statements >= row.min_statements
        && metrics.hits >= row.min_hits
        && metrics.hit_statements >= row.min_hit_statements
        && metrics
            .density
            .is_some_and(|density| density >= row.min_density)
        && metrics.max_family_statements >= row.min_family_statements
}

/// The sums over the measured samples among the last `windowOutputs` of `samples`.
pub fn window_totals(config: &OutputPatternConfig, samples: &[WindowSample]) -> WindowTotals {
    let mut totals = WindowTotals::default();
    let mut outputs_per_family: BTreeMap<&str, u64> = BTreeMap::new();
    for sample in recent(config, samples) {
        let WindowSample::Measured {
            statements,
            hit_statements,
            hits,
            families,
            ..
        } = sample
        else {
            continue;
        };
        totals.statements += u64::from(*statements);
        totals.hit_statements += u64::from(*hit_statements);
        totals.hits += u64::from(*hits);
        if *hit_statements >= config.window.min_hits_per_output {
            totals.outputs_over_min_hits += 1;
        }
        let mut families: Vec<&str> = families.iter().map(String::as_str).collect();
        families.sort_unstable();
        families.dedup();
        for family in families {
            *outputs_per_family.entry(family).or_default() += 1;
        }
    }
    totals.max_family_outputs = outputs_per_family.values().copied().max().unwrap_or(0);
    totals
}

/// Whether the `window` trigger holds (OP-4). `samples` ends with the current output;
/// only the last `windowOutputs` samples are looked at, and of those only the measured.
pub fn window_holds(config: &OutputPatternConfig, samples: &[WindowSample]) -> bool {
    let current_has_hits = matches!(
        samples.last(),
        Some(WindowSample::Measured { hit_statements, .. }) if *hit_statements > 0
    );
    if !current_has_hits {
        return false;
    }
    let window = &config.window;
    let totals = window_totals(config, samples);
    totals.outputs_over_min_hits >= u64::from(window.min_outputs)
        && totals.hits >= u64::from(window.min_hits)
        && totals.max_family_outputs >= u64::from(window.min_family_outputs)
        && totals.statements > 0
        && totals.hit_statements as f64 / totals.statements as f64 >= window.min_density
}

/// The trigger that fires for the current output, `single-output` first (OP-4).
/// `samples` is the window after the current output's sample was added.
pub fn evaluate_trigger(
    config: &OutputPatternConfig,
    current: &Measurement,
    samples: &[WindowSample],
) -> Option<TriggerKind> {
    let metrics = current.metrics()?;
    if single_output_row(config, metrics).is_some() {
        Some(TriggerKind::SingleOutput)
    } else if window_holds(config, samples) {
        Some(TriggerKind::Window)
    } else {
        None
    }
}

fn recent<'a>(config: &OutputPatternConfig, samples: &'a [WindowSample]) -> &'a [WindowSample] {
    let window_len = config.window_outputs as usize;
    &samples[samples.len().saturating_sub(window_len)..]
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;
    use crate::pattern::{fixture_1, measure};

    const AC_14_TEXT: &str = "我不能宣称、也不写成这样。\n我不会做、也不能宣称这样。\n我不写成这样。\n我不会做。\n证据已经查验。\n任务继续。\n正在测试。\n文件已保存。";
    const AC_16_LOW: &str = "我不会做。\n我不会做。\n已核对。\n已测试。\n已记录。\n继续执行。";

    fn metrics(text: &str) -> Metrics {
        measure(&fixture_1(), text).metrics().cloned().unwrap()
    }

    fn samples(texts: &[&str]) -> Vec<WindowSample> {
        texts
            .iter()
            .zip(1..)
            .map(|(text, seq)| WindowSample::new(seq, &measure(&fixture_1(), text)))
            .collect()
    }

    fn evaluate_last(texts: &[&str]) -> Option<TriggerKind> {
        let config = fixture_1();
        let current = measure(&config, texts.last().unwrap());
        evaluate_trigger(&config, &current, &samples(texts))
    }

    #[test]
    fn op_4_ac_14_single_output_rows() {
        let config = fixture_1();
        assert_eq!(single_output_row(&config, &metrics(AC_14_TEXT)), Some(0));
        let three = "我不会做第一项。\n我不会做第二项。\n我不会做第三项。";
        assert_eq!(single_output_row(&config, &metrics(three)), Some(1));
        assert_eq!(evaluate_last(&[three]), Some(TriggerKind::SingleOutput));
    }

    #[test]
    fn op_4_single_output_near_misses() {
        let config = fixture_1();
        // Row 1 needs H ≥ 4: three hits in five statements (K=3, D=.6, J=2) miss it, and
        // row 2 needs J ≥ 3.
        let three_hits = "我不会做。\n我不会做。\n我不写成。\n已核对。\n已记录。";
        let measured = metrics(three_hits);
        assert_eq!((measured.hits, measured.max_family_statements), (3, 2));
        assert_eq!(single_output_row(&config, &measured), None);
        // Row 2 needs N ≥ 3: two statements of one family miss it by one.
        assert_eq!(
            single_output_row(&config, &metrics("我不会做。\n我不会做。")),
            None
        );
        // Row 1's density: K=3 of N=9 is .33 < .35 (H=4, N ≥ 5 hold).
        let sparse =
            "我不会做，不写成。\n我不会做。\n我不写成。\n一。\n二。\n三。\n四。\n五。\n六。";
        let measured = metrics(sparse);
        assert_eq!(
            (measured.statements, measured.hits, measured.hit_statements),
            (9, 4, 3)
        );
        assert!(!row_holds(&config.thresholds[0], &measured));
        // D exactly at the minimum holds: K=7 of N=20 is .35.
        let mut at_density = measured.clone();
        (at_density.statements, at_density.hit_statements) = (20, 7);
        at_density.density = Some(7.0 / 20.0);
        assert!(row_holds(&config.thresholds[0], &at_density));
    }

    #[test]
    fn op_4_null_density_never_holds() {
        let mut config = fixture_1();
        config.thresholds = vec![ThresholdRow {
            min_statements: 0,
            min_hits: 0,
            min_hit_statements: 0,
            min_density: 0.0,
            min_family_statements: 0,
        }];
        assert_eq!(single_output_row(&config, &metrics("")), None);
        assert_eq!(single_output_row(&config, &metrics("好。")), Some(0));
    }

    #[test]
    fn op_4_ac_16_window_needs_three_low_outputs() {
        assert_eq!(single_output_row(&fixture_1(), &metrics(AC_16_LOW)), None);
        assert_eq!(evaluate_last(&[AC_16_LOW, AC_16_LOW]), None);
        assert_eq!(
            evaluate_last(&[AC_16_LOW, AC_16_LOW, AC_16_LOW]),
            Some(TriggerKind::Window)
        );
        let totals = window_totals(&fixture_1(), &samples(&[AC_16_LOW; 3]));
        assert_eq!(
            totals,
            WindowTotals {
                statements: 18,
                hit_statements: 6,
                hits: 6,
                outputs_over_min_hits: 3,
                max_family_outputs: 3,
            }
        );
    }

    #[test]
    fn op_4_ac_16_one_hit_in_twenty_statements_never_triggers() {
        let sparse = format!("我不能宣称通过。\n{}", "已核对具体证据。\n".repeat(19));
        assert_eq!(evaluate_last(&[&sparse]), None);
        assert_eq!(evaluate_last(&[&sparse, &sparse, &sparse]), None);
    }

    #[test]
    fn op_4_window_near_misses() {
        // The current output has no hit: K>0 now fails even with a hot window.
        assert_eq!(
            evaluate_last(&[AC_16_LOW, AC_16_LOW, AC_16_LOW, "好。"]),
            None
        );
        // Only the last windowOutputs (3) count: an old hot output drops out.
        assert_eq!(
            evaluate_last(&[AC_16_LOW, AC_16_LOW, "好。", AC_16_LOW]),
            None
        );
        // Unmeasured samples take a place but add nothing.
        let config = fixture_1();
        let mut window = samples(&[AC_16_LOW, AC_16_LOW]);
        window.insert(
            1,
            WindowSample::Unavailable {
                seq: 9,
                reason: UnavailableReason::MaxStatements,
            },
        );
        assert!(!window_holds(&config, &window));
        // Families spread over outputs: each family in only one output.
        let mixed = [
            "我不会做。\n我不会做。\n已核对。",
            "我不写成。\n我不写成。\n已核对。",
            "我不能宣称。\n我不能宣称。\n已核对。",
        ];
        assert_eq!(
            window_totals(&config, &samples(&mixed)).max_family_outputs,
            1
        );
        assert_eq!(evaluate_last(&mixed), None);
        // Density: the same hits diluted over more statements (6 of 30 = .2 < .25).
        let diluted = format!("{AC_16_LOW}\n{}", "已核对。\n".repeat(4));
        assert_eq!(evaluate_last(&[&diluted, &diluted, &diluted]), None);
        let mut loose = fixture_1();
        loose.window.min_density = 0.2;
        let diluted_samples = samples(&[&diluted, &diluted, &diluted]);
        assert!(window_holds(&loose, &diluted_samples));
    }

    #[test]
    fn op_4_window_counts_outputs_by_k_not_h() {
        // Two hits in one statement: H=2 but K=1 < minHitsPerOutput.
        let one_statement = "我不会做也不写成。\n已核对。";
        assert_eq!(
            evaluate_last(&[one_statement, one_statement, one_statement]),
            None
        );
    }

    #[test]
    fn op_5_window_sample_serializes_camel_case() {
        let sample = samples(&[AC_16_LOW]).remove(0);
        let json = serde_json::to_value(&sample).unwrap();
        assert_eq!(
            json,
            serde_json::json!({
                "status": "measured", "seq": 1, "statements": 6, "hitStatements": 2,
                "hits": 2, "families": ["action"]
            })
        );
        assert_eq!(
            serde_json::from_value::<WindowSample>(json).unwrap(),
            sample
        );
        assert_eq!(sample.seq(), 1);
    }
}
