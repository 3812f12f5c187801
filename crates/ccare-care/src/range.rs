//! Which part of the surface maintenance may summarize, and which prefix of it to take
//! (CC-MNT-2, CC-MNT-3, CC-MNT-4). Pure arithmetic over priced surface nodes: it reads
//! no messages, calls no provider and writes no journal.
//!
//! - [`select_rest_range`] (CC-MNT-2) keeps the recent tail worth `retain` tokens and
//!   returns the history before it: cut where no tool batch is open, without the system
//!   head, and only if it holds at least `min_fresh` fresh tokens.
//! - [`summary_candidates`] (CC-MNT-3) lists the balanced prefixes of a range, largest
//!   first: the inputs a summary transaction may fall back to when the whole range does
//!   not fit its route (CC-SUM-2).
//! - [`propose`] (CC-MNT-4) gives every balanced prefix of the rest range a rule
//!   (`fresh-summary`, `checkpoint-merge`, `basic-prefix`), filters and ranks them, and
//!   returns the first together with the whole ranking as `comparisons`.
//!
//! Step 1 of CC-MNT-2 (the measured nodes are the surface) is the caller's, since only
//! the caller holds both lists; [`check_measurement`] does the comparison.
//!
//! # Terms
//!
//! - *Fresh tokens*: the price of the nodes that are not the system message, a checkpoint
//!   or one of context-care's own messages ([`NodeKind::is_fresh`]).
//! - *Tool balance* of a node: the running sum of `tool_calls − tool_results` over the
//!   surface **from its first node** up to and including that node. A node is
//!   *balanced* when that sum is 0 (CC-GEN-1): no tool batch is open after it, so a cut
//!   right after it splits none. Summing from the surface start (not from a range start)
//!   is what lets [`summary_candidates`] see that a range begins inside a batch; for the
//!   rest range, which starts at node 0 or right after the system head, the two readings
//!   agree. A running sum below 0 (a tool result with no open call before it) fails with
//!   [`RangeError::NegativeToolBalance`].
//!
//! Nodes are given in surface order. Seqs need not increase along the surface (a
//! checkpoint written late sits early), so ranges name their first and last node by seq
//! and are resolved by position.

use std::cmp::Ordering;
use std::fmt;

use serde::{Deserialize, Serialize};

use crate::config::RangeStrategy;

/// One priced surface node, in surface order: all the range rules need to know about a
/// message. The caller builds these from one measurement on the action's frozen basis
/// (CC-PRC-4), so every price in one call is comparable.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct RangeNode {
    /// The node's log seq.
    pub seq: u64,
    /// Its price on the frozen basis, already rounded.
    pub tokens: u64,
    /// What kind of message it is, as far as the range rules care.
    pub kind: NodeKind,
    /// Tool-call blocks in this message (an assistant message's calls).
    pub tool_calls: u32,
    /// Tool-result blocks in this message.
    pub tool_results: u32,
}

impl RangeNode {
    /// Its fresh tokens: its price when its kind is fresh ([`NodeKind::is_fresh`]), else 0.
    pub fn fresh_tokens(&self) -> u64 {
        if self.kind.is_fresh() { self.tokens } else { 0 }
    }

    /// What this node adds to the running tool balance.
    fn tool_delta(&self) -> i64 {
        i64::from(self.tool_calls) - i64::from(self.tool_results)
    }
}

/// The kinds of surface node the range rules tell apart (CC-GEN-1).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum NodeKind {
    /// A `system/message`. At the head of the surface it is never selected (CC-MNT-2
    /// step 4) and a summary range may not start at one (CC-MNT-3).
    System,
    /// A checkpoint: kind `compact-checkpoint`, or legacy producer `compact`. Not fresh;
    /// two or more of them can be merged (CC-MNT-4 `checkpoint-merge`).
    Checkpoint,
    /// One of context-care's own messages: source kind `plugin:context-care:*` (the
    /// state notice, the rest request). Not fresh.
    Own,
    /// A user message.
    User,
    /// An assistant message; its tool calls go in [`RangeNode::tool_calls`].
    Assistant,
    /// A tool-result message; its results go in [`RangeNode::tool_results`].
    ToolResult,
}

impl NodeKind {
    /// Whether its tokens count as fresh: everything but system, checkpoint and own
    /// messages (CC-MNT-2 step 5). Fresh text is what a summary actually condenses.
    pub fn is_fresh(self) -> bool {
        match self {
            NodeKind::System | NodeKind::Checkpoint | NodeKind::Own => false,
            NodeKind::User | NodeKind::Assistant | NodeKind::ToolResult => true,
        }
    }
}

/// An inclusive span of the surface named by the seqs of its first and last node.
/// `start` and `end` are seqs, not positions, and `start` need not be below `end`
/// numerically: the surface order decides.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SeqRange {
    /// The seq of the first node in the range.
    pub start: u64,
    /// The seq of the last node in the range (inclusive).
    pub end: u64,
}

impl SeqRange {
    /// The seqs of the nodes in this span, in surface order; empty when either end is
    /// not a node or the ends are out of order. Seqs are never compared numerically: a
    /// replaced node carries a newer seq than the nodes after it.
    pub fn seqs(self, nodes: &[RangeNode]) -> Vec<u64> {
        let position_of = |seq: u64| nodes.iter().position(|node| node.seq == seq);
        match (position_of(self.start), position_of(self.end)) {
            (Some(start), Some(end)) if start <= end => {
                nodes[start..=end].iter().map(|node| node.seq).collect()
            }
            _ => Vec::new(),
        }
    }
}

impl fmt::Display for SeqRange {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}..{}", self.start, self.end)
    }
}

