//! The completion observer (CO-1 .. CO-7): the pure detection, keys, transitions and
//! outbox (AC-19 .. AC-21), then the plugin in real composition (SQLite store, scripted
//! provider, agent loop): the observation reaches the next conversation request only,
//! never the surface; cooldown, negation, the control and the length limit suppress
//! it; a restart publishes a settled completion exactly once (AC-22).

use std::path::{Path, PathBuf};
use std::sync::Arc;

use ccare_agent::controls::{Patch, PatchOp};
use ccare_agent::domains::{DomainSpec, TableSpec};
use ccare_agent::{Agent, Host};
use ccare_core::kinds::TurnEndReason;
use ccare_core::{ContentBlock, Locale, SessionId, Source};
use ccare_llm::script::ScriptProvider;
use ccare_session::{Session, Sessions};
use ccare_watch::completion::{
    Completion, CompletionConfig, CompletionConfigError, CompletionNotice, CompletionState,
    NoticeStatus, ObserveOutcome, PendingCompletion, SettleOutcome, detect_completion,
    newest_eligible, notice_key, state_key,
};
use ccare_watch::plugin::StreamWatchPlugin;
use ccare_watch::plugin::completion::{
    LABEL_DONE, NOTICE_KIND, NOTICES_DOMAIN, NOTICES_TABLE, SOURCE_ID, STATE_DOMAIN, STATE_TABLE,
    done_notice,
};
use serde_json::{Value, json};

use crate::composition::Composition;
use sha2::{Digest, Sha256};

// ---------------------------------------------------------------------------------
// CO-1 (AC-19)

fn label(text: &str) -> Option<String> {
    detect_completion(text).map(|completion| completion.label)
}

#[test]
fn ac_19_completion_wording_and_what_never_counts() {
    assert_eq!(label("DONE").as_deref(), Some("DONE"));

    assert_eq!(label("任务已经完成了").as_deref(), Some("完成了"));
    for none in [
        "> DONE\n```\ncompleted\n```",
        "The task is not done.",
        "还没完成，请继续",
    ] {
        assert_eq!(detect_completion(none), None, "{none:?}");
    }
}

#[test]
fn co_1_statement_line_ascii_boundaries_and_leftmost_first_alternative() {
    assert_eq!(
        detect_completion("I looked at it.\nAll done, the tests pass."),
        Some(Completion {
            label: "done".to_owned(),
            line: "All done, the tests pass.".to_owned(),
        })
    );
    // The leftmost position wins; at one position, the first alternative in order.
    assert_eq!(label("Task complete.").as_deref(), Some("Task complete"));
    assert_eq!(
        label("Successfully finished it").as_deref(),
        Some("Successfully finished")
    );
    assert_eq!(label("It is completed.").as_deref(), Some("completed"));
    assert_eq!(label("You are ALL SET").as_deref(), Some("ALL SET"));
    // `\b` is ASCII: letters and `_` join words, `é` and CJK do not.
    for none in ["undone", "done_it", "completeness", "finished2"] {
        assert_eq!(label(none), None, "{none:?}");
    }
    assert_eq!(label("doneé").as_deref(), Some("done"));
    assert_eq!(label("完done").as_deref(), Some("done"));
    // Case folding is ASCII only (no `u` flag): the long s is not an s.
    assert_eq!(label("ſuccessfully finiſhed"), None);
    // Inline code is blanked; reasoning never reaches the detector (the host reads
    // text blocks only).
    assert_eq!(label("Run `done` next."), None);
    // EN before ZH within a statement; the first statement with a hit wins.
    assert_eq!(label("搞定 done").as_deref(), Some("done"));
    assert_eq!(label("处理完毕。\nAll set.").as_deref(), Some("处理完毕"));
}

#[test]
fn co_1_negations_skip_the_statement_within_24_utf16_units() {
    assert_eq!(label("It isn't finished"), None);
    assert_eq!(label("This is not yet completely done"), None);
    assert_eq!(label("I never said it was done."), None);
    assert_eq!(label("Unfinished: parts are complete"), None);
    assert_eq!(label("尚未完成"), None);
    assert_eq!(label("任务未搞定，但已完成一半"), None);
    // The negator must come first, within 24 code units.
    assert_eq!(label("Done, not a problem.").as_deref(), Some("Done"));
    let far = format!("not {} done", "x".repeat(24));
    assert_eq!(label(&far).as_deref(), Some("done"), "25 units apart");
    let near = format!("not {} done", "x".repeat(22));
    assert_eq!(label(&near), None, "24 units apart");
    // An astral character is two units (no `u` flag).
    let astral = format!("not {} done", "😀".repeat(12));
    assert_eq!(
        label(&astral).as_deref(),
        Some("done"),
        "1+24+1 units, 14 chars"
    );
    let astral = format!("not {} done", "😀".repeat(11));
    assert_eq!(label(&astral), None, "1+22+1 units");
    // Only the negated statement is skipped.
    assert_eq!(
        label("Part one is not done. Part two is done.").as_deref(),
        Some("done")
    );
    // `nothing` is not `not`.
    assert_eq!(label("nothing left, done").as_deref(), Some("done"));
}

