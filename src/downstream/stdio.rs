//! One client on a byte stream (mcpmux's own stdin/stdout in `mcpmux stdio`, or any
//! `AsyncRead`/`AsyncWrite` pair in tests): newline-delimited JSON-RPC, bounded lines.
//!
//! Bad input never ends the session: an over-long line, invalid JSON or a malformed
//! message gets a JSON-RPC error and reading goes on. Batches (2025-03-26) are split
//! and their members handled one by one; their responses are written as separate
//! lines. Only MCP goes to the writer; logs go to stderr through tracing.
//!
//! Both eras on one connection (docs/architecture.md, "Both protocol eras"): a request
//! carrying the 2026-07-28 `_meta` (`server/discover` is how a dual-era client probes)
//! is validated and served by a short-lived hub client of its own that shares the
//! connection's outbox, ended by its response, by `notifications/cancelled` naming it
//! (also how a `subscriptions/listen` is closed on stdio), or by the end of input.
//! Everything else belongs to the connection's legacy session (`initialize` first).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use futures_util::{SinkExt, StreamExt};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio_util::codec::{FramedRead, FramedWrite};

use crate::downstream::link::{ClientKind, ClientLink};
use crate::downstream::outbox::{OutKind, Outbound, Outbox};
use crate::protocol::codec::{Frame, JsonLines};
use crate::protocol::shape;
use crate::protocol::stateless;
use crate::protocol::{code, methods, Incoming, Kind, Message, ParseError, RawId};
use crate::state::ids::ClientId;

/// How long the last messages may take to write once input ended.
const LAST_WRITE: std::time::Duration = std::time::Duration::from_secs(2);

/// A connection's modern requests, shared by its reader and its writer.
type ModernRequests = Arc<Mutex<Modern>>;

/// The modern requests of a connection.
///
/// A client may reuse a request id once its request is over (a listen it cancelled, a
/// call that was answered) while messages related to the old request still wait in the
/// connection's outbox. The hub marks the end of each request's messages there
/// (`OutKind::Ended`, queued when it removes the request's client), so a message
/// related to an id is the live request's only once every earlier request of that id
/// has been marked ended.
#[derive(Default)]
struct Modern {
    /// In flight, by the client's request id.
    live: HashMap<RawId, ModernRequest>,
    /// By request id, while they differ: how many requests of the id were opened on
    /// the connection, and how many the writer saw marked ended.
    instances: HashMap<RawId, (u32, u32)>,
}

impl Modern {
    /// `id`'s request was admitted: it is the live one.
    fn open(&mut self, id: RawId, mut request: ModernRequest) {
        let opened = &mut self.instances.entry(id.clone()).or_default().0;
        request.instance = *opened;
        *opened += 1;
        self.live.insert(id, request);
    }

    /// The writer reached the mark that ends one request of `id`.
    fn ended(&mut self, id: &RawId) {
        let counts = self.instances.entry(id.clone()).or_default();
        counts.1 += 1;
        if counts.0 == counts.1 {
            self.instances.remove(id);
        }
    }

    /// Whether what the writer reaches now for `id` is `request`'s: every earlier
    /// request of the id was marked ended.
    fn current(&self, id: &RawId, request: &ModernRequest) -> bool {
        self.instances.get(id).map_or(0, |c| c.1) == request.instance
    }
}

/// One modern request in flight on a connection.
struct ModernRequest {
    /// The hub client serving it.
    client: ClientId,
    /// The URI it reads, when it is a `resources/read`.
    read_uri: Option<String>,
    /// It is a `subscriptions/listen`: the updates related to it are its stream's.
    listen: bool,
    /// How many requests of its id the connection opened before it.
    instance: u32,
}

