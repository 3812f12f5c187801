//! SIGKILL in the middle of a turn, reopen, resume (spec H-SESS-4, H-SESS-5,
//! H-STORE-5): a real host (SQLite store, scripted provider) runs in a child process —
//! this test binary re-executed with `CHILD_ENV` naming the scenario — which prints a
//! marker once the interesting point is durable and then keeps running until the
//! parent kills it (`Child::kill` sends SIGKILL on Unix). The parent reopens the store
//! with `Sessions::open`, which repairs the open turn, checks the exact log, then
//! attaches a new agent and runs the next turn.
//!
//! Scenarios:
//! - `tool`: killed while a tool body runs (after its `tool/call` marker was flushed):
//!   repair answers the call with `TOOL_OUTCOME_UNKNOWN`, closes the step and the turn
//!   (`interrupted`), and the next request pairs the call with exactly that result.
//! - `prompt`: killed while the model is still answering (the prompt and the request
//!   header flushed, nothing streamed): the prompt survives, the turn is interrupted.

#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use std::io::{BufRead, BufReader, Read};
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use ccare_agent::testing::{TestHost, events_of, kinds};
use ccare_agent::{Agent, BoxFuture, Concurrency, Tool, ToolContext, ToolDef, ToolOutcome};
use ccare_core::kinds::TurnEndReason;
use ccare_core::{ContentBlock, JsonObject, Role, SessionId};
use ccare_llm::script::ScriptProvider;
use ccare_llm::{RequestMessage, ToolSpec};
use ccare_session::{Session, Sessions, TOOL_OUTCOME_UNKNOWN};
use serde_json::{Value, json};
use tokio::sync::mpsc;

/// Set (to a scenario name) in the child's environment.
const CHILD_ENV: &str = "CCARE_AGENT_CRASH_CHILD";
/// The directory of the child's database.
const DIR_ENV: &str = "CCARE_AGENT_CRASH_DIR";
/// The line the child prints once the crash point is durable.
const MARKER: &str = "CCARE-CRASH-READY";
/// The session both processes use.
const SESSION: &str = "crash";

const TOOL_SCRIPT: &str = r#"{"tool_calls":[{"name":"hang","arguments":{},"id":"c1"}]}"#;
const SLOW_SCRIPT: &str = r#"{"text":"this answer never arrives","delay_ms":600000}"#;
const RECOVERED_SCRIPT: &str = r#"{"text":"recovered"}"#;

const FIRST_PROMPT: &str = "run the hanging tool";
const NEXT_PROMPT: &str = "are you still there?";

/// A host composed as in production, on the database in `dir`.
struct Kit {
    sessions: Arc<Sessions>,
    script: ScriptProvider,
    test: TestHost,
}

fn kit(dir: &Path, script: &str, started: Option<mpsc::UnboundedSender<()>>) -> Kit {
    let test = TestHost::builder(script)
        .sqlite_file(dir.join("ccare.db"))
        .build()
        .unwrap();
    test.host().add_tool(Arc::new(Hang::new(started))).unwrap();
    Kit {
        sessions: Arc::clone(test.sessions()),
        script: test.script().clone(),
        test,
    }
}

fn agent(kit: &Kit, session: Session) -> Agent {
    kit.test.agent(&session, "s/scripted")
}

fn session_id() -> SessionId {
    SessionId::new(SESSION).unwrap()
}

/// A tool whose body reports that it started (so its `tool/call` marker was flushed:
/// the kernel flushes before it runs a body) and then never finishes.
struct Hang {
    def: ToolDef,
    started: Option<mpsc::UnboundedSender<()>>,
}

impl Hang {
    fn new(started: Option<mpsc::UnboundedSender<()>>) -> Self {
        Self {
            def: ToolDef {
                spec: ToolSpec {
                    name: "hang".into(),
                    description: "never returns".into(),
                    input_schema: json!({"type": "object"}).into(),
                },
                concurrency: Concurrency::Exclusive,
                timeout_ms: None,
                validates_own_arguments: false,
            },
            started,
        }
    }
}

impl Tool for Hang {
    fn def(&self) -> &ToolDef {
        &self.def
    }

