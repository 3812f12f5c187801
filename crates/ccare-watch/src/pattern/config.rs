//! OP-1: the strict detector configuration and its validation.
//!
//! Every field is required and unknown fields are rejected, so a typo in a rule never
//! silently falls back to a default. [`OutputPatternConfig::validate`] checks what serde
//! cannot: limits, phrase counts, id uniqueness and literal lengths. Phrase literals are
//! plain, case-sensitive text; they are never compiled as regular expressions.

use std::collections::HashSet;

use serde::{Deserialize, Serialize};

use super::utf16_len;

/// The detector of one `output-pattern` rule (OP-1), as written in the rule's
/// `detector` field.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct OutputPatternConfig {
    /// Version of the detector definition; part of what identifies the rule's spec.
    pub detector_version: String,
    /// Locale of the feedback text (`en` or `zh`).
    pub locale: Locale,
    /// Texts longer than this (UTF-16 code units, GEN-1) are not measured
    /// (`unavailable`, reason `maxTextChars`).
    pub max_text_chars: u32,
    /// Outputs with more statements than this are not measured (`maxStatements`).
    pub max_statements: u32,
    /// At most this many hit statements are kept as evidence.
    pub max_evidence: u32,
    /// Upper bound on the number of phrases.
    pub max_phrases: u32,
    /// Upper bound on a phrase literal's length (UTF-16 code units).
    pub max_phrase_chars: u32,
    /// The literals to count; 1..=`maxPhrases` entries with unique ids.
    pub phrases: Vec<PhraseConfig>,
    /// Statements starting with one of these are quotes of the rule itself and are
    /// excluded from every count (e.g. "规则匹配…" talking about the word list).
    pub meta_prefixes: Vec<String>,
    /// `single-output` rows; the trigger fires when ANY row holds. At least one.
    pub thresholds: Vec<ThresholdRow>,
    /// How many recent outputs (measured or not) the `window` trigger looks at.
    pub window_outputs: u32,
    /// The `window` trigger's conditions; ALL must hold.
    pub window: WindowThresholds,
    /// After feedback is created, this many further completed outputs pass before
    /// another can be created.
    pub cooldown_completed_outputs: u32,
    /// This many consecutive healthy outputs without a hit clear the cooldown.
    pub rearm_healthy_outputs: u32,
    /// A pending feedback is offered at most this many times (a crash redelivers).
    pub max_deliveries: u32,
}

/// Locale of the model-visible feedback text (CC-GEN-2).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Locale {
    /// English.
    En,
    /// Chinese.
    Zh,
}

/// One counted phrase: a case-sensitive literal, never a regex.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct PhraseConfig {
    /// Unique id within the detector, reported in evidence.
    pub id: String,
    /// Family the phrase belongs to; F and J count families, not phrases.
    pub family: String,
    /// The literal text, 2..=`maxPhraseChars` UTF-16 code units.
    pub literal: String,
}

/// One `single-output` threshold row (OP-4). It holds when N, H, K, D (non-null) and J
/// all reach their minimums.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ThresholdRow {
    /// Minimum N (counted statements).
    pub min_statements: u32,
    /// Minimum H (kept hits).
    pub min_hits: u32,
    /// Minimum K (statements with at least one hit).
    pub min_hit_statements: u32,
    /// Minimum D = K/N, in `0..=1`.
    pub min_density: f64,
    /// Minimum J (the most hit statements of any one family).
    pub min_family_statements: u32,
}

/// The `window` trigger's conditions (OP-4), all over the measured samples among the
/// last `windowOutputs` outputs.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct WindowThresholds {
    /// Minimum number of outputs whose K reaches `minHitsPerOutput`.
    pub min_outputs: u32,
    /// Per-output K that makes an output count towards `minOutputs`.
    pub min_hits_per_output: u32,
    /// Minimum ΣH over the window.
    pub min_hits: u32,
    /// Minimum number of outputs in which one family has a hit (max over families).
    pub min_family_outputs: u32,
    /// Minimum ΣK/ΣN over the window, in `0..=1`.
    pub min_density: f64,
}

