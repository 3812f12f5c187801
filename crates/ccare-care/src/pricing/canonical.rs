//! Canonical JSON and its SHA-256 (CC-PRC-3 header keys, image and block keys, the
//! journal's input and message hashes, `crate::gate`'s `hashes`).
//!
//! The canonical form is written straight into one byte buffer (no string per key or
//! scalar, no copy of the value), since the gate hashes every request's surface, input
//! and header.

use serde::Serialize;
use serde_json::Value;
use sha2::{Digest, Sha256};

/// Lowercase hex SHA-256 of `bytes`.
pub(crate) fn sha256_hex(bytes: &[u8]) -> String {
    hex_of(&Sha256::digest(bytes))
}

/// `digest` in lowercase hex.
pub(crate) fn hex_of(digest: &[u8]) -> String {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    let mut hex = String::with_capacity(digest.len() * 2);
    for &byte in digest {
        hex.push(char::from(HEX[usize::from(byte >> 4)]));
        hex.push(char::from(HEX[usize::from(byte & 0x0f)]));
    }
    hex
}

/// Compact JSON with the keys of every object sorted (by UTF-16 code units would match
/// JavaScript for non-BMP keys; byte order is used, which agrees for all BMP text).
pub(crate) fn canonical_json(value: &Value) -> Vec<u8> {
    let mut out = Vec::new();
    write_canonical(value, &mut out);
    out
}

/// Appends the canonical JSON of `value` to `out`.
pub(crate) fn write_canonical(value: &Value, out: &mut Vec<u8>) {
    match value {
        Value::Object(map) => {
            let mut entries: Vec<(&String, &Value)> = map.iter().collect();
            // Keys of one object are distinct.
            entries.sort_unstable_by(|a, b| a.0.cmp(b.0));
            out.push(b'{');
            for (index, (key, item)) in entries.into_iter().enumerate() {
                if index > 0 {
                    out.push(b',');
                }
                write_compact(key.as_str(), out);
                out.push(b':');
                write_canonical(item, out);
            }
            out.push(b'}');
        }
        Value::Array(items) => {
            out.push(b'[');
            for (index, item) in items.iter().enumerate() {
                if index > 0 {
                    out.push(b',');
                }
                write_canonical(item, out);
            }
            out.push(b']');
        }
        Value::Null | Value::Bool(_) | Value::Number(_) | Value::String(_) => {
            write_compact(value, out);
        }
    }
}

/// Appends serde_json's compact form of a string or scalar (what `to_string` gives).
pub(crate) fn write_compact<T: Serialize + ?Sized>(value: &T, out: &mut Vec<u8>) {
    // Writing a string or a JSON scalar into a `Vec` cannot fail.
    let _infallible = serde_json::to_writer(out, value);
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use serde_json::json;

    use super::*;

    fn content_hash(value: &Value) -> String {
        sha256_hex(&canonical_json(value))
    }

    /// The canonical form as first specified: one `to_string` per key and scalar.
    fn reference(value: &Value) -> String {
        match value {
            Value::Object(map) => {
                let mut entries: Vec<(&String, &Value)> = map.iter().collect();
                entries.sort_by(|a, b| a.0.cmp(b.0));
                let items: Vec<String> = entries
                    .into_iter()
                    .map(|(key, item)| {
                        format!("{}:{}", Value::String(key.clone()), reference(item))
                    })
                    .collect();
                format!("{{{}}}", items.join(","))
            }
            Value::Array(items) => {
                let items: Vec<String> = items.iter().map(reference).collect();
                format!("[{}]", items.join(","))
            }
            scalar => scalar.to_string(),
        }
    }

    #[test]
    fn the_buffer_writer_matches_the_reference_form_byte_for_byte() {
        let value = json!({
            "z": [1, -2.5, 1e300, null, true, false, "x\"y\\z\n\u{1}"],
            "a": {"β": "中文", "b": {}, "A": [], "é": "\u{1F600}"},
            "m": {"k2": 0, "k10": 1, "k1": {"y": 2, "x": [ {"d": 1, "c": 2} ]}},
            "": "empty key",
        });
        let written = String::from_utf8(canonical_json(&value)).unwrap();
        assert_eq!(written, reference(&value));
        assert!(written.starts_with(r#"{"":"empty key","a":{"A":[],"b":{},"#));
    }

    #[test]
    fn the_hash_is_lowercase_hex_sha256_of_the_canonical_bytes() {
        // sha256("{}")
        assert_eq!(
            content_hash(&json!({})),
            "44136fa355b3678a1146ad16f7e8649e94fb4fc21fe77e8310c060f61caaff8a"
        );
        assert_eq!(
            content_hash(&json!({"b": 1, "a": [true]})),
            sha256_hex(br#"{"a":[true],"b":1}"#)
        );
    }
}
