//! Model-scoped prompts (MP-1 .. MP-3) and the delivery of output-pattern feedback
//! (OP-5, OP-6), as part of the `stream-watch` plugin.
//!
//! - [`parse_prompt_rules`] reads the strict `model_scoped_prompts` array (MP-1).
//! - [`PromptRule::applies`] is the pure MP-2 match of a `static` or `model-switch`
//!   rule on a call's route, purpose and the previous dispatched route.
//! - [`prompts_catalog`] is the second controls source, `stream-watch:prompts`, with one
//!   rule `prompt:<ruleId>[notice]` per configured rule (RC-1).
//! - [`register`] wires it all in: a request hook notes the route and purpose of the
//!   call being prepared (a request segment is told only the call id), a request
//!   segment appends ONE request-only user message (prompts, then feedback, joined by
//!   a blank line; source kind [`PROMPTS_KIND`]) after every surface message (MP-3),
//!   also to the side calls of a purpose some rule names (context care's summaries,
//!   purpose `compaction`, go through the host's `SideRequests`),
//!   and, when an `output-pattern` rule exists, the feedback episodes (in the storage
//!   domain [`FEEDBACK_DOMAIN`]), observed at pre-step time and delivered through the
//!   segment.
//!
//! The previous route is the last dispatched route of the call's purpose (MP-2): the
//! plugin's own gate records every dispatch; for a session this process has not
//! dispatched on, it is a fact of the session log, never of another plugin's store
//! (DESIGN.md §3), see [`last_dispatched_route`].
//!
//! The kernel logs the segment's message in the request's `request/header{reason:
//! series}` delta; its provenance (`contextCarePrompt{callId, segments, message}`)
//! travels in the message's source, so it lands in that same delta. A side call has
//! no `request/header`: its caller logs the message with its own events (context care
//! in `compaction/summary.request_delta`).

mod feedback;

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use ccare_agent::controls::{ControlAction, ControlRule, ControlSource, Controls};
use ccare_agent::{
    BoxFuture, HookContext, HookError, PluginScope, PreStepDecision, PreStepHook, PreStepInput,
    PreStepNext, RequestGate, RequestHook, RequestSegment,
};
use ccare_core::kinds::{
    ASSISTANT_MESSAGE, AssistantMessage, COMPACTION_SUMMARY, CompactionSummary,
};
use ccare_core::{
    ContentBlock, Event, Extra, LlmFailure, Message, PluginSource, SessionId, Source,
};
use ccare_llm::{CallConfig, PreparedCall, Purpose, split_model_ref};
use parking_lot::Mutex;
use serde_json::{Map, Value, json};

use crate::pattern::{FeedbackContext, OutputPatternConfig, render_feedback_text};
use feedback::FeedbackStore;
pub use feedback::{EPISODES_TABLE, FEEDBACK_DOMAIN, episode_key};

/// The `[plugins.stream-watch]` key of the rules (MP-1).
pub const CONFIG_KEY: &str = "model_scoped_prompts";
/// The controls source of the prompt rules: one rule `prompt:<ruleId>` each, with the
/// action `notice` (RC-1). Separate from the watch's own `stream-watch` source.
pub const PROMPTS_SOURCE: &str = "stream-watch:prompts";
/// The source kind of the request-only message (MP-3, GEN-2).
pub const PROMPTS_KIND: &str = "plugin:context-care:scoped-prompts";
/// The key of the message's provenance in its source (MP-3 `contextCarePrompt`).
pub const PROVENANCE_KEY: &str = "contextCarePrompt";
/// The only action of a prompt rule's control.
pub const PROMPT_ACTION: &str = "notice";

/// The control rule of a prompt rule: `prompt:<ruleId>` (RC-1).
pub fn control_rule_id(rule_id: &str) -> String {
    format!("prompt:{rule_id}")
}

/// When a rule applies (MP-1 `trigger`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum PromptTrigger {
    /// On every matching call.
    Static,
    /// On the first call after the route changed (or on the first call at all, with
    /// `initialBind`).
    ModelSwitch,
    /// Feedback about the model's own outputs on the route (OP-*); needs a detector.
    OutputPattern,
}

