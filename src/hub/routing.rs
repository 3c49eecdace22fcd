//! Which upstream serves a client request, and the request as that upstream must
//! see it (prefixes stripped). Decisions come from [`crate::state::catalog`].

use serde_json::Value;

use super::Hub;
use crate::protocol::methods::{parse_params, UriParams};
use crate::protocol::{code, Message, RawId};
use crate::state::catalog::ListKind;
use crate::state::ids::{ClientId, SubKey, UpstreamId};

impl Hub {
    /// Upstreams whose last known capabilities include `capability`.
    pub(super) fn candidates(&self, capability: &str) -> Vec<UpstreamId> {
        self.upstreams
            .iter()
            .enumerate()
            .filter(|(_, u)| u.last_caps.get(capability).is_some_and(Value::is_object))
            .map(|(i, _)| UpstreamId(i))
            .collect()
    }

    /// Resolves a resource URI to (upstream, URI as the upstream knows it).
    pub(super) fn route_uri(&self, uri: &str) -> Option<(UpstreamId, String)> {
        let mut cands = self.candidates("resources");
        if cands.is_empty() && self.upstreams.len() == 1 {
            cands.push(UpstreamId(0));
        }
        self.catalog.route_uri(uri, &cands)
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
        match self.route_uri(uri) {
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

    /// Picks the upstream for a forwarded request and rewrites the routed member
    /// (tool or prompt name, URI, completion ref) to the upstream's own form.
    pub(super) fn route_request(&self, msg: &mut Message) -> Result<UpstreamId, (i64, String)> {
        let method = msg.method().unwrap_or_default().to_owned();
        let params: Value = msg
            .params()
            .and_then(|p| serde_json::from_str(p.get()).ok())
            .unwrap_or(Value::Null);
        let by_name = |kind: ListKind, path: &[&str], what: &str| {
            let name = get_str(&params, path).ok_or_else(|| {
                (
                    code::INVALID_PARAMS,
                    format!("{method} needs params.{} (string)", path.join(".")),
                )
            })?;
            let cands = self.candidates(kind.capability());
            let cands = if cands.is_empty() && self.upstreams.len() == 1 {
                vec![UpstreamId(0)]
            } else {
                cands
            };
            self.catalog
                .route_name(kind, name, &cands)
                .ok_or_else(|| (code::INVALID_PARAMS, format!("unknown {what}: {name}")))
        };
        let by_uri = |path: &[&str]| {
            let uri = get_str(&params, path).ok_or_else(|| {
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
            self.route_uri(uri).ok_or_else(|| {
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
                "completion/complete" => match get_str(&params, &["ref", "type"]) {
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
                _ if self.upstreams.len() == 1 => return Ok(UpstreamId(0)),
                other => {
                    return Err((
                        code::METHOD_NOT_FOUND,
                        format!("mcpmux cannot route {other} when several servers are configured"),
                    ))
                }
            };
        if get_str(&params, path) != Some(own.as_str()) {
            set_param(msg, path, &own);
        }
        Ok(upstream)
    }
}

fn get_str<'a>(v: &'a Value, path: &[&str]) -> Option<&'a str> {
    path.iter().try_fold(v, |v, k| v.get(*k))?.as_str()
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