// ---------------------------------------------------------------------------------
// CO-2 config

#[test]
fn co_2_config_defaults_and_strictness() {
    assert_eq!(
        CompletionConfig::from_json(&json!({})).unwrap(),
        CompletionConfig {
            cooldown_ms: 300_000,
            max_observed_chars: 65_536,
            notifications: true,
            max_deliveries: 2,
        }
    );
    let config =
        CompletionConfig::from_json(&json!({"cooldown_ms": 0, "notifications": false})).unwrap();
    assert_eq!((config.cooldown_ms, config.notifications), (0, false));
    assert_eq!(
        CompletionConfig::from_json(&json!({"cooldownMs": 1})),
        Err(CompletionConfigError::UnknownKey("cooldownMs".to_owned()))
    );
    for bad in [
        json!({"max_deliveries": 0}),
        json!({"max_observed_chars": -1}),
        json!({"notifications": "yes"}),
        json!({"cooldown_ms": 1.5}),
    ] {
        assert!(
            matches!(
                CompletionConfig::from_json(&bad),
                Err(CompletionConfigError::Invalid { .. })
            ),
            "{bad}"
        );
    }
    assert!(CompletionConfig::from_json(&json!([])).is_err());
    // A count past a u32 says the bound it broke.
    assert_eq!(
        CompletionConfig::from_json(&json!({"max_deliveries": 4_294_967_296_u64}))
            .unwrap_err()
            .to_string(),
        "completion.max_deliveries: expected a positive integer of at most 4294967295, got 4294967296"
    );
}

// ---------------------------------------------------------------------------------
// CO-3 keys (AC-21)

#[test]
fn ac_21_keys_are_hex_code_points_or_a_sha256() {
    let key = state_key("session/一", "attempt:2");
    assert!(
        key.chars()
            .all(|char| char.is_ascii_lowercase() || char.is_ascii_digit() || char == '_'),
        "{key}"
    );
    assert_eq!(state_key("a/", "一"), "00006100002f_004e00");
    assert_eq!(state_key("a", "b"), "000061_000062");
    assert_eq!(state_key("一", "😀"), "004e00_01f600");
    let uuid = "0194f1a2-7b3c-7def-8abc-0123456789ab";
    let hashed = state_key(uuid, "assistant");
    let expected: String = Sha256::digest(format!("[\"{uuid}\",\"assistant\"]").as_bytes())
        .iter()
        .map(|byte| format!("{byte:02x}"))
        .collect();
    assert_eq!(hashed, format!("sha256_{expected}"));
    assert_eq!(hashed.len(), "sha256_".len() + 64);
    // Exactly 250 chars stay plain: 41 + 1 code points → 41×6 + 1 + 6 = 253 > 250;
    // 40 + 1 → 247.
    assert!(!state_key(&"s".repeat(40), "a").starts_with("sha256_"));
    assert!(state_key(&"s".repeat(41), "a").starts_with("sha256_"));
    let notice: String = Sha256::digest(b"{\"sessionId\":\"s1\",\"eventSeq\":7}")
        .iter()
        .map(|byte| format!("{byte:02x}"))
        .collect();
    assert_eq!(notice_key("s1", 7), notice);
}

// ---------------------------------------------------------------------------------
// CO-4 transitions (AC-20, AC-21)

fn candidate(occurrence: &str) -> Option<PendingCompletion> {
    Some(PendingCompletion {
        occurrence_id: occurrence.to_owned(),
        label: "done".to_owned(),
        line: "All done.".to_owned(),
    })
}

#[test]
fn ac_20_observe_settle_cooldown_and_sources_apart() {
    let (cooldown, now) = (50, 100);
    let mut state = CompletionState::default();
    assert_eq!(
        state.observe(candidate("a#1"), now),
        ObserveOutcome::Pending { changed: true }
    );
    assert_eq!(
        state.observe(candidate("a#1"), now),
        ObserveOutcome::Pending { changed: false },
        "the same pending: no write"
    );
    assert!(matches!(
        state.settle("a#1", now, cooldown),
        SettleOutcome::Completed(pending) if pending.occurrence_id == "a#1"
    ));
    assert_eq!(state.cooldown_until, 150);
    assert_eq!(state.completed_occurrence_id.as_deref(), Some("a#1"));
    assert_eq!(state.pending, None);
    assert_eq!(
        state.observe(candidate("a#2"), now),
        ObserveOutcome::Cooldown
    );
    assert_eq!(
        state.observe(candidate("a#2"), now + 49),
        ObserveOutcome::Cooldown,
        "cooldownUntil > now"
    );
    assert_eq!(
        state.observe(candidate("a#2"), now + 51),
        ObserveOutcome::Pending { changed: true }
    );
    // Another source has its own state.
    let mut other = CompletionState::default();
    assert_eq!(
        other.observe(candidate("b#1"), now),
        ObserveOutcome::Pending { changed: true }
    );
    assert_eq!(state.observe(None, now), ObserveOutcome::Ignored);
}

