//! [`Session`]: the one writer of a session's log (spec H-LOG-4, H-LOG-5, H-STORE-5/6).
//!
//! An append is synchronous and cancellation-safe: it checks the event, runs the
//! validators, commits it to memory, hands it to the store (which orders it at once)
//! and runs the synchronous observers, all under the session's lock. Durability is
//! awaited separately with [`Session::flush`] (or [`Session::append_durable`]): the
//! store commits queued appends together, so many appends share one fsync. Under
//! [`Durability::PerAppend`] (`[store] durability = "per-append"`, H-STORE-5) the
//! append itself waits for its commit before it returns, so nothing an append returned
//! is lost to a crash.

use std::cell::RefCell;
use std::collections::{HashMap, VecDeque};
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::task::{Context, Poll, Waker};

use ccare_core::{Clock, Event, EventDraft, SessionId};
use ccare_store::{Durability, SessionRecord, Store, StoreError, StoredEvent, Ticket};
use parking_lot::ReentrantMutex;

use crate::error::AppendError;
use crate::log::SessionLog;
use crate::observe::Lifecycle;
use crate::on_demand::{OnDemandBroadcast, Subscription};
use crate::projection::{
    AnyState, Checkpoint, PROJECTION_DOMAIN, Projection, ProjectionError, Slot,
};
use crate::registry::Registry;
use crate::status::SessionStatus;
use crate::validate::run_check;
use crate::view::DerivedView;

/// How many events pass between automatic projection checkpoints (H-PROJ-3).
pub const CHECKPOINT_EVERY: u64 = 512;

/// Capacity of the broadcast of committed events; a subscriber further behind lags and
/// catches up from the log. Its slots exist while someone subscribes (about 10 KB), and
/// a turn commits tens of events, so 256 keeps a reader a few turns behind.
const BROADCAST_CAPACITY: usize = 256;

static NEXT_INSTANCE: AtomicU64 = AtomicU64::new(1);

thread_local! {
    /// Sessions whose validators or observers are running on this thread.
    static DISPATCHING: RefCell<Vec<u64>> = const { RefCell::new(Vec::new()) };
}

struct DispatchGuard(u64);

impl DispatchGuard {
    fn enter(instance: u64) -> Self {
        DISPATCHING.with(|stack| stack.borrow_mut().push(instance));
        Self(instance)
    }
}

impl Drop for DispatchGuard {
    fn drop(&mut self) {
        DISPATCHING.with(|stack| {
            let mut stack = stack.borrow_mut();
            if let Some(position) = stack.iter().rposition(|instance| *instance == self.0) {
                stack.remove(position);
            }
        });
    }
}

fn is_dispatching(instance: u64) -> bool {
    DISPATCHING.with(|stack| stack.borrow().contains(&instance))
}

/// The session's header, as stored.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SessionHeader {
    /// The session id.
    pub id: SessionId,
    /// Creation time, epoch ms.
    pub created_ms: i64,
    /// The session it was forked from.
    pub parent: Option<SessionId>,
    /// How many events it inherited.
    pub seed_length: Option<u64>,
    /// Free-form metadata (a JSON object's text).
    pub meta_json: String,
    /// This store's incarnation of it.
    pub incarnation: String,
}

impl From<SessionRecord> for SessionHeader {
    fn from(record: SessionRecord) -> Self {
        Self {
            id: record.id,
            created_ms: record.created_ms,
            parent: record.parent,
            seed_length: record.seed_length,
            meta_json: record.meta_json,
            incarnation: record.incarnation,
        }
    }
}

struct Shared {
    log: SessionLog,
    pending: VecDeque<Ticket<u64>>,
    fence: Option<StoreError>,
    /// The highest stored head an append of this session was acknowledged with (the
    /// loaded head to begin with): the events below it are durable.
    durable: u64,
    slots: HashMap<String, Slot>,
}

