//! Issue 2 performance targets. Run: `cargo bench -p ccare-session --bench session`.
//!
//! - `durable_append_20k`: 20,000 realistic events (~300 bytes) appended and flushed
//!   every 500 events (group commit: the writer commits whatever has queued, and each
//!   flush waits until everything before it is durable), the same durability points as
//!   `raw_sqlite_20k`'s transactions; divide 20,000 by the time for events/s.
//! - `durable_append_20k_prebuilt`: the same appends with the drafts built beforehand,
//!   as the raw baseline's envelopes are (the append path's own cost).
//! - `durable_append_20k_flush_100`: the same, flushed every 100 events (five times
//!   the durability points of the raw baseline; the figure earlier issues quoted).
//! - `raw_sqlite_20k`: the baseline in the same run: the same 20,000 envelopes (their
//!   exact bytes, encoded beforehand) inserted with plain `rusqlite` into the same
//!   `events` table, WAL + `synchronous=FULL`, 500 rows per transaction. Issue 14
//!   target 4: `raw_sqlite_20k / durable_append_20k >= 0.6`.
//! - `single_durable_append`: one append + flush: the latency of one durable append.
//! - `raw_sqlite_single`: the baseline: one row inserted and committed (one fsync) with
//!   plain `rusqlite`. Target: `single_durable_append / raw_sqlite_single <= 1.3`.
//! - `open_100k`: load a 100,000-event session and derive its model view.
//! - `open_100k_read` / `open_100k_replay`: its two halves apart: reading the 100,000
//!   stored rows from SQLite, and replaying rows already read into a log with its view.
//! - `append_at_1k` / `append_at_100k`: one in-memory append to an open session of that size.
//!
//! Memory of an open session is measured by the `memory` bench (exact heap bytes).
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

/// The allocator the `ccare` binary uses, so the figures are the product's.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

use std::sync::{Arc, OnceLock};

use ccare_core::kinds::UserMessage;
use ccare_core::*;
use ccare_session::*;
use ccare_store::{SqliteConfig, SqliteStore, Store};
use rusqlite::{Connection, TransactionBehavior, params};

fn main() {
    divan::main();
}

fn runtime() -> &'static tokio::runtime::Runtime {
    static RUNTIME: OnceLock<tokio::runtime::Runtime> = OnceLock::new();
    RUNTIME.get_or_init(|| {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap()
    })
}

fn engine(path: &std::path::Path) -> Sessions {
    let store: Arc<dyn Store> = Arc::new(SqliteStore::open(SqliteConfig::new(path)).unwrap());
    Sessions::new(
        store,
        Arc::new(SystemClock),
        Arc::new(Registry::with_host_defaults()),
        SessionsConfig::default(),
    )
}

/// A user message of about 300 bytes on the wire.
fn realistic(index: u64) -> EventDraft {
    let text = format!(
        "message {index}: {}",
        "lorem ipsum dolor sit amet ".repeat(8)
    );
    let mut message = Message::from_blocks(vec![ContentBlock::text(text)]);
    message.id = Some(format!("m{index}"));
    message.source = Some(Source::user());
    EventDraft::typed(&UserMessage { message })
        .unwrap()
        .with_surface(SurfaceOp::Append)
}

fn session_with(events: u64) -> (tempfile::TempDir, Sessions, Session) {
    let dir = tempfile::tempdir().unwrap();
    let sessions = engine(&dir.path().join("bench.db"));
    let session = runtime().block_on(async {
        let session = sessions.create(None, JsonObject::new()).await.unwrap();
        for index in 0..events {
            session.append(realistic(index)).unwrap();
        }
        session.flush().await.unwrap();
        session
    });
    (dir, sessions, session)
}

/// 20,000 appends, flushed every `every` events and at the end.
fn durable_append(bencher: divan::Bencher, every: u64) {
    bencher
        .with_inputs(|| session_with(0))
        .bench_local_values(|(dir, sessions, session)| {
            runtime().block_on(async {
                for index in 0..20_000 {
                    session.append(realistic(index)).unwrap();
                    if index % every == every - 1 {
                        session.flush().await.unwrap();
                    }
                }
                session.flush().await.unwrap();
            });
            (dir, sessions)
        });
}

#[divan::bench(sample_count = 5, sample_size = 1)]
fn durable_append_20k(bencher: divan::Bencher) {
    durable_append(bencher, 500);
}

/// `durable_append_20k` with the 20,000 drafts built before the timed section, as
/// `raw_sqlite_20k`'s envelopes are: what the append path itself costs (encode,
/// checks, memory, store), without the caller's serialising of its payloads.
#[divan::bench(sample_count = 5, sample_size = 1)]
fn durable_append_20k_prebuilt(bencher: divan::Bencher) {
    bencher
        .with_inputs(|| {
            let drafts: Vec<EventDraft> = (0..20_000).map(realistic).collect();
            (session_with(0), drafts)
        })
        .bench_local_values(|((dir, sessions, session), drafts)| {
            runtime().block_on(async {
                for (index, draft) in drafts.into_iter().enumerate() {
                    session.append(draft).unwrap();
                    if index % 500 == 499 {
                        session.flush().await.unwrap();
                    }
                }
                session.flush().await.unwrap();
            });
            (dir, sessions)
        });
}

#[divan::bench(sample_count = 5, sample_size = 1)]
fn durable_append_20k_flush_100(bencher: divan::Bencher) {
    durable_append(bencher, 100);
}

