//! `ccare context status|actions|diff` never write to a session another process
//! drives (spec server.md ACT-1): they take the session's lease to read it, so while a
//! `ccare run` is mid-turn they fail fast with `SESSION_BUSY` (exit 2, the holder
//! named) instead of opening it, whose crash repair would append to the live turn.
//! Read back with `ccare sessions export` and the store's own API.

#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use std::path::Path;
use std::process::Stdio;
use std::time::{Duration, Instant};

use crate::lease::{command, lease_of, new_session, run, types};
use crate::run::text;

/// A slow answer: eight words, 500 ms before each (about four seconds in all).
const SLOW: &str = r#"{"text": "one two three four five six seven eight", "delay_ms": 500}"#;

fn setup() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("ccare.toml"),
        "[host]\nlease_ms = 60000\n[store]\npath = \"state.db\"\n[agent]\nmodel = \"s/m\"\nbase_prompt = false\n\
         [providers.s]\nkind = \"script\"\n\
         [plugins.stream-watch]\nenabled = false\n",
    )
    .unwrap();
    std::fs::write(dir.path().join("slow.jsonl"), format!("{SLOW}\n")).unwrap();
    std::fs::write(
        dir.path().join("fast.jsonl"),
        "{\"text\": \"fast answer\"}\n",
    )
    .unwrap();
    dir
}

fn export(dir: &Path, session: &str) -> String {
    let output = run(dir, &["sessions", "export", session]);
    assert_eq!(output.status.code(), Some(0), "{}", text(&output.stderr));
    text(&output.stdout)
}

/// ACT-1: while `ccare run` is mid-turn on a session, `context status`, `context
/// actions` and `context diff` on it fail with `SESSION_BUSY` (exit 2) naming the
/// holder and append nothing: the export taken after them equals the one before, and
/// the running turn completes undisturbed.
#[tokio::test(flavor = "multi_thread")]
async fn act_1_context_commands_never_append_to_a_session_driven_elsewhere() {
    let dir = setup();
    let session = new_session(dir.path());
    let holder = command(
        dir.path(),
        &[
            "run",
            "--session",
            &session,
            "--prompt",
            "slow",
            "--provider",
            "script:slow.jsonl",
        ],
    )
    .stdout(Stdio::piped())
    .stderr(Stdio::piped())
    .spawn()
    .unwrap();
    // Mid-turn: the holder's lease is taken and its turn started in the store.
    let deadline = Instant::now() + Duration::from_secs(20);
    let lease = loop {
        let started = types(dir.path(), &session)
            .await
            .iter()
            .filter(|kind| *kind == "turn/start")
            .count();
        if let Some(lease) = lease_of(dir.path(), &session).await
            && lease.holder.pid == holder.id()
            && started == 2
        {
            break lease;
        }
        assert!(
            Instant::now() < deadline,
            "the holder never started its turn"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    let before = export(dir.path(), &session);

    let busy = format!(
        "error: SESSION_BUSY: session {session} is driven by pid {} on host {} (lease expires ",
        holder.id(),
        lease.holder.host
    );
    for args in [
        vec!["context", "status", "--session", &session],
        vec!["context", "status", "--session", &session, "--json"],
        vec!["context", "actions", "--session", &session],
        vec!["context", "diff", "--session", &session, "--op", "op-1"],
    ] {
        let output = run(dir.path(), &args);
        assert_eq!(
            output.status.code(),
            Some(2),
            "{args:?}: {}",
            text(&output.stderr)
        );
        let stderr = text(&output.stderr);
        assert!(stderr.starts_with(&busy), "{args:?}: {stderr}");
        assert!(
            stderr.trim_end().ends_with("s); try again when it is idle"),
            "{args:?}: {stderr}"
        );
        assert_eq!(stderr.lines().count(), 1, "{args:?}: {stderr}");
        assert_eq!(text(&output.stdout), "", "{args:?}");
    }
    let after = export(dir.path(), &session);
    // The holder may have appended meanwhile; nothing else did.
    assert!(after.starts_with(&before), "{before}\n---\n{after}");
    assert_eq!(
        lease_of(dir.path(), &session).await.unwrap().holder.owner,
        lease.holder.owner
    );

    let finished = holder.wait_with_output().unwrap();
    assert_eq!(
        finished.status.code(),
        Some(0),
        "{}",
        text(&finished.stderr)
    );
    assert_eq!(
        text(&finished.stdout),
        "one two three four five six seven eight\n"
    );
    let types = types(dir.path(), &session).await;
    let count = |kind: &str| types.iter().filter(|t| *t == kind).count();
    assert_eq!(
        (count("turn/start"), count("turn/end")),
        (2, 2),
        "{types:?}"
    );
    assert!(!export(dir.path(), &session).contains("interrupted"));
}

/// On a session nobody drives, `context status` reads as before and leaves no lease
/// behind, so the next `ccare run` on it proceeds.
#[tokio::test(flavor = "multi_thread")]
async fn context_status_on_an_idle_session_reads_it_and_releases_the_lease() {
    let dir = setup();
    let session = new_session(dir.path());
    let before = export(dir.path(), &session);
    let output = run(dir.path(), &["context", "status", "--session", &session]);
    assert_eq!(output.status.code(), Some(0), "{}", text(&output.stderr));
    assert!(
        text(&output.stdout)
            .trim_end()
            .ends_with("(sampled now; nothing was appended to the session)"),
        "{}",
        text(&output.stdout)
    );
    assert_eq!(export(dir.path(), &session), before);
    assert_eq!(lease_of(dir.path(), &session).await, None);
    let next = run(
        dir.path(),
        &[
            "run",
            "--session",
            &session,
            "--prompt",
            "again",
            "--provider",
            "script:fast.jsonl",
        ],
    );
    assert_eq!(next.status.code(), Some(0), "{}", text(&next.stderr));
}