struct Inner {
    instance: u64,
    header: SessionHeader,
    store: Arc<dyn Store>,
    clock: Arc<dyn Clock>,
    registry: Arc<Registry>,
    durability: Durability,
    shared: ReentrantMutex<RefCell<Shared>>,
    events: OnDemandBroadcast<Arc<Event>>,
    /// Held by the one flush that waits for the tickets it took from `pending`: a
    /// concurrent flush waits its turn instead of finding `pending` empty and
    /// returning before those writes are durable.
    flushing: tokio::sync::Mutex<()>,
    /// Told when a flush ends, so [`Session::flush_within`] waits for someone else's
    /// flush instead of ending the store's group with its own.
    flushed: tokio::sync::Notify,
}

/// An open session: a cheap, cloneable handle.
#[derive(Clone)]
pub struct Session {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for Session {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter
            .debug_struct("Session")
            .field("id", &self.inner.header.id)
            .field("head", &self.head())
            .finish()
    }
}

impl Session {
    pub(crate) fn from_log(
        header: SessionHeader,
        log: SessionLog,
        store: Arc<dyn Store>,
        clock: Arc<dyn Clock>,
        registry: Arc<Registry>,
        durability: Durability,
    ) -> Self {
        let events = OnDemandBroadcast::new(BROADCAST_CAPACITY);
        Self {
            inner: Arc::new(Inner {
                instance: NEXT_INSTANCE.fetch_add(1, Ordering::Relaxed),
                header,
                store,
                clock,
                registry,
                durability,
                shared: ReentrantMutex::new(RefCell::new(Shared {
                    durable: log.head(),
                    log,
                    pending: VecDeque::new(),
                    fence: None,
                    slots: HashMap::new(),
                })),
                events,
                flushing: tokio::sync::Mutex::new(()),
                flushed: tokio::sync::Notify::new(),
            }),
        }
    }

    /// The session id.
    pub fn id(&self) -> &SessionId {
        &self.inner.header.id
    }

    /// The stored header.
    pub fn header(&self) -> &SessionHeader {
        &self.inner.header
    }

    /// The number of events (the next seq).
    pub fn head(&self) -> u64 {
        self.with_log(SessionLog::head)
    }

    /// How many of this session's events are known durable: the highest head the
    /// store acknowledged one of its appends with. For a fenced session these are the
    /// events that will ever be stored by it (its memory may hold more, which the store
    /// refused); the store's own head may be further on once a reopened session of the
    /// same id appended.
    pub fn durable_head(&self) -> u64 {
        let guard = self.inner.shared.lock();
        let mut shared = guard.borrow_mut();
        drain_settled(&mut shared);
        shared.durable
    }

    /// The head a reader of the session counts: [`Session::head`], or, once a store
    /// error fenced it, [`Session::durable_head`] (the events in memory past it were
    /// refused and will never be stored or sent).
    pub fn kept_head(&self) -> u64 {
        let guard = self.inner.shared.lock();
        let mut shared = guard.borrow_mut();
        drain_settled(&mut shared);
        if shared.fence.is_some() {
            shared.durable
        } else {
            shared.log.head()
        }
    }

    /// Reads the in-memory log under the session's lock. Safe to call from observers.
    pub fn with_log<T>(&self, read: impl FnOnce(&SessionLog) -> T) -> T {
        let guard = self.inner.shared.lock();
        let shared = guard.borrow();
        read(&shared.log)
    }

    /// The derived model view (H-SURF-4), cached until the log changes.
    pub fn derived_view(&self) -> DerivedView {
        let guard = self.inner.shared.lock();
        let mut shared = guard.borrow_mut();
        shared.log.derived_view()
    }

    /// The event at `seq`, shadowed or not.
    pub fn event_at(&self, seq: u64) -> Option<Arc<Event>> {
        self.with_log(|log| log.event_at(seq).cloned())
    }

    /// A receiver of every event committed from now on. A receiver that falls more than
    /// 256 events behind gets `Lagged` and should re-read from the log. It never gets
    /// `Closed`: it keeps the channel open.
    pub fn subscribe(&self) -> Subscription<Arc<Event>> {
        self.inner.events.subscribe()
    }

