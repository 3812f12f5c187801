//! The `stream-watch` plugin (`[plugins.stream-watch]`): the engines of this crate wired
//! into the agent.
//!
//! - A stream observer feeds every text and reasoning delta of a conversation stream to
//!   the session's [`StreamWatch`] over the configured triggers (the defaults, or
//!   `[plugins.stream-watch] triggers`; each has its controls rule `stream-<id>`,
//!   SW-1, RC-1) and runs what fires (SW-7 .. SW-11): a notice is injected; an abort
//!   cancels the turn with cause `hook{stream-watch, "output loop: …"}` (the visible
//!   partial output is kept as an interrupted message); a resume steers
//!   MV-LOOP(aborted) so the work continues in a new turn, and after two aborts in a
//!   row it does not. Each firing leaves exactly one message, and one that stopped
//!   the output says that the system stopped it (KD-2). What became of each action is
//!   logged and kept in the firing record ([`StreamWatchPlugin::recent_firings`]).
//! - A pre-step hook resets the abort count and the notice record on a real user
//!   message entered at any step (SW-10) and, as the
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

use ccare_agent::controls::{ControlAction, ControlRule, ControlSource, Controls, ControlsEpoch};
use ccare_agent::{
    BoxFuture, HookContext, HookError, MountError, Plugin, PluginScope, PreStepDecision,
    PreStepHook, PreStepInput, PreStepNext, StreamContext, StreamObserver, StreamVerdict,
};
use ccare_core::strict::{self, Problem};
use ccare_core::{ContentBlock, Event, Extra, Locale, Message, PluginSource, SessionId, Source};
use ccare_llm::Chunk;
use ccare_session::{Lifecycle, Observer, ObserverError};
use parking_lot::Mutex;
use serde_json::Value;

use crate::engine::{
    ActionId, ActionOutcome, Evidence, Firing, FiringRecord, Frame, LoopPolicy, NoticeDecision,
    StreamWatch, Triggers,
};
use crate::shapes::{ShapeEvidence, ShapeId, ShapeResponse, detect, reply_input};
pub use texts::{
    LABEL_CONTEXT, LABEL_LOOP, LABEL_LOOP_ABORTED, LABEL_TIME, LABEL_WATCH, LABEL_WATCH_ABORTED,
    LoopShape, context_notice, loop_notice, match_notice, resume_notice, time_notice,
};

/// The controls source of the watch.
pub const SOURCE: &str = "stream-watch";
/// The source kind of the watch's stream notices (`plugin:context-care:watch:<trigger>`).
pub const WATCH_KIND_PREFIX: &str = "plugin:context-care:watch:";
/// The source kind of the loop-shape notices.
pub const LOOP_KIND: &str = "plugin:context-care:loop";

/// The controls catalog of the watch (RC-1): one rule `stream-<trigger>` per configured
/// stream trigger (SW-1), with the trigger's actions in order (`resume` requires
/// `abort`), and the loop shapes. `clean` has no executor in this build, so it is
/// unavailable. An action name the watch does not know stays available, so that it
/// runs and is recorded as `unknown action <name>` (SW-7), as `ccare watch replay`
/// shows it.
pub fn watch_catalog(triggers: &Triggers) -> ControlSource {
    let notice = || ControlAction::new("notice");
    let clean = || ControlAction {
        available: false,
        reason: Some("executor-unavailable".to_owned()),
        ..ControlAction::new("clean")
    };
    let mut rules: Vec<ControlRule> = triggers
        .as_slice()
        .iter()
        .map(|trigger| {
            let actions = trigger
                .actions()
                .iter()
                .map(|action| match action {
                    ActionId::Resume => ControlAction {
                        requires: vec![ActionId::Abort.as_str().to_owned()],
                        ..ControlAction::new(action.as_str())
                    },
                    _ => ControlAction::new(action.as_str()),
                })
                .collect();
            ControlRule::new(rule_of(trigger.id()), actions)
        })
        .collect();
    rules.extend([
        ControlRule::new("loop-line-repeat", vec![notice(), clean()]),
        ControlRule::new("loop-filler-lines", vec![notice(), clean()]),
        ControlRule::new("loop-line-cycle", vec![notice()]),
        ControlRule::new("loop-prefix-monotony", vec![notice()]),
        ControlRule::new("tool-loop", vec![notice(), ControlAction::new("stop")]),
    ]);
    ControlSource {
        plugin: Some(SOURCE.to_owned()),
        ..ControlSource::new(SOURCE, rules)
    }
}

