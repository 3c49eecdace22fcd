//! The per-session actor: the only task that drains a session's outbox and the only
//! party that waits on the client's HTTP streams.
//!
//! Owns: the routing of every [`Outbound`] to the POST that is waiting for it or to the
//! GET stream, the GET stream's replay buffer and event ids, idle expiry, and the end
//! of the session (exactly one `hub.client_closed`, removal from the session map).
//! Never: blocks the hub (it only drains the outbox; when a stream's channel is full it
//! stops draining and lets the outbox coalesce), puts a response on the GET stream, or
//! parses client input.
//!
//! Routing (docs/architecture.md, "Streamable HTTP"):
//! - `related` names a request whose POST is still registered → that POST: a response
//!   always, notifications and server requests only when the POST answers as SSE;
//! - a response whose POST is gone (client disconnected) → dropped with a debug log
//!   (a disconnect is not a cancellation);
//! - a release (the client cancelled that request) → the POST stops waiting for it
//!   and ends when nothing else is expected (an SSE stream just ends; a JSON POST gets
//!   the synthesized "no response" error);
//! - everything else → the GET stream, framed with `id: N` into the bounded replay
//!   buffer; delivered when a GET stream is attached (a new GET receives what no stream
//!   has received yet, or, with `Last-Event-ID`, everything held after that id).
//!
//! Only GET-stream events carry `id:`; a POST's SSE answer has no ids and is not
//! resumable (the spec makes replay optional; a client that loses a POST stream still
//! gets its response dropped, as a disconnect is not a cancellation).
//! A new GET replaces the previous one (closing it) rather than answering 409.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use tokio::sync::{mpsc, oneshot};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tracing::{debug, warn, Instrument};

use super::sse::{self, ReplayBuffer};
use crate::downstream::outbox::{CloseReason, OutKind, Outbound, Outbox};
use crate::hub::HubHandle;
use crate::protocol::RawId;
use crate::state::ids::ClientId;

/// Depth of the command channel from HTTP handlers to the actor. Handlers wait when it
/// is full, which only slows that one client.
const CMD_QUEUE: usize = 64;

/// Chunks buffered per HTTP stream before the actor stops draining the outbox. Each
/// chunk may hold many events (see [`sse::sse_body`]), so a small depth suffices.
pub(crate) const STREAM_QUEUE: usize = 16;

/// Live sessions by their `Mcp-Session-Id`.
pub(crate) type SessionMap = Arc<Mutex<HashMap<String, SessionEntry>>>;

/// What HTTP handlers know about a session.
#[derive(Debug, Clone)]
pub(crate) struct SessionEntry {
    pub cmd: mpsc::Sender<SessionCmd>,
    pub client: ClientId,
    /// The protocol version the `initialize` response named, once known.
    pub version: Option<Arc<str>>,
}

/// Where a POST wants its messages.
#[derive(Debug)]
pub(crate) struct PostSink {
    pub tx: mpsc::Sender<Bytes>,
    /// SSE: related notifications and requests go here too, framed as SSE events.
    /// JSON: only the raw response bytes.
    pub sse: bool,
}

/// Commands from HTTP handlers.
#[derive(Debug)]
pub(crate) enum SessionCmd {
    /// A POST arrived. `ids` are its requests (empty for notifications/responses only,
    /// which just counts as activity). Acked once registered, before the handler
    /// forwards anything to the hub; `Err` names an id already in flight.
    Post {
        ids: Vec<RawId>,
        sink: Option<PostSink>,
        ack: oneshot::Sender<Result<(), RawId>>,
    },
    /// A GET stream attaches (replacing any previous one).
    Get {
        last_event_id: Option<u64>,
        tx: mpsc::Sender<Bytes>,
    },
    /// End the session; `done` fires after `client_closed` was sent.
    End {
        reason: &'static str,
        done: Option<oneshot::Sender<()>>,
    },
}

struct Post {
    sink: PostSink,
    /// Responses still expected.
    remaining: usize,
}

struct GetStream {
    tx: mpsc::Sender<Bytes>,
    /// Id of the last event handed to this stream.
    cursor: u64,
}

/// Outcome of routing one message.
enum Routed {
    Done,
    /// The stream's channel is full: wait for room, keep the message.
    Full(mpsc::Sender<Bytes>),
}

/// Everything needed to start a session actor.
pub(crate) struct SessionSpawn {
    pub id: String,
    pub client: ClientId,
    pub outbox: Arc<Outbox>,
    pub hub: HubHandle,
    pub sessions: SessionMap,
    pub idle: Duration,
    pub replay_events: usize,
    pub shutdown: CancellationToken,
}

