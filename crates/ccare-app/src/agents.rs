//! [`Agents`]: the registry of running session actors (spec server.md ACT-1).
//!
//! A process drives a session through at most one [`Agent`]: every front end asks
//! [`Agents::get_or_start`] (or [`Agents::create`] for a new session) and a session that
//! is already running hands out the same agent again, so `Agent::new` never runs twice
//! on one session in one process. Starting an actor first takes the session's lease
//! ([`SessionLease`]): another process driving it fails the start with
//! [`AppError::SessionBusy`] or is waited for, as the caller's [`WhenBusy`] says. Then
//! the session is opened from the store (with crash repair, safe because nobody else
//! drives it) and the inbox an earlier process left is restored.
//!
//! An actor stops, flushing and closing its session and releasing the lease, when
//! - nobody holds one of its [`AgentHandle`]s, no turn runs and the log did not move
//!   for `[host] actor_idle_ms` (the next command starts it again from the store), or
//! - the last holder hands its handle back with [`Agents::stop`] (the CLI, so a
//!   second process waiting with `--wait` proceeds as soon as the command ends).
//!
//! A caller about to send a command asks [`Agents::get_or_reopen`]: an idle actor whose
//! session a store error fenced (H-STORE-6) is replaced by one on the session reopened
//! from the store, which repairs it; readers get the fenced actor as it is.
//!
//! A start waiting for a busy session blocks only later starts of the same session:
//! each session has its own slot, dropped again when its actor stops.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, PoisonError, Weak};
use std::time::Duration;

use ccare_agent::{Agent, AgentOptions, Host};
use ccare_core::{JsonObject, SessionId, SystemClock};
use ccare_session::SessionHeader;

use crate::boot::Booted;
use crate::error::AppError;
use crate::lease::{SessionLease, WhenBusy};

/// The running actors of one host, by session.
#[derive(Clone)]
pub struct Agents {
    shared: Arc<Shared>,
}

impl std::fmt::Debug for Agents {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter
            .debug_struct("Agents")
            .field("idle", &self.shared.idle)
            .finish_non_exhaustive()
    }
}

/// Adjusts the options an actor starts with, from its session's stored header
/// ([`Agents::set_start_options`]).
type StartOptions = dyn Fn(&SessionHeader, &mut AgentOptions) + Send + Sync;

struct Shared {
    host: Arc<Host>,
    options: AgentOptions,
    /// [`Agents::set_start_options`]; `None`: every actor starts with `options`.
    start_options: std::sync::RwLock<Option<Arc<StartOptions>>>,
    lease_ms: u64,
    idle: Duration,
    /// One slot per session ever started here; `None` while it is stopped.
    slots: std::sync::Mutex<HashMap<SessionId, Arc<Slot>>>,
    /// Numbers the actors, so an idle watcher never stops a later actor of its session.
    started: AtomicU64,
}

type Slot = tokio::sync::Mutex<Option<Actor>>;

/// The registry as the host's session driver: weak, so the host (which holds the
/// driver) does not keep the registry (which holds the host) alive.
struct Driver(Weak<Shared>);

impl ccare_agent::driver::SessionDriver for Driver {
    fn drive<'a>(
        &'a self,
        id: &'a SessionId,
    ) -> ccare_agent::BoxFuture<
        'a,
        Result<ccare_agent::driver::DrivenSession, ccare_agent::driver::DriverError>,
    > {
        use ccare_agent::driver::{DrivenSession, DriverError};
        Box::pin(async move {
            let Some(shared) = self.0.upgrade() else {
                return Err(DriverError::Failed(
                    "the agents registry is gone".to_owned(),
                ));
            };
            let agents = Agents { shared };
            // The route appends to the session: a fenced one is reopened first.
            match agents.get_or_reopen(id, WhenBusy::Fail).await {
                Ok(handle) => Ok(DrivenSession {
                    session: handle.session().clone(),
                    guard: Box::new(handle),
                }),
                Err(AppError::Session(ccare_session::SessionError::UnknownSession(_))) => {
                    Err(DriverError::UnknownSession(id.to_string()))
                }
                Err(error @ AppError::SessionBusy { .. }) => {
                    Err(DriverError::Busy(error.to_string()))
                }
                Err(error) => Err(DriverError::Failed(error.to_string())),
            }
        })
    }
}

