//! GW-5 with stream watch (server.md GW-5; watch-rules-ui.md SW-9, KD-2): the fake
//! upstream's first answer loops, stream watch aborts it mid-stream and the kernel
//! resumes the turn with its steer, and the client — raw reqwest reading the SSE
//! frames, and the official `openai` Python SDK — sees ONE answer: one completion id
//! (`chatcmpl-` + the first upstream call), one role delta, one `finish_reason`
//! (`stop`), the usage chunk with `choices: []`, `data: [DONE]` last, HTTP 200.
//!
//! What the text is: the aborted partial was already streamed when the watch cut it,
//! and SSE cannot take it back, so it is kept — in the non-streamed answer too, so
//! both forms say the same and the session continues from either. The resumed text
//! follows it, starting a new paragraph (the gateway ends the cut line with a blank
//! line). The usage is what the upstream reported: the cut request never got to its
//! usage chunk, so it is the resumed request's. The session's log (read back through
//! `export`) has the abort with who stopped it, the steer and the resumed turn; the
//! fake got exactly two requests per answer.

use ccare_fake_openai::{Reply, Script, openai_usage};
use serde_json::{Value, json};

use crate::events::export;
use crate::gateway::{data_lines, run_client, sdk_python, session_of};
use crate::rig::Rig;

const CHAT: &str = "/v1/chat/completions";

/// The resumed answer's text.
const RESUMED: &str = "Back on track.";

/// A looping answer: one line 1000 times, in 4-character deltas (as `management.rs`
/// scripts it).
fn looping() -> Script {
    let text = "same line again\n".repeat(1000);
    let chars: Vec<char> = text.chars().collect();
    let mut script = Script::new();
    for chunk in chars.chunks(4) {
        script = script.text(chunk.iter().collect::<String>());
    }
    script.finish("stop").usage(openai_usage(20, 0, 4000, 0))
}

/// The answer after the resume steer: [`RESUMED`] in two pieces, with usage.
fn resumed() -> Reply {
    Reply::Chunks(
        Script::new()
            .text("Back ")
            .text("on track.")
            .finish("stop")
            .usage(openai_usage(30, 0, 4, 0)),
    )
}

/// The usage the client gets: the resumed request's (the cut one reported none).
fn resumed_usage() -> Value {
    json!({"prompt_tokens": 30, "completion_tokens": 4, "total_tokens": 34,
           "prompt_tokens_details": {"cached_tokens": 0},
           "completion_tokens_details": {"reasoning_tokens": 0}})
}

/// What the session's log says of one aborted and resumed answer.
struct Watched {
    /// The aborted partial, as the log keeps it (`interrupted: true`).
    partial: String,
    /// The first upstream call, whose id the answer carries.
    call_id: String,
    /// The resume steer's text.
    steer: String,
}

impl Watched {
    /// The text the client is to see: the partial, a paragraph break, the resumed text.
    fn answer(&self) -> String {
        let gap = if self.partial.ends_with('\n') {
            "\n"
        } else {
            "\n\n"
        };
        format!("{}{gap}{RESUMED}", self.partial)
    }

    /// The partial as it streamed: the looping script's 4-character deltas.
    fn pieces(&self) -> Vec<String> {
        let chars: Vec<char> = self.partial.chars().collect();
        chars
            .chunks(4)
            .map(|piece| piece.iter().collect())
            .collect()
    }
}

