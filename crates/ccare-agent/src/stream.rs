//! One ordered stream out of an agent (spec ACT-4): [`Agent::subscribe_from`].
//!
//! A per-subscriber pump task merges three sources into one order: the session's
//! committed events (read back from the in-memory log by seq, so a lagging session
//! broadcast loses nothing), the agent's live chunks, and its idle transitions.
//! Events are sent only once durable ([`ccare_session::Session::flush_within`]: the
//! kernel's own flushes, or the pump's after a grace), so a subscriber never sees an
//! event a crash could take back. A chunk is tagged with the seq of the last event
//! committed before it was streamed, and sent right after that event. A subscriber
//! whose bounded channel fills up gets [`StreamItem::Lagged`] after the items it was
//! sent, and resubscribing from its `resume_from` continues with no gap and no
//! duplicate.

use std::collections::VecDeque;
use std::sync::Arc;

use ccare_core::Event;
use ccare_session::{Session, Subscription};
use parking_lot::Mutex;
use tokio::sync::broadcast::error::{RecvError, TryRecvError};
use tokio::sync::{broadcast, mpsc};

use crate::agent::{Agent, LiveChunk};

/// How many items a subscriber of [`Agent::subscribe_from`] may fall behind before it
/// gets [`StreamItem::Lagged`].
pub const STREAM_CAPACITY: usize = 1024;

/// How long the pump waits for the kernel to make committed events durable before it
/// flushes them itself ([`ccare_session::Session::flush_within`]): what an event
/// nobody flushes can be delayed by, at most.
const FLUSH_GRACE: std::time::Duration = std::time::Duration::from_millis(2);

/// One item of an agent's ordered stream (ACT-4).
#[derive(Debug, Clone, PartialEq)]
pub enum StreamItem {
    /// A committed, durable event.
    Event(Arc<Event>),
    /// A streamed chunk; `after_seq` is the seq of the last event committed before it
    /// (the chunk belongs between that event and the next).
    Delta {
        /// The seq of the event this chunk follows.
        after_seq: u64,
        /// The chunk, with its turn, step and call.
        live: LiveChunk,
    },
    /// A turn is waiting for caller-executed tool results (ACT-3); `call_ids` are the
    /// open calls. Defined for the awaiting-tools state; the kernel emits it once that
    /// state exists.
    AwaitingTools {
        /// The seq of the event this item follows.
        after_seq: u64,
        /// The calls still without a result.
        call_ids: Vec<String>,
    },
    /// The agent went idle: no turn runs and nothing waking is queued. Sent after the
    /// events of the turn that ended (its `turn/end` included).
    Idle {
        /// The seq of the event this item follows.
        after_seq: u64,
    },
    /// The subscriber fell behind and the stream ends here; subscribe again with
    /// `resume_from` to continue with no gap and no duplicate.
    Lagged {
        /// The cursor to pass to [`Agent::subscribe_from`]: the last event sent.
        resume_from: Option<u64>,
    },
}

/// A subscription to an agent's ordered stream (ACT-4). Dropping it stops its pump.
#[derive(Debug)]
pub struct EventStream {
    items: mpsc::Receiver<StreamItem>,
    lagged: Arc<Mutex<Option<Option<u64>>>>,
}

impl EventStream {
    /// The next item if one is ready now (to show what is left without waiting);
    /// `None` when nothing is ready, or after a [`StreamItem::Lagged`].
    pub fn try_next(&mut self) -> Option<StreamItem> {
        match self.items.try_recv() {
            Ok(item) => Some(item),
            Err(mpsc::error::TryRecvError::Empty) => None,
            Err(mpsc::error::TryRecvError::Disconnected) => self
                .lagged
                .lock()
                .take()
                .map(|resume_from| StreamItem::Lagged { resume_from }),
        }
    }

    /// The next item; `None` once the agent is gone and everything was sent, or after
    /// a [`StreamItem::Lagged`].
    pub async fn next(&mut self) -> Option<StreamItem> {
        match self.items.recv().await {
            Some(item) => Some(item),
            None => self
                .lagged
                .lock()
                .take()
                .map(|resume_from| StreamItem::Lagged { resume_from }),
        }
    }
}

/// A transient item as the kernel sends it, tagged with the seq it follows.
#[derive(Debug, Clone)]
pub(crate) struct Signal {
    after_seq: u64,
    kind: SignalKind,
}

/// Which transient item.
#[derive(Debug, Clone)]
pub(crate) enum SignalKind {
    /// The driver went idle.
    Idle,
    /// A turn waits for caller-executed results of these calls (ACT-3).
    AwaitingTools(Vec<String>),
}

impl Signal {
    fn item(self) -> StreamItem {
        let after_seq = self.after_seq;
        match self.kind {
            SignalKind::Idle => StreamItem::Idle { after_seq },
            SignalKind::AwaitingTools(call_ids) => StreamItem::AwaitingTools {
                after_seq,
                call_ids,
            },
        }
    }
}

