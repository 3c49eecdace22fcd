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
//! - a release (the client cancelled that request) → the POST gets the "request
//!   cancelled" error in place of the response;
//! - everything else → the GET stream, framed with `id: N` into the bounded replay
//!   buffer; delivered when a GET stream is attached (a new GET receives what no stream
//!   has received yet, or, with `Last-Event-ID`, everything held after that id).
//!
//! Resumable POST streams (SEP-1699): a POST answered as SSE starts with a priming event
//! and numbers every event `p<stream>-<seq>`; its events are kept (the last
//! [`POST_REPLAY_EVENTS`]) while it is open. When the client's connection drops, the
//! stream is *detached*: its later messages, the response included, are kept for a GET
//! that names one of its ids in `Last-Event-ID`, which receives what followed that id
//! and then the rest of the stream live. A detached stream that got its response is
//! kept among the last [`FINISHED_KEEP`] such streams. A GET naming a stream that is not
//! kept is refused (400), so a client does not resume forever.
//! A cancelled request's POST is answered with a `-32800` ("request cancelled") error,
//! so that it ends and a client that resumes streams does not try to resume it.
//! A new plain GET replaces the previous one (closing it) rather than answering 409.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use tokio::sync::oneshot;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tracing::{debug, warn, Instrument};

use super::sse::{self, LastEventId, ReplayBuffer};
use crate::downstream::lane;
use crate::downstream::link::ClientLink;
use crate::downstream::outbox::{CloseReason, OutKind, Outbound, Outbox};
use crate::protocol::{Message, RawId};
use crate::state::ids::{ClientId, ViewId};

/// Depth of the command channel from HTTP handlers to the actor. Handlers wait when it
/// is full, which only slows that one client.
const CMD_QUEUE: usize = 64;

/// Chunks buffered per HTTP stream before the actor stops draining the outbox. Each
/// chunk may hold many events (see [`sse::sse_body`]), so a small depth suffices.
pub(crate) const STREAM_QUEUE: usize = 16;

/// Events of one POST's SSE answer kept for a resuming GET.
pub(crate) const POST_REPLAY_EVENTS: usize = 64;

/// Detached POST streams kept, after their response, for a resuming GET.
pub(crate) const FINISHED_KEEP: usize = 16;

/// The JSON-RPC code of the answer a cancelled request's POST gets.
const REQUEST_CANCELLED: i64 = -32800;

/// Live sessions by their `Mcp-Session-Id`.
pub(crate) type SessionMap = Arc<Mutex<HashMap<String, SessionEntry>>>;

/// What HTTP handlers know about a session.
#[derive(Debug, Clone)]
pub(crate) struct SessionEntry {
    pub cmd: lane::Sender<SessionCmd>,
    pub client: ClientId,
    /// The view of the endpoint it was opened on: it is served there only.
    pub view: ViewId,
    /// The protocol version the `initialize` response named, once known.
    pub version: Option<Arc<str>>,
}

/// Where a POST wants its messages.
#[derive(Debug)]
pub(crate) struct PostSink {
    pub tx: lane::Sender<Bytes>,
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
    /// A GET stream attaches: a plain one replaces any previous one; one naming a POST
    /// stream's event resumes that stream. `ack` is `false` when there is nothing to
    /// resume.
    Get {
        last_event_id: Option<LastEventId>,
        tx: lane::Sender<Bytes>,
        ack: oneshot::Sender<bool>,
    },
    /// End the session; `done` fires after `client_closed` was sent.
    End {
        reason: &'static str,
        done: Option<oneshot::Sender<()>>,
    },
}

struct SessionPost {
    sink: PostSink,
    /// Responses still expected.
    remaining: usize,
    /// SSE answers: the events sent so far, for a resuming GET.
    replay: Option<PostReplay>,
    /// The client's connection is gone: events wait for a resuming GET.
    detached: bool,
}

