//! H-TEST-4: a child process appends in a loop and is SIGKILLed at random points; on
//! reopen every acknowledged (flushed) event is present and byte-identical, seqs are
//! contiguous, and an open turn is repaired.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use std::io::{BufRead, Write};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::Duration;

use ccare_core::kinds::*;
use ccare_core::*;
use ccare_session::*;
use ccare_store::{SqliteConfig, SqliteStore, Store};
use serde_json::json;

const CHILD_ENV: &str = "CCARE_CRASH_CHILD_DB";
const KILLS: u64 = 50;

fn engine(path: &std::path::Path) -> Sessions {
    let store = SqliteStore::open(SqliteConfig::new(path)).unwrap();
    Sessions::new(
        Arc::new(store) as Arc<dyn Store>,
        Arc::new(SystemClock),
        Arc::new(Registry::with_host_defaults()),
        SessionsConfig::default(),
    )
}

fn typed<T: EventData>(data: &T) -> EventDraft {
    EventDraft::typed(data).unwrap()
}

/// The child's body; a no-op unless the parent set `CHILD_ENV`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn crash_child_entry() {
    let Some(path) = std::env::var_os(CHILD_ENV) else {
        return;
    };
    let sessions = engine(std::path::Path::new(&path));
    let id = SessionId::new("crash").unwrap();
    let session = match sessions.open(&id).await {
        Ok(session) => session,
        Err(_) => sessions.create(Some(id), JsonObject::new()).await.unwrap(),
    };
    let mut stdout = std::io::stdout().lock();
    let mut acked = session.head();
    let mut turn = session.with_log(|log| log.state().last_turn);
    let text = "x".repeat(200);
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    while std::time::Instant::now() < deadline {
        turn += 1;
        let call_id = format!("call-{turn}");
        let mut message =
            Message::from_blocks(vec![ContentBlock::text(format!("prompt {turn} {text}"))]);
        message.source = Some(Source::user());
        let call = ContentBlock::ToolCall(ToolCallBlock {
            id: call_id.clone(),
            name: "t".into(),
            arguments: json!({"n": turn}),
            raw_arguments: None,
            extra: ccare_core::Extra::new(),
        });
        let result = ContentBlock::ToolResult(ToolResultBlock {
            call_id: call_id.clone(),
            name: "t".into(),
            content: vec![ContentBlock::text("ok")],
            is_error: false,
            extra: ccare_core::Extra::new(),
        });
        let drafts = vec![
            typed(&TurnStart { turn }),
            typed(&UserMessage { message }).with_surface(SurfaceOp::Append),
            typed(&StepStart { turn, step: 1 }),
            typed(&AssistantMessage {
                turn,
                step: 1,
                call_id: format!("llm-{turn}"),
                provider: "p".into(),
                model: "m".into(),
                message: Message::from_blocks(vec![call]),
                usage: None,
                finish: "tool-calls".into(),
                interrupted: false,
                stream: vec![],
            })
            .with_surface(SurfaceOp::Append),
            typed(&ToolCall {
                turn,
                step: 1,
                call_id: call_id.clone(),
                name: "t".into(),
                arguments: json!({}),
                executor: None,
            }),
            typed(&ToolResult {
                turn,
                step: 1,
                message: Message::from_blocks(vec![result]),
                error: None,
                meta: None,
                repair: false,
            })
            .with_surface(SurfaceOp::Append),
            typed(&StepEnd {
                turn,
                step: 1,
                interrupted: false,
                repair: false,
            }),
            typed(&TurnEnd {
                turn,
                reason: TurnEndReason::Completed,
                repair: false,
            }),
        ];
        for (index, draft) in drafts.into_iter().enumerate() {
            session.append(draft).unwrap();
            // Flush at the loop's durability points and sometimes in between.
            if index % 3 == 1 || index == 7 {
                session.flush().await.unwrap();
                let head = session.head();
                for seq in acked..head {
                    let event = session.event_at(seq).unwrap();
                    writeln!(stdout, "{seq}\t{}", event.raw_json()).unwrap();
                }
                stdout.flush().unwrap();
                acked = head;
            }
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn h_test_4_sigkill_loses_no_acknowledged_event() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("crash.db");
    let exe = std::env::current_exe().unwrap();
    let mut acked: Vec<(u64, String)> = Vec::new();
    let mut seed: u64 = 0x9e37_79b9_7f4a_7c15;
    for kill in 0..KILLS {
        let mut child = Command::new(&exe)
            .args([
                "--exact",
                "crash::crash_child_entry",
                "--nocapture",
                "--test-threads=1",
            ])
            .env(CHILD_ENV, &path)
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        let wait_ms = 30 + seed % 120;
        tokio::time::sleep(Duration::from_millis(wait_ms)).await;
        child.kill().unwrap();
        let stdout = child.stdout.take().unwrap();
        child.wait().unwrap();
        for line in std::io::BufReader::new(stdout).lines() {
            let line = line.unwrap();
            if let Some((seq, raw)) = line.split_once('\t')
                && let Ok(seq) = seq.parse::<u64>()
            {
                acked.push((seq, raw.to_owned()));
            }
        }
        let sessions = engine(&path);
        let id = SessionId::new("crash").unwrap();
        let Ok(loaded) = sessions.load(&id).await else {
            assert!(acked.is_empty(), "kill {kill}: session missing after acks");
            continue;
        };
        let events = loaded.log.events();
        for (index, event) in events.iter().enumerate() {
            assert_eq!(
                event.seq(),
                index as u64,
                "kill {kill}: seqs not contiguous"
            );
        }
        for (seq, raw) in &acked {
            let stored = loaded
                .log
                .event_at(*seq)
                .unwrap_or_else(|| panic!("kill {kill}: acked seq {seq} lost"));
            assert_eq!(stored.raw_json(), raw, "kill {kill}: seq {seq} changed");
        }
        // Reopening repairs an open turn; the next child continues from there.
        let session = sessions.open(&id).await.unwrap();
        assert_eq!(
            session.with_log(|log| log.state().open_turn),
            None,
            "kill {kill}: turn left open"
        );
        session.flush().await.unwrap();
        let repaired: Vec<(u64, String)> = session.with_log(|log| {
            log.events()[events.len()..]
                .iter()
                .map(|event| (event.seq(), event.raw_json().to_owned()))
                .collect()
        });
        acked.extend(repaired);
    }
    assert!(
        acked.len() > 100,
        "the children acknowledged too little to test anything: {}",
        acked.len()
    );
}