impl PromptTrigger {
    /// `static`, `model-switch` or `output-pattern`.
    pub fn as_str(self) -> &'static str {
        match self {
            PromptTrigger::Static => "static",
            PromptTrigger::ModelSwitch => "model-switch",
            PromptTrigger::OutputPattern => "output-pattern",
        }
    }

    fn parse(text: &str) -> Option<Self> {
        match text {
            "static" => Some(PromptTrigger::Static),
            "model-switch" => Some(PromptTrigger::ModelSwitch),
            "output-pattern" => Some(PromptTrigger::OutputPattern),
            _ => None,
        }
    }
}

/// An exact route: a provider's config name and a model as the provider knows it.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct RouteRef {
    /// The provider's config name.
    pub provider: String,
    /// The model name.
    pub model: String,
}

impl RouteRef {
    /// A route from its parts.
    pub fn new(provider: impl Into<String>, model: impl Into<String>) -> Self {
        RouteRef {
            provider: provider.into(),
            model: model.into(),
        }
    }

    /// The route of a `"<provider>/<model>"` reference, as the LLM layer splits it.
    pub fn from_model_ref(model_ref: &str) -> Option<Self> {
        split_model_ref(model_ref).map(|(provider, model)| RouteRef::new(provider, model))
    }

    /// `provider/model`: what `{boundModelLabel}` becomes (MP-2).
    pub fn label(&self) -> String {
        format!("{}/{}", self.provider, self.model)
    }
}

/// One configured model-scoped prompt rule (MP-1), validated.
#[derive(Debug, Clone, PartialEq)]
pub struct PromptRule {
    /// Unique among the rules; its control is `prompt:<ruleId>`.
    pub rule_id: String,
    /// The rule's version; a change resets its feedback episodes (OP-5).
    pub version: String,
    /// The exact route the rule is bound to.
    pub route: RouteRef,
    /// The purposes it applies to; `[conversation]` by default.
    pub purposes: Vec<Purpose>,
    /// When it applies.
    pub trigger: PromptTrigger,
    /// `model-switch` only: also apply when there is no previous route.
    pub initial_bind: bool,
    /// The model-visible text, the user's own; `{boundModelLabel}` (and, for
    /// feedback, `{sourceModel} {H} {K} {N} {examples}`) are filled in.
    pub text: String,
    /// The detector, present exactly for `output-pattern` rules.
    pub detector: Option<OutputPatternConfig>,
    /// `output-pattern` only: a request on this route also carries the pending
    /// feedback of the session's other routes (OP-6).
    pub carry_from_other_route: bool,
}

impl PromptRule {
    /// The rule's control rule id, `prompt:<ruleId>`.
    pub fn control_rule_id(&self) -> String {
        control_rule_id(&self.rule_id)
    }

    /// Whether a `static` or `model-switch` rule applies to a call on `route` for
    /// `purpose`, given the last dispatched route of that purpose (MP-2). Matching is
    /// exact; `output-pattern` rules never apply as prompts (their feedback is
    /// delivered separately). Controls are the caller's concern.
    pub fn applies(&self, route: &RouteRef, purpose: Purpose, previous: Option<&RouteRef>) -> bool {
        if self.route != *route || !self.purposes.contains(&purpose) {
            return false;
        }
        match self.trigger {
            PromptTrigger::Static => true,
            PromptTrigger::ModelSwitch => {
                previous.map_or(self.initial_bind, |previous| previous != route)
            }
            PromptTrigger::OutputPattern => false,
        }
    }

    /// The prompt text for a call on `route`: `{boundModelLabel}` becomes
    /// `provider/model` (MP-2); nothing else is touched.
    pub fn prompt_text(&self, route: &RouteRef) -> String {
        self.text.replace("{boundModelLabel}", &route.label())
    }
}

/// Why the `model_scoped_prompts` config was refused (MP-1). Its message names the
/// rule (by index, and by id once known) and the field.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{}", self.describe())]
pub struct PromptConfigError {
    /// The rule's index in the array, if the error is about one rule.
    pub index: Option<usize>,
    /// The rule's id, if it was readable.
    pub rule_id: Option<String>,
    /// The field (snake_case, as in `ccare.toml`), if the error is about one.
    pub field: Option<String>,
    /// What is wrong.
    pub problem: String,
}

