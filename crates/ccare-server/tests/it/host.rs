//! The HTTP host (host.md H-HTTP-1..4, server.md API-3/API-5): every route of the
//! router's own table behind the same fence, auth and limits (the table-driven test);
//! login cookies; plugin routes through the same pipeline and gone on unmount; SSE
//! keep-alives and shutdown; the token file; the OpenAPI document.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use ccare_agent::routes::{
    Method as RouteMethod, RouteAuth, RouteDoc, RoutePath, RouteReply, RouteRequest, RouteSpec,
    SseFrame,
};
use ccare_agent::{MountError, Plugin, PluginScope};
use futures_util::StreamExt as _;
use reqwest::Method;
use serde_json::{Value, json};

use crate::rig::{Rig, RigOptions, error_of, ok_json};

const ALL: [RouteMethod; 5] = [
    RouteMethod::Get,
    RouteMethod::Post,
    RouteMethod::Put,
    RouteMethod::Patch,
    RouteMethod::Delete,
];

fn reqwest_method(method: RouteMethod) -> Method {
    Method::from_bytes(method.as_str().as_bytes()).unwrap()
}

/// A concrete path for a route: `{param}` → `sample`, a prefix + `sample/file`.
fn sample_path(path: &RoutePath) -> String {
    let concrete: Vec<String> = path
        .pattern()
        .split('/')
        .map(|segment| {
            if segment.starts_with('{') {
                "sample".to_owned()
            } else {
                segment.to_owned()
            }
        })
        .collect();
    let concrete = concrete.join("/");
    if path.is_prefix() {
        format!("{concrete}sample/file")
    } else {
        concrete
    }
}

/// Every response carries the security headers and a JSON error body.
fn assert_headers(response: &reqwest::Response, what: &str) {
    let header = |name: &str| {
        response
            .headers()
            .get(name)
            .and_then(|value| value.to_str().ok())
            .map(str::to_owned)
    };
    assert_eq!(
        header("cache-control").as_deref(),
        Some("no-store"),
        "{what}"
    );
    assert_eq!(
        header("x-content-type-options").as_deref(),
        Some("nosniff"),
        "{what}"
    );
    assert_eq!(
        header("content-type").as_deref(),
        Some("application/json"),
        "{what}"
    );
}

async fn refused(response: reqwest::Response, what: &str) -> (u16, String) {
    assert_headers(&response, what);
    if what.contains(" /v1/") {
        // The gateway's routes refuse in OpenAI's shape, not retried (GW-6).
        assert_eq!(
            response
                .headers()
                .get("x-should-retry")
                .map(|value| value.as_bytes()),
            Some(&b"false"[..]),
            "{what}"
        );
        let status = response.status().as_u16();
        let body: serde_json::Value = response.json().await.unwrap();
        let error = body["error"]
            .as_object()
            .unwrap_or_else(|| panic!("{what}: {body}"));
        assert!(
            error["message"].is_string() && error["type"].is_string(),
            "{what}: {body}"
        );
        return (
            status,
            error["code"].as_str().unwrap_or_default().to_owned(),
        );
    }
    let (status, code, _) = error_of(response).await;
    (status, code)
}

/// The `Allow` a route should answer with.
fn allow_of(methods: &[RouteMethod]) -> String {
    let mut names = Vec::new();
    for method in methods {
        names.push(method.as_str());
        if *method == RouteMethod::Get {
            names.push("HEAD");
        }
    }
    names.join(", ")
}

