//! The closed protocol (spec ACT-2): `Agent::send` checks a command, makes it durable
//! in the inbox domain before acknowledging it, and applies commands in order; old
//! inbox rows (written before the domain API) still restore.

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

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

/// A boundary contributor that fails while `broken` is set (a plugin whose hook breaks
/// and mends, across "processes").
struct Flaky(Arc<AtomicBool>);

impl ccare_agent::BoundaryContributor for Flaky {
    fn contribute<'a>(
        &'a self,
        _context: &'a ccare_agent::BoundaryContext<'a>,
    ) -> ccare_agent::BoxFuture<'a, Result<ccare_agent::BoundaryContribution, ccare_agent::HookError>>
    {
        Box::pin(async {
            if self.0.load(Ordering::SeqCst) {
                Err(ccare_agent::HookError::new("broken for now"))
            } else {
                Ok(ccare_agent::BoundaryContribution::default())
            }
        })
    }
}

impl ccare_agent::Plugin for Flaky {
    fn name(&self) -> &str {
        "flaky"
    }
    fn mount(
        &self,
        _config: &Value,
        scope: &mut ccare_agent::PluginScope<'_>,
    ) -> Result<(), ccare_agent::MountError> {
        scope.boundary(Arc::new(Flaky(Arc::clone(&self.0))), 50);
        Ok(())
    }
}

/// [`process`] with the [`Flaky`] plugin mounted over `broken`.
fn flaky_process(db: &Path, replies_count: usize, broken: &Arc<AtomicBool>) -> TestHost {
    let kit = process(db, replies_count);
    kit.host()
        .mount(&Flaky(Arc::clone(broken)), &Value::Null)
        .unwrap();
    kit
}

/// How many `turn/end`s list a plugin message with exactly `text` as never entered
/// (`blocked{unentered}` or `error{failure{unentered}}`).
fn listed_unentered(events: &[(String, Value)], text: &str) -> usize {
    events
        .iter()
        .filter(|(kind, _)| kind == "turn/end")
        .flat_map(|(_, data)| {
            let reason = &data["reason"];
            let listed = reason["unentered"]
                .as_array()
                .or_else(|| reason["failure"]["unentered"].as_array());
            listed.cloned().unwrap_or_default()
        })
        .filter(|message| message["content"][0]["text"] == text)
        .count()
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
        input_schema:
            serde_json::json!({"type": "object", "properties": {"q": {"type": "string"}}}).into(),
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
    /// The flaky plugin's boundary contributor fails from now on (true) or works again.
    Break(bool),
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        3 => Just(Op::Prompt),
        2 => Just(Op::Steer),
        2 => Just(Op::Inject),
        1 => any::<bool>().prop_map(|keep_inbox| Op::Cancel { keep_inbox }),
        1 => Just(Op::BogusResults),
        1 => Just(Op::Restart),
        1 => any::<bool>().prop_map(Op::Break),
    ]
}

