//! Lossless JSON: the rules every logged `data` object obeys (spec H-LOG-2).
//!
//! A value is *lossless* when every number is finite, never `-0`, and every integer lies
//! within ±(2^53−1), so that any JSON reader (JavaScript included) reads back exactly what
//! was written. Strings are valid Unicode by construction (`serde_json` refuses escaped
//! lone surrogates). Key order is preserved by `serde_json`'s `preserve_order` feature.
//!
//! Two entry points: [`check_value`] for values built in Rust, and [`check_text`] for
//! JSON text read from a file or a store row, which walks the text without building a
//! tree (it runs on every event of a session being opened).

use std::borrow::Cow;
use std::cell::RefCell;
use std::fmt;

use serde::de::{self, DeserializeSeed, Deserializer, MapAccess, SeqAccess, Visitor};
use serde_json::Value;

/// A JSON object with its key order preserved.
pub type JsonObject = serde_json::Map<String, Value>;

/// The largest integer every JSON reader represents exactly (2^53 − 1).
pub const MAX_SAFE_INTEGER: u64 = (1 << 53) - 1;

/// A JSON number that is an integer in 0 ..= 2^53-1, as a config count or interval
/// must be. An integral float such as `60000.0` counts, as it does for JavaScript's
/// `Number.isSafeInteger`; a negative, fractional, oversized or non-number value is
/// `None`, so the caller reports it with the value found.
pub fn safe_integer(value: &Value) -> Option<u64> {
    let Value::Number(number) = value else {
        return None;
    };
    if let Some(integer) = number.as_u64() {
        return (integer <= MAX_SAFE_INTEGER).then_some(integer);
    }
    if number.is_i64() {
        return None;
    }
    let float = number.as_f64()?;
    let integral = float.is_finite() && float.fract() == 0.0 && float >= 0.0;
    // Exact for every integral float up to 2^53; larger ones saturate and are refused.
    let integer = float as u64;
    (integral && integer <= MAX_SAFE_INTEGER).then_some(integer)
}

/// Why a value is not lossless, and where (spec code `NON_LOSSLESS_JSON`).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("non-lossless JSON at '{pointer}': {reason}")]
pub struct NonLosslessJson {
    /// JSON pointer (RFC 6901) to the offending value, relative to the checked value.
    pub pointer: String,
    /// What is wrong with it.
    pub reason: LosslessViolation,
}

/// The kinds of value H-LOG-2 forbids.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LosslessViolation {
    /// A number that is NaN or infinite (or too large to be a finite double).
    #[error("number is not finite")]
    NonFinite,
    /// Negative zero, which most readers silently turn into `0`.
    #[error("number is negative zero")]
    NegativeZero,
    /// An integer outside ±(2^53−1).
    #[error("integer {0} is outside ±(2^53-1)")]
    UnsafeInteger(String),
    /// The text is not JSON at all.
    #[error("malformed JSON: {0}")]
    Malformed(String),
}

impl NonLosslessJson {
    /// The spec's error code.
    pub fn code(&self) -> &'static str {
        "NON_LOSSLESS_JSON"
    }

    /// The same violation, seen from a containing value under `prefix` (a JSON pointer).
    pub fn under(mut self, prefix: &str) -> Self {
        self.pointer = format!("{prefix}{}", self.pointer);
        self
    }
}

/// Checks a value built in memory.
pub fn check_value(value: &Value) -> Result<(), NonLosslessJson> {
    let mut path = Vec::new();
    check_value_at(value, &mut path).map_err(|reason| NonLosslessJson {
        pointer: render_pointer(&path),
        reason,
    })
}

fn check_value_at<'v>(
    value: &'v Value,
    path: &mut Vec<Segment<'v>>,
) -> Result<(), LosslessViolation> {
    match value {
        Value::Null | Value::Bool(_) | Value::String(_) => Ok(()),
        Value::Number(number) => check_number(number),
        Value::Array(items) => {
            for (index, item) in items.iter().enumerate() {
                path.push(Segment::Index(index));
                check_value_at(item, path)?;
                path.pop();
            }
            Ok(())
        }
        Value::Object(map) => {
            for (key, item) in map {
                path.push(Segment::Key(Cow::Borrowed(key.as_str())));
                check_value_at(item, path)?;
                path.pop();
            }
            Ok(())
        }
    }
}

