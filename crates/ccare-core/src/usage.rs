//! Token usage as providers report it (spec H-LLM-4).

use serde::{Deserialize, Serialize};

/// Tokens of one request. `reasoning` is part of `output`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct TokenUsage {
    /// Input tokens that missed the cache.
    #[serde(default)]
    pub input: u64,
    /// Input tokens read from the provider's cache.
    #[serde(default)]
    pub cache_read: u64,
    /// Input tokens written to the provider's cache.
    #[serde(default)]
    pub cache_write: u64,
    /// Output tokens, reasoning included.
    #[serde(default)]
    pub output: u64,
    /// The reasoning share of `output`.
    #[serde(default)]
    pub reasoning: u64,
}

impl TokenUsage {
    /// All input tokens: uncached, cache reads and cache writes.
    pub fn input_total(&self) -> u64 {
        self.input
            .saturating_add(self.cache_read)
            .saturating_add(self.cache_write)
    }
}
