//! The Streamable HTTP upstream actor: probes the server's era with a `server/discover`
//! POST (unless `protocol = "legacy"`); a 2026-07-28 server gets a session without a
//! session id (`stateless.rs`); otherwise (2025-03-26 … 2025-11-25) it holds one MCP
//! session, performs the handshake itself, POSTs each message the hub sends, forwards
//! every message the server sends. It is a [`Transport`]: the one restart loop
//! (`driver`) starts a new session when the old one dies or expires.
//!
//! Owns the session: its `Mcp-Session-Id`, the negotiated version, the one GET stream
//! and the in-flight POST tasks; all of them end with the session. Never interprets
//! messages beyond the handshake (it reads a request's id only to answer it when the
//! HTTP exchange fails); never awaits a client.
//!
//! Session lifecycle, as the hub sees it through [`UpstreamEvent`]:
//! - `initialize` POSTed (answer as JSON or SSE), `notifications/initialized` POSTed,
//!   then `Ready`, then the GET stream is opened (405 tolerated).
//! - Expiry (404 while a session id was sent, on any POST or the GET stream; or a 400
//!   followed by a 400/404 answer to the session's own `ping` probe — a 400 alone is
//!   taken to be about the one request, see `post.rs`):
//!   `Down { "session expired (HTTP 404)", retrying: true }`, then the synthesized
//!   error for the request that found out (the hub already failed it, so it finds
//!   nothing), then a fresh handshake without a session id and `Ready` again. The
//!   first re-initialize after an expiry is immediate; expiries of short-lived
//!   sessions count as consecutive failures like any other death, so a server that
//!   expires every session at once backs off and is eventually marked down.
//! - A failed handshake (connection, non-2xx, refusal, `restart.init_timeout_ms`):
//!   `Down { retrying }` and a retry after [`backoff`], marked down
//!   (`retrying: false`) after `restart.max_failures` consecutive failures.
//! - Shutdown: commands already queued are POSTed and in-flight POSTs awaited (within
//!   [`STOP_GRACE`]), then the session is DELETEd (405 ignored).
//!
//! Commands queued for a dead session are dropped before the next one starts.
//! HTTP-level failures of single POSTs (5xx, refused connection) do not end the
//! session: the request gets a synthesized error and the next one tries again.

pub(crate) mod client;
mod dual;
mod faces;
mod get_stream;
mod handshake;
mod lanes;
mod post;
mod stateless;
mod wire;

/// A cancellation read from the hub: the request it names is dropped, its POST aborted
/// if it was sent (its permit and lane freed), or never sent if it still waits.
fn cancelled(
    head: &mut post::Head,
    requests: &mut HashMap<RawId, AbortHandle>,
    backlog: &mut VecDeque<(bytes::Bytes, post::Head)>,
) {
    let Some(id) = head.cancels.take() else {
        return;
    };
    match requests.remove(&id) {
        Some(h) => h.abort(),
        None => backlog.retain(|(_, h)| h.request_id.as_ref() != Some(&id)),
    }
}

#[cfg(test)]
mod tests;

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;
use std::time::Duration;
use tokio_util::task::AbortOnDropHandle;

use tokio::sync::{mpsc, Semaphore};
use tokio::task::{AbortHandle, JoinSet};
use tokio_util::sync::CancellationToken;

use super::driver::{self, SessionEnd, Supervisor, Transport};
use super::probe::{self, Probed};
use super::{InitInfo, UpstreamCmd, UpstreamEvent, UpstreamLink};
use crate::config::{RestartConfig, ServerConfig, UpstreamProtocol, UpstreamTransport};
use crate::oauth::{Prepared, UpstreamAuth};
use crate::protocol::{Message, RawId};
use crate::state::ids::UpstreamId;
use client::HttpClient;
use get_stream::GetStream;
use post::{Post, Signal};
use wire::{Endpoint, SessionCtx};

/// POSTs in flight at once per upstream (default 64): enough that slow tool calls do
/// not queue behind each other, few enough that one upstream cannot open unbounded
/// connections. Further commands wait in the actor's queue.
pub const MAX_IN_FLIGHT: usize = 64;

