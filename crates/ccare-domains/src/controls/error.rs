//! Why registering a source or patching a session's controls failed, with the spec's
//! codes (RC-1, RC-4, RC-6).

use ccare_core::SessionId;

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
    /// [`Controls::close`](super::Controls::close) was called.
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
