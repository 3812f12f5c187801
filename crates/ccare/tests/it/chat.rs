//! `ccare chat` as a user drives it: lines piped into the real binary (the scripted
//! provider, a tool call, the commands), and a real terminal through tmux against the
//! fake OpenAI-compatible server (streaming, Ctrl-C mid-stream, a second prompt).

#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use ccare_fake_openai::{FakeServer, Reply, Script};
use serde_json::Value;

/// The binary with no ambient configuration: no keys, no `$CCARE_*`.
pub(crate) fn ccare_command(dir: &Path) -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_ccare"));
    command
        .current_dir(dir)
        .env_remove("DEEPSEEK_API_KEY")
        .env_remove("OPENAI_API_KEY")
        .env_remove("CCARE_CONFIG")
        .env_remove("CCARE_HOME")
        .env_remove("COLUMNS")
        .env("FAKE_KEY", "sk-fake");
    command
}

/// Runs `ccare chat` in `dir` with `input` on stdin.
pub(crate) fn chat(dir: &Path, args: &[&str], input: &str) -> Output {
    let mut child = ccare_command(dir)
        .args(["--home", "home", "chat"])
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(input.as_bytes())
        .unwrap();
    child.wait_with_output().unwrap()
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8(bytes.to_vec()).unwrap()
}

/// The session id from the banner (`session ID (new) · ...`).
pub(crate) fn banner_id(stderr: &str) -> String {
    let first = stderr.lines().next().unwrap_or_default();
    assert!(first.starts_with("session "), "{stderr}");
    first
        .split_whitespace()
        .nth(1)
        .unwrap_or_default()
        .to_owned()
}

#[test]
fn piped_chat_uses_tools_answers_on_stdout_and_reports_status() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("s.jsonl"),
        concat!(
            "{\"reasoning\": \"The user wants a file.\", \"text\": \"Let me save it.\", ",
            "\"tool_calls\": [{\"name\": \"write_file\", \"arguments\": {\"path\": \"notes.md\", \"content\": \"hi\"}}]}\n",
            "{\"text\": \"Saved.\", \"usage\": {\"input\": 900, \"cache_read\": 100, \"output\": 12}}\n",
            "{\"failure\": {\"code\": \"CONTEXT_WINDOW_EXCEEDED\", \"message\": \"too long\"}}\n",
        ),
    )
    .unwrap();
    let output = chat(
        dir.path(),
        &["--provider", "script:s.jsonl"],
        "Please save a note\n/status\n\nagain\n/bogus\n/sessions\n",
    );
    let stdout = text(&output.stdout);
    let stderr = text(&output.stderr);
    assert_eq!(output.status.code(), Some(0), "{stderr}");
    let id = banner_id(&stderr);
    assert!(
        stderr.lines().next().unwrap().ends_with(
            "(new) · model script/scripted · Ctrl-C cancels a running answer; /status /sessions /quit"
        ),
        "{stderr}"
    );

    // The answer text of both steps on stdout, a line each; chrome on stderr only.
    assert!(stdout.starts_with("Let me save it.\nSaved.\n"), "{stdout}");
    assert!(!stdout.contains("write_file"), "{stdout}");
    assert!(!stdout.contains("The user wants a file."), "{stdout}");
    let chrome: Vec<&str> = stderr.lines().skip(1).collect();
    assert_eq!(
        chrome,
        [
            "The user wants a file.",
            r#"→ write_file {"path":"notes.md","content":"hi"}"#,
            "← write_file: wrote 2 bytes to notes.md",
            "[error CONTEXT_WINDOW_EXCEEDED: too long [script/scripted]]",
            "unknown command /bogus; Ctrl-C cancels a running answer; /status /sessions /quit",
        ],
        "{stderr}"
    );
    assert_eq!(
        std::fs::read_to_string(dir.path().join("notes.md")).unwrap(),
        "hi"
    );

    // `/status` after the first turn, `/sessions` at the end (the current one starred).
    let status: Vec<&str> = stdout.lines().skip(2).take(6).collect();
    assert_eq!(status[0], format!("session    {id}"), "{stdout}");
    assert_eq!(status[1], "model      script/scripted");
    assert!(status[2].starts_with("events     "), "{stdout}");
    assert_eq!(status[3], "turns      1");
    assert_eq!(status[4], "last turn  completed");
    assert_eq!(
        status[5],
        "last usage input 900 / cache_read 100 / output 12"
    );
    let last = stdout.lines().last().unwrap_or_default();
    assert!(last.starts_with(&format!("* {id}  20")), "{stdout}");
    assert!(last.ends_with(" events"), "{stdout}");
}

