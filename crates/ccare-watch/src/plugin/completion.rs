//! The completion observer (spec watch-rules-ui.md §5, CO-1 .. CO-7): when a reply
//! uses completion wording ("All done.", "任务完成"), the next conversation request on
//! the same route carries a calm, request-only observation (MV-DONE) that asks the
//! model to check the scope against the request and continue any authorised work.
//!
//! # One path for the live case and the restart (CO-5, CO-7)
//!
//! Everything runs in one catch-up over the session log above the session's processed
//! watermark: as the agent goes idle (an idle hook, so the reply that just ended is
//! observed while nothing waits for it), and again in a pre-step hook before each
//! request, which finds nothing left unless the idle catch-up could not run or failed
//! (then it replays the same transitions and reports the failure):
//! - `assistant/attempt` (no output) and interrupted `assistant/message` → recover;
//! - a committed, non-interrupted `assistant/message` → its text blocks (never
//!   reasoning or tool calls), unavailable over `max_observed_chars`, else CO-1 →
//!   observe → (its write acknowledged) settle → publish the notice;
//! - a message whose occurrence is already the state's `completedOccurrenceId` (settled,
//!   then a crash before the notice was written) → publish only; publishing is
//!   idempotent (one notice per (session, eventSeq)).
//!
//! Every transition's write is awaited before the next step, and the watermark is
//! written last (queued, not awaited; only when something above it was processed), so a
//! crash anywhere replays the same transitions (CO-4 makes them idempotent). The log
//! is the only input: a committed non-interrupted message is by construction a
//! dispatched, completed request at that `eventSeq`, so no other plugin's journal is
//! read (DESIGN.md §3). The clock of each transition is the event's own time, so the
//! cooldown measures the time between replies, whenever they are processed. Storage
//! errors fail the hook (the turn ends `HOOK_FAILED` naming the plugin); nothing falls
//! back to memory.
//!
//! # Delivery (CO-6)
//!
//! A request segment adds the newest eligible notice of the session for the request's
//! exact route (read by a request hook from the call being prepared) as segment
//! `completion-observation` v1, of a reply above the rule's `sinceSeq` (a notice
//! published as the agent went idle is not delivered once the rule was turned on again
//! past its reply). `reserve` counts a delivery (`delivery-unknown`),
//! `release` restores the notice, `dispatched` marks it `dispatched` and supersedes the
//! session's other open notices. These callbacks are synchronous, so their writes are
//! queued; a failure is reported by the next pre-step.
//!
//! The writes queued and not awaited (the watermark, the delivery edits) are kept per
//! session, and a catch-up first awaits the session's own: they are long settled by
//! the next request, so a busy server's catch-up waits for no other session's write
//! (a flush of the shared domains would wait for a commit of every session's latest
//! watermark).

use std::collections::HashMap;
use std::sync::Arc;

use ccare_agent::controls::{ControlAction, ControlRule, ControlSource, Controls};
use ccare_agent::domains::{
    Domain, DomainError, DomainSpec, PluginDomains, TableSpec, WriteTicket,
};
use ccare_agent::{
    BoxFuture, HookContext, HookError, IdleHook, PluginScope, PreStepDecision, PreStepHook,
    PreStepInput, PreStepNext, RequestHook, RequestSegment,
};
use ccare_core::kinds::{ASSISTANT_ATTEMPT, ASSISTANT_MESSAGE, AssistantReply};
use ccare_core::{ContentBlock, Extra, Locale, Message, PluginSource, SessionId, Source};
use ccare_llm::{CallConfig, Llm, Purpose};
use ccare_session::{CreatedHere, Session};
use parking_lot::Mutex;
use serde_json::{Value, json};
use tokio::sync::OnceCell;

use crate::completion::{
    CompletionConfig, CompletionNotice, CompletionState, NoticeStatus, ObserveOutcome,
    PendingCompletion, SOURCE_ASSISTANT, SettleOutcome, committed_occurrence, detect_completion,
    newest_eligible, notice_key, state_key,
};

