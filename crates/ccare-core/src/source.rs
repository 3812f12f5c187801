//! Who put a message into the conversation (spec H-EVT-3).
//!
//! The `source` of a message, never a marker in its text, says what was injected and by
//! whom, so any reader (compaction, the UI, an audit) can tell a user's words from a
//! plugin notice or a checkpoint.

use std::fmt;

use serde::de::{Error as _, MapAccess, Visitor};
use serde::ser::SerializeMap;
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use serde_json::Value;

use crate::extra::Extra;
use crate::json::JsonObject;

/// The origin of a message.
#[derive(Debug, Clone, PartialEq)]
pub enum Source {
    /// Typed by a person (or a client acting for one).
    User {
        /// The id of the client call that carried it.
        rpc_id: Option<String>,
        /// The client's IANA time zone, canonicalised at ingress.
        client_time_zone: Option<String>,
        /// Fields this version does not know.
        extra: Extra,
    },
    /// Written by a plugin (`kind: "plugin"`) or a namespaced producer
    /// (`kind: "plugin:<producer>:<id>"`).
    Plugin(Box<PluginSource>),
    /// A compaction checkpoint standing for replaced history.
    CompactCheckpoint {
        /// The compaction that produced it.
        compaction_id: String,
        /// Who wrote the summary.
        producer: String,
        /// Optional trace data (boxed: rare, and it would make every source large).
        trace: Option<Box<Value>>,
        /// Fields this version does not know.
        extra: Extra,
    },
    /// A kind this version does not know, kept whole.
    Unknown(Box<JsonObject>),
}

/// A plugin-written message's origin.
#[derive(Debug, Clone, PartialEq)]
pub struct PluginSource {
    /// `plugin`, or the namespaced `plugin:<producer>:<id>`.
    pub kind: String,
    /// The plugin name (for `kind: "plugin"`); namespaced kinds may omit it.
    pub plugin: Option<String>,
    /// `notice` or `snapshot`.
    pub form: Option<String>,
    /// A one-line summary for audit views.
    pub summary: Option<String>,
    /// Named sections of a snapshot.
    pub sections: Option<Value>,
    /// Producer-specific fields.
    pub extra: Extra,
}

impl PluginSource {
    /// A `plugin{plugin, form: notice}` source.
    pub fn notice(plugin: &str) -> Self {
        Self {
            kind: "plugin".to_owned(),
            plugin: Some(plugin.to_owned()),
            form: Some("notice".to_owned()),
            summary: None,
            sections: None,
            extra: Extra::new(),
        }
    }
}

impl Source {
    /// A `plugin{plugin, form: notice}` source.
    pub fn plugin_notice(plugin: &str) -> Self {
        Source::Plugin(Box::new(PluginSource::notice(plugin)))
    }

    /// A plain user source.
    pub fn user() -> Self {
        Source::User {
            rpc_id: None,
            client_time_zone: None,
            extra: Extra::new(),
        }
    }

    /// The `kind` tag.
    pub fn kind(&self) -> &str {
        match self {
            Source::User { .. } => "user",
            Source::Plugin(plugin) => &plugin.kind,
            Source::CompactCheckpoint { .. } => "compact-checkpoint",
            Source::Unknown(map) => map.get("kind").and_then(Value::as_str).unwrap_or(""),
        }
    }
}

fn take_string(map: &mut JsonObject, key: &str) -> Result<Option<String>, String> {
    map.remove(key)
        .map_or(Ok(None), |value| string_field(key, value))
}

/// A string field's value: `null` is no value; anything else but a string is an error.
fn string_field(key: &str, value: Value) -> Result<Option<String>, String> {
    match value {
        Value::Null => Ok(None),
        Value::String(text) => Ok(Some(text)),
        _ => Err(format!("source field '{key}' must be a string")),
    }
}

// Sources are read and written with every message, so both directions go straight
// between the wire and the enum: a `user` source whose `kind` comes first (how this
// crate writes them) is read without an intermediate object, and a source whose extra
// fields do not repeat a known key is written field by field. Anything else takes the
// general path through one object, which gives the same result.

impl<'de> Deserialize<'de> for Source {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_map(SourceVisitor)
    }
}

struct SourceVisitor;

impl<'de> Visitor<'de> for SourceVisitor {
    type Value = Source;

    fn expecting(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        formatter.write_str("a source object")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut access: A) -> Result<Source, A::Error> {
        let mut map = JsonObject::new();
        let Some(first) = access.next_key::<String>()? else {
            return Err(A::Error::custom("source needs a string 'kind'"));
        };
        let value: Value = access.next_value()?;
        if first == "kind" && value.as_str() == Some("user") {
            return user_after_kind(access);
        }
        map.insert(first, value);
        while let Some((key, value)) = access.next_entry::<String, Value>()? {
            map.insert(key, value);
        }
        from_object(map).map_err(A::Error::custom)
    }
}

