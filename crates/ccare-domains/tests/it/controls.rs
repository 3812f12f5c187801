//! Session rule controls over real stores: the catalog checks, the decision order, patches
//! persisted by compare-and-swap and read back from a reopened SQLite file, failed saves,
//! evidence gating, the epoch and the UI snapshot (spec RC-1..RC-9, CC-CTL-1..3).

#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use std::sync::Arc;

use ccare_core::SessionId;
use ccare_domains::controls::{
    CONTROLS_DOMAIN, ControlAction, ControlRule, ControlSource, Controls, ControlsError, Decision,
    Patch, PatchOp, PatchRequest,
};
use ccare_store::testing::{FailingStore, Fault};
use ccare_store::{MemoryStore, SqliteConfig, SqliteStore, Store};
use serde_json::{Value, json};

fn session(id: &str) -> SessionId {
    SessionId::new(id).unwrap()
}

fn action(id: &str) -> ControlAction {
    ControlAction::new(id)
}

fn requiring(id: &str, requires: &[&str]) -> ControlAction {
    ControlAction {
        requires: requires.iter().map(|id| (*id).to_owned()).collect(),
        ..ControlAction::new(id)
    }
}

/// A source exercising every step of the decision order.
fn watch_source() -> ControlSource {
    ControlSource {
        plugin: Some("watch".to_owned()),
        ..ControlSource::new(
            "watch",
            vec![
                ControlRule::new(
                    "stream-line-repeat",
                    vec![
                        action("notice"),
                        action("abort"),
                        requiring("resume", &["abort"]),
                    ],
                ),
                ControlRule::new(
                    "chain",
                    vec![
                        requiring("a", &["b"]),
                        requiring("b", &["c"]),
                        action("c"),
                        requiring("d", &["e"]),
                        ControlAction {
                            available: false,
                            ..action("e")
                        },
                    ],
                ),
                ControlRule::new(
                    "gate",
                    vec![
                        ControlAction {
                            available: false,
                            reason: Some("no-pruner".to_owned()),
                            ..action("with-reason")
                        },
                        ControlAction {
                            available: false,
                            ..action("without-reason")
                        },
                        ControlAction {
                            default_enabled: false,
                            ..action("opt-in")
                        },
                        ControlAction {
                            default_enabled: false,
                            available: false,
                            ..action("off-and-unavailable")
                        },
                    ],
                ),
            ],
        )
    }
}

fn toggle(revision: u64, rule: &str, action: &str, enabled: bool) -> Patch {
    Patch {
        revision,
        source_id: "watch".to_owned(),
        rule_id: rule.to_owned(),
        op: PatchOp::Toggle {
            action_id: action.to_owned(),
            enabled,
        },
    }
}

fn rule_op(revision: u64, rule: &str, op: PatchOp) -> Patch {
    Patch {
        revision,
        source_id: "watch".to_owned(),
        rule_id: rule.to_owned(),
        op,
    }
}

async fn loaded(store: Arc<dyn Store>, id: &SessionId) -> Controls {
    let controls = Controls::new(store);
    controls.register(watch_source()).unwrap();
    controls.load(id).await.unwrap();
    controls
}

fn reason(controls: &Controls, id: &SessionId, rule: &str, action: &str) -> String {
    controls
        .decide(id, "watch", rule, action)
        .as_str()
        .to_owned()
}

/// Every registered action of the watch source with its reason.
fn all_reasons(controls: &Controls, id: &SessionId) -> Vec<String> {
    let source = watch_source();
    source
        .rules
        .iter()
        .flat_map(|rule| {
            rule.actions
                .iter()
                .map(|action| reason(controls, id, &rule.id, &action.id))
                .collect::<Vec<_>>()
        })
        .collect()
}

#[tokio::test]
async fn rc_3_step_1_storage_unavailable_until_loaded_and_after_close() {
    let id = session("s1");
    let controls = Controls::new(Arc::new(MemoryStore::new()));
    controls.register(watch_source()).unwrap();
    assert_eq!(
        controls.decide(&id, "watch", "stream-line-repeat", "notice"),
        Decision::StorageUnavailable
    );
    controls.load(&id).await.unwrap();
    assert_eq!(
        controls.decide(&id, "watch", "stream-line-repeat", "notice"),
        Decision::Enabled
    );
    controls.close();
    let decision = controls.decide(&id, "watch", "stream-line-repeat", "notice");
    assert_eq!(decision.as_str(), "storage-unavailable");
    assert!(!decision.is_enabled());
    // Closed wins even over a missing source (step 1 before step 2).
    assert_eq!(
        reason(&controls, &id, "nope", "nope"),
        "storage-unavailable"
    );
}

