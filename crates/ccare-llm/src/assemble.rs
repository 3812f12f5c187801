//! Checking a chunk stream against H-LLM-3 and assembling the message it carries.
//!
//! Every consumer of a stream (the agent loop, `ccare run`, tests) feeds chunks to an
//! [`Assembler`]; a stream that breaks the rules becomes a `STREAM_PROTOCOL` failure
//! instead of a malformed message. On an error or abort the assembler still knows the
//! visible prefix, which H-CANCEL-2 keeps as an interrupted assistant message.

use std::collections::BTreeMap;

use ccare_core::json::check_value;
use ccare_core::{
    ContentBlock, FailureCode, JsonObject, LlmFailure, Message, ReasoningBlock, TextBlock,
    TokenUsage, ToolCallBlock,
};
use serde_json::Value;

use crate::chunk::{BlockKind, Chunk, Finish};

/// A block still receiving deltas.
#[derive(Debug, Clone)]
struct OpenBlock {
    kind: BlockKind,
    id: Option<String>,
    name: Option<String>,
    text: String,
    signature: Option<String>,
}

/// Folds a chunk stream into blocks, usage and a finish, checking the chunk rules.
#[derive(Debug, Default)]
pub struct Assembler {
    open: BTreeMap<u32, OpenBlock>,
    closed: BTreeMap<u32, ContentBlock>,
    usage: Option<TokenUsage>,
    finish: Option<Finish>,
    chunks: u64,
    extra: JsonObject,
}

/// What a finished stream produced.
#[derive(Debug, Clone, PartialEq)]
pub struct Assembled {
    /// Closed blocks, in index order.
    pub blocks: Vec<ContentBlock>,
    /// Blocks still open when the stream ended (after an error or abort), as far as
    /// they got: text and reasoning with their partial text, tool calls with their
    /// partial arguments kept raw.
    pub partial: Vec<ContentBlock>,
    /// The usage the provider reported, if any.
    pub usage: Option<TokenUsage>,
    /// Message-level fields the provider sent that no block holds.
    pub extra: JsonObject,
    /// How the stream ended.
    pub finish: Finish,
}

impl Assembled {
    /// The complete message of a finished answer: the closed blocks.
    pub fn message(&self) -> Message {
        let mut message = Message::from_blocks(self.blocks.clone());
        message.extra = self.extra.clone().into();
        message
    }

    /// The visible prefix of an interrupted answer (H-CANCEL-2): text and reasoning
    /// only, closed blocks and partial ones, in index order.
    pub fn visible_prefix(&self) -> Message {
        let visible = self
            .blocks
            .iter()
            .chain(self.partial.iter())
            .filter(|block| match block {
                ContentBlock::Text(text) => !text.text.is_empty(),
                ContentBlock::Reasoning(reasoning) => !reasoning.text.is_empty(),
                ContentBlock::ToolCall(_)
                | ContentBlock::ToolResult(_)
                | ContentBlock::Image(_)
                | ContentBlock::Unknown(_) => false,
            })
            .cloned()
            .collect();
        Message::from_blocks(visible)
    }

    /// All visible text (text blocks only), closed and partial.
    pub fn text(&self) -> String {
        let mut out = String::new();
        for block in self.blocks.iter().chain(self.partial.iter()) {
            if let ContentBlock::Text(text) = block {
                out.push_str(&text.text);
            }
        }
        out
    }
}

fn protocol(message: String) -> LlmFailure {
    LlmFailure::new(FailureCode::StreamProtocol, message)
}

impl Assembler {
    /// An empty assembler.
    pub fn new() -> Self {
        Self::default()
    }

    /// Whether any content chunk has been accepted.
    pub fn has_content(&self) -> bool {
        !self.open.is_empty() || !self.closed.is_empty()
    }