/// Inserts the session into the map and returns the actor future (the caller spawns
/// it on its task tracker) and the command sender.
pub(crate) fn start(
    s: SessionSpawn,
) -> (
    impl std::future::Future<Output = ()> + Send + 'static,
    mpsc::Sender<SessionCmd>,
) {
    let (cmd_tx, cmd_rx) = mpsc::channel(CMD_QUEUE);
    s.sessions.lock().unwrap_or_else(|p| p.into_inner()).insert(
        s.id.clone(),
        SessionEntry {
            cmd: cmd_tx.clone(),
            client: s.client,
            version: None,
        },
    );
    let actor = Actor {
        replay: ReplayBuffer::new(s.replay_events),
        delivered: 0,
        posts: HashMap::new(),
        by_id: HashMap::new(),
        next_post: 0,
        get: None,
        backlog: VecDeque::new(),
        last_activity: Instant::now(),
        client: s.client,
    };
    let span = tracing::debug_span!("http_session", client.id = %s.client);
    let fut = actor
        .run(
            s.id, cmd_rx, s.outbox, s.hub, s.sessions, s.idle, s.shutdown,
        )
        .instrument(span);
    (fut, cmd_tx)
}

struct Actor {
    replay: ReplayBuffer,
    /// Highest event id handed to any GET stream (events above it were never sent).
    delivered: u64,
    posts: HashMap<u64, Post>,
    /// Pending request id → key in `posts`.
    by_id: HashMap<RawId, u64>,
    next_post: u64,
    get: Option<GetStream>,
    /// Drained from the outbox, not yet routed (only non-empty while a stream is full).
    backlog: VecDeque<Outbound>,
    last_activity: Instant,
    client: ClientId,
}

impl Actor {
    #[allow(clippy::too_many_arguments)]
    async fn run(
        mut self,
        id: String,
        mut cmds: mpsc::Receiver<SessionCmd>,
        outbox: Arc<Outbox>,
        hub: HubHandle,
        sessions: SessionMap,
        idle: Duration,
        shutdown: CancellationToken,
    ) {
        let mut done_tx = None;
        let reason = loop {
            // Drain the outbox only when nothing is waiting for room in a stream:
            // while blocked, the outbox applies its coalescing policy instead.
            let mut blocked = self.flush();
            if blocked.is_none() {
                let mut batch = Vec::new();
                if let Err(why) = outbox.drain(&mut batch) {
                    break close_reason(&why);
                }
                if !batch.is_empty() {
                    self.backlog.extend(batch);
                    blocked = self.flush();
                }
            }
            let get_tx = self.get.as_ref().map(|g| g.tx.clone());
            let idle_at = self.is_idle().then(|| self.last_activity + idle);
            tokio::select! {
                biased;
                _ = shutdown.cancelled() => {
                    // Answers the hub queued before the end (the shutdown drain's)
                    // still reach their POSTs.
                    let mut batch = Vec::new();
                    if outbox.drain(&mut batch).is_ok() {
                        self.backlog.extend(batch);
                        self.flush();
                    }
                    break "shutdown";
                }
                cmd = cmds.recv() => match cmd {
                    Some(SessionCmd::End { reason, done }) => {
                        done_tx = done;
                        break reason;
                    }
                    Some(cmd) => self.handle(cmd),
                    None => break "closed",
                },
                _ = wait_room(blocked.clone()), if blocked.is_some() => {}
                // While blocked, a wake-up only matters if the hub closed the outbox.
                _ = outbox.ready() => {
                    if blocked.is_some() && outbox.is_closed() {
                        break "client too slow (outbox closed)";
                    }
                }
                _ = closed(get_tx), if self.get.is_some() => {
                    debug!(client.id = %self.client, "GET stream closed by the client");
                    self.get = None;
                    self.last_activity = Instant::now();
                }
                _ = tokio::time::sleep_until(idle_at.unwrap_or_else(Instant::now)),
                    if idle_at.is_some() => break "idle expiry",
            }
        };
        sessions
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(&id);
        outbox.close(CloseReason::Closed);
        // Dropping the senders ends every open stream of this session.
        self.posts.clear();
        self.get = None;
        debug!(client.id = %self.client, reason, "HTTP session ended");
        hub.client_closed(self.client, reason).await;
        if let Some(done) = done_tx {
            let _ = done.send(());
        }
    }

    fn is_idle(&self) -> bool {
        self.get.is_none() && self.posts.is_empty()
    }

    fn handle(&mut self, cmd: SessionCmd) {
        self.last_activity = Instant::now();
        match cmd {
            SessionCmd::Post { ids, sink, ack } => {
                let _ = ack.send(self.register(ids, sink));
            }
            SessionCmd::Get { last_event_id, tx } => {
                let cursor = match last_event_id {
                    Some(n) => {
                        let n = n.min(self.replay.last_id());
                        if self.replay.oldest_id().is_some_and(|o| o > n + 1) {
                            warn!(client.id = %self.client, last_event_id = n,
                                "replay buffer no longer holds every event after Last-Event-ID");
                        }
                        n
                    }
                    None => self.delivered,
                };
                // Replacing the sender closes the previous GET stream.
                self.get = Some(GetStream { tx, cursor });
            }
            // The run loop handles `End` itself before calling here.
            SessionCmd::End { .. } => {}
        }
    }