/// The rest of a `user` source whose `kind` was its first field.
fn user_after_kind<'de, A: MapAccess<'de>>(mut access: A) -> Result<Source, A::Error> {
    let mut rpc_id = None;
    let mut client_time_zone = None;
    let mut extra = JsonObject::new();
    while let Some(key) = access.next_key::<String>()? {
        let value: Value = access.next_value()?;
        let slot = match key.as_str() {
            "rpc_id" => &mut rpc_id,
            "client_time_zone" => &mut client_time_zone,
            "kind" => return Err(A::Error::custom("source field 'kind' appears twice")),
            _ => {
                extra.insert(key, value);
                continue;
            }
        };
        *slot = string_field(&key, value).map_err(A::Error::custom)?;
    }
    Ok(Source::User {
        rpc_id,
        client_time_zone,
        extra: extra.into(),
    })
}

/// A source from its whole object (the general path).
fn from_object(mut map: JsonObject) -> Result<Source, String> {
    let kind = match map.get("kind") {
        Some(Value::String(kind)) => kind.clone(),
        _ => return Err("source needs a string 'kind'".to_owned()),
    };
    let decoded = if kind == "user" {
        map.remove("kind");
        Source::User {
            rpc_id: take_string(&mut map, "rpc_id")?,
            client_time_zone: take_string(&mut map, "client_time_zone")?,
            extra: map.into(),
        }
    } else if kind == "plugin" || kind.starts_with("plugin:") {
        map.remove("kind");
        Source::Plugin(Box::new(PluginSource {
            kind,
            plugin: take_string(&mut map, "plugin")?,
            form: take_string(&mut map, "form")?,
            summary: take_string(&mut map, "summary")?,
            sections: map.remove("sections"),
            extra: map.into(),
        }))
    } else if kind == "compact-checkpoint" {
        map.remove("kind");
        let compaction_id = take_string(&mut map, "compaction_id")?
            .ok_or("compact-checkpoint source needs compaction_id")?;
        let producer =
            take_string(&mut map, "producer")?.ok_or("compact-checkpoint source needs producer")?;
        Source::CompactCheckpoint {
            compaction_id,
            producer,
            trace: map.remove("trace").map(Box::new),
            extra: map.into(),
        }
    } else {
        Source::Unknown(Box::new(map))
    };
    Ok(decoded)
}

impl Serialize for Source {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        const NONE: (&str, Option<Field<'_>>) = ("", None);
        let (known, extra) = match self {
            Source::User {
                rpc_id,
                client_time_zone,
                extra,
            } => (
                [
                    ("kind", Some(Field::Text("user"))),
                    ("rpc_id", text(rpc_id)),
                    ("client_time_zone", text(client_time_zone)),
                    NONE,
                    NONE,
                ],
                extra,
            ),
            Source::Plugin(plugin) => (
                [
                    ("kind", Some(Field::Text(&plugin.kind))),
                    ("plugin", text(&plugin.plugin)),
                    ("form", text(&plugin.form)),
                    ("summary", text(&plugin.summary)),
                    ("sections", plugin.sections.as_ref().map(Field::Json)),
                ],
                &plugin.extra,
            ),
            Source::CompactCheckpoint {
                compaction_id,
                producer,
                trace,
                extra,
            } => (
                [
                    ("kind", Some(Field::Text("compact-checkpoint"))),
                    ("compaction_id", Some(Field::Text(compaction_id))),
                    ("producer", Some(Field::Text(producer))),
                    ("trace", trace.as_deref().map(Field::Json)),
                    NONE,
                ],
                extra,
            ),
            Source::Unknown(unknown) => return unknown.serialize(serializer),
        };
        // As one object would hold them: the known fields that have a value, then the
        // extra ones; an extra field that repeats a written known key takes its value,
        // in its place.
        let written = |key: &str| {
            known
                .iter()
                .any(|(name, value)| value.is_some() && *name == key)
        };
        let mut map = serializer.serialize_map(None)?;
        for (key, value) in &known {
            if let Some(value) = value {
                match extra.get(key) {
                    Some(over) => map.serialize_entry(key, over)?,
                    None => map.serialize_entry(key, value)?,
                }
            }
        }
        for (key, value) in extra.iter() {
            if !written(key) {
                map.serialize_entry(key, value)?;
            }
        }
        map.end()
    }
}

/// A string field's value, when it has one.
fn text(value: &Option<String>) -> Option<Field<'_>> {
    value.as_deref().map(Field::Text)
}