    /// Feeds one chunk. A chunk that breaks H-LLM-3 is refused with `STREAM_PROTOCOL`
    /// naming the chunk's position; the assembler keeps what it had.
    pub fn push(&mut self, chunk: &Chunk) -> Result<(), LlmFailure> {
        self.chunks += 1;
        let at = self.chunks;
        if self.finish.is_some() {
            return Err(protocol(format!("chunk {at} arrived after the finish")));
        }
        match chunk {
            Chunk::BlockStart {
                index,
                kind,
                id,
                name,
            } => {
                if self.open.contains_key(index) || self.closed.contains_key(index) {
                    return Err(protocol(format!(
                        "chunk {at} opens block {index}, which was already opened"
                    )));
                }
                if *kind == BlockKind::ToolCall && (id.is_none() || name.is_none()) {
                    return Err(protocol(format!(
                        "chunk {at} opens tool-call block {index} without an id and a name"
                    )));
                }
                self.open.insert(
                    *index,
                    OpenBlock {
                        kind: *kind,
                        id: id.clone(),
                        name: name.clone(),
                        text: String::new(),
                        signature: None,
                    },
                );
            }
            Chunk::TextDelta { index, text } => {
                self.open_of(at, *index, BlockKind::Text)?
                    .text
                    .push_str(text);
            }
            Chunk::ReasoningDelta {
                index,
                text,
                signature,
            } => {
                let block = self.open_of(at, *index, BlockKind::Reasoning)?;
                block.text.push_str(text);
                if signature.is_some() {
                    block.signature.clone_from(signature);
                }
            }
            Chunk::ToolCallDelta { index, arguments } => {
                self.open_of(at, *index, BlockKind::ToolCall)?
                    .text
                    .push_str(arguments);
            }
            Chunk::BlockEnd { index, block } => {
                let Some(open) = self.open.get(index) else {
                    return Err(protocol(format!(
                        "chunk {at} closes block {index}, which is not open"
                    )));
                };
                let matches = matches!(
                    (open.kind, block),
                    (BlockKind::Text, ContentBlock::Text(_))
                        | (BlockKind::Reasoning, ContentBlock::Reasoning(_))
                        | (BlockKind::ToolCall, ContentBlock::ToolCall(_))
                );
                if !matches {
                    return Err(protocol(format!(
                        "chunk {at} closes {:?} block {index} with a different kind of block",
                        open.kind
                    )));
                }
                if let Some(open) = self.open.remove(index) {
                    self.closed.insert(*index, closed_block(open, block));
                }
            }
            Chunk::MessageExtra { fields } => {
                for (key, value) in fields {
                    self.extra.insert(key.clone(), value.clone());
                }
            }
            Chunk::Usage(usage) => {
                if usage.reasoning > usage.output {
                    return Err(protocol(format!(
                        "chunk {at} reports {} reasoning tokens but only {} output tokens",
                        usage.reasoning, usage.output
                    )));
                }
                self.usage = Some(*usage);
            }
            Chunk::Retry(_) => {
                if self.has_content() {
                    return Err(protocol(format!(
                        "chunk {at} announces a retry after output was streamed"
                    )));
                }
            }
            Chunk::Finish(finish) => {
                let completes = matches!(finish, Finish::Stop | Finish::Length | Finish::ToolCalls);
                if completes && let Some(index) = self.open.keys().next() {
                    return Err(protocol(format!(
                        "chunk {at} finishes the stream while block {index} is still open"
                    )));
                }
                self.finish = Some(finish.clone());
            }
        }
        Ok(())
    }

    fn open_of(
        &mut self,
        at: u64,
        index: u32,
        kind: BlockKind,
    ) -> Result<&mut OpenBlock, LlmFailure> {
        match self.open.get_mut(&index) {
            Some(block) if block.kind == kind => Ok(block),
            Some(block) => Err(protocol(format!(
                "chunk {at} sends a {kind:?} delta to {:?} block {index}",
                block.kind
            ))),
            None => Err(protocol(format!(
                "chunk {at} sends a {kind:?} delta to block {index}, which is not open"
            ))),
        }
    }

    /// Ends the stream. A stream that stopped without a finish ends as
    /// `STREAM_PROTOCOL` (H-LLM-7: a missing finish is a protocol error).
    pub fn finish(self) -> Assembled {
        let finish = self.finish.unwrap_or_else(|| Finish::Error {
            failure: protocol("the stream ended without a finish".to_owned()),
        });
        Self::build(self.open, self.closed, self.usage, self.extra, finish)
    }

