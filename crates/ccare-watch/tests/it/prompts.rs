//! Model-scoped prompts (MP-1 .. MP-3) and output-pattern feedback delivery (OP-5,
//! OP-6) of the `stream-watch` plugin, in real composition: SQLite store, scripted
//! provider on two routes (`s/a`, `s/b`), the agent loop, the log and the store read
//! back (AC-13, AC-17, AC-18).

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use ccare_agent::controls::{Patch, PatchOp};
use ccare_agent::domains::{DomainSpec, Domains, TableSpec};
use ccare_agent::{
    Agent, BoundaryContext, BoundaryContribution, BoundaryContributor, BoxFuture, HookError, Host,
    Plugin, PluginScope,
};
use ccare_core::kinds::TurnEndReason;
use ccare_core::{ContentBlock, SessionId};
use ccare_llm::script::ScriptProvider;
use ccare_llm::{GenerateRequest, Purpose};
use ccare_session::Session;
use ccare_store::{SqliteConfig, SqliteStore, Store};
use ccare_watch::pattern::fixture_1;
use ccare_watch::plugin::StreamWatchPlugin;
use ccare_watch::plugin::prompts::{
    EPISODES_TABLE, FEEDBACK_DOMAIN, PROMPTS_KIND, PROMPTS_SOURCE, PromptTrigger, RouteRef,
    episode_key, parse_prompt_rules,
};
use parking_lot::Mutex;
use serde_json::{Value, json};
use tempfile::TempDir;

use crate::composition::Composition;

const HOT: &str = "我不会做第一项。\n我不会做第二项。\n我不会做第三项。";
const FEEDBACK: &str = "{boundModelLabel} {sourceModel} H={H} K={K} N={N}\n{examples}";
const HOT_FEEDBACK: &str =
    "s/a s/a H=3 K=3 N=3\n- 我不会做第一项。\n- 我不会做第二项。\n- 我不会做第三项。";

/// Records what the request segments would add at each step boundary (`preview`).
struct PreviewProbe(Arc<Mutex<Vec<Vec<String>>>>);

impl BoundaryContributor for PreviewProbe {
    fn contribute<'a>(
        &'a self,
        context: &'a BoundaryContext<'a>,
    ) -> BoxFuture<'a, Result<BoundaryContribution, HookError>> {
        let texts = context.request_only.iter().map(message_text).collect();
        self.0.lock().push(texts);
        Box::pin(async { Ok(BoundaryContribution::default()) })
    }
}

impl Plugin for PreviewProbe {
    fn name(&self) -> &str {
        "preview-probe"
    }

    fn mount(
        &self,
        _config: &Value,
        scope: &mut PluginScope<'_>,
    ) -> Result<(), ccare_agent::MountError> {
        scope.boundary(Arc::new(PreviewProbe(Arc::clone(&self.0))), 0);
        Ok(())
    }
}

struct Rig {
    dir: TempDir,
    host: Arc<Host>,
    agent: Agent,
    session: Session,
    script: ScriptProvider,
    previews: Arc<Mutex<Vec<Vec<String>>>>,
}

async fn rig(lines: &[Value], prompts: Value) -> Rig {
    rig_in(tempfile::tempdir().unwrap(), lines, prompts, None).await
}

/// The rig over `dir`, reopening `session` when given (as a new process would).
async fn rig_in(dir: TempDir, lines: &[Value], prompts: Value, session: Option<&SessionId>) -> Rig {
    let composition = Composition::new(&dir.path().join("w.db"), lines);
    composition
        .host
        .mount(
            &StreamWatchPlugin::default(),
            &json!({"model_scoped_prompts": prompts}),
        )
        .unwrap();
    let previews = Arc::new(Mutex::new(Vec::new()));
    composition
        .host
        .mount(&PreviewProbe(Arc::clone(&previews)), &json!({}))
        .unwrap();
    let (session, agent) = composition.agent("a", session).await;
    Rig {
        dir,
        host: composition.host,
        agent,
        session,
        script: composition.script,
        previews,
    }
}

