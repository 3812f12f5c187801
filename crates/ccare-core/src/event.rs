//! The event envelope (spec H-LOG, H-SURF-1).
//!
//! An [`Event`] keeps the exact compact JSON line it was written as, and answers its
//! header fields (seq, time, type, surface op, source seqs) from a parsed copy. The
//! `data` object stays as text until someone decodes it with [`Event::decode`]: a long
//! session opens by parsing headers only, export writes the stored bytes verbatim, and
//! unknown fields (in the envelope or in `data`) survive every round trip.

use std::borrow::Cow;
use std::ops::Range;

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use serde_json::ser::{CompactFormatter, Formatter};
use serde_json::value::RawValue;

use crate::json::{JsonObject, MAX_SAFE_INTEGER, NonLosslessJson, check_text, check_value};

/// How an event affects the surface (the ordered list of live seqs).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "kebab-case")]
pub enum SurfaceOp {
    /// The event becomes the last live node.
    Append,
    /// The event shadows the inclusive span of live nodes from `start_seq` to `end_seq`
    /// and takes its place.
    Replace {
        /// First live seq of the shadowed span.
        start_seq: u64,
        /// Last live seq of the shadowed span.
        end_seq: u64,
    },
    /// Undoes the replace whose node is `replace_seq` (CC-EXT-3): that live replace node
    /// leaves the surface and the nodes it shadowed become live again in its place.
    /// The restoring event adds no node of its own; nothing is deleted.
    Restore {
        /// The seq of the live replace node to undo.
        replace_seq: u64,
    },
}

/// An event not yet appended: everything but the seq and time, which the session assigns.
///
/// Its payload is held either as an object ([`EventDraft::new`]) or, for a typed payload
/// ([`EventDraft::typed`]), as the compact JSON text it serialised to: the append path
/// then writes that text into the envelope as it is, so a typed payload is serialised
/// once (issue 14), not first into an object and then into text. [`EventDraft::data`]
/// reads either form as an object; two drafts are equal when their payloads are equal
/// as objects, whatever form each holds.
#[derive(Debug, Clone)]
pub struct EventDraft {
    /// The event type, e.g. `turn/start` or `time-context/reading`.
    pub kind: String,
    /// The payload object, or its text.
    data: DraftData,
    /// Whether a reader that does not know `kind` may skip the event (H-EVT-2).
    pub ignorable: bool,
    /// The surface effect, for surface-capable types.
    pub surface: Option<SurfaceOp>,
    /// Events this one derives from; a replace cites every seq it shadows (H-SURF-1).
    pub source_event_seqs: Vec<u64>,
}

/// A draft's payload: an object, or the compact JSON text of one, already checked to be
/// an object and lossless (what [`Event::encode`] would otherwise check).
#[derive(Debug, Clone)]
enum DraftData {
    Object(JsonObject),
    Text(String),
}

impl PartialEq for EventDraft {
    fn eq(&self, other: &Self) -> bool {
        self.kind == other.kind
            && self.ignorable == other.ignorable
            && self.surface == other.surface
            && self.source_event_seqs == other.source_event_seqs
            && match (&self.data, &other.data) {
                (DraftData::Text(left), DraftData::Text(right)) => left == right,
                _ => self.data() == other.data(),
            }
    }
}

impl EventDraft {
    /// A required, non-surface event of `kind` with `data`.
    pub fn new(kind: impl Into<String>, data: JsonObject) -> Self {
        Self {
            kind: kind.into(),
            data: DraftData::Object(data),
            ignorable: false,
            surface: None,
            source_event_seqs: Vec::new(),
        }
    }

