//! The OpenAI-compatible / DeepSeek adapter against the in-process fake server
//! (spec H-LLM-3 .. H-LLM-7): assembled blocks, usage, error codes, retries, partial
//! output on disconnect, idle timeout, cancellation, and what goes over the wire.

#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use std::sync::Arc;
use std::time::{Duration, Instant};

use ccare_core::{
    ContentBlock, FailureCode, Message, ReasoningBlock, ToolCallBlock, ToolResultBlock,
};
use ccare_fake_openai::{End, FakeServer, Reply, Script, deepseek_usage, openai_usage};
use ccare_llm::{
    Assembled, Assembler, CallConfig, CancellationToken, Chunk, Finish, Llm, LlmConfig,
    ProviderConfig, ProviderKind, Purpose, RequestMessage, TokenUsage, ToolSpec,
};
use futures_util::StreamExt;
use serde_json::json;

fn llm_for(
    server: &FakeServer,
    kind: ProviderKind,
    tweak: impl FnOnce(&mut ProviderConfig),
) -> Llm {
    let mut provider = ProviderConfig::new(kind);
    provider.base_url = Some(server.base_url());
    provider.api_key_env = Some("FAKE_KEY".into());
    tweak(&mut provider);
    let mut config = LlmConfig::default();
    config.providers.insert("fake".into(), provider);
    Llm::from_config(config, &|name| {
        (name == "FAKE_KEY").then(|| "sk-test".to_owned())
    })
    .unwrap()
}

fn prompt(text: &str) -> CallConfig {
    CallConfig {
        model: "fake/fake-model".into(),
        messages: vec![RequestMessage::user(Message::from_blocks(vec![
            ContentBlock::text(text),
        ]))],
        ..CallConfig::default()
    }
}

async fn collect(
    llm: &Llm,
    config: CallConfig,
    cancel: CancellationToken,
) -> (Vec<Chunk>, Assembled) {
    let call = llm.prepare_call(config).unwrap();
    let mut stream = call.stream(cancel);
    let mut chunks = Vec::new();
    let mut assembler = Assembler::new();
    while let Some(chunk) = stream.next().await {
        assembler.push(&chunk).unwrap();
        chunks.push(chunk);
    }
    (chunks, assembler.finish())
}

fn failure_of(assembled: &Assembled) -> (FailureCode, String) {
    match &assembled.finish {
        Finish::Error { failure } => (failure.code, failure.message.clone()),
        other => panic!("expected a failure, got {other:?}"),
    }
}

#[tokio::test]
async fn h_llm_7_text_reasoning_and_two_parallel_tool_calls_assemble_exactly() {
    let server = FakeServer::start().await.unwrap();
    server.push(Reply::Chunks(
        Script::new()
            .reasoning("Let me ")
            .reasoning("check.")
            .text("Reading ")
            .text("both.")
            .tool_call(0, Some("call_a"), Some("read_file"), "{\"pa")
            .tool_call(1, Some("call_b"), Some("list_files"), "{\"path\":")
            .tool_call(0, None, None, "th\":\"a.txt\"}")
            .tool_call(1, None, None, "\".\"}")
            .finish("tool_calls")
            .usage(openai_usage(120, 100, 30, 10)),
    ));
    let llm = llm_for(&server, ProviderKind::Openai, |_| {});
    let (chunks, assembled) = collect(&llm, prompt("go"), CancellationToken::new()).await;
    let call = |id: &str, name: &str, arguments: serde_json::Value| {
        ContentBlock::ToolCall(ToolCallBlock {
            id: id.into(),
            name: name.into(),
            arguments,
            raw_arguments: None,
            extra: Default::default(),
        })
    };
    assert_eq!(
        assembled.blocks,
        vec![
            ContentBlock::Reasoning(ReasoningBlock {
                text: "Let me check.".into(),
                signature: None,
                opaque: false,
                extra: Default::default()
            }),
            ContentBlock::text("Reading both."),
            call("call_a", "read_file", json!({"path": "a.txt"})),
            call("call_b", "list_files", json!({"path": "."})),
        ]
    );
    assert!(assembled.partial.is_empty());
    assert_eq!(assembled.finish, Finish::ToolCalls);
    assert_eq!(
        assembled.usage,
        Some(TokenUsage {
            input: 20,
            cache_read: 100,
            cache_write: 0,
            output: 30,
            reasoning: 10
        })
    );
    // Deltas target their own blocks: the argument fragments interleave by wire index.
    let tool_deltas: Vec<(u32, &str)> = chunks
        .iter()
        .filter_map(|chunk| match chunk {
            Chunk::ToolCallDelta { index, arguments } => Some((*index, arguments.as_str())),
            _ => None,
        })
        .collect();
    assert_eq!(
        tool_deltas,
        [
            (2, "{\"pa"),
            (3, "{\"path\":"),
            (2, "th\":\"a.txt\"}"),
            (3, "\".\"}")
        ]
    );
    assert!(matches!(
        chunks.last(),
        Some(Chunk::Finish(Finish::ToolCalls))
    ));
}

