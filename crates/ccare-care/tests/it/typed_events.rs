//! The compaction payloads context care writes are typed (`ccare_core::kinds`): every
//! `compaction/summary` (a summary call's and a deep rest's), `compaction/prune` and
//! locally refused `assistant/attempt` decodes as its struct and encodes back to the
//! exact bytes a fresh load of the store reads; the request journal's typed records
//! keep today's fields in today's order.

use std::sync::Arc;

use ccare_core::kinds::{
    AssistantAttempt, AttemptOutcome, CompactionPrune, CompactionSummary, TurnEndReason,
};
use ccare_core::{Event, EventData, EventDraft, FailureCode};
use serde_json::{Value, json};

use crate::rest::{Dump, SUMMARY, lorem, note, rest_call};
use crate::rig::{Rig, rig};

/// Every event of `T`'s kind as a fresh load reads it, decoded as `T`; asserts that
/// encoding each back gives its stored bytes.
async fn typed<T: EventData>(rig: &Rig) -> Vec<T> {
    let loaded = rig.sessions.load(rig.session.id()).await.unwrap();
    let events: Vec<Arc<Event>> = loaded
        .log
        .events()
        .iter()
        .filter(|event| event.kind() == T::KIND)
        .cloned()
        .collect();
    events
        .iter()
        .map(|event| {
            let decoded: T = event.decode().unwrap();
            let mut draft = EventDraft::typed(&decoded)
                .unwrap()
                .with_sources(event.source_event_seqs().to_vec());
            draft.surface = event.surface();
            draft.ignorable = event.is_ignorable();
            let encoded = Event::encode(event.seq(), event.time_ms(), draft).unwrap();
            assert_eq!(encoded.raw_json(), event.raw_json());
            decoded
        })
        .collect()
}

#[tokio::test]
async fn a_summary_calls_compaction_summary_round_trips_as_logged() {
    let summary = json!({"expect": {"purpose": "compaction"}, "text": SUMMARY}).to_string();
    let script = [
        r#"{"text": "read it"}"#.to_owned(),
        rest_call(json!({"note": note(1200)})),
        summary,
        r#"{"text": "continuing"}"#.to_owned(),
    ]
    .join("\n");
    let rig = rig(&script, json!({"retain_tokens": 100}), Some(64_000), true).await;
    rig.turn(&lorem(400)).await;
    assert_eq!(rig.turn("now rest").await, Some(TurnEndReason::Completed));
    let summaries: Vec<CompactionSummary> = typed(&rig).await;
    assert_eq!(summaries.len(), 1);
    let summary = &summaries[0];
    assert_eq!(summary.summary, SUMMARY);
    assert!(summary.llm_stream_call);
    assert_eq!(
        (summary.provider.as_str(), summary.model.as_str()),
        ("s", "small")
    );
    assert!(summary.call_id.is_some() && summary.raw_output.is_some());
    assert_eq!(summary.shadowed_range[0], summary.shadowed_seqs[0]);
}

#[tokio::test]
async fn a_deep_rests_compaction_summary_round_trips_as_logged() {
    let recovery = format!("search the log for 'lorem'. {}", note(1000));
    let script = [
        r#"{"text": "read it"}"#.to_owned(),
        rest_call(json!({"note": note(1200), "deep": true, "recovery": recovery})),
        r#"{"text": "continuing"}"#.to_owned(),
    ]
    .join("\n");
    let rig = rig(&script, json!({}), Some(64_000), true).await;
    rig.turn(&lorem(800)).await;
    rig.turn("now rest deeply").await;
    let summaries: Vec<CompactionSummary> = typed(&rig).await;
    assert_eq!(summaries.len(), 1);
    let summary = &summaries[0];
    assert!(summary.summary.ends_with(&recovery));
    assert_eq!(
        (
            summary.usage,
            summary.max_tokens,
            summary.llm_stream_call,
            &summary.call_id
        ),
        (None, None, false, &None),
        "no model call"
    );
}