impl Rig {
    async fn turn(&self, prompt: &str) -> Option<TurnEndReason> {
        self.agent.prompt(prompt);
        self.agent.when_idle().await
    }

    fn use_model(&self, model: &str) {
        let mut options = self.agent.options();
        options.model = model.to_owned();
        self.agent.set_options(options);
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

    /// The texts of the request-only prompt message of each request, in order (`None`
    /// when a request carried none).
    fn prompt_texts(&self) -> Vec<Option<String>> {
        self.script.requests().iter().map(prompt_text).collect()
    }

    /// The `request/header{reason: series}` deltas.
    fn series(&self) -> Vec<Value> {
        self.events("request/header")
            .into_iter()
            .filter(|header| header["reason"] == "series")
            .collect()
    }

    /// The stored episode of `rule`, once `ready` holds for it (writes after a
    /// dispatch are queued, so a fresh reader may see them a moment later).
    async fn episode(&self, rule: &str, ready: impl Fn(&Value) -> bool) -> Value {
        let key = episode_key(self.session.id(), rule);
        let mut last = Value::Null;
        for _ in 0..100 {
            last = read_episode(self.dir.path(), &key).await;
            if ready(&last) {
                return last;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        panic!("episode {key} never got ready: {last:#}");
    }
}

async fn read_episode(dir: &Path, key: &str) -> Value {
    let store = SqliteStore::open(SqliteConfig::new(dir.join("w.db"))).unwrap();
    let domains = Domains::new(Arc::new(store) as Arc<dyn Store>);
    let domain = domains
        .open(
            DomainSpec::new(FEEDBACK_DOMAIN, 1).table(TableSpec::by_first_segment(EPISODES_TABLE)),
            "reader",
        )
        .await
        .unwrap();
    domain
        .table(EPISODES_TABLE)
        .unwrap()
        .get(key)
        .map_or(Value::Null, |value| (*value).clone())
}

fn message_text(message: &ccare_core::Message) -> String {
    message
        .content
        .iter()
        .filter_map(|block| match block {
            ContentBlock::Text(text) => Some(text.text.as_str()),
            _ => None,
        })
        .collect::<Vec<_>>()
        .join("\n\n")
}

fn source_kind(message: &ccare_core::Message) -> Option<String> {
    message
        .source
        .as_ref()
        .map(|source| source.kind().to_owned())
}

fn prompt_text(request: &GenerateRequest) -> Option<String> {
    let prompts: Vec<&ccare_llm::RequestMessage> = request
        .config
        .messages
        .iter()
        .filter(|message| source_kind(&message.message).as_deref() == Some(PROMPTS_KIND))
        .collect();
    assert!(prompts.len() <= 1, "ONE request-only message (MP-3)");
    let prompt = prompts.first()?;
    let last = request.config.messages.last().unwrap();
    assert!(
        Arc::ptr_eq(&prompt.message, &last.message),
        "it follows every surface message"
    );
    Some(message_text(&prompt.message))
}

fn rule(rule_id: &str, model: &str, trigger: &str, text: &str) -> Value {
    json!({
        "rule_id": rule_id,
        "version": 1,
        "provider": "s",
        "model": model,
        "trigger": trigger,
        "text": text,
    })
}

fn feedback_rule(rule_id: &str, model: &str) -> Value {
    let mut rule = rule(rule_id, model, "output-pattern", FEEDBACK);
    rule["detector"] = serde_json::to_value(fixture_1()).unwrap();
    rule
}

fn reply(text: &str) -> Value {
    json!({ "text": text })
}

fn failure() -> Value {
    json!({"failure": {"code": "AUTH_FAILED", "message": "scripted"}})
}

#[tokio::test]
async fn mp_3_a_static_prompt_ends_every_conversation_request_and_stays_off_the_surface() {
    let rig = rig(
        &[reply("one"), reply("two")],
        json!([
            rule("bound", "a", "static", "You are {boundModelLabel}."),
            rule("elsewhere", "b", "static", "Never on s/a."),
        ]),
    )
    .await;
    assert_eq!(rig.turn("first").await, Some(TurnEndReason::Completed));
    assert_eq!(rig.turn("second").await, Some(TurnEndReason::Completed));
    let prompt = "You are s/a.".to_owned();
    assert_eq!(
        rig.prompt_texts(),
        [Some(prompt.clone()), Some(prompt.clone())]
    );
    // Never on the surface.
    for user in rig.events("user/message") {
        assert_ne!(user["message"]["source"]["kind"], PROMPTS_KIND, "{user}");
        assert_ne!(user["message"]["content"][0]["text"], prompt.as_str());
    }
    // Logged in each request's series delta, with its provenance.
    let series = rig.series();
    assert_eq!(series.len(), 2);
    for (header, request) in series.iter().zip(rig.script.requests()) {
        let appended = &header["ext"]["request_delta"]["append_request_only"];
        assert_eq!(appended[0]["plugin"], "stream-watch");
        let message = &appended[0]["messages"][0];
        assert_eq!(message["content"][0]["text"], prompt.as_str());
        assert_eq!(message["source"]["kind"], PROMPTS_KIND);
        let provenance = &message["source"]["contextCarePrompt"];
        assert_eq!(provenance["callId"], request.call_id.as_str());
        assert_eq!(
            header["header"]["config"]["call_id"],
            request.call_id.as_str()
        );
        assert_eq!(provenance["message"], prompt.as_str());
        assert_eq!(
            provenance["segments"],
            json!([{"kind": "prompt", "ruleId": "bound", "version": "1", "trigger": "static"}])
        );
    }
    // The boundary preview of the second step priced the same message.
    let previews = rig.previews.lock().clone();
    assert_eq!(previews.last(), Some(&vec![prompt]));
}

#[tokio::test]
async fn mp_2_ac_13_model_switch_without_initial_bind() {
    let rig = rig(
        &[reply("1"), reply("2"), reply("3"), reply("4")],
        json!([rule(
            "switch",
            "b",
            "model-switch",
            "Now on {boundModelLabel}."
        )]),
    )
    .await;
    rig.use_model("s/b");
    rig.turn("no previous route").await;
    rig.use_model("s/a");
    rig.turn("another model").await;
    rig.use_model("s/b");
    rig.turn("switched from s/a").await;
    rig.turn("same route again").await;
    assert_eq!(
        rig.prompt_texts(),
        [None, None, Some("Now on s/b.".to_owned()), None]
    );
    let series = rig.series();
    assert_eq!(series.len(), 1, "only the request that carried it");
    let provenance = &series[0]["ext"]["request_delta"]["append_request_only"][0]["messages"][0]["source"]
        ["contextCarePrompt"];
    assert_eq!(provenance["segments"][0]["trigger"], "model-switch");
    assert_eq!(
        provenance["callId"],
        rig.script.requests()[2].call_id.as_str()
    );
    assert!(
        rig.events("user/message")
            .iter()
            .all(|user| user["message"]["content"][0]["text"] != "Now on s/b."),
        "never on the surface"
    );
}

#[tokio::test]
async fn mp_2_the_previous_route_is_the_last_dispatched_one_even_when_it_failed() {
    let rig = rig(
        &[reply("1"), failure(), reply("3")],
        json!([rule(
            "switch",
            "b",
            "model-switch",
            "Now on {boundModelLabel}."
        )]),
    )
    .await;
    rig.turn("on s/a").await;
    rig.use_model("s/b");
    assert!(matches!(
        rig.turn("switched, the provider fails").await,
        Some(TurnEndReason::Error { .. })
    ));
    // The failed call was dispatched on s/b: the newest answer is still from s/a, but
    // the last dispatched conversation route is s/b, so no switch happened since.
    assert_eq!(
        rig.turn("same route again").await,
        Some(TurnEndReason::Completed)
    );
    assert_eq!(
        rig.prompt_texts(),
        [None, Some("Now on s/b.".to_owned()), None]
    );
}

#[tokio::test]
async fn mp_2_model_switch_with_initial_bind_applies_to_the_first_call() {
    let mut switch = rule("switch", "a", "model-switch", "Bound: {boundModelLabel}");
    switch["initial_bind"] = json!(true);
    let rig = rig(&[reply("1"), reply("2")], json!([switch])).await;
    rig.turn("first").await;
    rig.turn("second").await;
    assert_eq!(rig.prompt_texts(), [Some("Bound: s/a".to_owned()), None]);
}

#[test]
fn mp_2_ac_13_matching_is_exact_on_route_and_purpose() {
    let rules = parse_prompt_rules(Some(&json!([
        rule("switch", "m", "model-switch", "{boundModelLabel}"),
        {
            "ruleId": "both", "version": "2", "provider": "s", "model": "m",
            "purposes": ["conversation", "compaction"], "trigger": "static", "text": "x",
        },
    ])))
    .unwrap();
    let switch = &rules[0];
    let here = RouteRef::new("s", "m");
    let other = RouteRef::new("s", "n");
    assert_eq!(switch.trigger, PromptTrigger::ModelSwitch);
    assert!(
        !switch.applies(&here, Purpose::Conversation, None),
        "no previous route"
    );
    assert!(switch.applies(&here, Purpose::Conversation, Some(&other)));
    assert_eq!(switch.prompt_text(&here), "s/m");
    assert!(!switch.applies(&here, Purpose::Conversation, Some(&here)));
    assert!(
        !switch.applies(&here, Purpose::Compaction, Some(&other)),
        "compaction"
    );
    assert!(
        !switch.applies(&other, Purpose::Conversation, Some(&here)),
        "other model"
    );
    let both = &rules[1];
    assert_eq!(both.version, "2");
    assert!(both.applies(&here, Purpose::Compaction, None));
    assert!(!both.applies(&here, Purpose::SessionTitle, None));
}

#[tokio::test]
async fn rc_the_prompt_control_off_removes_the_prompt() {
    let rig = rig(
        &[reply("1"), reply("2")],
        json!([rule("bound", "a", "static", "static prompt")]),
    )
    .await;
    rig.turn("on").await;
    let controls = rig.host.controls();
    controls.load(rig.session.id()).await.unwrap();
    let snapshot = controls.snapshot(rig.session.id());
    let sources: Vec<&str> = snapshot
        .sources
        .iter()
        .map(|source| source.source_id.as_str())
        .collect();
    assert!(sources.contains(&"stream-watch"), "{sources:?}");
    assert!(sources.contains(&PROMPTS_SOURCE), "{sources:?}");
    controls
        .patch(
            rig.session.id(),
            Patch {
                revision: 0,
                source_id: PROMPTS_SOURCE.to_owned(),
                rule_id: "prompt:bound".to_owned(),
                op: PatchOp::Toggle {
                    action_id: "notice".to_owned(),
                    enabled: false,
                },
            },
            rig.session.head(),
        )
        .await
        .unwrap();
    rig.turn("off").await;
    assert_eq!(rig.prompt_texts(), [Some("static prompt".to_owned()), None]);
}

#[tokio::test]
async fn mp_1_ac_17_config_errors_name_the_rule_and_the_field() {
    let error = |rules: Value| parse_prompt_rules(Some(&rules)).unwrap_err().to_string();
    let mut no_detector = rule("op", "a", "output-pattern", "t");
    assert_eq!(
        error(json!([no_detector.clone()])),
        "model_scoped_prompts[0] (rule \"op\"): detector: is required when the trigger is output-pattern"
    );
    let mut detector = serde_json::to_value(fixture_1()).unwrap();
    detector["maxPhrases"] = json!(1);
    no_detector["detector"] = detector;
    assert_eq!(
        error(json!([no_detector])),
        "model_scoped_prompts[0] (rule \"op\"): detector: phrases must have 1..=1 entries, found 4"
    );
    let mut static_with_detector = rule("st", "a", "static", "t");
    static_with_detector["detector"] = serde_json::to_value(fixture_1()).unwrap();
    assert!(
        error(json!([static_with_detector])).starts_with(
            "model_scoped_prompts[0] (rule \"st\"): detector: is allowed only when the trigger is output-pattern"
        )
    );
    let mut compaction = feedback_rule("op", "a");
    compaction["purposes"] = json!(["conversation", "compaction"]);
    assert_eq!(
        error(json!([compaction])),
        "model_scoped_prompts[0] (rule \"op\"): purposes: must be [conversation] when the trigger is output-pattern"
    );
    assert_eq!(
        error(json!([
            rule("x", "a", "static", "t"),
            rule("x", "b", "static", "u")
        ])),
        "model_scoped_prompts[1] (rule \"x\"): rule_id: duplicate rule id"
    );
    let mut unknown = rule("x", "a", "static", "t");
    unknown["colour"] = json!("red");
    assert_eq!(
        error(json!([unknown])),
        "model_scoped_prompts[0] (rule \"x\"): colour: unknown field"
    );
    let mut twice = rule("x", "a", "static", "t");
    twice["initialBind"] = json!(true);
    twice["initial_bind"] = json!(false);
    assert!(error(json!([twice])).contains("initial_bind: given twice"));
    assert_eq!(
        error(json!([rule("x", "a", "sometimes", "t")])),
        "model_scoped_prompts[0] (rule \"x\"): trigger: must be static, model-switch or output-pattern, got \"sometimes\""
    );
    let mut no_id = rule("x", "a", "static", "t");
    no_id.as_object_mut().unwrap().remove("rule_id");
    assert_eq!(
        error(json!([no_id])),
        "model_scoped_prompts[0]: rule_id: is required"
    );
    assert_eq!(
        error(json!([rule("x", "a", "static", "")])),
        "model_scoped_prompts[0] (rule \"x\"): text: must be a non-empty string, got \"\""
    );
    let mut bad_purpose = rule("x", "a", "static", "t");
    bad_purpose["purposes"] = json!(["chat"]);
    assert!(error(json!([bad_purpose])).contains("purposes: each must be one of"));
    assert_eq!(
        error(json!({"rule_id": "x"})),
        "model_scoped_prompts: must be an array of rule tables, got {\"rule_id\":\"x\"}"
    );
    // At mount: the plugin's prefix, and nothing stays registered.
    let rig = rig(&[], json!([])).await;
    rig.host.unmount("stream-watch");
    let mounted = rig.host.mount(
        &StreamWatchPlugin::default(),
        &json!({"model_scoped_prompts": [rule("op", "a", "output-pattern", "t")]}),
    );
    assert_eq!(
        mounted.unwrap_err().to_string(),
        "stream-watch: model_scoped_prompts[0] (rule \"op\"): detector: is required when the trigger is output-pattern"
    );
    assert!(!rig.host.mounted().contains(&"stream-watch".to_owned()));
}

#[test]
fn mp_1_snake_case_and_camel_case_keys_read_the_same() {
    fn snake(value: &Value) -> Value {
        match value {
            Value::Object(object) => Value::Object(
                object
                    .iter()
                    .map(|(key, item)| {
                        let mut out = String::new();
                        for ch in key.chars() {
                            if ch.is_ascii_uppercase() {
                                out.push('_');
                                out.push(ch.to_ascii_lowercase());
                            } else {
                                out.push(ch);
                            }
                        }
                        (out, snake(item))
                    })
                    .collect(),
            ),
            Value::Array(items) => Value::Array(items.iter().map(snake).collect()),
            other => other.clone(),
        }
    }
    let camel = json!([{
        "ruleId": "op", "version": "3", "provider": "s", "model": "a",
        "trigger": "output-pattern", "text": "t", "carryFromOtherRoute": true,
        "detector": serde_json::to_value(fixture_1()).unwrap(),
    }]);
    let from_camel = parse_prompt_rules(Some(&camel)).unwrap();
    let from_snake = parse_prompt_rules(Some(&snake(&camel))).unwrap();
    assert_eq!(from_camel, from_snake);
    assert_eq!(from_camel[0].detector, Some(fixture_1()));
    assert!(from_camel[0].carry_from_other_route);
    assert_eq!(from_camel[0].purposes, [Purpose::Conversation]);
    assert!(parse_prompt_rules(None).unwrap().is_empty());
}

#[tokio::test]
async fn op_5_op_6_feedback_is_delivered_once_after_a_trigger_and_not_again_in_cooldown() {
    let rig = rig(
        &[reply(HOT), reply(HOT), reply(HOT), reply(HOT), reply("ok")],
        json!([feedback_rule("phrasing", "a")]),
    )
    .await;
    for turn in 1..=5 {
        assert_eq!(
            rig.turn(&format!("turn {turn}")).await,
            Some(TurnEndReason::Completed)
        );
    }
    let hot = Some(HOT_FEEDBACK.to_owned());
    // 1: nothing yet; 2: the first reply's feedback; 3, 4: cooldown (completed 2 and 3
    // ≤ cooldownUntil 3); 5: the fourth reply triggered again.
    assert_eq!(rig.prompt_texts(), [None, hot.clone(), None, None, hot]);
    for user in rig.events("user/message") {
        assert_ne!(user["message"]["source"]["kind"], PROMPTS_KIND, "{user}");
    }
    let series = rig.series();
    assert_eq!(series.len(), 2);
    let segment = &series[0]["ext"]["request_delta"]["append_request_only"][0]["messages"][0]["source"]
        ["contextCarePrompt"]["segments"][0];
    assert_eq!(segment["kind"], "feedback");
    assert_eq!(segment["ruleId"], "phrasing");
    assert_eq!(segment["trigger"], "single-output");
    assert_eq!(segment["sourceRoute"], "s/a");
    // The second delivery was dispatched once (the boundary previews reserved nothing).
    let episode = rig
        .episode("phrasing", |episode| {
            episode["lastDelivery"]["status"] == "dispatched"
                && episode["lastDelivery"]["seq"] != segment_seq(&series[0])
        })
        .await;
    assert_eq!(episode["lastDelivery"]["deliveries"], 1, "{episode:#}");
    // The fifth reply is observed only at the next step's pre-step.
    assert_eq!(episode["completed"], 4, "{episode:#}");
    assert!(episode.get("pending").is_none(), "{episode:#}");
    assert!(
        rig.previews
            .lock()
            .iter()
            .any(|texts| texts == &[HOT_FEEDBACK.to_owned()]),
        "the preview priced the feedback"
    );
}

/// The seq of the output a delivered feedback segment was about (from its segment id
/// `<version>:<fingerprint>:<seq>`).
fn segment_seq(header: &Value) -> Value {
    let segment_id = header["ext"]["request_delta"]["append_request_only"][0]["messages"][0]
        ["source"]["contextCarePrompt"]["segments"][0]["segmentId"]
        .as_str()
        .unwrap();
    json!(
        segment_id
            .rsplit(':')
            .next()
            .unwrap()
            .parse::<u64>()
            .unwrap()
    )
}

#[tokio::test]
async fn op_6_ac_18_a_crash_redelivers_up_to_max_deliveries_then_a_new_trigger_is_possible() {
    let prompts = json!([feedback_rule("phrasing", "a")]);
    // Process 1: a triggering reply, then a request that carried the feedback and
    // never got an answer.
    let first = rig(&[reply(HOT), failure()], prompts.clone()).await;
    first.turn("one").await;
    assert!(matches!(
        first.turn("two").await,
        Some(TurnEndReason::Error { .. })
    ));
    assert_eq!(first.prompt_texts(), [None, Some(HOT_FEEDBACK.to_owned())]);
    let reserved = first
        .episode("phrasing", |episode| {
            episode["pending"]["status"] == "delivery-unknown"
        })
        .await;
    assert_eq!(reserved["pending"]["deliveries"], 1);
    let segment_id = reserved["pending"]["segmentId"].clone();
    // The crash: everything but the files goes.
    let Rig {
        dir,
        session,
        agent,
        host,
        ..
    } = first;
    let id = session.id().clone();
    drop(agent);
    drop(host);
    drop(session);

    // Process 2: redelivered (2 of 2), unanswered again; then no more deliveries.
    let second = rig_in(
        dir,
        &[failure(), reply(HOT), reply(HOT), reply(HOT), reply("fine")],
        prompts,
        Some(&id),
    )
    .await;
    assert!(matches!(
        second.turn("three").await,
        Some(TurnEndReason::Error { .. })
    ));
    let exhausted = second
        .episode("phrasing", |episode| episode["pending"]["deliveries"] == 2)
        .await;
    assert_eq!(exhausted["pending"]["segmentId"], segment_id);
    for turn in 4..=7 {
        second.turn(&format!("turn {turn}")).await;
    }
    // 3: the redelivery; 4: exhausted, nothing; its reply drops the pending as
    // `exhausted` and is within the cooldown, as is 5's; 6's reply triggers anew (the
    // 4th completed output), delivered at 7.
    let hot = Some(HOT_FEEDBACK.to_owned());
    assert_eq!(second.prompt_texts(), [hot.clone(), None, None, None, hot]);
    let episode = second
        .episode("phrasing", |episode| {
            episode["lastDelivery"]["status"] == "dispatched"
        })
        .await;
    assert_ne!(episode["lastDelivery"]["segmentId"], segment_id);
    assert_eq!(episode["completed"], 4, "{episode:#}");
}

#[tokio::test]
async fn op_6_ac_18_a_dispatch_on_another_route_supersedes_unless_carried() {
    // Not carried: the s/a pending is superseded by a dispatch on s/b.
    let rig = rig(
        &[reply(HOT), reply("on b"), reply("back on a")],
        json!([feedback_rule("phrasing", "a")]),
    )
    .await;
    rig.turn("one").await;
    rig.use_model("s/b");
    rig.turn("two").await;
    let superseded = rig
        .episode("phrasing", |episode| {
            episode["lastDelivery"]["status"] == "superseded"
        })
        .await;
    assert!(superseded.get("pending").is_none(), "{superseded:#}");
    rig.use_model("s/a");
    rig.turn("three").await;
    assert_eq!(rig.prompt_texts(), [None, None, None]);

    // Carried: a rule on s/b with carryFromOtherRoute takes the s/a pending along.
    let mut carrier = feedback_rule("carrier", "b");
    carrier["carry_from_other_route"] = json!(true);
    let rig = self::rig(
        &[reply(HOT), reply("on b")],
        json!([feedback_rule("phrasing", "a"), carrier]),
    )
    .await;
    rig.turn("one").await;
    rig.use_model("s/b");
    rig.turn("two").await;
    assert_eq!(
        rig.prompt_texts(),
        [
            None,
            Some(
                "s/b s/a H=3 K=3 N=3\n- 我不会做第一项。\n- 我不会做第二项。\n- 我不会做第三项。"
                    .to_owned()
            )
        ]
    );
    let carried = rig
        .episode("phrasing", |episode| {
            episode["lastDelivery"]["status"] == "dispatched"
        })
        .await;
    assert!(carried.get("pending").is_none(), "{carried:#}");
    let segment = &rig.series()[0]["ext"]["request_delta"]["append_request_only"][0]["messages"][0]
        ["source"]["contextCarePrompt"]["segments"][0];
    assert_eq!(segment["carried"], true);
    assert_eq!(segment["sourceRoute"], "s/a");
}

/// A plugin that makes its own `compaction` call through the host's side requests
/// before each step (as context care's summaries do), on the next route of `models`,
/// and records how each ended.
struct SideCaller {
    models: Mutex<Vec<&'static str>>,
    finishes: Mutex<Vec<ccare_llm::Finish>>,
}

struct SideCallHook(Arc<SideCaller>, ccare_agent::SideRequests);

impl ccare_agent::PreStepHook for SideCallHook {
    fn call<'a>(
        &'a self,
        context: &'a ccare_agent::HookContext,
        input: ccare_agent::PreStepInput,
        next: ccare_agent::PreStepNext<'a>,
    ) -> BoxFuture<'a, Result<ccare_agent::PreStepDecision, HookError>> {
        Box::pin(async move {
            let model = self.0.models.lock().remove(0);
            let config = ccare_llm::CallConfig {
                model: model.to_owned(),
                messages: vec![ccare_llm::RequestMessage::user(
                    ccare_core::Message::from_blocks(vec![ContentBlock::text("summarize")]),
                )],
                purpose: Purpose::Compaction,
                ..ccare_llm::CallConfig::default()
            };
            let side = self
                .1
                .prepare(context, config)
                .map_err(|error| HookError::new(error.to_string()))?;
            let assembled = side.complete(context.cancel.clone()).await;
            self.0.finishes.lock().push(assembled.finish);
            next.run(input).await
        })
    }
}

struct SideCallerPlugin(Arc<SideCaller>);

impl Plugin for SideCallerPlugin {
    fn name(&self) -> &str {
        "side-caller"
    }