/// One running actor: its agent, the lease it holds and its users.
struct Actor {
    agent: Agent,
    lease: SessionLease,
    /// One clone per [`AgentHandle`] out, plus this one.
    users: Arc<()>,
    number: u64,
}

/// A front end's use of a running actor. While any handle is held the actor does not
/// stop for idleness; dropping it lets the idle timer run, [`Agents::stop`] ends the
/// actor at once when it is the last.
#[derive(Debug)]
pub struct AgentHandle {
    agent: Agent,
    restored: usize,
    user: Arc<()>,
}

impl AgentHandle {
    /// The session's agent (the same one for every handle of a running actor).
    pub fn agent(&self) -> &Agent {
        &self.agent
    }

    /// The session the agent drives.
    pub fn session(&self) -> &ccare_session::Session {
        self.agent.session()
    }

    /// How many queued inbox entries an earlier process left were restored when this
    /// actor started; 0 for a handle of an actor that was already running.
    pub fn restored(&self) -> usize {
        self.restored
    }

    /// Whether `other` is a handle of the same actor (one agent, one start).
    pub fn same_actor(&self, other: &AgentHandle) -> bool {
        Arc::ptr_eq(&self.user, &other.user)
    }
}

impl Agents {
    /// A registry over `host`, starting agents with `options`; each actor holds its
    /// session's lease for `lease_ms` (renewed) and stops after `idle_ms` unused.
    /// It installs itself as the host's session driver (CC-EXT-3), so routes that
    /// append to a session go through its actor.
    pub fn new(host: Arc<Host>, options: AgentOptions, lease_ms: u64, idle_ms: u64) -> Self {
        let agents = Self {
            shared: Arc::new(Shared {
                host: Arc::clone(&host),
                options,
                start_options: std::sync::RwLock::new(None),
                lease_ms,
                idle: Duration::from_millis(idle_ms.max(1)),
                slots: std::sync::Mutex::new(HashMap::new()),
                started: AtomicU64::new(0),
            }),
        };
        host.set_session_driver(Arc::new(Driver(Arc::downgrade(&agents.shared))));
        agents
    }

    /// The registry of a booted profile: its host, its agent options, `[host]
    /// lease_ms` and `[host] actor_idle_ms`.
    pub fn of(booted: &Booted) -> Self {
        Self::new(
            Arc::clone(&booted.host),
            booted.options.clone(),
            booted.lease_ms,
            booted.actor_idle_ms,
        )
    }

    /// Sets how an actor's options are adjusted from its session's header when it
    /// starts, whoever starts it (a request, a command, the inbox an earlier process
    /// left): the server's gateway hides the host's workspace tools from the sessions
    /// it created. Replaces the adjustment set before; actors already running keep
    /// their options.
    pub fn set_start_options(
        &self,
        adjust: impl Fn(&SessionHeader, &mut AgentOptions) + Send + Sync + 'static,
    ) {
        *self
            .shared
            .start_options
            .write()
            .unwrap_or_else(PoisonError::into_inner) = Some(Arc::new(adjust));
    }

    /// The host the agents run in.
    pub fn host(&self) -> &Arc<Host> {
        &self.shared.host
    }

    /// The running actor of `id`, or a new one started from the store: the lease is
    /// taken first (a live holder elsewhere fails or is waited for, as `when_busy`
    /// says), then the session is opened and its inbox restored. An unknown session is
    /// [`AppError::Session`].
    ///
    /// A running actor whose session a store error fenced (H-STORE-6) is handed out as
    /// it is, fence and all: for readers. A caller about to send a command asks
    /// [`Agents::get_or_reopen`].
    pub async fn get_or_start(
        &self,
        id: &SessionId,
        when_busy: WhenBusy<'_>,
    ) -> Result<AgentHandle, AppError> {
        self.get(id, when_busy, Fenced::Keep).await
    }

