//! [`SessionStatus`]: whether an open session can take appends, and if not why
//! (H-STORE-6), typed so a status line or a script can show the fence.

use ccare_store::StoreError;

/// What an open session can do now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SessionStatus {
    /// Appends are accepted.
    Writable,
    /// A write error or conflict fenced the session (H-STORE-6): appends are refused
    /// until [`crate::Sessions::open`] reopens it from the store, which repairs it.
    Fenced {
        /// The store error that fenced it.
        cause: StoreError,
    },
}

impl SessionStatus {
    /// A stable code: `WRITABLE`, or `SESSION_FENCED` (the code appends fail with).
    pub fn code(&self) -> &'static str {
        match self {
            SessionStatus::Writable => "WRITABLE",
            SessionStatus::Fenced { .. } => "SESSION_FENCED",
        }
    }
}

impl std::fmt::Display for SessionStatus {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            SessionStatus::Writable => formatter.write_str("writable"),
            SessionStatus::Fenced { cause } => write!(
                formatter,
                "fenced after a store error ({cause}); reopen the session to repair it"
            ),
        }
    }
}
