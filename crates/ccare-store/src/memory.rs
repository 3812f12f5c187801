//! The in-memory backend: the [`Store`] contract without a disk, for tests and
//! benchmarks. Nothing survives the process (or the last handle); never use it where
//! a session must outlive a crash.
//!
//! # How it keeps the contract
//!
//! Every method takes one lock, applies its operation at once and returns a ticket
//! that is already resolved, so writes are ordered at call time (H-STORE-4) and
//! "durable" means "visible to every later read of this store". The checks and
//! results match [`SqliteStore`](crate::SqliteStore) operation for operation, and the
//! conformance suite (`tests/it/conformance/`) runs on both:
//!
//! - `append` writes only at the stored head (`Conflict` otherwise, H-STORE-1) and
//!   only events numbered `expected_seq, expected_seq + 1, ...` (`Invalid` otherwise);
//! - KV versions start at 1, `None` expected means "must not exist", `None` value
//!   deletes, a mismatch is `CasConflict` (H-STORE-2); keys and values obey
//!   [`MAX_KV_KEY_BYTES`](crate::MAX_KV_KEY_BYTES) and [`MAX_KV_VALUE_BYTES`](crate::MAX_KV_VALUE_BYTES);
//! - sessions list newest first (ties: the one created later first); ranged reads walk
//!   both ways and stop at the head; KV scans are ascending by UTF-8 bytes;
//! - a lease claim is granted on a free session, an expired lease, the claimant's own
//!   or the one it replaces, else refused with `SessionBusy` (ACT-1, `lease.rs`).
//!
//! # Unreported errors and flush
//!
//! As in SQLite: a failed write's error counts as reported once its ticket has yielded
//! it to an awaiting caller. [`Store::flush`] returns the oldest failed write (or
//! failed flush) since the previous flush that no ticket has yielded, and forgets the
//! rest. Since tickets resolve at once, a flush sees exactly the operations called
//! before it.
//!
//! Unlike SQLite there is no database to fail, so `Backend`, `Corrupt` and `Closed`
//! never occur.

use std::collections::{BTreeMap, HashMap};
use std::ops::Bound;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use ccare_core::SessionId;

use crate::checks::{check_kv, check_seqs, preview};
use crate::envelope::EnvelopeJson;
use crate::error::StoreError;
use crate::failures::{Failed, Failures};
use crate::lease::{Lease, LeaseClaim, check_claim, check_holder, may_take};
use crate::types::{
    Incarnation, KvEntry, KvPage, NewSession, ReadDirection, ReadRange, SessionQuery,
    SessionRecord, Store, StoreFuture, StoredEvent, Ticket,
};

/// The in-memory [`Store`]: a cheap, cloneable handle; clones share the data. For tests
/// and benchmarks only: everything is lost when the last handle is dropped.
#[derive(Clone, Default)]
pub struct MemoryStore {
    inner: Arc<Mutex<Data>>,
}

impl std::fmt::Debug for MemoryStore {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let data = self.lock();
        formatter
            .debug_struct("MemoryStore")
            .field("sessions", &data.sessions.len())
            .field("kv_domains", &data.kv.len())
            .finish()
    }
}

/// Everything the store holds.
#[derive(Default)]
struct Data {
    sessions: HashMap<SessionId, StoredSession>,
    /// Bumped by every create; breaks `created_ms` ties in listings (later first).
    created_order: u64,
    /// Rows by domain, then key (ascending by UTF-8 bytes, as SQLite's BINARY).
    kv: BTreeMap<String, BTreeMap<String, KvEntry>>,
    /// Session leases (ACT-1), by session.
    leases: HashMap<SessionId, Lease>,
    /// Failed writes since the last flush.
    failures: Failures,
}

struct StoredSession {
    record: SessionRecord,
    created_order: u64,
    /// Event bodies; index = seq.
    events: Vec<EnvelopeJson>,
}

impl MemoryStore {
    /// An empty store.
    pub fn new() -> Self {
        Self::default()
    }

    fn lock(&self) -> MutexGuard<'_, Data> {
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Applies a write under the lock and hands back its (already resolved) ticket;
    /// a failure is remembered for the next flush until the ticket yields it.
    fn write<T: Send + 'static>(
        &self,
        apply: impl FnOnce(&mut Data) -> Result<T, StoreError>,
    ) -> Ticket<T> {
        let seen = Arc::new(AtomicBool::new(false));
        let result = {
            let mut data = self.lock();
            let result = apply(&mut data);
            if let Err(error) = &result {
                data.failures.remember(Failed {
                    error: error.clone(),
                    seen: Arc::clone(&seen),
                });
            }
            result
        };
        Box::pin(async move {
            if result.is_err() {
                seen.store(true, Ordering::Release);
            }
            result
        })
    }
}

