//! `ccare run --prompt` and `ccare models` as a user runs them: the real binary,
//! a `ccare.toml`, and the fake OpenAI-compatible server (DESIGN.md §5 exit codes,
//! spec H-LLM-2, H-LLM-5, H-CFG-2).

#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use std::path::Path;
use std::process::{Command, Output};

use ccare_fake_openai::{FakeServer, Reply, Script};

fn ccare(dir: &Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_ccare"))
        .current_dir(dir)
        .env_remove("DEEPSEEK_API_KEY")
        .env_remove("OPENAI_API_KEY")
        .env_remove("CCARE_CONFIG")
        .env_remove("CCARE_HOME")
        .env("FAKE_KEY", "sk-fake")
        .args(args)
        .output()
        .unwrap()
}

pub(crate) async fn ccare_async(dir: &Path, args: &[&str]) -> Output {
    let dir = dir.to_path_buf();
    let args: Vec<String> = args.iter().map(|arg| (*arg).to_owned()).collect();
    tokio::task::spawn_blocking(move || {
        let refs: Vec<&str> = args.iter().map(String::as_str).collect();
        ccare(&dir, &refs)
    })
    .await
    .unwrap()
}

pub(crate) fn text(bytes: &[u8]) -> String {
    String::from_utf8(bytes.to_vec()).unwrap()
}

fn write_config(dir: &Path, base_url: &str) {
    std::fs::write(
        dir.join("ccare.toml"),
        format!(
            r#"
[agent]
model = "local/fake-model"
base_prompt = false               # a bare agent: these tests read the requests sent

[providers.local]
kind = "openai"
base_url = "{base_url}"
api_key_env = "FAKE_KEY"
idle_timeout_ms = 2000

[models."local/fake-model"]
context_window = 16000
max_output_tokens = 1024

[plugins.context-care]
enabled = false

[plugins.stream-watch]
enabled = false
"#
        ),
    )
    .unwrap();
}

#[tokio::test(flavor = "multi_thread")]
async fn run_prints_the_streamed_answer_and_sends_the_purpose_header() {
    let server = FakeServer::start().await.unwrap();
    server.push(Reply::Chunks(
        Script::new()
            .reasoning("thinking")
            .text("Hello, ")
            .text("world.")
            .finish("stop"),
    ));
    let dir = tempfile::tempdir().unwrap();
    write_config(dir.path(), &server.base_url());
    let output = ccare_async(dir.path(), &["run", "--prompt", "Say hello"]).await;
    assert_eq!(output.status.code(), Some(0), "{}", text(&output.stderr));
    assert_eq!(text(&output.stdout), "Hello, world.\n");
    let requests = server.requests();
    assert_eq!(requests.len(), 1);
    assert_eq!(requests[0].header("x-ccare-purpose"), Some("conversation"));
    assert_eq!(requests[0].header("authorization"), Some("Bearer sk-fake"));
    assert_eq!(requests[0].body["max_tokens"], 1024);
    assert_eq!(requests[0].body["messages"][0]["content"], "Say hello");
}

#[tokio::test(flavor = "multi_thread")]
async fn run_names_the_failure_code_and_exits_1() {
    let server = FakeServer::start().await.unwrap();
    server.push(Reply::overflow());
    let dir = tempfile::tempdir().unwrap();
    write_config(dir.path(), &server.base_url());
    let output = ccare_async(dir.path(), &["run", "--prompt", "x"]).await;
    assert_eq!(output.status.code(), Some(1));
    let stderr = text(&output.stderr);
    assert!(stderr.starts_with("session: "), "{stderr}");
    let error = stderr.lines().nth(1).unwrap_or_default();
    assert!(
        error.starts_with("error: CONTEXT_WINDOW_EXCEEDED: "),
        "{stderr}"
    );
    assert!(stderr.contains("(HTTP 400) [local/fake-model]"), "{stderr}");
}

#[test]
fn run_warns_on_length_and_exits_0() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("s.jsonl"),
        "# one reply\n{\"text\": \"cut sho\", \"finish\": \"length\"}\n",
    )
    .unwrap();
    let output = ccare(
        dir.path(),
        &["run", "--prompt", "x", "--provider", "script:s.jsonl"],
    );
    assert_eq!(output.status.code(), Some(0));
    assert_eq!(text(&output.stdout), "cut sho\n");
    assert!(text(&output.stderr).contains("warning: the answer was cut at the output limit"));
}