/// How long shutdown may spend flushing queued commands, and then the DELETE (2 s
/// each, like the stdio actor's grace): shutdown must not hang on a dead server.
pub const STOP_GRACE: Duration = Duration::from_secs(2);

/// TCP connect timeout for every request (default 10 s). There is no overall request
/// timeout: SSE answers and the GET stream legitimately stay open; the hub times out
/// requests itself.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// How long an idle pooled connection to the server is kept for the next request.
/// Below Node.js's default `keepAliveTimeout` (5 s), the most common server stack: a
/// connection the server closes while our request is on its way fails that request
/// ("connection closed before message completed"); only one a server may get twice is
/// sent again (`client::Request::repeatable`).
pub const POOL_IDLE_TIMEOUT: Duration = Duration::from_secs(3);

pub(crate) struct HttpUpstream {
    pub id: UpstreamId,
    /// Its OAuth client (shared by both faces of a dual server), when mcpmux logs in.
    pub auth: Option<Arc<UpstreamAuth>>,
    pub config: ServerConfig,
    pub restart: RestartConfig,
    /// `limits.max_message_bytes`: bound on one JSON body or SSE event.
    pub max_message: usize,
    pub hub: UpstreamLink,
    pub shutdown: CancellationToken,
}

impl HttpUpstream {
    pub async fn run(self, rx: mpsc::Receiver<UpstreamCmd>) {
        let name = self.config.name.clone();
        let endpoint = match self.endpoint() {
            Ok(e) => e,
            Err(reason) => {
                tracing::error!(upstream = %name, %reason, "upstream cannot start");
                let down = UpstreamEvent::Down {
                    reason,
                    retrying: false,
                };
                let _ = self.hub.send(self.id, down).await;
                return;
            }
        };
        let sup = Supervisor {
            id: self.id,
            name: &name,
            hub: &self.hub,
            restart: &self.restart,
            shutdown: &self.shutdown,
        };
        let sessions = Sessions {
            up: &self,
            endpoint,
        };
        driver::run(sup, &sessions, rx).await;
    }

    fn endpoint(&self) -> Result<Endpoint, String> {
        let UpstreamTransport::Http { url, headers } = self.config.transport() else {
            return Err("not a Streamable HTTP server".into());
        };
        let client = |uri: &hyper::Uri| HttpClient::new(uri, CONNECT_TIMEOUT, POOL_IDLE_TIMEOUT);
        let mut endpoint =
            Endpoint::new(&self.config.name, &url, &headers, client, self.max_message)?;
        endpoint.auth = self.auth.clone();
        Ok(endpoint)
    }

