//! The agent loop in real composition: SQLite store, the scripted provider, the log
//! read back (spec H-LOOP-5/6, H-HOOK-2/5/7, H-TOOL-1/2, H-CANCEL-1/2/3).

#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use ccare_agent::testing::{TestHost, events_of, kinds};
use ccare_agent::{
    Agent, BoxFuture, CancelCause, Concurrency, HookContext, HookError, Host, Plugin, PluginScope,
    PreStepDecision, PreStepHook, PreStepInput, PreStepNext, RequestErrorDecision, SystemSection,
    Tool, ToolContext, ToolDef, ToolOutcome,
};
use ccare_core::kinds::TurnEndReason;
use ccare_core::{ContentBlock, Message, Role, Source, SystemClock};
use ccare_llm::ToolSpec;
use ccare_llm::script::ScriptProvider;
use ccare_session::Session;
use serde_json::{Value, json};

/// The kernel's test host with the `echo` tool, and a fresh session.
struct Kit {
    host: Arc<Host>,
    script: ScriptProvider,
    session: Session,
    test: TestHost,
}

async fn kit(script: &str) -> Kit {
    let kit = TestHost::builder(script).build().unwrap();
    kit.host()
        .add_tool(Arc::new(Echo::new("echo", Concurrency::ParallelSafe, 0)))
        .unwrap();
    let session = kit.session().await.unwrap();
    Kit {
        host: Arc::clone(kit.host()),
        script: kit.script().clone(),
        session,
        test: kit,
    }
}

fn agent(kit: &Kit) -> Agent {
    kit.test.agent(&kit.session, "s/scripted")
}

/// Echoes `text` after `delay_ms`.
struct Echo {
    def: ToolDef,
    delay_ms: u64,
    calls: Arc<AtomicUsize>,
}

impl Echo {
    fn new(name: &str, concurrency: Concurrency, delay_ms: u64) -> Self {
        Self {
            def: ToolDef {
                spec: ToolSpec {
                    name: name.into(),
                    description: "echoes text".into(),
                    input_schema: json!({"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"], "additionalProperties": false}).into(),
                },
                concurrency,
                timeout_ms: None,
                validates_own_arguments: false,
            },
            delay_ms,
            calls: Arc::new(AtomicUsize::new(0)),
        }
    }
}

impl Tool for Echo {
    fn def(&self) -> &ToolDef {
        &self.def
    }

    fn call(&self, _context: ToolContext, arguments: Value) -> BoxFuture<'static, ToolOutcome> {
        let delay = self.delay_ms;
        self.calls.fetch_add(1, Ordering::SeqCst);
        Box::pin(async move {
            tokio::time::sleep(Duration::from_millis(delay)).await;
            Ok(vec![ContentBlock::text(
                arguments["text"].as_str().unwrap_or_default(),
            )])
        })
    }
}

const TOOL_TURN: &str = r#"
{"tool_calls": [{"name": "echo", "arguments": {"text": "pong"}, "id": "c1"}]}
{"text": "The tool said pong."}
"#;

#[tokio::test]
async fn h_loop_5_a_two_step_turn_with_one_tool_call_logs_exactly() {
    let kit = kit(TOOL_TURN).await;
    let agent = agent(&kit);
    agent.prompt("ping it");
    let end = agent.when_idle().await;
    assert_eq!(end, Some(TurnEndReason::Completed));
    assert_eq!(
        kinds(&kit.session),
        [
            "turn/start",
            "user/message",
            "step/start",
            "request/header",
            "request/context",
            "assistant/message",
            "tool/call",
            "tool/result",
            "step/end",
            "step/start",
            "assistant/message",
            "step/end",
            "turn/end",
        ]
    );
    let header = &events_of(&kit.session, "request/header")[0];
    assert_eq!(header["reason"], "initial");
    assert_eq!(header["header"]["tools"][0]["name"], "echo");
    let result = &events_of(&kit.session, "tool/result")[0];
    assert_eq!(
        result["message"]["content"][0]["content"][0]["text"],
        "pong"
    );
    let answers = events_of(&kit.session, "assistant/message");
    assert_eq!(answers[0]["finish"], "tool-calls");
    assert_eq!(
        answers[1]["message"]["content"][0]["text"],
        "The tool said pong."
    );
    assert_eq!(answers[1]["provider"], "s");
    // H-LLM: the second request pairs the call with its result.
    let requests = kit.script.requests();
    assert_eq!(requests.len(), 2);
    let roles: Vec<Role> = requests[1]
        .config
        .messages
        .iter()
        .map(|message| message.role)
        .collect();
    assert_eq!(roles, [Role::User, Role::Assistant, Role::User]);
    // Reopening from the store gives the same log.
    let reopened = kit.host.sessions().load(kit.session.id()).await.unwrap();
    assert_eq!(reopened.log.head(), kit.session.head());
}

struct Rejecter;

impl PreStepHook for Rejecter {
    fn call<'a>(
        &'a self,
        _context: &'a HookContext,
        _input: PreStepInput,
        _next: PreStepNext<'a>,
    ) -> BoxFuture<'a, Result<PreStepDecision, HookError>> {
        Box::pin(async {
            Ok(PreStepDecision::Reject {
                by: "guard".into(),
                detail: "not today".into(),
            })
        })
    }
}

struct Guard;

impl Plugin for Guard {
    fn name(&self) -> &str {
        "guard"
    }

    fn mount(
        &self,
        _config: &Value,
        scope: &mut PluginScope<'_>,
    ) -> Result<(), ccare_agent::MountError> {
        scope.pre_step(Arc::new(Rejecter), false);
        Ok(())
    }
}

#[tokio::test]
async fn h_hook_2_a_pre_step_reject_blocks_the_turn_and_keeps_the_prompt() {
    let kit = kit("{\"text\": \"never\"}").await;
    kit.host.mount(&Guard, &json!({})).unwrap();
    let agent = agent(&kit);
    agent.prompt("hello");
    let end = agent.when_idle().await;
    assert_eq!(
        end,
        Some(TurnEndReason::Blocked {
            by: "guard".into(),
            detail: "not today".into(),
            unentered: vec![]
        })
    );
    assert_eq!(
        kinds(&kit.session),
        ["turn/start", "user/message", "turn/end"]
    );
    assert!(kit.script.requests().is_empty());
    // Unmounting removes the hook: the next turn runs.
    assert!(kit.host.unmount("guard"));
    agent.prompt("again");
    assert_eq!(agent.when_idle().await, Some(TurnEndReason::Completed));
}

/// Adds a message; as outermost, records what the inner chain entered.
struct Adder {
    text: &'static str,
    seen: Arc<parking_lot::Mutex<Vec<String>>>,
}

impl PreStepHook for Adder {
    fn call<'a>(
        &'a self,
        _context: &'a HookContext,
        mut input: PreStepInput,
        next: PreStepNext<'a>,
    ) -> BoxFuture<'a, Result<PreStepDecision, HookError>> {
        Box::pin(async move {
            let mut message = Message::from_blocks(vec![ContentBlock::text(self.text)]);
            message.source = Some(Source::plugin_notice("adder"));
            input.messages.push(message);
            let decision = next.run(input).await?;
            if let PreStepDecision::Enter(messages) = &decision {
                let texts = messages
                    .iter()
                    .map(|message| match &message.content[0] {
                        ContentBlock::Text(text) => text.text.clone(),
                        _ => String::new(),
                    })
                    .collect::<Vec<_>>()
                    .join(",");
                self.seen.lock().push(format!("{}:{texts}", self.text));
            }
            Ok(decision)
        })
    }
}

struct Adders(Arc<parking_lot::Mutex<Vec<String>>>);

impl Plugin for Adders {
    fn name(&self) -> &str {
        "adders"
    }

