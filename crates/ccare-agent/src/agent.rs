//! The agent: one session, its inbox, and the driver that runs turns until idle
//! (spec H-LOOP-1 .. H-LOOP-4, H-CANCEL-1, H-CANCEL-3, H-CANCEL-4).
//!
//! Callers give commands through [`Agent::send`] (the closed protocol, ACT-2: checked,
//! durable in the inbox domain, then acknowledged) or queue work without waiting for
//! durability ([`Agent::followup`], [`Agent::steer`], [`Agent::inject`]); a driver
//! task wakes, runs turns while waking entries are queued, then goes idle.
//! [`Agent::when_idle`] resolves when no turn runs and nothing waking is queued — from
//! the moment `followup` returns, the entry counts as queued.

use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;

use ccare_core::kinds::TurnEndReason;
use ccare_core::{Clock, Message};
use ccare_llm::{CancellationToken, Chunk};
use ccare_session::{OnDemandBroadcast, Session, Subscription};
use parking_lot::Mutex;
use tokio::sync::{broadcast, watch};

use crate::command::{Ack, Command, CommandError};
use crate::host::Host;
use crate::inbox::{Entry, Inbox, Target};

/// How many chunks a live subscriber may fall behind before it gets `Lagged`.
const LIVE_CAPACITY: usize = 1024;

/// How many transient signals (went idle, awaits tools) the agent's channel keeps for
/// a stream pump that has not taken them yet. A signal marks the end of a turn or a
/// step, and every pump takes what is queued each time it runs, so a handful is plenty;
/// the slots are allocated with the agent, and every session's agent has them.
const SIGNAL_CAPACITY: usize = 8;

/// Per-agent request options (H-LOOP-1) and loop limits (`[loop]`).
#[derive(Debug, Clone, PartialEq)]
pub struct AgentOptions {
    /// `"<provider>/<model>"`.
    pub model: String,
    /// Output limit; the route's default when `None`.
    pub max_tokens: Option<u32>,
    /// Sampling temperature.
    pub temperature: Option<f64>,
    /// Reasoning effort.
    pub reasoning_effort: Option<String>,
    /// Steps per turn before the turn ends with `STEP_LIMIT` (`loop.max_steps_per_turn`).
    pub max_steps_per_turn: u32,
    /// Request-error retries per step (`loop.max_request_retries`).
    pub max_request_retries: u32,
    /// Parallel-safe tool calls run at once (`loop.tool_pool`).
    pub tool_pool: usize,
    /// How long running tool bodies get after a cancel (`loop.tool_cancel_grace_ms`).
    pub tool_cancel_grace_ms: u64,
    /// The caller's own API key for this agent's model requests, its side requests
    /// (summaries) included, instead of the provider's configured key (GW-1
    /// `[gateway] pass_through_keys`); `None`: the configured key. Memory only: it is
    /// never logged or stored, and its `Debug` is redacted.
    pub credential: Option<ccare_llm::ApiCredential>,
    /// Host tools this agent neither offers nor runs (a gateway session's workspace
    /// tools, [`crate::tools::WORKSPACE_TOOLS`]): its requests leave them out, the base
    /// prompt's tool line does not name them, a call to one gets `TOOL_NOT_FOUND`, and a
    /// caller's tool may take the name (ACT-3). Empty: every host tool.
    pub hidden_tools: BTreeSet<String>,
    /// Extra top-level fields of this agent's conversation requests, sent as they are
    /// (a gateway client's `stop`, `seed`, `response_format`, ...; `CallConfig::ext`).
    /// Side requests (summaries) do not carry them.
    pub request_fields: ccare_core::JsonObject,
}

impl AgentOptions {
    /// Options for `model` with the spec's default limits.
    pub fn new(model: impl Into<String>) -> Self {
        Self {
            model: model.into(),
            max_tokens: None,
            temperature: None,
            reasoning_effort: None,
            max_steps_per_turn: 200,
            max_request_retries: 3,
            tool_pool: 10,
            tool_cancel_grace_ms: 5_000,
            credential: None,
            hidden_tools: BTreeSet::new(),
            request_fields: ccare_core::JsonObject::new(),
        }
    }
}

