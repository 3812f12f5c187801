//! The loop policy (SW-8 .. SW-11): the pure bookkeeping around a firing's actions, per
//! agent: the notice record (once per trigger and epoch per user turn), the consecutive
//! abort counter and its resets, and whether resume may speak.
//!
//! How a caller runs a [`Firing`] with it:
//!
//! ```
//! use ccare_watch::engine::{ActionId, Frame, LoopPolicy, NoticeDecision, StreamWatch, Triggers};
//!
//! let mut watch = StreamWatch::new(Triggers::defaults());
//! let mut policy = LoopPolicy::new();
//! watch.observe(Frame::Start);
//! let firings = watch.observe(Frame::Text(&"same line\n".repeat(60)));
//! let firing = &firings[0];
//! let notice = policy.notice_decision(firing);
//! assert_eq!(notice, NoticeDecision::ResumeWillSpeak);
//! let records = firing.run(|action| -> Result<bool, String> {
//!     match action {
//!         ActionId::Notice => Ok(false),              // skipped: resume will speak
//!         ActionId::Abort => {
//!             policy.record_abort();                  // after the cancel was requested
//!             Ok(true)
//!         }
//!         ActionId::Resume => Ok(policy.may_resume()), // steer MV-LOOP(aborted) if true
//!         _ => Ok(false),
//!     }
//! });
//! assert_eq!(records.len(), 3);
//! assert_eq!(policy.consecutive_aborts(), 1);
//! ```

use std::collections::HashSet;

use super::action::{ActionId, Firing};

/// How many consecutive aborts still get an automatic resume (SW-8, SW-9).
pub const MAX_AUTO_RESUME: u32 = 1;

/// What the `notice` action of a firing should do (SW-8).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NoticeDecision {
    /// Inject the notice; the once-per-turn record is now taken.
    Send,
    /// Skip it: the firing's `resume` will speak, and the counter allows it.
    ResumeWillSpeak,
    /// Skip it: this trigger already noticed under this epoch in this user turn.
    AlreadyNoticed,
}

/// Per-agent bookkeeping of the stream watch's actions (SW-8 .. SW-11). In memory only.
#[derive(Debug, Clone, Default)]
pub struct LoopPolicy {
    consecutive_aborts: u32,
    /// `(trigger, epoch)` pairs that noticed in the current user turn.
    noticed: HashSet<(String, String)>,
}

impl LoopPolicy {
    /// A fresh policy: no abort counted, no notice recorded.
    pub fn new() -> Self {
        Self::default()
    }

    /// Consecutive stream aborts since the last reset (SW-9, SW-10).
    pub fn consecutive_aborts(&self) -> u32 {
        self.consecutive_aborts
    }

    /// Whether a firing's `resume` will speak, so its line-repeat notice is skipped
    /// (SW-8): `resume_enabled` and `consecutive_aborts < MAX_AUTO_RESUME`, read before
    /// this firing's abort is counted.
    pub fn resume_will_speak(&self, resume_enabled: bool) -> bool {
        resume_enabled && self.consecutive_aborts < MAX_AUTO_RESUME
    }

    /// Decides the firing's `notice` (SW-8) and, on [`NoticeDecision::Send`], records it
    /// for (trigger, epoch) until the next real user message. Call it when the notice
    /// runs, before the same firing's abort is recorded (actions run notice → abort →
    /// resume). Resume counts as enabled when the firing lists it.
    pub fn notice_decision(&mut self, firing: &Firing) -> NoticeDecision {
        if self.resume_will_speak(firing.actions.contains(&ActionId::Resume)) {
            return NoticeDecision::ResumeWillSpeak;
        }
        if self.claim_notice(&firing.trigger, &firing.epoch) {
            NoticeDecision::Send
        } else {
            NoticeDecision::AlreadyNoticed
        }
    }

    /// Takes the once-per-user-turn notice slot of (trigger, epoch) (SW-8): true the first
    /// time, false until [`LoopPolicy::real_user_message`] clears the record.
    pub fn claim_notice(&mut self, trigger: &str, epoch: &str) -> bool {
        self.noticed.insert((trigger.to_owned(), epoch.to_owned()))
    }

    /// Counts an abort whose cancel was requested (SW-9); returns the new count.
    pub fn record_abort(&mut self) -> u32 {
        self.consecutive_aborts = self.consecutive_aborts.saturating_add(1);
        self.consecutive_aborts
    }

    /// Whether `resume` may steer now, after this firing's abort was counted (SW-9): false
    /// once `consecutive_aborts > MAX_AUTO_RESUME`, i.e. on the second consecutive abort
    /// (SW-11).
    pub fn may_resume(&self) -> bool {
        self.consecutive_aborts <= MAX_AUTO_RESUME
    }

    /// Whether automatic continuation is paused by consecutive aborts, for the UI's
    /// "auto-continue paused after 2 consecutive aborts" (SW-11).
    pub fn auto_continue_paused(&self) -> bool {
        !self.may_resume()
    }

    /// A real user message arrived at pre-step (GEN-4, SW-10): the counter returns to 0
    /// and the notice record clears (SW-8).
    pub fn real_user_message(&mut self) {
        self.consecutive_aborts = 0;
        self.noticed.clear();
    }

    /// A healthy output was committed (GEN-4, SW-10), the resumed turn's included: the
    /// counter returns to 0. The notice record stays until the next user turn.
    pub fn healthy_output(&mut self) {
        self.consecutive_aborts = 0;
    }
}
