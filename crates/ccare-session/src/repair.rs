//! Crash repair (spec H-SESS-5): close what a dead process left open, by appending only.
//!
//! In order: a result for each unanswered call (`TOOL_OUTCOME_UNKNOWN` when its dispatch
//! marker exists, else `TOOL_NOT_STARTED`), `compaction/end{INTERRUPTED}` for an open
//! compaction, `step/end{interrupted}` for an open step, `turn/end{interrupted}`. Each
//! carries `data.repair = true`. A closed log needs nothing, so repair is idempotent.
//! A step awaiting caller-executed results (ACT-3) is not open work of a dead process:
//! repair leaves it, and never answers a caller's call with `TOOL_NOT_STARTED`.

use ccare_core::kinds::{CompactionEnd, StepEnd, ToolError, ToolResult, TurnEnd, TurnEndReason};
use ccare_core::{
    ContentBlock, EventDraft, EventError, Locale, Message, SurfaceOp, ToolResultBlock,
};

use crate::state::LogState;
use crate::texts;

/// The error code of a synthesized result for a call that never started.
pub const TOOL_NOT_STARTED: &str = "TOOL_NOT_STARTED";
/// The error code of a synthesized result for a call whose outcome is unknown.
pub const TOOL_OUTCOME_UNKNOWN: &str = "TOOL_OUTCOME_UNKNOWN";
/// The error of a compaction cut short by a crash.
pub const INTERRUPTED: &str = "INTERRUPTED";

/// The events that close `state`, in append order (empty when nothing is open).
pub fn repair_drafts(state: &LogState, locale: Locale) -> Result<Vec<EventDraft>, EventError> {
    let mut drafts = Vec::new();
    // A step awaiting caller-executed results is a durable state, not a crash (ACT-3):
    // its calls stay open for `ToolResults`, and its step and turn with them.
    if !state.awaiting_calls().is_empty() {
        return Ok(drafts);
    }
    if let Some((turn, step)) = state.open_step {
        for call in state.unanswered_calls() {
            let (code, text) = if call.dispatched {
                (
                    TOOL_OUTCOME_UNKNOWN,
                    texts::tool_outcome_unknown(locale, &call.name),
                )
            } else {
                (
                    TOOL_NOT_STARTED,
                    texts::tool_not_started(locale, &call.name),
                )
            };
            let block = ContentBlock::ToolResult(ToolResultBlock {
                call_id: call.id.clone(),
                name: call.name.clone(),
                content: vec![ContentBlock::text(text.clone())],
                is_error: true,
                extra: ccare_core::Extra::new(),
            });
            let result = ToolResult {
                turn,
                step,
                message: Message::from_blocks(vec![block]),
                error: Some(ToolError {
                    code: code.to_owned(),
                    message: text,
                }),
                meta: None,
                repair: true,
            };
            drafts.push(EventDraft::typed(&result)?.with_surface(SurfaceOp::Append));
        }
    }
    if let Some(compaction_id) = &state.open_compaction {
        drafts.push(EventDraft::typed(&CompactionEnd {
            compaction_id: compaction_id.clone(),
            error: Some(INTERRUPTED.to_owned()),
            repair: true,
        })?);
    }
    if let Some((turn, step)) = state.open_step {
        drafts.push(EventDraft::typed(&StepEnd {
            turn,
            step,
            interrupted: true,
            repair: true,
        })?);
    }
    if let Some(turn) = state.open_turn {
        drafts.push(EventDraft::typed(&TurnEnd {
            turn,
            reason: TurnEndReason::Interrupted,
            repair: true,
        })?);
    }
    Ok(drafts)
}
