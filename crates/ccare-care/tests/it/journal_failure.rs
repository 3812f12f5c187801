//! Storage failures around context-care: a journal write that fails is surfaced, never
//! swallowed (CC-JNL-1): the request it would have recorded does not leave, and the
//! turn ends naming the failure. A summary whose checkpoint is live when the log write
//! fails is journaled as committed with the failure beside it (CC-SUM-5 secondary
//! failures), not as history kept.

use std::sync::Arc;

use ccare_agent::Agent;
use ccare_agent::testing::{FailingStore, Fault, TestHost};
use ccare_care::{ContextCare, RouteSnapshot};
use ccare_core::kinds::TurnEndReason;
use ccare_llm::ModelConfig;
use ccare_llm::script::ScriptProvider;
use ccare_store::Store;
use serde_json::json;

/// The composition over `store`: the kernel's test host with its scripted provider on
/// `s/small` (16,000 window), context-care mounted with `config`, one agent on a fresh
/// session.
async fn composition(
    store: &Arc<FailingStore>,
    script: &str,
    config: serde_json::Value,
) -> (Agent, ScriptProvider) {
    let (kit, _) = mounted(store, script, &config);
    let session = kit.session().await.unwrap();
    (kit.agent(&session, "s/small"), kit.script().clone())
}

/// The kernel's test host over `store` with its scripted provider on `s/small`
/// (16,000 window), context-care mounted with `config`: one process's composition.
fn mounted(
    store: &Arc<FailingStore>,
    script: &str,
    config: &serde_json::Value,
) -> (TestHost, ContextCare) {
    let kit = TestHost::builder(script)
        .store(Arc::clone(store) as Arc<dyn Store>)
        .model(
            "s/small",
            ModelConfig {
                context_window: Some(16_000),
                max_output_tokens: Some(1_000),
                ..ModelConfig::default()
            },
        )
        .build()
        .unwrap();
    let route = kit.host().llm().route("s/small").unwrap();
    let care = ContextCare::default().with_route(RouteSnapshot::of(&route));
    kit.host().mount(&care, config).unwrap();
    (kit, care)
}

/// Runs one turn of `prompt` on a new session of `kit`, which must complete; returns
/// the session.
async fn completed_turn_on_a_new_session(kit: &TestHost, prompt: &str) -> ccare_session::Session {
    let session = kit.session().await.unwrap();
    let agent = kit.agent(&session, "s/small");
    agent.prompt(prompt);
    assert_eq!(agent.when_idle().await, Some(TurnEndReason::Completed));
    session
}

/// The journal's domain over `store`, opened by a reader of its own: its records and
/// their index rows as stored.
async fn journal_reader(store: &Arc<FailingStore>) -> ccare_agent::domains::Domain {
    ccare_agent::domains::Domains::new(Arc::clone(store) as Arc<dyn Store>)
        .open(
            ccare_agent::domains::DomainSpec::new("context_care_requests", 1)
                .table(ccare_agent::domains::TableSpec::new("records"))
                .table(ccare_agent::domains::TableSpec::by_first_segment(
                    "sessions",
                )),
            "reader",
        )
        .await
        .unwrap()
}

/// A memory store whose writes fail once told to.
fn broken_store() -> Arc<FailingStore> {
    Arc::new(FailingStore::default())
}

#[tokio::test]
async fn cc_jnl_1_a_failed_journal_write_keeps_the_request_home_and_says_why() {
    let store = broken_store();
    let (agent, script) = composition(
        &store,
        "{\"text\": \"one\"}\n{\"text\": \"two\"}",
        json!({}),
    )
    .await;

    agent.prompt("works");
    assert_eq!(agent.when_idle().await, Some(TurnEndReason::Completed));
    store.fail(Fault::kv_writes("disk full").containing("context_care_requests"));
    agent.prompt("the disk is full now");
    let end = agent.when_idle().await;
    let Some(TurnEndReason::Error { failure }) = end else {
        panic!("{end:?}")
    };
    let failure = serde_json::to_value(&failure).unwrap();
    let message = failure["message"].as_str().unwrap();
    assert!(message.contains("disk full"), "{failure}");
    assert!(message.contains("context_care_requests"), "{failure}");
    assert_eq!(script.requests().len(), 1, "the second request never left");
}

