//! Human formatting helpers.

/// Formats epoch milliseconds as an RFC 3339 UTC timestamp with milliseconds.
pub(crate) fn rfc3339_utc(epoch_ms: i64) -> String {
    let seconds = epoch_ms.div_euclid(1000);
    let millis = epoch_ms.rem_euclid(1000);
    let days = seconds.div_euclid(86_400);
    let second_of_day = seconds.rem_euclid(86_400);
    let (year, month, day) = civil_from_days(days);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}.{millis:03}Z",
        second_of_day / 3600,
        (second_of_day % 3600) / 60,
        second_of_day % 60
    )
}

/// Days since 1970-01-01 to a proleptic Gregorian date (Howard Hinnant's algorithm).
fn civil_from_days(days: i64) -> (i64, i64, i64) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let day_of_era = z.rem_euclid(146_097);
    let year_of_era =
        (day_of_era - day_of_era / 1460 + day_of_era / 36_524 - day_of_era / 146_096) / 365;
    let day_of_year = day_of_era - (365 * year_of_era + year_of_era / 4 - year_of_era / 100);
    let shifted_month = (5 * day_of_year + 2) / 153;
    let day = day_of_year - (153 * shifted_month + 2) / 5 + 1;
    let month = if shifted_month < 10 {
        shifted_month + 3
    } else {
        shifted_month - 9
    };
    let year = year_of_era + era * 400 + i64::from(month <= 2);
    (year, month, day)
}

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
    fn formats_utc_timestamps() {
        assert_eq!(rfc3339_utc(0), "1970-01-01T00:00:00.000Z");
        assert_eq!(rfc3339_utc(1_798_761_600_123), "2027-01-01T00:00:00.123Z");
        assert_eq!(rfc3339_utc(951_782_400_000), "2000-02-29T00:00:00.000Z");
        assert_eq!(rfc3339_utc(-1), "1969-12-31T23:59:59.999Z");
    }

    #[test]
    fn excerpts_cut_long_text() {
        assert_eq!(excerpt("hello", 10), "hello");
        assert_eq!(excerpt("hello world", 5), "hello…");
        assert_eq!(excerpt("a\nb", 5), "a…");
    }
}