    async fn session(
        &self,
        endpoint: &Endpoint,
        rx: &mut mpsc::Receiver<UpstreamCmd>,
    ) -> SessionEnd {
        let init_timeout = Duration::from_millis(self.restart.init_timeout_ms);
        if self.config.protocol != UpstreamProtocol::Legacy {
            let caps = crate::config::ClientCapability::declared(&self.config.client_capabilities);
            let mut link = stateless::HttpDiscoverer {
                endpoint,
                capabilities: &caps,
            };
            let probed = tokio::select! {
                p = probe::probe(&endpoint.name, self.config.protocol, init_timeout, &mut link) => p,
                _ = self.shutdown.cancelled() => return SessionEnd::Shutdown,
            };
            match probed {
                Probed::Modern(info) => {
                    if self.config.protocol == UpstreamProtocol::Auto {
                        if let Some(legacy) = self.legacy_face(endpoint, init_timeout).await {
                            if !faces::modern_covers(&info.capabilities, &legacy.capabilities) {
                                tracing::info!(upstream = %endpoint.name, legacy = %legacy.capabilities, modern = %info.capabilities,
                                    "upstream answers both eras and offers different things on each: one session per era");
                                return Box::pin(self.two_face_session(endpoint, &legacy, rx))
                                    .await;
                            }
                        }
                    }
                    tracing::info!(upstream = %endpoint.name, era = "modern", versions = ?info.supported_versions, "upstream speaks 2026-07-28");
                    let ready = UpstreamEvent::Ready(info.clone());
                    if self.hub.send(self.id, ready).await.is_err() {
                        return SessionEnd::Shutdown;
                    }
                    return self.stateless_session(endpoint, &info, rx).await;
                }
                Probed::Legacy { .. } => {}
                Probed::Failed(e) => return SessionEnd::Died(e),
            }
        }
        let params = super::initialize_params(&self.config);
        let handshake = tokio::time::timeout(init_timeout, handshake::handshake(endpoint, &params));
        let (ctx, info) = tokio::select! {
            r = handshake => match r {
                Ok(Ok(done)) => done,
                Ok(Err(e)) => return SessionEnd::Died(e),
                Err(_) => return SessionEnd::Died(format!(
                    "no answer to initialize within {} ms (restart.init_timeout_ms)",
                    init_timeout.as_millis()
                )),
            },
            _ = self.shutdown.cancelled() => return SessionEnd::Shutdown,
        };
        let ctx = Arc::new(ctx);
        tracing::debug!(upstream = %endpoint.name, session = ?ctx.session_id, version = %info.protocol_version, "upstream session started");
        if self
            .hub
            .send(self.id, UpstreamEvent::Ready(info))
            .await
            .is_err()
        {
            self.delete(&ctx).await;
            return SessionEnd::Shutdown;
        }

        let (signals, mut signal_rx) = mpsc::channel(16);
        let get = GetStream {
            ctx: ctx.clone(),
            hub: self.hub.clone(),
            upstream: self.id,
            restart: self.restart.clone(),
            signals: signals.clone(),
        };
        let _get = AbortOnDropHandle::new(tokio::spawn(get.run()));
        let mut probe: Option<AbortOnDropHandle<()>> = None;
        let permits = Arc::new(Semaphore::new(MAX_IN_FLIGHT));
        // Dropping the set aborts what is still in flight for this session.
        let mut posts = JoinSet::new();
        let mut lanes = lanes::Lanes::default();
        // Each request's POST, by the request's id: a request mcpmux cancels (its client
        // gave up, or it timed out) gets no answer from most servers, whose stream of
        // that POST then stays open for the session's life, holding a permit (and, for
        // an (un)subscribe, its URI's lane). It is dropped as soon as the cancellation
        // is read (`cancelled`), before anything waits for a permit.
        let mut requests: HashMap<RawId, AbortHandle> = HashMap::new();
        let mut post = |bytes: bytes::Bytes,
                        mut head: post::Head,
                        permit,
                        posts: &mut JoinSet<()>,
                        requests: &mut HashMap<RawId, AbortHandle>| {
            let p = Post {
                ctx: ctx.clone(),
                hub: self.hub.clone(),
                upstream: self.id,
                signals: signals.clone(),
            };
            let request_id = head.request_id.clone();
            // A (un)subscribe is sent once the one before it for its URI was answered.
            let handle = match head.subscription_uri.take() {
                None => posts.spawn(p.run(bytes, head, permit)),
                Some(uri) => {
                    let (after, done) = lanes.join(uri);
                    posts.spawn(async move {
                        if let Some(previous) = after {
                            let _ = previous.await;
                        }
                        p.run(bytes, head, permit).await;
                        drop(done);
                    })
                }
            };
            if let Some(id) = request_id {
                if requests.len() >= 2 * MAX_IN_FLIGHT {
                    requests.retain(|_, h| !h.is_finished());
                }
                requests.insert(id, handle);
            }
        };
        // What the hub sent, read at once (up to the hub's own queue bound) even while
        // no permit is free: a cancellation behind it must reach the request it frees.
        let mut backlog: VecDeque<(bytes::Bytes, post::Head)> = VecDeque::new();
        let end = loop {
            while posts.try_join_next().is_some() {}
            let room = backlog.len() < super::QUEUE_CAPACITY;
            tokio::select! {
                biased;
                _ = self.shutdown.cancelled() => break SessionEnd::Shutdown,
                Some(sig) = signal_rx.recv() => {
                    if let Some(end) = on_signal(sig, &mut signal_rx, &mut probe, &ctx, &signals) {
                        break end;
                    }
                }
                p = permits.clone().acquire_owned(), if !backlog.is_empty() => {
                    let (bytes, head) = backlog.pop_front().expect("not empty");
                    let permit = p.expect("the semaphore is never closed");
                    post(bytes, head, permit, &mut posts, &mut requests);
                }
                cmd = rx.recv(), if room => match cmd {
                    Some(cmd) => {
                        let bytes = cmd.into_bytes();
                        let mut head = post::Head::of(&bytes);
                        cancelled(&mut head, &mut requests, &mut backlog);
                        backlog.push_back((bytes, head));
                    }
                    // The hub dropped its handle: it is gone.
                    None => break SessionEnd::Shutdown,
                },
            }
        };
        if let SessionEnd::Shutdown = end {
            // Deliver what the hub queued while shutting down (the last unsubscribes),
            // and let in-flight POSTs finish, before the session is deleted.
            let flush = async {
                while let Ok(cmd) = rx.try_recv() {
                    let bytes = cmd.into_bytes();
                    let mut head = post::Head::of(&bytes);
                    cancelled(&mut head, &mut requests, &mut backlog);
                    backlog.push_back((bytes, head));
                }
                while let Some((bytes, head)) = backlog.pop_front() {
                    let permit = permits
                        .clone()
                        .acquire_owned()
                        .await
                        .expect("the semaphore is never closed");
                    post(bytes, head, permit, &mut posts, &mut requests);
                }
                while posts.join_next().await.is_some() {}
            };
            if tokio::time::timeout(STOP_GRACE, flush).await.is_err() {
                tracing::debug!(upstream = %endpoint.name, "shutdown flush cut short");
            }
            self.delete(&ctx).await;
        }
        end
    }

