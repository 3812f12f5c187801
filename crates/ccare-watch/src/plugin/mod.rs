//! The `stream-watch` plugin (`[plugins.stream-watch]`): the engines of this crate wired
//! into the agent.
//!
//! - A stream observer feeds every text and reasoning delta of a conversation stream to
//!   the session's [`StreamWatch`] and runs what fires (SW-7 .. SW-11): a notice is
//!   injected; an abort cancels the turn with cause `hook{stream-watch, "output loop:
//!   …"}` (the visible partial output is kept as an interrupted message); a resume
//!   steers MV-LOOP(aborted) so the work continues in a new turn, and after two aborts
//!   in a row it does not.
//! - A pre-step hook resets the abort count on a real user message (SW-10) and, as the
//!   fallback path, reminds the model of loop shapes in its last reply (LS-1 .. LS-3),
//!   unless the watch already handled that reply or the last user message is already a
//!   loop notice.
//! - An observer resets the count on a healthy output (a committed, non-interrupted
//!   answer whose attempt had no abort).
//! - A tool gate reminds the model of, then stops, a tool called again and again with
//!   the same arguments and the same result (EX-1, [`tool_loop`]).
//! - Every behaviour is switchable per session through the controls store (source
//!   `stream-watch`, RC-1).

pub mod completion;
pub mod prompts;
mod texts;
pub mod tool_loop;

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use ccare_agent::controls::{ControlAction, ControlRule, ControlSource, Controls};
use ccare_agent::{
    BoxFuture, HookContext, HookError, Plugin, PluginScope, PreStepDecision, PreStepHook,
    PreStepInput, PreStepNext, StreamContext, StreamObserver, StreamVerdict,
};
use ccare_core::{ContentBlock, Event, Extra, Locale, Message, PluginSource, SessionId, Source};
use ccare_llm::Chunk;
use ccare_session::{Observer, ObserverError};
use parking_lot::Mutex;
use serde_json::Value;

use crate::engine::{
    ActionId, Evidence, Firing, Frame, LoopPolicy, NoticeDecision, StreamWatch, Triggers,
};
use crate::shapes::{ShapeEvidence, ShapeId, ShapeResponse, detect, reply_input};
pub use texts::{
    LABEL_CONTEXT, LABEL_LOOP, LABEL_LOOP_ABORTED, LABEL_TIME, LoopShape, context_notice,
    loop_notice, resume_notice, time_notice,
};

/// The controls source of the watch.
pub const SOURCE: &str = "stream-watch";
/// The source kind of the watch's stream notices (`plugin:context-care:watch:<trigger>`).
pub const WATCH_KIND_PREFIX: &str = "plugin:context-care:watch:";
/// The source kind of the loop-shape notices.
pub const LOOP_KIND: &str = "plugin:context-care:loop";

/// The controls catalog of the watch (RC-1): the stream triggers and the loop shapes.
/// `clean` has no executor in this build, so it is unavailable.
pub fn watch_catalog() -> ControlSource {
    let notice = || ControlAction::new("notice");
    let clean = || ControlAction {
        available: false,
        reason: Some("executor-unavailable".to_owned()),
        ..ControlAction::new("clean")
    };
    let resume = ControlAction {
        requires: vec!["abort".to_owned()],
        ..ControlAction::new("resume")
    };
    let rules = vec![
        ControlRule::new(
            "stream-line-repeat",
            vec![notice(), ControlAction::new("abort"), resume],
        ),
        ControlRule::new("stream-time-anxiety", vec![notice()]),
        ControlRule::new("stream-context-anxiety", vec![notice()]),
        ControlRule::new("loop-line-repeat", vec![notice(), clean()]),
        ControlRule::new("loop-filler-lines", vec![notice(), clean()]),
        ControlRule::new("loop-line-cycle", vec![notice()]),
        ControlRule::new("loop-prefix-monotony", vec![notice()]),
        ControlRule::new("tool-loop", vec![notice(), ControlAction::new("stop")]),
    ];
    ControlSource {
        plugin: Some(SOURCE.to_owned()),
        ..ControlSource::new(SOURCE, rules)
    }
}

