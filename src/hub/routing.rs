//! Which upstream serves a client request, and the request as that upstream must
//! see it (prefixes stripped). Decisions come from [`crate::state::catalog`].

use std::borrow::Cow;

use serde::Deserialize;
use serde_json::value::RawValue;
use serde_json::Value;

use super::Hub;
use crate::protocol::methods::{parse_params, UriParams};
use crate::protocol::{code, Message, RawId};
use crate::state::catalog::ListKind;
use crate::state::ids::{ClientId, SubKey, UpstreamId, ViewId};

impl Hub {
    /// Upstreams of `view` whose last known capabilities include `capability`.
    /// In configuration order: where two offer a name, the first wins.
    pub(super) fn candidates(&self, view: ViewId, capability: &str) -> Vec<UpstreamId> {
        let mut cands: Vec<UpstreamId> = self
            .upstreams
            .iter()
            .enumerate()
            .filter(|(_, u)| u.last_caps.get(capability).is_some_and(Value::is_object))
            .map(|(i, _)| UpstreamId(i))
            .filter(|u| self.catalog.in_view(view, *u))
            .collect();
        self.catalog.in_config_order(&mut cands);
        cands
    }

    /// [`Hub::candidates`], or the view's one upstream when none is known to offer it
    /// (a view of one server routes everything there).
    fn candidates_or_only(&self, view: ViewId, capability: &str) -> Vec<UpstreamId> {
        let cands = self.candidates(view, capability);
        if !cands.is_empty() {
            return cands;
        }
        match self.view_members(view).as_slice() {
            [only] => vec![*only],
            _ => cands,
        }
    }

    /// Resolves a resource URI as clients of `view` know it to (upstream, URI as the
    /// upstream knows it).
    pub(super) fn route_uri(&self, view: ViewId, uri: &str) -> Option<(UpstreamId, String)> {
        let cands = self.candidates_or_only(view, "resources");
        self.catalog.route_uri(view, uri, &cands)
    }

    /// Reads `params.uri` of a `resources/*` request; answers the client with an
    /// invalid-params error and returns `None` when it is missing.
    pub(super) fn uri_param_or_reply(
        &mut self,
        client: ClientId,
        id: &RawId,
        msg: &Message,
    ) -> Option<String> {
        match parse_params::<UriParams>(msg.params()) {
            Some(p) => Some(p.uri),
            None => {
                let why = format!(
                    "{} needs params.uri (string)",
                    msg.method().unwrap_or_default()
                );
                self.reply_error(client, id, code::INVALID_PARAMS, &why);
                None
            }
        }
    }

    /// Routes a client URI to its cache/subscription key; answers the client with an
    /// error and returns `None` when no upstream serves it.
    pub(super) fn uri_key_or_reply(
        &mut self,
        client: ClientId,
        id: &RawId,
        uri: &str,
    ) -> Option<SubKey> {
        match self.route_uri(self.view_of(client), uri) {
            Some((upstream, own)) => Some(SubKey::new(upstream, &own)),
            None => {
                let m = Message::error_response(
                    Some(id),
                    code::RESOURCE_NOT_FOUND,
                    &format!("Resource not found: no upstream serves {uri}"),
                    Some(serde_json::json!({ "uri": uri })),
                );
                self.push_response(client, id, m);
                None
            }
        }
    }