impl PromptConfigError {
    fn describe(&self) -> String {
        let mut text = CONFIG_KEY.to_owned();
        if let Some(index) = self.index {
            text.push_str(&format!("[{index}]"));
        }
        if let Some(rule_id) = &self.rule_id {
            text.push_str(&format!(" (rule {rule_id:?})"));
        }
        if let Some(field) = &self.field {
            text.push_str(": ");
            text.push_str(field);
        }
        text.push_str(": ");
        text.push_str(&self.problem);
        text
    }
}

/// The fields of a rule: (snake_case, camelCase).
const FIELDS: &[(&str, &str)] = &[
    ("rule_id", "ruleId"),
    ("version", "version"),
    ("provider", "provider"),
    ("model", "model"),
    ("purposes", "purposes"),
    ("trigger", "trigger"),
    ("initial_bind", "initialBind"),
    ("text", "text"),
    ("detector", "detector"),
    ("carry_from_other_route", "carryFromOtherRoute"),
];

/// The longest control id (RC-1), in UTF-16 code units.
const MAX_CONTROL_ID_LEN: usize = 256;

/// Parses `model_scoped_prompts` strictly (MP-1): an array of rule tables with the
/// fields `rule_id, version, provider, model, purposes, trigger, initial_bind, text,
/// detector, carry_from_other_route` (camelCase accepted too, not both forms of one
/// field; the detector's keys likewise). `detector` is present exactly when the
/// trigger is `output-pattern`, and then purposes must be `[conversation]`; the
/// detector is a validated [`OutputPatternConfig`]. Duplicate rule ids are errors.
/// `None` (the key is absent) is no rules.
pub fn parse_prompt_rules(value: Option<&Value>) -> Result<Vec<PromptRule>, PromptConfigError> {
    let Some(value) = value else {
        return Ok(Vec::new());
    };
    let Value::Array(entries) = value else {
        return Err(PromptConfigError {
            index: None,
            rule_id: None,
            field: None,
            problem: format!("must be an array of rule tables, got {value}"),
        });
    };
    let mut rules: Vec<PromptRule> = Vec::with_capacity(entries.len());
    let mut seen = HashSet::new();
    for (index, entry) in entries.iter().enumerate() {
        let rule = parse_rule(index, entry)?;
        if !seen.insert(rule.rule_id.clone()) {
            return Err(PromptConfigError {
                index: Some(index),
                rule_id: Some(rule.rule_id),
                field: Some("rule_id".to_owned()),
                problem: "duplicate rule id".to_owned(),
            });
        }
        rules.push(rule);
    }
    Ok(rules)
}