/// Why a turn is cancelled (H-CANCEL-1); defined beside `turn/end`, whose
/// `aborted{cause}` logs it.
pub use ccare_core::kinds::CancelCause;

/// A chunk as it streams, for live subscribers (a terminal, the web UI).
#[derive(Debug, Clone, PartialEq)]
pub struct LiveChunk {
    /// The turn.
    pub turn: u32,
    /// The step.
    pub step: u32,
    /// The call.
    pub call_id: String,
    /// The chunk.
    pub chunk: Chunk,
    /// The seq of the last event committed before the chunk streamed: the chunk
    /// belongs between that event and the next (ACT-4).
    pub after_seq: u64,
}

pub(crate) struct ActiveTurn {
    pub(crate) token: CancellationToken,
    pub(crate) cause: Option<CancelCause>,
    pub(crate) keep_inbox: bool,
    /// The inbox position when the cancel came: entries before it are dropped unless
    /// `keep_inbox`.
    pub(crate) cancelled_at: Option<u64>,
}

impl ActiveTurn {
    /// Cancels the turn; the first cause (and its keep-inbox choice) wins, later
    /// cancels join it (H-CANCEL-1).
    fn cancel(&mut self, cause: CancelCause, keep_inbox: bool, position: u64) {
        if self.cause.is_none() {
            self.cause = Some(cause);
            self.keep_inbox = keep_inbox;
            self.cancelled_at = Some(position);
        }
        self.token.cancel();
    }
}

pub(crate) struct State {
    pub(crate) inbox: Inbox,
    pub(crate) running: bool,
    pub(crate) active: Option<ActiveTurn>,
    pub(crate) last_end: Option<TurnEndReason>,
    /// How many turns have ended (cancel waits for the next one).
    pub(crate) turns_ended: u64,
    /// The last request header (its envelope) and context this agent logged.
    pub(crate) last_header: Option<ccare_core::kinds::RequestEnvelope>,
    pub(crate) last_context: Option<ccare_core::kinds::RequestContext>,
    /// Which provider wrote each assistant message seq (for reasoning echo).
    pub(crate) origins: HashMap<u64, Option<Arc<str>>>,
}

pub(crate) struct Inner {
    pub(crate) host: Arc<Host>,
    pub(crate) session: Session,
    pub(crate) clock: Arc<dyn Clock>,
    pub(crate) options: Mutex<AgentOptions>,
    pub(crate) state: Mutex<State>,
    pub(crate) idle: watch::Sender<u64>,
    /// Transient items of the ordered stream (`Idle`, `AwaitingTools`), each tagged
    /// with the seq it follows (ACT-4).
    pub(crate) signals: broadcast::Sender<crate::stream::Signal>,
    /// Every chunk as it streams. Shared, so a slot of the channel's ring is a pointer,
    /// not a 200-byte chunk; the ring (1,024 slots, about 40 KB) exists only while
    /// someone subscribes, not for every warm actor.
    pub(crate) live: OnDemandBroadcast<Arc<LiveChunk>>,
    /// Set once by [`Agent::retire`]: every subscription's pump ends.
    pub(crate) retired: watch::Sender<bool>,
}

impl Drop for Inner {
    fn drop(&mut self) {
        // The agent is gone: its caller's key is forgotten with it.
        let credential = self.options.get_mut().credential.take();
        self.host
            .credentials
            .forget(self.session.id(), credential.as_ref());
    }
}

/// An agent on one session. Cheap to clone.
#[derive(Clone)]
pub struct Agent {
    pub(crate) inner: Arc<Inner>,
}

impl std::fmt::Debug for Agent {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Agent")
            .field("session", self.inner.session.id())
            .finish_non_exhaustive()
    }
}

