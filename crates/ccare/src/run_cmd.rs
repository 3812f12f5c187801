//! `ccare run --prompt TEXT [--session ID] [--json] [--wait]`: one prompt, run until
//! the agent is idle (DESIGN.md §5).
//!
//! The agent comes from the process's `Agents` registry (ACT-1), which holds the
//! session's lease from before the session is opened; the command stops the actor
//! (log flushed, lease released) before it exits: another process driving it fails
//! this one with `SESSION_BUSY` (exit 2), or with `--wait` is waited for.
//!
//! The answer streams to stdout as it is generated; with `--json` the session's new
//! events are printed as JSON lines instead. Without `--session` a new session is
//! created and its id printed on stderr. The exit code is the status of the last turn
//! that ended before idle: completed 0, max-tokens 0 with a warning, error / blocked /
//! aborted / interrupted 1 with the reason on stderr, Ctrl-C 130.
//!
//! External tools (ACT-3): `--external-tools FILE.json` declares tools of this turn that
//! the caller runs. When the model calls them the turn waits: the command prints
//! `awaiting tools: <ids>` on stderr (with `--json`, an `awaiting-tools` line after the
//! events), and exits 0. `--tool-results FILE.json --session ID` answers exactly those
//! calls and finishes the turn; a set that does not match is refused with
//! `TOOL_RESULTS_MISMATCH` (exit 1) and nothing is logged.
//!
//! When stdout stops taking the answer (the reader of a pipe left: `ccare run … |
//! head -1`), the turn is cancelled as if by the user, the log is flushed so the turn
//! ends cleanly, and the command exits quietly with 0 (the broken pipe reaches `main`).

use std::io::Write as _;
use std::path::Path;

use ccare_agent::{CancelCause, Command};
use ccare_core::kinds::{TurnEndReason, TurnFailure};
use ccare_llm::Chunk;

use crate::Failure;
use ccare_app::Agents;

/// What the run sends: a prompt (with the tools its turn declares), or the caller's
/// results for the calls an awaiting turn waits on.
pub(crate) enum Input {
    /// A user prompt.
    Prompt {
        /// The text.
        text: String,
        /// The turn's caller-executed tools.
        tools: Vec<ccare_llm::ToolSpec>,
    },
    /// Results for the awaiting calls.
    ToolResults(Vec<ccare_agent::CallerResult>),
}

/// One entry of a `--tool-results` file.
#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct ResultEntry {
    call_id: String,
    content: String,
    #[serde(default)]
    is_error: bool,
}

impl Input {
    /// A prompt, with the tools of `--external-tools FILE` when given.
    pub(crate) fn prompt(text: String, tools: Option<&Path>) -> Result<Self, Failure> {
        let tools = match tools {
            Some(path) => read_json(path, "--external-tools")?,
            None => Vec::new(),
        };
        Ok(Self::Prompt { text, tools })
    }

    /// The results of `--tool-results FILE`.
    pub(crate) fn tool_results(path: &Path) -> Result<Self, Failure> {
        let entries: Vec<ResultEntry> = read_json(path, "--tool-results")?;
        Ok(Self::ToolResults(
            entries
                .into_iter()
                .map(|entry| ccare_agent::CallerResult {
                    call_id: entry.call_id,
                    content: vec![ccare_core::ContentBlock::text(entry.content)],
                    is_error: entry.is_error,
                })
                .collect(),
        ))
    }
}

/// A JSON file, or bad input (exit 2) naming the flag, the file and the problem.
fn read_json<T: serde::de::DeserializeOwned>(path: &Path, flag: &str) -> Result<T, Failure> {
    let text = std::fs::read_to_string(path).map_err(|error| {
        Failure::bad_input(anyhow::anyhow!(
            "{flag} {}: cannot read it: {error}",
            path.display()
        ))
    })?;
    serde_json::from_str(&text)
        .map_err(|error| Failure::bad_input(anyhow::anyhow!("{flag} {}: {error}", path.display())))
}