#[test]
fn chat_resumes_a_session_and_quits_on_command() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("s.jsonl"),
        "{\"text\": \"First.\"}\n{\"text\": \"Second.\"}\n",
    )
    .unwrap();
    let first = chat(dir.path(), &["--provider", "script:s.jsonl"], "one\n");
    assert_eq!(first.status.code(), Some(0), "{}", text(&first.stderr));
    assert_eq!(text(&first.stdout), "First.\n");
    let id = banner_id(&text(&first.stderr));

    std::fs::write(dir.path().join("s.jsonl"), "{\"text\": \"Second.\"}\n").unwrap();
    let second = chat(
        dir.path(),
        &["--provider", "script:s.jsonl", "--session", &id],
        "two\n/quit\nnever sent\n",
    );
    let stderr = text(&second.stderr);
    assert_eq!(second.status.code(), Some(0), "{stderr}");
    assert_eq!(text(&second.stdout), "Second.\n");
    assert!(
        stderr.starts_with(&format!("session {id} (resumed, ")),
        "{stderr}"
    );

    let unknown = chat(
        dir.path(),
        &[
            "--provider",
            "script:s.jsonl",
            "--session",
            "no-such-session",
        ],
        "",
    );
    assert_eq!(unknown.status.code(), Some(2), "{}", text(&unknown.stderr));
}

// ---------------------------------------------------------------------------------
// Through a real terminal: tmux.

/// A tmux server of its own (its own socket), killed on drop.
struct Tmux {
    socket: PathBuf,
    session: String,
}

impl Tmux {
    fn command(&self) -> Command {
        let mut command = Command::new("tmux");
        command
            .arg("-S")
            .arg(&self.socket)
            .arg("-f")
            .arg("/dev/null");
        command
    }

    fn run(&self, args: &[&str]) -> Output {
        self.command().args(args).output().unwrap()
    }

    fn send_line(&self, line: &str) {
        let output = self.run(&["send-keys", "-t", &self.session, "-l", line]);
        assert!(output.status.success(), "{}", text(&output.stderr));
        let output = self.run(&["send-keys", "-t", &self.session, "Enter"]);
        assert!(output.status.success(), "{}", text(&output.stderr));
    }

    fn capture(&self) -> String {
        text(
            &self
                .run(&["capture-pane", "-p", "-t", &self.session])
                .stdout,
        )
    }

    /// The pane with its styles as escape sequences (`capture-pane -e`).
    fn capture_styled(&self) -> String {
        text(
            &self
                .run(&["capture-pane", "-p", "-e", "-t", &self.session])
                .stdout,
        )
    }

    fn alive(&self) -> bool {
        self.run(&["has-session", "-t", &self.session])
            .status
            .success()
    }