/// The rule of a stream trigger: `stream-<trigger>`.
fn rule_of(trigger: &str) -> String {
    format!("stream-{trigger}")
}

fn action_name(action: &ActionId) -> &str {
    match action {
        ActionId::Notice => "notice",
        ActionId::Abort => "abort",
        ActionId::Resume => "resume",
        ActionId::Unknown(name) => name,
    }
}

/// One agent's watch state.
struct AgentWatch {
    engine: StreamWatch,
    policy: LoopPolicy,
    /// The `(call, attempt)` being read; a new one starts the engine afresh.
    attempt: Option<(String, u32)>,
    /// The controls epoch the engine was last told.
    epoch: Option<String>,
    /// Calls this watch aborted: their replies are not healthy.
    aborted_calls: HashSet<String>,
    /// Calls whose output loop this watch already handled (noticed or aborted): the
    /// loop shapes leave their replies alone (LS-3).
    handled_calls: HashSet<String>,
}

/// The shared state of a mounted watch.
struct Watch {
    triggers: Triggers,
    locale: Locale,
    controls: Controls,
    agents: Mutex<HashMap<SessionId, AgentWatch>>,
}

/// The `stream-watch` plugin.
#[derive(Debug, Clone, Copy, Default)]
pub struct StreamWatchPlugin {
    locale: Locale,
}

impl StreamWatchPlugin {
    /// The plugin with the locale of its model-visible texts.
    #[must_use]
    pub fn with_locale(mut self, locale: Locale) -> Self {
        self.locale = locale;
        self
    }
}

impl Plugin for StreamWatchPlugin {
    fn name(&self) -> &str {
        "stream-watch"
    }

    fn mount(&self, config: &Value, scope: &mut PluginScope<'_>) -> Result<(), String> {
        let Some(table) = config.as_object() else {
            return Err(format!("the table must be an object, got {config}"));
        };
        if let Some(key) = table.keys().find(|key| {
            !matches!(
                key.as_str(),
                "triggers" | "completion" | "tool_loop" | prompts::CONFIG_KEY
            )
        }) {
            return Err(format!("unknown config {key}"));
        }
        let triggers = match table.get("triggers") {
            Some(Value::Object(overrides)) => {
                Triggers::with_overrides(overrides).map_err(|error| format!("triggers: {error}"))?
            }
            Some(list @ Value::Array(_)) => {
                Triggers::from_json(list).map_err(|error| format!("triggers: {error}"))?
            }
            Some(other) => {
                return Err(format!(
                    "triggers must be a table of overrides by trigger id, or an array, got {other}"
                ));
            }
            None => Triggers::defaults(),
        };
        let prompt_rules = prompts::parse_prompt_rules(table.get(prompts::CONFIG_KEY))
            .map_err(|error| error.to_string())?;
        let tool_loop: crate::tool_loop::ToolLoopConfig = match table.get("tool_loop") {
            Some(value) => serde_json::from_value(value.clone())
                .map_err(|error| format!("tool_loop: {error}"))?,
            None => crate::tool_loop::ToolLoopConfig::default(),
        };
        tool_loop.validate()?;
        scope.control_source(watch_catalog())?;
        let watch = Arc::new(Watch {
            triggers,
            locale: self.locale,
            controls: scope.controls(),
            agents: Mutex::new(HashMap::new()),
        });
        scope.stream(Arc::new(WatchStream(Arc::clone(&watch))));
        scope.pre_step(Arc::new(WatchPreStep(Arc::clone(&watch))), false);
        scope.tool_gate(Arc::new(tool_loop::ToolLoopGate {
            config: tool_loop,
            locale: self.locale,
            controls: watch.controls.clone(),
            sessions: Mutex::new(HashMap::new()),
        }));
        scope.observer(Arc::new(WatchHealth(watch)));
        prompts::register(prompt_rules, scope)?;
        completion::mount(table.get("completion"), self.locale, scope)?;
        Ok(())
    }
}

