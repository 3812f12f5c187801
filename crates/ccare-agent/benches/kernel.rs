//! Kernel overhead per step (issue target: at most 1 ms at a 10,000-message session,
//! excluding provider time and fsync). Run: `cargo bench -p ccare-agent --bench kernel`.
//!
//! Each sample is one whole turn of one step — `agent.prompt(..)` then `when_idle()`:
//! `turn/start`, the prompt, `step/start`, the request built from the derived view,
//! the stream committed as `assistant/message`, `step/end`, `turn/end`, with the three
//! flushes the loop makes (turn start, before dispatch, turn end).
//!
//! - The provider answers at once from prebuilt chunks (`Instant`), so provider time is
//!   about zero. (`ScriptProvider` is not used here: it keeps a copy of every request
//!   — 10,000 messages each — and, without a scripted `usage`, serialises the whole
//!   request to estimate one, which is provider time, not kernel time.)
//! - `step_memory`: on [`MemoryStore`], where a flush costs nothing: the kernel figure.
//!   `messages` is the session size before the step (0 shows the fixed cost).
//! - `step_sqlite`: the same on [`SqliteStore`] (WAL, `synchronous=FULL`): includes
//!   three fsyncs per turn, so it is reported separately and not held to 1 ms.
//! - `parts_at_10k`: pieces of a step on the 10,000-message session, to see where the
//!   time goes: one append; the derived-view snapshot after an append (a cache miss;
//!   `request.rs` no longer takes it per step, it reads the log's derived messages);
//!   the request messages `build_call` makes (and their drop); the `CallConfig` clone
//!   `PreparedCall::stream` makes per attempt; the request-header fingerprint.
//!
//! The session is prefilled by appending whole completed turns directly (`turn/start`,
//! `user/message`, `step/start`, `assistant/message`, `step/end`, `turn/end`, about
//! 300 bytes a message), then one warm-up turn lets the agent learn each assistant
//! message's provider once (an agent on an existing session reads them from the log on
//! its first step). Every sample adds two messages, which the figures ignore.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use std::collections::HashMap;
use std::sync::{Arc, OnceLock};

use ccare_agent::{
    Agent, AgentOptions, BoxFuture, Concurrency, Host, Plugin, PluginScope, SystemSection, Tool,
    ToolContext, ToolDef, ToolOutcome,
};
use ccare_core::kinds::{
    AssistantMessage, StepEnd, StepStart, TurnEnd, TurnEndReason, TurnStart, UserMessage,
};
use ccare_core::{
    ContentBlock, EventDraft, JsonObject, Message, Source, SurfaceOp, SystemClock, TextBlock,
    TokenUsage,
};
use ccare_llm::{
    BlockKind, Chunk, ChunkStream, Finish, GenerateRequest, Llm, LlmConfig, Provider,
    ProviderConfig, ProviderKind, ToolSpec,
};
use ccare_session::{Registry, Session, Sessions, SessionsConfig};
use ccare_store::{MemoryStore, SqliteConfig, SqliteStore, Store};
use serde_json::{Value, json};

fn main() {
    divan::main();
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

/// A provider that answers every request at once with one short text.
struct Instant {
    chunks: Vec<Chunk>,
}

impl Instant {
    fn new() -> Self {
        let text = "Done.".to_owned();
        Self {
            chunks: vec![
                Chunk::BlockStart {
                    index: 0,
                    kind: BlockKind::Text,
                    id: None,
                    name: None,
                },
                Chunk::TextDelta {
                    index: 0,
                    text: text.clone(),
                },
                Chunk::BlockEnd {
                    index: 0,
                    block: ContentBlock::Text(TextBlock {
                        text,
                        extra: ccare_core::Extra::new(),
                    }),
                },
                Chunk::Usage(TokenUsage {
                    input: 1000,
                    output: 2,
                    ..TokenUsage::default()
                }),
                Chunk::Finish(Finish::Stop),
            ],
        }
    }
}

impl Provider for Instant {
    fn stream(
        &self,
        _request: GenerateRequest,
        _cancel: ccare_llm::CancellationToken,
    ) -> ChunkStream {
        Box::pin(futures_util::stream::iter(self.chunks.clone()))
    }
}

/// A tool that is advertised but never called (it gives the header realistic tools).
struct Idle(ToolDef);

impl Tool for Idle {
    fn def(&self) -> &ToolDef {
        &self.0
    }

    fn call(&self, _context: ToolContext, _arguments: Value) -> BoxFuture<'static, ToolOutcome> {
        Box::pin(async { Ok(Vec::new()) })
    }
}

fn system_text() -> String {
    "You are a careful assistant. Answer briefly and cite files. ".repeat(35)
}

