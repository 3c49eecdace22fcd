//! What a server's own resource filters hide stays hidden from every client, the
//! holders of a parent URI included.

use super::*;
use crate::state::views::{NameFilter, ServerView};

/// A rig whose upstream hides `test://a/secret*` (`resources_deny`).
async fn rig_hiding_secrets() -> Rig {
    let info = InitInfo {
        capabilities: json!({"resources": {"subscribe": true}}),
        ..InitInfo::default()
    };
    rig_of_slot(settings(), info, |tx| {
        let deny = NameFilter::new(&[], &["test://a/secret*".to_owned()]).unwrap();
        let mut s = slot("up", tx, None);
        s.view = std::sync::Arc::new(ServerView::new(
            NameFilter::default(),
            NameFilter::default(),
            deny,
            Default::default(),
            Default::default(),
        ));
        s
    })
    .await
}

#[tokio::test]
async fn an_update_of_a_hidden_uri_does_not_reach_the_holders_of_its_parent() {
    let mut r = rig_hiding_secrets().await;
    let mut c = r.client(json!({})).await;
    c.send("resources/subscribe", json!({"uri": "test://a/"}))
        .await;
    let up = r.upstream_msgs().await;
    r.answer(&up[0], json!({})).await;
    c.next().await;
    let updated = |uri: &str| {
        Message::notification(
            "notifications/resources/updated",
            Some(&json!({ "uri": uri })),
        )
    };
    r.inject(updated("test://a/secret.txt")).await;
    // A visible sibling after it: once it arrived, the hidden one would have too.
    r.inject(updated("test://a/plain.txt")).await;
    r.sync().await;
    let got: Vec<Value> = c.pending();
    let uris: Vec<&str> = got
        .iter()
        .filter_map(|m| m["params"]["uri"].as_str())
        .collect();
    assert_eq!(uris, ["test://a/plain.txt"]);
}