    /// The store error that fenced this session, if any (H-STORE-6).
    pub fn fence(&self) -> Option<StoreError> {
        let guard = self.inner.shared.lock();
        let mut shared = guard.borrow_mut();
        drain_settled(&mut shared);
        shared.fence.clone()
    }

    /// Whether `other` is a clone of this handle (the same open session, not merely the
    /// same id).
    pub(crate) fn same_handle(&self, other: &Session) -> bool {
        Arc::ptr_eq(&self.inner, &other.inner)
    }

    /// Whether the session takes appends, or the store error that fenced it (H-STORE-6).
    pub fn status(&self) -> SessionStatus {
        match self.fence() {
            None => SessionStatus::Writable,
            Some(cause) => SessionStatus::Fenced { cause },
        }
    }

    /// Appends `draft`, returning the committed event. The event is in memory and queued
    /// in the store; await [`Session::flush`] for durability. Under
    /// [`Durability::PerAppend`] the call blocks until the store has committed the
    /// event; a write error then fences the session and is returned (as
    /// [`AppendError::Fenced`], before any observer sees the event).
    pub fn append(&self, draft: EventDraft) -> Result<Arc<Event>, AppendError> {
        let inner = &*self.inner;
        let session = || inner.header.id.clone();
        if is_dispatching(inner.instance) {
            return Err(AppendError::Reentrant { session: session() });
        }
        let guard = inner.shared.lock();
        let event = {
            let mut shared = guard.borrow_mut();
            drain_settled(&mut shared);
            if let Some(cause) = &shared.fence {
                return Err(AppendError::Fenced {
                    session: session(),
                    cause: cause.clone(),
                });
            }
            let seq = shared.log.head();
            let (event, data) = Event::encode_keeping_data(seq, inner.clock.now_ms(), draft)
                .map_err(|error| match error {
                    ccare_core::EventError::NonLossless { error, .. } => AppendError::NonLossless {
                        session: session(),
                        error,
                    },
                    other => AppendError::Event {
                        session: session(),
                        error: other,
                    },
                })?;
            // H-EVT-1: a writer must register its types; only a *load* keeps unknown
            // ignorable events (H-EVT-2), which `prepare` allows for replay.
            if !inner.registry.knows(event.kind()) {
                return Err(AppendError::UnregisteredType {
                    session: session(),
                    kind: event.kind().to_owned(),
                });
            }
            let candidate = shared.log.prepare_encoded(event, data, &inner.registry)?;
            {
                let _dispatch = DispatchGuard::enter(inner.instance);
                for validator in inner.registry.validators().iter() {
                    let Err(veto) = run_check(validator.as_ref(), &shared.log, &candidate) else {
                        continue;
                    };
                    return Err(AppendError::Vetoed {
                        session: session(),
                        seq,
                        validator: validator.name().to_owned(),
                        message: veto.message,
                    });
                }
            }
            let event = shared.log.apply(candidate);
            let row = StoredEvent {
                seq,
                json: event.clone().into(),
            };
            match inner.durability {
                Durability::Group => {
                    let ticket = inner.store.append(&inner.header.id, seq, vec![row]);
                    shared.pending.push_back(ticket);
                }
                Durability::PerAppend => {
                    let ticket = inner.store.append_awaited(&inner.header.id, seq, vec![row]);
                    match ccare_store::wait_blocking(ticket) {
                        Ok(head) => shared.durable = shared.durable.max(head),
                        Err(cause) => {
                            shared.fence.get_or_insert(cause.clone());
                            return Err(AppendError::Fenced {
                                session: session(),
                                cause,
                            });
                        }
                    }
                }
            }
            if (seq + 1).is_multiple_of(CHECKPOINT_EVERY) {
                checkpoint_slots(inner, &mut shared);
            }
            event
        };
        {
            let _dispatch = DispatchGuard::enter(inner.instance);
            for observer in inner.registry.observers().iter() {
                let outcome = catch_unwind(AssertUnwindSafe(|| {
                    observer.on_event(&inner.header.id, &event)
                }));
                let failure = match outcome {
                    Ok(Ok(())) => continue,
                    Ok(Err(error)) => error.0,
                    Err(_) => "observer panicked".to_owned(),
                };
                tracing::warn!(
                    observer = observer.name(),
                    session = %inner.header.id,
                    seq = event.seq(),
                    error = %failure,
                    "observer failed"
                );
            }
            // No subscriber is not an error.
            inner.events.send_with(|| event.clone());
        }
        drop(guard);
        Ok(event)
    }