#[test]
fn ac_21_settling_an_older_occurrence_is_recovery_and_recover_spends_no_cooldown() {
    let mut state = CompletionState::default();
    state.observe(candidate("old"), 0);
    state.observe(candidate("cur"), 0);
    assert_eq!(state.settle("old", 0, 50), SettleOutcome::Recovery);
    assert_eq!(state.cooldown_until, 0);
    assert_eq!(
        state.pending.as_ref().map(|p| p.occurrence_id.as_str()),
        Some("cur")
    );
    assert_eq!(
        CompletionState::default().settle("x", 0, 50),
        SettleOutcome::Recovery
    );
    assert!(state.recover());
    assert!(!state.recover(), "nothing left to clear");
    assert_eq!((state.pending.clone(), state.cooldown_until), (None, 0));
    // The stored shape is the spec's camelCase record.
    state.observe(candidate("c"), 0);
    assert_eq!(
        serde_json::to_value(&state).unwrap(),
        json!({"pending": {"occurrenceId": "c", "label": "done", "line": "All done."}, "cooldownUntil": 0})
    );
}

// ---------------------------------------------------------------------------------
// CO-6 outbox (AC-22, pure part)

fn notice(seq: u64, route: &str) -> CompletionNotice {
    CompletionNotice::publish("s", seq, route, &candidate("x").unwrap(), 2)
}

#[test]
fn ac_22_collect_takes_the_newest_eligible_notice_of_the_exact_route() {
    let mut older = notice(3, "p/m");
    let newer = notice(9, "p/m");
    let elsewhere = notice(12, "p/other");
    let pick = |notices: Vec<CompletionNotice>| {
        newest_eligible(notices.into_iter().map(|n| ((), n)), "p/m").map(|(_, n)| n.event_seq)
    };
    assert_eq!(
        pick(vec![older.clone(), newer.clone(), elsewhere.clone()]),
        Some(9)
    );
    let mut dispatched = newer.clone();
    dispatched.status = NoticeStatus::Dispatched;
    assert_eq!(pick(vec![older.clone(), dispatched, elsewhere]), Some(3));
    older.reserve();
    assert_eq!(
        (older.deliveries, older.status),
        (1, NoticeStatus::DeliveryUnknown)
    );
    assert_eq!(pick(vec![older.clone()]), Some(3), "a crash redelivers");
    older.reserve();
    assert_eq!(pick(vec![older]), None, "up to maxDeliveries");
    assert_eq!(
        serde_json::to_value(notice(1, "p/m")).unwrap(),
        json!({"sessionId": "s", "eventSeq": 1, "route": "p/m", "label": "done", "line": "All done.", "deliveries": 0, "maxDeliveries": 2, "status": "pending"})
    );
}

#[test]
fn mv_done_is_calm_wrapped_and_says_it_observes_wording_only() {
    let en = done_notice(Locale::En, "done");
    assert!(en.starts_with("<context-care>\n") && en.ends_with("\n</context-care>"));
    for point in [
        "\"done\"",
        "observation of wording only",
        "scope",
        "request",
        "deliverables",
        "verification records",
        "continue",
    ] {
        assert!(en.contains(point), "{point}: {en}");
    }
    let zh = done_notice(Locale::Zh, "完成了");
    for point in ["“完成了”", "措辞的观察", "交付物", "验证记录", "继续"] {
        assert!(zh.contains(point), "{point}: {zh}");
    }
}

// ---------------------------------------------------------------------------------
// The plugin in the agent loop

struct Rig {
    host: Arc<Host>,
    sessions: Arc<Sessions>,
    agent: Agent,
    session: Session,
    script: ScriptProvider,
}

/// A host over the SQLite file `path`, with the watch mounted with `config` (`None`:
/// not mounted), on a new session or the stored one `resume`.
async fn rig_at(
    path: &Path,
    resume: Option<&SessionId>,
    replies: &[Value],
    config: Option<Value>,
) -> Rig {
    let composition = Composition::new(path, replies);
    if let Some(config) = config {
        composition
            .host
            .mount(&StreamWatchPlugin::default(), &config)
            .unwrap();
    }
    let (session, agent) = composition.agent("scripted", resume).await;
    Rig {
        host: composition.host,
        sessions: composition.sessions,
        agent,
        session,
        script: composition.script,
    }
}

fn db(dir: &tempfile::TempDir) -> PathBuf {
    dir.path().join("w.db")
}

fn reply(text: &str) -> Value {
    json!({"text": text})
}

