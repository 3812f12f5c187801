//! API-3: a session driven entirely over HTTP against the fake provider, followed on
//! its SSE stream — the committed events streamed equal `export` byte for byte, a
//! reconnect with `Last-Event-ID` mid-turn loses and repeats nothing, `from` replays
//! from a seq — and the SSE client the other modules use ([`Sse`]).

use std::time::Duration;

use ccare_fake_openai::{Reply, Script};
use reqwest::Method;
use serde_json::{Value, json};

use crate::rig::{Rig, error_of};

/// How long a test waits for the next frame before it fails.
const FRAME_TIMEOUT: Duration = Duration::from_secs(20);

/// One server-sent event as a client reads it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Frame {
    /// `event:` (`message` when absent).
    pub(crate) event: String,
    /// `id:`.
    pub(crate) id: Option<String>,
    /// The `data:` lines joined by `\n`.
    pub(crate) data: String,
}

impl Frame {
    /// The data as JSON.
    pub(crate) fn json(&self) -> Value {
        serde_json::from_str(&self.data).unwrap_or_else(|error| panic!("{error}: {self:?}"))
    }

    /// Whether it is a committed event (it has an id).
    pub(crate) fn is_event(&self) -> bool {
        self.id.is_some()
    }
}

/// A reader of one `text/event-stream` response.
pub(crate) struct Sse {
    response: reqwest::Response,
    pending: Vec<u8>,
}

impl Sse {
    /// Opens `GET path` with the token (and `Last-Event-ID` when given); asserts 200
    /// and the media type.
    pub(crate) async fn open(rig: &Rig, path: &str, last_event_id: Option<&str>) -> Sse {
        let mut request = rig.authed(Method::GET, path);
        if let Some(last) = last_event_id {
            request = request.header("last-event-id", last);
        }
        let response = request.send().await.unwrap();
        let status = response.status().as_u16();
        let content_type = response
            .headers()
            .get("content-type")
            .and_then(|value| value.to_str().ok())
            .unwrap_or_default()
            .to_owned();
        if status != 200 {
            panic!("{path}: {status}: {}", response.text().await.unwrap());
        }
        assert!(
            content_type.starts_with("text/event-stream"),
            "{content_type}"
        );
        Sse {
            response,
            pending: Vec::new(),
        }
    }

    /// The next frame (keep-alive comments skipped); panics after [`FRAME_TIMEOUT`]
    /// or when the stream ends.
    pub(crate) async fn next(&mut self) -> Frame {
        match tokio::time::timeout(FRAME_TIMEOUT, self.read_frame()).await {
            Ok(Some(frame)) => frame,
            Ok(None) => panic!("the event stream ended"),
            Err(_) => panic!("no frame within {FRAME_TIMEOUT:?}"),
        }
    }

    /// Every frame up to and including the next `idle`.
    pub(crate) async fn until_idle(&mut self) -> Vec<Frame> {
        let mut frames = Vec::new();
        loop {
            let frame = self.next().await;
            let idle = frame.event == "idle";
            frames.push(frame);
            if idle {
                return frames;
            }
        }
    }

    /// Every frame left until the server ends the stream; panics after
    /// [`FRAME_TIMEOUT`] without one.
    pub(crate) async fn until_end(&mut self) -> Vec<Frame> {
        let mut frames = Vec::new();
        loop {
            match tokio::time::timeout(FRAME_TIMEOUT, self.read_frame()).await {
                Ok(Some(frame)) => frames.push(frame),
                Ok(None) => return frames,
                Err(_) => panic!("the stream did not end within {FRAME_TIMEOUT:?}: {frames:?}"),
            }
        }
    }

