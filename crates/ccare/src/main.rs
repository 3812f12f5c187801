//! `ccare`: the context-care command line.
//!
//! Glue only: it parses arguments, asks `ccare-app` for the settings and the booted
//! host (config, profiles, store, plugins), drives the session engine and prints.
//! Exit codes: 0 ok, 1 failed, 2 bad usage or bad input (unknown session or profile,
//! malformed file, invalid config: `AppError::is_bad_input`), with the error on
//! stderr. A closed stdout (`ccare … | head -1`) is not a failure: every write is
//! fallible (no `println!`, which panics), and a broken pipe ends the command quietly
//! with 0, as ripgrep does.

mod chat_cmd;
mod cli;
mod context_cmd;
mod demo;
mod drive;
mod llm_cmd;
mod output;
mod prompt_input;
mod run_cmd;
mod serve_cmd;
mod sessions_cmd;
mod terminal;
mod watch_cmd;

use std::io::Write as _;
use std::process::ExitCode;

use clap::Parser;

/// mimalloc instead of the system allocator: opening a long session allocates and
/// frees hundreds of thousands of small objects across the reader and main threads,
/// where glibc malloc's arena locks and consolidation cost ~2× (see the open_100k bench).
/// Built with `no_thp`: mimalloc does not ask for transparent huge pages, whose 2 MiB
/// zeroing on every fresh page took a third of the server's CPU under load (see the
/// gateway bench).
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

use ccare_app::{Home, Overrides, Settings};

use crate::cli::{Cli, Command};

/// An error with the exit code it deserves.
#[derive(Debug)]
pub(crate) struct Failure {
    pub(crate) code: u8,
    pub(crate) error: anyhow::Error,
}

impl Failure {
    /// Bad usage or bad input: exit 2.
    pub(crate) fn bad_input(error: impl Into<anyhow::Error>) -> Self {
        Self {
            code: 2,
            error: error.into(),
        }
    }

    /// Anything else: exit 1.
    pub(crate) fn failed(error: impl Into<anyhow::Error>) -> Self {
        Self {
            code: 1,
            error: error.into(),
        }
    }
}

impl From<ccare_app::AppError> for Failure {
    fn from(error: ccare_app::AppError) -> Self {
        let code = if error.is_bad_input() { 2 } else { 1 };
        Self {
            code,
            error: anyhow::Error::new(error),
        }
    }
}

