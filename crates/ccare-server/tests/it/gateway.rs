//! The OpenAI-compatible gateway over real HTTP against the in-process fake upstream
//! (server.md GW-1, GW-2, GW-5, GW-6, GW-7): the model list, answers byte-checked
//! against OpenAI's shapes, sessions found and continued from the message chain, and
//! refusals the SDKs do not retry. Continuations are read back through `export`.

use std::collections::BTreeMap;

use ccare_fake_openai::{Reply, Script, openai_usage};
use serde_json::{Value, json};

use crate::events::export;
use crate::rig::{Rig, RigOptions};

const CHAT: &str = "/v1/chat/completions";

/// A POST of `body` to the gateway with the bearer token.
async fn chat(rig: &Rig, body: &Value) -> reqwest::Response {
    rig.post_json(CHAT, body).await
}

/// Asks `history` with the weather tool and appends the answer's message to it, as a
/// client does before sending its tool results; returns the response's session.
async fn ask_weather(rig: &Rig, history: &mut Value) -> String {
    let response = chat(
        rig,
        &json!({"model": "fake/model", "messages": history, "tools": weather_tool()}),
    )
    .await;
    let session = session_of(&response);
    let answer: Value = response.json().await.unwrap();
    history
        .as_array_mut()
        .unwrap()
        .push(answer["choices"][0]["message"].clone());
    session
}

/// The session a gateway response names in `x-ccare-session` (GW-7).
pub(crate) fn session_of(response: &reqwest::Response) -> String {
    response
        .headers()
        .get("x-ccare-session")
        .unwrap_or_else(|| panic!("no x-ccare-session on {}", response.status()))
        .to_str()
        .unwrap()
        .to_owned()
}

fn now_secs() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs()
}