    /// [`Agents::get_or_start`] for a caller about to send a command: a running actor
    /// whose session a store error fenced, and that runs no turn, is replaced first.
    /// The session is reopened from the store, which repairs what the fence left open
    /// (H-STORE-6: "reopening the session repairs it"). The new actor keeps the lease
    /// and the options the fenced one ran with, and the fenced agent is retired
    /// ([`Agent::retire`]): its followers' streams end, to resubscribe to the new one.
    /// When the reopen fails (the store still fails) the fenced actor stays, so its
    /// detail still names the fence, and the reopen's error is returned. A fenced actor
    /// still finishing its turn is handed out as it is.
    pub async fn get_or_reopen(
        &self,
        id: &SessionId,
        when_busy: WhenBusy<'_>,
    ) -> Result<AgentHandle, AppError> {
        self.get(id, when_busy, Fenced::Reopen).await
    }

    async fn get(
        &self,
        id: &SessionId,
        when_busy: WhenBusy<'_>,
        fenced: Fenced,
    ) -> Result<AgentHandle, AppError> {
        let slot = self.slot(id);
        let mut running = slot.lock().await;
        if let Some(actor) = running.take() {
            let reopen = matches!(fenced, Fenced::Reopen)
                && actor.agent.session().fence().is_some()
                && !actor.agent.is_busy();
            if !reopen {
                let handle = actor.handle(0);
                *running = Some(actor);
                return Ok(handle);
            }
            return match self.reopen(actor).await {
                Ok((actor, handle)) => {
                    *running = Some(actor);
                    Ok(handle)
                }
                Err(Reopen::Kept(actor, error)) => {
                    *running = Some(actor);
                    Err(error)
                }
                Err(Reopen::Lost(error)) => {
                    self.shared.forget(id, &slot);
                    Err(error)
                }
            };
        }
        match self.start_stored(id, when_busy).await {
            Ok((actor, handle)) => {
                *running = Some(actor);
                Ok(handle)
            }
            Err(error) => {
                self.shared.forget(id, &slot);
                Err(error)
            }
        }
    }

    /// Takes `id`'s lease, then opens the session and starts its actor.
    async fn start_stored(
        &self,
        id: &SessionId,
        when_busy: WhenBusy<'_>,
    ) -> Result<(Actor, AgentHandle), AppError> {
        let store = Arc::clone(self.shared.host.sessions().store());
        let lease = SessionLease::acquire(
            store,
            Arc::new(SystemClock),
            id,
            self.shared.lease_ms,
            when_busy,
        )
        .await?;
        // On an error the lease is dropped, which releases it.
        let session = self.shared.host.sessions().open(id).await?;
        self.start(session, lease, Restore::Stored, None).await
    }

    /// Replaces `fenced`, an idle actor whose session a store error fenced, with a new
    /// actor on the session reopened from the store (repaired), under the same lease
    /// and options. The fenced session is closed first, so observers forget what they
    /// held for it (some of it about events the store refused). When the session
    /// cannot be reopened the fenced actor is handed back; when the new actor cannot
    /// start, the lease goes with it.
    async fn reopen(&self, fenced: Actor) -> Result<(Actor, AgentHandle), Reopen> {
        let host = &self.shared.host;
        let id = fenced.agent.session().id().clone();
        if let Err(error) = close_session(host, &id).await {
            // The fence's own error, most likely: nothing of it was checkpointed.
            tracing::debug!(session = %id, %error, "closing a fenced session");
        }
        let session = match host.sessions().open(&id).await {
            Ok(session) => session,
            Err(error) => {
                tracing::warn!(session = %id, %error, "reopening a fenced session failed");
                return Err(Reopen::Kept(fenced, error.into()));
            }
        };
        let options = fenced.agent.options();
        fenced.agent.retire();
        let Actor { lease, .. } = fenced;
        tracing::info!(session = %id, head = session.head(), "reopened a fenced session");
        self.start(session, lease, Restore::Stored, Some(options))
            .await
            .map_err(Reopen::Lost)
    }

