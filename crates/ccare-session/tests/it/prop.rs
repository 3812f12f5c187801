//! H-TEST-3: random appends and replaces; the incrementally kept derived view equals a
//! naive model and a from-scratch replay after every step; export → import → export is
//! identical.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use std::sync::Arc;

use ccare_core::kinds::*;
use ccare_core::*;
use ccare_session::*;
use ccare_store::{SqliteConfig, SqliteStore, Store};
use proptest::prelude::*;

#[derive(Debug, Clone)]
enum Op {
    User(String),
    Assistant(String),
    Replace(usize, usize),
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        "[a-z ]{0,12}".prop_map(Op::User),
        "[a-z]{0,6}".prop_map(Op::Assistant),
        (0usize..64, 0usize..64).prop_map(|(a, b)| Op::Replace(a, b)),
    ]
}

fn text_of(message: &Message) -> String {
    message
        .content
        .iter()
        .filter_map(|block| match block {
            ContentBlock::Text(text) => Some(text.text.clone()),
            _ => None,
        })
        .collect()
}

fn user(text: &str) -> EventDraft {
    EventDraft::typed(&UserMessage {
        message: Message::from_blocks(vec![ContentBlock::text(text)]),
    })
    .unwrap()
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    #[test]
    fn h_surf_4_incremental_view_matches_naive_model(ops in proptest::collection::vec(op(), 1..40)) {
        let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
        runtime.block_on(async move {
            let dir = tempfile::tempdir().unwrap();
            let store: Arc<dyn Store> = Arc::new(SqliteStore::open(SqliteConfig::new(dir.path().join("p.db"))).unwrap());
            let registry = Arc::new(Registry::with_host_defaults());
            let sessions = Sessions::new(store, Arc::new(ManualClock::new(5)), registry.clone(), SessionsConfig::default());
            let session = sessions.create(None, JsonObject::new()).await.unwrap();
            session.append(EventDraft::typed(&TurnStart { turn: 1 }).unwrap()).unwrap();
            session.append(EventDraft::typed(&StepStart { turn: 1, step: 1 }).unwrap()).unwrap();
            // The naive model: live (seq, derived text or None) in surface order.
            let mut model: Vec<(u64, Option<String>)> = Vec::new();
            for op in ops {
                let seq = session.head();
                match op {
                    Op::User(text) => {
                        session.append(user(&text).with_surface(SurfaceOp::Append)).unwrap();
                        model.push((seq, Some(text)));
                    }
                    Op::Assistant(text) => {
                        let data = AssistantMessage { turn: 1, step: 1, call_id: "c".into(), provider: "p".into(), model: "m".into(), message: Message::from_blocks(vec![ContentBlock::text(text.clone())]), usage: None, finish: "stop".into(), interrupted: false, stream: vec![] };
                        session.append(EventDraft::typed(&data).unwrap().with_surface(SurfaceOp::Append)).unwrap();
                        model.push((seq, (!text.is_empty()).then_some(text)));
                    }
                    Op::Replace(a, b) => {
                        if model.is_empty() { continue; }
                        let (start, end) = (a % model.len(), b % model.len());
                        let (start, end) = (start.min(end), start.max(end));
                        let shadowed: Vec<u64> = model[start..=end].iter().map(|(seq, _)| *seq).collect();
                        let draft = user("checkpoint").with_surface(SurfaceOp::Replace { start_seq: shadowed[0], end_seq: shadowed[shadowed.len() - 1] }).with_sources(shadowed);
                        session.append(draft).unwrap();
                        model.splice(start..=end, [(seq, Some("checkpoint".to_owned()))]);
                    }
                }
                let view = session.derived_view();
                let got: Vec<(u64, String)> = view.messages.iter().map(|m| (m.seq, text_of(&m.message))).collect();
                let want: Vec<(u64, String)> = model.iter().filter_map(|(seq, text)| text.clone().map(|t| (*seq, t))).collect();
                assert_eq!(got, want);
                let live: Vec<u64> = model.iter().map(|(seq, _)| *seq).collect();
                assert_eq!(session.with_log(SessionLog::live_seqs), live);
            }
            // A from-scratch replay of the stored log derives the same view.
            let loaded = sessions.load(session.id()).await.unwrap();
            let fresh: Vec<u64> = loaded.log.derived_messages().iter().map(|m| m.seq).collect();
            let incremental: Vec<u64> = session.derived_view().messages.iter().map(|m| m.seq).collect();
            assert_eq!(fresh, incremental);
            // export → import → export is identical.
            let mut first = Vec::new();
            sessions.export(session.id(), &mut first).await.unwrap();
            let other = tempfile::tempdir().unwrap();
            let store2: Arc<dyn Store> = Arc::new(SqliteStore::open(SqliteConfig::new(other.path().join("q.db"))).unwrap());
            let sessions2 = Sessions::new(store2, Arc::new(ManualClock::new(5)), registry, SessionsConfig::default());
            let record = sessions2.import(&first).await.unwrap();
            let mut second = Vec::new();
            sessions2.export(&record.id, &mut second).await.unwrap();
            assert_eq!(first, second);
        });
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    /// Untrusted input never panics: arbitrary bytes and near-valid lines through the
    /// import framing, the envelope parser and the replay.
    #[test]
    fn untrusted_import_input_never_panics(
        bytes in proptest::collection::vec(any::<u8>(), 0..512),
        line in "\\{\"seq\":[0-9],\"time_ms\":-?[0-9]{1,3},\"type\":\"(turn/start|user/message|tool/result|x)\",\"data\":\\{(\"turn\":[0-9-.e]{1,4})?\\}(,\"surface\":\\{\"op\":\"(append|replace)\"(,\"start_seq\":[0-9],\"end_seq\":[0-9])?\\})?\\}",
    ) {
        let _ = ccare_session::jsonl::parse_file(&bytes);
        let _ = Event::parse(String::from_utf8_lossy(&bytes).into_owned());
        let _ = ccare_core::json::check_text(&String::from_utf8_lossy(&bytes));
        let registry = Registry::with_host_defaults();
        let id = SessionId::new("fuzz").unwrap();
        let _ = replay(&id, [line.clone(), line], &registry, &LoadPolicy::default());
        let file = format!("{{\"format\":\"context-care.session\",\"version\":1,\"id\":\"f\",\"created_ms\":0,\"meta\":{{}}}}\n{}\n", String::from_utf8_lossy(&bytes));
        if let Ok(parsed) = ccare_session::jsonl::parse_file(file.as_bytes()) {
            let _ = replay(&id, parsed.lines.iter().copied(), &registry, &LoadPolicy { strict: true, ..LoadPolicy::default() });
        }
    }
}
