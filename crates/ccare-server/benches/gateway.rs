//! Issue 17 performance targets of the OpenAI-compatible gateway, measured direct and
//! through the gateway in one run. Run: `cargo bench -p ccare-server --bench gateway`.
//!
//! One in-process fake OpenAI upstream (`ccare-fake-openai`, every request answered
//! with the stream `"hello big world"` + finish + usage) and two real `ccare serve`
//! servers on loopback booted as `ccare serve` boots (the default profile over a temp
//! home and SQLite store), both forwarding to that upstream: one with the care plugins
//! (context care, stream watch) on, one with them off. Except in the continuing rows,
//! every gateway request is a new two-message conversation (a unique user message), so
//! each one finds no session and starts one, as a new client conversation does.
//!
//! - `direct_first_byte`: a streaming `POST /v1/chat/completions` straight to the fake
//!   upstream, timed up to the first body bytes (the rest is drained untimed).
//! - `gateway_first_byte` / `gateway_first_byte_care_off`: the same through the
//!   gateway. Target: the added latency, the difference of the medians, ≤ 1 ms.
//! - `direct_continuing_first_byte`, `gateway_continuing_first_byte`,
//!   `gateway_continuing_first_byte_care_off`: the same for one conversation continued
//!   turn after turn (the whole transcript plus a new user message, a new conversation
//!   after 10 turns), each turn sent as soon as the last answer ended, as an agent's
//!   next step is: the latency a client meets in a session it keeps using.
//! - `direct_paced_c20`, `gateway_paced_c20`, `gateway_paced_c20_care_off`: a burst of
//!   20 requests sent in the same instant, each read to its end (`[DONE]`), the fake
//!   answering at a fast model's pace (first token after 20 ms, then 10 tokens 2 ms
//!   apart); the sample ends with the slowest. Target: gateway rate / direct rate, i.e.
//!   the direct median time over the gateway's, ≥ 0.9.
//! - `direct_real_pace_c20`, `gateway_real_pace_c20`, `gateway_real_pace_c20_care_off`:
//!   the same at a hosted model's pace (first token after 300 ms, then 50 tokens at 50
//!   tokens/s), the rate a client of a real upstream meets.
//! - `direct_continuing_c20`, `gateway_continuing_c20`,
//!   `gateway_continuing_c20_care_off`: at the fast pace, 20 clients at once each
//!   send the next turn of their own conversation (the whole transcript with the
//!   answers as they streamed, plus a new user message), starting afresh after 10
//!   turns: the gateway finds the session, diffs the transcript and continues it.
//! - `direct_sustained_c20`, `gateway_sustained_c20`, `gateway_sustained_c20_care_off`
//!   and `direct_sustained_continuing_c20`, `gateway_sustained_continuing_c20`,
//!   `gateway_sustained_continuing_c20_care_off`: concurrency 20 sustained, at the fast
//!   pace. 20 clients run for the whole row in a closed loop (as `wrk -c 20` or
//!   `hey -c 20` drive a server): each sends its next request (a new conversation, or
//!   the next turn of its own) as soon as its last answer ended, so 20 are always in
//!   flight and their starts spread as the answers end. A sample is the time to finish
//!   40 more requests. Same target as the burst rows.
//! - `direct_throughput_c20`, `gateway_throughput_c20`,
//!   `gateway_throughput_c20_care_off`: the same with the fake answering at once, so
//!   the rate is bounded by the gateway's own cost per request (durable session,
//!   turn, client view) against a fake that does nearly nothing: reported, not a
//!   target any durable gateway can reach.
//!
//! Client, fake upstream and gateways run in this one process on the machine's cores:
//! in the c=20 rows the gateway's CPU competes with theirs, so a gateway ratio rises
//! with the cores the run has (the report prints how many).
//!
//! The temp homes follow `TMPDIR`: on a disk every durable commit waits for an fsync;
//! `TMPDIR=/dev/shm` leaves only the CPU cost, which tells the two apart.
//!
//! After divan's table the bench prints its own medians of the same samples and the
//! ratios (`= N.NNx direct`).
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

/// The allocator the `ccare` binary uses, so the figures are the product's.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