/// The longest control rule id (RC-1), in characters.
const MAX_RULE_ID_CHARS: usize = 256;

/// The rule of a stream trigger: `stream-<trigger>`.
fn rule_of(trigger: &str) -> String {
    format!("stream-{trigger}")
}

/// One agent's watch state.
struct AgentWatch {
    engine: StreamWatch,
    policy: LoopPolicy,
    /// The `(call, attempt)` being read; a new one starts the engine afresh.
    attempt: Option<(String, u32)>,
    /// The controls epoch the engine was last told.
    epoch: Option<ControlsEpoch>,
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

/// The `stream-watch` plugin. A clone shares the handle on the latest mount, so the
/// binary can read the firing records of a session ([`StreamWatchPlugin::recent_firings`]).
#[derive(Clone, Default)]
pub struct StreamWatchPlugin {
    locale: Locale,
    mounted: Arc<Mutex<Option<Arc<Watch>>>>,
    /// The mounted completion observer's memory, for [`StreamWatchPlugin::completion_rows_in_memory`].
    completion: Arc<Mutex<Option<completion::CompletionMemory>>>,
}

impl std::fmt::Debug for StreamWatchPlugin {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter
            .debug_struct("StreamWatchPlugin")
            .field("locale", &self.locale)
            .field("mounted", &self.mounted.lock().is_some())
            .finish()
    }
}

impl StreamWatchPlugin {
    /// The plugin with the locale of its model-visible texts.
    #[must_use]
    pub fn with_locale(mut self, locale: Locale) -> Self {
        self.locale = locale;
        self
    }

    /// The session's last firings (at most `RECENT_FIRINGS`, oldest first) with what
    /// became of each action (SW-7): `unknown action <name>` and action errors stay
    /// here after the run. Empty before the first mount or the session's first
    /// firing.
    pub fn recent_firings(&self, session: &SessionId) -> Vec<FiringRecord> {
        let Some(watch) = self.mounted.lock().clone() else {
            return Vec::new();
        };
        let agents = watch.agents.lock();
        agents
            .get(session)
            .map(|agent| agent.engine.recent_firings().cloned().collect())
            .unwrap_or_default()
    }
}

impl StreamWatchPlugin {
    /// How many sessions the mounted watch holds state for (an engine, a policy): the
    /// sessions this process drives or drove since they were last closed.
    pub fn sessions_in_memory(&self) -> usize {
        self.mounted
            .lock()
            .as_ref()
            .map_or(0, |watch| watch.agents.lock().len())
    }

    /// How many completion-observer rows (per-session state and watermarks) the
    /// mounted watch holds in memory: those of the sessions this process drives, not
    /// of every session it ever observed.
    pub fn completion_rows_in_memory(&self) -> usize {
        self.completion
            .lock()
            .as_ref()
            .map_or(0, completion::CompletionMemory::rows_in_memory)
    }
}

impl Plugin for StreamWatchPlugin {
    fn name(&self) -> &str {
        "stream-watch"
    }

