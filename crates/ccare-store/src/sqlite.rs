//! The SQLite backend (spec H-STORE-3/4).
//!
//! # Layout
//!
//! One file holds four tables (`sessions`, `events`, `kv`, `leases`) in WAL mode with
//! `synchronous=FULL`; `PRAGMA user_version` is the schema version
//! ([`SqliteStore::SCHEMA_VERSION`]). A version-1 database (before `leases`) is
//! migrated in place when opened: the table is added, nothing else changes. Every connection has a busy timeout
//! ([`SqliteConfig::busy_timeout_ms`]), so two stores on one file (in one process or
//! two) take turns instead of failing.
//!
//! # Writes: one thread, group commit
//!
//! A single writer thread owns the only read-write connection. Each write method sends
//! its operation down a channel before it returns (so a caller's operations are applied
//! in the order it made them) and hands back a [`Ticket`] that resolves from a
//! `oneshot` once the operation's transaction has committed (or failed).
//!
//! The writer waits for the first operation of a group (polling the queue for
//! [`SqliteStore::WRITER_SPIN`] before it blocks: writes come in quick sequences, and a
//! blocked thread is slow to wake), opens one `BEGIN IMMEDIATE`
//! transaction, applies it, then keeps taking operations that are already queued and
//! applies them in the same transaction, until the queue is momentarily empty or
//! [`SqliteConfig::max_group_ops`] operations are in the group. A flush does not end
//! the group: what is queued behind it already (at most
//! [`SqliteStore::FLUSH_FOLLOW_OPS`] more) goes in too, since in a burst that is
//! other sessions' writes and flushes, each of which would otherwise wait for a
//! commit of its own (an fsync each on a disk); the flush's caller waits only for
//! their application (and, as within any group, a database error in one of them fails
//! the whole group, the flush included). Then it commits and resolves the group's
//! tickets in queue order.
//!
//! When the queue runs empty right after an *append* (or a KV write queued with
//! [`Store::kv_cas_lingering`], which its caller follows the same way), the writer
//! waits up to [`SqliteStore::APPEND_LINGER`] for the next operation and takes it into
//! the group (in a burst, once the group holds [`SqliteStore::APPEND_BURST_OPS`]
//! operations, it first sleeps [`SqliteStore::APPEND_BURST_GAP`] so the burst is taken
//! in bulk): a session appending a burst of events is still mid-burst, and the caller
//! that needs them durable sends a flush (so `append` + `flush` waits for one commit,
//! not two, even when the kernel does work between them). It never lingers once the
//! group holds something a caller awaits (a flush, a plain KV write, a lease renewal
//! or release, an [`Store::append_awaited`]): that caller would wait out the linger,
//! and in a burst other sessions' appends would keep it waiting.
//! After creating a session, and after the lease that follows it in the same group, it
//! polls the queue for [`SqliteStore::CREATE_FOLLOW_SPIN`] (never blocking, and not
//! when something in the group is awaited), since the session's lease and first writes
//! follow at once. After any other operation it never lingers. Either way a group
//! commits well within [`SqliteConfig::commit_window_ms`] of its first operation
//! (H-STORE-4): lingering stops once the window has passed.
//!
//! Appends are checked when applied but written later (`sqlite/group.rs`): a group reads
//! each session's head once, writes its appended rows with multi-row `INSERT`s (a full
//! statement's worth as soon as it is pending, so a burst's rows go in while its next
//! appends are still coming; the rest just before the commit) and each moved head with
//! one `UPDATE` before the commit, so an event costs a share of one statement instead
//! of three. A database error while writing them fails
//! the group like any other (every operation taken into it fails and nothing is
//! written).
//!
//! Inside the group each operation first checks its preconditions (session exists,
//! head, CAS version, limits) and writes only when they hold, so an operation that fails
//! logically (`Conflict`, `CasConflict`, `SessionExists`, `UnknownSession`, `Invalid`)
//! leaves nothing behind and does not disturb the rest of the group. A database error
//! (I/O, disk full, busy past the timeout, a constraint the checks did not foresee)
//! rolls the whole transaction back and fails *every* operation of the group with
//! [`StoreError::Backend`]; nothing of that group is written.
//!
//! # Unreported errors and flush
//!
//! A failed write's error is *reported* once its ticket has yielded it to an awaiting
//! caller. The writer remembers every failed write's error until the next flush; the
//! flush returns the oldest one that no ticket has yielded yet (a dropped ticket never
//! will) and forgets the rest (logging them). So a caller that drops tickets learns of
//! the first failure at the next flush, and one that awaited its failing ticket before
//! flushing does not see that error twice. An error still sitting in a live ticket that
//! has not been awaited when the flush resolves is returned by both. A flush in a
//! group whose transaction failed returns an error (the group's, or an older one).
//! [`SqliteStore::close`] returns what the last flush would have.
//!
//! # Reads
//!
//! Reads run on `tokio::task::spawn_blocking` (so they need a tokio runtime) with one of
//! [`SqliteConfig::read_connections`] read-only connections; a read waits for a free
//! connection. A point read by primary key (`session`, `kv_get`, `lease`: one row,
//! a few B-tree pages, microseconds on a warm page cache) runs on the polling thread
//! when a connection is free at once: handing it to a blocking thread and back costs
//! more than the read, and on a busy server the hand-off's wake-ups delay it far
//! more. It falls back to `spawn_blocking` when every connection is busy. A
//! multi-statement read runs in one read transaction, so it sees one snapshot. Rows are
//! checked: an event body must be UTF-8 TEXT and the seqs of a range must have no gap,
//! else [`StoreError::Corrupt`].

mod group;
mod lease;

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc;
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use ccare_core::SessionId;
use rusqlite::config::DbConfig;
use rusqlite::types::ValueRef;
use rusqlite::{Connection, OpenFlags, OptionalExtension, Row, TransactionBehavior, params};
use tokio::sync::oneshot;

use crate::checks::{check_kv, check_seqs, preview};
use crate::error::StoreError;
use crate::failures::{Failed, Failures};
use crate::lease::{Lease, LeaseClaim};
use crate::types::{
    Incarnation, KvEntry, KvPage, NewSession, ReadDirection, ReadRange, SessionQuery,
    SessionRecord, Store, StoreFuture, StoredEvent, Ticket,
};
use group::{Pending, WriteFailure};

/// Where and how a [`SqliteStore`] keeps its data.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SqliteConfig {
    /// The database file; created with its schema when missing (its directory is not).
    pub path: PathBuf,
    /// The longest a queued write may wait for its group to commit (H-STORE-4,
    /// default 200). The writer commits as soon as the queue is empty, so this is only
    /// an upper bound; it never lingers to collect more work.
    pub commit_window_ms: u64,
    /// The most operations one group transaction takes (default 4096; 0 counts as 1).
    pub max_group_ops: usize,
    /// How many read-only connections serve reads (default 2; 0 counts as 1).
    pub read_connections: usize,
    /// How long each connection waits for another connection's lock (another store or
    /// program on the same file) before the operation fails (default 5000). A write
    /// group that fails this way fails every write in it, so a lock held for long
    /// costs up to this much per group.
    pub busy_timeout_ms: u64,
}

impl SqliteConfig {
    /// The default [`SqliteConfig::commit_window_ms`].
    pub const DEFAULT_COMMIT_WINDOW_MS: u64 = 200;
    /// The default [`SqliteConfig::max_group_ops`].
    pub const DEFAULT_MAX_GROUP_OPS: usize = 4096;
    /// The default [`SqliteConfig::read_connections`].
    pub const DEFAULT_READ_CONNECTIONS: usize = 2;
    /// The default [`SqliteConfig::busy_timeout_ms`].
    pub const DEFAULT_BUSY_TIMEOUT_MS: u64 = 5000;

    /// A configuration for the database at `path`, with the defaults.
    pub fn new(path: impl Into<PathBuf>) -> Self {
        Self {
            path: path.into(),
            commit_window_ms: Self::DEFAULT_COMMIT_WINDOW_MS,
            max_group_ops: Self::DEFAULT_MAX_GROUP_OPS,
            read_connections: Self::DEFAULT_READ_CONNECTIONS,
            busy_timeout_ms: Self::DEFAULT_BUSY_TIMEOUT_MS,
        }
    }
}

/// The embedded SQLite [`Store`]: a cheap, cloneable handle.
///
/// The writer thread and the read connections live until [`SqliteStore::close`] or
/// until the last handle is dropped; either way every write queued before then is
/// committed first. Both block the calling thread while the queue drains.
#[derive(Clone)]
pub struct SqliteStore {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for SqliteStore {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter
            .debug_struct("SqliteStore")
            .field("path", &self.inner.path)
            .field("closed", &self.inner.closed.load(Ordering::Acquire))
            .finish()
    }
}