/// Why a range could not be selected or split. Messages are the spec's strings where it
/// gives one; the variants carry where it went wrong.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum RangeError {
    /// The measured nodes are not the surface (CC-MNT-2 step 1): a different seq, or a
    /// different count, at `index`.
    #[error("measurement-mismatch")]
    MeasurementMismatch {
        /// The first position where the two lists differ.
        index: usize,
        /// The measured node's seq there, if the measurement is that long.
        measured: Option<u64>,
        /// The surface's seq there, if the surface is that long.
        surface: Option<u64>,
    },
    /// More tool results than tool calls so far (CC-MNT-2 step 3): the running tool
    /// balance went below 0 at this node.
    #[error("negative tool balance at seq {seq}")]
    NegativeToolBalance {
        /// The node where the balance went negative.
        seq: u64,
    },
    /// The summary range names a seq that is not on the surface, ends before it starts,
    /// or starts at a system message (CC-MNT-3).
    #[error("invalid summary range")]
    InvalidSummaryRange {
        /// The range asked for.
        range: SeqRange,
    },
    /// A tool batch is open just before the summary range's first node (CC-MNT-3).
    #[error("summary range begins inside a tool batch")]
    SummaryRangeBeginsInsideToolBatch {
        /// The range asked for.
        range: SeqRange,
        /// Tool calls still unanswered before its first node.
        open_calls: i64,
    },
    /// A tool batch is still open after the summary range's last node (CC-MNT-3).
    #[error("summary range ends inside a tool batch")]
    SummaryRangeEndsInsideToolBatch {
        /// The range asked for.
        range: SeqRange,
        /// Tool calls still unanswered after its last node.
        open_calls: i64,
    },
}

impl RangeError {
    /// The stable `SCREAMING_SNAKE` code for journals (`error{code,message}`, CC-JNL-3)
    /// and logs.
    pub fn code(&self) -> &'static str {
        match self {
            RangeError::MeasurementMismatch { .. } => "MEASUREMENT_MISMATCH",
            RangeError::NegativeToolBalance { .. } => "NEGATIVE_TOOL_BALANCE",
            RangeError::InvalidSummaryRange { .. } => "INVALID_SUMMARY_RANGE",
            RangeError::SummaryRangeBeginsInsideToolBatch { .. } => {
                "SUMMARY_RANGE_BEGINS_INSIDE_TOOL_BATCH"
            }
            RangeError::SummaryRangeEndsInsideToolBatch { .. } => {
                "SUMMARY_RANGE_ENDS_INSIDE_TOOL_BATCH"
            }
        }
    }
}

// ---------------------------------------------------------------------------------------
// CC-MNT-2

/// CC-MNT-2 step 1: the measured nodes must be the surface, seq for seq and in order;
/// otherwise [`RangeError::MeasurementMismatch`] at the first difference. A selection
/// priced on a stale measurement would name the wrong messages.
pub fn check_measurement(nodes: &[RangeNode], surface_seqs: &[u64]) -> Result<(), RangeError> {
    let longest = nodes.len().max(surface_seqs.len());
    for index in 0..longest {
        let measured = nodes.get(index).map(|node| node.seq);
        let surface = surface_seqs.get(index).copied();
        if measured != surface {
            return Err(RangeError::MeasurementMismatch {
                index,
                measured,
                surface,
            });
        }
    }
    Ok(())
}

/// CC-MNT-2 `selectRestRange(retain, minFresh)`, steps 2–6: the history maintenance may
/// replace, or `None` when there is none worth it.
///
/// 2. Walk back from the last node summing prices until the sum reaches `retain`; that
///    node is the first one kept. The last node is always kept, even when `retain` is 0.
///    If the whole surface sums to less than `retain`, everything is kept: `None`.
/// 3. End the range at the last balanced node before the first kept one, so the kept
///    tail starts with no tool batch open. The balance is summed over the nodes this walk
///    passes (those before the first kept node); a negative one is an error.
/// 4. Start at position 1 if the surface begins with a system message, else at 0. An
///    empty range (no balanced node, or only the system head) is `None`.
/// 5. If the range holds fewer than `min_fresh` fresh tokens, `None`.
/// 6. Otherwise the range, by seqs.
///
/// So a returned range never holds the last node, never starts at a system head, ends
/// with tool balance 0, and leaves a tail worth at least `retain` tokens.
pub fn select_rest_range(
    nodes: &[RangeNode],
    retain: u64,
    min_fresh: u64,
) -> Result<Option<SeqRange>, RangeError> {
    Ok(rest_span(nodes, retain, min_fresh)?.map(|span| span.seqs(nodes)))
}

/// An inclusive span of positions in the node list.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Span {
    start: usize,
    end: usize,
}

impl Span {
    fn nodes(self, nodes: &[RangeNode]) -> &[RangeNode] {
        &nodes[self.start..=self.end]
    }

    fn seqs(self, nodes: &[RangeNode]) -> SeqRange {
        SeqRange {
            start: nodes[self.start].seq,
            end: nodes[self.end].seq,
        }
    }
}

/// [`select_rest_range`] by position.
fn rest_span(nodes: &[RangeNode], retain: u64, min_fresh: u64) -> Result<Option<Span>, RangeError> {
    let Some(first_kept) = first_kept(nodes, retain) else {
        return Ok(None);
    };
    let mut balance = 0;
    let mut last_balanced = None;
    for (position, node) in nodes[..first_kept].iter().enumerate() {
        balance = add_to_balance(balance, node)?;
        if balance == 0 {
            last_balanced = Some(position);
        }
    }
    let Some(end) = last_balanced else {
        return Ok(None);
    };
    let start = usize::from(
        nodes
            .first()
            .is_some_and(|node| node.kind == NodeKind::System),
    );
    if end < start {
        return Ok(None);
    }
    let span = Span { start, end };
    if fresh_tokens(span.nodes(nodes)) < min_fresh {
        return Ok(None);
    }
    Ok(Some(span))
}

/// CC-MNT-2 step 2: the position of the first kept node, or `None` when there are no
/// nodes or the whole surface is worth less than `retain` (everything is kept).
fn first_kept(nodes: &[RangeNode], retain: u64) -> Option<usize> {
    let mut kept_tokens: u64 = 0;
    for (position, node) in nodes.iter().enumerate().rev() {
        kept_tokens = kept_tokens.saturating_add(node.tokens);
        if kept_tokens >= retain {
            return Some(position);
        }
    }
    None
}

/// The running tool balance after `node`, or the error if it goes negative there.
fn add_to_balance(balance: i64, node: &RangeNode) -> Result<i64, RangeError> {
    let next = balance.saturating_add(node.tool_delta());
    if next < 0 {
        return Err(RangeError::NegativeToolBalance { seq: node.seq });
    }
    Ok(next)
}

