//! Session errors, each with the spec's stable code.

use ccare_core::{EventError, NonLosslessJson, SessionId};
use ccare_store::StoreError;

/// Why an append was refused. Nothing was written and no seq was consumed.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum AppendError {
    /// Appended from a validator or synchronous observer of the same session (H-LOG-5).
    #[error("session {session}: re-entrant append from a validator or observer")]
    Reentrant {
        /// The session.
        session: SessionId,
    },
    /// `data` breaks H-LOG-2.
    #[error("session {session}: {error}")]
    NonLossless {
        /// The session.
        session: SessionId,
        /// The violation and its pointer.
        error: NonLosslessJson,
    },
    /// The envelope could not be built.
    #[error("session {session}: {error}")]
    Event {
        /// The session.
        session: SessionId,
        /// What failed.
        error: EventError,
    },
    /// The type is not registered (H-EVT-1).
    #[error("session {session}: event type '{kind}' is not registered")]
    UnregisteredType {
        /// The session.
        session: SessionId,
        /// The type.
        kind: String,
    },
    /// The data does not have the shape its type requires.
    #[error("session {session}: '{kind}' data is invalid: {message}")]
    InvalidData {
        /// The session.
        session: SessionId,
        /// The type.
        kind: String,
        /// What is wrong.
        message: String,
    },
    /// The surface op is not allowed (H-SURF-1, H-SURF-2).
    #[error("session {session}: invalid surface op at seq {seq}: {reason}")]
    InvalidSurface {
        /// The session.
        session: SessionId,
        /// The seq the event would have had.
        seq: u64,
        /// What is wrong.
        reason: String,
    },
    /// A validator refused the event (H-VAL-2).
    #[error("session {session}: vetoed by {validator} at seq {seq}: {message}")]
    Vetoed {
        /// The session.
        session: SessionId,
        /// The seq the event would have had.
        seq: u64,
        /// The validator's name.
        validator: String,
        /// Its reason.
        message: String,
    },
    /// An earlier write failed; the session takes no appends until reopened (H-STORE-6).
    #[error("session {session} is fenced after a store error: {cause}")]
    Fenced {
        /// The session.
        session: SessionId,
        /// The store error that fenced it.
        cause: StoreError,
    },
}

impl AppendError {
    /// The spec's `SCREAMING_SNAKE` code.
    pub fn code(&self) -> &'static str {
        match self {
            AppendError::Reentrant { .. } => "REENTRANT_APPEND",
            AppendError::NonLossless { .. } => "NON_LOSSLESS_JSON",
            AppendError::Event { error, .. } => error.code(),
            AppendError::UnregisteredType { .. } => "UNREGISTERED_EVENT_TYPE",
            AppendError::InvalidData { .. } => "INVALID_EVENT_DATA",
            AppendError::InvalidSurface { .. } => "INVALID_SURFACE_OP",
            AppendError::Vetoed { .. } => "VETOED",
            AppendError::Fenced { .. } => "SESSION_FENCED",
        }
    }
}

/// Why a stored or imported log could not be read. Names the session and the seq (or
/// the file line) at fault.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum LoadError {
    /// A row or line is not a valid envelope.
    #[error("session {session}: event {seq}: {error}")]
    BadEvent {
        /// The session.
        session: SessionId,
        /// The seq (row index) at fault.
        seq: u64,
        /// What is wrong.
        error: EventError,
    },
    /// An envelope's seq is not its position.
    #[error("session {session}: event at position {position} claims seq {found}")]
    SeqMismatch {
        /// The session.
        session: SessionId,
        /// Where it sits.
        position: u64,
        /// What it says.
        found: u64,
    },
    /// An unknown type that is not marked ignorable (H-EVT-2).
    #[error("session {session}: unknown required event type '{kind}' at seq {seq}")]
    UnknownRequired {
        /// The session.
        session: SessionId,
        /// The seq.
        seq: u64,
        /// The type.
        kind: String,
    },
    /// The event breaks a rule appends enforce (surface, data shape).
    #[error("session {session}: event {seq}: {error}")]
    Invalid {
        /// The session.
        session: SessionId,
        /// The seq.
        seq: u64,
        /// The refusal, as an append would have reported it.
        error: Box<AppendError>,
    },
    /// Validators found violations and `strict_load` is on (H-VAL-3).
    #[error("session {session}: {} validator violation(s), first at seq {}: {}", violations.len(), violations.first().map(|v| v.seq).unwrap_or_default(), violations.first().map(|v| v.message.as_str()).unwrap_or_default())]
    Violations {
        /// The session.
        session: SessionId,
        /// Every violation found.
        violations: Vec<Violation>,
    },
    /// The store failed.
    #[error(transparent)]
    Store(#[from] StoreError),
}

