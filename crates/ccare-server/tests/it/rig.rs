//! The shared test rig: a real `ccare serve` server, in process, on `127.0.0.1:0`.
//!
//! [`Rig::start`] writes a `ccare.toml` into a temp directory (home `DIR/home`,
//! SQLite store `DIR/home/ccare.db`), boots the default profile through `ccare_app`
//! exactly as `ccare serve` does (context care and stream watch mounted, the model
//! `fake/model` on the in-process fake OpenAI server [`Rig::fake`], key `FAKE_KEY`),
//! resolves the token as `serve` does (generated into `$CCARE_HOME/http-token`), and
//! starts [`Server`] with the sessions API and every plugin route. Talk to it over real
//! HTTP with [`Rig::client`] (a plain `reqwest::Client`, no default headers) or the
//! authed helpers below.
//!
//! The fake provider answers only what a test scripts: `rig.fake.push(Reply::text("hi"))`
//! per request, or `rig.fake.respond_with(...)`; an unscripted request gets a 500.
//!
//! API (stable; ask engineer A before changing it):
//! - `Rig::start().await`, `Rig::start_with(RigOptions { toml, keep_alive, failing }).await`
//!   (`toml` is appended to the config: extra `[plugins.*]`, `[http]`, `[host]` keys;
//!   `keep_alive` is the SSE keep-alive interval, 15 s by default; `failing` serves
//!   over the same SQLite store wrapped in a `FailingStore`, in `rig.failing`);
//! - fields `dir` (temp dir), `fake` ([`FakeServer`]), `base` (`http://127.0.0.1:PORT`,
//!   no trailing `/`), `token`, `client`, `failing`;
//! - `rig.url("/api/sessions")`, `rig.authed(Method::POST, path)` (a builder with the
//!   bearer token), `rig.get(path)`, `rig.post_json(path, &body)`,
//!   `rig.patch_json(path, &body)`, `rig.delete(path)` → `reqwest::Response`;
//!   `rig.get_json::<T>(path)` / `rig.post_json_ok::<T>(path, &body)` → `T`, asserting 200;
//! - free helpers `ok_json::<T>(response)` (asserts 200, decodes) and `error_of(response)`
//!   → `(status, error code, message)`;
//! - `rig.context()` (the server's `ServerContext`: `booted`, `agents`), `rig.routes()`
//!   (the router's own table, `host.routes().list()`), `rig.store()`;
//! - `rig.restart().await`: a graceful shutdown, then a fresh boot over the same home
//!   and store (the token file is reused, the port changes: `base` is updated);
//! - `rig.shutdown().await`: the graceful shutdown of `ccare serve` (turns cancelled,
//!   actors stopped, store flushed), returning what it did.

#![allow(clippy::unwrap_used, clippy::expect_used, dead_code, unreachable_pub)]

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use ccare_agent::routes::RouteEntry;
use ccare_app::config::load_text;
use ccare_app::{Agents, Home, Overrides, boot, boot_over};
use ccare_fake_openai::FakeServer;
use ccare_server::{ServeOptions, Server, ServerContext, Shutdown, resolve_token};
use ccare_store::testing::FailingStore;
use ccare_store::{SqliteConfig, SqliteStore, Store};
use reqwest::Method;
use serde::Serialize;
use serde::de::DeserializeOwned;

/// What to change from the default rig.
#[derive(Debug, Clone)]
pub struct RigOptions {
    /// TOML appended to the rig's config.
    pub toml: String,
    /// The SSE keep-alive interval.
    pub keep_alive: Duration,
    /// Serve over a store whose writes fail on demand ([`Rig::failing`]).
    pub failing: bool,
}

impl Default for RigOptions {
    fn default() -> Self {
        Self {
            toml: String::new(),
            keep_alive: ccare_server::KEEP_ALIVE,
            failing: false,
        }
    }
}

/// The rig's SQLite store, wrapped so its writes fail on demand.
pub type FailingSqlite = FailingStore<SqliteStore>;

