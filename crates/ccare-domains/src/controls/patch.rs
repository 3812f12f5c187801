//! A change to one rule of a session's controls (spec RC-4): [`Patch`] as the code makes
//! it, [`PatchRequest`] as the HTTP body carries it.

use serde::Deserialize;

use super::error::ControlsError;

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
/// carries exactly one of toggle, pause and reset. Unknown fields are refused (a
/// misspelt `enable` must not read as a patch that changes nothing).
#[derive(Debug, Clone, PartialEq, Eq, Default, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
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
