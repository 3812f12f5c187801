//! Untrusted input never panics (a config file is input): any `ccare.toml` built from
//! the keys the host, the store, the loop, a model, context care and stream watch's
//! tool-loop and completion tables read, each with a
//! value at an edge (zero, one, huge, negative, not a number, infinite, the wrong
//! type), loads or is refused with a message; one that loads boots or is refused; and
//! a host that boots answers a prompt to the end of its turn (a budget computed from
//! such values must neither overflow nor hang the turn), failing it for no reason of
//! its own (a value that would break every turn is refused when the config loads).

use std::time::Duration;

use ccare_app::config::load_text;
use ccare_app::{Agents, Home, Overrides, boot};
use ccare_core::kinds::{TurnEndReason, TurnFailure};
use proptest::prelude::*;

use crate::config::no_env;

/// What a key takes.
#[derive(Debug, Clone, Copy)]
enum Kind {
    Int,
    Ratio,
    Flag,
    Zone,
    Durability,
}

/// Values at the edges of what `kind` takes; now and then one of another type.
fn value(kind: Kind) -> BoxedStrategy<&'static str> {
    let values: &'static [&'static str] = match kind {
        Kind::Int => &[
            "0",
            "1",
            "7",
            "4096",
            "262144",
            "1000000000",
            "9223372036854775807",
        ],
        Kind::Ratio => &[
            "0.0", "0.05", "0.5", "0.9", "1.0", "1.5", "-0.5", "nan", "inf", "1e308",
        ],
        Kind::Flag => &["true", "false"],
        Kind::Zone => &["\"UTC\"", "\"Asia/Shanghai\"", "\"Mars/Base\"", "\"\""],
        Kind::Durability => &["\"group\"", "\"per-append\"", "\"sometimes\""],
    };
    let wrong: &'static [&'static str] = &["-1", "0.5", "true", "\"x\"", "[]"];
    prop_oneof![
        12 => proptest::sample::select(values),
        1 => proptest::sample::select(wrong),
    ]
    .boxed()
}

/// The keys each table takes (one it does not, too).
const HOST_KEYS: &[(&str, Kind)] = &[
    ("actor_idle_ms", Kind::Int),
    ("lease_ms", Kind::Int),
    ("time_zone", Kind::Zone),
];
const STORE_KEYS: &[(&str, Kind)] = &[
    ("commit_window_ms", Kind::Int),
    ("busy_timeout_ms", Kind::Int),
    ("durability", Kind::Durability),
];
const LOOP_KEYS: &[(&str, Kind)] = &[
    ("max_steps_per_turn", Kind::Int),
    ("max_request_retries", Kind::Int),
    ("tool_pool", Kind::Int),
    ("tool_cancel_grace_ms", Kind::Int),
];
const MODEL_KEYS: &[(&str, Kind)] = &[
    ("context_window", Kind::Int),
    ("max_output_tokens", Kind::Int),
    ("image_tokens", Kind::Int),
];
const CARE_KEYS: &[(&str, Kind)] = &[
    ("budget_ratio", Kind::Ratio),
    ("wakefulness_ratio", Kind::Ratio),
    ("retain_ratio", Kind::Ratio),
    ("fatigue_exponent", Kind::Ratio),
    ("min_fresh_tokens", Kind::Int),
    ("min_note_chars", Kind::Int),
    ("max_note_chars", Kind::Int),
    ("expected_checkpoint_tokens", Kind::Int),
    ("safety_tokens", Kind::Int),
    ("burst_tokens", Kind::Int),
    ("release_margin_tokens", Kind::Int),
    ("summary_safety_tokens", Kind::Int),
    ("retain_tokens", Kind::Int),
    ("context_budget_tokens", Kind::Int),
    ("billing_input_ceiling_tokens", Kind::Int),
    ("max_overflow_retries", Kind::Int),
    ("max_passes", Kind::Int),
    ("max_summary_repair_retries", Kind::Int),
    ("max_summary_calls_per_action", Kind::Int),
    ("quiet_start", Kind::Flag),
    ("journal_keep", Kind::Int),
    ("no_such_key", Kind::Flag),
];

