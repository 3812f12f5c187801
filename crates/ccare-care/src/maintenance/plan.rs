//! The maintenance planner (CC-MNT-1..6, CC-BND-2, CC-DEEP-1, CC-DEEP-2): what an
//! action will do, decided from plain inputs (the surface, the frozen pricing, the
//! configuration, the measured load, what the controls answered) with no I/O and no
//! session writes. The executors (`prune`, `passes`, `rest`, `deep`) gather those
//! inputs, follow the plan, and write the events and journal records.

use ccare_core::kinds::ToolResult;
use ccare_core::{ContentBlock, Locale, Message, Role, Source};
use ccare_session::{DerivedMessage, DerivedView};
use serde_json::json;

use super::RestOutcome;
use crate::budget::Budget;
use crate::care::{Frozen, Measured};
use crate::config::CareConfig;
use crate::pricing::Pricer;
use crate::range::{Proposal, RangeError, RangeNode, RankInput, SeqRange, propose};
use crate::range_nodes::{deep_clear_range, nodes};
use crate::summary::SummaryFailure;

/// A tool result longer than this many code points is pruned (CC-MNT-1).
pub const PRUNE_ABOVE_CHARS: usize = 8192;
/// What a pruned result keeps of its start, in code points.
pub const PRUNE_KEEP_HEAD: usize = 4096;
/// What a pruned result keeps of its end, in code points.
pub const PRUNE_KEEP_TAIL: usize = 1024;

fn failure(code: &str, message: &str) -> SummaryFailure {
    SummaryFailure {
        code: code.to_owned(),
        message: message.to_owned(),
    }
}

// ---------------------------------------------------------------------------------------
// Ranking (CC-MNT-2..4)

/// CC-MNT-4 `retain = budget.tail ?? retainTokens ?? 0`.
fn retain_for(config: &CareConfig, budget: Option<&Budget>) -> u64 {
    budget
        .map(|budget| u64::try_from(budget.tail).unwrap_or(0))
        .or(config.retain_tokens)
        .unwrap_or(0)
}

/// What the candidates of a summary are ranked with at the measured load: the retained
/// tail, the release target and the configured strategy. `allow_fallback` for automatic
/// passes, not for a requested rest.
pub(crate) fn rank_input(
    config: &CareConfig,
    measured: &Measured,
    allow_fallback: bool,
) -> RankInput {
    RankInput {
        retain: retain_for(config, measured.budget.as_ref()),
        min_fresh_tokens: config.min_fresh_tokens,
        load: measured.load,
        release_target: measured.budget.as_ref().map_or(0, |budget| {
            u64::try_from(budget.release_target).unwrap_or(0)
        }),
        strategy: config.range_strategy,
        expected_checkpoint_tokens: config.expected_checkpoint_tokens,
        allow_fallback,
    }
}

// ---------------------------------------------------------------------------------------
// Pruning (CC-MNT-1)

/// The surface messages whose tool results may be pruned: those before the latest
/// assistant message (the model has seen them). Positions, not seqs: a replaced node
/// carries a newer seq than those after it.
pub(crate) fn prune_scope(view: &DerivedView) -> &[DerivedMessage] {
    let last_assistant = view
        .messages
        .iter()
        .rposition(|derived| derived.role == Role::Assistant)
        .unwrap_or(0);
    &view.messages[..last_assistant]
}

/// One tool result to prune: the event it replaces and its pruned form, priced.
#[derive(Debug)]
pub(crate) struct PruneStep {
    /// The seq of the tool result replaced.
    pub(crate) seq: u64,
    /// The tool result as logged.
    pub(crate) result: ToolResult,
    /// Its message, pruned ([`pruned_result`]).
    pub(crate) pruned: Message,
    /// The unscaled text tokens of the result before pruning (0 when unpriceable).
    pub(crate) before_tokens: u64,
    /// The unscaled text tokens of the pruned result (0 when unpriceable).
    pub(crate) after_tokens: u64,
}

