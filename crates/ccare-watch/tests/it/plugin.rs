//! The `stream-watch` plugin in real composition (SQLite store, scripted provider, the
//! agent loop), read back from the log: SW-8 .. SW-11 (AC-6, AC-7, AC-8), the controls
//! (RC), and the loop-shape fallback (LS-3).

use std::sync::Arc;

use ccare_agent::controls::{Patch, PatchOp};
use ccare_agent::{Agent, Host};
use ccare_core::kinds::TurnEndReason;
use ccare_llm::script::ScriptProvider;
use ccare_session::Session;
use ccare_watch::plugin::{LABEL_LOOP, LABEL_LOOP_ABORTED, LABEL_TIME, StreamWatchPlugin};
use serde_json::{Value, json};

use crate::composition::Composition;

struct Rig {
    _dir: tempfile::TempDir,
    plugin: StreamWatchPlugin,
    host: Arc<Host>,
    agent: Agent,
    session: Session,
    script: ScriptProvider,
}

async fn rig(lines: &[Value]) -> Rig {
    rig_with(json!({}), lines).await
}

/// The rig with the plugin mounted on this `[plugins.stream-watch]` table.
async fn rig_with(config: Value, lines: &[Value]) -> Rig {
    let dir = tempfile::tempdir().unwrap();

    let composition = Composition::new(&dir.path().join("w.db"), lines);
    let plugin = StreamWatchPlugin::default();
    composition.host.mount(&plugin, &config).unwrap();
    let (session, agent) = composition.agent("scripted", None).await;
    Rig {
        _dir: dir,
        plugin,
        host: composition.host,
        agent,
        session,
        script: composition.script,
    }
}

impl Rig {
    async fn turn(&self, prompt: &str) -> Option<TurnEndReason> {
        self.agent.prompt(prompt);
        self.agent.when_idle().await
    }

    fn events(&self, kind: &str) -> Vec<Value> {
        self.session.with_log(|log| {
            log.events()
                .iter()
                .filter(|event| event.kind() == kind)
                .map(|event| serde_json::from_str(event.data_json()).unwrap())
                .collect()
        })
    }

    /// Sets one action of one `stream-watch` rule for the session (RC-4).
    async fn toggle(&self, rule: &str, action: &str, enabled: bool) {
        let controls = self.host.controls();
        controls.load(self.session.id()).await.unwrap();
        let revision = controls.snapshot(self.session.id()).revision;
        controls
            .patch(
                self.session.id(),
                Patch {
                    revision,
                    source_id: "stream-watch".to_owned(),
                    rule_id: rule.to_owned(),
                    op: PatchOp::Toggle {
                        action_id: action.to_owned(),
                        enabled,
                    },
                },
                self.session.head(),
            )
            .await
            .unwrap();
    }

    /// The user messages the watch entered for `trigger`, in log order.
    fn watch_notices(&self, trigger: &str) -> Vec<Value> {
        let kind = format!("plugin:context-care:watch:{trigger}");
        self.events("user/message")
            .into_iter()
            .map(|data| data["message"].clone())
            .filter(|message| message["source"]["kind"] == kind.as_str())
            .collect()
    }

    fn notices(&self, label: &str) -> Vec<Value> {
        self.events("user/message")
            .into_iter()
            .map(|data| data["message"].clone())
            .filter(|message| message["source"]["summary"] == label)
            .collect()
    }
}

fn looping() -> Value {
    json!({"text": "same line\n".repeat(80)})
}

