//! One driver per session across processes (spec server.md ACT-1), as a user meets it:
//! two real `ccare run` processes on one session, the second failing with
//! `SESSION_BUSY` (exit 2) naming the holder or, with `--wait`, running once the first
//! ends; a `kill -9`ed holder on this machine taken over at once; a lease of another
//! machine waited out until it expires. The store is read back through its own API.

#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use ccare_core::SessionId;
use ccare_store::{Lease, LeaseClaim, LeaseHolder, ReadRange, SqliteConfig, SqliteStore, Store};

use crate::run::text;

/// A slow answer: six words, 500 ms before each (about three seconds in all).
const SLOW: &str = r#"{"text": "one two three four five six", "delay_ms": 500}"#;

fn setup() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("ccare.toml"),
        r#"
[host]
lease_ms = 60000                  # longer than any test: a takeover here is never an expiry

[store]
path = "state.db"

[agent]
base_prompt = false

[plugins.context-care]
enabled = false

[plugins.stream-watch]
enabled = false
"#,
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

pub(crate) fn command(dir: &Path, args: &[&str]) -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_ccare"));
    command
        .current_dir(dir)
        .env_remove("DEEPSEEK_API_KEY")
        .env_remove("OPENAI_API_KEY")
        .env_remove("CCARE_CONFIG")
        .env_remove("CCARE_HOME")
        .args(args);
    command
}

pub(crate) fn run(dir: &Path, args: &[&str]) -> Output {
    command(dir, args).output().unwrap()
}