#[test]
fn without_config_or_key_the_scripted_demo_answers_and_says_so() {
    let dir = tempfile::tempdir().unwrap();
    let output = ccare(dir.path(), &["run", "--prompt", "ping"]);
    assert_eq!(output.status.code(), Some(0));
    assert_eq!(
        text(&output.stdout),
        "(scripted demo provider) You said: ping\n"
    );
    assert!(text(&output.stderr).contains("using the scripted demo provider"));
}

#[test]
fn h_cfg_2_invalid_config_exits_2_naming_file_and_key() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("ccare.toml"),
        "[providers.local]\nkind = \"carrier-pigeon\"\n",
    )
    .unwrap();
    let output = ccare(dir.path(), &["run", "--prompt", "x"]);
    assert_eq!(output.status.code(), Some(2));
    let stderr = text(&output.stderr);
    assert!(
        stderr.starts_with(
            "error: ccare.toml: providers.local.kind: unknown variant `carrier-pigeon`"
        ),
        "{stderr}"
    );

    std::fs::write(
        dir.path().join("ccare.toml"),
        "[agent]\nmodel = \"ghost/m\"\n[providers.local]\nkind = \"openai\"\n",
    )
    .unwrap();
    let output = ccare(dir.path(), &["run", "--prompt", "x"]);
    assert_eq!(output.status.code(), Some(2), "{}", text(&output.stderr));
    assert!(
        text(&output.stderr).contains("provider \"ghost\", which is not configured"),
        "{}",
        text(&output.stderr)
    );

    std::fs::write(
        dir.path().join("ccare.toml"),
        "[plugins.time-travel]\nenabled = true\n",
    )
    .unwrap();
    let output = ccare(dir.path(), &["run", "--prompt", "x"]);
    assert_eq!(output.status.code(), Some(2));
    assert!(
        text(&output.stderr).contains("plugins.time-travel: no such plugin in this build"),
        "{}",
        text(&output.stderr)
    );

    std::fs::write(dir.path().join("broken.json"), "{not a tokenizer").unwrap();
    std::fs::write(
        dir.path().join("ccare.toml"),
        "[agent]\nmodel = \"s/m\"\n[providers.s]\nkind = \"script\"\n[models.\"s/m\"]\ntokenizer = \"broken.json\"\n",
    )
    .unwrap();
    let output = ccare(dir.path(), &["run", "--prompt", "x"]);
    assert_eq!(output.status.code(), Some(2));
    assert!(
        text(&output.stderr).contains("models.\"s/m\".tokenizer:"),
        "{}",
        text(&output.stderr)
    );
    assert!(
        text(&output.stderr).contains("broken.json"),
        "{}",
        text(&output.stderr)
    );

    let bad_script = ccare(
        dir.path(),
        &["run", "--prompt", "x", "--provider", "script:missing.jsonl"],
    );
    assert_eq!(bad_script.status.code(), Some(2));
    assert!(
        text(&bad_script.stderr)
            .contains("providers.script.script: cannot read script missing.jsonl"),
        "{}",
        text(&bad_script.stderr)
    );
}

#[test]
fn models_lists_routes_with_windows() {
    let dir = tempfile::tempdir().unwrap();
    write_config(dir.path(), "http://127.0.0.1:9/v1");
    let output = ccare(dir.path(), &["models", "--json"]);
    assert_eq!(output.status.code(), Some(0), "{}", text(&output.stderr));
    let routes: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(
        routes,
        serde_json::json!([{"name": "local/fake-model", "kind": "openai", "context_window": 16000, "max_output_tokens": 1024, "tokenizer": null, "default": true}])
    );
    let table = ccare(dir.path(), &["models"]);
    let table = text(&table.stdout);
    assert!(
        table
            .lines()
            .nth(1)
            .unwrap()
            .starts_with("local/fake-model"),
        "{table}"
    );
    assert!(
        table.contains("16000") && table.contains("(default)"),
        "{table}"
    );
}