#[tokio::test(flavor = "multi_thread")]
async fn h_http_1_every_route_refuses_no_auth_bad_host_cross_site_large_bodies_wrong_media_and_methods()
 {
    // The gateway's chat route reads `[gateway] max_request_mib`, the others 1 MiB.
    let rig = Rig::start_with(RigOptions {
        toml: "[gateway]\nmax_request_mib = 2\n".into(),
        ..RigOptions::default()
    })
    .await;
    let routes = rig.routes();
    let patterns: BTreeSet<String> = routes
        .iter()
        .map(|entry| entry.spec.path.pattern().to_owned())
        .collect();
    // The server's own routes are there; plugin and API routes join as they are added.
    assert!(patterns.contains("/api/openapi.json"), "{patterns:?}");
    assert!(patterns.contains("/api/auth/session"), "{patterns:?}");
    let mut checked = 0;
    for entry in &routes {
        let spec = &entry.spec;
        let limit = if spec.path.pattern() == "/v1/chat/completions" {
            2 * 1024 * 1024
        } else {
            ccare_server::BODY_LIMIT
        };
        assert_eq!(spec.body_limit.unwrap_or(ccare_server::BODY_LIMIT), limit);
        let big = vec![b' '; limit + 1];
        let path = sample_path(&spec.path);
        let methods: Vec<RouteMethod> = spec.methods.keys().copied().collect();
        for &method in &methods {
            let what = format!("{} {path} ({})", method.as_str(), entry.owner);
            let request = |method: RouteMethod| rig.authed(reqwest_method(method), &path);
            if spec.auth == RouteAuth::Required {
                let response = rig
                    .client
                    .request(reqwest_method(method), rig.url(&path))
                    .send()
                    .await
                    .unwrap();
                assert_eq!(
                    response
                        .headers()
                        .get("www-authenticate")
                        .map(|value| value.as_bytes()),
                    Some(&b"Bearer"[..]),
                    "{what}"
                );
                assert_eq!(
                    refused(response, &what).await,
                    (401, "unauthorized".into()),
                    "{what}"
                );
                let wrong = rig
                    .client
                    .request(reqwest_method(method), rig.url(&path))
                    .bearer_auth("not-the-token")
                    .send()
                    .await
                    .unwrap();
                assert_eq!(
                    refused(wrong, &what).await,
                    (401, "unauthorized".into()),
                    "{what}"
                );
            }
            let response = request(method)
                .header("host", "evil.example")
                .send()
                .await
                .unwrap();
            assert_eq!(
                refused(response, &what).await,
                (403, "host-rejected".into()),
                "{what}"
            );
            let response = request(method)
                .header("origin", "http://evil.example")
                .send()
                .await
                .unwrap();
            assert_eq!(
                refused(response, &what).await,
                (403, "origin-rejected".into()),
                "{what}"
            );
            let response = request(method)
                .header("sec-fetch-site", "cross-site")
                .send()
                .await
                .unwrap();
            assert_eq!(
                refused(response, &what).await,
                (403, "origin-rejected".into()),
                "{what}"
            );
            let response = request(method)
                .header("content-type", "application/json")
                .body(big.clone())
                .send()
                .await
                .unwrap();
            assert_eq!(
                response
                    .headers()
                    .get("connection")
                    .map(|value| value.as_bytes()),
                Some(&b"close"[..]),
                "{what}: the unread body ends the connection"
            );
            assert_eq!(
                refused(response, &what).await,
                (413, "request-too-large".into()),
                "{what}"
            );
            if method.is_unsafe() {
                let response = request(method)
                    .header("content-type", "text/plain")
                    .body("{}")
                    .send()
                    .await
                    .unwrap();
                assert_eq!(
                    refused(response, &what).await,
                    (415, "json-required".into()),
                    "{what}"
                );
                let response = request(method).body("{}").send().await.unwrap();
                assert_eq!(
                    refused(response, &what).await,
                    (415, "json-required".into()),
                    "{what}"
                );
            }
            checked += 1;
        }
        let Some(wrong) = ALL.into_iter().find(|method| !methods.contains(method)) else {
            continue;
        };
        let what = format!("{} {path} (not answered)", wrong.as_str());
        let response = rig
            .authed(reqwest_method(wrong), &path)
            .send()
            .await
            .unwrap();
        assert_eq!(
            response
                .headers()
                .get("allow")
                .and_then(|value| value.to_str().ok()),
            Some(allow_of(&methods).as_str()),
            "{what}"
        );
        assert_eq!(
            refused(response, &what).await,
            (405, "method-not-allowed".into()),
            "{what}"
        );
    }
    assert!(checked >= 3, "{checked}");
    let response = rig.get("/no/such/route").await;
    assert_eq!(refused(response, "404").await, (404, "not-found".into()));
}

/// A test plugin with routes of every kind, mounted into the rig's host.
struct Probe;

