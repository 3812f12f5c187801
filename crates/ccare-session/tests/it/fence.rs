//! H-STORE-6 in process: a session fenced by a failed write shows the fence in its
//! status, refuses appends, and `Sessions::open` gives a fresh, working session once
//! the store works again (the durable prefix, repaired), not the cached fenced handle.

use std::sync::Arc;

use ccare_core::kinds::*;
use ccare_core::*;
use ccare_session::*;
use ccare_store::testing::{FailingStore, Fault};
use ccare_store::{SqliteConfig, SqliteStore, Store, StoreError};

/// The error the unplugged disk gives every append.
fn unplugged() -> StoreError {
    StoreError::Backend {
        operation: "append",
        message: "disk unplugged".to_owned(),
    }
}

/// A SQLite store whose appends can be made to fail (the disk is unplugged).
fn failing_store(dir: &tempfile::TempDir) -> Arc<FailingStore<SqliteStore>> {
    Arc::new(FailingStore::new(
        SqliteStore::open(SqliteConfig::new(dir.path().join("ccare.db"))).unwrap(),
    ))
}

fn unplug(store: &FailingStore<SqliteStore>) {
    store.fail(Fault::appends("disk unplugged"));
}

fn user(text: &str) -> EventDraft {
    let mut message = Message::from_blocks(vec![ContentBlock::text(text)]);
    message.source = Some(Source::user());
    EventDraft::typed(&UserMessage { message })
        .unwrap()
        .with_surface(SurfaceOp::Append)
}