#[tokio::test]
async fn rc_3_step_2_source_unavailable_for_missing_source_rule_action_or_unregistered() {
    let id = session("s1");
    let controls = loaded(Arc::new(MemoryStore::new()), &id).await;
    assert_eq!(
        controls.decide(&id, "other", "stream-line-repeat", "notice"),
        Decision::SourceUnavailable
    );
    assert_eq!(
        reason(&controls, &id, "nope", "notice"),
        "source-unavailable"
    );
    assert_eq!(
        reason(&controls, &id, "stream-line-repeat", "nope"),
        "source-unavailable"
    );
    assert!(controls.unregister("watch"));
    assert!(!controls.unregister("watch"));
    assert_eq!(
        reason(&controls, &id, "stream-line-repeat", "notice"),
        "source-unavailable"
    );
    controls.register(watch_source()).unwrap();
    assert_eq!(
        reason(&controls, &id, "stream-line-repeat", "notice"),
        "enabled"
    );
}

#[tokio::test]
async fn rc_3_step_3_paused_wins_over_disabled_and_unavailable() {
    let id = session("s1");
    let controls = loaded(Arc::new(MemoryStore::new()), &id).await;
    let revision = controls
        .patch(&id, toggle(0, "gate", "opt-in", false), 10)
        .await
        .unwrap();
    controls
        .patch(&id, rule_op(revision, "gate", PatchOp::Pause(true)), 10)
        .await
        .unwrap();
    for action in [
        "with-reason",
        "without-reason",
        "opt-in",
        "off-and-unavailable",
    ] {
        assert_eq!(
            controls.decide(&id, "watch", "gate", action),
            Decision::RulePaused,
            "{action}"
        );
    }
    // Other rules are untouched.
    assert_eq!(
        reason(&controls, &id, "stream-line-repeat", "notice"),
        "enabled"
    );
}

#[tokio::test]
async fn rc_3_step_4_action_disabled_by_default_or_by_preference() {
    let id = session("s1");
    let controls = loaded(Arc::new(MemoryStore::new()), &id).await;
    assert_eq!(
        controls.decide(&id, "watch", "gate", "opt-in"),
        Decision::ActionDisabled
    );
    // Not selected wins over unavailable (step 4 before step 5).
    assert_eq!(
        reason(&controls, &id, "gate", "off-and-unavailable"),
        "action-disabled"
    );
    let revision = controls
        .patch(&id, toggle(0, "gate", "opt-in", true), 3)
        .await
        .unwrap();
    assert_eq!(reason(&controls, &id, "gate", "opt-in"), "enabled");
    controls
        .patch(
            &id,
            toggle(revision, "stream-line-repeat", "notice", false),
            3,
        )
        .await
        .unwrap();
    assert_eq!(
        reason(&controls, &id, "stream-line-repeat", "notice"),
        "action-disabled"
    );
}

#[tokio::test]
async fn rc_3_step_5_unavailable_gives_its_reason_or_executor_unavailable() {
    let id = session("s1");
    let controls = loaded(Arc::new(MemoryStore::new()), &id).await;
    let decision = controls.decide(&id, "watch", "gate", "with-reason");
    assert_eq!(decision, Decision::Unavailable("no-pruner".into()));
    assert_eq!(decision.as_str(), "no-pruner");
    assert_eq!(
        controls.decide(&id, "watch", "gate", "without-reason"),
        Decision::ExecutorUnavailable
    );
    assert_eq!(
        reason(&controls, &id, "gate", "without-reason"),
        "executor-unavailable"
    );
    // Selecting an unavailable action does not make it available.
    controls
        .patch(&id, toggle(0, "gate", "off-and-unavailable", true), 1)
        .await
        .unwrap();
    assert_eq!(
        reason(&controls, &id, "gate", "off-and-unavailable"),
        "executor-unavailable"
    );
}

#[tokio::test]
async fn rc_3_step_6_dependency_disabled_through_a_transitive_requires_chain() {
    let id = session("s1");
    let controls = loaded(Arc::new(MemoryStore::new()), &id).await;
    // a -> b -> c, all on.
    assert_eq!(reason(&controls, &id, "chain", "a"), "enabled");
    controls
        .patch(&id, toggle(0, "chain", "c", false), 5)
        .await
        .unwrap();
    assert_eq!(reason(&controls, &id, "chain", "c"), "action-disabled");
    assert_eq!(reason(&controls, &id, "chain", "b"), "dependency-disabled");
    assert_eq!(
        controls.decide(&id, "watch", "chain", "a"),
        Decision::DependencyDisabled
    );
    // A required action that is unavailable is off too.
    assert_eq!(reason(&controls, &id, "chain", "d"), "dependency-disabled");
    // The spec's own example: resume requires abort.
    controls
        .patch(&id, toggle(1, "stream-line-repeat", "abort", false), 5)
        .await
        .unwrap();
    assert_eq!(
        reason(&controls, &id, "stream-line-repeat", "resume"),
        "dependency-disabled"
    );
    assert_eq!(
        reason(&controls, &id, "stream-line-repeat", "notice"),
        "enabled"
    );
}