/// Runs the command.
pub(crate) async fn run(
    agents: &Agents,
    input: Input,
    session: Option<&str>,
    json: bool,
    wait: bool,
) -> Result<(), Failure> {
    let new_session = session.is_none();
    let handle = crate::drive::obtain(agents, session, wait).await?;
    let session = handle.session().clone();
    if new_session {
        eprintln!("session: {}", session.id());
    }
    let first_new = session.head();
    let agent = handle.agent().clone();
    let mut live = agent.subscribe_live();
    let mut text = TextPrinter::default();
    // Acknowledged once durable in the session's inbox (ACT-2).
    let sent = match input {
        Input::Prompt { text, tools } => {
            let command = if tools.is_empty() {
                Ok(Command::prompt(text))
            } else {
                agent
                    .user_message_with_tools(text, tools)
                    .map(|message| Command::UserInput {
                        message,
                        options: None,
                    })
            };
            match command {
                Ok(command) => agent
                    .send(command)
                    .await
                    .map(drop)
                    .map_err(anyhow::Error::from),
                Err(refused) => Err(refused.into()),
            }
        }
        // Nothing is logged when the results do not match the awaiting calls (ACT-3).
        Input::ToolResults(results) => agent
            .tool_results(results)
            .await
            .map_err(anyhow::Error::from),
    };
    if let Err(error) = sent {
        drop(agents.stop(handle).await);
        return Err(Failure::failed(error));
    }
    let idle = agent.when_idle();
    tokio::pin!(idle);
    let ctrl_c = tokio::signal::ctrl_c();
    tokio::pin!(ctrl_c);
    let mut interrupted = false;
    // The first failed write to stdout: nothing more is printed, the turn is cancelled.
    let mut write_failed: Option<std::io::Error> = None;
    let reason = loop {
        tokio::select! {
            biased;
            received = live.recv() => {
                let printed = match received {
                    Ok(live) if !json && write_failed.is_none() => {
                        text.print(&live, &mut std::io::stdout().lock())
                    }
                    // Deltas were dropped: the rest comes from the log (`catch_up`).
                    Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => {
                        text.lagged = true;
                        Ok(())
                    }
                    _ => Ok(()),
                };
                if let Err(error) = printed {
                    write_failed = Some(error);
                    agent.cancel(CancelCause::User, false).await;
                }
            }
            reason = &mut idle => break reason,
            signal = &mut ctrl_c, if !interrupted => {
                if signal.is_ok() {
                    interrupted = true;
                    agent.cancel(CancelCause::User, false).await;
                }
            }
        }
    };
    let awaiting = agent.awaiting_tools();
    // Flushes the log and releases the lease.
    let released = agents.stop(handle).await;
    if let Some(error) = write_failed {
        return Err(Failure::failed(error));
    }
    loop {
        match live.try_recv() {
            Ok(live) if !json => text
                .print(&live, &mut std::io::stdout().lock())
                .map_err(Failure::failed)?,
            Ok(_) => {}
            Err(tokio::sync::broadcast::error::TryRecvError::Lagged(_)) => text.lagged = true,
            Err(_) => break,
        }
    }
    if !json && text.lagged {
        let answers = answers_since(&session, first_new);
        text.catch_up(&answers, &mut std::io::stdout().lock())
            .map_err(Failure::failed)?;
    }
    text.finish(&mut std::io::stdout().lock())
        .map_err(Failure::failed)?;
    if json {
        let mut stdout = std::io::stdout().lock();
        let events: Vec<String> = session.with_log(|log| {
            log.events()
                .iter()
                .skip(usize::try_from(first_new).unwrap_or(usize::MAX))
                .map(|event| event.raw_json().to_owned())
                .collect()
        });
        for line in events {
            writeln!(stdout, "{line}").map_err(Failure::failed)?;
        }
        if !awaiting.is_empty() {
            let line = serde_json::json!({
                "type": "awaiting-tools",
                "session": session.id().as_str(),
                "call_ids": awaiting,
            });
            writeln!(stdout, "{line}").map_err(Failure::failed)?;
        }
    }
    if !awaiting.is_empty() {
        eprintln!(
            "awaiting tools: {} (answer with --tool-results FILE.json --session {})",
            awaiting.join(", "),
            session.id()
        );
        released.map_err(Failure::failed)?;
        return Ok(());
    }
    released.map_err(Failure::failed)?;
    if interrupted {
        return Err(Failure {
            code: 130,
            error: anyhow::anyhow!(
                "interrupted (Ctrl-C): the turn was cancelled and logged as aborted"
            ),
        });
    }
    exit_for(reason)
}

