//! GW-1 `[gateway] pass_through_keys`: a gateway client may authenticate with its own
//! API key, which is then what the upstream sees for its requests; the sessions it
//! creates are its own (another key or the server token never continues them), the
//! key is never stored, and every route but the gateway's still wants the server
//! token. Over real HTTP against the fake upstream, which records the
//! `Authorization` header of every request.

use ccare_fake_openai::Reply;
use serde_json::{Value, json};

use crate::events::{Sse, export};
use crate::gateway::{sdk_python, session_of};
use crate::rig::{Rig, RigOptions};

const CHAT: &str = "/v1/chat/completions";
const ALICE: &str = "sk-alice-0123456789abcdef";
const BOB: &str = "sk-bob-fedcba9876543210";

async fn pass_through() -> Rig {
    Rig::start_with(RigOptions {
        toml: "[gateway]\npass_through_keys = true\n".to_owned(),
        ..RigOptions::default()
    })
    .await
}

/// A POST of `body` to the gateway with `key` as the bearer, naming `session` in
/// `x-ccare-session` when given.
async fn chat_as(rig: &Rig, key: &str, body: &Value, session: Option<&str>) -> reqwest::Response {
    let mut request = rig.client.post(rig.url(CHAT)).bearer_auth(key).json(body);
    if let Some(session) = session {
        request = request.header("x-ccare-session", session);
    }
    request.send().await.unwrap()
}

fn first(user: &str) -> Value {
    json!({"model": "fake/model", "messages": [
        {"role": "system", "content": "be brief"},
        {"role": "user", "content": user},
    ]})
}

/// `first(user)` answered with `answer`, then `next`.
fn second(user: &str, answer: &str, next: &str) -> Value {
    json!({"model": "fake/model", "messages": [
        {"role": "system", "content": "be brief"},
        {"role": "user", "content": user},
        {"role": "assistant", "content": answer},
        {"role": "user", "content": next},
    ]})
}

/// The `Authorization` header of every upstream request, in order.
fn upstream_keys(rig: &Rig) -> Vec<String> {
    rig.fake
        .requests()
        .iter()
        .map(|request| request.header("authorization").unwrap_or("").to_owned())
        .collect()
}

async fn answer_of(response: reqwest::Response) -> String {
    let status = response.status().as_u16();
    let body: Value = response.json().await.unwrap();
    assert_eq!(status, 200, "{body}");
    body["choices"][0]["message"]["content"]
        .as_str()
        .unwrap()
        .to_owned()
}

/// GW-1: pass-through is off by default: a bearer that is not the server token is
/// refused on the gateway as everywhere, and nothing reaches the upstream.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gw_1_without_pass_through_a_client_key_is_401() {
    let rig = Rig::start().await;
    let response = chat_as(&rig, ALICE, &first("hi"), None).await;
    assert_eq!(response.status().as_u16(), 401);
    assert_eq!(
        response.headers()["www-authenticate"].to_str().unwrap(),
        "Bearer"
    );
    let models = rig
        .client
        .get(rig.url("/v1/models"))
        .bearer_auth(ALICE)
        .send()
        .await
        .unwrap();
    assert_eq!(models.status().as_u16(), 401);
    assert!(rig.fake.requests().is_empty());
}

