//! The real `ccare` binary in a temp dir.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use std::process::{Command, Output};

fn ccare(home: &std::path::Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_ccare"))
        .arg("--home")
        .arg(home)
        .args(args)
        .output()
        .unwrap()
}

fn stdout(output: &Output) -> String {
    String::from_utf8(output.stdout.clone()).unwrap()
}

#[test]
fn demo_list_show_export_import_fork() {
    let dir = tempfile::tempdir().unwrap();
    let home = dir.path().join("home");
    let demo = ccare(&home, &["demo"]);
    assert!(demo.status.success());
    let shown = stdout(&demo);
    assert!(
        shown.contains("(stream-watch stopped the repeating list mid-generation"),
        "{shown}"
    );
    assert!(
        shown.contains("(context care summarized the earlier turns into a checkpoint at the model's request: the next request's input went from "),
        "{shown}"
    );
    assert!(shown.contains("  fatigue      "), "{shown}");
    assert!(
        shown.contains("  budget       C 16000 · R 1000 · H 15000 · S 12800 · L 12800"),
        "{shown}"
    );
    let list = ccare(&home, &["sessions", "list", "--json"]);
    assert!(list.status.success());
    let sessions: serde_json::Value = serde_json::from_str(&stdout(&list)).unwrap();
    let first = &sessions[0];
    let id = first["id"].as_str().unwrap().to_owned();
    assert_eq!(first["events"], 68);
    // The demo's rest is in the journal, readable without any config.
    let actions = ccare(&home, &["context", "actions", "--session", &id]);
    assert!(actions.status.success());
    let actions = stdout(&actions);
    assert!(
        actions.contains(" summary requested committed  input "),
        "{actions}"
    );
    assert!(
        actions.starts_with("20"),
        "an RFC 3339 time first: {actions}"
    );
    assert!(first["created_at"].as_str().unwrap().ends_with('Z'));

    let show = ccare(&home, &["sessions", "show", &id]);
    assert!(show.status.success());
    assert!(stdout(&show).contains("assistant/message"));

    let file = dir.path().join("s.jsonl");
    assert!(
        ccare(
            &home,
            &["sessions", "export", &id, "-o", file.to_str().unwrap()]
        )
        .status
        .success()
    );
    let other = dir.path().join("other");
    assert!(
        ccare(&other, &["sessions", "import", file.to_str().unwrap()])
            .status
            .success()
    );
    let again = ccare(&other, &["sessions", "export", &id]);
    assert_eq!(
        again.stdout,
        std::fs::read(&file).unwrap(),
        "export → import → export is byte-identical"
    );

    let fork = ccare(&home, &["sessions", "fork", &id, "--at", "3"]);
    assert_eq!(fork.status.code(), Some(2));
    assert!(
        String::from_utf8_lossy(&fork.stderr).contains("FORK_INSIDE_TURN")
            || String::from_utf8_lossy(&fork.stderr).contains("inside turn")
    );
    let fork = ccare(&home, &["sessions", "fork", &id, "--at", "13", "--json"]);
    assert!(
        fork.status.success(),
        "{}",
        String::from_utf8_lossy(&fork.stderr)
    );
    let forked: serde_json::Value = serde_json::from_str(&stdout(&fork)).unwrap();
    assert_eq!(forked["seed_length"], 14, "turn 1 ends at seq 13");
    assert_eq!(forked["events"], 15);
    let note = home.join("demo-workspace/notes/context.md");
    assert!(
        std::fs::read_to_string(note)
            .unwrap()
            .starts_with("# Context care")
    );
}

#[test]
fn bad_input_exits_2_with_a_clear_message() {
    let dir = tempfile::tempdir().unwrap();
    let home = dir.path().join("home");
    let unknown = ccare(&home, &["sessions", "show", "nope"]);
    assert_eq!(unknown.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&unknown.stderr).contains("unknown session nope"));

    let truncated = dir.path().join("t.jsonl");
    std::fs::write(&truncated, "{\"format\":\"context-care.session\",\"version\":1,\"id\":\"a\",\"created_ms\":0,\"meta\":{}}\n{\"seq\":0").unwrap();
    let import = ccare(&home, &["sessions", "import", truncated.to_str().unwrap()]);
    assert_eq!(import.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&import.stderr).contains("line 2: truncated"));
    let list = ccare(&home, &["sessions", "list", "--json"]);
    assert_eq!(stdout(&list).trim(), "[]");

    let usage = ccare(&home, &["sessions", "frobnicate"]);
    assert_eq!(usage.status.code(), Some(2));
}

