//! The bounded buffer of a session's GET-stream events, kept for `Last-Event-ID`
//! resumption, and their framing on hand-over (docs/architecture.md, "Fan-out": held
//! events and framing; "Streamable HTTP").
//!
//! Owns: event ids (strictly increasing from 1 per session, contiguous over what is
//! held), the bound (at most `cap` events; the oldest go first, a shared run is split
//! without a copy), and one framed chunk per hand-over. Never: copies an event's bytes
//! to hold it, or decides routing (the session's job). Pure, unit-tested without tokio.

use std::collections::VecDeque;

use bytes::{Bytes, BytesMut};

use super::decimal::Decimal;
use super::sse::{write_framed, FRAMING};
use crate::downstream::outbox::{Outbound, Queued};

/// An event the replay buffer holds: its data, and whether that data is known to be
/// one line (so framing it need not scan it).
pub(crate) trait EventData: AsRef<[u8]> {
    fn one_line(&self) -> bool {
        false
    }
}

impl EventData for Outbound {
    fn one_line(&self) -> bool {
        self.one_line
    }
}

impl EventData for Bytes {}
impl EventData for String {}
impl EventData for &[u8] {}
impl<const N: usize> EventData for &[u8; N] {}

/// What the replay buffer keeps per entry: one event, or a run of them shared with
/// other sessions ([`Queued`]).
pub(crate) trait HeldEvents {
    type Event: EventData;
    /// Its events, in id order.
    fn events(&self) -> &[Self::Event];
    /// How many events it holds (without reading them).
    fn count(&self) -> usize {
        self.events().len()
    }
    /// Drops its first `n` events (fewer than it holds).
    fn skip_front(&mut self, n: usize);
}

impl<T: EventData> HeldEvents for T {
    type Event = T;
    fn events(&self) -> &[T] {
        std::slice::from_ref(self)
    }
    fn skip_front(&mut self, n: usize) {
        debug_assert_eq!(n, 0, "one event is kept or dropped whole");
    }
}

impl HeldEvents for Queued {
    type Event = Outbound;
    fn events(&self) -> &[Outbound] {
        self.as_slice()
    }
    fn count(&self) -> usize {
        self.len()
    }
    fn skip_front(&mut self, n: usize) {
        match self {
            Queued::Run(run) => run.skip_front(n),
            Queued::One(_) => debug_assert_eq!(n, 0, "one event is kept or dropped whole"),
        }
    }
}

/// The GET stream's events with their ids, bounded for replay.
///
/// Each held event is the message itself as the hub queued it (`T` is the session's
/// [`Queued`]: one reference to the bytes every holder of that update shares, or to a
/// run of them, never a per-session copy). An event is framed (`id:` + `data:`) only
/// when a stream is handed it, into one chunk per hand-over that lives until it is
/// written. So a burst to N sessions keeps one copy of each update in memory, not N
/// framed ones, and the framing buffers are short-lived and reused by the allocator
/// (docs/architecture.md, "Fan-out": held events and framing).
///
/// Ids are contiguous: the held events, entry after entry, have the ids
/// `last_id - held + 1 ..= last_id`.
#[derive(Debug)]
pub(crate) struct ReplayBuffer<T> {
    cap: usize,
    /// Held entries in id order.
    entries: VecDeque<T>,
    /// Events the entries hold (at most `cap`).
    held: usize,
    /// Id of the last event pushed (0 before the first).
    last_id: u64,
}

impl<T: HeldEvents> ReplayBuffer<T> {
    pub(crate) fn new(cap: usize) -> Self {
        ReplayBuffer {
            cap: cap.max(1),
            entries: VecDeque::new(),
            held: 0,
            last_id: 0,
        }
    }