struct Inner {
    path: PathBuf,
    queue: Mutex<Option<mpsc::Sender<Op>>>,
    writer: Mutex<Option<JoinHandle<Option<StoreError>>>>,
    readers: Arc<ReadPool>,
    closed: AtomicBool,
    /// Group transactions committed so far ([`SqliteStore::commits`]).
    commits: Arc<AtomicU64>,
}

/// Where the writer sends one operation's result.
struct Reply<T> {
    sender: oneshot::Sender<Result<T, StoreError>>,
    /// Set by the ticket once it has yielded an error to its caller.
    seen: Arc<AtomicBool>,
}

/// A queued write.
enum Op {
    Create {
        session: NewSession,
        events: Vec<StoredEvent>,
        reply: Reply<Incarnation>,
    },
    Append {
        session: SessionId,
        expected: u64,
        events: Vec<StoredEvent>,
        /// Whether the writer may linger after it (not when its caller awaits it).
        linger: bool,
        reply: Reply<u64>,
    },
    KvCas {
        domain: String,
        key: String,
        expected: Option<u64>,
        value: Option<Vec<u8>>,
        /// Whether the writer may linger after it ([`Store::kv_cas_lingering`]).
        linger: bool,
        reply: Reply<Option<u64>>,
    },
    LeaseAcquire {
        claim: LeaseClaim,
        reply: Reply<Lease>,
    },
    LeaseRenew {
        session: SessionId,
        owner: String,
        expires_ms: i64,
        reply: Reply<Lease>,
    },
    LeaseRelease {
        session: SessionId,
        owner: String,
        reply: Reply<bool>,
    },
    Flush {
        reply: Reply<()>,
    },
}

/// An applied write waiting for its group's commit.
enum Done {
    Create(Reply<Incarnation>, Result<Incarnation, StoreError>),
    Append(Reply<u64>, Result<u64, StoreError>),
    KvCas(Reply<Option<u64>>, Result<Option<u64>, StoreError>),
    Lease(&'static str, Reply<Lease>, Result<Lease, StoreError>),
    LeaseRelease(Reply<bool>, Result<bool, StoreError>),
    Flush(Reply<()>),
}

/// A database error inside a group, already described with the operation it hit.
struct GroupFailure(String);

/// Logical outcome inside the SQL outcome: the outer error aborts the group.
type Applied<T> = rusqlite::Result<Result<T, StoreError>>;

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

fn backend(operation: &'static str, path: &Path, detail: impl std::fmt::Display) -> StoreError {
    StoreError::Backend {
        operation,
        message: format!("{}: {detail}", path.display()),
    }
}

impl SqliteStore {
    /// The schema version kept in `PRAGMA user_version`.
    pub const SCHEMA_VERSION: i64 = 2;
    /// How long, at most, the writer waits for the next operation when the queue runs
    /// empty right after an append (see the module docs). An append nobody awaits is
    /// nearly always followed by the flush that needs it (the kernel appends
    /// `step/start`, builds the request, then flushes before dispatch) or by more
    /// appends; waiting for them makes one commit (one fsync) of what would be two or
    /// three. The wait ends the moment an operation arrives, so it costs time only when
    /// nothing follows: then the append is durable this much later, still well within
    /// [`SqliteConfig::commit_window_ms`].
    pub const APPEND_LINGER: Duration = Duration::from_millis(5);
    /// How long the writer sleeps first when the queue runs empty after an append: about
    /// the time a busy session takes for a dozen appends, so a burst is taken in bulk.
    pub const APPEND_BURST_GAP: Duration = Duration::from_micros(50);
    /// How many operations a group holds before the writer treats the appends as a
    /// burst and sleeps [`SqliteStore::APPEND_BURST_GAP`] when the queue runs empty:
    /// below it, the sleep (50 µs asked, ~100 µs with the kernel's timer slack) would
    /// only delay the flush of a turn's few appends, which is on the path to every
    /// model request.
    pub const APPEND_BURST_OPS: usize = 8;
    /// The most operations a group takes after its first flush, from what is queued
    /// already (it never waits for more): enough for a burst of new conversations, each
    /// opening with a handful of writes and a flush, to share one commit, few enough
    /// that the flush's caller waits for their application only briefly.
    pub const FLUSH_FOLLOW_OPS: usize = 256;
    /// How long the writer polls the queue, without blocking, before it blocks for the
    /// next operation: after each group, and after a few appends before it lingers
    /// for their flush (up to [`SqliteStore::APPEND_LINGER`]). Writes come in quick
    /// sequences (a turn's appends and their flush, a new session then its lease, the
    /// next step's start), and a blocked thread takes tens of microseconds to wake (more on
    /// a virtual machine, whose idle core must be woken too); polling takes the next
    /// operation the moment it is queued, for at most this much CPU per group. Long
    /// enough to span a model request's preparation (the pre-step hooks, the request
    /// and its gates: a few hundred microseconds with context care on) between the
    /// commit that opens a step and the flush before its dispatch, so that flush
    /// finds the writer awake: 50 µs let it block in between, and on the gateway bench
    /// 500 µs took about 0.2 ms off the added first-byte latency with care on (the
    /// polls yield the core, so a busy machine's other threads run first).
    pub const WRITER_SPIN: Duration = Duration::from_micros(500);
    /// The longest KV scan page read in place on the caller's thread (when a read
    /// connection is free), like a point read; longer pages go to the blocking pool.
    pub const INLINE_SCAN_ROWS: usize = 64;
    /// How long the writer polls for what follows a new session (its lease, then its
    /// first writes) before it commits the session alone, after the creation and again
    /// after the lease that follows it. Long enough for a gateway's new conversation to
    /// queue its inbox row after the lease (about 50 µs on the gateway bench; at 50 µs
    /// one conversation in ten missed the group and paid a commit more), whose linger
    /// then keeps the group open for the turn's opening. Shorter than
    /// [`SqliteStore::WRITER_SPIN`]: the group is open meanwhile, so a creator that
    /// awaits its session before anything else waits out the whole poll.
    pub const CREATE_FOLLOW_SPIN: Duration = Duration::from_micros(100);

    /// Opens (creating if missing) the database at `config.path`, sets it up and starts
    /// the writer thread. Blocking. Fails with `Backend` (naming the path) when the file
    /// cannot be opened, is not a database, cannot use WAL, or has another schema.
    pub fn open(config: SqliteConfig) -> Result<SqliteStore, StoreError> {
        let path = config.path.clone();
        let busy_timeout = Duration::from_millis(config.busy_timeout_ms);
        let conn = open_writer(&path, busy_timeout)?;
        let readers = Arc::new(ReadPool::open(
            &path,
            config.read_connections.max(1),
            busy_timeout,
        )?);
        let (sender, receiver) = mpsc::channel();
        let commits = Arc::new(AtomicU64::new(0));
        let writer = Writer {
            conn,
            path: path.clone(),
            commits: Arc::clone(&commits),
            max_group_ops: config.max_group_ops.max(1),
            commit_window: Duration::from_millis(config.commit_window_ms),
            failures: Failures::default(),
        };
        let handle = std::thread::Builder::new()
            .name("ccare-store-writer".into())
            .spawn(move || writer.run(&receiver))
            .map_err(|err| {
                backend(
                    "open",
                    &path,
                    format_args!("cannot start the writer thread: {err}"),
                )
            })?;
        tracing::debug!(path = %path.display(), "sqlite store opened");
        Ok(SqliteStore {
            inner: Arc::new(Inner {
                path,
                queue: Mutex::new(Some(sender)),
                writer: Mutex::new(Some(handle)),
                readers,
                closed: AtomicBool::new(false),
                commits,
            }),
        })
    }

    /// The database file.
    pub fn path(&self) -> &Path {
        &self.inner.path
    }

    /// How many group transactions the writer has committed since the store opened.
    /// Beside the number of writes it says how well they share commits (on a disk each
    /// commit is an fsync).
    pub fn commits(&self) -> u64 {
        self.inner.commits.load(Ordering::Acquire)
    }

    /// Stops accepting work, commits everything already queued and stops the writer
    /// thread, for every handle of this store. Blocks until the queue is drained (call
    /// it from `spawn_blocking` in async code). Returns the oldest write error no ticket
    /// or flush reported. Afterwards writes and reads fail with `Closed`, and `close`
    /// returns `Ok(())`.
    pub fn close(&self) -> Result<(), StoreError> {
        self.inner.shutdown()
    }

    /// Queues a KV compare-and-swap; `linger`: the writer may keep its group open after
    /// it ([`Store::kv_cas_lingering`]).
    fn submit_kv_cas(
        &self,
        domain: &str,
        key: &str,
        expected: Option<u64>,
        value: Option<Vec<u8>>,
        linger: bool,
    ) -> Ticket<Option<u64>> {
        let (domain, key) = (domain.to_owned(), key.to_owned());
        self.submit(|reply| Op::KvCas {
            domain,
            key,
            expected,
            value,
            linger,
            reply,
        })
    }

