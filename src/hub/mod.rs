//! The hub: the single owner of the proxy's shared state (docs/architecture.md,
//! "Shape").
//!
//! One task owns the client table, the upstream table and a few parts, each a type with
//! its own state and methods ([`Hub`]'s fields), and turns every client and upstream
//! event into effects: pushes to client outboxes and `try_send`s to upstream actors. It
//! never awaits a client or an upstream, so one slow party can never stall another.
//! Decisions live in [`crate::state`] and in the parts; the `impl Hub` glue of each file
//! only wires them to channels and timers.
//!
//! Files:
//! - the parts: `holders.rs` (`Holders`: the subscription registry, who gets an update
//!   and in which form), `listens.rs` (`Listens`: the open listen streams), `read.rs`
//!   (`Reads`: the read cache and its rules), `lists.rs` (`Assemblies`: merged lists;
//!   `LogLevels`), `deadlines.rs` (`Deadlines`: every timer), `admission.rs`
//!   (`Admission`: waiting handshakes, the shutdown drain), `mrtr.rs` (`Mrtr`: input
//!   asked of stateless clients by answer-and-retry), `association.rs`
//!   (`Elicitations`), `fleet.rs` (`FleetPart`), `metrics.rs` (`Counters`),
//!   `traces.rs` (`Traces`), `effects.rs` (`Turn`); each file also holds the glue of
//!   its part;
//! - from clients: `client.rs` (admission, requests, notifications), `routing.rs`
//!   (which upstream a request goes to), `lists.rs` (merged lists, the catalog, log
//!   levels), `read.rs` (reads through the cache), `stateless.rs` (clients that
//!   are one request, 2026-07-28: routing, `server/discover`, the cache hints of an
//!   answer), `listens.rs` (listen requests), `mrtr.rs`;
//! - from upstreams: `from_upstream.rs` (dispatch, ready, down), `upstream_responses.rs`,
//!   `upstream_notifications.rs` (updates, `list_changed`, progress), `holders.rs` (the
//!   fan-out), `association.rs` (what belongs to one client's request), `request_ctx.rs`
//!   (what a 2026-07-28 upstream is told of the client a request is for);
//! - around: `effects.rs` (sending, the registry's effects), `control.rs` (the control
//!   channel, what a timer coming due means, the drain), `fleet.rs` (roles and events of
//!   the fleet), `metrics.rs` (counters and the operator's snapshot), `reload.rs` (a new
//!   config applied), `views.rs` (profiles: which upstreams each client sees, who hears
//!   a view changed), `traces.rs` (spans, when tracing is on), `handle.rs` (the
//!   channels in), `tests/` (the actor tests, by subject).

mod admission;
mod association;
mod client;
mod control;
mod deadlines;
mod effects;
mod fleet;
mod from_upstream;
pub mod handle;
mod holders;
mod listens;
mod lists;
pub mod metrics;
mod mrtr;
mod read;
pub mod reload;
mod request_ctx;
mod routing;
mod stateless;
mod traces;
mod upstream_notifications;
mod upstream_responses;
mod views;

use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use deadlines::Timer;
use handle::Inboxes;
pub use handle::{AdmitError, ClientEvent, ClientLink, Control, HubGone, HubHandle, HubStats};
use holders::{SubError, Waiter};

use crate::config::{ClientCapabilityPolicy, Config, UnrelatedPolicy};
use crate::downstream::link::ClientKind;
use crate::downstream::outbox::{CloseReason, OutKind, Outbound, Outbox};
use crate::protocol::{Message, RawId};
use crate::state::catalog::{Catalog, UpstreamNaming};
use crate::state::ids::{ClientId, IdMap, UpstreamId, ViewId};
use crate::state::pending::PendingTable;
use crate::upstream::{InitInfo, UpstreamHandle, UpstreamLink};

/// Capacity of each of the hub's inboxes (clients, upstreams). Senders wait when one
/// is full (backpressure on client readers and upstream readers), the hub never does.
pub const INBOX_CAPACITY: usize = 4096;

