//! The model-visible texts of the stream watch and the loop shapes (GEN-3, MV-LOOP,
//! MV-RESUME, MV-TIME, MV-CONTEXT), in English and Chinese. Calm and factual: when the
//! system stopped the output, the text says so; no urgency, no claims of lost ability.

use ccare_core::Locale;

/// The shape a loop notice names (MV-LOOP point 1).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LoopShape {
    /// One line repeated.
    Line(String),
    /// A cycle of short lines.
    Cycle(Vec<String>),
    /// Short filler lines.
    Filler,
    /// Many lines opening with the same prefix.
    Prefix(String),
}

/// The labels (the notices' `summary`).
pub const LABEL_LOOP: &str = "Output loop detected";
/// See [`LABEL_LOOP`].
pub const LABEL_LOOP_ABORTED: &str = "Output loop aborted";
/// See [`LABEL_LOOP`].
pub const LABEL_TIME: &str = "Time planning reminder";
/// See [`LABEL_LOOP`].
pub const LABEL_CONTEXT: &str = "Context planning reminder";
/// The label of a configured trigger's notice (a `marker` or `phrase` detector that is
/// not one of the default anxiety triggers).
pub const LABEL_WATCH: &str = "Stream watch reminder";
/// See [`LABEL_WATCH`]: the notice of a configured trigger that stopped the output.
pub const LABEL_WATCH_ABORTED: &str = "Output stopped by the stream watch";

fn wrap(lines: &[String]) -> String {
    format!("<context-care>\n{}\n</context-care>", lines.join("\n"))
}

fn wrap_one(line: String) -> String {
    wrap(&[line])
}

/// MV-LOOP: the shape with its count and share, whether the system stopped the output,
/// then what to save before `context_rest`, and how to continue.
pub fn loop_notice(
    locale: Locale,
    shape: &LoopShape,
    count: usize,
    of_lines: usize,
    percent: u32,
    aborted: bool,
) -> String {
    let mut lines = Vec::new();
    match locale {
        Locale::En => {
            let what = match shape {
                LoopShape::Line(line) => format!("the line \"{line}\" repeated"),
                LoopShape::Cycle(cycle) => {
                    format!("a cycle of the lines \"{}\"", cycle.join("\" / \""))
                }
                LoopShape::Filler => "short filler lines".to_owned(),
                LoopShape::Prefix(prefix) => format!("lines all opening with \"{prefix}\""),
            };
            lines.push(format!(
                "context-care noticed a repetition in the output: {what}, {count} of the last {of_lines} lines ({percent}%)."
            ));
            if aborted {
                lines.push(
                    "The system (context-care), not you, stopped the response mid-generation to end the repetition; what was written so far is kept."
                        .to_owned(),
                );
            }
            lines.push("First save detailed progress to a notes file: the goal and why; what is done, with full paths, exact commands, results with numbers, names and URLs; what is pending and the next step; pitfalls and their causes; key paths, including the notes file and the names (never the values) of credentials; requirements, corrections, code and errors, verbatim.".to_owned());
            lines.push("Only then call context_rest.".to_owned());
            lines.push("Raw details stay in the session log and the checkpoints. Check the result, then continue from the next step.".to_owned());
        }
        Locale::Zh => {
            let what = match shape {
                LoopShape::Line(line) => format!("“{line}”这一行在重复"),
                LoopShape::Cycle(cycle) => format!("“{}”这几行在循环", cycle.join("”/“")),
                LoopShape::Filler => "短小的填充行".to_owned(),
                LoopShape::Prefix(prefix) => format!("许多行都以“{prefix}”开头"),
            };
            lines.push(format!(
                "context-care 注意到输出中有重复：{what}，在最近 {of_lines} 行中占 {count} 行（{percent}%）。"
            ));
            if aborted {
                lines.push("是系统（context-care）而不是你在生成中途停止了这次回复，以结束重复；已写出的内容都保留。".to_owned());
            }
            lines.push("请先把详细进展保存到笔记文件：目标及其原因；已完成的内容，附完整路径、确切命令、带数字的结果、名称和 URL；待办事项和下一步；踩过的坑及其原因；关键路径，包括笔记文件和凭据的名称（绝不写值）；原样记录要求、更正、代码和错误。".to_owned());
            lines.push("然后再调用 context_rest。".to_owned());
            lines.push("原始细节保留在会话日志和检查点中。查看结果后，从下一步继续。".to_owned());
        }
    }
    wrap(&lines)
}

/// MV-RESUME: the system stopped the previous output because of a loop; work continues.
pub fn resume_notice(locale: Locale) -> String {
    wrap(&[match locale {
        Locale::En => "The system (context-care) stopped your previous output because it was repeating itself. Work continues now from where it was.".to_owned(),
        Locale::Zh => "系统（context-care）因输出重复而停止了你上一次的输出。现在从原处继续工作。".to_owned(),
    }])
}

/// The notice of a configured trigger (SW-1: a trigger from `[plugins.stream-watch]
/// triggers` whose detector found `found`): what was found and by which rule, whether
/// the system (not the model) stopped the output because of it, and how to continue.
/// It claims no loop: the trigger's meaning is the user's.
pub fn match_notice(locale: Locale, trigger: &str, found: &str, aborted: bool) -> String {
    let mut lines = Vec::new();
    match locale {
        Locale::En => {
            lines.push(format!(
                "The stream watch (context-care) found \"{found}\" in your output; the rule \"{trigger}\" asks for this reminder."
            ));
            if aborted {
                lines.push("The system (context-care), not you, stopped the response mid-generation because of it; what was written so far is kept.".to_owned());
            }
            lines.push(
                "Check that the work is on track, then continue from where it was.".to_owned(),
            );
        }
        Locale::Zh => {
            lines.push(format!(
                "流式监视（context-care）在你的输出中发现了“{found}”；规则“{trigger}”要求发出这条提醒。"
            ));
            if aborted {
                lines.push("是系统（context-care）而不是你因此在生成中途停止了这次回复；已写出的内容都保留。".to_owned());
            }
            lines.push("请确认工作方向正确，然后从原处继续。".to_owned());
        }
    }
    wrap(&lines)
}

