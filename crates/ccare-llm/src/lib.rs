//! The LLM layer of context-care (spec H-LLM): every model request goes through here.
//!
//! - [`Llm`] is built from config ([`LlmConfig`], or [`env_defaults`] when there is no
//!   file) and routes a [`CallConfig`] to a provider: [`Llm::prepare_call`] pins the
//!   [`Route`] and [`PreparedCall::stream`] runs it, retrying transient failures before
//!   any output ([`RetryPolicy`]).
//! - A [`Provider`] turns one request into a [`ChunkStream`] of [`Chunk`]s: blocks,
//!   deltas, usage, exactly one [`Finish`]. [`Assembler`] checks a stream against those
//!   rules and builds the message.
//! - [`openai::OpenAiAdapter`] speaks OpenAI-compatible chat completions (DeepSeek
//!   included) over reqwest and our own [`sse`] parser; [`script::ScriptProvider`]
//!   answers offline from a JSONL script.
//! - Every request carries `x-ccare-purpose` ([`Purpose`]).
//!
//! Failures use the stable codes of [`ccare_core::FailureCode`]; a cancelled call ends
//! with [`Finish::Aborted`], which is not a failure.

#![deny(missing_docs)]

mod assemble;
mod attempts;
mod chunk;
mod config;
mod credential;
mod llm;
pub mod openai;
mod provider;
mod purpose;
pub mod records;
mod request;
mod retry;
mod route;
pub mod script;
pub mod sse;

pub use assemble::{Assembled, Assembler, tool_call_block};
pub use ccare_core::{FailureCode, LlmFailure, TokenUsage};
pub use chunk::{BlockKind, Chunk, ChunkStream, Finish, RetryNotice};
pub use config::{
    ConfigError, DEEPSEEK_BASE_URL, DEEPSEEK_DEFAULT_MODEL, DEMO_MODEL, EnvDefaults, LlmConfig,
    OPENAI_BASE_URL, OPENAI_DEFAULT_MODEL, env_defaults,
};
pub use credential::ApiCredential;
pub use llm::{Llm, PreparedCall, RouteInfo};
pub use provider::Provider;
pub use purpose::{PURPOSE_HEADER, Purpose, UnknownPurpose};
pub use request::{CallConfig, GenerateRequest, RequestMessage, ToolSpec, same_schema};
pub use retry::RetryPolicy;
pub use route::{
    DEFAULT_IMAGE_TOKENS, ModelConfig, ProviderConfig, ProviderKind, Route, split_model_ref,
};
pub use tokio_util::sync::CancellationToken;