mod common;

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use ccare_fake_openai::{FakeServer, Reply, Script};
use common::{Gateway, gateway};
use divan::Bencher;
use divan::counter::ItemsCount;
use parking_lot::Mutex;
use serde_json::{Value, json};

/// Requests in flight at once in the throughput rows.
const CONCURRENCY: usize = 20;

/// The words in a request that make the fake answer at a model's pace.
const FAST_WORD: &str = "paced-fast";
const REAL_WORD: &str = "paced-real";

/// A fast model: first token after 20 ms, then 10 tokens 2 ms apart (500 tokens/s).
const FAST: Pacing = Pacing {
    first_token: Duration::from_millis(20),
    tokens: 10,
    gap: Duration::from_millis(2),
};
/// A hosted model as clients meet it: first token after 300 ms, then 50 tokens at
/// 50 tokens/s.
const REAL: Pacing = Pacing {
    first_token: Duration::from_millis(300),
    tokens: 50,
    gap: Duration::from_millis(20),
};

/// How a paced answer streams.
struct Pacing {
    first_token: Duration,
    tokens: usize,
    gap: Duration,
}

/// An answer streamed at `pacing`'s pace.
fn paced(pacing: &Pacing) -> Reply {
    let mut script = Script::new().delay(pacing.first_token);
    for n in 0..pacing.tokens {
        if n > 0 {
            script = script.delay(pacing.gap);
        }
        script = script.text("word ");
    }
    Reply::Chunks(script.finish("stop").usage(ccare_fake_openai::openai_usage(
        10,
        0,
        pacing.tokens as u64,
        0,
    )))
}

const CARE_OFF: &str =
    "[plugins.context-care]\nenabled = false\n[plugins.stream-watch]\nenabled = false\n";

fn main() {
    divan::main();
    report();
    if let Some(setup) = SETUP.get() {
        for server in [&setup.care_on, &setup.care_off] {
            let _ = std::fs::remove_dir_all(&server.dir);
        }
    }
}

/// The client's runtime: the requests and their bodies are read here.
fn runtime() -> &'static tokio::runtime::Runtime {
    static RUNTIME: OnceLock<tokio::runtime::Runtime> = OnceLock::new();
    RUNTIME.get_or_init(|| new_runtime("bench-client"))
}

/// The fake upstream's runtime and the gateways' runtime: each side of the wire gets
/// its own threads, as separate processes would, so a busy server does not delay the
/// client reading its answers (or the upstream writing them).
fn upstream_runtime() -> &'static tokio::runtime::Runtime {
    static RUNTIME: OnceLock<tokio::runtime::Runtime> = OnceLock::new();
    RUNTIME.get_or_init(|| new_runtime("bench-upstream"))
}

fn server_runtime() -> &'static tokio::runtime::Runtime {
    static RUNTIME: OnceLock<tokio::runtime::Runtime> = OnceLock::new();
    RUNTIME.get_or_init(|| new_runtime("bench-gateway"))
}

/// A two-worker runtime whose threads are named `name` (profiles tell the sides apart).
fn new_runtime(name: &str) -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .thread_name(name)
        .enable_all()
        .build()
        .unwrap()
}

/// The upstream, the two gateways and one pooled client for all of them.
struct Setup {
    fake: FakeServer,
    care_on: Gateway,
    care_off: Gateway,
    client: reqwest::Client,
}

static SETUP: OnceLock<Setup> = OnceLock::new();

fn setup() -> &'static Setup {
    SETUP.get_or_init(|| {
        let _ = rustls::crypto::ring::default_provider().install_default();
        let fake = upstream_runtime().block_on(async {
            let fake = FakeServer::start().await.unwrap();
            // The fake stands for a remote server: what it would keep of each request
            // must not grow the measured process's memory.
            fake.keep_requests(false);
            fake.respond_with(|request| {
                if request.raw_body.contains(FAST_WORD) {
                    paced(&FAST)
                } else if request.raw_body.contains(REAL_WORD) {
                    paced(&REAL)
                } else {
                    Reply::text("hello big world")
                }
            });
            fake
        });
        let (care_on, care_off) = server_runtime().block_on(async {
            (
                gateway(&fake.base_url(), "").await,
                gateway(&fake.base_url(), CARE_OFF).await,
            )
        });
        Setup {
            fake,
            care_on,
            care_off,
            client: reqwest::Client::new(),
        }
    })
}