fn parse_rule(index: usize, entry: &Value) -> Result<PromptRule, PromptConfigError> {
    let Value::Object(table) = entry else {
        return Err(PromptConfigError {
            index: Some(index),
            rule_id: None,
            field: None,
            problem: format!("must be a table, got {entry}"),
        });
    };
    // The id first, so every later error names the rule.
    let rule_id = table
        .get("rule_id")
        .or_else(|| table.get("ruleId"))
        .and_then(Value::as_str)
        .map(str::to_owned);
    let error = |field: &str, problem: String| PromptConfigError {
        index: Some(index),
        rule_id: rule_id.clone(),
        field: Some(field.to_owned()),
        problem,
    };
    let mut fields: HashMap<&'static str, &Value> = HashMap::new();
    for (key, value) in table {
        let Some((snake, _)) = FIELDS
            .iter()
            .find(|(snake, camel)| key == snake || key == camel)
        else {
            return Err(error(key, "unknown field".to_owned()));
        };
        if fields.insert(snake, value).is_some() {
            return Err(error(
                snake,
                "given twice (snake_case and camelCase)".to_owned(),
            ));
        }
    }
    let string = |field: &'static str| -> Result<String, PromptConfigError> {
        match fields.get(field) {
            None => Err(error(field, "is required".to_owned())),
            Some(Value::String(text)) if !text.trim().is_empty() => Ok(text.clone()),
            Some(other) => Err(error(
                field,
                format!("must be a non-empty string, got {other}"),
            )),
        }
    };
    let flag = |field: &'static str| -> Result<bool, PromptConfigError> {
        match fields.get(field) {
            None => Ok(false),
            Some(Value::Bool(flag)) => Ok(*flag),
            Some(other) => Err(error(field, format!("must be true or false, got {other}"))),
        }
    };
    let rule_id = string("rule_id")?;
    let control_len = control_rule_id(&rule_id).encode_utf16().count();
    if control_len > MAX_CONTROL_ID_LEN {
        return Err(error(
            "rule_id",
            format!(
                "is too long: its control id prompt:<rule_id> has {control_len} chars, at most {MAX_CONTROL_ID_LEN}"
            ),
        ));
    }
    let version = match fields.get("version") {
        None => return Err(error("version", "is required".to_owned())),
        Some(Value::String(text)) if !text.trim().is_empty() => text.clone(),
        Some(Value::Number(number)) if number.is_u64() => number.to_string(),
        Some(other) => {
            return Err(error(
                "version",
                format!("must be a non-empty string or a non-negative integer, got {other}"),
            ));
        }
    };
    let provider = string("provider")?;
    if provider.contains('/') {
        return Err(error(
            "provider",
            format!("must be a provider's config name, without '/', got {provider:?}"),
        ));
    }
    let model = string("model")?;
    let purposes = match fields.get("purposes") {
        None => vec![Purpose::Conversation],
        Some(Value::Array(items)) if !items.is_empty() => {
            let mut purposes = Vec::with_capacity(items.len());
            for item in items {
                let purpose = item
                    .as_str()
                    .and_then(|text| text.parse::<Purpose>().ok())
                    .ok_or_else(|| {
                        error(
                            "purposes",
                            format!(
                                "each must be one of conversation, compaction, session-title, got {item}"
                            ),
                        )
                    })?;
                if purposes.contains(&purpose) {
                    return Err(error("purposes", format!("{purpose} is listed twice")));
                }
                purposes.push(purpose);
            }
            purposes
        }
        Some(other) => {
            return Err(error(
                "purposes",
                format!("must be a non-empty array of purposes, got {other}"),
            ));
        }
    };
    let trigger_text = string("trigger")?;
    let trigger = PromptTrigger::parse(&trigger_text).ok_or_else(|| {
        error(
            "trigger",
            format!("must be static, model-switch or output-pattern, got {trigger_text:?}"),
        )
    })?;
    let text = string("text")?;
    let detector = match (trigger, fields.get("detector")) {
        (PromptTrigger::OutputPattern, None) => {
            return Err(error(
                "detector",
                "is required when the trigger is output-pattern".to_owned(),
            ));
        }
        (PromptTrigger::OutputPattern, Some(detector)) => {
            if purposes != [Purpose::Conversation] {
                return Err(error(
                    "purposes",
                    "must be [conversation] when the trigger is output-pattern".to_owned(),
                ));
            }
            let camel = camel_keys(detector).map_err(|problem| error("detector", problem))?;
            let config = OutputPatternConfig::from_json(camel)
                .map_err(|problem| error("detector", problem.to_string()))?;
            Some(config)
        }
        (_, Some(_)) => {
            return Err(error(
                "detector",
                format!(
                    "is allowed only when the trigger is output-pattern, not {}",
                    trigger.as_str()
                ),
            ));
        }
        (_, None) => None,
    };
    Ok(PromptRule {
        rule_id,
        version,
        route: RouteRef::new(provider, model),
        purposes,
        trigger,
        initial_bind: flag("initial_bind")?,
        text,
        detector,
        carry_from_other_route: flag("carry_from_other_route")?,
    })
}

/// The detector with every object key in camelCase (`max_text_chars` →
/// `maxTextChars`); a key given in both forms is an error.
fn camel_keys(value: &Value) -> Result<Value, String> {
    match value {
        Value::Object(object) => {
            let mut out = Map::with_capacity(object.len());
            for (key, item) in object {
                let camel = snake_to_camel(key);
                if out.contains_key(&camel) {
                    return Err(format!("{camel} is given twice (snake_case and camelCase)"));
                }
                out.insert(camel, camel_keys(item)?);
            }
            Ok(Value::Object(out))
        }
        Value::Array(items) => items
            .iter()
            .map(camel_keys)
            .collect::<Result<Vec<_>, _>>()
            .map(Value::Array),
        other => Ok(other.clone()),
    }
}

