//! External tools (spec ACT-3): a turn declares tools the caller runs; their calls are
//! logged as `tool/call{executor: "caller"}` and the step awaits, durably, until
//! `tool_results` answers exactly the open ids — also in a new process after `kill -9`
//! (the child is this test binary re-executed, as in `crash`). Wrong ids are refused
//! with nothing logged; a cancel answers the open calls `ABORTED_BEFORE_DISPATCH`; a
//! mixed step runs the local calls and waits for the caller's.

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use ccare_agent::testing::{TestHost, events_of, kinds};
use ccare_agent::{
    ABORTED_BEFORE_DISPATCH, Agent, BoxFuture, CallerResult, CancelCause, Concurrency,
    ExternalToolsError, TOOL_RESULTS_MISMATCH, Tool, ToolContext, ToolDef, ToolOutcome,
};
use ccare_core::kinds::{Executor, ToolCall, TurnEndReason};
use ccare_core::{ContentBlock, JsonObject, SessionId};
use ccare_llm::ToolSpec;
use ccare_session::{Session, TOOL_NOT_STARTED};
use serde_json::{Value, json};

const CHILD_ENV: &str = "CCARE_AGENT_EXTERNAL_CHILD";
const DIR_ENV: &str = "CCARE_AGENT_EXTERNAL_DIR";
const MARKER: &str = "CCARE-AWAITING-READY";
const SESSION: &str = "external";
const MODEL: &str = "s/scripted";

/// Two calls of the caller's `lookup`, then an answer.
const TWO_CALLS: &str = "{\"tool_calls\": [{\"name\": \"lookup\", \"arguments\": {\"q\": \"a\"}, \"id\": \"c1\"}, {\"name\": \"lookup\", \"arguments\": {\"q\": \"b\"}, \"id\": \"c2\"}]}\n{\"text\": \"both found\"}";
/// A local `clock` call and a caller `lookup` call in one message, then an answer.
const MIXED: &str = "{\"tool_calls\": [{\"name\": \"clock\", \"arguments\": {}, \"id\": \"l1\"}, {\"name\": \"lookup\", \"arguments\": {\"q\": \"x\"}, \"id\": \"c2\"}]}\n{\"text\": \"mixed done\"}";
const FINISH: &str = "{\"text\": \"both found\"}";
const PROMPT: &str = "look up a and b";

fn lookup() -> ToolSpec {
    ToolSpec {
        name: "lookup".into(),
        description: "looks a word up (run by the caller)".into(),
        input_schema: json!({"type": "object", "properties": {"q": {"type": "string"}}}).into(),
    }
}

/// A local tool answering `"12:00"`.
struct LocalClock(ToolDef);

impl LocalClock {
    fn new() -> Self {
        Self(ToolDef {
            spec: ToolSpec {
                name: "clock".into(),
                description: "the time".into(),
                input_schema: json!({"type": "object"}).into(),
            },
            concurrency: Concurrency::ParallelSafe,
            timeout_ms: None,
            validates_own_arguments: false,
        })
    }
}

impl Tool for LocalClock {
    fn def(&self) -> &ToolDef {
        &self.0
    }

    fn call(&self, _context: ToolContext, _arguments: Value) -> BoxFuture<'static, ToolOutcome> {
        Box::pin(async { Ok(vec![ContentBlock::text("12:00")]) })
    }
}

fn kit(dir: &Path, script: &str) -> TestHost {
    let test = TestHost::builder(script)
        .sqlite_file(dir.join("ccare.db"))
        .build()
        .unwrap();
    test.host().add_tool(Arc::new(LocalClock::new())).unwrap();
    test
}

fn session_id() -> SessionId {
    SessionId::new(SESSION).unwrap()
}

