//! Hook chains (spec H-HOOK-1 .. H-HOOK-7): the points where plugins shape a step.
//!
//! - **pre-step** is an async waterfall: each hook gets the input and a [`PreStepNext`]
//!   to call the rest of the chain; a hook registered *outermost* runs before the
//!   others (newest outermost first) and, by awaiting `next`, sees what inner hooks
//!   produced. The terminal enters the input unchanged.
//! - **request** hooks edit the call config in order, before the call is prepared.
//! - **stream** observers see every chunk synchronously and may cancel the turn with a
//!   `hook` cause (stream watch does).
//! - **request-error** hooks may ask for a retry; the first `Retry` wins.
//! - **turn-stopping** hooks run serially when a turn would end; any may steer it on.
//! - **idle** hooks run when the agent becomes idle (maintenance).
//!
//! A hook that fails ends the turn with `error{HOOK_FAILED}` naming hook and plugin.

use std::sync::Arc;

use ccare_core::{Clock, LlmFailure, Message};
use ccare_llm::{CallConfig, CancellationToken, Chunk, Purpose, Route};
use ccare_session::Session;

use crate::tool::BoxFuture;

/// What every hook may read about the step it runs in.
#[derive(Clone)]
pub struct HookContext {
    /// The agent's session.
    pub session: Session,
    /// The turn.
    pub turn: u32,
    /// The step (0 outside a step, e.g. for turn-stopping hooks of an ended step).
    pub step: u32,
    /// Fires when the turn is cancelled.
    pub cancel: CancellationToken,
    /// The host's one source of time (H-GEN-1).
    pub clock: Arc<dyn Clock>,
}

/// A hook's failure; the turn ends with `error{HOOK_FAILED}`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct HookError {
    /// What went wrong.
    pub message: String,
    /// The plugin whose hook failed (filled in by the chain).
    pub plugin: Option<String>,
}

impl HookError {
    /// The same error, attributed to `owner` unless already attributed.
    pub(crate) fn attributed(self, owner: &str) -> Self {
        self.owned_by(owner)
    }

    /// A failure with a message.
    pub fn new(message: impl Into<String>) -> Self {
        Self {
            message: message.into(),
            plugin: None,
        }
    }

    fn owned_by(mut self, owner: &str) -> Self {
        if self.plugin.is_none() {
            self.plugin = Some(owner.to_owned());
        }
        self
    }
}

/// The pre-step input: the plugin messages claimed for this step, in batch order.
#[derive(Debug, Clone, PartialEq)]
pub struct PreStepInput {
    /// Messages to enter after `step/start`.
    pub messages: Vec<Message>,
}

/// What the pre-step chain decides.
#[derive(Debug, Clone, PartialEq)]
pub enum PreStepDecision {
    /// Enter these messages and run the step.
    Enter(Vec<Message>),
    /// End the turn `blocked`.
    Reject {
        /// Who rejected (plugin name).
        by: String,
        /// Why, for the log and the user.
        detail: String,
    },
}

/// A pre-step hook (H-HOOK-2).
pub trait PreStepHook: Send + Sync + 'static {
    /// Handles the input, usually by calling `next.run(...)` and adjusting its result.
    fn call<'a>(
        &'a self,
        context: &'a HookContext,
        input: PreStepInput,
        next: PreStepNext<'a>,
    ) -> BoxFuture<'a, Result<PreStepDecision, HookError>>;
}

/// The rest of the pre-step chain.
pub struct PreStepNext<'a> {
    rest: &'a [Registered<Arc<dyn PreStepHook>>],
    context: &'a HookContext,
}

impl<'a> PreStepNext<'a> {
    /// Runs the remaining hooks, then the terminal (which enters the input as it is).
    pub fn run(self, input: PreStepInput) -> BoxFuture<'a, Result<PreStepDecision, HookError>> {
        match self.rest.split_first() {
            Some((first, rest)) => {
                let running = first.hook.call(
                    self.context,
                    input,
                    PreStepNext {
                        rest,
                        context: self.context,
                    },
                );
                let owner = first.owner.as_str();
                Box::pin(async move { running.await.map_err(|error| error.owned_by(owner)) })
            }
            None => Box::pin(async move { Ok(PreStepDecision::Enter(input.messages)) }),
        }
    }
}

/// Edits the call config before it is prepared (H-HOOK-3).
pub trait RequestHook: Send + Sync + 'static {
    /// Edits `config` in place.
    fn edit(&self, context: &HookContext, config: &mut CallConfig) -> Result<(), HookError>;
}

