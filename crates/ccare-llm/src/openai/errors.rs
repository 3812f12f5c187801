//! Normalising provider errors to stable codes (spec H-LLM-5).

use std::time::SystemTime;

use ccare_core::{FailureCode, LlmFailure};
use serde_json::Value;

/// Wordings providers use for "the request does not fit the context window". Matched
/// case-insensitively against the error message, type and code.
const OVERFLOW_PATTERNS: &[&str] = &[
    "context_length_exceeded",
    "maximum context length",
    "context length",
    "context window",
    "context_window",
    "prompt is too long",
    "input is too long",
    "too many tokens",
    "exceeds the maximum number of tokens",
    "reduce the length of the messages",
    "token limit",
    "上下文长度",
];

/// The longest provider message kept in a failure.
const MAX_MESSAGE_CHARS: usize = 2000;

/// A failure from an HTTP error response.
pub(crate) fn from_http(status: u16, retry_after_ms: Option<u64>, body: &str) -> LlmFailure {
    let (message, kind, code) = error_fields(body);
    let haystack = format!("{message} {kind} {code}").to_lowercase();
    let overflow = OVERFLOW_PATTERNS
        .iter()
        .any(|pattern| haystack.contains(pattern));
    let failure_code = match status {
        429 if !overflow => FailureCode::RateLimited,
        401 | 403 => FailureCode::AuthFailed,
        400..=499 if overflow => FailureCode::ContextWindowExceeded,
        500..=599 if overflow => FailureCode::ContextWindowExceeded,
        500..=599 => FailureCode::ProviderUnavailable,
        _ => FailureCode::InvalidRequest,
    };
    let text = if message.is_empty() {
        format!("HTTP {status}")
    } else {
        message
    };
    let mut failure = LlmFailure::new(failure_code, truncate(text)).with_status(status);
    failure.retry_after_ms = retry_after_ms;
    failure
}

/// A failure from an `{"error": ...}` object sent inside a stream.
pub(crate) fn from_stream_error(error: &Value) -> LlmFailure {
    let body =
        Value::Object([("error".to_owned(), error.clone())].into_iter().collect()).to_string();
    let (message, kind, code) = error_fields(&body);
    let haystack = format!("{message} {kind} {code}").to_lowercase();
    let failure_code = if OVERFLOW_PATTERNS.iter().any(|p| haystack.contains(p)) {
        FailureCode::ContextWindowExceeded
    } else if haystack.contains("rate") && haystack.contains("limit") {
        FailureCode::RateLimited
    } else {
        FailureCode::ProviderUnavailable
    };
    LlmFailure::new(
        failure_code,
        truncate(if message.is_empty() { body } else { message }),
    )
}

/// `(message, type, code)` from the usual error shapes: `{"error":{"message","type",
/// "code"}}`, `{"error":"text"}`, `{"message":...}`, or plain text.
fn error_fields(body: &str) -> (String, String, String) {
    let Ok(value) = serde_json::from_str::<Value>(body) else {
        return (body.trim().to_owned(), String::new(), String::new());
    };
    let error = value.get("error").unwrap_or(&value);
    let text = |key: &str| match error.get(key) {
        Some(Value::String(text)) => text.clone(),
        Some(Value::Number(number)) => number.to_string(),
        _ => String::new(),
    };
    match error {
        Value::String(message) => (message.clone(), String::new(), String::new()),
        _ => (text("message"), text("type"), text("code")),
    }
}

fn truncate(mut text: String) -> String {
    if let Some((cut, _)) = text.char_indices().nth(MAX_MESSAGE_CHARS) {
        text.truncate(cut);
        text.push('…');
    }
    text
}