/// The work one turn of the hub does before it wakes the writers and looks at its other
/// inboxes, in pushes: a message queued to one client is one, and a run of updates held
/// for one audience costs one per holder (each takes the run with one push, however
/// long) plus, per update, one per copy it makes (the plain one, a tagged one per
/// listen id among the holders). So a turn of a burst holds about 4,000 updates
/// whatever the number of holders (a turn takes only what is already queued). Large
/// enough that a burst reaches each client in few writes, small enough that clients'
/// requests do not wait long behind a burst (BENCHMARKS.md, "Turn budget"; earlier
/// experiments are in its git history).
const TURN_PUSHES: usize = 4096;

/// How long after a refused re-subscribe (an upstream restart's) it is asked again.
const RESUBSCRIBE_RETRY: std::time::Duration = std::time::Duration::from_secs(5);

/// The hub's settings, taken from the config.
#[derive(Debug, Clone)]
pub struct HubSettings {
    pub client_capability: ClientCapabilityPolicy,
    pub linger: Duration,
    pub max_clients: usize,
    pub max_subscriptions_per_client: usize,
    pub max_pending_per_client: usize,
    pub request_timeout: Duration,
    /// Progress restarts `request_timeout`, never past this long after the send.
    pub request_max_total: Duration,
    pub cache_entries: usize,
    pub cache_bytes: usize,
    /// The profiles (views besides the default one), with the ids the wiring gave them.
    pub profiles: Vec<HubProfile>,
}

/// One `[profiles.NAME]` as the hub applies it (docs/architecture.md, "Profiles").
#[derive(Debug, Clone, PartialEq)]
pub struct HubProfile {
    pub id: ViewId,
    pub name: String,
    /// Server names; the hub maps them to its upstreams.
    pub servers: Vec<String>,
    pub tools: crate::state::views::NameFilter,
}

impl HubSettings {
    pub fn from_config(c: &Config) -> Self {
        HubSettings {
            client_capability: c.subscriptions.client_capability,
            linger: Duration::from_millis(c.subscriptions.linger_ms),
            max_clients: c.limits.max_clients,
            max_subscriptions_per_client: c.limits.max_subscriptions_per_client,
            max_pending_per_client: c.limits.max_pending_per_client,
            request_timeout: Duration::from_millis(c.limits.request_timeout_ms),
            request_max_total: Duration::from_millis(
                c.limits
                    .request_max_total_ms
                    .max(c.limits.request_timeout_ms),
            ),
            cache_entries: c.cache.max_entries,
            cache_bytes: c.cache.max_bytes,
            profiles: Vec::new(),
        }
    }
}

/// One upstream as the hub sees it.
#[derive(Debug)]
pub struct UpstreamSlot {
    pub name: String,
    pub handle: UpstreamHandle,
    pub force_subscribe: bool,
    /// Namespace for its tools, prompts and URIs (`servers.NAME.prefix`).
    pub prefix: Option<String>,
    /// URI prefixes routed to it (`servers.NAME.uri_prefixes`).
    pub uri_prefixes: Vec<String>,
    /// Where its messages that belong to no client request go
    /// (`servers.NAME.unrelated_messages`).
    pub unrelated: UnrelatedPolicy,
    /// `ttlMs`/`cacheScope` told stateless clients for its results (it gives none).
    pub ttl_ms: u64,
    pub cache_scope: crate::config::CacheScope,
    /// mcpmux declared `roots` to it (`servers.NAME.client_capabilities`), so a
    /// client's `notifications/roots/list_changed` is passed on.
    pub declares_roots: bool,
    /// The client capabilities mcpmux declares to it (`servers.NAME.client_capabilities`,
    /// as the `capabilities` object).
    pub declared_caps: serde_json::Value,
    /// Shared by the fleet (`[fleet]` configured and a Streamable HTTP upstream).
    pub shared: bool,
    /// What it shows of itself in every view (`servers.NAME.tools_allow`, renames, ...).
    pub view: Arc<crate::state::views::ServerView>,
    /// Capabilities from its last successful `initialize` (kept while it is down, so
    /// requests for it get "not available" rather than "unknown").
    pub(crate) last_caps: serde_json::Value,
    pub status: UpstreamStatus,
    /// Whether it has ever been ready (a later `Ready` is a restart).
    pub(crate) was_ready: bool,
    /// Whether its catalog was complete once: until then client `initialize` answers
    /// wait, so the first `tools/call` after the handshake can be routed by name.
    pub(crate) catalog_synced: bool,
}