impl Agent {
    /// Attaches an agent to `session`. Its first request header is `initial` on a
    /// fresh session and `resume` on one that already has requests (H-SESS-4).
    pub fn new(
        host: Arc<Host>,
        session: Session,
        clock: Arc<dyn Clock>,
        options: AgentOptions,
    ) -> Self {
        let (idle, _) = watch::channel(0);
        let live = OnDemandBroadcast::new(LIVE_CAPACITY);
        let (signals, _) = broadcast::channel(SIGNAL_CAPACITY);
        host.credentials
            .set(session.id(), options.credential.as_ref());
        Self {
            inner: Arc::new(Inner {
                host,
                session,
                clock,
                options: Mutex::new(options),
                state: Mutex::new(State {
                    inbox: Inbox::default(),
                    running: false,
                    active: None,
                    last_end: None,
                    turns_ended: 0,
                    last_header: None,
                    last_context: None,
                    origins: HashMap::new(),
                }),
                idle,
                signals,
                live,
                retired: watch::Sender::new(false),
            }),
        }
    }

    /// Retires this agent: a new agent drives its session from now on (the registry
    /// reopened a fenced session, H-STORE-6). Every subscription of its ordered stream
    /// ([`Agent::subscribe_from`]) sends what is durable and ends, so a follower
    /// subscribes again, to the new agent, from its last event. Subscribing later ends
    /// likewise. Retire only an idle agent, and send it no more commands.
    pub fn retire(&self) {
        self.inner.retired.send_replace(true);
    }

    /// Whether [`Agent::retire`] was called.
    pub fn is_retired(&self) -> bool {
        *self.inner.retired.borrow()
    }

    /// The session.
    pub fn session(&self) -> &Session {
        &self.inner.session
    }

    /// The host.
    pub fn host(&self) -> &Arc<Host> {
        &self.inner.host
    }

    /// The current options.
    pub fn options(&self) -> AgentOptions {
        self.inner.options.lock().clone()
    }

    /// Changes the options; they apply from the next step (with `request/header{change}`).
    /// Unchecked; [`Agent::send`] with [`Command::SetOptions`] refuses bad options.
    pub fn set_options(&self, options: AgentOptions) {
        let mut current = self.inner.options.lock();
        self.inner
            .host
            .credentials
            .set(self.inner.session.id(), options.credential.as_ref());
        *current = options;
    }

    /// The one entry point of the closed protocol (ACT-2). A bad command is refused
    /// with a typed error and changes nothing. A queued message (`UserInput`, `Steer`,
    /// `Inject`) is acknowledged once it is durable in the inbox domain, and messages
    /// are applied in the order their `send` calls queued them. `ToolResults` is
    /// acknowledged once the results are logged ([`Agent::tool_results`]); `Cancel`
    /// once the turn has ended and the entries it drops are deleted; `SetOptions`
    /// once the options are in place (from the next step).
    pub async fn send(&self, command: Command) -> Result<Ack, CommandError> {
        command.check()?;
        let name = command.name();
        match command {
            Command::UserInput { message, options } => {
                if let Some(original) = crate::resend::resent_id(&message)
                    && let Some(reason) = crate::resend::refusal(&self.inner.session, original)
                {
                    return Err(CommandError::NotResendable {
                        command: name,
                        original: original.to_owned(),
                        reason,
                    });
                }
                if let Some(options) = options {
                    self.set_options(options);
                }
                self.queue_durably(name, Target::Followup, message, true)
                    .await
            }
            Command::Steer(message) => self.queue_durably(name, Target::Steer, message, true).await,
            Command::Inject(message) => {
                self.queue_durably(name, Target::Inject, message, false)
                    .await
            }
            Command::ToolResults(results) => {
                self.tool_results(results)
                    .await
                    .map_err(CommandError::ToolResults)?;
                Ok(Ack { entry: None })
            }
            Command::Cancel { keep_inbox } => {
                self.cancel(CancelCause::User, keep_inbox).await;
                self.inner
                    .host
                    .inbox
                    .flush(&self.inner.host, self.inner.session.id().as_str())
                    .await
                    .map_err(|source| CommandError::Inbox {
                        command: name,
                        source,
                    })?;
                Ok(Ack { entry: None })
            }
            Command::SetOptions(options) => {
                self.set_options(options);
                Ok(Ack { entry: None })
            }
        }
    }

