//! What each upstream offers, and how names and URIs map between clients and
//! upstreams (docs/architecture.md, "Aggregation"). Pure: no I/O.
//!
//! Owns:
//! - namespacing: with `prefix = "p"`, tool and prompt `x` is shown as `p__x` and
//!   resource URI `u` as `p+u` (a valid URI scheme prefix); requests are mapped back;
//! - the catalog: every list page seen per (upstream, kind, cursor), whether fetched
//!   by the hub or passed through for a client, from which the routing table is built;
//! - collisions: without a prefix the first server in config order wins (the caller
//!   logs a warning for each hidden item);
//! - proxy cursors: an opaque token listing, per upstream still paging, its own cursor;
//! - views (profiles): one routing table per view, so a name two servers share goes to
//!   the first server *of that view*; a server's filters and renames apply in every
//!   view ([`crate::state::views`]).
//!
//! Never: sends requests or decides freshness beyond "dropped on list_changed".

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use serde_json::Value;

use crate::state::ids::{UpstreamId, ViewId};
use crate::state::views::{ServerView, ViewSpec};

pub use cursor::{decode_cursor, encode_cursor};
pub use kind::ListKind;

/// Separator between a prefix and a tool or prompt name.
pub const NAME_SEP: &str = "__";
/// Separator between a prefix and a resource URI.
pub const URI_SEP: &str = "+";

/// The name a client sees for an upstream's tool, prompt, URI or template.
pub fn expose(prefix: Option<&str>, kind_uses_uri: bool, name: &str) -> String {
    match prefix {
        Some(p) if kind_uses_uri => format!("{p}{URI_SEP}{name}"),
        Some(p) => format!("{p}{NAME_SEP}{name}"),
        None => name.to_owned(),
    }
}

/// One page of one upstream's list.
#[derive(Debug, Clone, PartialEq)]
pub struct Page {
    pub items: Vec<Value>,
    pub next: Option<String>,
}

/// Who asked for a page ([`Catalog::takes`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Asker {
    /// The catalog's own fetch chain, following the server's cursors.
    Catalog,
    /// A client's list, whose proxy cursor carries an upstream cursor it may have made up.
    Client,
}

/// Per-upstream facts the catalog needs.
#[derive(Debug, Clone, Default)]
pub struct UpstreamNaming {
    pub prefix: Option<String>,
    pub uri_prefixes: Vec<String>,
    /// Its filters and tool renames (`servers.NAME.tools_allow`, ...).
    pub view: Arc<ServerView>,
}

/// Exposed name → (upstream, upstream's own name), for one view and kind.
type RouteTable = HashMap<String, (UpstreamId, String)>;

/// An upstream's own name → where its item is (its page's cursor, its index there);
/// the first in page order, as a scan of the pages finds it.
type ItemIndex = HashMap<String, (Option<String>, usize)>;

#[derive(Debug)]
pub struct Catalog {
    naming: Vec<UpstreamNaming>,
    /// Pages by (upstream, kind) and the upstream cursor that fetched them.
    pages: HashMap<(UpstreamId, ListKind), BTreeMap<Option<String>, Page>>,
    /// The views, by `ViewId` (`None`: a view removed by a reload).
    views: Vec<Option<ViewSpec>>,
    /// Routes per (view, kind); within a view the first server wins a name.
    routes: HashMap<(ViewId, ListKind), RouteTable>,
    /// Items by own name per (upstream, kind): a tool's definition is found without a
    /// scan of its list, however long.
    index: HashMap<(UpstreamId, ListKind), ItemIndex>,
    /// Each upstream's position in the configuration, which decides name collisions.
    /// Ids alone do not: a server a reload changed gets the next id, yet keeps its
    /// place. An upstream not ranked orders after the ranked ones, by id.
    rank: HashMap<UpstreamId, usize>,
    /// Bumped per (upstream, kind) by [`Catalog::forget`]: a page asked for before that
    /// is not recorded when it comes.
    epochs: HashMap<(UpstreamId, ListKind), u64>,
}