fn kinds_and_texts(log: &SessionLog) -> Vec<(String, String)> {
    log.events()
        .iter()
        .map(|event| {
            let text = event
                .decode::<UserMessage>()
                .map(|data| data.message.joined_text(""))
                .unwrap_or_default();
            (event.kind().to_owned(), text)
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn h_store_6_a_fenced_session_shows_the_fence_and_reopens_fresh_once_the_store_works() {
    let dir = tempfile::tempdir().unwrap();
    let store = failing_store(&dir);
    let sessions = Sessions::new(
        Arc::clone(&store) as Arc<dyn Store>,
        Arc::new(ManualClock::new(1_000)),
        Arc::new(Registry::with_host_defaults()),
        SessionsConfig::default(),
    );
    let session = sessions.create(None, JsonObject::new()).await.unwrap();
    let id = session.id().clone();
    assert_eq!(session.status(), SessionStatus::Writable);
    // An open turn whose prompt is durable...
    session
        .append(EventDraft::typed(&TurnStart { turn: 1 }).unwrap())
        .unwrap();
    session.append(user("kept")).unwrap();
    session.flush().await.unwrap();
    // ...then the disk goes away under the next write.
    unplug(&store);
    session.append(user("lost")).unwrap();
    let error = session.flush().await.unwrap_err();
    assert_eq!(error.code(), "STORE_IO");
    let fenced = SessionStatus::Fenced { cause: unplugged() };
    assert_eq!(session.status(), fenced);
    assert_eq!(
        session.status().to_string(),
        "fenced after a store error (store append failed: disk unplugged); reopen the session to repair it"
    );
    assert_eq!(
        session.append(user("refused")).unwrap_err().code(),
        "SESSION_FENCED"
    );
    // The store works again: open gives a fresh session over the durable prefix, with
    // the interrupted turn repaired, and it takes appends.
    store.heal();
    let reopened = sessions.open(&id).await.unwrap();
    assert_eq!(reopened.status(), SessionStatus::Writable);
    reopened.append(user("after")).unwrap();
    reopened.flush().await.unwrap();
    let stored = sessions.load(&id).await.unwrap();
    assert_eq!(
        kinds_and_texts(&stored.log),
        [
            ("turn/start".to_owned(), String::new()),
            ("user/message".to_owned(), "kept".to_owned()),
            ("turn/end".to_owned(), String::new()),
            ("user/message".to_owned(), "after".to_owned()),
        ]
    );
    // The old handle stays fenced; the engine hands out the fresh one from now on.
    assert_eq!(session.status(), fenced);
    assert_eq!(sessions.open(&id).await.unwrap().head(), reopened.head());
    reopened.append(user("again")).unwrap();
    assert_eq!(sessions.open(&id).await.unwrap().head(), 5);
}

/// H-STORE-5 `per-append`: the append itself waits for its commit, so a write error is
/// the append's own error (not the next flush's), the session is fenced at once, and no
/// subscriber sees the event that was not stored.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn h_store_5_per_append_returns_the_write_error_of_its_own_append() {
    let dir = tempfile::tempdir().unwrap();
    let store = failing_store(&dir);
    let sessions = Sessions::new(
        Arc::clone(&store) as Arc<dyn Store>,
        Arc::new(ManualClock::new(1_000)),
        Arc::new(Registry::with_host_defaults()),
        SessionsConfig {
            durability: ccare_store::Durability::PerAppend,
            ..SessionsConfig::default()
        },
    );
    let session = sessions.create(None, JsonObject::new()).await.unwrap();
    let id = session.id().clone();
    let mut committed = session.subscribe();
    session
        .append(EventDraft::typed(&TurnStart { turn: 1 }).unwrap())
        .unwrap();
    // Durable when append returned: another engine on the same file reads it, no flush.
    let other = SqliteStore::open(SqliteConfig::new(dir.path().join("ccare.db"))).unwrap();
    assert_eq!(other.session(&id).await.unwrap().unwrap().head, 1);
    assert_eq!(committed.recv().await.unwrap().kind(), "turn/start");
    unplug(&store);
    let error = session.append(user("lost")).unwrap_err();
    assert_eq!(error.code(), "SESSION_FENCED");
    assert_eq!(
        session.status(),
        SessionStatus::Fenced { cause: unplugged() }
    );
    assert!(
        committed.try_recv().is_err(),
        "no subscriber saw the lost event"
    );
    assert_eq!(other.session(&id).await.unwrap().unwrap().head, 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn h_store_6_another_writers_unreported_error_does_not_fence_a_session_with_nothing_to_flush()
{
    let dir = tempfile::tempdir().unwrap();
    let store =
        Arc::new(SqliteStore::open(SqliteConfig::new(dir.path().join("ccare.db"))).unwrap());
    let sessions = Sessions::new(
        Arc::clone(&store) as Arc<dyn Store>,
        Arc::new(ManualClock::new(1_000)),
        Arc::new(Registry::with_host_defaults()),
        SessionsConfig::default(),
    );
    let session = sessions.create(None, JsonObject::new()).await.unwrap();
    session
        .append(EventDraft::typed(&TurnStart { turn: 1 }).unwrap())
        .unwrap();
    session.append(user("kept")).unwrap();
    session.flush().await.unwrap();
    // A plugin's write fails (a stale version) and nobody awaits its ticket: the store
    // keeps the error for whoever flushes it next.
    drop(store.kv_cas("plugin", "row", Some(7), Some(b"1".to_vec())));
    assert!(store.kv_get("plugin", "row").await.unwrap().is_none());
    // The session has nothing unacknowledged: its flush is not that error's reader.
    session.flush().await.unwrap();
    assert_eq!(session.status(), SessionStatus::Writable);
    session.append(user("still writable")).unwrap();
    session.flush().await.unwrap();
    assert_eq!(
        kinds_and_texts(&session.with_log(|log| log.clone()))
            .into_iter()
            .map(|(_, text)| text)
            .collect::<Vec<_>>(),
        ["", "kept", "still writable"]
    );
}

/// The sessions of a store whose creations can be made to fail or held.
fn sessions_over(store: &Arc<FailingStore<SqliteStore>>) -> Sessions {
    sessions_with(store, Registry::with_host_defaults())
}

/// The sessions of `store` over `registry`.
fn sessions_with(store: &Arc<FailingStore<SqliteStore>>, registry: Registry) -> Sessions {
    Sessions::new(
        Arc::clone(store) as Arc<dyn Store>,
        Arc::new(ManualClock::new(1_000)),
        Arc::new(registry),
        SessionsConfig::default(),
    )
}

/// A queued creation is the session's first pending write: it takes appends at once,
/// its first flush makes the row and the events durable together (under the header's
/// incarnation), and until then the session does not read as durable.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn h_store_6_a_queued_creation_is_durable_with_the_first_flush() {
    let dir = tempfile::tempdir().unwrap();
    let store = failing_store(&dir);
    let sessions = sessions_over(&store);
    store.hold_creations();
    let session = sessions.create_queued(JsonObject::new()).unwrap();
    let id = session.id().clone();
    session
        .append(EventDraft::typed(&TurnStart { turn: 1 }).unwrap())
        .unwrap();
    session.append(user("first")).unwrap();
    // Held: the flush waits for the creation, not only for the events.
    let flush = tokio::time::timeout(std::time::Duration::from_millis(200), session.flush()).await;
    assert!(
        flush.is_err(),
        "the flush returned before the creation was durable"
    );
    store.release_kv_writes();
    session.flush().await.unwrap();
    let stored = store.inner().session(&id).await.unwrap().unwrap();
    assert_eq!(
        (stored.head, stored.incarnation.as_str()),
        (2, session.header().incarnation.as_str())
    );
    let loaded = sessions.load(&id).await.unwrap();
    assert_eq!(
        kinds_and_texts(&loaded.log),
        [
            ("turn/start".to_owned(), String::new()),
            ("user/message".to_owned(), "first".to_owned()),
        ]
    );
}

/// A queued creation that fails fences the session: its first flush returns the
/// creation's error (even with nothing appended), appends are refused from then on,
/// and the store holds nothing of it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn h_store_6_a_failed_queued_creation_fences_the_session() {
    let dir = tempfile::tempdir().unwrap();
    let store = failing_store(&dir);
    let sessions = sessions_over(&store);
    store.fail(Fault::creates("disk unplugged"));
    let session = sessions.create_queued(JsonObject::new()).unwrap();
    let id = session.id().clone();
    let creation_failed = StoreError::Backend {
        operation: "create_session",
        message: "disk unplugged".to_owned(),
    };
    assert_eq!(session.flush().await.unwrap_err(), creation_failed);
    assert_eq!(
        session.status(),
        SessionStatus::Fenced {
            cause: creation_failed
        }
    );
    assert_eq!(
        session.append(user("refused")).unwrap_err().code(),
        "SESSION_FENCED"
    );
    store.heal();
    assert_eq!(store.inner().session(&id).await.unwrap(), None);
}

/// The texts of a session's user messages, folded (a projection checkpointed to the
/// store like any other).
struct UserTexts;

impl Projection for UserTexts {
    type State = Vec<String>;

    fn key(&self) -> &str {
        "test/user-texts"
    }

    fn version(&self) -> u32 {
        1
    }

    fn init(&self) -> Vec<String> {
        Vec::new()
    }

    fn apply(&self, state: &Vec<String>, event: &Event) -> Option<Vec<String>> {
        let message = event.decode::<UserMessage>().ok()?;
        let mut next = state.clone();
        next.push(message.message.joined_text(""));
        Some(next)
    }
}

/// The sessions of `store` with [`UserTexts`] registered.
fn sessions_with_texts(store: &Arc<FailingStore<SqliteStore>>) -> Sessions {
    let registry = Registry::with_host_defaults();
    registry.register_projection(erase(UserTexts)).unwrap();
    sessions_with(store, registry)
}

/// A fenced session's memory holds an event the store refused. Closing it must not
/// checkpoint a projection folded over that event: the reopened session appends other
/// events at its seq (the repair), and a checkpoint that far ahead would be restored
/// with the refused event in it and the repair missing (H-PROJ-3, H-STORE-6).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn h_store_6_closing_a_fenced_session_checkpoints_nothing_the_store_refused() {
    let dir = tempfile::tempdir().unwrap();
    let store = failing_store(&dir);
    let sessions = sessions_with_texts(&store);
    let session = sessions.create(None, JsonObject::new()).await.unwrap();
    let id = session.id().clone();
    session
        .append(EventDraft::typed(&TurnStart { turn: 1 }).unwrap())
        .unwrap();
    session.append(user("kept")).unwrap();
    session.flush().await.unwrap();
    // Only appends fail (a lost append conflict does the same): the store still takes
    // the close's checkpoint write.
    unplug(&store);
    session.append(user("lost")).unwrap();
    session.flush().await.unwrap_err();
    // Memory still holds the refused event, and a projection folds it.
    let folded = session
        .state_of::<UserTexts>("test/user-texts")
        .await
        .unwrap();
    assert_eq!(*folded, ["kept", "lost"]);
    // Closing reports the fence's error.
    assert_eq!(
        sessions.close(&id).await.unwrap_err().to_string(),
        "store append failed: disk unplugged"
    );
    store.heal();
    let reopened = sessions.open(&id).await.unwrap();
    reopened.append(user("after")).unwrap();
    reopened.flush().await.unwrap();
    let texts = reopened
        .state_of::<UserTexts>("test/user-texts")
        .await
        .unwrap();
    assert_eq!(*texts, ["kept", "after"]);
}

/// The periodic checkpoint (every [`CHECKPOINT_EVERY`] appends) folds only events
/// known durable: the append that triggers it may be the one the store refuses, and a
/// checkpoint over it would be restored once a reopen gives its seq to another event.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn h_store_6_a_periodic_checkpoint_holds_no_event_the_store_refused() {
    let dir = tempfile::tempdir().unwrap();
    let store = failing_store(&dir);
    let sessions = sessions_with_texts(&store);
    let session = sessions.create(None, JsonObject::new()).await.unwrap();
    let id = session.id().clone();
    session
        .append(EventDraft::typed(&TurnStart { turn: 1 }).unwrap())
        .unwrap();
    // Up to the event whose append triggers the periodic checkpoint.
    let before = CHECKPOINT_EVERY - 2;
    for n in 0..before {
        session.append(user(&format!("kept {n}"))).unwrap();
    }
    session.flush().await.unwrap();
    let folded = session
        .state_of::<UserTexts>("test/user-texts")
        .await
        .unwrap();
    assert_eq!(folded.len(), usize::try_from(before).unwrap());
    // The store refuses that append, but still takes the checkpoint's KV write.
    store.fail(Fault::appends("disk unplugged").containing("lost"));
    session.append(user("lost")).unwrap();
    assert_eq!(session.head(), CHECKPOINT_EVERY);
    session.flush().await.unwrap_err();
    sessions.close(&id).await.unwrap_err();
    store.heal();
    let reopened = sessions.open(&id).await.unwrap();
    reopened.append(user("after")).unwrap();
    reopened.flush().await.unwrap();
    let texts = reopened
        .state_of::<UserTexts>("test/user-texts")
        .await
        .unwrap();
    assert!(
        !texts.iter().any(|text| text == "lost"),
        "{:?}",
        &texts[texts.len() - 3..]
    );
    assert_eq!(texts.last().map(String::as_str), Some("after"));
    assert_eq!(texts.len(), usize::try_from(before).unwrap() + 1);
}