    fn submit<T: Send + 'static>(&self, make: impl FnOnce(Reply<T>) -> Op) -> Ticket<T> {
        let (sender, result) = oneshot::channel();
        let seen = Arc::new(AtomicBool::new(false));
        let op = make(Reply {
            sender,
            seen: Arc::clone(&seen),
        });
        let queued = match lock(&self.inner.queue).as_ref() {
            Some(queue) => queue.send(op).is_ok(),
            None => false,
        };
        if !queued {
            return Box::pin(std::future::ready(Err(StoreError::Closed)));
        }
        Box::pin(async move {
            let result = result.await.unwrap_or(Err(StoreError::Closed));
            if result.is_err() {
                seen.store(true, Ordering::Release);
            }
            result
        })
    }

    /// A point read: on the polling thread when a read connection is free at once,
    /// else as [`SqliteStore::blocking`] does.
    fn point<T: Send + 'static>(
        &self,
        operation: &'static str,
        work: impl FnOnce(&mut Connection, &Path) -> Result<T, StoreError> + Send + 'static,
    ) -> StoreFuture<'_, T> {
        if self.inner.closed.load(Ordering::Acquire) {
            return Box::pin(std::future::ready(Err(StoreError::Closed)));
        }
        Box::pin(async move {
            let pool = &self.inner.readers;
            match pool.try_checkout() {
                Some(mut checkout) => match checkout.conn.as_mut() {
                    Some(conn) => work(conn, &pool.path),
                    None => Err(backend(operation, self.path(), "no read connection")),
                },
                None => self.blocking(operation, work).await,
            }
        })
    }

    fn blocking<T: Send + 'static>(
        &self,
        operation: &'static str,
        work: impl FnOnce(&mut Connection, &Path) -> Result<T, StoreError> + Send + 'static,
    ) -> StoreFuture<'_, T> {
        if self.inner.closed.load(Ordering::Acquire) {
            return Box::pin(std::future::ready(Err(StoreError::Closed)));
        }
        let pool = Arc::clone(&self.inner.readers);
        Box::pin(async move {
            let task = tokio::task::spawn_blocking(move || pool.with(work));
            match task.await {
                Ok(result) => result,
                Err(err) => Err(backend(
                    operation,
                    self.path(),
                    format_args!("the blocking read task failed: {err}"),
                )),
            }
        })
    }
}

impl Inner {
    fn shutdown(&self) -> Result<(), StoreError> {
        self.closed.store(true, Ordering::Release);
        drop(lock(&self.queue).take());
        // Held while joining, so a concurrent close returns only after the drain.
        let mut writer = lock(&self.writer);
        let Some(handle) = writer.take() else {
            return Ok(());
        };
        match handle.join() {
            Ok(None) => Ok(()),
            Ok(Some(err)) => Err(err),
            Err(_) => Err(backend("close", &self.path, "the writer thread panicked")),
        }
    }
}

impl Drop for Inner {
    fn drop(&mut self) {
        if let Err(err) = self.shutdown() {
            tracing::warn!(path = %self.path.display(), error = %err, "sqlite store dropped with an unreported write error");
        }
    }
}

impl Store for SqliteStore {
    fn create_session(&self, session: NewSession, events: Vec<StoredEvent>) -> Ticket<Incarnation> {
        self.submit(|reply| Op::Create {
            session,
            events,
            reply,
        })
    }

    fn append(
        &self,
        session: &SessionId,
        expected_seq: u64,
        events: Vec<StoredEvent>,
    ) -> Ticket<u64> {
        let session = session.clone();
        self.submit(|reply| Op::Append {
            session,
            expected: expected_seq,
            events,
            linger: true,
            reply,
        })
    }

    fn append_awaited(
        &self,
        session: &SessionId,
        expected_seq: u64,
        events: Vec<StoredEvent>,
    ) -> Ticket<u64> {
        let session = session.clone();
        self.submit(|reply| Op::Append {
            session,
            expected: expected_seq,
            events,
            linger: false,
            reply,
        })
    }

    fn kv_cas(
        &self,
        domain: &str,
        key: &str,
        expected_version: Option<u64>,
        value: Option<Vec<u8>>,
    ) -> Ticket<Option<u64>> {
        self.submit_kv_cas(domain, key, expected_version, value, false)
    }

    fn kv_cas_lingering(
        &self,
        domain: &str,
        key: &str,
        expected_version: Option<u64>,
        value: Option<Vec<u8>>,
    ) -> Ticket<Option<u64>> {
        self.submit_kv_cas(domain, key, expected_version, value, true)
    }

    fn flush(&self) -> Ticket<()> {
        self.submit(|reply| Op::Flush { reply })
    }

    fn session(&self, id: &SessionId) -> StoreFuture<'_, Option<SessionRecord>> {
        let id = id.clone();
        self.point("session", move |conn, path| read_session(conn, path, &id))
    }

    fn list_sessions(&self, query: SessionQuery) -> StoreFuture<'_, Vec<SessionRecord>> {
        self.blocking("list_sessions", move |conn, path| {
            list_sessions(conn, path, query)
        })
    }

    fn read(&self, id: &SessionId, range: ReadRange) -> StoreFuture<'_, Vec<StoredEvent>> {
        let id = id.clone();
        self.blocking("read", move |conn, path| {
            read_events(conn, path, &id, range)
        })
    }

    fn lease_acquire(&self, claim: LeaseClaim) -> Ticket<Lease> {
        self.submit(|reply| Op::LeaseAcquire { claim, reply })
    }

    fn lease_renew(&self, session: &SessionId, owner: &str, expires_ms: i64) -> Ticket<Lease> {
        let (session, owner) = (session.clone(), owner.to_owned());
        self.submit(|reply| Op::LeaseRenew {
            session,
            owner,
            expires_ms,
            reply,
        })
    }

    fn lease_release(&self, session: &SessionId, owner: &str) -> Ticket<bool> {
        let (session, owner) = (session.clone(), owner.to_owned());
        self.submit(|reply| Op::LeaseRelease {
            session,
            owner,
            reply,
        })
    }

    fn lease(&self, session: &SessionId) -> StoreFuture<'_, Option<Lease>> {
        let session = session.clone();
        self.point("lease", move |conn, path| {
            lease::read_lease(conn, path, &session)
        })
    }

    fn kv_get(&self, domain: &str, key: &str) -> StoreFuture<'_, Option<KvEntry>> {
        let (domain, key) = (domain.to_owned(), key.to_owned());
        self.point("kv_get", move |conn, path| {
            kv_get(conn, path, &domain, &key)
        })
    }

    fn kv_scan(
        &self,
        domain: &str,
        prefix: &str,
        page: KvPage,
    ) -> StoreFuture<'_, Vec<(String, KvEntry)>> {
        let (domain, prefix) = (domain.to_owned(), prefix.to_owned());
        let inline = page
            .limit
            .is_some_and(|limit| limit <= SqliteStore::INLINE_SCAN_ROWS);
        let scan =
            move |conn: &mut Connection, path: &Path| kv_scan(conn, path, &domain, &prefix, &page);
        // A short page (a session's few rows, or none) is read in place like a point
        // read; a long one on the blocking pool.
        if inline {
            self.point("kv_scan", scan)
        } else {
            self.blocking("kv_scan", scan)
        }
    }
}

// ---------------------------------------------------------------------------------------
// Opening and schema
// ---------------------------------------------------------------------------------------

const SCHEMA: &str = "
CREATE TABLE sessions (
    id TEXT PRIMARY KEY,
    created_ms INTEGER NOT NULL,
    parent TEXT,
    seed_length INTEGER,
    meta TEXT NOT NULL,
    incarnation TEXT NOT NULL,
    head INTEGER NOT NULL,
    created_order INTEGER NOT NULL
);
CREATE UNIQUE INDEX sessions_by_order ON sessions (created_order);
CREATE INDEX sessions_by_recency ON sessions (created_ms, created_order);
CREATE TABLE events (
    session_id TEXT NOT NULL,
    seq INTEGER NOT NULL,
    body TEXT NOT NULL,
    PRIMARY KEY (session_id, seq)
);
CREATE TABLE kv (
    domain TEXT NOT NULL,
    key TEXT NOT NULL,
    version INTEGER NOT NULL,
    value BLOB NOT NULL,
    PRIMARY KEY (domain, key)
);
";

/// Statements that fail to prepare unless every table has the columns this code uses.
const SCHEMA_PROBES: [&str; 4] = [
    "SELECT id, created_ms, parent, seed_length, meta, incarnation, head, created_order FROM sessions LIMIT 0",
    "SELECT session_id, seq, body FROM events LIMIT 0",
    "SELECT domain, key, version, value FROM kv LIMIT 0",
    lease::PROBE,
];