impl Data {
    fn create_session(
        &mut self,
        session: NewSession,
        events: Vec<StoredEvent>,
    ) -> Result<Incarnation, StoreError> {
        let head = check_seqs("create_session", &session.id, 0, &events)?;
        if session
            .seed_length
            .is_some_and(|length| i64::try_from(length).is_err())
        {
            return Err(StoreError::Invalid {
                what: "create_session",
                detail: format!("session {}: seed_length is out of range", session.id),
            });
        }
        if self.sessions.contains_key(&session.id) {
            return Err(StoreError::SessionExists {
                session: session.id,
            });
        }
        self.created_order += 1;
        let incarnation = session.incarnation.clone();
        let record = SessionRecord {
            id: session.id.clone(),
            created_ms: session.created_ms,
            parent: session.parent,
            seed_length: session.seed_length,
            meta_json: session.meta_json,
            incarnation: incarnation.clone(),
            head,
        };
        self.sessions.insert(
            session.id,
            StoredSession {
                record,
                created_order: self.created_order,
                events: events.into_iter().map(|event| event.json).collect(),
            },
        );
        Ok(incarnation)
    }

    fn append(
        &mut self,
        session: &SessionId,
        expected: u64,
        events: Vec<StoredEvent>,
    ) -> Result<u64, StoreError> {
        let head_after = check_seqs("append", session, expected, &events)?;
        let Some(stored) = self.sessions.get_mut(session) else {
            return Err(StoreError::UnknownSession {
                session: session.clone(),
            });
        };
        if stored.record.head != expected {
            return Err(StoreError::Conflict {
                session: session.clone(),
                expected,
                actual: stored.record.head,
            });
        }
        stored
            .events
            .extend(events.into_iter().map(|event| event.json));
        stored.record.head = head_after;
        Ok(head_after)
    }

    fn kv_cas(
        &mut self,
        domain: &str,
        key: &str,
        expected: Option<u64>,
        value: Option<Vec<u8>>,
    ) -> Result<Option<u64>, StoreError> {
        check_kv(domain, key, value.as_deref())?;
        let current = self
            .kv
            .get(domain)
            .and_then(|rows| rows.get(key))
            .map(|entry| entry.version);
        if current != expected {
            return Err(StoreError::CasConflict {
                domain: domain.to_owned(),
                key: key.to_owned(),
                expected,
                current,
            });
        }
        match (value, current) {
            (Some(value), current) => {
                let version = match current {
                    None => 1,
                    Some(current) => current
                        .checked_add(1)
                        .filter(|next| i64::try_from(*next).is_ok())
                        .ok_or_else(|| StoreError::Invalid {
                            what: "kv version",
                            detail: format!(
                                "kv {domain}/{}: the version cannot grow past {current}",
                                preview(key)
                            ),
                        })?,
                };
                self.kv
                    .entry(domain.to_owned())
                    .or_default()
                    .insert(key.to_owned(), KvEntry { version, value });
                Ok(Some(version))
            }
            (None, Some(_)) => {
                if let Some(rows) = self.kv.get_mut(domain) {
                    rows.remove(key);
                    if rows.is_empty() {
                        self.kv.remove(domain);
                    }
                }
                Ok(None)
            }
            // Deleting a row that must not exist and does not: nothing to do.
            (None, None) => Ok(None),
        }
    }

    fn lease_acquire(&mut self, claim: &LeaseClaim) -> Result<Lease, StoreError> {
        check_claim(claim)?;
        if let Some(current) = self.leases.get(&claim.session)
            && !may_take(current, claim)
        {
            return Err(StoreError::SessionBusy {
                lease: Box::new(current.clone()),
            });
        }
        let granted = claim.granted();
        self.leases.insert(claim.session.clone(), granted.clone());
        Ok(granted)
    }

    fn lease_renew(
        &mut self,
        session: &SessionId,
        owner: &str,
        expires_ms: i64,
    ) -> Result<Lease, StoreError> {
        check_holder(session, owner, "owner")?;
        match self.leases.get_mut(session) {
            Some(lease) if lease.holder.owner == owner => {
                lease.expires_ms = expires_ms;
                Ok(lease.clone())
            }
            Some(_) | None => Err(StoreError::LeaseLost {
                session: session.clone(),
                owner: owner.to_owned(),
            }),
        }
    }

    fn lease_release(&mut self, session: &SessionId, owner: &str) -> Result<bool, StoreError> {
        check_holder(session, owner, "owner")?;
        let held = self
            .leases
            .get(session)
            .is_some_and(|lease| lease.holder.owner == owner);
        if held {
            self.leases.remove(session);
        }
        Ok(held)
    }

    fn read(&self, id: &SessionId, range: ReadRange) -> Result<Vec<StoredEvent>, StoreError> {
        let Some(stored) = self.sessions.get(id) else {
            return Err(StoreError::UnknownSession {
                session: id.clone(),
            });
        };
        let head = stored.record.head;
        let end = range.to.map_or(head, |to| to.min(head));
        let start = range.from;
        if start >= end {
            return Ok(Vec::new());
        }
        // Both bounds are at most the head, so they index `events`.
        let slice = stored
            .events
            .get(as_index(start)..as_index(end))
            .unwrap_or_default();
        let limit = range.limit.unwrap_or(usize::MAX);
        let events: Vec<StoredEvent> = match range.direction {
            ReadDirection::Forward => (start..end)
                .zip(slice)
                .take(limit)
                .map(|(seq, json)| StoredEvent {
                    seq,
                    json: json.clone(),
                })
                .collect(),
            ReadDirection::Backward => (start..end)
                .rev()
                .zip(slice.iter().rev())
                .take(limit)
                .map(|(seq, json)| StoredEvent {
                    seq,
                    json: json.clone(),
                })
                .collect(),
        };
        Ok(events)
    }

