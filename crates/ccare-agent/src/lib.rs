//! The agent kernel of context-care (spec H-LOOP, H-HOOK, H-TOOL, H-CANCEL).
//!
//! - [`Host`] holds what every agent of a process shares: the LLM layer, the session
//!   engine, tools, hook chains and system-prompt sections; [`Plugin`]s register into
//!   it through a [`PluginScope`] and are removed whole by [`Host::unmount`].
//! - [`Agent`] runs one session: an inbox ([`Agent::followup`], [`Agent::steer`],
//!   [`Agent::inject`]), a driver that runs turns until idle, cancellation with a
//!   cause, and a live broadcast of streamed chunks.
//! - [`Agent::subscribe_from`] (`stream.rs`) is the one ordered stream out (ACT-4):
//!   durable events replayed then live, chunks tagged with the seq they follow, `Idle`,
//!   and `Lagged { resume_from }` for a subscriber that fell behind.
//! - `turn.rs` is the step machine (read it first); `dispatch.rs` runs tool calls;
//!   `request.rs` builds requests from the log and logs their headers.
//! - [`resend`]: a user input that resends a message no turn answered (a client's
//!   retry) is logged off the surface, so the model reads the words once.
//! - [`SideRequests`] lets a plugin make its own model calls (summaries) through the
//!   same request hooks and segments.
//! - [`instructions`] installs the agent's own instructions (base prompt, configured
//!   text, the workspace's `AGENTS.md`) as the first system-prompt sections.
//! - [`routes`] is the HTTP route table (H-HTTP-1): the host and plugins register
//!   framework-free routes; `ccare serve` serves them behind its fence and auth.
//! - [`tools`] holds the built-in tools (files confined to the workspace, session search).
//! - [`domains`] and [`controls`] are `ccare-domains`' storage domains and rule controls,
//!   re-exported here; the kernel wires them into every [`PluginScope`] and loads a
//!   session's controls before its first turn.
//! - With the `testing` feature (tests only), the `testing` module is the test kit: a
//!   host over a real store with the scripted provider, and a failing store.

#![deny(missing_docs)]

mod agent;
mod command;
mod credentials;
mod dispatch;
pub mod driver;
mod external;
mod hooks;
mod host;
mod inbox;
pub mod instructions;
mod mount_error;
mod request;
pub mod resend;
pub mod routes;
mod sections;
mod side;
mod stream;
#[cfg(feature = "testing")]
pub mod testing;
mod tool;
mod toolbox;
pub mod tools;
mod turn;

pub use ccare_domains::{controls, domains};

pub use agent::{Agent, AgentOptions, CancelCause, LiveChunk};
pub use command::{Ack, Command, CommandError};
pub use external::{CallerResult, ExternalToolsError, TOOL_RESULTS_MISMATCH, TURN_TOOLS_FIELD};
pub use hooks::{
    BoundaryContext, BoundaryContribution, BoundaryContributor, HookContext, HookError, IdleHook,
    PreStepDecision, PreStepHook, PreStepInput, PreStepNext, RequestErrorDecision,
    RequestErrorHook, RequestGate, RequestHook, RequestSegment, SettledOutcome, Settlement,
    StreamContext, StreamObserver, StreamVerdict, ToolGate, ToolGateContext, TurnStoppingHook,
};
pub use host::{Host, HostError, Plugin, PluginScope, SystemSection};
pub use inbox::{Entry, Target};
pub use instructions::{InstalledInstructions, InstructionsConfig, InstructionsError};
pub use mount_error::{MountError, ScopeError};
pub use sections::SystemSections;
pub use side::{SideCall, SideDelivery, SideRequestError, SideRequests};
pub use stream::{EventStream, STREAM_CAPACITY, StreamItem};
pub use tool::{
    BoxFuture, Concurrency, Injector, Tool, ToolContext, ToolDef, ToolFailure, ToolOutcome,
};
pub use toolbox::ToolboxError;
pub use turn::ABORTED_BEFORE_DISPATCH;
