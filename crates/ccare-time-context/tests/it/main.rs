//! time-context in real composition: SQLite store, the scripted provider, the kernel's
//! agent loop with a manual clock, the log read back (spec time-context.md TC-2..TC-7).

#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

mod zones;

use std::path::Path;
use std::sync::Arc;

use ccare_agent::testing::TestHost;
use ccare_agent::{
    Agent, AgentOptions, BoxFuture, Concurrency, Host, Tool, ToolContext, ToolDef, ToolOutcome,
};
use ccare_core::kinds::{StepEnd, StepStart, TurnEndReason, TurnStart, UserMessage};
use ccare_core::{
    ContentBlock, EventData, EventDraft, ManualClock, Message, PluginSource, Source, SurfaceOp,
};
use ccare_llm::ToolSpec;
use ccare_llm::script::ScriptProvider;
use ccare_session::Session;
use ccare_time_context::{
    TimeContext, TimeContextInvariant, Zone, check_log, invariant_validator, reading_message,
    render_duration, render_reading, render_timestamp,
};
use serde_json::{Value, json};

/// 2026-07-16T01:30:05Z = 09:30:05 in Shanghai.
const T0: i64 = 1_784_165_405_000;

/// Advances the shared manual clock by `ms` (negative rewinds): time passing in a step.
struct Tick {
    def: ToolDef,
    clock: ManualClock,
}

impl Tool for Tick {
    fn def(&self) -> &ToolDef {
        &self.def
    }

    fn call(&self, _context: ToolContext, arguments: Value) -> BoxFuture<'static, ToolOutcome> {
        self.clock.advance(arguments["ms"].as_i64().unwrap_or(0));
        Box::pin(async move { Ok(vec![ContentBlock::text("ok")]) })
    }
}

struct Kit {
    clock: ManualClock,
    host: Arc<Host>,
    script: ScriptProvider,
    session: Session,
}

/// The kernel's test host over `db/ccare.db` on `clock`, with the `tick` tool and
/// time-context mounted with `config` (and its invariant validator).
fn host(
    db: &Path,
    clock: &ManualClock,
    script: &str,
    config: &Value,
) -> (Arc<Host>, ScriptProvider) {
    let kit = TestHost::builder(script)
        .sqlite_file(db.join("ccare.db"))
        .clock(Arc::new(clock.clone()))
        .build()
        .unwrap();
    let host = Arc::clone(kit.host());
    host.add_tool(Arc::new(Tick {
        def: ToolDef {
            spec: ToolSpec {
                name: "tick".into(),
                description: "lets time pass".into(),
                input_schema: json!({"type": "object", "properties": {"ms": {"type": "integer"}}, "required": ["ms"]}).into(),
            },
            concurrency: Concurrency::Exclusive,
            timeout_ms: None,
            validates_own_arguments: false,
        },
        clock: clock.clone(),
    }))
    .unwrap();
    host.mount(&TimeContext, config).unwrap();
    host.mount(&TimeContextInvariant, &json!({})).unwrap();
    (host, kit.script().clone())
}

async fn kit_in(db: &Path, script: &str, config: Value) -> Kit {
    let clock = ManualClock::new(T0);
    let (host, script) = host(db, &clock, script, &config);
    let session = host
        .sessions()
        .create(None, Default::default())
        .await
        .unwrap();
    Kit {
        clock,
        host,
        script,
        session,
    }
}

fn agent(kit: &Kit) -> Agent {
    agent_for(kit, &kit.session)
}

fn agent_for(kit: &Kit, session: &Session) -> Agent {
    Agent::new(
        Arc::clone(&kit.host),
        session.clone(),
        Arc::new(kit.clock.clone()),
        AgentOptions::new("s/scripted"),
    )
}

async fn run(agent: &Agent, prompt: &str) {
    agent.prompt(prompt);
    assert_eq!(agent.when_idle().await, Some(TurnEndReason::Completed));
}