#[tokio::test]
async fn cc_sum_5_a_live_checkpoint_whose_log_write_fails_is_committed_with_a_secondary_failure() {
    let store = broken_store();
    let summary = json!({"expect": {"purpose": "compaction"}, "text": crate::rest::SUMMARY});
    let script = [
        json!({"text": "read it"}).to_string(),
        crate::rest::rest_call(json!({"note": crate::rest::note(1200)})),
        summary.to_string(),
        json!({"text": "continuing"}).to_string(),
    ]
    .join("\n");
    let (agent, _script) = composition(&store, &script, json!({"retain_tokens": 100})).await;
    agent.prompt(crate::rest::lorem(400));
    assert_eq!(agent.when_idle().await, Some(TurnEndReason::Completed));
    store.fail(Fault::appends("disk full").containing("\"compaction/end\""));
    agent.prompt("now rest");
    agent.when_idle().await;
    let domain = journal_reader(&store).await;
    let actions: Vec<serde_json::Value> = domain
        .table("records")
        .unwrap()
        .entries("action_")
        .into_iter()
        .map(|(_, value)| value["data"].clone())
        .collect();
    assert_eq!(actions.len(), 1, "{actions:?}");
    assert_eq!(actions[0]["outcome"], "committed", "{}", actions[0]);
    let secondary = actions[0]["secondaryFailures"].as_array().unwrap();
    assert_eq!(secondary.len(), 1);
    assert!(
        secondary[0]["message"]
            .as_str()
            .unwrap()
            .contains("disk full"),
        "{secondary:?}"
    );
}

/// A session created in this process has no journal rows in the store, so its turns
/// never read the journal's store: with every read of the journal's domain failing
/// (after its open), a new session's turn completes and is journaled. A session the
/// process did not create (opened from the store) is read, and says so.
#[tokio::test]
async fn cc_jnl_1_a_session_created_here_reads_nothing_of_the_journal_from_the_store() {
    let store = broken_store();
    let (kit, care) = mounted(
        &store,
        "{\"text\": \"one\"}\n{\"text\": \"two\"}\n{\"text\": \"three\"}",
        &json!({}),
    );
    // A first turn opens the journal (its open reads the store).
    completed_turn_on_a_new_session(&kit, "open the journal").await;

    store.fail(Fault::kv_reads("the disk is gone").containing("context_care_requests"));
    let created = completed_turn_on_a_new_session(&kit, "a new conversation").await;
    assert_eq!(
        care.journal_rows_in_memory(),
        Some(4),
        "each session's record and index row"
    );

    // A session this process did not create is loaded from the store: the read fails.
    store.heal();
    let (other, _other_care) = mounted(
        &store,
        "{\"text\": \"four\"}\n{\"text\": \"five\"}",
        &json!({}),
    );
    completed_turn_on_a_new_session(&other, "open this process's journal").await;
    store.fail(Fault::kv_reads("the disk is gone").containing("context_care_requests"));
    let reopened = other.host().sessions().open(created.id()).await.unwrap();
    let agent = other.agent(&reopened, "s/small");
    agent.prompt("continue it elsewhere");
    let end = agent.when_idle().await;
    let Some(TurnEndReason::Error { failure }) = end else {
        panic!("{end:?}")
    };
    let failure = serde_json::to_value(&failure).unwrap();
    assert!(
        failure["message"]
            .as_str()
            .unwrap()
            .contains("the disk is gone"),
        "{failure}"
    );
}

/// CC-BUD-6: a request waits for its own `ready` record to be durable, not for the
/// index row that finds the record again (an open indexes a stored record that lacks
/// one): with the journal's index rows held back, the request still leaves, its record
/// already stored; once the rows land, the session's index names the settled record.
#[tokio::test]
async fn cc_bud_6_a_request_waits_for_its_record_not_for_the_record_index_row() {
    let store = broken_store();
    let (kit, _care) = mounted(&store, "{\"text\": \"one\"}", &json!({}));
    let session = kit.session().await.unwrap();
    let agent = kit.agent(&session, "s/small");
    store.hold_kv_writes_containing("context_care_requests/sessions/");
    agent.prompt("go");
    let left = tokio::time::timeout(std::time::Duration::from_secs(10), async {
        while kit.script().requests().is_empty() {
            tokio::time::sleep(std::time::Duration::from_millis(2)).await;
        }
    })
    .await;
    assert!(left.is_ok(), "the request waited for its index row");
    let call_id = kit.script().requests()[0].call_id.clone();
    let record = store
        .inner()
        .kv_get("context_care_requests", &format!("records/call_{call_id}"))
        .await
        .unwrap()
        .expect("the ready record is stored before the request leaves");
    let record: serde_json::Value = serde_json::from_slice(&record.value).unwrap();
    assert_eq!(record["data"]["callId"], call_id.as_str(), "{record}");

    store.release_kv_writes();
    assert_eq!(agent.when_idle().await, Some(TurnEndReason::Completed));
    let domain = journal_reader(&store).await;
    let index: Vec<String> = domain
        .table("sessions")
        .unwrap()
        .entries("")
        .into_iter()
        .map(|(key, _)| key)
        .collect();
    assert_eq!(index, [format!("{}/call_{call_id}", session.id())]);
    let settled = domain
        .table("records")
        .unwrap()
        .get(&format!("call_{call_id}"))
        .unwrap();
    assert_eq!(settled["data"]["outcome"], "completed", "{settled}");
}