impl From<ccare_session::SessionError> for Failure {
    fn from(error: ccare_session::SessionError) -> Self {
        let code = if error.is_bad_input() { 2 } else { 1 };
        Self {
            code,
            error: anyhow::Error::new(error),
        }
    }
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("CCARE_LOG")
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn")),
        )
        .with_writer(std::io::stderr)
        .with_ansi(terminal::stderr_colour())
        .init();
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(error) => {
            eprintln!("error: cannot start the async runtime: {error}");
            return ExitCode::from(1);
        }
    };
    let outcome = runtime.block_on(async move {
        let home = Home::resolve(cli.home.as_deref());
        let config = cli.config.as_deref();
        match cli.command {
            Command::Sessions(command) => {
                let settings = quiet_settings(config, &home)?;
                let booted = boot(&settings, None)?;
                sessions_cmd::run(&booted, &settings, command).await
            }
            Command::Demo => {
                let settings = quiet_settings(config, &home)?;
                demo::run(&settings, &home).await
            }
            Command::Run(args) => {
                let input = match &args.tool_results {
                    Some(file) => run_cmd::Input::tool_results(file)?,
                    None => run_cmd::Input::prompt(
                        prompt_input::resolve(args.prompt, args.prompt_file.as_deref())?,
                        args.external_tools.as_deref(),
                    )?,
                };
                let overrides = Overrides {
                    model: args.model,
                    provider: args.provider,
                };
                let settings = load_settings(config, &home, &overrides)?;
                let booted = boot(&settings, args.profile.as_deref())?;
                let agents = ccare_app::Agents::of(&booted);
                run_cmd::run(&agents, input, args.session.as_deref(), args.json, args.wait).await
            }
            Command::Chat(args) => {
                let overrides = Overrides {
                    model: args.model,
                    provider: args.provider,
                };
                let settings = load_settings(config, &home, &overrides)?;
                let booted = boot(&settings, args.profile.as_deref())?;
                let agents = ccare_app::Agents::of(&booted);
                chat_cmd::run(&booted, &agents, args.session.as_deref(), args.wait).await
            }
            Command::TimeContext(cli::TimeContextCommand::Preview(args)) => {
                let zone = ccare_time_context::Zone::named(&args.zone).map_err(|_| {
                    Failure::bad_input(anyhow::anyhow!(
                        "--zone: {:?} is not a valid IANA time zone identifier (e.g. Asia/Shanghai, UTC)",
                        args.zone
                    ))
                })?;
                let reading = ccare_time_context::render_reading(
                    &zone,
                    args.now_ms,
                    args.turn,
                    args.step,
                    args.baseline_ms,
                )
                .map_err(|error| Failure::bad_input(anyhow::anyhow!(error)))?;
                let mut stdout = std::io::stdout().lock();
                writeln!(stdout, "{reading}")
                    .and_then(|()| stdout.flush())
                    .map_err(Failure::failed)
            }
            Command::Context(cli::ContextCommand::Status(args)) => {
                let overrides = Overrides {
                    model: args.model,
                    provider: None,
                };
                let settings = load_settings(config, &home, &overrides)?;
                let booted = boot(&settings, args.profile.as_deref())?;
                context_cmd::status(&booted, &args.session, args.json).await
            }
            Command::Context(cli::ContextCommand::Actions(args)) => {
                let settings = quiet_settings(config, &home)?;
                let booted = boot(&settings, None)?;
                context_cmd::actions(&booted, &args.session, args.json).await
            }
            Command::Context(cli::ContextCommand::Diff(args)) => {
                let settings = quiet_settings(config, &home)?;
                let booted = boot(&settings, None)?;
                context_cmd::diff(&booted, &args.session, &args.op).await
            }
            Command::Context(cli::ContextCommand::Undo(args)) => {
                let settings = load_settings(config, &home, &Overrides::default())?;
                let booted = boot(&settings, None)?;
                context_cmd::undo(&booted, &args.session, &args.op, args.wait).await
            }
            Command::Watch(cli::WatchCommand::Replay(args)) => {
                let settings = quiet_settings(config, &home)?;
                watch_cmd::replay(&settings, &args.file, args.json)
            }
            Command::Serve(args) => {
                let settings = load_settings(config, &home, &Overrides::default())?;
                serve_cmd::run(&settings, &home, args.addr, &env).await
            }
            Command::Models(args) => {
                let settings = load_settings(config, &home, &Overrides::default())?;
                llm_cmd::models(&settings, args.json)
            }
        }
    });
    match outcome {
        Ok(()) => ExitCode::SUCCESS,
        Err(failure) => {
            if is_broken_pipe(&failure.error) {
                return ExitCode::SUCCESS;
            }
            eprintln!("error: {:#}", failure.error);
            ExitCode::from(failure.code)
        }
    }
}

fn load_settings(
    flag: Option<&std::path::Path>,
    home: &Home,
    overrides: &Overrides,
) -> Result<Settings, Failure> {
    let settings = ccare_app::load(flag, home, overrides, &env)?;
    if let Some(notice) = &settings.notice {
        eprintln!("note: {notice}");
    }
    Ok(settings)
}

/// The settings for a command that calls no model (`sessions`, `watch replay`,
/// `context actions`, `context diff`, `demo`): the provider notice (no API key, the
/// scripted demo) would be noise there, so it is not printed.
fn quiet_settings(flag: Option<&std::path::Path>, home: &Home) -> Result<Settings, Failure> {
    Ok(ccare_app::load(flag, home, &Overrides::default(), &env)?)
}

/// The host of `profile` (`None`: the default one).
fn boot(settings: &Settings, profile: Option<&str>) -> Result<ccare_app::Booted, Failure> {
    Ok(ccare_app::boot(settings, profile, &env)?)
}

/// The process environment, as `ccare-app` reads it.
fn env(name: &str) -> Option<String> {
    std::env::var(name).ok()
}

fn is_broken_pipe(error: &anyhow::Error) -> bool {
    error
        .chain()
        .filter_map(|cause| cause.downcast_ref::<std::io::Error>())
        .any(|io| io.kind() == std::io::ErrorKind::BrokenPipe)
}