impl Default for Catalog {
    fn default() -> Self {
        Catalog {
            naming: Vec::new(),
            pages: HashMap::new(),
            views: vec![Some(ViewSpec::everything())],
            routes: HashMap::new(),
            index: HashMap::new(),
            rank: HashMap::new(),
            epochs: HashMap::new(),
        }
    }
}

impl Catalog {
    pub fn new(naming: Vec<UpstreamNaming>) -> Self {
        Catalog {
            naming,
            ..Catalog::default()
        }
    }

    /// Sets the naming of upstream `u` (added, retuned, or cleared when removed by a
    /// reload).
    pub fn set_naming(&mut self, u: UpstreamId, naming: UpstreamNaming) {
        if self.naming.len() <= u.0 {
            self.naming.resize(u.0 + 1, UpstreamNaming::default());
        }
        self.naming[u.0] = naming;
        for kind in ListKind::ALL {
            self.rebuild(kind);
        }
    }

    /// The upstreams in configuration order (after a reload); collisions are decided
    /// anew.
    pub fn set_order(&mut self, order: &[UpstreamId]) {
        self.rank = order.iter().enumerate().map(|(i, u)| (*u, i)).collect();
        for kind in ListKind::ALL {
            self.rebuild(kind);
        }
    }

    /// Sorts `ids`, given in id order, in configuration order: the first of them wins
    /// a name.
    pub fn in_config_order(&self, ids: &mut [UpstreamId]) {
        // Until a reload sets an order, id order is configuration order.
        if !self.rank.is_empty() {
            ids.sort_by_key(|u| self.order_key(*u));
        }
    }

    /// Whether `a` comes before `b` in configuration order.
    fn before(&self, a: UpstreamId, b: UpstreamId) -> bool {
        self.order_key(a) < self.order_key(b)
    }

    fn order_key(&self, u: UpstreamId) -> (usize, UpstreamId) {
        (self.rank.get(&u).copied().unwrap_or(usize::MAX), u)
    }

    /// Replaces the views (the default view, id 0, is always every server).
    pub fn set_views(&mut self, views: Vec<(ViewId, ViewSpec)>) {
        self.views = vec![Some(ViewSpec::everything())];
        for (id, spec) in views {
            let i = id.0 as usize;
            if i == 0 {
                continue;
            }
            if self.views.len() <= i {
                self.views.resize(i + 1, None);
            }
            self.views[i] = Some(spec);
        }
        for kind in ListKind::ALL {
            self.rebuild(kind);
        }
    }

    /// A view, when it exists.
    pub fn view(&self, id: ViewId) -> Option<&ViewSpec> {
        self.views.get(id.0 as usize).and_then(Option::as_ref)
    }

    /// Whether upstream `u` is in view `id` (no upstream is in a view that does not
    /// exist).
    pub fn in_view(&self, id: ViewId, u: UpstreamId) -> bool {
        self.view(id).is_some_and(|v| v.includes(u))
    }

    fn prefix(&self, u: UpstreamId) -> Option<&str> {
        self.naming.get(u.0).and_then(|n| n.prefix.as_deref())
    }

    /// Whether the server's own filters (`resources_allow`/`resources_deny`, in every
    /// view) show the URI `own` (as the server knows it).
    pub fn shows_uri(&self, u: UpstreamId, own: &str) -> bool {
        self.server_view(u).is_none_or(|v| v.resources.allows(own))
    }

    fn server_view(&self, u: UpstreamId) -> Option<&ServerView> {
        self.naming.get(u.0).map(|n| &*n.view)
    }

    /// The name clients see for an upstream's item (`None`: not shown).
    fn exposed_name(&self, u: UpstreamId, kind: ListKind, own: &str) -> Option<String> {
        let shown = self
            .server_view(u)
            .map_or(Some(own), |v| v.shown(kind, own))?;
        Some(expose(self.prefix(u), kind.uses_uri(), shown))
    }

