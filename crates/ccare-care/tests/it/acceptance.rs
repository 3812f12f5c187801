//! Acceptance scenarios of spec §12 with their exact numbers (A12, A13, A15).
//!
//! A12 runs through the whole composition (the rig: SQLite, the scripted provider, the
//! mounted plugin) and reads everything back from the log, the provider's recorded
//! requests and the journal. A15's first half (a handoff larger than the history) is
//! `rest::a15_a_handoff_larger_than_the_history_keeps_it_and_writes_no_events`; its second
//! half (the span changed between selection and apply) cannot be reached through a
//! composition, so it is a unit test beside `Care::deep_rest`
//! (`maintenance::tests::a15_cc_deep_2_a_changed_span_is_handoff_source_changed`).
//!
//! `plugin_messages` and `text` come from `rest.rs`; `rest_call` here differs from
//! its namesake there by pinning the scripted usage (see [`pinned_usage`]).

use ccare_care::texts::{CHECKPOINT_FRAMING, EN_REST};
use ccare_care::{REQUEST_SOURCE, RouteSnapshot, STATE_SOURCE};
use ccare_core::kinds::{TurnEndReason, UserMessage};
use ccare_core::{ContentBlock, EventDraft, Message, SurfaceOp};
use ccare_llm::Purpose;
use ccare_meter::Meter;
use serde_json::{Value, json};

use crate::rest::{plugin_messages, text};
use crate::rig::{rig, rig_with};

/// A12's capacity `C`: the model's context window.
const CAPACITY_TOKENS: u64 = 10_000;
/// A12's price of each of users 0–2.
const USER_TOKENS: u64 = 2_000;
/// The rig's `max_output_tokens` on `s/small`, i.e. `R` (CC-BUD-1, adapter default).
const RIG_OUTPUT_TOKENS: i64 = 1_000;

const SUMMARY: &str = "## Primary Request and Intent\n- read the seeded history\n## Key Technical Concepts\n(none)\n## Files and Code\n(none)\n## Errors and Fixes\n(none)\n## Pending Jobs\n(none)\n## Current Work\n- resting\n## Next Step\n- continue\n## Critical Context\n(none)";

/// Usage the scripted conversation replies report: below any request's raw input, so
/// no journal record is a usable calibration sample (CC-PRC-3 skips `prompt < raw`)
/// and the frozen text scale stays exactly 1. Every boundary then prices a node as the
/// heuristic meter does, and the sizes measured below are the sizes the boundary sees.
/// (The scripted default, 4 characters a token, would calibrate the scale away from 1
/// and make "2000" depend on the tool schemas' character mix.)
fn pinned_usage() -> Value {
    json!({"input": 1, "output": 1})
}

fn rest_call(arguments: Value) -> String {
    json!({
        "tool_calls": [{"name": "context_rest", "arguments": arguments}],
        "usage": pinned_usage(),
    })
    .to_string()
}

fn user_message(text: &str) -> Message {
    Message::from_blocks(vec![ContentBlock::text(text)])
}

/// The text of a user message that prices at exactly `tokens` on the plugin's meter
/// (the route has no tokenizer, so it is the H-TOK-1 heuristic at default weights,
/// H-TOK-2 message overhead included): the shortest prefix of a repeated English sentence that reaches
/// `tokens`. No character weighs a whole token, so the first prefix to reach it prices
/// at exactly `tokens`; the caller asserts that as well.
fn user_message_of(tag: &str, tokens: u64) -> String {
    let meter = Meter::default();
    let long = format!(
        "Seeded history, user message {tag}. {}",
        "The quick brown fox jumps over the lazy dog while the parser reads its input. "
            .repeat(usize::try_from(tokens).unwrap())
    );
    let price = |length: usize| meter.message(&user_message(&long[..length]));
    assert!(
        price(long.len()) >= tokens,
        "the source text is long enough"
    );
    // The price never falls as the prefix grows: binary search for the first length
    // that reaches `tokens`.
    let (mut low, mut high) = (0, long.len());
    while low < high {
        let middle = (low + high) / 2;
        if price(middle) >= tokens {
            high = middle;
        } else {
            low = middle + 1;
        }
    }
    long[..low].to_owned()
}