#[test]
fn corrupted_row_is_reported_with_session_and_seq_and_exits_2() {
    let dir = tempfile::tempdir().unwrap();
    let home = dir.path().join("home");
    assert!(ccare(&home, &["demo"]).status.success());
    let list = ccare(&home, &["sessions", "list", "--json"]);
    let sessions: serde_json::Value = serde_json::from_str(&stdout(&list)).unwrap();
    let id = sessions[0]["id"].as_str().unwrap().to_owned();
    {
        let db = rusqlite::Connection::open(home.join("ccare.db")).unwrap();
        db.execute(
            "UPDATE events SET body = '{\"seq\":4,\"time_ms\":' WHERE session_id = ?1 AND seq = 4",
            [&id],
        )
        .unwrap();
    }
    let show = ccare(&home, &["sessions", "show", &id]);
    assert_eq!(show.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&show.stderr).into_owned();
    assert!(
        stderr.contains(&format!("session {id}: event 4")),
        "{stderr}"
    );
    // Nothing stored changed: the other rows are still readable by export's raw path.
    let db = rusqlite::Connection::open(home.join("ccare.db")).unwrap();
    let count: i64 = db
        .query_row(
            "SELECT COUNT(*) FROM events WHERE session_id = ?1",
            [&id],
            |row| row.get(0),
        )
        .unwrap();
    assert_eq!(count, 68);
}

// Issue 18 item 15: a closed stdout ends a command quietly (ripgrep's behaviour).

/// Runs `ccare ARGS` in `dir` (`--home home` unless ARGS name one) with stdout a pipe
/// whose read end is already closed, so the first write fails with `EPIPE`, and
/// `stdin` on stdin.
fn with_closed_stdout(dir: &std::path::Path, args: &[&str], stdin: &str) -> Output {
    use std::io::Write as _;
    let (reader, writer) = std::io::pipe().unwrap();
    drop(reader);
    let home: &[&str] = if args.contains(&"--home") {
        &[]
    } else {
        &["--home", "home"]
    };
    let mut child = crate::chat::ccare_command(dir)
        .args(home)
        .args(args)
        .stdin(std::process::Stdio::piped())
        .stdout(writer)
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    // The child may exit before it reads stdin: a failed write here is fine.
    let _ = child.stdin.take().unwrap().write_all(stdin.as_bytes());
    child.wait_with_output().unwrap()
}

fn in_dir(dir: &std::path::Path, args: &[&str]) -> Output {
    crate::chat::ccare_command(dir)
        .args(["--home", "home"])
        .args(args)
        .output()
        .unwrap()
}

#[test]
fn no_command_panics_on_a_closed_stdout_and_each_exits_0_quietly() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path();
    let demo = in_dir(path, &["demo"]);
    assert_eq!(demo.status.code(), Some(0));
    let shown = stdout(&demo);
    let op = shown
        .split("; operation ")
        .nth(1)
        .and_then(|rest| rest.split(')').next())
        .unwrap()
        .to_owned();
    let list: serde_json::Value =
        serde_json::from_slice(&in_dir(path, &["sessions", "list", "--json"]).stdout).unwrap();
    let id = list[0]["id"].as_str().unwrap().to_owned();
    assert!(
        in_dir(path, &["sessions", "export", &id, "-o", "s.jsonl"])
            .status
            .success()
    );
    std::fs::write(path.join("echo.jsonl"), "{\"echo\": true}\n".repeat(4)).unwrap();
    std::fs::write(
        path.join("stream.jsonl"),
        "{\"kind\": \"text\", \"text\": \"same line\\n\"}\n".repeat(80),
    )
    .unwrap();
    let cases: Vec<Vec<&str>> = vec![
        vec!["--help"],
        vec!["--version"],
        vec!["sessions", "--help"],
        vec!["demo"],
        vec!["sessions", "list"],
        vec!["sessions", "list", "--json"],
        vec!["sessions", "show", &id],
        vec!["sessions", "show", &id, "--json"],
        vec!["sessions", "export", &id],
        vec!["sessions", "check", &id],
        vec!["sessions", "check", &id, "--json"],
        vec!["sessions", "fork", &id],
        vec!["--home", "other", "sessions", "import", "s.jsonl"],
        vec!["context", "actions", "--session", &id],
        vec!["context", "actions", "--session", &id, "--json"],
        vec!["context", "diff", "--session", &id, "--op", &op],
        vec!["models"],
        vec!["models", "--json"],
        vec![
            "time-context",
            "preview",
            "--zone",
            "Africa/Casablanca",
            "--now-ms",
            "1790812800000",
            "--turn",
            "1",
            "--step",
            "1",
        ],
        vec!["watch", "replay", "stream.jsonl"],
        vec!["watch", "replay", "stream.jsonl", "--json"],
        vec![
            "run",
            "--prompt",
            "hello",
            "--provider",
            "script:echo.jsonl",
        ],
        vec![
            "run",
            "--prompt",
            "hello",
            "--provider",
            "script:echo.jsonl",
            "--json",
        ],
    ];
    for args in &cases {
        let output = with_closed_stdout(path, args, "");
        let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
        assert!(!stderr.contains("panicked"), "ccare {args:?}: {stderr}");
        assert!(!stderr.contains("Broken pipe"), "ccare {args:?}: {stderr}");
        assert_eq!(output.status.code(), Some(0), "ccare {args:?}: {stderr}");
    }
    let chat = with_closed_stdout(
        path,
        &["chat", "--provider", "script:echo.jsonl"],
        "hello\n/status\n/sessions\n",
    );
    let stderr = String::from_utf8_lossy(&chat.stderr).into_owned();
    assert!(!stderr.contains("panicked"), "ccare chat: {stderr}");
    assert!(!stderr.contains("Broken pipe"), "ccare chat: {stderr}");
    assert_eq!(chat.status.code(), Some(0), "ccare chat: {stderr}");
}

