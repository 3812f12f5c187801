//! The request journal (CC-JNL-1, CC-JNL-2): one durable record per model call in the
//! storage domain `context_care_requests`, table `records`, keyed `call_<callId>`.
//!
//! A record is `{version:1, sessionId, kind:'request', at, data}`. Its `data` moves
//! through the phases `ready` (priced and budgeted, written and made durable before the
//! dispatch decision) → `dispatched` → `settled`, or `ready` → `not-dispatched`. The
//! settled records are what calibration reads (CC-PRC-3), so a session's pricing
//! follows what the provider really counted.
//!
//! Writes go through the domain-wide queue, so they are serialized (per session
//! included); reads see acknowledged data only; [`RequestJournal::flush`] waits for
//! every queued write and returns a retained write error once.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use ccare_agent::domains::{Domain, DomainError, DomainSpec, PluginDomains, TableSpec};
use ccare_agent::{SettledOutcome, Settlement};
use ccare_core::{LlmFailure, SessionId};
use serde_json::{Value, json};
use tokio::sync::OnceCell;

use crate::pricing::{CalibrationRecord, JournalRecordKind, RawInput, RecordUsage, RequestOutcome};

/// The journal's storage domain (CC-JNL-1).
pub const JOURNAL_DOMAIN: &str = "context_care_requests";
/// The journal's one table.
pub const JOURNAL_TABLE: &str = "records";
/// `dispatchBasis` of a dispatched record: the request was handed to the provider's
/// stream; this is not proof that it was sent.
pub const DISPATCH_BASIS: &str = "prepared-stream-handoff";

/// One journal record as read back. The record is shared with the domain's rows, not
/// copied: a request record carries the surface seqs it was built from, and the
/// journal is read at every boundary.
#[derive(Debug, Clone, PartialEq)]
pub struct JournalEntry {
    /// `call_<callId>` or `action_<uuid>`.
    pub key: String,
    /// When it was first written (ms since the epoch, the host clock).
    pub at: i64,
    /// Request or maintenance.
    pub kind: JournalRecordKind,
    record: Arc<Value>,
}

impl JournalEntry {
    /// The phase fields (`Null` if the record has none).
    pub fn data(&self) -> &Value {
        self.record.get("data").unwrap_or(&Value::Null)
    }
}

/// The request journal of one mounted plugin; the domain opens on first use.
pub struct RequestJournal {
    domains: PluginDomains,
    domain: OnceCell<Domain>,
    dispatch_order: AtomicU64,
}

impl std::fmt::Debug for RequestJournal {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter
            .debug_struct("RequestJournal")
            .field("open", &self.domain.initialized())
            .finish_non_exhaustive()
    }
}

fn record_key(call_id: &str) -> String {
    format!("call_{call_id}")
}

impl RequestJournal {
    /// A journal over the plugin's storage domains.
    pub fn new(domains: PluginDomains) -> Self {
        Self {
            domains,
            domain: OnceCell::new(),
            dispatch_order: AtomicU64::new(0),
        }
    }

    /// The open domain, opening it on first use; `dispatchOrder` continues after the
    /// largest one stored.
    pub async fn open(&self) -> Result<&Domain, DomainError> {
        self.domain
            .get_or_try_init(|| async {
                let domain = self
                    .domains
                    .open(DomainSpec::new(JOURNAL_DOMAIN, 1).table(TableSpec::new(JOURNAL_TABLE)))
                    .await?;
                let table = domain.table(JOURNAL_TABLE)?;
                let largest = table
                    .entries("call_")
                    .iter()
                    .filter_map(|(_, record)| record.pointer("/data/dispatchOrder")?.as_u64())
                    .max()
                    .unwrap_or(0);
                self.dispatch_order.store(largest, Ordering::SeqCst);
                Ok(domain)
            })
            .await
    }

    /// Queues the `ready` record of a call (CC-JNL-2); `data` holds the phase fields
    /// (`callId`, pricing, budget, …) and gets `phase:'ready'`.
    pub async fn ready(
        &self,
        session: &SessionId,
        call_id: &str,
        at: i64,
        mut data: Value,
    ) -> Result<(), DomainError> {
        let table = self.open().await?.table(JOURNAL_TABLE)?;
        if let Some(object) = data.as_object_mut() {
            object.insert("phase".to_owned(), json!("ready"));
        }
        table.put(
            &record_key(call_id),
            json!({
                "version": 1,
                "sessionId": session.as_str(),
                "kind": "request",
                "at": at,
                "data": data,
            }),
        )?;
        Ok(())
    }

    /// Queues `dispatched:true` with the next `dispatchOrder`.
    pub fn dispatched(&self, call_id: &str) -> Result<(), DomainError> {
        let order = self.dispatch_order.fetch_add(1, Ordering::SeqCst) + 1;
        self.patch(call_id, move |data| {
            data.insert("phase".to_owned(), json!("dispatched"));
            data.insert("dispatched".to_owned(), json!(true));
            data.insert("dispatchOrder".to_owned(), json!(order));
            data.insert("dispatchBasis".to_owned(), json!(DISPATCH_BASIS));
        })
    }

