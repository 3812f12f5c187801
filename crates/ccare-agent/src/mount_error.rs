//! Why a plugin could not mount ([`MountError`]) and why the host refused one of its
//! registrations ([`ScopeError`]). The host prefixes either with the plugin's name
//! (H-CFG-3) in [`crate::HostError::Plugin`].

use ccare_session::RegistryError;

use crate::controls::ControlsError;
use crate::toolbox::ToolboxError;

/// Why [`crate::Plugin::mount`] failed. Its text is what the user reads after the
/// plugin's name (`context-care: retain_tokens must be ...`).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum MountError {
    /// The plugin's `[plugins.<name>]` table is invalid; the message names the key and
    /// the value.
    #[error("{0}")]
    Config(String),
    /// The host refused one of the plugin's registrations.
    #[error(transparent)]
    Scope(#[from] ScopeError),
}

impl From<RegistryError> for MountError {
    fn from(error: RegistryError) -> Self {
        MountError::Scope(error.into())
    }
}

impl From<ToolboxError> for MountError {
    fn from(error: ToolboxError) -> Self {
        MountError::Scope(error.into())
    }
}

impl From<ControlsError> for MountError {
    fn from(error: ControlsError) -> Self {
        MountError::Scope(error.into())
    }
}

/// Why a [`crate::PluginScope`] registration was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ScopeError {
    /// An event type or projection of that name is already registered.
    #[error(transparent)]
    Registry(#[from] RegistryError),
    /// A tool of that name is already registered, or its argument schema does not
    /// compile.
    #[error(transparent)]
    Tool(#[from] ToolboxError),
    /// The controls source is malformed or already registered.
    #[error(transparent)]
    Controls(#[from] ControlsError),
    /// The route's path is already registered (`ROUTE_CONFLICT`) or it has no methods.
    #[error(transparent)]
    Route(#[from] crate::routes::RouteError),
}