/// The controls source of the observer (CO-2; the spec's `{CARE}:completion`, named
/// after this plugin like the watch's own source).
pub const SOURCE_ID: &str = "stream-watch:completion";
/// The observer's one rule.
pub const RULE: &str = "completion";
/// The rule's one action: send the observation.
pub const ACTION: &str = "notice";
/// The storage domain of the per-(session, source) state (CO-3).
pub const STATE_DOMAIN: &str = "context_care_completion";
/// The state table.
pub const STATE_TABLE: &str = "state";
/// The storage domain of the outbox (CO-6).
pub const NOTICES_DOMAIN: &str = "context_care_completion_notices";
/// The outbox table: one notice per (session, eventSeq).
pub const NOTICES_TABLE: &str = "notices";
/// The processed watermarks, one per session: `{sessionId, seq}`, the highest seq
/// processed.
pub const WATERMARKS_TABLE: &str = "watermarks";
/// The segment id of the notice (CO-6).
pub const SEGMENT_ID: &str = "completion-observation";
/// The segment version (CO-6).
pub const SEGMENT_VERSION: u32 = 1;
/// The source kind of the request-only notice.
pub const NOTICE_KIND: &str = "plugin:context-care:completion";
/// The notice's label (its `summary`).
pub const LABEL_DONE: &str = "Completion wording observed";

/// The controls catalog of the observer: rule `completion`, action `notice`, on by
/// default when `notifications` is set (CO-2).
pub fn completion_catalog(config: &CompletionConfig) -> ControlSource {
    let notice = ControlAction {
        default_enabled: config.notifications,
        ..ControlAction::new(ACTION)
    };
    ControlSource::new(SOURCE_ID, vec![ControlRule::new(RULE, vec![notice])])
}

pub use super::texts::done_notice;

/// Mounts the observer with the `completion` table of the plugin config (absent: the
/// spec's defaults).
pub(crate) fn mount(
    config: Option<&Value>,
    locale: Locale,
    scope: &mut PluginScope<'_>,
) -> Result<CompletionMemory, ccare_agent::MountError> {
    let config = match config {
        Some(table) => CompletionConfig::from_json(table)
            .map_err(|error| ccare_agent::MountError::Config(error.to_string()))?,
        None => CompletionConfig::default(),
    };
    scope.control_source(completion_catalog(&config))?;
    let observer = Arc::new(Observer {
        config,
        locale,
        controls: scope.controls(),
        llm: scope.llm(),
        domains: scope.domains(),
        stores: OnceCell::new(),
        sessions: Mutex::new(HashMap::new()),
        created: CreatedHere::default(),
        reservations: Mutex::new(HashMap::new()),
        failures: Mutex::new(Vec::new()),
    });
    scope.pre_step(Arc::new(CatchUp(Arc::clone(&observer))), false);
    scope.idle(Arc::new(IdleCatchUp(Arc::clone(&observer))));
    scope.request(Arc::new(RequestRoute(Arc::clone(&observer))));
    scope.request_segment(Arc::new(Outbox(Arc::clone(&observer))));
    scope.observer(Arc::new(Forget(Arc::clone(&observer))));
    Ok(CompletionMemory(observer))
}

/// A view of what a mounted observer holds in memory, for the plugin's accessor.
pub(crate) struct CompletionMemory(Arc<Observer>);

impl CompletionMemory {
    /// How many state and watermark rows memory holds: those of the sessions this
    /// process drives (the tables are on demand; a session's rows are loaded at its
    /// first catch-up and evicted once it closed).
    pub(crate) fn rows_in_memory(&self) -> usize {
        let Some(stores) = self.0.stores.get() else {
            return 0;
        };
        let state = stores
            .state
            .table(STATE_TABLE)
            .map_or(0, |table| table.count(""));
        let watermarks = stores
            .notices
            .table(WATERMARKS_TABLE)
            .map_or(0, |table| table.count(""));
        state + watermarks
    }
}

