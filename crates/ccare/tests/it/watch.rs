//! Stream watch end to end (issue 8 acceptance): the real `ccare` binary against the
//! fake server streaming a looping reply in 1–4 character deltas, and a corpus of
//! outputs that repeat structure legitimately and must never be stopped.

use std::path::{Path, PathBuf};

use ccare_fake_openai::{FakeServer, Script};
use ccare_watch::engine::{ActionId, Frame, StreamWatch, Triggers};

use crate::run::{ccare_async, text};

fn write_config(dir: &Path, base_url: &str) {
    std::fs::write(
        dir.join("ccare.toml"),
        format!(
            "[agent]\nmodel = \"local/fake-model\"\n\n[providers.local]\nkind = \"openai\"\nbase_url = \"{base_url}\"\napi_key_env = \"FAKE_KEY\"\nidle_timeout_ms = 5000\n\n[models.\"local/fake-model\"]\ncontext_window = 64000\nmax_output_tokens = 1024\n\n[plugins.stream-watch]\n"
        ),
    )
    .unwrap();
}

/// `text` as a stream of 1–4 character deltas with a 1 ms pause every 8 deltas;
/// returns the script and how many deltas it has.
fn trickle(text: &str) -> (Script, u64) {
    let chars: Vec<char> = text.chars().collect();
    let mut script = Script::new();
    let mut at = 0;
    let mut deltas = 0u64;
    while at < chars.len() {
        let size = 1 + (deltas as usize % 4);
        let end = (at + size).min(chars.len());
        script = script.text(chars[at..end].iter().collect::<String>());
        deltas += 1;
        if deltas.is_multiple_of(8) {
            script = script.delay_ms(1);
        }
        at = end;
    }
    (script.finish("stop"), deltas)
}

fn looping() -> (Script, u64) {
    trickle(&"same line again\n".repeat(1000))
}

#[tokio::test(flavor = "multi_thread")]
async fn a_looping_stream_is_cut_early_kept_and_resumed_then_two_in_a_row_stop() {
    let server = FakeServer::start().await.unwrap();
    let (script, deltas) = looping();
    server.push(script);
    server.push(Script::new().text("Back on track.").finish("stop"));
    let dir = tempfile::tempdir().unwrap();
    write_config(dir.path(), &server.base_url());
    let run = ccare_async(dir.path(), &["run", "--prompt", "write it", "--json"]).await;
    assert_eq!(run.status.code(), Some(0), "{}", text(&run.stderr));
    let sent = server.steps_sent();
    assert!(
        sent < deltas / 10,
        "the stream was cut before a tenth of the reply: {sent} of {deltas} steps sent"
    );
    let events: Vec<serde_json::Value> = text(&run.stdout)
        .lines()
        .map(|line| serde_json::from_str(line).unwrap())
        .collect();
    let answers: Vec<&serde_json::Value> = events
        .iter()
        .filter(|event| event["type"] == "assistant/message")
        .collect();
    assert_eq!(answers[0]["data"]["interrupted"], true);
    let partial = answers[0]["data"]["message"]["content"][0]["text"]
        .as_str()
        .unwrap();
    assert!(
        partial.starts_with("same line again\n"),
        "the visible prefix is kept"
    );
    let resume = events
        .iter()
        .find(|event| {
            event["type"] == "user/message"
                && event["data"]["message"]["source"]["summary"] == "Output loop aborted"
        })
        .expect("a resume notice");
    assert!(
        resume["data"]["message"]["content"][0]["text"]
            .as_str()
            .unwrap()
            .contains("not you, stopped the response")
    );
    assert_eq!(
        answers[1]["data"]["message"]["content"][0]["text"],
        "Back on track."
    );

    // The next turn loops twice in a row: the second stop is not resumed, and the run
    // ends with a clear reason.
    let id = events
        .iter()
        .find_map(|event| event["session"].as_str().map(str::to_owned))
        .or_else(|| {
            text(&run.stderr)
                .split_whitespace()
                .find(|word| word.len() > 20)
                .map(str::to_owned)
        })
        .unwrap();
    server.push(looping().0);
    server.push(looping().0);
    let again = ccare_async(dir.path(), &["run", "--session", &id, "--prompt", "again"]).await;
    assert_eq!(again.status.code(), Some(1), "{}", text(&again.stderr));
    let stderr = text(&again.stderr);
    assert!(
        stderr.contains(
            "error: stopped by stream-watch: output loop: same line again; auto-continue paused after 2 consecutive stops"
        ),
        "{stderr}"
    );
}

