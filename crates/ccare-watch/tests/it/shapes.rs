//! LS-1 .. LS-3 loop shapes over a committed reply (AC-11).

use ccare_watch::shapes::{
    ShapeEvidence, ShapeHit, ShapeId, ShapeResponse, detect, is_fence, reply_input,
};

fn all(input: &str) -> Option<ShapeHit> {
    detect(input, |_| true)
}

fn only(shape: ShapeId, input: &str) -> Option<ShapeHit> {
    detect(input, |candidate| candidate == shape)
}

fn lines<S: AsRef<str>>(lines: impl IntoIterator<Item = S>) -> String {
    lines
        .into_iter()
        .map(|line| format!("{}\n", line.as_ref()))
        .collect()
}

#[test]
fn ls_2_ac_11_a_dominant_line_is_a_severe_line_repeat() {
    let reply = format!("先看计划\n说明一下\n{}", "（做。）\n".repeat(40));
    let hit = all(&reply).unwrap();
    assert_eq!(
        hit,
        ShapeHit {
            evidence: ShapeEvidence::LineRepeat("（做。）".into()),
            severe: true,
            count: 40,
            of_lines: 42,
            percent: 95,
        }
    );
    assert_eq!(hit.shape(), ShapeId::LineRepeat);
}

#[test]
fn ls_2_ac_11_three_short_lines_taking_turns_are_a_line_cycle() {
    let reply = "看代码。\n\n写测试。\n\n跑一遍。\n\n".repeat(8);
    let hit = all(&reply).unwrap();
    assert_eq!(
        hit,
        ShapeHit {
            evidence: ShapeEvidence::LineCycle(vec![
                "看代码。".into(),
                "写测试。".into(),
                "跑一遍。".into()
            ]),
            severe: false,
            count: 24,
            of_lines: 24,
            percent: 100,
        }
    );
}

#[test]
fn ls_2_ac_11_a_filler_cycle_below_40_percent_of_all_lines_is_a_line_cycle() {
    let reply = "好。\n\n做。\n\n输出。\n\n".repeat(8);
    assert_eq!(all(&reply).unwrap().shape(), ShapeId::LineCycle);
    assert_eq!(
        only(ShapeId::FillerLines, &reply),
        None,
        "16 fillers of 49 lines"
    );
}

#[test]
fn ls_2_ac_11_two_alternating_lines_are_a_mild_line_repeat() {
    let reply = "好。\n看一遍实现。\n".repeat(40);
    let hit = all(&reply).unwrap();
    assert_eq!(
        hit.evidence,
        ShapeEvidence::LineRepeat("好。".into()),
        "the first max"
    );
    assert!(!hit.severe);
    assert_eq!((hit.count, hit.of_lines, hit.percent), (40, 80, 50));
}

#[test]
fn ls_2_ac_11_the_same_opening_is_a_prefix_monotony() {
    let reply = lines((0..12).map(|index| format!("嗯，我再检查第{index}个实现细节")));
    let hit = all(&reply).unwrap();
    assert_eq!(hit.evidence, ShapeEvidence::PrefixMonotony("嗯，".into()));
    assert_eq!(
        (hit.count, hit.of_lines, hit.percent, hit.severe),
        (12, 12, 100, false)
    );
}

#[test]
fn ls_2_ac_11_short_filler_lines_are_severe() {
    let reply = "做。\n嗯，简洁。\n做。\n嗯，一次做完。\n做。\n好。\n做。\n（直接做。）\n做。";
    let hit = all(reply).unwrap();
    assert_eq!(hit.evidence, ShapeEvidence::FillerLines);
    assert!(hit.severe);
    assert_eq!(
        (hit.count, hit.of_lines, hit.percent),
        (8, 9, 89),
        "嗯，一次做完。 has 7 units"
    );
}

#[test]
fn ls_1_ac_11_fenced_lines_are_ignored() {
    for fence in ["```", "~~~", "```python", "````c++"] {
        let reply = format!("{fence}\n{}{fence}\n", "x = 1\n".repeat(40));
        assert_eq!(all(&reply), None, "{fence}");
    }
    let reply = format!(
        "说明\n```\n{}```\n{}",
        "x = 1\n".repeat(40),
        "（做。）\n".repeat(15)
    );
    let hit = all(&reply).unwrap();
    assert_eq!(
        (hit.count, hit.of_lines),
        (15, 16),
        "only the lines outside the fence count"
    );
}

