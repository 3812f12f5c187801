//! Projections: pure folds over a session's events, checkpointed to the store (H-PROJ).
//!
//! A projection is `{key, version, fingerprint, init, apply}`. Its state is folded
//! lazily from the last known `(seq, state)` when someone asks for it, and written
//! best-effort to the KV domain [`PROJECTION_DOMAIN`]. A checkpoint is restored only if
//! its version, fingerprint and the session's incarnation all match; otherwise the
//! projection refolds from seq 0.

use std::any::Any;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Arc;

use ccare_core::Event;
use serde::Serialize;
use serde::de::DeserializeOwned;

/// The KV domain projection checkpoints live in.
pub const PROJECTION_DOMAIN: &str = "projection_cache";

/// A pure, synchronous fold over events.
pub trait Projection: Send + Sync + 'static {
    /// The folded state.
    type State: Clone + Serialize + DeserializeOwned + Send + Sync + 'static;

    /// A unique key, e.g. `care/metrics`.
    fn key(&self) -> &str;

    /// Bumped whenever `apply` changes meaning; old checkpoints are then ignored.
    fn version(&self) -> u32;

    /// A fingerprint of the configuration the fold depends on.
    fn fingerprint(&self) -> String {
        String::new()
    }

    /// The state before any event.
    fn init(&self) -> Self::State;

    /// The state after `event`, or `None` if unchanged.
    fn apply(&self, state: &Self::State, event: &Event) -> Option<Self::State>;
}

/// A projection's `apply` panicked (or was given a state of another type).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FoldPanicked;

/// A type-erased state.
pub type AnyState = Arc<dyn Any + Send + Sync>;

/// Why a projection state is unavailable.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ProjectionError {
    /// No projection has that key.
    #[error("no projection '{0}' is registered")]
    Unknown(String),
    /// Its fold panicked for this session (H-PROJ-1).
    #[error("projection '{key}' failed at seq {seq}")]
    Failed {
        /// The projection.
        key: String,
        /// The event whose fold panicked.
        seq: u64,
    },
    /// The state is not of the requested type.
    #[error("projection '{0}' has a different state type")]
    WrongType(String),
}

impl ProjectionError {
    /// The error code.
    pub fn code(&self) -> &'static str {
        match self {
            ProjectionError::Unknown(_) => "UNKNOWN_PROJECTION",
            ProjectionError::Failed { .. } => "PROJECTION_FAILED",
            ProjectionError::WrongType(_) => "PROJECTION_TYPE",
        }
    }
}

/// The object-safe face of a [`Projection`], as the registry holds it.
pub trait ErasedProjection: Send + Sync + 'static {
    /// See [`Projection::key`].
    fn key(&self) -> &str;
    /// See [`Projection::version`].
    fn version(&self) -> u32;
    /// See [`Projection::fingerprint`].
    fn fingerprint(&self) -> String;
    /// The initial state.
    fn init_any(&self) -> AnyState;
    /// Folds one event; `Err` if the fold panicked.
    fn apply_any(&self, state: &AnyState, event: &Event) -> Result<Option<AnyState>, FoldPanicked>;
    /// The state as JSON.
    fn encode_state(&self, state: &AnyState) -> Option<serde_json::Value>;
    /// A state from JSON.
    fn decode_state(&self, value: serde_json::Value) -> Option<AnyState>;
}

/// Wraps a typed projection for the registry.
pub fn erase<P: Projection>(projection: P) -> Arc<dyn ErasedProjection> {
    Arc::new(Erased(projection))
}

struct Erased<P>(P);

impl<P: Projection> ErasedProjection for Erased<P> {
    fn key(&self) -> &str {
        self.0.key()
    }

    fn version(&self) -> u32 {
        self.0.version()
    }

    fn fingerprint(&self) -> String {
        self.0.fingerprint()
    }

    fn init_any(&self) -> AnyState {
        Arc::new(self.0.init())
    }

