//! The per-session maintenance controller (CC-HYS-1): a two-state machine with a
//! hysteresis band between the release target `L` and the soft input `S`.
//!
//! - Unarmed and `Q ≥ S` → armed.
//! - Armed and `Q < L` → unarmed.
//! - Inside the band it keeps its state, so maintenance that brings `Q` just below `S`
//!   keeps going until it is below `L`.
//! - With no capacity known it is never armed.
//!
//! Each session owns one value of [`HysteresisController`]; nothing here is shared, so
//! a session's boundary never moves another session's controller. The lead keeps them
//! beside the session (process-local; it restarts unarmed).

use serde::{Deserialize, Serialize};

use crate::budget::Budget;

/// One session's controller (CC-HYS-1). `Default` is unarmed. Serializes as
/// `{"armed": bool}`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct HysteresisController {
    armed: bool,
}

/// The two thresholds the controller reads from a [`Budget`] (CC-BUD-1).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct HysteresisThresholds {
    /// `S`: arm at or above.
    pub soft_input: i64,
    /// `L`: disarm strictly below.
    pub release_target: i64,
}

impl HysteresisThresholds {
    /// `S` and `L` of a resolved budget.
    pub fn of(budget: &Budget) -> Self {
        Self {
            soft_input: budget.soft_input,
            release_target: budget.release_target,
        }
    }
}

/// What one observation did (CC-HYS-1).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum HysteresisTransition {
    /// Unarmed → armed: `Q ≥ S`.
    Armed,
    /// Armed and still armed: `Q ≥ L`.
    StayedArmed,
    /// Armed → unarmed: `Q < L`, or the capacity became unknown.
    Disarmed,
    /// Unarmed and still unarmed: `Q < S`, or no capacity is known.
    StayedUnarmed,
}

impl HysteresisTransition {
    /// Whether the controller is armed after this transition, i.e. whether automatic
    /// maintenance runs (CC-HYS-1).
    pub fn is_armed(self) -> bool {
        match self {
            HysteresisTransition::Armed | HysteresisTransition::StayedArmed => true,
            HysteresisTransition::Disarmed | HysteresisTransition::StayedUnarmed => false,
        }
    }
}

impl HysteresisController {
    /// An unarmed controller.
    pub fn new() -> Self {
        Self::default()
    }

    /// Whether it is armed: automatic maintenance runs while it is (CC-HYS-1).
    pub fn is_armed(&self) -> bool {
        self.armed
    }

    /// Observes a sample's input `Q` at a boundary, or after a maintenance pass, against
    /// the thresholds of the current budget; `None` means no capacity is known and
    /// leaves the controller unarmed (CC-HYS-1).
    pub fn observe(
        &mut self,
        input_tokens: u64,
        thresholds: Option<HysteresisThresholds>,
    ) -> HysteresisTransition {
        let was_armed = self.armed;
        self.armed = match thresholds {
            None => false,
            Some(thresholds) => {
                let q = i64::try_from(input_tokens).unwrap_or(i64::MAX);
                if was_armed {
                    q >= thresholds.release_target
                } else {
                    q >= thresholds.soft_input
                }
            }
        };
        match (was_armed, self.armed) {
            (false, true) => HysteresisTransition::Armed,
            (true, true) => HysteresisTransition::StayedArmed,
            (true, false) => HysteresisTransition::Disarmed,
            (false, false) => HysteresisTransition::StayedUnarmed,
        }
    }

    /// As [`HysteresisController::observe`], reading the thresholds from a budget.
    pub fn observe_budget(
        &mut self,
        input_tokens: u64,
        budget: Option<&Budget>,
    ) -> HysteresisTransition {
        self.observe(input_tokens, budget.map(HysteresisThresholds::of))
    }
}
