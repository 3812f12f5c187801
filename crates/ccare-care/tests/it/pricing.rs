//! Input pricing (spec context-care.md §2, CC-PRC-1..4; acceptance A4).
//!
//! Every expected number is worked by hand from the spec formulas, with the meter's
//! heuristic at default weights (H-TOK-1: `ceil(0.7·cjk + 0.3·ascii_alnum +
//! 0.8·other)`, whitespace free) and H-TOK-2 overheads (4 per message, 4 per block,
//! 1024 per image, `est + 4` for system and tools).

#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use ccare_care::pricing::{
    CalibrationRecord, FileTexts, FrozenPricing, ImagePrice, ImagePrices, ImagePricing,
    JournalRecordKind, MeterKind, Price, PricingBasis, PricingError, RawInput, RecordUsage,
    RequestOutcome, TextScale, UsageCalibration, block_key, block_tokens, calibrate,
    calibration_header_key, collect_images, image_key,
};
use ccare_core::{
    ContentBlock, Extra, ImageBlock, JsonObject, Message, TokenUsage, ToolCallBlock,
    ToolResultBlock,
};
use ccare_meter::{Meter, MeterConfig, estimate_message};
use serde_json::{Value, json};

const KEY: &str = "header-key";

// ---------------------------------------------------------------------------------------
// Helpers

/// A record that is eligible (CC-PRC-3) as built: raw text 200, visual 300 (the spec's
/// vectors), usage `{inputTokens 1500, cacheReadTokens 100}`, sampleSeq 3, `c1`.
fn eligible() -> CalibrationRecord {
    CalibrationRecord {
        kind: JournalRecordKind::Request,
        call_id: "c1".into(),
        dispatched: true,
        outcome: Some(RequestOutcome::Completed),
        purpose: Some("conversation".into()),
        event_type: Some("assistant/message".into()),
        event_seq: Some(3),
        header_key: Some(KEY.into()),
        raw_input: Some(RawInput {
            text_tokens: 200,
            visual_tokens: 300,
        }),
        usage: Some(usage(1500, Some(100), None)),
    }
}

fn usage(input: u64, cache_read: Option<u64>, cache_write: Option<u64>) -> RecordUsage {
    RecordUsage {
        input_tokens: Some(input),
        cache_read_tokens: cache_read,
        cache_write_tokens: cache_write,
        output_tokens: None,
    }
}

fn with_usage(mut record: CalibrationRecord, usage: RecordUsage) -> CalibrationRecord {
    record.usage = Some(usage);
    record
}

fn with_seq(mut record: CalibrationRecord, seq: u64, call: &str) -> CalibrationRecord {
    record.event_seq = Some(seq);
    record.call_id = call.into();
    record
}

fn scale_of(records: &[CalibrationRecord]) -> f64 {
    calibrate(records, KEY, MeterKind::Heuristic)
        .text_scale()
        .as_f64()
}

fn image(name: &str) -> ImageBlock {
    ImageBlock {
        media_type: "image/png".into(),
        data: Some(format!("iVBORw0KGgo{name}")),
        uri: None,
        offloaded: false,
        detail: None,
        extra: Extra::new(),
    }
}

fn hello_and_image(image: &ImageBlock) -> Message {
    Message::from_blocks(vec![
        ContentBlock::text("hello"),
        ContentBlock::Image(image.clone()),
    ])
}

/// Prices `[image]` at `{text "[image 1]", visual 300}`.
fn priced(image: &ImageBlock) -> ImagePricing {
    let prices = ImagePrices::from_batch(
        &[image],
        vec![ImagePrice {
            text: "[image 1]".into(),
            visual_tokens: 300,
        }],
    )
    .unwrap();
    ImagePricing::Priced(prices)
}

/// A usage-calibrated basis of scale `(prompt − 300)/200`.
fn calibrated(prompt: u64) -> PricingBasis {
    PricingBasis::UsageCalibrated(UsageCalibration {
        sample_seq: 3,
        sample_call_id: "c1".into(),
        prompt_tokens: prompt,
        raw_input: RawInput {
            text_tokens: 200,
            visual_tokens: 300,
        },
    })
}

// ---------------------------------------------------------------------------------------
// CC-PRC-1