    /// Picks the upstream of `view` for a forwarded request and rewrites the routed
    /// member (tool or prompt name, URI, completion ref) to the upstream's own form.
    pub(super) fn route_request(
        &self,
        view: ViewId,
        msg: &mut Message,
    ) -> Result<UpstreamId, (i64, String)> {
        let method = msg.method().unwrap_or_default().to_owned();
        let params = msg
            .params()
            .map_or_else(RouteParams::default, |p| RouteParams::read(p.get()));
        let by_name = |kind: ListKind, path: &[&str], what: &str| {
            let name = params.at(path).ok_or_else(|| {
                (
                    code::INVALID_PARAMS,
                    format!("{method} needs params.{} (string)", path.join(".")),
                )
            })?;
            let cands = self.candidates_or_only(view, kind.capability());
            self.catalog
                .route_name(view, kind, name, &cands)
                .ok_or_else(|| (code::INVALID_PARAMS, format!("unknown {what}: {name}")))
        };
        let by_uri = |path: &[&str]| {
            let uri = params.at(path).ok_or_else(|| {
                (
                    code::INVALID_PARAMS,
                    format!("{method} needs params.{} (string)", path.join(".")),
                )
            })?;
            // A URI nobody serves is "resource not found" where the method reads one,
            // and a bad argument where it is only a reference (completion).
            let not_found = if path == ["uri"] {
                code::RESOURCE_NOT_FOUND
            } else {
                code::INVALID_PARAMS
            };
            self.route_uri(view, uri).ok_or_else(|| {
                (
                    not_found,
                    format!("Resource not found: no upstream serves {uri}"),
                )
            })
        };
        let (upstream, path, own): (UpstreamId, &[&str], String) =
            match method.as_str() {
                "tools/call" => {
                    let (u, n) = by_name(ListKind::Tools, &["name"], "tool")?;
                    (u, &["name"], n)
                }
                "prompts/get" => {
                    let (u, n) = by_name(ListKind::Prompts, &["name"], "prompt")?;
                    (u, &["name"], n)
                }
                "resources/read" => {
                    let (u, n) = by_uri(&["uri"])?;
                    (u, &["uri"], n)
                }
                "completion/complete" => match params.at(&["ref", "type"]) {
                    Some("ref/prompt") => {
                        let (u, n) = by_name(ListKind::Prompts, &["ref", "name"], "prompt")?;
                        (u, &["ref", "name"], n)
                    }
                    Some("ref/resource") => {
                        let (u, n) = by_uri(&["ref", "uri"])?;
                        (u, &["ref", "uri"], n)
                    }
                    _ => return Err((
                        code::INVALID_PARAMS,
                        "completion/complete needs params.ref of type ref/prompt or ref/resource"
                            .into(),
                    )),
                },
                other => {
                    if let [only] = self.view_members(view).as_slice() {
                        return Ok(*only);
                    }
                    return Err((
                        code::METHOD_NOT_FOUND,
                        format!("mcpmux cannot route {other} when several servers are served"),
                    ));
                }
            };
        if params.at(path) != Some(own.as_str()) {
            set_param(msg, path, &own);
        }
        Ok(upstream)
    }
}

/// The members of a request's `params` that routing reads, as `Value::get(..)
/// .as_str()` would see them: a member that is absent, null or not a string is `None`.
/// Read in one pass that borrows the text and skips everything else (the tool's
/// `arguments` can be large).
#[derive(Debug, Default, PartialEq)]
struct RouteParams<'a> {
    name: Option<Cow<'a, str>>,
    uri: Option<Cow<'a, str>>,
    ref_type: Option<Cow<'a, str>>,
    ref_name: Option<Cow<'a, str>>,
    ref_uri: Option<Cow<'a, str>>,
}

impl<'a> RouteParams<'a> {
    fn read(params: &'a str) -> Self {
        if !params.trim_start().starts_with('{') {
            // (A derived struct would also read an array, by position.)
            return Self::default();
        }
        #[derive(Deserialize)]
        struct Top<'a> {
            #[serde(borrow)]
            name: Option<&'a RawValue>,
            #[serde(borrow)]
            uri: Option<&'a RawValue>,
            #[serde(borrow, rename = "ref")]
            reference: Option<&'a RawValue>,
        }
        #[derive(Deserialize)]
        struct Ref<'a> {
            #[serde(borrow, rename = "type")]
            kind: Option<&'a RawValue>,
            #[serde(borrow)]
            name: Option<&'a RawValue>,
            #[serde(borrow)]
            uri: Option<&'a RawValue>,
        }
        fn string(raw: Option<&RawValue>) -> Option<Cow<'_, str>> {
            let text = raw?.get();
            // Borrowed unless it has escapes to decode.
            match serde_json::from_str::<&str>(text) {
                Ok(s) => Some(Cow::Borrowed(s)),
                Err(_) => serde_json::from_str::<String>(text).ok().map(Cow::Owned),
            }
        }
        let Ok(top) = serde_json::from_str::<Top<'a>>(params) else {
            // Not an object of unique members (a repeated member: the last one counts,
            // as a `Value` keeps it).
            return Self::from_value(params);
        };
        let reference = top
            .reference
            .and_then(|r| serde_json::from_str::<Ref<'a>>(r.get()).ok());
        if top.reference.is_some_and(|r| r.get().starts_with('{')) && reference.is_none() {
            return Self::from_value(params);
        }
        let (ref_type, ref_name, ref_uri) = reference.map_or((None, None, None), |r| {
            (string(r.kind), string(r.name), string(r.uri))
        });
        RouteParams {
            name: string(top.name),
            uri: string(top.uri),
            ref_type,
            ref_name,
            ref_uri,
        }
    }

    /// The same members through a full `Value` (the rare shapes [`Self::read`] leaves).
    fn from_value(params: &str) -> Self {
        let v: Value = serde_json::from_str(params).unwrap_or(Value::Null);
        let get = |path: &[&str]| {
            let s = path.iter().try_fold(&v, |v, k| v.get(*k))?.as_str()?;
            Some(Cow::Owned(s.to_owned()))
        };
        RouteParams {
            name: get(&["name"]),
            uri: get(&["uri"]),
            ref_type: get(&["ref", "type"]),
            ref_name: get(&["ref", "name"]),
            ref_uri: get(&["ref", "uri"]),
        }
    }

    fn at(&self, path: &[&str]) -> Option<&str> {
        let field = match path {
            ["name"] => &self.name,
            ["uri"] => &self.uri,
            ["ref", "type"] => &self.ref_type,
            ["ref", "name"] => &self.ref_name,
            ["ref", "uri"] => &self.ref_uri,
            _ => return None,
        };
        field.as_deref()
    }
}

