//! Human formatting helpers.

/// Formats epoch milliseconds as an RFC 3339 UTC timestamp with milliseconds (the
/// shared formatter in `ccare-core`, so the CLI and the HTTP API print the same text).
pub(crate) use ccare_core::rfc3339_utc;

/// The first line of `text`, cut to `max_chars` with an ellipsis.
pub(crate) fn excerpt(text: &str, max_chars: usize) -> String {
    let line = text.lines().next().unwrap_or("");
    let mut out: String = line.chars().take(max_chars).collect();
    if line.chars().count() > max_chars || text.lines().nth(1).is_some() {
        out.push('…');
    }
    out
}

/// How a turn ended, in the words the notes and `/status` use; a plugin's stop names
/// the plugin ("stopped by stream-watch: output loop: …").
pub(crate) fn reason_text(reason: &ccare_core::kinds::TurnEndReason) -> String {
    use ccare_core::kinds::{CancelCause, TurnEndReason, TurnFailure};
    match reason {
        TurnEndReason::Completed => "completed".to_owned(),
        TurnEndReason::MaxTokens => "max-tokens: the answer was cut at the output limit".to_owned(),
        TurnEndReason::Aborted { cause } => match cause {
            CancelCause::Hook { plugin, reason } => format!("stopped by {plugin}: {reason}"),
            CancelCause::User => "aborted: user".to_owned(),
            CancelCause::Shutdown => "aborted: shutdown".to_owned(),
            CancelCause::Timeout => "aborted: timeout".to_owned(),
        },
        TurnEndReason::Error { failure } => match failure {
            TurnFailure::Llm(llm) => format!("error {}", failure_text(llm)),
            TurnFailure::Host(host) => format!("error {host}"),
        },
        TurnEndReason::Blocked { by, detail, .. } => format!("blocked by {by}: {detail}"),
        TurnEndReason::Interrupted => "interrupted".to_owned(),
    }
}

/// A provider failure as the user reads it: its code, message and route, then, for a
/// request a gate refused locally (CC-BUD-6), where it was refused, which limit it is
/// over and the budget it was checked against.
pub(crate) fn failure_text(failure: &ccare_llm::LlmFailure) -> String {
    let mut text = failure.to_string();
    if let Some(refusal) = &failure.refusal {
        let origin = match refusal.origin {
            ccare_core::FailureOrigin::Preflight => "preflight",
        };
        text.push_str(&format!(
            "; refused before dispatch (origin: {origin}; the provider was never called)"
        ));
        if let Some(kind) = refusal.budget_kind {
            let kind = match kind {
                ccare_core::RefusalBudgetKind::Physical => "physical",
                ccare_core::RefusalBudgetKind::Policy => "policy",
                ccare_core::RefusalBudgetKind::Both => "both",
            };
            text.push_str(&format!("; budget kind: {kind}"));
        }
        text.push_str(&format!(
            "; budget: {}",
            serde_json::Value::Object(refusal.budget.clone())
        ));
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn excerpts_cut_long_text() {
        assert_eq!(excerpt("hello", 10), "hello");
        assert_eq!(excerpt("hello world", 5), "hello…");
        assert_eq!(excerpt("a\nb", 5), "a…");
    }
}
