//! The `mcpmux` command: parses arguments, sets up logging, and calls into the
//! library. Nothing else lives here.

use std::num::NonZeroUsize;
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context;
use clap::{Parser, Subcommand, ValueEnum};
use tokio_util::sync::CancellationToken;

use mcpmux::config::{self, Config};
use mcpmux::downstream::http::{serve_http_observed, HttpSettings, ProfileEndpoints};
use mcpmux::run::Core;
use mcpmux::telemetry::Telemetry;

#[cfg(all(unix, feature = "jemalloc"))]
#[global_allocator]
static GLOBAL: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

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
        #[arg(short, long, value_name = "FILE")]
        config: Option<PathBuf>,
        /// Worker threads of the runtime. One serves a desk's worth of hosts with the
        /// least CPU and latency per request (each hop of a request stays on one
        /// thread); more spread many connections' HTTP work over cores, while the hub
        /// stays one task.
        #[arg(long, value_name = "N", env = "MCPMUX_WORKERS", default_value_t = mcpmux::run::SERVE_WORKERS)]
        workers: NonZeroUsize,
    },
    /// Serve one client on stdin/stdout with the same upstreams.
    Stdio {
        /// Config file (default: $MCPMUX_CONFIG, then ./mcpmux.toml).
        #[arg(short, long, value_name = "FILE")]
        config: Option<PathBuf>,
        /// Serve this `[profiles.NAME]`'s view instead of every server.
        #[arg(short, long, value_name = "NAME")]
        profile: Option<String>,
    },
    /// Validate the config and print it resolved; non-zero exit on error.
    Check {
        /// Config file (default: $MCPMUX_CONFIG, then ./mcpmux.toml).
        #[arg(short, long, value_name = "FILE")]
        config: Option<PathBuf>,
        /// Also connect to each server and print what it speaks (one JSON object per
        /// line: era, versions, capabilities); non-zero exit when one fails.
        #[arg(long)]
        probe: bool,
    },
    /// Show a running daemon's upstreams, clients, held URIs and savings; non-zero exit
    /// when it is not running or an upstream is down.
    Status(DaemonArgs),
    /// Ask a running daemon to re-read its configuration (as SIGHUP does); non-zero
    /// exit when it refused the new one (the running configuration stays).
    Reload(DaemonArgs),
    /// Log in to an HTTP server that asks for OAuth; a running daemon picks the
    /// login up without a restart.
    Login {
        /// The server's name (`[servers.NAME]`).
        name: String,
        /// Config file (default: $MCPMUX_CONFIG, then ./mcpmux.toml).
        #[arg(short, long, value_name = "FILE")]
        config: Option<PathBuf>,
        /// Print the authorization URL (on stdout) instead of opening a browser.
        #[arg(long)]
        no_browser: bool,
    },
    /// Forget the tokens of an HTTP server's login.
    Logout {
        /// The server's name (`[servers.NAME]`).
        name: String,
        /// Config file (default: $MCPMUX_CONFIG, then ./mcpmux.toml).
        #[arg(short, long, value_name = "FILE")]
        config: Option<PathBuf>,
    },
    /// Bridge stdin/stdout to a running mcpmux over Streamable HTTP.
    Connect {
        /// The daemon's MCP endpoint, e.g. http://127.0.0.1:7878/mcp.
        url: String,
        /// The environment variable holding the daemon's (or the profile's) bearer
        /// token. Default: $MCPMUX_TOKEN when set, else none.
        #[arg(long, value_name = "NAME")]
        token_env: Option<String>,
    },
    /// Write an mcpmux config from Claude Desktop / Cursor / VS Code / Windsurf MCP
    /// configs; report on stderr what could not be imported.
    Import {
        /// Host config files (JSON; comments and trailing commas allowed).
        #[arg(required = true)]
        files: Vec<PathBuf>,
        /// Where to write the config; `-` for stdout.
        #[arg(short, long, value_name = "PATH", default_value = config::DEFAULT_CONFIG_FILE)]
        output: PathBuf,
        /// Overwrite the output file if it exists.
        #[arg(short, long)]
        force: bool,
    },
}