    fn call(&self, _context: ToolContext, _arguments: Value) -> BoxFuture<'static, ToolOutcome> {
        let started = self.started.clone();
        Box::pin(async move {
            if let Some(started) = started {
                let _ = started.send(());
            }
            std::future::pending::<ToolOutcome>().await
        })
    }
}

/// `(kind, data)` of every event.
fn events(session: &Session) -> Vec<(String, Value)> {
    session.with_log(|log| {
        log.events()
            .iter()
            .map(|event| {
                (
                    event.kind().to_owned(),
                    serde_json::from_str(event.data_json()).unwrap(),
                )
            })
            .collect()
    })
}

// -------------------------------------------------------------------------------------
// The child
// -------------------------------------------------------------------------------------

/// The child's body; a no-op unless the parent set `CHILD_ENV`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn crash_child_entry() {
    let (Ok(scenario), Some(dir)) = (std::env::var(CHILD_ENV), std::env::var_os(DIR_ENV)) else {
        return;
    };
    let dir = Path::new(&dir);
    let (started_sender, mut started) = mpsc::unbounded_channel();
    let script = match scenario.as_str() {
        "tool" => TOOL_SCRIPT,
        "prompt" => SLOW_SCRIPT,
        other => panic!("unknown crash scenario {other:?}"),
    };
    let kit = kit(dir, script, Some(started_sender));
    let session = kit
        .sessions
        .create(Some(session_id()), JsonObject::new())
        .await
        .unwrap();
    let agent = agent(&kit, session.clone());
    agent.prompt(FIRST_PROMPT);
    let deadline = Instant::now() + Duration::from_secs(30);
    match scenario.as_str() {
        "tool" => {
            // The body runs only after `tool/call` was appended and flushed.
            tokio::time::timeout(Duration::from_secs(30), started.recv())
                .await
                .expect("the hang tool never started")
                .unwrap();
            assert_eq!(
                kinds(&session).last().map(String::as_str),
                Some("tool/call")
            );
        }
        _ => {
            // The provider is called only after the request header was flushed.
            while kit.script.requests().is_empty() {
                assert!(Instant::now() < deadline, "the provider was never called");
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        }
    }
    // Everything in memory is in the store: the parent will find it.
    session.flush().await.unwrap();
    let stored = kit
        .sessions
        .store()
        .session(&session_id())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(stored.head, session.head());
    println!("\n{MARKER} {}", stored.head);
    // Keep the turn running until the parent kills this process.
    std::future::pending::<()>().await;
}

