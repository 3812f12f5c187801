//! What the property tests of the server's inputs (`api_input`, `gateway_input`) share:
//! the fake model they drive, their runtime, how they send, and the audit of what they
//! leave stored.

use std::fmt::Debug;

use ccare_core::SessionId;
use ccare_fake_openai::{RecordedRequest, Reply, Script};

use crate::rig::Rig;

/// The word a user message carries to make the fake model call the caller's `lookup`.
pub(crate) const CALL_WORD: &str = "please-call";

/// The word a user message carries to make the fake model answer slowly (five pieces
/// 40 ms apart), so what follows lands mid-turn.
pub(crate) const SLOW_WORD: &str = "slowly";

/// The fake model: calls `lookup` (the call named by `call_id` of the request's message
/// count) when the latest user messages (the caller's and the notices context care
/// adds after it) have the call word and `lookup` is offered; answers slowly when they
/// have the slow word; answers at once otherwise.
pub(crate) fn model(
    call_id: fn(usize) -> String,
) -> impl Fn(&RecordedRequest) -> Reply + Send + Sync + 'static {
    move |request| {
        let messages = request.body["messages"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        let said: Vec<String> = messages
            .iter()
            .rev()
            .take_while(|message| message["role"] == "user")
            .map(|message| message["content"].to_string())
            .collect();
        let says = |word: &str| said.iter().any(|text| text.contains(word));
        let offered = request.body["tools"].as_array().is_some_and(|tools| {
            tools
                .iter()
                .any(|tool| tool["function"]["name"] == "lookup")
        });
        if says(CALL_WORD) && offered {
            return Reply::Chunks(
                Script::new()
                    .tool_call(
                        0,
                        Some(&call_id(messages.len())),
                        Some("lookup"),
                        "{\"q\":\"x\"}",
                    )
                    .finish("tool_calls"),
            );
        }
        if says(SLOW_WORD) {
            let mut script = Script::new().text("a slow");
            for _ in 0..5 {
                script = script.delay_ms(40).text(" answer");
            }
            return Reply::Chunks(script.finish("stop"));
        }
        Reply::text("an answer")
    }
}

/// The runtime each case runs on: two workers, as the machines CI runs on have cores.
pub(crate) fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
}

/// Sends `request`; panics if no response comes.
pub(crate) async fn send(request: reqwest::RequestBuilder, sent: &str) -> reqwest::Response {
    request
        .send()
        .await
        .unwrap_or_else(|error| panic!("no response ({error}) for {sent}"))
}

/// The audit (`ccare sessions check`) finds nothing wrong in any session of `ids`.
pub(crate) async fn assert_audited(rig: &Rig, ids: &[String], after: &(impl Debug + ?Sized)) {
    let sessions = rig.context().booted.host.sessions().clone();
    for id in ids {
        let id: SessionId = id.parse().unwrap();
        let loaded = sessions.load(&id).await.unwrap();
        assert!(
            loaded.violations.is_empty(),
            "{id}: {:?} after {after:?}",
            loaded.violations
        );
    }
}