#[tokio::test]
async fn h_llm_7_deepseek_cache_hits_map_to_cache_read_and_uncached_input() {
    let server = FakeServer::start().await.unwrap();
    server.push(Reply::Chunks(
        Script::new()
            .text("hi")
            .finish("stop")
            .usage(deepseek_usage(1536, 64, 12, 0))
            .deepseek_usage(true),
    ));
    let llm = llm_for(&server, ProviderKind::Deepseek, |_| {});
    let (_, assembled) = collect(&llm, prompt("x"), CancellationToken::new()).await;
    assert_eq!(
        assembled.usage,
        Some(TokenUsage {
            input: 64,
            cache_read: 1536,
            cache_write: 0,
            output: 12,
            reasoning: 0
        })
    );
    assert_eq!(assembled.finish, Finish::Stop);
}

#[tokio::test]
async fn h_llm_5_overflow_body_is_context_window_exceeded_and_not_retried() {
    let server = FakeServer::start().await.unwrap();
    server.push(Reply::overflow());
    let llm = llm_for(&server, ProviderKind::Openai, |_| {});
    let (chunks, assembled) = collect(&llm, prompt("x"), CancellationToken::new()).await;
    let (code, message) = failure_of(&assembled);
    assert_eq!(code, FailureCode::ContextWindowExceeded);
    assert!(message.contains("maximum context length"), "{message}");
    assert_eq!(chunks.len(), 1);
    assert_eq!(server.requests().len(), 1);
    let Finish::Error { failure } = &assembled.finish else {
        unreachable!()
    };
    assert_eq!(
        (
            failure.status,
            failure.provider.as_str(),
            failure.model.as_str()
        ),
        (Some(400), "fake", "fake-model")
    );
}

#[tokio::test]
async fn h_llm_6_rate_limit_with_retry_after_is_retried_once_after_a_second() {
    let server = FakeServer::start().await.unwrap();
    server.push(Reply::rate_limited(1));
    server.push(Reply::text("done"));
    let llm = llm_for(&server, ProviderKind::Openai, |_| {});
    let (chunks, assembled) = collect(&llm, prompt("x"), CancellationToken::new()).await;
    assert_eq!(assembled.text(), "done");
    let retries: Vec<_> = chunks
        .iter()
        .filter_map(|chunk| match chunk {
            Chunk::Retry(notice) => Some(notice.clone()),
            _ => None,
        })
        .collect();
    assert_eq!(retries.len(), 1);
    assert_eq!(retries[0].attempt, 1);
    assert_eq!(retries[0].failure.code, FailureCode::RateLimited);
    assert!(retries[0].delay_ms >= 1000);
    let requests = server.requests();
    assert_eq!(requests.len(), 2);
    let gap = requests[1].at.duration_since(requests[0].at);
    assert!(gap >= Duration::from_secs(1), "retried after {gap:?}");
}

#[tokio::test]
async fn h_llm_6_transient_failures_stop_after_three_attempts() {
    let server = FakeServer::start().await.unwrap();
    for _ in 0..3 {
        server.push(Reply::http(503, "overloaded"));
    }
    let llm = llm_for(&server, ProviderKind::Openai, |_| {});
    let (_, assembled) = collect(&llm, prompt("x"), CancellationToken::new()).await;
    assert_eq!(failure_of(&assembled).0, FailureCode::ProviderUnavailable);
    assert_eq!(server.requests().len(), 3);
}

