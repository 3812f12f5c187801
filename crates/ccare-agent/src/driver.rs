//! The session driver slot (CC-EXT-3): how a plugin's HTTP route reaches a session
//! it must append to. A session is appended to only by its driver, the holder of its
//! lease (in `ccare serve`, the agent actor of the session); the kernel knows no
//! lease, so the front end that runs the actors installs a [`SessionDriver`] on the
//! host ([`crate::Host::set_session_driver`]) and plugins read it at request time
//! through the [`DriverSlot`] their scope handed them
//! ([`crate::PluginScope::session_driver`]).

use std::any::Any;
use std::sync::Arc;

use ccare_core::SessionId;
use ccare_session::Session;
use parking_lot::RwLock;

use crate::tool::BoxFuture;

/// The open session a driver lends, with what keeps it driven (the actor handle, the
/// lease) until this value is dropped.
pub struct DrivenSession {
    /// The open session, the very handle its driver appends through.
    pub session: Session,
    /// Keeps the driver holding the session while the borrower works.
    pub guard: Box<dyn Any + Send + Sync>,
}

impl std::fmt::Debug for DrivenSession {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter
            .debug_struct("DrivenSession")
            .field("session", self.session.id())
            .finish_non_exhaustive()
    }
}

/// Why a driver could not lend a session.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DriverError {
    /// There is no such session.
    #[error("no session {0}")]
    UnknownSession(String),
    /// Another process drives the session (its lease is held elsewhere).
    #[error("{0}")]
    Busy(String),
    /// The session could not be opened.
    #[error("{0}")]
    Failed(String),
}

/// Lends the open session of an id to a caller that must append to it between turns.
pub trait SessionDriver: Send + Sync + 'static {
    /// The session `id` as its driver holds it, started (lease taken, opened) when it
    /// is not running yet.
    fn drive<'a>(&'a self, id: &'a SessionId) -> BoxFuture<'a, Result<DrivenSession, DriverError>>;
}

/// The host's session driver, read when needed (it is installed after plugins mount).
#[derive(Clone, Default)]
pub struct DriverSlot(Arc<RwLock<Option<Arc<dyn SessionDriver>>>>);

impl std::fmt::Debug for DriverSlot {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter
            .debug_struct("DriverSlot")
            .field("installed", &self.0.read().is_some())
            .finish()
    }
}

impl DriverSlot {
    /// The installed driver, if a front end installed one.
    pub fn get(&self) -> Option<Arc<dyn SessionDriver>> {
        self.0.read().clone()
    }

    /// Installs `driver`, replacing an earlier one.
    pub(crate) fn set(&self, driver: Arc<dyn SessionDriver>) {
        *self.0.write() = Some(driver);
    }
}