/// Six tools with small schemas.
fn tool_defs() -> Vec<ToolDef> {
    ["read", "write", "list", "grep", "search", "status"]
        .into_iter()
        .map(|name| ToolDef {
            spec: ToolSpec {
                name: name.into(),
                description: format!(
                    "{name}s things in the workspace; see the manual for the exact rules and limits"
                )
                .into(),
                input_schema: json!({
                    "type": "object",
                    "properties": {
                        "path": {"type": "string", "description": "a path inside the workspace"},
                        "limit": {"type": "integer", "minimum": 1, "maximum": 1000},
                        "pattern": {"type": "string"}
                    },
                    "required": ["path"],
                    "additionalProperties": false
                })
                .into(),
            },
            concurrency: Concurrency::ParallelSafe,
            timeout_ms: None,
            validates_own_arguments: false,
        })
        .collect()
}

/// A system prompt of about 2 KB and six tools with small schemas, like a real host.
struct Realistic;

impl Plugin for Realistic {
    fn name(&self) -> &str {
        "bench"
    }

    fn mount(
        &self,
        _config: &Value,
        scope: &mut PluginScope<'_>,
    ) -> Result<(), ccare_agent::MountError> {
        scope.system_section(SystemSection {
            name: "rules".into(),
            order: 0,
            text: system_text(),
        });
        for def in tool_defs() {
            scope.tool(Arc::new(Idle(def)))?;
        }
        Ok(())
    }
}

fn host(store: Arc<dyn Store>) -> (Arc<Host>, Arc<Sessions>) {
    let registry = Arc::new(Registry::with_host_defaults());
    let sessions = Arc::new(Sessions::new(
        store,
        Arc::new(SystemClock),
        Arc::clone(&registry),
        SessionsConfig::default(),
    ));
    let mut config = LlmConfig::default();
    config
        .providers
        .insert("s".into(), ProviderConfig::new(ProviderKind::Script));
    let mut llm = Llm::from_config(config, &|_| None).unwrap();
    llm.insert_provider(
        "s",
        ProviderConfig::new(ProviderKind::Script),
        Arc::new(Instant::new()),
    );
    let host = Arc::new(Host::new(Arc::new(llm), Arc::clone(&sessions), registry));
    host.mount(&Realistic, &json!({})).unwrap();
    (host, sessions)
}

fn draft<T: ccare_core::EventData>(data: &T) -> EventDraft {
    EventDraft::typed(data).unwrap()
}

/// Appends `messages / 2` completed turns, each a prompt and an answer.
async fn prefill(session: &Session, messages: u64) {
    let filler = "lorem ipsum dolor sit amet ".repeat(10);
    for turn in 1..=u32::try_from(messages / 2).unwrap() {
        let mut prompt = Message::from_blocks(vec![ContentBlock::text(format!(
            "question {turn}: {filler}"
        ))]);
        prompt.id = Some(format!("m{turn}"));
        prompt.source = Some(Source::user());
        let answer =
            Message::from_blocks(vec![ContentBlock::text(format!("answer {turn}: {filler}"))]);
        let drafts = [
            draft(&TurnStart { turn }),
            draft(&UserMessage { message: prompt }).with_surface(SurfaceOp::Append),
            draft(&StepStart { turn, step: 1 }),
            draft(&AssistantMessage {
                turn,
                step: 1,
                call_id: format!("llm-{turn}"),
                provider: "s".into(),
                model: "scripted".into(),
                message: answer,
                usage: None,
                finish: "stop".into(),
                interrupted: false,
                stream: vec![],
            })
            .with_surface(SurfaceOp::Append),
            draft(&StepEnd {
                turn,
                step: 1,
                interrupted: false,
                repair: false,
            }),
            draft(&TurnEnd {
                turn,
                reason: TurnEndReason::Completed,
                repair: false,
            }),
        ];
        for event in drafts {
            session.append(event).unwrap();
        }
        if turn % 500 == 0 {
            session.flush().await.unwrap();
        }
    }
    session.flush().await.unwrap();
}

/// An agent on a session of `messages` messages, after one warm-up turn.
struct Fixture {
    _dir: Option<tempfile::TempDir>,
    agent: Agent,
}

fn fixture(sqlite: bool, messages: u64) -> Fixture {
    runtime().block_on(async {
        let (dir, store): (_, Arc<dyn Store>) = if sqlite {
            let dir = tempfile::tempdir().unwrap();
            let store = SqliteStore::open(SqliteConfig::new(dir.path().join("bench.db"))).unwrap();
            (Some(dir), Arc::new(store))
        } else {
            (None, Arc::new(MemoryStore::new()))
        };
        let (host, sessions) = host(store);
        let session = sessions.create(None, JsonObject::new()).await.unwrap();
        prefill(&session, messages).await;
        let agent = Agent::new(
            host,
            session,
            Arc::new(SystemClock),
            AgentOptions::new("s/scripted"),
        );
        step(&agent).await;
        Fixture { _dir: dir, agent }
    })
}

async fn step(agent: &Agent) {
    agent.prompt("one more question");
    let end = agent.when_idle().await;
    assert_eq!(end, Some(TurnEndReason::Completed));
}

/// One turn of one step on the in-memory store: the kernel's own cost.
#[divan::bench(args = [0, 10_000], sample_count = 200, sample_size = 1)]
fn step_memory(bencher: divan::Bencher, messages: u64) {
    let fixture = fixture(false, messages);
    bencher.bench_local(|| runtime().block_on(step(&fixture.agent)));
}