/// The env the servers boot with: only the fake's key.
/// Where a request goes.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Target {
    Direct,
    CareOn,
    CareOff,
}

/// How the fake answers a request.
#[derive(Clone, Copy)]
enum Pace {
    /// At once: the rows measure the gateway's own cost.
    Instant,
    /// As a fast model would ([`FAST`]).
    Fast,
    /// As a hosted model does ([`REAL`]).
    Real,
}

/// The system message every conversation opens with.
fn system_message() -> Value {
    json!({"role": "system", "content": "You are a helpful assistant."})
}

/// A user message no earlier request sent, with the word that sets the fake's pace.
fn user_message(pace: Pace) -> Value {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let n = NEXT.fetch_add(1, Ordering::Relaxed);
    let word = match pace {
        Pace::Instant => "what",
        Pace::Fast => FAST_WORD,
        Pace::Real => REAL_WORD,
    };
    json!({"role": "user", "content": format!("question {n}: {word} is the capital of Norway?")})
}

/// A new two-message conversation to `target`.
fn request(setup: &Setup, target: Target, pace: Pace) -> reqwest::RequestBuilder {
    request_with(setup, target, &[system_message(), user_message(pace)])
}

/// A streaming request carrying `messages` to `target`.
fn request_with(setup: &Setup, target: Target, messages: &[Value]) -> reqwest::RequestBuilder {
    let body = json!({
        "model": "fake/model",
        "stream": true,
        "messages": messages,
    });
    let builder = match target {
        Target::Direct => setup
            .client
            .post(format!("{}/chat/completions", setup.fake.base_url())),
        Target::CareOn => setup
            .client
            .post(&setup.care_on.url)
            .bearer_auth(&setup.care_on.token),
        Target::CareOff => setup
            .client
            .post(&setup.care_off.url)
            .bearer_auth(&setup.care_off.token),
    };
    builder.json(&body)
}

/// A response whose first bytes were read; the rest is drained when it is dropped,
/// which divan does outside the timed section.
struct Started(Option<reqwest::Response>);

impl Drop for Started {
    fn drop(&mut self) {
        if let Some(mut response) = self.0.take() {
            runtime().block_on(async { while let Ok(Some(_)) = response.chunk().await {} });
        }
    }
}

/// The samples of each row, in seconds, for the report after divan's table.
fn samples() -> &'static Mutex<BTreeMap<&'static str, Vec<f64>>> {
    static SAMPLES: OnceLock<Mutex<BTreeMap<&'static str, Vec<f64>>>> = OnceLock::new();
    SAMPLES.get_or_init(|| Mutex::new(BTreeMap::new()))
}

/// A point in one request of a throughput row.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Phase {
    /// Its first body bytes arrived.
    FirstByte,
    /// Its body ended.
    Done,
}

/// Per-request times of the throughput rows, in seconds, by row and phase.
type RequestSamples = Mutex<BTreeMap<(&'static str, Phase), Vec<f64>>>;

/// Per-request times of the throughput rows.
fn request_samples() -> &'static RequestSamples {
    static SAMPLES: OnceLock<RequestSamples> = OnceLock::new();
    SAMPLES.get_or_init(|| Mutex::new(BTreeMap::new()))
}

fn record_request(row: &'static str, phase: Phase, elapsed: Duration) {
    request_samples()
        .lock()
        .entry((row, phase))
        .or_default()
        .push(elapsed.as_secs_f64());
}

/// The median of `row`'s requests at `phase`.
fn request_median(row: &'static str, phase: Phase) -> Option<f64> {
    median_of(request_samples().lock().get(&(row, phase))?)
}

/// The median of `values`; `None` when there are none.
fn median_of(values: &[f64]) -> Option<f64> {
    let mut values = values.to_vec();
    values.sort_by(f64::total_cmp);
    values.get(values.len() / 2).copied()
}

