//! The `context-care` control source (spec CC-CTL-1..3): its rules and actions, and the
//! decisions it gives once registered with a missing summary provider.

use std::sync::Arc;

use ccare_agent::controls::{Controls, Patch, PatchOp};
use ccare_care::controls_catalog::context_care_catalog;
use ccare_core::SessionId;
use ccare_store::MemoryStore;

fn session(id: &str) -> SessionId {
    SessionId::new(id).unwrap()
}

#[test]
fn cc_ctl_1_context_care_catalog() {
    let catalog = context_care_catalog();
    assert_eq!(catalog.source_id, "context-care");
    assert_eq!(catalog.plugin.as_deref(), Some("context-care"));
    assert!(!catalog.read_only);
    let shape: Vec<(String, Vec<String>)> = catalog
        .rules
        .iter()
        .map(|rule| {
            (
                rule.id.clone(),
                rule.actions
                    .iter()
                    .map(|action| action.id.clone())
                    .collect(),
            )
        })
        .collect();
    let expected: Vec<(String, Vec<String>)> = [
        ("state", &["report", "advice"][..]),
        ("guidance-meaning", &["notice"]),
        ("guidance-capacity", &["notice"]),
        ("guidance-continuity", &["notice"]),
        ("guidance-handoff", &["notice"]),
        ("guidance-automatic", &["notice"]),
        ("guidance-labels", &["notice"]),
        ("guidance-pressure", &["notice"]),
        ("guidance-hesitation", &["notice"]),
        ("maintenance", &["prune", "summary"]),
        ("overflow", &["prune", "summary", "retry"]),
    ]
    .iter()
    .map(|(rule, actions)| {
        (
            (*rule).to_owned(),
            actions.iter().map(|action| (*action).to_owned()).collect(),
        )
    })
    .collect();
    assert_eq!(shape, expected);
    assert!(catalog.rules.iter().all(|rule| {
        rule.actions
            .iter()
            .all(|action| action.default_enabled && action.available && action.requires.is_empty())
    }));
}

#[tokio::test]
async fn cc_ctl_2_context_care_decisions_with_a_missing_summary_provider() {
    let id = session("s1");
    let mut catalog = context_care_catalog();
    let summary = catalog.action_mut("maintenance", "summary").unwrap();
    summary.available = false;
    summary.reason = Some("no-summary-provider".to_owned());
    assert!(catalog.action_mut("maintenance", "nope").is_none());
    let controls = Controls::new(Arc::new(MemoryStore::new()));
    controls.register(catalog).unwrap();
    controls.load(&id).await.unwrap();
    let decide = |rule: &str, action: &str| {
        controls
            .decide(&id, "context-care", rule, action)
            .as_str()
            .to_owned()
    };
    assert_eq!(decide("state", "report"), "enabled");
    assert_eq!(decide("maintenance", "prune"), "enabled");
    assert_eq!(decide("maintenance", "summary"), "no-summary-provider");
    assert_eq!(decide("overflow", "summary"), "enabled");
    let patch = Patch {
        revision: 0,
        source_id: "context-care".to_owned(),
        rule_id: "state".to_owned(),
        op: PatchOp::Toggle {
            action_id: "report".to_owned(),
            enabled: false,
        },
    };
    controls.patch(&id, patch, 7).await.unwrap();
    assert_eq!(decide("state", "report"), "action-disabled");
    assert_eq!(decide("state", "advice"), "enabled");
    // CC-CTL-3: a patch sets sinceSeq = session.seq - 1.
    assert_eq!(controls.since_seq(&id, "context-care", "state"), 6);
}
