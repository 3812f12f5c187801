//! [`OnDemandBroadcast`]: a broadcast channel whose ring exists only while someone
//! listens.
//!
//! A tokio broadcast channel allocates and initialises its whole ring when it is made
//! (about 40 bytes a slot for an `Arc`). A session and its agent each keep one, and
//! most of them sit with no subscriber at all: a gateway conversation waits for its
//! next request with its actor warm (`[host] actor_idle_ms`), and a session opened to
//! be read never has one. Here the ring is made on the first subscription and freed
//! with the last [`Subscription`]; a send with no one listening costs a lock and
//! builds nothing.

use std::sync::{Arc, Weak};

use parking_lot::Mutex;
use tokio::sync::broadcast::error::{RecvError, TryRecvError};
use tokio::sync::broadcast::{self, Receiver, Sender};

/// A broadcast channel of `capacity` slots, allocated while a [`Subscription`] lives.
///
/// Semantics are tokio's broadcast with one difference: a [`Subscription`] keeps the
/// channel open, so it never reports [`RecvError::Closed`]; whoever needs to know the
/// sending side is gone watches that side by other means.
pub struct OnDemandBroadcast<T> {
    capacity: usize,
    /// The channel of the live subscriptions; dead when there are none.
    sender: Mutex<Weak<Sender<T>>>,
}

impl<T> std::fmt::Debug for OnDemandBroadcast<T> {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter
            .debug_struct("OnDemandBroadcast")
            .field("capacity", &self.capacity)
            .field("listening", &self.sender.lock().strong_count())
            .finish()
    }
}

impl<T: Clone> OnDemandBroadcast<T> {
    /// A channel of `capacity` slots (at least one) per subscription period; nothing is
    /// allocated until the first [`OnDemandBroadcast::subscribe`].
    pub fn new(capacity: usize) -> Self {
        Self {
            capacity: capacity.max(1),
            sender: Mutex::new(Weak::new()),
        }
    }

    /// A receiver of every value sent from now on; the channel is made if no other
    /// subscription holds it.
    pub fn subscribe(&self) -> Subscription<T> {
        let mut slot = self.sender.lock();
        let sender = match slot.upgrade() {
            Some(sender) => sender,
            None => {
                let (sender, _) = broadcast::channel(self.capacity);
                let sender = Arc::new(sender);
                *slot = Arc::downgrade(&sender);
                sender
            }
        };
        Subscription {
            receiver: sender.subscribe(),
            _sender: sender,
        }
    }

    /// Sends the value `make` builds to every subscription; with none, `make` is not
    /// called. Returns how many subscriptions it reached.
    pub fn send_with(&self, make: impl FnOnce() -> T) -> usize {
        // Upgraded under the lock and sent outside it: a subscription that ends
        // meanwhile only makes this send reach one fewer receiver.
        let Some(sender) = self.sender.lock().upgrade() else {
            return 0;
        };
        sender.send(make()).unwrap_or(0)
    }

    /// Whether a subscription is alive now.
    pub fn has_subscribers(&self) -> bool {
        self.sender.lock().strong_count() > 0
    }
}

/// One subscription to an [`OnDemandBroadcast`]; dropping the last one frees the
/// channel.
pub struct Subscription<T> {
    receiver: Receiver<T>,
    _sender: Arc<Sender<T>>,
}

impl<T> std::fmt::Debug for Subscription<T> {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter
            .debug_struct("Subscription")
            .field("queued", &self.receiver.len())
            .finish()
    }
}

impl<T: Clone> Subscription<T> {
    /// The next value: [`RecvError::Lagged`] when this subscription fell more than the
    /// capacity behind (it then continues with the oldest value kept). Never
    /// [`RecvError::Closed`]: the subscription keeps the channel open.
    pub async fn recv(&mut self) -> Result<T, RecvError> {
        self.receiver.recv().await
    }

    /// The next value if one is queued now ([`TryRecvError::Empty`] if not), as
    /// [`Subscription::recv`] without waiting.
    pub fn try_recv(&mut self) -> Result<T, TryRecvError> {
        self.receiver.try_recv()
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    #[test]
    fn nothing_is_built_or_kept_while_no_one_listens() {
        let channel = OnDemandBroadcast::<u32>::new(4);
        let mut built = 0;
        assert_eq!(
            channel.send_with(|| {
                built += 1;
                1
            }),
            0
        );
        assert_eq!(built, 0);
        assert!(!channel.has_subscribers());

        let mut first = channel.subscribe();
        let mut second = channel.subscribe();
        assert!(channel.has_subscribers());
        assert_eq!(channel.send_with(|| 2), 2);
        assert_eq!(first.try_recv().unwrap(), 2);
        assert_eq!(second.try_recv().unwrap(), 2);
        assert_eq!(first.try_recv(), Err(TryRecvError::Empty));

        drop(first);
        assert!(channel.has_subscribers());
        drop(second);
        assert!(!channel.has_subscribers());
        assert_eq!(channel.send_with(|| 3), 0);

        // A new subscription starts from what is sent after it, on a new channel.
        let mut third = channel.subscribe();
        assert_eq!(third.try_recv(), Err(TryRecvError::Empty));
        assert_eq!(channel.send_with(|| 4), 1);
        assert_eq!(third.try_recv().unwrap(), 4);
    }

    #[test]
    fn a_subscription_that_falls_behind_lags_and_continues() {
        let channel = OnDemandBroadcast::<u32>::new(2);
        let mut behind = channel.subscribe();
        for value in 1..=3 {
            channel.send_with(|| value);
        }
        assert_eq!(behind.try_recv(), Err(TryRecvError::Lagged(1)));
        assert_eq!(behind.try_recv().unwrap(), 2);
        assert_eq!(behind.try_recv().unwrap(), 3);
        assert_eq!(behind.try_recv(), Err(TryRecvError::Empty));
    }
}
