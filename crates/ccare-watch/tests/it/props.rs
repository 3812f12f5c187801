//! Properties: the engine is split-invariant (the same text in any split into deltas
//! gives the same firings), and no input panics.

use ccare_watch::engine::{Firing, Frame, StreamWatch, TriggerConfig, Triggers, View};
use ccare_watch::shapes::{detect, reply_input};
use proptest::prelude::*;
use serde_json::json;

/// The default triggers plus one of every detector and mode, with thresholds low
/// enough that short inputs hit.
fn triggers(every: usize) -> Triggers {
    let mut configs = TriggerConfig::defaults();
    let extra = json!([
        {"id": "marker", "detector": {"kind": "marker", "params": {"marker": "MATCH"}},
         "scope": "text", "actions": ["notice"]},
        {"id": "phrases", "detector": {"kind": "phrase", "params": {"phrases": ["c😀", "ab", "😀ab"]}},
         "scope": "combined", "mode": "windowed", "everyChars": every, "actions": ["notice"]},
        {"id": "lines", "detector": {"kind": "line-repeat",
                                     "params": {"minLines": 3, "minCount": 3, "minRatio": 0.4, "minRun": 3}},
         "scope": "combined", "actions": ["notice", "abort", "resume"]},
        {"id": "window", "detector": {"kind": "line-repeat",
                                      "params": {"minLines": 4, "minCount": 4, "minRatio": 0.5, "minRun": 4}},
         "scope": "reasoning", "mode": "windowed", "everyChars": every + 3, "actions": ["notice"]},
    ]);
    configs.extend(serde_json::from_value::<Vec<TriggerConfig>>(extra).unwrap());
    Triggers::new(configs).unwrap()
}

/// One step of a stream: a start frame or a segment of text or reasoning.
#[derive(Debug, Clone)]
enum Step {
    Start,
    Text(String),
    Reasoning(String),
}

const TOKENS: [&str; 14] = [
    "ab",
    "c",
    "\n",
    "same line\n",
    "时间",
    "不够",
    "😀",
    "MATCH",
    " ",
    "xyz\n",
    "\r\n",
    "MA",
    "TCH",
    "上下文快满",
];

fn segment() -> impl Strategy<Value = String> {
    prop::collection::vec(prop::sample::select(TOKENS.to_vec()), 0..60)
        .prop_map(|tokens| tokens.concat())
}

fn steps() -> impl Strategy<Value = Vec<Step>> {
    prop::collection::vec(
        prop_oneof![
            1 => Just(Step::Start),
            4 => segment().prop_map(Step::Text),
            4 => segment().prop_map(Step::Reasoning),
        ],
        0..8,
    )
}

/// Feeds the steps, each segment split into deltas of the given character counts
/// (cycled; `None` = one delta per segment).
fn run(every: usize, steps: &[Step], sizes: Option<&[usize]>) -> Vec<Firing> {
    let mut watch = StreamWatch::new(triggers(every));
    let mut firings = watch.observe(Frame::Start);
    let mut size_index = 0;
    for step in steps {
        let (text, reasoning) = match step {
            Step::Start => {
                firings.extend(watch.observe(Frame::Start));
                continue;
            }
            Step::Text(text) => (text, false),
            Step::Reasoning(text) => (text, true),
        };
        let chars: Vec<char> = text.chars().collect();
        let mut start = 0;
        while start < chars.len() {
            let size = match sizes {
                Some(sizes) => {
                    size_index += 1;
                    sizes[size_index % sizes.len()]
                }
                None => chars.len(),
            };
            let end = (start + size).min(chars.len());
            let delta: String = chars[start..end].iter().collect();
            let frame = if reasoning {
                Frame::Reasoning(&delta)
            } else {
                Frame::Text(&delta)
            };
            firings.extend(watch.observe(frame));
            start = end;
        }
    }
    firings
}

#[test]
fn sw_3_every_trigger_of_the_property_set_can_fire() {
    let steps = [
        Step::Reasoning(
            "嗯，时间不够\nsame line\nsame line\nsame line\nsame line\n上下文快满".into(),
        ),
        Step::Text("MA".into()),
        Step::Text("TCH c😀ab\n".into()),
        Step::Start,
        Step::Text("same line\n".repeat(60)),
    ];
    let fired: Vec<String> = run(5, &steps, Some(&[2, 1, 3]))
        .iter()
        .map(|f| f.trigger.to_string())
        .collect();
    for id in [
        "time-anxiety",
        "context-anxiety",
        "lines",
        "window",
        "marker",
        "phrases",
        "line-repeat",
    ] {
        assert!(fired.iter().any(|found| found == id), "{id} in {fired:?}");
    }
    assert_eq!(run(5, &steps, None), run(5, &steps, Some(&[2, 1, 3])));
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn sw_3_the_engine_is_split_invariant(
        every in 1usize..40,
        steps in steps(),
        sizes in prop::collection::vec(1usize..6, 1..10),
    ) {
        let whole = run(every, &steps, None);
        let split = run(every, &steps, Some(&sizes));
        prop_assert_eq!(whole, split);
    }

    #[test]
    fn sw_3_one_char_deltas_give_the_same_firings_as_any_split(
        every in 1usize..40,
        steps in steps(),
        sizes in prop::collection::vec(1usize..9, 1..10),
    ) {
        prop_assert_eq!(run(every, &steps, Some(&[1])), run(every, &steps, Some(&sizes)));
    }

    #[test]
    fn no_input_panics(
        every in 1usize..50,
        texts in prop::collection::vec((any::<bool>(), any::<String>()), 0..6),
        sizes in prop::collection::vec(1usize..20, 1..6),
    ) {
        let steps: Vec<Step> = texts
            .iter()
            .map(|(reasoning, text)| if *reasoning { Step::Reasoning(text.clone()) } else { Step::Text(text.clone()) })
            .collect();
        run(every, &steps, Some(&sizes));
        let mut view = View::new();
        for (_, text) in &texts {
            view.push(text);
            prop_assert!(view.text_len() <= ccare_watch::engine::TEXT_LIMIT);
            prop_assert!(view.lines().len() <= ccare_watch::engine::LINE_WINDOW);
        }
        for (_, text) in &texts {
            detect(text, |_| true);
            detect(&reply_input(text, text), |_| true);
        }
    }

    #[test]
    fn no_shaped_input_panics(steps in steps()) {
        let joined: String = steps
            .iter()
            .map(|step| match step {
                Step::Text(text) | Step::Reasoning(text) => text.as_str(),
                Step::Start => "```\n",
            })
            .collect();
        detect(&joined, |_| true);
    }
}