    /// Appends and waits until the event is durable.
    pub async fn append_durable(&self, draft: EventDraft) -> Result<Arc<Event>, AppendError> {
        let event = self.append(draft)?;
        self.flush().await.map_err(|cause| AppendError::Fenced {
            session: self.id().clone(),
            cause,
        })?;
        Ok(event)
    }

    /// Waits until every event appended so far is durable. A write error of this
    /// session fences it and is returned (H-STORE-4, H-STORE-6); another writer's
    /// error that the store reports is not this session's fence. With nothing
    /// unacknowledged it returns at once, without a store call. Flushes of one session
    /// take turns: one that finds nothing queued while another waits for the writes it
    /// took waits too, so every caller sees its earlier appends durable (the event
    /// stream sends an event only after such a flush, ACT-4).
    pub async fn flush(&self) -> Result<(), StoreError> {
        // One flush at a time: tickets another flush took are not in `pending`, and
        // "nothing pending" means "all durable" only once that flush is done.
        let _turn = FlushTurn {
            turn: Some(self.inner.flushing.lock().await),
            flushed: &self.inner.flushed,
        };
        let (mut taken, flushed) = {
            let guard = self.inner.shared.lock();
            let mut shared = guard.borrow_mut();
            // Writes the store already committed (with another writer's group, say)
            // need no flush of their own.
            drain_settled(&mut shared);
            if let Some(fence) = &shared.fence {
                return Err(fence.clone());
            }
            if shared.pending.is_empty() {
                // Every event appended so far was acknowledged durable (by an earlier
                // flush, by the store's commit, or awaited as it was appended): nothing
                // to wait for, and no round trip to the store (whose own flush would
                // also report other writers' unreported errors, not this session's).
                return Ok(());
            }
            let tickets = std::mem::take(&mut shared.pending);
            (
                Taken {
                    inner: &self.inner,
                    tickets,
                },
                self.inner.store.flush(),
            )
        };
        // The flush ends the store's group at once; this session's own write errors
        // come through its tickets, so an error the flush reports is another writer's
        // (a write whose ticket was dropped): logged, never a fence of this session.
        let flushed = flushed.await;
        let mut failure = None;
        let mut acknowledged = 0;
        while let Some(ticket) = taken.tickets.front_mut() {
            let settled = ticket.as_mut().await;
            taken.tickets.pop_front();
            match settled {
                Ok(head) => acknowledged = acknowledged.max(head),
                Err(error) => {
                    failure.get_or_insert(error);
                }
            }
        }
        {
            let guard = self.inner.shared.lock();
            let mut shared = guard.borrow_mut();
            shared.durable = shared.durable.max(acknowledged);
        }
        if let (Err(other), None) = (&flushed, &failure) {
            tracing::warn!(session = %self.id(), error = %other, "the store reported another writer's unreported write error; this session's writes are durable");
        }
        match failure {
            None => Ok(()),
            Some(error) => {
                let guard = self.inner.shared.lock();
                let mut shared = guard.borrow_mut();
                shared.fence.get_or_insert(error.clone());
                Err(error)
            }
        }
    }

