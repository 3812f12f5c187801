//! Pricing messages, the system prompt and the tool list (spec H-TOK-2).
//!
//! The formula is the same whichever way text is counted, so it is written once here
//! over a text-counting function; [`crate::Meter`] supplies the heuristic or the
//! tokenizer, and the free functions below use the heuristic with default weights.
//!
//! ```text
//! message     = 4 + Σ block                       (MESSAGE_OVERHEAD)
//! block       = 4 + content                       (BLOCK_OVERHEAD)
//! content     = text(text)                        text, reasoning
//!             | text(name) + text(arguments)      tool-call
//!             | text(name) + Σ block(inner)       tool-result
//!             | image_tokens                      image (1024 by default)
//!             | text(compact JSON of the block)   unknown
//! system      = text(prompt) + 4
//! tools       = text(compact JSON of the list) + 4
//! ```
//!
//! A tool-call's arguments are counted as the raw streamed text when it was kept
//! (`raw_arguments`), else as the compact JSON of `arguments` (`null` included: it is
//! what a provider would be sent). A tool-result's inner blocks are priced as blocks,
//! each with its own 4, exactly as if they stood in a message. A reasoning block is
//! priced by its readable text only; its signature is not counted.
//!
//! Every term is non-negative, so adding a block never lowers a message's total and a
//! block can be priced by difference.

use ccare_core::{ContentBlock, Message};
use serde_json::Value;

use crate::heuristic::HeuristicWeights;

/// Tokens every message costs before its blocks (role markers and separators).
pub const MESSAGE_OVERHEAD: u64 = 4;

/// Tokens every content block costs before its content.
pub const BLOCK_OVERHEAD: u64 = 4;

/// Tokens the system prompt and the tool list each cost on top of their text.
pub const SECTION_OVERHEAD: u64 = 4;

/// What an image costs when the configuration does not say (H-TOK-2).
pub const DEFAULT_IMAGE_TOKENS: u64 = 1024;

/// The H-TOK-2 price of a message, with the heuristic at default weights and images at
/// [`DEFAULT_IMAGE_TOKENS`]. An empty message costs [`MESSAGE_OVERHEAD`].
pub fn estimate_message(message: &Message) -> u64 {
    let weights = HeuristicWeights::default();
    message_tokens(
        message,
        &|text| weights.estimate(text),
        DEFAULT_IMAGE_TOKENS,
    )
}

/// The price of a system prompt: its heuristic estimate plus [`SECTION_OVERHEAD`].
///
/// A request with no system prompt costs nothing for it; do not call this then.
pub fn estimate_system(prompt: &str) -> u64 {
    system_tokens(prompt, &estimate_default)
}

/// The price of a tool list: the heuristic estimate of its compact JSON plus
/// [`SECTION_OVERHEAD`].
///
/// A request with no tools costs nothing for them; do not call this then.
pub fn estimate_tools(tools: &Value) -> u64 {
    tools_tokens(tools, &estimate_default)
}

fn estimate_default(text: &str) -> u64 {
    HeuristicWeights::default().estimate(text)
}

pub(crate) fn message_tokens(
    message: &Message,
    count: &dyn Fn(&str) -> u64,
    image_tokens: u64,
) -> u64 {
    message
        .content
        .iter()
        .fold(MESSAGE_OVERHEAD, |total, block| {
            total.saturating_add(block_tokens(block, count, image_tokens))
        })
}

pub(crate) fn block_tokens(
    block: &ContentBlock,
    count: &dyn Fn(&str) -> u64,
    image_tokens: u64,
) -> u64 {
    BLOCK_OVERHEAD.saturating_add(content_tokens(block, count, image_tokens))
}

pub(crate) fn system_tokens(prompt: &str, count: &dyn Fn(&str) -> u64) -> u64 {
    count(prompt).saturating_add(SECTION_OVERHEAD)
}

pub(crate) fn tools_tokens(tools: &Value, count: &dyn Fn(&str) -> u64) -> u64 {
    count(&tools.to_string()).saturating_add(SECTION_OVERHEAD)
}

