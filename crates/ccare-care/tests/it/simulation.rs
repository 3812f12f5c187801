//! The long-session simulation (issue 7 acceptance): 300 turns against the fake
//! OpenAI-compatible server on a 16k-token window, with tool results of varied sizes
//! (some far above the pruning threshold) and context-window refusals injected at
//! pseudo-random requests. Read back from the log, the journal and what the server
//! received:
//! - no dispatched request exceeds `H`;
//! - every committed compaction makes the request smaller;
//! - no request separates a tool call from its result;
//! - the task statement of turn 1 reaches every request;
//! - every injected overflow is recovered or fails with the original error;
//! - the journal accounts for every request the server saw and every compaction.
//!
//! It prints the tokens spent on summaries against the tokens they saved.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use ccare_agent::testing::TestHost;
use ccare_care::{ContextCare, RouteSnapshot};
use ccare_core::kinds::TurnEndReason;
use ccare_fake_openai::{FakeServer, RecordedRequest, Reply, Script, openai_usage};
use ccare_llm::{LlmConfig, ModelConfig, ProviderConfig, ProviderKind};
use ccare_store::Store;
use serde_json::{Value, json};

const TASK: &str = "TASK: build the widget exporter for the billing team";
const TURNS: u64 = 300;

/// A deterministic pseudo-random number in 0..1000 from a counter.
fn roll(counter: u64) -> u64 {
    (counter
        .wrapping_mul(6_364_136_223_846_793_005)
        .wrapping_add(1_442_695_040_888_963_407)
        >> 33)
        % 1000
}

fn tokens_of(request: &RecordedRequest) -> u64 {
    u64::try_from(request.raw_body.len() / 4).unwrap_or(u64::MAX)
}

/// What the fake model answers: summaries keep the task line; conversation requests
/// call the `dump` tool now and then, answer in text otherwise, and some are refused
/// as too long.
fn responder(
    overflows: Arc<AtomicU64>,
    counter: Arc<AtomicU64>,
) -> impl Fn(&RecordedRequest) -> Reply {
    move |request| {
        let n = counter.fetch_add(1, Ordering::SeqCst);
        let usage = openai_usage(tokens_of(request), 0, 40, 0);
        if request.header("x-ccare-purpose") == Some("compaction") {
            let task = if request.raw_body.contains(TASK) {
                TASK
            } else {
                "task unknown"
            };
            return Reply::Chunks(
                Script::new()
                    .text(format!(
                        "## Primary Request and Intent\n- {task}\n## Current Work\n- exporting batch {n}\n## Next Step\n- continue"
                    ))
                    .finish("stop")
                    .usage(usage),
            );
        }
        let messages = request.body["messages"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        let last_role = messages
            .last()
            .and_then(|message| message["role"].as_str())
            .unwrap_or_default()
            .to_owned();
        if roll(n) < 40 && last_role == "user" {
            overflows.fetch_add(1, Ordering::SeqCst);
            return Reply::overflow();
        }
        if last_role == "user" && roll(n + 7) < 250 {
            let size = [200, 3_000, 12_000, 30_000][usize::try_from(roll(n + 3) % 4).unwrap_or(0)];
            return Reply::Chunks(
                Script::new()
                    .tool_call(
                        0,
                        Some(&format!("call_{n}")),
                        Some("dump"),
                        json!({"size": size}).to_string(),
                    )
                    .finish("tool_calls")
                    .usage(usage),
            );
        }
        Reply::Chunks(
            Script::new()
                .text(format!("Done with step {n}. {}", "ok ".repeat(40)))
                .finish("stop")
                .usage(usage),
        )
    }
}

/// A tool whose result has the asked number of characters.
struct Dump;

impl ccare_agent::Tool for Dump {
    fn def(&self) -> &ccare_agent::ToolDef {
        static DEF: std::sync::OnceLock<ccare_agent::ToolDef> = std::sync::OnceLock::new();
        DEF.get_or_init(|| ccare_agent::ToolDef {
            spec: ccare_llm::ToolSpec {
                name: "dump".to_owned(),
                description: "prints data".into(),
                input_schema:
                    json!({"type": "object", "properties": {"size": {"type": "integer"}}}).into(),
            },
            concurrency: ccare_agent::Concurrency::ParallelSafe,
            timeout_ms: None,
            validates_own_arguments: false,
        })
    }
    fn call(
        &self,
        _context: ccare_agent::ToolContext,
        arguments: Value,
    ) -> ccare_agent::BoxFuture<'static, ccare_agent::ToolOutcome> {
        let size = arguments["size"].as_u64().unwrap_or(100) as usize;
        Box::pin(async move {
            let text: String = (0..size)
                .map(|index| {
                    if index % 60 == 59 {
                        '\n'
                    } else {
                        char::from(b'a' + (index % 26) as u8)
                    }
                })
                .collect();
            Ok(vec![ccare_core::ContentBlock::text(text)])
        })
    }
}