fn snake_to_camel(key: &str) -> String {
    let mut camel = String::with_capacity(key.len());
    for (part_idx, part) in key.split('_').enumerate() {
        let mut chars = part.chars();
        match chars.next() {
            Some(first) if part_idx > 0 => {
                camel.extend(first.to_uppercase());
                camel.push_str(chars.as_str());
            }
            _ => camel.push_str(part),
        }
    }
    camel
}

/// The controls source `stream-watch:prompts` (RC-1): `prompt:<ruleId>[notice]` for
/// every configured rule, in config order, on by default.
pub fn prompts_catalog(rules: &[PromptRule]) -> ControlSource {
    let rules = rules
        .iter()
        .map(|rule| {
            ControlRule::new(
                rule.control_rule_id(),
                vec![ControlAction::new(PROMPT_ACTION)],
            )
        })
        .collect();
    ControlSource {
        plugin: Some(super::SOURCE.to_owned()),
        ..ControlSource::new(PROMPTS_SOURCE, rules)
    }
}

/// The last dispatched route of `purpose` that a session log records (MP-2), for a
/// session this process has not dispatched on yet (after a restart): for
/// `conversation` the route of the newest `assistant/message` (every one answers a
/// dispatched conversation call and carries its provider and model), for
/// `compaction` that of the newest `compaction/summary`; `session-title` calls leave
/// no route in the log. `request/header` and `request/context` are not used: they
/// are written for calls a request gate then keeps back, and only when the route
/// changed. While the process runs, the plugin's own record of each dispatch is
/// exact and takes precedence (a call that was dispatched and then failed counts).
pub fn last_dispatched_route(events: &[Arc<Event>], purpose: Purpose) -> Option<RouteRef> {
    match purpose {
        Purpose::Conversation => events
            .iter()
            .rev()
            .filter(|event| event.kind() == ASSISTANT_MESSAGE)
            .find_map(|event| event.decode::<AssistantMessage>().ok())
            .map(|message| RouteRef::new(message.provider, message.model)),
        Purpose::Compaction => events
            .iter()
            .rev()
            .filter(|event| event.kind() == COMPACTION_SUMMARY)
            .find_map(|event| event.decode::<CompactionSummary>().ok())
            .map(|summary| RouteRef::new(summary.provider, summary.model)),
        _ => None,
    }
}

/// Validates the `model_scoped_prompts` rules and registers them into the
/// `stream-watch` plugin's scope: the controls source [`PROMPTS_SOURCE`], a request
/// hook (the call's route and purpose), the request segment, and for
/// `output-pattern` rules a pre-step hook (observation) and a request gate (makes a
/// reservation durable before dispatch). No rules: nothing is registered.
pub fn register(
    rules: Vec<PromptRule>,
    scope: &mut PluginScope<'_>,
) -> Result<(), ccare_agent::MountError> {
    if rules.is_empty() {
        return Ok(());
    }
    scope.control_source(prompts_catalog(&rules))?;
    let has_feedback = rules
        .iter()
        .any(|rule| rule.trigger == PromptTrigger::OutputPattern);
    let prompts = Arc::new(ScopedPrompts {
        rules,
        controls: scope.controls(),
        feedback: FeedbackStore::new(scope.domains()),
        preparing: Mutex::new(HashMap::new()),
        prepared: Mutex::new(HashMap::new()),
        dispatched: Mutex::new(HashMap::new()),
        reservations: Mutex::new(HashMap::new()),
    });
    scope.request(Arc::new(CallRoutes(Arc::clone(&prompts))));
    if has_feedback {
        scope.pre_step(Arc::new(ObserveOutputs(Arc::clone(&prompts))), false);
    }
    scope.request_gate(Arc::new(PromptGate {
        prompts: Arc::clone(&prompts),
        durable_feedback: has_feedback,
    }));
    scope.request_segment(Arc::new(PromptSegment(prompts)));
    Ok(())
}

/// The route and purpose of the call being prepared.
#[derive(Debug, Clone)]
struct CallRoute {
    route: RouteRef,
    purpose: Purpose,
}

/// What a call reserved, until it is dispatched or released.
struct Reservation {
    session: SessionId,
    route: RouteRef,
    purpose: Purpose,
    /// `(episode key, segment id)` of each feedback the call carries.
    feedback: Vec<(String, String)>,
}