/// Turns on SQLite's query planner stability guarantee for `conn`. Without it, a
/// statement whose plan could depend on a bound value (a range such as `key >= ?2`,
/// `seq < ?3`, or a `LIMIT ?`) is compiled again at every execution, cached or not:
/// the bundled SQLite is built with STAT4, which marks such parameters "reprepare on
/// bind". Every range read here (a session's KV rows, a span of events) would pay a
/// full parse and plan each time, on the request path. The store never runs
/// `ANALYZE`, so there are no statistics a new plan could use anyway.
fn stable_plans(conn: &Connection) -> rusqlite::Result<()> {
    conn.set_db_config(DbConfig::SQLITE_DBCONFIG_ENABLE_QPSG, true)
        .map(|_| ())
}

/// How many prepared statements the writer connection keeps: more than it uses.
const WRITER_STATEMENTS: usize = 64;

fn open_writer(path: &Path, busy_timeout: Duration) -> Result<Connection, StoreError> {
    let fail =
        |what: &str, err: rusqlite::Error| backend("open", path, format_args!("{what}: {err}"));
    let mut conn = Connection::open(path).map_err(|err| fail("cannot open the database", err))?;
    conn.busy_timeout(busy_timeout)
        .map_err(|err| fail("cannot set busy_timeout", err))?;
    stable_plans(&conn).map_err(|err| fail("cannot keep query plans stable", err))?;
    let mode: String = conn
        .pragma_update_and_check(None, "journal_mode", "WAL", |row| row.get(0))
        .map_err(|err| fail("cannot enable WAL", err))?;
    if !mode.eq_ignore_ascii_case("wal") {
        return Err(backend(
            "open",
            path,
            format_args!("the database refuses WAL (journal_mode is {mode})"),
        ));
    }
    conn.pragma_update(None, "synchronous", "FULL")
        .map_err(|err| fail("cannot set synchronous=FULL", err))?;
    // Every statement the writer runs stays prepared (the multi-row inserts included).
    conn.set_prepared_statement_cache_capacity(WRITER_STATEMENTS);

    let tx = conn
        .transaction_with_behavior(TransactionBehavior::Immediate)
        .map_err(|err| fail("cannot lock the database to check its schema", err))?;
    let version: i64 = tx
        .pragma_query_value(None, "user_version", |row| row.get(0))
        .map_err(|err| fail("cannot read the schema version", err))?;
    match version {
        0 => {
            tx.execute_batch(SCHEMA)
                .and_then(|()| tx.execute_batch(lease::SCHEMA))
                .map_err(|err| fail("cannot create the schema", err))?;
            tx.pragma_update(None, "user_version", SqliteStore::SCHEMA_VERSION)
                .map_err(|err| fail("cannot set the schema version", err))?;
        }
        1 => {
            // Version 1 had no leases; adding the table is the whole migration.
            tx.execute_batch(lease::SCHEMA)
                .map_err(|err| fail("cannot add the leases table (schema 1 to 2)", err))?;
            tx.pragma_update(None, "user_version", SqliteStore::SCHEMA_VERSION)
                .map_err(|err| fail("cannot set the schema version", err))?;
            tracing::info!(path = %path.display(), "sqlite schema migrated from version 1 to 2 (leases)");
        }
        SqliteStore::SCHEMA_VERSION => {}
        other => {
            return Err(backend(
                "open",
                path,
                format_args!(
                    "schema version {other} is not supported (this build reads version {})",
                    SqliteStore::SCHEMA_VERSION
                ),
            ));
        }
    }
    for probe in SCHEMA_PROBES {
        tx.prepare(probe)
            .map_err(|err| fail("the schema does not match this build", err))?;
    }
    tx.commit()
        .map_err(|err| fail("cannot commit the schema", err))?;
    Ok(conn)
}

// ---------------------------------------------------------------------------------------
// The writer thread
// ---------------------------------------------------------------------------------------

struct Writer {
    conn: Connection,
    path: PathBuf,
    max_group_ops: usize,
    /// [`SqliteConfig::commit_window_ms`]: lingering stops once a group is this old.
    commit_window: Duration,
    /// Failed writes since the last flush.
    failures: Failures,
    /// Shared with [`Inner::commits`].
    commits: Arc<AtomicU64>,
}

impl Writer {
    fn run(mut self, queue: &mpsc::Receiver<Op>) -> Option<StoreError> {
        // `recv` fails only once every sender is gone *and* the queue is empty, so
        // everything queued before shutdown is committed.
        loop {
            let first = match Self::spin(queue, SqliteStore::WRITER_SPIN) {
                Some(Some(op)) => op,
                Some(None) => break,
                None => match queue.recv() {
                    Ok(op) => op,
                    Err(_) => break,
                },
            };
            self.group(first, queue);
        }
        tracing::debug!(path = %self.path.display(), "sqlite writer stopped");
        self.failures
            .take_unreported(&self.path.display().to_string())
    }

    /// Applies `first` and whatever is already queued behind it in one transaction,
    /// commits, then resolves the tickets.
    fn group(&mut self, first: Op, queue: &mpsc::Receiver<Op>) {
        if let Op::Flush { reply } = first {
            // Everything before it was committed with earlier groups.
            self.resolve(vec![Done::Flush(reply)], None);
            return;
        }
        let mut done = Vec::new();
        let commit_window = self.commit_window;
        let failure = match self
            .conn
            .transaction_with_behavior(TransactionBehavior::Immediate)
        {
            Err(err) => {
                done.push(apply_failed(first));
                Some(GroupFailure(format!(
                    "cannot begin the write transaction: {err}"
                )))
            }
            Ok(tx) => {
                let mut failure = None;
                let mut pending = Pending::default();
                let started = Instant::now();
                let mut next = Some(first);
                // Whether the group holds a new session.
                let mut created = false;
                // Whether the group holds a write its caller awaits (a flush included).
                let mut awaited = false;
                // How many operations the group held when it took its first flush.
                let mut flushed_at = None;
                while let Some(op) = next.take() {
                    let is_flush = matches!(op, Op::Flush { .. });
                    // Someone waits for this group's commit: it lingers no more, for
                    // appends or KV writes that may follow (the caller of a lingering KV
                    // write may even be the one the awaited flush waits for: an idle
                    // hook awaiting the journal, while the inbox row of the next prompt
                    // lingers for the turn that hook holds back).
                    awaited |= matches!(
                        op,
                        Op::Flush { .. }
                            | Op::KvCas { linger: false, .. }
                            | Op::Append { linger: false, .. }
                            | Op::LeaseRenew { .. }
                            | Op::LeaseRelease { .. }
                    );
                    let linger = !awaited
                        && matches!(
                            op,
                            Op::Append { linger: true, .. } | Op::KvCas { linger: true, .. }
                        );
                    // A new session is nearly always followed at once by its lease and
                    // its first writes (an inbox row, the turn's opening): poll (never
                    // block) for them after it and after the lease that follows it.
                    created |= matches!(op, Op::Create { .. });
                    let poll_after = !awaited
                        && (matches!(op, Op::Create { .. })
                            || (created && matches!(op, Op::LeaseAcquire { .. })));
                    let (applied, failed) = apply(&tx, &mut pending, op);
                    done.push(applied);
                    if failed.is_some() {
                        failure = failed;
                        break;
                    }
                    if is_flush {
                        flushed_at.get_or_insert(done.len());
                    }
                    // After a flush the group takes only what is queued already (other
                    // sessions' writes and flushes, in a burst): applying them costs
                    // the flush's caller a few microseconds each, while a commit of
                    // their own would cost each of them a commit more.
                    if done.len() >= self.max_group_ops
                        || flushed_at
                            .is_some_and(|at| done.len() - at >= SqliteStore::FLUSH_FOLLOW_OPS)
                    {
                        break;
                    }
                    // A burst's rows go in while its next appends are still coming.
                    if let Err(failed) = pending.write_full(&tx) {
                        failure = Some(write_failed(&failed));
                        break;
                    }
                    next = match queue.try_recv() {
                        Ok(op) => Some(op),
                        Err(mpsc::TryRecvError::Empty) if linger => {
                            Self::linger(queue, started, commit_window, done.len())
                        }
                        Err(mpsc::TryRecvError::Empty) if poll_after => {
                            Self::spin(queue, SqliteStore::CREATE_FOLLOW_SPIN).flatten()
                        }
                        // Empty or disconnected: commit now (the outer loop sees the end).
                        Err(_) => None,
                    };
                }
                if failure.is_none()
                    && let Err(failed) = pending.write(&tx)
                {
                    failure = Some(write_failed(&failed));
                }
                match failure {
                    Some(failure) => {
                        // Some errors (I/O, full disk) already made SQLite roll back.
                        if tx.is_autocommit() {
                            drop(tx);
                        } else if let Err(err) = tx.rollback() {
                            tracing::error!(path = %self.path.display(), error = %err, "sqlite rollback failed");
                        }
                        Some(failure)
                    }
                    None => tx
                        .commit()
                        .err()
                        .map(|err| GroupFailure(format!("commit failed: {err}"))),
                }
            }
        };
        if let Some(GroupFailure(why)) = &failure {
            tracing::error!(path = %self.path.display(), ops = done.len(), error = %why, "sqlite group commit failed; rolled back");
        } else {
            self.commits.fetch_add(1, Ordering::AcqRel);
            tracing::trace!(ops = done.len(), "sqlite group committed");
        }
        self.resolve(done, failure);
    }

