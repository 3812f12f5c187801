//! Test support (cargo feature `testing`, never a default; spec H-TEST-1): a store
//! whose writes or reads fail on demand, for the tests of what a storage failure does
//! to the layers above (a fenced session, a journal write that must not be swallowed).
//!
//! [`FailingStore`] wraps any [`Store`] and passes every call through, except those a
//! current [`Fault`] matches: those fail with [`StoreError::Backend`] and never reach
//! the inner store, so nothing of them is written. It can also hold back the
//! acknowledgement of KV writes ([`FailingStore::hold_kv_writes`], or only those of some
//! rows, [`FailingStore::hold_kv_writes_containing`]) or of session creations
//! ([`FailingStore::hold_creations`]): the write is applied, its ticket resolves only
//! once released, as a write that is not durable yet. As in a real store,
//! which makes operations durable in call order, a write or a flush made after a held KV
//! write is held with it. KV reads can be held too ([`FailingStore::hold_kv_reads`]):
//! they read at once and answer once released, as a read the store is slow to answer
//! while writes go on.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard, PoisonError};

use ccare_core::SessionId;

use tokio::sync::Notify;
use tokio::sync::futures::Notified;
use tokio::sync::watch;

use crate::error::StoreError;
use crate::lease::{Lease, LeaseClaim};
use crate::memory::MemoryStore;
use crate::types::{
    Incarnation, KvEntry, KvPage, NewSession, ReadRange, SessionQuery, SessionRecord, Store,
    StoreFuture, StoredEvent, Ticket,
};

/// The operations a [`Fault`] can make fail.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Operation {
    /// [`Store::create_session`] (creations, forks and imports).
    Create,
    /// [`Store::append`].
    Append,
    /// [`Store::kv_cas`] (writes and deletes).
    KvWrite,
    /// [`Store::kv_get`] and [`Store::kv_scan`].
    KvRead,
}

/// One injected failure: which operation fails, on what, with which message, how often.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Fault {
    operation: Operation,
    containing: Option<String>,
    message: String,
    once: bool,
}

impl Fault {
    /// Every session creation fails with `message`.
    pub fn creates(message: impl Into<String>) -> Self {
        Self::new(Operation::Create, message)
    }

    /// Every event append fails with `message` (e.g. `"disk unplugged"`).
    pub fn appends(message: impl Into<String>) -> Self {
        Self::new(Operation::Append, message)
    }

    /// Every KV write or delete fails with `message`.
    pub fn kv_writes(message: impl Into<String>) -> Self {
        Self::new(Operation::KvWrite, message)
    }

    /// Every KV read (`kv_get`, `kv_scan`) fails with `message`.
    pub fn kv_reads(message: impl Into<String>) -> Self {
        Self::new(Operation::KvRead, message)
    }

    fn new(operation: Operation, message: impl Into<String>) -> Self {
        Self {
            operation,
            containing: None,
            message: message.into(),
            once: false,
        }
    }

    /// Only calls that contain `needle` fail: for an append, a batch one of whose
    /// events' JSON text contains it (e.g. `"\"compaction/end\""`); for KV, a domain
    /// whose name contains it (e.g. one plugin's domain); for a creation, the session's
    /// metadata JSON.
    #[must_use]
    pub fn containing(mut self, needle: impl Into<String>) -> Self {
        self.containing = Some(needle.into());
        self
    }

    /// The fault fails the first matching call only, then is gone.
    #[must_use]
    pub fn once(mut self) -> Self {
        self.once = true;
        self
    }

    /// The error a matched call fails with; `method` names the store method.
    fn error(&self, method: &'static str) -> StoreError {
        StoreError::Backend {
            operation: method,
            message: self.message.clone(),
        }
    }

    fn matches(&self, operation: Operation, text: &[&str]) -> bool {
        self.operation == operation
            && self
                .containing
                .as_deref()
                .is_none_or(|needle| text.iter().any(|text| text.contains(needle)))
    }
}

