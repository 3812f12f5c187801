//! Holding a session's lease while a front end drives it (spec server.md ACT-1).
//!
//! [`SessionLease::acquire`] claims the lease for this process (a fresh owner id, the
//! host name, the pid and its start time) before anything is written to the session.
//! When another driver holds it:
//! - a holder on this machine whose process no longer exists (or whose pid now belongs
//!   to another process) is taken over at once, so a crashed CLI never locks its user
//!   out (`process.rs`);
//! - otherwise the claim fails with [`AppError::SessionBusy`] naming the holder, or,
//!   when the caller asked to wait, it polls with backoff (100 ms doubling to 1 s, and
//!   never sleeping past the holder's expiry) until the holder releases it, dies or
//!   lets it expire.
//!
//! While held, a background task renews the lease every third of `[host] lease_ms`:
//! renewal is time-based and never a store write per event. Dropping the lease (or
//! [`SessionLease::release`]) stops the renewal and releases it.

mod process;

use std::sync::Arc;
use std::time::Duration;

use ccare_core::{Clock, SessionId};
use ccare_store::{Lease, LeaseClaim, LeaseHolder, Store, StoreError, Ticket};

use crate::error::AppError;
use process::Liveness;

/// The first pause between two claims while waiting.
const FIRST_POLL: Duration = Duration::from_millis(100);
/// The longest pause between two claims while waiting.
const LONGEST_POLL: Duration = Duration::from_secs(1);
/// How many takeovers of dead holders one claim tries before it reports busy (each
/// takeover can lose only to another live claimant, so a few are plenty).
const TAKEOVER_ATTEMPTS: usize = 4;

/// This process's hold of one session's lease, renewed in the background until it is
/// released or dropped.
pub struct SessionLease {
    store: Arc<dyn Store>,
    lease: Lease,
    renewal: tokio::task::JoinHandle<()>,
    released: bool,
}

impl std::fmt::Debug for SessionLease {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter
            .debug_struct("SessionLease")
            .field("lease", &self.lease)
            .field("released", &self.released)
            .finish_non_exhaustive()
    }
}

/// What a claim does when a live driver holds the session.
pub enum WhenBusy<'a> {
    /// Fail at once with [`AppError::SessionBusy`].
    Fail,
    /// Wait for the holder; the callback hears the holder once, when waiting starts.
    Wait(&'a mut (dyn FnMut(&Lease) + Send)),
}

impl SessionLease {
    /// Claims `session`'s lease for `lease_ms` (must be at least 1) on `store`'s
    /// clock `clock`, taking it over from a dead holder on this machine; when a live
    /// driver holds it, fails or waits as `when_busy` says. Must run in a tokio
    /// runtime (the renewal is a task).
    pub async fn acquire(
        store: Arc<dyn Store>,
        clock: Arc<dyn Clock>,
        session: &SessionId,
        lease_ms: u64,
        mut when_busy: WhenBusy<'_>,
    ) -> Result<SessionLease, AppError> {
        let holder = own_holder();
        let lease_ms = i64::try_from(lease_ms.max(1)).unwrap_or(i64::MAX);
        let mut poll = FIRST_POLL;
        let mut announced = false;
        let lease = loop {
            match claim(store.as_ref(), clock.as_ref(), session, &holder, lease_ms).await {
                Ok(lease) => break lease,
                Err(StoreError::SessionBusy { lease: held }) => {
                    let now_ms = clock.now_ms();
                    let WhenBusy::Wait(on_wait) = &mut when_busy else {
                        return Err(AppError::SessionBusy {
                            remaining_ms: held.expires_ms.saturating_sub(now_ms),
                            lease: held,
                        });
                    };
                    if !announced {
                        announced = true;
                        on_wait(&held);
                    }
                    let until_expiry = u64::try_from(held.expires_ms.saturating_sub(now_ms))
                        .map_or(Duration::ZERO, Duration::from_millis);
                    tokio::time::sleep(poll.min(until_expiry.max(Duration::from_millis(1)))).await;
                    poll = (poll * 2).min(LONGEST_POLL);
                }
                Err(error) => return Err(AppError::Lease(error)),
            }
        };
        tracing::debug!(session = %session, owner = %lease.holder.owner, "session lease acquired");
        Ok(Self::held(store, clock, lease, lease_ms))
    }

