//! `ccare demo`: an offline showcase of the agent loop on the scripted provider.
//!
//! Five turns in one session: the model writes a file with a tool, reads it back,
//! then — after the agent is dropped and the session reopened from the store, as a
//! new process would — searches the session log, starts a looping list that stream
//! watch stops and resumes, and finally asks context care for a rest with its own
//! handoff note, which summarizes the earlier turns into a checkpoint. Everything goes
//! through the real host: SQLite store, agent loop, built-in tools confined to
//! `$CCARE_HOME/demo-workspace`, both plugins. Only the model is scripted.

use std::io::Write as _;
use std::sync::Arc;

use ccare_agent::tools::{FileLimits, Workspace, builtin_tools};
use ccare_agent::{Agent, AgentOptions, Host, LiveChunk};
use ccare_core::kinds::TurnEndReason;
use ccare_core::{ContentBlock, SystemClock};
use ccare_llm::script::ScriptProvider;
use ccare_llm::{Chunk, Llm, LlmConfig, ProviderConfig, ProviderKind};
use ccare_session::{Registry, Session};

use crate::Failure;
use crate::home::Home;

/// The model's side of the demo, one reply per request.
const DEMO_SCRIPT: &str = r###"
{"reasoning": "The user wants a note on disk. I will write it with write_file.", "text": "I'll write the note now.", "tool_calls": [{"name": "write_file", "arguments": {"path": "notes/context.md", "content": "# Context care\n\nLong agent sessions fail when the context overflows. Keep a durable log,\ncompact with care, and never split a tool call from its result.\n"}}]}
{"text": "Done: notes/context.md holds a four-line note on context care."}
{"tool_calls": [{"name": "read_file", "arguments": {"path": "notes/context.md"}}]}
{"text": "The note says long sessions fail when the context overflows, and recommends a durable log and careful compaction that keeps tool calls with their results."}
{"tool_calls": [{"name": "session_search", "arguments": {"query": "durable log", "limit": 3}}]}
{"text": "Found it: the earlier turns mention the durable log in the note I wrote and in the file I read back. Nothing was lost across the restart."}
{"text": "LOOPING_REPLY"}
{"text": "Back on track (the system stopped my repeating list): write the note, read it back, search the log."}
{"text": "I'll leave a handoff note and rest.", "tool_calls": [{"name": "context_rest", "arguments": {"note": HANDOFF_NOTE}}]}
{"expect": {"purpose": "compaction"}, "text": "## Primary Request and Intent\n- Write a short note on context care to notes/context.md, read it back, search the session for \"durable log\", list the steps.\n## Key Technical Concepts\n- durable session log; compaction that keeps tool calls with their results\n## Files and Code\n- notes/context.md (four lines, written and read back)\n## Errors and Fixes\n- a repeating list was stopped by stream watch and resumed\n## Pending Jobs\n(none)\n## Current Work\n- resting at the user's request\n## Next Step\n- wait for the next request\n## Critical Context\n(none)"}
{"text": "Rested: the earlier turns are a checkpoint now, and my note is kept verbatim after it."}
"###;

/// The model's handoff note for its rest (1000–8000 characters, as `context_rest` asks).
const HANDOFF_NOTE: &str = "Handoff. Goal of the session: show the user how a context-cared agent works. Done so far: I wrote notes/context.md with write_file (four lines: long agent sessions fail when the context overflows; keep a durable log; compact with care; never split a tool call from its result), read it back with read_file and summarized it, then, after the session was closed and reopened from the store, searched the session log for \"durable log\" with session_search and found both the note I wrote and the file I read back, which shows nothing was lost across the restart. When asked to list the steps, I started a list that began to repeat itself; stream watch stopped it mid-generation, kept what I had written, and I resumed with the three real steps: write the note, read it back, search the log. Open items: none; the user has not asked for anything else. If work continues: reread notes/context.md before changing it, keep answers short, and use session_search rather than guessing what happened earlier in this session. Identifiers worth keeping: the file notes/context.md in the demo workspace, and the query \"durable log\".";

const PROMPTS: [&str; 5] = [
    "Write a short note about context care to notes/context.md.",
    "What does the note say?",
    "Search this session for \"durable log\".",
    "List the steps we took.",
    "That's all for now. Take a rest, and leave yourself a handoff note.",
];

