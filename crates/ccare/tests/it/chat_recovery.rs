//! `ccare chat` after a store error (spec host.md H-STORE-6): the session the error
//! fenced is reopened, repaired, by the next prompt typed in the same chat, and a
//! prompt the store could not take is said, not fatal.
//!
//! The store error is real: another connection holds the database's write lock
//! (`BEGIN IMMEDIATE`) past the store's busy timeout, as another program opening the
//! file, a backup tool or a full disk would make writes fail.

#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use std::io::{Read as _, Write as _};
use std::path::Path;
use std::process::{Child, ChildStdin, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use ccare_fake_openai::{FakeServer, Reply, Script};
use serde_json::Value;
use std::sync::Mutex as StdMutex;

use crate::chat::ccare_command;

/// A `ccare chat` process fed line by line, its output collected as it comes.
struct LiveChat {
    child: Child,
    stdin: Option<ChildStdin>,
    stdout: Arc<StdMutex<String>>,
    stderr: Arc<StdMutex<String>>,
}

impl LiveChat {
    fn start(dir: &Path, config: &Path) -> Self {
        let mut child = ccare_command(dir)
            .args(["--home", "home", "--config"])
            .arg(config)
            .arg("chat")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let collect = |mut from: Box<dyn std::io::Read + Send>| {
            let into = Arc::new(StdMutex::new(String::new()));
            let sink = Arc::clone(&into);
            std::thread::spawn(move || {
                let mut buffer = [0u8; 4096];
                while let Ok(read) = from.read(&mut buffer) {
                    if read == 0 {
                        break;
                    }
                    sink.lock()
                        .unwrap()
                        .push_str(&String::from_utf8_lossy(&buffer[..read]));
                }
            });
            into
        };
        let stdout = collect(Box::new(child.stdout.take().unwrap()));
        let stderr = collect(Box::new(child.stderr.take().unwrap()));
        let stdin = child.stdin.take();
        Self {
            child,
            stdin,
            stdout,
            stderr,
        }
    }

    fn send_line(&mut self, line: &str) {
        let stdin = self.stdin.as_mut().unwrap();
        stdin.write_all(format!("{line}\n").as_bytes()).unwrap();
        stdin.flush().unwrap();
    }

    fn output(&self) -> (String, String) {
        (
            self.stdout.lock().unwrap().clone(),
            self.stderr.lock().unwrap().clone(),
        )
    }

    /// Waits until `done(stdout, stderr)`, failing with both after `timeout`.
    async fn wait_for(&self, what: &str, timeout: Duration, done: impl Fn(&str, &str) -> bool) {
        let start = Instant::now();
        loop {
            let (stdout, stderr) = self.output();
            if done(&stdout, &stderr) {
                return;
            }
            assert!(
                start.elapsed() < timeout,
                "waited {timeout:?} for {what}\n--- stdout:\n{stdout}\n--- stderr:\n{stderr}"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Closes stdin (EOF ends the chat) and returns its exit code.
    fn finish(mut self) -> Option<i32> {
        drop(self.stdin.take());
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                return status.code();
            }
            if Instant::now() > deadline {
                let _ = self.child.kill();
                panic!("the chat did not exit after EOF: {:?}", self.output());
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

impl Drop for LiveChat {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The user and assistant texts of an upstream request, in order.
fn transcript(body: &Value) -> Vec<String> {
    body["messages"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|message| message["role"] != "system")
        .map(|message| {
            let content = match &message["content"] {
                Value::String(text) => text.clone(),
                Value::Array(parts) => parts
                    .iter()
                    .filter_map(|part| part["text"].as_str())
                    .collect::<Vec<_>>()
                    .join(""),
                _ => String::new(),
            };
            format!("{}: {content}", message["role"].as_str().unwrap_or("?"))
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread")]
async fn h_store_6_the_next_prompt_in_a_chat_reopens_a_session_a_store_error_fenced() {
    let server = FakeServer::start().await.unwrap();
    // The first answer streams slowly enough for the database to be locked before it
    // is stored.
    server.push(Reply::Chunks(
        Script::new()
            .text("Hello ")
            .delay_ms(1500)
            .text("world")
            .finish("stop"),
    ));
    server.push(Reply::text("Back again."));
    let dir = tempfile::tempdir().unwrap();
    crate::care::write_config(dir.path(), &server.base_url());
    // A write under the lock fails after 300 ms instead of the default 5 s.
    let config = dir.path().join("ccare.toml");
    let text = std::fs::read_to_string(&config).unwrap();
    std::fs::write(&config, format!("{text}\n[store]\nbusy_timeout_ms = 300\n")).unwrap();
    let mut chat = LiveChat::start(dir.path(), &dir.path().join("ccare.toml"));
    chat.wait_for("the banner", Duration::from_secs(30), |_, stderr| {
        stderr.contains("Ctrl-C cancels")
    })
    .await;
    chat.send_line("first question");
    chat.wait_for(
        "the answer to begin",
        Duration::from_secs(30),
        |stdout, _| stdout.contains("Hello"),
    )
    .await;

    // Another connection takes the write lock: every write of the chat's store now
    // waits out its busy timeout and fails, the answer's `assistant/message` among
    // them, which fences the session.
    let lock = rusqlite::Connection::open(dir.path().join("home/ccare.db")).unwrap();
    lock.execute_batch("BEGIN IMMEDIATE").unwrap();
    chat.wait_for(
        "the chat to say the store failed",
        Duration::from_secs(40),
        |_, stderr| stderr.contains(FENCED_NOTE),
    )
    .await;
    // While the store still fails, a prompt is not sent, and the chat goes on.
    chat.send_line("are you there?");
    chat.wait_for(
        "the chat to say the message was not sent",
        Duration::from_secs(40),
        |_, stderr| stderr.contains(NOT_REOPENED_NOTE),
    )
    .await;
    lock.execute_batch("ROLLBACK").unwrap();
    drop(lock);

    chat.send_line("second question");
    chat.wait_for("the second answer", Duration::from_secs(30), |stdout, _| {
        stdout.contains("Back again.")
    })
    .await;
    let (_, stderr) = chat.output();
    assert!(
        stderr.contains(FENCED_NOTE) && stderr.contains(REOPENED_NOTE),
        "the chat says the turn was fenced, then that it reopened the session:\n{stderr}"
    );
    assert_eq!(chat.finish(), Some(0));

    // The model read the first question once, its unstored answer not at all, then
    // the second question.
    let requests = server.requests();
    assert_eq!(requests.len(), 2);
    assert_eq!(
        transcript(&requests[1].body),
        ["user: first question", "user: second question"]
    );
    // The log as stored: the fenced turn, ended by the reopen's repair, then the next.
    let db = rusqlite::Connection::open(dir.path().join("home/ccare.db")).unwrap();
    let mut rows = db.prepare("SELECT body FROM events ORDER BY seq").unwrap();
    let events: Vec<String> = rows
        .query_map([], |row| row.get::<_, String>(0))
        .unwrap()
        .map(|body| {
            let event: Value = serde_json::from_str(&body.unwrap()).unwrap();
            match event["type"].as_str().unwrap() {
                "turn/end" => format!("turn/end {}", event["data"]["reason"]["kind"]),
                kind => kind.to_owned(),
            }
        })
        .collect();
    assert_eq!(
        events,
        [
            "turn/start",
            "user/message",
            "step/start",
            "request/header",
            "request/context",
            // The answer's `assistant/message` was refused; the repair ends the turn.
            "step/end",
            "turn/end \"interrupted\"",
            "turn/start",
            "user/message",
            "step/start",
            "request/header",
            "assistant/message",
            "step/end",
            "turn/end \"completed\"",
        ]
    );
}

/// What the chat says when a store error stopped the turn (the error follows).
const FENCED_NOTE: &str = "The answer above, and anything this turn wrote after the error, \
    was not stored. Your next message reopens the session from the store.";
/// What the chat says when the session cannot be reopened yet (the error follows).
const NOT_REOPENED_NOTE: &str = "error: the session could not be reopened: ";
/// What the chat says when it reopened the session before the next prompt.
const REOPENED_NOTE: &str =
    "(session reopened from the store; the turn the store error stopped is marked interrupted)";
