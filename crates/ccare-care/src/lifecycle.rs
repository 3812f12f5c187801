//! What the plugin does when a session is created or closed.
//!
//! **Created here.** A session this process just created, imported or forked has no
//! journal rows in the store: its id is new to the store (an import of an id the store
//! holds is refused, and sessions are never deleted). The journal is told so, and the
//! session's first use skips reading the store for rows it cannot have
//! ([`crate::journal::RequestJournal::note_created`]).
//!
//! **Closed.** When the host closes a session (its actor stopped), the plugin drops the
//! session's in-memory state — the maintenance controller, the price, memo, digest and
//! notice caches, the dispatch snapshot. All of it is what a new process rebuilds from
//! the store on the session's next use ([`Care::ensure_session`] replays the controller
//! from the journal), so a server that runs for days keeps state only for the sessions
//! it is driving. The UI samples stay: the management routes show them for sessions no
//! actor runs (CC-MET-5).

use std::sync::Arc;

use ccare_core::{Event, SessionId};
use ccare_session::{Lifecycle, Observer, ObserverError};

use crate::care::Care;

/// The observer of sessions created and closed.
pub(crate) struct SessionLifecycle {
    pub(crate) care: Arc<Care>,
}

impl Observer for SessionLifecycle {
    fn name(&self) -> &str {
        "context-care"
    }

    fn on_event(&self, _session: &SessionId, _event: &Arc<Event>) -> Result<(), ObserverError> {
        Ok(())
    }

    fn on_lifecycle(&self, notice: &Lifecycle) -> Result<(), ObserverError> {
        match notice {
            Lifecycle::Created(session) | Lifecycle::Forked { session, .. } => {
                self.care.journal.note_created(session);
            }
            Lifecycle::Closed(session) => self.care.forget_session(session),
        }
        Ok(())
    }
}
