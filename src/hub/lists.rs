//! Lists merged across upstreams with proxy cursors, the catalog the hub keeps for
//! routing, and per-client logging levels over one shared upstream session.
//!
//! A client list request names, through its proxy cursor, the upstreams still paging
//! and their own cursors (none at first: every upstream offering the list). Each part
//! is served from the catalog when that upstream declares `listChanged` for it (then a
//! `list_changed` will tell us when the page is stale), else fetched. The merged page
//! is the parts' items in config order, namespaced, first server winning collisions.

use std::collections::HashMap;

use serde_json::{json, Value};

use super::Hub;
use crate::protocol::methods;
use crate::protocol::{code, Message, RawId};
use crate::state::catalog::{decode_cursor, encode_cursor, Asker, ListKind, Page};
use crate::state::ids::{ClientId, IdMap, UpstreamId};
use crate::state::pending::Origin;

/// Most pages the hub fetches of one upstream list for its routing table.
pub const MAX_CATALOG_PAGES: u32 = 100;

/// A client's level when it asked for no log messages at all (a 2026-07-28 request
/// without `logLevel`): above every level, and left out of the upstream's level.
pub(super) const LOG_OFF: u8 = u8::MAX;

/// RFC 5424 levels, most verbose first.
const LEVELS: [&str; 8] = [
    "debug",
    "info",
    "notice",
    "warning",
    "error",
    "critical",
    "alert",
    "emergency",
];

/// One client list request being assembled.
#[derive(Debug)]
pub(crate) struct ListAgg {
    pub client: ClientId,
    id: RawId,
    kind: ListKind,
    parts: Vec<ListPart>,
}

impl ListAgg {
    /// The client's request id.
    pub(super) fn id(&self) -> &RawId {
        &self.id
    }
}

/// One upstream's share of a list request: its cursor, and its page once known
/// (`Err` = it failed).
type ListPart = (UpstreamId, Option<String>, Option<Result<Page, Value>>);

/// `logging/setLevel` per client, and the level last set upstream.
///
/// Every stateless request is a client that comes and goes with a level (`LOG_OFF`
/// when it asked for none), so the most verbose level wanted is kept as a count per
/// level: a client's arrival or departure costs the same however many clients are
/// open, where a scan of them all would grow with every open session and listen.
#[derive(Debug, Default)]
pub(super) struct LogLevels {
    clients: IdMap<ClientId, u8>,
    /// How many clients asked for each level of [`LEVELS`] (`LOG_OFF` is not counted).
    counts: [u32; LEVELS.len()],
    pub(super) upstream: Option<u8>,
}

impl LogLevels {
    /// Records `client`'s level (replacing the one it had).
    pub(super) fn set(&mut self, client: ClientId, level: u8) {
        if let Some(old) = self.clients.insert(client, level) {
            self.count(old, false);
        }
        self.count(level, true);
    }

    /// Forgets `client`'s level; whether it had one.
    pub(super) fn remove(&mut self, client: ClientId) -> bool {
        match self.clients.remove(&client) {
            Some(old) => {
                self.count(old, false);
                true
            }
            None => false,
        }
    }

    /// `client`'s level, if it set one.
    pub(super) fn get(&self, client: ClientId) -> Option<u8> {
        self.clients.get(&client).copied()
    }

    fn count(&mut self, level: u8, up: bool) {
        if let Some(n) = self.counts.get_mut(usize::from(level)) {
            if up {
                *n += 1;
            } else {
                *n -= 1;
            }
        }
    }

    /// The most verbose level any client asked for (clients that asked for none
    /// aside).
    fn wanted(&self) -> Option<u8> {
        self.counts
            .iter()
            .position(|n| *n > 0)
            .and_then(|i| u8::try_from(i).ok())
    }
}

/// Client list requests being assembled from several upstreams, by aggregation id.
#[derive(Debug, Default)]
pub(super) struct Assemblies {
    pub(super) open: HashMap<u64, ListAgg>,
    pub(super) next: u64,
}

