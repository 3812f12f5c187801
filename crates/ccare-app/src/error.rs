//! [`AppError`]: why a boot failed, typed so each front end chooses its own answer
//! (the CLI's exit code, the server's HTTP status) with [`AppError::is_bad_input`].

use std::path::PathBuf;

/// Why the config could not be loaded or the host could not be built.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum AppError {
    /// The config file exists (or was named) but cannot be read.
    #[error("cannot read config {}: {error}", path.display())]
    ReadConfig {
        /// The file.
        path: PathBuf,
        /// Why (part of the message, not a source, so it is printed once).
        error: std::io::Error,
    },
    /// The config is invalid: `origin` is the file (or "the command line"), `message`
    /// names the key path and the value found (H-CFG-2).
    #[error("{origin}: {message}")]
    Config {
        /// The file read, or what else the value came from.
        origin: String,
        /// The key path, what was expected and what was found.
        message: String,
    },
    /// `--profile` names no `[profiles.<id>]` table.
    #[error("--profile: no profile {id:?} in the config (profiles: {})", known.join(", "))]
    UnknownProfile {
        /// The id asked for.
        id: String,
        /// The profiles there are (`default` always).
        known: Vec<String>,
    },
    /// The data directory (or the database's folder) cannot be created.
    #[error("cannot create data directory {}", dir.display())]
    DataDir {
        /// The directory.
        dir: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// The store cannot be opened.
    #[error("cannot open store {}", path.display())]
    OpenStore {
        /// The database file.
        path: PathBuf,
        /// Why.
        #[source]
        source: ccare_store::StoreError,
    },
    /// A built-in tool could not be registered.
    #[error("cannot register the built-in tools: {0}")]
    Tool(String),
    /// An internal host (the demo's, the instructions' scratch host) could not be
    /// built: a bug, not the user's input.
    #[error("internal error: {0}")]
    Internal(String),
    /// A plugin refused its table or could not register (H-CFG-3).
    #[error(transparent)]
    Mount(#[from] ccare_agent::HostError),
    /// The agent's instructions could not be read.
    #[error(transparent)]
    Instructions(#[from] ccare_agent::InstructionsError),
    /// A session id given on the command line is not a valid id.
    #[error(transparent)]
    SessionId(#[from] ccare_core::InvalidSessionId),
    /// The session engine failed (an unknown session, a store error).
    #[error(transparent)]
    Session(#[from] ccare_session::SessionError),
    /// Another driver holds the session's lease and is alive (ACT-1): the front end
    /// did not ask to wait for it.
    #[error(
        "SESSION_BUSY: session {} is driven by pid {} on host {} (its lease expires in {} ms unless renewed)",
        lease.session, lease.holder.pid, lease.holder.host, remaining_ms
    )]
    SessionBusy {
        /// The holder's lease: owner, host, pid, expiry.
        lease: Box<ccare_store::Lease>,
        /// How long until that lease expires, by this host's clock when refused.
        remaining_ms: i64,
    },
    /// The store failed to grant, renew or release a lease.
    #[error("session lease: {0}")]
    Lease(#[source] ccare_store::StoreError),
    /// The queued messages an earlier process left in the session's inbox could not
    /// be read when its actor started.
    #[error("cannot restore the session's queued messages: {0}")]
    Inbox(#[source] ccare_agent::domains::DomainError),
}

impl AppError {
    /// A config error from `origin` naming a key.
    pub(crate) fn config(origin: impl Into<String>, message: impl Into<String>) -> Self {
        AppError::Config {
            origin: origin.into(),
            message: message.into(),
        }
    }

    /// Whether the user's input is at fault (bad config, unknown profile or session,
    /// an unusable workspace, a session another driver holds): the CLI exits 2 for
    /// these, 1 for the rest.
    pub fn is_bad_input(&self) -> bool {
        match self {
            AppError::ReadConfig { .. }
            | AppError::Config { .. }
            | AppError::UnknownProfile { .. }
            | AppError::Mount(_)
            | AppError::Instructions(_)
            | AppError::SessionId(_)
            | AppError::SessionBusy { .. } => true,
            AppError::Session(error) => error.is_bad_input(),
            AppError::DataDir { .. }
            | AppError::OpenStore { .. }
            | AppError::Tool(_)
            | AppError::Lease(_)
            | AppError::Inbox(_)
            | AppError::Internal(_) => false,
        }
    }
}
