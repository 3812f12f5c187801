//! The mounted `context-care` plugin in real composition (SQLite store, scripted
//! provider, the agent loop): CC-BUD-6 — a request over the hard input budget never
//! reaches the provider and ends the turn with `REQUEST_BUDGET_EXCEEDED`.

use ccare_care::ContextCare;
use ccare_core::kinds::TurnEndReason;
use ccare_llm::script::ScriptProvider;
use serde_json::{Value, json};

use crate::rig::rig;

async fn run(prompt: &str, config: Value) -> (Option<TurnEndReason>, ScriptProvider, Vec<Value>) {
    let rig = rig("{\"text\": \"fits\"}", config, Some(4_000), false).await;
    let end = rig.turn(prompt).await;
    let attempts = rig
        .events("assistant/attempt")
        .into_iter()
        .map(|(_, data)| data)
        .collect();
    (end, rig.script.clone(), attempts)
}

#[tokio::test]
async fn cc_bud_6_a_request_over_the_hard_budget_never_leaves_the_machine() {
    let (end, script, attempts) = run(&"lorem ipsum dolor sit amet ".repeat(600), json!({})).await;
    let Some(TurnEndReason::Error { failure }) = end else {
        panic!("{end:?}")
    };
    let failure = serde_json::to_value(&failure).unwrap();
    assert_eq!(failure["code"], "REQUEST_BUDGET_EXCEEDED");
    let message = failure["message"].as_str().unwrap();
    assert!(
        message.starts_with("Request input ") && message.contains(" exceeds hard input budget "),
        "{message}"
    );
    assert!(
        script.requests().is_empty(),
        "the provider was never called"
    );
    assert_eq!(attempts.len(), 1);
    assert_eq!(attempts[0]["outcome"], "failed");
    assert_eq!(attempts[0]["failure"]["code"], "REQUEST_BUDGET_EXCEEDED");
}

#[tokio::test]
async fn cc_bud_6_a_request_within_the_budget_is_dispatched() {
    let (end, script, attempts) = run("a short question", json!({})).await;
    assert_eq!(end, Some(TurnEndReason::Completed));
    assert_eq!(script.requests().len(), 1);
    assert!(attempts.is_empty());
}

#[tokio::test]
async fn cc_cfg_1_a_bad_table_is_a_load_error_prefixed_with_the_plugin() {
    let rig = rig("", json!({}), None, false).await;
    assert!(rig.host.unmount("context-care"));
    let error = rig
        .host
        .mount(&ContextCare::default(), &json!({"budgetRatio": 0.5}))
        .unwrap_err();
    assert_eq!(
        error.to_string(),
        "context-care: unknown config budgetRatio"
    );
    assert!(rig.host.mounted().is_empty());
}

#[tokio::test]
async fn cc_bud_6_a6_the_terminal_error_carries_origin_budget_and_budget_kind() {
    let rig = rig("{\"text\": \"fits\"}", json!({}), Some(4_000), false).await;
    let end = rig.turn(&"lorem ipsum dolor sit amet ".repeat(600)).await;
    let Some(TurnEndReason::Error { failure }) = end else {
        panic!("{end:?}")
    };
    let failure = serde_json::to_value(&failure).unwrap();
    // The turn/end in the log, read back as stored.
    let stored = &rig.events("turn/end")[0].1["reason"];
    let (_, ready) = rig
        .journal()
        .await
        .into_iter()
        .find(|(key, _)| !key.starts_with("action_"))
        .unwrap();
    let budget = &ready["data"]["budget"];
    assert_eq!(budget["hardInput"], 3_000, "{budget}");
    let refusal = json!({"origin": "preflight", "budget": budget, "budgetKind": "physical"});
    assert_eq!(failure["refusal"], refusal, "{failure}");
    assert_eq!(stored["failure"]["refusal"], refusal, "{stored}");
    assert!(
        rig.script.requests().is_empty(),
        "the provider was never called"
    );
    let attempts = rig.events("assistant/attempt");
    assert_eq!(attempts[0].1["failure"]["refusal"], refusal);
    // The typed failure reads it back; an old failure without it still reads.
    let typed: ccare_core::LlmFailure = serde_json::from_value(failure.clone()).unwrap();
    let details = typed.refusal.unwrap();
    assert_eq!(details.origin, ccare_core::FailureOrigin::Preflight);
    assert_eq!(
        details.budget_kind,
        Some(ccare_core::RefusalBudgetKind::Physical)
    );
    let old: ccare_core::LlmFailure = serde_json::from_value(
        json!({"code": "REQUEST_BUDGET_EXCEEDED", "message": "Request input 9 exceeds hard input budget 8", "provider": "s", "model": "small"}),
    )
    .unwrap();
    assert_eq!(old.refusal, None);
}

