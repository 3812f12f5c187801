//! Summary repair hooks (CC-SUM-4): when a summary call fails, a registered
//! [`SummaryRepair`] may rewrite the selected history so that the next call can
//! succeed (e.g. replace a huge tool result or an attachment the summary route refuses
//! with a smaller stand-in), and the transaction then summarizes the repaired
//! selection.
//!
//! A hook repairs only by appending durable events to the session: a replacing
//! `user/message` or `tool/result` (`SurfaceOp::Replace` over selected nodes, citing
//! them in `source_event_seqs`), as pruning does. Its `Ok` is a claim, never proof: the
//! transaction accepts a repair only if the surface shows all of these (CC-SUM-4),
//! compared with the surface as the transaction last accepted it:
//!
//! 1. everything outside the selection is unchanged: the same seqs with the same
//!    messages, before and after it;
//! 2. each live node now in the selection's place is a selected seq, or a replacement
//!    written after the transaction opened (seq at least the snapshot head) whose
//!    sources, expanded recursively through events written since, are selected;
//!    `compaction/*` markers are not sources, and a selected seq is not expanded
//!    (it may itself be an earlier checkpoint with older sources);
//! 3. at least one such replacement exists (so a hook `Ok` without a durable change
//!    authorizes nothing);
//! 4. every selected node is covered: still live, or reached from a replacement;
//! 5. the selection's price on the action's frozen basis is strictly lower.
//!
//! The spec's first check also covers the request header. context-care's summary
//! request is a transcript of the selection with the instruction, without the
//! conversation's header (summary.rs), so there is no header to compare.
//!
//! A rejected repair that changed the surface ends the transaction with the original
//! failure (nothing after it could commit on a surface the transaction did not
//! accept); a hook error is logged and never replaces the original failure.
//!
//! There is no built-in image offload. The spec offloads the oldest un-offloaded
//! images inside the selection on `IMAGE_OFFLOAD_REQUIRED`, and only with a mounted
//! offload projection. ccare's summary request is a text transcript in which an image
//! is the text `[image]`, so no image reaches the summary route, and the host has no
//! image-offload projection. An offload plugin would register as a [`SummaryRepair`]
//! (with [`crate::ContextCare::with_summary_repair`]) and replace the image-bearing
//! messages it offloads.

use std::collections::HashSet;
use std::sync::Arc;

use ccare_agent::BoxFuture;
use ccare_core::Message;
use ccare_llm::CancellationToken;
use ccare_session::{DerivedMessage, DerivedView, Session};
use serde::Serialize;

use crate::range::RangeNode;
use crate::summary::SummaryFailure;

/// A summary repair hook (CC-SUM-4's summary-error hook), registered with
/// [`crate::ContextCare::with_summary_repair`]. Hooks are tried in registration order
/// after a failed summary call, until one repair is accepted or
/// `max_summary_repair_retries` attempts were made in the action.
pub trait SummaryRepair: Send + Sync {
    /// A stable name, recorded with every attempt in the action's journal record.
    fn name(&self) -> &str;

    /// Tries to repair `request.selection` after `request.failure` by appending
    /// durable events to `request.session`. `Ok` without a change inside the selection
    /// is not a repair; an error is logged and the original failure stands.
    fn repair<'a>(&'a self, request: RepairRequest<'a>) -> BoxFuture<'a, Result<(), RepairError>>;
}

/// What a repair hook is asked to repair.
#[derive(Debug, Clone, Copy)]
#[non_exhaustive]
pub struct RepairRequest<'a> {
    /// The session; the repair appends to it.
    pub session: &'a Session,
    /// Why the summary call failed (the provider's code, or the transaction's).
    pub failure: &'a SummaryFailure,
    /// The seqs the failed call summarized, in surface order: one contiguous span of
    /// the surface. A replacement must lie inside it and cite only these.
    pub selection: &'a [u64],
    /// The log head when the transaction opened: a replacement's seq is at least this.
    pub snapshot_head: u64,
    /// Cancelled when the caller or the plugin's lifetime is (CC-SER-1).
    pub cancel: &'a CancellationToken,
}

/// Why a repair hook could not repair.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("summary repair failed: {message}")]
pub struct RepairError {
    /// What went wrong.
    pub message: String,
}

impl RepairError {
    /// An error with `message`.
    pub fn new(message: impl Into<String>) -> Self {
        Self {
            message: message.into(),
        }
    }
}

/// Why a repair was not accepted, in the order of the checks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
#[non_exhaustive]
pub enum RepairRejection {
    /// The hook returned an error.
    HookFailed,
    /// Something outside the selection changed (check 1).
    OutsideChanged,
    /// A node in the selection's place is neither selected nor new (check 2).
    ForeignNode,
    /// A replacement cites a source outside the selection, or none (check 2).
    SourcesOutside,
    /// Nothing in the selection was replaced (check 3).
    NoReplacement,
    /// A selected node is neither live nor cited by a replacement (check 4).
    Uncovered,
    /// The selection did not get cheaper on the frozen basis (check 5).
    NotCheaper,
    /// The repaired surface could not be priced.
    PricingFailed,
}

/// One repair attempt of an action, as its journal record keeps it (`repairs[]`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct RepairAttempt {
    /// The hook's name.
    pub hook: String,
    /// The failure code it was asked to repair.
    pub code: String,
    /// Whether the repair was accepted.
    pub accepted: bool,
    /// Why not, when it was not.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rejected: Option<RepairRejection>,
}

/// The surface as a summary transaction last accepted it: every live node's seq and
/// message.
#[derive(Debug, Clone)]
pub(crate) struct SurfaceSnapshot {
    nodes: Vec<(u64, Arc<Message>)>,
}

