//! The decision order (spec RC-3, CC-CTL-2): what a registered action decides given the
//! session's stored preference for its rule.

use std::sync::Arc;

use super::catalog::{CompiledAction, CompiledRule};
use super::row::Preference;

/// What [`Controls::decide`](super::Controls::decide) answers, in the order the spec checks (RC-3, CC-CTL-2).
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

/// Steps 3–7 of the decision order, for a registered action.
pub(super) fn decide_in(
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

pub(super) fn selected(preference: Option<&Preference>, action: &CompiledAction) -> bool {
    preference
        .and_then(|preference| preference.actions.get(&action.id))
        .copied()
        .unwrap_or(action.default_enabled)
}
