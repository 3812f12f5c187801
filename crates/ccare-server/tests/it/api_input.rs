//! API-1, API-2 and API-5 and the rule that untrusted input never panics and never
//! corrupts what is stored, as a property: any sequence of sessions-API calls, well-formed
//! or not (creating and forking sessions, prompts, steers and follow-ups with
//! caller-executed tools, tool results right and wrong, cancels, reads, context care's
//! management routes (rule toggles a UI sends, stale ones included, actions, prompts,
//! undo), bodies that are not JSON or not UTF-8, and any two of them sent at once), is
//! answered with a documented status and, when refused,
//! `{error, message}` (never a 5xx, never a dropped connection); every turn comes to rest
//! (idle, or awaiting its caller's tool results); the sessions pass the audit; and a
//! restart keeps every event exported before it, byte for byte.

use std::time::{Duration, Instant};

use proptest::collection::vec;
use proptest::prelude::*;
use serde_json::{Value, json};

use crate::events::{Frame, Sse, event_lines, export_events};
use crate::fuzzed::{CALL_WORD, SLOW_WORD, assert_audited, model, runtime, send};
use crate::rig::Rig;

/// A session id of the right form that no session has.
const UNKNOWN_ID: &str = "01a252f6-0000-7000-8000-000000000000";

/// The statuses the sessions API answers with (API-5; 503 only when the store fails,
/// which it does not here).
const STATUSES: [u16; 8] = [200, 201, 202, 400, 404, 409, 413, 415];

/// How long every turn gets to come to rest at the end of a case.
const SETTLE: Duration = Duration::from_secs(15);

/// Short texts, the empty one, the call word and the slow word among them.
fn text() -> impl Strategy<Value = String> {
    prop_oneof![
        1 => Just(String::new()),
        5 => "[a-z ]{1,12}",
        2 => "\\PC{0,6}",
        3 => Just(CALL_WORD.to_owned()),
        2 => Just(SLOW_WORD.to_owned()),
    ]
}

/// The caller-executed `lookup`, as a message declares it.
fn lookup() -> Value {
    json!({
        "name": "lookup",
        "description": "Looks a word up.",
        "inputSchema": {"type": "object", "properties": {"q": {"type": "string"}}},
    })
}

/// A message's `tools`: none, `lookup`, or declarations no model can be offered.
fn tools() -> impl Strategy<Value = Option<Value>> {
    prop_oneof![
        4 => Just(None),
        6 => Just(Some(json!([lookup()]))),
        1 => Just(Some(json!([lookup(), lookup()]))),
        1 => Just(Some(json!([{"name": "bad name!", "inputSchema": {"type": "object"}}]))),
        1 => Just(Some(json!([{"name": "listy", "inputSchema": {"type": "array"}}]))),
        1 => Just(Some(json!([{"name": "read_file", "inputSchema": {"type": "object"}}]))),
        1 => Just(Some(json!([{"name": "nameless"}]))),
        1 => Just(Some(json!("not a list"))),
    ]
}

/// A message body: text, a mode (or a wrong one), tools; sometimes a wrong field.
fn message_body() -> impl Strategy<Value = Value> {
    let mode = prop_oneof![
        2 => Just(None),
        4 => Just(Some(json!("prompt"))),
        3 => Just(Some(json!("steer"))),
        2 => Just(Some(json!("followup"))),
        1 => Just(Some(json!("inject"))),
        1 => Just(Some(json!(3))),
    ];
    let extra = prop_oneof![
        12 => Just(None),
        1 => Just(Some(("surprise", json!(true)))),
        1 => Just(Some(("text", json!(42)))),
    ];
    let any = (text(), mode, tools(), extra).prop_map(|(text, mode, tools, extra)| {
        let mut body = json!({"text": text});
        if let Some(mode) = mode {
            body["mode"] = mode;
        }
        if let Some(tools) = tools {
            body["tools"] = tools;
        }
        if let Some((field, value)) = extra {
            body[field] = value;
        }
        body
    });
    prop_oneof![
        3 => any,
        // A turn that waits for the caller's `lookup` result.
        1 => Just(json!({"text": CALL_WORD, "tools": [lookup()]})),
    ]
}

/// Which tool results a caller sends.
#[derive(Debug, Clone, Copy)]
enum Answer {
    /// A result for each open call (the right set).
    Open,
    /// The open calls, one of them twice.
    Twice,
    /// A call the session never made.
    Wrong,
    /// None at all.
    Empty,
    /// A body of the wrong shape.
    Junk,
}

