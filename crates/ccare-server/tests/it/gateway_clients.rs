//! Agents we did not write, through the gateway (server.md GW-1..GW-4, GW-7): the
//! OpenAI Agents SDK running a tool-using agent for two runs, and Aider editing a file
//! in a temporary git repository. Each client is the real package from PyPI at an
//! exact pin, installed once into its own venv under `target/`; outside CI a missing
//! Python or PyPI skips the test with a printed note, in CI it fails.

use std::path::Path;
use std::process::{Command, Stdio};

use ccare_core::{ContentBlock, Event, Source};
use ccare_fake_openai::{Reply, Script};
use ccare_session::Decoded;
use ccare_store::{ReadRange, SessionQuery};
use serde::Deserialize;
use serde_json::{Value, json};

use crate::gateway::{python_venv, run_client};
use crate::rig::Rig;

/// The OpenAI Agents SDK the agents test pins, with the `openai` SDK it runs on.
const AGENTS_SDK: [&str; 2] = ["openai-agents==0.24.0", "openai==3.57.0"];

/// The Aider release the Aider test pins.
const AIDER: [&str; 1] = ["aider-chat==0.86.2"];

/// What the agents script prints.
#[derive(Debug, Deserialize)]
struct AgentsOut {
    /// Each run's `final_output`.
    outputs: Vec<String>,
    /// The city of each of the tool's invocations, in order.
    ran: Vec<String>,
    /// Every HTTP response the SDK got.
    responses: Vec<SeenResponse>,
    /// The items of the second run's `to_input_list()`.
    items: usize,
}

/// One HTTP response a client got.
#[derive(Debug, Deserialize)]
struct SeenResponse {
    path: String,
    status: u16,
    session: Option<String>,
}

/// The session's committed events, read back from the store and decoded.
async fn stored_events(rig: &Rig, id: &str) -> Vec<Decoded> {
    let id = ccare_core::SessionId::new(id.to_owned()).unwrap();
    rig.store()
        .read(&id, ReadRange::all())
        .await
        .unwrap()
        .iter()
        .map(|row| ccare_session::decode(&Event::parse(row.json.clone()).unwrap()).unwrap())
        .collect()
}

/// The text blocks of `blocks`, joined.
fn text_of(blocks: &[ContentBlock]) -> String {
    blocks
        .iter()
        .filter_map(|block| match block {
            ContentBlock::Text(text) => Some(text.text.as_str()),
            _ => None,
        })
        .collect()
}

/// The texts of the user messages the client sent (context care's notices left out).
fn client_messages(events: &[Decoded]) -> Vec<String> {
    events
        .iter()
        .filter_map(|event| match event {
            Decoded::UserMessage(message)
                if matches!(message.source, None | Some(Source::User { .. })) =>
            {
                Some(text_of(&message.content))
            }
            _ => None,
        })
        .collect()
}

/// The ids of the sessions in the store.
async fn stored_sessions(rig: &Rig) -> Vec<String> {
    rig.store()
        .list_sessions(SessionQuery::default())
        .await
        .unwrap()
        .iter()
        .map(|record| record.id.as_str().to_owned())
        .collect()
}