/// H-PROJ-3's periodic checkpoint is still written while the store works: at the
/// 512th append, over every event but that append's own, which is not known durable
/// yet.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn h_proj_3_the_periodic_checkpoint_covers_the_durable_events() {
    let dir = tempfile::tempdir().unwrap();
    let store = failing_store(&dir);
    let sessions = sessions_with_texts(&store);
    let session = sessions.create(None, JsonObject::new()).await.unwrap();
    session
        .append(EventDraft::typed(&TurnStart { turn: 1 }).unwrap())
        .unwrap();
    session
        .state_of::<UserTexts>("test/user-texts")
        .await
        .unwrap();
    let key = format!("{}/test/user-texts", session.id());
    for n in 0..CHECKPOINT_EVERY - 1 {
        session.append(user(&format!("kept {n}"))).unwrap();
        session.flush().await.unwrap();
    }
    assert_eq!(session.head(), CHECKPOINT_EVERY);
    store.inner().flush().await.unwrap();
    let stored = store
        .inner()
        .kv_get(PROJECTION_DOMAIN, &key)
        .await
        .unwrap()
        .expect("a periodic checkpoint");
    let checkpoint: serde_json::Value = serde_json::from_slice(&stored.value).unwrap();
    assert_eq!(checkpoint["seq"], CHECKPOINT_EVERY - 1);
    assert_eq!(
        checkpoint["state"].as_array().map(Vec::len),
        Some(usize::try_from(CHECKPOINT_EVERY - 2).unwrap())
    );
}