/// Forgets a closed session: its route, its catch-up lock and the writes it queued (a
/// server keeps state only for the sessions it drives), and once those writes settled,
/// its state and watermark rows leave memory unless it came back meanwhile. A queued
/// write that fails after that is left to the domain's next flush; the session's next
/// catch-up, in this process or another, loads its rows and replays from the stored
/// watermark (CO-4 makes that idempotent). Also notes a session created or forked
/// here, whose first catch-up then reads no rows ([`CreatedHere`]).
struct Forget(Arc<Observer>);

impl ccare_session::Observer for Forget {
    fn name(&self) -> &str {
        "stream-watch completion"
    }

    fn on_event(
        &self,
        _session: &SessionId,
        _event: &Arc<ccare_core::Event>,
    ) -> Result<(), ccare_session::ObserverError> {
        Ok(())
    }

    fn on_lifecycle(
        &self,
        notice: &ccare_session::Lifecycle,
    ) -> Result<(), ccare_session::ObserverError> {
        let session = match notice {
            ccare_session::Lifecycle::Created(session)
            | ccare_session::Lifecycle::Forked { session, .. } => {
                self.0.created.note(session);
                return Ok(());
            }
            ccare_session::Lifecycle::Closed(session) => session,
        };
        let entry = self.0.sessions.lock().remove(session);
        if let Some(entry) = entry.filter(|entry| entry.loaded)
            && let Ok(runtime) = tokio::runtime::Handle::try_current()
        {
            let observer = Arc::clone(&self.0);
            let session = session.clone();
            runtime.spawn(async move {
                for ticket in entry.queued {
                    // Its failure is the domain's next flush's to report.
                    let _settled = ticket.await;
                }
                observer.evict(&session);
            });
        }
        Ok(())
    }
}

/// Why the observer could not process a session.
#[derive(Debug, thiserror::Error)]
enum CompletionError {
    /// A storage domain failed.
    #[error(transparent)]
    Domain(#[from] DomainError),
    /// A stored record does not decode.
    #[error("{domain}: record {key} is corrupt: {detail}")]
    Corrupt {
        domain: &'static str,
        key: String,
        detail: String,
    },
}

/// The two open domains.
struct Stores {
    state: Domain,
    notices: Domain,
    /// The keys of each session's notices (a notice's key is a hash, so the table
    /// cannot be read by session): a request reads its session's few notices, never
    /// every notice the store ever kept.
    by_session: Mutex<HashMap<String, Vec<String>>>,
}

/// A reservation of a notice for one call, with what `release` restores.
struct Reservation {
    session: SessionId,
    key: String,
    status: NoticeStatus,
    deliveries: u32,
}

/// Per session: the route of the request being prepared, a lock that keeps two
/// catch-ups of one session apart, and the session's queued writes not yet awaited.
#[derive(Default)]
struct SessionEntry {
    route: Option<String>,
    lock: Arc<tokio::sync::Mutex<()>>,
    /// The watermark and notice writes queued for the session and not awaited; the
    /// next catch-up awaits them (and reports their failures) before it reads.
    queued: Vec<WriteTicket>,
    /// A failure of those writes an idle catch-up awaited, for the session's next
    /// pre-step to report.
    failed: Option<DomainError>,
    /// Its state and watermark rows are in memory (loaded at its first catch-up here).
    loaded: bool,
}

/// The shared state of a mounted observer.
struct Observer {
    config: CompletionConfig,
    locale: Locale,
    controls: Controls,
    llm: Arc<Llm>,
    domains: PluginDomains,
    stores: OnceCell<Stores>,
    sessions: Mutex<HashMap<SessionId, SessionEntry>>,
    /// Sessions created here and not caught up yet: they have no rows to load.
    created: CreatedHere,
    reservations: Mutex<HashMap<String, Reservation>>,
    /// Write errors of the synchronous delivery callbacks, reported by the next
    /// pre-step.
    failures: Mutex<Vec<DomainError>>,
}

/// One event the observer acts on.
enum Work {
    /// No committed output, or an interrupted one: recover.
    Recover,
    /// A committed, non-interrupted reply.
    Reply {
        seq: u64,
        time_ms: i64,
        route: String,
        text: String,
    },
}

fn decode<T: serde::de::DeserializeOwned>(
    domain: &'static str,
    key: &str,
    value: &Value,
) -> Result<T, CompletionError> {
    serde_json::from_value(value.clone()).map_err(|error| CompletionError::Corrupt {
        domain,
        key: key.to_owned(),
        detail: error.to_string(),
    })
}

fn encode<T: serde::Serialize>(value: &T) -> Value {
    serde_json::to_value(value).unwrap_or(Value::Null)
}

impl Observer {
    fn enabled(&self, session: &SessionId) -> bool {
        self.controls
            .decide(session, SOURCE_ID, RULE, ACTION)
            .is_enabled()
    }

