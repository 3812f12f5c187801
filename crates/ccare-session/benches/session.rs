//! Issue 2 performance targets. Run: `cargo bench -p ccare-session --bench session`.
//!
//! - `durable_append_20k`: 20,000 realistic events (~300 bytes) appended and flushed
//!   every 100 events (group commit); divide 20,000 by the time for events/s.
//! - `single_durable_append`: one append + flush: the latency of one durable append.
//! - `open_100k`: load a 100,000-event session and derive its model view.
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

#[divan::bench(sample_count = 5, sample_size = 1)]
fn durable_append_20k(bencher: divan::Bencher) {
    bencher
        .with_inputs(|| session_with(0))
        .bench_local_values(|(dir, sessions, session)| {
            runtime().block_on(async {
                for index in 0..20_000 {
                    session.append(realistic(index)).unwrap();
                    if index % 100 == 99 {
                        session.flush().await.unwrap();
                    }
                }
                session.flush().await.unwrap();
            });
            (dir, sessions)
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
