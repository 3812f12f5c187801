//! The closed protocol (spec ACT-2): `Agent::send` checks a command, makes it durable
//! in the inbox domain before acknowledging it, and applies commands in order; old
//! inbox rows (written before the domain API) still restore.

use std::path::Path;

use ccare_agent::testing::{TestHost, events_of};
use ccare_agent::{
    Agent, AgentOptions, CallerResult, Command, CommandError, TOOL_RESULTS_MISMATCH,
};
use ccare_core::kinds::TurnEndReason;
use ccare_core::{ContentBlock, Message, SessionId, Source};
use proptest::prelude::*;
use serde_json::Value;

const MODEL: &str = "s/scripted";

fn replies(count: usize) -> String {
    vec![r#"{"text": "ok"}"#; count].join("\n")
}

fn user(text: &str) -> Message {
    let mut message = Message::from_blocks(vec![ContentBlock::text(text)]);
    message.source = Some(Source::user());
    message
}

fn notice(text: &str) -> Message {
    let mut message = Message::from_blocks(vec![ContentBlock::text(text)]);
    message.source = Some(Source::plugin_notice("tester"));
    message
}

fn input(text: &str) -> Command {
    Command::UserInput {
        message: user(text),
        options: None,
    }
}

/// A host over the SQLite file `db` (a new "process" on it).
fn process(db: &Path, replies_count: usize) -> TestHost {
    TestHost::builder(&replies(replies_count))
        .sqlite_file(db)
        .build()
        .unwrap()
}

/// How many logged messages (of any source) have exactly `text` as their first block.
fn logged(events: &[(String, Value)], text: &str) -> usize {
    events
        .iter()
        .filter(|(kind, data)| {
            kind.ends_with("/message") && data["message"]["content"][0]["text"] == text
        })
        .count()
}

fn all_events(session: &ccare_session::Session) -> Vec<(String, Value)> {
    session.with_log(|log| {
        log.events()
            .iter()
            .map(|event| {
                (
                    event.kind().to_owned(),
                    serde_json::from_str(event.data_json()).unwrap_or_default(),
                )
            })
            .collect()
    })
}

#[tokio::test]
async fn act_2_a_bad_command_gets_a_typed_error_and_changes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let kit = process(&dir.path().join("ccare.db"), 0);
    let session = kit.session().await.unwrap();
    let agent = kit.agent(&session, MODEL);
    let before = agent.options();

    let empty = agent.send(input("   ")).await.unwrap_err();
    assert_eq!(empty.code(), "EMPTY_MESSAGE");
    assert_eq!(empty.to_string(), "UserInput: the message is empty");

    let mut bad = AgentOptions::new("s/other");
    bad.max_steps_per_turn = 0;
    let refused = agent
        .send(Command::UserInput {
            message: user("hello"),
            options: Some(bad.clone()),
        })
        .await
        .unwrap_err();
    assert_eq!(refused.code(), "INVALID_OPTIONS");
    assert_eq!(
        agent.send(Command::SetOptions(bad)).await.unwrap_err(),
        CommandError::InvalidOptions {
            command: "SetOptions",
            reason: "max_steps_per_turn must be at least 1",
        }
    );
    assert_eq!(
        agent
            .send(Command::Steer(Message::from_blocks(Vec::new())))
            .await
            .unwrap_err()
            .code(),
        "EMPTY_MESSAGE"
    );

    assert_eq!(agent.options(), before, "options unchanged");
    assert!(!agent.is_busy(), "nothing queued, no turn started");
    assert_eq!(agent.when_idle().await, None);
    assert!(events_of(&session, "user/message").is_empty());
    assert!(events_of(&session, "turn/start").is_empty());
    let store = kit.reopen_store().unwrap();
    let rows = ccare_store::Store::kv_scan(
        &store,
        "agent_inbox",
        "entries/",
        ccare_store::KvPage::default(),
    )
    .await
    .unwrap();
    assert!(rows.is_empty(), "no inbox row: {rows:?}");
}

#[tokio::test]
async fn act_2_an_acknowledged_inject_is_durable_for_another_process() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("ccare.db");
    let first = process(&db, 0);
    let session = first.session().await.unwrap();
    let agent = first.agent(&session, MODEL);
    let ack = agent
        .send(Command::Inject(notice("keep me")))
        .await
        .unwrap();
    assert_eq!(ack.entry, Some(0));
    // Read as another process would, right after the acknowledgement.
    let store = first.reopen_store().unwrap();
    let key = format!("entries/{}/{:020}", session.id().as_str(), 0);
    let row = ccare_store::Store::kv_get(&store, "agent_inbox", &key)
        .await
        .unwrap()
        .expect("durable once acknowledged");
    let stored: Value = serde_json::from_slice(&row.value).unwrap();
    assert_eq!(stored["target"], "inject");
    assert_eq!(stored["message"]["content"][0]["text"], "keep me");
}

