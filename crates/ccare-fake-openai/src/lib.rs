//! A fake OpenAI-compatible chat-completions server, in process, on `127.0.0.1:0`, for
//! tests of the LLM adapter and the CLI, and for benchmarks.
//!
//! - [`FakeServer`] binds a free port and serves in a spawned tokio task. Tests queue
//!   one [`Reply`] per expected request with [`FakeServer::push`], point the client at
//!   [`FakeServer::base_url`], and afterwards assert on [`FakeServer::requests`]: every
//!   request, with lowercased headers and its JSON body, is recorded before it is
//!   answered.
//! - [`Reply::Chunks`] holds a [`Script`] of [`Step`]s: text, DeepSeek reasoning, tool
//!   call deltas, usage, finish reasons, raw SSE lines and bytes, and delays. A request
//!   with `"stream": true` gets real `chat.completion.chunk` SSE events, each flushed as
//!   it is produced, ended as the script's [`End`] says (`[DONE]`, a clean close, an
//!   aborted connection, or a stall). Any other request gets one `chat.completion`
//!   assembled from the same steps.
//! - [`Reply::Http`] is an error status with headers and body; [`Reply::overflow`] and
//!   [`Reply::rate_limited`] are the common ones.
//! - [`openai_usage`] and [`deepseek_usage`] build `usage` objects in each provider's
//!   shape.
//!
//! The server does not check requests against the OpenAI schema, count tokens or
//! honour `stream_options`: it answers exactly what was scripted and leaves the
//! assertions to the test. Start reading at `handle` in `server.rs`.
//!
//! ```
//! use std::time::Duration;
//! use ccare_fake_openai::{FakeServer, Reply};
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let server = FakeServer::start().await?;
//! server.push(Reply::text("Hello world"));
//!
//! let _ = rustls::crypto::ring::default_provider().install_default();
//! let response = reqwest::Client::new()
//!     .post(format!("{}/chat/completions", server.base_url()))
//!     .header("authorization", "Bearer sk-test")
//!     .body(r#"{"model":"fake-model","stream":true,"messages":[]}"#)
//!     .send()
//!     .await?;
//! let body = response.text().await?;
//! assert!(body.contains(r#""content":"Hello ""#));
//! assert!(body.ends_with("data: [DONE]\n\n"));
//!
//! let requests = server.wait_for_requests(1, Duration::from_secs(1)).await;
//! assert_eq!(requests[0].header("Authorization"), Some("Bearer sk-test"));
//! assert_eq!(requests[0].body["stream"], true);
//! # Ok(())
//! # }
//! ```

#![deny(missing_docs)]

mod script;
mod server;
mod usage;
mod wire;

pub use script::{DEFAULT_MODEL, End, Reply, Script, Step};
pub use server::{FakeServer, NO_REPLY_LEFT_BODY, RecordedRequest, Responder};
pub use usage::{deepseek_usage, openai_usage};