    /// Records a page; returns the exposed names it hid because an earlier server
    /// already shows them (for a warning).
    pub fn record(
        &mut self,
        u: UpstreamId,
        kind: ListKind,
        cursor: Option<String>,
        page: Page,
    ) -> Vec<String> {
        let pages = self.pages.entry((u, kind)).or_default();
        pages.insert(cursor, page);
        let mut index = ItemIndex::new();
        for (cursor, page) in pages.iter() {
            for (i, item) in page.items.iter().enumerate() {
                if let Some(own) = item[kind.name_key()].as_str() {
                    index
                        .entry(own.to_owned())
                        .or_insert_with(|| (cursor.clone(), i));
                }
            }
        }
        self.index.insert((u, kind), index);
        self.rebuild(kind)
    }

    /// The current epoch of an upstream's list: what a request for one of its pages
    /// carries, for [`Catalog::takes`].
    pub fn epoch(&self, u: UpstreamId, kind: ListKind) -> u64 {
        self.epochs.get(&(u, kind)).copied().unwrap_or(0)
    }

    /// Whether a page asked for at `epoch` under `cursor` may be recorded: the list
    /// was not dropped since (a page of the list before a `list_changed` is not taken
    /// for the new one), the list holds fewer than `max_pages` pages, and, for a
    /// client's page, the cursor is the first page's or the `next` of a page held (a
    /// client cannot fill the catalog with pages under cursors of its own making). The
    /// catalog's own fetch chain follows the server's cursors as they come (a server
    /// whose cursors differ on each answer would otherwise break the chain whenever a
    /// client's first page replaced the catalog's).
    pub fn takes(
        &self,
        (u, kind): (UpstreamId, ListKind),
        epoch: u64,
        cursor: &Option<String>,
        asker: Asker,
        max_pages: usize,
    ) -> bool {
        if epoch != self.epoch(u, kind) {
            return false;
        }
        let Some(pages) = self.pages.get(&(u, kind)) else {
            return cursor.is_none();
        };
        if pages.contains_key(cursor) {
            return true;
        }
        pages.len() < max_pages
            && (asker == Asker::Catalog
                || cursor.is_none()
                || pages.values().any(|p| p.next == *cursor))
    }

    /// A cached page, if any.
    pub fn page(&self, u: UpstreamId, kind: ListKind, cursor: &Option<String>) -> Option<&Page> {
        self.pages.get(&(u, kind))?.get(cursor)
    }

    /// Whether every page of an upstream's list is known (the page chain from the
    /// first page ends).
    pub fn list_complete(&self, u: UpstreamId, kind: ListKind) -> bool {
        let Some(pages) = self.pages.get(&(u, kind)) else {
            return false;
        };
        let mut cursor: Option<String> = None;
        for _ in 0..=pages.len() {
            match pages.get(&cursor) {
                None => return false,
                Some(Page { next: None, .. }) => return true,
                Some(Page { next, .. }) => cursor = next.clone(),
            }
        }
        false
    }

    /// Drops what is known of an upstream's list (list_changed, restart, down).
    pub fn forget(&mut self, u: UpstreamId, kind: ListKind) {
        *self.epochs.entry((u, kind)).or_default() += 1;
        self.index.remove(&(u, kind));
        if self.pages.remove(&(u, kind)).is_some() {
            self.rebuild(kind);
        }
    }

    /// Rebuilds every view's routes of `kind`; returns the names hidden by a collision
    /// (each once).
    fn rebuild(&mut self, kind: ListKind) -> Vec<String> {
        let mut keys: Vec<UpstreamId> = self
            .pages
            .keys()
            .filter(|(_, k)| *k == kind)
            .map(|(u, _)| *u)
            .collect();
        keys.sort_by_key(|u| self.order_key(*u));
        let mut hidden = Vec::new();
        for (i, view) in self.views.iter().enumerate() {
            let id = ViewId(i as u32);
            let Some(view) = view else {
                self.routes.remove(&(id, kind));
                continue;
            };
            let mut table = RouteTable::new();
            for &u in keys.iter().filter(|u| view.includes(**u)) {
                for page in self.pages[&(u, kind)].values() {
                    for item in page.items.iter().filter(|i| usable(kind, i)) {
                        let Some(own) = item[kind.name_key()].as_str() else {
                            continue;
                        };
                        let Some(exposed) = self.exposed_name(u, kind, own) else {
                            continue;
                        };
                        if !view.shows(kind, &exposed) {
                            continue;
                        }
                        match table.get(&exposed) {
                            Some((owner, _)) if *owner != u => hidden.push(exposed),
                            Some(_) => {}
                            None => {
                                table.insert(exposed, (u, own.to_owned()));
                            }
                        }
                    }
                }
            }
            self.routes.insert((id, kind), table);
        }
        hidden.sort();
        hidden.dedup();
        hidden
    }