fn notice_message(kind: &str, label: &str, text: String) -> Message {
    let mut message = Message::from_blocks(vec![ContentBlock::text(text)]);
    message.source = Some(Source::Plugin(Box::new(PluginSource {
        kind: kind.to_owned(),
        plugin: Some(SOURCE.to_owned()),
        form: Some("notice".to_owned()),
        summary: Some(label.to_owned()),
        sections: None,
        extra: Extra::new(),
    })));
    message
}

impl Watch {
    fn enabled(&self, session: &SessionId, rule: &str, action: &str) -> bool {
        self.controls
            .decide(session, SOURCE, rule, action)
            .is_enabled()
    }

    fn agent<'a>(
        &self,
        agents: &'a mut HashMap<SessionId, AgentWatch>,
        session: &SessionId,
    ) -> &'a mut AgentWatch {
        agents.entry(session.clone()).or_insert_with(|| AgentWatch {
            engine: StreamWatch::new(self.triggers.clone()),
            policy: LoopPolicy::new(),
            attempt: None,
            epoch: None,
            aborted_calls: HashSet::new(),
            handled_calls: HashSet::new(),
        })
    }

    /// The MV text and label a firing's notice or resume injects.
    fn loop_text(&self, firing: &Firing, aborted: bool) -> String {
        match &firing.evidence {
            Evidence::LineRepeat(report) => {
                let percent = (report.ratio * 100.0).round();
                loop_notice(
                    self.locale,
                    &LoopShape::Line(report.line.clone()),
                    report.count,
                    report.total,
                    if percent.is_finite() && percent >= 0.0 {
                        percent as u32
                    } else {
                        0
                    },
                    aborted,
                )
            }
            Evidence::Marker { .. } | Evidence::Phrase { .. } => resume_notice(self.locale),
        }
    }

    fn notice_for(&self, firing: &Firing) -> Message {
        match &*firing.trigger {
            "time-anxiety" => notice_message(
                &format!("{WATCH_KIND_PREFIX}{}", firing.trigger),
                LABEL_TIME,
                time_notice(self.locale),
            ),
            "context-anxiety" => notice_message(
                &format!("{WATCH_KIND_PREFIX}{}", firing.trigger),
                LABEL_CONTEXT,
                context_notice(self.locale),
            ),
            _ => notice_message(
                &format!("{WATCH_KIND_PREFIX}{}", firing.trigger),
                LABEL_LOOP,
                self.loop_text(firing, false),
            ),
        }
    }
}

/// The stream observer.
struct WatchStream(Arc<Watch>);