/// The fresh tokens of some nodes.
fn fresh_tokens(nodes: &[RangeNode]) -> u64 {
    nodes
        .iter()
        .fold(0, |sum: u64, node| sum.saturating_add(node.fresh_tokens()))
}

// ---------------------------------------------------------------------------------------
// CC-MNT-3

/// CC-MNT-3 `summaryCandidates(range, minFresh)`: the balanced prefixes of `range` with at
/// least `min_fresh` fresh tokens, largest first, each as its seqs in surface order. A
/// summary transaction tries them in this order until one fits its route (CC-SUM-2).
///
/// Errors, checked in this order:
/// - [`RangeError::InvalidSummaryRange`] (`invalid summary range`): a seq not on the
///   surface, an end before the start, or a start at a system message;
/// - [`RangeError::SummaryRangeBeginsInsideToolBatch`]: the node before the start is not
///   balanced;
/// - [`RangeError::NegativeToolBalance`] anywhere up to the end;
/// - [`RangeError::SummaryRangeEndsInsideToolBatch`]: the last node is not balanced.
pub fn summary_candidates(
    nodes: &[RangeNode],
    range: SeqRange,
    min_fresh: u64,
) -> Result<Vec<Vec<u64>>, RangeError> {
    let span = summary_span(nodes, range)?;
    let ends = balanced_prefix_ends(nodes, span, range, min_fresh)?;
    Ok(ends
        .into_iter()
        .map(|end| {
            Span {
                start: span.start,
                end,
            }
            .nodes(nodes)
            .iter()
            .map(|node| node.seq)
            .collect()
        })
        .collect())
}

/// Resolves a summary range to positions, checking it is a range at all.
fn summary_span(nodes: &[RangeNode], range: SeqRange) -> Result<Span, RangeError> {
    let invalid = || RangeError::InvalidSummaryRange { range };
    let position_of = |seq: u64| nodes.iter().position(|node| node.seq == seq);
    let start = position_of(range.start).ok_or_else(invalid)?;
    let end = position_of(range.end).ok_or_else(invalid)?;
    if end < start || nodes[start].kind == NodeKind::System {
        return Err(invalid());
    }
    Ok(Span { start, end })
}

/// The end positions of the balanced prefixes of `span` with at least `min_fresh` fresh
/// tokens, largest first, after checking that `span` itself neither begins nor ends
/// inside a tool batch.
fn balanced_prefix_ends(
    nodes: &[RangeNode],
    span: Span,
    range: SeqRange,
    min_fresh: u64,
) -> Result<Vec<usize>, RangeError> {
    let mut balance = 0;
    for node in &nodes[..span.start] {
        balance = add_to_balance(balance, node)?;
    }
    if balance != 0 {
        return Err(RangeError::SummaryRangeBeginsInsideToolBatch {
            range,
            open_calls: balance,
        });
    }
    let mut fresh: u64 = 0;
    let mut ends = Vec::new();
    for (offset, node) in span.nodes(nodes).iter().enumerate() {
        balance = add_to_balance(balance, node)?;
        fresh = fresh.saturating_add(node.fresh_tokens());
        if balance == 0 && fresh >= min_fresh {
            ends.push(span.start + offset);
        }
    }
    if balance != 0 {
        return Err(RangeError::SummaryRangeEndsInsideToolBatch {
            range,
            open_calls: balance,
        });
    }
    ends.reverse();
    Ok(ends)
}

// ---------------------------------------------------------------------------------------
// CC-MNT-4

/// What ranking needs besides the nodes (CC-MNT-4). All token values are on the action's
/// frozen basis; the caller converts the budget's values (`tail`, `L`), which CC-BUD-2
/// keeps non-negative.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RankInput {
    /// `retain = budget.tail ?? retainTokens ?? 0`: the recent tail that stays.
    pub retain: u64,
    /// `minFreshTokens`: the fresh text a candidate needs to be a `fresh-summary`.
    pub min_fresh_tokens: u64,
    /// The current load `Q`.
    pub load: u64,
    /// The release target `L`; `deficit = max(0, load − L)`.
    pub release_target: u64,
    /// `rangeStrategy`: how candidates of the same rule are ordered.
    pub strategy: RangeStrategy,
    /// `expectedCheckpointTokens`: the predicted price of the checkpoint that replaces a
    /// candidate. `expectedSaving = rangeCost − (this ?? 0)`, under either strategy; the
    /// config requires it with `target-prefix` (CC-CFG-1).
    pub expected_checkpoint_tokens: Option<u64>,
    /// Whether `basic-prefix` candidates may be proposed: true for automatic maintenance
    /// (CC-MNT-6), false for an explicit rest (CC-BND-2 R5).
    pub allow_fallback: bool,
}

/// Why a candidate is worth summarizing (CC-MNT-4). The declaration order is the rank
/// order: `fresh-summary` < `checkpoint-merge` < `basic-prefix`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum RangeRule {
    /// `fresh-summary`: at least `minFreshTokens` of fresh text to condense.
    FreshSummary,
    /// `checkpoint-merge`: nothing but checkpoints (besides system and own messages), at
    /// least two of them, which one checkpoint can replace.
    CheckpointMerge,
    /// `basic-prefix`: any other balanced prefix; a fallback under real pressure.
    BasicPrefix,
}

impl RangeRule {
    /// The spec's name, e.g. `fresh-summary`; the first part of a candidate's key.
    pub fn as_str(self) -> &'static str {
        match self {
            RangeRule::FreshSummary => "fresh-summary",
            RangeRule::CheckpointMerge => "checkpoint-merge",
            RangeRule::BasicPrefix => "basic-prefix",
        }
    }
}