    fn mount(&self, config: &Value, scope: &mut PluginScope<'_>) -> Result<(), MountError> {
        let table: WatchTable = strict::from_value(config).map_err(|error| {
            MountError::Config(match error.problem {
                Problem::Invalid { found, .. } if error.path.is_empty() => {
                    format!("the table must be an object, got {found}")
                }
                _ => error.to_string(),
            })
        })?;
        let triggers = match &table.triggers {
            Some(Value::Object(overrides)) => Triggers::with_overrides(overrides)
                .map_err(|error| MountError::Config(format!("triggers: {error}")))?,
            Some(list @ Value::Array(_)) => Triggers::from_json(list)
                .map_err(|error| MountError::Config(format!("triggers: {error}")))?,
            Some(other) => {
                return Err(MountError::Config(format!(
                    "triggers must be a table of overrides by trigger id, or an array, got {other}"
                )));
            }
            None => Triggers::defaults(),
        };
        let prompt_rules = prompts::parse_prompt_rules(table.model_scoped_prompts.as_ref())
            .map_err(|error| MountError::Config(error.to_string()))?;
        let tool_loop = match &table.tool_loop {
            Some(value) => {
                crate::tool_loop::ToolLoopConfig::from_json(value).map_err(MountError::Config)?
            }
            None => crate::tool_loop::ToolLoopConfig::default(),
        };
        if let Some(trigger) = triggers
            .as_slice()
            .iter()
            .find(|trigger| rule_of(trigger.id()).chars().count() > MAX_RULE_ID_CHARS)
        {
            return Err(MountError::Config(format!(
                "triggers: the id {:?} is too long for its control rule stream-<id> (at most {} characters)",
                trigger.id(),
                MAX_RULE_ID_CHARS - rule_of("").chars().count()
            )));
        }
        scope.control_source(watch_catalog(&triggers))?;
        let watch = Arc::new(Watch {
            triggers,
            locale: self.locale,
            controls: scope.controls(),
            agents: Mutex::new(HashMap::new()),
        });
        scope.stream(Arc::new(WatchStream(Arc::clone(&watch))));
        scope.pre_step(Arc::new(WatchPreStep(Arc::clone(&watch))), false);
        let tool_loop = Arc::new(tool_loop::ToolLoopGate {
            config: tool_loop,
            locale: self.locale,
            controls: watch.controls.clone(),
            sessions: Mutex::new(HashMap::new()),
        });
        scope.tool_gate(Arc::clone(&tool_loop) as Arc<dyn ccare_agent::ToolGate>);
        scope.observer(Arc::new(WatchHealth {
            watch: Arc::clone(&watch),
            tool_loop,
        }));
        *self.mounted.lock() = Some(watch);
        prompts::register(prompt_rules, scope)?;
        *self.completion.lock() = Some(completion::mount(
            table.completion.as_ref(),
            self.locale,
            scope,
        )?);
        Ok(())
    }
}

/// The `[plugins.stream-watch]` table as written, read by the shared strict reader
/// (unknown keys are errors, `null` is a value); each part is then validated by its
/// own reader: triggers, prompt rules, tool loop, completion.
#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct WatchTable {
    /// Overrides of the default triggers by id, or a whole trigger list (SW-1, SW-5).
    #[serde(default)]
    triggers: Option<Value>,
    /// The completion observer's table (CO-2).
    #[serde(default)]
    completion: Option<Value>,
    /// The tool-loop limits (EX-1).
    #[serde(default)]
    tool_loop: Option<Value>,
    /// The model-scoped prompt rules (MP-1), [`prompts::CONFIG_KEY`].
    #[serde(default)]
    model_scoped_prompts: Option<Value>,
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

    /// The notice of a firing (SW-8): MV-LOOP for a repeated line, MV-TIME / MV-CONTEXT
    /// for the default anxiety triggers, and for any other configured trigger what it
    /// found. `aborted`: the firing stops the output, so the text says that the
    /// system, not the model, stopped it (SW-9, SW-11, KD-2).
    fn notice_for(&self, firing: &Firing, aborted: bool) -> Message {
        let kind = format!("{WATCH_KIND_PREFIX}{}", firing.trigger);
        let found = match &firing.evidence {
            Evidence::LineRepeat(report) => {
                let percent = (report.ratio * 100.0).round();
                let text = loop_notice(
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
                );
                let label = if aborted {
                    LABEL_LOOP_ABORTED
                } else {
                    LABEL_LOOP
                };
                return notice_message(&kind, label, text);
            }
            Evidence::Marker { marker } => marker,
            Evidence::Phrase { phrase } => phrase,
        };
        match (&*firing.trigger, aborted) {
            ("time-anxiety", false) => notice_message(&kind, LABEL_TIME, time_notice(self.locale)),
            ("context-anxiety", false) => {
                notice_message(&kind, LABEL_CONTEXT, context_notice(self.locale))
            }
            (trigger, aborted) => notice_message(
                &kind,
                if aborted {
                    LABEL_WATCH_ABORTED
                } else {
                    LABEL_WATCH
                },
                match_notice(self.locale, trigger, found, aborted),
            ),
        }
    }

    /// The steer of a firing's resume (SW-9): its aborted notice, or MV-RESUME for a
    /// repeated line whose notice is off.
    fn resume_for(&self, session: &SessionId, firing: &Firing) -> Message {
        let notice_on = self.enabled(session, &rule_of(&firing.trigger), "notice");
        match &firing.evidence {
            Evidence::LineRepeat(_) if !notice_on => notice_message(
                &format!("{WATCH_KIND_PREFIX}{}", firing.trigger),
                LABEL_LOOP_ABORTED,
                resume_notice(self.locale),
            ),
            _ => self.notice_for(firing, true),
        }
    }
}