impl<F> RequestHook for F
where
    F: Fn(&HookContext, &mut CallConfig) -> Result<(), HookError> + Send + Sync + 'static,
{
    fn edit(&self, context: &HookContext, config: &mut CallConfig) -> Result<(), HookError> {
        self(context, config)
    }
}

/// What a stream observer may read (H-HOOK-4).
#[derive(Debug, Clone)]
pub struct StreamContext {
    /// The call.
    pub call_id: String,
    /// The attempt, from 1 (request-error retries count up).
    pub attempt: u32,
    /// The turn.
    pub turn: u32,
    /// The step.
    pub step: u32,
    /// The pinned route.
    pub route: Route,
    /// The agent's session.
    pub session: ccare_core::SessionId,
    /// The agent's durable inbox: a watch may inject a notice or steer a continuation
    /// (stream watch's resume is queued before the aborted turn ends, SW-9).
    pub inbox: crate::tool::Injector,
}

/// A stream observer's verdict on one chunk.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StreamVerdict {
    /// Go on.
    Continue,
    /// Cancel the turn with cause `hook{plugin, reason}`; the visible output so far is
    /// kept as an interrupted assistant message.
    Cancel {
        /// Why, for the log.
        reason: String,
    },
}

/// Sees every chunk of a conversation stream, synchronously.
pub trait StreamObserver: Send + Sync + 'static {
    /// Looks at one chunk.
    fn on_chunk(&self, context: &StreamContext, chunk: &Chunk) -> StreamVerdict;
}

impl<F> StreamObserver for F
where
    F: Fn(&StreamContext, &Chunk) -> StreamVerdict + Send + Sync + 'static,
{
    fn on_chunk(&self, context: &StreamContext, chunk: &Chunk) -> StreamVerdict {
        self(context, chunk)
    }
}

/// A request-error hook's decision (H-HOOK-5).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RequestErrorDecision {
    /// Rebuild the request and send it again.
    Retry,
    /// No opinion: the turn ends with the error unless another hook retries.
    Pass,
}

/// Decides what a failed request leads to. May await (context-care's overflow recovery
/// compacts before it answers).
pub trait RequestErrorHook: Send + Sync + 'static {
    /// Looks at a failure of attempt `attempt` of the step.
    fn on_error<'a>(
        &'a self,
        context: &'a HookContext,
        failure: &'a LlmFailure,
        attempt: u32,
    ) -> BoxFuture<'a, RequestErrorDecision>;
}

impl<F> RequestErrorHook for F
where
    F: Fn(&HookContext, &LlmFailure, u32) -> RequestErrorDecision + Send + Sync + 'static,
{
    fn on_error<'a>(
        &'a self,
        context: &'a HookContext,
        failure: &'a LlmFailure,
        attempt: u32,
    ) -> BoxFuture<'a, RequestErrorDecision> {
        let decision = self(context, failure, attempt);
        Box::pin(std::future::ready(decision))
    }
}

/// Runs when a turn would end `completed`; may steer it on (H-HOOK-6).
pub trait TurnStoppingHook: Send + Sync + 'static {
    /// `Some(message)` steers: the message is entered in another step.
    fn on_stopping<'a>(
        &'a self,
        context: &'a HookContext,
    ) -> BoxFuture<'a, Result<Option<Message>, HookError>>;
}

/// Runs when the agent becomes idle (H-LOOP: the idle-maintenance hook).
pub trait IdleHook: Send + Sync + 'static {
    /// Does maintenance; the agent stays idle meanwhile and new work waits for it.
    fn on_idle<'a>(&'a self, session: &'a Session) -> BoxFuture<'a, ()>;
}

/// What a boundary-notice contributor sees (DESIGN.md §3 "boundary notices").
pub struct BoundaryContext<'a> {
    /// The step's hook context.
    pub hook: &'a HookContext,
    /// The messages entered at this boundary so far, in batch order: what the pre-step
    /// chain entered, then the notices of contributors that ran earlier.
    pub entered: &'a [Message],
    /// What the request segments would add to this step's request now
    /// ([`RequestSegment::preview`]), for pricing: they follow every surface message
    /// on the wire but never enter the log.
    pub request_only: &'a [Message],
}

