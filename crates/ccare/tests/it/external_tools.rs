//! `ccare run --external-tools` and `--tool-results` (spec ACT-3, issue 13 item 5): a
//! turn that calls the caller's tools exits 0 with an `awaiting-tools` line (`--json`)
//! and the open call ids on stderr; a later process answers them and the turn
//! finishes; a result set that does not match is refused (exit 1) and nothing is logged.

use std::path::Path;
use std::process::{Command, Output};

use serde_json::{Value, json};

fn ccare(dir: &Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_ccare"))
        .current_dir(dir)
        .env_remove("DEEPSEEK_API_KEY")
        .env_remove("OPENAI_API_KEY")
        .env_remove("CCARE_CONFIG")
        .env_remove("CCARE_HOME")
        .args(args)
        .output()
        .unwrap()
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8(bytes.to_vec()).unwrap()
}

fn lines(output: &Output) -> Vec<Value> {
    text(&output.stdout)
        .lines()
        .map(|line| serde_json::from_str(line).unwrap())
        .collect()
}

fn types(lines: &[Value]) -> Vec<&str> {
    lines
        .iter()
        .map(|line| line["type"].as_str().unwrap())
        .collect()
}

#[test]
fn act_3_run_awaits_caller_tools_then_takes_their_results_in_a_new_process() {
    let dir = tempfile::tempdir().unwrap();
    let home = dir.path().join("home");
    let home = home.to_str().unwrap();
    std::fs::write(
        dir.path().join("s.jsonl"),
        "{\"tool_calls\": [{\"name\": \"lookup\", \"arguments\": {\"q\": \"a\"}, \"id\": \"c1\"}, {\"name\": \"lookup\", \"arguments\": {\"q\": \"b\"}, \"id\": \"c2\"}]}\n",
    )
    .unwrap();
    std::fs::write(dir.path().join("t.jsonl"), "{\"text\": \"Both found.\"}\n").unwrap();
    std::fs::write(
        dir.path().join("tools.json"),
        json!([{"name": "lookup", "description": "looks a word up", "input_schema": {"type": "object"}}])
            .to_string(),
    )
    .unwrap();
    let first = ccare(
        dir.path(),
        &[
            "--home",
            home,
            "run",
            "--prompt",
            "look up a and b",
            "--provider",
            "script:s.jsonl",
            "--external-tools",
            "tools.json",
            "--json",
        ],
    );
    assert_eq!(first.status.code(), Some(0), "{}", text(&first.stderr));
    let stderr = text(&first.stderr);
    let id = stderr
        .lines()
        .next()
        .unwrap()
        .strip_prefix("session: ")
        .unwrap()
        .to_owned();
    assert_eq!(
        stderr.lines().nth(1).unwrap(),
        format!("awaiting tools: c1, c2 (answer with --tool-results FILE.json --session {id})")
    );
    let printed = lines(&first);
    assert_eq!(
        types(&printed),
        [
            "turn/start",
            "user/message",
            "step/start",
            "request/header",
            "request/context",
            "assistant/message",
            "tool/call",
            "tool/call",
            "awaiting-tools",
        ]
    );
    assert_eq!(printed[6]["data"]["executor"], "caller");
    assert_eq!(printed[7]["data"]["call_id"], "c2");
    assert_eq!(
        printed[8],
        json!({"type": "awaiting-tools", "session": id, "call_ids": ["c1", "c2"]})
    );

    // Wrong ids: refused, exit 1, nothing logged.
    std::fs::write(
        dir.path().join("bad.json"),
        json!([{"call_id": "c1", "content": "A"}, {"call_id": "c9", "content": "B"}]).to_string(),
    )
    .unwrap();
    let bad = ccare(
        dir.path(),
        &[
            "--home",
            home,
            "run",
            "--tool-results",
            "bad.json",
            "--session",
            &id,
            "--provider",
            "script:t.jsonl",
            "--json",
        ],
    );
    assert_eq!(bad.status.code(), Some(1));
    assert!(text(&bad.stdout).is_empty());
    assert!(
        text(&bad.stderr).contains(
            "TOOL_RESULTS_MISMATCH: the session awaits results for [\"c1\", \"c2\"], the results answer [\"c1\", \"c9\"]"
        ),
        "{}",
        text(&bad.stderr)
    );

    std::fs::write(
        dir.path().join("good.json"),
        json!([{"call_id": "c2", "content": "B-result"}, {"call_id": "c1", "content": "A-result"}])
            .to_string(),
    )
    .unwrap();
    let good = ccare(
        dir.path(),
        &[
            "--home",
            home,
            "run",
            "--tool-results",
            "good.json",
            "--session",
            &id,
            "--provider",
            "script:t.jsonl",
            "--json",
        ],
    );
    assert_eq!(good.status.code(), Some(0), "{}", text(&good.stderr));
    assert!(text(&good.stderr).is_empty(), "{}", text(&good.stderr));
    let printed = lines(&good);
    // The first printed event is the first result: the refused run logged nothing.
    assert_eq!(
        types(&printed),
        [
            "tool/result",
            "tool/result",
            "step/end",
            "step/start",
            "request/header",
            "assistant/message",
            "step/end",
            "turn/end",
        ]
    );
    assert_eq!(printed[0]["data"]["message"]["content"][0]["call_id"], "c1");
    assert_eq!(
        printed[0]["data"]["message"]["content"][0]["content"][0]["text"],
        "A-result"
    );
    assert_eq!(printed[1]["data"]["message"]["content"][0]["call_id"], "c2");
    assert_eq!(printed[7]["data"]["reason"], json!({"kind": "completed"}));

    // Nothing awaits any more.
    let late = ccare(
        dir.path(),
        &[
            "--home",
            home,
            "run",
            "--tool-results",
            "good.json",
            "--session",
            &id,
            "--provider",
            "script:t.jsonl",
        ],
    );
    assert_eq!(late.status.code(), Some(1));
    assert!(text(&late.stderr).contains("TOOL_RESULTS_MISMATCH"));
}