/// Logs what became of a firing's actions: unknown and failed actions as warnings,
/// the rest at debug level (SW-7).
fn log_actions(session: &SessionId, firing: &Firing, records: &[crate::engine::ActionRecord]) {
    for record in records {
        match record.outcome {
            ActionOutcome::Unknown | ActionOutcome::Failed(_) => tracing::warn!(
                session = %session,
                trigger = %firing.trigger,
                "stream-watch: {record}"
            ),
            ActionOutcome::Done(_) | ActionOutcome::NoAbort => tracing::debug!(
                session = %session,
                trigger = %firing.trigger,
                "stream-watch: {record}"
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
        // Nothing here allocates on a chunk like the last one: same attempt, same epoch.
        let epoch = watch.controls.epoch_token(session);
        let mut agents = watch.agents.lock();
        let agent = watch.agent(&mut agents, session);
        let same_attempt = agent
            .attempt
            .as_ref()
            .is_some_and(|(call, attempt)| *call == context.call_id && *attempt == context.attempt);
        if !same_attempt {
            agent.attempt = Some((context.call_id.clone(), context.attempt));
            agent.engine.observe(Frame::Start);
        }
        if agent.epoch != Some(epoch) {
            agent
                .engine
                .set_controls(&epoch.to_string(), |trigger, action| {
                    watch.enabled(session, &rule_of(trigger), action.as_str())
                });
            agent.epoch = Some(epoch);
        }
        let firings = agent.engine.observe(frame);
        let mut cancel = None;
        for firing in firings {
            let AgentWatch {
                engine,
                policy,
                aborted_calls,
                handled_calls,
                ..
            } = &mut *agent;
            if matches!(firing.evidence, Evidence::LineRepeat(_)) {
                handled_calls.insert(context.call_id.clone());
            }
            // Exactly one message per firing tells the model what happened (SW-8,
            // SW-11, KD-2): a firing that stops the output says so, whichever of its
            // notice, its resume or the abort itself speaks.
            let stops = firing.actions.contains(&ActionId::Abort);
            let mut spoke = false;
            let mut aborted = false;
            let records = firing.run(|action| -> Result<bool, String> {
                match action {
                    ActionId::Notice => match policy.notice_decision(&firing) {
                        NoticeDecision::Send => {
                            spoke = context
                                .inbox
                                .inject(watch.notice_for(&firing, stops))
                                .is_some();
                            Ok(spoke)
                        }
                        NoticeDecision::ResumeWillSpeak | NoticeDecision::AlreadyNoticed => {
                            Ok(false)
                        }
                    },
                    ActionId::Abort => {
                        // SW-9's cause for a repeated line; a configured trigger's
                        // names the trigger and what it found.
                        let reason = match &firing.evidence {
                            Evidence::LineRepeat(report) => format!("output loop: {}", report.line),
                            Evidence::Marker { marker: found }
                            | Evidence::Phrase { phrase: found } => {
                                format!("stream watch {}: {found}", firing.trigger)
                            }
                        };
                        policy.record_abort();
                        aborted_calls.insert(context.call_id.clone());
                        cancel = Some(reason);
                        aborted = true;
                        Ok(true)
                    }
                    ActionId::Resume => {
                        if !policy.may_resume() {
                            // SW-11: no resume; the stop notice below reaches the next
                            // human-started step.
                            return Ok(false);
                        }
                        let steered = context
                            .inbox
                            .steer(watch.resume_for(session, &firing))
                            .is_some();
                        spoke |= steered;
                        Ok(steered)
                    }
                    ActionId::Unknown(_) => Ok(false),
                }
            });
            if aborted && !spoke {
                // Nothing spoke: the notice is off or already sent in this user turn,
                // and resume is off or held back after two aborts in a row (SW-11).
                context.inbox.inject(watch.notice_for(&firing, true));
            }
            log_actions(session, &firing, &records);
            engine.record_actions(&firing, records);
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
                .and_then(|event| serde_json::from_str::<CallOf>(event.data_json()).ok())
                .and_then(|data| data.call_id)
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

/// The `call_id` of an `assistant/message`, read without building the rest.
#[derive(serde::Deserialize)]
struct CallOf {
    #[serde(default)]
    call_id: Option<String>,
}

/// The `source` of a `user/message`, read without building its content.
#[derive(serde::Deserialize)]
struct UserMessageSource {
    message: MessageSource,
}

/// A message's `source` alone.
#[derive(serde::Deserialize)]
struct MessageSource {
    #[serde(default)]
    source: Option<Source>,
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
            // SW-10: a real user message entered at this step (the opening prompt,
            // or a person's steer at any later step) resets the count and the
            // notice record; a resume steer or a notice does not. The step's user
            // messages are logged before the pre-step chain runs, after the last
            // `step/end` (or `turn/start`).
            let real = context.session.with_log(|log| {
                log.events()
                    .iter()
                    .rev()
                    .take_while(|event| {
                        event.kind() != ccare_core::kinds::TURN_START
                            && event.kind() != ccare_core::kinds::STEP_END
                    })
                    .filter(|event| event.kind() == ccare_core::kinds::USER_MESSAGE)
                    .any(|event| {
                        // Only the source is read; the content is skipped, not built.
                        serde_json::from_str::<UserMessageSource>(event.data_json()).is_ok_and(
                            |user| matches!(user.message.source, Some(Source::User { .. })),
                        )
                    })
            });
            if real {
                let mut agents = self.0.agents.lock();
                self.0
                    .agent(&mut agents, session)
                    .policy
                    .real_user_message();
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

/// Resets the abort count on a healthy output (SW-10), and forgets a closed session:
/// its engine, policy and tool-loop history go with it, as they would with the process
/// (a server keeps state only for the sessions it drives).
struct WatchHealth {
    watch: Arc<Watch>,
    tool_loop: Arc<tool_loop::ToolLoopGate>,
}

/// What [`WatchHealth`] reads of an `assistant/message`.
#[derive(serde::Deserialize)]
struct ReplyHealth<'a> {
    #[serde(default)]
    interrupted: bool,
    #[serde(default, borrow)]
    call_id: std::borrow::Cow<'a, str>,
}

impl Observer for WatchHealth {
    fn name(&self) -> &str {
        "stream-watch"
    }

    fn on_lifecycle(&self, notice: &Lifecycle) -> Result<(), ObserverError> {
        if let Lifecycle::Closed(session) = notice {
            self.watch.agents.lock().remove(session);
            self.tool_loop.sessions.lock().remove(session);
        }
        Ok(())
    }

    fn on_event(&self, session: &SessionId, event: &Arc<Event>) -> Result<(), ObserverError> {
        if event.kind() != ccare_core::kinds::ASSISTANT_MESSAGE {
            return Ok(());
        }
        // Two fields of the reply are read; its message and recorded stream are skipped.
        let Ok(reply) = serde_json::from_str::<ReplyHealth<'_>>(event.data_json()) else {
            return Ok(());
        };
        if reply.interrupted {
            return Ok(());
        }
        let mut agents = self.watch.agents.lock();
        if let Some(agent) = agents.get_mut(session)
            && !agent.aborted_calls.contains(reply.call_id.as_ref())
        {
            agent.policy.healthy_output();
        }
        Ok(())
    }
}