impl Rig {
    async fn turn(&self, prompt: &str) {
        self.agent.prompt(prompt);
        assert_eq!(self.agent.when_idle().await, Some(TurnEndReason::Completed));
    }

    /// The observation the `index`-th request ends with, if any.
    fn observation(&self, index: usize) -> Option<String> {
        let requests = self.script.requests();
        let last = requests[index].config.messages.last()?.message.clone();
        match &last.source {
            Some(Source::Plugin(source)) if source.kind == NOTICE_KIND => {
                assert_eq!(source.summary.as_deref(), Some(LABEL_DONE));
                assert_eq!(
                    source.extra.get("segment"),
                    Some(&json!("completion-observation"))
                );
                assert_eq!(source.extra.get("segmentVersion"), Some(&json!(1)));
                match &last.content[..] {
                    [ContentBlock::Text(text)] => Some(text.text.clone()),
                    other => panic!("{other:?}"),
                }
            }
            _ => None,
        }
    }

    fn observations(&self) -> Vec<Option<String>> {
        (0..self.script.requests().len())
            .map(|index| self.observation(index))
            .collect()
    }

    fn events(&self, kind: &str) -> Vec<Value> {
        self.session.with_log(|log| {
            log.events()
                .iter()
                .filter(|event| event.kind() == kind)
                .map(|event| serde_json::from_str(event.data_json()).unwrap())
                .collect()
        })
    }

    async fn patch_notice(&self, enabled: bool) {
        self.patch_notice_at(0, enabled).await;
    }

    /// Toggles the notice action, expecting the session's controls at `revision`.
    async fn patch_notice_at(&self, revision: u64, enabled: bool) {
        let controls = self.host.controls();
        controls.load(self.session.id()).await.unwrap();
        controls
            .patch(
                self.session.id(),
                Patch {
                    revision,
                    source_id: SOURCE_ID.to_owned(),
                    rule_id: "completion".to_owned(),
                    op: PatchOp::Toggle {
                        action_id: "notice".to_owned(),
                        enabled,
                    },
                },
                self.session.head(),
            )
            .await
            .unwrap();
    }

    /// Unmounts the plugin and reads a table of its domain back.
    async fn table(&self, domain: &str, table: &str) -> Vec<(String, Value)> {
        self.host.unmount("stream-watch");
        let opened = self
            .host
            .domains()
            .open(
                DomainSpec::new(domain, 1)
                    .table(TableSpec::new(table))
                    .table(TableSpec::new(match table {
                        "state" => "unused",
                        "watermarks" => NOTICES_TABLE,
                        _ => "watermarks",
                    })),
                "test",
            )
            .await
            .unwrap();
        let rows = opened
            .table(table)
            .unwrap()
            .entries("")
            .into_iter()
            .map(|(key, value)| (key, value.as_ref().clone()))
            .collect();
        self.host.domains().close(domain);
        rows
    }
}

#[tokio::test]
async fn co_6_a_completion_reaches_the_next_request_only_and_never_the_surface() {
    let dir = tempfile::tempdir().unwrap();
    let rig = rig_at(
        &db(&dir),
        None,
        &[reply("All done."), reply("ok"), reply("fine")],
        Some(json!({})),
    )
    .await;
    rig.turn("do it").await;
    rig.turn("next").await;
    rig.turn("and then").await;
    let observations = rig.observations();
    assert_eq!(observations.len(), 3);
    assert_eq!(observations[0], None);
    let text = observations[1]
        .clone()
        .expect("the request after the reply");
    assert!(text.contains("\"done\""), "{text}");
    assert!(text.contains("observation of wording only"), "{text}");
    assert_eq!(observations[2], None, "dispatched once");
    // Request-only: after every surface message, on the request copy only.
    let requests = rig.script.requests();
    let messages = &requests[1].config.messages;
    let prompt = &messages[messages.len() - 2].message.content;
    assert!(matches!(&prompt[..], [ContentBlock::Text(t)] if t.text == "next"));
    for event in rig.events("user/message") {
        assert!(
            !event.to_string().contains("completion wording"),
            "on the surface: {event}"
        );
    }
    // Logged in that request's `request/header` delta.
    let deltas: Vec<Value> = rig
        .events("request/header")
        .into_iter()
        .filter_map(|header| {
            header["ext"]["request_delta"]["append_request_only"]
                .as_array()
                .cloned()
        })
        .flatten()
        .collect();
    assert_eq!(deltas.len(), 1, "{deltas:?}");
    assert_eq!(deltas[0]["plugin"], "stream-watch");
    // The outbox: one dispatched notice on the exact route.
    let notices = rig.table(NOTICES_DOMAIN, NOTICES_TABLE).await;
    assert_eq!(notices.len(), 1, "{notices:?}");
    assert_eq!(notices[0].1["status"], "dispatched");
    assert_eq!(notices[0].1["deliveries"], 1);
    assert_eq!(notices[0].1["route"], "s/scripted");
    assert_eq!(notices[0].1["label"], "done");
}

