//! Tools the model can call (spec H-TOOL-1, H-TOOL-2).
//!
//! A [`Tool`] describes itself with a [`ToolDef`] (what the model is told, how it may
//! run alongside others) and runs a call with a [`ToolContext`]. It returns content
//! blocks, or a [`ToolFailure`] that the host turns into an error result for the
//! model; a tool never fails the turn.

use std::future::Future;
use std::pin::Pin;

use ccare_core::ContentBlock;
use ccare_llm::{CancellationToken, ToolSpec};
use ccare_session::Session;
use serde_json::Value;

/// A boxed, sendable future, as tool bodies return them.
pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// Whether a tool may run beside others.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Concurrency {
    /// Runs alone: every call before it has finished and none after it has started.
    Exclusive,
    /// May share the tool pool with neighbouring parallel-safe calls.
    ParallelSafe,
}

/// How a tool presents itself and runs.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolDef {
    /// Name, description and argument schema, as the model sees them.
    pub spec: ToolSpec,
    /// Whether it may run beside others.
    pub concurrency: Concurrency,
    /// How long a call may run before it fails with `TOOL_TIMEOUT`.
    pub timeout_ms: Option<u64>,
    /// The tool checks its own arguments (its spec fixes its error texts); the host
    /// skips the schema check but still advertises the schema.
    pub validates_own_arguments: bool,
}

/// What a running call may use.
#[derive(Clone)]
pub struct ToolContext {
    /// The session the call belongs to (read it; the host writes the result).
    pub session: Session,
    /// The call id the result answers.
    pub call_id: String,
    /// The turn of the call.
    pub turn: u32,
    /// The step of the call.
    pub step: u32,
    /// Fires when the turn is cancelled; a long body should stop early.
    pub cancel: CancellationToken,
    /// Queues messages into the agent's durable inbox (e.g. `context_rest`).
    pub inbox: Injector,
    /// The host's one source of time (H-GEN-1).
    pub clock: std::sync::Arc<dyn ccare_core::Clock>,
}

/// A handle on the calling agent's durable inbox: an inject is entered at the next step
/// without waking an idle agent; a steer wakes it.
#[derive(Clone, Default)]
pub struct Injector {
    agent: Option<crate::agent::Agent>,
}

impl std::fmt::Debug for Injector {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter
            .debug_struct("Injector")
            .field("attached", &self.agent.is_some())
            .finish()
    }
}

impl Injector {
    pub(crate) fn new(agent: crate::agent::Agent) -> Self {
        Self { agent: Some(agent) }
    }

    /// An injector for a call run outside any agent (a tool driven directly, as in
    /// tests): every inject is refused.
    pub fn detached() -> Self {
        Self::default()
    }

    /// Whether the call runs inside an agent, so that [`Injector::inject`] queues.
    pub fn is_attached(&self) -> bool {
        self.agent.is_some()
    }

    /// Queues `message`; returns its inbox id, or `None` when the call has no agent.
    pub fn inject(&self, message: ccare_core::Message) -> Option<u64> {
        self.agent.as_ref().map(|agent| agent.inject(message))
    }

    /// Queues `message` as a steer: entered at the next step, waking the agent; the
    /// agent does not go idle before it runs. `None` when there is no agent.
    pub fn steer(&self, message: ccare_core::Message) -> Option<u64> {
        self.agent.as_ref().map(|agent| agent.steer(message))
    }
}

/// Why a call failed, as the model will read it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{code}: {message}")]
pub struct ToolFailure {
    /// A stable code, e.g. `PATH_OUTSIDE_WORKSPACE`, `NOT_FOUND`, `TOO_LARGE`.
    pub code: String,
    /// What went wrong, for the model.
    pub message: String,
}

impl ToolFailure {
    /// A failure with a code and a message.
    pub fn new(code: impl Into<String>, message: impl Into<String>) -> Self {
        Self {
            code: code.into(),
            message: message.into(),
        }
    }
}

/// What a call produces: the result's content blocks, or a failure.
pub type ToolOutcome = Result<Vec<ContentBlock>, ToolFailure>;

/// A tool the model can call.
pub trait Tool: Send + Sync + 'static {
    /// How the tool presents itself and runs.
    fn def(&self) -> &ToolDef;

    /// Runs one call with arguments that passed the schema check (unless the tool
    /// validates its own). The future must be `'static`: clone what it needs.
    fn call(&self, context: ToolContext, arguments: Value) -> BoxFuture<'static, ToolOutcome>;
}
