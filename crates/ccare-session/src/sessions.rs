//! [`Sessions`]: create, open (with audit and crash repair), list, fork, export and
//! import sessions over one [`Store`] (spec H-SESS, H-STORE-8).

use std::collections::HashMap;
use std::io::Write;
use std::sync::Arc;

use ccare_core::kinds::SessionEndSeed;
use ccare_core::{Clock, Event, EventDraft, JsonObject, Locale, SessionId};
use ccare_store::{
    Durability, NewSession, ReadRange, SessionQuery, SessionRecord, Store, StoreError, StoredEvent,
    new_incarnation,
};
use parking_lot::Mutex;

use crate::error::{LoadError, SessionError, Violation};
use crate::jsonl::{self, ImportError};
use crate::log::SessionLog;
use crate::observe::Lifecycle;
use crate::registry::Registry;
use crate::repair::repair_drafts;
use crate::replay::{LoadPolicy, Replayed, replay};
use crate::session::{Session, SessionHeader};

/// Settings of the session engine.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SessionsConfig {
    /// How loads and imports treat validator violations.
    pub load: LoadPolicy,
    /// The language of texts crash repair writes for the model.
    pub locale: Locale,
    /// When an append is durable (`[store] durability`, H-STORE-5).
    pub durability: Durability,
}

/// A session read without opening it: no repair, nothing written.
#[derive(Debug, Clone)]
pub struct LoadedSession {
    /// The stored header.
    pub header: SessionHeader,
    /// The replayed log.
    pub log: SessionLog,
    /// What the audit found.
    pub violations: Vec<Violation>,
}

/// The session engine over one store.
pub struct Sessions {
    store: Arc<dyn Store>,
    clock: Arc<dyn Clock>,
    registry: Arc<Registry>,
    config: SessionsConfig,
    live: Mutex<HashMap<SessionId, Session>>,
}

impl std::fmt::Debug for Sessions {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter
            .debug_struct("Sessions")
            .field("config", &self.config)
            .finish()
    }
}

impl Sessions {
    /// An engine over `store`.
    pub fn new(
        store: Arc<dyn Store>,
        clock: Arc<dyn Clock>,
        registry: Arc<Registry>,
        config: SessionsConfig,
    ) -> Self {
        Self {
            store,
            clock,
            registry,
            config,
            live: Mutex::new(HashMap::new()),
        }
    }

    /// The store.
    pub fn store(&self) -> &Arc<dyn Store> {
        &self.store
    }

    /// The registry.
    pub fn registry(&self) -> &Arc<Registry> {
        &self.registry
    }

    /// Creates an empty session (a fresh time-ordered id unless `id` is given).
    pub async fn create(
        &self,
        id: Option<SessionId>,
        meta: JsonObject,
    ) -> Result<Session, SessionError> {
        let new = self.new_row(id, meta)?;
        let header = created_header(&new);
        self.store.create_session(new, Vec::new()).await?;
        self.created(header)
    }

    /// Creates a session under a new id like [`Sessions::create`], without waiting for
    /// its row to be durable: the creation is queued and made part of what the
    /// session's first flush waits for ([`Session::include_write`]), so a creator that
    /// writes to it at once (a turn's opening, flushed before any hook runs) pays one
    /// commit for both, not two. A failed creation fences the session: that flush
    /// returns the store's error, and nothing more is written to it. The id is new, so
    /// nobody else can write to it or read it meanwhile.
    pub fn create_queued(&self, meta: JsonObject) -> Result<Session, SessionError> {
        let new = self.new_row(None, meta)?;
        let header = created_header(&new);
        let creation = self.store.create_session(new, Vec::new());
        let session = self.created(header)?;
        session.include_write(creation);
        Ok(session)
    }

    /// A new session's row under a fresh incarnation (a new id when `id` is `None`).
    fn new_row(&self, id: Option<SessionId>, meta: JsonObject) -> Result<NewSession, SessionError> {
        let id = match id {
            Some(id) => id,
            None => new_session_id()?,
        };
        let meta_json = serde_json::to_string(&serde_json::Value::Object(meta))
            .map_err(|error| SessionError::Io(error.to_string()))?;
        Ok(NewSession {
            id,
            created_ms: self.clock.now_ms(),
            parent: None,
            seed_length: None,
            meta_json,
            incarnation: new_incarnation(),
        })
    }

    /// Opens a session whose creation was just written (or queued): nothing to read
    /// back, audit or repair, since it is what was written (no events), so it opens
    /// from memory without a store round trip.
    fn created(&self, header: SessionHeader) -> Result<Session, SessionError> {
        let id = header.id.clone();
        self.notify(&Lifecycle::Created(id.clone()));
        let Replayed { log, .. } = replay(
            &id,
            std::iter::empty::<Box<str>>(),
            &self.registry,
            &self.config.load,
        )?;
        let session = self.attach(header, log);
        let mut live = self.live.lock();
        Ok(live.entry(id).or_insert(session).clone())
    }