#[tokio::test]
async fn act_2_inbox_rows_written_before_the_domain_api_still_restore() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("ccare.db");
    let first = process(&db, 0);
    let session = first.session().await.unwrap();
    let id = session.id().clone();
    // The old layout: `<session>/<id, 20 digits>` straight in the store, no version row.
    let old = serde_json::json!({
        "target": "followup",
        "message": serde_json::to_value(user("from the old inbox")).unwrap(),
    });
    ccare_store::Store::kv_cas(
        first.sessions().store().as_ref(),
        "agent_inbox",
        &format!("{}/{:020}", id.as_str(), 7),
        None,
        Some(serde_json::to_vec(&old).unwrap()),
    )
    .await
    .unwrap();
    drop(session);
    drop(first);

    let second = process(&db, 1);
    let session = second.open(&id).await.unwrap();
    let agent = second.agent(&session, MODEL);
    assert_eq!(agent.restore_inbox().await.unwrap(), 1);
    assert_eq!(agent.when_idle().await, Some(TurnEndReason::Completed));
    let prompts = events_of(&session, "user/message");
    assert_eq!(prompts.len(), 1);
    assert_eq!(
        prompts[0]["message"]["content"][0]["text"],
        "from the old inbox"
    );
    // Migrated, then deleted once logged: nothing is left in either layout.
    let store = second.reopen_store().unwrap();
    let rows =
        ccare_store::Store::kv_scan(&store, "agent_inbox", "", ccare_store::KvPage::default())
            .await
            .unwrap();
    let keys: Vec<&str> = rows.iter().map(|(key, _)| key.as_str()).collect();
    assert_eq!(keys, ["__meta"]);

    // A third process finds nothing more to run: applied exactly once.
    drop(agent);
    drop(session);
    drop(second);
    let third = process(&db, 0);
    let session = third.open(&id).await.unwrap();
    let agent = third.agent(&session, MODEL);
    assert_eq!(agent.restore_inbox().await.unwrap(), 0);
}

fn lookup() -> ccare_llm::ToolSpec {
    ccare_llm::ToolSpec {
        name: "lookup".into(),
        description: "looks a word up (run by the caller)".into(),
        input_schema: serde_json::json!({"type": "object", "properties": {"q": {"type": "string"}}}),
    }
}

#[tokio::test]
async fn act_2_tool_results_through_send_resume_the_awaiting_turn_once_in_a_new_process() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("ccare.db");
    let calls = r#"{"tool_calls": [{"name": "lookup", "arguments": {"q": "a"}, "id": "c1"}, {"name": "lookup", "arguments": {"q": "b"}, "id": "c2"}]}"#;
    let first = TestHost::builder(calls).sqlite_file(&db).build().unwrap();
    let session = first.session().await.unwrap();
    let id = session.id().clone();
    let agent = first.agent(&session, MODEL);
    let message = agent
        .user_message_with_tools("look up a and b", vec![lookup()])
        .unwrap();
    agent
        .send(Command::UserInput {
            message,
            options: None,
        })
        .await
        .unwrap();
    assert_eq!(agent.when_idle().await, None, "awaits the caller's results");
    assert_eq!(agent.awaiting_tools(), ["c1", "c2"]);
    drop(agent);
    drop(session);
    drop(first);

    let second = process(&db, 1);
    let session = second.open(&id).await.unwrap();
    let agent = second.agent(&session, MODEL);
    agent.restore_inbox().await.unwrap();
    let head = session.head();
    let refused = agent
        .send(Command::ToolResults(vec![CallerResult::text("c1", "A")]))
        .await
        .unwrap_err();
    assert_eq!(refused.code(), TOOL_RESULTS_MISMATCH);
    assert_eq!(session.head(), head, "a refused command logs nothing");
    let ack = agent
        .send(Command::ToolResults(vec![
            CallerResult::text("c2", "B"),
            CallerResult::text("c1", "A"),
        ]))
        .await
        .unwrap();
    assert_eq!(ack.entry, None);
    assert_eq!(agent.when_idle().await, Some(TurnEndReason::Completed));
    assert!(agent.awaiting_tools().is_empty());
    let results = events_of(&session, "tool/result");
    assert_eq!(results.len(), 2, "each result logged once: {results:?}");
    let again = agent
        .send(Command::ToolResults(vec![
            CallerResult::text("c1", "A"),
            CallerResult::text("c2", "B"),
        ]))
        .await
        .unwrap_err();
    assert_eq!(again.code(), TOOL_RESULTS_MISMATCH, "applied exactly once");
    let loaded = second.sessions().load(&id).await.unwrap();
    assert!(loaded.violations.is_empty(), "{:?}", loaded.violations);
}

/// One step of a random interleaving.
#[derive(Debug, Clone)]
enum Op {
    Prompt,
    Steer,
    Inject,
    Cancel {
        keep_inbox: bool,
    },
    /// Results for a call no turn awaits: refused, nothing logged.
    BogusResults,
    Restart,
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        3 => Just(Op::Prompt),
        2 => Just(Op::Steer),
        2 => Just(Op::Inject),
        1 => any::<bool>().prop_map(|keep_inbox| Op::Cancel { keep_inbox }),
        1 => Just(Op::BogusResults),
        1 => Just(Op::Restart),
    ]
}

