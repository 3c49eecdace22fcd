//! The POST side of a session (docs/architecture.md, "Streamable HTTP"): the POSTs
//! waiting for their answers, resumable POST streams (SEP-1699) and the routing of
//! each message the hub queued to the POST that waits for it or to the GET stream.
//! Part of the session actor's state ([`SessionActor`]); whoever drains the outbox
//! (the actor, or the GET stream's body while one is open) routes through here.
//!
//! Never: waits (a full POST stream is reported back as [`Routed::Full`]), or puts a
//! response on the GET stream.

use bytes::Bytes;
use std::collections::VecDeque;
use tokio::time::Instant;
use tracing::{debug, warn};

use super::{PostSink, SessionActor};
use crate::downstream::http::sse;
use crate::downstream::lane;
use crate::downstream::outbox::{OutKind, Outbound, Queued};
use crate::protocol::{Message, RawId};

/// Events of one POST's SSE answer kept for a resuming GET.
pub(crate) const POST_REPLAY_EVENTS: usize = 64;

/// Detached POST streams kept, after their response, for a resuming GET.
pub(crate) const FINISHED_KEEP: usize = 16;

/// The JSON-RPC code of the answer a cancelled request's POST gets.
const REQUEST_CANCELLED: i64 = -32800;

pub(super) struct SessionPost {
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
pub(super) struct PostReplay {
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

/// Outcome of routing one message.
pub(super) enum Routed {
    Done,
    /// The stream's channel is full: wait for room; the message comes back to be kept.
    Full(lane::Sender<Bytes>, Outbound),
}

impl SessionActor {
    pub(super) fn register(
        &mut self,
        ids: Vec<RawId>,
        sink: Option<PostSink>,
    ) -> Result<(), RawId> {
        if ids.is_empty() {
            return Ok(());
        }
        let Some(sink) = sink else {
            return Ok(());
        };
        let mut batch = std::collections::HashSet::with_capacity(ids.len());
        for id in &ids {
            if self.by_id.contains_key(id) || !batch.insert(id) {
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
            // The priming event: an id to resume from before anything else is sent
            // (2025-11-25 on; older clients may take its empty data for a message, so
            // they are not sent it, and the stream's numbering stays the same).
            let mut r = PostReplay::default();
            let priming = r.push(key, b"");
            if sink.prime {
                let _ = sink.tx.try_send(priming);
            }
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
    pub(super) fn resume_post(&mut self, stream: u64, seq: u64, tx: lane::Sender<Bytes>) -> bool {
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

    pub(super) fn route(&mut self, out: Outbound) -> Routed {
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

    pub(super) fn onto_get_stream(&mut self, out: impl Into<Queued>) {
        let (_, evicted) = self.replay.push(out.into());
        if let Some(old) = evicted.filter(|old| *old > self.delivered) {
            warn!(client.id = %self.client, event_id = old,
                "GET replay buffer full: oldest undelivered event dropped \
                 (listen.sse_replay_events)");
        }
    }
}