    fn table(&self, view: ViewId, kind: ListKind) -> Option<&RouteTable> {
        self.routes.get(&(view, kind))
    }

    /// Whether (upstream, own name), found by a fallback, is shown in `view` as
    /// `exposed`.
    fn shown_in(
        &self,
        view: ViewId,
        kind: ListKind,
        exposed: &str,
        u: UpstreamId,
        own: &str,
    ) -> bool {
        self.view(view).is_some_and(|v| v.shows(kind, exposed))
            && self.server_view(u).is_none_or(|v| v.allows(kind, own))
    }

    /// Routes a tool or prompt name as clients of `view` know it: (upstream, its own
    /// name). `candidates` are the view's upstreams offering the kind.
    pub fn route_name(
        &self,
        view: ViewId,
        kind: ListKind,
        exposed: &str,
        candidates: &[UpstreamId],
    ) -> Option<(UpstreamId, String)> {
        if let Some(hit) = self.table(view, kind).and_then(|t| t.get(exposed)) {
            return Some(hit.clone());
        }
        let own_of = |u: UpstreamId, shown: &str| -> Option<(UpstreamId, String)> {
            let own = self
                .server_view(u)
                .map_or(Some(shown), |v| v.own(kind, shown))?;
            if self
                .own_item(u, kind, own)
                .is_some_and(|i| !usable(kind, i))
            {
                return None;
            }
            self.shown_in(view, kind, exposed, u, own)
                .then(|| (u, own.to_owned()))
        };
        // A prefixed name of a server whose list is not known (yet). Once its whole
        // list is known, a name it does not list is no name of it.
        for &u in candidates {
            if self.list_complete(u, kind) {
                continue;
            }
            if let Some(p) = self.prefix(u) {
                if let Some(rest) = exposed
                    .strip_prefix(p)
                    .and_then(|r| r.strip_prefix(NAME_SEP))
                {
                    return own_of(u, rest);
                }
            }
        }
        // One server that could own it: it does.
        match candidates {
            [only] if self.prefix(*only).is_none() => own_of(*only, exposed),
            _ => None,
        }
    }

    /// Routes a resource URI as clients of `view` know it: (upstream, the URI as the
    /// upstream knows it). Exact URIs from resource lists first, then prefixes
    /// (namespacing, `uri_prefixes`), then templates, then the only candidate. A URI
    /// the server's `resources_allow`/`resources_deny` hide routes nowhere.
    pub fn route_uri(
        &self,
        view: ViewId,
        exposed: &str,
        candidates: &[UpstreamId],
    ) -> Option<(UpstreamId, String)> {
        self.route_uri_unfiltered(view, exposed, candidates)
            .filter(|(u, own)| self.shows_uri(*u, own))
    }