#[test]
fn prc1_block_tokens_is_the_difference_of_two_user_messages() {
    let meter = Meter::default();
    let empty = estimate_message(&Message::from_blocks(vec![]));
    let blocks = vec![
        ContentBlock::text("hello"),
        ContentBlock::text("你好，世界"),
        ContentBlock::ToolCall(ToolCallBlock {
            id: "c1".into(),
            name: "read_file".into(),
            arguments: json!({"path": "a.rs"}),
            raw_arguments: None,
            extra: Extra::new(),
        }),
        ContentBlock::ToolResult(ToolResultBlock {
            call_id: "c1".into(),
            name: "shell".into(),
            content: vec![ContentBlock::text("ok"), ContentBlock::Image(image("a"))],
            is_error: false,
            extra: Extra::new(),
        }),
        ContentBlock::Image(image("b")),
        serde_json::from_value(json!({"type": "file", "name": "a.txt"})).unwrap(),
    ];
    for block in blocks {
        let one = estimate_message(&Message::from_blocks(vec![block.clone()]));
        assert_eq!(block_tokens(&meter, &block), one - empty, "{block:?}");
    }
    // By hand: est("hello") = ceil(0.3·5) = 2, plus the block's 4.
    assert_eq!(block_tokens(&meter, &ContentBlock::text("hello")), 6);
    // An image block: 4 + 1024.
    assert_eq!(block_tokens(&meter, &ContentBlock::Image(image("c"))), 1028);
}

// ---------------------------------------------------------------------------------------
// CC-PRC-2 / A4

#[test]
fn a4_image_at_scale_3_keeps_its_visual_part_unscaled() {
    let meter = Meter::default();
    let picture = image("a");
    let message = hello_and_image(&picture);
    // Scale 3 from a real sample: (prompt − visual)/text = (900 − 300)/200.
    let records = [with_usage(eligible(), usage(900, None, None))];
    let basis = calibrate(&records, KEY, MeterKind::Heuristic);
    assert_eq!(basis.text_scale(), TextScale::new(3, 1).unwrap());

    let frozen = FrozenPricing::capture(&meter, basis, priced(&picture), FileTexts::default());
    let pricer = frozen.pricer(&meter).unwrap();
    let price = pricer.message(&message).unwrap();
    // est(msg)                       = 4 + (4 + est("hello")=2) + (4 + 1024) = 1038
    // blockTokens(text("[image 1]")) = 4 + ceil(0.8 + 0.3·5 + 0.3 + 0.8 = 3.4) = 8
    // blockTokens(image ref)         = 4 + 1024 = 1028
    // text = 1038 + 8 − 1028 = 18; visual = 300.
    assert_eq!(
        price,
        Price {
            text: 18,
            visual: 300
        }
    );
    assert_eq!(
        price.value(TextScale::new(3, 1).unwrap()),
        18.0 * 3.0 + 300.0
    );
    assert_eq!(price.value(TextScale::ONE), 318.0);
    // Tripling the scale adds 2·18, never anything of the 300 visual tokens.
    assert_eq!(
        price.value(TextScale::new(3, 1).unwrap()) - price.value(TextScale::ONE),
        36.0
    );
    assert_eq!(price.ceil(TextScale::new(3, 1).unwrap()), 354);
}

#[test]
fn prc2_request_price_system_messages_tools() {
    let meter = Meter::default();
    let picture = image("a");
    // Scale 6.5 = (1600 − 300)/200.
    let frozen = FrozenPricing::capture(
        &meter,
        calibrated(1600),
        priced(&picture),
        FileTexts::default(),
    );
    let pricer = frozen.pricer(&meter).unwrap();
    let tools = json!([{"name": "f"}]);
    let request = pricer
        .request(Some("Be brief."), &[hello_and_image(&picture)], &tools)
        .unwrap();
    // system: est("Be brief.") = ceil(0.3·7 + 0.8) = 3, + 4 = 7.
    assert_eq!(request.system, Price { text: 7, visual: 0 });
    assert_eq!(
        request.messages,
        vec![Price {
            text: 18,
            visual: 300
        }]
    );
    // tools: `[{"name":"f"}]` has 9 other characters (`[{"":""}]`) and 5 letters:
    // ceil(0.8·9 + 0.3·5 = 8.7) = 9, + 4 = 13.
    assert_eq!(request.tools, 13);
    assert_eq!(request.tools_value(), 13.0 * 6.5);
    // rawInput is unscaled, tools included in the text.
    assert_eq!(
        request.raw_input(),
        RawInput {
            text_tokens: 7 + 18 + 13,
            visual_tokens: 300
        }
    );
    // price = (7 + 18)·6.5 + 300 + 13·6.5 = 162.5 + 300 + 84.5 = 547; Q = 547.
    assert_eq!(request.value(), 547.0);
    assert_eq!(request.q(), 547);
}

