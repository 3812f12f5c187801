//! What one group transaction defers to just before its commit: the moved session
//! heads and the appended event rows.
//!
//! An append checks its expected seq against the session's head and moves it. Doing
//! that with the `sessions` row costs two statements per append, and one `INSERT`
//! statement per event costs a statement's setup per row. A group instead reads a
//! session's head once, keeps it in [`Pending`] while its appends move it, writes the
//! appended rows with multi-row `INSERT`s ([`MAX_ROWS`] rows a statement) and, before it
//! commits, each moved head with one `UPDATE`.
//!
//! Rows are written as soon as a full statement's worth is pending
//! ([`Pending::write_full`]), while the group is still taking operations: in a burst the
//! writer thread inserts them while the appending thread is still producing the next
//! ones, so the flush that ends the burst waits only for the last few rows, the heads
//! and the commit. The rest are written just before the commit ([`Pending::write`]).
//!
//! This changes no outcome. Nothing else in a group reads `sessions.head` or the
//! `events` rows (a session created in the group starts with its head in the inserted
//! row, which the first append reads), and the group holds the database's write lock,
//! so the cached head is the stored one. The logical checks (seqs, head, unknown
//! session) run when the append is applied, as before; a database error while writing
//! the deferred rows or heads fails the whole group like any other, and a failed group
//! rolls back and drops what was pending with it.

use std::collections::HashMap;
use std::sync::OnceLock;

use ccare_core::SessionId;
use rusqlite::Connection;

use super::sql_int;
use crate::types::StoredEvent;

/// The most rows one `INSERT` statement writes. Statements for 64, 32, ..., 1 rows are
/// prepared once and cached, so a group's rows take one statement per 64 and at most
/// six more for the rest.
pub(super) const MAX_ROWS: usize = 64;

/// The writes a group has applied logically but not yet written.
#[derive(Default)]
pub(super) struct Pending {
    /// Session → (head, whether the group moved it since it was read).
    heads: HashMap<SessionId, (u64, bool)>,
    /// Appended events not yet written, in queue order, with their session.
    rows: Vec<(SessionId, Vec<StoredEvent>)>,
    /// How many events `rows` holds.
    row_count: usize,
}

/// A deferred write that failed: what it was writing and SQLite's error.
pub(super) struct WriteFailure {
    /// The session whose rows or head failed.
    pub(super) session: SessionId,
    /// What was being written, e.g. `the events from seq 12`.
    pub(super) what: String,
    /// SQLite's error.
    pub(super) error: rusqlite::Error,
}

impl Pending {
    /// The head the group knows for `session`, if it has read it.
    pub(super) fn head(&self, session: &SessionId) -> Option<u64> {
        self.heads.get(session).map(|(head, _)| *head)
    }

    /// Remembers the stored head of `session`, as read inside the group.
    pub(super) fn read_head(&mut self, session: &SessionId, head: u64) {
        self.heads.entry(session.clone()).or_insert((head, false));
    }

    /// Queues `events` (already checked to start at the head) and moves the head to
    /// `head`.
    pub(super) fn append(&mut self, session: SessionId, events: Vec<StoredEvent>, head: u64) {
        match self.heads.get_mut(&session) {
            Some(entry) => *entry = (head, true),
            None => {
                self.heads.insert(session.clone(), (head, true));
            }
        }
        self.row_count += events.len();
        self.rows.push((session, events));
    }

    /// Writes the pending rows in whole [`MAX_ROWS`]-row statements, keeping the
    /// remainder (fewer than [`MAX_ROWS`] rows) for later; nothing when fewer are
    /// pending. Rows are written in queue order either way.
    pub(super) fn write_full(&mut self, conn: &Connection) -> Result<(), WriteFailure> {
        let full = self.row_count - self.row_count % MAX_ROWS;
        if full == 0 {
            return Ok(());
        }
        {
            let flat: Vec<(&SessionId, &StoredEvent)> = flattened(&self.rows).take(full).collect();
            for chunk in flat.chunks(MAX_ROWS) {
                insert_chunk(conn, chunk)?;
            }
        }
        // Drop what was written: whole entries, then the head of a split one.
        let mut left = full;
        let whole = self
            .rows
            .iter()
            .take_while(|(_, events)| {
                let taken = events.len() <= left;
                if taken {
                    left -= events.len();
                }
                taken
            })
            .count();
        self.rows.drain(..whole);
        if left > 0
            && let Some((_, events)) = self.rows.first_mut()
        {
            events.drain(..left);
        }
        self.row_count -= full;
        Ok(())
    }