    /// Claims the lease of a session this process has just created (or queued the
    /// creation of) without waiting for the claim: nobody else can hold the lease of an
    /// id not yet handed out, so the claim is granted as made. It is queued at once
    /// (before anything else is written to the session) and its ticket is returned:
    /// the caller makes it part of what the session's first flush waits for
    /// (`Session::include_write`), so a failed claim fences the session before any of
    /// its writes is reported durable. Must run in a tokio runtime.
    pub fn claim_new(
        store: Arc<dyn Store>,
        clock: Arc<dyn Clock>,
        session: &SessionId,
        lease_ms: u64,
    ) -> (SessionLease, Ticket<Lease>) {
        let lease_ms = i64::try_from(lease_ms.max(1)).unwrap_or(i64::MAX);
        let now_ms = clock.now_ms();
        let claim = LeaseClaim {
            session: session.clone(),
            holder: own_holder(),
            now_ms,
            expires_ms: now_ms.saturating_add(lease_ms),
            replacing: None,
        };
        let lease = Lease {
            session: claim.session.clone(),
            holder: claim.holder.clone(),
            expires_ms: claim.expires_ms,
        };
        let ticket = store.lease_acquire(claim);
        tracing::debug!(session = %session, owner = %lease.holder.owner, "session lease claimed with its creation");
        (Self::held(store, clock, lease, lease_ms), ticket)
    }

    /// A granted lease, renewed from now on.
    fn held(store: Arc<dyn Store>, clock: Arc<dyn Clock>, lease: Lease, lease_ms: i64) -> Self {
        let renewal = tokio::spawn(renew(Arc::clone(&store), clock, lease.clone(), lease_ms));
        SessionLease {
            store,
            lease,
            renewal,
            released: false,
        }
    }

    /// The lease as granted (its expiry moves with each renewal, not here).
    pub fn lease(&self) -> &Lease {
        &self.lease
    }

    /// Stops the renewal and releases the lease, awaiting the store; a lease that was
    /// meanwhile taken over is left to its new holder.
    pub async fn release(mut self) -> Result<(), AppError> {
        self.released = true;
        self.renewal.abort();
        self.store
            .lease_release(&self.lease.session, &self.lease.holder.owner)
            .await
            .map(|_| ())
            .map_err(AppError::Lease)
    }
}

impl Drop for SessionLease {
    fn drop(&mut self) {
        self.renewal.abort();
        if !self.released {
            // Queued at call time (the store orders writes as called), so it lands even
            // though nobody awaits the ticket: the store drains its queue on shutdown.
            drop(
                self.store
                    .lease_release(&self.lease.session, &self.lease.holder.owner),
            );
        }
    }
}

/// This process's identity as a lease holder, under a fresh owner id.
fn own_holder() -> LeaseHolder {
    LeaseHolder {
        owner: uuid::Uuid::new_v4().to_string(),
        host: process::host_name(),
        pid: std::process::id(),
        process_start: process::own_start(),
    }
}

/// One claim, taking the lease over from dead holders on this machine.
async fn claim(
    store: &dyn Store,
    clock: &dyn Clock,
    session: &SessionId,
    holder: &LeaseHolder,
    lease_ms: i64,
) -> Result<Lease, StoreError> {
    let mut replacing = None;
    let mut attempts = 0;
    loop {
        let now_ms = clock.now_ms();
        let claim = LeaseClaim {
            session: session.clone(),
            holder: holder.clone(),
            now_ms,
            expires_ms: now_ms.saturating_add(lease_ms),
            replacing: replacing.take(),
        };
        match store.lease_acquire(claim).await {
            Err(StoreError::SessionBusy { lease }) if attempts < TAKEOVER_ATTEMPTS => {
                attempts += 1;
                if !is_dead_here(&lease, &holder.host) {
                    return Err(StoreError::SessionBusy { lease });
                }
                tracing::info!(
                    session = %session,
                    pid = lease.holder.pid,
                    "taking over the lease of a process on this machine that no longer runs"
                );
                replacing = Some(lease.holder.owner);
            }
            other => return other,
        }
    }
}

/// Whether `lease`'s holder is a process of this machine (`host`) that no longer runs.
fn is_dead_here(lease: &Lease, host: &str) -> bool {
    lease.holder.host == host
        && process::liveness(lease.holder.pid, lease.holder.process_start) == Liveness::Dead
}

/// Renews `lease` every third of `lease_ms` until aborted or the lease is lost.
async fn renew(store: Arc<dyn Store>, clock: Arc<dyn Clock>, lease: Lease, lease_ms: i64) {
    let period = Duration::from_millis(u64::try_from(lease_ms / 3).unwrap_or(1).max(1));
    let mut ticks = tokio::time::interval_at(tokio::time::Instant::now() + period, period);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        ticks.tick().await;
        let expires_ms = clock.now_ms().saturating_add(lease_ms);
        match store
            .lease_renew(&lease.session, &lease.holder.owner, expires_ms)
            .await
        {
            Ok(_) => {}
            Err(error @ StoreError::LeaseLost { .. }) => {
                // Another driver took the session over (this process stalled past the
                // expiry); appends stay fenced by the expected seq.
                tracing::warn!(session = %lease.session, error = %error, "session lease lost; no longer renewing it");
                return;
            }
            Err(error) => {
                tracing::warn!(session = %lease.session, error = %error, "session lease renewal failed; retrying");
            }
        }
    }
}