#[test]
fn run_stops_quietly_when_the_reader_goes_away_mid_answer() {
    use std::io::BufRead as _;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path();
    // An answer far larger than a pipe's buffer, so `ccare` is still writing when the
    // reader leaves after the first line (`ccare run … | head -1`).
    let answer: String = (0..6000)
        .map(|n| format!("line {n} of a long answer\n"))
        .collect();
    std::fs::write(
        path.join("long.jsonl"),
        format!("{}\n", serde_json::json!({ "text": answer })),
    )
    .unwrap();
    // A bare agent: the answer repeats itself, which stream watch would stop.
    std::fs::write(
        path.join("ccare.toml"),
        "[plugins.context-care]\nenabled = false\n[plugins.stream-watch]\nenabled = false\n",
    )
    .unwrap();
    let mut child = crate::chat::ccare_command(path)
        .args([
            "--home",
            "home",
            "run",
            "--prompt",
            "write a lot",
            "--provider",
            "script:long.jsonl",
        ])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut reader = std::io::BufReader::new(child.stdout.take().unwrap());
    let mut first = String::new();
    reader.read_line(&mut first).unwrap();
    assert_eq!(first, "line 0 of a long answer\n");
    drop(reader);
    let output = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
    assert!(!stderr.contains("panicked"), "{stderr}");
    assert!(!stderr.contains("Broken pipe"), "{stderr}");
    assert_eq!(output.status.code(), Some(0), "{stderr}");
    // The turn was stopped, not left open: the log ends with its `turn/end` (the
    // reader is gone, so the answer is cut where it was) and the audit finds nothing.
    let list: serde_json::Value =
        serde_json::from_slice(&in_dir(path, &["sessions", "list", "--json"]).stdout).unwrap();
    let id = list[0]["id"].as_str().unwrap();
    let export = stdout(&in_dir(path, &["sessions", "export", id]));
    let last: serde_json::Value = serde_json::from_str(export.lines().last().unwrap()).unwrap();
    assert_eq!(last["type"], "turn/end", "{export}");
    let check = in_dir(path, &["sessions", "check", id]);
    assert_eq!(check.status.code(), Some(0), "{}", stdout(&check));
    assert!(
        stdout(&check).ends_with("no violations\n"),
        "{}",
        stdout(&check)
    );
}

// Issue 18 item 16: every help text tells the truth and the README lists exactly the
// commands and options `--help` shows.

/// `ccare ARGS --help`.
fn help(path: &[&str]) -> String {
    let output = Command::new(env!("CARGO_BIN_EXE_ccare"))
        .args(path)
        .arg("--help")
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(0), "ccare {path:?} --help");
    stdout(&output)
}

/// The lines of a help section (`Commands:`, `Options:`).
fn section<'a>(help: &'a str, title: &str) -> Vec<&'a str> {
    help.lines()
        .skip_while(|line| *line != title)
        .skip(1)
        .take_while(|line| !line.is_empty())
        .collect()
}