#[tokio::test]
async fn rc_3_step_7_everything_else_is_enabled() {
    let id = session("s1");
    let controls = loaded(Arc::new(MemoryStore::new()), &id).await;
    assert_eq!(
        all_reasons(&controls, &id),
        [
            "enabled",
            "enabled",
            "enabled",
            "enabled",
            "enabled",
            "enabled",
            "dependency-disabled",
            "executor-unavailable",
            "no-pruner",
            "executor-unavailable",
            "action-disabled",
            "action-disabled",
        ]
    );
    assert!(
        controls
            .decide(&id, "watch", "stream-line-repeat", "resume")
            .is_enabled()
    );
}

#[tokio::test]
async fn rc_4_toggle_survives_reopening_the_sqlite_file() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("ccare.db");
    let id = session("s1");
    {
        let store = Arc::new(SqliteStore::open(SqliteConfig::new(&path)).unwrap());
        let controls = loaded(Arc::clone(&store) as Arc<dyn Store>, &id).await;
        let revision = controls
            .patch(&id, toggle(0, "stream-line-repeat", "abort", false), 12)
            .await
            .unwrap();
        assert_eq!(revision, 1);
        controls
            .patch(&id, rule_op(1, "gate", PatchOp::Pause(true)), 20)
            .await
            .unwrap();
        store.close().unwrap();
    }
    let store = Arc::new(SqliteStore::open(SqliteConfig::new(&path)).unwrap());
    let controls = loaded(store, &id).await;
    assert_eq!(
        reason(&controls, &id, "stream-line-repeat", "abort"),
        "action-disabled"
    );
    assert_eq!(
        reason(&controls, &id, "stream-line-repeat", "resume"),
        "dependency-disabled"
    );
    assert_eq!(reason(&controls, &id, "gate", "opt-in"), "rule-paused");
    assert_eq!(controls.snapshot(&id).revision, 2);
    assert_eq!(controls.since_seq(&id, "watch", "stream-line-repeat"), 11);
    assert_eq!(controls.since_seq(&id, "watch", "gate"), 19);
    // Other sessions are independent.
    let other = session("s2");
    controls.load(&other).await.unwrap();
    assert_eq!(
        reason(&controls, &other, "stream-line-repeat", "abort"),
        "enabled"
    );
}

#[tokio::test]
async fn rc_2_stored_row_uses_the_spec_field_names() {
    let store = Arc::new(MemoryStore::new());
    let id = session("s1");
    let controls = loaded(Arc::clone(&store) as Arc<dyn Store>, &id).await;
    controls
        .patch(&id, toggle(0, "gate", "opt-in", true), 5)
        .await
        .unwrap();
    controls
        .patch(&id, rule_op(1, "chain", PatchOp::Pause(true)), 9)
        .await
        .unwrap();
    let entry = store.kv_get(CONTROLS_DOMAIN, "s1").await.unwrap().unwrap();
    assert_eq!(CONTROLS_DOMAIN, "context_care_controls");
    assert_eq!(entry.version, 2);
    let row: Value = serde_json::from_slice(&entry.value).unwrap();
    assert_eq!(
        row,
        json!({
            "revision": 2,
            "preferences": [
                {"sourceId": "watch", "ruleId": "gate", "paused": false,
                 "actions": {"opt-in": true}, "sinceSeq": 4, "epoch": 1},
                {"sourceId": "watch", "ruleId": "chain", "paused": true,
                 "actions": {}, "sinceSeq": 8, "epoch": 2},
            ]
        })
    );
}

#[tokio::test]
async fn rc_4_stale_revision_is_a_revision_conflict() {
    let id = session("s1");
    let controls = loaded(Arc::new(MemoryStore::new()), &id).await;
    controls
        .patch(&id, toggle(0, "gate", "opt-in", true), 1)
        .await
        .unwrap();
    let error = controls
        .patch(&id, toggle(0, "gate", "opt-in", false), 1)
        .await
        .unwrap_err();
    assert_eq!(
        error,
        ControlsError::RevisionConflict {
            session: id.clone(),
            expected: 0,
            current: 1,
        }
    );
    assert_eq!(error.code(), "revision-conflict");
    assert_eq!(reason(&controls, &id, "gate", "opt-in"), "enabled");
    assert_eq!(controls.snapshot(&id).revision, 1);
}

