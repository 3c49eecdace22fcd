//! The `mcpmux` command: parses arguments, sets up logging, and calls into the
//! library. Nothing else lives here.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context;
use clap::{Parser, Subcommand, ValueEnum};
use tokio_util::sync::CancellationToken;

use mcpmux::config::{self, Config};
use mcpmux::downstream::http::{serve_http, HttpSettings};
use mcpmux::run::Core;

#[derive(Parser, Debug)]
#[command(
    name = "mcpmux",
    version,
    about = "One MCP session per upstream server, shared by many clients"
)]
struct Cli {
    /// Log format on stderr (`RUST_LOG` sets the filter; default `info`).
    #[arg(long, value_enum, default_value_t = LogFormat::Text, global = true)]
    log_format: LogFormat,
    #[command(subcommand)]
    command: Cmd,
}

#[derive(Subcommand, Debug)]
enum Cmd {
    /// Serve Streamable HTTP at [listen].http + [listen].path.
    Serve {
        /// Config file (default: $MCPMUX_CONFIG, then ./mcpmux.toml).
        #[arg(long)]
        config: Option<PathBuf>,
    },
    /// Serve one client on stdin/stdout with the same upstreams.
    Stdio {
        #[arg(long)]
        config: Option<PathBuf>,
    },
    /// Validate the config and print it resolved; non-zero exit on error.
    Check {
        #[arg(long)]
        config: Option<PathBuf>,
        /// Also connect to each server and print what it speaks (one JSON object per
        /// line: era, versions, capabilities); non-zero exit when one fails.
        #[arg(long)]
        probe: bool,
    },
    /// Bridge stdin/stdout to a running mcpmux over Streamable HTTP.
    Connect {
        /// The daemon's MCP endpoint, e.g. http://127.0.0.1:7878/mcp.
        url: String,
    },
}

#[derive(Clone, Copy, Debug, ValueEnum)]
enum LogFormat {
    Text,
    Json,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    init_tracing(cli.log_format);
    let runtime = match tokio::runtime::Runtime::new() {
        Ok(r) => r,
        Err(e) => {
            eprintln!("mcpmux: cannot start the runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(run(cli.command)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("mcpmux: {e:#}");
            ExitCode::FAILURE
        }
    }
}

fn init_tracing(format: LogFormat) {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .with_writer(std::io::stderr);
    match format {
        LogFormat::Text => builder.init(),
        LogFormat::Json => builder.json().init(),
    }
}

fn load(path: Option<PathBuf>) -> anyhow::Result<Config> {
    let path = config::resolve_path(path);
    config::load(&path).map_err(anyhow::Error::new)
}

async fn run(cmd: Cmd) -> anyhow::Result<()> {
    match cmd {
        Cmd::Check { config, probe } => {
            let cfg = load(config)?;
            cfg.listen.auth_token()?;
            if !probe {
                print!("{}", cfg.to_toml_redacted());
                return Ok(());
            }
            let reports = mcpmux::upstream::probe::probe_all(&cfg).await;
            let failed = reports.iter().filter(|r| r.outcome.is_err()).count();
            for r in &reports {
                println!("{}", r.to_json());
            }
            if failed > 0 {
                anyhow::bail!("{failed} of {} servers failed the probe", reports.len());
            }
            Ok(())
        }
        Cmd::Serve { config } => serve(load(config)?).await,
        Cmd::Stdio { config } => stdio(load(config)?).await,
        Cmd::Connect { url } => {
            mcpmux::downstream::connect::bridge(&url, tokio::io::stdin(), tokio::io::stdout())
                .await
                .context("connect")
        }
    }
}

async fn serve(cfg: Config) -> anyhow::Result<()> {
    let token = cfg.listen.auth_token()?;
    // Every connection and upstream pipe is a descriptor; the connection bound is
    // derived from this limit (see mcpmux::fdlimit).
    mcpmux::fdlimit::raise_nofile_limit();
    let listener = tokio::net::TcpListener::bind(cfg.listen.http)
        .await
        .with_context(|| format!("cannot listen on {} ([listen].http)", cfg.listen.http))?;
    let addr = listener.local_addr()?;
    let core = Core::start(&cfg);
    let shutdown = CancellationToken::new();
    let settings = HttpSettings::from_config(&cfg.listen, &cfg.limits, token);
    let http = tokio::spawn(serve_http(
        listener,
        settings,
        core.hub.clients().clone(),
        shutdown.clone(),
    ));
    // The one line scripts wait for (docs/architecture.md, "Commands and configuration");
    // logs go to stderr.
    println!("mcpmux listening on http://{addr}{}", cfg.listen.path);
    shutdown_signal().await;
    tracing::info!("shutting down");
    // Requests in flight get limits.drain_ms to be answered; new ones are refused.
    let drain = std::time::Duration::from_millis(cfg.limits.drain_ms);
    let _ = core.hub.drain(drain).await;
    shutdown.cancel();
    match http.await {
        Ok(Err(e)) => tracing::warn!(error = %e, "http server ended with an error"),
        Err(e) => tracing::warn!(error = %e, "http server task failed"),
        Ok(Ok(())) => {}
    }
    core.stop().await;
    Ok(())
}

/// How long `mcpmux stdio` keeps writing after the shutdown drain, for answers
/// already queued.
const STDIO_FLUSH: std::time::Duration = std::time::Duration::from_millis(200);

async fn stdio(cfg: Config) -> anyhow::Result<()> {
    mcpmux::fdlimit::raise_nofile_limit();
    let core = Core::start(&cfg);
    let served = mcpmux::downstream::stdio::serve_stream(
        tokio::io::stdin(),
        tokio::io::stdout(),
        core.hub.clients().clone(),
        cfg.limits.max_message_bytes,
        cfg.limits.client_queue,
    );
    tokio::pin!(served);
    tokio::select! {
        r = &mut served => { r?; }
        _ = shutdown_signal() => {
            // Requests in flight get limits.drain_ms; the client keeps being served
            // (their answers are written) until then.
            let drain = std::time::Duration::from_millis(cfg.limits.drain_ms);
            tokio::select! {
                _ = core.hub.drain(drain) => {
                    // The writer (inside `served`) gets a moment to write the answers
                    // the drain let through.
                    let _ = tokio::time::timeout(STDIO_FLUSH, &mut served).await;
                }
                r = &mut served => { r?; }
            }
        }
    }
    core.stop().await;
    Ok(())
}

/// Resolves on SIGINT or SIGTERM.
async fn shutdown_signal() {
    let ctrl_c = tokio::signal::ctrl_c();
    #[cfg(unix)]
    {
        let mut term =
            match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
                Ok(s) => s,
                Err(_) => {
                    let _ = ctrl_c.await;
                    return;
                }
            };
        tokio::select! {
            _ = ctrl_c => {}
            _ = term.recv() => {}
        }
    }
    #[cfg(not(unix))]
    {
        let _ = ctrl_c.await;
    }
}