/// A running server over a temp home, and a client for it.
pub struct Rig {
    /// The temp directory: `ccare.toml`, `home/` (store, token file), `workspace/`.
    pub dir: tempfile::TempDir,
    /// The fake OpenAI-compatible provider the model `fake/model` talks to.
    pub fake: FakeServer,
    /// `http://127.0.0.1:PORT`, no trailing slash.
    pub base: String,
    /// The bearer token.
    pub token: String,
    /// A plain client (no default headers, no cookie store).
    pub client: reqwest::Client,
    /// With [`RigOptions::failing`], the store the server runs over.
    pub failing: Option<Arc<FailingSqlite>>,
    options: RigOptions,
    server: Option<Server>,
}

/// The env the rig boots with: only the fake's key.
fn env(name: &str) -> Option<String> {
    (name == "FAKE_KEY").then(|| "sk-fake".to_owned())
}

fn config(base_url: &str, extra: &str) -> String {
    format!(
        r#"
[agent]
model = "fake/model"
workspace = "workspace"

[providers.fake]
kind = "openai"
base_url = "{base_url}"
api_key_env = "FAKE_KEY"
idle_timeout_ms = 5000
max_attempts = 1

[models."fake/model"]
context_window = 16000
max_output_tokens = 1000

{extra}
"#
    )
}

/// reqwest's TLS needs a crypto provider installed once, even for plain HTTP.
fn install_crypto() {
    let _ = rustls::crypto::ring::default_provider().install_default();
}

async fn serve(
    dir: &std::path::Path,
    options: &RigOptions,
) -> (Server, String, Option<Arc<FailingSqlite>>) {
    let home = Home {
        dir: dir.join("home"),
    };
    let text = std::fs::read_to_string(dir.join("ccare.toml")).unwrap();
    let settings = load_text(
        &text,
        &dir.join("ccare.toml"),
        &home,
        &Overrides::default(),
        &env,
    )
    .unwrap();
    let failing = options.failing.then(|| {
        if let Some(parent) = settings.store.path.parent() {
            std::fs::create_dir_all(parent).unwrap();
        }
        Arc::new(FailingStore::new(
            SqliteStore::open(SqliteConfig::new(&settings.store.path)).unwrap(),
        ))
    });
    let booted = Arc::new(match &failing {
        Some(store) => {
            boot_over(&settings, None, &env, Arc::clone(store) as Arc<dyn Store>).unwrap()
        }
        None => boot(&settings, None, &env).unwrap(),
    });
    let agents = Agents::of(&booted);
    let addr: SocketAddr = "127.0.0.1:0".parse().unwrap();
    let (token, source) = resolve_token(&settings.http, addr, &home.dir, &env).unwrap();
    let mut serve_options = ServeOptions::from_settings(&settings.http, token.clone(), &source);
    serve_options.addr = addr;
    serve_options.keep_alive = options.keep_alive;
    serve_options.drain = Duration::from_secs(2);
    let server = Server::start(ServerContext { booted, agents }, serve_options)
        .await
        .unwrap();
    (server, token.secret().to_owned(), failing)
}

impl Rig {
    /// The default rig.
    pub async fn start() -> Rig {
        Self::start_with(RigOptions::default()).await
    }

    /// A rig with `options`.
    pub async fn start_with(options: RigOptions) -> Rig {
        install_crypto();
        let fake = FakeServer::start().await.unwrap();
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(
            dir.path().join("ccare.toml"),
            config(&fake.base_url(), &options.toml),
        )
        .unwrap();
        let (server, token, failing) = serve(dir.path(), &options).await;
        Rig {
            failing,
            base: format!("http://{}", server.local_addr()),
            dir,
            fake,
            token,
            client: reqwest::Client::new(),
            options,
            server: Some(server),
        }
    }

    fn server(&self) -> &Server {
        self.server.as_ref().expect("the rig's server is shut down")
    }

    /// The server's context: the booted default profile and its actors.
    pub fn context(&self) -> &ServerContext {
        self.server().context()
    }

