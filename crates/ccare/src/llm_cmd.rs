//! `ccare run --prompt` (one answer, streamed) and `ccare models` (configured routes).
//!
//! `run` sends one prompt to the configured model and prints the answer as it
//! streams; the full agent loop (sessions, tools, hooks) replaces this path with
//! issue 4. Exit codes as in DESIGN.md §5: 0 completed (`length` warns), 1 failure with
//! the code on stderr, 130 on Ctrl-C, 2 bad usage or config.

use std::io::Write as _;

use ccare_core::Message;
use ccare_llm::{Assembler, CallConfig, CancellationToken, Chunk, Finish, Llm, RequestMessage};
use futures_util::StreamExt as _;

use crate::Failure;
use crate::config::Settings;

fn llm_of(settings: &Settings) -> Result<Llm, Failure> {
    Llm::from_config(settings.llm.clone(), &|name| std::env::var(name).ok()).map_err(|error| {
        let origin = settings
            .source
            .as_ref()
            .map_or_else(|| "config".to_owned(), |path| path.display().to_string());
        Failure::bad_input(anyhow::anyhow!("{origin}: {error}"))
    })
}

/// `ccare models`.
pub(crate) fn models(settings: &Settings, json: bool) -> Result<(), Failure> {
    let llm = llm_of(settings)?;
    let mut routes = llm.routes();
    if !routes.iter().any(|route| route.name == settings.model)
        && let Ok(route) = llm.route(&settings.model)
    {
        routes.insert(
            0,
            ccare_llm::RouteInfo {
                name: settings.model.clone(),
                kind: route.kind,
                context_window: route.context_window,
                max_output_tokens: route.max_output_tokens,
                tokenizer: route.tokenizer,
            },
        );
    }
    let mut out = std::io::stdout().lock();
    if json {
        let rows: Vec<_> = routes
            .iter()
            .map(|route| {
                serde_json::json!({
                    "name": route.name,
                    "kind": route.kind.as_str(),
                    "context_window": route.context_window,
                    "max_output_tokens": route.max_output_tokens,
                    "tokenizer": route.tokenizer.as_ref().map(|path| path.display().to_string()),
                    "default": route.name == settings.model,
                })
            })
            .collect();
        writeln!(out, "{}", serde_json::Value::Array(rows)).map_err(Failure::failed)?;
        return Ok(());
    }
    writeln!(
        out,
        "{:<40} {:<9} {:>14} {:>11}",
        "ROUTE", "KIND", "CONTEXT", "MAX OUTPUT"
    )
    .map_err(Failure::failed)?;
    for route in routes {
        let marker = if route.name == settings.model {
            " (default)"
        } else {
            ""
        };
        let window = route
            .context_window
            .map_or_else(|| "unknown".to_owned(), |n| n.to_string());
        let output = route
            .max_output_tokens
            .map_or_else(|| "-".to_owned(), |n| n.to_string());
        writeln!(
            out,
            "{:<40} {:<9} {window:>14} {output:>11}{marker}",
            route.name,
            route.kind.as_str()
        )
        .map_err(Failure::failed)?;
    }
    Ok(())
}

/// `ccare run --prompt TEXT`.
pub(crate) async fn run(settings: &Settings, prompt: String) -> Result<(), Failure> {
    let llm = llm_of(settings)?;
    let config = CallConfig {
        model: settings.model.clone(),
        messages: vec![RequestMessage::user(Message::from_blocks(vec![
            ccare_core::ContentBlock::text(prompt),
        ]))],
        ..CallConfig::default()
    };
    let call = llm.prepare_call(config).map_err(|failure| {
        Failure::bad_input(anyhow::anyhow!("{}: {}", failure.code, failure.message))
    })?;
    let cancel = CancellationToken::new();
    let ctrl_c = {
        let cancel = cancel.clone();
        tokio::spawn(async move {
            if tokio::signal::ctrl_c().await.is_ok() {
                cancel.cancel();
            }
        })
    };
    let mut stream = call.stream(cancel.clone());
    let mut assembler = Assembler::new();
    let mut stdout = std::io::stdout();
    let mut protocol_failure = None;
    while let Some(chunk) = stream.next().await {
        if let Err(failure) = assembler.push(&chunk) {
            protocol_failure = Some(failure);
            break;
        }
        match &chunk {
            Chunk::TextDelta { text, .. } => {
                stdout.write_all(text.as_bytes()).map_err(Failure::failed)?;
                stdout.flush().map_err(Failure::failed)?;
            }
            Chunk::Retry(notice) => {
                eprintln!(
                    "retrying in {} ms after {}: {}",
                    notice.delay_ms, notice.failure.code, notice.failure.message
                );
            }
            Chunk::BlockStart { .. }
            | Chunk::ReasoningDelta { .. }
            | Chunk::ToolCallDelta { .. }
            | Chunk::BlockEnd { .. }
            | Chunk::Usage(_)
            | Chunk::Finish(_) => {}
        }
    }
    drop(stream);
    ctrl_c.abort();
    let assembled = match protocol_failure {
        Some(failure) => assembler.fail(failure),
        None => assembler.finish(),
    };
    let printed = assembled.text();
    if !printed.is_empty() && !printed.ends_with('\n') {
        writeln!(stdout).map_err(Failure::failed)?;
    }
    match assembled.finish {
        Finish::Stop | Finish::ToolCalls => Ok(()),
        Finish::Length => {
            eprintln!("warning: the answer was cut at the output limit (finish: length)");
            Ok(())
        }
        Finish::Aborted => Err(Failure {
            code: 130,
            error: anyhow::anyhow!("aborted (cause: user)"),
        }),
        Finish::Error { failure } => Err(Failure::failed(anyhow::anyhow!("{failure}"))),
    }
}