impl SurfaceSnapshot {
    pub(crate) fn of(view: &DerivedView) -> Self {
        Self {
            nodes: view
                .messages
                .iter()
                .map(|derived| (derived.seq, Arc::clone(&derived.message)))
                .collect(),
        }
    }

    /// Whether `view` shows exactly this surface.
    pub(crate) fn matches(&self, view: &DerivedView) -> bool {
        self.nodes.len() == view.messages.len() && same_nodes(&self.nodes, &view.messages)
    }
}

/// Whether `actual` starts with the nodes of `expected`: the same seqs with equal
/// messages.
fn same_nodes(expected: &[(u64, Arc<Message>)], actual: &[DerivedMessage]) -> bool {
    expected.len() <= actual.len()
        && expected
            .iter()
            .zip(actual)
            .all(|((seq, message), derived)| {
                *seq == derived.seq
                    && (Arc::ptr_eq(message, &derived.message) || **message == *derived.message)
            })
}

/// What a repair is checked against: the surface before it, the selection the failed
/// call summarized, the log head when the transaction opened, and the nodes before it
/// priced on the frozen basis.
pub(crate) struct RepairCheck<'a> {
    pub(crate) session: &'a Session,
    pub(crate) before: &'a SurfaceSnapshot,
    pub(crate) selection: &'a [u64],
    pub(crate) snapshot_head: u64,
    pub(crate) before_nodes: &'a [RangeNode],
}

impl RepairCheck<'_> {
    /// The CC-SUM-4 acceptance checks of the surface `after` (priced as `after_nodes`);
    /// on success, the new selection: the seqs now in the selection's place.
    pub(crate) fn accept(
        &self,
        after: &DerivedView,
        after_nodes: &[RangeNode],
    ) -> Result<Vec<u64>, RepairRejection> {
        // 1. Outside the selection: the same seqs with the same messages.
        let first = self
            .selection
            .first()
            .ok_or(RepairRejection::NoReplacement)?;
        let start = self
            .before
            .nodes
            .iter()
            .position(|(seq, _)| seq == first)
            .ok_or(RepairRejection::OutsideChanged)?;
        let end = start + self.selection.len();
        // The selection is one contiguous span of the surface it was taken from.
        let span_is_selection = self.before.nodes.get(start..end).is_some_and(|span| {
            span.iter()
                .map(|(seq, _)| *seq)
                .eq(self.selection.iter().copied())
        });
        if !span_is_selection {
            return Err(RepairRejection::OutsideChanged);
        }
        let prefix = &self.before.nodes[..start];
        let suffix = &self.before.nodes[end..];
        let messages = &after.messages;
        if messages.len() < prefix.len() + suffix.len() {
            return Err(RepairRejection::OutsideChanged);
        }
        let middle_end = messages.len() - suffix.len();
        if !same_nodes(prefix, &messages[..prefix.len()])
            || !same_nodes(suffix, &messages[middle_end..])
        {
            return Err(RepairRejection::OutsideChanged);
        }
        let middle: Vec<u64> = messages[prefix.len()..middle_end]
            .iter()
            .map(|derived| derived.seq)
            .collect();
        // 2. Each node is selected, or a new replacement of selected nodes only.
        let selected: HashSet<u64> = self.selection.iter().copied().collect();
        let mut covered: HashSet<u64> = HashSet::new();
        let mut replacements = 0usize;
        self.session.with_log(|log| {
            for seq in &middle {
                if selected.contains(seq) {
                    covered.insert(*seq);
                    continue;
                }
                if *seq < self.snapshot_head {
                    return Err(RepairRejection::ForeignNode);
                }
                replacements += 1;
                let Some(event) = log.event_at(*seq) else {
                    return Err(RepairRejection::ForeignNode);
                };
                let mut stack: Vec<u64> = event.source_event_seqs().to_vec();
                let mut seen = HashSet::new();
                let mut cites_selected = false;
                while let Some(source) = stack.pop() {
                    if !seen.insert(source) {
                        continue;
                    }
                    let Some(event) = log.event_at(source) else {
                        return Err(RepairRejection::SourcesOutside);
                    };
                    if event.kind().starts_with("compaction/") {
                        continue;
                    }
                    if selected.contains(&source) {
                        covered.insert(source);
                        cites_selected = true;
                        continue;
                    }
                    // An event written since the transaction opened (a replacement of
                    // a replacement) stands for its own sources; anything older that
                    // is not selected lies outside the selection.
                    if source >= self.snapshot_head && !event.source_event_seqs().is_empty() {
                        stack.extend(event.source_event_seqs().iter().copied());
                        continue;
                    }
                    return Err(RepairRejection::SourcesOutside);
                }
                if !cites_selected {
                    return Err(RepairRejection::SourcesOutside);
                }
            }
            Ok(())
        })?;
        // 3. At least one replacement.
        if replacements == 0 {
            return Err(RepairRejection::NoReplacement);
        }
        // 4. Every selected node is covered.
        if self.selection.iter().any(|seq| !covered.contains(seq)) {
            return Err(RepairRejection::Uncovered);
        }
        // 5. Strictly cheaper on the frozen basis.
        let price = |nodes: &[RangeNode], seqs: &[u64]| -> u64 {
            let seqs: HashSet<u64> = seqs.iter().copied().collect();
            nodes
                .iter()
                .filter(|node| seqs.contains(&node.seq))
                .map(|node| node.tokens)
                .sum()
        };
        if price(after_nodes, &middle) >= price(self.before_nodes, self.selection) {
            return Err(RepairRejection::NotCheaper);
        }
        Ok(middle)
    }
}