    /// Sessions, newest first.
    pub async fn list(&self, query: SessionQuery) -> Result<Vec<SessionRecord>, SessionError> {
        Ok(self.store.list_sessions(query).await?)
    }

    async fn record(&self, id: &SessionId) -> Result<SessionRecord, SessionError> {
        self.store
            .session(id)
            .await?
            .ok_or_else(|| SessionError::UnknownSession(id.clone()))
    }

    /// Makes what the open session `id` has appended durable before it is read from
    /// the store (the in-memory log is ahead of the store until flushed). A flush that
    /// fails fences the session (H-STORE-6): what it held beyond the store is never
    /// stored, so the store's rows are the session, and a reader gets them.
    async fn flush_live(&self, id: &SessionId) {
        let Some(session) = self.live_session(id) else {
            return;
        };
        if let Err(error) = session.flush().await {
            tracing::debug!(session = %id, %error, "reading a fenced session from the store");
        }
    }

    /// Reads and audits a session without repairing or writing anything.
    pub async fn load(&self, id: &SessionId) -> Result<LoadedSession, SessionError> {
        self.flush_live(id).await;
        let record = self.record(id).await?;
        let rows = self.store.read(id, ReadRange::all()).await?;
        let Replayed { log, violations } = replay(
            id,
            rows.into_iter().map(|row| row.json),
            &self.registry,
            &self.config.load,
        )?;
        for violation in &violations {
            tracing::warn!(session = %id, seq = violation.seq, validator = %violation.validator, "{}", violation.message);
        }
        Ok(LoadedSession {
            header: record.into(),
            log,
            violations,
        })
    }

    /// A session over `log`, on this engine's store, clock, registry and durability.
    fn attach(&self, header: SessionHeader, log: SessionLog) -> Session {
        Session::from_log(
            header,
            log,
            self.store.clone(),
            self.clock.clone(),
            self.registry.clone(),
            self.config.durability,
        )
    }

    fn live_session(&self, id: &SessionId) -> Option<Session> {
        self.live.lock().get(id).cloned()
    }

    /// Opens a session for appending: loads, audits and repairs it (H-SESS-1, H-SESS-5).
    /// Opening an id that is already open returns the same session, unless a store error
    /// fenced it: then it is reopened from the store (the durable events, repaired) and
    /// the fenced handle is never handed out again (H-STORE-6). Holders of the old
    /// handle keep a fenced session.
    pub async fn open(&self, id: &SessionId) -> Result<Session, SessionError> {
        if let Some(session) = self.live_session(id) {
            let Some(cause) = session.fence() else {
                return Ok(session);
            };
            self.forget_fenced(id, &session);
            tracing::info!(session = %id, %cause, "reopening a fenced session from the store");
        }
        let LoadedSession { header, log, .. } = self.load(id).await?;
        let repairs = repair_drafts(log.state(), self.config.locale).map_err(|error| {
            SessionError::Load(LoadError::BadEvent {
                session: id.clone(),
                seq: log.head(),
                error,
            })
        })?;
        let session = self.attach(header, log);
        if !repairs.is_empty() {
            for draft in repairs {
                session.append(draft)?;
            }
            session.flush().await?;
            tracing::info!(session = %id, head = session.head(), "repaired an interrupted turn");
        }
        let mut live = self.live.lock();
        let session = live.entry(id.clone()).or_insert(session).clone();
        Ok(session)
    }

    /// Drops `fenced` from the open sessions unless another open replaced it already.
    fn forget_fenced(&self, id: &SessionId, fenced: &Session) {
        let mut live = self.live.lock();
        if live
            .get(id)
            .is_some_and(|current| current.same_handle(fenced))
        {
            live.remove(id);
        }
    }

    /// Flushes and closes an open session; the engine forgets it.
    pub async fn close(&self, id: &SessionId) -> Result<(), SessionError> {
        let session = self.live.lock().remove(id);
        if let Some(session) = session {
            session.close().await?;
        }
        Ok(())
    }

