//! The agent's inbox (spec H-LOOP-2, H-LOOP-3, H-CANCEL-3, ACT-2): messages waiting
//! for a turn (`followup`) or for the next step (`steer`, `inject`), kept durable in the
//! `agent_inbox` storage domain ([`InboxStore`]).
//!
//! Layout: table `entries`, key `<session>/<id, 20 digits>`, value [`Stored`],
//! partitioned by session. Before the domain API, rows were written straight to the
//! store at `<session>/<id>` with the same value and no version row; opening the domain
//! migrates them (version 0 → 1) so they still restore.

use std::collections::{HashSet, VecDeque};
use std::sync::Arc;

use ccare_core::kinds::{USER_MESSAGE, UserMessage};
use ccare_core::{Message, Source};
use ccare_session::Session;
use parking_lot::Mutex;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::domains::{
    Domain, DomainError, DomainSpec, MigrationContext, Table, TableSpec, WriteTicket,
};
use crate::host::Host;

/// Where an entry goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Target {
    /// Starts the next turn; wakes an idle agent.
    Followup,
    /// Enters the next step; wakes an idle agent.
    Steer,
    /// Enters the next step; does not wake an idle agent.
    Inject,
}

/// A queued message.
#[derive(Debug, Clone, PartialEq)]
pub struct Entry {
    /// Queue position, increasing.
    pub id: u64,
    /// Where it goes.
    pub target: Target,
    /// The message (its `source` says who wrote it).
    pub message: Message,
}

impl Entry {
    /// Whether a person wrote it: user entries are logged the moment a step claims them.
    pub fn is_user(&self) -> bool {
        matches!(self.message.source, Some(Source::User { .. }) | None)
    }
}

/// An entry as persisted in the `agent_inbox` domain.
#[derive(Debug, Serialize, Deserialize)]
pub(crate) struct Stored {
    pub(crate) target: Target,
    pub(crate) message: Message,
}

/// The storage domain of queued entries (H-LOOP-2).
pub(crate) const INBOX_DOMAIN: &str = "agent_inbox";
/// Its table of entries: key `<session>/<id, 20 digits>`.
const ENTRIES_TABLE: &str = "entries";
/// Its schema version (0: the rows written before the domain API).
const INBOX_VERSION: u64 = 1;
/// Who holds the domain in the registry (no plugin is named so, so unmounting a
/// plugin never closes it).
const INBOX_OWNER: &str = "kernel";

pub(crate) fn entry_key(session: &str, id: u64) -> String {
    format!("{session}/{id:020}")
}

/// Queued entries in order.
#[derive(Debug, Default)]
pub(crate) struct Inbox {
    entries: VecDeque<Entry>,
    next_id: u64,
}

impl Inbox {
    pub(crate) fn push(&mut self, target: Target, mut message: Message) -> Entry {
        with_id(&mut message);
        let entry = Entry {
            id: self.next_id,
            target,
            message,
        };
        self.next_id += 1;
        self.entries.push_back(entry.clone());
        entry
    }

    /// Puts a new entry at the front (a turn-stopping hook's steer).
    pub(crate) fn push_front(&mut self, target: Target, mut message: Message) -> Entry {
        with_id(&mut message);
        let entry = Entry {
            id: self.next_id,
            target,
            message,
        };
        self.next_id += 1;
        self.entries.push_front(entry.clone());
        entry
    }

    /// Puts back entries persisted by an earlier process, keeping their ids.
    pub(crate) fn restore(&mut self, entries: Vec<Entry>) {
        for entry in entries {
            self.next_id = self.next_id.max(entry.id + 1);
            self.entries.push_back(entry);
        }
    }

    /// Puts claimed entries back at the front, in their order.
    pub(crate) fn restore_front(&mut self, entries: Vec<Entry>) {
        for entry in entries.into_iter().rev() {
            self.entries.push_front(entry);
        }
    }

    /// Whether an entry would wake the agent.
    pub(crate) fn has_waking(&self) -> bool {
        self.entries
            .iter()
            .any(|entry| matches!(entry.target, Target::Followup | Target::Steer))
    }

    /// Whether an entry waits for the next step.
    pub(crate) fn has_next_step(&self) -> bool {
        self.entries
            .iter()
            .any(|entry| matches!(entry.target, Target::Steer | Target::Inject))
    }

    /// The entry that opens a turn: the oldest followup or steer.
    pub(crate) fn take_opening(&mut self) -> Option<Entry> {
        let position = self
            .entries
            .iter()
            .position(|entry| matches!(entry.target, Target::Followup | Target::Steer))?;
        self.entries.remove(position)
    }

    /// Every next-step entry, in queue order (H-LOOP-3).
    pub(crate) fn take_next_step(&mut self) -> Vec<Entry> {
        let mut taken = Vec::new();
        let mut kept = VecDeque::with_capacity(self.entries.len());
        for entry in self.entries.drain(..) {
            if matches!(entry.target, Target::Steer | Target::Inject) {
                taken.push(entry);
            } else {
                kept.push_back(entry);
            }
        }
        self.entries = kept;
        taken
    }

