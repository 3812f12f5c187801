//! GW-1 pass-through keys in the adapter: a call's own credential is what goes in
//! `Authorization` (instead of the configured key, which then need not be set), and a
//! failure that quotes it is logged without it.

use ccare_core::{ContentBlock, FailureCode, Message};
use ccare_fake_openai::{FakeServer, Reply};
use ccare_llm::{
    ApiCredential, Assembler, CallConfig, CancellationToken, Finish, Llm, LlmConfig,
    ProviderConfig, ProviderKind, RequestMessage,
};
use futures_util::StreamExt;

fn llm_for(server: &FakeServer, key_env: &str) -> Llm {
    let mut provider = ProviderConfig::new(ProviderKind::Openai);
    provider.base_url = Some(server.base_url());
    provider.api_key_env = Some(key_env.into());
    provider.max_attempts = 1;
    let mut config = LlmConfig::default();
    config.providers.insert("fake".into(), provider);
    Llm::from_config(config, &|name| {
        (name == "FAKE_KEY").then(|| "sk-configured".to_owned())
    })
    .unwrap()
}

fn prompt(credential: Option<&str>) -> CallConfig {
    CallConfig {
        model: "fake/fake-model".into(),
        messages: vec![RequestMessage::user(Message::from_blocks(vec![
            ContentBlock::text("hi"),
        ]))],
        credential: credential.map(ApiCredential::new),
        ..CallConfig::default()
    }
}

async fn finish_of(llm: &Llm, config: CallConfig) -> Finish {
    let mut stream = llm
        .prepare_call(config)
        .unwrap()
        .stream(CancellationToken::new());
    let mut assembler = Assembler::new();
    while let Some(chunk) = stream.next().await {
        assembler.push(&chunk).unwrap();
    }
    assembler.finish().finish
}

#[tokio::test]
async fn gw_1_a_calls_credential_replaces_the_configured_key() {
    let server = FakeServer::start().await.unwrap();
    for _ in 0..3 {
        server.push(Reply::text("ok"));
    }
    let llm = llm_for(&server, "FAKE_KEY");
    assert_eq!(
        finish_of(&llm, prompt(Some("sk-client"))).await,
        Finish::Stop
    );
    assert_eq!(finish_of(&llm, prompt(None)).await, Finish::Stop);
    // The configured env var is not set: a call with its own key still goes out.
    let unset = llm_for(&server, "UNSET_KEY");
    assert_eq!(
        finish_of(&unset, prompt(Some("sk-other"))).await,
        Finish::Stop
    );
    let keys: Vec<String> = server
        .requests()
        .iter()
        .map(|request| request.header("authorization").unwrap_or("").to_owned())
        .collect();
    assert_eq!(
        keys,
        [
            "Bearer sk-client",
            "Bearer sk-configured",
            "Bearer sk-other"
        ]
    );
    // Without its own key, the unset variable fails the call before the network.
    match finish_of(&unset, prompt(None)).await {
        Finish::Error { failure } => assert_eq!(failure.code, FailureCode::AuthFailed),
        other => panic!("{other:?}"),
    }
    assert_eq!(server.requests().len(), 3);
}

#[tokio::test]
async fn gw_1_a_refusal_quoting_the_callers_key_is_kept_without_it() {
    let server = FakeServer::start().await.unwrap();
    server.push(Reply::http(
        401,
        r#"{"error":{"message":"Incorrect API key provided: sk-client-123.","type":"invalid_request_error","code":"invalid_api_key"}}"#,
    ));
    let llm = llm_for(&server, "FAKE_KEY");
    match finish_of(&llm, prompt(Some("sk-client-123"))).await {
        Finish::Error { failure } => {
            assert_eq!(failure.code, FailureCode::AuthFailed);
            assert_eq!(failure.status, Some(401));
            assert_eq!(failure.message, "Incorrect API key provided: [client key].");
        }
        other => panic!("{other:?}"),
    }
}