#[test]
fn h_loop_5_run_uses_tools_continues_a_session_and_prints_json_events() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("s.jsonl"),
        r#"{"tool_calls": [{"name": "write_file", "arguments": {"path": "out/a.txt", "content": "hello"}}]}
{"text": "Wrote it."}
{"expect": {"contains": "again"}, "text": "Second turn."}
"#,
    )
    .unwrap();
    let home = dir.path().join("home");
    let home = home.to_str().unwrap();
    let first = ccare(
        dir.path(),
        &[
            "--home",
            home,
            "run",
            "--prompt",
            "write a file",
            "--provider",
            "script:s.jsonl",
        ],
    );
    assert_eq!(first.status.code(), Some(0), "{}", text(&first.stderr));
    assert_eq!(text(&first.stdout), "Wrote it.\n");
    assert_eq!(
        std::fs::read_to_string(dir.path().join("out/a.txt")).unwrap(),
        "hello"
    );
    let id = text(&first.stderr)
        .lines()
        .next()
        .unwrap()
        .strip_prefix("session: ")
        .unwrap()
        .to_owned();

    // The scripted provider restarts with the process, so the second run uses a
    // script whose first reply checks the continued conversation.
    std::fs::write(
        dir.path().join("t.jsonl"),
        "{\"expect\": {\"contains\": \"again\"}, \"text\": \"Second turn.\"}\n",
    )
    .unwrap();
    let second = ccare(
        dir.path(),
        &[
            "--home",
            home,
            "run",
            "--prompt",
            "again",
            "--session",
            &id,
            "--json",
            "--provider",
            "script:t.jsonl",
        ],
    );
    assert_eq!(second.status.code(), Some(0), "{}", text(&second.stderr));
    assert!(
        text(&second.stderr).is_empty(),
        "no new-session line: {}",
        text(&second.stderr)
    );
    let kinds: Vec<String> = text(&second.stdout)
        .lines()
        .map(|line| {
            serde_json::from_str::<serde_json::Value>(line).unwrap()["type"]
                .as_str()
                .unwrap()
                .to_owned()
        })
        .collect();
    assert_eq!(
        kinds,
        [
            "turn/start",
            "user/message",
            "step/start",
            "request/header",
            "assistant/message",
            "step/end",
            "turn/end"
        ],
        "the context did not change, so no request/context; the header says resume"
    );
    let first_line: serde_json::Value =
        serde_json::from_str(text(&second.stdout).lines().next().unwrap()).unwrap();
    assert_eq!(first_line["data"]["turn"], 2);

    let unknown = ccare(
        dir.path(),
        &[
            "--home",
            home,
            "run",
            "--prompt",
            "x",
            "--session",
            "no-such",
        ],
    );
    assert_eq!(unknown.status.code(), Some(2));
}

#[test]
fn cc_bud_6_run_refuses_an_over_budget_request_locally_and_exits_1() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("s.jsonl"), "{\"text\": \"never sent\"}\n").unwrap();
    std::fs::write(
        dir.path().join("ccare.toml"),
        "[agent]\nmodel = \"s/small\"\n[providers.s]\nkind = \"script\"\nscript = \"s.jsonl\"\n[models.\"s/small\"]\ncontext_window = 4000\nmax_output_tokens = 1000\n[plugins.context-care]\n",
    )
    .unwrap();
    let prompt = "lorem ipsum dolor sit amet ".repeat(600);
    let output = ccare(dir.path(), &["run", "--prompt", &prompt]);
    assert_eq!(output.status.code(), Some(1));
    let stderr = text(&output.stderr);
    assert!(
        stderr.contains("error: REQUEST_BUDGET_EXCEEDED: Request input "),
        "{stderr}"
    );
    assert!(stderr.contains("exceeds hard input budget"), "{stderr}");
    assert!(text(&output.stdout).is_empty());
}