fn content_tokens(block: &ContentBlock, count: &dyn Fn(&str) -> u64, image_tokens: u64) -> u64 {
    match block {
        ContentBlock::Text(text) => count(&text.text),
        ContentBlock::Reasoning(reasoning) => count(&reasoning.text),
        ContentBlock::ToolCall(call) => {
            let arguments = match &call.raw_arguments {
                Some(raw) => count(raw),
                None => count(&call.arguments.to_string()),
            };
            count(&call.name).saturating_add(arguments)
        }
        ContentBlock::ToolResult(result) => result
            .content
            .iter()
            .fold(count(&result.name), |total, inner| {
                total.saturating_add(block_tokens(inner, count, image_tokens))
            }),
        ContentBlock::Image(_) => image_tokens,
        // Serialising a map of JSON values cannot fail; an empty string would cost 0.
        ContentBlock::Unknown(object) => count(&serde_json::to_string(object).unwrap_or_default()),
    }
}

#[cfg(test)]
mod tests {
    use ccare_core::{ImageBlock, ReasoningBlock, ToolCallBlock, ToolResultBlock};
    use serde_json::json;

    use super::*;
    use crate::estimate_text;

    fn tool_call(name: &str, arguments: Value, raw: Option<&str>) -> ContentBlock {
        ContentBlock::ToolCall(ToolCallBlock {
            id: "c1".into(),
            name: name.into(),
            arguments,
            raw_arguments: raw.map(str::to_owned),
            extra: ccare_core::Extra::new(),
        })
    }

    fn image() -> ContentBlock {
        ContentBlock::Image(ImageBlock {
            media_type: "image/png".into(),
            data: Some("iVBORw0KGgo=".into()),
            uri: None,
            offloaded: false,
            detail: None,
            extra: ccare_core::Extra::new(),
        })
    }

    #[test]
    fn empty_message_costs_four() {
        assert_eq!(estimate_message(&Message::from_blocks(vec![])), 4);
    }

    #[test]
    fn text_and_reasoning() {
        let reasoning = ContentBlock::Reasoning(ReasoningBlock {
            text: "think".into(),
            signature: Some("a-long-signature-not-counted".into()),
            opaque: false,
            extra: ccare_core::Extra::new(),
        });
        let message = Message::from_blocks(vec![ContentBlock::text("hello world"), reasoning]);
        let expected = 4 + (4 + estimate_text("hello world")) + (4 + estimate_text("think"));
        assert_eq!(estimate_message(&message), expected);
    }

    #[test]
    fn tool_call_counts_name_and_compact_arguments() {
        let block = tool_call("read_file", json!({"path": "src/main.rs"}), None);
        let expected =
            4 + 4 + estimate_text("read_file") + estimate_text(r#"{"path":"src/main.rs"}"#);
        assert_eq!(
            estimate_message(&Message::from_blocks(vec![block])),
            expected
        );
    }

    #[test]
    fn tool_call_prefers_raw_arguments() {
        let block = tool_call("grep", Value::Null, Some("{\"pattern\": \"fn ma"));
        let expected = 4 + 4 + estimate_text("grep") + estimate_text("{\"pattern\": \"fn ma");
        assert_eq!(
            estimate_message(&Message::from_blocks(vec![block])),
            expected
        );
    }

    #[test]
    fn tool_result_prices_inner_blocks_as_blocks() {
        let result = ContentBlock::ToolResult(ToolResultBlock {
            call_id: "c1".into(),
            name: "shell".into(),
            content: vec![ContentBlock::text("exit 0"), image()],
            is_error: false,
            extra: ccare_core::Extra::new(),
        });
        let expected = 4 + 4 + estimate_text("shell") + (4 + estimate_text("exit 0")) + (4 + 1024);
        assert_eq!(
            estimate_message(&Message::from_blocks(vec![result])),
            expected
        );
    }

    #[test]
    fn image_and_unknown() {
        let unknown: Option<Message> =
            serde_json::from_str(r#"{"content":[{"type":"hologram","depth":3}]}"#).ok();
        let unknown_tokens = unknown.as_ref().map(estimate_message);
        assert_eq!(
            unknown_tokens,
            Some(4 + 4 + estimate_text(r#"{"type":"hologram","depth":3}"#))
        );
        assert_eq!(
            estimate_message(&Message::from_blocks(vec![image()])),
            4 + 4 + 1024
        );
    }

    #[test]
    fn system_and_tools() {
        assert_eq!(estimate_system(""), 4);
        assert_eq!(estimate_system("Be brief."), estimate_text("Be brief.") + 4);
        let tools = json!([{"name": "read_file", "parameters": {"type": "object"}}]);
        assert_eq!(
            estimate_tools(&tools),
            estimate_text(r#"[{"name":"read_file","parameters":{"type":"object"}}]"#) + 4
        );
    }
}
