//! Upstream actors: each owns one upstream transport (a stdio child or a Streamable
//! HTTP session), performs the `initialize` handshake itself, forwards every inbound
//! message to the hub, and restarts with backoff when the transport dies. Never awaits
//! a client; never interprets messages beyond the handshake.

use bytes::Bytes;
use tokio::sync::mpsc;

use crate::protocol::Message;

/// What an upstream actor tells the hub.
#[derive(Debug)]
pub enum UpstreamEvent {
    /// The handshake completed; the upstream takes requests now.
    Ready(InitInfo),
    /// Any message the upstream sent after the handshake.
    Message(Message),
    /// The transport died or the handshake failed. Everything in flight is lost.
    Down { reason: String, retrying: bool },
}

/// The parts of the upstream's `InitializeResult` the proxy uses.
#[derive(Debug, Clone, Default)]
pub struct InitInfo {
    pub protocol_version: String,
    pub capabilities: serde_json::Value,
    pub server_info: serde_json::Value,
    pub instructions: Option<String>,
}

/// What the hub tells an upstream actor.
#[derive(Debug)]
pub enum UpstreamCmd {
    /// Write one serialized JSON-RPC message.
    Send(Bytes),
}

/// The hub's handle to an upstream actor.
#[derive(Debug, Clone)]
pub struct UpstreamHandle {
    pub(crate) tx: mpsc::Sender<UpstreamCmd>,
}

impl UpstreamHandle {
    /// Queues a message without waiting. `false` when the actor's queue is full or it
    /// has stopped.
    pub fn try_send(&self, bytes: Bytes) -> bool {
        self.tx.try_send(UpstreamCmd::Send(bytes)).is_ok()
    }
}
