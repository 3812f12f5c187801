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
//! This module knows no plugin: [`context_care_catalog`] is only the data of the
//! `context-care` source (CC-CTL-1), which the care plugin registers.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use ccare_core::SessionId;
use ccare_store::{Store, StoreError};
use parking_lot::{Mutex, RwLock};
use serde::{Deserialize, Serialize};

/// The KV domain holding one controls row per session (spec RC-2).
pub const CONTROLS_DOMAIN: &str = "context_care_controls";

/// The longest source, rule or action id, in UTF-16 code units (spec RC-1, GEN-1).
pub const MAX_CONTROL_ID_LEN: usize = 256;

/// A group of rules one plugin (or a legacy interface) lets the user switch (spec RC-1).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ControlSource {
    /// Unique among registered sources, 1..=256 characters.
    pub source_id: String,
    /// The plugin that declared it; `None` shows as "undeclared (legacy interface)".
    pub plugin: Option<String>,
    /// Shown but not switchable: patches to it fail with `rule-unavailable`.
    pub read_only: bool,
    /// The rules, in display order.
    pub rules: Vec<ControlRule>,
}

impl ControlSource {
    /// A switchable source without a plugin.
    pub fn new(source_id: impl Into<String>, rules: Vec<ControlRule>) -> Self {
        Self {
            source_id: source_id.into(),
            plugin: None,
            read_only: false,
            rules,
        }
    }

    /// The action `rule_id.action_id`, to adjust before registering (for example, to
    /// mark an action unavailable when its executor is missing).
    pub fn action_mut(&mut self, rule_id: &str, action_id: &str) -> Option<&mut ControlAction> {
        self.rules
            .iter_mut()
            .find(|rule| rule.id == rule_id)?
            .actions
            .iter_mut()
            .find(|action| action.id == action_id)
    }
}

/// One rule of a source: a thing that watches the session and may act (spec RC-1).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ControlRule {
    /// Unique within its source, 1..=256 characters.
    pub id: String,
    /// What the rule may do; at least one.
    pub actions: Vec<ControlAction>,
}

impl ControlRule {
    /// A rule with its actions.
    pub fn new(id: impl Into<String>, actions: Vec<ControlAction>) -> Self {
        Self {
            id: id.into(),
            actions,
        }
    }
}

/// One switchable action of a rule (spec RC-1).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ControlAction {
    /// Unique within its rule, 1..=256 characters.
    pub id: String,
    /// Whether the action is selected when the user has not chosen.
    pub default_enabled: bool,
    /// Whether something can execute it now; when false it decides to `reason`, or
    /// `executor-unavailable`.
    pub available: bool,
    /// Why it is unavailable (a stable kebab-case code).
    pub reason: Option<String>,
    /// Ids of actions of the same rule that must be on for this one to run;
    /// transitively, and without cycles.
    pub requires: Vec<String>,
}

impl ControlAction {
    /// An action that defaults on, is available, and requires nothing.
    pub fn new(id: impl Into<String>) -> Self {
        Self {
            id: id.into(),
            default_enabled: true,
            available: true,
            reason: None,
            requires: Vec::new(),
        }
    }
}

/// The `context-care` source of spec CC-CTL-1, every action available and on by default.
/// The care plugin marks `maintenance.prune` / `maintenance.summary` unavailable (with
/// [`ControlSource::action_mut`]) when it has no pruner or no summary provider.
pub fn context_care_catalog() -> ControlSource {
    let rule = |id: &str, actions: &[&str]| {
        ControlRule::new(
            id,
            actions.iter().copied().map(ControlAction::new).collect(),
        )
    };
    let mut rules = vec![rule("state", &["report", "advice"])];
    for topic in [
        "meaning",
        "capacity",
        "continuity",
        "handoff",
        "automatic",
        "labels",
        "pressure",
        "hesitation",
    ] {
        rules.push(rule(&format!("guidance-{topic}"), &["notice"]));
    }
    rules.push(rule("maintenance", &["prune", "summary"]));
    rules.push(rule("overflow", &["prune", "summary", "retry"]));
    ControlSource {
        plugin: Some("context-care".to_owned()),
        ..ControlSource::new("context-care", rules)
    }
}

