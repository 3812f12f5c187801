//! SW-4 detectors and SW-5 default triggers, through the engine.

use ccare_watch::engine::{ActionId, Evidence, Frame, LineRepeatReport};
use serde_json::json;

use crate::{Source, default_watch, feed, line_repeat_trigger, marker_trigger, watch};

fn report(evidence: &Evidence) -> &LineRepeatReport {
    match evidence {
        Evidence::LineRepeat(report) => report,
        other => panic!("not a line-repeat report: {other:?}"),
    }
}

#[test]
fn sw_4_ac_5_a_marker_split_over_deltas_hits_once() {
    let mut watch = watch(json!([marker_trigger("XYZZY", "text", &["notice"])]));
    let mut firings = Vec::new();
    for delta in ["AB", "XY", "Z", "ZY", "CD", "XYZZY"] {
        firings.extend(watch.observe(Frame::Text(delta)));
    }
    assert_eq!(firings.len(), 1);
    assert_eq!(
        firings[0].evidence,
        Evidence::Marker {
            marker: "XYZZY".into()
        }
    );
}

#[test]
fn sw_4_ac_5_text_scope_ignores_reasoning() {
    let mut watch = watch(json!([marker_trigger("XYZZY", "text", &["notice"])]));
    assert!(feed(&mut watch, Source::Reasoning, "XYZZY", 1).is_empty());
    assert_eq!(feed(&mut watch, Source::Text, "..XYZZY", 2).len(), 1);
}

#[test]
fn sw_4_sw_5_ac_6_a_phrase_split_over_one_char_deltas_is_found() {
    let mut watch = default_watch();
    let firings = feed(&mut watch, Source::Reasoning, "嗯，我觉得时间不够了", 1);
    assert_eq!(firings.len(), 1);
    assert_eq!(&*firings[0].trigger, "time-anxiety");
    assert_eq!(
        firings[0].evidence,
        Evidence::Phrase {
            phrase: "时间不够".into()
        }
    );
    assert_eq!(firings[0].actions, [ActionId::Notice]);
}

#[test]
fn sw_5_ac_6_reasoning_phrases_notice_once_and_the_output_continues() {
    let mut watch = default_watch();
    let mut firings = Vec::new();
    for delta in ["嗯，", "时间", "不够"] {
        firings.extend(watch.observe(Frame::Reasoning(delta)));
    }
    firings.extend(feed(&mut watch, Source::Reasoning, "时间不够，来不及", 2));
    assert_eq!(firings.len(), 1, "notice is used once per attempt");
    assert!(
        !firings[0].actions.contains(&ActionId::Abort),
        "anxiety never aborts"
    );
    assert!(watch.is_armed("context-anxiety"));
    let context = feed(&mut watch, Source::Reasoning, "趁上下文还够", 1);
    assert_eq!(
        context[0].evidence,
        Evidence::Phrase {
            phrase: "趁上下文还够".into()
        }
    );
}

#[test]
fn sw_5_ac_6_anxiety_phrases_in_text_do_not_fire() {
    let mut watch = default_watch();
    assert!(feed(&mut watch, Source::Text, "嗯，时间不够，上下文不够", 1).is_empty());
}

#[test]
fn sw_4_ac_6_an_empty_phrase_list_never_hits() {
    let mut watch = watch(json!([{
        "id": "p", "detector": {"kind": "phrase", "params": {"phrases": []}},
        "scope": "combined", "actions": ["notice"],
    }]));
    assert!(feed(&mut watch, Source::Text, "anything at all\n", 1).is_empty());
    assert!(watch.observe(Frame::Reasoning("时间不够")).is_empty());
}

#[test]
fn sw_4_the_phrase_ending_first_wins_then_the_first_listed() {
    let trigger = |phrases: &[&str]| {
        json!([{
            "id": "p", "detector": {"kind": "phrase", "params": {"phrases": phrases}},
            "scope": "text", "actions": ["notice"],
        }])
    };
    let mut first_listed = watch(trigger(&["abc", "bc"]));
    let firings = first_listed.observe(Frame::Text("xabcx"));
    assert_eq!(
        firings[0].evidence,
        Evidence::Phrase {
            phrase: "abc".into()
        }
    );
    let mut ends_first = watch(trigger(&["abcd", "bc"]));
    let firings = ends_first.observe(Frame::Text("xabcdx"));
    assert_eq!(
        firings[0].evidence,
        Evidence::Phrase {
            phrase: "bc".into()
        }
    );
}