    /// Makes a write made for this session outside its log (its queued creation, its
    /// lease claim) part of what its next flush waits for, in call order with its
    /// appends: until it is durable the session does not read as durable, and its
    /// failure fences the session as a failed append's would (H-STORE-6).
    pub fn include_write<T: Send + 'static>(&self, write: Ticket<T>) {
        let guard = self.inner.shared.lock();
        guard
            .borrow_mut()
            .pending
            .push_back(Box::pin(async move { write.await.map(|_| 0) }));
    }

    /// [`Session::flush`] for a reader that needs the events appended so far durable but
    /// is in no hurry to make them so: the appender nearly always flushes them itself a
    /// moment later (the kernel before each model request and at each turn's end), and
    /// a flush of the reader's own would end the store's group early, splitting what
    /// would commit together (one fsync more). So it first waits up to `grace` for the
    /// session's writes to be durable through someone else's flush (or through the
    /// store's own commit, which it looks for after each flush), and only then flushes
    /// itself. Returns as [`Session::flush`] does; never sooner than the writes are
    /// durable.
    pub async fn flush_within(&self, grace: std::time::Duration) -> Result<(), StoreError> {
        let deadline = tokio::time::Instant::now() + grace;
        loop {
            // Registered before the check, so a flush that ends after it is not missed.
            let ended = self.inner.flushed.notified();
            tokio::pin!(ended);
            ended.as_mut().enable();
            if self.durable_now()? {
                return Ok(());
            }
            if tokio::time::timeout_at(deadline, ended).await.is_err() {
                return self.flush().await;
            }
        }
    }

    /// Whether every event appended so far is known durable (its ticket resolved),
    /// with no flush waiting for tickets it took; the fence when the session is fenced.
    fn durable_now(&self) -> Result<bool, StoreError> {
        // A flush in progress holds tickets that are in no `pending`.
        let Ok(_turn) = self.inner.flushing.try_lock() else {
            return Ok(false);
        };
        let guard = self.inner.shared.lock();
        let mut shared = guard.borrow_mut();
        drain_settled(&mut shared);
        match &shared.fence {
            Some(fence) => Err(fence.clone()),
            None => Ok(shared.pending.is_empty()),
        }
    }

    /// The state of projection `P` at the head, folding lazily from the last known
    /// position (restored from a checkpoint on first use, H-PROJ-2/3).
    pub async fn state_of<P: Projection>(
        &self,
        key: &str,
    ) -> Result<Arc<P::State>, ProjectionError> {
        let projection = self
            .inner
            .registry
            .projection(key)
            .ok_or_else(|| ProjectionError::Unknown(key.to_owned()))?;
        let needs_restore = {
            let guard = self.inner.shared.lock();
            let shared = guard.borrow();
            !shared.slots.contains_key(key)
        };
        if needs_restore {
            let mut slot = Slot::fresh(projection.clone());
            let stored = self
                .inner
                .store
                .kv_get(PROJECTION_DOMAIN, &checkpoint_key(self.id(), key))
                .await
                .ok()
                .flatten();
            if let Some(entry) = stored {
                if let Ok(checkpoint) = serde_json::from_slice::<Checkpoint>(&entry.value) {
                    let head = self.head();
                    slot.restore(
                        checkpoint,
                        entry.version,
                        &self.inner.header.incarnation,
                        head,
                    );
                } else {
                    slot.kv_version = Some(entry.version);
                }
            }
            let guard = self.inner.shared.lock();
            let mut shared = guard.borrow_mut();
            shared.slots.entry(key.to_owned()).or_insert(slot);
        }
        let guard = self.inner.shared.lock();
        let mut shared = guard.borrow_mut();
        let shared = &mut *shared;
        let slot = shared
            .slots
            .get_mut(key)
            .ok_or_else(|| ProjectionError::Unknown(key.to_owned()))?;
        slot.catch_up(shared.log.events());
        if let Some(seq) = slot.failed_at {
            return Err(ProjectionError::Failed {
                key: key.to_owned(),
                seq,
            });
        }
        let state: AnyState = slot.state.clone();
        state
            .downcast::<P::State>()
            .map_err(|_| ProjectionError::WrongType(key.to_owned()))
    }

    /// Writes a checkpoint of every projection in use (best-effort) and waits for it.
    ///
    /// Only durable events are checkpointed: the events appended so far are flushed
    /// first, and a fenced session (whose memory may hold an event the store refused,
    /// whose seq a reopened session gives to another event) checkpoints nothing and
    /// returns its fence (H-STORE-6). A projection folded past those events (by an
    /// append made meanwhile) keeps its older checkpoint.
    pub async fn checkpoint_projections(&self) -> Result<(), StoreError> {
        self.flush().await?;
        {
            let guard = self.inner.shared.lock();
            checkpoint_slots(&self.inner, &mut guard.borrow_mut());
        }
        self.flush().await
    }

    /// Flushes, checkpoints projections and tells observers the session closed.
    pub async fn close(&self) -> Result<(), StoreError> {
        let flushed = self.checkpoint_projections().await;
        for observer in self.inner.registry.observers().iter() {
            let notice = Lifecycle::Closed(self.id().clone());
            if let Ok(Err(error)) =
                catch_unwind(AssertUnwindSafe(|| observer.on_lifecycle(&notice)))
            {
                tracing::warn!(observer = observer.name(), session = %self.id(), error = %error, "observer failed on close");
            }
        }
        flushed
    }
}

