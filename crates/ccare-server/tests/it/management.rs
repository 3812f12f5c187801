//! context-care's management routes over real HTTP (watch-rules-ui.md §9 HR-1..3,
//! RC-4, RC-9; issue 15 item 5): `/context-care/actions` paging and its refusals,
//! `/context-care/prompts` with `seq` locating its page, `/context-care/rules` GET and
//! PATCH (a stream-watch toggle that takes effect on a looping answer, a stale
//! revision refused with 409, all read back from the store after a restart), and no
//! response carrying the system prompt or a tool schema (HR-2). Sessions are driven
//! through the server's own `Agents` registry against the fake provider; every route
//! is called over loopback with reqwest.

use ccare_app::AgentHandle;
use ccare_core::{ContentBlock, Message, PluginSource, Source};
use ccare_fake_openai::{Reply, Script};
use reqwest::Method;
use serde_json::{Value, json};

use crate::rig::{Rig, error_of, ok_json};

/// A new session with one completed turn ("hello" → "hi there"), its actor running.
async fn session(rig: &Rig) -> AgentHandle {
    let handle = rig
        .context()
        .agents
        .create(Default::default())
        .await
        .unwrap();
    rig.fake.push(Reply::text("hi there"));
    handle.agent().prompt("hello");
    handle.agent().when_idle().await;
    handle
}

fn id_of(handle: &AgentHandle) -> String {
    handle.session().id().as_str().to_owned()
}

/// The stored events of the session, as JSON.
async fn stored(rig: &Rig, id: &str) -> Vec<Value> {
    let id = ccare_core::SessionId::new(id.to_owned()).unwrap();
    rig.store()
        .read(&id, ccare_store::ReadRange::all())
        .await
        .unwrap()
        .iter()
        .map(|row| serde_json::from_str(&row.json).unwrap())
        .collect()
}

/// A notice a test plugin enters: kind `plugin`, plugin `test-notices`.
fn notice(text: &str) -> Message {
    let mut message = Message::from_blocks(vec![ContentBlock::text(text)]);
    let mut source = PluginSource::notice("test-notices");
    source.summary = Some("Test notice".to_owned());
    message.source = Some(Source::Plugin(Box::new(source)));
    message
}

/// HR §9: `limit` is required and 1..200, `offset` ≥ 0; a refusal is 400
/// `invalid-query` naming the parameter, with `no-store`; an unknown session is 404
/// `session-unavailable`; a page of a session without maintenance is empty with no
/// next page, its admission read from the session's controls.
#[tokio::test(flavor = "multi_thread")]
async fn hr_1_actions_refuse_bad_paging_and_unknown_sessions() {
    let rig = Rig::start().await;
    let handle = session(&rig).await;
    let id = id_of(&handle);
    for (query, message) in [
        (
            format!("sessionId={id}&limit=0"),
            "limit must be an integer in 1..200, got \"0\"",
        ),
        (
            format!("sessionId={id}&limit=201"),
            "limit must be an integer in 1..200, got \"201\"",
        ),
        (format!("sessionId={id}"), "limit is required (1..200)"),
        (
            format!("sessionId={id}&limit=5&offset=-1"),
            "offset must be an integer ≥ 0, got \"-1\"",
        ),
        (
            format!("sessionId={id}&limit=5&ofset=1"),
            "unknown query parameter \"ofset\"",
        ),
        ("limit=5".to_owned(), "sessionId is required"),
    ] {
        for path in ["/context-care/actions", "/context-care/prompts"] {
            let response = rig.get(&format!("{path}?{query}")).await;
            assert_eq!(
                response.headers()["cache-control"],
                "no-store",
                "{path}?{query}"
            );
            assert_eq!(
                error_of(response).await,
                (400, "invalid-query".to_owned(), message.to_owned()),
                "{path}?{query}"
            );
        }
    }
    for path in [
        "/context-care/actions?sessionId=nosuch&limit=5",
        "/context-care/prompts?sessionId=nosuch&limit=5",
        "/context-care/rules?sessionId=nosuch",
    ] {
        assert_eq!(
            error_of(rig.get(path).await).await,
            (
                404,
                "session-unavailable".to_owned(),
                "no session nosuch".to_owned()
            ),
            "{path}"
        );
    }
    let page: Value = rig
        .get_json(&format!("/context-care/actions?sessionId={id}&limit=200"))
        .await;
    assert_eq!(page["actions"], json!([]));
    assert_eq!(
        (&page["total"], &page["offset"], &page["nextOffset"]),
        (&json!(0), &json!(0), &Value::Null)
    );
    assert_eq!(
        page["admission"],
        json!({"armed": false, "actions": [
            {"ruleId": "maintenance", "actionId": "prune", "enabled": true, "reason": "enabled"},
            {"ruleId": "maintenance", "actionId": "summary", "enabled": true, "reason": "enabled"},
            {"ruleId": "overflow", "actionId": "prune", "enabled": true, "reason": "enabled"},
            {"ruleId": "overflow", "actionId": "summary", "enabled": true, "reason": "enabled"},
            {"ruleId": "overflow", "actionId": "retry", "enabled": true, "reason": "enabled"},
        ]})
    );
    assert_eq!(page["currentState"]["source"], "boundary");
}

