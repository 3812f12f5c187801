//! Strict reading of a config table handed over as JSON (H-CFG-2): the one reader every
//! plugin's `[plugins.<name>]` table goes through, so each plugin's parser is a
//! `#[derive(Deserialize)]` struct plus the checks a type cannot say.
//!
//! [`from_value`] deserializes such a struct from a [`Value`] with rules stricter than
//! `serde_json::from_value`:
//! - a key the struct does not name is an error ([`Problem::UnknownKey`]), reported
//!   before any value of that table is checked;
//! - the values of a table are checked in the struct's declaration order, whatever the
//!   order of the keys in the input, so which error comes first does not depend on how
//!   the file was written;
//! - a present key is always checked: `null` is a value, not "unset". An `Option`
//!   field is `None` only when its key is absent (with `#[serde(default)]`);
//! - a table is an object, never an array read positionally;
//! - an enum is one of its variant names, as a string (unit variants only).
//!
//! Every error names the key path (`summary.max_tokens`, `route_budgets[0].purpose`)
//! and, for a bad value, what was expected and the value found, as JSON.
//!
//! The checks serde cannot express (ranges, non-blank strings, safe integers) are
//! `deserialize_with` functions built on [`check`]; the common ones are here
//! ([`ratio`], [`positive_integer`], ...). Untagged, internally tagged and flattened
//! types buffer their input inside serde, out of this reader's sight: they are not
//! for config tables.
//!
//! ```
//! use ccare_core::strict;
//! use serde::Deserialize;
//!
//! #[derive(Deserialize)]
//! #[serde(deny_unknown_fields)]
//! struct Table {
//!     #[serde(default, deserialize_with = "strict::positive_integer")]
//!     max_tokens: Option<u64>,
//! }
//!
//! let table: Table = strict::from_value(&serde_json::json!({"max_tokens": 5})).unwrap();
//! assert_eq!(table.max_tokens, Some(5));
//! let error = strict::from_value::<Table>(&serde_json::json!({"max_tokens": 0})).err().unwrap();
//! assert_eq!(error.to_string(), "max_tokens must be a positive integer, got 0");
//! let error = strict::from_value::<Table>(&serde_json::json!({"maxTokens": 5})).err().unwrap();
//! assert_eq!(error.to_string(), "unknown config maxTokens");
//! ```

mod reader;

use std::fmt;

use serde::Deserialize;
use serde::de::{self, Deserializer, SeqAccess, Unexpected, Visitor};
use serde_json::Value;

use crate::json::safe_integer;
use reader::ValueReader;

/// Why a config table was refused: where, and what is wrong.
///
/// Its `Display` is the house style, which the host prefixes with the plugin's name
/// (H-CFG-3): `unknown config summary.x`, `summary.max_tokens must be a positive
/// integer, got 0`, `the config must be a table, got []`. A plugin with texts of its
/// own renders [`StrictError::path`] and [`StrictError::problem`] itself.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StrictError {
    /// The key path from the table read, e.g. `route_budgets[0].purpose`; empty for
    /// the table itself.
    pub path: String,
    /// What is wrong there.
    pub problem: Problem,
}

/// What is wrong at a [`StrictError::path`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Problem {
    /// A key the table does not define.
    UnknownKey,
    /// A required key is absent.
    Missing,
    /// A key given twice, under two of its spellings (an alias).
    Duplicate,
    /// A value of the wrong type or outside its range.
    Invalid {
        /// What it must be, e.g. `a positive integer`, `a table`.
        expected: String,
        /// The value found, as JSON.
        found: String,
    },
    /// A check's own message, e.g. `is listed twice`.
    Other(String),
}

impl fmt::Display for StrictError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let path = &self.path;
        match &self.problem {
            Problem::UnknownKey => write!(f, "unknown config {path}"),
            Problem::Missing => write!(f, "{path} is required"),
            Problem::Duplicate => write!(f, "{path} is given twice"),
            Problem::Invalid { expected, found } if path.is_empty() => {
                write!(f, "the config must be {expected}, got {found}")
            }
            Problem::Invalid { expected, found } => {
                write!(f, "{path} must be {expected}, got {found}")
            }
            Problem::Other(message) if path.is_empty() => f.write_str(message),
            Problem::Other(message) => write!(f, "{path}: {message}"),
        }
    }
}

