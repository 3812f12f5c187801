//! `ccare models`: the configured routes and their context windows.

use std::io::Write as _;

use ccare_llm::Llm;

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
