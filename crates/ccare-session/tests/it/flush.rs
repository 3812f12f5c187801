//! H-STORE-4 for a session's flush: it resolves only once every event appended before
//! it is durable, also while another flush of the same session is waiting for those
//! writes, and also after such a flush was dropped half-way (its caller gave up). A
//! flush of writes the store already committed asks the store for nothing, and
//! `flush_within` (the event stream's, ACT-4) waits for the appender's flush before it
//! makes one of its own.

use std::future::Future;
use std::pin::pin;
use std::sync::Arc;
use std::task::{Context, Poll, Waker};

use ccare_core::kinds::TurnStart;
use ccare_core::*;
use ccare_session::*;
use ccare_store::Store;
use ccare_store::testing::FailingStore;

/// Polls `future` once, with a waker that does nothing: whether it is ready now.
fn poll_once<F: Future>(future: std::pin::Pin<&mut F>) -> Poll<F::Output> {
    future.poll(&mut Context::from_waker(Waker::noop()))
}

#[tokio::test]
async fn h_store_4_no_flush_returns_before_the_writes_another_flush_waits_for_are_durable() {
    let store = Arc::new(FailingStore::default());
    let sessions = Sessions::new(
        Arc::clone(&store) as Arc<dyn Store>,
        Arc::new(ManualClock::new(1_000)),
        Arc::new(Registry::with_host_defaults()),
        SessionsConfig::default(),
    );
    let session = sessions.create(None, JsonObject::new()).await.unwrap();
    session.flush().await.unwrap();
    // A write whose acknowledgement is held back: what the store makes durable after
    // it (the next append, the next store flush) is held too, as on a slow disk.
    store.hold_kv_writes();
    let _held = store.kv_cas("test", "slow", None, Some(b"disk".to_vec()));
    session
        .append(EventDraft::typed(&TurnStart { turn: 1 }).unwrap())
        .unwrap();

    // The first flush takes the append's ticket and waits for it.
    let mut first = Box::pin(session.flush());
    assert!(poll_once(first.as_mut()).is_pending());
    // A second flush finds nothing queued, yet the append is not durable: it waits.
    let mut second = pin!(session.flush());
    assert!(
        poll_once(second.as_mut()).is_pending(),
        "a flush returned while another one still waited for the append"
    );
    // The first caller gives up: the append is still not durable, so the second
    // flush goes on waiting, now for the ticket the first one left behind.
    drop(first);
    assert!(poll_once(second.as_mut()).is_pending());
    let mut third = pin!(session.flush());
    assert!(poll_once(third.as_mut()).is_pending());

    store.release_kv_writes();
    second.await.unwrap();
    third.await.unwrap();
    assert_eq!(session.status(), SessionStatus::Writable);
    // Nothing is left to wait for: a flush now returns at once.
    assert!(poll_once(pin!(session.flush())).is_ready());
}

fn sessions_over(store: &Arc<FailingStore>) -> Sessions {
    Sessions::new(
        Arc::clone(store) as Arc<dyn Store>,
        Arc::new(ManualClock::new(1_000)),
        Arc::new(Registry::with_host_defaults()),
        SessionsConfig::default(),
    )
}

fn turn_start(turn: u32) -> EventDraft {
    EventDraft::typed(&TurnStart { turn }).unwrap()
}

/// A new session over `store` whose next append, `turn/start` 1, is not durable
/// until the store's held writes are released (the held write's ticket comes too).
async fn session_with_a_held_append(
    store: &Arc<FailingStore>,
) -> (Session, ccare_store::Ticket<Option<u64>>) {
    let session = sessions_over(store)
        .create(None, JsonObject::new())
        .await
        .unwrap();
    session.flush().await.unwrap();
    store.hold_kv_writes();
    let held = store.kv_cas("test", "slow", None, Some(b"disk".to_vec()));
    session.append(turn_start(1)).unwrap();
    (session, held)
}

fn turn_end(turn: u32) -> EventDraft {
    EventDraft::typed(&ccare_core::kinds::TurnEnd {
        turn,
        reason: ccare_core::kinds::TurnEndReason::Completed,
        repair: false,
    })
    .unwrap()
}

#[tokio::test]
async fn h_store_4_a_flush_of_writes_the_store_already_committed_makes_no_store_call() {
    let store = Arc::new(FailingStore::default());
    let session = sessions_over(&store)
        .create(None, JsonObject::new())
        .await
        .unwrap();
    session.flush().await.unwrap();
    let before = store.flush_calls();
    // The memory store commits every write as it is made.
    session.append(turn_start(1)).unwrap();
    session.flush().await.unwrap();
    assert_eq!(
        store.flush_calls(),
        before,
        "a committed write was flushed again"
    );

    // A write not committed yet is flushed.
    store.hold_kv_writes();
    let _held = store.kv_cas("test", "slow", None, Some(b"disk".to_vec()));
    session.append(turn_end(1)).unwrap();
    let mut flush = pin!(session.flush());
    assert!(poll_once(flush.as_mut()).is_pending());
    assert_eq!(store.flush_calls(), before + 1);
    store.release_kv_writes();
    flush.await.unwrap();
}

#[tokio::test]
async fn act_4_flush_within_waits_for_the_appenders_flush_instead_of_making_its_own() {
    let store = Arc::new(FailingStore::default());
    let (session, _held) = session_with_a_held_append(&store).await;
    let before = store.flush_calls();

    // A reader with a long grace waits, and asks the store for nothing.
    let reader = tokio::spawn({
        let session = session.clone();
        async move {
            session
                .flush_within(std::time::Duration::from_secs(600))
                .await
        }
    });
    tokio::task::yield_now().await;
    assert!(
        !reader.is_finished(),
        "the reader saw a write that is not durable"
    );
    assert_eq!(store.flush_calls(), before);

    // The appender flushes; once its writes are durable the reader is done too.
    let mut flush = pin!(session.flush());
    assert!(poll_once(flush.as_mut()).is_pending());
    assert!(!reader.is_finished());
    store.release_kv_writes();
    flush.await.unwrap();
    tokio::time::timeout(std::time::Duration::from_secs(10), reader)
        .await
        .expect("the reader was not told of the appender's flush")
        .unwrap()
        .unwrap();
    assert_eq!(store.flush_calls(), before + 1, "the reader flushed too");
}

#[tokio::test(start_paused = true)]
async fn act_4_flush_within_flushes_itself_once_the_grace_is_over() {
    let store = Arc::new(FailingStore::default());
    let (session, _held) = session_with_a_held_append(&store).await;
    let before = store.flush_calls();

    let grace = std::time::Duration::from_millis(50);
    let reader = tokio::spawn({
        let session = session.clone();
        async move { session.flush_within(grace).await }
    });
    tokio::time::sleep(grace / 2).await;
    assert_eq!(
        store.flush_calls(),
        before,
        "flushed before the grace was over"
    );
    tokio::time::sleep(grace).await;
    assert_eq!(store.flush_calls(), before + 1, "no flush after the grace");
    // Its own flush still waits for the write to be durable.
    assert!(!reader.is_finished());
    store.release_kv_writes();
    reader.await.unwrap().unwrap();
    assert_eq!(session.status(), SessionStatus::Writable);
}