const TOOL_LOOP_KEYS: &[(&str, Kind)] = &[("notice_after", Kind::Int), ("stop_after", Kind::Int)];
const COMPLETION_KEYS: &[(&str, Kind)] = &[
    ("cooldown_ms", Kind::Int),
    ("max_observed_chars", Kind::Int),
    ("notifications", Kind::Flag),
    ("max_deliveries", Kind::Int),
];

/// A table of some of `keys`, each with a value of its kind, as TOML lines.
fn table(keys: &'static [(&'static str, Kind)]) -> impl Strategy<Value = String> {
    let entry = proptest::sample::select(keys)
        .prop_flat_map(|(key, kind)| value(kind).prop_map(move |value| (key, value)));
    proptest::collection::vec(entry, 0..3).prop_map(|entries| {
        let entries: std::collections::BTreeMap<&str, &str> = entries.into_iter().collect();
        entries
            .into_iter()
            .map(|(key, value)| format!("{key} = {value}\n"))
            .collect()
    })
}

/// A whole config: the scripted provider's model, with the tables above.
fn config() -> impl Strategy<Value = String> {
    (
        table(HOST_KEYS),
        table(STORE_KEYS),
        table(LOOP_KEYS),
        table(MODEL_KEYS),
        table(CARE_KEYS),
        table(TOOL_LOOP_KEYS),
        table(COMPLETION_KEYS),
    )
        .prop_map(
            |(host, store, loop_table, model, care, tool_loop, completion)| {
                format!(
                    "[agent]\nmodel = \"s/m\"\n[providers.s]\nkind = \"script\"\n\
                 [host]\n{host}[store]\npath = \"state.db\"\n{store}[loop]\n{loop_table}\
                 [models.\"s/m\"]\n{model}[plugins.context-care]\n{care}\
                 [plugins.stream-watch.tool_loop]\n{tool_loop}\
                 [plugins.stream-watch.completion]\n{completion}"
                )
            },
        )
}

/// Loads and boots `text` in a fresh folder; when it boots, runs one prompt to the end
/// of its turn. Returns how far it got, for the case's message.
async fn try_config(text: &str) -> String {
    let dir = tempfile::tempdir().unwrap();
    let home = Home {
        dir: dir.path().join("home"),
    };
    let settings = match load_text(
        text,
        &dir.path().join("ccare.toml"),
        &home,
        &Overrides::default(),
        &no_env,
    ) {
        Ok(settings) => settings,
        Err(error) => {
            assert!(!error.to_string().is_empty(), "an empty refusal of {text}");
            return format!("refused: {error}");
        }
    };
    let booted = match boot(&settings, None, &no_env) {
        Ok(booted) => booted,
        Err(error) => {
            assert!(!error.to_string().is_empty(), "an empty refusal of {text}");
            return format!("not booted: {error}");
        }
    };
    let agents = Agents::of(&booted);
    let handle = agents.create(Default::default()).await.unwrap();
    handle.agent().prompt("hello");
    let end = tokio::time::timeout(Duration::from_secs(20), handle.agent().when_idle())
        .await
        .unwrap_or_else(|_| panic!("the turn did not end within 20 s with\n{text}"));
    drop(handle);
    agents
        .stop_all(ccare_core::kinds::CancelCause::Shutdown)
        .await;
    // A value that breaks every turn of the host (a window the log cannot carry, no
    // step allowed) is refused when the config loads, not met at each turn.
    if let Some(TurnEndReason::Error {
        failure: TurnFailure::Host(failure),
    }) = &end
    {
        panic!(
            "the host failed the turn ({failure}); the config should have been refused:\n{text}"
        );
    }
    // So is a budget every request of the route would fail with (CC-BUD-2).
    if let Some(TurnEndReason::Error {
        failure: TurnFailure::Llm(failure),
    }) = &end
        && failure.message.starts_with("invalid resolved budget")
    {
        panic!("{failure}: the config should have been refused:\n{text}");
    }
    format!("ran: {end:?}")
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    /// Any config built from edge values loads or is refused, boots or is refused, and
    /// a booted host's turn ends.
    #[test]
    fn any_config_loads_or_is_refused_and_a_booted_host_answers(text in config()) {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap();
        let outcome = runtime.block_on(try_config(&text));
        prop_assert!(!outcome.is_empty());
    }
}
