//! The agent's inbox (spec H-LOOP-2, H-LOOP-3, H-CANCEL-3): messages waiting for a
//! turn (`followup`) or for the next step (`steer`, `inject`).

use std::collections::VecDeque;

use ccare_core::{Message, Source};
use serde::{Deserialize, Serialize};

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

/// The storage domain of queued entries (H-LOOP-2): key `<session>/<id, 20 digits>`.
pub(crate) const INBOX_DOMAIN: &str = "agent_inbox";

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
    pub(crate) fn push(&mut self, target: Target, message: Message) -> Entry {
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
    pub(crate) fn push_front(&mut self, target: Target, message: Message) -> Entry {
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

    pub(crate) fn next_id(&self) -> u64 {
        self.next_id
    }
}