/// The prunes of `results` (the tool results of [`prune_scope`], each with its seq), in
/// order: every result with a text longer than [`PRUNE_ABOVE_CHARS`] code points, its
/// marker in `locale`, priced on `pricer`'s unscaled text.
pub(crate) fn plan_prune(
    locale: Locale,
    results: Vec<(u64, ToolResult)>,
    pricer: &Pricer<'_>,
) -> Vec<PruneStep> {
    results
        .into_iter()
        .filter_map(|(seq, result)| {
            let pruned = pruned_result(locale, &result.message)?;
            let before_tokens = pricer
                .message(&result.message)
                .map_or(0, |price| price.text);
            let after_tokens = pricer.message(&pruned).map_or(0, |price| price.text);
            Some(PruneStep {
                seq,
                result,
                pruned,
                before_tokens,
                after_tokens,
            })
        })
        .collect()
}

/// The pruned form of a tool-result message, or `None` when nothing in it is longer
/// than [`PRUNE_ABOVE_CHARS`] code points; the marker in `locale`.
pub fn pruned_result(locale: Locale, message: &Message) -> Option<Message> {
    let mut changed = false;
    let content = message
        .content
        .iter()
        .map(|block| match block {
            ContentBlock::ToolResult(result) => {
                let mut result = result.clone();
                result.content = result
                    .content
                    .iter()
                    .map(|inner| match inner {
                        ContentBlock::Text(text)
                            if text.text.chars().count() > PRUNE_ABOVE_CHARS =>
                        {
                            changed = true;
                            ContentBlock::text(prune_text(locale, &text.text))
                        }
                        other => other.clone(),
                    })
                    .collect();
                ContentBlock::ToolResult(result)
            }
            other => other.clone(),
        })
        .collect();
    changed.then(|| Message {
        content,
        ..message.clone()
    })
}

/// Keeps the first [`PRUNE_KEEP_HEAD`] and last [`PRUNE_KEEP_TAIL`] code points of
/// `text` around a line, in `locale`, saying how much was pruned.
pub fn prune_text(locale: Locale, text: &str) -> String {
    let chars: Vec<char> = text.chars().collect();
    let head: String = chars.iter().take(PRUNE_KEEP_HEAD).collect();
    let tail: String = chars
        .iter()
        .skip(chars.len().saturating_sub(PRUNE_KEEP_TAIL))
        .collect();
    let removed = chars
        .len()
        .saturating_sub(PRUNE_KEEP_HEAD + PRUNE_KEEP_TAIL);
    let marker = crate::texts::maintenance_texts(locale)
        .prune_marker
        .replace("{n}", &removed.to_string());
    format!("{head}\n{marker}\n{tail}")
}

// ---------------------------------------------------------------------------------------
// Automatic summary passes (CC-MNT-6)

/// Whether another automatic summary pass may run: the session's controller is armed,
/// fewer than the pass limit ran, and a summary route resolves (CC-SUM-1).
pub(crate) fn pass_allowed(armed: bool, passes: u32, limit: u64, summary_route: bool) -> bool {
    armed && u64::from(passes) < limit && summary_route
}

/// What one automatic summary pass does.
#[derive(Debug)]
pub(crate) enum PassPlan {
    /// Stop: the surface could not be priced, or no range is worth summarizing.
    Stop,
    /// Stop: no proposal could be made, for this reason (logged).
    NoProposal(RangeError),
    /// `maintenance.summary` is off: the summary that would have run over this range is
    /// journaled as `CONTROL_DISABLED` (CC-SUM-1 / A29), then the passes stop.
    Disabled(SeqRange),
    /// Summarize `proposal` over `nodes`, unless the memo knows it (CC-MNT-5).
    Summarize {
        /// The surface, priced.
        nodes: Vec<RangeNode>,
        /// The ranked candidates and the chosen one.
        proposal: Proposal,
    },
}