/// The shared state of the mounted prompts.
struct ScopedPrompts {
    rules: Vec<PromptRule>,
    controls: Controls,
    feedback: FeedbackStore,
    /// Per session, the route and purpose of the call being prepared: set by the
    /// request hook, taken by the segment's `reserve`, which is told only the call id.
    preparing: Mutex<HashMap<SessionId, CallRoute>>,
    /// Per session and purpose, the route of its latest prepared call, for previews
    /// (which price a conversation request): a summary's side call in between does
    /// not change what the next conversation request is priced with.
    prepared: Mutex<HashMap<(SessionId, Purpose), RouteRef>>,
    /// Per session and purpose, the route of the last call this process dispatched
    /// (MP-2). Conversation calls: set by the gate when every gate passed, so a call
    /// that then failed counts. Side calls (a summary, purpose `compaction`), which
    /// no gate sees: set by the segment when the call was answered.
    dispatched: Mutex<HashMap<(SessionId, Purpose), RouteRef>>,
    /// Per call id.
    reservations: Mutex<HashMap<String, Reservation>>,
}

/// What the segment adds to one request.
struct Composed {
    texts: Vec<String>,
    segments: Vec<Value>,
    /// `(episode key, segment id)` of the feedback carried.
    feedback: Vec<(String, String)>,
}

impl ScopedPrompts {
    fn enabled(&self, session: &SessionId, rule: &PromptRule) -> bool {
        self.controls
            .decide(
                session,
                PROMPTS_SOURCE,
                &rule.control_rule_id(),
                PROMPT_ACTION,
            )
            .is_enabled()
    }

    fn feedback_rules(&self) -> impl Iterator<Item = (&PromptRule, &OutputPatternConfig)> {
        self.rules
            .iter()
            .filter_map(|rule| rule.detector.as_ref().map(|detector| (rule, detector)))
    }

    /// The prompts, then the feedback, a call on `call` would carry now (MP-3). Reads
    /// only: reserving is the caller's.
    fn compose(
        &self,
        session: &SessionId,
        call: &CallRoute,
        previous: Option<&RouteRef>,
    ) -> Composed {
        let mut composed = Composed {
            texts: Vec::new(),
            segments: Vec::new(),
            feedback: Vec::new(),
        };
        let route = &call.route;
        for rule in &self.rules {
            if rule.applies(route, call.purpose, previous) && self.enabled(session, rule) {
                composed.texts.push(rule.prompt_text(route));
                composed.segments.push(json!({
                    "kind": "prompt",
                    "ruleId": rule.rule_id,
                    "version": rule.version,
                    "trigger": rule.trigger.as_str(),
                }));
            }
        }
        if call.purpose != Purpose::Conversation {
            return composed;
        }
        let Some(table) = self.feedback.table() else {
            return composed;
        };
        let here: Vec<&PromptRule> = self
            .feedback_rules()
            .map(|(rule, _)| rule)
            .filter(|rule| rule.route == *route && self.enabled(session, rule))
            .collect();
        let carry = here.iter().any(|rule| rule.carry_from_other_route);
        let carried = self
            .feedback_rules()
            .map(|(rule, _)| rule)
            .filter(|rule| rule.route != *route && carry && self.enabled(session, rule));
        for rule in here.iter().copied().chain(carried) {
            let key = episode_key(session, &rule.rule_id);
            let Some(episode) = feedback::read_episode(&table, &key) else {
                continue;
            };
            let Some(pending) = episode.deliverable_pending() else {
                continue;
            };
            let source_model = rule.route.label();
            let bound_model_label = route.label();
            composed.texts.push(render_feedback_text(
                &rule.text,
                pending,
                &FeedbackContext {
                    bound_model_label: &bound_model_label,
                    source_model: &source_model,
                },
            ));
            composed.segments.push(json!({
                "kind": "feedback",
                "ruleId": rule.rule_id,
                "version": rule.version,
                "segmentId": pending.segment_id,
                "trigger": pending.trigger,
                "sourceRoute": source_model,
                "carried": rule.route != *route,
                "deliveries": pending.deliveries,
            }));
            composed.feedback.push((key, pending.segment_id.clone()));
        }
        composed
    }

