//! Pure rules for the handshake with a client: which capabilities mcpmux declares
//! (the merge of what the upstreams offer) and whether a client has negotiated
//! resource subscriptions (docs/architecture.md, "Capability gating").

use serde_json::{json, Map, Value};

use crate::config::ClientCapabilityPolicy;

/// What one ready upstream offers, as the hub sees it.
#[derive(Debug, Clone, Copy)]
pub struct UpstreamOffer<'a> {
    pub capabilities: &'a Value,
    /// `force_subscribe = true` in its config.
    pub force_subscribe: bool,
}

impl UpstreamOffer<'_> {
    /// The upstream will get `resources/subscribe` from mcpmux.
    pub fn subscribable(&self) -> bool {
        self.force_subscribe || self.capabilities["resources"]["subscribe"].as_bool() == Some(true)
    }
}

/// The `capabilities` mcpmux declares to clients.
pub fn merged_capabilities<'a>(offers: impl IntoIterator<Item = UpstreamOffer<'a>>) -> Value {
    let mut caps = Map::new();
    let list_changed = |caps: &mut Map<String, Value>, name: &str, v: &Value| {
        if v.is_object() {
            let entry = caps.entry(name).or_insert_with(|| json!({}));
            if v["listChanged"].as_bool() == Some(true) {
                entry["listChanged"] = json!(true);
            }
        }
    };
    for o in offers {
        let c = o.capabilities;
        list_changed(&mut caps, "tools", &c["tools"]);
        list_changed(&mut caps, "prompts", &c["prompts"]);
        if c["resources"].is_object() || o.force_subscribe {
            list_changed(&mut caps, "resources", &c["resources"]);
            let entry = caps.entry("resources").or_insert_with(|| json!({}));
            if o.subscribable() {
                entry["subscribe"] = json!(true);
            }
        }
        for plain in ["logging", "completions"] {
            if c[plain].is_object() {
                caps.entry(plain).or_insert_with(|| json!({}));
            }
        }
    }
    Value::Object(caps)
}

/// Whether mcpmux declared `resources.subscribe` in `capabilities`.
pub fn declares_subscribe(capabilities: &Value) -> bool {
    capabilities["resources"]["subscribe"].as_bool() == Some(true)
}

/// Why a client may not subscribe; `None` when it has negotiated subscriptions.
pub fn subscribe_refusal(
    declared_by_proxy: bool,
    client_capabilities: &Value,
    policy: ClientCapabilityPolicy,
) -> Option<String> {
    if !declared_by_proxy {
        return Some(
            "resources/subscribe is not available: no upstream declares resources.subscribe \
             (set servers.NAME.force_subscribe = true for a server that handles it anyway)"
                .into(),
        );
    }
    let declared = client_capabilities["resources"]["subscribe"].as_bool();
    match (policy, declared) {
        (ClientCapabilityPolicy::Offered, Some(false)) => Some(
            "resources/subscribe was not negotiated: this client declared \
             capabilities.resources.subscribe = false (subscriptions.client_capability = \"offered\")"
                .into(),
        ),
        (ClientCapabilityPolicy::Required, Some(true)) | (ClientCapabilityPolicy::Offered, _) => None,
        (ClientCapabilityPolicy::Required, _) => Some(
            "resources/subscribe was not negotiated: subscriptions.client_capability = \"required\" \
             and this client did not declare capabilities.resources.subscribe = true in initialize"
                .into(),
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn merge_declares_subscribe_only_when_an_upstream_has_it() {
        let a = json!({"tools": {"listChanged": true}, "resources": {"listChanged": true}});
        let b = json!({"resources": {"subscribe": true}, "logging": {}});
        let only_a = merged_capabilities([UpstreamOffer {
            capabilities: &a,
            force_subscribe: false,
        }]);
        assert!(!declares_subscribe(&only_a));
        assert_eq!(only_a["tools"]["listChanged"], json!(true));
        let both = merged_capabilities([
            UpstreamOffer {
                capabilities: &a,
                force_subscribe: false,
            },
            UpstreamOffer {
                capabilities: &b,
                force_subscribe: false,
            },
        ]);
        assert!(declares_subscribe(&both));
        assert_eq!(both["resources"]["listChanged"], json!(true));
        assert!(both["logging"].is_object());
        assert!(both.get("prompts").is_none());
    }

    #[test]
    fn force_subscribe_declares_it() {
        let a = json!({"resources": {}});
        let m = merged_capabilities([UpstreamOffer {
            capabilities: &a,
            force_subscribe: true,
        }]);
        assert!(declares_subscribe(&m));
    }

    #[test]
    fn offered_policy_refuses_only_an_explicit_false() {
        let p = ClientCapabilityPolicy::Offered;
        assert!(subscribe_refusal(true, &json!({}), p).is_none());
        assert!(subscribe_refusal(true, &json!({"resources": {"subscribe": true}}), p).is_none());
        let r = subscribe_refusal(true, &json!({"resources": {"subscribe": false}}), p).unwrap();
        assert!(r.contains("client_capability"), "{r}");
    }

    #[test]
    fn required_policy_needs_an_explicit_true() {
        let p = ClientCapabilityPolicy::Required;
        assert!(subscribe_refusal(true, &json!({"resources": {"subscribe": true}}), p).is_none());
        let r = subscribe_refusal(true, &json!({}), p).unwrap();
        assert!(r.contains("\"required\""), "{r}");
    }

    #[test]
    fn nothing_negotiates_when_the_proxy_did_not_declare() {
        let r = subscribe_refusal(
            false,
            &json!({"resources": {"subscribe": true}}),
            ClientCapabilityPolicy::Offered,
        );
        assert!(r.unwrap().contains("force_subscribe"));
    }
}