#[tokio::test]
async fn ac_7_a_loop_is_aborted_kept_and_resumed_saying_the_system_stopped_it() {
    let rig = rig(&[looping(), json!({"text": "Back on track."})]).await;
    let end = rig.turn("write the report").await;
    assert_eq!(
        end,
        Some(TurnEndReason::Completed),
        "the resumed turn completed"
    );
    let ends = rig.events("turn/end");
    assert_eq!(ends.len(), 2);
    assert_eq!(
        ends[0]["reason"]["cause"]["plugin"], "stream-watch",
        "{}",
        ends[0]
    );
    assert_eq!(
        ends[0]["reason"]["cause"]["reason"],
        "output loop: same line"
    );
    let answers = rig.events("assistant/message");
    assert_eq!(
        answers[0]["interrupted"], true,
        "the partial output is kept"
    );
    let partial = answers[0]["message"]["content"][0]["text"]
        .as_str()
        .unwrap();
    assert!(partial.starts_with("same line\nsame line\n"), "{partial}");
    assert!(
        partial.len() < "same line\n".len() * 80,
        "cut mid-generation"
    );
    let resumes = rig.notices(LABEL_LOOP_ABORTED);
    assert_eq!(resumes.len(), 1);
    let text = resumes[0]["content"][0]["text"].as_str().unwrap();
    assert!(text.contains("\"same line\""), "{text}");
    assert!(
        text.contains("The system (context-care), not you, stopped the response"),
        "{text}"
    );
    assert!(text.contains("context_rest"), "{text}");
    assert_eq!(
        answers[1]["message"]["content"][0]["text"],
        "Back on track."
    );
}

#[tokio::test]
async fn ac_7_a_second_consecutive_loop_is_not_resumed_and_ac_8_a_healthy_reply_rearms() {
    let rig = rig(&[
        looping(),
        looping(),
        json!({"text": "ok"}),
        looping(),
        json!({"text": "again fine"}),
    ])
    .await;
    // Loop, resume (loops again: the second consecutive abort), no resume.
    let end = rig.turn("go").await;
    let log: Vec<String> = rig.session.with_log(|log| {
        log.events()
            .iter()
            .map(|event| {
                format!(
                    "{} {}",
                    event.kind(),
                    event.data_json().chars().take(150).collect::<String>()
                )
            })
            .collect()
    });
    assert!(
        matches!(end, Some(TurnEndReason::Aborted { .. })),
        "{end:?} {log:#?}"
    );
    assert_eq!(rig.events("turn/end").len(), 2);
    assert_eq!(rig.notices(LABEL_LOOP_ABORTED).len(), 1, "the resume steer");
    // A real user message (and the healthy reply) re-arm auto-resume.
    assert_eq!(rig.turn("try again").await, Some(TurnEndReason::Completed));
    // SW-11: the second abort's MV-LOOP(aborted) reached the human-started step.
    assert_eq!(rig.notices(LABEL_LOOP_ABORTED).len(), 2);
    assert_eq!(
        rig.turn("and once more").await,
        Some(TurnEndReason::Completed),
        "resumed"
    );
    assert_eq!(rig.events("turn/end").len(), 5);
}

/// Proves: SW-10 — a healthy reply alone (no real user message since) resets the
/// abort count: a loop after it, in the same resumed turn, is resumed again rather
/// than counted as the second consecutive abort.
#[tokio::test]
async fn sw_10_a_healthy_reply_alone_rearms_auto_resume() {
    let call = json!({"tool_calls": [{"name": "status", "arguments": {"job": 7}}]});
    let rig = rig(&[looping(), call, looping(), json!({"text": "done"})]).await;
    rig.host.add_tool(Arc::new(Same)).unwrap();
    // Loop, resume; the resumed turn's healthy tool-call reply, its tool, then a loop
    // again: resumed, since the healthy reply reset the count.
    assert_eq!(rig.turn("go").await, Some(TurnEndReason::Completed));
    let ends = rig.events("turn/end");
    assert_eq!(ends.len(), 3, "{ends:?}");
    assert_eq!(ends[0]["reason"]["cause"]["plugin"], "stream-watch");
    assert_eq!(ends[1]["reason"]["cause"]["plugin"], "stream-watch");
    assert_eq!(rig.events("tool/result").len(), 1);
    // Only the opening prompt is a real user message.
    let real: Vec<Value> = rig
        .events("user/message")
        .into_iter()
        .filter(|data| data["message"]["source"]["kind"] == "user")
        .collect();
    assert_eq!(real.len(), 1);
}

