//! The deserializer behind [`super::from_value`]: a reader over one JSON value with
//! the strict rules of the module docs, and its error, which learns the key path on
//! the way out and becomes a [`StrictError`].

use std::fmt;

use serde::de::value::BorrowedStrDeserializer;
use serde::de::{
    self, DeserializeSeed, Deserializer, EnumAccess, MapAccess, SeqAccess, Unexpected,
    VariantAccess, Visitor,
};
use serde::forward_to_deserialize_any;
use serde_json::Value;

use super::{Problem, StrictError};

/// One step of a key path.
#[derive(Debug)]
enum Segment {
    Key(String),
    Index(usize),
}

/// What went wrong, before it knows where.
#[derive(Debug)]
enum Kind {
    UnknownKey,
    Missing,
    Duplicate,
    Invalid(String),
    Other(String),
}

/// The error while reading: it learns its path on the way out, innermost step first.
#[derive(Debug)]
pub(super) struct ReadError {
    /// The steps from the failing value outwards.
    segments: Vec<Segment>,
    /// A key below the innermost value (a missing, repeated or unknown key of a table).
    tail: Option<String>,
    kind: Kind,
    /// The failing value as JSON, once the step that holds it was passed.
    found: Option<String>,
}

impl ReadError {
    fn new(kind: Kind) -> Self {
        Self {
            segments: Vec::new(),
            tail: None,
            kind,
            found: None,
        }
    }

    fn with_tail(kind: Kind, key: &str) -> Self {
        Self {
            tail: Some(key.to_owned()),
            ..Self::new(kind)
        }
    }

    fn invalid(expected: impl Into<String>) -> Self {
        Self::new(Kind::Invalid(expected.into()))
    }

    /// The error passes out of `value`, held under `segment`.
    fn leaving(mut self, segment: Segment, value: &Value) -> Self {
        self.note_found(value);
        self.segments.push(segment);
        self
    }

    /// An error raised while reading `value` itself (not inside it) found `value`.
    fn note_found(&mut self, value: &Value) {
        if self.segments.is_empty() && self.tail.is_none() && self.found.is_none() {
            self.found = Some(value.to_string());
        }
    }

    pub(super) fn finish(mut self, root: &Value) -> StrictError {
        self.note_found(root);
        let mut path = String::new();
        let key = |path: &mut String, key: &str| {
            if !path.is_empty() {
                path.push('.');
            }
            path.push_str(key);
        };
        for segment in self.segments.iter().rev() {
            match segment {
                Segment::Key(name) => key(&mut path, name),
                Segment::Index(index) => path.push_str(&format!("[{index}]")),
            }
        }
        if let Some(name) = &self.tail {
            key(&mut path, name);
        }
        let problem = match self.kind {
            Kind::UnknownKey => Problem::UnknownKey,
            Kind::Missing => Problem::Missing,
            Kind::Duplicate => Problem::Duplicate,
            Kind::Invalid(expected) => Problem::Invalid {
                expected,
                found: self.found.unwrap_or_else(|| root.to_string()),
            },
            Kind::Other(message) => Problem::Other(message),
        };
        StrictError { path, problem }
    }
}

impl fmt::Display for ReadError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.kind {
            Kind::UnknownKey => f.write_str("unknown key"),
            Kind::Missing => f.write_str("missing key"),
            Kind::Duplicate => f.write_str("duplicate key"),
            Kind::Invalid(expected) => write!(f, "expected {expected}"),
            Kind::Other(message) => f.write_str(message),
        }
    }
}

impl std::error::Error for ReadError {}

/// serde's own names of the types it expects, said the way a config user reads them.
fn plain_expected(expected: &dyn de::Expected) -> String {
    let text = expected.to_string();
    match text.as_str() {
        "a map" => "a table".to_owned(),
        "a sequence" => "an array".to_owned(),
        "a boolean" => "true or false".to_owned(),
        _ => text,
    }
}

/// `a`, `a or b`, `a, b or c`.
pub(super) fn one_of(names: &[&str]) -> String {
    match names {
        [] => "nothing".to_owned(),
        [only] => (*only).to_owned(),
        [init @ .., last] => format!("{} or {last}", init.join(", ")),
    }
}

impl de::Error for ReadError {
    fn custom<T: fmt::Display>(message: T) -> Self {
        Self::new(Kind::Other(message.to_string()))
    }

    fn invalid_type(_unexpected: Unexpected<'_>, expected: &dyn de::Expected) -> Self {
        Self::invalid(plain_expected(expected))
    }

    fn invalid_value(_unexpected: Unexpected<'_>, expected: &dyn de::Expected) -> Self {
        Self::invalid(plain_expected(expected))
    }

    fn invalid_length(_len: usize, expected: &dyn de::Expected) -> Self {
        Self::invalid(plain_expected(expected))
    }

    fn unknown_variant(_variant: &str, expected: &'static [&'static str]) -> Self {
        Self::invalid(one_of(expected))
    }

    fn unknown_field(field: &str, _expected: &'static [&'static str]) -> Self {
        Self::with_tail(Kind::UnknownKey, field)
    }

    fn missing_field(field: &'static str) -> Self {
        Self::with_tail(Kind::Missing, field)
    }

    fn duplicate_field(field: &'static str) -> Self {
        Self::with_tail(Kind::Duplicate, field)
    }
}

/// A deserializer over one JSON value with the rules of the module docs.
pub(super) struct ValueReader<'a>(pub(super) &'a Value);

