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
    /// `context_status` called with arguments; `{got}` is [`StatusTexts::error_got_keys`]
    /// or one of [`StatusTexts::kind_names`].
    pub error_arguments: &'static str,
    /// What was passed, when it was an object with keys; `{keys}` lists them.
    pub error_got_keys: &'static str,
    /// What was passed, when it was not an object: null, a boolean, a number, a string,
    /// an array.
    pub kind_names: [&'static str; 5],
    /// `context_status` was cancelled before it ran.
    pub error_cancelled: &'static str,
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
    error_arguments: "context_status takes no arguments; call it with {} (got {got}).",
    error_got_keys: "key(s): {keys}",
    kind_names: ["null", "a boolean", "a number", "a string", "an array"],
    error_cancelled: "context_status was cancelled before it ran.",
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
    error_arguments: "context_status 不接受参数；请以 {} 调用（收到{got}）。",
    error_got_keys: "键：{keys}",
    kind_names: ["空值", "布尔值", "数字", "字符串", "数组"],
    error_cancelled: "context_status 在运行前被取消。",
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
    /// The state is unknown (R8: a requested rest ended in an error): the level line
    /// reads `unknown` for both metrics whatever was measured, and neither the estimate
    /// nor the calibration line is shown (the outcome line says why).
    pub state_unknown: bool,
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
    let metrics = if parts.state_unknown {
        &ContextCareMetrics::UNKNOWN
    } else {
        metrics
    };
    let mut body: Vec<String> = Vec::new();
    if parts.report && parts.state_unknown {
        body.push(level_line(texts, metrics));
    } else if parts.report {
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

/// The texts of `context_rest` (CC-TOOL-2 .. CC-TOOL-4) and of the rest outcome lines
/// (CC-BND-2) in one locale. `{min}`, `{max}`, `{n}` and `{passes}` are filled in by
/// [`fill`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RestTexts {
    /// The tool description.
    pub tool_description: &'static str,
    /// The `note` property's description.
    pub note_description: &'static str,
    /// The `deep` property's description.
    pub deep_description: &'static str,
    /// The `recovery` property's description.
    pub recovery_description: &'static str,
    /// A key other than note, deep and recovery.
    pub error_unknown_key: &'static str,
    /// The argument is not an object.
    pub error_not_object: &'static str,
    /// The note's length is outside the range.
    pub error_note_length: &'static str,
    /// The recovery is not a string or its length is outside the range.
    pub error_recovery_length: &'static str,
    /// `deep:true` with a blank recovery.
    pub error_deep_needs_recovery: &'static str,
    /// A rest is already queued for the next boundary.
    pub error_already_scheduled: &'static str,
    /// The call runs outside an agent, so nothing can be queued.
    pub error_no_session: &'static str,
    /// The turn was cancelled.
    pub error_cancelled: &'static str,
    /// The header before the note in the queued message.
    pub note_header: &'static str,
    /// The header before the recovery path in the queued message.
    pub recovery_header: &'static str,
    /// The tool result: scheduled, not done yet, the next state reports it.
    pub scheduled: &'static str,
    /// Added to the result of a summary rest (not deep).
    pub scheduled_then_continue: &'static str,
    /// R1: already reduced at this boundary.
    pub outcome_already_reduced: &'static str,
    /// R2: deep rest, nothing clearable beyond the system head.
    pub outcome_deep_nothing_to_clear: &'static str,
    /// R3: deep rest done.
    pub outcome_deep_done: &'static str,
    /// R4: no summary provider.
    pub outcome_no_provider: &'static str,
    /// R5: no range to summarize.
    pub outcome_no_proposal: &'static str,
    /// R6: memo hit.
    pub outcome_memo_hit: &'static str,
    /// R7: summary committed.
    pub outcome_committed: &'static str,
    /// R8: an error on the requested path.
    pub outcome_error: &'static str,
    /// A range exists but this build has no compaction executor.
    pub outcome_executor_unavailable: &'static str,
}

/// The English rest texts.
pub const EN_REST: RestTexts = RestTexts {
    tool_description: "Schedules one compaction of the conversation history at the next safe \
        boundary, even when the load is below the automatic threshold. It needs a detailed \
        handoff note written by you; the recent part of the history and the note are kept. \
        This only schedules: it deletes no files, does not end the task and sets no timer. \
        Follow the outcome that the next context state reports. With deep=true the history \
        that can be cleared is replaced by your note and recovery path, without a summary.",
    note_description: "Your handoff note: the goal, verified progress, unfinished work and \
        key paths. Between {min} and {max} characters. Save details that cannot be rebuilt \
        to files first.",
    deep_description: "Deep rest: your handoff note and recovery path replace the history \
        that can be cleared, without a summary model, and the result must be smaller. The \
        load is measured again afterwards. Your identity, goals and ownership of judgment \
        stay the same, and every detail stays checkable in the session log.",
    recovery_description: "Required when deep is true: how to find details again after the \
        history is cleared (search words that really occur in the log, paths that exist, \
        where the task material is). Between {min} and {max} characters.",
    error_unknown_key: "context_rest takes only the keys note, deep and recovery.",
    error_not_object: "context_rest takes an object with a note: {\"note\": \"...\"}.",
    error_note_length: "The note must be between {min} and {max} characters; it has {n}.",
    error_recovery_length: "The recovery path must be a string between {min} and {max} \
        characters; it has {n}.",
    error_deep_needs_recovery: "A deep rest needs a recovery path: after the history is \
        cleared it is the only way back to the details.",
    error_already_scheduled: "A rest is already scheduled for the next boundary; wait for \
        the outcome that the next context state reports.",
    error_no_session: "context_rest can only be used inside an agent session.",
    error_cancelled: "context_rest was cancelled before it ran.",
    note_header: "Handoff note (written by you):",
    recovery_header: "Recovery path for cleared history (written by you):",
    scheduled: "The rest is scheduled for the next boundary; it has not happened yet. The \
        next context state will report its outcome.",
    scheduled_then_continue: "Then continue the task.",
    outcome_already_reduced: "Rest outcome: the history was already reduced at this \
        boundary, so no extra compaction ran.",
    outcome_deep_nothing_to_clear: "Rest outcome: the deep rest was not performed; nothing \
        beyond the system head can be cleared.",
    outcome_deep_done: "Rest outcome: the clearable history was replaced by your handoff note \
        and recovery path.",
    outcome_no_provider: "Rest outcome: not performed, because no summary provider is \
        configured; the history is kept.",
    outcome_no_proposal: "Rest outcome: not performed. Outside the retained recent part there \
        is neither a large enough fresh prefix nor checkpoints to merge; the history is kept.",
    outcome_memo_hit: "Rest outcome: not performed; this selection was already checked and \
        cannot be made smaller.",
    outcome_committed: "Rest outcome: earlier history was summarized; the recent part and \
        your note are kept.",
    outcome_error: "Rest outcome: the request did not end normally. Do not assume that the \
        history was compacted; check the checkpoints before the next request. The context \
        state is unknown for now.",
    outcome_executor_unavailable: "Rest outcome: not performed, because this runtime cannot \
        compact history yet; the history and your note are kept.",
};

/// The Chinese rest texts.
pub const ZH_REST: RestTexts = RestTexts {
    tool_description: "在下一个安全边界安排一次对话历史压缩，即使负载低于自动阈值也可以。需要你写一份详细的交接笔记；\
        最近的历史和笔记会被保留。这只是安排：不会删除文件、不会结束任务，也不设定时器。请按下一次上下文状态报告的结果行事。\
        deep=true 时，可清除的历史由你的笔记和找回路径替换，不调用摘要模型。",
    note_description: "你的交接笔记：目标、已验证的进展、未完成的工作和关键路径。长度在 {min} 到 {max} 个字符之间。\
        无法重建的细节请先保存到文件。",
    deep_description: "深度休息：你的交接笔记和找回路径替换可清除的历史，不调用摘要模型，且结果必须更小。之后会重新测量负载。\
        你的身份、目标和判断归属不变，所有细节仍可在会话日志中查到。",
    recovery_description: "deep 为 true 时必填：清除历史后如何重新找到细节（日志中真实出现的搜索词、确实存在的路径、任务材料的位置）。\
        长度在 {min} 到 {max} 个字符之间。",
    error_unknown_key: "context_rest 只接受 note、deep 和 recovery 这三个键。",
    error_not_object: "context_rest 需要一个带 note 的对象：{\"note\": \"...\"}。",
    error_note_length: "笔记长度必须在 {min} 到 {max} 个字符之间；当前为 {n}。",
    error_recovery_length: "找回路径必须是长度在 {min} 到 {max} 个字符之间的字符串；当前为 {n}。",
    error_deep_needs_recovery: "深度休息需要找回路径：历史被清除后，它是回到细节的唯一途径。",
    error_already_scheduled: "下一个边界已经安排了一次休息；请等待下一次上下文状态报告的结果。",
    error_no_session: "context_rest 只能在代理会话中使用。",
    error_cancelled: "context_rest 在运行前被取消。",
    note_header: "交接笔记（由你撰写）：",
    recovery_header: "已清除历史的找回路径（由你撰写）：",
    scheduled: "休息已安排在下一个边界，尚未执行。下一次上下文状态会报告结果。",
    scheduled_then_continue: "然后继续任务。",
    outcome_already_reduced: "休息结果：本边界已经缩减过历史，因此没有额外压缩。",
    outcome_deep_nothing_to_clear: "休息结果：未执行深度休息；系统开头之外没有可清除的内容。",
    outcome_deep_done: "休息结果：可清除的历史已由你的交接笔记和找回路径替换。",
    outcome_no_provider: "休息结果：未执行，因为没有配置摘要提供方；历史保留不变。",
    outcome_no_proposal: "休息结果：未执行。在保留的近期部分之外，既没有足够大的新内容前缀，也没有可合并的检查点；历史保留不变。",
    outcome_memo_hit: "休息结果：未执行；这一选择已被验证为无法变小。",
    outcome_committed: "休息结果：较早的历史已被摘要；近期部分和你的笔记都被保留。",
    outcome_error: "休息结果：请求未正常结束。不要假定历史已被压缩；下一次请求前请查看检查点。上下文状态暂时未知。",
    outcome_executor_unavailable: "休息结果：未执行，因为当前运行时还不能压缩历史；历史和你的笔记都被保留。",
};

/// The rest texts of a locale.
pub fn rest_texts(locale: Locale) -> &'static RestTexts {
    match locale {
        Locale::En => &EN_REST,
        Locale::Zh => &ZH_REST,
    }
}

