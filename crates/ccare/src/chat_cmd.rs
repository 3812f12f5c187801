//! `ccare chat [--session ID] [--wait]`: the interactive agent in the terminal
//! (DESIGN.md §5). The agent comes from the process's `Agents` registry, which holds
//! the session's lease for the whole chat (ACT-1): another
//! process driving the session fails it with `SESSION_BUSY` (exit 2), or with `--wait`
//! is waited for.
//!
//! Output contract, so that `ccare chat < prompts.txt > answers.txt` works: the answer
//! text and what `/status` and `/sessions` print go to stdout; everything else (the
//! banner, the `> ` prompt, reasoning, one line per tool call and per tool result,
//! turn-end notes such as `[cancelled]`) goes to stderr. The prompt is shown only when
//! stdin is a terminal; reasoning is dimmed only when stderr is one.
//!
//! Each input line is one prompt; the next line is read only once the agent is idle,
//! so lines typed (or piped) ahead wait their turn. Ctrl-C while a turn runs cancels
//! it (cause `user`, inbox kept): the partial answer stays on screen and in the log as
//! an interrupted assistant message. Ctrl-C twice within two seconds at the prompt
//! exits with 130; EOF and `/quit` exit 0.
//!
//! Ordering: everything comes from the agent's one ordered stream (ACT-4,
//! `Agent::subscribe_from`): durable events (tool results, turn ends) with the chunks
//! between them, so the screen follows the log. A turn is shown until the stream's
//! `Idle`. If the chat falls behind, the stream says `Lagged` and the chat resubscribes
//! from the last event it showed: no event is skipped or shown twice. Chunks dropped
//! meanwhile are not replayed, so after a lag the answer's text deltas are held back
//! until the attempt's committed `assistant/message`, which supplies the rest of the
//! text: stdout gets the whole answer, each character once (dropped reasoning on
//! stderr is not made up for).
//!
//! A store error (H-STORE-6) fences the session: the turn stops, and the chat says on
//! stderr that what the turn wrote after the error was not stored. The next prompt
//! reopens the session from the store (`Agents::get_or_reopen`, which repairs the
//! stopped turn) and the chat follows the new actor; while the store still fails, the
//! prompt is not sent and the chat goes on, as it does when the store refuses a
//! prompt's inbox row.

use std::io::{BufRead as _, IsTerminal as _, Write as _};
use std::time::{Duration, Instant};

use ccare_agent::{Agent, CancelCause, Command, CommandError, EventStream, LiveChunk, StreamItem};
use ccare_core::kinds::{self, AssistantMessage, ToolResult, TurnEnd, TurnEndReason};
use ccare_core::{ContentBlock, Event, TokenUsage, ToolCallBlock};
use ccare_llm::Chunk;
use ccare_session::Session;
use ccare_store::SessionQuery;
use serde_json::Value;
use tokio::sync::mpsc;

use crate::Failure;
use crate::output::rfc3339_utc;
use ccare_app::{AgentHandle, Agents, Booted, WhenBusy};

/// The commands the banner and the help name.
const HINT: &str = "Ctrl-C cancels a running answer; /status /sessions /quit";
/// How long a first Ctrl-C at the prompt arms the second one.
const EXIT_WINDOW: Duration = Duration::from_secs(2);
/// How many sessions `/sessions` lists.
const SESSIONS_SHOWN: usize = 20;
/// Tool lines are cut to the terminal width (`$COLUMNS`), else to this.
const DEFAULT_WIDTH: usize = 100;

