//! Issue 7 performance target: planning a maintenance action on a 10,000-message
//! session in at most 10 ms. Run: `cargo bench -p ccare-care --bench plan`.
//!
//! Planning is what a boundary does before any summary call: price every surface
//! message on the frozen basis (the nodes of `range_nodes`), then select and rank the
//! candidate ranges (`range::propose`); `memo_key_10k` adds the memo key it computes
//! next (CC-MNT-5). The session is a realistic mix: prompts,
//! replies, tool calls with their results (a few long), and status notices.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use ccare_care::config::RangeStrategy;
use ccare_care::pricing::{FileTexts, FrozenPricing, ImagePricing, PricingBasis};
use ccare_care::range::{NodeKind, RangeNode, RankInput, propose};
use ccare_core::{ContentBlock, Message, ToolCallBlock, ToolResultBlock};
use ccare_meter::{Meter, MeterConfig};

fn main() {
    divan::main();
}

/// The meter and a frozen pricing on its own estimate (scale 1), as a session
/// without calibration has.
fn frozen() -> (Meter, FrozenPricing) {
    let meter = Meter::new(&MeterConfig::default()).unwrap();
    let frozen = FrozenPricing::capture(
        &meter,
        PricingBasis::meter_estimate(&meter),
        ImagePricing::FixedEstimate,
        FileTexts::default(),
    );
    (meter, frozen)
}

/// What an armed automatic boundary ranks with: a 20,000-token tail, the default fresh
/// threshold, and a release target at half the load.
fn rank_input(load: u64) -> RankInput {
    RankInput {
        retain: 20_000,
        min_fresh_tokens: 1024,
        load,
        release_target: load / 2,
        strategy: RangeStrategy::BasicPrefix,
        expected_checkpoint_tokens: None,
        allow_fallback: true,
    }
}

fn session(messages: usize) -> Vec<(Message, NodeKind)> {
    let mut out = Vec::with_capacity(messages);
    let mut index = 0;
    while out.len() < messages {
        out.push((
            Message::from_blocks(vec![ContentBlock::text(format!(
                "step {index}: please look at src/module_{index}.rs and fix the failing test"
            ))]),
            NodeKind::User,
        ));
        let call = ToolCallBlock {
            id: format!("c{index}"),
            name: "read_file".to_owned(),
            arguments: serde_json::json!({"path": format!("src/module_{index}.rs")}),
            raw_arguments: None,
            extra: Default::default(),
        };
        out.push((
            Message::from_blocks(vec![ContentBlock::ToolCall(call)]),
            NodeKind::Assistant,
        ));
        let body =
            "fn main() { println!(\"hello\"); }\n".repeat(if index % 50 == 0 { 400 } else { 12 });
        out.push((
            Message::from_blocks(vec![ContentBlock::ToolResult(ToolResultBlock {
                call_id: format!("c{index}"),
                name: "read_file".to_owned(),
                content: vec![ContentBlock::text(body)],
                is_error: false,
                extra: Default::default(),
            })]),
            NodeKind::ToolResult,
        ));
        out.push((
            Message::from_blocks(vec![ContentBlock::text(format!(
                "Fixed module {index}: the off-by-one in the loop bound is gone and the test passes."
            ))]),
            NodeKind::Assistant,
        ));
        index += 1;
    }
    out.truncate(messages);
    out
}

#[divan::bench]
fn plan_10k(bencher: divan::Bencher) {
    let messages = session(10_000);
    let (meter, frozen) = frozen();
    bencher.bench_local(|| {
        let pricer = frozen.pricer(&meter).unwrap();
        let scale = pricer.text_scale();
        let nodes: Vec<RangeNode> = messages
            .iter()
            .enumerate()
            .map(|(seq, (message, kind))| RangeNode {
                seq: seq as u64,
                tokens: pricer.message(message).unwrap().ceil(scale),
                kind: *kind,
                tool_calls: u32::from(matches!(message.content[0], ContentBlock::ToolCall(_))),
                tool_results: u32::from(matches!(message.content[0], ContentBlock::ToolResult(_))),
            })
            .collect();
        let load: u64 = nodes.iter().map(|node| node.tokens).sum();
        propose(&nodes, &rank_input(load)).unwrap()
    });
}