/// Fills `{min}`, `{max}` and `{n}` in a catalog text.
pub fn fill(text: &str, min: usize, max: usize, n: usize) -> String {
    text.replace("{min}", &min.to_string())
        .replace("{max}", &max.to_string())
        .replace("{n}", &n.to_string())
}

/// The guidance section of the system prompt (CC-NTC-5): a heading and eight lines,
/// each switched by its own control `guidance-<id>`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GuidanceTexts {
    /// The heading line.
    pub heading: &'static str,
    /// `(id, line)` in section order: meaning, capacity, continuity, handoff, automatic,
    /// labels, pressure, hesitation.
    pub lines: [(&'static str, &'static str); 8],
}

/// The English guidance.
pub const EN_GUIDANCE: GuidanceTexts = GuidanceTexts {
    heading: "Context state (context-care):",
    lines: [
        (
            "meaning",
            "- The context-state levels estimate the load of each request and how much \
             history is retained; they are not evidence of memory loss, hallucination or \
             impairment, and they are not a deadline.",
        ),
        (
            "capacity",
            "- Do not infer the context capacity from the length of the conversation or from \
             a feeling that it is full; rely on the reported levels.",
        ),
        (
            "continuity",
            "- Keep working normally. Low wakefulness means less of the earlier context is \
             retained, so consult checkpoints and files for details; do not invent or pad.",
        ),
        (
            "handoff",
            "- At any suitable boundary you may rest with context_rest and a detailed note \
             (goal, verified progress, unfinished work, key paths). Save to files first; a \
             request is not the result, so wait for the reported outcome.",
        ),
        (
            "automatic",
            "- Automatic compaction is the safety net when you do not rest yourself.",
        ),
        (
            "labels",
            "- The levels are estimates, not commands: no need to panic, rush or compact \
             repeatedly.",
        ),
        (
            "pressure",
            "- When the levels rise, follow the concrete advice given; that they are only \
             estimates is no reason to push on regardless.",
        ),
        (
            "hesitation",
            "- If you have deliberated twice about whether to compact, compact; this is \
             separate from compacting because of the levels.",
        ),
    ],
};