/// A raw body for a write route, with its content type.
const RAW_BODIES: &[(&str, &[u8])] = &[
    ("application/json", b"not json"),
    ("application/json", b""),
    ("application/json", b"[]"),
    ("application/json", b"null"),
    ("application/json", b"{\"text\": \"\xff\xfe\"}"),
    ("application/json", br#"{"text": "cut"#),
    ("text/plain", br#"{"text": "hello"}"#),
    ("application/x-www-form-urlencoded", b"text=hello"),
];

/// A write route a raw body goes to (`{id}` is a session's).
const WRITE_ROUTES: &[&str] = &[
    "/api/sessions",
    "/api/sessions/{id}/messages",
    "/api/sessions/{id}/tool-results",
    "/api/sessions/{id}/cancel",
    "/api/sessions/{id}/fork",
];

/// A read of a session (`{id}` is its id).
const READS: &[&str] = &[
    "/api/sessions/{id}",
    "/api/sessions/{id}/export",
    "/api/sessions/{id}/context",
    "/api/sessions/{id}/context/series",
    "/api/sessions?limit=2",
    "/api/sessions?limit=0",
];

/// Which session a step addresses: one made so far (by index), one of the right form
/// that does not exist, or an id no session can have.
#[derive(Debug, Clone, Copy)]
enum Target {
    Made(usize),
    Unknown,
    Invalid,
}

fn target() -> impl Strategy<Value = Target> {
    prop_oneof![
        20 => any::<usize>().prop_map(Target::Made),
        1 => Just(Target::Unknown),
        1 => Just(Target::Invalid),
    ]
}

/// One call of a sequence.
#[derive(Debug, Clone)]
enum Step {
    /// `POST /api/sessions` with this body.
    Create(Value),
    /// `POST …/messages`.
    Message(Target, Value),
    /// `POST …/tool-results`.
    ToolResults(Target, Answer),
    /// `POST …/cancel`, with `keepInbox` or an empty body.
    Cancel(Target, Option<bool>),
    /// `POST …/fork` at a seq (modulo the session's length plus a few), or without one.
    Fork(Target, Option<u64>),
    /// A `GET`.
    Read(Target, &'static str),
    /// A raw body to a write route.
    Raw(Target, &'static str, (&'static str, &'static [u8])),
    /// A pause, so a slow turn moves on.
    Pause(u64),
    /// `PATCH /context-care/rules` of a control the session's snapshot lists (picked
    /// by index), as a UI toggle sends it.
    Rules(Target, Toggle),
    /// A `GET` or `POST` of context care's management routes (`{id}` is the session's).
    Manage(Target, reqwest::Method, &'static str),
    /// Two steps sent at once (two tabs of the web UI, a client's retry racing the
    /// original).
    Together(Box<Step>, Box<Step>),
}

/// What a rules `PATCH` sends about the control it picked.
#[derive(Debug, Clone, Copy)]
enum Toggle {
    /// An action turned on or off.
    Action(usize, bool),
    /// A rule paused or resumed.
    Pause(usize, bool),
    /// The same as [`Toggle::Action`] with the revision before the current one.
    Stale(usize),
    /// A body naming no change.
    Empty,
}

fn step() -> impl Strategy<Value = Step> {
    // Boxed: the strategy is large, and two of them side by side overflow a test
    // thread's stack in a debug build.
    let one = one_step().boxed();
    prop_oneof![
        5 => one.clone(),
        1 => (one.clone(), one)
            .prop_map(|(first, second)| Step::Together(Box::new(first), Box::new(second))),
    ]
}

fn one_step() -> impl Strategy<Value = Step> {
    let create = prop_oneof![
        6 => Just(json!({})),
        1 => Just(json!({"model": "fake/model"})),
        1 => Just(json!({"model": "nope/model"})),
        1 => Just(json!({"profile": "default"})),
        1 => Just(json!({"profile": "elsewhere"})),
        1 => Just(json!({"model": 7})),
    ];
    let answer = prop_oneof![
        4 => Just(Answer::Open),
        1 => Just(Answer::Twice),
        1 => Just(Answer::Wrong),
        1 => Just(Answer::Empty),
        1 => Just(Answer::Junk),
    ];
    prop_oneof![
        2 => create.prop_map(Step::Create),
        12 => (target(), message_body()).prop_map(|(at, body)| Step::Message(at, body)),
        4 => (target(), answer).prop_map(|(at, answer)| Step::ToolResults(at, answer)),
        2 => (target(), proptest::option::of(any::<bool>()))
            .prop_map(|(at, keep)| Step::Cancel(at, keep)),
        2 => (target(), proptest::option::of(0u64..40)).prop_map(|(at, seq)| Step::Fork(at, seq)),
        2 => (target(), proptest::sample::select(READS)).prop_map(|(at, path)| Step::Read(at, path)),
        2 => (
            target(),
            proptest::sample::select(WRITE_ROUTES),
            proptest::sample::select(RAW_BODIES),
        )
            .prop_map(|(at, route, body)| Step::Raw(at, route, body)),
        2 => (0u64..80).prop_map(Step::Pause),
        2 => (target(), toggle()).prop_map(|(at, toggle)| Step::Rules(at, toggle)),
        1 => (target(), proptest::sample::select(MANAGE))
            .prop_map(|(at, (method, path))| Step::Manage(at, method, path)),
    ]
}

fn toggle() -> impl Strategy<Value = Toggle> {
    prop_oneof![
        4 => (any::<usize>(), any::<bool>()).prop_map(|(at, on)| Toggle::Action(at, on)),
        2 => (any::<usize>(), any::<bool>()).prop_map(|(at, on)| Toggle::Pause(at, on)),
        1 => any::<usize>().prop_map(Toggle::Stale),
        1 => Just(Toggle::Empty),
    ]
}

/// Context care's management routes a step calls (`{id}` is a session's).
const MANAGE: &[(reqwest::Method, &str)] = &[
    (
        reqwest::Method::GET,
        "/context-care/actions?sessionId={id}&limit=20",
    ),
    (reqwest::Method::GET, "/context-care/actions?sessionId={id}"),
    (
        reqwest::Method::GET,
        "/context-care/prompts?sessionId={id}&limit=5",
    ),
    (reqwest::Method::GET, "/context-care/rules?sessionId={id}"),
    (
        reqwest::Method::GET,
        "/context-care/actions/op_none?sessionId={id}",
    ),
    (
        reqwest::Method::POST,
        "/context-care/actions/op_none/undo?sessionId={id}",
    ),
];

/// The sessions made so far, and what each call did.
struct Made {
    ids: Vec<String>,
}

impl Made {
    /// The id `target` names.
    fn id(&self, target: Target) -> String {
        match target {
            Target::Made(index) => self.ids[index % self.ids.len()].clone(),
            Target::Unknown => UNKNOWN_ID.to_owned(),
            Target::Invalid => "-not.an.id".to_owned(),
        }
    }
}

/// Checks one response: a documented status; a refusal is `{error, message}`, both
/// non-empty; a success is JSON (or the export's lines). Returns the status and the
/// body.
async fn checked(response: reqwest::Response, sent: &str) -> (u16, Value) {
    let status = response.status().as_u16();
    let exported = response
        .headers()
        .get("content-type")
        .is_some_and(|value| value.as_bytes() == b"application/x-ndjson");
    let text = response
        .text()
        .await
        .unwrap_or_else(|error| panic!("{status}: the body broke off ({error}) for {sent}"));
    assert!(STATUSES.contains(&status), "{status} {text} for {sent}");
    if exported {
        assert_eq!(status, 200, "{text} for {sent}");
        for line in text.lines() {
            let _: Value = serde_json::from_str(line)
                .unwrap_or_else(|error| panic!("{error}: {line} for {sent}"));
        }
        return (status, Value::Null);
    }
    let body: Value = serde_json::from_str(&text)
        .unwrap_or_else(|error| panic!("{status} {text}: {error} for {sent}"));
    if status >= 400 {
        for field in ["error", "message"] {
            assert!(
                body[field].as_str().is_some_and(|value| !value.is_empty()),
                "{status} {text}: no {field} for {sent}"
            );
        }
    }
    (status, body)
}

/// The calls a session awaits results for, as its detail lists them.
async fn open_calls(rig: &Rig, id: &str) -> Vec<String> {
    let response = rig.get(&format!("/api/sessions/{id}")).await;
    if response.status().as_u16() != 200 {
        return Vec::new();
    }
    let detail: Value = response.json().await.unwrap();
    detail["openCalls"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|call| call.as_str().map(str::to_owned))
        .collect()
}

/// The body of `answer` for the calls `open`.
fn results(answer: Answer, open: &[String]) -> Value {
    let result = |id: &str| json!({"callId": id, "text": "found it"});
    match answer {
        Answer::Open => json!({"results": open.iter().map(|id| result(id)).collect::<Vec<_>>()}),
        Answer::Twice => {
            let mut all: Vec<Value> = open.iter().map(|id| result(id)).collect();
            all.extend(open.first().map(|id| result(id)));
            json!({ "results": all })
        }
        Answer::Wrong => json!({"results": [result("call_never_made")]}),
        Answer::Empty => json!({"results": []}),
        Answer::Junk => json!({"results": "found it"}),
    }
}

/// The rules `PATCH` body of `toggle` against `snapshot` (`GET /context-care/rules`):
/// the control is picked by index among those the snapshot lists.
fn patch(snapshot: &Value, toggle: Toggle) -> Value {
    let mut controls = Vec::new();
    for source in snapshot["sources"].as_array().into_iter().flatten() {
        for rule in source["rules"].as_array().into_iter().flatten() {
            for action in rule["actions"].as_array().into_iter().flatten() {
                controls.push((&source["sourceId"], &rule["id"], &action["id"]));
            }
        }
    }
    let revision = snapshot["revision"].as_u64().unwrap_or(0);
    let picked = match toggle {
        Toggle::Action(at, _) | Toggle::Pause(at, _) | Toggle::Stale(at) => {
            (!controls.is_empty()).then(|| controls[at % controls.len()])
        }
        Toggle::Empty => None,
    };
    let Some((source, rule, action)) = picked else {
        return json!({ "revision": revision });
    };
    match toggle {
        Toggle::Action(_, on) => {
            json!({"revision": revision, "sourceId": source, "ruleId": rule, "actionId": action, "enabled": on})
        }
        Toggle::Pause(_, on) => {
            json!({"revision": revision, "sourceId": source, "ruleId": rule, "paused": on})
        }
        Toggle::Stale(_) => {
            json!({"revision": revision.wrapping_sub(1), "sourceId": source, "ruleId": rule, "actionId": action, "enabled": false})
        }
        Toggle::Empty => json!({ "revision": revision }),
    }
}

/// Sends one step (both at once for [`Step::Together`]); returns the sessions it made.
async fn call(rig: &Rig, made: &Made, step: &Step) -> Vec<String> {
    let mut created = Vec::new();
    match step {
        Step::Create(body) => {
            let sent = format!("create {body}");
            let (status, answer) = checked(
                send(
                    rig.authed(reqwest::Method::POST, "/api/sessions")
                        .json(body),
                    &sent,
                )
                .await,
                &sent,
            )
            .await;
            if status == 201 {
                created.push(answer["id"].as_str().unwrap().to_owned());
            }
        }
        Step::Message(target, body) => {
            let id = made.id(*target);
            let sent = format!("message to {id}: {body}");
            let path = format!("/api/sessions/{id}/messages");
            let (status, answer) = checked(rig.post_json(&path, body).await, &sent).await;
            if status == 202 {
                assert_eq!(answer["accepted"], json!(true), "{answer} for {sent}");
            }
        }
        Step::ToolResults(target, answer) => {
            let id = made.id(*target);
            let open = open_calls(rig, &id).await;
            let body = results(*answer, &open);
            let sent = format!("tool results to {id} (open {open:?}): {body}");
            let path = format!("/api/sessions/{id}/tool-results");
            checked(rig.post_json(&path, &body).await, &sent).await;
        }
        Step::Cancel(target, keep) => {
            let id = made.id(*target);
            let body = keep.map_or(json!({}), |keep| json!({"keepInbox": keep}));
            let sent = format!("cancel {id}: {body}");
            let path = format!("/api/sessions/{id}/cancel");
            checked(rig.post_json(&path, &body).await, &sent).await;
        }
        Step::Fork(target, seq) => {
            let id = made.id(*target);
            let body = seq.map_or(json!({}), |seq| json!({"atSeq": seq}));
            let sent = format!("fork {id}: {body}");
            let path = format!("/api/sessions/{id}/fork");
            let (status, answer) = checked(rig.post_json(&path, &body).await, &sent).await;
            if status == 201 {
                created.push(answer["id"].as_str().unwrap().to_owned());
            }
        }
        Step::Read(target, path) => {
            let path = path.replace("{id}", &made.id(*target));
            checked(rig.get(&path).await, &path).await;
        }
        Step::Raw(target, route, (content_type, bytes)) => {
            let path = route.replace("{id}", &made.id(*target));
            let sent = format!("{path} {content_type} {}", String::from_utf8_lossy(bytes));
            let request = rig
                .authed(reqwest::Method::POST, &path)
                .header("content-type", *content_type)
                .body(bytes.to_vec());
            let (status, answer) = checked(send(request, &sent).await, &sent).await;
            if status == 201 {
                created.extend(answer["id"].as_str().map(str::to_owned));
            }
        }
        Step::Pause(ms) => tokio::time::sleep(Duration::from_millis(*ms)).await,
        Step::Rules(target, toggle) => {
            let path = format!("/context-care/rules?sessionId={}", made.id(*target));
            let (status, snapshot) = checked(rig.get(&path).await, &path).await;
            let body = if status == 200 {
                patch(&snapshot, *toggle)
            } else {
                json!({"revision": 0})
            };
            let sent = format!("PATCH {path}: {body}");
            checked(rig.patch_json(&path, &body).await, &sent).await;
        }
        Step::Manage(target, method, path) => {
            let path = path.replace("{id}", &made.id(*target));
            let sent = format!("{method} {path}");
            let request = rig.authed(method.clone(), &path);
            checked(send(request, &sent).await, &sent).await;
        }
        Step::Together(first, second) => {
            let (first, second) = tokio::join!(
                Box::pin(call(rig, made, first)),
                Box::pin(call(rig, made, second))
            );
            created.extend(first.into_iter().chain(second));
        }
    }
    created
}

/// Creates a session, then sends `steps` in order; returns the sessions made.
async fn run(rig: &Rig, steps: &[Step]) -> Vec<String> {
    let mut made = Made {
        ids: vec![crate::events::create_session(rig).await],
    };
    for step in steps {
        let created = call(rig, &made, step).await;
        made.ids.extend(created);
    }
    made.ids
}

/// Waits until no session of `ids` runs a turn (each idle, or awaiting its caller's
/// tool results); panics naming the ones still running after [`SETTLE`].
async fn settled(rig: &Rig, ids: &[String], steps: &[Step]) {
    let deadline = Instant::now() + SETTLE;
    loop {
        let mut running = Vec::new();
        for id in ids {
            let detail: Value = rig.get_json(&format!("/api/sessions/{id}")).await;
            if detail["state"] == "running" {
                running.push(id.clone());
            }
        }
        if running.is_empty() {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "{running:?} still running after {SETTLE:?}, after {steps:?}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// ACT-4: each session's event stream, read from its start, carries exactly the events
/// of its export (`exported`, one line each), in order.
async fn assert_streams_equal_exports(rig: &Rig, ids: &[String], exported: &[String]) {
    for (id, exported) in ids.iter().zip(exported) {
        let count = exported.lines().count();
        let mut sse = Sse::open(rig, &format!("/api/sessions/{id}/events"), None).await;
        let mut frames = Vec::new();
        while frames
            .iter()
            .filter(|frame: &&Frame| frame.is_event())
            .count()
            < count
        {
            frames.push(sse.next().await);
        }
        assert_eq!(&event_lines(&frames), exported, "{id}");
    }
}

/// The event lines of each session's export.
async fn exports(rig: &Rig, ids: &[String]) -> Vec<String> {
    let mut exported = Vec::new();
    for id in ids {
        let response = rig.get(&format!("/api/sessions/{id}/export")).await;
        assert_eq!(response.status().as_u16(), 200, "{id}");
        exported.push(export_events(&response.text().await.unwrap()));
    }
    exported
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, ..ProptestConfig::default() })]

    /// API-5 and ACT-2: every call of any sequence is answered with a documented status
    /// (`{error, message}` when refused, never a 5xx); every turn comes to rest; the
    /// sessions pass the audit and their event streams equal their exports (ACT-4);
    /// after a restart each export starts with the bytes it had before (a shutdown may
    /// end an open turn; nothing is lost or rewritten).
    #[test]
    fn api_5_any_command_sequence_is_answered_and_the_store_stays_whole(
        steps in vec(step(), 1..10)
    ) {
        runtime().block_on(async {
            let rig = Rig::start().await;
            rig.fake.respond_with(model(|n| format!("call_{n}")));
            let ids = run(&rig, &steps).await;
            settled(&rig, &ids, &steps).await;
            assert_audited(&rig, &ids, &steps).await;
            let before = exports(&rig, &ids).await;
            assert_streams_equal_exports(&rig, &ids, &before).await;
            let rig = rig.restart().await;
            let after = exports(&rig, &ids).await;
            for ((id, before), after) in ids.iter().zip(&before).zip(&after) {
                assert!(
                    after.starts_with(before.as_str()),
                    "{id} lost or rewrote events over a restart after {steps:?}:\nbefore:\n{before}\nafter:\n{after}"
                );
            }
            assert_audited(&rig, &ids, &steps).await;
            let mut rig = rig;
            rig.shutdown().await;
        });
    }
}