/// What [`Controls::decide`] answers, in the order the spec checks (RC-3, CC-CTL-2).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    /// The action may run.
    Enabled,
    /// The session's row is not loaded, its load or last save failed, or the controls
    /// are closed.
    StorageUnavailable,
    /// No registered source has this rule and action.
    SourceUnavailable,
    /// The user paused the rule.
    RulePaused,
    /// The action is not selected (the user's choice, else its default).
    ActionDisabled,
    /// The action is unavailable, with the reason its source gave.
    Unavailable(Arc<str>),
    /// The action is unavailable and its source gave no reason.
    ExecutorUnavailable,
    /// An action it (transitively) requires is not selected or unavailable.
    DependencyDisabled,
}

impl Decision {
    /// Whether the action may run.
    pub fn is_enabled(&self) -> bool {
        matches!(self, Decision::Enabled)
    }

    /// The spec's reason string: `enabled`, `storage-unavailable`, `source-unavailable`,
    /// `rule-paused`, `action-disabled`, the source's own reason,
    /// `executor-unavailable`, or `dependency-disabled`.
    pub fn as_str(&self) -> &str {
        match self {
            Decision::Enabled => "enabled",
            Decision::StorageUnavailable => "storage-unavailable",
            Decision::SourceUnavailable => "source-unavailable",
            Decision::RulePaused => "rule-paused",
            Decision::ActionDisabled => "action-disabled",
            Decision::Unavailable(reason) => reason,
            Decision::ExecutorUnavailable => "executor-unavailable",
            Decision::DependencyDisabled => "dependency-disabled",
        }
    }
}

/// A change to one rule of a session's controls (spec RC-4), made against `revision`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Patch {
    /// The revision the change was made against; a different current revision fails
    /// with `revision-conflict`.
    pub revision: u64,
    /// The source.
    pub source_id: String,
    /// The rule.
    pub rule_id: String,
    /// What to change.
    pub op: PatchOp,
}

/// The one thing a [`Patch`] changes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PatchOp {
    /// Selects or deselects one action.
    Toggle {
        /// The action.
        action_id: String,
        /// Selected or not.
        enabled: bool,
    },
    /// Pauses or resumes the rule; the selections are kept.
    Pause(bool),
    /// Clears the rule's selections (back to the defaults) and resumes it.
    Reset,
}

/// A patch as the HTTP body carries it (spec RC-4: `{revision, sourceId, ruleId,
/// actionId?, enabled?, paused?, reset?: true}`); [`Patch::try_from`] checks that it
/// carries exactly one of toggle, pause and reset.
#[derive(Debug, Clone, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PatchRequest {
    /// The revision the change was made against.
    pub revision: u64,
    /// The source.
    pub source_id: String,
    /// The rule.
    pub rule_id: String,
    /// The action to toggle, with `enabled`.
    pub action_id: Option<String>,
    /// The new selection of `action_id`.
    pub enabled: Option<bool>,
    /// Pause (`true`) or resume (`false`) the rule.
    pub paused: Option<bool>,
    /// `true` resets the rule; `false` is the same as absent.
    pub reset: Option<bool>,
}

impl TryFrom<PatchRequest> for Patch {
    type Error = ControlsError;

