//! Adapter throughput (issue 3 and issue 14 targets): SSE parse + chunk translation +
//! assembly of a realistic chat-completions stream, at least 100 MB/s, and at most 2 µs
//! of adapter work per streamed chunk. Run: `cargo bench -p ccare-llm --bench adapter`.
//!
//! The stream is DeepSeek-shaped: reasoning deltas, then text deltas, then two tool
//! calls with argument fragments, a finish chunk with usage, and `[DONE]`, ~10 MB in
//! all, fed in 4 KiB pieces as a socket delivers it.
//!
//! - `stream_bytes` / `per_chunk`: decode and assembly only, in one thread (no network,
//!   no task hand-off).
//! - `call_per_chunk`: the whole streaming path of a call minus the network: a provider
//!   task decodes the body and sends its chunks, [`ccare_llm::PreparedCall::stream`]
//!   forwards them (retry policy, route stamping), the consumer assembles them, on a
//!   current-thread runtime. Divan's time per item is the cost per streamed chunk,
//!   task hand-offs included.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use std::sync::{Arc, OnceLock};

use ccare_llm::openai::decode_stream;
use ccare_llm::{
    Assembler, CallConfig, CancellationToken, ChunkStream, GenerateRequest, Llm, LlmConfig,
    Provider, ProviderConfig, ProviderKind,
};
use divan::Bencher;
use divan::counter::{BytesCount, ItemsCount};

fn main() {
    divan::main();
}

const TARGET_BYTES: usize = 10 * 1024 * 1024;
const PIECE: usize = 4096;

struct Fixture {
    bytes: Vec<u8>,
    events: usize,
}

fn event(delta: &str, finish: &str) -> String {
    format!(
        "data: {{\"id\":\"6f1c2a7e-5b3d-4c8e-9a01-2b3c4d5e6f70\",\"object\":\"chat.completion.chunk\",\"created\":1764547200,\"model\":\"deepseek-chat\",\"system_fingerprint\":\"fp_ffc7281d48_prod0820_fp8_kvcache\",\"choices\":[{{\"index\":0,\"delta\":{delta},\"logprobs\":null,\"finish_reason\":{finish}}}]}}\n\n"
    )
}

fn fixture() -> &'static Fixture {
    static FIXTURE: OnceLock<Fixture> = OnceLock::new();
    FIXTURE.get_or_init(|| {
        let words = [
            " the", " context", " window", " is", " a", " budget", ",", " and", " every", " token",
            " costs", ".", "\\n", " 上下文", "窗口", "是", "预算", " `fn main()`", " \\\"q\\\"",
        ];
        let mut out = String::with_capacity(TARGET_BYTES + 4096);
        let mut events = 0;
        let mut index = 0;
        while out.len() < TARGET_BYTES / 3 {
            let word = words[index % words.len()];
            out.push_str(&event(&format!("{{\"content\":null,\"reasoning_content\":\"{word}\"}}"), "null"));
            index += 1;
            events += 1;
        }
        while out.len() < TARGET_BYTES * 2 / 3 {
            let word = words[index % words.len()];
            out.push_str(&event(&format!("{{\"content\":\"{word}\"}}"), "null"));
            index += 1;
            events += 1;
        }
        for call in 0..2 {
            out.push_str(&event(
                &format!("{{\"tool_calls\":[{{\"index\":{call},\"id\":\"call_{call}\",\"type\":\"function\",\"function\":{{\"name\":\"write_file\",\"arguments\":\"\"}}}}]}}"),
                "null",
            ));
            events += 1;
        }
        out.push_str(&event("{\"tool_calls\":[{\"index\":0,\"function\":{\"arguments\":\"{\\\"path\\\":\\\"a.txt\\\",\\\"content\\\":\\\"\"}}]}", "null"));
        events += 1;
        while out.len() < TARGET_BYTES {
            let word = words[index % words.len()];
            let call = index % 2;
            out.push_str(&event(
                &format!("{{\"tool_calls\":[{{\"index\":{call},\"function\":{{\"arguments\":\"{}\"}}}}]}}", word.replace('\\', "\\\\\\").replace('"', "\\\\\"")),
                "null",
            ));
            index += 1;
            events += 1;
        }
        out.push_str(&event("{\"tool_calls\":[{\"index\":0,\"function\":{\"arguments\":\"\\\"}\"}}]}", "null"));
        out.push_str(&event("{\"tool_calls\":[{\"index\":1,\"function\":{\"arguments\":\"\"}}]}", "\"tool_calls\""));
        out.push_str("data: {\"choices\":[],\"usage\":{\"prompt_tokens\":90000,\"completion_tokens\":40000,\"prompt_cache_hit_tokens\":80000,\"prompt_cache_miss_tokens\":10000,\"completion_tokens_details\":{\"reasoning_tokens\":12000}}}\n\ndata: [DONE]\n\n");
        events += 3;
        Fixture { bytes: out.into_bytes(), events }
    })
}

