//! The model-visible texts of context-care (CC-GEN-2): one catalog per locale, written
//! for this project, and [`render_status`], the status text of CC-NTC-3.
//!
//! Every text obeys the tone rules T1–T6 (CC-GEN-3): levels only, never a number; no
//! claim of forgetting, degraded ability or hallucination; no change of identity, goals
//! or judgment ownership; no urgency or alarm; the metrics are estimates of load and
//! retained text; ordering advice ("save, then rest") is allowed.

use ccare_core::Locale;

use crate::metrics::{ContextCareMetrics, FatigueLevel, WakefulnessLevel};

/// The status-text catalog of one locale.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StatusTexts {
    /// The fatigue label of the level line (`Fatigue`).
    pub fatigue_label: &'static str,
    /// The wakefulness label of the level line (`wakefulness`).
    pub wakefulness_label: &'static str,
    /// The separator after a label (`: ` or `：`).
    pub label_separator: &'static str,
    /// The separator between the two parts (`; ` or `；`).
    pub part_separator: &'static str,
    /// The full stop ending the level line (`.` or `。`).
    pub full_stop: &'static str,
    /// The grade shown for an unknown level (`unknown`).
    pub unknown: &'static str,
    /// Fatigue grades in level order: normal, elevated, high, very-high.
    pub fatigue_grades: [&'static str; 4],
    /// Wakefulness grades in level order: low, normal, elevated, high.
    pub wakefulness_grades: [&'static str; 4],
    /// The estimate line: from the latest request and the retained history, not a
    /// deadline.
    pub estimate: &'static str,
    /// The line when capacity is unknown: not calibrated, don't guess.
    pub uncalibrated: &'static str,
    /// Advice at fatigue normal (also used when unknown): 1 line.
    pub advice_normal: &'static [&'static str],
    /// Advice at fatigue elevated: 1 line.
    pub advice_elevated: &'static [&'static str],
    /// Advice at fatigue high: 2 lines.
    pub advice_high: &'static [&'static str],
    /// Advice at fatigue very-high: 3 lines.
    pub advice_very_high: &'static [&'static str],
    /// The `context_status` tool description (CC-TOOL-1).
    pub status_tool_description: &'static str,
}

/// The English catalog. Level ids and `unknown` are the grades, as CC-NTC-3 requires.
pub const EN: StatusTexts = StatusTexts {
    fatigue_label: "Fatigue",
    wakefulness_label: "wakefulness",
    label_separator: ": ",
    part_separator: "; ",
    full_stop: ".",
    unknown: "unknown",
    fatigue_grades: ["normal", "elevated", "high", "very-high"],
    wakefulness_grades: ["low", "normal", "elevated", "high"],
    estimate: "These levels are estimates of load from the latest request and of the \
               retained history; they are not a deadline.",
    uncalibrated: "The context capacity is not calibrated yet, so the levels are unknown; \
                   do not guess them from the length of the conversation.",
    advice_normal: &["Carry on with the task."],
    advice_elevated: &[
        "Load is rising. At a natural stopping point, save what matters to \
                        files; context_rest is available if it would help.",
    ],
    advice_high: &[
        "A high-load recommendation applies: first save the goal, verified results and \
         unfinished work, then tidy the context as the policy describes.",
        "A summary keeps the threads of the work, so context_rest with a detailed handoff \
         note is a good next step.",
    ],
    advice_very_high: &[
        "Budget pressure is very high. As the next step, save the goal, results, \
         unfinished work and key paths to files.",
        "Then, following the configured steps, take a deep rest with context_rest (the \
         handoff note and recovery path replace the history that can be cleared), check \
         the reported outcome, and continue.",
        "Only the text kept for requests changes: the originals stay checkable in the log \
         and checkpoints, and your identity, goals and ownership of judgment stay the same.",
    ],
    status_tool_description: "Reads the current context-state estimates: fatigue (load \
        of the next request) and wakefulness (retained history), as levels. They are \
        measured estimates, not a diagnosis of memory loss and not a deadline. Use them \
        to judge whether a checkpoint or context_rest would help; there is no need to \
        poll. Takes no arguments: call it with {}.",
};

