//! `ccare context undo --session S --op OP` (CC-EXT-3): undoes a deep rest under the
//! session's lease; exit 0 with what it restored, exit 2 with the code and reason when
//! refused (done twice, unknown action, another live driver holds the lease). Read
//! back with `ccare sessions export` and `ccare sessions check`.

#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use std::path::Path;
use std::time::{SystemTime, UNIX_EPOCH};

use ccare_core::SessionId;
use ccare_store::{LeaseClaim, LeaseHolder, Store};

use crate::lease::{open, run};
use crate::run::text;

/// A session whose history a deep rest replaced; its id and the rest's operation id.
fn deep_rested(dir: &Path) -> (String, String) {
    let note = "n".repeat(1200);
    let recovery = format!("search the log for lorem. {}", "r".repeat(1000));
    let rest = serde_json::json!({"tool_calls": [{"name": "context_rest", "arguments": {"note": note, "deep": true, "recovery": recovery}}]});
    std::fs::write(dir.join("s.jsonl"), "{\"text\": \"read\"}\n").unwrap();
    std::fs::write(
        dir.join("ccare.toml"),
        "[store]\npath = \"state.db\"\n[agent]\nmodel = \"s/small\"\n[providers.s]\nkind = \"script\"\nscript = \"s.jsonl\"\n[models.\"s/small\"]\ncontext_window = 64000\nmax_output_tokens = 1000\n[plugins.context-care]\n",
    )
    .unwrap();
    let prompt = "lorem ipsum dolor sit amet ".repeat(400);
    let first = run(dir, &["run", "--prompt", &prompt]);
    assert_eq!(first.status.code(), Some(0), "{}", text(&first.stderr));
    let id = text(&first.stderr)
        .split_whitespace()
        .find(|word| word.len() > 20)
        .unwrap()
        .to_owned();
    std::fs::write(
        dir.join("s.jsonl"),
        format!("{rest}\n{{\"text\": \"rested\"}}\n"),
    )
    .unwrap();
    let second = run(dir, &["run", "--session", &id, "--prompt", "rest now"]);
    assert_eq!(second.status.code(), Some(0), "{}", text(&second.stderr));
    let actions = run(dir, &["context", "actions", "--session", &id, "--json"]);
    let record: serde_json::Value =
        serde_json::from_str(text(&actions.stdout).lines().next().unwrap()).unwrap();
    assert_eq!(record["data"]["action"], "deep-rest");
    (
        id,
        record["data"]["operationId"].as_str().unwrap().to_owned(),
    )
}

fn export(dir: &Path, id: &str) -> String {
    let output = run(dir, &["sessions", "export", id]);
    assert_eq!(output.status.code(), Some(0), "{}", text(&output.stderr));
    text(&output.stdout)
}

#[test]
fn cc_ext_3_context_undo_restores_once_and_refuses_with_exit_2() {
    let dir = tempfile::tempdir().unwrap();
    let (id, op) = deep_rested(dir.path());
    let before = export(dir.path(), &id);
    let undo = |op: &str| {
        run(
            dir.path(),
            &["context", "undo", "--session", &id, "--op", op],
        )
    };

    let done = undo(&op);
    assert_eq!(done.status.code(), Some(0), "{}", text(&done.stderr));
    let line = text(&done.stdout);
    assert!(line.starts_with(&format!("undid {op}: ")), "{line}");
    assert!(line.contains(" event(s) live again, input "), "{line}");
    assert!(line.contains("(soft threshold "), "{line}");
    let after = export(dir.path(), &id);
    assert!(after.starts_with(before.trim_end()), "nothing deleted");
    let added: Vec<serde_json::Value> = after[before.len()..]
        .lines()
        .map(|line| serde_json::from_str(line).unwrap())
        .collect();
    assert_eq!(added.len(), 1, "one restore: {added:?}");
    assert_eq!(added[0]["type"], "compaction/undo");
    assert_eq!(added[0]["surface"]["op"], "restore");
    assert_eq!(added[0]["data"]["operation_id"], op.as_str());
    let check = run(dir.path(), &["sessions", "check", &id]);
    assert_eq!(
        check.status.code(),
        Some(0),
        "{}{}",
        text(&check.stdout),
        text(&check.stderr)
    );
    let actions = text(&run(dir.path(), &["context", "actions", "--session", &id]).stdout);
    assert!(
        actions.contains(" undo requested committed  input "),
        "{actions}"
    );

    let again = undo(&op);
    assert_eq!(again.status.code(), Some(2));
    let seq = added[0]["seq"].as_u64().unwrap();
    assert!(
        text(&again.stderr).contains(&format!(
            "ALREADY_UNDONE: action {op} was already undone (seq {seq})"
        )),
        "{}",
        text(&again.stderr)
    );
    let unknown = undo("nope");
    assert_eq!(unknown.status.code(), Some(2));
    assert!(
        text(&unknown.stderr).contains(&format!(
            "UNKNOWN_ACTION: no maintenance action \"nope\" in session {id}"
        )),
        "{}",
        text(&unknown.stderr)
    );
    assert_eq!(export(dir.path(), &id), after, "refusals append nothing");
}

fn now_ms() -> i64 {
    i64::try_from(
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap()
            .as_millis(),
    )
    .unwrap()
}

#[tokio::test(flavor = "multi_thread")]
async fn cc_ext_3_context_undo_of_a_session_another_driver_holds_is_session_busy() {
    let dir = tempfile::tempdir().unwrap();
    let (id, op) = deep_rested(dir.path());
    let store = open(dir.path()).await;
    let session = SessionId::new(id.clone()).unwrap();
    let current = store.lease(&session).await.unwrap();
    store
        .lease_acquire(LeaseClaim {
            session,
            holder: LeaseHolder {
                owner: "serve-elsewhere".into(),
                host: "elsewhere.example".into(),
                pid: 1,
                process_start: None,
            },
            now_ms: now_ms(),
            expires_ms: now_ms() + 600_000,
            replacing: current.map(|lease| lease.holder.owner),
        })
        .await
        .unwrap();
    store.close().unwrap();
    let before = export(dir.path(), &id);
    let busy = run(
        dir.path(),
        &["context", "undo", "--session", &id, "--op", &op],
    );
    assert_eq!(busy.status.code(), Some(2));
    assert!(
        text(&busy.stderr).contains(&format!("SESSION_BUSY: session {id} is driven by ")),
        "{}",
        text(&busy.stderr)
    );
    assert_eq!(export(dir.path(), &id), before);
}
