//! The per-session actor and the state it shares with the session's GET stream.
//!
//! Owns: the session's commands (POST registrations, GET attachments, the end), the
//! routing state ([`SessionActor`]: POSTs, the GET stream's replay buffer and event
//! ids, under one lock with the GET body), draining the outbox while no GET stream is
//! open (an open one's body drains it: `session_get.rs`, docs/architecture.md,
//! "Fan-out"), idle expiry, and the end of the session (exactly one
//! `hub.client_closed`, removal from the session map).
//! Never: blocks the hub (it only drains the outbox; when a stream's channel is full it
//! stops draining and lets the outbox coalesce), puts a response on the GET stream,
//! parses client input, or holds its lock across an await.
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
//! [`posts::POST_REPLAY_EVENTS`]) while it is open. When the client's connection drops, the
//! stream is *detached*: its later messages, the response included, are kept for a GET
//! that names one of its ids in `Last-Event-ID`, which receives what followed that id
//! and then the rest of the stream live. A detached stream that got its response is
//! kept among the last [`posts::FINISHED_KEEP`] such streams. A GET naming a stream that is not
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

use super::replay::ReplayBuffer;
use super::sse::LastEventId;
use crate::downstream::lane;
use crate::downstream::link::ClientLink;
use crate::downstream::outbox::{CloseReason, Outbox, Queued};
use crate::protocol::RawId;
use crate::state::ids::{ClientId, ViewId};

#[path = "session_get.rs"]
mod get;
#[path = "session_posts.rs"]
mod posts;

use posts::{Routed, SessionPost};

/// Depth of the command channel from HTTP handlers to the actor. Handlers wait when it
/// is full, which only slows that one client.
const CMD_QUEUE: usize = 64;

/// Chunks buffered per POST stream (and resumed POST stream) before the session stops
/// draining the outbox. Each chunk may hold many events (`sse::sse_body` merges them),
/// so a small depth suffices.
pub(crate) const STREAM_QUEUE: usize = 16;

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
    /// An SSE stream starts with a priming event (sessions of 2025-11-25 and later).
    pub prime: bool,
}

impl SessionEntry {
    /// Whether the session's protocol version has SSE priming events (SEP-1699,
    /// 2025-11-25): older clients may take an event with empty data for a message.
    pub(crate) fn primes(&self) -> bool {
        self.version.as_deref().is_none_or(|v| v >= "2025-11-25")
    }
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
    /// A GET stream attaches: a plain one replaces any previous one and is answered
    /// with its body; one naming a POST stream's event resumes that stream on `tx`
    /// (a plain GET's `tx` goes unused), or is refused when there is nothing to resume.
    Get {
        last_event_id: Option<LastEventId>,
        tx: lane::Sender<Bytes>,
        ack: oneshot::Sender<GetAck>,
    },
    /// End the session; `done` fires after `client_closed` was sent.
    End {
        reason: &'static str,
        done: Option<oneshot::Sender<()>>,
    },
}

/// The plain GET stream attached to the session: its body drains the outbox itself.
struct SessionGetStream {
    /// Which attachment this is: a newer GET replaces it.
    gen: u64,
    /// Id of the last event handed to this stream.
    cursor: u64,
    /// The body's waker, for a replacement or the session's end.
    waker: Option<std::task::Waker>,
}

/// What the session's actor and its GET stream's body share.
pub(crate) struct Shared {
    actor: Mutex<SessionActor>,
    /// The GET body went: the actor drains the outbox again.
    handback: tokio::sync::Notify,
}

/// The answer to a GET.
#[derive(Debug)]
pub(crate) enum GetAck {
    /// Nothing to resume from the named POST stream.
    Refused,
    /// A POST stream resumed on the channel the GET brought.
    Resumed,
    /// A plain GET: its body.
    Stream(get::GetStream),
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
        next_gen: 0,
        ended: false,
        backlog: VecDeque::new(),
        last_activity: Instant::now(),
        client: s.client,
    };
    let shared = Arc::new(Shared {
        actor: Mutex::new(actor),
        handback: tokio::sync::Notify::new(),
    });
    let span = tracing::debug_span!("http_session", client.id = %s.client);
    let fut = run(
        shared, s.id, cmd_rx, s.outbox, s.hub, s.sessions, s.idle, s.shutdown,
    )
    .instrument(span);
    (fut, cmd_tx)
}