    /// A draft whose data is a typed payload, serialised once to its compact JSON text.
    ///
    /// A payload that does not serialise to an object, or holds a number JSON cannot
    /// carry exactly, is kept as an object instead, so that [`Event::encode`] reports
    /// it with its usual error (and the path of the number).
    pub fn typed<T: EventData>(data: &T) -> Result<Self, EventError> {
        let encode_error = |error: serde_json::Error| EventError::Encode {
            kind: T::KIND.to_owned(),
            message: error.to_string(),
        };
        let mut text: Vec<u8> = Vec::with_capacity(256);
        let lossless = write_checked(&mut text, data).map_err(encode_error)?;
        if lossless
            && text.first() == Some(&b'{')
            && let Ok(text) = String::from_utf8(text)
        {
            return Ok(Self {
                data: DraftData::Text(text),
                ..Self::new(T::KIND, JsonObject::new())
            });
        }
        let value = serde_json::to_value(data).map_err(encode_error)?;
        match value {
            serde_json::Value::Object(map) => Ok(Self::new(T::KIND, map)),
            other => Err(EventError::DataNotObject {
                kind: T::KIND.to_owned(),
                found: json_kind(&other),
            }),
        }
    }

    /// The payload as an object (parsed from its text for a typed draft).
    pub fn data(&self) -> Cow<'_, JsonObject> {
        match &self.data {
            DraftData::Object(object) => Cow::Borrowed(object),
            DraftData::Text(text) => Cow::Owned(parse_object(text)),
        }
    }

    /// The payload as an object, taken out of the draft.
    pub fn into_data(self) -> JsonObject {
        match self.data {
            DraftData::Object(object) => object,
            DraftData::Text(text) => parse_object(&text),
        }
    }

    /// Sets the surface op.
    pub fn with_surface(mut self, surface: SurfaceOp) -> Self {
        self.surface = Some(surface);
        self
    }

    /// Sets the source seqs.
    pub fn with_sources(mut self, seqs: Vec<u64>) -> Self {
        self.source_event_seqs = seqs;
        self
    }

    /// Marks the event ignorable.
    pub fn ignorable(mut self) -> Self {
        self.ignorable = true;
        self
    }
}

/// The object a typed draft's text holds. The text is the serialiser's output for an
/// object, so it always parses; an empty object stands in if it somehow did not.
fn parse_object(text: &str) -> JsonObject {
    serde_json::from_str(text).unwrap_or_default()
}

/// A typed payload of a known event kind.
pub trait EventData: Serialize + DeserializeOwned {
    /// The event type string this payload belongs to.
    const KIND: &'static str;
}

/// A read-only view of some fields of a payload of kind `OF`, for readers of a large
/// payload that need little of it. Not [`EventData`]: a part is never logged.
pub trait EventPart: DeserializeOwned {
    /// The event type string of the payload this is part of.
    const OF: &'static str;
}

/// A committed event: immutable, shared as `Arc<Event>` (H-LOG-3).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Event {
    seq: u64,
    time_ms: i64,
    kind: Box<str>,
    ignorable: bool,
    surface: Option<SurfaceOp>,
    source_event_seqs: Box<[u64]>,
    /// The exact compact JSON of the envelope.
    raw: Box<str>,
    /// Where `data` sits inside `raw`.
    data_range: Range<u32>,
}

/// Why an event could not be built, parsed or decoded.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum EventError {
    /// The envelope is not valid JSON or lacks a required field.
    #[error("malformed event envelope: {0}")]
    Malformed(String),
    /// `data` is not a JSON object.
    #[error("event '{kind}': data must be an object, found {found}")]
    DataNotObject {
        /// The event type.
        kind: String,
        /// The JSON kind found instead.
        found: &'static str,
    },
    /// `data` breaks H-LOG-2.
    #[error("event '{kind}': {error}")]
    NonLossless {
        /// The event type.
        kind: String,
        /// The violation and its pointer (relative to the envelope, e.g. `/data/x`).
        error: NonLosslessJson,
    },
    /// The envelope is too large to index (over 4 GiB).
    #[error("event too large: {0} bytes")]
    TooLarge(usize),
    /// A typed payload could not be serialised.
    #[error("event '{kind}': cannot encode data: {message}")]
    Encode {
        /// The event type.
        kind: String,
        /// What serde said.
        message: String,
    },
    /// `data` does not have the shape its kind requires.
    #[error("event {seq} '{kind}': data does not match its type: {message}")]
    Decode {
        /// The event's seq.
        seq: u64,
        /// The event type.
        kind: String,
        /// What serde said.
        message: String,
    },
}

