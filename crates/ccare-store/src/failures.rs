//! Failed writes remembered until a flush reports them (the flush contract both
//! backends share: a failure counts as reported once its ticket yielded it; a flush
//! returns the oldest one no ticket yielded and forgets the rest).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use crate::error::StoreError;

/// How many failed writes are remembered between flushes; past this, errors that were
/// already seen are dropped first, then the newest are.
const MAX_REMEMBERED_FAILURES: usize = 1024;

/// One failed write.
pub(crate) struct Failed {
    pub(crate) error: StoreError,
    /// Set by the ticket once it has yielded the error to its caller.
    pub(crate) seen: Arc<AtomicBool>,
}

/// Failed writes since the last flush, oldest first.
#[derive(Default)]
pub(crate) struct Failures {
    failures: Vec<Failed>,
    /// Failures forgotten since the last flush because the list was full.
    discarded: usize,
}

impl Failures {
    /// Remembers a failed write for the next flush.
    pub(crate) fn remember(&mut self, failed: Failed) {
        if self.failures.len() >= MAX_REMEMBERED_FAILURES {
            self.failures
                .retain(|kept| !kept.seen.load(Ordering::Acquire));
        }
        if self.failures.len() >= MAX_REMEMBERED_FAILURES {
            self.discarded += 1;
        } else {
            self.failures.push(failed);
        }
    }

    /// The oldest failure no ticket has yielded; forgets every remembered failure.
    /// `store` names the backend in the warnings about what was superseded.
    pub(crate) fn take_unreported(&mut self, store: &str) -> Option<StoreError> {
        let mut oldest = None;
        let mut others = 0_usize;
        for failed in self.failures.drain(..) {
            if failed.seen.load(Ordering::Acquire) {
                continue;
            }
            if oldest.is_none() {
                oldest = Some(failed.error);
            } else {
                others += 1;
                tracing::warn!(store, error = %failed.error, "unreported write error superseded by an older one");
            }
        }
        if others > 0 || self.discarded > 0 {
            tracing::warn!(
                store,
                others,
                discarded = self.discarded,
                "flush reports only the oldest unreported write error"
            );
        }
        self.discarded = 0;
        oldest
    }
}