#[test]
fn context_status_samples_a_session_without_appending_anything() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("s.jsonl"),
        "{\"text\": \"Hello.\", \"usage\": {\"input\": 5000, \"output\": 2}}\n",
    )
    .unwrap();
    std::fs::write(
        dir.path().join("ccare.toml"),
        "[agent]\nmodel = \"s/small\"\n[providers.s]\nkind = \"script\"\nscript = \"s.jsonl\"\n[models.\"s/small\"]\ncontext_window = 16000\nmax_output_tokens = 1000\n[plugins.context-care]\nquiet_start = false\n",
    )
    .unwrap();
    let run = ccare(dir.path(), &["run", "--prompt", "hi"]);
    assert_eq!(run.status.code(), Some(0), "{}", text(&run.stderr));
    let id = text(&run.stderr)
        .split_whitespace()
        .find(|word| word.len() > 20)
        .unwrap()
        .to_owned();
    let export = |dir: &Path| ccare(dir, &["sessions", "export", &id]).stdout;
    let before = export(dir.path());
    let output = ccare(
        dir.path(),
        &["context", "status", "--session", &id, "--json"],
    );
    assert_eq!(output.status.code(), Some(0), "{}", text(&output.stderr));
    let report: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(report["calibration"], "usage-calibrated");
    assert_eq!(report["budget"]["hardInput"], 15000);
    assert_eq!(report["assessment"]["phase"], "normal");
    assert_eq!(report["metrics"]["fatigue"], "normal");
    assert!(
        report["injectedTokens"].as_u64().unwrap() > 0,
        "the status notice"
    );
    let human = ccare(dir.path(), &["context", "status", "--session", &id]);
    let stdout = text(&human.stdout);
    assert!(
        stdout.starts_with(&format!("session      {id}\nfatigue      ")),
        "{stdout}"
    );
    assert!(
        stdout.ends_with("(sampled now; nothing was appended to the session)\n"),
        "{stdout}"
    );
    assert_eq!(export(dir.path()), before, "the log is unchanged");

    let missing = ccare(dir.path(), &["context", "status", "--session", "no-such"]);
    assert_eq!(missing.status.code(), Some(2));
    std::fs::write(
        dir.path().join("ccare.toml"),
        "[agent]\nmodel = \"s/small\"\n[providers.s]\nkind = \"script\"\nscript = \"s.jsonl\"\n[plugins.context-care]\nenabled = false\n",
    )
    .unwrap();
    let unmounted = ccare(dir.path(), &["context", "status", "--session", &id]);
    assert_eq!(unmounted.status.code(), Some(2));
    assert!(text(&unmounted.stderr).contains("[plugins.context-care]"));
}

#[test]
fn context_actions_and_diff_show_what_a_compaction_replaced() {
    let dir = tempfile::tempdir().unwrap();
    let note = "n".repeat(1200);
    let recovery = format!("search the log for lorem. {}", "r".repeat(1000));
    let rest = serde_json::json!({"tool_calls": [{"name": "context_rest", "arguments": {"note": note, "deep": true, "recovery": recovery}}]});
    // Each run is a new process that replays its script from the top.
    std::fs::write(dir.path().join("s.jsonl"), "{\"text\": \"read\"}\n").unwrap();
    std::fs::write(
        dir.path().join("ccare.toml"),
        "[agent]\nmodel = \"s/small\"\n[providers.s]\nkind = \"script\"\nscript = \"s.jsonl\"\n[models.\"s/small\"]\ncontext_window = 64000\nmax_output_tokens = 1000\n[plugins.context-care]\n",
    )
    .unwrap();
    let prompt = "lorem ipsum dolor sit amet ".repeat(400);
    let first = ccare(dir.path(), &["run", "--prompt", &prompt]);
    assert_eq!(first.status.code(), Some(0), "{}", text(&first.stderr));
    let id = text(&first.stderr)
        .split_whitespace()
        .find(|word| word.len() > 20)
        .unwrap()
        .to_owned();
    std::fs::write(
        dir.path().join("s.jsonl"),
        format!("{rest}\n{{\"text\": \"rested\"}}\n"),
    )
    .unwrap();
    let second = ccare(
        dir.path(),
        &["run", "--session", &id, "--prompt", "rest now"],
    );
    assert_eq!(second.status.code(), Some(0), "{}", text(&second.stderr));

    let actions = ccare(
        dir.path(),
        &["context", "actions", "--session", &id, "--json"],
    );
    assert_eq!(actions.status.code(), Some(0), "{}", text(&actions.stderr));
    let records: Vec<serde_json::Value> = text(&actions.stdout)
        .lines()
        .map(|line| serde_json::from_str(line).unwrap())
        .collect();
    assert_eq!(records.len(), 1, "{records:#?}");
    let action = &records[0]["data"];
    assert_eq!(action["action"], "deep-rest");
    assert_eq!(action["outcome"], "committed");
    let op = action["operationId"].as_str().unwrap();
    let human = text(&ccare(dir.path(), &["context", "actions", "--session", &id]).stdout);
    assert!(
        human.contains(&format!("{op}  deep-rest requested committed  input ")),
        "{human}"
    );

    let diff = ccare(
        dir.path(),
        &["context", "diff", "--session", &id, "--op", op],
    );
    assert_eq!(diff.status.code(), Some(0), "{}", text(&diff.stderr));
    let shown = text(&diff.stdout);
    assert!(shown.contains("replaced     "), "{shown}");
    assert!(shown.contains("  - seq 1 user/message "), "{shown}");
    assert!(shown.contains("\"text\":\"lorem ipsum"), "{shown}");
    assert!(shown.contains("  + seq "), "{shown}");
    assert!(
        shown.contains("    Handoff note (written by you):"),
        "{shown}"
    );
    assert!(shown.contains("search the log for lorem."), "{shown}");

    let missing = ccare(
        dir.path(),
        &["context", "diff", "--session", &id, "--op", "nope"],
    );
    assert_eq!(missing.status.code(), Some(2));
}