    async fn read_frame(&mut self) -> Option<Frame> {
        loop {
            if let Some(end) = find(&self.pending, b"\n\n") {
                let block: Vec<u8> = self.pending.drain(..end + 2).collect();
                let text = String::from_utf8(block).unwrap();
                if let Some(frame) = parse(&text) {
                    return Some(frame);
                }
                continue;
            }
            let chunk = self.response.chunk().await.unwrap()?;
            self.pending.extend_from_slice(&chunk);
        }
    }
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack
        .windows(needle.len())
        .position(|window| window == needle)
}

/// A frame of one block; `None` for a comment-only block (a keep-alive).
fn parse(block: &str) -> Option<Frame> {
    let mut event = None;
    let mut id = None;
    let mut data: Vec<&str> = Vec::new();
    for line in block.lines() {
        if line.starts_with(':') || line.is_empty() {
            continue;
        }
        let (field, value) = line.split_once(':').unwrap_or((line, ""));
        let value = value.strip_prefix(' ').unwrap_or(value);
        match field {
            "event" => event = Some(value.to_owned()),
            "id" => id = Some(value.to_owned()),
            "data" => data.push(value),
            other => panic!("unexpected SSE field {other:?} in {block:?}"),
        }
    }
    if event.is_none() && id.is_none() && data.is_empty() {
        return None;
    }
    Some(Frame {
        event: event.unwrap_or_else(|| "message".to_owned()),
        id,
        data: data.join("\n"),
    })
}

/// Creates a session over HTTP; returns its id.
pub(crate) async fn create_session(rig: &Rig) -> String {
    let response = rig.post_json("/api/sessions", &json!({})).await;
    assert_eq!(response.status().as_u16(), 201);
    let record: Value = response.json().await.unwrap();
    record["id"].as_str().unwrap().to_owned()
}

/// Sends a prompt; asserts 202 and returns the `afterSeq` it answered.
pub(crate) async fn prompt(rig: &Rig, id: &str, text: &str) -> Option<u64> {
    let response = rig
        .post_json(
            &format!("/api/sessions/{id}/messages"),
            &json!({"text": text, "mode": "prompt"}),
        )
        .await;
    let status = response.status().as_u16();
    let body: Value = response.json().await.unwrap();
    assert_eq!(status, 202, "{body}");
    assert_eq!(body["accepted"], json!(true), "{body}");
    body["afterSeq"].as_u64()
}

/// Prompts "look it up" declaring the caller-executed tool `lookup` (ACT-3); asserts
/// 202.
pub(crate) async fn look_it_up(rig: &Rig, id: &str) {
    let response = rig
        .post_json(
            &format!("/api/sessions/{id}/messages"),
            &json!({
                "text": "look it up",
                "tools": [{
                    "name": "lookup",
                    "description": "Looks a thing up.",
                    "inputSchema": {"type": "object", "properties": {"q": {"type": "string"}}}
                }]
            }),
        )
        .await;
    assert_eq!(response.status().as_u16(), 202);
}

/// The session's export.
pub(crate) async fn export(rig: &Rig, id: &str) -> String {
    let response = rig.get(&format!("/api/sessions/{id}/export")).await;
    assert_eq!(response.status().as_u16(), 200);
    assert_eq!(
        response.headers()["content-type"].to_str().unwrap(),
        "application/x-ndjson"
    );
    response.text().await.unwrap()
}

/// The export's event lines (the header line dropped), each with its `\n`.
pub(crate) fn export_events(export: &str) -> String {
    let (_header, events) = export.split_once('\n').unwrap();
    events.to_owned()
}

/// The committed events of `frames` as export writes them: one line each.
pub(crate) fn event_lines(frames: &[Frame]) -> String {
    frames
        .iter()
        .filter(|frame| frame.is_event())
        .map(|frame| format!("{}\n", frame.data))
        .collect()
}

