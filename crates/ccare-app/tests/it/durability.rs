//! `[store] durability = "per-append"` (H-STORE-5): an append that returned is durable.
//!
//! A child process (this test binary re-executed with `CHILD_ENV` naming the
//! durability) boots a host from a config with that `[store] durability`, creates a
//! session, and appends one `turn/start` while another connection holds the
//! database's write lock, so the store's writer cannot commit yet. Right after the
//! append returns it prints a marker and waits; the parent SIGKILLs it at once and
//! reads the reopened store.
//!
//! - `per-append`: the append waits for its commit, so the child releases the lock
//!   after 300 ms and the append returns only after that: the event is in the store.
//! - `group` (the control, showing the kill lands before the commit): the lock is never
//!   released, the append returns at once, and the event is not in the store.

use std::io::{BufRead, BufReader, Read};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use ccare_app::config::load_text;
use ccare_app::{Home, Overrides, boot};
use ccare_core::kinds::TurnStart;
use ccare_core::{EventDraft, JsonObject, SessionId};
use ccare_store::{ReadRange, SqliteConfig, SqliteStore, Store};

use crate::config::no_env;

/// Set (to `group` or `per-append`) in the child's environment.
const CHILD_ENV: &str = "CCARE_APP_DURABILITY_CHILD";
/// The child's directory (config, home, database).
const DIR_ENV: &str = "CCARE_APP_DURABILITY_DIR";
/// The line the child prints once the append returned.
const MARKER: &str = "CCARE-APPEND-RETURNED";
/// The session both processes use.
const SESSION: &str = "durable";

fn session_id() -> SessionId {
    SessionId::new(SESSION).unwrap()
}

/// The child's body; a no-op unless the parent set `CHILD_ENV`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn durability_child_entry() {
    let (Ok(durability), Some(dir)) = (std::env::var(CHILD_ENV), std::env::var_os(DIR_ENV)) else {
        return;
    };
    let dir = Path::new(&dir);
    let home = Home {
        dir: dir.join("home"),
    };
    let config = format!("[store]\ndurability = \"{durability}\"\n");
    let settings = load_text(
        &config,
        &dir.join("ccare.toml"),
        &home,
        &Overrides::default(),
        &no_env,
    )
    .unwrap();
    let booted = boot(&settings, None, &no_env).unwrap();
    let session = booted
        .host
        .sessions()
        .create(Some(session_id()), JsonObject::new())
        .await
        .unwrap();
    session.flush().await.unwrap();
    // Another writer takes the database's write lock: the store's writer waits on it.
    let locker = rusqlite::Connection::open(home.dir.join("ccare.db")).unwrap();
    locker.execute_batch("BEGIN IMMEDIATE").unwrap();
    let release = durability == "per-append";
    let holder = std::thread::spawn(move || {
        if release {
            std::thread::sleep(Duration::from_millis(300));
            locker.execute_batch("COMMIT").unwrap();
        } else {
            // Held until the process dies.
            std::thread::sleep(Duration::from_secs(600));
        }
    });
    let started = Instant::now();
    let event = session
        .append(EventDraft::typed(&TurnStart { turn: 1 }).unwrap())
        .unwrap();
    println!(
        "\n{MARKER} {} {}",
        event.seq(),
        started.elapsed().as_millis()
    );
    std::future::pending::<()>().await;
    drop(holder);
}

/// Runs the child for `durability` in `dir`, SIGKILLs it right after its marker;
/// returns the appended seq and how long the append took (ms).
fn run_and_kill(durability: &str, dir: &Path) -> (u64, u128) {
    let exe = std::env::current_exe().unwrap();
    let mut child = Command::new(exe)
        .args([
            "--exact",
            "durability::durability_child_entry",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(CHILD_ENV, durability)
        .env(DIR_ENV, dir)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let stdout = child.stdout.take().unwrap();
    let mut stderr = child.stderr.take().unwrap();
    let (lines, received) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines() {
            let Ok(line) = line else { break };
            if lines.send(line).is_err() {
                break;
            }
        }
    });
    let errors = std::thread::spawn(move || {
        let mut text = String::new();
        let _ = stderr.read_to_string(&mut text);
        text
    });
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut seen = Vec::new();
    let marker = loop {
        let left = deadline.saturating_duration_since(Instant::now());
        match received.recv_timeout(left) {
            Ok(line) => {
                if let Some((_, rest)) = line.split_once(MARKER) {
                    let mut words = rest.split_whitespace();
                    let seq = words.next().unwrap().parse::<u64>().unwrap();
                    let took = words.next().unwrap().parse::<u128>().unwrap();
                    break Some((seq, took));
                }
                seen.push(line);
            }
            Err(_) => break None,
        }
    };
    // SIGKILL: no destructor, no flush, no drain of the store's writer.
    child.kill().unwrap();
    let status = child.wait().unwrap();
    let Some(marker) = marker else {
        panic!(
            "the {durability} child never appended ({status}); stdout:\n{}\nstderr:\n{}",
            seen.join("\n"),
            errors.join().unwrap_or_default()
        );
    };
    assert!(!status.success(), "the child was killed, not finished");
    marker
}

/// The event types stored for the session, read from the reopened database.
async fn stored_kinds(dir: &Path) -> Vec<String> {
    let store = SqliteStore::open(SqliteConfig::new(dir.join("home/ccare.db"))).unwrap();
    let rows = store.read(&session_id(), ReadRange::all()).await.unwrap();
    rows.iter()
        .map(|row| {
            let value: serde_json::Value = serde_json::from_str(&row.json).unwrap();
            value["type"].as_str().unwrap().to_owned()
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn h_store_5_per_append_an_append_that_returned_survives_sigkill() {
    let dir = tempfile::tempdir().unwrap();
    let (seq, took) = run_and_kill("per-append", dir.path());
    assert_eq!(seq, 0);
    assert!(took >= 250, "the append waited for the commit ({took} ms)");
    assert_eq!(stored_kinds(dir.path()).await, ["turn/start"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn h_store_5_group_commit_control_the_kill_lands_before_the_commit() {
    let dir = tempfile::tempdir().unwrap();
    let (seq, took) = run_and_kill("group", dir.path());
    assert_eq!(seq, 0);
    assert!(took < 250, "a group append returns at once ({took} ms)");
    assert!(
        stored_kinds(dir.path()).await.is_empty(),
        "without per-append the queued event died with the process"
    );
}