#[tokio::test]
async fn compaction_prune_round_trips_as_logged() {
    let script = [
        r#"{"tool_calls": [{"name": "dump", "arguments": {}}]}"#,
        r#"{"text": "seen it"}"#,
        r#"{"text": "next"}"#,
    ]
    .join("\n");
    let rig = rig(&script, json!({}), Some(16_000), true).await;
    rig.host.add_tool(Arc::new(Dump(45_000))).unwrap();
    rig.turn("dump it").await;
    rig.turn("go on").await;
    let prunes: Vec<CompactionPrune> = typed(&rig).await;
    assert_eq!(prunes.len(), 1);
    let pruned = prunes[0].pruned[0];
    assert!(pruned.after_tokens < pruned.before_tokens, "{pruned:?}");
}

#[tokio::test]
async fn a_locally_refused_attempt_round_trips_as_logged() {
    let rig = rig("{\"text\": \"fits\"}", json!({}), Some(4_000), false).await;
    rig.turn(&"lorem ipsum dolor sit amet ".repeat(600)).await;
    let attempts: Vec<AssistantAttempt> = typed(&rig).await;
    assert_eq!(attempts.len(), 1);
    assert_eq!(attempts[0].outcome, AttemptOutcome::Failed);
    let failure = attempts[0].failure.as_ref().unwrap();
    assert_eq!(failure.code, FailureCode::RequestBudgetExceeded);
    assert!(failure.refusal.is_some());
}

/// Today's request records (CC-JNL-2), as the journal stored them: a settled
/// conversation request, and one refused before dispatch.
const SETTLED_RECORD: &str = r#"{"version":1,"sessionId":"01a23317-8c61-7762-9b8c-4871de4693cc","kind":"request","at":1796153511023,"data":{"callId":"01a23317-8c6f-747b-b416-829ca575564e","logRevision":5,"sourceSeqs":[1],"sourceHeader":{"provider":"s","model":"small","reasoningEffort":null,"temperature":null,"maxTokens":1000},"sourceMessagesHash":"1daee46b5c5c82399783e8b429e14f135068226c197b898b4779257b86604358","purpose":"conversation","route":{"provider":"s","model":"small","maxTokens":1000,"reasoningEffort":null,"temperature":null},"inputHash":"cc97ac3486b523bf7d7017355854ae323bff5460c4202c5f1cfae425ff531fbf","pricingBasis":{"kind":"heuristic","textScale":1.0},"budget":{"purpose":"conversation","capacity":64000,"physicalWindow":64000,"policyCapacity":null,"billingInputCeiling":null,"maxTokens":1000,"completionSource":"adapter-default","safetyTokens":0,"burstTokens":0,"releaseMarginTokens":0,"retainTokens":100,"hardInput":63000,"physicalInput":63000,"softInput":51200,"releaseTarget":51200,"tail":100},"assessment":{"inputTokens":1465,"phase":"normal","hardInput":63000,"hardDeficit":0,"physicalDeficit":0},"rawInput":{"textTokens":1465,"visualTokens":0},"toolsTokens":884,"inputTokens":1465,"calibrationHeaderKey":"51afb020e910b0d7b92e8599c2983debd9ff13e4bceb98d71854215997324c09","phase":"settled","dispatched":true,"dispatchOrder":1,"dispatchBasis":"prepared-stream-handoff","attemptId":"01a23317-8c6f-747b-b416-829ca575564e#1","outcome":"completed","eventSeq":5,"eventType":"assistant/message","usage":{"inputTokens":561,"cacheReadTokens":0,"cacheWriteTokens":0,"outputTokens":2}}}"#;
const REFUSED_RECORD: &str = r#"{"version":1,"sessionId":"01a23317-8c93-77d2-88a9-365457071af4","kind":"request","at":1796153511070,"data":{"callId":"01a23317-8c9e-7229-9abb-21716c73eaec","logRevision":5,"sourceSeqs":[1],"sourceHeader":{"provider":"s","model":"small","reasoningEffort":null,"temperature":null,"maxTokens":1000},"sourceMessagesHash":"ca17bf162ded7f9d705a63e4731b916141965af9a904b0353932f55eda3fe267","purpose":"conversation","route":{"provider":"s","model":"small","maxTokens":1000,"reasoningEffort":null,"temperature":null},"inputHash":"b4758a4fde0f8673f0dbe07b86060fce19f502cbfb53a70b4c3147d0ac1f155e","pricingBasis":{"kind":"heuristic","textScale":1.0},"budget":{"purpose":"conversation","capacity":4000,"physicalWindow":4000,"policyCapacity":null,"billingInputCeiling":null,"maxTokens":1000,"completionSource":"adapter-default","safetyTokens":0,"burstTokens":0,"releaseMarginTokens":0,"retainTokens":null,"hardInput":3000,"physicalInput":3000,"softInput":3000,"releaseTarget":3000,"tail":480},"assessment":{"inputTokens":5161,"phase":"hard","hardInput":3000,"hardDeficit":2161,"physicalDeficit":2161,"budgetKind":"physical"},"rawInput":{"textTokens":5161,"visualTokens":0},"toolsTokens":884,"inputTokens":5161,"calibrationHeaderKey":"51afb020e910b0d7b92e8599c2983debd9ff13e4bceb98d71854215997324c09","phase":"failed","outcome":"not-dispatched","failure":{"code":"REQUEST_BUDGET_EXCEEDED","message":"Request input 5161 exceeds hard input budget 3000"}}}"#;