    fn mount(
        &self,
        _config: &Value,
        scope: &mut PluginScope<'_>,
    ) -> Result<(), ccare_agent::MountError> {
        let hook = SideCallHook(Arc::clone(&self.0), scope.side_requests());
        scope.pre_step(Arc::new(hook), false);
        Ok(())
    }
}

#[tokio::test]
async fn mp_3_a_compaction_prompt_reaches_side_calls_and_never_the_conversation() {
    let mut summary = rule("sum", "a", "static", "Summarize for {boundModelLabel}.");
    summary["purposes"] = json!(["compaction"]);
    let mut moved = rule(
        "sum-switch",
        "a",
        "model-switch",
        "Summaries moved to {boundModelLabel}.",
    );
    moved["purposes"] = json!(["compaction"]);
    let rig = rig(
        &[
            reply("summary one"),
            reply("one"),
            reply("summary two"),
            reply("two"),
        ],
        json!([
            rule("talk", "a", "static", "You are {boundModelLabel}."),
            summary,
            moved
        ]),
    )
    .await;
    let caller = Arc::new(SideCaller {
        models: Mutex::new(vec!["s/b", "s/a"]),
        finishes: Mutex::new(Vec::new()),
    });
    rig.host
        .mount(&SideCallerPlugin(Arc::clone(&caller)), &json!({}))
        .unwrap();
    assert_eq!(rig.turn("first").await, Some(TurnEndReason::Completed));
    assert_eq!(rig.turn("second").await, Some(TurnEndReason::Completed));
    assert_eq!(
        *caller.finishes.lock(),
        [ccare_llm::Finish::Stop, ccare_llm::Finish::Stop]
    );
    let requests = rig.script.requests();
    let purposes: Vec<Purpose> = requests
        .iter()
        .map(|request| request.config.purpose)
        .collect();
    assert_eq!(
        purposes,
        [
            Purpose::Compaction,
            Purpose::Conversation,
            Purpose::Compaction,
            Purpose::Conversation
        ]
    );
    // Exact on route and purpose (MP-2): the summary on s/b carries nothing; the one
    // on s/a carries both compaction rules, the model-switch one because the last
    // dispatched compaction route was s/b (recorded from the answered side call).
    // Conversation requests carry only the conversation rule.
    assert_eq!(
        rig.prompt_texts(),
        [
            None,
            Some("You are s/a.".to_owned()),
            Some("Summarize for s/a.\n\nSummaries moved to s/a.".to_owned()),
            Some("You are s/a.".to_owned()),
        ]
    );
    // The summary's prompt carries its provenance, naming its own call.
    let prompt = requests[2].config.messages.last().unwrap();
    let Some(ccare_core::Source::Plugin(source)) = &prompt.message.source else {
        panic!("a plugin source: {:?}", prompt.message.source);
    };
    let provenance = source.extra.get("contextCarePrompt").unwrap();
    assert_eq!(provenance["callId"], requests[2].call_id.as_str());
    assert_eq!(
        provenance["segments"],
        json!([
            {"kind": "prompt", "ruleId": "sum", "version": "1", "trigger": "static"},
            {"kind": "prompt", "ruleId": "sum-switch", "version": "1", "trigger": "model-switch"},
        ])
    );
    // Side calls write no request/header: only the two conversation requests did.
    assert_eq!(rig.series().len(), 2);
    // The boundary preview prices the conversation request, not the summary call the
    // pre-step hook just made: nothing before any conversation call, then the
    // conversation prompt.
    assert_eq!(
        *rig.previews.lock(),
        [Vec::<String>::new(), vec!["You are s/a.".to_owned()]]
    );
}