impl Assemblies {
    /// `client` cancelled its request `id`: if it is a list being assembled, it is not
    /// answered.
    pub(super) fn cancel(&mut self, client: ClientId, id: &RawId) {
        if !self.open.is_empty() {
            self.open
                .retain(|_, a| !(a.client == client && a.id == *id));
        }
    }
}

impl Hub {
    /// `client`'s requests in flight, for `limits.max_pending_per_client`: those
    /// forwarded, its lists being assembled (each a request to every server), and its
    /// shared reads waiting for an answer.
    pub(super) fn in_flight_of(&self, client: ClientId) -> usize {
        let lists = if self.lists.open.is_empty() {
            0
        } else {
            self.lists
                .open
                .values()
                .filter(|a| a.client == client)
                .count()
        };
        self.pending.client_count(client) + lists + self.reads.cache.waiting_of(client)
    }

    /// Refuses `client`'s request `id` (-32005) when it already has
    /// `limits.max_pending_per_client` requests in flight.
    pub(super) fn refused_at_limit(&mut self, client: ClientId, id: &RawId) -> bool {
        if self.in_flight_of(client) < self.settings.max_pending_per_client
            || self.clients.get(&client).is_some_and(|c| c.exempt)
        {
            return false;
        }
        let why = format!(
            "too many requests in flight for this client (limits.max_pending_per_client = {})",
            self.settings.max_pending_per_client
        );
        self.reply_error(client, id, code::LIMIT_EXCEEDED, &why);
        true
    }

    pub(super) fn on_list(&mut self, client: ClientId, id: RawId, msg: &Message, kind: ListKind) {
        if self.refused_at_limit(client, &id) {
            return;
        }
        let cursor = msg
            .params()
            .and_then(|p| serde_json::from_str::<Value>(p.get()).ok())
            .and_then(|p| p.get("cursor").cloned());
        let view = self.view_of(client);
        let parts: Vec<(UpstreamId, Option<String>)> = match cursor {
            None | Some(Value::Null) => self
                .candidates(view, kind.capability())
                .into_iter()
                .filter(|u| self.upstream_ready(*u).is_some())
                .map(|u| (u, None))
                .collect(),
            Some(Value::String(c)) => match decode_cursor(&c, self.upstreams.len()) {
                // A cursor naming a server outside the client's view is not one of its.
                Some(p) if p.iter().all(|(u, _)| self.catalog.in_view(view, *u)) => p,
                _ => return self.reply_error(client, &id, code::INVALID_PARAMS, "invalid cursor"),
            },
            Some(_) => {
                return self.reply_error(client, &id, code::INVALID_PARAMS, "invalid cursor")
            }
        };
        self.lists.next += 1;
        let agg_id = self.lists.next;
        let mut agg = ListAgg {
            client,
            id,
            kind,
            parts: parts.into_iter().map(|(u, c)| (u, c, None)).collect(),
        };
        let mut fetch = Vec::new();
        for (u, cursor, slot) in agg.parts.iter_mut() {
            let cached = self
                .lists_cacheable(*u, kind)
                .then(|| self.catalog.page(*u, kind, cursor))
                .flatten();
            if let Some(page) = cached {
                *slot = Some(Ok(page.clone()));
            } else if self.upstream_ready(*u).is_none() {
                *slot = Some(Err(
                    json!({"code": code::UPSTREAM_UNAVAILABLE, "message": "upstream not available"}),
                ));
            } else {
                fetch.push((*u, cursor.clone()));
            }
        }
        self.lists.open.insert(agg_id, agg);
        for (u, cursor) in fetch {
            let origin = Origin::ListPart {
                agg: agg_id,
                kind,
                cursor: cursor.clone(),
                epoch: self.catalog.epoch(u, kind),
            };
            self.send_list_request(u, kind, cursor, origin);
        }
        self.try_finish_list(agg_id);
    }