#[test]
fn prc2_no_tools_and_no_system_cost_nothing() {
    let meter = Meter::default();
    let frozen = FrozenPricing::capture(
        &meter,
        PricingBasis::meter_estimate(&meter),
        ImagePricing::FixedEstimate,
        FileTexts::default(),
    );
    let pricer = frozen.pricer(&meter).unwrap();
    for tools in [Value::Null, json!([])] {
        let request = pricer
            .request(None, &[Message::from_blocks(vec![])], &tools)
            .unwrap();
        assert_eq!(request.tools, 0);
        assert_eq!(request.system, Price::default());
        assert_eq!(request.q(), 4);
    }
}

#[test]
fn prc2_without_image_projection_the_fixed_estimate_stays() {
    let meter = Meter::default();
    let picture = image("a");
    let frozen = FrozenPricing::capture(
        &meter,
        calibrated(900),
        ImagePricing::FixedEstimate,
        FileTexts::default(),
    );
    let price = frozen
        .pricer(&meter)
        .unwrap()
        .message(&hello_and_image(&picture))
        .unwrap();
    // est(msg) = 1038, no correction, no visual part.
    assert_eq!(
        price,
        Price {
            text: 1038,
            visual: 0
        }
    );
}

#[test]
fn prc2_image_prices_come_from_one_batch_and_a_count_mismatch_is_an_error() {
    let (a, b) = (image("a"), image("b"));
    let price = ImagePrice {
        text: "[image]".into(),
        visual_tokens: 85,
    };
    assert_eq!(
        ImagePrices::from_batch(&[&a, &b], vec![price.clone()]),
        Err(PricingError::ImageCountMismatch {
            images: 2,
            prices: 1
        })
    );
    let prices = ImagePrices::from_batch(&[&a], vec![price.clone()]).unwrap();
    assert_eq!(prices.get(&a), Some(&price));
    assert_eq!(prices.get(&b), None);

    // An image the frozen pricing does not know is an error, not a guess.
    let meter = Meter::default();
    let frozen = FrozenPricing::capture(
        &meter,
        PricingBasis::meter_estimate(&meter),
        ImagePricing::Priced(prices),
        FileTexts::default(),
    );
    assert_eq!(
        frozen.pricer(&meter).unwrap().message(&hello_and_image(&b)),
        Err(PricingError::ImageNotPriced { key: image_key(&b) })
    );
}

#[test]
fn prc2_images_inside_tool_results_are_collected_and_priced() {
    let meter = Meter::default();
    let (a, b) = (image("a"), image("b"));
    let message = Message::from_blocks(vec![
        ContentBlock::ToolResult(ToolResultBlock {
            call_id: "c1".into(),
            name: "shot".into(),
            content: vec![ContentBlock::Image(a.clone())],
            is_error: false,
            extra: Extra::new(),
        }),
        ContentBlock::Image(b.clone()),
    ]);
    let messages = [message];
    let images = collect_images(&messages);
    assert_eq!(images, vec![&a, &b]);
    let prices = vec![
        ImagePrice {
            text: String::new(),
            visual_tokens: 100,
        },
        ImagePrice {
            text: "x".into(),
            visual_tokens: 200,
        },
    ];
    let frozen = FrozenPricing::capture(
        &meter,
        PricingBasis::meter_estimate(&meter),
        ImagePricing::Priced(ImagePrices::from_batch(&images, prices).unwrap()),
        FileTexts::default(),
    );
    let price = frozen
        .pricer(&meter)
        .unwrap()
        .message(&messages[0])
        .unwrap();
    // est = 4 + (4 + est("shot")=2 + (4 + 1024)) + (4 + 1024) = 2066;
    // a: + (4 + 0) − 1028; b: + (4 + ceil(0.3)=1) − 1028 → 2066 + 4 + 5 − 2056 = 19.
    assert_eq!(
        price,
        Price {
            text: 19,
            visual: 300
        }
    );
}

