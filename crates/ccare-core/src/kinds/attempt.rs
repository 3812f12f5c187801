//! `assistant/attempt` and `llm/retry`: what a provider call left in the log when it
//! produced no committed message, and each transient failure the LLM layer retried.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::event::EventData;
use crate::failure::{FailureCode, LlmFailure};

use super::{ASSISTANT_ATTEMPT, LLM_RETRY};

/// How an attempt without a committed message ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum AttemptOutcome {
    /// The provider failed; `failure` says how.
    Failed,
    /// The turn was cancelled before anything visible streamed.
    Aborted,
}

impl AttemptOutcome {
    /// The outcome as logged: `failed` or `aborted`.
    pub fn as_str(self) -> &'static str {
        match self {
            AttemptOutcome::Failed => "failed",
            AttemptOutcome::Aborted => "aborted",
        }
    }
}

/// `assistant/attempt{turn, step, call_id, attempt, outcome, stream[], failure?}`: a
/// provider call that committed no message (H-EVT-2). Written in this field order.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AssistantAttempt {
    /// The turn number.
    pub turn: u32,
    /// The step number.
    pub step: u32,
    /// The provider call.
    pub call_id: String,
    /// The request-error retry this was, from 1 (H-HOOK-5).
    pub attempt: u32,
    /// `failed` or `aborted`.
    pub outcome: AttemptOutcome,
    /// The lossless stream records of whatever streamed before it ended (H-EVT-4).
    #[serde(default)]
    pub stream: Vec<Value>,
    /// The failure, for `failed`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failure: Option<LlmFailure>,
}

impl EventData for AssistantAttempt {
    const KIND: &'static str = ASSISTANT_ATTEMPT;
}

/// `llm/retry{call_id, attempt, code, delay_ms}` (ignorable): a transient failure the
/// LLM layer retried before any output streamed (H-LLM-6).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LlmRetry {
    /// The provider call.
    pub call_id: String,
    /// The attempt that failed, from 1.
    pub attempt: u32,
    /// Why it failed.
    pub code: FailureCode,
    /// How long the layer waited before the next attempt.
    pub delay_ms: u64,
}

impl EventData for LlmRetry {
    const KIND: &'static str = LLM_RETRY;
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kinds::tests::{round_trip, round_trip_ignorable};

    // The fixtures are events today's agent wrote with the scripted provider.

    /// A provider that refused the key (`{"failure": {"code": "AUTH_FAILED", ...}}`).
    const FAILED: &str = r#"{"seq":12,"time_ms":1796152503821,"type":"assistant/attempt","data":{"turn":2,"step":1,"call_id":"01a23308-2e0d-753c-92af-2b729659970f","attempt":1,"outcome":"failed","stream":[{"type":"chunk","time_ms":1796152503821,"chunk":{"type":"finish","reason":"error","failure":{"code":"AUTH_FAILED","message":"bad key","provider":"s","model":"scripted"}}}],"failure":{"code":"AUTH_FAILED","message":"bad key","provider":"s","model":"scripted"}}}"#;

    /// An aborted attempt: no failure.
    const ABORTED: &str = r#"{"seq":5,"time_ms":1796152503226,"type":"assistant/attempt","data":{"turn":1,"step":1,"call_id":"01a23308-2bad-774c-b7c7-2848b3f4bb33","attempt":1,"outcome":"aborted","stream":[{"type":"chunk","time_ms":1796152503226,"chunk":{"type":"finish","reason":"aborted"}}]}}"#;

    /// A request context care refused locally (CC-BUD-6) keeps its refusal.
    const REFUSED: &str = r#"{"seq":5,"time_ms":1796152569482,"type":"assistant/attempt","data":{"turn":1,"step":1,"call_id":"01a23309-2e7f-721d-a852-dd3812792d42","attempt":1,"outcome":"failed","stream":[],"failure":{"code":"REQUEST_BUDGET_EXCEEDED","message":"Request input 5161 exceeds hard input budget 3000","provider":"s","model":"small","refusal":{"origin":"preflight","budget":{"purpose":"conversation","capacity":4000,"physicalWindow":4000,"policyCapacity":null,"billingInputCeiling":null,"maxTokens":1000,"completionSource":"adapter-default","safetyTokens":0,"burstTokens":0,"releaseMarginTokens":0,"retainTokens":null,"hardInput":3000,"physicalInput":3000,"softInput":3000,"releaseTarget":3000,"tail":480},"budgetKind":"physical"}}}}"#;

    const RETRY: &str = r#"{"seq":5,"time_ms":1796152503212,"type":"llm/retry","data":{"call_id":"01a23308-2bab-7638-b128-962f3ea55ab4","attempt":1,"code":"RATE_LIMITED","delay_ms":603},"ignorable":true}"#;

    #[test]
    fn assistant_attempt_round_trips_todays_bytes() {
        let failed: AssistantAttempt = round_trip(FAILED);
        assert_eq!(failed.outcome, AttemptOutcome::Failed);
        assert_eq!(
            failed.failure.map(|failure| failure.code),
            Some(FailureCode::AuthFailed)
        );
        let aborted: AssistantAttempt = round_trip(ABORTED);
        assert_eq!(
            (aborted.outcome, aborted.failure),
            (AttemptOutcome::Aborted, None)
        );
        let refused: AssistantAttempt = round_trip(REFUSED);
        assert!(
            refused
                .failure
                .is_some_and(|failure| failure.refusal.is_some())
        );
    }

    #[test]
    fn llm_retry_round_trips_todays_bytes() {
        let retry: LlmRetry = round_trip_ignorable(RETRY);
        assert_eq!(retry.code, FailureCode::RateLimited);
        assert_eq!(retry.delay_ms, 603);
    }
}