#[test]
fn sw_9_run_waits_for_the_resumed_turn_after_an_output_loop_is_stopped() {
    let dir = tempfile::tempdir().unwrap();
    let looping = serde_json::json!({"text": "same line\n".repeat(80)});
    std::fs::write(
        dir.path().join("s.jsonl"),
        format!("{looping}\n{{\"text\": \"Back on track.\"}}\n"),
    )
    .unwrap();
    std::fs::write(
        dir.path().join("ccare.toml"),
        "[agent]\nmodel = \"s/scripted\"\n[providers.s]\nkind = \"script\"\nscript = \"s.jsonl\"\n[plugins.stream-watch]\n",
    )
    .unwrap();
    let output = ccare(dir.path(), &["run", "--prompt", "write it"]);
    assert_eq!(output.status.code(), Some(0), "{}", text(&output.stderr));
    let stdout = text(&output.stdout);
    assert!(
        stdout.starts_with("same line\n"),
        "the partial output is shown: {stdout}"
    );
    assert!(stdout.trim_end().ends_with("Back on track."), "{stdout}");
}

/// `ccare --home home run ARGS` in `dir` with `input` on stdin.
fn run_with_stdin(dir: &Path, args: &[&str], input: &[u8]) -> Output {
    use std::io::Write as _;
    let mut child = crate::chat::ccare_command(dir)
        .args(["--home", "home", "run"])
        .args(args)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let input = input.to_vec();
    // Written from a thread: the child may answer before it has read everything.
    let writer = std::thread::spawn(move || {
        let _ = stdin.write_all(&input);
    });
    let output = child.wait_with_output().unwrap();
    writer.join().unwrap();
    output
}

/// The text of the first `user/message` among `--json` events.
fn prompt_sent(output: &Output) -> String {
    text(&output.stdout)
        .lines()
        .map(|line| serde_json::from_str::<serde_json::Value>(line).unwrap())
        .find(|event| event["type"] == "user/message")
        .and_then(|event| {
            event["data"]["message"]["content"][0]["text"]
                .as_str()
                .map(str::to_owned)
        })
        .unwrap()
}