/// Every assistant tool call in a request is answered by a tool message right after
/// it, and every tool message answers a call before it.
fn pairs_are_whole(messages: &[Value]) -> bool {
    let mut open: Vec<String> = Vec::new();
    for message in messages {
        match message["role"].as_str() {
            Some("assistant") => {
                if !open.is_empty() {
                    return false;
                }
                open = message["tool_calls"]
                    .as_array()
                    .map(|calls| {
                        calls
                            .iter()
                            .filter_map(|call| call["id"].as_str().map(str::to_owned))
                            .collect()
                    })
                    .unwrap_or_default();
            }
            Some("tool") => {
                let id = message["tool_call_id"].as_str().unwrap_or_default();
                let Some(position) = open.iter().position(|call| call == id) else {
                    return false;
                };
                open.remove(position);
            }
            _ => {
                if !open.is_empty() {
                    return false;
                }
            }
        }
    }
    open.is_empty()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_long_session_stays_within_budget_and_keeps_its_task() {
    let server = FakeServer::start().await.unwrap();
    let overflows = Arc::new(AtomicU64::new(0));
    server.respond_with(responder(
        Arc::clone(&overflows),
        Arc::new(AtomicU64::new(1)),
    ));
    let dir = tempfile::tempdir().unwrap();
    let mut provider = ProviderConfig::new(ProviderKind::Openai);
    provider.base_url = Some(server.base_url());
    provider.api_key_env = Some("FAKE_KEY".into());
    provider.max_attempts = 1;
    let mut config = LlmConfig::default();
    config.providers.insert("fake".into(), provider);
    config.models.insert(
        "fake/model".into(),
        ModelConfig {
            context_window: Some(16_000),
            max_output_tokens: Some(1_000),
            ..ModelConfig::default()
        },
    );
    let kit = TestHost::builder("")
        .sqlite_file(dir.path().join("sim.db"))
        .llm_config(config)
        .env("FAKE_KEY", "sk")
        .build()
        .unwrap();
    let route = kit.host().llm().route("fake/model").unwrap();
    kit.host().add_tool(Arc::new(Dump)).unwrap();
    let care = ContextCare::default().with_route(RouteSnapshot::of(&route));
    kit.host().mount(&care, &json!({})).unwrap();
    let session = kit.session().await.unwrap();
    let agent = kit.agent(&session, "fake/model");

    let mut failed_turns = Vec::new();
    for turn in 0..TURNS {
        let words = 20 + roll(turn * 31) % 150;
        let prompt = if turn == 0 {
            format!("{TASK}. {}", "plan the export ".repeat(20))
        } else {
            format!(
                "step {turn}: {}",
                "lorem ipsum dolor ".repeat(usize::try_from(words).unwrap_or(20))
            )
        };
        agent.prompt(prompt);
        match agent.when_idle().await {
            Some(TurnEndReason::Completed) => {}
            Some(TurnEndReason::Error { failure }) => {
                failed_turns.push((turn, serde_json::to_value(&failure).unwrap()));
            }
            other => panic!("turn {turn}: {other:?}"),
        }
    }

    let requests = server.requests();
    let conversation: Vec<&RecordedRequest> = requests
        .iter()
        .filter(|request| request.header("x-ccare-purpose") == Some("conversation"))
        .collect();
    let summaries: Vec<&RecordedRequest> = requests
        .iter()
        .filter(|request| request.header("x-ccare-purpose") == Some("compaction"))
        .collect();

    // Tool calls and results travel together; the task reaches every request.
    for (index, request) in conversation.iter().enumerate() {
        let messages = request.body["messages"].as_array().unwrap();
        assert!(
            pairs_are_whole(messages),
            "request {index} splits a tool batch"
        );
        assert!(
            request.raw_body.contains(TASK),
            "request {index} lost the task"
        );
    }

    // The journal: every request the server saw, within H; every compaction smaller.
    let journal = care.actions(&session).await.unwrap().unwrap();
    let report = care.report(&session).await.unwrap().unwrap();
    let hard = report.budget.as_ref().unwrap().hard_input;
    let store = kit.reopen_store().unwrap();
    let domains = ccare_agent::domains::Domains::new(Arc::new(store) as Arc<dyn Store>);
    let records = domains
        .open(
            ccare_agent::domains::DomainSpec::new("context_care_requests", 1)
                .table(ccare_agent::domains::TableSpec::new("records")),
            "reader",
        )
        .await
        .unwrap()
        .table("records")
        .unwrap()
        .entries("call_");
    let dispatched: Vec<&Value> = records
        .iter()
        .map(|(_, record)| &record["data"])
        .filter(|data| data["dispatched"] == true && data["purpose"] == "conversation")
        .collect();
    let summary_records = records
        .iter()
        .filter(|(_, record)| {
            record["data"]["dispatched"] == true && record["data"]["purpose"] == "compaction"
        })
        .count();
    assert_eq!(
        summary_records,
        summaries.len(),
        "every summary call is journaled too"
    );
    assert_eq!(
        dispatched.len(),
        conversation.len(),
        "one record per request seen"
    );
    for data in &dispatched {
        assert!(data["inputTokens"].as_i64().unwrap() <= hard, "{data}");
    }
    let committed: Vec<&Value> = journal
        .iter()
        .map(|action| &action.data)
        .filter(|data| data["outcome"] == "committed" && data["action"] == "summary")
        .collect();
    assert!(
        !committed.is_empty(),
        "a 300-turn session on 16k needs compaction"
    );
    for data in &committed {
        assert!(
            data["afterInput"].as_u64() < data["beforeInput"].as_u64(),
            "{data}"
        );
    }
    let starts = session.with_log(|log| {
        log.events()
            .iter()
            .filter(|event| event.kind() == "compaction/start")
            .count()
    });
    let compacting: usize = journal
        .iter()
        .filter(|action| {
            action.data["compactionId"].is_string()
                || action.data["phase"] == "no-useful-range"
                || action.data["phase"] == "failed"
        })
        .count();
    assert!(
        starts <= compacting,
        "every compaction in the log is journaled"
    );
    let prunes = journal
        .iter()
        .filter(|action| action.data["action"] == "prune")
        .count();
    assert!(prunes > 0, "some tool results were far above the threshold");

    // Overflows: recovered, or the turn failed with the original error.
    let injected = overflows.load(Ordering::SeqCst);
    assert!(injected > 0);
    for (turn, failure) in &failed_turns {
        assert_eq!(
            failure["code"], "CONTEXT_WINDOW_EXCEEDED",
            "turn {turn}: {failure}"
        );
    }
    assert!(u64::try_from(failed_turns.len()).unwrap() <= injected);

    let spent: u64 = summaries.iter().map(|request| tokens_of(request)).sum();
    let saved: u64 = committed
        .iter()
        .map(|data| data["beforeInput"].as_u64().unwrap() - data["afterInput"].as_u64().unwrap())
        .sum();
    eprintln!(
        "simulation: {TURNS} turns, {} conversation requests, {} summaries ({} committed, ~{spent} tokens sent), {prunes} prunes, {injected} overflows injected, {} turns failed; each committed summary saves ~{} tokens per later request (total {saved})",
        conversation.len(),
        summaries.len(),
        committed.len(),
        failed_turns.len(),
        saved / u64::try_from(committed.len()).unwrap_or(1),
    );
}