/// `(seq, durable ms, text)` of every reading in the raw log.
fn readings(session: &Session) -> Vec<(u64, i64, String)> {
    session.with_log(|log| {
        log.events()
            .iter()
            .filter(|event| event.kind() == "user/message")
            .filter_map(|event| {
                let data: Value = serde_json::from_str(event.data_json()).unwrap();
                let message = &data["message"];
                (message["source"]["plugin"] == "time-context").then(|| {
                    (
                        event.seq(),
                        event.time_ms(),
                        message["content"][0]["text"].as_str().unwrap().to_owned(),
                    )
                })
            })
            .collect()
    })
}

fn texts(session: &Session) -> Vec<String> {
    readings(session)
        .into_iter()
        .map(|(_, _, text)| text)
        .collect()
}

fn kinds(session: &Session) -> Vec<String> {
    session.with_log(|log| log.events().iter().map(|e| e.kind().to_owned()).collect())
}

fn tick(ms: i64, id: &str) -> String {
    format!(r#"{{"tool_calls": [{{"name": "tick", "arguments": {{"ms": {ms}}}, "id": "{id}"}}]}}"#)
}

const SHANGHAI: &str = r#"{"time_zone": "Asia/Shanghai"}"#;

fn shanghai() -> Value {
    serde_json::from_str(SHANGHAI).unwrap()
}

// ---------------------------------------------------------------- TC-5 text

#[tokio::test]
async fn tc_5_step_1_and_later_steps_read_exactly() {
    let dir = tempfile::tempdir().unwrap();
    let script = format!("{}\n{{\"text\": \"done\"}}\n", tick(7_500, "c1"));
    let kit = kit_in(dir.path(), &script, shanghai()).await;
    let agent = agent(&kit);
    run(&agent, "what time is it?").await;
    assert_eq!(
        texts(&kit.session),
        [
            "Time sampled while preparing turn 1, step 1: 2026-07-16T09:30:05+08:00[Asia/Shanghai]\n\
             Elapsed since the preceding model-visible message: 0s.",
            "Time sampled while preparing turn 1, step 2: 2026-07-16T09:30:12+08:00[Asia/Shanghai]\n\
             Elapsed since the preceding step context: 7s.",
        ]
    );
    // TC-3.2 / H-LOOP-7: after step/start, before the step's request header.
    assert_eq!(
        kinds(&kit.session)[..6],
        [
            "turn/start",
            "user/message",
            "step/start",
            "user/message",
            "request/header",
            "request/context"
        ]
    );
    // The exact source shape.
    let source = kit.session.with_log(|log| {
        let data: Value = serde_json::from_str(log.events()[3].data_json()).unwrap();
        data["message"]["source"].clone()
    });
    assert_eq!(
        source,
        json!({"kind": "plugin", "plugin": "time-context", "form": "snapshot",
               "sections": [{"name": "time-context", "text": texts(&kit.session)[0]}]})
    );
}

#[tokio::test]
async fn tc_5_2_durations_between_steps() {
    let dir = tempfile::tempdir().unwrap();
    let ticks = [999, 59_000, 1_000, 3_605_000, 90_061_000];
    let mut script = String::new();
    for (index, ms) in ticks.iter().enumerate() {
        script.push_str(&tick(*ms, &format!("c{index}")));
        script.push('\n');
    }
    script.push_str("{\"text\": \"done\"}\n");
    let kit = kit_in(dir.path(), &script, json!({"time_zone": "UTC"})).await;
    run(&agent(&kit), "go").await;
    let elapsed: Vec<String> = texts(&kit.session)
        .iter()
        .map(|text| text.rsplit_once(": ").unwrap().1.to_owned())
        .collect();
    // 999 ms floors to 0s; the next step is 59.999 s after the previous reading.
    assert_eq!(
        elapsed,
        ["0s.", "0s.", "59s.", "1s.", "1h 5s.", "1d 1h 1m 1s."]
    );
    assert_eq!(render_duration(60_000), "1m 0s");
}

// ---------------------------------------------------------------- TC-4 baselines

#[tokio::test]
async fn tc_4_1_prompt_is_the_baseline_and_a_plugin_opened_turn_shows_the_wait() {
    let dir = tempfile::tempdir().unwrap();
    let kit = kit_in(
        dir.path(),
        "{\"text\": \"a\"}\n{\"text\": \"b\"}\n{\"text\": \"c\"}\n",
        json!({"time_zone": "UTC"}),
    )
    .await;
    let agent = agent(&kit);
    run(&agent, "one").await;
    // The prompt that opens turn 2 is logged when the turn claims it: it is the baseline.
    kit.clock.advance(3_600_000);
    run(&agent, "two").await;
    assert!(texts(&kit.session)[1].ends_with("model-visible message: 0s."));
    // A turn opened by a plugin entry measures from the last assistant message.
    kit.clock.advance(3_605_000);
    let mut notice = Message::from_blocks(vec![ContentBlock::text("a plugin asks")]);
    notice.source = Some(Source::plugin_notice("other"));
    agent.followup(notice);
    assert_eq!(agent.when_idle().await, Some(TurnEndReason::Completed));
    assert_eq!(
        texts(&kit.session)[2],
        "Time sampled while preparing turn 3, step 1: 2026-07-16T03:30:10+00:00[UTC]\n\
         Elapsed since the preceding model-visible message: 1h 5s."
    );
}

#[tokio::test]
async fn tc_4_4_unavailable_without_a_baseline() {
    let dir = tempfile::tempdir().unwrap();
    // Turn 1: first reading. Turn 2 step 1 is suppressed (30 s < 60 s); its step 2
    // is due (60 s) but has no earlier reading in the turn.
    let script = format!(
        "{{\"text\": \"a\"}}\n{}\n{{\"text\": \"b\"}}\n{{\"text\": \"c\"}}\n",
        tick(30_000, "c1")
    );
    let kit = kit_in(
        dir.path(),
        &script,
        json!({"time_zone": "UTC", "refresh_interval_ms": 60_000}),
    )
    .await;
    let agent = agent(&kit);
    run(&agent, "one").await;
    kit.clock.advance(30_000);
    run(&agent, "two").await;
    assert_eq!(
        texts(&kit.session)[1],
        "Time sampled while preparing turn 2, step 2: 2026-07-16T01:31:05+00:00[UTC]\n\
         Elapsed since the preceding step context: unavailable."
    );
    // A session's very first reading with no earlier message: a plugin-opened turn.
    let session = kit
        .host
        .sessions()
        .create(None, Default::default())
        .await
        .unwrap();
    let other = agent_for(&kit, &session);
    let script_kit_text = {
        let mut notice = Message::from_blocks(vec![ContentBlock::text("wake up")]);
        notice.source = Some(Source::plugin_notice("other"));
        notice
    };
    other.followup(script_kit_text);
    assert_eq!(other.when_idle().await, Some(TurnEndReason::Completed));
    assert!(texts(&session)[0].ends_with("model-visible message: unavailable."));
}

#[tokio::test]
async fn tc_4_3_backward_clock_is_due_and_reads_zero() {
    let dir = tempfile::tempdir().unwrap();
    let script = format!("{}\n{{\"text\": \"done\"}}\n", tick(-5_000, "c1"));
    let kit = kit_in(
        dir.path(),
        &script,
        json!({"time_zone": "UTC", "refresh_interval_ms": 60_000}),
    )
    .await;
    run(&agent(&kit), "go").await;
    assert_eq!(
        texts(&kit.session),
        [
            "Time sampled while preparing turn 1, step 1: 2026-07-16T01:30:05+00:00[UTC]\n\
             Elapsed since the preceding model-visible message: 0s.",
            "Time sampled while preparing turn 1, step 2: 2026-07-16T01:30:00+00:00[UTC]\n\
             Elapsed since the preceding step context: 0s.",
        ]
    );
}

// ---------------------------------------------------------------- TC-3 scheduling

#[tokio::test]
async fn tc_3_4_interval_counts_from_raw_events_across_compaction_and_restart() {
    let dir = tempfile::tempdir().unwrap();
    let answers = "{\"text\": \"a\"}\n".repeat(8);
    let config = json!({"time_zone": "UTC", "refresh_interval_ms": 60_000});
    let kit = kit_in(dir.path(), &answers, config.clone()).await;
    let agent = agent(&kit);
    run(&agent, "one").await;
    assert_eq!(readings(&kit.session).len(), 1);
    // A compaction shadows the whole turn, reading included.
    let live: Vec<u64> = kit.session.with_log(|log| log.live_seqs());
    let summary = EventDraft::typed(&UserMessage {
        message: Message::from_blocks(vec![ContentBlock::text("summary")]),
    })
    .unwrap()
    .with_surface(SurfaceOp::Replace {
        start_seq: live[0],
        end_seq: *live.last().unwrap(),
    })
    .with_sources(live.clone());
    kit.session.append(summary).unwrap();
    let reading_seq = readings(&kit.session)[0].0;
    assert!(
        !kit.session
            .with_log(|log| log.live_seqs())
            .contains(&reading_seq)
    );
    // 59.999 s later: not due; the shadowed reading still governs.
    kit.clock.advance(59_999);
    run(&agent, "two").await;
    assert_eq!(readings(&kit.session).len(), 1);
    // Restart: a new host and agent over the reopened store.
    drop(agent);
    let id = kit.session.id().clone();
    kit.host.sessions().close(&id).await.unwrap();
    let (host2, _script2) = host(dir.path(), &kit.clock, &answers, &config);
    let session = host2.sessions().open(&id).await.unwrap();
    let agent = Agent::new(
        Arc::clone(&host2),
        session.clone(),
        Arc::new(kit.clock.clone()),
        AgentOptions::new("s/scripted"),
    );
    kit.clock.advance(1);
    run(&agent, "three").await;
    // Exactly the interval since the reading is due.
    let all = readings(&session);
    assert_eq!(all.len(), 2);
    assert_eq!(all[1].1 - all[0].1, 60_000);
    assert!(
        all[1]
            .2
            .starts_with("Time sampled while preparing turn 3, step 1:")
    );
    // Sessions are scheduled independently: a fresh session gets its reading now.
    let fresh = host2
        .sessions()
        .create(None, Default::default())
        .await
        .unwrap();
    let fresh_agent = Agent::new(
        Arc::clone(&host2),
        fresh.clone(),
        Arc::new(kit.clock.clone()),
        AgentOptions::new("s/scripted"),
    );
    run(&fresh_agent, "hello").await;
    assert_eq!(readings(&fresh).len(), 1);
    // ...and the first session, 1 ms later, is not due.
    kit.clock.advance(1);
    run(&agent, "four").await;
    assert_eq!(readings(&session).len(), 2);
}

#[tokio::test]
async fn tc_3_3_interval_zero_reads_on_every_attempt() {
    let dir = tempfile::tempdir().unwrap();
    let script = format!(
        "{}\n{{\"text\": \"a\"}}\n{{\"text\": \"b\"}}\n",
        tick(0, "c1")
    );
    let kit = kit_in(
        dir.path(),
        &script,
        json!({"time_zone": "UTC", "refresh_interval_ms": 0}),
    )
    .await;
    let agent = agent(&kit);
    run(&agent, "one").await;
    run(&agent, "two").await;
    assert_eq!(readings(&kit.session).len(), 3);
}

// ---------------------------------------------------------------- TC-5.3 requests

#[tokio::test]
async fn tc_5_3_reading_follows_the_prompt_never_the_system_prompt_or_header() {
    let dir = tempfile::tempdir().unwrap();
    let script = format!(
        "{}\n{{\"text\": \"done\"}}\n{{\"text\": \"again\"}}\n",
        tick(1_000, "c1")
    );
    let kit = kit_in(dir.path(), &script, shanghai()).await;
    kit.host.add_system_section(ccare_agent::SystemSection {
        name: "base".into(),
        order: 0,
        text: "You are helpful.".into(),
    });
    let agent = agent(&kit);
    run(&agent, "hi").await;
    kit.clock.advance(2_000);
    run(&agent, "more").await;
    let requests = kit.script.requests();
    assert_eq!(requests.len(), 3);
    for request in &requests {
        assert_eq!(request.config.system.as_deref(), Some("You are helpful."));
    }
    let headers: Vec<String> = kit.session.with_log(|log| {
        log.events()
            .iter()
            .filter(|event| event.kind() == "request/header")
            .map(|event| event.data_json().to_owned())
            .collect()
    });
    assert!(!headers.is_empty());
    assert!(
        headers
            .iter()
            .all(|header| !header.contains("Time sampled"))
    );
    let first = &requests[0].config.messages;
    assert_eq!(first.len(), 2);
    assert_eq!(first[0].message.content, vec![ContentBlock::text("hi")]);
    let reading = texts(&kit.session)[0].clone();
    assert_eq!(first[1].message.content, vec![ContentBlock::text(reading)]);
    // Adjacent requests share a byte-identical prefix.
    let serialize = |messages: &[ccare_llm::RequestMessage]| -> Vec<String> {
        messages
            .iter()
            .map(|message| serde_json::to_string(&(message.role, &*message.message)).unwrap())
            .collect()
    };
    for pair in requests.windows(2) {
        let before = serialize(&pair[0].config.messages);
        let after = serialize(&pair[1].config.messages);
        assert!(after.len() > before.len());
        assert_eq!(after[..before.len()], before[..]);
    }
}

// ---------------------------------------------------------------- TC-2 config

#[tokio::test]
async fn tc_2_load_errors_are_prefixed_and_name_the_value() {
    let dir = tempfile::tempdir().unwrap();
    let kit = kit_in(dir.path(), "", shanghai()).await;
    kit.host.unmount("time-context");
    let error = kit
        .host
        .mount(&TimeContext, &json!({"time_zone": "Mars/Olympus_Mons"}))
        .unwrap_err();
    assert_eq!(
        error.to_string(),
        "time-context: time_zone must be a valid IANA time zone identifier, got \"Mars/Olympus_Mons\""
    );
    let error = kit
        .host
        .mount(&TimeContext, &json!({"refresh_interval_ms": -1}))
        .unwrap_err();
    assert_eq!(
        error.to_string(),
        "time-context: refresh_interval_ms must be a non-negative safe integer, got -1"
    );
    let error = kit
        .host
        .mount(&TimeContext, &json!({"refreshIntervalMs": 5}))
        .unwrap_err();
    assert_eq!(
        error.to_string(),
        "time-context: unknown config refreshIntervalMs"
    );
    assert!(
        kit.host.mount(&TimeContext, &json!({})).is_ok(),
        "the process zone resolves"
    );
}

// ---------------------------------------------------------------- TC-5.1 zones

#[test]
fn tc_5_1_timestamps_floor_and_offsets_are_exact() {
    let zone = |name: &str| Zone::named(name).unwrap();
    let cases: &[(&str, i64, &str)] = &[
        ("UTC", 0, "1970-01-01T00:00:00+00:00[UTC]"),
        ("UTC", 999, "1970-01-01T00:00:00+00:00[UTC]"),
        ("UTC", -1, "1969-12-31T23:59:59+00:00[UTC]"),
        ("UTC", -1_000, "1969-12-31T23:59:59+00:00[UTC]"),
        ("UTC", -1_001, "1969-12-31T23:59:58+00:00[UTC]"),
        (
            "Asia/Shanghai",
            T0 + 999,
            "2026-07-16T09:30:05+08:00[Asia/Shanghai]",
        ),
        (
            "Asia/Kolkata",
            951_782_400_000,
            "2000-02-29T05:30:00+05:30[Asia/Kolkata]",
        ),
        (
            "Asia/Kathmandu",
            951_782_400_000,
            "2000-02-29T05:45:00+05:45[Asia/Kathmandu]",
        ),
        (
            "America/St_Johns",
            1_784_203_200_000,
            "2026-07-16T09:30:00-02:30[America/St_Johns]",
        ),
        (
            "Pacific/Chatham",
            1_320_537_600_000,
            "2011-11-06T13:45:00+13:45[Pacific/Chatham]",
        ),
        ("Etc/GMT+5", 0, "1969-12-31T19:00:00-05:00[Etc/GMT+5]"),
        // New York, spring forward and fall back.
        (
            "America/New_York",
            1_772_953_199_999,
            "2026-03-08T01:59:59-05:00[America/New_York]",
        ),
        (
            "America/New_York",
            1_772_953_200_000,
            "2026-03-08T03:00:00-04:00[America/New_York]",
        ),
        (
            "America/New_York",
            1_793_512_799_999,
            "2026-11-01T01:59:59-04:00[America/New_York]",
        ),
        (
            "America/New_York",
            1_793_512_800_000,
            "2026-11-01T01:00:00-05:00[America/New_York]",
        ),
        // Lord Howe's 30-minute DST.
        (
            "Australia/Lord_Howe",
            1_775_314_799_999,
            "2026-04-05T01:59:59+11:00[Australia/Lord_Howe]",
        ),
        (
            "Australia/Lord_Howe",
            1_775_314_800_000,
            "2026-04-05T01:30:00+10:30[Australia/Lord_Howe]",
        ),
        (
            "Australia/Lord_Howe",
            1_791_041_399_999,
            "2026-10-04T01:59:59+10:30[Australia/Lord_Howe]",
        ),
        (
            "Australia/Lord_Howe",
            1_791_041_400_000,
            "2026-10-04T02:30:00+11:00[Australia/Lord_Howe]",
        ),
    ];
    for (name, ms, expected) in cases {
        assert_eq!(
            &render_timestamp(&zone(name), *ms).unwrap(),
            expected,
            "{name} {ms}"
        );
    }
    // Case-insensitive lookup, shown as the database spells it.
    assert_eq!(zone("asia/kolkata").name(), "Asia/Kolkata");
    assert_eq!(
        render_reading(
            &zone("Asia/Kolkata"),
            951_782_400_000,
            1,
            1,
            Some(951_782_399_000)
        )
        .unwrap(),
        "Time sampled while preparing turn 1, step 1: 2000-02-29T05:30:00+05:30[Asia/Kolkata]\n\
         Elapsed since the preceding model-visible message: 1s."
    );
}

// ---------------------------------------------------------------- TC-7 invariant

fn forged(text: &str) -> Message {
    reading_message(text)
}

fn append_user(session: &Session, message: Message) -> Result<(), ccare_session::AppendError> {
    session
        .append(
            EventDraft::typed(&UserMessage { message })
                .unwrap()
                .with_surface(SurfaceOp::Append),
        )
        .map(|_| ())
}

fn typed<T: EventData>(data: &T) -> EventDraft {
    EventDraft::typed(data).unwrap()
}

/// Opens turn 1 with a prompt and step 1, then closes step 1 and opens step 2.
fn open_two_steps(session: &Session) {
    session.append(typed(&TurnStart { turn: 1 })).unwrap();
    let mut prompt = Message::from_blocks(vec![ContentBlock::text("hi")]);
    prompt.source = Some(Source::user());
    append_user(session, prompt).unwrap();
    session
        .append(typed(&StepStart { turn: 1, step: 1 }))
        .unwrap();
}

fn forgeries() -> Vec<(&'static str, Message)> {
    let zone = Zone::named("UTC").unwrap();
    let good = render_reading(&zone, T0, 1, 1, Some(T0)).unwrap();
    let mut extra_block = forged(&good);
    extra_block.content.push(ContentBlock::text("and more"));
    let mut wrong_source = forged(&good);
    wrong_source.source = Some(Source::Plugin(Box::new(PluginSource::notice(
        "time-context",
    ))));
    vec![
        (
            "TC-7.2: reading for turn 3 but turn 1 is open",
            forged(&render_reading(&zone, T0, 3, 1, Some(T0)).unwrap()),
        ),
        (
            "TC-7.2: reading for step 2 but step 1 is being prepared",
            forged(&render_reading(&zone, T0, 1, 2, None).unwrap()),
        ),
        (
            "TC-7.5:",
            forged(&render_reading(&zone, T0 + 5_000, 1, 1, Some(T0)).unwrap()),
        ),
        ("TC-7.1:", extra_block),
        ("TC-7.3:", wrong_source),
        (
            "TC-7.6:",
            forged(&render_reading(&zone, T0, 1, 1, None).unwrap()),
        ),
        ("TC-7.1:", forged(&format!("{good}\n"))),
        (
            "TC-7.5:",
            forged(&good.replace("+00:00[UTC]", "+01:00[UTC]")),
        ),
    ]
}

#[tokio::test]
async fn tc_7_forged_readings_are_vetoed_before_commit() {
    let dir = tempfile::tempdir().unwrap();
    let kit = kit_in(dir.path(), "", json!({"time_zone": "UTC"})).await;
    let session = &kit.session;
    open_two_steps(session);
    for (rule, message) in forgeries() {
        let head = session.head();
        let error = append_user(session, message).unwrap_err();
        assert_eq!(error.code(), "VETOED", "{rule}");
        assert!(error.to_string().contains(rule), "{rule}: {error}");
        assert_eq!(session.head(), head);
    }
    // Step-1 wording on step 2.
    let zone = Zone::named("UTC").unwrap();
    session
        .append(typed(&StepEnd {
            turn: 1,
            step: 1,
            interrupted: false,
            repair: false,
        }))
        .unwrap();
    session
        .append(typed(&StepStart { turn: 1, step: 2 }))
        .unwrap();
    let text = render_reading(&zone, T0, 1, 2, None)
        .unwrap()
        .replace("preceding step context", "preceding model-visible message");
    let error = append_user(session, forged(&text)).unwrap_err();
    assert!(error.to_string().contains("TC-7.4"), "{error}");
    // The real thing passes.
    append_user(
        session,
        forged(&render_reading(&zone, T0, 1, 2, None).unwrap()),
    )
    .unwrap();
}

#[tokio::test]
async fn tc_7_check_log_finds_forgeries_in_an_imported_log() {
    // Written without the validator, then imported elsewhere and checked.
    let dir = tempfile::tempdir().unwrap();
    let clock = ManualClock::new(T0);
    let open = |name: &str| {
        let kit = TestHost::builder("")
            .sqlite_file(dir.path().join(name))
            .clock(Arc::new(clock.clone()))
            .build()
            .unwrap();
        Arc::clone(kit.sessions())
    };
    let writer = open("a.db");
    let session = writer.create(None, Default::default()).await.unwrap();
    open_two_steps(&session);
    let mut expected = Vec::new();
    for (rule, message) in forgeries() {
        let seq = session.head();
        append_user(&session, message).unwrap();
        expected.push((seq, rule));
    }
    let mut bytes = Vec::new();
    writer.export(session.id(), &mut bytes).await.unwrap();
    let reader = open("b.db");
    let record = reader.import(&bytes).await.unwrap();
    let loaded = reader.load(&record.id).await.unwrap();
    let findings = check_log(&loaded.log);
    assert_eq!(findings.len(), expected.len(), "{findings:?}");
    for ((seq, finding), (expected_seq, rule)) in findings.iter().zip(&expected) {
        assert_eq!(seq, expected_seq);
        assert!(
            finding.starts_with(rule.split(':').next().unwrap()),
            "{finding} vs {rule}"
        );
        assert!(finding.contains(rule), "{finding} vs {rule}");
    }
    // A log the plugin wrote is clean.
    let kit = kit_in(
        dir.path(),
        &format!("{}\n{{\"text\": \"x\"}}\n", tick(61_000, "c1")),
        shanghai(),
    )
    .await;
    run(&agent(&kit), "go").await;
    assert!(kit.session.with_log(check_log).is_empty());
    let _ = invariant_validator();
}
