//! The catalog's naming, routing and views.
use super::*;
use serde_json::json;

fn naming(prefixes: &[Option<&str>]) -> Vec<UpstreamNaming> {
    prefixes
        .iter()
        .map(|p| UpstreamNaming {
            prefix: p.map(str::to_owned),
            uri_prefixes: vec![],
            ..Default::default()
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
const V: ViewId = ViewId::DEFAULT;

#[test]
fn without_prefix_first_server_wins_and_the_loser_is_hidden() {
    let mut c = Catalog::new(naming(&[None, None]));
    assert!(c
        .record(A, ListKind::Tools, None, tools(&["echo", "a_only"]))
        .is_empty());
    let hidden = c.record(B, ListKind::Tools, None, tools(&["echo", "b_only"]));
    assert_eq!(hidden, vec!["echo".to_string()]);
    assert_eq!(
        c.route_name(V, ListKind::Tools, "echo", &[A, B]),
        Some((A, "echo".into()))
    );
    assert_eq!(
        c.route_name(V, ListKind::Tools, "b_only", &[A, B]),
        Some((B, "b_only".into()))
    );
    let shown = c.present(V, B, ListKind::Tools, &tools(&["echo", "b_only"]).items);
    assert_eq!(shown.len(), 1);
    assert_eq!(shown[0]["name"], "b_only");
}

#[test]
fn prefixes_keep_both_and_route_back() {
    let mut c = Catalog::new(naming(&[Some("a"), Some("b")]));
    c.record(A, ListKind::Tools, None, tools(&["echo"]));
    c.record(B, ListKind::Tools, None, tools(&["echo"]));
    assert_eq!(
        c.route_name(V, ListKind::Tools, "a__echo", &[A, B]),
        Some((A, "echo".into()))
    );
    assert_eq!(
        c.route_name(V, ListKind::Tools, "b__echo", &[A, B]),
        Some((B, "echo".into()))
    );
    assert_eq!(c.route_name(V, ListKind::Tools, "echo", &[A, B]), None);
    assert_eq!(
        c.present(V, B, ListKind::Tools, &tools(&["echo"]).items)[0]["name"],
        "b__echo"
    );
    // b's whole list is known and has no `nope`: not a name of b.
    assert_eq!(c.route_name(V, ListKind::Tools, "b__nope", &[A, B]), None);
}

#[test]
fn a_prefixed_name_routes_while_the_list_is_not_complete() {
    let mut c = Catalog::new(naming(&[Some("a")]));
    assert_eq!(
        c.route_name(V, ListKind::Tools, "a__later", &[A]),
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
        c.route_name(V, ListKind::Tools, "a__later", &[A]),
        Some((A, "later".into())),
        "page 2 not known yet"
    );
    c.record(A, ListKind::Tools, Some("p2".into()), tools(&["more"]));
    assert!(c.list_complete(A, ListKind::Tools));
    assert_eq!(c.route_name(V, ListKind::Tools, "a__later", &[A]), None);
    assert_eq!(
        c.route_name(V, ListKind::Tools, "a__more", &[A]),
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
        c.route_uri(V, "test://static/1", &all),
        Some((A, "test://static/1".into()))
    );
    assert_eq!(
        c.route_uri(V, "b+test://static/1", &all),
        Some((B, "test://static/1".into()))
    );
    assert_eq!(
        c.route_uri(V, "file:///data/x", &all),
        Some((UpstreamId(2), "file:///data/x".into()))
    );
    assert_eq!(
        c.route_uri(V, "demo://dyn/7", &all),
        Some((A, "demo://dyn/7".into()))
    );
    assert_eq!(c.route_uri(V, "nobody://x", &all), None);
    assert_eq!(c.expose_uri(B, "test://static/1"), "b+test://static/1");
}

#[test]
fn forget_drops_routes() {
    let mut c = Catalog::new(naming(&[None, None]));
    c.record(B, ListKind::Tools, None, tools(&["x"]));
    c.forget(B, ListKind::Tools);
    assert_eq!(c.route_name(V, ListKind::Tools, "x", &[A, B]), None);
}

#[test]
fn single_upstream_owns_everything_unlisted() {
    let c = Catalog::new(naming(&[None]));
    assert_eq!(
        c.route_name(V, ListKind::Tools, "t", &[A]),
        Some((A, "t".into()))
    );
    assert_eq!(c.route_uri(V, "x://y", &[A]), Some((A, "x://y".into())));
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
    let twice = encode_cursor(&[(A, Some("p2".into())), (A, None)]);
    assert_eq!(decode_cursor(&twice, 2), None, "names an upstream twice");
}

#[test]
fn pages_are_taken_from_the_current_list_under_known_cursors_only() {
    let mut c = Catalog::new(naming(&[None]));
    let k = ListKind::Tools;
    let first = Page {
        next: Some("p2".into()),
        ..tools(&["a"])
    };
    let e = c.epoch(A, k);
    assert!(c.takes((A, k), e, &None, Asker::Client, 10));
    assert!(
        !c.takes((A, k), e, &Some("p2".into()), Asker::Client, 10),
        "not before its first page"
    );
    c.record(A, k, None, first);
    assert!(
        c.takes((A, k), e, &Some("p2".into()), Asker::Client, 10),
        "the next of a page held"
    );
    assert!(
        !c.takes((A, k), e, &Some("forged".into()), Asker::Client, 10),
        "a cursor the catalog never handed out"
    );
    assert!(
        c.takes((A, k), e, &Some("forged".into()), Asker::Catalog, 10),
        "the catalog's own chain follows the server's cursors"
    );
    assert!(
        !c.takes((A, k), e, &Some("p2".into()), Asker::Client, 1),
        "at the page bound"
    );
    c.forget(A, k);
    assert!(
        !c.takes((A, k), e, &None, Asker::Client, 10),
        "asked for before the list was dropped"
    );
    assert!(c.takes((A, k), c.epoch(A, k), &None, Asker::Client, 10));
}

fn filter(allow: &[&str], deny: &[&str]) -> crate::state::views::NameFilter {
    let s = |v: &[&str]| v.iter().map(|x| (*x).to_owned()).collect::<Vec<_>>();
    crate::state::views::NameFilter::new(&s(allow), &s(deny)).unwrap()
}

#[test]
fn each_view_routes_a_shared_name_to_its_own_first_server() {
    let mut c = Catalog::new(naming(&[None, None]));
    let only_b = ViewId(1);
    c.set_views(vec![(only_b, ViewSpec::of([B], filter(&[], &[])))]);
    c.record(A, ListKind::Tools, None, tools(&["echo"]));
    c.record(B, ListKind::Tools, None, tools(&["echo", "b_only"]));
    assert_eq!(
        c.route_name(V, ListKind::Tools, "echo", &[A, B]),
        Some((A, "echo".into()))
    );
    assert_eq!(
        c.route_name(only_b, ListKind::Tools, "echo", &[B]),
        Some((B, "echo".into()))
    );
    assert_eq!(
        c.present(only_b, B, ListKind::Tools, &tools(&["echo"]).items)
            .len(),
        1
    );
    assert!(!c.in_view(only_b, A) && c.in_view(only_b, B) && c.in_view(V, A));
    assert!(
        !c.in_view(ViewId(9), A),
        "no upstream is in a view that does not exist"
    );
}

#[test]
fn a_view_filter_hides_tools_from_lists_and_routes() {
    let mut c = Catalog::new(naming(&[Some("gh")]));
    let v = ViewId(2);
    c.set_views(vec![(v, ViewSpec::of([A], filter(&[], &["gh__delete_*"])))]);
    c.record(
        A,
        ListKind::Tools,
        None,
        tools(&["get_issue", "delete_repo"]),
    );
    let shown = c.present(
        v,
        A,
        ListKind::Tools,
        &tools(&["get_issue", "delete_repo"]).items,
    );
    assert_eq!(shown.len(), 1);
    assert_eq!(shown[0]["name"], "gh__get_issue");
    assert_eq!(
        c.route_name(v, ListKind::Tools, "gh__delete_repo", &[A]),
        None
    );
    assert_eq!(
        c.route_name(V, ListKind::Tools, "gh__delete_repo", &[A]),
        Some((A, "delete_repo".into())),
        "the default view has no such filter"
    );
}

#[test]
fn server_filters_and_renames_apply_in_every_view() {
    let sv = ServerView::new(
        filter(&[], &["secret"]),
        filter(&["greet*"], &[]),
        filter(&[], &["file:///private/*"]),
        BTreeMap::from([("echo".into(), "say".into())]),
        BTreeMap::from([("echo".into(), "Says it back.".into())]),
    );
    let mut c = Catalog::new(vec![UpstreamNaming {
        view: Arc::new(sv),
        ..Default::default()
    }]);
    c.record(A, ListKind::Tools, None, tools(&["echo", "secret", "add"]));
    let shown = c.present(
        V,
        A,
        ListKind::Tools,
        &tools(&["echo", "secret", "add"]).items,
    );
    let names: Vec<&str> = shown.iter().map(|t| t["name"].as_str().unwrap()).collect();
    assert_eq!(names, ["say", "add"]);
    assert_eq!(shown[0]["description"], "Says it back.");
    assert_eq!(
        c.route_name(V, ListKind::Tools, "say", &[A]),
        Some((A, "echo".into()))
    );
    assert_eq!(
        c.route_name(V, ListKind::Tools, "echo", &[A]),
        None,
        "the old name is gone"
    );
    assert_eq!(c.route_name(V, ListKind::Tools, "secret", &[A]), None);
    // Not yet listed: the single-server fallback obeys the same rules.
    assert_eq!(
        c.route_name(V, ListKind::Prompts, "greeting", &[A]),
        Some((A, "greeting".into()))
    );
    assert_eq!(c.route_name(V, ListKind::Prompts, "other", &[A]), None);
    assert_eq!(c.route_uri(V, "file:///private/key", &[A]), None);
    assert_eq!(
        c.route_uri(V, "file:///public/a", &[A]),
        Some((A, "file:///public/a".into()))
    );
}

#[test]
fn a_tool_with_invalid_x_mcp_header_annotations_is_neither_listed_nor_routed() {
    let mut c = Catalog::new(naming(&[None]));
    let bad = json!({"name": "bad", "inputSchema": {"type": "object", "properties":
        {"v": {"type": "number", "x-mcp-header": "Score"}}}});
    let good = json!({"name": "good", "inputSchema": {"type": "object", "properties":
        {"v": {"type": "string", "x-mcp-header": "Region"}}}});
    let page = Page {
        items: vec![bad, good],
        next: None,
    };
    c.record(A, ListKind::Tools, None, page.clone());
    let shown = c.present(V, A, ListKind::Tools, &page.items);
    assert_eq!(shown.len(), 1);
    assert_eq!(shown[0]["name"], "good");
    assert_eq!(c.route_name(V, ListKind::Tools, "bad", &[A]), None);
    assert_eq!(
        c.route_name(V, ListKind::Tools, "good", &[A]),
        Some((A, "good".into()))
    );
}

#[test]
fn items_are_found_by_own_name_across_pages_first_one_winning() {
    let mut c = Catalog::new(naming(&[None]));
    let mut first = tools(&["a", "dup"]);
    first.next = Some("p2".into());
    c.record(A, ListKind::Tools, None, first);
    assert_eq!(c.own_item(A, ListKind::Tools, "z"), None);
    let mut second = tools(&["z", "dup"]);
    second.items[1]["inputSchema"] = json!({"second": true});
    c.record(A, ListKind::Tools, Some("p2".into()), second);
    assert_eq!(c.own_item(A, ListKind::Tools, "z").unwrap()["name"], "z");
    // The first page's `dup`, as a scan in page order finds it.
    assert_eq!(
        c.own_item(A, ListKind::Tools, "dup").unwrap()["inputSchema"],
        json!({})
    );
    assert_eq!(c.item(V, ListKind::Tools, "z").unwrap()["name"], "z");
    // A page fetched again replaces what it had.
    c.record(A, ListKind::Tools, Some("p2".into()), tools(&["y"]));
    assert_eq!(c.own_item(A, ListKind::Tools, "z"), None);
    assert!(c.own_item(A, ListKind::Tools, "y").is_some());
    assert_eq!(c.own_item(A, ListKind::Prompts, "y"), None);
    c.forget(A, ListKind::Tools);
    assert_eq!(c.own_item(A, ListKind::Tools, "a"), None);
}