/// The events of one POST's SSE answer, framed with their ids.
#[derive(Default)]
struct PostReplay {
    next_seq: u64,
    events: VecDeque<(u64, Bytes)>,
}

impl PostReplay {
    /// Frames `data` with the next id, keeps it, and returns it.
    fn push(&mut self, stream: u64, data: &[u8]) -> Bytes {
        let seq = self.next_seq;
        self.next_seq += 1;
        let framed = sse::post_event(stream, seq, data);
        if self.events.len() >= POST_REPLAY_EVENTS {
            self.events.pop_front();
        }
        self.events.push_back((seq, framed.clone()));
        framed
    }

    /// Every kept event after `seq`, as one chunk.
    fn after(&self, seq: u64) -> Bytes {
        let mut buf = bytes::BytesMut::new();
        for (_, e) in self.events.iter().filter(|(s, _)| *s > seq) {
            buf.extend_from_slice(e);
        }
        buf.freeze()
    }
}

struct SessionGetStream {
    tx: lane::Sender<Bytes>,
    /// Id of the last event handed to this stream.
    cursor: u64,
}

/// Outcome of routing one message.
enum Routed {
    Done,
    /// The stream's channel is full: wait for room; the message comes back to be kept.
    Full(lane::Sender<Bytes>, Outbound),
}

