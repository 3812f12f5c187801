//! Real-composition tests of the session engine: SQLite store in a temp dir, appends,
//! reopen, and assertions on what was read back.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use std::sync::Arc;

use ccare_core::kinds::{self, *};
use ccare_core::*;
use ccare_session::*;
use ccare_store::{SqliteConfig, SqliteStore, Store};
use serde_json::json;

struct Fixture {
    _dir: tempfile::TempDir,
    path: std::path::PathBuf,
    clock: ManualClock,
}

impl Fixture {
    fn new() -> Self {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("ccare.db");
        Self {
            _dir: dir,
            path,
            clock: ManualClock::new(1_000),
        }
    }

    fn sessions(&self) -> Sessions {
        let store = SqliteStore::open(SqliteConfig::new(&self.path)).unwrap();
        Sessions::new(
            Arc::new(store) as Arc<dyn Store>,
            Arc::new(self.clock.clone()),
            Arc::new(Registry::with_host_defaults()),
            SessionsConfig::default(),
        )
    }
}

fn typed<T: EventData>(data: &T) -> EventDraft {
    EventDraft::typed(data).unwrap()
}

fn user(text: &str) -> EventDraft {
    let mut message = Message::from_blocks(vec![ContentBlock::text(text)]);
    message.source = Some(Source::user());
    typed(&UserMessage { message }).with_surface(SurfaceOp::Append)
}

fn assistant(turn: u32, step: u32, blocks: Vec<ContentBlock>) -> EventDraft {
    typed(&AssistantMessage {
        turn,
        step,
        call_id: format!("c{turn}-{step}"),
        provider: "p".into(),
        model: "m".into(),
        message: Message::from_blocks(blocks),
        usage: None,
        finish: "stop".into(),
        interrupted: false,
        stream: vec![],
    })
    .with_surface(SurfaceOp::Append)
}

fn call_block(id: &str) -> ContentBlock {
    ContentBlock::ToolCall(ToolCallBlock {
        id: id.into(),
        name: "read_file".into(),
        arguments: json!({"path": "a"}),
        raw_arguments: None,
        extra: ccare_core::Extra::new(),
    })
}

fn result(turn: u32, step: u32, id: &str, text: &str) -> EventDraft {
    let block = ContentBlock::ToolResult(ToolResultBlock {
        call_id: id.into(),
        name: "read_file".into(),
        content: vec![ContentBlock::text(text)],
        is_error: false,
        extra: ccare_core::Extra::new(),
    });
    typed(&ToolResult {
        turn,
        step,
        message: Message::from_blocks(vec![block]),
        error: None,
        meta: None,
        repair: false,
    })
    .with_surface(SurfaceOp::Append)
}

fn kinds_of(log: &SessionLog) -> Vec<String> {
    log.events()
        .iter()
        .map(|event| event.kind().to_owned())
        .collect()
}