    fn mount(
        &self,
        _config: &Value,
        scope: &mut PluginScope<'_>,
    ) -> Result<(), ccare_agent::MountError> {
        scope.pre_step(
            Arc::new(Adder {
                text: "inner",
                seen: Arc::clone(&self.0),
            }),
            false,
        );
        scope.pre_step(
            Arc::new(Adder {
                text: "outer",
                seen: Arc::clone(&self.0),
            }),
            true,
        );
        scope.system_section(SystemSection {
            name: "rules".into(),
            order: 0,
            text: "Be kind.".into(),
        });
        Ok(())
    }
}

#[tokio::test]
async fn h_hook_1_the_outermost_pre_step_hook_sees_what_inner_hooks_entered() {
    let kit = kit("{\"text\": \"ok\"}").await;
    let seen = Arc::new(parking_lot::Mutex::new(Vec::new()));
    kit.host
        .mount(&Adders(Arc::clone(&seen)), &json!({}))
        .unwrap();
    let agent = agent(&kit);
    agent.prompt("hi");
    assert_eq!(agent.when_idle().await, Some(TurnEndReason::Completed));
    assert_eq!(*seen.lock(), ["inner:outer,inner", "outer:outer,inner"]);
    // H-LOOP-7: entered messages come after step/start and before the request header.
    assert_eq!(
        kinds(&kit.session)[..6],
        [
            "turn/start",
            "user/message",
            "step/start",
            "user/message",
            "user/message",
            "request/header"
        ]
    );
    let request = &kit.script.requests()[0];
    assert_eq!(request.config.system.as_deref(), Some("Be kind."));
    assert_eq!(
        request.config.messages.len(),
        3,
        "prompt and two notices, never merged"
    );
    assert!(kit.host.unmount("adders"));
    assert_eq!(kit.host.system_prompt(), None);
}

#[tokio::test]
async fn h_hook_5_a_request_error_hook_retry_redispatches_exactly_once() {
    let kit = kit("{\"failure\": {\"code\": \"CONTEXT_WINDOW_EXCEEDED\", \"message\": \"too long\"}}\n{\"text\": \"fits now\"}").await;
    struct RetryOnce;
    impl Plugin for RetryOnce {
        fn name(&self) -> &str {
            "retry"
        }
        fn mount(
            &self,
            _config: &Value,
            scope: &mut PluginScope<'_>,
        ) -> Result<(), ccare_agent::MountError> {
            scope.request_error(Arc::new(
                |_: &HookContext, failure: &ccare_llm::LlmFailure, attempt: u32| {
                    if failure.code == ccare_llm::FailureCode::ContextWindowExceeded && attempt == 1
                    {
                        RequestErrorDecision::Retry
                    } else {
                        RequestErrorDecision::Pass
                    }
                },
            ));
            Ok(())
        }
    }
    kit.host.mount(&RetryOnce, &json!({})).unwrap();
    let agent = agent(&kit);
    agent.prompt("long");
    assert_eq!(agent.when_idle().await, Some(TurnEndReason::Completed));
    assert_eq!(kit.script.requests().len(), 2);
    let attempts = events_of(&kit.session, "assistant/attempt");
    assert_eq!(attempts.len(), 1);
    assert_eq!(attempts[0]["outcome"], "failed");
    assert_eq!(attempts[0]["failure"]["code"], "CONTEXT_WINDOW_EXCEEDED");
}

#[tokio::test]
async fn h_hook_5_without_a_retry_the_turn_ends_with_the_failure() {
    let kit = kit("{\"failure\": {\"code\": \"AUTH_FAILED\", \"message\": \"bad key\"}}").await;
    let agent = agent(&kit);
    agent.prompt("x");
    let Some(TurnEndReason::Error { failure }) = agent.when_idle().await else {
        panic!()
    };
    let failure = serde_json::to_value(&failure).unwrap();
    assert_eq!(failure["code"], "AUTH_FAILED");
    assert_eq!(
        kinds(&kit.session),
        [
            "turn/start",
            "user/message",
            "step/start",
            "request/header",
            "request/context",
            "assistant/attempt",
            "step/end",
            "turn/end"
        ]
    );
}

#[tokio::test]
async fn h_cancel_2_cancel_while_streaming_keeps_the_visible_prefix_and_a_kept_followup() {
    let kit = kit("{\"text\": \"one two three four five six seven\", \"delay_ms\": 60}\n{\"text\": \"second turn\"}").await;
    let agent = agent(&kit);
    let mut live = agent.subscribe_live();
    agent.prompt("talk");
    let mut deltas = 0;
    while let Ok(chunk) = live.recv().await {
        if matches!(chunk.chunk, ccare_llm::Chunk::TextDelta { .. }) {
            deltas += 1;
            if deltas == 2 {
                break;
            }
        }
    }
    agent.prompt("next question");
    agent.cancel(CancelCause::User, true).await;
    let answers = events_of(&kit.session, "assistant/message");
    assert_eq!(answers[0]["interrupted"], true);
    assert_eq!(answers[0]["message"]["content"][0]["text"], "one two ");
    let ends = events_of(&kit.session, "turn/end");
    assert_eq!(
        ends[0]["reason"],
        json!({"kind": "aborted", "cause": {"kind": "user"}})
    );
    // The followup queued before the cancel survived (keep-inbox) and ran.
    assert_eq!(agent.when_idle().await, Some(TurnEndReason::Completed));
    assert_eq!(ends.len(), 1);
    assert_eq!(events_of(&kit.session, "turn/end").len(), 2);
    let step_ends = events_of(&kit.session, "step/end");
    assert_eq!(step_ends[0]["interrupted"], true);
}

#[tokio::test]
async fn h_tool_1_bad_calls_get_error_results_and_the_model_sees_them() {
    let kit = kit(
        r#"{"tool_calls": [{"name": "nope", "arguments": {}, "id": "a"}, {"name": "echo", "arguments": {"txt": 1}, "id": "b"}, {"name": "echo", "arguments": "{broken", "id": "c"}]}
{"text": "sorry"}"#,
    )
    .await;
    let agent = agent(&kit);
    agent.prompt("go");
    assert_eq!(agent.when_idle().await, Some(TurnEndReason::Completed));
    let results = events_of(&kit.session, "tool/result");
    let codes: Vec<&str> = results
        .iter()
        .map(|result| result["error"]["code"].as_str().unwrap())
        .collect();
    assert_eq!(
        codes,
        ["TOOL_NOT_FOUND", "INVALID_ARGUMENTS", "INVALID_ARGUMENTS"]
    );
    assert!(
        results[1]["error"]["message"]
            .as_str()
            .unwrap()
            .starts_with("/: "),
        "{}",
        results[1]["error"]["message"]
    );
    assert!(
        events_of(&kit.session, "tool/call").is_empty(),
        "no body ran, so no dispatch marker"
    );
    let second = &kit.script.requests()[1];
    assert_eq!(
        second.config.messages.len(),
        5,
        "prompt, calls, three results"
    );
}

#[tokio::test]
async fn h_tool_2_parallel_calls_overlap_and_results_keep_block_order() {
    let kit = kit(
        r#"{"tool_calls": [{"name": "slow", "arguments": {"text": "a"}, "id": "1"}, {"name": "slow", "arguments": {"text": "b"}, "id": "2"}, {"name": "slow", "arguments": {"text": "c"}, "id": "3"}]}
{"text": "done"}"#,
    )
    .await;
    kit.host
        .add_tool(Arc::new(Echo::new("slow", Concurrency::ParallelSafe, 300)))
        .unwrap();
    let agent = agent(&kit);
    let started = std::time::Instant::now();
    agent.prompt("go");
    assert_eq!(agent.when_idle().await, Some(TurnEndReason::Completed));
    assert!(
        started.elapsed() < Duration::from_millis(850),
        "three 300 ms calls ran in parallel: {:?}",
        started.elapsed()
    );
    let texts: Vec<String> = events_of(&kit.session, "tool/result")
        .iter()
        .map(|result| {
            result["message"]["content"][0]["content"][0]["text"]
                .as_str()
                .unwrap()
                .to_owned()
        })
        .collect();
    assert_eq!(texts, ["a", "b", "c"]);
    let seq_kinds = kinds(&kit.session);
    let first_result = seq_kinds
        .iter()
        .position(|kind| kind == "tool/result")
        .unwrap();
    assert_eq!(
        seq_kinds[first_result - 3..first_result],
        ["tool/call", "tool/call", "tool/call"]
    );
}