impl fmt::Display for RangeRule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One ranked candidate: a balanced prefix of the rest range with its rule and
/// predictions (CC-MNT-4). Serialized camelCase as an entry of the journal's
/// `comparisons` (CC-JNL-3).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RangeCandidate {
    /// `rule:start:end`, e.g. `fresh-summary:1:3`; the last tie-breaker.
    pub key: String,
    /// Its rule.
    pub rule: RangeRule,
    /// The seq of its first node.
    pub start: u64,
    /// The seq of its last node.
    pub end: u64,
    /// How many surface nodes it spans.
    pub node_count: usize,
    /// `rangeCost = Σtokens` over its nodes.
    pub range_cost: u64,
    /// Its fresh tokens.
    pub fresh_tokens: u64,
    /// How many checkpoints it holds.
    pub checkpoints: usize,
    /// Tool-call blocks in it (`fewer calls` ranks first among equals).
    pub tool_calls: u64,
    /// `expectedSaving = rangeCost − (expectedCheckpointTokens ?? 0)`; negative when the
    /// predicted checkpoint is dearer than the range.
    pub expected_saving: i64,
    /// `coversDeficit = expectedSaving ≥ deficit`.
    pub covers_deficit: bool,
}

impl RangeCandidate {
    /// Its span as a [`SeqRange`], e.g. for [`summary_candidates`].
    pub fn range(&self) -> SeqRange {
        SeqRange {
            start: self.start,
            end: self.end,
        }
    }
}

/// The result of ranking (CC-MNT-4): the first candidate and everything it was compared
/// with. Serialized camelCase for the `selection` journal record (CC-JNL-3: `rule`,
/// `comparisons`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Proposal {
    /// The rest range the candidates are prefixes of: `selectRestRange(retain, 0)`.
    pub selected: SeqRange,
    /// The `retain` it was selected with.
    pub retain: u64,
    /// `deficit = max(0, load − L)`.
    pub deficit: u64,
    /// The strategy the candidates were ranked under.
    pub strategy: RangeStrategy,
    /// The winner: the first of `comparisons`.
    pub candidate: RangeCandidate,
    /// The `minFresh` its summary runs with: `minFreshTokens` for a `fresh-summary`, 0
    /// otherwise ("only `fresh-summary` runs with `minFreshTokens`"). Pass it with the
    /// candidate's range to [`summary_candidates`].
    pub summary_min_fresh_tokens: u64,
    /// Every candidate that passed the filter, in rank order.
    pub comparisons: Vec<RangeCandidate>,
}

/// CC-MNT-4: ranks the balanced prefixes of `selectRestRange(retain, 0)` and proposes the
/// first, or `None` when the range is empty or every candidate is filtered out.
///
/// - Rule: `fresh-summary` if fresh ≥ `minFreshTokens`; else `checkpoint-merge` if,
///   ignoring system and own messages, it holds only checkpoints and at least two; else
///   `basic-prefix`.
/// - Filter: drop candidates with no fresh tokens and no checkpoint; drop `basic-prefix`
///   when `allow_fallback` is false.
/// - Order: rule (fresh < merge < basic); then under `target-prefix` covering candidates
///   first, the smaller cost among them and the larger saving among the rest, and under
///   `basic-prefix` the larger cost; then fewer tool calls; then the key.
///
/// "Fewer calls" is read as fewer tool-call blocks in the candidate: the only calls a
/// candidate has before any summary request is made.
pub fn propose(nodes: &[RangeNode], input: &RankInput) -> Result<Option<Proposal>, RangeError> {
    let Some(span) = rest_span(nodes, input.retain, 0)? else {
        return Ok(None);
    };
    let selected = span.seqs(nodes);
    let deficit = input.load.saturating_sub(input.release_target);
    let mut ends = balanced_prefix_ends(nodes, span, selected, 0)?;
    ends.sort_unstable();
    // One sweep over the span: each prefix's sums extend the previous prefix's, so
    // ranking stays linear in the session's size (plus the sort).
    let mut running = Running::default();
    let mut next = span.start;
    let mut comparisons: Vec<RangeCandidate> = ends
        .into_iter()
        .map(|end| {
            for node in &nodes[next..=end] {
                running.add(node);
            }
            next = end + 1;
            let prefix = Span {
                start: span.start,
                end,
            };
            candidate(nodes, prefix, &running, input, deficit)
        })
        .filter(|candidate| candidate.fresh_tokens > 0 || candidate.checkpoints > 0)
        .filter(|candidate| input.allow_fallback || candidate.rule != RangeRule::BasicPrefix)
        .collect();
    comparisons.sort_by(|a, b| rank_order(input.strategy, a, b));
    let Some(first) = comparisons.first().cloned() else {
        return Ok(None);
    };
    let summary_min_fresh_tokens = match first.rule {
        RangeRule::FreshSummary => input.min_fresh_tokens,
        RangeRule::CheckpointMerge | RangeRule::BasicPrefix => 0,
    };
    Ok(Some(Proposal {
        selected,
        retain: input.retain,
        deficit,
        strategy: input.strategy,
        candidate: first,
        summary_min_fresh_tokens,
        comparisons,
    }))
}

/// The sums of a prefix, extended node by node.
#[derive(Debug, Clone, Copy)]
struct Running {
    cost: u64,
    fresh: u64,
    checkpoints: usize,
    only_checkpoints: bool,
    tool_calls: u64,
    count: usize,
}

impl Default for Running {
    fn default() -> Self {
        Self {
            cost: 0,
            fresh: 0,
            checkpoints: 0,
            only_checkpoints: true,
            tool_calls: 0,
            count: 0,
        }
    }
}

impl Running {
    fn add(&mut self, node: &RangeNode) {
        self.cost = self.cost.saturating_add(node.tokens);
        self.fresh = self.fresh.saturating_add(node.fresh_tokens());
        if node.kind == NodeKind::Checkpoint {
            self.checkpoints += 1;
        }
        self.only_checkpoints &= matches!(
            node.kind,
            NodeKind::Checkpoint | NodeKind::System | NodeKind::Own
        );
        self.tool_calls = self.tool_calls.saturating_add(u64::from(node.tool_calls));
        self.count += 1;
    }
}