    /// Creates a new session with `meta` and starts its actor (nobody knows the new
    /// id before it is returned, so nobody else can hold its lease).
    pub async fn create(&self, meta: JsonObject) -> Result<AgentHandle, AppError> {
        let id = ccare_session::new_session_id()?;
        let store = Arc::clone(self.shared.host.sessions().store());
        // The session row and its lease are queued together, the row first (the store
        // waits a moment after a new session for what follows it), so the store commits
        // them in one group (one fsync before the first turn, not two). A lease row does
        // not need its session to exist, and nobody else can claim an id not yet returned.
        let created = self.shared.host.sessions().create(Some(id.clone()), meta);
        let lease = SessionLease::acquire(
            store,
            Arc::new(SystemClock),
            &id,
            self.shared.lease_ms,
            WhenBusy::Fail,
        );
        let (session, lease) = tokio::join!(created, lease);
        let (lease, session) = match (lease, session) {
            (Ok(lease), Ok(session)) => (lease, session),
            (Ok(lease), Err(error)) => {
                let _ = lease.release().await;
                return Err(error.into());
            }
            (Err(error), _) => return Err(error),
        };
        self.start_created(session, lease).await
    }

    /// Creates a new session with `meta` and starts its actor like [`Agents::create`],
    /// for a caller that sends the session's first prompt at once (the gateway's new
    /// conversation): the session row and its lease are queued, not awaited, and the
    /// first turn's opening flush (which comes before any hook runs and before any
    /// request leaves, H-LOOP-5) makes them durable with it, in one commit instead of
    /// two (on a disk, one fsync less before the first byte). Until then the session
    /// does not read as durable; a failed creation or claim fences it, so that turn
    /// fails naming the store and nothing more is written to it.
    pub async fn create_queued(&self, meta: JsonObject) -> Result<AgentHandle, AppError> {
        let sessions = self.shared.host.sessions();
        // The row first, then the lease, then (from the actor) the turn: call order is
        // commit order.
        let session = sessions.create_queued(meta)?;
        let (lease, claim) = SessionLease::claim_new(
            Arc::clone(sessions.store()),
            Arc::new(SystemClock),
            session.id(),
            self.shared.lease_ms,
        );
        session.include_write(claim);
        self.start_created(session, lease).await
    }

    /// Starts the actor of a session created just now, in its slot.
    async fn start_created(
        &self,
        session: ccare_session::Session,
        lease: SessionLease,
    ) -> Result<AgentHandle, AppError> {
        let slot = self.slot(session.id());
        let mut running = slot.lock().await;
        let (actor, handle) = self.start(session, lease, Restore::New, None).await?;
        *running = Some(actor);
        Ok(handle)
    }

    /// Hands `handle` back; when it was the actor's last, stops the actor now: the
    /// session is flushed and closed and the lease released (awaited, so another
    /// process may drive the session as soon as this returns). A flush, close or
    /// release that fails is returned; the actor is stopped either way.
    pub async fn stop(&self, handle: AgentHandle) -> Result<(), AppError> {
        let id = handle.session().id().clone();
        let slot = self.slot(&id);
        let mut running = slot.lock().await;
        let last = running
            .as_ref()
            .is_some_and(|actor| Arc::ptr_eq(&actor.users, &handle.user))
            && Arc::strong_count(&handle.user) == 2;
        drop(handle);
        if !last {
            return Ok(());
        }
        let Some(actor) = running.take() else {
            return Ok(());
        };
        // Shut down before the slot goes, so a start of this session waits for the
        // lease's release instead of finding this process's own lease.
        let stopped = actor.shut_down(&self.shared.host).await;
        self.shared.forget(&id, &slot);
        stopped
    }

