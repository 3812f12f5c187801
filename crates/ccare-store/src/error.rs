//! Store errors, each with the spec's stable code.

use ccare_core::SessionId;

use crate::lease::Lease;

/// Why a store operation failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum StoreError {
    /// The session's stored head is not the expected seq (H-STORE-1); nothing was written.
    #[error("session {session}: append expected head {expected}, but the store is at {actual}")]
    Conflict {
        /// The session.
        session: SessionId,
        /// The seq the caller expected to write next.
        expected: u64,
        /// The seq the store would write next.
        actual: u64,
    },
    /// The KV row's version is not the expected one (H-STORE-2); nothing was written.
    #[error("kv {domain}/{key}: expected version {expected:?}, current is {current:?}")]
    CasConflict {
        /// The domain.
        domain: String,
        /// The key.
        key: String,
        /// The version the caller expected (`None`: must not exist).
        expected: Option<u64>,
        /// The current version (`None`: absent).
        current: Option<u64>,
    },
    /// `create_session` with an id that is already stored.
    #[error("session {session} already exists")]
    SessionExists {
        /// The session.
        session: SessionId,
    },
    /// The session is not stored.
    #[error("unknown session {session}")]
    UnknownSession {
        /// The session.
        session: SessionId,
    },
    /// A stored row is damaged: not text, a seq gap, a bad header column.
    #[error("session {session}: corrupt row{}: {detail}", seq.map(|seq| format!(" at seq {seq}")).unwrap_or_default())]
    Corrupt {
        /// The session.
        session: SessionId,
        /// The seq of the damaged row, when known.
        seq: Option<u64>,
        /// What is wrong.
        detail: String,
    },
    /// A caller-supplied value breaks a limit or rule (events not contiguous, key too long).
    #[error("invalid {what}: {detail}")]
    Invalid {
        /// What was invalid (`append`, `kv key`, ...).
        what: &'static str,
        /// Why.
        detail: String,
    },
    /// The database failed (I/O, disk full, locked too long).
    #[error("store {operation} failed: {message}")]
    Backend {
        /// The operation that failed.
        operation: &'static str,
        /// What the database said.
        message: String,
    },
    /// The session's lease is held by another owner that has not expired (ACT-1);
    /// nothing was written. `lease` names the holder.
    #[error(
        "session {}: busy, driven by pid {} on host {} (owner {}) until {} ms",
        lease.session, lease.holder.pid, lease.holder.host, lease.holder.owner, lease.expires_ms
    )]
    SessionBusy {
        /// The holder's lease, as stored.
        lease: Box<Lease>,
    },
    /// A renewal by an owner that no longer holds the session's lease (it expired and
    /// was taken over, or was released); nothing was written.
    #[error("session {session}: owner {owner} no longer holds its lease")]
    LeaseLost {
        /// The session.
        session: SessionId,
        /// The owner that renewed.
        owner: String,
    },
    /// The store was shut down.
    #[error("store is closed")]
    Closed,
}

impl StoreError {
    /// The spec's `SCREAMING_SNAKE` code.
    pub fn code(&self) -> &'static str {
        match self {
            StoreError::Conflict { .. } => "STORE_CONFLICT",
            StoreError::CasConflict { .. } => "CAS_CONFLICT",
            StoreError::SessionExists { .. } => "SESSION_EXISTS",
            StoreError::UnknownSession { .. } => "UNKNOWN_SESSION",
            StoreError::Corrupt { .. } => "STORE_CORRUPT",
            StoreError::Invalid { .. } => "STORE_INVALID",
            StoreError::Backend { .. } => "STORE_IO",
            StoreError::SessionBusy { .. } => "SESSION_BUSY",
            StoreError::LeaseLost { .. } => "LEASE_LOST",
            StoreError::Closed => "STORE_CLOSED",
        }
    }
}
