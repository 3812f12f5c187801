//! The [`Store`] trait and the plain data it moves.

use std::future::Future;
use std::pin::Pin;

use ccare_core::SessionId;

use crate::envelope::EnvelopeJson;
use crate::error::StoreError;
use crate::lease::{Lease, LeaseClaim};

/// A boxed future returned by store reads.
pub type StoreFuture<'a, T> = Pin<Box<dyn Future<Output = Result<T, StoreError>> + Send + 'a>>;

/// A queued write: already ordered when returned, resolves once durable or failed.
/// Dropping it does not cancel the write.
pub type Ticket<T> = StoreFuture<'static, T>;

/// A random id assigned when a session is created or imported; store-local, never
/// exported. Projection checkpoints are valid only for the incarnation that wrote them.
pub type Incarnation = String;

/// One event as the store sees it: its seq and the exact JSON text of its envelope.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredEvent {
    /// The event's seq (its index in the session).
    pub seq: u64,
    /// The envelope's compact JSON, stored and returned byte for byte (an append
    /// shares it with the session's log instead of copying it).
    pub json: EnvelopeJson,
}

/// What `create_session` records.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewSession {
    /// The session id.
    pub id: SessionId,
    /// Creation time, epoch ms.
    pub created_ms: i64,
    /// The session it was forked from.
    pub parent: Option<SessionId>,
    /// How many events were inherited from `parent`.
    pub seed_length: Option<u64>,
    /// A JSON object (text) of free-form metadata, stored verbatim.
    pub meta_json: String,
    /// The incarnation to store it under: a fresh one ([`new_incarnation`]) for every
    /// creation and import. Chosen by the creator, so a session whose creation is
    /// queued and not awaited knows its incarnation at once.
    pub incarnation: Incarnation,
}

/// A fresh, random incarnation (a UUID v4) for a [`NewSession`].
pub fn new_incarnation() -> Incarnation {
    uuid::Uuid::new_v4().to_string()
}

/// A stored session's header.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SessionRecord {
    /// The session id.
    pub id: SessionId,
    /// Creation time, epoch ms.
    pub created_ms: i64,
    /// The session it was forked from.
    pub parent: Option<SessionId>,
    /// How many events were inherited from `parent`.
    pub seed_length: Option<u64>,
    /// The metadata object's JSON text, verbatim.
    pub meta_json: String,
    /// This store's incarnation of the session.
    pub incarnation: Incarnation,
    /// The number of durable events (the next seq to write).
    pub head: u64,
}

/// Which way a range read walks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ReadDirection {
    /// Ascending seqs.
    #[default]
    Forward,
    /// Descending seqs.
    Backward,
}

/// A seq range to read: `from..to` (end exclusive, `None` = to the head), walked in
/// `direction`, at most `limit` events.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ReadRange {
    /// First seq (inclusive).
    pub from: u64,
    /// End seq (exclusive); `None` reads to the head.
    pub to: Option<u64>,
    /// Ascending or descending.
    pub direction: ReadDirection,
    /// At most this many events; `None` for all.
    pub limit: Option<usize>,
}

impl ReadRange {
    /// Every event, ascending.
    pub fn all() -> Self {
        Self::default()
    }
}

/// Which sessions `list_sessions` returns: newest first.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct SessionQuery {
    /// At most this many; `None` for all.
    pub limit: Option<usize>,
}

/// The longest KV key accepted, in UTF-8 bytes (spec H-DOM-2); longer keys fail with
/// `Invalid`.
pub const MAX_KV_KEY_BYTES: usize = 512;

/// The largest KV value accepted, in bytes (4 MiB, spec H-DOM-2); larger values fail
/// with `Invalid`.
pub const MAX_KV_VALUE_BYTES: usize = 4 * 1024 * 1024;

/// A KV row's current version (from 1) and value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KvEntry {
    /// Bumped by every successful write.
    pub version: u64,
    /// The value bytes.
    pub value: Vec<u8>,
}

/// A page of a KV scan: keys strictly after `after`, ascending, at most `limit`.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct KvPage {
    /// Resume after this key.
    pub after: Option<String>,
    /// At most this many rows; `None` for all.
    pub limit: Option<usize>,
}

