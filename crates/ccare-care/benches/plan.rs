//! Issue 7 performance target: planning a maintenance action on a 10,000-message
//! session in at most 10 ms. Run: `cargo bench -p ccare-care --bench plan`.
//!
//! Planning is what a boundary does before any summary call: price every surface
//! message on the frozen basis (the nodes of `range_nodes`), then select and rank the
//! candidate ranges (`range::propose`); `memo_key_10k` adds the memo key it computes
//! next (CC-MNT-5). `plan_10k` prices every message afresh (a process's first plan of
//! a long session, the issue 7 target); `plan_10k_cached` is the plan after a
//! boundary, whose prices come from the session's price cache (issue 14). The session is a realistic mix: prompts,
//! replies, tool calls with their results (a few long), and status notices.
//!
//! Issue 14 targets 1 and 2, the full context-care boundary (journal flush, freeze,
//! measure, notice) as the host runs it after its pre-step chain, each iteration on a
//! session with exactly one new message in its log since the previous boundary (the
//! message is appended untimed, so the boundary is the first to see the new head):
//! - `boundary_10k` / `boundary_1k`: a 10,000 / 1,000-message session whose journal
//!   holds one settled conversation request per 4 messages (what such a session has
//!   made), mounted with `quiet_start = false` so that both sizes take the same path:
//!   every boundary renders and prices its status notice (the setup checks that it
//!   returns one; the bench does not log it, so the next one renders it again).
//!   Targets: `boundary_10k` <= 1 ms, `boundary_10k / boundary_1k` <= 1.5. (With the
//!   default quiet start, a 1,000-message session is at its calm start and appends
//!   no notice while a 10,000-message one is not: the two rows would time different
//!   work.)
//! - `boundary_1000_sessions` / `boundary_1_session`: the 1,000-message session with
//!   1,000 other sessions (20 journal records each) in the store, and with 1, with the
//!   default configuration: each boundary also decides the quiet start, which reads
//!   what the session's journal holds (the setup checks that it stays quiet). Target:
//!   their ratio <= 1.2.
//!
//! - `gate_10k` / `gate_1k`: the request gate (CC-BUD-6, CC-JNL-2: price, journal
//!   `ready` with its two content hashes, flush, compare with `H`) on a conversation
//!   request of the whole surface, each iteration after one more message (appended
//!   and the request prepared untimed). The hashes resume from what the previous
//!   request hashed, so the gate, like the boundary, costs what changed; their ratio
//!   shows whether it grows with the session.
//!
//! - `journal_open_20k` / `journal_open_2k`: a process's first use of the journal
//!   over a SQLite store holding 20,000 / 2,000 request records (20 for each of
//!   1,000 / 100 sessions), all indexed. The open reads every record once (to continue
//!   `dispatchOrder` and to index records that lost their index row), so it grows with
//!   the store; it reads each record's head from its bytes and builds none.
//!
//! The journal rows are written as a store from before issue 14 holds them (keys
//! `call_<callId>`, no session index), so the same bench measures both layouts; the
//! plugin's first boundary (in setup, untimed) opens the journal.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use ccare_care::config::RangeStrategy;
use ccare_care::pricing::{FileTexts, FrozenPricing, ImagePricing, PricingBasis};
use ccare_care::range::{NodeKind, RangeNode, RankInput, propose};
use ccare_core::{ContentBlock, Message, ToolCallBlock, ToolResultBlock};
use ccare_meter::{Meter, MeterConfig};
use ccare_session::Session;
use std::sync::{Arc, OnceLock};

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