/// Runs `ops` against one session, restarting the "process" (a new host over the same
/// SQLite file, the agent restored from the inbox) where asked; returns the texts
/// acknowledged, whether each may have been dropped by a later cancel without
/// keep-inbox (H-CANCEL-3), and the session id.
async fn interleave(db: &Path, ops: &[Op]) -> (Vec<(String, bool)>, SessionId) {
    let budget = ops.len() * 2 + 4;
    let broken = Arc::new(AtomicBool::new(false));
    let mut kit = flaky_process(db, budget, &broken);
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
                // Only an idle agent's head stays put: a running turn (a prompt just
                // sent) may log and end between the two reads.
                let idle = !agent.is_busy();
                let head = session.head();
                let refused = agent
                    .send(Command::ToolResults(vec![CallerResult::text(
                        format!("nobody-{index}"),
                        "stray",
                    )]))
                    .await
                    .unwrap_err();
                assert_eq!(refused.code(), TOOL_RESULTS_MISMATCH);
                if idle {
                    assert_eq!(session.head(), head, "nothing logged");
                }
            }
            Op::Restart => {
                agent.when_idle().await;
                drop(agent);
                drop(session);
                drop(kit);
                kit = flaky_process(db, budget, &broken);
                session = kit.open(&id).await.unwrap();
                agent = kit.agent(&session, MODEL);
                agent.restore_inbox().await.unwrap();
            }
            Op::Break(on) => broken.store(*on, Ordering::SeqCst),
        }
    }
    // Injected entries wait for a step: one last prompt, with the plugin mended, lets
    // every one still queued enter.
    broken.store(false, Ordering::SeqCst);
    agent.send(input("last")).await.unwrap();
    acked.push(("last".to_owned(), false));
    agent.when_idle().await;
    drop(agent);
    drop(session);
    drop(kit);
    (acked, id)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    /// ACT-2: any interleaving of prompts, steers, injects, cancels, refused tool
    /// results, restarts (a new host over the same SQLite file) and a plugin's boundary
    /// hook breaking and mending leaves a log the audit (`sessions check`) accepts, and
    /// every acknowledged message is logged exactly once, or listed once as never
    /// entered by a step its hook failed (H-HOOK-7); at most once when a later cancel
    /// without keep-inbox may have dropped it.
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
                // Logged, or listed once as never entered by a step whose boundary
                // hook failed (H-HOOK-7): never both, never twice.
                let count = logged(&events, text) + listed_unentered(&events, text);
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

// -------------------------------------------------------------------------------------
// Caller-executed tools, restarts while a turn awaits them, and `kill -9` mid-turn
// -------------------------------------------------------------------------------------

/// The fake OpenAI endpoint's model.
const FAKE_MODEL: &str = "f/model";
/// What a tool prompt says; the fake model answers it with two `lookup` calls.
const TOOLS_PROMPT: &str = "tools-prompt ";
const CHILD_ENV: &str = "CCARE_AGENT_PROTOCOL_CHILD";
const CHILD_DB_ENV: &str = "CCARE_AGENT_PROTOCOL_DB";
const CHILD_SESSION_ENV: &str = "CCARE_AGENT_PROTOCOL_SESSION";
const CHILD_MARKER: &str = "CCARE-PROTOCOL-ACKED";

/// The ids of the two calls the model makes for tool prompt `n`.
fn call_ids(n: u64) -> [String; 2] {
    [format!("call{n}a"), format!("call{n}b")]
}