    async fn open(&self) -> Result<&Stores, DomainError> {
        self.stores
            .get_or_try_init(|| async {
                let state = self
                    .domains
                    .open(
                        DomainSpec::new(STATE_DOMAIN, 1)
                            .table(TableSpec::new(STATE_TABLE).on_demand()),
                    )
                    .await?;
                let notices = self
                    .domains
                    .open(
                        DomainSpec::new(NOTICES_DOMAIN, 1)
                            .table(TableSpec::new(NOTICES_TABLE))
                            .table(TableSpec::new(WATERMARKS_TABLE).on_demand()),
                    )
                    .await?;
                // Every stored notice's key under its session, read once here; a
                // notice published later is added when its write is acknowledged.
                let mut by_session: HashMap<String, Vec<String>> = HashMap::new();
                for (key, record) in notices.table(NOTICES_TABLE)?.entries("") {
                    if let Some(session) = record.get("sessionId").and_then(Value::as_str) {
                        by_session.entry(session.to_owned()).or_default().push(key);
                    }
                }
                Ok(Stores {
                    state,
                    notices,
                    by_session: Mutex::new(by_session),
                })
            })
            .await
    }

    /// Processes the session's log above its watermark (CO-5, CO-7), then writes the
    /// new watermark. Reports write failures of earlier deliveries first.
    async fn catch_up(&self, session: &Session) -> Result<(), CompletionError> {
        let stores = self.open().await?;
        let failure = self.failures.lock().drain(..).next();
        if let Some(failure) = failure {
            return Err(failure.into());
        }
        let id = session.id();
        let lock = self.session_lock(id);
        let _serial = lock.lock().await;
        let failed = self
            .sessions
            .lock()
            .get_mut(id)
            .and_then(|entry| entry.failed.take());
        if let Some(failure) = failed {
            return Err(failure.into());
        }
        if let Some(failure) = self.settle_queued(id).await {
            return Err(failure.into());
        }
        self.keep_loaded(stores, id).await?;
        self.process_log(stores, session).await
    }

    /// Loads `session`'s state and watermark rows into memory the first time this
    /// process catches it up (both tables are on demand), reading nothing for a
    /// session created here (the store has no rows of it); the caller holds the
    /// session's catch-up lock.
    async fn keep_loaded(&self, stores: &Stores, session: &SessionId) -> Result<(), DomainError> {
        if self
            .sessions
            .lock()
            .get(session)
            .is_some_and(|entry| entry.loaded)
        {
            return Ok(());
        }
        if !self.created.take(session.as_str()) {
            let key = state_key(session.as_str(), SOURCE_ASSISTANT);
            stores.state.table(STATE_TABLE)?.load(&key).await?;
            stores.notices.table(WATERMARKS_TABLE)?.load(&key).await?;
        }
        self.sessions
            .lock()
            .entry(session.clone())
            .or_default()
            .loaded = true;
        Ok(())
    }

    /// Drops a closed session's state and watermark rows from memory, unless it came
    /// back (it has an entry again) meanwhile.
    fn evict(&self, session: &SessionId) {
        let sessions = self.sessions.lock();
        if sessions.contains_key(session) {
            return;
        }
        let Some(stores) = self.stores.get() else {
            return;
        };
        let key = state_key(session.as_str(), SOURCE_ASSISTANT);
        if let Ok(table) = stores.state.table(STATE_TABLE) {
            table.evict(&key);
        }
        if let Ok(table) = stores.notices.table(WATERMARKS_TABLE) {
            table.evict(&key);
        }
    }