fn check_number(number: &serde_json::Number) -> Result<(), LosslessViolation> {
    if let Some(unsigned) = number.as_u64() {
        return check_u64(unsigned);
    }
    if let Some(signed) = number.as_i64() {
        return check_i64(signed);
    }
    match number.as_f64() {
        Some(float) => check_f64(float),
        None => Err(LosslessViolation::NonFinite),
    }
}

fn check_u64(value: u64) -> Result<(), LosslessViolation> {
    if value > MAX_SAFE_INTEGER {
        return Err(LosslessViolation::UnsafeInteger(value.to_string()));
    }
    Ok(())
}

fn check_i64(value: i64) -> Result<(), LosslessViolation> {
    if value.unsigned_abs() > MAX_SAFE_INTEGER {
        return Err(LosslessViolation::UnsafeInteger(value.to_string()));
    }
    Ok(())
}

fn check_f64(value: f64) -> Result<(), LosslessViolation> {
    if !value.is_finite() {
        return Err(LosslessViolation::NonFinite);
    }
    if value == 0.0 && value.is_sign_negative() {
        return Err(LosslessViolation::NegativeZero);
    }
    Ok(())
}

/// Checks JSON text without building a tree. Malformed text is reported as
/// [`LosslessViolation::Malformed`] at the pointer reached when parsing stopped.
pub fn check_text(text: &str) -> Result<(), NonLosslessJson> {
    let context = WalkContext::default();
    let mut deserializer = serde_json::Deserializer::from_str(text);
    let walked = CheckSeed { context: &context }
        .deserialize(&mut deserializer)
        .and_then(|()| deserializer.end());
    match walked {
        Ok(()) => Ok(()),
        Err(error) => {
            let violation = context.violation.borrow_mut().take();
            let path = context.path.borrow();
            Err(NonLosslessJson {
                pointer: render_pointer(&path),
                reason: violation
                    .unwrap_or_else(|| LosslessViolation::Malformed(error.to_string())),
            })
        }
    }
}

enum Segment<'a> {
    Key(Cow<'a, str>),
    Index(usize),
}

fn render_pointer(path: &[Segment<'_>]) -> String {
    let mut pointer = String::new();
    for segment in path {
        pointer.push('/');
        match segment {
            Segment::Key(key) => {
                for character in key.chars() {
                    match character {
                        '~' => pointer.push_str("~0"),
                        '/' => pointer.push_str("~1"),
                        other => pointer.push(other),
                    }
                }
            }
            Segment::Index(index) => pointer.push_str(&index.to_string()),
        }
    }
    pointer
}

#[derive(Default)]
struct WalkContext<'de> {
    path: RefCell<Vec<Segment<'de>>>,
    violation: RefCell<Option<LosslessViolation>>,
}

impl WalkContext<'_> {
    fn fail<E: de::Error>(&self, violation: LosslessViolation) -> E {
        let message = violation.to_string();
        *self.violation.borrow_mut() = Some(violation);
        E::custom(message)
    }
}

struct CheckSeed<'c, 'de> {
    context: &'c WalkContext<'de>,
}

