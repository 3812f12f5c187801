//! Who put a message into the conversation (spec H-EVT-3).
//!
//! The `source` of a message, never a marker in its text, says what was injected and by
//! whom, so any reader (compaction, the UI, an audit) can tell a user's words from a
//! plugin notice or a checkpoint.

use serde::de::Error as _;
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
    match map.remove(key) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(text)) => Ok(Some(text)),
        Some(_) => Err(format!("source field '{key}' must be a string")),
    }
}

impl<'de> Deserialize<'de> for Source {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let mut map = JsonObject::deserialize(deserializer)?;
        let kind = match map.get("kind") {
            Some(Value::String(kind)) => kind.clone(),
            _ => return Err(D::Error::custom("source needs a string 'kind'")),
        };
        let decoded = if kind == "user" {
            map.remove("kind");
            Source::User {
                rpc_id: take_string(&mut map, "rpc_id").map_err(D::Error::custom)?,
                client_time_zone: take_string(&mut map, "client_time_zone")
                    .map_err(D::Error::custom)?,
                extra: map.into(),
            }
        } else if kind == "plugin" || kind.starts_with("plugin:") {
            map.remove("kind");
            Source::Plugin(Box::new(PluginSource {
                kind,
                plugin: take_string(&mut map, "plugin").map_err(D::Error::custom)?,
                form: take_string(&mut map, "form").map_err(D::Error::custom)?,
                summary: take_string(&mut map, "summary").map_err(D::Error::custom)?,
                sections: map.remove("sections"),
                extra: map.into(),
            }))
        } else if kind == "compact-checkpoint" {
            map.remove("kind");
            let compaction_id = take_string(&mut map, "compaction_id")
                .map_err(D::Error::custom)?
                .ok_or_else(|| D::Error::custom("compact-checkpoint source needs compaction_id"))?;
            let producer = take_string(&mut map, "producer")
                .map_err(D::Error::custom)?
                .ok_or_else(|| D::Error::custom("compact-checkpoint source needs producer"))?;
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
}

impl Serialize for Source {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut map = JsonObject::new();
        let mut put = |key: &str, value: Option<Value>| {
            if let Some(value) = value {
                map.insert(key.to_owned(), value);
            }
        };
        match self {
            Source::User {
                rpc_id,
                client_time_zone,
                extra,
            } => {
                put("kind", Some(Value::from("user")));
                put("rpc_id", rpc_id.clone().map(Value::from));
                put(
                    "client_time_zone",
                    client_time_zone.clone().map(Value::from),
                );
                map.extend(extra.to_object());
            }
            Source::Plugin(plugin) => {
                put("kind", Some(Value::from(plugin.kind.clone())));
                put("plugin", plugin.plugin.clone().map(Value::from));
                put("form", plugin.form.clone().map(Value::from));
                put("summary", plugin.summary.clone().map(Value::from));
                put("sections", plugin.sections.clone());
                map.extend(plugin.extra.to_object());
            }
            Source::CompactCheckpoint {
                compaction_id,
                producer,
                trace,
                extra,
            } => {
                put("kind", Some(Value::from("compact-checkpoint")));
                put("compaction_id", Some(Value::from(compaction_id.clone())));
                put("producer", Some(Value::from(producer.clone())));
                put("trace", trace.as_deref().cloned());
                map.extend(extra.to_object());
            }
            Source::Unknown(unknown) => map.extend(unknown.as_ref().clone()),
        }
        map.serialize(serializer)
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
}
