//! CC-EXT-3 one-step undo of a compaction: a deep rest (no model call) replaces the
//! history, then `ContextCare::undo` appends a `compaction/undo` restore, the
//! shadowed events are live again and the next request carries them; refused over
//! the soft threshold and when done twice; the log replays (what `sessions check`
//! audits) to the same surface.

use ccare_care::undo::UndoError;
use ccare_core::kinds::{COMPACTION_UNDO, USER_MESSAGE};
use ccare_core::{ContentBlock, SurfaceOp};
use serde_json::json;

use crate::rest::{lorem, note, rest_call, text};
use crate::rig::{Rig, rig};

/// A session with a committed deep rest over a `lorem(prompt)` prompt, on `window`.
async fn deep_rested(window: u64, prompt: usize, after: &[&str]) -> (Rig, String) {
    let recovery = format!("search the log for 'lorem'. {}", note(1000));
    let mut script = vec![
        r#"{"text": "read it"}"#.to_owned(),
        rest_call(json!({"note": note(1200), "deep": true, "recovery": recovery})),
        r#"{"text": "continuing"}"#.to_owned(),
    ];
    script.extend(after.iter().map(|line| (*line).to_owned()));
    let rig = rig(&script.join("\n"), json!({}), Some(window), true).await;
    rig.turn(&lorem(prompt)).await;
    rig.turn("now rest deeply").await;
    let action = rig.actions().await.pop().unwrap();
    assert_eq!(action["action"], "deep-rest");
    assert_eq!(action["outcome"], "committed");
    let op = action["operationId"].as_str().unwrap().to_owned();
    (rig, op)
}

fn carries(messages: impl IntoIterator<Item = ContentBlock>, wanted: &str) -> bool {
    messages
        .into_iter()
        .any(|block| block == ContentBlock::text(wanted))
}