#[tokio::test]
async fn h_llm_6_disconnect_after_three_chunks_keeps_their_text_and_is_not_retried() {
    let server = FakeServer::start().await.unwrap();
    server.push(Reply::Chunks(
        Script::new()
            .text("one ")
            .text("two ")
            .text("three")
            .delay_ms(50)
            .end(End::Disconnect),
    ));
    let llm = llm_for(&server, ProviderKind::Openai, |_| {});
    let (_, assembled) = collect(&llm, prompt("x"), CancellationToken::new()).await;
    let (code, message) = failure_of(&assembled);
    assert_eq!(code, FailureCode::ProviderUnavailable, "{message}");
    assert_eq!(assembled.text(), "one two three");
    assert_eq!(
        assembled.visible_prefix().content,
        vec![ContentBlock::text("one two three")]
    );
    assert_eq!(
        server.requests().len(),
        1,
        "no retry after output was streamed"
    );
}

#[tokio::test]
async fn h_llm_5_a_stall_past_the_idle_timeout_is_timeout() {
    let server = FakeServer::start().await.unwrap();
    server.push(Reply::Chunks(Script::new().text("hel").end(End::Stall)));
    let llm = llm_for(&server, ProviderKind::Openai, |provider| {
        provider.idle_timeout_ms = 200
    });
    let started = Instant::now();
    let (_, assembled) = collect(&llm, prompt("x"), CancellationToken::new()).await;
    assert_eq!(failure_of(&assembled).0, FailureCode::Timeout);
    assert_eq!(assembled.text(), "hel");
    assert!(started.elapsed() < Duration::from_secs(5));
}

#[tokio::test]
async fn h_llm_3_cancel_mid_stream_ends_within_50_ms_as_aborted() {
    let server = FakeServer::start().await.unwrap();
    server.push(Reply::Chunks(
        Script::new()
            .text("partial ")
            .delay_ms(10_000)
            .text("never")
            .finish("stop"),
    ));
    let llm = llm_for(&server, ProviderKind::Openai, |_| {});
    let cancel = CancellationToken::new();
    let mut stream = llm
        .prepare_call(prompt("x"))
        .unwrap()
        .stream(cancel.clone());
    let mut assembler = Assembler::new();
    loop {
        let chunk = stream.next().await.unwrap();
        assembler.push(&chunk).unwrap();
        if matches!(chunk, Chunk::TextDelta { .. }) {
            break;
        }
    }
    let cancelled_at = Instant::now();
    cancel.cancel();
    while let Some(chunk) = stream.next().await {
        assembler.push(&chunk).unwrap();
    }
    let elapsed = cancelled_at.elapsed();
    assert!(
        elapsed < Duration::from_millis(50),
        "ended {elapsed:?} after the cancel"
    );
    let assembled = assembler.finish();
    assert_eq!(assembled.finish, Finish::Aborted);
    assert_eq!(
        assembled.visible_prefix().content,
        vec![ContentBlock::text("partial ")]
    );
}

#[tokio::test]
async fn h_llm_3_bad_wire_input_is_stream_protocol_naming_the_line() {
    let cases: Vec<(Script, &str)> = vec![
        (
            Script::new().text("ok").raw("{\"choices\": [oops"),
            "SSE line 3: malformed chunk JSON",
        ),
        (
            Script::new().text("ok").finish("sleepy"),
            "SSE line 3: unknown finish_reason \"sleepy\"",
        ),
        (
            Script::new()
                .tool_call(0, Some("a"), Some("f"), "{}")
                .tool_call(2, Some("c"), Some("g"), "{}"),
            "SSE line 3: tool call 2 arrives before tool call 1",
        ),
        (
            Script::new()
                .text("ok")
                .finish("stop")
                .usage(json!({"prompt_tokens": 5, "completion_tokens": -1})),
            "SSE line 5: usage.completion_tokens is negative (-1)",
        ),
        (
            Script::new().text("ok").end(End::Close),
            "SSE line 3: the stream ended without a finish_reason",
        ),
    ];
    for (script, expected) in cases {
        let server = FakeServer::start().await.unwrap();
        server.push(Reply::Chunks(script));
        let llm = llm_for(&server, ProviderKind::Openai, |_| {});
        let (_, assembled) = collect(&llm, prompt("x"), CancellationToken::new()).await;
        let (code, message) = failure_of(&assembled);
        assert_eq!(code, FailureCode::StreamProtocol, "{message}");
        assert!(
            message.starts_with(expected),
            "{message:?} should start with {expected:?}"
        );
    }
}