fn exact(pattern: &str) -> RoutePath {
    RoutePath::exact(pattern).unwrap()
}

/// What the echo route saw.
#[derive(Debug, serde::Serialize, serde::Deserialize, schemars::JsonSchema, PartialEq)]
struct Echo {
    method: String,
    path: String,
    params: Vec<(String, String)>,
    rest: String,
    query: String,
    body: String,
}

async fn echo(request: RouteRequest) -> RouteReply {
    RouteReply::json(
        200,
        &Echo {
            method: request.method.as_str().to_owned(),
            path: request.path.clone(),
            params: request.params.clone().into_iter().collect(),
            rest: request.rest.clone(),
            query: request.query.clone(),
            body: String::from_utf8_lossy(&request.body).into_owned(),
        },
    )
}

/// One frame, then nothing until the client or the server goes.
async fn events(_: RouteRequest) -> RouteReply {
    let first = SseFrame {
        event: Some("hello".into()),
        id: Some("1".into()),
        data: "{\"n\":1}".into(),
    };
    let frames = futures_util::stream::iter([first]).chain(futures_util::stream::pending());
    RouteReply::events(frames.boxed())
}

async fn boom(_: RouteRequest) -> RouteReply {
    panic!("the probe's handler fails")
}

impl Plugin for Probe {
    fn name(&self) -> &str {
        "probe"
    }

    fn mount(&self, _: &Value, scope: &mut PluginScope<'_>) -> Result<(), MountError> {
        scope.route(
            RouteSpec::new(exact("/probe/echo/{name}"), Arc::new(echo))
                .method(RouteMethod::Get, RouteDoc::new("echo").response::<Echo>())
                .method(RouteMethod::Post, RouteDoc::new("echo").response::<Echo>()),
        )?;
        scope.route(
            RouteSpec::new(RoutePath::prefix("/probe/files/").unwrap(), Arc::new(echo))
                .method(RouteMethod::Get, RouteDoc::new("files").response::<Echo>()),
        )?;
        scope.route(
            RouteSpec::new(exact("/probe/events"), Arc::new(events)).method(
                RouteMethod::Get,
                RouteDoc::new("events").response_media("text/event-stream"),
            ),
        )?;
        scope.route(
            RouteSpec::new(exact("/probe/boom"), Arc::new(boom))
                .method(RouteMethod::Get, RouteDoc::new("fails")),
        )?;
        Ok(())
    }
}

fn mount_probe(rig: &Rig) {
    rig.context().booted.host.mount(&Probe, &json!({})).unwrap();
}