/// Why a detector configuration is invalid (OP-1). Each variant names the field, as a
/// path into the camelCase config (`phrases[2].literal`).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ConfigError {
    /// The JSON did not match the strict shape (missing or unknown field, wrong type).
    #[error("invalid output-pattern detector: {0}")]
    Shape(#[from] serde_json::Error),
    /// A limit that must be positive is zero.
    #[error("{field} must be positive")]
    NotPositive {
        /// The field's name.
        field: &'static str,
    },
    /// A text field that must say something is empty.
    #[error("{field} must not be empty")]
    Empty {
        /// Path to the field.
        field: String,
    },
    /// There are no phrases, or more than `maxPhrases`.
    #[error("phrases must have 1..={max_phrases} entries, found {count}")]
    PhraseCount {
        /// Number of phrases given.
        count: usize,
        /// The configured `maxPhrases`.
        max_phrases: u32,
    },
    /// Two phrases share an id.
    #[error("{field}: duplicate phrase id {id:?}")]
    DuplicatePhraseId {
        /// Path of the second occurrence.
        field: String,
        /// The repeated id.
        id: String,
    },
    /// A literal is shorter than 2 or longer than `maxPhraseChars` UTF-16 code units.
    #[error("{field} must be 2..={max_phrase_chars} chars long, found {length}")]
    LiteralLength {
        /// Path to the literal.
        field: String,
        /// Its length in UTF-16 code units.
        length: usize,
        /// The configured `maxPhraseChars`.
        max_phrase_chars: u32,
    },
    /// `thresholds` is empty.
    #[error("thresholds must have at least one row")]
    NoThresholds,
    /// A density minimum is not a finite number in `0..=1`.
    #[error("{field} must be a number in 0..=1, found {value}")]
    DensityOutOfRange {
        /// Path to the density.
        field: String,
        /// The value given.
        value: f64,
    },
}

impl OutputPatternConfig {
    /// Parses a `detector` JSON value strictly and validates it (OP-1).
    pub fn from_json(value: serde_json::Value) -> Result<Self, ConfigError> {
        let config: Self = serde_json::from_value(value)?;
        config.validate()?;
        Ok(config)
    }

    /// Checks the rules serde cannot express (OP-1); the first violation is returned.
    pub fn validate(&self) -> Result<(), ConfigError> {
        if self.detector_version.trim().is_empty() {
            return Err(ConfigError::Empty {
                field: "detectorVersion".to_owned(),
            });
        }
        let positive_limits = [
            ("maxTextChars", self.max_text_chars),
            ("maxStatements", self.max_statements),
            ("maxEvidence", self.max_evidence),
            ("maxPhrases", self.max_phrases),
            ("maxPhraseChars", self.max_phrase_chars),
            ("windowOutputs", self.window_outputs),
            ("maxDeliveries", self.max_deliveries),
        ];
        for (field, value) in positive_limits {
            if value == 0 {
                return Err(ConfigError::NotPositive { field });
            }
        }
        self.validate_phrases()?;
        for (prefix_idx, prefix) in self.meta_prefixes.iter().enumerate() {
            if prefix.is_empty() {
                return Err(ConfigError::Empty {
                    field: format!("metaPrefixes[{prefix_idx}]"),
                });
            }
        }
        if self.thresholds.is_empty() {
            return Err(ConfigError::NoThresholds);
        }
        for (row_idx, row) in self.thresholds.iter().enumerate() {
            check_density(
                || format!("thresholds[{row_idx}].minDensity"),
                row.min_density,
            )?;
        }
        check_density(|| "window.minDensity".to_owned(), self.window.min_density)?;
        Ok(())
    }

    /// A stable fingerprint of the whole configuration (FNV-1a 64 over its JSON), so an
    /// episode can tell that the rule's spec changed and must reset (OP-5).
    pub fn fingerprint(&self) -> String {
        let canonical = match serde_json::to_string(self) {
            Ok(json) => json,
            // Serializing this plain struct cannot fail; Debug is a deterministic
            // fallback that keeps the function total.
            Err(_) => format!("{self:?}"),
        };
        let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
        for byte in canonical.bytes() {
            hash ^= u64::from(byte);
            hash = hash.wrapping_mul(0x0000_0100_0000_01b3);
        }
        format!("{hash:016x}")
    }