fn checkpoint_key(session: &SessionId, projection: &str) -> String {
    format!("{session}/{projection}")
}

/// Folds every slot through the events known durable ([`Shared::durable`]: one whose
/// write then fails would be restored after a reopen gives its seq to another event,
/// H-STORE-6) and queues a checkpoint for the ones that moved; a slot already folded
/// past them is left as it is.
fn checkpoint_slots(inner: &Inner, shared: &mut Shared) {
    drain_settled(shared);
    let end = shared.durable;
    let events = shared.log.events();
    let events = usize::try_from(end).map_or(events, |end| events.get(..end).unwrap_or(events));
    for (key, slot) in shared.slots.iter_mut() {
        if slot.next_seq > end {
            continue;
        }
        slot.catch_up(events);
        if slot.checkpointed_seq == Some(slot.next_seq) {
            continue;
        }
        let Some(checkpoint) = slot.checkpoint(&inner.header.incarnation) else {
            continue;
        };
        let Ok(bytes) = serde_json::to_vec(&checkpoint) else {
            continue;
        };
        // Best-effort: a lost race leaves a stale checkpoint, which the next restore
        // refolds from (its seq is behind the head, never ahead of it).
        let _ticket = inner.store.kv_cas(
            PROJECTION_DOMAIN,
            &checkpoint_key(&inner.header.id, key),
            slot.kv_version,
            Some(bytes),
        );
        slot.kv_version = Some(slot.kv_version.map_or(1, |version| version + 1));
        slot.checkpointed_seq = Some(slot.next_seq);
    }
}

/// A flush's turn ([`Inner::flushing`]): on drop, however the flush ended, the turn is
/// released first, then the readers waiting in [`Session::flush_within`] are told (a
/// reader told while the turn was still held would find the flush still running).
struct FlushTurn<'a> {
    turn: Option<tokio::sync::MutexGuard<'a, ()>>,
    flushed: &'a tokio::sync::Notify,
}

impl Drop for FlushTurn<'_> {
    fn drop(&mut self) {
        drop(self.turn.take());
        self.flushed.notify_waiters();
    }
}

/// The tickets a flush took from `pending`. A flush dropped before they all resolved
/// (its caller gave up waiting) puts the rest back at the front, in order, so the next
/// flush waits for them: dropping a flush never makes a write look durable.
struct Taken<'a> {
    inner: &'a Inner,
    tickets: VecDeque<Ticket<u64>>,
}

impl Drop for Taken<'_> {
    fn drop(&mut self) {
        if self.tickets.is_empty() {
            return;
        }
        let guard = self.inner.shared.lock();
        let mut shared = guard.borrow_mut();
        while let Some(ticket) = self.tickets.pop_back() {
            shared.pending.push_front(ticket);
        }
    }
}

/// Pops tickets that have already resolved; the first failure fences the session.
fn drain_settled(shared: &mut Shared) {
    let mut context = Context::from_waker(Waker::noop());
    while let Some(front) = shared.pending.front_mut() {
        match front.as_mut().poll(&mut context) {
            Poll::Pending => break,
            Poll::Ready(Ok(head)) => {
                shared.pending.pop_front();
                shared.durable = shared.durable.max(head);
            }
            Poll::Ready(Err(error)) => {
                shared.pending.pop_front();
                shared.fence.get_or_insert(error);
            }
        }
    }
}