#[derive(Debug, Clone)]
pub enum UpstreamStatus {
    /// `lazy = true`: not started until the first client initializes.
    Idle,
    /// First start in progress: client `initialize` answers wait for it.
    Starting,
    Ready(InitInfo),
    /// Dead; `retrying` tells whether the actor will try again.
    Down {
        reason: String,
        retrying: bool,
    },
    /// Waiting for an OAuth login (`reason` names `mcpmux login NAME`).
    NeedsLogin {
        reason: String,
    },
    /// Removed by a config reload: its id is never reused, its events are ignored.
    Removed,
}

struct ClientState {
    outbox: Arc<Outbox>,
    /// The view it sees (the default one, or its profile's).
    view: ViewId,
    /// Its `Mcp-Session-Id`, when it is a Streamable HTTP session (for traces).
    session: Option<Arc<str>>,
    /// `Some(request id)` when the outbox is a connection's, shared by several clients
    /// (a stateless stdio connection's requests): ending this client must not close it,
    /// and queues an `OutKind::Ended` naming the id instead.
    shared_outbox: Option<RawId>,
    /// Set once `initialize` was answered.
    init: Option<ClientInit>,
    /// Not held to the per-client limits (the fleet's reader: `ClientKind::FleetReader`).
    exempt: bool,
}

struct ClientInit {
    /// mcpmux declared `resources.subscribe` to this client.
    declared_subscribe: bool,
    /// The client's `capabilities` from `initialize` (for a stateless client, what its
    /// request declared in `_meta`).
    capabilities: serde_json::Value,
    /// Set for a 2026-07-28 client.
    stateless: Option<stateless::StatelessClient>,
    /// The protocol version `initialize` agreed on (none for a stateless client, whose
    /// every request names its own).
    version: Option<String>,
}

/// The hub's state: the clients and the upstreams, and one owned part per job, each a
/// type with its own state and methods. Fields are only touched by the hub task.
pub struct Hub {
    settings: HubSettings,
    clients: IdMap<ClientId, ClientState>,
    upstreams: Vec<UpstreamSlot>,
    /// Names, prefixes and the routing table of each view.
    catalog: Catalog,
    /// Requests in flight upstream, and server requests in flight to clients.
    pending: PendingTable,
    /// Who holds which URI (the subscription registry), and who gets an update.
    holders: holders::Holders,
    /// Reads through the cache: stored results and the reads in flight with their
    /// waiters.
    reads: read::Reads,
    /// The open listen streams (`subscriptions/listen`), by their client id.
    listens: listens::Listens,
    /// Client list requests being assembled from several upstreams.
    lists: lists::Assemblies,
    /// `logging/setLevel` per client, and the level last set upstream.
    log_levels: lists::LogLevels,
    /// URL-mode elicitations routed to a client, for their completion.
    elicitations: association::Elicitations,
    /// Every timer: request deadlines (dropped when answered, pushed back by
    /// progress), lingering releases, re-subscribes, the drain's deadline.
    deadlines: deadlines::Deadlines,
    /// Server requests held for stateless clients' retries (MRTR).
    mrtr: mrtr::Mrtr,
    /// The fleet actor, when `[fleet]` is configured, and this instance's role per
    /// shared key.
    fleet: fleet::FleetPart,
    /// The operator's counters (`/metrics`, `/status`).
    counters: metrics::Counters,
    /// Handshakes waiting for the upstreams' first start, and the shutdown drain (new
    /// clients and requests are refused once it started).
    admission: admission::Admission,
    /// What this turn queued to clients, and whose outbox refused: writers are woken
    /// once, at its end ([`Hub::wake_writers`]), the refusing clients disconnected
    /// ([`Hub::reap_doomed`]); its size bounds a burst ([`TURN_PUSHES`]).
    turn: effects::Turn,
    /// Fan-outs to one audience in a row, not queued yet (`holders.rs`,
    /// `Hub::queue_fan_out`).
    held_fan_out: Option<holders::FanOut>,
    /// The rest of a stdio server's batch of messages, handled over the next turns
    /// before anything else from the upstreams (`from_upstream.rs`).
    carry: Option<from_upstream::Carry>,
    /// Open spans, when tracing is on (docs/architecture.md, "Traces").
    traces: traces::Traces,
}