    /// Whether pages of this list may be served from the catalog: only when the
    /// upstream promised to say when they change.
    fn lists_cacheable(&self, u: UpstreamId, kind: ListKind) -> bool {
        self.upstream_ready(u).is_some_and(|i| {
            i.capabilities[kind.capability()]["listChanged"].as_bool() == Some(true)
        })
    }

    fn send_list_request(
        &mut self,
        u: UpstreamId,
        kind: ListKind,
        cursor: Option<String>,
        origin: Origin,
    ) {
        let pid = self
            .pending
            .register(u, origin)
            .expect("internal ids are unique");
        let params = match &cursor {
            Some(c) => json!({"cursor": c}),
            None => json!({}),
        };
        let m = Message::request(&RawId::from_u64(pid.0), kind.method(), Some(&params));
        self.dispatch_upstream(u, pid, &m);
    }

    /// An upstream answered (or failed) one part of a list request, asked for at
    /// `epoch` of its list.
    pub(super) fn list_part_done(
        &mut self,
        u: UpstreamId,
        agg: u64,
        (kind, epoch): (ListKind, u64),
        cursor: Option<String>,
        outcome: Result<Value, Value>,
    ) {
        let outcome = outcome.map(|result| {
            let page = page_of(kind, &result);
            self.record_page(
                u,
                (kind, epoch),
                (cursor.clone(), Asker::Client),
                page.clone(),
            );
            page
        });
        if let Some(a) = self.lists.open.get_mut(&agg) {
            if let Some(part) = a
                .parts
                .iter_mut()
                .find(|(pu, pc, slot)| *pu == u && *pc == cursor && slot.is_none())
            {
                part.2 = Some(outcome);
            }
        }
        self.try_finish_list(agg);
    }

    fn try_finish_list(&mut self, agg_id: u64) {
        if self
            .lists
            .open
            .get(&agg_id)
            .is_none_or(|a| a.parts.iter().any(|p| p.2.is_none()))
        {
            return;
        }
        let agg = self.lists.open.remove(&agg_id).expect("checked");
        let view = self.view_of(agg.client);
        let mut items = Vec::new();
        let mut next = Vec::new();
        let mut first_error = None;
        let mut any_ok = agg.parts.is_empty();
        for (u, _, outcome) in &agg.parts {
            match outcome.as_ref().expect("all parts done") {
                Ok(page) => {
                    any_ok = true;
                    items.extend(self.catalog.present(view, *u, agg.kind, &page.items));
                    if let Some(c) = &page.next {
                        next.push((*u, Some(c.clone())));
                    }
                }
                Err(e) => {
                    tracing::warn!(upstream = %self.upstreams[u.0].name, error = %e, method = agg.kind.method(), "list part failed; left out");
                    first_error.get_or_insert_with(|| e.clone());
                }
            }
        }
        if !any_ok {
            let e = first_error.expect("no part succeeded, so one failed");
            let m = super::effects::error_with_object(&agg.id, &e);
            return self.push_response(agg.client, &agg.id, m);
        }
        let mut result = json!({ agg.kind.items_key(): items });
        if !next.is_empty() {
            result["nextCursor"] = json!(encode_cursor(&next));
        }
        self.reply(agg.client, &agg.id, result);
    }

    /// Records a page in the catalog, when it may be (`Catalog::takes`).
    fn record_page(
        &mut self,
        u: UpstreamId,
        (kind, epoch): (ListKind, u64),
        (cursor, asker): (Option<String>, Asker),
        page: Page,
    ) {
        let bound = MAX_CATALOG_PAGES as usize;
        if !self.catalog.takes((u, kind), epoch, &cursor, asker, bound) {
            tracing::debug!(upstream = %self.upstreams[u.0].name, method = kind.method(), "a page of an older list, or under an unknown cursor: not recorded");
            return;
        }
        for hidden in self.catalog.record(u, kind, cursor, page) {
            tracing::warn!(upstream = %self.upstreams[u.0].name, name = %hidden, "name already offered by an earlier server; hidden (set servers.NAME.prefix to show both)");
        }
    }

