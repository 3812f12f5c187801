//! SW-8 .. SW-11: the loop policy, alone and driven by real firings (AC-7, AC-8).

use ccare_watch::engine::{
    ActionId, ActionOutcome, Firing, Frame, LoopPolicy, MAX_AUTO_RESUME, NoticeDecision,
    StreamWatch,
};

use crate::{Source, default_watch, feed};

/// What the caller did for one firing.
#[derive(Debug, Default, PartialEq)]
struct Done {
    noticed: bool,
    aborted: bool,
    resumed: bool,
}

/// Runs a firing the way the plugin will: notice per the policy, abort counted, resume
/// only while the counter allows it.
fn run(firing: &Firing, policy: &mut LoopPolicy) -> Done {
    let mut done = Done::default();
    firing.run(|action| -> Result<bool, String> {
        Ok(match action {
            ActionId::Notice => {
                done.noticed = policy.notice_decision(firing) == NoticeDecision::Send;
                done.noticed
            }
            ActionId::Abort => {
                policy.record_abort();
                done.aborted = true;
                true
            }
            ActionId::Resume => {
                done.resumed = policy.may_resume();
                done.resumed
            }
            ActionId::Unknown(_) => false,
        })
    });
    done
}

fn loop_once(watch: &mut StreamWatch) -> Firing {
    watch.observe(Frame::Start);
    let mut firings = feed(watch, Source::Text, &"same line\n".repeat(60), 4);
    assert_eq!(firings.len(), 1);
    firings.remove(0)
}

#[test]
fn sw_8_max_auto_resume_is_one() {
    assert_eq!(MAX_AUTO_RESUME, 1);
}

#[test]
fn sw_8_a_notice_is_sent_once_per_trigger_and_epoch_per_user_turn() {
    let mut policy = LoopPolicy::new();
    assert!(policy.claim_notice("time-anxiety", "1:0:0"));
    assert!(!policy.claim_notice("time-anxiety", "1:0:0"));
    assert!(
        policy.claim_notice("time-anxiety", "2:0:0"),
        "another epoch"
    );
    assert!(
        policy.claim_notice("context-anxiety", "1:0:0"),
        "another trigger"
    );
    policy.healthy_output();
    assert!(
        !policy.claim_notice("time-anxiety", "1:0:0"),
        "a healthy output keeps the record"
    );
    policy.real_user_message();
    assert!(
        policy.claim_notice("time-anxiety", "1:0:0"),
        "a real user message clears it"
    );
}

#[test]
fn sw_8_anxiety_notices_repeat_only_after_a_user_message() {
    let mut watch = default_watch();
    let mut policy = LoopPolicy::new();
    let mut sent = Vec::new();
    for turn_message in [false, false, true] {
        if turn_message {
            policy.real_user_message();
        }
        watch.observe(Frame::Start);
        let firings = feed(&mut watch, Source::Reasoning, "没时间了", 1);
        sent.push(policy.notice_decision(&firings[0]));
    }
    assert_eq!(
        sent,
        [
            NoticeDecision::Send,
            NoticeDecision::AlreadyNoticed,
            NoticeDecision::Send
        ]
    );
}

#[test]
fn sw_8_the_line_repeat_notice_is_skipped_when_resume_will_speak() {
    let mut policy = LoopPolicy::new();
    assert!(policy.resume_will_speak(true));
    assert!(!policy.resume_will_speak(false));
    policy.record_abort();
    assert!(
        !policy.resume_will_speak(true),
        "read before the abort increments it"
    );
}

#[test]
fn sw_9_sw_11_ac_7_the_second_consecutive_abort_gets_a_notice_and_no_resume() {
    let mut watch = default_watch();
    let mut policy = LoopPolicy::new();
    let first = run(&loop_once(&mut watch), &mut policy);
    assert_eq!(
        first,
        Done {
            noticed: false,
            aborted: true,
            resumed: true
        }
    );
    assert_eq!(policy.consecutive_aborts(), 1);
    assert!(!policy.auto_continue_paused());
    let second = run(&loop_once(&mut watch), &mut policy);
    assert_eq!(
        second,
        Done {
            noticed: true,
            aborted: true,
            resumed: false
        }
    );
    assert_eq!(policy.consecutive_aborts(), 2);
    assert!(policy.auto_continue_paused());
}

#[test]
fn sw_9_resume_is_recorded_false_on_the_second_abort() {
    let mut watch = default_watch();
    let mut policy = LoopPolicy::new();
    policy.record_abort();
    let firing = loop_once(&mut watch);
    let records = firing.run(|action| -> Result<bool, String> {
        Ok(match action {
            ActionId::Abort => {
                policy.record_abort();
                true
            }
            ActionId::Resume => policy.may_resume(),
            _ => true,
        })
    });
    assert_eq!(
        records[2].outcome,
        ActionOutcome::Done(false),
        "false still uses the slot"
    );
}

#[test]
fn sw_10_ac_8_a_real_user_message_or_a_healthy_output_restores_auto_resume() {
    for reset in [
        LoopPolicy::real_user_message as fn(&mut LoopPolicy),
        LoopPolicy::healthy_output,
    ] {
        let mut watch = default_watch();
        let mut policy = LoopPolicy::new();
        run(&loop_once(&mut watch), &mut policy);
        run(&loop_once(&mut watch), &mut policy);
        assert!(policy.auto_continue_paused());
        reset(&mut policy);
        assert_eq!(policy.consecutive_aborts(), 0);
        let third = run(&loop_once(&mut watch), &mut policy);
        assert!(third.resumed, "auto-resume again");
        assert!(!third.noticed, "resume speaks instead");
    }
}

#[test]
fn sw_10_only_the_named_events_reset_the_counter() {
    let mut policy = LoopPolicy::new();
    policy.record_abort();
    assert!(
        policy.claim_notice("line-repeat", ""),
        "a notice does not reset it"
    );
    assert_eq!(policy.consecutive_aborts(), 1);
    policy.healthy_output();
    assert_eq!(policy.consecutive_aborts(), 0);
    assert_eq!(policy.record_abort(), 1);
    policy.real_user_message();
    assert_eq!(policy.consecutive_aborts(), 0);
}
