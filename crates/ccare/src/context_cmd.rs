//! `ccare context status|actions|diff|undo`: a fresh context-care sample of a session,
//! its maintenance journal, for people, and the one-step undo of a compaction.
//!
//! `status`, `actions` and `diff` read the stored log without opening the session
//! (issue 15 item 7): no lease, no crash repair, nothing appended. So they work while
//! another process drives the session (a running `ccare serve`, a `ccare run`
//! mid-turn), reading what the store has, and never touch its live turn. `undo`
//! appends, so it drives the session like `run`: it takes the lease (exit 2
//! `SESSION_BUSY` when another process holds it).

use std::io::Write as _;

use crate::Failure;
use ccare_app::Booted;
use ccare_core::kinds::{self, AssistantMessage, ToolResult, UserMessage};
use ccare_core::{ContentBlock, Event};

/// The note printed after the report: the sample changed nothing.
pub(crate) const NOTHING_APPENDED: &str = "(sampled now; nothing was appended to the session)";

/// The context-care plugin that reads: the profile's, or when the profile turns
/// context care off (`enabled = false`) a default one mounted on this command's host
/// (the journal is in the store and needs no configuration).
fn reader(booted: &Booted) -> Result<std::borrow::Cow<'_, ccare_care::ContextCare>, Failure> {
    match &booted.care {
        Some(care) => Ok(std::borrow::Cow::Borrowed(care)),
        None => {
            let reader = ccare_care::ContextCare::default();
            booted
                .host
                .mount(&reader, &serde_json::json!({}))
                .map_err(|error| Failure::failed(anyhow::anyhow!(error)))?;
            Ok(std::borrow::Cow::Owned(reader))
        }
    }
}

/// The session's maintenance records from the store's journal.
async fn action_records(
    booted: &Booted,
    session: &ccare_core::SessionId,
) -> Result<Vec<ccare_care::report::ActionRecord>, Failure> {
    match reader(booted)?.actions_of(session).await {
        Some(records) => records.map_err(Failure::failed),
        None => Err(Failure::failed(anyhow::anyhow!(
            "context-care was configured but not mounted"
        ))),
    }
}

/// Prints the session's maintenance actions, one line each (or JSON lines).
pub(crate) async fn actions(booted: &Booted, session: &str, json: bool) -> Result<(), Failure> {
    let loaded = crate::drive::load(booted, session).await?;
    let records = action_records(booted, &loaded.header.id).await?;
    let mut stdout = std::io::stdout().lock();
    if records.is_empty() && !json {
        writeln!(stdout, "no maintenance actions").map_err(Failure::failed)?;
    }
    for record in &records {
        let line = if json {
            serde_json::to_string(record).map_err(Failure::failed)?
        } else {
            format!(
                "{}  {}",
                crate::output::rfc3339_utc(record.at),
                record.line()
            )
        };
        writeln!(stdout, "{line}").map_err(Failure::failed)?;
    }
    stdout.flush().map_err(Failure::failed)
}

/// Prints what action `op` replaced: the shadowed events, the checkpoint, and the
/// input before and after (exit 2 when no such action exists).
pub(crate) async fn diff(booted: &Booted, session: &str, op: &str) -> Result<(), Failure> {
    let loaded = crate::drive::load(booted, session).await?;
    let records = action_records(booted, &loaded.header.id).await?;
    let Some(record) = records.iter().find(|record| record.operation_id() == op) else {
        return Err(Failure::bad_input(anyhow::anyhow!(
            "no maintenance action {op:?} in session {}",
            loaded.header.id
        )));
    };
    let mut out = String::new();
    out.push_str(&format!(
        "action       {}  {}\n",
        crate::output::rfc3339_utc(record.at),
        record.line()
    ));
    let replacements = record.view().replacements;
    if replacements.is_empty() {
        out.push_str("replaced     nothing\n");
    }
    {
        let log = &loaded.log;
        let event_at = |seq: u64| log.event_at(seq).cloned();
        for replacement in &replacements {
            let seqs = &replacement.source_seqs;
            out.push_str(&format!("replaced     {} event(s):\n", seqs.len()));
            for &seq in seqs {
                if let Some(event) = event_at(seq) {
                    out.push_str(&format!(
                        "  - seq {seq} {} {}\n",
                        event.kind(),
                        crate::output::excerpt(event.data_json(), 160)
                    ));
                }
            }
            if let Some(new) = replacement.new_seq
                && let Some(event) = event_at(new)
            {
                out.push_str(&format!("  + seq {new} {}\n", event.kind()));
                for line in message_text(&event).lines() {
                    out.push_str(&format!("    {line}\n"));
                }
            }
        }
    }
    let mut stdout = std::io::stdout().lock();
    stdout.write_all(out.as_bytes()).map_err(Failure::failed)?;
    stdout.flush().map_err(Failure::failed)
}

