//! The server's lifecycle: [`Server::start`] registers the host's own routes and the
//! sessions API into the booted host's route table, binds and serves it;
//! [`Server::shutdown`] stops accepting, ends open streams, waits (bounded) for
//! requests in flight, cancels the running turns (logged as cancelled), stops every
//! session actor (flush, close, lease released) and removes the server's routes;
//! dropping a [`Server`] removes them too.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::serve::ListenerExt;
use ccare_app::config::HttpSettings;
use ccare_core::kinds::CancelCause;
use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio::task::JoinHandle;

use super::auth::{Auth, Token};
use super::dispatch::{Pipeline, serve};
use super::error::ServerError;
use super::fence::Fence;
use super::reply::Streaming;
use super::table::Table;
use super::token::TokenSource;
use crate::ServerContext;

/// The default idle time after which an event stream gets a keep-alive comment
/// (API-3).
pub const KEEP_ALIVE: Duration = Duration::from_secs(15);

/// How long a shutdown waits for requests in flight before dropping them.
pub const DRAIN: Duration = Duration::from_secs(5);

/// How to serve.
#[derive(Debug, Clone)]
pub struct ServeOptions {
    /// Where to listen (port 0: any free port; see [`Server::local_addr`]).
    pub addr: SocketAddr,
    /// The bearer token.
    pub token: Token,
    /// Whether someone configured the token (`[http] token_env`); a non-loopback
    /// `addr` needs one (H-HTTP-3).
    pub token_configured: bool,
    /// Hosts the fence trusts besides loopback (`[http] trusted_hosts`).
    pub trusted_hosts: Vec<String>,
    /// The idle time before an event stream's keep-alive comment ([`KEEP_ALIVE`]).
    pub keep_alive: Duration,
    /// How long a shutdown waits for requests in flight ([`DRAIN`]).
    pub drain: Duration,
}

impl ServeOptions {
    /// Serving on `addr` with `token` (not configured), no trusted hosts, the default
    /// keep-alive and drain.
    pub fn new(addr: SocketAddr, token: Token) -> Self {
        Self {
            addr,
            token,
            token_configured: false,
            trusted_hosts: Vec::new(),
            keep_alive: KEEP_ALIVE,
            drain: DRAIN,
        }
    }

    /// What `[http]` says, with the token [`super::token::resolve_token`] found.
    pub fn from_settings(http: &HttpSettings, token: Token, source: &TokenSource) -> Self {
        Self {
            token_configured: source.is_configured(),
            trusted_hosts: http.trusted_hosts.clone(),
            ..Self::new(http.addr, token)
        }
    }
}

/// A running server. Dropping it without [`Server::shutdown`] stops accepting and
/// takes its routes out of the host's table (they hold the context, which holds the
/// host: left there, they would keep the host and its store alive), but does not wait
/// for requests in flight nor stop the session actors.
#[derive(Debug)]
pub struct Server {
    addr: SocketAddr,
    context: ServerContext,
    stop: watch::Sender<bool>,
    task: JoinHandle<std::io::Result<()>>,
    drain: Duration,
    registered: Registered,
}

/// The server's routes in the host's table, taken out when this is dropped.
#[derive(Debug)]
struct Registered(ccare_agent::routes::Routes);

impl Drop for Registered {
    fn drop(&mut self) {
        self.0.remove_owner(crate::api::OWNER);
    }
}

/// What a shutdown did.
#[derive(Debug)]
pub struct Shutdown {
    /// The sessions whose actors were stopped (running turns cancelled first).
    pub stopped: Vec<ccare_core::SessionId>,
    /// Whether requests were still in flight when the drain time ran out.
    pub dropped_requests: bool,
}

impl Server {
    /// Registers the server's routes (login, OpenAPI, the sessions API) into the
    /// context's route table, binds `options.addr` and serves the whole table.
    pub async fn start(context: ServerContext, options: ServeOptions) -> Result<Self, ServerError> {
        if !options.addr.ip().is_loopback() && !options.token_configured {
            return Err(ServerError::NonLoopbackWithoutToken { addr: options.addr });
        }
        let routes = context.booted.host.routes().clone();
        let auth = Arc::new(Auth::new(options.token.clone()));
        // From here on, any early return takes the routes registered so far out.
        let registered = Registered(routes.clone());
        super::own::register(&routes, &auth)
            .and_then(|()| crate::api::register(&routes, &context))
            .and_then(|()| crate::gateway::register(&routes, &context))
            .and_then(|()| crate::ui::register(&routes, &auth))?;
        let listener =
            TcpListener::bind(options.addr)
                .await
                .map_err(|error| ServerError::Bind {
                    addr: options.addr,
                    error,
                })?;
        let addr = listener.local_addr().map_err(|error| ServerError::Bind {
            addr: options.addr,
            error,
        })?;
        let (stop, stopping) = watch::channel(false);
        let pipeline = Arc::new(Pipeline {
            table: Table::new(routes),
            fence: Fence::new(&options.trusted_hosts),
            auth,
            streaming: Streaming {
                keep_alive: options.keep_alive,
                stopping: stopping.clone(),
            },
        });
        let router = Router::new().fallback(serve).with_state(pipeline);
        let mut stopping_accept = stopping;
        // Streamed answers are many small writes: without TCP_NODELAY, Nagle holds each
        // one until the client's delayed ACK (about 40 ms on Linux) of the last.
        let listener = listener.tap_io(|stream| {
            if let Err(error) = stream.set_nodelay(true) {
                tracing::debug!(%error, "TCP_NODELAY not set on a connection");
            }
        });
        let serving = axum::serve(listener, router).with_graceful_shutdown(async move {
            // An error means the sender is gone: stop as well.
            let _ = stopping_accept.wait_for(|stop| *stop).await;
        });
        let task = tokio::spawn(async move { serving.await });
        tracing::info!(%addr, "serving");
        Ok(Self {
            addr,
            context,
            stop,
            task,
            drain: options.drain,
            registered,
        })
    }

    /// The bound address (the real port when `addr` said 0).
    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }

    /// `http://ADDR/`.
    pub fn url(&self) -> String {
        format!("http://{}/", self.addr)
    }

    /// The context the server's routes use.
    pub fn context(&self) -> &ServerContext {
        &self.context
    }

    /// Stops the server: no new connections, open streams end, requests in flight get
    /// the drain time, then every running turn is cancelled (`CancelCause::Shutdown`)
    /// and every session actor stopped (its session flushed and closed, its lease
    /// released), and the server's routes leave the table. A session that failed to
    /// stop cleanly is the error (the others are stopped anyway).
    pub async fn shutdown(self) -> Result<Shutdown, ServerError> {
        // Ignored: the receivers live as long as the serving task.
        let _ = self.stop.send(true);
        let mut task = self.task;
        let dropped_requests = match tokio::time::timeout(self.drain, &mut task).await {
            Ok(_) => false,
            Err(_) => {
                task.abort();
                true
            }
        };
        let (stopped, failed) = self.context.agents.stop_all(CancelCause::Shutdown).await;
        drop(self.registered);
        if let Some((session, error)) = failed.into_iter().next() {
            return Err(ServerError::Stop {
                session: session.to_string(),
                message: error.to_string(),
            });
        }
        Ok(Shutdown {
            stopped,
            dropped_requests,
        })
    }
}
