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
//!
//! **By session.** The records keep their keys (`call_<callId>`, `action_<uuid>`); the
//! table `sessions` indexes them by session: a row `<sessionId>/<record key>` holding
//! `{at, kind}` for each record, written right after the record's first write on the
//! same queue. [`RequestJournal::list`] reads the session's index rows (a range of
//! store keys), never every session's records. Rows stored before the index existed
//! (or whose index write was lost in a crash) are indexed when the journal opens, so
//! nothing stored is lost. Each session keeps its newest `journal_keep` records of each
//! kind ([`crate::config::CareConfig::journal_keep`]): the oldest beyond it are deleted,
//! record first, when the session writes a new record and when the journal opens.
//! Each session has its own write stamp ([`RequestJournal::writes`]), so a reader that
//! keeps what it read of a session (the frozen pricing, the quiet start) reads again
//! only after that session wrote, never because another one did; and what a session's
//! records decode to is kept per record version (`digest.rs`).

mod digest;
pub mod records;
mod residency;
mod stamps;

pub(crate) use digest::{DigestCache, JournalDigest};

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use ccare_agent::domains::{Domain, DomainError, DomainSpec, PluginDomains, TableSpec};
use ccare_agent::{SettledOutcome, Settlement};
use ccare_core::{LlmFailure, SessionId};
use serde::Deserialize;
use serde_json::Value;
use tokio::sync::OnceCell;

use crate::pricing::{CalibrationRecord, JournalRecordKind, RecordUsage, RequestOutcome};
use records::{
    JournalRecord, MaintenanceView, PhaseFields, RecordFailure, RecordHead, RequestPhase,
    RequestRecord, RequestView, StoredHead, view,
};

/// The journal's storage domain (CC-JNL-1).
pub const JOURNAL_DOMAIN: &str = "context_care_requests";
/// The journal's records table.
pub const JOURNAL_TABLE: &str = "records";
/// The journal's index by session: `<sessionId>/<record key>` → `{at, kind}`.
pub const SESSION_INDEX_TABLE: &str = "sessions";
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
    keep: u64,
    /// Each session's write stamp ([`stamps`]): a reader that read it before a flush
    /// and sees it unchanged later knows the session's records have not changed since.
    stamps: Arc<stamps::Stamps>,
    /// The sessions whose rows memory holds ([`residency`]).
    residency: Arc<residency::Residency>,
}

impl std::fmt::Debug for RequestJournal {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter
            .debug_struct("RequestJournal")
            .field("open", &self.domain.initialized())
            .finish_non_exhaustive()
    }
}

/// Rows per store page while the journal opens.
const OPEN_PAGE: usize = 512;

fn record_key(call_id: &str) -> String {
    format!("call_{call_id}")
}

/// The index row of a session's record.
fn index_key(session: &str, key: &str) -> String {
    format!("{session}/{key}")
}

/// What an index row holds: enough to order and trim a session's records without
/// reading them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
struct IndexRow {
    at: i64,
    kind: JournalRecordKind,
}

impl IndexRow {
    fn value(self) -> Value {
        serde_json::to_value(self).unwrap_or(Value::Null)
    }
}

impl RequestJournal {
    /// A journal over the plugin's storage domains.
    /// A journal over the plugin's storage domains, keeping the default
    /// [`crate::config::DEFAULT_JOURNAL_KEEP`] records per session and kind.
    pub fn new(domains: PluginDomains) -> Self {
        Self {
            domains,
            domain: OnceCell::new(),
            dispatch_order: AtomicU64::new(0),
            keep: crate::config::DEFAULT_JOURNAL_KEEP,
            stamps: Arc::default(),
            residency: Arc::default(),
        }
    }

    /// The journal keeping `keep` records per session and kind (`journal_keep`; at
    /// least 1).
    #[must_use]
    pub fn with_keep(mut self, keep: u64) -> Self {
        self.keep = keep.max(1);
        self
    }