/// How `status` and `reload` find a running daemon and its bearer token.
#[derive(clap::Args, Debug)]
struct DaemonArgs {
    /// The daemon's URL (its base or its MCP endpoint); default: from the config's
    /// `[listen].http`, else http://127.0.0.1:7878.
    #[arg(long)]
    url: Option<String>,
    /// Config to take the address and the bearer token variable (`auth_token_env`)
    /// from (default: $MCPMUX_CONFIG, then ./mcpmux.toml, if it exists).
    #[arg(short, long, value_name = "FILE")]
    config: Option<PathBuf>,
    /// The environment variable holding the daemon's bearer token. Default:
    /// $MCPMUX_TOKEN when set, else the config's `auth_token_env`.
    #[arg(long, value_name = "NAME")]
    token_env: Option<String>,
}

#[derive(Clone, Copy, Debug, ValueEnum)]
enum LogFormat {
    Text,
    Json,
}

/// How long blocking work may still run once the command is done (`main`).
const BLOCKING_GRACE: std::time::Duration = std::time::Duration::from_millis(500);

fn main() -> ExitCode {
    let cli = Cli::parse();
    // One client on stdin/stdout gains nothing from a second worker thread, and every
    // hop of a request (stdin → hub → upstream → hub → stdout) would cross threads:
    // `stdio` and `connect` run all their tasks on the main thread
    // (docs/architecture.md, "Stdio mode and mcpmux connect").
    // `serve` runs `--workers` threads, one by default, for the same reason: a request
    // crosses five tasks (connection, hub, upstream session, its POST, the HTTP
    // client's connection), and on two workers most of those hops wake the other thread
    // (docs/architecture.md, "Runtime").
    let runtime = match &cli.command {
        Cmd::Stdio { .. } | Cmd::Connect { .. } => tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build(),
        Cmd::Serve { workers, .. } => tokio::runtime::Builder::new_multi_thread()
            .worker_threads(workers.get())
            .enable_all()
            .build(),
        _ => tokio::runtime::Runtime::new(),
    };
    let runtime = match runtime {
        Ok(r) => r,
        Err(e) => {
            eprintln!("mcpmux: cannot start the runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    // Traces are exported by `serve` and `stdio` when configured (docs/architecture.md,
    // "Traces"); a config that does not load is reported by the command itself.
    let telemetry = match &cli.command {
        Cmd::Serve { config, .. } | Cmd::Stdio { config, .. } => {
            let cfg = config::load(&config::resolve_path(config.clone())).ok();
            match Telemetry::start(
                cfg.as_ref().and_then(|c| c.telemetry.as_ref()),
                runtime.handle().clone(),
            ) {
                Ok(t) => t,
                Err(e) => {
                    eprintln!("mcpmux: cannot start the OTLP exporter: {e:#}");
                    return ExitCode::FAILURE;
                }
            }
        }
        _ => None,
    };
    let (telemetry, layer) = telemetry.unzip();
    init_tracing(cli.log_format, layer);
    let outcome = runtime.block_on(async {
        let outcome = run(cli.command).await;
        // The last spans are flushed while the runtime still runs their exports.
        if let Some(t) = telemetry {
            let _ = tokio::task::spawn_blocking(move || t.shutdown()).await;
        }
        outcome
    });
    // A blocking read of a terminal stdin (`mcpmux stdio` typed into) cannot be
    // cancelled, and dropping the runtime would wait for it until Enter: blocking work
    // still running gets this long to end (a last write to stdout does), then is left.
    runtime.shutdown_timeout(BLOCKING_GRACE);
    match outcome {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("mcpmux: {e:#}");
            ExitCode::FAILURE
        }
    }
}

/// Logs to stderr (text or JSON, `RUST_LOG` filtered); with `otel`, the `mcpmux::otel`
/// spans (and nothing else) also go to the OTLP exporter.
fn init_tracing(format: LogFormat, otel: Option<mcpmux::telemetry::OtelLayer>) {
    use tracing_subscriber::layer::SubscriberExt as _;
    use tracing_subscriber::util::SubscriberInitExt as _;
    use tracing_subscriber::Layer as _;
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let ansi = std::io::IsTerminal::is_terminal(&std::io::stderr());
    let fmt = tracing_subscriber::fmt::layer()
        .with_ansi(ansi)
        .with_writer(std::io::stderr);
    let fmt = match format {
        LogFormat::Text => fmt.boxed(),
        LogFormat::Json => fmt.json().boxed(),
    };
    let otel = otel.map(|l| {
        l.with_filter(
            tracing_subscriber::filter::Targets::new()
                .with_target(mcpmux::telemetry::TARGET, tracing::Level::TRACE),
        )
    });
    let not_otel =
        tracing_subscriber::filter::filter_fn(|m| m.target() != mcpmux::telemetry::TARGET);
    tracing_subscriber::registry()
        .with(otel)
        .with(fmt.with_filter(filter).with_filter(not_otel))
        .init();
}

/// The bearer tokens `serve` needs: `[listen]`'s and every profile's, each variable
/// set. What `check` and a reload refuse, so `serve` never fails on it after starting.
fn check_tokens(cfg: &Config) -> anyhow::Result<()> {
    cfg.listen.auth_token()?;
    for p in cfg.profiles.values() {
        p.auth_token_with(|v| std::env::var(v).ok())?;
    }
    Ok(())
}

fn load(path: Option<PathBuf>) -> anyhow::Result<Config> {
    let path = config::resolve_path(path);
    config::load(&path).map_err(anyhow::Error::new)
}

async fn run(cmd: Cmd) -> anyhow::Result<()> {
    match cmd {
        Cmd::Check { config, probe } => {
            let cfg = load(config)?;
            check_tokens(&cfg)?;
            if !probe {
                out(&cfg.to_toml_redacted())?;
                return Ok(());
            }
            let reports = mcpmux::upstream::probe::probe_all(&cfg).await;
            let failed = reports.iter().filter(|r| r.outcome.is_err()).count();
            for r in &reports {
                out(&format!("{}\n", r.to_json()))?;
            }
            if failed > 0 {
                anyhow::bail!("{failed} of {} servers failed the probe", reports.len());
            }
            Ok(())
        }
        Cmd::Serve { config, .. } => {
            let path = config::resolve_path(config.clone());
            serve(load(config)?, path).await
        }
        Cmd::Login {
            name,
            config,
            no_browser,
        } => {
            let show = |url: &str| {
                eprintln!("Open this URL in a browser to log in to {name}:");
                let _ = out(&format!("{url}\n"));
            };
            let done = mcpmux::oauth::cli::login(&load(config)?, &name, no_browser, &show).await?;
            eprintln!("{done}");
            Ok(())
        }
        Cmd::Logout { name, config } => {
            eprintln!(
                "{}",
                mcpmux::oauth::cli::logout(&load(config)?, &name).await?
            );
            Ok(())
        }
        Cmd::Reload(daemon) => reload(daemon).await,
        Cmd::Status(daemon) => status(daemon).await,
        Cmd::Stdio { config, profile } => stdio(load(config)?, profile).await,
        Cmd::Connect { url, token_env } => mcpmux::downstream::connect::bridge(
            &url,
            connect_token(token_env)?,
            mcpmux::downstream::stdio_pipes::stdin(),
            mcpmux::downstream::stdio_pipes::stdout(),
        )
        .await
        .context("connect"),
        Cmd::Import {
            files,
            output,
            force,
        } => Ok(mcpmux::import::run(&files, &output, force)?),
    }
}

/// Writes `text` to stdout: an error (not a panic) when stdout is closed or full.
fn out(text: &str) -> anyhow::Result<()> {
    use std::io::Write;
    let mut stdout = std::io::stdout().lock();
    stdout
        .write_all(text.as_bytes())
        .and_then(|()| stdout.flush())
        .context("cannot write to stdout")
}

/// The bearer token `connect` sends: the variable `--token-env` names (an error when
/// unset), else `$MCPMUX_TOKEN`, else none.
fn connect_token(token_env: Option<String>) -> anyhow::Result<Option<String>> {
    let var = |name: &str| std::env::var(name).ok().filter(|v| !v.is_empty());
    Ok(match token_env {
        Some(name) => {
            Some(var(&name).with_context(|| {
                format!("--token-env names {name}, which is not set or is empty")
            })?)
        }
        None => var(mcpmux::observe::status_cli::TOKEN_ENV),
    })
}

/// The daemon's URL and bearer token for `status` and `reload`. The URL: `--url`, else
/// the config's `[listen].http`, else the default address. The token: the variable
/// `--token-env` names (an error when unset), else `$MCPMUX_TOKEN`, else the config's
/// `auth_token_env`. The config is optional here: without `--config` or
/// `$MCPMUX_CONFIG`, a missing default file is no error; one named, or one that exists,
/// must load.
fn daemon_address(args: DaemonArgs) -> anyhow::Result<(String, Option<String>)> {
    let DaemonArgs {
        url,
        config,
        token_env,
    } = args;
    let named =
        config.is_some() || std::env::var_os(config::CONFIG_ENV).is_some_and(|v| !v.is_empty());
    let path = config::resolve_path(config);
    let cfg = if named || path.exists() {
        Some(config::load(&path)?)
    } else {
        None
    };
    let url = url.unwrap_or_else(|| {
        let addr = cfg.as_ref().map_or_else(
            || config::ListenConfig::DEFAULT_HTTP.to_owned(),
            |c| c.listen.http.to_string(),
        );
        format!("http://{addr}")
    });
    let var = |name: &str| std::env::var(name).ok().filter(|v| !v.is_empty());
    let token =
        match token_env {
            Some(name) => Some(var(&name).with_context(|| {
                format!("--token-env names {name}, which is not set or is empty")
            })?),
            None => var(mcpmux::observe::status_cli::TOKEN_ENV).or_else(|| {
                cfg.as_ref()
                    .and_then(|c| c.listen.auth_token().ok().flatten())
            }),
        };
    Ok((url, token))
}

/// `mcpmux reload`: `POST /reload` to a running daemon.
async fn reload(daemon: DaemonArgs) -> anyhow::Result<()> {
    let (url, token) = daemon_address(daemon)?;
    let mut u = reqwest::Url::parse(&url).with_context(|| format!("bad URL `{url}`"))?;
    u.set_path("/reload");
    // A reload may start and stop servers; a daemon that never answers is not waited
    // on for ever.
    let client = reqwest::Client::builder()
        .timeout(std::time::Duration::from_secs(60))
        .build()?;
    let mut req = client.post(u.clone());
    let token_sent = token.is_some();
    if let Some(t) = token {
        req = req.bearer_auth(t);
    }
    let resp = req
        .send()
        .await
        .with_context(|| format!("mcpmux is not running at {url}"))?;
    let status = resp.status();
    let body: serde_json::Value = resp.json().await.unwrap_or_default();
    if let Some(changes) = body["changes"].as_array() {
        for c in changes {
            out(&format!("{}\n", c.as_str().unwrap_or_default()))?;
        }
        return Ok(());
    }
    if matches!(status.as_u16(), 401 | 403) {
        anyhow::bail!(
            "{}",
            mcpmux::observe::status_cli::refusal(u.as_str(), status.as_u16(), token_sent, &body)
        );
    }
    anyhow::bail!(
        "reload refused ({status}): {}",
        body["error"].as_str().unwrap_or("no reason given")
    )
}

/// `mcpmux status`: the daemon's `/status` as tables.
async fn status(daemon: DaemonArgs) -> anyhow::Result<()> {
    use mcpmux::observe::status_cli;
    let (url, token) = daemon_address(daemon)?;
    let status_url = status_cli::status_url(&url).map_err(anyhow::Error::msg)?;
    let doc = status_cli::fetch(&status_url, token.as_deref())
        .await
        .map_err(anyhow::Error::msg)?;
    out(&status_cli::render(&doc))?;
    match status_cli::outcome(&doc) {
        status_cli::Outcome::AllUp => Ok(()),
        status_cli::Outcome::Degraded(names) => {
            anyhow::bail!("not every upstream is up: {}", names.join(", "))
        }
    }
}

async fn serve(cfg: Config, path: PathBuf) -> anyhow::Result<()> {
    check_tokens(&cfg)?;
    let token = cfg.listen.auth_token()?;
    // Every connection and upstream pipe is a descriptor; the connection bound is
    // derived from this limit (see mcpmux::fdlimit).
    mcpmux::fdlimit::raise_nofile_limit();
    let listener = tokio::net::TcpListener::bind(cfg.listen.http)
        .await
        .with_context(|| format!("cannot listen on {} ([listen].http)", cfg.listen.http))?;
    let addr = listener.local_addr()?;
    // OAuth logins come back to this listener when it is a loopback one.
    let core = Core::start_with(
        &cfg,
        addr.ip().is_loopback().then(|| format!("http://{addr}")),
    );
    let shutdown = CancellationToken::new();
    let mut settings = HttpSettings::from_config(&cfg.listen, &cfg.limits, token);
    settings.profiles = ProfileEndpoints::new(core.profile_endpoints()?);
    let profiles = settings.profiles.clone();
    for (name, p) in &cfg.profiles {
        tracing::info!(profile = %name, url = %format!("http://{addr}{}", p.path()), "profile served");
    }
    let (reload_tx, mut reload_rx) = tokio::sync::mpsc::channel(4);
    let http = tokio::spawn(serve_http_observed(
        listener,
        settings,
        core.hub.clients().clone(),
        Some(mcpmux::observe::Observe {
            snapshots: core.hub.snapshots(),
            reload: Some(reload_tx),
            logins: Some(core.logins.clone()),
        }),
        shutdown.clone(),
    ));
    let mut core = core;
    let mut stops = mcpmux::signals::StopSignals::new();
    let mut hangups = mcpmux::signals::hangups();
    // The one line scripts wait for (docs/architecture.md, "Commands and configuration");
    // logs go to stderr.
    out(&format!(
        "mcpmux listening on http://{addr}{}\n",
        cfg.listen.path
    ))?;
    loop {
        tokio::select! {
            () = stops.recv() => break,
            Some(()) = hangups.recv() => {
                tracing::info!(config = %path.display(), "SIGHUP: reloading the configuration");
                let _ = reload_from(&mut core, &path, &profiles).await;
            }
            Some(reply) = reload_rx.recv() => {
                tracing::info!(config = %path.display(), "reload requested over HTTP");
                let _ = reply.send(reload_from(&mut core, &path, &profiles).await);
            }
        }
    }
    tracing::info!("shutting down");
    stops.second_one_exits();
    // Reloads asked from now on are refused (503), not left waiting.
    drop(reload_rx);
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

/// Re-reads the config at `path` and applies it; a config `check` would refuse is
/// refused with the same error and the running one stays.
async fn reload_from(
    core: &mut Core,
    path: &std::path::Path,
    profiles: &ProfileEndpoints,
) -> Result<Vec<String>, String> {
    let refused = |e: String| {
        tracing::error!(error = %e, "new configuration refused; the running one stays");
        e
    };
    let cfg = config::load(path).map_err(|e| refused(format!("{e:#}")))?;
    check_tokens(&cfg).map_err(|e| refused(format!("{e:#}")))?;
    if let Some(why) = core.refuses(&cfg) {
        return Err(refused(why));
    }
    let changes = core.reload(cfg).await?;
    // Checked above; a variable unset since is refused for that profile alone.
    match core.profile_endpoints() {
        Ok(endpoints) => profiles.replace(endpoints),
        Err(e) => tracing::error!(error = %e, "profile endpoints not updated"),
    }
    Ok(changes)
}

/// How long `mcpmux stdio` keeps writing after the shutdown drain, for answers
/// already queued.
const STDIO_FLUSH: std::time::Duration = std::time::Duration::from_millis(200);

async fn stdio(cfg: Config, profile: Option<String>) -> anyhow::Result<()> {
    mcpmux::fdlimit::raise_nofile_limit();
    if let Some(name) = profile
        .as_deref()
        .filter(|n| !cfg.profiles.contains_key(*n))
    {
        let known: Vec<&str> = cfg.profiles.keys().map(String::as_str).collect();
        anyhow::bail!(
            "--profile {name}: no [profiles.{name}] in the config (profiles: {})",
            if known.is_empty() {
                "none".to_owned()
            } else {
                known.join(", ")
            }
        );
    }
    let core = Core::start(&cfg);
    let link = match profile.as_deref().and_then(|n| core.view_of(n)) {
        Some(view) => core.hub.clients().with_view(view),
        None => core.hub.clients().clone(),
    };
    // A task of its own, not part of `block_on`'s future: waking that future goes
    // through the driver (an eventfd write and one more epoll round per message),
    // waking a task on the runtime's one thread does not.
    let mut served = tokio::spawn(mcpmux::downstream::stdio::serve_stream(
        mcpmux::downstream::stdio_pipes::stdin(),
        mcpmux::downstream::stdio_pipes::stdout(),
        link,
        cfg.limits.max_message_bytes,
        cfg.limits.client_queue,
    ));
    let ended = |r: Result<Result<(), _>, tokio::task::JoinError>| -> anyhow::Result<()> {
        r.map_err(|e| anyhow::anyhow!("the stdio client task failed: {e}"))??;
        Ok(())
    };
    let mut stops = mcpmux::signals::StopSignals::new();
    tokio::select! {
        r = &mut served => ended(r)?,
        () = stops.recv() => {
            stops.second_one_exits();
            // Requests in flight get limits.drain_ms; the client keeps being served
            // (their answers are written) until then.
            let drain = std::time::Duration::from_millis(cfg.limits.drain_ms);
            tokio::select! {
                _ = core.hub.drain(drain) => {
                    // The writer (inside `served`) gets a moment to write the answers
                    // the drain let through.
                    let _ = tokio::time::timeout(STDIO_FLUSH, &mut served).await;
                    served.abort();
                }
                r = &mut served => ended(r)?,
            }
        }
    }
    core.stop().await;
    Ok(())
}
