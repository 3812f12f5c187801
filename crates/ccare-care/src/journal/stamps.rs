//! Which journal writes a reader has already seen, by session (issue 14 target 2).
//!
//! Every queued write takes the next number of one journal-wide sequence and stamps
//! the session it belongs to: a reader that read a session's stamp before a flush and
//! finds it unchanged later knows that no write of that session was queued since, so
//! what it read of the session after that flush still holds. Another session's write
//! changes nothing of it. A write is stamped both before and after it is queued (with
//! its index row and trim), so a stamp read while one is being queued changes again
//! once it is.
//!
//! A flush of the whole journal settles every write queued before it: the journal
//! notes the sequence number it read before each flush that succeeded, so a reader of
//! a session whose stamp is not above it needs no flush of its own
//! ([`Stamps::settled`]).
//!
//! The phase writes of a request know only its call id: the session of each call is
//! remembered from its `ready` write until its last phase. A write whose session is not
//! known (its `ready` was never written here) stamps every session, which is always
//! safe.

use std::collections::HashMap;

use parking_lot::Mutex;

/// The stamps of one journal.
#[derive(Debug, Default)]
pub(crate) struct Stamps {
    inner: Mutex<Inner>,
}

#[derive(Debug, Default)]
struct Inner {
    /// The latest number taken.
    sequence: u64,
    /// Each session's latest stamp.
    sessions: HashMap<String, u64>,
    /// The latest stamp of a write whose session is not known.
    unknown: u64,
    /// Every write stamped up to this number is settled: the sequence as it was before
    /// the latest flush that succeeded.
    flushed: u64,
    /// The session of each call between its `ready` write and its last phase.
    calls: HashMap<String, String>,
}

impl Inner {
    /// The latest stamp of `session`, a write of an unknown session counting for it.
    fn latest(&self, session: &str) -> u64 {
        self.sessions
            .get(session)
            .copied()
            .unwrap_or(0)
            .max(self.unknown)
    }
}

impl Stamps {
    /// Stamps a write of `session` (`None`: not known, which stamps every session).
    pub(crate) fn stamp(&self, session: Option<&str>) {
        let mut inner = self.inner.lock();
        inner.sequence += 1;
        let stamp = inner.sequence;
        match session {
            Some(session) => {
                inner.sessions.insert(session.to_owned(), stamp);
            }
            None => inner.unknown = stamp,
        }
    }

    /// The latest stamp of `session`: it changes whenever a write of the session (or of
    /// an unknown one) is queued.
    pub(crate) fn of(&self, session: &str) -> u64 {
        self.inner.lock().latest(session)
    }

    /// The latest number taken: read it before a flush and hand it to
    /// [`Stamps::flushed`] once the flush succeeded.
    pub(crate) fn sequence(&self) -> u64 {
        self.inner.lock().sequence
    }

    /// Notes that every write stamped up to `through` is settled.
    pub(crate) fn flushed(&self, through: u64) {
        let mut inner = self.inner.lock();
        inner.flushed = inner.flushed.max(through);
    }

    /// Whether every write of `session` queued so far is settled (so a read of it needs
    /// no flush): its latest stamp is not above the latest flush.
    pub(crate) fn settled(&self, session: &str) -> bool {
        let inner = self.inner.lock();
        inner.latest(session) <= inner.flushed
    }

    /// Remembers that `call_id` belongs to `session` (at its `ready` write).
    pub(crate) fn call(&self, call_id: &str, session: &str) {
        self.inner
            .lock()
            .calls
            .insert(call_id.to_owned(), session.to_owned());
    }

    /// Forgets `session`'s stamp once its writes have settled and its rows left memory
    /// (`residency.rs`): a server keeps no stamp per session it ever saw. Its stamp then
    /// reads as that of an unknown write, which a reader holding an older stamp of it
    /// takes as a change (and reads again), and its next write stamps it anew.
    pub(crate) fn forget(&self, session: &str) {
        self.inner.lock().sessions.remove(session);
    }

    /// Whether a call of `session` is between its `ready` write and its last phase.
    pub(crate) fn has_calls(&self, session: &str) -> bool {
        self.inner
            .lock()
            .calls
            .values()
            .any(|owner| owner == session)
    }

    /// The session of `call_id`, forgetting it when `last` (its final phase).
    pub(crate) fn session_of(&self, call_id: &str, last: bool) -> Option<String> {
        let mut inner = self.inner.lock();
        if last {
            inner.calls.remove(call_id)
        } else {
            inner.calls.get(call_id).cloned()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::Stamps;

    #[test]
    fn a_write_changes_its_own_session_stamp_only_and_an_unknown_one_changes_all() {
        let stamps = Stamps::default();
        let (a, b) = (stamps.of("a"), stamps.of("b"));
        stamps.stamp(Some("a"));
        assert_ne!(stamps.of("a"), a);
        assert_eq!(stamps.of("b"), b);
        let (a, b) = (stamps.of("a"), stamps.of("b"));
        stamps.stamp(None);
        assert_ne!(stamps.of("a"), a);
        assert_ne!(stamps.of("b"), b);
        let a = stamps.of("a");
        stamps.stamp(Some("b"));
        assert_eq!(stamps.of("a"), a);
    }

    #[test]
    fn a_session_is_settled_once_a_flush_covered_its_latest_stamp() {
        let stamps = Stamps::default();
        // Nothing written yet: nothing to wait for.
        assert!(stamps.settled("a"));
        stamps.stamp(Some("a"));
        assert!(!stamps.settled("a"));
        assert!(stamps.settled("b"));
        let before = stamps.sequence();
        // A write queued while the flush ran is not covered by it.
        stamps.stamp(Some("b"));
        stamps.flushed(before);
        assert!(stamps.settled("a"));
        assert!(!stamps.settled("b"));
        // An older flush finishing late takes nothing back.
        stamps.flushed(0);
        assert!(stamps.settled("a"));
        stamps.stamp(None);
        assert!(!stamps.settled("a"));
    }

    #[test]
    fn a_forgotten_session_reads_as_changed_to_a_holder_of_its_old_stamp() {
        let stamps = Stamps::default();
        stamps.stamp(Some("a"));
        let held = stamps.of("a");
        stamps.flushed(stamps.sequence());
        stamps.forget("a");
        assert_ne!(stamps.of("a"), held);
        assert!(stamps.settled("a"));
        stamps.stamp(Some("a"));
        assert!(!stamps.settled("a"), "its next write stamps it anew");
    }

    #[test]
    fn a_call_is_remembered_until_its_last_phase() {
        let stamps = Stamps::default();
        stamps.call("c1", "s1");
        assert_eq!(stamps.session_of("c1", false).as_deref(), Some("s1"));
        assert_eq!(stamps.session_of("c1", true).as_deref(), Some("s1"));
        assert_eq!(stamps.session_of("c1", false), None);
    }
}
