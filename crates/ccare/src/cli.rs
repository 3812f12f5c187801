//! The argument grammar.

use std::path::PathBuf;

use clap::{ArgGroup, Args, Parser, Subcommand};

/// context-care: a runtime for LLM agents that takes care of the context lifecycle.
///
/// A command whose output pipe closes (`ccare … | head -1`) stops quietly and exits
/// 0; a running turn is cancelled and logged first. Logs on stderr are coloured only
/// on a terminal and never with NO_COLOR set.
#[derive(Debug, Parser)]
#[command(name = "ccare", version)]
pub(crate) struct Cli {
    /// Data directory (default: $CCARE_HOME, else ./.ccare).
    #[arg(long, global = true, value_name = "DIR")]
    pub(crate) home: Option<PathBuf>,

    /// Config file (default: $CCARE_CONFIG, else ./ccare.toml, else $CCARE_HOME/ccare.toml).
    #[arg(long, global = true, value_name = "FILE")]
    pub(crate) config: Option<PathBuf>,

    #[command(subcommand)]
    pub(crate) command: Command,
}

#[derive(Debug, Subcommand)]
pub(crate) enum Command {
    /// List, inspect, export, import and fork sessions.
    #[command(subcommand)]
    Sessions(SessionsCommand),
    /// An offline showcase: a scripted model on the real agent loop with context care
    /// and stream watch, in a new session you can then inspect.
    Demo,
    /// Send one prompt, run the agent until idle, print the answer.
    Run(RunArgs),
    /// Talk to the agent in the terminal: one prompt per line, answers stream to stdout.
    Chat(ChatArgs),
    /// Tools of the time-context plugin.
    #[command(subcommand, name = "time-context")]
    TimeContext(TimeContextCommand),
    /// List the configured routes and their context windows.
    Models(ModelsArgs),
    /// Context care: how loaded a session is and what maintenance did.
    #[command(subcommand)]
    Context(ContextCommand),
    /// Stream watch: try its triggers on recorded streams.
    #[command(subcommand)]
    Watch(WatchCommand),
    /// Serve the HTTP API (sessions, events, context) and the plugins' routes on one
    /// port, behind the token; Ctrl-C or SIGTERM stops it gracefully.
    Serve(ServeArgs),
}

#[derive(Debug, Args)]
pub(crate) struct ServeArgs {
    /// The address to listen on (default: [http] addr, else 127.0.0.1:7878); a
    /// non-loopback address needs [http] token_env.
    #[arg(long, value_name = "ADDR")]
    pub(crate) addr: Option<std::net::SocketAddr>,
}

#[derive(Debug, Subcommand)]
pub(crate) enum WatchCommand {
    /// Runs the stream watch over a recorded stream (one delta per line:
    /// `{"kind": "text"|"reasoning", "text": "..."}`) and prints each decision with its
    /// line and offset, using the triggers of `[plugins.stream-watch]` (or the
    /// defaults). The file is read line by line, so its size does not matter; no model
    /// is called.
    Replay(ReplayArgs),
}

#[derive(Debug, Args)]
pub(crate) struct ReplayArgs {
    /// The recorded stream (JSONL).
    pub(crate) file: std::path::PathBuf,
    /// Print one JSON object per decision.
    #[arg(long)]
    pub(crate) json: bool,
}

#[derive(Debug, Subcommand)]
pub(crate) enum ContextCommand {
    /// A fresh sample of what the session's next request would cost (appends nothing).
    Status(ContextStatusArgs),
    /// The session's maintenance actions (prune, summary, deep rest) from the journal.
    Actions(ContextActionsArgs),
    /// What one action replaced: the shadowed events, the checkpoint, before/after input.
    Diff(ContextDiffArgs),
    /// Undoes one compaction (appends a restore; only if the request stays under S).
    Undo(ContextUndoArgs),
}