    /// The route table the server serves (plugin and API routes included).
    pub fn routes(&self) -> Vec<RouteEntry> {
        self.context().booted.host.routes().list()
    }

    /// The store, to read back what the server wrote.
    pub fn store(&self) -> Arc<dyn Store> {
        Arc::clone(self.context().booted.host.sessions().store())
    }

    /// `base` + `path`.
    pub fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base)
    }

    /// A request with the bearer token.
    pub fn authed(&self, method: Method, path: &str) -> reqwest::RequestBuilder {
        self.client
            .request(method, self.url(path))
            .bearer_auth(&self.token)
    }

    /// An authed `GET`.
    pub async fn get(&self, path: &str) -> reqwest::Response {
        self.authed(Method::GET, path).send().await.unwrap()
    }

    /// An authed `DELETE`.
    pub async fn delete(&self, path: &str) -> reqwest::Response {
        self.authed(Method::DELETE, path).send().await.unwrap()
    }

    /// An authed `POST` of `body` as JSON.
    pub async fn post_json<B: Serialize + ?Sized>(
        &self,
        path: &str,
        body: &B,
    ) -> reqwest::Response {
        self.authed(Method::POST, path)
            .json(body)
            .send()
            .await
            .unwrap()
    }

    /// An authed `PATCH` of `body` as JSON.
    pub async fn patch_json<B: Serialize + ?Sized>(
        &self,
        path: &str,
        body: &B,
    ) -> reqwest::Response {
        self.authed(Method::PATCH, path)
            .json(body)
            .send()
            .await
            .unwrap()
    }

    /// An authed `GET` answered 200 with JSON, decoded.
    pub async fn get_json<T: DeserializeOwned>(&self, path: &str) -> T {
        ok_json(self.get(path).await).await
    }

    /// An authed `POST` of `body` answered 200 with JSON, decoded.
    pub async fn post_json_ok<T: DeserializeOwned, B: Serialize + ?Sized>(
        &self,
        path: &str,
        body: &B,
    ) -> T {
        ok_json(self.post_json(path, body).await).await
    }

    /// Shuts the server down as `ccare serve` does on SIGTERM.
    pub async fn shutdown(&mut self) -> Shutdown {
        let server = self.server.take().expect("the rig's server is shut down");
        server.shutdown().await.unwrap()
    }

    /// Drops the server without shutting it down, as an embedder that forgets to (or
    /// panics before it does) would.
    pub fn drop_server(&mut self) {
        drop(self.server.take().expect("the rig's server is shut down"));
    }

    /// A graceful shutdown, then a fresh boot over the same home and store.
    pub async fn restart(mut self) -> Rig {
        if self.server.is_some() {
            self.shutdown().await;
        }
        let (server, token, failing) = serve(self.dir.path(), &self.options).await;
        assert_eq!(token, self.token, "the token file is reused");
        self.failing = failing;
        self.base = format!("http://{}", server.local_addr());
        self.server = Some(server);
        self
    }
}

/// The JSON of a response that must be 200 (the body is shown otherwise).
pub async fn ok_json<T: DeserializeOwned>(response: reqwest::Response) -> T {
    let status = response.status();
    let url = response.url().clone();
    let text = response.text().await.unwrap();
    assert_eq!(status.as_u16(), 200, "{url}: {text}");
    serde_json::from_str(&text).unwrap_or_else(|error| panic!("{url}: {error}: {text}"))
}

/// The `{error, message}` of a response, with its status.
pub async fn error_of(response: reqwest::Response) -> (u16, String, String) {
    let status = response.status().as_u16();
    let body: serde_json::Value = response.json().await.unwrap();
    // The gateway's routes answer in OpenAI's shape, `{error: {message, type, code}}`.
    if let Some(error) = body["error"].as_object() {
        let field = |key: &str| error[key].as_str().unwrap_or_default().to_owned();
        return (status, field("code"), field("message"));
    }
    let body: ccare_agent::routes::ErrorBody = serde_json::from_value(body).unwrap();
    (status, body.error, body.message.unwrap_or_default())
}
