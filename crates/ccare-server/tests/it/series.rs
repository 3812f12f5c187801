//! API-4 `GET /api/sessions/{id}/context/series` (for UI-7's charts) and the context
//! routes' schemas in the OpenAPI document: a session driven over HTTP until context
//! care compacts it on the fake provider's 16 000-token window, then its series checked
//! against the request journal as a second store handle reads it from the file, and
//! against the exported log.

use std::sync::Arc;

use ccare_agent::domains::{DomainSpec, Domains, TableSpec};
use ccare_fake_openai::{Reply, Script};
use ccare_store::{SqliteConfig, SqliteStore, Store};
use serde_json::{Value, json};

use crate::events::{Sse, create_session, export, export_events, prompt};
use crate::rig::{Rig, error_of};

/// The summary the fake model writes for a compaction request.
const SUMMARY: &str = "## Primary Request and Intent\n- read the seeded history\n## Key Technical Concepts\n(none)\n## Files and Code\n(none)\n## Errors and Fixes\n(none)\n## Pending Jobs\n(none)\n## Current Work\n- reading\n## Next Step\n- continue\n## Critical Context\n(none)";

/// A user message of roughly 2 000 tokens (about 8 000 characters of English).
fn long_message(turn: usize) -> String {
    format!(
        "Turn {turn}: please read this. {}",
        "The quick brown fox jumps over the lazy dog while the parser reads its input. "
            .repeat(100)
    )
}

/// The journal's records as a fresh store handle reads them from the file, in key
/// order: `(key, record)`.
async fn journal(rig: &Rig) -> Vec<(String, Value)> {
    let store = SqliteStore::open(SqliteConfig::new(rig.dir.path().join("home/ccare.db"))).unwrap();
    let domains = Domains::new(Arc::new(store) as Arc<dyn Store>);
    let domain = domains
        .open(
            DomainSpec::new("context_care_requests", 1).table(TableSpec::new("records")),
            "reader",
        )
        .await
        .unwrap();
    domain
        .table("records")
        .unwrap()
        .entries("")
        .into_iter()
        .map(|(key, value)| (key, (*value).clone()))
        .collect()
}

/// The exported events of a session, as JSON, indexed by seq.
async fn events(rig: &Rig, id: &str) -> Vec<Value> {
    let events: Vec<Value> = export_events(&export(rig, id).await)
        .lines()
        .map(|line| serde_json::from_str(line).unwrap())
        .collect();
    for (index, event) in events.iter().enumerate() {
        assert_eq!(event["seq"].as_u64(), Some(u64::try_from(index).unwrap()));
    }
    events
}

