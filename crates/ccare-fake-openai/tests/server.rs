//! The fake server over a real socket, driven with reqwest as the LLM adapter will be.

#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use std::time::{Duration, Instant};

use ccare_fake_openai::{
    End, FakeServer, NO_REPLY_LEFT_BODY, Reply, Script, deepseek_usage, openai_usage,
};
use serde_json::{Value, json};

fn client() -> reqwest::Client {
    // reqwest is built without a TLS provider (see the workspace Cargo.toml).
    let _ = rustls::crypto::ring::default_provider().install_default();
    reqwest::Client::builder().no_proxy().build().unwrap()
}

async fn post_chat(server: &FakeServer, body: Value) -> reqwest::Response {
    client()
        .post(format!("{}/chat/completions", server.base_url()))
        .header("authorization", "Bearer sk-test")
        .header("x-ccare-purpose", "turn")
        .json(&body)
        .send()
        .await
        .unwrap()
}

fn stream_request() -> Value {
    json!({"model": "fake-model", "stream": true, "messages": [{"role": "user", "content": "hi"}]})
}

/// Splits complete SSE events (`data: ...\n\n`) off the front of `buffer`.
fn take_events(buffer: &mut String) -> Vec<String> {
    let mut events = Vec::new();
    while let Some(end) = buffer.find("\n\n") {
        let event: String = buffer.drain(..end + 2).collect();
        events.push(event.trim_end().trim_start_matches("data: ").to_owned());
    }
    events
}

/// Every event of the body, each with the time it was complete at the client.
async fn read_events(mut response: reqwest::Response) -> Vec<(String, Instant)> {
    let mut buffer = String::new();
    let mut events = Vec::new();
    while let Some(bytes) = response.chunk().await.unwrap() {
        buffer.push_str(std::str::from_utf8(&bytes).unwrap());
        let now = Instant::now();
        events.extend(
            take_events(&mut buffer)
                .into_iter()
                .map(|event| (event, now)),
        );
    }
    assert_eq!(buffer, "", "a partial event was left over");
    events
}

fn without_created(mut chunk: Value) -> Value {
    assert!(chunk["created"].as_u64().unwrap() > 1_700_000_000);
    chunk["created"] = json!(0);
    chunk
}

/// Proves: real `chat.completion.chunk` objects, role on the first delta only, usage
/// chunk with `choices: []`, `[DONE]` last, SSE headers; and each chunk is flushed as
/// produced, so a scripted delay shows up between arrivals at the client.
#[tokio::test]
async fn streaming_text_arrives_chunk_by_chunk_with_delays() {
    let server = FakeServer::start().await.unwrap();
    server.push(
        Script::new()
            .text("Hel")
            .delay_ms(300)
            .text("lo")
            .finish("stop")
            .usage(openai_usage(5, 0, 2, 0)),
    );
    let started = Instant::now();
    let response = post_chat(&server, stream_request()).await;
    assert_eq!(response.status(), 200);
    assert_eq!(response.headers()["content-type"], "text/event-stream");
    let events = read_events(response).await;

    let texts: Vec<&str> = events.iter().map(|(event, _)| event.as_str()).collect();
    assert_eq!(texts.len(), 5, "{texts:?}");
    let chunks: Vec<Value> = texts[..4]
        .iter()
        .map(|text| without_created(serde_json::from_str(text).unwrap()))
        .collect();
    let chunk = |delta: Value, finish_reason: Value| {
        json!({
            "id": "chatcmpl-fake-1", "object": "chat.completion.chunk", "created": 0,
            "model": "fake-model",
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish_reason}],
        })
    };
    assert_eq!(
        chunks,
        vec![
            chunk(json!({"role": "assistant", "content": "Hel"}), Value::Null),
            chunk(json!({"content": "lo"}), Value::Null),
            chunk(json!({}), json!("stop")),
            json!({
                "id": "chatcmpl-fake-1", "object": "chat.completion.chunk", "created": 0,
                "model": "fake-model", "choices": [], "usage": openai_usage(5, 0, 2, 0),
            }),
        ]
    );
    assert_eq!(texts[4], "[DONE]");

    let first_at = events[0].1;
    let second_at = events[1].1;
    assert!(
        first_at.duration_since(started) < Duration::from_millis(250),
        "the first chunk waited for the delay: {:?}",
        first_at.duration_since(started)
    );
    assert!(
        second_at.duration_since(first_at) >= Duration::from_millis(200),
        "the delay was not observable: {:?}",
        second_at.duration_since(first_at)
    );
}