#[test]
fn prc2_offloaded_image_is_corrected_by_its_ref_without_the_marker() {
    let meter = Meter::default();
    let mut offloaded = image("a");
    offloaded.offloaded = true;
    offloaded.data = None;
    offloaded.uri = Some("blob:a".into());
    let prices = ImagePrices::from_batch(
        &[&offloaded],
        vec![ImagePrice {
            text: "[image offloaded]".into(),
            visual_tokens: 0,
        }],
    )
    .unwrap();
    let frozen = FrozenPricing::capture(
        &meter,
        PricingBasis::meter_estimate(&meter),
        ImagePricing::Priced(prices),
        FileTexts::default(),
    );
    let message = Message::from_blocks(vec![ContentBlock::Image(offloaded)]);
    let price = frozen.pricer(&meter).unwrap().message(&message).unwrap();
    // 4 + 1028 + (4 + ceil(0.8 + 1.5 + 0.3·9 + 0.8 = 5.8)=6) − 1028 = 14.
    assert_eq!(
        price,
        Price {
            text: 14,
            visual: 0
        }
    );
}

#[test]
fn prc2_file_blocks_are_priced_by_their_request_text() {
    let meter = Meter::default();
    let file: JsonObject =
        serde_json::from_value(json!({"type": "file", "name": "a.txt", "fileId": "f1"})).unwrap();
    let block = ContentBlock::Unknown(file.clone());
    let message = Message::from_blocks(vec![block.clone()]);
    let mut files = FileTexts::default();
    files.insert(&file, "hello world");
    assert_eq!(files.get(&file), Some("hello world"));
    let frozen = FrozenPricing::capture(
        &meter,
        PricingBasis::meter_estimate(&meter),
        ImagePricing::FixedEstimate,
        files,
    );
    let pricer = frozen.pricer(&meter).unwrap();
    // 4 + blockTokens(text("hello world")) = 4 + (4 + ceil(0.3·10)) = 11.
    assert_eq!(
        pricer.message(&message).unwrap(),
        Price {
            text: 11,
            visual: 0
        }
    );
    // A file with no known text keeps the meter's estimate of its JSON.
    let other: JsonObject =
        serde_json::from_value(json!({"type": "file", "name": "b.txt"})).unwrap();
    let unknown = Message::from_blocks(vec![ContentBlock::Unknown(other)]);
    assert_eq!(
        pricer.message(&unknown).unwrap().text,
        estimate_message(&unknown)
    );
    assert_ne!(block_key(&block), block_key(&unknown.content[0]));
}

// ---------------------------------------------------------------------------------------
// CC-PRC-3

#[test]
fn prc3_vector_6_5_from_sample_seq_3() {
    let basis = calibrate(&[eligible()], KEY, MeterKind::Heuristic);
    // prompt = 1500 + 100 = 1600 ≥ 500; (1600 − 300)/200 = 6.5.
    assert_eq!(basis.text_scale(), TextScale::new(13, 2).unwrap());
    assert_eq!(basis.text_scale().as_f64(), 6.5);
    assert!(basis.is_calibrated());
    assert_eq!(
        serde_json::to_value(&basis).unwrap(),
        json!({
            "kind": "usage-calibrated",
            "textScale": 6.5,
            "sampleSeq": 3,
            "sampleCallId": "c1",
            "source": "actual-request-journal",
            "samplePromptTokens": 1600,
            "sampleRawInput": {"textTokens": 200, "visualTokens": 300},
        })
    );
}

#[test]
fn prc3_vector_100_has_no_cap() {
    // 20200 + 100 = 20300; (20300 − 300)/200 = 100.
    let record = with_usage(eligible(), usage(20200, Some(100), None));
    assert_eq!(scale_of(&[record]), 100.0);
}

