//! The request journal's records as types (CC-JNL-1, CC-JNL-2), written in the field
//! order the journal has always had.
//!
//! A record is `{version:1, sessionId, kind, at, data}` ([`JournalRecord`]). A request
//! record's `data` starts as the [`RequestRecord`] fields plus `phase:'ready'`; each
//! later phase merges a [`PhaseFields`] into it (an existing key keeps its place, a
//! new one goes last), so `data` reads `…ready fields, phase, dispatched,
//! dispatchOrder, dispatchBasis, attemptId, outcome, eventSeq, eventType, usage` or
//! `…, phase, outcome, failure`.
//!
//! A maintenance record's `data` (CC-JNL-3) is written by each action in its own field
//! order (`maintenance.rs`), so it is stored as that action builds it.
//!
//! Readers decode the borrowed views [`RecordHead`], [`RequestView`] and
//! [`MaintenanceView`]: the journal is read at every boundary, and a request record
//! carries every surface seq it was built from, so a reader decodes only the fields it
//! uses, without copying the record.

use ccare_core::JsonObject;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::budget::{Budget, BudgetAssessment};
use crate::pricing::{JournalRecordKind, PricingBasis, RawInput, RecordUsage, RequestOutcome};

/// A journal record as stored (CC-JNL-1).
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct JournalRecord<'a, D> {
    /// Always 1.
    pub version: u32,
    /// The session it belongs to.
    pub session_id: &'a str,
    /// Request or maintenance.
    pub kind: JournalRecordKind,
    /// When it was first written (ms since the epoch, the host clock).
    pub at: i64,
    /// The phase fields.
    pub data: D,
}

/// The `data` of a request record at `ready` (CC-JNL-2): what the request was built
/// from, how it was priced and budgeted. Written with `phase:'ready'` after it.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct RequestRecord {
    /// The provider call.
    pub call_id: String,
    /// The session's head when the request was checked.
    pub log_revision: u64,
    /// The surface seqs the request was built from.
    pub source_seqs: Vec<u64>,
    /// The calibration header (CC-PRC-3).
    pub source_header: SourceHeader,
    /// Hash of the surface messages.
    pub source_messages_hash: String,
    /// `conversation`, `compaction` or `session-title`.
    pub purpose: String,
    /// The route the request goes to.
    pub route: RecordRoute,
    /// Hash of the system prompt, tools and messages sent.
    pub input_hash: String,
    /// The pricing basis it was priced on.
    pub pricing_basis: PricingBasis,
    /// The budget it was checked against (`null` when no capacity is known).
    pub budget: Option<Budget>,
    /// Its input placed against the budget.
    pub assessment: BudgetAssessment,
    /// Its unscaled price.
    pub raw_input: RawInput,
    /// The unscaled tokens of its tool list.
    pub tools_tokens: u64,
    /// `Q`: its scaled input price.
    pub input_tokens: u64,
    /// The calibration header key (CC-PRC-3).
    pub calibration_header_key: String,
}

/// The calibration header of a request (CC-PRC-3): its route and sampling options.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct SourceHeader {
    /// The provider.
    pub provider: String,
    /// The model.
    pub model: String,
    /// The reasoning effort asked for.
    pub reasoning_effort: Option<String>,
    /// The temperature asked for.
    pub temperature: Option<f64>,
    /// The output limit asked for.
    pub max_tokens: Option<u32>,
}

/// The route a request goes to.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct RecordRoute {
    /// The provider.
    pub provider: String,
    /// The model.
    pub model: String,
    /// The output limit asked for.
    pub max_tokens: Option<u32>,
    /// The reasoning effort asked for.
    pub reasoning_effort: Option<String>,
    /// The temperature asked for.
    pub temperature: Option<f64>,
}

/// A request record's phase.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum RequestPhase {
    /// Priced and budgeted, durable before the dispatch decision.
    Ready,
    /// Handed to the provider's stream.
    Dispatched,
    /// Answered (completed or interrupted).
    Settled,
    /// Failed: at the provider, or refused before dispatch.
    Failed,
}

