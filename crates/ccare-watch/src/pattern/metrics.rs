//! OP-3: measure one output against the detector's phrases.
//!
//! The output is split into statements (OP-2); statements starting with a meta prefix
//! are excluded. In each remaining statement every occurrence of every literal is a
//! candidate hit (overlapping occurrences included); candidates are taken longest first,
//! then leftmost first, and kept when they overlap no hit kept before. So `不能宣称`
//! wins over the `宣称` inside it.

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};

use super::config::OutputPatternConfig;
use super::statements::{Statement, extract_statements};
use super::utf16_len;

/// The result of measuring one output (OP-3).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "status", rename_all = "camelCase")]
pub enum Measurement {
    /// The output was measured.
    Measured(Metrics),
    /// The output was too large to measure; it never triggers and never counts as a
    /// hit-free output.
    Unavailable {
        /// Which limit was exceeded.
        reason: UnavailableReason,
    },
}

/// Why an output was not measured (OP-3).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum UnavailableReason {
    /// The text is longer than `maxTextChars` UTF-16 code units.
    MaxTextChars,
    /// The text has more than `maxStatements` statements (meta statements included).
    MaxStatements,
}

/// The counts of one measured output (OP-3).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Metrics {
    /// N: statements counted (meta statements excluded).
    pub statements: u32,
    /// K: counted statements with at least one kept hit.
    pub hit_statements: u32,
    /// H: kept hits.
    pub hits: u32,
    /// F: distinct families among the kept hits.
    pub families: u32,
    /// J: the most statements any one family has a hit in.
    pub max_family_statements: u32,
    /// D = K/N; `None` when N = 0.
    pub density: Option<f64>,
    /// Statements excluded because they start with a meta prefix.
    pub excluded_statements: u32,
    /// The families with at least one kept hit, sorted (used by the `window` trigger).
    pub hit_families: Vec<String>,
    /// The first `maxEvidence` hit statements, in document order.
    pub evidence: Vec<Evidence>,
}

/// One hit statement kept as evidence.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Evidence {
    /// The statement's visible text (blanked spans are spaces).
    pub text: String,
    /// Start of the statement in the output, UTF-16 code units.
    pub start: usize,
    /// End (exclusive) of the statement in the output, UTF-16 code units.
    pub end: usize,
    /// The kept hits in the statement, by start.
    pub hits: Vec<Hit>,
}

/// One kept literal occurrence.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Hit {
    /// The phrase's id.
    pub phrase_id: String,
    /// The phrase's family.
    pub family: String,
    /// Start in the output, UTF-16 code units.
    pub start: usize,
    /// End (exclusive) in the output, UTF-16 code units.
    pub end: usize,
}

impl Measurement {
    /// The metrics when the output was measured.
    pub fn metrics(&self) -> Option<&Metrics> {
        match self {
            Measurement::Measured(metrics) => Some(metrics),
            Measurement::Unavailable { .. } => None,
        }
    }
}

/// Measures one output's text (OP-3). Never fails: an output over a limit is
/// [`Measurement::Unavailable`]. Assumes a validated config; an invalid one gives
/// meaningless counts but no panic.
pub fn measure(config: &OutputPatternConfig, text: &str) -> Measurement {
    if utf16_len(text) > config.max_text_chars as usize {
        return Measurement::Unavailable {
            reason: UnavailableReason::MaxTextChars,
        };
    }
    let statements = extract_statements(text);
    if statements.len() > config.max_statements as usize {
        return Measurement::Unavailable {
            reason: UnavailableReason::MaxStatements,
        };
    }

    let mut n_statements: usize = 0;
    let mut n_excluded: usize = 0;
    let mut n_hit_statements: usize = 0;
    let mut n_hits: usize = 0;
    let mut statements_per_family: BTreeMap<&str, usize> = BTreeMap::new();
    let mut evidence = Vec::new();
    for statement in &statements {
        let is_meta = config
            .meta_prefixes
            .iter()
            .any(|prefix| !prefix.is_empty() && statement.text.starts_with(prefix.as_str()));
        if is_meta {
            n_excluded += 1;
            continue;
        }
        n_statements += 1;
        let kept_hits = kept_hits(config, &statement.text);
        if kept_hits.is_empty() {
            continue;
        }
        n_hit_statements += 1;
        n_hits += kept_hits.len();
        let families: BTreeSet<&str> = kept_hits
            .iter()
            .map(|hit| config.phrases[hit.phrase_idx].family.as_str())
            .collect();
        for family in families {
            *statements_per_family.entry(family).or_default() += 1;
        }
        if evidence.len() < config.max_evidence as usize {
            evidence.push(evidence_for(config, statement, &kept_hits));
        }
    }

    let density = (n_statements > 0).then(|| n_hit_statements as f64 / n_statements as f64);
    Measurement::Measured(Metrics {
        statements: saturating_u32(n_statements),
        hit_statements: saturating_u32(n_hit_statements),
        hits: saturating_u32(n_hits),
        families: saturating_u32(statements_per_family.len()),
        max_family_statements: saturating_u32(
            statements_per_family.values().copied().max().unwrap_or(0),
        ),
        density,
        excluded_statements: saturating_u32(n_excluded),
        hit_families: statements_per_family
            .keys()
            .map(|&family| family.to_owned())
            .collect(),
        evidence,
    })
}

