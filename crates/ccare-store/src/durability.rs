//! How durable an append is when it returns (`[store] durability`, spec H-STORE-4/5),
//! and the one blocking wait for a [`Ticket`] that the `per-append` mode needs.

use std::sync::Arc;
use std::task::{Context, Poll, Wake, Waker};
use std::thread::Thread;

use crate::error::StoreError;
use crate::types::Ticket;

/// When an append is durable.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Durability {
    /// Group commit (H-STORE-4): an append is queued and returns at once; queued
    /// appends share one transaction, and the loop flushes before each dispatch, each
    /// tool body and at `turn/end` (H-STORE-5). The default.
    #[default]
    Group,
    /// Every append waits until its event is durable before it returns
    /// (`durability = "per-append"`): slower (one commit, one fsync, per event), but a
    /// process killed right after an append returned loses nothing.
    PerAppend,
}

impl Durability {
    /// The config spelling: `group` or `per-append`.
    pub fn as_str(self) -> &'static str {
        match self {
            Durability::Group => "group",
            Durability::PerAppend => "per-append",
        }
    }

    /// Parses the config spelling; `None` for anything else.
    pub fn parse(text: &str) -> Option<Self> {
        match text {
            "group" => Some(Durability::Group),
            "per-append" => Some(Durability::PerAppend),
            _ => None,
        }
    }
}

/// Wakes the thread that parked waiting for a ticket.
struct ThreadWaker(Thread);

impl Wake for ThreadWaker {
    fn wake(self: Arc<Self>) {
        self.0.unpark();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        self.0.unpark();
    }
}

/// Blocks the calling thread until `ticket` resolves, for callers that must not return
/// before a write is durable but are not async (a synchronous append under
/// [`Durability::PerAppend`]).
///
/// Safe inside a tokio runtime for the stores of this crate: their tickets are resolved
/// by the SQLite writer thread or at once (memory), never by a task of the caller's
/// runtime. A store whose tickets need the calling thread's runtime to make progress
/// would block forever here.
pub fn wait_blocking<T>(mut ticket: Ticket<T>) -> Result<T, StoreError> {
    let waker = Waker::from(Arc::new(ThreadWaker(std::thread::current())));
    let mut context = Context::from_waker(&waker);
    loop {
        match ticket.as_mut().poll(&mut context) {
            Poll::Ready(result) => return result,
            // A spurious unpark only costs one more poll.
            Poll::Pending => std::thread::park(),
        }
    }
}
