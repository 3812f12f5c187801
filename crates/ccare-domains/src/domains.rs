//! Storage domains (spec H-DOM-1..4): the durable, typed state a plugin keeps in the
//! store's KV rows, read synchronously from memory and written through per-partition
//! queues.
//!
//! - [`Domains`] is the process-wide registry over one [`Store`]. A domain name belongs
//!   to one owner (plugin) at a time; [`Domains::open`] checks the stored schema
//!   version, runs the spec's migration when it is older, and loads every row into
//!   memory. [`Domains::close`] / [`Domains::close_owner`] release names when a plugin
//!   unmounts. [`PluginDomains`] is the same registry bound to one owner, for a plugin
//!   scope to hand out.
//! - [`Domain`] is a cheap handle on an open domain: declared [`Table`]s, an optional
//!   [`Global`] record, [`Domain::flush`] and a [`DomainChanged`] broadcast.
//!
//! # Layout in the store
//!
//! Store domain = the domain name. A table record is the row `<table>/<key>`; the
//! global record is `__global`; the schema version is `__meta` (`{"version": N}`).
//! Table names match `[a-z][a-z0-9_]*`, so the `__` rows can never collide with them.
//! Values are JSON, stored as compact text.
//!
//! # Write path (H-DOM-3/4)
//!
//! A write is validated (key ≤ 512 bytes including `<table>/`, value ≤ 4 MiB) and
//! queued on its partition before the call returns; it returns a [`WriteTicket`]. One
//! worker task per busy partition takes the longest prefix of its queue whose keys are
//! distinct, issues those compare-and-swaps together (so the store can commit them as
//! one group), then awaits each in order: durable → memory → [`DomainChanged`] →
//! ticket. A put or delete with nothing unissued before it in its partition, on a key
//! no write in flight touches, is issued at submit instead (behind the round in
//! flight, under the same lock, so the store still gets writes in call order): two
//! writes of different rows queued back to back reach one commit. A write's expected
//! version and an update's input come from memory, which
//! at that point holds every earlier write to the same key (a key always maps to the
//! same partition), so readers only ever see acknowledged values and a failed write
//! leaves memory unchanged. Failures are remembered until a ticket or
//! [`Domain::flush`] reports them.
//!
//! A partition is the whole domain, or per key: a table may partition by the key's
//! first `/` segment (e.g. a session id) or by a function of the key. Partitions with
//! the same name share one queue across tables.
//!
//! # Rows in use, not every row
//!
//! Every row is loaded at open, except those of tables declared
//! [`TableSpec::on_demand`] ([`Table::stored_page`] pages through them). A plugin whose
//! rows grow with the sessions it ever saw (the request journal) keeps only the rows in
//! use: [`Table::evict`] drops idle rows from memory (the store keeps them; a row with
//! a write queued or in flight stays), [`Table::load`] / [`Table::load_prefix`] bring
//! stored rows back before the plugin reads or writes them again, and
//! [`Table::stored`] / [`Table::stored_prefix`] read the store without keeping
//! anything. Reads stay synchronous and from memory; an evicted row reads as absent
//! until it is loaded.
//!
//! Not done here: cross-row transactions (a migration's rows are written one by one,
//! so a migration must be safe to rerun), and watching rows written behind the
//! domain's back (an [`Table::update`] notices them through its CAS loop; a
//! [`Table::put`] fails with `CAS_CONFLICT`).

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet, VecDeque};
use std::fmt;
use std::future::Future;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::pin::Pin;
use std::sync::{Arc, Weak};
use std::task::{Context, Poll};

use ccare_store::{
    KvEntry, KvPage, MAX_KV_KEY_BYTES, MAX_KV_VALUE_BYTES, Store, StoreError, Ticket,
};
use parking_lot::{Mutex, RwLock};
use serde_json::Value;
use tokio::runtime::Handle;
use tokio::sync::{broadcast, oneshot, watch};

/// The row holding the schema version, `{"version": N}`.
const META_ROW: &str = "__meta";
/// The row holding the global record.
const GLOBAL_ROW: &str = "__global";
/// How many times an update re-reads and retries after a `CAS_CONFLICT`.
const MAX_UPDATE_ATTEMPTS: usize = 16;
/// Rows per store scan page while loading.
const SCAN_PAGE: usize = 512;
/// Rows of the first page of a prefix read ([`Table::load_prefix`],
/// [`Table::stored_prefix`]).
const FIRST_PREFIX_PAGE: usize = 64;
/// Change notifications buffered per subscriber before it lags.
const CHANGES_CAPACITY: usize = 1024;
/// Failed writes remembered between flushes; past this the newest are dropped.
const MAX_UNREPORTED: usize = 1024;
/// The most writes one worker round issues together.
const MAX_BATCH: usize = 1024;
/// How much of a long key error messages show.
const KEY_PREVIEW_CHARS: usize = 64;

/// Why a domain operation failed. Each variant says where; [`DomainError::code`] gives
/// the spec's code.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DomainError {
    /// The domain name does not match `[a-z][a-z0-9_]*`.
    #[error("invalid domain name {name:?}: it must match [a-z][a-z0-9_]*")]
    InvalidName {
        /// The rejected name.
        name: String,
    },
    /// The spec is malformed: version 0, a bad or duplicate table name.
    #[error("domain {domain}: invalid spec: {detail}")]
    InvalidSpec {
        /// The domain.
        domain: String,
        /// What is wrong.
        detail: String,
    },
    /// Another owner (or this one, a second time) holds the name (H-DOM-1).
    #[error("domain {domain} is already open by {owner}")]
    InUse {
        /// The domain.
        domain: String,
        /// Who holds it.
        owner: String,
    },
    /// The stored schema version is newer than the opener's (H-DOM-1).
    #[error(
        "domain {domain}: the stored version {stored} is newer than {requested}; How to fix: run a newer build, or remove the domain's rows"
    )]
    VersionNewer {
        /// The domain.
        domain: String,
        /// The stored version.
        stored: u64,
        /// The version the opener asked for.
        requested: u64,
    },
    /// The stored schema version is older and the spec has no migration (H-DOM-1).
    #[error(
        "domain {domain}: the stored version {stored} is older than {requested} and the spec has no migration"
    )]
    MigrationRequired {
        /// The domain.
        domain: String,
        /// The stored version.
        stored: u64,
        /// The version the opener asked for.
        requested: u64,
    },
    /// The spec's migration refused the stored data.
    #[error("domain {domain}: migrating version {from} to {to} failed: {message}")]
    MigrationFailed {
        /// The domain.
        domain: String,
        /// The stored version.
        from: u64,
        /// The target version.
        to: u64,
        /// Why, in the migration's words.
        message: String,
    },
    /// A stored row is not JSON, or the version row is malformed.
    #[error("domain {domain}: row {row:?} is corrupt: {detail}")]
    Corrupt {
        /// The domain.
        domain: String,
        /// The raw row key.
        row: String,
        /// What is wrong.
        detail: String,
    },
    /// The table was not declared in the spec.
    #[error("domain {domain}: no table {table:?} was declared")]
    UnknownTable {
        /// The domain.
        domain: String,
        /// The requested table.
        table: String,
    },
    /// The spec declared no global record.
    #[error("domain {domain}: no global record was declared")]
    NoGlobal {
        /// The domain.
        domain: String,
    },
    /// The key is empty or holds a NUL byte (or, in a migration, the table name is bad).
    #[error("domain {domain}: {record}: invalid key: {reason}")]
    InvalidKey {
        /// The domain.
        domain: String,
        /// The record (key shortened when long).
        record: RecordId,
        /// Why.
        reason: &'static str,
    },
    /// The row key `<table>/<key>` is longer than the store allows (H-DOM-2).
    #[error("domain {domain}: {record}: the row key is {bytes} bytes, the limit is {limit}")]
    KeyTooLong {
        /// The domain.
        domain: String,
        /// The record (key shortened when long).
        record: RecordId,
        /// The row key's length in bytes, `<table>/` included.
        bytes: usize,
        /// The limit ([`MAX_KV_KEY_BYTES`]).
        limit: usize,
    },
    /// The encoded value is larger than the store allows (H-DOM-2).
    #[error("domain {domain}: {record}: the value is {bytes} bytes, the limit is {limit}")]
    ValueTooLarge {
        /// The domain.
        domain: String,
        /// The record.
        record: RecordId,
        /// The compact JSON's length in bytes.
        bytes: usize,
        /// The limit ([`MAX_KV_VALUE_BYTES`]).
        limit: usize,
    },
    /// An update function panicked; nothing was written.
    #[error("domain {domain}: {record}: the update function panicked")]
    UpdatePanicked {
        /// The domain.
        domain: String,
        /// The record.
        record: RecordId,
    },
    /// The write was dropped before it finished (the runtime shut down).
    #[error("domain {domain}: {record}: the write was aborted")]
    WriteAborted {
        /// The domain.
        domain: String,
        /// The record.
        record: RecordId,
    },
    /// The domain was closed; it takes no more writes.
    #[error("domain {domain} is closed")]
    Closed {
        /// The domain.
        domain: String,
    },
    /// `open` was called outside a Tokio runtime, which runs the write queues.
    #[error("domain {domain}: open must run inside a Tokio runtime")]
    NoRuntime {
        /// The domain.
        domain: String,
    },
    /// The store failed or refused the operation; `CAS_CONFLICT` means the row was
    /// written behind the domain's back.
    #[error("domain {domain}{}: {source}", record.as_ref().map(|record| format!(": {record}")).unwrap_or_default())]
    Store {
        /// The domain.
        domain: String,
        /// The record written, when the failure concerns one.
        record: Option<RecordId>,
        /// What the store said.
        source: Box<StoreError>,
    },
}