    /// Writes every row not yet written, then every moved head; the group commits only
    /// if this succeeds.
    pub(super) fn write(&mut self, conn: &Connection) -> Result<(), WriteFailure> {
        let rows = std::mem::take(&mut self.rows);
        self.row_count = 0;
        let flat: Vec<(&SessionId, &StoredEvent)> = flattened(&rows).collect();
        let mut rest = flat.as_slice();
        while !rest.is_empty() {
            let (chunk, after) = rest.split_at(chunk_size(rest.len()));
            insert_chunk(conn, chunk)?;
            rest = after;
        }
        for (session, (head, moved)) in self.heads.drain() {
            if !moved {
                continue;
            }
            let updated = conn
                .prepare_cached("UPDATE sessions SET head = ?2 WHERE id = ?1")
                .and_then(|mut update| {
                    update.execute(rusqlite::params![session.as_str(), sql_int(head)])
                });
            if let Err(error) = updated {
                return Err(WriteFailure {
                    session,
                    what: format!("its head ({head})"),
                    error,
                });
            }
        }
        Ok(())
    }
}

/// Each pending event with its session, in queue order.
fn flattened(
    rows: &[(SessionId, Vec<StoredEvent>)],
) -> impl Iterator<Item = (&SessionId, &StoredEvent)> {
    rows.iter()
        .flat_map(|(session, events)| events.iter().map(move |event| (session, event)))
}

/// The largest power of two up to [`MAX_ROWS`] that is at most `left` (`left >= 1`).
fn chunk_size(left: usize) -> usize {
    let mut size = MAX_ROWS;
    while size > left {
        size /= 2;
    }
    size.max(1)
}

/// The `INSERT` of `rows` rows (a power of two up to [`MAX_ROWS`]):
/// `VALUES (?, ?, ?), ...`, built once per size.
fn insert_sql(rows: usize) -> &'static str {
    static SQL: OnceLock<Vec<String>> = OnceLock::new();
    let all = SQL.get_or_init(|| {
        (0..=MAX_ROWS.trailing_zeros())
            .map(|power| {
                let count = 1usize << power;
                let mut sql = String::from("INSERT INTO events (session_id, seq, body) VALUES ");
                for row in 0..count {
                    if row > 0 {
                        sql.push_str(", ");
                    }
                    sql.push_str("(?, ?, ?)");
                }
                sql
            })
            .collect()
    });
    let index = usize::try_from(rows.max(1).trailing_zeros()).unwrap_or(0);
    all.get(index).map_or("", String::as_str)
}

/// [`insert_rows`], its error described by the chunk's first row.
fn insert_chunk(
    conn: &Connection,
    chunk: &[(&SessionId, &StoredEvent)],
) -> Result<(), WriteFailure> {
    let Some(&(session, first)) = chunk.first() else {
        return Ok(());
    };
    insert_rows(conn, chunk).map_err(|error| WriteFailure {
        session: session.clone(),
        what: format!("the events from seq {}", first.seq),
        error,
    })
}

fn insert_rows(conn: &Connection, chunk: &[(&SessionId, &StoredEvent)]) -> rusqlite::Result<()> {
    let mut insert = conn.prepare_cached(insert_sql(chunk.len()))?;
    for (row, (session, event)) in chunk.iter().enumerate() {
        let first = row * 3 + 1;
        insert.raw_bind_parameter(first, session.as_str())?;
        insert.raw_bind_parameter(first + 1, sql_int(event.seq))?;
        insert.raw_bind_parameter(first + 2, &*event.json)?;
    }
    insert.raw_execute()?;
    Ok(())
}