/// HR §9, AC-30: 45 notices a plugin entered; `/prompts?limit=20&seq=<45th>` answers
/// the page at offset 40 with `selectedFound`, every body whole (HR-3); pages chain by
/// `nextOffset`; a `seq` that is no entry's keeps the offset and says so; `seq=abc` is
/// 400 `invalid-sequence`.
#[tokio::test(flavor = "multi_thread")]
async fn hr_3_prompts_locate_the_page_of_a_seq() {
    let rig = Rig::start().await;
    let handle = session(&rig).await;
    let id = id_of(&handle);
    let long = "x".repeat(5000);
    for n in 1..=45 {
        let text = if n == 45 {
            format!("notice 45 {long}")
        } else {
            format!("notice {n}")
        };
        handle.agent().inject(notice(&text));
    }
    rig.fake.push(Reply::text("noted"));
    handle.agent().prompt("go on");
    handle.agent().when_idle().await;

    let all: Value = rig
        .get_json(&format!("/context-care/prompts?sessionId={id}&limit=200"))
        .await;
    let entries = all["prompts"].as_array().unwrap();
    let ours: Vec<&Value> = entries
        .iter()
        .filter(|entry| entry["publisher"] == "test-notices")
        .collect();
    assert_eq!(ours.len(), 45, "{all}");
    for (n, entry) in ours.iter().enumerate() {
        let expected = if n == 44 {
            format!("notice 45 {long}")
        } else {
            format!("notice {}", n + 1)
        };
        assert_eq!(entry["body"], expected.as_str());
        assert_eq!(
            (
                &entry["placement"],
                &entry["live"],
                &entry["kind"],
                &entry["label"]
            ),
            (
                &json!("surface"),
                &json!(true),
                &json!("plugin"),
                &json!("Test notice")
            )
        );
    }
    // The entries' seqs are the log's user/message seqs of those notices.
    let events = stored(&rig, &id).await;
    for entry in &ours {
        let seq = entry["seq"].as_u64().unwrap() as usize;
        assert_eq!(events[seq]["type"], "user/message");
        assert_eq!(
            events[seq]["data"]["message"]["content"][0]["text"],
            entry["body"]
        );
    }
    let total = entries.len() as u64;
    assert_eq!(all["total"], total);
    let index = entries
        .iter()
        .position(|entry| entry["seq"] == ours[44]["seq"])
        .unwrap() as u64;
    let seq = &ours[44]["seq"];

    let page: Value = rig
        .get_json(&format!(
            "/context-care/prompts?sessionId={id}&limit=20&seq={seq}"
        ))
        .await;
    assert_eq!(page["offset"], index / 20 * 20);
    assert_eq!(page["selectedFound"], true);
    assert!(
        page["prompts"]
            .as_array()
            .unwrap()
            .iter()
            .any(|entry| entry["seq"] == *seq && entry["body"] == ours[44]["body"]),
        "{page}"
    );

    let first: Value = rig
        .get_json(&format!("/context-care/prompts?sessionId={id}&limit=20"))
        .await;
    assert_eq!(
        (
            &first["offset"],
            &first["nextOffset"],
            &first["selectedFound"]
        ),
        (&json!(0), &json!(20), &json!(false))
    );
    assert_eq!(first["prompts"].as_array().unwrap().len(), 20);
    let last_offset = (total - 1) / 20 * 20;
    let last: Value = rig
        .get_json(&format!(
            "/context-care/prompts?sessionId={id}&limit=20&offset={last_offset}"
        ))
        .await;
    assert_eq!(last["nextOffset"], Value::Null);
    assert_eq!(
        last["prompts"].as_array().unwrap().len() as u64,
        total - last_offset
    );

    // seq 0 is the first turn's `turn/start`: no entry.
    let missing: Value = rig
        .get_json(&format!(
            "/context-care/prompts?sessionId={id}&limit=20&offset=20&seq=0"
        ))
        .await;
    assert_eq!(
        (&missing["offset"], &missing["selectedFound"]),
        (&json!(20), &json!(false))
    );
    assert_eq!(
        error_of(
            rig.get(&format!(
                "/context-care/prompts?sessionId={id}&limit=20&seq=abc"
            ))
            .await
        )
        .await,
        (
            400,
            "invalid-sequence".to_owned(),
            "seq must be a sequence number (digits only), got \"abc\"".to_owned()
        )
    );
}