/// The fields one phase of a request record sets, in the order they are written.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PhaseFields {
    /// The new phase.
    pub phase: RequestPhase,
    /// Dispatched: always true.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub dispatched: Option<bool>,
    /// Dispatched: the order of dispatch in this journal.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub dispatch_order: Option<u64>,
    /// Dispatched: what "dispatched" is based on ([`crate::journal::DISPATCH_BASIS`]).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub dispatch_basis: Option<&'static str>,
    /// Settled: `<callId>#<attempt>`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub attempt_id: Option<String>,
    /// Settled or refused: how it ended.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub outcome: Option<RequestOutcome>,
    /// Settled: the event it committed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub event_seq: Option<u64>,
    /// Settled: that event's type.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub event_type: Option<&'static str>,
    /// Settled: the provider's usage (`null` when it reported none).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub usage: Option<Option<RecordUsage>>,
    /// Refused before dispatch: why.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub failure: Option<RecordFailure>,
}

/// A failure as a record keeps it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RecordFailure {
    /// The stable code.
    pub code: String,
    /// What happened.
    pub message: String,
}

impl PhaseFields {
    /// Only the phase.
    pub fn phase(phase: RequestPhase) -> Self {
        Self {
            phase,
            dispatched: None,
            dispatch_order: None,
            dispatch_basis: None,
            attempt_id: None,
            outcome: None,
            event_seq: None,
            event_type: None,
            usage: None,
            failure: None,
        }
    }

    /// Merges these fields into a record's `data`: a key already there keeps its place.
    pub(crate) fn merge_into(&self, data: &mut JsonObject) {
        if let Ok(Value::Object(fields)) = serde_json::to_value(self) {
            for (key, value) in fields {
                data.insert(key, value);
            }
        }
    }
}

/// What every reader reads of a record: whose it is, when, and which kind.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RecordHead<'a> {
    /// The session.
    #[serde(borrow)]
    pub session_id: &'a str,
    /// When it was first written.
    #[serde(default)]
    pub at: i64,
    /// Request or maintenance.
    pub kind: JournalRecordKind,
}

/// What readers read of a request record's `data` (calibration, the hysteresis
/// replay, the latest header); every field is absent when the record lacks it.
#[derive(Debug, Clone, PartialEq, Default, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct RequestView<'a> {
    /// The provider call.
    #[serde(borrow)]
    pub call_id: Option<&'a str>,
    /// `conversation`, `compaction`, ….
    #[serde(borrow)]
    pub purpose: Option<&'a str>,
    /// The budget it was checked against.
    pub budget: Option<BudgetView>,
    /// Its unscaled price.
    pub raw_input: Option<RawInput>,
    /// The unscaled tokens of its tool list.
    pub tools_tokens: Option<u64>,
    /// `Q`.
    pub input_tokens: Option<u64>,
    /// The calibration header key.
    #[serde(borrow)]
    pub calibration_header_key: Option<&'a str>,
    /// Set once dispatched.
    pub dispatched: Option<bool>,
    /// The order of dispatch in this journal.
    pub dispatch_order: Option<u64>,
    /// How it ended.
    pub outcome: Option<RequestOutcome>,
    /// The event it committed.
    pub event_seq: Option<u64>,
    /// That event's type.
    #[serde(borrow)]
    pub event_type: Option<&'a str>,
    /// The provider's usage.
    pub usage: Option<RecordUsage>,
}

/// The thresholds of a recorded budget, for the hysteresis replay.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct BudgetView {
    /// `S`.
    pub soft_input: Option<i64>,
    /// `L`.
    pub release_target: Option<i64>,
}