fn record(row: &'static str, elapsed: Duration) {
    samples()
        .lock()
        .entry(row)
        .or_default()
        .push(elapsed.as_secs_f64());
}

fn first_byte(bencher: Bencher, row: &'static str, target: Target) {
    let setup = setup();
    bencher.bench_local(|| {
        let started = Instant::now();
        let response = runtime().block_on(async {
            let mut response = request(setup, target, Pace::Instant).send().await.unwrap();
            assert_eq!(response.status().as_u16(), 200);
            let first = response.chunk().await.unwrap();
            assert!(first.is_some_and(|bytes| !bytes.is_empty()));
            response
        });
        record(row, started.elapsed());
        Started(Some(response))
    });
}

/// Reads `response` (sent at `sent`) to its end, recording its first byte and its end
/// for `row`; the body must end with `[DONE]`.
async fn read_answer(row: &'static str, sent: Instant, mut response: reqwest::Response) -> String {
    let mut body = Vec::new();
    while let Some(bytes) = response.chunk().await.unwrap() {
        if body.is_empty() {
            record_request(row, Phase::FirstByte, sent.elapsed());
        }
        body.extend_from_slice(&bytes);
    }
    record_request(row, Phase::Done, sent.elapsed());
    let body = String::from_utf8(body).unwrap();
    assert!(body.ends_with("data: [DONE]\n\n"), "{body}");
    body
}

/// Sends a new two-message conversation to `target` at `pace` and reads the answer to
/// its end, timed for `row`.
async fn ask_new(setup: &Setup, row: &'static str, target: Target, pace: Pace) {
    let sent = Instant::now();
    let response = request(setup, target, pace).send().await.unwrap();
    assert_eq!(response.status().as_u16(), 200);
    read_answer(row, sent, response).await;
}

fn throughput(bencher: Bencher, row: &'static str, target: Target, pace: Pace) {
    let setup = setup();
    bencher
        .counter(ItemsCount::new(CONCURRENCY))
        .bench_local(|| {
            let started = Instant::now();
            runtime().block_on(async {
                let streams = (0..CONCURRENCY).map(|_| ask_new(setup, row, target, pace));
                futures_util::future::join_all(streams).await;
            });
            record(row, started.elapsed());
        });
}

/// Turns a continuing conversation takes before its client starts a new one.
const TURNS_PER_CONVERSATION: usize = 10;

/// One client's conversation in the continuing rows: what it sends next time, and the
/// session the gateway said it belongs to.
struct Conversation {
    messages: Vec<Value>,
    turns: usize,
    session: Option<String>,
    /// The pace its requests ask the fake for.
    pace: Pace,
}

impl Conversation {
    fn new(pace: Pace) -> Self {
        Self {
            messages: vec![system_message(), user_message(pace)],
            turns: 0,
            session: None,
            pace,
        }
    }

    /// After the streamed answer `body`: the transcript with that answer and a new
    /// user message, or a new conversation after [`TURNS_PER_CONVERSATION`] turns.
    fn next_turn(&mut self, body: &str) {
        self.turns += 1;
        if self.turns == TURNS_PER_CONVERSATION {
            *self = Conversation::new(self.pace);
        } else {
            let answer = streamed_text(body);
            self.messages
                .push(json!({"role": "assistant", "content": answer}));
            self.messages.push(user_message(self.pace));
        }
    }
}

/// The assistant text of a streamed chat completion: its `delta.content` pieces joined.
fn streamed_text(body: &str) -> String {
    body.lines()
        .filter_map(|line| line.strip_prefix("data: "))
        .filter(|data| *data != "[DONE]")
        .filter_map(|data| serde_json::from_str::<Value>(data).ok())
        .filter_map(|chunk| {
            chunk["choices"][0]["delta"]["content"]
                .as_str()
                .map(str::to_owned)
        })
        .collect()
}

/// The continuing rows' conversations, one set per row.
fn conversations() -> &'static Mutex<BTreeMap<&'static str, Vec<Conversation>>> {
    static CONVERSATIONS: OnceLock<Mutex<BTreeMap<&'static str, Vec<Conversation>>>> =
        OnceLock::new();
    CONVERSATIONS.get_or_init(|| Mutex::new(BTreeMap::new()))
}

