//! One-pass decoding of the messages the host writes (issue 14 targets 4 and 5).
//!
//! [`Message`] and its blocks keep unknown fields with `#[serde(flatten)]`, and
//! [`ContentBlock`] is an internally tagged enum. For both, serde's derived decoder first
//! buffers the whole object (every string copied into its private `Content` tree) and
//! then decodes the buffer: the larger part of opening a long session, and of checking
//! an append. Flattening is the only way serde's derive keeps unknown fields, so this
//! is the one hand-written piece: [`OnePassMessage`] is decoded by serde-derived *twins*
//! of the message and its blocks that deny unknown fields (so they buffer nothing), and
//! one small visitor that reads a block's leading `type` and hands the rest of the same
//! map to the twin of that block.
//!
//! A twin only ever *declines*: a message with an unknown field, a block whose `type`
//! is not its first key or names an image or an unknown type, a repeated field, or
//! anything the derived decoder would refuse makes it fail, and the caller decodes the
//! same text again with the derived decoder, whose result or error is then the answer.
//! So a successful one-pass decode is exactly the derived one (the proptests below
//! compare them), and every error is the derived decoder's.

use std::fmt;

use ccare_core::{
    ContentBlock, Extra, Message, ReasoningBlock, Source, TextBlock, ToolCallBlock, ToolResultBlock,
};
use serde::Deserialize;
use serde::de::value::MapAccessDeserializer;
use serde::de::{self, Deserializer, MapAccess, Visitor};
use serde_json::Value;

/// A [`Message`] decoded in one pass; a decode error means "ask the derived decoder".
#[derive(Debug)]
pub(crate) struct OnePassMessage(pub(crate) Message);

impl<'de> Deserialize<'de> for OnePassMessage {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        // A map only: a derived struct would also take the array form, which
        // `Message`'s flattening decoder refuses.
        let twin = deserializer.deserialize_map(MessageVisitor)?;
        Ok(Self(Message {
            id: twin.id,
            content: twin.content.into_iter().map(|block| block.0).collect(),
            source: twin.source,
            extra: Extra::new(),
        }))
    }
}

struct MessageVisitor;

impl<'de> Visitor<'de> for MessageVisitor {
    type Value = MessageTwin;

    fn expecting(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        formatter.write_str("a message object")
    }

    fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<MessageTwin, A::Error> {
        MessageTwin::deserialize(MapAccessDeserializer::new(map))
    }
}

/// [`Message`] without unknown fields.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct MessageTwin {
    #[serde(default)]
    id: Option<String>,
    #[serde(default)]
    content: Vec<BlockTwin>,
    #[serde(default)]
    source: Option<Source>,
}

/// [`TextBlock`] without unknown fields (or its `type`, read before).
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct TextTwin {
    text: String,
}

/// [`ReasoningBlock`] without unknown fields.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ReasoningTwin {
    #[serde(default)]
    text: String,
    #[serde(default)]
    signature: Option<String>,
    #[serde(default)]
    opaque: bool,
}

/// [`ToolCallBlock`] without unknown fields.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ToolCallTwin {
    id: String,
    name: String,
    #[serde(default)]
    arguments: Value,
    #[serde(default)]
    raw_arguments: Option<String>,
}

/// [`ToolResultBlock`] without unknown fields; its blocks are twins too.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ToolResultTwin {
    call_id: String,
    name: String,
    #[serde(default)]
    content: Vec<BlockTwin>,
    #[serde(default)]
    is_error: bool,
}

/// One block: its `type` first, then the rest of the same map read by that type's twin.
struct BlockTwin(ContentBlock);

impl<'de> Deserialize<'de> for BlockTwin {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_map(BlockVisitor)
    }
}

/// The block types read in one pass; `image` and unknown types decline.
#[derive(Deserialize)]
#[serde(rename_all = "kebab-case")]
enum BlockType {
    Text,
    Reasoning,
    ToolCall,
    ToolResult,
}

/// The first key of a block, which must be `type`.
#[derive(Deserialize)]
#[serde(field_identifier, rename_all = "lowercase")]
enum LeadingKey {
    Type,
}

struct BlockVisitor;

impl<'de> Visitor<'de> for BlockVisitor {
    type Value = BlockTwin;

