//! Per-URI order for the subscription requests of a Streamable HTTP upstream session.
//!
//! The session's POSTs run concurrently, so a `resources/unsubscribe` and the
//! `resources/subscribe` of the same URI that follows it (its last holder left, a new
//! one came) could reach the server in either order and leave it unsubscribed while
//! mcpmux counts the URI held: no update would come, and reads would stay cached. Each
//! such request waits here until the one before it for its URI was answered. Other
//! requests never wait; requests about different URIs never wait for each other.
//!
//! Owns one entry per URI with a request in flight (finished ones are swept as the map
//! grows). Never parses a message: the session reads the URI (`post::Head`).

use std::collections::HashMap;

use tokio::sync::oneshot;

/// The lanes of one session.
#[derive(Debug, Default)]
pub(super) struct Lanes {
    /// Per URI, the last request's completion (signalled by dropping its sender).
    tails: HashMap<String, oneshot::Receiver<()>>,
    /// Entries after the last sweep: the map is swept when it doubles.
    swept_at: usize,
}

impl Lanes {
    /// Joins `uri`'s lane: what to wait for before sending (the previous request's
    /// completion), and what to drop once this one was answered.
    pub(super) fn join(
        &mut self,
        uri: String,
    ) -> (Option<oneshot::Receiver<()>>, oneshot::Sender<()>) {
        if self.tails.len() >= 2 * self.swept_at.max(32) {
            self.tails
                .retain(|_, rx| matches!(rx.try_recv(), Err(oneshot::error::TryRecvError::Empty)));
            self.swept_at = self.tails.len();
        }
        let (done, tail) = oneshot::channel();
        (self.tails.insert(uri, tail), done)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_request_waits_for_the_one_before_it_on_its_uri_only() {
        let mut lanes = Lanes::default();
        let (none, first) = lanes.join("a".into());
        assert!(none.is_none(), "the first request waits for nothing");
        let (after_first, second) = lanes.join("a".into());
        let (other, _) = lanes.join("b".into());
        assert!(other.is_none(), "another URI's lane");
        let mut after_first = after_first.expect("waits for the first");
        assert!(matches!(
            after_first.try_recv(),
            Err(oneshot::error::TryRecvError::Empty)
        ));
        drop(first);
        assert!(
            after_first.await.is_err(),
            "released when the first is done"
        );
        drop(second);
    }
}
