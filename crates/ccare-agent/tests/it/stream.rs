//! The one ordered stream out of an agent (spec ACT-4): `Agent::subscribe_from` read
//! against the session exported from the real SQLite store.

#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use ccare_agent::testing::{TestHost, turn};
use ccare_agent::{Agent, EventStream, StreamItem};
use ccare_core::kinds;
use ccare_llm::Chunk;
use ccare_session::Session;
use serde_json::Value;

const WAIT: Duration = Duration::from_secs(20);

/// A text reply of `words` words streamed with `delay_ms` before each chunk.
fn reply(words: usize, delay_ms: u64) -> String {
    let text: Vec<String> = (0..words).map(|n| format!("w{n}")).collect();
    serde_json::json!({"text": text.join(" "), "delay_ms": delay_ms}).to_string()
}

async fn kit(script: &str) -> (TestHost, Session, Agent) {
    let test = TestHost::builder(script).build().unwrap();
    let session = test.session().await.unwrap();
    let agent = test.agent(&session, "s/scripted");
    (test, session, agent)
}

/// The events of the exported session (the JSONL's lines after its header), by seq.
async fn exported(test: &TestHost, session: &Session) -> Vec<String> {
    let mut out = Vec::new();
    test.sessions()
        .export(session.id(), &mut out)
        .await
        .unwrap();
    let text = String::from_utf8(out).unwrap();
    text.lines().skip(1).map(str::to_owned).collect()
}

async fn next(stream: &mut EventStream) -> Option<StreamItem> {
    tokio::time::timeout(WAIT, stream.next())
        .await
        .expect("the stream stalled")
}

