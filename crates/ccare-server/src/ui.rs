//! The web UI (issue 16, watch-rules-ui.md §10): hand-written HTML, ES modules and CSS
//! committed under `crates/ccare-server/ui/`, embedded at build time with
//! `include_str!` (no Node, no network, no CDN) and served from the route table like
//! every other route, behind the same fence.
//!
//! The routes (owner [`crate::api::OWNER`]):
//! - `GET /` — the app. Public in the table so that a browser without a login is sent
//!   to the login page (`303 See Other` → `/login`) instead of getting a JSON 401; the
//!   handler itself checks the bearer token or the session cookie, and the app shell
//!   holds no data (everything it shows comes from the authenticated API).
//! - `GET /login` — the login page (public; a browser already logged in is sent to `/`).
//! - `GET /login/{file}` — the login page's own two assets (public: they hold no data).
//! - `GET /ui/{file}` — the app's assets (authenticated).
//!
//! Every page and asset carries a `Content-Security-Policy` that allows only this
//! origin's scripts, styles and connections (no inline script), on top of the host's
//! security headers: text from models is inserted with `textContent` (UI-5), and the
//! policy stops anything that slips through from running.

use std::sync::Arc;

use ccare_agent::routes::{
    Method, RouteDoc, RouteError, RoutePath, RouteReply, RouteRequest, RouteSpec, Routes,
};

use crate::api::OWNER;
use crate::host::auth::Auth;
use crate::host::own::to_header_map;

/// The app's path.
pub(crate) const APP: &str = "/";
/// The login page's path.
pub(crate) const LOGIN: &str = "/login";

/// `text/html`.
const HTML: &str = "text/html; charset=utf-8";
/// JavaScript (ES modules).
const JS: &str = "text/javascript; charset=utf-8";
/// CSS.
const CSS: &str = "text/css; charset=utf-8";

/// What a UI page may load: this origin only, no inline script or style, no frames.
pub(crate) const CONTENT_SECURITY_POLICY: &str = "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; img-src 'self' data:; base-uri 'none'; form-action 'self'; frame-ancestors 'none'";

/// One embedded file.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Asset {
    /// Its name under `/ui/` (or `/login/`).
    pub(crate) name: &'static str,
    /// Its `content-type`.
    pub(crate) content_type: &'static str,
    /// Its text.
    pub(crate) body: &'static str,
}

const STYLE: Asset = Asset {
    name: "style.css",
    content_type: CSS,
    body: include_str!("../ui/style.css"),
};

/// The app's assets, served at `/ui/{name}` to an authenticated browser.
pub(crate) const APP_ASSETS: &[Asset] = &[
    Asset {
        name: "app.js",
        content_type: JS,
        body: include_str!("../ui/app.js"),
    },
    Asset {
        name: "api.js",
        content_type: JS,
        body: include_str!("../ui/api.js"),
    },
    Asset {
        name: "chat.js",
        content_type: JS,
        body: include_str!("../ui/chat.js"),
    },
    Asset {
        name: "indicator.js",
        content_type: JS,
        body: include_str!("../ui/indicator.js"),
    },
    Asset {
        name: "panel.js",
        content_type: JS,
        body: include_str!("../ui/panel.js"),
    },
    Asset {
        name: "breakdown.js",
        content_type: JS,
        body: include_str!("../ui/breakdown.js"),
    },
    Asset {
        name: "chart.js",
        content_type: JS,
        body: include_str!("../ui/chart.js"),
    },
    Asset {
        name: "prompts.js",
        content_type: JS,
        body: include_str!("../ui/prompts.js"),
    },
    Asset {
        name: "detail.js",
        content_type: JS,
        body: include_str!("../ui/detail.js"),
    },
    Asset {
        name: "rules.js",
        content_type: JS,
        body: include_str!("../ui/rules.js"),
    },
    Asset {
        name: "texts.js",
        content_type: JS,
        body: include_str!("../ui/texts.js"),
    },
    STYLE,
];