async fn wait_awaiting(agent: &Agent) -> Vec<String> {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let open = agent.awaiting_tools();
        if !open.is_empty() && !agent.is_busy() {
            return open;
        }
        assert!(Instant::now() < deadline, "the turn never awaited tools");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

fn strs(items: &[&str]) -> Vec<String> {
    items.iter().map(|item| (*item).to_owned()).collect()
}

const AWAITING_KINDS: [&str; 8] = [
    "turn/start",
    "user/message",
    "step/start",
    "request/header",
    "request/context",
    "assistant/message",
    "tool/call",
    "tool/call",
];

fn results(pairs: &[(&str, &str)]) -> Vec<CallerResult> {
    pairs
        .iter()
        .map(|(id, text)| CallerResult::text(*id, *text))
        .collect()
}

/// Every refusal is `TOOL_RESULTS_MISMATCH` and logs nothing.
async fn assert_refused(agent: &Agent, session: &Session) {
    let head = session.head();
    for bad in [
        results(&[("c1", "a")]),
        results(&[("c1", "a"), ("c1", "a")]),
        results(&[("c1", "a"), ("c2", "b"), ("c3", "c")]),
        results(&[("c1", "a"), ("c3", "c")]),
        Vec::new(),
    ] {
        let got: Vec<String> = bad.iter().map(|result| result.call_id.clone()).collect();
        let refused = agent.tool_results(bad).await.unwrap_err();
        assert_eq!(refused.code(), TOOL_RESULTS_MISMATCH);
        assert_eq!(
            refused,
            ExternalToolsError::Mismatch {
                expected: strs(&["c1", "c2"]),
                got,
            }
        );
        assert_eq!(session.head(), head, "a refused result set logged nothing");
    }
    assert_eq!(agent.awaiting_tools(), strs(&["c1", "c2"]));
}

/// The results, the step's end, the next step and the turn's end, as logged after
/// `tool_results`.
/// A new process's agent writes its first `request/header` (`resume`, H-SESS-4).
fn assert_resumed_tail(session: &Session, from: usize, new_agent: bool) {
    let all = kinds(session);
    let mut expected = strs(&["tool/result", "tool/result", "step/end", "step/start"]);
    if new_agent {
        expected.push("request/header".into());
    }
    expected.extend(strs(&["assistant/message", "step/end", "turn/end"]));
    assert_eq!(all[from..], expected[..]);
    if new_agent {
        let headers = events_of(session, "request/header");
        assert_eq!(headers.last().unwrap()["reason"], "resume");
    }
    let answers = events_of(session, "tool/result");
    let tail = &answers[answers.len() - 2..];
    assert_eq!(tail[0]["message"]["content"][0]["call_id"], "c1");
    assert_eq!(tail[0]["message"]["content"][0]["name"], "lookup");
    assert_eq!(tail[0]["message"]["content"][0]["content"][0]["text"], "A");
    assert_eq!(tail[0]["message"]["content"][0]["is_error"], false);
    assert_eq!(tail[1]["message"]["content"][0]["call_id"], "c2");
    assert_eq!(tail[1]["message"]["content"][0]["content"][0]["text"], "B");
    for answer in tail {
        assert!(answer.get("error").is_none_or(Value::is_null));
    }
    let ends = events_of(session, "step/end");
    assert_eq!(ends[ends.len() - 2], json!({"turn": 1, "step": 1}));
    let last = events_of(session, "turn/end");
    assert_eq!(last.last().unwrap()["reason"], json!({"kind": "completed"}));
}

fn assert_caller_markers(session: &Session, ids: &[&str]) {
    let markers: Vec<Value> = events_of(session, "tool/call")
        .into_iter()
        .filter(|marker| marker["executor"] == "caller")
        .collect();
    let named: Vec<&str> = markers
        .iter()
        .map(|marker| marker["call_id"].as_str().unwrap())
        .collect();
    assert_eq!(named, ids);
    for marker in &markers {
        assert_eq!(marker["name"], "lookup");
        assert_eq!(marker["turn"], 1);
        assert_eq!(marker["step"], 1);
    }
}

/// ACT-3: a turn waits on two caller-executed calls; wrong result sets are refused with
/// nothing logged; the right one resumes the turn, whose next request carries both
/// results and the turn's tools again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn act_3_a_turn_awaits_two_caller_calls_and_resumes_on_their_results() {
    let dir = tempfile::tempdir().unwrap();
    let kit = kit(dir.path(), TWO_CALLS);
    let session = kit.session().await.unwrap();
    let agent = kit.agent(&session, MODEL);
    let mut stream = agent.subscribe_from(Some(session.head()));
    agent.prompt_with_tools(PROMPT, vec![lookup()]).unwrap();
    assert_eq!(wait_awaiting(&agent).await, strs(&["c1", "c2"]));
    assert_eq!(
        agent.when_idle().await,
        None,
        "no turn ended: it awaits tools"
    );
    assert_eq!(kinds(&session), AWAITING_KINDS);
    assert_caller_markers(&session, &["c1", "c2"]);
    // The ordered stream says so after the markers are committed.
    let awaited = loop {
        match tokio::time::timeout(Duration::from_secs(10), stream.next())
            .await
            .unwrap()
        {
            Some(ccare_agent::StreamItem::AwaitingTools {
                after_seq,
                call_ids,
            }) => {
                break (after_seq, call_ids);
            }
            Some(_) => {}
            None => panic!("the stream ended"),
        }
    };
    // It follows the last marker.
    assert_eq!(awaited, (session.head() - 1, strs(&["c1", "c2"])));
    // The request carried the turn's tool beside the host's.
    let first = &kit.script().requests()[0].config;
    let names: Vec<&str> = first.tools.iter().map(|tool| tool.name.as_str()).collect();
    assert!(names.ends_with(&["lookup"]), "{names:?}");
    assert!(names.contains(&"clock"));

    assert_refused(&agent, &session).await;

    let before = kinds(&session).len();
    agent
        .tool_results(results(&[("c2", "B"), ("c1", "A")]))
        .await
        .unwrap();
    assert_eq!(agent.when_idle().await, Some(TurnEndReason::Completed));
    assert_resumed_tail(&session, before, false);
    assert!(agent.awaiting_tools().is_empty());
    let second = &kit.script().requests()[1].config;
    assert!(second.tools.iter().any(|tool| tool.name == "lookup"));
    let answered: Vec<String> = second
        .messages
        .iter()
        .flat_map(|message| message.message.content.iter())
        .filter_map(|block| match block {
            ContentBlock::ToolResult(result) => Some(result.call_id.clone()),
            _ => None,
        })
        .collect();
    assert_eq!(answered, strs(&["c1", "c2"]));
    // Nothing awaits now: more results are refused.
    let late = agent
        .tool_results(results(&[("c1", "A")]))
        .await
        .unwrap_err();
    assert_eq!(
        late,
        ExternalToolsError::Mismatch {
            expected: Vec::new(),
            got: strs(&["c1"]),
        }
    );
}