    /// A handle of `id`'s actor when one runs in this process now; `None` otherwise
    /// (nothing is started, no lease taken): for readers that report a session's live
    /// state without driving it.
    pub async fn running(&self, id: &SessionId) -> Option<AgentHandle> {
        let slot = self
            .shared
            .slots
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get(id)
            .cloned()?;
        let running = slot.lock().await;
        running.as_ref().map(|actor| actor.handle(0))
    }

    /// Stops every actor running here now, whoever holds its handles (a server
    /// shutting down): a running turn is cancelled with `cause` (recorded as cancelled
    /// in its log; claimed inbox entries go back to the inbox), then the session is
    /// flushed and closed and the lease released. Returns the sessions stopped and the
    /// failures, by session.
    pub async fn stop_all(
        &self,
        cause: ccare_core::kinds::CancelCause,
    ) -> (Vec<SessionId>, Vec<(SessionId, AppError)>) {
        let slots: Vec<(SessionId, Arc<Slot>)> = self
            .shared
            .slots
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .iter()
            .map(|(id, slot)| (id.clone(), Arc::clone(slot)))
            .collect();
        let mut stopped = Vec::new();
        let mut failed = Vec::new();
        for (id, slot) in slots {
            let mut running = slot.lock().await;
            let Some(actor) = running.take() else {
                continue;
            };
            actor.agent.cancel(cause.clone(), true).await;
            if let Err(error) = actor.shut_down(&self.shared.host).await {
                failed.push((id.clone(), error));
            }
            self.shared.forget(&id, &slot);
            stopped.push(id);
        }
        (stopped, failed)
    }

    /// Whether an actor of `id` runs in this process now.
    pub async fn is_running(&self, id: &SessionId) -> bool {
        let slot = self
            .shared
            .slots
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get(id)
            .cloned();
        match slot {
            Some(slot) => slot.lock().await.is_some(),
            None => false,
        }
    }

    /// The registry's agent options, adjusted for a session with `header`
    /// ([`Agents::set_start_options`]).
    fn start_options(&self, header: &SessionHeader) -> AgentOptions {
        let mut options = self.shared.options.clone();
        let adjust = self
            .shared
            .start_options
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .clone();
        if let Some(adjust) = adjust {
            adjust(header, &mut options);
        }
        options
    }

    fn slot(&self, id: &SessionId) -> Arc<Slot> {
        Arc::clone(
            self.shared
                .slots
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .entry(id.clone())
                .or_default(),
        )
    }

    /// Builds the actor on `session` (its lease held) with `options` (`None`: the
    /// registry's, adjusted for the session), restores the inbox and starts its idle
    /// watcher.
    async fn start(
        &self,
        session: ccare_session::Session,
        lease: SessionLease,
        restore: Restore,
        options: Option<AgentOptions>,
    ) -> Result<(Actor, AgentHandle), AppError> {
        let id = session.id().clone();
        let options = options.unwrap_or_else(|| self.start_options(session.header()));
        let agent = Agent::new(
            Arc::clone(&self.shared.host),
            session,
            Arc::new(SystemClock),
            options,
        );
        let restored = match restore {
            Restore::Stored => agent.restore_inbox().await.map_err(AppError::Inbox)?,
            Restore::New => {
                agent.adopt_new();
                0
            }
        };
        let number = self.shared.started.fetch_add(1, Ordering::Relaxed);
        let actor = Actor {
            agent,
            lease,
            users: Arc::new(()),
            number,
        };
        let handle = actor.handle(restored);
        tokio::spawn(watch_idle(Arc::downgrade(&self.shared), id, number));
        tracing::debug!(session = %handle.session().id(), "session actor started");
        Ok((actor, handle))
    }
}

/// What [`Agents::get`] does with a running actor whose session is fenced.
#[derive(Debug, Clone, Copy)]
enum Fenced {
    /// Hands it out (a reader).
    Keep,
    /// Replaces it when it runs no turn ([`Agents::get_or_reopen`]).
    Reopen,
}

