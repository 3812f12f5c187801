//! Canonical JSON and its SHA-256 (CC-PRC-3 header keys, image and block keys, the
//! journal's input and message hashes).

use serde_json::Value;
use sha2::{Digest, Sha256};

/// Lowercase hex SHA-256 of the canonical JSON of `value` (keys sorted, compact): the
/// journal's input and message hashes.
pub(crate) fn content_hash(value: &Value) -> String {
    sha256_hex(&canonical_json(value))
}

pub(super) fn sha256_hex(text: &str) -> String {
    let digest = Sha256::digest(text.as_bytes());
    digest.iter().map(|byte| format!("{byte:02x}")).collect()
}

/// Compact JSON with the keys of every object sorted (by UTF-16 code units would match
/// JavaScript for non-BMP keys; byte order is used, which agrees for all BMP text).
pub(super) fn canonical_json(value: &Value) -> String {
    let mut out = String::new();
    write_canonical(value, &mut out);
    out
}

fn write_canonical(value: &Value, out: &mut String) {
    match value {
        Value::Object(map) => {
            let mut entries: Vec<(&String, &Value)> = map.iter().collect();
            entries.sort_by(|a, b| a.0.cmp(b.0));
            out.push('{');
            for (index, (key, item)) in entries.into_iter().enumerate() {
                if index > 0 {
                    out.push(',');
                }
                out.push_str(&Value::String(key.clone()).to_string());
                out.push(':');
                write_canonical(item, out);
            }
            out.push('}');
        }
        Value::Array(items) => {
            out.push('[');
            for (index, item) in items.iter().enumerate() {
                if index > 0 {
                    out.push(',');
                }
                write_canonical(item, out);
            }
            out.push(']');
        }
        Value::Null | Value::Bool(_) | Value::Number(_) | Value::String(_) => {
            out.push_str(&value.to_string());
        }
    }
}