    fn validate_phrases(&self) -> Result<(), ConfigError> {
        let count = self.phrases.len();
        if count == 0 || count > self.max_phrases as usize {
            return Err(ConfigError::PhraseCount {
                count,
                max_phrases: self.max_phrases,
            });
        }
        let mut seen_ids = HashSet::new();
        for (phrase_idx, phrase) in self.phrases.iter().enumerate() {
            if phrase.id.is_empty() {
                return Err(ConfigError::Empty {
                    field: format!("phrases[{phrase_idx}].id"),
                });
            }
            if phrase.family.is_empty() {
                return Err(ConfigError::Empty {
                    field: format!("phrases[{phrase_idx}].family"),
                });
            }
            if !seen_ids.insert(phrase.id.as_str()) {
                return Err(ConfigError::DuplicatePhraseId {
                    field: format!("phrases[{phrase_idx}].id"),
                    id: phrase.id.clone(),
                });
            }
            let length = utf16_len(&phrase.literal);
            if length < 2 || length > self.max_phrase_chars as usize {
                return Err(ConfigError::LiteralLength {
                    field: format!("phrases[{phrase_idx}].literal"),
                    length,
                    max_phrase_chars: self.max_phrase_chars,
                });
            }
        }
        Ok(())
    }
}

fn check_density(field: impl FnOnce() -> String, value: f64) -> Result<(), ConfigError> {
    if value.is_finite() && (0.0..=1.0).contains(&value) {
        Ok(())
    } else {
        Err(ConfigError::DensityOutOfRange {
            field: field(),
            value,
        })
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::pattern::fixture_1;

    /// One change to the fixture that makes it invalid.
    type Edit = fn(&mut OutputPatternConfig);

    fn fixture_json() -> serde_json::Value {
        serde_json::to_value(fixture_1()).unwrap()
    }

    fn error_for(edit: impl FnOnce(&mut OutputPatternConfig)) -> ConfigError {
        let mut config = fixture_1();
        edit(&mut config);
        config.validate().unwrap_err()
    }

    #[test]
    fn op_1_fixture_round_trips_through_strict_json() {
        let parsed = OutputPatternConfig::from_json(fixture_json()).unwrap();
        assert_eq!(parsed, fixture_1());
        let json = fixture_json();
        assert_eq!(json["maxTextChars"], json!(20000));
        assert_eq!(json["window"]["minHitsPerOutput"], json!(2));
        assert_eq!(json["phrases"][0]["literal"], json!("不能宣称"));
    }

    #[test]
    fn op_1_every_field_is_required() {
        let full = fixture_json();
        for key in full.as_object().unwrap().keys() {
            let mut partial = full.clone();
            partial.as_object_mut().unwrap().remove(key);
            let error = OutputPatternConfig::from_json(partial).unwrap_err();
            assert!(matches!(error, ConfigError::Shape(_)), "{key}: {error}");
            assert!(error.to_string().contains(key.as_str()), "{key}: {error}");
        }
        let mut no_family = full.clone();
        no_family["phrases"][0]
            .as_object_mut()
            .unwrap()
            .remove("family");
        assert!(matches!(
            OutputPatternConfig::from_json(no_family),
            Err(ConfigError::Shape(_))
        ));
        let mut no_window_density = full;
        no_window_density["window"]
            .as_object_mut()
            .unwrap()
            .remove("minDensity");
        assert!(matches!(
            OutputPatternConfig::from_json(no_window_density),
            Err(ConfigError::Shape(_))
        ));
    }

    #[test]
    fn op_1_unknown_fields_and_bad_types_are_rejected() {
        let mut extra = fixture_json();
        extra["regex"] = json!(true);
        let error = OutputPatternConfig::from_json(extra).unwrap_err();
        assert!(error.to_string().contains("regex"), "{error}");

        let mut nested_extra = fixture_json();
        nested_extra["thresholds"][0]["maxHits"] = json!(1);
        assert!(OutputPatternConfig::from_json(nested_extra).is_err());

        let mut bad_locale = fixture_json();
        bad_locale["locale"] = json!("fr");
        assert!(OutputPatternConfig::from_json(bad_locale).is_err());

        let mut negative = fixture_json();
        negative["maxStatements"] = json!(-1);
        assert!(OutputPatternConfig::from_json(negative).is_err());
    }

    #[test]
    fn op_1_limits_must_be_positive() {
        let cases: [(&str, Edit); 7] = [
            ("maxTextChars", |c| c.max_text_chars = 0),
            ("maxStatements", |c| c.max_statements = 0),
            ("maxEvidence", |c| c.max_evidence = 0),
            ("maxPhrases", |c| c.max_phrases = 0),
            ("maxPhraseChars", |c| c.max_phrase_chars = 0),
            ("windowOutputs", |c| c.window_outputs = 0),
            ("maxDeliveries", |c| c.max_deliveries = 0),
        ];
        for (expected, edit) in cases {
            match error_for(edit) {
                ConfigError::NotPositive { field } => assert_eq!(field, expected),
                other => panic!("{expected}: {other}"),
            }
        }
    }

    #[test]
    fn op_1_ac_17_more_phrases_than_max_phrases_is_invalid() {
        let error = error_for(|c| {
            c.max_phrases = 1;
            c.phrases.truncate(2);
        });
        assert!(matches!(
            error,
            ConfigError::PhraseCount {
                count: 2,
                max_phrases: 1
            }
        ));
        assert!(error.to_string().contains("phrases"));
    }

    #[test]
    fn op_1_phrases_may_not_be_empty() {
        let error = error_for(|c| c.phrases.clear());
        assert!(matches!(error, ConfigError::PhraseCount { count: 0, .. }));
    }

    #[test]
    fn op_1_phrase_ids_are_unique() {
        let error = error_for(|c| c.phrases[3].id = "claim".to_owned());
        match error {
            ConfigError::DuplicatePhraseId { field, id } => {
                assert_eq!(field, "phrases[3].id");
                assert_eq!(id, "claim");
            }
            other => panic!("{other}"),
        }
    }

    #[test]
    fn op_1_ids_families_and_meta_prefixes_are_not_empty() {
        let cases: [(&str, Edit); 4] = [
            ("phrases[1].id", |c| c.phrases[1].id.clear()),
            ("phrases[2].family", |c| c.phrases[2].family.clear()),
            ("metaPrefixes[1]", |c| c.meta_prefixes[1].clear()),
            ("detectorVersion", |c| c.detector_version = " ".to_owned()),
        ];
        for (expected, edit) in cases {
            match error_for(edit) {
                ConfigError::Empty { field } => assert_eq!(field, expected),
                other => panic!("{expected}: {other}"),
            }
        }
    }

    #[test]
    fn op_1_literal_length_is_2_to_max_phrase_chars_utf16_units() {
        match error_for(|c| c.phrases[1].literal = "宣".to_owned()) {
            ConfigError::LiteralLength { field, length, .. } => {
                assert_eq!(field, "phrases[1].literal");
                assert_eq!(length, 1);
            }
            other => panic!("{other}"),
        }
        let too_long = "字".repeat(31);
        let error = error_for(|c| c.phrases[0].literal = too_long);
        assert!(matches!(
            error,
            ConfigError::LiteralLength {
                length: 31,
                max_phrase_chars: 30,
                ..
            }
        ));
        // Exactly at the bounds is fine; a non-BMP char counts two units (GEN-1).
        let mut config = fixture_1();
        config.phrases[0].literal = "字".repeat(30);
        config.phrases[1].literal = "😀".to_owned();
        config.validate().unwrap();
    }

    #[test]
    fn op_1_at_least_one_threshold_row() {
        assert!(matches!(
            error_for(|c| c.thresholds.clear()),
            ConfigError::NoThresholds
        ));
    }

    #[test]
    fn op_1_densities_are_finite_and_within_0_to_1() {
        match error_for(|c| c.thresholds[1].min_density = 1.5) {
            ConfigError::DensityOutOfRange { field, .. } => {
                assert_eq!(field, "thresholds[1].minDensity");
            }
            other => panic!("{other}"),
        }
        match error_for(|c| c.window.min_density = f64::NAN) {
            ConfigError::DensityOutOfRange { field, .. } => {
                assert_eq!(field, "window.minDensity");
            }
            other => panic!("{other}"),
        }
        assert!(matches!(
            error_for(|c| c.thresholds[0].min_density = -0.1),
            ConfigError::DensityOutOfRange { .. }
        ));
    }

    #[test]
    fn op_5_fingerprint_changes_with_the_spec() {
        let base = fixture_1();
        assert_eq!(base.fingerprint(), fixture_1().fingerprint());
        let mut changed = fixture_1();
        changed.phrases[0].literal = "不能声称".to_owned();
        assert_ne!(base.fingerprint(), changed.fingerprint());
        assert_eq!(base.fingerprint().len(), 16);
    }
}
