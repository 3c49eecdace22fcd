//! The one restart loop of every upstream actor (docs/architecture.md, "Upstream
//! failure"): a [`Transport`] runs one session at a time (stdio: a child process;
//! HTTP: a Streamable HTTP session, a stateless one, or two faces); [`run`] starts
//! them one after another, drops commands queued for a dead session, reports
//! `Down {reason, retrying}` (the transport reports `Ready` itself, when its handshake
//! or probe is done), hands the hub answers synthesized for requests the dead session
//! left, and waits out the backoff, until shutdown or `restart.max_failures`.
//!
//! Owns the failure count; never touches a transport's sockets or processes, and
//! never interprets a message.

use std::time::Duration;

use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use super::{backoff, Related, UpstreamCmd, UpstreamEvent, UpstreamLink};
use crate::config::RestartConfig;
use crate::protocol::Message;
use crate::state::ids::UpstreamId;

/// Why one session of a transport ended.
pub(crate) enum SessionEnd {
    /// mcpmux is shutting down, or the hub is gone: the actor stops.
    Shutdown,
    /// The handshake failed or the transport is unusable.
    Died(String),
    /// The server forgot the session (HTTP); `orphans` answer requests that found out.
    /// The first new session after an expiry starts at once.
    Expired {
        reason: String,
        orphans: Vec<Message>,
    },
}

/// One upstream transport, as the restart loop sees it.
pub(crate) trait Transport {
    /// Runs one session: connect, probe, handshake, send `Ready`, then carry messages
    /// until it ends. Commands come from `rx`.
    async fn session(&self, rx: &mut mpsc::Receiver<UpstreamCmd>) -> SessionEnd;
}

/// Runs sessions of `transport` until shutdown, the hub going away, or the upstream
/// being marked down (then it waits for shutdown).
pub(crate) async fn run(
    sup: Supervisor<'_>,
    transport: &impl Transport,
    mut rx: mpsc::Receiver<UpstreamCmd>,
) {
    let mut failures = Failures::default();
    loop {
        // Commands queued for a dead session must not reach the next one.
        while rx.try_recv().is_ok() {}
        let started = tokio::time::Instant::now();
        let (reason, orphans, expired) = match transport.session(&mut rx).await {
            SessionEnd::Shutdown => return,
            SessionEnd::Died(r) => (r, Vec::new(), false),
            SessionEnd::Expired { reason, orphans } => (reason, orphans, true),
        };
        if !sup
            .session_ended(&mut failures, started.elapsed(), reason, orphans, expired)
            .await
        {
            return;
        }
    }
}

/// Consecutive failed sessions of one upstream: drives the backoff and the decision
/// to mark it down. A session that lived longer than the longest backoff (at least
/// 10 s) was a success and starts the count again.
#[derive(Debug, Default)]
struct Failures {
    count: u32,
}

impl Failures {
    /// Records a session that ended after `lived`; returns the count and whether to
    /// try again.
    fn record(&mut self, lived: Duration, cfg: &RestartConfig) -> (u32, bool) {
        if lived > Duration::from_millis(cfg.max_backoff_ms.max(10_000)) {
            self.count = 0;
        }
        self.count += 1;
        (self.count, self.count < cfg.max_failures)
    }
}

/// What happens between sessions: count the failure, tell the hub, hand it any
/// answers synthesized for requests the dead session left, then wait out the backoff.
pub(crate) struct Supervisor<'a> {
    pub id: UpstreamId,
    pub name: &'a str,
    pub hub: &'a UpstreamLink,
    pub restart: &'a RestartConfig,
    pub shutdown: &'a CancellationToken,
}

impl Supervisor<'_> {
    /// Returns `false` when the actor must stop: the hub is gone, mcpmux is shutting
    /// down, or the upstream failed `max_failures` times in a row (marked down; it
    /// then waits for shutdown). `retry_at_once` skips the backoff for the first
    /// failure (a session expiry: the spec says to start a new session at once).
    async fn session_ended(
        &self,
        failures: &mut Failures,
        lived: Duration,
        reason: String,
        orphans: Vec<Message>,
        retry_at_once: bool,
    ) -> bool {
        let (count, retrying) = failures.record(lived, self.restart);
        tracing::warn!(upstream = %self.name, %reason, failures = count, retrying, "upstream session ended");
        let down = UpstreamEvent::Down { reason, retrying };
        if self.hub.send(self.id, down).await.is_err() {
            return false;
        }
        for m in orphans {
            if self
                .hub
                .send(self.id, UpstreamEvent::Message(m, Related::Nothing))
                .await
                .is_err()
            {
                return false;
            }
        }
        if !retrying {
            tracing::error!(upstream = %self.name, failures = count, "upstream keeps failing; marked down (restart mcpmux to try again)");
            self.shutdown.cancelled().await;
            return false;
        }
        let delay = if retry_at_once && count == 1 {
            Duration::ZERO
        } else {
            backoff(self.restart, count)
        };
        tokio::select! {
            _ = tokio::time::sleep(delay) => true,
            _ = self.shutdown.cancelled() => false,
        }
    }
}