/// Planning as the plugin plans after a boundary (`range_nodes::nodes`): the
/// surface's prices come from the session's price cache, which the boundary filled
/// (here: filled once in setup), so only the selection and ranking remain.
#[divan::bench]
fn plan_10k_cached(bencher: divan::Bencher) {
    let messages = session(10_000);
    let surface: Vec<ccare_session::DerivedMessage> = messages
        .iter()
        .enumerate()
        .map(|(seq, (message, kind))| ccare_session::DerivedMessage {
            seq: seq as u64,
            role: match kind {
                NodeKind::Assistant => ccare_core::Role::Assistant,
                _ => ccare_core::Role::User,
            },
            message: Arc::new(message.clone()),
        })
        .collect();
    let (meter, frozen) = frozen();
    let mut cache = ccare_care::pricing::PriceCache::new();
    {
        let pricer = frozen.pricer(&meter).unwrap();
        cache.surface_total(&pricer, 0, &surface).unwrap();
    }
    bencher.bench_local(|| {
        let pricer = frozen.pricer(&meter).unwrap();
        let scale = pricer.text_scale();
        let prices = cache.surface_prices(&pricer, 0, &surface).unwrap();
        let nodes: Vec<RangeNode> = messages
            .iter()
            .zip(prices)
            .enumerate()
            .map(|(seq, ((message, kind), price))| RangeNode {
                seq: seq as u64,
                tokens: price.ceil(scale),
                kind: *kind,
                tool_calls: u32::from(matches!(message.content[0], ContentBlock::ToolCall(_))),
                tool_results: u32::from(matches!(message.content[0], ContentBlock::ToolResult(_))),
            })
            .collect();
        let load: u64 = nodes.iter().map(|node| node.tokens).sum();
        propose(&nodes, &rank_input(load)).unwrap()
    });
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

fn runtime() -> &'static tokio::runtime::Runtime {
    static RUNTIME: OnceLock<tokio::runtime::Runtime> = OnceLock::new();
    RUNTIME.get_or_init(|| {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap()
    })
}

/// A mounted context-care on a host over an in-memory store, one session of
/// `messages` messages (the `session` mix, as user messages), and a journal as a
/// session of that length leaves it, plus `others` other sessions' records.
struct BoundaryRig {
    kit: ccare_agent::testing::TestHost,
    care: ccare_care::ContextCare,
    session: Session,
    hook: ccare_agent::HookContext,
    mix: Vec<(Message, NodeKind)>,
    next: usize,
}

fn user_draft(message: &Message) -> ccare_core::EventDraft {
    let mut message = message.clone();
    message.source = Some(ccare_core::Source::user());
    ccare_core::EventDraft::typed(&ccare_core::kinds::UserMessage { message })
        .unwrap()
        .with_surface(ccare_core::SurfaceOp::Append)
}

/// One settled conversation request of `session` as the journal stores it.
/// Writes `count` settled request records of each `(session, count)` into the
/// journal's records table of `store`, as a store from before the session index
/// holds them (keys `call_<session>-<index>`, no index row), `dispatchOrder`
/// counting across all of them.
async fn store_requests(store: &Arc<dyn ccare_store::Store>, sessions: &[(String, usize)]) {
    let domains = ccare_agent::domains::Domains::new(Arc::clone(store));
    let domain = domains
        .open(
            ccare_agent::domains::DomainSpec::new("context_care_requests", 1)
                .table(ccare_agent::domains::TableSpec::new("records")),
            "context-care",
        )
        .await
        .unwrap();
    let table = domain.table("records").unwrap();
    let mut order = 0;
    for (session, count) in sessions {
        for index in 0..*count {
            order += 1;
            table
                .put(
                    &format!("call_{session}-{index}"),
                    request_row(session, index, order),
                )
                .unwrap();
        }
    }
    domain.flush(None).await.unwrap();
    domains.close("context_care_requests");
}