/// The fake model: the newest tool prompt of the request whose calls it has not made yet
/// gets two `lookup` calls; anything else gets `ok`. Deciding from the request (not
/// from a fixed reply order) keeps it right whatever the interleaving did.
fn respond(request: &ccare_fake_openai::RecordedRequest) -> ccare_fake_openai::Reply {
    let body = &request.raw_body;
    let mut prompts: Vec<u64> = body
        .match_indices(TOOLS_PROMPT)
        .filter_map(|(at, _)| {
            let digits: String = body[at + TOOLS_PROMPT.len()..]
                .chars()
                .take_while(char::is_ascii_digit)
                .collect();
            digits.parse().ok()
        })
        .collect();
    prompts.sort_unstable();
    prompts.dedup();
    for n in prompts.into_iter().rev() {
        let [a, b] = call_ids(n);
        if !body.contains(&format!("\"{a}\"")) {
            let script = ccare_fake_openai::Script::new()
                .tool_call(0, Some(&a), Some("lookup"), r#"{"q":"a"}"#)
                .tool_call(1, Some(&b), Some("lookup"), r#"{"q":"b"}"#)
                .finish("tool_calls")
                .usage(ccare_fake_openai::openai_usage(10, 0, 2, 0));
            return ccare_fake_openai::Reply::Chunks(script);
        }
    }
    ccare_fake_openai::Reply::text("ok")
}

/// A host over the SQLite file `db` whose model `f/model` is the fake endpoint at `url`.
fn fake_process(db: &Path, url: &str) -> TestHost {
    let mut provider = ccare_llm::ProviderConfig::new(ccare_llm::ProviderKind::Openai);
    provider.base_url = Some(url.to_owned());
    provider.api_key_env = Some("FAKE_KEY".into());
    provider.max_attempts = 1;
    let mut config = ccare_llm::LlmConfig::default();
    config.providers.insert("f".into(), provider);
    config
        .models
        .insert(FAKE_MODEL.into(), ccare_llm::ModelConfig::default());
    TestHost::builder("")
        .sqlite_file(db)
        .llm_config(config)
        .env("FAKE_KEY", "sk")
        .build()
        .unwrap()
}

/// One step of a random interleaving with caller-executed tools.
#[derive(Debug, Clone)]
enum ToolOp {
    Prompt,
    Steer,
    Inject,
    Cancel {
        keep_inbox: bool,
    },
    /// A prompt whose turn declares `lookup`; the model calls it twice and the turn
    /// awaits the caller.
    ToolPrompt,
    /// The results of exactly the open calls (after the agent settles when `wait`);
    /// refused, nothing logged, when no call is open.
    Results {
        wait: bool,
    },
    /// A new host over the same file, at idle or while a turn awaits tools.
    Restart,
    /// A child process on the same file acknowledges a prompt and is killed with
    /// SIGKILL `delay_ms` later, mid-turn.
    Crash {
        delay_ms: u64,
    },
}

fn tool_op() -> impl Strategy<Value = ToolOp> {
    prop_oneof![
        2 => Just(ToolOp::Prompt),
        1 => Just(ToolOp::Steer),
        1 => Just(ToolOp::Inject),
        1 => any::<bool>().prop_map(|keep_inbox| ToolOp::Cancel { keep_inbox }),
        3 => Just(ToolOp::ToolPrompt),
        3 => any::<bool>().prop_map(|wait| ToolOp::Results { wait }),
        2 => Just(ToolOp::Restart),
        1 => (0u64..40).prop_map(|delay_ms| ToolOp::Crash { delay_ms }),
    ]
}

/// What an interleaving had acknowledged: messages (with whether a later cancel
/// without keep-inbox may have dropped them) and tool results `(call id, text)`.
#[derive(Debug, Default)]
struct Acked {
    messages: Vec<(String, bool)>,
    results: Vec<(String, String)>,
}

/// Answers every open call until the agent settles with nothing awaiting.
async fn settle(agent: &Agent, acked: &mut Acked, round: &str) {
    for attempt in 0.. {
        agent.when_idle().await;
        let open = agent.awaiting_tools();
        if open.is_empty() {
            return;
        }
        assert!(attempt < 50, "the turn keeps awaiting tools");
        answer(agent, &open, &format!("{round}.{attempt}"), acked).await;
    }
}

/// Sends the results of `open` (each `result <round> <id>`); acknowledged, they are
/// expected logged once.
async fn answer(agent: &Agent, open: &[String], round: &str, acked: &mut Acked) {
    let results: Vec<CallerResult> = open
        .iter()
        .map(|id| CallerResult::text(id.clone(), format!("result {round} {id}")))
        .collect();
    agent.send(Command::ToolResults(results)).await.unwrap();
    for id in open {
        acked
            .results
            .push((id.clone(), format!("result {round} {id}")));
    }
}

/// The child of [`ToolOp::Crash`]: opens the session (after the parent let go), sends
/// a prompt, reports the acknowledgement and keeps running until it is killed. A no-op
/// unless the parent set `CHILD_ENV`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn protocol_child_entry() {
    let (Ok(text), Some(db), Ok(id)) = (
        std::env::var(CHILD_ENV),
        std::env::var_os(CHILD_DB_ENV),
        std::env::var(CHILD_SESSION_ENV),
    ) else {
        return;
    };
    // Slow answers, so the kill lands while a turn runs.
    let slow = vec![r#"{"text": "one two three four five six seven eight", "delay_ms": 4}"#; 40];
    let kit = TestHost::builder(&slow.join("\n"))
        .sqlite_file(Path::new(&db))
        .build()
        .unwrap();
    let session = kit.open(&SessionId::new(id).unwrap()).await.unwrap();
    let agent = kit.agent(&session, MODEL);
    agent.restore_inbox().await.unwrap();
    agent.send(input(&text)).await.unwrap();
    println!("\n{CHILD_MARKER}");
    std::future::pending::<()>().await;
}

/// Runs `ops` against one session over the fake model at `url`; returns what was
/// acknowledged and the session id.
async fn interleave_tools(db: &Path, url: &str, ops: &[ToolOp]) -> (Acked, SessionId) {
    let mut kit = fake_process(db, url);
    let mut session = kit.session().await.unwrap();
    let id = session.id().clone();
    let mut agent: Agent = kit.agent(&session, FAKE_MODEL);
    let mut acked = Acked::default();
    for (index, op) in ops.iter().enumerate() {
        match op {
            ToolOp::Prompt => {
                let text = format!("prompt {index}");
                agent.send(input(&text)).await.unwrap();
                acked.messages.push((text, false));
            }
            ToolOp::Steer => {
                let text = format!("steer {index}");
                agent.send(Command::Steer(user(&text))).await.unwrap();
                acked.messages.push((text, false));
            }
            ToolOp::Inject => {
                let text = format!("inject {index}");
                agent.send(Command::Inject(notice(&text))).await.unwrap();
                acked.messages.push((text, false));
            }
            ToolOp::Cancel { keep_inbox } => {
                agent
                    .send(Command::Cancel {
                        keep_inbox: *keep_inbox,
                    })
                    .await
                    .unwrap();
                if !keep_inbox {
                    for entry in &mut acked.messages {
                        entry.1 = true;
                    }
                }
            }
            ToolOp::ToolPrompt => {
                let text = format!("{TOOLS_PROMPT}{index}");
                let message = agent
                    .user_message_with_tools(text.clone(), vec![lookup()])
                    .unwrap();
                agent
                    .send(Command::UserInput {
                        message,
                        options: None,
                    })
                    .await
                    .unwrap();
                acked.messages.push((text, false));
            }
            ToolOp::Results { wait } => {
                if *wait {
                    agent.when_idle().await;
                }
                let open = agent.awaiting_tools();
                if open.is_empty() {
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
                } else {
                    answer(&agent, &open, &index.to_string(), &mut acked).await;
                }
            }
            ToolOp::Restart | ToolOp::Crash { .. } => {
                agent.when_idle().await;
                drop(agent);
                drop(session);
                drop(kit);
                if let ToolOp::Crash { delay_ms } = op {
                    let text = format!("crash {index}");
                    let (db, id, child_text) =
                        (db.to_owned(), id.as_str().to_owned(), text.clone());
                    let delay = std::time::Duration::from_millis(*delay_ms);
                    tokio::task::spawn_blocking(move || {
                        crate::child::kill_at_marker(
                            "protocol::protocol_child_entry",
                            &[
                                (CHILD_ENV, child_text.as_ref()),
                                (CHILD_DB_ENV, db.as_os_str()),
                                (CHILD_SESSION_ENV, id.as_ref()),
                            ],
                            CHILD_MARKER,
                            delay,
                        )
                    })
                    .await
                    .unwrap();
                    acked.messages.push((text, false));
                }
                kit = fake_process(db, url);
                session = kit.open(&id).await.unwrap();
                agent = kit.agent(&session, FAKE_MODEL);
                agent.restore_inbox().await.unwrap();
            }
        }
    }
    // Injected entries wait for a step and queued prompts for the awaiting turn: answer
    // what is open, then one last prompt lets every one enter.
    settle(&agent, &mut acked, "settle").await;
    agent.send(input("last")).await.unwrap();
    acked.messages.push(("last".to_owned(), false));
    settle(&agent, &mut acked, "last").await;
    drop(agent);
    drop(session);
    drop(kit);
    (acked, id)
}

/// How many `tool/result` events answer `call_id` with exactly `text`.
fn results_logged(events: &[(String, Value)], call_id: &str, text: &str) -> usize {
    events
        .iter()
        .filter(|(kind, data)| {
            let block = &data["message"]["content"][0];
            kind == "tool/result"
                && block["call_id"] == call_id
                && block["content"][0]["text"] == text
        })
        .count()
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 16, ..ProptestConfig::default() })]

    /// ACT-2 with ACT-3: random interleavings of prompts, steers, injects, cancels,
    /// prompts whose turn awaits two caller-executed calls, their results (accepted
    /// when they name exactly the open calls, refused otherwise), restarts (also while
    /// a turn awaits tools) and `kill -9` of a child process mid-turn always leave a
    /// log the audit (`sessions check`) accepts, in which every acknowledged message is
    /// logged exactly once (at most once when a later cancel without keep-inbox may
    /// have dropped it), every acknowledged tool result exactly once, no refused one,
    /// and no caller-executed call is answered `TOOL_NOT_STARTED`.
    #[test]
    fn act_2_random_interleavings_with_caller_tools_and_crashes_apply_each_acknowledged_command_once(
        ops in proptest::collection::vec(tool_op(), 1..10)
    ) {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap();
        runtime.block_on(async {
            let server = ccare_fake_openai::FakeServer::start().await.unwrap();
            server.respond_with(respond);
            let dir = tempfile::tempdir().unwrap();
            let db = dir.path().join("ccare.db");
            let (acked, id) = interleave_tools(&db, &server.base_url(), &ops).await;
            let check = fake_process(&db, &server.base_url());
            let loaded = check.sessions().load(&id).await.unwrap();
            assert!(
                loaded.violations.is_empty(),
                "sessions check: {:?} after {ops:?}",
                loaded.violations
            );
            let session = check.open(&id).await.unwrap();
            let events = all_events(&session);
            for (text, droppable) in &acked.messages {
                let count = logged(&events, text);
                if *droppable {
                    assert!(count <= 1, "{text:?} logged {count} times after {ops:?}");
                } else {
                    assert_eq!(count, 1, "{text:?} after {ops:?}");
                }
            }
            for (call_id, text) in &acked.results {
                assert_eq!(
                    results_logged(&events, call_id, text),
                    1,
                    "{text:?} after {ops:?}"
                );
            }
            for (kind, data) in &events {
                if kind == "tool/result" {
                    assert_ne!(data["message"]["content"][0]["content"][0]["text"], "stray");
                    assert_ne!(data["error"]["code"], ccare_session::TOOL_NOT_STARTED, "after {ops:?}");
                }
            }
            let agent = check.agent(&session, FAKE_MODEL);
            assert_eq!(agent.restore_inbox().await.unwrap(), 0, "nothing left queued");
        });
    }
}