impl DomainError {
    /// The spec's `SCREAMING_SNAKE` code; store failures keep the store's code.
    pub fn code(&self) -> &'static str {
        match self {
            DomainError::InvalidName { .. } => "DOMAIN_INVALID_NAME",
            DomainError::InvalidSpec { .. } => "DOMAIN_INVALID_SPEC",
            DomainError::InUse { .. } => "DOMAIN_IN_USE",
            DomainError::VersionNewer { .. } => "DOMAIN_VERSION_NEWER",
            DomainError::MigrationRequired { .. } => "DOMAIN_MIGRATION_REQUIRED",
            DomainError::MigrationFailed { .. } => "DOMAIN_MIGRATION_FAILED",
            DomainError::Corrupt { .. } => "DOMAIN_CORRUPT",
            DomainError::UnknownTable { .. } => "DOMAIN_UNKNOWN_TABLE",
            DomainError::NoGlobal { .. } => "DOMAIN_NO_GLOBAL",
            DomainError::InvalidKey { .. } => "DOMAIN_INVALID_KEY",
            DomainError::KeyTooLong { .. } => "KEY_TOO_LONG",
            DomainError::ValueTooLarge { .. } => "VALUE_TOO_LARGE",
            DomainError::UpdatePanicked { .. } => "DOMAIN_UPDATE_PANICKED",
            DomainError::WriteAborted { .. } => "DOMAIN_WRITE_ABORTED",
            DomainError::Closed { .. } => "DOMAIN_CLOSED",
            DomainError::NoRuntime { .. } => "DOMAIN_NO_RUNTIME",
            DomainError::Store { source, .. } => source.code(),
        }
    }
}

/// Which record of a domain: a table row or the global record. Names the record in
/// errors and in [`DomainChanged`].
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum RecordId {
    /// A row of a declared table.
    Row {
        /// The table.
        table: String,
        /// The key within the table.
        key: String,
    },
    /// The domain's global record.
    Global,
}

impl fmt::Display for RecordId {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RecordId::Row { table, key } => write!(formatter, "{table}/{key}"),
            RecordId::Global => formatter.write_str("(global)"),
        }
    }
}

/// Sent to [`Domain::subscribe`]rs after a write is durable and visible in memory
/// (`domain/changed`, H-DOM-3).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DomainChanged {
    /// The domain.
    pub domain: Arc<str>,
    /// The record written.
    pub record: RecordId,
    /// Its new version; `None` when it was deleted.
    pub version: Option<u64>,
}

/// One declared table and how its writes are partitioned.
#[derive(Clone)]
pub struct TableSpec {
    name: String,
    partition: Partition,
    on_demand: bool,
}

impl TableSpec {
    /// A table whose writes share the domain-wide queue.
    pub fn new(name: impl Into<String>) -> Self {
        Self {
            name: name.into(),
            partition: Partition::Domain,
            on_demand: false,
        }
    }

    /// A table partitioned by the key's first `/` segment (the whole key when it has
    /// none), e.g. keys `<session>/<id>` give one queue per session.
    pub fn by_first_segment(name: impl Into<String>) -> Self {
        Self {
            name: name.into(),
            partition: Partition::FirstSegment,
            on_demand: false,
        }
    }

    /// A table partitioned by `partition(key)`. It must be a pure function of the key,
    /// so every write to one key goes through one queue.
    pub fn by(
        name: impl Into<String>,
        partition: impl Fn(&str) -> String + Send + Sync + 'static,
    ) -> Self {
        Self {
            name: name.into(),
            partition: Partition::Custom(Arc::new(partition)),
            on_demand: false,
        }
    }

    /// The table's rows are not loaded when the domain opens: a plugin whose rows grow
    /// with every session it ever saw (the request journal) loads those it uses
    /// ([`Table::load`], [`Table::load_prefix`]) and reads the rest from the store
    /// ([`Table::stored_page`]). A domain that must be migrated still reads every row
    /// for the migration.
    #[must_use]
    pub fn on_demand(mut self) -> Self {
        self.on_demand = true;
        self
    }
}

impl fmt::Debug for TableSpec {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        formatter
            .debug_struct("TableSpec")
            .field("name", &self.name)
            .field("partition", &self.partition)
            .finish()
    }
}

/// A migration: rewrites the rows of an older schema in place (see [`MigrationContext`]).
type Migrate = Box<dyn FnOnce(&mut MigrationContext) -> Result<(), DomainError> + Send>;

/// What [`Domains::open`] opens: `{name, version, tables, global?, migrate?}` (H-DOM-1).
pub struct DomainSpec {
    name: String,
    version: u64,
    tables: Vec<TableSpec>,
    global: Option<Value>,
    migrate: Option<Migrate>,
}

impl DomainSpec {
    /// A domain `name` (`[a-z][a-z0-9_]*`) at schema `version` (from 1), with no tables.
    pub fn new(name: impl Into<String>, version: u64) -> Self {
        Self {
            name: name.into(),
            version,
            tables: Vec::new(),
            global: None,
            migrate: None,
        }
    }

    /// Declares a table; only declared tables can be read and written.
    #[must_use]
    pub fn table(mut self, table: TableSpec) -> Self {
        self.tables.push(table);
        self
    }

    /// Declares the global record; [`Global::get`] returns `default` until it is set.
    #[must_use]
    pub fn global(mut self, default: Value) -> Self {
        self.global = Some(default);
        self
    }

    /// The migration run when the stored version is older. It rewrites the rows in
    /// memory; `open` then writes the difference and the new version. Rows are written
    /// one by one and the version last, so a crash mid-way reruns the migration on
    /// partly migrated rows: make it idempotent.
    #[must_use]
    pub fn migrate(
        mut self,
        migrate: impl FnOnce(&mut MigrationContext) -> Result<(), DomainError> + Send + 'static,
    ) -> Self {
        self.migrate = Some(Box::new(migrate));
        self
    }

    fn validate(&self) -> Result<(), DomainError> {
        if !is_identifier(&self.name) {
            return Err(DomainError::InvalidName {
                name: self.name.clone(),
            });
        }
        let invalid = |detail: String| DomainError::InvalidSpec {
            domain: self.name.clone(),
            detail,
        };
        if self.version == 0 {
            return Err(invalid("the version must be at least 1".to_owned()));
        }
        let mut seen = HashSet::new();
        for table in &self.tables {
            if !is_identifier(&table.name) {
                return Err(invalid(format!(
                    "table name {:?} must match [a-z][a-z0-9_]*",
                    table.name
                )));
            }
            if !seen.insert(table.name.as_str()) {
                return Err(invalid(format!("table {} is declared twice", table.name)));
            }
        }
        Ok(())
    }
}

impl fmt::Debug for DomainSpec {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        formatter
            .debug_struct("DomainSpec")
            .field("name", &self.name)
            .field("version", &self.version)
            .field("tables", &self.tables)
            .field("global", &self.global)
            .field("migrate", &self.migrate.is_some())
            .finish()
    }
}

/// The rows of an older schema, handed to a [`DomainSpec::migrate`] function to rewrite.
/// Any well-formed table name can be read and written (old tables need not be
/// declared); rows left under undeclared tables stay stored but unreachable.
#[derive(Debug)]
pub struct MigrationContext {
    domain: String,
    from: u64,
    to: u64,
    rows: BTreeMap<String, Arc<Value>>,
}

impl MigrationContext {
    /// The stored version (0 when rows exist without a version row).
    pub fn from_version(&self) -> u64 {
        self.from
    }

    /// The version being opened.
    pub fn to_version(&self) -> u64 {
        self.to
    }

    /// The tables that have rows, ascending.
    pub fn tables(&self) -> Vec<String> {
        let tables: BTreeSet<&str> = self
            .rows
            .keys()
            .filter_map(|row| row.split_once('/').map(|(table, _)| table))
            .filter(|table| is_identifier(table))
            .collect();
        tables.into_iter().map(str::to_owned).collect()
    }

    /// A row's value.
    pub fn get(&self, table: &str, key: &str) -> Option<&Value> {
        self.rows.get(&row_key(table, key)).map(|value| &**value)
    }

    /// The rows of `table` whose key starts with `prefix`, ascending by key.
    pub fn entries(&self, table: &str, prefix: &str) -> Vec<(String, Value)> {
        scan(&self.rows, table, prefix)
            .map(|(key, value)| (key.to_owned(), Value::clone(value)))
            .collect()
    }

    /// Sets a row, checking the table name and the key and value limits.
    pub fn put(&mut self, table: &str, key: &str, value: Value) -> Result<(), DomainError> {
        let record = RecordId::Row {
            table: table.to_owned(),
            key: preview(key),
        };
        if !is_identifier(table) {
            return Err(DomainError::InvalidKey {
                domain: self.domain.clone(),
                record,
                reason: "table names match [a-z][a-z0-9_]*",
            });
        }
        let row = checked_row(&self.domain, table, key)?;
        encode(&self.domain, &record, &value)?;
        self.rows.insert(row, Arc::new(value));
        Ok(())
    }

    /// Removes a row (nothing when it is absent).
    pub fn delete(&mut self, table: &str, key: &str) {
        self.rows.remove(&row_key(table, key));
    }

    /// The global record's stored value.
    pub fn global(&self) -> Option<&Value> {
        self.rows.get(GLOBAL_ROW).map(|value| &**value)
    }

    /// Sets (`Some`) or removes (`None`) the global record.
    pub fn set_global(&mut self, value: Option<Value>) -> Result<(), DomainError> {
        match value {
            Some(value) => {
                encode(&self.domain, &RecordId::Global, &value)?;
                self.rows.insert(GLOBAL_ROW.to_owned(), Arc::new(value));
            }
            None => {
                self.rows.remove(GLOBAL_ROW);
            }
        }
        Ok(())
    }

    /// The error a migration returns to refuse the stored data.
    pub fn fail(&self, message: impl Into<String>) -> DomainError {
        DomainError::MigrationFailed {
            domain: self.domain.clone(),
            from: self.from,
            to: self.to,
            message: message.into(),
        }
    }
}