/// A raw `rusqlite` database with the store's `events` table and pragmas, holding
/// `rows` events of one session.
fn raw_database(rows: u64) -> (tempfile::TempDir, Connection, String) {
    let dir = tempfile::tempdir().unwrap();
    let conn = Connection::open(dir.path().join("raw.db")).unwrap();
    let mode: String = conn
        .pragma_update_and_check(None, "journal_mode", "WAL", |row| row.get(0))
        .unwrap();
    assert!(mode.eq_ignore_ascii_case("wal"));
    conn.pragma_update(None, "synchronous", "FULL").unwrap();
    conn.execute_batch(
        "CREATE TABLE events (
            session_id TEXT NOT NULL,
            seq INTEGER NOT NULL,
            body TEXT NOT NULL,
            PRIMARY KEY (session_id, seq)
        );",
    )
    .unwrap();
    let session = "0190f1e2-7c3a-7b4d-9e5f-0a1b2c3d4e5f".to_owned();
    for seq in 0..rows {
        raw_insert(&conn, &session, seq, &envelope(seq));
    }
    (dir, conn, session)
}

/// The exact stored bytes of `realistic(seq)` at `seq`.
fn envelope(seq: u64) -> String {
    Event::encode(seq, 1_700_000_000_000, realistic(seq))
        .unwrap()
        .raw_json()
        .to_owned()
}

fn raw_insert(conn: &Connection, session: &str, seq: u64, body: &str) {
    conn.prepare_cached("INSERT INTO events (session_id, seq, body) VALUES (?1, ?2, ?3)")
        .unwrap()
        .execute(params![session, seq as i64, body])
        .unwrap();
}

#[divan::bench(sample_count = 5, sample_size = 1)]
fn raw_sqlite_20k(bencher: divan::Bencher) {
    bencher
        .with_inputs(|| {
            let (dir, conn, session) = raw_database(0);
            let bodies: Vec<String> = (0..20_000).map(envelope).collect();
            (dir, conn, session, bodies)
        })
        .bench_local_values(|(dir, mut conn, session, bodies)| {
            for (chunk, group) in bodies.chunks(500).enumerate() {
                let tx = conn
                    .transaction_with_behavior(TransactionBehavior::Immediate)
                    .unwrap();
                for (offset, body) in group.iter().enumerate() {
                    raw_insert(&tx, &session, (chunk * 500 + offset) as u64, body);
                }
                tx.commit().unwrap();
            }
            (dir, conn)
        });
}

#[divan::bench(sample_count = 50, sample_size = 1)]
fn raw_sqlite_single(bencher: divan::Bencher) {
    let (_dir, mut conn, session) = raw_database(10);
    let mut next = 10;
    bencher
        .with_inputs(|| {
            next += 1;
            (next, envelope(next))
        })
        .bench_local_values(|(seq, body)| {
            let tx = conn
                .transaction_with_behavior(TransactionBehavior::Immediate)
                .unwrap();
            raw_insert(&tx, &session, seq, &body);
            tx.commit().unwrap();
        });
}

#[divan::bench(sample_count = 50, sample_size = 1)]
fn single_durable_append(bencher: divan::Bencher) {
    let (_dir, _sessions, session) = session_with(10);
    let mut index = 10;
    bencher.bench_local(|| {
        index += 1;
        runtime()
            .block_on(session.append_durable(realistic(index)))
            .unwrap();
    });
}

#[divan::bench(sample_count = 5, sample_size = 1)]
fn open_100k(bencher: divan::Bencher) {
    let (_dir, sessions, session) = session_with(100_000);
    let id = session.id().clone();
    runtime().block_on(sessions.close(&id)).unwrap();
    bencher.bench_local(|| {
        let loaded = runtime().block_on(sessions.load(&id)).unwrap();
        let mut log = loaded.log;
        divan::black_box(log.derived_view().messages.len());
        // Returned, so divan drops it after the timed section: opening is measured,
        // freeing 100k events is not.
        log
    });
}

#[divan::bench(sample_count = 5, sample_size = 1)]
fn open_100k_read(bencher: divan::Bencher) {
    let (_dir, sessions, session) = session_with(100_000);
    let id = session.id().clone();
    runtime().block_on(sessions.close(&id)).unwrap();
    let store = sessions.store().clone();
    bencher.bench_local(|| {
        runtime()
            .block_on(store.read(&id, ccare_store::ReadRange::all()))
            .unwrap()
    });
}

#[divan::bench(sample_count = 5, sample_size = 1)]
fn open_100k_replay(bencher: divan::Bencher) {
    let (_dir, sessions, session) = session_with(100_000);
    let id = session.id().clone();
    runtime().block_on(sessions.close(&id)).unwrap();
    let rows = runtime()
        .block_on(sessions.store().read(&id, ccare_store::ReadRange::all()))
        .unwrap();
    let registry = Registry::with_host_defaults();
    let policy = LoadPolicy::default();
    bencher
        .with_inputs(|| rows.clone())
        .bench_local_values(|rows| {
            let replayed = replay(
                &id,
                rows.into_iter().map(|row| row.json),
                &registry,
                &policy,
            )
            .unwrap();
            let mut log = replayed.log;
            divan::black_box(log.derived_view().messages.len());
            log
        });
}

fn append_at(bencher: divan::Bencher, size: u64) {
    let (_dir, _sessions, session) = session_with(size);
    let mut index = size;
    bencher.bench_local(|| {
        index += 1;
        session.append(realistic(index)).unwrap();
    });
    runtime().block_on(session.flush()).unwrap();
}

#[divan::bench(sample_count = 20, sample_size = 50)]
fn append_at_1k(bencher: divan::Bencher) {
    append_at(bencher, 1_000);
}

#[divan::bench(sample_count = 20, sample_size = 50)]
fn append_at_100k(bencher: divan::Bencher) {
    append_at(bencher, 100_000);
}