#[tokio::test]
async fn ac_6_time_anxiety_in_reasoning_gets_one_notice_and_the_output_continues() {
    let rig = rig(&[
        json!({"reasoning": "嗯，时间不够了，得加快", "text": "Here is the plan."}),
        json!({"text": "noted"}),
    ])
    .await;
    assert_eq!(rig.turn("plan it").await, Some(TurnEndReason::Completed));
    let answers = rig.events("assistant/message");
    assert_ne!(answers[0]["interrupted"], true, "not aborted");
    // Injected mid-stream, entered at the next step of the same turn.
    let notices = rig.notices(LABEL_TIME);
    assert_eq!(notices.len(), 1);
    assert_eq!(
        notices[0]["source"]["kind"],
        "plugin:context-care:watch:time-anxiety"
    );
    assert_eq!(answers.len(), 2);
}

#[tokio::test]
async fn rc_abort_off_keeps_the_output_and_only_notices() {
    let rig = rig(&[looping(), json!({"text": "fine"})]).await;
    let controls = rig.host.controls();
    controls.load(rig.session.id()).await.unwrap();
    controls
        .patch(
            rig.session.id(),
            Patch {
                revision: 0,
                source_id: "stream-watch".to_owned(),
                rule_id: "stream-line-repeat".to_owned(),
                op: PatchOp::Toggle {
                    action_id: "abort".to_owned(),
                    enabled: false,
                },
            },
            rig.session.head(),
        )
        .await
        .unwrap();
    assert_eq!(rig.turn("go").await, Some(TurnEndReason::Completed));
    let answers = rig.events("assistant/message");
    assert_ne!(answers[0]["interrupted"], true);
    assert_eq!(rig.events("turn/end").len(), 1, "no resumed turn");
    assert!(rig.notices(LABEL_LOOP_ABORTED).is_empty());
    // Injected mid-stream, the notice was entered at the turn's next step.
    assert_eq!(rig.notices(LABEL_LOOP).len(), 1);
}

#[tokio::test]
async fn ls_3_a_mild_shape_in_the_last_reply_is_reminded_once_at_the_next_step() {
    // 16 of 40 counted lines repeat (40%): below the watch's abort threshold, above
    // the pre-step reminder's (≥15 and ≥20%).
    let mut reply = String::new();
    for index in 0..24 {
        reply.push_str(&format!("distinct line number {index}\n"));
    }
    reply.push_str(&"again and again\n".repeat(16));
    let rig = rig(&[
        json!({"text": reply}),
        json!({"text": "ok"}),
        json!({"text": "ok"}),
    ])
    .await;
    rig.turn("one").await;
    rig.turn("two").await;
    let reminders = rig.notices(LABEL_LOOP);
    assert_eq!(reminders.len(), 1);
    assert_eq!(reminders[0]["source"]["kind"], "plugin:context-care:loop");
    let text = reminders[0]["content"][0]["text"].as_str().unwrap();
    assert!(text.contains("\"again and again\""), "{text}");
    assert!(text.contains("16 of the last 40 lines (40%)"), "{text}");
    assert!(!text.contains("stopped the response"), "not aborted");
    rig.turn("three").await;
    assert_eq!(
        rig.notices(LABEL_LOOP).len(),
        1,
        "the same reply is not reminded twice"
    );
    let _ = &rig.script;
}

#[tokio::test]
async fn sw_5_a_trigger_override_changes_one_threshold_and_bad_ones_are_load_errors() {
    let rig = rig(&[looping()]).await;
    let plugin = StreamWatchPlugin::default();
    let mount = |config: Value| {
        rig.host.unmount("stream-watch");
        rig.host
            .mount(&plugin, &config)
            .map_err(|error| error.to_string())
    };
    let error =
        mount(json!({"triggers": {"line-repeat": {"detector": {"params": {"minRatio": 7}}}}}))
            .unwrap_err();
    assert!(error.starts_with("stream-watch: triggers: "), "{error}");
    assert_eq!(
        mount(json!({"bogus": {}})).unwrap_err(),
        "stream-watch: unknown config bogus"
    );
    // Stricter thresholds: 80 repeated lines no longer stop the output.
    mount(json!({"triggers": {"line-repeat": {"detector": {"params": {"minRun": 200, "minCount": 200}}}}})).unwrap();
    assert_eq!(rig.turn("go").await, Some(TurnEndReason::Completed));
    assert_ne!(rig.events("assistant/message")[0]["interrupted"], true);
}