/// Context care's settings for the demo: a short retained tail and a low fresh-text
/// threshold, so this small session (a few thousand tokens) already has earlier
/// history worth summarizing when the model asks for a rest. The defaults wait for far
/// more.
fn care_config() -> serde_json::Value {
    serde_json::json!({"retain_tokens": 600, "min_fresh_tokens": 300})
}

/// The route the demo model is priced against by context-care.
const DEMO_MODEL: &str = "demo/scripted";

fn host(home: &Home) -> Result<(Arc<Host>, ccare_care::ContextCare), Failure> {
    let mut config = LlmConfig::default();
    config
        .providers
        .insert("demo".to_owned(), ProviderConfig::new(ProviderKind::Script));
    config.models.insert(
        DEMO_MODEL.to_owned(),
        ccare_llm::ModelConfig {
            context_window: Some(16_000),
            max_output_tokens: Some(1_000),
            ..ccare_llm::ModelConfig::default()
        },
    );
    let mut llm = Llm::from_config(config, &|_| None).map_err(Failure::failed)?;
    // The fourth reply loops, so the stream watch has something to stop.
    let looping = "- check the build\\n".repeat(60);
    let script =
        ScriptProvider::from_jsonl(&DEMO_SCRIPT.replace("LOOPING_REPLY", &looping).replace(
            "HANDOFF_NOTE",
            &serde_json::to_string(HANDOFF_NOTE).map_err(Failure::failed)?,
        ))
        .map_err(Failure::failed)?;
    llm.insert_provider(
        "demo",
        ProviderConfig::new(ProviderKind::Script),
        Arc::new(script),
    );
    let route = llm.route(DEMO_MODEL).map_err(Failure::failed)?;
    let registry = Arc::new(Registry::with_host_defaults());
    let sessions = home
        .sessions_with(Arc::clone(&registry), ccare_core::Locale::En)
        .map_err(Failure::failed)?;
    let host = Arc::new(Host::new(Arc::new(llm), Arc::new(sessions), registry));
    let root = home.dir.join("demo-workspace");
    std::fs::create_dir_all(&root).map_err(Failure::failed)?;
    let workspace = Workspace::new(root).map_err(Failure::failed)?;
    for tool in builtin_tools(workspace, FileLimits::default()) {
        host.add_tool(tool)
            .map_err(|error| Failure::failed(anyhow::anyhow!(error)))?;
    }
    let care = ccare_care::ContextCare::default().with_route(ccare_care::RouteSnapshot::of(&route));
    host.mount(&care, &care_config())
        .map_err(|error| Failure::failed(anyhow::anyhow!(error)))?;
    host.mount(
        &ccare_watch::plugin::StreamWatchPlugin::default(),
        &serde_json::json!({}),
    )
    .map_err(|error| Failure::failed(anyhow::anyhow!(error)))?;
    Ok((host, care))
}

fn agent(host: &Arc<Host>, session: Session) -> Agent {
    Agent::new(
        Arc::clone(host),
        session,
        Arc::new(SystemClock),
        AgentOptions::new(DEMO_MODEL),
    )
}

/// Runs one turn, printing the streamed answer and one line per tool call.
async fn turn(agent: &Agent, prompt: &str) -> Result<(), Failure> {
    let mut out = std::io::stdout();
    writeln!(out, "\n> {prompt}").map_err(Failure::failed)?;
    let mut live = agent.subscribe_live();
    let mut printer = Printer {
        at_line_start: true,
    };
    agent.prompt(prompt);
    let idle = agent.when_idle();
    tokio::pin!(idle);
    let reason = loop {
        tokio::select! {
            biased;
            received = live.recv() => {
                if let Ok(chunk) = received
                    && let Err(error) = printer.show(&chunk)
                {
                    // Nobody reads the demo any more (`ccare demo | head`): end the
                    // turn cleanly in the log, then stop quietly.
                    agent.cancel(ccare_agent::CancelCause::User, false).await;
                    agent.when_idle().await;
                    return Err(Failure::failed(error));
                }
            }
            reason = &mut idle => break reason,
        }
    };
    while let Ok(chunk) = live.try_recv() {
        printer.show(&chunk).map_err(Failure::failed)?;
    }
    if !printer.at_line_start {
        writeln!(out).map_err(Failure::failed)?;
    }
    match reason {
        Some(TurnEndReason::Completed) | None => Ok(()),
        Some(other) => Err(Failure::failed(anyhow::anyhow!(
            "the demo turn ended {other:?}"
        ))),
    }
}