impl Agent {
    /// Sends a transient item to the ordered stream's subscribers, after the last
    /// event committed so far.
    pub(crate) fn signal(&self, kind: SignalKind) {
        let after_seq = self.inner.session.head().saturating_sub(1);
        // No subscriber is not an error.
        let _ = self.inner.signals.send(Signal { after_seq, kind });
    }

    /// Tells the ordered stream's subscribers that the turn now waits for the
    /// caller-executed results of `call_ids` (ACT-3); for the awaiting-tools state,
    /// after its events are committed.
    pub(crate) fn signal_awaiting_tools(&self, call_ids: Vec<String>) {
        self.signal(SignalKind::AwaitingTools(call_ids));
    }

    /// Every committed event after `after` (all of them with `None`), replayed from
    /// the log and then live, each once it is durable, with the agent's chunks and
    /// idle transitions in the same order (ACT-4). Must be called inside a Tokio
    /// runtime (it spawns the subscriber's pump).
    pub fn subscribe_from(&self, after: Option<u64>) -> EventStream {
        self.subscribe_with_capacity(after, STREAM_CAPACITY)
    }

    /// [`Agent::subscribe_from`] with a channel of `capacity` items (at least one):
    /// a slower reader gets [`StreamItem::Lagged`] sooner.
    pub fn subscribe_with_capacity(&self, after: Option<u64>, capacity: usize) -> EventStream {
        let (sender, items) = mpsc::channel(capacity.max(1));
        let lagged = Arc::new(Mutex::new(None));
        let pump = Pump {
            session: self.inner.session.clone(),
            events: self.inner.session.subscribe(),
            live: self.inner.live.subscribe(),
            signals: self.inner.signals.subscribe(),
            next_seq: after.map_or(0, |seq| seq.saturating_add(1)),
            last_sent: after,
            deltas: VecDeque::new(),
            pending_signals: VecDeque::new(),
            sender,
            lagged: Arc::clone(&lagged),
        };
        tokio::spawn(pump.run(self.inner.retired.subscribe()));
        EventStream { items, lagged }
    }
}

/// Why the pump stopped.
enum Stop {
    /// The subscriber is gone or lagged.
    Subscriber,
}

struct Pump {
    session: Session,
    /// Never `Closed` (see [`Subscription`]): the agent's end shows on `signals`.
    events: Subscription<Arc<Event>>,
    live: Subscription<Arc<LiveChunk>>,
    signals: broadcast::Receiver<Signal>,
    /// The next event seq to send.
    next_seq: u64,
    /// The last event sent (the resume cursor).
    last_sent: Option<u64>,
    /// Chunks taken from the live channel whose event has not been sent yet.
    deltas: VecDeque<(u64, LiveChunk)>,
    /// Transient items taken from the signal channel whose event has not been sent.
    pending_signals: VecDeque<Signal>,
    sender: mpsc::Sender<StreamItem>,
    lagged: Arc<Mutex<Option<Option<u64>>>>,
}

impl Pump {
    /// Pumps until the subscriber goes or lags, or the agent ends or `retired` turns
    /// true ([`Agent::retire`]): then it sends what is durable and stops.
    async fn run(mut self, mut retired: tokio::sync::watch::Receiver<bool>) {
        let mut agent_alive = true;
        loop {
            if self.cycle().await.is_err() {
                return;
            }
            if !agent_alive {
                return;
            }
            tokio::select! {
                biased;
                () = self.sender.closed() => return,
                received = self.live.recv() => match received {
                    Ok(live) => self.take_delta(live),
                    Err(RecvError::Lagged(_)) => {
                        self.lag();
                        return;
                    }
                    Err(RecvError::Closed) => agent_alive = false,
                },
                received = self.events.recv() => {
                    // A wake-up only: events are read back from the log by seq.
                    if let Err(RecvError::Closed) = received {
                        agent_alive = false;
                    }
                }
                received = self.signals.recv() => match received {
                    Ok(signal) => self.take_signal(signal),
                    Err(RecvError::Lagged(_)) => {
                        self.lag();
                        return;
                    }
                    Err(RecvError::Closed) => agent_alive = false,
                },
                // An error is the agent gone, which ends the pump too.
                _ = retired.wait_for(|retired| *retired) => agent_alive = false,
            }
        }
    }

