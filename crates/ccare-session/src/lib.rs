//! The session engine: the durable, exact, append-only log every context-care feature
//! stands on (spec host.md §1–6).
//!
//! - [`Sessions`] creates, opens, lists, forks, exports and imports sessions over a
//!   [`ccare_store::Store`]. Opening replays the stored log through the same checks an
//!   append makes, audits it with the validators, and repairs a turn a crash left open.
//! - [`Session`] is the only writer of one session: [`Session::append`] checks JSON,
//!   type, surface op and validators, commits to memory, queues the event in the store
//!   and runs observers; [`Session::flush`] waits for durability.
//! - [`SessionLog`] is the pure in-memory log: events (shadowed ones included), the
//!   surface of live seqs with its `replace_generation`, the derived model view kept
//!   incrementally on append and rebuilt only on replace, and the open turn/step state.
//! - [`Registry`] holds what plugins register: event types, [`Validator`]s,
//!   [`Observer`]s and [`Projection`]s.
//!
//! This crate never deletes or edits an event, never talks to a provider, and derives
//! everything it shows from the log.
//!
//! Start reading at `Session::append` (session.rs), then `SessionLog::prepare`/`apply`
//! (log.rs).

#![deny(missing_docs)]

mod decode;
mod error;
pub mod jsonl;
mod log;
mod observe;
mod on_demand;
mod one_pass;
mod projection;
mod registry;
mod repair;
mod replay;
mod session;
mod sessions;
mod state;
mod status;
mod texts;
mod validate;
mod view;

pub use decode::{Decoded, decode};
pub use error::{AppendError, LoadError, SessionError, Violation};
pub use log::{Candidate, LiveNode, SessionLog};
pub use observe::{CreatedHere, Lifecycle, Observer, ObserverError};
pub use on_demand::{OnDemandBroadcast, Subscription};
pub use projection::{
    AnyState, ErasedProjection, PROJECTION_DOMAIN, Projection, ProjectionError, erase,
};
pub use registry::{Members, Registration, Registry, RegistryError};
pub use repair::{INTERRUPTED, TOOL_NOT_STARTED, TOOL_OUTCOME_UNKNOWN, repair_drafts};
pub use replay::{LoadPolicy, Replayed, UnknownValidator, replay};
pub use session::{CHECKPOINT_EVERY, Session, SessionHeader};
pub use sessions::{LoadedSession, Sessions, SessionsConfig, new_session_id};
pub use state::{LogState, PendingCall};
pub use status::SessionStatus;
pub use validate::{
    SingleOpenCompaction, ToolPairing, TurnStepNesting, Validator, Veto, builtin_validators,
};
pub use view::{DerivedMessage, DerivedView};