/// A [`Store`] that fails the calls its current [`Fault`]s match and passes every other
/// call to `inner` (by default a [`MemoryStore`]). Faults are added with
/// [`FailingStore::fail`] and removed with [`FailingStore::heal`] ("the disk is back").
pub struct FailingStore<S = MemoryStore> {
    inner: S,
    faults: Mutex<Vec<Fault>>,
    /// `true` while KV write acknowledgements are held back.
    held: watch::Sender<bool>,
    /// While held, only KV writes whose `<domain>/<key>` contains this are held (and
    /// what follows one); `None`: every KV write.
    held_rows: Mutex<Option<String>>,
    /// Whether a KV write was made while held: appends and flushes made after it are
    /// held too (durability in call order).
    backlog: AtomicBool,
    /// Whether session creations are held ([`FailingStore::hold_creations`]).
    creations_held: AtomicBool,
    /// Notified at every `kv_cas` call, before it is applied or refused.
    kv_writes: Notify,
    /// `true` while KV read answers are held back ([`FailingStore::hold_kv_reads`]).
    reads_held: watch::Sender<bool>,
    /// Notified once a held KV read has read the inner store.
    kv_reads: Notify,
    /// How many times `flush` was called.
    flushes: AtomicU64,
    /// How many KV writes came through `kv_cas_lingering`.
    lingering: AtomicU64,
}

impl Default for FailingStore<MemoryStore> {
    fn default() -> Self {
        Self::new(MemoryStore::new())
    }
}

impl<S: Store> FailingStore<S> {
    /// `inner`, with no fault yet.
    pub fn new(inner: S) -> Self {
        Self {
            inner,
            faults: Mutex::new(Vec::new()),
            held: watch::Sender::new(false),
            held_rows: Mutex::new(None),
            backlog: AtomicBool::new(false),
            creations_held: AtomicBool::new(false),
            kv_writes: Notify::new(),
            reads_held: watch::Sender::new(false),
            kv_reads: Notify::new(),
            flushes: AtomicU64::new(0),
            lingering: AtomicU64::new(0),
        }
    }

    /// How many times [`Store::flush`] was called: a test sees whether the layer above
    /// made the store end a group of its own.
    pub fn flush_calls(&self) -> u64 {
        self.flushes.load(Ordering::SeqCst)
    }

    /// How many KV writes were queued with `kv_cas_lingering` (the store may keep their
    /// group open for what follows) rather than `kv_cas`.
    pub fn lingering_kv_writes(&self) -> u64 {
        self.lingering.load(Ordering::SeqCst)
    }

    /// The wrapped store (reads through it bypass the faults).
    pub fn inner(&self) -> &S {
        &self.inner
    }

    /// From now on, the calls `fault` matches fail (beside any earlier fault).
    pub fn fail(&self, fault: Fault) {
        self.faults().push(fault);
    }

    /// Removes every fault: all calls go through again.
    pub fn heal(&self) {
        self.faults().clear();
    }

    /// From now on, KV writes are applied at once but their tickets resolve only after
    /// [`FailingStore::release_kv_writes`]: what the layers above see while a write is
    /// not durable yet. Once such a write was made, later appends and flushes are held
    /// too, as the store makes operations durable in call order.
    pub fn hold_kv_writes(&self) {
        *self.held_rows() = None;
        self.backlog.store(false, Ordering::SeqCst);
        self.held.send_replace(true);
    }

    /// [`FailingStore::hold_kv_writes`] for the KV writes whose `<domain>/<key>`
    /// contains `needle` only (e.g. one table's rows): a write of another row made
    /// before the first held one resolves as usual, and everything made after a held
    /// one is held with it (durability in call order).
    pub fn hold_kv_writes_containing(&self, needle: impl Into<String>) {
        *self.held_rows() = Some(needle.into());
        self.backlog.store(false, Ordering::SeqCst);
        self.held.send_replace(true);
    }

    /// From now on, session creations are applied at once but their tickets resolve
    /// only after [`FailingStore::release_kv_writes`], as a creation that is not durable
    /// yet; everything made after a held creation is held with it (durability in call
    /// order). KV writes made before one are not held.
    pub fn hold_creations(&self) {
        // Row keys never contain NUL, so no KV write is held for itself.
        *self.held_rows() = Some("\0".to_owned());
        self.backlog.store(false, Ordering::SeqCst);
        self.creations_held.store(true, Ordering::SeqCst);
        self.held.send_replace(true);
    }

