//! Which sessions' journal rows memory holds: the sessions this process is driving,
//! not every session ever journaled.
//!
//! A storage domain reads from memory (H-DOM-3), and the journal keeps up to
//! `journal_keep` records per session of every session it ever wrote — about 14 KB of
//! memory per record, for the life of the process, on a gateway that starts a session
//! for every client conversation. So the journal keeps a session's records and index
//! rows in memory only while the session is *resident*: from the first time this
//! process drives it ([`Residency::keep`], loading what the store holds) until its
//! actor stops ([`Residency::release`]), after which they are evicted once their writes
//! have settled. A reader of a session that is not resident (the management routes,
//! the report) reads the store and keeps nothing.
//!
//! A session created in this process (created, imported or forked: its id is new to
//! the store) has no rows stored, so its first use makes it resident without reading
//! the store ([`Residency::note_created`]; a new conversation's first request saves
//! that read).
//!
//! A resident session's rows are loaded before anything reads or writes them: the
//! residency of each session is a once-cell that its load initializes, and writers
//! (`ready`, `maintenance`) make their session resident first. The phase writes of a
//! call (`dispatched`, `settled`) follow its `ready`, so their session is resident; an
//! eviction skips a session with a call in flight, and the call's last phase evicts it
//! then.

use std::collections::HashMap;
use std::sync::Arc;

use ccare_agent::domains::{Domain, DomainError};
use ccare_core::SessionId;
use ccare_session::CreatedHere;
use parking_lot::Mutex;
use tokio::sync::OnceCell;

use super::stamps::Stamps;
use super::{JOURNAL_TABLE, SESSION_INDEX_TABLE, index_key};

/// The resident sessions of one journal, each with the once-cell its load
/// initializes.
#[derive(Debug, Default)]
pub(crate) struct Residency {
    sessions: Mutex<HashMap<String, Arc<OnceCell<()>>>>,
    /// Sessions created in this process and not resident yet: the store holds no rows
    /// of theirs, so their first use loads nothing.
    created: CreatedHere,
}

impl Residency {
    /// Makes `session` resident, loading its index rows and records from the store the
    /// first time; concurrent callers wait for the same load. A failed load leaves it
    /// to be tried again.
    pub(crate) async fn keep(&self, domain: &Domain, session: &str) -> Result<(), DomainError> {
        // Looked up before an entry is made: this runs at every request of a session.
        let cell = {
            let mut sessions = self.sessions.lock();
            match sessions.get(session) {
                Some(cell) => Arc::clone(cell),
                None => {
                    // A session created here has nothing stored: resident as it is.
                    let loaded = self.created.take(session).then_some(());
                    let cell = Arc::new(OnceCell::new_with(loaded));
                    sessions.insert(session.to_owned(), Arc::clone(&cell));
                    cell
                }
            }
        };
        cell.get_or_try_init(|| load(domain, session)).await?;
        Ok(())
    }

    /// Whether `session` is resident, waiting for its load when one is running (and
    /// running it again when the last one failed).
    pub(crate) async fn is_resident(
        &self,
        domain: &Domain,
        session: &str,
    ) -> Result<bool, DomainError> {
        let cell = self.sessions.lock().get(session).cloned();
        match cell {
            Some(cell) => {
                cell.get_or_try_init(|| load(domain, session)).await?;
                Ok(true)
            }
            None => Ok(false),
        }
    }

    /// Notes that `session` was created in this process: the store holds no rows of
    /// it, so its first [`Residency::keep`] loads nothing.
    pub(crate) fn note_created(&self, session: &SessionId) {
        self.created.note(session);
    }

    /// Whether `session` is resident now (loaded or loading).
    pub(crate) fn is_marked(&self, session: &str) -> bool {
        self.sessions.lock().contains_key(session)
    }

    /// Ends `session`'s residency; returns whether it was resident. Its rows leave
    /// memory through [`evict_later`].
    pub(crate) fn release(&self, session: &str) -> bool {
        self.sessions.lock().remove(session).is_some()
    }

    /// Evicts `session`'s rows unless it is resident again or a call of it is in
    /// flight, under the residency lock (so no load of it runs in between).
    fn evict_if_released(&self, domain: &Domain, stamps: &Stamps, session: &str) {
        let sessions = self.sessions.lock();
        if sessions.contains_key(session) || stamps.has_calls(session) {
            return;
        }
        evict(domain, session);
        stamps.forget(session);
    }
}

/// Evicts `session`'s rows from memory once the writes queued so far have settled,
/// on the current runtime (at once when there is none), unless it became resident
/// again meanwhile.
pub(crate) fn evict_later(
    residency: &Arc<Residency>,
    stamps: &Arc<Stamps>,
    domain: &Domain,
    session: &str,
) {
    let (residency, stamps, domain, session) = (
        Arc::clone(residency),
        Arc::clone(stamps),
        domain.clone(),
        session.to_owned(),
    );
    match tokio::runtime::Handle::try_current() {
        Ok(runtime) => {
            runtime.spawn(async move {
                domain.settled(None).await;
                residency.evict_if_released(&domain, &stamps, &session);
            });
        }
        Err(_) => residency.evict_if_released(&domain, &stamps, &session),
    }
}

/// Loads `session`'s index rows, then the records they name.
async fn load(domain: &Domain, session: &str) -> Result<(), DomainError> {
    let table = domain.table(JOURNAL_TABLE)?;
    let index = domain.table(SESSION_INDEX_TABLE)?;
    let prefix = index_key(session, "");
    for (row, _) in index.load_prefix(&prefix).await? {
        if let Some(key) = row.strip_prefix(&prefix) {
            table.load(key).await?;
        }
    }
    Ok(())
}

/// Drops `session`'s records, then its index rows, from memory (rows with a write
/// queued stay).
fn evict(domain: &Domain, session: &str) {
    let (Ok(table), Ok(index)) = (
        domain.table(JOURNAL_TABLE),
        domain.table(SESSION_INDEX_TABLE),
    ) else {
        return;
    };
    let prefix = index_key(session, "");
    for (row, _) in index.entries(&prefix) {
        if let Some(key) = row.strip_prefix(&prefix) {
            table.evict(key);
        }
    }
    index.evict_prefix(&prefix);
}
