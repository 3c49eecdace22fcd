//! The pending-request table: every request mcpmux has sent and not yet seen answered.
//!
//! Owns the mapping between proxy-allocated ids and where the answer must go:
//! - client requests forwarded upstream (`ProxyId` → client, the client's own id, and
//!   the progress token the client chose, which the proxy replaced by the proxy id);
//! - requests the hub itself sends upstream (subscribe/unsubscribe/setLevel);
//! - server→client requests forwarded to a client (`ProxyId` → upstream and the
//!   upstream's own id).
//!
//! Pure: no I/O, no clocks (deadlines are stored, the hub runs the timers).
//! Invariant: `by_client` mirrors the `Origin::Client` entries of `upstream_bound`
//! exactly; nothing is kept for a client after `drop_client`.

use std::collections::HashMap;

use crate::protocol::RawId;
use crate::state::catalog::ListKind;
use crate::state::ids::{ClientId, IdAlloc, IdMap, ProxyId, SubKey, UpstreamId};

/// Who is waiting for the answer to an upstream-bound request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Origin {
    /// A client request forwarded upstream.
    Client {
        client: ClientId,
        /// The id the client used; the response is mapped back to it.
        id: RawId,
        method: Box<str>,
        /// The client's own `progressToken` (compact JSON), replaced upstream by the
        /// proxy id.
        progress: Option<Box<str>>,
    },
    /// The registry's `resources/subscribe` for a key.
    Subscribe(SubKey),
    /// The registry's `resources/unsubscribe` for a key (answer ignored).
    Unsubscribe(SubKey),
    /// The one upstream `resources/read` serving every waiter of a cache key; the
    /// waiters live in the read cache's single-flight table.
    Read { key: SubKey, generation: u64 },
    /// One upstream's page of a client list request being assembled.
    /// `epoch`: the catalog's epoch of that list when it was asked for.
    ListPart {
        agg: u64,
        kind: ListKind,
        cursor: Option<String>,
        epoch: u64,
    },
    /// A page the hub fetches to know what an upstream offers (routing table).
    CatalogFetch {
        kind: ListKind,
        cursor: Option<String>,
        page: u32,
        epoch: u64,
    },
    /// A request of the hub's own whose answer is only logged.
    Internal(&'static str),
    /// A client request whose client was answered `input_required` (MRTR) while the
    /// upstream waits for input: no client until the retry takes it over.
    Held { method: Box<str> },
}

#[derive(Debug, Clone)]
pub struct UpstreamBound {
    pub upstream: UpstreamId,
    pub origin: Origin,
}

/// A server→client request forwarded to a client.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClientBound {
    pub upstream: UpstreamId,
    /// The id the upstream used.
    pub upstream_id: RawId,
    pub client: ClientId,
    /// The client request the transport says it was sent with (its proxy id, and the
    /// client's id for it): it ends with that request. `None` when the hub only
    /// guessed the client (the one request in flight on a stdio server): then it may
    /// belong to no request at all (a `roots/list` after `roots/list_changed`).
    pub during: Option<(ProxyId, RawId)>,
}

#[derive(Debug, Default)]
pub struct PendingTable {
    ids: IdAlloc,
    upstream_bound: IdMap<ProxyId, UpstreamBound>,
    /// (client, client's request id) → proxy id, for cancellation and limits. The
    /// inner maps keep SipHash: their keys are chosen by the clients.
    by_client: IdMap<ClientId, HashMap<RawId, ProxyId>>,
    client_bound: IdMap<ProxyId, ClientBound>,
}

/// Why a client request could not be registered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RegisterError {
    /// The client already has a request with this id in flight.
    DuplicateId,
}