/// The Chinese guidance.
pub const ZH_GUIDANCE: GuidanceTexts = GuidanceTexts {
    heading: "上下文状态（context-care）：",
    lines: [
        (
            "meaning",
            "- 上下文状态等级估计的是每次请求的负载和保留的历史量；它们不是记忆丧失、幻觉或能力受损的证据，也不是截止期限。",
        ),
        (
            "capacity",
            "- 不要凭对话长度或“已经很满”的感觉推断上下文容量；以报告的等级为准。",
        ),
        (
            "continuity",
            "- 照常工作。唤醒值低表示保留的早期上下文较少，细节请查阅检查点和文件；不要编造或凑内容。",
        ),
        (
            "handoff",
            "- 在任何合适的段落处都可以用 context_rest 休息，并附上详细笔记（目标、已验证的进展、未完成的工作、关键路径）。先保存到文件；请求不等于完成，请等待报告的结果。",
        ),
        ("automatic", "- 你不主动休息时，自动压缩是安全网。"),
        (
            "labels",
            "- 等级是估计，不是命令：无需慌张、赶工或反复压缩。",
        ),
        (
            "pressure",
            "- 等级上升时，请按给出的具体建议行事；“只是估计”不是硬撑下去的理由。",
        ),
        (
            "hesitation",
            "- 如果你已经两次犹豫是否压缩，就进行压缩；这与因等级而压缩是两回事。",
        ),
    ],
};

