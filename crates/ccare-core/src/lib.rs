//! The vocabulary of context-care: everything the other crates agree on, and no I/O.
//!
//! - [`Event`] is the envelope of the session log (spec H-LOG): a seq, a time, a type,
//!   a lossless JSON `data` object, an optional [`SurfaceOp`] and source seqs. It keeps
//!   the exact bytes it was written as; [`EventDraft`] is an event before it has a seq.
//! - [`kinds`] names the host's event types and gives their typed payloads
//!   ([`kinds::TurnStart`], [`kinds::ToolResult`], ...); decode with [`Event::decode`].
//! - [`Message`] and [`ContentBlock`] are what the model sees (H-MSG-1); [`Source`] says
//!   who put a message there (H-EVT-3).
//! - [`json`] enforces H-LOG-2 (finite numbers, no `-0`, safe integers).
//! - [`strict`] reads a plugin's config table strictly (H-CFG-2): unknown keys and bad
//!   values are errors naming the key path, the expected and the found value.
//! - [`Clock`] is the one source of time (H-GEN-1).
//!
//! This crate does not read files, talk to providers or know any plugin; a type that
//! needs tokio, reqwest or rusqlite belongs elsewhere.
//!
//! ```
//! use ccare_core::{Event, EventDraft, kinds::TurnStart};
//! let draft = EventDraft::typed(&TurnStart { turn: 1 }).unwrap();
//! let event = Event::encode(0, 1_700_000_000_000, draft).unwrap();
//! assert_eq!(event.raw_json(), r#"{"seq":0,"time_ms":1700000000000,"type":"turn/start","data":{"turn":1}}"#);
//! assert_eq!(event.decode::<TurnStart>().unwrap().turn, 1);
//! ```

#![deny(missing_docs)]

mod clock;
mod event;
mod extra;
mod failure;
mod ids;
pub mod json;
pub mod kinds;
mod locale;
mod message;
mod source;
pub mod strict;
mod usage;

pub use clock::{Clock, ManualClock, SystemClock, rfc3339_utc};
pub use event::{Event, EventData, EventDraft, EventError, EventPart, SurfaceOp};
pub use extra::Extra;
pub use failure::{FailureCode, FailureOrigin, LlmFailure, LocalRefusal, RefusalBudgetKind};
pub use ids::{InvalidSessionId, SessionId};
pub use json::{JsonObject, NonLosslessJson};
pub use locale::Locale;
pub use message::{
    ContentBlock, ImageBlock, Message, ReasoningBlock, Role, TextBlock, ToolCallBlock,
    ToolResultBlock,
};
pub use source::{PluginSource, Source};
pub use usage::TokenUsage;