/// ACT-3: a declared tool may not shadow a host tool.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn act_3_a_declared_tool_may_not_take_a_host_tools_name() {
    let dir = tempfile::tempdir().unwrap();
    let kit = kit(dir.path(), TWO_CALLS);
    let session = kit.session().await.unwrap();
    let agent = kit.agent(&session, MODEL);
    let mut clash = lookup();
    clash.name = "clock".into();
    assert_eq!(
        agent.prompt_with_tools(PROMPT, vec![clash]).unwrap_err(),
        ExternalToolsError::NameTaken("clock".into())
    );
    assert_eq!(
        agent
            .prompt_with_tools(PROMPT, vec![lookup(), lookup()])
            .unwrap_err(),
        ExternalToolsError::NameTaken("lookup".into())
    );
    assert!(kinds(&session).is_empty());
}

/// ACT-3 with `AgentOptions::hidden_tools`: an agent that hides a host tool does not
/// offer it, lets the caller declare a tool of that name (whose calls then go to the
/// caller), and answers a call of the hidden tool itself with `TOOL_NOT_FOUND`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn act_3_a_hidden_host_tool_is_neither_offered_nor_run_and_its_name_is_free() {
    let dir = tempfile::tempdir().unwrap();
    let script = "{\"tool_calls\": [{\"name\": \"clock\", \"arguments\": {}, \"id\": \"c1\"}]}\n{\"text\": \"done\"}\n{\"tool_calls\": [{\"name\": \"clock\", \"arguments\": {}, \"id\": \"h1\"}]}\n{\"text\": \"no clock\"}";
    let kit = kit(dir.path(), script);
    let session = kit.session().await.unwrap();
    let agent = kit.agent(&session, MODEL);
    let mut options = agent.options();
    options.hidden_tools = ["clock".to_owned()].into();
    agent.set_options(options);
    // The caller's own `clock`: accepted, offered once (the caller's), run by the caller.
    let mut own = lookup();
    own.name = "clock".into();
    own.description = "the caller's clock".into();
    agent.prompt_with_tools(PROMPT, vec![own]).unwrap();
    assert_eq!(wait_awaiting(&agent).await, strs(&["c1"]));
    assert_eq!(events_of(&session, "tool/call")[0]["executor"], "caller");
    agent
        .tool_results(results(&[("c1", "09:00")]))
        .await
        .unwrap();
    assert_eq!(agent.when_idle().await, Some(TurnEndReason::Completed));
    let offered: Vec<(String, String)> = kit.script().requests()[0]
        .config
        .tools
        .iter()
        .map(|tool| (tool.name.clone(), tool.description.to_string()))
        .collect();
    assert_eq!(
        offered,
        [("clock".to_owned(), "the caller's clock".to_owned())]
    );
    // Without the caller's tool, the model's call of the hidden one is not run.
    agent.prompt(PROMPT);
    assert_eq!(agent.when_idle().await, Some(TurnEndReason::Completed));
    assert!(kit.script().requests()[2].config.tools.is_empty());
    let results = events_of(&session, "tool/result");
    assert_eq!(results[1]["message"]["content"][0]["call_id"], "h1");
    assert_eq!(results[1]["error"]["code"], "TOOL_NOT_FOUND");
    // A tool the agent offers still may not be declared by the caller.
    let mut options = agent.options();
    options.hidden_tools.clear();
    agent.set_options(options);
    let mut clash = lookup();
    clash.name = "clock".into();
    assert_eq!(
        agent.prompt_with_tools(PROMPT, vec![clash]).unwrap_err(),
        ExternalToolsError::NameTaken("clock".into())
    );
}