    /// Queues a message and resolves once its inbox row is durable; if it cannot be
    /// written, takes it back out of the inbox (unless a step already claimed it).
    async fn queue_durably(
        &self,
        command: &'static str,
        target: Target,
        message: Message,
        wake: bool,
    ) -> Result<Ack, CommandError> {
        let host = &self.inner.host;
        let session = self.inner.session.id().as_str();
        let failed = |source| CommandError::Inbox { command, source };
        host.inbox.ready(host).await.map_err(failed)?;
        let (id, ticket) = self.enqueue(target, message, wake);
        let written = match ticket {
            Some(ticket) => ticket.await,
            None => host.inbox.flush(host, session).await,
        };
        if let Err(source) = written {
            self.inner.state.lock().inbox.remove(id);
            self.bump_idle();
            return Err(failed(source));
        }
        Ok(Ack { entry: Some(id) })
    }

    /// Queues a message for the next turn and wakes the agent. Returns its queue id.
    /// Its inbox row is written in the background; [`Agent::send`] with
    /// [`Command::UserInput`] waits until it is durable.
    pub fn followup(&self, message: Message) -> u64 {
        self.enqueue(Target::Followup, message, true).0
    }

    /// Queues a message for the next step and wakes the agent (unacknowledged
    /// [`Command::Steer`]).
    pub fn steer(&self, message: Message) -> u64 {
        self.enqueue(Target::Steer, message, true).0
    }

    /// Queues a message for the next step without waking an idle agent
    /// (unacknowledged [`Command::Inject`]).
    pub fn inject(&self, message: Message) -> u64 {
        self.enqueue(Target::Inject, message, false).0
    }

    /// Queues the user's text as a followup.
    pub fn prompt(&self, text: impl Into<String>) -> u64 {
        self.followup(crate::command::user_message(text))
    }

    fn enqueue(
        &self,
        target: Target,
        message: Message,
        wake: bool,
    ) -> (u64, Option<crate::domains::WriteTicket>) {
        let (entry, ticket, start) = {
            let mut state = self.inner.state.lock();
            let entry = state.inbox.push(target, message);
            // Queued in the inbox domain under the state lock, so rows are written in
            // queue order.
            let ticket = self.persist(&entry);
            let start = wake && !state.running;
            if start {
                state.running = true;
            }
            (entry, ticket, start)
        };
        self.bump_idle();
        if start {
            self.start_driver();
        }
        (entry.id, ticket)
    }

    fn start_driver(&self) {
        let agent = self.clone();
        tokio::spawn(async move { agent.drive().await });
    }

    /// Queues writing an entry to the `agent_inbox` domain; the ticket (when the
    /// domain is already open) resolves once it is durable.
    pub(crate) fn persist(&self, entry: &Entry) -> Option<crate::domains::WriteTicket> {
        self.inner
            .host
            .inbox
            .put(&self.inner.host, self.inner.session.id().as_str(), entry)
    }

    /// Deletes entries from the `agent_inbox` domain once they are logged (or dropped).
    pub(crate) fn forget(&self, ids: &[u64]) {
        for id in ids {
            self.inner
                .host
                .inbox
                .delete(&self.inner.host, self.inner.session.id().as_str(), *id);
        }
    }