/// API-4 with UI-7's data: one point per conversation request, its numbers the
/// journal's; the compaction between the request before it and the one after it; the
/// fatigue and wakefulness numbers the status notices' own; nothing appended by reading.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn api_4_series_has_one_point_per_request_and_the_compaction_between_them() {
    let rig = Rig::start().await;
    rig.fake.respond_with(|request| {
        if request.header("x-ccare-purpose") == Some("compaction") {
            Reply::Chunks(Script::new().text(SUMMARY).finish("stop"))
        } else {
            Reply::text("noted")
        }
    });
    let id = create_session(&rig).await;
    let mut sse = Sse::open(&rig, &format!("/api/sessions/{id}/events"), None).await;
    let path = format!("/api/sessions/{id}/context/series");
    // Turns of ~2 000 tokens each until context care compacts (S = 12 800 on the
    // 16 000 window), then one more turn after it.
    let mut compacted_at = None;
    for turn in 0..10 {
        prompt(&rig, &id, &long_message(turn)).await;
        sse.until_idle().await;
        let series: Value = rig.get_json(&path).await;
        if compacted_at.is_some() {
            break;
        }
        if !series["operations"].as_array().unwrap().is_empty() {
            compacted_at = Some(turn);
        }
    }
    assert!(
        compacted_at.is_some(),
        "context care compacted within 10 turns"
    );

    let before = export(&rig, &id).await;
    let series: Value = rig.get_json(&path).await;
    assert_eq!(export(&rig, &id).await, before, "reading appended nothing");
    assert_eq!(series["sessionId"], json!(id));
    assert_eq!(series["journalKeep"], json!(1024));
    assert_eq!(series["truncated"], json!(false));

    // One point per conversation request the provider received, in order.
    let sent = rig.fake.requests();
    let purposes: Vec<&str> = sent
        .iter()
        .map(|request| request.header("x-ccare-purpose").unwrap())
        .collect();
    let conversation = purposes
        .iter()
        .filter(|purpose| **purpose == "conversation")
        .count();
    let points = series["points"].as_array().unwrap();
    assert_eq!(points.len(), conversation, "{purposes:?}");

    // Each point is its journal record's numbers.
    let records: Vec<Value> = journal(&rig)
        .await
        .into_iter()
        .filter(|(key, _)| key.starts_with("call_"))
        .map(|(_, record)| record)
        .filter(|record| record["data"]["purpose"] == "conversation")
        .collect();
    assert_eq!(records.len(), points.len());
    for point in points {
        let record = records
            .iter()
            .find(|record| record["data"]["callId"] == point["callId"])
            .unwrap_or_else(|| panic!("no record of {point}"));
        let data = &record["data"];
        assert_eq!(point["at"], record["at"]);
        assert_eq!(point["inputTokens"], data["inputTokens"]);
        assert_eq!(
            point["eventSeq"].as_u64(),
            Some(data["logRevision"].as_u64().unwrap() - 1)
        );
        assert_eq!(point["capacity"], data["budget"]["capacity"]);
        assert_eq!(point["capacity"], json!(16_000));
        assert_eq!(point["budget"]["hardInput"], data["budget"]["hardInput"]);
        assert_eq!(point["budget"]["softInput"], data["budget"]["softInput"]);
        assert_eq!(
            point["budget"]["releaseTarget"],
            data["budget"]["releaseTarget"]
        );
        assert_eq!(point["phase"], data["assessment"]["phase"]);
        assert_eq!(point["outcome"], json!("completed"));
    }
    let seqs: Vec<u64> = points
        .iter()
        .map(|point| point["eventSeq"].as_u64().unwrap())
        .collect();
    assert!(seqs.windows(2).all(|pair| pair[0] < pair[1]), "{seqs:?}");

    // The compaction: the journal's maintenance record, placed between the request
    // before its summary call and the one after it, at the replace node it appended.
    let log = events(&rig, &id).await;
    let operations = series["operations"].as_array().unwrap();
    let summaries: Vec<&Value> = operations
        .iter()
        .filter(|operation| operation["kind"] == "summary")
        .collect();
    assert!(!summaries.is_empty(), "{operations:?}");
    let actions: Vec<Value> = journal(&rig)
        .await
        .into_iter()
        .filter(|(key, _)| key.starts_with("action_"))
        .map(|(_, record)| record["data"].clone())
        .collect();
    assert_eq!(actions.len(), operations.len());
    for operation in operations {
        let action = actions
            .iter()
            .find(|action| action["operationId"] == operation["operationId"])
            .unwrap();
        assert_eq!(operation["kind"], action["action"]);
        assert_eq!(operation["reason"], action["reason"]);
        assert_eq!(operation["outcome"], action["outcome"]);
        assert_eq!(operation["inputBefore"], action["beforeInput"]);
        assert_eq!(operation["inputAfter"], action["afterInput"]);
    }
    let summary = summaries[0];
    assert_eq!(summary["outcome"], json!("committed"), "{summary}");
    let seq = summary["seq"].as_u64().unwrap();
    let node = &log[usize::try_from(seq).unwrap()];
    assert_eq!(node["surface"]["op"], json!("replace"), "{node}");
    assert_eq!(
        node["data"]["message"]["source"]["trace"]["operationId"], summary["operationId"],
        "{node}"
    );
    let next = summary["nextPoint"].as_u64().unwrap();
    let next = usize::try_from(next).unwrap();
    assert!(next >= 1, "{summary}");
    assert!(seqs[next - 1] < seq && seq <= seqs[next], "{seqs:?} {seq}");
    // In the provider's order, the summary call came right after request `next - 1`
    // and before request `next`.
    let first_summary = purposes
        .iter()
        .position(|purpose| *purpose == "compaction")
        .unwrap();
    let conversation_before = purposes[..first_summary]
        .iter()
        .filter(|purpose| **purpose == "conversation")
        .count();
    assert_eq!(conversation_before, next);
    // Compacting lowered the input of the next request.
    let input = |index: usize| points[index]["inputTokens"].as_u64().unwrap();
    assert!(input(next) < input(next - 1), "{points:?}");
    assert!(
        summary["inputAfter"].as_u64().unwrap() < summary["inputBefore"].as_u64().unwrap(),
        "{summary}"
    );

    // Fatigue and wakefulness are the status notices' own numbers (CC-MET-5): each
    // point's sample is the last notice at or before its seq.
    let notices: Vec<(u64, &Value)> = log
        .iter()
        .filter(|event| event["data"]["message"]["source"]["kind"] == "plugin:context-care:state")
        .map(|event| (event["seq"].as_u64().unwrap(), event))
        .collect();
    assert!(!notices.is_empty(), "the compaction's outcome is noticed");
    for (index, point) in points.iter().enumerate() {
        let last = notices
            .iter()
            .rev()
            .find(|(notice_seq, _)| *notice_seq <= seqs[index]);
        match last {
            None => {
                assert_eq!(point["sampledSeq"], Value::Null, "{point}");
                assert_eq!(point["fatiguePct"], Value::Null, "{point}");
                assert_eq!(point["fatigue"], Value::Null, "{point}");
            }
            Some((notice_seq, notice)) => {
                let numbers = &notice["data"]["message"]["source"]["contextCare"];
                assert_eq!(point["sampledSeq"], json!(notice_seq), "{point}");
                assert_eq!(point["fatiguePct"], numbers["fatigueValue"], "{point}");
                assert_eq!(
                    point["wakefulnessPct"], numbers["wakefulnessValue"],
                    "{point}"
                );
                assert!(point["fatigue"].is_string(), "{point}");
                assert!(point["wakefulness"].is_string(), "{point}");
            }
        }
    }
    // The compaction's notice is at the boundary it happened in.
    let after = &points[next];
    let sampled = after["sampledSeq"].as_u64().unwrap();
    assert!(seqs[next - 1] < sampled && sampled <= seqs[next], "{after}");
    assert!(after["fatiguePct"].is_number(), "{after}");
}

