//! The chunk stream of a prepared call (spec H-LLM-6): the provider's attempts one
//! after another, transient failures before any content retried after a backoff, each
//! retry announced by a [`Chunk::Retry`], failures stamped with the route.
//!
//! It runs in the consumer's task, polled with the stream: the provider's own task is
//! the only one a call spawns, and each chunk crosses one channel, not two.

use std::sync::Arc;
use std::time::Duration;

use ccare_core::{FailureCode, LlmFailure};
use futures_util::StreamExt;
use tokio_util::sync::CancellationToken;

use crate::chunk::{Chunk, ChunkStream, Finish, RetryNotice};
use crate::provider::Provider;
use crate::request::{CallConfig, GenerateRequest};
use crate::route::Route;

/// Where a call's stream is.
enum Phase {
    /// The next attempt has not started.
    Start,
    /// An attempt is streaming; `content` says whether it sent model output yet.
    Streaming { stream: ChunkStream, content: bool },
    /// A retry was announced; the next attempt starts after `delay_ms`.
    Backoff { delay_ms: u64 },
    /// The finish was sent.
    Done,
}

/// The state of one call's stream.
pub(crate) struct Attempts {
    call_id: String,
    route: Route,
    config: Arc<CallConfig>,
    adapter: Arc<dyn Provider>,
    cancel: CancellationToken,
    attempt: u32,
    phase: Phase,
}

impl Attempts {
    /// The stream of the call `call_id` over `route`, sent to `adapter`.
    pub(crate) fn stream(
        call_id: String,
        route: Route,
        config: CallConfig,
        adapter: Arc<dyn Provider>,
        cancel: CancellationToken,
    ) -> ChunkStream {
        let attempts = Self {
            call_id,
            route,
            config: Arc::new(config),
            adapter,
            cancel,
            attempt: 1,
            phase: Phase::Start,
        };
        Box::pin(futures_util::stream::unfold(
            attempts,
            |mut attempts| async move { attempts.next().await.map(|chunk| (chunk, attempts)) },
        ))
    }

    /// The next chunk; `None` after the finish.
    async fn next(&mut self) -> Option<Chunk> {
        loop {
            match &mut self.phase {
                Phase::Done => return None,
                Phase::Start => {
                    let request = GenerateRequest {
                        call_id: self.call_id.clone(),
                        attempt: self.attempt,
                        route: self.route.clone(),
                        config: Arc::clone(&self.config),
                    };
                    self.phase = Phase::Streaming {
                        stream: self.adapter.stream(request, self.cancel.clone()),
                        content: false,
                    };
                }
                Phase::Streaming { stream, content } => {
                    let Some(chunk) = stream.next().await else {
                        let failure = LlmFailure::new(
                            FailureCode::StreamProtocol,
                            "the provider's stream ended without a finish",
                        );
                        return Some(self.finish(Finish::Error {
                            failure: with_route(failure, &self.route),
                        }));
                    };
                    match chunk {
                        Chunk::Finish(Finish::Error { failure }) => {
                            let failure = with_route(failure, &self.route);
                            let delay = (!*content)
                                .then(|| {
                                    self.route.retry.delay_for(
                                        self.attempt,
                                        &failure,
                                        fastrand::f64(),
                                    )
                                })
                                .flatten();
                            let Some(delay_ms) = delay else {
                                return Some(self.finish(Finish::Error { failure }));
                            };
                            // The failed attempt's stream (and its task) goes now, before
                            // the wait.
                            self.phase = Phase::Backoff { delay_ms };
                            return Some(Chunk::Retry(RetryNotice {
                                attempt: self.attempt,
                                delay_ms,
                                failure,
                            }));
                        }
                        Chunk::Finish(finish) => return Some(self.finish(finish)),
                        chunk => {
                            *content |= chunk.is_content();
                            return Some(chunk);
                        }
                    }
                }
                Phase::Backoff { delay_ms } => {
                    let delay = Duration::from_millis(*delay_ms);
                    tokio::select! {
                        biased;
                        () = self.cancel.cancelled() => {
                            return Some(self.finish(Finish::Aborted));
                        }
                        () = tokio::time::sleep(delay) => {}
                    }
                    self.attempt += 1;
                    self.phase = Phase::Start;
                }
            }
        }
    }

    /// Ends the stream with `finish`.
    fn finish(&mut self, finish: Finish) -> Chunk {
        self.phase = Phase::Done;
        Chunk::Finish(finish)
    }
}

/// Names the route on a failure that does not name one.
fn with_route(mut failure: LlmFailure, route: &Route) -> LlmFailure {
    if failure.provider.is_empty() {
        failure.provider.clone_from(&route.provider);
    }
    if failure.model.is_empty() {
        failure.model.clone_from(&route.model);
    }
    failure
}

#[cfg(test)]
mod tests {
    use ccare_core::ContentBlock;
    use tokio::sync::Notify;

    use super::*;
    use crate::chunk::BlockKind;
    use crate::config::LlmConfig;
    use crate::llm::Llm;
    use crate::provider::TaskStream;
    use crate::route::{ProviderConfig, ProviderKind};

    /// Sends a block start, waits for the gate, then closes the block and stops: one
    /// task, like every adapter.
    struct Gated(Arc<Notify>);

    impl Provider for Gated {
        fn stream(&self, _request: GenerateRequest, _cancel: CancellationToken) -> ChunkStream {
            let gate = Arc::clone(&self.0);
            TaskStream::spawn(move |out| async move {
                let start = Chunk::BlockStart {
                    index: 0,
                    kind: BlockKind::Text,
                    id: None,
                    name: None,
                };
                if !out.send(start).await {
                    return;
                }
                gate.notified().await;
                let end = Chunk::BlockEnd {
                    index: 0,
                    block: ContentBlock::text("hi"),
                };
                if out.send(end).await {
                    let _ = out.send(Chunk::Finish(Finish::Stop)).await;
                }
            })
        }
    }

    #[tokio::test]
    async fn h_llm_1_a_call_runs_in_one_task() {
        let gate = Arc::new(Notify::new());
        let Ok(mut llm) = Llm::from_config(LlmConfig::default(), &|_| None) else {
            panic!("an empty config builds");
        };
        llm.insert_provider(
            "gated",
            ProviderConfig::new(ProviderKind::Openai),
            Arc::new(Gated(Arc::clone(&gate))),
        );
        let config = CallConfig {
            model: "gated/m".into(),
            ..CallConfig::default()
        };
        let Ok(call) = llm.prepare_call(config) else {
            panic!("the route is configured");
        };
        let metrics = tokio::runtime::Handle::current().metrics();
        let idle = metrics.num_alive_tasks();
        let mut stream = call.stream(CancellationToken::new());
        let first = stream.next().await;
        assert!(matches!(first, Some(Chunk::BlockStart { index: 0, .. })));
        assert_eq!(metrics.num_alive_tasks() - idle, 1);
        gate.notify_one();
        let mut rest = Vec::new();
        while let Some(chunk) = stream.next().await {
            rest.push(chunk);
        }
        assert_eq!(
            rest,
            vec![
                Chunk::BlockEnd {
                    index: 0,
                    block: ContentBlock::text("hi"),
                },
                Chunk::Finish(Finish::Stop),
            ]
        );
    }
}
