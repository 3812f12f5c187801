//! What the UI shows of a session's controls (spec RC-9): every registered action with
//! its selection and its decision now.

use ccare_core::SessionId;
use serde::Serialize;

use super::decision::{Decision, decide_in, selected};
use super::state::State;

/// A session's controls as the UI shows them (spec RC-9); serializes to the spec's
/// camelCase JSON. Registered sources only, sorted by id.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Snapshot {
    /// The session.
    #[schemars(with = "String")]
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
#[derive(Debug, Clone, PartialEq, Eq, Serialize, schemars::JsonSchema)]
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
#[derive(Debug, Clone, PartialEq, Eq, Serialize, schemars::JsonSchema)]
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
#[derive(Debug, Clone, PartialEq, Eq, Serialize, schemars::JsonSchema)]
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
    /// What [`Controls::decide`](super::Controls::decide) answers now.
    pub enabled: bool,
    /// The decision's reason string.
    pub reason: String,
}

/// The snapshot of `session` from the controls in memory.
pub(super) fn build(state: &State, session: &SessionId) -> Snapshot {
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
