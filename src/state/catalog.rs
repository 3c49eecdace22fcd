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
//! - proxy cursors: an opaque token listing, per upstream still paging, its own cursor.
//!
//! Never: sends requests or decides freshness beyond "dropped on list_changed".

use std::collections::{BTreeMap, HashMap};

use serde_json::Value;

use crate::state::ids::UpstreamId;

/// The four paginated lists.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum ListKind {
    Tools,
    Prompts,
    Resources,
    Templates,
}

impl ListKind {
    pub const ALL: [ListKind; 4] = [
        ListKind::Tools,
        ListKind::Prompts,
        ListKind::Resources,
        ListKind::Templates,
    ];

    pub fn from_method(m: &str) -> Option<ListKind> {
        Some(match m {
            "tools/list" => ListKind::Tools,
            "prompts/list" => ListKind::Prompts,
            "resources/list" => ListKind::Resources,
            "resources/templates/list" => ListKind::Templates,
            _ => return None,
        })
    }

    pub fn method(self) -> &'static str {
        match self {
            ListKind::Tools => "tools/list",
            ListKind::Prompts => "prompts/list",
            ListKind::Resources => "resources/list",
            ListKind::Templates => "resources/templates/list",
        }
    }

    /// The array member of the result.
    pub fn items_key(self) -> &'static str {
        match self {
            ListKind::Tools => "tools",
            ListKind::Prompts => "prompts",
            ListKind::Resources => "resources",
            ListKind::Templates => "resourceTemplates",
        }
    }

    /// The member of each item that is namespaced and routed on.
    pub fn name_key(self) -> &'static str {
        match self {
            ListKind::Tools | ListKind::Prompts => "name",
            ListKind::Resources => "uri",
            ListKind::Templates => "uriTemplate",
        }
    }

    /// The server capability that offers this list.
    pub fn capability(self) -> &'static str {
        match self {
            ListKind::Tools => "tools",
            ListKind::Prompts => "prompts",
            ListKind::Resources | ListKind::Templates => "resources",
        }
    }

    /// The kinds a `*/list_changed` notification invalidates.
    pub fn changed_by(notification: &str) -> &'static [ListKind] {
        match notification {
            "notifications/tools/list_changed" => &[ListKind::Tools],
            "notifications/prompts/list_changed" => &[ListKind::Prompts],
            "notifications/resources/list_changed" => &[ListKind::Resources, ListKind::Templates],
            _ => &[],
        }
    }

    fn uses_uri(self) -> bool {
        matches!(self, ListKind::Resources | ListKind::Templates)
    }
}

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

/// Per-upstream facts the catalog needs.
#[derive(Debug, Clone, Default)]
pub struct UpstreamNaming {
    pub prefix: Option<String>,
    pub uri_prefixes: Vec<String>,
}

#[derive(Debug, Default)]
pub struct Catalog {
    naming: Vec<UpstreamNaming>,
    /// Pages by (upstream, kind) and the upstream cursor that fetched them.
    pages: HashMap<(UpstreamId, ListKind), BTreeMap<Option<String>, Page>>,
    /// Exposed name → (upstream, upstream's own name), per kind; first server wins.
    routes: HashMap<ListKind, HashMap<String, (UpstreamId, String)>>,
}

impl Catalog {
    pub fn new(naming: Vec<UpstreamNaming>) -> Self {
        Catalog {
            naming,
            ..Catalog::default()
        }
    }

    /// Sets the naming of upstream `u` (added, or cleared when removed by a reload).
    pub fn set_naming(&mut self, u: UpstreamId, naming: UpstreamNaming) {
        if self.naming.len() <= u.0 {
            self.naming.resize(u.0 + 1, UpstreamNaming::default());
        }
        self.naming[u.0] = naming;
    }

