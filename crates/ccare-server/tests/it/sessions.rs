//! API-1 and API-2 over real HTTP: listing (paged, newest first), creating, one
//! session's live state, export, fork, commands and the refusals of bad input —
//! each read back from the store through `export`.

use ccare_fake_openai::Reply;
use serde_json::{Value, json};

use crate::events::{Sse, create_session, export, export_events, look_it_up, prompt};
use crate::rig::{Rig, error_of};

/// A session with one finished turn; returns its id and its event count.
async fn session_with_a_turn(rig: &Rig, answer: &str) -> (String, u64) {
    rig.fake.push(Reply::text(answer));
    let id = create_session(rig).await;
    let mut sse = Sse::open(rig, &format!("/api/sessions/{id}/events"), None).await;
    prompt(rig, &id, "hi").await;
    let frames = sse.until_idle().await;
    let events = frames.iter().filter(|frame| frame.is_event()).count();
    (id, u64::try_from(events).unwrap())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn api_1_sessions_are_listed_newest_first_in_pages() {
    let rig = Rig::start().await;
    let mut ids = Vec::new();
    for _ in 0..3 {
        ids.push(create_session(&rig).await);
    }
    let page: Value = rig.get_json("/api/sessions?limit=2").await;
    let listed: Vec<&str> = page["sessions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|session| session["id"].as_str().unwrap())
        .collect();
    assert_eq!(listed, vec![ids[2].as_str(), ids[1].as_str()]);
    assert_eq!(
        (&page["total"], &page["offset"], &page["nextOffset"]),
        (&json!(3), &json!(0), &json!(2))
    );
    let first = &page["sessions"][0];
    assert_eq!(first["events"], json!(0));
    assert!(
        first["createdAt"].as_str().unwrap().ends_with('Z'),
        "{first}"
    );
    assert!(first["createdMs"].is_i64(), "{first}");
    let last: Value = rig.get_json("/api/sessions?limit=2&offset=2").await;
    assert_eq!(last["sessions"][0]["id"].as_str(), Some(ids[0].as_str()));
    assert_eq!(last["nextOffset"], Value::Null);

    for query in ["limit=0", "limit=201", "limit=ten", "offset=-1"] {
        let (status, code, message) =
            error_of(rig.get(&format!("/api/sessions?{query}")).await).await;
        assert_eq!((status, code.as_str()), (400, "invalid-query"), "{query}");
        let name = query.split('=').next().unwrap();
        assert!(message.starts_with(&format!("{name}:")), "{message}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn api_1_create_refuses_another_profile_and_an_unknown_model() {
    let rig = Rig::start().await;
    let (status, code, message) = error_of(
        rig.post_json("/api/sessions", &json!({"profile": "other"}))
            .await,
    )
    .await;
    assert_eq!((status, code.as_str()), (400, "UNKNOWN_PROFILE"));
    assert!(
        message.contains("serves only the \"default\" profile"),
        "{message}"
    );
    let (status, code, message) = error_of(
        rig.post_json("/api/sessions", &json!({"model": "nowhere/none"}))
            .await,
    )
    .await;
    assert_eq!((status, code.as_str()), (400, "UNKNOWN_MODEL"), "{message}");
    let (status, code, message) = error_of(
        rig.post_json("/api/sessions", &json!({"modle": "fake/model"}))
            .await,
    )
    .await;
    assert_eq!((status, code.as_str()), (400, "bad-request"));
    assert!(message.contains("unknown field `modle`"), "{message}");
    let listed: Value = rig.get_json("/api/sessions").await;
    assert_eq!(listed["total"], json!(0), "nothing was created");

    let response = rig
        .post_json(
            "/api/sessions",
            &json!({"model": "fake/model", "profile": "default"}),
        )
        .await;
    assert_eq!(response.status().as_u16(), 201);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn api_1_a_session_shows_its_live_state_and_export_is_its_log() {
    let rig = Rig::start().await;
    let (id, events) = session_with_a_turn(&rig, "done").await;
    let detail: Value = rig.get_json(&format!("/api/sessions/{id}")).await;
    assert_eq!(detail["id"].as_str(), Some(id.as_str()));
    assert_eq!(detail["events"], json!(events));
    assert_eq!(detail["headSeq"], json!(events - 1));
    assert_eq!(detail["state"], json!("idle"));
    assert_eq!(detail["openCalls"], json!([]));
    assert_eq!(detail["active"], json!(true));
    assert_eq!(detail.get("heldBy"), None);

    // The export is the log as the store has it: the header line, then one line per
    // event, each the stored JSON.
    let exported = export(&rig, &id).await;
    let header: Value = serde_json::from_str(exported.lines().next().unwrap()).unwrap();
    assert_eq!(header["id"].as_str(), Some(id.as_str()), "{header}");
    let event_text = export_events(&exported);
    let lines: Vec<&str> = event_text.lines().collect();
    assert_eq!(u64::try_from(lines.len()).unwrap(), events);
    let rows = rig
        .store()
        .read(
            &ccare_core::SessionId::new(id.clone()).unwrap(),
            ccare_store::ReadRange::all(),
        )
        .await
        .unwrap();
    let stored: Vec<&str> = rows.iter().map(|row| &*row.json).collect();
    assert_eq!(lines, stored);

    for path in [
        "/api/sessions/nope",
        "/api/sessions/nope/export",
        "/api/sessions/nope/context",
    ] {
        let (status, code, message) = error_of(rig.get(path).await).await;
        assert_eq!((status, code.as_str()), (404, "UNKNOWN_SESSION"), "{path}");
        assert_eq!(message, "unknown session nope", "{path}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn api_1_fork_copies_the_log_up_to_at_seq_and_refuses_a_bad_seq() {
    let rig = Rig::start().await;
    let (id, events) = session_with_a_turn(&rig, "done").await;
    let fork_path = format!("/api/sessions/{id}/fork");

    let (status, code, message) =
        error_of(rig.post_json(&fork_path, &json!({"atSeq": events})).await).await;
    assert_eq!((status, code.as_str()), (400, "FORK_PAST_HEAD"));
    assert_eq!(
        message,
        format!("cannot fork session {id} at seq {events}: it has {events} events")
    );
    let (status, code, _) = error_of(rig.post_json(&fork_path, &json!({"atSeq": 1})).await).await;
    assert_eq!((status, code.as_str()), (400, "FORK_INSIDE_TURN"));
    let listed: Value = rig.get_json("/api/sessions").await;
    assert_eq!(listed["total"], json!(1), "no fork was stored");

    let response = rig
        .post_json(&fork_path, &json!({"atSeq": events - 1}))
        .await;
    assert_eq!(response.status().as_u16(), 201);
    let forked: Value = response.json().await.unwrap();
    assert_eq!(forked["parent"].as_str(), Some(id.as_str()));
    assert_eq!(forked["seedLength"], json!(events));
    assert_eq!(
        forked["events"],
        json!(events + 1),
        "the seed and session/end-seed"
    );
    let fork_id = forked["id"].as_str().unwrap();
    let parent_lines = export_events(&export(&rig, &id).await);
    let fork_lines = export_events(&export(&rig, fork_id).await);
    assert!(
        fork_lines.starts_with(&parent_lines),
        "the seed is the parent's log"
    );
    assert!(
        fork_lines[parent_lines.len()..].contains("\"type\":\"session/end-seed\""),
        "{fork_lines}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn api_2_bad_commands_are_refused_and_log_nothing() {
    let rig = Rig::start().await;
    let (id, _) = session_with_a_turn(&rig, "done").await;
    let before = export(&rig, &id).await;
    let messages = format!("/api/sessions/{id}/messages");

    let (status, code, message) = error_of(
        rig.post_json(&messages, &json!({"text": "x", "mode": "shout"}))
            .await,
    )
    .await;
    assert_eq!((status, code.as_str()), (400, "INVALID_MODE"));
    assert_eq!(
        message,
        "mode: expected one of prompt, steer, followup, got \"shout\""
    );
    let (status, code, message) =
        error_of(rig.post_json(&messages, &json!({"mode": "prompt"})).await).await;
    assert_eq!((status, code.as_str()), (400, "bad-request"));
    assert!(message.contains("missing field `text`"), "{message}");
    let (status, code, _) = error_of(rig.post_json(&messages, &json!({"text": "  "})).await).await;
    assert_eq!((status, code.as_str()), (400, "EMPTY_MESSAGE"));

    let (status, code, message) = error_of(
        rig.post_json(
            &format!("/api/sessions/{id}/tool-results"),
            &json!({"results": [{"callId": "call_x", "text": "42"}]}),
        )
        .await,
    )
    .await;
    assert_eq!((status, code.as_str()), (409, "TOOL_RESULTS_MISMATCH"));
    assert!(message.contains("call_x"), "{message}");

    let (status, code, _) = error_of(
        rig.post_json("/api/sessions/nope/messages", &json!({"text": "hi"}))
            .await,
    )
    .await;
    assert_eq!((status, code.as_str()), (404, "UNKNOWN_SESSION"));
    assert_eq!(export(&rig, &id).await, before, "nothing was logged");
    assert_eq!(rig.fake.requests().len(), 1, "no model call was made");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn api_2_a_cancel_ends_the_running_turn_aborted() {
    let rig = Rig::start().await;
    rig.fake.push(Reply::Chunks(
        ccare_fake_openai::Script::new()
            .text("slow ")
            .delay_ms(30_000)
            .text("never")
            .finish("stop"),
    ));
    let id = create_session(&rig).await;
    let mut sse = Sse::open(&rig, &format!("/api/sessions/{id}/events"), None).await;
    prompt(&rig, &id, "go").await;
    loop {
        if sse.next().await.event == "delta" {
            break;
        }
    }
    let running: Value = rig.get_json(&format!("/api/sessions/{id}")).await;
    assert_eq!(running["state"], json!("running"));
    let response = rig
        .post_json(&format!("/api/sessions/{id}/cancel"), &json!({}))
        .await;
    assert_eq!(response.status().as_u16(), 202);
    let frames = sse.until_idle().await;
    let end = frames
        .iter()
        .rev()
        .find(|frame| frame.event == "turn/end")
        .unwrap()
        .json();
    assert_eq!(end["data"]["reason"]["kind"], json!("aborted"), "{end}");
    assert_eq!(
        end["data"]["reason"]["cause"],
        json!({"kind": "user"}),
        "{end}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn api_2_tool_results_answer_exactly_the_open_calls_and_resume_the_turn() {
    let rig = Rig::start().await;
    rig.fake.push(Reply::Chunks(
        ccare_fake_openai::Script::new()
            .tool_call(0, Some("call_1"), Some("lookup"), "{\"q\":\"x\"}")
            .finish("tool_calls"),
    ));
    rig.fake.push(Reply::text("found it"));
    let id = create_session(&rig).await;
    let mut sse = Sse::open(&rig, &format!("/api/sessions/{id}/events"), None).await;
    // A turn declaring a caller-executed tool, over HTTP (ACT-3).
    look_it_up(&rig, &id).await;
    loop {
        let frame = sse.next().await;
        if frame.event == "awaiting-tools" {
            assert_eq!(frame.json()["callIds"], json!(["call_1"]), "{frame:?}");
            break;
        }
    }
    let detail: Value = rig.get_json(&format!("/api/sessions/{id}")).await;
    assert_eq!(detail["state"], json!("awaiting-tools"));
    assert_eq!(detail["openCalls"], json!(["call_1"]));

    let results = format!("/api/sessions/{id}/tool-results");
    let before = export(&rig, &id).await;
    let (status, code, message) = error_of(
        rig.post_json(
            &results,
            &json!({"results": [{"callId": "call_2", "text": "no"}]}),
        )
        .await,
    )
    .await;
    assert_eq!((status, code.as_str()), (409, "TOOL_RESULTS_MISMATCH"));
    assert_eq!(
        message,
        "ToolResults: TOOL_RESULTS_MISMATCH: the session awaits results for [\"call_1\"], the results answer [\"call_2\"]"
    );
    assert_eq!(export(&rig, &id).await, before, "nothing was logged");

    let response = rig
        .post_json(
            &results,
            &json!({"results": [{"callId": "call_1", "text": "42"}]}),
        )
        .await;
    assert_eq!(response.status().as_u16(), 202);
    let frames = sse.until_idle().await;
    let result = frames
        .iter()
        .find(|frame| frame.event == "tool/result")
        .unwrap()
        .json();
    assert!(result.to_string().contains("42"), "{result}");
    let end = frames
        .iter()
        .rev()
        .find(|frame| frame.event == "turn/end")
        .unwrap()
        .json();
    assert_eq!(end["data"]["reason"]["kind"], json!("completed"), "{end}");

    // The export: the declared tool in the user message, the model's call run by the
    // caller, the caller's result, the model's answer to it.
    let events: Vec<Value> = export_events(&export(&rig, &id).await)
        .lines()
        .map(|line| serde_json::from_str(line).unwrap())
        .collect();
    let user = events
        .iter()
        .find(|event| event["type"] == "user/message")
        .unwrap();
    assert_eq!(
        user["data"]["message"]["tools"],
        json!([{
            "name": "lookup",
            "description": "Looks a thing up.",
            "input_schema": {"type": "object", "properties": {"q": {"type": "string"}}}
        }]),
        "{user}"
    );
    let call = events
        .iter()
        .find(|event| event["type"] == "tool/call")
        .unwrap();
    assert_eq!(call["data"]["executor"], json!("caller"), "{call}");
    assert!(call.to_string().contains("call_1"), "{call}");
    let result = events
        .iter()
        .find(|event| event["type"] == "tool/result")
        .unwrap();
    assert!(result.to_string().contains("call_1"), "{result}");
    assert!(result.to_string().contains("42"), "{result}");
    let answer = events
        .iter()
        .rev()
        .find(|event| event["type"] == "assistant/message")
        .unwrap();
    assert_eq!(
        answer["data"]["message"]["content"][0]["text"],
        json!("found it"),
        "{answer}"
    );
    // The model was told about the tool.
    let first = &rig.fake.requests()[0].body;
    assert!(
        first["tools"]
            .as_array()
            .unwrap()
            .iter()
            .any(|tool| tool["function"]["name"] == "lookup"),
        "{first}"
    );
}

/// API-2 / ACT-3: a bad tool declaration is a 400 naming the field, and nothing is
/// logged (the session stays empty, no request goes to the model).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn api_2_bad_tool_declarations_are_400_naming_the_field_and_log_nothing() {
    let rig = Rig::start().await;
    let id = create_session(&rig).await;
    let path = format!("/api/sessions/{id}/messages");
    let tool = |name: &str, schema: Value| json!({"name": name, "description": "A tool.", "inputSchema": schema});
    let object = json!({"type": "object"});
    let cases = [
        (
            json!({"text": "go", "tools": {"name": "x"}}),
            "INVALID_TOOLS",
            "tools: expected an array of tool declarations, got {\"name\":\"x\"}",
        ),
        (
            json!({"text": "go", "tools": [tool("ok", object.clone()), {"name": "x"}]}),
            "INVALID_TOOLS",
            "tools[1]: missing field `inputSchema`",
        ),
        (
            json!({"text": "go", "tools": [{"name": "x", "inputSchema": {}, "parameters": {}}]}),
            "INVALID_TOOLS",
            "tools[0]: unknown field `parameters`, expected one of `name`, `description`, `inputSchema`",
        ),
        (
            json!({"text": "go", "tools": [tool("has space", object.clone())]}),
            "INVALID_TOOLS",
            "tools[0].name: expected 1-64 characters of A-Z a-z 0-9 _ -, got \"has space\"",
        ),
        (
            json!({"text": "go", "tools": [tool("", object.clone())]}),
            "INVALID_TOOLS",
            "tools[0].name: expected 1-64 characters of A-Z a-z 0-9 _ -, got \"\"",
        ),
        (
            json!({"text": "go", "tools": [tool("x", json!([]))]}),
            "INVALID_TOOLS",
            "tools[0].inputSchema: expected a JSON Schema object, got []",
        ),
        (
            json!({"text": "go", "tools": [tool("x", json!({"type": "string"}))]}),
            "INVALID_TOOLS",
            "tools[0].inputSchema: expected an object schema (\"type\": \"object\"), got type \"string\"",
        ),
        (
            json!({"text": "go", "tools": [tool("x", object.clone()), tool("x", object.clone())]}),
            "TOOL_NAME_TAKEN",
            "tools[1].name: \"x\" is declared twice",
        ),
        (
            json!({"text": "go", "tools": [tool("context_status", object.clone())]}),
            "TOOL_NAME_TAKEN",
            "tools[0].name: \"context_status\" is the name of a tool the host runs",
        ),
    ];
    for (body, code, message) in cases {
        let (status, got_code, got_message) = error_of(rig.post_json(&path, &body).await).await;
        assert_eq!(
            (status, got_code.as_str(), got_message.as_str()),
            (400, code, message),
            "{body}"
        );
    }
    assert_eq!(
        export_events(&export(&rig, &id).await),
        "",
        "nothing was logged"
    );
    assert!(rig.fake.requests().is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn api_4_context_is_the_json_of_context_status() {
    let rig = Rig::start().await;
    let (id, _) = session_with_a_turn(&rig, "done").await;
    let before = export(&rig, &id).await;
    let served: Value = rig.get_json(&format!("/api/sessions/{id}/context")).await;
    // What `ccare context status --json` prints: the report of the same sample.
    let session_id = ccare_core::SessionId::new(id.clone()).unwrap();
    let handle = rig
        .context()
        .agents
        .get_or_start(&session_id, ccare_app::WhenBusy::Fail)
        .await
        .unwrap();
    let care = rig.context().booted.care.as_ref().unwrap();
    let report = care.report(handle.session()).await.unwrap().unwrap();
    assert_eq!(served, serde_json::to_value(&report).unwrap());
    assert!(served["inputTokens"].as_u64().unwrap() > 0, "{served}");
    assert_eq!(export(&rig, &id).await, before, "sampling appended nothing");
}