fn request_row(session: &str, index: usize, order: usize) -> serde_json::Value {
    serde_json::json!({
        "version": 1,
        "sessionId": session,
        "kind": "request",
        "at": 1_000 + index as i64,
        "data": {
            "callId": format!("{session}-{index}"),
            "logRevision": index * 4,
            "sourceSeqs": (0..64).collect::<Vec<u64>>(),
            "purpose": "conversation",
            "budget": {"capacity": 10_000_000, "hardInput": 9_000_000, "softInput": 8_000_000, "releaseTarget": 6_000_000},
            "rawInput": {"textTokens": 10_000 + index as u64, "visualTokens": 0},
            "toolsTokens": 400,
            "inputTokens": 10_000 + index as u64,
            "calibrationHeaderKey": "bench-header",
            "phase": "settled",
            "dispatched": true,
            "dispatchOrder": order,
            "dispatchBasis": "prepared-stream-handoff",
            "attemptId": format!("{session}-{index}#1"),
            "outcome": "completed",
            "eventSeq": index * 4 + 3,
            "eventType": "assistant/message",
            "usage": {"inputTokens": 11_000 + index as u64, "outputTokens": 200},
        },
    })
}

impl BoundaryRig {
    /// The rig, mounted with `config`; its first boundary (untimed) must return
    /// `notices` notices.
    fn new(
        messages: usize,
        others: usize,
        config: serde_json::Value,
        notices: usize,
    ) -> BoundaryRig {
        runtime().block_on(async {
            let store: Arc<dyn ccare_store::Store> = Arc::new(ccare_store::MemoryStore::new());
            let kit = ccare_agent::testing::TestHost::builder("")
                .store(Arc::clone(&store))
                .model(
                    "s/small",
                    ccare_llm::ModelConfig {
                        context_window: Some(10_000_000),
                        max_output_tokens: Some(1_000),
                        ..Default::default()
                    },
                )
                .build()
                .unwrap();
            let session = kit.session().await.unwrap();
            let mix = self::session(messages + 1_000);
            for (message, _) in &mix[..messages] {
                session.append(user_draft(message)).unwrap();
            }
            session.flush().await.unwrap();
            // The journal as earlier processes left it.
            let own = session.id().as_str().to_owned();
            let mut sessions = vec![(own, messages / 4)];
            sessions.extend((0..others).map(|other| (format!("other-session-{other:04}"), 20)));
            store_requests(&store, &sessions).await;
            let route = kit.host().llm().route("s/small").unwrap();
            let care = ccare_care::ContextCare::default()
                .with_route(ccare_care::RouteSnapshot::of(&route));
            kit.host().mount(&care, &config).unwrap();
            // The session's controls, loaded as an agent loads them before its first
            // turn: unloaded, every action decides "storage unavailable" and no notice
            // text is ever rendered.
            kit.host().controls().load(session.id()).await.unwrap();
            let hook = ccare_agent::HookContext {
                session: session.clone(),
                turn: 1,
                step: 1,
                cancel: Default::default(),
                clock: Arc::clone(kit.clock()),
            };
            let mut rig = BoundaryRig {
                kit,
                care,
                session,
                hook,
                mix,
                next: messages,
            };
            // The process's first boundary: opens the journal, derives the session's
            // state, prices the whole surface once.
            rig.append();
            assert_eq!(
                rig.boundary().await,
                notices,
                "the path the row says it times"
            );
            rig
        })
    }

    /// One more message in the log (the previous step's).
    fn append(&mut self) {
        let (message, _) = &self.mix[self.next % self.mix.len()];
        self.session.append(user_draft(message)).unwrap();
        self.next += 1;
    }

    /// A conversation request of the whole surface, prepared as the host prepares one.
    fn call(&self) -> ccare_llm::PreparedCall {
        let messages = self
            .session
            .derived_view()
            .messages
            .iter()
            .map(|derived| ccare_llm::RequestMessage {
                role: derived.role,
                message: Arc::clone(&derived.message),
                origin: None,
            })
            .collect();
        self.kit
            .host()
            .llm()
            .prepare_call(ccare_llm::CallConfig {
                model: "s/small".to_owned(),
                system: Some("You are a careful engineer.".to_owned()),
                messages,
                purpose: ccare_llm::Purpose::Conversation,
                ..Default::default()
            })
            .unwrap()
    }