#[test]
fn ls_1_fence_lines_match_the_pattern_exactly() {
    for fence in [
        "```",
        "~~~",
        "```rust",
        "~~~~~~",
        "```c++",
        "```objective-c",
        "```a_b9",
    ] {
        assert!(is_fence(fence), "{fence}");
    }
    for text in [
        "``",
        "~~",
        "``` rust",
        "```js`",
        "~~~`",
        "```中文",
        "x```",
        "`~~",
        "",
    ] {
        assert!(!is_fence(text), "{text}");
    }
}

#[test]
fn ls_1_counted_lines_have_at_least_two_units_and_the_window_is_80() {
    let reply = format!("{}{}", "a\n".repeat(100), "（做。）\n".repeat(16));
    let hit = only(ShapeId::LineRepeat, &reply).unwrap();
    assert_eq!(
        (hit.count, hit.of_lines),
        (16, 16),
        "one-unit lines do not count"
    );
    let reply = format!(
        "{}{}",
        lines((0..100).map(|index| format!("line {index}"))),
        "（做。）\n".repeat(16)
    );
    let hit = only(ShapeId::LineRepeat, &reply).unwrap();
    assert_eq!((hit.count, hit.of_lines, hit.percent), (16, 80, 20));
}

#[test]
fn ls_2_line_repeat_thresholds_both_ways() {
    let reply = |repeats: usize, others: usize| {
        let mut text = "（做。）\n".repeat(repeats);
        text.push_str(&lines((0..others).map(|index| format!("other {index}"))));
        text
    };
    assert_eq!(only(ShapeId::LineRepeat, &reply(14, 0)), None, "14 < 15");
    assert!(
        only(ShapeId::LineRepeat, &reply(15, 60)).is_some(),
        "15/75 = 20%"
    );
    assert_eq!(
        only(ShapeId::LineRepeat, &reply(15, 61)),
        None,
        "15/76 < 20%"
    );
    assert!(
        only(ShapeId::LineRepeat, &reply(21, 9)).unwrap().severe,
        "21/30 = 70%"
    );
    assert!(
        !only(ShapeId::LineRepeat, &reply(21, 10)).unwrap().severe,
        "21/31 < 70%"
    );
}

#[test]
fn ls_2_filler_lines_thresholds_both_ways() {
    let fillers = |count: usize| "好的。\n".repeat(count);
    let reply = |count: usize, blanks: usize, others: usize| {
        format!(
            "{}{}{}",
            fillers(count),
            lines((0..others).map(|index| format!("这是一条比较长的说明{index}"))),
            "\n".repeat(blanks)
        )
    };
    assert_eq!(
        only(ShapeId::FillerLines, &reply(4, 0, 0)),
        None,
        "fewer than 5"
    );
    let hit = only(ShapeId::FillerLines, &reply(5, 6, 0)).unwrap();
    assert_eq!(
        (hit.count, hit.of_lines, hit.severe),
        (5, 12, false),
        "blanks count: 5/12 ≥ 40%"
    );
    assert_eq!(
        only(ShapeId::FillerLines, &reply(5, 7, 0)),
        None,
        "5/13 < 40%"
    );
    assert!(
        only(ShapeId::FillerLines, &reply(5, 0, 4)).unwrap().severe,
        "5/10 = 50%"
    );
    assert!(
        !only(ShapeId::FillerLines, &reply(5, 0, 5)).unwrap().severe,
        "5/11 < 50%"
    );
    let long = "好的，我来继续做\n".repeat(10);
    assert_eq!(
        only(ShapeId::FillerLines, &long),
        None,
        "longer than 6 units"
    );
    let plain = "看代码。\n".repeat(10);
    assert_eq!(
        only(ShapeId::FillerLines, &plain),
        None,
        "no filler character"
    );
}