/// GW-1, GW-2 and GW-4 with the OpenAI Agents SDK on chat completions: an agent with
/// one function tool runs twice (the second run continues the first's items with a new
/// question). The model calls the tool (once, then twice in parallel); the SDK runs it
/// and sends the results back; both runs stay one gateway session, whose log holds the
/// calls handed to the client and the client's results.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gw_4_the_openai_agents_sdk_runs_a_tool_agent_through_the_gateway() {
    let Some(python) = tokio::task::spawn_blocking(|| python_venv("agents-venv", &AGENTS_SDK))
        .await
        .unwrap()
    else {
        return;
    };
    let rig = Rig::start().await;
    rig.fake.push(Reply::Chunks(
        Script::new()
            .tool_call(
                0,
                Some("call_paris"),
                Some("get_weather"),
                "{\"city\":\"Paris\"}",
            )
            .finish("tool_calls"),
    ));
    rig.fake.push(Reply::text("Sunny, 20C in Paris."));
    rig.fake.push(Reply::Chunks(
        Script::new()
            .tool_call(
                0,
                Some("call_rome"),
                Some("get_weather"),
                "{\"city\":\"Rome\"}",
            )
            .tool_call(
                1,
                Some("call_oslo"),
                Some("get_weather"),
                "{\"city\":\"Oslo\"}",
            )
            .finish("tool_calls"),
    ));
    rig.fake.push(Reply::text("Rome 25C, Oslo 8C."));
    let out = run_client(
        &rig,
        python,
        "agents_sdk.py",
        vec![("GW_MODEL", "openai/fake/model".to_owned())],
    )
    .await;
    let out: AgentsOut = serde_json::from_value(out).unwrap();
    assert_eq!(
        out.outputs,
        vec!["Sunny, 20C in Paris.", "Rome 25C, Oslo 8C."]
    );
    assert_eq!(out.ran, vec!["Paris", "Rome", "Oslo"]);
    // The second run's items: the first question, its call, result and answer, the
    // follow-up, its two calls, two results and the answer.
    assert_eq!(out.items, 10);

    // Four gateway answers, one session.
    assert_eq!(out.responses.len(), 4, "{:?}", out.responses);
    let session = out.responses[0].session.clone().unwrap();
    for response in &out.responses {
        assert_eq!(
            (response.path.as_str(), response.status),
            ("/v1/chat/completions", 200)
        );
        assert_eq!(response.session.as_deref(), Some(session.as_str()));
    }
    assert_eq!(stored_sessions(&rig).await, vec![session.clone()]);

    // Upstream: one conversation request per SDK request, the client's results in the
    // requests after the calls.
    let requests = rig.fake.requests();
    assert_eq!(requests.len(), 4);
    for request in &requests {
        assert_eq!(request.header("x-ccare-purpose"), Some("conversation"));
        assert_eq!(request.body["model"], "model");
    }
    // `tool_choice="required"` until the tool ran: those requests offer only the
    // client's tool, the others the gateway-owned ones as well.
    let choices: Vec<(&Value, usize)> = requests
        .iter()
        .map(|request| {
            (
                &request.body["tool_choice"],
                request.body["tools"].as_array().map_or(0, Vec::len),
            )
        })
        .collect();
    let required = Value::from("required");
    assert_eq!(
        choices,
        [
            (&required, 1),
            (&Value::Null, 5),
            (&required, 1),
            (&Value::Null, 5)
        ]
    );
    let tool_messages = |index: usize| -> Vec<(String, String)> {
        requests[index].body["messages"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|message| message["role"] == "tool")
            .map(|message| {
                (
                    message["tool_call_id"].as_str().unwrap().to_owned(),
                    message["content"].to_string(),
                )
            })
            .collect()
    };
    assert!(tool_messages(0).is_empty());
    assert_eq!(tool_messages(1).len(), 1);
    assert_eq!(tool_messages(1)[0].0, "call_paris");
    assert!(tool_messages(1)[0].1.contains("sunny, 20C in Paris"));
    let last = tool_messages(3);
    assert_eq!(
        last.iter().map(|(id, _)| id.as_str()).collect::<Vec<_>>(),
        vec!["call_paris", "call_rome", "call_oslo"]
    );
    assert!(last[1].1.contains("sunny, 25C in Rome") && last[2].1.contains("sunny, 8C in Oslo"));

    // The store: two turns; the calls were handed to the caller with the scripted
    // arguments, and the SDK's results are recorded for them.
    let events = stored_events(&rig, &session).await;
    let users = client_messages(&events);
    assert_eq!(users.len(), 2, "{users:?}");
    assert!(
        users[0].contains("What is the weather in Paris?"),
        "{users:?}"
    );
    assert!(users[1].ends_with("And in Rome and Oslo?"), "{users:?}");
    let calls: Vec<(String, String, Value, bool)> = events
        .iter()
        .filter_map(|event| match event {
            Decoded::ToolCall(call) => Some((
                call.call_id.clone(),
                call.name.clone(),
                call.arguments.clone(),
                call.executor == Some(ccare_core::kinds::Executor::Caller),
            )),
            _ => None,
        })
        .collect();
    assert_eq!(
        calls,
        vec![
            (
                "call_paris".to_owned(),
                "get_weather".to_owned(),
                json!({"city": "Paris"}),
                true
            ),
            (
                "call_rome".to_owned(),
                "get_weather".to_owned(),
                json!({"city": "Rome"}),
                true
            ),
            (
                "call_oslo".to_owned(),
                "get_weather".to_owned(),
                json!({"city": "Oslo"}),
                true
            ),
        ]
    );
    let results: Vec<(String, String)> = events
        .iter()
        .filter_map(|event| match event {
            Decoded::ToolResult {
                call_id, message, ..
            } => Some((
                call_id.clone(),
                message
                    .tool_results()
                    .map(|block| text_of(&block.content))
                    .collect(),
            )),
            _ => None,
        })
        .collect();
    assert_eq!(
        results,
        vec![
            ("call_paris".to_owned(), "sunny, 20C in Paris".to_owned()),
            ("call_rome".to_owned(), "sunny, 25C in Rome".to_owned()),
            ("call_oslo".to_owned(), "sunny, 8C in Oslo".to_owned()),
        ]
    );
    let turn_ends = events
        .iter()
        .filter(|event| matches!(event, Decoded::TurnEnd(_)))
        .count();
    assert_eq!(turn_ends, 2);
}