#[test]
fn prc3_vectors_that_fall_back_to_1() {
    let mut failed = eligible();
    failed.outcome = Some(RequestOutcome::Failed);
    let mut undispatched = eligible();
    undispatched.dispatched = false;
    let mut compaction = eligible();
    compaction.purpose = Some("compaction".into());
    let mut other_key = eligible();
    other_key.header_key = Some("another-header".into());
    let mut attempt = eligible();
    attempt.event_type = Some("assistant/attempt".into());
    // 499 < 200 + 300: eligible but skipped.
    let small = with_usage(eligible(), usage(499, None, None));
    for (name, record) in [
        ("failed", failed),
        ("undispatched", undispatched),
        ("compaction", compaction),
        ("other key", other_key),
        ("assistant/attempt", attempt),
        ("inputTokens 499", small),
    ] {
        let basis = calibrate(&[record], KEY, MeterKind::Heuristic);
        assert_eq!(basis, PricingBasis::UncalibratedEstimate, "{name}");
        assert_eq!(basis.text_scale(), TextScale::ONE, "{name}");
        assert!(!basis.is_calibrated(), "{name}");
        assert_eq!(
            serde_json::to_value(&basis).unwrap(),
            json!({"kind": "uncalibrated-estimate", "textScale": 1.0}),
            "{name}"
        );
    }
}

#[test]
fn prc3_other_ineligible_records() {
    let mut interrupted = eligible();
    interrupted.outcome = Some(RequestOutcome::Interrupted);
    let mut not_dispatched = eligible();
    not_dispatched.outcome = Some(RequestOutcome::NotDispatched);
    let mut unsettled = eligible();
    unsettled.outcome = None;
    let mut no_seq = eligible();
    no_seq.event_seq = None;
    let mut no_key = eligible();
    no_key.header_key = None;
    let mut zero_text = eligible();
    zero_text.raw_input = Some(RawInput {
        text_tokens: 0,
        visual_tokens: 300,
    });
    let mut no_raw = eligible();
    no_raw.raw_input = None;
    let mut no_usage = eligible();
    no_usage.usage = None;
    // Cache reads alone, no inputTokens: not eligible.
    let no_input = with_usage(
        eligible(),
        RecordUsage {
            input_tokens: None,
            cache_read_tokens: Some(5000),
            cache_write_tokens: None,
            output_tokens: Some(10),
        },
    );
    let mut maintenance_kind = eligible();
    maintenance_kind.kind = JournalRecordKind::Maintenance;
    let mut session_title = eligible();
    session_title.purpose = Some("session-title".into());
    for (name, record) in [
        ("interrupted", interrupted),
        ("not-dispatched", not_dispatched),
        ("unsettled", unsettled),
        ("no eventSeq", no_seq),
        ("no header key", no_key),
        ("rawInput.textTokens 0", zero_text),
        ("no rawInput", no_raw),
        ("no usage", no_usage),
        ("no inputTokens", no_input),
        ("maintenance", maintenance_kind),
        ("session-title", session_title),
    ] {
        assert!(!record.is_eligible(KEY), "{name}");
        assert_eq!(
            calibrate(&[record], KEY, MeterKind::Heuristic),
            PricingBasis::UncalibratedEstimate,
            "{name}"
        );
    }
    assert!(eligible().is_eligible(KEY));
}

#[test]
fn prc3_no_records_is_the_meters_basis() {
    let heuristic = calibrate(&[], KEY, MeterKind::Heuristic);
    assert_eq!(heuristic, PricingBasis::Meter(MeterKind::Heuristic));
    assert_eq!(heuristic.text_scale(), TextScale::ONE);
    assert!(!heuristic.is_calibrated());
    assert_eq!(
        serde_json::to_value(&heuristic).unwrap(),
        json!({"kind": "heuristic", "textScale": 1.0})
    );
    assert_eq!(calibrate(&[], KEY, MeterKind::Exact).kind(), "exact");
    assert_eq!(
        PricingBasis::meter_estimate(&Meter::default()),
        PricingBasis::Meter(MeterKind::Heuristic)
    );
    // A journal with only maintenance records is not empty: uncalibrated.
    assert_eq!(
        calibrate(
            &[CalibrationRecord::maintenance()],
            KEY,
            MeterKind::Heuristic
        ),
        PricingBasis::UncalibratedEstimate
    );
}