#[test]
fn sw_4_a_windowed_phrase_is_judged_every_every_chars() {
    let mut watch = watch(json!([{
        "id": "p", "detector": {"kind": "phrase", "params": {"phrases": ["STOP"]}},
        "scope": "text", "mode": "windowed", "everyChars": 10, "actions": ["notice"],
    }]));
    assert!(watch.observe(Frame::Text("..ST")).is_empty());
    assert!(
        watch.observe(Frame::Text("OP..")).is_empty(),
        "8 units: not judged yet"
    );
    assert_eq!(
        watch.observe(Frame::Text("..")).len(),
        1,
        "judged at unit 10"
    );
}

#[test]
fn sw_4_ac_1_repeated_line_hits_by_count_and_ratio() {
    let mut watch = watch(json!([line_repeat_trigger(
        json!({"minLines": 30, "minCount": 30, "minRatio": 0.35, "minRun": 12}),
        Some(40)
    )]));
    let firings = feed(&mut watch, Source::Text, &"same line\n".repeat(60), 3);
    assert_eq!(firings.len(), 1);
    let report = report(&firings[0].evidence);
    assert_eq!(
        *report,
        LineRepeatReport {
            line: "same line".into(),
            count: 32,
            total: 32,
            ratio: 1.0,
            run: 32
        },
        "checked at unit 320, the first check with 30 lines and a count of 30"
    );
    assert!(report.ratio >= 0.35);
}

#[test]
fn sw_4_ac_1_distinct_lines_do_not_hit() {
    let mut watch = watch(json!([line_repeat_trigger(json!({}), Some(40))]));
    let text: String = (0..8)
        .flat_map(|_| (0..10).map(|line| format!("distinct line {line}\n")))
        .collect();
    assert!(feed(&mut watch, Source::Text, &text, 3).is_empty());
}

#[test]
fn sw_4_ac_2_a_run_alone_hits_and_names_the_runs_line() {
    let mut watch = watch(json!([line_repeat_trigger(json!({}), Some(40))]));
    let mut text: String = (0..68)
        .map(|line| format!("unique line {line}\n"))
        .collect();
    text.push_str(&"zzz\n".repeat(20));
    let firings = feed(&mut watch, Source::Text, &text, 4);
    assert_eq!(firings.len(), 1);
    let report = report(&firings[0].evidence);
    assert_eq!(report.line, "zzz");
    assert!(report.run >= 12);
    assert!(report.count < 30);
    assert_eq!(report.count, report.run);
    assert_eq!(report.total, 80);
}

#[test]
fn sw_4_ac_3_fewer_lines_than_min_lines_never_hit() {
    let mut watch = watch(json!([line_repeat_trigger(
        json!({"minLines": 30, "minCount": 5, "minRatio": 0.1, "minRun": 2}),
        Some(1)
    )]));
    assert!(feed(&mut watch, Source::Text, &"same line\n".repeat(10), 1).is_empty());
}

#[test]
fn sw_4_ac_3_a_window_never_checked_never_hits() {
    let mut watch = watch(json!([line_repeat_trigger(json!({}), Some(100_000))]));
    assert!(feed(&mut watch, Source::Text, &"same line\n".repeat(60), 4).is_empty());
}

/// 80 lines where `line` appears `count` (≤ 40) times, never twice in a row.
fn interleaved(line: &str, count: usize) -> String {
    (0..80)
        .map(|index| {
            if index % 2 == 1 && index / 2 < count {
                format!("{line}\n")
            } else {
                format!("filler {index}\n")
            }
        })
        .collect()
}