/// The file the Aider test edits, as committed.
const HELLO_BEFORE: &str = "def greet():\n    return \"hello\"\n";
/// The file as the fake model rewrites it.
const HELLO_AFTER: &str = "def greet():\n    return \"hello, gateway\"\n";
/// What Aider is asked.
const AIDER_ASK: &str = "Make greet return \"hello, gateway\".";

/// `git` in `dir` with `args`, asserting it succeeds; its stdout.
fn git(dir: &Path, args: &[&str]) -> String {
    let output = Command::new("git")
        .args(args)
        .current_dir(dir)
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "git {args:?}: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8_lossy(&output.stdout).into_owned()
}

/// A git repository at `dir` with `hello.py` committed.
fn hello_repo(dir: &Path) {
    std::fs::create_dir_all(dir).unwrap();
    git(dir, &["init", "-q"]);
    git(dir, &["config", "user.email", "test@example.invalid"]);
    git(dir, &["config", "user.name", "test"]);
    std::fs::write(dir.join("hello.py"), HELLO_BEFORE).unwrap();
    git(dir, &["add", "hello.py"]);
    git(dir, &["commit", "-q", "-m", "hello"]);
}

/// GW-1 and GW-3 with Aider: in a temporary git repository with one file, Aider
/// (offline: no update check, no analytics, the model's metadata from a local file,
/// LiteLLM's bundled cost map) sends its request through the gateway, assistant
/// messages it wrote itself included; the fake model answers with the file in Aider's
/// `whole` edit format, and the file on disk is edited exactly so, uncommitted. The
/// gateway session's log holds Aider's request and the answer.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gw_1_aider_edits_a_file_through_the_gateway() {
    let Some(python) = tokio::task::spawn_blocking(|| python_venv("aider-venv", &AIDER))
        .await
        .unwrap()
    else {
        return;
    };
    let aider = python.with_file_name("aider");
    let rig = Rig::start().await;
    rig.fake.push(Reply::text(&format!(
        "hello.py\n```python\n{HELLO_AFTER}```\n"
    )));
    let work = tempfile::tempdir().unwrap();
    let repo = work.path().join("repo");
    hello_repo(&repo);
    let home = work.path().join("home");
    std::fs::create_dir_all(&home).unwrap();
    let metadata = work.path().join("model-metadata.json");
    std::fs::write(
        &metadata,
        json!({"openai/fake/model": {
            "max_input_tokens": 16000, "max_output_tokens": 1000,
            "input_cost_per_token": 0, "output_cost_per_token": 0,
            "litellm_provider": "openai", "mode": "chat",
        }})
        .to_string(),
    )
    .unwrap();
    let mut command = Command::new(aider);
    command
        .current_dir(&repo)
        .env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .env("HOME", &home)
        .env("LITELLM_LOCAL_MODEL_COST_MAP", "True")
        .env("OPENAI_API_BASE", format!("{}/v1", rig.base))
        .env("OPENAI_API_KEY", &rig.token)
        .args(["--model", "openai/fake/model", "--model-metadata-file"])
        .arg(&metadata)
        .args(["--message", AIDER_ASK])
        .args([
            "--yes-always",
            "--no-auto-commits",
            "--no-check-update",
            "--no-show-model-warnings",
            "--no-show-release-notes",
            "--analytics-disable",
            "--no-gitignore",
            "--no-pretty",
            "--no-fancy-input",
            "--no-auto-lint",
            "--edit-format",
            "whole",
            "--map-tokens",
            "0",
            "--input-history-file",
        ])
        .arg(work.path().join("input.history"))
        .arg("--chat-history-file")
        .arg(work.path().join("chat.history.md"))
        .arg("hello.py")
        .stdin(Stdio::null());
    let output = tokio::task::spawn_blocking(move || command.output().unwrap())
        .await
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{stdout}\n{stderr}");
    assert!(
        stdout.contains("Applied edit to hello.py"),
        "{stdout}\n{stderr}"
    );
    assert_eq!(
        std::fs::read_to_string(repo.join("hello.py")).unwrap(),
        HELLO_AFTER
    );
    // Not committed (`--no-auto-commits`): the one commit, the file modified.
    assert_eq!(git(&repo, &["rev-list", "--count", "HEAD"]).trim(), "1");
    assert_eq!(git(&repo, &["status", "--porcelain"]), " M hello.py\n");

    // Offline: the model's metadata came from the file, nothing was fetched.
    assert!(
        !stdout.contains("model_prices_and_context_window") && !stdout.contains("Connection"),
        "{stdout}"
    );

    // One upstream request. Aider's own assistant messages (its few-shot example and
    // "Ok, ..." acknowledgements) went in as text with the rest: the file as it was,
    // then the question.
    let requests = rig.fake.requests();
    assert_eq!(requests.len(), 1);
    assert_eq!(requests[0].header("x-ccare-purpose"), Some("conversation"));
    let entered: Vec<String> = requests[0].body["messages"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|message| message["role"] == "user")
        .map(|message| message["content"].to_string())
        .filter(|text| text.contains("Make greet return"))
        .collect();
    assert_eq!(entered.len(), 1, "{entered:?}");
    let text = &entered[0];
    let at = |needle: &str| {
        text.find(needle)
            .unwrap_or_else(|| panic!("{needle}: {text}"))
    };
    assert!(at("return \\\"hello\\\"") < at("Ok, any changes I propose"));
    assert!(at("Ok, any changes I propose") < at("Make greet return"));
    // The request went through the gateway: one gateway session, whose log holds
    // Aider's request and the scripted answer.
    let sessions = stored_sessions(&rig).await;
    assert_eq!(sessions.len(), 1);
    let events = stored_events(&rig, &sessions[0]).await;
    let users = client_messages(&events);
    assert_eq!(users.len(), 1, "{users:#?}");
    assert!(users[0].contains(AIDER_ASK), "{users:?}");
    let answers: Vec<String> = events
        .iter()
        .filter_map(|event| match event {
            Decoded::AssistantMessage { message, .. } => Some(text_of(&message.content)),
            _ => None,
        })
        .collect();
    assert_eq!(
        answers,
        vec![format!("hello.py\n```python\n{HELLO_AFTER}```\n")]
    );
}
