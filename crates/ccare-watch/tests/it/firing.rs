//! SW-7 firing: controls and their reset, once-per-attempt actions, the run rules.

use ccare_watch::engine::{
    ActionId, ActionOutcome, Evidence, Firing, Frame, RECENT_FIRINGS, StreamWatch, Triggers,
};
use serde_json::json;

use crate::{Source, default_watch, feed, marker_trigger, watch};

fn loop_text() -> String {
    "same line\n".repeat(60)
}

#[test]
fn sw_7_ac_9_start_clears_a_split_marker() {
    let mut watch = watch(json!([marker_trigger("MATCH", "text", &["notice"])]));
    watch.observe(Frame::Text("MA"));
    watch.observe(Frame::Start);
    assert!(watch.observe(Frame::Text("TCH")).is_empty());
}

#[test]
fn sw_7_ac_9_a_toggle_resets_the_trigger_without_replay() {
    let mut watch = watch(json!([marker_trigger(
        "MATCH",
        "text",
        &["notice", "abort"]
    )]));
    watch.observe(Frame::Text("MA"));
    watch.set_controls("", |_, action| *action != ActionId::Abort);
    assert!(
        watch.observe(Frame::Text("TCH")).is_empty(),
        "flags changed"
    );
    watch.observe(Frame::Text("MA"));
    watch.set_controls("7:3:0", |_, action| *action != ActionId::Abort);
    assert!(
        watch.observe(Frame::Text("TCH")).is_empty(),
        "epoch changed"
    );
    watch.observe(Frame::Text("MA"));
    watch.set_controls("7:3:0", |_, action| *action != ActionId::Abort);
    let firings = watch.observe(Frame::Text("TCH"));
    assert_eq!(firings.len(), 1, "unchanged controls keep the carry");
    assert_eq!(&*firings[0].epoch, "7:3:0");
    assert_eq!(firings[0].actions, [ActionId::Notice]);
}

#[test]
fn sw_7_a_control_change_clears_the_view() {
    let mut watch = default_watch();
    feed(&mut watch, Source::Text, &"same line\n".repeat(20), 4);
    watch.set_controls("1:1:0", |_, _| true);
    assert_eq!(watch.view("line-repeat").unwrap().lines().len(), 0);
}

#[test]
fn sw_7_ac_9_a_disabled_action_consumes_no_hit() {
    let mut watch = watch(json!([marker_trigger(
        "MATCH",
        "text",
        &["notice", "abort"]
    )]));
    watch.set_controls("e", |_, action| *action == ActionId::Abort);
    let firings = watch.observe(Frame::Text("MATCH"));
    assert_eq!(firings[0].actions, [ActionId::Abort]);
    assert!(
        !watch.is_armed("m"),
        "notice is disabled, abort used: not evaluated"
    );
    assert!(watch.observe(Frame::Text("MATCH")).is_empty());
    watch.set_controls("e", |_, _| true);
    let firings = watch.observe(Frame::Text("MATCH"));
    assert_eq!(
        firings[0].actions,
        [ActionId::Notice, ActionId::Abort],
        "the reset restores both"
    );
}

#[test]
fn sw_7_a_trigger_with_every_action_disabled_is_not_evaluated() {
    let mut watch = watch(json!([marker_trigger("MATCH", "text", &["notice"])]));
    watch.set_controls("e", |_, _| false);
    assert!(!watch.is_armed("m"));
    assert!(watch.observe(Frame::Text("MATCH")).is_empty());
    watch.set_controls("e", |_, _| true);
    assert!(
        watch.observe(Frame::Text("TCH")).is_empty(),
        "nothing is replayed"
    );
}

#[test]
fn sw_7_set_trigger_controls_touches_one_trigger() {
    let mut watch = default_watch();
    feed(&mut watch, Source::Text, &"same line\n".repeat(5), 4);
    assert!(watch.set_trigger_controls("time-anxiety", "2:1:0", |_| true));
    assert_eq!(watch.view("line-repeat").unwrap().lines().len(), 5);
    assert!(!watch.set_trigger_controls("nope", "2:1:0", |_| true));
}

#[test]
fn sw_7_ac_3_actions_run_once_per_attempt_and_again_after_start() {
    let mut watch = default_watch();
    let first = feed(&mut watch, Source::Text, &loop_text(), 3);
    assert_eq!(first.len(), 1);
    assert_eq!(
        first[0].actions,
        [ActionId::Notice, ActionId::Abort, ActionId::Resume]
    );
    assert!(
        feed(&mut watch, Source::Text, &loop_text(), 3).is_empty(),
        "same attempt"
    );
    watch.observe(Frame::Start);
    assert_eq!(
        feed(&mut watch, Source::Text, &loop_text(), 3).len(),
        1,
        "next attempt"
    );
}