/// The registry of storage domains over one store: who owns which name, and the open
/// domains. Cheap to clone; every clone is the same registry.
#[derive(Clone)]
pub struct Domains {
    registry: Arc<Registry>,
}

impl fmt::Debug for Domains {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        let state = self.registry.state.lock();
        let owners: BTreeMap<&str, &str> = state
            .claims
            .iter()
            .map(|(name, claim)| (name.as_str(), claim.owner.as_str()))
            .collect();
        formatter
            .debug_struct("Domains")
            .field("owners", &owners)
            .finish_non_exhaustive()
    }
}

impl Domains {
    /// A registry over `store`.
    pub fn new(store: Arc<dyn Store>) -> Self {
        Self {
            registry: Arc::new(Registry {
                store,
                state: Mutex::new(RegistryState::default()),
            }),
        }
    }

    /// The same registry bound to `owner`, for a plugin to open its domains later.
    pub fn for_owner(&self, owner: &str) -> PluginDomains {
        PluginDomains {
            domains: self.clone(),
            owner: Arc::from(owner),
        }
    }

    /// Opens `spec` for `owner` (H-DOM-1): refuses a name held by anyone
    /// (`DOMAIN_IN_USE`) or a newer stored version (`DOMAIN_VERSION_NEWER`), migrates an
    /// older one (`DOMAIN_MIGRATION_REQUIRED` without a migration), records the version
    /// of a new domain, and loads every row into memory. Must run inside a Tokio
    /// runtime, which then runs the domain's write queues. If a previous holder closed
    /// the name, waits for its queued writes first.
    pub async fn open(&self, spec: DomainSpec, owner: &str) -> Result<Domain, DomainError> {
        spec.validate()?;
        let runtime = Handle::try_current().map_err(|_| DomainError::NoRuntime {
            domain: spec.name.clone(),
        })?;
        let claim = self.claim(&spec.name, owner)?;
        if let Some(previous) = claim.previous.as_ref().and_then(Weak::upgrade) {
            previous.drain().await;
        }
        let inner = Arc::new(load(Arc::clone(&self.registry.store), spec, runtime).await?);
        let mut state = self.registry.state.lock();
        match state.claims.get_mut(inner.name.as_ref()) {
            Some(held) if held.token == claim.token => {
                held.open = Some(Arc::clone(&inner));
            }
            // Closed while opening.
            Some(_) | None => {
                return Err(DomainError::Closed {
                    domain: inner.name.to_string(),
                });
            }
        }
        drop(state);
        let opened = Arc::new(Opened {
            registry: Arc::clone(&claim.registry),
            name: claim.name.clone(),
            token: claim.token,
        });
        claim.keep();
        Ok(Domain {
            inner,
            _opened: opened,
        })
    }

    /// Closes the domain `name`: it takes no more writes (`DOMAIN_CLOSED`), its queued
    /// writes still finish, and the name is free for the next opener, which waits for
    /// them. Returns whether the name was held.
    pub fn close(&self, name: &str) -> bool {
        self.registry.close(name, None)
    }

    /// Closes every domain `owner` holds (when its plugin unmounts); returns their
    /// names, ascending.
    pub fn close_owner(&self, owner: &str) -> Vec<String> {
        let mut names: Vec<String> = self
            .registry
            .state
            .lock()
            .claims
            .iter()
            .filter(|(_, claim)| claim.owner == owner)
            .map(|(name, _)| name.clone())
            .collect();
        names.sort();
        for name in &names {
            self.close(name);
        }
        names
    }

    /// Who holds `name`, if anyone.
    pub fn owner(&self, name: &str) -> Option<String> {
        self.registry
            .state
            .lock()
            .claims
            .get(name)
            .map(|claim| claim.owner.clone())
    }

    fn claim(&self, name: &str, owner: &str) -> Result<ClaimGuard, DomainError> {
        let mut state = self.registry.state.lock();
        if let Some(held) = state.claims.get(name) {
            return Err(DomainError::InUse {
                domain: name.to_owned(),
                owner: held.owner.clone(),
            });
        }
        state.next_token += 1;
        let token = state.next_token;
        state.claims.insert(
            name.to_owned(),
            Claim {
                owner: owner.to_owned(),
                token,
                open: None,
            },
        );
        let previous = state.retired.remove(name);
        Ok(ClaimGuard {
            registry: Arc::clone(&self.registry),
            name: name.to_owned(),
            token,
            previous,
            kept: false,
        })
    }
}

/// The registry bound to one owner: what a plugin scope hands its plugin, so it can
/// open its domains (asynchronously, after mounting) under its own name.
#[derive(Debug, Clone)]
pub struct PluginDomains {
    domains: Domains,
    owner: Arc<str>,
}

impl PluginDomains {
    /// The owner's name.
    pub fn owner(&self) -> &str {
        &self.owner
    }

    /// [`Domains::open`] for this owner.
    pub async fn open(&self, spec: DomainSpec) -> Result<Domain, DomainError> {
        self.domains.open(spec, &self.owner).await
    }
}

/// An open storage domain. Cheap to clone; clones share memory and queues. Once every
/// clone (and every [`Table`] and [`Global`] of it) is dropped, the domain is closed
/// as [`Domains::close`] closes it.
#[derive(Clone)]
pub struct Domain {
    inner: Arc<DomainInner>,
    /// Held for its `Drop` only: the last handle closes the domain.
    _opened: Arc<Opened>,
}

impl fmt::Debug for Domain {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        formatter
            .debug_struct("Domain")
            .field("name", &self.inner.name)
            .field("version", &self.inner.version)
            .field("rows", &self.inner.rows.read().len())
            .field("closed", &self.is_closed())
            .finish()
    }
}

impl Domain {
    /// The domain's name.
    pub fn name(&self) -> &str {
        &self.inner.name
    }

    /// The schema version it was opened at.
    pub fn version(&self) -> u64 {
        self.inner.version
    }

    /// A declared table (`DOMAIN_UNKNOWN_TABLE` otherwise).
    pub fn table(&self, name: &str) -> Result<Table, DomainError> {
        match self.inner.tables.get(name) {
            Some(partition) => Ok(Table {
                domain: self.clone(),
                name: Arc::from(name),
                partition: partition.clone(),
            }),
            None => Err(DomainError::UnknownTable {
                domain: self.inner.name.to_string(),
                table: name.to_owned(),
            }),
        }
    }

    /// The global record (`DOMAIN_NO_GLOBAL` when the spec declared none).
    pub fn global(&self) -> Result<Global, DomainError> {
        match &self.inner.global_default {
            Some(default) => Ok(Global {
                domain: self.clone(),
                default: Arc::clone(default),
            }),
            None => Err(DomainError::NoGlobal {
                domain: self.inner.name.to_string(),
            }),
        }
    }

    /// Waits until every write queued before the call, in `partition` (`None`: in the
    /// whole domain, the domain-wide queue included), is settled, then returns the
    /// oldest failure in that scope that no ticket or flush has reported (H-DOM-4).
    /// Other unreported failures in the scope are dropped, so the next flush is `Ok`.
    pub async fn flush(&self, partition: Option<&str>) -> Result<(), DomainError> {
        self.inner.wait(partition).await;
        self.inner.take_unreported(partition)
    }

    /// Waits until every write queued before the call, in `partition` (`None`: in the
    /// whole domain), has been handed to the store, settled or not. The store applies
    /// and commits operations in the order it is given them, so whatever this caller
    /// gives the store next (an append, say) is durable no earlier than those writes:
    /// an ordering barrier that costs no commit of its own. Failures are left for the
    /// tickets and [`Domain::flush`] to report.
    pub async fn ordered(&self, partition: Option<&str>) {
        self.inner.wait_issued(partition).await;
    }

    /// Waits until every write queued before the call, in `partition` (`None`: in the
    /// whole domain), is settled, leaving failures for the tickets and
    /// [`Domain::flush`] to report.
    pub async fn settled(&self, partition: Option<&str>) {
        self.inner.wait(partition).await;
    }

    /// Change notifications: one per durable write, after memory shows it.
    pub fn subscribe(&self) -> broadcast::Receiver<DomainChanged> {
        self.inner.changes.subscribe()
    }

    /// Whether the domain was closed (it then refuses writes).
    pub fn is_closed(&self) -> bool {
        self.inner.state.lock().closed
    }
}

/// A declared table of a [`Domain`]: synchronous reads from memory, queued writes.
#[derive(Clone)]
pub struct Table {
    domain: Domain,
    name: Arc<str>,
    partition: Partition,
}

impl fmt::Debug for Table {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        formatter
            .debug_struct("Table")
            .field("domain", &self.domain.inner.name)
            .field("name", &self.name)
            .field("partition", &self.partition)
            .finish()
    }
}

impl Table {
    /// The table's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The partition a key's writes go through (`None`: the domain-wide queue); pass it
    /// to [`Domain::flush`].
    pub fn partition(&self, key: &str) -> Option<String> {
        self.partition.of(key)
    }

    /// The acknowledged value of `key`.
    pub fn get(&self, key: &str) -> Option<Arc<Value>> {
        self.domain
            .inner
            .rows
            .read()
            .get(&row_key(&self.name, key))
            .map(|row| Arc::clone(&row.value))
    }

    /// The acknowledged rows whose key starts with `prefix`, ascending by key.
    pub fn entries(&self, prefix: &str) -> Vec<(String, Arc<Value>)> {
        let rows = self.domain.inner.rows.read();
        let start = row_key(&self.name, prefix);
        let table_prefix = row_key(&self.name, "");
        rows.range(start.clone()..)
            .take_while(|(row, _)| row.starts_with(&start))
            .filter_map(|(row, stored)| {
                row.strip_prefix(&table_prefix)
                    .map(|key| (key.to_owned(), Arc::clone(&stored.value)))
            })
            .collect()
    }

