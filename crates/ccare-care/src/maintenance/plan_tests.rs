//! The maintenance planner on plain inputs: no host, no session, no store. Each plan is
//! checked against what the executor would then do (CC-MNT-1, CC-MNT-6, CC-BND-2,
//! CC-DEEP-1, CC-DEEP-2).

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;

use ccare_core::kinds::ToolResult;
use ccare_core::{ContentBlock, Locale, Message, Role, Source, ToolCallBlock, ToolResultBlock};
use ccare_meter::Meter;
use ccare_session::{DerivedMessage, DerivedView};

use super::*;
use crate::config::RangeStrategy;
use crate::pricing::{FileTexts, FrozenPricing, ImagePricing, PricingBasis};

/// The meter's own estimate at scale 1, as a session without calibration prices.
fn frozen() -> Frozen {
    let meter = Meter::default();
    let pricing = FrozenPricing::capture(
        &meter,
        PricingBasis::meter_estimate(&meter),
        ImagePricing::FixedEstimate,
        FileTexts::default(),
    );
    Frozen {
        meter,
        pricing,
        tools_raw: 0,
        header_key: None,
        prices: None,
    }
}

fn text(role: Role, body: &str) -> (Role, Message) {
    (role, Message::from_blocks(vec![ContentBlock::text(body)]))
}

fn tool_call(id: &str) -> (Role, Message) {
    (
        Role::Assistant,
        Message::from_blocks(vec![ContentBlock::ToolCall(ToolCallBlock {
            id: id.to_owned(),
            name: "read_file".to_owned(),
            arguments: serde_json::json!({"path": "a.txt"}),
            raw_arguments: None,
            extra: Default::default(),
        })]),
    )
}

fn tool_result_message(id: &str, body: &str) -> Message {
    Message::from_blocks(vec![ContentBlock::ToolResult(ToolResultBlock {
        call_id: id.to_owned(),
        name: "read_file".to_owned(),
        content: vec![ContentBlock::text(body)],
        is_error: false,
        extra: Default::default(),
    })])
}

/// A surface of `messages` at seqs 10, 11, … (not starting at 0, so positions and seqs
/// differ).
fn view(messages: Vec<(Role, Message)>) -> DerivedView {
    let messages: Vec<DerivedMessage> = messages
        .into_iter()
        .enumerate()
        .map(|(index, (role, message))| DerivedMessage {
            seq: 10 + index as u64,
            role,
            message: Arc::new(message),
        })
        .collect();
    DerivedView {
        head: 10 + messages.len() as u64,
        replace_generation: 0,
        content_generation: 0,
        messages: messages.into(),
    }
}

/// Six long user/assistant exchanges: plenty of fresh history to summarize.
fn long_session() -> DerivedView {
    let body = "lorem ipsum dolor sit amet consectetur ".repeat(100);
    view(
        (0..6)
            .flat_map(|index| {
                [
                    text(Role::User, &format!("question {index}: {body}")),
                    text(Role::Assistant, &format!("answer {index}: {body}")),
                ]
            })
            .collect(),
    )
}

fn rank(load: u64, allow_fallback: bool) -> RankInput {
    RankInput {
        retain: 0,
        min_fresh_tokens: 0,
        load,
        release_target: 0,
        strategy: RangeStrategy::BasicPrefix,
        expected_checkpoint_tokens: None,
        allow_fallback,
    }
}

fn rest_inputs<'a>(
    view: &'a DerivedView,
    frozen: &'a Frozen,
    deep: bool,
    reduced_here: bool,
    summary_route: bool,
) -> RestInputs<'a> {
    RestInputs {
        deep,
        reduced_here,
        view,
        frozen,
        summary_route,
        rank: rank(20_000, false),
    }
}

fn outcome(plan: RestPlan) -> Option<RestOutcome> {
    match plan {
        RestPlan::Outcome(outcome) => Some(outcome),
        RestPlan::Deep { .. } | RestPlan::Summary { .. } => None,
    }
}

// ---------------------------------------------------------------------------------------
// Pruning

/// CC-MNT-1: only results the model has seen (before the latest assistant message) are
/// in scope, by position; without an assistant message nothing is.
#[test]
fn cc_mnt_1_the_prune_scope_ends_before_the_latest_assistant_message() {
    let surface = view(vec![
        text(Role::User, "q"),
        tool_call("c1"),
        (Role::User, tool_result_message("c1", "seen")),
        text(Role::Assistant, "a"),
        (Role::User, tool_result_message("c2", "not seen yet")),
    ]);
    let seqs: Vec<u64> = prune_scope(&surface).iter().map(|d| d.seq).collect();
    assert_eq!(seqs, [10, 11, 12]);
    let no_assistant = view(vec![(Role::User, tool_result_message("c1", "x"))]);
    assert!(prune_scope(&no_assistant).is_empty());
}

