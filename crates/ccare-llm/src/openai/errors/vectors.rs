//! Error bodies of the common OpenAI-compatible servers, as they answer (H-LLM-5), and
//! the code each must map to. Each vector names its server; the bodies are the servers'
//! own wordings (numbers vary per request), collected from their sources, docs and the
//! reports of their users.

use ccare_core::FailureCode::{
    self, AuthFailed, ContextWindowExceeded, InvalidRequest, ProviderUnavailable, RateLimited,
};

use super::{from_http, from_stream_error};

/// `(server, HTTP status, body, expected code)`.
const VECTORS: &[(&str, u16, &str, FailureCode)] = &[
    // ---- OpenAI
    (
        "OpenAI chat completions",
        400,
        r#"{"error":{"message":"This model's maximum context length is 128000 tokens. However, your messages resulted in 130205 tokens. Please reduce the length of the messages.","type":"invalid_request_error","param":"messages","code":"context_length_exceeded"}}"#,
        ContextWindowExceeded,
    ),
    (
        "OpenAI (newer models): the code alone says it",
        400,
        r#"{"error":{"message":"Your input exceeds the context window of this model. Please adjust your input and try again.","type":"invalid_request_error","param":"input","code":"context_length_exceeded"}}"#,
        ContextWindowExceeded,
    ),
    (
        "OpenAI rate limit (tokens per minute)",
        429,
        r#"{"error":{"message":"Rate limit reached for gpt-4o in organization org-abc on tokens per min (TPM): Limit 30000, Used 29000, Requested 2000. Please try again in 2s.","type":"tokens","param":null,"code":"rate_limit_exceeded"}}"#,
        RateLimited,
    ),
    (
        "OpenAI bad key",
        401,
        r#"{"error":{"message":"Incorrect API key provided: sk-abc. You can find your API key at https://platform.openai.com/account/api-keys.","type":"invalid_request_error","param":null,"code":"invalid_api_key"}}"#,
        AuthFailed,
    ),
    (
        "OpenAI server error",
        500,
        r#"{"error":{"message":"The server had an error while processing your request. Sorry about that!","type":"server_error","param":null,"code":null}}"#,
        ProviderUnavailable,
    ),
    (
        "OpenAI malformed request",
        400,
        r#"{"error":{"message":"Invalid value for 'temperature': expected a number.","type":"invalid_request_error","param":"temperature","code":"invalid_value"}}"#,
        InvalidRequest,
    ),
    // ---- DeepSeek
    (
        "DeepSeek",
        400,
        r#"{"error":{"message":"This model's maximum context length is 65536 tokens. However, you requested 70000 tokens (62000 in the messages, 8000 in the completion). Please reduce the length of the messages or completion.","type":"invalid_request_error","param":null,"code":"invalid_request_error"}}"#,
        ContextWindowExceeded,
    ),
    (
        "DeepSeek insufficient balance",
        402,
        r#"{"error":{"message":"Insufficient Balance","type":"unknown_error","param":null,"code":"invalid_request_error"}}"#,
        InvalidRequest,
    ),
    // ---- vLLM
    (
        "vLLM (flat error object)",
        400,
        r#"{"object":"error","message":"This model's maximum context length is 4096 tokens. However, you requested 5000 tokens (4000 in the messages, 1000 in the completion). Please reduce the length of the messages or completion.","type":"BadRequestError","param":null,"code":400}"#,
        ContextWindowExceeded,
    ),
    (
        "vLLM (newer, wrapped; max_tokens too large for what is left)",
        400,
        r#"{"error":{"message":"'max_tokens' or 'max_completion_tokens' is too large: 2000. This model's maximum context length is 4096 tokens and your request has 3500 input tokens (2000 > 4096 - 3500).","type":"BadRequestError","param":null,"code":400}}"#,
        ContextWindowExceeded,
    ),
    // ---- llama.cpp server
    (
        "llama.cpp server (older wording)",
        400,
        r#"{"error":{"code":400,"message":"the request exceeds the available context size, try increasing it","type":"exceed_context_size_error","n_prompt_tokens":9412,"n_ctx":8192}}"#,
        ContextWindowExceeded,
    ),
    (
        "llama.cpp server (newer wording)",
        400,
        r#"{"error":{"code":400,"message":"request (9412 tokens) exceeds the available context size (8192 tokens), try increasing it","type":"exceed_context_size_error","n_prompt_tokens":9412,"n_ctx":8192}}"#,
        ContextWindowExceeded,
    ),
    (
        "llama.cpp server: the type alone says it",
        400,
        // The message is ours; only the type is llama.cpp's.
        r#"{"error":{"code":400,"message":"n_prompt_tokens > n_ctx","type":"exceed_context_size_error"}}"#,
        ContextWindowExceeded,
    ),
    (
        "llama.cpp server busy",
        503,
        r#"{"error":{"code":503,"message":"Loading model","type":"unavailable_error"}}"#,
        ProviderUnavailable,
    ),
    // ---- Ollama
    (
        "Ollama (native error shape)",
        400,
        r#"{"error":"the input length exceeds the context length"}"#,
        ContextWindowExceeded,
    ),
    (
        "Ollama OpenAI-compatible layer",
        500,
        r#"{"error":{"message":"the input length exceeds the context length","type":"api_error","param":null,"code":null}}"#,
        ContextWindowExceeded,
    ),
    (
        "Ollama unknown model",
        404,
        r#"{"error":{"message":"model \"llama9\" not found, try pulling it first","type":"api_error","param":null,"code":null}}"#,
        InvalidRequest,
    ),
    // ---- LM Studio (its own wording, typo included)
    (
        "LM Studio",
        400,
        r#"{"error":"Trying to keep the first 15857 tokens when context the overflows. However, the model is loaded with context length of only 4096 tokens, which is not enough. Try to load the model with a larger context length, or provide a shorter input"}"#,
        ContextWindowExceeded,
    ),
    // ---- Mistral
    (
        "Mistral",
        400,
        r#"{"object":"error","message":"Prompt contains 40960 tokens and 0 draft tokens, too large for model with 32768 maximum context length","type":"invalid_request_message_error","param":null,"code":null}"#,
        ContextWindowExceeded,
    ),
    (
        "Mistral (numeric code, raw status)",
        400,
        r#"{"object":"error","message":"Prompt contains 159202 tokens and 0 draft tokens, too large for model with 131072 maximum context length","type":"invalid_request_invalid_args","param":null,"code":"3051","raw_status_code":400}"#,
        ContextWindowExceeded,
    ),
    (
        "Mistral validation error (message is an object)",
        422,
        r#"{"object":"error","message":{"detail":[{"type":"missing","loc":["body","messages"],"msg":"Field required"}]},"type":"invalid_request_error","param":null,"code":null}"#,
        InvalidRequest,
    ),
    // ---- Groq
    (
        "Groq",
        400,
        r#"{"error":{"message":"Please reduce the length of the messages or completion.","type":"invalid_request_error","param":"messages","code":"context_length_exceeded"}}"#,
        ContextWindowExceeded,
    ),
    (
        "Groq rate limit",
        429,
        r#"{"error":{"message":"Rate limit reached for model `llama-3.3-70b-versatile` in organization `org_abc` service tier `on_demand` on tokens per minute (TPM): Limit 12000, Used 11000, Requested 2000. Please try again in 5s.","type":"tokens","code":"rate_limit_exceeded"}}"#,
        RateLimited,
    ),
    (
        "Groq: one request over the tier's per-minute cap",
        413,
        r#"{"error":{"message":"Request too large for model `llama3-70b-8192` in organization `org_abc` service tier `on_demand` on tokens per minute (TPM): Limit 6000, Requested 9512, please reduce your message size and try again.","type":"tokens","code":"rate_limit_exceeded"}}"#,
        InvalidRequest,
    ),
    // ---- Gemini (OpenAI-compatible endpoint: Google's error, wrapped in an array)
    (
        "Gemini OpenAI-compatible endpoint",
        400,
        r#"[{"error":{"code":400,"message":"The input token count (1200293) exceeds the maximum number of tokens allowed (1048576).","status":"INVALID_ARGUMENT"}}]"#,
        ContextWindowExceeded,
    ),
    (
        "Gemini native error object",
        400,
        r#"{"error":{"code":400,"message":"The input token count (132478) exceeds the maximum number of tokens allowed (131072).","status":"INVALID_ARGUMENT"}}"#,
        ContextWindowExceeded,
    ),
    (
        "Gemini quota",
        429,
        r#"[{"error":{"code":429,"message":"Resource has been exhausted (e.g. check quota).","status":"RESOURCE_EXHAUSTED"}}]"#,
        RateLimited,
    ),
    (
        "Gemini bad key (HTTP 400)",
        400,
        r#"[{"error":{"code":400,"message":"API key not valid. Please pass a valid API key.","status":"INVALID_ARGUMENT","details":[{"@type":"type.googleapis.com/google.rpc.ErrorInfo","reason":"API_KEY_INVALID","domain":"googleapis.com"}]}}]"#,
        AuthFailed,
    ),
    (
        "Gemini overloaded",
        503,
        r#"[{"error":{"code":503,"message":"The model is overloaded. Please try again later.","status":"UNAVAILABLE"}}]"#,
        ProviderUnavailable,
    ),
    // ---- Anthropic (OpenAI SDK compatibility layer: Anthropic's error envelope)
    (
        "Anthropic: prompt too long",
        400,
        r#"{"type":"error","error":{"type":"invalid_request_error","message":"prompt is too long: 210000 tokens > 200000 maximum"}}"#,
        ContextWindowExceeded,
    ),
    (
        "Anthropic: input plus max_tokens over the limit",
        400,
        r#"{"type":"error","error":{"type":"invalid_request_error","message":"input length and `max_tokens` exceed context limit: 197000 + 8192 > 200000, decrease input length or `max_tokens` and try again"}}"#,
        ContextWindowExceeded,
    ),
    (
        "Anthropic overloaded",
        529,
        r#"{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}"#,
        ProviderUnavailable,
    ),
    (
        "Anthropic rate limit",
        429,
        r#"{"type":"error","error":{"type":"rate_limit_error","message":"Number of request tokens has exceeded your per-minute rate limit"}}"#,
        RateLimited,
    ),
    (
        "Anthropic bad key",
        401,
        r#"{"type":"error","error":{"type":"authentication_error","message":"invalid x-api-key"}}"#,
        AuthFailed,
    ),
    // ---- Plain text and proxies
    (
        "a proxy's HTML page",
        502,
        "<html><body>Bad Gateway</body></html>",
        ProviderUnavailable,
    ),
    ("an empty body", 400, "", InvalidRequest),
];

