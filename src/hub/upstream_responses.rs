//! Upstream responses mapped back to what asked: a client's request (its id restored,
//! progress and MRTR bookkeeping), a shared subscribe, a cache fill, a list part or a
//! catalog page; and the URIs in a namespaced upstream's results shown as clients know
//! them.
//!
//! Never answers a client another client's request: the pending table says whose it is.

use serde_json::json;
use tokio::time::Instant;

use super::Hub;
use crate::protocol::methods::{self};
use crate::protocol::{code, Message, RawId};
use crate::state::ids::{ProxyId, UpstreamId};
use crate::state::pending::Origin;

impl Hub {
    pub(super) fn on_upstream_response(&mut self, upstream: UpstreamId, mut msg: Message) {
        let Some(pid) = msg.id().and_then(RawId::as_u64).map(ProxyId) else {
            tracing::debug!(upstream = %self.upstreams[upstream.0].name, "response with a foreign id dropped");
            return;
        };
        if self.pending.get(pid).map(|e| e.upstream) != Some(upstream) {
            tracing::debug!("late or unknown upstream response dropped");
            return;
        }
        if let Some(t) = self.deadlines.get(pid) {
            let (method, took) = (t.method, t.sent.elapsed());
            self.count_answer(upstream, method, took, msg.is_error());
        }
        if self.traces.on {
            let code = msg.error().and_then(|e| {
                serde_json::from_str::<serde_json::Value>(e.get()).ok()?["code"].as_i64()
            });
            self.trace_upstream_done(pid, code.or(msg.is_error().then_some(0)));
        }
        self.drop_request_timer(pid);
        let entry = self.pending.complete(pid).expect("checked above");
        match entry.origin {
            Origin::Client {
                client, id, method, ..
            } => {
                msg.set_id(&id);
                let exposes = [methods::RESOURCES_READ, methods::TOOLS_CALL];
                if exposes.contains(&&*method) && self.upstreams[upstream.0].prefix.is_some() {
                    if let Some(r) = msg.result().map(|r| r.get().to_owned()) {
                        if let Some(exposed) = self.expose_result_uris(upstream, &r) {
                            if let Ok(raw) = serde_json::value::RawValue::from_string(exposed) {
                                msg.set_member("result", raw);
                            }
                        }
                    }
                }
                self.push_response(client, &id, msg);
            }
            Origin::Subscribe(key) => {
                let result = match msg.error() {
                    None => Ok(()),
                    Some(e) => Err(serde_json::from_str(e.get()).unwrap_or_else(
                        |_| json!({"code": code::INTERNAL_ERROR, "message": "upstream error"}),
                    )),
                };
                if let Err(e) = &result {
                    tracing::warn!(uri = %key.uri, error = %e, "upstream refused resources/subscribe");
                    let name = self.upstreams[upstream.0].name.clone();
                    self.warn_operator(format!(
                        "upstream {name} refused a subscription to {}: {}",
                        key.uri, e["message"]
                    ));
                }
                self.subscribe_settled(key, result);
            }
            Origin::Read { key, generation } => match (msg.result(), msg.error()) {
                (Some(r), _) => match self.expose_result_uris(upstream, r.get()) {
                    Some(exposed) => self.finish_read(&key, generation, Ok(&exposed)),
                    None => self.finish_read(&key, generation, Ok(r.get())),
                },
                (None, Some(e)) => self.finish_read(&key, generation, Err(e.get())),
                (None, None) => self.finish_read(
                    &key,
                    generation,
                    Err("{\"code\":-32603,\"message\":\"empty upstream response\"}"),
                ),
            },
            Origin::ListPart {
                agg,
                kind,
                cursor,
                epoch,
            } => {
                let outcome = response_outcome(&msg);
                self.list_part_done(upstream, agg, (kind, epoch), cursor, outcome);
            }
            Origin::CatalogFetch {
                kind,
                cursor,
                page,
                epoch,
            } => {
                let outcome = response_outcome(&msg);
                self.catalog_page(upstream, (kind, epoch), cursor, page, outcome);
                self.catalog_settled(upstream);
            }
            Origin::Unsubscribe(key) => {
                if let Some(e) = msg.error() {
                    tracing::debug!(uri = %key.uri, error = e.get(), "upstream refused resources/unsubscribe");
                }
            }
            Origin::Held { .. } => {
                // Answered while no client waits (between rounds): nobody to tell.
                self.drop_held_for(pid);
                tracing::debug!("answer to a request parked for MRTR dropped");
            }
            Origin::Internal(what) => {
                if let Some(e) = msg.error() {
                    tracing::debug!(
                        what,
                        error = e.get(),
                        "upstream refused an internal request"
                    );
                }
            }
        }
    }