    /// What the server's `initialize` face offers, when it has one (a 2026-07-28 server
    /// may answer the handshake too): a throw-away handshake, deleted at once.
    async fn legacy_face(&self, endpoint: &Endpoint, wait: Duration) -> Option<InitInfo> {
        let params = super::initialize_params(&self.config);
        let shake = tokio::time::timeout(wait, handshake::handshake(endpoint, &params));
        let (ctx, info) = tokio::select! {
            r = shake => match r {
                Ok(Ok(done)) => done,
                Ok(Err(why)) => {
                    tracing::debug!(upstream = %endpoint.name, %why, "no initialize face");
                    return None;
                }
                Err(_) => return None,
            },
            _ = self.shutdown.cancelled() => return None,
        };
        self.delete(&ctx).await;
        Some(info)
    }

    /// Ends the session on the server (405: the server does not allow it; fine).
    async fn delete(&self, ctx: &SessionCtx) {
        if ctx.session_id.is_none() {
            return;
        }
        let name = &ctx.endpoint.name;
        match tokio::time::timeout(STOP_GRACE, ctx.endpoint.client.send(ctx.delete())).await {
            Ok(Ok(resp)) => {
                tracing::debug!(upstream = %name, status = %resp.status(), "upstream session deleted")
            }
            Ok(Err(e)) => tracing::debug!(upstream = %name, error = %e, "DELETE failed"),
            Err(_) => tracing::debug!(upstream = %name, "DELETE timed out"),
        }
    }
}

/// The sessions of one server at one endpoint, for the restart loop.
struct Sessions<'a> {
    up: &'a HttpUpstream,
    endpoint: Endpoint,
}

impl Transport for Sessions<'_> {
    async fn session(&self, rx: &mut mpsc::Receiver<UpstreamCmd>) -> SessionEnd {
        let Some(auth) = &self.up.auth else {
            return self.up.session(&self.endpoint, rx).await;
        };
        self.authorized_session(auth, rx).await
    }
}

