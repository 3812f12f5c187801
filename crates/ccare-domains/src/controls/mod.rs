//! Session rule controls: the per-session (source, rule, action) switches every plugin
//! consults before it acts (spec RC-1..RC-9, CC-CTL-1..3).
//!
//! - A plugin describes what the user can switch as a [`ControlSource`]: rules, each with
//!   actions that default on or off, may be unavailable (no executor), and may require
//!   other actions of the same rule. [`Controls::register`] validates it (RC-1).
//! - The user's choices live in one KV row per session, domain [`CONTROLS_DOMAIN`], key
//!   the session id, as `{revision, preferences[{sourceId, ruleId, paused, actions,
//!   sinceSeq, epoch}]}` (RC-2). [`Controls::load`] reads it into memory;
//!   [`Controls::patch`] changes it by compare-and-swap, serially per session, and
//!   updates memory only once the store has acknowledged the write (RC-4).
//! - [`Controls::decide`] answers "may this action run now?" from memory, following the
//!   spec's decision order exactly (RC-3, CC-CTL-2); [`Controls::since_seq`] gates
//!   evidence (RC-5); [`Controls::epoch`] is the token a request records and rechecks
//!   before dispatch (RC-7, RC-8); [`Controls::snapshot`] is what the UI shows (RC-9).
//!
//! Fail closed: a session whose row has not been loaded, whose load failed, or whose
//! last save failed reports `storage-unavailable` for every action (RC-6), as does every
//! session after [`Controls::close`]. So the kernel loads a session's controls when it
//! opens the session.
//!
//! This module knows no plugin: each plugin registers its own source (the care plugin
//! the `context-care` source of CC-CTL-1, the watch its rules).
//!
//! Modules, one job each: `catalog` (the source types and their validation), `decision`
//! (the decision order), `patch` (a change and its HTTP form), `row` (the stored row),
//! `state` (the controls in memory), `persist` (reads and CAS writes of the row),
//! `snapshot` (the UI's view) and `error`.

mod catalog;
mod decision;
mod error;
mod patch;
mod persist;
mod row;
mod snapshot;
mod state;

use std::sync::Arc;

use ccare_core::SessionId;
use ccare_store::Store;

pub use catalog::{ControlAction, ControlRule, ControlSource, MAX_CONTROL_ID_LEN};
pub use decision::Decision;
pub use error::ControlsError;
pub use patch::{Patch, PatchOp, PatchRequest};
pub use snapshot::{ActionSnapshot, RuleSnapshot, Snapshot, SourceSnapshot};

use catalog::compile;
use decision::decide_in;
use persist::Inner;

/// The KV domain holding one controls row per session (spec RC-2).
pub const CONTROLS_DOMAIN: &str = "context_care_controls";

/// The controls store: the catalog of registered sources and, per session, the stored
/// preferences. Cheap to clone; clones share everything.
#[derive(Clone)]
pub struct Controls {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for Controls {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let state = self.inner.state.read();
        formatter
            .debug_struct("Controls")
            .field("sources", &state.catalog.keys().collect::<Vec<_>>())
            .field("sessions", &state.sessions.len())
            .field("closed", &state.closed)
            .finish_non_exhaustive()
    }
}

/// A session's controls epoch (spec RC-7) as its three parts; it displays as the
/// epoch string `generation:prefEpoch:hasFailure` ([`Controls::epoch`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ControlsEpoch {
    generation: u64,
    revision: u64,
    failed: bool,
}

impl std::fmt::Display for ControlsEpoch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{}:{}:{}",
            self.generation,
            self.revision,
            u8::from(self.failed)
        )
    }
}

impl Controls {
    /// Controls persisted in `store`, with no sources and no sessions loaded.
    pub fn new(store: Arc<dyn Store>) -> Self {
        Self {
            inner: Arc::new(Inner::new(store)),
        }
    }

    /// Validates and adds a source (spec RC-1). Rejects a taken source id, duplicate
    /// rule or action ids, ids outside 1..=256 characters, rules without actions, and
    /// unknown or cyclic `requires`, naming the offending ids.
    pub fn register(&self, source: ControlSource) -> Result<(), ControlsError> {
        let compiled = compile(source)?;
        let mut state = self.inner.state.write();
        if state.catalog.contains_key(&compiled.source.source_id) {
            return Err(ControlsError::DuplicateSource {
                source_id: compiled.source.source_id,
            });
        }
        state
            .catalog
            .insert(compiled.source.source_id.clone(), compiled);
        state.catalog_generation += 1;
        Ok(())
    }

    /// Removes a source (its plugin unmounted); its actions then decide
    /// `source-unavailable`. Stored preferences are kept for a later remount.
    /// Returns whether it was registered.
    pub fn unregister(&self, source_id: &str) -> bool {
        let mut state = self.inner.state.write();
        let removed = state.catalog.remove(source_id).is_some();
        if removed {
            state.catalog_generation += 1;
        }
        removed
    }

    /// Reads the session's row into memory (again, if it was loaded). A read failure or
    /// a damaged row leaves the session reporting `storage-unavailable` until a later
    /// load or save succeeds; a failed save is cleared only by a successful save (RC-6).
    pub async fn load(&self, session: &SessionId) -> Result<(), ControlsError> {
        if self.inner.state.read().closed {
            return Err(ControlsError::ControlsClosed);
        }
        let lock = self.inner.write_lock(session);
        let _serial = lock.lock().await;
        self.inner.read_row(session).await
    }