/// The subcommands a help text lists (`help` aside).
fn subcommands(help: &str) -> Vec<String> {
    section(help, "Commands:")
        .iter()
        .filter(|line| line.starts_with("  ") && !line.starts_with("   "))
        .filter_map(|line| line.split_whitespace().next())
        .filter(|name| *name != "help")
        .map(str::to_owned)
        .collect()
}

/// The options a help text lists, each as its names (`-o`, `--output`), without the
/// global ones and `--help`/`--version`.
fn options(help: &str) -> Vec<Vec<String>> {
    section(help, "Options:")
        .iter()
        .map(|line| line.trim_start())
        .filter(|line| line.starts_with('-'))
        .map(|line| {
            line.split_whitespace()
                .map(|word| word.trim_end_matches(','))
                .take_while(|word| word.starts_with('-'))
                .map(str::to_owned)
                .collect::<Vec<String>>()
        })
        .filter(|names| {
            !names
                .iter()
                .any(|name| ["--help", "--version", "--home", "--config"].contains(&name.as_str()))
        })
        .collect()
}

/// Every leaf command with its help text, walking `--help` from the top.
fn leaf_commands() -> Vec<(String, String)> {
    let mut leaves = Vec::new();
    let mut pending: Vec<Vec<String>> = vec![Vec::new()];
    while let Some(path) = pending.pop() {
        let refs: Vec<&str> = path.iter().map(String::as_str).collect();
        let text = help(&refs);
        let children = subcommands(&text);
        if children.is_empty() {
            leaves.push((path.join(" "), text));
        } else {
            for child in children {
                let mut next = path.clone();
                next.push(child);
                pending.push(next);
            }
        }
    }
    leaves.sort();
    leaves
}

/// The README's "What works today" entries: `ccare PATH…` → the options its synopsis
/// names.
fn readme_commands() -> Vec<(String, Vec<String>)> {
    let readme =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../../README.md")).unwrap();
    let start = readme.find("## What works today").unwrap();
    let rest = &readme[start + 3..];
    let list = &rest[..rest.find("\n## ").unwrap_or(rest.len())];
    let mut commands: Vec<(String, Vec<String>)> = list
        .split("\n- `ccare ")
        .skip(1)
        .map(|entry| {
            let synopsis = entry.split('`').next().unwrap();
            let words: Vec<&str> = synopsis
                .split(|c: char| c.is_whitespace() || "[]|".contains(c))
                .filter(|word| !word.is_empty())
                .collect();
            let path: Vec<&str> = words
                .iter()
                .take_while(|word| word.chars().all(|c| c.is_ascii_lowercase() || c == '-'))
                .take_while(|word| !word.starts_with('-'))
                .copied()
                .collect();
            let flags: Vec<String> = words
                .iter()
                .filter(|word| word.starts_with('-') && word.len() > 1)
                .map(|word| (*word).to_owned())
                .collect();
            (path.join(" "), flags)
        })
        .collect();
    commands.sort();
    commands
}

#[test]
fn help_texts_match_the_readme_command_list() {
    let leaves = leaf_commands();
    let readme = readme_commands();
    let help_names: Vec<&str> = leaves.iter().map(|(name, _)| name.as_str()).collect();
    let readme_names: Vec<&str> = readme.iter().map(|(name, _)| name.as_str()).collect();
    assert_eq!(
        readme_names, help_names,
        "the README's command list and `--help` disagree"
    );
    for ((name, text), (_, documented)) in leaves.iter().zip(&readme) {
        for names in options(text) {
            assert!(
                names.iter().any(|option| documented.contains(option)),
                "ccare {name}: {names:?} is in --help but not in the README"
            );
        }
        let offered: Vec<String> = options(text).into_iter().flatten().collect();
        for flag in documented {
            assert!(
                offered.contains(flag),
                "ccare {name}: the README names {flag}, --help does not:\n{text}"
            );
        }
    }
    // Nothing in any help text promises what does not exist or is stale.
    let top = help(&[]);
    let mut texts = vec![top.clone()];
    texts.extend(leaves.iter().map(|(_, text)| text.clone()));
    for path in [["sessions"], ["context"], ["watch"], ["time-context"]] {
        texts.push(help(&path));
    }
    for text in &texts {
        for stale in ["(later)", "placeholder", "until the agent loop"] {
            assert!(!text.contains(stale), "stale help ({stale}):\n{text}");
        }
    }
    assert!(
        top.starts_with("context-care: a runtime for LLM agents"),
        "{top}"
    );
}
