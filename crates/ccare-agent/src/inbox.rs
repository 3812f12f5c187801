//! The agent's inbox (spec H-LOOP-2, H-LOOP-3, H-CANCEL-3): messages waiting for a
//! turn (`followup`) or for the next step (`steer`, `inject`).

use std::collections::VecDeque;

use ccare_core::{Message, Source};

/// Where an entry goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
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

/// Queued entries in order.
#[derive(Debug, Default)]
pub(crate) struct Inbox {
    entries: VecDeque<Entry>,
    next_id: u64,
}

impl Inbox {
    pub(crate) fn push(&mut self, target: Target, message: Message) -> u64 {
        let id = self.next_id;
        self.next_id += 1;
        self.entries.push_back(Entry {
            id,
            target,
            message,
        });
        id
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

    /// Drops entries queued before `id` (a cancel without keep-inbox, H-CANCEL-3).
    pub(crate) fn drop_before(&mut self, id: u64) {
        self.entries.retain(|entry| entry.id >= id);
    }

    pub(crate) fn next_id(&self) -> u64 {
        self.next_id
    }
}
