//! The offline showcase's host (`ccare demo`): the scripted model's replies, the five
//! prompts, and a host on the real stack (the configured store, the agent loop, the
//! built-in tools confined to `$CCARE_HOME/demo-workspace`, context care and stream
//! watch). Only the model is scripted; the CLI drives the turns and prints.

use std::sync::Arc;

use ccare_agent::tools::{FileLimits, Workspace, builtin_tools};
use ccare_agent::{AgentOptions, Host};
use ccare_core::Locale;
use ccare_llm::script::ScriptProvider;
use ccare_llm::{Llm, LlmConfig, ProviderConfig, ProviderKind};
use ccare_session::Registry;

use crate::agents::Agents;
use crate::config::Settings;
use crate::error::AppError;
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

/// The user's five prompts, one per turn.
pub const PROMPTS: [&str; 5] = [
    "Write a short note about context care to notes/context.md.",
    "What does the note say?",
    "Search this session for \"durable log\".",
    "List the steps we took.",
    "That's all for now. Take a rest, and leave yourself a handoff note.",
];

/// Context care's settings for the demo: a short retained tail and a low fresh-text
/// threshold, so this small session (a few thousand tokens) already has earlier
/// history worth summarizing when the model asks for a rest (the defaults wait for far
/// more), and a status notice at every boundary from the first (`quiet_start = false`),
/// so the showcase shows what the model is told.
fn care_config() -> serde_json::Value {
    serde_json::json!({"retain_tokens": 600, "min_fresh_tokens": 300, "quiet_start": false})
}

/// The route the demo model is priced against by context-care.
pub const DEMO_MODEL: &str = "demo/scripted";

/// The demo's host and its context-care handle, over the store `settings` names.
pub fn host(
    settings: &Settings,
    home: &Home,
) -> Result<(Arc<Host>, ccare_care::ContextCare), AppError> {
    let demo = |error: &dyn std::fmt::Display| AppError::Internal(error.to_string());
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
    let mut llm = Llm::from_config(config, &|_| None).map_err(|error| demo(&error))?;
    // The fourth reply loops, so the stream watch has something to stop.
    let looping = "- check the build\\n".repeat(60);
    let note = serde_json::to_string(HANDOFF_NOTE).map_err(|error| demo(&error))?;
    let script = ScriptProvider::from_jsonl(
        &DEMO_SCRIPT
            .replace("LOOPING_REPLY", &looping)
            .replace("HANDOFF_NOTE", &note),
    )
    .map_err(|error| demo(&error))?;
    llm.insert_provider(
        "demo",
        ProviderConfig::new(ProviderKind::Script),
        Arc::new(script),
    );
    let route = llm.route(DEMO_MODEL).map_err(|failure| demo(&failure))?;
    let registry = Arc::new(Registry::with_host_defaults());
    let store = crate::store::open_store(settings)?;
    let sessions = crate::store::sessions(settings, store, Arc::clone(&registry), Locale::En);
    let host = Arc::new(Host::new(Arc::new(llm), Arc::new(sessions), registry));
    let root = home.dir.join("demo-workspace");
    std::fs::create_dir_all(&root).map_err(|source| AppError::DataDir {
        dir: root.clone(),
        source,
    })?;
    let workspace = Workspace::new(root).map_err(|error| demo(&error))?;
    for tool in builtin_tools(workspace, FileLimits::default()) {
        host.add_tool(tool).map_err(AppError::Tool)?;
    }
    let care = ccare_care::ContextCare::default().with_route(ccare_care::RouteSnapshot::of(&route));
    host.mount(&care, &care_config())?;
    host.mount(
        &ccare_watch::plugin::StreamWatchPlugin::default(),
        &serde_json::json!({}),
    )?;
    Ok((host, care))
}

/// The registry the demo drives its session through (ACT-1): the demo's host, its
/// scripted model, and `settings`' `[host] lease_ms` and `actor_idle_ms`.
pub fn agents(host: &Arc<Host>, settings: &Settings) -> Agents {
    Agents::new(
        Arc::clone(host),
        AgentOptions::new(DEMO_MODEL),
        settings.host.lease_ms,
        settings.host.actor_idle_ms,
    )
}
