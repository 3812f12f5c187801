//! Side requests: model calls a plugin makes itself, outside a step's conversation
//! request (context care's summaries, purpose `compaction`), shaped by the same
//! request hooks and request segments (watch-rules-ui.md MP-3: a scoped prompt with
//! purpose `compaction` reaches the summary request).
//!
//! [`SideRequests::prepare`] runs every request hook on the call config, pins exactly
//! the route the config then names, and reserves the request-only messages of every
//! segment that serves the call's purpose ([`RequestSegment::serves_side`]), joined
//! into ONE user message after every other message, as the kernel does for a
//! conversation request. The [`SideCall`] it returns tells those segments how the
//! call ended, exactly once: [`SideDelivery::dispatched`] (sent and answered) or
//! [`SideDelivery::release`] (refused, failed or cancelled; also on drop).
//!
//! Request gates are not run here: the caller owns its dispatch decision (context
//! care runs its own budget check on its summary calls), and no `request/header` is
//! written, since a side call is not a step of the conversation; the caller records
//! [`SideDelivery::request_only`] with its own events.

use std::sync::{Arc, Weak};

use ccare_core::{LlmFailure, Message};
use ccare_llm::{
    Assembled, Assembler, CallConfig, CancellationToken, ChunkStream, Finish, Llm, PreparedCall,
    Purpose, RequestMessage,
};
use futures_util::StreamExt;
use parking_lot::RwLock;

use crate::hooks::{HookContext, HookError, Hooks, RequestSegment};

/// A plugin's handle for its own model calls: the host's request hooks and segments
/// (as registered at the time of each call) and its LLM layer.
///
/// It refers to the hooks weakly: the plugin that keeps this handle has hooks of its
/// own in that registry, so a strong reference would be a cycle that keeps the plugin,
/// and everything it holds (its domains, the store), alive after the host is dropped.
#[derive(Clone)]
pub struct SideRequests {
    hooks: Weak<RwLock<Hooks>>,
    llm: Arc<Llm>,
    credentials: crate::credentials::SessionCredentials,
}

impl std::fmt::Debug for SideRequests {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SideRequests").finish_non_exhaustive()
    }
}

/// Why a side request could not be prepared.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum SideRequestError {
    /// A request hook failed; the error names its plugin.
    #[error("request hook of {}: {}", .0.plugin.as_deref().unwrap_or("host"), .0.message)]
    Hook(HookError),
    /// The LLM layer could not pin the route (unknown model or provider).
    #[error("{0}")]
    Prepare(LlmFailure),
    /// The host that made this handle is gone (dropped): no call can be shaped.
    #[error("the host is closed: no side request can be made")]
    HostClosed,
}

impl SideRequestError {
    /// A stable code: `HOOK_FAILED`, `HOST_CLOSED`, or the LLM layer's failure code.
    pub fn code(&self) -> &str {
        match self {
            SideRequestError::Hook(_) => "HOOK_FAILED",
            SideRequestError::Prepare(failure) => failure.code.as_str(),
            SideRequestError::HostClosed => "HOST_CLOSED",
        }
    }
}

impl SideRequests {
    pub(crate) fn new(
        hooks: &Arc<RwLock<Hooks>>,
        llm: Arc<Llm>,
        credentials: crate::credentials::SessionCredentials,
    ) -> Self {
        Self {
            hooks: Arc::downgrade(hooks),
            llm,
            credentials,
        }
    }

    /// The LLM layer the calls go through.
    pub fn llm(&self) -> &Arc<Llm> {
        &self.llm
    }