/// Proves: without `"stream": true` the same steps come back as one `chat.completion`
/// with concatenated content and reasoning, tool calls merged by index, the last
/// finish reason and the usage; delays are still waited for.
#[tokio::test]
async fn non_streaming_request_gets_the_assembled_completion() {
    let server = FakeServer::start().await.unwrap();
    server.push(
        Script::new()
            .model("deepseek-reasoner")
            .reasoning("think ")
            .reasoning("hard")
            .text("Hel")
            .delay_ms(100)
            .text("lo")
            .tool_call(1, Some("call_b"), Some("write"), "{\"p\":")
            .tool_call(0, Some("call_a"), Some("read"), "{}")
            .tool_call(1, None, None, "1}")
            .finish("tool_calls")
            .usage(deepseek_usage(3, 4, 5, 2)),
    );
    let started = Instant::now();
    let response = post_chat(
        &server,
        json!({"model": "deepseek-reasoner", "messages": []}),
    )
    .await;
    assert!(started.elapsed() >= Duration::from_millis(100));
    assert_eq!(response.status(), 200);
    assert_eq!(response.headers()["content-type"], "application/json");
    let completion = without_created(response.json().await.unwrap());
    assert_eq!(
        completion,
        json!({
            "id": "chatcmpl-fake-1",
            "object": "chat.completion",
            "created": 0,
            "model": "deepseek-reasoner",
            "choices": [{
                "index": 0,
                "message": {
                    "role": "assistant",
                    "content": "Hello",
                    "reasoning_content": "think hard",
                    "tool_calls": [
                        {"id": "call_a", "type": "function", "function": {"name": "read", "arguments": "{}"}},
                        {"id": "call_b", "type": "function", "function": {"name": "write", "arguments": "{\"p\":1}"}},
                    ],
                },
                "finish_reason": "tool_calls",
            }],
            "usage": {
                "prompt_tokens": 7,
                "completion_tokens": 5,
                "total_tokens": 12,
                "prompt_cache_hit_tokens": 3,
                "prompt_cache_miss_tokens": 4,
                "completion_tokens_details": {"reasoning_tokens": 2},
            },
        })
    );
}

/// Proves: DeepSeek placement puts the usage on the finish chunk and sends no
/// `choices: []` chunk; reasoning deltas carry `content: null`.
#[tokio::test]
async fn deepseek_usage_rides_on_the_finish_chunk() {
    let server = FakeServer::start().await.unwrap();
    server.push(
        Script::new()
            .deepseek_usage(true)
            .reasoning("r")
            .text("a")
            .usage(deepseek_usage(1, 2, 3, 1))
            .finish("stop"),
    );
    let events = read_events(post_chat(&server, stream_request()).await).await;
    let texts: Vec<&str> = events.iter().map(|(event, _)| event.as_str()).collect();
    assert_eq!(texts.len(), 4, "{texts:?}");
    let first: Value = serde_json::from_str(texts[0]).unwrap();
    assert_eq!(
        first["choices"][0]["delta"],
        json!({"role": "assistant", "content": null, "reasoning_content": "r"})
    );
    let finish: Value = serde_json::from_str(texts[2]).unwrap();
    assert_eq!(finish["choices"][0]["finish_reason"], "stop");
    assert_eq!(finish["usage"], deepseek_usage(1, 2, 3, 1));
    assert_eq!(texts[3], "[DONE]");
}

/// Proves: an HTTP reply keeps its status, extra headers and body; JSON bodies get
/// `application/json`; the convenience errors have OpenAI's shape.
#[tokio::test]
async fn http_errors_carry_status_headers_and_body() {
    let server = FakeServer::start().await.unwrap();
    server.push(Reply::rate_limited(7));
    server.push(Reply::overflow());
    server.push(Reply::Http {
        status: 503,
        headers: vec![("x-custom".to_owned(), "1".to_owned())],
        body: "upstream down".to_owned(),
    });

    let response = post_chat(&server, stream_request()).await;
    assert_eq!(response.status(), 429);
    assert_eq!(response.headers()["retry-after"], "7");
    assert_eq!(response.headers()["content-type"], "application/json");
    let body: Value = response.json().await.unwrap();
    assert_eq!(body["error"]["code"], "rate_limit_exceeded");

    let response = post_chat(&server, stream_request()).await;
    assert_eq!(response.status(), 400);
    let body: Value = response.json().await.unwrap();
    assert_eq!(body["error"]["code"], "context_length_exceeded");
    assert_eq!(body["error"]["type"], "invalid_request_error");
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .starts_with("This model's maximum context length is 8192 tokens")
    );

    let response = post_chat(&server, stream_request()).await;
    assert_eq!(response.status(), 503);
    assert_eq!(response.headers()["x-custom"], "1");
    assert_eq!(
        response.headers()["content-type"],
        "text/plain; charset=utf-8"
    );
    assert_eq!(response.text().await.unwrap(), "upstream down");
    assert_eq!(server.remaining(), 0);
}

