//! The accept loop of the Streamable HTTP endpoint: TCP connections served by hyper's
//! HTTP/1 connection builder, each running the axum router as its service.
//!
//! Owns: accepting connections, the bound on open connections
//! (`limits.max_connections`), the request-header read timeout
//! (`limits.header_read_timeout_ms`), the HTTP/1 settings ([`http1_builder`]), riding
//! out accept errors, running a stream handed off from hyper ([`super::handoff`])
//! in a task of its own that keeps the connection's slot, and the graceful drain on
//! shutdown.
//! Never: looks at a request (the router does), refuses or resets a connection because
//! of the bound, stops serving because accept failed, or cuts a response short on
//! shutdown.
//!
//! Decisions:
//! - **At the bound, wait for a slot, then accept** (rather than accept-and-close).
//!   Connections that arrive meanwhile wait in the kernel's listen backlog, cost mcpmux
//!   no file descriptor, and are accepted in arrival order as slots free up. A real
//!   client behind a crowd of stalled connections is served late (about one header
//!   timeout per bound's worth of connections ahead of it) but is never refused;
//!   accept-and-close would refuse it for as long as an attacker keeps the slots full,
//!   and MCP clients generally do not retry a refused connection. Stalled connections
//!   cannot keep their slots: the header read timeout frees them.
//! - **The bound in force** is the smaller of `limits.max_connections` and
//!   [`crate::fdlimit::connection_budget`] of the open-file limit, so the bound is hit
//!   before the process runs out of descriptors (which would also starve upstream
//!   restarts and HTTP upstream connections).
//! - **One warning per episode**: reaching the bound logs one warning; the episode ends
//!   when a connection finds a free slot at once, with an info summary (how long, how
//!   many connections waited). A new episode within a minute of the last warning is
//!   logged at debug level only (see [`super::episode`]).
//! - **Accept errors**: connection-level ones (aborted, reset or refused before accept)
//!   are skipped at once. Any other (out of descriptors: EMFILE, ENFILE; ENOBUFS,
//!   ENOMEM) is logged once per episode and retried after a backoff of 10 ms doubling up
//!   to 1 s, reset by the next successful accept: never a busy loop, never the end of
//!   the server.
//! - **Header read timeout**: hyper's HTTP/1 `header_read_timeout`, on a timer that
//!   keeps every connection's deadline in one table ([`super::header_timer`]). It runs
//!   from the moment hyper waits for a request head until the head is complete, so it
//!   also closes a keep-alive connection idle between requests for that long; it never
//!   runs while a body is read or a response (such as an SSE stream) is written.
//! - **Shutdown**: stop accepting and close the listener, then hyper's graceful
//!   shutdown of every connection: an idle one closes at once, one with a request in
//!   flight finishes its response first (SSE streams end when their sessions end on the
//!   same token), one still sending its header has until the header timeout; a
//!   handed-off stream ends when its source does (a listen's on the same token) and writes
//!   its chunked end. [`serve`] returns when every connection and handed-off stream is
//!   closed, or after [`CLOSE_GRACE`], leaving those still open (a stalled request
//!   body) to the process's exit.
//! - **Small SSE writes** must not wait for Nagle: `TCP_NODELAY` on every connection.

use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::Router;
use hyper::server::conn::http1;
use hyper_util::rt::TokioIo;
use hyper_util::server::graceful::GracefulShutdown;
use hyper_util::service::TowerToHyperService;
use tokio::net::TcpListener;
use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tracing::{debug, error, info, warn};

use super::episode::Episodes;
use super::handoff::{HandoffIo, HandoffService, HandoffState};
use super::header_timer::HeaderTimer;

/// Vectored writes on HTTP/1 connections: `None` keeps hyper's default (it detects
/// whether the socket supports them). A one-line change for measuring the alternative.
const WRITEV: Option<bool> = None;

/// First delay before retrying a failed accept; doubled per failure up to
/// [`ACCEPT_BACKOFF_MAX`].
const ACCEPT_BACKOFF_MIN: Duration = Duration::from_millis(10);
const ACCEPT_BACKOFF_MAX: Duration = Duration::from_secs(1);
/// At most one warning per condition this often.
const WARN_QUIET: Duration = Duration::from_secs(60);

/// How the accept loop treats connections.
#[derive(Debug, Clone, Copy)]
pub(super) struct ConnLimits {
    /// Open connections at most (already clamped to the descriptor budget).
    pub max_connections: usize,
    /// A connection's time to send a complete request head.
    pub header_read_timeout: Duration,
}

/// The HTTP/1 settings of every connection.
fn http1_builder(limits: &ConnLimits, timer: HeaderTimer) -> http1::Builder {
    let mut builder = http1::Builder::new();
    builder
        .timer(timer)
        .header_read_timeout(limits.header_read_timeout);
    if let Some(writev) = WRITEV {
        builder.writev(writev);
    }
    builder
}

