//! Forgetting a closed session: when the host closes a session (its actor stopped),
//! the plugin drops the session's in-memory state — the maintenance controller, the
//! price, memo, digest and notice caches, the dispatch snapshot. All of it is what a
//! new process rebuilds from the store on the session's next use
//! ([`Care::ensure_session`] replays the controller from the journal), so a server that
//! runs for days keeps state only for the sessions it is driving. The UI samples stay:
//! the management routes show them for sessions no actor runs (CC-MET-5).

use std::sync::Arc;

use ccare_core::{Event, SessionId};
use ccare_session::{Lifecycle, Observer, ObserverError};

use crate::care::Care;

/// The observer that forgets closed sessions.
pub(crate) struct ForgetClosed {
    pub(crate) care: Arc<Care>,
}

impl Observer for ForgetClosed {
    fn name(&self) -> &str {
        "context-care"
    }

    fn on_event(&self, _session: &SessionId, _event: &Arc<Event>) -> Result<(), ObserverError> {
        Ok(())
    }

    fn on_lifecycle(&self, notice: &Lifecycle) -> Result<(), ObserverError> {
        if let Lifecycle::Closed(session) = notice {
            self.care.forget_session(session);
        }
        Ok(())
    }
}