    /// How many acknowledged rows have a key starting with `prefix`, counted in place
    /// (no key or value is copied).
    pub fn count(&self, prefix: &str) -> usize {
        let rows = self.domain.inner.rows.read();
        let start = row_key(&self.name, prefix);
        rows.range(start.clone()..)
            .take_while(|(row, _)| row.starts_with(&start))
            .count()
    }

    /// Drops `key`'s acknowledged row from memory; the store keeps it. A row with a
    /// write queued or in flight stays. Returns whether a row was
    /// dropped. Until [`Table::load`] brings it back, readers see the key as absent and
    /// a write to it works against absence (a put expects no row and fails with
    /// `CAS_CONFLICT`; an update sees `None`): a plugin evicts only rows it loads again
    /// before it reads or writes them, so memory holds the rows in use, not every row
    /// ever written (the journal keeps the records of the sessions it is driving).
    pub fn evict(&self, key: &str) -> bool {
        let inner = &self.domain.inner;
        let state = inner.state.lock();
        let row = row_key(&self.name, key);
        if state.writing(&self.partition.queue(key), &row) {
            return false;
        }
        inner.rows.write().remove(&row).is_some()
    }

    /// [`Table::evict`] of every row whose key starts with `prefix`; returns how many
    /// were dropped.
    pub fn evict_prefix(&self, prefix: &str) -> usize {
        let inner = &self.domain.inner;
        let state = inner.state.lock();
        let mut rows = inner.rows.write();
        let start = row_key(&self.name, prefix);
        let table_prefix = row_key(&self.name, "");
        let idle: Vec<String> = rows
            .range(start.clone()..)
            .take_while(|(row, _)| row.starts_with(&start))
            .map(|(row, _)| row.clone())
            .filter(|row| {
                row.strip_prefix(&table_prefix)
                    .is_some_and(|key| !state.writing(&self.partition.queue(key), row))
            })
            .collect();
        for row in &idle {
            rows.remove(row);
        }
        idle.len()
    }

    /// Brings `key`'s stored row back into memory when memory holds no row for it and
    /// no write to it is queued or in flight (memory then knows better than the store),
    /// and returns what memory holds for the key after it.
    pub async fn load(&self, key: &str) -> Result<Option<Arc<Value>>, DomainError> {
        let reading = Reading::begin(&self.domain.inner);
        let stored = self.stored_entry(key).await?;
        if let Some(entry) = stored {
            self.adopt(vec![(key.to_owned(), entry)], &reading);
        }
        drop(reading);
        Ok(self.get(key))
    }

    /// [`Table::load`] of every stored row whose key starts with `prefix` (a bounded
    /// prefix: a session's rows, not a whole table); returns what memory holds under
    /// the prefix after it, ascending by key.
    pub async fn load_prefix(
        &self,
        prefix: &str,
    ) -> Result<Vec<(String, Arc<Value>)>, DomainError> {
        let reading = Reading::begin(&self.domain.inner);
        let stored = self.stored_entries(prefix).await?;
        self.adopt(stored, &reading);
        drop(reading);
        Ok(self.entries(prefix))
    }

    /// `key`'s value as the store holds it, read from the store; memory is left as it
    /// is. For readers of rows that may be evicted ([`Table::evict`]) who do not keep
    /// what they read.
    pub async fn stored(&self, key: &str) -> Result<Option<Arc<Value>>, DomainError> {
        let inner = &self.domain.inner;
        let row = row_key(&self.name, key);
        match self.stored_entry(key).await? {
            Some(entry) => Ok(Some(Arc::new(decode(&inner.name, &row, &entry.value)?))),
            None => Ok(None),
        }
    }

    /// [`Table::stored`] of every stored row whose key starts with `prefix`, ascending
    /// by key.
    pub async fn stored_prefix(
        &self,
        prefix: &str,
    ) -> Result<Vec<(String, Arc<Value>)>, DomainError> {
        let stored = self.stored_entries(prefix).await?;
        self.decoded(stored)
    }

    /// One page of the stored rows whose key starts with `prefix`, after the key
    /// `after` (`None`: from the first), ascending by key: at most `limit` rows; a
    /// shorter page is the last. Memory is left as it is. For a pass over an
    /// [`TableSpec::on_demand`] table that keeps only what it needs.
    pub async fn stored_page(
        &self,
        prefix: &str,
        after: Option<&str>,
        limit: usize,
    ) -> Result<Vec<(String, Arc<Value>)>, DomainError> {
        let after = after.map(|key| row_key(&self.name, key));
        let stored = self.stored_rows(prefix, after, limit.max(1)).await?;
        self.decoded(stored)
    }

    /// The keys of every stored row whose key starts with `prefix`, ascending; no row
    /// is built (each is only checked to be JSON, as a read of it would be) and memory
    /// is left as it is. For counting or listing rows whose values the caller does not
    /// need.
    pub async fn stored_keys(&self, prefix: &str) -> Result<Vec<String>, DomainError> {
        let name = &self.domain.inner.name;
        self.stored_entries(prefix)
            .await?
            .into_iter()
            .map(|(key, entry)| {
                decode_as::<serde::de::IgnoredAny>(name, &row_key(&self.name, &key), &entry.value)?;
                Ok(key)
            })
            .collect()
    }

    /// [`Table::stored_page`] with each row read as a `T` straight from its stored
    /// bytes, building no JSON tree: `None` for a row that is JSON but not a `T`; a
    /// row that is not JSON fails as `Corrupt`, as in [`Table::stored_page`]. For a
    /// pass over many rows that needs a few fields of each (a journal's open reads
    /// every record's head), where building each whole row would cost most of the
    /// pass.
    pub async fn stored_page_as<T: serde::de::DeserializeOwned>(
        &self,
        prefix: &str,
        after: Option<&str>,
        limit: usize,
    ) -> Result<Vec<(String, Option<T>)>, DomainError> {
        let after = after.map(|key| row_key(&self.name, key));
        let stored = self.stored_rows(prefix, after, limit.max(1)).await?;
        let name = &self.domain.inner.name;
        stored
            .into_iter()
            .map(|(key, entry)| {
                let row = decode_as(name, &row_key(&self.name, &key), &entry.value)?;
                Ok((key, row))
            })
            .collect()
    }

    /// Stored rows (by key) decoded; a row that is not JSON fails as `Corrupt`.
    fn decoded(
        &self,
        stored: Vec<(String, KvEntry)>,
    ) -> Result<Vec<(String, Arc<Value>)>, DomainError> {
        let inner = &self.domain.inner;
        stored
            .into_iter()
            .map(|(key, entry)| {
                let value = decode(&inner.name, &row_key(&self.name, &key), &entry.value)?;
                Ok((key, Arc::new(value)))
            })
            .collect()
    }

    /// One page of the stored rows whose key starts with `prefix`, after the row
    /// `after`, by key (the table's prefix taken off).
    async fn stored_rows(
        &self,
        prefix: &str,
        after: Option<String>,
        limit: usize,
    ) -> Result<Vec<(String, KvEntry)>, DomainError> {
        let inner = &self.domain.inner;
        let table_prefix = row_key(&self.name, "");
        let page = inner
            .store
            .kv_scan(
                &inner.name,
                &row_key(&self.name, prefix),
                KvPage {
                    after,
                    limit: Some(limit),
                },
            )
            .await
            .map_err(|source| inner.store_error(&self.record(prefix), source))?;
        Ok(page
            .into_iter()
            .filter_map(|(row, entry)| {
                row.strip_prefix(&table_prefix)
                    .map(|key| (key.to_owned(), entry))
            })
            .collect())
    }

    /// `key`'s stored row.
    async fn stored_entry(&self, key: &str) -> Result<Option<KvEntry>, DomainError> {
        let inner = &self.domain.inner;
        let row = checked_row(&inner.name, &self.name, key)?;
        inner
            .store
            .kv_get(&inner.name, &row)
            .await
            .map_err(|source| inner.store_error(&self.record(key), source))
    }

    /// The stored rows whose key starts with `prefix`, by key (the table's prefix
    /// taken off), read a page at a time.
    async fn stored_entries(&self, prefix: &str) -> Result<Vec<(String, KvEntry)>, DomainError> {
        let mut rows = Vec::new();
        let mut after = None;
        // A short first page: most prefixes (a session's rows) hold few rows or none,
        // and a store may read a short page more cheaply.
        let mut limit = FIRST_PREFIX_PAGE;
        loop {
            let page = self.stored_rows(prefix, after.clone(), limit).await?;
            let full = page.len() == limit;
            limit = SCAN_PAGE;
            after = page.last().map(|(key, _)| row_key(&self.name, key));
            rows.extend(page);
            if !full || after.is_none() {
                return Ok(rows);
            }
        }
    }

    /// Puts stored rows (by key) into memory where it holds none, no write to the row
    /// is queued or in flight, and none was applied since `reading` began (what the
    /// store answered may be older than what memory saw since: a row deleted while the
    /// read was on its way back must not come back). A row that is not JSON is left out
    /// (a read of it through [`Table::stored`] says why).
    fn adopt(&self, stored: Vec<(String, KvEntry)>, reading: &Reading<'_>) {
        let inner = &self.domain.inner;
        let decoded: Vec<(String, String, Row)> = stored
            .into_iter()
            .filter_map(|(key, entry)| {
                let row = row_key(&self.name, &key);
                let value = decode(&inner.name, &row, &entry.value).ok()?;
                Some((
                    key,
                    row,
                    Row {
                        version: entry.version,
                        value: Arc::new(value),
                    },
                ))
            })
            .collect();
        let state = inner.state.lock();
        let mut rows = inner.rows.write();
        for (key, row, stored) in decoded {
            if !state.writing(&self.partition.queue(&key), &row)
                && !state.written_since(&row, reading.since)
            {
                rows.entry(row).or_insert(stored);
            }
        }
    }

