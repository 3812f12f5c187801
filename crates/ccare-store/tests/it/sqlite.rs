//! ccare-store's integration tests: the backend-neutral conformance suite
//! (`conformance/`) run against [`SqliteStore`], then SQLite-specific checks (schema,
//! open failures, corrupt rows, group failure, two handles, close/drop, a crash) and
//! property tests of KV compare-and-swap against a sequential model.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::conformance;

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use ccare_store::{
    KvEntry, ReadDirection, ReadRange, SessionQuery, SqliteConfig, SqliteStore, Store, StoreError,
};
use conformance::{CasOp, new_session, numbered, sid};
use proptest::prelude::*;
use proptest::test_runner::{Config, TestCaseError, TestRunner};
use tempfile::TempDir;

/// A store on a fresh database in its own temporary directory.
struct Db {
    dir: TempDir,
    store: SqliteStore,
}

impl Db {
    fn new() -> Self {
        Self::with(|_| {})
    }

    fn with(configure: impl FnOnce(&mut SqliteConfig)) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let mut config = SqliteConfig::new(dir.path().join("store.db"));
        configure(&mut config);
        let store = SqliteStore::open(config).unwrap();
        Self { dir, store }
    }

    fn path(&self) -> PathBuf {
        self.dir.path().join("store.db")
    }

    /// Another, independent store on the same file.
    fn second_handle(&self) -> SqliteStore {
        SqliteStore::open(SqliteConfig::new(self.path())).unwrap()
    }

    /// A plain rusqlite connection to poke at the file.
    fn raw(&self) -> rusqlite::Connection {
        let conn = rusqlite::Connection::open(self.path()).unwrap();
        conn.busy_timeout(Duration::from_secs(5)).unwrap();
        conn
    }
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
}

// -------------------------------------------------------------------------------------
// The conformance suite on SQLite
// -------------------------------------------------------------------------------------

macro_rules! conformance_on_one_store {
    ($($name:ident),* $(,)?) => {
        /// Each conformance check on a fresh SQLite store.
        mod conformance_on_sqlite {
            use super::*;
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $name() {
                    let db = Db::new();
                    conformance::$name(&db.store).await;
                }
            )*
        }
    };
}

