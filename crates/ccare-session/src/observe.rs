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