    /// Queues writing `value` at `key`, expecting the version memory holds (a row
    /// written behind the domain's back makes it fail with `CAS_CONFLICT`). Fails at
    /// once, queueing nothing, on a bad key or an oversized value.
    pub fn put(&self, key: &str, value: Value) -> Result<WriteTicket, DomainError> {
        self.put_with(key, value, false)
    }

    /// [`Table::put`] for a write the caller follows at once with writes of its own
    /// and a flush (an agent's inbox row, then the turn it opens): the store may keep
    /// its group open for them ([`Store::kv_cas_lingering`]), so they commit together.
    /// The ticket resolves with that commit.
    pub fn put_lingering(&self, key: &str, value: Value) -> Result<WriteTicket, DomainError> {
        self.put_with(key, value, true)
    }

    fn put_with(&self, key: &str, value: Value, linger: bool) -> Result<WriteTicket, DomainError> {
        let record = self.record(key);
        let row = checked_row(&self.domain.inner.name, &self.name, key)?;
        let bytes = encode(&self.domain.inner.name, &record, &value)?;
        self.domain.inner.submit(
            self.partition.queue(key),
            record,
            row,
            Write::Put {
                value: Arc::new(value),
                bytes,
                linger,
            },
        )
    }

    /// Queues deleting `key` (nothing to do when it is absent by then). Absent means
    /// absent from memory: deleting a row [`Table::evict`] dropped writes nothing, so
    /// [`Table::load`] it first.
    pub fn delete(&self, key: &str) -> Result<WriteTicket, DomainError> {
        let record = self.record(key);
        let row = checked_row(&self.domain.inner.name, &self.name, key)?;
        self.domain
            .inner
            .submit(self.partition.queue(key), record, row, Write::Delete)
    }

    /// Queues `f` over the value at `key` (`None`: absent); `f` returns the new value,
    /// or `None` to delete. `f` runs in the queue once earlier writes to the key are
    /// settled; on a `CAS_CONFLICT` it runs again over the re-read stored row, at
    /// most 16 times in all. Returning the current value writes nothing. A value over
    /// the limit fails the write (`VALUE_TOO_LARGE`) through the ticket.
    pub fn update(
        &self,
        key: &str,
        f: impl FnMut(Option<&Value>) -> Option<Value> + Send + 'static,
    ) -> Result<WriteTicket, DomainError> {
        let record = self.record(key);
        let row = checked_row(&self.domain.inner.name, &self.name, key)?;
        self.domain.inner.submit(
            self.partition.queue(key),
            record,
            row,
            Write::Update(Box::new(f)),
        )
    }

    fn record(&self, key: &str) -> RecordId {
        RecordId::Row {
            table: self.name.to_string(),
            key: preview(key),
        }
    }
}

/// The global record of a [`Domain`]: one value for the whole domain, written through
/// the domain-wide queue.
#[derive(Clone)]
pub struct Global {
    domain: Domain,
    default: Arc<Value>,
}

impl fmt::Debug for Global {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        formatter
            .debug_struct("Global")
            .field("domain", &self.domain.inner.name)
            .finish_non_exhaustive()
    }
}

impl Global {
    /// The acknowledged value, or the spec's default while none is stored.
    pub fn get(&self) -> Arc<Value> {
        self.domain
            .inner
            .rows
            .read()
            .get(GLOBAL_ROW)
            .map_or_else(|| Arc::clone(&self.default), |row| Arc::clone(&row.value))
    }

    /// Queues setting the value (see [`Table::put`]).
    pub fn set(&self, value: Value) -> Result<WriteTicket, DomainError> {
        let bytes = encode(&self.domain.inner.name, &RecordId::Global, &value)?;
        self.domain.inner.submit(
            QueueKey::Domain,
            RecordId::Global,
            GLOBAL_ROW.to_owned(),
            Write::Put {
                value: Arc::new(value),
                bytes,
                linger: false,
            },
        )
    }

    /// Queues `f` over the current value (the default while none is stored), as
    /// [`Table::update`] does.
    pub fn update(
        &self,
        mut f: impl FnMut(&Value) -> Value + Send + 'static,
    ) -> Result<WriteTicket, DomainError> {
        let default = Arc::clone(&self.default);
        self.domain.inner.submit(
            QueueKey::Domain,
            RecordId::Global,
            GLOBAL_ROW.to_owned(),
            Write::Update(Box::new(move |current: Option<&Value>| {
                Some(f(current.unwrap_or(&default)))
            })),
        )
    }
}

/// A queued write: resolves once it is durable and visible in memory, or failed.
/// Dropping it does not cancel the write; an error it yields counts as reported, so
/// [`Domain::flush`] does not return it again.
pub struct WriteTicket {
    receiver: oneshot::Receiver<Result<(), DomainError>>,
    domain: Arc<DomainInner>,
    op: u64,
    record: RecordId,
}

impl fmt::Debug for WriteTicket {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        formatter
            .debug_struct("WriteTicket")
            .field("domain", &self.domain.name)
            .field("record", &self.record)
            .finish_non_exhaustive()
    }
}

impl Future for WriteTicket {
    type Output = Result<(), DomainError>;

    fn poll(mut self: Pin<&mut Self>, context: &mut Context<'_>) -> Poll<Self::Output> {
        let outcome = match Pin::new(&mut self.receiver).poll(context) {
            Poll::Pending => return Poll::Pending,
            Poll::Ready(Ok(outcome)) => outcome,
            Poll::Ready(Err(_)) => Err(DomainError::WriteAborted {
                domain: self.domain.name.to_string(),
                record: self.record.clone(),
            }),
        };
        if outcome.is_err() {
            let op = self.op;
            self.domain
                .state
                .lock()
                .unreported
                .retain(|failed| failed.op != op);
        }
        Poll::Ready(outcome)
    }
}

// ---------------------------------------------------------------------------------
// Internals.

/// How a table maps keys to queues.
#[derive(Clone)]
enum Partition {
    Domain,
    FirstSegment,
    Custom(Arc<dyn Fn(&str) -> String + Send + Sync>),
}

impl Partition {
    fn of(&self, key: &str) -> Option<String> {
        match self {
            Partition::Domain => None,
            Partition::FirstSegment => Some(
                key.split_once('/')
                    .map_or(key, |(first, _)| first)
                    .to_owned(),
            ),
            Partition::Custom(partition) => Some(partition(key)),
        }
    }

    fn queue(&self, key: &str) -> QueueKey {
        self.of(key).map_or(QueueKey::Domain, QueueKey::Named)
    }
}

impl fmt::Debug for Partition {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        formatter.write_str(match self {
            Partition::Domain => "Domain",
            Partition::FirstSegment => "FirstSegment",
            Partition::Custom(_) => "Custom",
        })
    }
}

/// A write queue: the domain-wide one, or a named partition.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
enum QueueKey {
    Domain,
    Named(String),
}

impl QueueKey {
    fn in_scope(&self, partition: Option<&str>) -> bool {
        match (partition, self) {
            (None, _) => true,
            (Some(wanted), QueueKey::Named(name)) => wanted == name,
            (Some(_), QueueKey::Domain) => false,
        }
    }
}

struct Registry {
    store: Arc<dyn Store>,
    state: Mutex<RegistryState>,
}

#[derive(Default)]
struct RegistryState {
    claims: HashMap<String, Claim>,
    /// Closed domains whose writes may still be in flight, by name.
    retired: HashMap<String, Weak<DomainInner>>,
    next_token: u64,
}

impl Registry {
    /// Closes `name` (only the claim `token` names, when given): see [`Domains::close`].
    fn close(&self, name: &str, token: Option<u64>) -> bool {
        let mut state = self.state.lock();
        // Only the claim named: a later opener's claim on the name stays.
        let named = state
            .claims
            .get(name)
            .is_some_and(|claim| token.is_none_or(|token| token == claim.token));
        let Some(claim) = named.then(|| state.claims.remove(name)).flatten() else {
            return false;
        };
        if let Some(inner) = claim.open {
            inner.state.lock().closed = true;
            state
                .retired
                .insert(name.to_owned(), Arc::downgrade(&inner));
        }
        true
    }
}

/// Shared by every handle of one open domain: when the last handle goes without a
/// [`Domains::close`] (its opener dropped it: a set-up that failed or was cancelled
/// after the open), the domain closes as `close` would, so the name does not stay
/// taken for the rest of the process.
struct Opened {
    registry: Arc<Registry>,
    name: String,
    token: u64,
}

impl Drop for Opened {
    fn drop(&mut self) {
        self.registry.close(&self.name, Some(self.token));
    }
}

struct Claim {
    owner: String,
    /// Tells this claim from a later one on the same name.
    token: u64,
    /// Set once the domain is loaded.
    open: Option<Arc<DomainInner>>,
}

/// Releases a claim whose `open` failed or was dropped.
struct ClaimGuard {
    registry: Arc<Registry>,
    name: String,
    token: u64,
    previous: Option<Weak<DomainInner>>,
    kept: bool,
}

impl ClaimGuard {
    fn keep(mut self) {
        self.kept = true;
    }
}

impl Drop for ClaimGuard {
    fn drop(&mut self) {
        if self.kept {
            return;
        }
        let mut state = self.registry.state.lock();
        if state
            .claims
            .get(&self.name)
            .is_some_and(|claim| claim.token == self.token)
        {
            state.claims.remove(&self.name);
        }
    }
}

#[derive(Clone)]
struct Row {
    version: u64,
    value: Arc<Value>,
}

struct DomainInner {
    name: Arc<str>,
    version: u64,
    store: Arc<dyn Store>,
    runtime: Handle,
    tables: BTreeMap<String, Partition>,
    global_default: Option<Arc<Value>>,
    /// Acknowledged rows by row key. Lock order: `state` before `rows`.
    rows: RwLock<BTreeMap<String, Row>>,
    state: Mutex<WriteState>,
    changes: broadcast::Sender<DomainChanged>,
}