/// The login page's assets, served at `/login/{name}` to anyone past the fence.
pub(crate) const LOGIN_ASSETS: &[Asset] = &[
    Asset {
        name: "login.js",
        content_type: JS,
        body: include_str!("../ui/login.js"),
    },
    STYLE,
];

/// The app page.
const INDEX_HTML: &str = include_str!("../ui/index.html");
/// The login page.
const LOGIN_HTML: &str = include_str!("../ui/login.html");

/// The asset called `name` in `assets`.
pub(crate) fn find(assets: &'static [Asset], name: &str) -> Option<&'static Asset> {
    assets.iter().find(|asset| asset.name == name)
}

/// A page or asset with the UI's headers.
fn page(content_type: &str, body: &str) -> RouteReply {
    RouteReply::bytes(200, content_type, body.as_bytes().to_vec())
        .with_header("content-security-policy", CONTENT_SECURITY_POLICY)
        .with_header("referrer-policy", "no-referrer")
}

/// `303 See Other` to `location`.
fn see_other(location: &str) -> RouteReply {
    RouteReply::bytes(303, "text/plain; charset=utf-8", Vec::new())
        .with_header("location", location)
}

/// Whether the request carries the token or a login cookie.
fn authenticated(auth: &Auth, request: &RouteRequest) -> bool {
    auth.check(&to_header_map(&request.headers)).is_some()
}

/// The asset named by the `{file}` parameter, or a 404 naming it.
fn asset_reply(assets: &'static [Asset], request: &RouteRequest) -> RouteReply {
    let name = match request.param("file") {
        Ok(name) => name,
        Err(reply) => return reply,
    };
    match find(assets, name) {
        Some(asset) => page(asset.content_type, asset.body),
        None => RouteReply::error(404, "not-found", format!("no UI file {name}")),
    }
}

fn path(pattern: &str) -> Result<RoutePath, RouteError> {
    Ok(RoutePath::exact(pattern)?)
}

/// Registers the UI's routes into `routes`.
pub(crate) fn register(routes: &Routes, auth: &Arc<Auth>) -> Result<(), RouteError> {
    let app_auth = Arc::clone(auth);
    let app = RouteSpec::new(
        path(APP)?,
        Arc::new(move |request: RouteRequest| {
            let reply = if authenticated(&app_auth, &request) {
                page(HTML, INDEX_HTML)
            } else {
                see_other(LOGIN)
            };
            async move { reply }
        }),
    )
    .method(
        Method::Get,
        RouteDoc::new("The web UI; without a login, 303 to the login page")
            .response_media("text/html"),
    )
    .public();
    let login_auth = Arc::clone(auth);
    let login = RouteSpec::new(
        path(LOGIN)?,
        Arc::new(move |request: RouteRequest| {
            let reply = if authenticated(&login_auth, &request) {
                see_other(APP)
            } else {
                page(HTML, LOGIN_HTML)
            };
            async move { reply }
        }),
    )
    .method(
        Method::Get,
        RouteDoc::new("The login page; a browser already logged in gets 303 to the UI")
            .response_media("text/html"),
    )
    .public();
    let login_assets = RouteSpec::new(
        path("/login/{file}")?,
        Arc::new(|request: RouteRequest| {
            let reply = asset_reply(LOGIN_ASSETS, &request);
            async move { reply }
        }),
    )
    .method(
        Method::Get,
        RouteDoc::new("The login page's script and style sheet").response_media("text/javascript"),
    )
    .public();
    let app_assets = RouteSpec::new(
        path("/ui/{file}")?,
        Arc::new(|request: RouteRequest| {
            let reply = asset_reply(APP_ASSETS, &request);
            async move { reply }
        }),
    )
    .method(
        Method::Get,
        RouteDoc::new("The web UI's ES modules and style sheet").response_media("text/javascript"),
    );
    for spec in [app, login, login_assets, app_assets] {
        routes.register(OWNER, spec)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ui_5_no_asset_inserts_html_from_strings() {
        for asset in APP_ASSETS.iter().chain(LOGIN_ASSETS) {
            for forbidden in [
                "innerHTML",
                "outerHTML",
                "insertAdjacentHTML",
                "document.write",
                "eval(",
            ] {
                assert!(
                    !asset.body.contains(forbidden),
                    "{} uses {forbidden}: model text must go in with textContent (UI-5)",
                    asset.name
                );
            }
        }
    }

    #[test]
    fn ui_7_the_charts_are_svg_built_with_dom_calls_and_no_library() {
        // The load chart and the next request's breakdown (issue 16 item 7).
        for name in ["chart.js", "breakdown.js"] {
            let chart = find(APP_ASSETS, name).map(|asset| asset.body);
            let chart = chart.unwrap_or_default();
            assert!(chart.contains("createElementNS"), "{name}");
            assert!(chart.contains("http://www.w3.org/2000/svg"), "{name}");
            // Only the UI's own modules are imported: no vendored or remote library.
            for line in chart.lines().filter(|line| line.starts_with("import ")) {
                assert!(line.contains("from \"./"), "{name} imports {line}");
            }
        }
    }

    #[test]
    fn ui_8_every_english_text_has_a_chinese_one() {
        // Each table's keys (the `name:` at two-space indent), in order: zh names each en does.
        let texts = find(APP_ASSETS, "texts.js").map(|asset| asset.body);
        let texts = texts.unwrap_or_default();
        let table = |start: &str| -> Vec<String> {
            let body = texts.split(start).nth(1).unwrap_or_default();
            let body = body.split("\n};").next().unwrap_or_default();
            body.lines()
                .filter_map(|line| line.strip_prefix("  "))
                .filter(|line| !line.starts_with(' ') && !line.starts_with("//"))
                .filter_map(|line| line.split_once(':').map(|(key, _)| key.trim().to_owned()))
                .collect()
        };
        let en = table("const en = {");
        let zh = table("const zh = {");
        assert!(en.len() > 50, "{en:?}");
        assert_eq!(
            en, zh,
            "texts.js: the zh table has the en table's keys, in order"
        );
    }

    #[test]
    fn ui_8_every_text_a_module_uses_is_in_the_table() {
        // Each `texts.name` a module reads is a key of the en table (and so of zh).
        let texts = find(APP_ASSETS, "texts.js").map(|asset| asset.body);
        let texts = texts.unwrap_or_default();
        let en = texts.split("const en = {").nth(1).unwrap_or_default();
        let en = en.split("\n};").next().unwrap_or_default();
        let mut used = Vec::new();
        for asset in APP_ASSETS.iter().filter(|asset| asset.name != "texts.js") {
            for piece in asset.body.split("texts.").skip(1) {
                let name: String = piece
                    .chars()
                    .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                    .collect();
                // `./texts.js` in an import is the module, not a text.
                if !name.is_empty() && name != "js" {
                    used.push((asset.name, name));
                }
            }
        }
        assert!(used.iter().any(|(_, name)| name == "changedElsewhere"));
        for (module, name) in used {
            assert!(
                en.contains(&format!("\n  {name}:")),
                "{module} uses texts.{name}, which texts.js does not define"
            );
        }
    }

    #[test]
    fn ui_every_module_the_pages_import_is_served() {
        // Each `import ... from "./x.js"` and each `<script src>` names a served file.
        let mut names = Vec::new();
        for asset in APP_ASSETS {
            for line in asset.body.lines() {
                if let Some((_, rest)) = line.split_once("from \"./") {
                    names.push((asset.name, rest.split('"').next().unwrap_or_default()));
                }
            }
        }
        assert!(!names.is_empty());
        for (from, name) in names {
            assert!(
                find(APP_ASSETS, name).is_some(),
                "{from} imports {name}, which is not served"
            );
        }
        assert!(INDEX_HTML.contains("src=\"/ui/app.js\""));
        assert!(INDEX_HTML.contains("href=\"/ui/style.css\""));
        assert!(LOGIN_HTML.contains("src=\"/login/login.js\""));
        assert!(LOGIN_HTML.contains("href=\"/login/style.css\""));
        assert!(find(APP_ASSETS, "nope.js").is_none());
    }
}