/// Serves `router` on connections accepted from `listener` until `shutdown` is
/// cancelled, then drains them (module docs) and returns.
pub(super) async fn serve(
    listener: TcpListener,
    router: Router,
    limits: ConnLimits,
    shutdown: CancellationToken,
) {
    // The head deadlines' watcher runs until the drain below is over.
    let (timer, _timer_watcher) = HeaderTimer::start();
    let builder = http1_builder(&limits, timer);
    let slots = Arc::new(Semaphore::new(limits.max_connections));
    let graceful = GracefulShutdown::new();
    let tasks = TaskTracker::new();
    let mut at_bound = Episodes::new(WARN_QUIET);
    let mut failing = Episodes::new(WARN_QUIET);
    let mut backoff = ACCEPT_BACKOFF_MIN;
    loop {
        let permit = match slots.clone().try_acquire_owned() {
            Ok(permit) => {
                if let Some(ended) = at_bound.end(Instant::now()) {
                    let (lasted, waited) = (ended.lasted, ended.occurrences);
                    if ended.warned {
                        info!(?lasted, waited, "below the connection limit again");
                    } else {
                        debug!(?lasted, waited, "below the connection limit again");
                    }
                }
                permit
            }
            Err(_) => {
                let max_connections = limits.max_connections;
                let starts = !at_bound.ongoing();
                if at_bound.occurred(Instant::now()) {
                    warn!(
                        max_connections,
                        "connection limit reached: new connections wait in the listen backlog \
                         until one closes (limits.max_connections, limits.header_read_timeout_ms)"
                    );
                } else if starts {
                    debug!(max_connections, "connection limit reached");
                }
                tokio::select! {
                    permit = slots.clone().acquire_owned() => match permit {
                        Ok(permit) => permit,
                        Err(_) => break, // never closed; stop rather than spin if it were
                    },
                    () = shutdown.cancelled() => break,
                }
            }
        };
        let accepted = tokio::select! {
            accepted = listener.accept() => accepted,
            () = shutdown.cancelled() => break,
        };
        let (tcp, peer) = match accepted {
            Ok(accepted) => accepted,
            Err(e) if is_connection_error(&e) => {
                debug!(error = %e, "a connection failed before it was accepted");
                continue;
            }
            Err(e) => {
                let starts = !failing.ongoing();
                if failing.occurred(Instant::now()) {
                    error!(error = %e, "cannot accept connections; retrying with backoff");
                } else if starts {
                    debug!(error = %e, "cannot accept connections; retrying with backoff");
                }
                tokio::select! {
                    () = tokio::time::sleep(backoff) => {}
                    () = shutdown.cancelled() => break,
                }
                backoff = (backoff * 2).min(ACCEPT_BACKOFF_MAX);
                continue;
            }
        };
        backoff = ACCEPT_BACKOFF_MIN;
        if let Some(ended) = failing.end(Instant::now()) {
            let (lasted, failures) = (ended.lasted, ended.occurrences);
            if ended.warned {
                info!(?lasted, failures, "accepting connections again");
            } else {
                debug!(?lasted, failures, "accepting connections again");
            }
        }
        let _ = tcp.set_nodelay(true);
        let handoff = Arc::new(HandoffState::default());
        let io = TokioIo::new(HandoffIo::new(tcp, handoff.clone()));
        let service =
            HandoffService::new(TowerToHyperService::new(router.clone()), handoff.clone());
        let conn = graceful.watch(builder.serve_connection(io, service));
        let streams = tasks.clone();
        tasks.spawn(async move {
            if let Err(e) = conn.await {
                debug!(%peer, error = %e, "connection ended with an error");
            }
            // A handed-off stream goes on in a task of its own, with the connection's
            // slot; this one (and hyper's connection with it) ends here.
            if let Some(stream) = handoff.take() {
                streams.spawn(async move {
                    stream.write().await;
                    drop(permit);
                });
            }
        });
    }
    drop(listener);
    tasks.close();
    debug!(open = tasks.len(), "draining connections");
    let drained = async {
        graceful.shutdown().await;
        tasks.wait().await;
    };
    if tokio::time::timeout(CLOSE_GRACE, drained).await.is_err() {
        // A client stalled in a request body, or a stream that did not end: shutdown
        // does not wait on it (the process's exit closes it).
        tracing::warn!(grace = ?CLOSE_GRACE, "connections still open after the grace; not waiting for them");
    }
}

/// How long the graceful drain of connections may take once `shutdown` is cancelled.
/// The hub's drain (`limits.drain_ms`) came first, so the answers are written; what
/// is left is connections finishing their writes, or not (a stalled request body).
const CLOSE_GRACE: Duration = Duration::from_secs(5);

/// Errors of one pending connection, not of the listener: skip it and go on.
fn is_connection_error(e: &std::io::Error) -> bool {
    matches!(
        e.kind(),
        std::io::ErrorKind::ConnectionRefused
            | std::io::ErrorKind::ConnectionAborted
            | std::io::ErrorKind::ConnectionReset
    )
}
