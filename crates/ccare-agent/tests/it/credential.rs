//! GW-1 pass-through keys in the kernel: the caller's own API key in an agent's
//! options reaches every model request made for its session — the conversation's
//! steps and the side requests (summaries) — and nothing else; it goes when the
//! options drop it or the agent is dropped.

use std::sync::Arc;

use ccare_agent::testing::TestHost;
use ccare_agent::{AgentOptions, HookContext};
use ccare_core::kinds::TurnEndReason;
use ccare_core::{ContentBlock, Message, SystemClock};
use ccare_llm::{ApiCredential, CallConfig, Purpose, RequestMessage};

fn summary_config() -> CallConfig {
    CallConfig {
        model: "s/scripted".to_owned(),
        messages: vec![RequestMessage::user(Message::from_blocks(vec![
            ContentBlock::text("the transcript"),
        ]))],
        purpose: Purpose::Compaction,
        ..CallConfig::default()
    }
}

#[tokio::test]
async fn gw_1_the_callers_key_reaches_the_turn_and_its_side_requests_only() {
    let kit = TestHost::builder("{\"text\": \"one\"}\n{\"text\": \"two\"}")
        .build()
        .unwrap();
    let session = kit.session().await.unwrap();
    let other = kit.session().await.unwrap();
    let key = ApiCredential::new("sk-client");
    let mut options = AgentOptions::new("s/scripted");
    options.credential = Some(key.clone());
    let agent = kit.agent_with(&session, options);
    assert!(!format!("{:?}", agent.options()).contains("sk-client"));
    agent.prompt("hi");
    assert_eq!(agent.when_idle().await, Some(TurnEndReason::Completed));
    let requests = kit.script().requests();
    assert_eq!(requests.len(), 1);
    assert_eq!(requests[0].config.credential, Some(key.clone()));

    let context = |session: &ccare_session::Session| HookContext {
        session: session.clone(),
        turn: 1,
        step: 0,
        cancel: ccare_llm::CancellationToken::new(),
        clock: Arc::new(SystemClock),
    };
    let side = kit.host().side_requests();
    let prepared = side.prepare(&context(&session), summary_config()).unwrap();
    assert_eq!(prepared.call().config.credential, Some(key.clone()));
    prepared.release();
    // Another session's side requests use the configured key.
    let elsewhere = side.prepare(&context(&other), summary_config()).unwrap();
    assert_eq!(elsewhere.call().config.credential, None);
    elsewhere.release();

    // Options without the key: the next step and side requests use the configured one.
    agent.set_options(AgentOptions::new("s/scripted"));
    let prepared = side.prepare(&context(&session), summary_config()).unwrap();
    assert_eq!(prepared.call().config.credential, None);
    prepared.release();
    agent.prompt("again");
    assert_eq!(agent.when_idle().await, Some(TurnEndReason::Completed));
    assert_eq!(kit.script().requests()[1].config.credential, None);

    // A dropped agent takes its key with it.
    let mut options = AgentOptions::new("s/scripted");
    options.credential = Some(key.clone());
    agent.set_options(options);
    let prepared = side.prepare(&context(&session), summary_config()).unwrap();
    assert_eq!(prepared.call().config.credential, Some(key));
    prepared.release();
    drop(agent);
    let prepared = side.prepare(&context(&session), summary_config()).unwrap();
    assert_eq!(prepared.call().config.credential, None);
    prepared.release();
}