impl EventError {
    /// The spec's error code.
    pub fn code(&self) -> &'static str {
        match self {
            EventError::NonLossless { .. } => "NON_LOSSLESS_JSON",
            EventError::Malformed(_)
            | EventError::DataNotObject { .. }
            | EventError::TooLarge(_)
            | EventError::Encode { .. }
            | EventError::Decode { .. } => "INVALID_EVENT",
        }
    }
}

#[derive(Deserialize)]
struct EnvelopeRef<'a> {
    seq: u64,
    time_ms: i64,
    #[serde(rename = "type", borrow)]
    kind: Cow<'a, str>,
    #[serde(borrow)]
    data: &'a RawValue,
    #[serde(default)]
    ignorable: bool,
    #[serde(default)]
    surface: Option<SurfaceOp>,
    #[serde(default)]
    source_event_seqs: Vec<u64>,
}

impl Event {
    /// Builds the committed form of `draft` at `seq` and `time_ms`, checking H-LOG-2.
    ///
    /// The envelope is written in one buffer, `data` straight into it by serde with a
    /// formatter that notes any number H-LOG-2 forbids as it goes; only then is the
    /// value walked again, to report the violation with its pointer.
    pub fn encode(seq: u64, time_ms: i64, draft: EventDraft) -> Result<Self, EventError> {
        Self::encode_keeping_data(seq, time_ms, draft).map(|(event, _)| event)
    }

    /// [`Event::encode`], handing the draft's `data` object back beside the event: a
    /// caller that decodes the payload next can take its strings from the object instead
    /// of parsing the text just written. `None` for a typed draft, which held its
    /// payload as text: there is no object to hand back, and the event's data text is
    /// that text.
    pub fn encode_keeping_data(
        seq: u64,
        time_ms: i64,
        draft: EventDraft,
    ) -> Result<(Self, Option<JsonObject>), EventError> {
        let EventDraft {
            kind,
            data,
            ignorable,
            surface,
            source_event_seqs,
        } = draft;
        let encode_error = |error: serde_json::Error| EventError::Encode {
            kind: kind.clone(),
            message: error.to_string(),
        };
        let data_len = match &data {
            DraftData::Text(text) => text.len(),
            DraftData::Object(_) => 192,
        };
        let mut raw: Vec<u8> = Vec::with_capacity(96 + kind.len() + data_len);
        let mut number = itoa::Buffer::new();
        raw.extend_from_slice(b"{\"seq\":");
        raw.extend_from_slice(number.format(seq).as_bytes());
        raw.extend_from_slice(b",\"time_ms\":");
        raw.extend_from_slice(number.format(time_ms).as_bytes());
        raw.extend_from_slice(b",\"type\":");
        serde_json::to_writer(&mut raw, &kind).map_err(encode_error)?;
        raw.extend_from_slice(b",\"data\":");
        let data_start = raw.len();
        let kept = match data {
            // Checked to be a lossless object when the draft was made.
            DraftData::Text(text) => {
                raw.extend_from_slice(text.as_bytes());
                None
            }
            DraftData::Object(object) => {
                if !write_checked(&mut raw, &object).map_err(encode_error)? {
                    // Rare: walk the value for what the formatter saw, and its path.
                    check_value(&serde_json::Value::Object(object.clone())).map_err(|error| {
                        EventError::NonLossless {
                            kind: kind.clone(),
                            error: error.under("/data"),
                        }
                    })?;
                }
                Some(object)
            }
        };
        let data_end = raw.len();
        if ignorable {
            raw.extend_from_slice(b",\"ignorable\":true");
        }
        if let Some(surface) = &surface {
            raw.extend_from_slice(b",\"surface\":");
            serde_json::to_writer(&mut raw, surface).map_err(encode_error)?;
        }
        if !source_event_seqs.is_empty() {
            raw.extend_from_slice(b",\"source_event_seqs\":");
            serde_json::to_writer(&mut raw, &source_event_seqs).map_err(encode_error)?;
        }
        raw.push(b'}');
        let raw = String::from_utf8(raw).map_err(|error| EventError::Encode {
            kind: kind.clone(),
            message: error.to_string(),
        })?;
        let data_range = to_range(data_start, data_end, raw.len())?;
        let event = Self {
            seq,
            time_ms,
            kind: kind.into_boxed_str(),
            ignorable,
            surface,
            source_event_seqs: source_event_seqs.into_boxed_slice(),
            raw: raw.into_boxed_str(),
            data_range,
        };
        Ok((event, kept))
    }