/// Gives one measured prefix its rule and predictions.
fn candidate(
    nodes: &[RangeNode],
    prefix: Span,
    running: &Running,
    input: &RankInput,
    deficit: u64,
) -> RangeCandidate {
    let range_cost = running.cost;
    let fresh_tokens = running.fresh;
    let checkpoints = running.checkpoints;
    let only_checkpoints = running.only_checkpoints;
    let tool_calls = running.tool_calls;
    let rule = if fresh_tokens >= input.min_fresh_tokens {
        RangeRule::FreshSummary
    } else if only_checkpoints && checkpoints >= 2 {
        RangeRule::CheckpointMerge
    } else {
        RangeRule::BasicPrefix
    };
    let saving = i128::from(range_cost) - i128::from(input.expected_checkpoint_tokens.unwrap_or(0));
    let expected_saving =
        i64::try_from(saving).unwrap_or(if saving < 0 { i64::MIN } else { i64::MAX });
    let SeqRange { start, end } = prefix.seqs(nodes);
    RangeCandidate {
        key: format!("{}:{start}:{end}", rule.as_str()),
        rule,
        start,
        end,
        node_count: running.count,
        range_cost,
        fresh_tokens,
        checkpoints,
        tool_calls,
        expected_saving,
        covers_deficit: saving >= i128::from(deficit),
    }
}

/// The CC-MNT-4 sort: rule, then the strategy's preference, then fewer tool calls, then
/// the key.
fn rank_order(strategy: RangeStrategy, a: &RangeCandidate, b: &RangeCandidate) -> Ordering {
    a.rule
        .cmp(&b.rule)
        .then_with(|| strategy_order(strategy, a, b))
        .then_with(|| a.tool_calls.cmp(&b.tool_calls))
        .then_with(|| a.key.cmp(&b.key))
}

/// Step 2 of the CC-MNT-4 sort.
fn strategy_order(strategy: RangeStrategy, a: &RangeCandidate, b: &RangeCandidate) -> Ordering {
    match strategy {
        RangeStrategy::BasicPrefix => b.range_cost.cmp(&a.range_cost),
        RangeStrategy::TargetPrefix => match (a.covers_deficit, b.covers_deficit) {
            (true, true) => a.range_cost.cmp(&b.range_cost),
            (true, false) => Ordering::Less,
            (false, true) => Ordering::Greater,
            (false, false) => b.expected_saving.cmp(&a.expected_saving),
        },
    }
}

// ---------------------------------------------------------------------------------------

#[cfg(test)]
mod tests {
    //! Every CC-MNT-2, CC-MNT-3 and CC-MNT-4 vector, then properties.
    //!
    //! Readings of the vectors that leave something out:
    //! - CC-MNT-2's second and third vectors give no `minFresh`. With `minFresh` 0 they
    //!   would select the checkpoint and state (`{ckpt, state}`), so they are read with the
    //!   config default `minFreshTokens` 1024; the tests also show the 0 case.
    //! - CC-MNT-2's "explicit rest, unknown C": no budget, so `retain = retainTokens ?? 0`
    //!   (CC-MNT-4 setup); `minFresh` is again the default 1024.
    //! - Seqs the vectors leave out (checkpoint and state in CC-MNT-2, the system head)
    //!   are chosen freely; only surface order matters.
    //! - CC-MNT-3's `20..20` is read with the same `minFresh` 100 as the first vector
    //!   (with 0 a state-only range would be its own candidate).
    //! - CC-MNT-4's vectors use 100 tokens a node and, where no strategy is named,
    //!   `basic-prefix`; "deficit 130" is `load 1130, L 1000`. The `[ckpt1, state2,
    //!   user4]` "with fallback" case has two basic prefixes; the larger (`1..2`) wins.
    #![allow(clippy::unwrap_used)]

    use proptest::prelude::*;

    use super::*;

    fn node(
        seq: u64,
        tokens: u64,
        kind: NodeKind,
        tool_calls: u32,
        tool_results: u32,
    ) -> RangeNode {
        RangeNode {
            seq,
            tokens,
            kind,
            tool_calls,
            tool_results,
        }
    }
    fn system(seq: u64, tokens: u64) -> RangeNode {
        node(seq, tokens, NodeKind::System, 0, 0)
    }
    fn checkpoint(seq: u64, tokens: u64) -> RangeNode {
        node(seq, tokens, NodeKind::Checkpoint, 0, 0)
    }
    fn state(seq: u64, tokens: u64) -> RangeNode {
        node(seq, tokens, NodeKind::Own, 0, 0)
    }
    fn user(seq: u64, tokens: u64) -> RangeNode {
        node(seq, tokens, NodeKind::User, 0, 0)
    }
    fn assistant(seq: u64, tokens: u64, tool_calls: u32) -> RangeNode {
        node(seq, tokens, NodeKind::Assistant, tool_calls, 0)
    }
    fn tool(seq: u64, tokens: u64) -> RangeNode {
        node(seq, tokens, NodeKind::ToolResult, 0, 1)
    }
    fn range(start: u64, end: u64) -> SeqRange {
        SeqRange { start, end }
    }

    /// The config default `minFreshTokens`.
    const DEFAULT_MIN_FRESH: u64 = 1024;

    // -- CC-MNT-2 -------------------------------------------------------------------

    #[test]
    fn cc_mnt_2_vector_tool_batch_kept_whole() {
        // The walk back stops at t9; u7 is the last balanced node before it.
        let nodes = [
            user(7, 2000),
            assistant(2, 1000, 2),
            tool(3, 1000),
            tool(9, 1000),
            user(10, 10),
        ];
        assert_eq!(select_rest_range(&nodes, 800, 1000), Ok(Some(range(7, 7))));
    }

    #[test]
    fn cc_mnt_2_vector_checkpoint_and_state_only_is_null() {
        let nodes = [checkpoint(5, 8000), state(6, 8000), user(7, 2000)];
        assert_eq!(select_rest_range(&nodes, 1500, DEFAULT_MIN_FRESH), Ok(None));
        // Reading: only minFresh makes it null.
        assert_eq!(select_rest_range(&nodes, 1500, 0), Ok(Some(range(5, 6))));
    }

    #[test]
    fn cc_mnt_2_vector_system_head_skipped_and_no_fresh_is_null() {
        let nodes = [
            system(0, 20000),
            checkpoint(1, 6000),
            state(2, 500),
            user(3, 25000),
        ];
        assert_eq!(
            select_rest_range(&nodes, 20000, DEFAULT_MIN_FRESH),
            Ok(None)
        );
        assert_eq!(select_rest_range(&nodes, 20000, 0), Ok(Some(range(1, 2))));
    }