// -------------------------------------------------------------------------------------
// Rows queued in the background are durable before the kernel's next boundary event
// -------------------------------------------------------------------------------------

/// A local tool that holds back the store's KV acknowledgements (a row written but not
/// durable yet) and then injects a notice through its context, as context care's
/// `context_rest` does.
struct HoldAndInject {
    def: ccare_agent::ToolDef,
    store: std::sync::Arc<ccare_agent::testing::FailingStore>,
    ran: tokio::sync::mpsc::UnboundedSender<()>,
}

impl ccare_agent::Tool for HoldAndInject {
    fn def(&self) -> &ccare_agent::ToolDef {
        &self.def
    }

    fn call(
        &self,
        context: ccare_agent::ToolContext,
        _arguments: Value,
    ) -> ccare_agent::BoxFuture<'static, ccare_agent::ToolOutcome> {
        self.store.hold_kv_writes();
        context.inbox.inject(notice("noted"));
        let _ = self.ran.send(());
        Box::pin(async { Ok(vec![ContentBlock::text("queued")]) })
    }
}

/// ACT-2 "durable before acknowledged" for the kernel's background writes: a row a tool
/// queued (an inject, written through the inbox domain's queue) is handed to the store
/// before the step's `step/end` is appended, and the store makes writes durable in call
/// order, so a crash can never keep the step's end and lose the row. While the row's
/// write is not durable no further request goes out; once it is, the turn goes on and
/// the notice enters the next step once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn act_2_a_row_a_tool_queued_is_durable_before_its_step_ends() {
    let store = std::sync::Arc::new(ccare_agent::testing::FailingStore::default());
    let script = "{\"tool_calls\": [{\"name\": \"note\", \"arguments\": {}, \"id\": \"n1\"}]}\n{\"text\": \"done\"}";
    let kit = TestHost::builder(script)
        .store(store.clone())
        .build()
        .unwrap();
    let (ran, mut tool_ran) = tokio::sync::mpsc::unbounded_channel();
    kit.host()
        .add_tool(std::sync::Arc::new(HoldAndInject {
            def: ccare_agent::ToolDef {
                spec: ccare_llm::ToolSpec {
                    name: "note".into(),
                    description: "notes something for the next step".into(),
                    input_schema: serde_json::json!({"type": "object"}).into(),
                },
                concurrency: ccare_agent::Concurrency::ParallelSafe,
                timeout_ms: None,
                validates_own_arguments: false,
            },
            store: store.clone(),
            ran,
        }))
        .unwrap();
    let session = kit.session().await.unwrap();
    let agent = kit.agent(&session, MODEL);
    agent.send(input("note it")).await.unwrap();
    tool_ran.recv().await.unwrap();
    // Time for a kernel that does not wait to send the next request.
    tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    // The store makes writes durable in call order, so what the kernel appends after
    // the row is durable no earlier than it; the flush before the next dispatch
    // (H-STORE-5) waits for both.
    assert_eq!(
        kit.script().requests().len(),
        1,
        "no request goes out while the tool's row is not durable"
    );
    let kinds = ccare_agent::testing::kinds(&session);
    let result = kinds.iter().position(|kind| kind == "tool/result").unwrap();
    assert_eq!(
        kinds[..=result],
        [
            "turn/start",
            "user/message",
            "step/start",
            "request/header",
            "request/context",
            "assistant/message",
            "tool/call",
            "tool/result",
        ]
    );
    store.release_kv_writes();
    assert_eq!(agent.when_idle().await, Some(TurnEndReason::Completed));
    let events = all_events(&session);
    assert_eq!(logged(&events, "noted"), 1);
    assert_eq!(kit.script().requests().len(), 2);
}

