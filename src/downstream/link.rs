//! The channel client sessions report on: what a client session tells the hub, and the
//! handle every session holds to do so.
//!
//! Owned here, not by the hub, so that the dependencies point one way: the hub reads
//! [`ClientEvent`]s and answers through [`Outbox`]es; downstream code never names a
//! hub type. Sending may wait (backpressure on one client's reader is fine); the hub
//! never waits on a client.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use tokio::sync::{mpsc, oneshot};

use crate::downstream::outbox::Outbox;
use crate::protocol::Message;
use crate::state::ids::{ClientId, ViewId};

/// What a client session tells the hub.
#[derive(Debug)]
pub enum ClientEvent {
    /// A new client session asks to be admitted (limits are checked by the hub).
    Opened {
        client: ClientId,
        outbox: Arc<Outbox>,
        kind: ClientKind,
        /// The view it sees: the default one, or a profile's.
        view: ViewId,
        /// Its `Mcp-Session-Id`, when it is a Streamable HTTP session.
        session: Option<Arc<str>>,
        reply: oneshot::Sender<Result<(), AdmitError>>,
    },
    /// One well-formed JSON-RPC message from a client (batches are split before).
    Message { client: ClientId, msg: Message },
    /// The client session ended (EOF, DELETE, expiry, write error).
    Closed {
        client: ClientId,
        reason: &'static str,
    },
}

/// How a client speaks, decided by the transport from its first message.
#[derive(Debug, Clone, PartialEq)]
pub enum ClientKind {
    /// A session: `initialize` first, then requests under what it negotiated, and a
    /// live channel the server may ask things on (the handshake era).
    Session,
    /// The fleet actor's own session, reading for the clients of other instances:
    /// exempt from the per-client limits, which those clients' own instances apply.
    FleetReader,
    /// One stateless request (or listen stream), already validated at the edge: over
    /// HTTP, or one request of a stdio connection (the 2026-07-28 era). `capabilities`
    /// and `log_level` are what the request declared in `_meta`; it is asked things by
    /// answer-and-retry.
    Stateless {
        capabilities: serde_json::Value,
        log_level: Option<String>,
        /// `Some(request id)`: the outbox is the connection's, shared with its other
        /// requests (stdio). The hub must not close it when this client ends; it
        /// queues an `OutKind::Ended` naming the id after the last message it queued
        /// for the client instead.
        shared_outbox: Option<crate::protocol::RawId>,
        /// Over HTTP: the request's `Mcp-Param-{Name}` headers (lower-case name after
        /// the prefix, raw value), checked against the tool's `x-mcp-header`
        /// annotations. `None` on stdio, where they do not exist.
        param_headers: Option<Vec<(String, String)>>,
    },
}

/// Why a client was not admitted.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AdmitError {
    #[error("too many clients (limits.max_clients = {0})")]
    TooManyClients(usize),
    #[error("mcpmux is shutting down")]
    ShuttingDown,
    #[error("this profile was removed from the configuration")]
    NoSuchProfile,
}

/// Whoever reads client events has stopped; the session should wind down.
#[derive(Debug, Clone, Copy, thiserror::Error)]
#[error("the hub has stopped")]
pub struct HubGone;

/// Cheap, cloneable handle every client session uses to reach the hub.
#[derive(Debug, Clone)]
pub struct ClientLink {
    tx: mpsc::Sender<ClientEvent>,
    next_client: Arc<AtomicU64>,
    /// The view clients opened through [`ClientLink::open`] see.
    view: ViewId,
}

impl ClientLink {
    pub fn new(tx: mpsc::Sender<ClientEvent>) -> Self {
        ClientLink {
            tx,
            next_client: Arc::new(AtomicU64::new(1)),
            view: ViewId::DEFAULT,
        }
    }

    /// The same link, opening clients that see `view` (`mcpmux stdio --profile`).
    pub fn with_view(&self, view: ViewId) -> ClientLink {
        ClientLink {
            view,
            ..self.clone()
        }
    }

    /// Allocates a client id and asks the hub to admit a legacy client (of this link's
    /// view).
    pub async fn open_client(&self, outbox: Arc<Outbox>) -> Result<ClientId, AdmitError> {
        self.open(outbox, ClientKind::Session).await
    }

    /// Allocates a client id and asks the hub to admit a client of `kind` that sees
    /// this link's view.
    pub async fn open(
        &self,
        outbox: Arc<Outbox>,
        kind: ClientKind,
    ) -> Result<ClientId, AdmitError> {
        self.open_in(outbox, kind, self.view).await
    }

    /// Allocates a client id and asks the hub to admit a client of `kind` that sees
    /// `view`.
    pub async fn open_in(
        &self,
        outbox: Arc<Outbox>,
        kind: ClientKind,
        view: ViewId,
    ) -> Result<ClientId, AdmitError> {
        self.open_full(outbox, kind, view, None).await
    }

    /// [`ClientLink::open_in`] for a Streamable HTTP session named `session`.
    pub async fn open_session(
        &self,
        outbox: Arc<Outbox>,
        view: ViewId,
        session: Arc<str>,
    ) -> Result<ClientId, AdmitError> {
        self.open_full(outbox, ClientKind::Session, view, Some(session))
            .await
    }