/// The Chinese catalog.
pub const ZH: StatusTexts = StatusTexts {
    fatigue_label: "疲劳度",
    wakefulness_label: "唤醒值",
    label_separator: "：",
    part_separator: "；",
    full_stop: "。",
    unknown: "未知",
    fatigue_grades: ["正常", "偏高", "高", "很高"],
    wakefulness_grades: ["低", "正常", "偏高", "高"],
    estimate: "以上等级是依据最近一次请求和保留的历史得出的负载估计，不是截止期限。",
    uncalibrated: "上下文容量尚未校准，因此等级未知；请不要凭对话长度去推测。",
    advice_normal: &["照常继续当前任务。"],
    advice_elevated: &[
        "负载在上升。可在自然的段落处把重要内容保存到文件；如有帮助，也可以使用 context_rest。",
    ],
    advice_high: &[
        "已适用高负载建议：先保存目标、已验证的结果和未完成的工作，再按策略整理上下文。",
        "摘要会保留工作的脉络，因此下一步适合调用 context_rest 并附上详细的交接笔记。",
    ],
    advice_very_high: &[
        "预算压力很高。下一步请把目标、结果、未完成的工作和关键路径保存到文件。",
        "然后按配置的步骤用 context_rest 进行深度休息（交接笔记和找回路径会替换可清除的历史），查看报告的结果，再继续工作。",
        "变化的只是请求中保留的文本：原始内容仍可在日志和检查点中查到，你的身份、目标和判断归属都不变。",
    ],
    status_tool_description: "读取当前上下文状态的估计等级：疲劳度（下一次请求的负载）和唤醒值（保留的历史）。\
        这是测得的估计，不是记忆丧失的诊断，也不是截止期限。可据此判断检查点或 context_rest 是否有帮助；\
        无需反复查询。没有参数：以 {} 调用。",
};

/// The catalog of a locale.
pub fn status_texts(locale: Locale) -> &'static StatusTexts {
    match locale {
        Locale::En => &EN,
        Locale::Zh => &ZH,
    }
}

/// Which optional parts of the status text to include (CC-NTC-3).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct StatusParts<'a> {
    /// The level line, the estimate line and, when unknown, the uncalibrated line.
    pub report: bool,
    /// The advice lines of the fatigue level (normal when unknown).
    pub advice: bool,
    /// The outcome line of a rest (CC-BND-2), already rendered.
    pub outcome: Option<&'a str>,
}

/// The status text (CC-NTC-3): `<context-care>`, then the level line, estimate and
/// uncalibrated lines (report), the outcome line, the advice lines, then
/// `</context-care>`, joined by `\n`. Empty when nothing goes between the tags. No
/// number ever appears in it (T1).
pub fn render_status(
    locale: Locale,
    metrics: &ContextCareMetrics,
    parts: StatusParts<'_>,
) -> String {
    let texts = status_texts(locale);
    let mut body: Vec<String> = Vec::new();
    if parts.report {
        body.push(level_line(texts, metrics));
        body.push(texts.estimate.to_owned());
        if metrics.fatigue == FatigueLevel::Unknown
            || metrics.wakefulness == WakefulnessLevel::Unknown
        {
            body.push(texts.uncalibrated.to_owned());
        }
    }
    if let Some(outcome) = parts.outcome {
        body.push(outcome.to_owned());
    }
    if parts.advice {
        body.extend(
            advice(texts, metrics.fatigue)
                .iter()
                .map(|line| (*line).to_owned()),
        );
    }
    if body.is_empty() {
        return String::new();
    }
    let mut lines = Vec::with_capacity(body.len() + 2);
    lines.push("<context-care>".to_owned());
    lines.extend(body);
    lines.push("</context-care>".to_owned());
    lines.join("\n")
}

/// The advice lines of a fatigue level (CC-NTC-4); unknown uses normal.
pub fn advice(texts: &StatusTexts, fatigue: FatigueLevel) -> &'static [&'static str] {
    match fatigue {
        FatigueLevel::Unknown | FatigueLevel::Normal => texts.advice_normal,
        FatigueLevel::Elevated => texts.advice_elevated,
        FatigueLevel::High => texts.advice_high,
        FatigueLevel::VeryHigh => texts.advice_very_high,
    }
}

fn level_line(texts: &StatusTexts, metrics: &ContextCareMetrics) -> String {
    let fatigue = grade(texts, metrics.fatigue.index(), &texts.fatigue_grades);
    let wakefulness = grade(
        texts,
        metrics.wakefulness.index(),
        &texts.wakefulness_grades,
    );
    format!(
        "{}{}{fatigue}{}{}{}{wakefulness}{}",
        texts.fatigue_label,
        texts.label_separator,
        texts.part_separator,
        texts.wakefulness_label,
        texts.label_separator,
        texts.full_stop,
    )
}

fn grade(texts: &StatusTexts, index: Option<u8>, grades: &[&'static str; 4]) -> &'static str {
    index
        .and_then(|index| grades.get(usize::from(index)).copied())
        .unwrap_or(texts.unknown)
}