    /// [`Observer::catch_up`] as the agent goes idle, so the reply that just ended
    /// is observed while nothing waits for it and the next request's pre-step finds
    /// nothing left to do. It reports nothing: a failure of the session's earlier
    /// writes is kept for its next pre-step to report (and logged, in case the session
    /// closes first), and a failure of its own work is logged and left to the pre-step,
    /// which replays the same idempotent transitions from the stored watermark (CO-4).
    async fn catch_up_idle(&self, session: &Session) {
        if !self.failures.lock().is_empty() {
            return;
        }
        let stores = match self.open().await {
            Ok(stores) => stores,
            Err(error) => {
                tracing::debug!(session = %session.id(), %error, "completion observer: idle catch-up left to the next request");
                return;
            }
        };
        let id = session.id();
        let lock = self.session_lock(id);
        let _serial = lock.lock().await;
        if let Some(failure) = self.settle_queued(id).await {
            tracing::warn!(session = %id, error = %failure, "completion observer: a queued write failed; the next request reports it");
            self.sessions.lock().entry(id.clone()).or_default().failed = Some(failure);
            return;
        }
        if let Err(error) = self.keep_loaded(stores, id).await {
            tracing::debug!(session = %id, %error, "completion observer: idle catch-up left to the next request");
            return;
        }
        if let Err(error) = self.process_log(stores, session).await {
            tracing::debug!(session = %id, %error, "completion observer: idle catch-up left to the next request");
        }
    }

    /// The lock that keeps two catch-ups of `session` apart.
    fn session_lock(&self, session: &SessionId) -> Arc<tokio::sync::Mutex<()>> {
        Arc::clone(
            &self
                .sessions
                .lock()
                .entry(session.clone())
                .or_default()
                .lock,
        )
    }

    /// Awaits the writes queued for `session` and not awaited yet (its earlier
    /// watermark and delivery edits, visible once settled); another session's writes
    /// are not waited for. Returns the first failure.
    async fn settle_queued(&self, session: &SessionId) -> Option<DomainError> {
        let queued = self
            .sessions
            .lock()
            .get_mut(session)
            .map(|entry| std::mem::take(&mut entry.queued))
            .unwrap_or_default();
        let mut failure = None;
        for ticket in queued {
            if let Err(error) = ticket.await {
                failure.get_or_insert(error);
            }
        }
        failure
    }

    /// Processes the log above the stored watermark and queues the new watermark; the
    /// caller holds the session's catch-up lock.
    async fn process_log(&self, stores: &Stores, session: &Session) -> Result<(), CompletionError> {
        let id = session.id();
        let watermarks = stores.notices.table(WATERMARKS_TABLE)?;
        let watermark_key = state_key(id.as_str(), SOURCE_ASSISTANT);
        let watermark = watermarks
            .get(&watermark_key)
            .and_then(|record| record.get("seq").and_then(Value::as_i64))
            .unwrap_or(-1);
        let start = usize::try_from(watermark.saturating_add(1)).unwrap_or(0);
        let (head, work) = session.with_log(|log| {
            let events = log.events();
            let work: Vec<Work> = events
                .get(start..)
                .unwrap_or_default()
                .iter()
                .filter_map(|event| match event.kind() {
                    ASSISTANT_ATTEMPT => Some(Work::Recover),
                    ASSISTANT_MESSAGE => {
                        let reply = event.decode_part::<AssistantReply>().ok()?;
                        Some(if reply.interrupted {
                            Work::Recover
                        } else {
                            Work::Reply {
                                seq: event.seq(),
                                time_ms: event.time_ms(),
                                route: format!("{}/{}", reply.provider, reply.model),
                                text: reply.message.joined_text("\n\n"),
                            }
                        })
                    }
                    _ => None,
                })
                .collect();
            (log.head(), work)
        });
        if work.is_empty() {
            // Nothing above the watermark to process: a replay from it finds the same
            // nothing, so it stays where it is (no write before this request).
            return Ok(());
        }
        for item in work {
            self.process(stores, id, item).await?;
        }
        let processed = i64::try_from(head).unwrap_or(i64::MAX) - 1;
        if processed > watermark {
            // Queued after the transitions above were acknowledged, and not awaited:
            // if it is lost, a replay redoes the same idempotent transitions (CO-4),
            // and a failure is reported by the next catch-up's flush.
            let ticket = watermarks.put(
                &watermark_key,
                json!({"sessionId": id.as_str(), "seq": processed}),
            )?;
            self.keep_queued(id, ticket);
        }
        Ok(())
    }

