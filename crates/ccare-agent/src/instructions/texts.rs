//! The model-visible text of the base prompt (`instructions:base`), English and
//! Chinese side by side. Ours, short, and a pure function of the locale and the tool
//! names, so the section is byte-identical on every request (prompt caching).

use ccare_core::Locale;

/// The base-prompt catalog of one locale.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct BaseTexts {
    /// Who the agent is and what it answers.
    pub(crate) role: &'static str,
    /// Before the tool list; the names follow, joined by [`BaseTexts::tool_separator`]
    /// and ended by [`BaseTexts::full_stop`].
    pub(crate) tools_intro: &'static str,
    /// Between two tool names.
    pub(crate) tool_separator: &'static str,
    /// After the last tool name.
    pub(crate) full_stop: &'static str,
    /// The tool line when the host has no tools.
    pub(crate) no_tools: &'static str,
}

/// English.
pub(crate) const EN: BaseTexts = BaseTexts {
    role: "You are an agent working with the user in this session. Answer the user's latest \
           request; use your tools when they help, and say plainly what you did.",
    tools_intro: "Your tools: ",
    tool_separator: ", ",
    full_stop: ".",
    no_tools: "You have no tools in this session.",
};

/// Simplified Chinese.
pub(crate) const ZH: BaseTexts = BaseTexts {
    role: "你是在本会话中与用户一起工作的智能体。回答用户最新的请求；需要时使用你的工具，并如实说明你做了什么。",
    tools_intro: "你的工具：",
    tool_separator: "、",
    full_stop: "。",
    no_tools: "本次会话中你没有可用的工具。",
};

/// The catalog of `locale`.
pub(crate) fn base_texts(locale: Locale) -> &'static BaseTexts {
    match locale {
        Locale::En => &EN,
        Locale::Zh => &ZH,
    }
}

/// The base prompt: the role line, then the tool line naming `tools` in the order
/// given. With no host tools but tools the caller declared for the turn
/// (`caller_tools`), there is no tool line: "no tools" would be false, and the
/// request's tools describe the caller's.
pub(crate) fn render_base(locale: Locale, tools: &[String], caller_tools: bool) -> String {
    let texts = base_texts(locale);
    let tool_line = if tools.is_empty() && caller_tools {
        return texts.role.to_owned();
    } else if tools.is_empty() {
        texts.no_tools.to_owned()
    } else {
        format!(
            "{}{}{}",
            texts.tools_intro,
            tools.join(texts.tool_separator),
            texts.full_stop
        )
    };
    format!("{}\n{tool_line}", texts.role)
}