    #[test]
    fn cc_mnt_2_vector_explicit_rest_unknown_capacity() {
        let nodes = [user(0, 2000), user(1, 2000), user(2, 2000)];
        // No budget and no retainTokens: retain 0, the last node alone is kept.
        assert_eq!(
            select_rest_range(&nodes, 0, DEFAULT_MIN_FRESH),
            Ok(Some(range(0, 1)))
        );
        // retainTokens 3000: the walk back stops at node 1.
        assert_eq!(
            select_rest_range(&nodes, 3000, DEFAULT_MIN_FRESH),
            Ok(Some(range(0, 0)))
        );
    }

    #[test]
    fn cc_mnt_2_last_node_is_always_kept() {
        assert_eq!(select_rest_range(&[user(1, 5000)], 0, 0), Ok(None));
        assert_eq!(select_rest_range(&[], 0, 0), Ok(None));
        // A system head alone before the kept node leaves an empty range.
        assert_eq!(
            select_rest_range(&[system(0, 10), user(1, 10)], 0, 0),
            Ok(None)
        );
    }

    #[test]
    fn cc_mnt_2_retain_larger_than_the_surface_keeps_everything() {
        let nodes = [user(0, 100), user(1, 100)];
        assert_eq!(select_rest_range(&nodes, 201, 0), Ok(None));
        assert_eq!(select_rest_range(&nodes, 200, 0), Ok(None));
        assert_eq!(select_rest_range(&nodes, 100, 0), Ok(Some(range(0, 0))));
    }

    #[test]
    fn cc_mnt_2_no_balanced_node_before_the_tail_is_null() {
        let nodes = [assistant(0, 100, 1), tool(1, 100), user(2, 100)];
        // First kept is the tool result: the batch is open before it.
        assert_eq!(select_rest_range(&nodes, 200, 0), Ok(None));
    }

    #[test]
    fn cc_mnt_2_negative_balance_is_an_error() {
        let nodes = [user(0, 100), tool(4, 100), user(2, 100)];
        let error = select_rest_range(&nodes, 0, 0).unwrap_err();
        assert_eq!(error, RangeError::NegativeToolBalance { seq: 4 });
        assert_eq!(error.code(), "NEGATIVE_TOOL_BALANCE");
    }

    #[test]
    fn cc_mnt_2_measurement_must_equal_the_surface() {
        let nodes = [user(3, 1), user(1, 1)];
        assert_eq!(check_measurement(&nodes, &[3, 1]), Ok(()));
        let mismatch = check_measurement(&nodes, &[3, 2]).unwrap_err();
        assert_eq!(
            mismatch,
            RangeError::MeasurementMismatch {
                index: 1,
                measured: Some(1),
                surface: Some(2),
            }
        );
        assert_eq!(mismatch.to_string(), "measurement-mismatch");
        assert_eq!(mismatch.code(), "MEASUREMENT_MISMATCH");
        assert_eq!(
            check_measurement(&nodes, &[3, 1, 5]),
            Err(RangeError::MeasurementMismatch {
                index: 2,
                measured: None,
                surface: Some(5),
            })
        );
    }

    // -- CC-MNT-3 -------------------------------------------------------------------

    /// `[u40, a2(2 calls), t7, t9, u15, state20]`, 100 tokens each.
    fn mnt_3_surface() -> [RangeNode; 6] {
        [
            user(40, 100),
            assistant(2, 100, 2),
            tool(7, 100),
            tool(9, 100),
            user(15, 100),
            state(20, 100),
        ]
    }

    #[test]
    fn cc_mnt_3_vector_balanced_prefixes_largest_first() {
        assert_eq!(
            summary_candidates(&mnt_3_surface(), range(40, 15), 100),
            Ok(vec![vec![40, 2, 7, 9, 15], vec![40, 2, 7, 9], vec![40]])
        );
    }

    #[test]
    fn cc_mnt_3_vector_state_only_range_has_no_candidate() {
        assert_eq!(
            summary_candidates(&mnt_3_surface(), range(20, 20), 100),
            Ok(vec![])
        );
    }

    #[test]
    fn cc_mnt_3_vector_range_ending_inside_a_tool_batch_fails() {
        let error = summary_candidates(&mnt_3_surface(), range(40, 7), 100).unwrap_err();
        assert_eq!(
            error,
            RangeError::SummaryRangeEndsInsideToolBatch {
                range: range(40, 7),
                open_calls: 1,
            }
        );
        assert_eq!(error.to_string(), "summary range ends inside a tool batch");
        assert_eq!(error.code(), "SUMMARY_RANGE_ENDS_INSIDE_TOOL_BATCH");
    }

    #[test]
    fn cc_mnt_3_vector_range_beginning_inside_a_tool_batch_fails() {
        let error = summary_candidates(&mnt_3_surface(), range(7, 15), 100).unwrap_err();
        assert_eq!(
            error,
            RangeError::SummaryRangeBeginsInsideToolBatch {
                range: range(7, 15),
                open_calls: 2,
            }
        );
        assert_eq!(
            error.to_string(),
            "summary range begins inside a tool batch"
        );
        assert_eq!(error.code(), "SUMMARY_RANGE_BEGINS_INSIDE_TOOL_BATCH");
    }

    #[test]
    fn cc_mnt_3_invalid_summary_ranges() {
        let nodes = [system(0, 100), user(1, 100), user(2, 100)];
        for bad in [range(0, 1), range(2, 1), range(1, 99), range(99, 2)] {
            let error = summary_candidates(&nodes, bad, 0).unwrap_err();
            assert_eq!(error, RangeError::InvalidSummaryRange { range: bad });
            assert_eq!(error.to_string(), "invalid summary range");
            assert_eq!(error.code(), "INVALID_SUMMARY_RANGE");
        }
        assert_eq!(
            summary_candidates(&nodes, range(1, 2), 0),
            Ok(vec![vec![1, 2], vec![1]])
        );
    }

    // -- CC-MNT-4 -------------------------------------------------------------------

