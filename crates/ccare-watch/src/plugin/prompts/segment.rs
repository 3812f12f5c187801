//! The mounted prompts (MP-2, MP-3, OP-5, OP-6): the request segment that adds ONE
//! request-only user message (prompts, then feedback, joined by a blank line; source
//! kind [`PROMPTS_KIND`], provenance under [`PROVENANCE_KEY`]) after every surface
//! message, and what it needs to know about routes.
//!
//! - [`CallRoutes`], a request hook, notes the route and purpose of each call as it is
//!   prepared (a request segment is told only the call id).
//! - [`PromptSegment`] composes and reserves the message, also for the side calls of a
//!   purpose some rule names, and settles the feedback it carried.
//! - [`PromptGate`] records every dispatched route per purpose (MP-2's previous route)
//!   and makes a feedback reservation durable before its call leaves.
//! - [`ObserveOutputs`] observes the session's outputs for `output-pattern` rules at
//!   pre-step time ([`super::feedback`] stores the episodes).
//! - [`last_dispatched_route`] is the previous route a session log records, for a
//!   session this process has not dispatched on.

use std::collections::HashMap;
use std::sync::Arc;

use ccare_agent::controls::Controls;
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
use ccare_llm::{CallConfig, PreparedCall, Purpose};
use parking_lot::Mutex;
use serde_json::{Value, json};

use super::config::{PromptRule, PromptTrigger, RouteRef};
use super::feedback::{self, FeedbackStore, episode_key};
use super::{PROMPT_ACTION, PROMPTS_KIND, PROMPTS_SOURCE, PROVENANCE_KEY};
use crate::pattern::{FeedbackContext, OutputPatternConfig, render_feedback_text};

/// Registers the hooks of the rules (not empty; their controls source is registered
/// already): the request hook, the request segment, the gate, and for
/// `output-pattern` rules the pre-step observation.
pub(super) fn install(rules: Vec<PromptRule>, scope: &mut PluginScope<'_>) {
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
        plugin: Some(crate::plugin::SOURCE.to_owned()),
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