    /// Keeps the events of `entry` under the next ids. Returns the last id and, when
    /// the bound forced older events out (or the first of `entry`'s own, when it holds
    /// more than the bound), the highest id that went.
    pub(crate) fn push(&mut self, mut entry: T) -> (u64, Option<u64>) {
        let mut n = entry.count();
        let mut evicted = None;
        if n > self.cap {
            // Everything held goes, and the first of the entry's own events too.
            let over = n - self.cap;
            entry.skip_front(over);
            self.entries.clear();
            self.held = 0;
            self.last_id += over as u64;
            evicted = Some(self.last_id);
            n = self.cap;
        }
        let excess = (self.held + n).saturating_sub(self.cap);
        if excess > 0 {
            evicted = Some(self.last_id - self.held as u64 + excess as u64);
            self.held -= excess;
            let mut left = excess;
            while left > 0 {
                let front = self.entries.front_mut().expect("held events");
                let len = front.count();
                if len <= left {
                    self.entries.pop_front();
                    left -= len;
                } else {
                    front.skip_front(left);
                    left = 0;
                }
            }
        }
        if n > 0 {
            self.last_id += n as u64;
            self.held += n;
            self.entries.push_back(entry);
        }
        (self.last_id, evicted)
    }

    pub(crate) fn last_id(&self) -> u64 {
        self.last_id
    }

    /// How many events it keeps.
    pub(crate) fn cap(&self) -> u64 {
        self.cap as u64
    }

    /// Id of the oldest event still held.
    pub(crate) fn oldest_id(&self) -> Option<u64> {
        (self.held > 0).then(|| self.last_id + 1 - self.held as u64)
    }

