//! Several upstreams behind one endpoint (issue 4): two scripted upstreams offering
//! the same tool names and the same URIs, merged with and without prefixes.

use crate::common;

use common::http::{Daemon, HttpClient};
use common::*;
use serde_json::{json, Value};

fn two_servers(prefixes: bool, page_size: u32) -> String {
    servers(["a", "b"], prefixes, page_size, None)
}

/// Two scripted upstreams named after their config tables (`SCRIPTED_NAME`, which the
/// `stats` tool reports), in the given config order; with `logs`, each records what
/// it receives in its own `SCRIPTED_LOG`.
fn servers(order: [&str; 2], prefixes: bool, page_size: u32, logs: Option<&Logs>) -> String {
    let mut config = "[listen]\nhttp = \"127.0.0.1:0\"\n".to_owned();
    for name in order {
        let log = logs.map_or(String::new(), |l| {
            format!(", SCRIPTED_LOG = {:?}", l.path(name).to_str().unwrap())
        });
        config.push_str(&format!(
            "[servers.{name}]\ncommand = {cmd:?}\n\
             env = {{ SCRIPTED_NAME = \"{name}\", SCRIPTED_RESOURCES = \"5\", SCRIPTED_PAGE_SIZE = \"{page_size}\"{log} }}\n",
            cmd = scripted_upstream(),
        ));
        if prefixes {
            config.push_str(&format!("prefix = \"{name}\"\n"));
        }
    }
    config
}

/// The `SCRIPTED_LOG` files of one test's servers (removed on drop).
struct Logs {
    stem: String,
    names: Vec<String>,
}

impl Logs {
    fn new(names: &[&str]) -> Logs {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_nanos();
        Logs {
            stem: format!("mcpmux-agg-{}-{nanos}", std::process::id()),
            names: names.iter().map(|n| (*n).to_owned()).collect(),
        }
    }

    fn path(&self, server: &str) -> std::path::PathBuf {
        std::env::temp_dir().join(format!("{}-{server}.jsonl", self.stem))
    }

    /// The params of every request with this method that `server` received, in order.
    fn requests(&self, server: &str, method: &str) -> Vec<Value> {
        std::fs::read_to_string(self.path(server))
            .unwrap_or_default()
            .lines()
            .filter_map(|l| serde_json::from_str::<Value>(l).ok())
            .filter(|m| m["method"] == method && m.get("id").is_some())
            .map(|m| m["params"].clone())
            .collect()
    }
}

impl Drop for Logs {
    fn drop(&mut self) {
        for n in &self.names {
            let _ = std::fs::remove_file(self.path(n));
        }
    }
}

fn names(items: &Value, key: &str) -> Vec<String> {
    items
        .as_array()
        .unwrap()
        .iter()
        .map(|i| i[key].as_str().unwrap().to_owned())
        .collect()
}

async fn list_all(c: &mut HttpClient, method: &str, key: &str, name: &str) -> (Vec<String>, usize) {
    let mut out = vec![];
    let mut pages = 0;
    let mut cursor: Option<String> = None;
    loop {
        let params = cursor.as_ref().map_or(json!({}), |c| json!({"cursor": c}));
        let r = c.call(method, params).await;
        let result = r.get("result").unwrap_or_else(|| panic!("{method}: {r}"));
        out.extend(names(&result[key], name));
        pages += 1;
        match result["nextCursor"].as_str() {
            Some(next) => cursor = Some(next.to_owned()),
            None => return (out, pages),
        }
        assert!(pages < 20, "pagination does not end");
    }
}

fn tool_calls(stats: &Value, tool: &str) -> u64 {
    stats["tools"][tool].as_u64().unwrap_or(0)
}

