//! The `notifications` filter of a 2026-07-28 `subscriptions/listen` request, which its
//! acknowledgement echoes with the honoured part (`toolsListChanged`,
//! `promptsListChanged`, `resourcesListChanged`, `resourceSubscriptions`): the one
//! reading and writing of that object, for the side that listens (an upstream) and the
//! side that is listened to (a client's listen).
//!
//! Wire format only: no state, no I/O. Never keeps members it does not know.

use serde_json::{json, Map, Value};

/// A listen's `notifications` filter.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ListenFilter {
    /// `toolsListChanged: true`.
    pub tools: bool,
    /// `promptsListChanged: true`.
    pub prompts: bool,
    /// `resourcesListChanged: true`.
    pub resources: bool,
    /// `resourceSubscriptions`, when present (the URIs, non-strings skipped).
    pub uris: Option<Vec<String>>,
}

impl ListenFilter {
    /// Reads a filter (`params.notifications`); anything that is not an object reads
    /// as the empty filter.
    pub fn parse(notifications: &Value) -> ListenFilter {
        ListenFilter {
            tools: notifications["toolsListChanged"] == json!(true),
            prompts: notifications["promptsListChanged"] == json!(true),
            resources: notifications["resourcesListChanged"] == json!(true),
            uris: notifications["resourceSubscriptions"].as_array().map(|a| {
                a.iter()
                    .filter_map(|u| u.as_str().map(str::to_owned))
                    .collect()
            }),
        }
    }

    /// The filter as JSON: only the flags that are set, `resourceSubscriptions` when
    /// `uris` is `Some` (even empty).
    pub fn to_value(&self) -> Value {
        let mut filter = Map::new();
        for (on, name) in [
            (self.tools, "toolsListChanged"),
            (self.prompts, "promptsListChanged"),
            (self.resources, "resourcesListChanged"),
        ] {
            if on {
                filter.insert(name.into(), json!(true));
            }
        }
        if let Some(uris) = &self.uris {
            filter.insert("resourceSubscriptions".into(), json!(uris));
        }
        Value::Object(filter)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_filter_reads_back_what_it_writes() {
        let f = ListenFilter {
            tools: true,
            prompts: false,
            resources: true,
            uris: Some(vec!["a://1".into(), "b://2".into()]),
        };
        let v = f.to_value();
        assert_eq!(
            v,
            json!({"toolsListChanged": true, "resourcesListChanged": true, "resourceSubscriptions": ["a://1", "b://2"]})
        );
        assert_eq!(ListenFilter::parse(&v), f);
    }

    #[test]
    fn odd_filters_read_as_what_they_clearly_say() {
        assert_eq!(ListenFilter::parse(&Value::Null), ListenFilter::default());
        let f = ListenFilter::parse(
            &json!({"toolsListChanged": "yes", "resourceSubscriptions": ["x", 3]}),
        );
        assert_eq!(f.uris, Some(vec!["x".to_owned()]));
        assert!(!f.tools);
        assert_eq!(ListenFilter::default().to_value(), json!({}));
    }
}
