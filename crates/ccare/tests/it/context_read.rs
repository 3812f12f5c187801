//! `ccare context status|actions|diff` and `ccare sessions list|show|export` read a
//! session without its lease (issue 15 item 7): while another process drives it (a
//! `ccare run` mid-turn, a `ccare serve` holding it) they succeed, run no crash repair
//! and append nothing. Read back with `ccare sessions export` and the store's own API.

#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use std::path::Path;
use std::process::Stdio;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use ccare_core::SessionId;
use ccare_store::{LeaseClaim, LeaseHolder, Store};

use crate::lease::{command, lease_of, new_session, open, run, types};
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

/// Every read-only command, and the line its output must contain.
fn reads(session: &str) -> Vec<(Vec<String>, i32, String)> {
    let args = |list: &[&str]| list.iter().map(|arg| (*arg).to_owned()).collect::<Vec<_>>();
    vec![
        (
            args(&["context", "status", "--session", session]),
            0,
            format!("session      {session}"),
        ),
        (
            args(&["context", "status", "--session", session, "--json"]),
            0,
            "\"metrics\":{\"fatigue\":".to_owned(),
        ),
        (
            args(&["context", "actions", "--session", session]),
            0,
            "no maintenance actions".to_owned(),
        ),
        (
            args(&["context", "diff", "--session", session, "--op", "op-1"]),
            2,
            format!("no maintenance action \"op-1\" in session {session}"),
        ),
        (args(&["sessions", "list"]), 0, session.to_owned()),
        (
            args(&["sessions", "show", session]),
            0,
            format!("session {session}"),
        ),
        (
            args(&["sessions", "show", session, "--json"]),
            0,
            format!("\"id\": \"{session}\""),
        ),
        (
            args(&["sessions", "export", session]),
            0,
            "\"type\":\"turn/start\"".to_owned(),
        ),
    ]
}

/// Runs every read-only command and checks its exit code and output.
fn read_all(dir: &Path, session: &str) {
    for (args, code, expected) in reads(session) {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let output = run(dir, &args);
        let (stdout, stderr) = (text(&output.stdout), text(&output.stderr));
        assert_eq!(output.status.code(), Some(code), "{args:?}: {stderr}");
        assert!(!stderr.contains("SESSION_BUSY"), "{args:?}: {stderr}");
        let shown = if code == 0 { &stdout } else { &stderr };
        assert!(shown.contains(&expected), "{args:?}: {expected}\n{shown}");
    }
}

/// Item 7: while `ccare run` is mid-turn on a session (its lease held, its turn open
/// in the store), every read-only command succeeds; the running turn completes
/// undisturbed, and only the holder appended meanwhile.
#[tokio::test(flavor = "multi_thread")]
async fn item_7_read_commands_work_while_a_run_drives_the_session() {
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

    read_all(dir.path(), &session);

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

fn now_ms() -> i64 {
    i64::try_from(
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap()
            .as_millis(),
    )
    .unwrap()
}

/// Item 7: a session whose turn was left open (its driver killed mid-answer) and
/// whose lease another live process holds (a server elsewhere): every read-only
/// command succeeds, and none runs crash repair or appends: the export is
/// byte-identical before and after, the turn is still open, the lease untouched.
#[tokio::test(flavor = "multi_thread")]
async fn item_7_reads_of_a_held_session_with_an_open_turn_append_nothing() {
    let dir = setup();
    let session = new_session(dir.path());
    let mut killed = command(
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
    // Mid-answer: the first word is on screen, so the prompt is in the log.
    let mut word = [0_u8; 3];
    std::io::Read::read_exact(killed.stdout.as_mut().unwrap(), &mut word).unwrap();
    assert_eq!(&word, b"one");
    killed.kill().unwrap(); // SIGKILL: the turn stays open in the store
    killed.wait().unwrap();
    // Another live holder (not judged by pid: another host) takes the lease.
    let store = open(dir.path()).await;
    let id = SessionId::new(session.clone()).unwrap();
    let current = store.lease(&id).await.unwrap();
    let holder = LeaseHolder {
        owner: "serve-elsewhere".into(),
        host: "elsewhere.example".into(),
        pid: 1,
        process_start: None,
    };
    store
        .lease_acquire(LeaseClaim {
            session: id.clone(),
            holder: holder.clone(),
            now_ms: now_ms(),
            expires_ms: now_ms() + 600_000,
            replacing: current.map(|lease| lease.holder.owner),
        })
        .await
        .unwrap();
    store.close().unwrap();
    let types_before = types(dir.path(), &session).await;
    let count = |types: &[String], kind: &str| types.iter().filter(|t| *t == kind).count();
    assert_eq!(
        (
            count(&types_before, "turn/start"),
            count(&types_before, "turn/end")
        ),
        (2, 1),
        "the killed turn is open: {types_before:?}"
    );
    let before = export(dir.path(), &session);

    read_all(dir.path(), &session);

    assert_eq!(export(dir.path(), &session), before);
    assert_eq!(types(dir.path(), &session).await, types_before);
    assert_eq!(
        lease_of(dir.path(), &session)
            .await
            .map(|lease| lease.holder),
        Some(holder)
    );
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
