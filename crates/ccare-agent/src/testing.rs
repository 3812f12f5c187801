//! Test support (cargo feature `testing`, never a default; spec H-TEST-1): the one real
//! composition the integration tests of the kernel and of every plugin run in, so no
//! crate hand-builds its own host, store and scripted provider.
//!
//! - [`TestHost`] (built by [`TestHostBuilder`]): a [`crate::Host`] over a SQLite file
//!   (in a temporary directory unless one is given) or any store, the scripted provider
//!   `s` (any model `s/<name>`) answering a JSONL script, a clock (the system's unless
//!   given), and agents on new or reopened sessions. A crate's test rig adds only what
//!   that crate needs (mounting its plugin).
//! - [`turn`], [`kinds`], [`events_of`], [`seq_events_of`]: one prompt to the end of
//!   its turn, and a session's log read back.
//! - [`FailingStore`] and [`Fault`] (from `ccare_store::testing`): a store whose
//!   writes or reads fail on demand.
//!
//! Tests enable it with `ccare-agent = { workspace = true, features = ["testing"] }` in
//! `[dev-dependencies]`; a release build of the binary never carries it.

mod error;
mod kit;
mod log;

pub use ccare_store::testing::{FailingStore, Fault, Operation};
pub use error::KitError;
pub use kit::{TestHost, TestHostBuilder};
pub use log::{events_of, kinds, seq_events_of, turn};