    /// Ends the stream with a failure that happened outside it (for example a protocol
    /// violation found by [`Assembler::push`]); what was streamed so far is kept as partial.
    pub fn fail(self, failure: LlmFailure) -> Assembled {
        Self::build(
            self.open,
            self.closed,
            self.usage,
            self.extra,
            Finish::Error { failure },
        )
    }

    fn build(
        open: BTreeMap<u32, OpenBlock>,
        closed: BTreeMap<u32, ContentBlock>,
        usage: Option<TokenUsage>,
        extra: JsonObject,
        finish: Finish,
    ) -> Assembled {
        let partial = open
            .into_values()
            .map(|block| match block.kind {
                BlockKind::Text => ContentBlock::Text(TextBlock {
                    text: block.text,
                    extra: ccare_core::Extra::new(),
                }),
                BlockKind::Reasoning => ContentBlock::Reasoning(ReasoningBlock {
                    text: block.text,
                    signature: block.signature,
                    opaque: false,
                    extra: ccare_core::Extra::new(),
                }),
                BlockKind::ToolCall => ContentBlock::ToolCall(ToolCallBlock {
                    id: block.id.unwrap_or_default(),
                    name: block.name.unwrap_or_default(),
                    arguments: Value::Null,
                    raw_arguments: Some(block.text),
                    extra: ccare_core::Extra::new(),
                }),
            })
            .collect();
        Assembled {
            blocks: closed.into_values().collect(),
            partial,
            usage,
            extra,
            finish,
        }
    }
}

/// The block a block-end closes `open` with. The block-end's block is what is kept;
/// its text is taken from the assembler's own copy when the two agree (they do for every
/// well-behaved adapter), so the closed block costs no second copy of a long answer.
fn closed_block(open: OpenBlock, end: &ContentBlock) -> ContentBlock {
    match end {
        ContentBlock::Text(text) if text.text == open.text => ContentBlock::Text(TextBlock {
            text: open.text,
            extra: text.extra.clone(),
        }),
        ContentBlock::Reasoning(reasoning) if reasoning.text == open.text => {
            ContentBlock::Reasoning(ReasoningBlock {
                text: open.text,
                signature: reasoning.signature.clone(),
                opaque: reasoning.opaque,
                extra: reasoning.extra.clone(),
            })
        }
        ContentBlock::Text(_)
        | ContentBlock::Reasoning(_)
        | ContentBlock::ToolCall(_)
        | ContentBlock::ToolResult(_)
        | ContentBlock::Image(_)
        | ContentBlock::Unknown(_) => end.clone(),
    }
}