fn spawn(dir: &Path, args: &[&str]) -> Child {
    command(dir, args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

fn db(dir: &Path) -> PathBuf {
    dir.join("state.db")
}

/// A new session with one completed turn; its id.
pub(crate) fn new_session(dir: &Path) -> String {
    let output = run(
        dir,
        &[
            "run",
            "--prompt",
            "hello",
            "--provider",
            "script:fast.jsonl",
        ],
    );
    assert_eq!(output.status.code(), Some(0), "{}", text(&output.stderr));
    let stderr = text(&output.stderr);
    stderr
        .lines()
        .find_map(|line| line.strip_prefix("session: "))
        .unwrap()
        .to_owned()
}

pub(crate) async fn open(dir: &Path) -> SqliteStore {
    SqliteStore::open(SqliteConfig::new(db(dir))).unwrap()
}

/// Waits until the session's lease is held by `pid`; the lease.
async fn held_by(dir: &Path, session: &str, pid: u32) -> Lease {
    let store = open(dir).await;
    let id = SessionId::new(session).unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        if let Some(lease) = store.lease(&id).await.unwrap()
            && lease.holder.pid == pid
        {
            store.close().unwrap();
            return lease;
        }
        assert!(Instant::now() < deadline, "pid {pid} never took the lease");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

pub(crate) async fn lease_of(dir: &Path, session: &str) -> Option<Lease> {
    let store = open(dir).await;
    let lease = store
        .lease(&SessionId::new(session).unwrap())
        .await
        .unwrap();
    store.close().unwrap();
    lease
}

/// The `type` of every stored event of the session, in seq order.
pub(crate) async fn types(dir: &Path, session: &str) -> Vec<String> {
    let store = open(dir).await;
    let events = store
        .read(&SessionId::new(session).unwrap(), ReadRange::all())
        .await
        .unwrap();
    store.close().unwrap();
    events
        .iter()
        .map(|event| {
            let value: serde_json::Value = serde_json::from_str(&event.json).unwrap();
            value["type"].as_str().unwrap().to_owned()
        })
        .collect()
}

/// The user messages' texts of the session, in order.
async fn prompts(dir: &Path, session: &str) -> Vec<String> {
    let store = open(dir).await;
    let events = store
        .read(&SessionId::new(session).unwrap(), ReadRange::all())
        .await
        .unwrap();
    store.close().unwrap();
    events
        .iter()
        .filter_map(|event| {
            let value: serde_json::Value = serde_json::from_str(&event.json).unwrap();
            (value["type"] == "user/message").then(|| {
                value["data"]["message"]["content"][0]["text"]
                    .as_str()
                    .unwrap()
                    .to_owned()
            })
        })
        .collect()
}

fn wait_output(child: Child) -> Output {
    child.wait_with_output().unwrap()
}

/// The line `SESSION_BUSY` starts with for a holder `pid` on `host`.
fn busy_line(session: &str, pid: u32, host: &str) -> String {
    format!(
        "error: SESSION_BUSY: session {session} is driven by pid {pid} on host {host} (lease expires "
    )
}

/// ACT-1: while one `ccare run` drives a session (a slow answer), a second one on the
/// same session fails fast with `SESSION_BUSY`, exit 2, naming the holder's pid and
/// host and the lease's expiry, and writes nothing; the first finishes undisturbed and
/// releases the lease.
#[tokio::test(flavor = "multi_thread")]
async fn act_1_a_second_process_gets_session_busy_naming_the_holder() {
    let dir = setup();
    let session = new_session(dir.path());
    let before = types(dir.path(), &session).await;
    let first = spawn(
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
    );
    let lease = held_by(dir.path(), &session, first.id()).await;

    let started = Instant::now();
    let second = run(
        dir.path(),
        &[
            "run",
            "--session",
            &session,
            "--prompt",
            "second",
            "--provider",
            "script:fast.jsonl",
        ],
    );
    assert_eq!(second.status.code(), Some(2), "{}", text(&second.stderr));
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "it did not fail fast"
    );
    let stderr = text(&second.stderr);
    let line = busy_line(&session, first.id(), &lease.holder.host);
    assert!(stderr.starts_with(&line), "{stderr}");
    assert!(
        stderr
            .trim_end()
            .ends_with("s); run with --wait to wait for it"),
        "{stderr}"
    );
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert_eq!(text(&second.stdout), "");

    let first = wait_output(first);
    assert_eq!(first.status.code(), Some(0), "{}", text(&first.stderr));
    assert_eq!(text(&first.stdout), "one two three four five six\n");
    // The refused process wrote nothing: the log has the first turn and the slow one.
    assert_eq!(prompts(dir.path(), &session).await, ["hello", "slow"]);
    let after = types(dir.path(), &session).await;
    assert_eq!(after[..before.len()], before[..]);
    let count = |kind: &str| after.iter().filter(|t| *t == kind).count();
    assert_eq!(
        (count("turn/start"), count("turn/end")),
        (2, 2),
        "{after:?}"
    );
    assert_eq!(lease_of(dir.path(), &session).await, None);
}

/// ACT-1: with `--wait` the second process says once on stderr whom it waits for,
/// then runs its turn after the first one ended: both turns are in the log, in order.
#[tokio::test(flavor = "multi_thread")]
async fn act_1_with_wait_the_second_process_runs_once_the_first_ends() {
    let dir = setup();
    let session = new_session(dir.path());
    let first = spawn(
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
    );
    let lease = held_by(dir.path(), &session, first.id()).await;
    let second = spawn(
        dir.path(),
        &[
            "run",
            "--session",
            &session,
            "--prompt",
            "second",
            "--provider",
            "script:fast.jsonl",
            "--wait",
        ],
    );
    let first = wait_output(first);
    assert_eq!(first.status.code(), Some(0), "{}", text(&first.stderr));
    let second = wait_output(second);
    assert_eq!(second.status.code(), Some(0), "{}", text(&second.stderr));
    assert_eq!(text(&second.stdout), "fast answer\n");
    let stderr = text(&second.stderr);
    let waiting = format!(
        "waiting for session {session}: driven by pid {} on host {} (lease expires ",
        lease.holder.pid, lease.holder.host
    );
    let lines: Vec<&str> = stderr.lines().collect();
    assert_eq!(lines.len(), 1, "{stderr}");
    assert!(lines[0].starts_with(&waiting), "{stderr}");
    assert!(lines[0].ends_with("Z)"), "{stderr}");
    assert_eq!(
        prompts(dir.path(), &session).await,
        ["hello", "slow", "second"]
    );
    assert_eq!(lease_of(dir.path(), &session).await, None);
}

/// ACT-1: after `kill -9` of the holder (a process on this machine that no longer
/// exists), a new process takes the session over at once, long before the 60 s lease
/// would expire, repairs the killed turn and runs its own.
#[tokio::test(flavor = "multi_thread")]
async fn act_1_a_killed_holder_on_this_machine_is_taken_over_at_once() {
    let dir = setup();
    let session = new_session(dir.path());
    let mut first = spawn(
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
    );
    let lease = held_by(dir.path(), &session, first.id()).await;
    // Mid-answer: the first word is on screen, so the prompt is in the log.
    let mut word = [0_u8; 3];
    std::io::Read::read_exact(first.stdout.as_mut().unwrap(), &mut word).unwrap();
    assert_eq!(&word, b"one");
    first.kill().unwrap(); // SIGKILL: no release, no flush
    first.wait().unwrap();
    assert_eq!(
        lease_of(dir.path(), &session)
            .await
            .map(|lease| lease.holder.owner),
        Some(lease.holder.owner.clone()),
        "the killed holder's lease is still stored"
    );

    let started = Instant::now();
    let second = run(
        dir.path(),
        &[
            "run",
            "--session",
            &session,
            "--prompt",
            "after",
            "--provider",
            "script:fast.jsonl",
        ],
    );
    assert_eq!(second.status.code(), Some(0), "{}", text(&second.stderr));
    assert!(started.elapsed() < Duration::from_secs(20));
    assert_eq!(text(&second.stdout), "fast answer\n");
    assert_eq!(
        prompts(dir.path(), &session).await,
        ["hello", "slow", "after"]
    );
    let types = types(dir.path(), &session).await;
    let ends = types.iter().filter(|kind| *kind == "turn/end").count();
    assert_eq!(ends, 3, "the killed turn was closed by repair: {types:?}");
    let check = run(dir.path(), &["sessions", "check", &session]);
    assert_eq!(check.status.code(), Some(0), "{}", text(&check.stdout));
    assert_eq!(lease_of(dir.path(), &session).await, None);
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

/// ACT-1: a lease held by a process of another machine is not judged by pid: until it
/// expires a run fails with `SESSION_BUSY` naming that host, and `--wait` waits it out
/// and then takes the session over.
#[tokio::test(flavor = "multi_thread")]
async fn act_1_a_lease_of_another_host_is_taken_over_when_it_expires() {
    let dir = setup();
    let session = new_session(dir.path());
    let store = open(dir.path()).await;
    let expires_ms = now_ms() + 3_000;
    // pid 1 runs here, but the lease is another machine's: only expiry frees it.
    store
        .lease_acquire(LeaseClaim {
            session: SessionId::new(session.clone()).unwrap(),
            holder: LeaseHolder {
                owner: "owner-elsewhere".into(),
                host: "elsewhere.example".into(),
                pid: 1,
                process_start: None,
            },
            now_ms: now_ms(),
            expires_ms,
            replacing: None,
        })
        .await
        .unwrap();
    store.close().unwrap();

    let busy = run(
        dir.path(),
        &[
            "run",
            "--session",
            &session,
            "--prompt",
            "x",
            "--provider",
            "script:fast.jsonl",
        ],
    );
    assert_eq!(busy.status.code(), Some(2), "{}", text(&busy.stderr));
    assert!(
        text(&busy.stderr).starts_with(&busy_line(&session, 1, "elsewhere.example")),
        "{}",
        text(&busy.stderr)
    );

    let waited = run(
        dir.path(),
        &[
            "run",
            "--session",
            &session,
            "--prompt",
            "later",
            "--provider",
            "script:fast.jsonl",
            "--wait",
        ],
    );
    assert_eq!(waited.status.code(), Some(0), "{}", text(&waited.stderr));
    assert!(now_ms() >= expires_ms, "it ran before the lease expired");
    assert!(
        text(&waited.stderr).starts_with(&format!(
            "waiting for session {session}: driven by pid 1 on host elsewhere.example (lease expires "
        )),
        "{}",
        text(&waited.stderr)
    );
    assert_eq!(text(&waited.stdout), "fast answer\n");
    assert_eq!(prompts(dir.path(), &session).await, ["hello", "later"]);
    assert_eq!(lease_of(dir.path(), &session).await, None);
}
