//! `ccare sessions …`: over the default profile's host, so the config's store,
//! validator policy (`[validators]`), plugin event types and locale apply.

use std::collections::HashSet;
use std::io::{Read, Write};

use anyhow::Context as _;
use ccare_core::{ContentBlock, Event, Message, SessionId};
use ccare_session::{Decoded, LoadedSession, decode};
use ccare_store::{SessionQuery, SessionRecord};
use serde_json::{Value, json};

use ccare_app::{Booted, Settings};

use crate::Failure;
use crate::cli::SessionsCommand;
use crate::output::{excerpt, rfc3339_utc};

pub(crate) async fn run(
    booted: &Booted,
    settings: &Settings,
    command: SessionsCommand,
) -> Result<(), Failure> {
    let sessions = booted.host.sessions();
    let stdout = &mut std::io::stdout().lock();
    match command {
        SessionsCommand::List(args) => {
            let records = sessions.list(SessionQuery::default()).await?;
            if args.json {
                let array: Vec<Value> = records.iter().map(record_json).collect();
                print_json(stdout, &Value::Array(array))?;
            } else if records.is_empty() {
                writeln!(stdout, "no sessions in {}", settings.store.path.display())
                    .map_err(Failure::failed)?;
            } else {
                for record in &records {
                    let parent = record
                        .parent
                        .as_ref()
                        .map(|parent| format!("  (fork of {parent})"))
                        .unwrap_or_default();
                    writeln!(
                        stdout,
                        "{}  {}  {:>6} events{parent}",
                        record.id,
                        rfc3339_utc(record.created_ms),
                        record.head
                    )
                    .map_err(Failure::failed)?;
                }
            }
        }
        SessionsCommand::Show(args) => {
            let id = parse_id(&args.id)?;
            let loaded = sessions.load(&id).await?;
            if args.json {
                print_json(stdout, &show_json(&loaded))?;
            } else {
                show_human(stdout, &loaded).map_err(Failure::failed)?;
            }
        }
        SessionsCommand::Export(args) => {
            let id = parse_id(&args.id)?;
            match &args.output {
                Some(path) => {
                    // Export into memory first so a failed export leaves no partial file.
                    let mut buffer = Vec::new();
                    sessions.export(&id, &mut buffer).await?;
                    std::fs::write(path, &buffer)
                        .with_context(|| format!("cannot write {}", path.display()))
                        .map_err(Failure::failed)?;
                }
                None => {
                    // The session layer reports write errors as text: remember the
                    // io error itself, so a closed stdout still ends quietly.
                    let mut out = Remembering {
                        inner: stdout,
                        error: None,
                    };
                    let exported = sessions.export(&id, &mut out).await;
                    if let Some(error) = out.error {
                        return Err(Failure::failed(error));
                    }
                    exported?;
                }
            }
        }
        SessionsCommand::Import(args) => {
            let bytes = read_input(&args.file)?;
            let record = sessions.import(&bytes).await?;
            if args.json {
                print_json(stdout, &record_json(&record))?;
            } else {
                writeln!(
                    stdout,
                    "imported session {} ({} events)",
                    record.id, record.head
                )
                .map_err(Failure::failed)?;
            }
        }
        SessionsCommand::Check(args) => {
            let id = parse_id(&args.id)?;
            let loaded = sessions.load(&id).await?;
            let mut found: Vec<(u64, String, String)> = loaded
                .violations
                .iter()
                .map(|violation| {
                    (
                        violation.seq,
                        violation.validator.clone(),
                        violation.message.clone(),
                    )
                })
                .collect();
            // The time-context invariant audits every log, mounted or not; when its
            // plugin is mounted the load already ran it. `[validators]` can turn it off.
            let invariant = ccare_time_context::VALIDATOR;
            let audited = found.iter().any(|(_, validator, _)| validator == invariant)
                || sessions
                    .registry()
                    .validator_names()
                    .iter()
                    .any(|name| name == invariant);
            if !audited && settings.validators.runs(invariant) {
                for (seq, message) in ccare_time_context::check_log(&loaded.log) {
                    found.push((seq, invariant.to_owned(), message));
                }
            }
            found.sort_by_key(|(seq, _, _)| *seq);
            if args.json {
                let array: Vec<Value> = found
                    .iter()
                    .map(|(seq, validator, message)| json!({"seq": seq, "validator": validator, "message": message}))
                    .collect();
                print_json(stdout, &Value::Array(array))?;
            } else if found.is_empty() {
                writeln!(stdout, "{id}: {} events, no violations", loaded.log.head())
                    .map_err(Failure::failed)?;
            } else {
                for (seq, validator, message) in &found {
                    writeln!(stdout, "seq {seq}  {validator}  {message}")
                        .map_err(Failure::failed)?;
                }
            }
            if !found.is_empty() {
                return Err(Failure::failed(anyhow::anyhow!(
                    "{id}: {} violation(s)",
                    found.len()
                )));
            }
        }
        SessionsCommand::Fork(args) => {
            let id = parse_id(&args.id)?;
            let new_id = args.new_id.as_deref().map(parse_id).transpose()?;
            let session = sessions.fork(&id, args.at, new_id).await?;
            let header = session.header();
            if args.json {
                let value = json!({
                    "id": header.id.as_str(),
                    "parent": id.as_str(),
                    "seed_length": header.seed_length,
                    "events": session.head(),
                });
                print_json(stdout, &value)?;
            } else {
                writeln!(
                    stdout,
                    "forked {} into {} (inherited {} events)",
                    id,
                    header.id,
                    header.seed_length.unwrap_or_default()
                )
                .map_err(Failure::failed)?;
            }
        }
    }
    Ok(())
}

