//! The systems under test: mcpmux in-process (`Core` + `serve_http` on `127.0.0.1:0`,
//! spawned on the runtime the caller names) and mcpmux as a child process
//! (`mcpmux serve`: for memory, whose `/proc/<pid>/status` holds only the proxy, and for
//! the fleet's instances), and the configs they run.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use anyhow::{anyhow, bail, Context, Result};
use mcpmux::downstream::http::{serve_http_observed, HttpSettings};
use mcpmux::run::Core;
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};
use tokio::runtime::Handle;
use tokio_util::sync::CancellationToken;

/// Sizes the benchmark config raises above the defaults.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    pub max_clients: usize,
    /// `limits.max_connections`: every held stream is a connection.
    pub max_connections: usize,
    pub client_queue: usize,
    pub max_subscriptions_per_client: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_clients: 1024,
            max_connections: 4096,
            client_queue: 1024,
            max_subscriptions_per_client: 4096,
        }
    }
}

/// A config with one scripted upstream (200 static resources) and the given limits.
pub fn config_toml(scripted: &Path, limits: Limits) -> String {
    config_toml_era(scripted, limits, "legacy")
}

/// [`config_toml`] with the scripted upstream in protocol era `era` (`SCRIPTED_ERA`:
/// legacy, dual or modern).
pub fn config_toml_era(scripted: &Path, limits: Limits, era: &str) -> String {
    format!(
        "{}[servers.scripted]\ncommand = {:?}\n\
         env = {{ SCRIPTED_RESOURCES = \"200\", SCRIPTED_ERA = \"{era}\" }}\n",
        listen_and_limits(limits),
        scripted.display().to_string()
    )
}

/// A config with one Streamable HTTP upstream at `upstream_url` (server name `up`) and
/// the given limits; with `fleet` = `(nats_url, fleet_name)`, a `[fleet]` section too
/// (default `lease_ms`).
pub fn config_toml_http(upstream_url: &str, limits: Limits, fleet: Option<(&str, &str)>) -> String {
    let fleet = fleet.map_or(String::new(), |(nats, name)| {
        format!("[fleet]\nnats = {nats:?}\nname = {name:?}\n\n")
    });
    format!(
        "{}{fleet}[servers.up]\nurl = {upstream_url:?}\n",
        listen_and_limits(limits)
    )
}

/// `[listen]` on `127.0.0.1:0` and `[limits]`, each followed by a blank line.
fn listen_and_limits(limits: Limits) -> String {
    format!(
        "[listen]\nhttp = \"127.0.0.1:0\"\n\n[limits]\nmax_clients = {}\nmax_connections = {}\n\
         client_queue = {}\nmax_subscriptions_per_client = {}\n\n",
        limits.max_clients,
        limits.max_connections,
        limits.client_queue,
        limits.max_subscriptions_per_client,
    )
}

/// mcpmux running inside this process.
pub struct Proxy {
    pub url: String,
    pub core: Core,
    stop: CancellationToken,
    server: tokio::task::JoinHandle<std::io::Result<()>>,
}

impl Proxy {
    /// Starts the core and the HTTP endpoint on `rt`.
    ///
    /// # Errors
    /// A config error or a bind failure.
    pub fn start(rt: &Handle, config_toml: &str) -> Result<Proxy> {
        let cfg = mcpmux::config::parse(config_toml, "loadgen.toml")?;
        let _guard = rt.enter();
        let core = Core::start(&cfg);
        let std_listener = std::net::TcpListener::bind(cfg.listen.http)?;
        std_listener.set_nonblocking(true)?;
        let listener = tokio::net::TcpListener::from_std(std_listener)?;
        let addr = listener.local_addr()?;
        let settings = HttpSettings::from_config(&cfg.listen, &cfg.limits, None);
        let stop = CancellationToken::new();
        let server = rt.spawn(serve_http_observed(
            listener,
            settings,
            core.hub.clients().clone(),
            Some(mcpmux::observe::Observe {
                snapshots: core.hub.snapshots(),
                reload: None,
                logins: None,
            }),
            stop.clone(),
        ));
        Ok(Proxy {
            url: format!("http://{addr}{}", cfg.listen.path),
            core,
            stop,
            server,
        })
    }

    /// Stops the endpoint, then the core (which stops the upstream).
    pub async fn stop(self) {
        self.stop.cancel();
        let _ = tokio::time::timeout(Duration::from_secs(10), self.server).await;
        self.core.stop().await;
    }
}

/// `mcpmux serve` as a child process; killed on drop.
pub struct Daemon {
    pub child: Child,
    pub url: String,
    _config: TempFile,
}

impl Daemon {
    /// Starts `mcpmux serve` and reads its listening line.
    ///
    /// # Errors
    /// Spawn failure, or no listening line within 30 s.
    pub async fn start(mcpmux: &Path, config_toml: &str) -> Result<Daemon> {
        let config = TempFile::new("toml", config_toml)?;
        let mut child = Command::new(mcpmux)
            .args(["serve", "--config"])
            .arg(&config.0)
            .env("RUST_LOG", "warn")
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .kill_on_drop(true)
            .spawn()
            .with_context(|| format!("spawn {}", mcpmux.display()))?;
        let stdout = child.stdout.take().ok_or_else(|| anyhow!("no stdout"))?;
        let mut lines = BufReader::new(stdout).lines();
        let line = tokio::time::timeout(Duration::from_secs(30), lines.next_line())
            .await
            .context("mcpmux serve did not print its listening line")??
            .ok_or_else(|| anyhow!("mcpmux serve exited before listening"))?;
        let Some(url) = line.strip_prefix("mcpmux listening on ") else {
            bail!("unexpected first line from mcpmux serve: {line}");
        };
        Ok(Daemon {
            url: url.to_owned(),
            child,
            _config: config,
        })
    }

    /// The child's resident set size in bytes (`VmRSS` of `/proc/<pid>/status`).
    ///
    /// # Errors
    /// The process is gone or `/proc` is unavailable.
    pub fn rss(&self) -> Result<u64> {
        let pid = self.child.id().ok_or_else(|| anyhow!("mcpmux exited"))?;
        rss_of(&format!("/proc/{pid}/status"))
    }
}

/// `VmRSS` of a `/proc/.../status` file, in bytes.
///
/// # Errors
/// The file is unreadable or has no `VmRSS` line.
pub fn rss_of(status_path: &str) -> Result<u64> {
    let text = std::fs::read_to_string(status_path)?;
    let kb = text
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        .ok_or_else(|| anyhow!("no VmRSS in {status_path}"))?;
    Ok(kb * 1024)
}

/// A file in the temp dir, removed on drop.
pub struct TempFile(pub PathBuf);

impl TempFile {
    /// # Errors
    /// The file cannot be written.
    pub fn new(ext: &str, text: &str) -> Result<TempFile> {
        use std::sync::atomic::{AtomicU64, Ordering};
        static N: AtomicU64 = AtomicU64::new(0);
        let path = std::env::temp_dir().join(format!(
            "mcpmux-loadgen-{}-{}.{ext}",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed)
        ));
        std::fs::write(&path, text)?;
        Ok(TempFile(path))
    }
}

impl Drop for TempFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}