#[tokio::test]
async fn the_table_and_its_tool_loop_part_are_read_strictly_at_mount() {
    let rig = rig(&[]).await;
    let plugin = StreamWatchPlugin::default();
    let mount = |config: Value| {
        rig.host.unmount("stream-watch");
        rig.host
            .mount(&plugin, &config)
            .map_err(|error| error.to_string())
    };
    assert_eq!(
        mount(json!([])).unwrap_err(),
        "stream-watch: the table must be an object, got []"
    );
    assert_eq!(
        mount(json!({"triggers": null})).unwrap_err(),
        "stream-watch: triggers must be a table of overrides by trigger id, or an array, got null"
    );
    assert_eq!(
        mount(json!({"tool_loop": {"stopAfter": 9}})).unwrap_err(),
        "stream-watch: tool_loop: unknown config stopAfter"
    );
    assert_eq!(
        mount(json!({"tool_loop": {"exempt_tools": ["read_*", 7]}})).unwrap_err(),
        "stream-watch: tool_loop.exempt_tools[1]: expected a string, got 7"
    );
    assert_eq!(
        mount(json!({"tool_loop": {"notice_after": 5, "stop_after": 4}})).unwrap_err(),
        "stream-watch: tool_loop: notice_after (5) must be below stop_after (4)"
    );
    mount(json!({"tool_loop": {"notice_after": 2, "stop_after": 3}})).unwrap();
}

/// A tool that always answers the same.
struct Same;

impl ccare_agent::Tool for Same {
    fn def(&self) -> &ccare_agent::ToolDef {
        static DEF: std::sync::OnceLock<ccare_agent::ToolDef> = std::sync::OnceLock::new();
        DEF.get_or_init(|| ccare_agent::ToolDef {
            spec: ccare_llm::ToolSpec {
                name: "status".to_owned(),
                description: "build status".into(),
                input_schema: json!({"type": "object"}).into(),
            },
            concurrency: ccare_agent::Concurrency::ParallelSafe,
            timeout_ms: None,
            validates_own_arguments: false,
        })
    }
    fn call(
        &self,
        _context: ccare_agent::ToolContext,
        _arguments: Value,
    ) -> ccare_agent::BoxFuture<'static, ccare_agent::ToolOutcome> {
        Box::pin(async { Ok(vec![ccare_core::ContentBlock::text("build: pending")]) })
    }
}

#[tokio::test]
async fn ex_1_the_same_call_with_the_same_result_is_reminded_then_stopped() {
    let call = json!({"tool_calls": [{"name": "status", "arguments": {"job": 7}}]});
    let rig = rig(&[
        call.clone(),
        call.clone(),
        call.clone(),
        call.clone(),
        call.clone(),
        json!({"text": "I will wait for the build instead."}),
    ])
    .await;
    rig.host.add_tool(Arc::new(Same)).unwrap();
    assert_eq!(
        rig.turn("check the build").await,
        Some(TurnEndReason::Completed)
    );
    let results: Vec<Value> = rig
        .events("tool/result")
        .into_iter()
        .map(|data| data["message"]["content"][0].clone())
        .collect();
    assert_eq!(results.len(), 5);
    assert!(results[..4].iter().all(|result| result["is_error"] != true));
    let stopped = results[4]["content"][0]["text"].as_str().unwrap();
    assert!(
        stopped.starts_with("TOOL_LOOP_STOPPED: context-care did not run this call"),
        "{stopped}"
    );
    assert!(stopped.contains("4 times in a row"), "{stopped}");
    let reminders = rig.notices("Tool loop detected");
    assert_eq!(
        reminders.len(),
        1,
        "reminded once, after the third identical pair"
    );
    assert!(
        reminders[0]["content"][0]["text"]
            .as_str()
            .unwrap()
            .contains("3 times in a row")
    );
    // Tool calls markers: the refused call never ran (no tool/call marker for it).
    assert_eq!(rig.events("tool/call").len(), 4);
}