#[tokio::test]
async fn co_4_the_cooldown_suppresses_a_second_completion_and_zero_lets_it_through() {
    let replies = [reply("All done."), reply("Finished."), reply("ok")];
    let dir = tempfile::tempdir().unwrap();
    let rig = rig_at(&db(&dir), None, &replies, Some(json!({}))).await;
    for prompt in ["one", "two", "three"] {
        rig.turn(prompt).await;
    }
    let observations = rig.observations();
    assert!(observations[1].is_some());
    assert_eq!(observations[2], None, "within the 300 s cooldown");

    let dir = tempfile::tempdir().unwrap();
    let rig = rig_at(
        &db(&dir),
        None,
        &replies,
        Some(json!({"completion": {"cooldown_ms": 0}})),
    )
    .await;
    for prompt in ["one", "two", "three"] {
        rig.turn(prompt).await;
    }
    let observations = rig.observations();
    assert!(observations[1].as_deref().unwrap().contains("\"done\""));
    assert!(observations[2].as_deref().unwrap().contains("\"Finished\""));
}

#[tokio::test]
async fn co_1_negated_wording_reasoning_and_long_outputs_give_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let rig = rig_at(
        &db(&dir),
        None,
        &[
            reply("The task is not done yet."),
            json!({"reasoning": "All done.", "text": "Working on it."}),
            reply("ok"),
        ],
        Some(json!({})),
    )
    .await;
    for prompt in ["one", "two", "three"] {
        rig.turn(prompt).await;
    }
    assert_eq!(rig.observations(), vec![None, None, None]);

    let dir = tempfile::tempdir().unwrap();
    let rig = rig_at(
        &db(&dir),
        None,
        &[reply("All done."), reply("ok")],
        Some(json!({"completion": {"max_observed_chars": 8}})),
    )
    .await;
    rig.turn("one").await;
    rig.turn("two").await;
    assert_eq!(
        rig.observations(),
        vec![None, None],
        "9 chars > 8: unavailable"
    );
}

#[tokio::test]
async fn co_2_the_control_off_or_notifications_off_gives_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let rig = rig_at(
        &db(&dir),
        None,
        &[reply("All done."), reply("ok")],
        Some(json!({})),
    )
    .await;
    rig.patch_notice(false).await;
    rig.turn("one").await;
    rig.turn("two").await;
    assert_eq!(rig.observations(), vec![None, None]);
    // No cooldown was spent while it was off.
    let state = rig.table(STATE_DOMAIN, STATE_TABLE).await;
    assert!(state.is_empty(), "{state:?}");

    let dir = tempfile::tempdir().unwrap();
    let rig = rig_at(
        &db(&dir),
        None,
        &[reply("All done."), reply("ok")],
        Some(json!({"completion": {"notifications": false}})),
    )
    .await;
    rig.turn("one").await;
    rig.turn("two").await;
    assert_eq!(rig.observations(), vec![None, None]);
    rig.host.unmount("stream-watch");
    assert_eq!(
        rig.host
            .mount(
                &StreamWatchPlugin::default(),
                &json!({"completion": {"cooldown": 1}})
            )
            .unwrap_err()
            .to_string(),
        "stream-watch: completion: unknown config cooldown"
    );
}

#[tokio::test]
async fn co_2_a_rule_turned_on_again_past_an_observed_reply_does_not_deliver_it() {
    // The reply is observed (its notice published) as the agent goes idle; the rule is
    // then turned off and on again, which moves its `sinceSeq` past that reply: the
    // next request does not carry it, as if it had been observed at that request.
    let dir = tempfile::tempdir().unwrap();
    let rig = rig_at(
        &db(&dir),
        None,
        &[reply("All done."), reply("ok")],
        Some(json!({})),
    )
    .await;
    rig.turn("one").await;
    rig.patch_notice_at(0, false).await;
    rig.patch_notice_at(1, true).await;
    rig.turn("two").await;
    assert_eq!(rig.observations(), vec![None, None]);
}