/// Contributes notices at each step's boundary, after the pre-step chain. Contributors
/// run in priority order (lower first, then registration order) and each sees the
/// notices before it, so a status notice registered last can price everything.
pub trait BoundaryContributor: Send + Sync + 'static {
    /// The notices to enter now (user-role messages with a plugin source), and which
    /// entered messages to withdraw from the batch.
    fn contribute<'a>(
        &'a self,
        context: &'a BoundaryContext<'a>,
    ) -> BoxFuture<'a, Result<BoundaryContribution, HookError>>;
}

/// What a boundary contributor adds to a step's batch.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct BoundaryContribution {
    /// Notices appended to the batch, in order.
    pub notices: Vec<Message>,
    /// Indexes into [`BoundaryContext::entered`] of messages that leave the batch (never
    /// logged), e.g. a rest request whose text a checkpoint already carries
    /// (context-care CC-BND-2 R3). They still leave the inbox.
    pub withdraw: Vec<usize>,
}

impl From<Vec<Message>> for BoundaryContribution {
    fn from(notices: Vec<Message>) -> Self {
        Self {
            notices,
            withdraw: Vec::new(),
        }
    }
}

/// Request-only messages (scoped prompts, output feedback, completion notices): they
/// follow every surface message on the request copy only, never enter the log's
/// surface, and are recorded in the request's `request/header{reason: series}`
/// delta (watch-rules-ui.md MP-3, host.md H-SURF-5).
///
/// Around each dispatch the kernel calls `reserve`, then exactly one of `dispatched`
/// (the request was sent and answered, so the delivery counts) or `release` (it was
/// not), so a delivery is counted exactly once.
pub trait RequestSegment: Send + Sync + 'static {
    /// What the segment would add to a request now, without reserving it (for pricing).
    fn preview(&self, context: &HookContext) -> Vec<Message>;
    /// Reserves the messages for the call `call_id`.
    fn reserve(&self, context: &HookContext, call_id: &str) -> Vec<Message>;
    /// The call that carried the reservation was answered.
    fn dispatched(&self, context: &HookContext, call_id: &str);
    /// The call that carried the reservation did not go out or failed.
    fn release(&self, context: &HookContext, call_id: &str);

    /// Whether the segment also serves side requests of `purpose`: calls a plugin
    /// makes itself through [`crate::SideRequests`] (context care's summaries, purpose
    /// `compaction`). Conversation requests always run every segment; by default a
    /// segment serves no side request, so conversation-only messages (output
    /// feedback, completion notices) never reach a summary.
    fn serves_side(&self, _purpose: Purpose) -> bool {
        false
    }
}

/// Checks a prepared request just before it would be dispatched; a refusal keeps it
/// on this machine. The attempt is logged as failed with that failure and the
/// request-error hooks run, exactly as if the provider had answered with it (so an
/// overflow-recovery hook can make room and retry). Context care's hard input budget
/// (CC-BUD-6, `REQUEST_BUDGET_EXCEEDED`) and its request journal (CC-JNL-2) are the
/// reasons this exists.
///
/// For every call the kernel runs `check` on each gate in registration order until one
/// refuses, then tells every gate how the call ended: `not_dispatched` (some gate
/// refused, or the call could not be handed off), or `dispatched` followed by exactly
/// one `settled` once the attempt's outcome is in the log.
pub trait RequestGate: Send + Sync + 'static {
    /// `Err(failure)` refuses the request. May await (e.g. to make a record durable
    /// before the decision).
    fn check<'a>(
        &'a self,
        context: &'a HookContext,
        call: &'a ccare_llm::PreparedCall,
    ) -> BoxFuture<'a, Result<(), LlmFailure>>;

    /// Every gate passed and the call is being handed to the provider.
    fn dispatched(&self, _context: &HookContext, _call: &ccare_llm::PreparedCall) {}

    /// The call was not handed off: `failure` says why.
    fn not_dispatched(&self, _context: &HookContext, _call_id: &str, _failure: &LlmFailure) {}

    /// A dispatched call's attempt is settled and logged.
    fn settled(&self, _context: &HookContext, _settlement: &Settlement) {}
}

/// How a dispatched attempt ended, as logged (CC-JNL-2 `settled`).
#[derive(Debug, Clone, PartialEq)]
pub struct Settlement {
    /// The call.
    pub call_id: String,
    /// The attempt, from 1.
    pub attempt: u32,
    /// What came of it.
    pub outcome: SettledOutcome,
    /// The seq of the event that records it.
    pub event_seq: u64,
    /// That event's type: `assistant/message` or `assistant/attempt`.
    pub event_type: &'static str,
    /// What the provider reported, if anything.
    pub usage: Option<ccare_core::TokenUsage>,
}