impl WriteState {
    /// Whether a write to `row` (in `queue`) is queued or in flight.
    fn writing(&self, queue: &QueueKey, row: &str) -> bool {
        self.queues.get(queue).is_some_and(|queue| {
            queue.flying.contains(row) || queue.ops.iter().any(|op| op.row == row)
        })
    }

    /// Whether a write to `row` was applied after generation `since` (while a load
    /// that began then was reading the store).
    fn written_since(&self, row: &str, since: u64) -> bool {
        self.written_while_loading
            .get(row)
            .is_some_and(|&applied| applied > since)
    }

    /// Counts a write to `row` about to be applied, marking the row for the loads
    /// reading the store meanwhile.
    fn applying(&mut self, row: &str) {
        self.generation += 1;
        if self.loads > 0 {
            self.written_while_loading
                .insert(row.to_owned(), self.generation);
        }
    }
}

#[derive(Default)]
struct WriteState {
    closed: bool,
    /// A queue exists exactly while its worker runs.
    queues: HashMap<QueueKey, Queue>,
    next_op: u64,
    /// Failed writes no ticket or flush has reported, oldest first.
    unreported: Vec<Unreported>,
    /// Writes applied to memory so far.
    generation: u64,
    /// Loads reading the store now ([`Reading`]).
    loads: usize,
    /// The rows written while loads were reading the store, with the generation of
    /// their last write; emptied whenever no load is reading.
    written_while_loading: HashMap<String, u64>,
}

/// A load reading the store: from its beginning, every write applied is marked so that
/// the load does not put back what it read of the row ([`WriteState::written_since`]).
struct Reading<'a> {
    inner: &'a DomainInner,
    /// The generation when it began.
    since: u64,
}

impl<'a> Reading<'a> {
    fn begin(inner: &'a DomainInner) -> Self {
        let mut state = inner.state.lock();
        state.loads += 1;
        Self {
            inner,
            since: state.generation,
        }
    }
}

impl Drop for Reading<'_> {
    fn drop(&mut self) {
        let mut state = self.inner.state.lock();
        state.loads -= 1;
        if state.loads == 0 {
            state.written_while_loading.clear();
        }
    }
}

struct Queue {
    ops: VecDeque<QueuedOp>,
    /// Writes ever queued here; `settled` counts the finished ones.
    queued: u64,
    settled: Arc<watch::Sender<u64>>,
    /// The op id of the last write queued here.
    last_op: u64,
    /// The op id of the last write handed to the store (ops are issued in op order).
    issued: Arc<watch::Sender<u64>>,
    /// The rows of the writes handed to the store and not settled yet: the worker's
    /// current round and [`Queue::early`].
    flying: HashSet<String>,
    /// Puts and deletes handed to the store at submit, behind the worker's round (their
    /// rows distinct from every write in flight, nothing unissued before them); the
    /// worker settles them, in op order, before it takes the next round.
    early: Vec<Issued>,
    /// The worker is issuing a round outside the state lock: nothing is issued at
    /// submit meanwhile (it would overtake the round).
    issuing: bool,
}

struct Unreported {
    op: u64,
    queue: QueueKey,
    error: DomainError,
}

type UpdateFn = Box<dyn FnMut(Option<&Value>) -> Option<Value> + Send>;

enum Write {
    Put {
        value: Arc<Value>,
        bytes: Vec<u8>,
        /// Written with [`Store::kv_cas_lingering`] ([`Table::put_lingering`]).
        linger: bool,
    },
    Delete,
    Update(UpdateFn),
}

struct QueuedOp {
    op: u64,
    record: RecordId,
    row: String,
    write: Write,
    reply: oneshot::Sender<Result<(), DomainError>>,
}

/// A write of the current round, its compare-and-swap already issued (or settled).
struct Issued {
    op: u64,
    record: RecordId,
    row: String,
    update: Option<UpdateFn>,
    reply: oneshot::Sender<Result<(), DomainError>>,
    step: Step,
}

enum Step {
    Pending {
        ticket: Ticket<Option<u64>>,
        value: Option<Arc<Value>>,
    },
    Done(Result<(), DomainError>),
}

/// What an update function asked for.
enum Change {
    /// It returned the current value.
    Unchanged,
    /// Write `value` (`None`: delete), encoded as `bytes`.
    Write {
        value: Option<Arc<Value>>,
        bytes: Option<Vec<u8>>,
    },
}

impl DomainInner {
    fn submit(
        self: &Arc<Self>,
        queue: QueueKey,
        record: RecordId,
        row: String,
        write: Write,
    ) -> Result<WriteTicket, DomainError> {
        let (reply, receiver) = oneshot::channel();
        let mut state = self.state.lock();
        if state.closed {
            return Err(DomainError::Closed {
                domain: self.name.to_string(),
            });
        }
        state.next_op += 1;
        let op = state.next_op;
        let start_worker = !state.queues.contains_key(&queue);
        let entry = state.queues.entry(queue.clone()).or_insert_with(|| Queue {
            ops: VecDeque::new(),
            queued: 0,
            settled: Arc::new(watch::Sender::new(0)),
            last_op: 0,
            issued: Arc::new(watch::Sender::new(0)),
            flying: HashSet::new(),
            early: Vec::new(),
            issuing: false,
        });
        entry.queued += 1;
        entry.last_op = op;
        // A put or delete with nothing unissued before it in its queue, on a row no
        // write in flight touches, is handed to the store now, in the caller's order
        // among its other store calls: its expected version is the acknowledged row's,
        // and the store makes writes durable in call order. Issued under the state
        // lock (and never while the worker issues a round), so writes reach the store
        // in op order. An update's function runs in the worker, never on the caller's
        // stack.
        let issue_now = !matches!(write, Write::Update(_))
            && !entry.issuing
            && entry.ops.is_empty()
            && !entry.flying.contains(&row);
        let queued = QueuedOp {
            op,
            record: record.clone(),
            row,
            write,
            reply,
        };
        let mut first = None;
        if issue_now {
            entry.flying.insert(queued.row.clone());
            let issued = self.issue(queued);
            entry.issued.send_modify(|last| *last = (*last).max(op));
            if start_worker {
                first = Some(issued);
            } else {
                entry.early.push(issued);
            }
        } else {
            entry.ops.push_back(queued);
        }
        drop(state);
        if start_worker {
            self.runtime
                .spawn(run_queue(Arc::clone(self), queue, first));
        }
        Ok(WriteTicket {
            receiver,
            domain: Arc::clone(self),
            op,
            record,
        })
    }

    /// Issues one op's compare-and-swap against the acknowledged row.
    fn issue(&self, queued: QueuedOp) -> Issued {
        let QueuedOp {
            op,
            record,
            row,
            write,
            reply,
        } = queued;
        let base = self.rows.read().get(&row).cloned();
        let expected = base.as_ref().map(|stored| stored.version);
        let linger = matches!(write, Write::Put { linger: true, .. });
        let (update, change) = match write {
            Write::Put { value, bytes, .. } => (
                None,
                Ok(Change::Write {
                    value: Some(value),
                    bytes: Some(bytes),
                }),
            ),
            Write::Delete if base.is_none() => (None, Ok(Change::Unchanged)),
            Write::Delete => (
                None,
                Ok(Change::Write {
                    value: None,
                    bytes: None,
                }),
            ),
            Write::Update(mut f) => {
                let change = self.compute(&record, &mut f, base.as_ref().map(|row| &*row.value));
                (Some(f), change)
            }
        };
        let step = match change {
            Err(error) => Step::Done(Err(error)),
            Ok(Change::Unchanged) => Step::Done(Ok(())),
            Ok(Change::Write { value, bytes }) => Step::Pending {
                ticket: if linger {
                    self.store
                        .kv_cas_lingering(&self.name, &row, expected, bytes)
                } else {
                    self.store.kv_cas(&self.name, &row, expected, bytes)
                },
                value,
            },
        };
        Issued {
            op,
            record,
            row,
            update,
            reply,
            step,
        }
    }

    /// Awaits an issued write; on success memory and subscribers see it.
    async fn settle(
        &self,
        record: &RecordId,
        row: &str,
        update: Option<UpdateFn>,
        step: Step,
    ) -> Result<(), DomainError> {
        let (ticket, value) = match step {
            Step::Done(result) => return result,
            Step::Pending { ticket, value } => (ticket, value),
        };
        match ticket.await {
            Ok(version) => {
                self.apply(record, row, version, value);
                Ok(())
            }
            Err(conflict @ StoreError::CasConflict { .. }) => match update {
                Some(mut f) => self.retry_update(record, row, &mut f, conflict).await,
                None => Err(self.store_error(record, conflict)),
            },
            Err(source) => Err(self.store_error(record, source)),
        }
    }

    /// The CAS loop of an update whose first attempt conflicted: re-read the stored
    /// row, rerun `f`, write against the stored version.
    async fn retry_update(
        &self,
        record: &RecordId,
        row: &str,
        f: &mut UpdateFn,
        conflict: StoreError,
    ) -> Result<(), DomainError> {
        let mut last_conflict = conflict;
        for _ in 1..MAX_UPDATE_ATTEMPTS {
            let stored = self
                .store
                .kv_get(&self.name, row)
                .await
                .map_err(|source| self.store_error(record, source))?;
            let base = match stored {
                Some(entry) => Some(Row {
                    version: entry.version,
                    value: Arc::new(decode(&self.name, row, &entry.value)?),
                }),
                None => None,
            };
            let expected = base.as_ref().map(|stored| stored.version);
            match self.compute(record, f, base.as_ref().map(|row| &*row.value))? {
                Change::Unchanged => {
                    // Nothing to write, but memory was stale: adopt the durable row.
                    let (version, value) = match base {
                        Some(row) => (Some(row.version), Some(row.value)),
                        None => (None, None),
                    };
                    self.apply(record, row, version, value);
                    return Ok(());
                }
                Change::Write { value, bytes } => {
                    match self.store.kv_cas(&self.name, row, expected, bytes).await {
                        Ok(version) => {
                            self.apply(record, row, version, value);
                            return Ok(());
                        }
                        Err(conflict @ StoreError::CasConflict { .. }) => {
                            last_conflict = conflict;
                        }
                        Err(source) => return Err(self.store_error(record, source)),
                    }
                }
            }
        }
        Err(self.store_error(record, last_conflict))
    }

