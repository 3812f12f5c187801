//! `ccare watch replay`: the stream watch over a recorded stream, so thresholds can be
//! tuned on real transcripts without running a model.
//!
//! The file is read one line at a time and each decision is printed when its line is
//! read, so memory stays flat however long the recording is (and a FIFO being written
//! is followed as it grows).

use std::io::{BufRead as _, Write as _};
use std::path::Path;

use ccare_watch::engine::{Frame, StreamWatch, Triggers};
use serde_json::{Value, json};

use crate::Failure;
use ccare_app::Settings;

/// The triggers of the default profile's stream-watch table, or the defaults.
fn triggers(settings: &Settings) -> Result<Triggers, Failure> {
    let profile = settings.profile(None)?;
    let table = profile
        .plugin("stream-watch")
        .and_then(|plugin| plugin.config.get("triggers"));
    let triggers = match table {
        None => Ok(Triggers::defaults()),
        Some(Value::Object(overrides)) => Triggers::with_overrides(overrides),
        Some(list) => Triggers::from_json(list),
    };
    triggers.map_err(|error| {
        Failure::bad_input(anyhow::anyhow!("plugins.stream-watch.triggers: {error}"))
    })
}

/// Replays `file` through the watch and prints each decision (exit 2 on a bad line,
/// naming it).
pub(crate) fn replay(settings: &Settings, file: &Path, json_output: bool) -> Result<(), Failure> {
    let triggers = triggers(settings)?;
    let opened = std::fs::File::open(file)
        .map_err(|error| Failure::bad_input(anyhow::anyhow!("{}: {error}", file.display())))?;
    let mut input = std::io::BufReader::with_capacity(64 * 1024, opened);
    let mut watch = StreamWatch::new(triggers);
    watch.observe(Frame::Start);
    let mut stdout = std::io::stdout().lock();
    let (mut offset, mut deltas, mut decisions) = (0usize, 0usize, 0usize);
    let mut bytes = Vec::new();
    let mut number = 0usize;
    loop {
        bytes.clear();
        number += 1;
        let bad =
            |why: &str| Failure::bad_input(anyhow::anyhow!("{}:{number}: {why}", file.display()));
        let read = input
            .read_until(b'\n', &mut bytes)
            .map_err(|error| bad(&error.to_string()))?;
        if read == 0 {
            break;
        }
        let line = std::str::from_utf8(&bytes)
            .map_err(|error| {
                bad(&format!(
                    "not valid UTF-8 (invalid byte at offset {} of the line)",
                    error.valid_up_to()
                ))
            })?
            .trim_end_matches('\n')
            .trim_end_matches('\r');
        if line.trim().is_empty() {
            continue;
        }
        let value: Value = serde_json::from_str(line).map_err(|error| bad(&error.to_string()))?;
        let text = value
            .get("text")
            .or_else(|| value.get("delta"))
            .and_then(Value::as_str)
            .ok_or_else(|| bad("expected {\"kind\": \"text\"|\"reasoning\", \"text\": \"...\"}"))?;
        let frame = match value.get("kind").and_then(Value::as_str) {
            Some("text") => Frame::Text(text),
            Some("reasoning") => Frame::Reasoning(text),
            Some(other) => {
                return Err(bad(&format!(
                    "kind must be text or reasoning, got {other:?}"
                )));
            }
            None => return Err(bad("missing kind (text or reasoning)")),
        };
        deltas += 1;
        offset += text.encode_utf16().count();
        for firing in watch.observe(frame) {
            decisions += 1;
            let actions: Vec<String> = firing
                .actions
                .iter()
                .map(|action| {
                    serde_json::to_value(action)
                        .ok()
                        .and_then(|value| value.as_str().map(str::to_owned))
                        .unwrap_or_default()
                })
                .collect();
            let evidence = serde_json::to_value(&firing.evidence).unwrap_or(Value::Null);
            let line_out = if json_output {
                json!({"line": number, "offset": offset, "trigger": &*firing.trigger, "actions": actions, "evidence": evidence}).to_string()
            } else {
                format!(
                    "line {number} offset {offset}: {} → {} {evidence}",
                    firing.trigger,
                    actions.join(", ")
                )
            };
            writeln!(stdout, "{line_out}").map_err(Failure::failed)?;
        }
    }
    if !json_output {
        writeln!(
            stdout,
            "{deltas} deltas, {offset} UTF-16 units, {decisions} decision(s)"
        )
        .map_err(Failure::failed)?;
    }
    stdout.flush().map_err(Failure::failed)
}