/// `[plugins.stream-watch] triggers` with one trigger of its own: a text marker.
fn marker_config(actions: &[&str]) -> Value {
    json!({"triggers": {"todo-marker": {
        "detector": {"kind": "marker", "params": {"marker": "TODO!"}},
        "scope": "text",
        "actions": actions,
    }}})
}

#[tokio::test]
async fn sw_1_rc_1_a_configured_trigger_gets_its_controls_and_fires_live_as_replay_shows() {
    let config = marker_config(&["notice"]);
    let reply = "Step one is done. TODO! wire the cache. Step two next.";
    let rig = rig_with(
        config.clone(),
        &[json!({"text": reply}), json!({"text": "noted"})],
    )
    .await;
    // What `ccare watch replay` computes: the engine over the same triggers.
    let triggers = config["triggers"].as_object().unwrap();
    let mut offline = ccare_watch::engine::StreamWatch::new(
        ccare_watch::engine::Triggers::with_overrides(triggers).unwrap(),
    );
    offline.observe(ccare_watch::engine::Frame::Start);
    let replayed = offline.observe(ccare_watch::engine::Frame::Text(reply));
    assert_eq!(replayed.len(), 1);
    assert_eq!(&*replayed[0].trigger, "todo-marker");

    let controls = rig.host.controls();
    controls.load(rig.session.id()).await.unwrap();
    assert_eq!(
        controls
            .decide(
                rig.session.id(),
                "stream-watch",
                "stream-todo-marker",
                "notice"
            )
            .as_str(),
        "enabled",
        "the catalog follows the configured triggers"
    );
    assert_eq!(rig.turn("go").await, Some(TurnEndReason::Completed));
    let notices = rig.watch_notices("todo-marker");
    assert_eq!(notices.len(), 1, "fired live, once");
    assert_eq!(notices[0]["source"]["summary"], "Stream watch reminder");
    assert_eq!(
        notices[0]["content"][0]["text"],
        "<context-care>\nThe stream watch (context-care) found \"TODO!\" in your output; the rule \"todo-marker\" asks for this reminder.\nCheck that the work is on track, then continue from where it was.\n</context-care>"
    );
    let answers = rig.events("assistant/message");
    assert_ne!(answers[0]["interrupted"], true, "a notice does not stop");
    assert_eq!(answers.len(), 2, "entered at the next step");
}

#[tokio::test]
async fn sw_8_sw_11_the_second_consecutive_abort_leaves_one_notice_saying_the_system_stopped_it() {
    let rig = rig(&[looping(), looping(), json!({"text": "ok"})]).await;
    assert!(matches!(
        rig.turn("go").await,
        Some(TurnEndReason::Aborted { .. })
    ));
    assert_eq!(rig.events("turn/end").len(), 2, "one resume, then none");
    assert_eq!(rig.turn("try again").await, Some(TurnEndReason::Completed));
    let notices = rig.watch_notices("line-repeat");
    let labels: Vec<&Value> = notices
        .iter()
        .map(|notice| &notice["source"]["summary"])
        .collect();
    assert_eq!(
        labels,
        [LABEL_LOOP_ABORTED, LABEL_LOOP_ABORTED],
        "one notice per abort: the first abort's resume steer, the second abort's notice"
    );
    for notice in &notices {
        let text = notice["content"][0]["text"].as_str().unwrap();
        assert!(
            text.contains("The system (context-care), not you, stopped the response mid-generation to end the repetition"),
            "{text}"
        );
    }
}