/// The outcome of a dispatched attempt.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SettledOutcome {
    /// A complete reply.
    Completed,
    /// The provider or the stream failed.
    Failed,
    /// Cancelled; any visible output was kept as an interrupted message.
    Interrupted,
}

impl SettledOutcome {
    /// `completed`, `failed` or `interrupted`.
    pub fn as_str(self) -> &'static str {
        match self {
            SettledOutcome::Completed => "completed",
            SettledOutcome::Failed => "failed",
            SettledOutcome::Interrupted => "interrupted",
        }
    }
}

/// What a tool gate may use: the session and the agent's inbox.
#[derive(Clone)]
pub struct ToolGateContext {
    /// The agent's session.
    pub session: Session,
    /// The agent's durable inbox (e.g. to inject a reminder for the next step).
    pub inbox: crate::tool::Injector,
}

/// Looks at each tool call before it runs and after its result is logged; a refusal
/// answers the call with an error result instead of running the tool (stream watch's
/// tool-loop guard, EX-1).
pub trait ToolGate: Send + Sync + 'static {
    /// `Err(failure)` answers the call with that error instead of running it.
    fn before(
        &self,
        context: &ToolGateContext,
        call: &ccare_core::ToolCallBlock,
    ) -> Result<(), crate::tool::ToolFailure>;

    /// The call's result is in the log at `seq`.
    fn after(
        &self,
        _context: &ToolGateContext,
        _call: &ccare_core::ToolCallBlock,
        _result: &ccare_core::ToolResultBlock,
        _seq: u64,
    ) {
    }
}

/// A registered hook with its owner.
#[derive(Clone)]
pub(crate) struct Registered<T> {
    pub(crate) owner: String,
    pub(crate) hook: T,
}

/// Every hook chain of a host, in run order.
#[derive(Clone, Default)]
pub(crate) struct Hooks {
    pub(crate) pre_step: Vec<Registered<Arc<dyn PreStepHook>>>,
    pub(crate) request: Vec<Registered<Arc<dyn RequestHook>>>,
    pub(crate) stream: Vec<Registered<Arc<dyn StreamObserver>>>,
    pub(crate) request_error: Vec<Registered<Arc<dyn RequestErrorHook>>>,
    pub(crate) turn_stopping: Vec<Registered<Arc<dyn TurnStoppingHook>>>,
    pub(crate) idle: Vec<Registered<Arc<dyn IdleHook>>>,
    /// Boundary contributors with their priority, kept sorted (stable) by priority.
    pub(crate) boundary: Vec<(i32, Registered<Arc<dyn BoundaryContributor>>)>,
    pub(crate) segments: Vec<Registered<Arc<dyn RequestSegment>>>,
    pub(crate) gates: Vec<Registered<Arc<dyn RequestGate>>>,
    pub(crate) tool_gates: Vec<Registered<Arc<dyn ToolGate>>>,
    /// How many pre-step hooks are outermost (they sit at the front, newest first).
    pub(crate) outermost: usize,
}

impl Hooks {
    /// Runs the pre-step chain.
    pub(crate) async fn pre_step(
        &self,
        context: &HookContext,
        input: PreStepInput,
    ) -> Result<PreStepDecision, HookError> {
        let next = PreStepNext {
            rest: &self.pre_step,
            context,
        };
        next.run(input).await
    }

    /// Drops everything `owner` registered.
    pub(crate) fn remove_owner(&mut self, owner: &str) {
        let outermost_removed = self.pre_step[..self.outermost]
            .iter()
            .filter(|hook| hook.owner == owner)
            .count();
        self.outermost -= outermost_removed;
        self.pre_step.retain(|hook| hook.owner != owner);
        self.request.retain(|hook| hook.owner != owner);
        self.stream.retain(|hook| hook.owner != owner);
        self.request_error.retain(|hook| hook.owner != owner);
        self.turn_stopping.retain(|hook| hook.owner != owner);
        self.idle.retain(|hook| hook.owner != owner);
        self.boundary.retain(|(_, hook)| hook.owner != owner);
        self.segments.retain(|hook| hook.owner != owner);
        self.gates.retain(|hook| hook.owner != owner);
        self.tool_gates.retain(|hook| hook.owner != owner);
    }
}