#[tokio::test]
async fn with_prefixes_both_servers_show_and_calls_route_to_the_right_one() {
    let d = Daemon::start(&two_servers(true, 100)).await;
    let mut c = HttpClient::connect(&d.url, json!({})).await;
    let (tools, _) = list_all(&mut c, "tools/list", "tools", "name").await;
    assert!(
        tools.contains(&"a__echo".to_string()) && tools.contains(&"b__echo".to_string()),
        "{tools:?}"
    );
    assert!(!tools.contains(&"echo".to_string()));
    let r = c.tool("b__echo", json!({"text": "to b"})).await;
    assert_eq!(r["content"][0]["text"], "to b");
    let sa = c.tool("a__stats", json!({})).await;
    let sb = c.tool("b__stats", json!({})).await;
    assert_eq!(tool_calls(&sa, "echo"), 0, "{sa}");
    assert_eq!(tool_calls(&sb, "echo"), 1, "{sb}");

    let (uris, _) = list_all(&mut c, "resources/list", "resources", "uri").await;
    assert!(
        uris.contains(&"a+test://static/1".to_string())
            && uris.contains(&"b+test://static/1".to_string()),
        "{uris:?}"
    );
    let read = c
        .call("resources/read", json!({"uri": "b+test://static/1"}))
        .await;
    assert_eq!(read["result"]["contents"][0]["text"], "test://static/1 v0");
    assert_eq!(
        read["result"]["contents"][0]["uri"], "b+test://static/1",
        "contents are shown under the namespaced URI"
    );
    // The same holds for reads served from the cache of a held URI.
    c.call("resources/subscribe", json!({"uri": "a+test://static/2"}))
        .await;
    for _ in 0..2 {
        let r = c
            .call("resources/read", json!({"uri": "a+test://static/2"}))
            .await;
        assert_eq!(
            r["result"]["contents"][0]["uri"], "a+test://static/2",
            "{r}"
        );
    }
    let sb = c.tool("b__stats", json!({})).await;
    assert_eq!(sb["by_uri"]["resources/read"]["test://static/1"], 1, "{sb}");
}

/// Without prefixes, every tool and URI of the two identical servers collides: the
/// server first in config order must show and serve them, whichever it is.
async fn first_in_config_order_wins(order: [&str; 2]) {
    let d = Daemon::start(&servers(order, false, 100, None)).await;
    let mut c = HttpClient::connect(&d.url, json!({})).await;
    let (tools, _) = list_all(&mut c, "tools/list", "tools", "name").await;
    assert_eq!(
        tools.iter().filter(|t| *t == "echo").count(),
        1,
        "one echo, not two: {tools:?}"
    );
    c.tool("echo", json!({"text": "x"})).await;
    // `stats` collides too: the server that answers it names itself, and it is the
    // one that received the echo.
    let s = c.tool("stats", json!({})).await;
    assert_eq!(
        s["name"], order[0],
        "the first configured server answers: {s}"
    );
    assert_eq!(tool_calls(&s, "echo"), 1, "{s}");

    let (uris, _) = list_all(&mut c, "resources/list", "resources", "uri").await;
    assert_eq!(
        uris.iter().filter(|u| *u == "test://static/1").count(),
        1,
        "{uris:?}"
    );
    let read = c
        .call("resources/read", json!({"uri": "test://static/1"}))
        .await;
    assert_eq!(read["result"]["contents"][0]["text"], "test://static/1 v0");
    let s = c.tool("stats", json!({})).await;
    assert_eq!(s["name"], order[0], "{s}");
    assert_eq!(s["by_uri"]["resources/read"]["test://static/1"], 1, "{s}");
}

#[tokio::test]
async fn without_prefixes_the_first_server_wins_collisions() {
    first_in_config_order_wins(["a", "b"]).await;
}

#[tokio::test]
async fn without_prefixes_swapping_the_config_order_swaps_the_winner() {
    first_in_config_order_wins(["b", "a"]).await;
}

/// Which server answers the colliding `stats` tool, once the first in config order
/// (`first`) is back and has listed its tools: polled, since a restarted server's
/// list comes in its own time.
async fn winner_becomes(c: &mut HttpClient, first: &str) {
    let start = std::time::Instant::now();
    loop {
        let s = c.tool("stats", json!({})).await;
        if s["name"] == first {
            return;
        }
        assert!(
            start.elapsed() < EVENT_TIMEOUT,
            "{first} is first in config order, but {} still answers",
            s["name"]
        );
        tokio::task::yield_now().await;
    }
}