    /// The last dispatched route of `purpose` (MP-2): this process's record of the
    /// session's dispatches, else what the log records (see [`last_dispatched_route`]).
    fn previous(&self, context: &HookContext, purpose: Purpose) -> Option<RouteRef> {
        let session = context.session.id();
        if let Some(route) = self.dispatched.lock().get(&(session.clone(), purpose)) {
            return Some(route.clone());
        }
        context
            .session
            .with_log(|log| last_dispatched_route(log.events(), purpose))
    }

    /// The conversation call a preview prices: the route of the session's latest
    /// prepared conversation call, else the last dispatched one. The call about to be
    /// prepared is not known yet at the step boundary, so after a route change the
    /// preview may differ from the request.
    fn preview_call(&self, session: &SessionId, previous: Option<&RouteRef>) -> Option<CallRoute> {
        let purpose = Purpose::Conversation;
        self.prepared
            .lock()
            .get(&(session.clone(), purpose))
            .cloned()
            .or_else(|| previous.cloned())
            .map(|route| CallRoute { route, purpose })
    }
}

/// The one request-only message (MP-3), with its provenance in the source.
fn segment_message(composed: &Composed, call_id: Option<&str>) -> Option<Message> {
    if composed.texts.is_empty() {
        return None;
    }
    let text = composed.texts.join("\n\n");
    let mut extra = Extra::new();
    extra.insert(
        PROVENANCE_KEY.to_owned(),
        json!({
            "callId": call_id,
            "segments": composed.segments,
            "message": text,
        }),
    );
    let mut message = Message::from_blocks(vec![ContentBlock::text(text)]);
    message.source = Some(Source::Plugin(Box::new(PluginSource {
        kind: PROMPTS_KIND.to_owned(),
        plugin: Some(super::SOURCE.to_owned()),
        form: Some("notice".to_owned()),
        summary: None,
        sections: None,
        extra,
    })));
    Some(message)
}

/// Notes the route and purpose of each call as it is prepared (conversation requests
/// and side calls alike); edits nothing.
struct CallRoutes(Arc<ScopedPrompts>);

impl RequestHook for CallRoutes {
    fn edit(&self, context: &HookContext, config: &mut CallConfig) -> Result<(), HookError> {
        let session = context.session.id();
        let purpose = config.purpose;
        let route = RouteRef::from_model_ref(&config.model);
        let mut prepared = self.0.prepared.lock();
        let mut preparing = self.0.preparing.lock();
        match route {
            Some(route) => {
                prepared.insert((session.clone(), purpose), route.clone());
                preparing.insert(session.clone(), CallRoute { route, purpose });
            }
            None => {
                prepared.remove(&(session.clone(), purpose));
                preparing.remove(session);
            }
        }
        Ok(())
    }
}

/// The request segment: prompts and feedback as one request-only message.
struct PromptSegment(Arc<ScopedPrompts>);

impl RequestSegment for PromptSegment {
    fn preview(&self, context: &HookContext) -> Vec<Message> {
        // A preview prices the step's conversation request (BoundaryContext).
        let prompts = &self.0;
        let session = context.session.id();
        let previous = prompts.previous(context, Purpose::Conversation);
        let Some(call) = prompts.preview_call(session, previous.as_ref()) else {
            return Vec::new();
        };
        let composed = prompts.compose(session, &call, previous.as_ref());
        segment_message(&composed, None).into_iter().collect()
    }

    fn reserve(&self, context: &HookContext, call_id: &str) -> Vec<Message> {
        let prompts = &self.0;
        let session = context.session.id();
        let Some(call) = prompts.preparing.lock().remove(session) else {
            return Vec::new();
        };
        let previous = prompts.previous(context, call.purpose);
        let composed = prompts.compose(session, &call, previous.as_ref());
        for (key, segment_id) in &composed.feedback {
            prompts.feedback.reserve(key, segment_id);
        }
        let message = segment_message(&composed, Some(call_id));
        prompts.reservations.lock().insert(
            call_id.to_owned(),
            Reservation {
                session: session.clone(),
                route: call.route,
                purpose: call.purpose,
                feedback: composed.feedback,
            },
        );
        message.into_iter().collect()
    }