/// Sends `conversation`'s next turn to `target` (the whole transcript, its answers as
/// they streamed, and a new user message), reads the answer to its end (timed for
/// `row`) and moves the conversation on. Through the gateway every turn must continue
/// its conversation's session.
async fn take_turn(
    setup: &Setup,
    row: &'static str,
    target: Target,
    conversation: &mut Conversation,
) {
    let sent = Instant::now();
    let response = request_with(setup, target, &conversation.messages)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status().as_u16(), 200);
    let session = response
        .headers()
        .get("x-ccare-session")
        .and_then(|value| value.to_str().ok())
        .map(str::to_owned);
    let body = read_answer(row, sent, response).await;
    if target != Target::Direct {
        assert!(session.is_some(), "no x-ccare-session");
        if conversation.session.is_some() {
            assert_eq!(session, conversation.session, "the conversation forked");
        }
        conversation.session = session;
    }
    conversation.next_turn(&body);
}

/// `CONCURRENCY` clients at once, each sending the next turn of its own conversation
/// at a fast model's pace ([`take_turn`]); after [`TURNS_PER_CONVERSATION`] turns a
/// client starts afresh.
fn continuing(bencher: Bencher, row: &'static str, target: Target) {
    let setup = setup();
    bencher
        .counter(ItemsCount::new(CONCURRENCY))
        .bench_local(|| {
            let mut current =
                std::mem::take(conversations().lock().entry(row).or_insert_with(|| {
                    (0..CONCURRENCY)
                        .map(|_| Conversation::new(Pace::Fast))
                        .collect()
                }));
            let started = Instant::now();
            runtime().block_on(async {
                let turns = current
                    .iter_mut()
                    .map(|conversation| take_turn(setup, row, target, conversation));
                futures_util::future::join_all(turns).await;
            });
            record(row, started.elapsed());
            conversations().lock().insert(row, current);
        });
}

/// The requests one sample of a sustained row counts.
const SUSTAINED_SAMPLE: usize = 2 * CONCURRENCY;

/// What the clients of a sustained row send.
#[derive(Clone, Copy)]
enum Workload {
    /// A new two-message conversation per request.
    New,
    /// The next turn of the client's own conversation ([`take_turn`]).
    Continuing,
}

/// How many requests a sustained row's clients have finished, and a wake-up for the
/// sample waiting on that count.
#[derive(Default)]
struct Finished {
    count: AtomicU64,
    changed: tokio::sync::Notify,
}

/// `CONCURRENCY` clients for the whole row, each sending its next request as soon as
/// its last answer ended (a closed loop, as `wrk -c 20` or `hey -c 20` drive a
/// server), at a fast model's pace: 20 requests always in flight, their starts spread
/// as the answers end. A sample is the time the clients take to finish
/// [`SUSTAINED_SAMPLE`] more requests.
fn sustained(bencher: Bencher, row: &'static str, target: Target, workload: Workload) {
    let setup = setup();
    let finished = Arc::new(Finished::default());
    let stop = Arc::new(AtomicBool::new(false));
    let clients: Vec<_> = (0..CONCURRENCY)
        .map(|_| {
            let (finished, stop) = (Arc::clone(&finished), Arc::clone(&stop));
            runtime().spawn(async move {
                let mut conversation = Conversation::new(Pace::Fast);
                while !stop.load(Ordering::Relaxed) {
                    match workload {
                        Workload::New => ask_new(setup, row, target, Pace::Fast).await,
                        Workload::Continuing => {
                            take_turn(setup, row, target, &mut conversation).await;
                        }
                    }
                    finished.count.fetch_add(1, Ordering::SeqCst);
                    finished.changed.notify_waiters();
                }
            })
        })
        .collect();
    bencher
        .counter(ItemsCount::new(SUSTAINED_SAMPLE))
        .bench_local(|| {
            let wanted = finished.count.load(Ordering::SeqCst) + SUSTAINED_SAMPLE as u64;
            let started = Instant::now();
            runtime().block_on(async {
                loop {
                    // Registered before the count is read, so no wake-up is missed.
                    let changed = finished.changed.notified();
                    if finished.count.load(Ordering::SeqCst) >= wanted {
                        break;
                    }
                    // A client whose request failed has stopped (its panic is printed):
                    // end the row instead of waiting for requests that never come.
                    assert!(
                        !clients.iter().any(tokio::task::JoinHandle::is_finished),
                        "{row}: a client stopped before the row ended"
                    );
                    let _ = tokio::time::timeout(Duration::from_millis(100), changed).await;
                }
            });
            record(row, started.elapsed());
        });
    stop.store(true, Ordering::Relaxed);
    for client in runtime().block_on(futures_util::future::join_all(clients)) {
        client.unwrap();
    }
}