    /// `notifications/resources/updated`: the cache entry goes, then every holder of the
    /// URI (or of a parent of it) hears of it.
    /// A result of a namespaced upstream with the resource URIs in it shown as clients
    /// know them, so a client can read what it is pointed at through mcpmux:
    /// `contents[].uri` of `resources/read`, and in `tools/call` content the
    /// `resource_link` items' `uri` and embedded `resource.uri`. `None` when nothing
    /// needs to change.
    fn expose_result_uris(&self, upstream: UpstreamId, result: &str) -> Option<String> {
        self.upstreams[upstream.0].prefix.as_ref()?;
        let mut v: serde_json::Value = serde_json::from_str(result).ok()?;
        let mut changed = false;
        let mut expose = |uri: &mut serde_json::Value| {
            if let Some(own) = uri.as_str() {
                *uri =
                    serde_json::Value::String(self.catalog.expose_uri(upstream, own).into_owned());
                changed = true;
            }
        };
        for list in ["contents", "content"] {
            let Some(items) = v.get_mut(list).and_then(|l| l.as_array_mut()) else {
                continue;
            };
            for item in items {
                match item["type"].as_str() {
                    Some("resource") => {
                        if let Some(uri) = item.get_mut("resource").and_then(|r| r.get_mut("uri")) {
                            expose(uri);
                        }
                    }
                    Some("resource_link") | None => {
                        if let Some(uri) = item.get_mut("uri") {
                            expose(uri);
                        }
                    }
                    Some(_) => {}
                }
            }
        }
        changed.then(|| v.to_string())
    }
}
/// A response as `Ok(result)` or `Err(error object)`.
fn response_outcome(msg: &Message) -> Result<serde_json::Value, serde_json::Value> {
    let parse = |r: crate::protocol::Raw<'_>| serde_json::from_str(r.get()).unwrap_or_default();
    match (msg.result(), msg.error()) {
        (Some(r), _) => Ok(parse(r)),
        (None, Some(e)) => Err(parse(e)),
        (None, None) => {
            Err(json!({"code": code::INTERNAL_ERROR, "message": "empty upstream response"}))
        }
    }
}

impl Hub {
    /// The end of a `resources/subscribe` of `key`: the upstream's answer, or mcpmux's
    /// own error (a timeout, a request that could not be sent). A confirmation starts a
    /// new generation of the key's cached read. A re-subscribe that
    /// failed either way is asked again after [`super::RESUBSCRIBE_RETRY`]: its holders
    /// keep it, and the server is asked until it agrees (or the upstream restarts,
    /// which re-subscribes anyway).
    pub(super) fn subscribe_settled(
        &mut self,
        key: crate::state::ids::SubKey,
        result: Result<(), serde_json::Value>,
    ) {
        let resubscribe = self.holders.registry.is_resubscribing(&key);
        let failed = result.is_err();
        if !failed {
            // Watched from now on: a read sent before (a 2026-07-28 upstream shares
            // every read) cannot be told of a change made before this, so its result
            // must not be kept until the next update.
            self.reads.cache.invalidate(&key);
            self.fleet_watched(&key);
        }
        let effects =
            self.holders
                .registry
                .upstream_result(&key, result, Instant::now().into_std());
        self.apply_sub_effects(effects);
        if resubscribe && failed {
            self.deadlines.set(
                super::Timer::Resubscribe(key),
                Instant::now() + super::RESUBSCRIBE_RETRY,
            );
        }
    }
}
