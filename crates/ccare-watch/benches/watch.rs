//! The stream watch per delta (SW-3, issue 14 target 3): a reply as 20 000 deltas of
//! 1–4 characters through every default trigger, on a mixed trace of code, prose,
//! lists and Chinese, reasoning and text in blocks of 50 deltas.
//!
//! Targets: ≤ 33 ns per delta (`reply_20000_deltas`, throughput counted in deltas);
//! `deltas_after_1mb` within 1.2× of `deltas_after_1kb` (the cost per delta must not
//! grow with the text read so far); no allocation per delta in the steady state (the
//! counting allocator below: `deltas_after_1mb` shows 0 allocations). SW-3's own
//! targets: all 20 000 under 50 ms, the last 1 000 at most 2× the first 1 000.
//!
//! The 1 000-delta rows time the same 1 000 deltas in every sample, which the
//! processor's branch predictors partly learn: they read about a third faster per
//! delta than the 20 000-delta rows at any position of the reply, so they are for
//! ratios (1 MB against 1 KB, last against first), and `reply_20000_deltas` is the
//! per-delta figure. `reply_20000_deltas_restarted` runs the reply through a watch
//! whose buffers are already grown: the first reply's growth is not what costs.
//!
//! The `stage_*` rows feed the same reply through one default trigger each, so the
//! time per delta can be split by stage (the rest of `reply_20000_deltas` is the
//! engine's own dispatch).
//!
//! Run with `cargo bench -p ccare-watch --bench watch`; `scripts/bench-summary.sh watch`
//! prints the issue's figures from these rows.

#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use std::sync::LazyLock;

use ccare_watch::engine::{Frame, StreamWatch, TriggerConfig, Triggers};
use divan::counter::ItemsCount;
use divan::{Bencher, black_box};

/// Counts every allocation, so each row reports allocations per iteration.
#[global_allocator]
static ALLOC: divan::AllocProfiler = divan::AllocProfiler::system();

fn main() {
    divan::main();
}

/// How many deltas a reply has in this benchmark.
const DELTAS: usize = 20_000;
/// The slice timed at the start and at the end.
const SLICE: usize = 1_000;
/// Deltas per block of one source (reasoning, then text, then reasoning, …).
const BLOCK: usize = 50;

/// One delta: reasoning or text, 1–4 characters. The texts are slices of one reply
/// text, back to back as a stream parser's buffer holds them, so reading the input
/// costs what it costs in a real stream and not a cache miss per delta.
#[derive(Clone, Copy)]
struct Delta {
    reasoning: bool,
    text: &'static str,
}

/// Words the generated prose and lists are made of.
const WORDS: [&str; 16] = [
    "record", "buffer", "schema", "request", "window", "parser", "client", "index", "session",
    "token", "budget", "header", "result", "column", "offset", "reader",
];
/// Chinese phrases the generated Chinese lines are made of (none is an anxiety phrase).
const CJK: [&str; 8] = [
    "读取输入",
    "检查每一条记录",
    "写出摘要",
    "合并结果",
    "更新索引",
    "解析请求头",
    "比较两个版本",
    "记录偏移量",
];

/// One section of the trace, numbered `n`: a code block, prose, a list, Chinese prose,
/// or the old benchmark's short lines (a few repeating).
fn section(n: usize, text: &mut String) {
    let word = |k: usize| WORDS[(n * 7 + k * 3) % WORDS.len()];
    let cjk = |k: usize| CJK[(n * 5 + k) % CJK.len()];
    match n % 5 {
        0 => {
            text.push_str(&format!(
                "```rust\nfn {}_{n}(input: &[u8], limit: usize) -> Option<usize> {{\n",
                word(0)
            ));
            text.push_str(&format!(
                "    let {} = input.iter().take(limit).count();\n",
                word(1)
            ));
            text.push_str(&format!(
                "    if {} > {} {{\n        return None;\n    }}\n",
                word(1),
                n % 97
            ));
            text.push_str(&format!("    Some({} + {n})\n}}\n```\n", word(1)));
        }
        1 => text.push_str(&format!(
            "The {} in pass {n} reads the {} first, then checks each {} against the {} \
             and writes what it found to the {}.\n",
            word(0),
            word(1),
            word(2),
            word(3),
            word(4)
        )),
        2 => {
            for k in 0..4 {
                text.push_str(&format!(
                    "{}. {} {}: {} ok\n",
                    k + 1,
                    word(k),
                    n,
                    word(k + 5)
                ));
            }
        }
        3 => text.push_str(&format!(
            "第{n}步：先{}，再{}，然后{}，最后{}。\n",
            cjk(0),
            cjk(1),
            cjk(2),
            cjk(3)
        )),
        _ => {
            text.push_str(&format!("repeat {}\n", n % 5));
            text.push_str(&format!("step {n}: value {}\n", n * 7 % 1000));
            text.push_str(&format!("检查第{n}项，结果正常\n"));
        }
    }
}

