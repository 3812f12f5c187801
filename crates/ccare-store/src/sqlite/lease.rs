//! The `leases` table (schema version 2, ACT-1): one row per leased session, written by
//! the writer thread inside its `BEGIN IMMEDIATE` group transaction, so a claim is one
//! atomic conditional upsert even against another process on the same file.

use std::path::Path;

use ccare_core::SessionId;
use rusqlite::{Connection, OptionalExtension, Row, params};

use super::{Applied, backend, int, sql_int, text, uint};
use crate::error::StoreError;
use crate::lease::{Lease, LeaseClaim, LeaseHolder, check_claim, check_holder};

/// The table, created with a new database or added to a version-1 one.
pub(super) const SCHEMA: &str = "
CREATE TABLE leases (
    session_id TEXT PRIMARY KEY,
    owner TEXT NOT NULL,
    host TEXT NOT NULL,
    pid INTEGER NOT NULL,
    process_start INTEGER,
    expires_ms INTEGER NOT NULL
);
";

/// Fails to prepare unless the table has the columns this code uses.
pub(super) const PROBE: &str =
    "SELECT session_id, owner, host, pid, process_start, expires_ms FROM leases LIMIT 0";

const COLUMNS: &str = "owner, host, pid, process_start, expires_ms";

/// The claim, granted by one conditional upsert: the row is written when there is none
/// or the stored lease is the claimant's own, expired, or the one it replaces. When no
/// row changed, the holder is read back for `SessionBusy`.
pub(super) fn acquire(conn: &Connection, claim: &LeaseClaim) -> Applied<Lease> {
    if let Err(invalid) = check_claim(claim) {
        return Ok(Err(invalid));
    }
    let changed = conn
        .prepare_cached(
            "INSERT INTO leases (session_id, owner, host, pid, process_start, expires_ms) \
             VALUES (?1, ?2, ?3, ?4, ?5, ?6) \
             ON CONFLICT (session_id) DO UPDATE SET owner = excluded.owner, \
             host = excluded.host, pid = excluded.pid, process_start = excluded.process_start, \
             expires_ms = excluded.expires_ms \
             WHERE leases.owner = excluded.owner OR leases.expires_ms <= ?7 OR leases.owner = ?8",
        )?
        .execute(params![
            claim.session.as_str(),
            claim.holder.owner,
            claim.holder.host,
            claim.holder.pid,
            claim.holder.process_start.map(sql_int),
            claim.expires_ms,
            claim.now_ms,
            claim.replacing,
        ])?;
    if changed > 0 {
        return Ok(Ok(claim.granted()));
    }
    Ok(match stored(conn, &claim.session)? {
        Some(Ok(lease)) => Err(StoreError::SessionBusy {
            lease: Box::new(lease),
        }),
        Some(Err(corrupt)) => Err(corrupt),
        // Unreachable inside the write transaction; say so rather than grant.
        None => Err(StoreError::Backend {
            operation: "lease_acquire",
            message: format!(
                "session {}: the lease row refused the claim and then vanished",
                claim.session
            ),
        }),
    })
}

/// Moves the expiry of `owner`'s lease; `LeaseLost` when `owner` holds none.
pub(super) fn renew(
    conn: &Connection,
    session: &SessionId,
    owner: &str,
    expires_ms: i64,
) -> Applied<Lease> {
    if let Err(invalid) = check_holder(session, owner, "owner") {
        return Ok(Err(invalid));
    }
    let changed = conn
        .prepare_cached("UPDATE leases SET expires_ms = ?3 WHERE session_id = ?1 AND owner = ?2")?
        .execute(params![session.as_str(), owner, expires_ms])?;
    if changed == 0 {
        return Ok(Err(StoreError::LeaseLost {
            session: session.clone(),
            owner: owner.to_owned(),
        }));
    }
    Ok(stored(conn, session)?.unwrap_or_else(|| {
        Err(StoreError::LeaseLost {
            session: session.clone(),
            owner: owner.to_owned(),
        })
    }))
}

/// Deletes `owner`'s lease; whether there was one.
pub(super) fn release(conn: &Connection, session: &SessionId, owner: &str) -> Applied<bool> {
    if let Err(invalid) = check_holder(session, owner, "owner") {
        return Ok(Err(invalid));
    }
    let changed = conn
        .prepare_cached("DELETE FROM leases WHERE session_id = ?1 AND owner = ?2")?
        .execute(params![session.as_str(), owner])?;
    Ok(Ok(changed > 0))
}

/// The session's lease for [`Store::lease`](crate::Store::lease).
pub(super) fn read_lease(
    conn: &mut Connection,
    path: &Path,
    session: &SessionId,
) -> Result<Option<Lease>, StoreError> {
    stored(conn, session)
        .map_err(|err| backend("lease", path, format_args!("session {session}: {err}")))?
        .transpose()
}

/// The stored row, checked column by column (a damaged one is `Corrupt`).
fn stored(
    conn: &Connection,
    session: &SessionId,
) -> rusqlite::Result<Option<Result<Lease, StoreError>>> {
    conn.prepare_cached(&format!(
        "SELECT {COLUMNS} FROM leases WHERE session_id = ?1"
    ))?
    .query_row([session.as_str()], |row| Ok(lease_row(row, session)))
    .optional()
}

fn lease_row(row: &Row<'_>, session: &SessionId) -> Result<Lease, StoreError> {
    let corrupt = |column: &str| StoreError::Corrupt {
        session: session.clone(),
        seq: None,
        detail: format!("the lease's {column} column is damaged"),
    };
    let column = |index: usize| row.get_ref(index).map_err(|_| corrupt("row"));
    let owner = text(column(0)?).ok_or_else(|| corrupt("owner"))?.to_owned();
    let host = text(column(1)?).ok_or_else(|| corrupt("host"))?.to_owned();
    let pid = uint(column(2)?)
        .and_then(|pid| u32::try_from(pid).ok())
        .ok_or_else(|| corrupt("pid"))?;
    let start = column(3)?;
    let process_start = match uint(start) {
        Some(start) => Some(start),
        None if super::is_null(start) => None,
        None => return Err(corrupt("process_start")),
    };
    let expires_ms = int(column(4)?).ok_or_else(|| corrupt("expires_ms"))?;
    Ok(Lease {
        session: session.clone(),
        holder: LeaseHolder {
            owner,
            host,
            pid,
            process_start,
        },
        expires_ms,
    })
}
