//! The OpenAI-compatible chat-completions adapter, with DeepSeek's specifics
//! (spec H-LLM-5, H-LLM-7): streaming over our own SSE parser, non-streaming on
//! request, error normalisation, idle timeouts and immediate cancellation.

mod decode;
mod errors;
mod wire;

use std::sync::Arc;
use std::time::Duration;

use ccare_core::{FailureCode, LlmFailure};
use futures_util::StreamExt;
use reqwest::header::{AUTHORIZATION, CONTENT_TYPE, HeaderMap, HeaderName, HeaderValue};
use tokio_util::sync::CancellationToken;

use crate::chunk::{Chunk, ChunkStream, Finish};
use crate::config::{ConfigError, DEEPSEEK_BASE_URL, OPENAI_BASE_URL};
use crate::provider::{ChunkSender, Provider, TaskStream};
use crate::purpose::PURPOSE_HEADER;
use crate::request::GenerateRequest;
use crate::route::{ProviderConfig, ProviderKind};
use crate::sse::SseParser;

/// The most of an error body kept for the failure message.
const MAX_ERROR_BODY: usize = 64 * 1024;

/// Talks to one OpenAI-compatible endpoint.
#[derive(Clone)]
pub struct OpenAiAdapter {
    inner: Arc<Inner>,
}

struct Inner {
    name: String,
    endpoint: String,
    api_key: ApiKey,
    client: reqwest::Client,
    stream: bool,
    idle_timeout: Duration,
    headers: HeaderMap,
}

enum ApiKey {
    None,
    Key(String),
    /// The config names an env var that is not set: calls fail with `AUTH_FAILED`
    /// without touching the network.
    Missing {
        key: String,
        var: String,
    },
}

/// Installs ring as the process's TLS provider (reqwest is built without one, so that
/// no C-heavy crypto build is needed). Idempotent.
pub fn install_tls_provider() {
    // `Err` means a provider is already installed, which is what we want.
    let _ = rustls::crypto::ring::default_provider().install_default();
}

impl OpenAiAdapter {
    /// An adapter for `[providers.<name>]`. The key comes from the env var named by
    /// `api_key_env`, else `DEEPSEEK_API_KEY` / `OPENAI_API_KEY` by kind.
    pub fn new(
        name: &str,
        config: &ProviderConfig,
        env: &dyn Fn(&str) -> Option<String>,
    ) -> Result<Self, ConfigError> {
        let key_path = |field: &str| format!("providers.{name}.{field}");
        let base_url = match (&config.base_url, config.kind) {
            (Some(url), _) => url.clone(),
            (None, ProviderKind::Deepseek) => DEEPSEEK_BASE_URL.to_owned(),
            (None, ProviderKind::Openai | ProviderKind::Script) => OPENAI_BASE_URL.to_owned(),
        };
        match reqwest::Url::parse(&base_url) {
            Ok(url) if matches!(url.scheme(), "http" | "https") => {}
            Ok(_) | Err(_) => {
                return Err(ConfigError::invalid(
                    &key_path("base_url"),
                    "an http:// or https:// URL",
                    format!("{base_url:?}"),
                ));
            }
        }
        let endpoint = format!("{}/chat/completions", base_url.trim_end_matches('/'));
        let api_key = match &config.api_key_env {
            Some(var) => match env(var).filter(|value| !value.trim().is_empty()) {
                Some(key) => ApiKey::Key(key),
                None => ApiKey::Missing {
                    key: key_path("api_key_env"),
                    var: var.clone(),
                },
            },
            None => {
                let conventional = match config.kind {
                    ProviderKind::Deepseek => "DEEPSEEK_API_KEY",
                    ProviderKind::Openai | ProviderKind::Script => "OPENAI_API_KEY",
                };
                env(conventional)
                    .filter(|value| !value.trim().is_empty())
                    .map_or(ApiKey::None, ApiKey::Key)
            }
        };
        let mut headers = HeaderMap::new();
        for (header, value) in &config.headers {
            let header_key = key_path(&format!("headers.{header}"));
            let parsed_name = HeaderName::try_from(header.as_str()).map_err(|_| {
                ConfigError::invalid(
                    &header_key,
                    "a valid HTTP header name",
                    format!("{header:?}"),
                )
            })?;
            let parsed_value = HeaderValue::try_from(value.as_str()).map_err(|_| {
                ConfigError::invalid(
                    &header_key,
                    "a valid HTTP header value",
                    format!("{value:?}"),
                )
            })?;
            headers.insert(parsed_name, parsed_value);
        }
        install_tls_provider();
        let client = reqwest::Client::builder()
            .connect_timeout(Duration::from_millis(config.connect_timeout_ms))
            .build()
            .map_err(|error| {
                ConfigError::invalid(&key_path("kind"), "a usable HTTP client", error.to_string())
            })?;
        Ok(Self {
            inner: Arc::new(Inner {
                name: name.to_owned(),
                endpoint,
                api_key,
                client,
                stream: config.stream,
                idle_timeout: Duration::from_millis(config.idle_timeout_ms.max(1)),
                headers,
            }),
        })
    }

