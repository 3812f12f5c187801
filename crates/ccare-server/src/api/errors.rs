//! From the engine's typed errors to HTTP replies (API-5): `{error, message}` with the
//! CLI's codes, and the status a client can act on — 404 for a session that does not
//! exist, 400 for a request that can never succeed, 409 for one that conflicts with the
//! session's state (another driver, the wrong tool results), 503 for storage that is
//! unavailable now, 500 for the rest.

use ccare_agent::routes::RouteReply;
use ccare_agent::{CommandError, ExternalToolsError};
use ccare_app::AppError;
use ccare_core::SessionId;
use ccare_session::{AppendError, SessionError};
use ccare_store::StoreError;

/// The code of a query parameter with a bad value.
pub const INVALID_QUERY: &str = "invalid-query";
/// The code of a session id that cannot be one.
pub const INVALID_SESSION_ID: &str = "INVALID_SESSION_ID";
/// The code of a request for a profile this server does not serve.
pub const UNKNOWN_PROFILE: &str = "UNKNOWN_PROFILE";
/// The code of a model no configured route serves.
pub const UNKNOWN_MODEL: &str = "UNKNOWN_MODEL";
/// The code of a message with a mode that is none of `prompt|steer|followup`.
pub const INVALID_MODE: &str = "INVALID_MODE";
/// The code of a message whose `tools` declare a tool no model can be offered.
pub const INVALID_TOOLS: &str = "INVALID_TOOLS";
/// The code of a context request on a profile that does not mount context care.
pub const CONTEXT_CARE_OFF: &str = "CONTEXT_CARE_OFF";

/// The session id in a path, or a 400 naming it.
pub fn session_id(text: &str) -> Result<SessionId, RouteReply> {
    SessionId::new(text.to_owned())
        .map_err(|error| RouteReply::error(400, INVALID_SESSION_ID, error.to_string()))
}

/// The reply to a failed boot-layer call (starting an actor, creating a session).
pub fn app_error(error: &AppError) -> RouteReply {
    let message = error.to_string();
    match error {
        AppError::Session(error) => session_error(error),
        AppError::SessionBusy { .. } => RouteReply::error(409, "SESSION_BUSY", message),
        AppError::SessionId(_) => RouteReply::error(400, INVALID_SESSION_ID, message),
        AppError::Lease(error) => store_error(error, message),
        AppError::Inbox(_) => RouteReply::error(503, "INBOX_UNAVAILABLE", message),
        AppError::UnknownProfile { .. } => RouteReply::error(400, UNKNOWN_PROFILE, message),
        _ => RouteReply::error(500, "INTERNAL", message),
    }
}

/// The reply to a failed session-engine call.
pub fn session_error(error: &SessionError) -> RouteReply {
    let message = error.to_string();
    let status = match error {
        SessionError::UnknownSession(_) => 404,
        SessionError::SessionExists(_) => 409,
        SessionError::ForkInsideTurn { .. }
        | SessionError::ForkPastHead { .. }
        | SessionError::Import(_) => 400,
        SessionError::Store(error) => return store_error(error, message),
        // The store refused the repair of a reopened session: the store's status
        // (a failing disk is 503, worth retrying), the session's code.
        SessionError::Repair(AppendError::Fenced { cause, .. }) => store_status(cause),
        SessionError::Load(_) | SessionError::Repair(_) | SessionError::Io(_) => 500,
    };
    RouteReply::error(status, error.code(), message)
}

fn store_error(error: &StoreError, message: String) -> RouteReply {
    RouteReply::error(store_status(error), error.code(), message)
}

/// The HTTP status of a store error.
fn store_status(error: &StoreError) -> u16 {
    match error {
        StoreError::UnknownSession { .. } => 404,
        StoreError::SessionBusy { .. }
        | StoreError::SessionExists { .. }
        | StoreError::Conflict { .. }
        | StoreError::CasConflict { .. }
        | StoreError::LeaseLost { .. } => 409,
        StoreError::Backend { .. } | StoreError::Closed => 503,
        StoreError::Corrupt { .. } | StoreError::Invalid { .. } => 500,
    }
}

/// The reply to a refused command (ACT-2): nothing was changed. Tool results that do
/// not answer exactly the open calls conflict with the session's state: 409.
pub fn command_error(error: &CommandError) -> RouteReply {
    let message = error.to_string();
    let status = match error {
        CommandError::EmptyMessage { .. } | CommandError::InvalidOptions { .. } => 400,
        CommandError::ToolResults(ExternalToolsError::Mismatch { .. })
        | CommandError::NotResendable { .. } => 409,
        CommandError::ToolResults(ExternalToolsError::NameTaken(_)) => 400,
        CommandError::ToolResults(ExternalToolsError::Log(_)) => 500,
        CommandError::Inbox { .. } => 503,
    };
    RouteReply::error(status, error.code(), message)
}
