//! context-care end to end: the real `ccare` binary run again and again on one session
//! against the fake OpenAI-compatible server, the log read back with `sessions export`
//! (issue 6 acceptance: levels rise as the session grows past S, one notice per change
//! of its text, adjacent requests share a byte-identical prefix, and a request over H
//! never reaches the server).

use std::path::Path;

use ccare_fake_openai::{FakeServer, Script};
use serde_json::Value;

use crate::run::{ccare_async, text};

/// Writes `ccare.toml` in `dir`: the default profile on the fake server at `base_url`
/// (a 16 000-token window, a 2 s stream idle timeout).
pub(crate) fn write_config(dir: &Path, base_url: &str) {
    write_config_with_window(dir, base_url, 16_000);
}

fn write_config_with_window(dir: &Path, base_url: &str, window: u64) {
    std::fs::write(
        dir.join("ccare.toml"),
        format!(
            r#"
[agent]
model = "local/fake-model"

[providers.local]
kind = "openai"
base_url = "{base_url}"
api_key_env = "FAKE_KEY"
idle_timeout_ms = 2000

[models."local/fake-model"]
context_window = {window}
max_output_tokens = 1000

[plugins.context-care]
"#
        ),
    )
    .unwrap();
}

fn answer() -> Script {
    Script::new().text("Noted.").finish("stop")
}

/// About 660 estimated tokens (0.3 per ASCII letter or digit).
fn chunk(n: usize) -> String {
    format!("part {n}: {}", "lorem ipsum dolor sit amet ".repeat(100))
}

async fn notices(dir: &Path, id: &str) -> Vec<String> {
    let export = ccare_async(dir, &["sessions", "export", id]).await;
    text(&export.stdout)
        .lines()
        .filter_map(|line| serde_json::from_str::<Value>(line).ok())
        .filter(|event| event["type"] == "user/message")
        .filter(|event| event["data"]["message"]["source"]["kind"] == "plugin:context-care:state")
        .map(|event| {
            event["data"]["message"]["content"][0]["text"]
                .as_str()
                .unwrap()
                .to_owned()
        })
        .collect()
}

fn fatigue(notice: &str) -> &str {
    let line = notice.lines().nth(1).unwrap();
    line.strip_prefix("Fatigue: ")
        .unwrap()
        .split(';')
        .next()
        .unwrap()
}

#[tokio::test(flavor = "multi_thread")]
async fn a_session_growing_past_s_raises_its_levels_with_one_notice_per_change() {
    let server = FakeServer::start().await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    write_config(dir.path(), &server.base_url());
    server.push(answer());
    let first = ccare_async(dir.path(), &["run", "--prompt", &chunk(0)]).await;
    assert_eq!(first.status.code(), Some(0), "{}", text(&first.stderr));
    let id = text(&first.stderr)
        .split_whitespace()
        .find(|word| word.len() > 20)
        .unwrap()
        .to_owned();
    // H = 16000 − 1000 = 15000, S = 12800; twelve turns of ~900 tokens (prompt, reply,
    // notices) reach `high` (60% fatigue is ~9100 tokens) and stay below H.
    let turns = 12;
    for n in 1..turns {
        server.push(answer());
        let run = ccare_async(
            dir.path(),
            &["run", "--session", &id, "--prompt", &chunk(n)],
        )
        .await;
        assert_eq!(
            run.status.code(),
            Some(0),
            "turn {n}: {}",
            text(&run.stderr)
        );
    }
    let notices = notices(dir.path(), &id).await;
    let levels: Vec<&str> = notices.iter().map(|notice| fatigue(notice)).collect();
    assert_eq!(levels.first(), Some(&"normal"), "{levels:?}");
    assert!(levels.contains(&"high"), "the load crossed 60%: {levels:?}");
    let rank = |level: &str| {
        ["normal", "elevated", "high", "very-high"]
            .iter()
            .position(|l| *l == level)
    };
    assert!(
        levels.windows(2).all(|pair| rank(pair[0]) <= rank(pair[1])),
        "{levels:?}"
    );
    assert!(
        notices.windows(2).all(|pair| pair[0] != pair[1]),
        "never the same text twice in a row: {notices:#?}"
    );
    assert!(
        notices.len() < turns,
        "numbers changed every turn, the text did not"
    );
    for notice in &notices {
        assert!(
            !notice.chars().any(|c| c.is_ascii_digit()),
            "levels only: {notice}"
        );
    }

    // Adjacent requests: the same system prompt, and each one's messages are a prefix
    // of the next one's, byte for byte.
    let requests = server.requests();
    assert_eq!(requests.len(), turns);
    for pair in requests.windows(2) {
        let (before, after) = (&pair[0].body, &pair[1].body);
        let (old, new) = (
            before["messages"].as_array().unwrap(),
            after["messages"].as_array().unwrap(),
        );
        assert_eq!(old[0], new[0], "the system message");
        assert!(new.len() > old.len());
        for (index, message) in old.iter().enumerate() {
            assert_eq!(
                serde_json::to_string(message).unwrap(),
                serde_json::to_string(&new[index]).unwrap(),
                "message {index}"
            );
        }
    }

    // A request above H never reaches the server.
    let huge = "lorem ipsum dolor sit amet ".repeat(2000);
    let refused = ccare_async(dir.path(), &["run", "--session", &id, "--prompt", &huge]).await;
    assert_eq!(refused.status.code(), Some(1));
    assert!(
        text(&refused.stderr).contains("REQUEST_BUDGET_EXCEEDED"),
        "{}",
        text(&refused.stderr)
    );
    // (Automatic maintenance may try summaries first: purpose `compaction`.)
    let conversation = server
        .requests()
        .iter()
        .filter(|request| request.header("x-ccare-purpose") == Some("conversation"))
        .count();
    assert_eq!(
        conversation, turns,
        "the refused request never reached the server"
    );
}

