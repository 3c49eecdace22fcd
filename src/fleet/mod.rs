//! The fleet (docs/architecture.md, "Fleet"): several `mcpmux serve` instances with the
//! same `[fleet]` share one upstream subscription per (Streamable HTTP upstream, URI)
//! over NATS. One instance *owns* a key (a lease in a JetStream KV bucket, created only
//! if absent, renewed, released when no instance is interested); it alone subscribes
//! upstream and publishes each update on the key's subject; the other interested
//! instances *follow* (they subscribe to that subject, register their interest in a
//! second bucket, and forward their reads of the key to the owner, whose cache answers
//! them, so a change costs one upstream read fleet-wide). With NATS unreachable an
//! instance subscribes upstream directly and rejoins when NATS is back. Each instance
//! keeps a presence entry in a third bucket, so every instance can show the fleet.
//!
//! This module owns the wire names and the messages between the hub and the fleet
//! actor (`actor.rs`, the only code that talks to NATS). The hub decides nothing about
//! NATS; the actor never touches the hub's state.

mod actor;
pub mod keys;

use bytes::Bytes;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use crate::config::FleetConfig;
use crate::downstream::link::ClientLink;
use crate::protocol::RawId;
use crate::state::ids::{ClientId, SubKey};

pub use actor::spawn;

/// What the hub asks of the fleet actor. Keys are the hub's own (upstream id, URI as the
/// upstream knows it); `upstream_name` identifies the upstream across instances.
#[derive(Debug)]
pub enum FleetCmd {
    /// Local holders appeared for a key: own it, or follow its owner.
    Want { key: SubKey, upstream_name: String },
    /// No local holder is left.
    Release { key: SubKey },
    /// A reload replaced the key's upstream: the key (owned for other instances) is
    /// known by its new hub key from now on, lease and all.
    Move { from: SubKey, to: SubKey },
    /// A reload removed the key's upstream: give up its lease now (a follower takes
    /// over) and forget it.
    Forfeit { key: SubKey },
    /// The owner's upstream sent this update for an owned key: publish it.
    Publish { key: SubKey, update: Bytes },
    /// A follower's read of `key` (as its clients name it: `exposed_uri`), answered
    /// with `FleetEvent::ReadDone { generation }`.
    Read {
        key: SubKey,
        exposed_uri: String,
        generation: u64,
    },
    /// A 2026-07-28 client's MRTR retry whose held request lives at `instance`:
    /// have that instance serve it (as a client with these capabilities and log
    /// level), answered with `FleetEvent::RetryDone`.
    ForwardRetry {
        instance: String,
        client: ClientId,
        id: RawId,
        request: Bytes,
        capabilities: serde_json::Value,
        log_level: Option<String>,
    },
}

/// What the fleet actor tells the hub.
#[derive(Debug)]
pub enum FleetEvent {
    /// This instance owns the key: it must hold the upstream subscription
    /// (`subscribe`: send it now; false when it already holds one).
    Own { key: SubKey, subscribe: bool },
    /// Another instance owns the key: updates come from NATS (`drop_upstream`: an
    /// upstream subscription this instance held directly must go).
    Follow { key: SubKey, drop_upstream: bool },
    /// No fleet for this key (NATS unreachable): hold the upstream subscription
    /// directly (`subscribe`: send it now).
    Direct { key: SubKey, subscribe: bool },
    /// An owned key no instance is interested in any more: unsubscribe upstream.
    Unsubscribe { key: SubKey },
    /// An update the owner published, for a followed key.
    Update { key: SubKey, update: Bytes },
    /// The answer to `FleetCmd::Read`: the result or error object, as JSON text.
    ReadDone {
        key: SubKey,
        generation: u64,
        outcome: Result<String, String>,
    },
    /// The fleet's one key for MRTR `requestState`s (kept in NATS), once connected.
    StateKey([u8; 32]),
    /// The answer to `FleetCmd::ForwardRetry`: the response the holding instance
    /// gave, or why there is none (that instance is gone, or did not answer).
    RetryDone {
        client: ClientId,
        id: RawId,
        answer: Result<Bytes, String>,
    },
    /// The fleet as this instance sees it (at start and on every tick), for `/status`
    /// and `/metrics`: its own id, the live instances' ids (sorted; empty while NATS is
    /// away), and the owner's instance id of each key it holds, when known.
    View {
        instance: String,
        instances: Vec<String>,
        owners: Vec<(SubKey, String)>,
    },
}

/// The hub's side of the fleet.
#[derive(Debug, Clone)]
pub struct FleetHandle {
    tx: mpsc::UnboundedSender<FleetCmd>,
}

impl FleetHandle {
    /// Queues a command (the actor's queue is unbounded: the hub never waits; every
    /// command is one per key change or per update, bounded by what the hub itself
    /// handles).
    pub fn send(&self, cmd: FleetCmd) {
        let _ = self.tx.send(cmd);
    }

    /// A handle whose commands go to `tx`, for tests that play the fleet actor.
    #[cfg(test)]
    pub(crate) fn played_by(tx: mpsc::UnboundedSender<FleetCmd>) -> FleetHandle {
        FleetHandle { tx }
    }
}

/// Starts the fleet actor. `clients` lets the actor read through the hub as a client
/// of its own (to answer followers' reads from this instance's cache).
pub fn start(
    config: FleetConfig,
    events: mpsc::Sender<FleetEvent>,
    clients: ClientLink,
    shutdown: CancellationToken,
) -> FleetHandle {
    let (tx, rx) = mpsc::unbounded_channel();
    actor::spawn(config, rx, events, clients, shutdown);
    FleetHandle { tx }
}