/// Undoes compaction `op` of `session` (CC-EXT-3) under the session's lease: prints
/// what it restored; exit 2 with the code and reason when refused.
pub(crate) async fn undo(
    booted: &Booted,
    session: &str,
    op: &str,
    wait: bool,
) -> Result<(), Failure> {
    let Some(care) = &booted.care else {
        return Err(Failure::bad_input(anyhow::anyhow!(
            "context-care is not mounted: the {} profile turns it off ([plugins.context-care] enabled = false)",
            booted.profile.id
        )));
    };
    let agents = ccare_app::Agents::of(booted);
    let handle = crate::drive::obtain(&agents, Some(session), wait).await?;
    let outcome = care.undo(handle.session(), op).await;
    let released = agents.stop(handle).await;
    let outcome = match outcome {
        Some(Ok(outcome)) => outcome,
        Some(Err(error)) if error.is_refusal() => {
            return Err(Failure::bad_input(anyhow::anyhow!(
                "{}: {error}",
                error.code()
            )));
        }
        Some(Err(error)) => {
            return Err(Failure::failed(anyhow::anyhow!(
                "{}: {error}",
                error.code()
            )));
        }
        None => {
            return Err(Failure::failed(anyhow::anyhow!(
                "context-care was configured but not mounted"
            )));
        }
    };
    released?;
    let mut stdout = std::io::stdout().lock();
    writeln!(stdout, "{}", outcome.line()).map_err(Failure::failed)?;
    stdout.flush().map_err(Failure::failed)
}

/// The text of a replace node's message (a checkpoint, a pruned tool result): its
/// text and reasoning blocks and the first text of each tool result, one per line;
/// empty for an event that carries no message.
fn message_text(event: &Event) -> String {
    let message = match event.kind() {
        kinds::USER_MESSAGE => event.decode::<UserMessage>().ok().map(|data| data.message),
        kinds::TOOL_RESULT => event.decode::<ToolResult>().ok().map(|data| data.message),
        kinds::ASSISTANT_MESSAGE => event
            .decode::<AssistantMessage>()
            .ok()
            .map(|data| data.message),
        _ => None,
    };
    let Some(message) = message else {
        return String::new();
    };
    message
        .content
        .iter()
        .filter_map(|block| match block {
            ContentBlock::Text(text) => Some(text.text.as_str()),
            ContentBlock::Reasoning(reasoning) => Some(reasoning.text.as_str()),
            ContentBlock::ToolResult(result) => match result.content.first() {
                Some(ContentBlock::Text(text)) => Some(text.text.as_str()),
                _ => None,
            },
            ContentBlock::ToolCall(_) | ContentBlock::Image(_) | ContentBlock::Unknown(_) => None,
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// Prints the report of `session` (exit 2 when the profile turns context care off or
/// the session does not exist).
pub(crate) async fn status(booted: &Booted, session: &str, json: bool) -> Result<(), Failure> {
    let Some(care) = &booted.care else {
        return Err(Failure::bad_input(anyhow::anyhow!(
            "context-care is not mounted: the {} profile turns it off ([plugins.context-care] enabled = false)",
            booted.profile.id
        )));
    };
    let loaded = crate::drive::load(booted, session).await?;
    let report = match care.report_loaded(&loaded.log).await {
        Some(report) => report.map_err(Failure::failed)?,
        None => {
            return Err(Failure::failed(anyhow::anyhow!(
                "context-care was configured but not mounted"
            )));
        }
    };
    let mut stdout = std::io::stdout().lock();
    if json {
        let value = serde_json::to_string(&report).map_err(Failure::failed)?;
        writeln!(stdout, "{value}").map_err(Failure::failed)?;
    } else {
        writeln!(stdout, "session      {}", loaded.header.id).map_err(Failure::failed)?;
        for line in ccare_care::report::render_report(&report) {
            writeln!(stdout, "{line}").map_err(Failure::failed)?;
        }
        writeln!(stdout, "{NOTHING_APPENDED}").map_err(Failure::failed)?;
    }
    stdout.flush().map_err(Failure::failed)
}
