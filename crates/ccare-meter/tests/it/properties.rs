//! Property tests: H-TOK-2's "adding a block never lowers the total", block pricing by
//! difference, additivity of the character counts behind H-TOK-1, and how the run
//! counts behave when text is split (they merge at the seam, so estimates stay
//! monotone and subadditive).

#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use ccare_core::{
    ContentBlock, ImageBlock, JsonObject, Message, ReasoningBlock, ToolCallBlock, ToolResultBlock,
};
use ccare_meter::{
    CharCounts, HeuristicWeights, Meter, StructureWeights, estimate_message, estimate_text,
};
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
                extra: ccare_core::Extra::new(),
            })
        ),
        (any_text(), any_text(), proptest::option::of(any_text())).prop_map(
            |(name, value, raw_arguments)| ContentBlock::ToolCall(ToolCallBlock {
                id: "call".into(),
                name,
                arguments: json!({ "value": value }),
                raw_arguments,
                extra: ccare_core::Extra::new(),
            })
        ),
        Just(ContentBlock::Image(ImageBlock {
            media_type: "image/png".into(),
            data: None,
            uri: Some("file:///x.png".into()),
            offloaded: true,
            detail: None,
            extra: ccare_core::Extra::new(),
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
                extra: ccare_core::Extra::new(),
            })
        ),
    ]
}

/// Spec-formula weights, or with structure weights too (the preset among them).
fn any_weights() -> impl Strategy<Value = HeuristicWeights> {
    let spec = (0.0..5.0f64, 0.0..5.0f64, 0.0..5.0f64)
        .prop_map(|(cjk, alnum, other)| HeuristicWeights::new(cjk, alnum, other).unwrap());
    let structure = (0.0..5.0f64, 0.0..5.0f64, 0.0..5.0f64, 0.0..5.0f64).prop_map(
        |(digit_group, word, other_run, newline)| StructureWeights {
            digit_group,
            word,
            other_run,
            newline,
        },
    );
    prop_oneof![
        spec.clone(),
        (spec, structure)
            .prop_map(|(weights, structure)| weights.with_structure(structure).unwrap()),
        Just(HeuristicWeights::deepseek_v4()),
    ]
}

/// Whether `ch` is in the `other` class (non-whitespace, not CJK, not ASCII alnum).
fn is_other(ch: char) -> bool {
    CharCounts::of_char(ch).other == 1
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
    fn counts_are_additive_up_to_runs_crossing_the_seam(a in any_text(), b in any_text()) {
        let joined = CharCounts::of(&format!("{a}{b}"));
        let (ca, cb) = (CharCounts::of(&a), CharCounts::of(&b));
        let sum = ca + cb;
        prop_assert_eq!(joined.cjk, sum.cjk);
        prop_assert_eq!(joined.ascii_alnum, sum.ascii_alnum);
        prop_assert_eq!(joined.other, sum.other);
        prop_assert_eq!(joined.newlines, sum.newlines);
        // A run crossing the seam is one run of the whole but one in each half.
        let (last, first) = (a.chars().next_back(), b.chars().next());
        let word_seam = last.zip(first).is_some_and(|(x, y)| {
            x.is_ascii_alphabetic() && y.is_ascii_alphabetic()
        });
        let other_seam = last.zip(first).is_some_and(|(x, y)| is_other(x) && is_other(y));
        prop_assert_eq!(joined.words, sum.words - u64::from(word_seam));
        prop_assert_eq!(joined.other_runs, sum.other_runs - u64::from(other_seam));
        // Digits at the seam regroup: m + n digits make ceil((m + n) / 3) groups.
        let m = a.chars().rev().take_while(char::is_ascii_digit).count() as u64;
        let n = b.chars().take_while(char::is_ascii_digit).count() as u64;
        let regrouped = m.div_ceil(3) + n.div_ceil(3) - (m + n).div_ceil(3);
        prop_assert_eq!(joined.digit_groups, sum.digit_groups - regrouped);
    }

    #[test]
    fn estimates_are_monotone_and_subadditive(
        a in any_text(),
        b in any_text(),
        weights in any_weights(),
    ) {
        let joined = format!("{a}{b}");
        prop_assert!(estimate_text(&joined) >= estimate_text(&a));
        prop_assert!(estimate_text(&joined) >= estimate_text(&b));
        prop_assert!(estimate_text(&joined) <= estimate_text(&a) + estimate_text(&b));
        let estimate = |text: &str| weights.estimate(text);
        prop_assert!(estimate(&joined) >= estimate(&a));
        prop_assert!(estimate(&joined) >= estimate(&b));
        prop_assert!(estimate(&joined) <= estimate(&a) + estimate(&b));
    }

    #[test]
    fn counts_match_a_per_char_classification(text in "\\PC{0,64}") {
        let mut per_char = CharCounts::default();
        let mut prev = CharCounts::default();
        let mut digit_run = 0;
        for ch in text.chars() {
            let counts = CharCounts::of_char(ch);
            per_char.cjk += counts.cjk;
            per_char.ascii_alnum += counts.ascii_alnum;
            per_char.other += counts.other;
            // A digit group starts at the 1st, 4th, 7th, ... digit of a run.
            if counts.digit_groups == 1 {
                per_char.digit_groups += u64::from(digit_run % 3 == 0);
                digit_run += 1;
            } else {
                digit_run = 0;
            }
            per_char.newlines += counts.newlines;
            // A run starts at a character of its class after one that is not.
            per_char.words += u64::from(counts.words == 1 && prev.words == 0);
            per_char.other_runs += u64::from(counts.other_runs == 1 && prev.other_runs == 0);
            prev = counts;
        }
        prop_assert_eq!(CharCounts::of(&text), per_char);
    }
}
