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
//! every queued write and returns a retained write error once. The records' types are
//! in [`records`].

pub mod records;

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use ccare_agent::domains::{Domain, DomainError, DomainSpec, PluginDomains, TableSpec};
use ccare_agent::{SettledOutcome, Settlement};
use ccare_core::{LlmFailure, SessionId};
use serde_json::Value;
use tokio::sync::OnceCell;

use crate::pricing::{CalibrationRecord, JournalRecordKind, RecordUsage, RequestOutcome};
use records::{
    JournalRecord, MaintenanceView, PhaseFields, RecordFailure, RecordHead, RequestPhase,
    RequestRecord, RequestView, view,
};

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
    /// The phase fields as stored (`Null` if the record has none).
    pub fn data(&self) -> &Value {
        match &*self.record {
            Value::Object(record) => record.get("data").unwrap_or(&Value::Null),
            _ => &Value::Null,
        }
    }

    /// What readers read of a request record; every field absent for a maintenance
    /// record or one that does not decode.
    pub fn request(&self) -> RequestView<'_> {
        match self.kind {
            JournalRecordKind::Request => view(self.data()).unwrap_or_default(),
            JournalRecordKind::Maintenance => RequestView::default(),
        }
    }

    /// What readers read of a maintenance record; every field absent for a request
    /// record or one that does not decode.
    pub fn maintenance(&self) -> MaintenanceView<'_> {
        match self.kind {
            JournalRecordKind::Maintenance => MaintenanceView::of(self.data()),
            JournalRecordKind::Request => MaintenanceView::default(),
        }
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
                    .filter_map(|(_, record)| {
                        let data = match &**record {
                            Value::Object(record) => record.get("data")?,
                            _ => return None,
                        };
                        view::<RequestView<'_>>(data)?.dispatch_order
                    })
                    .max()
                    .unwrap_or(0);
                self.dispatch_order.store(largest, Ordering::SeqCst);
                Ok(domain)
            })
            .await
    }

    /// Queues the `ready` record of a call (CC-JNL-2): `record` and `phase:'ready'`.
    pub async fn ready(
        &self,
        session: &SessionId,
        at: i64,
        record: &RequestRecord,
    ) -> Result<(), DomainError> {
        let table = self.open().await?.table(JOURNAL_TABLE)?;
        let mut data = match serde_json::to_value(record) {
            Ok(Value::Object(data)) => data,
            Ok(_) | Err(_) => ccare_core::JsonObject::new(),
        };
        PhaseFields::phase(RequestPhase::Ready).merge_into(&mut data);
        table.put(
            &record_key(&record.call_id),
            stored(session, JournalRecordKind::Request, at, Value::Object(data)),
        )?;
        Ok(())
    }

    /// Queues `dispatched:true` with the next `dispatchOrder`.
    pub fn dispatched(&self, call_id: &str) -> Result<(), DomainError> {
        let order = self.dispatch_order.fetch_add(1, Ordering::SeqCst) + 1;
        self.patch(
            call_id,
            PhaseFields {
                dispatched: Some(true),
                dispatch_order: Some(order),
                dispatch_basis: Some(DISPATCH_BASIS),
                ..PhaseFields::phase(RequestPhase::Dispatched)
            },
        )
    }

    /// Queues the settlement of a dispatched call.
    pub fn settled(&self, settlement: &Settlement) -> Result<(), DomainError> {
        let (phase, outcome) = match settlement.outcome {
            SettledOutcome::Completed => (RequestPhase::Settled, RequestOutcome::Completed),
            SettledOutcome::Interrupted => (RequestPhase::Settled, RequestOutcome::Interrupted),
            SettledOutcome::Failed => (RequestPhase::Failed, RequestOutcome::Failed),
        };
        self.patch(
            &settlement.call_id,
            PhaseFields {
                attempt_id: Some(format!("{}#{}", settlement.call_id, settlement.attempt)),
                outcome: Some(outcome),
                event_seq: Some(settlement.event_seq),
                event_type: Some(settlement.event_type),
                usage: Some(settlement.usage.map(RecordUsage::from)),
                ..PhaseFields::phase(phase)
            },
        )
    }

    /// Queues the failure of a call that was never handed off.
    pub fn not_dispatched(&self, call_id: &str, failure: &LlmFailure) -> Result<(), DomainError> {
        self.patch(
            call_id,
            PhaseFields {
                outcome: Some(RequestOutcome::NotDispatched),
                failure: Some(RecordFailure {
                    code: failure.code.as_str().to_owned(),
                    message: failure.message.clone(),
                }),
                ..PhaseFields::phase(RequestPhase::Failed)
            },
        )
    }

    /// Merges `fields` into the `data` of an existing record in the queue; a record
    /// that is not there (its `ready` write failed) is left absent.
    fn patch(&self, call_id: &str, fields: PhaseFields) -> Result<(), DomainError> {
        let Some(domain) = self.domain.get() else {
            return Ok(());
        };
        domain
            .table(JOURNAL_TABLE)?
            .update(&record_key(call_id), move |current| {
                let mut record = current?.clone();
                if let Some(data) = record.get_mut("data").and_then(Value::as_object_mut) {
                    fields.merge_into(data);
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
            stored(session, JournalRecordKind::Maintenance, at, data),
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
            .filter_map(|(key, record)| {
                let head = view::<RecordHead<'_>>(&record)?;
                (head.session_id == session.as_str())
                    .then_some((head.at, head.kind))
                    .map(|(at, kind)| JournalEntry {
                        key,
                        at,
                        kind,
                        record,
                    })
            })
            .collect();
        entries.sort_by(|a, b| a.at.cmp(&b.at).then_with(|| a.key.cmp(&b.key)));
        Ok(entries)
    }
}

/// A record as stored: the envelope around `data`.
fn stored(session: &SessionId, kind: JournalRecordKind, at: i64, data: Value) -> Value {
    serde_json::to_value(JournalRecord {
        version: 1,
        session_id: session.as_str(),
        kind,
        at,
        data,
    })
    .unwrap_or(Value::Null)
}

/// What calibration reads of a journal entry (CC-PRC-3); fields that are missing read
/// as absent, which makes the record ineligible.
pub fn calibration_record(entry: &JournalEntry) -> CalibrationRecord {
    if entry.kind == JournalRecordKind::Maintenance {
        return CalibrationRecord::maintenance();
    }
    let request = entry.request();
    let text = |text: Option<&str>| text.map(str::to_owned);
    CalibrationRecord {
        kind: JournalRecordKind::Request,
        call_id: text(request.call_id).unwrap_or_default(),
        dispatched: request.dispatched == Some(true),
        outcome: request.outcome,
        purpose: text(request.purpose),
        event_type: text(request.event_type),
        event_seq: request.event_seq,
        header_key: text(request.calibration_header_key),
        raw_input: request.raw_input,
        usage: request.usage,
    }
}