#[derive(Debug, Args)]
pub(crate) struct ContextUndoArgs {
    /// The session.
    #[arg(long, value_name = "ID")]
    pub(crate) session: String,
    /// The operation id of the summary, prune or deep rest (see `ccare context actions`).
    #[arg(long, value_name = "OPID")]
    pub(crate) op: String,
    /// Wait for another driver of the session instead of failing with SESSION_BUSY.
    #[arg(long)]
    pub(crate) wait: bool,
}

#[derive(Debug, Args)]
pub(crate) struct ContextDiffArgs {
    /// The session.
    #[arg(long, value_name = "ID")]
    pub(crate) session: String,
    /// The operation id (see `ccare context actions`).
    #[arg(long, value_name = "OPID")]
    pub(crate) op: String,
}

#[derive(Debug, Args)]
pub(crate) struct ContextActionsArgs {
    /// The session.
    #[arg(long, value_name = "ID")]
    pub(crate) session: String,
    /// Print one JSON object per action.
    #[arg(long)]
    pub(crate) json: bool,
}

#[derive(Debug, Args)]
pub(crate) struct ContextStatusArgs {
    /// The session.
    #[arg(long, value_name = "ID")]
    pub(crate) session: String,
    /// The model, `<provider>/<model>` (default: [agent] model).
    #[arg(long, value_name = "PROVIDER/MODEL")]
    pub(crate) model: Option<String>,
    /// The profile, a `[profiles.<ID>]` table of the config (default: the top-level
    /// `[agent]` and `[plugins.*]` tables).
    #[arg(long, value_name = "ID")]
    pub(crate) profile: Option<String>,
    /// Print the report as JSON.
    #[arg(long)]
    pub(crate) json: bool,
}

#[derive(Debug, Args)]
#[command(group(ArgGroup::new("input").required(true).args(["prompt", "prompt_file", "tool_results"])))]
pub(crate) struct RunArgs {
    /// The prompt; `-` reads it from stdin to the end (UTF-8).
    #[arg(long, value_name = "TEXT")]
    pub(crate) prompt: Option<String>,
    /// Read the prompt from FILE (UTF-8), for prompts longer than one argument may be.
    #[arg(long = "prompt-file", value_name = "FILE")]
    pub(crate) prompt_file: Option<PathBuf>,
    /// The model, `<provider>/<model>` (default: [agent] model).
    #[arg(long, value_name = "PROVIDER/MODEL")]
    pub(crate) model: Option<String>,
    /// Replay scripted replies offline: `script:FILE.jsonl`.
    #[arg(long, value_name = "script:FILE")]
    pub(crate) provider: Option<String>,
    /// The profile, a `[profiles.<ID>]` table of the config (default: the top-level
    /// `[agent]` and `[plugins.*]` tables).
    #[arg(long, value_name = "ID")]
    pub(crate) profile: Option<String>,
    /// Continue this session (default: a new one, whose id goes to stderr).
    #[arg(long, value_name = "ID")]
    pub(crate) session: Option<String>,
    /// Print the session's new events as JSON lines instead of the answer.
    #[arg(long)]
    pub(crate) json: bool,
    /// When another process drives the session, wait for it to finish instead of
    /// failing with SESSION_BUSY (exit 2).
    #[arg(long)]
    pub(crate) wait: bool,
    /// Tools this turn declares that the caller runs (ACT-3): a JSON array of
    /// `{name, description, input_schema}`. When the model calls one, the run prints
    /// the open call ids on stderr (and an `awaiting-tools` line with --json) and exits 0.
    #[arg(
        long = "external-tools",
        value_name = "FILE.json",
        conflicts_with = "tool_results"
    )]
    pub(crate) external_tools: Option<PathBuf>,
    /// Answer the calls the session awaits (ACT-3) and finish the turn: a JSON array of
    /// `{call_id, content, is_error?}` (content: text). Needs --session.
    #[arg(long = "tool-results", value_name = "FILE.json", requires = "session")]
    pub(crate) tool_results: Option<PathBuf>,
}

