//! The controls in memory: the compiled catalog and, per session, the loaded row, its
//! KV version and why it fails closed (spec RC-6).

use std::collections::{BTreeMap, HashMap};

use ccare_core::SessionId;

use super::catalog::{CompiledRule, CompiledSource};
use super::error::ControlsError;
use super::patch::{Patch, PatchOp};
use super::row::{Preference, StoredRow};

#[derive(Default)]
pub(super) struct State {
    pub(super) catalog: BTreeMap<String, CompiledSource>,
    /// Bumped by every registration and removal.
    pub(super) catalog_generation: u64,
    pub(super) sessions: HashMap<SessionId, SessionControls>,
    pub(super) closed: bool,
}

impl State {
    /// The session's controls, if they can be trusted for decisions.
    pub(super) fn usable(&self, session: &SessionId) -> Option<&SessionControls> {
        if self.closed {
            return None;
        }
        self.sessions
            .get(session)
            .filter(|controls| controls.failure.is_none())
    }

    pub(super) fn find(
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

    pub(super) fn check_patch(&self, patch: &Patch) -> Result<(), ControlsError> {
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

/// Why a session fails closed.
pub(super) enum Failure {
    /// Its row could not be read; a successful read or save clears it.
    Load(String),
    /// Its last save failed; only a successful save clears it (RC-6).
    Save(String),
}

impl Failure {
    pub(super) fn message(&self) -> String {
        match self {
            Failure::Load(message) | Failure::Save(message) => message.clone(),
        }
    }
}

#[derive(Default)]
pub(super) struct SessionControls {
    pub(super) row: StoredRow,
    /// The row's KV version (`None`: not stored yet).
    pub(super) version: Option<u64>,
    /// The last read or save failed, so `version` may be stale: reread before writing.
    pub(super) version_unknown: bool,
    pub(super) failure: Option<Failure>,
    /// Bumped by every successful patch, changed load, storage failure and recovery.
    pub(super) generation: u64,
}

impl SessionControls {
    pub(super) fn preference(&self, source_id: &str, rule_id: &str) -> Option<&Preference> {
        self.row
            .preferences
            .iter()
            .find(|preference| preference.source_id == source_id && preference.rule_id == rule_id)
    }
}
