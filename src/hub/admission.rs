//! Admission: the handshakes that wait for the upstreams' first start, and the shutdown
//! drain (docs/architecture.md, "Sharing one upstream session" (Handshake) and
//! "Shutdown").
//!
//! Owns the waiting handshakes (a client's `initialize`, or a stateless client's one
//! request, held until no upstream is on its first start), whether the drain started
//! (new clients and requests are then refused) and who waits for it to end. The hub
//! decides when to admit, answer or refuse; this part only keeps the state.
//!
//! Never answers anyone, never waits: a drain is a deadline the hub's loop checks.

use tokio::sync::oneshot;

use crate::protocol::Message;
use crate::state::ids::ClientId;

/// The hub's part for admission: waiting handshakes and the shutdown drain.
#[derive(Debug, Default)]
pub(super) struct Admission {
    /// Requests waiting for the first start of every upstream, in arrival order.
    waiting: Vec<(ClientId, Message)>,
    /// The drain started: new clients and requests are refused.
    draining: bool,
    /// Who waits for the drain to end (told how many requests were cut).
    drain_done: Option<oneshot::Sender<usize>>,
}

impl Admission {
    /// A handshake waits for the upstreams' first start.
    pub(super) fn defer(&mut self, client: ClientId, msg: Message) {
        self.waiting.push((client, msg));
    }

    /// Every waiting handshake, in arrival order, taken out.
    pub(super) fn take_waiting(&mut self) -> Vec<(ClientId, Message)> {
        std::mem::take(&mut self.waiting)
    }

    /// The client left: its waiting handshake goes.
    pub(super) fn forget(&mut self, client: ClientId) {
        self.waiting.retain(|(c, _)| *c != client);
    }

    /// Whether shutdown began (new clients and requests are refused).
    pub(super) fn draining(&self) -> bool {
        self.draining
    }

    /// Shutdown begins; `done` is told when it ends. Hands back the waiting handshakes,
    /// which will never be served.
    pub(super) fn start_drain(&mut self, done: oneshot::Sender<usize>) -> Vec<(ClientId, Message)> {
        self.draining = true;
        self.drain_done = Some(done);
        self.take_waiting()
    }

    /// Whether someone waits for the drain to end.
    pub(super) fn drain_awaited(&self) -> bool {
        self.drain_done.is_some()
    }

    /// The drain ends: who waited for it, once.
    pub(super) fn finish_drain(&mut self) -> Option<oneshot::Sender<usize>> {
        self.drain_done.take()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::RawId;

    fn request(n: u64) -> Message {
        Message::request(&RawId::from_u64(n), "initialize", None)
    }

    #[test]
    fn waiting_handshakes_come_back_in_order_without_those_of_clients_gone() {
        let mut a = Admission::default();
        a.defer(ClientId(1), request(1));
        a.defer(ClientId(2), request(2));
        a.defer(ClientId(3), request(3));
        a.forget(ClientId(2));
        let ids: Vec<(ClientId, Option<u64>)> = a
            .take_waiting()
            .iter()
            .map(|(c, m)| (*c, m.id().and_then(RawId::as_u64)))
            .collect();
        assert_eq!(ids, [(ClientId(1), Some(1)), (ClientId(3), Some(3))]);
        assert!(a.take_waiting().is_empty());
    }

    #[test]
    fn a_drain_refuses_from_its_start_hands_back_the_waiting_and_ends_once() {
        let mut a = Admission::default();
        a.defer(ClientId(1), request(1));
        assert!(!a.draining() && !a.drain_awaited());
        let (tx, mut rx) = oneshot::channel();
        let waiting = a.start_drain(tx);
        assert_eq!(waiting.len(), 1);
        assert!(a.draining() && a.drain_awaited());
        a.finish_drain().expect("awaited").send(3).unwrap();
        assert_eq!(rx.try_recv(), Ok(3));
        assert!(a.finish_drain().is_none() && !a.drain_awaited());
        assert!(a.draining(), "a drain never stops refusing");
    }
}