    /// Users 1–4 at 100 tokens.
    fn mnt_4_users() -> Vec<RangeNode> {
        (1..=4).map(|seq| user(seq, 100)).collect()
    }

    /// The CC-MNT-4 vector input: retain 100, minFresh 100, basic-prefix, fallback on.
    fn mnt_4_input() -> RankInput {
        RankInput {
            retain: 100,
            min_fresh_tokens: 100,
            load: 0,
            release_target: 1000,
            strategy: RangeStrategy::BasicPrefix,
            expected_checkpoint_tokens: None,
            allow_fallback: true,
        }
    }

    fn target_prefix(load: u64) -> RankInput {
        RankInput {
            load,
            strategy: RangeStrategy::TargetPrefix,
            expected_checkpoint_tokens: Some(50),
            ..mnt_4_input()
        }
    }

    /// The keys of a proposal's comparisons, winner first.
    fn keys(proposal: &Proposal) -> Vec<&str> {
        proposal
            .comparisons
            .iter()
            .map(|candidate| candidate.key.as_str())
            .collect()
    }

    #[test]
    fn cc_mnt_4_vector_basic_prefix_takes_the_largest() {
        let proposal = propose(&mnt_4_users(), &mnt_4_input()).unwrap().unwrap();
        assert_eq!(proposal.selected, range(1, 3));
        assert_eq!(proposal.candidate.end, 3);
        assert_eq!(
            keys(&proposal),
            [
                "fresh-summary:1:3",
                "fresh-summary:1:2",
                "fresh-summary:1:1"
            ]
        );
        assert_eq!(proposal.summary_min_fresh_tokens, 100);
    }

    #[test]
    fn cc_mnt_4_vector_target_prefix_smallest_covering() {
        let proposal = propose(&mnt_4_users(), &target_prefix(1130))
            .unwrap()
            .unwrap();
        assert_eq!(proposal.deficit, 130);
        assert_eq!(proposal.candidate.end, 2);
        assert_eq!(proposal.candidate.expected_saving, 150);
        assert!(proposal.candidate.covers_deficit);
        assert_eq!(
            keys(&proposal),
            [
                "fresh-summary:1:2",
                "fresh-summary:1:3",
                "fresh-summary:1:1"
            ]
        );
    }

    #[test]
    fn cc_mnt_4_vector_target_prefix_largest_saving_when_none_covers() {
        let proposal = propose(&mnt_4_users(), &target_prefix(2000))
            .unwrap()
            .unwrap();
        assert_eq!(proposal.deficit, 1000);
        assert_eq!(proposal.candidate.end, 3);
        assert_eq!(proposal.candidate.expected_saving, 250);
        assert!(!proposal.candidate.covers_deficit);
    }

    #[test]
    fn cc_mnt_4_vector_checkpoint_merge_without_fallback() {
        let nodes = [
            checkpoint(1, 100),
            state(2, 100),
            checkpoint(3, 100),
            user(4, 100),
        ];
        let input = RankInput {
            allow_fallback: false,
            ..mnt_4_input()
        };
        let proposal = propose(&nodes, &input).unwrap().unwrap();
        assert_eq!(proposal.candidate.rule, RangeRule::CheckpointMerge);
        assert_eq!(proposal.candidate.key, "checkpoint-merge:1:3");
        assert_eq!(proposal.candidate.checkpoints, 2);
        assert_eq!(proposal.summary_min_fresh_tokens, 0);
        assert_eq!(keys(&proposal), ["checkpoint-merge:1:3"]);
    }

    #[test]
    fn cc_mnt_4_vector_single_checkpoint_without_fallback_is_null() {
        let nodes = [checkpoint(1, 100), state(2, 100), user(4, 100)];
        let input = RankInput {
            allow_fallback: false,
            ..mnt_4_input()
        };
        assert_eq!(propose(&nodes, &input), Ok(None));
    }

    #[test]
    fn cc_mnt_4_vector_single_checkpoint_with_fallback_is_basic_prefix() {
        let nodes = [checkpoint(1, 100), state(2, 100), user(4, 100)];
        let proposal = propose(&nodes, &mnt_4_input()).unwrap().unwrap();
        assert_eq!(proposal.candidate.rule, RangeRule::BasicPrefix);
        assert_eq!(keys(&proposal), ["basic-prefix:1:2", "basic-prefix:1:1"]);
        assert_eq!(proposal.summary_min_fresh_tokens, 0);
    }

    #[test]
    fn cc_mnt_4_vector_real_user_message_is_fresh_summary() {
        let nodes = [checkpoint(1, 100), user(2, 100), user(4, 100)];
        for allow_fallback in [false, true] {
            let input = RankInput {
                allow_fallback,
                ..mnt_4_input()
            };
            let proposal = propose(&nodes, &input).unwrap().unwrap();
            assert_eq!(proposal.candidate.rule, RangeRule::FreshSummary);
            assert_eq!(proposal.candidate.key, "fresh-summary:1:2");
        }
    }

    #[test]
    fn cc_mnt_4_drops_candidates_without_fresh_tokens_or_checkpoints() {
        // Only a state message before the kept tail: nothing to propose, even as a
        // fallback.
        let nodes = [state(1, 5000), user(2, 100)];
        assert_eq!(propose(&nodes, &mnt_4_input()), Ok(None));
    }

    #[test]
    fn cc_mnt_4_ties_break_on_fewer_tool_calls_then_key() {
        // Two balanced prefixes of equal cost (the batch is priced 0): the one without
        // the tool calls ranks first.
        let nodes = [user(1, 100), assistant(2, 0, 1), tool(3, 0), user(4, 100)];
        let proposal = propose(&nodes, &mnt_4_input()).unwrap().unwrap();
        assert_eq!(keys(&proposal), ["fresh-summary:1:1", "fresh-summary:1:3"]);
        assert_eq!(proposal.comparisons[1].tool_calls, 1);
    }