#[tokio::test]
async fn rc_4_another_writer_of_the_row_is_a_revision_conflict_and_reloads() {
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let id = session("s1");
    let first = loaded(Arc::clone(&store), &id).await;
    let second = loaded(Arc::clone(&store), &id).await;
    first
        .patch(&id, toggle(0, "gate", "opt-in", true), 1)
        .await
        .unwrap();
    let error = second
        .patch(&id, toggle(0, "chain", "a", false), 1)
        .await
        .unwrap_err();
    assert_eq!(
        error,
        ControlsError::RevisionConflict {
            session: id.clone(),
            expected: 0,
            current: 1,
        }
    );
    assert_eq!(reason(&second, &id, "gate", "opt-in"), "enabled");
    assert_eq!(
        second
            .patch(&id, toggle(1, "chain", "a", false), 1)
            .await
            .unwrap(),
        2
    );
}

#[tokio::test]
async fn rc_4_pause_keeps_selections_and_reset_clears_them_and_unpauses() {
    let id = session("s1");
    let controls = loaded(Arc::new(MemoryStore::new()), &id).await;
    let rule = "stream-line-repeat";
    let mut revision = controls
        .patch(&id, toggle(0, rule, "notice", false), 1)
        .await
        .unwrap();
    revision = controls
        .patch(&id, rule_op(revision, rule, PatchOp::Pause(true)), 1)
        .await
        .unwrap();
    assert_eq!(reason(&controls, &id, rule, "notice"), "rule-paused");
    assert_eq!(reason(&controls, &id, rule, "abort"), "rule-paused");
    revision = controls
        .patch(&id, rule_op(revision, rule, PatchOp::Pause(false)), 1)
        .await
        .unwrap();
    assert_eq!(reason(&controls, &id, rule, "notice"), "action-disabled");
    assert_eq!(reason(&controls, &id, rule, "abort"), "enabled");
    revision = controls
        .patch(&id, rule_op(revision, rule, PatchOp::Pause(true)), 1)
        .await
        .unwrap();
    revision = controls
        .patch(&id, rule_op(revision, rule, PatchOp::Reset), 1)
        .await
        .unwrap();
    assert_eq!(revision, 5);
    assert_eq!(reason(&controls, &id, rule, "notice"), "enabled");
    assert_eq!(reason(&controls, &id, rule, "abort"), "enabled");
    let snapshot = controls.snapshot(&id);
    let rule_snapshot = &snapshot.sources[0].rules[0];
    assert_eq!(rule_snapshot.id, rule);
    assert!(!rule_snapshot.paused);
    assert!(rule_snapshot.actions.iter().all(|action| action.selected));
}

#[tokio::test]
async fn rc_4_unknown_rule_unknown_action_and_read_only_source() {
    let id = session("s1");
    let controls = loaded(Arc::new(MemoryStore::new()), &id).await;
    controls
        .register(ControlSource {
            read_only: true,
            ..ControlSource::new("legacy", vec![ControlRule::new("r", vec![action("x")])])
        })
        .unwrap();
    let error = controls
        .patch(&id, rule_op(0, "nope", PatchOp::Reset), 1)
        .await
        .unwrap_err();
    assert_eq!(
        error,
        ControlsError::RuleUnavailable {
            source_id: "watch".to_owned(),
            rule_id: "nope".to_owned(),
        }
    );
    assert_eq!(error.code(), "rule-unavailable");
    let error = controls
        .patch(&id, toggle(0, "gate", "nope", true), 1)
        .await
        .unwrap_err();
    assert_eq!(
        error,
        ControlsError::ActionUnavailable {
            source_id: "watch".to_owned(),
            rule_id: "gate".to_owned(),
            action_id: "nope".to_owned(),
        }
    );
    assert_eq!(error.code(), "action-unavailable");
    let read_only = Patch {
        revision: 0,
        source_id: "legacy".to_owned(),
        rule_id: "r".to_owned(),
        op: PatchOp::Pause(true),
    };
    let error = controls.patch(&id, read_only, 1).await.unwrap_err();
    assert_eq!(
        error,
        ControlsError::ReadOnly {
            source_id: "legacy".to_owned()
        }
    );
    assert_eq!(error.code(), "rule-unavailable");
    assert_eq!(controls.snapshot(&id).revision, 0);
    // A read-only source still decides normally.
    assert_eq!(controls.decide(&id, "legacy", "r", "x"), Decision::Enabled);
}

