//! The agent `ccare run` and `ccare chat` drive, obtained from the process's
//! [`Agents`] registry with the session's lease held (spec server.md ACT-1), and what
//! the user reads of the lease: `SESSION_BUSY` (exit 2) naming the holder, or with
//! `--wait` one line on stderr saying whom it waits for.

use ccare_app::{AgentHandle, Agents, AppError, Booted, SessionLease, WhenBusy};
use ccare_core::SessionId;
use ccare_session::Session;
use ccare_store::Lease;

use crate::Failure;
use crate::output::rfc3339_utc;

/// The running agent of session `id` (started from the store), or of a new session;
/// with `wait`, waits for a live holder in another process instead of failing.
pub(crate) async fn obtain(
    agents: &Agents,
    id: Option<&str>,
    wait: bool,
) -> Result<AgentHandle, Failure> {
    let mut announce = |lease: &Lease| {
        eprintln!(
            "waiting for session {}: driven by {} (lease expires {})",
            lease.session,
            holder(lease),
            rfc3339_utc(lease.expires_ms)
        );
    };
    let when_busy = if wait {
        WhenBusy::Wait(&mut announce)
    } else {
        WhenBusy::Fail
    };
    let started = match id {
        Some(id) => {
            let id = SessionId::new(id.to_owned()).map_err(AppError::SessionId)?;
            agents.get_or_start(&id, when_busy).await
        }
        None => agents.create(Default::default()).await,
    };
    started.map_err(|error| busy_or(error, "; run with --wait to wait for it"))
}

/// Opens session `id` for a read-only command (`ccare context …`), holding its lease
/// while it reads: a session another process drives is refused with `SESSION_BUSY`
/// (exit 2) instead of being opened, because opening runs crash repair, which would
/// append to the other process's live turn.
pub(crate) async fn read(booted: &Booted, id: &str) -> Result<(Session, SessionLease), Failure> {
    booted
        .drive(Some(id), WhenBusy::Fail)
        .await
        .map_err(|error| busy_or(error, "; try again when it is idle"))
}

/// `SESSION_BUSY` as the user reads it (exit 2, the holder named, then `hint`), or the
/// error as it is.
fn busy_or(error: AppError, hint: &str) -> Failure {
    match error {
        AppError::SessionBusy {
            lease,
            remaining_ms,
        } => Failure::bad_input(anyhow::anyhow!(
            "SESSION_BUSY: session {} is driven by {} (lease expires {}, in {} s){hint}",
            lease.session,
            holder(&lease),
            rfc3339_utc(lease.expires_ms),
            seconds(remaining_ms)
        )),
        error => error.into(),
    }
}

/// Milliseconds as seconds with one decimal, e.g. `29.8`.
fn seconds(ms: i64) -> String {
    let tenths = ms.max(0) / 100;
    format!("{}.{}", tenths / 10, tenths % 10)
}

/// "pid 4242 on host box".
fn holder(lease: &Lease) -> String {
    format!("pid {} on host {}", lease.holder.pid, lease.holder.host)
}
