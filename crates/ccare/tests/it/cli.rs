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