/// Reads the session's log back through `export` and checks it holds exactly one
/// answer that stream watch aborted and the kernel resumed: the user's message, the
/// cut partial, `turn/end{aborted}` naming stream watch and the loop, a new turn
/// claiming the steer, the resumed answer, `turn/end{completed}`.
async fn watched(rig: &Rig, session: &str, user: &str) -> Watched {
    let exported = export(rig, session).await;
    let events: Vec<Value> = exported
        .lines()
        .map(|line| serde_json::from_str::<Value>(line).unwrap())
        .filter(|line| line.get("seq").is_some())
        .collect();
    let outline: Vec<(String, Value)> = events
        .iter()
        .filter_map(|event| {
            let kind = event["type"].as_str().unwrap();
            let data = &event["data"];
            let detail = match kind {
                "turn/start" => data["turn"].clone(),
                "turn/end" => data["reason"]["kind"].clone(),
                "user/message" => data["message"]["source"]["kind"].clone(),
                "assistant/message" => data["interrupted"].clone(),
                _ => return None,
            };
            Some((kind.to_owned(), detail))
        })
        .collect();
    let steer_kind = outline
        .iter()
        .filter(|(kind, _)| kind == "user/message")
        .nth(1)
        .map(|(_, source)| source.clone())
        .unwrap_or_default();
    assert_eq!(
        outline,
        vec![
            ("turn/start".to_owned(), json!(1)),
            ("user/message".to_owned(), json!("user")),
            ("assistant/message".to_owned(), json!(true)),
            ("turn/end".to_owned(), json!("aborted")),
            ("turn/start".to_owned(), json!(2)),
            ("user/message".to_owned(), steer_kind.clone()),
            ("assistant/message".to_owned(), Value::Null),
            ("turn/end".to_owned(), json!("completed")),
        ],
        "{exported}"
    );
    // The resume steer is the watch's own (SW-9).
    assert!(
        steer_kind
            .as_str()
            .is_some_and(|kind| kind.starts_with("plugin:context-care:watch:")),
        "{steer_kind}"
    );
    let of = |kind: &str, nth: usize| {
        events
            .iter()
            .filter(|event| event["type"] == kind)
            .nth(nth)
            .unwrap()
            .clone()
    };
    assert_eq!(
        of("user/message", 0)["data"]["message"]["content"][0]["text"],
        user
    );
    // Who stopped it, and why (SW-9, KD-2).
    let cause = &of("turn/end", 0)["data"]["reason"]["cause"];
    assert_eq!(
        cause,
        &json!({"kind": "hook", "plugin": "stream-watch", "reason": "output loop: same line again"})
    );
    let cut = of("assistant/message", 0);
    let partial = cut["data"]["message"]["content"][0]["text"]
        .as_str()
        .unwrap()
        .to_owned();
    // Cut mid-stream: a prefix of the loop, well short of its 16 000 characters.
    assert!(
        "same line again\n".repeat(1000).starts_with(&partial)
            && partial.len() >= "same line again\n".len() * 2
            && partial.len() < 8000,
        "{partial:?}"
    );
    let steer = of("user/message", 1)["data"]["message"]["content"][0]["text"]
        .as_str()
        .unwrap()
        .to_owned();
    assert!(steer.contains("same line again"), "{steer}");
    assert_eq!(
        of("assistant/message", 1)["data"]["message"]["content"][0]["text"],
        RESUMED
    );
    Watched {
        partial,
        call_id: cut["data"]["call_id"].as_str().unwrap().to_owned(),
        steer,
    }
}

/// The text of an upstream message: its `content` string, or its text parts joined.
fn text_of(message: &Value) -> String {
    match &message["content"] {
        Value::String(text) => text.clone(),
        Value::Array(parts) => parts
            .iter()
            .filter_map(|part| part["text"].as_str())
            .collect(),
        _ => String::new(),
    }
}

/// Checks the fake's two requests of one answer (from `first`): the resumed one
/// carries the cut partial as the assistant's and ends with the steer.
fn assert_resume_request(rig: &Rig, first: usize, watched: &Watched) {
    let requests = rig.fake.requests();
    let resumed = &requests[first + 1].body["messages"];
    let messages = resumed.as_array().unwrap();
    let last = messages.last().unwrap();
    assert_eq!(last["role"], "user", "{resumed}");
    assert!(text_of(last).contains(&watched.steer), "{last}");
    assert!(
        messages
            .iter()
            .any(|message| message["role"] == "assistant" && text_of(message) == watched.partial),
        "the resumed request lacks the partial: {resumed}"
    );
}