/// The action `stream-watch / stream-line-repeat / <action>` of a snapshot.
fn line_repeat<'a>(snapshot: &'a Value, action: &str) -> &'a Value {
    snapshot["sources"]
        .as_array()
        .unwrap()
        .iter()
        .find(|source| source["sourceId"] == "stream-watch")
        .and_then(|source| {
            source["rules"]
                .as_array()
                .unwrap()
                .iter()
                .find(|rule| rule["id"] == "stream-line-repeat")
        })
        .and_then(|rule| {
            rule["actions"]
                .as_array()
                .unwrap()
                .iter()
                .find(|candidate| candidate["id"] == action)
        })
        .unwrap_or_else(|| panic!("no stream-line-repeat.{action} in {snapshot}"))
}

/// A looping answer: one line 1000 times, in small deltas.
fn looping() -> Script {
    let text = "same line again\n".repeat(1000);
    let chars: Vec<char> = text.chars().collect();
    let mut script = Script::new();
    for chunk in chars.chunks(4) {
        script = script.text(chunk.iter().collect::<String>());
    }
    script.finish("stop")
}

/// RC-4, RC-9: PATCH turns the stream watch's `abort` of a repeated line off; the
/// answer comes only once the change is durable (the store's row has it); a second
/// PATCH against the old revision is 409 `revision-conflict`; a looping answer is then
/// not aborted; after a restart the rules read back from the store and the log shows
/// the answer completed. Bodies over 65536 bytes are 413, malformed ones 400.
#[tokio::test(flavor = "multi_thread")]
async fn rc_9_a_patch_toggles_an_action_durably_and_a_stale_revision_conflicts() {
    let rig = Rig::start().await;
    let handle = session(&rig).await;
    let id = id_of(&handle);
    let path = format!("/context-care/rules?sessionId={id}");

    let before: Value = rig.get_json(&path).await;
    assert_eq!(before["sessionId"], id.as_str());
    assert_eq!(before["revision"], 0);
    assert!(before.get("storageError").is_none(), "{before}");
    assert_eq!(before["sample"]["source"], "boundary");
    assert_eq!(
        line_repeat(&before, "abort"),
        &json!({"id": "abort", "defaultEnabled": true, "available": true, "requires": [],
                "selected": true, "enabled": true, "reason": "enabled"})
    );

    let toggle = json!({"revision": 0, "sourceId": "stream-watch",
                        "ruleId": "stream-line-repeat", "actionId": "abort", "enabled": false});
    let after: Value = ok_json(rig.patch_json(&path, &toggle).await).await;
    assert_eq!(after["revision"], 1);
    assert_eq!(
        (
            &line_repeat(&after, "abort")["selected"],
            &line_repeat(&after, "abort")["reason"]
        ),
        (&json!(false), &json!("action-disabled"))
    );
    assert_eq!(
        line_repeat(&after, "resume")["reason"],
        "dependency-disabled"
    );
    // Durable before the answer: the row in the store already has revision 1.
    let row = rig
        .store()
        .kv_get(ccare_agent::controls::CONTROLS_DOMAIN, &id)
        .await
        .unwrap()
        .unwrap();
    let row: Value = serde_json::from_slice(&row.value).unwrap();
    assert_eq!(row["revision"], 1, "{row}");

    let stale = json!({"revision": 0, "sourceId": "stream-watch",
                       "ruleId": "stream-line-repeat", "actionId": "abort", "enabled": true});
    let conflict = rig.patch_json(&path, &stale).await;
    assert_eq!(conflict.headers()["cache-control"], "no-store");
    let (status, code, _) = error_of(conflict).await;
    assert_eq!((status, code.as_str()), (409, "revision-conflict"));
    for (body, status, code) in [
        (
            json!({"revision": 1, "sourceId": "stream-watch", "ruleId": "stream-line-repeat"}),
            400,
            "invalid-control-request",
        ),
        (
            json!({"revision": 1, "sourceId": "stream-watch", "ruleId": "stream-line-repeat",
                   "actionId": "abort", "enable": true}),
            400,
            "invalid-control-request",
        ),
        (
            json!({"revision": 1, "sourceId": "stream-watch", "ruleId": "no-such-rule",
                   "paused": true}),
            404,
            "rule-unavailable",
        ),
    ] {
        let (got, error, _) = error_of(rig.patch_json(&path, &body).await).await;
        assert_eq!((got, error.as_str()), (status, code), "{body}");
    }
    let oversized = rig
        .authed(Method::PATCH, &path)
        .header("content-type", "application/json")
        .body(format!(
            "{{\"revision\": 1, \"sourceId\": \"{}\"}}",
            "s".repeat(70_000)
        ))
        .send()
        .await
        .unwrap();
    let (status, code, _) = error_of(oversized).await;
    assert_eq!((status, code.as_str()), (413, "request-too-large"));

    // The toggle took effect: the looping answer runs to its end.
    rig.fake.push(looping());
    // The loop guard may remind the model after a completed loop (LS-3): one more step.
    rig.fake.push(Reply::text("Done."));
    handle.agent().prompt("write it");
    handle.agent().when_idle().await;
    drop(handle);
    // The control: in a session left at the defaults the same answer is aborted.
    let other = session(&rig).await;
    rig.fake.push(looping());
    rig.fake.push(Reply::text("Back on track."));
    other.agent().prompt("write it");
    other.agent().when_idle().await;
    let cut = stored(&rig, &id_of(&other)).await;
    let cut = cut
        .iter()
        .find(|event| {
            event["type"] == "assistant/message"
                && event["data"]["message"]["content"][0]["text"]
                    .as_str()
                    .is_some_and(|text| text.starts_with("same line again"))
        })
        .unwrap();
    assert_eq!(cut["data"]["interrupted"], true, "{cut}");
    drop(other);

    let rig = rig.restart().await;
    let reread: Value = rig.get_json(&path).await;
    assert_eq!(reread["revision"], 1);
    assert_eq!(line_repeat(&reread, "abort")["selected"], false);
    assert_eq!(reread["sample"]["source"], "log");
    let events = stored(&rig, &id).await;
    let answer = events
        .iter()
        .find(|event| {
            event["type"] == "assistant/message"
                && event["data"]["message"]["content"][0]["text"]
                    .as_str()
                    .is_some_and(|text| text.starts_with("same line again"))
        })
        .unwrap();
    assert_ne!(answer["data"]["interrupted"], true, "{answer}");
    assert_eq!(
        answer["data"]["message"]["content"][0]["text"],
        "same line again\n".repeat(1000)
    );
    let end = events.last().unwrap();
    assert_eq!(end["type"], "turn/end");
    assert_eq!(end["data"]["reason"]["kind"], "completed", "{end}");
}