impl<'de> DeserializeSeed<'de> for CheckSeed<'_, 'de> {
    type Value = ();

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<(), D::Error> {
        deserializer.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for CheckSeed<'_, 'de> {
    type Value = ();

    fn expecting(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        formatter.write_str("any JSON value")
    }

    fn visit_bool<E: de::Error>(self, _: bool) -> Result<(), E> {
        Ok(())
    }

    fn visit_i64<E: de::Error>(self, value: i64) -> Result<(), E> {
        check_i64(value).map_err(|violation| self.context.fail(violation))
    }

    fn visit_u64<E: de::Error>(self, value: u64) -> Result<(), E> {
        check_u64(value).map_err(|violation| self.context.fail(violation))
    }

    fn visit_f64<E: de::Error>(self, value: f64) -> Result<(), E> {
        check_f64(value).map_err(|violation| self.context.fail(violation))
    }

    fn visit_str<E: de::Error>(self, _: &str) -> Result<(), E> {
        Ok(())
    }

    fn visit_unit<E: de::Error>(self) -> Result<(), E> {
        Ok(())
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        let mut index = 0;
        loop {
            self.context.path.borrow_mut().push(Segment::Index(index));
            let item = seq.next_element_seed(CheckSeed {
                context: self.context,
            })?;
            self.context.path.borrow_mut().pop();
            if item.is_none() {
                return Ok(());
            }
            index += 1;
        }
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        while let Some(key) = map.next_key_seed(KeySeed)? {
            self.context.path.borrow_mut().push(Segment::Key(key));
            map.next_value_seed(CheckSeed {
                context: self.context,
            })?;
            self.context.path.borrow_mut().pop();
        }
        Ok(())
    }
}

/// Reads a map key, borrowing it from the input when it has no escapes.
struct KeySeed;

impl<'de> DeserializeSeed<'de> for KeySeed {
    type Value = Cow<'de, str>;

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<Self::Value, D::Error> {
        deserializer.deserialize_str(self)
    }
}

impl<'de> Visitor<'de> for KeySeed {
    type Value = Cow<'de, str>;

    fn expecting(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        formatter.write_str("an object key")
    }

    fn visit_borrowed_str<E: de::Error>(self, value: &'de str) -> Result<Self::Value, E> {
        Ok(Cow::Borrowed(value))
    }

    fn visit_str<E: de::Error>(self, value: &str) -> Result<Self::Value, E> {
        Ok(Cow::Owned(value.to_owned()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn check(text: &str, expected: Result<(), (&str, LosslessViolation)>) {
        let expected = expected.map_err(|(pointer, reason)| NonLosslessJson {
            pointer: pointer.to_owned(),
            reason,
        });
        assert_eq!(check_text(text), expected, "text: {text}");
        if let Ok(value) = serde_json::from_str::<Value>(text) {
            assert_eq!(check_value(&value), expected, "value: {text}");
        }
    }

    #[test]
    fn safe_integer_takes_integral_values_up_to_2_pow_53_minus_1() {
        assert_eq!(safe_integer(&json!(0)), Some(0));
        assert_eq!(
            safe_integer(&json!(9_007_199_254_740_991_u64)),
            Some(MAX_SAFE_INTEGER)
        );
        assert_eq!(safe_integer(&json!(60000.0)), Some(60_000));
        assert_eq!(safe_integer(&json!(9_007_199_254_740_992_u64)), None);
        assert_eq!(safe_integer(&json!(9_007_199_254_740_992.0)), None);
        assert_eq!(safe_integer(&json!(-1)), None);
        assert_eq!(safe_integer(&json!(1.5)), None);
        assert_eq!(safe_integer(&json!("60000")), None);
        assert_eq!(safe_integer(&json!(null)), None);
    }

    #[test]
    fn h_log_2_accepts_ordinary_json() {
        check(r#"{"a":[1,2.5,"x",null,true],"b":{"c":-3}}"#, Ok(()));
        check(
            r#"{"max":9007199254740991,"min":-9007199254740991}"#,
            Ok(()),
        );
        check(r#"{"zero":0,"float_zero":0.0,"tiny":1e-300}"#, Ok(()));
    }

    #[test]
    fn h_log_2_rejects_negative_zero_with_pointer() {
        check(
            r#"{"a":{"b/c":[1,-0.0]}}"#,
            Err(("/a/b~1c/1", LosslessViolation::NegativeZero)),
        );
        check(
            r#"{"x~y":-0}"#,
            Err(("/x~0y", LosslessViolation::NegativeZero)),
        );
    }

    #[test]
    fn h_log_2_rejects_unsafe_integers() {
        check(
            r#"{"n":9007199254740992}"#,
            Err((
                "/n",
                LosslessViolation::UnsafeInteger("9007199254740992".into()),
            )),
        );
        check(
            r#"{"n":[-9007199254740992]}"#,
            Err((
                "/n/0",
                LosslessViolation::UnsafeInteger("-9007199254740992".into()),
            )),
        );
    }

    #[test]
    fn h_log_2_rejects_non_finite_text() {
        let error = check_text(r#"{"n":1e400}"#).err();
        assert!(
            matches!(&error, Some(NonLosslessJson { pointer, reason: LosslessViolation::Malformed(_) }) if pointer == "/n"),
            "{error:?}"
        );
        assert!(matches!(
            check_text(r#"{"n":NaN}"#),
            Err(NonLosslessJson {
                reason: LosslessViolation::Malformed(_),
                ..
            })
        ));
    }

    #[test]
    fn h_log_2_rejects_lone_surrogates_and_trailing_text() {
        assert!(check_text(r#"{"s":"\ud800"}"#).is_err());
        assert!(check_text(r#"{"s":"\ud83d\ude00"}"#).is_ok());
        assert!(check_text(r#"{} {}"#).is_err());
    }

    #[test]
    fn value_check_matches_json_macro() {
        assert_eq!(check_value(&json!({"a": [1, 2]})), Ok(()));
        assert_eq!(
            check_value(&json!({"a": -0.0})).map_err(|error| error.pointer),
            Err("/a".to_owned())
        );
    }
}