impl LoadError {
    /// The spec's `SCREAMING_SNAKE` code.
    pub fn code(&self) -> &'static str {
        match self {
            LoadError::BadEvent { error, .. } => error.code(),
            LoadError::SeqMismatch { .. } => "STORE_CORRUPT",
            LoadError::UnknownRequired { .. } => "UNKNOWN_REQUIRED_EVENT",
            LoadError::Invalid { error, .. } => error.code(),
            LoadError::Violations { .. } => "VETOED",
            LoadError::Store(error) => error.code(),
        }
    }
}

/// A validator violation found while auditing a log.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Violation {
    /// The seq of the offending event.
    pub seq: u64,
    /// The validator that objected.
    pub validator: String,
    /// Its reason.
    pub message: String,
}

/// Why a session operation (create, open, fork, import, export) failed.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum SessionError {
    /// The session is not stored.
    #[error("unknown session {0}")]
    UnknownSession(SessionId),
    /// The id is taken.
    #[error("session {0} already exists")]
    SessionExists(SessionId),
    /// The fork boundary lies inside a turn (H-SESS-2).
    #[error("cannot fork session {session} at seq {boundary}: it is inside turn {turn}")]
    ForkInsideTurn {
        /// The source session.
        session: SessionId,
        /// The requested boundary.
        boundary: u64,
        /// The open turn.
        turn: u32,
    },
    /// The fork boundary is past the head.
    #[error("cannot fork session {session} at seq {boundary}: it has {head} events")]
    ForkPastHead {
        /// The source session.
        session: SessionId,
        /// The requested boundary.
        boundary: u64,
        /// The source's event count.
        head: u64,
    },
    /// The log could not be read.
    #[error(transparent)]
    Load(#[from] LoadError),
    /// An import file is malformed.
    #[error(transparent)]
    Import(#[from] crate::jsonl::ImportError),
    /// Crash repair could not append.
    #[error("session repair failed: {0}")]
    Repair(#[from] AppendError),
    /// The store failed.
    #[error(transparent)]
    Store(StoreError),
    /// Writing an export failed.
    #[error("export failed: {0}")]
    Io(String),
}

impl From<StoreError> for SessionError {
    fn from(error: StoreError) -> Self {
        match error {
            StoreError::UnknownSession { session } => SessionError::UnknownSession(session),
            StoreError::SessionExists { session } => SessionError::SessionExists(session),
            other => SessionError::Store(other),
        }
    }
}

impl SessionError {
    /// The spec's `SCREAMING_SNAKE` code.
    pub fn code(&self) -> &'static str {
        match self {
            SessionError::UnknownSession(_) => "UNKNOWN_SESSION",
            SessionError::SessionExists(_) => "SESSION_EXISTS",
            SessionError::ForkInsideTurn { .. } => "FORK_INSIDE_TURN",
            SessionError::ForkPastHead { .. } => "FORK_PAST_HEAD",
            SessionError::Load(error) => error.code(),
            SessionError::Import(error) => error.code(),
            SessionError::Repair(error) => error.code(),
            SessionError::Store(error) => error.code(),
            SessionError::Io(_) => "IO",
        }
    }

    /// Whether the error is the caller's input (bad id, bad file), as opposed to a
    /// failure of the machine; the CLI exits 2 for these.
    pub fn is_bad_input(&self) -> bool {
        match self {
            SessionError::UnknownSession(_)
            | SessionError::SessionExists(_)
            | SessionError::ForkInsideTurn { .. }
            | SessionError::ForkPastHead { .. }
            | SessionError::Load(_)
            | SessionError::Import(_) => true,
            SessionError::Store(error) => is_bad_stored_data(error),
            SessionError::Repair(_) | SessionError::Io(_) => false,
        }
    }
}

/// A damaged row is bad input (the data, not the machine, is at fault).
fn is_bad_stored_data(error: &StoreError) -> bool {
    match error {
        StoreError::Corrupt { .. }
        | StoreError::UnknownSession { .. }
        | StoreError::SessionExists { .. } => true,
        StoreError::Conflict { .. }
        | StoreError::CasConflict { .. }
        | StoreError::Invalid { .. }
        | StoreError::Backend { .. }
        | StoreError::SessionBusy { .. }
        | StoreError::LeaseLost { .. }
        | StoreError::Closed => false,
    }
}