/// HR-2: no management response carries the system prompt or a tool schema, though
/// the session's log has both (its `request/header`).
#[tokio::test(flavor = "multi_thread")]
async fn hr_2_no_response_carries_the_system_prompt_or_a_tool_schema() {
    let rig = Rig::start().await;
    let handle = session(&rig).await;
    let id = id_of(&handle);
    let system = rig.context().booted.host.system_prompt().unwrap();
    let system_line = system
        .lines()
        .find(|line| line.len() > 40)
        .unwrap()
        .to_owned();
    let schema = ccare_care::texts::status_texts(ccare_core::Locale::En)
        .status_tool_description
        .to_owned();
    let log = serde_json::to_string(&stored(&rig, &id).await).unwrap();
    let escaped = |text: &str| {
        serde_json::to_string(text)
            .unwrap()
            .trim_matches('"')
            .to_owned()
    };
    assert!(
        log.contains(&escaped(&system_line)),
        "the log has the system prompt"
    );
    assert!(
        log.contains(&escaped(&schema)),
        "the log has the tool schema"
    );

    let rules = format!("/context-care/rules?sessionId={id}");
    let mut bodies = Vec::new();
    for path in [
        format!("/context-care/actions?sessionId={id}&limit=200"),
        format!("/context-care/prompts?sessionId={id}&limit=200"),
        rules.clone(),
    ] {
        let response = rig.get(&path).await;
        assert_eq!(response.status().as_u16(), 200, "{path}");
        bodies.push(response.text().await.unwrap());
    }
    let patch = json!({"revision": 0, "sourceId": "stream-watch",
                       "ruleId": "stream-line-repeat", "paused": true});
    bodies.push(rig.patch_json(&rules, &patch).await.text().await.unwrap());
    for body in &bodies {
        assert!(!body.contains(&escaped(&system_line)), "{body}");
        assert!(!body.contains(&escaped(&schema)), "{body}");
        assert!(!body.contains("\"parameters\""), "{body}");
    }
}