    fn state(&self, stores: &Stores, key: &str) -> Result<CompletionState, CompletionError> {
        match stores.state.table(STATE_TABLE)?.get(key) {
            Some(record) => decode(STATE_DOMAIN, key, &record),
            None => Ok(CompletionState::default()),
        }
    }

    async fn save(
        &self,
        stores: &Stores,
        key: &str,
        state: &CompletionState,
    ) -> Result<(), CompletionError> {
        stores
            .state
            .table(STATE_TABLE)?
            .put(key, encode(state))?
            .await?;
        Ok(())
    }

    /// One event's transitions (CO-4, CO-5, CO-7).
    async fn process(
        &self,
        stores: &Stores,
        session: &SessionId,
        work: Work,
    ) -> Result<ObserveOutcome, CompletionError> {
        let key = state_key(session.as_str(), SOURCE_ASSISTANT);
        let mut state = self.state(stores, &key)?;
        let Work::Reply {
            seq,
            time_ms,
            route,
            text,
        } = work
        else {
            if state.recover() {
                self.save(stores, &key, &state).await?;
            }
            return Ok(ObserveOutcome::Ignored);
        };
        if text.encode_utf16().count() > self.config.max_observed_chars {
            if state.recover() {
                self.save(stores, &key, &state).await?;
            }
            return Ok(ObserveOutcome::Unavailable);
        }
        let occurrence = committed_occurrence(seq);
        let candidate =
            detect_completion(&text).map(|found| PendingCompletion::committed(seq, found));
        if state.completed_occurrence_id.as_deref() == Some(occurrence.as_str()) {
            // Settled before a crash, the notice maybe not written: publish again.
            if let Some(completion) = candidate {
                self.publish(stores, session, seq, &route, &completion)
                    .await?;
            }
            return Ok(ObserveOutcome::Pending { changed: false });
        }
        let since = self.controls.since_seq(session, SOURCE_ID, RULE);
        if !self.enabled(session) || i64::try_from(seq).unwrap_or(i64::MAX) <= since {
            return Ok(ObserveOutcome::Disabled);
        }
        let outcome = state.observe(candidate, time_ms);
        let ObserveOutcome::Pending { changed } = outcome else {
            return Ok(outcome);
        };
        if changed {
            self.save(stores, &key, &state).await?;
        }
        if let SettleOutcome::Completed(completion) =
            state.settle(&occurrence, time_ms, self.config.cooldown_ms)
        {
            self.save(stores, &key, &state).await?;
            self.publish(stores, session, seq, &route, &completion)
                .await?;
        }
        Ok(outcome)
    }

    /// Writes the notice of a completed output unless it exists (CO-6).
    async fn publish(
        &self,
        stores: &Stores,
        session: &SessionId,
        seq: u64,
        route: &str,
        completion: &PendingCompletion,
    ) -> Result<(), CompletionError> {
        let notices = stores.notices.table(NOTICES_TABLE)?;
        let key = notice_key(session.as_str(), seq);
        if notices.get(&key).is_some() {
            return Ok(());
        }
        let notice = CompletionNotice::publish(
            session.as_str(),
            seq,
            route,
            completion,
            self.config.max_deliveries,
        );
        notices.put(&key, encode(&notice))?.await?;
        let mut by_session = stores.by_session.lock();
        let keys = by_session.entry(session.as_str().to_owned()).or_default();
        if !keys.contains(&key) {
            keys.push(key);
        }
        Ok(())
    }