/// Serves one client until its input ends or the hub closes its outbox.
///
/// # Errors
/// Only when the hub refuses the client (limits or shutdown).
pub async fn serve_stream<R, W>(
    reader: R,
    writer: W,
    hub: ClientLink,
    max_line: usize,
    queue: usize,
) -> Result<(), crate::downstream::link::AdmitError>
where
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin,
{
    let outbox = Outbox::for_transport(queue, "stdio");
    let client = hub.open_client(outbox.clone()).await?;
    let modern_requests: ModernRequests = Arc::default();
    let mut lines = FramedRead::new(reader, JsonLines::new(max_line));
    let mut out = FramedWrite::new(writer, JsonLines::new(max_line));

    let read_loop = async {
        while let Some(frame) = lines.next().await {
            let line = match frame {
                Ok(Frame::Line(l)) => l,
                Ok(Frame::TooLong) => {
                    let why = format!(
                        "message longer than limits.max_message_bytes ({max_line} bytes) discarded"
                    );
                    reject(&outbox, code::INVALID_REQUEST, &why);
                    continue;
                }
                Ok(Frame::NotUtf8) => {
                    reject(&outbox, code::PARSE_ERROR, "line is not UTF-8: discarded");
                    continue;
                }
                Err(e) => {
                    tracing::debug!(%client, error = %e, "client input failed");
                    break;
                }
            };
            if line.trim().is_empty() {
                continue;
            }
            let items = match Incoming::parse(line.as_bytes()) {
                Ok(Incoming::Single(m)) => vec![(m, line.as_bytes())],
                Ok(Incoming::Batch(ms)) => {
                    // A member's error names the member's id when one can be read:
                    // each member's text is read again only when one is invalid.
                    let raws: Vec<&serde_json::value::RawValue> = if ms.iter().any(Result::is_err) {
                        serde_json::from_str(&line).unwrap_or_default()
                    } else {
                        Vec::new()
                    };
                    ms.into_iter()
                        .enumerate()
                        .map(|(i, m)| (m, raws.get(i).map_or(&b""[..], |r| r.get().as_bytes())))
                        .collect()
                }
                Err(e) => vec![(Err(e), line.as_bytes())],
            };
            for (item, raw) in items {
                match item {
                    Ok(msg) => {
                        let to = match modern_target(&hub, &outbox, &modern_requests, &msg).await {
                            Target::Legacy => client,
                            Target::Modern(sub) => sub,
                            Target::Done => continue,
                        };
                        if hub.client_message(to, msg).await.is_err() {
                            return;
                        }
                    }
                    Err(e) => reject_parse(&outbox, Message::salvage_id(raw), &e),
                }
            }
        }
    };
    // What the writer took from the outbox, and how much of it is written: when input
    // ends mid-batch, the rest is still delivered below.
    let mut batch: Vec<Outbound> = Vec::new();
    let mut written = 0;
    let write_loop = async {
        loop {
            if outbox.drain(&mut batch).is_err() {
                return;
            }
            if batch.is_empty() {
                outbox.ready().await;
                continue;
            }
            while written < batch.len() {
                let o = batch[written].clone();
                written += 1;
                let Some(bytes) = wire(o, &hub, &modern_requests) else {
                    continue;
                };
                if out.feed(bytes).await.is_err() {
                    return;
                }
            }
            batch.clear();
            written = 0;
            if out.flush().await.is_err() {
                return;
            }
        }
    };
    tokio::select! {
        _ = read_loop => {
            // Input ended: deliver what is already taken or queued, then leave (within
            // a bound: a host that stopped reading must not keep mcpmux alive).
            let last = async {
                let mut rest = batch.split_off(written);
                if outbox.drain(&mut rest).is_err() {
                    rest.clear();
                }
                for o in rest {
                    if let Some(bytes) = wire(o, &hub, &modern_requests) {
                        let _ = out.feed(bytes).await;
                    }
                }
                let _ = out.flush().await;
            };
            let _ = tokio::time::timeout(LAST_WRITE, last).await;
        }
        _ = write_loop => {}
    }
    let subs: Vec<ClientId> = lock(&modern_requests)
        .live
        .drain()
        .map(|(_, r)| r.client)
        .collect();
    for sub in subs {
        hub.client_closed(sub, "stdio client left").await;
    }
    hub.client_closed(client, "stdio client left").await;
    Ok(())
}

fn lock(m: &ModernRequests) -> std::sync::MutexGuard<'_, Modern> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// Where a client message goes.
enum Target {
    /// The connection's legacy session.
    Legacy,
    /// The hub client of a modern request.
    Modern(ClientId),
    /// Handled here (refused, or a cancellation that ended a modern request).
    Done,
}

