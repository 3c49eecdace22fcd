//! Views over the shared upstreams (docs/architecture.md, "Profiles"): what one server
//! shows of itself (its filters and tool renames, the same in every view) and what one
//! view shows (which servers, and a filter on the tool names as its clients see them).
//! Pure: no I/O.
//!
//! Owns: glob matching of names and URIs, the rename rule in both directions, and
//! whether a view changed between two configs.
//! Never: decides routing on its own (the catalog asks it), or holds clients.

use std::collections::{BTreeMap, HashMap};

use globset::{Glob, GlobSet, GlobSetBuilder};

use crate::state::catalog::ListKind;
use crate::state::ids::UpstreamId;

/// An allow list and a deny list of globs (`*`, `?`, `[a-z]`, `{a,b}`). A name passes
/// when the allow list is empty or one of its globs matches, and no deny glob matches.
#[derive(Debug, Clone, Default)]
pub struct NameFilter {
    patterns: (Vec<String>, Vec<String>),
    allow: Option<GlobSet>,
    deny: Option<GlobSet>,
}

impl PartialEq for NameFilter {
    fn eq(&self, other: &Self) -> bool {
        self.patterns == other.patterns
    }
}

/// A glob that does not parse, with the parser's reason.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("bad glob {pattern:?}: {reason}")]
pub struct BadGlob {
    pub pattern: String,
    pub reason: String,
}

impl NameFilter {
    /// # Errors
    /// The first pattern that is not a glob.
    pub fn new(allow: &[String], deny: &[String]) -> Result<Self, BadGlob> {
        Ok(NameFilter {
            patterns: (allow.to_vec(), deny.to_vec()),
            allow: set(allow)?,
            deny: set(deny)?,
        })
    }

    /// Whether `name` passes.
    pub fn allows(&self, name: &str) -> bool {
        self.allow.as_ref().is_none_or(|s| s.is_match(name))
            && !self.deny.as_ref().is_some_and(|s| s.is_match(name))
    }

    /// Whether it lets everything through.
    pub fn is_open(&self) -> bool {
        self.allow.is_none() && self.deny.is_none()
    }
}

/// Checks one glob (for the config's error messages).
///
/// # Errors
/// When `pattern` is not a glob.
pub fn check_glob(pattern: &str) -> Result<(), BadGlob> {
    glob(pattern).map(|_| ())
}

fn glob(pattern: &str) -> Result<Glob, BadGlob> {
    Glob::new(pattern).map_err(|e| BadGlob {
        pattern: pattern.to_owned(),
        reason: e.kind().to_string(),
    })
}

fn set(patterns: &[String]) -> Result<Option<GlobSet>, BadGlob> {
    if patterns.is_empty() {
        return Ok(None);
    }
    let mut b = GlobSetBuilder::new();
    for p in patterns {
        b.add(glob(p)?);
    }
    b.build().map(Some).map_err(|e| BadGlob {
        pattern: patterns.join(", "),
        reason: e.to_string(),
    })
}

/// What one server shows of itself, in every view: `servers.NAME.tools_allow` and the
/// other filters, on the server's own names and URIs, and its tool renames.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ServerView {
    pub tools: NameFilter,
    pub prompts: NameFilter,
    /// On resource URIs and template URI templates.
    pub resources: NameFilter,
    /// The server's own tool name → the name shown.
    rename: BTreeMap<String, String>,
    /// The name shown → the server's own name.
    unrename: HashMap<String, String>,
    /// The server's own tool name → the description shown.
    pub descriptions: BTreeMap<String, String>,
}

impl ServerView {
    pub fn new(
        tools: NameFilter,
        prompts: NameFilter,
        resources: NameFilter,
        rename: BTreeMap<String, String>,
        descriptions: BTreeMap<String, String>,
    ) -> Self {
        let unrename = rename
            .iter()
            .map(|(own, shown)| (shown.clone(), own.clone()))
            .collect();
        ServerView {
            tools,
            prompts,
            resources,
            rename,
            unrename,
            descriptions,
        }
    }

    /// Whether the item the server calls `own` passes this server's filter.
    pub fn allows(&self, kind: ListKind, own: &str) -> bool {
        match kind {
            ListKind::Tools => self.tools.allows(own),
            ListKind::Prompts => self.prompts.allows(own),
            ListKind::Resources | ListKind::Templates => self.resources.allows(own),
        }
    }

    /// The name an item is shown by (before any prefix), or `None` when it is not shown:
    /// filtered out, or a tool whose name another tool was renamed to (the renamed one
    /// takes the name).
    pub fn shown<'a>(&'a self, kind: ListKind, own: &'a str) -> Option<&'a str> {
        if !self.allows(kind, own) {
            return None;
        }
        if kind != ListKind::Tools {
            return Some(own);
        }
        match self.rename.get(own) {
            Some(shown) => Some(shown),
            None if self.unrename.contains_key(own) => None,
            None => Some(own),
        }
    }

