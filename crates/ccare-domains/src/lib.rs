//! Storage domains and session rule controls over the store's KV rows (spec H-DOM,
//! RC-1..RC-9): the durable state plugins keep beside the session log. [`domains`] gives
//! a plugin typed tables and a global record, read from memory and written through
//! per-partition compare-and-swap queues; [`controls`] holds the per-session
//! (source, rule, action) switches every plugin consults before it acts, with the
//! spec's decision order and revisioned patches. Both know only the store and the core
//! types: the kernel (`ccare-agent`) wires them into plugin scopes and loads a
//! session's controls before its first turn, and no plugin is named here.

#![deny(missing_docs)]

pub mod controls;
pub mod domains;