/// The guidance of a locale.
pub fn guidance_texts(locale: Locale) -> &'static GuidanceTexts {
    match locale {
        Locale::En => &EN_GUIDANCE,
        Locale::Zh => &ZH_GUIDANCE,
    }
}

/// The guidance section with the lines `enabled(id)` keeps, or `None` when every
/// line is off (CC-NTC-5).
pub fn render_guidance(locale: Locale, enabled: impl Fn(&str) -> bool) -> Option<String> {
    let texts = guidance_texts(locale);
    let lines: Vec<&str> = texts
        .lines
        .iter()
        .filter(|(id, _)| enabled(id))
        .map(|(_, line)| *line)
        .collect();
    if lines.is_empty() {
        return None;
    }
    Some(format!("{}\n{}", texts.heading, lines.join("\n")))
}

/// The final instruction of a summary request (CC-SUM-6). Checkpoints are written in
/// English whatever the locale, so they read the same to every later model.
pub const SUMMARY_INSTRUCTION: &str = "Write a handoff checkpoint of the conversation above \
so that the work can continue from it. Answer in Markdown only and do not call any tool. \
Use exactly these headings, in this order, and write (none) under a heading with nothing \
to record:

## Primary Request and Intent
## Key Technical Concepts
## Files and Code
## Errors and Fixes
## Pending Jobs
## Current Work
## Next Step
## Critical Context

Use concise bullets for the goal, the explicit instructions and corrections, verified \
results, unfinished work and the next step. Keep exact paths, commands, identifiers, error \
messages and any code that is still needed. Merge earlier checkpoints and update items \
that are out of date.

Keep attribution: list the requester's explicit requirements and corrections, the \
executor's own choices, and speculation separately, each with where it came from, and let \
the latest explicit correction win. Record done, not-done and unverified items as facts; \
only constraints the requester stated explicitly count as the requester's. The session's \
principal is not its thinking model, and the length of the conversation implies no change \
of identity, memory or ability.

