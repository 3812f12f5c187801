//! `ccare models`: the configured routes and their context windows.

use std::io::Write as _;

use ccare_llm::Llm;

use crate::Failure;
use ccare_app::Settings;

/// The LLM layer of the default profile (its compaction route included).
fn llm_of(settings: &Settings, model: &ccare_app::config::Profile) -> Result<Llm, Failure> {
    let mut config = settings.llm.clone();
    if let Some(compaction) = &model.compaction_model {
        config
            .purpose_models
            .insert(ccare_llm::Purpose::Compaction, compaction.clone());
    }
    Llm::from_config(config, &|name| std::env::var(name).ok()).map_err(|error| {
        let origin = settings
            .source
            .as_ref()
            .map_or_else(|| "config".to_owned(), |path| path.display().to_string());
        Failure::bad_input(anyhow::anyhow!("{origin}: {error}"))
    })
}

/// `ccare models`.
pub(crate) fn models(settings: &Settings, json: bool) -> Result<(), Failure> {
    let profile = settings.profile(None)?;
    let default_model = &profile.model;
    let llm = llm_of(settings, profile)?;
    let mut routes = llm.routes();
    if !routes.iter().any(|route| route.name == *default_model)
        && let Ok(route) = llm.route(default_model)
    {
        routes.insert(
            0,
            ccare_llm::RouteInfo {
                name: default_model.clone(),
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
                    "default": route.name == *default_model,
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
        let marker = if route.name == *default_model {
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