/// API-4 refusals: an unknown session is 404, a bad id 400; a session with no request
/// yet has an empty series.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn api_4_series_of_an_unknown_session_is_404_and_of_a_new_one_empty() {
    let rig = Rig::start().await;
    let (status, code, _) = error_of(
        rig.get("/api/sessions/no-such-session/context/series")
            .await,
    )
    .await;
    assert_eq!((status, code.as_str()), (404, "UNKNOWN_SESSION"));
    let (status, code, _) = error_of(rig.get("/api/sessions/bad%20id/context/series").await).await;
    assert_eq!((status, code.as_str()), (400, "INVALID_SESSION_ID"));
    let id = create_session(&rig).await;
    let series: Value = rig
        .get_json(&format!("/api/sessions/{id}/context/series"))
        .await;
    assert_eq!(
        series,
        json!({
            "sessionId": id,
            "points": [],
            "operations": [],
            "journalKeep": 1024,
            "truncated": false,
        })
    );
}

/// API-5: both context routes document their response with a schema generated from the
/// Rust types (`ContextReport`, `Series`), not a bare media type.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn api_5_the_context_routes_document_their_response_schemas() {
    let rig = Rig::start().await;
    let document: Value = rig.get_json("/api/openapi.json").await;
    let paths = &document["paths"];
    for (path, fields) in [
        (
            "/api/sessions/{id}/context",
            ["metrics", "inputTokens", "budget", "categories"],
        ),
        (
            "/api/sessions/{id}/context/series",
            ["points", "operations", "journalKeep", "truncated"],
        ),
    ] {
        let schema =
            &paths[path]["get"]["responses"]["200"]["content"]["application/json"]["schema"];
        assert!(schema.is_object(), "{path}: {}", paths[path]);
        for field in fields {
            assert!(
                schema["properties"][field].is_object(),
                "{path}: {field} in {schema}"
            );
        }
    }
}