#[tokio::test]
async fn sw_11_kd_2_an_abort_without_resume_tells_the_model_the_system_stopped_it() {
    let rig = rig(&[looping(), json!({"text": "ok"})]).await;
    rig.toggle("stream-line-repeat", "resume", false).await;
    assert!(matches!(
        rig.turn("go").await,
        Some(TurnEndReason::Aborted { .. })
    ));
    assert_eq!(rig.events("turn/end").len(), 1, "no resumed turn");
    assert_eq!(rig.turn("continue").await, Some(TurnEndReason::Completed));
    let notices = rig.watch_notices("line-repeat");
    assert_eq!(notices.len(), 1, "{notices:#?}");
    assert_eq!(notices[0]["source"]["summary"], LABEL_LOOP_ABORTED);
    let text = notices[0]["content"][0]["text"].as_str().unwrap();
    assert!(text.contains("\"same line\""), "{text}");
    assert!(
        text.contains("The system (context-care), not you, stopped the response mid-generation"),
        "{text}"
    );
}

#[tokio::test]
async fn sw_11_an_abort_with_notice_and_resume_off_still_says_who_stopped_the_output() {
    let rig = rig(&[looping(), json!({"text": "ok"})]).await;
    rig.toggle("stream-line-repeat", "resume", false).await;
    rig.toggle("stream-line-repeat", "notice", false).await;
    assert!(matches!(
        rig.turn("go").await,
        Some(TurnEndReason::Aborted { .. })
    ));
    assert_eq!(rig.turn("continue").await, Some(TurnEndReason::Completed));
    let notices = rig.watch_notices("line-repeat");
    assert_eq!(notices.len(), 1, "{notices:#?}");
    assert_eq!(notices[0]["source"]["summary"], LABEL_LOOP_ABORTED);
    let text = notices[0]["content"][0]["text"].as_str().unwrap();
    assert!(
        text.contains("The system (context-care), not you, stopped the response mid-generation"),
        "{text}"
    );
}

/// A tool during which the person types a steer (as `ccare chat` queues one).
struct Listen;

impl ccare_agent::Tool for Listen {
    fn def(&self) -> &ccare_agent::ToolDef {
        static DEF: std::sync::OnceLock<ccare_agent::ToolDef> = std::sync::OnceLock::new();
        DEF.get_or_init(|| ccare_agent::ToolDef {
            spec: ccare_llm::ToolSpec {
                name: "listen".to_owned(),
                description: "wait a moment".into(),
                input_schema: json!({"type": "object"}).into(),
            },
            concurrency: ccare_agent::Concurrency::ParallelSafe,
            timeout_ms: None,
            validates_own_arguments: false,
        })
    }
    fn call(
        &self,
        context: ccare_agent::ToolContext,
        _arguments: Value,
    ) -> ccare_agent::BoxFuture<'static, ccare_agent::ToolOutcome> {
        let mut message = ccare_core::Message::from_blocks(vec![ccare_core::ContentBlock::text(
            "also check the tests",
        )]);
        message.source = Some(ccare_core::Source::user());
        context.inbox.steer(message);
        Box::pin(async { Ok(vec![ccare_core::ContentBlock::text("listened")]) })
    }
}

#[tokio::test]
async fn sw_10_a_real_user_steer_at_a_later_step_resets_the_watch() {
    let looping_call = json!({
        "text": "same line\n".repeat(80),
        "tool_calls": [{"name": "listen", "arguments": {}}],
    });
    let rig = rig(&[looping_call, looping(), json!({"text": "done"})]).await;
    rig.host.add_tool(Arc::new(Listen)).unwrap();
    rig.toggle("stream-line-repeat", "abort", false).await;
    assert_eq!(rig.turn("go").await, Some(TurnEndReason::Completed));
    let steps: Vec<u64> = rig
        .events("step/start")
        .iter()
        .map(|step| step["step"].as_u64().unwrap())
        .collect();
    assert_eq!(steps, [1, 2, 3]);
    let steers: Vec<Value> = rig
        .events("user/message")
        .into_iter()
        .filter(|data| data["message"]["content"][0]["text"] == "also check the tests")
        .collect();
    assert_eq!(steers.len(), 1, "the person's steer entered at step 2");
    // SW-8's once-per-user-turn record cleared at the steer, so step 2's loop is
    // noticed again.
    let notices = rig.watch_notices("line-repeat");
    assert_eq!(notices.len(), 2, "{notices:#?}");
}