/// `Retry-After` (seconds or an HTTP date) or `retry-after-ms`, in milliseconds.
pub(crate) fn retry_after_ms(headers: &reqwest::header::HeaderMap) -> Option<u64> {
    if let Some(ms) = headers
        .get("retry-after-ms")
        .and_then(|value| value.to_str().ok())
        .and_then(|text| text.trim().parse::<f64>().ok())
        .filter(|ms| ms.is_finite() && *ms >= 0.0)
    {
        return Some(millis(ms));
    }
    let text = headers.get("retry-after")?.to_str().ok()?.trim();
    if let Ok(seconds) = text.parse::<f64>() {
        return (seconds.is_finite() && seconds >= 0.0).then(|| millis(seconds * 1000.0));
    }
    let at = httpdate::parse_http_date(text).ok()?;
    let wait = at.duration_since(SystemTime::now()).unwrap_or_default();
    Some(u64::try_from(wait.as_millis()).unwrap_or(u64::MAX))
}

#[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
fn millis(ms: f64) -> u64 {
    // Finite and non-negative by the callers' filters; `as` saturates above u64::MAX.
    ms.ceil() as u64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn h_llm_5_overflow_wordings_map_to_context_window_exceeded() {
        let bodies = [
            r#"{"error":{"message":"This model's maximum context length is 8192 tokens. However, your messages resulted in 9000 tokens.","type":"invalid_request_error","param":"messages","code":"context_length_exceeded"}}"#,
            r#"{"error":{"message":"This model's maximum context length is 131072 tokens. However, you requested 140000 tokens (139000 in the messages, 1000 in the completion). Please reduce the length of the messages or completion.","type":"invalid_request_error","param":null,"code":"invalid_request_error"}}"#,
            r#"{"error":{"message":"prompt is too long: 210000 tokens > 200000 maximum"}}"#,
            r#"{"error":"input exceeds the context window of this model"}"#,
            "the request exceeds the available context length",
        ];
        for body in bodies {
            assert_eq!(
                from_http(400, None, body).code,
                FailureCode::ContextWindowExceeded,
                "{body}"
            );
        }
        assert_eq!(
            from_http(413, None, bodies[0]).code,
            FailureCode::ContextWindowExceeded
        );
    }

    #[test]
    fn h_llm_5_status_mapping() {
        assert_eq!(
            from_http(429, Some(1000), "slow down").code,
            FailureCode::RateLimited
        );
        assert_eq!(
            from_http(429, Some(1000), "slow down").retry_after_ms,
            Some(1000)
        );
        assert_eq!(from_http(401, None, "{}").code, FailureCode::AuthFailed);
        assert_eq!(from_http(403, None, "{}").code, FailureCode::AuthFailed);
        assert_eq!(
            from_http(503, None, "busy").code,
            FailureCode::ProviderUnavailable
        );
        assert_eq!(
            from_http(422, None, r#"{"error":{"message":"bad tools"}}"#).code,
            FailureCode::InvalidRequest
        );
        let failure = from_http(422, None, r#"{"error":{"message":"bad tools"}}"#);
        assert_eq!(
            (failure.message.as_str(), failure.status),
            ("bad tools", Some(422))
        );
    }

    #[test]
    fn h_llm_6_retry_after_forms() {
        let mut headers = reqwest::header::HeaderMap::new();
        headers.insert(
            "retry-after",
            reqwest::header::HeaderValue::from_static("1"),
        );
        assert_eq!(retry_after_ms(&headers), Some(1000));
        headers.insert(
            "retry-after-ms",
            reqwest::header::HeaderValue::from_static("250.5"),
        );
        assert_eq!(retry_after_ms(&headers), Some(251));
        let mut dated = reqwest::header::HeaderMap::new();
        dated.insert(
            "retry-after",
            reqwest::header::HeaderValue::from_static("Wed, 21 Oct 2015 07:28:00 GMT"),
        );
        assert_eq!(retry_after_ms(&dated), Some(0));
        dated.insert(
            "retry-after",
            reqwest::header::HeaderValue::from_static("soon"),
        );
        assert_eq!(retry_after_ms(&dated), None);
    }
}
