//! One message for a client as the hub hands it to an outbox ([`Outbound`]): its
//! bytes, what it is for the slow-consumer policy and for stream routing ([`OutKind`]),
//! and what an edge needs to write it in its era (a stateless response's cache hints
//! and parsed message, a listen's tagged copy).
//!
//! Owns: those parts, made once and shared by every client that gets the message.
//! Never: decides what the edge does with them.

use std::sync::{Arc, OnceLock};

use bytes::Bytes;

use crate::protocol::shape::CacheHints;
use crate::protocol::{Message, RawId};
use crate::state::ids::SubKey;

/// What an outbound message is, for the policy and for stream routing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum OutKind {
    /// A response to the client's request with this id.
    Response,
    /// A server→client request (sampling, elicitation, roots) — never dropped.
    Request,
    /// A notification that may be coalesced under pressure, with what it is about.
    Coalescible(CoalesceKey),
    /// Any other notification: dropped (and counted) under pressure.
    Notification,
    /// No bytes for the wire: the client cancelled its request `related`, so no
    /// response will come; the transport ends whatever waits for it (an HTTP POST).
    /// Never dropped, like a response.
    Release,
    /// No bytes for the wire: the hub client of the modern request `related` on a
    /// shared outbox (a stdio connection's) is gone, and nothing queued after this is
    /// its. The connection tells a request's leftovers from those of a later request
    /// that reuses the id by these (docs/architecture.md, "Both protocol eras"). Queued
    /// past the bound (one per ended request) up to twice it, never dropped; beyond
    /// that it closes the outbox, as a response would.
    Ended,
}

impl OutKind {
    /// The coalescing kind of a `resources/updated` for `key`: one pending entry per
    /// (upstream, URI).
    pub fn update(key: &crate::state::ids::SubKey) -> OutKind {
        OutKind::Coalescible(CoalesceKey::Update(key.clone()))
    }
}

/// What a coalescible notification is about: two pending entries with equal keys for
/// the same recipient say the same thing, so under pressure only the newest is kept.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CoalesceKey {
    /// A `*/list_changed` notification, by its method.
    Method(Arc<str>),
    /// `notifications/resources/updated` for one upstream's URI: the update's own key,
    /// so a key costs no formatting and each holder's copy shares the URI text.
    Update(SubKey),
}

/// One message for a client: serialized once, shared by every client that gets it.
/// A holder's copy is one reference count (one atomic increment, one decrement when its
/// writer is done), however many parts the message has: on the fan-out path every count
/// is touched by the hub and by another thread's session.
#[derive(Debug, Clone)]
pub struct Outbound(Arc<Parts>);

/// The parts of an [`Outbound`], read through it.
#[derive(Debug)]
pub struct Parts {
    pub bytes: Bytes,
    pub kind: OutKind,
    /// The client request this message belongs to (the response itself, or progress
    /// and server requests related to it). The HTTP layer writes such messages on that
    /// request's POST stream when it is still open, else on the GET stream.
    pub related: Option<RawId>,
    /// For a response to a stateless request: how long its result may be reused, for
    /// the edge that gives it the era's shape (`crate::protocol::shape`).
    pub hints: Option<CacheHints>,
    /// For a response to a stateless client: the message the bytes were made from, so
    /// the edge that shapes it does not parse them again.
    parsed: Option<Box<Message>>,
    /// The bytes hold no line break: an SSE event carries them as one `data:` line.
    /// Found once, when the message is made, not by each session that frames it.
    pub one_line: bool,
    /// The bytes tagged with the `subscriptionId` of the listen `related` names, made
    /// by the first of its streams to write them and shared by the others (most
    /// listens of a URI have the same id: the SDKs number them per connection).
    listen_tagged: OnceLock<Bytes>,
}

impl Outbound {
    pub fn new(bytes: Bytes, kind: OutKind, related: Option<RawId>) -> Outbound {
        Outbound(Arc::new(Parts {
            one_line: is_one_line(&bytes),
            bytes,
            kind,
            related,
            hints: None,
            parsed: None,
            listen_tagged: OnceLock::new(),
        }))
    }

    /// A response to the request `id`, with the cache hints of its result.
    pub fn response(bytes: Bytes, id: RawId, hints: Option<CacheHints>) -> Outbound {
        Self::answer(bytes, id, hints, None)
    }

    /// [`Outbound::response`] that keeps the message its bytes were made from, for an
    /// edge that reads it again (a stateless client's, which shapes it).
    pub fn parsed_response(msg: Message, id: RawId, hints: Option<CacheHints>) -> Outbound {
        Self::answer(msg.to_bytes(), id, hints, Some(Box::new(msg)))
    }

    fn answer(
        bytes: Bytes,
        id: RawId,
        hints: Option<CacheHints>,
        parsed: Option<Box<Message>>,
    ) -> Outbound {
        Outbound(Arc::new(Parts {
            one_line: is_one_line(&bytes),
            bytes,
            kind: OutKind::Response,
            related: Some(id),
            hints,
            parsed,
            listen_tagged: OnceLock::new(),
        }))
    }

    /// The bytes as a listen stream writes them: tagged with the `subscriptionId` of
    /// the listen this message is related to (`crate::protocol::shape::listen_update`),
    /// tagged once however many streams of that listen id write it. The plain bytes
    /// when it is related to nothing.
    pub fn listen_bytes(&self) -> Bytes {
        let Some(id) = self.0.related.as_ref() else {
            return self.0.bytes.clone();
        };
        self.0
            .listen_tagged
            .get_or_init(|| crate::protocol::shape::listen_update(&self.0.bytes, id))
            .clone()
    }

    /// The bytes, without a new reference when this was the last copy.
    #[must_use]
    pub fn into_bytes(self) -> Bytes {
        self.into_parsed().0
    }

    /// The bytes and the message they were made from, when it was kept
    /// ([`Outbound::parsed_response`]) and this was the last copy.
    #[must_use]
    pub fn into_parsed(self) -> (Bytes, Option<Message>) {
        match Arc::try_unwrap(self.0) {
            Ok(parts) => (parts.bytes, parts.parsed.map(|m| *m)),
            Err(shared) => (shared.bytes.clone(), None),
        }
    }
}

/// Whether `bytes` hold no line break (`\n` or `\r`).
fn is_one_line(bytes: &[u8]) -> bool {
    memchr::memchr2(b'\n', b'\r', bytes).is_none()
}

/// The wire bytes (what an SSE event carries as its data).
impl AsRef<[u8]> for Outbound {
    fn as_ref(&self) -> &[u8] {
        &self.0.bytes
    }
}

impl std::ops::Deref for Outbound {
    type Target = Parts;

    fn deref(&self) -> &Parts {
        &self.0
    }
}