    /// The operation that follows an append nobody awaits, if one comes soon enough:
    /// in a burst (the group already holds [`SqliteStore::APPEND_BURST_OPS`]
    /// operations) first a short sleep that lets its next appends pile up (taken
    /// together, without a wake-up each), then a blocking wait of up to
    /// [`SqliteStore::APPEND_LINGER`] for the flush that usually follows. A group of a
    /// few appends (a turn's opening, a step's start) waits without the sleep, so the
    /// flush that follows them commits the moment it arrives. Never past the group's
    /// commit window.
    fn linger(
        queue: &mpsc::Receiver<Op>,
        started: Instant,
        commit_window: Duration,
        grouped: usize,
    ) -> Option<Op> {
        let left = |cap: Duration| commit_window.saturating_sub(started.elapsed()).min(cap);
        if grouped < SqliteStore::APPEND_BURST_OPS {
            if let Some(next) = Self::spin(queue, SqliteStore::WRITER_SPIN) {
                return next;
            }
            let wait = left(SqliteStore::APPEND_LINGER);
            return (!wait.is_zero())
                .then(|| queue.recv_timeout(wait).ok())
                .flatten();
        }
        let burst = left(SqliteStore::APPEND_BURST_GAP);
        if burst.is_zero() {
            return None;
        }
        std::thread::sleep(burst);
        match queue.try_recv() {
            Ok(op) => Some(op),
            Err(mpsc::TryRecvError::Disconnected) => None,
            Err(mpsc::TryRecvError::Empty) => {
                let wait = left(SqliteStore::APPEND_LINGER);
                if wait.is_zero() {
                    None
                } else {
                    queue.recv_timeout(wait).ok()
                }
            }
        }
    }

    /// The next operation if one arrives within `poll`, polled without blocking
    /// (yielding the core between polls): `Some(Some(op))`, or `Some(None)` once every
    /// sender is gone; `None` when nothing came (block then).
    fn spin(queue: &mpsc::Receiver<Op>, poll: Duration) -> Option<Option<Op>> {
        let until = Instant::now() + poll;
        loop {
            match queue.try_recv() {
                Ok(op) => return Some(Some(op)),
                Err(mpsc::TryRecvError::Disconnected) => return Some(None),
                // Yielding, not spinning: a busy machine's other threads run first
                // (the writer only polls on a core nothing else wants).
                Err(mpsc::TryRecvError::Empty) if Instant::now() < until => {
                    std::thread::yield_now();
                }
                Err(mpsc::TryRecvError::Empty) => return None,
            }
        }
    }

    /// Hands each result to its ticket, in queue order. After a failed group every
    /// operation gets a `Backend` error instead of its own result.
    fn resolve(&mut self, done: Vec<Done>, failure: Option<GroupFailure>) {
        let count = done.len();
        let path = self.path.clone();
        let failed = |operation: &'static str| {
            failure.as_ref().map(|GroupFailure(why)| {
                backend(
                    operation,
                    &path,
                    format_args!("{why}; the group of {count} queued writes was rolled back and nothing of it was written"),
                )
            })
        };
        for item in done {
            let failed_write = match item {
                Done::Create(reply, result) => {
                    deliver(reply, failed("create_session").map_or(result, Err))
                }
                Done::Append(reply, result) => deliver(reply, failed("append").map_or(result, Err)),
                Done::KvCas(reply, result) => deliver(reply, failed("kv_cas").map_or(result, Err)),
                Done::Lease(operation, reply, result) => {
                    deliver(reply, failed(operation).map_or(result, Err))
                }
                Done::LeaseRelease(reply, result) => {
                    deliver(reply, failed("lease_release").map_or(result, Err))
                }
                Done::Flush(reply) => {
                    let result = match self
                        .failures
                        .take_unreported(&self.path.display().to_string())
                        .or_else(|| failed("flush"))
                    {
                        Some(err) => Err(err),
                        None => Ok(()),
                    };
                    deliver(reply, result)
                }
            };
            if let Some(failed) = failed_write {
                self.failures.remember(failed);
            }
        }
    }
}

/// Sends `result`; when it is an error, returns it to be remembered until the next
/// flush (with the flag the ticket sets once it has yielded it).
fn deliver<T>(reply: Reply<T>, result: Result<T, StoreError>) -> Option<Failed> {
    let failed = result.as_ref().err().map(|error| Failed {
        error: error.clone(),
        seen: Arc::clone(&reply.seen),
    });
    // A dropped ticket leaves `seen` unset forever, so the next flush reports it.
    let _ = reply.sender.send(result);
    failed
}

/// An operation that never ran because the group could not start. Its placeholder
/// result is never delivered: `resolve` replaces it with the group's failure.
fn apply_failed(op: Op) -> Done {
    let placeholder = || StoreError::Closed;
    match op {
        Op::Create { reply, .. } => Done::Create(reply, Err(placeholder())),
        Op::Append { reply, .. } => Done::Append(reply, Err(placeholder())),
        Op::KvCas { reply, .. } => Done::KvCas(reply, Err(placeholder())),
        Op::LeaseAcquire { reply, .. } => Done::Lease("lease_acquire", reply, Err(placeholder())),
        Op::LeaseRenew { reply, .. } => Done::Lease("lease_renew", reply, Err(placeholder())),
        Op::LeaseRelease { reply, .. } => Done::LeaseRelease(reply, Err(placeholder())),
        Op::Flush { reply } => Done::Flush(reply),
    }
}

/// Applies one operation inside the group transaction. On a database error the
/// returned result is a placeholder that `resolve` replaces with the group's failure.
/// The group failure of a deferred row or head write.
fn write_failed(failed: &WriteFailure) -> GroupFailure {
    GroupFailure(format!(
        "append to session {}: cannot write {}: {}",
        failed.session, failed.what, failed.error
    ))
}

fn apply(conn: &Connection, pending: &mut Pending, op: Op) -> (Done, Option<GroupFailure>) {
    fn split<T>(
        result: Applied<T>,
        describe: impl FnOnce() -> String,
    ) -> (Result<T, StoreError>, Option<GroupFailure>) {
        match result {
            Ok(outcome) => (outcome, None),
            Err(err) => (
                Err(StoreError::Closed),
                Some(GroupFailure(format!("{}: {err}", describe()))),
            ),
        }
    }
    match op {
        Op::Create {
            session,
            events,
            reply,
        } => {
            let id = session.id.clone();
            let (result, failure) = split(create_session(conn, session, &events), || {
                format!("create_session of {id}")
            });
            (Done::Create(reply, result), failure)
        }
        Op::Append {
            session,
            expected,
            events,
            reply,
            ..
        } => {
            let (result, failure) = append(conn, pending, session, expected, events);
            (Done::Append(reply, result), failure)
        }
        Op::KvCas {
            domain,
            key,
            expected,
            value,
            reply,
            ..
        } => {
            let (result, failure) = split(kv_cas(conn, &domain, &key, expected, value), || {
                format!("kv_cas of {domain}/{}", preview(&key))
            });
            (Done::KvCas(reply, result), failure)
        }
        Op::LeaseAcquire { claim, reply } => {
            let (result, failure) = split(lease::acquire(conn, &claim), || {
                format!("lease_acquire of session {}", claim.session)
            });
            (Done::Lease("lease_acquire", reply, result), failure)
        }
        Op::LeaseRenew {
            session,
            owner,
            expires_ms,
            reply,
        } => {
            let (result, failure) = split(lease::renew(conn, &session, &owner, expires_ms), || {
                format!("lease_renew of session {session}")
            });
            (Done::Lease("lease_renew", reply, result), failure)
        }
        Op::LeaseRelease {
            session,
            owner,
            reply,
        } => {
            let (result, failure) = split(lease::release(conn, &session, &owner), || {
                format!("lease_release of session {session}")
            });
            (Done::LeaseRelease(reply, result), failure)
        }
        Op::Flush { reply } => (Done::Flush(reply), None),
    }
}

fn sql_int(value: u64) -> i64 {
    i64::try_from(value).unwrap_or(i64::MAX)
}

fn insert_events(
    conn: &Connection,
    session: &SessionId,
    events: &[StoredEvent],
) -> rusqlite::Result<()> {
    let mut insert =
        conn.prepare_cached("INSERT INTO events (session_id, seq, body) VALUES (?1, ?2, ?3)")?;
    for event in events {
        insert.execute(params![session.as_str(), sql_int(event.seq), &*event.json])?;
    }
    Ok(())
}

