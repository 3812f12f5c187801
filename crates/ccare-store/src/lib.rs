//! Durable storage for context-care sessions and plugin state.
//!
//! The [`Store`] trait is the seam between the session engine and a database. It knows
//! session ids, seqs and bytes (each event is its envelope's JSON text), never messages.
//! Principal types:
//! - [`Store`]: create and list sessions, append events with the expected next seq
//!   (optimistic concurrency, spec H-STORE-1), read ranges forward and backward, KV rows
//!   with versioned compare-and-swap (H-STORE-2), an awaited [`Store::flush`], and
//!   per-session leases ([`Store::lease_acquire`], ACT-1: one driver per session
//!   across processes).
//! - [`SqliteStore`]: the embedded default (H-STORE-3/4): WAL, `synchronous=FULL`, one
//!   writer thread that commits queued operations together (group commit), readers on
//!   their own connections.
//! - [`MemoryStore`]: the same contract in memory, for tests and benchmarks; nothing
//!   survives the process.
//!
//! Writes are *ordered at call time*: the operation is queued before the method returns,
//! and the returned [`Ticket`] resolves once it is durable (or failed). Operations are
//! applied and made durable in that order, across sessions and KV domains: once one is
//! durable, every operation queued before it is durable too, or has failed. So a caller may
//! issue many appends without awaiting each one, and await only the last or a flush.
//! [`Durability`] names the two modes a host offers on top (`[store] durability`):
//! group commit, or every append durable before it returns ([`wait_blocking`]).
//!
//! With the `testing` feature (tests only), the `testing` module adds a store whose
//! operations fail on demand.
//!
//! This crate does not parse event JSON beyond what its own integrity checks need, and
//! no SQLite type appears in its API: PostgreSQL comes later behind the same trait.

#![deny(missing_docs)]

mod checks;
mod durability;
mod envelope;
mod error;
mod failures;
mod lease;
mod memory;
mod sqlite;
#[cfg(feature = "testing")]
pub mod testing;
mod types;

pub use durability::{Durability, wait_blocking};
pub use envelope::EnvelopeJson;
pub use error::StoreError;
pub use lease::{Lease, LeaseClaim, LeaseHolder, MAX_LEASE_TEXT_BYTES};
pub use memory::MemoryStore;
pub use sqlite::{SqliteConfig, SqliteStore};
pub use types::{
    Incarnation, KvEntry, KvPage, MAX_KV_KEY_BYTES, MAX_KV_VALUE_BYTES, NewSession, ReadDirection,
    ReadRange, SessionQuery, SessionRecord, Store, StoreFuture, StoredEvent, Ticket,
    new_incarnation,
};