/// CC-MNT-1: a result over 8192 code points is planned with its head, marker and tail,
/// priced before and after; a result at the limit is not planned at all.
#[test]
fn cc_mnt_1_plan_prune_keeps_head_and_tail_of_long_results_only() {
    let frozen = frozen();
    let pricer = frozen.pricing.pricer(&frozen.meter).unwrap();
    let long = format!("{}{}", "a".repeat(PRUNE_ABOVE_CHARS), "z");
    let at_limit = "b".repeat(PRUNE_ABOVE_CHARS);
    let result = |message: Message| ToolResult {
        turn: 1,
        step: 1,
        message,
        error: None,
        meta: None,
        repair: false,
    };
    let steps = plan_prune(
        Locale::En,
        vec![
            (3, result(tool_result_message("c1", &at_limit))),
            (7, result(tool_result_message("c2", &long))),
        ],
        &pricer,
    );
    assert_eq!(steps.len(), 1);
    let step = &steps[0];
    assert_eq!(step.seq, 7);
    let ContentBlock::ToolResult(block) = &step.pruned.content[0] else {
        panic!("a tool result stays a tool result");
    };
    assert_eq!(block.call_id, "c2");
    let ContentBlock::Text(pruned) = &block.content[0] else {
        panic!("text");
    };
    assert_eq!(pruned.text, prune_text(Locale::En, &long));
    assert!(pruned.text.starts_with(&"a".repeat(PRUNE_KEEP_HEAD)));
    assert!(
        pruned
            .text
            .ends_with(&format!("{}z", "a".repeat(PRUNE_KEEP_TAIL - 1)))
    );
    let removed = PRUNE_ABOVE_CHARS + 1 - PRUNE_KEEP_HEAD - PRUNE_KEEP_TAIL;
    assert!(pruned.text.contains(&removed.to_string()));
    assert_eq!(
        step.before_tokens,
        pricer.message(&step.result.message).unwrap().text
    );
    assert_eq!(
        step.after_tokens,
        pricer.message(&step.pruned).unwrap().text
    );
    assert!(step.after_tokens < step.before_tokens);
}

// ---------------------------------------------------------------------------------------
// Automatic passes

/// CC-MNT-6: a pass runs only while armed, below the limit, with a summary route.
#[test]
fn cc_mnt_6_a_pass_needs_armed_a_free_pass_and_a_route() {
    assert!(pass_allowed(true, 0, 2, true));
    assert!(pass_allowed(true, 1, 2, true));
    assert!(!pass_allowed(true, 2, 2, true));
    assert!(!pass_allowed(false, 0, 2, true));
    assert!(!pass_allowed(true, 0, 2, false));
}

/// CC-MNT-6 with CC-SUM-1 / A29: with a proposal, an enabled pass summarizes it and a
/// disabled one names the range it would have summarized; with none, both stop.
#[test]
fn cc_mnt_6_plan_pass_summarizes_or_reports_the_disabled_range() {
    let frozen = frozen();
    let surface = long_session();
    let PassPlan::Summarize { nodes, proposal } =
        plan_pass(&surface, &frozen, true, &rank(20_000, true))
    else {
        panic!("a long session has something to summarize");
    };
    assert_eq!(nodes.len(), 12);
    let range = proposal.candidate.range();
    let PassPlan::Disabled(disabled) = plan_pass(&surface, &frozen, false, &rank(20_000, true))
    else {
        panic!("disabled with a proposal");
    };
    assert_eq!(disabled, range);
    let empty = view(Vec::new());
    assert!(matches!(
        plan_pass(&empty, &frozen, true, &rank(0, true)),
        PassPlan::Stop
    ));
    assert!(matches!(
        plan_pass(&empty, &frozen, false, &rank(0, true)),
        PassPlan::Stop
    ));
}

// ---------------------------------------------------------------------------------------
// Requested rest

/// CC-BND-2 R1, R2, R4, R5: the outcomes decided without running anything.
#[test]
fn cc_bnd_2_plan_rest_outcomes_that_run_nothing() {
    let frozen = frozen();
    let surface = long_session();
    // R1: a summary rest after a reduction at this boundary; a deep rest still runs.
    assert_eq!(
        outcome(plan_rest(rest_inputs(&surface, &frozen, false, true, true))),
        Some(RestOutcome::AlreadyReduced)
    );
    assert!(matches!(
        plan_rest(rest_inputs(&surface, &frozen, true, true, true)),
        RestPlan::Deep { .. }
    ));
    // R2: nothing clearable.
    let empty = view(Vec::new());
    assert_eq!(
        outcome(plan_rest(rest_inputs(&empty, &frozen, true, false, true))),
        Some(RestOutcome::DeepNothingToClear)
    );
    // R4: no summary route; a deep rest needs none.
    assert_eq!(
        outcome(plan_rest(rest_inputs(
            &surface, &frozen, false, false, false
        ))),
        Some(RestOutcome::NoProvider)
    );
    assert!(matches!(
        plan_rest(rest_inputs(&surface, &frozen, true, false, false)),
        RestPlan::Deep { .. }
    ));
    // R5: nothing worth summarizing.
    let short = view(vec![text(Role::User, "hi")]);
    assert_eq!(
        outcome(plan_rest(rest_inputs(&short, &frozen, false, false, true))),
        Some(RestOutcome::NoProposal)
    );
}