/// A `UserInput` that resends a message no turn answered (a client's retry) opens a
/// turn whose `user/message` stays off the surface: the model's request holds the
/// message once. A resend of an answered message, or of an id the log does not hold
/// on its surface, is refused with `NOT_RESENDABLE` and changes nothing.
#[tokio::test]
async fn act_2_a_resend_of_an_unanswered_message_is_read_once_and_of_an_answered_one_refused() {
    let script = [
        r#"{"failure": {"code": "INVALID_REQUEST", "message": "refused upstream"}}"#,
        r#"{"text": "answered", "expect": {"contains": "once please"}}"#,
    ]
    .join("\n");
    let kit = TestHost::builder(&script).build().unwrap();
    let session = kit.session().await.unwrap();
    let agent = kit.agent(&session, MODEL);
    let original = user("once please");
    agent
        .send(Command::UserInput {
            message: original,
            options: None,
        })
        .await
        .unwrap();
    let failed = agent.when_idle().await;
    assert!(
        matches!(failed, Some(TurnEndReason::Error { .. })),
        "{failed:?}"
    );
    let users = events_of(&session, "user/message");
    let id = users[0]["message"]["id"].as_str().unwrap().to_owned();
    let resend = |id: &str| {
        let mut message = user("once please");
        ccare_agent::resend::mark_resend(&mut message, id);
        Command::UserInput {
            message,
            options: None,
        }
    };

    let unknown = agent.send(resend("no-such-id")).await.unwrap_err();
    assert_eq!(unknown.code(), "NOT_RESENDABLE");
    assert_eq!(
        unknown.to_string(),
        "UserInput: message no-such-id cannot be resent: no user message on the surface has that id"
    );
    assert!(!agent.is_busy(), "a refused resend queues nothing");

    agent.send(resend(&id)).await.unwrap();
    assert_eq!(agent.when_idle().await, Some(TurnEndReason::Completed));
    let messages: Vec<(bool, Value)> = session.with_log(|log| {
        log.events()
            .iter()
            .filter(|event| event.kind() == "user/message")
            .map(|event| {
                let data: Value = serde_json::from_str(event.data_json()).unwrap();
                (event.surface().is_some(), data["message"].clone())
            })
            .collect()
    });
    assert_eq!(messages.len(), 2);
    assert!(messages[0].0, "the original is on the surface");
    assert!(!messages[1].0, "the resend is not");
    assert_eq!(messages[1].1["resends"], id.as_str());
    assert_eq!(messages[1].1["content"], messages[0].1["content"]);
    // What the model read: the message once, in both requests.
    let requests = kit.script().requests();
    assert_eq!(requests.len(), 2);
    for request in &requests {
        let messages = format!("{:?}", request.config.messages);
        assert_eq!(messages.matches("once please").count(), 1, "{messages}");
    }

    let answered = agent.send(resend(&id)).await.unwrap_err();
    assert_eq!(
        answered,
        CommandError::NotResendable {
            command: "UserInput",
            original: id.clone(),
            reason: "a turn since it was answered",
        }
    );
    assert!(!agent.is_busy());
    assert_eq!(
        events_of(&session, "user/message").len(),
        2,
        "nothing logged"
    );
}

