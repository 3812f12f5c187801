//! [`EnvelopeJson`]: the exact text of one stored event, owned or shared with the log.
//!
//! An append hands the store the event the session has just committed to memory. The
//! store keeps a reference to that event until its group commits, instead of a copy of
//! its bytes (issue 14 target 4). Rows read back from a backend own their text.

use std::fmt;
use std::ops::Deref;
use std::sync::Arc;

use ccare_core::Event;

/// An envelope's compact JSON text, stored and returned byte for byte.
#[derive(Clone)]
pub struct EnvelopeJson(Text);

#[derive(Clone)]
enum Text {
    /// Text the store owns: a row read back, an imported line.
    Owned(Box<str>),
    /// The raw text of an event the session log holds.
    Shared(Arc<Event>),
}

impl EnvelopeJson {
    /// The text.
    pub fn as_str(&self) -> &str {
        match &self.0 {
            Text::Owned(text) => text,
            Text::Shared(event) => event.raw_json(),
        }
    }
}

impl Deref for EnvelopeJson {
    type Target = str;

    fn deref(&self) -> &str {
        self.as_str()
    }
}

impl AsRef<str> for EnvelopeJson {
    fn as_ref(&self) -> &str {
        self.as_str()
    }
}

impl PartialEq for EnvelopeJson {
    /// Equal texts are equal, whoever holds them.
    fn eq(&self, other: &Self) -> bool {
        self.as_str() == other.as_str()
    }
}

impl Eq for EnvelopeJson {}

impl fmt::Debug for EnvelopeJson {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(self.as_str(), formatter)
    }
}

impl fmt::Display for EnvelopeJson {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        formatter.write_str(self.as_str())
    }
}

impl From<Box<str>> for EnvelopeJson {
    fn from(text: Box<str>) -> Self {
        Self(Text::Owned(text))
    }
}

impl From<String> for EnvelopeJson {
    fn from(text: String) -> Self {
        Self(Text::Owned(text.into_boxed_str()))
    }
}

impl From<&str> for EnvelopeJson {
    fn from(text: &str) -> Self {
        Self(Text::Owned(text.into()))
    }
}

impl From<Arc<Event>> for EnvelopeJson {
    /// Shares the event's text without copying it.
    fn from(event: Arc<Event>) -> Self {
        Self(Text::Shared(event))
    }
}

impl From<EnvelopeJson> for Box<str> {
    /// Moves owned text out; copies shared text.
    fn from(json: EnvelopeJson) -> Self {
        match json.0 {
            Text::Owned(text) => text,
            Text::Shared(event) => event.raw_json().into(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ccare_core::{EventDraft, JsonObject};

    #[test]
    fn shared_and_owned_text_read_and_compare_alike() {
        let event = Event::encode(0, 1, EventDraft::new("a/b", JsonObject::new()));
        let Ok(event) = event else {
            panic!("encode failed: {event:?}");
        };
        let event = Arc::new(event);
        let shared = EnvelopeJson::from(event.clone());
        let owned = EnvelopeJson::from(event.raw_json());
        assert_eq!(shared, owned);
        assert_eq!(&*shared, r#"{"seq":0,"time_ms":1,"type":"a/b","data":{}}"#);
        assert_eq!(format!("{shared}"), format!("{owned}"));
        assert_eq!(format!("{shared:?}"), format!("{owned:?}"));
        assert!(std::ptr::eq(shared.as_str(), event.raw_json()));
        assert_eq!(Box::<str>::from(shared), Box::<str>::from(owned));
    }
}