#[test]
fn run_reads_a_prompt_over_128_kib_from_stdin_or_a_file_and_refuses_bad_utf8() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path();
    std::fs::write(
        path.join("ccare.toml"),
        "[agent]\nmodel = \"s/m\"\n[providers.s]\nkind = \"script\"\nscript = \"ok.jsonl\"\n[models.\"s/m\"]\ncontext_window = 1000000\nmax_output_tokens = 1024\n",
    )
    .unwrap();
    std::fs::write(path.join("ok.jsonl"), "{\"text\": \"read it\"}\n".repeat(2)).unwrap();
    // Over Linux's 128 KiB cap on one argument, with multi-byte characters and the
    // final newline kept as given.
    let prompt: String = (0..4000)
        .map(|n| format!("第 {n} 行: the quick brown fox\n"))
        .collect();
    assert!(prompt.len() > 128 * 1024);

    let from_stdin = run_with_stdin(path, &["--prompt", "-", "--json"], prompt.as_bytes());
    assert_eq!(
        from_stdin.status.code(),
        Some(0),
        "{}",
        text(&from_stdin.stderr)
    );
    let sent = prompt_sent(&from_stdin);
    assert!(
        sent == prompt,
        "from_stdin: {} bytes sent, {} given; starts {:?}",
        sent.len(),
        prompt.len(),
        sent.chars().take(40).collect::<String>()
    );

    std::fs::write(path.join("prompt.txt"), &prompt).unwrap();
    let from_file = run_with_stdin(path, &["--prompt-file", "prompt.txt", "--json"], b"");
    assert_eq!(
        from_file.status.code(),
        Some(0),
        "{}",
        text(&from_file.stderr)
    );
    let sent = prompt_sent(&from_file);
    assert!(
        sent == prompt,
        "from_file: {} bytes sent, {} given; starts {:?}",
        sent.len(),
        prompt.len(),
        sent.chars().take(40).collect::<String>()
    );

    // Not UTF-8: exit 2 naming the source and the byte offset; nothing is sent.
    let bad = b"caf\xc3\xa9 \xff!";
    std::fs::write(path.join("bad.txt"), bad).unwrap();
    let output = run_with_stdin(path, &["--prompt-file", "bad.txt"], b"");
    assert_eq!(output.status.code(), Some(2));
    assert_eq!(
        text(&output.stderr),
        "error: --prompt-file bad.txt: not valid UTF-8 (invalid byte at offset 6)\n"
    );
    let output = run_with_stdin(path, &["--prompt", "-"], bad);
    assert_eq!(output.status.code(), Some(2));
    assert_eq!(
        text(&output.stderr),
        "error: --prompt -: stdin is not valid UTF-8 (invalid byte at offset 6)\n"
    );
    let output = run_with_stdin(path, &["--prompt-file", "missing.txt"], b"");
    assert_eq!(output.status.code(), Some(2));
    assert!(
        text(&output.stderr).starts_with("error: --prompt-file missing.txt: cannot read it: "),
        "{}",
        text(&output.stderr)
    );
    // One prompt source, and one is needed.
    let output = run_with_stdin(path, &["--prompt", "x", "--prompt-file", "prompt.txt"], b"");
    assert_eq!(output.status.code(), Some(2));
    let output = run_with_stdin(path, &[], b"");
    assert_eq!(output.status.code(), Some(2));
    let list: serde_json::Value = serde_json::from_slice(
        &crate::chat::ccare_command(path)
            .args(["--home", "home", "sessions", "list", "--json"])
            .output()
            .unwrap()
            .stdout,
    )
    .unwrap();
    assert_eq!(
        list.as_array().unwrap().len(),
        2,
        "a refused prompt creates no session"
    );
}

#[test]
fn logs_written_to_a_pipe_or_with_no_color_carry_no_colour_codes() {
    let dir = tempfile::tempdir().unwrap();
    for no_color in [None, Some("1")] {
        let mut command = crate::chat::ccare_command(dir.path());
        command
            .args(["--home", "home", "sessions", "list"])
            .env("CCARE_LOG", "debug");
        match no_color {
            Some(value) => command.env("NO_COLOR", value),
            None => command.env_remove("NO_COLOR"),
        };
        let output = command.output().unwrap();
        assert_eq!(output.status.code(), Some(0));
        let stderr = text(&output.stderr);
        assert!(
            stderr.contains(" DEBUG ccare_store::sqlite: sqlite store opened"),
            "{stderr:?}"
        );
        assert!(!stderr.contains('\x1b'), "{stderr:?}");
    }
}