    /// Queues the settlement of a dispatched call.
    pub fn settled(&self, settlement: &Settlement) -> Result<(), DomainError> {
        let phase = match settlement.outcome {
            SettledOutcome::Completed | SettledOutcome::Interrupted => "settled",
            SettledOutcome::Failed => "failed",
        };
        let attempt_id = format!("{}#{}", settlement.call_id, settlement.attempt);
        let outcome = settlement.outcome.as_str();
        let event_seq = settlement.event_seq;
        let event_type = settlement.event_type;
        let usage = settlement
            .usage
            .map(RecordUsage::from)
            .and_then(|usage| serde_json::to_value(usage).ok())
            .unwrap_or(Value::Null);
        self.patch(&settlement.call_id, move |data| {
            data.insert("phase".to_owned(), json!(phase));
            data.insert("attemptId".to_owned(), json!(attempt_id));
            data.insert("outcome".to_owned(), json!(outcome));
            data.insert("eventSeq".to_owned(), json!(event_seq));
            data.insert("eventType".to_owned(), json!(event_type));
            data.insert("usage".to_owned(), usage.clone());
        })
    }

    /// Queues the failure of a call that was never handed off.
    pub fn not_dispatched(&self, call_id: &str, failure: &LlmFailure) -> Result<(), DomainError> {
        let code = failure.code.as_str();
        let message = failure.message.clone();
        self.patch(call_id, move |data| {
            data.insert("phase".to_owned(), json!("failed"));
            data.insert("outcome".to_owned(), json!("not-dispatched"));
            data.insert(
                "failure".to_owned(),
                json!({"code": code, "message": message}),
            );
        })
    }

    /// Edits the `data` of an existing record in the queue; a record that is not there
    /// (its `ready` write failed) is left absent.
    fn patch(
        &self,
        call_id: &str,
        edit: impl Fn(&mut serde_json::Map<String, Value>) + Send + 'static,
    ) -> Result<(), DomainError> {
        let Some(domain) = self.domain.get() else {
            return Ok(());
        };
        domain
            .table(JOURNAL_TABLE)?
            .update(&record_key(call_id), move |current| {
                let mut record = current?.clone();
                if let Some(data) = record.get_mut("data").and_then(Value::as_object_mut) {
                    edit(data);
                }
                Some(record)
            })?;
        Ok(())
    }

    /// Queues a maintenance record (CC-JNL-3) `action_<operation_id>`, replacing the
    /// previous state of the same action: `data` holds every field so far.
    pub async fn maintenance(
        &self,
        session: &SessionId,
        operation_id: &str,
        at: i64,
        data: Value,
    ) -> Result<(), DomainError> {
        let table = self.open().await?.table(JOURNAL_TABLE)?;
        table.put(
            &format!("action_{operation_id}"),
            json!({
                "version": 1,
                "sessionId": session.as_str(),
                "kind": "maintenance",
                "at": at,
                "data": data,
            }),
        )?;
        Ok(())
    }

    /// Waits until every queued write is durable; returns a write error that nothing
    /// reported yet (CC-JNL-1).
    pub async fn flush(&self) -> Result<(), DomainError> {
        self.open().await?.flush(None).await
    }

    /// The session's acknowledged records, by `at`, then by key (CC-JNL-1 `list`).
    pub async fn list(&self, session: &SessionId) -> Result<Vec<JournalEntry>, DomainError> {
        let table = self.open().await?.table(JOURNAL_TABLE)?;
        let mut entries: Vec<JournalEntry> = table
            .entries("")
            .into_iter()
            .filter(|(_, record)| {
                record.get("sessionId").and_then(Value::as_str) == Some(session.as_str())
            })
            .map(|(key, record)| JournalEntry {
                key,
                at: record.get("at").and_then(Value::as_i64).unwrap_or(0),
                kind: match record.get("kind").and_then(Value::as_str) {
                    Some("maintenance") => JournalRecordKind::Maintenance,
                    _ => JournalRecordKind::Request,
                },
                record,
            })
            .collect();
        entries.sort_by(|a, b| a.at.cmp(&b.at).then_with(|| a.key.cmp(&b.key)));
        Ok(entries)
    }
}

/// What calibration reads of a journal entry (CC-PRC-3); fields that are missing or
/// malformed read as absent, which makes the record ineligible.
pub fn calibration_record(entry: &JournalEntry) -> CalibrationRecord {
    if entry.kind == JournalRecordKind::Maintenance {
        return CalibrationRecord::maintenance();
    }
    let data = entry.data();
    let text = |key: &str| data.get(key).and_then(Value::as_str).map(str::to_owned);
    CalibrationRecord {
        kind: JournalRecordKind::Request,
        call_id: text("callId").unwrap_or_default(),
        dispatched: data.get("dispatched").and_then(Value::as_bool) == Some(true),
        outcome: data
            .get("outcome")
            .cloned()
            .and_then(|outcome| serde_json::from_value::<RequestOutcome>(outcome).ok()),
        purpose: text("purpose"),
        event_type: text("eventType"),
        event_seq: data.get("eventSeq").and_then(Value::as_u64),
        header_key: text("calibrationHeaderKey"),
        raw_input: data
            .get("rawInput")
            .cloned()
            .and_then(|raw| serde_json::from_value::<RawInput>(raw).ok()),
        usage: data
            .get("usage")
            .cloned()
            .and_then(|usage| serde_json::from_value::<RecordUsage>(usage).ok()),
    }
}