/// Picks the hub client for `msg`: a modern request gets a client of its own (after
/// validation); a cancellation of a modern request ends that client.
async fn modern_target(
    hub: &ClientLink,
    outbox: &Arc<Outbox>,
    requests: &ModernRequests,
    msg: &Message,
) -> Target {
    match msg.kind() {
        Kind::Notification if msg.method() == Some(methods::CANCELLED) => {
            let id = methods::parse_params::<methods::CancelledParams>(msg.params())
                .and_then(|p| p.request_id)
                .and_then(|r| RawId::parse(r.get()));
            let sub = id
                .and_then(|id| lock(requests).live.remove(&id))
                .map(|r| r.client);
            match sub {
                Some(sub) => {
                    hub.client_closed(sub, "cancelled by the client").await;
                    Target::Done
                }
                None => Target::Legacy,
            }
        }
        Kind::Request
            if msg.method() != Some(methods::INITIALIZE)
                && stateless::request_meta(msg).protocol_version.is_some() =>
        {
            let refuse = |code: i64, why: &str, data: Option<serde_json::Value>| {
                let m = Message::error_response(msg.id(), code, why, data);
                outbox.push(Outbound::new(m.to_bytes(), OutKind::Response, None));
                Target::Done
            };
            let meta = match stateless::validate_meta(msg) {
                Ok(m) => m,
                Err(r) => return refuse(r.code, &r.message, r.data),
            };
            if let Some(why) = stateless::legacy_only_refusal(msg.method().unwrap_or_default()) {
                return refuse(code::METHOD_NOT_FOUND, &why, None);
            }
            let id = msg.id().cloned().expect("requests have ids");
            let kind = ClientKind::Stateless {
                capabilities: meta.client_capabilities.unwrap_or_default(),
                log_level: meta.log_level,
                shared_outbox: Some(id.clone()),
                param_headers: None,
            };
            let Ok(sub) = hub.open(outbox.clone(), kind).await else {
                return refuse(
                    code::UPSTREAM_UNAVAILABLE,
                    "mcpmux is not accepting clients",
                    None,
                );
            };
            let request = ModernRequest {
                client: sub,
                read_uri: shape::read_uri(msg),
                listen: msg.method() == Some(methods::SUBSCRIPTIONS_LISTEN),
                instance: 0,
            };
            lock(requests).open(id, request);
            Target::Modern(sub)
        }
        _ => Target::Legacy,
    }
}

/// The bytes to write for `o`: a response to a modern request ends its client and
/// takes the era's shape; an update for a listen is tagged with its `subscriptionId`.
/// `None`: nothing to write (a mark, or an update for a listen that has ended).
fn wire(o: Outbound, hub: &ClientLink, requests: &ModernRequests) -> Option<bytes::Bytes> {
    match (&o.kind, o.related.as_ref()) {
        (OutKind::Ended, Some(id)) => {
            lock(requests).ended(id);
            return None;
        }
        (OutKind::Release | OutKind::Ended, _) => return None,
        (OutKind::Response, id) => {
            if let Some(read_uri) = end_modern(hub, requests, id) {
                return Some(shape::response(
                    o.bytes.clone(),
                    o.hints,
                    read_uri.as_deref(),
                ));
            }
        }
        (OutKind::Notification | OutKind::Coalescible(_), Some(id)) => {
            let listen = {
                let modern = lock(requests);
                // Most connections never make a modern request: no hashing for them.
                if modern.live.is_empty() {
                    None
                } else {
                    let current = |r: &ModernRequest| modern.current(id, r).then_some(r.listen);
                    modern.live.get(id).map(current)
                }
            };
            match listen {
                Some(Some(true)) => return Some(o.listen_bytes()),
                Some(Some(false)) => {}
                // An earlier request of the id (a listen the client cancelled, then
                // reused the id for): it is over, and this is for nobody now.
                Some(None) => return None,
                // Only a listen's copies of updates and list changes name a request (a
                // session's name none): this listen has ended (cancelled, or answered
                // at shutdown) while they were queued, and they are for nobody now.
                // Untagged, they would read as the session's.
                None if matches!(o.kind, OutKind::Coalescible(_)) => return None,
                None => {}
            }
        }
        _ => {}
    }
    Some(o.into_bytes())
}

/// A response to a modern request is being written: its client is done. Returns, for
/// such a response, the URI its request read (the answer takes the era's shape).
fn end_modern(
    hub: &ClientLink,
    requests: &ModernRequests,
    id: Option<&RawId>,
) -> Option<Option<String>> {
    let sub = id.and_then(|id| {
        let mut modern = lock(requests);
        // Most connections never make a modern request: no hashing for them.
        if modern.live.is_empty() {
            None
        } else {
            modern.live.remove(id)
        }
    });
    let sub = sub?;
    hub.client_closed_now(sub.client, "answered");
    Some(sub.read_uri)
}

fn reject_parse(outbox: &Outbox, id: Option<RawId>, e: &ParseError) {
    reject_with_id(outbox, id.as_ref(), e.code(), &e.to_string());
}

fn reject(outbox: &Outbox, code: i64, message: &str) {
    reject_with_id(outbox, None, code, message);
}