    /// The session's notices, as stored (undecodable ones are skipped here; the
    /// catch-up reports corrupt state records).
    fn notices(&self, session: &SessionId) -> Vec<(String, CompletionNotice)> {
        let Some(stores) = self.stores.get() else {
            return Vec::new();
        };
        let Ok(table) = stores.notices.table(NOTICES_TABLE) else {
            return Vec::new();
        };
        let keys = stores
            .by_session
            .lock()
            .get(session.as_str())
            .cloned()
            .unwrap_or_default();
        keys.into_iter()
            .filter_map(|key| {
                let record = table.get(&key)?;
                (record.get("sessionId").and_then(Value::as_str) == Some(session.as_str()))
                    .then_some(())?;
                serde_json::from_value::<CompletionNotice>(record.as_ref().clone())
                    .ok()
                    .map(|notice| (key, notice))
            })
            .collect()
    }

    /// The route of the request being prepared, else the route of the last reply.
    fn route(&self, context: &HookContext) -> Option<String> {
        let id = context.session.id();
        if let Some(route) = self
            .sessions
            .lock()
            .get(id)
            .and_then(|entry| entry.route.clone())
        {
            return Some(route);
        }
        context.session.with_log(|log| {
            log.events()
                .iter()
                .rev()
                .filter(|event| event.kind() == ASSISTANT_MESSAGE)
                .find_map(|event| event.decode_part::<AssistantReply>().ok())
                .map(|reply| format!("{}/{}", reply.provider, reply.model))
        })
    }

    /// The notice a request now would carry, with its key.
    fn collect(&self, context: &HookContext) -> Option<(String, CompletionNotice)> {
        let session = context.session.id();
        if !self.enabled(session) {
            return None;
        }
        let route = self.route(context)?;
        // A notice of a reply at or below the rule's `sinceSeq` (re-enabled after it)
        // is not delivered, whenever it was observed: the idle catch-up may have
        // published it before the rule changed.
        let since = self.controls.since_seq(session, SOURCE_ID, RULE);
        let notices = self
            .notices(session)
            .into_iter()
            .filter(|(_, notice)| i64::try_from(notice.event_seq).is_ok_and(|seq| seq > since));
        newest_eligible(notices, &route)
    }

    fn message(&self, notice: &CompletionNotice) -> Message {
        let mut extra = Extra::new();
        extra.insert("segment".to_owned(), json!(SEGMENT_ID));
        extra.insert("segmentVersion".to_owned(), json!(SEGMENT_VERSION));
        extra.insert("eventSeq".to_owned(), json!(notice.event_seq));
        let mut message = Message::from_blocks(vec![ContentBlock::text(done_notice(
            self.locale,
            &notice.label,
        ))]);
        message.source = Some(Source::Plugin(Box::new(PluginSource {
            kind: NOTICE_KIND.to_owned(),
            plugin: Some(super::SOURCE.to_owned()),
            form: Some("notice".to_owned()),
            summary: Some(LABEL_DONE.to_owned()),
            sections: None,
            extra,
        })));
        message
    }

    /// Keeps a queued write of `session` for its next catch-up to await.
    fn keep_queued(&self, session: &SessionId, ticket: WriteTicket) {
        self.sessions
            .lock()
            .entry(session.clone())
            .or_default()
            .queued
            .push(ticket);
    }