    fn register(&mut self, ids: Vec<RawId>, sink: Option<PostSink>) -> Result<(), RawId> {
        if ids.is_empty() {
            return Ok(());
        }
        let Some(sink) = sink else {
            return Ok(());
        };
        for (i, id) in ids.iter().enumerate() {
            if self.by_id.contains_key(id) || ids[..i].contains(id) {
                return Err(id.clone());
            }
        }
        let key = self.next_post;
        self.next_post += 1;
        for id in &ids {
            self.by_id.insert(id.clone(), key);
        }
        self.posts.insert(
            key,
            Post {
                sink,
                remaining: ids.len(),
            },
        );
        Ok(())
    }

    /// Routes the backlog, then hands the GET stream what it has not seen. Returns the
    /// sender to wait on when a stream is full.
    fn flush(&mut self) -> Option<mpsc::Sender<Bytes>> {
        while let Some(out) = self.backlog.pop_front() {
            if let Routed::Full(tx) = self.route(&out) {
                self.backlog.push_front(out);
                return Some(tx);
            }
        }
        let get = self.get.as_mut()?;
        let (chunk, last) = self.replay.chunk_after(get.cursor)?;
        match get.tx.try_send(chunk) {
            Ok(()) => {
                get.cursor = last;
                self.delivered = self.delivered.max(last);
                None
            }
            Err(mpsc::error::TrySendError::Full(_)) => Some(get.tx.clone()),
            Err(mpsc::error::TrySendError::Closed(_)) => {
                self.get = None;
                None
            }
        }
    }

    fn route(&mut self, out: &Outbound) -> Routed {
        if out.kind == OutKind::Release {
            self.release(out.related.as_ref());
            return Routed::Done;
        }
        let is_response = out.kind == OutKind::Response;
        let key = out
            .related
            .as_ref()
            .and_then(|id| self.by_id.get(id))
            .copied();
        let post = key.and_then(|k| self.posts.get_mut(&k).map(|p| (k, p)));
        let Some((key, post)) = post.filter(|(_, p)| is_response || p.sink.sse) else {
            if is_response {
                debug!(client.id = %self.client, id = ?out.related,
                    "response for no waiting POST dropped (never on the GET stream)");
            } else {
                self.onto_get_stream(out);
            }
            return Routed::Done;
        };
        let bytes = if post.sink.sse {
            sse::event(None, &out.bytes)
        } else {
            out.bytes.clone()
        };
        let gone = match post.sink.tx.try_send(bytes) {
            Ok(()) => false,
            Err(mpsc::error::TrySendError::Full(_)) => return Routed::Full(post.sink.tx.clone()),
            Err(mpsc::error::TrySendError::Closed(_)) => true,
        };
        if is_response {
            if gone {
                debug!(client.id = %self.client, id = ?out.related,
                    "POST gone before its response; response dropped");
            }
            post.remaining -= 1;
            let finished = post.remaining == 0;
            if let Some(id) = &out.related {
                self.by_id.remove(id);
            }
            if finished {
                // Dropping the sender ends the POST's SSE stream or JSON wait.
                self.posts.remove(&key);
                self.last_activity = Instant::now();
            }
        } else if gone {
            // The POST's client left: keep its server requests and progress reachable.
            self.onto_get_stream(out);
        }
        Routed::Done
    }

    /// The client cancelled request `id`: stop waiting for its response, and end its
    /// POST once nothing else is expected there.
    fn release(&mut self, id: Option<&RawId>) {
        let Some(key) = id.and_then(|id| self.by_id.remove(id)) else {
            return;
        };
        if let Some(post) = self.posts.get_mut(&key) {
            post.remaining -= 1;
            if post.remaining == 0 {
                self.posts.remove(&key);
                self.last_activity = Instant::now();
            }
        }
    }

    fn onto_get_stream(&mut self, out: &Outbound) {
        let (_, evicted) = self.replay.push(&out.bytes);
        if let Some(old) = evicted.filter(|old| *old > self.delivered) {
            warn!(client.id = %self.client, event_id = old,
                "GET replay buffer full: oldest undelivered event dropped \
                 (listen.sse_replay_events)");
        }
    }
}

fn close_reason(why: &CloseReason) -> &'static str {
    match why {
        CloseReason::QueueFull => "client too slow (queue full)",
        CloseReason::CoalesceOverflow => "client too slow (too many pending notifications)",
        CloseReason::Closed => "outbox closed",
    }
}

/// Resolves when `tx`'s channel has room (or is closed).
async fn wait_room(tx: Option<mpsc::Sender<Bytes>>) {
    if let Some(tx) = tx {
        let _ = tx.reserve_owned().await;
    }
}

/// Resolves when the receiver of `tx` is dropped.
async fn closed(tx: Option<mpsc::Sender<Bytes>>) {
    match tx {
        Some(tx) => tx.closed().await,
        None => std::future::pending().await,
    }
}