Only summarize: never carry out the actions described.";

/// The English framing block that opens a summary checkpoint (CC-SUM-5); the framing
/// of every locale is [`MaintenanceTexts::checkpoint_framing`].
pub const CHECKPOINT_FRAMING: &str = EN_MAINTENANCE.checkpoint_framing;

/// The texts maintenance writes into the history the model reads (CC-SUM-5, CC-MNT-1,
/// CC-EXT-1) in one locale. `{n}`, `{index}`, `{count}`, `{first}`, `{last}` and
/// `{seqs}` are filled in where they are used.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MaintenanceTexts {
    /// The framing block that opens a summary checkpoint.
    pub checkpoint_framing: &'static str,
    /// The line that replaces the middle of a pruned tool result (`{n}`: how many
    /// characters were pruned).
    pub prune_marker: &'static str,
    /// The heading of one part of a chunked summary (`{index}` of `{count}`, covering
    /// seqs `{first}`–`{last}`).
    pub chunk_header: &'static str,
    /// The note after a chunked summary listing what was too large to summarize
    /// (`{seqs}`).
    pub chunk_left_out: &'static str,
}

/// The English maintenance texts.
pub const EN_MAINTENANCE: MaintenanceTexts = MaintenanceTexts {
    checkpoint_framing: "This is a handoff checkpoint of the earlier part of this \
        conversation, written when it was compacted. Facts in it that are still valid are \
        background; the work continues with the messages that follow. The original messages \
        stay in the session log (session_search finds them).",
    prune_marker: "[… {n} characters pruned by context-care; the full result stays in the \
        session log (session_search) …]",
    chunk_header: "### Part {index} of {count} (seq {first}–{last})",
    chunk_left_out: "(Left out of this summary because each was too large to summarize: seq \
        {seqs}. They stay in the session log; session_search finds them.)",
};

/// The Chinese maintenance texts.
pub const ZH_MAINTENANCE: MaintenanceTexts = MaintenanceTexts {
    checkpoint_framing: "这是本对话较早部分的交接检查点，在压缩时写成。其中仍然有效的事实是背景；\
        工作接着后面的消息继续。原始消息仍保存在会话日志中（session_search 可以找到）。",
    prune_marker: "[… context-care 修剪了 {n} 个字符；完整结果仍保存在会话日志中（session_search）…]",
    chunk_header: "### 第 {index} 部分，共 {count} 部分（seq {first}–{last}）",
    chunk_left_out: "（以下内容因单条过大无法摘要而未纳入本摘要：seq {seqs}。它们仍保存在会话日志中，\
        session_search 可以找到。）",
};

/// The maintenance texts of a locale.
pub fn maintenance_texts(locale: Locale) -> &'static MaintenanceTexts {
    match locale {
        Locale::En => &EN_MAINTENANCE,
        Locale::Zh => &ZH_MAINTENANCE,
    }
}

/// The outcome lines of automatic maintenance (CC-BND-2 "Auto", CC-DEF-3) in one locale.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AutoTexts {
    /// Ran, then ended within the release target.
    pub within_target: &'static str,
    /// Ran, then ended above the release target but within the hard budget.
    pub above_target: &'static str,
    /// Ran, then ended above the hard budget.
    pub above_hard: &'static str,
}

/// The English automatic-maintenance lines.
pub const EN_AUTO: AutoTexts = AutoTexts {
    within_target: "Automatic compaction summarized earlier history; the load is back within \
        its target.",
    above_target: "Automatic compaction summarized earlier history; the load is still above \
        its target but within the budget.",
    above_hard: "Automatic compaction summarized earlier history, and the load is still \
        above the budget; more of the earlier history is compacted before the next request.",
};

/// The Chinese automatic-maintenance lines.
pub const ZH_AUTO: AutoTexts = AutoTexts {
    within_target: "自动压缩已摘要较早的历史；负载已回到目标范围内。",
    above_target: "自动压缩已摘要较早的历史；负载仍高于目标，但在预算之内。",
    above_hard: "自动压缩已摘要较早的历史，负载仍高于预算；下一次请求之前会先压缩更多较早的历史。",
};