    fn expecting(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        formatter.write_str("a content block whose first key is its type")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<BlockTwin, A::Error> {
        let Some(LeadingKey::Type) = map.next_key()? else {
            return Err(de::Error::custom("a block needs a type"));
        };
        let kind: BlockType = map.next_value()?;
        let rest = MapAccessDeserializer::new(map);
        let block = match kind {
            BlockType::Text => {
                let twin = TextTwin::deserialize(rest)?;
                ContentBlock::Text(TextBlock {
                    text: twin.text,
                    extra: Extra::new(),
                })
            }
            BlockType::Reasoning => {
                let twin = ReasoningTwin::deserialize(rest)?;
                ContentBlock::Reasoning(ReasoningBlock {
                    text: twin.text,
                    signature: twin.signature,
                    opaque: twin.opaque,
                    extra: Extra::new(),
                })
            }
            BlockType::ToolCall => {
                let twin = ToolCallTwin::deserialize(rest)?;
                ContentBlock::ToolCall(ToolCallBlock {
                    id: twin.id,
                    name: twin.name,
                    arguments: twin.arguments,
                    raw_arguments: twin.raw_arguments,
                    extra: Extra::new(),
                })
            }
            BlockType::ToolResult => {
                let twin = ToolResultTwin::deserialize(rest)?;
                ContentBlock::ToolResult(ToolResultBlock {
                    call_id: twin.call_id,
                    name: twin.name,
                    content: twin.content.into_iter().map(|block| block.0).collect(),
                    is_error: twin.is_error,
                    extra: Extra::new(),
                })
            }
        };
        Ok(BlockTwin(block))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn both(text: &str) -> (Option<Message>, Option<Message>) {
        let fast = serde_json::from_str::<OnePassMessage>(text)
            .ok()
            .map(|message| message.0);
        let derived = serde_json::from_str::<Message>(text).ok();
        (fast, derived)
    }

    #[test]
    fn the_host_s_shapes_decode_in_one_pass_as_the_derived_decoder_does() {
        for text in [
            r#"{"id":"m1","content":[{"type":"text","text":"hi"},{"type":"reasoning","text":"r","signature":"s"}],"source":{"kind":"user"}}"#,
            r#"{"content":[{"type":"tool-call","id":"c1","name":"read_file","arguments":{"path":"a"}}]}"#,
            r#"{"content":[{"type":"tool-result","call_id":"c1","name":"read_file","content":[{"type":"text","text":"x"}],"is_error":true}]}"#,
            r#"{"content":[{"type":"reasoning","opaque":true}]}"#,
            r#"{}"#,
        ] {
            let (fast, derived) = both(text);
            assert!(fast.is_some(), "one pass declined {text}");
            assert_eq!(fast, derived, "{text}");
        }
    }

    #[test]
    fn anything_else_declines() {
        for text in [
            r#"{"content":[{"type":"text","text":"hi","cache_control":{"kind":"x"}}]}"#,
            r#"{"content":[{"text":"hi","type":"text"}]}"#,
            r#"{"content":[{"type":"hologram","depth":3}]}"#,
            r#"{"content":[{"type":"image","media_type":"image/png","data":"AA=="}]}"#,
            r#"{"content":[{"type":"text"}]}"#,
            r#"{"id":"m","future":1}"#,
            r#"{"id":"a","id":"b"}"#,
            r#"{"content":[{"type":"text","text":"a","text":"b"}]}"#,
            r#"{"content":[{"type":"text","type":"text","text":"a"}]}"#,
            r#"[]"#,
        ] {
            assert!(
                serde_json::from_str::<OnePassMessage>(text).is_err(),
                "one pass accepted {text}"
            );
        }
    }

    mod prop {
        use super::*;
        use ccare_core::JsonObject;
        use proptest::prelude::*;
        use serde_json::json;

        fn text() -> impl Strategy<Value = String> {
            prop_oneof![
                Just(String::new()),
                "[a-z ]{0,12}",
                "\\PC{0,8}",
                Just("quote \" back \\ nl \n é 中".to_owned()),
            ]
        }

        /// A block as JSON: known shapes, sometimes with an unknown field, sometimes
        /// with `type` not first, sometimes an image or an unknown type.
        fn block(depth: u32) -> BoxedStrategy<Value> {
            let leaf = prop_oneof![
                text().prop_map(|text| json!({"type": "text", "text": text})),
                (text(), proptest::option::of(text()), any::<bool>()).prop_map(
                    |(text, signature, opaque)| {
                        let mut block = json!({"type": "reasoning", "text": text});
                        if let Some(signature) = signature {
                            block["signature"] = json!(signature);
                        }
                        if opaque {
                            block["opaque"] = json!(true);
                        }
                        block
                    }
                ),
                (text(), text(), proptest::option::of(text())).prop_map(|(id, name, raw)| {
                    let mut block = json!({"type": "tool-call", "id": id, "name": name,
                        "arguments": {"path": "a", "n": [1, 2.5, null]}});
                    if let Some(raw) = raw {
                        block["raw_arguments"] = json!(raw);
                    }
                    block
                }),
                Just(json!({"type": "image", "media_type": "image/png", "data": "AA=="})),
                Just(json!({"type": "hologram", "depth": 3})),
                Just(json!({"type": "text"})),
            ];
            let shaped = if depth == 0 {
                leaf.boxed()
            } else {
                prop_oneof![
                    4 => leaf,
                    1 => (text(), proptest::collection::vec(block(depth - 1), 0..3), any::<bool>())
                        .prop_map(|(id, content, is_error)| json!({"type": "tool-result",
                            "call_id": id, "name": "read_file", "content": content,
                            "is_error": is_error})),
                ]
                .boxed()
            };
            (shaped, 0..8_u8)
                .prop_map(|(mut block, twist)| {
                    if let Value::Object(map) = &mut block {
                        match twist {
                            0 => {
                                map.insert("cache_control".into(), json!({"kind": "x"}));
                            }
                            1 => {
                                // `type` last.
                                if let Some(kind) = map.shift_remove("type") {
                                    map.insert("type".into(), kind);
                                }
                            }
                            _ => {}
                        }
                    }
                    block
                })
                .boxed()
        }

        fn message() -> impl Strategy<Value = Value> {
            (
                proptest::option::of(text()),
                proptest::collection::vec(block(2), 0..4),
                0..4_u8,
                0..6_u8,
            )
                .prop_map(|(id, content, source, twist)| {
                    let mut message = JsonObject::new();
                    if let Some(id) = id {
                        message.insert("id".into(), json!(id));
                    }
                    if twist != 0 {
                        message.insert("content".into(), json!(content));
                    }
                    match source {
                        0 => {}
                        1 => {
                            message.insert("source".into(), json!({"kind": "user"}));
                        }
                        2 => {
                            message.insert(
                                "source".into(),
                                json!({"kind": "plugin", "plugin": "p", "form": "notice"}),
                            );
                        }
                        _ => {
                            message.insert("source".into(), json!(null));
                        }
                    }
                    if twist == 1 {
                        message.insert("future".into(), json!(1));
                    }
                    Value::Object(message)
                })
        }

        proptest! {
            /// An append decodes its message from the object it encoded: the same
            /// payload as decoding the stored text, or it leaves that to the text.
            #[test]
            fn decoding_the_object_matches_decoding_the_text(
                message in message(),
                kind in prop_oneof![
                    Just(ccare_core::kinds::USER_MESSAGE),
                    Just(ccare_core::kinds::ASSISTANT_MESSAGE),
                    Just(ccare_core::kinds::TOOL_RESULT),
                ],
            ) {
                let mut data = JsonObject::new();
                data.insert("turn".into(), json!(1));
                data.insert("step".into(), json!(2));
                data.insert("message".into(), message);
                let draft = ccare_core::EventDraft::new(kind, data);
                let encoded = ccare_core::Event::encode_keeping_data(3, 4, draft);
                prop_assert!(encoded.is_ok(), "{:?}", encoded);
                if let Ok((event, Some(data))) = encoded {
                    let from_text = crate::decode::decode(&event);
                    if let Some(from_object) = crate::decode::decode_object(kind, data) {
                        prop_assert_eq!(
                            Some(format!("{from_object:?}")),
                            from_text.ok().map(|decoded| format!("{decoded:?}")),
                            "{}",
                            event.raw_json()
                        );
                    }
                }
            }

            /// What one pass decodes is what the derived decoder decodes, and it
            /// declines only what the derived decoder reads differently or refuses.
            #[test]
            fn one_pass_agrees_with_the_derived_decoder(message in message()) {
                let text = serde_json::to_string(&message).unwrap_or_default();
                let derived = serde_json::from_str::<Message>(&text);
                if let Ok(fast) = serde_json::from_str::<OnePassMessage>(&text) {
                    prop_assert_eq!(Some(fast.0), derived.ok(), "{}", text);
                }
                // The host writes messages with serde: their text always decodes in one
                // pass when no field is unknown and every block is one of the four.
                if let Ok(decoded) = serde_json::from_str::<Message>(&text) {
                    let written = serde_json::to_string(&decoded).unwrap_or_default();
                    let simple = !written.contains("cache_control")
                        && !written.contains("future")
                        && !written.contains("\"image\"")
                        && !written.contains("hologram")
                        && !text.contains(r#"{"type":"text"}"#);
                    let fast = serde_json::from_str::<OnePassMessage>(&written);
                    if simple {
                        prop_assert!(fast.is_ok(), "declined {}", written);
                    }
                    if let Ok(fast) = fast {
                        prop_assert_eq!(fast.0, decoded, "{}", written);
                    }
                }
            }
        }
    }
}