/// What readers read of a maintenance record's `data` (CC-JNL-3).
#[derive(Debug, Clone, PartialEq, Default, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct MaintenanceView<'a> {
    /// The operation id.
    #[serde(borrow)]
    pub operation_id: Option<&'a str>,
    /// The action: `summary`, `prune`, `deep-rest`, ….
    #[serde(borrow)]
    pub action: Option<&'a str>,
    /// Why it ran: `requested`, `soft-threshold`, ….
    #[serde(borrow)]
    pub reason: Option<&'a str>,
    /// The phase: `started`, `committed`, `failed`, `no-useful-range`, ….
    #[serde(borrow)]
    pub phase: Option<&'a str>,
    /// How it ended: `committed` or `failed` (absent while it runs).
    #[serde(borrow)]
    pub outcome: Option<&'a str>,
    /// The next request's input before the action (tokens).
    pub before_input: Option<u64>,
    /// The next request's input after the action (tokens).
    pub after_input: Option<u64>,
    /// Why it failed.
    pub error: Option<RecordFailure>,
    /// The no-useful-range memo key of the selection (CC-MNT-5).
    #[serde(borrow)]
    pub proposal_key: Option<&'a str>,
    /// What the action replaced, one entry per replace node it appended.
    pub replacements: Vec<Replacement>,
}

impl<'a> MaintenanceView<'a> {
    /// The view of a maintenance record's `data` (every field absent when it does not
    /// decode).
    pub fn of(data: &'a Value) -> Self {
        view(data).unwrap_or_default()
    }
}

/// What the journal's open reads of every stored record, straight from its bytes
/// ([`ccare_agent::domains::Table::stored_page_as`]): its head, and the
/// `dispatchOrder` in its `data`. Any JSON object reads as one: a field of the wrong
/// type reads as absent, and nothing else of `data` (a request's surface seqs, its
/// pricing) is built.
#[derive(Debug, Clone, PartialEq, Default, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub(crate) struct StoredHead {
    session_id: Option<Value>,
    at: Option<Value>,
    kind: Option<Value>,
    data: StoredOrder,
}

impl StoredHead {
    /// The session, time and kind, as [`RecordHead`] reads them (`at` absent reads
    /// as 0); `None` when one of them is not what it should be.
    pub(crate) fn head(&self) -> Option<(&str, i64, JournalRecordKind)> {
        let session = self.session_id.as_ref()?.as_str()?;
        let at = match &self.at {
            None => 0,
            Some(at) => at.as_i64()?,
        };
        let kind = JournalRecordKind::deserialize(self.kind.as_ref()?).ok()?;
        Some((session, at, kind))
    }

    /// The `dispatchOrder` in `data`, when it is a non-negative integer.
    pub(crate) fn dispatch_order(&self) -> Option<u64> {
        self.data.0
    }
}

/// Whether a key of a record's `data` is `dispatchOrder`, read without copying it.
struct OrderKey(bool);

impl<'de> Deserialize<'de> for OrderKey {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Visit;
        impl serde::de::Visitor<'_> for Visit {
            type Value = OrderKey;

            fn expecting(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                formatter.write_str("a key")
            }

            fn visit_str<E>(self, key: &str) -> Result<OrderKey, E> {
                Ok(OrderKey(key == "dispatchOrder"))
            }
        }
        deserializer.deserialize_str(Visit)
    }
}

/// The `dispatchOrder` of a record's `data`, read without building the rest of it;
/// absent when `data` is not an object or holds no such integer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
struct StoredOrder(Option<u64>);

impl<'de> Deserialize<'de> for StoredOrder {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Visit;
        impl<'de> serde::de::Visitor<'de> for Visit {
            type Value = StoredOrder;

            fn expecting(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                formatter.write_str("any JSON value")
            }

            fn visit_map<A: serde::de::MapAccess<'de>>(
                self,
                mut map: A,
            ) -> Result<StoredOrder, A::Error> {
                let mut order = None;
                while let Some(OrderKey(is_order)) = map.next_key::<OrderKey>()? {
                    if is_order {
                        order = map.next_value::<Value>()?.as_u64();
                    } else {
                        map.next_value::<serde::de::IgnoredAny>()?;
                    }
                }
                Ok(StoredOrder(order))
            }

