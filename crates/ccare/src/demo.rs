//! `ccare demo`: an offline showcase of the agent loop on the scripted provider.
//!
//! Five turns in one session: the model writes a file with a tool, reads it back,
//! then — after its actor stops (through the `Agents` registry) and starts again from
//! the store, as a new process would — searches the session log, starts a looping list that stream
//! watch stops and resumes, and finally asks context care for a rest with its own
//! handoff note, which summarizes the earlier turns into a checkpoint. Everything goes
//! through the real host: SQLite store, agent loop, built-in tools confined to
//! `$CCARE_HOME/demo-workspace`, both plugins. Only the model is scripted; the host
//! and the script are `ccare_app::demo`'s, this module drives the turns and prints.

use std::collections::{HashMap, HashSet};
use std::io::Write;

use ccare_agent::{Agent, LiveChunk};
use ccare_app::demo::{PROMPTS, agents, host};
use ccare_app::{Home, Settings, WhenBusy};
use ccare_core::kinds::TurnEndReason;
use ccare_core::{ContentBlock, ToolCallBlock};
use ccare_llm::Chunk;
use tokio::sync::broadcast::error::{RecvError, TryRecvError};

use crate::Failure;
use crate::run_cmd::{Answer, answers_since};

/// Runs one turn, printing the streamed answer and one line per tool call.
async fn turn(agent: &Agent, prompt: &str) -> Result<(), Failure> {
    let mut out = std::io::stdout();
    writeln!(out, "\n> {prompt}").map_err(Failure::failed)?;
    let mut live = agent.subscribe_live();
    let mut printer = Printer::default();
    let first = agent.session().head();
    agent.prompt(prompt);
    let idle = agent.when_idle();
    tokio::pin!(idle);
    let reason = loop {
        tokio::select! {
            biased;
            received = live.recv() => {
                let shown = match received {
                    Ok(chunk) => printer.show(&chunk, &mut std::io::stdout().lock()),
                    // Chunks were dropped: the rest comes from the log (`catch_up`).
                    Err(RecvError::Lagged(_)) => {
                        printer.lagged = true;
                        Ok(())
                    }
                    Err(RecvError::Closed) => Ok(()),
                };
                if let Err(error) = shown {
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
    loop {
        match live.try_recv() {
            Ok(chunk) => printer
                .show(&chunk, &mut std::io::stdout().lock())
                .map_err(Failure::failed)?,
            Err(TryRecvError::Lagged(_)) => printer.lagged = true,
            Err(_) => break,
        }
    }
    if printer.lagged {
        let answers = answers_since(agent.session(), first);
        printer
            .catch_up(&answers, &mut std::io::stdout().lock())
            .map_err(Failure::failed)?;
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

/// Streams answer text and puts each tool call on a line of its own. When it falls
/// behind the live channel (`lagged`: chunks were dropped), it stops printing chunks
/// and prints the rest of the turn from the log once the turn is over, so no word and
/// no tool line is missing or printed twice.
struct Printer {
    at_line_start: bool,
    /// Set once a chunk was lost.
    lagged: bool,
    /// The text bytes printed of each provider call, before the lag.
    printed: HashMap<String, usize>,
    /// The tool calls printed, before the lag.
    shown_calls: HashSet<String>,
}

impl Default for Printer {
    fn default() -> Self {
        Self {
            at_line_start: true,
            lagged: false,
            printed: HashMap::new(),
            shown_calls: HashSet::new(),
        }
    }
}

impl Printer {
    fn show(&mut self, live: &LiveChunk, out: &mut impl Write) -> std::io::Result<()> {
        if self.lagged {
            return Ok(());
        }
        match &live.chunk {
            Chunk::TextDelta { text, .. } => {
                self.text(text, out)?;
                *self.printed.entry(live.call_id.clone()).or_default() += text.len();
            }
            Chunk::BlockEnd {
                block: ContentBlock::ToolCall(call),
                ..
            } => self.tool_call(call, out)?,
            _ => {}
        }
        out.flush()
    }

    fn text(&mut self, text: &str, out: &mut impl Write) -> std::io::Result<()> {
        if text.is_empty() {
            return Ok(());
        }
        out.write_all(text.as_bytes())?;
        self.at_line_start = text.ends_with('\n');
        Ok(())
    }

    fn tool_call(&mut self, call: &ToolCallBlock, out: &mut impl Write) -> std::io::Result<()> {
        if !self.shown_calls.insert(call.id.clone()) {
            return Ok(());
        }
        if !self.at_line_start {
            writeln!(out)?;
        }
        writeln!(out, "  → {} {}", call.name, call.arguments)?;
        self.at_line_start = true;
        Ok(())
    }

    /// After a lag: what the chunks did not print of each answer, from the log.
    fn catch_up(&mut self, answers: &[Answer], out: &mut impl Write) -> std::io::Result<()> {
        for answer in answers {
            let printed = self.printed.get(&answer.call_id).copied().unwrap_or(0);
            self.text(answer.text.get(printed..).unwrap_or_default(), out)?;
            for call in &answer.tool_calls {
                self.tool_call(call, out)?;
            }
        }
        out.flush()
    }
}

pub(crate) async fn run(settings: &Settings, home: &Home) -> Result<(), Failure> {
    let (host, care) = host(settings, home)?;
    let mut meta = ccare_core::JsonObject::new();
    meta.insert("title".to_owned(), serde_json::json!("ccare demo"));
    let agents = agents(&host, settings);
    let first = agents.create(meta).await?;
    let id = first.session().id().clone();
    let mut out = std::io::stdout();
    writeln!(
        out,
        "ccare demo — scripted model, real agent loop, session {id}"
    )
    .map_err(Failure::failed)?;

    turn(first.agent(), PROMPTS[0]).await?;
    turn(first.agent(), PROMPTS[1]).await?;
    // The actor stops: its log flushed, the session closed, the lease released.
    agents.stop(first).await?;

    writeln!(
        out,
        "\n(the agent stops; the session is reopened from the store and resumed)"
    )
    .map_err(Failure::failed)?;
    let second = agents.get_or_start(&id, WhenBusy::Fail).await?;
    let reopened = second.session().clone();
    turn(second.agent(), PROMPTS[2]).await?;
    turn(second.agent(), PROMPTS[3]).await?;
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
    turn(second.agent(), PROMPTS[4]).await?;
    reopened.flush().await.map_err(Failure::failed)?;
    if let Some(Ok(actions)) = care.actions(&reopened).await {
        for action in actions
            .iter()
            .filter(|action| action.view().outcome == Some("committed"))
        {
            let view = action.view();
            let tokens =
                |field: Option<u64>| field.map_or_else(|| "null".to_owned(), |n| n.to_string());
            writeln!(out,
                "\n(context care summarized the earlier turns into a checkpoint at the model's request: the next request's input went from {} to {} tokens; operation {})",
                tokens(view.before_input),
                tokens(view.after_input),
                view.operation_id.unwrap_or_default()
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
    agents.stop(second).await?;
    Ok(())
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn delta(call: &str, text: &str) -> LiveChunk {
        LiveChunk {
            turn: 1,
            step: 1,
            call_id: call.to_owned(),
            chunk: Chunk::TextDelta {
                index: 0,
                text: text.to_owned(),
            },
            after_seq: 0,
        }
    }

    fn tool_call(id: &str) -> ToolCallBlock {
        ToolCallBlock {
            id: id.to_owned(),
            name: "write_file".to_owned(),
            arguments: serde_json::json!({"path": "notes.md"}),
            raw_arguments: None,
            extra: ccare_core::Extra::new(),
        }
    }

    fn call_end(call: &str, id: &str) -> LiveChunk {
        LiveChunk {
            chunk: Chunk::BlockEnd {
                index: 1,
                block: ContentBlock::ToolCall(tool_call(id)),
            },
            ..delta(call, "")
        }
    }

    /// A demo printer that fell behind the live channel prints, once the turn is over,
    /// what its chunks did not, from the log: every word and every tool line, once.
    #[test]
    fn a_lagged_demo_printer_catches_up_from_the_log_without_gaps_or_repeats() {
        let mut out = Vec::new();
        let mut printer = Printer::default();
        printer
            .show(&delta("a", "I will write "), &mut out)
            .unwrap();
        printer.lagged = true;
        printer.show(&delta("a", "it now."), &mut out).unwrap();
        printer.show(&call_end("a", "t1"), &mut out).unwrap();
        let answers = [
            Answer {
                turn: 1,
                step: 1,
                call_id: "a".to_owned(),
                text: "I will write it now.".to_owned(),
                tool_calls: vec![tool_call("t1")],
            },
            Answer {
                turn: 1,
                step: 2,
                call_id: "b".to_owned(),
                text: "Done.".to_owned(),
                tool_calls: Vec::new(),
            },
        ];
        printer.catch_up(&answers, &mut out).unwrap();
        assert_eq!(
            String::from_utf8(out).unwrap(),
            "I will write it now.\n  → write_file {\"path\":\"notes.md\"}\nDone."
        );
    }

    /// Without a lag, the chunks are the output and nothing is printed twice.
    #[test]
    fn a_demo_printer_that_kept_up_prints_each_tool_line_once() {
        let mut out = Vec::new();
        let mut printer = Printer::default();
        printer.show(&delta("a", "Writing."), &mut out).unwrap();
        printer.show(&call_end("a", "t1"), &mut out).unwrap();
        printer.show(&call_end("a", "t1"), &mut out).unwrap();
        assert_eq!(
            String::from_utf8(out).unwrap(),
            "Writing.\n  → write_file {\"path\":\"notes.md\"}\n"
        );
    }
}