    fn prefix(&self, u: UpstreamId) -> Option<&str> {
        self.naming.get(u.0).and_then(|n| n.prefix.as_deref())
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
        self.pages
            .entry((u, kind))
            .or_default()
            .insert(cursor, page);
        self.rebuild(kind)
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
        if self.pages.remove(&(u, kind)).is_some() {
            self.rebuild(kind);
        }
    }

    fn rebuild(&mut self, kind: ListKind) -> Vec<String> {
        let mut table: HashMap<String, (UpstreamId, String)> = HashMap::new();
        let mut hidden = Vec::new();
        let mut keys: Vec<UpstreamId> = self
            .pages
            .keys()
            .filter(|(_, k)| *k == kind)
            .map(|(u, _)| *u)
            .collect();
        keys.sort();
        for u in keys {
            let prefix = self.prefix(u).map(str::to_owned);
            for page in self.pages[&(u, kind)].values() {
                for item in &page.items {
                    let Some(name) = item[kind.name_key()].as_str() else {
                        continue;
                    };
                    let exposed = expose(prefix.as_deref(), kind.uses_uri(), name);
                    match table.get(&exposed) {
                        Some((owner, _)) if *owner != u => hidden.push(exposed),
                        Some(_) => {}
                        None => {
                            table.insert(exposed, (u, name.to_owned()));
                        }
                    }
                }
            }
        }
        self.routes.insert(kind, table);
        hidden
    }