/// One conversation at a time, turn after turn (starting afresh after
/// [`TURNS_PER_CONVERSATION`] turns), each request timed up to its first body bytes; the
/// rest of the answer is read (untimed, when the returned turn is dropped) before the
/// next turn is sent, as a client that continues its conversation at once does (an
/// agent's next step).
fn continuing_first_byte(bencher: Bencher, row: &'static str, target: Target) {
    let setup = setup();
    bencher.bench_local(|| {
        let messages = conversations()
            .lock()
            .entry(row)
            .or_insert_with(|| vec![Conversation::new(Pace::Instant)])[0]
            .messages
            .clone();
        let started = Instant::now();
        let (response, first) = runtime().block_on(async {
            let mut response = request_with(setup, target, &messages).send().await.unwrap();
            assert_eq!(response.status().as_u16(), 200);
            let first = response.chunk().await.unwrap().unwrap_or_default();
            assert!(!first.is_empty());
            (response, first)
        });
        record(row, started.elapsed());
        StartedTurn {
            row,
            body: first.to_vec(),
            response: Some(response),
        }
    });
}

/// A continuing row's turn whose first bytes were read: dropping it reads the rest
/// and moves its conversation to the next turn.
struct StartedTurn {
    row: &'static str,
    body: Vec<u8>,
    response: Option<reqwest::Response>,
}

impl Drop for StartedTurn {
    fn drop(&mut self) {
        let Some(mut response) = self.response.take() else {
            return;
        };
        let mut body = std::mem::take(&mut self.body);
        runtime().block_on(async {
            while let Some(bytes) = response.chunk().await.unwrap() {
                body.extend_from_slice(&bytes);
            }
        });
        let body = String::from_utf8(body).unwrap();
        assert!(body.ends_with("data: [DONE]\n\n"), "{body}");
        if let Some(conversation) = conversations()
            .lock()
            .get_mut(self.row)
            .and_then(|conversations| conversations.first_mut())
        {
            conversation.next_turn(&body);
        }
    }
}

#[divan::bench(sample_count = 300, sample_size = 1)]
fn direct_first_byte(bencher: Bencher) {
    first_byte(bencher, "direct_first_byte", Target::Direct);
}

#[divan::bench(sample_count = 300, sample_size = 1)]
fn gateway_first_byte(bencher: Bencher) {
    first_byte(bencher, "gateway_first_byte", Target::CareOn);
}

#[divan::bench(sample_count = 300, sample_size = 1)]
fn gateway_first_byte_care_off(bencher: Bencher) {
    first_byte(bencher, "gateway_first_byte_care_off", Target::CareOff);
}

#[divan::bench(sample_count = 300, sample_size = 1)]
fn direct_continuing_first_byte(bencher: Bencher) {
    continuing_first_byte(bencher, "direct_continuing_first_byte", Target::Direct);
}

#[divan::bench(sample_count = 300, sample_size = 1)]
fn gateway_continuing_first_byte(bencher: Bencher) {
    continuing_first_byte(bencher, "gateway_continuing_first_byte", Target::CareOn);
}

#[divan::bench(sample_count = 300, sample_size = 1)]
fn gateway_continuing_first_byte_care_off(bencher: Bencher) {
    continuing_first_byte(
        bencher,
        "gateway_continuing_first_byte_care_off",
        Target::CareOff,
    );
}

