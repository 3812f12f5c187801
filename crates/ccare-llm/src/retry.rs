//! When to retry a failed attempt and how long to wait (spec H-LLM-6).

use ccare_core::LlmFailure;
use serde::{Deserialize, Serialize};

/// Retry rules for transient failures.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct RetryPolicy {
    /// Attempts per call, including the first.
    pub max_attempts: u32,
    /// The first backoff delay.
    pub base_delay_ms: u64,
    /// The longest delay; a provider asking for more is not retried.
    pub max_delay_ms: u64,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        Self {
            max_attempts: 3,
            base_delay_ms: 500,
            max_delay_ms: 30_000,
        }
    }
}

impl RetryPolicy {
    /// How long to wait before attempt `failed_attempt + 1`, or `None` when the failure
    /// is not retried: not transient, attempts used up, or the provider asks for a
    /// longer wait than `max_delay_ms`. `jitter` is a number in `[0, 1)`.
    ///
    /// The delay is exponential from `base_delay_ms` with up to 25% jitter on top, and
    /// never shorter than the provider's `Retry-After`.
    pub fn delay_for(&self, failed_attempt: u32, failure: &LlmFailure, jitter: f64) -> Option<u64> {
        if !failure.code.is_retryable() || failed_attempt >= self.max_attempts {
            return None;
        }
        let exponent = failed_attempt.saturating_sub(1).min(20);
        let backoff = self
            .base_delay_ms
            .saturating_mul(1u64 << exponent)
            .min(self.max_delay_ms);
        let jitter = jitter.clamp(0.0, 1.0);
        // The product is at most a quarter of max_delay_ms, well inside u64 and f64's exact range.
        #[allow(
            clippy::cast_possible_truncation,
            clippy::cast_sign_loss,
            clippy::cast_precision_loss
        )]
        let with_jitter = backoff.saturating_add((backoff as f64 * 0.25 * jitter) as u64);
        match failure.retry_after_ms {
            Some(asked) if asked > self.max_delay_ms => None,
            Some(asked) => Some(asked.max(with_jitter.min(self.max_delay_ms))),
            None => Some(with_jitter.min(self.max_delay_ms)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ccare_core::FailureCode;

    fn failure(code: FailureCode, retry_after_ms: Option<u64>) -> LlmFailure {
        let mut failure = LlmFailure::new(code, "x");
        failure.retry_after_ms = retry_after_ms;
        failure
    }

    #[test]
    fn h_llm_6_backoff_grows_from_500_ms_and_stops_after_three_attempts() {
        let policy = RetryPolicy::default();
        let busy = failure(FailureCode::ProviderUnavailable, None);
        assert_eq!(policy.delay_for(1, &busy, 0.0), Some(500));
        assert_eq!(policy.delay_for(2, &busy, 0.0), Some(1000));
        assert_eq!(
            policy.delay_for(2, &busy, 0.999).map(|ms| ms < 1250),
            Some(true)
        );
        assert_eq!(policy.delay_for(3, &busy, 0.0), None);
    }

    #[test]
    fn h_llm_6_retry_after_is_honoured_and_too_long_waits_are_not_retried() {
        let policy = RetryPolicy::default();
        assert_eq!(
            policy.delay_for(1, &failure(FailureCode::RateLimited, Some(1000)), 0.0),
            Some(1000)
        );
        assert_eq!(
            policy.delay_for(1, &failure(FailureCode::RateLimited, Some(60_000)), 0.0),
            None
        );
    }

    #[test]
    fn h_llm_6_permanent_failures_are_not_retried() {
        let policy = RetryPolicy::default();
        for code in [
            FailureCode::ContextWindowExceeded,
            FailureCode::AuthFailed,
            FailureCode::InvalidRequest,
            FailureCode::StreamProtocol,
        ] {
            assert_eq!(policy.delay_for(1, &failure(code, None), 0.0), None);
        }
    }
}