/// The reply: the sections in turn, cut into 1–4-character deltas by a fixed
/// pseudo-random sequence. Nothing in it fires a default trigger, so every trigger
/// stays armed.
static REPLY: LazyLock<Vec<Delta>> = LazyLock::new(|| {
    let mut text = String::new();
    let mut n = 0;
    while text.chars().count() < DELTAS * 4 {
        section(n, &mut text);
        n += 1;
    }
    let text: &'static str = Box::leak(text.into_boxed_str());
    let bounds: Vec<usize> = text.char_indices().map(|(at, _)| at).collect();
    let mut seed: u32 = 0x2545_f491;
    let mut start = 0;
    let mut deltas = Vec::with_capacity(DELTAS);
    while deltas.len() < DELTAS {
        seed = seed.wrapping_mul(1_103_515_245).wrapping_add(12_345);
        let size = 1 + (seed >> 16) as usize % 4;
        deltas.push(Delta {
            reasoning: (deltas.len() / BLOCK).is_multiple_of(2),
            text: &text[bounds[start]..bounds[start + size]],
        });
        start += size;
    }
    let mut check = started(Triggers::defaults());
    assert!(
        feed(&mut check, &deltas) == 0,
        "the benchmark reply must not fire"
    );
    deltas
});

fn started(triggers: Triggers) -> StreamWatch {
    let mut watch = StreamWatch::new(triggers);
    watch.observe(Frame::Start);
    watch
}

fn started_default() -> StreamWatch {
    started(Triggers::defaults())
}