impl std::error::Error for StrictError {}

/// Reads `value` into `T` strictly (see the module docs).
pub fn from_value<'a, T: Deserialize<'a>>(value: &'a Value) -> Result<T, StrictError> {
    T::deserialize(ValueReader(value)).map_err(|error| error.finish(value))
}

/// The building block of a `deserialize_with` check: reads the value as it is, and
/// keeps it when `accept` maps it to `Some`; otherwise the error says `expected` and
/// the value found. For an optional key, wrap the result in `Some`.
pub fn check<'de, D, T>(
    deserializer: D,
    expected: &'static str,
    accept: impl FnOnce(&Value) -> Option<T>,
) -> Result<T, D::Error>
where
    D: Deserializer<'de>,
{
    let value = Value::deserialize(deserializer)?;
    accept(&value).ok_or_else(|| de::Error::invalid_value(Unexpected::Other("value"), &expected))
}

/// An optional number in the open interval (0, 1): `a number in (0, 1)`.
pub fn ratio<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Option<f64>, D::Error> {
    check(deserializer, "a number in (0, 1)", |value| {
        value.as_f64().filter(|ratio| *ratio > 0.0 && *ratio < 1.0)
    })
    .map(Some)
}

/// An optional finite number above zero: `a finite number > 0`.
pub fn positive_number<'de, D: Deserializer<'de>>(
    deserializer: D,
) -> Result<Option<f64>, D::Error> {
    check(deserializer, "a finite number > 0", |value| {
        value
            .as_f64()
            .filter(|number| number.is_finite() && *number > 0.0)
    })
    .map(Some)
}

/// An optional safe integer of at least 1 (H-LOG-2; `1024.0` counts): `a positive
/// integer`.
pub fn positive_integer<'de, D: Deserializer<'de>>(
    deserializer: D,
) -> Result<Option<u64>, D::Error> {
    check(deserializer, "a positive integer", |value| {
        safe_integer(value).filter(|integer| *integer >= 1)
    })
    .map(Some)
}

/// An optional safe integer of at least 0 (H-LOG-2; `1024.0` counts): `a non-negative
/// integer`.
pub fn non_negative_integer<'de, D: Deserializer<'de>>(
    deserializer: D,
) -> Result<Option<u64>, D::Error> {
    check(deserializer, "a non-negative integer", safe_integer).map(Some)
}

/// An optional boolean: `true or false`.
pub fn boolean<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Option<bool>, D::Error> {
    check(deserializer, "true or false", Value::as_bool).map(Some)
}

/// An optional string that is not empty or only white space: `a non-blank string`.
pub fn non_blank_string<'de, D: Deserializer<'de>>(
    deserializer: D,
) -> Result<Option<String>, D::Error> {
    check(deserializer, "a non-blank string", |value| {
        value
            .as_str()
            .filter(|text| !text.trim().is_empty())
            .map(str::to_owned)
    })
    .map(Some)
}