/// An answer as the log holds it: its step, its text and its tool calls (what a
/// printer that fell behind prints from the log: `ccare run`'s and `ccare demo`'s).
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Answer {
    pub(crate) turn: u32,
    pub(crate) step: u32,
    pub(crate) call_id: String,
    pub(crate) text: String,
    pub(crate) tool_calls: Vec<ccare_core::ToolCallBlock>,
}

/// The assistant messages logged from seq `first` on.
pub(crate) fn answers_since(session: &ccare_session::Session, first: u64) -> Vec<Answer> {
    session.with_log(|log| {
        log.events()
            .iter()
            .filter(|event| event.seq() >= first)
            .filter(|event| event.kind() == ccare_core::kinds::ASSISTANT_MESSAGE)
            .filter_map(|event| event.decode::<ccare_core::kinds::AssistantMessage>().ok())
            .map(|message| Answer {
                turn: message.turn,
                step: message.step,
                text: message.message.joined_text(""),
                tool_calls: message.message.tool_calls().cloned().collect(),
                call_id: message.call_id,
            })
            .collect()
    })
}

/// Streams text deltas to stdout, a line break between steps. When it falls behind
/// the live channel (`lagged`: deltas were dropped), it stops printing deltas and
/// prints the rest of every answer from the log once the turn is over, so the output
/// is never missing words.
#[derive(Default)]
struct TextPrinter {
    last_step: Option<(u32, u32)>,
    ends_with_newline: bool,
    /// Set once a delta was lost.
    lagged: bool,
    /// The bytes printed of each provider call's text, before the lag.
    printed: std::collections::HashMap<String, usize>,
}

impl TextPrinter {
    fn print(
        &mut self,
        live: &ccare_agent::LiveChunk,
        out: &mut impl std::io::Write,
    ) -> std::io::Result<()> {
        let Chunk::TextDelta { text, .. } = &live.chunk else {
            return Ok(());
        };
        if self.lagged {
            return Ok(());
        }
        self.write(live.turn, live.step, text, out)?;
        *self.printed.entry(live.call_id.clone()).or_default() += text.len();
        Ok(())
    }

    fn write(
        &mut self,
        turn: u32,
        step: u32,
        text: &str,
        out: &mut impl std::io::Write,
    ) -> std::io::Result<()> {
        if text.is_empty() {
            return Ok(());
        }
        if self.last_step.is_some_and(|last| last != (turn, step)) && !self.ends_with_newline {
            out.write_all(b"\n")?;
        }
        self.last_step = Some((turn, step));
        out.write_all(text.as_bytes())?;
        self.ends_with_newline = text.ends_with('\n');
        out.flush()
    }

    /// After a lag: what the deltas did not print of each answer, from the log.
    fn catch_up(
        &mut self,
        answers: &[Answer],
        out: &mut impl std::io::Write,
    ) -> std::io::Result<()> {
        for answer in answers {
            let printed = self.printed.get(&answer.call_id).copied().unwrap_or(0);
            let rest = answer.text.get(printed..).unwrap_or_default();
            self.write(answer.turn, answer.step, rest, out)?;
        }
        Ok(())
    }