    /// Loads this session's rule controls (RC-2; until loaded every action reports
    /// `storage-unavailable`) and the inbox entries an earlier process queued but never
    /// ran (H-LOOP-2), waking the agent if one of them should. Returns how many entries
    /// were restored. A controls read failure is logged, not returned: the session's
    /// controls then report `storage-unavailable` until storage recovers. Rows written
    /// before the inbox moved onto the domain API are migrated on the first open.
    pub async fn restore_inbox(&self) -> Result<usize, crate::domains::DomainError> {
        if let Err(error) = self.inner.host.controls.load(self.inner.session.id()).await {
            tracing::warn!(session = %self.inner.session.id(), %error, "controls unavailable");
        }
        let entries = self
            .inner
            .host
            .inbox
            .load(&self.inner.host, self.inner.session.id().as_str())
            .await?;
        // Rows a step logged before a crash kept their delete from landing.
        let (entries, applied) = crate::inbox::split_logged(&self.inner.session, entries);
        self.forget(&applied);
        let count = entries.len();
        let start = {
            let mut state = self.inner.state.lock();
            state.inbox.restore(entries);
            let start = state.inbox.has_waking() && !state.running;
            if start {
                state.running = true;
            }
            start
        };
        self.bump_idle();
        if start {
            self.start_driver();
        }
        Ok(count)
    }

    /// What [`Agent::restore_inbox`] does for a session created just now, without its
    /// store reads: the session's rule controls are marked loaded with no row and the
    /// inbox is empty (nobody can have queued entries for an id that did not exist).
    /// Call it only for a session this process has just created.
    pub fn adopt_new(&self) {
        if let Err(error) = self.inner.host.controls.adopt_new(self.inner.session.id()) {
            tracing::warn!(session = %self.inner.session.id(), %error, "controls unavailable");
        }
    }

    /// A receiver of every chunk as it streams (shared: one allocation per chunk,
    /// whatever the number of receivers).
    /// It never reports `Closed`; watch [`Agent::when_idle`] for the end of a turn.
    pub fn subscribe_live(&self) -> Subscription<Arc<LiveChunk>> {
        self.inner.live.subscribe()
    }

    /// Whether a turn is running or waking work is queued.
    pub fn is_busy(&self) -> bool {
        let state = self.inner.state.lock();
        state.running || state.inbox.has_waking()
    }

    /// Resolves when no turn runs and no waking entry is queued; returns how the last
    /// turn ended.
    pub async fn when_idle(&self) -> Option<TurnEndReason> {
        let mut changes = self.inner.idle.subscribe();
        loop {
            {
                let state = self.inner.state.lock();
                // A step awaiting caller-executed results (ACT-3) is idle: queued work
                // waits for the results or a cancel.
                if !state.running && (!state.inbox.has_waking() || self.is_awaiting_tools()) {
                    return state.last_end.clone();
                }
            }
            if changes.changed().await.is_err() {
                return None;
            }
        }
    }

    /// Cancels the running turn (H-CANCEL-1). The first cause wins; later cancels
    /// join it. Resolves once the turn has ended. With `keep_inbox`, claimed but
    /// unentered entries return to the inbox; without, everything queued before the
    /// cancel is dropped (H-CANCEL-3).
    pub async fn cancel(&self, cause: CancelCause, keep_inbox: bool) {
        if self.cancel_awaiting(&cause, keep_inbox).await {
            return;
        }
        let awaiting_cause = cause.clone();
        let mut changes = self.inner.idle.subscribe();
        let waiting_for = {
            let mut state = self.inner.state.lock();
            let waiting_for = state.active.as_ref().map(|_| state.turns_ended + 1);
            let position = state.inbox.next_id();
            let mut dropped_now = false;
            match &mut state.active {
                Some(active) => active.cancel(cause, keep_inbox, position),
                None => dropped_now = !keep_inbox,
            }
            if dropped_now {
                let dropped = state.inbox.drop_before(position);
                self.forget(&dropped);
            }
            waiting_for
        };
        self.bump_idle();
        let Some(target) = waiting_for else {
            // No turn is active: what this cancel dropped is durable before it returns
            // (ACT-2), as the driver makes a turn's deletions durable before it
            // reports idle.
            if !keep_inbox {
                crate::turn::settle_inbox(self).await;
            }
            return;
        };
        loop {
            if self.inner.state.lock().turns_ended >= target {
                break;
            }
            if changes.changed().await.is_err() {
                return;
            }
        }
        // The turn is counted ended before the driver has made what it dropped durable
        // (and this loop may see that first, woken by another change): the cancel
        // returns only once it is (ACT-2).
        crate::turn::settle_inbox(self).await;
        // The turn reached the awaiting-tools state just before the cancel landed
        // (ACT-3): once the driver let go, end it as a cancel of an awaiting turn.
        while self.is_awaiting_tools() {
            if !self.inner.state.lock().running {
                self.cancel_awaiting(&awaiting_cause, keep_inbox).await;
                return;
            }
            if changes.changed().await.is_err() {
                return;
            }
        }
    }