/// An optional array of tables (`[[plugins.<name>.list]]`): anything else is refused as
/// `an array of tables`; each element is read strictly as `T`.
pub fn tables<'de, D, T>(deserializer: D) -> Result<Option<Vec<T>>, D::Error>
where
    D: Deserializer<'de>,
    T: Deserialize<'de>,
{
    struct Tables<T>(std::marker::PhantomData<T>);

    impl<'de, T: Deserialize<'de>> Visitor<'de> for Tables<T> {
        type Value = Vec<T>;

        fn expecting(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
            formatter.write_str("an array of tables")
        }

        fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Vec<T>, A::Error> {
            let mut items = Vec::with_capacity(seq.size_hint().unwrap_or(0));
            while let Some(item) = seq.next_element()? {
                items.push(item);
            }
            Ok(items)
        }
    }

    deserializer
        .deserialize_seq(Tables(std::marker::PhantomData))
        .map(Some)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use serde_json::json;

    use super::reader::one_of;
    use super::*;

    #[derive(Debug, Deserialize, PartialEq)]
    #[serde(rename_all = "kebab-case")]
    enum Strategy {
        BasicPrefix,
        TargetPrefix,
    }

    #[derive(Debug, Deserialize, PartialEq)]
    #[serde(deny_unknown_fields)]
    struct Inner {
        #[serde(default, deserialize_with = "positive_integer")]
        max_tokens: Option<u64>,
        #[serde(default, deserialize_with = "non_blank_string")]
        model: Option<String>,
    }

    #[derive(Debug, Deserialize, PartialEq)]
    #[serde(deny_unknown_fields)]
    struct Outer {
        #[serde(default, deserialize_with = "ratio")]
        budget_ratio: Option<f64>,
        #[serde(default)]
        strategy: Option<Strategy>,
        #[serde(default)]
        summary: Option<Inner>,
        #[serde(default, deserialize_with = "tables")]
        routes: Option<Vec<Inner>>,
        #[serde(default)]
        names: Option<Vec<String>>,
        #[serde(default, alias = "quietStart", deserialize_with = "boolean")]
        quiet_start: Option<bool>,
    }

    #[derive(Debug, Deserialize)]
    #[serde(deny_unknown_fields)]
    struct Required {
        #[allow(dead_code)]
        id: String,
    }

    fn error(value: Value) -> String {
        from_value::<Outer>(&value).unwrap_err().to_string()
    }

    #[test]
    fn reads_a_table() {
        let outer: Outer = from_value(&json!({
            "budget_ratio": 0.5,
            "strategy": "target-prefix",
            "summary": {"max_tokens": 1024.0, "model": "m"},
            "routes": [{}],
            "names": ["a"],
            "quietStart": false,
        }))
        .unwrap();
        assert_eq!(
            outer,
            Outer {
                budget_ratio: Some(0.5),
                strategy: Some(Strategy::TargetPrefix),
                summary: Some(Inner {
                    max_tokens: Some(1024),
                    model: Some("m".to_owned()),
                }),
                routes: Some(vec![Inner {
                    max_tokens: None,
                    model: None,
                }]),
                names: Some(vec!["a".to_owned()]),
                quiet_start: Some(false),
            }
        );
        let empty: Outer = from_value(&json!({})).unwrap();
        assert_eq!(empty.summary, None);
    }

    #[test]
    fn unknown_keys_name_their_path_and_come_first() {
        assert_eq!(error(json!({"foo": 1})), "unknown config foo");
        assert_eq!(
            error(json!({"summary": {"maxTokens": 1}})),
            "unknown config summary.maxTokens"
        );
        assert_eq!(
            error(json!({"routes": [{}, {"x": 1}]})),
            "unknown config routes[1].x"
        );
        // Before any value of the same table is checked.
        assert_eq!(
            error(json!({"budget_ratio": 7, "foo": 1})),
            "unknown config foo"
        );
        // Values in declaration order, not input order.
        assert_eq!(
            error(json!({"summary": {"max_tokens": 0}, "budget_ratio": 7})),
            "budget_ratio must be a number in (0, 1), got 7"
        );
        assert_eq!(
            from_value::<Outer>(&json!({"foo": 1})).unwrap_err(),
            StrictError {
                path: "foo".to_owned(),
                problem: Problem::UnknownKey,
            }
        );
    }

    #[test]
    fn bad_values_name_the_path_the_expectation_and_the_value() {
        assert_eq!(
            error(json!({"budget_ratio": 1})),
            "budget_ratio must be a number in (0, 1), got 1"
        );
        assert_eq!(
            error(json!({"summary": {"max_tokens": 0}})),
            "summary.max_tokens must be a positive integer, got 0"
        );
        assert_eq!(
            error(json!({"summary": {"model": " "}})),
            "summary.model must be a non-blank string, got \" \""
        );
        assert_eq!(
            error(json!({"routes": [{"max_tokens": -5}]})),
            "routes[0].max_tokens must be a positive integer, got -5"
        );
        assert_eq!(
            error(json!({"quiet_start": "no"})),
            "quiet_start must be true or false, got \"no\""
        );
        assert_eq!(
            error(json!({"names": ["a", 3]})),
            "names[1] must be a string, got 3"
        );
        assert_eq!(
            from_value::<Outer>(&json!({"summary": {"max_tokens": 0}})).unwrap_err(),
            StrictError {
                path: "summary.max_tokens".to_owned(),
                problem: Problem::Invalid {
                    expected: "a positive integer".to_owned(),
                    found: "0".to_owned(),
                },
            }
        );
    }

    #[test]
    fn null_is_a_value_not_an_absence() {
        assert_eq!(
            error(json!({"budget_ratio": null})),
            "budget_ratio must be a number in (0, 1), got null"
        );
        assert_eq!(
            error(json!({"summary": null})),
            "summary must be a table, got null"
        );
        assert_eq!(
            error(json!({"strategy": null})),
            "strategy must be basic-prefix or target-prefix, got null"
        );
    }

    #[test]
    fn tables_and_arrays_keep_their_shapes() {
        assert_eq!(error(json!([])), "the config must be a table, got []");
        // A struct is never read from an array, field by position.
        assert_eq!(
            error(json!({"summary": [5, "m"]})),
            "summary must be a table, got [5,\"m\"]"
        );
        assert_eq!(
            error(json!({"routes": {}})),
            "routes must be an array of tables, got {}"
        );
        assert_eq!(
            error(json!({"routes": [1]})),
            "routes[0] must be a table, got 1"
        );
        assert_eq!(
            error(json!({"names": "a"})),
            "names must be an array, got \"a\""
        );
    }

    #[test]
    fn enums_are_their_variant_names() {
        assert_eq!(
            error(json!({"strategy": "largest"})),
            "strategy must be basic-prefix or target-prefix, got \"largest\""
        );
        assert_eq!(
            error(json!({"strategy": {"basic-prefix": 1}})),
            "strategy must be basic-prefix or target-prefix, got {\"basic-prefix\":1}"
        );
    }

    #[test]
    fn missing_and_repeated_keys() {
        assert_eq!(
            from_value::<Required>(&json!({})).unwrap_err(),
            StrictError {
                path: "id".to_owned(),
                problem: Problem::Missing,
            }
        );
        assert_eq!(
            from_value::<Vec<Required>>(&json!([{"id": "a"}, {}]))
                .unwrap_err()
                .to_string(),
            "[1].id is required"
        );
        assert_eq!(
            error(json!({"quiet_start": true, "quietStart": false})),
            "quiet_start is given twice"
        );
    }

    #[test]
    fn a_check_of_its_own() {
        fn even<'de, D: Deserializer<'de>>(deserializer: D) -> Result<u64, D::Error> {
            check(deserializer, "an even integer", |value| {
                value.as_u64().filter(|number| number % 2 == 0)
            })
        }
        fn listed<'de, D: Deserializer<'de>>(deserializer: D) -> Result<u64, D::Error> {
            Err(de::Error::custom(format!(
                "{} is listed twice",
                u64::deserialize(deserializer)?
            )))
        }
        #[derive(Debug, Deserialize)]
        struct Checked {
            #[serde(deserialize_with = "even")]
            #[allow(dead_code)]
            count: u64,
            #[serde(default, deserialize_with = "listed")]
            #[allow(dead_code)]
            other: u64,
        }
        assert_eq!(
            from_value::<Checked>(&json!({"count": 3}))
                .unwrap_err()
                .to_string(),
            "count must be an even integer, got 3"
        );
        assert_eq!(
            from_value::<Checked>(&json!({"count": 2, "other": 4}))
                .unwrap_err()
                .to_string(),
            "other: 4 is listed twice"
        );
    }

    #[test]
    fn one_of_reads_as_prose() {
        assert_eq!(one_of(&["a"]), "a");
        assert_eq!(one_of(&["a", "b"]), "a or b");
        assert_eq!(one_of(&["a", "b", "c"]), "a, b or c");
    }
}