fn create_session(
    conn: &Connection,
    session: NewSession,
    events: &[StoredEvent],
) -> Applied<Incarnation> {
    let head = match check_seqs("create_session", &session.id, 0, events) {
        Ok(head) => head,
        Err(err) => return Ok(Err(err)),
    };
    let seed_length = match session.seed_length.map(i64::try_from).transpose() {
        Ok(seed_length) => seed_length,
        Err(_) => {
            return Ok(Err(StoreError::Invalid {
                what: "create_session",
                detail: format!("session {}: seed_length is out of range", session.id),
            }));
        }
    };
    let exists = conn
        .prepare_cached("SELECT 1 FROM sessions WHERE id = ?1")?
        .query_row([session.id.as_str()], |_| Ok(()))
        .optional()?
        .is_some();
    if exists {
        return Ok(Err(StoreError::SessionExists {
            session: session.id,
        }));
    }
    let order: i64 = conn
        .prepare_cached("SELECT COALESCE(MAX(created_order), 0) + 1 FROM sessions")?
        .query_row([], |row| row.get(0))?;
    let incarnation = session.incarnation.clone();
    conn.prepare_cached(
        "INSERT INTO sessions (id, created_ms, parent, seed_length, meta, incarnation, head, created_order) \
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)",
    )?
    .execute(params![
        session.id.as_str(),
        session.created_ms,
        session.parent.as_ref().map(SessionId::as_str),
        seed_length,
        session.meta_json,
        incarnation,
        sql_int(head),
        order,
    ])?;
    insert_events(conn, &session.id, events)?;
    Ok(Ok(incarnation))
}

/// Appends `events` at `expected`. The head is read from the row once per group and
/// kept in `pending`, which also takes the rows; both are written just before the group
/// commits (`sqlite/group.rs`).
fn append(
    conn: &Connection,
    pending: &mut Pending,
    session: SessionId,
    expected: u64,
    events: Vec<StoredEvent>,
) -> (Result<u64, StoreError>, Option<GroupFailure>) {
    let head_after = match check_seqs("append", &session, expected, &events) {
        Ok(head) => head,
        Err(err) => return (Err(err), None),
    };
    let head = match pending.head(&session) {
        Some(head) => head,
        None => {
            let stored = conn
                .prepare_cached("SELECT head FROM sessions WHERE id = ?1")
                .and_then(|mut select| {
                    select
                        .query_row([session.as_str()], |row| Ok(uint(row.get_ref(0)?)))
                        .optional()
                });
            match stored {
                Err(err) => {
                    return (
                        Err(StoreError::Closed),
                        Some(GroupFailure(format!(
                            "append to session {session} at seq {expected}: {err}"
                        ))),
                    );
                }
                Ok(None) => return (Err(StoreError::UnknownSession { session }), None),
                Ok(Some(None)) => {
                    return (
                        Err(StoreError::Corrupt {
                            session,
                            seq: None,
                            detail: "the stored head is not a non-negative integer".into(),
                        }),
                        None,
                    );
                }
                Ok(Some(Some(head))) => {
                    pending.read_head(&session, head);
                    head
                }
            }
        }
    };
    if head != expected {
        return (
            Err(StoreError::Conflict {
                session,
                expected,
                actual: head,
            }),
            None,
        );
    }
    if !events.is_empty() {
        pending.append(session, events, head_after);
    }
    (Ok(head_after), None)
}

fn kv_cas(
    conn: &Connection,
    domain: &str,
    key: &str,
    expected: Option<u64>,
    value: Option<Vec<u8>>,
) -> Applied<Option<u64>> {
    if let Err(invalid) = check_kv(domain, key, value.as_deref()) {
        return Ok(Err(invalid));
    }
    let stored = conn
        .prepare_cached("SELECT version FROM kv WHERE domain = ?1 AND key = ?2")?
        .query_row([domain, key], |row| Ok(positive(row.get_ref(0)?)))
        .optional()?;
    let current = match stored {
        None => None,
        Some(Some(version)) => Some(version),
        Some(None) => {
            return Ok(Err(StoreError::Backend {
                operation: "kv_cas",
                message: format!(
                    "kv {domain}/{}: the stored version is not a positive integer",
                    preview(key)
                ),
            }));
        }
    };
    if current != expected {
        return Ok(Err(StoreError::CasConflict {
            domain: domain.to_owned(),
            key: key.to_owned(),
            expected,
            current,
        }));
    }
    match (value, current) {
        (Some(value), None) => {
            conn.prepare_cached(
                "INSERT INTO kv (domain, key, version, value) VALUES (?1, ?2, 1, ?3)",
            )?
            .execute(params![domain, key, value])?;
            Ok(Ok(Some(1)))
        }
        (Some(value), Some(current)) => {
            let Some(next) = current
                .checked_add(1)
                .filter(|next| i64::try_from(*next).is_ok())
            else {
                return Ok(Err(StoreError::Invalid {
                    what: "kv version",
                    detail: format!(
                        "kv {domain}/{}: the version cannot grow past {current}",
                        preview(key)
                    ),
                }));
            };
            conn.prepare_cached(
                "UPDATE kv SET version = ?3, value = ?4 WHERE domain = ?1 AND key = ?2",
            )?
            .execute(params![domain, key, sql_int(next), value])?;
            Ok(Ok(Some(next)))
        }
        (None, Some(_)) => {
            conn.prepare_cached("DELETE FROM kv WHERE domain = ?1 AND key = ?2")?
                .execute([domain, key])?;
            Ok(Ok(None))
        }
        // Deleting a row that must not exist and does not: nothing to do.
        (None, None) => Ok(Ok(None)),
    }
}

// ---------------------------------------------------------------------------------------
// Reads
// ---------------------------------------------------------------------------------------

/// Read-only connections, handed out one task at a time.
struct ReadPool {
    path: PathBuf,
    idle: Mutex<Vec<Connection>>,
    returned: Condvar,
}

/// A connection out of the pool; goes back on drop, even after a panic.
struct Checkout<'a> {
    pool: &'a ReadPool,
    conn: Option<Connection>,
}

impl Drop for Checkout<'_> {
    fn drop(&mut self) {
        if let Some(conn) = self.conn.take() {
            lock(&self.pool.idle).push(conn);
            self.pool.returned.notify_one();
        }
    }
}

impl ReadPool {
    fn open(path: &Path, count: usize, busy_timeout: Duration) -> Result<Self, StoreError> {
        let flags = OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX;
        let mut idle = Vec::with_capacity(count);
        for _ in 0..count {
            let conn = Connection::open_with_flags(path, flags).map_err(|err| {
                backend(
                    "open",
                    path,
                    format_args!("cannot open a read connection: {err}"),
                )
            })?;
            conn.busy_timeout(busy_timeout).map_err(|err| {
                backend("open", path, format_args!("cannot set busy_timeout: {err}"))
            })?;
            stable_plans(&conn).map_err(|err| {
                backend(
                    "open",
                    path,
                    format_args!("cannot keep query plans stable: {err}"),
                )
            })?;
            idle.push(conn);
        }
        Ok(Self {
            path: path.to_owned(),
            idle: Mutex::new(idle),
            returned: Condvar::new(),
        })
    }

    /// A free connection, if one is idle now (returned to the pool when dropped).
    fn try_checkout(&self) -> Option<Checkout<'_>> {
        let conn = lock(&self.idle).pop()?;
        Some(Checkout {
            pool: self,
            conn: Some(conn),
        })
    }

    /// Runs `work` on a free connection, waiting for one if all are busy.
    fn with<T>(
        &self,
        work: impl FnOnce(&mut Connection, &Path) -> Result<T, StoreError>,
    ) -> Result<T, StoreError> {
        let mut idle = lock(&self.idle);
        let conn = loop {
            if let Some(conn) = idle.pop() {
                break conn;
            }
            idle = self
                .returned
                .wait(idle)
                .unwrap_or_else(PoisonError::into_inner);
        };
        drop(idle);
        let mut checkout = Checkout {
            pool: self,
            conn: Some(conn),
        };
        match checkout.conn.as_mut() {
            Some(conn) => work(conn, &self.path),
            None => Err(backend("read", &self.path, "no read connection")),
        }
    }
}

/// A non-negative integer column, else `None`.
fn uint(value: ValueRef<'_>) -> Option<u64> {
    match value {
        ValueRef::Integer(value) => u64::try_from(value).ok(),
        ValueRef::Null | ValueRef::Real(_) | ValueRef::Text(_) | ValueRef::Blob(_) => None,
    }
}

/// An integer column, else `None`.
fn int(value: ValueRef<'_>) -> Option<i64> {
    match value {
        ValueRef::Integer(value) => Some(value),
        ValueRef::Null | ValueRef::Real(_) | ValueRef::Text(_) | ValueRef::Blob(_) => None,
    }
}

fn is_null(value: ValueRef<'_>) -> bool {
    matches!(value, ValueRef::Null)
}

