//! Post-commit observers (spec H-OBS).
//!
//! Synchronous observers run inline, in seq order, once per committed event; their
//! errors and panics are logged and never affect the append. Asynchronous consumers
//! (the web UI, later) subscribe to a bounded broadcast with
//! [`crate::Session::subscribe`]; a lagging subscriber catches up from the log.

use std::sync::Arc;

use ccare_core::{Event, SessionId};

/// An observer's failure; logged as `(observer, session, seq)`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct ObserverError(pub String);

/// A session lifecycle notice, delivered through the same registry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Lifecycle {
    /// A new session was created (or imported).
    Created(SessionId),
    /// A session was forked from `parent`.
    Forked {
        /// The new session.
        session: SessionId,
        /// Its source.
        parent: SessionId,
    },
    /// A session was closed.
    Closed(SessionId),
}

/// A synchronous post-commit observer. It must be cheap and must not append to the
/// session it observes (that fails with `REENTRANT_APPEND`).
pub trait Observer: Send + Sync + 'static {
    /// A stable name for logs.
    fn name(&self) -> &str;

    /// Called once per committed event, in seq order.
    fn on_event(&self, session: &SessionId, event: &Arc<Event>) -> Result<(), ObserverError>;

    /// Called for lifecycle notices; ignored by default.
    fn on_lifecycle(&self, notice: &Lifecycle) -> Result<(), ObserverError> {
        let _ = notice;
        Ok(())
    }
}

/// The sessions this process created (created, imported or forked: an id new to the
/// store) that a plugin has not used yet, newest last, at most [`CreatedHere::KEPT`].
///
/// A plugin whose rows for a session load on first use (context care's journal, the
/// completion observer's state) notes [`Lifecycle::Created`] and [`Lifecycle::Forked`]
/// here, and skips reading the store at the session's first use: the store cannot hold
/// rows of an id it just handed out (an import of an id the store holds is refused, and
/// sessions are never deleted). The bound keeps a process that creates sessions it
/// never drives (imports) from growing; a session that fell off is loaded as any other.
#[derive(Debug, Default)]
pub struct CreatedHere {
    noted: parking_lot::Mutex<std::collections::VecDeque<SessionId>>,
}

impl CreatedHere {
    /// How many created sessions are remembered before their first use. Each is used
    /// at once (a new conversation's first request).
    pub const KEPT: usize = 256;

    /// Notes that `session` was just created in this process.
    pub fn note(&self, session: &SessionId) {
        let mut noted = self.noted.lock();
        noted.push_back(session.clone());
        if noted.len() > Self::KEPT {
            noted.pop_front();
        }
    }

    /// Whether the session `session` names was noted and not taken since; forgets it.
    pub fn take(&self, session: &str) -> bool {
        let mut noted = self.noted.lock();
        // The newest first: a session is used right after it is created.
        match noted.iter().rposition(|id| id.as_str() == session) {
            Some(at) => {
                noted.remove(at);
                true
            }
            None => false,
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    fn id(n: usize) -> SessionId {
        SessionId::new(format!("01a00000-0000-7000-8000-{n:012}")).unwrap()
    }

    #[test]
    fn a_noted_session_is_taken_once() {
        let created = CreatedHere::default();
        created.note(&id(1));
        created.note(&id(2));
        assert!(created.take(id(1).as_str()));
        assert!(!created.take(id(1).as_str()), "taken once");
        assert!(created.take(id(2).as_str()));
        assert!(!created.take(id(3).as_str()), "never noted");
    }

    #[test]
    fn the_oldest_noted_sessions_fall_off_past_the_bound() {
        let created = CreatedHere::default();
        for n in 0..=CreatedHere::KEPT {
            created.note(&id(n));
        }
        assert!(!created.take(id(0).as_str()), "the oldest fell off");
        assert!(created.take(id(1).as_str()));
        assert!(created.take(id(CreatedHere::KEPT).as_str()));
    }
}