/// A tiny deterministic generator (seeded), so a failure names its seed.
fn lcg(seed: u64) -> impl FnMut(u64) -> u64 {
    let mut state = seed.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1);
    move |bound| {
        state = state
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        (state >> 33) % bound
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn act4_replay_from_any_seq_is_the_exported_log_after_it() {
    let script = [reply(3, 0), reply(4, 0), reply(2, 0)].join("\n");
    let (test, session, agent) = kit(&script).await;
    for prompt in ["one", "two", "three"] {
        turn(&agent, prompt).await.unwrap();
    }
    let export = exported(&test, &session).await;
    let head = export.len() as u64;
    assert!(head > 12, "three turns log more than 12 events: {head}");
    let mut cursors: Vec<Option<u64>> = vec![None, Some(0), Some(head - 2), Some(head - 1)];
    for seed in 0..12 {
        cursors.push(Some(lcg(seed)(head)));
    }
    for after in cursors {
        let mut stream = agent.subscribe_from(after);
        let first = after.map_or(0, |seq| seq + 1);
        let mut got = Vec::new();
        while (first + got.len() as u64) < head {
            match next(&mut stream).await {
                Some(StreamItem::Event(event)) => got.push(event.raw_json().to_owned()),
                other => panic!("after {after:?}: expected an event, got {other:?}"),
            }
        }
        let want: Vec<String> = export[first as usize..].to_vec();
        assert_eq!(got, want, "after {after:?}");
        // Nothing more: no duplicate, no transient item while the agent is idle.
        let extra = tokio::time::timeout(Duration::from_millis(50), stream.next()).await;
        assert!(extra.is_err(), "after {after:?}: unexpected {extra:?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn act4_live_stream_orders_events_deltas_and_idle() {
    let script = [reply(6, 1), reply(5, 1)].join("\n");
    let (test, session, agent) = kit(&script).await;
    let mut stream = agent.subscribe_from(None);
    let runner = {
        let agent = agent.clone();
        tokio::spawn(async move {
            turn(&agent, "first").await;
            turn(&agent, "second").await;
        })
    };
    let mut items = Vec::new();
    let mut idles = 0;
    while idles < 2 {
        let item = next(&mut stream).await.expect("the stream ended early");
        if matches!(item, StreamItem::Idle { .. }) {
            idles += 1;
        }
        items.push(item);
    }
    runner.await.unwrap();
    let export = exported(&test, &session).await;
    let events: Vec<String> = items
        .iter()
        .filter_map(|item| match item {
            StreamItem::Event(event) => Some(event.raw_json().to_owned()),
            _ => None,
        })
        .collect();
    assert_eq!(events, export, "the stream's events are the exported log");

    // Every delta follows the event it is tagged with; the text deltas of a step are
    // the text of the assistant message that comes after them.
    let mut last: Option<(u64, String)> = None;
    let mut text = String::new();
    let mut answers = Vec::new();
    let mut idle_after = Vec::new();
    for item in &items {
        match item {
            StreamItem::Event(event) => {
                if event.kind() == kinds::ASSISTANT_MESSAGE {
                    let data: Value = serde_json::from_str(event.data_json()).unwrap();
                    let logged = data["message"]["content"][0]["text"]
                        .as_str()
                        .unwrap_or_default()
                        .to_owned();
                    answers.push((std::mem::take(&mut text), logged));
                }
                last = Some((event.seq(), event.kind().to_owned()));
            }
            StreamItem::Delta { after_seq, live } => {
                assert_eq!(Some(*after_seq), last.as_ref().map(|(seq, _)| *seq));
                if let Chunk::TextDelta { text: delta, .. } = &live.chunk {
                    text.push_str(delta);
                }
            }
            StreamItem::Idle { after_seq } => {
                assert_eq!(Some(*after_seq), last.as_ref().map(|(seq, _)| *seq));
                idle_after.push(last.clone().unwrap().1);
            }
            other => panic!("unexpected {other:?}"),
        }
    }
    assert_eq!(
        answers,
        vec![
            (
                "w0 w1 w2 w3 w4 w5".to_owned(),
                "w0 w1 w2 w3 w4 w5".to_owned()
            ),
            ("w0 w1 w2 w3 w4".to_owned(), "w0 w1 w2 w3 w4".to_owned()),
        ]
    );
    assert_eq!(idle_after, vec![kinds::TURN_END, kinds::TURN_END]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn act4_slow_subscriber_lags_and_resumes_without_gap_or_duplicate() {
    let script = [reply(120, 1), reply(120, 1), reply(120, 1)].join("\n");
    let (test, session, agent) = kit(&script).await;
    let done_head = Arc::new(AtomicU64::new(u64::MAX));
    let runner = {
        let agent = agent.clone();
        let session = session.clone();
        let done_head = Arc::clone(&done_head);
        tokio::spawn(async move {
            for prompt in ["a", "b", "c"] {
                turn(&agent, prompt).await;
            }
            session.flush().await.unwrap();
            done_head.store(session.head(), Ordering::Release);
        })
    };
    let mut stream = agent.subscribe_with_capacity(None, 2);
    let mut seen: Vec<(u64, String)> = Vec::new();
    let mut lags = 0;
    let mut reconnects = 0;
    loop {
        let last = seen.last().map(|(seq, _)| *seq);
        if last.map_or(0, |seq| seq + 1) == done_head.load(Ordering::Acquire) {
            break;
        }
        let item = tokio::time::timeout(Duration::from_millis(500), stream.next()).await;
        let item = match item {
            Ok(item) => item,
            // Quiet: the agent is done or between turns; look at `done_head` again.
            Err(_) => continue,
        };
        match item {
            Some(StreamItem::Event(event)) => {
                assert_eq!(
                    event.seq(),
                    last.map_or(0, |seq| seq + 1),
                    "no gap, no duplicate"
                );
                seen.push((event.seq(), event.raw_json().to_owned()));
                // A reconnect: drop the stream now and then, resume from the last seen.
                if event.seq() % 7 == 3 {
                    reconnects += 1;
                    stream = agent.subscribe_with_capacity(Some(event.seq()), 2);
                }
            }
            Some(StreamItem::Lagged { resume_from }) => {
                assert_eq!(resume_from, last, "the cursor is the last event received");
                lags += 1;
                stream = agent.subscribe_with_capacity(resume_from, 2);
            }
            Some(StreamItem::Delta { .. } | StreamItem::Idle { .. }) => {}
            Some(other) => panic!("unexpected {other:?}"),
            None => panic!("the stream ended without Lagged"),
        }
        // The deliberately slow reader.
        tokio::time::sleep(Duration::from_millis(3)).await;
    }
    runner.await.unwrap();
    assert!(lags >= 1, "the slow subscriber lagged at least once");
    assert!(reconnects >= 2, "it reconnected: {reconnects}");
    let export = exported(&test, &session).await;
    let events: Vec<String> = seen.into_iter().map(|(_, json)| json).collect();
    assert_eq!(events, export);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn act4_an_event_the_store_refused_is_never_streamed() {
    use ccare_agent::testing::{FailingStore, Fault};
    use ccare_store::{ReadRange, Store};

    let store = Arc::new(FailingStore::default());
    let script = [reply(2, 0), reply(3, 0)].join("\n");
    let test = TestHost::builder(&script)
        .store(Arc::clone(&store) as Arc<dyn Store>)
        .build()
        .unwrap();
    let session = test.session().await.unwrap();
    let agent = test.agent(&session, "s/scripted");
    turn(&agent, "kept").await.unwrap();
    session.flush().await.unwrap();
    let durable = session.head();
    let mut stream = agent.subscribe_from(Some(durable - 1));
    store.fail(Fault::appends("disk full").containing("\"assistant/message\""));
    agent.prompt("lost");
    agent.when_idle().await;
    let mut streamed = Vec::new();
    while let Ok(item) = tokio::time::timeout(Duration::from_millis(300), stream.next()).await {
        match item {
            Some(StreamItem::Event(event)) => streamed.push(event.raw_json().to_owned()),
            Some(_) => {}
            None => break,
        }
    }
    let rows = store
        .inner()
        .read(session.id(), ReadRange::all())
        .await
        .unwrap();
    let stored: Vec<String> = rows
        .iter()
        .skip(durable as usize)
        .map(|row| row.json.to_string())
        .collect();
    assert_eq!(streamed, stored, "only what the store acknowledged");
    let in_memory = session.with_log(|log| {
        log.events()
            .iter()
            .skip(durable as usize)
            .map(|event| event.kind().to_owned())
            .collect::<Vec<_>>()
    });
    assert!(
        in_memory
            .iter()
            .any(|kind| kind == kinds::ASSISTANT_MESSAGE),
        "the refused answer is in memory: {in_memory:?}"
    );
    assert!(
        streamed
            .iter()
            .all(|json| !json.contains("\"assistant/message\"")),
        "the refused answer was not streamed: {streamed:?}"
    );
}

/// A retired agent (another agent drives its session now) ends its subscriptions: one
/// following live ends without another item; one made afterwards replays what is
/// durable, then ends. Neither ends while the agent is not retired.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn act4_a_retired_agent_ends_its_streams_after_what_is_durable() {
    let (test, session, agent) = kit(&reply(3, 0)).await;
    turn(&agent, "one").await.unwrap();
    let head = exported(&test, &session).await.len();
    let mut live = agent.subscribe_from(Some(head as u64 - 1));
    let quiet = tokio::time::timeout(Duration::from_millis(50), live.next()).await;
    assert!(
        quiet.is_err(),
        "a stream of a working agent ended: {quiet:?}"
    );
    assert!(!agent.is_retired());
    agent.retire();
    assert!(agent.is_retired());
    assert_eq!(next(&mut live).await, None);
    let mut later = agent.subscribe_from(None);
    let mut replayed = Vec::new();
    while let Some(item) = next(&mut later).await {
        match item {
            StreamItem::Event(event) => replayed.push(event.raw_json().to_owned()),
            other => panic!("expected an event, got {other:?}"),
        }
    }
    assert_eq!(replayed, exported(&test, &session).await);
}
