//! The provider trait adapters implement (spec H-LLM-1), and the task-backed chunk
//! stream they share.

use std::pin::Pin;
use std::task::{Context, Poll};

use futures_core::Stream;
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use crate::chunk::{Chunk, ChunkStream};
use crate::request::GenerateRequest;

/// A model provider: turns one request into one chunk stream.
///
/// The stream obeys H-LLM-3 (exactly one finish, last), turns transport errors into
/// `finish{error}`, and ends with `finish{aborted}` soon after `cancel` fires.
pub trait Provider: Send + Sync + 'static {
    /// Starts one attempt. Must be called inside a tokio runtime.
    fn stream(&self, request: GenerateRequest, cancel: CancellationToken) -> ChunkStream;
}

/// A chunk stream fed by a spawned task. Dropping the stream stops the task, which
/// drops its HTTP response and so closes the connection.
pub(crate) struct TaskStream {
    receiver: mpsc::Receiver<Chunk>,
    task: JoinHandle<()>,
}

impl TaskStream {
    /// Spawns `produce` with a sender and returns the stream of what it sends.
    pub(crate) fn spawn<F, Fut>(produce: F) -> ChunkStream
    where
        F: FnOnce(ChunkSender) -> Fut,
        Fut: Future<Output = ()> + Send + 'static,
    {
        let (sender, receiver) = mpsc::channel(256);
        let task = tokio::spawn(produce(ChunkSender { sender }));
        Box::pin(TaskStream { receiver, task })
    }
}

impl Stream for TaskStream {
    type Item = Chunk;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Chunk>> {
        self.receiver.poll_recv(cx)
    }
}

impl Drop for TaskStream {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// The sending side of a [`TaskStream`].
pub(crate) struct ChunkSender {
    sender: mpsc::Sender<Chunk>,
}

impl ChunkSender {
    /// Sends a chunk; `false` when the consumer is gone and the producer should stop.
    pub(crate) async fn send(&self, chunk: Chunk) -> bool {
        self.sender.send(chunk).await.is_ok()
    }
}
