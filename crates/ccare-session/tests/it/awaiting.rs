//! ACT-3: a step awaiting caller-executed results is a durable state: reopening the
//! session (crash repair) and `sessions check` leave it alone, while a step whose open
//! calls are not all handed to the caller is still repaired as before (H-SESS-5).
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use std::sync::Arc;

use ccare_core::kinds::*;
use ccare_core::*;
use ccare_session::*;
use ccare_store::{SqliteConfig, SqliteStore, Store};
use serde_json::{Value, json};

fn engine(path: &std::path::Path) -> Sessions {
    let store = SqliteStore::open(SqliteConfig::new(path)).unwrap();
    Sessions::new(
        Arc::new(store) as Arc<dyn Store>,
        Arc::new(SystemClock),
        Arc::new(Registry::with_host_defaults()),
        SessionsConfig::default(),
    )
}

fn typed<T: EventData>(data: &T) -> EventDraft {
    EventDraft::typed(data).unwrap()
}

fn call(id: &str) -> ContentBlock {
    ContentBlock::ToolCall(ToolCallBlock {
        id: id.into(),
        name: "lookup".into(),
        arguments: json!({}),
        raw_arguments: None,
        extra: Extra::new(),
    })
}

/// A turn whose one step called `c1` and `c2`, with markers for `markers`.
async fn write(path: &std::path::Path, markers: &[(&str, Option<Executor>)]) -> u64 {
    let sessions = engine(path);
    let id = SessionId::new("awaiting").unwrap();
    let session = sessions.create(Some(id), JsonObject::new()).await.unwrap();
    let mut message = Message::from_blocks(vec![ContentBlock::text("look up")]);
    message.source = Some(Source::user());
    let mut drafts = vec![
        typed(&TurnStart { turn: 1 }),
        typed(&UserMessage { message }).with_surface(SurfaceOp::Append),
        typed(&StepStart { turn: 1, step: 1 }),
        typed(&AssistantMessage {
            turn: 1,
            step: 1,
            call_id: "llm-1".into(),
            provider: "p".into(),
            model: "m".into(),
            message: Message::from_blocks(vec![call("c1"), call("c2")]),
            usage: None,
            finish: "tool-calls".into(),
            interrupted: false,
            stream: vec![],
        })
        .with_surface(SurfaceOp::Append),
    ];
    for (id, executor) in markers {
        drafts.push(typed(&ToolCall {
            turn: 1,
            step: 1,
            call_id: (*id).into(),
            name: "lookup".into(),
            arguments: json!({}),
            executor: *executor,
        }));
    }
    for draft in drafts {
        session.append(draft).unwrap();
    }
    session.flush().await.unwrap();
    session.head()
}

/// `(kind, data)` of the events after `from`.
fn tail(session: &Session, from: u64) -> Vec<(String, Value)> {
    session.with_log(|log| {
        log.events()
            .iter()
            .skip(usize::try_from(from).unwrap())
            .map(|event| {
                (
                    event.kind().to_owned(),
                    serde_json::from_str(event.data_json()).unwrap(),
                )
            })
            .collect()
    })
}

#[tokio::test]
async fn act_3_reopen_leaves_an_awaiting_step_open_and_check_accepts_it() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("s.db");
    let caller = Some(Executor::Caller);
    let head = write(&path, &[("c1", caller), ("c2", caller)]).await;
    let id = SessionId::new("awaiting").unwrap();
    let sessions = engine(&path);
    let loaded = sessions.load(&id).await.unwrap();
    assert!(loaded.violations.is_empty(), "{:?}", loaded.violations);
    let session = sessions.open(&id).await.unwrap();
    assert_eq!(session.head(), head, "repair appended nothing");
    let state = session.with_log(|log| log.state().clone());
    assert_eq!(state.awaiting_calls(), ["c1", "c2"]);
    assert_eq!(state.open_turn, Some(1));
    assert_eq!(state.open_step, Some((1, 1)));
    assert!(repair_drafts(&state, Locale::En).unwrap().is_empty());
}

#[tokio::test]
async fn act_3_a_step_not_fully_handed_to_the_caller_is_still_repaired() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("s.db");
    // c1 went to the caller, c2's marker was never written (the crash came first).
    let head = write(&path, &[("c1", Some(Executor::Caller))]).await;
    let id = SessionId::new("awaiting").unwrap();
    let session = engine(&path).open(&id).await.unwrap();
    assert_eq!(
        session.with_log(|log| log.state().awaiting_calls()),
        Vec::<String>::new()
    );
    let repaired = tail(&session, head);
    let kinds: Vec<&str> = repaired.iter().map(|(kind, _)| kind.as_str()).collect();
    assert_eq!(
        kinds,
        ["tool/result", "tool/result", "step/end", "turn/end"]
    );
    assert_eq!(repaired[0].1["error"]["code"], TOOL_OUTCOME_UNKNOWN);
    assert_eq!(repaired[0].1["message"]["content"][0]["call_id"], "c1");
    assert_eq!(repaired[1].1["error"]["code"], TOOL_NOT_STARTED);
    assert_eq!(repaired[1].1["message"]["content"][0]["call_id"], "c2");
    assert_eq!(repaired[3].1["reason"], json!({"kind": "interrupted"}));
}
