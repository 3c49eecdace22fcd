//! The fleet actor: the only code that talks to NATS (docs/architecture.md, "Fleet").
//! One task; it takes the hub's [`FleetCmd`]s, keeps each key's role (own, follow,
//! direct), renews leases and interest entries on a tick of `lease_ms / 3`, takes a key
//! over when its owner's lease is gone, relays updates, and answers followers' reads
//! by reading through the hub as a client of its own.
//!
//! Taking, renewing and losing leases is in `leases.rs`, reads across the fleet in
//! `reads.rs`, MRTR retries across the fleet and the
//! fleet's state key in `retries.rs`, NATS plumbing (per-key update subscriptions, one
//! key's interest lookup, buckets) in `nats.rs`. Each tick also
//! renews this instance's presence entry and tells the hub the fleet view.
//!
//! Owns the NATS connection, the three KV buckets (leases, interest, instances) and the
//! per-key roles. Never touches the
//! hub's state: everything it learns goes to the hub as a [`FleetEvent`]. Never waits
//! for another instance inside its loop: a read sent to the owner is a task of its own.

use std::collections::HashMap;
use std::time::Duration;

use async_nats::jetstream::kv;
use bytes::Bytes;
use futures_util::StreamExt;
use serde_json::json;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

mod leases;
mod nats;
mod reads;
mod retries;

use nats::{bucket_or_create, others_interested, relay, Relay};
use reads::Reader;

use super::keys;
use super::{FleetCmd, FleetEvent};
use crate::config::FleetConfig;
use crate::downstream::link::ClientLink;
use crate::state::ids::SubKey;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Role {
    /// Holds the lease at `revision`; `idle` once no local holder is left (kept while
    /// other instances are interested).
    Own {
        revision: u64,
        idle: bool,
    },
    Follow,
    Direct,
}

struct Key {
    key: SubKey,
    kid: String,
    role: Role,
    /// While following: the subscription to the key's update subject (only followed
    /// keys' updates reach this instance).
    updates: Option<Relay>,
    /// The owner's instance id (the lease's value), when known.
    owner: Option<String>,
}

/// The live NATS side.
struct Conn {
    client: async_nats::Client,
    leases: kv::Store,
    interest: kv::Store,
    /// Presence: one entry per live instance (`max_age` = `lease_ms`, put every tick).
    instances: kv::Store,
}

struct FleetActor {
    cfg: FleetConfig,
    instance: String,
    events: mpsc::Sender<FleetEvent>,
    clients: ClientLink,
    conn: Option<Conn>,
    /// Key id → key.
    keys: HashMap<String, Key>,
    /// The hub's key → key id (the reverse of `keys`).
    kids: HashMap<SubKey, String>,
    reader: Option<Reader>,
    /// Where the NATS subscriptions' tasks send what they receive.
    inbound: mpsc::Sender<FleetInbound>,
    /// This instance's presence value (JSON: id, start time).
    presence: Bytes,
    /// Counts connections: a disconnection reported by an earlier connection's client
    /// (still winding down) is not this one's.
    connection: u64,
}

/// Starts the actor task.
pub fn spawn(
    cfg: FleetConfig,
    rx: mpsc::UnboundedReceiver<FleetCmd>,
    events: mpsc::Sender<FleetEvent>,
    clients: ClientLink,
    shutdown: CancellationToken,
) {
    let (inbound, nats_rx) = mpsc::channel::<FleetInbound>(1024);
    let instance = keys::new_instance_id();
    let started = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis());
    let presence = Bytes::from(
        json!({"instance": instance, "startedUnixMs": started, "version": env!("CARGO_PKG_VERSION")})
            .to_string(),
    );
    let actor = FleetActor {
        instance,
        presence,
        cfg,
        events,
        clients,
        conn: None,
        keys: HashMap::new(),
        kids: HashMap::new(),
        reader: None,
        inbound,
        connection: 0,
    };
    tokio::spawn(actor.run(rx, nats_rx, shutdown));
}

