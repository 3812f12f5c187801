//! `ccare serve` as a user runs it (server.md §2, host.md H-HTTP-2/3): the real binary
//! prints its URL and, at the first start only, the token; answers over HTTP with the
//! token; SIGTERM mid-turn cancels the turn (logged in the session), flushes and exits
//! 0; a non-loopback address without `[http] token_env` is refused with exit 2.

use std::io::{BufRead as _, BufReader};
use std::path::Path;
use std::process::{Child, Stdio};
use std::time::Duration;

use ccare_fake_openai::{FakeServer, Reply, Script};
use serde_json::{Value, json};

use crate::chat::ccare_command;
use crate::run::{ccare_async, text};

fn write_config(dir: &Path, base_url: &str) {
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
idle_timeout_ms = 60000
max_attempts = 1

[models."local/fake-model"]
context_window = 16000
max_output_tokens = 1000
"#
        ),
    )
    .unwrap();
}

/// Starts `ccare serve` in `dir` and reads its first stdout line (and the token line
/// when `expect_token`); returns the child, the lines and the base URL.
async fn serve(dir: &Path, expect_token: bool) -> (Child, Vec<String>, String) {
    let mut child = ccare_command(dir)
        .args(["--home", "home", "serve", "--addr", "127.0.0.1:0"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let stdout = child.stdout.take().unwrap();
    let lines = tokio::task::spawn_blocking(move || {
        let mut reader = BufReader::new(stdout);
        let mut lines = Vec::new();
        for _ in 0..if expect_token { 2 } else { 1 } {
            let mut line = String::new();
            reader.read_line(&mut line).unwrap();
            lines.push(line);
        }
        // Keep the pipe open (and drained) for the server's lifetime.
        std::thread::spawn(move || std::io::copy(&mut reader, &mut std::io::sink()));
        lines
    })
    .await
    .unwrap();
    let url = lines[0]
        .strip_prefix("ccare serve: listening on ")
        .unwrap_or_else(|| panic!("{lines:?}"))
        .trim_end()
        .to_owned();
    (child, lines, url)
}

fn sigterm(child: &Child) {
    let status = std::process::Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(status.success());
}

async fn wait(mut child: Child) -> (Option<i32>, String) {
    tokio::task::spawn_blocking(move || {
        let deadline = std::time::Instant::now() + Duration::from_secs(20);
        loop {
            if let Some(status) = child.try_wait().unwrap() {
                let mut stderr = String::new();
                if let Some(mut pipe) = child.stderr.take() {
                    std::io::Read::read_to_string(&mut pipe, &mut stderr).unwrap();
                }
                return (status.code(), stderr);
            }
            if std::time::Instant::now() > deadline {
                child.kill().unwrap();
                panic!("ccare serve did not exit after SIGTERM");
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    })
    .await
    .unwrap()
}

#[tokio::test(flavor = "multi_thread")]
async fn serve_prints_url_and_token_once_and_sigterm_cancels_the_running_turn_and_exits_0() {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let fake = FakeServer::start().await.unwrap();
    // A reply that starts and then stalls: the turn is still running at SIGTERM.
    fake.push(Reply::Chunks(
        Script::new()
            .text("Working on ")
            .delay(Duration::from_secs(60))
            .text("it.")
            .finish("stop"),
    ));
    let dir = tempfile::tempdir().unwrap();
    write_config(dir.path(), &fake.base_url());
    let (child, lines, url) = serve(dir.path(), true).await;
    assert!(
        url.starts_with("http://127.0.0.1:") && url.ends_with('/'),
        "{url}"
    );
    let token_file = dir.path().join("home").join("http-token");
    let token = std::fs::read_to_string(&token_file)
        .unwrap()
        .trim()
        .to_owned();
    assert_eq!(
        lines[1],
        format!(
            "ccare serve: token {token} (stored in {})\n",
            Path::new("home").join("http-token").display()
        )
    );
    let client = reqwest::Client::new();
    let unauthorized = client
        .get(format!("{url}api/openapi.json"))
        .send()
        .await
        .unwrap();
    assert_eq!(unauthorized.status().as_u16(), 401);
    let openapi = client
        .get(format!("{url}api/openapi.json"))
        .bearer_auth(&token)
        .send()
        .await
        .unwrap();
    assert_eq!(openapi.status().as_u16(), 200);
    let created = client
        .post(format!("{url}api/sessions"))
        .bearer_auth(&token)
        .send()
        .await
        .unwrap();
    assert_eq!(created.status().as_u16(), 201);
    let id = created.json::<Value>().await.unwrap()["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let prompted = client
        .post(format!("{url}api/sessions/{id}/messages"))
        .bearer_auth(&token)
        .json(&json!({"text": "Do the thing", "mode": "prompt"}))
        .send()
        .await
        .unwrap();
    assert!(
        prompted.status().is_success(),
        "{}",
        prompted.text().await.unwrap()
    );
    assert_eq!(
        fake.wait_for_requests(1, Duration::from_secs(10))
            .await
            .len(),
        1
    );
    sigterm(&child);
    let (code, stderr) = wait(child).await;
    assert_eq!(code, Some(0), "{stderr}");
    // The store was flushed and the lease released: the CLI reads the log at once, and
    // the turn cut mid-stream ends `aborted` by the shutdown.
    let export = ccare_async(dir.path(), &["--home", "home", "sessions", "export", &id]).await;
    assert_eq!(export.status.code(), Some(0), "{}", text(&export.stderr));
    let events: Vec<Value> = text(&export.stdout)
        .lines()
        .skip(1)
        .map(|line| serde_json::from_str(line).unwrap())
        .collect();
    let last = events.last().unwrap();
    assert_eq!(last["type"], "turn/end", "{last}");
    assert_eq!(
        last["data"]["reason"],
        json!({"kind": "aborted", "cause": {"kind": "shutdown"}}),
        "{last}"
    );
    // The second start reuses the token and does not print it.
    let (child, lines, url) = serve(dir.path(), false).await;
    let again = client
        .get(format!("{url}api/openapi.json"))
        .bearer_auth(&token)
        .send()
        .await
        .unwrap();
    assert_eq!(again.status().as_u16(), 200);
    sigterm(&child);
    let (code, stderr) = wait(child).await;
    assert_eq!(code, Some(0), "{stderr}");
    assert_eq!(lines.len(), 1);
}

#[test]
fn serve_refuses_a_non_loopback_address_without_a_configured_token() {
    let dir = tempfile::tempdir().unwrap();
    let output = ccare_command(dir.path())
        .args(["--home", "home", "serve", "--addr", "0.0.0.0:0"])
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(2));
    assert_eq!(
        text(&output.stderr)
            .lines()
            .filter(|line| !line.starts_with("note: "))
            .collect::<Vec<_>>(),
        vec![
            "error: refusing to listen on 0.0.0.0:0: a non-loopback address needs a configured token (set [http] token_env to an env var holding it)"
        ]
    );
    assert!(text(&output.stdout).is_empty());
    assert!(!dir.path().join("home").join("http-token").exists());
}