/// MV-TIME: check what time planning rests on.
pub fn time_notice(locale: Locale) -> String {
    let lines: &[&str] = match locale {
        Locale::En => &[
            "A reminder about planning by time: check what any time or call-count planning rests on.",
            "The human's deadlines, the current time and known run limits count; a quota nobody gave is unknown, not scarce.",
            "Plan by goal, progress and verification.",
            "Tidy up at a work boundary, after a handoff.",
        ],
        Locale::Zh => &[
            "关于按时间规划的提醒：请核对任何关于时间或调用次数的规划依据是什么。",
            "人给出的截止时间、当前时间和已知的运行限制才算数；没人给过的配额是未知，而不是稀缺。",
            "按目标、进展和验证来规划。",
            "在工作段落处、完成交接之后再整理。",
        ],
    };
    wrap(
        &lines
            .iter()
            .map(|line| (*line).to_owned())
            .collect::<Vec<_>>(),
    )
}

/// MV-CONTEXT without numbers: usage is measured (`context_status` reads it), the
/// figures are estimates, tidy by work steps, record before compaction, then continue.
pub fn context_notice(locale: Locale) -> String {
    let lines: &[&str] = match locale {
        Locale::En => &[
            "A reminder about context planning: context usage is measured; context_status reads the current levels.",
            "They are estimates of load and retained content.",
            "Schedule tidying by work steps.",
            "Before a compaction, record the goal, verified results, open work and key paths.",
            "Check the report, then continue.",
        ],
        Locale::Zh => &[
            "关于上下文规划的提醒：上下文用量是测量出来的；context_status 可读取当前等级。",
            "这些是对负载和保留内容的估计。",
            "按工作步骤安排整理。",
            "压缩之前，记录目标、已验证的结果、未完成的工作和关键路径。",
            "查看报告后再继续。",
        ],
    };
    wrap(
        &lines
            .iter()
            .map(|line| (*line).to_owned())
            .collect::<Vec<_>>(),
    )
}

/// MV-DONE(label): the last output used completion wording; this observes wording
/// only; check the scope against the request, deliverables and verification records;
/// continue authorised work that remains. Calm (GEN-3), wrapped in `<context-care>`.
pub fn done_notice(locale: Locale, label: &str) -> String {
    let lines = match locale {
        Locale::En => [
            format!(
                "context-care observed that your last reply used completion wording such as \"{label}\". This is an observation of wording only, not a judgement of the work."
            ),
            "Check the scope against the request, the deliverables and the verification records."
                .to_owned(),
            "If authorised work remains, continue it; if everything is in place, say so briefly."
                .to_owned(),
        ],
        Locale::Zh => [
            format!(
                "context-care 注意到你上一条回复使用了完成类措辞，例如“{label}”。这只是对措辞的观察，并不评判工作本身。"
            ),
            "请对照请求、交付物和验证记录核对范围。".to_owned(),
            "如果仍有已获授权的工作未完成，请继续；如果都已就绪，简要说明即可。".to_owned(),
        ],
    };
    wrap(&lines)
}

/// EX-1: the reminder after `count` identical calls with the same result.
pub(crate) fn tool_loop_reminder(locale: Locale, tool: &str, count: u32) -> String {
    wrap_one(match locale {
        Locale::En => format!(
            "You have called {tool} with the same arguments {count} times in a row and got the same result each time. Calling it again will not change the result: use the result you have, or change the approach."
        ),
        Locale::Zh => format!(
            "你已经连续 {count} 次用相同参数调用 {tool}，每次结果都相同。再次调用不会改变结果：请使用已有结果，或换一种做法。"
        ),
    })
}

/// EX-1: the error result of a refused repeat call, citing the first result.
pub(crate) fn tool_loop_refused(locale: Locale, tool: &str, count: u32, first_seq: u64) -> String {
    match locale {
        Locale::En => format!(
            "context-care did not run this call: {tool} with these arguments already returned the same result {} times in a row (first at log seq {first_seq}). Use that result, or change the approach.",
            count - 1
        ),
        Locale::Zh => format!(
            "context-care 没有执行这次调用：{tool} 用这些参数已经连续 {} 次返回相同结果（首次在日志序号 {first_seq}）。请使用该结果，或换一种做法。",
            count - 1
        ),
    }
}

/// EX-1: the pointer given when the repeated result was compacted away.
pub(crate) fn tool_loop_pointer(locale: Locale, tool: &str, count: u32, first_seq: u64) -> String {
    wrap_one(match locale {
        Locale::En => format!(
            "This is the {count}th identical call of {tool}. Its earlier result (log seq {first_seq}) was compacted: the checkpoint summarizes it, and session_search finds the original."
        ),
        Locale::Zh => format!(
            "这是第 {count} 次相同的 {tool} 调用。它较早的结果（日志序号 {first_seq}）已被压缩：检查点对其做了摘要，session_search 可以找到原文。"
        ),
    })
}