/// A closed session's in-memory state (controller, price and memo caches) is dropped,
/// so a long-running server keeps state only for the sessions it drives; the session's
/// next use rebuilds it from the store, as a new process would.
#[tokio::test]
async fn a_closed_session_leaves_no_care_state_in_memory_and_comes_back_from_the_store() {
    let rig = rig(
        "{\"text\": \"one\"}\n{\"text\": \"two\"}",
        json!({}),
        None,
        true,
    )
    .await;
    assert_eq!(rig.turn("first").await, Some(TurnEndReason::Completed));
    assert_eq!(rig.care.sessions_in_memory(), Some(1));

    rig.sessions.close(rig.session.id()).await.unwrap();
    assert_eq!(rig.care.sessions_in_memory(), Some(0));

    assert_eq!(
        rig.turn_after_reopen("second").await,
        Some(TurnEndReason::Completed)
    );
    assert_eq!(rig.care.sessions_in_memory(), Some(1));
    assert_eq!(rig.script.requests().len(), 2);
    let requests = rig
        .journal()
        .await
        .into_iter()
        .filter(|(key, _)| key.starts_with("call_"))
        .count();
    assert_eq!(requests, 2, "both requests are journaled, across the close");
}

/// A closed session's journal records leave memory once their writes settled (a
/// server that starts a session per client conversation would otherwise keep every
/// record it ever wrote); its next use reads them back from the store: the next
/// request is priced on the first one's real usage (CC-PRC-3), and both records stay.
#[tokio::test]
async fn a_closed_sessions_journal_leaves_memory_and_its_next_request_reads_it_back() {
    let rig = rig(
        concat!(
            r#"{"text": "one", "usage": {"input": 4900, "cache_read": 100, "output": 12}}"#,
            "\n",
            r#"{"text": "two", "usage": {"input": 50, "output": 3}}"#
        ),
        json!({}),
        Some(16_000),
        true,
    )
    .await;
    assert_eq!(rig.turn("first").await, Some(TurnEndReason::Completed));
    // Its record and the record's index row.
    assert_eq!(rig.care.journal_rows_in_memory(), Some(2));

    rig.sessions.close(rig.session.id()).await.unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    while rig.care.journal_rows_in_memory() != Some(0) {
        assert!(
            std::time::Instant::now() < deadline,
            "still in memory: {:?}",
            rig.care.journal_rows_in_memory()
        );
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }

    assert_eq!(
        rig.turn_after_reopen("second").await,
        Some(TurnEndReason::Completed)
    );
    assert_eq!(rig.care.journal_rows_in_memory(), Some(4));
    let records = rig.journal().await;
    let data = |order: u64| {
        records
            .iter()
            .map(|(_, record)| &record["data"])
            .find(|data| data["dispatchOrder"] == order)
            .unwrap()
            .clone()
    };
    let (first, second) = (data(1), data(2));
    assert_eq!(first["phase"], "settled");
    assert_eq!(second["pricingBasis"]["kind"], "usage-calibrated");
    assert_eq!(second["pricingBasis"]["sampleCallId"], first["callId"]);
}