    /// The server's own name of the item shown as `shown` (before any prefix), when it
    /// is shown: the inverse of [`ServerView::shown`].
    pub fn own<'a>(&'a self, kind: ListKind, shown: &'a str) -> Option<&'a str> {
        let own = match kind {
            ListKind::Tools => match self.unrename.get(shown) {
                Some(own) => own.as_str(),
                None if self.rename.contains_key(shown) => return None,
                None => shown,
            },
            _ => shown,
        };
        self.allows(kind, own).then_some(own)
    }

    /// The description a tool is shown with instead of its own, if any.
    pub fn description(&self, own: &str) -> Option<&str> {
        self.descriptions.get(own).map(String::as_str)
    }
}

/// One view as the hub applies it: its servers (by upstream index) and the filter on
/// tool names as its clients see them (after prefix and rename).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ViewSpec {
    /// `None`: every upstream (the default view).
    members: Option<Vec<bool>>,
    pub tools: NameFilter,
}

impl ViewSpec {
    /// The view of every server.
    pub fn everything() -> Self {
        ViewSpec::default()
    }

    /// A view of the upstreams in `members`.
    pub fn of(members: impl IntoIterator<Item = UpstreamId>, tools: NameFilter) -> Self {
        let mut m = Vec::new();
        for u in members {
            if m.len() <= u.0 {
                m.resize(u.0 + 1, false);
            }
            m[u.0] = true;
        }
        ViewSpec {
            members: Some(m),
            tools,
        }
    }

    /// Whether upstream `u` is in the view.
    pub fn includes(&self, u: UpstreamId) -> bool {
        self.members
            .as_ref()
            .is_none_or(|m| m.get(u.0).copied().unwrap_or(false))
    }

    /// Whether a name of `kind`, as this view's clients see it, passes its filter.
    pub fn shows(&self, kind: ListKind, exposed: &str) -> bool {
        kind != ListKind::Tools || self.tools.allows(exposed)
    }

    /// Its members (for a view of every server: those of `0..upstreams`).
    pub fn members(&self, upstreams: usize) -> impl Iterator<Item = UpstreamId> + '_ {
        (0..upstreams)
            .map(UpstreamId)
            .filter(move |u| self.includes(*u))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn f(allow: &[&str], deny: &[&str]) -> NameFilter {
        let s = |v: &[&str]| v.iter().map(|x| (*x).to_owned()).collect::<Vec<_>>();
        NameFilter::new(&s(allow), &s(deny)).unwrap()
    }

    #[test]
    fn allow_then_deny() {
        let open = f(&[], &[]);
        assert!(open.is_open() && open.allows("anything"));
        let only = f(&["get_*", "list"], &["get_secret*"]);
        assert!(only.allows("get_issue") && only.allows("list"));
        assert!(!only.allows("delete") && !only.allows("get_secret_key"));
        let uris = f(&["file:///pub/**"], &[]);
        assert!(uris.allows("file:///pub/a/b.txt"));
        assert!(!uris.allows("file:///priv/a"));
    }

    #[test]
    fn bad_globs_are_named() {
        let e = NameFilter::new(&["a[".into()], &[]).unwrap_err();
        assert_eq!(e.pattern, "a[");
        assert!(check_glob("{a,b").is_err());
        assert!(check_glob("a*").is_ok());
    }

    #[test]
    fn renames_work_both_ways_and_take_the_name() {
        let rename = BTreeMap::from([("a".into(), "b".into()), ("x".into(), "y".into())]);
        let v = ServerView::new(
            f(&[], &["hidden"]),
            f(&[], &[]),
            f(&[], &[]),
            rename,
            BTreeMap::new(),
        );
        assert_eq!(v.shown(ListKind::Tools, "a"), Some("b"));
        assert_eq!(v.own(ListKind::Tools, "b"), Some("a"));
        // The server's own `b` gives way to the renamed `a`; `a` is no longer a name.
        assert_eq!(v.shown(ListKind::Tools, "b"), None);
        assert_eq!(v.own(ListKind::Tools, "a"), None);
        assert_eq!(v.shown(ListKind::Tools, "plain"), Some("plain"));
        assert_eq!(v.own(ListKind::Tools, "plain"), Some("plain"));
        assert_eq!(v.shown(ListKind::Tools, "hidden"), None);
        assert_eq!(v.own(ListKind::Tools, "hidden"), None);
        // Renames are for tools only.
        assert_eq!(v.shown(ListKind::Prompts, "a"), Some("a"));
    }

    #[test]
    fn views_include_their_members_and_filter_tool_names() {
        let all = ViewSpec::everything();
        assert!(all.includes(UpstreamId(7)));
        let v = ViewSpec::of([UpstreamId(1)], f(&[], &["gh__*"]));
        assert!(!v.includes(UpstreamId(0)) && v.includes(UpstreamId(1)));
        assert!(!v.includes(UpstreamId(2)));
        assert_eq!(v.members(3).collect::<Vec<_>>(), [UpstreamId(1)]);
        assert!(!v.shows(ListKind::Tools, "gh__x"));
        assert!(v.shows(ListKind::Prompts, "gh__x"));
    }
}