impl PendingTable {
    /// Registers an upstream-bound request and returns its proxy id.
    pub fn register(
        &mut self,
        upstream: UpstreamId,
        origin: Origin,
    ) -> Result<ProxyId, RegisterError> {
        self.check_unique(&origin)?;
        let pid = ProxyId(self.ids.allocate());
        if let Origin::Client { client, id, .. } = &origin {
            self.by_client
                .entry(*client)
                .or_default()
                .insert(id.clone(), pid);
        }
        self.upstream_bound
            .insert(pid, UpstreamBound { upstream, origin });
        Ok(pid)
    }

    /// Takes the entry for an upstream's answer (or a timeout). `None` if unknown,
    /// already answered or cancelled.
    pub fn complete(&mut self, pid: ProxyId) -> Option<UpstreamBound> {
        let entry = self.upstream_bound.remove(&pid)?;
        if let Origin::Client { client, id, .. } = &entry.origin {
            self.unindex(*client, id);
        }
        Some(entry)
    }

    pub fn get(&self, pid: ProxyId) -> Option<&UpstreamBound> {
        self.upstream_bound.get(&pid)
    }

    /// The proxy id of a client's in-flight request.
    pub fn find_client_request(&self, client: ClientId, id: &RawId) -> Option<ProxyId> {
        self.by_client.get(&client)?.get(id).copied()
    }

    /// Number of requests a client has in flight.
    pub fn client_count(&self, client: ClientId) -> usize {
        self.by_client.get(&client).map_or(0, HashMap::len)
    }

    /// Clients with a request in flight on `upstream`, with one of their request ids.
    pub fn clients_waiting_on(&self, upstream: UpstreamId) -> Vec<(ClientId, RawId)> {
        let mut out: Vec<(ClientId, RawId)> = Vec::new();
        for e in self.upstream_bound.values() {
            if let (true, Origin::Client { client, id, .. }) = (e.upstream == upstream, &e.origin) {
                if !out.iter().any(|(c, _)| c == client) {
                    out.push((*client, id.clone()));
                }
            }
        }
        out
    }

    /// Removes every upstream-bound entry of a client; returns them (to cancel upstream).
    pub fn drop_client(&mut self, client: ClientId) -> Vec<(ProxyId, UpstreamBound)> {
        let Some(ids) = self.by_client.remove(&client) else {
            return Vec::new();
        };
        ids.into_values()
            .filter_map(|pid| self.upstream_bound.remove(&pid).map(|e| (pid, e)))
            .collect()
    }

    /// Whether the hub is still learning what `upstream` offers (a catalog page is in
    /// flight).
    pub fn catalog_in_flight(&self, upstream: UpstreamId) -> bool {
        self.upstream_bound
            .values()
            .any(|e| e.upstream == upstream && matches!(e.origin, Origin::CatalogFetch { .. }))
    }

    /// Proxy ids of the requests in flight on `upstream`.
    pub fn ids_on_upstream(&self, upstream: UpstreamId) -> Vec<ProxyId> {
        let mut ids: Vec<ProxyId> = self
            .upstream_bound
            .iter()
            .filter(|(_, e)| e.upstream == upstream)
            .map(|(p, _)| *p)
            .collect();
        ids.sort();
        ids
    }

    /// Removes every entry bound to `upstream` (it died); returns them.
    pub fn drop_upstream(&mut self, upstream: UpstreamId) -> Vec<(ProxyId, UpstreamBound)> {
        let pids: Vec<ProxyId> = self
            .upstream_bound
            .iter()
            .filter(|(_, e)| e.upstream == upstream)
            .map(|(p, _)| *p)
            .collect();
        let mut out = Vec::with_capacity(pids.len());
        for pid in pids {
            if let Some(e) = self.complete(pid) {
                out.push((pid, e));
            }
        }
        out
    }

    /// Registers a server→client request and returns the id the client will see.
    pub fn register_client_bound(&mut self, entry: ClientBound) -> ProxyId {
        let pid = ProxyId(self.ids.allocate());
        self.client_bound.insert(pid, entry);
        pid
    }

    pub fn client_bound(&self, pid: ProxyId) -> Option<&ClientBound> {
        self.client_bound.get(&pid)
    }