/// Runs the child for `scenario` on `dir`, waits for its marker, SIGKILLs it; returns
/// the head it reported as durable.
fn run_and_kill(scenario: &str, dir: &Path) -> u64 {
    let exe = std::env::current_exe().unwrap();
    let mut child = Command::new(exe)
        .args([
            "--exact",
            "crash::crash_child_entry",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(CHILD_ENV, scenario)
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
    let head = loop {
        let left = deadline.saturating_duration_since(Instant::now());
        match received.recv_timeout(left) {
            Ok(line) => {
                // The harness may have printed "test crash_child_entry ... " first.
                if let Some((_, head)) = line.split_once(MARKER) {
                    break Some(head.trim().parse::<u64>().unwrap());
                }
                seen.push(line);
            }
            Err(_) => break None,
        }
    };
    // SIGKILL: no destructor, no flush, no drain of the store's writer.
    child.kill().unwrap();
    let status = child.wait().unwrap();
    let Some(head) = head else {
        panic!(
            "the {scenario} child never reached its crash point ({status}); stdout:\n{}\nstderr:\n{}",
            seen.join("\n"),
            errors.join().unwrap_or_default()
        );
    };
    assert!(!status.success(), "the child was killed, not finished");
    head
}

/// Every assistant tool call is answered by exactly one tool result, after it, and
/// every tool result answers a call (the H-LLM pairing rule, also after repair).
fn assert_calls_paired(messages: &[RequestMessage]) {
    let mut calls = Vec::new();
    for (index, message) in messages.iter().enumerate() {
        for block in &message.message.content {
            match block {
                ContentBlock::ToolCall(call) => {
                    assert_eq!(message.role, Role::Assistant, "a call outside assistant");
                    calls.push((index, call.id.clone()));
                }
                ContentBlock::ToolResult(result) => {
                    assert_eq!(message.role, Role::User, "a result outside a user message");
                    assert!(
                        calls
                            .iter()
                            .any(|(at, id)| *at < index && *id == result.call_id),
                        "result {} answers no earlier call",
                        result.call_id
                    );
                }
                _ => {}
            }
        }
    }
    for (_, id) in &calls {
        let results = messages
            .iter()
            .flat_map(|message| message.message.content.iter())
            .filter(
                |block| matches!(block, ContentBlock::ToolResult(result) if result.call_id == *id),
            )
            .count();
        assert_eq!(results, 1, "call {id} has {results} results");
    }
}

fn text_of(message: &RequestMessage) -> String {
    message
        .message
        .content
        .iter()
        .filter_map(|block| match block {
            ContentBlock::Text(text) => Some(text.text.as_str()),
            _ => None,
        })
        .collect()
}

// -------------------------------------------------------------------------------------
// The scenarios
// -------------------------------------------------------------------------------------

/// The issue's crash test: SIGKILL during a tool call, reopen, resume. The open turn
/// is closed as interrupted with `TOOL_OUTCOME_UNKNOWN`, and the next turn works.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn h_sess_5_sigkill_during_a_tool_call_then_reopen_and_resume() {
    let dir = tempfile::tempdir().unwrap();
    let durable_head = run_and_kill("tool", dir.path());
    let kit = kit(dir.path(), RECOVERED_SCRIPT, None);
    let id = session_id();

    // What the dead process left: the call dispatched, its result never written.
    let loaded = kit.sessions.load(&id).await.unwrap();
    let left: Vec<&str> = loaded
        .log
        .events()
        .iter()
        .map(|event| event.kind())
        .collect();
    assert_eq!(
        left,
        [
            "turn/start",
            "user/message",
            "step/start",
            "request/header",
            "request/context",
            "assistant/message",
            "tool/call",
        ]
    );
    assert_eq!(loaded.log.head(), durable_head);

    // Open repairs: exactly three appended events, each marked `repair`.
    let session = kit.sessions.open(&id).await.unwrap();
    let all = events(&session);
    assert_eq!(all.len() as u64, durable_head + 3);
    let tail = &all[all.len() - 3..];
    assert_eq!(tail[0].0, "tool/result");
    assert_eq!(tail[0].1["repair"], true);
    assert_eq!(tail[0].1["turn"], 1);
    assert_eq!(tail[0].1["step"], 1);
    assert_eq!(tail[0].1["error"]["code"], TOOL_OUTCOME_UNKNOWN);
    let block = &tail[0].1["message"]["content"][0];
    assert_eq!(block["type"], "tool-result");
    assert_eq!(block["call_id"], "c1");
    assert_eq!(block["name"], "hang");
    assert_eq!(block["is_error"], true);
    assert_eq!(tail[1].0, "step/end");
    assert_eq!(
        tail[1].1,
        json!({"turn": 1, "step": 1, "interrupted": true, "repair": true})
    );
    assert_eq!(tail[2].0, "turn/end");
    assert_eq!(tail[2].1["turn"], 1);
    assert_eq!(tail[2].1["reason"], json!({"kind": "interrupted"}));
    assert_eq!(tail[2].1["repair"], true);
    assert_eq!(session.with_log(|log| log.state().open_turn), None);

    // Resume: a new agent on the repaired session runs the next turn.
    let agent = agent(&kit, session.clone());
    agent.prompt(NEXT_PROMPT);
    assert_eq!(agent.when_idle().await, Some(TurnEndReason::Completed));
    let requests = kit.script.requests();
    assert_eq!(requests.len(), 1);
    let messages = &requests[0].config.messages;
    assert_calls_paired(messages);
    let shape: Vec<(Role, String)> = messages
        .iter()
        .map(|message| (message.role, text_of(message)))
        .collect();
    assert_eq!(
        shape,
        [
            (Role::User, FIRST_PROMPT.to_owned()),
            (Role::Assistant, String::new()),
            (Role::User, String::new()),
            (Role::User, NEXT_PROMPT.to_owned()),
        ]
    );
    assert!(matches!(
        &messages[1].message.content[..],
        [ContentBlock::ToolCall(call)] if call.id == "c1" && call.name == "hang"
    ));
    // The new agent learned from the log which provider wrote the dead process's answer.
    assert_eq!(messages[1].origin.as_deref(), Some("s"));
    assert!(matches!(
        &messages[2].message.content[..],
        [ContentBlock::ToolResult(result)] if result.call_id == "c1" && result.is_error
    ));
    let reasons: Vec<Value> = events_of(&session, "request/header")
        .iter()
        .map(|header| header["reason"].clone())
        .collect();
    assert_eq!(reasons, [json!("initial"), json!("resume")]);
    assert_eq!(
        kinds(&session)[all.len()..],
        [
            "turn/start",
            "user/message",
            "step/start",
            "request/header",
            "assistant/message",
            "step/end",
            "turn/end",
        ]
    );
    assert_eq!(events_of(&session, "turn/start")[1]["turn"], 2);
    let answers = events_of(&session, "assistant/message");
    assert_eq!(answers[1]["message"]["content"][0]["text"], "recovered");

    // Repair is durable and idempotent: a third process finds nothing to repair.
    session.flush().await.unwrap();
    let head = session.head();
    drop((agent, session, kit));
    let again = self::kit(dir.path(), RECOVERED_SCRIPT, None);
    let reopened = again.sessions.open(&id).await.unwrap();
    assert_eq!(reopened.head(), head);
}

/// SIGKILL after the prompt was committed but before the model answered: the prompt
/// is still in the log and the turn is closed as interrupted; the next turn sees it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn h_sess_5_sigkill_while_the_model_answers_keeps_the_prompt() {
    let dir = tempfile::tempdir().unwrap();
    let durable_head = run_and_kill("prompt", dir.path());
    let kit = kit(dir.path(), RECOVERED_SCRIPT, None);
    let id = session_id();

    let loaded = kit.sessions.load(&id).await.unwrap();
    let left: Vec<&str> = loaded
        .log
        .events()
        .iter()
        .map(|event| event.kind())
        .collect();
    assert_eq!(
        left,
        [
            "turn/start",
            "user/message",
            "step/start",
            "request/header",
            "request/context",
        ]
    );
    assert_eq!(loaded.log.head(), durable_head);

    let session = kit.sessions.open(&id).await.unwrap();
    let all = events(&session);
    let prompts = events_of(&session, "user/message");
    assert_eq!(prompts.len(), 1);
    assert_eq!(prompts[0]["message"]["content"][0]["text"], FIRST_PROMPT);
    assert_eq!(prompts[0]["message"]["source"]["kind"], "user");
    let tail: Vec<(&str, &Value)> = all[durable_head as usize..]
        .iter()
        .map(|(kind, data)| (kind.as_str(), data))
        .collect();
    assert_eq!(
        tail,
        [
            (
                "step/end",
                &json!({"turn": 1, "step": 1, "interrupted": true, "repair": true})
            ),
            (
                "turn/end",
                &json!({"turn": 1, "reason": {"kind": "interrupted"}, "repair": true})
            ),
        ]
    );

    let agent = agent(&kit, session.clone());
    agent.prompt(NEXT_PROMPT);
    assert_eq!(agent.when_idle().await, Some(TurnEndReason::Completed));
    let requests = kit.script.requests();
    assert_eq!(requests.len(), 1);
    let shape: Vec<(Role, String)> = requests[0]
        .config
        .messages
        .iter()
        .map(|message| (message.role, text_of(message)))
        .collect();
    assert_eq!(
        shape,
        [
            (Role::User, FIRST_PROMPT.to_owned()),
            (Role::User, NEXT_PROMPT.to_owned()),
        ]
    );
    let reasons: Vec<Value> = events_of(&session, "request/header")
        .iter()
        .map(|header| header["reason"].clone())
        .collect();
    assert_eq!(reasons, [json!("initial"), json!("resume")]);
}