/// Streams answer text and puts each tool call on a line of its own.
struct Printer {
    at_line_start: bool,
}

impl Printer {
    fn show(&mut self, live: &LiveChunk) -> std::io::Result<()> {
        let mut out = std::io::stdout().lock();
        match &live.chunk {
            Chunk::TextDelta { text, .. } => {
                out.write_all(text.as_bytes())?;
                self.at_line_start = text.ends_with('\n');
            }
            Chunk::BlockEnd {
                block: ContentBlock::ToolCall(call),
                ..
            } => {
                if !self.at_line_start {
                    writeln!(out)?;
                }
                writeln!(out, "  → {} {}", call.name, call.arguments)?;
                self.at_line_start = true;
            }
            _ => {}
        }
        out.flush()
    }
}

pub(crate) async fn run(home: &Home) -> Result<(), Failure> {
    let (host, care) = host(home)?;
    let mut meta = ccare_core::JsonObject::new();
    meta.insert("title".to_owned(), serde_json::json!("ccare demo"));
    let session = host.sessions().create(None, meta).await?;
    let id = session.id().clone();
    let mut out = std::io::stdout();
    writeln!(
        out,
        "ccare demo — scripted model, real agent loop, session {id}"
    )
    .map_err(Failure::failed)?;

    let first = agent(&host, session.clone());
    turn(&first, PROMPTS[0]).await?;
    turn(&first, PROMPTS[1]).await?;
    session.flush().await.map_err(Failure::failed)?;
    drop(first);
    host.sessions().close(&id).await?;

    writeln!(
        out,
        "\n(the agent stops; the session is reopened from the store and resumed)"
    )
    .map_err(Failure::failed)?;
    let reopened = host.sessions().open(&id).await?;
    let second = agent(&host, reopened.clone());
    turn(&second, PROMPTS[2]).await?;
    turn(&second, PROMPTS[3]).await?;
    let stopped = reopened.with_log(|log| {
        log.events().iter().any(|event| {
            event.kind() == ccare_core::kinds::TURN_END
                && event.data_json().contains("stream-watch")
        })
    });
    if stopped {
        writeln!(out,
            "\n(stream-watch stopped the repeating list mid-generation, kept what it had written, and resumed the work)"
        ).map_err(Failure::failed)?;
    }
    turn(&second, PROMPTS[4]).await?;
    reopened.flush().await.map_err(Failure::failed)?;
    if let Some(Ok(actions)) = care.actions(&reopened).await {
        for action in actions
            .iter()
            .filter(|action| action.data["outcome"] == "committed")
        {
            writeln!(out,
                "\n(context care summarized the earlier turns into a checkpoint at the model's request: the next request's input went from {} to {} tokens; operation {})",
                action.data["beforeInput"],
                action.data["afterInput"],
                action.operation_id()
            ).map_err(Failure::failed)?;
        }
    }

    let note = home.dir.join("demo-workspace/notes/context.md");
    writeln!(
        out,
        "\n{} events logged. The file the model wrote: {}",
        reopened.head(),
        note.display()
    )
    .map_err(Failure::failed)?;
    if let Some(Ok(report)) = care.report(&reopened).await {
        writeln!(
            out,
            "\nContext care, the next request (levels for the model, numbers for you):"
        )
        .map_err(Failure::failed)?;
        for line in ccare_care::report::render_report(&report) {
            writeln!(out, "  {line}").map_err(Failure::failed)?;
        }
    }
    writeln!(
        out,
        "Look closer: ccare sessions show {id}    (or: ccare sessions export {id})"
    )
    .map_err(Failure::failed)?;
    writeln!(out,
        "             ccare context actions --session {id}    (then: ccare context diff --session {id} --op OPERATION)"
    ).map_err(Failure::failed)?;
    Ok(())
}