/// ACT-3: the marker's `executor` is additive: an old marker without it reads as the
/// host's.
#[test]
fn act_3_old_tool_call_markers_still_read() {
    let old: ToolCall =
        serde_json::from_value(json!({"turn": 1, "step": 1, "call_id": "a", "name": "t"})).unwrap();
    assert_eq!(old.executor, None);
    let new: ToolCall = serde_json::from_value(
        json!({"turn": 1, "step": 1, "call_id": "a", "name": "t", "executor": "caller"}),
    )
    .unwrap();
    assert_eq!(new.executor, Some(Executor::Caller));
    assert!(
        !serde_json::to_string(&old).unwrap().contains("executor"),
        "a host call is written as before"
    );
}

/// ACT-3: a cancel of an awaiting turn answers the open calls with
/// `ABORTED_BEFORE_DISPATCH` and ends the turn `aborted`. A prompt queued while the
/// step awaits does not start a turn; kept through the cancel, it runs next.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn act_3_cancel_of_an_awaiting_turn_aborts_the_open_calls() {
    let dir = tempfile::tempdir().unwrap();
    let kit = kit(
        dir.path(),
        &format!(
            "{}\n{{\"text\": \"next turn\"}}",
            TWO_CALLS.lines().next().unwrap()
        ),
    );
    let session = kit.session().await.unwrap();
    let agent = kit.agent(&session, MODEL);
    agent.prompt_with_tools(PROMPT, vec![lookup()]).unwrap();
    wait_awaiting(&agent).await;
    agent.prompt("and then?");
    assert_eq!(agent.when_idle().await, None);
    assert_eq!(kinds(&session), AWAITING_KINDS, "no turn started meanwhile");

    agent.cancel(CancelCause::User, true).await;
    let mut expected: Vec<String> = strs(&AWAITING_KINDS);
    expected.extend(strs(&[
        "tool/result",
        "tool/result",
        "step/end",
        "turn/end",
    ]));
    let after_cancel = kinds(&session);
    assert_eq!(after_cancel[..expected.len()], expected[..]);
    let answers = events_of(&session, "tool/result");
    for (answer, id) in answers.iter().zip(["c1", "c2"]) {
        assert_eq!(answer["error"]["code"], ABORTED_BEFORE_DISPATCH);
        assert_eq!(answer["message"]["content"][0]["call_id"], id);
        assert_eq!(answer["message"]["content"][0]["is_error"], true);
    }
    assert_eq!(
        events_of(&session, "step/end")[0],
        json!({"turn": 1, "step": 1, "interrupted": true})
    );
    let turn_end = &events_of(&session, "turn/end")[0];
    assert_eq!(turn_end["turn"], 1);
    assert_eq!(turn_end["reason"]["kind"], "aborted");
    assert!(agent.awaiting_tools().is_empty());
    // The kept prompt runs as turn 2.
    assert_eq!(agent.when_idle().await, Some(TurnEndReason::Completed));
    let ends = events_of(&session, "turn/end");
    assert_eq!(ends.len(), 2);
    assert_eq!(ends[1]["turn"], 2);
}