#[divan::bench(sample_count = 40, sample_size = 1)]
fn direct_throughput_c20(bencher: Bencher) {
    throughput(
        bencher,
        "direct_throughput_c20",
        Target::Direct,
        Pace::Instant,
    );
}

#[divan::bench(sample_count = 40, sample_size = 1)]
fn gateway_throughput_c20(bencher: Bencher) {
    throughput(
        bencher,
        "gateway_throughput_c20",
        Target::CareOn,
        Pace::Instant,
    );
}

#[divan::bench(sample_count = 40, sample_size = 1)]
fn gateway_throughput_c20_care_off(bencher: Bencher) {
    throughput(
        bencher,
        "gateway_throughput_c20_care_off",
        Target::CareOff,
        Pace::Instant,
    );
}

#[divan::bench(sample_count = 20, sample_size = 1)]
fn direct_paced_c20(bencher: Bencher) {
    throughput(bencher, "direct_paced_c20", Target::Direct, Pace::Fast);
}

#[divan::bench(sample_count = 20, sample_size = 1)]
fn gateway_paced_c20(bencher: Bencher) {
    throughput(bencher, "gateway_paced_c20", Target::CareOn, Pace::Fast);
}

#[divan::bench(sample_count = 20, sample_size = 1)]
fn gateway_paced_c20_care_off(bencher: Bencher) {
    throughput(
        bencher,
        "gateway_paced_c20_care_off",
        Target::CareOff,
        Pace::Fast,
    );
}

#[divan::bench(sample_count = 8, sample_size = 1)]
fn direct_real_pace_c20(bencher: Bencher) {
    throughput(bencher, "direct_real_pace_c20", Target::Direct, Pace::Real);
}

#[divan::bench(sample_count = 8, sample_size = 1)]
fn gateway_real_pace_c20(bencher: Bencher) {
    throughput(bencher, "gateway_real_pace_c20", Target::CareOn, Pace::Real);
}

#[divan::bench(sample_count = 8, sample_size = 1)]
fn gateway_real_pace_c20_care_off(bencher: Bencher) {
    throughput(
        bencher,
        "gateway_real_pace_c20_care_off",
        Target::CareOff,
        Pace::Real,
    );
}

#[divan::bench(sample_count = 20, sample_size = 1)]
fn direct_continuing_c20(bencher: Bencher) {
    continuing(bencher, "direct_continuing_c20", Target::Direct);
}

#[divan::bench(sample_count = 20, sample_size = 1)]
fn gateway_continuing_c20(bencher: Bencher) {
    continuing(bencher, "gateway_continuing_c20", Target::CareOn);
}

#[divan::bench(sample_count = 20, sample_size = 1)]
fn gateway_continuing_c20_care_off(bencher: Bencher) {
    continuing(bencher, "gateway_continuing_c20_care_off", Target::CareOff);
}

#[divan::bench(sample_count = 30, sample_size = 1)]
fn direct_sustained_c20(bencher: Bencher) {
    sustained(
        bencher,
        "direct_sustained_c20",
        Target::Direct,
        Workload::New,
    );
}

#[divan::bench(sample_count = 30, sample_size = 1)]
fn gateway_sustained_c20(bencher: Bencher) {
    sustained(
        bencher,
        "gateway_sustained_c20",
        Target::CareOn,
        Workload::New,
    );
}

#[divan::bench(sample_count = 30, sample_size = 1)]
fn gateway_sustained_c20_care_off(bencher: Bencher) {
    sustained(
        bencher,
        "gateway_sustained_c20_care_off",
        Target::CareOff,
        Workload::New,
    );
}

#[divan::bench(sample_count = 30, sample_size = 1)]
fn direct_sustained_continuing_c20(bencher: Bencher) {
    sustained(
        bencher,
        "direct_sustained_continuing_c20",
        Target::Direct,
        Workload::Continuing,
    );
}

#[divan::bench(sample_count = 30, sample_size = 1)]
fn gateway_sustained_continuing_c20(bencher: Bencher) {
    sustained(
        bencher,
        "gateway_sustained_continuing_c20",
        Target::CareOn,
        Workload::Continuing,
    );
}