/// A resend of a message whose answer was cut short (the turn cancelled while the
/// model wrote) is refused: its request would end with the model's own words. The
/// message is sent anew instead.
#[tokio::test]
async fn act_2_a_resend_after_a_cut_short_answer_is_refused() {
    let script = r#"{"text": "one two three four five six seven", "delay_ms": 60}"#;
    let kit = TestHost::builder(script).build().unwrap();
    let session = kit.session().await.unwrap();
    let agent = kit.agent(&session, MODEL);
    let mut live = agent.subscribe_live();
    agent.send(input("tell me")).await.unwrap();
    while let Ok(chunk) = live.recv().await {
        if matches!(chunk.chunk, ccare_llm::Chunk::TextDelta { .. }) {
            break;
        }
    }
    agent
        .send(Command::Cancel { keep_inbox: false })
        .await
        .unwrap();
    let answers = events_of(&session, "assistant/message");
    assert_eq!(answers[0]["interrupted"], true, "{answers:?}");
    let id = events_of(&session, "user/message")[0]["message"]["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let mut message = user("tell me");
    ccare_agent::resend::mark_resend(&mut message, &id);
    let refused = agent
        .send(Command::UserInput {
            message,
            options: None,
        })
        .await
        .unwrap_err();
    assert_eq!(
        refused.to_string(),
        format!(
            "UserInput: message {id} cannot be resent: the model's interrupted answer follows it"
        )
    );
    assert!(!agent.is_busy());
    assert_eq!(
        events_of(&session, "user/message").len(),
        1,
        "nothing logged"
    );
}