#[tokio::test]
async fn ac_22_a_settled_but_unpublished_completion_is_published_once_after_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    // Before: the reply was settled, then the process stopped before the notice.
    let before = rig_at(&db(&dir), None, &[reply("All done.")], Some(json!({}))).await;
    before.turn("do it").await;
    let id = before.session.id().clone();
    let seq = before.session.with_log(|log| {
        log.events()
            .iter()
            .find(|event| event.kind() == "assistant/message")
            .unwrap()
            .seq()
    });
    before.sessions.close(&id).await.unwrap();
    drop(before);
    {
        let rig = rig_at(&db(&dir), Some(&id), &[reply("unused")], None).await;
        let domain = rig
            .host
            .domains()
            .open(
                DomainSpec::new(STATE_DOMAIN, 1).table(TableSpec::new(STATE_TABLE)),
                "test",
            )
            .await
            .unwrap();
        domain
            .table(STATE_TABLE)
            .unwrap()
            .put(
                &state_key(id.as_str(), "assistant"),
                json!({"cooldownUntil": i64::MAX, "completedOccurrenceId": format!("committed:{seq}")}),
            )
            .unwrap()
            .await
            .unwrap();
        rig.host.domains().close(STATE_DOMAIN);
        // The process stopped before the notice and the watermark were written (this
        // one observed the reply as it went idle and wrote both): take them back.
        let notices = rig
            .host
            .domains()
            .open(
                DomainSpec::new(NOTICES_DOMAIN, 1)
                    .table(TableSpec::new(NOTICES_TABLE))
                    .table(TableSpec::new("watermarks")),
                "test",
            )
            .await
            .unwrap();
        for table in [NOTICES_TABLE, "watermarks"] {
            let table = notices.table(table).unwrap();
            let rows = table.entries("");
            assert_eq!(rows.len(), 1, "written as the agent went idle");
            for (key, _) in rows {
                table.delete(&key).unwrap().await.unwrap();
            }
        }
        rig.host.domains().close(NOTICES_DOMAIN);
        rig.sessions.close(&id).await.unwrap();
    }
    let after = rig_at(
        &db(&dir),
        Some(&id),
        &[reply("ok"), reply("fine")],
        Some(json!({})),
    )
    .await;
    after.turn("next").await;
    after.turn("and then").await;
    let observations = after.observations();
    assert!(
        observations[0]
            .as_deref()
            .is_some_and(|text| text.contains("\"done\"")),
        "{observations:?}"
    );
    assert_eq!(observations[1], None, "published exactly once");
    let notices = after.table(NOTICES_DOMAIN, NOTICES_TABLE).await;
    assert_eq!(notices.len(), 1);
    assert_eq!(notices[0].1["eventSeq"], seq);
    assert_eq!(notices[0].1["status"], "dispatched");
}

#[tokio::test]
async fn co_6_a_notice_reaches_only_its_own_session_after_a_restart() {
    // Session A's notice, stored and still pending, is in the store when the next
    // process starts session B: B's requests never carry it, and B's dispatch leaves
    // it pending for A.
    let dir = tempfile::tempdir().unwrap();
    let first = rig_at(&db(&dir), None, &[reply("All done.")], Some(json!({}))).await;
    first.turn("do it").await;
    let a = first.session.id().clone();
    first.sessions.close(&a).await.unwrap();
    drop(first);
    let second = rig_at(
        &db(&dir),
        None,
        &[reply("Finished."), reply("ok")],
        Some(json!({})),
    )
    .await;
    assert_ne!(second.session.id(), &a);
    second.turn("one").await;
    second.turn("two").await;
    let observations = second.observations();
    assert_eq!(observations[0], None, "A's notice is not B's");
    assert!(
        observations[1]
            .as_deref()
            .is_some_and(|text| text.contains("\"Finished\"")),
        "B's own: {observations:?}"
    );
    let mut notices: Vec<(String, String)> = second
        .table(NOTICES_DOMAIN, NOTICES_TABLE)
        .await
        .into_iter()
        .map(|(_, notice)| {
            (
                notice["sessionId"].as_str().unwrap().to_owned(),
                notice["status"].as_str().unwrap().to_owned(),
            )
        })
        .collect();
    notices.sort();
    let b = second.session.id().as_str().to_owned();
    let mut expected = vec![
        (a.as_str().to_owned(), "pending".to_owned()),
        (b, "dispatched".to_owned()),
    ];
    expected.sort();
    assert_eq!(notices, expected);
}

#[tokio::test]
async fn ac_22_a_dispatch_sends_the_newest_notice_and_supersedes_the_rest() {
    let dir = tempfile::tempdir().unwrap();
    // Two completions logged while the observer was not mounted.
    let before = rig_at(
        &db(&dir),
        None,
        &[reply("All done."), reply("Task complete.")],
        None,
    )
    .await;
    before.turn("one").await;
    before.turn("two").await;
    let id = before.session.id().clone();
    before.sessions.close(&id).await.unwrap();
    drop(before);
    let after = rig_at(
        &db(&dir),
        Some(&id),
        &[reply("ok"), reply("fine")],
        Some(json!({"completion": {"cooldown_ms": 0}})),
    )
    .await;
    after.turn("three").await;
    after.turn("four").await;
    let observations = after.observations();
    assert!(
        observations[0]
            .as_deref()
            .is_some_and(|text| text.contains("\"Task complete\"")),
        "{observations:?}"
    );
    assert_eq!(observations[1], None, "the older one was superseded");
    let mut statuses: Vec<(u64, String)> = after
        .table(NOTICES_DOMAIN, NOTICES_TABLE)
        .await
        .into_iter()
        .map(|(_, notice)| {
            (
                notice["eventSeq"].as_u64().unwrap(),
                notice["status"].as_str().unwrap().to_owned(),
            )
        })
        .collect();
    statuses.sort();
    assert_eq!(
        statuses
            .iter()
            .map(|(_, status)| status.as_str())
            .collect::<Vec<_>>(),
        ["superseded", "dispatched"]
    );
}

