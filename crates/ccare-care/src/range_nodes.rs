//! The session's surface as range selection sees it ([`crate::range::RangeNode`]):
//! each node priced on the frozen basis and classified (checkpoint, own message, tool
//! batch counts), and the deep rest's clear range (CC-DEEP-1).

use ccare_core::{ContentBlock, Message, Source};
use ccare_session::DerivedView;
use serde::Serialize;

use crate::care::{CareError, Frozen};
use crate::range::{NodeKind, RangeNode};

/// The surface of `view`, priced with `frozen` (rounded up per node).
pub(crate) fn nodes(view: &DerivedView, frozen: &Frozen) -> Result<Vec<RangeNode>, CareError> {
    let pricer = frozen
        .pricing
        .pricer(&frozen.meter)
        .map_err(|error| CareError::Pricing(error.to_string()))?;
    let scale = pricer.text_scale();
    let prices = frozen
        .surface_prices(&pricer, view)
        .map_err(|error| CareError::Pricing(error.to_string()))?;
    view.messages
        .iter()
        .zip(prices)
        .map(|(derived, price)| {
            Ok(RangeNode {
                seq: derived.seq,
                tokens: price.ceil(scale),
                kind: kind_of(&derived.message, derived.role),
                tool_calls: count(&derived.message, |block| {
                    matches!(block, ContentBlock::ToolCall(_))
                }),
                tool_results: count(&derived.message, |block| {
                    matches!(block, ContentBlock::ToolResult(_))
                }),
            })
        })
        .collect()
}

fn count(message: &Message, predicate: impl Fn(&ContentBlock) -> bool) -> u32 {
    u32::try_from(
        message
            .content
            .iter()
            .filter(|block| predicate(block))
            .count(),
    )
    .unwrap_or(u32::MAX)
}

/// Whether a message is context-care's own (a notice or request of a
/// `plugin:context-care:*` kind): never fresh, kept out of transcripts and memo keys.
pub(crate) fn is_own(message: &Message) -> bool {
    matches!(&message.source, Some(Source::Plugin(plugin)) if plugin.kind.starts_with("plugin:context-care:"))
}

fn kind_of(message: &Message, role: ccare_core::Role) -> NodeKind {
    if matches!(message.source, Some(Source::CompactCheckpoint { .. })) {
        return NodeKind::Checkpoint;
    }
    if is_own(message) {
        return NodeKind::Own;
    }
    match role {
        ccare_core::Role::Assistant => NodeKind::Assistant,
        ccare_core::Role::User
            if message
                .content
                .iter()
                .any(|block| matches!(block, ContentBlock::ToolResult(_))) =>
        {
            NodeKind::ToolResult
        }
        ccare_core::Role::User => NodeKind::User,
    }
}

/// CC-DEEP-1: what a deep rest clears, as seqs.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ClearRange {
    /// The first cleared seq.
    pub start: u64,
    /// The last cleared seq.
    pub end: u64,
    /// Every cleared seq, in surface order.
    pub shadowed_seqs: Vec<u64>,
}

/// CC-DEEP-1 clear range: from the first node after a `system/message` head (else the
/// first node) to the last balanced index; `None` on an empty surface or when nothing
/// lies in between.
pub fn deep_clear_range(nodes: &[RangeNode]) -> Option<ClearRange> {
    let start = usize::from(nodes.first()?.kind == NodeKind::System);
    let mut balance: i64 = 0;
    let mut end = None;
    for (index, node) in nodes.iter().enumerate() {
        balance += i64::from(node.tool_calls) - i64::from(node.tool_results);
        if balance == 0 && index >= start {
            end = Some(index);
        }
    }
    let end = end?;
    let shadowed_seqs: Vec<u64> = nodes
        .get(start..=end)?
        .iter()
        .map(|node| node.seq)
        .collect();
    Some(ClearRange {
        start: *shadowed_seqs.first()?,
        end: *shadowed_seqs.last()?,
        shadowed_seqs,
    })
}