impl StreamObserver for WatchStream {
    fn on_chunk(&self, context: &StreamContext, chunk: &Chunk) -> StreamVerdict {
        let frame = match chunk {
            Chunk::TextDelta { text, .. } if !text.is_empty() => Frame::Text(text),
            Chunk::ReasoningDelta { text, .. } if !text.is_empty() => Frame::Reasoning(text),
            _ => return StreamVerdict::Continue,
        };
        let watch = &self.0;
        let session = &context.session;
        let epoch = watch.controls.epoch(session);
        let mut agents = watch.agents.lock();
        let agent = watch.agent(&mut agents, session);
        let attempt = (context.call_id.clone(), context.attempt);
        if agent.attempt.as_ref() != Some(&attempt) {
            agent.attempt = Some(attempt);
            agent.engine.observe(Frame::Start);
        }
        if agent.epoch.as_deref() != Some(epoch.as_str()) {
            agent.engine.set_controls(&epoch, |trigger, action| {
                watch.enabled(session, &rule_of(trigger), action_name(action))
            });
            agent.epoch = Some(epoch);
        }
        let firings = agent.engine.observe(frame);
        let mut cancel = None;
        for firing in firings {
            let AgentWatch {
                policy,
                aborted_calls,
                handled_calls,
                ..
            } = &mut *agent;
            if matches!(firing.evidence, Evidence::LineRepeat(_)) {
                handled_calls.insert(context.call_id.clone());
            }
            firing.run(|action| -> Result<bool, String> {
                match action {
                    ActionId::Notice => match policy.notice_decision(&firing) {
                        NoticeDecision::Send => {
                            Ok(context.inbox.inject(watch.notice_for(&firing)).is_some())
                        }
                        NoticeDecision::ResumeWillSpeak | NoticeDecision::AlreadyNoticed => {
                            Ok(false)
                        }
                    },
                    ActionId::Abort => {
                        let line = match &firing.evidence {
                            Evidence::LineRepeat(report) => report.line.clone(),
                            Evidence::Marker { marker } => marker.to_string(),
                            Evidence::Phrase { phrase } => phrase.to_string(),
                        };
                        policy.record_abort();
                        aborted_calls.insert(context.call_id.clone());
                        cancel = Some(format!("output loop: {line}"));
                        Ok(true)
                    }
                    ActionId::Resume => {
                        if !policy.may_resume() {
                            // SW-11: no resume; the next human-started step learns that
                            // the system stopped the output.
                            let text = watch.loop_text(&firing, true);
                            context.inbox.inject(notice_message(
                                &format!("{WATCH_KIND_PREFIX}{}", firing.trigger),
                                LABEL_LOOP_ABORTED,
                                text,
                            ));
                            return Ok(false);
                        }
                        let notice_on = watch.enabled(session, &rule_of(&firing.trigger), "notice");
                        let text = if notice_on {
                            watch.loop_text(&firing, true)
                        } else {
                            resume_notice(watch.locale)
                        };
                        Ok(context
                            .inbox
                            .steer(notice_message(
                                &format!("{WATCH_KIND_PREFIX}{}", firing.trigger),
                                LABEL_LOOP_ABORTED,
                                text,
                            ))
                            .is_some())
                    }
                    ActionId::Unknown(_) => Ok(false),
                }
            });
        }
        match cancel {
            Some(reason) => StreamVerdict::Cancel { reason },
            None => StreamVerdict::Continue,
        }
    }
}

/// The pre-step hook: SW-10's reset on a real user message, and the loop shapes.
struct WatchPreStep(Arc<Watch>);

fn texts_of(message: &Message) -> (String, String) {
    let mut reasoning = Vec::new();
    let mut text = Vec::new();
    for block in &message.content {
        match block {
            ContentBlock::Reasoning(block) => reasoning.push(block.text.as_str()),
            ContentBlock::Text(block) => text.push(block.text.as_str()),
            _ => {}
        }
    }
    (reasoning.join("\n"), text.join("\n"))
}