/// Checks every event frame: `event:` is its type and `id:` its seq, seqs consecutive
/// from `first`.
fn assert_event_frames(frames: &[Frame], first: u64) {
    for (expected, frame) in (first..).zip(frames.iter().filter(|frame| frame.is_event())) {
        let event = frame.json();
        assert_eq!(event["seq"].as_u64(), Some(expected), "{frame:?}");
        assert_eq!(frame.id.as_deref(), Some(expected.to_string().as_str()));
        assert_eq!(
            event["type"].as_str(),
            Some(frame.event.as_str()),
            "{frame:?}"
        );
    }
}

/// A reply streamed in `pieces`, `delay_ms` apart.
fn slow_reply(pieces: &[&str], delay_ms: u64) -> Reply {
    let mut script = Script::new();
    for piece in pieces {
        script = script.text(*piece).delay_ms(delay_ms);
    }
    Reply::Chunks(script.finish("stop"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn api_3_a_turn_driven_over_http_streams_exactly_the_export() {
    let rig = Rig::start().await;
    rig.fake.push(Reply::text("Hello big world"));
    let id = create_session(&rig).await;
    let mut sse = Sse::open(&rig, &format!("/api/sessions/{id}/events"), None).await;
    assert_eq!(prompt(&rig, &id, "hi").await, None, "an empty session");
    let frames = sse.until_idle().await;

    assert_event_frames(&frames, 0);
    let exported = export(&rig, &id).await;
    assert_eq!(event_lines(&frames), export_events(&exported));
    let kinds: Vec<&str> = frames
        .iter()
        .filter(|frame| frame.is_event())
        .map(|frame| frame.event.as_str())
        .collect();
    assert_eq!(kinds.first(), Some(&"turn/start"));
    assert_eq!(kinds.last(), Some(&"turn/end"));
    assert!(kinds.contains(&"assistant/message"), "{kinds:?}");
    // The text arrived as deltas, each after the event it follows, before the message.
    let texts: Vec<String> = frames
        .iter()
        .filter(|frame| frame.event == "delta")
        .filter_map(|frame| {
            let data = frame.json();
            (data["chunk"]["type"] == "text-delta")
                .then(|| data["chunk"]["text"].as_str().unwrap().to_owned())
        })
        .collect();
    assert_eq!(texts.concat(), "Hello big world");
    let mut last_seq = None;
    for frame in &frames {
        if frame.is_event() {
            last_seq = frame.json()["seq"].as_u64();
        } else {
            assert_eq!(frame.id, None, "transient frames are no resume points");
            assert_eq!(frame.json()["afterSeq"].as_u64(), last_seq, "{frame:?}");
        }
    }
    let idle = frames.last().unwrap();
    assert_eq!(idle.event, "idle");
}

/// A rig over a failing store, and a session whose first turn ("hi") a store error
/// fenced as its reply was logged, followed from the start: the rig, its store, the
/// session, the follower and the frames it got up to the turn's `idle`.
async fn fenced_turn() -> (
    Rig,
    std::sync::Arc<crate::rig::FailingSqlite>,
    String,
    Sse,
    Vec<Frame>,
) {
    let rig = Rig::start_with(crate::rig::RigOptions {
        failing: true,
        ..crate::rig::RigOptions::default()
    })
    .await;
    let store = rig.failing.clone().expect("the rig serves a failing store");
    rig.fake.push(Reply::text("Hello"));
    let id = create_session(&rig).await;
    let mut sse = Sse::open(&rig, &format!("/api/sessions/{id}/events"), None).await;
    store.fail(
        ccare_store::testing::Fault::appends("disk full").containing("\"assistant/message\""),
    );
    prompt(&rig, &id, "hi").await;
    let frames = sse.until_idle().await;
    (rig, store, id, sse, frames)
}

/// A turn whose reply the store refuses (the session is fenced, so no `turn/end` is
/// logged) still ends its event stream's turn with `idle`: a follower waiting for the
/// turn's end is not left waiting. The session's detail names the fence, and what the
/// store holds stays readable.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn api_3_a_turn_a_store_error_fenced_ends_with_idle_and_the_detail_names_the_fence() {
    let (rig, _store, id, _sse, frames) = fenced_turn().await;
    let kinds: Vec<&str> = frames
        .iter()
        .filter(|frame| frame.is_event())
        .map(|frame| frame.event.as_str())
        .collect();
    assert_eq!(kinds.first(), Some(&"turn/start"), "{kinds:?}");
    assert!(!kinds.contains(&"turn/end"), "{kinds:?}");
    assert!(!kinds.contains(&"assistant/message"), "{kinds:?}");
    assert_eq!(frames.last().unwrap().event, "idle");

    let detail: Value = rig.get_json(&format!("/api/sessions/{id}")).await;
    assert_eq!(detail["state"], "idle", "{detail}");
    assert_eq!(
        detail["fence"], "store append failed: disk full",
        "{detail}"
    );
    // It counts what the store holds, not the refused reply.
    let last_stored = frames.iter().rev().find_map(|frame| frame.id.clone());
    assert_eq!(
        detail["headSeq"].as_u64().map(|seq| seq.to_string()),
        last_stored,
        "{detail}"
    );
    // What the store holds is still readable: the export is exactly the events the
    // stream sent (the refused reply is not among them), and so is the chart's series.
    assert_eq!(
        export_events(&export(&rig, &id).await),
        event_lines(&frames)
    );
    let series = rig.get(&format!("/api/sessions/{id}/context/series")).await;
    assert_eq!(series.status().as_u16(), 200);
}

/// A reply asking for a caller-executed tool that the store refuses opens no call: the
/// fenced session's detail offers no call that tool results could answer (the reopen
/// those results would trigger ends that turn as interrupted), and the session reads
/// idle, not awaiting tools.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn api_3_a_fenced_sessions_detail_opens_no_call_of_a_refused_reply() {
    let rig = Rig::start_with(crate::rig::RigOptions {
        failing: true,
        ..crate::rig::RigOptions::default()
    })
    .await;
    let store = rig.failing.clone().expect("the rig serves a failing store");
    rig.fake.push(Reply::Chunks(
        ccare_fake_openai::Script::new()
            .tool_call(0, Some("call_1"), Some("lookup"), "{\"q\":\"x\"}")
            .finish("tool_calls"),
    ));
    let id = create_session(&rig).await;
    let mut sse = Sse::open(&rig, &format!("/api/sessions/{id}/events"), None).await;
    store.fail(
        ccare_store::testing::Fault::appends("disk full").containing("\"assistant/message\""),
    );
    look_it_up(&rig, &id).await;
    let frames = sse.until_idle().await;
    assert!(
        !frames
            .iter()
            .any(|frame| frame.event == "assistant/message"),
        "{frames:?}"
    );
    let detail: Value = rig.get_json(&format!("/api/sessions/{id}")).await;
    assert_eq!(
        detail["fence"], "store append failed: disk full",
        "{detail}"
    );
    assert_eq!(detail["openCalls"], json!([]), "{detail}");
    assert_eq!(detail["state"], "idle", "{detail}");
}

/// A follower that connects to a fenced session (the web UI opening it) is sent every
/// event the store holds, not nothing: the events before the refused one are durable.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn api_3_a_follower_of_a_fenced_session_gets_its_stored_events() {
    let (rig, _store, id, _sse, frames) = fenced_turn().await;
    let stored = event_lines(&frames);
    let mut late = Sse::open(&rig, &format!("/api/sessions/{id}/events"), None).await;
    let mut got = Vec::new();
    while got.len() < frames.iter().filter(|frame| frame.is_event()).count() {
        let frame = late.next().await;
        if frame.is_event() {
            got.push(frame);
        }
    }
    assert_eq!(event_lines(&got), stored);
    assert_eq!(export_events(&export(&rig, &id).await), stored);
}