    fn kv_scan(&self, domain: &str, prefix: &str, page: &KvPage) -> Vec<(String, KvEntry)> {
        let Some(rows) = self.kv.get(domain) else {
            return Vec::new();
        };
        // Keys starting with `prefix` are contiguous from `prefix` on; a page resumes
        // strictly after `after` when that is the tighter lower bound.
        let lower = match &page.after {
            Some(after) if after.as_str() >= prefix => Bound::Excluded(after.as_str()),
            Some(_) | None => Bound::Included(prefix),
        };
        rows.range::<str, _>((lower, Bound::Unbounded))
            .take_while(|(key, _)| key.starts_with(prefix))
            .take(page.limit.unwrap_or(usize::MAX))
            .map(|(key, entry)| (key.clone(), entry.clone()))
            .collect()
    }
}

/// A seq below the head as a vector index (heads of in-memory sessions fit `usize`).
fn as_index(seq: u64) -> usize {
    usize::try_from(seq).unwrap_or(usize::MAX)
}

impl Store for MemoryStore {
    fn create_session(&self, session: NewSession, events: Vec<StoredEvent>) -> Ticket<Incarnation> {
        self.write(|data| data.create_session(session, events))
    }

    fn append(
        &self,
        session: &SessionId,
        expected_seq: u64,
        events: Vec<StoredEvent>,
    ) -> Ticket<u64> {
        self.write(|data| data.append(session, expected_seq, events))
    }

    fn kv_cas(
        &self,
        domain: &str,
        key: &str,
        expected_version: Option<u64>,
        value: Option<Vec<u8>>,
    ) -> Ticket<Option<u64>> {
        self.write(|data| data.kv_cas(domain, key, expected_version, value))
    }

    fn flush(&self) -> Ticket<()> {
        // A failed flush is itself remembered (by `write`), so dropping its ticket does
        // not lose the error: the next flush reports it.
        self.write(|data| match data.failures.take_unreported("memory") {
            Some(error) => Err(error),
            None => Ok(()),
        })
    }

    fn session(&self, id: &SessionId) -> StoreFuture<'_, Option<SessionRecord>> {
        let record = self
            .lock()
            .sessions
            .get(id)
            .map(|stored| stored.record.clone());
        Box::pin(std::future::ready(Ok(record)))
    }

    fn list_sessions(&self, query: SessionQuery) -> StoreFuture<'_, Vec<SessionRecord>> {
        let data = self.lock();
        let mut sessions: Vec<&StoredSession> = data.sessions.values().collect();
        sessions.sort_by(|a, b| {
            (b.record.created_ms, b.created_order).cmp(&(a.record.created_ms, a.created_order))
        });
        let records = sessions
            .into_iter()
            .take(query.limit.unwrap_or(usize::MAX))
            .map(|stored| stored.record.clone())
            .collect();
        Box::pin(std::future::ready(Ok(records)))
    }

    fn read(&self, id: &SessionId, range: ReadRange) -> StoreFuture<'_, Vec<StoredEvent>> {
        let events = self.lock().read(id, range);
        Box::pin(std::future::ready(events))
    }

    fn kv_get(&self, domain: &str, key: &str) -> StoreFuture<'_, Option<KvEntry>> {
        let entry = self
            .lock()
            .kv
            .get(domain)
            .and_then(|rows| rows.get(key))
            .cloned();
        Box::pin(std::future::ready(Ok(entry)))
    }

    fn kv_scan(
        &self,
        domain: &str,
        prefix: &str,
        page: KvPage,
    ) -> StoreFuture<'_, Vec<(String, KvEntry)>> {
        let rows = self.lock().kv_scan(domain, prefix, &page);
        Box::pin(std::future::ready(Ok(rows)))
    }

    fn lease_acquire(&self, claim: LeaseClaim) -> Ticket<Lease> {
        self.write(|data| data.lease_acquire(&claim))
    }

    fn lease_renew(&self, session: &SessionId, owner: &str, expires_ms: i64) -> Ticket<Lease> {
        self.write(|data| data.lease_renew(session, owner, expires_ms))
    }

    fn lease_release(&self, session: &SessionId, owner: &str) -> Ticket<bool> {
        self.write(|data| data.lease_release(session, owner))
    }

    fn lease(&self, session: &SessionId) -> StoreFuture<'_, Option<Lease>> {
        let lease = self.lock().leases.get(session).cloned();
        Box::pin(std::future::ready(Ok(lease)))
    }
}