    fn dispatched(&self, _context: &HookContext, call_id: &str) {
        let prompts = &self.0;
        let Some(reservation) = prompts.reservations.lock().remove(call_id) else {
            return;
        };
        for (key, segment_id) in &reservation.feedback {
            prompts.feedback.dispatched(key, segment_id);
        }
        if reservation.purpose != Purpose::Conversation {
            // MP-2 for side calls: no gate sees them, so the answered call is the
            // last dispatched route of its purpose.
            prompts.dispatched.lock().insert(
                (reservation.session, reservation.purpose),
                reservation.route,
            );
            return;
        }
        // OP-6: a dispatch on this route supersedes the pendings of other routes it
        // did not carry.
        for (rule, _) in prompts.feedback_rules() {
            if rule.route == reservation.route {
                continue;
            }
            let key = episode_key(&reservation.session, &rule.rule_id);
            if !reservation
                .feedback
                .iter()
                .any(|(carried, _)| *carried == key)
            {
                prompts.feedback.supersede(&key);
            }
        }
    }

    fn release(&self, _context: &HookContext, call_id: &str) {
        // OP-6 has no rollback: a reserved feedback stays `delivery-unknown` with its
        // delivery counted, and is offered again up to `maxDeliveries`.
        self.0.reservations.lock().remove(call_id);
    }

    /// Side calls (context care's summaries, purpose `compaction`; session titles) of
    /// a purpose some rule names (MP-1 `purposes`, MP-3). Feedback is conversation-only
    /// (`compose`), so a side call carries prompts only.
    fn serves_side(&self, purpose: Purpose) -> bool {
        purpose != Purpose::Conversation
            && self
                .0
                .rules
                .iter()
                .any(|rule| rule.purposes.contains(&purpose))
    }
}

/// Observes the session's new outputs for every `output-pattern` rule before each
/// step (OP-5).
///
/// Why at pre-step time, from the log, and not in a session observer: an observer
/// runs synchronously after each commit and could only queue writes, so the next
/// request could read an episode that is not written yet, and an output committed
/// just before a crash would never be observed. Here the hook awaits the episode's
/// write before the step's request is built, the log is the single source of the
/// outputs, and `lastSeq` makes each output count once, also across restarts.
struct ObserveOutputs(Arc<ScopedPrompts>);

impl PreStepHook for ObserveOutputs {
    fn call<'a>(
        &'a self,
        context: &'a HookContext,
        input: PreStepInput,
        next: PreStepNext<'a>,
    ) -> BoxFuture<'a, Result<PreStepDecision, HookError>> {
        Box::pin(async move {
            let prompts = &self.0;
            let session = context.session.id();
            let rules: Vec<feedback::RuleInput<'_>> = prompts
                .feedback_rules()
                .map(|(rule, detector)| {
                    let control = rule.control_rule_id();
                    feedback::RuleInput {
                        rule,
                        detector,
                        eligible: prompts.enabled(session, rule),
                        since_seq: prompts
                            .controls
                            .since_seq(session, PROMPTS_SOURCE, &control),
                    }
                })
                .collect();
            prompts.feedback.observe(&context.session, &rules).await;
            next.run(input).await
        })
    }
}

/// The prompts' request gate. Never refuses.
///
/// - With `output-pattern` rules it makes a call's feedback reservation durable
///   before the call leaves, so a crash after dispatch redelivers at most
///   `maxDeliveries` times (OP-6); a storage failure costs at most one uncounted
///   delivery, not the user's request.
/// - It records the route of every dispatched call per purpose (MP-2's "last
///   dispatched route of the same purpose").
struct PromptGate {
    prompts: Arc<ScopedPrompts>,
    durable_feedback: bool,
}

impl RequestGate for PromptGate {
    fn check<'a>(
        &'a self,
        context: &'a HookContext,
        call: &'a PreparedCall,
    ) -> BoxFuture<'a, Result<(), LlmFailure>> {
        Box::pin(async move {
            let carries = self.durable_feedback
                && self
                    .prompts
                    .reservations
                    .lock()
                    .get(&call.call_id)
                    .is_some_and(|reservation| !reservation.feedback.is_empty());
            if carries {
                self.prompts.feedback.flush(context.session.id()).await;
            }
            Ok(())
        })
    }

    fn dispatched(&self, context: &HookContext, call: &PreparedCall) {
        self.prompts.dispatched.lock().insert(
            (context.session.id().clone(), call.config.purpose),
            RouteRef::new(call.route.provider.clone(), call.route.model.clone()),
        );
    }
}