/// `text` (one JSON object as the gateway wrote it) with its `id` and `created`
/// checked and replaced by `ID` and `0` (they vary per answer); returns the id too.
fn masked(text: &str) -> (String, String) {
    let value: Value = serde_json::from_str(text).unwrap();
    let id = value["id"].as_str().unwrap().to_owned();
    assert!(id.starts_with("chatcmpl-") && id.len() > 9, "{id}");
    let created = value["created"].as_u64().unwrap();
    assert!(created.abs_diff(now_secs()) <= 5, "created {created}");
    let text = text
        .replacen(&format!(r#""id":"{id}""#), r#""id":"ID""#, 1)
        .replacen(&format!(r#""created":{created},"#), r#""created":0,"#, 1);
    (id, text)
}

/// The `data:` payloads of an OpenAI stream, checking there is nothing else (no
/// `event:`/`id:` lines) and every frame ends with a blank line.
pub(crate) fn data_lines(text: &str) -> Vec<String> {
    assert!(text.ends_with("\n\n"), "{text:?}");
    text.split("\n\n")
        .filter(|frame| !frame.is_empty())
        .filter(|frame| !frame.starts_with(':'))
        .map(|frame| {
            frame
                .strip_prefix("data: ")
                .filter(|data| !data.contains('\n'))
                .unwrap_or_else(|| panic!("not one data line: {frame:?}"))
                .to_owned()
        })
        .collect()
}

fn conversation(system: &str, user: &str) -> Value {
    json!([
        {"role": "system", "content": system},
        {"role": "user", "content": user},
    ])
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gw_1_models_lists_the_configured_routes() {
    let rig = Rig::start().await;
    let response = rig.get("/v1/models").await;
    assert_eq!(response.status().as_u16(), 200);
    assert_eq!(
        response.text().await.unwrap(),
        r#"{"object":"list","data":[{"id":"fake/model","object":"model","created":0,"owned_by":"fake"}]}"#
    );
    // The gateway is behind the server's bearer token like every route.
    let anonymous = rig.client.get(rig.url("/v1/models")).send().await.unwrap();
    assert_eq!(anonymous.status().as_u16(), 401);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gw_1_gateway_models_aliases_are_listed_and_route_upstream() {
    let rig = Rig::start_with(RigOptions {
        toml: "[gateway]\nmodels = { \"gpt-4o\" = \"fake/model\" }\n".to_owned(),
        ..RigOptions::default()
    })
    .await;
    let response = rig.get("/v1/models").await;
    assert_eq!(
        response.text().await.unwrap(),
        r#"{"object":"list","data":[{"id":"fake/model","object":"model","created":0,"owned_by":"fake"},{"id":"gpt-4o","object":"model","created":0,"owned_by":"fake"}]}"#
    );
    rig.fake.push(Reply::text("aliased"));
    let response = chat(
        &rig,
        &json!({"model": "gpt-4o", "messages": conversation("s", "hi")}),
    )
    .await;
    assert_eq!(response.status().as_u16(), 200);
    let answer: Value = response.json().await.unwrap();
    assert_eq!(answer["model"], "gpt-4o", "the model is echoed as asked");
    assert_eq!(answer["choices"][0]["message"]["content"], "aliased");
    assert_eq!(rig.fake.requests()[0].body["model"], "model");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gw_1_a_plain_answer_has_openai_shape_and_real_usage() {
    let rig = Rig::start().await;
    rig.fake.push(Reply::text("Hello big world"));
    let response = chat(
        &rig,
        &json!({"model": "fake/model", "messages": conversation("be brief", "hi"), "temperature": 0.2}),
    )
    .await;
    assert_eq!(response.status().as_u16(), 200);
    assert_eq!(
        response.headers()["content-type"].to_str().unwrap(),
        "application/json"
    );
    let session = session_of(&response);
    let (_, text) = masked(&response.text().await.unwrap());
    assert_eq!(
        text,
        r#"{"id":"ID","object":"chat.completion","created":0,"model":"fake/model","choices":[{"index":0,"message":{"role":"assistant","content":"Hello big world"},"finish_reason":"stop"}],"usage":{"prompt_tokens":10,"completion_tokens":3,"total_tokens":13,"prompt_tokens_details":{"cached_tokens":0},"completion_tokens_details":{"reasoning_tokens":0}}}"#
    );
    // The session is a real one: its log has the turn, the client's system prompt and
    // question entered as the user message.
    let exported = export(&rig, &session).await;
    assert_eq!(exported.matches(r#""type":"user/message""#).count(), 1);
    assert_eq!(exported.matches(r#""type":"assistant/message""#).count(), 1);
    let upstream = &rig.fake.requests()[0].body;
    let last = upstream["messages"].as_array().unwrap().last().unwrap();
    assert_eq!(last["role"], "user");
    assert!(last.to_string().contains("be brief"), "{last}");
    assert!(last.to_string().contains("hi"), "{last}");
}

/// A rig over a store whose writes fail on demand, and that store.
async fn failing_rig() -> (Rig, std::sync::Arc<crate::rig::FailingSqlite>) {
    let rig = Rig::start_with(RigOptions {
        failing: true,
        ..RigOptions::default()
    })
    .await;
    let store = rig.failing.clone().expect("the rig serves a failing store");
    (rig, store)
}

/// `response`, failing the test if the gateway has not answered within 10 s (a turn
/// whose end was never logged must not leave the client waiting).
async fn answered(response: impl Future<Output = reqwest::Response>) -> reqwest::Response {
    tokio::time::timeout(std::time::Duration::from_secs(10), response)
        .await
        .expect("the gateway never answered")
}

/// Sends `body` (answered within 10 s); asserts the answer's status and that it names
/// `session`.
async fn chat_in(rig: &Rig, body: &Value, status: u16, session: &str) -> reqwest::Response {
    let response = answered(chat(rig, body)).await;
    assert_eq!(
        (response.status().as_u16(), session_of(&response).as_str()),
        (status, session)
    );
    response
}

/// The text of a non-streamed answer.
async fn content_of(response: reqwest::Response) -> String {
    let answer: Value = response.json().await.unwrap();
    answer["choices"][0]["message"]["content"]
        .as_str()
        .unwrap_or_else(|| panic!("no text in {answer}"))
        .to_owned()
}

/// A turn whose answer cannot be stored (the disk fails as the reply is logged, which
/// fences the session, so no `turn/end` is ever logged) is answered 500 naming the
/// store; the client is not left waiting.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gw_6_an_answer_that_cannot_be_stored_is_500_not_a_hang() {
    let rig = answer_fenced_at("\"assistant/message\"").await;
    assert_eq!(rig.fake.requests().len(), 1);
}

/// The same when only the turn's end cannot be stored (the answer was): the agent saw
/// the turn complete, but no `turn/end` will ever be logged, so the answer is 500
/// named as the session names the fence, like every other fenced answer.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gw_6_an_answer_whose_turn_end_cannot_be_stored_is_500_naming_the_fence() {
    answer_fenced_at("\"turn/end\"").await;
}

/// Asks a new conversation's question ("hi", answered "Hello") while the disk refuses
/// the session's append containing `refused`, and checks the answer: 500
/// `SESSION_FENCED` naming the session and the store's error.
async fn answer_fenced_at(refused: &str) -> Rig {
    let (rig, store) = failing_rig().await;
    store.fail(ccare_store::testing::Fault::appends("disk full").containing(refused));
    rig.fake.push(Reply::text("Hello"));
    let body = json!({"model": "fake/model", "messages": conversation("be brief", "hi")});
    let response = answered(chat(&rig, &body)).await;
    let session = session_of(&response);
    assert_eq!(response.status().as_u16(), 500);
    let error: Value = response.json().await.unwrap();
    assert_eq!(error["error"]["code"], "SESSION_FENCED", "{error}");
    assert_eq!(
        error["error"]["message"],
        format!("session {session} is fenced after a store error: store append failed: disk full"),
    );
    rig
}

/// H-STORE-6 through the gateway: the conversation whose turn a store error fenced is
/// answered again once the store works. The client's retry of the failed request
/// continues the same session, which is reopened from the store (its fenced turn
/// closed by the repair) and answered; nothing the fence lost reaches the upstream, and
/// the retried message is not read twice.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gw_6_a_retry_after_a_fenced_turn_reopens_the_session_once_the_store_works() {
    let (rig, store) = failing_rig().await;
    rig.fake.push(Reply::text("Hello"));
    let mut messages = conversation("be brief", "hi");
    let first = answered(chat(
        &rig,
        &json!({"model": "fake/model", "messages": messages}),
    ))
    .await;
    assert_eq!(first.status().as_u16(), 200);
    let session = session_of(&first);
    messages.as_array_mut().unwrap().extend([
        json!({"role": "assistant", "content": "Hello"}),
        json!({"role": "user", "content": "and then?"}),
    ]);
    let body = json!({"model": "fake/model", "messages": messages});
    store.fail(
        ccare_store::testing::Fault::appends("disk full").containing("\"assistant/message\""),
    );
    rig.fake.push(Reply::text("Lost"));
    chat_in(&rig, &body, 500, &session).await;
    store.heal();
    rig.fake.push(Reply::text("Then this"));
    let retried = chat_in(&rig, &body, 200, &session).await;
    assert_eq!(content_of(retried).await, "Then this");
    let requests = rig.fake.requests();
    assert_eq!(requests.len(), 3);
    // The answer the store refused never reached the log, so not the upstream either,
    // and the message the fenced turn logged is read once (GW-3): the retry sends
    // exactly what the failed request sent.
    let sent = requests[2].body["messages"].to_string();
    assert!(!sent.contains("Lost"), "{sent}");
    assert_eq!(requests[2].body["messages"], requests[1].body["messages"]);
    let last = requests[2].body["messages"]
        .as_array()
        .unwrap()
        .last()
        .unwrap()
        .clone();
    assert_eq!(last, json!({"role": "user", "content": "and then?"}));
    let detail: Value = rig.get_json(&format!("/api/sessions/{session}")).await;
    assert_eq!(detail["fence"], Value::Null, "{detail}");
}

/// A streamed turn whose answer cannot be stored once its text has begun to stream (the
/// disk fails as the reply is logged, which fences the session, so no `turn/end` is ever
/// logged): the 200 stream the client already reads ends with the fence's error frame,
/// then `data: [DONE]`, instead of leaving the client waiting.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gw_6_a_streamed_answer_that_cannot_be_stored_ends_with_the_fence_then_done() {
    let (rig, store) = failing_rig().await;
    store.fail(
        ccare_store::testing::Fault::appends("disk full").containing("\"assistant/message\""),
    );
    rig.fake.push(Reply::text("Hello"));
    let body = json!({"model": "fake/model", "stream": true,
                      "messages": conversation("be brief", "hi")});
    let response = answered(chat(&rig, &body)).await;
    assert_eq!(response.status().as_u16(), 200);
    let session = session_of(&response);
    let text = tokio::time::timeout(std::time::Duration::from_secs(10), response.text())
        .await
        .expect("the stream never ended")
        .unwrap();
    let frames = data_lines(&text);
    let n = frames.len();
    assert_eq!(frames[n - 1], "[DONE]", "{text}");
    assert_eq!(
        frames[n - 2],
        json!({"error": {
            "message": format!("session {session} is fenced after a store error: store append failed: disk full"),
            "type": "api_error",
            "code": "SESSION_FENCED"}})
        .to_string(),
    );
    let streamed: String = frames[..n - 2]
        .iter()
        .map(|frame| {
            let chunk: Value = serde_json::from_str(frame).unwrap();
            assert_eq!(chunk["choices"][0]["finish_reason"], Value::Null, "{frame}");
            chunk["choices"][0]["delta"]["content"]
                .as_str()
                .unwrap_or_default()
                .to_owned()
        })
        .collect();
    assert_eq!(streamed, "Hello", "what streamed before the fence: {text}");
    assert_eq!(rig.fake.requests().len(), 1);
}

/// A new conversation whose session cannot be stored (its creation is queued and
/// commits with the turn's opening, before any hook runs) is answered 500 naming the
/// store, nothing reaches the upstream and no session is listed; once the store works
/// again the same request starts a session and is answered.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gw_6_a_new_conversation_whose_session_cannot_be_stored_is_500_and_nothing_leaves() {
    let (rig, store) = failing_rig().await;
    store.fail(ccare_store::testing::Fault::creates("disk unplugged"));
    let body = json!({"model": "fake/model", "messages": conversation("be brief", "hi")});
    let mut sessions = Vec::new();
    // Streamed or not: nothing streamed yet, so the error status, not a 200 stream.
    for stream in [false, true] {
        let mut request = body.clone();
        request["stream"] = json!(stream);
        let response = answered(chat(&rig, &request)).await;
        let session = session_of(&response);
        assert_eq!(response.status().as_u16(), 500, "stream {stream}");
        let error: Value = response.json().await.unwrap();
        assert_eq!(error["error"]["code"], "SESSION_FENCED", "{error}");
        assert_eq!(
            error["error"]["message"],
            format!(
                "session {session} is fenced after a store error: store create_session failed: disk unplugged"
            ),
        );
        sessions.push(session);
    }
    let session = sessions[0].clone();
    assert_ne!(sessions[0], sessions[1]);
    assert!(rig.fake.requests().is_empty(), "a request left");
    let listed: Value = rig.get_json("/api/sessions").await;
    assert_eq!(listed["sessions"], json!([]), "{listed}");
    store.heal();
    rig.fake.push(Reply::text("Hello"));
    let response = chat(&rig, &body).await;
    assert_eq!(response.status().as_u16(), 200);
    assert_ne!(session_of(&response), session);
    assert_eq!(rig.fake.requests().len(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gw_1_sampling_fields_go_upstream_and_fall_back_when_left_out() {
    // A client's temperature, output limit, reasoning effort and the fields passed as
    // they are (stop, seed, response_format, ...) apply to its request only: the next
    // request without them gets the route's defaults again.
    let rig = Rig::start().await;
    for text in ["one", "two", "three"] {
        rig.fake.push(Reply::text(text));
    }
    let mut messages = conversation("be brief", "hi");
    let mut ask = |extra: Value, answer: Option<&str>, next: &str| {
        if let Some(answer) = answer {
            let list = messages.as_array_mut().unwrap();
            list.push(json!({"role": "assistant", "content": answer}));
            list.push(json!({"role": "user", "content": next}));
        }
        let mut body = json!({"model": "fake/model", "messages": messages.clone()});
        for (key, value) in extra.as_object().unwrap() {
            body[key] = value.clone();
        }
        body
    };
    let first = ask(
        json!({
            "temperature": 0.2, "max_completion_tokens": 300, "max_tokens": 999,
            "reasoning_effort": "low", "n": 1, "stop": ["END"], "seed": 7, "top_p": 0.5,
            "frequency_penalty": 0.25, "presence_penalty": 0.5,
            "response_format": {"type": "json_object"}, "parallel_tool_calls": false,
            "logprobs": false, "functions": null,
        }),
        None,
        "",
    );
    assert_eq!(chat(&rig, &first).await.status().as_u16(), 200);
    let second = ask(json!({}), Some("one"), "and now?");
    assert_eq!(chat(&rig, &second).await.status().as_u16(), 200);
    let third = ask(json!({"max_tokens": 200}), Some("two"), "last");
    let response = chat(&rig, &third).await;
    assert_eq!(response.status().as_u16(), 200);
    let session = session_of(&response);
    let sampling: Vec<Value> = rig
        .fake
        .requests()
        .iter()
        .map(|request| {
            let fields = [
                "temperature",
                "max_tokens",
                "reasoning_effort",
                "n",
                "stop",
                "seed",
                "top_p",
                "frequency_penalty",
                "presence_penalty",
                "response_format",
                "parallel_tool_calls",
            ];
            fields
                .iter()
                .map(|field| request.body.get(field).cloned().unwrap_or(Value::Null))
                .collect()
        })
        .collect();
    assert_eq!(
        sampling,
        [
            json!([0.2, 300, "low", null, ["END"], 7, 0.5, 0.25, 0.5, {"type": "json_object"}, false]),
            json!([
                null, 1000, null, null, null, null, null, null, null, null, null
            ]),
            json!([
                null, 200, null, null, null, null, null, null, null, null, null
            ]),
        ]
    );
    // One conversation throughout.
    let exported = export(&rig, &session).await;
    assert_eq!(exported.matches(r#""type":"turn/end""#).count(), 3);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gw_6_sampling_fields_out_of_range_are_400_not_retried() {
    let rig = Rig::start().await;
    for (extra, message) in [
        (
            json!({"temperature": 2.5}),
            "temperature: 2.5 is outside 0 to 2",
        ),
        (
            json!({"max_completion_tokens": 0}),
            "max_completion_tokens: must be at least 1",
        ),
        (json!({"max_tokens": 0}), "max_tokens: must be at least 1"),
        (
            json!({"reasoning_effort": " "}),
            "reasoning_effort: must not be empty",
        ),
        (
            json!({"n": 2}),
            "n: the gateway answers with one choice; send n = 1 or leave it out",
        ),
        (
            json!({"logprobs": true, "top_logprobs": 2}),
            "logprobs: the gateway does not return log probabilities; leave it out or send false",
        ),
        (
            json!({"functions": [{"name": "lookup", "parameters": {"type": "object"}}]}),
            "functions: the older function-calling fields are not taken; declare the functions in tools (and choose with tool_choice)",
        ),
        (
            json!({"function_call": "auto"}),
            "function_call: the older function-calling fields are not taken; declare the functions in tools (and choose with tool_choice)",
        ),
    ] {
        let mut body = json!({"model": "fake/model", "messages": conversation("s", "hi")});
        for (key, value) in extra.as_object().unwrap() {
            body[key] = value.clone();
        }
        let response = chat(&rig, &body).await;
        assert_eq!(response.status().as_u16(), 400, "{extra}");
        assert_eq!(response.headers()["x-should-retry"], "false");
        let body: Value = response.json().await.unwrap();
        assert_eq!(
            body["error"],
            json!({"message": message, "type": "invalid_request_error", "code": "INVALID_REQUEST"})
        );
    }
    // An output limit the route's window cannot hold beside any input: refused by the
    // budget before anything leaves, and not retried.
    let response = chat(
        &rig,
        &json!({"model": "fake/model", "messages": conversation("s", "hi"), "max_tokens": 20000}),
    )
    .await;
    assert_eq!(response.status().as_u16(), 400);
    assert_eq!(response.headers()["x-should-retry"], "false");
    let body: Value = response.json().await.unwrap();
    assert_eq!(body["error"]["code"], "INVALID_REQUEST", "{body}");
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("capacity 16000, maxTokens 20000"),
        "{body}"
    );
    assert!(rig.fake.requests().is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gw_1_a_transcript_over_the_apis_1_mib_is_taken_up_to_max_request_mib() {
    // A client resends its whole transcript every time; a long session's passes the
    // API's 1 MiB long before the model's window (the gateway compacts upstream, not
    // the client's copy). `[gateway] max_request_mib` bounds it instead.
    let rig = Rig::start_with(RigOptions {
        toml: "[gateway]\nmax_request_mib = 2\n\n[models.\"fake/big\"]\ncontext_window = 1000000\nmax_output_tokens = 1000\n".into(),
        ..RigOptions::default()
    })
    .await;
    rig.fake.push(Reply::text("Read it all."));
    let long = "a line of a long transcript. ".repeat(50_000);
    assert!(long.len() > 1024 * 1024);
    let response = chat(
        &rig,
        &json!({"model": "fake/big", "messages": conversation("s", &long)}),
    )
    .await;
    assert_eq!(response.status().as_u16(), 200);
    let answer: Value = response.json().await.unwrap();
    assert_eq!(answer["choices"][0]["message"]["content"], "Read it all.");
    let upstream = &rig.fake.requests()[0];
    let sent = upstream.body["messages"].to_string();
    assert!(sent.contains(&long), "the whole message went upstream");
    // Past the configured limit: 413, and nothing went upstream.
    let too_long = "x".repeat(2 * 1024 * 1024);
    let response = chat(
        &rig,
        &json!({"model": "fake/big", "messages": conversation("s", &too_long)}),
    )
    .await;
    assert_eq!(response.status().as_u16(), 413);
    // In OpenAI's error shape, like the gateway's own refusals (GW-6).
    assert_eq!(response.headers()["x-should-retry"], "false");
    let body: Value = response.json().await.unwrap();
    assert_eq!(
        body,
        json!({"error": {
            "message": format!("the request body is over {} bytes", 2 * 1024 * 1024),
            "type": "invalid_request_error",
            "code": "request-too-large",
        }})
    );
    assert_eq!(rig.fake.requests().len(), 1);
    // The API keeps its 1 MiB.
    let response = rig
        .post_json("/api/sessions", &json!({"title": "x".repeat(1024 * 1024)}))
        .await;
    assert_eq!(response.status().as_u16(), 413);
}

/// The eight bytes of a PNG signature, base64.
const PNG: &str = "iVBORw0KGgo=";

/// A user message with text, an inline PNG and a web image at low detail.
fn user_with_images(photo: &str) -> Value {
    json!({"role": "user", "content": [
        {"type": "text", "text": "What is in these?"},
        {"type": "image_url", "image_url": {"url": format!("data:image/png;base64,{PNG}")}},
        {"type": "text", "text": " Compare them."},
        {"type": "image_url", "image_url": {"url": photo, "detail": "low"}},
    ]})
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gw_3_image_parts_go_upstream_are_stored_and_the_session_continues() {
    // Vision clients send images as image_url parts, inline or by URL; they reach the
    // upstream in place and in order, are stored as image blocks, and a request that
    // resends them continues the session. Another image in their place forks it.
    let rig = Rig::start().await;
    for text in ["A signature and a cat.", "The cat.", "A dog."] {
        rig.fake.push(Reply::text(text));
    }
    let photo = "https://example.com/pets/cat.JPG?size=small";
    let mut history = json!([{"role": "system", "content": "be brief"}, user_with_images(photo)]);
    let first = chat(&rig, &json!({"model": "fake/model", "messages": history})).await;
    assert_eq!(first.status().as_u16(), 200);
    let session = session_of(&first);
    let upstream = &rig.fake.requests()[0];
    let messages = upstream.body["messages"].as_array().unwrap();
    // The client's message (the context-care note follows it, on this request only).
    let with_images: Vec<&Value> = messages
        .iter()
        .filter(|message| message["content"].is_array())
        .collect();
    assert_eq!(with_images.len(), 1, "{messages:?}");
    assert_eq!(with_images[0]["role"], "user");
    assert_eq!(
        with_images[0]["content"],
        json!([
            {"type": "text", "text": "be brief"},
            {"type": "text", "text": "What is in these?"},
            {"type": "image_url", "image_url": {"url": format!("data:image/png;base64,{PNG}")}},
            {"type": "text", "text": " Compare them."},
            {"type": "image_url", "image_url": {"url": photo, "detail": "low"}},
        ])
    );
    let stored = export(&rig, &session).await;
    assert!(
        stored.contains(&format!(
            r#"{{"type":"image","media_type":"image/png","data":"{PNG}"}}"#
        )),
        "{stored}"
    );
    assert!(
        stored.contains(&format!(
            r#"{{"type":"image","media_type":"image/jpeg","uri":"{photo}","detail":"low"}}"#
        )),
        "{stored}"
    );
    // The client resends the images with the answer and a new question: same session,
    // and the images are still in the first user message upstream.
    let list = history.as_array_mut().unwrap();
    list.push(json!({"role": "assistant", "content": "A signature and a cat."}));
    list.push(json!({"role": "user", "content": "Which is alive?"}));
    let second = chat(&rig, &json!({"model": "fake/model", "messages": history})).await;
    assert_eq!(second.status().as_u16(), 200);
    assert_eq!(session_of(&second), session);
    let upstream = rig.fake.requests()[1].body["messages"].to_string();
    assert_eq!(
        upstream.matches(r#""type":"image_url""#).count(),
        2,
        "{upstream}"
    );
    assert!(upstream.contains("Which is alive?"), "{upstream}");
    // Another photo in the first message is another conversation from there on.
    let other = json!([
        {"role": "system", "content": "be brief"},
        user_with_images("https://example.com/pets/dog.webp"),
        {"role": "assistant", "content": "A signature and a cat."},
        {"role": "user", "content": "Which is alive?"},
    ]);
    let third = chat(&rig, &json!({"model": "fake/model", "messages": other})).await;
    assert_eq!(third.status().as_u16(), 200);
    assert_ne!(session_of(&third), session);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gw_6_an_image_an_upstream_would_refuse_is_400_and_nothing_is_stored() {
    let rig = Rig::start().await;
    let image = |url: &str| json!({"type": "image_url", "image_url": {"url": url}});
    for (content, role, message) in [
        (
            json!([{"type": "text", "text": "see"}, image("data:image/png;base64,not base64!")]),
            "user",
            "messages[1].content[1]: the image data is not valid base64: Invalid symbol 32, offset 3.",
        ),
        (
            json!([image("data:text/plain;base64,aGk=")]),
            "user",
            "messages[1].content[0]: a data URL of type \"text/plain\" is not an image",
        ),
        (
            json!([image("data:image/png,rawbytes")]),
            "user",
            "messages[1].content[0]: an image data URL must be base64: data:image/<type>;base64,<data>",
        ),
        (
            json!([image("ftp://example.com/a.png")]),
            "user",
            "messages[1].content[0]: image_url.url must be a data: URL or an http(s) URL",
        ),
        (
            json!([{"type": "image_url", "image_url": {"url": "https://example.com/a.png", "detail": "ultra"}}]),
            "user",
            "messages[1].content[0]: image_url.detail must be \"auto\", \"low\" or \"high\", found \"ultra\"",
        ),
        (
            json!([{"type": "image_url"}]),
            "user",
            "messages[1].content[0]: an image_url part needs image_url.url",
        ),
        (
            json!([{"type": "text", "text": "hear"}, {"type": "input_audio", "input_audio": {"data": "aGk=", "format": "wav"}}]),
            "user",
            "messages[1].content[1]: a part of type \"input_audio\" is not supported; send text and image_url parts",
        ),
        (
            json!([image("https://example.com/a.png")]),
            "system",
            "messages[1]: a \"system\" message cannot hold images; only user and tool messages can",
        ),
    ] {
        let mut messages = vec![
            json!({"role": "system", "content": "s"}),
            json!({"role": role, "content": content}),
        ];
        if role != "user" {
            messages.push(json!({"role": "user", "content": "hi"}));
        }
        let response = chat(&rig, &json!({"model": "fake/model", "messages": messages})).await;
        assert_eq!(response.status().as_u16(), 400, "{message}");
        assert_eq!(response.headers()["x-should-retry"], "false");
        let body: Value = response.json().await.unwrap();
        assert_eq!(body["error"]["message"], message);
        assert_eq!(body["error"]["code"], "BAD_TRANSCRIPT");
    }
    assert!(rig.fake.requests().is_empty());
    let sessions: Value = rig.get("/api/sessions").await.json().await.unwrap();
    assert_eq!(sessions["sessions"], json!([]), "no session was created");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gw_4_a_tool_result_with_an_image_reaches_the_model() {
    // A client tool that returns a screenshot: OpenAI's wire has no image in a tool
    // message, so the image follows it upstream as a user message.
    let rig = Rig::start().await;
    rig.fake.push(Reply::Chunks(
        Script::new()
            .tool_call(0, Some("call_s"), Some("lookup"), "{\"word\":\"logo\"}")
            .finish("tool_calls"),
    ));
    rig.fake.push(Reply::text("It is round."));
    let mut history = conversation("s", "show me the logo");
    let first = chat(
        &rig,
        &json!({"model": "fake/model", "messages": history, "tools": lookup_tool()}),
    )
    .await;
    let answer: Value = first.json().await.unwrap();
    let list = history.as_array_mut().unwrap();
    list.push(answer["choices"][0]["message"].clone());
    list.push(
        json!({"role": "tool", "tool_call_id": "call_s", "content": [
            {"type": "text", "text": "the logo:"},
            {"type": "image_url", "image_url": {"url": format!("data:image/png;base64,{PNG}")}},
        ]}),
    );
    let second = chat(
        &rig,
        &json!({"model": "fake/model", "messages": history, "tools": lookup_tool()}),
    )
    .await;
    assert_eq!(second.status().as_u16(), 200);
    let messages = rig.fake.requests()[1].body["messages"].clone();
    let messages = messages.as_array().unwrap();
    let at = messages
        .iter()
        .position(|message| message["role"] == "tool")
        .unwrap();
    assert_eq!(
        messages[at],
        json!({"role": "tool", "tool_call_id": "call_s", "content": "the logo:"})
    );
    assert_eq!(
        messages[at + 1],
        json!({"role": "user", "content": [
            {"type": "image_url", "image_url": {"url": format!("data:image/png;base64,{PNG}")}}
        ]})
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gw_2_a_request_extending_the_conversation_continues_its_session() {
    let rig = Rig::start().await;
    rig.fake.push(Reply::text("Hello big world"));
    rig.fake.push(Reply::text("Fine thanks"));
    let first = chat(
        &rig,
        &json!({"model": "fake/model", "messages": conversation("be brief", "hi")}),
    )
    .await;
    assert_eq!(first.status().as_u16(), 200);
    let session = session_of(&first);
    let second = chat(
        &rig,
        &json!({"model": "model", "messages": [
            {"role": "system", "content": "be brief"},
            {"role": "user", "content": [{"type": "text", "text": "hi"}]},
            {"role": "assistant", "content": "Hello big world"},
            {"role": "user", "content": "how are you?"},
        ]}),
    )
    .await;
    assert_eq!(second.status().as_u16(), 200);
    assert_eq!(session_of(&second), session, "the same session continues");
    let answer: Value = second.json().await.unwrap();
    assert_eq!(answer["choices"][0]["message"]["content"], "Fine thanks");
    assert_eq!(answer["model"], "model", "the model is echoed as asked");

    let exported = export(&rig, &session).await;
    assert_eq!(exported.matches(r#""type":"user/message""#).count(), 2);
    assert_eq!(exported.matches(r#""type":"assistant/message""#).count(), 2);
    assert_eq!(exported.matches(r#""type":"turn/end""#).count(), 2);
    // The upstream got the whole history from the session's model view, and only the
    // new question was entered again.
    let requests = rig.fake.requests();
    assert_eq!(requests.len(), 2);
    let messages = requests[1].body["messages"].as_array().unwrap().clone();
    let texts: Vec<String> = messages
        .iter()
        .filter(|message| message["role"] != "system")
        .map(|message| message["content"].to_string())
        .collect();
    assert_eq!(texts.len(), 3, "{messages:?}");
    assert!(texts[0].contains("hi"), "{texts:?}");
    assert!(texts[1].contains("Hello big world"), "{texts:?}");
    assert!(texts[2].contains("how are you?"), "{texts:?}");
    assert_eq!(exported.matches("how are you?").count(), 1, "{exported}");
}

/// A client sends its next message the moment it has an answer, while the session may
/// still be finishing a turn: the message waits for it (up to a second), it is not
/// refused as `SESSION_BUSY`. Here another turn of the session, started through the
/// sessions API, is still streaming slowly when the gateway's next message arrives.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gw_2_a_message_for_a_session_still_finishing_a_turn_waits_for_it() {
    let rig = Rig::start().await;
    rig.fake.push(Reply::text("a"));
    let first = chat(
        &rig,
        &json!({"model": "fake/model", "messages": conversation("s", "hi")}),
    )
    .await;
    assert_eq!(first.status().as_u16(), 200);
    let session = session_of(&first);
    rig.fake.push(Reply::Chunks(
        Script::new()
            .delay(std::time::Duration::from_millis(300))
            .text("slow")
            .finish("stop"),
    ));
    let accepted = rig
        .post_json(
            &format!("/api/sessions/{session}/messages"),
            &json!({"text": "meanwhile"}),
        )
        .await;
    assert_eq!(accepted.status().as_u16(), 202);
    // The API's turn is running (its upstream request is being answered).
    while rig.fake.requests().len() < 2 {
        tokio::time::sleep(std::time::Duration::from_millis(5)).await;
    }
    rig.fake.push(Reply::text("b"));
    let next = chat(
        &rig,
        &json!({"model": "fake/model", "messages": [
            {"role": "system", "content": "s"},
            {"role": "user", "content": "hi"},
            {"role": "assistant", "content": "a"},
            {"role": "user", "content": "Q-next"},
        ]}),
    )
    .await;
    let status = next.status().as_u16();
    assert_eq!(session_of(&next), session);
    let answer: Value = next.json().await.unwrap();
    assert_eq!(status, 200, "{answer}");
    assert_eq!(answer["choices"][0]["message"]["content"], "b");
    // The slow turn ended before the next one started: its answer is in the log
    // before the gateway's next message.
    let exported = export(&rig, &session).await;
    let slow = exported.find(r#""slow""#).unwrap();
    let next_message = exported.find("Q-next").unwrap();
    assert!(slow < next_message, "{exported}");
    assert_eq!(rig.fake.requests().len(), 3);
}

/// Starts a conversation (`be brief`, `hi`) answered "Hello big world"; returns its
/// session.
async fn answered_once(rig: &Rig) -> String {
    rig.fake.push(Reply::text("Hello big world"));
    let first = chat(
        rig,
        &json!({"model": "fake/model", "messages": conversation("be brief", "hi")}),
    )
    .await;
    assert_eq!(first.status().as_u16(), 200);
    let session = session_of(&first);
    first.text().await.unwrap();
    session
}

/// The messages of [`answered_once`]'s conversation asking `question` next.
fn next_turn(question: &str) -> Value {
    let mut history = conversation("be brief", "hi");
    let messages = history.as_array_mut().unwrap();
    messages.push(json!({"role": "assistant", "content": "Hello big world"}));
    messages.push(json!({"role": "user", "content": question}));
    history
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gw_2_the_same_request_twice_at_once_enters_its_message_once() {
    // A client that retries a request still being answered (its own timeout, a
    // proxy's) sends the same transcript twice. The second waits for the first to be
    // answered and is then looked up again: the session has moved past it, so it is a
    // regenerated answer, answered in a fork. The session holds the message once, and
    // no model request carries a conversation the client did not send.
    let rig = Rig::start().await;
    let session = answered_once(&rig).await;
    for answer in ["slow one", "slow two"] {
        rig.fake.push(Reply::Chunks(
            Script::new()
                .delay(std::time::Duration::from_millis(300))
                .text(answer)
                .finish("stop"),
        ));
    }
    let body = json!({"model": "fake/model", "messages": next_turn("Q-again")});
    let (a, b) = tokio::join!(chat(&rig, &body), chat(&rig, &body));
    let (a_session, b_session) = (session_of(&a), session_of(&b));
    let (a_status, b_status) = (a.status().as_u16(), b.status().as_u16());
    let (a_text, b_text) = (a.text().await.unwrap(), b.text().await.unwrap());
    assert_eq!((a_status, b_status), (200, 200), "{a_text}\n{b_text}");
    // One continued the session, the other was answered in a session of its own.
    let mut continued = [&a_session, &b_session];
    continued.sort_by_key(|id| **id != session);
    assert_eq!(continued[0], &session);
    assert_ne!(continued[1], &session);
    let retried: Value = rig
        .get_json(&format!("/api/sessions/{}", continued[1]))
        .await;
    assert_eq!(retried["parent"], session.as_str(), "{retried}");
    let forked = export(&rig, continued[1]).await;
    assert_eq!(forked.matches("Q-again").count(), 1, "{forked}");
    let exported = export(&rig, &session).await;
    assert_eq!(exported.matches("Q-again").count(), 1, "{exported}");
    assert_eq!(exported.matches(r#""type":"user/message""#).count(), 2);
    assert_eq!(exported.matches(r#""type":"assistant/message""#).count(), 2);
    let requests = rig.fake.requests();
    assert_eq!(requests.len(), 3);
    for request in &requests[1..] {
        let sent = request.body["messages"].to_string();
        assert_eq!(sent.matches("Q-again").count(), 1, "{sent}");
        assert!(!sent.contains("slow"), "{sent}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gw_2_a_request_for_a_session_answering_another_past_the_grace_is_409() {
    // The first request is still being answered after the second has waited a second
    // for it: the second is 409 SESSION_BUSY (retryable) and enters nothing.
    let rig = Rig::start().await;
    let session = answered_once(&rig).await;
    rig.fake.push(Reply::Chunks(
        Script::new()
            .delay(std::time::Duration::from_millis(1800))
            .text("slow")
            .finish("stop"),
    ));
    let slow = json!({"model": "fake/model", "messages": next_turn("Q-slow")});
    let other = json!({"model": "fake/model", "messages": next_turn("Q-other")});
    let (a, b) = tokio::join!(chat(&rig, &slow), async {
        while rig.fake.requests().len() < 2 {
            tokio::time::sleep(std::time::Duration::from_millis(5)).await;
        }
        chat(&rig, &other).await
    });
    assert_eq!(a.status().as_u16(), 200);
    assert_eq!(b.status().as_u16(), 409);
    assert_eq!(session_of(&b), session);
    assert!(b.headers().get("x-should-retry").is_none());
    let refused: Value = b.json().await.unwrap();
    assert_eq!(refused["error"]["code"], "SESSION_BUSY", "{refused}");
    assert_eq!(
        a.json::<Value>().await.unwrap()["choices"][0]["message"]["content"],
        "slow"
    );
    let exported = export(&rig, &session).await;
    assert!(!exported.contains("Q-other"), "{exported}");
    assert_eq!(rig.fake.requests().len(), 2);
}

/// A conversation's second request, whose answer streams slowly (20 pieces 50 ms
/// apart), for a client that leaves before it ends.
async fn slow_second_answer(rig: &Rig, question: &str) -> (String, Value) {
    let session = answered_once(rig).await;
    let mut script = Script::new().text("part ");
    for _ in 0..20 {
        script = script
            .delay(std::time::Duration::from_millis(50))
            .text("more ");
    }
    rig.fake.push(Reply::Chunks(script.finish("stop")));
    (session, next_turn(question))
}

/// Waits (up to 5 s) for the session's second turn to end, and returns its log.
async fn second_turn_ended(rig: &Rig, session: &str) -> String {
    for _ in 0..500 {
        let exported = export(rig, session).await;
        if exported.matches(r#""type":"turn/end""#).count() == 2 {
            return exported;
        }
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    panic!("the second turn of {session} did not end");
}

/// What a session's log says of its second turn's end and answer.
fn second_turn(exported: &str) -> (Value, Value) {
    let events: Vec<Value> = exported
        .lines()
        .skip(1)
        .map(|line| serde_json::from_str(line).unwrap())
        .collect();
    let last = |kind: &str| {
        events
            .iter()
            .rev()
            .find(|event| event["type"] == kind)
            .cloned()
            .unwrap()
    };
    (
        last("turn/end")["data"].clone(),
        last("assistant/message")["data"].clone(),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gw_5_a_client_that_leaves_mid_stream_stops_its_turn_and_the_session_is_free() {
    // An agent's stop button closes the stream: the model stops (a user's cancel),
    // the partial answer is kept as interrupted, and the client's next message is
    // answered at once in the same session, not refused as busy.
    let rig = Rig::start().await;
    let (session, history) = slow_second_answer(&rig, "Q-stopped").await;
    let mut streamed = chat(
        &rig,
        &json!({"model": "fake/model", "messages": history, "stream": true}),
    )
    .await;
    assert_eq!(streamed.status().as_u16(), 200);
    // The role chunk, then the first piece of text.
    let mut read = String::new();
    while !read.contains("part") {
        read.push_str(&String::from_utf8_lossy(
            &streamed.chunk().await.unwrap().unwrap(),
        ));
    }
    drop(streamed);
    let exported = second_turn_ended(&rig, &session).await;
    let (end, answer) = second_turn(&exported);
    assert_eq!(
        end["reason"],
        json!({"kind": "aborted", "cause": {"kind": "user"}}),
        "{end}"
    );
    assert_eq!(answer["interrupted"], true, "{answer}");
    let kept = answer["message"]["content"][0]["text"].as_str().unwrap();
    assert!(
        kept.starts_with("part ") && kept.matches("more").count() < 20,
        "{kept}"
    );
    // The client's next message: its transcript without the answer it stopped.
    rig.fake.push(Reply::text("next answer"));
    let started = std::time::Instant::now();
    let next = json!({"model": "fake/model", "messages": next_turn("Q-next")});
    let response = chat(&rig, &next).await;
    assert_eq!(response.status().as_u16(), 200);
    assert_eq!(session_of(&response), session);
    let answer: Value = response.json().await.unwrap();
    assert_eq!(answer["choices"][0]["message"]["content"], "next answer");
    assert!(started.elapsed() < std::time::Duration::from_millis(900));
    // The model sees the question it was stopped on and what it had said.
    let requests = rig.fake.requests();
    let sent = requests.last().unwrap().body["messages"].to_string();
    assert!(
        sent.contains("Q-stopped") && sent.contains(kept.trim_end()),
        "{sent}"
    );
    assert_eq!(sent.matches("Q-next").count(), 1, "{sent}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gw_5_a_client_that_gives_up_on_a_whole_answer_stops_its_turn() {
    // The same for a non-streaming request whose client times out.
    let rig = Rig::start().await;
    let (session, history) = slow_second_answer(&rig, "Q-timed-out").await;
    let gave_up = rig
        .client
        .post(rig.url(CHAT))
        .bearer_auth(&rig.token)
        .timeout(std::time::Duration::from_millis(300))
        .json(&json!({"model": "fake/model", "messages": history}))
        .send()
        .await;
    assert!(gave_up.is_err_and(|error| error.is_timeout()));
    let exported = second_turn_ended(&rig, &session).await;
    let (end, answer) = second_turn(&exported);
    assert_eq!(
        end["reason"],
        json!({"kind": "aborted", "cause": {"kind": "user"}}),
        "{end}"
    );
    assert_eq!(answer["interrupted"], true, "{answer}");
    // The SDK's retry after its timeout asks again after the interrupted answer: the
    // question is entered anew (not resent), so the request ends with it, not with
    // the model's cut-short words.
    rig.fake.push(Reply::text("whole answer"));
    let retried = chat(&rig, &json!({"model": "fake/model", "messages": history})).await;
    assert_eq!(
        (retried.status().as_u16(), session_of(&retried)),
        (200, session)
    );
    let requests = rig.fake.requests();
    let sent = &requests.last().unwrap().body["messages"];
    assert_eq!(sent.to_string().matches("Q-timed-out").count(), 2, "{sent}");
    let last = sent.as_array().unwrap().last().unwrap();
    assert_eq!(
        last,
        &json!({"role": "user", "content": "Q-timed-out"}),
        "{sent}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gw_5_a_client_that_leaves_while_waiting_for_its_session_gets_nothing_started() {
    // The second request waits for the first's answer; its client gives up first.
    // Once the session is free nothing is entered, forked or asked for it.
    let rig = Rig::start().await;
    let session = answered_once(&rig).await;
    rig.fake.push(Reply::Chunks(
        Script::new()
            .delay(std::time::Duration::from_millis(600))
            .text("slow")
            .finish("stop"),
    ));
    let ask = |question: &str| json!({"model": "fake/model", "messages": next_turn(question)});
    let (slow_body, gone_body) = (ask("Q-slow"), ask("Q-gone"));
    let (slow, gave_up) = tokio::join!(chat(&rig, &slow_body), async {
        while rig.fake.requests().len() < 2 {
            tokio::time::sleep(std::time::Duration::from_millis(5)).await;
        }
        rig.client
            .post(rig.url(CHAT))
            .bearer_auth(&rig.token)
            .timeout(std::time::Duration::from_millis(150))
            .json(&gone_body)
            .send()
            .await
    });
    assert_eq!(slow.status().as_u16(), 200);
    assert!(gave_up.is_err_and(|error| error.is_timeout()));
    // Past the first answer and the second's wait for it.
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    let exported = export(&rig, &session).await;
    assert!(!exported.contains("Q-gone"), "{exported}");
    let sessions: Value = rig.get_json("/api/sessions").await;
    assert_eq!(sessions["total"], 1, "{sessions}");
    assert_eq!(rig.fake.requests().len(), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gw_2_a_client_that_strips_its_answers_whitespace_continues_its_session() {
    // Answers come with whitespace around them (a reasoning model's leading blank
    // lines, a closing newline); a client that strips them when it keeps them sends
    // them back without it. Its conversation stays one session.
    let rig = Rig::start().await;
    let mut history = conversation("be brief", "hi");
    let mut sessions = Vec::new();
    for turn in 0..3 {
        rig.fake.push(Reply::Chunks(
            Script::new()
                .text("\n\nHello ")
                .text("big world\n")
                .finish("stop"),
        ));
        let response = chat(&rig, &json!({"model": "fake/model", "messages": history})).await;
        assert_eq!(response.status().as_u16(), 200);
        sessions.push(session_of(&response));
        let answer: Value = response.json().await.unwrap();
        assert_eq!(
            answer["choices"][0]["message"]["content"],
            "\n\nHello big world\n"
        );
        let messages = history.as_array_mut().unwrap();
        messages.push(json!({"role": "assistant", "content": "Hello big world"}));
        messages.push(json!({"role": "user", "content": format!("next {turn}")}));
    }
    assert!(sessions.iter().all(|id| *id == sessions[0]), "{sessions:?}");
    let listed: Value = rig.get_json("/api/sessions").await;
    assert_eq!(listed["total"], 1, "{listed}");
    let exported = export(&rig, &sessions[0]).await;
    assert_eq!(exported.matches(r#""type":"user/message""#).count(), 3);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gw_2_conversations_sharing_a_system_prompt_stay_apart() {
    let rig = Rig::start().await;
    for answer in ["one", "two", "three"] {
        rig.fake.push(Reply::text(answer));
    }
    let mut sessions = Vec::new();
    for user in ["hi", "hello", "hi"] {
        let response = chat(
            &rig,
            &json!({"model": "fake/model", "messages": conversation("you are a helpful assistant", user)}),
        )
        .await;
        assert_eq!(response.status().as_u16(), 200);
        sessions.push(session_of(&response));
    }
    assert_ne!(sessions[0], sessions[1]);
    assert_ne!(
        sessions[0], sessions[2],
        "the same first question is a new conversation"
    );
    assert_ne!(sessions[1], sessions[2]);
    // Each conversation continues only its own session.
    rig.fake.push(Reply::text("four"));
    let response = chat(
        &rig,
        &json!({"model": "fake/model", "messages": [
            {"role": "system", "content": "you are a helpful assistant"},
            {"role": "user", "content": "hello"},
            {"role": "assistant", "content": "two"},
            {"role": "user", "content": "more"},
        ]}),
    )
    .await;
    assert_eq!(session_of(&response), sessions[1]);
}

/// Two new conversations that are the same message for message, answered alike, end
/// on the same chain hash. The second one's client view is recorded without reading
/// the rows first (a new session's are nearly always new): its write of the hash's
/// row meets the first one's, and the row then names the newest, so a continuation
/// goes on in the conversation the client had last.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gw_2_identical_conversations_continue_the_newest() {
    let rig = Rig::start().await;
    rig.fake.push(Reply::text("same answer"));
    rig.fake.push(Reply::text("same answer"));
    let mut sessions = Vec::new();
    for _ in 0..2 {
        let response = chat(
            &rig,
            &json!({"model": "fake/model", "messages": conversation("be brief", "hi")}),
        )
        .await;
        assert_eq!(response.status().as_u16(), 200);
        sessions.push(session_of(&response));
    }
    assert_ne!(sessions[0], sessions[1]);
    rig.fake.push(Reply::text("continued"));
    let response = chat(
        &rig,
        &json!({"model": "fake/model", "messages": [
            {"role": "system", "content": "be brief"},
            {"role": "user", "content": [{"type": "text", "text": "hi"}]},
            {"role": "assistant", "content": "same answer"},
            {"role": "user", "content": "and then?"},
        ]}),
    )
    .await;
    assert_eq!(response.status().as_u16(), 200);
    assert_eq!(
        session_of(&response),
        sessions[1],
        "the newest conversation continues"
    );
    assert!(export(&rig, &sessions[1]).await.contains("and then?"));
    assert!(!export(&rig, &sessions[0]).await.contains("and then?"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gw_2_a_key_two_conversations_share_continues_each_by_its_messages() {
    // `user` (an end user's id) and `prompt_cache_key` (per prompt template, as
    // OpenAI advises) are often shared by several conversations. The key names the
    // last one used; a request that continues another is found by its messages, and
    // the key names that one from then on.
    let rig = Rig::start().await;
    let ask = |thread: &str, turns: usize| {
        let mut messages = vec![
            json!({"role": "system", "content": "s"}),
            json!({"role": "user", "content": format!("{thread}-0")}),
        ];
        for turn in 1..turns {
            messages.push(
                json!({"role": "assistant", "content": format!("{thread}-answer-{}", turn - 1)}),
            );
            messages.push(json!({"role": "user", "content": format!("{thread}-{turn}")}));
        }
        json!({"model": "fake/model", "user": "end-user-7", "messages": messages})
    };
    let mut sessions = BTreeMap::new();
    for (thread, turns) in [("A", 1), ("B", 1), ("A", 2), ("B", 2), ("A", 3)] {
        rig.fake
            .push(Reply::text(&format!("{thread}-answer-{}", turns - 1)));
        let response = chat(&rig, &ask(thread, turns)).await;
        assert_eq!(response.status().as_u16(), 200);
        let session = session_of(&response);
        assert_eq!(
            *sessions.entry(thread).or_insert_with(|| session.clone()),
            session,
            "thread {thread}, turn {turns}"
        );
        response.text().await.unwrap();
    }
    let listed: Value = rig.get_json("/api/sessions").await;
    assert_eq!(listed["total"], 2, "{listed}");
    let a = export(&rig, &sessions["A"]).await;
    assert_eq!(a.matches(r#""type":"user/message""#).count(), 3, "{a}");
    assert!(!a.contains("B-0"), "{a}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gw_2_a_client_key_names_the_session() {
    let rig = Rig::start().await;
    rig.fake.push(Reply::text("a"));
    rig.fake.push(Reply::text("b"));
    let first = chat(
        &rig,
        &json!({"model": "fake/model", "user": "alice", "messages": conversation("s", "hi")}),
    )
    .await;
    let session = session_of(&first);
    // The header names the session too; the messages must still extend what it saw.
    let second = rig
        .authed(reqwest::Method::POST, CHAT)
        .header("x-ccare-session", &session)
        .json(&json!({"model": "fake/model", "messages": [
            {"role": "system", "content": "s"},
            {"role": "user", "content": "hi"},
            {"role": "assistant", "content": "a"},
            {"role": "user", "content": "Q-second"},
        ]}))
        .send()
        .await
        .unwrap();
    assert_eq!(second.status().as_u16(), 200);
    assert_eq!(session_of(&second), session);
    // An edited message under the same key forks the session after the last answer
    // the edit keeps (GW-2); the key names the fork from then on.
    rig.fake.push(Reply::text("c"));
    let edited = chat(
        &rig,
        &json!({"model": "fake/model", "user": "alice", "messages": [
            {"role": "system", "content": "s"},
            {"role": "user", "content": "hi"},
            {"role": "assistant", "content": "a"},
            {"role": "user", "content": "Q-edited"},
        ]}),
    )
    .await;
    assert_eq!(edited.status().as_u16(), 200);
    let fork = session_of(&edited);
    assert_ne!(fork, session);
    let forked = export(&rig, &fork).await;
    assert!(
        forked.contains("Q-edited") && !forked.contains("Q-second"),
        "{forked}"
    );
    assert_eq!(forked.matches(r#""type":"turn/end""#).count(), 2);
    let original = export(&rig, &session).await;
    assert!(original.contains("Q-second") && !original.contains("Q-edited"));
    rig.fake.push(Reply::text("d"));
    let next = chat(
        &rig,
        &json!({"model": "fake/model", "user": "alice", "messages": [
            {"role": "system", "content": "s"},
            {"role": "user", "content": "hi"},
            {"role": "assistant", "content": "a"},
            {"role": "user", "content": "Q-edited"},
            {"role": "assistant", "content": "c"},
            {"role": "user", "content": "go on"},
        ]}),
    )
    .await;
    assert_eq!(next.status().as_u16(), 200);
    assert_eq!(session_of(&next), fork);
    assert_eq!(rig.fake.requests().len(), 4);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gw_2_a_regenerated_answer_forks_without_a_key() {
    let rig = Rig::start().await;
    for answer in ["ANS-1", "ANS-2", "ANS-2-regenerated"] {
        rig.fake.push(Reply::text(answer));
    }
    let first = chat(
        &rig,
        &json!({"model": "fake/model", "messages": conversation("s", "hi")}),
    )
    .await;
    let session = session_of(&first);
    let longer = json!({"model": "fake/model", "messages": [
        {"role": "system", "content": "s"},
        {"role": "user", "content": "hi"},
        {"role": "assistant", "content": "ANS-1"},
        {"role": "user", "content": "Q-more"},
    ]});
    let second = chat(&rig, &longer).await;
    assert_eq!(session_of(&second), session);
    // The same request again (a "regenerate"): a fork after "ANS-1", answered anew.
    let again = chat(&rig, &longer).await;
    assert_eq!(again.status().as_u16(), 200);
    let fork = session_of(&again);
    assert_ne!(fork, session);
    let answer: Value = again.json().await.unwrap();
    assert_eq!(
        answer["choices"][0]["message"]["content"],
        "ANS-2-regenerated"
    );
    let forked = export(&rig, &fork).await;
    assert_eq!(forked.matches("Q-more").count(), 1, "{forked}");
    assert!(
        forked.contains("ANS-1") && !forked.contains(r#""ANS-2""#),
        "{forked}"
    );
    // The fork's upstream request carried the kept history, not the replaced answer.
    let requests = rig.fake.requests();
    let upstream = requests[2].body["messages"].to_string();
    assert!(
        upstream.contains("ANS-1") && !upstream.contains("\"ANS-2\""),
        "{upstream}"
    );
}

/// A client's tool list of one function in OpenAI's shape, taking one string argument
/// `property`.
fn function_tool(name: &str, description: &str, property: &str) -> Value {
    json!([{"type": "function", "function": {
        "name": name,
        "description": description,
        "parameters": {"type": "object", "properties": {property: {"type": "string"}}},
    }}])
}

/// A client's `get_weather` tool.
fn weather_tool() -> Value {
    function_tool("get_weather", "The weather in a city", "city")
}

/// An answer calling `get_weather` for Paris (`call_1`) and Rome (`call_2`), to be
/// finished by the caller.
fn paris_and_rome_calls() -> Script {
    Script::new()
        .tool_call(
            0,
            Some("call_1"),
            Some("get_weather"),
            "{\"city\":\"Paris\"}",
        )
        .tool_call(
            1,
            Some("call_2"),
            Some("get_weather"),
            "{\"city\":\"Rome\"}",
        )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gw_4_client_tool_calls_go_back_to_the_client_and_results_resume_the_turn() {
    let rig = Rig::start().await;
    rig.fake.push(Reply::Chunks(
        paris_and_rome_calls()
            .finish("tool_calls")
            .usage(openai_usage(10, 0, 5, 0)),
    ));
    rig.fake.push(Reply::text("Sunny in both"));
    let mut history = conversation("be brief", "weather in Paris and Rome?");
    let first = chat(
        &rig,
        &json!({"model": "fake/model", "messages": history, "tools": weather_tool()}),
    )
    .await;
    assert_eq!(first.status().as_u16(), 200);
    let session = session_of(&first);
    let (_, text) = masked(&first.text().await.unwrap());
    assert_eq!(
        text,
        r#"{"id":"ID","object":"chat.completion","created":0,"model":"fake/model","choices":[{"index":0,"message":{"role":"assistant","content":null,"tool_calls":[{"id":"call_1","type":"function","function":{"name":"get_weather","arguments":"{\"city\":\"Paris\"}"}},{"id":"call_2","type":"function","function":{"name":"get_weather","arguments":"{\"city\":\"Rome\"}"}}]},"finish_reason":"tool_calls"}],"usage":{"prompt_tokens":10,"completion_tokens":5,"total_tokens":15,"prompt_tokens_details":{"cached_tokens":0},"completion_tokens_details":{"reasoning_tokens":0}}}"#
    );
    // Upstream, the client's tool sits beside the host's own tools.
    let tools = rig.fake.requests()[0].body["tools"].to_string();
    assert!(
        tools.contains("get_weather") && tools.contains("context_status"),
        "{tools}"
    );
    // The client sends the calls back (as the SDKs serialize them) with their results.
    let history_array = history.as_array_mut().unwrap();
    history_array.push(json!({"role": "assistant", "content": null, "tool_calls": [
        {"id": "call_1", "type": "function", "function": {"arguments": "{\"city\": \"Paris\"}", "name": "get_weather"}},
        {"id": "call_2", "type": "function", "function": {"name": "get_weather", "arguments": "{\"city\":\"Rome\"}"}},
    ]}));
    history_array.push(json!({"role": "tool", "tool_call_id": "call_2", "content": "sunny 25C"}));
    history_array.push(json!({"role": "tool", "tool_call_id": "call_1", "content": "sunny 20C"}));
    let second = chat(
        &rig,
        &json!({"model": "fake/model", "messages": history, "tools": weather_tool()}),
    )
    .await;
    assert_eq!(second.status().as_u16(), 200);
    assert_eq!(session_of(&second), session);
    let answer: Value = second.json().await.unwrap();
    assert_eq!(answer["choices"][0]["message"]["content"], "Sunny in both");
    assert_eq!(answer["choices"][0]["finish_reason"], "stop");
    // One turn in the log: the caller's calls and their results, then the answer.
    let exported = export(&rig, &session).await;
    assert_eq!(exported.matches(r#""type":"turn/end""#).count(), 1);
    assert_eq!(
        exported.matches(r#""type":"tool/result""#).count(),
        2,
        "{exported}"
    );
    assert_eq!(
        exported.matches(r#""executor":"caller""#).count(),
        2,
        "{exported}"
    );
    let upstream = rig.fake.requests()[1].body["messages"].to_string();
    assert!(
        upstream.contains("sunny 20C") && upstream.contains("sunny 25C"),
        "{upstream}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gw_4_tool_results_followed_by_the_clients_words_resume_the_turn_with_both() {
    // An agent sends its tool results and, after them, its user's words (or its
    // environment details) in one request, as OpenAI's API takes them: the turn
    // resumes with the results, and its next model request reads the words after
    // them. Results may come in any order.
    let rig = Rig::start().await;
    rig.fake
        .push(Reply::Chunks(paris_and_rome_calls().finish("tool_calls")));
    rig.fake.push(Reply::text("Both sunny"));
    let mut history = conversation("be brief", "weather?");
    let session = ask_weather(&rig, &mut history).await;
    let messages = history.as_array_mut().unwrap();
    // A result before the other call's result is answered is refused.
    let mut early = messages.clone();
    early.push(json!({"role": "tool", "tool_call_id": "call_1", "content": "sunny in Paris"}));
    early.push(json!({"role": "user", "content": "hurry"}));
    early.push(json!({"role": "tool", "tool_call_id": "call_2", "content": "sunny in Rome"}));
    let refused = chat(
        &rig,
        &json!({"model": "fake/model", "messages": early, "tools": weather_tool()}),
    )
    .await;
    assert_eq!(refused.status().as_u16(), 400);
    let body: Value = refused.json().await.unwrap();
    assert_eq!(
        body["error"]["message"],
        r#"messages: the session awaits results for the tool calls ["call_2"]; a "user" message cannot come before them (new message 1)"#
    );
    messages.push(json!({"role": "tool", "tool_call_id": "call_2", "content": "sunny in Rome"}));
    messages.push(json!({"role": "tool", "tool_call_id": "call_1", "content": "sunny in Paris"}));
    messages.push(json!({"role": "user", "content": "also say hi"}));
    let second = chat(
        &rig,
        &json!({"model": "fake/model", "messages": history, "tools": weather_tool()}),
    )
    .await;
    assert_eq!(second.status().as_u16(), 200);
    assert_eq!(session_of(&second), session);
    let answer: Value = second.json().await.unwrap();
    assert_eq!(answer["choices"][0]["message"]["content"], "Both sunny");
    let requests = rig.fake.requests();
    assert_eq!(requests.len(), 2);
    let sent = requests[1].body["messages"].as_array().unwrap();
    assert_eq!(
        sent[sent.len() - 3..],
        [
            json!({"role": "tool", "tool_call_id": "call_1", "content": "sunny in Paris"}),
            json!({"role": "tool", "tool_call_id": "call_2", "content": "sunny in Rome"}),
            json!({"role": "user", "content": "also say hi"}),
        ]
    );
    // The conversation goes on in the same session.
    let messages = history.as_array_mut().unwrap();
    messages.push(answer["choices"][0]["message"].clone());
    messages.push(json!({"role": "user", "content": "thanks"}));
    rig.fake.push(Reply::text("welcome"));
    let third = chat(
        &rig,
        &json!({"model": "fake/model", "messages": history, "tools": weather_tool()}),
    )
    .await;
    assert_eq!(third.status().as_u16(), 200);
    assert_eq!(session_of(&third), session);
    let exported = export(&rig, &session).await;
    assert_eq!(exported.matches("also say hi").count(), 1, "{exported}");
    assert_eq!(exported.matches(r#""type":"user/message""#).count(), 3);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gw_4_host_tools_run_server_side_and_a_stream_carries_only_client_calls() {
    let rig = Rig::start().await;
    rig.fake.push(Reply::Chunks(
        Script::new()
            .tool_call(0, Some("call_h"), Some("context_status"), "{}")
            .finish("tool_calls"),
    ));
    rig.fake.push(Reply::Chunks(
        Script::new()
            .text("Checking.")
            .tool_call(
                0,
                Some("call_c"),
                Some("get_weather"),
                "{\"city\":\"Oslo\"}",
            )
            .finish("tool_calls"),
    ));
    let response = chat(
        &rig,
        &json!({"model": "fake/model", "messages": conversation("s", "Oslo?"), "tools": weather_tool(), "stream": true}),
    )
    .await;
    assert_eq!(response.status().as_u16(), 200);
    let session = session_of(&response);
    let body = response.text().await.unwrap();
    assert!(
        !body.contains("context_status") && !body.contains("call_h"),
        "{body}"
    );
    let lines = data_lines(&body);
    let chunks: Vec<Value> = lines[..lines.len() - 1]
        .iter()
        .map(|line| serde_json::from_str(line).unwrap())
        .collect();
    assert_eq!(lines.last().unwrap(), "[DONE]");
    let deltas: Vec<String> = chunks
        .iter()
        .map(|chunk| chunk["choices"][0]["delta"].to_string())
        .collect();
    assert_eq!(
        deltas,
        vec![
            r#"{"role":"assistant","content":""}"#.to_owned(),
            r#"{"content":"Checking."}"#.to_owned(),
            r#"{"tool_calls":[{"index":0,"id":"call_c","type":"function","function":{"name":"get_weather","arguments":"{\"city\":\"Oslo\"}"}}]}"#.to_owned(),
            "{}".to_owned(),
        ]
    );
    assert_eq!(
        chunks.last().unwrap()["choices"][0]["finish_reason"],
        "tool_calls"
    );
    // The host's call ran: its result is in the log and went upstream.
    let exported = export(&rig, &session).await;
    assert_eq!(
        exported.matches(r#""type":"tool/result""#).count(),
        1,
        "{exported}"
    );
    assert_eq!(rig.fake.requests().len(), 2);
}

/// The names of the tools an upstream request offered, in order.
fn tool_names(request: &ccare_fake_openai::RecordedRequest) -> Vec<String> {
    request.body["tools"]
        .as_array()
        .map(|tools| {
            tools
                .iter()
                .map(|tool| tool["function"]["name"].as_str().unwrap_or("").to_owned())
                .collect()
        })
        .unwrap_or_default()
}

/// The line of the upstream system prompt that names the model's tools.
fn tools_line(request: &ccare_fake_openai::RecordedRequest) -> String {
    let system = request.body["messages"][0]["content"]
        .as_str()
        .unwrap_or("");
    system
        .lines()
        .find(|line| line.starts_with("Your tools:"))
        .unwrap_or("")
        .to_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gw_4_a_client_tool_may_share_a_name_with_the_servers_file_tools() {
    // Coding agents commonly call their own tools `read_file`; the server's workspace
    // tools of that name are not the gateway's (GW-4), so the client's tool is offered
    // upstream in their place and its calls go back to the client.
    let rig = Rig::start().await;
    rig.fake.push(Reply::Chunks(
        Script::new()
            .tool_call(
                0,
                Some("call_r"),
                Some("read_file"),
                "{\"path\":\"src/lib.rs\"}",
            )
            .finish("tool_calls"),
    ));
    rig.fake.push(Reply::text("It defines one function."));
    let client_tools = function_tool("read_file", "Reads a file of the user's repository", "path");
    let mut history = conversation("be brief", "what is in src/lib.rs?");
    let first = chat(
        &rig,
        &json!({"model": "fake/model", "messages": history, "tools": client_tools}),
    )
    .await;
    assert_eq!(first.status().as_u16(), 200);
    let session = session_of(&first);
    let answer: Value = first.json().await.unwrap();
    assert_eq!(answer["choices"][0]["finish_reason"], "tool_calls");
    assert_eq!(
        answer["choices"][0]["message"]["tool_calls"],
        json!([{"id": "call_r", "type": "function", "function": {"name": "read_file", "arguments": "{\"path\":\"src/lib.rs\"}"}}])
    );
    let upstream = &rig.fake.requests()[0];
    assert_eq!(
        tool_names(upstream),
        [
            "session_search",
            "context_status",
            "context_rest",
            "ledger",
            "read_file"
        ]
    );
    assert_eq!(
        upstream.body["tools"][4]["function"]["description"],
        "Reads a file of the user's repository"
    );
    assert_eq!(
        tools_line(upstream),
        "Your tools: session_search, context_status, context_rest, ledger."
    );
    // The client runs it and sends the result; the turn resumes.
    let history_array = history.as_array_mut().unwrap();
    history_array.push(answer["choices"][0]["message"].clone());
    history_array
        .push(json!({"role": "tool", "tool_call_id": "call_r", "content": "pub fn one() {}"}));
    let second = chat(
        &rig,
        &json!({"model": "fake/model", "messages": history, "tools": client_tools}),
    )
    .await;
    assert_eq!(second.status().as_u16(), 200);
    assert_eq!(session_of(&second), session);
    let answer: Value = second.json().await.unwrap();
    assert_eq!(
        answer["choices"][0]["message"]["content"],
        "It defines one function."
    );
    let exported = export(&rig, &session).await;
    assert_eq!(
        exported.matches(r#""executor":"caller""#).count(),
        1,
        "{exported}"
    );
    assert!(
        rig.fake.requests()[1].body["messages"]
            .to_string()
            .contains("pub fn one() {}")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gw_4_a_client_tool_named_like_a_gateway_owned_one_shadows_it() {
    // A finance agent's own `ledger`: offered once, the client's, and its calls go back
    // to the client; refusing the name would break the client. Even a results request
    // that leaves the tools out keeps the open turn's `ledger` the client's.
    let rig = Rig::start().await;
    rig.fake.push(Reply::Chunks(
        Script::new()
            .tool_call(0, Some("call_l"), Some("ledger"), "{\"account\":\"cash\"}")
            .finish("tool_calls"),
    ));
    rig.fake.push(Reply::text("Cash is 120."));
    let ledger = function_tool("ledger", "Reads the user's accounts", "account");
    let mut history = conversation("be brief", "how much cash?");
    let first = chat(
        &rig,
        &json!({"model": "fake/model", "messages": history, "tools": ledger}),
    )
    .await;
    assert_eq!(first.status().as_u16(), 200);
    let session = session_of(&first);
    let answer: Value = first.json().await.unwrap();
    assert_eq!(
        answer["choices"][0]["message"]["tool_calls"],
        json!([{"id": "call_l", "type": "function", "function": {"name": "ledger", "arguments": "{\"account\":\"cash\"}"}}])
    );
    let list = history.as_array_mut().unwrap();
    list.push(answer["choices"][0]["message"].clone());
    list.push(json!({"role": "tool", "tool_call_id": "call_l", "content": "cash: 120"}));
    let second = chat(&rig, &json!({"model": "fake/model", "messages": history})).await;
    assert_eq!(second.status().as_u16(), 200);
    assert_eq!(session_of(&second), session);
    let requests = rig.fake.requests();
    assert_eq!(requests.len(), 2);
    for request in &requests {
        assert_eq!(
            tool_names(request),
            ["session_search", "context_status", "context_rest", "ledger"]
        );
        assert_eq!(
            request.body["tools"][3]["function"]["description"],
            "Reads the user's accounts"
        );
        assert_eq!(
            tools_line(request),
            "Your tools: session_search, context_status, context_rest."
        );
    }
    let exported = export(&rig, &session).await;
    assert_eq!(
        exported.matches(r#""executor":"caller""#).count(),
        1,
        "{exported}"
    );
    assert!(
        requests[1].body["messages"]
            .to_string()
            .contains("cash: 120")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gw_4_the_servers_file_tools_are_neither_offered_nor_run() {
    // A model that calls a workspace tool anyway (from memory of another session, say)
    // gets TOOL_NOT_FOUND and the server's folder is untouched.
    let rig = Rig::start().await;
    rig.fake.push(Reply::Chunks(
        Script::new()
            .tool_call(
                0,
                Some("call_w"),
                Some("write_file"),
                "{\"path\":\"notes.md\",\"content\":\"from a client\"}",
            )
            .finish("tool_calls"),
    ));
    rig.fake.push(Reply::text("I cannot write files here."));
    let response = chat(
        &rig,
        &json!({"model": "fake/model", "messages": conversation("s", "note this")}),
    )
    .await;
    assert_eq!(response.status().as_u16(), 200);
    let answer: Value = response.json().await.unwrap();
    assert_eq!(
        answer["choices"][0]["message"]["content"],
        "I cannot write files here."
    );
    let requests = rig.fake.requests();
    assert_eq!(
        tool_names(&requests[0]),
        ["session_search", "context_status", "context_rest", "ledger"]
    );
    assert_eq!(
        tools_line(&requests[0]),
        "Your tools: session_search, context_status, context_rest, ledger."
    );
    let result = requests[1].body["messages"]
        .as_array()
        .unwrap()
        .iter()
        .find(|message| message["role"] == "tool")
        .unwrap()
        .clone();
    assert_eq!(result["tool_call_id"], "call_w");
    let content = result["content"].as_str().unwrap();
    assert!(content.contains("TOOL_NOT_FOUND"), "{content}");
    assert!(!rig.dir.path().join("workspace/notes.md").exists());
}

/// A client's `lookup` tool, in OpenAI's shape.
fn lookup_tool() -> Value {
    function_tool("lookup", "Looks a word up", "word")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gw_4_tool_choice_required_offers_only_the_clients_tools_for_that_request() {
    // `required` means one of the client's tools: the gateway-owned tools are left out
    // of that request (they could otherwise be forced step after step, unseen by the
    // client) and the answer goes back with the client's call. The next request,
    // without tool_choice, offers them again.
    let rig = Rig::start().await;
    rig.fake.push(Reply::Chunks(
        Script::new()
            .tool_call(0, Some("call_l"), Some("lookup"), "{\"word\":\"care\"}")
            .finish("tool_calls"),
    ));
    rig.fake.push(Reply::text("Care means attention."));
    let mut history = conversation("be brief", "what does care mean?");
    let first = chat(
        &rig,
        &json!({"model": "fake/model", "messages": history, "tools": lookup_tool(),
                "tool_choice": "required"}),
    )
    .await;
    assert_eq!(first.status().as_u16(), 200);
    let session = session_of(&first);
    let answer: Value = first.json().await.unwrap();
    assert_eq!(
        answer["choices"][0]["message"]["tool_calls"],
        json!([{"id": "call_l", "type": "function", "function": {"name": "lookup", "arguments": "{\"word\":\"care\"}"}}])
    );
    let requests = rig.fake.requests();
    assert_eq!(requests[0].body["tool_choice"], "required");
    assert_eq!(tool_names(&requests[0]), ["lookup"]);
    // No tool line: the host offers none of its tools, and "no tools" would be false.
    let system = requests[0].body["messages"][0]["content"].as_str().unwrap();
    assert_eq!(tools_line(&requests[0]), "");
    assert!(!system.contains("You have no tools"), "{system}");
    assert!(system.starts_with("You are an agent working with the user in this session. Answer the user's latest request; use your tools when they help, and say plainly what you did.\n\n"), "{system}");
    let list = history.as_array_mut().unwrap();
    list.push(answer["choices"][0]["message"].clone());
    list.push(json!({"role": "tool", "tool_call_id": "call_l", "content": "attention"}));
    let second = chat(
        &rig,
        &json!({"model": "fake/model", "messages": history, "tools": lookup_tool()}),
    )
    .await;
    assert_eq!(second.status().as_u16(), 200);
    assert_eq!(session_of(&second), session);
    let requests = rig.fake.requests();
    assert_eq!(requests.len(), 2);
    assert_eq!(requests[1].body.get("tool_choice"), None);
    assert_eq!(
        tool_names(&requests[1]),
        [
            "session_search",
            "context_status",
            "context_rest",
            "ledger",
            "lookup"
        ]
    );
    assert_eq!(
        tools_line(&requests[1]),
        "Your tools: session_search, context_status, context_rest, ledger."
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gw_4_tool_choice_none_auto_and_a_named_function_go_upstream_as_they_are() {
    let rig = Rig::start().await;
    let choices = [
        json!("none"),
        json!("auto"),
        json!({"type": "function", "function": {"name": "lookup"}}),
    ];
    for (index, choice) in choices.iter().enumerate() {
        rig.fake.push(Reply::text("ok"));
        let response = chat(
            &rig,
            &json!({"model": "fake/model", "messages": conversation("s", &format!("question {index}")),
                    "tools": lookup_tool(), "tool_choice": choice}),
        )
        .await;
        assert_eq!(response.status().as_u16(), 200, "{choice}");
    }
    let requests = rig.fake.requests();
    assert_eq!(requests.len(), 3);
    for (request, choice) in requests.iter().zip(&choices) {
        assert_eq!(&request.body["tool_choice"], choice);
        assert_eq!(
            tool_names(request),
            [
                "session_search",
                "context_status",
                "context_rest",
                "ledger",
                "lookup"
            ]
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gw_6_a_tool_choice_the_gateway_cannot_honour_is_400_not_retried() {
    let rig = Rig::start().await;
    let shapes =
        r#"send "none", "auto", "required" or {"type": "function", "function": {"name": …}}"#;
    for (tools, choice, message) in [
        (
            Value::Null,
            json!("required"),
            "tool_choice: \"required\" needs at least one tool in tools".to_owned(),
        ),
        (
            lookup_tool(),
            json!({"type": "function", "function": {"name": "context_status"}}),
            "tool_choice: names the function \"context_status\", which is not one of tools"
                .to_owned(),
        ),
        (
            lookup_tool(),
            json!("any"),
            format!("tool_choice: \"any\" is not a mode the gateway takes; {shapes}"),
        ),
        (
            lookup_tool(),
            json!({"type": "allowed_tools", "function": {"name": "lookup"}}),
            format!("tool_choice: type \"allowed_tools\" is not one the gateway takes; {shapes}"),
        ),
        (
            lookup_tool(),
            json!({"type": "function"}),
            format!(
                "tool_choice: {{\"type\":\"function\"}} is not a shape the gateway takes; {shapes}"
            ),
        ),
    ] {
        let mut body = json!({"model": "fake/model", "messages": conversation("s", "hi"),
                              "tool_choice": choice});
        if !tools.is_null() {
            body["tools"] = tools;
        }
        let response = chat(&rig, &body).await;
        assert_eq!(response.status().as_u16(), 400, "{choice}");
        assert_eq!(response.headers()["x-should-retry"], "false");
        assert!(response.headers().get("x-ccare-session").is_none());
        let body: Value = response.json().await.unwrap();
        assert_eq!(
            body["error"],
            json!({"message": message, "type": "invalid_request_error", "code": "INVALID_REQUEST"})
        );
    }
    assert!(rig.fake.requests().is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gw_4_a_gateway_session_hides_the_file_tools_whoever_starts_its_actor() {
    // After a restart, a gateway session's actor is started by a sessions-API message
    // (no gateway request sets its options first): it still offers no file tools. A
    // session the API created keeps them.
    let rig = Rig::start().await;
    rig.fake.push(Reply::text("a"));
    let first = chat(
        &rig,
        &json!({"model": "fake/model", "messages": conversation("s", "hi")}),
    )
    .await;
    assert_eq!(first.status().as_u16(), 200);
    let gateway_session = session_of(&first);
    let created: Value = rig
        .post_json("/api/sessions", &json!({}))
        .await
        .json()
        .await
        .unwrap();
    let api_session = created["id"].as_str().unwrap().to_owned();
    let rig = rig.restart().await;
    for (session, answer) in [(&gateway_session, "b"), (&api_session, "c")] {
        rig.fake.push(Reply::text(answer));
        let before = rig.fake.requests().len();
        let accepted = rig
            .post_json(
                &format!("/api/sessions/{session}/messages"),
                &json!({"text": "go on"}),
            )
            .await;
        assert_eq!(accepted.status().as_u16(), 202);
        while rig.fake.requests().len() == before {
            tokio::time::sleep(std::time::Duration::from_millis(5)).await;
        }
    }
    let requests = rig.fake.requests();
    let count = requests.len();
    assert_eq!(
        tool_names(&requests[count - 2]),
        ["session_search", "context_status", "context_rest", "ledger"]
    );
    assert_eq!(
        tool_names(&requests[count - 1]),
        [
            "read_file",
            "write_file",
            "list_files",
            "session_search",
            "context_status",
            "context_rest",
            "ledger"
        ]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gw_4_a_result_for_a_call_the_client_never_got_is_400_not_retried() {
    let rig = Rig::start().await;
    // In a new conversation.
    let response = chat(
        &rig,
        &json!({"model": "fake/model", "messages": [
            {"role": "user", "content": "hi"},
            {"role": "tool", "tool_call_id": "call_x", "content": "made up"},
        ]}),
    )
    .await;
    assert_eq!(response.status().as_u16(), 400);
    assert_eq!(response.headers()["x-should-retry"], "false");
    let body: Value = response.json().await.unwrap();
    assert_eq!(body["error"]["code"], "TOOL_RESULTS_MISMATCH");
    assert_eq!(
        body["error"]["message"],
        r#"messages: a tool message answers the call "call_x", which this gateway never sent (the session awaits no tool results)"#
    );
    // In a session that awaits other calls.
    rig.fake.push(Reply::Chunks(
        Script::new()
            .tool_call(0, Some("call_1"), Some("get_weather"), "{}")
            .finish("tool_calls"),
    ));
    let mut history = conversation("s", "weather?");
    let first = chat(
        &rig,
        &json!({"model": "fake/model", "messages": history, "tools": weather_tool()}),
    )
    .await;
    let session = session_of(&first);
    history.as_array_mut().unwrap().extend([
        json!({"role": "assistant", "tool_calls": [{"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": "{}"}}]}),
        json!({"role": "tool", "tool_call_id": "call_9", "content": "?"}),
    ]);
    let wrong = chat(&rig, &json!({"model": "fake/model", "messages": history})).await;
    assert_eq!(wrong.status().as_u16(), 400);
    assert_eq!(wrong.headers()["x-should-retry"], "false");
    assert_eq!(session_of(&wrong), session);
    let body: Value = wrong.json().await.unwrap();
    assert_eq!(body["error"]["code"], "TOOL_RESULTS_MISMATCH");
    assert_eq!(
        body["error"]["message"],
        r#"messages: a tool message answers the call "call_9", which this gateway never sent; the session awaits results for ["call_1"]"#
    );
    // A bad declaration is named as the sessions API names it.
    let bad = chat(
        &rig,
        &json!({"model": "fake/model", "messages": conversation("s", "x"), "tools": [{"type": "function", "function": {"name": "bad name"}}]}),
    )
    .await;
    assert_eq!(bad.status().as_u16(), 400);
    assert_eq!(bad.headers()["x-should-retry"], "false");
    let body: Value = bad.json().await.unwrap();
    assert_eq!(body["error"]["code"], "INVALID_TOOLS", "{body}");
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .starts_with("tools[0].name:"),
        "{body}"
    );
    assert_eq!(rig.fake.requests().len(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gw_5_a_stream_is_openai_chunks_with_usage_last_then_done() {
    let rig = Rig::start().await;
    rig.fake.push(Reply::Chunks(
        Script::new()
            .reasoning("think")
            .text("Hello ")
            .text("world")
            .finish("stop")
            .usage(openai_usage(12, 2, 5, 1)),
    ));
    let response = chat(
        &rig,
        &json!({"model": "fake/model", "stream": true, "stream_options": {"include_usage": true},
                "messages": conversation("s", "hi")}),
    )
    .await;
    assert_eq!(response.status().as_u16(), 200);
    assert_eq!(
        response.headers()["content-type"].to_str().unwrap(),
        "text/event-stream"
    );
    let session = session_of(&response);
    let lines = data_lines(&response.text().await.unwrap());
    assert_eq!(lines.last().map(String::as_str), Some("[DONE]"));
    let mut ids = Vec::new();
    let rest: Vec<String> = lines[..lines.len() - 1]
        .iter()
        .map(|line| {
            let (id, text) = masked(line);
            ids.push(id);
            text
        })
        .collect();
    assert!(ids.iter().all(|id| *id == ids[0]), "one id: {ids:?}");
    let head = r#"{"id":"ID","object":"chat.completion.chunk","created":0,"model":"fake/model","#;
    let choice = |delta: &str, finish: &str| {
        format!(
            r#"{head}"choices":[{{"index":0,"delta":{delta},"finish_reason":{finish}}}],"usage":null}}"#
        )
    };
    assert_eq!(
        rest,
        vec![
            choice(r#"{"role":"assistant","content":""}"#, "null"),
            choice(r#"{"reasoning_content":"think"}"#, "null"),
            choice(r#"{"content":"Hello "}"#, "null"),
            choice(r#"{"content":"world"}"#, "null"),
            choice("{}", r#""stop""#),
            format!(
                r#"{head}"choices":[],"usage":{{"prompt_tokens":12,"completion_tokens":5,"total_tokens":17,"prompt_tokens_details":{{"cached_tokens":2}},"completion_tokens_details":{{"reasoning_tokens":1}}}}}}"#
            ),
        ]
    );
    // The streamed answer continues like a plain one.
    rig.fake.push(Reply::text("again"));
    let next = chat(
        &rig,
        &json!({"model": "fake/model", "messages": [
            {"role": "system", "content": "s"},
            {"role": "user", "content": "hi"},
            {"role": "assistant", "content": "Hello world"},
            {"role": "user", "content": "more"},
        ]}),
    )
    .await;
    assert_eq!(session_of(&next), session);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gw_5_without_include_usage_chunks_carry_no_usage() {
    let rig = Rig::start().await;
    rig.fake.push(Reply::text("Hi there"));
    let response = chat(
        &rig,
        &json!({"model": "fake/model", "stream": true, "messages": conversation("s", "hi")}),
    )
    .await;
    assert_eq!(response.status().as_u16(), 200);
    let lines = data_lines(&response.text().await.unwrap());
    assert_eq!(lines.last().map(String::as_str), Some("[DONE]"));
    let chunks: Vec<Value> = lines[..lines.len() - 1]
        .iter()
        .map(|line| serde_json::from_str(line).unwrap())
        .collect();
    let contents: Vec<Value> = chunks
        .iter()
        .map(|chunk| chunk["choices"][0]["delta"]["content"].clone())
        .collect();
    assert_eq!(
        contents,
        vec![json!(""), json!("Hi "), json!("there"), Value::Null]
    );
    assert_eq!(chunks[3]["choices"][0]["finish_reason"], "stop");
    for chunk in &chunks {
        assert!(chunk.get("usage").is_none(), "{chunk}");
        assert_eq!(chunk["choices"].as_array().unwrap().len(), 1);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gw_6_an_unknown_model_is_404_model_not_found_not_retried() {
    let rig = Rig::start().await;
    let response = chat(
        &rig,
        &json!({"model": "gpt-nope", "messages": conversation("s", "hi")}),
    )
    .await;
    assert_eq!(response.status().as_u16(), 404);
    assert_eq!(response.headers()["x-should-retry"], "false");
    assert_eq!(
        response.text().await.unwrap(),
        r#"{"error":{"message":"The model `gpt-nope` does not exist: no configured route serves it (GET /v1/models lists them)","type":"not_found_error","code":"model_not_found"}}"#
    );
    assert!(rig.fake.requests().is_empty());
}

/// GW-3 for clients that write assistant messages themselves (Aider's few-shot
/// examples and acknowledgements): a new conversation holding them is entered, their
/// text in the user message as system messages are, and the conversation continues
/// its session. Tool calls the gateway never made are still refused (GW-6 below).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gw_3_assistant_messages_the_client_wrote_are_entered_as_text() {
    let rig = Rig::start().await;
    rig.fake.push(Reply::text("real answer"));
    rig.fake.push(Reply::text("second answer"));
    let mut messages = vec![
        json!({"role": "system", "content": "be brief"}),
        json!({"role": "user", "content": "EXAMPLE-Q"}),
        json!({"role": "assistant", "content": "EXAMPLE-A"}),
        json!({"role": "user", "content": "REAL-Q"}),
    ];
    let first = chat(&rig, &json!({"model": "fake/model", "messages": messages})).await;
    assert_eq!(first.status().as_u16(), 200);
    let session = session_of(&first);
    let answer: Value = first.json().await.unwrap();
    assert_eq!(answer["choices"][0]["message"]["content"], "real answer");
    let upstream = rig.fake.requests()[0].body["messages"].clone();
    let last = upstream.as_array().unwrap().last().unwrap().clone();
    assert_eq!(last["role"], "user");
    let text = last["content"].to_string();
    let at = |needle: &str| {
        text.find(needle)
            .unwrap_or_else(|| panic!("{needle}: {text}"))
    };
    assert!(at("be brief") < at("EXAMPLE-Q") && at("EXAMPLE-Q") < at("EXAMPLE-A"));
    assert!(at("EXAMPLE-A") < at("REAL-Q"), "{text}");
    let exported = export(&rig, &session).await;
    assert_eq!(exported.matches(r#""type":"user/message""#).count(), 1);
    assert_eq!(exported.matches(r#""type":"assistant/message""#).count(), 1);
    messages.push(json!({"role": "assistant", "content": "real answer"}));
    messages.push(json!({"role": "user", "content": "MORE"}));
    let second = chat(&rig, &json!({"model": "fake/model", "messages": messages})).await;
    assert_eq!(second.status().as_u16(), 200);
    assert_eq!(session_of(&second), session);
    let exported = export(&rig, &session).await;
    assert_eq!(exported.matches(r#""type":"user/message""#).count(), 2);
    assert_eq!(exported.matches("EXAMPLE-A").count(), 1, "{exported}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gw_3_a_trimmed_transcript_with_tool_calls_starts_a_session_with_them_as_text() {
    // A client that trims its oldest messages (to fit its own idea of the window)
    // sends a transcript that extends no view: it starts a new session. The tool calls
    // and results in it were made in the old session, not this one: they are entered
    // as text, with a summary's labels, instead of refusing the client.
    let rig = Rig::start().await;
    rig.fake.push(Reply::Chunks(
        Script::new()
            .tool_call(
                0,
                Some("call_1"),
                Some("get_weather"),
                "{\"city\":\"Paris\"}",
            )
            .finish("tool_calls"),
    ));
    rig.fake.push(Reply::text("Sunny in Paris"));
    let mut history = conversation("be brief", "weather in Paris?");
    let old_session = ask_weather(&rig, &mut history).await;
    let messages = history.as_array_mut().unwrap();
    messages.push(json!({"role": "tool", "tool_call_id": "call_1", "content": "sunny"}));
    ask_weather(&rig, &mut history).await;
    let messages = history.as_array_mut().unwrap();
    messages.push(json!({"role": "user", "content": "and Rome?"}));
    // The client drops its oldest user message.
    messages.remove(1);
    rig.fake.push(Reply::text("Rome too"));
    let third = chat(
        &rig,
        &json!({"model": "fake/model", "messages": history, "tools": weather_tool()}),
    )
    .await;
    assert_eq!(third.status().as_u16(), 200);
    let session = session_of(&third);
    assert_ne!(session, old_session);
    let answer: Value = third.json().await.unwrap();
    assert_eq!(answer["choices"][0]["message"]["content"], "Rome too");
    let requests = rig.fake.requests();
    let sent = requests.last().unwrap().body["messages"]
        .as_array()
        .unwrap()
        .last()
        .unwrap()
        .to_string();
    let at = |needle: &str| {
        sent.find(needle)
            .unwrap_or_else(|| panic!("{needle}: {sent}"))
    };
    assert!(at("be brief") < at(r#"[tool call get_weather] {\"city\":\"Paris\"}"#));
    assert!(at("[tool call get_weather]") < at("[tool result get_weather]"));
    assert!(at("[tool result get_weather]") < at("sunny"));
    assert!(at("sunny") < at("Sunny in Paris") && at("Sunny in Paris") < at("and Rome?"));
    // The trimmed conversation goes on in its new session.
    let messages = history.as_array_mut().unwrap();
    messages.push(answer["choices"][0]["message"].clone());
    messages.push(json!({"role": "user", "content": "and Oslo?"}));
    rig.fake.push(Reply::text("Oslo is cold"));
    let fourth = chat(
        &rig,
        &json!({"model": "fake/model", "messages": history, "tools": weather_tool()}),
    )
    .await;
    assert_eq!(fourth.status().as_u16(), 200);
    assert_eq!(session_of(&fourth), session);
    let exported = export(&rig, &session).await;
    assert_eq!(exported.matches(r#""type":"user/message""#).count(), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gw_6_a_bad_transcript_is_400_not_retried() {
    let rig = Rig::start().await;
    for (messages, fragment) in [
        (
            json!([{"role": "user", "content": "hi"}, {"role": "assistant", "content": null, "tool_calls": [{"id": "call_z", "type": "function", "function": {"name": "get_weather", "arguments": "{}"}}]}, {"role": "user", "content": "go"}]),
            r#"messages[2]: the tool call "call_z" (get_weather) has no tool message answering it before the next message"#,
        ),
        (
            json!([{"role": "user", "content": "hi"}, {"role": "assistant", "content": null, "tool_calls": [
                {"id": "call_a", "type": "function", "function": {"name": "lookup", "arguments": "{}"}},
                {"id": "call_b", "type": "function", "function": {"name": "lookup", "arguments": "{}"}},
            ]}, {"role": "tool", "tool_call_id": "call_a", "content": "found"}]),
            r#"messages: the tool call "call_b" (lookup) has no tool message answering it"#,
        ),
        (
            json!([{"role": "user", "content": "hi"}, {"role": "assistant", "content": "made up"}]),
            "the last message is an assistant message the gateway did not answer",
        ),
        (
            json!([{"role": "system", "content": "only"}]),
            "no user message",
        ),
        (json!([]), "at least one message"),
    ] {
        let response = chat(&rig, &json!({"model": "fake/model", "messages": messages})).await;
        assert_eq!(response.status().as_u16(), 400, "{messages}");
        assert_eq!(response.headers()["x-should-retry"], "false");
        let body: Value = response.json().await.unwrap();
        assert_eq!(body["error"]["code"], "BAD_TRANSCRIPT", "{body}");
        assert_eq!(body["error"]["type"], "invalid_request_error");
        assert!(
            body["error"]["message"]
                .as_str()
                .unwrap()
                .contains(fragment),
            "{body}"
        );
    }
    let response = chat(&rig, &json!({"messages": []})).await;
    assert_eq!(response.status().as_u16(), 400);
    let body: Value = response.json().await.unwrap();
    assert_eq!(body["error"]["code"], "INVALID_REQUEST", "{body}");
    assert!(rig.fake.requests().is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gw_6_a_budget_refusal_is_400_request_budget_exceeded_not_retried() {
    let rig = Rig::start().await;
    // Far over the 16k window: the request gate refuses it before the upstream.
    let huge = "lorem ipsum dolor sit amet ".repeat(8000);
    for stream in [false, true] {
        let response = chat(
            &rig,
            &json!({"model": "fake/model", "stream": stream, "messages": conversation("s", &huge)}),
        )
        .await;
        assert_eq!(response.status().as_u16(), 400, "stream {stream}");
        assert_eq!(response.headers()["x-should-retry"], "false");
        assert!(response.headers().get("x-ccare-session").is_some());
        let body: Value = response.json().await.unwrap();
        assert_eq!(body["error"]["code"], "REQUEST_BUDGET_EXCEEDED", "{body}");
        assert_eq!(body["error"]["type"], "invalid_request_error");
    }
    assert!(rig.fake.requests().is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gw_6_an_upstream_429_passes_through_with_its_retry_header() {
    let rig = Rig::start().await;
    rig.fake.push(Reply::rate_limited(7));
    let response = chat(
        &rig,
        &json!({"model": "fake/model", "messages": conversation("s", "hi")}),
    )
    .await;
    assert_eq!(response.status().as_u16(), 429);
    assert_eq!(response.headers()["retry-after"], "7");
    assert!(response.headers().get("x-should-retry").is_none());
    let body: Value = response.json().await.unwrap();
    assert_eq!(body["error"]["type"], "rate_limit_error", "{body}");
}

/// The `openai` Python SDK version the client test pins.
const OPENAI_SDK: &str = "openai==3.51.0";

/// What the SDK script does through the gateway, printing one JSON object: a plain
/// answer, a streamed continuation with `include_usage`, a refusal it must not retry
/// and an upstream 429 it must (attempts counted with an httpx hook).
const SDK_SCRIPT: &str = r#"
import json, os, openai
try:
    import httpx2 as httpx
except ImportError:
    import httpx
attempts = []
http = httpx.Client(event_hooks={"request": [lambda request: attempts.append(request.url.path)]})
client = openai.OpenAI(base_url=os.environ["GW_BASE"] + "/v1", api_key=os.environ["GW_TOKEN"], http_client=http, max_retries=2)
out = {}
models = client.models.list()
out["models"] = [model.id for model in models.data]
history = [{"role": "system", "content": "be brief"}, {"role": "user", "content": "hi"}]
raw = client.chat.completions.with_raw_response.create(model="fake/model", messages=history)
first = raw.parse()
out["first"] = {"session": raw.headers["x-ccare-session"], "content": first.choices[0].message.content,
                "finish": first.choices[0].finish_reason, "usage": first.usage.total_tokens, "object": first.object}
history += [{"role": "assistant", "content": first.choices[0].message.content}, {"role": "user", "content": "more"}]
raw = client.chat.completions.with_raw_response.create(model="fake/model", messages=history, stream=True,
                                                        stream_options={"include_usage": True})
pieces, usage, finish = [], None, None
for chunk in raw.parse():
    if chunk.choices:
        pieces.append(chunk.choices[0].delta.content or "")
        finish = chunk.choices[0].finish_reason or finish
    if chunk.usage is not None:
        usage = chunk.usage.total_tokens
out["second"] = {"session": raw.headers["x-ccare-session"], "content": "".join(pieces), "finish": finish, "usage": usage}
client.chat.completions.create(model="fake/model", user="k", messages=[{"role": "user", "content": "keyed"}])
before = len(attempts)
try:
    client.chat.completions.create(model="fake/model", user="k", messages=[{"role": "user", "content": "keyed"}, {"role": "tool", "tool_call_id": "never_sent", "content": "x"}])
    out["refused"] = None
except openai.APIStatusError as error:
    out["refused"] = {"status": error.status_code, "code": error.code, "attempts": len(attempts) - before}
before = len(attempts)
retried = client.chat.completions.create(model="fake/model", messages=[{"role": "user", "content": "retry me"}])
out["retried"] = {"content": retried.choices[0].message.content, "attempts": len(attempts) - before}
tools = [{"type": "function", "function": {"name": "get_weather", "description": "weather",
          "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}}]
messages = [{"role": "user", "content": "weather in Paris and Rome?"}]
calls, finish = {}, None
for chunk in client.chat.completions.create(model="fake/model", messages=messages, tools=tools, stream=True):
    if chunk.choices:
        for call in chunk.choices[0].delta.tool_calls or []:
            known = calls.setdefault(call.index, {"id": "", "name": "", "arguments": ""})
            known["id"] = call.id or known["id"]
            known["name"] += call.function.name or ""
            known["arguments"] += call.function.arguments or ""
        finish = chunk.choices[0].finish_reason or finish
ordered = [calls[index] for index in sorted(calls)]
messages.append({"role": "assistant", "content": None, "tool_calls": [
    {"id": call["id"], "type": "function", "function": {"name": call["name"], "arguments": call["arguments"]}}
    for call in ordered]})
for call in ordered:
    messages.append({"role": "tool", "tool_call_id": call["id"], "content": "sunny in " + json.loads(call["arguments"])["city"]})
raw = client.chat.completions.with_raw_response.create(model="fake/model", messages=messages, tools=tools)
answer = raw.parse()
out["tools"] = {"indexes": sorted(calls), "calls": ordered, "finish": finish,
                "answer": answer.choices[0].message.content, "session": raw.headers["x-ccare-session"]}
print(json.dumps(out))
"#;

/// The cargo target directory, where the real clients are installed once and reused.
pub(crate) fn target_dir() -> std::path::PathBuf {
    std::env::var_os("CARGO_TARGET_DIR")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target"))
}

/// A venv `target/<name>` holding exactly `pins`, created once with `python3 -m venv`
/// and pip; `None` (with a printed note) when Python or PyPI is not there and this is
/// not CI. Installs are one at a time within the test process, so tests sharing a
/// venv never write it at once.
pub(crate) fn python_venv(name: &str, pins: &[&str]) -> Option<std::path::PathBuf> {
    static INSTALLING: std::sync::Mutex<()> = std::sync::Mutex::new(());
    let _installing = INSTALLING
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    let venv = target_dir().join(name);
    let python = venv.join("bin/python");
    let ready = |python: &std::path::Path| {
        std::process::Command::new(python)
            .args([
                "-c",
                "import sys, importlib.metadata as m\nsys.exit(any(m.version(pin.split('==')[0]) != pin.split('==')[1] for pin in sys.argv[1:]))",
            ])
            .args(pins)
            .stderr(std::process::Stdio::null())
            .status()
            .is_ok_and(|status| status.success())
    };
    if ready(&python) {
        return Some(python);
    }
    let installed = std::process::Command::new("python3")
        .args(["-m", "venv"])
        .arg(&venv)
        .status()
        .is_ok_and(|status| status.success())
        && std::process::Command::new(venv.join("bin/pip"))
            .args(["install", "-q"])
            .args(pins)
            .status()
            .is_ok_and(|status| status.success());
    if installed && ready(&python) {
        return Some(python);
    }
    assert!(
        std::env::var_os("CI").is_none(),
        "CI must run this client test: could not install {pins:?} into {}",
        venv.display()
    );
    eprintln!("note: skipping a client test: python3 or {pins:?} is not available");
    None
}

/// The venv's python with the pinned openai SDK (`target/gateway-venv`).
pub(crate) fn sdk_python() -> Option<std::path::PathBuf> {
    python_venv("gateway-venv", &[OPENAI_SDK])
}

/// Runs `script` with `python -c` against the rig's gateway (`GW_BASE`, `GW_TOKEN`);
/// fails the test unless it exits 0, and returns the JSON it printed.
async fn run_python(python: std::path::PathBuf, script: &'static str, rig: &Rig) -> Value {
    run_program(rig, python, vec!["-c".into(), script.into()], Vec::new()).await
}

/// The upstream replies both SDK scripts (Python and Node) walk through, in order: a
/// plain answer, a streamed continuation, a keyed answer, a 429 then its retry, a
/// two-call tool round (the first call's arguments in two pieces), the final answer.
fn push_sdk_replies(rig: &Rig) {
    rig.fake.push(Reply::text("Hello big world"));
    rig.fake.push(Reply::text("Fine thanks"));
    rig.fake.push(Reply::text("keyed answer"));
    rig.fake.push(Reply::rate_limited(1));
    rig.fake.push(Reply::text("after retry"));
    rig.fake.push(Reply::Chunks(
        Script::new()
            .tool_call(0, Some("call_p"), Some("get_weather"), "{\"city\":")
            .tool_call(0, None, None, "\"Paris\"}")
            .tool_call(
                1,
                Some("call_r"),
                Some("get_weather"),
                "{\"city\":\"Rome\"}",
            )
            .finish("tool_calls"),
    ));
    rig.fake.push(Reply::text("Sunny in both"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gw_1_the_official_openai_python_sdk_talks_to_the_gateway() {
    let Some(python) = tokio::task::spawn_blocking(sdk_python).await.unwrap() else {
        return;
    };
    let rig = Rig::start().await;
    push_sdk_replies(&rig);
    let out = run_python(python, SDK_SCRIPT, &rig).await;
    assert_eq!(out["models"], json!(["fake/model"]));
    let session = out["first"]["session"].as_str().unwrap();
    assert_eq!(
        out["first"],
        json!({"session": session, "content": "Hello big world", "finish": "stop", "usage": 13, "object": "chat.completion"})
    );
    assert_eq!(
        out["second"],
        json!({"session": session, "content": "Fine thanks", "finish": "stop", "usage": 12})
    );
    // A result for a call the client never got: refused once, not retried.
    assert_eq!(
        out["refused"],
        json!({"status": 400, "code": "TOOL_RESULTS_MISMATCH", "attempts": 1})
    );
    // The upstream's 429 passes through with retry-after, and the SDK retries it.
    assert_eq!(
        out["retried"],
        json!({"content": "after retry", "attempts": 2})
    );
    // A two-round client tool loop, streamed then not: parallel calls at indexes 0
    // and 1, their results resume the same session's turn.
    assert_eq!(
        out["tools"]["calls"],
        json!([
            {"id": "call_p", "name": "get_weather", "arguments": "{\"city\":\"Paris\"}"},
            {"id": "call_r", "name": "get_weather", "arguments": "{\"city\":\"Rome\"}"},
        ])
    );
    assert_eq!(out["tools"]["indexes"], json!([0, 1]));
    assert_eq!(out["tools"]["finish"], "tool_calls");
    assert_eq!(out["tools"]["answer"], "Sunny in both");
    let tool_session = out["tools"]["session"].as_str().unwrap();
    let tool_log = export(&rig, tool_session).await;
    assert_eq!(tool_log.matches(r#""type":"tool/result""#).count(), 2);
    assert!(tool_log.contains("sunny in Paris") && tool_log.contains("sunny in Rome"));
    assert_eq!(tool_log.matches(r#""type":"turn/end""#).count(), 1);
    assert_eq!(rig.fake.requests().len(), 7);
    let exported = export(&rig, session).await;
    assert_eq!(exported.matches(r#""type":"turn/end""#).count(), 2);
}

/// What the retry script does through the gateway with the official SDK (its own
/// retries on, `max_retries=2`): continues a conversation whose next answer is first
/// refused upstream with a 429, then sends tool results whose resumed turn is refused
/// the same way; prints how each ended and how many HTTP attempts it took.
const SDK_RETRY_SCRIPT: &str = r#"
import json, os, openai
try:
    import httpx2 as httpx
except ImportError:
    import httpx
attempts = []
http = httpx.Client(event_hooks={"request": [lambda request: attempts.append(request.url.path)]})
client = openai.OpenAI(base_url=os.environ["GW_BASE"] + "/v1", api_key=os.environ["GW_TOKEN"], http_client=http, max_retries=2)
out = {}
history = [{"role": "system", "content": "be brief"}, {"role": "user", "content": "hi"}]
first = client.chat.completions.with_raw_response.create(model="fake/model", messages=history)
history += [{"role": "assistant", "content": first.parse().choices[0].message.content},
            {"role": "user", "content": "and then?"}]
before = len(attempts)
raw = client.chat.completions.with_raw_response.create(model="fake/model", messages=history)
out["continued"] = {"same": raw.headers["x-ccare-session"] == first.headers["x-ccare-session"],
                    "content": raw.parse().choices[0].message.content, "attempts": len(attempts) - before}
tools = [{"type": "function", "function": {"name": "get_weather", "description": "weather",
          "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}}]
messages = [{"role": "user", "content": "weather in Paris?"}]
asked = client.chat.completions.with_raw_response.create(model="fake/model", messages=messages, tools=tools)
call = asked.parse().choices[0].message.tool_calls[0]
messages.append({"role": "assistant", "content": None, "tool_calls": [
    {"id": call.id, "type": "function", "function": {"name": call.function.name, "arguments": call.function.arguments}}]})
messages.append({"role": "tool", "tool_call_id": call.id, "content": "sunny"})
before = len(attempts)
raw = client.chat.completions.with_raw_response.create(model="fake/model", messages=messages, tools=tools)
out["tools"] = {"same": raw.headers["x-ccare-session"] == asked.headers["x-ccare-session"],
                "content": raw.parse().choices[0].message.content, "attempts": len(attempts) - before}
print(json.dumps(out))
"#;

/// GW-3 with the official Python SDK retrying by itself: a 429 in the middle of a
/// conversation, and one on the request carrying tool results, are retried by the SDK
/// and answered in the same session, and the model reads the client's message once:
/// each retried upstream request equals the one the 429 refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gw_3_the_openai_python_sdks_own_retries_mid_conversation_reach_the_model_once() {
    let Some(python) = tokio::task::spawn_blocking(sdk_python).await.unwrap() else {
        return;
    };
    let rig = Rig::start().await;
    rig.fake.push(Reply::text("Hello"));
    rig.fake.push(Reply::rate_limited(1));
    rig.fake.push(Reply::text("Then"));
    rig.fake.push(Reply::Chunks(
        Script::new()
            .tool_call(
                0,
                Some("call_w"),
                Some("get_weather"),
                "{\"city\":\"Paris\"}",
            )
            .finish("tool_calls"),
    ));
    rig.fake.push(Reply::rate_limited(1));
    rig.fake.push(Reply::text("Sunny"));
    let out = run_python(python, SDK_RETRY_SCRIPT, &rig).await;
    assert_eq!(
        out,
        json!({
            "continued": {"same": true, "content": "Then", "attempts": 2},
            "tools": {"same": true, "content": "Sunny", "attempts": 2},
        })
    );
    let requests = rig.fake.requests();
    assert_eq!(requests.len(), 6);
    assert_eq!(requests[2].body["messages"], requests[1].body["messages"]);
    assert_eq!(requests[5].body["messages"], requests[4].body["messages"]);
    let continued = requests[2].body["messages"].to_string();
    assert_eq!(continued.matches("and then?").count(), 1, "{continued}");
    let resumed = requests[5].body["messages"].to_string();
    assert_eq!(resumed.matches("weather in Paris?").count(), 1, "{resumed}");
}

/// The summary the fake model writes for a compaction request (the sections context
/// care's summary check asks for).
const SUMMARY: &str = "## Primary Request and Intent\n- read the seeded history\n## Key Technical Concepts\n(none)\n## Files and Code\n(none)\n## Errors and Fixes\n(none)\n## Pending Jobs\n(none)\n## Current Work\n- reading\n## Next Step\n- continue\n## Critical Context\n(none)";

/// The fake model of the long conversations: a summary for a compaction request, a
/// client tool call when the client's latest message (context care's own notes
/// skipped) is a user turn asking `CALL`, "noted" otherwise.
fn long_conversation_reply(request: &ccare_fake_openai::RecordedRequest) -> Reply {
    if request.header("x-ccare-purpose") == Some("compaction") {
        return Reply::Chunks(Script::new().text(SUMMARY).finish("stop"));
    }
    let latest = request.body["messages"]
        .as_array()
        .into_iter()
        .flatten()
        .rev()
        .find(|message| {
            !message["content"]
                .as_str()
                .is_some_and(|text| text.starts_with("<context-care>"))
        });
    let asks = latest.is_some_and(|message| {
        message["role"] == "user" && message["content"].to_string().contains("CALL")
    });
    if !asks {
        return Reply::text("noted");
    }
    Reply::Chunks(
        Script::new()
            .tool_call(
                0,
                Some(&format!("call_{}", request.body.to_string().len())),
                Some("get_weather"),
                "{\"city\":\"Oslo\"}",
            )
            .finish("tool_calls"),
    )
}

/// Every assistant message with tool calls is followed by one tool message per call,
/// and every tool message answers a call made before it.
fn assert_tool_pairs(messages: &[Value]) {
    let mut open: Vec<String> = Vec::new();
    for message in messages {
        if message["role"] == "tool" {
            let id = message["tool_call_id"].as_str().unwrap().to_owned();
            assert!(
                open.contains(&id),
                "a result without its call: {messages:?}"
            );
            open.retain(|known| *known != id);
            continue;
        }
        assert!(
            open.is_empty(),
            "calls without results {open:?}: {messages:?}"
        );
        for call in message["tool_calls"].as_array().into_iter().flatten() {
            open.push(call["id"].as_str().unwrap().to_owned());
        }
    }
}

/// GW-7 and GW-3 on the fake's 16 000-token window: a long conversation (with client
/// tool rounds) through the gateway until context care compacts; the client never
/// sees an error, the response whose upstream request changed names the operation in
/// `x-ccare-compacted` (the journal's id, as the series shows it), every upstream
/// request stays under H and keeps its tool pairs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gw_7_a_compaction_is_reported_and_upstream_requests_stay_whole() {
    let rig = Rig::start().await;
    rig.fake.respond_with(long_conversation_reply);
    let filler = "The quick brown fox jumps over the lazy dog while the parser reads its input. "
        .repeat(100);
    let mut history = vec![json!({"role": "system", "content": "be brief"})];
    let mut compacted = None;
    let mut session = None;
    for turn in 0..12 {
        let call = if turn % 3 == 1 { " CALL" } else { "" };
        history.push(json!({"role": "user", "content": format!("Turn {turn}{call}: {filler}")}));
        let response = chat(
            &rig,
            &json!({"model": "fake/model", "messages": history, "tools": weather_tool()}),
        )
        .await;
        assert_eq!(response.status().as_u16(), 200, "turn {turn}");
        let id = session_of(&response);
        assert_eq!(session.get_or_insert_with(|| id.clone()), &id);
        let header = response
            .headers()
            .get("x-ccare-compacted")
            .map(|value| value.to_str().unwrap().to_owned());
        let mut answer: Value = response.json().await.unwrap();
        let message = answer["choices"][0]["message"].take();
        history.push(message.clone());
        if let Some(calls) = message["tool_calls"].as_array() {
            for call in calls {
                history
                    .push(json!({"role": "tool", "tool_call_id": call["id"], "content": "sunny"}));
            }
            let response = chat(
                &rig,
                &json!({"model": "fake/model", "messages": history, "tools": weather_tool()}),
            )
            .await;
            assert_eq!(response.status().as_u16(), 200, "turn {turn} results");
            let mut answer: Value = response.json().await.unwrap();
            assert_eq!(answer["choices"][0]["message"]["content"], "noted");
            history.push(answer["choices"][0]["message"].take());
        }
        if let Some(header) = header {
            compacted = Some(header);
            break;
        }
    }
    let compacted = compacted.expect("context care compacted within 12 turns");
    let session = session.unwrap();
    let series: Value = rig
        .get_json(&format!("/api/sessions/{session}/context/series"))
        .await;
    let operations: Vec<String> = series["operations"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|operation| operation["outcome"] == "committed")
        .map(|operation| operation["operationId"].as_str().unwrap().to_owned())
        .collect();
    assert!(!operations.is_empty());
    for id in compacted.split(", ") {
        assert!(
            operations.contains(&id.to_owned()),
            "{id} not in {operations:?}"
        );
    }
    for point in series["points"].as_array().unwrap() {
        assert!(
            point["inputTokens"].as_i64().unwrap()
                <= point["budget"]["hardInput"].as_i64().unwrap(),
            "{point}"
        );
    }
    for request in rig.fake.requests() {
        if request.header("x-ccare-purpose") == Some("conversation") {
            assert_tool_pairs(request.body["messages"].as_array().unwrap());
        }
    }
}

/// The `openai` Node SDK the Node client test pins (the newest release that still
/// runs on Node 20; 7.x wants Node 22).
const NODE_SDK: &str = "6.49.0";

/// The `node_modules` folder holding the pinned Node SDK, installed under `target/`
/// with npm when missing; `None` (with a printed note) when Node or npm is not there
/// and this is not CI.
fn sdk_node() -> Option<std::path::PathBuf> {
    let prefix = target_dir().join("gateway-node");
    let modules = prefix.join("node_modules");
    let ready = |modules: &std::path::Path| {
        std::fs::read_to_string(modules.join("openai/package.json"))
            .ok()
            .and_then(|text| serde_json::from_str::<Value>(&text).ok())
            .is_some_and(|package| package["version"] == NODE_SDK)
            && std::process::Command::new("node")
                .arg("--version")
                .output()
                .is_ok_and(|output| output.status.success())
    };
    if ready(&modules) {
        return Some(modules);
    }
    let installed = std::process::Command::new("npm")
        .args(["install", "--silent", "--no-audit", "--no-fund", "--prefix"])
        .arg(&prefix)
        .arg(format!("openai@{NODE_SDK}"))
        .status()
        .is_ok_and(|status| status.success());
    if installed && ready(&modules) {
        return Some(modules);
    }
    assert!(
        std::env::var_os("CI").is_none(),
        "CI must run the openai Node SDK test: could not install openai@{NODE_SDK} in {}",
        prefix.display()
    );
    eprintln!(
        "note: skipping the openai Node SDK test: node, npm or openai@{NODE_SDK} is not available"
    );
    None
}

/// A script under `tests/it/clients/`.
pub(crate) fn client_script(name: &str) -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/it/clients")
        .join(name)
}

/// Runs `program script` against the rig with `envs`, asserting it exits 0, and
/// decodes the one JSON object it prints.
pub(crate) async fn run_client(
    rig: &Rig,
    program: std::path::PathBuf,
    script: &str,
    envs: Vec<(&'static str, String)>,
) -> Value {
    run_program(rig, program, vec![client_script(script).into()], envs).await
}

/// Runs `program args` against the rig (`GW_BASE`, `GW_TOKEN`, then `envs`), asserting
/// it exits 0, and decodes the one JSON object it prints.
async fn run_program(
    rig: &Rig,
    program: std::path::PathBuf,
    args: Vec<std::ffi::OsString>,
    envs: Vec<(&'static str, String)>,
) -> Value {
    let (base, token) = (rig.base.clone(), rig.token.clone());
    let output = tokio::task::spawn_blocking(move || {
        std::process::Command::new(program)
            .args(args)
            .env("GW_BASE", base)
            .env("GW_TOKEN", token)
            .envs(envs)
            .output()
            .unwrap()
    })
    .await
    .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    serde_json::from_str(stdout.trim()).unwrap_or_else(|error| panic!("{error}: {stdout}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gw_1_the_openai_node_sdk_talks_to_the_gateway() {
    let Some(modules) = tokio::task::spawn_blocking(sdk_node).await.unwrap() else {
        return;
    };
    let rig = Rig::start().await;
    push_sdk_replies(&rig);
    let out = run_client(
        &rig,
        "node".into(),
        "node_sdk.cjs",
        vec![("NODE_PATH", modules.display().to_string())],
    )
    .await;
    assert_eq!(out["version"], NODE_SDK);
    let session = out["first"]["session"].as_str().unwrap();
    assert_eq!(
        out["first"],
        json!({"session": session, "content": "Hello big world", "finish": "stop", "usage": 13, "object": "chat.completion"})
    );
    // The streamed continuation: same session, and the last chunk before [DONE] is
    // the usage chunk with `choices: []`.
    assert_eq!(
        out["second"],
        json!({"session": session, "content": "Fine thanks", "finish": "stop", "lastChoices": [], "lastUsage": 12})
    );
    // A result for a call the client never got: refused once, not retried; the
    // upstream never saw it (3 requests so far: two answers and the keyed one).
    assert_eq!(
        out["refused"],
        json!({"status": 400, "code": "TOOL_RESULTS_MISMATCH", "attempts": 1})
    );
    // The upstream's 429 passes through with retry-after, and the SDK retries it.
    assert_eq!(
        out["retried"],
        json!({"content": "after retry", "attempts": 2})
    );
    // A two-round client tool loop, streamed then not.
    assert_eq!(
        out["tools"]["calls"],
        json!([
            {"id": "call_p", "name": "get_weather", "arguments": "{\"city\":\"Paris\"}"},
            {"id": "call_r", "name": "get_weather", "arguments": "{\"city\":\"Rome\"}"},
        ])
    );
    assert_eq!(out["tools"]["indexes"], json!([0, 1]));
    assert_eq!(out["tools"]["finish"], "tool_calls");
    assert_eq!(out["tools"]["answer"], "Sunny in both");
    let tool_log = export(&rig, out["tools"]["session"].as_str().unwrap()).await;
    assert_eq!(tool_log.matches(r#""type":"tool/result""#).count(), 2);
    assert!(tool_log.contains("sunny in Paris") && tool_log.contains("sunny in Rome"));
    assert_eq!(tool_log.matches(r#""type":"turn/end""#).count(), 1);
    // Upstream: 2 answers + keyed + 429 + its retry + 2 tool rounds; the refused
    // request never reached it.
    let requests = rig.fake.requests();
    assert_eq!(requests.len(), 7);
    assert!(
        requests
            .iter()
            .all(|request| !request.raw_body.contains("never_sent")),
        "the refused request went upstream"
    );
    let exported = export(&rig, session).await;
    assert_eq!(exported.matches(r#""type":"turn/end""#).count(), 2);
}

/// The messages of an upstream request as the gateway wrote them, byte for byte.
#[derive(serde::Deserialize)]
struct UpstreamMessages<'a> {
    #[serde(borrow)]
    messages: Vec<&'a serde_json::value::RawValue>,
}

/// GW-3 and GW-7 with a real client on the fake's 16 000-token window: fourteen long
/// turns (client tool rounds among them) through the Python SDK. Context care
/// compacts; the client never sees an error and stays in one session; every upstream
/// request stays under H and keeps its tool pairs; and each conversation request's
/// messages start, byte for byte, with the previous one's (the prompt cache holds),
/// except right after a compaction, which the response reports in
/// `x-ccare-compacted` with an operation the series committed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gw_7_a_long_conversation_through_the_python_sdk_compacts_and_keeps_its_prefix() {
    let Some(python) = tokio::task::spawn_blocking(sdk_python).await.unwrap() else {
        return;
    };
    let rig = Rig::start().await;
    rig.fake.respond_with(long_conversation_reply);
    let seen = run_client(
        &rig,
        python,
        "long_conversation.py",
        vec![("TURNS", "14".to_owned())],
    )
    .await;
    let seen = seen.as_array().unwrap();
    let session = seen[0]["session"].as_str().unwrap();
    let mut reported = Vec::new();
    for (index, response) in seen.iter().enumerate() {
        assert_eq!(response["session"], session, "response {index}");
        let finish = response["finish"].as_str().unwrap();
        assert!(finish == "stop" || finish == "tool_calls", "{response}");
        if let Some(ids) = response["compacted"].as_str() {
            reported.push((index, ids.to_owned()));
        }
    }
    // Fourteen turns, five of them with a client tool round (turns 1, 4, 7, 10, 13).
    assert_eq!(seen.len(), 19, "{seen:?}");
    let rounds = seen
        .iter()
        .filter(|response| response["finish"] == "tool_calls")
        .count();
    assert_eq!(rounds, 5, "{seen:?}");
    assert!(!reported.is_empty(), "no compaction in {seen:?}");

    // The reported operations are the series' committed ones, and every point stayed
    // under the hard input budget.
    let series: Value = rig
        .get_json(&format!("/api/sessions/{session}/context/series"))
        .await;
    let committed: Vec<String> = series["operations"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|operation| operation["outcome"] == "committed")
        .map(|operation| operation["operationId"].as_str().unwrap().to_owned())
        .collect();
    let reported_ids: Vec<String> = reported
        .iter()
        .flat_map(|(_, ids)| ids.split(", ").map(str::to_owned))
        .collect();
    assert_eq!(reported_ids, committed, "{reported:?}");
    for point in series["points"].as_array().unwrap() {
        assert!(
            point["inputTokens"].as_i64().unwrap()
                <= point["budget"]["hardInput"].as_i64().unwrap(),
            "{point}"
        );
    }

    // Upstream: one conversation request per client request, each keeping its tool
    // pairs; the byte prefix breaks exactly where a compaction was reported.
    let requests = rig.fake.requests();
    let conversation: Vec<_> = requests
        .iter()
        .filter(|request| request.header("x-ccare-purpose") == Some("conversation"))
        .collect();
    assert_eq!(conversation.len(), seen.len());
    let mut breaks = Vec::new();
    for (index, request) in conversation.iter().enumerate() {
        assert_tool_pairs(request.body["messages"].as_array().unwrap());
        if index == 0 {
            continue;
        }
        let before: UpstreamMessages =
            serde_json::from_str(&conversation[index - 1].raw_body).unwrap();
        let after: UpstreamMessages = serde_json::from_str(&request.raw_body).unwrap();
        let kept = before.messages.len() <= after.messages.len()
            && before
                .messages
                .iter()
                .zip(&after.messages)
                .all(|(old, new)| old.get() == new.get());
        if !kept {
            breaks.push(index);
        }
    }
    let reported_at: Vec<usize> = reported.iter().map(|(index, _)| *index).collect();
    assert_eq!(breaks, reported_at, "prefix breaks vs reported compactions");
}

/// The events of `session`'s export, parsed.
async fn exported_events(rig: &Rig, session: &str) -> Vec<Value> {
    crate::events::export(rig, session)
        .await
        .lines()
        .skip(1)
        .map(|line| serde_json::from_str(line).unwrap())
        .collect()
}

/// Answers "hi" (system prompt "be brief") with "Hello"; returns the session and the
/// client's next transcript: the answer, then "and then?".
async fn answered_hello_then(rig: &Rig) -> (String, Value) {
    rig.fake.push(Reply::text("Hello"));
    let mut messages = conversation("be brief", "hi");
    let first = chat(rig, &json!({"model": "fake/model", "messages": messages})).await;
    let session = session_of(&first);
    messages.as_array_mut().unwrap().extend([
        json!({"role": "assistant", "content": "Hello"}),
        json!({"role": "user", "content": "and then?"}),
    ]);
    (session, messages)
}

/// GW-3: only messages the session has not seen are appended. A continuing request
/// whose turn failed upstream (429, passed through) and that the client's SDK sends
/// again gets its answer in the same session, and the model reads the message once:
/// the retried upstream request carries exactly the messages of the failed one. The
/// log keeps the resend off the surface, naming the message it resends; the
/// conversation goes on from the answer.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gw_3_a_retry_after_an_upstream_429_sends_the_message_once() {
    let rig = Rig::start().await;
    let (session, mut messages) = answered_hello_then(&rig).await;
    let body = json!({"model": "fake/model", "messages": messages});
    // Twice: an SDK retries more than once.
    for _ in 0..2 {
        rig.fake.push(Reply::rate_limited(1));
        chat_in(&rig, &body, 429, &session).await;
    }
    rig.fake.push(Reply::text("Then"));
    let retried = chat_in(&rig, &body, 200, &session).await;
    assert_eq!(content_of(retried).await, "Then");
    let requests = rig.fake.requests();
    assert_eq!(requests.len(), 4);
    let sent = |n: usize| requests[n].body["messages"].clone();
    assert_eq!(sent(2), sent(1));
    assert_eq!(sent(3), sent(1));
    assert_eq!(
        sent(3).as_array().unwrap()[1..],
        [
            json!({"role": "user", "content": "be brief\n\nhi"}),
            json!({"role": "assistant", "content": "Hello"}),
            json!({"role": "user", "content": "and then?"}),
        ]
    );
    // The log: the message once on the surface, then two resends off it.
    let users: Vec<Value> = exported_events(&rig, &session)
        .await
        .into_iter()
        .filter(|event| event["type"] == "user/message")
        .collect();
    assert_eq!(users.len(), 4, "{users:?}");
    let original = &users[1];
    assert_eq!(original["surface"], json!({"op": "append"}), "{original}");
    for resend in &users[2..] {
        assert_eq!(resend["surface"], Value::Null, "{resend}");
        assert_eq!(
            resend["data"]["message"]["resends"],
            original["data"]["message"]["id"]
        );
        assert_eq!(
            resend["data"]["message"]["content"],
            original["data"]["message"]["content"]
        );
    }
    // The conversation goes on from the answer, in the same session.
    messages.as_array_mut().unwrap().extend([
        json!({"role": "assistant", "content": "Then"}),
        json!({"role": "user", "content": "more"}),
    ]);
    rig.fake.push(Reply::text("More"));
    let next = json!({"model": "fake/model", "messages": messages});
    chat_in(&rig, &next, 200, &session).await;
    let last = rig.fake.requests()[4].body["messages"].clone();
    assert_eq!(
        last.as_array().unwrap()[1..],
        [
            json!({"role": "user", "content": "be brief\n\nhi"}),
            json!({"role": "assistant", "content": "Hello"}),
            json!({"role": "user", "content": "and then?"}),
            json!({"role": "assistant", "content": "Then"}),
            json!({"role": "user", "content": "more"}),
        ]
    );
}

/// GW-3 for tool results: a request carrying the results of the client's tool calls
/// whose turn then failed upstream (429), sent again by the SDK, runs that turn again
/// with the results in place, in the same session, instead of being refused for
/// results of calls already answered; the retried upstream request equals the failed
/// one, and the client's tools are offered again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gw_3_a_retry_of_tool_results_whose_turn_failed_runs_the_turn_again() {
    let rig = Rig::start().await;
    rig.fake
        .push(Reply::Chunks(paris_and_rome_calls().finish("tool_calls")));
    let mut history = conversation("be brief", "weather?");
    let session = ask_weather(&rig, &mut history).await;
    let messages = history.as_array_mut().unwrap();
    messages.push(json!({"role": "tool", "tool_call_id": "call_2", "content": "sunny in Rome"}));
    messages.push(json!({"role": "tool", "tool_call_id": "call_1", "content": "sunny in Paris"}));
    let body = json!({"model": "fake/model", "messages": history, "tools": weather_tool()});
    rig.fake.push(Reply::rate_limited(1));
    chat_in(&rig, &body, 429, &session).await;
    rig.fake.push(Reply::text("Both sunny"));
    let retried = chat_in(&rig, &body, 200, &session).await;
    assert_eq!(content_of(retried).await, "Both sunny");
    let requests = rig.fake.requests();
    assert_eq!(requests.len(), 3);
    assert_eq!(requests[2].body["messages"], requests[1].body["messages"]);
    assert_eq!(requests[2].body["tools"], requests[1].body["tools"]);
    let sent = requests[2].body["messages"].as_array().unwrap();
    assert_eq!(
        sent.iter()
            .filter(|message| message["role"] == "user")
            .count(),
        1
    );
    assert_eq!(sent.last().unwrap()["role"], "tool", "{sent:?}");
    // The log: the question once on the surface, the retry a resend naming it.
    let users: Vec<Value> = exported_events(&rig, &session)
        .await
        .into_iter()
        .filter(|event| event["type"] == "user/message")
        .collect();
    assert_eq!(users.len(), 2, "{users:?}");
    assert_eq!(users[1]["surface"], Value::Null);
    assert_eq!(
        users[1]["data"]["message"]["resends"],
        users[0]["data"]["message"]["id"]
    );
}

/// GW-3 for a new conversation found by its messages alone (no key): its first turn
/// refused upstream (429) and the SDK's retry of the same request go to one session,
/// where the message is read once; nothing is left behind but that session. A
/// different new conversation still starts its own.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gw_3_a_retried_first_message_stays_in_its_session() {
    let rig = Rig::start().await;
    let body = json!({"model": "fake/model", "messages": conversation("be brief", "hi")});
    rig.fake.push(Reply::rate_limited(1));
    let failed = chat(&rig, &body).await;
    assert_eq!(failed.status().as_u16(), 429);
    let session = session_of(&failed);
    rig.fake.push(Reply::rate_limited(1));
    chat_in(&rig, &body, 429, &session).await;
    rig.fake.push(Reply::text("Hello"));
    let answered = chat_in(&rig, &body, 200, &session).await;
    assert_eq!(content_of(answered).await, "Hello");
    let requests = rig.fake.requests();
    assert_eq!(requests.len(), 3);
    assert_eq!(requests[1].body["messages"], requests[0].body["messages"]);
    assert_eq!(requests[2].body["messages"], requests[0].body["messages"]);
    let listed: Value = rig.get_json("/api/sessions").await;
    let ids: Vec<&str> = listed["sessions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|summary| summary["id"].as_str().unwrap())
        .collect();
    assert_eq!(ids, [session.as_str()]);
    // The conversation goes on in it, and another conversation is another session.
    let mut messages = conversation("be brief", "hi");
    messages.as_array_mut().unwrap().extend([
        json!({"role": "assistant", "content": "Hello"}),
        json!({"role": "user", "content": "more"}),
    ]);
    rig.fake.push(Reply::text("More"));
    chat_in(
        &rig,
        &json!({"model": "fake/model", "messages": messages}),
        200,
        &session,
    )
    .await;
    rig.fake.push(Reply::text("Other"));
    let other = chat(
        &rig,
        &json!({"model": "fake/model", "messages": conversation("be brief", "hello")}),
    )
    .await;
    assert_ne!(session_of(&other), session);
    // The same first message once answered is a new conversation again (a regenerate
    // of a first answer starts over, as before).
    rig.fake.push(Reply::text("Hello again"));
    let again = chat(&rig, &body).await;
    assert_eq!(again.status().as_u16(), 200);
    assert_ne!(session_of(&again), session);
}

/// GW-3: after a failed turn the client may send its message again followed by a new
/// one (its user typed on after the error): only the new one is entered, so the model
/// reads the first once, then the second.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gw_3_a_failed_message_sent_again_with_a_new_one_is_not_entered_twice() {
    let rig = Rig::start().await;
    let (session, mut messages) = answered_hello_then(&rig).await;
    rig.fake.push(Reply::rate_limited(1));
    let failed = json!({"model": "fake/model", "messages": messages});
    chat_in(&rig, &failed, 429, &session).await;
    messages
        .as_array_mut()
        .unwrap()
        .push(json!({"role": "user", "content": "hello?"}));
    rig.fake.push(Reply::text("Here"));
    let next = json!({"model": "fake/model", "messages": messages});
    let answered = chat_in(&rig, &next, 200, &session).await;
    assert_eq!(content_of(answered).await, "Here");
    let requests = rig.fake.requests();
    let sent = requests.last().unwrap().body["messages"].clone();
    assert_eq!(
        sent.as_array().unwrap()[1..],
        [
            json!({"role": "user", "content": "be brief\n\nhi"}),
            json!({"role": "assistant", "content": "Hello"}),
            json!({"role": "user", "content": "and then?"}),
            json!({"role": "user", "content": "hello?"}),
        ]
    );
}