            fn visit_seq<A: serde::de::SeqAccess<'de>>(
                self,
                mut seq: A,
            ) -> Result<StoredOrder, A::Error> {
                while seq.next_element::<serde::de::IgnoredAny>()?.is_some() {}
                Ok(StoredOrder(None))
            }

            fn visit_bool<E>(self, _: bool) -> Result<StoredOrder, E> {
                Ok(StoredOrder(None))
            }

            fn visit_i64<E>(self, _: i64) -> Result<StoredOrder, E> {
                Ok(StoredOrder(None))
            }

            fn visit_u64<E>(self, _: u64) -> Result<StoredOrder, E> {
                Ok(StoredOrder(None))
            }

            fn visit_f64<E>(self, _: f64) -> Result<StoredOrder, E> {
                Ok(StoredOrder(None))
            }

            fn visit_str<E>(self, _: &str) -> Result<StoredOrder, E> {
                Ok(StoredOrder(None))
            }

            fn visit_unit<E>(self) -> Result<StoredOrder, E> {
                Ok(StoredOrder(None))
            }
        }
        deserializer.deserialize_any(Visit)
    }
}

/// One replace node a maintenance action appended (CC-JNL-3 `replacements[]`).
#[derive(Debug, Clone, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct Replacement {
    /// The replace node's seq.
    pub new_seq: Option<u64>,
    /// The first live seq it shadows.
    pub old_start_seq: Option<u64>,
    /// The last live seq it shadows.
    pub old_end_seq: Option<u64>,
    /// Every seq it shadows.
    pub source_seqs: Vec<u64>,
}

/// Decodes a view of `value`, borrowing its strings.
pub(crate) fn view<'a, T: Deserialize<'a>>(value: &'a Value) -> Option<T> {
    T::deserialize(value).ok()
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::StoredHead;
    use crate::pricing::JournalRecordKind;

    fn read(json: &str) -> StoredHead {
        serde_json::from_str(json).unwrap()
    }

    #[test]
    fn a_stored_head_reads_the_head_and_the_dispatch_order_and_nothing_else() {
        let full = read(
            r#"{"version":1,"sessionId":"s-1","kind":"request","at":5,
                "data":{"sourceSeqs":[1,2,{"x":[3]}],"dispatchOrder":7,"usage":{"inputTokens":9}}}"#,
        );
        assert_eq!(full.head(), Some(("s-1", 5, JournalRecordKind::Request)));
        assert_eq!(full.dispatch_order(), Some(7));

        // `at` absent reads as 0, as the borrowed head reads it; no order.
        let maintenance = read(r#"{"sessionId":"s-2","kind":"maintenance","data":"text"}"#);
        assert_eq!(
            maintenance.head(),
            Some(("s-2", 0, JournalRecordKind::Maintenance))
        );
        assert_eq!(maintenance.dispatch_order(), None);

        // A field of the wrong type reads as absent; the others still read.
        let odd = read(r#"{"sessionId":5,"kind":"request","at":1,"data":{"dispatchOrder":8}}"#);
        assert_eq!(odd.head(), None);
        assert_eq!(odd.dispatch_order(), Some(8));
        for data in [
            r#"{"dispatchOrder":-1}"#,
            r#"{"dispatchOrder":"7"}"#,
            r#"[1,2]"#,
            "null",
            "true",
            "2.5",
        ] {
            let record = read(&format!(
                r#"{{"sessionId":"s","kind":"request","at":"late","data":{data}}}"#
            ));
            assert_eq!(record.dispatch_order(), None, "{data}");
            assert_eq!(record.head(), None, "`at` is not an integer");
        }
        assert_eq!(
            read(r#"{"sessionId":"s","kind":"other","at":1}"#).head(),
            None,
            "an unknown kind"
        );

        // An escaped key is the key it spells.
        let escaped = read(r#"{"data":{"dispatch\u004frder":3}}"#);
        assert_eq!(escaped.dispatch_order(), Some(3));
    }
}
