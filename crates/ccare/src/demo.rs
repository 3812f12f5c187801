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

use std::io::Write as _;

use ccare_agent::{Agent, LiveChunk};
use ccare_app::demo::{PROMPTS, agents, host};
use ccare_app::{Home, Settings, WhenBusy};
use ccare_core::ContentBlock;
use ccare_core::kinds::TurnEndReason;
use ccare_llm::Chunk;

use crate::Failure;

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