/// Proves: `End::Disconnect` delivers the chunks before it, then the client's body read
/// fails (a transport error), rather than ending cleanly; no `[DONE]` is sent.
#[tokio::test]
async fn disconnect_is_a_client_side_body_error_after_the_first_chunks() {
    let server = FakeServer::start().await.unwrap();
    server.push(Script::new().text("a").text("b").end(End::Disconnect));
    let mut response = post_chat(&server, stream_request()).await;
    assert_eq!(response.status(), 200);
    let mut received = String::new();
    let error = loop {
        match response.chunk().await {
            Ok(Some(bytes)) => received.push_str(std::str::from_utf8(&bytes).unwrap()),
            Ok(None) => panic!("clean end of body after {received:?}"),
            Err(error) => break error,
        }
    };
    assert!(error.is_body() || error.is_decode(), "{error:?}");
    let events = take_events(&mut received);
    assert_eq!(events.len(), 2, "{events:?}");
    assert!(events[0].contains(r#""content":"a""#));
    assert!(events[1].contains(r#""content":"b""#));
}

/// Proves: the same for a non-streaming request: half a JSON body, then an error.
#[tokio::test]
async fn disconnect_without_stream_is_a_body_error() {
    let server = FakeServer::start().await.unwrap();
    server.push(
        Script::new()
            .text("abc")
            .finish("stop")
            .end(End::Disconnect),
    );
    let response = post_chat(&server, json!({"messages": []})).await;
    assert_eq!(response.status(), 200);
    assert!(response.text().await.is_err());
}

/// Proves: `End::Close` ends the body cleanly but without `[DONE]`.
#[tokio::test]
async fn close_ends_cleanly_without_done() {
    let server = FakeServer::start().await.unwrap();
    server.push(Script::new().text("a").end(End::Close));
    let events = read_events(post_chat(&server, stream_request()).await).await;
    assert_eq!(events.len(), 1);
    assert!(events[0].0.contains(r#""content":"a""#));
}

/// Proves: `End::Stall` keeps the connection open with nothing more to read (a 300 ms
/// read timeout fires), and dropping the server then aborts the connection.
#[tokio::test]
async fn stall_keeps_the_client_waiting_until_the_server_is_dropped() {
    let server = FakeServer::start().await.unwrap();
    server.push(Script::new().text("a").end(End::Stall));
    let mut response = post_chat(&server, stream_request()).await;
    let first = response.chunk().await.unwrap().unwrap();
    assert!(
        std::str::from_utf8(&first)
            .unwrap()
            .contains(r#""content":"a""#)
    );
    let stalled = tokio::time::timeout(Duration::from_millis(300), response.chunk()).await;
    assert!(stalled.is_err(), "expected a read timeout, got {stalled:?}");

    drop(server);
    let after_drop = tokio::time::timeout(Duration::from_secs(5), response.chunk())
        .await
        .expect("the connection stayed open after the server was dropped");
    assert!(
        after_drop.is_err(),
        "expected a body error, got {after_drop:?}"
    );
}

/// Proves: raw steps reach the client byte for byte.
#[tokio::test]
async fn raw_steps_are_sent_verbatim() {
    let server = FakeServer::start().await.unwrap();
    server.push(
        Script::new()
            .raw_bytes(b"\xEF\xBB\xBF: keep-alive\r\n\r\n".to_vec())
            .raw("{not json")
            .end(End::Close),
    );
    let response = post_chat(&server, stream_request()).await;
    let body = response.bytes().await.unwrap();
    assert_eq!(
        &body[..],
        b"\xEF\xBB\xBF: keep-alive\r\n\r\ndata: {not json\n\n"
    );
}

/// Proves: every request is recorded in order, before the reply, with method, path,
/// lowercased headers (including `authorization` and `x-ccare-purpose`), the JSON body
/// and the raw body; replies are taken FIFO; `GET /v1/models` lists `fake-model`.
#[tokio::test]
async fn requests_are_recorded_with_headers_and_body() {
    let server = FakeServer::start().await.unwrap();
    server.push(Reply::text("one"));
    server.push(Reply::text("two"));

    let first = post_chat(&server, stream_request())
        .await
        .text()
        .await
        .unwrap();
    let second = post_chat(&server, json!({"messages": [], "n": 2})).await;
    let second: Value = second.json().await.unwrap();
    let models: Value = client()
        .get(format!("{}/models", server.base_url()))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert!(first.contains(r#""content":"one""#));
    assert_eq!(second["choices"][0]["message"]["content"], "two");
    assert_eq!(second["id"], "chatcmpl-fake-2");
    assert_eq!(models["data"][0]["id"], "fake-model");

    let requests = server.wait_for_requests(3, Duration::from_secs(2)).await;
    assert_eq!(requests.len(), 3);
    let methods_and_paths: Vec<(&str, &str)> = requests
        .iter()
        .map(|request| (request.method.as_str(), request.path.as_str()))
        .collect();
    assert_eq!(
        methods_and_paths,
        vec![
            ("POST", "/v1/chat/completions"),
            ("POST", "/v1/chat/completions"),
            ("GET", "/v1/models"),
        ]
    );
    let request = &requests[0];
    assert_eq!(request.header("authorization"), Some("Bearer sk-test"));
    assert_eq!(request.header("X-Ccare-Purpose"), Some("turn"));
    assert_eq!(request.header("content-type"), Some("application/json"));
    assert!(
        request
            .headers
            .iter()
            .all(|(name, _)| *name == name.to_ascii_lowercase())
    );
    assert_eq!(request.body, stream_request());
    assert_eq!(request.raw_body, stream_request().to_string());
    assert_eq!(requests[1].body, json!({"messages": [], "n": 2}));
    assert_eq!(requests[2].body, Value::Null);
    assert!(requests[0].at <= requests[1].at && requests[1].at <= requests[2].at);
}

/// Proves: with no reply queued the server answers 500 with the documented body and
/// still records the request.
#[tokio::test]
async fn empty_queue_is_a_500_and_the_request_is_recorded() {
    let server = FakeServer::start().await.unwrap();
    let response = post_chat(&server, stream_request()).await;
    assert_eq!(response.status(), 500);
    assert_eq!(response.text().await.unwrap(), NO_REPLY_LEFT_BODY);
    let requests = server.requests();
    assert_eq!(requests.len(), 1);
    assert_eq!(requests[0].body, stream_request());
}

/// Proves: with `keep_requests(false)` requests are answered and counted but not kept;
/// turned back on, the next ones are kept again.
#[tokio::test]
async fn requests_not_kept_are_still_answered_and_counted() {
    let server = FakeServer::start().await.unwrap();
    server.keep_requests(false);
    server.push(Reply::text("one"));
    assert_eq!(post_chat(&server, stream_request()).await.status(), 200);
    let started = Instant::now();
    let kept = server.wait_for_requests(1, Duration::from_secs(2)).await;
    assert!(kept.is_empty());
    // Counted: the wait ended on the count, not on its two-second timeout.
    assert!(started.elapsed() < Duration::from_secs(2));

    server.keep_requests(true);
    let response = post_chat(&server, json!({"messages": [], "n": 2})).await;
    assert_eq!(response.status(), 500);
    let kept = server.wait_for_requests(2, Duration::from_secs(2)).await;
    assert_eq!(kept.len(), 1);
    assert_eq!(kept[0].body, json!({"messages": [], "n": 2}));
}

/// Proves: `wait_for_requests` returns what arrived when it times out.
#[tokio::test]
async fn wait_for_requests_times_out_with_what_it_has() {
    let server = FakeServer::start().await.unwrap();
    let started = Instant::now();
    let requests = server
        .wait_for_requests(1, Duration::from_millis(100))
        .await;
    assert!(requests.is_empty());
    assert!(started.elapsed() >= Duration::from_millis(100));
}

/// Proves: `Reply::text` splits after spaces and ends with stop, usage and `[DONE]`.
#[tokio::test]
async fn reply_text_is_a_simple_stream() {
    let server = FakeServer::start().await.unwrap();
    server.push(Reply::text("Hello big world"));
    let events = read_events(post_chat(&server, stream_request()).await).await;
    let contents: Vec<Value> = events
        .iter()
        .filter_map(|(event, _)| serde_json::from_str::<Value>(event).ok())
        .map(|chunk| {
            chunk["choices"]
                .get(0)
                .map(|choice| choice["delta"]["content"].clone())
                .unwrap_or(Value::Null)
        })
        .collect();
    assert_eq!(
        contents,
        vec![
            json!("Hello "),
            json!("big "),
            json!("world"),
            Value::Null,
            Value::Null
        ]
    );
    assert_eq!(events.last().unwrap().0, "[DONE]");
    let usage: Value = serde_json::from_str(&events[4].0).unwrap();
    assert_eq!(usage["usage"], openai_usage(10, 0, 3, 0));
}