/// Runs `ops` against one session, restarting the "process" (a new host over the same
/// SQLite file, the agent restored from the inbox) where asked; returns the texts
/// acknowledged, whether each may have been dropped by a later cancel without
/// keep-inbox (H-CANCEL-3), and the session id.
async fn interleave(db: &Path, ops: &[Op]) -> (Vec<(String, bool)>, SessionId) {
    let budget = ops.len() * 2 + 4;
    let mut kit = process(db, budget);
    let mut session = kit.session().await.unwrap();
    let id = session.id().clone();
    let mut agent: Agent = kit.agent(&session, MODEL);
    let mut acked: Vec<(String, bool)> = Vec::new();
    for (index, op) in ops.iter().enumerate() {
        match op {
            Op::Prompt => {
                let text = format!("prompt {index}");
                agent.send(input(&text)).await.unwrap();
                acked.push((text, false));
            }
            Op::Steer => {
                let text = format!("steer {index}");
                agent.send(Command::Steer(user(&text))).await.unwrap();
                acked.push((text, false));
            }
            Op::Inject => {
                let text = format!("inject {index}");
                agent.send(Command::Inject(notice(&text))).await.unwrap();
                acked.push((text, false));
            }
            Op::Cancel { keep_inbox } => {
                agent
                    .send(Command::Cancel {
                        keep_inbox: *keep_inbox,
                    })
                    .await
                    .unwrap();
                if !keep_inbox {
                    for entry in &mut acked {
                        entry.1 = true;
                    }
                }
            }
            Op::BogusResults => {
                let head = session.head();
                let refused = agent
                    .send(Command::ToolResults(vec![CallerResult::text(
                        format!("nobody-{index}"),
                        "stray",
                    )]))
                    .await
                    .unwrap_err();
                assert_eq!(refused.code(), TOOL_RESULTS_MISMATCH);
                if !agent.is_busy() {
                    assert_eq!(session.head(), head, "nothing logged");
                }
            }
            Op::Restart => {
                agent.when_idle().await;
                drop(agent);
                drop(session);
                drop(kit);
                kit = process(db, budget);
                session = kit.open(&id).await.unwrap();
                agent = kit.agent(&session, MODEL);
                agent.restore_inbox().await.unwrap();
            }
        }
    }
    // Injected entries wait for a step: one last prompt lets every one enter.
    agent.send(input("last")).await.unwrap();
    acked.push(("last".to_owned(), false));
    agent.when_idle().await;
    drop(agent);
    drop(session);
    drop(kit);
    (acked, id)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, ..ProptestConfig::default() })]

    /// ACT-2: any interleaving of prompts, steers, injects, cancels, refused tool
    /// results and restarts (a new host over the same SQLite file) leaves
    /// a log the audit (`sessions check`) accepts, and every acknowledged message is
    /// logged exactly once (at most once when a later cancel without keep-inbox may
    /// have dropped it).
    #[test]
    fn act_2_random_interleavings_apply_each_acknowledged_command_once(
        ops in proptest::collection::vec(op(), 1..10)
    ) {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap();
        runtime.block_on(async {
            let dir = tempfile::tempdir().unwrap();
            let db = dir.path().join("ccare.db");
            let (acked, id) = interleave(&db, &ops).await;
            let check = process(&db, 0);
            let loaded = check.sessions().load(&id).await.unwrap();
            assert!(
                loaded.violations.is_empty(),
                "sessions check: {:?} after {ops:?}",
                loaded.violations
            );
            let session = check.open(&id).await.unwrap();
            let events = all_events(&session);
            for (text, droppable) in &acked {
                let count = logged(&events, text);
                if *droppable {
                    assert!(count <= 1, "{text:?} logged {count} times after {ops:?}");
                } else {
                    assert_eq!(count, 1, "{text:?} after {ops:?}");
                }
            }
            // Prompts open turns in the order they were acknowledged (steers may
            // overtake them: they enter the running turn's next step, H-LOOP-3).
            let position = |text: &str| {
                events.iter().position(|(kind, data)| {
                    kind == "user/message" && data["message"]["content"][0]["text"] == text
                })
            };
            let prompts: Vec<usize> = acked
                .iter()
                .filter(|(text, _)| text.starts_with("prompt ") || text == "last")
                .filter_map(|(text, _)| position(text))
                .collect();
            let kept = acked
                .iter()
                .filter(|(text, droppable)| {
                    !droppable && (text.starts_with("prompt ") || text == "last")
                })
                .count();
            assert!(prompts.len() >= kept, "every kept prompt is a user/message");
            assert!(
                prompts.windows(2).all(|pair| pair[0] < pair[1]),
                "prompts out of order after {ops:?}: {prompts:?}"
            );
            let agent = check.agent(&session, MODEL);
            assert_eq!(agent.restore_inbox().await.unwrap(), 0, "nothing left queued");
        });
    }
}
