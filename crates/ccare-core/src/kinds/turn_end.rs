//! Why a turn ended (`turn/end{reason}`, H-EVT-2): the reason, who cancelled an aborted
//! turn (H-CANCEL-1), and what failed an errored one.

use std::fmt;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::failure::LlmFailure;

/// Why a turn ended.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "kebab-case")]
pub enum TurnEndReason {
    /// The model finished.
    Completed,
    /// Cancelled; `cause` says by whom.
    Aborted {
        /// `user`, `hook{plugin,reason}`, `shutdown` or `timeout`.
        cause: CancelCause,
    },
    /// A pre-step hook refused the step.
    Blocked {
        /// Who refused.
        by: String,
        /// Why.
        detail: String,
        /// Plugin messages that were never entered.
        #[serde(default)]
        unentered: Vec<Value>,
    },
    /// The turn failed.
    Error {
        /// What failed: a provider call, or the host itself.
        failure: TurnFailure,
    },
    /// The model hit its output limit.
    MaxTokens,
    /// Crash repair closed a turn that was open when the process died.
    Interrupted,
}

/// Why a turn is cancelled (H-CANCEL-1); logged as `turn/end{aborted{cause}}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "kebab-case")]
pub enum CancelCause {
    /// The user asked (Ctrl-C, a stop button).
    User,
    /// A plugin's hook asked (stream watch).
    Hook {
        /// The plugin.
        plugin: String,
        /// Why.
        reason: String,
    },
    /// The host is shutting down.
    Shutdown,
    /// A deadline passed.
    Timeout,
}

/// What failed a turn (`turn/end{error{failure}}`). Logged untagged: a provider failure
/// as its [`LlmFailure`], a host failure as `{code, hook?, plugin?, message}`; a code
/// that is not one of [`crate::FailureCode`]'s reads as a host failure.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum TurnFailure {
    /// A provider call failed, or a request gate refused it (H-LLM-5, CC-BUD-6).
    Llm(LlmFailure),
    /// The host failed the turn: a refused append, a hook error, the step limit.
    Host(HostFailure),
}

impl TurnFailure {
    /// The stable code, e.g. `AUTH_FAILED` or `STEP_LIMIT`.
    pub fn code(&self) -> &str {
        match self {
            TurnFailure::Llm(failure) => failure.code.as_str(),
            TurnFailure::Host(failure) => &failure.code,
        }
    }

    /// The human-readable explanation.
    pub fn message(&self) -> &str {
        match self {
            TurnFailure::Llm(failure) => &failure.message,
            TurnFailure::Host(failure) => &failure.message,
        }
    }
}

impl From<LlmFailure> for TurnFailure {
    fn from(failure: LlmFailure) -> Self {
        TurnFailure::Llm(failure)
    }
}

impl From<HostFailure> for TurnFailure {
    fn from(failure: HostFailure) -> Self {
        TurnFailure::Host(failure)
    }
}

impl fmt::Display for TurnFailure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TurnFailure::Llm(failure) => failure.fmt(f),
            TurnFailure::Host(failure) => failure.fmt(f),
        }
    }
}

/// A failure the host itself ended a turn with. Written in this field order.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct HostFailure {
    /// A stable code: the refusing layer's (`SESSION_FENCED`, `ENCODE_FAILED`, …),
    /// `HOOK_FAILED` or `STEP_LIMIT`.
    pub code: String,
    /// For `HOOK_FAILED`: which hook chain (`pre-step`, `request`, …).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hook: Option<String>,
    /// For `HOOK_FAILED`: the plugin whose hook failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub plugin: Option<String>,
    /// What happened.
    pub message: String,
    /// For `HOOK_FAILED` in `pre-step` or `boundary`: the plugin messages the step had
    /// claimed and never entered, in queue order. They left the inbox with the turn (a
    /// failing hook must not replay them turn after turn), so this is where they stay
    /// readable, as `blocked{unentered}` keeps a refused step's. Absent when empty.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub unentered: Vec<Value>,
}

impl HostFailure {
    /// A failure with a code and a message.
    pub fn new(code: impl Into<String>, message: impl Into<String>) -> Self {
        Self {
            code: code.into(),
            hook: None,
            plugin: None,
            message: message.into(),
            unentered: Vec::new(),
        }
    }