/// Why [`Agents::reopen`] failed, and whether the fenced actor is still there.
enum Reopen {
    /// The session could not be reopened; the fenced actor is handed back.
    Kept(Actor, AppError),
    /// The new actor could not start; the fenced one is retired, the lease released.
    Lost(AppError),
}

/// What an actor's start reads back from the store.
#[derive(Debug, Clone, Copy)]
enum Restore {
    /// A stored session: its rule controls and the inbox entries an earlier process
    /// queued ([`Agent::restore_inbox`]).
    Stored,
    /// A session created just now: nothing can be stored for it yet
    /// ([`Agent::adopt_new`]).
    New,
}

impl Shared {
    /// Drops the (emptied) slot of `id` from the map unless someone else holds it (a
    /// start waiting for it), so a long-running registry keeps no entry per session
    /// it ever ran. `slot` is the caller's; the caller holds its lock.
    fn forget(&self, id: &SessionId, slot: &Arc<Slot>) {
        let mut slots = self.slots.lock().unwrap_or_else(PoisonError::into_inner);
        // The map's reference and the caller's: nobody else can reach this slot now.
        if Arc::strong_count(slot) == 2 && slots.get(id).is_some_and(|kept| Arc::ptr_eq(kept, slot))
        {
            slots.remove(id);
        }
    }
}

impl Actor {
    fn handle(&self, restored: usize) -> AgentHandle {
        AgentHandle {
            agent: self.agent.clone(),
            restored,
            user: Arc::clone(&self.users),
        }
    }

    /// Flushes and closes the session, forgets its rule controls in memory (the next
    /// start or reader loads them again), then releases the lease (even when the flush
    /// failed: nothing more will be written); the first failure is returned.
    async fn shut_down(self, host: &Host) -> Result<(), AppError> {
        let id = self.agent.session().id().clone();
        let flushed = self.agent.session().flush().await;
        let closed = close_session(host, &id).await;
        drop(self.agent);
        let released = self.lease.release().await;
        tracing::debug!(session = %id, "session actor stopped");
        flushed.map_err(|error| AppError::Session(error.into()))?;
        closed?;
        released
    }
}

/// Closes the open session `id` (flushed, its projections checkpointed, observers told
/// it closed) and forgets its rule controls in memory (the next start or reader loads
/// them again): what stopping or replacing an actor leaves behind.
async fn close_session(host: &Host, id: &SessionId) -> Result<(), AppError> {
    let closed = host.sessions().close(id).await;
    host.controls().unload(id);
    Ok(closed?)
}

/// Stops actor `number` of `id` once it has been unused (no handle, no turn, no new
/// event) for a whole idle period; ends with the registry or the actor.
async fn watch_idle(shared: Weak<Shared>, id: SessionId, number: u64) {
    loop {
        // Only weak references while waiting, so the registry and the slot can go.
        let (agent, idle, slot) = {
            let Some(shared) = shared.upgrade() else {
                return;
            };
            let Some(slot) = shared
                .slots
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .get(&id)
                .cloned()
            else {
                return;
            };
            let agent = match slot.lock().await.as_ref() {
                Some(actor) if actor.number == number => actor.agent.clone(),
                _ => return,
            };
            (agent, shared.idle, Arc::downgrade(&slot))
        };
        agent.when_idle().await;
        let head = agent.session().head();
        drop(agent);
        tokio::time::sleep(idle).await;
        let (Some(shared), Some(slot)) = (shared.upgrade(), slot.upgrade()) else {
            return;
        };
        let mut running = slot.lock().await;
        let stop = match running.as_ref() {
            Some(actor) if actor.number == number => {
                Arc::strong_count(&actor.users) == 1
                    && !actor.agent.is_busy()
                    && actor.agent.session().head() == head
            }
            _ => return,
        };
        if stop && let Some(actor) = running.take() {
            if let Err(error) = actor.shut_down(&shared.host).await {
                tracing::warn!(session = %id, %error, "stopping an idle actor failed");
            }
            shared.forget(&id, &slot);
            return;
        }
    }
}