    /// Polls the pane until `done` holds (up to 20 s, for slow CI machines).
    async fn wait_for(&self, what: &str, done: impl Fn(&str) -> bool) -> String {
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            let screen = self.capture();
            if done(&screen) {
                return screen;
            }
            assert!(
                Instant::now() < deadline,
                "timed out waiting for {what}; the pane shows:\n{screen}"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

impl Drop for Tmux {
    fn drop(&mut self) {
        let _ = self.run(&["kill-server"]);
    }
}

fn shell_quote(text: &str) -> String {
    format!("'{}'", text.replace('\'', r"'\''"))
}

#[tokio::test(flavor = "multi_thread")]
async fn chat_in_tmux_streams_the_answer_and_survives_ctrl_c_mid_stream() {
    let tmux_version = Command::new("tmux").arg("-V").output();
    assert!(
        tmux_version.is_ok_and(|output| output.status.success()),
        "this test drives `ccare chat` through tmux, which is not installed \
         (apt-get install -y tmux; .ci/run installs it)"
    );

    let server = FakeServer::start().await.unwrap();
    server.push(Reply::Chunks(
        Script::new()
            .text("Hello ")
            .delay_ms(300)
            .text("slow ")
            .delay_ms(30_000)
            .text("never")
            .finish("stop"),
    ));
    server.push(Reply::text("Second answer."));

    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("ccare.toml");
    std::fs::write(
        &config,
        format!(
            r#"
[agent]
model = "local/fake-model"

[providers.local]
kind = "openai"
base_url = "{}"
api_key_env = "FAKE_KEY"
idle_timeout_ms = 60000

[models."local/fake-model"]
context_window = 16000
max_output_tokens = 1024
"#,
            server.base_url()
        ),
    )
    .unwrap();
    let home = dir.path().join("home");
    let binary = env!("CARGO_BIN_EXE_ccare");
    let pane_command = format!(
        "exec env -u OPENAI_API_KEY -u DEEPSEEK_API_KEY -u CCARE_CONFIG -u CCARE_HOME \
         FAKE_KEY=sk-fake {} --home {} --config {} chat",
        shell_quote(binary),
        shell_quote(&home.display().to_string()),
        shell_quote(&config.display().to_string()),
    );
    let tmux = Tmux {
        socket: dir.path().join("tmux.sock"),
        session: format!("ccare-chat-{}", std::process::id()),
    };
    let started = tmux
        .command()
        .args([
            "new-session",
            "-d",
            "-s",
            &tmux.session,
            "-x",
            "120",
            "-y",
            "40",
            "-c",
        ])
        .arg(dir.path())
        .arg(&pane_command)
        .output()
        .unwrap();
    assert!(started.status.success(), "{}", text(&started.stderr));

    tmux.wait_for("the banner and the prompt", |screen| {
        screen.contains("Ctrl-C cancels a running answer") && screen.trim_end().ends_with('>')
    })
    .await;
    tmux.send_line("Tell me something slowly");
    tmux.wait_for("the streamed answer", |screen| {
        screen.contains("Hello slow")
    })
    .await;
    let output = tmux.run(&["send-keys", "-t", &tmux.session, "C-c"]);
    assert!(output.status.success(), "{}", text(&output.stderr));
    let screen = tmux
        .wait_for("[cancelled] and the prompt", |screen| {
            screen.contains("[cancelled]") && screen.trim_end().ends_with('>')
        })
        .await;
    assert!(!screen.contains("never"), "{screen}");
    assert!(
        tmux.alive(),
        "Ctrl-C mid-stream ended ccare chat:\n{screen}"
    );

    tmux.send_line("And now quickly");
    let screen = tmux
        .wait_for("the second answer", |screen| {
            screen.contains("Second answer.") && screen.trim_end().ends_with('>')
        })
        .await;
    let lines: Vec<&str> = screen.lines().map(str::trim_end).collect();
    let hello = lines
        .iter()
        .position(|line| line.contains("Hello slow"))
        .unwrap();
    let cancelled = lines
        .iter()
        .position(|line| *line == "[cancelled]")
        .unwrap();
    let second = lines
        .iter()
        .position(|line| *line == "Second answer.")
        .unwrap();
    assert!(hello < cancelled && cancelled < second, "{screen}");

    tmux.send_line("/quit");
    let deadline = Instant::now() + Duration::from_secs(20);
    while tmux.alive() {
        assert!(Instant::now() < deadline, "/quit did not end ccare chat");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(server.requests().len(), 2);

    // The log keeps the partial answer as an interrupted assistant message, and the
    // cancelled turn ended as aborted by the user.
    let list = ccare_command(dir.path())
        .arg("--home")
        .arg(&home)
        .args(["sessions", "list", "--json"])
        .output()
        .unwrap();
    assert_eq!(list.status.code(), Some(0), "{}", text(&list.stderr));
    let sessions: Value = serde_json::from_slice(&list.stdout).unwrap();
    assert_eq!(sessions.as_array().map(Vec::len), Some(1), "{sessions}");
    let id = sessions[0]["id"].as_str().unwrap();
    let show = ccare_command(dir.path())
        .arg("--home")
        .arg(&home)
        .args(["sessions", "show", id, "--json"])
        .output()
        .unwrap();
    assert_eq!(show.status.code(), Some(0), "{}", text(&show.stderr));
    let shown: Value = serde_json::from_slice(&show.stdout).unwrap();
    let events = shown["events"].as_array().unwrap();
    let assistant: Vec<&Value> = events
        .iter()
        .filter(|event| event["type"] == "assistant/message")
        .collect();
    assert_eq!(assistant.len(), 2, "{shown:#}");
    let partial = &assistant[0]["data"];
    assert_eq!(partial["interrupted"], true, "{partial:#}");
    assert_eq!(partial["message"]["content"][0]["text"], "Hello slow ");
    assert_eq!(
        assistant[1]["data"]["message"]["content"][0]["text"],
        "Second answer."
    );
    let ends: Vec<&Value> = events
        .iter()
        .filter(|event| event["type"] == "turn/end")
        .map(|event| &event["data"]["reason"]["kind"])
        .collect();
    assert_eq!(ends, [&Value::from("aborted"), &Value::from("completed")]);
}

#[test]
fn cc_met_5_status_shows_a_fresh_context_sample_with_percentages_and_levels() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("s.jsonl"),
        "{\"text\": \"Hello.\", \"usage\": {\"input\": 5000, \"output\": 2}}\n",
    )
    .unwrap();
    std::fs::write(
        dir.path().join("ccare.toml"),
        "[agent]\nmodel = \"s/small\"\n[providers.s]\nkind = \"script\"\nscript = \"s.jsonl\"\n[models.\"s/small\"]\ncontext_window = 16000\nmax_output_tokens = 1000\n[plugins.context-care]\n",
    )
    .unwrap();
    let output = chat(dir.path(), &[], "/status\nhi\n/status\n");
    let stdout = text(&output.stdout);
    assert_eq!(output.status.code(), Some(0), "{}", text(&output.stderr));
    let field = |name: &str| -> Vec<String> {
        stdout
            .lines()
            .filter_map(|line| line.strip_prefix(&format!("{name:<13}")))
            .map(str::to_owned)
            .collect()
    };
    let fatigue = field("fatigue");
    assert_eq!(fatigue.len(), 2, "{stdout}");
    for value in &fatigue {
        let number = value
            .strip_suffix("% (normal)")
            .unwrap_or_else(|| panic!("{value}"));
        assert!(number.parse::<f64>().unwrap() < 30.0, "{value}");
        assert!(
            number
                .split('.')
                .nth(1)
                .is_none_or(|decimals| decimals.len() == 1),
            "{value}"
        );
    }
    assert_eq!(field("capacity"), ["16000 tokens (context window)"; 2]);
    assert_eq!(
        field("budget"),
        ["C 16000 · R 1000 · H 15000 · S 12800 · L 12800"; 2]
    );
    assert_eq!(field("phase"), ["normal"; 2]);
    // Before any request the meter's own estimate; after one, its real usage.
    let calibration = field("calibration");
    assert_eq!(calibration[0], "heuristic × 1");
    assert!(
        calibration[1].starts_with("usage-calibrated × "),
        "{calibration:?}"
    );
    assert_eq!(
        stdout
            .lines()
            .filter(|line| *line == "(sampled now; nothing was appended to the session)")
            .count(),
        2
    );
}

/// Issue 18 item 18: on a terminal, logs are coloured and reasoning is dimmed unless
/// `NO_COLOR` is set (to anything but the empty string).
#[tokio::test(flavor = "multi_thread")]
async fn no_color_turns_off_log_colours_and_dimmed_reasoning_on_a_terminal() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("r.jsonl"),
        "{\"reasoning\": \"thinking hard\", \"text\": \"done\"}\n",
    )
    .unwrap();
    let binary = shell_quote(env!("CARGO_BIN_EXE_ccare"));
    let script = format!(
        "cd {dir}; for nc in '' 1; do echo \"== NO_COLOR=$nc\"; printf 'hi\\n' | \
         env -u OPENAI_API_KEY -u DEEPSEEK_API_KEY -u CCARE_CONFIG -u CCARE_HOME \
         NO_COLOR=$nc CCARE_LOG=debug {binary} --home home chat --provider script:r.jsonl; \
         done; echo '== end'; sleep 60",
        dir = shell_quote(&dir.path().display().to_string()),
    );
    let tmux = Tmux {
        socket: dir.path().join("tmux.sock"),
        session: format!("ccare-colour-{}", std::process::id()),
    };
    let started = tmux.run(&[
        "new-session",
        "-d",
        "-x",
        "200",
        "-y",
        "50",
        "-s",
        &tmux.session,
        &format!("sh -c {}", shell_quote(&script)),
    ]);
    assert!(started.status.success(), "{}", text(&started.stderr));
    tmux.wait_for("both runs", |screen| screen.contains("== end"))
        .await;
    let screen = tmux.capture_styled();
    let coloured = screen
        .split("== NO_COLOR=\n")
        .nth(1)
        .and_then(|rest| rest.split("== NO_COLOR=1").next())
        .unwrap_or_default();
    let plain = screen
        .split("== NO_COLOR=1")
        .nth(1)
        .and_then(|rest| rest.split("== end").next())
        .unwrap_or_default();
    for part in [coloured, plain] {
        assert!(part.contains("sqlite store opened"), "{screen:?}");
        assert!(part.contains("thinking hard"), "{screen:?}");
    }
    assert!(
        coloured.contains("\x1b[2mthinking hard"),
        "a terminal without NO_COLOR dims the reasoning: {coloured:?}"
    );
    assert!(
        coloured.contains("\x1b[34mDEBUG"),
        "a terminal without NO_COLOR colours the log: {coloured:?}"
    );
    assert!(
        !plain.contains('\x1b'),
        "NO_COLOR=1 leaves no escape code: {plain:?}"
    );
}