    /// The session's write stamp: it changes whenever a write of the session's records
    /// is queued (and only then; another session's writes leave it as it is). Read it
    /// before a [`RequestJournal::flush`]: while it stays the same, every later
    /// [`RequestJournal::list`] of the session sees what a list after that flush saw.
    pub fn writes(&self, session: &SessionId) -> u64 {
        self.stamps.of(session.as_str())
    }

    /// Queues the writes of `queue` as writes of `session` (`None`: not known), stamped
    /// before and after.
    fn writing<T>(&self, session: Option<&str>, queue: impl FnOnce() -> T) -> T {
        self.stamps.stamp(session);
        let queued = queue();
        self.stamps.stamp(session);
        queued
    }

    /// The open domain, opening it on first use: rows without an index row are
    /// indexed, each session is trimmed to `journal_keep` (both settled before the
    /// domain is handed out), and `dispatchOrder` continues after the largest one
    /// stored. Both tables are on demand: the open reads the store a page at a time
    /// and memory keeps none of it ([`residency`]).
    pub async fn open(&self) -> Result<&Domain, DomainError> {
        self.domain
            .get_or_try_init(|| async {
                let domain = self
                    .domains
                    .open(
                        // One queue per record and one per session's index rows:
                        // a request waits for its own record to be durable, never
                        // for the writes other sessions queued before it.
                        DomainSpec::new(JOURNAL_DOMAIN, 1)
                            .table(TableSpec::by(JOURNAL_TABLE, str::to_owned).on_demand())
                            .table(TableSpec::by_first_segment(SESSION_INDEX_TABLE).on_demand()),
                    )
                    .await?;
                let largest = self.reindex(&domain).await?;
                // What the reindex queued (index rows, trims) is settled before anything
                // is read: a list reads acknowledged index rows only.
                domain.flush(None).await?;
                self.dispatch_order.store(largest, Ordering::SeqCst);
                // The rows the reindex wrote: memory keeps only the sessions this
                // process drives from now on.
                domain.table(JOURNAL_TABLE)?.evict_prefix("");
                domain.table(SESSION_INDEX_TABLE)?.evict_prefix("");
                Ok(domain)
            })
            .await
    }

    /// Keeps `session`'s records in memory, loading them from the store the first time
    /// ([`residency`]): for a session this process drives, until
    /// [`RequestJournal::release`]. The journal's writes of a session call it first.
    pub async fn keep_resident(&self, session: &SessionId) -> Result<(), DomainError> {
        self.resident(session).await.map(|_| ())
    }

    /// Notes that `session` was just created in this process (created, imported or
    /// forked: an id new to the store), so it has no records: its first use makes it
    /// resident without reading the store ([`residency`]).
    pub fn note_created(&self, session: &SessionId) {
        self.residency.note_created(session);
    }

    /// The open domain, with `session` resident.
    async fn resident(&self, session: &SessionId) -> Result<&Domain, DomainError> {
        let domain = self.open().await?;
        self.residency.keep(domain, session.as_str()).await?;
        Ok(domain)
    }

    /// Lets `session`'s records leave memory (its actor stopped): they are evicted
    /// once its queued writes have settled, unless it is kept resident again first or
    /// a call of it is still in flight (its last phase evicts them then). Nothing
    /// stored changes; a later [`RequestJournal::list`] reads the store.
    pub fn release(&self, session: &SessionId) {
        let Some(domain) = self.domain.get() else {
            return;
        };
        if self.residency.release(session.as_str()) {
            residency::evict_later(&self.residency, &self.stamps, domain, session.as_str());
        }
    }

    /// How many of the journal's rows (records and index rows) memory holds now.
    pub fn rows_in_memory(&self) -> usize {
        let Some(domain) = self.domain.get() else {
            return 0;
        };
        [JOURNAL_TABLE, SESSION_INDEX_TABLE]
            .into_iter()
            .filter_map(|name| domain.table(name).ok())
            .map(|table| table.count(""))
            .sum()
    }