#[derive(Debug, Args)]
pub(crate) struct ChatArgs {
    /// The model, `<provider>/<model>` (default: [agent] model).
    #[arg(long, value_name = "PROVIDER/MODEL")]
    pub(crate) model: Option<String>,
    /// Replay scripted replies offline: `script:FILE.jsonl`.
    #[arg(long, value_name = "script:FILE")]
    pub(crate) provider: Option<String>,
    /// The profile, a `[profiles.<ID>]` table of the config (default: the top-level
    /// `[agent]` and `[plugins.*]` tables).
    #[arg(long, value_name = "ID")]
    pub(crate) profile: Option<String>,
    /// Continue this session (default: a new one).
    #[arg(long, value_name = "ID")]
    pub(crate) session: Option<String>,
    /// When another process drives the session, wait for it to finish instead of
    /// failing with SESSION_BUSY (exit 2).
    #[arg(long)]
    pub(crate) wait: bool,
}

#[derive(Debug, Args)]
pub(crate) struct ModelsArgs {
    /// Print a JSON array for scripts.
    #[arg(long)]
    pub(crate) json: bool,
}

#[derive(Debug, Subcommand)]
pub(crate) enum SessionsCommand {
    /// List sessions, newest first.
    List(ListArgs),
    /// Show a session's events, surface and audit.
    Show(ShowArgs),
    /// Write a session as JSONL (header line, then one event per line).
    Export(ExportArgs),
    /// Import a JSONL session file, keeping its id.
    Import(ImportArgs),
    /// Fork a session after an event into a new session.
    Fork(ForkArgs),
    /// Check a stored log against the host's validators and the time-context
    /// invariant; each violation is reported with its seq and rule.
    Check(CheckArgs),
}

#[derive(Debug, Args)]
pub(crate) struct CheckArgs {
    /// The session id.
    pub(crate) id: String,
    /// Print a JSON array of violations for scripts.
    #[arg(long)]
    pub(crate) json: bool,
}

#[derive(Debug, Args)]
pub(crate) struct ListArgs {
    /// Print a JSON array for scripts.
    #[arg(long)]
    pub(crate) json: bool,
}

#[derive(Debug, Args)]
pub(crate) struct ShowArgs {
    /// The session id.
    pub(crate) id: String,
    /// Print JSON for scripts.
    #[arg(long)]
    pub(crate) json: bool,
}

#[derive(Debug, Args)]
pub(crate) struct ExportArgs {
    /// The session id.
    pub(crate) id: String,
    /// Write to FILE instead of stdout.
    #[arg(short, long, value_name = "FILE")]
    pub(crate) output: Option<PathBuf>,
}

#[derive(Debug, Args)]
pub(crate) struct ImportArgs {
    /// The JSONL file (`-` for stdin).
    pub(crate) file: PathBuf,
    /// Print the imported session as JSON.
    #[arg(long)]
    pub(crate) json: bool,
}

#[derive(Debug, Args)]
pub(crate) struct ForkArgs {
    /// The source session id.
    pub(crate) id: String,
    /// The last inherited seq (default: the source's last event).
    #[arg(long, value_name = "SEQ")]
    pub(crate) at: Option<u64>,
    /// The new session's id (default: a fresh one).
    #[arg(long = "new-id", value_name = "ID")]
    pub(crate) new_id: Option<String>,
    /// Print the new session as JSON.
    #[arg(long)]
    pub(crate) json: bool,
}

#[derive(Debug, Subcommand)]
pub(crate) enum TimeContextCommand {
    /// Print exactly the two lines the model would see for a reading.
    Preview(PreviewArgs),
}

#[derive(Debug, Args)]
pub(crate) struct PreviewArgs {
    /// IANA time zone, e.g. Asia/Shanghai.
    #[arg(long)]
    pub(crate) zone: String,
    /// The sampled instant, epoch milliseconds.
    #[arg(long = "now-ms", allow_negative_numbers = true)]
    pub(crate) now_ms: i64,
    /// The turn.
    #[arg(long)]
    pub(crate) turn: u32,
    /// The step.
    #[arg(long)]
    pub(crate) step: u32,
    /// The baseline instant (epoch ms); without it elapsed is `unavailable`.
    #[arg(long = "baseline-ms", allow_negative_numbers = true)]
    pub(crate) baseline_ms: Option<i64>,
}