    /// Queues `edit` over a stored notice of `session`; the write, or a queueing
    /// error, is kept for the session's next pre-step.
    fn edit_notice(
        &self,
        session: &SessionId,
        key: &str,
        mut edit: impl FnMut(&mut CompletionNotice) + Send + 'static,
    ) {
        let Some(stores) = self.stores.get() else {
            return;
        };
        let queued = stores.notices.table(NOTICES_TABLE).and_then(|table| {
            table.update(key, move |current| {
                let current = current?;
                let Ok(mut notice) = serde_json::from_value::<CompletionNotice>(current.clone())
                else {
                    return Some(current.clone());
                };
                edit(&mut notice);
                Some(encode(&notice))
            })
        });
        match queued {
            Ok(ticket) => self.keep_queued(session, ticket),
            Err(error) => self.failures.lock().push(error),
        }
    }
}

/// The pre-step hook: catches the session up before its request.
struct CatchUp(Arc<Observer>);

impl PreStepHook for CatchUp {
    fn call<'a>(
        &'a self,
        context: &'a HookContext,
        input: PreStepInput,
        next: PreStepNext<'a>,
    ) -> BoxFuture<'a, Result<PreStepDecision, HookError>> {
        Box::pin(async move {
            self.0
                .catch_up(&context.session)
                .await
                .map_err(|error| HookError::new(format!("completion observer: {error}")))?;
            next.run(input).await
        })
    }
}

/// The idle hook: catches the session up as soon as its turn is over (see
/// [`Observer::catch_up_idle`]).
struct IdleCatchUp(Arc<Observer>);

impl IdleHook for IdleCatchUp {
    fn on_idle<'a>(&'a self, session: &'a Session) -> BoxFuture<'a, ()> {
        Box::pin(self.0.catch_up_idle(session))
    }
}

/// The request hook: notes the exact route of the conversation request being
/// prepared, which the segment's `reserve` delivers for. It edits nothing.
struct RequestRoute(Arc<Observer>);

impl RequestHook for RequestRoute {
    fn edit(&self, context: &HookContext, config: &mut CallConfig) -> Result<(), HookError> {
        let route = (config.purpose == Purpose::Conversation).then(|| {
            self.0.llm.route(&config.model).map_or_else(
                |_| config.model.clone(),
                |route| format!("{}/{}", route.provider, route.model),
            )
        });
        self.0
            .sessions
            .lock()
            .entry(context.session.id().clone())
            .or_default()
            .route = route;
        Ok(())
    }
}

/// The request segment: the outbox's delivery (CO-6).
struct Outbox(Arc<Observer>);

impl RequestSegment for Outbox {
    fn preview(&self, context: &HookContext) -> Vec<Message> {
        self.0
            .collect(context)
            .map(|(_, notice)| vec![self.0.message(&notice)])
            .unwrap_or_default()
    }

    fn reserve(&self, context: &HookContext, call_id: &str) -> Vec<Message> {
        let Some((key, notice)) = self.0.collect(context) else {
            return Vec::new();
        };
        let (status, deliveries) = (notice.status, notice.deliveries);
        self.0.edit_notice(context.session.id(), &key, |notice| {
            if notice.is_open() && notice.deliveries < notice.max_deliveries {
                notice.reserve();
            }
        });
        self.0.reservations.lock().insert(
            call_id.to_owned(),
            Reservation {
                session: context.session.id().clone(),
                key,
                status,
                deliveries,
            },
        );
        vec![self.0.message(&notice)]
    }

    fn dispatched(&self, _context: &HookContext, call_id: &str) {
        let Some(reservation) = self.0.reservations.lock().remove(call_id) else {
            return;
        };
        self.0
            .edit_notice(&reservation.session, &reservation.key, |notice| {
                notice.status = NoticeStatus::Dispatched;
            });
        for (key, notice) in self.0.notices(&reservation.session) {
            if key != reservation.key && notice.is_open() {
                self.0.edit_notice(&reservation.session, &key, |notice| {
                    if notice.is_open() {
                        notice.status = NoticeStatus::Superseded;
                    }
                });
            }
        }
    }

    fn release(&self, _context: &HookContext, call_id: &str) {
        let Some(reservation) = self.0.reservations.lock().remove(call_id) else {
            return;
        };
        let (status, deliveries) = (reservation.status, reservation.deliveries);
        self.0
            .edit_notice(&reservation.session, &reservation.key, move |notice| {
                if notice.status == NoticeStatus::DeliveryUnknown
                    && notice.deliveries == deliveries.saturating_add(1)
                {
                    notice.status = status;
                    notice.deliveries = deliveries;
                }
            });
    }
}
