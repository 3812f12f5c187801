//! Issue 2 memory target: an open session holds at most 3× its JSON size.
//! Run: `cargo bench -p ccare-session --bench memory`.
//!
//! Exact live heap bytes come from dhat's counting allocator: the 100,000-event session
//! is written and closed, then loaded with its derived view, and the bytes still live
//! afterwards (steady state) and the peak during the load are compared with the total
//! size of the events' JSON.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use std::sync::Arc;

use ccare_core::kinds::UserMessage;
use ccare_core::*;
use ccare_session::*;
use ccare_store::{SqliteConfig, SqliteStore, Store};

#[global_allocator]
static ALLOCATOR: dhat::Alloc = dhat::Alloc;

const EVENTS: u64 = 100_000;

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

fn engine(path: &std::path::Path) -> Sessions {
    let store: Arc<dyn Store> = Arc::new(SqliteStore::open(SqliteConfig::new(path)).unwrap());
    Sessions::new(
        store,
        Arc::new(SystemClock),
        Arc::new(Registry::with_host_defaults()),
        SessionsConfig::default(),
    )
}

fn mib(bytes: usize) -> f64 {
    bytes as f64 / 1_048_576.0
}

fn main() {
    let _profiler = dhat::Profiler::builder().testing().build();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("memory.db");
    let id = runtime.block_on(async {
        let sessions = engine(&path);
        let session = sessions.create(None, JsonObject::new()).await.unwrap();
        for index in 0..EVENTS {
            session.append(realistic(index)).unwrap();
        }
        session.flush().await.unwrap();
        let id = session.id().clone();
        sessions.close(&id).await.unwrap();
        id
    });
    let sessions = engine(&path);
    let before = dhat::HeapStats::get();
    let (log, view) = runtime.block_on(async {
        let loaded = sessions.load(&id).await.unwrap();
        let mut log = loaded.log;
        let view = log.derived_view();
        (log, view)
    });
    let after = dhat::HeapStats::get();
    let json: usize = log
        .events()
        .iter()
        .map(|event| event.raw_json().len())
        .sum();
    let live = after.curr_bytes.saturating_sub(before.curr_bytes);
    let peak = after.max_bytes.saturating_sub(before.curr_bytes);
    println!(
        "memory: {} events, JSON {:.1} MiB; open session (log + view) {:.1} MiB live = {:.2}x JSON (target <= 3x); peak during load {:.1} MiB = {:.2}x",
        log.head(),
        mib(json),
        mib(live),
        live as f64 / json as f64,
        mib(peak),
        peak as f64 / json as f64,
    );
    drop((log, view));
}
