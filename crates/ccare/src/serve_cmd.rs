//! `ccare serve [--addr ADDR]` (server.md §2): boots the default profile, serves the
//! route table (the sessions API, the plugins' routes) until Ctrl-C or SIGTERM, then
//! shuts down gracefully: no new connections, running turns cancelled (logged as
//! cancelled), every session flushed and its lease released; exit 0.
//!
//! Prints on stdout `ccare serve: listening on http://ADDR/` and, only at the start
//! that generated the token, `ccare serve: token TOKEN (stored in PATH)`.

use std::io::Write as _;
use std::net::SocketAddr;
use std::sync::Arc;

use ccare_app::{Agents, Home, Settings};
use ccare_server::{ServeOptions, Server, ServerContext, ServerError, TokenSource};

use crate::Failure;

impl From<ServerError> for Failure {
    fn from(error: ServerError) -> Self {
        if error.is_bad_input() {
            Failure::bad_input(error)
        } else {
            Failure::failed(error)
        }
    }
}

/// Serves until a stop signal.
pub(crate) async fn run(
    settings: &Settings,
    home: &Home,
    addr: Option<SocketAddr>,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<(), Failure> {
    let mut http = settings.http.clone();
    if let Some(addr) = addr {
        http.addr = addr;
    }
    let booted = Arc::new(ccare_app::boot(settings, None, env)?);
    let agents = Agents::of(&booted);
    let (token, source) = ccare_server::resolve_token(&http, http.addr, &home.dir, env)?;
    let options = ServeOptions::from_settings(&http, token.clone(), &source);
    let server = match Server::start(ServerContext { booted, agents }, options).await {
        Ok(server) => server,
        Err(error) => {
            // A token nobody saw must not be kept: the next start generates and
            // prints a new one.
            if let TokenSource::Generated(path) = &source {
                let _ = std::fs::remove_file(path);
            }
            return Err(error.into());
        }
    };
    let mut stdout = std::io::stdout().lock();
    let printed = writeln!(stdout, "ccare serve: listening on {}", server.url())
        .and_then(|()| match &source {
            TokenSource::Generated(path) => writeln!(
                stdout,
                "ccare serve: token {} (stored in {})",
                token.secret(),
                path.display()
            ),
            _ => Ok(()),
        })
        .and_then(|()| stdout.flush());
    drop(stdout);
    // A closed stdout does not stop a server: it keeps serving.
    if let Err(error) = printed {
        tracing::warn!(%error, "could not print the address");
    }
    let signal = stop_signal().await.map_err(Failure::failed)?;
    tracing::info!(signal, "stopping");
    let shutdown = server.shutdown().await?;
    tracing::info!(
        sessions = shutdown.stopped.len(),
        dropped_requests = shutdown.dropped_requests,
        "stopped"
    );
    Ok(())
}

/// Waits for Ctrl-C (SIGINT) or SIGTERM; returns which.
async fn stop_signal() -> std::io::Result<&'static str> {
    #[cfg(unix)]
    {
        let mut terminate =
            tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
        tokio::select! {
            interrupted = tokio::signal::ctrl_c() => interrupted.map(|()| "SIGINT"),
            _ = terminate.recv() => Ok("SIGTERM"),
        }
    }
    #[cfg(not(unix))]
    {
        tokio::signal::ctrl_c().await.map(|()| "Ctrl-C")
    }
}