    #[test]
    fn cc_mnt_4_proposal_serializes_camel_case() {
        let proposal = propose(&mnt_4_users(), &target_prefix(1130))
            .unwrap()
            .unwrap();
        let json = serde_json::to_value(&proposal).unwrap();
        assert_eq!(
            json["candidate"],
            serde_json::json!({
                "key": "fresh-summary:1:2",
                "rule": "fresh-summary",
                "start": 1,
                "end": 2,
                "nodeCount": 2,
                "rangeCost": 200,
                "freshTokens": 200,
                "checkpoints": 0,
                "toolCalls": 0,
                "expectedSaving": 150,
                "coversDeficit": true,
            })
        );
        assert_eq!(json["selected"], serde_json::json!({"start": 1, "end": 3}));
        assert_eq!(json["strategy"], "target-prefix");
        assert_eq!(json["summaryMinFreshTokens"], 100);
        assert_eq!(json["comparisons"].as_array().unwrap().len(), 3);
    }

    // -- Properties -----------------------------------------------------------------

    /// A surface with no negative tool balance: a tool result only answers an open call.
    fn surface() -> impl Strategy<Value = Vec<RangeNode>> {
        (
            any::<bool>(),
            prop::collection::vec((0u8..6, 0u64..3000, 0u32..4), 0..40),
        )
            .prop_map(|(system_head, raw)| {
                // Distinct seqs that do not follow surface order.
                let seq_at = |position: usize| (position as u64 * 7919) % 10007;
                let mut nodes = Vec::new();
                if system_head {
                    nodes.push(system(seq_at(0), 500));
                }
                let mut open_calls = 0;
                for (choice, tokens, calls) in raw {
                    let seq = seq_at(nodes.len());
                    let next = match choice {
                        0 => checkpoint(seq, tokens),
                        1 => state(seq, tokens),
                        2 => user(seq, tokens),
                        3 => {
                            open_calls += calls;
                            assistant(seq, tokens, calls)
                        }
                        _ if open_calls > 0 => {
                            open_calls -= 1;
                            tool(seq, tokens)
                        }
                        _ => user(seq, tokens),
                    };
                    nodes.push(next);
                }
                nodes
            })
    }

    fn position(nodes: &[RangeNode], seq: u64) -> usize {
        nodes.iter().position(|node| node.seq == seq).unwrap()
    }

    fn balance_through(nodes: &[RangeNode], position: usize) -> i64 {
        nodes[..=position].iter().map(RangeNode::tool_delta).sum()
    }

    proptest! {
        #[test]
        fn cc_mnt_2_selected_range_invariants(
            nodes in surface(),
            retain in 0u64..20_000,
            min_fresh in 0u64..5_000,
        ) {
            let Some(selected) = select_rest_range(&nodes, retain, min_fresh).unwrap() else {
                return Ok(());
            };
            let start = position(&nodes, selected.start);
            let end = position(&nodes, selected.end);
            prop_assert!(start <= end);
            prop_assert!(end + 1 < nodes.len(), "the last node is kept");
            prop_assert!(start > 0 || nodes[0].kind != NodeKind::System);
            prop_assert!(start == 0 || (start == 1 && nodes[0].kind == NodeKind::System));
            prop_assert_eq!(balance_through(&nodes, end), 0);
            prop_assert!(fresh_tokens(&nodes[start..=end]) >= min_fresh);
            let tail: u64 = nodes[end + 1..].iter().map(|node| node.tokens).sum();
            prop_assert!(tail >= retain);
            // The whole range is its own largest summary candidate.
            let candidates = summary_candidates(&nodes, selected, min_fresh).unwrap();
            let whole: Vec<u64> = nodes[start..=end].iter().map(|node| node.seq).collect();
            prop_assert_eq!(candidates.first(), Some(&whole));
        }

        #[test]
        fn cc_mnt_3_candidates_are_balanced_prefixes_largest_first(
            nodes in surface(),
            min_fresh in 0u64..5_000,
        ) {
            let Some(selected) = select_rest_range(&nodes, 0, 0).unwrap() else {
                return Ok(());
            };
            let start = position(&nodes, selected.start);
            let candidates = summary_candidates(&nodes, selected, min_fresh).unwrap();
            for pair in candidates.windows(2) {
                prop_assert!(pair[0].len() > pair[1].len());
            }
            for candidate in &candidates {
                let end = start + candidate.len() - 1;
                let seqs: Vec<u64> = nodes[start..=end].iter().map(|node| node.seq).collect();
                prop_assert_eq!(candidate, &seqs);
                prop_assert_eq!(balance_through(&nodes, end), 0);
                prop_assert!(fresh_tokens(&nodes[start..=end]) >= min_fresh);
            }
        }

        #[test]
        fn cc_mnt_4_proposal_invariants(
            nodes in surface(),
            retain in 0u64..10_000,
            min_fresh_tokens in 1u64..3_000,
            load in 0u64..20_000,
            target in any::<bool>(),
            allow_fallback in any::<bool>(),
        ) {
            let input = RankInput {
                retain,
                min_fresh_tokens,
                load,
                release_target: 5_000,
                strategy: if target { RangeStrategy::TargetPrefix } else { RangeStrategy::BasicPrefix },
                expected_checkpoint_tokens: target.then_some(300),
                allow_fallback,
            };
            let Some(proposal) = propose(&nodes, &input).unwrap() else {
                return Ok(());
            };
            prop_assert_eq!(Some(proposal.selected), select_rest_range(&nodes, retain, 0).unwrap());
            prop_assert_eq!(proposal.comparisons.first(), Some(&proposal.candidate));
            let selected_start = position(&nodes, proposal.selected.start);
            let selected_end = position(&nodes, proposal.selected.end);
            for pair in proposal.comparisons.windows(2) {
                prop_assert_ne!(rank_order(input.strategy, &pair[0], &pair[1]), Ordering::Greater);
            }
            for candidate in &proposal.comparisons {
                prop_assert_eq!(position(&nodes, candidate.start), selected_start);
                let end = position(&nodes, candidate.end);
                prop_assert!(end <= selected_end);
                prop_assert_eq!(balance_through(&nodes, end), 0);
                prop_assert!(candidate.fresh_tokens > 0 || candidate.checkpoints > 0);
                prop_assert!(allow_fallback || candidate.rule != RangeRule::BasicPrefix);
                prop_assert_eq!(
                    candidate.rule == RangeRule::FreshSummary,
                    candidate.fresh_tokens >= min_fresh_tokens
                );
            }
        }
    }
}