    async fn open_full(
        &self,
        outbox: Arc<Outbox>,
        kind: ClientKind,
        view: ViewId,
        session: Option<Arc<str>>,
    ) -> Result<ClientId, AdmitError> {
        self.admit(outbox, kind, view, session, None).await
    }

    /// Admits a client of `kind` that sees `view` and hands it its first message in
    /// the same breath: the message is queued right behind the admission (the hub takes
    /// events in order, and drops a message for a client it refused), so the caller
    /// waits for the hub once, not twice. If the caller goes away while waiting, the
    /// client is closed again.
    pub async fn open_with(
        &self,
        outbox: Arc<Outbox>,
        kind: ClientKind,
        view: ViewId,
        first: Message,
    ) -> Result<ClientId, AdmitError> {
        self.admit(outbox, kind, view, None, Some(first)).await
    }

    async fn admit(
        &self,
        outbox: Arc<Outbox>,
        kind: ClientKind,
        view: ViewId,
        session: Option<Arc<str>>,
        first: Option<Message>,
    ) -> Result<ClientId, AdmitError> {
        let client = ClientId(self.next_client.fetch_add(1, Ordering::Relaxed));
        let (reply, rx) = oneshot::channel();
        let mut unadmitted = CloseUnlessDone {
            link: self,
            client,
            done: false,
        };
        self.tx
            .send(ClientEvent::Opened {
                client,
                outbox,
                kind,
                view,
                session,
                reply,
            })
            .await
            .map_err(|_| AdmitError::ShuttingDown)?;
        if let Some(msg) = first {
            self.tx
                .send(ClientEvent::Message { client, msg })
                .await
                .map_err(|_| AdmitError::ShuttingDown)?;
        }
        let admitted = rx.await.map_err(|_| AdmitError::ShuttingDown);
        unadmitted.done = true;
        admitted??;
        Ok(client)
    }

    /// Hands one client message to the hub.
    pub async fn client_message(&self, client: ClientId, msg: Message) -> Result<(), HubGone> {
        self.tx
            .send(ClientEvent::Message { client, msg })
            .await
            .map_err(|_| HubGone)
    }

    /// Tells the hub a client is gone; it releases everything the client held.
    pub async fn client_closed(&self, client: ClientId, reason: &'static str) {
        let _ = self.tx.send(ClientEvent::Closed { client, reason }).await;
    }

    /// Best-effort variant for `Drop` paths.
    pub fn client_closed_now(&self, client: ClientId, reason: &'static str) {
        if self
            .tx
            .try_send(ClientEvent::Closed { client, reason })
            .is_err()
        {
            let tx = self.tx.clone();
            tokio::spawn(async move {
                let _ = tx.send(ClientEvent::Closed { client, reason }).await;
            });
        }
    }
}

/// Closes a client whose admission was asked for when the asking future is dropped
/// before it learned the answer (an HTTP client that went away meanwhile).
struct CloseUnlessDone<'a> {
    link: &'a ClientLink,
    client: ClientId,
    done: bool,
}

impl Drop for CloseUnlessDone<'_> {
    fn drop(&mut self) {
        if !self.done {
            self.link
                .client_closed_now(self.client, "left before it was admitted");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::RawId;

    type Opening = tokio::task::JoinHandle<Result<ClientId, AdmitError>>;

    /// A link to a channel the test reads as the hub would, and an `open_with` of a
    /// client whose first message is a ping, under way.
    fn opening() -> (ClientLink, mpsc::Receiver<ClientEvent>, Opening) {
        let (tx, rx) = mpsc::channel(8);
        let link = ClientLink::new(tx);
        let ping = Message::request(&RawId::from_u64(1), "ping", None);
        let open = tokio::spawn({
            let link = link.clone();
            async move {
                link.open_with(Outbox::new(4), ClientKind::Session, ViewId::DEFAULT, ping)
                    .await
            }
        });
        (link, rx, open)
    }

    #[tokio::test]
    async fn the_first_message_follows_the_admission_before_it_is_answered() {
        let (link, mut rx, open) = opening();
        let Some(ClientEvent::Opened { client, reply, .. }) = rx.recv().await else {
            panic!("an admission first");
        };
        // The message is already queued, before the admission is answered.
        let Some(ClientEvent::Message { client: to, .. }) = rx.recv().await else {
            panic!("then the message");
        };
        assert_eq!(to, client);
        reply.send(Ok(())).unwrap();
        assert_eq!(open.await.unwrap().unwrap(), client);
        // Admitted: nothing closes it behind the caller's back.
        drop(link);
        assert!(rx.recv().await.is_none());
    }

    #[tokio::test]
    async fn a_caller_gone_before_its_admission_was_answered_closes_the_client() {
        let (link, mut rx, open) = opening();
        let Some(ClientEvent::Opened { client, reply, .. }) = rx.recv().await else {
            panic!("an admission first");
        };
        assert!(matches!(rx.recv().await, Some(ClientEvent::Message { .. })));
        open.abort();
        assert!(open.await.unwrap_err().is_cancelled());
        // The hub admits it after all: the close that follows releases it. (With every
        // link gone, a missing close ends the channel instead of hanging.)
        drop((reply, link));
        match rx.recv().await {
            Some(ClientEvent::Closed { client: c, .. }) => assert_eq!(c, client),
            other => panic!("expected the client closed, got {other:?}"),
        }
    }
}