    fn finish(&self, out: &mut impl std::io::Write) -> std::io::Result<()> {
        if self.last_step.is_some() && !self.ends_with_newline {
            out.write_all(b"\n")?;
            out.flush()?;
        }
        Ok(())
    }
}

/// The exit status for how the last turn ended.
pub(crate) fn exit_for(reason: Option<TurnEndReason>) -> Result<(), Failure> {
    match reason {
        None | Some(TurnEndReason::Completed) => Ok(()),
        Some(TurnEndReason::MaxTokens) => {
            eprintln!("warning: the answer was cut at the output limit (turn ended: max-tokens)");
            Ok(())
        }
        Some(TurnEndReason::Error { failure }) => match failure {
            TurnFailure::Llm(llm) => Err(Failure::failed(anyhow::anyhow!(
                "{}",
                crate::output::failure_text(&llm)
            ))),
            TurnFailure::Host(host) => Err(Failure::failed(anyhow::anyhow!("{host}"))),
        },
        Some(TurnEndReason::Blocked { by, detail, .. }) => Err(Failure::failed(anyhow::anyhow!(
            "blocked by {by}: {detail}"
        ))),
        Some(TurnEndReason::Aborted { cause }) => {
            let stream_watch =
                matches!(&cause, CancelCause::Hook { plugin, .. } if plugin == "stream-watch");
            let mut text = crate::output::reason_text(&TurnEndReason::Aborted { cause });
            // The last turn was stopped and nothing resumed it: stream watch resumes the
            // first stop on its own, so this was the second in a row (SW-11, UI-3).
            if stream_watch {
                text.push_str("; auto-continue paused after 2 consecutive stops");
            }
            Err(Failure::failed(anyhow::anyhow!("{text}")))
        }
        Some(TurnEndReason::Interrupted) => Err(Failure::failed(anyhow::anyhow!("interrupted"))),
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn delta(call: &str, step: u32, text: &str) -> ccare_agent::LiveChunk {
        ccare_agent::LiveChunk {
            turn: 1,
            step,
            call_id: call.to_owned(),
            chunk: Chunk::TextDelta {
                index: 0,
                text: text.to_owned(),
            },
            after_seq: 0,
        }
    }

    fn answer(call: &str, step: u32, text: &str) -> Answer {
        Answer {
            turn: 1,
            step,
            call_id: call.to_owned(),
            text: text.to_owned(),
            tool_calls: Vec::new(),
        }
    }

    /// A printer that fell behind (deltas dropped from the live channel) prints what
    /// the deltas did not, from the log: the output is every answer, whole, once.
    #[test]
    fn a_lagged_printer_catches_up_from_the_log_without_gaps_or_repeats() {
        let mut out = Vec::new();
        let mut printer = TextPrinter::default();
        printer
            .print(&delta("a", 1, "first answer"), &mut out)
            .unwrap();
        printer.print(&delta("b", 2, "line 0 "), &mut out).unwrap();
        printer.lagged = true;
        // Deltas after a lag are not printed (some before them were lost).
        printer.print(&delta("b", 2, "answer"), &mut out).unwrap();
        printer
            .catch_up(
                &[
                    answer("a", 1, "first answer"),
                    answer("b", 2, "line 0 of a long answer\n"),
                    answer("c", 3, "third"),
                ],
                &mut out,
            )
            .unwrap();
        printer.finish(&mut out).unwrap();
        assert_eq!(
            String::from_utf8(out).unwrap(),
            "first answer\nline 0 of a long answer\nthird\n"
        );
    }

    /// Without a lag nothing is printed twice: the printer's output is the deltas.
    #[test]
    fn without_a_lag_the_deltas_are_the_output() {
        let mut out = Vec::new();
        let mut printer = TextPrinter::default();
        printer.print(&delta("a", 1, "hello "), &mut out).unwrap();
        printer.print(&delta("a", 1, "world"), &mut out).unwrap();
        printer.finish(&mut out).unwrap();
        assert_eq!(String::from_utf8(out).unwrap(), "hello world\n");
    }
}