/// CC-BND-2 with CC-DEEP-1: a deep rest clears the whole surface (no system head), a
/// summary rest gets the same proposal an automatic pass would without fallback.
#[test]
fn cc_bnd_2_plan_rest_plans_a_deep_rest_or_a_summary() {
    let frozen = frozen();
    let surface = long_session();
    let RestPlan::Deep { shadowed, .. } =
        plan_rest(rest_inputs(&surface, &frozen, true, false, true))
    else {
        panic!("deep");
    };
    assert_eq!(shadowed, (10..22).collect::<Vec<u64>>());
    let RestPlan::Summary { proposal, .. } =
        plan_rest(rest_inputs(&surface, &frozen, false, false, true))
    else {
        panic!("summary");
    };
    let PassPlan::Summarize {
        proposal: automatic,
        ..
    } = plan_pass(&surface, &frozen, true, &rank(20_000, false))
    else {
        panic!("the same proposal");
    };
    assert_eq!(proposal, automatic);
}

// ---------------------------------------------------------------------------------------
// Deep rest

/// CC-DEEP-2: refused while a compaction is open, when the live slice of the selection
/// changed, and when it is empty; else the span's first and last seq. A message after
/// the selection is no change.
#[test]
fn cc_deep_2_check_deep_refusals_and_span() {
    let surface = view(vec![
        text(Role::User, "a"),
        text(Role::Assistant, "b"),
        text(Role::User, "c"),
    ]);
    let code = |result: Result<(u64, u64), SummaryFailure>| result.unwrap_err().code;
    assert_eq!(
        code(check_deep(true, &surface, &[10, 11])),
        "COMPACTION_BUSY"
    );
    assert_eq!(
        code(check_deep(false, &surface, &[10, 11, 99])),
        "HANDOFF_SOURCE_CHANGED"
    );
    let refused = check_deep(false, &surface, &[11, 10]).unwrap_err();
    assert_eq!(refused.message, "handoff source changed; history retained");
    assert_eq!(code(check_deep(false, &surface, &[])), "NOTHING_TO_CLEAR");
    assert_eq!(check_deep(false, &surface, &[10, 11]).unwrap(), (10, 11));
}

/// CC-DEEP-2: the checkpoint is the handoff then the ledger, sourced as a
/// context-care checkpoint with its trace; the selected tokens are the cleared nodes'
/// and a handoff as large as the history is refused.
#[test]
fn cc_deep_2_plan_deep_builds_and_prices_the_checkpoint() {
    let frozen = frozen();
    let surface = long_session();
    let nodes = crate::range_nodes::nodes(&surface, &frozen).unwrap();
    let rest = Message::from_blocks(vec![ContentBlock::text("note"), ContentBlock::text("next")]);
    let shadowed: Vec<u64> = (10..14).collect();
    let plan = plan_deep(DeepInputs {
        frozen: &frozen,
        nodes: &nodes,
        view: &surface,
        shadowed: &shadowed,
        rest: &rest,
        ledger: Some("done: a".to_owned()),
        compaction_id: "cmp-1",
        operation_id: "op-1",
    })
    .unwrap();
    assert_eq!(plan.handoff, "note\nnext");
    assert_eq!(plan.replacement.joined_text("|"), "note\nnext|done: a");
    let Some(Source::CompactCheckpoint {
        compaction_id,
        producer,
        trace,
        ..
    }) = &plan.replacement.source
    else {
        panic!("a checkpoint");
    };
    assert_eq!(
        (compaction_id.as_str(), producer.as_str()),
        ("cmp-1", "context-care")
    );
    assert_eq!(
        trace.as_deref(),
        Some(&serde_json::json!({"trigger": "deep-rest", "operationId": "op-1"}))
    );
    let selected: u64 = nodes[..4].iter().map(|node| node.tokens).sum();
    assert_eq!(plan.selected, selected);
    assert!(plan.heuristic > 0);
    assert!(plan.replacement_tokens < plan.selected);
    assert!(!plan.is_larger_than_history());
    let short = view(vec![text(Role::User, "x")]);
    let short_nodes = crate::range_nodes::nodes(&short, &frozen).unwrap();
    let larger = plan_deep(DeepInputs {
        frozen: &frozen,
        nodes: &short_nodes,
        view: &short,
        shadowed: &[10],
        rest: &rest,
        ledger: None,
        compaction_id: "cmp-2",
        operation_id: "op-2",
    })
    .unwrap();
    assert!(larger.is_larger_than_history());
}