#[test]
fn rc_4_a_patch_request_carries_exactly_one_of_toggle_pause_reset() {
    let parse =
        |body: Value| Patch::try_from(serde_json::from_value::<PatchRequest>(body).unwrap());
    assert_eq!(
        parse(json!({"revision": 3, "sourceId": "watch", "ruleId": "gate",
                     "actionId": "opt-in", "enabled": true}))
        .unwrap(),
        toggle(3, "gate", "opt-in", true)
    );
    assert_eq!(
        parse(json!({"revision": 0, "sourceId": "watch", "ruleId": "gate", "paused": false}))
            .unwrap(),
        rule_op(0, "gate", PatchOp::Pause(false))
    );
    assert_eq!(
        parse(json!({"revision": 0, "sourceId": "watch", "ruleId": "gate", "reset": true}))
            .unwrap(),
        rule_op(0, "gate", PatchOp::Reset)
    );
    for body in [
        json!({"revision": 0, "sourceId": "watch", "ruleId": "gate"}),
        json!({"revision": 0, "sourceId": "watch", "ruleId": "gate", "reset": false}),
        json!({"revision": 0, "sourceId": "watch", "ruleId": "gate", "actionId": "x"}),
        json!({"revision": 0, "sourceId": "watch", "ruleId": "gate", "enabled": true}),
        json!({"revision": 0, "sourceId": "watch", "ruleId": "gate", "paused": true, "reset": true}),
        json!({"revision": 0, "sourceId": "watch", "ruleId": "gate",
               "actionId": "x", "enabled": true, "paused": true}),
    ] {
        let error = parse(body.clone()).unwrap_err();
        assert_eq!(error.code(), "invalid-patch", "{body}");
    }
}

#[tokio::test]
async fn rc_4_results_become_visible_only_after_the_store_acknowledges() {
    let store = Arc::new(FailingStore::default());
    let id = session("s1");
    let controls = loaded(Arc::clone(&store) as Arc<dyn Store>, &id).await;
    store.hold_kv_writes();
    let cas_called = store.kv_write_called();
    let pending = tokio::spawn({
        let controls = controls.clone();
        let id = id.clone();
        async move {
            controls
                .patch(&id, toggle(0, "stream-line-repeat", "notice", false), 4)
                .await
        }
    });
    cas_called.await;
    assert_eq!(
        reason(&controls, &id, "stream-line-repeat", "notice"),
        "enabled"
    );
    assert_eq!(controls.snapshot(&id).revision, 0);
    assert_eq!(controls.since_seq(&id, "watch", "stream-line-repeat"), -1);
    store.release_kv_writes();
    assert_eq!(pending.await.unwrap().unwrap(), 1);
    assert_eq!(
        reason(&controls, &id, "stream-line-repeat", "notice"),
        "action-disabled"
    );
}

#[tokio::test]
async fn rc_4_patches_of_one_session_are_serial() {
    let id = session("s1");
    let controls = loaded(Arc::new(MemoryStore::new()), &id).await;
    let tasks: Vec<_> = (0..8)
        .map(|_| {
            let controls = controls.clone();
            let id = id.clone();
            tokio::spawn(async move {
                controls
                    .patch(&id, toggle(0, "gate", "opt-in", true), 1)
                    .await
            })
        })
        .collect();
    let mut outcomes = Vec::new();
    for task in tasks {
        outcomes.push(task.await.unwrap().map_err(|error| error.code()));
    }
    assert_eq!(outcomes.iter().filter(|outcome| outcome.is_ok()).count(), 1);
    assert!(
        outcomes
            .iter()
            .all(|outcome| matches!(outcome, Ok(1) | Err("revision-conflict")))
    );
}

#[tokio::test]
async fn rc_5_since_seq_is_the_session_seq_minus_one_at_the_last_patch() {
    let id = session("s1");
    let controls = loaded(Arc::new(MemoryStore::new()), &id).await;
    assert_eq!(controls.since_seq(&id, "watch", "gate"), -1);
    controls
        .patch(&id, toggle(0, "gate", "opt-in", true), 42)
        .await
        .unwrap();
    assert_eq!(controls.since_seq(&id, "watch", "gate"), 41);
    assert_eq!(controls.since_seq(&id, "watch", "chain"), -1);
    controls
        .patch(&id, rule_op(1, "chain", PatchOp::Reset), 0)
        .await
        .unwrap();
    assert_eq!(controls.since_seq(&id, "watch", "chain"), -1);
    controls
        .patch(&id, rule_op(2, "gate", PatchOp::Pause(true)), 50)
        .await
        .unwrap();
    assert_eq!(controls.since_seq(&id, "watch", "gate"), 49);
    assert_eq!(
        controls.since_seq(&session("unloaded"), "watch", "gate"),
        -1
    );
}