/// Everything needed to start a session actor.
pub(crate) struct SessionSpawn {
    pub id: String,
    pub client: ClientId,
    pub view: ViewId,
    pub outbox: Arc<Outbox>,
    pub hub: ClientLink,
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
    lane::Sender<SessionCmd>,
) {
    let (cmd_tx, cmd_rx) = lane::channel(CMD_QUEUE);
    s.sessions.lock().unwrap_or_else(|p| p.into_inner()).insert(
        s.id.clone(),
        SessionEntry {
            cmd: cmd_tx.clone(),
            client: s.client,
            view: s.view,
            version: None,
        },
    );
    let actor = SessionActor {
        replay: ReplayBuffer::new(s.replay_events),
        delivered: 0,
        posts: HashMap::new(),
        finished: VecDeque::new(),
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

struct SessionActor {
    replay: ReplayBuffer<Outbound>,
    /// Highest event id handed to any GET stream (events above it were never sent).
    delivered: u64,
    posts: HashMap<u64, SessionPost>,
    /// Detached POST streams that got their response, kept for a resuming GET.
    finished: VecDeque<(u64, SessionPost)>,
    /// Pending request id → key in `posts`.
    by_id: HashMap<RawId, u64>,
    next_post: u64,
    get: Option<SessionGetStream>,
    /// Drained from the outbox, not yet routed (only non-empty while a stream is full).
    backlog: VecDeque<Outbound>,
    last_activity: Instant,
    client: ClientId,
}

impl SessionActor {
    #[allow(clippy::too_many_arguments)]
    async fn run(
        mut self,
        id: String,
        mut cmds: lane::Receiver<SessionCmd>,
        outbox: Arc<Outbox>,
        hub: ClientLink,
        sessions: SessionMap,
        idle: Duration,
        shutdown: CancellationToken,
    ) {
        let mut done_tx = None;
        let cancelled = shutdown.cancelled(); // once, not per wake-up (two locks each)
        tokio::pin!(cancelled);
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
                    if self.backlog.is_empty() {
                        // Takes the batch's buffer (no copy).
                        self.backlog = VecDeque::from(batch);
                    } else {
                        self.backlog.extend(batch);
                    }
                    blocked = self.flush();
                }
                self.release_idle_buffers();
            }
            let get_tx = self.get.as_ref().map(|g| g.tx.clone());
            let idle_at = self.is_idle().then(|| self.last_activity + idle);
            tokio::select! {
                biased;
                () = &mut cancelled => {
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
        self.finished.clear();
        self.get = None;
        debug!(client.id = %self.client, reason, "HTTP session ended");
        hub.client_closed(self.client, reason).await;
        if let Some(done) = done_tx {
            let _ = done.send(());
        }
    }

    /// Gives back the buffers of queues that emptied, so an idle session keeps none
    /// (docs/architecture.md, "Streamable HTTP": memory per session). Each is
    /// reallocated on next use: once per batch or per POST, never per event.
    fn release_idle_buffers(&mut self) {
        if self.backlog.is_empty() && self.backlog.capacity() > 0 {
            self.backlog = VecDeque::new();
        }
        if self.posts.is_empty() && self.posts.capacity() > 0 {
            self.posts = HashMap::new();
        }
        if self.by_id.is_empty() && self.by_id.capacity() > 0 {
            self.by_id = HashMap::new();
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
            SessionCmd::Get {
                last_event_id: Some(LastEventId::Post { stream, seq }),
                tx,
                ack,
            } => {
                let _ = ack.send(self.resume_post(stream, seq, tx));
            }
            SessionCmd::Get {
                last_event_id,
                tx,
                ack,
            } => {
                let cursor = match last_event_id {
                    Some(LastEventId::Get(n)) => {
                        let n = n.min(self.replay.last_id());
                        if self.replay.oldest_id().is_some_and(|o| o > n + 1) {
                            warn!(client.id = %self.client, last_event_id = n,
                                "replay buffer no longer holds every event after Last-Event-ID");
                        }
                        n
                    }
                    _ => self.delivered,
                };
                // Replacing the sender closes the previous GET stream.
                self.get = Some(SessionGetStream { tx, cursor });
                let _ = ack.send(true);
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
        let mut replay = None;
        if sink.sse {
            // The priming event: an id to resume from before anything else is sent.
            let mut r = PostReplay::default();
            let priming = r.push(key, b"");
            let _ = sink.tx.try_send(priming);
            replay = Some(r);
        }
        self.posts.insert(
            key,
            SessionPost {
                sink,
                remaining: ids.len(),
                replay,
                detached: false,
            },
        );
        Ok(())
    }

    /// A GET names event `seq` of POST stream `stream`: it receives what followed and
    /// then the rest of the stream. `false` when that stream is not kept.
    fn resume_post(&mut self, stream: u64, seq: u64, tx: lane::Sender<Bytes>) -> bool {
        let (post, finished) = match self.posts.get_mut(&stream) {
            Some(p) => (p, false),
            None => match self.finished.iter_mut().find(|(k, _)| *k == stream) {
                Some((_, p)) => (p, true),
                None => return false,
            },
        };
        let Some(replay) = &post.replay else {
            return false;
        };
        let missed = replay.after(seq);
        if !missed.is_empty() && tx.try_send(missed).is_err() {
            return false;
        }
        debug!(client.id = %self.client, stream, seq, "POST stream resumed");
        if finished {
            // Everything is sent: dropping `tx` ends the resumed stream.
            self.finished.retain(|(k, _)| *k != stream);
        } else {
            post.sink.tx = tx;
            post.detached = false;
        }
        true
    }

    /// Routes the backlog, then hands the GET stream what it has not seen. Returns the
    /// sender to wait on when a stream is full.
    ///
    /// While a GET stream is attached, the replay buffer never holds more events that
    /// stream has not received than it can keep: before it would, the stream is fed, and
    /// when the stream is full the backlog waits (the outbox then applies its coalescing
    /// policy). Routing a whole drained batch first would evict undelivered events —
    /// lose them — whenever a burst outgrew `listen.sse_replay_events`.
    fn flush(&mut self) -> Option<lane::Sender<Bytes>> {
        while let Some(out) = self.backlog.pop_front() {
            let unsent = self
                .get
                .as_ref()
                .map_or(0, |g| self.replay.last_id().saturating_sub(g.cursor));
            if unsent >= self.replay.cap() {
                if let Some(tx) = self.feed_get() {
                    self.backlog.push_front(out);
                    return Some(tx);
                }
            }
            // By value: a message held for replay keeps the backlog's reference rather
            // than taking one more (every holder's count is one shared atomic).
            if let Routed::Full(tx, out) = self.route(out) {
                self.backlog.push_front(out);
                return Some(tx);
            }
        }
        self.feed_get()
    }

    /// Hands the GET stream, as one chunk, every held event it has not received.
    /// Returns its sender when its channel is full.
    fn feed_get(&mut self) -> Option<lane::Sender<Bytes>> {
        let get = self.get.as_mut()?;
        let (chunk, last) = self.replay.chunk_after(get.cursor)?;
        match get.tx.try_send(chunk) {
            Ok(()) => {
                get.cursor = last;
                self.delivered = self.delivered.max(last);
                None
            }
            Err(lane::TrySendError::Full(_)) => Some(get.tx.clone()),
            Err(lane::TrySendError::Closed(_)) => {
                self.get = None;
                None
            }
        }
    }

    fn route(&mut self, out: Outbound) -> Routed {
        let is_response = matches!(out.kind, OutKind::Response | OutKind::Release);
        let key = out
            .related
            .as_ref()
            .and_then(|id| self.by_id.get(id))
            .copied();
        let post = key.and_then(|k| self.posts.get_mut(&k).map(|p| (k, p)));
        let Some((key, post)) = post.filter(|(_, p)| is_response || p.sink.sse) else {
            match out.kind {
                OutKind::Response => debug!(client.id = %self.client, id = ?out.related,
                    "response for no waiting POST dropped (never on the GET stream)"),
                // Nothing waits for the cancelled request.
                OutKind::Release => {}
                _ => self.onto_get_stream(out),
            }
            return Routed::Done;
        };
        if !post.detached && post.sink.tx.capacity() == 0 {
            return Routed::Full(post.sink.tx.clone(), out);
        }
        // A cancelled request's POST is answered with "request cancelled".
        let cancelled;
        let data: &[u8] = if out.kind == OutKind::Release {
            let id = out.related.as_ref().expect("a release names its request");
            cancelled = Message::error_response(
                Some(id),
                REQUEST_CANCELLED,
                "Request cancelled by the client",
                None,
            )
            .to_bytes();
            &cancelled
        } else {
            &out.bytes
        };
        let bytes = match &mut post.replay {
            Some(replay) => replay.push(key, data),
            None => Bytes::copy_from_slice(data),
        };
        if !post.detached && post.sink.tx.try_send(bytes).is_err() {
            post.detached = true;
            debug!(client.id = %self.client, stream = key, "POST connection gone; its stream waits for a resume");
        }
        // A JSON answer cannot be resumed: as before, keep server requests and progress
        // reachable on the GET stream (a lost response is dropped).
        let onto_get = post.detached && post.replay.is_none() && !is_response;
        if is_response {
            post.remaining -= 1;
            if let Some(id) = &out.related {
                self.by_id.remove(id);
            }
            if post.remaining == 0 {
                let post = self.posts.remove(&key).expect("present");
                if post.detached && post.replay.is_some() {
                    if self.finished.len() >= FINISHED_KEEP {
                        self.finished.pop_front();
                    }
                    self.finished.push_back((key, post));
                }
                // Otherwise dropping the sender ends the POST's SSE stream or JSON wait.
                self.last_activity = Instant::now();
            }
        }
        if onto_get {
            self.onto_get_stream(out);
        }
        Routed::Done
    }

    fn onto_get_stream(&mut self, out: Outbound) {
        let (_, evicted) = self.replay.push(out);
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
async fn wait_room(tx: Option<lane::Sender<Bytes>>) {
    if let Some(tx) = tx {
        tx.room().await;
    }
}

/// Resolves when the receiver of `tx` is dropped.
async fn closed(tx: Option<lane::Sender<Bytes>>) {
    match tx {
        Some(tx) => tx.closed().await,
        None => std::future::pending().await,
    }
}