fn priced(messages: &[(Message, NodeKind)]) -> Vec<RangeNode> {
    let (meter, frozen) = frozen();
    let pricer = frozen.pricer(&meter).unwrap();
    let scale = pricer.text_scale();
    messages
        .iter()
        .enumerate()
        .map(|(seq, (message, kind))| RangeNode {
            seq: seq as u64,
            tokens: pricer.message(message).unwrap().ceil(scale),
            kind: *kind,
            tool_calls: u32::from(matches!(message.content[0], ContentBlock::ToolCall(_))),
            tool_results: u32::from(matches!(message.content[0], ContentBlock::ToolResult(_))),
        })
        .collect()
}

/// The pricing half alone: every message through the meter.
#[divan::bench]
fn price_10k(bencher: divan::Bencher) {
    let messages = session(10_000);
    bencher.bench_local(|| priced(&messages));
}

/// The selection half alone: range selection and ranking over priced nodes.
#[divan::bench]
fn propose_10k(bencher: divan::Bencher) {
    let nodes = priced(&session(10_000));
    let load: u64 = nodes.iter().map(|node| node.tokens).sum();
    bencher.bench_local(|| propose(&nodes, &rank_input(load)).unwrap());
}

/// The no-useful-range memo key (CC-MNT-5) of the 10,000-message session's
/// proposal, as an armed boundary computes it after planning: every selected message's
/// part (digest and unscaled price) is already known from earlier boundaries, since a
/// message at a seq never changes. `memo_parts_10k` is the one-time cost of those
/// parts (a process's first boundary on a long session).
#[divan::bench]
fn memo_key_10k(bencher: divan::Bencher) {
    let (selected, summary) = memo_setup();
    bencher.bench_local(|| {
        ccare_care::memo::proposal_key(
            selected.iter().copied(),
            &ccare_care::memo::MemoPolicy {
                scale: 1.0,
                header: Some("header"),
                route: Some("s/small"),
                summary: &summary,
            },
        )
    });
}

/// The parts of every selected message, computed from scratch.
#[divan::bench]
fn memo_parts_10k(bencher: divan::Bencher) {
    let messages = session(10_000);
    let (meter, frozen) = frozen();
    bencher.bench_local(|| {
        let pricer = frozen.pricer(&meter).unwrap();
        messages
            .iter()
            .map(|(message, _)| ccare_care::memo::MemoPart {
                digest: ccare_care::memo::message_digest(message),
                price: pricer.message(message).ok(),
            })
            .collect::<Vec<_>>()
    });
}

fn memo_setup() -> (
    Vec<(u64, ccare_care::memo::MemoPart)>,
    ccare_care::config::SummaryConfig,
) {
    let messages = session(10_000);
    let nodes = priced(&messages);
    let load: u64 = nodes.iter().map(|node| node.tokens).sum();
    let proposal = propose(&nodes, &rank_input(load)).unwrap().unwrap();
    let seqs: std::collections::HashSet<u64> = proposal
        .candidate
        .range()
        .seqs(&nodes)
        .into_iter()
        .collect();
    let (meter, frozen) = frozen();
    let pricer = frozen.pricer(&meter).unwrap();
    let selected = messages
        .iter()
        .enumerate()
        .filter(|(seq, _)| seqs.contains(&(*seq as u64)))
        .map(|(seq, (message, _))| {
            (
                seq as u64,
                ccare_care::memo::MemoPart {
                    digest: ccare_care::memo::message_digest(message),
                    price: pricer.message(message).ok(),
                },
            )
        })
        .collect();
    (selected, ccare_care::config::SummaryConfig::default())
}
