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
//! When stdout stops taking the answer (the reader of a pipe left: `ccare run … |
//! head -1`), the turn is cancelled as if by the user, the log is flushed so the turn
//! ends cleanly, and the command exits quietly with 0 (the broken pipe reaches `main`).

use std::io::Write as _;

use ccare_agent::CancelCause;
use ccare_core::kinds::{TurnEndReason, TurnFailure};
use ccare_llm::Chunk;

use crate::Failure;
use ccare_app::Agents;

/// Runs the command.
pub(crate) async fn run(
    agents: &Agents,
    prompt: String,
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
    agent.prompt(prompt);
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
                if let Ok(live) = received
                    && !json
                    && write_failed.is_none()
                    && let Err(error) = text.print(&live)
                {
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
    // Flushes the log and releases the lease.
    let released = agents.stop(handle).await;
    if let Some(error) = write_failed {
        return Err(Failure::failed(error));
    }
    while let Ok(live) = live.try_recv() {
        if !json {
            text.print(&live).map_err(Failure::failed)?;
        }
    }
    text.finish().map_err(Failure::failed)?;
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

/// Streams text deltas to stdout, a line break between steps.
#[derive(Default)]
struct TextPrinter {
    last_step: Option<(u32, u32)>,
    ends_with_newline: bool,
}

impl TextPrinter {
    fn print(&mut self, live: &ccare_agent::LiveChunk) -> std::io::Result<()> {
        let Chunk::TextDelta { text, .. } = &live.chunk else {
            return Ok(());
        };
        let mut stdout = std::io::stdout().lock();
        if self
            .last_step
            .is_some_and(|step| step != (live.turn, live.step))
            && !self.ends_with_newline
        {
            stdout.write_all(b"\n")?;
        }
        self.last_step = Some((live.turn, live.step));
        stdout.write_all(text.as_bytes())?;
        self.ends_with_newline = text.ends_with('\n');
        stdout.flush()
    }

    fn finish(&self) -> std::io::Result<()> {
        if self.last_step.is_some() && !self.ends_with_newline {
            let mut stdout = std::io::stdout().lock();
            stdout.write_all(b"\n")?;
            stdout.flush()?;
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
