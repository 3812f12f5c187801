//! What the server's benches share: a gateway booted as `ccare serve` boots (the
//! default profile over a fresh temp home and SQLite store, the server on
//! `127.0.0.1:0`), forwarding to a fake OpenAI upstream. Each bench binary compiles
//! this module on its own and uses part of it.
#![allow(dead_code)]

use std::net::SocketAddr;
use std::sync::Arc;

use ccare_app::config::load_text;
use ccare_app::{Agents, Home, Overrides, boot};
use ccare_server::{ServeOptions, Server, ServerContext, resolve_token};

/// One running gateway: its URL, bearer token, agents and temp home.
pub(crate) struct Gateway {
    /// `http://<addr>/v1/chat/completions`.
    pub(crate) url: String,
    /// The bearer token its clients send.
    pub(crate) token: String,
    /// Its session actors.
    pub(crate) agents: Agents,
    /// Its temp home (removed by the bench when done).
    pub(crate) dir: std::path::PathBuf,
    _server: Server,
}

/// The environment the gateway's config reads: the fake upstream's key only.
pub(crate) fn env(name: &str) -> Option<String> {
    (name == "FAKE_KEY").then(|| "sk-fake".to_owned())
}

/// The config of a gateway in front of the fake upstream at `base_url`, then `extra`
/// (more tables: `[host]`, `[plugins.*]`).
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

/// Boots the default profile with `extra` config over a fresh temp home and starts
/// `ccare serve`'s server on `127.0.0.1:0`, as the server's test rig does.
pub(crate) async fn gateway(base_url: &str, extra: &str) -> Gateway {
    let dir = tempfile::tempdir().unwrap().keep();
    let config_path = dir.join("ccare.toml");
    let text = config(base_url, extra);
    std::fs::write(&config_path, &text).unwrap();
    let home = Home {
        dir: dir.join("home"),
    };
    let settings = load_text(&text, &config_path, &home, &Overrides::default(), &env).unwrap();
    let booted = Arc::new(boot(&settings, None, &env).unwrap());
    let agents = Agents::of(&booted);
    let addr: SocketAddr = "127.0.0.1:0".parse().unwrap();
    let (token, source) = resolve_token(&settings.http, addr, &home.dir, &env).unwrap();
    let mut options = ServeOptions::from_settings(&settings.http, token.clone(), &source);
    options.addr = addr;
    let server = Server::start(
        ServerContext {
            booted,
            agents: agents.clone(),
        },
        options,
    )
    .await
    .unwrap();
    Gateway {
        url: format!("http://{}/v1/chat/completions", server.local_addr()),
        token: token.secret().to_owned(),
        agents,
        dir,
        _server: server,
    }
}