/// GW-5, SW-9 over raw SSE: the exact chunk sequence of a looping answer that stream
/// watch aborts and the kernel resumes; the client's transcript of it then continues
/// the same session.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gw_5_sw_9_a_looping_stream_is_aborted_and_resumed_as_one_answer() {
    let rig = Rig::start().await;
    rig.fake.push(looping());
    rig.fake.push(resumed());
    let response = rig
        .post_json(
            CHAT,
            &json!({"model": "fake/model", "stream": true, "stream_options": {"include_usage": true},
                    "messages": [{"role": "user", "content": "write it"}]}),
        )
        .await;
    assert_eq!(response.status().as_u16(), 200);
    assert_eq!(
        response.headers()["content-type"].to_str().unwrap(),
        "text/event-stream"
    );
    let session = session_of(&response);
    let frames = data_lines(&response.text().await.unwrap());
    let watched = watched(&rig, &session, "write it").await;
    assert_eq!(rig.fake.requests().len(), 2);
    assert_resume_request(&rig, 0, &watched);

    assert_eq!(frames.last().map(String::as_str), Some("[DONE]"));
    let chunks: Vec<Value> = frames[..frames.len() - 1]
        .iter()
        .map(|frame| serde_json::from_str(frame).unwrap())
        .collect();
    let created = chunks[0]["created"].clone();
    let id = format!("chatcmpl-{}", watched.call_id);
    let chunk = |choices: Value, usage: Value| {
        json!({"id": id, "object": "chat.completion.chunk", "created": created,
               "model": "fake/model", "choices": choices, "usage": usage})
    };
    let delta = |delta: Value, finish: Value| {
        chunk(
            json!([{"index": 0, "delta": delta, "finish_reason": finish}]),
            Value::Null,
        )
    };
    let gap =
        watched.answer()[watched.partial.len()..watched.answer().len() - RESUMED.len()].to_owned();
    let mut expected = vec![delta(
        json!({"role": "assistant", "content": ""}),
        Value::Null,
    )];
    expected.extend(
        watched
            .pieces()
            .into_iter()
            .chain([gap, "Back ".to_owned(), "on track.".to_owned()])
            .map(|piece| delta(json!({"content": piece}), Value::Null)),
    );
    expected.push(delta(json!({}), json!("stop")));
    expected.push(chunk(json!([]), resumed_usage()));
    assert_eq!(chunks.len(), expected.len(), "{chunks:#?}");
    for (index, (got, want)) in chunks.iter().zip(&expected).enumerate() {
        assert_eq!(got, want, "chunk {index}");
    }
    // What a client assembles from the deltas is the one coherent answer.
    let text: String = chunks
        .iter()
        .filter_map(|chunk| chunk["choices"][0]["delta"]["content"].as_str())
        .collect();
    assert_eq!(text, watched.answer());

    // The client's transcript, with the answer as it got it, continues the session.
    rig.fake.push(Reply::text("More."));
    let next = rig
        .post_json(
            CHAT,
            &json!({"model": "fake/model", "messages": [
                {"role": "user", "content": "write it"},
                {"role": "assistant", "content": text},
                {"role": "user", "content": "more"},
            ]}),
        )
        .await;
    assert_eq!(next.status().as_u16(), 200);
    assert_eq!(session_of(&next), session, "the same session continues");
    let answer: Value = next.json().await.unwrap();
    assert_eq!(answer["choices"][0]["message"]["content"], "More.");
    assert_eq!(rig.fake.requests().len(), 3);
}