    fn try_from(request: PatchRequest) -> Result<Self, ControlsError> {
        let toggle = match (request.action_id, request.enabled) {
            (Some(action_id), Some(enabled)) => Some(PatchOp::Toggle { action_id, enabled }),
            (None, None) => None,
            (Some(_), None) | (None, Some(_)) => {
                return Err(ControlsError::InvalidPatch {
                    detail: "actionId and enabled go together",
                });
            }
        };
        let reset = (request.reset == Some(true)).then_some(PatchOp::Reset);
        let mut ops = [toggle, request.paused.map(PatchOp::Pause), reset]
            .into_iter()
            .flatten();
        let op = match (ops.next(), ops.next()) {
            (Some(op), None) => op,
            (None, _) | (Some(_), Some(_)) => {
                return Err(ControlsError::InvalidPatch {
                    detail: "carry exactly one of a toggle (actionId, enabled), paused, or reset",
                });
            }
        };
        Ok(Patch {
            revision: request.revision,
            source_id: request.source_id,
            rule_id: request.rule_id,
            op,
        })
    }
}

/// Why registering a source or patching a session's controls failed.
///
/// [`ControlsError::code`] gives the spec's code; the HTTP statuses of RC-4/RC-6 are
/// 409 for `revision-conflict`, 404 for `rule-unavailable` and `action-unavailable`,
/// 503 for `controls-closed` and `storage-unavailable`, and 400 for `invalid-patch`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ControlsError {
    /// A source, rule, action or required id is empty or longer than 256 characters.
    #[error("control {what} id '{id}' must be 1 to 256 characters")]
    InvalidId {
        /// `source`, `rule`, `action` or `requires`.
        what: &'static str,
        /// The id.
        id: String,
    },
    /// A source with this id is already registered.
    #[error("control source '{source_id}' is already registered")]
    DuplicateSource {
        /// The source.
        source_id: String,
    },
    /// Two rules of a source share an id.
    #[error("control source '{source_id}': rule '{rule_id}' appears twice")]
    DuplicateRule {
        /// The source.
        source_id: String,
        /// The rule.
        rule_id: String,
    },
    /// Two actions of a rule share an id.
    #[error("control rule '{source_id}.{rule_id}': action '{action_id}' appears twice")]
    DuplicateAction {
        /// The source.
        source_id: String,
        /// The rule.
        rule_id: String,
        /// The action.
        action_id: String,
    },
    /// A rule has no actions.
    #[error("control rule '{source_id}.{rule_id}' has no actions")]
    MissingActions {
        /// The source.
        source_id: String,
        /// The rule.
        rule_id: String,
    },
    /// An action requires an id that is not an action of its rule.
    #[error(
        "control action '{source_id}.{rule_id}.{action_id}' requires unknown action '{required}'"
    )]
    UnknownRequires {
        /// The source.
        source_id: String,
        /// The rule.
        rule_id: String,
        /// The requiring action.
        action_id: String,
        /// The unknown id it requires.
        required: String,
    },
    /// Actions of a rule require each other in a cycle.
    #[error("control rule '{source_id}.{rule_id}': cyclic requires {}", cycle.join(" -> "))]
    CyclicRequires {
        /// The source.
        source_id: String,
        /// The rule.
        rule_id: String,
        /// The cycle, first action repeated at the end (`a -> b -> a`).
        cycle: Vec<String>,
    },
    /// The patch does not carry exactly one of toggle, pause and reset.
    #[error("invalid controls patch: {detail}")]
    InvalidPatch {
        /// What is wrong.
        detail: &'static str,
    },
    /// The patch was made against another revision than the current one.
    #[error("session {session}: controls revision is {current}, the patch expected {expected}")]
    RevisionConflict {
        /// The session.
        session: SessionId,
        /// The revision the patch carried.
        expected: u64,
        /// The current revision.
        current: u64,
    },
    /// No registered source has this rule.
    #[error("control rule '{source_id}.{rule_id}' is not available")]
    RuleUnavailable {
        /// The source.
        source_id: String,
        /// The rule.
        rule_id: String,
    },
    /// The source is read-only (reported as `rule-unavailable`).
    #[error("control source '{source_id}' is read-only")]
    ReadOnly {
        /// The source.
        source_id: String,
    },
    /// The rule has no such action.
    #[error("control action '{source_id}.{rule_id}.{action_id}' is not available")]
    ActionUnavailable {
        /// The source.
        source_id: String,
        /// The rule.
        rule_id: String,
        /// The action.
        action_id: String,
    },
    /// [`Controls::close`] was called.
    #[error("controls are closed")]
    ControlsClosed,
    /// Reading or saving the session's row failed; the revision is unchanged (RC-6).
    #[error("session {session}: controls storage unavailable: {message}")]
    StorageUnavailable {
        /// The session.
        session: SessionId,
        /// What the store said.
        message: String,
    },
}