/// A12 (CC-BND-1, CC-BND-2 R7, CC-NTC-1), with the spec's numbers: users 0–2 at 2000
/// tokens each, `C = 10000`. The model calls `context_rest` with a valid note; at the
/// next boundary exactly one summary request goes out, the checkpoint commits over
/// users 0–1, the last message of the next conversation request is the state notice
/// with the R7 line, and the rest message rides in that request verbatim.
///
/// Users 0–2 are seeded as the session's first three events (seqs 0, 1, 2, as an
/// imported history would be) through `Session::append`, the one write path, so the
/// spec's "users 0–2" are literally seqs 0–2. Their texts are sized with the plugin's
/// own meter (`user_message_of`), then checked through the plugin's fresh report
/// before the turn (Q = 3 × 2000 with no journal yet) and at the boundary itself (the
/// committed summary's `shadowed_tokens`, the boundary's frozen prices of users 0–1, is
/// 2 × 2000).
///
/// The budget at `C = 10000` with the rig's `R = 1000` and default config (CC-BUD-1):
/// `H = 9000`, `S = L = floor(0.8 · 10000) = 8000`, `tail = floor(0.16 · 9000) = 1440`.
/// No request reaches `S`, so automatic maintenance never runs; the requested rest walks
/// back from the end until 1440 tokens are retained, which keeps user 2 (2000 ≥ 1440),
/// and proposes users 0–1 (4000 fresh tokens ≥ `min_fresh_tokens` 1024).
#[tokio::test]
async fn a12_a_requested_rest_at_c_10000_commits_one_summary_and_reports_r7_last() {
    let note = format!("Goal: keep the parser work going. {}", "n".repeat(1200));
    let script = [
        rest_call(json!({"note": note})),
        json!({"expect": {"purpose": "compaction"}, "text": SUMMARY}).to_string(),
        json!({"text": "continuing", "usage": pinned_usage()}).to_string(),
    ]
    .join("\n");
    let rig = rig(&script, json!({}), Some(CAPACITY_TOKENS), true).await;

    // Users 0–2 at 2000 tokens each, seqs 0–2.
    let users: Vec<String> = (0..3)
        .map(|index| user_message_of(&index.to_string(), USER_TOKENS))
        .collect();
    for (index, user) in users.iter().enumerate() {
        assert_eq!(
            Meter::default().message(&user_message(user)),
            USER_TOKENS,
            "user {index} prices at exactly 2000"
        );
        let draft = EventDraft::typed(&UserMessage {
            message: user_message(user),
        })
        .unwrap()
        .with_surface(SurfaceOp::Append);
        let event = rig.session.append(draft).unwrap();
        assert_eq!(event.seq(), u64::try_from(index).unwrap());
    }
    rig.session.flush().await.unwrap();

    // The plugin's own fresh sample agrees: Q = 6000 (no journal yet: no tool tokens, the
    // meter's basis at scale 1), and the budget is the one computed above.
    let before = rig.care.report(&rig.session).await.unwrap().unwrap();
    assert_eq!(before.input_tokens, 3 * USER_TOKENS);
    assert_eq!(before.calibration, "heuristic");
    assert!((before.text_scale - 1.0).abs() < f64::EPSILON);
    let budget = before.budget.as_ref().unwrap();
    assert_eq!(budget.capacity, 10_000);
    assert_eq!(budget.max_tokens, RIG_OUTPUT_TOKENS);
    assert_eq!(budget.hard_input, 9_000);
    assert_eq!(budget.soft_input, 8_000);
    assert_eq!(budget.release_target, 8_000);
    assert_eq!(budget.tail, 1_440);
    assert!(!before.armed);

    assert_eq!(
        rig.turn("please take a rest now").await,
        Some(TurnEndReason::Completed)
    );

    // Exactly one summary request (purpose compaction), between the two conversation
    // requests; nothing else went out.
    let requests = rig.script.requests();
    let purposes: Vec<Purpose> = requests
        .iter()
        .map(|request| request.config.purpose)
        .collect();
    assert_eq!(
        purposes,
        [
            Purpose::Conversation,
            Purpose::Compaction,
            Purpose::Conversation
        ]
    );
    // The summary request carries users 0 and 1 (the selection), not user 2 (retained).
    let summary_request = serde_json::to_string(
        &requests[1].config.messages[..]
            .iter()
            .map(|message| serde_json::to_value(&*message.message).unwrap())
            .collect::<Vec<_>>(),
    )
    .unwrap();
    assert!(summary_request.contains(&users[0]));
    assert!(summary_request.contains(&users[1]));
    assert!(!summary_request.contains(&users[2]), "user 2 is retained");

    // The checkpoint committed over users 0–1 (CC-SUM-5), priced at the boundary's
    // frozen basis as 2 × 2000.
    let kinds = rig.compaction_kinds();
    assert_eq!(
        kinds,
        ["compaction/start", "compaction/summary", "compaction/end"]
    );
    assert_eq!(rig.events("compaction/start")[0].1["trigger"], "requested");
    let summary_event = &rig.events("compaction/summary")[0].1;
    assert_eq!(summary_event["summary"], SUMMARY);
    assert_eq!(summary_event["shadowed_seqs"], json!([0, 1]));
    assert_eq!(summary_event["shadowed_range"], json!([0, 1]));
    assert_eq!(summary_event["shadowed_tokens"], 2 * USER_TOKENS);
    assert_eq!(rig.events("compaction/end")[0].1.get("error"), None);
    let checkpoint = rig
        .user_messages()
        .into_iter()
        .find(|message| message["source"]["kind"] == "compact-checkpoint")
        .unwrap();
    assert_eq!(checkpoint["content"][0]["text"], CHECKPOINT_FRAMING);
    assert_eq!(checkpoint["source"]["trace"]["reason"], "requested");
    assert_eq!(checkpoint["source"]["trace"]["sourceSeqs"], json!([0, 1]));

    // The journal holds one maintenance action: the requested summary, committed.
    let journal = rig.journal().await;
    let actions = rig.actions().await;
    assert_eq!(actions.len(), 1, "{actions:#?}");
    assert_eq!(actions[0]["action"], "summary");
    assert_eq!(actions[0]["reason"], "requested");
    assert_eq!(actions[0]["outcome"], "committed");
    assert_eq!(actions[0]["sourceSeqs"], json!([0, 1]));
    assert!(actions[0]["afterInput"].as_u64() < actions[0]["beforeInput"].as_u64());
    // Both conversation requests stayed below S, so the controller never armed and the
    // summary above is the requested one alone.
    let conversation_inputs: Vec<u64> = journal
        .iter()
        .filter(|(key, record)| {
            key.starts_with("call_") && record["data"]["purpose"] == "conversation"
        })
        .map(|(_, record)| record["data"]["inputTokens"].as_u64().unwrap())
        .collect();
    assert_eq!(conversation_inputs.len(), 2);
    assert!(
        conversation_inputs
            .iter()
            .all(|input| i64::try_from(*input).unwrap() < budget.soft_input),
        "{conversation_inputs:?}"
    );

    // The next conversation request: checkpoint first, user 2 verbatim, and it ends with
    // the rest message and then the state notice (CC-NTC-1: last in the batch).
    let next: Vec<Value> = requests[2]
        .config
        .messages
        .iter()
        .map(|message| serde_json::to_value(&*message.message).unwrap())
        .collect();
    assert_eq!(next[0]["source"]["kind"], "compact-checkpoint");
    assert_eq!(next[1]["content"][0]["text"], users[2].as_str());
    for user in &users[..2] {
        assert!(
            next.iter()
                .all(|message| message["content"][0]["text"] != user.as_str()),
            "users 0–1 are shadowed"
        );
    }
    let notice = next.last().unwrap();
    assert_eq!(notice["source"]["kind"], STATE_SOURCE);
    assert_eq!(notice["source"]["form"], "notice");
    assert_eq!(notice["source"]["summary"], "Context state");
    let trace = &notice["source"]["contextCareTrace"];
    assert_eq!(trace["trigger"], "rest-result");
    assert_eq!(trace["outcome"], "committed");
    let lines: Vec<&str> = text(notice).lines().collect();
    assert!(
        lines.contains(&EN_REST.outcome_committed),
        "the R7 line: {lines:#?}"
    );
    assert_eq!(
        EN_REST.outcome_committed,
        "Rest outcome: earlier history was summarized; the recent part and your note are kept."
    );
    // The rest message stays verbatim (R7): the logged one, unchanged, right before the
    // notice.
    let rests = plugin_messages(&rig, REQUEST_SOURCE);
    assert_eq!(rests.len(), 1);
    let rest = &rests[0];
    assert_eq!(
        text(rest),
        format!("{}\n{note}", EN_REST.note_header),
        "the note as written"
    );
    assert_eq!(
        &next[next.len() - 2],
        rest,
        "the rest message is kept verbatim"
    );
    // And the log's last state notice is the same message.
    assert_eq!(plugin_messages(&rig, STATE_SOURCE).last().unwrap(), notice);

    // The frozen scale stayed 1 throughout (no usable calibration sample).
    let after = rig.care.report(&rig.session).await.unwrap().unwrap();
    assert_eq!(after.calibration, "uncalibrated-estimate");
    assert!((after.text_scale - 1.0).abs() < f64::EPSILON);
}