/// The automatic-maintenance lines of a locale.
pub fn auto_texts(locale: Locale) -> &'static AutoTexts {
    match locale {
        Locale::En => &EN_AUTO,
        Locale::Zh => &ZH_AUTO,
    }
}

/// The `ledger` tool's texts (CC-EXT-2) in one locale.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LedgerTexts {
    /// The tool description.
    pub description: &'static str,
    /// The listing of an empty ledger.
    pub empty: &'static str,
    /// A missing or unknown status.
    pub bad_status: &'static str,
    /// An evidence seq that does not exist yet (followed by the seq and the head).
    pub bad_evidence: &'static str,
    /// A repeated `done` (followed by the id).
    pub already_done: &'static str,
    /// The confirmation (followed by the id).
    pub recorded: &'static str,
}

/// The English ledger texts.
pub const EN_LEDGER: LedgerTexts = LedgerTexts {
    description: "Records work items in the done-ledger: {id, text, status: done|pending|blocked, \
        evidence_seqs?} (evidence_seqs are session log seqs that show it, e.g. from \
        session_search). Call it with {} to list the ledger. Every checkpoint carries the \
        ledger verbatim, so record finished work here to avoid redoing it after a \
        compaction.",
    empty: "The done-ledger is empty.",
    bad_status: "status must be one of done, pending, blocked.",
    bad_evidence: "evidence_seqs must name existing log seqs; got",
    already_done: "Already recorded as done; nothing to repeat:",
    recorded: "Recorded in the done-ledger:",
};

/// The Chinese ledger texts.
pub const ZH_LEDGER: LedgerTexts = LedgerTexts {
    description: "在完成台账中记录工作项：{id, text, status: done|pending|blocked, evidence_seqs?}\
        （evidence_seqs 是能证明它的会话日志序号，例如来自 session_search）。以 {} 调用可列出台账。\
        每个检查点都会原样携带台账，所以请在此记录已完成的工作，免得压缩后重复去做。",
    empty: "完成台账为空。",
    bad_status: "status 必须是 done、pending 或 blocked 之一。",
    bad_evidence: "evidence_seqs 必须是已存在的日志序号；收到",
    already_done: "已记录为完成，无需重复：",
    recorded: "已记入完成台账：",
};

/// The ledger texts of a locale.
pub fn ledger_texts(locale: Locale) -> &'static LedgerTexts {
    match locale {
        Locale::En => &EN_LEDGER,
        Locale::Zh => &ZH_LEDGER,
    }
}