impl ControlsError {
    /// The spec's code (kebab-case, as RC-4 and RC-6 write them).
    pub fn code(&self) -> &'static str {
        match self {
            ControlsError::InvalidId { .. } => "invalid-control-id",
            ControlsError::DuplicateSource { .. } => "duplicate-source",
            ControlsError::DuplicateRule { .. } => "duplicate-rule",
            ControlsError::DuplicateAction { .. } => "duplicate-action",
            ControlsError::MissingActions { .. } => "missing-actions",
            ControlsError::UnknownRequires { .. } => "unknown-requires",
            ControlsError::CyclicRequires { .. } => "cyclic-requires",
            ControlsError::InvalidPatch { .. } => "invalid-patch",
            ControlsError::RevisionConflict { .. } => "revision-conflict",
            ControlsError::RuleUnavailable { .. } | ControlsError::ReadOnly { .. } => {
                "rule-unavailable"
            }
            ControlsError::ActionUnavailable { .. } => "action-unavailable",
            ControlsError::ControlsClosed => "controls-closed",
            ControlsError::StorageUnavailable { .. } => "storage-unavailable",
        }
    }
}

/// A session's controls as the UI shows them (spec RC-9); serializes to the spec's
/// camelCase JSON. Registered sources only, sorted by id.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Snapshot {
    /// The session.
    pub session_id: SessionId,
    /// The current revision (0 before the first patch); patches are made against it.
    pub revision: u64,
    /// Set while the session reports `storage-unavailable`: why.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub storage_error: Option<String>,
    /// The registered sources.
    pub sources: Vec<SourceSnapshot>,
}

/// One source of a [`Snapshot`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct SourceSnapshot {
    /// The source.
    pub source_id: String,
    /// The plugin that declared it (`null`: legacy interface).
    pub plugin: Option<String>,
    /// Whether it can be patched.
    pub read_only: bool,
    /// Its rules, in catalog order.
    pub rules: Vec<RuleSnapshot>,
}

/// One rule of a [`SourceSnapshot`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct RuleSnapshot {
    /// The rule.
    pub id: String,
    /// Whether the user paused it.
    pub paused: bool,
    /// Its actions, in catalog order.
    pub actions: Vec<ActionSnapshot>,
}

/// One action of a [`RuleSnapshot`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ActionSnapshot {
    /// The action.
    pub id: String,
    /// Its catalog default.
    pub default_enabled: bool,
    /// Whether it has an executor.
    pub available: bool,
    /// The actions of its rule it requires.
    pub requires: Vec<String>,
    /// The user's choice, else the default.
    pub selected: bool,
    /// What [`Controls::decide`] answers now.
    pub enabled: bool,
    /// The decision's reason string.
    pub reason: String,
}

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