impl WatchPreStep {
    fn shapes(&self, context: &HookContext) -> Option<Message> {
        let watch = &self.0;
        let session = context.session.id();
        let view = context.session.derived_view();
        // LS-3: skip when the last surface user message is already a loop notice.
        let last_user = view
            .messages
            .iter()
            .rev()
            .find(|derived| derived.role == ccare_core::Role::User)?;
        if matches!(&last_user.message.source, Some(Source::Plugin(plugin)) if plugin.kind == LOOP_KIND || plugin.kind.starts_with(WATCH_KIND_PREFIX))
        {
            return None;
        }
        let last_assistant = view
            .messages
            .iter()
            .rev()
            .find(|derived| derived.role == ccare_core::Role::Assistant)?;
        let call_id = context.session.with_log(|log| {
            log.event_at(last_assistant.seq)
                .and_then(|event| serde_json::from_str::<Value>(event.data_json()).ok())
                .and_then(|data| data["call_id"].as_str().map(str::to_owned))
        });
        if let Some(call_id) = call_id
            && watch
                .agents
                .lock()
                .get(session)
                .is_some_and(|agent| agent.handled_calls.contains(&call_id))
        {
            return None;
        }
        let (reasoning, text) = texts_of(&last_assistant.message);
        let hit = detect(&reply_input(&reasoning, &text), |shape: ShapeId| {
            let rule = format!("loop-{}", shape.as_str());
            watch.enabled(session, &rule, "notice")
                && i64::try_from(last_assistant.seq).unwrap_or(i64::MAX)
                    > watch.controls.since_seq(session, SOURCE, &rule)
        })?;
        let cleaner = hit.shape().has_cleaner()
            && watch.enabled(session, &format!("loop-{}", hit.shape().as_str()), "clean");
        if hit.response(cleaner) != ShapeResponse::Remind {
            return None;
        }
        let shape = match &hit.evidence {
            ShapeEvidence::LineRepeat(line) => LoopShape::Line(line.clone()),
            ShapeEvidence::FillerLines => LoopShape::Filler,
            ShapeEvidence::LineCycle(lines) => LoopShape::Cycle(lines.clone()),
            ShapeEvidence::PrefixMonotony(prefix) => LoopShape::Prefix(prefix.clone()),
        };
        Some(notice_message(
            LOOP_KIND,
            LABEL_LOOP,
            loop_notice(
                watch.locale,
                &shape,
                hit.count,
                hit.of_lines,
                hit.percent,
                false,
            ),
        ))
    }
}

impl PreStepHook for WatchPreStep {
    fn call<'a>(
        &'a self,
        context: &'a HookContext,
        input: PreStepInput,
        next: PreStepNext<'a>,
    ) -> BoxFuture<'a, Result<PreStepDecision, HookError>> {
        Box::pin(async move {
            let session = context.session.id();
            if context.step == 1 {
                // SW-10: the opening prompt of a turn started by a person resets the
                // count; a resume steer does not.
                let real = context.session.with_log(|log| {
                    log.events()
                        .iter()
                        .rev()
                        .take_while(|event| event.kind() != ccare_core::kinds::TURN_START)
                        .filter(|event| event.kind() == ccare_core::kinds::USER_MESSAGE)
                        .any(|event| {
                            event
                                .decode::<ccare_core::kinds::UserMessage>()
                                .is_ok_and(|user| {
                                    matches!(user.message.source, Some(Source::User { .. }))
                                })
                        })
                });
                if real {
                    let mut agents = self.0.agents.lock();
                    self.0
                        .agent(&mut agents, session)
                        .policy
                        .real_user_message();
                }
            }
            let reminder = self.shapes(context);
            let decision = next.run(input).await?;
            Ok(match (decision, reminder) {
                (PreStepDecision::Enter(mut messages), Some(reminder)) => {
                    messages.push(reminder);
                    PreStepDecision::Enter(messages)
                }
                (decision, _) => decision,
            })
        })
    }
}

/// Resets the abort count on a healthy output (SW-10).
struct WatchHealth(Arc<Watch>);

impl Observer for WatchHealth {
    fn name(&self) -> &str {
        "stream-watch"
    }

    fn on_event(&self, session: &SessionId, event: &Arc<Event>) -> Result<(), ObserverError> {
        if event.kind() != ccare_core::kinds::ASSISTANT_MESSAGE {
            return Ok(());
        }
        let Ok(data) = serde_json::from_str::<Value>(event.data_json()) else {
            return Ok(());
        };
        if data["interrupted"] == true {
            return Ok(());
        }
        let call = data["call_id"].as_str().unwrap_or_default();
        let mut agents = self.0.agents.lock();
        if let Some(agent) = agents.get_mut(session)
            && !agent.aborted_calls.contains(call)
        {
            agent.policy.healthy_output();
        }
        Ok(())
    }
}