    async fn boundary(&self) -> usize {
        let entered = [Message::from_blocks(vec![ContentBlock::text(
            "please go on with the next module",
        )])];
        let context = ccare_agent::BoundaryContext {
            hook: &self.hook,
            entered: &entered,
            request_only: &[],
        };
        let contribution = self.care.boundary(&context).await.unwrap().unwrap();
        contribution.notices.len()
    }
}

fn bench_boundary(bencher: divan::Bencher, rig: BoundaryRig, notices: usize) {
    let rig = std::cell::RefCell::new(rig);
    bencher
        .with_inputs(|| rig.borrow_mut().append())
        .bench_local_values(|()| {
            let returned = runtime().block_on(rig.borrow().boundary());
            debug_assert_eq!(returned, notices);
            returned
        });
}

/// Every boundary renders and prices its notice (no quiet start).
fn noticing() -> serde_json::Value {
    serde_json::json!({"quiet_start": false})
}

/// The full boundary on a 10,000-message session with one new message.
#[divan::bench(sample_size = 1, sample_count = 1000)]
fn boundary_10k(bencher: divan::Bencher) {
    bench_boundary(bencher, BoundaryRig::new(10_000, 0, noticing(), 1), 1);
}

/// The full boundary on a 1,000-message session with one new message.
#[divan::bench(sample_size = 1, sample_count = 1000)]
fn boundary_1k(bencher: divan::Bencher) {
    bench_boundary(bencher, BoundaryRig::new(1_000, 0, noticing(), 1), 1);
}

/// The 1,000-message boundary with 1,000 other sessions' journals in the store.
#[divan::bench(sample_size = 1, sample_count = 1000)]
fn boundary_1000_sessions(bencher: divan::Bencher) {
    bench_boundary(
        bencher,
        BoundaryRig::new(1_000, 1_000, serde_json::json!({}), 0),
        0,
    );
}

/// The 1,000-message boundary with one other session's journal in the store.
#[divan::bench(sample_size = 1, sample_count = 1000)]
fn boundary_1_session(bencher: divan::Bencher) {
    bench_boundary(
        bencher,
        BoundaryRig::new(1_000, 1, serde_json::json!({}), 0),
        0,
    );
}

/// A journal over a store holding `own` records of one session and 20 of each of
/// `others` other sessions (written as an earlier process left them), opened.
fn listed_journal(
    own: usize,
    others: usize,
) -> (ccare_care::journal::RequestJournal, ccare_core::SessionId) {
    runtime().block_on(async {
        let store: Arc<dyn ccare_store::Store> = Arc::new(ccare_store::MemoryStore::new());
        let mut sessions = vec![("bench-session".to_owned(), own)];
        sessions.extend((0..others).map(|other| (format!("other-session-{other:04}"), 20)));
        store_requests(&store, &sessions).await;
        let journal = ccare_care::journal::RequestJournal::new(
            ccare_agent::domains::Domains::new(store).for_owner("context-care"),
        );
        journal.flush().await.unwrap();
        (
            journal,
            ccare_core::SessionId::new("bench-session").unwrap(),
        )
    })
}

/// Lists the session's records, `resident` (as the process driving it reads them)
/// or not (as a reader of another session, the UI, reads them: from the store).
fn bench_list(bencher: divan::Bencher, others: usize, resident: bool) {
    let (journal, session) = listed_journal(1_024, others);
    if resident {
        runtime().block_on(journal.keep_resident(&session)).unwrap();
    }
    assert_eq!(
        runtime().block_on(journal.list(&session)).unwrap().len(),
        1_024
    );
    assert_eq!(journal.rows_in_memory() > 0, resident);
    bencher.bench_local(|| runtime().block_on(journal.list(&session)).unwrap().len());
}