/// GW-1: two clients with their own keys send the same conversation: two sessions,
/// and the upstream saw each client's key; the server token still gets the
/// configured key (`sk-fake`) and a session of its own. Each client continues its own
/// session from the message chain.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gw_1_each_key_gets_its_own_session_and_is_sent_upstream() {
    let rig = pass_through().await;
    for _ in 0..5 {
        rig.fake.push(Reply::text("Hello"));
    }
    let alice = chat_as(&rig, ALICE, &first("hi"), None).await;
    let alice_session = session_of(&alice);
    assert_eq!(answer_of(alice).await, "Hello");
    let bob = chat_as(&rig, BOB, &first("hi"), None).await;
    let bob_session = session_of(&bob);
    assert_eq!(answer_of(bob).await, "Hello");
    let server = chat_as(&rig, &rig.token, &first("hi"), None).await;
    let server_session = session_of(&server);
    assert_eq!(answer_of(server).await, "Hello");
    assert_ne!(alice_session, bob_session);
    assert_ne!(alice_session, server_session);
    assert_ne!(bob_session, server_session);
    // The same continuation from each key: each continues its own session.
    let bob_next = chat_as(&rig, BOB, &second("hi", "Hello", "more"), None).await;
    assert_eq!(session_of(&bob_next), bob_session);
    assert_eq!(answer_of(bob_next).await, "Hello");
    let alice_next = chat_as(&rig, ALICE, &second("hi", "Hello", "more"), None).await;
    assert_eq!(session_of(&alice_next), alice_session);
    assert_eq!(answer_of(alice_next).await, "Hello");
    assert_eq!(
        upstream_keys(&rig),
        vec![
            format!("Bearer {ALICE}"),
            format!("Bearer {BOB}"),
            "Bearer sk-fake".to_owned(),
            format!("Bearer {BOB}"),
            format!("Bearer {ALICE}"),
        ]
    );
    // The continuation's upstream request holds the session's history (it was
    // continued, not started afresh).
    let last = &rig.fake.requests()[4].body;
    let texts = last["messages"].to_string();
    assert!(texts.contains("more") && texts.contains("Hello"), "{texts}");
    // The models list answers a client key too.
    let models = rig
        .client
        .get(rig.url("/v1/models"))
        .bearer_auth(ALICE)
        .send()
        .await
        .unwrap();
    assert_eq!(models.status().as_u16(), 200);
}

/// GW-1 tenancy: a key cannot continue another key's (or the server's) session — not
/// from the message chain, not from a shared client key (`user`), not by naming it in
/// `x-ccare-session`, which answers exactly as for a session that does not exist.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gw_1_a_key_cannot_continue_another_owners_session() {
    let rig = pass_through().await;
    for _ in 0..6 {
        rig.fake.push(Reply::text("one"));
    }
    let mut keyed = first("hi");
    keyed["user"] = json!("shared-user");
    let alice = chat_as(&rig, ALICE, &keyed, None).await;
    let alice_session = session_of(&alice);
    assert_eq!(answer_of(alice).await, "one");
    // Bob sends Alice's continuation: a new session of his own.
    let bob = chat_as(&rig, BOB, &second("hi", "one", "two"), None).await;
    let bob_session = session_of(&bob);
    assert_eq!(answer_of(bob).await, "one");
    assert_ne!(bob_session, alice_session);
    // The same `user` key as Alice's: still not her session.
    let bob_keyed = chat_as(&rig, BOB, &keyed, None).await;
    let bob_keyed_session = session_of(&bob_keyed);
    assert_eq!(answer_of(bob_keyed).await, "one");
    assert_ne!(bob_keyed_session, alice_session);
    // Naming Alice's session: 404 as for an unknown id, from Bob and the server token.
    let unknown = "0190a0b0-0000-7000-8000-000000000000";
    let missing = chat_as(&rig, BOB, &second("hi", "one", "two"), Some(unknown)).await;
    assert_eq!(missing.status().as_u16(), 404);
    let missing = missing.text().await.unwrap().replace(unknown, "ID");
    for key in [BOB, rig.token.as_str()] {
        let named = chat_as(&rig, key, &second("hi", "one", "two"), Some(&alice_session)).await;
        assert_eq!(named.status().as_u16(), 404);
        assert!(named.headers().get("x-ccare-session").is_none());
        let text = named.text().await.unwrap().replace(&alice_session, "ID");
        assert_eq!(text, missing);
    }
    // Alice herself continues it, by chain and by name.
    let again = chat_as(&rig, ALICE, &second("hi", "one", "two"), None).await;
    assert_eq!(session_of(&again), alice_session);
    assert_eq!(answer_of(again).await, "one");
    let named = chat_as(
        &rig,
        ALICE,
        &json!({"model": "fake/model", "messages": [
            {"role": "system", "content": "be brief"},
            {"role": "user", "content": "hi"},
            {"role": "assistant", "content": "one"},
            {"role": "user", "content": "two"},
            {"role": "assistant", "content": "one"},
            {"role": "user", "content": "three"},
        ]}),
        Some(&alice_session),
    )
    .await;
    assert_eq!(session_of(&named), alice_session);
    assert_eq!(answer_of(named).await, "one");
    // Alice's session got only her turns: 3 user messages, none of Bob's.
    let exported = export(&rig, &alice_session).await;
    assert_eq!(exported.matches(r#""type":"user/message""#).count(), 3);
    // Five upstream calls: Alice, Bob twice, Alice twice (the 404s sent nothing).
    assert_eq!(rig.fake.requests().len(), 5);
}

/// Every regular file under `dir`, read whole.
fn files_under(dir: &std::path::Path, out: &mut Vec<(std::path::PathBuf, Vec<u8>)>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            files_under(&path, out);
        } else if path.is_file() {
            out.push((path.clone(), std::fs::read(&path).unwrap()));
        }
    }
}