/// H-STORE-6 "reopening the session repairs it", over HTTP. A prompt to a session a
/// store error fenced reopens it from the store. While the store still fails, the
/// reopen's error is the answer and the session stays fenced. Once the store works,
/// the prompt is accepted: the fenced turn is closed by the repair, the new turn runs,
/// a follower's stream of the fenced actor ends, and resuming from its last event
/// shows exactly what the store holds after it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn h_store_6_a_prompt_reopens_a_fenced_session_once_the_store_works() {
    let (rig, store, id, mut sse, fenced_turn) = fenced_turn().await;
    let last_seen = fenced_turn
        .iter()
        .rev()
        .find_map(|frame| frame.id.clone())
        .expect("the fenced turn's durable events");
    let messages = format!("/api/sessions/{id}/messages");
    let (too_soon, once_more) = (
        json!({"text": "too soon", "mode": "prompt"}),
        json!({"text": "again", "mode": "prompt"}),
    );

    // The disk still fails every append: the reopen's repair cannot be stored.
    store.fail(ccare_store::testing::Fault::appends("disk still full"));
    let response = rig.post_json(&messages, &too_soon).await;
    let status = response.status().as_u16();
    let body: Value = response.json().await.unwrap();
    assert_eq!(status, 503, "{body}");
    assert_eq!(body["error"], "SESSION_FENCED", "{body}");
    assert_eq!(
        body["message"],
        format!(
            "session repair failed: session {id} is fenced after a store error: store append failed: disk still full"
        )
    );
    let detail: Value = rig.get_json(&format!("/api/sessions/{id}")).await;
    assert_eq!(
        detail["fence"], "store append failed: disk full",
        "{detail}"
    );

    // The disk works again: the prompt reopens the session and is accepted.
    store.heal();
    rig.fake.push(Reply::text("Welcome back"));
    let response = rig.post_json(&messages, &once_more).await;
    let status = response.status().as_u16();
    let body: Value = response.json().await.unwrap();
    assert_eq!(status, 202, "{body}");
    // The fenced actor's follower is told nothing more: its stream ends.
    assert_eq!(sse.until_end().await, Vec::<Frame>::new());
    // Resuming where it stopped, from the new actor: the repair, then the new turn.
    let path = format!("/api/sessions/{id}/events");
    let mut resumed = Sse::open(&rig, &path, Some(&last_seen)).await;
    let frames = resumed.until_idle().await;
    let kinds: Vec<&str> = frames
        .iter()
        .filter(|frame| frame.is_event())
        .map(|frame| frame.event.as_str())
        .collect();
    assert_eq!(
        kinds,
        [
            "step/end",
            "turn/end",
            "turn/start",
            "user/message",
            "step/start",
            "request/header",
            "assistant/message",
            "step/end",
            "turn/end",
        ],
        "{frames:?}"
    );
    let texts: Vec<String> = frames
        .iter()
        .filter(|frame| frame.event == "user/message" || frame.event == "assistant/message")
        .map(|frame| frame.json()["data"]["message"]["content"][0]["text"].to_string())
        .collect();
    assert_eq!(texts, [r#""again""#, r#""Welcome back""#]);
    let repair = frames[1].json();
    assert_eq!(
        repair["data"]["reason"],
        json!({"kind": "interrupted"}),
        "{repair}"
    );
    assert_eq!(repair["data"]["repair"], true, "{repair}");
    // Exactly what the store holds after the fenced turn's last durable event.
    let first = last_seen.parse::<u64>().unwrap() + 1;
    assert_event_frames(&frames, first);
    let stored = export_events(&export(&rig, &id).await);
    let stored_after: String = stored
        .lines()
        .skip(usize::try_from(first).unwrap())
        .map(|line| format!("{line}\n"))
        .collect();
    assert_eq!(event_lines(&frames), stored_after);
    let detail: Value = rig.get_json(&format!("/api/sessions/{id}")).await;
    assert_eq!(detail["fence"], Value::Null, "{detail}");
    assert_eq!(detail["state"], "idle", "{detail}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn api_3_reconnecting_mid_turn_with_last_event_id_loses_and_repeats_nothing() {
    let rig = Rig::start().await;
    rig.fake
        .push(slow_reply(&["one ", "two ", "three ", "four"], 150));
    let id = create_session(&rig).await;
    let path = format!("/api/sessions/{id}/events");
    let mut first = Sse::open(&rig, &path, None).await;
    prompt(&rig, &id, "count").await;
    // Read until the first delta: the turn is streaming now.
    let mut seen = Vec::new();
    loop {
        let frame = first.next().await;
        let delta = frame.event == "delta";
        seen.push(frame);
        if delta {
            break;
        }
    }
    drop(first);
    let last = seen
        .iter()
        .rev()
        .find_map(|frame| frame.id.clone())
        .unwrap();
    let mut second = Sse::open(&rig, &path, Some(&last)).await;
    let rest = second.until_idle().await;
    let mut all = seen.clone();
    all.extend(rest.iter().cloned());
    assert_event_frames(&all, 0);
    assert_eq!(
        event_lines(&all),
        export_events(&export(&rig, &id).await),
        "the two connections together are the log, once"
    );
    // `Last-Event-ID` overrides `from`.
    let mut third = Sse::open(&rig, &format!("{path}?from=0"), Some(&last)).await;
    let frame = third.next().await;
    assert_eq!(
        frame.id,
        Some((last.parse::<u64>().unwrap() + 1).to_string())
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn api_3_from_replays_the_log_from_that_seq_then_stays_live() {
    let rig = Rig::start().await;
    rig.fake.push(Reply::text("first"));
    rig.fake.push(Reply::text("second"));
    let id = create_session(&rig).await;
    let path = format!("/api/sessions/{id}/events");
    let mut sse = Sse::open(&rig, &path, None).await;
    prompt(&rig, &id, "one").await;
    let turn_one = sse.until_idle().await;
    drop(sse);
    let head: u64 = turn_one
        .iter()
        .rev()
        .find_map(|frame| frame.id.clone())
        .unwrap()
        .parse()
        .unwrap();

    // A replay from seq 2 of an idle session: events 2..=head, no idle (nothing ran).
    let mut replay = Sse::open(&rig, &format!("{path}?from=2"), None).await;
    let mut replayed = Vec::new();
    for _ in 2..=head {
        replayed.push(replay.next().await);
    }
    assert_event_frames(&replayed, 2);
    // The same connection goes live: the next turn streams on it.
    let after = prompt(&rig, &id, "two").await;
    assert_eq!(after, Some(head));
    let turn_two = replay.until_idle().await;
    assert_event_frames(&turn_two, head + 1);
    let exported = export_events(&export(&rig, &id).await);
    let mut lines = event_lines(&turn_one);
    lines.push_str(&event_lines(&turn_two));
    assert_eq!(lines, exported);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn api_3_bad_cursors_are_400_and_an_unknown_session_404() {
    let rig = Rig::start().await;
    let id = create_session(&rig).await;
    let path = format!("/api/sessions/{id}/events");
    let (status, code, message) = error_of(rig.get(&format!("{path}?from=x")).await).await;
    assert_eq!((status, code.as_str()), (400, "invalid-query"), "{message}");
    assert!(message.starts_with("from:"), "{message}");
    let response = rig
        .authed(Method::GET, &path)
        .header("last-event-id", "nope")
        .send()
        .await
        .unwrap();
    let (status, code, message) = error_of(response).await;
    assert_eq!((status, code.as_str()), (400, "bad-request"), "{message}");
    assert!(message.starts_with("Last-Event-ID:"), "{message}");
    let (status, code, _) = error_of(rig.get("/api/sessions/nope/events").await).await;
    assert_eq!((status, code.as_str()), (404, "UNKNOWN_SESSION"));
}