fn decode_and_assemble(bytes: &[u8]) -> usize {
    let chunks = decode_stream(bytes.chunks(PIECE), "bench").unwrap();
    let mut assembler = Assembler::new();
    for chunk in &chunks {
        assembler.push(chunk).unwrap();
    }
    let assembled = assembler.finish();
    assert_eq!(assembled.finish, ccare_llm::Finish::ToolCalls);
    chunks.len()
}

/// Bytes per second through SSE parse + translation + assembly.
#[divan::bench]
fn stream_bytes(bencher: Bencher) {
    let fixture = fixture();
    bencher
        .counter(BytesCount::new(fixture.bytes.len()))
        .bench(|| decode_and_assemble(divan::black_box(&fixture.bytes)));
}

/// The same work per streamed SSE event: divan's time per item is the adapter
/// overhead per chunk.
#[divan::bench]
fn per_chunk(bencher: Bencher) {
    let fixture = fixture();
    bencher
        .counter(ItemsCount::new(fixture.events))
        .bench(|| decode_and_assemble(divan::black_box(&fixture.bytes)));
}

/// A provider that answers every call with the fixture, decoded in its own task and
/// sent over a channel, as the OpenAI adapter does with a response body.
struct Replay;

impl Provider for Replay {
    fn stream(&self, _request: GenerateRequest, _cancel: CancellationToken) -> ChunkStream {
        let (sender, receiver) = tokio::sync::mpsc::channel(256);
        tokio::spawn(async move {
            let chunks = decode_stream(fixture().bytes.chunks(PIECE), "bench").unwrap();
            for chunk in chunks {
                if sender.send(chunk).await.is_err() {
                    return;
                }
            }
        });
        Box::pin(futures_util::stream::unfold(
            receiver,
            |mut receiver| async { receiver.recv().await.map(|chunk| (chunk, receiver)) },
        ))
    }
}

fn replay_llm() -> Llm {
    let mut llm = Llm::from_config(LlmConfig::default(), &|_| None).unwrap();
    llm.insert_provider(
        "bench",
        ProviderConfig::new(ProviderKind::Openai),
        Arc::new(Replay),
    );
    llm
}

async fn call_and_assemble(llm: &Llm) -> usize {
    use futures_util::StreamExt;
    let call = llm
        .prepare_call(CallConfig {
            model: "bench/replay".into(),
            ..CallConfig::default()
        })
        .unwrap();
    let mut stream = call.stream(CancellationToken::new());
    let mut assembler = Assembler::new();
    let mut count = 0;
    while let Some(chunk) = stream.next().await {
        assembler.push(&chunk).unwrap();
        count += 1;
    }
    assert_eq!(assembler.finish().finish, ccare_llm::Finish::ToolCalls);
    count
}

/// The whole call path per streamed SSE event: provider task, prepared-call stream and
/// assembly, on one thread.
#[divan::bench]
fn call_per_chunk(bencher: Bencher) {
    let fixture = fixture();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let llm = replay_llm();
    bencher
        .counter(ItemsCount::new(fixture.events))
        .bench(|| runtime.block_on(call_and_assemble(divan::black_box(&llm))));
}