fn contains(haystack: &[u8], needle: &str) -> bool {
    haystack
        .windows(needle.len())
        .any(|window| window == needle.as_bytes())
}

/// GW-1: the client's key is memory only: it is in no store file (the SQLite database
/// and its journal), not in the export, the session's detail or its event stream, and
/// not in the error of a turn the upstream refused for that key (which passes through
/// as 401, GW-6), even when the upstream quoted the key.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gw_1_the_client_key_is_never_stored() {
    let mut rig = pass_through().await;
    rig.fake.push(Reply::text("Hello stored world"));
    let alice = chat_as(&rig, ALICE, &first("hi"), None).await;
    let session = session_of(&alice);
    assert_eq!(answer_of(alice).await, "Hello stored world");
    rig.fake.push(Reply::http(
        401,
        format!(
            r#"{{"error":{{"message":"Incorrect API key provided: {ALICE}.","type":"invalid_request_error","code":"invalid_api_key"}}}}"#
        ),
    ));
    let refused = chat_as(
        &rig,
        ALICE,
        &second("hi", "Hello stored world", "again"),
        None,
    )
    .await;
    assert_eq!(refused.status().as_u16(), 401);
    assert_eq!(session_of(&refused), session);
    assert_eq!(
        refused.headers()["x-should-retry"].to_str().unwrap(),
        "false"
    );
    let body = refused.text().await.unwrap();
    assert!(!body.contains(ALICE), "{body}");
    assert!(
        body.contains("Incorrect API key provided: [client key]."),
        "{body}"
    );
    assert_eq!(
        upstream_keys(&rig),
        vec![format!("Bearer {ALICE}"), format!("Bearer {ALICE}")]
    );

    let exported = export(&rig, &session).await;
    assert!(
        exported.contains("Hello stored world"),
        "the export is the log"
    );
    assert!(exported.contains("[client key]"), "the refusal is logged");
    assert!(!exported.contains(ALICE));
    let detail = rig
        .get(&format!("/api/sessions/{session}"))
        .await
        .text()
        .await
        .unwrap();
    assert!(detail.contains(&session), "{detail}");
    assert!(!detail.contains(ALICE), "{detail}");
    let mut events = Sse::open(
        &rig,
        &format!("/api/sessions/{session}/events?from=0"),
        None,
    )
    .await;
    // Both turns, replayed: the answered one and the refused one.
    let mut streamed = String::new();
    let mut ends = 0;
    while ends < 2 {
        let frame = events.next().await;
        ends += usize::from(frame.event == "turn/end");
        streamed.push_str(&frame.data);
    }
    assert!(streamed.contains("[client key]"), "{streamed}");
    assert!(streamed.contains("Hello stored world"), "{streamed}");
    assert!(!streamed.contains(ALICE));
    drop(events);

    rig.shutdown().await;
    let mut files = Vec::new();
    files_under(rig.dir.path(), &mut files);
    let store: Vec<_> = files
        .iter()
        .filter(|(path, bytes)| {
            path.extension().is_none_or(|ext| ext != "toml") && contains(bytes, &session)
        })
        .collect();
    assert!(!store.is_empty(), "the session is in the store files");
    for (path, bytes) in &files {
        assert!(!contains(bytes, ALICE), "the key is in {}", path.display());
    }
}