#[test]
fn prc3_newest_usable_record_by_event_seq_wins_whatever_the_order() {
    let older = with_usage(with_seq(eligible(), 1, "c0"), usage(700, None, None)); // 2
    let sample = eligible(); // seq 3, 6.5
    let skipped = with_usage(with_seq(eligible(), 5, "c5"), usage(499, None, None));
    let mut failed = with_seq(eligible(), 7, "c7");
    failed.outcome = Some(RequestOutcome::Failed);
    let mut records = vec![
        skipped,
        CalibrationRecord::maintenance(),
        sample,
        failed,
        older,
    ];
    for _ in 0..records.len() {
        let basis = calibrate(&records, KEY, MeterKind::Heuristic);
        let PricingBasis::UsageCalibrated(chosen) = &basis else {
            panic!("expected a calibration, got {basis:?}");
        };
        assert_eq!(
            (chosen.sample_seq, chosen.sample_call_id.as_str()),
            (3, "c1")
        );
        assert_eq!(basis.text_scale().as_f64(), 6.5);
        records.rotate_left(1);
    }
}

#[test]
fn prc3_prompt_counts_cache_writes_but_never_output() {
    let record = with_usage(
        eligible(),
        RecordUsage {
            input_tokens: Some(1000),
            cache_read_tokens: None,
            cache_write_tokens: Some(100),
            output_tokens: Some(100_000),
        },
    );
    // (1000 + 100 − 300)/200 = 4.
    assert_eq!(scale_of(&[record]), 4.0);
    // Host usage maps field for field; output stays out.
    let host = RecordUsage::from(TokenUsage {
        input: 1000,
        cache_read: 20,
        cache_write: 30,
        output: 5000,
        reasoning: 100,
    });
    assert_eq!(host.prompt_tokens(), Some(1050));
}

#[test]
fn prc3_prompt_equal_to_the_raw_estimate_calibrates_to_exactly_1() {
    // 500 is not below 200 + 300: used, (500 − 300)/200 = 1, and calibrated.
    let basis = calibrate(
        &[with_usage(eligible(), usage(500, None, None))],
        KEY,
        MeterKind::Heuristic,
    );
    assert!(basis.is_calibrated());
    assert_eq!(basis.text_scale(), TextScale::ONE);
}

#[test]
fn prc3_header_key_is_sha256_of_canonical_config_and_tools() {
    // Keys sorted at every depth, compact:
    // {"config":{"model":"deepseek-chat","provider":"deepseek"},"tools":[]}
    let key = calibration_header_key(
        &json!({"provider": "deepseek", "model": "deepseek-chat"}),
        &json!([]),
    );
    assert_eq!(
        key,
        "e059bce9e31c7a74820c568f741bf3e928fbd4843aa0f83fd6a31b246fc65b3f"
    );
    let reordered = calibration_header_key(
        &json!({"model": "deepseek-chat", "provider": "deepseek"}),
        &json!([]),
    );
    assert_eq!(key, reordered);
    let with_tool = calibration_header_key(
        &json!({"provider": "deepseek", "model": "deepseek-chat"}),
        &json!([{"name": "f"}]),
    );
    assert_ne!(key, with_tool);
}

#[test]
fn prc3_basis_reads_back_and_rejects_inconsistent_objects() {
    for basis in [
        calibrated(1600),
        PricingBasis::UncalibratedEstimate,
        PricingBasis::Meter(MeterKind::Exact),
    ] {
        let text = serde_json::to_string(&basis).unwrap();
        assert_eq!(serde_json::from_str::<PricingBasis>(&text).unwrap(), basis);
    }
    // The spec's own object, integer 1 included.
    assert_eq!(
        serde_json::from_value::<PricingBasis>(
            json!({"kind": "uncalibrated-estimate", "textScale": 1})
        )
        .unwrap(),
        PricingBasis::UncalibratedEstimate
    );
    for bad in [
        json!({"kind": "uncalibrated-estimate", "textScale": 2}),
        json!({"kind": "mystery", "textScale": 1}),
        json!({"kind": "usage-calibrated", "textScale": 6.5, "sampleSeq": 3, "sampleCallId": "c1",
               "source": "actual-request-journal"}),
        json!({"kind": "usage-calibrated", "textScale": 6.5, "sampleSeq": 3, "sampleCallId": "c1",
               "source": "actual-request-journal", "samplePromptTokens": 499,
               "sampleRawInput": {"textTokens": 200, "visualTokens": 300}}),
    ] {
        assert!(
            serde_json::from_value::<PricingBasis>(bad.clone()).is_err(),
            "{bad}"
        );
    }
}

