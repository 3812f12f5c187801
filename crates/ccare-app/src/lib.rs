//! The one boot of context-care (spec server.md ACT-5): everything a front end (the
//! `ccare` CLI today, `ccare serve` next) needs before it can drive a session, and
//! nothing it prints.
//!
//! - [`config::load`] finds `ccare.toml` (`--config`, `$CCARE_CONFIG`, `./ccare.toml`,
//!   `$CCARE_HOME/ccare.toml`), reads it strictly and resolves [`config::Settings`]:
//!   host scope (`[providers]`, `[models]`, `[host]`, `[store]`, `[loop]`,
//!   `[validators]`, `[http]`, `[gateway]`) and every profile
//!   (`[agent]` + `[plugins.*]` as the default one, `[profiles.<id>]` over them),
//!   looked up agent → profile → host (H-CFG-4). With no providers configured the
//!   environment chooses one, else the scripted demo provider (with a notice).
//! - [`boot::boot`] builds the [`boot::Booted`] host of one profile: the LLM layer and
//!   the route's meter, the store ([`store::open_store`]) and the session engine with
//!   the validator policy and durability, the built-in tools the profile chooses, its
//!   plugins (context care and stream watch by default, ACT-6) and the agent's
//!   instructions.
//! - [`Booted::drive`] opens (or creates) a session with its lease held ([`lease`],
//!   ACT-1) without starting an agent (the read-only `ccare context` commands): one
//!   driver per session across processes, a dead holder on this machine taken over at
//!   once, `SESSION_BUSY` or a wait otherwise.
//! - [`Agents`] is the registry of running session actors (ACT-1): at most one agent
//!   per session in this process, started from the store with the lease held by
//!   [`Agents::get_or_start`] / [`Agents::create`], stopped when idle for `[host]
//!   actor_idle_ms` or by [`Agents::stop`], replaced by [`Agents::get_or_reopen`] when
//!   a store error fenced its session. Every front end drives sessions through it.
//! - [`AppError`] says why; [`AppError::is_bad_input`] separates the user's mistakes
//!   (exit 2) from failures (exit 1).
//!
//! Host scope (the store, the LLM config, `[host] actor_idle_ms`) lives in
//! [`config::Settings`] and is opened once; each profile boots its own host, and
//! [`Agents::of`] builds the registry of one booted profile.

#![deny(missing_docs)]

pub mod agents;
pub mod boot;
pub mod config;
pub mod demo;
mod drive;
mod error;
mod home;
mod instructions;
pub mod lease;
mod mount;
pub mod store;

pub use agents::{AgentHandle, Agents};
pub use boot::{Booted, boot, boot_over};
pub use config::{Overrides, Settings, load};
pub use error::AppError;
pub use home::Home;
pub use lease::{SessionLease, WhenBusy};