/// Runs the command until EOF, `/quit` or a double Ctrl-C (exit 130).
pub(crate) async fn run(
    booted: &Booted,
    agents: &Agents,
    session_id: Option<&str>,
    wait: bool,
) -> Result<(), Failure> {
    let resumed = session_id.is_some();
    let handle = crate::drive::obtain(agents, session_id, wait).await?;
    let session = handle.session().clone();
    let agent = handle.agent().clone();
    let restored = handle.restored();
    if restored > 0 {
        eprintln!("({restored} queued message(s) from an earlier run restored)");
    }
    let state = if resumed {
        format!("resumed, {} events", session.head())
    } else {
        "new".to_owned()
    };
    eprintln!(
        "session {} ({state}) · model {} · {HINT}",
        session.id(),
        booted.options.model
    );
    let mut lines = spawn_line_reader().map_err(Failure::failed)?;
    let mut interrupts = spawn_interrupt_listener();
    let mut chat = Chat {
        booted,
        agents,
        // Only what happens from now on: the log so far is not shown again.
        stream: agent.subscribe_from(session.head().checked_sub(1)),
        last_seq: session.head().checked_sub(1),
        shown: String::new(),
        lagged: false,
        agent,
        session,
        handle,
        screen: Screen::new(),
        cancelling: false,
    };
    let outcome = chat.repl(&mut lines, &mut interrupts).await;
    // Flushes the log and releases the lease.
    let released = agents.stop(chat.handle).await;
    outcome?;
    released.map_err(Failure::failed)
}

/// Why the prompt loop stopped.
enum Exit {
    /// EOF or `/quit`: exit 0.
    Done,
    /// Ctrl-C twice: exit 130.
    Interrupted(&'static str),
}

struct Chat<'a> {
    booted: &'a Booted,
    agents: &'a Agents,
    /// The chat's use of the session's actor: a new one once a fenced session is
    /// reopened.
    handle: AgentHandle,
    agent: Agent,
    session: Session,
    /// The agent's ordered stream (ACT-4): durable events, chunks between them, idle.
    stream: EventStream,
    /// The last event shown: where a lagged stream resumes, and what is never shown
    /// twice.
    last_seq: Option<u64>,
    /// The answer text shown since the last committed attempt.
    shown: String,
    /// The stream lagged since the last committed attempt: text deltas may be missing,
    /// so they wait for the committed message.
    lagged: bool,
    screen: Screen,
    /// Ctrl-C cancelled the running turn.
    cancelling: bool,
}

