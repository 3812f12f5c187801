//! The heap a gateway conversation leaves behind once its session actor has
//! stopped, with the care plugins on, with context care alone, and off. Run:
//! `cargo bench -p ccare-server --bench memory` (about a minute).
//!
//! A gateway (`ccare serve`'s server, booted as `ccare serve` boots, over a temp home
//! and SQLite store) runs in front of an in-process fake OpenAI upstream that answers
//! every request at once. Its actors stop after [`IDLE_MS`] unused, as they do after
//! `[host] actor_idle_ms` on a real server. Each scenario first warms the process up
//! (pools and caches reach their working size), waits until every actor has stopped
//! and the heap is still, then runs a measured batch and waits the same way: what the
//! heap grew by, divided by the conversations (or requests) of that batch, is what
//! each one leaves behind for the life of the process.
//!
//! - *new conversations*: each a two-message conversation, one request, as a client's
//!   one-off question or side task (a title, a commit message) is.
//! - *continuing conversations*: each [`TURNS`] turns of one conversation (the whole
//!   transcript plus a new user message every turn); the figure is per request.
//!
//! The heap is counted exactly by dhat's allocator (bytes asked for and not freed), as
//! `ccare-session`'s memory bench does: allocator caches and SQLite's own (bounded)
//! page cache do not count. A server that keeps nothing per stopped session prints a
//! few hundred bytes at most (maps that grew their capacity during the batch).
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

mod common;

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use ccare_core::SessionId;
use ccare_fake_openai::{FakeServer, Reply};
use common::{Gateway, gateway};
use serde_json::{Value, json};

/// dhat's counting allocator: exact live heap bytes ([`live`]).
#[global_allocator]
static ALLOCATOR: dhat::Alloc = dhat::Alloc;

/// The bytes live on the heap now.
fn live() -> i64 {
    i64::try_from(dhat::HeapStats::get().curr_bytes).unwrap_or(i64::MAX)
}

/// How long an unused actor runs before it stops (`[host] actor_idle_ms`).
const IDLE_MS: u64 = 50;
/// New conversations run before the measured batch, and in it.
const NEW: Batches = Batches {
    warm_up: 200,
    measured: 500,
};
/// Continuing conversations run before the measured batch, and in it.
const CONTINUING: Batches = Batches {
    warm_up: 20,
    measured: 50,
};

/// How many conversations a scenario runs before the measured batch, and in it.
struct Batches {
    warm_up: usize,
    measured: usize,
}
/// Turns of each continuing conversation.
const TURNS: usize = 10;
/// Conversations in flight at once.
const CONCURRENCY: usize = 10;

/// Context care on, stream watch off: what each plugin leaves, told apart.
const WATCH_OFF: &str = "[plugins.stream-watch]\nenabled = false\n";
const CARE_OFF: &str =
    "[plugins.context-care]\nenabled = false\n[plugins.stream-watch]\nenabled = false\n";

/// A user message no earlier request sent.
fn user_message() -> Value {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let n = NEXT.fetch_add(1, Ordering::Relaxed);
    json!({"role": "user", "content": format!("question {n}: what is the capital of Norway?")})
}

/// Runs one conversation of `turns` turns through `gateway`; returns its session.
async fn conversation(client: &reqwest::Client, gateway: &Gateway, turns: usize) -> SessionId {
    let mut messages = vec![json!({"role": "system", "content": "You are a helpful assistant."})];
    let mut session = None;
    for _ in 0..turns {
        messages.push(user_message());
        let response = client
            .post(&gateway.url)
            .bearer_auth(&gateway.token)
            .json(&json!({"model": "fake/model", "messages": messages}))
            .send()
            .await
            .unwrap();
        assert_eq!(response.status().as_u16(), 200);
        let header = response.headers()["x-ccare-session"]
            .to_str()
            .unwrap()
            .to_owned();
        let body: Value = response.json().await.unwrap();
        let answer = body["choices"][0]["message"]["content"]
            .as_str()
            .unwrap()
            .to_owned();
        messages.push(json!({"role": "assistant", "content": answer}));
        let id = SessionId::new(&header).unwrap();
        assert!(session.get_or_insert(id.clone()) == &id, "one session");
    }
    session.unwrap()
}

/// Runs `count` conversations of `turns` turns, [`CONCURRENCY`] at once, then waits
/// until every actor they started has stopped and the heap is still.
async fn batch(client: &reqwest::Client, gateway: &Gateway, count: usize, turns: usize) {
    let mut sessions = Vec::with_capacity(count);
    for start in (0..count).step_by(CONCURRENCY) {
        let group =
            (start..count.min(start + CONCURRENCY)).map(|_| conversation(client, gateway, turns));
        sessions.extend(futures_util::future::join_all(group).await);
    }
    for session in &sessions {
        while gateway.agents.is_running(session).await {
            tokio::time::sleep(Duration::from_millis(IDLE_MS)).await;
        }
    }
    settle().await;
}

/// Waits until the heap has not moved by more than 1 KiB for 200 ms (tasks that end
/// after an actor stopped free what they held), at most 5 s.
async fn settle() {
    let deadline = Instant::now() + Duration::from_secs(5);
    let mut last = live();
    while Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(200)).await;
        let now = live();
        if (now - last).abs() <= 1024 {
            return;
        }
        last = now;
    }
}

/// The heap a measured batch left, per conversation (`turns == 1`) or per request.
async fn retained(
    client: &reqwest::Client,
    gateway: &Gateway,
    batches: &Batches,
    turns: usize,
) -> f64 {
    batch(client, gateway, batches.warm_up, turns).await;
    let before = live();
    batch(client, gateway, batches.measured, turns).await;
    (live() - before) as f64 / (batches.measured * turns) as f64
}

fn main() {
    let _profiler = dhat::Profiler::builder().testing().build();
    let _ = rustls::crypto::ring::default_provider().install_default();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let fake = FakeServer::start().await.unwrap();
        fake.keep_requests(false);
        fake.respond_with(|_| Reply::text("hello big world"));
        let client = reqwest::Client::new();
        for (label, extra) in [
            ("care on", ""),
            ("context care only", WATCH_OFF),
            ("care off", CARE_OFF),
        ] {
            let config = format!("[host]\nactor_idle_ms = {IDLE_MS}\n{extra}");
            let gateway = gateway(&fake.base_url(), &config).await;
            let new = retained(&client, &gateway, &NEW, 1).await;
            let continuing = retained(&client, &gateway, &CONTINUING, TURNS).await;
            println!(
                "heap left per new conversation once its actor stopped ({label}): {new:.0} B"
            );
            println!(
                "heap left per request of a {TURNS}-turn conversation once its actor stopped ({label}): {continuing:.0} B"
            );
            let _ = std::fs::remove_dir_all(&gateway.dir);
        }
    });
}
