//! One gateway request at a time per session, from finding the session to recording
//! the client view its answer leaves (GW-2, GW-3).
//!
//! A request's new messages are what its transcript holds beyond the session's client
//! view, and that view changes only when an answer is recorded. Two requests that
//! find the same session at once (a client retrying a request still being answered,
//! two agents sharing a session key) would each enter the same messages, and the
//! second's model request would carry a conversation no client sent. So a request
//! holds its session's admission until its view is recorded; one that finds the
//! session held waits for it (up to a grace, else `SESSION_BUSY`) and is then looked
//! up again against the view the first one left.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use ccare_core::SessionId;
use parking_lot::Mutex;
use tokio::sync::OwnedMutexGuard;

/// The sessions a gateway request is being answered in, each with the lock the
/// request holds.
#[derive(Debug, Default)]
pub(crate) struct Admissions {
    held: Mutex<HashMap<SessionId, Arc<tokio::sync::Mutex<()>>>>,
}

/// A session held for one request; dropped once its client view is recorded (or the
/// request ends without one).
#[derive(Debug)]
pub(crate) struct Admitted {
    admissions: Arc<Admissions>,
    session: SessionId,
    guard: Option<OwnedMutexGuard<()>>,
}

impl Admitted {
    /// The session held.
    pub(crate) fn session(&self) -> &SessionId {
        &self.session
    }
}

impl Admissions {
    /// The session's lock, shared by every request that found it.
    fn lock_of(&self, session: &SessionId) -> Arc<tokio::sync::Mutex<()>> {
        Arc::clone(self.held.lock().entry(session.clone()).or_default())
    }

    /// Holds `session` if no other request does.
    pub(crate) fn try_admit(self: &Arc<Self>, session: &SessionId) -> Option<Admitted> {
        let guard = self.lock_of(session).try_lock_owned().ok()?;
        Some(self.admitted(session, guard))
    }

    /// Holds `session` once the request holding it lets go, waiting `grace` at most
    /// (`None`: still held then).
    pub(crate) async fn admit(
        self: &Arc<Self>,
        session: &SessionId,
        grace: Duration,
    ) -> Option<Admitted> {
        let lock = self.lock_of(session);
        match tokio::time::timeout(grace, lock.lock_owned()).await {
            Ok(guard) => Some(self.admitted(session, guard)),
            Err(_) => {
                self.forget_if_unused(session);
                None
            }
        }
    }

    fn admitted(self: &Arc<Self>, session: &SessionId, guard: OwnedMutexGuard<()>) -> Admitted {
        Admitted {
            admissions: Arc::clone(self),
            session: session.clone(),
            guard: Some(guard),
        }
    }

    /// Drops the session's entry when no request holds or awaits its lock (the map
    /// keeps only sessions being answered).
    fn forget_if_unused(&self, session: &SessionId) {
        let mut held = self.held.lock();
        // The map's own reference is the only one: nobody holds it (a guard keeps
        // one) and nobody waits for it (a waiter cloned one under this lock).
        if held
            .get(session)
            .is_some_and(|lock| Arc::strong_count(lock) == 1)
        {
            held.remove(session);
        }
    }

    /// How many sessions are held or awaited (tests).
    #[cfg(test)]
    fn len(&self) -> usize {
        self.held.lock().len()
    }
}

impl Drop for Admitted {
    fn drop(&mut self) {
        drop(self.guard.take());
        self.admissions.forget_if_unused(&self.session);
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use super::*;

    fn session(n: u8) -> SessionId {
        SessionId::new(format!("01a24ec2-4d2b-7787-ba84-5c7c97443f1{n}")).unwrap()
    }

    #[tokio::test]
    async fn a_held_session_admits_the_next_request_when_released_and_is_then_forgotten() {
        let admissions = Arc::new(Admissions::default());
        let first = admissions.try_admit(&session(1)).unwrap();
        assert!(admissions.try_admit(&session(1)).is_none());
        // Another session is not held up.
        let other = admissions.try_admit(&session(2)).unwrap();
        let waiting = {
            let admissions = Arc::clone(&admissions);
            tokio::spawn(async move {
                admissions
                    .admit(&session(1), Duration::from_secs(5))
                    .await
                    .map(|admitted| admitted.session().clone())
            })
        };
        tokio::time::sleep(Duration::from_millis(20)).await;
        assert!(!waiting.is_finished());
        drop(first);
        assert_eq!(waiting.await.unwrap(), Some(session(1)));
        drop(other);
        assert_eq!(admissions.len(), 0);
    }

    #[tokio::test]
    async fn a_request_waits_no_longer_than_its_grace() {
        let admissions = Arc::new(Admissions::default());
        let held = admissions.try_admit(&session(1)).unwrap();
        assert!(
            admissions
                .admit(&session(1), Duration::from_millis(20))
                .await
                .is_none()
        );
        assert_eq!(admissions.len(), 1);
        drop(held);
        assert_eq!(admissions.len(), 0);
    }
}