    /// Lets every held ticket (and every later one) resolve: held KV writes, held
    /// creations and what was held behind them.
    pub fn release_kv_writes(&self) {
        self.held.send_replace(false);
        self.backlog.store(false, Ordering::SeqCst);
        self.creations_held.store(false, Ordering::SeqCst);
        *self.held_rows() = None;
    }

    fn held_rows(&self) -> MutexGuard<'_, Option<String>> {
        self.held_rows
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// A KV write through `write`: refused when a fault matches, else applied and,
    /// while writes are held, acknowledged only once released.
    fn kv_write(
        &self,
        domain: &str,
        key: &str,
        write: impl FnOnce() -> Ticket<Option<u64>>,
    ) -> Ticket<Option<u64>> {
        self.kv_writes.notify_one();
        if let Some(error) = self.injected(Operation::KvWrite, "kv_cas", &[domain]) {
            return failed(error);
        }
        let ticket = write();
        if !*self.held.borrow() {
            return ticket;
        }
        let held = self.backlog.load(Ordering::SeqCst)
            || self
                .held_rows()
                .as_deref()
                .is_none_or(|needle| format!("{domain}/{key}").contains(needle));
        if !held {
            return ticket;
        }
        self.backlog.store(true, Ordering::SeqCst);
        self.until_released(ticket)
    }

    /// `ticket`, held until release when a held KV write was made before it.
    fn in_call_order<T: Send + 'static>(&self, ticket: Ticket<T>) -> Ticket<T> {
        if !self.backlog.load(Ordering::SeqCst) {
            return ticket;
        }
        self.until_released(ticket)
    }

    /// `ticket`, resolving only once writes are released (at once when they are not
    /// held).
    fn until_released<T: Send + 'static>(&self, ticket: Ticket<T>) -> Ticket<T> {
        if !*self.held.borrow() {
            return ticket;
        }
        let mut held = self.held.subscribe();
        Box::pin(async move {
            // A closed channel (the store is gone) releases the ticket too.
            let _ = held.wait_for(|held| !*held).await;
            ticket.await
        })
    }

    /// From now on, KV reads (`kv_get`, `kv_scan`) read the inner store at once but
    /// answer only after [`FailingStore::release_kv_reads`]: what the layers above see
    /// when writes land while one of their reads is on its way back.
    pub fn hold_kv_reads(&self) {
        self.reads_held.send_replace(true);
    }

    /// Lets every held KV read (and every later one) answer.
    pub fn release_kv_reads(&self) {
        self.reads_held.send_replace(false);
    }

    /// Resolves once a held KV read has read the inner store (or at once if one did
    /// since the last wait): what it answers is fixed from then on.
    pub fn kv_read_made(&self) -> Notified<'_> {
        self.kv_reads.notified()
    }

    /// `read`, answering only once reads are released when they are held: it reads
    /// the inner store at its first poll, then waits.
    fn held_read<'a, T: Send + 'a>(&'a self, read: StoreFuture<'a, T>) -> StoreFuture<'a, T> {
        if !*self.reads_held.borrow() {
            return read;
        }
        let mut held = self.reads_held.subscribe();
        Box::pin(async move {
            let answer = read.await;
            self.kv_reads.notify_one();
            // A closed channel (the store is gone) releases the read too.
            let _ = held.wait_for(|held| !*held).await;
            answer
        })
    }

    /// Resolves at the next `kv_cas` call (or at once if one came since the last wait):
    /// a test waits here until the code under test has issued its write.
    pub fn kv_write_called(&self) -> Notified<'_> {
        self.kv_writes.notified()
    }

    fn faults(&self) -> MutexGuard<'_, Vec<Fault>> {
        self.faults.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The error of the first fault matching a call of `method` (one of `operation`'s),
    /// consuming a `once` fault.
    fn injected(
        &self,
        operation: Operation,
        method: &'static str,
        text: &[&str],
    ) -> Option<StoreError> {
        let mut faults = self.faults();
        let index = faults
            .iter()
            .position(|fault| fault.matches(operation, text))?;
        let error = faults[index].error(method);
        if faults[index].once {
            faults.remove(index);
        }
        Some(error)
    }
}