    /// Parses a stored or imported envelope line, keeping its bytes verbatim.
    pub fn parse(raw: impl Into<Box<str>>) -> Result<Self, EventError> {
        let raw: Box<str> = raw.into();
        let (header, data_range) = {
            let envelope: EnvelopeRef<'_> = serde_json::from_str(&raw)
                .map_err(|error| EventError::Malformed(error.to_string()))?;
            let data_text = envelope.data.get();
            if !data_text.starts_with('{') {
                let found = serde_json::from_str::<serde_json::Value>(data_text)
                    .map(|value| json_kind(&value))
                    .unwrap_or("invalid JSON");
                return Err(EventError::DataNotObject {
                    kind: envelope.kind.into_owned(),
                    found,
                });
            }
            check_text(data_text).map_err(|error| EventError::NonLossless {
                kind: envelope.kind.to_string(),
                error: error.under("/data"),
            })?;
            let start = (data_text.as_ptr() as usize).wrapping_sub(raw.as_ptr() as usize);
            let end = start.wrapping_add(data_text.len());
            let in_bounds = raw.get(start..end) == Some(data_text);
            if !in_bounds {
                return Err(EventError::Malformed(
                    "data is not a slice of the envelope".into(),
                ));
            }
            let range = to_range(start, end, raw.len())?;
            let header = (
                envelope.seq,
                envelope.time_ms,
                envelope.kind.into_owned().into_boxed_str(),
                envelope.ignorable,
                envelope.surface,
                envelope.source_event_seqs.into_boxed_slice(),
            );
            (header, range)
        };
        let (seq, time_ms, kind, ignorable, surface, source_event_seqs) = header;
        Ok(Self {
            seq,
            time_ms,
            kind,
            ignorable,
            surface,
            source_event_seqs,
            raw,
            data_range,
        })
    }

    /// The number of earlier events in the session (H-LOG-1).
    pub fn seq(&self) -> u64 {
        self.seq
    }

    /// The clock reading at append time, epoch ms; may run backwards (H-GEN-1).
    pub fn time_ms(&self) -> i64 {
        self.time_ms
    }

    /// The event type.
    pub fn kind(&self) -> &str {
        &self.kind
    }

    /// Whether readers that do not know the type may skip it.
    pub fn is_ignorable(&self) -> bool {
        self.ignorable
    }

    /// The surface op, if the event is a surface node.
    pub fn surface(&self) -> Option<SurfaceOp> {
        self.surface
    }

    /// Seqs this event derives from.
    pub fn source_event_seqs(&self) -> &[u64] {
        &self.source_event_seqs
    }

    /// The exact compact JSON of the whole envelope, as stored and exported.
    pub fn raw_json(&self) -> &str {
        &self.raw
    }

    /// The exact JSON text of `data`.
    pub fn data_json(&self) -> &str {
        let Range { start, end } = self.data_range.clone();
        self.raw.get(start as usize..end as usize).unwrap_or("{}")
    }

    /// `data` as a JSON object (allocates; prefer [`Event::decode`]).
    pub fn data(&self) -> Result<JsonObject, EventError> {
        self.decode_as(self.kind())
    }