/// A `tracing` writer into a shared buffer: what the plugin logs while a test runs.
#[derive(Clone, Default)]
struct Captured(Arc<std::sync::Mutex<Vec<u8>>>);

impl std::io::Write for Captured {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(bytes);
        Ok(bytes.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Captured {
    fn text(&self) -> String {
        String::from_utf8_lossy(&self.0.lock().unwrap()).into_owned()
    }
}

#[tokio::test]
async fn sw_7_an_unknown_action_is_logged_and_kept_in_the_firing_record() {
    let captured = Captured::default();
    let writer = captured.clone();
    let subscriber = tracing_subscriber::fmt()
        .with_writer(move || writer.clone())
        .with_ansi(false)
        .with_max_level(tracing::Level::WARN)
        .finish();
    // The test runtime is single-threaded: the agent's task logs on this thread.
    let _guard = tracing::subscriber::set_default(subscriber);
    let rig = rig_with(
        marker_config(&["notice", "nope"]),
        &[json!({"text": "one TODO! two"}), json!({"text": "noted"})],
    )
    .await;
    assert_eq!(rig.turn("go").await, Some(TurnEndReason::Completed));
    assert_eq!(
        rig.watch_notices("todo-marker").len(),
        1,
        "notice still ran"
    );
    let logged = captured.text();
    assert!(
        logged.contains("WARN") && logged.contains("stream-watch: unknown action nope"),
        "{logged}"
    );
    let firings = rig.plugin.recent_firings(rig.session.id());
    assert_eq!(firings.len(), 1);
    let records: Vec<String> = firings[0]
        .actions
        .as_ref()
        .expect("the run was recorded")
        .iter()
        .map(ToString::to_string)
        .collect();
    assert_eq!(records, ["notice true", "unknown action nope"]);
}

/// A closed session's watch state (its engine, policy and tool-loop history) is
/// dropped, so a long-running server keeps state only for the sessions it drives.
#[tokio::test]
async fn a_closed_session_leaves_no_watch_state_in_memory() {
    let rig = rig(&[json!({"text": "a plain answer"})]).await;
    assert_eq!(rig.turn("go").await, Some(TurnEndReason::Completed));
    assert_eq!(rig.plugin.sessions_in_memory(), 1);
    rig.host.sessions().close(rig.session.id()).await.unwrap();
    assert_eq!(rig.plugin.sessions_in_memory(), 0);
}

/// Waits up to 5 s for `rows` to read `wanted`.
async fn completion_rows(rig: &Rig, wanted: impl Fn(usize) -> bool) -> usize {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    loop {
        let rows = rig.plugin.completion_rows_in_memory();
        if wanted(rows) || std::time::Instant::now() > deadline {
            return rows;
        }
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
}

/// A closed session's completion-observer rows (its watermark and state) leave memory
/// once its writes settled, so a server keeps them only for the sessions it drives;
/// its next catch-up loads them back from the store and goes on from the watermark.
#[tokio::test]
async fn a_closed_sessions_completion_rows_leave_memory_and_its_next_catch_up_loads_them() {
    let rig = rig(&[
        json!({"text": "a plain answer"}),
        json!({"text": "another plain answer"}),
    ])
    .await;
    assert_eq!(rig.turn("go").await, Some(TurnEndReason::Completed));
    let held = completion_rows(&rig, |rows| rows > 0).await;
    assert!(held > 0, "the watermark of the answer observed");

    rig.host.sessions().close(rig.session.id()).await.unwrap();
    assert_eq!(completion_rows(&rig, |rows| rows == 0).await, 0);

    let session = rig.host.sessions().open(rig.session.id()).await.unwrap();
    let agent = ccare_agent::Agent::new(
        Arc::clone(&rig.host),
        session,
        Arc::new(ccare_core::SystemClock),
        ccare_agent::AgentOptions::new("s/scripted"),
    );
    agent.prompt("again");
    assert_eq!(agent.when_idle().await, Some(TurnEndReason::Completed));
    assert_eq!(completion_rows(&rig, |rows| rows == held).await, held);
}
