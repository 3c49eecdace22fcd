//! The one restart loop of every upstream actor (docs/architecture.md, "Upstream
//! failure"): a [`Transport`] runs one session at a time (stdio: a child process;
//! HTTP: a Streamable HTTP session, a stateless one, or two faces); [`run`] starts
//! them one after another, drops commands queued for a dead session, reports
//! `Down {reason, retrying}` (the transport reports `Ready` itself, when its handshake
//! or probe is done), hands the hub answers synthesized for requests the dead session
//! left, and waits out the backoff, until shutdown or `restart.max_failures`.
//!
//! [`run_stateless`] is the one loop of a stateless (2026-07-28) session over either
//! transport: it feeds the [`StatelessSession`] and carries out its actions; what
//! differs by transport (sending, stopping, reading) is behind [`StatelessIo`].
//!
//! Owns the failure count and the session's action queue; never touches a
//! transport's sockets or processes, and never interprets a message (the
//! `StatelessSession` does).

use std::time::{Duration, Instant};

use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use super::stateless::{Action, StatelessSession};
use super::{backoff, Related, UpstreamCmd, UpstreamEvent, UpstreamLink};
use crate::config::RestartConfig;
use crate::protocol::{Message, RawId};
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

/// What the transport of a stateless session heard from the server.
#[derive(Debug)]
pub(crate) enum Inbound {
    /// A message, with what the transport knows of the request it belongs to.
    Message(Message, Related),
    /// The stream of listen `id` ended without its result (HTTP).
    ListenLost(RawId),
}

/// The transport-specific part of a stateless (2026-07-28) session: how a message is
/// sent, how a request or listen is stopped, where the server's messages come from.
pub(crate) trait StatelessIo {
    /// Sends `msg` (never waits: queue it or start a task). `listen` marks a
    /// `subscriptions/listen`; `param_headers` are `Mcp-Param-*` for HTTP.
    fn send(&mut self, msg: Message, listen: bool, param_headers: Vec<(String, String)>);
    /// Stops the request or listen `id` (HTTP: drop its stream; stdio:
    /// `notifications/cancelled`).
    fn stop(&mut self, id: &RawId);
    /// The next thing the server says. Cancel-safe.
    ///
    /// # Errors
    /// The transport failed: the session ends with this reason.
    async fn inbound(&mut self) -> Result<Inbound, String>;
}

/// How many commands queued together are applied in one turn (so a burst of
/// subscribes costs one listen change).
const COMMAND_BATCH: usize = 256;

/// The one loop of a stateless session over either transport: feeds the
/// [`StatelessSession`] the hub's commands (in bursts), the server's messages and its
/// timer, and carries out its [`Action`]s through `io` and the hub. Returns when
/// mcpmux shuts down or the hub goes away (`Shutdown`), the transport fails, or the
/// session asks for a restart (`Died`, after the other actions of that turn).
pub(crate) async fn run_stateless(
    sup: &Supervisor<'_>,
    session: &mut StatelessSession,
    io: &mut impl StatelessIo,
    rx: &mut mpsc::Receiver<UpstreamCmd>,
) -> SessionEnd {
    let mut acts = Vec::new();
    session.start(Instant::now(), &mut acts);
    let end = loop {
        let mut restart = None;
        for a in acts.drain(..) {
            match carry_out(a, io) {
                None => {}
                Some(Action::Hub(m, related)) => {
                    let event = UpstreamEvent::Message(m, related);
                    if sup.hub.send(sup.id, event).await.is_err() {
                        return SessionEnd::Shutdown;
                    }
                }
                Some(Action::Restart(why)) => restart = Some(why),
                Some(Action::Send { .. } | Action::Stop(_)) => unreachable!("carried out"),
            }
        }
        if let Some(why) = restart {
            break SessionEnd::Died(why);
        }
        let deadline = session.deadline().map(tokio::time::Instant::from_std);
        let timer = async {
            match deadline {
                Some(d) => tokio::time::sleep_until(d).await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            biased;
            _ = sup.shutdown.cancelled() => break SessionEnd::Shutdown,
            inbound = io.inbound() => match inbound {
                Ok(Inbound::Message(m, related)) => session.on_message(m, related, Instant::now(), &mut acts),
                Ok(Inbound::ListenLost(id)) => session.on_listen_lost(&id, Instant::now(), &mut acts),
                Err(e) => break SessionEnd::Died(e),
            },
            cmd = rx.recv() => match cmd {
                Some(cmd) => {
                    session.on_command(cmd, Instant::now(), &mut acts);
                    for _ in 0..COMMAND_BATCH {
                        let Ok(cmd) = rx.try_recv() else { break };
                        session.on_command(cmd, Instant::now(), &mut acts);
                    }
                }
                // The hub dropped its handle: it is gone.
                None => break SessionEnd::Shutdown,
            },
            _ = timer => session.on_timer(Instant::now(), &mut acts),
        }
    };
    tracing::debug!(upstream = %sup.name, listens = session.listens_opened(), "stateless session ended");
    end
}

/// At shutdown: applies the commands the hub queued last (its last unsubscribes close
/// the listen) and hands what they send or stop to `io`; nothing goes to the hub.
pub(crate) fn settle_queued(
    session: &mut StatelessSession,
    io: &mut impl StatelessIo,
    rx: &mut mpsc::Receiver<UpstreamCmd>,
) {
    let mut acts = Vec::new();
    while let Ok(cmd) = rx.try_recv() {
        session.on_command(cmd, Instant::now(), &mut acts);
    }
    for a in acts {
        carry_out(a, io);
    }
}

/// Hands a `Send` or a `Stop` to the transport; gives any other action back.
fn carry_out(a: Action, io: &mut impl StatelessIo) -> Option<Action> {
    match a {
        Action::Send {
            msg,
            listen,
            param_headers,
        } => io.send(msg, listen, param_headers),
        Action::Stop(id) => io.stop(&id),
        other => return Some(other),
    }
    None
}
