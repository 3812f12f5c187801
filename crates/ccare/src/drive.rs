//! The session `ccare run` and `ccare chat` drive, with its lease held (spec
//! server.md ACT-1), and what the user reads of the lease: `SESSION_BUSY` (exit 2)
//! naming the holder, or with `--wait` one line on stderr saying whom it waits for.

use ccare_app::{AppError, Booted, SessionLease, WhenBusy};
use ccare_session::Session;
use ccare_store::Lease;

use crate::Failure;
use crate::output::rfc3339_utc;

/// Opens (or creates) the session and holds its lease; with `wait`, waits for a live
/// holder instead of failing.
pub(crate) async fn drive(
    booted: &Booted,
    id: Option<&str>,
    wait: bool,
) -> Result<(Session, SessionLease), Failure> {
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
    match booted.drive(id, when_busy).await {
        Ok(driven) => Ok(driven),
        Err(AppError::SessionBusy {
            lease,
            remaining_ms,
        }) => Err(Failure::bad_input(anyhow::anyhow!(
            "SESSION_BUSY: session {} is driven by {} (lease expires {}, in {} s); run with --wait to wait for it",
            lease.session,
            holder(&lease),
            rfc3339_utc(lease.expires_ms),
            seconds(remaining_ms)
        ))),
        Err(error) => Err(error.into()),
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