    /// Learns (again) what an upstream offers, for routing: every list it declares.
    pub(super) fn refresh_catalog(&mut self, u: UpstreamId, kinds: &[ListKind]) {
        for &kind in kinds {
            self.catalog.forget(u, kind);
            let offered = self
                .upstream_ready(u)
                .is_some_and(|i| i.capabilities[kind.capability()].is_object());
            if offered {
                let origin = Origin::CatalogFetch {
                    kind,
                    cursor: None,
                    page: 0,
                    epoch: self.catalog.epoch(u, kind),
                };
                self.send_list_request(u, kind, None, origin);
            }
        }
    }

    /// Called after each catalog page (or its failure): once nothing is in flight for
    /// the upstream, deferred client handshakes may be answered.
    pub(super) fn catalog_settled(&mut self, u: UpstreamId) {
        if !self.pending.catalog_in_flight(u) && !self.upstreams[u.0].catalog_synced {
            self.upstreams[u.0].catalog_synced = true;
            self.answer_deferred_inits();
        }
    }

    pub(super) fn catalog_page(
        &mut self,
        u: UpstreamId,
        (kind, epoch): (ListKind, u64),
        cursor: Option<String>,
        page_no: u32,
        result: Result<Value, Value>,
    ) {
        let Ok(result) = result else {
            tracing::debug!(upstream = %self.upstreams[u.0].name, method = kind.method(), "catalog fetch failed");
            return;
        };
        if epoch != self.catalog.epoch(u, kind) {
            // The list changed since: a new fetch started over.
            return;
        }
        let page = page_of(kind, &result);
        let next = page.next.clone();
        self.record_page(u, (kind, epoch), (cursor, Asker::Catalog), page);
        match next {
            Some(c) if page_no + 1 < MAX_CATALOG_PAGES => {
                let origin = Origin::CatalogFetch {
                    kind,
                    cursor: Some(c.clone()),
                    page: page_no + 1,
                    epoch,
                };
                self.send_list_request(u, kind, Some(c), origin);
            }
            Some(_) => {
                tracing::warn!(upstream = %self.upstreams[u.0].name, method = kind.method(), "more than {MAX_CATALOG_PAGES} pages; routing knows only the first")
            }
            None => {}
        }
    }

    /// `logging/setLevel` from one client: remembered per client; the shared
    /// upstream sessions are set to the most verbose level any client asked for.
    pub(super) fn on_set_level(&mut self, client: ClientId, id: RawId, msg: &Message) {
        let level = msg
            .params()
            .and_then(|p| serde_json::from_str::<Value>(p.get()).ok())
            .and_then(|p| {
                p["level"]
                    .as_str()
                    .and_then(|l| LEVELS.iter().position(|x| *x == l))
            });
        let Some(level) = level else {
            return self.reply_error(client, &id, code::INVALID_PARAMS, "logging/setLevel needs params.level: one of debug, info, notice, warning, error, critical, alert, emergency");
        };
        self.log_levels.set(client, level as u8);
        self.reply(client, &id, json!({}));
        self.sync_log_level();
    }

    /// Sends `logging/setLevel` upstream when the most verbose requested level changes.
    pub(super) fn sync_log_level(&mut self) {
        let wanted = self.log_levels.wanted();
        if wanted == self.log_levels.upstream || wanted.is_none() {
            return;
        }
        self.log_levels.upstream = wanted;
        for u in self.candidates(crate::state::ids::ViewId::DEFAULT, "logging") {
            self.send_log_level(u);
        }
    }