#[tokio::test]
async fn co_6_a_request_that_fails_releases_the_notice_for_the_next_one() {
    let dir = tempfile::tempdir().unwrap();
    let rig = rig_at(
        &db(&dir),
        None,
        &[
            reply("All done."),
            json!({"failure": {"code": "UNKNOWN", "message": "boom"}}),
            reply("ok"),
            reply("fine"),
        ],
        Some(json!({})),
    )
    .await;
    rig.turn("one").await;
    rig.agent.prompt("two");
    assert!(matches!(
        rig.agent.when_idle().await,
        Some(TurnEndReason::Error { .. })
    ));
    rig.turn("three").await;
    rig.turn("four").await;
    let observations = rig.observations();
    assert_eq!(observations.len(), 4);
    assert!(observations[1].is_some(), "reserved for the failed request");
    assert!(observations[2].is_some(), "released, so sent again");
    assert_eq!(observations[3], None);
    let notices = rig.table(NOTICES_DOMAIN, NOTICES_TABLE).await;
    assert_eq!(notices.len(), 1);
    assert_eq!(
        notices[0].1["deliveries"], 1,
        "the release restored the count"
    );
    assert_eq!(notices[0].1["status"], "dispatched");
}

#[tokio::test]
async fn co_5_the_watermark_is_written_only_past_a_processed_reply() {
    // A turn whose request found no reply above the (absent) watermark wrote nothing
    // before that request; the reply it ended with is processed as the agent goes idle
    // and the watermark moves past it, to the end of that turn.
    let dir = tempfile::tempdir().unwrap();
    let rig = rig_at(
        &db(&dir),
        None,
        &[reply("ok"), reply("fine")],
        Some(json!({})),
    )
    .await;
    rig.turn("one").await;
    let first_head = rig.session.head();
    rig.turn("two").await;
    let replies: Vec<u64> = rig.session.with_log(|log| {
        log.events()
            .iter()
            .filter(|event| event.kind() == "assistant/message")
            .map(|event| event.seq())
            .collect()
    });
    assert_eq!(replies.len(), 2);
    assert!(replies[0] < first_head && first_head <= replies[1]);
    // The second turn's pre-step found nothing above the first turn's watermark (no
    // write); its idle catch-up processed the second reply.
    let marks = rig.table(NOTICES_DOMAIN, "watermarks").await;
    assert_eq!(marks.len(), 1, "{marks:?}");
    let (key, mark) = &marks[0];
    assert_eq!(key, &state_key(rig.session.id().as_str(), "assistant"));
    assert_eq!(
        mark["seq"].as_u64(),
        Some(rig.session.head() - 1),
        "past the second reply, at the end of its turn: {replies:?}"
    );
}

#[tokio::test]
async fn co_5_a_reply_is_observed_as_the_agent_goes_idle() {
    // The reply that ends a turn is observed before the next request is prepared: its
    // notice is stored, not yet delivered, once the agent is idle.
    let dir = tempfile::tempdir().unwrap();
    let rig = rig_at(&db(&dir), None, &[reply("All done.")], Some(json!({}))).await;
    rig.turn("do the task").await;
    let reply_seq = rig.session.with_log(|log| {
        log.events()
            .iter()
            .rev()
            .find(|event| event.kind() == "assistant/message")
            .map(|event| event.seq())
            .unwrap()
    });
    let notices = rig.table(NOTICES_DOMAIN, NOTICES_TABLE).await;
    assert_eq!(notices.len(), 1, "{notices:?}");
    assert_eq!(notices[0].1["eventSeq"], reply_seq);
    assert_eq!(notices[0].1["status"], "pending");
    assert_eq!(notices[0].1["deliveries"], 0);
}

#[tokio::test]
async fn co_5_a_lost_watermark_write_fails_the_sessions_next_request() {
    // The watermark is queued, not awaited: the second turn's idle catch-up processes
    // its reply and queues the watermark past it, and the store refuses that write.
    // The session's next pre-step reports it, failing the turn naming the plugin.
    third_turn_after_a_refused_outbox_write(&[reply("ok"), reply("fine"), reply("unused")]).await;
}

#[tokio::test]
async fn co_6_a_lost_delivery_edit_awaited_at_idle_fails_the_sessions_next_request() {
    // The second request's delivery edits are queued, not awaited; the idle catch-up
    // after its turn awaits them, finds the one the store refused and keeps it for the
    // session's next pre-step, which fails the turn naming the plugin.
    third_turn_after_a_refused_outbox_write(&[reply("All done."), reply("fine"), reply("unused")])
        .await;
}

/// A memory store whose calls fail on demand.
fn failing_store() -> Arc<ccare_agent::testing::FailingStore> {
    Arc::new(ccare_agent::testing::FailingStore::new(
        ccare_store::MemoryStore::new(),
    ))
}