    fn route_uri_unfiltered(
        &self,
        view: ViewId,
        exposed: &str,
        candidates: &[UpstreamId],
    ) -> Option<(UpstreamId, String)> {
        if let Some(hit) = self
            .table(view, ListKind::Resources)
            .and_then(|t| t.get(exposed))
        {
            return Some(hit.clone());
        }
        for &u in candidates {
            if let Some(p) = self.prefix(u) {
                if let Some(rest) = exposed
                    .strip_prefix(p)
                    .and_then(|r| r.strip_prefix(URI_SEP))
                {
                    return Some((u, rest.to_owned()));
                }
            }
        }
        for &u in candidates {
            let n = &self.naming[u.0];
            if n.prefix.is_none()
                && n.uri_prefixes
                    .iter()
                    .any(|p| exposed.starts_with(p.as_str()))
            {
                return Some((u, exposed.to_owned()));
            }
        }
        if let Some(table) = self.table(view, ListKind::Templates) {
            let mut best: Option<(usize, UpstreamId)> = None;
            for (template, (u, _)) in table {
                if self.prefix(*u).is_some() {
                    continue; // namespaced servers were handled by prefix above
                }
                let literal = template.split('{').next().unwrap_or_default();
                if !literal.is_empty()
                    && exposed.starts_with(literal)
                    && best.is_none_or(|(l, b)| {
                        literal.len() > l || (literal.len() == l && self.before(*u, b))
                    })
                {
                    best = Some((literal.len(), *u));
                }
            }
            if let Some((_, u)) = best {
                return Some((u, exposed.to_owned()));
            }
        }
        match candidates {
            [only] if self.prefix(*only).is_none() => Some((*only, exposed.to_owned())),
            _ => None,
        }
    }

    /// The list item an upstream gave for the name clients of `view` know as
    /// `exposed` (a tool's definition, say), when its list is known.
    pub fn item(&self, view: ViewId, kind: ListKind, exposed: &str) -> Option<&Value> {
        let (u, own) = self.table(view, kind)?.get(exposed)?;
        self.own_item(*u, kind, own)
    }

    /// The list item upstream `u` gave for its own name `own`, when its list is known.
    pub fn own_item(&self, u: UpstreamId, kind: ListKind, own: &str) -> Option<&Value> {
        let (cursor, i) = self.index.get(&(u, kind))?.get(own)?;
        self.pages.get(&(u, kind))?.get(cursor)?.items.get(*i)
    }

    /// The exposed form of an upstream's URI (for updates and list items).
    pub fn expose_uri<'u>(&self, u: UpstreamId, uri: &'u str) -> std::borrow::Cow<'u, str> {
        match self.prefix(u) {
            // Most upstreams are not namespaced: every update's URI passes unchanged.
            None => std::borrow::Cow::Borrowed(uri),
            p => std::borrow::Cow::Owned(expose(p, true, uri)),
        }
    }

    /// Items of one upstream page as clients of `view` see them: filtered, renamed,
    /// namespaced, and without the items hidden by an earlier server's identical name.
    pub fn present(
        &self,
        view: ViewId,
        u: UpstreamId,
        kind: ListKind,
        items: &[Value],
    ) -> Vec<Value> {
        let table = self.table(view, kind);
        let Some(spec) = self.view(view) else {
            return Vec::new();
        };
        let sv = self.server_view(u);
        items
            .iter()
            .filter(|item| usable(kind, item))
            .filter_map(|item| {
                let own = item[kind.name_key()].as_str()?;
                let exposed = self.exposed_name(u, kind, own)?;
                if !spec.shows(kind, &exposed)
                    || table
                        .and_then(|t| t.get(&exposed))
                        .is_some_and(|(owner, _)| *owner != u)
                {
                    return None;
                }
                let description = (kind == ListKind::Tools)
                    .then(|| sv.and_then(|v| v.description(own)))
                    .flatten();
                if exposed == own && description.is_none() {
                    return Some(item.clone());
                }
                let mut item = item.clone();
                item[kind.name_key()] = Value::String(exposed);
                if let Some(d) = description {
                    item["description"] = Value::String(d.to_owned());
                }
                Some(item)
            })
            .collect()
    }
}

/// Whether an item may be listed and routed at all: a tool whose `x-mcp-header`
/// annotations break SEP-2243's rules is left out (clients MUST NOT call it), so it
/// is unknown, as a hidden tool is.
fn usable(kind: ListKind, item: &Value) -> bool {
    kind != ListKind::Tools
        || crate::protocol::tool_headers::invalid_annotation(&item["inputSchema"]).is_none()
}

mod cursor;
mod kind;
#[cfg(test)]
mod tests;