/// Plans one automatic pass over `view`, priced with `frozen`, ranked with `rank`;
/// `summary_enabled` is the `maintenance.summary` control's answer, gated at execution.
pub(crate) fn plan_pass(
    view: &DerivedView,
    frozen: &Frozen,
    summary_enabled: bool,
    rank: &RankInput,
) -> PassPlan {
    let Ok(nodes) = nodes(view, frozen) else {
        return PassPlan::Stop;
    };
    match (summary_enabled, propose(&nodes, rank)) {
        (false, Ok(Some(proposal))) => PassPlan::Disabled(proposal.candidate.range()),
        (false, Ok(None) | Err(_)) | (true, Ok(None)) => PassPlan::Stop,
        (true, Err(error)) => PassPlan::NoProposal(error),
        (true, Ok(Some(proposal))) => PassPlan::Summarize { nodes, proposal },
    }
}

// ---------------------------------------------------------------------------------------
// Requested rest (CC-BND-2)

/// What a requested rest is planned from.
pub(crate) struct RestInputs<'a> {
    /// A deep rest (else a summary with no fallback).
    pub(crate) deep: bool,
    /// The history was already reduced at this boundary (R1).
    pub(crate) reduced_here: bool,
    /// The surface now.
    pub(crate) view: &'a DerivedView,
    /// The action's frozen pricing.
    pub(crate) frozen: &'a Frozen,
    /// Whether a summary route resolves (R4, CC-SUM-1).
    pub(crate) summary_route: bool,
    /// What a summary's candidates are ranked with (no fallback).
    pub(crate) rank: RankInput,
}

/// What a requested rest does.
#[derive(Debug)]
pub(crate) enum RestPlan {
    /// Nothing runs; the rest ends with this outcome (R1, R2, R4, R5, R8).
    Outcome(RestOutcome),
    /// A deep rest clears `shadowed` (CC-DEEP-1) and hands off to the rest message (R3).
    Deep {
        /// The surface, priced.
        nodes: Vec<RangeNode>,
        /// The seqs cleared, in surface order.
        shadowed: Vec<u64>,
    },
    /// A summary of `proposal`, unless the memo knows it (R6, R7).
    Summary {
        /// The surface, priced.
        nodes: Vec<RangeNode>,
        /// The ranked candidates and the chosen one.
        proposal: Proposal,
    },
}

/// Plans a requested rest (CC-BND-2).
pub(crate) fn plan_rest(input: RestInputs<'_>) -> RestPlan {
    if !input.deep && input.reduced_here {
        return RestPlan::Outcome(RestOutcome::AlreadyReduced);
    }
    let Ok(nodes) = nodes(input.view, input.frozen) else {
        return RestPlan::Outcome(RestOutcome::Error);
    };
    if input.deep {
        return match deep_clear_range(&nodes) {
            None => RestPlan::Outcome(RestOutcome::DeepNothingToClear),
            Some(clear) => RestPlan::Deep {
                nodes,
                shadowed: clear.shadowed_seqs,
            },
        };
    }
    if !input.summary_route {
        return RestPlan::Outcome(RestOutcome::NoProvider);
    }
    match propose(&nodes, &input.rank) {
        Ok(Some(proposal)) => RestPlan::Summary { nodes, proposal },
        Ok(None) => RestPlan::Outcome(RestOutcome::NoProposal),
        Err(_) => RestPlan::Outcome(RestOutcome::Error),
    }
}

// ---------------------------------------------------------------------------------------
// Deep rest (CC-DEEP-2)

/// CC-DEEP-2's checks before anything is written: no compaction is open, the
/// selection's slice of the live surface is still `shadowed` (a message appended after
/// the selection is outside that slice), and it is not empty. Returns its first and
/// last seq, or the refusal the executor journals.
pub(crate) fn check_deep(
    compaction_open: bool,
    view: &DerivedView,
    shadowed: &[u64],
) -> Result<(u64, u64), SummaryFailure> {
    if compaction_open {
        return Err(failure("COMPACTION_BUSY", "a compaction is still open"));
    }
    let shadowed_set: std::collections::HashSet<u64> = shadowed.iter().copied().collect();
    let live: Vec<u64> = view
        .messages
        .iter()
        .map(|derived| derived.seq)
        .filter(|seq| shadowed_set.contains(seq))
        .collect();
    if live != shadowed {
        return Err(failure(
            "HANDOFF_SOURCE_CHANGED",
            "handoff source changed; history retained",
        ));
    }
    match (shadowed.first(), shadowed.last()) {
        (Some(&start_seq), Some(&end_seq)) => Ok((start_seq, end_seq)),
        _ => Err(failure("NOTHING_TO_CLEAR", "nothing to clear")),
    }
}