impl FleetActor {
    async fn run(
        mut self,
        mut rx: mpsc::UnboundedReceiver<FleetCmd>,
        mut nats_rx: mpsc::Receiver<FleetInbound>,
        shutdown: CancellationToken,
    ) {
        let tick_every = Duration::from_millis((self.cfg.lease_ms / 3).max(100));
        let mut tick = tokio::time::interval(tick_every);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut subs: Option<Relay> = None;
        self.view(Vec::new()).await;
        self.connect(&mut subs).await;
        loop {
            let reader_ready = async {
                match &self.reader {
                    Some(r) => r.outbox.ready().await,
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                _ = shutdown.cancelled() => break,
                cmd = rx.recv() => match cmd {
                    Some(cmd) => self.on_cmd(cmd).await,
                    None => break,
                },
                Some(inbound) = nats_rx.recv() => self.on_inbound(inbound).await,
                () = reader_ready => self.deliver_reads().await,
                _ = tick.tick() => {
                    if self.conn.is_none() {
                        self.connect(&mut subs).await;
                    }
                    self.maintain().await;
                }
            }
        }
        // Leaving: give up what this instance owns, so another takes over at once.
        if let Some(conn) = &self.conn {
            let _ = conn.instances.delete(&self.instance).await;
            for k in self.keys.values() {
                if let Role::Own { revision, .. } = k.role {
                    let _ = conn
                        .leases
                        .delete_expect_revision(&k.kid, Some(revision))
                        .await;
                }
                let _ = conn
                    .interest
                    .delete(keys::interest_key(&k.kid, &self.instance))
                    .await;
            }
        }
        drop(subs);
    }

    /// Connects (or fails quietly: the hub then gets `Direct` for every key), sets up
    /// the buckets and the fleet-wide read subscription, and rejoins keys held directly.
    async fn connect(&mut self, subs: &mut Option<Relay>) {
        self.connection += 1;
        let (connection, lost) = (self.connection, self.inbound.clone());
        let mut opts = async_nats::ConnectOptions::new()
            .connection_timeout(Duration::from_secs(2))
            .name(format!("mcpmux-{}", self.instance))
            // The client reconnects by itself, but what was published to this instance
            // meanwhile is gone: a disconnection is a loss, however short (a tick
            // could fall on either side of it and see nothing).
            .event_callback(move |event| {
                let lost = lost.clone();
                async move {
                    if matches!(event, async_nats::Event::Disconnected) {
                        let _ = lost.send(FleetInbound::Disconnected(connection)).await;
                    }
                }
            });
        if let Some(var) = &self.cfg.token_env {
            if let Ok(token) = std::env::var(var) {
                opts = opts.token(token);
            }
        }
        let client = match opts.connect(self.cfg.nats.as_str()).await {
            Ok(c) => c,
            Err(e) => {
                tracing::warn!(nats = %self.cfg.nats, error = %e, "fleet: NATS unreachable; upstream subscriptions are direct until it is back");
                return;
            }
        };
        let js = async_nats::jetstream::new(client.clone());
        let max_age = Duration::from_millis(self.cfg.lease_ms);
        let bucket = |name: String| kv::Config {
            bucket: name,
            history: 1,
            max_age,
            ..Default::default()
        };
        let leases = match bucket_or_create(&js, bucket(keys::lease_bucket(&self.cfg.name))).await {
            Ok(b) => b,
            Err(e) => {
                tracing::warn!(error = %e, "fleet: cannot open the leases bucket (is JetStream enabled?)");
                return;
            }
        };
        let interest =
            match bucket_or_create(&js, bucket(keys::interest_bucket(&self.cfg.name))).await {
                Ok(b) => b,
                Err(e) => {
                    tracing::warn!(error = %e, "fleet: cannot open the interest bucket");
                    return;
                }
            };
        // Updates are subscribed per followed key (`relay`); reads fleet-wide.
        let instances =
            match bucket_or_create(&js, bucket(keys::instances_bucket(&self.cfg.name))).await {
                Ok(b) => b,
                Err(e) => {
                    tracing::warn!(error = %e, "fleet: cannot open the instances bucket");
                    return;
                }
            };
        let _ = instances.put(&self.instance, self.presence.clone()).await;
        match retries::state_key(&js, &self.cfg.name).await {
            Some(key) => self.emit(FleetEvent::StateKey(key)).await,
            None => tracing::warn!("fleet: cannot read the fleet's MRTR state key; requestStates stay this instance's own"),
        }
        let (Ok(reads), Ok(retry_requests)) = (
            client.subscribe(keys::read_wildcard(&self.cfg.name)).await,
            client
                .subscribe(keys::retry_subject(&self.cfg.name, &self.instance))
                .await,
        ) else {
            tracing::warn!("fleet: cannot subscribe on NATS");
            return;
        };
        let mut inbound = futures_util::stream::select(
            reads.map(FleetInbound::ReadRequest),
            retry_requests.map(FleetInbound::RetryRequest),
        );
        let tx = self.inbound.clone();
        *subs = Some(Relay(tokio::spawn(async move {
            loop {
                let inbound = inbound.next().await.unwrap_or(FleetInbound::Lost);
                let lost = matches!(inbound, FleetInbound::Lost);
                if tx.send(inbound).await.is_err() || lost {
                    return;
                }
            }
        })));
        tracing::info!(nats = %self.cfg.nats, fleet = %self.cfg.name, instance = %self.instance, "fleet: connected");
        self.conn = Some(Conn {
            client,
            leases,
            interest,
            instances,
        });
        // Keys held directly while NATS was away rejoin the fleet.
        let direct: Vec<String> = self
            .keys
            .iter()
            .filter(|(_, k)| k.role == Role::Direct)
            .map(|(kid, _)| kid.clone())
            .collect();
        for kid in direct {
            self.join(&kid, true).await;
        }
    }

    async fn on_cmd(&mut self, cmd: FleetCmd) {
        match cmd {
            FleetCmd::ForwardRetry {
                instance,
                client,
                id,
                request,
                capabilities,
                log_level,
            } => self.forward_retry(instance, client, id, request, capabilities, log_level),
            FleetCmd::Want { key, upstream_name } => {
                let kid = keys::key_id(&upstream_name, &key.uri);
                if let Some(k) = self.keys.get_mut(&kid) {
                    // Still owned (idle) or followed: the local holders are back. A
                    // reload may have replaced the upstream meanwhile (same name, so
                    // the same key id, under a new hub key): the key moves to the new
                    // one, whose fresh session holds no subscription yet.
                    let moved = k.key != key;
                    if moved {
                        self.kids.remove(&k.key);
                        self.kids.insert(key.clone(), kid.clone());
                        k.key = key;
                    }
                    let event = match &mut k.role {
                        Role::Own { idle, .. } => {
                            *idle = false;
                            FleetEvent::Own {
                                key: k.key.clone(),
                                subscribe: moved,
                            }
                        }
                        Role::Follow => FleetEvent::Follow {
                            key: k.key.clone(),
                            drop_upstream: false,
                        },
                        Role::Direct => FleetEvent::Direct {
                            key: k.key.clone(),
                            subscribe: moved,
                        },
                    };
                    self.emit(event).await;
                    return;
                }
                self.kids.insert(key.clone(), kid.clone());
                self.keys.insert(
                    kid.clone(),
                    Key {
                        key,
                        kid: kid.clone(),
                        role: Role::Direct,
                        updates: None,
                        owner: None,
                    },
                );
                self.join(&kid, false).await;
            }
            FleetCmd::Release { key } => {
                let Some(kid) = self.kid_of(&key) else {
                    return;
                };
                let role = self.keys[&kid].role;
                match role {
                    Role::Own { revision, .. } => {
                        self.keys.get_mut(&kid).expect("found").role = Role::Own {
                            revision,
                            idle: true,
                        };
                        self.release_if_unwanted(&kid).await;
                    }
                    Role::Follow | Role::Direct => {
                        if let Some(conn) = &self.conn {
                            let _ = conn
                                .interest
                                .delete(keys::interest_key(&kid, &self.instance))
                                .await;
                        }
                        let k = self.remove_key(&kid).expect("found");
                        if role == Role::Direct {
                            self.emit(FleetEvent::Unsubscribe { key: k.key }).await;
                        }
                    }
                }
            }
            FleetCmd::Move { from, to } => {
                if let Some(kid) = self.kids.remove(&from) {
                    if let Some(k) = self.keys.get_mut(&kid) {
                        k.key = to.clone();
                    }
                    self.kids.insert(to, kid);
                }
            }
            FleetCmd::Forfeit { key } => {
                let Some(kid) = self.kid_of(&key) else {
                    return;
                };
                let k = self.remove_key(&kid).expect("found");
                if let (Role::Own { revision, .. }, Some(conn)) = (k.role, &self.conn) {
                    let _ = conn
                        .leases
                        .delete_expect_revision(&kid, Some(revision))
                        .await;
                }
                tracing::debug!(%kid, uri = %k.key.uri, "fleet: lease given up (its upstream was removed)");
            }
            FleetCmd::Publish { key, update } => {
                let (Some(kid), Some(conn)) = (self.kid_of(&key), &self.conn) else {
                    return;
                };
                let subject = keys::update_subject(&self.cfg.name, &kid);
                if let Err(e) = conn.client.publish(subject, update).await {
                    tracing::warn!(error = %e, "fleet: an update could not be published");
                }
            }
            FleetCmd::Read {
                key,
                exposed_uri,
                generation,
            } => self.read_from_owner(key, exposed_uri, generation),
        }
    }

    async fn on_inbound(&mut self, inbound: FleetInbound) {
        match inbound {
            FleetInbound::Update(m) => {
                let Some(kid) = m.subject.as_str().rsplit('.').next() else {
                    return;
                };
                if let Some(k) = self.keys.get(kid).filter(|k| k.role == Role::Follow) {
                    let key = k.key.clone();
                    self.emit(FleetEvent::Update {
                        key,
                        update: m.payload,
                    })
                    .await;
                }
            }
            FleetInbound::ReadRequest(m) => self.serve_read(m).await,
            FleetInbound::RetryRequest(m) => self.serve_retry(m),
            FleetInbound::Lost => self.lost().await,
            FleetInbound::Disconnected(connection) if connection == self.connection => {
                self.lost().await;
            }
            FleetInbound::Disconnected(_) => {}
        }
    }

    /// Tells the hub the fleet as seen now: the live instances from the presence
    /// bucket (a handful of entries: one per instance).
    async fn publish_view(&self) {
        let mut instances = Vec::new();
        if let Some(conn) = &self.conn {
            if let Ok(mut names) = conn.instances.keys().await {
                while let Some(Ok(name)) = names.next().await {
                    instances.push(name);
                }
            }
        }
        instances.sort();
        self.view(instances).await;
    }

    async fn view(&self, instances: Vec<String>) {
        let owners = self
            .keys
            .values()
            .filter_map(|k| k.owner.clone().map(|o| (k.key.clone(), o)))
            .collect();
        self.emit(FleetEvent::View {
            instance: self.instance.clone(),
            instances,
            owners,
        })
        .await;
    }

    fn kid_of(&self, key: &SubKey) -> Option<String> {
        self.kids.get(key).cloned()
    }

    /// Forgets a key (its update subscription, if any, ends with it).
    fn remove_key(&mut self, kid: &str) -> Option<Key> {
        let k = self.keys.remove(kid)?;
        self.kids.remove(&k.key);
        Some(k)
    }

    async fn emit(&self, event: FleetEvent) {
        let _ = self.events.send(event).await;
    }
}

/// What the NATS subscriptions bring in.
enum FleetInbound {
    Update(async_nats::Message),
    ReadRequest(async_nats::Message),
    /// Another instance's MRTR retry of a request this instance holds.
    RetryRequest(async_nats::Message),
    /// The fleet-wide subscriptions ended.
    Lost,
    /// The client of this connection (by its count) lost the server.
    Disconnected(u64),
}

#[cfg(test)]
#[path = "actor_tests.rs"]
mod tests;