#[tokio::test]
async fn h_llm_2_every_request_carries_purpose_key_and_include_usage() {
    let server = FakeServer::start().await.unwrap();
    server.push(Reply::text("a"));
    server.push(Reply::text("b"));
    let llm = llm_for(&server, ProviderKind::Openai, |_| {});
    collect(&llm, prompt("x"), CancellationToken::new()).await;
    let mut compaction = prompt("summarize");
    compaction.purpose = Purpose::Compaction;
    collect(&llm, compaction, CancellationToken::new()).await;
    let requests = server.requests();
    assert_eq!(requests[0].header("x-ccare-purpose"), Some("conversation"));
    assert_eq!(requests[1].header("x-ccare-purpose"), Some("compaction"));
    assert_eq!(requests[0].header("authorization"), Some("Bearer sk-test"));
    assert_eq!(requests[0].path, "/v1/chat/completions");
    assert_eq!(requests[0].body["stream"], true);
    assert_eq!(
        requests[0].body["stream_options"],
        json!({"include_usage": true})
    );
    assert_eq!(requests[0].body["model"], "fake-model");
}

#[tokio::test]
async fn h_llm_7_wire_messages_keep_order_tool_role_and_deepseek_reasoning_echo() {
    let server = FakeServer::start().await.unwrap();
    server.push(Reply::text("ok"));
    let llm = llm_for(&server, ProviderKind::Deepseek, |_| {});
    let assistant = Message::from_blocks(vec![
        ContentBlock::Reasoning(ReasoningBlock {
            text: "need file".into(),
            signature: None,
            opaque: false,
            extra: Default::default(),
        }),
        ContentBlock::ToolCall(ToolCallBlock {
            id: "c1".into(),
            name: "read_file".into(),
            arguments: json!({"path": "a"}),
            raw_arguments: None,
            extra: Default::default(),
        }),
    ]);
    let result = Message::from_blocks(vec![ContentBlock::ToolResult(ToolResultBlock {
        call_id: "c1".into(),
        name: "read_file".into(),
        content: vec![ContentBlock::text("contents")],
        is_error: false,
        extra: Default::default(),
    })]);
    let config = CallConfig {
        model: "fake/deepseek-chat".into(),
        system: Some("be brief".into()),
        tools: vec![ToolSpec {
            name: "read_file".into(),
            description: "reads".into(),
            input_schema: json!({"type": "object"}).into(),
        }],
        messages: vec![
            RequestMessage::user(Message::from_blocks(vec![ContentBlock::text("read a")])),
            RequestMessage::user(Message::from_blocks(vec![ContentBlock::text(
                "[time] 12:00",
            )])),
            RequestMessage::assistant(assistant.clone(), Some("fake".into())),
            RequestMessage::user(result),
            RequestMessage::assistant(assistant, Some("elsewhere".into())),
        ],
        ..CallConfig::default()
    };
    collect(&llm, config, CancellationToken::new()).await;
    let body = &server.requests()[0].body;
    let call = json!([{"id": "c1", "type": "function", "function": {"name": "read_file", "arguments": "{\"path\":\"a\"}"}}]);
    assert_eq!(
        body["messages"],
        json!([
            {"role": "system", "content": "be brief"},
            {"role": "user", "content": "read a"},
            {"role": "user", "content": "[time] 12:00"},
            {"role": "assistant", "content": null, "reasoning_content": "need file", "tool_calls": call},
            {"role": "tool", "tool_call_id": "c1", "content": "contents"},
            {"role": "assistant", "content": null, "tool_calls": call},
        ])
    );
    assert_eq!(body["tools"][0]["function"]["name"], "read_file");
    assert_eq!(
        body["max_tokens"], 8192,
        "the adapter default R for deepseek-chat"
    );
}