    pub fn complete_client_bound(&mut self, pid: ProxyId) -> Option<ClientBound> {
        self.client_bound.remove(&pid)
    }

    /// Finds the proxy id under which an upstream's request was forwarded.
    pub fn find_client_bound(&self, upstream: UpstreamId, upstream_id: &RawId) -> Option<ProxyId> {
        self.client_bound
            .iter()
            .find(|(_, e)| e.upstream == upstream && &e.upstream_id == upstream_id)
            .map(|(p, _)| *p)
    }

    /// Removes server→client requests sent to `client`, or coming from `upstream`.
    /// Each comes with the id the client saw.
    pub fn drop_client_bound(
        &mut self,
        pred: impl Fn(&ClientBound) -> bool,
    ) -> Vec<(ProxyId, ClientBound)> {
        if self.client_bound.is_empty() {
            return Vec::new();
        }
        let pids: Vec<ProxyId> = self
            .client_bound
            .iter()
            .filter(|(_, e)| pred(e))
            .map(|(p, _)| *p)
            .collect();
        pids.into_iter()
            .filter_map(|p| Some((p, self.client_bound.remove(&p)?)))
            .collect()
    }

    /// Proxy ids of the upstream requests some client waits for (its own request, a
    /// shared read, a part of a merged list), in order.
    pub fn serving_clients(&self) -> Vec<ProxyId> {
        let mut ids: Vec<ProxyId> = self
            .upstream_bound
            .iter()
            .filter(|(_, e)| {
                matches!(
                    e.origin,
                    Origin::Client { .. } | Origin::Read { .. } | Origin::ListPart { .. }
                )
            })
            .map(|(p, _)| *p)
            .collect();
        ids.sort();
        ids
    }

    /// Gives an entry a new origin (an MRTR hand-over: the request is parked while
    /// no client waits, then taken over by the client that retries it). The client
    /// index follows.
    ///
    /// # Errors
    /// The new origin's client already has a request with that id in flight; nothing
    /// changed.
    pub fn reassign(&mut self, pid: ProxyId, origin: Origin) -> Result<(), RegisterError> {
        self.check_unique(&origin)?;
        let Some(entry) = self.upstream_bound.get_mut(&pid) else {
            return Ok(());
        };
        let old = std::mem::replace(&mut entry.origin, origin.clone());
        if let Origin::Client { client, id, .. } = &old {
            self.unindex(*client, id);
        }
        if let Origin::Client { client, id, .. } = &origin {
            self.by_client
                .entry(*client)
                .or_default()
                .insert(id.clone(), pid);
        }
        Ok(())
    }

    /// A client origin's id must not already be in flight for that client.
    fn check_unique(&self, origin: &Origin) -> Result<(), RegisterError> {
        match origin {
            Origin::Client { client, id, .. }
                if self
                    .by_client
                    .get(client)
                    .is_some_and(|m| m.contains_key(id)) =>
            {
                Err(RegisterError::DuplicateId)
            }
            _ => Ok(()),
        }
    }

    /// Upstream-bound requests in flight.
    pub fn len(&self) -> usize {
        self.upstream_bound.len()
    }

    pub fn is_empty(&self) -> bool {
        self.upstream_bound.is_empty() && self.client_bound.is_empty()
    }

    fn unindex(&mut self, client: ClientId, id: &RawId) {
        if let Some(m) = self.by_client.get_mut(&client) {
            m.remove(id);
            if m.is_empty() {
                self.by_client.remove(&client);
            }
        }
    }

