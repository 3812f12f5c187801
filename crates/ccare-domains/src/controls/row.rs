//! The stored controls row of one session (spec RC-2), as the UI and exports read it,
//! and how a checked patch changes it.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::patch::{Patch, PatchOp};

/// The stored row (spec RC-2); field names are the spec's, read by the UI and exports.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(super) struct StoredRow {
    #[serde(default)]
    pub(super) revision: u64,
    #[serde(default)]
    pub(super) preferences: Vec<Preference>,
}

impl StoredRow {
    /// Applies a checked patch as of `revision` (the new one).
    pub(super) fn apply(&mut self, patch: &Patch, revision: u64, session_seq: u64) {
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
pub(super) struct Preference {
    pub(super) source_id: String,
    pub(super) rule_id: String,
    #[serde(default)]
    pub(super) paused: bool,
    #[serde(default)]
    pub(super) actions: BTreeMap<String, bool>,
    #[serde(default = "never")]
    pub(super) since_seq: i64,
    #[serde(default)]
    pub(super) epoch: u64,
}

fn never() -> i64 {
    -1
}