    /// Runs an update function over `base`, catching a panic, and encodes its result.
    fn compute(
        &self,
        record: &RecordId,
        f: &mut UpdateFn,
        base: Option<&Value>,
    ) -> Result<Change, DomainError> {
        let next = catch_unwind(AssertUnwindSafe(|| f(base))).map_err(|_| {
            DomainError::UpdatePanicked {
                domain: self.name.to_string(),
                record: record.clone(),
            }
        })?;
        if next.as_ref() == base {
            return Ok(Change::Unchanged);
        }
        match next {
            Some(value) => {
                let bytes = encode(&self.name, record, &value)?;
                Ok(Change::Write {
                    value: Some(Arc::new(value)),
                    bytes: Some(bytes),
                })
            }
            None => Ok(Change::Write {
                value: None,
                bytes: None,
            }),
        }
    }

    /// Makes a durable write visible, then tells subscribers.
    fn apply(&self, record: &RecordId, row: &str, version: Option<u64>, value: Option<Arc<Value>>) {
        // Marked before memory changes: a load's adopt (which holds the state lock while
        // it puts rows in) either sees the mark or comes before this write replaces
        // what it put.
        self.state.lock().applying(row);
        {
            let mut rows = self.rows.write();
            match (version, value) {
                (Some(version), Some(value)) => {
                    if rows
                        .get(row)
                        .is_some_and(|stored| stored.version == version && stored.value == value)
                    {
                        return;
                    }
                    rows.insert(row.to_owned(), Row { version, value });
                }
                (None, _) | (Some(_), None) => {
                    if rows.remove(row).is_none() {
                        return;
                    }
                }
            }
        }
        // No subscribers is fine.
        let _ = self.changes.send(DomainChanged {
            domain: Arc::clone(&self.name),
            record: record.clone(),
            version,
        });
    }

    fn store_error(&self, record: &RecordId, source: StoreError) -> DomainError {
        DomainError::Store {
            domain: self.name.to_string(),
            record: Some(record.clone()),
            source: Box::new(source),
        }
    }

    fn remember(&self, op: u64, queue: &QueueKey, error: DomainError) {
        tracing::debug!(domain = %self.name, code = error.code(), error = %error, "domain write failed");
        let mut state = self.state.lock();
        if state.unreported.len() >= MAX_UNREPORTED {
            tracing::warn!(domain = %self.name, error = %error, "too many unreported domain write errors; dropping this one");
            return;
        }
        state.unreported.push(Unreported {
            op,
            queue: queue.clone(),
            error,
        });
    }

    /// Waits until the writes queued so far in `partition`'s scope are settled.
    async fn wait(&self, partition: Option<&str>) {
        self.wait_each(partition, |queue| (queue.settled.subscribe(), queue.queued))
            .await;
    }

    /// Waits until every write queued before the call in `partition`'s scope has been
    /// handed to the store (not necessarily settled).
    async fn wait_issued(&self, partition: Option<&str>) {
        self.wait_each(partition, |queue| (queue.issued.subscribe(), queue.last_op))
            .await;
    }

    /// Waits until each queue in `partition`'s scope has its counter, as `watched`
    /// picks it (with the target read now), at or past that target.
    async fn wait_each(
        &self,
        partition: Option<&str>,
        watched: impl Fn(&Queue) -> (watch::Receiver<u64>, u64),
    ) {
        let waits: Vec<(watch::Receiver<u64>, u64)> = self
            .state
            .lock()
            .queues
            .iter()
            .filter(|(queue, _)| queue.in_scope(partition))
            .map(|(_, queue)| watched(queue))
            .collect();
        for (mut counter, target) in waits {
            // An error means the worker is gone, hence done.
            let _reached = counter.wait_for(|value| *value >= target).await.is_ok();
        }
    }

    /// Every queued write settled, errors left for whoever reports them.
    async fn drain(&self) {
        self.wait(None).await;
    }

    /// Removes the unreported failures in `partition`'s scope and returns the oldest
    /// (by call order).
    fn take_unreported(&self, partition: Option<&str>) -> Result<(), DomainError> {
        let in_scope: Vec<Unreported> = {
            let mut state = self.state.lock();
            let (in_scope, rest) = std::mem::take(&mut state.unreported)
                .into_iter()
                .partition(|failed: &Unreported| failed.queue.in_scope(partition));
            state.unreported = rest;
            in_scope
        };
        let dropped = in_scope.len().saturating_sub(1);
        let Some(oldest) = in_scope.into_iter().min_by_key(|failed| failed.op) else {
            return Ok(());
        };
        if dropped > 0 {
            tracing::warn!(domain = %self.name, dropped, "flush reports only the oldest unreported domain write error");
        }
        Err(oldest.error)
    }
}

/// One worker per busy queue: rounds of distinct-key writes issued together, settled
/// in order, until the queue is empty.
async fn run_queue(inner: Arc<DomainInner>, queue: QueueKey, first: Option<Issued>) {
    let Some((settled, issued_up_to)) = inner
        .state
        .lock()
        .queues
        .get(&queue)
        .map(|entry| (Arc::clone(&entry.settled), Arc::clone(&entry.issued)))
    else {
        return;
    };
    let mut issued: Vec<Issued> = first.into_iter().collect();
    loop {
        for write in issued.drain(..) {
            let Issued {
                op,
                record,
                row,
                update,
                reply,
                step,
            } = write;
            let outcome = inner.settle(&record, &row, update, step).await;
            if let Err(error) = &outcome {
                // Before the reply, so the ticket that yields it can mark it reported.
                inner.remember(op, &queue, error.clone());
            }
            // The ticket may have been dropped; the failure stays remembered.
            let _ = reply.send(outcome);
            settled.send_modify(|count| *count += 1);
        }
        let round = {
            let mut state = inner.state.lock();
            let Some(entry) = state.queues.get_mut(&queue) else {
                return;
            };
            if !entry.early.is_empty() {
                // Issued after the writes just settled; nothing unissued is before them.
                issued = std::mem::take(&mut entry.early);
                entry.flying = issued.iter().map(|write| write.row.clone()).collect();
                continue;
            }
            if entry.ops.is_empty() {
                state.queues.remove(&queue);
                return;
            }
            let round = take_round(&mut entry.ops);
            entry.flying = round.iter().map(|op| op.row.clone()).collect();
            entry.issuing = true;
            round
        };
        let last = round.last().map_or(0, |op| op.op);
        // Outside the state lock (an update's function runs here); `issuing` keeps
        // submits from issuing past the round meanwhile.
        issued = round.into_iter().map(|op| inner.issue(op)).collect();
        issued_up_to.send_modify(|up_to| *up_to = (*up_to).max(last));
        if let Some(entry) = inner.state.lock().queues.get_mut(&queue) {
            entry.issuing = false;
        }
    }
}

/// The longest prefix of `ops` with distinct rows, so each write's expected version
/// can come from memory after the previous round.
fn take_round(ops: &mut VecDeque<QueuedOp>) -> Vec<QueuedOp> {
    let mut rows = HashSet::new();
    let mut round = Vec::new();
    while round.len() < MAX_BATCH {
        match ops.front() {
            Some(next) if rows.insert(next.row.clone()) => {}
            Some(_) | None => break,
        }
        if let Some(op) = ops.pop_front() {
            round.push(op);
        }
    }
    round
}

/// Loads (and if needed migrates) a domain's rows.
async fn load(
    store: Arc<dyn Store>,
    spec: DomainSpec,
    runtime: Handle,
) -> Result<DomainInner, DomainError> {
    let DomainSpec {
        name,
        version,
        tables,
        global,
        migrate,
    } = spec;
    let on_demand: Vec<String> = tables
        .iter()
        .filter(|table| table.on_demand)
        .map(|table| row_key(&table.name, ""))
        .collect();
    let mut stored = scan_loaded(store.as_ref(), &name, &on_demand).await?;
    let meta = stored.remove(META_ROW);
    let meta_version = meta.as_ref().map(|entry| entry.version);
    // Only without a version row: whether anything is stored at all.
    let no_rows = meta.is_none()
        && stored.is_empty()
        && (on_demand.is_empty()
            || scan_prefix(store.as_ref(), &name, "", Some(1))
                .await?
                .is_empty());
    let stored_version = match &meta {
        Some(entry) => Some(parse_meta(&name, &entry.value)?),
        None if no_rows => None,
        // Rows without a version row: an unversioned schema.
        None => Some(0),
    };
    match stored_version {
        None => write_meta(store.as_ref(), &name, None, version).await?,
        Some(current) if current == version => {}
        Some(current) if current > version => {
            return Err(DomainError::VersionNewer {
                domain: name,
                stored: current,
                requested: version,
            });
        }
        Some(current) => {
            let Some(migrate) = migrate else {
                return Err(DomainError::MigrationRequired {
                    domain: name,
                    stored: current,
                    requested: version,
                });
            };
            // A migration sees every row, on-demand tables included.
            let mut all = scan_prefix(store.as_ref(), &name, "", None).await?;
            all.remove(META_ROW);
            let original = decode_all(&name, &all)?;
            let mut context = MigrationContext {
                domain: name.clone(),
                from: current,
                to: version,
                rows: original
                    .iter()
                    .map(|(row, stored)| (row.clone(), Arc::clone(&stored.value)))
                    .collect(),
            };
            migrate(&mut context)?;
            write_migration(store.as_ref(), &name, &original, &context.rows).await?;
            write_meta(store.as_ref(), &name, meta_version, version).await?;
            tracing::info!(domain = %name, from = current, to = version, "storage domain migrated");
            stored = scan_loaded(store.as_ref(), &name, &on_demand).await?;
            stored.remove(META_ROW);
        }
    }
    let rows = decode_all(&name, &stored)?;
    let (changes, _) = broadcast::channel(CHANGES_CAPACITY);
    Ok(DomainInner {
        name: Arc::from(name),
        version,
        store,
        runtime,
        tables: tables
            .into_iter()
            .map(|table| (table.name, table.partition))
            .collect(),
        global_default: global.map(Arc::new),
        rows: RwLock::new(rows),
        state: Mutex::new(WriteState::default()),
        changes,
    })
}

