//! The chunk stream every adapter produces (spec H-LLM-3).
//!
//! A stream opens blocks, sends deltas to open blocks, closes each block with its
//! assembled content, may report usage, and ends with exactly one [`Chunk::Finish`].
//! [`crate::Assembler`] checks those rules and builds the final message.

use std::pin::Pin;

use ccare_core::{ContentBlock, LlmFailure, TokenUsage};
use futures_core::Stream;
use serde::{Deserialize, Serialize};

/// A boxed chunk stream, as adapters and prepared calls return it.
pub type ChunkStream = Pin<Box<dyn Stream<Item = Chunk> + Send>>;

/// What a block holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum BlockKind {
    /// Visible text.
    Text,
    /// Model reasoning.
    Reasoning,
    /// A tool call whose arguments stream as text.
    ToolCall,
}

/// One element of a chunk stream.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "kebab-case")]
pub enum Chunk {
    /// A block opens. Tool calls carry their id and name.
    BlockStart {
        /// The block's position in the message.
        index: u32,
        /// What it holds.
        kind: BlockKind,
        /// The tool call id.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        id: Option<String>,
        /// The tool name.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        name: Option<String>,
    },
    /// Text for an open text block.
    TextDelta {
        /// The block.
        index: u32,
        /// The new text.
        text: String,
    },
    /// Reasoning for an open reasoning block.
    ReasoningDelta {
        /// The block.
        index: u32,
        /// The new reasoning text.
        text: String,
        /// A provider signature, when it arrives.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        signature: Option<String>,
    },
    /// Argument text for an open tool-call block.
    ToolCallDelta {
        /// The block.
        index: u32,
        /// The new argument text.
        arguments: String,
    },
    /// A block closes with its assembled content.
    BlockEnd {
        /// The block.
        index: u32,
        /// The assembled block.
        block: ContentBlock,
    },
    /// Message-level fields the provider sent that the adapter does not interpret
    /// (e.g. `refusal`, `annotations`); they are kept in the message's `extra`.
    MessageExtra {
        /// The fields, string values concatenated across deltas.
        fields: ccare_core::JsonObject,
    },
    /// Token usage of the call.
    Usage(TokenUsage),
    /// The layer is about to retry a failed attempt (informational; H-LLM-6: the loop
    /// logs it as `llm/retry`). Only sent before any content chunk.
    Retry(RetryNotice),
    /// The end of the stream; always the last chunk.
    Finish(Finish),
}

impl Chunk {
    /// Whether the chunk carries model output (anything but usage, retry and finish).
    pub fn is_content(&self) -> bool {
        matches!(
            self,
            Chunk::BlockStart { .. }
                | Chunk::TextDelta { .. }
                | Chunk::ReasoningDelta { .. }
                | Chunk::ToolCallDelta { .. }
                | Chunk::BlockEnd { .. }
        )
    }
}

/// How a stream ended.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "reason", rename_all = "kebab-case")]
pub enum Finish {
    /// The model finished its answer.
    Stop,
    /// The output limit was reached.
    Length,
    /// The model asks for tool calls.
    ToolCalls,
    /// The call failed.
    Error {
        /// Why.
        failure: LlmFailure,
    },
    /// The call was cancelled; this is not a failure (H-LLM-3, H-CANCEL-1).
    Aborted,
}

impl Finish {
    /// The reason as a log string: `stop`, `length`, `tool-calls`, `error`, `aborted`.
    pub fn as_str(&self) -> &'static str {
        match self {
            Finish::Stop => "stop",
            Finish::Length => "length",
            Finish::ToolCalls => "tool-calls",
            Finish::Error { .. } => "error",
            Finish::Aborted => "aborted",
        }
    }
}

/// A retry the layer is about to make.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RetryNotice {
    /// The attempt that failed, from 1.
    pub attempt: u32,
    /// How long the layer waits before the next attempt.
    pub delay_ms: u64,
    /// Why the attempt failed.
    pub failure: LlmFailure,
}
