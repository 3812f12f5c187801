//! Throughput of the meter: the heuristic on mixed text (target ≥ 200 MB/s), pricing a
//! typical message, and the exact DeepSeek-V4 tokenizer for comparison.
//!
//! Run with `cargo bench -p ccare-meter`. The exact benchmarks need the tokenizer (see
//! `scripts/fetch-tokenizer.sh`).

#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use std::path::PathBuf;
use std::sync::LazyLock;

use ccare_core::{ContentBlock, Message, ToolCallBlock, ToolResultBlock};
use ccare_meter::{CharCounts, Meter, MeterConfig, estimate_message, estimate_text};
use divan::counter::BytesCount;
use divan::{Bencher, black_box};
use serde_json::json;

fn main() {
    divan::main();
}

fn manifest_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// Every corpus sample of every category, interleaved, repeated to about 1 MiB:
/// Chinese and English prose, Rust code and JSON.
static MIXED: LazyLock<String> = LazyLock::new(|| {
    let mut samples = Vec::new();
    for category in ["zh-prose", "en-prose", "rust-code", "json-tool-output"] {
        let dir = manifest_dir().join("corpus").join(category);
        let mut paths: Vec<_> = std::fs::read_dir(dir)
            .unwrap()
            .map(|entry| entry.unwrap().path())
            .collect();
        paths.sort();
        samples.push(
            paths
                .iter()
                .map(|path| std::fs::read_to_string(path).unwrap())
                .collect::<Vec<_>>(),
        );
    }
    let mut one_round = String::new();
    for idx in 0..12 {
        for category in &samples {
            if let Some(sample) = category.get(idx) {
                one_round.push_str(sample);
            }
        }
    }
    one_round.repeat((1 << 20) / one_round.len() + 1)
});

/// One category's samples joined, for per-script figures.
fn category(name: &str) -> String {
    let dir = manifest_dir().join("corpus").join(name);
    let mut paths: Vec<_> = std::fs::read_dir(dir)
        .unwrap()
        .map(|entry| entry.unwrap().path())
        .collect();
    paths.sort();
    paths
        .iter()
        .map(|path| std::fs::read_to_string(path).unwrap())
        .collect()
}

#[divan::bench]
fn heuristic_mixed_1mib(bencher: Bencher) {
    let text = MIXED.as_str();
    bencher
        .counter(BytesCount::of_str(text))
        .bench(|| estimate_text(black_box(text)));
}

#[divan::bench(args = ["zh-prose", "en-prose", "rust-code", "json-tool-output"])]
fn heuristic_category(bencher: Bencher, name: &str) {
    let text = category(name);
    bencher
        .counter(BytesCount::of_str(&text))
        .bench(|| CharCounts::of(black_box(&text)));
}

/// An assistant turn as a session holds it: text, a tool call, and a tool result with
/// about 2 KB of output.
fn typical_message() -> Message {
    let output = category("rust-code").chars().take(2000).collect::<String>();
    Message::from_blocks(vec![
        ContentBlock::text(
            "I'll look at the ring buffer first; the bug report says `push` loses an element \
             when the buffer wraps around. 我先看看 push 的实现。",
        ),
        ContentBlock::ToolCall(ToolCallBlock {
            id: "call_01".into(),
            name: "read_file".into(),
            arguments: json!({"path": "src/ring.rs", "start_line": 1, "end_line": 80}),
            raw_arguments: None,
            extra: ccare_core::Extra::new(),
        }),
        ContentBlock::ToolResult(ToolResultBlock {
            call_id: "call_01".into(),
            name: "read_file".into(),
            content: vec![ContentBlock::text(output)],
            is_error: false,
            extra: ccare_core::Extra::new(),
        }),
    ])
}

#[divan::bench]
fn estimate_typical_message(bencher: Bencher) {
    let message = typical_message();
    bencher.bench(|| estimate_message(black_box(&message)));
}

fn exact_meter() -> Meter {
    let repo_root = manifest_dir().join("../..");
    let candidates = [
        std::env::var_os("CCARE_TOKENIZER").map(PathBuf::from),
        Some(
            std::env::var_os("CCARE_HOME")
                .map(PathBuf::from)
                .unwrap_or_else(|| repo_root.join(".ccare"))
                .join("tokenizers/deepseek-v4/tokenizer.json"),
        ),
        Some(repo_root.join("../shared/data/tokenizers/deepseek-v4/tokenizer.json")),
    ];
    let path = candidates
        .into_iter()
        .flatten()
        .find(|path| path.is_file())
        .expect("no DeepSeek-V4 tokenizer.json: run scripts/fetch-tokenizer.sh");
    Meter::new(&MeterConfig {
        tokenizer: Some(path),
        ..MeterConfig::default()
    })
    .unwrap()
}

#[divan::bench(sample_count = 20)]
fn exact_mixed_64kib(bencher: Bencher) {
    let meter = exact_meter();
    let text = &MIXED[..MIXED.floor_char_boundary(64 * 1024)];
    bencher
        .counter(BytesCount::of_str(text))
        .bench(|| meter.text(black_box(text)));
}

#[divan::bench(sample_count = 20)]
fn exact_typical_message(bencher: Bencher) {
    let meter = exact_meter();
    let message = typical_message();
    bencher.bench(|| meter.message(black_box(&message)));
}
