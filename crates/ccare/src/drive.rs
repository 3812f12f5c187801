//! The agent `ccare run` and `ccare chat` drive, obtained from the process's
//! [`Agents`] registry with the session's lease held (spec server.md ACT-1), and what
//! the user reads of the lease: `SESSION_BUSY` (exit 2) naming the holder, or with
//! `--wait` one line on stderr saying whom it waits for. Read-only commands take no
//! lease ([`load`]).

use ccare_app::{AgentHandle, Agents, AppError, Booted, WhenBusy};
use ccare_core::SessionId;
use ccare_session::LoadedSession;
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

/// Reads session `id` for a read-only command (`ccare context …`, issue 15 item 7):
/// `Sessions::load` reads and audits the stored log without opening the session, so
/// it takes no lease, runs no crash repair and appends nothing. A session another
/// process drives (a running `ccare serve`, a `ccare run` mid-turn) is read as the
/// store has it, its running turn untouched.
pub(crate) async fn load(booted: &Booted, id: &str) -> Result<LoadedSession, Failure> {
    let id = SessionId::new(id.to_owned()).map_err(AppError::SessionId)?;
    Ok(booted.host.sessions().load(&id).await?)
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