fn reject_with_id(outbox: &Outbox, id: Option<&RawId>, code: i64, message: &str) {
    let m = Message::error_response(id, code, message, None);
    outbox.push(Outbound::new(m.to_bytes(), OutKind::Response, None));
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::downstream::outbox::CoalesceKey;

    /// On one connection a listen's updates are tagged while it lives; once it ended
    /// (cancelled) the ones still queued are for nobody, and a session's own copy (no
    /// request named) is written as it is.
    #[test]
    fn an_ended_listens_queued_updates_are_not_written_as_the_sessions() {
        let listen = RawId::from_u64(7);
        let (hub, requests, _rx) = listening(&listen);
        assert!(is_tagged(&wire(
            update(Some(listen.clone())),
            &hub,
            &requests
        )));
        lock(&requests).live.remove(&listen);
        assert_eq!(wire(update(Some(listen)), &hub, &requests), None, "ended");
        let session = wire(update(None), &hub, &requests).expect("the session's");
        assert_eq!(&session[..], br#"{"jsonrpc":"2.0","method":"m"}"#);
    }

    /// A connection whose listen `id` is open (hub client 2), and the hub's end of its
    /// link, kept so the link stays open.
    fn listening(
        id: &RawId,
    ) -> (
        ClientLink,
        ModernRequests,
        tokio::sync::mpsc::Receiver<crate::downstream::link::ClientEvent>,
    ) {
        let (tx, rx) = tokio::sync::mpsc::channel(8);
        let requests: ModernRequests = Arc::default();
        lock(&requests).open(id.clone(), listen_request(2));
        (ClientLink::new(tx), requests, rx)
    }

    fn listen_request(client: u64) -> ModernRequest {
        ModernRequest {
            client: ClientId(client),
            read_uri: None,
            listen: true,
            instance: 0,
        }
    }

    fn update(related: Option<RawId>) -> Outbound {
        let kind = OutKind::Coalescible(CoalesceKey::Method("m".into()));
        Outbound::new(
            bytes::Bytes::from_static(br#"{"jsonrpc":"2.0","method":"m"}"#),
            kind,
            related,
        )
    }

    fn is_tagged(wired: &Option<bytes::Bytes>) -> bool {
        wired.as_ref().is_some_and(|b| {
            std::str::from_utf8(b)
                .unwrap()
                .contains("io.modelcontextprotocol/subscriptionId")
        })
    }

    /// A client cancels its listen and opens a new one with the same id while the old
    /// one's updates still wait in the connection's outbox: those are for nobody (the
    /// new listen may hold other URIs), up to the hub's mark that the old one ended;
    /// what follows the mark is the new listen's, tagged.
    #[test]
    fn a_reused_listen_id_tags_only_what_follows_the_end_of_the_earlier_listen() {
        let id = RawId::from_u64(7);
        let (hub, requests, _rx) = listening(&id);
        assert!(is_tagged(&wire(update(Some(id.clone())), &hub, &requests)));
        // Cancelled (the reader forgets it), and the id reused at once.
        lock(&requests).live.remove(&id);
        lock(&requests).open(id.clone(), listen_request(3));
        assert_eq!(
            wire(update(Some(id.clone())), &hub, &requests),
            None,
            "the old listen's"
        );
        let end = Outbound::new(bytes::Bytes::new(), OutKind::Ended, Some(id.clone()));
        assert_eq!(wire(end, &hub, &requests), None, "a mark writes nothing");
        assert!(
            is_tagged(&wire(update(Some(id.clone())), &hub, &requests)),
            "the new listen's"
        );
        // Reused for a call instead: the earlier listen's leftovers are not written as
        // the call's (untagged, they would read as the session's).
        lock(&requests).live.remove(&id);
        let mut call = listen_request(4);
        call.listen = false;
        lock(&requests).open(id.clone(), call);
        assert_eq!(wire(update(Some(id.clone())), &hub, &requests), None);
        let end = Outbound::new(bytes::Bytes::new(), OutKind::Ended, Some(id.clone()));
        assert_eq!(wire(end, &hub, &requests), None);
        assert_eq!(
            wire(update(Some(id.clone())), &hub, &requests).as_deref(),
            Some(&br#"{"jsonrpc":"2.0","method":"m"}"#[..]),
            "the call's own"
        );
        // Once every request of the id has ended, nothing is kept for it.
        lock(&requests).live.remove(&id);
        let end = Outbound::new(bytes::Bytes::new(), OutKind::Ended, Some(id.clone()));
        wire(end, &hub, &requests);
        assert!(lock(&requests).instances.is_empty());
    }
}