#[test]
fn sw_1_ac_3_another_agent_is_unaffected() {
    let mut looping = default_watch();
    let mut other = default_watch();
    assert_eq!(feed(&mut looping, Source::Text, &loop_text(), 3).len(), 1);
    assert!(other.is_armed("line-repeat"));
    assert!(other.view("line-repeat").unwrap().lines().is_empty());
    assert!(feed(&mut other, Source::Text, "one line\n", 3).is_empty());
}

#[test]
fn sw_7_firings_of_one_delta_are_ordered_by_where_they_hit() {
    let mut watch = watch(json!([
        {"id": "late", "detector": {"kind": "marker", "params": {"marker": "BBB"}},
         "scope": "text", "actions": ["notice"]},
        {"id": "early", "detector": {"kind": "marker", "params": {"marker": "AAA"}},
         "scope": "text", "actions": ["notice"]},
    ]));
    let firings = watch.observe(Frame::Text("xAAAxBBB"));
    let order: Vec<&str> = firings.iter().map(|firing| &*firing.trigger).collect();
    assert_eq!(order, ["early", "late"]);
}

fn firing(actions: Vec<ActionId>) -> Firing {
    Firing {
        trigger: "line-repeat".into(),
        epoch: "".into(),
        evidence: Evidence::Marker { marker: "x".into() },
        actions,
    }
}

#[test]
fn sw_7_ac_9_resume_runs_only_after_a_successful_abort() {
    let all = vec![ActionId::Notice, ActionId::Abort, ActionId::Resume];
    for (abort, resumed) in [(Ok(true), true), (Ok(false), false), (Err("boom"), false)] {
        let mut performed = Vec::new();
        let records = firing(all.clone()).run(|action| {
            performed.push(action.clone());
            match action {
                ActionId::Abort => abort,
                _ => Ok(true),
            }
        });
        assert_eq!(
            performed.contains(&ActionId::Resume),
            resumed,
            "abort {abort:?}"
        );
        assert_eq!(records.len(), 3, "every slot is recorded");
        let expected = if resumed {
            ActionOutcome::Done(true)
        } else {
            ActionOutcome::NoAbort
        };
        assert_eq!(records[2].outcome, expected);
    }
    let records = firing(vec![ActionId::Notice, ActionId::Resume]).run(|_| Ok::<_, String>(true));
    assert_eq!(
        records[1].outcome,
        ActionOutcome::NoAbort,
        "abort not in this firing"
    );
}

#[test]
fn sw_7_ac_9_unknown_and_failing_actions_are_recorded_and_processing_continues() {
    let actions = vec![ActionId::from("nope"), ActionId::Notice, ActionId::Abort];
    let records = firing(actions).run(|action| match action {
        ActionId::Notice => Err("notice failed"),
        _ => Ok(true),
    });
    let lines: Vec<String> = records.iter().map(ToString::to_string).collect();
    assert_eq!(
        lines,
        [
            "unknown action nope",
            "notice failed: notice failed",
            "abort true"
        ]
    );
    assert_eq!(
        records[1].outcome,
        ActionOutcome::Failed("notice failed".into())
    );
}

#[test]
fn sw_7_an_unknown_action_in_the_config_still_fires() {
    let mut watch = watch(json!([marker_trigger("MATCH", "text", &["nope"])]));
    let firings = watch.observe(Frame::Text("MATCH"));
    assert_eq!(firings[0].actions, [ActionId::from("nope")]);
    let records = firings[0].run(|_| Ok::<_, String>(true));
    assert_eq!(records[0].to_string(), "unknown action nope");
}

#[test]
fn sw_7_at_most_40_firings_are_kept() {
    let mut watch = StreamWatch::new(
        Triggers::from_json(&json!([marker_trigger("MATCH", "text", &["notice"])])).unwrap(),
    );
    for _ in 0..50 {
        watch.observe(Frame::Start);
        watch.observe(Frame::Text("MATCH"));
    }
    assert_eq!(watch.recent_firings().count(), RECENT_FIRINGS);
}

#[test]
fn sw_7_a_kept_firing_carries_what_became_of_its_actions() {
    let mut watch = watch(json!([marker_trigger(
        "MATCH",
        "text",
        &["nope", "notice"]
    )]));
    let firings = watch.observe(Frame::Text("MATCH"));
    let kept: Vec<_> = watch.recent_firings().cloned().collect();
    assert_eq!(kept.len(), 1);
    assert_eq!(kept[0].firing, firings[0]);
    assert_eq!(kept[0].actions, None, "not run yet");
    let records = firings[0].run(|_| Err::<bool, _>("inbox closed"));
    assert!(watch.record_actions(&firings[0], records.clone()));
    let kept: Vec<_> = watch.recent_firings().collect();
    let lines: Vec<String> = kept[0]
        .actions
        .as_ref()
        .unwrap()
        .iter()
        .map(ToString::to_string)
        .collect();
    assert_eq!(
        lines,
        ["unknown action nope", "notice failed: inbox closed"]
    );
    assert!(!watch.record_actions(&firings[0], records), "recorded once");
}