/// ACT-3: a mixed step runs the local call at once and waits for the caller's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn act_3_a_mixed_step_runs_the_local_call_and_awaits_the_callers() {
    let dir = tempfile::tempdir().unwrap();
    let kit = kit(dir.path(), MIXED);
    let session = kit.session().await.unwrap();
    let agent = kit.agent(&session, MODEL);
    agent.prompt_with_tools(PROMPT, vec![lookup()]).unwrap();
    assert_eq!(wait_awaiting(&agent).await, strs(&["c2"]));
    assert_eq!(
        kinds(&session)[5..],
        strs(&["assistant/message", "tool/call", "tool/result", "tool/call"])[..]
    );
    let markers = events_of(&session, "tool/call");
    assert_eq!(markers[0]["call_id"], "l1");
    assert!(markers[0].get("executor").is_none());
    assert_eq!(markers[1]["call_id"], "c2");
    assert_eq!(markers[1]["executor"], "caller");
    let local = &events_of(&session, "tool/result")[0];
    assert_eq!(local["message"]["content"][0]["call_id"], "l1");
    assert_eq!(
        local["message"]["content"][0]["content"][0]["text"],
        "12:00"
    );

    agent.tool_results(results(&[("c2", "X")])).await.unwrap();
    assert_eq!(agent.when_idle().await, Some(TurnEndReason::Completed));
    let answers = events_of(&session, "tool/result");
    assert_eq!(answers.len(), 2);
    assert_eq!(answers[1]["message"]["content"][0]["call_id"], "c2");
    let texts = kit.script().requests();
    assert_eq!(texts.len(), 2);
}

// -------------------------------------------------------------------------------------
// Across a crash
// -------------------------------------------------------------------------------------

/// The child: runs the turn until it awaits, reports the durable head, and waits to be
/// killed. A no-op unless the parent set `CHILD_ENV`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn external_child_entry() {
    let (Ok(_), Some(dir)) = (std::env::var(CHILD_ENV), std::env::var_os(DIR_ENV)) else {
        return;
    };
    let kit = kit(Path::new(&dir), TWO_CALLS);
    let session = kit
        .sessions()
        .create(Some(session_id()), JsonObject::new())
        .await
        .unwrap();
    let agent = kit.agent(&session, MODEL);
    agent.prompt_with_tools(PROMPT, vec![lookup()]).unwrap();
    wait_awaiting(&agent).await;
    session.flush().await.unwrap();
    let stored = kit
        .sessions()
        .store()
        .session(&session_id())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(stored.head, session.head());
    println!("\n{MARKER} {}", stored.head);
    std::future::pending::<()>().await;
}

fn run_and_kill(dir: &Path) -> u64 {
    let head = crate::child::kill_at_marker(
        "external::external_child_entry",
        &[(CHILD_ENV, "await".as_ref()), (DIR_ENV, dir.as_os_str())],
        MARKER,
        Duration::ZERO,
    );
    head.parse().unwrap()
}