fn corpus() -> Vec<(PathBuf, String)> {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../ccare-watch/tests/corpus");
    let mut files: Vec<(PathBuf, String)> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|entry| entry.unwrap().path())
        .filter(|path| {
            path.extension().is_some_and(|ext| ext == "md") && !path.ends_with("README.md")
        })
        .map(|path| {
            let text = std::fs::read_to_string(&path).unwrap();
            (path, text)
        })
        .collect();
    files.sort();
    files
}

#[test]
fn sw_6_structured_outputs_that_repeat_on_purpose_are_never_stopped() {
    let files = corpus();
    assert!(files.len() >= 5);
    for (path, body) in files {
        for scope_text in [true, false] {
            let mut watch = StreamWatch::new(Triggers::defaults());
            watch.observe(Frame::Start);
            let chars: Vec<char> = body.chars().collect();
            let mut at = 0;
            let mut step = 0;
            while at < chars.len() {
                let end = (at + 1 + step % 4).min(chars.len());
                let delta: String = chars[at..end].iter().collect();
                let frame = if scope_text {
                    Frame::Text(&delta)
                } else {
                    Frame::Reasoning(&delta)
                };
                for firing in watch.observe(frame) {
                    assert!(
                        !firing.actions.contains(&ActionId::Abort),
                        "{} would be stopped: {:?}",
                        path.display(),
                        firing.evidence
                    );
                }
                at = end;
                step += 1;
            }
        }
    }
}

fn ccare_sync(dir: &Path, args: &[&str]) -> std::process::Output {
    std::process::Command::new(env!("CARGO_BIN_EXE_ccare"))
        .current_dir(dir)
        .env_remove("CCARE_CONFIG")
        .env_remove("CCARE_HOME")
        .args(args)
        .output()
        .unwrap()
}