    /// Where requests go: `<base_url>/chat/completions`.
    pub fn endpoint(&self) -> &str {
        &self.inner.endpoint
    }
}

impl Provider for OpenAiAdapter {
    fn stream(&self, request: GenerateRequest, cancel: CancellationToken) -> ChunkStream {
        let inner = Arc::clone(&self.inner);
        TaskStream::spawn(move |out| async move {
            let finish = tokio::select! {
                biased;
                () = cancel.cancelled() => Finish::Aborted,
                finish = inner.call(&request, &out) => finish,
            };
            let finish = redacted(finish, request.config.credential.as_ref());
            let _ = out.send(Chunk::Finish(finish)).await;
        })
    }
}

/// A failure's message with a caller's key cut out (an upstream may quote the key it
/// refused): the message is logged, the key never is.
fn redacted(finish: Finish, credential: Option<&crate::ApiCredential>) -> Finish {
    match (finish, credential) {
        (Finish::Error { mut failure }, Some(credential))
            if !credential.secret().is_empty() && failure.message.contains(credential.secret()) =>
        {
            failure.message = failure.message.replace(credential.secret(), "[client key]");
            Finish::Error { failure }
        }
        (finish, _) => finish,
    }
}

fn failure(code: FailureCode, message: impl Into<String>) -> Finish {
    Finish::Error {
        failure: LlmFailure::new(code, message),
    }
}

impl Inner {
    /// Runs one attempt, sending chunks as they come, and returns the finish.
    async fn call(&self, request: &GenerateRequest, out: &ChunkSender) -> Finish {
        // A caller's own key (GW-1 pass-through) replaces the configured one, which
        // then need not be set.
        let credential = request.config.credential.as_ref();
        if let (None, ApiKey::Missing { key, var }) = (credential, &self.api_key) {
            return failure(
                FailureCode::AuthFailed,
                format!("{key} names the env var {var}, which is not set"),
            );
        }
        // H-MSG-1: a block the wire cannot carry fails the call before anything is sent.
        let body = match wire::request_body(request, self.stream) {
            Ok(body) => body,
            Err(unsupported) => {
                return failure(FailureCode::UnsupportedContent, unsupported.to_string());
            }
        };
        let body = match serde_json::to_vec(&body) {
            Ok(body) => body,
            Err(error) => {
                return failure(
                    FailureCode::InvalidRequest,
                    format!("the request could not be encoded: {error}"),
                );
            }
        };
        let mut builder = self
            .client
            .post(&self.endpoint)
            .headers(self.headers.clone())
            .header(CONTENT_TYPE, "application/json")
            .header(PURPOSE_HEADER, request.config.purpose.as_str())
            .body(body);
        match (credential, &self.api_key) {
            (Some(credential), _) => {
                builder = builder.header(AUTHORIZATION, format!("Bearer {}", credential.secret()));
            }
            (None, ApiKey::Key(key)) => {
                builder = builder.header(AUTHORIZATION, format!("Bearer {key}"));
            }
            (None, ApiKey::None | ApiKey::Missing { .. }) => {}
        }
        if self.stream {
            builder = builder.header("accept", "text/event-stream");
        }
        let response = match tokio::time::timeout(self.idle_timeout, builder.send()).await {
            Err(_) => {
                return failure(
                    FailureCode::Timeout,
                    format!(
                        "no response from {} within {} ms",
                        self.endpoint,
                        self.idle_timeout.as_millis()
                    ),
                );
            }
            Ok(Err(error)) => return transport_failure(&self.endpoint, &error),
            Ok(Ok(response)) => response,
        };
        let status = response.status();
        if !status.is_success() {
            let retry_after = errors::retry_after_ms(response.headers());
            let body = self.read_capped(response).await;
            return Finish::Error {
                failure: errors::from_http(status.as_u16(), retry_after, &body),
            };
        }
        if self.stream {
            self.read_stream(request, response, out).await
        } else {
            self.read_whole(request, response, out).await
        }
    }