impl Chat<'_> {
    async fn repl(
        &mut self,
        lines: &mut mpsc::UnboundedReceiver<String>,
        interrupts: &mut mpsc::UnboundedReceiver<()>,
    ) -> Result<(), Failure> {
        let interactive = std::io::stdin().is_terminal();
        let mut armed: Option<Instant> = None;
        let exit = loop {
            if interactive {
                let mut stderr = std::io::stderr().lock();
                let _ = write!(stderr, "> ").and_then(|()| stderr.flush());
            }
            let line = tokio::select! {
                line = lines.recv() => line,
                Some(()) = interrupts.recv() => {
                    if armed.is_some_and(|at| at.elapsed() < EXIT_WINDOW) {
                        if interactive {
                            eprintln!();
                        }
                        break Exit::Interrupted("interrupted (Ctrl-C twice at the prompt)");
                    }
                    armed = Some(Instant::now());
                    let lead = if interactive { "\n" } else { "" };
                    eprintln!("{lead}(press Ctrl-C again to exit)");
                    continue;
                }
            };
            let Some(line) = line else {
                if interactive {
                    eprintln!();
                }
                break Exit::Done;
            };
            armed = None;
            let trimmed = line.trim();
            if trimmed.is_empty() {
                continue;
            }
            if let Some(command) = trimmed.strip_prefix('/') {
                let name = command.split_whitespace().next().unwrap_or_default();
                match name {
                    "quit" | "exit" => break Exit::Done,
                    "status" => self.status().await.map_err(Failure::failed)?,
                    "sessions" => self.sessions().await?,
                    _ => eprintln!("unknown command /{name}; {HINT}"),
                }
                continue;
            }
            if let Some(exit) = self.turn(line, interrupts).await? {
                break exit;
            }
        };
        match exit {
            Exit::Done => Ok(()),
            Exit::Interrupted(why) => Err(Failure {
                code: 130,
                error: anyhow::anyhow!(why),
            }),
        }
    }

    /// Sends one prompt and shows the agent's work until it is idle.
    async fn turn(
        &mut self,
        text: String,
        interrupts: &mut mpsc::UnboundedReceiver<()>,
    ) -> Result<Option<Exit>, Failure> {
        self.cancelling = false;
        if !self.reopen_if_fenced().await {
            return Ok(None);
        }
        let agent = self.agent.clone();
        // Acknowledged once durable in the session's inbox (ACT-2).
        match agent.send(Command::prompt(text)).await {
            Ok(_) => {}
            // The store refused the inbox row: nothing was queued, the chat goes on.
            Err(error @ CommandError::Inbox { .. }) => {
                eprintln!("error: the message was not sent: {error}");
                return Ok(None);
            }
            Err(error) => return Err(Failure::failed(error)),
        }
        let idle = agent.when_idle();
        tokio::pin!(idle);
        let mut canceller: Option<tokio::task::JoinHandle<()>> = None;
        let mut exit = None;
        let mut idle_reached = false;
        loop {
            if idle_reached && self.caught_up() {
                // Idle and every event shown: a lagged stream may have missed `Idle`.
                break;
            }
            tokio::select! {
                biased;
                item = self.stream.next() => match item {
                    Some(StreamItem::Idle { .. }) if !agent.is_busy() => break,
                    Some(item) => if let Err(error) = self.on_item(item) {
                        return Err(self.stop_on_write_error(error).await);
                    },
                    // The agent is gone: nothing more comes.
                    None => break,
                },
                _ = &mut idle, if !idle_reached => idle_reached = true,
                Some(()) = interrupts.recv() => {
                    if self.cancelling {
                        exit = Some(Exit::Interrupted("interrupted (Ctrl-C twice while cancelling)"));
                        break;
                    }
                    self.cancelling = true;
                    canceller = Some(tokio::spawn(cancel_until_idle(agent.clone())));
                }
            }
        }
        if let Some(canceller) = canceller {
            // Idle already: a late retry must not cancel the next prompt's turn.
            canceller.abort();
        }
        self.drain().map_err(Failure::failed)?;
        self.screen.close().map_err(Failure::failed)?;
        if let Some(error) = self.session.fence() {
            eprintln!(
                "[store error: {error}] The answer above, and anything this turn wrote \
                 after the error, was not stored. Your next message reopens the session \
                 from the store."
            );
        }
        Ok(exit)
    }

    /// A session a store error fenced (H-STORE-6) is reopened from the store before
    /// the next prompt: the actor is replaced by one on the repaired session (the
    /// interrupted turn ended), and the chat follows it from there. False, said on
    /// stderr, when it cannot be (the store still fails): the prompt is not sent.
    async fn reopen_if_fenced(&mut self) -> bool {
        if self.session.fence().is_none() {
            return true;
        }
        let id = self.session.id().clone();
        let handle = match self.agents.get_or_reopen(&id, WhenBusy::Fail).await {
            Ok(handle) => handle,
            Err(error) => {
                eprintln!(
                    "error: the session could not be reopened: {error}; the message was not sent"
                );
                return false;
            }
        };
        if let Some(error) = handle.session().fence() {
            eprintln!("error: the session is still fenced: {error}; the message was not sent");
            return false;
        }
        self.agent = handle.agent().clone();
        self.session = handle.session().clone();
        self.handle = handle;
        let last = self.session.head().checked_sub(1);
        self.stream = self.agent.subscribe_from(last);
        self.last_seq = last;
        self.shown.clear();
        self.lagged = false;
        eprintln!(
            "(session reopened from the store; the turn the store error stopped is marked interrupted)"
        );
        true
    }

    /// Stdout or stderr stopped taking output (the reader of a pipe left): the running
    /// turn is cancelled so the log ends it cleanly, and the write error goes up (a
    /// broken pipe exits quietly with 0).
    async fn stop_on_write_error(&self, error: std::io::Error) -> Failure {
        self.agent.cancel(CancelCause::User, false).await;
        let _ = self.session.flush().await;
        Failure::failed(error)
    }

    /// Shows what the stream already holds (after the agent went idle, or on exit).
    fn drain(&mut self) -> std::io::Result<()> {
        while let Some(item) = self.stream.try_next() {
            self.on_item(item)?;
        }
        Ok(())
    }

    /// Whether every event of the log has been shown. Once a store error fenced the
    /// session, only what the store acknowledged will ever be shown: the events past
    /// it in memory were refused.
    fn caught_up(&self) -> bool {
        self.last_seq.map_or(0, |seq| seq + 1) >= self.session.kept_head()
    }

    /// Shows one item of the ordered stream. A lagged stream is resubscribed from the
    /// last event shown, so nothing is skipped and nothing is shown twice (ACT-4).
    fn on_item(&mut self, item: StreamItem) -> std::io::Result<()> {
        match item {
            StreamItem::Event(event) => {
                if self.last_seq.is_some_and(|seq| event.seq() <= seq) {
                    return Ok(());
                }
                self.last_seq = Some(event.seq());
                self.on_event(&event)
            }
            StreamItem::Delta { live, .. } => self.on_chunk(&live),
            StreamItem::Lagged { resume_from } => {
                let resume_from = resume_from.max(self.last_seq);
                self.stream = self.agent.subscribe_from(resume_from);
                self.lagged = true;
                Ok(())
            }
            StreamItem::Idle { .. } | StreamItem::AwaitingTools { .. } => Ok(()),
        }
    }

    fn on_chunk(&mut self, live: &LiveChunk) -> std::io::Result<()> {
        let step = (live.turn, live.step);
        match &live.chunk {
            // After a lag the committed message gives the text (see `on_event`).
            Chunk::TextDelta { .. } if self.lagged => Ok(()),
            Chunk::TextDelta { text, .. } => {
                self.shown.push_str(text);
                self.screen.text(step, text)
            }
            Chunk::ReasoningDelta { text, .. } => self.screen.reasoning(text),
            Chunk::BlockEnd {
                block: ContentBlock::ToolCall(call),
                ..
            } => self.screen.note(&call_line(call), true),
            Chunk::BlockStart { .. }
            | Chunk::ToolCallDelta { .. }
            | Chunk::BlockEnd { .. }
            | Chunk::MessageExtra { .. }
            | Chunk::Usage(_)
            | Chunk::Retry(_)
            | Chunk::Finish(_) => Ok(()),
        }
    }

    fn on_event(&mut self, event: &Event) -> std::io::Result<()> {
        match event.kind() {
            kinds::ASSISTANT_MESSAGE => {
                let shown = std::mem::take(&mut self.shown);
                if std::mem::take(&mut self.lagged)
                    && let Ok(message) = event.decode::<AssistantMessage>()
                {
                    // What the dropped chunks carried: the committed text after what
                    // was shown before the lag.
                    let text = answer_text(&message);
                    if let Some(rest) = text.strip_prefix(shown.as_str()) {
                        self.screen.text((message.turn, message.step), rest)?;
                    }
                }
            }
            kinds::ASSISTANT_ATTEMPT => {
                self.shown.clear();
                self.lagged = false;
            }
            kinds::TOOL_RESULT => {
                if let Ok(result) = event.decode::<ToolResult>() {
                    self.screen.note(&result_line(&result), true)?;
                }
            }
            kinds::TURN_END => {
                if let Ok(end) = event.decode::<TurnEnd>() {
                    let note = match &end.reason {
                        TurnEndReason::Aborted {
                            cause: CancelCause::User,
                        } if self.cancelling => Some("[cancelled]".to_owned()),
                        TurnEndReason::Completed => None,
                        other => Some(format!("[{}]", crate::output::reason_text(other))),
                    };
                    if let Some(note) = note {
                        self.screen.note(&note, false)?;
                    }
                }
            }
            _ => {}
        }
        Ok(())
    }

    /// `/status`: the session, the model, the log's size, the last turn and, with
    /// context-care mounted, a fresh sample of the context load.
    async fn status(&self) -> std::io::Result<()> {
        let (head, turns, last_end, usage) = self.session.with_log(|log| {
            let mut last_end: Option<TurnEndReason> = None;
            let mut usage: Option<TokenUsage> = None;
            for event in log.events().iter().rev() {
                if last_end.is_none() && event.kind() == kinds::TURN_END {
                    last_end = event.decode::<TurnEnd>().ok().map(|end| end.reason);
                }
                if usage.is_none() && event.kind() == kinds::ASSISTANT_MESSAGE {
                    usage = event
                        .decode::<AssistantMessage>()
                        .ok()
                        .and_then(|message| message.usage);
                }
                if last_end.is_some() && usage.is_some() {
                    break;
                }
            }
            (log.head(), log.state().last_turn, last_end, usage)
        });
        let mut stdout = std::io::stdout().lock();
        writeln!(stdout, "session    {}", self.session.id())?;
        writeln!(stdout, "model      {}", self.agent.options().model)?;
        writeln!(stdout, "events     {head}")?;
        writeln!(stdout, "turns      {turns}")?;
        if let Some(reason) = &last_end {
            writeln!(stdout, "last turn  {}", crate::output::reason_text(reason))?;
        }
        if let Some(usage) = usage {
            writeln!(
                stdout,
                "last usage input {} / cache_read {} / output {}",
                usage.input, usage.cache_read, usage.output
            )?;
        }
        if let Some(care) = &self.booted.care
            && let Some(report) = care.report(&self.session).await
        {
            match report {
                Ok(report) => {
                    for line in ccare_care::report::render_report(&report) {
                        writeln!(stdout, "{line}")?;
                    }
                    writeln!(stdout, "{}", crate::context_cmd::NOTHING_APPENDED)?;
                }
                Err(error) => writeln!(stdout, "context      unavailable: {error}")?,
            }
        }
        stdout.flush()
    }

    /// `/sessions`: the newest sessions, the current one starred.
    async fn sessions(&self) -> Result<(), Failure> {
        let query = SessionQuery {
            limit: Some(SESSIONS_SHOWN + 1),
        };
        let records = self.booted.host.sessions().list(query).await?;
        let mut stdout = std::io::stdout().lock();
        for record in records.iter().take(SESSIONS_SHOWN) {
            let marker = if &record.id == self.session.id() {
                '*'
            } else {
                ' '
            };
            writeln!(
                stdout,
                "{marker} {}  {}  {:>6} events",
                record.id,
                rfc3339_utc(record.created_ms),
                record.head
            )
            .map_err(Failure::failed)?;
        }
        if records.len() > SESSIONS_SHOWN {
            writeln!(stdout, "  … older sessions: ccare sessions list").map_err(Failure::failed)?;
        }
        stdout.flush().map_err(Failure::failed)
    }
}

