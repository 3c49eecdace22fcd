//! mcpmux run in-process: the core and the Streamable HTTP server on `127.0.0.1:0`
//! inside the test's own runtime, so a test can read the hub's `HubStats` (the sizes
//! of its tables) while talking to it over real HTTP.

use std::time::{Duration, Instant};

use mcpmux::downstream::http::{serve_http_observed, HttpSettings};
use mcpmux::hub::HubStats;
use mcpmux::run::Core;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

/// A running in-process mcpmux.
pub struct InProc {
    core: Option<Core>,
    /// `http://127.0.0.1:PORT/PATH`.
    pub url: String,
    shutdown: CancellationToken,
    http: Option<JoinHandle<std::io::Result<()>>>,
}

impl InProc {
    /// Starts the core and the HTTP endpoint for `config_toml`; `[listen] http` is
    /// ignored (the listener is always bound to `127.0.0.1:0`).
    pub async fn start(config_toml: &str) -> InProc {
        let cfg = mcpmux::config::parse(config_toml, "test").expect("valid test config");
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind 127.0.0.1:0");
        let addr = listener.local_addr().unwrap();
        let core = Core::start(&cfg);
        let shutdown = CancellationToken::new();
        let settings = HttpSettings::from_config(&cfg.listen, &cfg.limits, None);
        let http = tokio::spawn(serve_http_observed(
            listener,
            settings,
            core.hub.clients().clone(),
            Some(mcpmux::observe::Observe {
                snapshots: core.hub.snapshots(),
                reload: None,
                logins: Some(core.logins.clone()),
            }),
            shutdown.clone(),
        ));
        InProc {
            core: Some(core),
            url: format!("http://{addr}{}", cfg.listen.path),
            shutdown,
            http: Some(http),
        }
    }

    pub async fn stats(&self) -> HubStats {
        self.core
            .as_ref()
            .expect("running")
            .hub
            .stats()
            .await
            .expect("hub running")
    }

    /// Polls the hub's stats until `done` holds (there is no event for "the hub's
    /// tables drained"), yielding a few milliseconds between polls; panics after
    /// `limit` with the last snapshot.
    pub async fn wait_stats(
        &self,
        what: &str,
        limit: Duration,
        done: impl Fn(&HubStats) -> bool,
    ) -> HubStats {
        let start = Instant::now();
        loop {
            let s = self.stats().await;
            if done(&s) {
                return s;
            }
            assert!(
                start.elapsed() < limit,
                "timed out after {limit:?} waiting for {what}: {s:?}"
            );
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }

    /// Graceful stop: the HTTP server and its sessions, then the hub and upstreams.
    pub async fn stop(mut self) {
        self.shutdown.cancel();
        if let Some(h) = self.http.take() {
            let _ = h.await;
        }
        if let Some(core) = self.core.take() {
            core.stop().await;
        }
    }
}

/// True when the hub holds nothing for any client.
pub fn tables_empty(s: &HubStats) -> bool {
    s.clients == 0
        && s.subscription_keys == 0
        && s.client_subscriptions == 0
        && s.pending_requests == 0
}