#[tokio::test(flavor = "multi_thread")]
async fn h_http_1_plugin_routes_answer_through_the_pipeline_and_go_with_unmount() {
    let rig = Rig::start().await;
    mount_probe(&rig);
    let seen: Echo = ok_json(
        rig.authed(Method::POST, "/probe/echo/a%20b?x=1&y=2")
            .header("content-type", "application/json; charset=utf-8")
            .body("{\"k\":1}")
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(
        seen,
        Echo {
            method: "POST".into(),
            path: "/probe/echo/a%20b".into(),
            params: vec![("name".into(), "a%20b".into())],
            rest: String::new(),
            query: "x=1&y=2".into(),
            body: "{\"k\":1}".into(),
        }
    );
    // An empty write needs no media type (e.g. a cancel).
    let empty = rig
        .authed(Method::POST, "/probe/echo/n")
        .send()
        .await
        .unwrap();
    assert_eq!(ok_json::<Echo>(empty).await.body, "");
    let file: Echo = rig.get_json("/probe/files/css/app.css").await;
    assert_eq!((file.rest.as_str(), file.params.len()), ("css/app.css", 0));
    let head = rig
        .authed(Method::HEAD, "/probe/files/x")
        .send()
        .await
        .unwrap();
    assert_eq!(head.status().as_u16(), 200);
    assert_eq!(
        refused(rig.get("/probe/boom").await, "boom").await,
        (500, "internal".into())
    );
    assert!(rig.context().booted.host.unmount("probe"));
    assert_eq!(
        refused(rig.get("/probe/echo/n").await, "unmounted").await,
        (404, "not-found".into())
    );
    assert!(rig.routes().iter().all(|entry| entry.owner != "probe"));
    // Mounting again registers the same paths again: no conflict with the removed ones.
    mount_probe(&rig);
    assert_eq!(rig.get("/probe/echo/n").await.status().as_u16(), 200);
}

#[tokio::test(flavor = "multi_thread")]
async fn h_http_2_a_login_cookie_authenticates_reads_and_writes_need_a_same_origin_proof() {
    let rig = Rig::start().await;
    mount_probe(&rig);
    let login = |token: &str| {
        rig.client
            .post(rig.url("/api/auth/session"))
            .json(&json!({ "token": token }))
            .send()
    };
    let wrong = login("nope").await.unwrap();
    assert!(wrong.headers().get("set-cookie").is_none());
    assert_eq!(
        refused(wrong, "bad login").await,
        (401, "unauthorized".into())
    );
    let unknown_field = rig
        .client
        .post(rig.url("/api/auth/session"))
        .json(&json!({ "token": rig.token, "extra": 1 }))
        .send()
        .await
        .unwrap();
    assert_eq!(
        refused(unknown_field, "extra").await,
        (400, "bad-request".into())
    );
    let response = login(&rig.token).await.unwrap();
    let cookie = response
        .headers()
        .get("set-cookie")
        .and_then(|value| value.to_str().ok())
        .unwrap()
        .to_owned();
    assert_eq!(
        ok_json::<Value>(response).await,
        json!({ "authenticated": true })
    );
    let (pair, attributes) = cookie.split_once("; ").unwrap();
    assert_eq!(attributes, "HttpOnly; SameSite=Strict; Path=/");
    let (name, secret) = pair.split_once('=').unwrap();
    assert_eq!(name, ccare_server::SESSION_COOKIE);
    assert_ne!(
        secret, rig.token,
        "the cookie carries a login secret, not the token"
    );
    let with_cookie = |method: Method, path: &str| {
        rig.client
            .request(method, rig.url(path))
            .header("cookie", pair)
    };
    let read = with_cookie(Method::GET, "/api/openapi.json")
        .send()
        .await
        .unwrap();
    assert_eq!(read.status().as_u16(), 200);
    let write = with_cookie(Method::POST, "/probe/echo/n")
        .send()
        .await
        .unwrap();
    assert_eq!(
        refused(write, "no proof").await,
        (403, "origin-rejected".into())
    );
    let same_site = with_cookie(Method::POST, "/probe/echo/n")
        .header("sec-fetch-site", "same-origin")
        .send()
        .await
        .unwrap();
    assert_eq!(same_site.status().as_u16(), 200);
    let origin = with_cookie(Method::POST, "/probe/echo/n")
        .header("origin", &rig.base)
        .send()
        .await
        .unwrap();
    assert_eq!(origin.status().as_u16(), 200);
    let logout = with_cookie(Method::DELETE, "/api/auth/session")
        .header("origin", &rig.base)
        .send()
        .await
        .unwrap();
    assert!(
        logout
            .headers()
            .get("set-cookie")
            .and_then(|value| value.to_str().ok())
            .is_some_and(|value| value.contains("Max-Age=0"))
    );
    assert_eq!(
        ok_json::<Value>(logout).await,
        json!({ "authenticated": false })
    );
    let after = with_cookie(Method::GET, "/api/openapi.json")
        .send()
        .await
        .unwrap();
    assert_eq!(
        refused(after, "logged out").await,
        (401, "unauthorized".into())
    );
}

/// Reads the body until `want` has been seen (or the body ends); returns the text.
async fn read_until(response: &mut reqwest::Response, want: &str) -> String {
    let mut text = String::new();
    while !text.contains(want) {
        match tokio::time::timeout(Duration::from_secs(10), response.chunk()).await {
            Ok(Ok(Some(chunk))) => text.push_str(&String::from_utf8_lossy(&chunk)),
            _ => break,
        }
    }
    text
}

#[tokio::test(flavor = "multi_thread")]
async fn api_3_an_idle_event_stream_gets_keep_alives_and_ends_at_shutdown() {
    let mut rig = Rig::start_with(RigOptions {
        keep_alive: Duration::from_millis(100),
        ..RigOptions::default()
    })
    .await;
    mount_probe(&rig);
    let mut response = rig.get("/probe/events").await;
    assert_eq!(response.status().as_u16(), 200);
    assert_eq!(
        response
            .headers()
            .get("content-type")
            .and_then(|value| value.to_str().ok()),
        Some("text/event-stream")
    );
    assert_eq!(
        response
            .headers()
            .get("cache-control")
            .and_then(|value| value.to_str().ok()),
        Some("no-store")
    );
    let text = read_until(&mut response, ": keep-alive\n\n: keep-alive\n\n").await;
    assert_eq!(
        text,
        "event: hello\nid: 1\ndata: {\"n\":1}\n\n: keep-alive\n\n: keep-alive\n\n"
    );
    let reading = tokio::spawn(async move {
        let mut rest = Vec::new();
        while let Ok(Some(chunk)) = response.chunk().await {
            rest.extend_from_slice(&chunk);
        }
        rest
    });
    let shutdown = tokio::time::timeout(Duration::from_secs(10), rig.shutdown())
        .await
        .unwrap();
    assert!(
        !shutdown.dropped_requests,
        "the open stream ended at shutdown"
    );
    let rest = tokio::time::timeout(Duration::from_secs(10), reading)
        .await
        .unwrap()
        .unwrap();
    assert!(
        String::from_utf8_lossy(&rest)
            .split_terminator("\n\n")
            .all(|comment| comment == ": keep-alive"),
        "{rest:?}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn h_http_1_a_body_streamed_past_the_limit_is_refused() {
    let rig = Rig::start().await;
    mount_probe(&rig);
    let chunks = (0..17).map(|_| Ok::<_, std::io::Error>(vec![b' '; 64 * 1024]));
    let response = rig
        .authed(Method::POST, "/probe/echo/n")
        .header("content-type", "application/json")
        .body(reqwest::Body::wrap_stream(futures_util::stream::iter(
            chunks,
        )))
        .send()
        .await
        .unwrap();
    assert_eq!(
        refused(response, "chunked").await,
        (413, "request-too-large".into())
    );
    let exactly = vec![b' '; ccare_server::BODY_LIMIT];
    let response = rig
        .authed(Method::POST, "/probe/echo/n")
        .header("content-type", "application/json")
        .body(exactly)
        .send()
        .await
        .unwrap();
    assert_eq!(
        ok_json::<Echo>(response).await.body.len(),
        ccare_server::BODY_LIMIT
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn h_http_2_the_generated_token_is_stored_owner_only_and_reused_after_a_restart() {
    let rig = Rig::start().await;
    let file = rig.dir.path().join("home").join(ccare_server::TOKEN_FILE);
    assert_eq!(
        std::fs::read_to_string(&file).unwrap(),
        format!("{}\n", rig.token)
    );
    assert_eq!(rig.token.len(), 64);
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt as _;
        assert_eq!(
            std::fs::metadata(&file).unwrap().permissions().mode() & 0o777,
            0o600
        );
    }
    let token = rig.token.clone();
    let rig = rig.restart().await;
    assert_eq!(rig.token, token);
    assert_eq!(rig.get("/api/openapi.json").await.status().as_u16(), 200);
    // A non-loopback address needs a configured token: checked before any file is written.
    let settings = ccare_app::config::HttpSettings {
        addr: "0.0.0.0:7878".parse().unwrap(),
        token_env: None,
        trusted_hosts: Vec::new(),
    };
    let home = rig.dir.path().join("other-home");
    let error =
        ccare_server::resolve_token(&settings, settings.addr, &home, &|_| None).unwrap_err();
    assert_eq!(error.code(), "NON_LOOPBACK_WITHOUT_TOKEN");
    assert!(!home.exists());
    let configured = ccare_app::config::HttpSettings {
        token_env: Some("CCARE_HTTP_TOKEN".into()),
        ..settings.clone()
    };
    let env = |name: &str| (name == "CCARE_HTTP_TOKEN").then(|| "s3cret".to_owned());
    let (token, source) =
        ccare_server::resolve_token(&configured, configured.addr, &home, &env).unwrap();
    assert_eq!((token.secret(), source.is_configured()), ("s3cret", true));
    let unset = ccare_server::resolve_token(&configured, configured.addr, &home, &|_| None);
    assert_eq!(unset.unwrap_err().code(), "TOKEN_ENV_UNSET");
}

/// Every `$ref` in `value` that points into the document.
fn refs(value: &Value, out: &mut Vec<String>) {
    match value {
        Value::Object(map) => {
            for (key, inner) in map {
                match inner {
                    Value::String(text) if key == "$ref" => out.push(text.clone()),
                    _ => refs(inner, out),
                }
            }
        }
        Value::Array(items) => items.iter().for_each(|item| refs(item, out)),
        _ => {}
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn api_5_the_openapi_document_has_every_route_and_method_and_its_refs_resolve() {
    let rig = Rig::start().await;
    mount_probe(&rig);
    let doc: Value = rig.get_json("/api/openapi.json").await;
    assert_eq!(doc["openapi"], "3.1.0");
    let routes = rig.routes();
    assert!(routes.iter().any(|entry| entry.owner == "probe"));
    let mut listed = 0;
    for entry in &routes {
        let path = ccare_server::openapi_path(&entry.spec.path);
        for (method, route_doc) in &entry.spec.methods {
            let operation = &doc["paths"][&path][method.as_str().to_ascii_lowercase()];
            assert_eq!(
                operation["summary"],
                route_doc.summary.as_str(),
                "{method} {path}"
            );
            assert_eq!(operation["tags"], json!([entry.owner]), "{method} {path}");
            let public = entry.spec.auth == RouteAuth::Public;
            assert_eq!(
                operation.get("security") == Some(&json!([])),
                public,
                "{method} {path}"
            );
            for param in entry.spec.path.params() {
                assert!(
                    operation["parameters"]
                        .as_array()
                        .unwrap()
                        .iter()
                        .any(|p| p["name"] == param && p["in"] == "path"),
                    "{method} {path} {param}"
                );
            }
            listed += 1;
        }
    }
    let operations: usize = doc["paths"]
        .as_object()
        .unwrap()
        .values()
        .map(|item| item.as_object().unwrap().len())
        .sum();
    assert_eq!(
        operations, listed,
        "nothing in the document that is not a route"
    );
    let login = &doc["paths"]["/api/auth/session"]["post"]["requestBody"]["content"]["application/json"]
        ["schema"];
    assert_eq!(login["required"], json!(["token"]));
    assert_eq!(login["additionalProperties"], json!(false));
    assert_eq!(
        doc["paths"]["/probe/files/{rest}"]["get"]["parameters"][0]["name"],
        "rest"
    );
    assert_eq!(
        doc["components"]["securitySchemes"]["bearer"]["scheme"],
        "bearer"
    );
    assert_eq!(
        doc["components"]["schemas"]["ErrorBody"]["required"],
        json!(["error"])
    );
    let mut found = Vec::new();
    refs(&doc, &mut found);
    assert!(found.iter().any(|r| r == "#/components/schemas/ErrorBody"));
    for reference in found {
        let name = reference
            .strip_prefix("#/components/schemas/")
            .unwrap_or_else(|| panic!("{reference} points outside components"));
        assert!(
            doc["components"]["schemas"].get(name).is_some(),
            "{reference} does not resolve"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_dropped_without_shutdown_releases_its_host_and_store() {
    // The API's routes live in the host's route table and hold the server's context,
    // which holds the host: dropping the server must take them out of the table, or
    // the host, its actors and the store (writer thread, open files) outlive it.
    let mut rig = Rig::start().await;
    rig.fake.push(ccare_fake_openai::Reply::text("hello"));
    let id = crate::events::create_session(&rig).await;
    let mut sse = crate::events::Sse::open(&rig, &format!("/api/sessions/{id}/events"), None).await;
    crate::events::prompt(&rig, &id, "hi").await;
    sse.until_idle().await;
    drop(sse);
    let store = Arc::downgrade(&rig.store());
    let routes = rig.routes().len();
    rig.drop_server();
    // The serving task ends on its own once its stop signal is gone.
    for _ in 0..500 {
        if store.strong_count() == 0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert!(routes > 0);
    assert_eq!(
        store.strong_count(),
        0,
        "the store outlived the dropped server"
    );
}
