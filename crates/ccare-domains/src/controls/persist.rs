//! Reading and writing a session's controls row (spec RC-2, RC-4, RC-6): one async lock
//! per session, reads into memory, compare-and-swap patches that change memory only
//! once the store acknowledged them, and the fail-closed bookkeeping of a failed read
//! or save.

use std::collections::HashMap;
use std::sync::Arc;

use ccare_core::SessionId;
use ccare_store::{Store, StoreError};
use parking_lot::{Mutex, RwLock};

use super::CONTROLS_DOMAIN;
use super::error::ControlsError;
use super::patch::Patch;
use super::row::StoredRow;
use super::state::{Failure, State};

/// The controls' shared state and their store.
pub(super) struct Inner {
    pub(super) store: Arc<dyn Store>,
    pub(super) state: RwLock<State>,
    /// One async lock per session: loads and patches of a session run one at a time.
    pub(super) write_locks: Mutex<HashMap<SessionId, Arc<tokio::sync::Mutex<()>>>>,
}

impl Inner {
    /// Controls persisted in `store`, with no sources and no sessions loaded.
    pub(super) fn new(store: Arc<dyn Store>) -> Self {
        Self {
            store,
            state: RwLock::new(State::default()),
            write_locks: Mutex::new(HashMap::new()),
        }
    }

    /// The async lock that serializes the session's loads and patches.
    pub(super) fn write_lock(&self, session: &SessionId) -> Arc<tokio::sync::Mutex<()>> {
        Arc::clone(self.write_locks.lock().entry(session.clone()).or_default())
    }

    /// Reads the session's row into memory; the caller holds its write lock.
    pub(super) async fn read_row(&self, session: &SessionId) -> Result<(), ControlsError> {
        let read = self
            .store
            .kv_get(CONTROLS_DOMAIN, session.as_str())
            .await
            .map_err(|error| error.to_string())
            .and_then(|entry| match entry {
                None => Ok((None, StoredRow::default())),
                Some(entry) => serde_json::from_slice::<StoredRow>(&entry.value)
                    .map(|row| (Some(entry.version), row))
                    .map_err(|error| format!("damaged controls row: {error}")),
            });
        let mut state = self.state.write();
        let controls = state.sessions.entry(session.clone()).or_default();
        match read {
            Ok((version, row)) => {
                let recovered = matches!(controls.failure, Some(Failure::Load(_)));
                if recovered {
                    controls.failure = None;
                }
                if recovered || controls.row != row || controls.version_unknown {
                    controls.generation += 1;
                }
                controls.row = row;
                controls.version = version;
                controls.version_unknown = false;
                Ok(())
            }
            Err(message) => {
                if controls.failure.is_none() {
                    controls.generation += 1;
                }
                if !matches!(controls.failure, Some(Failure::Save(_))) {
                    controls.failure = Some(Failure::Load(message.clone()));
                }
                controls.version_unknown = true;
                Err(ControlsError::StorageUnavailable {
                    session: session.clone(),
                    message,
                })
            }
        }
    }

    /// Records a failed save (RC-6): the row is unchanged in memory, the session fails
    /// closed, and the next patch rereads the row first.
    pub(super) fn save_failed(&self, session: &SessionId, message: String) -> ControlsError {
        let mut state = self.state.write();
        let controls = state.sessions.entry(session.clone()).or_default();
        if controls.failure.is_none() {
            controls.generation += 1;
        }
        controls.failure = Some(Failure::Save(message.clone()));
        controls.version_unknown = true;
        ControlsError::StorageUnavailable {
            session: session.clone(),
            message,
        }
    }

    /// [`Controls::patch`](super::Controls::patch): the checks, the compare-and-swap
    /// of the session's row, and memory updated once the store acknowledged it.
    pub(super) async fn patch(
        &self,
        session: &SessionId,
        patch: Patch,
        session_seq: u64,
    ) -> Result<u64, ControlsError> {
        if self.state.read().closed {
            return Err(ControlsError::ControlsClosed);
        }
        let lock = self.write_lock(session);
        let _serial = lock.lock().await;
        if self.state.read().closed {
            return Err(ControlsError::ControlsClosed);
        }
        let needs_read = self
            .state
            .read()
            .sessions
            .get(session)
            .is_none_or(|controls| controls.version_unknown);
        if needs_read {
            self.read_row(session).await?;
        }
        let (version, mut row) = {
            let state = self.state.read();
            state.check_patch(&patch)?;
            let Some(controls) = state.sessions.get(session) else {
                return Err(ControlsError::StorageUnavailable {
                    session: session.clone(),
                    message: "controls not loaded".to_owned(),
                });
            };
            if controls.row.revision != patch.revision {
                return Err(ControlsError::RevisionConflict {
                    session: session.clone(),
                    expected: patch.revision,
                    current: controls.row.revision,
                });
            }
            (controls.version, controls.row.clone())
        };
        let revision = row.revision + 1;
        row.apply(&patch, revision, session_seq);
        let bytes = match serde_json::to_vec(&row) {
            Ok(bytes) => bytes,
            Err(error) => return Err(self.save_failed(session, error.to_string())),
        };
        let written = self
            .store
            .kv_cas(CONTROLS_DOMAIN, session.as_str(), version, Some(bytes))
            .await;
        match written {
            Ok(Some(version)) => {
                let mut state = self.state.write();
                let controls = state.sessions.entry(session.clone()).or_default();
                controls.row = row;
                controls.version = Some(version);
                controls.version_unknown = false;
                controls.failure = None;
                controls.generation += 1;
                Ok(revision)
            }
            Ok(None) => Err(self.save_failed(session, "the store deleted the row".to_owned())),
            Err(StoreError::CasConflict { .. }) => {
                self.read_row(session).await?;
                let current = self
                    .state
                    .read()
                    .sessions
                    .get(session)
                    .map_or(0, |controls| controls.row.revision);
                Err(ControlsError::RevisionConflict {
                    session: session.clone(),
                    expected: patch.revision,
                    current,
                })
            }
            Err(error) => Err(self.save_failed(session, error.to_string())),
        }
    }
}
