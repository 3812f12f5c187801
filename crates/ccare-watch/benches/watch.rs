//! SW-3 timing: a reply as 20 000 deltas of 1–4 characters (mixed lines, some
//! repeating, reasoning and text in blocks) through the default triggers. Target: all
//! 20 000 under 50 ms in release, and the last 1 000 at most 2× the first 1 000 (the
//! cost per delta must not grow with the text read so far).
//!
//! Run with `cargo bench -p ccare-watch --bench watch`.

#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use std::sync::LazyLock;

use ccare_watch::engine::{Frame, StreamWatch, Triggers};
use divan::counter::ItemsCount;
use divan::{Bencher, black_box};

fn main() {
    divan::main();
}

/// How many deltas a reply has in this benchmark.
const DELTAS: usize = 20_000;
/// The slice timed at the start and at the end.
const SLICE: usize = 1_000;
/// Deltas per block of one source (reasoning, then text, then reasoning, …).
const BLOCK: usize = 50;

/// One delta: reasoning or text, 1–4 characters.
struct Delta {
    reasoning: bool,
    text: String,
}

/// The reply: lines of three kinds (a few repeating lines, unique English lines,
/// unique Chinese lines), cut into 1–4-character deltas by a fixed pseudo-random
/// sequence. Nothing in it fires a default trigger, so every trigger stays armed.
static REPLY: LazyLock<Vec<Delta>> = LazyLock::new(|| {
    let mut text = String::new();
    let mut line = 0;
    while text.chars().count() < DELTAS * 4 {
        match line % 3 {
            0 => text.push_str(&format!("repeat {}\n", line % 5)),
            1 => text.push_str(&format!("step {line}: value {}\n", line * 7 % 1000)),
            _ => text.push_str(&format!("检查第{line}项，结果正常\n")),
        }
        line += 1;
    }
    let chars: Vec<char> = text.chars().collect();
    let mut seed: u32 = 0x2545_f491;
    let mut start = 0;
    let mut deltas = Vec::with_capacity(DELTAS);
    while deltas.len() < DELTAS {
        seed = seed.wrapping_mul(1_103_515_245).wrapping_add(12_345);
        let size = 1 + (seed >> 16) as usize % 4;
        deltas.push(Delta {
            reasoning: (deltas.len() / BLOCK).is_multiple_of(2),
            text: chars[start..start + size].iter().collect(),
        });
        start += size;
    }
    let mut check = started();
    assert!(
        feed(&mut check, &deltas) == 0,
        "the benchmark reply must not fire"
    );
    deltas
});

fn started() -> StreamWatch {
    let mut watch = StreamWatch::new(Triggers::defaults());
    watch.observe(Frame::Start);
    watch
}

/// Feeds the deltas and returns how many firings they caused.
fn feed(watch: &mut StreamWatch, deltas: &[Delta]) -> usize {
    let mut firings = 0;
    for delta in deltas {
        let frame = if delta.reasoning {
            Frame::Reasoning(&delta.text)
        } else {
            Frame::Text(&delta.text)
        };
        firings += watch.observe(black_box(frame)).len();
    }
    firings
}

/// All 20 000 deltas of one reply through a fresh watch.
#[divan::bench]
fn reply_20000_deltas(bencher: Bencher) {
    let deltas = REPLY.as_slice();
    bencher
        .counter(ItemsCount::new(deltas.len()))
        .with_inputs(started)
        .bench_local_refs(|watch| feed(watch, deltas));
}

/// The first 1 000 deltas, into a fresh watch.
#[divan::bench]
fn first_1000_deltas(bencher: Bencher) {
    let deltas = &REPLY[..SLICE];
    bencher
        .counter(ItemsCount::new(SLICE))
        .with_inputs(started)
        .bench_local_refs(|watch| feed(watch, deltas));
}

/// The last 1 000 deltas, into a watch that has read the 19 000 before them.
#[divan::bench]
fn last_1000_deltas(bencher: Bencher) {
    static PREFED: LazyLock<StreamWatch> = LazyLock::new(|| {
        let mut watch = started();
        feed(&mut watch, &REPLY[..DELTAS - SLICE]);
        watch
    });
    let deltas = &REPLY[DELTAS - SLICE..];
    bencher
        .counter(ItemsCount::new(SLICE))
        .with_inputs(|| PREFED.clone())
        .bench_local_refs(|watch| feed(watch, deltas));
}

/// Issue 8: the cost per delta must not depend on how much was generated. 1 000 deltas
/// are timed after 1 KB and after 1 MB of output have gone through the same watch
/// (reported as ns/delta; target ratio ≤ 1.3).
static LONG: LazyLock<Vec<Delta>> = LazyLock::new(|| {
    let mut deltas = Vec::new();
    let mut units = 0usize;
    while units < 1_048_576 + 4 * SLICE {
        for delta in REPLY.iter() {
            units += delta.text.encode_utf16().count();
            deltas.push(Delta {
                reasoning: delta.reasoning,
                text: delta.text.clone(),
            });
        }
    }
    deltas
});

/// How many of the long reply's deltas make up `units` UTF-16 units.
fn prefix_for(units: usize) -> usize {
    let mut seen = 0;
    for (index, delta) in LONG.iter().enumerate() {
        if seen >= units {
            return index;
        }
        seen += delta.text.encode_utf16().count();
    }
    LONG.len()
}

fn after(bencher: Bencher, units: usize) {
    let start = prefix_for(units);
    let mut prefed = started();
    feed(&mut prefed, &LONG[..start]);
    let deltas = &LONG[start..start + SLICE];
    bencher
        .counter(ItemsCount::new(SLICE))
        .with_inputs(|| prefed.clone())
        .bench_local_refs(|watch| feed(watch, deltas));
}

/// 1 000 deltas after 1 KB of output.
#[divan::bench]
fn deltas_after_1kb(bencher: Bencher) {
    after(bencher, 1_024);
}

/// 1 000 deltas after 1 MB of output.
#[divan::bench]
fn deltas_after_1mb(bencher: Bencher) {
    after(bencher, 1_048_576);
}