    /// Sends every event committed so far (once durable) and the chunks and transient
    /// items that belong between them.
    async fn cycle(&mut self) -> Result<(), Stop> {
        // The head first, then the chunks: every chunk tagged below the head was sent
        // before the head's last event was committed, so it is in the channel now.
        let head = self.session.head();
        loop {
            match self.live.try_recv() {
                Ok(live) => self.take_delta(live),
                Err(TryRecvError::Lagged(_)) => {
                    self.lag();
                    return Err(Stop::Subscriber);
                }
                Err(TryRecvError::Empty | TryRecvError::Closed) => break,
            }
        }
        loop {
            match self.signals.try_recv() {
                Ok(signal) => self.take_signal(signal),
                Err(TryRecvError::Lagged(_)) => {
                    self.lag();
                    return Err(Stop::Subscriber);
                }
                Err(TryRecvError::Empty | TryRecvError::Closed) => break,
            }
        }
        if head > self.next_seq {
            // Durable before sent (ACT-4), by the kernel's own flush when it comes
            // soon (it flushes before each request and at each turn's end): a flush of
            // the pump's would split the store's group. A failed flush fences the
            // session: what the store holds is durable and sent (a subscriber that
            // came late, or lagged, still gets it); the rest never commits.
            if self.session.flush_within(FLUSH_GRACE).await.is_err() {
                let durable = self.session.durable_head().min(head);
                self.send_events_until(durable)?;
                return self.send_after_fence();
            }
            self.send_events_until(head)?;
        }
        self.send_deltas_before(self.next_seq)
    }

    /// Sends the events from `next_seq` up to `end` (exclusive), each after the chunks
    /// and transient items that belong before it.
    fn send_events_until(&mut self, end: u64) -> Result<(), Stop> {
        if end <= self.next_seq {
            return Ok(());
        }
        let events = self.session.with_log(|log| {
            let start = usize::try_from(self.next_seq).unwrap_or(usize::MAX);
            let end = usize::try_from(end).unwrap_or(usize::MAX);
            log.events().get(start..end).map(<[_]>::to_vec)
        });
        for event in events.unwrap_or_default() {
            self.send_deltas_before(event.seq())?;
            let seq = event.seq();
            self.send(StreamItem::Event(event))?;
            self.last_sent = Some(seq);
            self.next_seq = seq + 1;
        }
        Ok(())
    }

    /// Once the session is fenced (H-STORE-6), the events from `next_seq` on will
    /// never be durable, so neither they nor the chunks after them are sent. The
    /// transient items that follow them (the agent going idle as the fenced turn
    /// stops) are sent after the last event that is, so a subscriber following the
    /// turn to its end is not left waiting for a `turn/end` that never commits.
    fn send_after_fence(&mut self) -> Result<(), Stop> {
        self.send_deltas_before(self.next_seq)?;
        self.deltas.clear();
        let last_durable = self.next_seq.saturating_sub(1);
        while let Some(signal) = self.pending_signals.pop_front() {
            let after_seq = signal.after_seq.min(last_durable);
            self.send(
                Signal {
                    after_seq,
                    kind: signal.kind,
                }
                .item(),
            )?;
        }
        Ok(())
    }

    /// Keeps a chunk until its event is sent, tagged with the seq it follows.
    fn take_delta(&mut self, live: Arc<LiveChunk>) {
        let live = Arc::unwrap_or_clone(live);
        let after_seq = live.after_seq;
        // A chunk from before the cursor belongs to events the subscriber skipped.
        if after_seq.saturating_add(1) >= self.next_seq {
            self.deltas.push_back((after_seq, live));
        }
    }

    /// Keeps a transient item until its event is sent.
    fn take_signal(&mut self, signal: Signal) {
        if signal.after_seq.saturating_add(1) >= self.next_seq {
            self.pending_signals.push_back(signal);
        }
    }

    /// Sends the kept chunks and transient items that follow events before `seq`, in
    /// order; at one position chunks come first (a transient item ends an activity).
    fn send_deltas_before(&mut self, seq: u64) -> Result<(), Stop> {
        loop {
            let delta = self.deltas.front().map(|(after_seq, _)| *after_seq);
            let signal = self.pending_signals.front().map(|signal| signal.after_seq);
            let item = match (delta, signal) {
                (Some(delta), signal)
                    if delta < seq && signal.is_none_or(|signal| delta <= signal) =>
                {
                    self.deltas
                        .pop_front()
                        .map(|(after_seq, live)| StreamItem::Delta { after_seq, live })
                }
                (_, Some(signal)) if signal < seq => {
                    self.pending_signals.pop_front().map(Signal::item)
                }
                _ => None,
            };
            let Some(item) = item else {
                return Ok(());
            };
            self.send(item)?;
        }
    }

    fn send(&mut self, item: StreamItem) -> Result<(), Stop> {
        match self.sender.try_send(item) {
            Ok(()) => Ok(()),
            Err(mpsc::error::TrySendError::Full(_)) => {
                self.lag();
                Err(Stop::Subscriber)
            }
            Err(mpsc::error::TrySendError::Closed(_)) => Err(Stop::Subscriber),
        }
    }

    /// Marks the subscriber lagged at the last event sent; the pump then stops.
    fn lag(&mut self) {
        *self.lagged.lock() = Some(self.last_sent);
    }
}