/// The rows an open loads: every row but those under the `on_demand` prefixes (the
/// on-demand tables' `<table>/`).
async fn scan_loaded(
    store: &dyn Store,
    name: &str,
    on_demand: &[String],
) -> Result<BTreeMap<String, KvEntry>, DomainError> {
    if on_demand.is_empty() {
        return scan_prefix(store, name, "", None).await;
    }
    let mut rows = BTreeMap::new();
    // Every row, skipping the on-demand tables' ranges (the version and global rows,
    // and rows of tables no longer declared, included, as a full scan loads them).
    let mut after: Option<String> = None;
    loop {
        let page = scan_prefix_page(store, name, "", after.clone(), SCAN_PAGE).await?;
        let full = page.len() == SCAN_PAGE;
        for (row, entry) in page {
            let next = match on_demand
                .iter()
                .find(|prefix| row.starts_with(prefix.as_str()))
            {
                // Past the whole on-demand range at once (past this row at least).
                Some(prefix) => {
                    let skip = format!("{prefix}\u{10FFFF}");
                    if skip > row { skip } else { row }
                }
                None => {
                    rows.insert(row.clone(), entry);
                    row
                }
            };
            if after.as_ref().is_none_or(|after| *after < next) {
                after = Some(next);
            }
        }
        if !full {
            return Ok(rows);
        }
    }
}

/// One page of a domain's stored rows under `prefix`, after the row `after`.
async fn scan_prefix_page(
    store: &dyn Store,
    name: &str,
    prefix: &str,
    after: Option<String>,
    limit: usize,
) -> Result<Vec<(String, KvEntry)>, DomainError> {
    store
        .kv_scan(
            name,
            prefix,
            KvPage {
                after,
                limit: Some(limit),
            },
        )
        .await
        .map_err(|source| store_failure(name, source))
}

/// A domain's stored rows under `prefix`: all of them, or the first `limit`.
async fn scan_prefix(
    store: &dyn Store,
    name: &str,
    prefix: &str,
    limit: Option<usize>,
) -> Result<BTreeMap<String, KvEntry>, DomainError> {
    let page_limit = limit.unwrap_or(SCAN_PAGE).min(SCAN_PAGE);
    let mut rows = BTreeMap::new();
    let mut after = None;
    loop {
        let page = scan_prefix_page(store, name, prefix, after.clone(), page_limit).await?;
        let full = page.len() == page_limit;
        after = page.last().map(|(key, _)| key.clone());
        rows.extend(page);
        if limit.is_some() || !full || after.is_none() {
            return Ok(rows);
        }
    }
}

/// A store failure of domain `name` that concerns no one record.
fn store_failure(name: &str, source: StoreError) -> DomainError {
    DomainError::Store {
        domain: name.to_owned(),
        record: None,
        source: Box::new(source),
    }
}

fn decode_all(
    name: &str,
    stored: &BTreeMap<String, KvEntry>,
) -> Result<BTreeMap<String, Row>, DomainError> {
    stored
        .iter()
        .map(|(row, entry)| {
            Ok((
                row.clone(),
                Row {
                    version: entry.version,
                    value: Arc::new(decode(name, row, &entry.value)?),
                },
            ))
        })
        .collect()
}

/// Writes what a migration changed, every row against its loaded version.
async fn write_migration(
    store: &dyn Store,
    name: &str,
    original: &BTreeMap<String, Row>,
    migrated: &BTreeMap<String, Arc<Value>>,
) -> Result<(), DomainError> {
    let mut tickets = Vec::new();
    for (row, stored) in original {
        if !migrated.contains_key(row) {
            tickets.push((
                row.clone(),
                store.kv_cas(name, row, Some(stored.version), None),
            ));
        }
    }
    for (row, value) in migrated {
        let before = original.get(row);
        if before.is_some_and(|stored| stored.value == *value) {
            continue;
        }
        // Values were checked by `MigrationContext::put`; this encodes them.
        let bytes = value.to_string().into_bytes();
        tickets.push((
            row.clone(),
            store.kv_cas(name, row, before.map(|stored| stored.version), Some(bytes)),
        ));
    }
    for (row, ticket) in tickets {
        ticket.await.map_err(|source| DomainError::Store {
            domain: name.to_owned(),
            record: Some(record_of_row(&row)),
            source: Box::new(source),
        })?;
    }
    Ok(())
}

async fn write_meta(
    store: &dyn Store,
    name: &str,
    expected: Option<u64>,
    version: u64,
) -> Result<(), DomainError> {
    let value = serde_json::json!({ "version": version })
        .to_string()
        .into_bytes();
    store
        .kv_cas(name, META_ROW, expected, Some(value))
        .await
        .map_err(|source| store_failure(name, source))?;
    Ok(())
}

fn parse_meta(name: &str, bytes: &[u8]) -> Result<u64, DomainError> {
    decode(name, META_ROW, bytes)?
        .get("version")
        .and_then(Value::as_u64)
        .ok_or_else(|| DomainError::Corrupt {
            domain: name.to_owned(),
            row: META_ROW.to_owned(),
            detail: "expected {\"version\": <integer>}".to_owned(),
        })
}

/// A stored row read as a `T`: `None` when it is JSON but not a `T`, `Corrupt` when
/// it is not JSON (as [`decode`] says).
fn decode_as<T: serde::de::DeserializeOwned>(
    name: &str,
    row: &str,
    bytes: &[u8],
) -> Result<Option<T>, DomainError> {
    match serde_json::from_slice::<T>(bytes) {
        Ok(value) => Ok(Some(value)),
        // Well-formed so far, but not a `T`: the rest may still not be JSON.
        Err(error) if error.is_data() => serde_json::from_slice::<serde::de::IgnoredAny>(bytes)
            .map(|_| None)
            .map_err(|error| corrupt(name, row, &error)),
        Err(error) => Err(corrupt(name, row, &error)),
    }
}

/// The error of a stored row that is not JSON.
fn corrupt(name: &str, row: &str, error: &serde_json::Error) -> DomainError {
    DomainError::Corrupt {
        domain: name.to_owned(),
        row: preview(row),
        detail: format!("not JSON: {error}"),
    }
}

fn decode(name: &str, row: &str, bytes: &[u8]) -> Result<Value, DomainError> {
    serde_json::from_slice(bytes).map_err(|error| corrupt(name, row, &error))
}

/// The compact JSON of `value`, checked against the value limit.
fn encode(name: &str, record: &RecordId, value: &Value) -> Result<Vec<u8>, DomainError> {
    let bytes = value.to_string().into_bytes();
    if bytes.len() > MAX_KV_VALUE_BYTES {
        return Err(DomainError::ValueTooLarge {
            domain: name.to_owned(),
            record: record.clone(),
            bytes: bytes.len(),
            limit: MAX_KV_VALUE_BYTES,
        });
    }
    Ok(bytes)
}

/// The row key `<table>/<key>`, checked: a non-empty key without NUL, the whole row
/// key within the store's limit.
fn checked_row(name: &str, table: &str, key: &str) -> Result<String, DomainError> {
    let record = || RecordId::Row {
        table: table.to_owned(),
        key: preview(key),
    };
    let invalid = |reason| DomainError::InvalidKey {
        domain: name.to_owned(),
        record: record(),
        reason,
    };
    if key.is_empty() {
        return Err(invalid("the key is empty"));
    }
    if key.contains('\0') {
        return Err(invalid("the key holds a NUL byte"));
    }
    let row = row_key(table, key);
    if row.len() > MAX_KV_KEY_BYTES {
        return Err(DomainError::KeyTooLong {
            domain: name.to_owned(),
            record: record(),
            bytes: row.len(),
            limit: MAX_KV_KEY_BYTES,
        });
    }
    Ok(row)
}

fn row_key(table: &str, key: &str) -> String {
    format!("{table}/{key}")
}

/// The rows of `table` whose key starts with `prefix`, as (key, value).
fn scan<'a>(
    rows: &'a BTreeMap<String, Arc<Value>>,
    table: &'a str,
    prefix: &str,
) -> impl Iterator<Item = (&'a str, &'a Value)> + 'a {
    let start = row_key(table, prefix);
    let table_prefix = row_key(table, "");
    rows.range(start.clone()..)
        .take_while(move |(row, _)| row.starts_with(&start))
        .filter_map(move |(row, value)| row.strip_prefix(&table_prefix).map(|key| (key, &**value)))
}

fn record_of_row(row: &str) -> RecordId {
    match row.split_once('/') {
        Some((table, key)) => RecordId::Row {
            table: table.to_owned(),
            key: preview(key),
        },
        None => RecordId::Global,
    }
}

/// `[a-z][a-z0-9_]*`.
fn is_identifier(name: &str) -> bool {
    let mut chars = name.chars();
    chars.next().is_some_and(|first| first.is_ascii_lowercase())
        && chars.all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_')
}

/// The first characters of a key, for messages.
fn preview(key: &str) -> String {
    match key.char_indices().nth(KEY_PREVIEW_CHARS) {
        Some((end, _)) => format!("{}… ({} bytes)", &key[..end], key.len()),
        None => key.to_owned(),
    }
}
