//! Long sessions (issue 14 target 5): a log long enough that opening it parses and
//! decodes its rows on a second thread reopens exactly as the sequential replay would,
//! messages with unknown fields (which the one-pass decoder leaves to serde's derived
//! decoder) included, and a bad row deep in it is reported at its own seq.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use std::sync::Arc;

use ccare_core::kinds::UserMessage;
use ccare_core::*;
use ccare_session::*;
use ccare_store::{NewSession, SqliteConfig, SqliteStore, Store, StoredEvent};
use serde_json::json;

/// More rows than a replay parses on its own thread from (2,048).
const EVENTS: u64 = 3_000;

fn sessions(path: &std::path::Path) -> Sessions {
    let store = SqliteStore::open(SqliteConfig::new(path)).unwrap();
    Sessions::new(
        Arc::new(store) as Arc<dyn Store>,
        Arc::new(ManualClock::new(1_000)),
        Arc::new(Registry::with_host_defaults()),
        SessionsConfig::default(),
    )
}

/// A user message; every 7th has an unknown message field, every 11th an unknown
/// block field, every 13th an image block.
fn user(index: u64) -> EventDraft {
    let mut text = ContentBlock::text(format!("message {index}: \"quoted\" é 中"));
    if index.is_multiple_of(11)
        && let ContentBlock::Text(block) = &mut text
    {
        block
            .extra
            .insert("cache_control".into(), json!({"kind": "x"}));
    }
    let mut blocks = vec![text];
    if index.is_multiple_of(13) {
        blocks.push(ContentBlock::Image(ImageBlock {
            media_type: "image/png".into(),
            data: Some("AA==".into()),
            uri: None,
            offloaded: false,
            detail: None,
            extra: Extra::new(),
        }));
    }
    let mut message = Message::from_blocks(blocks);
    message.id = Some(format!("m{index}"));
    message.source = Some(Source::user());
    if index.is_multiple_of(7) {
        message.extra.insert("future".into(), json!([1, 2.5]));
    }
    EventDraft::typed(&UserMessage { message })
        .unwrap()
        .with_surface(SurfaceOp::Append)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn h_log_1_a_long_session_reopens_with_the_same_events_and_view() {
    let dir = tempfile::tempdir().unwrap();
    let engine = sessions(&dir.path().join("ccare.db"));
    let session = engine.create(None, JsonObject::new()).await.unwrap();
    for index in 0..EVENTS {
        session.append(user(index)).unwrap();
    }
    session.flush().await.unwrap();
    let written: Vec<String> = session.with_log(|log| {
        log.events()
            .iter()
            .map(|e| e.raw_json().to_owned())
            .collect()
    });
    let view = session.derived_view();
    assert_eq!(view.messages.len(), EVENTS as usize);

    let id = session.id().clone();
    engine.close(&id).await.unwrap();
    let reopened = sessions(&dir.path().join("ccare.db"));
    let mut loaded = reopened.load(&id).await.unwrap();
    let read: Vec<String> = loaded
        .log
        .events()
        .iter()
        .map(|event| event.raw_json().to_owned())
        .collect();
    assert_eq!(read, written);
    assert_eq!(loaded.log.derived_view(), view);
    assert!(loaded.violations.is_empty(), "{:?}", loaded.violations);
    let seventh = &loaded.log.derived_messages()[7].message;
    assert_eq!(seventh.extra.get("future"), Some(&json!([1, 2.5])));
    let eleventh = &loaded.log.derived_messages()[11].message;
    assert!(
        matches!(&eleventh.content[0], ContentBlock::Text(block) if block.extra.get("cache_control") == Some(&json!({"kind": "x"}))),
        "{eleventh:?}"
    );
    assert!(matches!(
        loaded.log.derived_messages()[13].message.content[1],
        ContentBlock::Image(_)
    ));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn h_val_3_a_bad_row_deep_in_a_long_log_is_reported_at_its_seq() {
    let dir = tempfile::tempdir().unwrap();
    let engine = sessions(&dir.path().join("ccare.db"));
    let id = new_session_id().unwrap();
    let bad = 2_600;
    let rows: Vec<StoredEvent> = (0..EVENTS)
        .map(|seq| {
            let claimed = if seq == bad { 9_999 } else { seq };
            let event = Event::encode(claimed, 1_000, user(seq)).unwrap();
            StoredEvent {
                seq,
                json: event.raw_json().into(),
            }
        })
        .collect();
    let new = NewSession {
        id: id.clone(),
        created_ms: 1_000,
        parent: None,
        seed_length: None,
        meta_json: "{}".into(),
        incarnation: ccare_store::new_incarnation(),
    };
    engine.store().create_session(new, rows).await.unwrap();
    let error = engine.load(&id).await.err();
    assert!(
        matches!(
            &error,
            Some(SessionError::Load(LoadError::SeqMismatch {
                position: 2_600,
                found: 9_999,
                ..
            }))
        ),
        "{error:?}"
    );
    assert_eq!(
        error.map(|error| error.to_string()),
        Some(format!(
            "session {id}: event at position 2600 claims seq 9999"
        ))
    );
}