    /// Marks a session created just now as loaded with no row (what [`Controls::load`]
    /// would read for it, without the read): nobody can have written controls for an
    /// id that did not exist. A session already loaded is left as it is.
    pub fn adopt_new(&self, session: &SessionId) -> Result<(), ControlsError> {
        let mut state = self.inner.state.write();
        if state.closed {
            return Err(ControlsError::ControlsClosed);
        }
        state.sessions.entry(session.clone()).or_default();
        Ok(())
    }

    /// Whether the session's row was read (successfully or not) since it was last
    /// unloaded.
    pub fn is_loaded(&self, session: &SessionId) -> bool {
        self.inner.state.read().sessions.contains_key(session)
    }

    /// Forgets a session's in-memory controls (the session closed); it reports
    /// `storage-unavailable` until loaded again.
    pub fn unload(&self, session: &SessionId) {
        self.inner.state.write().sessions.remove(session);
        self.inner.write_locks.lock().remove(session);
    }

    /// Whether `source_id.rule_id.action_id` may run in the session now, checked in
    /// the spec's order (RC-3, CC-CTL-2); the first match wins:
    /// 1. not loaded, storage failed, or closed → `storage-unavailable`;
    /// 2. no such registered action → `source-unavailable`;
    /// 3. the rule is paused → `rule-paused`;
    /// 4. not selected (the user's choice, else the default) → `action-disabled`;
    /// 5. unavailable → its reason, or `executor-unavailable`;
    /// 6. a transitively required action is not selected or unavailable →
    ///    `dependency-disabled`;
    /// 7. otherwise `enabled`.
    pub fn decide(
        &self,
        session: &SessionId,
        source_id: &str,
        rule_id: &str,
        action_id: &str,
    ) -> Decision {
        let state = self.inner.state.read();
        let Some(controls) = state.usable(session) else {
            return Decision::StorageUnavailable;
        };
        let Some((rule, action_index)) = state.find(source_id, rule_id, action_id) else {
            return Decision::SourceUnavailable;
        };
        decide_in(controls.preference(source_id, rule_id), rule, action_index)
    }

    /// The seq at or below which evidence for the rule never triggers (spec RC-5): the
    /// session's seq − 1 at the rule's last patch, or −1 if it was never patched or
    /// the session is not loaded.
    pub fn since_seq(&self, session: &SessionId, source_id: &str, rule_id: &str) -> i64 {
        let state = self.inner.state.read();
        state
            .sessions
            .get(session)
            .and_then(|controls| controls.preference(source_id, rule_id))
            .map_or(-1, |preference| preference.since_seq)
    }

    /// The session's controls epoch `generation:prefEpoch:hasFailure` (spec RC-7): an
    /// opaque token a request records and compares before dispatch (RC-8).
    /// - `generation` counts every change that can alter a decision: the catalog's
    ///   registrations and removals plus the session's successful patches and loads,
    ///   storage failures and recoveries (both counters only grow, so their sum
    ///   changes whenever either does);
    /// - `prefEpoch` is the session's revision (the epoch its last patch wrote);
    /// - `hasFailure` is `1` while the session reports `storage-unavailable`, else `0`.
    pub fn epoch(&self, session: &SessionId) -> String {
        self.epoch_token(session).to_string()
    }

    /// [`Controls::epoch`] as a value that compares without formatting: what a caller
    /// that checks the epoch often (on every streamed chunk, before every dispatch)
    /// keeps. Its `Display` is the epoch string.
    pub fn epoch_token(&self, session: &SessionId) -> ControlsEpoch {
        let state = self.inner.state.read();
        let (generation, revision) = state.sessions.get(session).map_or((0, 0), |controls| {
            (controls.generation, controls.row.revision)
        });
        ControlsEpoch {
            generation: state.catalog_generation + generation,
            revision,
            failed: state.usable(session).is_none(),
        }
    }

    /// The session's controls for the UI (spec RC-9). `sample` is not part of it: the
    /// care plugin adds its own.
    pub fn snapshot(&self, session: &SessionId) -> Snapshot {
        snapshot::build(&self.inner.state.read(), session)
    }

    /// Changes one rule of the session's controls (spec RC-4), serially per session,
    /// by compare-and-swap on its row; memory changes only after the store
    /// acknowledged the write. `session_seq` is the session's seq now (its next seq);
    /// the rule's `sinceSeq` becomes `session_seq − 1`. Returns the new revision.
    ///
    /// Errors: `controls-closed`; `rule-unavailable` (no such rule, or a read-only
    /// source); `action-unavailable`; `revision-conflict` (also when another writer
    /// changed the row: memory is then reloaded); `storage-unavailable` when the row
    /// cannot be read or saved — the revision is unchanged and every action of the
    /// session reports `storage-unavailable` until a save succeeds (RC-6).
    pub async fn patch(
        &self,
        session: &SessionId,
        patch: Patch,
        session_seq: u64,
    ) -> Result<u64, ControlsError> {
        self.inner.patch(session, patch, session_seq).await
    }

    /// Shuts the controls: every action of every session decides
    /// `storage-unavailable`, and loads and patches fail with `controls-closed`.
    /// A patch already writing still lands in memory once acknowledged.
    pub fn close(&self) {
        self.inner.state.write().closed = true;
    }
}