impl<'de> Deserializer<'de> for ValueReader<'de> {
    type Error = ReadError;

    fn deserialize_any<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, ReadError> {
        match self.0 {
            Value::Null => visitor.visit_unit(),
            Value::Bool(flag) => visitor.visit_bool(*flag),
            Value::Number(number) => {
                if let Some(unsigned) = number.as_u64() {
                    visitor.visit_u64(unsigned)
                } else if let Some(signed) = number.as_i64() {
                    visitor.visit_i64(signed)
                } else {
                    match number.as_f64() {
                        Some(float) => visitor.visit_f64(float),
                        None => Err(ReadError::invalid("a finite number")),
                    }
                }
            }
            Value::String(text) => visitor.visit_borrowed_str(text),
            Value::Array(items) => visitor.visit_seq(ItemsReader {
                items: items.iter().enumerate(),
            }),
            Value::Object(map) => visitor.visit_map(EntriesReader {
                entries: map.iter().collect::<Vec<_>>().into_iter(),
                current: None,
            }),
        }
    }

    /// Present is `Some`, `null` included: absence is the field's `#[serde(default)]`.
    fn deserialize_option<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, ReadError> {
        visitor.visit_some(self)
    }

    fn deserialize_newtype_struct<V: Visitor<'de>>(
        self,
        _name: &'static str,
        visitor: V,
    ) -> Result<V::Value, ReadError> {
        visitor.visit_newtype_struct(self)
    }

    fn deserialize_struct<V: Visitor<'de>>(
        self,
        _name: &'static str,
        fields: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, ReadError> {
        let Value::Object(map) = self.0 else {
            return Err(ReadError::invalid("a table"));
        };
        if let Some(key) = map.keys().find(|key| !fields.contains(&key.as_str())) {
            return Err(ReadError::with_tail(Kind::UnknownKey, key));
        }
        let mut entries: Vec<_> = map.iter().collect();
        entries.sort_by_key(|(key, _)| fields.iter().position(|field| *field == key.as_str()));
        visitor.visit_map(EntriesReader {
            entries: entries.into_iter(),
            current: None,
        })
    }

    fn deserialize_enum<V: Visitor<'de>>(
        self,
        _name: &'static str,
        variants: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, ReadError> {
        match self.0 {
            Value::String(name) => visitor.visit_enum(UnitVariant(name)),
            _ => Err(ReadError::invalid(one_of(variants))),
        }
    }

    forward_to_deserialize_any! {
        bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string bytes
        byte_buf unit unit_struct seq tuple tuple_struct map identifier ignored_any
    }
}

/// The elements of an array, each under its index.
struct ItemsReader<'a> {
    items: std::iter::Enumerate<std::slice::Iter<'a, Value>>,
}

impl<'de> SeqAccess<'de> for ItemsReader<'de> {
    type Error = ReadError;

    fn next_element_seed<T: DeserializeSeed<'de>>(
        &mut self,
        seed: T,
    ) -> Result<Option<T::Value>, ReadError> {
        let Some((index, item)) = self.items.next() else {
            return Ok(None);
        };
        seed.deserialize(ValueReader(item))
            .map(Some)
            .map_err(|error| error.leaving(Segment::Index(index), item))
    }

    fn size_hint(&self) -> Option<usize> {
        Some(self.items.len())
    }
}

/// The entries of a table, each value under its key.
struct EntriesReader<'a> {
    entries: std::vec::IntoIter<(&'a String, &'a Value)>,
    current: Option<(&'a String, &'a Value)>,
}

impl<'de> MapAccess<'de> for EntriesReader<'de> {
    type Error = ReadError;

    fn next_key_seed<K: DeserializeSeed<'de>>(
        &mut self,
        seed: K,
    ) -> Result<Option<K::Value>, ReadError> {
        let Some((key, value)) = self.entries.next() else {
            return Ok(None);
        };
        self.current = Some((key, value));
        // A refused key (`unknown_field`) names itself in the error's tail.
        seed.deserialize(BorrowedStrDeserializer::new(key))
            .map(Some)
    }

    fn next_value_seed<V: DeserializeSeed<'de>>(&mut self, seed: V) -> Result<V::Value, ReadError> {
        let Some((key, value)) = self.current.take() else {
            return Err(de::Error::custom("a value was read before its key"));
        };
        seed.deserialize(ValueReader(value))
            .map_err(|error| error.leaving(Segment::Key(key.clone()), value))
    }

    fn size_hint(&self) -> Option<usize> {
        Some(self.entries.len())
    }
}

/// An enum written as its variant's name.
struct UnitVariant<'a>(&'a str);

impl<'de> EnumAccess<'de> for UnitVariant<'de> {
    type Error = ReadError;
    type Variant = Self;

    fn variant_seed<V: DeserializeSeed<'de>>(self, seed: V) -> Result<(V::Value, Self), ReadError> {
        seed.deserialize(BorrowedStrDeserializer::<ReadError>::new(self.0))
            .map(|variant| (variant, self))
    }
}

impl<'de> VariantAccess<'de> for UnitVariant<'de> {
    type Error = ReadError;

    fn unit_variant(self) -> Result<(), ReadError> {
        Ok(())
    }

    fn newtype_variant_seed<T: DeserializeSeed<'de>>(
        self,
        _seed: T,
    ) -> Result<T::Value, ReadError> {
        Err(ReadError::invalid(
            "a table with one key, the variant's name",
        ))
    }

    fn tuple_variant<V: Visitor<'de>>(
        self,
        _len: usize,
        _visitor: V,
    ) -> Result<V::Value, ReadError> {
        Err(ReadError::invalid(
            "a table with one key, the variant's name",
        ))
    }

    fn struct_variant<V: Visitor<'de>>(
        self,
        _fields: &'static [&'static str],
        _visitor: V,
    ) -> Result<V::Value, ReadError> {
        Err(ReadError::invalid(
            "a table with one key, the variant's name",
        ))
    }
}
