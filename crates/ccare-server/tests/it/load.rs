//! R5 load: N concurrent sessions, each driven for 3 turns entirely through the API
//! (create, SSE stream, prompts) against the fake provider on loopback, bounded in
//! time. Asserts 0 errors and 0 lost or duplicated events (each session's streamed
//! events equal its export, byte for byte) and prints the p50/p99 of
//! prompt-to-first-delta (the time from sending the prompt to its first streamed
//! chunk arriving on the session's event stream).
//!
//! N comes from `CCARE_LOAD_SESSIONS` (default 20, so the normal test run is quick).
//! The full count of the issue is 500:
//! `CCARE_LOAD_SESSIONS=500 cargo test -p ccare-server --test it load -- --nocapture`
//! (add `--release` for figures that mean something).

use std::sync::Arc;
use std::time::{Duration, Instant};

use ccare_fake_openai::Reply;

use crate::events::{Sse, create_session, event_lines, export, export_events, prompt};
use crate::rig::Rig;

/// Sessions run at once unless `CCARE_LOAD_SESSIONS` says otherwise.
const DEFAULT_SESSIONS: usize = 20;
/// Turns per session.
const TURNS: usize = 3;
/// The whole run's bound.
const BOUND: Duration = Duration::from_secs(300);

fn sessions() -> usize {
    std::env::var("CCARE_LOAD_SESSIONS")
        .ok()
        .and_then(|value| value.parse().ok())
        .filter(|count| *count > 0)
        .unwrap_or(DEFAULT_SESSIONS)
}

/// Drives one session for [`TURNS`] turns; returns each turn's prompt-to-first-delta.
async fn drive(rig: Arc<Rig>) -> Vec<Duration> {
    let id = create_session(&rig).await;
    let mut sse = Sse::open(&rig, &format!("/api/sessions/{id}/events"), None).await;
    let mut frames = Vec::new();
    let mut latencies = Vec::new();
    for turn in 0..TURNS {
        let sent = Instant::now();
        prompt(&rig, &id, &format!("turn {turn}")).await;
        let mut first_delta = None;
        loop {
            let frame = sse.next().await;
            if first_delta.is_none() && frame.event == "delta" {
                first_delta = Some(sent.elapsed());
            }
            let idle = frame.event == "idle";
            frames.push(frame);
            if idle {
                break;
            }
        }
        latencies.push(first_delta.unwrap_or_else(|| panic!("{id}: turn {turn} had no delta")));
    }
    let streamed = event_lines(&frames);
    let exported = export_events(&export(&rig, &id).await);
    assert_eq!(streamed, exported, "{id}: the stream is the log, once");
    let turn_ends = frames
        .iter()
        .filter(|frame| frame.event == "turn/end")
        .count();
    assert_eq!(turn_ends, TURNS, "{id}");
    latencies
}

fn percentile(sorted: &[Duration], percent: usize) -> Duration {
    let index = (sorted.len() * percent).div_ceil(100).saturating_sub(1);
    sorted[index.min(sorted.len() - 1)]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn r5_concurrent_sessions_lose_nothing_and_report_first_delta_latency() {
    let count = sessions();
    let rig = Arc::new(Rig::start().await);
    rig.fake.respond_with(|_| Reply::text("one two three"));
    let started = Instant::now();
    let mut tasks = tokio::task::JoinSet::new();
    for _ in 0..count {
        tasks.spawn(drive(Arc::clone(&rig)));
    }
    let mut latencies = Vec::new();
    let mut errors = Vec::new();
    let joined = tokio::time::timeout(BOUND, async {
        while let Some(result) = tasks.join_next().await {
            match result {
                Ok(session) => latencies.extend(session),
                Err(error) => errors.push(error.to_string()),
            }
        }
    })
    .await;
    assert!(
        joined.is_ok(),
        "{count} sessions did not finish within {BOUND:?}"
    );
    let elapsed = started.elapsed();
    assert_eq!(errors, Vec::<String>::new(), "0 errors");
    assert_eq!(latencies.len(), count * TURNS);
    latencies.sort();
    println!(
        "R5 load: {count} sessions x {TURNS} turns in {elapsed:.2?}; prompt-to-first-delta p50 {:.2?}, p99 {:.2?}, max {:.2?}",
        percentile(&latencies, 50),
        percentile(&latencies, 99),
        latencies[latencies.len() - 1],
    );
    let requests = rig.fake.requests().len();
    assert!(requests >= count * TURNS, "{requests} model calls");
}