    async fn read_capped(&self, response: reqwest::Response) -> String {
        let mut body = Vec::new();
        let mut stream = response.bytes_stream();
        while let Ok(Some(Ok(bytes))) = tokio::time::timeout(self.idle_timeout, stream.next()).await
        {
            let room = MAX_ERROR_BODY.saturating_sub(body.len());
            body.extend_from_slice(&bytes[..bytes.len().min(room)]);
            if body.len() >= MAX_ERROR_BODY {
                break;
            }
        }
        String::from_utf8_lossy(&body).into_owned()
    }

    async fn read_stream(
        &self,
        request: &GenerateRequest,
        response: reqwest::Response,
        out: &ChunkSender,
    ) -> Finish {
        let mut bytes_stream = response.bytes_stream();
        let mut parser = SseParser::new();
        let mut translator = decode::Translator::new(&request.call_id);
        let mut events = Vec::new();
        let mut chunks = Vec::new();
        let mut ended = false;
        let mut end_line = 0;
        while !ended {
            let next = tokio::time::timeout(self.idle_timeout, bytes_stream.next()).await;
            let parsed = match next {
                Err(_) => {
                    return self
                        .fail_keeping_usage(
                            &mut translator,
                            out,
                            LlmFailure::new(
                                FailureCode::Timeout,
                                format!(
                                    "the stream was silent for {} ms",
                                    self.idle_timeout.as_millis()
                                ),
                            ),
                        )
                        .await;
                }
                Ok(Some(Err(error))) => {
                    let message = format!(
                        "the connection to {} was lost mid-stream: {error}",
                        self.endpoint
                    );
                    return self
                        .fail_keeping_usage(
                            &mut translator,
                            out,
                            LlmFailure::new(FailureCode::ProviderUnavailable, message),
                        )
                        .await;
                }
                Ok(Some(Ok(bytes))) => parser.feed(&bytes, &mut events),
                Ok(None) => {
                    ended = true;
                    end_line = parser.line() + 1;
                    parser.finish(&mut events)
                }
            };
            if let Err(error) = parsed {
                return self
                    .fail_keeping_usage(
                        &mut translator,
                        out,
                        LlmFailure::new(FailureCode::StreamProtocol, error.to_string()),
                    )
                    .await;
            }
            for event in events.drain(..) {
                match translator.sse_event(&event, &mut chunks) {
                    Ok(false) => {}
                    Ok(true) => {
                        ended = true;
                        break;
                    }
                    Err(failure) => {
                        for chunk in chunks.drain(..) {
                            if !out.send(chunk).await {
                                return Finish::Aborted;
                            }
                        }
                        return self.fail_keeping_usage(&mut translator, out, failure).await;
                    }
                }
            }
            if ended
                && !matches!(chunks.last(), Some(Chunk::Finish(_)))
                && let Err(failure) = translator.end(end_line, &mut chunks)
            {
                for chunk in chunks.drain(..) {
                    let _ = out.send(chunk).await;
                }
                return Finish::Error { failure };
            }
            for chunk in chunks.drain(..) {
                if let Chunk::Finish(finish) = chunk {
                    return finish;
                }
                if !out.send(chunk).await {
                    return Finish::Aborted;
                }
            }
        }
        Finish::Error {
            failure: LlmFailure::new(
                FailureCode::StreamProtocol,
                "the stream ended without a finish_reason",
            ),
        }
    }