    /// Queues the `ready` record of a call (CC-JNL-2): `record` and `phase:'ready'`.
    pub async fn ready(
        &self,
        session: &SessionId,
        at: i64,
        record: &RequestRecord,
    ) -> Result<(), DomainError> {
        let table = self.resident(session).await?.table(JOURNAL_TABLE)?;
        let mut data = match serde_json::to_value(record) {
            Ok(Value::Object(data)) => data,
            Ok(_) | Err(_) => ccare_core::JsonObject::new(),
        };
        PhaseFields::phase(RequestPhase::Ready).merge_into(&mut data);
        let key = record_key(&record.call_id);
        self.stamps.call(&record.call_id, session.as_str());
        let queued = self.writing(Some(session.as_str()), || {
            table.put(
                &key,
                stored(session, JournalRecordKind::Request, at, Value::Object(data)),
            )?;
            self.index(session, &key, at, JournalRecordKind::Request)
        });
        if queued.is_err() {
            // No record to patch: its later phases are not written.
            self.stamps.session_of(&record.call_id, true);
        }
        queued
    }

    /// Queues `dispatched:true` with the next `dispatchOrder`.
    pub fn dispatched(&self, call_id: &str) -> Result<(), DomainError> {
        let order = self.dispatch_order.fetch_add(1, Ordering::SeqCst) + 1;
        self.patch(
            call_id,
            false,
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
            true,
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
            true,
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
    /// that is not there (its `ready` write failed) is left absent. `last`: the call's
    /// final phase.
    fn patch(&self, call_id: &str, last: bool, fields: PhaseFields) -> Result<(), DomainError> {
        let Some(domain) = self.domain.get() else {
            return Ok(());
        };
        let session = self.stamps.session_of(call_id, last);
        let table = domain.table(JOURNAL_TABLE)?;
        self.writing(session.as_deref(), || {
            table.update(&record_key(call_id), move |current| {
                let mut record = current?.clone();
                if let Some(data) = record.get_mut("data").and_then(Value::as_object_mut) {
                    fields.merge_into(data);
                }
                Some(record)
            })
        })?;
        // The last phase of a call whose session was released while it ran: its rows
        // leave memory now.
        if last
            && let Some(session) = session.as_deref()
            && !self.residency.is_marked(session)
        {
            residency::evict_later(&self.residency, &self.stamps, domain, session);
        }
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
        let table = self.resident(session).await?.table(JOURNAL_TABLE)?;
        let key = format!("action_{operation_id}");
        self.writing(Some(session.as_str()), || {
            table.put(
                &key,
                stored(session, JournalRecordKind::Maintenance, at, data),
            )?;
            self.index(session, &key, at, JournalRecordKind::Maintenance)
        })
    }

    /// Queues the index row of a record just queued (unless it is indexed already),
    /// then trims the session's records of `kind` to `journal_keep`, counting it.
    fn index(
        &self,
        session: &SessionId,
        key: &str,
        at: i64,
        kind: JournalRecordKind,
    ) -> Result<(), DomainError> {
        let Some(domain) = self.domain.get() else {
            return Ok(());
        };
        let index = domain.table(SESSION_INDEX_TABLE)?;
        let row = index_key(session.as_str(), key);
        if index.get(&row).is_some() {
            return Ok(());
        }
        index.put(&row, IndexRow { at, kind }.value())?;
        // Fewer rows than the limit, counting the new one: nothing to trim, and no row
        // read (a long session keeps up to `journal_keep` of each kind, and this runs
        // at every request).
        let stored = index.count(&index_key(session.as_str(), ""));
        if stored < usize::try_from(self.keep).unwrap_or(usize::MAX) {
            return Ok(());
        }
        let mut rows = session_rows(&index, session.as_str(), kind);
        rows.retain(|(_, record)| record != key);
        // The new record is the newest; it counts against the limit.
        let keep = usize::try_from(self.keep.saturating_sub(1)).unwrap_or(usize::MAX);
        trim(domain, session.as_str(), rows, keep)
    }

    /// Indexes every record that has no index row (rows stored before the index, or
    /// whose index write was lost), drops index rows whose record is gone, and trims
    /// every session to `journal_keep` records of each kind; returns the largest
    /// `dispatchOrder` stored. Reads the store a page at a time, keeping the keys and
    /// heads it needs (a few dozen bytes a record), never the records.
    async fn reindex(&self, domain: &Domain) -> Result<u64, DomainError> {
        let table = domain.table(JOURNAL_TABLE)?;
        let index = domain.table(SESSION_INDEX_TABLE)?;
        let indexed: std::collections::HashSet<String> =
            index.stored_keys("").await?.into_iter().collect();
        // Every session's rows, read from the records (the index rows queued here are
        // not acknowledged yet).
        let mut sessions: std::collections::BTreeMap<String, Vec<(IndexRow, String)>> =
            std::collections::BTreeMap::new();
        let mut records: std::collections::HashSet<String> = std::collections::HashSet::new();
        let mut missing: Vec<(String, IndexRow)> = Vec::new();
        let mut largest = 0;
        let mut after: Option<String> = None;
        loop {
            // Each record's head and order, read from its bytes: the open builds no
            // record.
            let page = table
                .stored_page_as::<StoredHead>("", after.as_deref(), OPEN_PAGE)
                .await?;
            let full = page.len() == OPEN_PAGE;
            after = page.last().map(|(key, _)| key.clone());
            for (key, record) in page {
                records.insert(key.clone());
                let Some(record) = record else {
                    continue;
                };
                if key.starts_with("call_")
                    && let Some(order) = record.dispatch_order()
                {
                    largest = largest.max(order);
                }
                let Some((session, at, kind)) = record.head() else {
                    continue;
                };
                if SessionId::new(session).is_err() {
                    continue;
                }
                let row = IndexRow { at, kind };
                let index_row = index_key(session, &key);
                if !indexed.contains(&index_row) {
                    missing.push((index_row, row));
                }
                sessions
                    .entry(session.to_owned())
                    .or_default()
                    .push((row, key));
            }
            if !full {
                break;
            }
        }
        let dangling: Vec<&String> = indexed
            .iter()
            .filter(|row| {
                row.split_once('/')
                    .is_some_and(|(_, key)| !records.contains(key))
            })
            .collect();
        let keep = usize::try_from(self.keep).unwrap_or(usize::MAX);
        let mut trims = Vec::new();
        for (session, rows) in sessions {
            for kind in [JournalRecordKind::Request, JournalRecordKind::Maintenance] {
                let mut of_kind: Vec<(IndexRow, String)> = rows
                    .iter()
                    .filter(|(row, _)| row.kind == kind)
                    .cloned()
                    .collect();
                of_kind.sort_by(|a, b| a.0.at.cmp(&b.0.at).then_with(|| a.1.cmp(&b.1)));
                if of_kind.len() > keep {
                    trims.push((session.clone(), of_kind));
                }
            }
        }
        // The rows to delete are loaded before anything is queued (a delete works
        // against the row memory holds, and a load never lands beside a queued write).
        for row in &dangling {
            index.load(row).await?;
        }
        for (session, rows) in &trims {
            for (_, key) in rows.iter().take(rows.len() - keep) {
                table.load(key).await?;
                index.load(&index_key(session, key)).await?;
            }
        }
        for (row, value) in missing {
            index.put(&row, value.value())?;
        }
        for row in dangling {
            index.delete(row)?;
        }
        for (session, rows) in trims {
            trim(domain, &session, rows, keep)?;
        }
        Ok(largest)
    }

    /// Waits until every queued write is durable; returns a write error that nothing
    /// reported yet (CC-JNL-1).
    pub async fn flush(&self) -> Result<(), DomainError> {
        let through = self.stamps.sequence();
        self.open().await?.flush(None).await?;
        self.stamps.flushed(through);
        Ok(())
    }

    /// Waits until the record [`RequestJournal::ready`] queued for `call_id` is
    /// durable, and returns the oldest unreported failure among its writes: the request
    /// gate waits for its own record only (CC-BUD-6), neither for other sessions' writes
    /// nor for the record's index row. That row only finds the record again: it is
    /// settled by the session's next [`RequestJournal::flush_for`] (which reports a
    /// failure of it), and an open indexes a stored record that lacks one, so a crash
    /// before it is durable loses nothing.
    pub async fn flush_call(&self, call_id: &str) -> Result<(), DomainError> {
        self.open().await?.flush(Some(&record_key(call_id))).await
    }

    /// Waits until every write of `session` queued before the call is settled, so a
    /// [`RequestJournal::list`] of it sees them: a [`RequestJournal::flush`], skipped
    /// when a flush that succeeded already covered the session's latest write (a new
    /// session, say, or one whose last turn's records were flushed when it went
    /// idle). A failure of another write is then reported by the next flush.
    pub async fn flush_for(&self, session: &SessionId) -> Result<(), DomainError> {
        if self.stamps.settled(session.as_str()) {
            return Ok(());
        }
        self.flush().await
    }

    /// The session's acknowledged records, by `at`, then by key (CC-JNL-1 `list`): the
    /// records its index rows name, read by key — from memory for a resident session,
    /// else from the store, keeping nothing ([`residency`]).
    pub async fn list(&self, session: &SessionId) -> Result<Vec<JournalEntry>, DomainError> {
        let domain = self.open().await?;
        let table = domain.table(JOURNAL_TABLE)?;
        let index = domain.table(SESSION_INDEX_TABLE)?;
        let prefix = index_key(session.as_str(), "");
        let mut entries: Vec<JournalEntry> =
            if self.residency.is_resident(domain, session.as_str()).await? {
                index
                    .entries(&prefix)
                    .into_iter()
                    .filter_map(|(row, _)| {
                        let key = row.strip_prefix(&prefix)?;
                        entry(session, key, table.get(key)?)
                    })
                    .collect()
            } else {
                let mut entries = Vec::new();
                for row in index.stored_keys(&prefix).await? {
                    let Some(key) = row.strip_prefix(&prefix) else {
                        continue;
                    };
                    if let Some(entry) = table
                        .stored(key)
                        .await?
                        .and_then(|record| entry(session, key, record))
                    {
                        entries.push(entry);
                    }
                }
                entries
            };
        entries.sort_by(|a, b| a.at.cmp(&b.at).then_with(|| a.key.cmp(&b.key)));
        Ok(entries)
    }
}

/// The entry of `session`'s record `key`; `None` when the record belongs to another
/// session or has no readable head.
fn entry(session: &SessionId, key: &str, record: Arc<Value>) -> Option<JournalEntry> {
    let head = view::<RecordHead<'_>>(&record)?;
    (head.session_id == session.as_str())
        .then_some((head.at, head.kind))
        .map(|(at, kind)| JournalEntry {
            key: key.to_owned(),
            at,
            kind,
            record,
        })
}

/// The session's acknowledged index rows of `kind`, oldest first (by `at`, then key):
/// `(row, record key)`.
fn session_rows(
    index: &ccare_agent::domains::Table,
    session: &str,
    kind: JournalRecordKind,
) -> Vec<(IndexRow, String)> {
    let prefix = index_key(session, "");
    let mut rows: Vec<(IndexRow, String)> = index
        .entries(&prefix)
        .into_iter()
        .filter_map(|(row, value)| {
            let stored = IndexRow::deserialize(&*value).ok()?;
            let key = row.strip_prefix(&prefix)?.to_owned();
            (stored.kind == kind).then_some((stored, key))
        })
        .collect();
    rows.sort_by(|a, b| a.0.at.cmp(&b.0.at).then_with(|| a.1.cmp(&b.1)));
    rows
}

/// Deletes the oldest of `rows` (a session's records of one kind, oldest first) beyond
/// the newest `keep`: the record, then its index row.
fn trim(
    domain: &Domain,
    session: &str,
    rows: Vec<(IndexRow, String)>,
    keep: usize,
) -> Result<(), DomainError> {
    let excess = rows.len().saturating_sub(keep);
    if excess == 0 {
        return Ok(());
    }
    let table = domain.table(JOURNAL_TABLE)?;
    let index = domain.table(SESSION_INDEX_TABLE)?;
    for (_, key) in rows.into_iter().take(excess) {
        table.delete(&key)?;
        index.delete(&index_key(session, &key))?;
    }
    Ok(())
}

/// A record as stored: the envelope around `data` ([`JournalRecord`]'s fields, in its
/// order), `data` moved in rather than copied.
fn stored(session: &SessionId, kind: JournalRecordKind, at: i64, data: Value) -> Value {
    let head = JournalRecord {
        version: 1,
        session_id: session.as_str(),
        kind,
        at,
        data: (),
    };
    let mut record = match serde_json::to_value(head) {
        Ok(Value::Object(record)) => record,
        Ok(_) | Err(_) => ccare_core::JsonObject::new(),
    };
    record.insert("data".to_owned(), data);
    Value::Object(record)
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

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use std::sync::Arc;
    use std::time::Duration;

    use ccare_agent::domains::Domains;
    use ccare_agent::{SettledOutcome, Settlement};
    use ccare_core::SessionId;
    use ccare_store::testing::{FailingStore, Fault};
    use ccare_store::{MemoryStore, Store};

    use super::RequestJournal;
    use super::records::{RecordRoute, RequestRecord, SourceHeader};
    use crate::pricing::{PricingBasis, RawInput};

    fn journal(store: &Arc<dyn Store>) -> RequestJournal {
        RequestJournal::new(Domains::new(Arc::clone(store)).for_owner("context-care"))
    }

    fn record(call_id: &str) -> RequestRecord {
        RequestRecord {
            call_id: call_id.to_owned(),
            log_revision: 3,
            source_seqs: vec![1, 2],
            source_header: SourceHeader {
                provider: "p".to_owned(),
                model: "m".to_owned(),
                reasoning_effort: None,
                temperature: None,
                max_tokens: None,
            },
            source_messages_hash: "s".repeat(64),
            purpose: "conversation".to_owned(),
            route: RecordRoute {
                provider: "p".to_owned(),
                model: "m".to_owned(),
                max_tokens: None,
                reasoning_effort: None,
                temperature: None,
            },
            input_hash: "i".repeat(64),
            pricing_basis: PricingBasis::UncalibratedEstimate,
            budget: None,
            assessment: crate::budget::assess(100, None),
            raw_input: RawInput {
                text_tokens: 100,
                visual_tokens: 0,
            },
            tools_tokens: 0,
            input_tokens: 100,
            calibration_header_key: "k".repeat(64),
        }
    }

    fn settlement(call_id: &str) -> Settlement {
        Settlement {
            call_id: call_id.to_owned(),
            attempt: 1,
            outcome: SettledOutcome::Completed,
            event_seq: 4,
            event_type: "assistant/message",
            usage: None,
        }
    }

    /// Lets spawned eviction tasks run, then reads how many rows memory holds.
    async fn rows_after_evictions(journal: &RequestJournal) -> usize {
        for _ in 0..10 {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        journal.rows_in_memory()
    }

    /// What `list` gives, as (key, phase).
    async fn listed(journal: &RequestJournal, session: &SessionId) -> Vec<(String, String)> {
        journal
            .list(session)
            .await
            .unwrap()
            .iter()
            .map(|entry| {
                let phase = entry.data()["phase"].as_str().unwrap_or("").to_owned();
                (entry.key.clone(), phase)
            })
            .collect()
    }

    /// A store holding what earlier processes left: `records` request records of two
    /// sessions (`dispatchOrder` 1..), the first `indexed` of them with index rows, and
    /// an index row whose record is gone.
    async fn stored_journal(records: u64, indexed: u64) -> Arc<dyn Store> {
        let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
        seed_journal(&store, records, indexed).await;
        store
    }

    /// Writes what [`stored_journal`] holds into `store`.
    async fn seed_journal(store: &Arc<dyn Store>, records: u64, indexed: u64) {
        let domain = super::JOURNAL_DOMAIN;
        store
            .kv_cas(domain, "__meta", None, Some(br#"{"version":1}"#.to_vec()))
            .await
            .unwrap();
        for n in 0..records {
            let session = SessionId::new(if n % 2 == 0 { "s-a" } else { "s-b" }).unwrap();
            let mut data = match serde_json::to_value(record(&format!("c{n:04}"))).unwrap() {
                serde_json::Value::Object(data) => data,
                _ => unreachable!(),
            };
            data.insert("dispatchOrder".to_owned(), (n + 1).into());
            let at = i64::try_from(n).unwrap();
            let value = super::stored(
                &session,
                crate::pricing::JournalRecordKind::Request,
                at,
                serde_json::Value::Object(data),
            );
            let key = format!("call_c{n:04}");
            store
                .kv_cas(
                    domain,
                    &format!("records/{key}"),
                    None,
                    Some(value.to_string().into_bytes()),
                )
                .await
                .unwrap();
            if n < indexed {
                let row = format!(r#"{{"at":{at},"kind":"request"}}"#);
                store
                    .kv_cas(
                        domain,
                        &format!("sessions/{}/{key}", session.as_str()),
                        None,
                        Some(row.into_bytes()),
                    )
                    .await
                    .unwrap();
            }
        }
        store
            .kv_cas(
                domain,
                "sessions/s-a/call_gone",
                None,
                Some(br#"{"at":1,"kind":"request"}"#.to_vec()),
            )
            .await
            .unwrap();
    }

    #[tokio::test]
    async fn an_open_that_fails_after_its_domain_opened_can_be_tried_again() {
        // The reindex's first write fails: the journal's open fails after the domain
        // itself opened. The domain it dropped must not keep the name taken, or every
        // later use of the journal (each request's gate) fails DOMAIN_IN_USE.
        let failing = Arc::new(FailingStore::new(MemoryStore::new()));
        let store: Arc<dyn Store> = Arc::clone(&failing) as Arc<dyn Store>;
        seed_journal(&store, 10, 5).await;
        failing.fail(
            Fault::kv_writes("disk full")
                .containing(super::JOURNAL_DOMAIN)
                .once(),
        );
        let journal = journal(&store);
        let Err(failed) = journal.open().await else {
            panic!("the reindex write fails");
        };
        assert!(failed.to_string().contains("disk full"), "{failed}");
        journal.open().await.unwrap();
        assert_eq!(
            listed(&journal, &SessionId::new("s-a").unwrap())
                .await
                .len(),
            5
        );
    }

    #[tokio::test]
    async fn opening_pages_through_the_store_indexes_trims_and_continues_the_dispatch_order() {
        let store = stored_journal(1100, 1000).await;
        let journal = journal(&store).with_keep(300);
        let a = SessionId::new("s-a").unwrap();
        journal.open().await.unwrap();
        assert_eq!(journal.rows_in_memory(), 0, "the open keeps nothing");

        // Each session keeps its newest 300, the 50 unindexed ones of each included.
        let kept = listed(&journal, &a).await;
        assert_eq!(kept.len(), 300);
        assert_eq!(kept[0].0, "call_c0500");
        assert_eq!(kept[299].0, "call_c1098");
        assert_eq!(
            listed(&journal, &SessionId::new("s-b").unwrap())
                .await
                .len(),
            300
        );
        let gone = store
            .kv_get(super::JOURNAL_DOMAIN, "sessions/s-a/call_gone")
            .await
            .unwrap();
        assert_eq!(gone, None, "the index row of a missing record is dropped");
        let trimmed = store
            .kv_get(super::JOURNAL_DOMAIN, "records/call_c0498")
            .await
            .unwrap();
        assert_eq!(trimmed, None);

        // The next dispatch continues after the largest stored.
        journal.ready(&a, 2000, &record("next")).await.unwrap();
        journal.dispatched("next").unwrap();
        journal.flush().await.unwrap();
        let next = journal.list(&a).await.unwrap();
        let last = next.last().unwrap();
        assert_eq!(last.key, "call_next");
        assert_eq!(last.data()["dispatchOrder"], 1101);
        assert_eq!(next.len(), 300, "the new record counts against the limit");
    }

    #[tokio::test]
    async fn a_session_noted_created_is_resident_without_reading_the_store() {
        let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
        let earlier = journal(&store);
        let sessions: Vec<SessionId> = (0..3)
            .map(|n| SessionId::new(format!("s-{n}")).unwrap())
            .collect();
        for (n, session) in sessions.iter().enumerate() {
            earlier
                .ready(session, 1, &record(&format!("c{n}")))
                .await
                .unwrap();
        }
        earlier.flush().await.unwrap();

        // Rows stored under ids noted as created here are not read: a load would have
        // brought in each session's record and index row.
        let journal = journal(&store);
        journal.note_created(&sessions[0]);
        journal.keep_resident(&sessions[0]).await.unwrap();
        assert_eq!(
            journal.rows_in_memory(),
            0,
            "nothing read for a created session"
        );
        journal.keep_resident(&sessions[1]).await.unwrap();
        assert_eq!(journal.rows_in_memory(), 2, "another session is loaded");

        // The note is used once, and only the newest `CreatedHere::KEPT` are kept.
        journal.note_created(&sessions[2]);
        for n in 0..ccare_session::CreatedHere::KEPT {
            journal.note_created(&SessionId::new(format!("s-later-{n}")).unwrap());
        }
        journal.keep_resident(&sessions[2]).await.unwrap();
        assert_eq!(
            journal.rows_in_memory(),
            4,
            "a note that fell off is loaded"
        );
    }

    #[tokio::test]
    async fn a_released_session_leaves_memory_and_lists_the_same_from_the_store() {
        let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
        let journal = journal(&store);
        let (one, two) = (
            SessionId::new("s-one").unwrap(),
            SessionId::new("s-two").unwrap(),
        );
        journal.ready(&one, 1, &record("c1")).await.unwrap();
        journal.settled(&settlement("c1")).unwrap();
        journal.ready(&two, 2, &record("c2")).await.unwrap();
        journal.flush().await.unwrap();
        let before = listed(&journal, &one).await;
        assert_eq!(before, vec![("call_c1".to_owned(), "settled".to_owned())]);
        assert_eq!(journal.rows_in_memory(), 4);

        journal.release(&one);
        assert_eq!(
            rows_after_evictions(&journal).await,
            2,
            "only s-two's rows stay"
        );
        assert_eq!(listed(&journal, &one).await, before, "read from the store");
        assert_eq!(journal.rows_in_memory(), 2, "a store read keeps nothing");

        journal.keep_resident(&one).await.unwrap();
        assert_eq!(journal.rows_in_memory(), 4);
        assert_eq!(listed(&journal, &one).await, before);

        // A new process: every row is read once at open, then only the sessions it
        // drives stay in memory.
        let reopened = self::journal(&store);
        assert_eq!(listed(&reopened, &two).await.len(), 1);
        assert_eq!(reopened.rows_in_memory(), 0);
        reopened.keep_resident(&two).await.unwrap();
        assert_eq!(reopened.rows_in_memory(), 2);
    }

    #[tokio::test]
    async fn a_session_released_with_a_call_in_flight_keeps_its_rows_until_the_last_phase() {
        let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
        let journal = journal(&store);
        let session = SessionId::new("s-one").unwrap();
        journal.ready(&session, 1, &record("c1")).await.unwrap();
        journal.dispatched("c1").unwrap();
        journal.flush().await.unwrap();

        journal.release(&session);
        assert_eq!(
            rows_after_evictions(&journal).await,
            2,
            "the call's settlement patches its record in memory"
        );
        journal.settled(&settlement("c1")).unwrap();
        journal.flush().await.unwrap();
        assert_eq!(rows_after_evictions(&journal).await, 0);
        assert_eq!(
            listed(&journal, &session).await,
            vec![("call_c1".to_owned(), "settled".to_owned())],
            "the settlement is durable"
        );
    }
}