fn failed<T: Send + 'static>(error: StoreError) -> Ticket<T> {
    Box::pin(std::future::ready(Err(error)))
}

impl<S: Store> Store for FailingStore<S> {
    fn create_session(&self, session: NewSession, events: Vec<StoredEvent>) -> Ticket<Incarnation> {
        if let Some(error) =
            self.injected(Operation::Create, "create_session", &[&session.meta_json])
        {
            return failed(error);
        }
        let ticket = self.inner.create_session(session, events);
        if self.creations_held.load(Ordering::SeqCst) {
            self.backlog.store(true, Ordering::SeqCst);
            return self.until_released(ticket);
        }
        self.in_call_order(ticket)
    }

    fn append(
        &self,
        session: &SessionId,
        expected_seq: u64,
        events: Vec<StoredEvent>,
    ) -> Ticket<u64> {
        let texts: Vec<&str> = events.iter().map(|event| &*event.json).collect();
        if let Some(error) = self.injected(Operation::Append, "append", &texts) {
            return failed(error);
        }
        self.in_call_order(self.inner.append(session, expected_seq, events))
    }

    fn append_awaited(
        &self,
        session: &SessionId,
        expected_seq: u64,
        events: Vec<StoredEvent>,
    ) -> Ticket<u64> {
        let texts: Vec<&str> = events.iter().map(|event| &*event.json).collect();
        if let Some(error) = self.injected(Operation::Append, "append", &texts) {
            return failed(error);
        }
        self.in_call_order(self.inner.append_awaited(session, expected_seq, events))
    }

    fn kv_cas(
        &self,
        domain: &str,
        key: &str,
        expected_version: Option<u64>,
        value: Option<Vec<u8>>,
    ) -> Ticket<Option<u64>> {
        self.kv_write(domain, key, || {
            self.inner.kv_cas(domain, key, expected_version, value)
        })
    }

    fn kv_cas_lingering(
        &self,
        domain: &str,
        key: &str,
        expected_version: Option<u64>,
        value: Option<Vec<u8>>,
    ) -> Ticket<Option<u64>> {
        self.lingering.fetch_add(1, Ordering::SeqCst);
        self.kv_write(domain, key, || {
            self.inner
                .kv_cas_lingering(domain, key, expected_version, value)
        })
    }

    fn flush(&self) -> Ticket<()> {
        self.flushes.fetch_add(1, Ordering::SeqCst);
        self.in_call_order(self.inner.flush())
    }

    fn session(&self, id: &SessionId) -> StoreFuture<'_, Option<SessionRecord>> {
        self.inner.session(id)
    }

    fn list_sessions(&self, query: SessionQuery) -> StoreFuture<'_, Vec<SessionRecord>> {
        self.inner.list_sessions(query)
    }

    fn read(&self, id: &SessionId, range: ReadRange) -> StoreFuture<'_, Vec<StoredEvent>> {
        self.inner.read(id, range)
    }

    fn kv_get(&self, domain: &str, key: &str) -> StoreFuture<'_, Option<KvEntry>> {
        if let Some(error) = self.injected(Operation::KvRead, "kv_get", &[domain]) {
            return failed(error);
        }
        self.held_read(self.inner.kv_get(domain, key))
    }

    fn kv_scan(
        &self,
        domain: &str,
        prefix: &str,
        page: KvPage,
    ) -> StoreFuture<'_, Vec<(String, KvEntry)>> {
        if let Some(error) = self.injected(Operation::KvRead, "kv_scan", &[domain]) {
            return failed(error);
        }
        self.held_read(self.inner.kv_scan(domain, prefix, page))
    }

    fn lease_acquire(&self, claim: LeaseClaim) -> Ticket<Lease> {
        self.inner.lease_acquire(claim)
    }

    fn lease_renew(&self, session: &SessionId, owner: &str, expires_ms: i64) -> Ticket<Lease> {
        self.inner.lease_renew(session, owner, expires_ms)
    }

    fn lease_release(&self, session: &SessionId, owner: &str) -> Ticket<bool> {
        self.inner.lease_release(session, owner)
    }

    fn lease(&self, session: &SessionId) -> StoreFuture<'_, Option<Lease>> {
        self.inner.lease(session)
    }
}