    /// Decodes `data` as the typed payload `T`.
    pub fn decode<T: EventData>(&self) -> Result<T, EventError> {
        self.decode_as(T::KIND)
    }

    /// Decodes some of `data`'s fields as `T`, a read-only view of a payload of kind
    /// `T::OF` (e.g. [`crate::kinds::AssistantReply`]): the fields `T` leaves out are
    /// skipped without being built.
    pub fn decode_part<T: EventPart>(&self) -> Result<T, EventError> {
        self.decode_as(T::OF)
    }

    fn decode_as<T: DeserializeOwned>(&self, kind: &str) -> Result<T, EventError> {
        serde_json::from_str(self.data_json()).map_err(|error| EventError::Decode {
            seq: self.seq,
            kind: kind.to_owned(),
            message: error.to_string(),
        })
    }

    /// Bytes held by this event in memory (for budgets and benchmarks).
    pub fn heap_bytes(&self) -> usize {
        self.raw.len() + self.kind.len() + self.source_event_seqs.len() * 8
    }
}

/// Compact JSON output that notes whether every number it wrote obeys H-LOG-2 (finite,
/// never `-0`, integers within ±(2^53−1)). A `Value` writes only 64-bit integers and
/// finite doubles; anything else (a number kept as text) also clears the note, and
/// the value is then checked by walking it.
/// Writes `value` as compact JSON to `out` through a [`CheckingFormatter`]; `true`
/// when nothing it wrote may have lost precision.
fn write_checked<T: Serialize + ?Sized>(
    out: &mut Vec<u8>,
    value: &T,
) -> Result<bool, serde_json::Error> {
    let mut formatter = CheckingFormatter { lossless: true };
    value.serialize(&mut serde_json::Serializer::with_formatter(
        out,
        &mut formatter,
    ))?;
    Ok(formatter.lossless)
}

struct CheckingFormatter {
    lossless: bool,
}

impl Formatter for &mut CheckingFormatter {
    fn write_i64<W: ?Sized + std::io::Write>(
        &mut self,
        writer: &mut W,
        value: i64,
    ) -> std::io::Result<()> {
        self.lossless &= value.unsigned_abs() <= MAX_SAFE_INTEGER;
        CompactFormatter.write_i64(writer, value)
    }

    fn write_u64<W: ?Sized + std::io::Write>(
        &mut self,
        writer: &mut W,
        value: u64,
    ) -> std::io::Result<()> {
        self.lossless &= value <= MAX_SAFE_INTEGER;
        CompactFormatter.write_u64(writer, value)
    }

    fn write_i128<W: ?Sized + std::io::Write>(
        &mut self,
        writer: &mut W,
        value: i128,
    ) -> std::io::Result<()> {
        self.lossless = false;
        CompactFormatter.write_i128(writer, value)
    }

    fn write_u128<W: ?Sized + std::io::Write>(
        &mut self,
        writer: &mut W,
        value: u128,
    ) -> std::io::Result<()> {
        self.lossless = false;
        CompactFormatter.write_u128(writer, value)
    }

    fn write_f32<W: ?Sized + std::io::Write>(
        &mut self,
        writer: &mut W,
        value: f32,
    ) -> std::io::Result<()> {
        self.lossless = false;
        CompactFormatter.write_f32(writer, value)
    }

    fn write_f64<W: ?Sized + std::io::Write>(
        &mut self,
        writer: &mut W,
        value: f64,
    ) -> std::io::Result<()> {
        self.lossless &= value.is_finite() && !(value == 0.0 && value.is_sign_negative());
        CompactFormatter.write_f64(writer, value)
    }

    fn write_number_str<W: ?Sized + std::io::Write>(
        &mut self,
        writer: &mut W,
        value: &str,
    ) -> std::io::Result<()> {
        self.lossless = false;
        CompactFormatter.write_number_str(writer, value)
    }

