//! [`Booted::drive`]: a session with its lease held (ACT-1) and no agent on it, for a
//! front end that only reads it; agents are started through [`crate::Agents`].

use std::sync::Arc;

use ccare_core::{SessionId, SystemClock};
use ccare_session::Session;

use crate::boot::Booted;
use crate::error::AppError;
use crate::lease::{SessionLease, WhenBusy};

impl Booted {
    /// Opens `id` (with crash repair) or creates a new session, holding its lease for
    /// as long as the returned [`SessionLease`] lives: for an existing session the
    /// lease is taken before anything is read or repaired, so a second driver never
    /// touches a session someone else drives. `when_busy` says whether a live holder
    /// fails the call ([`AppError::SessionBusy`]) or is waited for.
    pub async fn drive(
        &self,
        id: Option<&str>,
        when_busy: WhenBusy<'_>,
    ) -> Result<(Session, SessionLease), AppError> {
        let sessions = self.host.sessions();
        let store = Arc::clone(sessions.store());
        let clock = Arc::new(SystemClock);
        match id {
            Some(id) => {
                let id = SessionId::new(id.to_owned()).map_err(AppError::SessionId)?;
                let lease =
                    SessionLease::acquire(store, clock, &id, self.lease_ms, when_busy).await?;
                // On an error the lease is dropped, which releases it.
                let session = sessions.open(&id).await?;
                Ok((session, lease))
            }
            None => {
                // Nobody knows the new id before it is printed, so nobody can hold it.
                let session = sessions.create(None, Default::default()).await?;
                let lease = SessionLease::acquire(
                    store,
                    clock,
                    session.id(),
                    self.lease_ms,
                    WhenBusy::Fail,
                )
                .await?;
                Ok((session, lease))
            }
        }
    }
}