/// A13's last clause (CC-MNT-2, CC-BUD-1): with the capacity unknown there is no
/// budget, so a boundary alone never compacts or prunes; only an explicit rest can
/// (its range vectors are `range::tests`' `cc_mnt_2_vector_explicit_rest_unknown_capacity`).
/// The history grows past what `S` would be at the provider's real window (the
/// scripted adapter's 16,000: `S` 12,800, `H` 15,000, where `cc_mnt_6_…` compacts),
/// while staying under its `H` so the gate, which prices the real route, never refuses.
#[tokio::test]
async fn a13_with_unknown_capacity_a_boundary_alone_compacts_nothing() {
    const TURNS: usize = 6;
    let script: Vec<String> = (0..TURNS)
        .map(|_| json!({"text": "ok"}).to_string())
        .collect();
    // The plugin is handed a route whose capacity is unknown, as for a model nobody
    // configured (the adapter itself still knows its window).
    let rig = rig_with(
        &script.join("\n"),
        json!({"quiet_start": false}),
        None,
        &|care| {
            care.with_route(RouteSnapshot {
                provider: "s".to_owned(),
                model: "small".to_owned(),
                context_window: None,
                max_output_tokens: None,
                image_tokens: ccare_meter::DEFAULT_IMAGE_TOKENS,
                tokenizer: None,
            })
        },
    )
    .await;
    for index in 0..TURNS {
        let prompt = user_message_of(&index.to_string(), 2_200);
        assert_eq!(rig.turn(&prompt).await, Some(TurnEndReason::Completed));
    }
    let requests = rig.script.requests();
    assert_eq!(requests.len(), TURNS);
    assert!(
        requests
            .iter()
            .all(|request| request.config.purpose == Purpose::Conversation),
        "no summary call"
    );
    let kinds = rig.compaction_kinds();
    assert!(kinds.is_empty(), "{kinds:?}");
    // The last request carries every prompt, at a size a known capacity would compact.
    let last = requests.last().unwrap();
    let prompts = last
        .config
        .messages
        .iter()
        .filter(|message| {
            text_of(&message.message).is_some_and(|text| text.starts_with("Seeded history"))
        })
        .count();
    assert_eq!(prompts, TURNS);
    let journal = rig.journal().await;
    assert!(
        journal.iter().all(|(key, _)| !key.starts_with("action_")),
        "no maintenance action"
    );
    let largest = journal
        .iter()
        .filter_map(|(_, record)| record["data"]["inputTokens"].as_u64())
        .max()
        .unwrap();
    assert!(largest > 12_800, "past S at the real window: {largest}");
    // The model was told its capacity is unknown, never a level.
    let notice = plugin_messages(&rig, STATE_SOURCE).pop().unwrap();
    assert!(
        text(&notice).contains(ccare_care::texts::EN.uncalibrated),
        "{}",
        text(&notice)
    );
}

fn text_of(message: &Message) -> Option<&str> {
    match message.content.first() {
        Some(ContentBlock::Text(text)) => Some(text.text.as_str()),
        _ => None,
    }
}