/// A host over `store` with the watch mounted (defaults), the model answering
/// `replies` in order: one process's composition.
fn watched_over(store: &Arc<ccare_agent::testing::FailingStore>, replies: &[Value]) -> Composition {
    let composition = Composition::over(Arc::clone(store) as Arc<dyn ccare_store::Store>, replies);
    composition
        .host
        .mount(&StreamWatchPlugin::default(), &json!({}))
        .unwrap();
    composition
}

/// Runs three turns answered by `replies`, the store refusing the first outbox-domain
/// write after the first turn, and checks that the third turn failed naming it.
async fn third_turn_after_a_refused_outbox_write(replies: &[Value]) {
    let store = failing_store();
    let composition = watched_over(&store, replies);
    let (session, agent) = composition.agent("scripted", None).await;
    agent.prompt("one");
    assert_eq!(agent.when_idle().await, Some(TurnEndReason::Completed));
    store.fail(
        ccare_agent::testing::Fault::kv_writes("disk unplugged")
            .containing(NOTICES_DOMAIN)
            .once(),
    );
    agent.prompt("two");
    assert_eq!(agent.when_idle().await, Some(TurnEndReason::Completed));
    agent.prompt("three");
    agent.when_idle().await;
    assert_third_turn_failed_naming_the_store(&session, &composition);
}

/// The third turn of `session` ended `HOOK_FAILED`, naming stream watch's completion
/// observer and the store's refusal, and its request never left.
fn assert_third_turn_failed_naming_the_store(
    session: &ccare_session::Session,
    composition: &Composition,
) {
    let ends: Vec<Value> = session.with_log(|log| {
        log.events()
            .iter()
            .filter(|event| event.kind() == "turn/end")
            .map(|event| serde_json::from_str(event.data_json()).unwrap())
            .collect()
    });
    assert_eq!(ends.len(), 3);
    let failure = &ends[2]["reason"]["failure"];
    assert_eq!(failure["code"], "HOOK_FAILED", "{:?}", ends[2]);
    assert_eq!(failure["plugin"], "stream-watch", "{:?}", ends[2]);
    assert!(
        failure["message"]
            .as_str()
            .is_some_and(|message| message.contains("completion observer")
                && message.contains("disk unplugged")),
        "{:?}",
        ends[2]
    );
    assert_eq!(
        composition.script.requests().len(),
        2,
        "the third request never left"
    );
}

/// A session created in this process has no state or watermark rows in the store, so
/// its first catch-up reads none: with every read of the observer's domains failing
/// (after their open), a new session's turn completes, its reply observed. A session
/// the process did not create (opened from the store) is read, and its turn fails
/// naming the store.
#[tokio::test]
async fn co_5_a_session_created_here_reads_nothing_of_the_observer_from_the_store() {
    let store = failing_store();
    let composition = watched_over(&store, &[reply("ok"), reply("All done."), reply("fine")]);
    // A first turn opens the domains (their open reads the store).
    let (_first, agent) = composition.agent("scripted", None).await;
    agent.prompt("open the domains");
    assert_eq!(agent.when_idle().await, Some(TurnEndReason::Completed));

    let unreadable =
        || ccare_agent::testing::Fault::kv_reads("the disk is gone").containing(STATE_DOMAIN);
    store.fail(unreadable());
    let (created, agent) = composition.agent("scripted", None).await;
    agent.prompt("a new conversation");
    assert_eq!(agent.when_idle().await, Some(TurnEndReason::Completed));
    agent.prompt("go on");
    assert_eq!(agent.when_idle().await, Some(TurnEndReason::Completed));
    let last = composition.script.requests().pop().unwrap();
    let observed = last.config.messages.last().unwrap().message.source.clone();
    assert!(
        matches!(&observed, Some(Source::Plugin(source)) if source.kind == NOTICE_KIND),
        "the reply was observed: {observed:?}"
    );

    // Another process, its domains open, reads the stored session's rows: it fails.
    store.heal();
    let other = watched_over(&store, &[reply("four"), reply("five")]);
    let (_opener, agent) = other.agent("scripted", None).await;
    agent.prompt("open this process's domains");
    assert_eq!(agent.when_idle().await, Some(TurnEndReason::Completed));
    store.fail(unreadable());
    let (_reopened, agent) = other.agent("scripted", Some(created.id())).await;
    agent.prompt("continue it elsewhere");
    let end = agent.when_idle().await;
    let Some(TurnEndReason::Error { failure }) = end else {
        panic!("{end:?}")
    };
    let failure = serde_json::to_value(&failure).unwrap();
    assert_eq!(failure["code"], "HOOK_FAILED", "{failure}");
    assert!(
        failure["message"]
            .as_str()
            .is_some_and(|message| message.contains("the disk is gone")),
        "{failure}"
    );
}