/// A positive integer column (a KV version), else `None`.
fn positive(value: ValueRef<'_>) -> Option<u64> {
    uint(value).filter(|value| *value > 0)
}

/// A UTF-8 TEXT column, else `None`.
fn text(value: ValueRef<'_>) -> Option<&str> {
    match value {
        ValueRef::Text(bytes) => std::str::from_utf8(bytes).ok(),
        ValueRef::Null | ValueRef::Integer(_) | ValueRef::Real(_) | ValueRef::Blob(_) => None,
    }
}

/// The storage class of a column, for messages.
fn kind(value: ValueRef<'_>) -> &'static str {
    match value {
        ValueRef::Null => "NULL",
        ValueRef::Integer(_) => "INTEGER",
        ValueRef::Real(_) => "REAL",
        ValueRef::Text(_) => "TEXT",
        ValueRef::Blob(_) => "BLOB",
    }
}

const SESSION_COLUMNS: &str = "id, created_ms, parent, seed_length, meta, incarnation, head";

/// Decodes a `sessions` row selected with [`SESSION_COLUMNS`]. `known` is the id the
/// query asked for, if any (a damaged id column can then still be named).
fn session_row(
    row: &Row<'_>,
    path: &Path,
    known: Option<&SessionId>,
) -> rusqlite::Result<Result<SessionRecord, StoreError>> {
    let id_column = row.get_ref(0)?;
    let id = match text(id_column).map(SessionId::new) {
        Some(Ok(id)) => id,
        Some(Err(err)) => {
            return Ok(Err(match known {
                Some(session) => StoreError::Corrupt {
                    session: session.clone(),
                    seq: None,
                    detail: format!("the stored id is invalid: {err}"),
                },
                None => backend(
                    "list_sessions",
                    path,
                    format_args!("a sessions row is corrupt: {err}"),
                ),
            }));
        }
        None => {
            let detail = format!(
                "a sessions row has a {} id that is not UTF-8 TEXT",
                kind(id_column)
            );
            return Ok(Err(match known {
                Some(session) => StoreError::Corrupt {
                    session: session.clone(),
                    seq: None,
                    detail,
                },
                None => backend("list_sessions", path, detail),
            }));
        }
    };
    let corrupt = |detail: String| {
        Ok(Err(StoreError::Corrupt {
            session: id.clone(),
            seq: None,
            detail,
        }))
    };
    let created = row.get_ref(1)?;
    let Some(created_ms) = int(created) else {
        return corrupt(format!("created_ms is {}, not INTEGER", kind(created)));
    };
    let parent_column = row.get_ref(2)?;
    let parent = if is_null(parent_column) {
        None
    } else {
        match text(parent_column).map(SessionId::new) {
            Some(Ok(parent)) => Some(parent),
            Some(Err(err)) => return corrupt(format!("parent is invalid: {err}")),
            None => return corrupt(format!("parent is {}, not UTF-8 TEXT", kind(parent_column))),
        }
    };
    let seed_column = row.get_ref(3)?;
    let seed_length = if is_null(seed_column) {
        None
    } else {
        match uint(seed_column) {
            Some(length) => Some(length),
            None => {
                return corrupt(format!(
                    "seed_length is {}, not a non-negative INTEGER",
                    kind(seed_column)
                ));
            }
        }
    };
    let meta = row.get_ref(4)?;
    let Some(meta_json) = text(meta) else {
        return corrupt(format!("meta is {}, not UTF-8 TEXT", kind(meta)));
    };
    let incarnation = row.get_ref(5)?;
    let Some(incarnation) = text(incarnation) else {
        return corrupt(format!(
            "incarnation is {}, not UTF-8 TEXT",
            kind(incarnation)
        ));
    };
    let head = row.get_ref(6)?;
    let Some(head_value) = uint(head) else {
        return corrupt(format!(
            "head is {}, not a non-negative INTEGER",
            kind(head)
        ));
    };
    Ok(Ok(SessionRecord {
        id,
        created_ms,
        parent,
        seed_length,
        meta_json: meta_json.to_owned(),
        incarnation: incarnation.to_owned(),
        head: head_value,
    }))
}

fn read_session(
    conn: &mut Connection,
    path: &Path,
    id: &SessionId,
) -> Result<Option<SessionRecord>, StoreError> {
    let sql_error =
        |err: rusqlite::Error| backend("session", path, format_args!("session {id}: {err}"));
    let sql = format!("SELECT {SESSION_COLUMNS} FROM sessions WHERE id = ?1");
    let mut statement = conn.prepare_cached(&sql).map_err(sql_error)?;
    statement
        .query_row([id.as_str()], |row| session_row(row, path, Some(id)))
        .optional()
        .map_err(sql_error)?
        .transpose()
}

fn list_sessions(
    conn: &mut Connection,
    path: &Path,
    query: SessionQuery,
) -> Result<Vec<SessionRecord>, StoreError> {
    let sql_error = |err: rusqlite::Error| backend("list_sessions", path, err);
    let sql = format!(
        "SELECT {SESSION_COLUMNS} FROM sessions ORDER BY created_ms DESC, created_order DESC LIMIT ?1"
    );
    let limit = query
        .limit
        .map_or(-1, |limit| i64::try_from(limit).unwrap_or(i64::MAX));
    let mut statement = conn.prepare_cached(&sql).map_err(sql_error)?;
    let rows = statement
        .query_map([limit], |row| session_row(row, path, None))
        .map_err(sql_error)?;
    let mut sessions = Vec::new();
    for row in rows {
        sessions.push(row.map_err(sql_error)??);
    }
    Ok(sessions)
}

fn read_events(
    conn: &mut Connection,
    path: &Path,
    id: &SessionId,
    range: ReadRange,
) -> Result<Vec<StoredEvent>, StoreError> {
    let sql_error =
        |err: rusqlite::Error| backend("read", path, format_args!("session {id}: {err}"));
    // One read transaction: the head and the rows come from the same snapshot.
    let tx = conn.transaction().map_err(sql_error)?;
    let stored = tx
        .prepare_cached("SELECT head FROM sessions WHERE id = ?1")
        .map_err(sql_error)?
        .query_row([id.as_str()], |row| Ok(uint(row.get_ref(0)?)))
        .optional()
        .map_err(sql_error)?;
    let head = match stored {
        None => {
            return Err(StoreError::UnknownSession {
                session: id.clone(),
            });
        }
        Some(None) => {
            return Err(StoreError::Corrupt {
                session: id.clone(),
                seq: None,
                detail: "the stored head is not a non-negative INTEGER".into(),
            });
        }
        Some(Some(head)) => head,
    };
    let end = range.to.map_or(head, |to| to.min(head));
    let start = range.from;
    if start >= end || range.limit == Some(0) {
        return Ok(Vec::new());
    }
    let span = end - start;
    let wanted = range.limit.map_or(span, |limit| {
        span.min(u64::try_from(limit).unwrap_or(u64::MAX))
    });
    let sql = match range.direction {
        ReadDirection::Forward => {
            "SELECT seq, body FROM events WHERE session_id = ?1 AND seq >= ?2 AND seq < ?3 ORDER BY seq ASC LIMIT ?4"
        }
        ReadDirection::Backward => {
            "SELECT seq, body FROM events WHERE session_id = ?1 AND seq >= ?2 AND seq < ?3 ORDER BY seq DESC LIMIT ?4"
        }
    };
    let mut statement = tx.prepare_cached(sql).map_err(sql_error)?;
    let mut rows = statement
        .query(params![
            id.as_str(),
            sql_int(start),
            sql_int(end),
            sql_int(wanted)
        ])
        .map_err(sql_error)?;
    let mut events = Vec::with_capacity(usize::try_from(wanted).unwrap_or(0).min(4096));
    // The seq each row must carry, in walking order.
    let mut next = match range.direction {
        ReadDirection::Forward => start,
        ReadDirection::Backward => end - 1,
    };
    let corrupt = |seq: u64, detail: String| StoreError::Corrupt {
        session: id.clone(),
        seq: Some(seq),
        detail,
    };
    while let Some(row) = rows.next().map_err(sql_error)? {
        let seq_column = row.get_ref(0).map_err(sql_error)?;
        let Some(seq) = uint(seq_column) else {
            return Err(corrupt(
                next,
                format!(
                    "the row read in place of seq {next} has a {} seq",
                    kind(seq_column)
                ),
            ));
        };
        if seq != next {
            return Err(corrupt(
                next,
                format!(
                    "event {next} is missing below the head {head} (the next stored seq is {seq})"
                ),
            ));
        }
        let body = row.get_ref(1).map_err(sql_error)?;
        let ValueRef::Text(bytes) = body else {
            return Err(corrupt(
                seq,
                format!("the body is {}, not TEXT", kind(body)),
            ));
        };
        let json = std::str::from_utf8(bytes)
            .map_err(|err| corrupt(seq, format!("the body is TEXT but not UTF-8: {err}")))?;
        events.push(StoredEvent {
            seq,
            json: json.into(),
        });
        next = match range.direction {
            ReadDirection::Forward => seq.saturating_add(1),
            ReadDirection::Backward => seq.saturating_sub(1),
        };
    }
    if u64::try_from(events.len()).unwrap_or(u64::MAX) < wanted {
        return Err(corrupt(
            next,
            format!("event {next} is missing below the head {head}"),
        ));
    }
    Ok(events)
}

/// Decodes the `version, value` columns of a `kv` row, starting at column `first`.
fn kv_value(
    domain: &str,
    key: &str,
    path: &Path,
    operation: &'static str,
    row: &Row<'_>,
    first: usize,
) -> rusqlite::Result<Result<KvEntry, StoreError>> {
    let version_column = row.get_ref(first)?;
    let Some(version) = positive(version_column) else {
        return Ok(Err(backend(
            operation,
            path,
            format_args!(
                "kv {domain}/{}: the version is {}, not a positive INTEGER",
                preview(key),
                kind(version_column)
            ),
        )));
    };
    let value_column = row.get_ref(first + 1)?;
    let value = match value_column {
        ValueRef::Blob(bytes) | ValueRef::Text(bytes) => bytes.to_vec(),
        ValueRef::Null | ValueRef::Integer(_) | ValueRef::Real(_) => {
            return Ok(Err(backend(
                operation,
                path,
                format_args!(
                    "kv {domain}/{}: the value is {}, not a BLOB",
                    preview(key),
                    kind(value_column)
                ),
            )));
        }
    };
    Ok(Ok(KvEntry { version, value }))
}

fn kv_get(
    conn: &mut Connection,
    path: &Path,
    domain: &str,
    key: &str,
) -> Result<Option<KvEntry>, StoreError> {
    let sql_error = |err: rusqlite::Error| {
        backend(
            "kv_get",
            path,
            format_args!("kv {domain}/{}: {err}", preview(key)),
        )
    };
    conn.prepare_cached("SELECT version, value FROM kv WHERE domain = ?1 AND key = ?2")
        .map_err(sql_error)?
        .query_row([domain, key], |row| {
            kv_value(domain, key, path, "kv_get", row, 0)
        })
        .optional()
        .map_err(sql_error)?
        .transpose()
}

/// The least string greater than every string that starts with `prefix` (in UTF-8
/// byte order, which is SQLite's BINARY collation), or `None` when there is none.
pub(crate) fn prefix_successor(prefix: &str) -> Option<String> {
    let mut chars: Vec<char> = prefix.chars().collect();
    while let Some(last) = chars.pop() {
        let next = match last {
            '\u{D7FF}' => Some('\u{E000}'),
            other => char::from_u32(u32::from(other) + 1),
        };
        if let Some(next) = next {
            chars.push(next);
            return Some(chars.into_iter().collect());
        }
    }
    None
}

fn kv_scan(
    conn: &mut Connection,
    path: &Path,
    domain: &str,
    prefix: &str,
    page: &KvPage,
) -> Result<Vec<(String, KvEntry)>, StoreError> {
    let sql_error = |err: rusqlite::Error| {
        backend(
            "kv_scan",
            path,
            format_args!("kv {domain}/{}*: {err}", preview(prefix)),
        )
    };
    // Keys in [prefix, successor) are exactly those starting with `prefix`; a page
    // resumes strictly after `after` when that is the tighter lower bound.
    let (lower, strict) = match &page.after {
        Some(after) if after.as_str() >= prefix => (after.as_str(), true),
        Some(_) | None => (prefix, false),
    };
    let upper = prefix_successor(prefix);
    let limit = page
        .limit
        .map_or(-1, |limit| i64::try_from(limit).unwrap_or(i64::MAX));
    let sql = match (strict, upper.is_some()) {
        (false, false) => {
            "SELECT key, version, value FROM kv WHERE domain = ?1 AND key >= ?2 ORDER BY key LIMIT ?3"
        }
        (true, false) => {
            "SELECT key, version, value FROM kv WHERE domain = ?1 AND key > ?2 ORDER BY key LIMIT ?3"
        }
        (false, true) => {
            "SELECT key, version, value FROM kv WHERE domain = ?1 AND key >= ?2 AND key < ?4 ORDER BY key LIMIT ?3"
        }
        (true, true) => {
            "SELECT key, version, value FROM kv WHERE domain = ?1 AND key > ?2 AND key < ?4 ORDER BY key LIMIT ?3"
        }
    };
    let mut statement = conn.prepare_cached(sql).map_err(sql_error)?;
    let mut rows = match &upper {
        Some(upper) => statement.query(params![domain, lower, limit, upper]),
        None => statement.query(params![domain, lower, limit]),
    }
    .map_err(sql_error)?;
    let mut entries = Vec::new();
    while let Some(row) = rows.next().map_err(sql_error)? {
        let key_column = row.get_ref(0).map_err(sql_error)?;
        let Some(key) = text(key_column) else {
            return Err(backend(
                "kv_scan",
                path,
                format_args!(
                    "kv {domain}: a key is {} and not UTF-8 TEXT",
                    kind(key_column)
                ),
            ));
        };
        let key = key.to_owned();
        let entry = kv_value(domain, &key, path, "kv_scan", row, 1).map_err(sql_error)??;
        entries.push((key, entry));
    }
    Ok(entries)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::expect_used)]

    use std::time::Duration;

    use super::prefix_successor;

    /// A range read is compiled once and then reused: binding a new range to the
    /// cached statement does not make SQLite parse and plan it again (STAT4's
    /// reprepare-on-bind, turned off by `stable_plans`).
    #[test]
    fn range_reads_are_not_compiled_again_at_each_execution() {
        use super::{KvPage, ReadPool, kv_scan, open_writer};
        use rusqlite::StatementStatus;

        let dir = tempfile::tempdir().expect("a temporary directory");
        let path = dir.path().join("ccare.db");
        let writer = open_writer(&path, Duration::from_secs(5)).expect("the writer opens");
        for key in ["a/1", "a/2", "b/1", "c/1"] {
            writer
                .execute(
                    "INSERT INTO kv (domain, key, version, value) VALUES ('d', ?1, 1, x'7b7d')",
                    [key],
                )
                .expect("a row is written");
        }
        let pool = ReadPool::open(&path, 1, Duration::from_secs(5)).expect("the readers open");
        let Some(mut checkout) = pool.try_checkout() else {
            panic!("no idle read connection");
        };
        let Some(conn) = checkout.conn.as_mut() else {
            panic!("the checkout holds no connection");
        };
        let page = KvPage {
            after: None,
            limit: Some(64),
        };
        for prefix in ["a/", "b/", "c/", "a/"] {
            let rows = kv_scan(conn, &path, "d", prefix, &page).expect("the scan reads");
            assert_eq!(rows.len(), if prefix == "a/" { 2 } else { 1 }, "{prefix}");
        }
        let statement = conn
            .prepare_cached(
                "SELECT key, version, value FROM kv WHERE domain = ?1 AND key >= ?2 AND key < ?4 ORDER BY key LIMIT ?3",
            )
            .expect("the scan's statement is cached");
        assert_eq!(statement.get_status(StatementStatus::RePrepare), 0);
        let mut statement = writer
            .prepare("SELECT key FROM kv WHERE domain = ?1 AND key >= ?2 LIMIT ?3")
            .expect("the writer prepares a range read");
        for lower in ["b", "c"] {
            let mut rows = statement
                .query(rusqlite::params!["d", lower, 1])
                .expect("the range read runs");
            assert!(rows.next().expect("a row reads").is_some(), "{lower}");
        }
        assert_eq!(
            statement.get_status(StatementStatus::RePrepare),
            0,
            "the writer's connection keeps its plans too"
        );
    }

    #[test]
    fn successor_bounds_exactly_the_prefixed_strings() {
        assert_eq!(prefix_successor(""), None);
        assert_eq!(prefix_successor("ab").as_deref(), Some("ac"));
        assert_eq!(prefix_successor("a%").as_deref(), Some("a&"));
        assert_eq!(prefix_successor("a\u{D7FF}").as_deref(), Some("a\u{E000}"));
        assert_eq!(prefix_successor("a\u{10FFFF}").as_deref(), Some("b"));
        assert_eq!(prefix_successor("\u{10FFFF}\u{10FFFF}"), None);
        let prefix = "k\u{FFFF}";
        let Some(upper) = prefix_successor(prefix) else {
            panic!("no successor for {prefix:?}");
        };
        for key in ["k\u{FFFF}", "k\u{FFFF}\u{10FFFF}", "k\u{FFFF}zz"] {
            assert!(
                key >= prefix && key < upper.as_str(),
                "{key:?} should be in range"
            );
        }
        for key in ["k\u{FFFE}z", "k\u{10000}", "l"] {
            assert!(
                !(key >= prefix && key < upper.as_str()),
                "{key:?} should be out of range"
            );
        }
    }
}