impl Hub {
    pub fn new(settings: HubSettings, upstreams: Vec<UpstreamSlot>) -> Self {
        let mut hub = Hub {
            holders: holders::Holders::new(settings.linger),
            reads: read::Reads::new(settings.cache_entries, settings.cache_bytes),
            listens: listens::Listens::default(),
            catalog: Catalog::new(
                upstreams
                    .iter()
                    .map(|u| UpstreamNaming {
                        prefix: u.prefix.clone(),
                        uri_prefixes: u.uri_prefixes.clone(),
                        view: u.view.clone(),
                    })
                    .collect(),
            ),
            lists: lists::Assemblies::default(),
            elicitations: association::Elicitations::default(),
            fleet: fleet::FleetPart::default(),
            counters: metrics::Counters {
                started_unix_ms: std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .map_or(0, |d| d.as_millis() as u64),
                ..Default::default()
            },
            log_levels: lists::LogLevels::default(),
            settings,
            clients: IdMap::default(),
            upstreams,
            pending: PendingTable::default(),
            deadlines: deadlines::Deadlines::new(),
            admission: admission::Admission::default(),
            turn: effects::Turn::default(),
            held_fan_out: None,
            carry: None,
            mrtr: mrtr::Mrtr::default(),
            traces: traces::Traces::new(crate::telemetry::enabled()),
        };
        hub.apply_views();
        hub
    }

    /// Runs until `shutdown` is cancelled or every client link is dropped.
    ///
    /// Client, upstream and fleet events arrive on their own channels, taken fairly. A
    /// control request is answered only after everything already queued on each was
    /// handled, so `stats` after a send observes that send (what the tests rely on).
    pub(crate) async fn run(mut self, mut inbox: Inboxes, shutdown: CancellationToken) {
        // One wait for shutdown for the whole loop: a fresh one each turn would join and
        // leave the token's waiter list (a lock each way) twice per request.
        let shutdown = shutdown.cancelled();
        tokio::pin!(shutdown);
        loop {
            tokio::select! {
                ev = inbox.clients.recv() => match ev {
                    Some(ev) => self.on_client_event(ev),
                    None => break,
                },
                Some((upstream, event)) = inbox.upstreams.recv(), if self.carry.is_none() => {
                    self.on_upstream_event(upstream, event);
                    self.take_burst(&mut inbox);
                }
                // A batch's rest. One unit of the task's budget per turn, as a turn
                // taken from the inbox costs: the hub yields to the writers when the
                // budget is spent, not after every turn (that split a burst to many
                // holders into many small writes).
                () = tokio::task::consume_budget(), if self.carry.is_some() => {
                    self.continue_carry(TURN_PUSHES);
                    self.take_burst(&mut inbox);
                }
                Some(ev) = inbox.fleet.recv() => self.on_fleet_event(ev),
                Some(ctl) = inbox.control.recv() => {
                    self.catch_up(&mut inbox);
                    self.queue_fan_out();
                    self.on_control(ctl);
                }
                due = self.deadlines.next(), if self.deadlines.armed() => self.on_due(due),
                () = &mut shutdown => break,
            }
            self.queue_fan_out();
            self.reap_doomed();
            self.check_drained();
            self.wake_writers();
        }
        self.shutdown();
        self.wake_writers();
    }

