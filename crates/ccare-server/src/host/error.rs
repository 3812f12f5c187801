//! Why the server did not start or stop cleanly.

use std::net::SocketAddr;
use std::path::PathBuf;

use ccare_agent::routes::RouteError;

/// A failure to start or stop the server.
#[derive(Debug, thiserror::Error)]
pub enum ServerError {
    /// Binding a non-loopback address with a token nobody configured (H-HTTP-3).
    #[error(
        "refusing to listen on {addr}: a non-loopback address needs a configured token (set [http] token_env to an env var holding it)"
    )]
    NonLoopbackWithoutToken {
        /// The address.
        addr: SocketAddr,
    },
    /// `[http] token_env` names a variable that is unset or empty.
    #[error("[http] token_env names {var}, which is unset or empty")]
    TokenEnvUnset {
        /// The variable.
        var: String,
    },
    /// The token file could not be read or written.
    #[error("token file {path}: {error}")]
    TokenFile {
        /// The file.
        path: PathBuf,
        /// What failed.
        #[source]
        error: std::io::Error,
    },
    /// The OS gave no randomness for a secret.
    #[error("no randomness for a secret: {0}")]
    Random(String),
    /// The address could not be bound.
    #[error("cannot listen on {addr}: {error}")]
    Bind {
        /// The address.
        addr: SocketAddr,
        /// What failed.
        #[source]
        error: std::io::Error,
    },
    /// A route of the server could not be registered.
    #[error(transparent)]
    Route(#[from] RouteError),
    /// Stopping a session actor at shutdown failed (its flush, close or release).
    #[error("stopping session {session}: {message}")]
    Stop {
        /// The session.
        session: String,
        /// What failed.
        message: String,
    },
}

impl ServerError {
    /// The machine-readable code.
    pub fn code(&self) -> &'static str {
        match self {
            ServerError::NonLoopbackWithoutToken { .. } => "NON_LOOPBACK_WITHOUT_TOKEN",
            ServerError::TokenEnvUnset { .. } => "TOKEN_ENV_UNSET",
            ServerError::TokenFile { .. } => "TOKEN_FILE",
            ServerError::Random(_) => "RANDOM",
            ServerError::Bind { .. } => "BIND",
            ServerError::Route(error) => error.code(),
            ServerError::Stop { .. } => "STOP",
        }
    }

    /// Whether the user's configuration or arguments are at fault (exit 2).
    pub fn is_bad_input(&self) -> bool {
        matches!(
            self,
            ServerError::NonLoopbackWithoutToken { .. } | ServerError::TokenEnvUnset { .. }
        )
    }
}