fn parse_id(text: &str) -> Result<SessionId, Failure> {
    SessionId::new(text).map_err(Failure::bad_input)
}

fn read_input(path: &std::path::Path) -> Result<Vec<u8>, Failure> {
    if path.as_os_str() == "-" {
        let mut bytes = Vec::new();
        std::io::stdin()
            .read_to_end(&mut bytes)
            .context("cannot read stdin")
            .map_err(Failure::failed)?;
        return Ok(bytes);
    }
    std::fs::read(path)
        .with_context(|| format!("cannot read {}", path.display()))
        .map_err(Failure::bad_input)
}

/// A writer that keeps the first io error it passed on.
struct Remembering<'a> {
    inner: &'a mut dyn Write,
    error: Option<std::io::Error>,
}

impl Remembering<'_> {
    fn keep<T>(&mut self, result: std::io::Result<T>) -> std::io::Result<T> {
        result.map_err(|error| {
            let copy = std::io::Error::new(error.kind(), error.to_string());
            self.error.get_or_insert(error);
            copy
        })
    }
}

impl Write for Remembering<'_> {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        let result = self.inner.write(bytes);
        self.keep(result)
    }

    fn flush(&mut self) -> std::io::Result<()> {
        let result = self.inner.flush();
        self.keep(result)
    }
}

fn print_json(out: &mut dyn Write, value: &Value) -> Result<(), Failure> {
    let text = serde_json::to_string_pretty(value).map_err(Failure::failed)?;
    writeln!(out, "{text}").map_err(Failure::failed)
}

fn record_json(record: &SessionRecord) -> Value {
    let mut object = json!({
        "id": record.id.as_str(),
        "created_at": rfc3339_utc(record.created_ms),
        "created_ms": record.created_ms,
        "events": record.head,
    });
    if let Some(map) = object.as_object_mut() {
        if let Some(parent) = &record.parent {
            map.insert("parent".into(), Value::from(parent.as_str()));
        }
        if let Some(seed_length) = record.seed_length {
            map.insert("seed_length".into(), Value::from(seed_length));
        }
    }
    object
}

fn show_json(loaded: &LoadedSession) -> Value {
    let header = &loaded.header;
    let log = &loaded.log;
    let events: Vec<Value> = log
        .events()
        .iter()
        .map(|event| serde_json::from_str(event.raw_json()).unwrap_or(Value::Null))
        .collect();
    let violations: Vec<Value> = loaded
        .violations
        .iter()
        .map(|violation| json!({"seq": violation.seq, "validator": violation.validator, "message": violation.message}))
        .collect();
    json!({
        "id": header.id.as_str(),
        "created_at": rfc3339_utc(header.created_ms),
        "created_ms": header.created_ms,
        "parent": header.parent.as_ref().map(SessionId::as_str),
        "seed_length": header.seed_length,
        "head": log.head(),
        "live_seqs": log.live_seqs(),
        "replace_generation": log.replace_generation(),
        "violations": violations,
        "events": events,
    })
}

