//! Messages and content blocks (spec H-MSG-1).
//!
//! Every block keeps the fields it does not know in `extra`, and a block of an unknown
//! type is kept whole as [`ContentBlock::Unknown`], so decoding never loses data.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::extra::Extra;
use crate::json::JsonObject;
use crate::source::Source;

/// The role a derived message plays in a model request.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    /// Written by the user, or by the host on the user's side (notices, tool results).
    User,
    /// Written by the model.
    Assistant,
}

/// A message as logged in `user/message`, `assistant/message` and `tool/result`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Message {
    /// A stable id, unique within the session.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<String>,
    /// The blocks, in order.
    #[serde(default)]
    pub content: Vec<ContentBlock>,
    /// Who put the message into the conversation.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source: Option<Source>,
    /// Fields this version does not know.
    #[serde(flatten)]
    pub extra: Extra,
}

impl Message {
    /// A message made of blocks, with no id or source.
    pub fn from_blocks(content: Vec<ContentBlock>) -> Self {
        Self {
            id: None,
            content,
            source: None,
            extra: Extra::new(),
        }
    }

    /// Whether the message has nothing a model would see (H-SURF-3 skips empty assistant messages).
    pub fn is_empty(&self) -> bool {
        self.content.iter().all(ContentBlock::is_empty)
    }

    /// Releases spare capacity of the block lists. An open session keeps every message
    /// it shows the model, so slack adds up.
    pub fn shrink_to_fit(&mut self) {
        self.content.shrink_to_fit();
        for block in &mut self.content {
            block.shrink_to_fit();
        }
    }

    /// The tool calls in this message, in block order.
    pub fn tool_calls(&self) -> impl Iterator<Item = &ToolCallBlock> {
        self.content.iter().filter_map(|block| match block {
            ContentBlock::ToolCall(call) => Some(call),
            ContentBlock::Text(_)
            | ContentBlock::Reasoning(_)
            | ContentBlock::ToolResult(_)
            | ContentBlock::Image(_)
            | ContentBlock::Unknown(_) => None,
        })
    }

    /// The tool results in this message, in block order.
    pub fn tool_results(&self) -> impl Iterator<Item = &ToolResultBlock> {
        self.content.iter().filter_map(|block| match block {
            ContentBlock::ToolResult(result) => Some(result),
            ContentBlock::Text(_)
            | ContentBlock::Reasoning(_)
            | ContentBlock::ToolCall(_)
            | ContentBlock::Image(_)
            | ContentBlock::Unknown(_) => None,
        })
    }

    /// The text blocks' texts joined by `separator`; reasoning, tool calls and other
    /// blocks are left out (what detectors read of a reply, what a handoff carries).
    pub fn joined_text(&self, separator: &str) -> String {
        let texts: Vec<&str> = self
            .content
            .iter()
            .filter_map(|block| match block {
                ContentBlock::Text(text) => Some(text.text.as_str()),
                ContentBlock::Reasoning(_)
                | ContentBlock::ToolCall(_)
                | ContentBlock::ToolResult(_)
                | ContentBlock::Image(_)
                | ContentBlock::Unknown(_) => None,
            })
            .collect();
        texts.join(separator)
    }
}

/// One block of message content.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "kebab-case")]
pub enum ContentBlock {
    /// Visible text.
    Text(TextBlock),
    /// Model reasoning; signed or opaque reasoning is never altered.
    Reasoning(ReasoningBlock),
    /// A call the model asks the host to run.
    ToolCall(ToolCallBlock),
    /// What a tool returned.
    ToolResult(ToolResultBlock),
    /// An image, inline or by reference.
    Image(ImageBlock),
    /// A block of a type this version does not know, kept whole.
    #[serde(untagged)]
    Unknown(JsonObject),
}

impl ContentBlock {
    /// A text block.
    pub fn text(text: impl Into<String>) -> Self {
        ContentBlock::Text(TextBlock {
            text: text.into(),
            extra: Extra::new(),
        })
    }

    /// Releases spare capacity of nested block lists (see [`Message::shrink_to_fit`]).
    pub fn shrink_to_fit(&mut self) {
        if let ContentBlock::ToolResult(block) = self {
            block.content.shrink_to_fit();
            for inner in &mut block.content {
                inner.shrink_to_fit();
            }
        }
    }

