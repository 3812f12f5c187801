//! Provider failures with stable codes (spec H-LLM-5).
//!
//! The codes are part of the product's contract: they are logged in
//! `assistant/attempt`, printed by `ccare run` on stderr and matched by plugins (overflow
//! recovery reacts to `CONTEXT_WINDOW_EXCEEDED` and `REQUEST_BUDGET_EXCEEDED`). They
//! live here, below the LLM layer, because the event log and every plugin speak them.

use std::fmt;

use serde::{Deserialize, Serialize};

/// A stable failure code.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum FailureCode {
    /// The request does not fit the model's context window.
    ContextWindowExceeded,
    /// The provider asked us to slow down (HTTP 429).
    RateLimited,
    /// The provider could not be reached or failed on its side (5xx, lost connection).
    ProviderUnavailable,
    /// The key was missing or refused (401/403).
    AuthFailed,
    /// The provider refused the request as malformed (other 4xx).
    InvalidRequest,
    /// Nothing arrived within the configured time.
    Timeout,
    /// The provider's stream broke the wire protocol or the chunk rules (H-LLM-3).
    StreamProtocol,
    /// A non-conversation request hit its output limit.
    MaxTokens,
    /// The provider withheld the output.
    ContentFiltered,
    /// The request holds content this route cannot carry.
    UnsupportedContent,
    /// Images must be offloaded before this route accepts the request.
    ImageOffloadRequired,
    /// The request was refused locally: its input is over the hard budget.
    RequestBudgetExceeded,
    /// The session's rule controls changed between preparing the request and
    /// dispatching it (RC-8); it is prepared again.
    ControlChanged,
    /// Anything else.
    Unknown,
}

impl FailureCode {
    /// Every code, in declaration order.
    pub const ALL: [FailureCode; 14] = [
        FailureCode::ContextWindowExceeded,
        FailureCode::RateLimited,
        FailureCode::ProviderUnavailable,
        FailureCode::AuthFailed,
        FailureCode::InvalidRequest,
        FailureCode::Timeout,
        FailureCode::StreamProtocol,
        FailureCode::MaxTokens,
        FailureCode::ContentFiltered,
        FailureCode::UnsupportedContent,
        FailureCode::ImageOffloadRequired,
        FailureCode::RequestBudgetExceeded,
        FailureCode::ControlChanged,
        FailureCode::Unknown,
    ];

    /// The code as logged and printed, e.g. `CONTEXT_WINDOW_EXCEEDED`.
    pub fn as_str(self) -> &'static str {
        match self {
            FailureCode::ContextWindowExceeded => "CONTEXT_WINDOW_EXCEEDED",
            FailureCode::RateLimited => "RATE_LIMITED",
            FailureCode::ProviderUnavailable => "PROVIDER_UNAVAILABLE",
            FailureCode::AuthFailed => "AUTH_FAILED",
            FailureCode::InvalidRequest => "INVALID_REQUEST",
            FailureCode::Timeout => "TIMEOUT",
            FailureCode::StreamProtocol => "STREAM_PROTOCOL",
            FailureCode::MaxTokens => "MAX_TOKENS",
            FailureCode::ContentFiltered => "CONTENT_FILTERED",
            FailureCode::UnsupportedContent => "UNSUPPORTED_CONTENT",
            FailureCode::ImageOffloadRequired => "IMAGE_OFFLOAD_REQUIRED",
            FailureCode::RequestBudgetExceeded => "REQUEST_BUDGET_EXCEEDED",
            FailureCode::ControlChanged => "CONTROL_CHANGED",
            FailureCode::Unknown => "UNKNOWN",
        }
    }

    /// Whether the LLM layer retries it before any output was streamed (H-LLM-6).
    pub fn is_retryable(self) -> bool {
        matches!(
            self,
            FailureCode::RateLimited | FailureCode::ProviderUnavailable | FailureCode::Timeout
        )
    }
}

impl fmt::Display for FailureCode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Why a provider call failed: a stable code plus what the provider said.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LlmFailure {
    /// The stable code.
    pub code: FailureCode,
    /// A human-readable explanation (the provider's own message where there was one).
    pub message: String,
    /// The HTTP status, when the failure came with one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<u16>,
    /// How long the provider asked us to wait before retrying.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retry_after_ms: Option<u64>,
    /// The provider (config name) the call went to.
    #[serde(default)]
    pub provider: String,
    /// The model the call asked for.
    #[serde(default)]
    pub model: String,
    /// For `IMAGE_OFFLOAD_REQUIRED`: whether offloading images would let it through.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub offload_images: Option<bool>,
    /// Set when a request gate refused the request locally (CC-BUD-6): the provider was
    /// never called, and this says against which budget. Absent in older logs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub refusal: Option<Box<LocalRefusal>>,
}

/// Where a failure came from when no provider produced it (CC-BUD-6).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum FailureOrigin {
    /// The local budget check at ready, before dispatch.
    Preflight,
}

/// Which limit a locally refused request is over (CC-BUD-3).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum RefusalBudgetKind {
    /// The physical context window only.
    Physical,
    /// The policy capacity or the billing ceiling only.
    Policy,
    /// Both.
    Both,
}

/// What a local refusal adds to its failure (CC-BUD-6: `origin`, `budget`,
/// `budgetKind`), so a user or a script can tell which limit was hit and that the
/// provider was never called.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct LocalRefusal {
    /// Where the refusal happened.
    pub origin: FailureOrigin,
    /// The budget the request was checked against, as the refusing gate resolved it
    /// (context-care's `capacity`, `hardInput`, … in camelCase); shown, never read by
    /// key here.
    pub budget: crate::JsonObject,
    /// Which limit the request is over, when the gate knows.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub budget_kind: Option<RefusalBudgetKind>,
}

impl LlmFailure {
    /// A failure with a code and message and no provider details yet.
    pub fn new(code: FailureCode, message: impl Into<String>) -> Self {
        Self {
            code,
            message: message.into(),
            status: None,
            retry_after_ms: None,
            provider: String::new(),
            model: String::new(),
            offload_images: None,
            refusal: None,
        }
    }

    /// The same failure, marked as refused locally before dispatch (CC-BUD-6).
    pub fn with_refusal(mut self, refusal: LocalRefusal) -> Self {
        self.refusal = Some(Box::new(refusal));
        self
    }

    /// The same failure, naming the route it happened on.
    pub fn on_route(mut self, provider: &str, model: &str) -> Self {
        provider.clone_into(&mut self.provider);
        model.clone_into(&mut self.model);
        self
    }

    /// The same failure, with the HTTP status it came with.
    pub fn with_status(mut self, status: u16) -> Self {
        self.status = Some(status);
        self
    }
}

impl fmt::Display for LlmFailure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.code, self.message)?;
        if let Some(status) = self.status {
            write!(f, " (HTTP {status})")?;
        }
        if !self.provider.is_empty() {
            write!(f, " [{}/{}]", self.provider, self.model)?;
        }
        Ok(())
    }
}

impl std::error::Error for LlmFailure {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn h_llm_5_codes_serialize_as_their_stable_names() {
        for code in FailureCode::ALL {
            let json = serde_json::to_string(&code).ok();
            assert_eq!(json, Some(format!("\"{}\"", code.as_str())));
        }
    }

    #[test]
    fn h_llm_6_only_transient_codes_retry() {
        let retryable: Vec<_> = FailureCode::ALL
            .into_iter()
            .filter(|code| code.is_retryable())
            .collect();
        assert_eq!(
            retryable,
            [
                FailureCode::RateLimited,
                FailureCode::ProviderUnavailable,
                FailureCode::Timeout
            ]
        );
    }
}