/// What a deep rest's replacement is planned from.
pub(crate) struct DeepInputs<'a> {
    /// The action's frozen pricing.
    pub(crate) frozen: &'a Frozen,
    /// The surface as selected, priced.
    pub(crate) nodes: &'a [RangeNode],
    /// The surface now.
    pub(crate) view: &'a DerivedView,
    /// The seqs cleared, in surface order.
    pub(crate) shadowed: &'a [u64],
    /// The rest message: its text is the handoff.
    pub(crate) rest: &'a Message,
    /// The rendered done-ledger (CC-EXT-2), appended to the checkpoint.
    pub(crate) ledger: Option<String>,
    /// The compaction the checkpoint belongs to.
    pub(crate) compaction_id: &'a str,
    /// The maintenance operation, for the checkpoint's trace.
    pub(crate) operation_id: &'a str,
}

/// The deep rest's replacement and what it and the cleared history cost (CC-DEEP-2).
#[derive(Debug)]
pub(crate) struct DeepPlan {
    /// The handoff: the rest message's text, as `compaction/summary` records it.
    pub(crate) handoff: String,
    /// The checkpoint that replaces the cleared history: the handoff, then the ledger.
    pub(crate) replacement: Message,
    /// The checkpoint's price, rounded up (`afterInput`).
    pub(crate) replacement_tokens: u64,
    /// The cleared nodes' price (`beforeInput`).
    pub(crate) selected: u64,
    /// The meter's unscaled sum of the cleared messages (`shadowedTokenCount`).
    pub(crate) heuristic: u64,
}

impl DeepPlan {
    /// Whether the handoff is no smaller than the history it would replace: then
    /// nothing is written (`HANDOFF_LARGER_THAN_HISTORY`).
    pub(crate) fn is_larger_than_history(&self) -> bool {
        self.replacement_tokens >= self.selected
    }
}

/// Builds and prices the deep rest's checkpoint; `PRICING_FAILED` when the frozen
/// pricing cannot price it.
pub(crate) fn plan_deep(input: DeepInputs<'_>) -> Result<DeepPlan, SummaryFailure> {
    let shadowed_set: std::collections::HashSet<u64> = input.shadowed.iter().copied().collect();
    let handoff = input.rest.joined_text("\n");
    let mut blocks = vec![ContentBlock::text(handoff.clone())];
    if let Some(ledger) = input.ledger {
        blocks.push(ContentBlock::text(ledger));
    }
    let mut replacement = Message::from_blocks(blocks);
    replacement.source = Some(Source::CompactCheckpoint {
        compaction_id: input.compaction_id.to_owned(),
        producer: "context-care".to_owned(),
        trace: Some(Box::new(
            json!({"trigger": "deep-rest", "operationId": input.operation_id}),
        )),
        extra: ccare_core::Extra::new(),
    });
    let pricer = input
        .frozen
        .pricing
        .pricer(&input.frozen.meter)
        .map_err(|error| failure("PRICING_FAILED", &error.to_string()))?;
    let replacement_tokens = pricer
        .message(&replacement)
        .map(|price| price.ceil(pricer.text_scale()))
        .map_err(|error| failure("PRICING_FAILED", &error.to_string()))?;
    let selected: u64 = input
        .nodes
        .iter()
        .filter(|node| shadowed_set.contains(&node.seq))
        .map(|node| node.tokens)
        .sum();
    // `shadowedTokenCount` is the meter's (unscaled) sum (CC-DEEP-2).
    let heuristic: u64 = input
        .view
        .messages
        .iter()
        .filter(|derived| shadowed_set.contains(&derived.seq))
        .filter_map(|derived| pricer.message(&derived.message).ok())
        .map(|price| price.text + price.visual)
        .sum();
    Ok(DeepPlan {
        handoff,
        replacement,
        replacement_tokens,
        selected,
        heuristic,
    })
}

#[cfg(test)]
#[path = "plan_tests.rs"]
mod tests;
