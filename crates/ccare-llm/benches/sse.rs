//! SSE parser throughput (H-LLM-7). Run: `cargo bench -p ccare-llm --bench sse`.
//!
//! The input is a realistic ~10 MB OpenAI chat-completion stream: `data: {json}\n\n`
//! events of one `chat.completion.chunk` each (~280 bytes), a final usage chunk and
//! `data: [DONE]`. The target is at least 100 MB/s; divan prints the throughput.
//!
//! - `feed_4k_pieces`: the stream fed in 4 KiB pieces, as a socket delivers it, with the
//!   events drained after every piece.
//! - `feed_whole`: the stream fed in one call.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use std::sync::OnceLock;

use ccare_llm::sse::SseParser;
use divan::Bencher;
use divan::counter::BytesCount;

fn main() {
    divan::main();
}

const TARGET_BYTES: usize = 10 * 1024 * 1024;
const PIECE: usize = 4096;

/// The benchmark stream, built once.
fn stream() -> &'static [u8] {
    static STREAM: OnceLock<Vec<u8>> = OnceLock::new();
    STREAM.get_or_init(|| {
        let words = [
            " the", " context", " window", " is", " a", " budget", ",", " and", " every",
            " token", " costs", " money", ".", "\\n\\n", " Here", "'s", " how", " to",
            " compact", " it", ":", " `summary`", " \\\"quoted\\\"", " é", " 😀",
        ];
        let mut stream = Vec::with_capacity(TARGET_BYTES + 1024);
        let mut index = 0usize;
        while stream.len() < TARGET_BYTES {
            let content = words[index % words.len()];
            let chunk = format!(
                "data: {{\"id\":\"chatcmpl-9xQk2LmZbW7pR4sT1uV8yA3cD6eF\",\"object\":\"chat.completion.chunk\",\
                 \"created\":1717000000,\"model\":\"gpt-4o-mini-2024-07-18\",\"system_fingerprint\":\"fp_0ba0d124f1\",\
                 \"choices\":[{{\"index\":0,\"delta\":{{\"content\":\"{content}\"}},\"logprobs\":null,\"finish_reason\":null}}],\
                 \"usage\":null}}\n\n"
            );
            stream.extend_from_slice(chunk.as_bytes());
            index += 1;
        }
        stream.extend_from_slice(
            b"data: {\"id\":\"chatcmpl-9xQk2LmZbW7pR4sT1uV8yA3cD6eF\",\"object\":\"chat.completion.chunk\",\
              \"created\":1717000000,\"model\":\"gpt-4o-mini-2024-07-18\",\"choices\":[],\
              \"usage\":{\"prompt_tokens\":1200,\"completion_tokens\":48000,\"total_tokens\":49200}}\n\n\
              data: [DONE]\n\n",
        );
        stream
    })
}

#[divan::bench]
fn feed_4k_pieces(bencher: Bencher) {
    let stream = stream();
    bencher.counter(BytesCount::of_slice(stream)).bench(|| {
        let mut parser = SseParser::new();
        let mut events = Vec::new();
        let mut count = 0usize;
        for piece in stream.chunks(PIECE) {
            parser.feed(piece, &mut events).unwrap();
            count += events.len();
            events.clear();
        }
        parser.finish(&mut events).unwrap();
        count + events.len()
    });
}

#[divan::bench]
fn feed_whole(bencher: Bencher) {
    let stream = stream();
    bencher.counter(BytesCount::of_slice(stream)).bench(|| {
        let mut parser = SseParser::new();
        let mut events = Vec::new();
        parser.feed(stream, &mut events).unwrap();
        parser.finish(&mut events).unwrap();
        assert!(events.last().is_some_and(|event| event.is_done()));
        events.len()
    });
}