/// What a freeze after one of the session's own journal writes reads first (every
/// record decode after it is cached): the session's 1,024 kept records
/// (`journal_keep`'s default) listed by its index, from memory (the session is
/// resident, as the one a process drives is), with 1 other session in the store.
#[divan::bench]
fn journal_list_1_session(bencher: divan::Bencher) {
    bench_list(bencher, 1, true);
}

/// [`journal_list_1_session`] with 1,000 other sessions (20 records each) in the store.
#[divan::bench]
fn journal_list_1000_sessions(bencher: divan::Bencher) {
    bench_list(bencher, 1_000, true);
}

/// [`journal_list_1000_sessions`] of a session this process does not drive (the UI's
/// journal of another session): its index rows and each record read from the store.
#[divan::bench(sample_count = 20)]
fn journal_list_stored(bencher: divan::Bencher) {
    bench_list(bencher, 1_000, false);
}

/// A SQLite store (in the temporary directory) whose journal holds 20 settled
/// request records of each of `sessions` sessions, indexed: what a long-running
/// server leaves. The store handle is shared by every open.
fn stored_journal(sessions: usize) -> (tempfile::TempDir, Arc<dyn ccare_store::Store>) {
    let dir = tempfile::tempdir().unwrap();
    let store: Arc<dyn ccare_store::Store> = Arc::new(
        ccare_store::SqliteStore::open(ccare_store::SqliteConfig::new(dir.path().join("ccare.db")))
            .unwrap(),
    );
    runtime().block_on(async {
        let sessions: Vec<(String, usize)> = (0..sessions)
            .map(|session| (format!("session-{session:05}"), 20))
            .collect();
        store_requests(&store, &sessions).await;
        // The first open indexes them (as a store from before the index is opened).
        let journal = ccare_care::journal::RequestJournal::new(
            ccare_agent::domains::Domains::new(Arc::clone(&store)).for_owner("context-care"),
        );
        journal.open().await.unwrap();
    });
    (dir, store)
}

/// Opens the journal of `sessions` sessions (20 records each) as a process's first
/// journal use does: reads what it needs to continue `dispatchOrder` and to find
/// records that lost their index row.
fn bench_open(bencher: divan::Bencher, sessions: usize) {
    let (_dir, store) = stored_journal(sessions);
    bencher.bench_local(|| {
        let journal = ccare_care::journal::RequestJournal::new(
            ccare_agent::domains::Domains::new(Arc::clone(&store)).for_owner("context-care"),
        );
        runtime().block_on(journal.open()).unwrap();
        journal
    });
}

/// The journal's open with 20,000 records in the store (1,000 sessions).
#[divan::bench(sample_count = 10)]
fn journal_open_20k(bencher: divan::Bencher) {
    bench_open(bencher, 1_000);
}

/// The journal's open with 2,000 records in the store (100 sessions).
#[divan::bench(sample_count = 20)]
fn journal_open_2k(bencher: divan::Bencher) {
    bench_open(bencher, 100);
}

fn bench_gate(bencher: divan::Bencher, rig: BoundaryRig) {
    let rig = std::cell::RefCell::new(rig);
    bencher
        .with_inputs(|| {
            rig.borrow_mut().append();
            rig.borrow().call()
        })
        .bench_local_values(|call| {
            let rig = rig.borrow();
            runtime()
                .block_on(rig.care.check_request(&rig.hook, &call))
                .unwrap()
                .unwrap();
            call
        });
}

/// The request gate on a 10,000-message session with one new message.
#[divan::bench(sample_size = 1, sample_count = 300)]
fn gate_10k(bencher: divan::Bencher) {
    bench_gate(bencher, BoundaryRig::new(10_000, 0, noticing(), 1));
}

/// The request gate on a 1,000-message session with one new message.
#[divan::bench(sample_size = 1, sample_count = 300)]
fn gate_1k(bencher: divan::Bencher) {
    bench_gate(bencher, BoundaryRig::new(1_000, 0, noticing(), 1));
}
