//! New conversations whose first turn failed, remembered for a while so that the
//! client's retry of the same request goes back to their session (GW-3).
//!
//! A conversation is found by its client view, and a view is recorded with an answer.
//! A new conversation found by its messages alone (no session header, no key) whose
//! first turn failed (an upstream 429 the SDK retries, a 5xx) has no view, so its
//! retry would start another session, leaving one with a failed turn behind for every
//! attempt. Instead the gateway remembers, in memory, the chain hash of such a
//! request's whole transcript (per owner) and the session it created; the same
//! transcript again within [`KEEP`] continues that session, where the message is
//! resent ([`ccare_agent::resend`]). Memory only: a restart forgets, and the retry then
//! starts a session as before.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use ccare_core::SessionId;
use parking_lot::Mutex;

use crate::gateway::owner::Owner;

/// How long a failed first turn is remembered (an SDK retries within seconds).
const KEEP: Duration = Duration::from_secs(600);
/// The most conversations remembered; the oldest is forgotten first.
const MOST: usize = 1024;

/// Failed first turns by owner and transcript.
#[derive(Debug, Default)]
pub(crate) struct Unanswered {
    entries: Mutex<Entries>,
}

/// The remembered turns: key → (session, when, order remembered).
#[derive(Debug, Default)]
struct Entries {
    by_key: HashMap<String, (SessionId, Instant, u64)>,
    next: u64,
}

impl Unanswered {
    /// The key of `owner`'s transcript whose chain hash is `last`.
    pub(crate) fn key(owner: &Owner, last: &str) -> String {
        format!("{}/{last}", owner.hash().unwrap_or("server"))
    }

    /// Remembers that the first turn of `session`, created for the transcript `key`,
    /// failed.
    pub(crate) fn remember(&self, key: String, session: SessionId) {
        let now = Instant::now();
        let mut entries = self.entries.lock();
        entries
            .by_key
            .retain(|_, (_, at, _)| now.duration_since(*at) < KEEP);
        if entries.by_key.len() >= MOST
            && let Some(oldest) = entries
                .by_key
                .iter()
                .min_by_key(|(_, (_, _, order))| *order)
                .map(|(key, _)| key.clone())
        {
            entries.by_key.remove(&oldest);
        }
        let order = entries.next;
        entries.next += 1;
        entries.by_key.insert(key, (session, now, order));
    }

    /// The session whose first turn failed for the transcript `key`, when remembered.
    pub(crate) fn recall(&self, key: &str) -> Option<SessionId> {
        let entries = self.entries.lock();
        let (session, at, _) = entries.by_key.get(key)?;
        (at.elapsed() < KEEP).then(|| session.clone())
    }

    /// Forgets the transcript `key` (its turn was answered).
    pub(crate) fn forget(&self, key: &str) {
        self.entries.lock().by_key.remove(key);
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    fn id(n: u8) -> SessionId {
        SessionId::new(format!("01a251d8-0000-7000-8000-0000000000{n:02}")).unwrap()
    }

    #[test]
    fn remembers_recalls_and_forgets_by_key_and_keeps_at_most_the_newest() {
        let unanswered = Unanswered::default();
        unanswered.remember("server/a".to_owned(), id(1));
        assert_eq!(unanswered.recall("server/a"), Some(id(1)));
        assert_eq!(unanswered.recall("other/a"), None);
        unanswered.forget("server/a");
        assert_eq!(unanswered.recall("server/a"), None);
        for n in 0..=MOST {
            unanswered.remember(format!("server/{n}"), id(2));
        }
        assert_eq!(unanswered.entries.lock().by_key.len(), MOST);
        assert_eq!(unanswered.recall("server/0"), None, "the oldest went first");
        assert_eq!(unanswered.recall(&format!("server/{MOST}")), Some(id(2)));
    }
}