#[test]
fn sw_4_line_repeat_ratio_threshold_both_ways() {
    let params = json!({"minLines": 80, "minCount": 27, "minRatio": 0.35, "minRun": 12});
    let mut at = watch(json!([line_repeat_trigger(params.clone(), None)]));
    let firings = feed(&mut at, Source::Text, &interleaved("looping", 28), 2);
    assert_eq!(firings.len(), 1, "28/80 = 0.35");
    assert_eq!(
        *report(&firings[0].evidence),
        LineRepeatReport {
            line: "looping".into(),
            count: 28,
            total: 80,
            ratio: 0.35,
            run: 1
        }
    );
    let mut below = watch(json!([line_repeat_trigger(params, None)]));
    assert!(
        feed(&mut below, Source::Text, &interleaved("looping", 27), 2).is_empty(),
        "27/80 < 0.35"
    );
}

#[test]
fn sw_4_line_repeat_count_threshold_both_ways() {
    let params = |min_count: usize| json!({"minLines": 80, "minCount": min_count, "minRatio": 0.3, "minRun": 12});
    let mut at = watch(json!([line_repeat_trigger(params(30), None)]));
    assert_eq!(
        feed(&mut at, Source::Text, &interleaved("looping", 30), 5).len(),
        1
    );
    let mut below = watch(json!([line_repeat_trigger(params(31), None)]));
    assert!(feed(&mut below, Source::Text, &interleaved("looping", 30), 5).is_empty());
}

#[test]
fn sw_4_line_repeat_run_threshold_both_ways() {
    let distinct: String = (0..30).map(|line| format!("distinct {line}\n")).collect();
    let mut below = watch(json!([line_repeat_trigger(json!({}), None)]));
    let text = format!("{distinct}{}", "again\n".repeat(11));
    assert!(
        feed(&mut below, Source::Text, &text, 3).is_empty(),
        "a run of 11"
    );
    let firings = feed(&mut below, Source::Text, "again\n", 3);
    assert_eq!(
        *report(&firings[0].evidence),
        LineRepeatReport {
            line: "again".into(),
            count: 12,
            total: 42,
            ratio: 0.29,
            run: 12
        }
    );
}

#[test]
fn sw_4_line_repeat_ties_go_to_the_earliest_line() {
    let mut text: String = (0..20).map(|line| format!("fill{line:02}\n")).collect();
    text.push_str(&"BBBBBB\nAAAAAA\n".repeat(30));
    let every = text.encode_utf16().count();
    let mut watch = watch(json!([line_repeat_trigger(json!({}), Some(every))]));
    let firings = feed(&mut watch, Source::Text, &text, 4);
    let report = report(&firings[0].evidence);
    assert_eq!(
        (report.line.as_str(), report.count, report.total),
        ("BBBBBB", 30, 80)
    );
}

#[test]
fn sw_4_line_repeat_ties_go_to_the_earliest_inserted_key() {
    // BBBBBB is seen first, leaves the window (its key is deleted) and comes back after
    // AAAAAA was inserted: AAAAAA is now the earlier key.
    let mut text = String::from("BBBBBB\n");
    text.extend((0..79).map(|line| format!("fill{line:02}\n")));
    text.push_str(&"AAAAAA\nBBBBBB\n".repeat(30));
    text.extend((0..20).map(|line| format!("tail{line:02}\n")));
    let every = text.encode_utf16().count();
    let mut watch = watch(json!([line_repeat_trigger(json!({}), Some(every))]));
    let firings = feed(&mut watch, Source::Text, &text, 4);
    let report = report(&firings[0].evidence);
    assert_eq!(
        (report.line.as_str(), report.count, report.total),
        ("AAAAAA", 30, 80)
    );
}

#[test]
fn sw_4_the_report_rounds_the_ratio_and_cuts_the_line_to_40_units() {
    let line = format!("{}{}", "x".repeat(39), "😀 and more text");
    let mut text = String::new();
    for group in 0..10 {
        for _ in 0..3 {
            text.push_str(&format!("{line}\n"));
        }
        for other in 0..5 {
            text.push_str(&format!("other line {group}.{other}\n"));
        }
    }
    let every = text.encode_utf16().count();
    let mut watch = watch(json!([line_repeat_trigger(json!({}), Some(every))]));
    let firings = feed(&mut watch, Source::Text, &text, 7);
    let report = report(&firings[0].evidence);
    assert_eq!(
        report.line,
        "x".repeat(39),
        "the pair at units 39..41 is not split"
    );
    assert_eq!(
        (report.count, report.total, report.ratio, report.run),
        (30, 80, 0.38, 3)
    );
}
