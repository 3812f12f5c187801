//! The kernel's event payloads are typed (`ccare_core::kinds`): every `request/header`,
//! `request/context`, `llm/retry`, `assistant/attempt` and `turn/end` the agent logs
//! with the scripted provider decodes as its struct and encodes back to the exact
//! stored bytes, read from a reopened store.

#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use std::sync::Arc;
use std::time::Duration;

use ccare_agent::testing::TestHost;
use ccare_agent::{
    Agent, CancelCause, HookContext, Host, MountError, Plugin, PluginScope, RequestSegment,
};
use ccare_core::kinds::{
    self, AssistantAttempt, AttemptOutcome, HeaderBody, HeaderReason, LlmRetry, RequestContext,
    RequestHeader, TurnEnd, TurnEndReason, TurnFailure,
};
use ccare_core::{ContentBlock, Event, EventData, EventDraft, FailureCode, Message};
use serde_json::{Value, json};

/// The kernel's test host and an agent on a fresh session.
struct Kit {
    host: Arc<Host>,
    agent: Agent,
    _test: TestHost,
}

async fn kit(script: &str) -> Kit {
    let test = TestHost::builder(script).build().unwrap();
    let session = test.session().await.unwrap();
    Kit {
        host: Arc::clone(test.host()),
        agent: test.agent(&session, "s/scripted"),
        _test: test,
    }
}

/// The session's events of `kind`, as a fresh load from the store reads them.
async fn stored(kit: &Kit, kind: &str) -> Vec<Arc<Event>> {
    let loaded = kit
        .host
        .sessions()
        .load(kit.agent.session().id())
        .await
        .unwrap();
    loaded
        .log
        .events()
        .iter()
        .filter(|event| event.kind() == kind)
        .cloned()
        .collect()
}

/// Decodes `event` as `T` and asserts that encoding it back gives the stored bytes.
fn round_trip<T: EventData>(event: &Event) -> T {
    let decoded: T = event.decode().unwrap();
    let mut draft = EventDraft::typed(&decoded)
        .unwrap()
        .with_sources(event.source_event_seqs().to_vec());
    draft.surface = event.surface();
    draft.ignorable = event.is_ignorable();
    let encoded = Event::encode(event.seq(), event.time_ms(), draft).unwrap();
    assert_eq!(encoded.raw_json(), event.raw_json());
    decoded
}

async fn all<T: EventData>(kit: &Kit) -> Vec<T> {
    stored(kit, T::KIND)
        .await
        .iter()
        .map(|event| round_trip::<T>(event))
        .collect()
}

/// A request-only message on every request (MP-3), so each one logs a series delta.
struct Reminder;

impl RequestSegment for Reminder {
    fn preview(&self, _context: &HookContext) -> Vec<Message> {
        vec![Message::from_blocks(vec![ContentBlock::text("stay short")])]
    }
    fn reserve(&self, context: &HookContext, _call_id: &str) -> Vec<Message> {
        self.preview(context)
    }
    fn dispatched(&self, _context: &HookContext, _call_id: &str) {}
    fn release(&self, _context: &HookContext, _call_id: &str) {}
}

struct Reminders;

impl Plugin for Reminders {
    fn name(&self) -> &str {
        "reminders"
    }
    fn mount(&self, _config: &Value, scope: &mut PluginScope<'_>) -> Result<(), MountError> {
        scope.request_segment(Arc::new(Reminder));
        Ok(())
    }
}

#[tokio::test]
async fn request_header_and_context_round_trip_as_logged() {
    let kit = kit(r#"{"text": "one"}
{"text": "two"}"#)
    .await;
    kit.host.mount(&Reminders, &json!({})).unwrap();
    kit.agent.prompt("first");
    assert_eq!(kit.agent.when_idle().await, Some(TurnEndReason::Completed));
    kit.agent.prompt("second");
    assert_eq!(kit.agent.when_idle().await, Some(TurnEndReason::Completed));
    let headers: Vec<RequestHeader> = all(&kit).await;
    let reasons: Vec<HeaderReason> = headers.iter().map(|header| header.reason).collect();
    assert_eq!(
        reasons,
        [
            HeaderReason::Initial,
            HeaderReason::Series,
            HeaderReason::Series
        ]
    );
    let HeaderBody::Envelope(envelope) = &headers[0].header else {
        panic!("{:?}", headers[0]);
    };
    assert_eq!(
        (
            envelope.config.provider.as_str(),
            envelope.config.model.as_str()
        ),
        ("s", "scripted")
    );
    let delta = headers[1]
        .ext
        .as_ref()
        .and_then(|ext| ext.request_delta.as_ref())
        .and_then(|delta| delta.append_request_only.as_ref())
        .unwrap();
    assert_eq!(delta[0].plugin, "reminders");
    let contexts: Vec<RequestContext> = all(&kit).await;
    assert_eq!(
        contexts,
        [RequestContext {
            provider: "s".into(),
            model: "scripted".into(),
            context_window: Some(16_000)
        }]
    );
}

#[tokio::test]
async fn llm_retry_and_a_failed_attempt_round_trip_as_logged() {
    let kit = kit(
        r#"{"failure": {"code": "RATE_LIMITED", "message": "slow down"}}
{"text": "made it"}
{"failure": {"code": "AUTH_FAILED", "message": "bad key"}}"#,
    )
    .await;
    kit.agent.prompt("first");
    assert_eq!(kit.agent.when_idle().await, Some(TurnEndReason::Completed));
    kit.agent.prompt("second");
    let Some(TurnEndReason::Error { .. }) = kit.agent.when_idle().await else {
        panic!("the second turn fails");
    };
    let retries: Vec<LlmRetry> = all(&kit).await;
    assert_eq!(retries.len(), 1);
    assert_eq!(
        (retries[0].attempt, retries[0].code),
        (1, FailureCode::RateLimited)
    );
    let attempts: Vec<AssistantAttempt> = all(&kit).await;
    assert_eq!(attempts.len(), 1);
    assert_eq!(attempts[0].outcome, AttemptOutcome::Failed);
    assert_eq!(
        attempts[0].failure.as_ref().map(|failure| failure.code),
        Some(FailureCode::AuthFailed)
    );
    let ends: Vec<TurnEnd> = all(&kit).await;
    assert_eq!(ends.len(), 2);
    assert_eq!(ends[0].reason, TurnEndReason::Completed);
    let TurnEndReason::Error { failure } = &ends[1].reason else {
        panic!("{:?}", ends[1]);
    };
    assert_eq!(
        failure,
        &TurnFailure::Llm(attempts[0].failure.clone().unwrap())
    );
}

#[tokio::test]
async fn an_aborted_attempt_and_its_cause_round_trip_as_logged() {
    let kit = kit(r#"{"text": "never seen", "delay_ms": 10000}"#).await;
    kit.agent.prompt("wait");
    let started = async {
        while stored(&kit, kinds::REQUEST_CONTEXT).await.is_empty() {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    };
    tokio::time::timeout(Duration::from_secs(10), started)
        .await
        .unwrap();
    kit.agent.cancel(CancelCause::User, false).await;
    let attempts: Vec<AssistantAttempt> = all(&kit).await;
    assert_eq!(attempts.len(), 1);
    assert_eq!(
        (attempts[0].outcome, &attempts[0].failure),
        (AttemptOutcome::Aborted, &None)
    );
    let ends: Vec<TurnEnd> = all(&kit).await;
    assert_eq!(
        ends[0].reason,
        TurnEndReason::Aborted {
            cause: CancelCause::User
        }
    );
}
