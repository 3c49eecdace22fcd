//! The hub's three inboxes and the handle the rest of the program uses to reach it.
//!
//! Client sessions send [`ClientEvent`]s on their [`ClientLink`], upstream actors
//! send their events on their [`UpstreamLink`]: both channel types belong to the
//! senders, so neither downstream nor upstream code imports the hub. The hub answers
//! through outboxes ([`crate::downstream::outbox`]) and upstream command channels,
//! never through these channels. [`HubHandle`] bundles the two links with the control
//! channel (statistics, the shutdown drain) for the code that wires everything up.

use tokio::sync::{mpsc, oneshot};

pub use crate::downstream::link::{AdmitError, ClientEvent, ClientLink, HubGone};
use crate::state::ids::UpstreamId;
use crate::upstream::{UpstreamEvent, UpstreamLink};

/// Requests about the hub itself.
#[derive(Debug)]
pub enum Control {
    /// Introspection for tests, status and benchmarks. Answered after every client,
    /// upstream and fleet event queued before it was handled.
    Stats(oneshot::Sender<HubStats>),
    /// The operator's view (`/metrics`, `/status`), answered like `Stats`.
    Snapshot(oneshot::Sender<super::metrics::Snapshot>),
    /// Apply a config reload; answered once applied.
    Reload(Box<super::reload::ReloadPlan>, oneshot::Sender<()>),
    /// Shutting down: refuse new clients and requests, and answer `done` (with the
    /// number of requests cut) once every request in flight is answered, or at
    /// `until`, when those still in flight fail.
    Drain {
        until: tokio::time::Instant,
        done: oneshot::Sender<usize>,
    },
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
    /// Upstream requests sent, by method, since start (for tests and benchmarks). A
    /// method outside the ones mcpmux knows counts as `other`.
    pub upstream_sent: Vec<(String, u64)>,
    /// Read-cache counters (hits, single-flight joins, upstream fetches, ...).
    pub cache: crate::state::cache::CacheCounters,
    /// Entries in the read cache.
    pub cache_entries: usize,
}

/// The receiving ends, owned by the hub task.
pub(crate) struct Inboxes {
    pub clients: mpsc::Receiver<ClientEvent>,
    pub upstreams: mpsc::Receiver<(UpstreamId, UpstreamEvent)>,
    pub control: mpsc::Receiver<Control>,
    pub fleet: mpsc::Receiver<crate::fleet::FleetEvent>,
}

/// Cheap, cloneable handle to the hub: its client and upstream links, and control.
#[derive(Debug, Clone)]
pub struct HubHandle {
    clients: ClientLink,
    upstreams: UpstreamLink,
    control: mpsc::Sender<Control>,
    fleet: mpsc::Sender<crate::fleet::FleetEvent>,
}

impl HubHandle {
    /// New channels of `capacity` each: the handle and the hub's receiving ends.
    pub(crate) fn channels(capacity: usize) -> (HubHandle, Inboxes) {
        let (ctx, clients) = mpsc::channel(capacity);
        let (utx, upstreams) = mpsc::channel(capacity);
        let (control_tx, control) = mpsc::channel(16);
        let (ftx, fleet) = mpsc::channel(capacity);
        let handle = HubHandle {
            clients: ClientLink::new(ctx),
            upstreams: UpstreamLink::new(utx),
            control: control_tx,
            fleet: ftx,
        };
        (
            handle,
            Inboxes {
                clients,
                upstreams,
                control,
                fleet,
            },
        )
    }

    /// Where the fleet actor reports.
    pub(crate) fn fleet_events(&self) -> mpsc::Sender<crate::fleet::FleetEvent> {
        self.fleet.clone()
    }

    /// The link client sessions use.
    pub fn clients(&self) -> &ClientLink {
        &self.clients
    }

    /// The link upstream actors use.
    pub fn upstreams(&self) -> &UpstreamLink {
        &self.upstreams
    }

    /// Allocates a client id and asks the hub to admit the client.
    pub async fn open_client(
        &self,
        outbox: std::sync::Arc<crate::downstream::outbox::Outbox>,
    ) -> Result<crate::state::ids::ClientId, AdmitError> {
        self.clients.open_client(outbox).await
    }

    /// Hands one client message to the hub.
    pub async fn client_message(
        &self,
        client: crate::state::ids::ClientId,
        msg: crate::protocol::Message,
    ) -> Result<(), HubGone> {
        self.clients.client_message(client, msg).await
    }

    /// Reports an upstream event (what upstream actors do through their link).
    pub async fn upstream_event(
        &self,
        upstream: UpstreamId,
        event: UpstreamEvent,
    ) -> Result<(), HubGone> {
        self.upstreams
            .send(upstream, event)
            .await
            .map_err(|_| HubGone)
    }

    /// Sizes of the hub's tables, after every event queued before this call.
    pub async fn stats(&self) -> Result<HubStats, HubGone> {
        let (tx, rx) = oneshot::channel();
        self.control
            .send(Control::Stats(tx))
            .await
            .map_err(|_| HubGone)?;
        rx.await.map_err(|_| HubGone)
    }

    /// Applies a config reload (docs/architecture.md, "Hot reload").
    ///
    /// # Errors
    /// The hub has stopped.
    pub async fn reload(&self, plan: super::reload::ReloadPlan) -> Result<(), HubGone> {
        let (tx, rx) = oneshot::channel();
        self.control
            .send(Control::Reload(Box::new(plan), tx))
            .await
            .map_err(|_| HubGone)?;
        rx.await.map_err(|_| HubGone)
    }

    /// The operator's view of the hub at this moment.
    ///
    /// # Errors
    /// The hub has stopped.
    /// The operator's view's source of snapshots: this hub's.
    pub fn snapshots(&self) -> crate::observe::SnapshotSource {
        let hub = self.clone();
        crate::observe::SnapshotSource::new(move || {
            let hub = hub.clone();
            async move { hub.snapshot().await.ok() }
        })
    }

    pub async fn snapshot(&self) -> Result<super::metrics::Snapshot, HubGone> {
        let (tx, rx) = oneshot::channel();
        self.control
            .send(Control::Snapshot(tx))
            .await
            .map_err(|_| HubGone)?;
        rx.await.map_err(|_| HubGone)
    }

    /// Lets the requests in flight finish (docs/architecture.md, "Shutdown"): new
    /// clients and requests are refused from now on; returns once none is in flight
    /// or `grace` has passed (those still in flight then get an error), with the
    /// number cut.
    pub async fn drain(&self, grace: std::time::Duration) -> Result<usize, HubGone> {
        let (done, rx) = oneshot::channel();
        let until = tokio::time::Instant::now() + grace;
        self.control
            .send(Control::Drain { until, done })
            .await
            .map_err(|_| HubGone)?;
        rx.await.map_err(|_| HubGone)
    }
}
