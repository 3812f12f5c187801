//! Usage objects in the shapes OpenAI and DeepSeek send.

use serde_json::{Value, json};

/// A DeepSeek `usage` object.
///
/// `{"prompt_tokens": hit+miss, "completion_tokens": completion, "total_tokens":
/// hit+miss+completion, "prompt_cache_hit_tokens": hit, "prompt_cache_miss_tokens": miss,
/// "completion_tokens_details": {"reasoning_tokens": reasoning}}`.
pub fn deepseek_usage(prompt_hit: u64, prompt_miss: u64, completion: u64, reasoning: u64) -> Value {
    let prompt = prompt_hit + prompt_miss;
    json!({
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "total_tokens": prompt + completion,
        "prompt_cache_hit_tokens": prompt_hit,
        "prompt_cache_miss_tokens": prompt_miss,
        "completion_tokens_details": { "reasoning_tokens": reasoning }
    })
}

/// An OpenAI `usage` object.
///
/// `{"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens":
/// prompt+completion, "prompt_tokens_details": {"cached_tokens": cached},
/// "completion_tokens_details": {"reasoning_tokens": reasoning}}`.
pub fn openai_usage(prompt: u64, cached: u64, completion: u64, reasoning: u64) -> Value {
    json!({
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "total_tokens": prompt + completion,
        "prompt_tokens_details": { "cached_tokens": cached },
        "completion_tokens_details": { "reasoning_tokens": reasoning }
    })
}
