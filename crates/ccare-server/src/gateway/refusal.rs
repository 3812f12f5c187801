//! Refusals in OpenAI's error shape (GW-6): `{error: {message, type, code}}`.
//!
//! A request that can never succeed as sent — a budget refusal, a bad transcript, an
//! unknown model — is 400-class with `x-should-retry: false`, so the SDKs do not
//! retry it. An upstream 429/5xx is passed through with its status and `retry-after`,
//! so they do.

use ccare_agent::routes::RouteReply;
use ccare_core::{FailureCode, LlmFailure};

use crate::gateway::wire::{ErrorDetail, ErrorReply};

/// The header that tells the OpenAI SDKs whether to retry.
pub const SHOULD_RETRY: &str = "x-should-retry";
/// OpenAI's code of a model no route serves.
pub const MODEL_NOT_FOUND: &str = "model_not_found";
/// Our code of a transcript the gateway cannot continue.
pub const BAD_TRANSCRIPT: &str = "BAD_TRANSCRIPT";
/// Our code of a request body that is not a chat-completions request.
pub const INVALID_REQUEST: &str = "INVALID_REQUEST";

/// The OpenAI error type of a status.
fn kind_of(status: u16) -> &'static str {
    match status {
        401 => "authentication_error",
        403 => "permission_error",
        404 => "not_found_error",
        409 => "conflict_error",
        429 => "rate_limit_error",
        400..=499 => "invalid_request_error",
        _ => "api_error",
    }
}

/// An error reply with `status` and `code`, without a retry hint.
pub fn error(status: u16, code: &str, message: impl Into<String>) -> RouteReply {
    RouteReply::json(
        status,
        &ErrorReply {
            error: ErrorDetail {
                message: message.into(),
                kind: kind_of(status).to_owned(),
                code: code.to_owned(),
            },
        },
    )
}

/// A 400-class refusal the SDKs must not retry.
pub fn refuse(status: u16, code: &str, message: impl Into<String>) -> RouteReply {
    error(status, code, message).with_header(SHOULD_RETRY, "false")
}

/// 404 `model_not_found`.
pub fn unknown_model(model: &str) -> RouteReply {
    refuse(
        404,
        MODEL_NOT_FOUND,
        format!(
            "The model `{model}` does not exist: no configured route serves it (GET /v1/models lists them)"
        ),
    )
}

/// 400 `BAD_TRANSCRIPT`.
pub fn bad_transcript(message: impl Into<String>) -> RouteReply {
    refuse(400, BAD_TRANSCRIPT, message)
}

/// An [`ccare_agent::routes::RouteReply::error`] from the kernel, the sessions API or
/// the server's request pipeline (`{error, message}`) in OpenAI's shape, status, code
/// and headers kept; a 4xx gets `x-should-retry: false`.
pub fn from_api(reply: RouteReply) -> RouteReply {
    #[derive(serde::Deserialize)]
    struct Plain {
        error: String,
        #[serde(default)]
        message: Option<String>,
    }
    let status = reply.status;
    let plain = match &reply.body {
        ccare_agent::routes::ReplyBody::Json(bytes) => serde_json::from_slice::<Plain>(bytes).ok(),
        _ => None,
    };
    let Some(plain) = plain else {
        return reply;
    };
    let message = plain.message.unwrap_or_else(|| plain.error.clone());
    let mut shaped = if (400..500).contains(&status) {
        refuse(status, &plain.error, message)
    } else {
        error(status, &plain.error, message)
    };
    // Its headers (`Allow`, `WWW-Authenticate`, ...) stay.
    shaped.headers.extend(reply.headers);
    shaped
}

/// The reply to a turn that failed on a provider call or a request gate: a local
/// refusal (a budget) is 400 and not retried, and so is a request refused as invalid
/// before it left (an output limit that leaves the window no room for input); an
/// upstream status is passed through (429/5xx with `retry-after`, so the SDKs
/// retry); the rest is 502.
pub fn llm_failure(failure: &LlmFailure) -> RouteReply {
    let code = failure.code.as_str();
    let invalid_here = failure.status.is_none() && failure.code == FailureCode::InvalidRequest;
    if failure.refusal.is_some() || code == "REQUEST_BUDGET_EXCEEDED" || invalid_here {
        return refuse(400, code, failure.message.clone());
    }
    match failure.status {
        Some(status) if (400..600).contains(&status) => {
            let reply = error(status, code, failure.message.clone());
            match (status, failure.retry_after_ms) {
                (429 | 500..=599, Some(ms)) => {
                    reply.with_header("retry-after", ms.div_ceil(1000).to_string())
                }
                (429 | 500..=599, None) => reply,
                _ => reply.with_header(SHOULD_RETRY, "false"),
            }
        }
        _ => error(502, code, failure.message.clone()),
    }
}
