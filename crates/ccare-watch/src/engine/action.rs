//! Actions and firings (SW-7): what a hit asks the caller to do, in order, and the pure
//! rules for running it (resume only after a successful abort in the same firing, an
//! unknown action recorded, a failing action recorded without stopping the rest).

use std::fmt;
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use super::detect::Evidence;

/// An action a trigger lists (SW-7, SW-8, SW-9).
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(from = "String", into = "String")]
pub enum ActionId {
    /// `notice`: inject the model-visible reminder (SW-8).
    Notice,
    /// `abort`: cancel the streaming turn (SW-9).
    Abort,
    /// `resume`: steer the continuation after a successful abort (SW-9).
    Resume,
    /// Any other name: accepted by the config, recorded as `unknown action <name>` when
    /// it would run (SW-7).
    Unknown(Arc<str>),
}

impl ActionId {
    /// The action's name as configured.
    pub fn as_str(&self) -> &str {
        match self {
            ActionId::Notice => "notice",
            ActionId::Abort => "abort",
            ActionId::Resume => "resume",
            ActionId::Unknown(name) => name,
        }
    }
}

impl From<String> for ActionId {
    fn from(name: String) -> Self {
        ActionId::from(name.as_str())
    }
}

impl From<&str> for ActionId {
    fn from(name: &str) -> Self {
        match name {
            "notice" => ActionId::Notice,
            "abort" => ActionId::Abort,
            "resume" => ActionId::Resume,
            other => ActionId::Unknown(other.into()),
        }
    }
}

impl From<ActionId> for String {
    fn from(action: ActionId) -> Self {
        action.as_str().to_owned()
    }
}

impl fmt::Display for ActionId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One hit of one trigger (SW-7): the actions to run, in order, already marked as used
/// for this attempt. The engine performs none of them; run them with [`Firing::run`].
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Firing {
    /// The trigger's id.
    #[serde(serialize_with = "serialize_shared_str")]
    pub trigger: Arc<str>,
    /// The control epoch the trigger was evaluated under (the notice record is per
    /// (trigger, epoch), SW-8).
    #[serde(serialize_with = "serialize_shared_str")]
    pub epoch: Arc<str>,
    /// What the detector found.
    pub evidence: Evidence,
    /// The enabled actions not yet used in this attempt, in configured order.
    pub actions: Vec<ActionId>,
}

/// Serializes a shared string as a plain string (serde's `rc` feature is not enabled).
fn serialize_shared_str<S: serde::Serializer>(
    value: &Arc<str>,
    serializer: S,
) -> Result<S::Ok, S::Error> {
    serializer.serialize_str(value)
}

impl Firing {
    /// Runs the actions in order through `perform` (SW-7) and records each outcome.
    ///
    /// `perform` does the real work and returns whether the action succeeded; an `Err`
    /// is recorded and the next action still runs. `resume` is not performed unless
    /// `abort` succeeded earlier in this same firing; its slot is used all the same.
    /// An unknown action is recorded as `unknown action <name>` without calling
    /// `perform`.
    pub fn run<E: fmt::Display>(
        &self,
        mut perform: impl FnMut(&ActionId) -> Result<bool, E>,
    ) -> Vec<ActionRecord> {
        let mut aborted = false;
        let mut records = Vec::with_capacity(self.actions.len());
        for action in &self.actions {
            let outcome = match action {
                ActionId::Unknown(_) => ActionOutcome::Unknown,
                ActionId::Resume if !aborted => ActionOutcome::NoAbort,
                _ => match perform(action) {
                    Ok(done) => {
                        aborted |= done && *action == ActionId::Abort;
                        ActionOutcome::Done(done)
                    }
                    Err(error) => ActionOutcome::Failed(error.to_string()),
                },
            };
            records.push(ActionRecord {
                action: action.clone(),
                outcome,
            });
        }
        records
    }
}

/// One kept firing (SW-7 "≤40 kept"): the firing and, once its caller ran it, what
/// became of each action (see [`super::StreamWatch::record_actions`]).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct FiringRecord {
    /// The firing as the engine returned it.
    pub firing: Firing,
    /// The outcome of each action in order; `None` until the caller records them.
    pub actions: Option<Vec<ActionRecord>>,
}

/// What became of one action of a firing.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ActionRecord {
    /// The action.
    pub action: ActionId,
    /// Its outcome.
    pub outcome: ActionOutcome,
}

/// How one action of a firing ended (SW-7).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "outcome", content = "detail", rename_all = "kebab-case")]
pub enum ActionOutcome {
    /// It ran and returned this result (`false` still used its slot).
    Done(bool),
    /// `resume` without a successful `abort` in the same firing: not run.
    NoAbort,
    /// The name is not an action of the watch.
    Unknown,
    /// It raised this error; the following actions still ran.
    Failed(String),
}

impl fmt::Display for ActionRecord {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.outcome {
            ActionOutcome::Done(done) => write!(f, "{} {}", self.action, done),
            ActionOutcome::NoAbort => write!(f, "{} skipped: no successful abort", self.action),
            ActionOutcome::Unknown => write!(f, "unknown action {}", self.action),
            ActionOutcome::Failed(error) => write!(f, "{} failed: {error}", self.action),
        }
    }
}