// ---------------------------------------------------------------------------------------
// CC-PRC-4

#[test]
fn prc4_frozen_pricing_reprices_identically_after_the_live_scale_changed() {
    let meter = Meter::default();
    let picture = image("a");
    let messages = [hello_and_image(&picture)];
    let tools = json!([{"name": "f"}]);

    // The action starts: journal flushed, calibration 6.5, images priced in one batch.
    let mut journal = vec![eligible()];
    let live = calibrate(&journal, KEY, MeterKind::Heuristic);
    let frozen = FrozenPricing::capture(&meter, live, priced(&picture), FileTexts::default());
    let before = frozen
        .pricer(&meter)
        .unwrap()
        .request(Some("Be brief."), &messages, &tools)
        .unwrap();
    assert_eq!(before.q(), 547);

    // Meanwhile a newer request settles: the live scale becomes 100.
    journal.push(with_usage(
        with_seq(eligible(), 9, "c9"),
        usage(20200, Some(100), None),
    ));
    let newer = calibrate(&journal, KEY, MeterKind::Heuristic);
    assert_eq!(newer.text_scale().as_f64(), 100.0);

    // The frozen pricing, also after a round trip through JSON, still prices at 6.5.
    let stored = serde_json::to_string(&frozen).unwrap();
    let restored: FrozenPricing = serde_json::from_str(&stored).unwrap();
    assert_eq!(restored, frozen);
    for pricing in [&frozen, &restored] {
        let again = pricing
            .pricer(&meter)
            .unwrap()
            .request(Some("Be brief."), &messages, &tools)
            .unwrap();
        assert_eq!(again, before);
        assert_eq!(again.value(), 547.0);
        assert_eq!(again.q(), 547);
    }

    // Only a later action sees the new scale: (7 + 18 + 13)·100 + 300.
    let later = FrozenPricing::capture(&meter, newer, priced(&picture), FileTexts::default());
    let after = later
        .pricer(&meter)
        .unwrap()
        .request(Some("Be brief."), &messages, &tools)
        .unwrap();
    assert_eq!(after.q(), 3800 + 300);
}

#[test]
fn prc4_serialized_form() {
    let meter = Meter::default();
    let frozen = FrozenPricing::capture(
        &meter,
        PricingBasis::UncalibratedEstimate,
        ImagePricing::FixedEstimate,
        FileTexts::default(),
    );
    let value = serde_json::to_value(&frozen).unwrap();
    assert_eq!(
        value["pricingBasis"],
        json!({"kind": "uncalibrated-estimate", "textScale": 1.0})
    );
    assert_eq!(value["meter"]["basis"], json!("heuristic"));
    assert_eq!(value["meter"]["imageTokens"], json!(1024));
    assert_eq!(value["images"], json!({"mode": "fixed-estimate"}));
    assert_eq!(value["files"], json!({}));
}

#[test]
fn prc4_a_different_meter_is_refused() {
    let meter = Meter::default();
    let frozen = FrozenPricing::capture(
        &meter,
        PricingBasis::meter_estimate(&meter),
        ImagePricing::FixedEstimate,
        FileTexts::default(),
    );
    let other = Meter::new(&MeterConfig {
        image_tokens: 85,
        ..MeterConfig::default()
    })
    .unwrap();
    assert!(matches!(
        frozen.pricer(&other),
        Err(PricingError::MeterMismatch { .. })
    ));
    assert!(frozen.pricer(&meter.clone()).is_ok());
}

#[test]
fn q_is_exact_where_floats_are_not() {
    // Scale 1300/3 is not a finite binary fraction; 3 text tokens cost exactly 1300.
    let scale = TextScale::new(1300, 3).unwrap();
    let price = Price { text: 3, visual: 0 };
    assert_eq!(price.ceil(scale), 1300);
    assert_eq!(Price { text: 1, visual: 7 }.ceil(scale), 434 + 7);
    assert_eq!(TextScale::new(1, 0), None);
    assert_eq!(TextScale::new(1300, 200), TextScale::new(13, 2));
}