    /// A burst from the upstreams (an update storm): takes the upstream events queued
    /// behind the one just handled, until this turn's pushes reach [`TURN_PUSHES`], so
    /// each client's writer wakes once for the lot and writes it in one chunk
    /// (docs/architecture.md, "Fan-out"). Isolated events are untouched: nothing is
    /// queued behind them.
    fn take_burst(&mut self, inbox: &mut Inboxes) {
        while self.turn.pushes < TURN_PUSHES {
            if self.carry.is_some() {
                self.continue_carry(TURN_PUSHES);
                continue;
            }
            match inbox.upstreams.try_recv() {
                Ok((upstream, event)) => self.on_upstream_event(upstream, event),
                Err(_) => break,
            }
            self.reap_doomed();
        }
    }

    /// Handles every client, upstream and fleet event queued right now.
    fn catch_up(&mut self, inbox: &mut Inboxes) {
        for _ in 0..inbox.clients.len() {
            match inbox.clients.try_recv() {
                Ok(ev) => self.on_client_event(ev),
                Err(_) => break,
            }
            self.reap_doomed();
        }
        self.continue_carry(usize::MAX);
        for _ in 0..inbox.upstreams.len() {
            match inbox.upstreams.try_recv() {
                Ok((upstream, event)) => {
                    self.on_upstream_event(upstream, event);
                    self.continue_carry(usize::MAX);
                }
                Err(_) => break,
            }
            self.reap_doomed();
        }
        for _ in 0..inbox.fleet.len() {
            match inbox.fleet.try_recv() {
                Ok(ev) => self.on_fleet_event(ev),
                Err(_) => break,
            }
            self.reap_doomed();
        }
    }

    fn on_client_event(&mut self, ev: ClientEvent) {
        match ev {
            ClientEvent::Opened {
                client,
                outbox,
                kind,
                view,
                session,
                reply,
            } => {
                let r = if self.admission.draining() {
                    Err(AdmitError::ShuttingDown)
                } else if self.catalog.view(view).is_none() {
                    Err(AdmitError::NoSuchProfile)
                } else if self.clients.len() >= self.settings.max_clients {
                    Err(AdmitError::TooManyClients(self.settings.max_clients))
                } else {
                    let shared_outbox = match &kind {
                        ClientKind::Stateless { shared_outbox, .. } => shared_outbox.clone(),
                        _ => None,
                    };
                    let exempt = matches!(kind, ClientKind::FleetReader);
                    let init = match kind {
                        ClientKind::Session | ClientKind::FleetReader => None,
                        ClientKind::Stateless {
                            capabilities,
                            log_level,
                            param_headers,
                            ..
                        } => {
                            // A request without `logLevel` asked for no log messages.
                            let level = log_level
                                .as_deref()
                                .and_then(lists::level_index)
                                .unwrap_or(lists::LOG_OFF);
                            self.log_levels.set(client, level);
                            self.sync_log_level();
                            // A listen is an explicit request to subscribe: in this
                            // era it is the negotiation.
                            Some(ClientInit {
                                declared_subscribe: true,
                                capabilities,
                                stateless: Some(stateless::StatelessClient::new(param_headers)),
                                version: None,
                            })
                        }
                    };
                    self.clients.insert(
                        client,
                        ClientState {
                            outbox,
                            view,
                            session,
                            shared_outbox,
                            init,
                            exempt,
                        },
                    );
                    tracing::debug!(%client, "client opened");
                    Ok(())
                };
                let _ = reply.send(r);
            }
            ClientEvent::Message { client, msg } => self.on_client_message(client, msg),
            ClientEvent::Closed { client, reason } => self.remove_client(client, reason),
        }
    }

