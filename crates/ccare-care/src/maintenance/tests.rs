//! Unit tests of maintenance internals that no composition can reach in order (e.g. a
//! deep rest whose span changed between selection and apply, CC-DEEP-2 / A15).
//!
//! The deep rest selects its clear range and applies it within one boundary with
//! nothing awaited in between, so a composition cannot change the span between the
//! two. These tests call `Care::deep_rest` directly with a stale selection, on the
//! `Care` a real `ContextCare` mounted on a real `Host` (memory store).

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;

use ccare_agent::Host;
use ccare_core::kinds::UserMessage;
use ccare_core::{ContentBlock, EventDraft, Locale, Message, SurfaceOp, SystemClock};
use ccare_llm::{CancellationToken, Llm, LlmConfig};
use ccare_session::{Registry, Session, Sessions, SessionsConfig};
use ccare_store::{MemoryStore, Store};
use serde_json::{Value, json};

use super::Context;
use crate::ContextCare;
use crate::care::Care;
use crate::plugin::RouteSnapshot;
use crate::range_nodes::{deep_clear_range, nodes};
use crate::rest_tool::{RestRequest, rest_message};

/// A host on a memory store with context-care mounted (the real plugin, so its `Care`
/// is the one `ContextCare::mount` builds), and a fresh session.
struct Fixture {
    _host: Arc<Host>,
    care: Arc<Care>,
    session: Session,
}

async fn fixture() -> Fixture {
    let registry = Arc::new(Registry::with_host_defaults());
    let sessions = Arc::new(Sessions::new(
        Arc::new(MemoryStore::new()) as Arc<dyn Store>,
        Arc::new(SystemClock),
        Arc::clone(&registry),
        SessionsConfig::default(),
    ));
    let llm = Llm::from_config(LlmConfig::default(), &|_| None).unwrap();
    let host = Arc::new(Host::new(Arc::new(llm), Arc::clone(&sessions), registry));
    let plugin = ContextCare::default().with_route(RouteSnapshot {
        provider: "s".to_owned(),
        model: "small".to_owned(),
        context_window: Some(64_000),
        max_output_tokens: Some(1_000),
        image_tokens: ccare_meter::DEFAULT_IMAGE_TOKENS,
        tokenizer: None,
    });
    host.mount(&plugin, &json!({})).unwrap();
    let care = Arc::clone(plugin.mounted.get().unwrap());
    let session = sessions.create(None, Default::default()).await.unwrap();
    Fixture {
        _host: host,
        care,
        session,
    }
}

fn user(text: &str) -> EventDraft {
    EventDraft::typed(&UserMessage {
        message: Message::from_blocks(vec![ContentBlock::text(text)]),
    })
    .unwrap()
    .with_surface(SurfaceOp::Append)
}

/// Three user messages of some 1500 tokens each (seqs 0, 1, 2): far more than the
/// handoff, so only the span check can refuse it.
fn seed(session: &Session) {
    for index in 0..3 {
        let text = format!(
            "user message {index}: {}",
            "lorem ipsum dolor sit amet consectetur ".repeat(150)
        );
        session.append(user(&text)).unwrap();
    }
}

/// A valid deep rest message (note and recovery of 1000 units each).
fn deep_rest_message() -> Message {
    rest_message(
        &RestRequest {
            note: "n".repeat(1000),
            deep: true,
            recovery: Some("r".repeat(1000)),
        },
        Locale::En,
    )
}

fn context(session: &Session) -> Context<'_> {
    Context {
        session,
        batch: &[],
        turn: None,
        cancel: CancellationToken::new(),
        now_ms: 0,
    }
}

/// The seqs of the live surface, in order.
fn live_seqs(session: &Session) -> Vec<u64> {
    session
        .derived_view()
        .messages
        .iter()
        .map(|derived| derived.seq)
        .collect()
}

/// The kinds of every `compaction/*` event in the log, in order.
fn compaction_kinds(session: &Session) -> Vec<String> {
    session.with_log(|log| {
        log.events()
            .iter()
            .map(|event| event.kind().to_owned())
            .filter(|kind| kind.starts_with("compaction/"))
            .collect()
    })
}