    /// Drops entries queued before `id` (a cancel without keep-inbox, H-CANCEL-3);
    /// returns the ids dropped.
    pub(crate) fn drop_before(&mut self, id: u64) -> Vec<u64> {
        let dropped = self
            .entries
            .iter()
            .filter(|entry| entry.id < id)
            .map(|entry| entry.id)
            .collect();
        self.entries.retain(|entry| entry.id >= id);
        dropped
    }

    /// Takes entry `id` out if it is still queued (a command that could not be made
    /// durable).
    pub(crate) fn remove(&mut self, id: u64) {
        self.entries.retain(|entry| entry.id != id);
    }

    pub(crate) fn next_id(&self) -> u64 {
        self.next_id
    }
}

/// Gives a queued message without an id a fresh one, so that once a step logged it,
/// a restore can tell it was applied ([`split_logged`]).
fn with_id(message: &mut Message) {
    if message.id.is_none() {
        message.id = Some(uuid::Uuid::now_v7().to_string());
    }
}

/// Splits restored `entries` into those still to apply and the ids of those a step
/// already logged as a `user/message` (a crash came between the append and the
/// delete of the row): each command is applied exactly once (ACT-2). Entries without
/// a message id (rows of an older version) are kept.
pub(crate) fn split_logged(session: &Session, entries: Vec<Entry>) -> (Vec<Entry>, Vec<u64>) {
    if entries.is_empty() {
        return (entries, Vec::new());
    }
    let logged: HashSet<String> = session.with_log(|log| {
        log.events()
            .iter()
            .filter(|event| event.kind() == USER_MESSAGE)
            .filter(|event| {
                entries.iter().any(|entry| {
                    entry
                        .message
                        .id
                        .as_deref()
                        .is_some_and(|id| event.data_json().contains(id))
                })
            })
            .filter_map(|event| event.decode::<UserMessage>().ok()?.message.id)
            .collect()
    });
    let (applied, kept): (Vec<Entry>, Vec<Entry>) = entries.into_iter().partition(|entry| {
        entry
            .message
            .id
            .as_ref()
            .is_some_and(|id| logged.contains(id))
    });
    (kept, applied.into_iter().map(|entry| entry.id).collect())
}

/// A write to the inbox domain, kept in call order while the domain opens.
enum Op {
    Put {
        key: String,
        value: serde_json::Value,
    },
    Delete {
        key: String,
    },
}

#[derive(Default)]
struct Pending {
    ops: Vec<Op>,
    draining: bool,
}

/// The host's handle on the `agent_inbox` domain (ACT-2): opened on first use (every
/// agent of the host shares it), writes queued in call order.
#[derive(Default)]
pub(crate) struct InboxStore {
    domain: tokio::sync::OnceCell<(Domain, Table)>,
    pending: Mutex<Pending>,
}

impl std::fmt::Debug for InboxStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("InboxStore")
            .field("open", &self.domain.initialized())
            .finish_non_exhaustive()
    }
}

impl InboxStore {
    /// Queues writing `entry` of `session`; returns its ticket when the domain is open.
    pub(crate) fn put(
        &self,
        host: &Arc<Host>,
        session: &str,
        entry: &Entry,
    ) -> Option<WriteTicket> {
        let stored = Stored {
            target: entry.target,
            message: entry.message.clone(),
        };
        match serde_json::to_value(&stored) {
            Ok(value) => self.write(
                host,
                Op::Put {
                    key: entry_key(session, entry.id),
                    value,
                },
            ),
            Err(error) => {
                tracing::warn!(%error, "an inbox entry cannot be encoded");
                None
            }
        }
    }

    /// Queues deleting entry `id` of `session`.
    pub(crate) fn delete(&self, host: &Arc<Host>, session: &str, id: u64) {
        drop(self.write(
            host,
            Op::Delete {
                key: entry_key(session, id),
            },
        ));
    }

    fn write(&self, host: &Arc<Host>, op: Op) -> Option<WriteTicket> {
        let mut pending = self.pending.lock();
        if let Some((_, table)) = self.domain.get()
            && pending.ops.is_empty()
        {
            return submit(table, op);
        }
        pending.ops.push(op);
        if !pending.draining {
            let Ok(runtime) = tokio::runtime::Handle::try_current() else {
                tracing::warn!("no runtime to open the inbox domain; entry not persisted");
                pending.ops.clear();
                return None;
            };
            pending.draining = true;
            let host = Arc::clone(host);
            runtime.spawn(async move {
                drop(host.inbox.ready(&host).await);
            });
        }
        None
    }

    /// Opens the domain (once) and submits every write queued while it opened, in order.
    pub(crate) async fn ready(&self, host: &Arc<Host>) -> Result<(Domain, Table), DomainError> {
        let opened = self.domain.get_or_try_init(|| open(host)).await;
        let mut pending = self.pending.lock();
        pending.draining = false;
        match opened {
            Ok((domain, table)) => {
                for op in std::mem::take(&mut pending.ops) {
                    drop(submit(table, op));
                }
                Ok((domain.clone(), table.clone()))
            }
            Err(error) => {
                tracing::warn!(%error, "the inbox domain cannot be opened; queued entries not persisted");
                pending.ops.clear();
                Err(error)
            }
        }
    }

