//! Per-session leases (spec server.md ACT-1): at most one driver per session across
//! processes and hosts.
//!
//! A lease names its holder (an owner id unique to one driver, the host name, the pid
//! and, where the platform tells, the process's start time) and an expiry in epoch ms.
//! The store decides atomically, in one write:
//! - a free session, an expired lease (`expires_ms <= now_ms`), the caller's own lease,
//!   or a lease whose owner is the one the caller names in [`LeaseClaim::replacing`]
//!   is granted (inserted or overwritten);
//! - any other lease refuses the claim with [`StoreError::SessionBusy`] naming the
//!   holder, and nothing is written.
//!
//! Whether a holder on the same host is still alive is not the store's business (it
//! knows no processes): the caller checks it and, when the holder is dead, claims again
//! with `replacing` set to that holder's owner id. Naming the owner keeps the takeover
//! atomic: if a third driver took the lease in between, the claim is refused.
//!
//! Leases do not fence appends (the expected seq does, H-STORE-1); they keep a second
//! driver from starting at all.

use ccare_core::SessionId;

use crate::error::StoreError;

/// The longest owner id or host name accepted, in UTF-8 bytes; longer ones fail with
/// `Invalid`.
pub const MAX_LEASE_TEXT_BYTES: usize = 256;

/// Who holds (or claims) a lease.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeaseHolder {
    /// An id unique to one driver (one process's hold of one session), e.g. a UUID.
    pub owner: String,
    /// The host name of the holder's machine.
    pub host: String,
    /// The holder's process id on `host`.
    pub pid: u32,
    /// The process's start time as its OS reports it (Linux: clock ticks after boot,
    /// `/proc/<pid>/stat` field 22), so a reused pid is told apart; `None` where
    /// unknown.
    pub process_start: Option<u64>,
}

/// A granted lease as the store keeps it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Lease {
    /// The session it is for.
    pub session: SessionId,
    /// Who holds it.
    pub holder: LeaseHolder,
    /// When it expires, epoch ms; from then on any claim takes it over.
    pub expires_ms: i64,
}

/// What [`Store::lease_acquire`](crate::Store::lease_acquire) asks for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeaseClaim {
    /// The session.
    pub session: SessionId,
    /// The claimant.
    pub holder: LeaseHolder,
    /// The claimant's clock, epoch ms: a lease with `expires_ms <= now_ms` is expired.
    pub now_ms: i64,
    /// The granted lease's expiry, epoch ms; must be after `now_ms`.
    pub expires_ms: i64,
    /// Take the lease over from this owner even though it has not expired (the caller
    /// found that holder dead). Has no effect when someone else holds it.
    pub replacing: Option<String>,
}

/// Checks a claim's texts and times; both backends run it before writing.
pub(crate) fn check_claim(claim: &LeaseClaim) -> Result<(), StoreError> {
    check_holder(&claim.session, &claim.holder.owner, "owner")?;
    check_holder(&claim.session, &claim.holder.host, "host")?;
    if claim.expires_ms <= claim.now_ms {
        return Err(StoreError::Invalid {
            what: "lease",
            detail: format!(
                "session {}: the lease would expire at {} ms, not after now ({} ms)",
                claim.session, claim.expires_ms, claim.now_ms
            ),
        });
    }
    Ok(())
}

/// Checks an owner id (or host name) against [`MAX_LEASE_TEXT_BYTES`] and emptiness.
pub(crate) fn check_holder(
    session: &SessionId,
    text: &str,
    what: &'static str,
) -> Result<(), StoreError> {
    if text.is_empty() || text.len() > MAX_LEASE_TEXT_BYTES {
        return Err(StoreError::Invalid {
            what: "lease",
            detail: format!(
                "session {session}: the {what} is {} bytes; it must be 1 to {MAX_LEASE_TEXT_BYTES}",
                text.len()
            ),
        });
    }
    Ok(())
}

/// Whether `claim` may take the lease `current` holds: it is the claimant's own, it
/// has expired, or the claimant replaces exactly its owner.
pub(crate) fn may_take(current: &Lease, claim: &LeaseClaim) -> bool {
    current.holder.owner == claim.holder.owner
        || current.expires_ms <= claim.now_ms
        || claim.replacing.as_deref() == Some(current.holder.owner.as_str())
}

impl LeaseClaim {
    /// The lease this claim is granted as.
    pub(crate) fn granted(&self) -> Lease {
        Lease {
            session: self.session.clone(),
            holder: self.holder.clone(),
            expires_ms: self.expires_ms,
        }
    }
}