/// One turn of one step on SQLite: the kernel plus three fsyncs.
#[divan::bench(args = [10_000], sample_count = 100, sample_size = 1)]
fn step_sqlite(bencher: divan::Bencher, messages: u64) {
    let fixture = fixture(true, messages);
    bencher.bench_local(|| runtime().block_on(step(&fixture.agent)));
}

mod parts_at_10k {
    use super::*;

    fn session() -> Session {
        let fixture = fixture(false, 10_000);
        fixture.agent.session().clone()
    }

    fn notice() -> EventDraft {
        let mut message = Message::from_blocks(vec![ContentBlock::text("a notice")]);
        message.source = Some(Source::plugin_notice("bench"));
        draft(&UserMessage { message }).with_surface(SurfaceOp::Append)
    }

    /// One in-memory append (encode, validators, surface, store hand-off).
    #[divan::bench(sample_count = 200, sample_size = 10)]
    fn append(bencher: divan::Bencher) {
        let session = session();
        bencher.bench_local(|| session.append(notice()).unwrap());
    }

    /// The derived view right after an append (the cache is stale): a snapshot of
    /// every live message.
    #[divan::bench(sample_count = 200, sample_size = 1)]
    fn derived_view_after_append(bencher: divan::Bencher) {
        let session = session();
        bencher
            .with_inputs(|| session.append(notice()).unwrap())
            .bench_local_values(|_| session.derived_view());
    }

    /// What `request.rs` does every step to compare headers: clone the tool specs (as
    /// `Toolbox::specs`) and serialise system + tools.
    #[divan::bench(sample_count = 200, sample_size = 10)]
    fn header_fingerprint(bencher: divan::Bencher) {
        let system = Some(system_text());
        let specs: Vec<ToolSpec> = tool_defs().into_iter().map(|def| def.spec).collect();
        bencher.bench_local(|| {
            let tools: Vec<ToolSpec> = specs.clone();
            let tools: Vec<Value> = tools
                .iter()
                .map(|tool| {
                    json!({
                        "name": tool.name,
                        "description": tool.description,
                        "input_schema": tool.input_schema,
                    })
                })
                .collect();
            json!({"system": system.clone(), "tools": tools}).to_string()
        });
    }

    /// The request messages `build_call` makes from a (cached) view: per message an
    /// `Arc` clone, and per assistant message a lookup of its provider in the agent's
    /// `origins` map plus an `Arc<str>` clone (`RequestMessage::origin`). Not dropped.
    #[divan::bench(sample_count = 200, sample_size = 1)]
    fn request_messages(bencher: divan::Bencher) {
        let session = session();
        let view = session.derived_view();
        let origins = origins(&view);
        bencher.bench_local(|| request_messages_of(&view, &origins));
    }

    /// Dropping those messages (the kernel drops each request's copies).
    #[divan::bench(sample_count = 200, sample_size = 1)]
    fn request_messages_drop(bencher: divan::Bencher) {
        let session = session();
        let view = session.derived_view();
        let origins = origins(&view);
        bencher
            .with_inputs(|| request_messages_of(&view, &origins))
            .bench_local_values(drop);
    }

    /// `CallConfig::clone` of a 10,000-message call, as `PreparedCall::stream` makes
    /// one per attempt for the provider's `GenerateRequest`. Not dropped.
    #[divan::bench(sample_count = 200, sample_size = 1)]
    fn call_config_clone(bencher: divan::Bencher) {
        let session = session();
        let view = session.derived_view();
        let config = ccare_llm::CallConfig {
            model: "s/scripted".into(),
            max_tokens: None,
            temperature: None,
            reasoning_effort: None,
            system: Some(system_text()),
            tools: tool_defs().into_iter().map(|def| def.spec).collect(),
            messages: request_messages_of(&view, &origins(&view)),
            purpose: ccare_llm::Purpose::Conversation,
            ext: JsonObject::new(),
            credential: None,
        };
        bencher.bench_local(|| config.clone());
    }

    fn origins(view: &ccare_session::DerivedView) -> HashMap<u64, Option<std::sync::Arc<str>>> {
        view.messages
            .iter()
            .filter(|message| message.role == ccare_core::Role::Assistant)
            .map(|message| (message.seq, Some(std::sync::Arc::<str>::from("s"))))
            .collect()
    }

    fn request_messages_of(
        view: &ccare_session::DerivedView,
        origins: &HashMap<u64, Option<std::sync::Arc<str>>>,
    ) -> Vec<ccare_llm::RequestMessage> {
        view.messages
            .iter()
            .map(|derived| ccare_llm::RequestMessage {
                role: derived.role,
                message: Arc::clone(&derived.message),
                origin: match derived.role {
                    ccare_core::Role::User => None,
                    ccare_core::Role::Assistant => origins.get(&derived.seq).cloned().flatten(),
                },
            })
            .collect()
    }
}
