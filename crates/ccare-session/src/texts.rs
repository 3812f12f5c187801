//! The only home of model-visible text written by the session engine, in every locale.

use ccare_core::Locale;

/// The result text of a call that never started before a crash (`TOOL_NOT_STARTED`).
pub(crate) fn tool_not_started(locale: Locale, tool: &str) -> String {
    match locale {
        Locale::En => format!(
            "The call to {tool} never ran: the session stopped before it was dispatched. Nothing it would have done has happened."
        ),
        Locale::Zh => format!(
            "对 {tool} 的调用没有执行：会话在派发之前就中断了。它本应产生的效果都没有发生。"
        ),
    }
}

/// The result text of a call whose outcome is unknown after a crash (`TOOL_OUTCOME_UNKNOWN`).
pub(crate) fn tool_outcome_unknown(locale: Locale, tool: &str) -> String {
    match locale {
        Locale::En => format!(
            "The call to {tool} was started, but the session stopped before its result was recorded, so its outcome is unknown. Check its effects before running it again."
        ),
        Locale::Zh => format!(
            "对 {tool} 的调用已经开始，但会话在记录结果之前中断，结果未知。再次执行之前，请先检查它是否已产生效果。"
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn repair_texts_exist_in_every_locale() {
        assert_eq!(
            tool_not_started(Locale::En, "write_file"),
            "The call to write_file never ran: the session stopped before it was dispatched. Nothing it would have done has happened."
        );
        assert_eq!(
            tool_outcome_unknown(Locale::Zh, "write_file"),
            "对 write_file 的调用已经开始，但会话在记录结果之前中断，结果未知。再次执行之前，请先检查它是否已产生效果。"
        );
    }
}