conformance_on_one_store!(
    h_sess_1_create_list_newest_first,
    h_store_8_create_existing_id_fails,
    h_log_1_create_rejects_non_contiguous_seed,
    h_log_3_append_and_read_ranges,
    h_log_1_append_checks_seqs,
    h_store_1_conflict_writes_nothing,
    h_store_unknown_session,
    h_store_4_writes_are_ordered_at_call_time,
    h_store_4_pipelined_appends_land_in_order,
    h_store_4_flush_reports_the_oldest_unreported_error,
    h_store_2_kv_cas_lifecycle,
    h_dom_2_kv_limits,
    h_dom_2_kv_scan_prefix_and_paging,
    act_1_lease_acquire_renew_release,
    act_1_lease_conflict_names_the_holder,
    act_1_lease_expired_is_taken_over,
    act_1_lease_replacing_takes_over_the_named_owner_only,
    act_1_lease_claims_are_checked,
);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn act_1_lease_concurrent_claims_one_wins() {
    let db = Db::new();
    conformance::act_1_lease_concurrent_claims_one_wins(&[&db.store]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn act_1_lease_concurrent_claims_one_wins_across_two_handles() {
    let db = Db::new();
    let other = db.second_handle();
    conformance::act_1_lease_concurrent_claims_one_wins(&[&db.store, &other]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn h_store_1_concurrent_appends_one_wins() {
    let db = Db::new();
    conformance::h_store_1_concurrent_appends_one_wins(&db.store, &db.store).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn h_store_1_concurrent_appends_one_wins_across_two_handles() {
    let db = Db::new();
    let other = db.second_handle();
    conformance::h_store_1_concurrent_appends_one_wins(&db.store, &other).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn h_store_2_concurrent_cas_one_wins() {
    let db = Db::new();
    conformance::h_store_2_concurrent_cas_one_wins(&[&db.store]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn h_store_2_concurrent_cas_one_wins_across_two_handles() {
    let db = Db::new();
    let other = db.second_handle();
    conformance::h_store_2_concurrent_cas_one_wins(&[&db.store, &other]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn h_store_4_conformance_with_groups_of_one() {
    // The same ordering guarantees hold when every operation commits alone.
    let db = Db::with(|config| config.max_group_ops = 1);
    conformance::h_store_4_pipelined_appends_land_in_order(&db.store).await;
    let db = Db::with(|config| config.max_group_ops = 1);
    conformance::h_store_4_flush_reports_the_oldest_unreported_error(&db.store).await;
}

// -------------------------------------------------------------------------------------
// Schema and opening
// -------------------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn h_store_3_schema_and_pragmas() {
    let db = Db::new();
    let raw = db.raw();
    let version: i64 = raw
        .pragma_query_value(None, "user_version", |row| row.get(0))
        .unwrap();
    assert_eq!(version, SqliteStore::SCHEMA_VERSION);
    // Version 2 added the `leases` table (ACT-1); a version-1 file is migrated on open.
    assert_eq!(version, 2);
    let mode: String = raw
        .pragma_query_value(None, "journal_mode", |row| row.get(0))
        .unwrap();
    assert_eq!(mode, "wal");
    let columns = |table: &str| -> Vec<(String, String, bool, i64)> {
        let mut statement = raw.prepare(&format!("PRAGMA table_info({table})")).unwrap();
        statement
            .query_map([], |row| {
                Ok((row.get(1)?, row.get(2)?, row.get(3)?, row.get(5)?))
            })
            .unwrap()
            .map(Result::unwrap)
            .collect()
    };
    let col = |name: &str, kind: &str, not_null: bool, pk: i64| {
        (name.to_owned(), kind.to_owned(), not_null, pk)
    };
    assert_eq!(
        columns("sessions"),
        [
            col("id", "TEXT", false, 1),
            col("created_ms", "INTEGER", true, 0),
            col("parent", "TEXT", false, 0),
            col("seed_length", "INTEGER", false, 0),
            col("meta", "TEXT", true, 0),
            col("incarnation", "TEXT", true, 0),
            col("head", "INTEGER", true, 0),
            col("created_order", "INTEGER", true, 0),
        ]
    );
    assert_eq!(
        columns("events"),
        [
            col("session_id", "TEXT", true, 1),
            col("seq", "INTEGER", true, 2),
            col("body", "TEXT", true, 0)
        ]
    );
    assert_eq!(
        columns("kv"),
        [
            col("domain", "TEXT", true, 1),
            col("key", "TEXT", true, 2),
            col("version", "INTEGER", true, 0),
            col("value", "BLOB", true, 0),
        ]
    );
    assert_eq!(
        columns("leases"),
        [
            col("session_id", "TEXT", false, 1),
            col("owner", "TEXT", true, 0),
            col("host", "TEXT", true, 0),
            col("pid", "INTEGER", true, 0),
            col("process_start", "INTEGER", false, 0),
            col("expires_ms", "INTEGER", true, 0),
        ]
    );
    // Reopening an existing database keeps its data.
    db.store
        .create_session(new_session("kept", 1), Vec::new())
        .await
        .unwrap();
    drop(db.store);
    let again = SqliteStore::open(SqliteConfig::new(db.dir.path().join("store.db"))).unwrap();
    assert_eq!(
        again
            .session(&sid("kept"))
            .await
            .unwrap()
            .map(|record| record.head),
        Some(0)
    );
}

fn open_error(path: &Path) -> (&'static str, String) {
    match SqliteStore::open(SqliteConfig::new(path)) {
        Err(StoreError::Backend { operation, message }) => (operation, message),
        other => panic!(
            "opening {} should fail with Backend, got {other:?}",
            path.display()
        ),
    }
}

#[test]
fn h_store_3_open_failures_name_the_path() {
    let dir = tempfile::tempdir().unwrap();

    let missing = dir.path().join("no-such-dir").join("store.db");
    let (operation, message) = open_error(&missing);
    assert_eq!(operation, "open");
    assert!(
        message.contains(&missing.display().to_string()),
        "{message}"
    );

    let garbage = dir.path().join("garbage.db");
    std::fs::write(&garbage, vec![0x5a_u8; 8192]).unwrap();
    let (_, message) = open_error(&garbage);
    assert!(
        message.contains(&garbage.display().to_string()),
        "{message}"
    );

    let newer = dir.path().join("newer.db");
    rusqlite::Connection::open(&newer)
        .unwrap()
        .pragma_update(None, "user_version", 7)
        .unwrap();
    let (_, message) = open_error(&newer);
    assert!(
        message.contains(&newer.display().to_string()) && message.contains("schema version 7"),
        "{message}"
    );

    let foreign = dir.path().join("foreign.db");
    let conn = rusqlite::Connection::open(&foreign).unwrap();
    conn.execute_batch("CREATE TABLE sessions (x TEXT); PRAGMA user_version = 1;")
        .unwrap();
    drop(conn);
    let (_, message) = open_error(&foreign);
    assert!(
        message.contains(&foreign.display().to_string()) && message.contains("schema"),
        "{message}"
    );
}

/// The version-1 schema exactly as earlier builds created it (before `leases`).
const SCHEMA_V1: &str = "
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
INSERT INTO sessions VALUES ('old', 5, NULL, NULL, '{}', 'inc-1', 2, 1);
INSERT INTO events VALUES ('old', 0, '{\"seq\":0}'), ('old', 1, '{\"seq\":1}');
INSERT INTO kv VALUES ('notes', 'k', 3, X'6869');
PRAGMA user_version = 1;
";

/// ACT-1: a database written by a version-1 build opens as version 2 with its
/// sessions, events and KV rows untouched, appends continue at its head, and leases
/// work on it, durably.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn act_1_a_version_1_database_is_migrated_and_keeps_its_data() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("old.db");
    rusqlite::Connection::open(&path)
        .unwrap()
        .execute_batch(SCHEMA_V1)
        .unwrap();
    let store = SqliteStore::open(SqliteConfig::new(&path)).unwrap();
    let record = store.session(&sid("old")).await.unwrap().unwrap();
    assert_eq!((record.head, record.incarnation.as_str()), (2, "inc-1"));
    let events = store.read(&sid("old"), ReadRange::all()).await.unwrap();
    let bodies: Vec<&str> = events.iter().map(|event| &*event.json).collect();
    assert_eq!(bodies, [r#"{"seq":0}"#, r#"{"seq":1}"#]);
    assert_eq!(
        store.kv_get("notes", "k").await.unwrap(),
        Some(KvEntry {
            version: 3,
            value: b"hi".to_vec()
        })
    );
    assert_eq!(
        store
            .append(&sid("old"), 2, numbered(2, 1, "new"))
            .await
            .unwrap(),
        3
    );
    let holder = conformance::holder("owner-a", "host-a", 42);
    let granted = store
        .lease_acquire(conformance::claim("old", holder, 10, 20))
        .await
        .unwrap();
    store.close().unwrap();

    let version: i64 = rusqlite::Connection::open(&path)
        .unwrap()
        .pragma_query_value(None, "user_version", |row| row.get(0))
        .unwrap();
    assert_eq!(version, 2);
    let reopened = SqliteStore::open(SqliteConfig::new(&path)).unwrap();
    assert_eq!(reopened.lease(&sid("old")).await.unwrap(), Some(granted));
    assert_eq!(
        reopened.session(&sid("old")).await.unwrap().unwrap().head,
        3
    );
}

/// A damaged lease row reads as `STORE_CORRUPT` naming the column, and a claim on it
/// is refused the same way rather than granted over it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn act_1_a_damaged_lease_row_is_corrupt() {
    let db = Db::new();
    db.raw()
        .execute(
            "INSERT INTO leases VALUES ('s', 'owner-a', 'host-a', -4, NULL, 99999999999999)",
            [],
        )
        .unwrap();
    let error = db.store.lease(&sid("s")).await.unwrap_err();
    assert_eq!(
        error.to_string(),
        "session s: corrupt row: the lease's pid column is damaged"
    );
    let holder = conformance::holder("owner-b", "host-b", 1);
    let error = db
        .store
        .lease_acquire(conformance::claim("s", holder, 10, 20))
        .await
        .unwrap_err();
    assert_eq!(error.code(), "STORE_CORRUPT", "{error}");
}

// -------------------------------------------------------------------------------------
// Corrupt rows
// -------------------------------------------------------------------------------------

async fn seeded(store: &SqliteStore, id: &str, count: u64) {
    store
        .create_session(new_session(id, 1), numbered(0, count, id))
        .await
        .unwrap();
}

fn assert_corrupt(
    result: Result<Vec<ccare_store::StoredEvent>, StoreError>,
    session: &str,
    seq: u64,
    detail_has: &str,
) {
    match result {
        Err(StoreError::Corrupt {
            session: got,
            seq: Some(got_seq),
            detail,
        }) => {
            assert_eq!((got.as_str(), got_seq), (session, seq), "{detail}");
            assert!(
                detail.contains(detail_has),
                "{detail:?} should mention {detail_has:?}"
            );
        }
        other => panic!("expected Corrupt at {session}/{seq}, got {other:?}"),
    }
}

fn range(from: u64, to: Option<u64>, direction: ReadDirection) -> ReadRange {
    ReadRange {
        from,
        to,
        direction,
        limit: None,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn h_store_3_corrupt_bodies_are_reported() {
    let db = Db::new();
    for id in ["blob", "utf8", "nul"] {
        seeded(&db.store, id, 5).await;
    }
    let raw = db.raw();
    raw.execute_batch(
        "UPDATE events SET body = X'FF00' WHERE session_id = 'blob' AND seq = 2;
         UPDATE events SET body = CAST(X'7BFF7D' AS TEXT) WHERE session_id = 'utf8' AND seq = 3;",
    )
    .unwrap();
    let store = &db.store;
    assert_corrupt(
        store.read(&sid("blob"), ReadRange::all()).await,
        "blob",
        2,
        "BLOB",
    );
    assert_corrupt(
        store
            .read(&sid("blob"), range(0, None, ReadDirection::Backward))
            .await,
        "blob",
        2,
        "BLOB",
    );
    assert_eq!(
        store
            .read(&sid("blob"), range(0, Some(2), ReadDirection::Forward))
            .await,
        Ok(numbered(0, 2, "blob"))
    );
    assert_eq!(
        store
            .read(&sid("blob"), range(3, None, ReadDirection::Forward))
            .await,
        Ok(numbered(3, 2, "blob"))
    );
    assert_corrupt(
        store.read(&sid("utf8"), ReadRange::all()).await,
        "utf8",
        3,
        "UTF-8",
    );

    // NULL needs the NOT NULL constraint gone: rebuild the table with the store closed.
    store.close().unwrap();
    raw.execute_batch(
        "BEGIN;
         CREATE TABLE events_loose (session_id TEXT NOT NULL, seq INTEGER NOT NULL, body TEXT, PRIMARY KEY (session_id, seq));
         INSERT INTO events_loose SELECT session_id, seq, body FROM events;
         DROP TABLE events;
         ALTER TABLE events_loose RENAME TO events;
         UPDATE events SET body = NULL WHERE session_id = 'nul' AND seq = 1;
         COMMIT;",
    )
    .unwrap();
    let store = db.second_handle();
    assert_corrupt(
        store.read(&sid("nul"), ReadRange::all()).await,
        "nul",
        1,
        "NULL",
    );
    assert_eq!(
        store
            .read(&sid("nul"), range(2, None, ReadDirection::Forward))
            .await,
        Ok(numbered(2, 3, "nul"))
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn h_log_1_missing_rows_are_reported() {
    let db = Db::new();
    seeded(&db.store, "gap", 10).await;
    seeded(&db.store, "tail", 10).await;
    seeded(&db.store, "first", 3).await;
    db.raw()
        .execute_batch(
            "DELETE FROM events WHERE session_id = 'gap' AND seq = 5;
             DELETE FROM events WHERE session_id = 'tail' AND seq = 9;
             DELETE FROM events WHERE session_id = 'first' AND seq = 0;",
        )
        .unwrap();
    let store = &db.store;
    use ReadDirection::{Backward, Forward};
    assert_corrupt(
        store.read(&sid("gap"), ReadRange::all()).await,
        "gap",
        5,
        "missing",
    );
    assert_corrupt(
        store.read(&sid("gap"), range(0, None, Backward)).await,
        "gap",
        5,
        "missing",
    );
    assert_corrupt(
        store.read(&sid("gap"), range(3, Some(8), Forward)).await,
        "gap",
        5,
        "missing",
    );
    assert_eq!(
        store.read(&sid("gap"), range(6, None, Forward)).await,
        Ok(numbered(6, 4, "gap"))
    );
    assert_eq!(
        store
            .read(&sid("gap"), range(0, Some(5), Backward))
            .await
            .map(|events| events.len()),
        Ok(5)
    );
    let limited = ReadRange {
        limit: Some(2),
        ..range(0, None, Forward)
    };
    assert_eq!(
        store.read(&sid("gap"), limited).await,
        Ok(numbered(0, 2, "gap"))
    );
    assert_corrupt(
        store.read(&sid("tail"), ReadRange::all()).await,
        "tail",
        9,
        "missing",
    );
    assert_corrupt(
        store.read(&sid("tail"), range(0, None, Backward)).await,
        "tail",
        9,
        "missing",
    );
    assert_corrupt(
        store.read(&sid("first"), ReadRange::all()).await,
        "first",
        0,
        "missing",
    );
    assert_corrupt(
        store.read(&sid("first"), range(0, None, Backward)).await,
        "first",
        0,
        "missing",
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn h_store_3_corrupt_headers_are_reported() {
    let db = Db::new();
    seeded(&db.store, "bad-head", 2).await;
    seeded(&db.store, "bad-meta", 2).await;
    let raw = db.raw();
    raw.execute_batch("UPDATE sessions SET head = -1 WHERE id = 'bad-head'; UPDATE sessions SET meta = X'00' WHERE id = 'bad-meta';")
        .unwrap();
    let store = &db.store;
    for (id, mentions) in [("bad-head", "head"), ("bad-meta", "meta")] {
        match store.session(&sid(id)).await {
            Err(StoreError::Corrupt {
                session,
                seq: None,
                detail,
            }) => {
                assert_eq!(session.as_str(), id);
                assert!(detail.contains(mentions), "{detail}");
            }
            other => panic!("{id}: expected Corrupt, got {other:?}"),
        }
    }
    let listed = store.list_sessions(SessionQuery::default()).await;
    assert!(
        matches!(listed, Err(StoreError::Corrupt { .. })),
        "{listed:?}"
    );
    let read = store.read(&sid("bad-head"), ReadRange::all()).await;
    assert!(
        matches!(read, Err(StoreError::Corrupt { seq: None, .. })),
        "{read:?}"
    );
    let append = store.append(&sid("bad-head"), 2, numbered(2, 1, "x")).await;
    assert!(
        matches!(append, Err(StoreError::Corrupt { seq: None, .. })),
        "{append:?}"
    );
}

// -------------------------------------------------------------------------------------
// Group commit and concurrency
// -------------------------------------------------------------------------------------

/// A database error in the middle of a group rolls the whole group back: every
/// operation in it fails with `Backend` and nothing of it is written; the operations
/// queued after the failure form the next group and succeed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn h_store_4_group_failure_rolls_back_the_whole_group() {
    let db = Db::new();
    let store = &db.store;
    seeded(store, "s", 0).await;
    let raw = db.raw();
    // An event row without a session: creating that session will hit the primary key.
    raw.execute(
        "INSERT INTO events (session_id, seq, body) VALUES ('orphan', 0, '{}')",
        [],
    )
    .unwrap();
    // Hold the write lock so that everything below is queued before the writer can begin.
    raw.execute_batch("BEGIN IMMEDIATE").unwrap();
    let first = store.append(&sid("s"), 0, numbered(0, 2, "lost"));
    let breaking = store.create_session(new_session("orphan", 1), numbered(0, 1, "orphan"));
    let after = store.kv_cas("d", "k", None, Some(b"v".to_vec()));
    let flushed = store.flush();
    tokio::time::sleep(Duration::from_millis(150)).await;
    raw.execute_batch("COMMIT").unwrap();

    // Neither failed ticket was awaited yet, so the flush reports the oldest failure.
    match flushed.await {
        Err(StoreError::Backend {
            operation: "append",
            message,
        }) => {
            assert!(
                message.contains("orphan") && message.contains("rolled back"),
                "{message}"
            );
        }
        other => panic!("flush should report the append's rollback, got {other:?}"),
    }
    let first = first.await;
    assert!(
        matches!(
            first,
            Err(StoreError::Backend {
                operation: "append",
                ..
            })
        ),
        "{first:?}"
    );
    let breaking = breaking.await;
    assert!(
        matches!(
            breaking,
            Err(StoreError::Backend {
                operation: "create_session",
                ..
            })
        ),
        "{breaking:?}"
    );
    assert_eq!(after.await, Ok(Some(1)));
    assert_eq!(
        store
            .session(&sid("s"))
            .await
            .unwrap()
            .map(|record| record.head),
        Some(0)
    );
    assert_eq!(
        store.read(&sid("s"), ReadRange::all()).await,
        Ok(Vec::new())
    );
    assert_eq!(store.session(&sid("orphan")).await, Ok(None));
    assert_eq!(store.flush().await, Ok(()));
    // The store keeps working.
    assert_eq!(
        store.append(&sid("s"), 0, numbered(0, 1, "ok")).await,
        Ok(1)
    );
}

/// An event row without a session, so that creating session `orphan`
/// ([`breaking_creation`]) hits the primary key: a database error that rolls back the
/// whole group it lands in.
fn with_orphan_event(db: &Db) {
    db.raw()
        .execute(
            "INSERT INTO events (session_id, seq, body) VALUES ('orphan', 0, '{}')",
            [],
        )
        .unwrap();
}

/// Creates session `orphan`, which fails its group after [`with_orphan_event`].
fn breaking_creation(store: &SqliteStore) -> ccare_store::Ticket<String> {
    store.create_session(new_session("orphan", 1), numbered(0, 1, "orphan"))
}

/// A KV write queued with `kv_cas_lingering` (an inbox row its caller follows at once
/// with the turn it opens) keeps its group open for what comes next, as an append
/// nobody awaits does: a write sent a millisecond later joins its group, so a database
/// error in that later write rolls the lingering one back with it. (A plain `kv_cas`
/// commits on its own the moment the queue is empty.) Tried a few times, in case the
/// machine stalls the test past the linger.
#[tokio::test]
async fn h_store_4_a_lingering_kv_write_commits_with_what_follows_it() {
    let db = Db::new();
    let store = &db.store;
    with_orphan_event(&db);
    let mut joined = Vec::new();
    for attempt in 0..3 {
        let key = format!("k{attempt}");
        let lingering = store.kv_cas_lingering("d", &key, None, Some(b"v".to_vec()));
        tokio::time::sleep(Duration::from_millis(1)).await;
        let breaking = breaking_creation(store);
        let flushed = store.flush();
        assert!(
            matches!(
                breaking.await,
                Err(StoreError::Backend {
                    operation: "create_session",
                    ..
                })
            ),
            "the breaking creation fails"
        );
        let _ = flushed.await;
        let lingering = lingering.await;
        joined.push(lingering.clone());
        if let Err(StoreError::Backend {
            operation: "kv_cas",
            message,
        }) = &lingering
        {
            assert!(message.contains("rolled back"), "{message}");
            assert_eq!(store.kv_get("d", &key).await, Ok(None));
            return;
        }
    }
    panic!("the lingering write committed before the write that followed it: {joined:?}");
}

/// Checks that a group holding a write its caller awaits does not linger for the write
/// queued right behind it. Each attempt queues the awaited write and the other one back
/// to back (`queue`), then, 2 ms later (well within a linger), a write that fails its
/// whole group. When the group committed at once, both succeed, and the check passes. A
/// lingering group takes the failing write in and fails with it. An attempt also fails
/// when the machine stalls (the two writes land in different groups, or the writer has
/// not committed within 2 ms), so up to 10 are tried: a lingering group fails them all.
async fn assert_no_linger_behind_an_awaited_write<A, L>(
    store: &SqliteStore,
    mut queue: impl AsyncFnMut(u64) -> (ccare_store::Ticket<A>, ccare_store::Ticket<L>),
) where
    A: std::fmt::Debug,
    L: std::fmt::Debug,
{
    let mut failed = Vec::new();
    for attempt in 0..10 {
        let (awaited, other) = queue(attempt).await;
        tokio::time::sleep(Duration::from_millis(2)).await;
        let _ = breaking_creation(store).await;
        match (awaited.await, other.await) {
            (Ok(_), Ok(_)) => return,
            outcome => failed.push(format!("{outcome:?}")),
        }
    }
    panic!("the awaited write waited in a lingering group: {failed:?}");
}

/// A lingering KV write does not hold open a group that already holds a write its
/// caller awaits (that caller may be what the flush the linger waits for is waiting
/// on): the group commits the moment the queue is empty, so a write that fails a
/// millisecond later is not in it.
#[tokio::test]
async fn h_store_4_a_lingering_kv_write_does_not_hold_an_awaited_write() {
    let db = Db::new();
    let store = &db.store;
    with_orphan_event(&db);
    assert_no_linger_behind_an_awaited_write(store, async |attempt| {
        (
            store.kv_cas("d", &format!("a{attempt}"), None, Some(b"v".to_vec())),
            store.kv_cas_lingering("d", &format!("l{attempt}"), None, Some(b"v".to_vec())),
        )
    })
    .await;
}

/// An append nobody awaits does not hold open a group that already holds a write its
/// caller awaits: the group commits the moment the queue is empty, so a write that
/// fails a millisecond later (within the append's linger) is not in it.
#[tokio::test]
async fn h_store_4_an_append_does_not_hold_an_awaited_write() {
    let db = Db::new();
    let store = &db.store;
    seeded(store, "s", 0).await;
    with_orphan_event(&db);
    assert_no_linger_behind_an_awaited_write(store, async |attempt| {
        let head = store.session(&sid("s")).await.unwrap().unwrap().head;
        (
            store.kv_cas("d", &format!("a{attempt}"), None, Some(b"v".to_vec())),
            store.append(&sid("s"), head, numbered(head, 1, "s")),
        )
    })
    .await;
}

/// Writes and flushes queued back to back by several sessions (a burst of new
/// conversations, each opening with its writes and a flush) share one commit: a flush
/// takes what is already queued behind it into its group instead of ending it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn h_store_4_flushes_queued_back_to_back_share_one_commit() {
    let db = Db::new();
    let store = &db.store;
    let sessions = ["a", "b", "c", "d", "e"];
    for id in sessions {
        seeded(store, id, 0).await;
    }
    let before = store.commits();
    // Hold the write lock so that everything below is queued before the writer begins.
    let raw = db.raw();
    raw.execute_batch("BEGIN IMMEDIATE").unwrap();
    let mut tickets = Vec::new();
    for id in sessions {
        let appended = store.append(&sid(id), 0, numbered(0, 2, id));
        let inbox = store.kv_cas_lingering("inbox", id, None, Some(b"v".to_vec()));
        tickets.push((appended, inbox, store.flush()));
    }
    tokio::time::sleep(Duration::from_millis(150)).await;
    raw.execute_batch("COMMIT").unwrap();
    for (appended, inbox, flushed) in tickets {
        assert_eq!(flushed.await, Ok(()));
        assert_eq!(appended.await, Ok(2));
        assert_eq!(inbox.await, Ok(Some(1)));
    }
    assert_eq!(
        store.commits() - before,
        1,
        "one commit for the five flushes"
    );
    for id in sessions {
        assert_eq!(
            store.read(&sid(id), ReadRange::all()).await.unwrap().len(),
            2
        );
    }
}

/// A flush's group takes at most `FLUSH_FOLLOW_OPS` operations queued behind it, so its
/// caller waits for a bounded amount of others' work: a database error a few writes
/// past the bound rolls back only the writes of the next group, never the flush's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn h_store_4_a_flush_takes_a_bounded_number_of_writes_behind_it() {
    let db = Db::new();
    let store = &db.store;
    with_orphan_event(&db);
    let bound = SqliteStore::FLUSH_FOLLOW_OPS;
    let raw = db.raw();
    raw.execute_batch("BEGIN IMMEDIATE").unwrap();
    let first = store.kv_cas("d", "first", None, Some(b"v".to_vec()));
    let flushed = store.flush();
    let put = |n: usize| store.kv_cas("d", &format!("k{n}"), None, Some(b"v".to_vec()));
    let taken: Vec<_> = (0..bound).map(put).collect();
    let next_group: Vec<_> = (bound..bound + 4).map(put).collect();
    let breaking = breaking_creation(store);
    let after = put(bound + 4);
    tokio::time::sleep(Duration::from_millis(150)).await;
    raw.execute_batch("COMMIT").unwrap();
    assert_eq!(first.await, Ok(Some(1)));
    assert_eq!(flushed.await, Ok(()));
    for ticket in taken {
        assert_eq!(ticket.await, Ok(Some(1)), "taken into the flush's group");
    }
    for ticket in next_group {
        let result = ticket.await;
        assert!(
            matches!(&result, Err(StoreError::Backend { operation: "kv_cas", message }) if message.contains("rolled back")),
            "past the bound, in the group the breaking write fails: {result:?}"
        );
    }
    assert!(breaking.await.is_err());
    assert_eq!(
        after.await,
        Ok(Some(1)),
        "queued after the failure: a group of its own"
    );
}

/// A burst's rows are written while its group is still open (a full statement's worth
/// at a time); a database error in a later statement still rolls back the whole group,
/// rows already inserted included.
#[tokio::test]
async fn h_store_4_a_failure_after_rows_went_in_early_rolls_back_the_whole_group() {
    let db = Db::new();
    let store = &db.store;
    seeded(store, "s", 0).await;
    let raw = db.raw();
    // A stray row at seq 100, below no head: the group's insert of seq 100 will hit it.
    raw.execute(
        "INSERT INTO events (session_id, seq, body) VALUES ('s', 100, '{}')",
        [],
    )
    .unwrap();
    raw.execute_batch("BEGIN IMMEDIATE").unwrap();
    // 70 rows: the first 64 go in as soon as they are applied; the next batch fails.
    let early = store.append(&sid("s"), 0, numbered(0, 70, "early"));
    let breaking = store.append(&sid("s"), 70, numbered(70, 60, "breaking"));
    let flushed = store.flush();
    tokio::time::sleep(Duration::from_millis(150)).await;
    raw.execute_batch("COMMIT").unwrap();

    match flushed.await {
        Err(StoreError::Backend { message, .. }) => assert!(
            message.contains("the events from seq 64") && message.contains("rolled back"),
            "{message}"
        ),
        other => panic!("flush should report the rollback, got {other:?}"),
    }
    for ticket in [early, breaking] {
        let outcome = ticket.await;
        assert!(
            matches!(
                outcome,
                Err(StoreError::Backend {
                    operation: "append",
                    ..
                })
            ),
            "{outcome:?}"
        );
    }
    assert_eq!(
        store
            .session(&sid("s"))
            .await
            .unwrap()
            .map(|record| record.head),
        Some(0)
    );
    let stored: Vec<i64> = raw
        .prepare("SELECT seq FROM events WHERE session_id = 's' ORDER BY seq")
        .unwrap()
        .query_map([], |row| row.get(0))
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap();
    assert_eq!(stored, vec![100]);
}

/// Two stores on one file (two writer threads) take turns through the busy timeout:
/// heavy concurrent pipelines from both all succeed and each sees the other's data.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn h_store_3_two_handles_serialize_writes() {
    let db = Db::new();
    let other = db.second_handle();
    let stores = [&db.store, &other];
    for (index, store) in stores.iter().enumerate() {
        seeded(store, &format!("own-{index}"), 0).await;
    }
    let issue = |index: usize| {
        let store = stores[index].clone();
        std::thread::spawn(move || {
            let id = sid(&format!("own-{index}"));
            let mut tickets = Vec::new();
            for seq in 0..300_u64 {
                tickets.push(store.append(&id, seq, numbered(seq, 1, "t")));
            }
            tickets
        })
    };
    let (first, second) = (issue(0), issue(1));
    for handle in [first, second] {
        for (seq, ticket) in handle.join().unwrap().into_iter().enumerate() {
            assert_eq!(ticket.await, Ok(seq as u64 + 1));
        }
    }
    // A CAS counter bumped alternately through both handles.
    let mut version = None;
    for round in 0..40 {
        let store = stores[round % 2];
        version = store
            .kv_cas("d", "counter", version, Some(vec![round as u8]))
            .await
            .unwrap();
    }
    assert_eq!(version, Some(40));
    for store in stores {
        for index in 0..2 {
            let events = store
                .read(&sid(&format!("own-{index}")), ReadRange::all())
                .await
                .unwrap();
            assert_eq!(events, numbered(0, 300, "t"));
        }
        assert_eq!(
            store
                .kv_get("d", "counter")
                .await
                .unwrap()
                .map(|entry| entry.version),
            Some(40)
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn h_store_3_reads_share_a_small_pool() {
    let db = Db::with(|config| config.read_connections = 1);
    seeded(&db.store, "pool", 50).await;
    let tasks: Vec<_> = (0..32)
        .map(|index| {
            let store = db.store.clone();
            tokio::spawn(async move {
                let events = store.read(&sid("pool"), ReadRange::all()).await.unwrap();
                let listed = store.list_sessions(SessionQuery::default()).await.unwrap();
                let missing = store.kv_get("d", &format!("k{index}")).await.unwrap();
                (events.len(), listed.len(), missing)
            })
        })
        .collect();
    for task in tasks {
        assert_eq!(task.await.unwrap(), (50, 1, None));
    }
}

// -------------------------------------------------------------------------------------
// Durability, close and drop
// -------------------------------------------------------------------------------------

/// H-STORE-4: when a flush resolves, everything queued before it (tickets dropped,
/// never awaited) is committed: an independent connection sees it at once, and so
/// does a store reopened after the first one is gone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn h_store_4_flush_makes_prior_writes_durable() {
    let db = Db::new();
    let id = sid("durable");
    drop(
        db.store
            .create_session(new_session("durable", 1), Vec::new()),
    );
    for seq in 0..200_u64 {
        drop(db.store.append(&id, seq, numbered(seq, 1, "d")));
    }
    drop(db.store.kv_cas("d", "k", None, Some(b"v".to_vec())));
    assert_eq!(db.store.flush().await, Ok(()));

    let raw = db.raw();
    let count: i64 = raw
        .query_row(
            "SELECT COUNT(*) FROM events WHERE session_id = 'durable'",
            [],
            |row| row.get(0),
        )
        .unwrap();
    assert_eq!(count, 200);
    let peer = db.second_handle();
    assert_eq!(
        peer.read(&id, ReadRange::all()).await,
        Ok(numbered(0, 200, "d"))
    );
    drop(peer);

    let path = db.path();
    drop(db.store);
    let reopened = SqliteStore::open(SqliteConfig::new(&path)).unwrap();
    assert_eq!(
        reopened.read(&id, ReadRange::all()).await,
        Ok(numbered(0, 200, "d"))
    );
    assert_eq!(
        reopened.kv_get("d", "k").await,
        Ok(Some(KvEntry {
            version: 1,
            value: b"v".to_vec()
        }))
    );
}

/// H-STORE-4 with the writes a group defers to its commit (moved heads, multi-row
/// inserts): appends to two sessions queued without awaiting, in batches of 1 to 130
/// events (so the 64-row statements and every smaller size are used) with a stale
/// append in the middle, land as if applied one by one: the stale one fails with
/// `Conflict` and writes nothing, the others keep their order, bodies and heads, also
/// after a reopen; an awaited append after them resolves to its head.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn h_store_4_deferred_group_writes_land_in_queue_order() {
    let db = Db::new();
    let (a, b) = (sid("deferred-a"), sid("deferred-b"));
    drop(
        db.store
            .create_session(new_session("deferred-a", 1), Vec::new()),
    );
    drop(
        db.store
            .create_session(new_session("deferred-b", 2), numbered(0, 2, "b")),
    );
    let batches = [1_u64, 70, 1, 3, 130, 64, 5];
    let (mut head_a, mut head_b) = (0_u64, 2_u64);
    let mut tickets = Vec::new();
    let mut stale = None;
    for (index, count) in batches.iter().copied().enumerate() {
        tickets.push((
            db.store.append(&a, head_a, numbered(head_a, count, "a")),
            head_a + count,
        ));
        head_a += count;
        if index == 3 {
            // Stale: `b` is already past seq 1.
            stale = Some((db.store.append(&b, 1, numbered(1, 1, "stale")), head_b));
        }
        tickets.push((
            db.store
                .append(&b, head_b, numbered(head_b, count + 1, "b")),
            head_b + count + 1,
        ));
        head_b += count + 1;
    }
    let awaited = db
        .store
        .append_awaited(&a, head_a, numbered(head_a, 1, "a"));
    head_a += 1;
    assert_eq!(awaited.await, Ok(head_a));
    for (ticket, head) in tickets {
        assert_eq!(ticket.await, Ok(head));
    }
    let (stale, actual) = stale.unwrap();
    assert_eq!(
        stale.await,
        Err(StoreError::Conflict {
            session: b.clone(),
            expected: 1,
            actual,
        })
    );
    assert_eq!(actual, 77);
    assert_eq!(db.store.flush().await, Ok(()));

    let path = db.path();
    drop(db.store);
    let reopened = SqliteStore::open(SqliteConfig::new(&path)).unwrap();
    assert_eq!(
        reopened.read(&a, ReadRange::all()).await,
        Ok(numbered(0, head_a, "a"))
    );
    assert_eq!(
        reopened.read(&b, ReadRange::all()).await,
        Ok(numbered(0, head_b, "b"))
    );
    let heads = (
        reopened
            .session(&a)
            .await
            .unwrap()
            .map(|record| record.head),
        reopened
            .session(&b)
            .await
            .unwrap()
            .map(|record| record.head),
    );
    assert_eq!(heads, (Some(head_a), Some(head_b)));
}

const ABORT_CHILD_ENV: &str = "CCARE_STORE_TEST_ABORT_CHILD_DB";

/// H-STORE-4 across a crash: a child process appends, flushes, prints a marker and
/// aborts (no destructors, no clean close); the parent then finds every flushed event.
#[test]
fn h_store_4_flush_survives_process_abort() {
    if let Ok(path) = std::env::var(ABORT_CHILD_ENV) {
        runtime().block_on(async {
            let store = SqliteStore::open(SqliteConfig::new(&path)).unwrap();
            drop(store.create_session(new_session("crash", 1), Vec::new()));
            for seq in 0..300_u64 {
                drop(store.append(&sid("crash"), seq, numbered(seq, 1, "c")));
            }
            store.flush().await.unwrap();
            println!("CHILD-FLUSHED");
        });
        std::process::abort();
    }
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("crash.db");
    let output = std::process::Command::new(std::env::current_exe().unwrap())
        .args([
            "sqlite::h_store_4_flush_survives_process_abort",
            "--exact",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(ABORT_CHILD_ENV, &path)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        stdout.contains("CHILD-FLUSHED"),
        "child did not flush: {output:?}"
    );
    assert!(
        !output.status.success(),
        "the child should have aborted: {output:?}"
    );
    runtime().block_on(async {
        let store = SqliteStore::open(SqliteConfig::new(&path)).unwrap();
        assert_eq!(
            store.read(&sid("crash"), ReadRange::all()).await,
            Ok(numbered(0, 300, "c"))
        );
    });
}

/// `close` commits everything queued, then refuses writes and reads with `Closed`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn h_store_3_close_drains_the_queue() {
    let db = Db::new();
    let store = db.store.clone();
    seeded(&store, "closing", 0).await;
    let tickets: Vec<_> = (0..500_u64)
        .map(|seq| store.append(&sid("closing"), seq, numbered(seq, 1, "q")))
        .collect();
    let closer = db.store.clone();
    tokio::task::spawn_blocking(move || closer.close())
        .await
        .unwrap()
        .unwrap();
    for (seq, ticket) in tickets.into_iter().enumerate() {
        assert_eq!(ticket.await, Ok(seq as u64 + 1));
    }
    assert_eq!(
        store
            .append(&sid("closing"), 500, numbered(500, 1, "q"))
            .await,
        Err(StoreError::Closed)
    );
    assert_eq!(
        store.kv_cas("d", "k", None, None).await,
        Err(StoreError::Closed)
    );
    assert_eq!(store.flush().await, Err(StoreError::Closed));
    assert_eq!(
        store.read(&sid("closing"), ReadRange::all()).await,
        Err(StoreError::Closed)
    );
    assert_eq!(
        store.session(&sid("closing")).await,
        Err(StoreError::Closed)
    );
    assert_eq!(store.close(), Ok(()));
    let reopened = db.second_handle();
    assert_eq!(
        reopened
            .session(&sid("closing"))
            .await
            .unwrap()
            .map(|record| record.head),
        Some(500)
    );
}

/// Dropping the last handle also drains the queue before the writer stops.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn h_store_3_drop_of_last_handle_drains_the_queue() {
    let db = Db::new();
    seeded(&db.store, "dropping", 0).await;
    let clone = db.store.clone();
    for seq in 0..400_u64 {
        drop(clone.append(&sid("dropping"), seq, numbered(seq, 1, "x")));
    }
    drop(clone);
    // Still open through the original handle.
    assert_eq!(db.store.flush().await, Ok(()));
    for seq in 400..700_u64 {
        drop(
            db.store
                .append(&sid("dropping"), seq, numbered(seq, 1, "x")),
        );
    }
    let path = db.path();
    drop(db.store);
    let reopened = SqliteStore::open(SqliteConfig::new(&path)).unwrap();
    assert_eq!(
        reopened.read(&sid("dropping"), ReadRange::all()).await,
        Ok(numbered(0, 700, "x"))
    );
}

/// `close` returns the oldest failure no ticket reported.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn h_store_4_close_reports_the_unreported_error() {
    let db = Db::new();
    seeded(&db.store, "c", 0).await;
    drop(db.store.append(&sid("c"), 3, numbered(3, 1, "x")));
    let store = db.store.clone();
    let closed = tokio::task::spawn_blocking(move || store.close())
        .await
        .unwrap();
    assert_eq!(
        closed,
        Err(StoreError::Conflict {
            session: sid("c"),
            expected: 3,
            actual: 0
        })
    );
}

// -------------------------------------------------------------------------------------
// KV linearizability, property-tested
// -------------------------------------------------------------------------------------

fn cas_op() -> impl Strategy<Value = CasOp> {
    let expected = prop_oneof![2 => Just(None), 3 => (1_u64..4).prop_map(Some)];
    let value = prop_oneof![3 => proptest::collection::vec(any::<u8>(), 0..4).prop_map(Some), 1 => Just(None)];
    (0_u8..3, expected, value).prop_map(|(key, expected, value)| CasOp {
        key,
        expected,
        value,
    })
}

fn runner(cases: u32) -> TestRunner {
    TestRunner::new(Config {
        cases,
        failure_persistence: None,
        ..Config::default()
    })
}

/// H-STORE-2: CAS ops issued back to back without awaiting (so many share a group)
/// give exactly the results and final state of the sequential model, in call order.
#[test]
fn h_store_2_pipelined_cas_matches_the_sequential_model() {
    let runtime = runtime();
    let db = runtime.block_on(async { Db::new() });
    let case = AtomicUsize::new(0);
    runner(64)
        .run(&proptest::collection::vec(cas_op(), 1..40), |ops| {
            let domain = format!("pipeline-{}", case.fetch_add(1, Ordering::Relaxed));
            runtime
                .block_on(conformance::kv_pipeline_matches_model(
                    &db.store, &domain, &ops,
                ))
                .map_err(TestCaseError::fail)
        })
        .unwrap();
}

/// H-STORE-2: two clients running CAS ops concurrently (each awaiting its own before
/// the next), on one store and on two handles of one file: every history is
/// linearizable against the sequential model.
#[test]
fn h_store_2_concurrent_cas_clients_are_linearizable() {
    let runtime = runtime();
    let (db, other) = runtime.block_on(async {
        let db = Db::new();
        let other = db.second_handle();
        (db, other)
    });
    let case = AtomicUsize::new(0);
    let client = || proptest::collection::vec(cas_op(), 0..10);
    runner(40)
        .run(&(client(), client()), |(a, b)| {
            let case = case.fetch_add(1, Ordering::Relaxed);
            runtime.block_on(async {
                let one = format!("linear-one-{case}");
                conformance::kv_concurrent_clients_are_linearizable(
                    &db.store,
                    &db.store,
                    &one,
                    [&a, &b],
                )
                .await
                .map_err(TestCaseError::fail)?;
                let two = format!("linear-two-{case}");
                conformance::kv_concurrent_clients_are_linearizable(
                    &db.store,
                    &other,
                    &two,
                    [&a, &b],
                )
                .await
                .map_err(TestCaseError::fail)
            })
        })
        .unwrap();
}

/// `busy_timeout_ms` bounds how long a write waits for another program's lock: with
/// 100 ms configured, a write under a lock held for good fails (naming the lock) long
/// before the default 5 s would have passed, and the store works again once the lock
/// is gone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn h_store_3_the_busy_timeout_is_the_configured_one() {
    let db = Db::with(|config| config.busy_timeout_ms = 100);
    seeded(&db.store, "s", 0).await;
    let raw = db.raw();
    raw.execute_batch("BEGIN IMMEDIATE").unwrap();
    let started = std::time::Instant::now();
    let refused = db.store.append(&sid("s"), 0, numbered(0, 1, "late")).await;
    let waited = started.elapsed();
    match refused {
        Err(StoreError::Backend { message, .. }) => {
            assert!(message.contains("database is locked"), "{message}");
        }
        other => panic!("the write should fail on the lock, got {other:?}"),
    }
    // Generous against a slow machine, and still well under the default's 5 s.
    assert!(waited < Duration::from_millis(2500), "waited {waited:?}");
    raw.execute_batch("ROLLBACK").unwrap();
    assert_eq!(
        db.store
            .append(&sid("s"), 0, numbered(0, 1, "on time"))
            .await,
        Ok(1)
    );
    assert_eq!(
        db.store.read(&sid("s"), ReadRange::all()).await.unwrap(),
        numbered(0, 1, "on time")
    );
}