/// ACT-3 across a crash: the turn awaits two caller calls, the process is killed with
/// SIGKILL; a new process opens the session and finds it still awaiting (repair
/// appended nothing, no `TOOL_NOT_STARTED`), refuses wrong ids logging nothing, takes
/// the results and finishes the turn.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn act_3_an_awaiting_turn_survives_kill_9_and_finishes_in_a_new_process() {
    let dir = tempfile::tempdir().unwrap();
    let durable_head = run_and_kill(dir.path());
    let kit = kit(dir.path(), FINISH);
    let session = kit.open(&session_id()).await.unwrap();
    assert_eq!(session.head(), durable_head, "repair appended nothing");
    assert_eq!(kinds(&session), AWAITING_KINDS);
    assert!(
        events_of(&session, "tool/result")
            .iter()
            .all(|result| result["error"]["code"] != TOOL_NOT_STARTED)
    );
    assert_caller_markers(&session, &["c1", "c2"]);
    // Opening it again (another reload) still changes nothing.
    drop(session);
    let session = kit.open(&session_id()).await.unwrap();
    assert_eq!(session.head(), durable_head);

    let agent = kit.agent(&session, MODEL);
    agent.restore_inbox().await.unwrap();
    assert_eq!(agent.awaiting_tools(), strs(&["c1", "c2"]));
    assert_eq!(agent.when_idle().await, None);
    assert_refused(&agent, &session).await;

    let before = kinds(&session).len();
    agent
        .tool_results(results(&[("c1", "A"), ("c2", "B")]))
        .await
        .unwrap();
    assert_eq!(agent.when_idle().await, Some(TurnEndReason::Completed));
    assert_resumed_tail(&session, before, true);
    // The new process's request carried the turn's tool (read back from the log) and
    // both results.
    let requests = kit.script().requests();
    assert_eq!(requests.len(), 1);
    assert!(
        requests[0]
            .config
            .tools
            .iter()
            .any(|tool| tool.name == "lookup")
    );
    // The stored log is what a third process reads.
    drop(agent);
    drop(session);
    let reread = kit.open(&session_id()).await.unwrap();
    assert_eq!(kinds(&reread).len(), before + 8);
    assert_eq!(
        events_of(&reread, "turn/end")[0]["reason"],
        json!({"kind": "completed"})
    );
}

/// ACT-3 with ACT-4: a caller that sends the results the moment the stream says the
/// turn awaits them (before the driver has let go of the step) is accepted, not
/// refused with `TOOL_RESULTS_MISMATCH`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn act_3_results_sent_on_the_awaiting_tools_item_are_accepted() {
    for _ in 0..5 {
        let dir = tempfile::tempdir().unwrap();
        let kit = kit(dir.path(), TWO_CALLS);
        let session = kit.session().await.unwrap();
        let agent = kit.agent(&session, MODEL);
        let mut stream = agent.subscribe_from(Some(session.head()));
        agent.prompt_with_tools(PROMPT, vec![lookup()]).unwrap();
        let call_ids = loop {
            match tokio::time::timeout(Duration::from_secs(10), stream.next())
                .await
                .unwrap()
            {
                Some(ccare_agent::StreamItem::AwaitingTools { call_ids, .. }) => break call_ids,
                Some(_) => {}
                None => panic!("the stream ended"),
            }
        };
        assert_eq!(call_ids, strs(&["c1", "c2"]));
        agent
            .tool_results(results(&[("c1", "A"), ("c2", "B")]))
            .await
            .unwrap();
        assert_eq!(agent.when_idle().await, Some(TurnEndReason::Completed));
        assert_resumed_tail(&session, AWAITING_KINDS.len(), false);
    }
}