    #[cfg(test)]
    fn check_invariants(&self) {
        let mut n = 0;
        for (client, ids) in &self.by_client {
            assert!(!ids.is_empty(), "empty by_client entry for {client}");
            for (id, pid) in ids {
                n += 1;
                match &self.upstream_bound[pid].origin {
                    Origin::Client {
                        client: c, id: i, ..
                    } => assert!(c == client && i == id),
                    o => panic!("by_client points at {o:?}"),
                }
            }
        }
        let clients = self
            .upstream_bound
            .values()
            .filter(|e| matches!(e.origin, Origin::Client { .. }))
            .count();
        assert_eq!(n, clients, "by_client does not mirror the client entries");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn client_origin(c: u64, id: u64) -> Origin {
        Origin::Client {
            client: ClientId(c),
            id: RawId::from_u64(id),
            method: "tools/call".into(),
            progress: None,
        }
    }

    #[test]
    fn register_and_complete_maps_back() {
        let mut t = PendingTable::default();
        let p = t.register(UpstreamId(0), client_origin(1, 7)).unwrap();
        assert_eq!(
            t.find_client_request(ClientId(1), &RawId::from_u64(7)),
            Some(p)
        );
        assert_eq!(t.client_count(ClientId(1)), 1);
        let e = t.complete(p).unwrap();
        assert_eq!(e.origin, client_origin(1, 7));
        assert!(t.complete(p).is_none(), "a second answer is ignored");
        assert_eq!(t.client_count(ClientId(1)), 0);
        t.check_invariants();
        assert!(t.is_empty());
    }

    #[test]
    fn duplicate_client_id_in_flight_is_refused() {
        let mut t = PendingTable::default();
        t.register(UpstreamId(0), client_origin(1, 7)).unwrap();
        assert_eq!(
            t.register(UpstreamId(0), client_origin(1, 7)),
            Err(RegisterError::DuplicateId)
        );
        // The same id from another client is fine.
        t.register(UpstreamId(0), client_origin(2, 7)).unwrap();
        t.check_invariants();
    }

    #[test]
    fn drop_client_and_drop_upstream_leave_nothing() {
        let mut t = PendingTable::default();
        t.register(UpstreamId(0), client_origin(1, 1)).unwrap();
        t.register(UpstreamId(1), client_origin(1, 2)).unwrap();
        t.register(UpstreamId(0), client_origin(2, 1)).unwrap();
        t.register(
            UpstreamId(0),
            Origin::Subscribe(SubKey::new(UpstreamId(0), "a://x")),
        )
        .unwrap();
        assert_eq!(t.drop_client(ClientId(1)).len(), 2);
        t.check_invariants();
        assert_eq!(t.drop_upstream(UpstreamId(0)).len(), 2);
        t.check_invariants();
        assert!(t.is_empty());
    }

    #[test]
    fn reassign_moves_the_client_index() {
        let mut t = PendingTable::default();
        let p = t.register(UpstreamId(0), client_origin(1, 7)).unwrap();
        t.reassign(
            p,
            Origin::Held {
                method: "tools/call".into(),
            },
        )
        .unwrap();
        t.check_invariants();
        assert_eq!(t.client_count(ClientId(1)), 0);
        assert!(
            t.drop_client(ClientId(1)).is_empty(),
            "parked: no client owns it"
        );
        t.register(UpstreamId(0), client_origin(2, 3)).unwrap();
        assert_eq!(
            t.reassign(p, client_origin(2, 3)),
            Err(RegisterError::DuplicateId)
        );
        t.reassign(p, client_origin(2, 4)).unwrap();
        t.check_invariants();
        assert_eq!(
            t.find_client_request(ClientId(2), &RawId::from_u64(4)),
            Some(p)
        );
    }

    #[test]
    fn client_bound_requests_round_trip() {
        let mut t = PendingTable::default();
        let e = ClientBound {
            upstream: UpstreamId(0),
            upstream_id: RawId::from_u64(5),
            client: ClientId(3),
            during: None,
        };
        let p = t.register_client_bound(e.clone());
        assert_eq!(
            t.find_client_bound(UpstreamId(0), &RawId::from_u64(5)),
            Some(p)
        );
        assert_eq!(t.complete_client_bound(p), Some(e));
        assert!(t.is_empty());
    }
}