    /// Routes a tool or prompt name: (upstream, its own name).
    pub fn route_name(
        &self,
        kind: ListKind,
        exposed: &str,
        candidates: &[UpstreamId],
    ) -> Option<(UpstreamId, String)> {
        if let Some(hit) = self.routes.get(&kind).and_then(|t| t.get(exposed)) {
            return Some(hit.clone());
        }
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
                    return Some((u, rest.to_owned()));
                }
            }
        }
        // One server that could own it: it does.
        match candidates {
            [only] if self.prefix(*only).is_none() => Some((*only, exposed.to_owned())),
            _ => None,
        }
    }

    /// Routes a resource URI: (upstream, the URI as the upstream knows it). Exact
    /// URIs from resource lists first, then prefixes (namespacing, `uri_prefixes`),
    /// then templates, then the only candidate.
    pub fn route_uri(
        &self,
        exposed: &str,
        candidates: &[UpstreamId],
    ) -> Option<(UpstreamId, String)> {
        if let Some(hit) = self
            .routes
            .get(&ListKind::Resources)
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
        if let Some(table) = self.routes.get(&ListKind::Templates) {
            let mut best: Option<(usize, UpstreamId)> = None;
            for (template, (u, _)) in table {
                if self.prefix(*u).is_some() {
                    continue; // namespaced servers were handled by prefix above
                }
                let literal = template.split('{').next().unwrap_or_default();
                if !literal.is_empty()
                    && exposed.starts_with(literal)
                    && best.is_none_or(|(l, b)| literal.len() > l || (literal.len() == l && *u < b))
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

    /// The list item an upstream gave for the name clients know as `exposed` (a tool's
    /// definition, say), when its list is known.
    pub fn item(&self, kind: ListKind, exposed: &str) -> Option<&Value> {
        let (u, own) = self.routes.get(&kind)?.get(exposed)?;
        self.pages
            .get(&(*u, kind))?
            .values()
            .flat_map(|p| p.items.iter())
            .find(|i| i[kind.name_key()].as_str() == Some(own.as_str()))
    }

    /// The exposed form of an upstream's URI (for updates and list items).
    pub fn expose_uri(&self, u: UpstreamId, uri: &str) -> String {
        expose(self.prefix(u), true, uri)
    }

    /// Items of one upstream page as clients see them: namespaced, and without the
    /// items hidden by an earlier server's identical name.
    pub fn present(&self, u: UpstreamId, kind: ListKind, items: &[Value]) -> Vec<Value> {
        let prefix = self.prefix(u);
        let table = self.routes.get(&kind);
        items
            .iter()
            .filter_map(|item| {
                let name = item[kind.name_key()].as_str()?;
                let exposed = expose(prefix, kind.uses_uri(), name);
                if table
                    .and_then(|t| t.get(&exposed))
                    .is_some_and(|(owner, _)| *owner != u)
                {
                    return None;
                }
                let mut item = item.clone();
                if prefix.is_some() {
                    item[kind.name_key()] = Value::String(exposed);
                }
                Some(item)
            })
            .collect()
    }
}

/// Encodes the per-upstream cursors still to page into one opaque proxy cursor.
pub fn encode_cursor(parts: &[(UpstreamId, Option<String>)]) -> String {
    let v: Vec<Value> = parts
        .iter()
        .map(|(u, c)| serde_json::json!([u.0, c]))
        .collect();
    let json = Value::Array(v).to_string();
    let mut out = String::with_capacity(4 + json.len() * 2);
    out.push_str("mx1.");
    for b in json.bytes() {
        out.push_str(&format!("{b:02x}"));
    }
    out
}

/// Decodes a proxy cursor; `None` when it is not one of ours.
pub fn decode_cursor(cursor: &str, upstreams: usize) -> Option<Vec<(UpstreamId, Option<String>)>> {
    let hex = cursor.strip_prefix("mx1.")?;
    if hex.len() % 2 != 0 || hex.len() > 64 * 1024 {
        return None;
    }
    let bytes: Option<Vec<u8>> = (0..hex.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(hex.get(i..i + 2)?, 16).ok())
        .collect();
    let v: Vec<(usize, Option<String>)> = serde_json::from_slice(&bytes?).ok()?;
    if v.is_empty() || v.iter().any(|(u, _)| *u >= upstreams) {
        return None;
    }
    Some(v.into_iter().map(|(u, c)| (UpstreamId(u), c)).collect())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn naming(prefixes: &[Option<&str>]) -> Vec<UpstreamNaming> {
        prefixes
            .iter()
            .map(|p| UpstreamNaming {
                prefix: p.map(str::to_owned),
                uri_prefixes: vec![],
            })
            .collect()
    }
    fn tools(names: &[&str]) -> Page {
        Page {
            items: names
                .iter()
                .map(|n| json!({"name": n, "inputSchema": {}}))
                .collect(),
            next: None,
        }
    }
    const A: UpstreamId = UpstreamId(0);
    const B: UpstreamId = UpstreamId(1);

    #[test]
    fn without_prefix_first_server_wins_and_the_loser_is_hidden() {
        let mut c = Catalog::new(naming(&[None, None]));
        assert!(c
            .record(A, ListKind::Tools, None, tools(&["echo", "a_only"]))
            .is_empty());
        let hidden = c.record(B, ListKind::Tools, None, tools(&["echo", "b_only"]));
        assert_eq!(hidden, vec!["echo".to_string()]);
        assert_eq!(
            c.route_name(ListKind::Tools, "echo", &[A, B]),
            Some((A, "echo".into()))
        );
        assert_eq!(
            c.route_name(ListKind::Tools, "b_only", &[A, B]),
            Some((B, "b_only".into()))
        );
        let shown = c.present(B, ListKind::Tools, &tools(&["echo", "b_only"]).items);
        assert_eq!(shown.len(), 1);
        assert_eq!(shown[0]["name"], "b_only");
    }

    #[test]
    fn prefixes_keep_both_and_route_back() {
        let mut c = Catalog::new(naming(&[Some("a"), Some("b")]));
        c.record(A, ListKind::Tools, None, tools(&["echo"]));
        c.record(B, ListKind::Tools, None, tools(&["echo"]));
        assert_eq!(
            c.route_name(ListKind::Tools, "a__echo", &[A, B]),
            Some((A, "echo".into()))
        );
        assert_eq!(
            c.route_name(ListKind::Tools, "b__echo", &[A, B]),
            Some((B, "echo".into()))
        );
        assert_eq!(c.route_name(ListKind::Tools, "echo", &[A, B]), None);
        assert_eq!(
            c.present(B, ListKind::Tools, &tools(&["echo"]).items)[0]["name"],
            "b__echo"
        );
        // b's whole list is known and has no `nope`: not a name of b.
        assert_eq!(c.route_name(ListKind::Tools, "b__nope", &[A, B]), None);
    }

    #[test]
    fn a_prefixed_name_routes_while_the_list_is_not_complete() {
        let mut c = Catalog::new(naming(&[Some("a")]));
        assert_eq!(
            c.route_name(ListKind::Tools, "a__later", &[A]),
            Some((A, "later".into())),
            "nothing known yet"
        );
        let first = Page {
            next: Some("p2".into()),
            ..tools(&["echo"])
        };
        c.record(A, ListKind::Tools, None, first);
        assert!(!c.list_complete(A, ListKind::Tools));
        assert_eq!(
            c.route_name(ListKind::Tools, "a__later", &[A]),
            Some((A, "later".into())),
            "page 2 not known yet"
        );
        c.record(A, ListKind::Tools, Some("p2".into()), tools(&["more"]));
        assert!(c.list_complete(A, ListKind::Tools));
        assert_eq!(c.route_name(ListKind::Tools, "a__later", &[A]), None);
        assert_eq!(
            c.route_name(ListKind::Tools, "a__more", &[A]),
            Some((A, "more".into()))
        );
    }

    #[test]
    fn uris_route_by_list_prefix_uri_prefixes_and_templates() {
        let mut n = naming(&[None, Some("b"), None]);
        n[2].uri_prefixes = vec!["file:///data/".into()];
        let mut c = Catalog::new(n);
        let res = Page {
            items: vec![json!({"uri": "test://static/1", "name": "one"})],
            next: None,
        };
        c.record(A, ListKind::Resources, None, res.clone());
        c.record(B, ListKind::Resources, None, res);
        let tpl = Page {
            items: vec![json!({"uriTemplate": "demo://dyn/{id}", "name": "d"})],
            next: None,
        };
        c.record(A, ListKind::Templates, None, tpl);
        let all = [A, B, UpstreamId(2)];
        assert_eq!(
            c.route_uri("test://static/1", &all),
            Some((A, "test://static/1".into()))
        );
        assert_eq!(
            c.route_uri("b+test://static/1", &all),
            Some((B, "test://static/1".into()))
        );
        assert_eq!(
            c.route_uri("file:///data/x", &all),
            Some((UpstreamId(2), "file:///data/x".into()))
        );
        assert_eq!(
            c.route_uri("demo://dyn/7", &all),
            Some((A, "demo://dyn/7".into()))
        );
        assert_eq!(c.route_uri("nobody://x", &all), None);
        assert_eq!(c.expose_uri(B, "test://static/1"), "b+test://static/1");
    }

    #[test]
    fn forget_drops_routes() {
        let mut c = Catalog::new(naming(&[None, None]));
        c.record(B, ListKind::Tools, None, tools(&["x"]));
        c.forget(B, ListKind::Tools);
        assert_eq!(c.route_name(ListKind::Tools, "x", &[A, B]), None);
    }

    #[test]
    fn single_upstream_owns_everything_unlisted() {
        let c = Catalog::new(naming(&[None]));
        assert_eq!(
            c.route_name(ListKind::Tools, "t", &[A]),
            Some((A, "t".into()))
        );
        assert_eq!(c.route_uri("x://y", &[A]), Some((A, "x://y".into())));
    }

    #[test]
    fn cursors_round_trip_and_foreign_ones_are_refused() {
        let parts = vec![(A, Some("p2".to_string())), (B, None)];
        let enc = encode_cursor(&parts);
        assert_eq!(decode_cursor(&enc, 2), Some(parts));
        assert_eq!(
            decode_cursor(&enc, 1),
            None,
            "names an upstream that does not exist"
        );
        assert_eq!(decode_cursor("garbage", 2), None);
        assert_eq!(decode_cursor("mx1.zz", 2), None);
    }
}
