//! `GET /api/info`: what the web UI needs to know about the server before it draws
//! anything — the profile it serves and that profile's `[agent] locale`, so the UI
//! starts in the configured language unless its user chose another (issue 16 item 8).

use ccare_agent::routes::{Method, RouteDoc, RouteError, RouteReply, RouteSpec};
use ccare_core::Locale;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::ServerContext;
use crate::api::{handler, path};

/// The route's path.
pub const PATH: &str = "/api/info";

/// A locale of the UI and of model-visible texts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum InfoLocale {
    /// English.
    En,
    /// Simplified Chinese.
    Zh,
}

impl From<Locale> for InfoLocale {
    fn from(locale: Locale) -> Self {
        match locale {
            Locale::En => Self::En,
            Locale::Zh => Self::Zh,
        }
    }
}

/// `GET /api/info`: the served profile and its locale.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ServerInfo {
    /// The profile this server boots (`default` for the top-level tables).
    pub profile: String,
    /// The profile's `[agent] locale` (`en` unless configured): the UI's language
    /// until its user switches.
    pub locale: InfoLocale,
}

impl ServerInfo {
    /// The info of the booted profile.
    pub fn of(context: &ServerContext) -> Self {
        let profile = &context.booted.profile;
        Self {
            profile: profile.id.clone(),
            locale: profile.locale.into(),
        }
    }
}

/// The route of `GET /api/info`.
pub(super) fn routes(context: &ServerContext) -> Result<Vec<RouteSpec>, RouteError> {
    Ok(vec![
        RouteSpec::new(
            path(PATH)?,
            handler(context, |context, _request| async move {
                RouteReply::json(200, &ServerInfo::of(&context))
            }),
        )
        .method(
            Method::Get,
            RouteDoc::new(
                "The served profile and its `[agent] locale` (the web UI's starting language)",
            )
            .response::<ServerInfo>(),
        ),
    ])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ui_8_the_locale_is_written_as_the_config_writes_it() {
        for (locale, text) in [(Locale::En, "\"en\""), (Locale::Zh, "\"zh\"")] {
            let written = serde_json::to_string(&InfoLocale::from(locale)).ok();
            assert_eq!(written.as_deref(), Some(text));
        }
    }
}
