//! What an outbox queue holds: one message, or a run of messages the hub queued to many
//! clients in one turn and shares among them (docs/architecture.md, "Fan-out": shared
//! runs).
//!
//! Owns: the run's slice of a shared array and its splitting. Never: copies a message,
//! or takes a reference per message (a holder's share of a run is one reference to the
//! array, however many messages it holds).

use std::sync::Arc;

use super::{OutKind, Outbound};

/// Messages a hub turn queued to several clients alike, shared by them: the hub takes
/// one reference per holder for the lot instead of one per message, and a session
/// keeps the run as it is in its replay buffer. Every message of a run is a
/// notification, and all are related to the same request or all to none (a session's
/// run is related to none, so the session routes it whole to its GET stream; a listen
/// stream's is related to its listen id). A run views `items[start..end]` of its array;
/// a part of it split off still keeps the whole array alive, which is at most one
/// turn's messages.
#[derive(Debug, Clone)]
pub struct Run {
    // Thin (the array's length sits behind the pointer) and u32 bounds (a run is one
    // turn's messages): a queue or replay slot is two words, as `Queued` is.
    items: Arc<Box<[Outbound]>>,
    start: u32,
    /// The end of the view, with [`RELATED`] set when the messages are related to a
    /// request: known without reading the shared array (a session checks every run).
    end: u32,
}

/// The flag bit of [`Run::end`]; the bounds stay below it.
const RELATED: u32 = 1 << 31;

impl Run {
    /// A run of `items`; `None` unless each is a notification and all are related to
    /// the same request (or all to none).
    pub fn new(items: Vec<Outbound>) -> Option<Run> {
        let related = items.first().and_then(|o| o.related.as_ref());
        let plain = items.iter().all(|o| {
            o.related.as_ref() == related
                && matches!(o.kind, OutKind::Notification | OutKind::Coalescible(_))
        });
        let end = u32::try_from(items.len()).ok().filter(|n| *n < RELATED)?;
        let flag = if related.is_some() { RELATED } else { 0 };
        plain.then(|| Run {
            items: Arc::new(items.into_boxed_slice()),
            start: 0,
            end: end | flag,
        })
    }

    fn end(&self) -> u32 {
        self.end & !RELATED
    }

    /// The messages, in order.
    pub fn as_slice(&self) -> &[Outbound] {
        &self.items[self.start as usize..self.end() as usize]
    }

    /// Whether its messages are related to a request (a listen's run) rather than to
    /// none (a session's).
    pub fn is_related(&self) -> bool {
        self.end & RELATED != 0
    }

    pub fn len(&self) -> usize {
        (self.end() - self.start) as usize
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Splits off and returns the first `n` messages (all of them when `n` is larger);
    /// `self` keeps the rest.
    pub fn take_front(&mut self, n: usize) -> Run {
        let cut = self.start + n.min(self.len()) as u32;
        let front = Run {
            items: self.items.clone(),
            start: self.start,
            end: cut | (self.end & RELATED),
        };
        self.start = cut;
        front
    }

    /// Drops the first `n` messages (all of them when `n` is larger).
    pub fn skip_front(&mut self, n: usize) {
        self.start += n.min(self.len()) as u32;
    }
}

/// One entry of an outbox queue, a session's backlog or its replay buffer.
#[derive(Debug, Clone)]
pub enum Queued {
    One(Outbound),
    Run(Run),
}

impl Queued {
    /// How many messages it holds.
    pub fn len(&self) -> usize {
        match self {
            Queued::One(_) => 1,
            Queued::Run(r) => r.len(),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Its messages, in order.
    pub fn as_slice(&self) -> &[Outbound] {
        match self {
            Queued::One(o) => std::slice::from_ref(o),
            Queued::Run(r) => r.as_slice(),
        }
    }

    /// Appends its messages to `out`: moved when it is one, shared (a reference each)
    /// when it is a run.
    pub fn flatten_into(self, out: &mut Vec<Outbound>) {
        match self {
            Queued::One(o) => out.push(o),
            Queued::Run(r) => out.extend_from_slice(r.as_slice()),
        }
    }
}

impl From<Outbound> for Queued {
    fn from(o: Outbound) -> Queued {
        Queued::One(o)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Bytes;

    fn note(text: &'static str) -> Outbound {
        Outbound::new(
            Bytes::from_static(text.as_bytes()),
            OutKind::Notification,
            None,
        )
    }

    fn texts(q: &[Outbound]) -> Vec<&[u8]> {
        q.iter().map(|o| &o.bytes[..]).collect()
    }

    #[test]
    fn a_run_holds_notifications_of_one_request_or_of_none() {
        let resp = Outbound::new(Bytes::from_static(b"r"), OutKind::Response, None);
        assert!(Run::new(vec![note("a"), resp]).is_none());
        let of = |id: u64| {
            Outbound::new(
                Bytes::from_static(b"p"),
                OutKind::Notification,
                Some(crate::protocol::RawId::from_u64(id)),
            )
        };
        assert!(
            Run::new(vec![note("a"), of(1)]).is_none(),
            "a request and none"
        );
        assert!(Run::new(vec![of(1), of(2)]).is_none(), "two requests");
        let mut listen = Run::new(vec![of(1), of(1)]).unwrap();
        assert!(listen.is_related());
        let front = listen.take_front(1);
        assert!(
            listen.is_related() && front.is_related(),
            "both parts say so"
        );
        assert_eq!((front.len(), listen.len()), (1, 1));
        let plain = Run::new(vec![note("a"), note("b")]).unwrap();
        assert_eq!(plain.len(), 2);
        assert!(!plain.is_related());
    }

    #[test]
    fn a_run_splits_without_copying_and_keeps_order() {
        let mut run = Run::new(vec![note("a"), note("b"), note("c"), note("d")]).unwrap();
        let d: *const Outbound = &run.as_slice()[3];
        let front = run.take_front(1);
        assert_eq!(texts(front.as_slice()), [b"a"]);
        assert_eq!(texts(run.as_slice()), [b"b", b"c", b"d"]);
        run.skip_front(2);
        assert_eq!(texts(run.as_slice()), [b"d"]);
        assert_eq!(
            std::mem::size_of::<Queued>(),
            2 * std::mem::size_of::<usize>()
        );
        let all = run.take_front(9);
        assert_eq!((all.len(), run.is_empty()), (1, true));
        assert!(std::ptr::eq(&all.as_slice()[0], d), "the same message");
        let mut flat = Vec::new();
        Queued::Run(front).flatten_into(&mut flat);
        Queued::One(note("e")).flatten_into(&mut flat);
        assert_eq!(texts(&flat), [b"a", b"e"]);
    }
}