#[tokio::test]
async fn h_llm_7_non_streaming_mode_gives_the_same_blocks() {
    let server = FakeServer::start().await.unwrap();
    server.push(Reply::Chunks(
        Script::new()
            .reasoning("hmm")
            .text("answer")
            .finish("stop")
            .usage(openai_usage(10, 0, 3, 1)),
    ));
    let llm = llm_for(&server, ProviderKind::Openai, |provider| {
        provider.stream = false
    });
    let (_, assembled) = collect(&llm, prompt("x"), CancellationToken::new()).await;
    assert_eq!(assembled.text(), "answer");
    assert_eq!(assembled.blocks.len(), 2);
    assert_eq!(
        assembled
            .usage
            .map(|usage| (usage.input, usage.output, usage.reasoning)),
        Some((10, 3, 1))
    );
    assert_eq!(server.requests()[0].body["stream"], false);
}

#[tokio::test]
async fn h_llm_5_a_missing_key_fails_as_auth_failed_without_a_request() {
    let server = FakeServer::start().await.unwrap();
    let mut provider = ProviderConfig::new(ProviderKind::Openai);
    provider.base_url = Some(server.base_url());
    provider.api_key_env = Some("NOT_SET_ANYWHERE".into());
    let mut config = LlmConfig::default();
    config.providers.insert("fake".into(), provider);
    let llm = Llm::from_config(config, &|_| None).unwrap();
    let (_, assembled) = collect(&llm, prompt("x"), CancellationToken::new()).await;
    let (code, message) = failure_of(&assembled);
    assert_eq!(code, FailureCode::AuthFailed);
    assert_eq!(
        message,
        "providers.fake.api_key_env names the env var NOT_SET_ANYWHERE, which is not set"
    );
    assert!(server.requests().is_empty());
}

#[tokio::test]
async fn h_llm_5_content_filter_keeps_the_partial_text() {
    let server = FakeServer::start().await.unwrap();
    server.push(Reply::Chunks(
        Script::new().text("some").finish("content_filter"),
    ));
    let llm = llm_for(&server, ProviderKind::Openai, |_| {});
    let (_, assembled) = collect(&llm, prompt("x"), CancellationToken::new()).await;
    assert_eq!(failure_of(&assembled).0, FailureCode::ContentFiltered);
    assert_eq!(assembled.text(), "some");
}

#[test]
fn h_llm_1_routes_pin_windows_from_config_and_adapter_defaults() {
    let mut config = LlmConfig::default();
    config
        .providers
        .insert("ds".into(), ProviderConfig::new(ProviderKind::Deepseek));
    config
        .providers
        .insert("local".into(), ProviderConfig::new(ProviderKind::Openai));
    config.models.insert(
        "local/small".into(),
        ccare_llm::ModelConfig {
            context_window: Some(16000),
            max_output_tokens: Some(1024),
            ..Default::default()
        },
    );
    config
        .purpose_models
        .insert(Purpose::Compaction, "local/small".into());
    let llm = Llm::from_config(config, &|_| None).unwrap();
    let route = llm.route("ds/deepseek-chat").unwrap();
    assert_eq!(
        (
            route.context_window,
            route.max_output_tokens,
            route.reasoning_echo
        ),
        (Some(131_072), Some(8192), true)
    );
    let unknown = llm.route("local/other").unwrap();
    assert_eq!(
        unknown.context_window, None,
        "an unknown model has no window"
    );
    let mut compaction = prompt("x");
    compaction.model = "ds/deepseek-chat".into();
    compaction.purpose = Purpose::Compaction;
    let call = llm.prepare_call(compaction).unwrap();
    assert_eq!(call.route.name(), "local/small");
    assert_eq!(call.config.max_tokens, Some(1024));
    assert!(llm.route("nowhere/x").is_err());
    let _ = Arc::new(llm);
}

