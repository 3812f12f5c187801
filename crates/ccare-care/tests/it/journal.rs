//! The request journal (CC-JNL-1, CC-JNL-2) and the calibration it drives (CC-PRC-3),
//! read back from the SQLite file through a second store handle after real turns.

use ccare_core::kinds::TurnEndReason;
use serde_json::{Value, json};

use crate::rig::rig;

/// The one request record (maintenance records, e.g. of overflow recovery, aside).
fn only_record(records: &[(String, Value)]) -> (&str, &Value) {
    let calls: Vec<&(String, Value)> = records
        .iter()
        .filter(|(key, _)| key.starts_with("call_"))
        .collect();
    assert_eq!(calls.len(), 1, "{records:#?}");
    (calls[0].0.as_str(), &calls[0].1)
}

#[tokio::test]
async fn cc_jnl_2_a_completed_request_is_ready_dispatched_then_settled() {
    let rig = rig(
        r#"{"text": "one", "usage": {"input": 900, "cache_read": 100, "output": 12}}"#,
        json!({"quiet_start": false}),
        Some(16_000),
        true,
    )
    .await;
    assert_eq!(
        rig.turn("a short question").await,
        Some(TurnEndReason::Completed)
    );
    let records = rig.journal().await;
    let (key, record) = only_record(&records);
    let messages = rig.events("assistant/message");
    let (answer_seq, answer) = &messages[0];
    let call_id = answer["call_id"].as_str().unwrap();
    assert_eq!(key, format!("call_{call_id}"));
    assert_eq!(record["version"], 1);
    assert_eq!(record["kind"], "request");
    assert_eq!(record["sessionId"], rig.session.id().as_str());
    assert!(record["at"].as_i64().unwrap() > 0);
    let data = &record["data"];
    assert_eq!(data["callId"], call_id);
    assert_eq!(data["phase"], "settled");
    assert_eq!(data["purpose"], "conversation");
    assert_eq!(data["dispatched"], true);
    assert_eq!(data["dispatchOrder"], 1);
    assert_eq!(data["dispatchBasis"], "prepared-stream-handoff");
    assert_eq!(data["attemptId"], format!("{call_id}#1"));
    assert_eq!(data["outcome"], "completed");
    assert_eq!(data["eventSeq"], *answer_seq);
    assert_eq!(data["eventType"], "assistant/message");
    assert_eq!(
        data["usage"],
        json!({"inputTokens": 900, "cacheReadTokens": 100, "cacheWriteTokens": 0, "outputTokens": 12})
    );
    assert_eq!(data["route"]["provider"], "s");
    assert_eq!(data["route"]["model"], "small");
    // The journal was empty: the meter's own basis, scale 1 (CC-PRC-3 fallback).
    assert_eq!(
        data["pricingBasis"],
        json!({"kind": "heuristic", "textScale": 1.0})
    );
    let raw_text = data["rawInput"]["textTokens"].as_u64().unwrap();
    assert!(raw_text > 0);
    assert_eq!(data["rawInput"]["visualTokens"], 0);
    assert_eq!(data["inputTokens"], raw_text, "scale 1: Q is the raw text");
    assert_eq!(data["budget"]["hardInput"], 15_000);
    assert_eq!(data["assessment"]["phase"], "normal");
    assert_eq!(data["calibrationHeaderKey"].as_str().unwrap().len(), 64);
    assert_eq!(data["inputHash"].as_str().unwrap().len(), 64);
    // The prompt and the status notice of step 1: the surface the request was built on.
    let surface: Vec<u64> = rig
        .events("user/message")
        .iter()
        .map(|(seq, _)| *seq)
        .collect();
    assert_eq!(surface.len(), 2);
    assert_eq!(data["sourceSeqs"], json!(surface));
    assert!(data["logRevision"].as_u64().unwrap() > surface[1]);
}

#[tokio::test]
async fn cc_prc_3_the_next_request_is_priced_on_the_previous_requests_real_usage() {
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
    rig.turn("a short question").await;
    rig.turn("and another one").await;
    let records = rig.journal().await;
    assert_eq!(records.len(), 2);
    let first = records
        .iter()
        .map(|(_, record)| &record["data"])
        .find(|data| data["dispatchOrder"] == 1)
        .unwrap();
    let second = records
        .iter()
        .map(|(_, record)| &record["data"])
        .find(|data| data["dispatchOrder"] == 2)
        .unwrap();
    let raw_first = first["rawInput"]["textTokens"].as_u64().unwrap();
    let basis = &second["pricingBasis"];
    assert_eq!(basis["kind"], "usage-calibrated");
    assert_eq!(basis["source"], "actual-request-journal");
    assert_eq!(basis["sampleCallId"], first["callId"]);
    assert_eq!(basis["sampleSeq"], first["eventSeq"]);
    let scale = basis["textScale"].as_f64().unwrap();
    assert!(
        (scale - 5000.0 / raw_first as f64).abs() < 1e-9,
        "prompt 4900 + 100 cache read over {raw_first} raw tokens, got {scale}"
    );
    // Acceptance: after one real usage sample, the estimate of that same request is
    // within 1% of the provider's count (here exact: prompt 4900 + 100 cache read).
    let estimate = raw_first as f64 * scale;
    assert!((estimate - 5000.0).abs() / 5000.0 < 0.01, "{estimate}");
    let raw_second = second["rawInput"]["textTokens"].as_u64().unwrap();
    assert_eq!(
        second["inputTokens"],
        (raw_second as f64 * 5000.0 / raw_first as f64).ceil() as u64
    );
    assert_eq!(
        second["calibrationHeaderKey"],
        first["calibrationHeaderKey"]
    );
}