/// Every model-visible text of the plugin in one locale, by a stable id (CC-GEN-2), so
/// tests can check that both locales have each one and that all of them keep the tone
/// rules (CC-GEN-3). Punctuation-only parts (the level line's separators) are left out.
/// The summary instruction is not listed: CC-SUM-6 fixes its English headings, and the
/// checkpoint it yields is framed in the session's locale.
pub fn catalog(locale: Locale) -> Vec<(&'static str, &'static str)> {
    let status = status_texts(locale);
    let rest = rest_texts(locale);
    let guidance = guidance_texts(locale);
    let auto = auto_texts(locale);
    let ledger = ledger_texts(locale);
    let maintenance = maintenance_texts(locale);
    let mut all = vec![
        ("status.fatigue_label", status.fatigue_label),
        ("status.wakefulness_label", status.wakefulness_label),
        ("status.unknown", status.unknown),
        ("status.estimate", status.estimate),
        ("status.uncalibrated", status.uncalibrated),
        ("status.tool_description", status.status_tool_description),
        ("status.error_arguments", status.error_arguments),
        ("status.error_got_keys", status.error_got_keys),
        ("status.error_cancelled", status.error_cancelled),
    ];
    let grades = [
        "status.fatigue.normal",
        "status.fatigue.elevated",
        "status.fatigue.high",
        "status.fatigue.very_high",
    ];
    all.extend(grades.into_iter().zip(status.fatigue_grades));
    let grades = [
        "status.wakefulness.low",
        "status.wakefulness.normal",
        "status.wakefulness.elevated",
        "status.wakefulness.high",
    ];
    all.extend(grades.into_iter().zip(status.wakefulness_grades));
    let kinds = [
        "status.kind.null",
        "status.kind.boolean",
        "status.kind.number",
        "status.kind.string",
        "status.kind.array",
    ];
    all.extend(kinds.into_iter().zip(status.kind_names));
    for (level, lines) in [
        ("normal", status.advice_normal),
        ("elevated", status.advice_elevated),
        ("high", status.advice_high),
        ("very_high", status.advice_very_high),
    ] {
        for (index, line) in lines.iter().enumerate() {
            let id: &'static str = match (level, index) {
                ("normal", _) => "status.advice.normal",
                ("elevated", _) => "status.advice.elevated",
                ("high", 0) => "status.advice.high.0",
                ("high", _) => "status.advice.high.1",
                ("very_high", 0) => "status.advice.very_high.0",
                ("very_high", 1) => "status.advice.very_high.1",
                _ => "status.advice.very_high.2",
            };
            all.push((id, line));
        }
    }
    all.extend([
        ("rest.tool_description", rest.tool_description),
        ("rest.note_description", rest.note_description),
        ("rest.deep_description", rest.deep_description),
        ("rest.recovery_description", rest.recovery_description),
        ("rest.error_unknown_key", rest.error_unknown_key),
        ("rest.error_not_object", rest.error_not_object),
        ("rest.error_note_length", rest.error_note_length),
        ("rest.error_recovery_length", rest.error_recovery_length),
        (
            "rest.error_deep_needs_recovery",
            rest.error_deep_needs_recovery,
        ),
        ("rest.error_already_scheduled", rest.error_already_scheduled),
        ("rest.error_no_session", rest.error_no_session),
        ("rest.error_cancelled", rest.error_cancelled),
        ("rest.note_header", rest.note_header),
        ("rest.recovery_header", rest.recovery_header),
        ("rest.scheduled", rest.scheduled),
        ("rest.scheduled_then_continue", rest.scheduled_then_continue),
        ("rest.outcome_already_reduced", rest.outcome_already_reduced),
        (
            "rest.outcome_deep_nothing_to_clear",
            rest.outcome_deep_nothing_to_clear,
        ),
        ("rest.outcome_deep_done", rest.outcome_deep_done),
        ("rest.outcome_no_provider", rest.outcome_no_provider),
        ("rest.outcome_no_proposal", rest.outcome_no_proposal),
        ("rest.outcome_memo_hit", rest.outcome_memo_hit),
        ("rest.outcome_committed", rest.outcome_committed),
        ("rest.outcome_error", rest.outcome_error),
        (
            "rest.outcome_executor_unavailable",
            rest.outcome_executor_unavailable,
        ),
        ("guidance.heading", guidance.heading),
    ]);
    let lines = [
        "guidance.meaning",
        "guidance.capacity",
        "guidance.continuity",
        "guidance.handoff",
        "guidance.automatic",
        "guidance.labels",
        "guidance.pressure",
        "guidance.hesitation",
    ];
    all.extend(
        lines
            .into_iter()
            .zip(guidance.lines.iter().map(|(_, line)| *line)),
    );
    all.extend([
        ("auto.within_target", auto.within_target),
        ("auto.above_target", auto.above_target),
        ("auto.above_hard", auto.above_hard),
        ("ledger.description", ledger.description),
        ("ledger.empty", ledger.empty),
        ("ledger.bad_status", ledger.bad_status),
        ("ledger.bad_evidence", ledger.bad_evidence),
        ("ledger.already_done", ledger.already_done),
        ("ledger.recorded", ledger.recorded),
        ("checkpoint.framing", maintenance.checkpoint_framing),
        ("prune.marker", maintenance.prune_marker),
        ("chunk.header", maintenance.chunk_header),
        ("chunk.left_out", maintenance.chunk_left_out),
    ]);
    all
}