pub(crate) struct SessionActor {
    replay: ReplayBuffer<Queued>,
    /// Highest event id handed to any GET stream (events above it were never sent).
    delivered: u64,
    posts: HashMap<u64, SessionPost>,
    /// Detached POST streams that got their response, kept for a resuming GET.
    finished: VecDeque<(u64, SessionPost)>,
    /// Pending request id → key in `posts`.
    by_id: HashMap<RawId, u64>,
    next_post: u64,
    get: Option<SessionGetStream>,
    next_gen: u64,
    /// The session ended: its GET body ends too.
    ended: bool,
    /// Drained from the outbox, not yet routed (only non-empty while a stream is full).
    backlog: VecDeque<Queued>,
    last_activity: Instant,
    client: ClientId,
}

impl Shared {
    pub(crate) fn lock(&self) -> std::sync::MutexGuard<'_, SessionActor> {
        self.actor.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub(crate) fn handback(&self) -> &tokio::sync::Notify {
        &self.handback
    }
}

#[allow(clippy::too_many_arguments)]
async fn run(
    shared: Arc<Shared>,
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
        // Drain the outbox only when nothing is waiting for room in a stream and no GET
        // body drains it: while blocked, the outbox applies its coalescing policy.
        let (blocked, direct, idle_at) = {
            let mut a = shared.lock();
            let direct = a.get.is_some();
            let mut blocked = None;
            if !direct {
                blocked = a.flush();
                if blocked.is_none() {
                    let mut batch = Vec::new();
                    if let Err(why) = outbox.drain_entries(&mut batch) {
                        break close_reason(&why);
                    }
                    if !batch.is_empty() {
                        a.take_batch(batch);
                        blocked = a.flush();
                    }
                    a.release_idle_buffers();
                }
            }
            let idle_at = a.is_idle().then(|| a.last_activity + idle);
            (blocked, direct, idle_at)
        };
        tokio::select! {
            biased;
            () = &mut cancelled => {
                // Answers the hub queued before the end (the shutdown drain's)
                // still reach their POSTs.
                let mut batch = Vec::new();
                if outbox.drain_entries(&mut batch).is_ok() {
                    let mut a = shared.lock();
                    a.backlog.extend(batch);
                    a.flush();
                }
                break "shutdown";
            }
            cmd = cmds.recv() => match cmd {
                Some(SessionCmd::End { reason, done }) => {
                    done_tx = done;
                    break reason;
                }
                Some(cmd) => {
                    let attach = shared.lock().handle(cmd, &shared, &outbox, &shutdown);
                    // Answered with the lock released: a body the handler no longer
                    // waits for is dropped here, and its drop takes the lock.
                    if let Some((ack, body)) = attach {
                        let _ = ack.send(GetAck::Stream(body));
                    }
                }
                None => break "closed",
            },
            _ = wait_room(blocked.clone()), if blocked.is_some() => {}
            // While blocked, a wake-up only matters if the hub closed the outbox.
            _ = outbox.ready(), if !direct => {
                if blocked.is_some() && outbox.is_closed() {
                    break "client too slow (outbox closed)";
                }
            }
            // The GET body drains; a close must end the session even while the
            // body is not polled (its client does not read).
            why = std::future::poll_fn(|cx| outbox.poll_closed(cx)), if direct => {
                break close_reason(&why);
            }
            () = shared.handback.notified() => {}
            _ = tokio::time::sleep_until(idle_at.unwrap_or_else(Instant::now)),
                if idle_at.is_some() => break "idle expiry",
        }
    };
    sessions
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .remove(&id);
    outbox.close(CloseReason::Closed);
    let client = {
        let mut a = shared.lock();
        // Dropping the senders ends every open stream of this session.
        a.posts.clear();
        a.finished.clear();
        a.ended = true;
        if let Some(w) = a.get.take().and_then(|g| g.waker) {
            w.wake();
        }
        a.client
    };
    debug!(client.id = %client, reason, "HTTP session ended");
    hub.client_closed(client, reason).await;
    if let Some(done) = done_tx {
        let _ = done.send(());
    }
}

