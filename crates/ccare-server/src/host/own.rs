//! The host's own routes (owner [`crate::api::OWNER`]): the browser login
//! (`POST`/`DELETE /api/auth/session`, public: H-HTTP-2) and the OpenAPI document
//! (`GET /api/openapi.json`, API-5).

use std::sync::Arc;

use ccare_agent::routes::{
    Method, RouteDoc, RouteError, RoutePath, RouteReply, RouteRequest, RouteSpec, Routes,
};
use serde::{Deserialize, Serialize};

use super::auth::{Auth, login_cookie, logout_cookie};
use super::openapi::{OpenApi, document};
use crate::api::OWNER;

/// The login route's path.
pub const AUTH_SESSION: &str = "/api/auth/session";

/// The OpenAPI document's path.
pub const OPENAPI: &str = "/api/openapi.json";

/// `POST /api/auth/session`'s body.
#[derive(Debug, Clone, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct LoginRequest {
    /// The server's token (what `Authorization: Bearer` would carry).
    pub token: String,
}

/// What a login or logout answers.
#[derive(Debug, Clone, Serialize, Deserialize, schemars::JsonSchema)]
pub struct LoginReply {
    /// Whether the cookie now set authenticates (`false` after a logout).
    pub authenticated: bool,
}

fn path(pattern: &str) -> Result<RoutePath, RouteError> {
    // The patterns are this file's constants; a bad one is a bug found by every test.
    RoutePath::exact(pattern).map_err(|error| RouteError::NoMethods(error.to_string()))
}

async fn auth_session(auth: Arc<Auth>, request: RouteRequest) -> RouteReply {
    match request.method {
        Method::Delete => {
            auth.logout(&to_header_map(&request.headers));
            RouteReply::json(
                200,
                &LoginReply {
                    authenticated: false,
                },
            )
            .with_header("set-cookie", logout_cookie())
        }
        _ => {
            let body: LoginRequest = match request.json() {
                Ok(body) => body,
                Err(reply) => return reply,
            };
            if !auth.is_token(&body.token) {
                return RouteReply::error(401, "unauthorized", "the token is not this server's");
            }
            match auth.login() {
                Ok(secret) => RouteReply::json(
                    200,
                    &LoginReply {
                        authenticated: true,
                    },
                )
                .with_header("set-cookie", login_cookie(&secret)),
                Err(error) => RouteReply::error(500, "internal", format!("no randomness: {error}")),
            }
        }
    }
}

/// The request's headers back as a map, for the cookie parser.
pub(crate) fn to_header_map(headers: &[(String, String)]) -> axum::http::HeaderMap {
    let mut map = axum::http::HeaderMap::new();
    for (name, value) in headers {
        if let (Ok(name), Ok(value)) = (
            axum::http::HeaderName::try_from(name.as_str()),
            axum::http::HeaderValue::try_from(value.as_str()),
        ) {
            map.append(name, value);
        }
    }
    map
}

/// Registers the login and OpenAPI routes into `routes`.
pub(crate) fn register(routes: &Routes, auth: &Arc<Auth>) -> Result<(), RouteError> {
    let login_auth = Arc::clone(auth);
    let login = RouteSpec::new(
        path(AUTH_SESSION)?,
        Arc::new(move |request: RouteRequest| auth_session(Arc::clone(&login_auth), request)),
    )
    .method(
        Method::Post,
        RouteDoc::new("Log in a browser: sets the HttpOnly session cookie")
            .request::<LoginRequest>()
            .response::<LoginReply>(),
    )
    .method(
        Method::Delete,
        RouteDoc::new("Log out: ends the login of the cookie sent").response::<LoginReply>(),
    )
    .public();
    routes.register(OWNER, login)?;
    let table = routes.clone();
    let openapi = RouteSpec::new(
        path(OPENAPI)?,
        Arc::new(move |_: RouteRequest| {
            let doc = document(&table.list());
            async move { RouteReply::json(200, &doc) }
        }),
    )
    .method(
        Method::Get,
        RouteDoc::new("The OpenAPI 3.1 document of every route").response::<OpenApi>(),
    );
    routes.register(OWNER, openapi)?;
    Ok(())
}