/// A kept hit inside one statement's text, in bytes of that text.
#[derive(Debug, Clone, Copy)]
struct StatementHit {
    byte_start: usize,
    byte_end: usize,
    phrase_idx: usize,
}

/// All literal occurrences in `text`, kept greedily longest-then-leftmost without
/// overlap, returned by start.
fn kept_hits(config: &OutputPatternConfig, text: &str) -> Vec<StatementHit> {
    let mut candidates: Vec<(usize, StatementHit)> = Vec::new();
    for (phrase_idx, phrase) in config.phrases.iter().enumerate() {
        let literal = phrase.literal.as_str();
        let Some(first_char) = literal.chars().next() else {
            continue;
        };
        let literal_units = utf16_len(literal);
        let mut search_from = 0;
        while let Some(found_at) = text.get(search_from..).and_then(|rest| rest.find(literal)) {
            let byte_start = search_from + found_at;
            candidates.push((
                literal_units,
                StatementHit {
                    byte_start,
                    byte_end: byte_start + literal.len(),
                    phrase_idx,
                },
            ));
            // Occurrences may overlap themselves: resume one char later.
            search_from = byte_start + first_char.len_utf8();
        }
    }
    candidates.sort_by(|(units_a, hit_a), (units_b, hit_b)| {
        units_b
            .cmp(units_a)
            .then(hit_a.byte_start.cmp(&hit_b.byte_start))
            .then(hit_a.phrase_idx.cmp(&hit_b.phrase_idx))
    });
    let mut occupied = vec![false; text.len()];
    let mut kept = Vec::new();
    for (_, hit) in candidates {
        let Some(span) = occupied.get_mut(hit.byte_start..hit.byte_end) else {
            continue;
        };
        if span.iter().any(|&taken| taken) {
            continue;
        }
        span.fill(true);
        kept.push(hit);
    }
    kept.sort_by_key(|hit| hit.byte_start);
    kept
}

fn evidence_for(
    config: &OutputPatternConfig,
    statement: &Statement,
    kept_hits: &[StatementHit],
) -> Evidence {
    let offset_of =
        |byte_idx: usize| statement.start + statement.text.get(..byte_idx).map_or(0, utf16_len);
    let hits = kept_hits
        .iter()
        .map(|hit| {
            let phrase = &config.phrases[hit.phrase_idx];
            Hit {
                phrase_id: phrase.id.clone(),
                family: phrase.family.clone(),
                start: offset_of(hit.byte_start),
                end: offset_of(hit.byte_end),
            }
        })
        .collect();
    Evidence {
        text: statement.text.clone(),
        start: statement.start,
        end: statement.end,
        hits,
    }
}

