//! H-STORE-4 for a session's flush: it resolves only once every event appended before
//! it is durable, also while another flush of the same session is waiting for those
//! writes, and also after such a flush was dropped half-way (its caller gave up).

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
