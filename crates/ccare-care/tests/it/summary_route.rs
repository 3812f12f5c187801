//! The summary route (CC-SUM-1, host H-LLM-2): resolved in the order the plugin's
//! `summary` table → `[agent] compaction_model` → the conversation route, read back from
//! where each requested summary really went; a half-specified table refused at mount
//! naming the missing key; and the controls availability of `maintenance.summary`
//! (CC-CTL-1: available iff a summary route resolves).

use serde_json::{Value, json};

use crate::rest::{SUMMARY, lorem, note, rest_call};
use crate::rig::{Rig, rig_with_compaction_route};

/// One turn that leaves history behind, then a requested rest whose summary the script
/// answers (expecting purpose `compaction`).
fn rest_script() -> String {
    [
        r#"{"text": "read it"}"#.to_owned(),
        rest_call(json!({"note": note(1200)})),
        json!({"expect": {"purpose": "compaction"}, "text": SUMMARY}).to_string(),
        r#"{"text": "continuing"}"#.to_owned(),
    ]
    .join("\n")
}

/// Runs the rest and returns the route (`provider/model`) of every summary request.
async fn summary_routes(rig: &Rig) -> Vec<String> {
    rig.turn(&lorem(400)).await;
    rig.turn("now rest").await;
    assert_eq!(
        rig.compaction_kinds(),
        ["compaction/start", "compaction/summary", "compaction/end"],
        "the summary committed"
    );
    rig.script
        .requests()
        .iter()
        .filter(|request| request.config.purpose == ccare_llm::Purpose::Compaction)
        .map(|request| request.route.name())
        .collect()
}

fn config(summary: Option<Value>) -> Value {
    let mut config = json!({"retain_tokens": 100});
    if let Some(summary) = summary {
        config["summary"] = summary;
    }
    config
}

#[tokio::test]
async fn cc_sum_1_an_explicit_summary_table_wins_over_the_agent_compaction_model() {
    let rig = rig_with_compaction_route(
        &rest_script(),
        config(Some(json!({"provider": "s", "model": "mid"}))),
        Some("s/tiny"),
        true,
    )
    .await
    .unwrap();
    assert_eq!(summary_routes(&rig).await, ["s/mid"]);
}

#[tokio::test]
async fn cc_sum_1_without_a_table_the_agent_compaction_model_routes_the_summary() {
    let rig = rig_with_compaction_route(&rest_script(), config(None), Some("s/tiny"), true)
        .await
        .unwrap();
    assert_eq!(summary_routes(&rig).await, ["s/tiny"]);
}

#[tokio::test]
async fn cc_sum_1_with_neither_the_summary_goes_to_the_conversation_route() {
    let rig = rig_with_compaction_route(&rest_script(), config(None), None, true)
        .await
        .unwrap();
    assert_eq!(summary_routes(&rig).await, ["s/small"]);
}

#[tokio::test]
async fn cc_sum_1_a_half_specified_summary_table_is_refused_naming_the_missing_key() {
    for (table, message) in [
        (
            json!({"model": "mid"}),
            "context-care: summary.model is set without summary.provider; set both (the \
             summary route is \"<provider>/<model>\") or neither",
        ),
        (
            json!({"provider": "s", "max_tokens": 500}),
            "context-care: summary.provider is set without summary.model; set both (the \
             summary route is \"<provider>/<model>\") or neither",
        ),
    ] {
        let error = rig_with_compaction_route("", config(Some(table)), Some("s/tiny"), true)
            .await
            .err()
            .expect("a half-specified table must not mount");
        assert_eq!(error, message);
    }
    // `max_tokens` / `max_retries` alone are limits, not a route: the table mounts.
    rig_with_compaction_route(
        "",
        config(Some(json!({"max_tokens": 500}))),
        Some("s/tiny"),
        true,
    )
    .await
    .unwrap();
}

#[tokio::test]
async fn cc_sum_1_a_summary_table_naming_an_unconfigured_provider_is_refused() {
    let error = rig_with_compaction_route(
        "",
        config(Some(json!({"provider": "elsewhere", "model": "m"}))),
        None,
        true,
    )
    .await
    .err()
    .expect("an unknown provider must not mount");
    assert!(
        error.starts_with("context-care: summary.provider: "),
        "{error}"
    );
    assert!(error.contains("\"elsewhere\""), "{error}");
}

async fn summary_decision(rig: &Rig) -> String {
    let controls = rig.host.controls();
    controls.load(rig.session.id()).await.unwrap();
    controls
        .decide(rig.session.id(), "context-care", "maintenance", "summary")
        .as_str()
        .to_owned()
}

#[tokio::test]
async fn cc_ctl_1_maintenance_summary_is_unavailable_without_a_summary_route() {
    // No conversation route handed to the plugin, no table, no compaction model.
    let rig = rig_with_compaction_route("", config(None), None, false)
        .await
        .unwrap();
    assert_eq!(summary_decision(&rig).await, "no-summary-route");
    // What the UI shows (RC-9): not available, with the reason.
    let snapshot = rig.host.controls().snapshot(rig.session.id());
    let action = snapshot
        .sources
        .iter()
        .find(|source| source.source_id == "context-care")
        .and_then(|source| source.rules.iter().find(|rule| rule.id == "maintenance"))
        .and_then(|rule| rule.actions.iter().find(|action| action.id == "summary"))
        .unwrap();
    assert_eq!(
        (action.available, action.enabled, action.reason.as_str()),
        (false, false, "no-summary-route")
    );
    // Pruning needs no route: still enabled.
    assert_eq!(
        rig.host
            .controls()
            .decide(rig.session.id(), "context-care", "maintenance", "prune")
            .as_str(),
        "enabled"
    );
}

#[tokio::test]
async fn cc_ctl_1_maintenance_summary_is_available_when_a_summary_route_resolves() {
    for (summary, compaction, with_route, expected) in [
        (None, None, true, "enabled"),
        (None, Some("s/tiny"), true, "enabled"),
        (
            Some(json!({"provider": "s", "model": "mid"})),
            None,
            true,
            "enabled",
        ),
        // A route resolves, but no summary could be proven smaller without the
        // conversation route to price the request on.
        (None, Some("s/tiny"), false, "no-conversation-route"),
    ] {
        let rig = rig_with_compaction_route("", config(summary), compaction, with_route)
            .await
            .unwrap();
        assert_eq!(summary_decision(&rig).await, expected);
    }
}