/// ACT-4 in `ccare chat`: a chat whose stdout is not read falls behind the agent's
/// stream (`Lagged`), resubscribes, and still prints the whole answer on stdout, each
/// word once, in order — nothing lost with the dropped chunks, nothing shown twice.
#[test]
fn act_4_a_lagging_chat_prints_the_whole_answer_once() {
    let dir = tempfile::tempdir().unwrap();
    // Far more chunks than the stream holds and more bytes than a pipe buffers, so the
    // chat blocks on stdout while the agent streams on.
    let words: Vec<String> = (0..30_000).map(|index| format!("w{index}")).collect();
    let answer = words.join(" ");
    let reply = serde_json::json!({ "text": answer });
    std::fs::write(dir.path().join("s.jsonl"), format!("{reply}\n")).unwrap();
    let mut child = ccare_command(dir.path())
        .args(["--home", "home", "chat", "--provider", "script:s.jsonl"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(b"Say it all\n")
        .unwrap();
    // Nobody reads stdout for a while: the chat's writes block, its stream lags.
    std::thread::sleep(Duration::from_secs(2));
    let output = child.wait_with_output().unwrap();
    let stderr = text(&output.stderr);
    assert_eq!(output.status.code(), Some(0), "{stderr}");
    let stdout = text(&output.stdout);
    assert_eq!(stdout.len(), answer.len() + 1, "{stderr}");
    assert_eq!(stdout, format!("{answer}\n"));
}