fn show_human(out: &mut dyn Write, loaded: &LoadedSession) -> std::io::Result<()> {
    let header = &loaded.header;
    let log = &loaded.log;
    writeln!(out, "session {}", header.id)?;
    writeln!(out, "  created   {}", rfc3339_utc(header.created_ms))?;
    if let Some(parent) = &header.parent {
        writeln!(
            out,
            "  forked from {parent} (inherited {} events)",
            header.seed_length.unwrap_or_default()
        )?;
    }
    writeln!(
        out,
        "  {} events, {} live on the surface, {} replaces",
        log.head(),
        log.surface().len(),
        log.replace_generation()
    )?;
    writeln!(out)?;
    let live: HashSet<u64> = log.live_seqs().into_iter().collect();
    for event in log.events() {
        let marker = if live.contains(&event.seq()) {
            "●"
        } else if event.surface().is_some() {
            "○"
        } else {
            " "
        };
        writeln!(
            out,
            "{:>6} {marker} {}  {:<20} {}",
            event.seq(),
            rfc3339_utc(event.time_ms()),
            event.kind(),
            describe(event)
        )?;
    }
    writeln!(out)?;
    writeln!(out, "● live on the surface   ○ shadowed by a replace")?;
    if !loaded.violations.is_empty() {
        writeln!(out)?;
        writeln!(out, "audit found {} violation(s):", loaded.violations.len())?;
        for violation in &loaded.violations {
            writeln!(
                out,
                "  seq {} [{}] {}",
                violation.seq, violation.validator, violation.message
            )?;
        }
    }
    Ok(())
}

fn message_text(message: &Message) -> String {
    let mut parts = Vec::new();
    for block in &message.content {
        match block {
            ContentBlock::Text(text) => parts.push(excerpt(&text.text, 60)),
            ContentBlock::Reasoning(reasoning) => {
                parts.push(format!("(reasoning) {}", excerpt(&reasoning.text, 40)))
            }
            ContentBlock::ToolCall(call) => parts.push(format!(
                "→ {}({})",
                call.name,
                excerpt(&call.arguments.to_string(), 40)
            )),
            ContentBlock::ToolResult(result) => {
                let inner = result
                    .content
                    .iter()
                    .find_map(|block| match block {
                        ContentBlock::Text(text) => Some(excerpt(&text.text, 50)),
                        ContentBlock::Reasoning(_)
                        | ContentBlock::ToolCall(_)
                        | ContentBlock::ToolResult(_)
                        | ContentBlock::Image(_)
                        | ContentBlock::Unknown(_) => None,
                    })
                    .unwrap_or_default();
                let flag = if result.is_error { " (error)" } else { "" };
                parts.push(format!("← {}{flag}: {inner}", result.name));
            }
            ContentBlock::Image(image) => parts.push(format!("[image {}]", image.media_type)),
            ContentBlock::Unknown(_) => parts.push("[unknown block]".to_owned()),
        }
    }
    parts.join("  ")
}

fn describe(event: &Event) -> String {
    let Ok(decoded) = decode(event) else {
        return "(undecodable)".to_owned();
    };
    match decoded {
        Decoded::TurnStart(start) => format!("turn {}", start.turn),
        Decoded::TurnEnd(end) => format!(
            "turn {} {}",
            end.turn,
            serde_json::to_value(&end.reason)
                .ok()
                .and_then(|v| v.get("kind").and_then(Value::as_str).map(str::to_owned))
                .unwrap_or_default()
        ),
        Decoded::StepStart(start) => format!("turn {} step {}", start.turn, start.step),
        Decoded::StepEnd(end) => format!(
            "turn {} step {}{}",
            end.turn,
            end.step,
            if end.interrupted { " interrupted" } else { "" }
        ),
        Decoded::UserMessage(message) => {
            let source = message
                .source
                .as_ref()
                .map(|source| format!("[{}] ", source.kind()))
                .unwrap_or_default();
            format!("{source}{}", message_text(&message))
        }
        Decoded::AssistantMessage { message, .. } => message_text(&message),
        Decoded::ToolResult { message, .. } => message_text(&message),
        Decoded::ToolCall(call) => format!("{} {}", call.name, call.call_id),
        Decoded::AssistantAttempt { turn, step } => format!("turn {turn} step {step}"),
        Decoded::CompactionStart(start) => format!("{} ({})", start.compaction_id, start.trigger),
        Decoded::CompactionSummary { compaction_id } => compaction_id,
        Decoded::CompactionEnd(end) => format!(
            "{}{}",
            end.compaction_id,
            end.error
                .map(|error| format!(" error {error}"))
                .unwrap_or_default()
        ),
        Decoded::EndSeed => "end of inherited seed".to_owned(),
        Decoded::Other => String::new(),
    }
}
