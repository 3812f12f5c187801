//! Property tests: H-TOK-2's "adding a block never lowers the total", block pricing by
//! difference, and additivity of the character counts behind H-TOK-1.

#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use ccare_core::{
    ContentBlock, ImageBlock, JsonObject, Message, ReasoningBlock, ToolCallBlock, ToolResultBlock,
};
use ccare_meter::{CharCounts, HeuristicWeights, Meter, estimate_message, estimate_text};
use proptest::prelude::*;
use serde_json::{Value, json};

fn any_text() -> impl Strategy<Value = String> {
    // Mixed scripts, emoji, whitespace and punctuation.
    "[a-zA-Z0-9 \\t\\n{}();:,.\"'!?一-龥ぁ-んァ-ン가-힣ＡＢ１！😀é]{0,40}"
}

fn leaf_block() -> impl Strategy<Value = ContentBlock> {
    prop_oneof![
        any_text().prop_map(ContentBlock::text),
        (any_text(), proptest::option::of(any_text()), any::<bool>()).prop_map(
            |(text, signature, opaque)| ContentBlock::Reasoning(ReasoningBlock {
                text,
                signature,
                opaque,
                extra: JsonObject::new(),
            })
        ),
        (any_text(), any_text(), proptest::option::of(any_text())).prop_map(
            |(name, value, raw_arguments)| ContentBlock::ToolCall(ToolCallBlock {
                id: "call".into(),
                name,
                arguments: json!({ "value": value }),
                raw_arguments,
                extra: JsonObject::new(),
            })
        ),
        Just(ContentBlock::Image(ImageBlock {
            media_type: "image/png".into(),
            data: None,
            uri: Some("file:///x.png".into()),
            offloaded: true,
            extra: JsonObject::new(),
        })),
        (any_text(), any::<i32>()).prop_map(|(kind, depth)| {
            let mut object = JsonObject::new();
            object.insert("type".into(), Value::String(format!("x-{kind}")));
            object.insert("depth".into(), json!(depth));
            ContentBlock::Unknown(object)
        }),
    ]
}

fn any_block() -> impl Strategy<Value = ContentBlock> {
    prop_oneof![
        3 => leaf_block(),
        1 => (any_text(), proptest::collection::vec(leaf_block(), 0..4), any::<bool>()).prop_map(
            |(name, content, is_error)| ContentBlock::ToolResult(ToolResultBlock {
                call_id: "call".into(),
                name,
                content,
                is_error,
                extra: JsonObject::new(),
            })
        ),
    ]
}

fn any_weights() -> impl Strategy<Value = HeuristicWeights> {
    (0.0..5.0f64, 0.0..5.0f64, 0.0..5.0f64)
        .prop_map(|(cjk, alnum, other)| HeuristicWeights::new(cjk, alnum, other).unwrap())
}

proptest! {
    #[test]
    fn appending_a_block_never_lowers_the_total(
        blocks in proptest::collection::vec(any_block(), 0..6),
        extra in any_block(),
        weights in any_weights(),
    ) {
        let meter = Meter::heuristic(weights);
        let before = Message::from_blocks(blocks.clone());
        let mut with_block = blocks;
        with_block.push(extra.clone());
        let after = Message::from_blocks(with_block);

        prop_assert!(estimate_message(&after) >= estimate_message(&before) + 4);
        prop_assert!(meter.message(&after) >= meter.message(&before) + 4);
        // A block is priced by difference.
        prop_assert_eq!(meter.message(&after) - meter.message(&before), meter.block(&extra));
    }

    #[test]
    fn inserting_a_block_anywhere_never_lowers_the_total(
        blocks in proptest::collection::vec(any_block(), 0..6),
        extra in any_block(),
        position in any::<prop::sample::Index>(),
    ) {
        let before = estimate_message(&Message::from_blocks(blocks.clone()));
        let mut with_block = blocks;
        let at = position.index(with_block.len() + 1);
        with_block.insert(at, extra);
        prop_assert!(estimate_message(&Message::from_blocks(with_block)) >= before + 4);
    }

    #[test]
    fn counts_are_additive_and_estimates_monotone(a in any_text(), b in any_text()) {
        let joined = format!("{a}{b}");
        prop_assert_eq!(CharCounts::of(&joined), CharCounts::of(&a) + CharCounts::of(&b));
        prop_assert!(estimate_text(&joined) >= estimate_text(&a));
        prop_assert!(estimate_text(&joined) <= estimate_text(&a) + estimate_text(&b));
    }

    #[test]
    fn counts_match_a_per_char_classification(text in "\\PC{0,64}") {
        let per_char = text
            .chars()
            .map(CharCounts::of_char)
            .fold(CharCounts::default(), |sum, counts| sum + counts);
        prop_assert_eq!(CharCounts::of(&text), per_char);
    }
}