    pub(crate) fn bump_idle(&self) {
        self.inner
            .idle
            .send_modify(|generation| *generation = generation.wrapping_add(1));
    }

    pub(crate) async fn drive(self) {
        loop {
            if self.is_awaiting_tools() {
                // No new turn while a step awaits caller-executed results (ACT-3).
                self.inner.state.lock().running = false;
                self.bump_idle();
                return;
            }
            let opening = {
                let mut state = self.inner.state.lock();
                match state.inbox.take_opening() {
                    Some(entry) => {
                        state.active = Some(ActiveTurn {
                            token: CancellationToken::new(),
                            cause: None,
                            keep_inbox: false,
                            cancelled_at: None,
                        });
                        Some(entry)
                    }
                    None => None,
                }
            };
            let Some(opening) = opening else {
                let hooks: Vec<_> = self
                    .inner
                    .host
                    .hooks
                    .read()
                    .idle
                    .iter()
                    .map(|hook| Arc::clone(&hook.hook))
                    .collect();
                for hook in hooks {
                    hook.on_idle(&self.inner.session).await;
                }
                // What the idle hooks queued is durable before the agent reports idle.
                crate::turn::settle_inbox(&self).await;
                let mut state = self.inner.state.lock();
                if state.inbox.has_waking() {
                    continue;
                }
                state.running = false;
                drop(state);
                self.signal(crate::stream::SignalKind::Idle);
                self.bump_idle();
                return;
            };
            let reason = crate::turn::run_turn(&self, opening).await;
            // What the turn queued (a hook's steer) or deleted is durable before the
            // agent can report idle.
            crate::turn::after_turn(&self, reason).await;
        }
    }

    /// Records how the running turn ended (`None`: it awaits its caller's tool results):
    /// drops the inbox entries a cancel without `keep_inbox` left behind, and counts
    /// the turn.
    pub(crate) fn record_turn_end(&self, reason: Option<TurnEndReason>) {
        let mut state = self.inner.state.lock();
        if let Some(active) = state.active.take()
            && let Some(position) = active.cancelled_at
            && !active.keep_inbox
        {
            let dropped = state.inbox.drop_before(position);
            self.forget(&dropped);
        }
        state.last_end = reason;
        state.turns_ended += 1;
    }

    /// The cancel token of the running turn.
    pub(crate) fn turn_token(&self) -> CancellationToken {
        self.inner
            .state
            .lock()
            .active
            .as_ref()
            .map(|active| active.token.clone())
            .unwrap_or_default()
    }

    /// Cancels the running turn from inside (a stream observer), first cause wins.
    pub(crate) fn cancel_from_hook(&self, cause: CancelCause) {
        let mut state = self.inner.state.lock();
        let position = state.inbox.next_id();
        if let Some(active) = &mut state.active {
            active.cancel(cause, true, position);
        }
    }

    /// The cause of the running turn's cancel, if it was cancelled.
    pub(crate) fn cancel_cause(&self) -> Option<CancelCause> {
        self.inner
            .state
            .lock()
            .active
            .as_ref()
            .and_then(|active| active.cause.clone())
    }
}