/// GW-5, SW-9 without streaming: one `chat.completion` with the whole answer (the
/// kept partial, then the resumed text) and the upstream's usage.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gw_5_sw_9_a_looping_plain_answer_is_aborted_and_resumed_as_one_completion() {
    let rig = Rig::start().await;
    rig.fake.push(looping());
    rig.fake.push(resumed());
    let response = rig
        .post_json(
            CHAT,
            &json!({"model": "fake/model", "messages": [{"role": "user", "content": "write it"}]}),
        )
        .await;
    assert_eq!(response.status().as_u16(), 200);
    assert_eq!(
        response.headers()["content-type"].to_str().unwrap(),
        "application/json"
    );
    let session = session_of(&response);
    let answer: Value = response.json().await.unwrap();
    let watched = watched(&rig, &session, "write it").await;
    assert_eq!(rig.fake.requests().len(), 2);
    assert_resume_request(&rig, 0, &watched);
    assert_eq!(
        answer,
        json!({"id": format!("chatcmpl-{}", watched.call_id), "object": "chat.completion",
               "created": answer["created"], "model": "fake/model",
               "choices": [{"index": 0, "message": {"role": "assistant", "content": watched.answer()},
                            "finish_reason": "stop"}],
               "usage": resumed_usage()})
    );
}

/// GW-5, SW-9 with the official `openai` Python SDK: a streamed answer (with
/// `include_usage`) and a plain one, each aborted and resumed; the SDK raises on no
/// error and assembles one answer of each.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gw_5_the_python_sdk_gets_one_answer_through_an_abort_and_resume() {
    let Some(python) = tokio::task::spawn_blocking(sdk_python).await.unwrap() else {
        return;
    };
    let rig = Rig::start().await;
    for _ in 0..2 {
        rig.fake.push(looping());
        rig.fake.push(resumed());
    }
    let out = run_client(&rig, python, "stream_watch.py", Vec::new()).await;
    assert_eq!(rig.fake.requests().len(), 4);

    let session = out["streamed"]["session"].as_str().unwrap().to_owned();
    let streamed = watched(&rig, &session, "write it").await;
    assert_resume_request(&rig, 0, &streamed);
    // The role chunk, the partial's pieces, the paragraph break, two resumed pieces,
    // the finish chunk and the usage chunk.
    let chunks = 1 + streamed.pieces().len() + 3 + 1 + 1;
    assert_eq!(
        out["streamed"],
        json!({"session": session, "status": 200, "ids": [format!("chatcmpl-{}", streamed.call_id)],
               "roles": ["assistant"], "content": streamed.answer(), "finishes": ["stop"],
               "usage": resumed_usage(), "usage_choices": 0, "chunks": chunks})
    );

    let session = out["plain"]["session"].as_str().unwrap().to_owned();
    let plain = watched(&rig, &session, "write it again").await;
    assert_resume_request(&rig, 2, &plain);
    assert_eq!(
        out["plain"],
        json!({"session": session, "status": 200, "id": format!("chatcmpl-{}", plain.call_id),
               "object": "chat.completion", "choices": 1, "content": plain.answer(),
               "finish": "stop", "usage": resumed_usage()})
    );
}