/// Feeds the deltas and returns how many firings they caused.
fn feed(watch: &mut StreamWatch, deltas: &[Delta]) -> usize {
    let mut firings = 0;
    for delta in deltas {
        let frame = if delta.reasoning {
            Frame::Reasoning(delta.text)
        } else {
            Frame::Text(delta.text)
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
        .with_inputs(started_default)
        .bench_local_refs(|watch| feed(watch, deltas));
}

/// The first 1 000 deltas, into a fresh watch.
#[divan::bench]
fn first_1000_deltas(bencher: Bencher) {
    let deltas = &REPLY[..SLICE];
    bencher
        .counter(ItemsCount::new(SLICE))
        .with_inputs(started_default)
        .bench_local_refs(|watch| feed(watch, deltas));
}

/// The last 1 000 deltas, into a watch that has read the 19 000 before them.
#[divan::bench]
fn last_1000_deltas(bencher: Bencher) {
    static PREFED: LazyLock<StreamWatch> = LazyLock::new(|| {
        let mut watch = started_default();
        feed(&mut watch, &REPLY[..DELTAS - SLICE]);
        watch
    });
    let deltas = &REPLY[DELTAS - SLICE..];
    bencher
        .counter(ItemsCount::new(SLICE))
        .with_inputs(|| PREFED.clone())
        .bench_local_refs(|watch| feed(watch, deltas));
}

/// The cost per delta must not depend on how much was generated: 1 000 deltas are
/// timed after 1 KB and after 1 MB of output have gone through the same watch.
static LONG: LazyLock<Vec<Delta>> = LazyLock::new(|| {
    let mut deltas = Vec::new();
    let mut units = 0usize;
    while units < 1_048_576 + 4 * SLICE {
        for delta in REPLY.iter() {
            units += delta.text.encode_utf16().count();
            deltas.push(*delta);
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

/// Deltas fed to each sample's copy of the prefed watch before it is timed: a clone
/// has its buffers cut to their length, and these deltas grow them back, so the timed
/// deltas see the steady state a watch that was never cloned is in (no allocation,
/// no reallocation).
const WARM_UP: usize = 2_000;

/// Times `SLICE` deltas after `units` UTF-16 units of output (the last `WARM_UP`
/// deltas of which each sample's copy reads untimed, see `WARM_UP`).
fn after(bencher: Bencher, units: usize) {
    let start = prefix_for(units);
    let warm_from = start.saturating_sub(WARM_UP);
    let mut prefed = started_default();
    feed(&mut prefed, &LONG[..warm_from]);
    let warm_up = &LONG[warm_from..start];
    let deltas = &LONG[start..start + SLICE];
    bencher
        .counter(ItemsCount::new(SLICE))
        .with_inputs(|| {
            let mut watch = prefed.clone();
            feed(&mut watch, warm_up);
            watch
        })
        .bench_local_refs(|watch| feed(watch, deltas));
}

/// 1 000 deltas after 1 KB of output.
#[divan::bench]
fn deltas_after_1kb(bencher: Bencher) {
    after(bencher, 1_024);
}

/// 1 000 deltas after 1 MB of output (the steady state: its allocations per delta
/// are the issue's figure).
#[divan::bench]
fn deltas_after_1mb(bencher: Bencher) {
    after(bencher, 1_048_576);
}

/// The reply through one default trigger alone, as a stage of the per-delta time.
fn stage(bencher: Bencher, id: &str) {
    let configs = TriggerConfig::defaults()
        .into_iter()
        .filter(|config| config.id == id);
    let triggers = Triggers::new(configs).unwrap();
    let deltas = REPLY.as_slice();
    bencher
        .counter(ItemsCount::new(deltas.len()))
        .with_inputs(|| started(triggers.clone()))
        .bench_local_refs(|watch| feed(watch, deltas));
}

/// Stage: the `line-repeat` trigger (windowed view, line window, checks every 300).
#[divan::bench]
fn stage_line_repeat(bencher: Bencher) {
    stage(bencher, "line-repeat");
}

/// Stage: the `time-anxiety` phrases (reasoning deltas only).
#[divan::bench]
fn stage_time_anxiety(bencher: Bencher) {
    stage(bencher, "time-anxiety");
}

/// Stage: the `context-anxiety` phrases (reasoning deltas only).
#[divan::bench]
fn stage_context_anxiety(bencher: Bencher) {
    stage(bencher, "context-anxiety");
}

/// Stage: no trigger at all, the engine's dispatch and the frame loop alone.
#[divan::bench]
fn stage_no_trigger(bencher: Bencher) {
    let triggers = Triggers::new([]).unwrap();
    let deltas = REPLY.as_slice();
    bencher
        .counter(ItemsCount::new(deltas.len()))
        .with_inputs(|| started(triggers.clone()))
        .bench_local_refs(|watch| feed(watch, deltas));
}

/// All 20 000 deltas of one reply through a watch that read a reply before and was
/// restarted (`Frame::Start`), as an agent's watch is at its next attempt: its
/// buffers are grown, so this is the reply without the first reply's growth.
#[divan::bench]
fn reply_20000_deltas_restarted(bencher: Bencher) {
    let deltas = REPLY.as_slice();
    let mut used = started_default();
    feed(&mut used, deltas);
    bencher
        .counter(ItemsCount::new(deltas.len()))
        .with_inputs(|| {
            let mut watch = used.clone();
            watch.observe(Frame::Start);
            // The clone's buffers are cut to their length; one reply grows them back.
            feed(&mut watch, deltas);
            watch.observe(Frame::Start);
            watch
        })
        .bench_local_refs(|watch| feed(watch, deltas));
}