    fn write_raw_fragment<W: ?Sized + std::io::Write>(
        &mut self,
        writer: &mut W,
        fragment: &str,
    ) -> std::io::Result<()> {
        self.lossless = false;
        CompactFormatter.write_raw_fragment(writer, fragment)
    }
}

fn to_range(start: usize, end: usize, total: usize) -> Result<Range<u32>, EventError> {
    let too_large = || EventError::TooLarge(total);
    let start = u32::try_from(start).map_err(|_| too_large())?;
    let end = u32::try_from(end).map_err(|_| too_large())?;
    Ok(start..end)
}

pub(crate) fn json_kind(value: &serde_json::Value) -> &'static str {
    match value {
        serde_json::Value::Null => "null",
        serde_json::Value::Bool(_) => "a boolean",
        serde_json::Value::Number(_) => "a number",
        serde_json::Value::String(_) => "a string",
        serde_json::Value::Array(_) => "an array",
        serde_json::Value::Object(_) => "an object",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[derive(Serialize, Deserialize)]
    struct Counted {
        n: u64,
        label: String,
    }

    impl EventData for Counted {
        const KIND: &'static str = "test/counted";
    }

    #[derive(Serialize, Deserialize)]
    struct Bare(u32);

    impl EventData for Bare {
        const KIND: &'static str = "test/bare";
    }

    #[test]
    fn h_log_2_a_typed_draft_encodes_as_its_object_would() {
        let payload = Counted {
            n: 7,
            label: "a \"quoted\" é".to_owned(),
        };
        let typed = EventDraft::typed(&payload).map(|draft| draft.with_surface(SurfaceOp::Append));
        let object = EventDraft::new(
            "test/counted",
            self::object(json!({"n": 7, "label": "a \"quoted\" é"})),
        )
        .with_surface(SurfaceOp::Append);
        assert_eq!(typed.as_ref().ok(), Some(&object));
        assert_eq!(
            typed.as_ref().map(|draft| draft.data().into_owned()).ok(),
            Some(object.data().into_owned())
        );
        let encoded = |draft: EventDraft| {
            Event::encode_keeping_data(5, 6, draft)
                .map(|(event, kept)| (event.raw_json().to_owned(), kept.is_some()))
                .ok()
        };
        let line = r#"{"seq":5,"time_ms":6,"type":"test/counted","data":{"n":7,"label":"a \"quoted\" é"},"surface":{"op":"append"}}"#;
        // The typed draft hands back no object: its payload was text all along.
        assert_eq!(typed.ok().and_then(encoded), Some((line.to_owned(), false)));
        assert_eq!(encoded(object), Some((line.to_owned(), true)));
    }

    #[test]
    fn h_log_2_a_typed_draft_keeps_the_encode_errors() {
        let unsafe_number = Counted {
            n: 9_007_199_254_740_993,
            label: String::new(),
        };
        let error = EventDraft::typed(&unsafe_number)
            .and_then(|draft| Event::encode(0, 0, draft))
            .err();
        assert!(
            matches!(&error, Some(EventError::NonLossless { error, .. }) if error.pointer == "/data/n"),
            "{error:?}"
        );
        let error = EventDraft::typed(&Bare(3)).err();
        assert!(
            matches!(&error, Some(EventError::DataNotObject { kind, found: "a number" }) if kind == "test/bare"),
            "{error:?}"
        );
    }

    fn object(value: serde_json::Value) -> JsonObject {
        match value {
            serde_json::Value::Object(map) => map,
            _ => JsonObject::new(),
        }
    }

    #[test]
    fn encode_writes_the_canonical_envelope() {
        let draft = EventDraft::new("user/message", object(json!({"z": 1, "a": "é"})))
            .with_surface(SurfaceOp::Replace {
                start_seq: 2,
                end_seq: 4,
            })
            .with_sources(vec![2, 3, 4]);
        let event = Event::encode(7, -5, draft).ok();
        let raw = event.as_ref().map(|event| event.raw_json());
        assert_eq!(
            raw,
            Some(
                r#"{"seq":7,"time_ms":-5,"type":"user/message","data":{"z":1,"a":"é"},"surface":{"op":"replace","start_seq":2,"end_seq":4},"source_event_seqs":[2,3,4]}"#
            )
        );
        assert_eq!(
            event.as_ref().map(|event| event.data_json()),
            Some(r#"{"z":1,"a":"é"}"#)
        );
    }

    #[test]
    fn parse_keeps_bytes_and_unknown_fields() {
        let line = r#"{"seq":3,"time_ms":10,"type":"x/y","data":{"k":[1,2]},"ignorable":true,"future":{"a":1}}"#;
        let event = Event::parse(line);
        assert!(event.is_ok(), "{event:?}");
        if let Ok(event) = event {
            assert_eq!(event.raw_json(), line);
            assert_eq!(event.data_json(), r#"{"k":[1,2]}"#);
            assert!(event.is_ignorable());
            assert_eq!(event.seq(), 3);
        }
    }

    #[test]
    fn h_log_2_encode_rejects_negative_zero_with_pointer() {
        let draft = EventDraft::new("a/b", object(json!({"x": [-0.0]})));
        let error = Event::encode(0, 0, draft).err();
        assert_eq!(
            error.as_ref().map(EventError::code),
            Some("NON_LOSSLESS_JSON")
        );
        assert!(
            matches!(&error, Some(EventError::NonLossless { error, .. }) if error.pointer == "/data/x/0"),
            "{error:?}"
        );
    }

    #[test]
    fn h_log_2_encode_rejects_unsafe_integers_and_keeps_safe_ones() {
        let unsafe_positive = EventDraft::new(
            "a/b",
            object(json!({"n": {"m": 9_007_199_254_740_992_u64}})),
        );
        let error = Event::encode(0, 0, unsafe_positive).err();
        assert!(
            matches!(&error, Some(EventError::NonLossless { error, .. }) if error.pointer == "/data/n/m"),
            "{error:?}"
        );
        let unsafe_negative =
            EventDraft::new("a/b", object(json!({"n": [0, -9_007_199_254_740_992_i64]})));
        let error = Event::encode(0, 0, unsafe_negative).err();
        assert!(
            matches!(&error, Some(EventError::NonLossless { error, .. }) if error.pointer == "/data/n/1"),
            "{error:?}"
        );
        let data = object(
            json!({"max": 9_007_199_254_740_991_u64, "min": -9_007_199_254_740_991_i64, "f": 0.5}),
        );
        let kept = Event::encode_keeping_data(0, 0, EventDraft::new("a/b", data.clone()));
        assert_eq!(
            kept.as_ref()
                .map(|(event, data)| (event.data_json(), data.as_ref()))
                .ok(),
            Some((
                r#"{"max":9007199254740991,"min":-9007199254740991,"f":0.5}"#,
                Some(&data)
            ))
        );
    }

    #[test]
    fn parse_rejects_bad_data() {
        let not_object = Event::parse(r#"{"seq":0,"time_ms":0,"type":"a","data":[1]}"#);
        assert!(matches!(not_object, Err(EventError::DataNotObject { .. })));
        let unsafe_int = Event::parse(r#"{"seq":0,"time_ms":0,"type":"a","data":{"n":1e400}}"#);
        assert!(unsafe_int.is_err());
        let missing = Event::parse(r#"{"seq":0,"type":"a","data":{}}"#);
        assert!(matches!(missing, Err(EventError::Malformed(_))));
    }

    #[test]
    fn encode_then_parse_is_identity() {
        let draft = EventDraft::new("k", object(json!({"s": "a\"b\\c\u{1}", "n": 1.5})));
        let encoded = Event::encode(1, 2, draft);
        let reparsed = encoded
            .as_ref()
            .ok()
            .map(|event| Event::parse(event.raw_json()));
        assert_eq!(reparsed, encoded.ok().map(Ok));
    }
}