/// GW-5, SW-11: when the resumed answer loops too, stream watch aborts it again and
/// does not resume (the second consecutive abort). The stream is still one answer
/// under one id: both partials (the second after a paragraph break), then the error
/// frame naming who stopped it, then `data: [DONE]`, with no `finish_reason` and no
/// usage chunk; the gateway does not wait for a turn that never comes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gw_5_sw_11_a_second_loop_ends_the_stream_with_its_error_then_done() {
    let rig = Rig::start().await;
    rig.fake.push(looping());
    rig.fake.push(looping());
    let body = json!({"model": "fake/model", "stream": true, "stream_options": {"include_usage": true},
                      "messages": [{"role": "user", "content": "write it"}]});
    let response = rig.post_json(CHAT, &body);
    let response = tokio::time::timeout(std::time::Duration::from_secs(30), async {
        let response = response.await;
        let status = response.status().as_u16();
        let session = session_of(&response);
        (status, session, response.text().await.unwrap())
    })
    .await
    .expect("the stream ended");
    let (status, session, body) = response;
    assert_eq!(status, 200);
    let frames = data_lines(&body);
    assert_eq!(rig.fake.requests().len(), 2);

    let exported = export(&rig, &session).await;
    let events: Vec<Value> = exported
        .lines()
        .map(|line| serde_json::from_str::<Value>(line).unwrap())
        .filter(|line| line.get("seq").is_some())
        .collect();
    let ends: Vec<&Value> = events
        .iter()
        .filter(|event| event["type"] == "turn/end")
        .map(|event| &event["data"]["reason"])
        .collect();
    let aborted = json!({"kind": "aborted", "cause": {"kind": "hook", "plugin": "stream-watch",
                         "reason": "output loop: same line again"}});
    assert_eq!(ends, vec![&aborted, &aborted], "{exported}");
    let partials: Vec<&str> = events
        .iter()
        .filter(|event| event["type"] == "assistant/message")
        .map(|event| {
            assert_eq!(event["data"]["interrupted"], true);
            event["data"]["message"]["content"][0]["text"]
                .as_str()
                .unwrap()
        })
        .collect();
    assert_eq!(partials.len(), 2);
    let call_id = events
        .iter()
        .find(|event| event["type"] == "assistant/message")
        .unwrap()["data"]["call_id"]
        .as_str()
        .unwrap()
        .to_owned();

    let n = frames.len();
    assert_eq!(frames[n - 1], "[DONE]");
    assert_eq!(
        frames[n - 2],
        r#"{"error":{"message":"stream-watch stopped the answer: output loop: same line again","type":"api_error","code":"TURN_ABORTED"}}"#
    );
    let chunks: Vec<Value> = frames[..n - 2]
        .iter()
        .map(|frame| serde_json::from_str(frame).unwrap())
        .collect();
    assert_eq!(
        chunks[0]["choices"][0]["delta"],
        json!({"role": "assistant", "content": ""})
    );
    let id = format!("chatcmpl-{call_id}");
    for chunk in &chunks {
        assert_eq!(chunk["id"], id.as_str());
        assert_eq!(chunk["usage"], Value::Null, "{chunk}");
        assert_eq!(chunk["choices"][0]["finish_reason"], Value::Null, "{chunk}");
    }
    assert_eq!(
        chunks
            .iter()
            .filter(|chunk| chunk["choices"][0]["delta"].get("role").is_some())
            .count(),
        1
    );
    let text: String = chunks
        .iter()
        .filter_map(|chunk| chunk["choices"][0]["delta"]["content"].as_str())
        .collect();
    let gap = if partials[0].ends_with('\n') {
        "\n"
    } else {
        "\n\n"
    };
    assert_eq!(text, format!("{}{gap}{}", partials[0], partials[1]));
}

/// GW-5/GW-6, SW-11: a plain (non-streamed) answer whose resumed turn loops again is a
/// 500 `TURN_ABORTED` the SDKs do not retry (`x-should-retry: false`): asking again
/// would only loop again. The fake gets the two calls of that one request, no more.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gw_5_gw_6_a_plain_answer_that_loops_twice_is_a_500_not_retried() {
    let rig = Rig::start().await;
    rig.fake.push(looping());
    rig.fake.push(looping());
    let body =
        json!({"model": "fake/model", "messages": [{"role": "user", "content": "write it"}]});
    let response = tokio::time::timeout(
        std::time::Duration::from_secs(30),
        rig.post_json(CHAT, &body),
    )
    .await
    .expect("the answer came");
    assert_eq!(response.status().as_u16(), 500);
    assert_eq!(
        response
            .headers()
            .get("x-should-retry")
            .and_then(|value| value.to_str().ok()),
        Some("false")
    );
    assert!(!session_of(&response).is_empty());
    let text = response.text().await.unwrap();
    assert_eq!(
        text,
        r#"{"error":{"message":"stream-watch stopped the answer: output loop: same line again","type":"api_error","code":"TURN_ABORTED"}}"#
    );
    assert_eq!(rig.fake.requests().len(), 2);
}