fn saturating_u32(count: usize) -> u32 {
    u32::try_from(count).unwrap_or(u32::MAX)
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use proptest::prelude::*;

    use super::*;
    use crate::pattern::config::PhraseConfig;
    use crate::pattern::fixture_1;

    /// `(N, K, H, F, J, D)` of a measured output.
    fn counts(text: &str) -> (u32, u32, u32, u32, u32, Option<f64>) {
        let measurement = measure(&fixture_1(), text);
        let metrics = measurement.metrics().expect("measured");
        (
            metrics.statements,
            metrics.hit_statements,
            metrics.hits,
            metrics.families,
            metrics.max_family_statements,
            metrics.density,
        )
    }

    const AC_14_TEXT: &str = "我不能宣称、也不写成这样。\n我不会做、也不能宣称这样。\n我不写成这样。\n我不会做。\n证据已经查验。\n任务继续。\n正在测试。\n文件已保存。";

    #[test]
    fn op_3_ac_14_counts() {
        assert_eq!(counts(AC_14_TEXT), (8, 4, 6, 3, 2, Some(0.5)));
        let metrics = measure(&fixture_1(), AC_14_TEXT);
        let metrics = metrics.metrics().unwrap();
        assert_eq!(metrics.hit_families, ["action", "claim", "wording"]);
        assert_eq!(metrics.excluded_statements, 0);
    }

    #[test]
    fn op_3_hits_are_kept_greedily_longest_first() {
        let metrics = measure(&fixture_1(), "我不能宣称，只是宣称。");
        let metrics = metrics.metrics().unwrap();
        assert_eq!(metrics.hits, 2);
        assert_eq!(metrics.max_family_statements, 1);
        let hits: Vec<(&str, usize, usize)> = metrics.evidence[0]
            .hits
            .iter()
            .map(|hit| (hit.phrase_id.as_str(), hit.start, hit.end))
            .collect();
        // `宣称` inside `不能宣称` (3..5) loses to the longer literal; the one at 8 stays.
        assert_eq!(hits, [("claim", 1, 5), ("overlap", 8, 10)]);
    }

    #[test]
    fn op_3_equal_lengths_prefer_the_leftmost_and_self_overlaps_count_once() {
        let mut config = fixture_1();
        config.phrases = vec![
            PhraseConfig {
                id: "ab".to_owned(),
                family: "x".to_owned(),
                literal: "ab".to_owned(),
            },
            PhraseConfig {
                id: "bc".to_owned(),
                family: "y".to_owned(),
                literal: "bc".to_owned(),
            },
            PhraseConfig {
                id: "aa".to_owned(),
                family: "z".to_owned(),
                literal: "aa".to_owned(),
            },
        ];
        let measured = measure(&config, "abc aaa");
        let metrics = measured.metrics().unwrap();
        let hits: Vec<(&str, usize, usize)> = metrics.evidence[0]
            .hits
            .iter()
            .map(|hit| (hit.phrase_id.as_str(), hit.start, hit.end))
            .collect();
        assert_eq!(hits, [("ab", 0, 2), ("aa", 4, 6)]);
        assert_eq!((metrics.hits, metrics.families), (2, 2));
    }

    #[test]
    fn op_3_literals_are_case_sensitive_and_not_regex() {
        let mut config = fixture_1();
        config.phrases[0].literal = "Done.".to_owned();
        config.phrases[1].literal = "a+".to_owned();
        let measured = measure(&config, "done. Done! Done. aaa a+");
        let metrics = measured.metrics().unwrap();
        let ids: Vec<&str> = metrics
            .evidence
            .iter()
            .flat_map(|e| &e.hits)
            .map(|h| h.phrase_id.as_str())
            .collect();
        assert_eq!(ids, ["claim", "overlap"]);
    }

    #[test]
    fn op_3_ac_15_meta_statements_are_excluded() {
        let text = "> 我不能宣称。\n\n~~~js\n我不会做。\n~~~\n\n    我不写成。\n\n`我不能宣称`\n\n规则匹配“不会做”和“不写成”。\n\n我“不会做”任何未经授权的修改。";
        let measured = measure(&fixture_1(), text);
        let metrics = measured.metrics().unwrap();
        assert_eq!(counts(text), (1, 1, 1, 1, 1, Some(1.0)));
        assert_eq!(metrics.excluded_statements, 1);
        let evidence = &metrics.evidence[0];
        assert_eq!(evidence.text, "我“不会做”任何未经授权的修改。");
        let hit = &evidence.hits[0];
        let units: Vec<u16> = text.encode_utf16().collect();
        assert_eq!(
            String::from_utf16(&units[hit.start..hit.end]).unwrap(),
            "不会做"
        );
    }

    #[test]
    fn op_3_ac_15_no_statements_gives_null_density() {
        assert_eq!(counts("~~~\n我不会做\n~~~"), (0, 0, 0, 0, 0, None));
        assert_eq!(counts(""), (0, 0, 0, 0, 0, None));
    }

    #[test]
    fn op_3_ac_17_unavailable_over_the_limits() {
        let config = fixture_1();
        assert_eq!(
            measure(&config, &"x".repeat(20001)),
            Measurement::Unavailable {
                reason: UnavailableReason::MaxTextChars
            }
        );
        assert!(measure(&config, &"x".repeat(20000)).metrics().is_some());
        assert_eq!(
            measure(&config, &"继续。\n".repeat(201)),
            Measurement::Unavailable {
                reason: UnavailableReason::MaxStatements
            }
        );
        assert_eq!(counts(&"继续。\n".repeat(200)).0, 200);
    }

    #[test]
    fn op_3_text_length_is_counted_in_utf16_units() {
        let mut config = fixture_1();
        config.max_text_chars = 4;
        // Two non-BMP chars are four units: at the limit.
        assert!(measure(&config, "😀😀").metrics().is_some());
        assert_eq!(
            measure(&config, "😀😀a"),
            Measurement::Unavailable {
                reason: UnavailableReason::MaxTextChars
            }
        );
    }

    #[test]
    fn op_3_meta_statements_count_towards_max_statements() {
        let mut config = fixture_1();
        config.max_statements = 2;
        let measured = measure(&config, "规则匹配一。\n规则匹配二。\n正文。");
        assert_eq!(
            measured,
            Measurement::Unavailable {
                reason: UnavailableReason::MaxStatements
            }
        );
    }

    #[test]
    fn op_3_evidence_is_bounded_by_max_evidence() {
        let mut config = fixture_1();
        config.max_evidence = 2;
        let measured = measure(&config, &"我不会做。\n".repeat(5));
        let metrics = measured.metrics().unwrap();
        assert_eq!(metrics.hit_statements, 5);
        assert_eq!(metrics.evidence.len(), 2);
        assert_eq!(
            (metrics.evidence[1].start, metrics.evidence[1].end),
            (6, 11)
        );
    }

    #[test]
    fn op_3_measurement_serializes_with_a_status_tag() {
        let unavailable = serde_json::to_value(measure(&fixture_1(), &"x".repeat(20001))).unwrap();
        assert_eq!(
            unavailable,
            serde_json::json!({"status": "unavailable", "reason": "maxTextChars"})
        );
        let measured = serde_json::to_value(measure(&fixture_1(), "我不会做。")).unwrap();
        assert_eq!(measured["status"], "measured");
        assert_eq!(measured["hitStatements"], 1);
        assert_eq!(measured["density"], 1.0);
        let back: Measurement = serde_json::from_value(measured).unwrap();
        assert_eq!(back, measure(&fixture_1(), "我不会做。"));
    }

    proptest! {
        #[test]
        fn op_3_metrics_never_panic(text in any::<String>()) {
            let measured = measure(&fixture_1(), &text);
            if let Some(metrics) = measured.metrics() {
                prop_assert!(metrics.hit_statements <= metrics.statements);
                prop_assert!(metrics.hits >= metrics.hit_statements);
                prop_assert!(metrics.max_family_statements <= metrics.hit_statements);
                prop_assert!(metrics.evidence.len() <= 10);
            }
        }

        #[test]
        fn op_3_metrics_on_phrase_soup_are_consistent(
            parts in proptest::collection::vec(
                prop_oneof![
                    Just("不能宣称"), Just("宣称"), Just("不会做"), Just("不写成"), Just("。"),
                    Just("\n"), Just("规则匹配"), Just("`"), Just("> "), Just("😀"), Just("不"),
                ],
                0..60,
            )
        ) {
            let text = parts.concat();
            let measured = measure(&fixture_1(), &text);
            let metrics = measured.metrics().unwrap();
            prop_assert!(metrics.hit_statements <= metrics.statements);
            prop_assert!(metrics.families as usize == metrics.hit_families.len());
            let units: Vec<u16> = text.encode_utf16().collect();
            for evidence in &metrics.evidence {
                for hit in &evidence.hits {
                    let literal = String::from_utf16(&units[hit.start..hit.end]).unwrap();
                    let phrase = fixture_1().phrases.into_iter().find(|p| p.id == hit.phrase_id).unwrap();
                    prop_assert_eq!(literal, phrase.literal);
                }
            }
        }
    }
}