#[tokio::test]
async fn cc_ext_3_undo_restores_the_shadowed_events_and_the_next_request_carries_them() {
    let (rig, op) = deep_rested(64_000, 800, &[r#"{"text": "restored"}"#]).await;
    let checkpoint_seq = rig.events("compaction/summary")[0].0 + 1;
    let shadowed: Vec<u64> = rig.events("compaction/summary")[0].1["shadowed_seqs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|seq| seq.as_u64().unwrap())
        .collect();
    let live_before = rig.session.with_log(|log| log.live_seqs());
    assert!(live_before.contains(&checkpoint_seq));
    let head = rig.session.head();

    let outcome = rig.care.undo(&rig.session, &op).await.unwrap().unwrap();
    assert_eq!(outcome.undoes, op);
    assert_eq!(outcome.restored_seqs, vec![checkpoint_seq]);
    assert_eq!(outcome.revived_seqs, shadowed);
    assert_eq!(outcome.undo_seqs, vec![head], "one restore appended");
    assert!(outcome.after_input > outcome.before_input, "{outcome:?}");
    assert!(i64::try_from(outcome.after_input).unwrap() <= outcome.soft_input);

    // The restore in the log: cites the checkpoint, carries Restore, deletes nothing.
    let undo = rig.session.event_at(head).unwrap();
    assert_eq!(undo.kind(), COMPACTION_UNDO);
    assert_eq!(
        undo.surface(),
        Some(SurfaceOp::Restore {
            replace_seq: checkpoint_seq
        })
    );
    assert_eq!(undo.source_event_seqs(), [checkpoint_seq]);
    assert_eq!(
        rig.events(COMPACTION_UNDO)[0].1,
        json!({"operation_id": op, "replace_seq": checkpoint_seq})
    );
    let live = rig.session.with_log(|log| log.live_seqs());
    assert!(
        !live.contains(&checkpoint_seq),
        "the checkpoint left the surface"
    );
    assert!(shadowed.iter().all(|seq| live.contains(seq)), "{live:?}");
    assert_eq!(rig.session.head(), head + 1);

    // The next request carries the prompt again and no handoff.
    rig.turn("go on").await;
    let last = rig.script.requests().pop().unwrap();
    let blocks: Vec<ContentBlock> = last
        .config
        .messages
        .iter()
        .map(|message| message.message.content[0].clone())
        .collect();
    assert!(carries(blocks.clone(), &lorem(800)), "the prompt is back");
    let handoff = rig
        .events(USER_MESSAGE)
        .into_iter()
        .find(|(seq, _)| *seq == checkpoint_seq)
        .map(|(_, data)| text(&data["message"]).to_owned())
        .unwrap();
    assert!(!carries(blocks, &handoff), "the checkpoint is gone");

    // Journaled as an undo.
    let record = rig
        .actions()
        .await
        .into_iter()
        .find(|data| data["action"] == "undo")
        .unwrap();
    assert_eq!(record["undoes"], op.as_str());
    assert_eq!(record["outcome"], "committed");
    assert_eq!(record["operationId"], outcome.operation_id.as_str());
    assert_eq!(record["restoredSeqs"], json!([checkpoint_seq]));
    assert_eq!(record["beforeInput"], outcome.before_input);
    assert_eq!(record["afterInput"], outcome.after_input);

    // The stored log replays to the same surface, with no violation (`sessions check`).
    let loaded = rig.sessions.load(rig.session.id()).await.unwrap();
    assert!(loaded.violations.is_empty(), "{:?}", loaded.violations);
    assert_eq!(
        loaded.log.live_seqs(),
        rig.session.with_log(|log| log.live_seqs())
    );
}

#[tokio::test]
async fn cc_ext_3_a_second_undo_is_refused_and_appends_nothing() {
    let (rig, op) = deep_rested(64_000, 800, &[]).await;
    rig.care.undo(&rig.session, &op).await.unwrap().unwrap();
    let head = rig.session.head();
    let error = rig.care.undo(&rig.session, &op).await.unwrap().unwrap_err();
    assert_eq!(error.code(), "ALREADY_UNDONE");
    assert!(matches!(error, UndoError::AlreadyUndone { seq, .. } if seq == head - 1));
    assert_eq!(
        error.to_string(),
        format!("action {op} was already undone (seq {})", head - 1)
    );
    assert_eq!(rig.session.head(), head);
    assert_eq!(
        rig.actions()
            .await
            .iter()
            .filter(|data| data["action"] == "undo")
            .count(),
        1
    );
    let error = rig
        .care
        .undo(&rig.session, "no-such-op")
        .await
        .unwrap()
        .unwrap_err();
    assert_eq!(error.code(), "UNKNOWN_ACTION");
    assert!(error.is_refusal());
    // The undo record itself is not undoable.
    let undo_op = rig
        .actions()
        .await
        .into_iter()
        .find(|data| data["action"] == "undo")
        .unwrap()["operationId"]
        .as_str()
        .unwrap()
        .to_owned();
    let error = rig
        .care
        .undo(&rig.session, &undo_op)
        .await
        .unwrap()
        .unwrap_err();
    assert_eq!(error.code(), "NOTHING_TO_UNDO");
}

#[tokio::test]
async fn cc_ext_3_an_undo_over_the_soft_threshold_is_refused() {
    // S = floor(0.8 · 16000) = 12800: after the deep rest a ~9k-token prompt keeps the
    // load under S, but bringing the ~5k-token history back would pass it.
    let (rig, op) = deep_rested(16_000, 800, &[r#"{"text": "big"}"#]).await;
    rig.turn(&lorem(1300)).await;
    assert!(
        rig.actions().await.len() == 1,
        "no maintenance ran after the deep rest: {:?}",
        rig.actions().await
    );
    let head = rig.session.head();
    let live = rig.session.with_log(|log| log.live_seqs());
    let error = rig.care.undo(&rig.session, &op).await.unwrap().unwrap_err();
    assert_eq!(error.code(), "UNDO_OVER_SOFT_THRESHOLD");
    let UndoError::OverSoftThreshold {
        restored_input,
        soft_input,
        ..
    } = &error
    else {
        panic!("{error:?}");
    };
    assert_eq!(*soft_input, 12_800);
    assert!(*restored_input > 12_800, "{restored_input}");
    assert_eq!(
        error.to_string(),
        format!(
            "undoing {op} would bring the next request to {restored_input} tokens, over the soft threshold 12800; history stays compacted"
        )
    );
    assert_eq!(rig.session.head(), head, "nothing appended");
    assert_eq!(rig.session.with_log(|log| log.live_seqs()), live);
    assert_eq!(rig.actions().await.len(), 1, "a refusal is not journaled");
}

#[tokio::test]
async fn cc_ext_3_only_the_latest_compaction_can_be_undone_then_the_one_before() {
    let recovery = format!("search the log for 'lorem'. {}", note(1000));
    let rest = rest_call(json!({"note": note(1200), "deep": true, "recovery": recovery}));
    let (rig, first) = deep_rested(
        64_000,
        400,
        &[
            r#"{"text": "read again"}"#,
            &rest,
            r#"{"text": "continuing"}"#,
        ],
    )
    .await;
    rig.turn(&lorem(300)).await;
    rig.turn("rest deeply again").await;
    let actions = rig.actions().await;
    assert_eq!(actions.len(), 2, "{actions:?}");
    assert_eq!(actions[1]["outcome"], "committed");
    let second = actions[1]["operationId"].as_str().unwrap().to_owned();
    let checkpoint = actions[0]["replacements"][0]["newSeq"].as_u64().unwrap();

    let head = rig.session.head();
    let error = rig
        .care
        .undo(&rig.session, &first)
        .await
        .unwrap()
        .unwrap_err();
    assert_eq!(error.code(), "UNDO_NOT_LATEST");
    assert_eq!(
        error.to_string(),
        format!(
            "action {first} is not the latest undoable compaction: its replace node {checkpoint} is no longer on the surface; undo the later one first"
        )
    );
    assert_eq!(rig.session.head(), head);

    // Undo the later one: the first checkpoint is live again, and now undoable.
    rig.care.undo(&rig.session, &second).await.unwrap().unwrap();
    assert!(
        rig.session
            .with_log(|log| log.live_seqs())
            .contains(&checkpoint)
    );
    let outcome = rig.care.undo(&rig.session, &first).await.unwrap().unwrap();
    assert_eq!(outcome.restored_seqs, vec![checkpoint]);
    let live = rig.session.with_log(|log| log.live_seqs());
    assert!(
        live.contains(&1),
        "the first prompt is live again: {live:?}"
    );
    let loaded = rig.sessions.load(rig.session.id()).await.unwrap();
    assert!(loaded.violations.is_empty(), "{:?}", loaded.violations);
    assert_eq!(loaded.log.live_seqs(), live);
}