    /// Sets the effective level on one upstream (after a level change, and whenever it
    /// starts or restarts: a new session starts at the server's default).
    pub(super) fn send_log_level(&mut self, u: UpstreamId) {
        let Some(level) = self.log_levels.upstream else {
            return;
        };
        let supported = self
            .upstream_ready(u)
            .is_some_and(|info| info.capabilities["logging"].is_object());
        if !supported {
            return;
        }
        let pid = self
            .pending
            .register(u, Origin::Internal(methods::LOGGING_SET_LEVEL))
            .expect("unique");
        let m = Message::request(
            &RawId::from_u64(pid.0),
            methods::LOGGING_SET_LEVEL,
            Some(&json!({"level": LEVELS[usize::from(level)]})),
        );
        self.dispatch_upstream(u, pid, &m);
    }

    /// Whether a `notifications/message` at `level` goes to this client.
    pub(super) fn wants_log(&self, client: ClientId, level: Option<&str>) -> bool {
        let Some(min) = self.log_levels.get(client) else {
            // A client that set no level gets what the server sends.
            return true;
        };
        if min == LOG_OFF {
            return false;
        }
        let lvl = level
            .and_then(|l| LEVELS.iter().position(|x| *x == l))
            .unwrap_or(LEVELS.len() - 1);
        lvl >= usize::from(min)
    }
}

/// The name of log level `index` in [`LEVELS`].
pub(super) fn level_name(index: u8) -> Option<&'static str> {
    LEVELS.get(usize::from(index)).copied()
}

/// The index of a log level name in [`LEVELS`] (RFC 5424 order, most verbose first).
pub(super) fn level_index(level: &str) -> Option<u8> {
    LEVELS.iter().position(|x| *x == level).map(|i| i as u8)
}

fn page_of(kind: ListKind, result: &Value) -> Page {
    Page {
        items: result[kind.items_key()]
            .as_array()
            .cloned()
            .unwrap_or_default(),
        next: result["nextCursor"].as_str().map(str::to_owned),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wanted_level_follows_arrivals_changes_and_departures() {
        let mut l = LogLevels::default();
        assert_eq!(l.wanted(), None);
        // Clients that asked for no log messages never count.
        for c in 0..1000 {
            l.set(ClientId(c), LOG_OFF);
        }
        assert_eq!(l.wanted(), None);
        l.set(ClientId(1), 3); // warning
        l.set(ClientId(2), 1); // info
        l.set(ClientId(3), 1);
        assert_eq!(l.wanted(), Some(1));
        // A client changing its level leaves its old one.
        l.set(ClientId(2), 4);
        assert_eq!(l.wanted(), Some(1));
        assert!(l.remove(ClientId(3)));
        assert_eq!(l.wanted(), Some(3));
        assert!(!l.remove(ClientId(3)), "already gone");
        assert_eq!(l.get(ClientId(2)), Some(4));
        assert_eq!(l.get(ClientId(5)), Some(LOG_OFF));
        assert!(l.remove(ClientId(1)) && l.remove(ClientId(2)));
        assert_eq!(l.wanted(), None);
        assert_eq!(l.get(ClientId(1)), None);
    }

    proptest::proptest! {
        /// Any sequence of level changes and departures: the count gives what a scan of
        /// every client's level would.
        #[test]
        fn wanted_level_is_the_scan_of_all_clients(
            ops in proptest::collection::vec((0u64..20, proptest::option::of(0u8..9)), 0..200)
        ) {
            let mut l = LogLevels::default();
            for (client, level) in ops {
                match level {
                    // 8 stands for a client that asked for no log messages.
                    Some(level) => l.set(ClientId(client), if level == 8 { LOG_OFF } else { level }),
                    None => {
                        l.remove(ClientId(client));
                    }
                }
                let scan = l.clients.values().copied().filter(|v| *v != LOG_OFF).min();
                proptest::prop_assert_eq!(l.wanted(), scan);
            }
        }
    }
}