    /// `HOOK_FAILED`: the hook chain `hook` failed with `message`, in `plugin`'s hook
    /// (the chain names the plugin; `None` leaves it out).
    pub fn hook(
        hook: impl Into<String>,
        plugin: Option<String>,
        message: impl Into<String>,
    ) -> Self {
        Self {
            code: "HOOK_FAILED".to_owned(),
            hook: Some(hook.into()),
            plugin,
            message: message.into(),
            unentered: Vec::new(),
        }
    }

    /// The same failure, listing the plugin messages its step never entered.
    pub fn with_unentered(mut self, unentered: Vec<Value>) -> Self {
        self.unentered = unentered;
        self
    }
}

impl fmt::Display for HostFailure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.code, self.message)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::failure::FailureCode;
    use crate::kinds::TurnEnd;
    use crate::kinds::tests::round_trip;

    const PROVIDER: &str = r#"{"seq":8,"time_ms":1767225600000,"type":"turn/end","data":{"turn":1,"reason":{"kind":"error","failure":{"code":"AUTH_FAILED","message":"bad key","status":401,"provider":"s","model":"scripted"}}}}"#;
    const HOOK: &str = r#"{"seq":6,"time_ms":1767225600000,"type":"turn/end","data":{"turn":1,"reason":{"kind":"error","failure":{"code":"HOOK_FAILED","hook":"request","plugin":"broken","message":"no budget table"}}}}"#;
    const HOOK_UNENTERED: &str = r#"{"seq":4,"time_ms":1767225600000,"type":"turn/end","data":{"turn":1,"reason":{"kind":"error","failure":{"code":"HOOK_FAILED","hook":"pre-step","plugin":"failing","message":"the chain broke","unentered":[{"content":[{"type":"text","text":"remember the deadline"}]}]}}}}"#;
    const STEP_LIMIT: &str = r#"{"seq":14,"time_ms":1767225600000,"type":"turn/end","data":{"turn":1,"reason":{"kind":"error","failure":{"code":"STEP_LIMIT","message":"the turn reached loop.max_steps_per_turn (2) steps"}}}}"#;
    const HOOK_CAUSE: &str = r#"{"seq":9,"time_ms":1767225600000,"type":"turn/end","data":{"turn":1,"reason":{"kind":"aborted","cause":{"kind":"hook","plugin":"watch","reason":"line-repeat"}}}}"#;
    const USER_CAUSE: &str = r#"{"seq":9,"time_ms":1767225600000,"type":"turn/end","data":{"turn":2,"reason":{"kind":"aborted","cause":{"kind":"user"}}}}"#;

    fn reason(line: &str) -> TurnEndReason {
        round_trip::<TurnEnd>(line).reason
    }

    #[test]
    fn turn_end_failures_round_trip_todays_bytes_and_type_their_source() {
        let TurnEndReason::Error { failure } = reason(PROVIDER) else {
            panic!("{PROVIDER}");
        };
        assert!(
            matches!(&failure, TurnFailure::Llm(llm) if llm.code == FailureCode::AuthFailed && llm.status == Some(401))
        );
        let TurnEndReason::Error { failure } = reason(HOOK) else {
            panic!("{HOOK}");
        };
        assert_eq!(
            failure,
            TurnFailure::Host(HostFailure::hook(
                "request",
                Some("broken".to_owned()),
                "no budget table"
            ))
        );
        let TurnEndReason::Error { failure } = reason(HOOK_UNENTERED) else {
            panic!("{HOOK_UNENTERED}");
        };
        assert!(
            matches!(&failure, TurnFailure::Host(host) if host.unentered.len() == 1),
            "{failure:?}"
        );
        let TurnEndReason::Error { failure } = reason(STEP_LIMIT) else {
            panic!("{STEP_LIMIT}");
        };
        assert_eq!(
            (failure.code(), failure.to_string().as_str()),
            (
                "STEP_LIMIT",
                "STEP_LIMIT: the turn reached loop.max_steps_per_turn (2) steps"
            )
        );
    }

    #[test]
    fn turn_end_causes_round_trip_todays_bytes() {
        assert_eq!(
            reason(HOOK_CAUSE),
            TurnEndReason::Aborted {
                cause: CancelCause::Hook {
                    plugin: "watch".to_owned(),
                    reason: "line-repeat".to_owned()
                }
            }
        );
        assert_eq!(
            reason(USER_CAUSE),
            TurnEndReason::Aborted {
                cause: CancelCause::User
            }
        );
    }
}