/// Cancels until the agent is idle: a Ctrl-C that lands between `prompt` and the
/// turn's start finds no turn to cancel, so it tries again.
async fn cancel_until_idle(agent: Agent) {
    while agent.is_busy() {
        agent.cancel(CancelCause::User, true).await;
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Reads stdin on a plain thread (stdin blocks), one line per message; the channel
/// closes at EOF. Not `spawn_blocking`: the runtime would wait for it on shutdown.
fn spawn_line_reader() -> std::io::Result<mpsc::UnboundedReceiver<String>> {
    let (sender, receiver) = mpsc::unbounded_channel();
    std::thread::Builder::new()
        .name("ccare-chat-stdin".to_owned())
        .spawn(move || {
            let stdin = std::io::stdin();
            let mut line = String::new();
            loop {
                line.clear();
                match stdin.lock().read_line(&mut line) {
                    Ok(0) => break,
                    Ok(_) => {
                        let text = line.trim_end_matches(['\n', '\r']).to_owned();
                        if sender.send(text).is_err() {
                            break;
                        }
                    }
                    Err(error) => {
                        eprintln!("error: cannot read stdin: {error}");
                        break;
                    }
                }
            }
        })?;
    Ok(receiver)
}

/// Forwards every Ctrl-C; once installed, Ctrl-C no longer kills the process.
fn spawn_interrupt_listener() -> mpsc::UnboundedReceiver<()> {
    let (sender, receiver) = mpsc::unbounded_channel();
    tokio::spawn(async move {
        while tokio::signal::ctrl_c().await.is_ok() {
            if sender.send(()).is_err() {
                break;
            }
        }
    });
    receiver
}

/// `→ write_file {"path":"notes.md",...}`.
fn call_line(call: &ToolCallBlock) -> String {
    let arguments = match (&call.arguments, &call.raw_arguments) {
        (Value::Null, Some(raw)) => raw.clone(),
        (arguments, _) => arguments.to_string(),
    };
    format!("→ {} {arguments}", call.name)
}

/// `← read_file: 12 lines`, `← write_file: wrote 2 bytes to notes.md`,
/// `← write_file error PATH_OUTSIDE_WORKSPACE: …`.
fn result_line(result: &ToolResult) -> String {
    let block = result.message.content.iter().find_map(|block| match block {
        ContentBlock::ToolResult(block) => Some(block),
        ContentBlock::Text(_)
        | ContentBlock::Reasoning(_)
        | ContentBlock::ToolCall(_)
        | ContentBlock::Image(_)
        | ContentBlock::Unknown(_) => None,
    });
    let name = block.map_or("tool", |block| block.name.as_str());
    if let Some(error) = &result.error {
        return format!("← {name} error {}: {}", error.code, error.message);
    }
    let mut text = String::new();
    let mut images = 0usize;
    for inner in block
        .map(|block| block.content.as_slice())
        .unwrap_or_default()
    {
        match inner {
            ContentBlock::Text(part) => text.push_str(&part.text),
            ContentBlock::Image(_) => images += 1,
            ContentBlock::Reasoning(_)
            | ContentBlock::ToolCall(_)
            | ContentBlock::ToolResult(_)
            | ContentBlock::Unknown(_) => {}
        }
    }
    let error_flag = if block.is_some_and(|block| block.is_error) {
        " error"
    } else {
        ""
    };
    let lines = text.lines().count();
    let mut summary = match lines {
        0 => "(empty)".to_owned(),
        1 => text.trim().to_owned(),
        n => format!("{n} lines"),
    };
    if images > 0 {
        summary.push_str(&format!(" + {images} image(s)"));
    }
    format!("← {name}{error_flag}: {summary}")
}

/// How a turn ended, for notes and `/status`: `aborted: user`, `error CODE: …`.
/// Which stream holds an unfinished line.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Open {
    Nothing,
    /// Answer text on stdout.
    Text,
    /// Reasoning on stderr.
    Reasoning,
}

/// Writes the two streams so that they interleave on one terminal: a line left open
/// on one stream is ended before the other writes.
struct Screen {
    /// Dim reasoning (stderr is a terminal and NO_COLOR is not set).
    dim: bool,
    /// Tool lines are cut to this many characters.
    width: usize,
    open: Open,
    /// The step of the last text delta (a new step starts a new line).
    text_step: Option<(u32, u32)>,
}

impl Screen {
    fn new() -> Self {
        let width = std::env::var("COLUMNS")
            .ok()
            .and_then(|columns| columns.trim().parse::<usize>().ok())
            .filter(|columns| *columns >= 20)
            .unwrap_or(DEFAULT_WIDTH);
        Self {
            dim: crate::terminal::stderr_colour(),
            width,
            open: Open::Nothing,
            text_step: None,
        }
    }

    fn text(&mut self, step: (u32, u32), text: &str) -> std::io::Result<()> {
        if text.is_empty() {
            return Ok(());
        }
        if self.open == Open::Reasoning || (self.open == Open::Text && self.text_step != Some(step))
        {
            self.close()?;
        }
        self.text_step = Some(step);
        let mut stdout = std::io::stdout().lock();
        stdout.write_all(text.as_bytes())?;
        stdout.flush()?;
        self.open = if text.ends_with('\n') {
            Open::Nothing
        } else {
            Open::Text
        };
        Ok(())
    }

    fn reasoning(&mut self, text: &str) -> std::io::Result<()> {
        if text.is_empty() {
            return Ok(());
        }
        if self.open == Open::Text {
            self.close()?;
        }
        let mut stderr = std::io::stderr().lock();
        if self.dim {
            write!(stderr, "\x1b[2m{text}\x1b[0m")?;
        } else {
            stderr.write_all(text.as_bytes())?;
        }
        stderr.flush()?;
        self.open = if text.ends_with('\n') {
            Open::Nothing
        } else {
            Open::Reasoning
        };
        Ok(())
    }

    /// One line on stderr, on its own line; `cut` shortens it to the width.
    fn note(&mut self, line: &str, cut: bool) -> std::io::Result<()> {
        self.close()?;
        let flat = line.replace(['\n', '\r'], " ");
        let shown = if cut {
            truncate(&flat, self.width)
        } else {
            flat
        };
        let mut stderr = std::io::stderr().lock();
        writeln!(stderr, "{shown}")?;
        stderr.flush()
    }

    /// Ends the open line, if any.
    fn close(&mut self) -> std::io::Result<()> {
        match self.open {
            Open::Nothing => {}
            Open::Text => {
                let mut stdout = std::io::stdout().lock();
                stdout.write_all(b"\n")?;
                stdout.flush()?;
            }
            Open::Reasoning => {
                let mut stderr = std::io::stderr().lock();
                stderr.write_all(b"\n")?;
                stderr.flush()?;
            }
        }
        self.open = Open::Nothing;
        Ok(())
    }
}

/// The text of an assistant message as its text deltas spelled it, blocks in order.
fn answer_text(message: &AssistantMessage) -> String {
    message
        .message
        .content
        .iter()
        .filter_map(|block| match block {
            ContentBlock::Text(text) => Some(text.text.as_str()),
            _ => None,
        })
        .collect()
}

/// `text` cut to `width` characters, the last one an ellipsis when cut.
fn truncate(text: &str, width: usize) -> String {
    if text.chars().count() <= width {
        return text.to_owned();
    }
    let mut out: String = text.chars().take(width.saturating_sub(1)).collect();
    out.push('…');
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn truncates_to_the_width_with_an_ellipsis() {
        assert_eq!(truncate("short", 10), "short");
        assert_eq!(truncate("abcdefghij", 5), "abcd…");
        assert_eq!(truncate("日本語のテキスト", 4), "日本語…");
    }

    #[test]
    fn reasons_read_like_the_notes() {
        assert_eq!(
            crate::output::reason_text(&TurnEndReason::Aborted {
                cause: CancelCause::User
            }),
            "aborted: user"
        );
        assert_eq!(
            crate::output::reason_text(&TurnEndReason::Aborted {
                cause: CancelCause::Hook {
                    plugin: "stream-watch".into(),
                    reason: "loop".into()
                }
            }),
            "stopped by stream-watch: loop"
        );
        assert_eq!(
            crate::output::reason_text(&TurnEndReason::Blocked {
                by: "guard".into(),
                detail: "no".into(),
                unentered: Vec::new()
            }),
            "blocked by guard: no"
        );
        assert_eq!(
            crate::output::reason_text(&TurnEndReason::Error {
                failure: ccare_core::kinds::HostFailure::new("STEP_LIMIT", "too many").into()
            }),
            "error STEP_LIMIT: too many"
        );
    }
}