#[test]
fn h_llm_5_every_collected_server_wording_maps_to_its_code() {
    let mismatches: Vec<String> = VECTORS
        .iter()
        .filter_map(|(server, status, body, expected)| {
            let got = from_http(*status, None, body).code;
            (got != *expected)
                .then(|| format!("{server} (HTTP {status}): {got:?}, expected {expected:?}"))
        })
        .collect();
    assert!(mismatches.is_empty(), "{mismatches:#?}");
}

#[test]
#[allow(clippy::unwrap_used)]
fn h_llm_5_the_message_kept_is_the_servers_text() {
    let message = |server: &str| {
        let (_, status, body, _) = VECTORS.iter().find(|vector| vector.0 == server).unwrap();
        from_http(*status, None, body).message
    };
    // Gemini's array envelope and Anthropic's typed envelope give their message.
    assert_eq!(
        message("Gemini OpenAI-compatible endpoint"),
        "The input token count (1200293) exceeds the maximum number of tokens allowed (1048576)."
    );
    assert_eq!(
        message("Anthropic: prompt too long"),
        "prompt is too long: 210000 tokens > 200000 maximum"
    );
    assert_eq!(message("an empty body"), "HTTP 400");
    assert!(message("Mistral validation error (message is an object)").contains("Field required"));
}

#[test]
#[allow(clippy::unwrap_used)]
fn h_llm_5_an_error_inside_a_stream_is_classified_by_its_type_too() {
    let error = |text: &str| serde_json::from_str::<serde_json::Value>(text).unwrap();
    // Anthropic sends an `error` event mid-stream when it is overloaded.
    assert_eq!(
        from_stream_error(&error(
            r#"{"type":"overloaded_error","message":"Overloaded"}"#
        ))
        .code,
        ProviderUnavailable
    );
    // llama.cpp reports an overflow found after the headers went out.
    assert_eq!(
        from_stream_error(&error(
            r#"{"code":400,"message":"n_prompt_tokens > n_ctx","type":"exceed_context_size_error"}"#
        ))
        .code,
        ContextWindowExceeded
    );
    assert_eq!(
        from_stream_error(&error(
            r#"{"type":"rate_limit_error","message":"slow down"}"#
        ))
        .code,
        RateLimited
    );
}
