//! Normalising provider errors to stable codes (spec H-LLM-5).

use std::time::SystemTime;

use ccare_core::{FailureCode, LlmFailure};
use serde_json::Value;

/// Wordings providers use for "the request does not fit the context window". Matched
/// case-insensitively against the error message, type and code (the servers each
/// pattern comes from are in `errors/vectors.rs`).
const OVERFLOW_PATTERNS: &[&str] = &[
    "context_length_exceeded",
    "maximum context length",
    "context length",
    "context window",
    "context_window",
    "context size",
    "context limit",
    "prompt is too long",
    "input is too long",
    "too many tokens",
    "exceeds the maximum number of tokens",
    "reduce the length of the messages",
    "token limit",
    "上下文长度",
];

/// Error `type`s and `code`s that mean the request does not fit the context window,
/// whatever the message says (compared case-insensitively, whole value).
const OVERFLOW_KINDS: &[&str] = &[
    // OpenAI, Groq, Azure OpenAI.
    "context_length_exceeded",
    // llama.cpp server.
    "exceed_context_size_error",
];

/// Error `type`s, `code`s and Google `status` values that mean "slow down".
const RATE_LIMIT_KINDS: &[&str] = &[
    "rate_limit_exceeded",
    "rate_limit_error",
    "resource_exhausted",
];

/// Error `type`s, `code`s, Google `status` values and Google `reason`s that mean the
/// key was missing or refused (Gemini answers a bad key with HTTP 400).
const AUTH_KINDS: &[&str] = &[
    "invalid_api_key",
    "authentication_error",
    "permission_error",
    "unauthenticated",
    "permission_denied",
    "api_key_invalid",
];

/// The longest provider message kept in a failure.
const MAX_MESSAGE_CHARS: usize = 2000;

/// A failure from an HTTP error response, classified by status, error type and code,
/// and the message's wording (H-LLM-5). An overflow signal wins over every status but
/// 401/403, so a server that reports an overflow as 413, 429 or 5xx still starts
/// overflow recovery. A 413 is never a rate limit, whatever its code says: the same
/// payload sent again is refused again (Groq's per-minute cap below the request's size).
pub(crate) fn from_http(status: u16, retry_after_ms: Option<u64>, body: &str) -> LlmFailure {
    let fields = ErrorFields::parse(body);
    let failure_code = if matches!(status, 401 | 403) {
        FailureCode::AuthFailed
    } else if fields.is_overflow() {
        FailureCode::ContextWindowExceeded
    } else if status == 429 || (status != 413 && fields.has_kind(RATE_LIMIT_KINDS)) {
        FailureCode::RateLimited
    } else if fields.has_kind(AUTH_KINDS) {
        FailureCode::AuthFailed
    } else if (500..=599).contains(&status) {
        FailureCode::ProviderUnavailable
    } else {
        FailureCode::InvalidRequest
    };
    let text = if fields.message.is_empty() {
        format!("HTTP {status}")
    } else {
        fields.message
    };
    let mut failure = LlmFailure::new(failure_code, truncate(text)).with_status(status);
    failure.retry_after_ms = retry_after_ms;
    failure
}

/// A failure from an `{"error": ...}` object sent inside a stream: classified by type,
/// code and wording; anything unrecognised is the provider failing on its side.
pub(crate) fn from_stream_error(error: &Value) -> LlmFailure {
    let body =
        Value::Object([("error".to_owned(), error.clone())].into_iter().collect()).to_string();
    let fields = ErrorFields::parse(&body);
    let haystack = fields.haystack();
    let failure_code = if fields.is_overflow() {
        FailureCode::ContextWindowExceeded
    } else if fields.has_kind(RATE_LIMIT_KINDS)
        || (haystack.contains("rate") && haystack.contains("limit"))
    {
        FailureCode::RateLimited
    } else if fields.has_kind(AUTH_KINDS) {
        FailureCode::AuthFailed
    } else {
        FailureCode::ProviderUnavailable
    };
    let message = if fields.message.is_empty() {
        body
    } else {
        fields.message
    };
    LlmFailure::new(failure_code, truncate(message))
}

/// What an error body says, from the usual shapes: `{"error":{"message","type","code"}}`
/// (OpenAI and most servers), `{"object":"error","message",...}` (vLLM, Mistral),
/// `{"type":"error","error":{...}}` (Anthropic), `[{"error":{"message","status",
/// "details"}}]` (Google), `{"error":"text"}` (Ollama, LM Studio), or plain text.
#[derive(Debug, Default)]
struct ErrorFields {
    message: String,
    /// `type`, `code`, Google's `status` and each `details[].reason`, as written.
    kinds: Vec<String>,
}

impl ErrorFields {
    fn parse(body: &str) -> Self {
        let Ok(value) = serde_json::from_str::<Value>(body) else {
            return Self {
                message: body.trim().to_owned(),
                kinds: Vec::new(),
            };
        };
        // Google wraps its error object in a one-element array.
        let value = match &value {
            Value::Array(items) => items.first().unwrap_or(&Value::Null),
            other => other,
        };
        let error = value.get("error").unwrap_or(value);
        if let Value::String(message) = error {
            return Self {
                message: message.clone(),
                kinds: Vec::new(),
            };
        }
        let scalar = |value: Option<&Value>| match value {
            Some(Value::String(text)) => Some(text.clone()),
            Some(Value::Number(number)) => Some(number.to_string()),
            _ => None,
        };
        let message = match error.get("message") {
            Some(Value::String(text)) => text.clone(),
            Some(Value::Null) | None => String::new(),
            // Mistral's validation errors carry an object here.
            Some(other) => other.to_string(),
        };
        let mut kinds: Vec<String> = ["type", "code", "status"]
            .iter()
            .filter_map(|key| scalar(error.get(*key)))
            .collect();
        if let Some(Value::Array(details)) = error.get("details") {
            kinds.extend(
                details
                    .iter()
                    .filter_map(|detail| scalar(detail.get("reason"))),
            );
        }
        Self { message, kinds }
    }

    fn has_kind(&self, known: &[&str]) -> bool {
        self.kinds
            .iter()
            .any(|kind| known.iter().any(|known| kind.eq_ignore_ascii_case(known)))
    }

    fn haystack(&self) -> String {
        let mut haystack = self.message.to_lowercase();
        for kind in &self.kinds {
            haystack.push(' ');
            haystack.push_str(&kind.to_lowercase());
        }
        haystack
    }

    fn is_overflow(&self) -> bool {
        let haystack = self.haystack();
        self.has_kind(OVERFLOW_KINDS)
            || OVERFLOW_PATTERNS
                .iter()
                .any(|pattern| haystack.contains(pattern))
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
mod vectors;

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