    fn apply_any(&self, state: &AnyState, event: &Event) -> Result<Option<AnyState>, FoldPanicked> {
        let Some(typed) = state.downcast_ref::<P::State>() else {
            return Err(FoldPanicked);
        };
        catch_unwind(AssertUnwindSafe(|| self.0.apply(typed, event)))
            .map(|next| next.map(|next| Arc::new(next) as AnyState))
            .map_err(|_| FoldPanicked)
    }

    fn encode_state(&self, state: &AnyState) -> Option<serde_json::Value> {
        state
            .downcast_ref::<P::State>()
            .and_then(|typed| serde_json::to_value(typed).ok())
    }

    fn decode_state(&self, value: serde_json::Value) -> Option<AnyState> {
        serde_json::from_value::<P::State>(value)
            .ok()
            .map(|typed| Arc::new(typed) as AnyState)
    }
}

/// A stored checkpoint.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub(crate) struct Checkpoint {
    pub(crate) version: u32,
    pub(crate) fingerprint: String,
    pub(crate) incarnation: String,
    /// The number of events folded (the next seq to fold).
    pub(crate) seq: u64,
    pub(crate) state: serde_json::Value,
}

/// One projection's fold position in one open session.
pub(crate) struct Slot {
    pub(crate) projection: Arc<dyn ErasedProjection>,
    pub(crate) next_seq: u64,
    pub(crate) state: AnyState,
    pub(crate) failed_at: Option<u64>,
    /// The KV version of the last checkpoint this session read or wrote.
    pub(crate) kv_version: Option<u64>,
    /// `next_seq` of the last checkpoint written.
    pub(crate) checkpointed_seq: Option<u64>,
}

impl Slot {
    pub(crate) fn fresh(projection: Arc<dyn ErasedProjection>) -> Self {
        let state = projection.init_any();
        Self {
            projection,
            next_seq: 0,
            state,
            failed_at: None,
            kv_version: None,
            checkpointed_seq: None,
        }
    }

    /// Folds `events` (all events of the log) from `next_seq` to the end.
    pub(crate) fn catch_up(&mut self, events: &[Arc<Event>]) {
        if self.failed_at.is_some() {
            return;
        }
        let start = usize::try_from(self.next_seq).unwrap_or(usize::MAX);
        for event in events.iter().skip(start) {
            match self.projection.apply_any(&self.state, event) {
                Ok(Some(next)) => self.state = next,
                Ok(None) => {}
                Err(FoldPanicked) => {
                    tracing::warn!(
                        projection = self.projection.key(),
                        seq = event.seq(),
                        "projection fold panicked"
                    );
                    self.failed_at = Some(event.seq());
                    return;
                }
            }
            self.next_seq = event.seq() + 1;
        }
    }

    pub(crate) fn checkpoint(&self, incarnation: &str) -> Option<Checkpoint> {
        if self.failed_at.is_some() {
            return None;
        }
        Some(Checkpoint {
            version: self.projection.version(),
            fingerprint: self.projection.fingerprint(),
            incarnation: incarnation.to_owned(),
            seq: self.next_seq,
            state: self.projection.encode_state(&self.state)?,
        })
    }

    /// Restores from a stored checkpoint when all identifiers match (H-PROJ-3).
    pub(crate) fn restore(
        &mut self,
        checkpoint: Checkpoint,
        kv_version: u64,
        incarnation: &str,
        head: u64,
    ) -> bool {
        self.kv_version = Some(kv_version);
        let matches = checkpoint.version == self.projection.version()
            && checkpoint.fingerprint == self.projection.fingerprint()
            && checkpoint.incarnation == incarnation
            && checkpoint.seq <= head;
        if !matches {
            return false;
        }
        match self.projection.decode_state(checkpoint.state) {
            Some(state) => {
                self.state = state;
                self.next_seq = checkpoint.seq;
                self.checkpointed_seq = Some(checkpoint.seq);
                true
            }
            None => false,
        }
    }
}