#[tokio::test]
async fn h_llm_7_unknown_response_fields_are_kept_on_the_message() {
    let server = FakeServer::start().await.unwrap();
    server.push(Reply::Chunks(
        Script::new()
            .raw(r#"{"choices":[{"index":0,"delta":{"role":"assistant","content":"Hi","refusal":null,"annotations":[{"type":"url_citation","url":"https://example.org"}]},"finish_reason":null}]}"#)
            .raw(r#"{"choices":[{"index":0,"delta":{"content":"!","x_note":"par"},"finish_reason":null}]}"#)
            .raw(r#"{"choices":[{"index":0,"delta":{"x_note":"tial"},"finish_reason":"stop"}]}"#),
    ));
    let llm = llm_for(&server, ProviderKind::Openai, |_| {});
    let (_, assembled) = collect(&llm, prompt("x"), CancellationToken::new()).await;
    let message = assembled.message();
    assert_eq!(assembled.text(), "Hi!");
    assert_eq!(
        serde_json::Value::Object(message.extra.to_object()),
        json!({"annotations": [{"type": "url_citation", "url": "https://example.org"}], "x_note": "partial"})
    );
}

/// An `audio` block: a type this version does not know, kept whole on the message.
fn unknown_block() -> ContentBlock {
    let mut block = ccare_core::JsonObject::new();
    block.insert("type".into(), json!("audio"));
    block.insert("data".into(), json!("UklGRg=="));
    ContentBlock::Unknown(block)
}

#[tokio::test]
async fn h_msg_1_an_unknown_block_is_refused_as_unsupported_content_before_any_request() {
    let server = FakeServer::start().await.unwrap();
    server.push(Reply::text("never"));
    let llm = llm_for(&server, ProviderKind::Openai, |_| {});
    let mut config = prompt("first");
    config
        .messages
        .push(RequestMessage::user(Message::from_blocks(vec![
            ContentBlock::text("listen"),
            unknown_block(),
        ])));
    let (chunks, assembled) = collect(&llm, config, CancellationToken::new()).await;
    let (code, message) = failure_of(&assembled);
    assert_eq!(code, FailureCode::UnsupportedContent);
    assert_eq!(
        message,
        "message 2 (user) holds a block of type \"audio\", which an OpenAI-compatible request cannot carry"
    );
    assert_eq!(chunks.len(), 1, "no retry: {chunks:?}");
    assert!(server.requests().is_empty(), "nothing reached the server");
    // Inside a tool result too: the model would see less than the log says.
    let result = Message::from_blocks(vec![ContentBlock::ToolResult(ToolResultBlock {
        call_id: "c1".into(),
        name: "record".into(),
        content: vec![ContentBlock::text("recorded"), unknown_block()],
        is_error: false,
        extra: Default::default(),
    })]);
    let mut config = prompt("first");
    config.messages.push(RequestMessage::user(result));
    let (_, assembled) = collect(&llm, config, CancellationToken::new()).await;
    assert_eq!(
        failure_of(&assembled),
        (
            FailureCode::UnsupportedContent,
            "message 2 (user) holds a tool result with a block of type \"audio\", which an OpenAI-compatible request cannot carry".to_owned()
        )
    );
    assert!(server.requests().is_empty());
}

#[tokio::test]
async fn h_llm_5_llama_cpp_overflow_by_type_is_context_window_exceeded_and_not_retried() {
    let server = FakeServer::start().await.unwrap();
    // llama.cpp's server (tools/server): HTTP 400 with its own error type.
    server.push(Reply::http(
        400,
        r#"{"error":{"code":400,"message":"the request exceeds the available context size, try increasing it","type":"exceed_context_size_error","n_prompt_tokens":9412,"n_ctx":8192}}"#,
    ));
    let llm = llm_for(&server, ProviderKind::Openai, |_| {});
    let (chunks, assembled) = collect(&llm, prompt("x"), CancellationToken::new()).await;
    assert_eq!(
        failure_of(&assembled),
        (
            FailureCode::ContextWindowExceeded,
            "the request exceeds the available context size, try increasing it".to_owned()
        )
    );
    assert_eq!(chunks.len(), 1);
    assert_eq!(server.requests().len(), 1);
}