#[tokio::test]
async fn h_cancel_2_cancel_during_tools_answers_running_and_undispatched_calls() {
    let kit = kit(
        r#"{"tool_calls": [{"name": "hang", "arguments": {"text": "a"}, "id": "1"}, {"name": "excl", "arguments": {"text": "b"}, "id": "2"}]}"#,
    )
    .await;
    kit.host
        .add_tool(Arc::new(Echo::new(
            "hang",
            Concurrency::ParallelSafe,
            60_000,
        )))
        .unwrap();
    kit.host
        .add_tool(Arc::new(Echo::new("excl", Concurrency::Exclusive, 0)))
        .unwrap();
    let agent = agent(&kit);
    let mut options = agent.options();
    options.tool_cancel_grace_ms = 100;
    agent.set_options(options);
    agent.prompt("go");
    for _ in 0..200 {
        if kinds(&kit.session).iter().any(|kind| kind == "tool/call") {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    agent.cancel(CancelCause::User, false).await;
    let codes: Vec<String> = events_of(&kit.session, "tool/result")
        .iter()
        .map(|result| result["error"]["code"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(codes, ["TOOL_OUTCOME_UNKNOWN", "ABORTED_BEFORE_DISPATCH"]);
    let last: Vec<String> = kinds(&kit.session).into_iter().rev().take(2).collect();
    assert_eq!(last, ["turn/end", "step/end"]);
}

#[tokio::test]
async fn h_loop_6_the_step_limit_ends_the_turn_with_step_limit() {
    let kit = kit(
        &"{\"tool_calls\": [{\"name\": \"echo\", \"arguments\": {\"text\": \"again\"}}]}\n"
            .repeat(3),
    )
    .await;
    let agent = agent(&kit);
    let mut options = agent.options();
    options.max_steps_per_turn = 2;
    agent.set_options(options);
    agent.prompt("loop");
    let Some(TurnEndReason::Error { failure }) = agent.when_idle().await else {
        panic!()
    };
    let failure = serde_json::to_value(&failure).unwrap();
    assert_eq!(failure["code"], "STEP_LIMIT");
    assert_eq!(kit.script.requests().len(), 2);
}

#[tokio::test]
async fn h_loop_6_length_ends_the_turn_max_tokens() {
    let kit = kit("{\"text\": \"cut\", \"finish\": \"length\"}").await;
    let agent = agent(&kit);
    agent.prompt("x");
    assert_eq!(agent.when_idle().await, Some(TurnEndReason::MaxTokens));
}

#[tokio::test]
async fn h_sess_4_a_new_agent_on_an_old_session_logs_a_resume_header() {
    let kit = kit("{\"text\": \"a\"}\n{\"text\": \"b\"}").await;
    let first = agent(&kit);
    first.prompt("one");
    first.when_idle().await;
    let second = agent(&kit);
    second.prompt("two");
    assert_eq!(second.when_idle().await, Some(TurnEndReason::Completed));
    let reasons: Vec<Value> = events_of(&kit.session, "request/header")
        .iter()
        .map(|header| header["reason"].clone())
        .collect();
    assert_eq!(reasons, [json!("initial"), json!("resume")]);
    assert_eq!(
        events_of(&kit.session, "request/context").len(),
        1,
        "the context did not change"
    );
    assert_eq!(events_of(&kit.session, "turn/start")[1]["turn"], 2);
}

/// Proves: H-SESS-4 — an agent logs a `request/header` only when what it sends
/// changes: none for an unchanged second request, `change` for a new temperature and
/// for a new tool, each with the new envelope.
#[tokio::test]
async fn h_sess_4_a_header_is_logged_again_only_when_the_envelope_changes() {
    let kit =
        kit("{\"text\": \"a\"}\n{\"text\": \"b\"}\n{\"text\": \"c\"}\n{\"text\": \"d\"}").await;
    let agent = agent(&kit);
    for prompt in ["one", "two"] {
        agent.prompt(prompt);
        assert_eq!(agent.when_idle().await, Some(TurnEndReason::Completed));
    }
    assert_eq!(events_of(&kit.session, "request/header").len(), 1);

    let mut options = agent.options();
    options.temperature = Some(0.25);
    agent.set_options(options);
    agent.prompt("three");
    assert_eq!(agent.when_idle().await, Some(TurnEndReason::Completed));
    kit.host
        .add_tool(Arc::new(Echo::new("shout", Concurrency::ParallelSafe, 0)))
        .unwrap();
    agent.prompt("four");
    assert_eq!(agent.when_idle().await, Some(TurnEndReason::Completed));

    let headers = events_of(&kit.session, "request/header");
    let reasons: Vec<Value> = headers
        .iter()
        .map(|header| header["reason"].clone())
        .collect();
    assert_eq!(
        reasons,
        [json!("initial"), json!("change"), json!("change")]
    );
    assert_eq!(headers[0]["header"]["config"]["temperature"], Value::Null);
    assert_eq!(headers[1]["header"]["config"]["temperature"], json!(0.25));
    let tool_names = |header: &Value| -> Vec<Value> {
        header["header"]["tools"]
            .as_array()
            .unwrap()
            .iter()
            .map(|tool| tool["name"].clone())
            .collect()
    };
    assert!(!tool_names(&headers[1]).contains(&json!("shout")));
    assert!(tool_names(&headers[2]).contains(&json!("shout")));
    assert_eq!(headers[2]["header"]["config"]["temperature"], json!(0.25));
}

#[tokio::test]
async fn h_cancel_2_after_a_cancelled_tool_step_the_next_request_pairs_every_call() {
    let kit = kit(
        r#"{"tool_calls": [{"name": "hang", "arguments": {"text": "a"}, "id": "h1"}, {"name": "echo", "arguments": {"text": "b"}, "id": "e1"}]}
{"text": "fresh start"}"#,
    )
    .await;
    kit.host
        .add_tool(Arc::new(Echo::new("hang", Concurrency::Exclusive, 60_000)))
        .unwrap();
    let agent = agent(&kit);
    let mut options = agent.options();
    options.tool_cancel_grace_ms = 50;
    agent.set_options(options);
    agent.prompt("go");
    for _ in 0..200 {
        if kinds(&kit.session).iter().any(|kind| kind == "tool/call") {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    agent.cancel(CancelCause::User, false).await;
    agent.prompt("try again");
    assert_eq!(agent.when_idle().await, Some(TurnEndReason::Completed));
    let request = &kit.script.requests()[1];
    let mut calls = Vec::new();
    let mut results = Vec::new();
    for message in &request.config.messages {
        for block in &message.message.content {
            match block {
                ContentBlock::ToolCall(call) => calls.push(call.id.clone()),
                ContentBlock::ToolResult(result) => results.push(result.call_id.clone()),
                _ => {}
            }
        }
    }
    assert_eq!(calls, ["h1", "e1"]);
    assert_eq!(results, calls, "each call answered exactly once, in order");
}

#[tokio::test]
async fn h_hook_7_a_failing_request_hook_ends_the_turn_naming_hook_and_plugin() {
    struct Broken;
    impl Plugin for Broken {
        fn name(&self) -> &str {
            "broken"
        }
        fn mount(
            &self,
            _config: &Value,
            scope: &mut PluginScope<'_>,
        ) -> Result<(), ccare_agent::MountError> {
            scope.request(Arc::new(
                |_: &HookContext, _: &mut ccare_llm::CallConfig| {
                    Err(HookError::new("no budget table"))
                },
            ));
            Ok(())
        }
    }
    let kit = kit("{\"text\": \"never\"}").await;
    kit.host.mount(&Broken, &json!({})).unwrap();
    let agent = agent(&kit);
    agent.prompt("x");
    let Some(TurnEndReason::Error { failure }) = agent.when_idle().await else {
        panic!()
    };
    let failure = serde_json::to_value(&failure).unwrap();
    assert_eq!(
        failure,
        json!({"code": "HOOK_FAILED", "hook": "request", "plugin": "broken", "message": "no budget table"})
    );
    assert!(kit.script.requests().is_empty());
    assert_eq!(
        kinds(&kit.session).last().map(String::as_str),
        Some("turn/end")
    );
}

#[tokio::test]
async fn h_gen_3_a_plugin_that_refuses_its_config_leaves_nothing_registered() {
    struct Picky;
    impl Plugin for Picky {
        fn name(&self) -> &str {
            "picky"
        }
        fn mount(
            &self,
            config: &Value,
            scope: &mut PluginScope<'_>,
        ) -> Result<(), ccare_agent::MountError> {
            scope.tool(Arc::new(Echo::new(
                "picky_tool",
                Concurrency::ParallelSafe,
                0,
            )))?;
            scope.event_type(ccare_core::kinds::EventTypeSpec::ignorable("picky/note"))?;
            match config.get("level").and_then(Value::as_u64) {
                Some(_) => Ok(()),
                None => Err(ccare_agent::MountError::Config(format!(
                    "level must be a non-negative integer, got {}",
                    config.get("level").unwrap_or(&Value::Null)
                ))),
            }
        }
    }
    let kit = kit("").await;
    let error = kit.host.mount(&Picky, &json!({"level": -1})).err().unwrap();
    assert_eq!(
        error.to_string(),
        "picky: level must be a non-negative integer, got -1"
    );
    assert_eq!(kit.host.tool_names(), ["echo"]);
    assert!(kit.host.mounted().is_empty());
    kit.host.mount(&Picky, &json!({"level": 2})).unwrap();
    assert_eq!(kit.host.tool_names(), ["echo", "picky_tool"]);
    assert!(
        kit.session
            .append(ccare_core::EventDraft::new("picky/note", Default::default()).ignorable())
            .is_ok()
    );
    assert!(kit.host.unmount("picky"));
    assert_eq!(kit.host.tool_names(), ["echo"]);
    assert!(
        kit.session
            .append(ccare_core::EventDraft::new("picky/note", Default::default()).ignorable())
            .is_err()
    );
}

#[tokio::test]
async fn h_loop_2_queued_entries_are_persisted_and_restored_by_a_new_agent() {
    let kit = kit("{\"expect\": {\"contains\": \"deadline\"}, \"text\": \"seen both\"}").await;
    let store = Arc::clone(kit.host.sessions().store());
    let first = agent(&kit);
    let mut note = Message::from_blocks(vec![ContentBlock::text("remember the deadline")]);
    note.source = Some(Source::plugin_notice("reminder"));
    first.inject(note);
    assert!(!first.is_busy(), "inject does not wake an idle agent");
    store.flush().await.unwrap();
    drop(first);

    let second = agent(&kit);
    assert_eq!(second.restore_inbox().await.unwrap(), 1);
    second.prompt("go");
    assert_eq!(second.when_idle().await, Some(TurnEndReason::Completed));
    let request = &kit.script.requests()[0];
    let texts: Vec<String> = request
        .config
        .messages
        .iter()
        .map(|message| match &message.message.content[0] {
            ContentBlock::Text(text) => text.text.clone(),
            _ => String::new(),
        })
        .collect();
    assert_eq!(
        texts,
        ["go", "remember the deadline"],
        "the prompt, then the claimed plugin entry"
    );
    store.flush().await.unwrap();
    let left = store
        .kv_scan("agent_inbox", "entries/", ccare_store::KvPage::default())
        .await
        .unwrap();
    assert!(left.is_empty(), "entered entries are deleted: {left:?}");
}

fn notice(plugin: &str, text: &str) -> Message {
    let mut message = Message::from_blocks(vec![ContentBlock::text(text)]);
    message.source = Some(Source::plugin_notice(plugin));
    message
}

fn texts_of(request: &ccare_llm::GenerateRequest) -> Vec<String> {
    request
        .config
        .messages
        .iter()
        .map(|message| match &message.message.content[0] {
            ContentBlock::Text(text) => text.text.clone(),
            _ => String::new(),
        })
        .collect()
}

struct Counter(&'static str);

impl ccare_agent::BoundaryContributor for Counter {
    fn contribute<'a>(
        &'a self,
        context: &'a ccare_agent::BoundaryContext<'a>,
    ) -> BoxFuture<'a, Result<ccare_agent::BoundaryContribution, HookError>> {
        Box::pin(async move {
            Ok(vec![notice(
                "notices",
                &format!("{}: {} before me", self.0, context.entered.len()),
            )]
            .into())
        })
    }
}

#[derive(Default)]
struct Feedback {
    reserved: AtomicUsize,
    dispatched: AtomicUsize,
    released: AtomicUsize,
}

impl ccare_agent::RequestSegment for Feedback {
    fn preview(&self, _context: &HookContext) -> Vec<Message> {
        vec![notice("feedback", "keep answers short")]
    }
    fn reserve(&self, context: &HookContext, _call_id: &str) -> Vec<Message> {
        self.reserved.fetch_add(1, Ordering::SeqCst);
        self.preview(context)
    }
    fn dispatched(&self, _context: &HookContext, _call_id: &str) {
        self.dispatched.fetch_add(1, Ordering::SeqCst);
    }
    fn release(&self, _context: &HookContext, _call_id: &str) {
        self.released.fetch_add(1, Ordering::SeqCst);
    }
}

struct NoticesAndFeedback(Arc<Feedback>);

impl Plugin for NoticesAndFeedback {
    fn name(&self) -> &str {
        "notices"
    }
    fn mount(
        &self,
        _config: &Value,
        scope: &mut PluginScope<'_>,
    ) -> Result<(), ccare_agent::MountError> {
        scope.boundary(Arc::new(Counter("status")), 100);
        scope.boundary(Arc::new(Counter("collected")), 10);
        scope.request_segment(Arc::clone(&self.0) as Arc<dyn ccare_agent::RequestSegment>);
        Ok(())
    }
}

#[tokio::test]
async fn design_3_boundary_notices_run_in_priority_order_and_segments_stay_off_the_surface() {
    let kit = kit(
        "{\"failure\": {\"code\": \"AUTH_FAILED\", \"message\": \"later\"}}\n{\"text\": \"ok\"}",
    )
    .await;
    let feedback = Arc::new(Feedback::default());
    kit.host
        .mount(&NoticesAndFeedback(Arc::clone(&feedback)), &json!({}))
        .unwrap();
    let agent = agent(&kit);
    agent.prompt("hi");
    let Some(TurnEndReason::Error { .. }) = agent.when_idle().await else {
        panic!()
    };
    agent.prompt("again");
    assert_eq!(agent.when_idle().await, Some(TurnEndReason::Completed));
    let request = &kit.script.requests()[1];
    assert_eq!(
        texts_of(request),
        [
            "hi",
            "collected: 0 before me",
            "status: 1 before me",
            "again",
            "collected: 0 before me",
            "status: 1 before me",
            "keep answers short"
        ],
        "notices enter the log in priority order; the segment follows every surface message"
    );
    let surface_texts: Vec<String> = events_of(&kit.session, "user/message")
        .iter()
        .map(|event| {
            event["message"]["content"][0]["text"]
                .as_str()
                .unwrap()
                .to_owned()
        })
        .collect();
    assert!(
        !surface_texts
            .iter()
            .any(|text| text == "keep answers short"),
        "request-only: {surface_texts:?}"
    );
    let series: Vec<Value> = events_of(&kit.session, "request/header")
        .into_iter()
        .filter(|header| header["reason"] == "series")
        .collect();
    assert_eq!(series.len(), 2);
    assert_eq!(
        series[1]["ext"]["request_delta"]["append_request_only"][0]["messages"][0]["content"][0]["text"],
        "keep answers short"
    );
    assert_eq!(feedback.reserved.load(Ordering::SeqCst), 2);
    assert_eq!(
        feedback.released.load(Ordering::SeqCst),
        1,
        "the failed request did not deliver"
    );
    assert_eq!(
        feedback.dispatched.load(Ordering::SeqCst),
        1,
        "counted exactly once"
    );
}

struct LoopStopper;

impl Plugin for LoopStopper {
    fn name(&self) -> &str {
        "watch"
    }
    fn mount(
        &self,
        _config: &Value,
        scope: &mut PluginScope<'_>,
    ) -> Result<(), ccare_agent::MountError> {
        scope.stream(Arc::new(
            |_: &ccare_agent::StreamContext, chunk: &ccare_llm::Chunk| match chunk {
                ccare_llm::Chunk::TextDelta { text, .. } if text.contains("again") => {
                    ccare_agent::StreamVerdict::Cancel {
                        reason: "line-repeat".into(),
                    }
                }
                _ => ccare_agent::StreamVerdict::Continue,
            },
        ));
        Ok(())
    }
}

#[tokio::test]
async fn h_cancel_1_a_stream_observer_cancels_with_a_hook_cause_and_keeps_the_output() {
    let kit = kit("{\"text\": \"once more and again and again\", \"delay_ms\": 5}").await;
    kit.host.mount(&LoopStopper, &json!({})).unwrap();
    let agent = agent(&kit);
    agent.prompt("talk");
    let Some(TurnEndReason::Aborted { cause }) = agent.when_idle().await else {
        panic!()
    };
    let cause = serde_json::to_value(&cause).unwrap();
    assert_eq!(
        cause,
        json!({"kind": "hook", "plugin": "watch", "reason": "line-repeat"})
    );
    let answer = &events_of(&kit.session, "assistant/message")[0];
    assert_eq!(answer["interrupted"], true);
    assert!(
        answer["message"]["content"][0]["text"]
            .as_str()
            .unwrap()
            .starts_with("once more and ")
    );
}

struct Nudge(AtomicUsize);

impl ccare_agent::TurnStoppingHook for Nudge {
    fn on_stopping<'a>(
        &'a self,
        _context: &'a HookContext,
    ) -> BoxFuture<'a, Result<Option<Message>, HookError>> {
        Box::pin(async move {
            if self.0.fetch_add(1, Ordering::SeqCst) == 0 {
                Ok(Some(notice("nudge", "are you sure you are done?")))
            } else {
                Ok(None)
            }
        })
    }
}

struct Idle(Arc<AtomicUsize>);

impl ccare_agent::IdleHook for Idle {
    fn on_idle<'a>(&'a self, _session: &'a Session) -> BoxFuture<'a, ()> {
        Box::pin(async move {
            self.0.fetch_add(1, Ordering::SeqCst);
        })
    }
}

struct Nudger(Arc<AtomicUsize>);

impl Plugin for Nudger {
    fn name(&self) -> &str {
        "nudger"
    }
    fn mount(
        &self,
        _config: &Value,
        scope: &mut PluginScope<'_>,
    ) -> Result<(), ccare_agent::MountError> {
        scope.turn_stopping(Arc::new(Nudge(AtomicUsize::new(0))));
        scope.idle(Arc::new(Idle(Arc::clone(&self.0))));
        Ok(())
    }
}

#[tokio::test]
async fn h_hook_6_a_turn_stopping_hook_steers_the_turn_into_another_step_and_idle_hooks_run() {
    let kit = kit(
        "{\"text\": \"done\"}\n{\"expect\": {\"contains\": \"sure\"}, \"text\": \"yes, done\"}",
    )
    .await;
    let idle = Arc::new(AtomicUsize::new(0));
    kit.host
        .mount(&Nudger(Arc::clone(&idle)), &json!({}))
        .unwrap();
    let agent = agent(&kit);
    agent.prompt("finish");
    assert_eq!(agent.when_idle().await, Some(TurnEndReason::Completed));
    assert_eq!(events_of(&kit.session, "step/start").len(), 2);
    assert_eq!(events_of(&kit.session, "turn/end").len(), 1);
    assert_eq!(
        idle.load(Ordering::SeqCst),
        1,
        "the idle hook ran once the agent went idle"
    );
}

struct Stateful(parking_lot::Mutex<Option<ccare_agent::domains::PluginDomains>>);

impl Plugin for Stateful {
    fn name(&self) -> &str {
        "context-care"
    }
    fn mount(
        &self,
        _config: &Value,
        scope: &mut PluginScope<'_>,
    ) -> Result<(), ccare_agent::MountError> {
        // A source of the plugin's name with the one action the test decides.
        let state = ccare_agent::controls::ControlRule::new(
            "state",
            vec![ccare_agent::controls::ControlAction::new("report")],
        );
        scope.control_source(ccare_agent::controls::ControlSource {
            plugin: Some("context-care".to_owned()),
            ..ccare_agent::controls::ControlSource::new("context-care", vec![state])
        })?;
        *self.0.lock() = Some(scope.domains());
        Ok(())
    }
}

#[tokio::test]
async fn design_3_domains_and_controls_belong_to_their_plugin_and_go_with_it() {
    let kit = kit("").await;
    let plugin = Stateful(parking_lot::Mutex::new(None));
    kit.host.mount(&plugin, &json!({})).unwrap();
    let domains = plugin.0.lock().clone().unwrap();
    let spec = || {
        ccare_agent::domains::DomainSpec::new("care_journal", 1)
            .table(ccare_agent::domains::TableSpec::new("actions"))
    };
    let domain = domains.open(spec()).await.unwrap();
    domain
        .table("actions")
        .unwrap()
        .put("a1", json!({"kind": "prune"}))
        .unwrap()
        .await
        .unwrap();
    assert_eq!(
        kit.host.domains().owner("care_journal").as_deref(),
        Some("context-care")
    );

    let agent = agent(&kit);
    let id = kit.session.id().clone();
    let before = kit
        .host
        .controls()
        .decide(&id, "context-care", "state", "report");
    assert_eq!(before.as_str(), "storage-unavailable", "not loaded yet");
    agent.restore_inbox().await.unwrap();
    assert!(
        kit.host
            .controls()
            .decide(&id, "context-care", "state", "report")
            .is_enabled()
    );

    assert!(kit.host.unmount("context-care"));
    assert_eq!(
        kit.host.domains().owner("care_journal"),
        None,
        "the domain was closed"
    );
    assert_eq!(
        kit.host
            .controls()
            .decide(&id, "context-care", "state", "report")
            .as_str(),
        "source-unavailable"
    );
    // Mounted again, the durable rows are still there.
    kit.host.mount(&plugin, &json!({})).unwrap();
    let reopened = plugin.0.lock().clone().unwrap();
    let domain = reopened.open(spec()).await.unwrap();
    assert_eq!(
        domain
            .table("actions")
            .unwrap()
            .get("a1")
            .map(|value| (*value).clone()),
        Some(json!({"kind": "prune"}))
    );
}

#[tokio::test]
async fn h_evt_4_the_stored_stream_expands_and_reassembles_to_the_committed_message() {
    let kit = kit("{\"reasoning\": \"think it over\", \"text\": \"a few words of answer\"}").await;
    let agent = agent(&kit);
    agent.prompt("x");
    assert_eq!(agent.when_idle().await, Some(TurnEndReason::Completed));
    let answer = &events_of(&kit.session, "assistant/message")[0];
    let records = answer["stream"].as_array().unwrap();
    let kinds: Vec<&str> = records
        .iter()
        .map(|record| record["type"].as_str().unwrap())
        .collect();
    assert!(
        kinds.contains(&"text-chunks") && kinds.contains(&"reasoning-chunks"),
        "{kinds:?}"
    );
    let chunks = ccare_llm::records::expand(records).unwrap();
    let mut assembler = ccare_llm::Assembler::new();
    for (_, chunk) in &chunks {
        assembler.push(chunk).unwrap();
    }
    let message = serde_json::to_value(assembler.finish().message()).unwrap();
    assert_eq!(message, answer["message"]);
}

/// A gate that records what the kernel told it, refusing when `refuse` is set.
struct Recorder {
    name: &'static str,
    refuse: bool,
    seen: Arc<parking_lot::Mutex<Vec<String>>>,
}

impl ccare_agent::RequestGate for Recorder {
    fn check<'a>(
        &'a self,
        _context: &'a HookContext,
        call: &'a ccare_llm::PreparedCall,
    ) -> BoxFuture<'a, Result<(), ccare_core::LlmFailure>> {
        Box::pin(async move {
            self.seen
                .lock()
                .push(format!("{} check {}", self.name, call.call_id));
            if self.refuse {
                Err(ccare_core::LlmFailure::new(
                    ccare_core::FailureCode::RequestBudgetExceeded,
                    "too big",
                ))
            } else {
                Ok(())
            }
        })
    }

    fn dispatched(&self, _context: &HookContext, call: &ccare_llm::PreparedCall) {
        self.seen
            .lock()
            .push(format!("{} dispatched {}", self.name, call.call_id));
    }

    fn not_dispatched(
        &self,
        _context: &HookContext,
        call_id: &str,
        failure: &ccare_core::LlmFailure,
    ) {
        self.seen.lock().push(format!(
            "{} not-dispatched {call_id} {}",
            self.name,
            failure.code.as_str()
        ));
    }

    fn settled(&self, _context: &HookContext, settlement: &ccare_agent::Settlement) {
        self.seen.lock().push(format!(
            "{} settled {} {} {}@{} {:?}",
            self.name,
            settlement.call_id,
            settlement.outcome.as_str(),
            settlement.event_type,
            settlement.event_seq,
            settlement.usage.map(|usage| usage.input),
        ));
    }
}

struct Gates {
    refuse_second: bool,
    seen: Arc<parking_lot::Mutex<Vec<String>>>,
}

impl Plugin for Gates {
    fn name(&self) -> &str {
        "gates"
    }
    fn mount(
        &self,
        _config: &Value,
        scope: &mut PluginScope<'_>,
    ) -> Result<(), ccare_agent::MountError> {
        for (name, refuse) in [("a", false), ("b", self.refuse_second), ("c", false)] {
            scope.request_gate(Arc::new(Recorder {
                name,
                refuse,
                seen: Arc::clone(&self.seen),
            }));
        }
        Ok(())
    }
}

#[tokio::test]
async fn design_3_every_gate_hears_how_each_call_ended() {
    let kit = kit(r#"{"text": "hi", "usage": {"input": 42, "output": 1}}"#).await;
    let seen = Arc::new(parking_lot::Mutex::new(Vec::new()));
    kit.host
        .mount(
            &Gates {
                refuse_second: false,
                seen: Arc::clone(&seen),
            },
            &json!({}),
        )
        .unwrap();
    let agent = agent(&kit);
    agent.prompt("hello");
    assert_eq!(agent.when_idle().await, Some(TurnEndReason::Completed));
    let messages = events_of(&kit.session, "assistant/message");
    let call = messages[0]["call_id"].as_str().unwrap().to_owned();
    let seq = kit.session.with_log(|log| {
        log.events()
            .iter()
            .find(|event| event.kind() == "assistant/message")
            .unwrap()
            .seq()
    });
    let settled =
        |name: &str| format!("{name} settled {call} completed assistant/message@{seq} Some(42)");
    assert_eq!(
        *seen.lock(),
        [
            format!("a check {call}"),
            format!("b check {call}"),
            format!("c check {call}"),
            format!("a dispatched {call}"),
            format!("b dispatched {call}"),
            format!("c dispatched {call}"),
            settled("a"),
            settled("b"),
            settled("c"),
        ]
    );
}

#[tokio::test]
async fn design_3_a_refusal_stops_the_checks_and_every_gate_hears_not_dispatched() {
    let kit = kit(r#"{"text": "never"}"#).await;
    let seen = Arc::new(parking_lot::Mutex::new(Vec::new()));
    kit.host
        .mount(
            &Gates {
                refuse_second: true,
                seen: Arc::clone(&seen),
            },
            &json!({}),
        )
        .unwrap();
    let agent = agent(&kit);
    agent.prompt("hello");
    let end = agent.when_idle().await;
    assert!(matches!(end, Some(TurnEndReason::Error { .. })), "{end:?}");
    assert!(kit.script.requests().is_empty());
    let attempts = events_of(&kit.session, "assistant/attempt");
    let call = attempts[0]["call_id"].as_str().unwrap().to_owned();
    assert_eq!(
        *seen.lock(),
        [
            format!("a check {call}"),
            format!("b check {call}"),
            format!("a not-dispatched {call} REQUEST_BUDGET_EXCEEDED"),
            format!("b not-dispatched {call} REQUEST_BUDGET_EXCEEDED"),
            format!("c not-dispatched {call} REQUEST_BUDGET_EXCEEDED"),
        ]
    );
}

/// A gate that flips a control of its own source during the check of the first call
/// (between the segment reservations and the stream start).
struct Flipper {
    controls: ccare_agent::controls::Controls,
    flipped: std::sync::atomic::AtomicBool,
}

impl ccare_agent::RequestGate for Flipper {
    fn check<'a>(
        &'a self,
        context: &'a HookContext,
        _call: &'a ccare_llm::PreparedCall,
    ) -> BoxFuture<'a, Result<(), ccare_core::LlmFailure>> {
        Box::pin(async move {
            if !self.flipped.swap(true, std::sync::atomic::Ordering::SeqCst) {
                let session = context.session.id();
                self.controls.load(session).await.unwrap();
                let revision = self.controls.snapshot(session).revision;
                self.controls
                    .patch(
                        session,
                        ccare_agent::controls::Patch {
                            revision,
                            source_id: "flip".to_owned(),
                            rule_id: "rule".to_owned(),
                            op: ccare_agent::controls::PatchOp::Toggle {
                                action_id: "act".to_owned(),
                                enabled: false,
                            },
                        },
                        context.session.head(),
                    )
                    .await
                    .unwrap();
            }
            Ok(())
        })
    }
}

struct FlipPlugin(Arc<Feedback>);

impl Plugin for FlipPlugin {
    fn name(&self) -> &str {
        "flip"
    }
    fn mount(
        &self,
        _config: &Value,
        scope: &mut PluginScope<'_>,
    ) -> Result<(), ccare_agent::MountError> {
        scope.control_source(ccare_agent::controls::ControlSource::new(
            "flip",
            vec![ccare_agent::controls::ControlRule::new(
                "rule",
                vec![ccare_agent::controls::ControlAction::new("act")],
            )],
        ))?;
        scope.request_gate(Arc::new(Flipper {
            controls: scope.controls(),
            flipped: std::sync::atomic::AtomicBool::new(false),
        }));
        scope.request_segment(Arc::clone(&self.0) as Arc<dyn ccare_agent::RequestSegment>);
        Ok(())
    }
}

#[tokio::test]
async fn rc_8_ac_24_a_control_change_before_dispatch_prepares_the_request_again() {
    let kit = kit(r#"{"text": "hi"}"#).await;
    let feedback = Arc::new(Feedback::default());
    kit.host
        .mount(&FlipPlugin(Arc::clone(&feedback)), &json!({}))
        .unwrap();
    let agent = agent(&kit);
    agent.prompt("hello");
    assert_eq!(agent.when_idle().await, Some(TurnEndReason::Completed));
    let attempts = events_of(&kit.session, "assistant/attempt");
    assert_eq!(attempts.len(), 1);
    assert_eq!(attempts[0]["failure"]["code"], "CONTROL_CHANGED");
    assert_eq!(
        kit.script.requests().len(),
        1,
        "only the re-prepared request went out"
    );
    let counts = (
        feedback.reserved.load(Ordering::SeqCst),
        feedback.dispatched.load(Ordering::SeqCst),
        feedback.released.load(Ordering::SeqCst),
    );
    assert_eq!(counts, (2, 1, 1), "the first reservation rolled back");
}

/// A second segment, with its own source.
struct Completion;

impl ccare_agent::RequestSegment for Completion {
    fn preview(&self, _context: &HookContext) -> Vec<Message> {
        vec![notice("completion", "check the scope")]
    }
    fn reserve(&self, context: &HookContext, _call_id: &str) -> Vec<Message> {
        self.preview(context)
    }
    fn dispatched(&self, _context: &HookContext, _call_id: &str) {}
    fn release(&self, _context: &HookContext, _call_id: &str) {}
}

struct TwoSegments(Arc<Feedback>);

impl Plugin for TwoSegments {
    fn name(&self) -> &str {
        "two-segments"
    }
    fn mount(
        &self,
        _config: &Value,
        scope: &mut PluginScope<'_>,
    ) -> Result<(), ccare_agent::MountError> {
        scope.request_segment(Arc::clone(&self.0) as Arc<dyn ccare_agent::RequestSegment>);
        scope.request_segment(Arc::new(Completion));
        Ok(())
    }
}

#[tokio::test]
async fn mp_3_every_request_only_part_goes_out_as_one_message_in_segment_order() {
    let kit = kit(r#"{"text": "ok"}"#).await;
    kit.host
        .mount(&TwoSegments(Arc::new(Feedback::default())), &json!({}))
        .unwrap();
    let agent = agent(&kit);
    agent.prompt("hello");
    assert_eq!(agent.when_idle().await, Some(TurnEndReason::Completed));
    let request = &kit.script.requests()[0];
    let texts = texts_of(request);
    assert_eq!(
        texts.last().unwrap(),
        "keep answers short\n\ncheck the scope"
    );
    assert_eq!(
        texts[texts.len() - 2],
        "hello",
        "one request-only message after the surface"
    );
    let last = request.config.messages.last().unwrap();
    let Some(Source::Plugin(source)) = &last.message.source else {
        panic!("{last:?}")
    };
    assert_eq!(
        source.extra.get("segments"),
        Some(&json!(["plugin:feedback", "plugin:completion"]))
    );
}

/// A boundary contributor that works until the turn is cancelled, as a summary in
/// progress does, then returns with nothing to add.
struct UntilCancelled(Arc<tokio::sync::Notify>);

impl ccare_agent::BoundaryContributor for UntilCancelled {
    fn contribute<'a>(
        &'a self,
        context: &'a ccare_agent::BoundaryContext<'a>,
    ) -> BoxFuture<'a, Result<ccare_agent::BoundaryContribution, HookError>> {
        Box::pin(async move {
            self.0.notify_one();
            context.hook.cancel.cancelled().await;
            Ok(ccare_agent::BoundaryContribution::default())
        })
    }
}

struct SlowBoundary(Arc<tokio::sync::Notify>);

impl Plugin for SlowBoundary {
    fn name(&self) -> &str {
        "slow-boundary"
    }
    fn mount(
        &self,
        _config: &Value,
        scope: &mut PluginScope<'_>,
    ) -> Result<(), ccare_agent::MountError> {
        scope.boundary(Arc::new(UntilCancelled(Arc::clone(&self.0))), 100);
        Ok(())
    }
}

#[tokio::test]
async fn h_cancel_1_a_cancel_during_the_boundary_sends_no_request_and_logs_no_step() {
    let kit = kit("{\"text\": \"never\"}").await;
    let reached = Arc::new(tokio::sync::Notify::new());
    kit.host
        .mount(&SlowBoundary(Arc::clone(&reached)), &json!({}))
        .unwrap();
    let agent = agent(&kit);
    agent.prompt("hi");
    reached.notified().await;
    agent.cancel(ccare_agent::CancelCause::User, false).await;
    let end = agent.when_idle().await;
    assert!(
        matches!(end, Some(TurnEndReason::Aborted { .. })),
        "{end:?}"
    );
    assert!(kit.script.requests().is_empty(), "no request left");
    assert!(
        events_of(&kit.session, "step/start").is_empty(),
        "the step never started"
    );
}

/// A segment for side calls of purpose `compaction` (like a scoped prompt bound to
/// summaries), counting what it was told.
#[derive(Default)]
struct ForSummaries {
    reserved: std::sync::Mutex<Vec<String>>,
    dispatched: std::sync::Mutex<Vec<String>>,
    released: std::sync::Mutex<Vec<String>>,
}

impl ccare_agent::RequestSegment for ForSummaries {
    fn preview(&self, _context: &HookContext) -> Vec<Message> {
        vec![notice("shaper", "summaries: keep file paths")]
    }
    fn reserve(&self, context: &HookContext, call_id: &str) -> Vec<Message> {
        self.reserved.lock().unwrap().push(call_id.to_owned());
        self.preview(context)
    }
    fn dispatched(&self, _context: &HookContext, call_id: &str) {
        self.dispatched.lock().unwrap().push(call_id.to_owned());
    }
    fn release(&self, _context: &HookContext, call_id: &str) {
        self.released.lock().unwrap().push(call_id.to_owned());
    }
    fn serves_side(&self, purpose: ccare_llm::Purpose) -> bool {
        purpose == ccare_llm::Purpose::Compaction
    }
}

struct Shaper(Arc<ForSummaries>, Arc<Feedback>);

impl Plugin for Shaper {
    fn name(&self) -> &str {
        "shaper"
    }
    fn mount(
        &self,
        _config: &Value,
        scope: &mut PluginScope<'_>,
    ) -> Result<(), ccare_agent::MountError> {
        scope.request(Arc::new(
            |_context: &HookContext, config: &mut ccare_llm::CallConfig| match config.purpose {
                ccare_llm::Purpose::SessionTitle => Err(HookError::new("no titles here")),
                _ => {
                    config.system = Some(format!("shaped for {}", config.purpose));
                    Ok(())
                }
            },
        ));
        scope.request_segment(Arc::clone(&self.0) as Arc<dyn ccare_agent::RequestSegment>);
        // Conversation-only (the default): never on a side call.
        scope.request_segment(Arc::clone(&self.1) as Arc<dyn ccare_agent::RequestSegment>);
        Ok(())
    }
}

fn side_config(purpose: ccare_llm::Purpose) -> ccare_llm::CallConfig {
    ccare_llm::CallConfig {
        model: "s/summary".to_owned(),
        messages: vec![ccare_llm::RequestMessage::user(Message::from_blocks(vec![
            ContentBlock::text("the transcript"),
        ]))],
        purpose,
        ..ccare_llm::CallConfig::default()
    }
}

/// The hook context of a side request made for `session` outside a step.
fn side_context(session: Session) -> HookContext {
    HookContext {
        session,
        turn: 1,
        step: 0,
        cancel: ccare_llm::CancellationToken::new(),
        clock: Arc::new(SystemClock),
    }
}

#[tokio::test]
async fn a_side_request_handle_outliving_its_host_is_refused_host_closed() {
    // The handle does not keep the host's hooks alive (a plugin holding it would
    // otherwise keep itself and the store alive in a cycle): once the host is gone, a
    // call is refused with a clear error instead of running without its hooks.
    let Kit {
        host,
        session,
        test,
        ..
    } = kit("{\"text\": \"unused\"}").await;
    let side = host.side_requests();
    drop((host, test));
    let context = side_context(session);
    let refused = side
        .prepare(&context, side_config(ccare_llm::Purpose::Compaction))
        .err()
        .expect("a host that is gone shapes no call");
    assert_eq!(refused, ccare_agent::SideRequestError::HostClosed);
    assert_eq!(refused.code(), "HOST_CLOSED");
}

#[tokio::test]
async fn mp_3_a_side_request_runs_the_request_hooks_and_carries_the_segments_serving_it() {
    let kit = kit("{\"text\": \"the summary\"}").await;
    let summaries = Arc::new(ForSummaries::default());
    let feedback = Arc::new(Feedback::default());
    kit.host
        .mount(
            &Shaper(Arc::clone(&summaries), Arc::clone(&feedback)),
            &json!({}),
        )
        .unwrap();
    let side = kit.host.side_requests();
    let context = side_context(kit.session.clone());
    let call = side
        .prepare(&context, side_config(ccare_llm::Purpose::Compaction))
        .unwrap();
    let call_id = call.call().call_id.clone();
    assert_eq!(call.call().route.name(), "s/summary", "the exact route");
    assert_eq!(
        call.request_only()
            .iter()
            .map(|(owner, messages)| (owner.as_str(), messages.len()))
            .collect::<Vec<_>>(),
        [("shaper", 1)]
    );
    let assembled = call.complete(context.cancel.clone()).await;
    assert_eq!(assembled.finish, ccare_llm::Finish::Stop);
    assert_eq!(assembled.text(), "the summary");
    // What the provider received: the hook's system prompt, the messages, then the
    // segment's request-only message last; the conversation-only segment absent.
    let requests = kit.script.requests();
    assert_eq!(requests.len(), 1);
    assert_eq!(
        requests[0].config.system.as_deref(),
        Some("shaped for compaction")
    );
    assert_eq!(
        texts_of(&requests[0]),
        ["the transcript", "summaries: keep file paths"]
    );
    assert_eq!(feedback.reserved.load(Ordering::SeqCst), 0);
    assert_eq!(
        *summaries.reserved.lock().unwrap(),
        std::slice::from_ref(&call_id)
    );
    assert_eq!(*summaries.dispatched.lock().unwrap(), [call_id]);
    assert!(summaries.released.lock().unwrap().is_empty());

    // A prepared call that is never sent releases its reservation, once.
    let unsent = side
        .prepare(&context, side_config(ccare_llm::Purpose::Compaction))
        .unwrap();
    let unsent_id = unsent.call().call_id.clone();
    drop(unsent);
    assert_eq!(*summaries.released.lock().unwrap(), [unsent_id]);
    assert_eq!(summaries.dispatched.lock().unwrap().len(), 1);

    // A failing request hook refuses the call, named by its plugin; nothing reserved.
    let error = side
        .prepare(&context, side_config(ccare_llm::Purpose::SessionTitle))
        .err()
        .unwrap();
    assert_eq!(error.code(), "HOOK_FAILED");
    assert_eq!(error.to_string(), "request hook of shaper: no titles here");
    assert_eq!(summaries.reserved.lock().unwrap().len(), 2);
    // A side call writes nothing to the session log.
    assert!(kinds(&kit.session).is_empty(), "{:?}", kinds(&kit.session));
}

/// A pre-step listener or a boundary contributor that fails, in a plugin named
/// `failing`.
struct Failing {
    in_boundary: bool,
}

impl PreStepHook for Failing {
    fn call<'a>(
        &'a self,
        _context: &'a HookContext,
        _input: PreStepInput,
        _next: PreStepNext<'a>,
    ) -> BoxFuture<'a, Result<PreStepDecision, HookError>> {
        Box::pin(async { Err(HookError::new("the chain broke")) })
    }
}