/// Durable storage for sessions and KV domains (spec H-STORE).
///
/// Write methods queue their operation before returning (so calls are ordered as
/// made) and return a [`Ticket`] that resolves once the operation is durable.
pub trait Store: Send + Sync + 'static {
    /// Creates a session with `events` (its seed, or an import) in one transaction under
    /// `session.incarnation` and returns that incarnation. Fails with `SessionExists` if
    /// the id is taken.
    fn create_session(&self, session: NewSession, events: Vec<StoredEvent>) -> Ticket<Incarnation>;

    /// Appends `events` (seqs `expected_seq..`) if the stored head equals `expected_seq`,
    /// else fails with `Conflict` and writes nothing. Resolves to the new head.
    fn append(
        &self,
        session: &SessionId,
        expected_seq: u64,
        events: Vec<StoredEvent>,
    ) -> Ticket<u64>;

    /// [`Store::append`] for a caller that waits for this very ticket (every append
    /// durable before it returns, `Durability::PerAppend`): a backend that batches
    /// appends commits without waiting for more. The default is `append`.
    fn append_awaited(
        &self,
        session: &SessionId,
        expected_seq: u64,
        events: Vec<StoredEvent>,
    ) -> Ticket<u64> {
        self.append(session, expected_seq, events)
    }

    /// Writes (`Some`) or deletes (`None`) a KV row if its version equals
    /// `expected_version` (`None` = must not exist), else fails with `CasConflict`.
    /// Resolves to the new version (`None` after a delete).
    fn kv_cas(
        &self,
        domain: &str,
        key: &str,
        expected_version: Option<u64>,
        value: Option<Vec<u8>>,
    ) -> Ticket<Option<u64>>;

    /// [`Store::kv_cas`] for a write its caller follows at once with writes of its own
    /// and a flush (an agent's inbox row, then the turn it opens): a backend that
    /// groups commits may keep the group open for them, as it does after an append
    /// nobody awaits, so they all commit together (one fsync, not two). Its ticket then
    /// resolves with that commit, at the latest when the backend's linger ends. The
    /// default is `kv_cas`.
    fn kv_cas_lingering(
        &self,
        domain: &str,
        key: &str,
        expected_version: Option<u64>,
        value: Option<Vec<u8>>,
    ) -> Ticket<Option<u64>> {
        self.kv_cas(domain, key, expected_version, value)
    }

    /// Commits everything queued before it at once; resolves when all of it is durable,
    /// or with the oldest write error not yet reported through a ticket or a flush.
    fn flush(&self) -> Ticket<()>;

    /// A stored session's header.
    fn session(&self, id: &SessionId) -> StoreFuture<'_, Option<SessionRecord>>;

    /// Stored sessions, newest first.
    fn list_sessions(&self, query: SessionQuery) -> StoreFuture<'_, Vec<SessionRecord>>;

    /// Durable events of a session in `range`. Fails with `UnknownSession`.
    fn read(&self, id: &SessionId, range: ReadRange) -> StoreFuture<'_, Vec<StoredEvent>>;

    /// A KV row.
    fn kv_get(&self, domain: &str, key: &str) -> StoreFuture<'_, Option<KvEntry>>;

    /// KV rows of `domain` whose key starts with `prefix`, ascending by key.
    fn kv_scan(
        &self,
        domain: &str,
        prefix: &str,
        page: KvPage,
    ) -> StoreFuture<'_, Vec<(String, KvEntry)>>;

    /// Grants `claim`'s lease on its session (spec server.md ACT-1) if the session has
    /// none, the lease is the claimant's own (then it is renewed), it expired
    /// (`expires_ms <= claim.now_ms`), or its owner is `claim.replacing`; else fails
    /// with `SessionBusy` naming the holder and writes nothing. The session need not be
    /// stored yet. Resolves to the granted lease once durable.
    /// Every backend runs the conformance suite's lease checks.
    fn lease_acquire(&self, claim: LeaseClaim) -> Ticket<Lease>;

    /// Moves the expiry of `owner`'s lease on `session` to `expires_ms` (whether or not
    /// it expired meanwhile, as long as nobody took it over); fails with `LeaseLost` if
    /// `owner` does not hold it. Resolves to the renewed lease.
    fn lease_renew(&self, session: &SessionId, owner: &str, expires_ms: i64) -> Ticket<Lease>;

    /// Deletes `owner`'s lease on `session`; resolves to whether it was held (a lease
    /// someone else holds now is left alone, and that is not an error).
    fn lease_release(&self, session: &SessionId, owner: &str) -> Ticket<bool>;

    /// The session's current lease, expired or not (`None`: never leased, or released).
    fn lease(&self, session: &SessionId) -> StoreFuture<'_, Option<Lease>>;
}