#[divan::bench(sample_count = 30, sample_size = 1)]
fn gateway_sustained_continuing_c20_care_off(bencher: Bencher) {
    sustained(
        bencher,
        "gateway_sustained_continuing_c20_care_off",
        Target::CareOff,
        Workload::Continuing,
    );
}

fn median(row: &str) -> Option<f64> {
    median_of(samples().lock().get(row)?)
}

/// The issue 17 figures from this run's samples.
fn report() {
    // The burst rows are bound by the CPU the client, the fake upstream and the gateway
    // share: a figure means little without the cores it was measured on.
    let cores = std::thread::available_parallelism().map_or(0, std::num::NonZero::get);
    println!("cores available to this run: {cores}");
    for (direct, rows, what) in [
        (
            "direct_first_byte",
            [
                ("gateway_first_byte", "care on"),
                ("gateway_first_byte_care_off", "care off"),
            ],
            "",
        ),
        (
            "direct_continuing_first_byte",
            [
                ("gateway_continuing_first_byte", "care on"),
                ("gateway_continuing_first_byte_care_off", "care off"),
            ],
            ", continuing",
        ),
    ] {
        let direct = median(direct);
        for (row, label) in rows {
            if let (Some(direct), Some(gateway)) = (direct, median(row)) {
                println!(
                    "gateway first byte{what} ({label}): p50 {:.1} µs vs direct {:.1} µs: added {:.1} µs (target <= 1000 µs) = {:.2}x direct",
                    gateway * 1e6,
                    direct * 1e6,
                    (gateway - direct) * 1e6,
                    gateway / direct,
                );
            }
        }
    }
    for (direct, rows, what, per_sample) in [
        (
            "direct_paced_c20",
            [
                ("gateway_paced_c20", "care on"),
                ("gateway_paced_c20_care_off", "care off"),
            ],
            "upstream at a fast model's pace",
            CONCURRENCY,
        ),
        (
            "direct_real_pace_c20",
            [
                ("gateway_real_pace_c20", "care on"),
                ("gateway_real_pace_c20_care_off", "care off"),
            ],
            "upstream at a hosted model's pace",
            CONCURRENCY,
        ),
        (
            "direct_continuing_c20",
            [
                ("gateway_continuing_c20", "care on"),
                ("gateway_continuing_c20_care_off", "care off"),
            ],
            "continuing conversations at a fast model's pace",
            CONCURRENCY,
        ),
        (
            "direct_sustained_c20",
            [
                ("gateway_sustained_c20", "care on"),
                ("gateway_sustained_c20_care_off", "care off"),
            ],
            "sustained (a closed loop), upstream at a fast model's pace",
            SUSTAINED_SAMPLE,
        ),
        (
            "direct_sustained_continuing_c20",
            [
                ("gateway_sustained_continuing_c20", "care on"),
                ("gateway_sustained_continuing_c20_care_off", "care off"),
            ],
            "sustained (a closed loop), continuing conversations at a fast model's pace",
            SUSTAINED_SAMPLE,
        ),
        (
            "direct_throughput_c20",
            [
                ("gateway_throughput_c20", "care on"),
                ("gateway_throughput_c20_care_off", "care off"),
            ],
            "instant upstream",
            CONCURRENCY,
        ),
    ] {
        let direct_row = direct;
        let direct = median(direct);
        for (row, label) in [(direct_row, "direct")].into_iter().chain(rows) {
            if let (Some(first), Some(done)) = (
                request_median(row, Phase::FirstByte),
                request_median(row, Phase::Done),
            ) {
                println!(
                    "  c={CONCURRENCY}, {what} ({label}): per request p50 first byte {:.1} ms, whole answer {:.1} ms",
                    first * 1e3,
                    done * 1e3,
                );
            }
        }
        for (row, label) in rows {
            if let (Some(direct), Some(gateway)) = (direct, median(row)) {
                let rate = |time: f64| per_sample as f64 / time;
                println!(
                    "gateway throughput c={CONCURRENCY}, {what} ({label}): {:.0} req/s vs direct {:.0} req/s = {:.2}x direct (target >= 0.9x)",
                    rate(gateway),
                    rate(direct),
                    direct / gateway,
                );
            }
        }
    }
}