/// A reload keeps config order deciding collisions: a server the reload changed (a new
/// session, so a new upstream behind it) keeps winning the names it shares (and its
/// counters on /metrics go on), and a reordered config moves the win.
#[tokio::test]
async fn after_a_reload_the_first_server_in_config_order_still_wins() {
    let path = temp_config(&servers(["a", "b"], false, 100, None));
    let d = Daemon::start_at(&path).await;
    let mut c = HttpClient::connect(&d.url, json!({})).await;
    winner_becomes(&mut c, "a").await;
    let reload = || async {
        let r = reqwest::Client::new()
            .post(format!("{}/reload", d.origin()))
            .send()
            .await
            .unwrap();
        let status = r.status();
        let body = r.text().await.unwrap();
        assert!(status.is_success(), "{status}: {body}");
        body
    };
    // a changes (one more resource): it is restarted, and still wins once it is back.
    let with_a_changed = |order| {
        let config = servers(order, false, 100, None);
        let (before, a) = config.split_at(config.find("[servers.a]").unwrap());
        let a = a.replacen(
            "SCRIPTED_RESOURCES = \"5\"",
            "SCRIPTED_RESOURCES = \"6\"",
            1,
        );
        format!("{before}{a}")
    };
    let calls_of_a = || async {
        let text = reqwest::get(format!("{}/metrics", d.origin()))
            .await
            .unwrap()
            .text()
            .await
            .unwrap();
        let series = r#"mcpmux_upstream_requests_total{upstream="a",method="tools/call"} "#;
        text.lines()
            .find_map(|l| l.strip_prefix(series))
            .and_then(|n| n.parse::<u64>().ok())
            .unwrap_or_else(|| panic!("no {series}in\n{text}"))
    };
    let before = calls_of_a().await;
    assert!(before >= 1);
    std::fs::write(&path, with_a_changed(["a", "b"])).unwrap();
    let body = reload().await;
    assert!(body.contains("server a changed"), "{body}");
    winner_becomes(&mut c, "a").await;
    // The same series on /metrics: a's counts go on, never back to zero.
    assert!(calls_of_a().await > before);
    // The same servers in the other order: b wins from now on.
    std::fs::write(&path, with_a_changed(["b", "a"])).unwrap();
    let body = reload().await;
    assert!(
        body.contains("reordered") && !body.contains("changed"),
        "{body}"
    );
    winner_becomes(&mut c, "b").await;
}

#[tokio::test]
async fn pagination_spans_both_servers_with_proxy_cursors() {
    let d = Daemon::start(&two_servers(true, 2)).await;
    let mut c = HttpClient::connect(&d.url, json!({})).await;
    let (uris, pages) = list_all(&mut c, "resources/list", "resources", "uri").await;
    assert_eq!(uris.len(), 10, "5 resources from each server: {uris:?}");
    assert_eq!(pages, 3, "each server pages by 2: pages of 4, 4, 2");
    for s in ["a", "b"] {
        for n in 1..=5 {
            assert!(
                uris.contains(&format!("{s}+test://static/{n}")),
                "{s} {n} missing: {uris:?}"
            );
        }
    }
    let bad = c
        .call("resources/list", json!({"cursor": "not-ours"}))
        .await;
    assert_eq!(bad["error"]["code"], -32602);
}

#[tokio::test]
async fn the_same_uri_on_two_servers_is_two_subscriptions() {
    let d = Daemon::start(&two_servers(true, 100)).await;
    let mut on_a = HttpClient::connect(&d.url, json!({})).await;
    let mut on_b = HttpClient::connect(&d.url, json!({})).await;
    on_a.call("resources/subscribe", json!({"uri": "a+test://static/1"}))
        .await;
    on_b.call("resources/subscribe", json!({"uri": "b+test://static/1"}))
        .await;
    let sa = on_a.tool("a__stats", json!({})).await;
    let sb = on_a.tool("b__stats", json!({})).await;
    assert_eq!(sa["subscribed"], json!(["test://static/1"]));
    assert_eq!(sb["subscribed"], json!(["test://static/1"]));
    // An update from b reaches only b's holder, with the URI as clients know it.
    on_a.tool("b__emit_update", json!({"uri": "test://static/1"}))
        .await;
    let ev = on_b.next_event().await;
    assert_eq!(ev["params"]["uri"], "b+test://static/1");
    on_a.tool("a__emit_list_changed", json!({"kind": "prompts"}))
        .await;
    let first = on_a.next_event().await;
    assert_eq!(
        first["method"], "notifications/prompts/list_changed",
        "a's holder got b's update: {first}"
    );
    // Unsubscribing from b leaves a's subscription alone.
    on_b.call("resources/unsubscribe", json!({"uri": "b+test://static/1"}))
        .await;
    let sa = on_a.tool("a__stats", json!({})).await;
    let sb = on_a.tool("b__stats", json!({})).await;
    assert_eq!(sa["subscribed"], json!(["test://static/1"]));
    assert_eq!(sb["subscribed"], json!([]));
}

/// `completion/complete` for a prompt ref, with a partial `name` argument.
fn prompt_completion(name: &str) -> Value {
    json!({"ref": {"type": "ref/prompt", "name": name},
           "argument": {"name": "name", "value": "A"}})
}

/// `completion/complete` for a resource (template) ref, with a partial `id` argument.
fn resource_completion(uri: &str) -> Value {
    json!({"ref": {"type": "ref/resource", "uri": uri},
           "argument": {"name": "id", "value": "b"}})
}