#[tokio::test]
async fn rc_6_a_failed_save_turns_the_session_off_until_a_save_succeeds() {
    let store = Arc::new(FailingStore::default());
    let id = session("s1");
    let other = session("s2");
    let controls = loaded(Arc::clone(&store) as Arc<dyn Store>, &id).await;
    controls.load(&other).await.unwrap();
    controls
        .patch(&id, toggle(0, "gate", "opt-in", true), 3)
        .await
        .unwrap();
    let before = all_reasons(&controls, &id);

    store.fail(Fault::kv_writes("disk unplugged"));
    let error = controls
        .patch(&id, toggle(1, "stream-line-repeat", "notice", false), 9)
        .await
        .unwrap_err();
    assert_eq!(error.code(), "storage-unavailable");
    assert!(matches!(
        &error,
        ControlsError::StorageUnavailable { session, message }
            if session == &id && message.contains("disk unplugged")
    ));
    assert!(
        all_reasons(&controls, &id)
            .iter()
            .all(|reason| reason == "storage-unavailable")
    );
    let snapshot = controls.snapshot(&id);
    assert_eq!(snapshot.revision, 1);
    assert!(snapshot.storage_error.unwrap().contains("disk unplugged"));
    assert!(controls.epoch(&id).ends_with(":1:1"));
    // Other sessions are unaffected.
    assert_eq!(all_reasons(&controls, &other)[0], "enabled");
    // A successful read does not clear a failed save.
    controls.load(&id).await.unwrap();
    assert_eq!(
        reason(&controls, &id, "gate", "opt-in"),
        "storage-unavailable"
    );

    store.heal();
    let revision = controls
        .patch(&id, toggle(1, "stream-line-repeat", "notice", false), 9)
        .await
        .unwrap();
    assert_eq!(revision, 2);
    assert_eq!(controls.snapshot(&id).storage_error, None);
    assert!(controls.epoch(&id).ends_with(":2:0"));
    let mut expected = before;
    expected[0] = "action-disabled".to_owned();
    assert_eq!(all_reasons(&controls, &id), expected);
}

#[tokio::test]
async fn rc_6_a_failed_load_turns_the_session_off_until_a_read_succeeds() {
    let store = Arc::new(FailingStore::default());
    let id = session("s1");
    let controls = Controls::new(Arc::clone(&store) as Arc<dyn Store>);
    controls.register(watch_source()).unwrap();
    store.fail(Fault::kv_reads("disk unplugged"));
    let error = controls.load(&id).await.unwrap_err();
    assert_eq!(error.code(), "storage-unavailable");
    assert_eq!(
        reason(&controls, &id, "stream-line-repeat", "notice"),
        "storage-unavailable"
    );
    // A patch rereads first, and fails the same way without writing.
    let error = controls
        .patch(&id, toggle(0, "gate", "opt-in", true), 1)
        .await
        .unwrap_err();
    assert_eq!(error.code(), "storage-unavailable");
    store.heal();
    assert_eq!(
        controls
            .patch(&id, toggle(0, "gate", "opt-in", true), 1)
            .await
            .unwrap(),
        1
    );
    assert_eq!(reason(&controls, &id, "gate", "opt-in"), "enabled");
}

#[tokio::test]
async fn rc_6_a_damaged_row_is_storage_unavailable() {
    let store = Arc::new(MemoryStore::new());
    store
        .kv_cas(CONTROLS_DOMAIN, "s1", None, Some(b"not json".to_vec()))
        .await
        .unwrap();
    let id = session("s1");
    let controls = Controls::new(Arc::clone(&store) as Arc<dyn Store>);
    controls.register(watch_source()).unwrap();
    let error = controls.load(&id).await.unwrap_err();
    assert!(matches!(
        error,
        ControlsError::StorageUnavailable { ref message, .. } if message.contains("damaged")
    ));
    assert_eq!(
        reason(&controls, &id, "gate", "opt-in"),
        "storage-unavailable"
    );
}

#[tokio::test]
async fn rc_7_epoch_changes_with_every_patch_failure_recovery_and_catalog_change() {
    let store = Arc::new(FailingStore::default());
    let id = session("s1");
    let controls = Controls::new(Arc::clone(&store) as Arc<dyn Store>);
    assert_eq!(controls.epoch(&id), "0:0:1");
    controls.register(watch_source()).unwrap();
    assert_eq!(controls.epoch(&id), "1:0:1");
    controls.load(&id).await.unwrap();
    let loaded_epoch = controls.epoch(&id);
    assert!(loaded_epoch.ends_with(":0:0"), "{loaded_epoch}");
    // Reloading an unchanged row changes nothing.
    controls.load(&id).await.unwrap();
    assert_eq!(controls.epoch(&id), loaded_epoch);

    let mut seen = vec![loaded_epoch];
    controls
        .patch(&id, toggle(0, "gate", "opt-in", true), 1)
        .await
        .unwrap();
    seen.push(controls.epoch(&id));
    store.fail(Fault::kv_writes("disk unplugged"));
    controls
        .patch(&id, toggle(1, "gate", "opt-in", false), 1)
        .await
        .unwrap_err();
    seen.push(controls.epoch(&id));
    store.heal();
    controls
        .patch(&id, toggle(1, "gate", "opt-in", false), 1)
        .await
        .unwrap();
    seen.push(controls.epoch(&id));
    controls
        .register(ControlSource::new(
            "extra",
            vec![ControlRule::new("r", vec![action("x")])],
        ))
        .unwrap();
    seen.push(controls.epoch(&id));
    controls.unregister("extra");
    seen.push(controls.epoch(&id));
    let generations: Vec<u64> = seen
        .iter()
        .map(|epoch| epoch.split(':').next().unwrap().parse().unwrap())
        .collect();
    assert!(
        generations.windows(2).all(|pair| pair[0] < pair[1]),
        "{seen:?}"
    );
    let tails: Vec<&str> = seen
        .iter()
        .map(|epoch| epoch.split_once(':').unwrap().1)
        .collect();
    assert_eq!(tails, ["0:0", "1:0", "1:1", "2:0", "2:0", "2:0"]);
    controls.close();
    assert!(controls.epoch(&id).ends_with(":2:1"));
}