    async fn fail_keeping_usage(
        &self,
        translator: &mut decode::Translator,
        out: &ChunkSender,
        failure: LlmFailure,
    ) -> Finish {
        if let Some(usage) = translator.take_usage() {
            let _ = out.send(Chunk::Usage(usage)).await;
        }
        Finish::Error { failure }
    }

    async fn read_whole(
        &self,
        request: &GenerateRequest,
        response: reqwest::Response,
        out: &ChunkSender,
    ) -> Finish {
        let body = match tokio::time::timeout(self.idle_timeout, response.text()).await {
            Err(_) => {
                return failure(
                    FailureCode::Timeout,
                    format!(
                        "the response did not complete within {} ms",
                        self.idle_timeout.as_millis()
                    ),
                );
            }
            Ok(Err(error)) => return transport_failure(&self.endpoint, &error),
            Ok(Ok(body)) => body,
        };
        let mut translator = decode::Translator::new(&request.call_id);
        let mut chunks = Vec::new();
        let outcome = translator
            .event(&body, 1, &mut chunks)
            .and_then(|()| translator.end(1, &mut chunks));
        for chunk in chunks {
            if let Chunk::Finish(finish) = chunk {
                return finish;
            }
            if !out.send(chunk).await {
                return Finish::Aborted;
            }
        }
        match outcome {
            Ok(()) => failure(
                FailureCode::StreamProtocol,
                "the response had no finish_reason",
            ),
            Err(failure) => Finish::Error { failure },
        }
    }
}

/// Decodes a recorded chat-completions SSE body, delivered in `pieces`, into the
/// chunks the adapter would stream (the finish included). Offline and deterministic:
/// for benchmarks, fuzzing and replaying captured streams. A body that breaks the
/// wire contract is a `STREAM_PROTOCOL` failure naming the SSE line.
pub fn decode_stream<'a>(
    pieces: impl IntoIterator<Item = &'a [u8]>,
    call_id: &str,
) -> Result<Vec<Chunk>, LlmFailure> {
    let mut parser = SseParser::new();
    let mut translator = decode::Translator::new(call_id);
    let mut events = Vec::new();
    let mut chunks = Vec::new();
    let protocol = |error: crate::sse::SseError| {
        LlmFailure::new(FailureCode::StreamProtocol, error.to_string())
    };
    let mut pieces = pieces.into_iter();
    loop {
        let end_line = parser.line() + 1;
        let last = match pieces.next() {
            Some(piece) => {
                parser.feed(piece, &mut events).map_err(protocol)?;
                false
            }
            None => {
                parser.finish(&mut events).map_err(protocol)?;
                true
            }
        };
        for event in events.drain(..) {
            if translator.sse_event(&event, &mut chunks)? {
                return Ok(chunks);
            }
        }
        if last {
            translator.end(end_line, &mut chunks)?;
            return Ok(chunks);
        }
    }
}

fn transport_failure(endpoint: &str, error: &reqwest::Error) -> Finish {
    if error.is_timeout() {
        return failure(
            FailureCode::Timeout,
            format!("{endpoint} timed out: {error}"),
        );
    }
    let mut message = format!("cannot reach {endpoint}: {error}");
    let mut source = std::error::Error::source(error);
    while let Some(cause) = source {
        let cause_text = cause.to_string();
        if !message.contains(&cause_text) {
            message.push_str(": ");
            message.push_str(&cause_text);
        }
        source = cause.source();
    }
    failure(FailureCode::ProviderUnavailable, message)
}

impl std::fmt::Debug for OpenAiAdapter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OpenAiAdapter")
            .field("name", &self.inner.name)
            .field("endpoint", &self.inner.endpoint)
            .finish_non_exhaustive()
    }
}