/// ACT-2 on the resume path of ACT-3: a resumed turn cancelled without keep-inbox
/// drops the prompt queued while it awaited; the agent reports idle (and the cancel
/// returns) only once that deletion is durable, as the driver does for the turns it
/// runs — so a front end that exits at idle never leaves a dropped prompt for the next
/// process to run.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn act_3_a_resumed_turn_reports_idle_only_once_its_inbox_is_durable() {
    let store = Arc::new(ccare_agent::testing::FailingStore::default());
    let script = format!(
        "{}\n{{\"text\": \"one two three four five six seven eight nine ten\", \"delay_ms\": 30}}",
        TWO_CALLS.lines().next().unwrap()
    );
    let kit = TestHost::builder(&script)
        .store(store.clone())
        .build()
        .unwrap();
    let session = kit.session().await.unwrap();
    let id = session.id().clone();
    let agent = kit.agent(&session, MODEL);
    agent.prompt_with_tools(PROMPT, vec![lookup()]).unwrap();
    wait_awaiting(&agent).await;
    agent
        .send(ccare_agent::Command::prompt("dropped by the cancel"))
        .await
        .unwrap();
    agent
        .tool_results(results(&[("c1", "A"), ("c2", "B")]))
        .await
        .unwrap();
    // The resumed step streams; its row deletions will not be acknowledged for now.
    store.hold_kv_writes();
    let cancelling = {
        let agent = agent.clone();
        tokio::spawn(async move { agent.cancel(CancelCause::User, false).await })
    };
    let idle = {
        let agent = agent.clone();
        tokio::spawn(async move { agent.when_idle().await })
    };
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(
        events_of(&session, "turn/end").last().unwrap()["reason"]["kind"],
        "aborted",
        "the turn ended"
    );
    assert!(
        !idle.is_finished(),
        "idle reported before the inbox is durable"
    );
    assert!(
        !cancelling.is_finished(),
        "cancel returned before the inbox is durable"
    );
    store.release_kv_writes();
    cancelling.await.unwrap();
    assert!(matches!(
        idle.await.unwrap(),
        Some(TurnEndReason::Aborted { .. })
    ));
    // Another process on the store finds nothing to run.
    drop(agent);
    drop(session);
    drop(kit);
    let next = TestHost::builder("").store(store.clone()).build().unwrap();
    let session = next.open(&id).await.unwrap();
    let agent = next.agent(&session, MODEL);
    assert_eq!(agent.restore_inbox().await.unwrap(), 0);
    assert!(
        events_of(&session, "user/message")
            .iter()
            .all(|message| message["message"]["content"][0]["text"] != "dropped by the cancel")
    );
}

/// ACT-3: a cancel that lands exactly as a turn starts awaiting tools (sent the moment
/// the stream says so, while the driver may still be letting go of the step) answers
/// the open calls `ABORTED_BEFORE_DISPATCH` and ends the turn `aborted`, like a cancel
/// of a turn that has long been awaiting.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn act_3_a_cancel_landing_as_the_turn_starts_awaiting_aborts_the_open_calls() {
    for _ in 0..10 {
        let dir = tempfile::tempdir().unwrap();
        let kit = kit(dir.path(), TWO_CALLS.lines().next().unwrap());
        let session = kit.session().await.unwrap();
        let agent = kit.agent(&session, MODEL);
        let mut stream = agent.subscribe_from(Some(session.head()));
        agent.prompt_with_tools(PROMPT, vec![lookup()]).unwrap();
        loop {
            match tokio::time::timeout(Duration::from_secs(10), stream.next())
                .await
                .unwrap()
            {
                Some(ccare_agent::StreamItem::AwaitingTools { .. }) => break,
                Some(_) => {}
                None => panic!("the stream ended"),
            }
        }
        tokio::time::timeout(
            Duration::from_secs(10),
            agent.cancel(CancelCause::User, false),
        )
        .await
        .expect("the cancel returns");
        let mut expected: Vec<String> = strs(&AWAITING_KINDS);
        expected.extend(strs(&[
            "tool/result",
            "tool/result",
            "step/end",
            "turn/end",
        ]));
        assert_eq!(kinds(&session), expected);
        let answers = events_of(&session, "tool/result");
        for (answer, id) in answers.iter().zip(["c1", "c2"]) {
            assert_eq!(answer["error"]["code"], ABORTED_BEFORE_DISPATCH);
            assert_eq!(answer["message"]["content"][0]["call_id"], id);
        }
        assert_eq!(
            events_of(&session, "step/end")[0],
            json!({"turn": 1, "step": 1, "interrupted": true})
        );
        assert_eq!(
            events_of(&session, "turn/end")[0]["reason"],
            json!({"kind": "aborted", "cause": {"kind": "user"}})
        );
        assert!(agent.awaiting_tools().is_empty());
        assert!(matches!(
            agent.when_idle().await,
            Some(TurnEndReason::Aborted { .. })
        ));
    }
}