#[tokio::test]
async fn rc_9_snapshot_json_for_one_session() {
    let id = session("s1");
    let controls = Controls::new(Arc::new(MemoryStore::new()));
    controls
        .register(ControlSource {
            plugin: Some("watch".to_owned()),
            ..ControlSource::new(
                "watch",
                vec![ControlRule::new(
                    "stream-line-repeat",
                    vec![
                        action("notice"),
                        action("abort"),
                        requiring("resume", &["abort"]),
                    ],
                )],
            )
        })
        .unwrap();
    controls
        .register(ControlSource::new(
            "contextNotices:legacy",
            vec![ControlRule::new(
                "pressure",
                vec![ControlAction {
                    available: false,
                    reason: Some("no-executor".to_owned()),
                    ..action("notice")
                }],
            )],
        ))
        .unwrap();
    controls.load(&id).await.unwrap();
    controls
        .patch(&id, toggle(0, "stream-line-repeat", "abort", false), 8)
        .await
        .unwrap();
    let snapshot = serde_json::to_value(controls.snapshot(&id)).unwrap();
    assert_eq!(
        snapshot,
        json!({
            "sessionId": "s1",
            "revision": 1,
            "sources": [
                {
                    "sourceId": "contextNotices:legacy",
                    "plugin": null,
                    "readOnly": false,
                    "rules": [{
                        "id": "pressure",
                        "paused": false,
                        "actions": [{
                            "id": "notice", "defaultEnabled": true, "available": false,
                            "requires": [], "selected": true, "enabled": false,
                            "reason": "no-executor"
                        }]
                    }]
                },
                {
                    "sourceId": "watch",
                    "plugin": "watch",
                    "readOnly": false,
                    "rules": [{
                        "id": "stream-line-repeat",
                        "paused": false,
                        "actions": [
                            {"id": "notice", "defaultEnabled": true, "available": true,
                             "requires": [], "selected": true, "enabled": true,
                             "reason": "enabled"},
                            {"id": "abort", "defaultEnabled": true, "available": true,
                             "requires": [], "selected": false, "enabled": false,
                             "reason": "action-disabled"},
                            {"id": "resume", "defaultEnabled": true, "available": true,
                             "requires": ["abort"], "selected": true, "enabled": false,
                             "reason": "dependency-disabled"}
                        ]
                    }]
                }
            ]
        })
    );
    // A session that is not loaded shows why it is off.
    let unloaded = serde_json::to_value(controls.snapshot(&session("s2"))).unwrap();
    assert_eq!(unloaded["revision"], json!(0));
    assert_eq!(unloaded["storageError"], json!("controls not loaded"));
    assert_eq!(
        unloaded["sources"][1]["rules"][0]["actions"][0]["reason"],
        json!("storage-unavailable")
    );
}

#[tokio::test]
async fn rc_4_close_makes_patches_and_loads_fail_with_controls_closed() {
    let id = session("s1");
    let controls = loaded(Arc::new(MemoryStore::new()), &id).await;
    let clone = controls.clone();
    clone.close();
    let error = controls
        .patch(&id, toggle(0, "gate", "opt-in", true), 1)
        .await
        .unwrap_err();
    assert_eq!(error, ControlsError::ControlsClosed);
    assert_eq!(error.code(), "controls-closed");
    assert_eq!(
        controls.load(&id).await.unwrap_err(),
        ControlsError::ControlsClosed
    );
    assert_eq!(
        controls.snapshot(&id).storage_error.as_deref(),
        Some("controls are closed")
    );
}

#[tokio::test]
async fn unload_forgets_the_session_until_loaded_again() {
    let id = session("s1");
    let controls = loaded(Arc::new(MemoryStore::new()), &id).await;
    controls
        .patch(&id, toggle(0, "gate", "opt-in", true), 1)
        .await
        .unwrap();
    controls.unload(&id);
    assert_eq!(
        reason(&controls, &id, "gate", "opt-in"),
        "storage-unavailable"
    );
    controls.load(&id).await.unwrap();
    assert_eq!(reason(&controls, &id, "gate", "opt-in"), "enabled");
}

fn register_error(source: ControlSource) -> ControlsError {
    Controls::new(Arc::new(MemoryStore::new()))
        .register(source)
        .unwrap_err()
}