/// The shape of a JSON value: every object's keys in order with their values' shapes,
/// an array's first element, a scalar's kind (`null` apart from a number).
fn shape(value: &Value) -> Value {
    match value {
        Value::Object(map) => Value::Array(
            map.iter()
                .map(|(key, value)| json!([key, shape(value)]))
                .collect(),
        ),
        Value::Array(items) => json!({"array": items.first().map(shape)}),
        Value::Null => json!("null"),
        Value::Bool(_) => json!("bool"),
        Value::Number(_) => json!("number"),
        Value::String(_) => json!("string"),
    }
}

fn request_records(journal: Vec<(String, Value)>) -> Vec<Value> {
    journal
        .into_iter()
        .filter(|(key, _)| key.starts_with("call_"))
        .map(|(_, record)| record)
        .collect()
}

#[tokio::test]
async fn cc_jnl_2_request_records_keep_todays_fields_in_todays_order() {
    let calm = rig(
        r#"{"text": "fits"}"#,
        json!({"retain_tokens": 100}),
        Some(64_000),
        true,
    )
    .await;
    assert_eq!(calm.turn(&lorem(40)).await, Some(TurnEndReason::Completed));
    let settled = request_records(calm.journal().await);
    assert_eq!(settled.len(), 1);
    let today: Value = serde_json::from_str(SETTLED_RECORD).unwrap();
    assert_eq!(shape(&settled[0]), shape(&today), "{}", settled[0]);
    assert_eq!(settled[0]["data"]["phase"], "settled");
    assert_eq!(
        settled[0]["data"]["dispatchBasis"],
        "prepared-stream-handoff"
    );

    let small = rig("{\"text\": \"fits\"}", json!({}), Some(4_000), false).await;
    small.turn(&"lorem ipsum dolor sit amet ".repeat(600)).await;
    let refused = request_records(small.journal().await);
    assert_eq!(refused.len(), 1);
    let today: Value = serde_json::from_str(REFUSED_RECORD).unwrap();
    assert_eq!(shape(&refused[0]), shape(&today), "{}", refused[0]);
    assert_eq!(refused[0]["data"]["outcome"], "not-dispatched");
    assert_eq!(refused[0]["data"]["failure"], today["data"]["failure"]);
}