impl SessionActor {
    /// Gives back the buffers of queues that emptied, so an idle session keeps none
    /// (docs/architecture.md, "Streamable HTTP": memory per session). Each is
    /// reallocated on next use: once per batch or per POST, never per event.
    pub(crate) fn release_idle_buffers(&mut self) {
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

    fn handle(
        &mut self,
        cmd: SessionCmd,
        shared: &Arc<Shared>,
        outbox: &Arc<Outbox>,
        shutdown: &CancellationToken,
    ) -> Option<(oneshot::Sender<GetAck>, get::GetStream)> {
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
                let _ = ack.send(if self.resume_post(stream, seq, tx) {
                    GetAck::Resumed
                } else {
                    GetAck::Refused
                });
            }
            SessionCmd::Get {
                last_event_id,
                tx: _,
                ack,
            } => {
                let cursor = match last_event_id {
                    Some(LastEventId::Get(n)) => {
                        // Past what any stream received, the id cannot name an
                        // event the client saw (an earlier session's, or made up).
                        let n = n.min(self.delivered);
                        if self.replay.oldest_id().is_some_and(|o| o > n + 1) {
                            warn!(client.id = %self.client, last_event_id = n,
                                "replay buffer no longer holds every event after Last-Event-ID");
                        }
                        n
                    }
                    _ => self.delivered,
                };
                // A newer attachment ends the previous GET stream's body.
                if let Some(w) = self.get.take().and_then(|g| g.waker) {
                    w.wake();
                }
                self.next_gen += 1;
                let gen = self.next_gen;
                self.get = Some(SessionGetStream {
                    gen,
                    cursor,
                    waker: None,
                });
                let body =
                    get::GetStream::new(shared.clone(), outbox.clone(), gen, shutdown.clone());
                return Some((ack, body));
            }
            // The run loop handles `End` itself before calling here.
            SessionCmd::End { .. } => {}
        }
        None
    }

    /// Routes the backlog. Returns the POST stream's sender to wait on when one is
    /// full. With a GET stream attached, stops (returning `None`) before the replay
    /// buffer would hold more events that stream has not received than it keeps:
    /// routing a whole drained batch first would evict undelivered events — lose them
    /// — whenever a burst outgrew `listen.sse_replay_events`.
    pub(crate) fn flush(&mut self) -> Option<lane::Sender<Bytes>> {
        while let Some(entry) = self.backlog.pop_front() {
            let unsent = self
                .get
                .as_ref()
                .map_or(0, |g| self.replay.last_id().saturating_sub(g.cursor));
            if unsent >= self.replay.cap() {
                self.backlog.push_front(entry);
                return None;
            }
            // By value: a message held for replay keeps the backlog's reference rather
            // than taking one more (every holder's count is one shared atomic).
            match entry {
                Queued::One(out) => {
                    if let Routed::Full(tx, out) = self.route(out) {
                        self.backlog.push_front(Queued::One(out));
                        return Some(tx);
                    }
                }
                // A run related to a request (the hub queues a session none): routed
                // message by message.
                Queued::Run(run) if run.is_related() => {
                    for out in run.as_slice().iter().rev() {
                        self.backlog.push_front(Queued::One(out.clone()));
                    }
                }
                // A run of notifications related to no request: all for the GET
                // stream, as much of it as the bound lets through now.
                Queued::Run(mut run) => {
                    let room = usize::try_from(self.replay.cap() - unsent).unwrap_or(usize::MAX);
                    if run.len() > room {
                        let front = run.take_front(room);
                        self.backlog.push_front(Queued::Run(run));
                        self.onto_get_stream(Queued::Run(front));
                    } else {
                        self.onto_get_stream(Queued::Run(run));
                    }
                }
            }
        }
        None
    }

    /// Every held event the GET stream `gen` has not received, as one chunk. `None`
    /// when there is none; `Err` when that stream was replaced or the session ended.
    pub(crate) fn take_for_get(
        &mut self,
        gen: u64,
        waker: &std::task::Waker,
    ) -> Result<Option<Bytes>, ()> {
        if self.ended {
            return Err(());
        }
        let get = match self.get.as_mut() {
            Some(g) if g.gen == gen => g,
            _ => return Err(()),
        };
        if !get.waker.as_ref().is_some_and(|w| w.will_wake(waker)) {
            get.waker = Some(waker.clone());
        }
        let Some((chunk, last)) = self.replay.chunk_after(get.cursor) else {
            return Ok(None);
        };
        get.cursor = last;
        self.delivered = self.delivered.max(last);
        Ok(Some(chunk))
    }

    /// Whether the GET body `gen` is the session's open GET stream.
    pub(crate) fn attached(&self, gen: u64) -> bool {
        !self.ended && self.get.as_ref().is_some_and(|g| g.gen == gen)
    }

    /// The GET body `gen` went away.
    pub(crate) fn detach_get(&mut self, gen: u64) {
        if self.get.as_ref().is_some_and(|g| g.gen == gen) {
            self.get = None;
            self.last_activity = Instant::now();
        }
    }

    pub(crate) fn has_backlog(&self) -> bool {
        !self.backlog.is_empty()
    }

    /// Queues what was drained from the outbox behind the backlog (an empty backlog
    /// takes the batch's buffer, no copy).
    pub(crate) fn take_batch(&mut self, batch: Vec<Queued>) {
        if self.backlog.is_empty() {
            self.backlog = VecDeque::from(batch);
        } else {
            self.backlog.extend(batch);
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