    /// Releases everything a client held: subscriptions, pending requests (cancelled
    /// upstream), server requests it was asked to answer (failed upstream).
    fn remove_client(&mut self, client: ClientId, reason: &str) {
        // Its share of a held fan-out is queued (and counted) before it goes.
        self.queue_fan_out();
        let Some(state) = self.clients.remove(&client) else {
            return;
        };
        tracing::debug!(%client, reason, "client closed");
        self.counters.peak_queue = self.counters.peak_queue.max(state.outbox.peak());
        match state.shared_outbox {
            None => {
                self.counters.coalesced_gone += state.outbox.merged();
                state.outbox.close(CloseReason::Closed);
            }
            // Nothing queued after this mark is the client's: the connection tells it
            // from a later request that reuses the id.
            Some(id) => {
                let end = Outbound::new(bytes::Bytes::new(), OutKind::Ended, Some(id));
                self.turn.push(client, &state.outbox, end);
            }
        }
        self.listens.close(client);
        self.admission.forget(client);
        self.trace_client_gone(client);
        self.reads.forget(client, None);
        self.lists.open.retain(|_, agg| agg.client != client);
        self.elicitations.forget_client(client);
        if self.log_levels.remove(client) {
            self.sync_log_level();
        }
        let effects = self
            .holders
            .registry
            .remove_client(client, Instant::now().into_std());
        self.apply_sub_effects(effects);
        for (pid, entry) in self.pending.drop_client(client) {
            self.drop_request_timer(pid);
            self.send_cancelled(entry.upstream, pid, "client disconnected");
        }
        for (_, bound) in self.pending.drop_client_bound(|b| b.client == client) {
            let err = Message::error_response(
                Some(&bound.upstream_id),
                crate::protocol::code::INTERNAL_ERROR,
                "the client this request was routed to disconnected",
                None,
            );
            self.send_to_upstream(bound.upstream, &err);
        }
    }

    /// Disconnects the clients whose outbox refused a message (latest first); those
    /// refused meanwhile wait for the next call.
    fn reap_doomed(&mut self) {
        let doomed = std::mem::take(&mut self.turn.refused);
        for (client, reason) in doomed.into_iter().rev() {
            if let Some(c) = self.clients.get(&client) {
                tracing::warn!(%client, ?reason, "disconnecting a client that does not keep up");
                c.outbox.close(reason);
                self.counters.slow_disconnects += 1;
                self.warn_operator(format!("client {client} disconnected: it did not keep up"));
            }
            self.remove_client(client, "too slow");
        }
    }
}

/// Starts the hub task; returns its handle and the task, which ends after
/// `shutdown` is cancelled and every client was released. `build_upstreams` gets the
/// link the upstream actors report on.
pub fn spawn_hub(
    settings: HubSettings,
    build_upstreams: impl FnOnce(&UpstreamLink) -> Vec<UpstreamSlot>,
    shutdown: CancellationToken,
) -> (HubHandle, tokio::task::JoinHandle<()>) {
    spawn_hub_with_fleet(settings, build_upstreams, None, shutdown)
}

/// [`spawn_hub`], with the fleet actor started for `fleet` (docs/architecture.md,
/// "Fleet"); it stops with `fleet_stop`.
pub fn spawn_hub_with_fleet(
    settings: HubSettings,
    build_upstreams: impl FnOnce(&UpstreamLink) -> Vec<UpstreamSlot>,
    fleet: Option<(crate::config::FleetConfig, CancellationToken)>,
    shutdown: CancellationToken,
) -> (HubHandle, tokio::task::JoinHandle<()>) {
    let (handle, inboxes) = HubHandle::channels(INBOX_CAPACITY);
    let upstreams = build_upstreams(handle.upstreams());
    let mut hub = Hub::new(settings, upstreams);
    hub.fleet.actor = fleet.map(|(config, stop)| {
        crate::fleet::start(
            config,
            handle.fleet_events(),
            handle.clients().clone(),
            stop,
        )
    });
    let task = tokio::spawn(hub.run(inboxes, shutdown));
    (handle, task)
}

#[cfg(test)]
mod tests;