#[tokio::test]
async fn cc_jnl_2_a_refused_request_is_journaled_not_dispatched() {
    let rig = rig(r#"{"text": "never"}"#, json!({}), Some(4_000), true).await;
    let end = rig.turn(&"lorem ipsum dolor sit amet ".repeat(600)).await;
    let Some(TurnEndReason::Error { failure }) = end else {
        panic!("{end:?}")
    };
    let failure = serde_json::to_value(&failure).unwrap();
    assert_eq!(failure["code"], "REQUEST_BUDGET_EXCEEDED");
    let records = rig.journal().await;
    let (_, record) = only_record(&records);
    let data = &record["data"];
    assert_eq!(data["outcome"], "not-dispatched");
    assert_eq!(data["phase"], "failed");
    assert_eq!(data["failure"]["code"], "REQUEST_BUDGET_EXCEEDED");
    assert_eq!(data["failure"]["message"], failure["message"]);
    assert_eq!(data["assessment"]["phase"], "hard");
    assert!(data.get("dispatched").is_none(), "{data}");
    assert!(rig.script.requests().is_empty());
}

#[tokio::test]
async fn cc_jnl_2_a_provider_failure_settles_as_failed_on_the_attempt_event() {
    let rig = rig(
        r#"{"failure": {"code": "INVALID_REQUEST", "message": "bad request"}}"#,
        json!({}),
        Some(16_000),
        true,
    )
    .await;
    let end = rig.turn("a short question").await;
    assert!(matches!(end, Some(TurnEndReason::Error { .. })), "{end:?}");
    let records = rig.journal().await;
    let (_, record) = only_record(&records);
    let data = &record["data"];
    let attempts = rig.events("assistant/attempt");
    assert_eq!(data["dispatched"], true);
    assert_eq!(data["outcome"], "failed");
    assert_eq!(data["phase"], "failed");
    assert_eq!(data["eventType"], "assistant/attempt");
    assert_eq!(data["eventSeq"], attempts[0].0);
}

#[tokio::test]
async fn cc_prc_3_a_failed_request_never_calibrates() {
    let rig = rig(
        concat!(
            r#"{"failure": {"code": "INVALID_REQUEST", "message": "bad request"}}"#,
            "\n",
            r#"{"text": "two"}"#
        ),
        json!({}),
        Some(16_000),
        true,
    )
    .await;
    rig.turn("first").await;
    rig.turn("second").await;
    let records = rig.journal().await;
    let second = records
        .iter()
        .map(|(_, record)| &record["data"])
        .find(|data| data["dispatchOrder"] == 2)
        .unwrap();
    assert_eq!(
        second["pricingBasis"],
        json!({"kind": "uncalibrated-estimate", "textScale": 1.0})
    );
}

/// A settled conversation request of `session` as a store from before the session
/// index holds it: key `call_<call>`, no index row.
fn legacy_request(session: &str, call: &str, at: i64, prompt: u64) -> Value {
    json!({
        "version": 1,
        "sessionId": session,
        "kind": "request",
        "at": at,
        "data": {
            "callId": call,
            "purpose": "conversation",
            "rawInput": {"textTokens": 200, "visualTokens": 0},
            "toolsTokens": 0,
            "inputTokens": 200,
            "calibrationHeaderKey": "legacy-header",
            "phase": "settled",
            "dispatched": true,
            "dispatchOrder": at,
            "outcome": "completed",
            "eventSeq": at,
            "eventType": "assistant/message",
            "usage": {"inputTokens": prompt},
        },
    })
}

/// Writes `rows` into the journal's records table of the rig's SQLite file through a
/// second store handle, as an earlier version of ccare left them.
async fn store_legacy(rig: &crate::rig::Rig, rows: &[(String, Value)]) {
    use std::sync::Arc;
    let store = rig.reopen_store();
    let domains =
        ccare_agent::domains::Domains::new(Arc::new(store) as Arc<dyn ccare_store::Store>);
    let domain = domains
        .open(
            ccare_agent::domains::DomainSpec::new("context_care_requests", 1)
                .table(ccare_agent::domains::TableSpec::new("records")),
            "an earlier ccare",
        )
        .await
        .unwrap();
    let table = domain.table("records").unwrap();
    for (key, value) in rows {
        table.put(key, value.clone()).unwrap();
    }
    domain.flush(None).await.unwrap();
}

/// The rig on a session an earlier process created: a first host creates it, a second
/// one (the rig's) opens it. A session this process created has no journal rows in the
/// store, so its first use reads none; one an earlier process left reads what the store
/// holds, as rows that process (or an earlier version) wrote.
async fn rig_on_earlier_session(script: &str, config: Value) -> crate::rig::Rig {
    let earlier = rig("", json!({}), Some(16_000), true).await;
    let crate::rig::Rig { dir, session, .. } = earlier;
    crate::rig::rig_in(
        dir,
        script,
        config,
        Some(16_000),
        true,
        Some(session.id()),
        ccare_agent::AgentOptions::new("s/small"),
    )
    .await
}

#[tokio::test]
async fn cc_jnl_1_records_stored_before_the_session_index_are_still_read() {
    let rig = rig_on_earlier_session("", json!({})).await;
    let own = rig.session.id().as_str().to_owned();
    let action = json!({
        "version": 1,
        "sessionId": own,
        "kind": "maintenance",
        "at": 5,
        "data": {"operationId": "op-legacy", "action": "prune", "reason": "automatic",
                 "phase": "completed", "outcome": "noop"},
    });
    let rows = vec![
        (
            "call_legacy-1".to_owned(),
            legacy_request(&own, "legacy-1", 3, 300),
        ),
        ("action_op-legacy".to_owned(), action.clone()),
        // Another session's: calibrated differently, never read for this one.
        (
            "call_other-1".to_owned(),
            legacy_request("other-session", "other-1", 9, 1_000),
        ),
        (
            "action_op-other".to_owned(),
            json!({
                "version": 1, "sessionId": "other-session", "kind": "maintenance", "at": 6,
                "data": {"operationId": "op-other", "action": "prune"},
            }),
        ),
    ];
    store_legacy(&rig, &rows).await;

    // Calibration reads the old request: scale (300 − 0) / 200.
    let report = rig.care.report(&rig.session).await.unwrap().unwrap();
    assert_eq!(report.calibration, "usage-calibrated");
    assert_eq!(report.text_scale, 1.5);
    // The UI's actions: the old one, and only this session's.
    let actions = rig.care.actions(&rig.session).await.unwrap().unwrap();
    let ids: Vec<&str> = actions.iter().map(|action| action.operation_id()).collect();
    assert_eq!(ids, ["op-legacy"]);
    assert_eq!(actions[0].data, action["data"]);
    // Nothing stored is lost: the records are where they were, now indexed.
    rig.care.report(&rig.session).await.unwrap().unwrap();
    let stored = rig.journal().await;
    for (key, value) in &rows {
        assert!(
            stored.contains(&(key.clone(), value.clone())),
            "{key}: {stored:#?}"
        );
    }
    assert_eq!(stored.len(), rows.len());
}

#[tokio::test]
async fn cc_jnl_1_journal_keep_keeps_each_sessions_newest_records() {
    let rig = rig_on_earlier_session(
        r#"{"text": "one", "usage": {"input": 900, "output": 12}}"#,
        json!({"journal_keep": 3}),
    )
    .await;
    let own = rig.session.id().as_str().to_owned();
    let mut rows: Vec<(String, Value)> = (1..=5)
        .map(|at| {
            (
                format!("call_own-{at}"),
                legacy_request(&own, &format!("own-{at}"), at, 300),
            )
        })
        .collect();
    rows.extend((1..=3).map(|at| {
        (
            format!("call_other-{at}"),
            legacy_request("other-session", &format!("other-{at}"), at, 300),
        )
    }));
    store_legacy(&rig, &rows).await;
    assert_eq!(
        rig.turn("a short question").await,
        Some(TurnEndReason::Completed)
    );
    let calls: Vec<String> = rig
        .journal()
        .await
        .into_iter()
        .map(|(key, _)| key)
        .filter(|key| key.starts_with("call_"))
        .collect();
    let call_id = rig.events("assistant/message")[0].1["call_id"]
        .as_str()
        .unwrap()
        .to_owned();
    // This session: the newest two old requests and the new one; the other session
    // is within the limit and keeps all three.
    let mut expected = vec![
        format!("call_{call_id}"),
        "call_other-1".to_owned(),
        "call_other-2".to_owned(),
        "call_other-3".to_owned(),
        "call_own-4".to_owned(),
        "call_own-5".to_owned(),
    ];
    expected.sort();
    assert_eq!(calls, expected);
}