    /// Prepares a side call: every request hook edits `config` in registration order,
    /// the route `config.model` then names is pinned exactly (as
    /// [`Llm::prepare_exact`]: a caller that wants the purpose's configured route
    /// resolves it first, e.g. with [`Llm::model_for`]), and every segment serving the
    /// purpose reserves its request-only messages for the call, appended as ONE user
    /// message after every other message (MP-3). Nothing is logged. A call for a
    /// session whose agent runs with the caller's own key (GW-1) is made with that
    /// key, unless the config names one itself.
    pub fn prepare(
        &self,
        context: &HookContext,
        mut config: CallConfig,
    ) -> Result<SideCall, SideRequestError> {
        // Copied out, so no plugin code runs under the host's lock.
        let hooks = self.hooks.upgrade().ok_or(SideRequestError::HostClosed)?;
        let (request_hooks, segments) = {
            let hooks = hooks.read();
            (hooks.request.clone(), hooks.segments.clone())
        };
        for hook in &request_hooks {
            hook.hook
                .edit(context, &mut config)
                .map_err(|error| SideRequestError::Hook(error.attributed(&hook.owner)))?;
        }
        if config.credential.is_none() {
            config.credential = self.credentials.get(context.session.id());
        }
        let mut call = self
            .llm
            .prepare_exact(config)
            .map_err(SideRequestError::Prepare)?;
        let purpose = call.config.purpose;
        let mut parts = Vec::new();
        let mut reserved = Vec::new();
        for segment in segments
            .into_iter()
            .filter(|segment| segment.hook.serves_side(purpose))
        {
            let messages = segment.hook.reserve(context, &call.call_id);
            if !messages.is_empty() {
                parts.push((segment.owner.clone(), messages));
            }
            reserved.push(segment.hook);
        }
        let request_only = crate::turn::join_request_only(parts);
        for (_, messages) in &request_only {
            for message in messages {
                call.config
                    .messages
                    .push(RequestMessage::user(message.clone()));
            }
        }
        let delivery = SideDelivery {
            context: context.clone(),
            call_id: call.call_id.clone(),
            purpose,
            reserved,
            request_only,
            settled: false,
        };
        Ok(SideCall { call, delivery })
    }
}

/// A prepared side call carrying its segments' reservations. Dropping it without
/// streaming releases them.
pub struct SideCall {
    call: PreparedCall,
    delivery: SideDelivery,
}

impl SideCall {
    /// The prepared call: route pinned, hooks applied, request-only messages appended
    /// (what a budget check prices).
    pub fn call(&self) -> &PreparedCall {
        &self.call
    }

    /// The request-only messages the call carries, by segment owner (plugin names
    /// joined by `+` when several were joined into one message).
    pub fn request_only(&self) -> &[(String, Vec<Message>)] {
        &self.delivery.request_only
    }

    /// Streams the call; the returned delivery must be told how it ended.
    pub fn stream(self, cancel: CancellationToken) -> (ChunkStream, SideDelivery) {
        let SideCall { call, delivery } = self;
        (call.stream(cancel), delivery)
    }

    /// The call will not be sent: the reservations are released.
    pub fn release(self) {
        self.delivery.release();
    }

    /// Streams the call to its end and assembles the answer (H-LLM-3), telling the
    /// segments: `dispatched` when the provider answered (`stop`, `length` or
    /// `tool_calls`), `release` when it failed or was cancelled. For callers with no
    /// other signal to watch while it streams (a summary also stops when its plugin
    /// unmounts, so it streams itself).
    pub async fn complete(self, cancel: CancellationToken) -> Assembled {
        let (mut stream, delivery) = self.stream(cancel);
        let mut assembler = Assembler::new();
        let mut protocol = None;
        while let Some(chunk) = stream.next().await {
            if let Err(failure) = assembler.push(&chunk) {
                protocol = Some(failure);
                break;
            }
        }
        drop(stream);
        let assembled = match protocol {
            Some(failure) => assembler.fail(failure),
            None => assembler.finish(),
        };
        match assembled.finish {
            Finish::Stop | Finish::Length | Finish::ToolCalls => delivery.dispatched(),
            Finish::Aborted | Finish::Error { .. } => delivery.release(),
        }
        assembled
    }
}

/// The segments' side of a side call: told exactly once whether the call delivered.
pub struct SideDelivery {
    context: HookContext,
    call_id: String,
    purpose: Purpose,
    reserved: Vec<Arc<dyn RequestSegment>>,
    request_only: Vec<(String, Vec<Message>)>,
    settled: bool,
}

impl SideDelivery {
    /// The call's id.
    pub fn call_id(&self) -> &str {
        &self.call_id
    }

    /// The call's purpose.
    pub fn purpose(&self) -> Purpose {
        self.purpose
    }

    /// The request-only messages the call carried (see [`SideCall::request_only`]).
    pub fn request_only(&self) -> &[(String, Vec<Message>)] {
        &self.request_only
    }

    /// The call was sent and answered: each reservation counts as delivered.
    pub fn dispatched(mut self) {
        self.settled = true;
        for segment in &self.reserved {
            segment.dispatched(&self.context, &self.call_id);
        }
    }

    /// The call was not sent, or not answered: each reservation is released.
    pub fn release(mut self) {
        self.release_all();
    }

    fn release_all(&mut self) {
        if std::mem::replace(&mut self.settled, true) {
            return;
        }
        for segment in &self.reserved {
            segment.release(&self.context, &self.call_id);
        }
    }
}

impl Drop for SideDelivery {
    fn drop(&mut self) {
        self.release_all();
    }
}