    /// Forks `source` after `boundary` (default: its last event) into a new session whose
    /// seed is events `0..=boundary`, then `session/end-seed` (H-SESS-2, H-SESS-3).
    pub async fn fork(
        &self,
        source: &SessionId,
        boundary: Option<u64>,
        new_id: Option<SessionId>,
    ) -> Result<Session, SessionError> {
        let loaded = self.load(source).await?;
        let head = loaded.log.head();
        let boundary = match boundary {
            Some(boundary) => boundary,
            None => head.checked_sub(1).ok_or(SessionError::ForkPastHead {
                session: source.clone(),
                boundary: 0,
                head,
            })?,
        };
        if boundary >= head {
            return Err(SessionError::ForkPastHead {
                session: source.clone(),
                boundary,
                head,
            });
        }
        let seed: Vec<&Arc<Event>> = loaded
            .log
            .events()
            .iter()
            .take_while(|event| event.seq() <= boundary)
            .collect();
        let seed_state = replay(
            source,
            seed.iter().map(|event| event.raw_json()),
            &self.registry,
            &LoadPolicy::default(),
        )?;
        if let Some(turn) = seed_state.log.state().open_turn {
            return Err(SessionError::ForkInsideTurn {
                session: source.clone(),
                boundary,
                turn,
            });
        }
        let id = match new_id {
            Some(id) => id,
            None => new_session_id()?,
        };
        let seed_length = boundary + 1;
        let end_seed = EventDraft::typed(&SessionEndSeed { inherited: true })
            .and_then(|draft| Event::encode(seed_length, self.clock.now_ms(), draft));
        let end_seed = end_seed.map_err(|error| {
            SessionError::Load(LoadError::BadEvent {
                session: id.clone(),
                seq: seed_length,
                error,
            })
        })?;
        let mut rows: Vec<StoredEvent> = seed
            .iter()
            .map(|event| StoredEvent {
                seq: event.seq(),
                json: event.raw_json().into(),
            })
            .collect();
        rows.push(StoredEvent {
            seq: seed_length,
            json: end_seed.raw_json().into(),
        });
        let new = NewSession {
            id: id.clone(),
            created_ms: self.clock.now_ms(),
            parent: Some(source.clone()),
            seed_length: Some(seed_length),
            meta_json: loaded.header.meta_json.clone(),
            incarnation: new_incarnation(),
        };
        self.store.create_session(new, rows).await?;
        self.notify(&Lifecycle::Forked {
            session: id.clone(),
            parent: source.clone(),
        });
        self.open(&id).await
    }

    /// Writes a session as JSONL: the header line, then every stored event verbatim.
    pub async fn export(&self, id: &SessionId, out: &mut dyn Write) -> Result<(), SessionError> {
        self.flush_live(id).await;
        let record = self.record(id).await?;
        let rows = self.store.read(id, ReadRange::all()).await?;
        let io = |error: std::io::Error| SessionError::Io(error.to_string());
        out.write_all(jsonl::header_line(&record.into()).as_bytes())
            .map_err(io)?;
        for row in rows {
            out.write_all(row.json.as_bytes()).map_err(io)?;
            out.write_all(b"\n").map_err(io)?;
        }
        out.flush().map_err(io)
    }

    /// Imports a JSONL file, keeping its id and header fields under a new incarnation.
    /// The file is checked completely before anything is stored; an existing id is
    /// refused (H-STORE-8).
    pub async fn import(&self, bytes: &[u8]) -> Result<SessionRecord, SessionError> {
        let file = jsonl::parse_file(bytes)?;
        if self.store.session(&file.id).await?.is_some() {
            return Err(SessionError::SessionExists(file.id.clone()));
        }
        let replayed = replay(
            &file.id,
            file.lines.iter().copied(),
            &self.registry,
            &self.config.load,
        )
        .map_err(|error| {
            let line = match &error {
                LoadError::BadEvent { seq, .. }
                | LoadError::UnknownRequired { seq, .. }
                | LoadError::Invalid { seq, .. } => jsonl::line_of_seq(*seq),
                LoadError::SeqMismatch { position, .. } => jsonl::line_of_seq(*position),
                LoadError::Violations { violations, .. } => violations
                    .first()
                    .map_or(1, |violation| jsonl::line_of_seq(violation.seq)),
                LoadError::Store(_) => 1,
            };
            SessionError::Import(ImportError::Event { line, error })
        })?;
        let rows: Vec<StoredEvent> = replayed
            .log
            .events()
            .iter()
            .map(|event| StoredEvent {
                seq: event.seq(),
                json: event.raw_json().into(),
            })
            .collect();
        let new = NewSession {
            id: file.id.clone(),
            created_ms: file.created_ms,
            parent: file.parent.clone(),
            seed_length: file.seed_length,
            meta_json: file.meta_json.to_owned(),
            incarnation: new_incarnation(),
        };
        self.store
            .create_session(new, rows)
            .await
            .map_err(|error| match error {
                StoreError::SessionExists { session } => SessionError::SessionExists(session),
                other => SessionError::from(other),
            })?;
        self.notify(&Lifecycle::Created(file.id.clone()));
        self.record(&file.id).await
    }

    fn notify(&self, notice: &Lifecycle) {
        for observer in self.registry.observers().iter() {
            let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                observer.on_lifecycle(notice)
            }));
            if !matches!(outcome, Ok(Ok(()))) {
                tracing::warn!(
                    observer = observer.name(),
                    ?notice,
                    "observer failed on a lifecycle notice"
                );
            }
        }
    }
}

/// A fresh, time-ordered session id (UUID v7).
pub fn new_session_id() -> Result<SessionId, SessionError> {
    SessionId::new(uuid::Uuid::now_v7().to_string())
        .map_err(|error| SessionError::Io(error.to_string()))
}

/// The header of a session created from `new` (no events yet).
fn created_header(new: &NewSession) -> SessionHeader {
    SessionHeader {
        id: new.id.clone(),
        created_ms: new.created_ms,
        parent: None,
        seed_length: None,
        meta_json: new.meta_json.clone(),
        incarnation: new.incarnation.clone(),
    }
}