/// A known field's value, borrowed for writing.
#[derive(Clone, Copy)]
enum Field<'a> {
    Text(&'a str),
    Json(&'a Value),
}

impl Serialize for Field<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        match self {
            Field::Text(text) => serializer.serialize_str(text),
            Field::Json(value) => value.serialize(serializer),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn round_trip(text: &str) -> Option<Source> {
        let source: Option<Source> = serde_json::from_str(text).ok();
        let back = source
            .as_ref()
            .and_then(|source| serde_json::to_string(source).ok());
        assert_eq!(back.as_deref(), Some(text));
        source
    }

    #[test]
    fn h_evt_3_sources_round_trip() {
        assert!(matches!(
            round_trip(r#"{"kind":"user","rpc_id":"r1"}"#),
            Some(Source::User { .. })
        ));
        let plugin = round_trip(
            r#"{"kind":"plugin","plugin":"time-context","form":"snapshot","sections":[{"name":"t","text":"x"}]}"#,
        );
        assert_eq!(plugin.as_ref().map(Source::kind), Some("plugin"));
        let namespaced =
            round_trip(r#"{"kind":"plugin:context-care:state","form":"notice","level":2}"#);
        assert_eq!(
            namespaced.as_ref().map(Source::kind),
            Some("plugin:context-care:state")
        );
        assert!(matches!(
            round_trip(
                r#"{"kind":"compact-checkpoint","compaction_id":"c1","producer":"context-care"}"#
            ),
            Some(Source::CompactCheckpoint { .. })
        ));
        assert!(matches!(
            round_trip(r#"{"kind":"martian","x":1}"#),
            Some(Source::Unknown(_))
        ));
    }

    #[test]
    fn h_evt_3_source_without_kind_is_refused() {
        assert!(serde_json::from_str::<Source>(r#"{"plugin":"x"}"#).is_err());
    }

    #[test]
    fn h_evt_3_user_sources_keep_their_extra_fields_in_order() {
        let source = round_trip(r#"{"kind":"user","rpc_id":"r1","z":1,"a":[2],"m":null}"#);
        assert!(
            matches!(&source, Some(Source::User { extra, .. }) if extra.len() == 3),
            "{source:?}"
        );
        // Written the other way round (`kind` not first), the general path reads it.
        let general: Option<Source> = serde_json::from_str(r#"{"rpc_id":"r1","kind":"user"}"#).ok();
        assert_eq!(
            general.and_then(|source| serde_json::to_string(&source).ok()),
            Some(r#"{"kind":"user","rpc_id":"r1"}"#.to_owned())
        );
        // From a JSON value, as a payload object is decoded.
        let from_value: Option<Source> =
            serde_json::from_value(serde_json::json!({"kind": "user", "client_time_zone": "UTC"}))
                .ok();
        assert_eq!(
            from_value,
            Some(Source::User {
                rpc_id: None,
                client_time_zone: Some("UTC".to_owned()),
                extra: Extra::new(),
            })
        );
    }

    #[test]
    fn h_evt_3_bad_user_sources_are_refused_with_the_field() {
        let error = |text: &str| {
            serde_json::from_str::<Source>(text)
                .err()
                .map(|error| error.to_string())
                .unwrap_or_default()
        };
        assert!(
            error(r#"{"kind":"user","rpc_id":7}"#)
                .contains("source field 'rpc_id' must be a string"),
            "{}",
            error(r#"{"kind":"user","rpc_id":7}"#)
        );
        assert!(error(r#"{"kind":"user","kind":"plugin"}"#).contains("'kind' appears twice"));
        assert!(error(r#"{}"#).contains("source needs a string 'kind'"));
        assert!(error(r#"{"kind":3}"#).contains("source needs a string 'kind'"));
        assert!(error(r#"[1]"#).contains("a source object"));
    }

    #[test]
    fn h_evt_3_an_extra_field_repeating_a_known_key_takes_its_place() {
        let mut fields = JsonObject::new();
        fields.insert("rpc_id".to_owned(), Value::from("from-extra"));
        fields.insert("x".to_owned(), Value::from(1));
        let source = Source::User {
            rpc_id: Some("typed".to_owned()),
            client_time_zone: None,
            extra: fields.into(),
        };
        assert_eq!(
            serde_json::to_string(&source).ok().as_deref(),
            Some(r#"{"kind":"user","rpc_id":"from-extra","x":1}"#)
        );
        // A known key with no value of its own is written where the extra field stands.
        let mut fields = JsonObject::new();
        fields.insert("x".to_owned(), Value::from(1));
        fields.insert("client_time_zone".to_owned(), Value::from("UTC"));
        let source = Source::User {
            rpc_id: None,
            client_time_zone: None,
            extra: fields.into(),
        };
        assert_eq!(
            serde_json::to_string(&source).ok().as_deref(),
            Some(r#"{"kind":"user","x":1,"client_time_zone":"UTC"}"#)
        );
    }
}