#[test]
fn watch_replay_prints_each_decision_with_its_offset_and_honours_overrides() {
    let dir = tempfile::tempdir().unwrap();
    let mut lines = vec![
        r#"{"kind": "reasoning", "text": "嗯，时间"}"#.to_owned(),
        r#"{"kind": "reasoning", "text": "不够"}"#.to_owned(),
    ];
    for _ in 0..80 {
        lines.push(r#"{"kind": "text", "text": "same line\n"}"#.to_owned());
    }
    std::fs::write(dir.path().join("stream.jsonl"), lines.join("\n")).unwrap();
    let output = ccare_sync(dir.path(), &["watch", "replay", "stream.jsonl"]);
    assert_eq!(output.status.code(), Some(0), "{}", text(&output.stderr));
    let stdout = text(&output.stdout);
    let decisions: Vec<&str> = stdout
        .lines()
        .filter(|line| line.starts_with("line "))
        .collect();
    assert_eq!(decisions.len(), 2, "{stdout}");
    assert!(
        decisions[0].starts_with("line 2 offset 6: time-anxiety → notice "),
        "{stdout}"
    );
    assert!(
        decisions[1].contains("line-repeat → notice, abort, resume"),
        "{stdout}"
    );
    assert!(
        stdout.ends_with("82 deltas, 806 UTF-16 units, 2 decision(s)\n"),
        "{stdout}"
    );

    // A stricter threshold from ccare.toml: the loop no longer fires.
    std::fs::write(
        dir.path().join("ccare.toml"),
        "[plugins.stream-watch.triggers.line-repeat.detector.params]\nmin_count = 100\nmin_run = 100\n",
    )
    .unwrap();
    let output = ccare_sync(dir.path(), &["watch", "replay", "stream.jsonl", "--json"]);
    assert_eq!(output.status.code(), Some(0), "{}", text(&output.stderr));
    let decisions: Vec<serde_json::Value> = text(&output.stdout)
        .lines()
        .map(|line| serde_json::from_str(line).unwrap())
        .collect();
    assert_eq!(decisions.len(), 1);
    assert_eq!(decisions[0]["trigger"], "time-anxiety");

    std::fs::write(
        dir.path().join("bad.jsonl"),
        "{\"kind\": \"text\", \"text\": \"a\"}\n{\"kind\": \"audio\", \"text\": \"b\"}\n",
    )
    .unwrap();
    let bad = ccare_sync(dir.path(), &["watch", "replay", "bad.jsonl"]);
    assert_eq!(bad.status.code(), Some(2));
    assert!(
        text(&bad.stderr).contains("bad.jsonl:2: kind must be text or reasoning"),
        "{}",
        text(&bad.stderr)
    );
}

/// Peak resident memory of a running process, in KiB (`VmHWM`).
fn peak_rss_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    status
        .lines()
        .find_map(|line| line.strip_prefix("VmHWM:"))
        .and_then(|value| value.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap()
}

#[test]
fn watch_replay_streams_its_input_line_by_line_with_flat_memory_and_no_provider_notice() {
    use std::io::{BufRead as _, Write as _};
    use std::sync::mpsc;
    use std::time::Duration;

    let dir = tempfile::tempdir().unwrap();
    let fifo = dir.path().join("live.jsonl");
    let made = std::process::Command::new("mkfifo")
        .arg(&fifo)
        .status()
        .unwrap();
    assert!(made.success());
    let mut child = crate::chat::ccare_command(dir.path())
        .args(["watch", "replay", "live.jsonl", "--json"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let pid = child.id();
    let (lines_tx, lines) = mpsc::channel::<String>();
    let stdout = child.stdout.take().unwrap();
    let reader = std::thread::spawn(move || {
        for line in std::io::BufReader::new(stdout).lines() {
            if lines_tx.send(line.unwrap()).is_err() {
                break;
            }
        }
    });
    let mut input = std::fs::OpenOptions::new().write(true).open(&fifo).unwrap();
    // A decision is printed as soon as its line is read, while the input is still open.
    writeln!(input, r#"{{"kind": "reasoning", "text": "嗯，时间"}}"#).unwrap();
    writeln!(input, r#"{{"kind": "reasoning", "text": "不够"}}"#).unwrap();
    input.flush().unwrap();
    let first = lines
        .recv_timeout(Duration::from_secs(30))
        .expect("a decision before the input ended");
    let first: serde_json::Value = serde_json::from_str(&first).unwrap();
    assert_eq!(first["trigger"], "time-anxiety");
    assert_eq!(first["line"], 2);
    // 64 MiB more through the pipe: memory stays flat, far below what was sent.
    let line = format!(
        "{}\n",
        serde_json::json!({"kind": "text", "text": format!("{} varied prose, ", "x".repeat(200))})
    );
    let mut sent = 0usize;
    let mut n = 0u64;
    while sent < 64 << 20 {
        let numbered = line.replacen("varied", &format!("varied {n}"), 1);
        input.write_all(numbered.as_bytes()).unwrap();
        sent += numbered.len();
        n += 1;
    }
    input.flush().unwrap();
    // The write end is still open: `ccare` holds nothing of the tail yet to be sent.
    std::thread::sleep(Duration::from_millis(200));
    let peak = peak_rss_kib(pid);
    drop(input);
    let output = child.wait_with_output().unwrap();
    reader.join().unwrap();
    let stderr = text(&output.stderr);
    assert_eq!(output.status.code(), Some(0), "{stderr}");
    assert!(
        peak < 40 * 1024,
        "peak RSS {peak} KiB after {sent} bytes streamed"
    );
    // Replay uses no provider: no notice about API keys or the scripted demo.
    assert_eq!(stderr, "", "watch replay says nothing on stderr");
}