#[test]
fn ls_2_line_cycle_thresholds_both_ways() {
    let cycle = |rounds: usize| "看代码。\n写测试。\n跑一遍。\n".repeat(rounds);
    assert_eq!(
        only(ShapeId::LineCycle, &cycle(7)[..]),
        None,
        "window 21 < 24"
    );
    assert!(only(ShapeId::LineCycle, &cycle(8)).is_some());
    let with_others = |others: usize| {
        format!(
            "{}{}",
            cycle(6),
            lines((0..others).map(|index| format!("long other line {index}")))
        )
    };
    assert!(
        only(ShapeId::LineCycle, &with_others(12)).is_some(),
        "18/30 = 60%"
    );
    assert_eq!(
        only(ShapeId::LineCycle, &with_others(13)),
        None,
        "18/31 < 60%"
    );
    let long = "看看这段很长的代码。\n写一个很长的测试。\n跑一遍全部的测试。\n".repeat(8);
    assert_eq!(
        only(ShapeId::LineCycle, &long),
        None,
        "lines longer than 8 units"
    );
}

#[test]
fn ls_2_prefix_monotony_thresholds_both_ways() {
    let prefixed =
        |count: usize| lines((0..count).map(|index| format!("结论：第{index}项已经检查完毕")));
    let others =
        |count: usize| lines((0..count).map(|index| format!("另外一条没有前缀的说明{index}")));
    assert_eq!(
        only(ShapeId::PrefixMonotony, &prefixed(9)),
        None,
        "window 9 < 10"
    );
    assert_eq!(
        only(
            ShapeId::PrefixMonotony,
            &format!("{}{}", prefixed(9), others(1))
        ),
        None,
        "9 < 10"
    );
    let hit = only(
        ShapeId::PrefixMonotony,
        &format!("{}{}", prefixed(10), others(10)),
    )
    .unwrap();
    assert_eq!(
        (hit.evidence, hit.count, hit.of_lines),
        (ShapeEvidence::PrefixMonotony("结论：".into()), 10, 20)
    );
    assert_eq!(
        only(
            ShapeId::PrefixMonotony,
            &format!("{}{}", prefixed(10), others(11))
        ),
        None,
        "10/21 < 50%"
    );
    let late = lines((0..12).map(|index| format!("这次结论：第{index}项")));
    assert_eq!(
        only(ShapeId::PrefixMonotony, &late),
        None,
        "the delimiter is past unit 3"
    );
    let at_three = lines((0..12).map(|index| format!("abc,第{index}项检查完毕")));
    assert_eq!(
        only(ShapeId::PrefixMonotony, &at_three).unwrap().evidence,
        ShapeEvidence::PrefixMonotony("abc,".into())
    );
}

#[test]
fn ls_2_the_first_enabled_match_wins() {
    let reply = "（做。）\n".repeat(20);
    assert_eq!(
        all(&reply).unwrap().shape(),
        ShapeId::LineRepeat,
        "also filler-lines"
    );
    let hit = detect(&reply, |shape| shape != ShapeId::LineRepeat).unwrap();
    assert_eq!(hit.shape(), ShapeId::FillerLines);
    assert_eq!(detect(&reply, |_| false), None);
}

#[test]
fn ls_1_the_input_joins_reasoning_and_text() {
    assert_eq!(reply_input("想一想", "答案"), "想一想\n答案");
    assert_eq!(reply_input("", "答案"), "答案");
    assert_eq!(reply_input("想一想", ""), "想一想");
    let reasoning = "（做。）\n".repeat(10);
    let text = "（做。）\n".repeat(10);
    assert_eq!(all(&reply_input(&reasoning, &text)).unwrap().count, 20);
}

#[test]
fn ls_3_severe_shapes_are_cleaned_only_by_an_active_cleaner() {
    let severe = all(&"（做。）\n".repeat(20)).unwrap();
    assert_eq!(severe.response(true), ShapeResponse::Clean);
    assert_eq!(severe.response(false), ShapeResponse::Remind);
    let mild = all(&"好。\n看一遍实现。\n".repeat(40)).unwrap();
    assert_eq!(mild.response(true), ShapeResponse::Remind);
    let cycle = all(&"看代码。\n写测试。\n跑一遍。\n".repeat(8)).unwrap();
    assert_eq!(cycle.response(true), ShapeResponse::Remind);
    assert!(!ShapeId::LineCycle.has_cleaner() && ShapeId::FillerLines.has_cleaner());
}

#[test]
fn ls_2_empty_and_blank_replies_have_no_shape() {
    assert_eq!(all(""), None);
    assert_eq!(all("\n\n  \n"), None);
}