    /// All held events with an id greater than `after`, framed into one chunk, and the
    /// id of the last one. `None` when there is nothing newer.
    pub(crate) fn chunk_after(&self, after: u64) -> Option<(Bytes, u64)> {
        let first = self.oldest_id()?;
        let skip = after.saturating_add(1).saturating_sub(first);
        let skip = usize::try_from(skip).unwrap_or(usize::MAX);
        if skip >= self.held {
            return None;
        }
        // Found from the newest end: a hand-over takes the few newest entries.
        let mut need = self.held - skip;
        let mut from = self.entries.len();
        let mut cut = 0;
        while need > 0 {
            from -= 1;
            let len = self.entries[from].count();
            if len >= need {
                cut = len - need;
                need = 0;
            } else {
                need -= len;
            }
        }
        let run = self
            .entries
            .range(from..)
            .enumerate()
            .flat_map(move |(i, e)| &e.events()[if i == 0 { cut } else { 0 }..]);
        // Room for each event's framing too, so a burst's chunk is allocated once.
        let total = run.clone().map(|e| e.as_ref().len() + FRAMING).sum();
        let mut buf = BytesMut::with_capacity(total);
        let mut id = Decimal::new(first + skip as u64);
        for e in run {
            write_framed(&mut buf, Some(id.as_bytes()), e.as_ref(), e.one_line());
            id.step();
        }
        Some((buf.freeze(), self.last_id))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::downstream::http::sse::event;

    fn text(b: &[u8]) -> &str {
        std::str::from_utf8(b).unwrap()
    }

    #[test]
    fn an_empty_buffer_has_nothing() {
        let r = ReplayBuffer::<Bytes>::new(4);
        assert!(r.chunk_after(0).is_none());
        assert_eq!(r.oldest_id(), None);
    }

    #[test]
    fn replay_buffer_assigns_monotonic_ids_and_drops_oldest() {
        let mut r = ReplayBuffer::new(2);
        assert_eq!(r.push(b"1"), (1, None));
        assert_eq!(r.push(b"2"), (2, None));
        assert_eq!(r.push(b"3"), (3, Some(1)));
        assert_eq!(r.oldest_id(), Some(2));
        assert_eq!(r.last_id(), 3);
    }

    #[test]
    fn a_message_known_to_be_one_line_frames_like_any_other() {
        use crate::downstream::outbox::OutKind;
        let one = Outbound::new(
            Bytes::from_static(b"{\"a\":1}"),
            OutKind::Notification,
            None,
        );
        let many = Outbound::new(
            Bytes::from_static(b"{\n\"a\":1}"),
            OutKind::Notification,
            None,
        );
        assert!(one.one_line && !many.one_line);
        let mut r = ReplayBuffer::new(4);
        r.push(one);
        r.push(many);
        let (chunk, _) = r.chunk_after(0).unwrap();
        let mut want = event(Some(1), b"{\"a\":1}").to_vec();
        want.extend_from_slice(&event(Some(2), b"{\n\"a\":1}"));
        assert_eq!(text(&chunk), text(&want));
        assert!(text(&chunk).ends_with("id: 2\ndata: {\ndata: \"a\":1}\n\n"));
    }

    #[test]
    fn chunk_after_concatenates_newer_events() {
        let mut r = ReplayBuffer::new(10);
        for d in [b"a", b"b", b"c"] {
            r.push(d);
        }
        let (chunk, last) = r.chunk_after(1).unwrap();
        assert_eq!(text(&chunk), "id: 2\ndata: b\n\nid: 3\ndata: c\n\n");
        assert_eq!(last, 3);
        assert!(r.chunk_after(3).is_none());
        assert!(r.chunk_after(99).is_none());
        assert_eq!(r.chunk_after(0).unwrap().1, 3);
    }

    #[test]
    fn chunk_after_an_evicted_id_starts_at_the_oldest_held() {
        let mut r = ReplayBuffer::new(2);
        for d in [b"a", b"b", b"c", b"d"] {
            r.push(d);
        }
        let (chunk, last) = r.chunk_after(1).unwrap();
        assert_eq!(text(&chunk), "id: 3\ndata: c\n\nid: 4\ndata: d\n\n");
        assert_eq!(last, 4);
    }

    #[test]
    fn a_hand_over_frames_every_newer_event_each_time_it_is_asked() {
        let mut r = ReplayBuffer::new(10);
        r.push(b"a");
        r.push(b"b");
        assert_eq!(r.chunk_after(0).unwrap().1, 2);
        r.push(b"c");
        r.push(b"d");
        let (second, last) = r.chunk_after(2).unwrap();
        assert_eq!(text(&second), "id: 3\ndata: c\n\nid: 4\ndata: d\n\n");
        assert_eq!(last, 4);
        // Asked again (a resuming GET), the same bytes come back.
        assert_eq!(r.chunk_after(2).unwrap().0, second);
        // A run over two hand-overs is one chunk.
        assert_eq!(
            text(&r.chunk_after(1).unwrap().0),
            "id: 2\ndata: b\n\nid: 3\ndata: c\n\nid: 4\ndata: d\n\n"
        );
    }

    #[test]
    fn held_events_are_the_shared_messages_not_copies() {
        let shared = Bytes::from_static(b"{}");
        let mut r = ReplayBuffer::new(2);
        r.push(shared.clone());
        r.push(shared.clone());
        r.push(shared.clone());
        assert_eq!(r.entries.len(), 2);
        assert!(r.entries.iter().all(|e| e.as_ptr() == shared.as_ptr()));
        assert_eq!(
            text(&r.chunk_after(0).unwrap().0),
            "id: 2\ndata: {}\n\nid: 3\ndata: {}\n\n"
        );
    }

    #[test]
    fn multi_line_events_fit_the_hand_over() {
        let mut r = ReplayBuffer::new(4);
        r.push(&b"{\n\"a\":\n1\n}"[..]);
        assert_eq!(
            text(&r.chunk_after(0).unwrap().0),
            "id: 1\ndata: {\ndata: \"a\":\ndata: 1\ndata: }\n\n"
        );
    }

    #[test]
    fn eviction_counts_from_the_oldest_held() {
        let mut r = ReplayBuffer::new(2);
        assert_eq!(r.oldest_id(), None);
        assert_eq!(r.push(b"a"), (1, None));
        assert_eq!(r.oldest_id(), Some(1));
        assert_eq!(r.push(b"b"), (2, None));
        assert_eq!(r.push(b"c"), (3, Some(1)));
        assert_eq!(r.oldest_id(), Some(2));
        assert_eq!(
            text(&r.chunk_after(0).unwrap().0),
            "id: 2\ndata: b\n\nid: 3\ndata: c\n\n"
        );
    }

    /// `chunk_after(after)` of `r` is what the per-event `model` (each event framed as
    /// its own buffer, with its id) holds after `after`.
    fn chunk_matches<T: HeldEvents>(
        r: &ReplayBuffer<T>,
        model: &VecDeque<(u64, Bytes)>,
        after: u64,
    ) -> Result<(), proptest::test_runner::TestCaseError> {
        let want: Vec<u8> = model
            .iter()
            .filter(|(id, _)| *id > after)
            .flat_map(|(_, ev)| ev.iter().copied())
            .collect();
        let got = r.chunk_after(after);
        proptest::prop_assert_eq!(got.is_none(), want.is_empty());
        if let Some((chunk, last)) = got {
            proptest::prop_assert_eq!(&chunk[..], &want[..]);
            proptest::prop_assert_eq!(last, model.back().unwrap().0);
        }
        Ok(())
    }

    proptest::proptest! {
        /// Against a model that keeps every event framed as its own buffer: the same
        /// ids, the same evictions, the same bytes for every `chunk_after`.
        #[test]
        fn replay_buffer_matches_a_per_event_model(
            cap in 1usize..6,
            ops in proptest::collection::vec(proptest::option::of(0u64..12), 1..40),
        ) {
            let mut r = ReplayBuffer::new(cap);
            let mut model: VecDeque<(u64, Bytes)> = VecDeque::new();
            let mut next = 1u64;
            for op in ops {
                match op {
                    None => {
                        // Every third event spans lines, as a pretty-printing peer's would.
                        let data = if next.is_multiple_of(3) { format!("e\n{next}") } else { format!("e{next}") };
                        let evicted = (model.len() >= cap).then(|| model.pop_front().unwrap().0);
                        model.push_back((next, event(Some(next), data.as_bytes())));
                        proptest::prop_assert_eq!(r.push(data), (next, evicted));
                        next += 1;
                    }
                    Some(after) => chunk_matches(&r, &model, after)?,
                }
                proptest::prop_assert_eq!(r.oldest_id(), model.front().map(|e| e.0));
            }
        }
    }

    proptest::proptest! {
        /// Entries that are runs of events (shared with other sessions, split by the
        /// bound) against the same per-event model: the same ids, evictions and bytes.
        #[test]
        fn a_buffer_of_runs_matches_a_per_event_model(
            cap in 1usize..8,
            ops in proptest::collection::vec((0usize..6, 0u64..14), 1..40),
        ) {
            use crate::downstream::outbox::{OutKind, Run};
            let mut r = ReplayBuffer::<Queued>::new(cap);
            let mut model: VecDeque<(u64, Bytes)> = VecDeque::new();
            let mut next = 1u64;
            for (len, after) in ops {
                if len == 0 {
                    chunk_matches(&r, &model, after)?;
                    continue;
                }
                let mut items = Vec::new();
                let mut evicted = None;
                for _ in 0..len {
                    let data = if next.is_multiple_of(3) { format!("e\n{next}") } else { format!("e{next}") };
                    if model.len() >= cap {
                        evicted = Some(model.pop_front().unwrap().0);
                    }
                    model.push_back((next, event(Some(next), data.as_bytes())));
                    items.push(Outbound::new(Bytes::from(data), OutKind::Notification, None));
                    next += 1;
                }
                // One event alone is pushed as such, as a session does.
                let entry = if len == 1 {
                    Queued::One(items.pop().unwrap())
                } else {
                    Queued::Run(Run::new(items).unwrap())
                };
                proptest::prop_assert_eq!(r.push(entry), (next - 1, evicted));
                proptest::prop_assert_eq!(r.oldest_id(), model.front().map(|e| e.0));
            }
        }
    }
}