/// Appends a completed turn with one tool call; returns nothing.
fn complete_turn(session: &Session, turn: u32) {
    session.append(typed(&TurnStart { turn })).unwrap();
    session.append(user("hello")).unwrap();
    session.append(typed(&StepStart { turn, step: 1 })).unwrap();
    session
        .append(assistant(turn, 1, vec![call_block(&format!("t{turn}"))]))
        .unwrap();
    session
        .append(typed(&ToolCall {
            turn,
            step: 1,
            call_id: format!("t{turn}"),
            name: "read_file".into(),
            arguments: json!({}),
            executor: None,
        }))
        .unwrap();
    session
        .append(result(turn, 1, &format!("t{turn}"), "contents"))
        .unwrap();
    session
        .append(typed(&StepEnd {
            turn,
            step: 1,
            interrupted: false,
            repair: false,
        }))
        .unwrap();
    session
        .append(typed(&TurnEnd {
            turn,
            reason: TurnEndReason::Completed,
            repair: false,
        }))
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn h_log_1_appends_survive_reopen_byte_identical() {
    let fixture = Fixture::new();
    let (id, raws) = {
        let sessions = fixture.sessions();
        let session = sessions.create(None, JsonObject::new()).await.unwrap();
        complete_turn(&session, 1);
        session.flush().await.unwrap();
        let raws: Vec<String> = session.with_log(|log| {
            log.events()
                .iter()
                .map(|e| e.raw_json().to_owned())
                .collect()
        });
        (session.id().clone(), raws)
    };
    let sessions = fixture.sessions();
    let loaded = sessions.load(&id).await.unwrap();
    let reread: Vec<String> = loaded
        .log
        .events()
        .iter()
        .map(|e| e.raw_json().to_owned())
        .collect();
    assert_eq!(reread, raws);
    assert_eq!(
        kinds_of(&loaded.log),
        [
            "turn/start",
            "user/message",
            "step/start",
            "assistant/message",
            "tool/call",
            "tool/result",
            "step/end",
            "turn/end"
        ]
    );
    assert!(loaded.violations.is_empty());
    // user, assistant, tool result (as a user-role message)
    let roles: Vec<Role> = loaded
        .log
        .derived_messages()
        .iter()
        .map(|m| m.role)
        .collect();
    assert_eq!(roles, [Role::User, Role::Assistant, Role::User]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn h_sess_5_open_repairs_an_interrupted_turn() {
    let fixture = Fixture::new();
    let id = {
        let sessions = fixture.sessions();
        let session = sessions.create(None, JsonObject::new()).await.unwrap();
        session.append(typed(&TurnStart { turn: 1 })).unwrap();
        session.append(user("go")).unwrap();
        session
            .append(typed(&StepStart { turn: 1, step: 1 }))
            .unwrap();
        session
            .append(assistant(1, 1, vec![call_block("a"), call_block("b")]))
            .unwrap();
        session
            .append(typed(&ToolCall {
                turn: 1,
                step: 1,
                call_id: "a".into(),
                name: "read_file".into(),
                arguments: json!({}),
                executor: None,
            }))
            .unwrap();
        session.flush().await.unwrap();
        session.id().clone()
    };
    let sessions = fixture.sessions();
    let session = sessions.open(&id).await.unwrap();
    let (kinds, results) = session.with_log(|log| {
        let results: Vec<(String, bool)> = log
            .events()
            .iter()
            .filter(|e| e.kind() == kinds::TOOL_RESULT)
            .map(|e| {
                let r: ToolResult = e.decode().unwrap();
                (r.error.unwrap().code, r.repair)
            })
            .collect();
        (kinds_of(log), results)
    });
    assert_eq!(
        &kinds[5..],
        ["tool/result", "tool/result", "step/end", "turn/end"]
    );
    assert_eq!(
        results,
        [
            ("TOOL_OUTCOME_UNKNOWN".to_owned(), true),
            ("TOOL_NOT_STARTED".to_owned(), true)
        ]
    );
    let end: TurnEnd = session.event_at(8).unwrap().decode().unwrap();
    assert_eq!(end.reason, TurnEndReason::Interrupted);
    // Idempotent: reopening in a fresh engine appends nothing more.
    drop(session);
    let again = fixture.sessions().open(&id).await.unwrap();
    assert_eq!(again.head(), 9);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn h_store_8_export_import_export_is_identical() {
    let fixture = Fixture::new();
    let sessions = fixture.sessions();
    let mut meta = JsonObject::new();
    meta.insert("title".into(), json!("ünïcode \"quoted\""));
    let session = sessions.create(None, meta).await.unwrap();
    complete_turn(&session, 1);
    complete_turn(&session, 2);
    let mut first = Vec::new();
    sessions.export(session.id(), &mut first).await.unwrap();

    let other = Fixture::new();
    let target = other.sessions();
    let record = target.import(&first).await.unwrap();
    assert_eq!(&record.id, session.id());
    let mut second = Vec::new();
    target.export(&record.id, &mut second).await.unwrap();
    assert_eq!(
        String::from_utf8(second).unwrap(),
        String::from_utf8(first.clone()).unwrap()
    );

    // An existing id is refused and nothing changes.
    let error = target.import(&first).await.unwrap_err();
    assert_eq!(error.code(), "SESSION_EXISTS");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_imports_name_the_line_and_store_nothing() {
    let fixture = Fixture::new();
    let sessions = fixture.sessions();
    let session = sessions.create(None, JsonObject::new()).await.unwrap();
    complete_turn(&session, 1);
    let mut file = Vec::new();
    sessions.export(session.id(), &mut file).await.unwrap();
    let text = String::from_utf8(file).unwrap();

    let target = Fixture::new();
    let engine = target.sessions();
    let cases: Vec<(String, &str, &str)> = vec![
        (
            text[..text.len() - 5].to_owned(),
            "MALFORMED_IMPORT",
            "line 9: truncated",
        ),
        (
            text.replace("\"type\":\"turn/end\"", "\"type\":\"martian/event\""),
            "UNKNOWN_REQUIRED_EVENT",
            "line 9:",
        ),
        (
            text.replace("\"turn\":1}", "\"turn\":-0.0}"),
            "NON_LOSSLESS_JSON",
            "/data/turn",
        ),
        (
            text.replace(
                "{\"op\":\"append\"}",
                "{\"op\":\"replace\",\"start_seq\":0,\"end_seq\":99}",
            ),
            "INVALID_SURFACE_OP",
            "line 3:",
        ),
    ];
    for (input, code, needle) in cases {
        let error = engine.import(input.as_bytes()).await.unwrap_err();
        assert_eq!(error.code(), code, "{error}");
        assert!(
            error.to_string().contains(needle),
            "{error} should contain {needle}"
        );
        assert!(error.is_bad_input());
    }
    assert!(engine.list(Default::default()).await.unwrap().is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn h_sess_2_fork_copies_the_seed_and_refuses_inside_a_turn() {
    let fixture = Fixture::new();
    let sessions = fixture.sessions();
    let session = sessions.create(None, JsonObject::new()).await.unwrap();
    complete_turn(&session, 1);
    complete_turn(&session, 2);
    let error = sessions
        .fork(session.id(), Some(3), None)
        .await
        .unwrap_err();
    assert_eq!(error.code(), "FORK_INSIDE_TURN");
    let child = sessions.fork(session.id(), Some(7), None).await.unwrap();
    assert_eq!(child.header().seed_length, Some(8));
    assert_eq!(child.header().parent.as_ref(), Some(session.id()));
    let kinds = child.with_log(kinds_of);
    assert_eq!(kinds.len(), 9);
    assert_eq!(kinds[8], "session/end-seed");
    let parent_raw = session.event_at(5).unwrap().raw_json().to_owned();
    assert_eq!(child.event_at(5).unwrap().raw_json(), parent_raw);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn h_surf_1_replace_validation_and_view() {
    let fixture = Fixture::new();
    let sessions = fixture.sessions();
    let session = sessions.create(None, JsonObject::new()).await.unwrap();
    complete_turn(&session, 1);
    // Splitting the tool batch (assistant seq 3, result seq 5) is refused.
    let split = user("summary")
        .with_surface(SurfaceOp::Replace {
            start_seq: 1,
            end_seq: 3,
        })
        .with_sources(vec![1, 3]);
    let error = session.append(split).unwrap_err();
    assert_eq!(error.code(), "INVALID_SURFACE_OP");
    assert_eq!(session.head(), 8, "a refused append consumes no seq");
    // Not citing every shadowed seq is refused.
    let uncited = user("summary")
        .with_surface(SurfaceOp::Replace {
            start_seq: 1,
            end_seq: 5,
        })
        .with_sources(vec![1]);
    assert_eq!(
        session.append(uncited).unwrap_err().code(),
        "INVALID_SURFACE_OP"
    );
    // A whole-batch replace works and bumps the generation.
    let whole = user("summary")
        .with_surface(SurfaceOp::Replace {
            start_seq: 1,
            end_seq: 5,
        })
        .with_sources(vec![1, 3, 5]);
    session.append(whole).unwrap();
    let view = session.derived_view();
    assert_eq!(view.replace_generation, 1);
    assert_eq!(view.messages.iter().map(|m| m.seq).collect::<Vec<_>>(), [8]);
    // A replace whose end is shadowed now is refused.
    let stale = user("again")
        .with_surface(SurfaceOp::Replace {
            start_seq: 8,
            end_seq: 5,
        })
        .with_sources(vec![5, 8]);
    assert!(
        session
            .append(stale)
            .unwrap_err()
            .to_string()
            .contains("replace end 5 is not a live node")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn h_surf_1_restore_undoes_a_replace_and_replays() {
    let fixture = Fixture::new();
    let sessions = fixture.sessions();
    let session = sessions.create(None, JsonObject::new()).await.unwrap();
    complete_turn(&session, 1);
    let original: Vec<u64> = session
        .derived_view()
        .messages
        .iter()
        .map(|m| m.seq)
        .collect();
    let whole = user("summary")
        .with_surface(SurfaceOp::Replace {
            start_seq: 1,
            end_seq: 5,
        })
        .with_sources(vec![1, 3, 5]);
    session.append(whole).unwrap();
    session.append(user("after")).unwrap();
    let restore = |replace_seq: u64, sources: Vec<u64>| {
        typed(&CompactionUndo {
            operation_id: "op".into(),
            replace_seq,
        })
        .with_surface(SurfaceOp::Restore { replace_seq })
        .with_sources(sources)
    };
    let refused = |draft: EventDraft| session.append(draft).unwrap_err().to_string();
    assert!(refused(restore(3, vec![3])).contains("restore target 3 is not a live node"));
    assert!(refused(restore(9, vec![9])).contains("restore target 9 is not a replace node"));
    assert!(refused(restore(8, vec![])).contains("does not cite the restored replace seq 8"));
    assert_eq!(session.head(), 10, "refusals consume no seq");
    session.with_log(|log| {
        assert!(log.is_restorable(8));
        assert_eq!(log.shadowed_by(8), [1, 3, 5]);
    });
    session.append(restore(8, vec![8])).unwrap();
    let view = session.derived_view();
    assert_eq!(view.replace_generation, 2);
    let mut expected = original.clone();
    expected.push(9);
    assert_eq!(
        view.messages.iter().map(|m| m.seq).collect::<Vec<_>>(),
        expected
    );
    assert!(
        refused(restore(8, vec![8])).contains("not a live node"),
        "undone once"
    );
    session.flush().await.unwrap();
    let loaded = sessions.load(session.id()).await.unwrap();
    assert!(loaded.violations.is_empty(), "{:?}", loaded.violations);
    assert_eq!(
        loaded.log.live_seqs(),
        session.with_log(|log| log.live_seqs())
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn h_val_2_vetoes_and_unregistered_types() {
    let fixture = Fixture::new();
    let sessions = fixture.sessions();
    let session = sessions.create(None, JsonObject::new()).await.unwrap();
    let error = session.append(typed(&TurnStart { turn: 2 })).unwrap_err();
    assert_eq!(error.code(), "VETOED");
    assert!(error.to_string().contains("turn-step-nesting"));
    let error = session
        .append(EventDraft::new("martian/x", JsonObject::new()))
        .unwrap_err();
    assert_eq!(error.code(), "UNREGISTERED_EVENT_TYPE");
    let mut data = JsonObject::new();
    data.insert("turn".into(), json!(-0.0));
    let error = session
        .append(EventDraft::new(kinds::TURN_START, data))
        .unwrap_err();
    assert_eq!(error.code(), "NON_LOSSLESS_JSON");
    assert_eq!(session.head(), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn h_store_6_two_writers_one_wins_the_other_is_fenced() {
    let fixture = Fixture::new();
    let first = fixture.sessions();
    let second = fixture.sessions();
    let session_a = first.create(None, JsonObject::new()).await.unwrap();
    let id = session_a.id().clone();
    let session_b = second.open(&id).await.unwrap();
    session_a.append(user("from a")).unwrap();
    session_b.append(user("from b")).unwrap();
    let (flushed_a, flushed_b) = tokio::join!(session_a.flush(), session_b.flush());
    let outcomes = [flushed_a.is_ok(), flushed_b.is_ok()];
    assert_eq!(
        outcomes.iter().filter(|ok| **ok).count(),
        1,
        "exactly one writer wins: {outcomes:?}"
    );
    let (loser, error) = match (flushed_a, flushed_b) {
        (Err(error), Ok(())) => (session_a, error),
        (Ok(()), Err(error)) => (session_b, error),
        other => panic!("unexpected {other:?}"),
    };
    assert_eq!(error.code(), "STORE_CONFLICT");
    assert_eq!(
        loser.append(user("again")).unwrap_err().code(),
        "SESSION_FENCED"
    );
    // The store holds exactly the winner's event.
    let stored = fixture.sessions().load(&id).await.unwrap();
    assert_eq!(stored.log.head(), 1);
}