fn one_rule(actions: Vec<ControlAction>) -> ControlSource {
    ControlSource::new("src", vec![ControlRule::new("rule", actions)])
}

#[test]
fn rc_1_catalog_rejects_duplicates() {
    let controls = Controls::new(Arc::new(MemoryStore::new()));
    controls.register(watch_source()).unwrap();
    let error = controls.register(watch_source()).unwrap_err();
    assert_eq!(
        error,
        ControlsError::DuplicateSource {
            source_id: "watch".to_owned()
        }
    );
    assert_eq!(error.code(), "duplicate-source");
    assert_eq!(
        register_error(ControlSource::new(
            "src",
            vec![
                ControlRule::new("rule", vec![action("a")]),
                ControlRule::new("rule", vec![action("b")]),
            ],
        )),
        ControlsError::DuplicateRule {
            source_id: "src".to_owned(),
            rule_id: "rule".to_owned(),
        }
    );
    assert_eq!(
        register_error(one_rule(vec![action("a"), action("b"), action("a")])),
        ControlsError::DuplicateAction {
            source_id: "src".to_owned(),
            rule_id: "rule".to_owned(),
            action_id: "a".to_owned(),
        }
    );
    // The same action id in two rules is fine.
    Controls::new(Arc::new(MemoryStore::new()))
        .register(ControlSource::new(
            "src",
            vec![
                ControlRule::new("one", vec![action("notice")]),
                ControlRule::new("two", vec![action("notice")]),
            ],
        ))
        .unwrap();
}

#[test]
fn rc_1_catalog_rejects_unknown_and_cyclic_requires() {
    let error = register_error(one_rule(vec![action("a"), requiring("b", &["zzz"])]));
    assert_eq!(
        error,
        ControlsError::UnknownRequires {
            source_id: "src".to_owned(),
            rule_id: "rule".to_owned(),
            action_id: "b".to_owned(),
            required: "zzz".to_owned(),
        }
    );
    assert_eq!(error.code(), "unknown-requires");
    let error = register_error(one_rule(vec![
        action("x"),
        requiring("a", &["b"]),
        requiring("b", &["c"]),
        requiring("c", &["a"]),
    ]));
    assert_eq!(
        error,
        ControlsError::CyclicRequires {
            source_id: "src".to_owned(),
            rule_id: "rule".to_owned(),
            cycle: vec!["a".into(), "b".into(), "c".into(), "a".into()],
        }
    );
    assert_eq!(error.code(), "cyclic-requires");
    assert_eq!(
        error.to_string(),
        "control rule 'src.rule': cyclic requires a -> b -> c -> a"
    );
    assert_eq!(
        register_error(one_rule(vec![requiring("self", &["self"])])),
        ControlsError::CyclicRequires {
            source_id: "src".to_owned(),
            rule_id: "rule".to_owned(),
            cycle: vec!["self".into(), "self".into()],
        }
    );
    // A diamond is not a cycle.
    Controls::new(Arc::new(MemoryStore::new()))
        .register(one_rule(vec![
            requiring("top", &["left", "right"]),
            requiring("left", &["bottom"]),
            requiring("right", &["bottom"]),
            action("bottom"),
        ]))
        .unwrap();
}

#[test]
fn rc_1_catalog_rejects_ids_outside_1_to_256_and_rules_without_actions() {
    let error = register_error(ControlSource::new("", vec![]));
    assert_eq!(
        error,
        ControlsError::InvalidId {
            what: "source",
            id: String::new(),
        }
    );
    assert_eq!(error.code(), "invalid-control-id");
    let long = "r".repeat(257);
    assert_eq!(
        register_error(ControlSource::new(
            "src",
            vec![ControlRule::new(long.clone(), vec![action("a")])],
        )),
        ControlsError::InvalidId {
            what: "rule",
            id: long,
        }
    );
    // Lengths count UTF-16 code units: 128 emoji are 256 units, 129 are too many.
    let fits = "😀".repeat(128);
    Controls::new(Arc::new(MemoryStore::new()))
        .register(one_rule(vec![action(&fits)]))
        .unwrap();
    let too_long = "😀".repeat(129);
    assert_eq!(
        register_error(one_rule(vec![action(&too_long)])),
        ControlsError::InvalidId {
            what: "action",
            id: too_long,
        }
    );
    assert_eq!(
        register_error(one_rule(vec![requiring("a", &[""])])),
        ControlsError::InvalidId {
            what: "requires",
            id: String::new(),
        }
    );
    let error = register_error(one_rule(vec![]));
    assert_eq!(
        error,
        ControlsError::MissingActions {
            source_id: "src".to_owned(),
            rule_id: "rule".to_owned(),
        }
    );
    assert_eq!(error.code(), "missing-actions");
}