/// GW-1: pass-through is for the gateway only: with a client key, every other route
/// (the sessions API, management, the UI) still answers 401.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gw_1_other_routes_refuse_a_client_key_with_pass_through_on() {
    let rig = pass_through().await;
    let created = rig.post_json("/api/sessions", &json!({})).await;
    assert_eq!(created.status().as_u16(), 201);
    let created: Value = created.json().await.unwrap();
    let id = created["id"].as_str().unwrap();
    for path in [
        "/api/sessions".to_owned(),
        "/api/openapi.json".to_owned(),
        format!("/api/sessions/{id}"),
        format!("/api/sessions/{id}/export"),
        format!("/api/sessions/{id}/context"),
    ] {
        let response = rig
            .client
            .get(rig.url(&path))
            .bearer_auth(ALICE)
            .send()
            .await
            .unwrap();
        assert_eq!(response.status().as_u16(), 401, "{path}");
    }
    for (path, body) in [
        ("/api/sessions".to_owned(), json!({})),
        (
            format!("/api/sessions/{id}/messages"),
            json!({"text": "hi", "mode": "prompt"}),
        ),
    ] {
        let response = rig
            .client
            .post(rig.url(&path))
            .bearer_auth(ALICE)
            .json(&body)
            .send()
            .await
            .unwrap();
        assert_eq!(response.status().as_u16(), 401, "{path}");
    }
    // The UI with a client key is the login page, as for nobody.
    let page = |key: Option<&str>| {
        let mut request = rig.client.get(rig.url("/"));
        if let Some(key) = key {
            request = request.bearer_auth(key);
        }
        async move { request.send().await.unwrap().text().await.unwrap() }
    };
    let login = page(None).await;
    assert_eq!(page(Some(ALICE)).await, login);
    assert_ne!(page(Some(&rig.token)).await, login);
    // The server token still opens them.
    assert_eq!(rig.get("/api/sessions").await.status().as_u16(), 200);
    assert!(rig.fake.requests().is_empty());
}

/// GW-1 with the official openai Python SDK: each client's `api_key` is what the
/// upstream sees, each gets its own session for the same question, a streamed
/// follow-up continues the client's own session, and an upstream 401 for a bad key
/// reaches the SDK as `AuthenticationError`, sent once (no retry).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gw_1_the_openai_python_sdk_sends_its_own_key_upstream() {
    let Some(python) = tokio::task::spawn_blocking(sdk_python).await.unwrap() else {
        return;
    };
    let rig = pass_through().await;
    rig.fake.push(Reply::text("Hello"));
    rig.fake.push(Reply::text("Hello"));
    rig.fake.push(Reply::text("Then more"));
    rig.fake.push(Reply::http(
        401,
        r#"{"error":{"message":"Incorrect API key provided.","type":"invalid_request_error","code":"invalid_api_key"}}"#,
    ));
    let out = crate::gateway::run_client(
        &rig,
        python,
        "pass_through_keys.py",
        vec![("GW_KEY_A", ALICE.to_owned()), ("GW_KEY_B", BOB.to_owned())],
    )
    .await;
    let a = out["a"]["session"].as_str().unwrap();
    let b = out["b"]["session"].as_str().unwrap();
    assert_ne!(a, b);
    assert_eq!(out["a"]["content"], "Hello");
    assert_eq!(out["b"]["content"], "Hello");
    assert_eq!(out["a_next"], json!({"session": a, "content": "Then more"}));
    assert_eq!(
        out["b_refused"],
        json!({"status": 401, "code": "AUTH_FAILED"})
    );
    assert_eq!(
        upstream_keys(&rig),
        vec![
            format!("Bearer {ALICE}"),
            format!("Bearer {BOB}"),
            format!("Bearer {ALICE}"),
            format!("Bearer {BOB}"),
        ]
    );
}

/// GW-1, GW-5, GW-6: a streamed request whose client key the upstream refuses is
/// answered with the upstream's 401 (nothing had streamed yet, so no 200 stream is
/// opened), `x-should-retry: false`, the key redacted from the message, and the
/// upstream saw exactly that key once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gw_1_a_streamed_request_with_a_refused_key_is_a_401_not_retried() {
    let rig = pass_through().await;
    rig.fake.push(Reply::http(
        401,
        format!(
            r#"{{"error":{{"message":"Incorrect API key provided: {ALICE}.","type":"invalid_request_error","code":"invalid_api_key"}}}}"#
        ),
    ));
    let mut body = first("hi");
    body["stream"] = json!(true);
    let refused = chat_as(&rig, ALICE, &body, None).await;
    assert_eq!(refused.status().as_u16(), 401);
    assert_eq!(
        refused.headers()["x-should-retry"].to_str().unwrap(),
        "false"
    );
    assert!(!session_of(&refused).is_empty());
    let text = refused.text().await.unwrap();
    assert!(!text.contains(ALICE), "{text}");
    assert!(
        text.contains("Incorrect API key provided: [client key]."),
        "{text}"
    );
    assert_eq!(upstream_keys(&rig), vec![format!("Bearer {ALICE}")]);
}