fn completion_values(r: &Value) -> Value {
    r.get("result")
        .unwrap_or_else(|| panic!("completion failed: {r}"))["completion"]["values"]
        .clone()
}

#[tokio::test]
async fn completions_route_by_their_ref_to_the_server_that_owns_it() {
    let logs = Logs::new(&["a", "b"]);
    let d = Daemon::start(&servers(["a", "b"], true, 100, Some(&logs))).await;
    let mut c = HttpClient::connect(&d.url, json!({})).await;
    let (prompts, _) = list_all(&mut c, "prompts/list", "prompts", "name").await;
    assert!(prompts.contains(&"b__greet".to_string()), "{prompts:?}");
    let (templates, _) = list_all(
        &mut c,
        "resources/templates/list",
        "resourceTemplates",
        "uriTemplate",
    )
    .await;
    assert!(
        templates.contains(&"a+test://dynamic/{id}".to_string()),
        "{templates:?}"
    );

    // A prompt ref goes to the prompt's server, under the server's own name.
    let r = c
        .call("completion/complete", prompt_completion("b__greet"))
        .await;
    assert_eq!(completion_values(&r), json!(["Alice"]), "{r}");
    let seen = logs.requests("b", "completion/complete");
    assert_eq!(seen.len(), 1, "{seen:?}");
    assert_eq!(
        seen[0]["ref"],
        json!({"type": "ref/prompt", "name": "greet"})
    );
    assert_eq!(seen[0]["argument"], json!({"name": "name", "value": "A"}));
    assert_eq!(
        logs.requests("a", "completion/complete"),
        Vec::<Value>::new()
    );

    // A resource template ref goes to the template's server, under its own URI.
    let r = c
        .call(
            "completion/complete",
            resource_completion("a+test://dynamic/{id}"),
        )
        .await;
    assert_eq!(completion_values(&r), json!(["blob-1"]), "{r}");
    let seen = logs.requests("a", "completion/complete");
    assert_eq!(seen.len(), 1, "{seen:?}");
    assert_eq!(
        seen[0]["ref"],
        json!({"type": "ref/resource", "uri": "test://dynamic/{id}"})
    );
    assert_eq!(logs.requests("b", "completion/complete").len(), 1);

    // Refs no server owns get a JSON-RPC error from mcpmux, and reach no server.
    for (params, why) in [
        (prompt_completion("greet"), "unknown prompt"),
        (prompt_completion("nope"), "unknown prompt"),
        (resource_completion("nobody://x/{id}"), "no upstream serves"),
        (
            json!({"ref": {"type": "ref/tool", "name": "a__echo"},
                   "argument": {"name": "x", "value": ""}}),
            "ref/prompt or ref/resource",
        ),
        (
            json!({"argument": {"name": "x", "value": ""}}),
            "ref/prompt or ref/resource",
        ),
    ] {
        let r = c.call("completion/complete", params.clone()).await;
        assert_eq!(r["error"]["code"], -32602, "{params}: {r}");
        let msg = r["error"]["message"].as_str().unwrap();
        assert!(msg.contains(why), "{params}: {msg}");
    }
    assert_eq!(logs.requests("a", "completion/complete").len(), 1);
    assert_eq!(logs.requests("b", "completion/complete").len(), 1);
}

#[tokio::test]
async fn without_prefixes_completions_go_to_the_first_server_that_owns_the_ref() {
    // b first in config order: it owns the colliding prompt and template.
    let logs = Logs::new(&["a", "b"]);
    let d = Daemon::start(&servers(["b", "a"], false, 100, Some(&logs))).await;
    let mut c = HttpClient::connect(&d.url, json!({})).await;
    let r = c
        .call("completion/complete", prompt_completion("greet"))
        .await;
    assert_eq!(completion_values(&r), json!(["Alice"]), "{r}");
    let r = c
        .call(
            "completion/complete",
            resource_completion("test://dynamic/{id}"),
        )
        .await;
    assert_eq!(completion_values(&r), json!(["blob-1"]), "{r}");
    let seen = logs.requests("b", "completion/complete");
    assert_eq!(seen.len(), 2, "{seen:?}");
    assert_eq!(
        seen[0]["ref"],
        json!({"type": "ref/prompt", "name": "greet"})
    );
    assert_eq!(
        seen[1]["ref"],
        json!({"type": "ref/resource", "uri": "test://dynamic/{id}"})
    );
    assert_eq!(
        logs.requests("a", "completion/complete"),
        Vec::<Value>::new()
    );
}