/// Sets a string member of `params` at `path` (re-encodes params once).
pub(super) fn set_param(msg: &mut Message, path: &[&str], value: &str) {
    let Some(mut params) = msg
        .params()
        .and_then(|p| serde_json::from_str::<Value>(p.get()).ok())
    else {
        return;
    };
    let (last, parents) = path.split_last().expect("non-empty path");
    let Some(obj) = parents.iter().try_fold(&mut params, |v, k| v.get_mut(*k)) else {
        return;
    };
    if let Some(map) = obj.as_object_mut() {
        map.insert((*last).to_owned(), Value::String(value.to_owned()));
        msg.set_params(&params);
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;
    use serde_json::json;

    use super::RouteParams;

    /// Members routing reads, with values of every JSON kind, sometimes repeated.
    fn member() -> impl Strategy<Value = String> {
        let key = prop_oneof![
            Just("name"),
            Just("uri"),
            Just("ref"),
            Just("type"),
            Just("arguments"),
            Just("_meta")
        ];
        let scalar = prop_oneof![
            Just("null".to_owned()),
            Just("7".to_owned()),
            Just("true".to_owned()),
            "[a-z/:\\\\\"]{0,6}".prop_map(|s| serde_json::to_string(&s).unwrap()),
            Just("\"esc\\u0041ped\"".to_owned()),
        ];
        let value = scalar.prop_recursive(2, 8, 4, |inner| {
            prop_oneof![
                prop::collection::vec(inner.clone(), 0..3)
                    .prop_map(|v| format!("[{}]", v.join(","))),
                prop::collection::vec(
                    (
                        prop_oneof![Just("type"), Just("name"), Just("uri"), Just("x")],
                        inner
                    ),
                    0..4
                )
                .prop_map(|m| {
                    let m: Vec<String> = m.iter().map(|(k, v)| format!("{k:?}:{v}")).collect();
                    format!("{{{}}}", m.join(","))
                }),
            ]
        });
        (key, value).prop_map(|(k, v)| format!("{k:?}:{v}"))
    }

    proptest! {
        /// The one-pass reader sees what a full `Value` sees, for any object.
        #[test]
        fn one_pass_read_matches_value(members in prop::collection::vec(member(), 0..6)) {
            let text = format!("{{{}}}", members.join(","));
            prop_assert_eq!(RouteParams::read(&text), RouteParams::from_value(&text));
        }
    }

    #[test]
    fn reads_names_uris_and_refs_and_borrows_plain_strings() {
        let text = json!({"name": "echo", "arguments": {"name": "inner"}}).to_string();
        let p = RouteParams::read(&text);
        assert_eq!(p.at(&["name"]), Some("echo"));
        assert!(matches!(p.name, Some(std::borrow::Cow::Borrowed(_))));
        assert_eq!(p.at(&["uri"]), None);
        let text = json!({"ref": {"type": "ref/resource", "uri": "file:///a"}}).to_string();
        let p = RouteParams::read(&text);
        assert_eq!(p.at(&["ref", "type"]), Some("ref/resource"));
        assert_eq!(p.at(&["ref", "uri"]), Some("file:///a"));
        assert_eq!(p.at(&["ref", "name"]), None);
        // Not a string, an array, repeated members: as a `Value` reads them.
        assert_eq!(RouteParams::read(r#"{"name": 7}"#).at(&["name"]), None);
        assert_eq!(
            RouteParams::read(r#"["echo", "u"]"#),
            RouteParams::default()
        );
        let p = RouteParams::read(r#"{"name": "a", "name": "b"}"#);
        assert_eq!(p.at(&["name"]), Some("b"));
    }
}
