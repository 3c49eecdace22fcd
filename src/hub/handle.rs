//! The hub's inbox and the handle every other task uses to reach it.
//!
//! Client sessions and upstream actors send [`HubEvent`]s; the hub answers through
//! outboxes ([`crate::downstream::outbox`]) and upstream command channels, never
//! through this channel. Sending here may wait (backpressure from the hub to a client
//! reader or an upstream reader is fine); the hub itself never waits on anyone.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use tokio::sync::{mpsc, oneshot};

use crate::downstream::outbox::Outbox;
use crate::protocol::Message;
use crate::state::ids::{ClientId, UpstreamId};
use crate::upstream::UpstreamEvent;

/// Everything the hub reacts to.
#[derive(Debug)]
pub enum HubEvent {
    /// A new client session asks to be admitted (limits are checked by the hub).
    ClientOpened {
        client: ClientId,
        outbox: Arc<Outbox>,
        reply: oneshot::Sender<Result<(), AdmitError>>,
    },
    /// One well-formed JSON-RPC message from a client (batches are split before).
    ClientMessage { client: ClientId, msg: Message },
    /// The client session ended (EOF, DELETE, expiry, write error).
    ClientClosed {
        client: ClientId,
        reason: &'static str,
    },
    /// Something happened on an upstream.
    Upstream {
        upstream: UpstreamId,
        event: UpstreamEvent,
    },
    /// Introspection for tests, `check`-style status and benchmarks.
    Stats(oneshot::Sender<HubStats>),
    /// Shutting down: refuse new clients and requests, and answer `done` (with the
    /// number of requests cut) once every request in flight is answered, or at
    /// `until`, when those still in flight fail.
    Drain {
        until: tokio::time::Instant,
        done: oneshot::Sender<usize>,
    },
}

/// Why a client was not admitted.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AdmitError {
    #[error("too many clients (limits.max_clients = {0})")]
    TooManyClients(usize),
    #[error("mcpmux is shutting down")]
    ShuttingDown,
}

/// A snapshot of the hub's tables (sizes only).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct HubStats {
    pub clients: usize,
    /// Keys in the subscription registry (any state).
    pub subscription_keys: usize,
    /// (client, key) pairs held.
    pub client_subscriptions: usize,
    /// Client requests awaiting an upstream answer.
    pub pending_requests: usize,
    /// Largest outbox length seen on any client so far.
    pub peak_queue: usize,
    /// Notifications coalesced into a pending one for the same key, over every client
    /// since start (deliveries that became fewer under the slow-client policy; never a
    /// loss of the last update for a URI).
    pub coalesced: u64,
    /// Upstream requests sent, by method, since start (for tests and benchmarks).
    pub upstream_sent: Vec<(String, u64)>,
    /// Read-cache counters (hits, single-flight joins, upstream fetches, ...).
    pub cache: crate::state::cache::CacheCounters,
    /// Entries in the read cache.
    pub cache_entries: usize,
}

/// Cheap, cloneable handle to the hub.
#[derive(Debug, Clone)]
pub struct HubHandle {
    tx: mpsc::Sender<HubEvent>,
    next_client: Arc<AtomicU64>,
}

/// The hub has stopped; the caller should wind down.
#[derive(Debug, Clone, Copy, thiserror::Error)]
#[error("the hub has stopped")]
pub struct HubGone;

impl HubHandle {
    pub(crate) fn new(tx: mpsc::Sender<HubEvent>) -> Self {
        HubHandle {
            tx,
            next_client: Arc::new(AtomicU64::new(1)),
        }
    }

    /// Allocates a client id and asks the hub to admit the client.
    pub async fn open_client(&self, outbox: Arc<Outbox>) -> Result<ClientId, AdmitError> {
        let client = ClientId(self.next_client.fetch_add(1, Ordering::Relaxed));
        let (reply, rx) = oneshot::channel();
        self.tx
            .send(HubEvent::ClientOpened {
                client,
                outbox,
                reply,
            })
            .await
            .map_err(|_| AdmitError::ShuttingDown)?;
        rx.await.map_err(|_| AdmitError::ShuttingDown)??;
        Ok(client)
    }

    /// Hands one client message to the hub.
    pub async fn client_message(&self, client: ClientId, msg: Message) -> Result<(), HubGone> {
        self.tx
            .send(HubEvent::ClientMessage { client, msg })
            .await
            .map_err(|_| HubGone)
    }

    /// Tells the hub a client is gone; it releases everything the client held.
    pub async fn client_closed(&self, client: ClientId, reason: &'static str) {
        let _ = self
            .tx
            .send(HubEvent::ClientClosed { client, reason })
            .await;
    }

    /// Best-effort variant for `Drop` paths.
    pub fn client_closed_now(&self, client: ClientId, reason: &'static str) {
        if self
            .tx
            .try_send(HubEvent::ClientClosed { client, reason })
            .is_err()
        {
            let tx = self.tx.clone();
            tokio::spawn(async move {
                let _ = tx.send(HubEvent::ClientClosed { client, reason }).await;
            });
        }
    }

    pub(crate) async fn upstream_event(
        &self,
        upstream: UpstreamId,
        event: UpstreamEvent,
    ) -> Result<(), HubGone> {
        self.tx
            .send(HubEvent::Upstream { upstream, event })
            .await
            .map_err(|_| HubGone)
    }

    /// Lets the requests in flight finish (docs/architecture.md, "Shutdown"): new
    /// clients and requests are refused from now on; returns once none is in flight
    /// or `grace` has passed (those still in flight then get an error), with the
    /// number cut.
    pub async fn drain(&self, grace: std::time::Duration) -> Result<usize, HubGone> {
        let (done, rx) = oneshot::channel();
        let until = tokio::time::Instant::now() + grace;
        self.tx
            .send(HubEvent::Drain { until, done })
            .await
            .map_err(|_| HubGone)?;
        rx.await.map_err(|_| HubGone)
    }

    /// Sizes of the hub's tables.
    pub async fn stats(&self) -> Result<HubStats, HubGone> {
        let (tx, rx) = oneshot::channel();
        self.tx
            .send(HubEvent::Stats(tx))
            .await
            .map_err(|_| HubGone)?;
        rx.await.map_err(|_| HubGone)
    }
}