/// Builds a tool-call block from streamed argument text. Arguments that parse as
/// lossless JSON are kept parsed; empty arguments mean `{}`; anything else is kept
/// verbatim in `raw_arguments` with `arguments: null`, so the host can answer the
/// call with an argument error instead of losing what the model wrote.
pub fn tool_call_block(id: String, name: String, raw_arguments: String) -> ToolCallBlock {
    let trimmed = raw_arguments.trim();
    let (arguments, raw) = if trimmed.is_empty() {
        (Value::Object(JsonObject::new()), None)
    } else {
        match serde_json::from_str::<Value>(trimmed) {
            Ok(value) if check_value(&value).is_ok() => (value, None),
            Ok(_) | Err(_) => (Value::Null, Some(raw_arguments)),
        }
    };
    ToolCallBlock {
        id,
        name,
        arguments,
        raw_arguments: raw,
        extra: ccare_core::Extra::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn text_stream() -> Vec<Chunk> {
        vec![
            Chunk::BlockStart {
                index: 0,
                kind: BlockKind::Text,
                id: None,
                name: None,
            },
            Chunk::TextDelta {
                index: 0,
                text: "Hel".into(),
            },
            Chunk::TextDelta {
                index: 0,
                text: "lo".into(),
            },
        ]
    }

    #[test]
    fn h_llm_3_delta_to_a_closed_block_is_a_protocol_error() {
        let mut assembler = Assembler::new();
        for chunk in text_stream() {
            assert!(assembler.push(&chunk).is_ok());
        }
        let end = Chunk::BlockEnd {
            index: 0,
            block: ContentBlock::text("Hello"),
        };
        assert!(assembler.push(&end).is_ok());
        let late = Chunk::TextDelta {
            index: 0,
            text: "!".into(),
        };
        let failure = assembler.push(&late).err();
        assert_eq!(
            failure.map(|failure| (failure.code, failure.message)),
            Some((
                FailureCode::StreamProtocol,
                "chunk 5 sends a Text delta to block 0, which is not open".to_owned()
            ))
        );
    }

    #[test]
    fn h_llm_3_missing_finish_is_a_protocol_error_keeping_the_partial_text() {
        let mut assembler = Assembler::new();
        for chunk in text_stream() {
            assert!(assembler.push(&chunk).is_ok());
        }
        let assembled = assembler.finish();
        assert!(matches!(
            &assembled.finish,
            Finish::Error { failure } if failure.code == FailureCode::StreamProtocol
        ));
        assert_eq!(assembled.text(), "Hello");
        assert_eq!(
            assembled.visible_prefix().content,
            vec![ContentBlock::text("Hello")]
        );
    }

    #[test]
    fn h_llm_3_stop_with_an_open_block_is_refused() {
        let mut assembler = Assembler::new();
        for chunk in text_stream() {
            assert!(assembler.push(&chunk).is_ok());
        }
        assert!(assembler.push(&Chunk::Finish(Finish::Stop)).is_err());
        assert!(assembler.push(&Chunk::Finish(Finish::Aborted)).is_ok());
        assert!(assembler.push(&Chunk::Finish(Finish::Stop)).is_err());
    }

    #[test]
    fn h_llm_3_the_block_end_decides_the_closed_block() {
        let signed = ContentBlock::Reasoning(ReasoningBlock {
            text: "Hello".into(),
            signature: Some("sig".into()),
            opaque: false,
            extra: ccare_core::Extra::new(),
        });
        let cases = [
            (BlockKind::Text, ContentBlock::text("Hello")),
            (BlockKind::Text, ContentBlock::text("Hello, rewritten")),
            (BlockKind::Reasoning, signed),
        ];
        for (kind, end) in cases {
            let mut assembler = Assembler::new();
            let mut chunks = text_stream();
            chunks[0] = Chunk::BlockStart {
                index: 0,
                kind,
                id: None,
                name: None,
            };
            if kind == BlockKind::Reasoning {
                for chunk in &mut chunks[1..] {
                    if let Chunk::TextDelta { index, text } = chunk.clone() {
                        *chunk = Chunk::ReasoningDelta {
                            index,
                            text,
                            signature: None,
                        };
                    }
                }
            }
            chunks.push(Chunk::BlockEnd {
                index: 0,
                block: end.clone(),
            });
            chunks.push(Chunk::Finish(Finish::Stop));
            for chunk in &chunks {
                assert!(assembler.push(chunk).is_ok(), "{chunk:?}");
            }
            assert_eq!(assembler.finish().blocks, vec![end]);
        }
    }

    #[test]
    fn tool_arguments_keep_what_is_not_json() {
        let parsed = tool_call_block("c".into(), "t".into(), r#"{"a":1}"#.into());
        assert_eq!(parsed.arguments, serde_json::json!({"a": 1}));
        assert_eq!(parsed.raw_arguments, None);
        let empty = tool_call_block("c".into(), "t".into(), String::new());
        assert_eq!(empty.arguments, serde_json::json!({}));
        let broken = tool_call_block("c".into(), "t".into(), r#"{"a":"#.into());
        assert_eq!(broken.arguments, Value::Null);
        assert_eq!(broken.raw_arguments.as_deref(), Some(r#"{"a":"#));
        let unsafe_int =
            tool_call_block("c".into(), "t".into(), r#"{"a":9007199254740993}"#.into());
        assert_eq!(unsafe_int.arguments, Value::Null);
    }
}
