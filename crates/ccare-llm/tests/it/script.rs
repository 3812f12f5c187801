//! The scripted provider (spec H-LLM-8): replies in order, records requests, fails
//! loudly when the script runs out or a request is not what the script expects.

#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use std::sync::Arc;
use std::time::{Duration, Instant};

use ccare_core::{ContentBlock, FailureCode, Message};
use ccare_llm::script::{ScriptProvider, parse_script};
use ccare_llm::{
    Assembled, Assembler, CallConfig, CancellationToken, Finish, Llm, LlmConfig, ProviderConfig,
    ProviderKind, Purpose, RequestMessage,
};
use futures_util::StreamExt;
use serde_json::json;

fn llm_with(script: &ScriptProvider) -> Llm {
    let mut config = LlmConfig::default();
    config
        .providers
        .insert("s".into(), ProviderConfig::new(ProviderKind::Script));
    let mut llm = Llm::from_config(config, &|_| None).unwrap();
    llm.insert_provider(
        "s",
        ProviderConfig::new(ProviderKind::Script),
        Arc::new(script.clone()),
    );
    llm
}

fn ask(text: &str) -> CallConfig {
    CallConfig {
        model: "s/scripted".into(),
        messages: vec![RequestMessage::user(Message::from_blocks(vec![
            ContentBlock::text(text),
        ]))],
        ..CallConfig::default()
    }
}

async fn answer(llm: &Llm, config: CallConfig) -> Assembled {
    let mut stream = llm
        .prepare_call(config)
        .unwrap()
        .stream(CancellationToken::new());
    let mut assembler = Assembler::new();
    while let Some(chunk) = stream.next().await {
        assembler.push(&chunk).unwrap();
    }
    assembler.finish()
}

const SCRIPT: &str = r#"
# a comment
{"reasoning": "plan", "text": "first answer", "usage": {"input": 7, "output": 3}}
{"tool_calls": [{"name": "write_file", "arguments": {"path": "a.txt", "content": "hi"}, "id": "c1"}]}
{"expect": {"contains": "third"}, "text": "ok"}
{"failure": {"code": "CONTEXT_WINDOW_EXCEEDED", "message": "too long"}}
"#;

#[tokio::test]
async fn h_llm_8_replies_in_order_and_records_every_request() {
    let script = ScriptProvider::from_jsonl(SCRIPT).unwrap();
    let llm = llm_with(&script);
    let first = answer(&llm, ask("one")).await;
    assert_eq!(first.text(), "first answer");
    assert_eq!(first.blocks.len(), 2);
    assert_eq!(
        first.usage.map(|usage| (usage.input, usage.output)),
        Some((7, 3))
    );
    let second = answer(&llm, ask("two")).await;
    assert_eq!(second.finish, Finish::ToolCalls);
    let ContentBlock::ToolCall(call) = &second.blocks[0] else {
        panic!("{second:?}")
    };
    assert_eq!(
        (call.id.as_str(), &call.arguments),
        ("c1", &json!({"path": "a.txt", "content": "hi"}))
    );
    assert_eq!(answer(&llm, ask("the third one")).await.text(), "ok");
    let Finish::Error { failure } = answer(&llm, ask("four")).await.finish else {
        panic!()
    };
    assert_eq!(
        (failure.code, failure.message.as_str()),
        (FailureCode::ContextWindowExceeded, "too long")
    );
    let Finish::Error { failure } = answer(&llm, ask("five")).await.finish else {
        panic!()
    };
    assert_eq!(failure.code, FailureCode::Unknown);
    assert_eq!(
        failure.message,
        "script exhausted: the script has 4 replies and this is request 5"
    );
    let seen: Vec<String> = script
        .requests()
        .iter()
        .map(
            |request| match &request.config.messages[0].message.content[0] {
                ContentBlock::Text(text) => text.text.clone(),
                _ => String::new(),
            },
        )
        .collect();
    assert_eq!(seen, ["one", "two", "the third one", "four", "five"]);
}

#[tokio::test]
async fn h_llm_8_an_unexpected_request_fails_naming_the_script_line() {
    let script = ScriptProvider::from_jsonl(
        "{\"expect\": {\"purpose\": \"compaction\"}, \"text\": \"summary\"}\n{\"expect\": {\"contains\": \"x\"}, \"text\": \"y\"}",
    )
    .unwrap();
    let llm = llm_with(&script);
    let Finish::Error { failure } = answer(&llm, ask("hi")).await.finish else {
        panic!()
    };
    assert_eq!(failure.code, FailureCode::InvalidRequest);
    assert_eq!(
        failure.message,
        "script line 1 expected a compaction request, got conversation"
    );
    let Finish::Error { failure } = answer(&llm, ask("hi")).await.finish else {
        panic!()
    };
    assert_eq!(
        failure.message,
        "script line 2 expected the last user message to contain \"x\", got \"hi\""
    );
    assert_eq!(script.remaining(), 0);
    let mut compaction = ask("z");
    compaction.purpose = Purpose::Compaction;
    let script = ScriptProvider::from_jsonl(
        "{\"expect\": {\"purpose\": \"compaction\"}, \"text\": \"summary\"}",
    )
    .unwrap();
    assert_eq!(
        answer(&llm_with(&script), compaction).await.text(),
        "summary"
    );
}

#[test]
fn h_llm_8_malformed_script_lines_are_named() {
    let error = parse_script("{\"text\": \"a\"}\n\n{\"txet\": \"b\"}\n")
        .err()
        .unwrap();
    assert_eq!(error.line, 3);
    assert!(
        error.message.starts_with("unknown field `txet`"),
        "{}",
        error.message
    );
    let error = parse_script("{\"text\": \"a\", \"finish\": \"tool-calls\"}")
        .err()
        .unwrap();
    assert_eq!(
        error.to_string(),
        "line 1: finish must be \"stop\" or \"length\", found \"tool-calls\""
    );
}

#[tokio::test]
async fn h_llm_8_delays_are_cancellable_and_keep_the_visible_prefix() {
    let script =
        ScriptProvider::from_jsonl("{\"text\": \"a b c d e f\", \"delay_ms\": 40}").unwrap();
    let llm = llm_with(&script);
    let cancel = CancellationToken::new();
    let mut stream = llm.prepare_call(ask("x")).unwrap().stream(cancel.clone());
    let mut assembler = Assembler::new();
    let started = Instant::now();
    let mut deltas = 0;
    while let Some(chunk) = stream.next().await {
        assembler.push(&chunk).unwrap();
        if matches!(chunk, ccare_llm::Chunk::TextDelta { .. }) {
            deltas += 1;
            if deltas == 2 {
                cancel.cancel();
            }
        }
    }
    let assembled = assembler.finish();
    assert_eq!(assembled.finish, Finish::Aborted);
    assert_eq!(assembled.text(), "a b ");
    assert!(started.elapsed() < Duration::from_secs(2));
}