impl Controls {
    /// Controls persisted in `store`, with no sources and no sessions loaded.
    pub fn new(store: Arc<dyn Store>) -> Self {
        Self {
            inner: Arc::new(Inner {
                store,
                state: RwLock::new(State::default()),
                write_locks: Mutex::new(HashMap::new()),
            }),
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
        let state = self.inner.state.read();
        let (generation, revision) = state.sessions.get(session).map_or((0, 0), |controls| {
            (controls.generation, controls.row.revision)
        });
        let failed = state.usable(session).is_none();
        format!(
            "{}:{revision}:{}",
            state.catalog_generation + generation,
            u8::from(failed)
        )
    }

    /// The session's controls for the UI (spec RC-9). `sample` is not part of it: the
    /// care plugin adds its own.
    pub fn snapshot(&self, session: &SessionId) -> Snapshot {
        let state = self.inner.state.read();
        let controls = state.sessions.get(session);
        let storage_error = if state.closed {
            Some("controls are closed".to_owned())
        } else {
            match controls {
                None => Some("controls not loaded".to_owned()),
                Some(controls) => controls.failure.as_ref().map(|failure| failure.message()),
            }
        };
        let usable = storage_error.is_none();
        let sources = state
            .catalog
            .values()
            .map(|compiled| SourceSnapshot {
                source_id: compiled.source.source_id.clone(),
                plugin: compiled.source.plugin.clone(),
                read_only: compiled.source.read_only,
                rules: compiled
                    .rules
                    .iter()
                    .map(|rule| {
                        let preference = controls.and_then(|controls| {
                            controls.preference(&compiled.source.source_id, &rule.id)
                        });
                        RuleSnapshot {
                            id: rule.id.clone(),
                            paused: preference.is_some_and(|preference| preference.paused),
                            actions: rule
                                .actions
                                .iter()
                                .enumerate()
                                .map(|(index, action)| {
                                    let decision = if usable {
                                        decide_in(preference, rule, index)
                                    } else {
                                        Decision::StorageUnavailable
                                    };
                                    ActionSnapshot {
                                        id: action.id.clone(),
                                        default_enabled: action.default_enabled,
                                        available: action.available,
                                        requires: action.requires.clone(),
                                        selected: selected(preference, action),
                                        enabled: decision.is_enabled(),
                                        reason: decision.as_str().to_owned(),
                                    }
                                })
                                .collect(),
                        }
                    })
                    .collect(),
            })
            .collect();
        Snapshot {
            session_id: session.clone(),
            revision: controls.map_or(0, |controls| controls.row.revision),
            storage_error,
            sources,
        }
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
        if self.inner.state.read().closed {
            return Err(ControlsError::ControlsClosed);
        }
        let lock = self.inner.write_lock(session);
        let _serial = lock.lock().await;
        if self.inner.state.read().closed {
            return Err(ControlsError::ControlsClosed);
        }
        let needs_read = self
            .inner
            .state
            .read()
            .sessions
            .get(session)
            .is_none_or(|controls| controls.version_unknown);
        if needs_read {
            self.inner.read_row(session).await?;
        }
        let (version, mut row) = {
            let state = self.inner.state.read();
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
            Err(error) => return Err(self.inner.save_failed(session, error.to_string())),
        };
        let written = self
            .inner
            .store
            .kv_cas(CONTROLS_DOMAIN, session.as_str(), version, Some(bytes))
            .await;
        match written {
            Ok(Some(version)) => {
                let mut state = self.inner.state.write();
                let controls = state.sessions.entry(session.clone()).or_default();
                controls.row = row;
                controls.version = Some(version);
                controls.version_unknown = false;
                controls.failure = None;
                controls.generation += 1;
                Ok(revision)
            }
            Ok(None) => Err(self
                .inner
                .save_failed(session, "the store deleted the row".to_owned())),
            Err(StoreError::CasConflict { .. }) => {
                self.inner.read_row(session).await?;
                let current = self
                    .inner
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
            Err(error) => Err(self.inner.save_failed(session, error.to_string())),
        }
    }

    /// Shuts the controls: every action of every session decides
    /// `storage-unavailable`, and loads and patches fail with `controls-closed`.
    /// A patch already writing still lands in memory once acknowledged.
    pub fn close(&self) {
        self.inner.state.write().closed = true;
    }
}

struct Inner {
    store: Arc<dyn Store>,
    state: RwLock<State>,
    /// One async lock per session: loads and patches of a session run one at a time.
    write_locks: Mutex<HashMap<SessionId, Arc<tokio::sync::Mutex<()>>>>,
}

impl Inner {
    fn write_lock(&self, session: &SessionId) -> Arc<tokio::sync::Mutex<()>> {
        Arc::clone(self.write_locks.lock().entry(session.clone()).or_default())
    }

    /// Reads the session's row into memory; the caller holds its write lock.
    async fn read_row(&self, session: &SessionId) -> Result<(), ControlsError> {
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
    fn save_failed(&self, session: &SessionId, message: String) -> ControlsError {
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
}

#[derive(Default)]
struct State {
    catalog: BTreeMap<String, CompiledSource>,
    /// Bumped by every registration and removal.
    catalog_generation: u64,
    sessions: HashMap<SessionId, SessionControls>,
    closed: bool,
}

impl State {
    /// The session's controls, if they can be trusted for decisions.
    fn usable(&self, session: &SessionId) -> Option<&SessionControls> {
        if self.closed {
            return None;
        }
        self.sessions
            .get(session)
            .filter(|controls| controls.failure.is_none())
    }

    fn find(
        &self,
        source_id: &str,
        rule_id: &str,
        action_id: &str,
    ) -> Option<(&CompiledRule, usize)> {
        let rule = self
            .catalog
            .get(source_id)?
            .rules
            .iter()
            .find(|rule| rule.id == rule_id)?;
        let index = rule
            .actions
            .iter()
            .position(|action| action.id == action_id)?;
        Some((rule, index))
    }

    fn check_patch(&self, patch: &Patch) -> Result<(), ControlsError> {
        let rule_unavailable = || ControlsError::RuleUnavailable {
            source_id: patch.source_id.clone(),
            rule_id: patch.rule_id.clone(),
        };
        let source = self
            .catalog
            .get(&patch.source_id)
            .ok_or_else(rule_unavailable)?;
        let rule = source
            .rules
            .iter()
            .find(|rule| rule.id == patch.rule_id)
            .ok_or_else(rule_unavailable)?;
        if source.source.read_only {
            return Err(ControlsError::ReadOnly {
                source_id: patch.source_id.clone(),
            });
        }
        match &patch.op {
            PatchOp::Toggle { action_id, .. } => {
                if !rule.actions.iter().any(|action| &action.id == action_id) {
                    return Err(ControlsError::ActionUnavailable {
                        source_id: patch.source_id.clone(),
                        rule_id: patch.rule_id.clone(),
                        action_id: action_id.clone(),
                    });
                }
                Ok(())
            }
            PatchOp::Pause(_) | PatchOp::Reset => Ok(()),
        }
    }
}

/// Steps 3–7 of the decision order, for a registered action.
fn decide_in(
    preference: Option<&Preference>,
    rule: &CompiledRule,
    action_index: usize,
) -> Decision {
    if preference.is_some_and(|preference| preference.paused) {
        return Decision::RulePaused;
    }
    let action = &rule.actions[action_index];
    if !selected(preference, action) {
        return Decision::ActionDisabled;
    }
    if !action.available {
        return match &action.reason {
            Some(reason) => Decision::Unavailable(Arc::clone(reason)),
            None => Decision::ExecutorUnavailable,
        };
    }
    let dependency_off = action.required.iter().any(|&index| {
        let required = &rule.actions[index];
        !required.available || !selected(preference, required)
    });
    if dependency_off {
        return Decision::DependencyDisabled;
    }
    Decision::Enabled
}

fn selected(preference: Option<&Preference>, action: &CompiledAction) -> bool {
    preference
        .and_then(|preference| preference.actions.get(&action.id))
        .copied()
        .unwrap_or(action.default_enabled)
}

/// Why a session fails closed.
enum Failure {
    /// Its row could not be read; a successful read or save clears it.
    Load(String),
    /// Its last save failed; only a successful save clears it (RC-6).
    Save(String),
}

impl Failure {
    fn message(&self) -> String {
        match self {
            Failure::Load(message) | Failure::Save(message) => message.clone(),
        }
    }
}

#[derive(Default)]
struct SessionControls {
    row: StoredRow,
    /// The row's KV version (`None`: not stored yet).
    version: Option<u64>,
    /// The last read or save failed, so `version` may be stale: reread before writing.
    version_unknown: bool,
    failure: Option<Failure>,
    /// Bumped by every successful patch, changed load, storage failure and recovery.
    generation: u64,
}

impl SessionControls {
    fn preference(&self, source_id: &str, rule_id: &str) -> Option<&Preference> {
        self.row
            .preferences
            .iter()
            .find(|preference| preference.source_id == source_id && preference.rule_id == rule_id)
    }
}

/// The stored row (spec RC-2); field names are the spec's, read by the UI and exports.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
struct StoredRow {
    #[serde(default)]
    revision: u64,
    #[serde(default)]
    preferences: Vec<Preference>,
}

impl StoredRow {
    /// Applies a checked patch as of `revision` (the new one).
    fn apply(&mut self, patch: &Patch, revision: u64, session_seq: u64) {
        let index = match self.preferences.iter().position(|preference| {
            preference.source_id == patch.source_id && preference.rule_id == patch.rule_id
        }) {
            Some(index) => index,
            None => {
                self.preferences.push(Preference {
                    source_id: patch.source_id.clone(),
                    rule_id: patch.rule_id.clone(),
                    paused: false,
                    actions: BTreeMap::new(),
                    since_seq: -1,
                    epoch: 0,
                });
                self.preferences.len() - 1
            }
        };
        let preference = &mut self.preferences[index];
        match &patch.op {
            PatchOp::Toggle { action_id, enabled } => {
                preference.actions.insert(action_id.clone(), *enabled);
            }
            PatchOp::Pause(paused) => preference.paused = *paused,
            PatchOp::Reset => {
                preference.actions.clear();
                preference.paused = false;
            }
        }
        preference.epoch = revision;
        preference.since_seq = i64::try_from(session_seq).unwrap_or(i64::MAX) - 1;
        self.revision = revision;
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
struct Preference {
    source_id: String,
    rule_id: String,
    #[serde(default)]
    paused: bool,
    #[serde(default)]
    actions: BTreeMap<String, bool>,
    #[serde(default = "never")]
    since_seq: i64,
    #[serde(default)]
    epoch: u64,
}

fn never() -> i64 {
    -1
}

/// A validated source with each action's transitive requirements resolved.
struct CompiledSource {
    source: ControlSource,
    rules: Vec<CompiledRule>,
}

struct CompiledRule {
    id: String,
    actions: Vec<CompiledAction>,
}

struct CompiledAction {
    id: String,
    default_enabled: bool,
    available: bool,
    reason: Option<Arc<str>>,
    requires: Vec<String>,
    /// Indices of every action it requires, transitively.
    required: Vec<usize>,
}

fn check_id(what: &'static str, id: &str) -> Result<(), ControlsError> {
    let length = id.encode_utf16().count();
    if length == 0 || length > MAX_CONTROL_ID_LEN {
        return Err(ControlsError::InvalidId {
            what,
            id: id.to_owned(),
        });
    }
    Ok(())
}

/// Validates a source (spec RC-1) and resolves its requirements.
fn compile(source: ControlSource) -> Result<CompiledSource, ControlsError> {
    let source_id = source.source_id.as_str();
    check_id("source", source_id)?;
    let mut rules = Vec::with_capacity(source.rules.len());
    for (rule_index, rule) in source.rules.iter().enumerate() {
        check_id("rule", &rule.id)?;
        if source.rules[..rule_index]
            .iter()
            .any(|earlier| earlier.id == rule.id)
        {
            return Err(ControlsError::DuplicateRule {
                source_id: source_id.to_owned(),
                rule_id: rule.id.clone(),
            });
        }
        if rule.actions.is_empty() {
            return Err(ControlsError::MissingActions {
                source_id: source_id.to_owned(),
                rule_id: rule.id.clone(),
            });
        }
        let mut edges: Vec<Vec<usize>> = Vec::with_capacity(rule.actions.len());
        for (action_index, action) in rule.actions.iter().enumerate() {
            check_id("action", &action.id)?;
            if rule.actions[..action_index]
                .iter()
                .any(|earlier| earlier.id == action.id)
            {
                return Err(ControlsError::DuplicateAction {
                    source_id: source_id.to_owned(),
                    rule_id: rule.id.clone(),
                    action_id: action.id.clone(),
                });
            }
        }
        for action in &rule.actions {
            let mut targets = Vec::with_capacity(action.requires.len());
            for required in &action.requires {
                check_id("requires", required)?;
                let Some(target) = rule
                    .actions
                    .iter()
                    .position(|candidate| &candidate.id == required)
                else {
                    return Err(ControlsError::UnknownRequires {
                        source_id: source_id.to_owned(),
                        rule_id: rule.id.clone(),
                        action_id: action.id.clone(),
                        required: required.clone(),
                    });
                };
                targets.push(target);
            }
            edges.push(targets);
        }
        if let Some(cycle) = find_cycle(&edges) {
            return Err(ControlsError::CyclicRequires {
                source_id: source_id.to_owned(),
                rule_id: rule.id.clone(),
                cycle: cycle
                    .into_iter()
                    .map(|index| rule.actions[index].id.clone())
                    .collect(),
            });
        }
        let actions = rule
            .actions
            .iter()
            .enumerate()
            .map(|(index, action)| CompiledAction {
                id: action.id.clone(),
                default_enabled: action.default_enabled,
                available: action.available,
                reason: action.reason.as_deref().map(Arc::from),
                requires: action.requires.clone(),
                required: reachable(&edges, index),
            })
            .collect();
        rules.push(CompiledRule {
            id: rule.id.clone(),
            actions,
        });
    }
    Ok(CompiledSource { source, rules })
}

/// A cycle in the requires graph, as node indices with the first repeated at the end.
fn find_cycle(edges: &[Vec<usize>]) -> Option<Vec<usize>> {
    #[derive(Clone, Copy, PartialEq)]
    enum Mark {
        New,
        OnPath,
        Done,
    }
    fn visit(node: usize, edges: &[Vec<usize>], marks: &mut [Mark], path: &mut Vec<usize>) -> bool {
        marks[node] = Mark::OnPath;
        path.push(node);
        for &next in &edges[node] {
            match marks[next] {
                Mark::OnPath => {
                    let start = path
                        .iter()
                        .position(|&on_path| on_path == next)
                        .unwrap_or(0);
                    path.drain(..start);
                    path.push(next);
                    return true;
                }
                Mark::New => {
                    if visit(next, edges, marks, path) {
                        return true;
                    }
                }
                Mark::Done => {}
            }
        }
        path.pop();
        marks[node] = Mark::Done;
        false
    }
    let mut marks = vec![Mark::New; edges.len()];
    let mut path = Vec::new();
    for node in 0..edges.len() {
        if marks[node] == Mark::New && visit(node, edges, &mut marks, &mut path) {
            return Some(path);
        }
    }
    None
}

/// Every node reachable from `start` (not `start` itself; the graph is acyclic).
fn reachable(edges: &[Vec<usize>], start: usize) -> Vec<usize> {
    let mut seen = vec![false; edges.len()];
    let mut stack = edges[start].clone();
    let mut found = Vec::new();
    while let Some(node) = stack.pop() {
        if !seen[node] {
            seen[node] = true;
            found.push(node);
            stack.extend(edges[node].iter().copied());
        }
    }
    found.sort_unstable();
    found
}
