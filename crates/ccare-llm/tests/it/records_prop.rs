//! H-EVT-4 / H-TEST-3: stream records round-trip: any chunk sequence recorded and
//! expanded gives back exactly the chunks and their times.

#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use ccare_core::ContentBlock;
use ccare_llm::records::{StreamRecorder, expand};
use ccare_llm::{BlockKind, Chunk, Finish, TokenUsage};
use proptest::prelude::*;

fn chunk() -> impl Strategy<Value = Chunk> {
    let text = "[a-z é😀\\n\"]{0,6}";
    prop_oneof![
        (0u32..3, text).prop_map(|(index, text)| Chunk::TextDelta { index, text }),
        (0u32..3, text).prop_map(|(index, text)| Chunk::ReasoningDelta {
            index,
            text,
            signature: None
        }),
        (0u32..3, text, "[a-z]{1,4}").prop_map(|(index, text, signature)| Chunk::ReasoningDelta {
            index,
            text,
            signature: Some(signature)
        }),
        (0u32..3, text).prop_map(|(index, arguments)| Chunk::ToolCallDelta { index, arguments }),
        (0u32..3, "[a-z]{1,4}").prop_map(|(index, id)| Chunk::BlockStart {
            index,
            kind: BlockKind::ToolCall,
            id: Some(id),
            name: Some("f".into())
        }),
        (0u32..3).prop_map(|index| Chunk::BlockStart {
            index,
            kind: BlockKind::Text,
            id: None,
            name: None
        }),
        (0u32..3, text).prop_map(|(index, text)| Chunk::BlockEnd {
            index,
            block: ContentBlock::text(text)
        }),
        (0u64..100).prop_map(|output| Chunk::Usage(TokenUsage {
            output,
            ..TokenUsage::default()
        })),
        Just(Chunk::Finish(Finish::Stop)),
    ]
}

proptest! {
    #[test]
    fn h_evt_4_records_expand_to_exactly_the_chunks(
        stream in proptest::collection::vec((chunk(), -5i64..50), 0..60),
        start in -1_000i64..1_000_000,
    ) {
        let mut recorder = StreamRecorder::new();
        let mut time = start;
        let mut expected = Vec::new();
        for (chunk, gap) in &stream {
            time += gap;
            recorder.push(chunk, time);
            expected.push((time, chunk.clone()));
        }
        let json = recorder.to_json();
        let text = serde_json::to_string(&json).unwrap();
        let back: Vec<serde_json::Value> = serde_json::from_str(&text).unwrap();
        prop_assert_eq!(expand(&back).unwrap(), expected);
        prop_assert!(json.len() <= stream.len());
    }
}

#[test]
fn h_evt_4_deltas_of_one_block_share_one_record() {
    let mut recorder = StreamRecorder::new();
    recorder.push(
        &Chunk::BlockStart {
            index: 0,
            kind: BlockKind::Text,
            id: None,
            name: None,
        },
        100,
    );
    for (at, text) in [(101, "Hel"), (103, "lo"), (110, "!")] {
        recorder.push(
            &Chunk::TextDelta {
                index: 0,
                text: text.into(),
            },
            at,
        );
    }
    assert_eq!(
        serde_json::Value::Array(recorder.to_json())[1],
        serde_json::json!({"type": "text-chunks", "index": 0, "t0_ms": 101, "dt_ms": [2, 7], "texts": ["Hel", "lo", "!"]})
    );
}

#[test]
fn h_evt_4_bad_records_are_named() {
    let error = expand(&[serde_json::json!({"type": "text-chunks", "index": 0, "t0_ms": 1, "dt_ms": [1, 2], "texts": ["a"]})]).unwrap_err();
    assert_eq!(error.to_string(), "stream record 0: 2 gaps for 1 deltas");
}
