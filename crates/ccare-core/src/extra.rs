//! [`Extra`]: the fields a type does not know, kept so decoding never loses data.

use std::fmt;

use serde::de::Deserializer;
use serde::ser::Serializer;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::json::JsonObject;

/// Unknown fields of a message, block or source, kept for byte-exact round trips.
///
/// Almost always empty, and an open session holds one per message and block, so an
/// empty `Extra` is a single null pointer instead of an inline map (72 bytes). Use it
/// with `#[serde(flatten)]`.
#[derive(Clone, Default, PartialEq)]
pub struct Extra(Option<Box<JsonObject>>);

impl Extra {
    /// No fields.
    pub fn new() -> Self {
        Self(None)
    }

    /// Whether there are no fields.
    pub fn is_empty(&self) -> bool {
        self.0.as_ref().is_none_or(|map| map.is_empty())
    }

    /// How many fields there are.
    pub fn len(&self) -> usize {
        self.0.as_ref().map_or(0, |map| map.len())
    }

    /// A field by name.
    pub fn get(&self, key: &str) -> Option<&Value> {
        self.0.as_ref()?.get(key)
    }

    /// Adds or replaces a field; returns the old value.
    pub fn insert(&mut self, key: String, value: Value) -> Option<Value> {
        self.0.get_or_insert_with(Box::default).insert(key, value)
    }

    /// Removes a field.
    pub fn remove(&mut self, key: &str) -> Option<Value> {
        let removed = self.0.as_mut()?.remove(key);
        if self.is_empty() {
            self.0 = None;
        }
        removed
    }

    /// The fields in order.
    pub fn iter(&self) -> impl Iterator<Item = (&String, &Value)> {
        self.0.iter().flat_map(|map| map.iter())
    }

    /// The fields as a JSON object.
    pub fn to_object(&self) -> JsonObject {
        self.0.as_deref().cloned().unwrap_or_default()
    }
}

impl From<JsonObject> for Extra {
    fn from(map: JsonObject) -> Self {
        if map.is_empty() {
            Self(None)
        } else {
            Self(Some(Box::new(map)))
        }
    }
}

impl fmt::Debug for Extra {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_map().entries(self.iter()).finish()
    }
}

impl Serialize for Extra {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_map(self.iter())
    }
}

impl<'de> Deserialize<'de> for Extra {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        JsonObject::deserialize(deserializer).map(Extra::from)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn empty_extra_is_one_pointer_and_round_trips() {
        assert_eq!(std::mem::size_of::<Extra>(), std::mem::size_of::<usize>());
        let mut extra = Extra::new();
        assert!(extra.is_empty());
        extra.insert("a".into(), Value::from(1));
        assert_eq!(
            serde_json::to_string(&extra).ok().as_deref(),
            Some(r#"{"a":1}"#)
        );
        assert_eq!(extra.remove("a"), Some(Value::from(1)));
        assert!(extra.is_empty());
        assert_eq!(serde_json::to_string(&extra).ok().as_deref(), Some("{}"));
    }
}