    /// Waits until every write queued so far for `session` is durable.
    pub(crate) async fn flush(&self, host: &Arc<Host>, session: &str) -> Result<(), DomainError> {
        let (domain, table) = self.ready(host).await?;
        domain
            .flush(table.partition(&entry_key(session, 0)).as_deref())
            .await
    }

    /// Waits until every write queued so far for `session` is durable, like
    /// [`InboxStore::flush`], but without opening the domain when nothing was ever
    /// queued: with no write outstanding it returns at once, with no store call (the
    /// barrier the kernel puts where a turn ends, ACT-2).
    pub(crate) async fn settle(&self, host: &Arc<Host>, session: &str) -> Result<(), DomainError> {
        let opening = {
            let pending = self.pending.lock();
            pending.draining || !pending.ops.is_empty()
        };
        if !opening && !self.domain.initialized() {
            return Ok(());
        }
        self.flush(host, session).await
    }

    /// Waits until every write queued so far for `session` has been handed to the store,
    /// so that it is durable no later than whatever the caller hands the store next (the
    /// store commits in call order): the barrier the kernel puts before an event it
    /// appends, without a commit of its own. Like [`InboxStore::settle`], it costs
    /// nothing when no write is outstanding; a failed write is reported by the next
    /// flush, not here.
    pub(crate) async fn order(&self, host: &Arc<Host>, session: &str) {
        let opening = {
            let pending = self.pending.lock();
            pending.draining || !pending.ops.is_empty()
        };
        if !opening && !self.domain.initialized() {
            return;
        }
        if let Ok((domain, table)) = self.ready(host).await {
            domain
                .ordered(table.partition(&entry_key(session, 0)).as_deref())
                .await;
        }
    }

    /// The durable entries of `session`, in id order; unreadable rows are skipped.
    pub(crate) async fn load(
        &self,
        host: &Arc<Host>,
        session: &str,
    ) -> Result<Vec<Entry>, DomainError> {
        self.flush(host, session).await?;
        let (_, table) = self.ready(host).await?;
        let prefix = format!("{session}/");
        let mut entries = Vec::new();
        for (key, value) in table.entries(&prefix) {
            let id = key
                .strip_prefix(&prefix)
                .and_then(|digits| digits.parse::<u64>().ok());
            let stored = serde_json::from_value::<Stored>(Value::clone(&value));
            match (id, stored) {
                (Some(id), Ok(stored)) => entries.push(Entry {
                    id,
                    target: stored.target,
                    message: stored.message,
                }),
                _ => tracing::warn!(%key, "skipping an unreadable agent_inbox entry"),
            }
        }
        Ok(entries)
    }
}

fn submit(table: &Table, op: Op) -> Option<WriteTicket> {
    let written = match op {
        // An entry is nearly always followed at once by the turn or step that claims
        // it (its events, then the flush before the model request): the store keeps
        // its group open for them, so the row commits with them (one fsync, not two).
        Op::Put { key, value } => table.put_lingering(&key, value),
        Op::Delete { key } => table.delete(&key),
    };
    match written {
        Ok(ticket) => Some(ticket),
        Err(error) => {
            tracing::warn!(%error, "an inbox write was refused");
            None
        }
    }
}

/// Opens the domain, migrating rows written before the domain API (`<session>/<id>`
/// straight in the store, no version row) into the `entries` table.
async fn open(host: &Arc<Host>) -> Result<(Domain, Table), DomainError> {
    let store = host.sessions.store();
    let rows = store
        .kv_scan(INBOX_DOMAIN, "", ccare_store::KvPage::default())
        .await
        .map_err(|source| DomainError::Store {
            domain: INBOX_DOMAIN.to_owned(),
            record: None,
            source: Box::new(source),
        })?;
    let legacy: Vec<(String, String)> = rows
        .into_iter()
        .filter_map(|(row, _)| {
            let (session, id) = row.split_once('/')?;
            (session != ENTRIES_TABLE).then(|| (session.to_owned(), id.to_owned()))
        })
        .collect();
    let spec = DomainSpec::new(INBOX_DOMAIN, INBOX_VERSION)
        .table(TableSpec::by_first_segment(ENTRIES_TABLE))
        .migrate(move |context| migrate_legacy(context, &legacy));
    let domain = host.domains.open(spec, INBOX_OWNER).await?;
    let table = domain.table(ENTRIES_TABLE)?;
    Ok((domain, table))
}

/// Moves each legacy row `<session>/<id>` to `entries/<session>/<id>`, value unchanged
/// (idempotent: a moved row is gone from its old place).
fn migrate_legacy(
    context: &mut MigrationContext,
    legacy: &[(String, String)],
) -> Result<(), DomainError> {
    for (session, id) in legacy {
        if let Some(value) = context.get(session, id).cloned() {
            context.put(ENTRIES_TABLE, &format!("{session}/{id}"), value)?;
            context.delete(session, id);
        }
    }
    Ok(())
}