/// A15, second half (CC-DEEP-2): the clear range is taken, then a replace shadows one
/// of its seqs before the apply. The surface no longer matches `shadowedSeqs`, so the
/// deep rest fails with `handoff source changed; history retained` and writes nothing.
/// Taken again on the changed surface, the same deep rest commits: the selection being
/// stale was the only reason for the refusal.
#[tokio::test]
async fn a15_cc_deep_2_a_changed_span_is_handoff_source_changed() {
    let Fixture { care, session, .. } = fixture().await;
    seed(&session);
    let frozen = care.freeze(session.id()).await.unwrap();
    let selected_nodes = nodes(&session.derived_view(), &frozen).unwrap();
    let clear = deep_clear_range(&selected_nodes).unwrap();
    assert_eq!(clear.shadowed_seqs, [0, 1, 2], "CC-DEEP-1: no system head");

    // The span changes: a replace over seq 1 (say, another instance's checkpoint).
    session
        .append(
            user("a checkpoint over seq 1")
                .with_surface(SurfaceOp::Replace {
                    start_seq: 1,
                    end_seq: 1,
                })
                .with_sources(vec![1]),
        )
        .unwrap();
    let live = live_seqs(&session);
    assert_eq!(live, [0, 3, 2]);
    let head = session.head();

    let rest = deep_rest_message();
    let failure = care
        .deep_rest(
            &context(&session),
            &frozen,
            &selected_nodes,
            &clear.shadowed_seqs,
            &rest,
        )
        .await
        .unwrap_err();
    assert_eq!(failure.code, "HANDOFF_SOURCE_CHANGED");
    assert_eq!(failure.message, "handoff source changed; history retained");
    assert!(
        compaction_kinds(&session).is_empty(),
        "zero compaction events"
    );
    assert_eq!(session.head(), head, "nothing appended at all");
    let after = live_seqs(&session);
    assert_eq!(after, live, "history retained");
    // Audited as a requested deep rest that failed (CC-DEEP-2, CC-JNL-3).
    care.journal.flush().await.unwrap();
    let records = care.journal.list(session.id()).await.unwrap();
    let refused: Vec<&Value> = records
        .iter()
        .map(|entry| entry.data())
        .filter(|data| data["action"] == "deep-rest")
        .collect();
    assert_eq!(refused.len(), 1);
    assert_eq!(refused[0]["reason"], "requested");
    assert_eq!(refused[0]["outcome"], "failed");
    assert_eq!(refused[0]["error"]["code"], "HANDOFF_SOURCE_CHANGED");
    assert_eq!(refused[0]["sourceSeqs"], json!([0, 1, 2]));

    // Control: selected afresh on the changed surface, the same rest commits.
    let fresh_nodes = nodes(&session.derived_view(), &frozen).unwrap();
    let fresh = deep_clear_range(&fresh_nodes).unwrap();
    assert_eq!(fresh.shadowed_seqs, [0, 3, 2]);
    care.deep_rest(
        &context(&session),
        &frozen,
        &fresh_nodes,
        &fresh.shadowed_seqs,
        &rest,
    )
    .await
    .unwrap();
    assert_eq!(
        compaction_kinds(&session),
        ["compaction/start", "compaction/summary", "compaction/end"]
    );
}

/// CC-DEEP-2 compares the surface slice of the selection (its seqs, in order) with
/// `shadowedSeqs`: a message appended after the selection is outside that slice, so
/// it is no change. The deep rest clears the selected span and the new message stays
/// live after the checkpoint.
#[tokio::test]
async fn cc_deep_2_a_message_appended_after_the_selection_is_not_a_change() {
    let Fixture { care, session, .. } = fixture().await;
    seed(&session);
    let frozen = care.freeze(session.id()).await.unwrap();
    let selected_nodes = nodes(&session.derived_view(), &frozen).unwrap();
    let clear = deep_clear_range(&selected_nodes).unwrap();
    assert_eq!(clear.shadowed_seqs, [0, 1, 2]);
    let appended = session.append(user("one more")).unwrap().seq();

    care.deep_rest(
        &context(&session),
        &frozen,
        &selected_nodes,
        &clear.shadowed_seqs,
        &deep_rest_message(),
    )
    .await
    .unwrap();
    let live = live_seqs(&session);
    assert_eq!(live.len(), 2, "{live:?}");
    assert_eq!(
        live[1], appended,
        "the new message stays after the checkpoint"
    );
    let summary = session.with_log(|log| {
        log.events()
            .iter()
            .find(|event| event.kind() == ccare_core::kinds::COMPACTION_SUMMARY)
            .map(|event| serde_json::from_str::<Value>(event.data_json()).unwrap())
            .unwrap()
    });
    assert_eq!(summary["shadowed_seqs"], json!([0, 1, 2]));
}

/// CC-SER-1: one FIFO queue per session. A second action on the same session waits
/// for the first; another session's does not; and an unmount ends a queued wait with
/// `ABORTED` (A27, queued half).
#[tokio::test]
async fn cc_ser_1_maintenance_is_queued_per_session_and_an_unmount_aborts_the_wait() {
    let Fixture {
        _host: host,
        care,
        session,
    } = fixture().await;
    let other = host
        .sessions()
        .create(None, Default::default())
        .await
        .unwrap();
    care.ensure_session(&session).await.unwrap();
    care.ensure_session(&other).await.unwrap();
    let wait = std::time::Duration::from_millis(50);
    let (first_context, second_context, other_context) =
        (context(&session), context(&session), context(&other));

    let first = care.enter_queue(&first_context).await.unwrap();
    let second = care.enter_queue(&second_context);
    tokio::pin!(second);
    assert!(
        tokio::time::timeout(wait, &mut second).await.is_err(),
        "the same session waits"
    );
    let independent = tokio::time::timeout(wait, care.enter_queue(&other_context))
        .await
        .expect("another session does not wait");
    assert!(independent.is_ok());
    drop(first);
    let second = tokio::time::timeout(wait, &mut second)
        .await
        .expect("the next in line runs once the first is done")
        .unwrap();

    // Queued behind `second`, then the plugin is unmounted.
    let third_context = context(&session);
    let third = care.enter_queue(&third_context);
    tokio::pin!(third);
    assert!(tokio::time::timeout(wait, &mut third).await.is_err());
    assert!(host.unmount("context-care"));
    let aborted = tokio::time::timeout(wait, &mut third)
        .await
        .expect("an unmount ends the wait")
        .unwrap_err();
    assert_eq!(aborted.code, "ABORTED");
    drop(second);
    // After the unmount nothing enters the queue any more.
    assert_eq!(
        care.enter_queue(&context(&session)).await.unwrap_err().code,
        "ABORTED"
    );
}