impl ccare_agent::BoundaryContributor for Failing {
    fn contribute<'a>(
        &'a self,
        _context: &'a ccare_agent::BoundaryContext<'a>,
    ) -> BoxFuture<'a, Result<ccare_agent::BoundaryContribution, HookError>> {
        Box::pin(async { Err(HookError::new("the notice broke")) })
    }
}

impl Plugin for Failing {
    fn name(&self) -> &str {
        "failing"
    }
    fn mount(
        &self,
        _config: &Value,
        scope: &mut PluginScope<'_>,
    ) -> Result<(), ccare_agent::MountError> {
        let hook = Arc::new(Failing {
            in_boundary: self.in_boundary,
        });
        if self.in_boundary {
            scope.boundary(hook, 100);
        } else {
            scope.pre_step(hook, false);
        }
        Ok(())
    }
}

/// H-HOOK-7 with a plugin entry in flight: the turn ends `HOOK_FAILED` listing the
/// plugin message the step never entered; it is gone from the inbox, in memory and in
/// the store, so neither the next turn nor a new agent brings it back.
async fn a_failing_step_boundary_lists_the_unentered_entry(in_boundary: bool) {
    let kit = kit("{\"text\": \"only the prompt\"}").await;
    let store = Arc::clone(kit.host.sessions().store());
    kit.host
        .mount(&Failing { in_boundary }, &json!({}))
        .unwrap();
    let first = agent(&kit);
    first.inject(notice("reminder", "remember the deadline"));
    first.prompt("go");
    let Some(TurnEndReason::Error { failure }) = first.when_idle().await else {
        panic!("the turn ends with the hook's error")
    };
    let (hook, message) = if in_boundary {
        ("boundary", "the notice broke")
    } else {
        ("pre-step", "the chain broke")
    };
    let failure = serde_json::to_value(&failure).unwrap();
    // The message as queued, with the id the inbox gave it.
    let mut queued = serde_json::to_value(notice("reminder", "remember the deadline")).unwrap();
    queued["id"] = failure["unentered"][0]["id"].clone();
    assert!(queued["id"].is_string(), "{failure}");
    assert_eq!(
        failure,
        json!({
            "code": "HOOK_FAILED",
            "hook": hook,
            "plugin": "failing",
            "message": message,
            "unentered": [queued],
        })
    );
    assert_eq!(
        kinds(&kit.session),
        ["turn/start", "user/message", "turn/end"]
    );
    store.flush().await.unwrap();
    let left = store
        .kv_scan("agent_inbox", "entries/", ccare_store::KvPage::default())
        .await
        .unwrap();
    assert!(
        left.is_empty(),
        "the unentered entry is forgotten: {left:?}"
    );

    assert!(kit.host.unmount("failing"));
    first.prompt("again");
    assert_eq!(first.when_idle().await, Some(TurnEndReason::Completed));
    let requests = kit.script.requests();
    assert_eq!(requests.len(), 1);
    assert_eq!(
        texts_of(&requests[0]),
        ["go", "again"],
        "the listed entry is not sent later"
    );
    drop(first);
    assert_eq!(agent(&kit).restore_inbox().await.unwrap(), 0);
}

#[tokio::test]
async fn h_hook_7_a_failing_pre_step_listener_lists_and_forgets_the_unentered_entries() {
    a_failing_step_boundary_lists_the_unentered_entry(false).await;
}

#[tokio::test]
async fn h_hook_7_a_failing_boundary_contributor_lists_and_forgets_the_unentered_entries() {
    a_failing_step_boundary_lists_the_unentered_entry(true).await;
}