/// CC-BUD-6 / A6: a local refusal tells the user and a script which limit was hit and
/// that the provider was never called: `ccare run` prints origin, budget kind and
/// budget on stderr, and `--json`'s `turn/end` carries them in the failure.
#[tokio::test(flavor = "multi_thread")]
async fn a6_a_local_refusal_names_its_origin_budget_and_kind() {
    let server = FakeServer::start().await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    // H = 4000 − 1000 = 3000; the prompt is far above it.
    write_config_with_window(dir.path(), &server.base_url(), 4_000);
    let huge = "lorem ipsum dolor sit amet ".repeat(2000);
    let refused = ccare_async(dir.path(), &["run", "--prompt", &huge]).await;
    assert_eq!(refused.status.code(), Some(1));
    let stderr = text(&refused.stderr);
    let line = stderr
        .lines()
        .find(|line| line.contains("REQUEST_BUDGET_EXCEEDED"))
        .unwrap_or_else(|| panic!("{stderr}"));
    assert!(line.contains("exceeds hard input budget 3000"), "{line}");
    assert!(
        line.contains("refused before dispatch (origin: preflight; the provider was never called)"),
        "{line}"
    );
    assert!(line.contains("budget kind: physical"), "{line}");
    assert!(line.contains("\"hardInput\":3000"), "{line}");

    let json = ccare_async(dir.path(), &["run", "--json", "--prompt", &huge]).await;
    assert_eq!(json.status.code(), Some(1), "{}", text(&json.stderr));
    let end = text(&json.stdout)
        .lines()
        .filter_map(|line| serde_json::from_str::<Value>(line).ok())
        .find(|event| event["type"] == "turn/end")
        .unwrap();
    let failure = &end["data"]["reason"]["failure"];
    assert_eq!(failure["code"], "REQUEST_BUDGET_EXCEEDED", "{end}");
    let refusal = &failure["refusal"];
    assert_eq!(refusal["origin"], "preflight", "{end}");
    assert_eq!(refusal["budgetKind"], "physical", "{end}");
    assert_eq!(refusal["budget"]["hardInput"], 3000, "{end}");
    assert_eq!(refusal["budget"]["capacity"], 4000, "{end}");
    assert!(
        server
            .requests()
            .iter()
            .all(|request| request.header("x-ccare-purpose") != Some("conversation")),
        "the provider was never called for the conversation"
    );
}