    fn is_empty(&self) -> bool {
        match self {
            ContentBlock::Text(block) => block.text.is_empty(),
            ContentBlock::Reasoning(block) => {
                block.text.is_empty() && block.signature.is_none() && !block.opaque
            }
            ContentBlock::ToolCall(_)
            | ContentBlock::ToolResult(_)
            | ContentBlock::Image(_)
            | ContentBlock::Unknown(_) => false,
        }
    }
}

/// `text{text}`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TextBlock {
    /// The text.
    pub text: String,
    /// Fields this version does not know.
    #[serde(flatten)]
    pub extra: Extra,
}

/// `reasoning{text, signature?, opaque}`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ReasoningBlock {
    /// The readable reasoning.
    #[serde(default)]
    pub text: String,
    /// A provider signature that must go back unaltered.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub signature: Option<String>,
    /// Whether the reasoning is an opaque payload only its producer can read.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub opaque: bool,
    /// Fields this version does not know.
    #[serde(flatten)]
    pub extra: Extra,
}

/// `tool-call{id, name, arguments, raw_arguments?}`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolCallBlock {
    /// The call id the result must cite.
    pub id: String,
    /// The tool name.
    pub name: String,
    /// The parsed arguments (an object, or `null` when the raw text was not JSON).
    #[serde(default)]
    pub arguments: Value,
    /// The arguments exactly as streamed, kept when they were not valid JSON.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub raw_arguments: Option<String>,
    /// Fields this version does not know.
    #[serde(flatten)]
    pub extra: Extra,
}

/// `tool-result{call_id, name, content[text|image], is_error}`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolResultBlock {
    /// The id of the call this answers.
    pub call_id: String,
    /// The tool name.
    pub name: String,
    /// Text and image blocks.
    #[serde(default)]
    pub content: Vec<ContentBlock>,
    /// Whether the tool failed.
    #[serde(default)]
    pub is_error: bool,
    /// Fields this version does not know.
    #[serde(flatten)]
    pub extra: Extra,
}

/// `image{media_type, data|uri, offloaded?}`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ImageBlock {
    /// The MIME type, e.g. `image/png`.
    pub media_type: String,
    /// Base64 data, when inline.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub data: Option<String>,
    /// A reference, when not inline.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub uri: Option<String>,
    /// Whether the bytes were moved out of the log.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub offloaded: bool,
    /// How closely the model looks at it (`auto`, `low`, `high`: OpenAI's
    /// `image_url.detail`), sent where the provider takes it; `None`: its default.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub detail: Option<String>,
    /// Fields this version does not know.
    #[serde(flatten)]
    pub extra: Extra,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn round_trip(text: &str) {
        let message: Result<Message, _> = serde_json::from_str(text);
        assert!(message.is_ok(), "{message:?}");
        let back = message
            .ok()
            .and_then(|message| serde_json::to_string(&message).ok());
        assert_eq!(back.as_deref(), Some(text));
    }

    #[test]
    fn h_msg_1_known_blocks_round_trip() {
        round_trip(
            r#"{"id":"m1","content":[{"type":"text","text":"hi"},{"type":"reasoning","text":"r","signature":"s"}]}"#,
        );
        round_trip(
            r#"{"content":[{"type":"tool-call","id":"c1","name":"read_file","arguments":{"path":"a"}}]}"#,
        );
        round_trip(
            r#"{"content":[{"type":"tool-result","call_id":"c1","name":"read_file","content":[{"type":"text","text":"x"}],"is_error":false}]}"#,
        );
    }

    #[test]
    fn h_msg_1_unknown_blocks_and_fields_are_kept() {
        round_trip(r#"{"id":"m","content":[{"type":"hologram","depth":3}],"future":1}"#);
        round_trip(r#"{"content":[{"type":"text","text":"hi","cache_control":{"kind":"x"}}]}"#);
        let message: Option<Message> =
            serde_json::from_str(r#"{"content":[{"type":"hologram","depth":3}]}"#).ok();
        assert!(matches!(
            message.as_ref().and_then(|message| message.content.first()),
            Some(ContentBlock::Unknown(_))
        ));
    }

    #[test]
    fn emptiness_ignores_empty_text_only() {
        let empty = Message::from_blocks(vec![ContentBlock::text("")]);
        assert!(empty.is_empty());
        assert!(!Message::from_blocks(vec![ContentBlock::text("x")]).is_empty());
    }
}