impl Sessions<'_> {
    /// A session of an upstream mcpmux logs in to: first a usable token (refreshed,
    /// or from a login while the hub shows "needs login"); the session ends when a
    /// response challenges the token (the next one deals with it), and the token is
    /// refreshed before it expires.
    async fn authorized_session(
        &self,
        auth: &Arc<UpstreamAuth>,
        rx: &mut mpsc::Receiver<UpstreamCmd>,
    ) -> SessionEnd {
        let up = self.up;
        loop {
            let prepared = tokio::select! {
                p = auth.prepare() => p,
                _ = up.shutdown.cancelled() => return SessionEnd::Shutdown,
            };
            match prepared {
                Prepared::Ready => break,
                Prepared::Failed(why) => return SessionEnd::Died(why),
                Prepared::NeedsLogin(reason) => {
                    tracing::warn!(upstream = %up.config.name, %reason, "upstream needs a login");
                    if up
                        .hub
                        .send(up.id, UpstreamEvent::NeedsLogin { reason })
                        .await
                        .is_err()
                    {
                        return SessionEnd::Shutdown;
                    }
                    tokio::select! {
                        _ = auth.login_or_wait() => {}
                        _ = up.shutdown.cancelled() => return SessionEnd::Shutdown,
                    }
                    // Whatever the hub queued meanwhile was for no session.
                    while rx.try_recv().is_ok() {}
                }
            }
        }
        let mut challenges = auth.challenges();
        challenges.mark_unchanged();
        let run = up.session(&self.endpoint, rx);
        tokio::pin!(run);
        // A refresh runs beside the session, which keeps serving (a slow authorization
        // server must not hold its requests up); the next is planned once it is done.
        // It is a task of its own: a session that ends meanwhile does not cut it off.
        let mut refreshing: Option<tokio::task::JoinHandle<bool>> = None;
        loop {
            let refresh = refreshing
                .is_none()
                .then(|| auth.refresh_in())
                .flatten()
                .map(|d| d.max(crate::oauth::upstream::MIN_REFRESH_GAP));
            tokio::select! {
                end = &mut run => return end,
                _ = challenges.changed() => {
                    return SessionEnd::Expired {
                        reason: "the server asks for authorization".into(),
                        orphans: Vec::new(),
                    };
                }
                _ = tokio::time::sleep(refresh.unwrap_or_default()), if refresh.is_some() => {
                    refreshing = Some(auth.refresh_detached());
                }
                _ = async { refreshing.as_mut().expect("guarded").await }, if refreshing.is_some() => {
                    refreshing = None;
                }
            }
        }
    }
}

/// What a signal from the session's tasks means: an expiry ends the session (with
/// every orphan already reported); a suspicion starts a probe unless one runs.
fn on_signal(
    sig: Signal,
    more: &mut mpsc::Receiver<Signal>,
    probe: &mut Option<AbortOnDropHandle<()>>,
    ctx: &Arc<SessionCtx>,
    signals: &mpsc::Sender<Signal>,
) -> Option<SessionEnd> {
    let Signal::Expired { reason, orphan } = sig else {
        if probe.as_ref().is_none_or(|p| p.is_finished()) {
            *probe = Some(AbortOnDropHandle::new(tokio::spawn(probe_session(
                ctx.clone(),
                signals.clone(),
            ))));
        }
        return None;
    };
    let mut orphans: Vec<Message> = orphan.into_iter().collect();
    while let Ok(sig) = more.try_recv() {
        if let Signal::Expired { orphan, .. } = sig {
            orphans.extend(orphan);
        }
    }
    Some(SessionEnd::Expired { reason, orphans })
}

/// Asks the server whether the session still exists with a `ping` of its own; a 404
/// or another 400 means it does not. Any other answer (even a failure to connect)
/// leaves the session alone: only the request that got the 400 failed.
async fn probe_session(ctx: Arc<SessionCtx>, signals: mpsc::Sender<Signal>) {
    let ping = Message::request(
        &crate::protocol::RawId::parse("\"mcpmux-probe\"").expect("valid id"),
        crate::protocol::methods::PING,
        None,
    );
    let Ok(resp) = ctx.endpoint.client.send(ctx.post(ping.to_bytes())).await else {
        return;
    };
    let status = resp.status();
    if ctx.is_expired(status) || ctx.is_suspect(status) {
        tracing::info!(upstream = %ctx.endpoint.name, %status, "upstream session expired (its ping probe was refused)");
        let reason = format!("session expired (HTTP {} to a ping)", status.as_u16());
        let _ = signals
            .send(Signal::Expired {
                reason,
                orphan: None,
            })
            .await;
    }
}
