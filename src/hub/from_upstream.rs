//! Upstream → hub: readiness and failure, responses mapped back to their clients,
//! notifications fanned out (updates only to holders), and the messages that belong
//! to one client's request (server→client requests, progress, log messages) delivered
//! to that client alone (docs/architecture.md, "Server messages and their clients").
//!
//! Association, strongest first:
//! 1. the transport tells which of mcpmux's requests the message arrived with (a
//!    Streamable HTTP POST stream): the client that made that request;
//! 2. a progress notification names its request by the proxy-minted token;
//! 3. the transport cannot tell (stdio, and a Streamable HTTP upstream's GET stream,
//!    where servers send what they tie to no request id): the client whose request is
//!    the *only* one in flight on that upstream, when there is exactly one;
//! 4. otherwise the message belongs to nobody and follows the server's
//!    `unrelated_messages` policy (default: delivered to nobody); a server→client
//!    request that belongs to nobody is refused with an error saying why.

use serde_json::json;
use tokio::time::Instant;

use super::effects::notification_out;
use super::{Hub, UpstreamStatus};
use crate::config::UnrelatedPolicy;
use crate::downstream::outbox::{CoalesceKey, OutKind};
use crate::protocol::methods::{self, parse_params, UriParams};
use crate::protocol::{code, Kind, Message, RawId};
use crate::state::catalog::ListKind;
use crate::state::ids::{ClientId, ProxyId, SubKey, UpstreamId};
use crate::state::pending::{ClientBound, Origin};
use crate::upstream::{Related, UpstreamEvent};

impl Hub {
    pub(super) fn on_upstream_event(&mut self, upstream: UpstreamId, event: UpstreamEvent) {
        if upstream.0 >= self.upstreams.len()
            || matches!(self.upstreams[upstream.0].status, UpstreamStatus::Removed)
        {
            // Unknown, or removed by a reload (its actor is winding down).
            return;
        }
        match event {
            UpstreamEvent::Ready(info) => self.on_upstream_ready(upstream, info),
            UpstreamEvent::Down { reason, retrying } => {
                self.on_upstream_down(upstream, reason, retrying)
            }
            UpstreamEvent::Message(msg, related) => match msg.kind() {
                Kind::Response => self.on_upstream_response(upstream, msg),
                Kind::Notification => self.on_upstream_notification(upstream, msg, &related),
                Kind::Request => self.on_upstream_request(upstream, msg, &related),
            },
        }
    }

    fn on_upstream_ready(&mut self, upstream: UpstreamId, info: crate::upstream::InitInfo) {
        let slot = &mut self.upstreams[upstream.0];
        let restart = slot.was_ready;
        tracing::info!(upstream = %slot.name, restart, server = %info.server_info, "upstream ready");
        if restart {
            self.counters
                .upstreams
                .entry(upstream)
                .or_default()
                .restarts += 1;
        }
        let slot = &mut self.upstreams[upstream.0];
        slot.last_caps = info.capabilities.clone();
        slot.status = UpstreamStatus::Ready(info);
        slot.was_ready = true;
        self.cache.clear_upstream(upstream);
        self.refresh_catalog(upstream, &ListKind::ALL);
        self.send_log_level(upstream);
        if restart {
            // A fresh session holds no subscriptions: take them again, and tell every
            // holder that changes may have been missed.
            let effects = self.subs.upstream_ready(upstream);
            self.apply_sub_effects(effects);
            let keys: Vec<SubKey> = self.subs.keys_of(upstream).cloned().collect();
            for key in keys {
                // Holders know the URI in its exposed (namespaced) form, as in every
                // other update; `key.uri` is the upstream's own form.
                let uri = self.catalog.expose_uri(upstream, &key.uri);
                let n =
                    Message::notification(methods::RESOURCES_UPDATED, Some(&json!({ "uri": uri })));
                let holders: Vec<ClientId> = self.subs.holders(&key).collect();
                self.fan_out_tagged(&holders, &n, update_key(&key));
            }
        }
        // Its lists join the merged ones: clients that initialized before (it was
        // down, or restarting) hear that they changed.
        for method in [
            methods::TOOLS_LIST_CHANGED,
            methods::PROMPTS_LIST_CHANGED,
            methods::RESOURCES_LIST_CHANGED,
        ] {
            self.broadcast(
                &Message::notification(method, None),
                OutKind::Coalescible(CoalesceKey::Method(method.into())),
            );
        }
        self.answer_deferred_inits();
    }

    fn on_upstream_down(&mut self, upstream: UpstreamId, reason: String, retrying: bool) {
        let name = self.upstreams[upstream.0].name.clone();
        tracing::warn!(upstream = %name, %reason, retrying, "upstream down");
        self.warn_operator(format!("upstream {name} down: {reason}"));
        self.upstreams[upstream.0].status = UpstreamStatus::Down {
            reason: reason.clone(),
            retrying,
        };
        let why = format!("upstream {name} closed before answering: {reason}");
        for pid in self.pending.ids_on_upstream(upstream) {
            self.fail_request(pid, code::UPSTREAM_UNAVAILABLE, &why);
        }
        self.subs.upstream_lost(upstream);
        self.cache.clear_upstream(upstream);
        for kind in ListKind::ALL {
            self.catalog.forget(upstream, kind);
        }
        if self.upstreams[upstream.0].was_ready {
            // Its tools, prompts and resources are gone from the merged lists.
            self.broadcast_list_changed(upstream);
        }
        for bound in self.pending.drop_client_bound(|b| b.upstream == upstream) {
            // The client may still answer; the answer will find nothing and be dropped.
            tracing::debug!(client = %bound.client, "server request orphaned by upstream exit");
        }
        self.answer_deferred_inits();
    }

    fn on_upstream_response(&mut self, upstream: UpstreamId, mut msg: Message) {
        let Some(pid) = msg.id().and_then(RawId::as_u64).map(ProxyId) else {
            tracing::debug!(upstream = %self.upstreams[upstream.0].name, "response with a foreign id dropped");
            return;
        };
        if self.pending.get(pid).map(|e| e.upstream) != Some(upstream) {
            tracing::debug!("late or unknown upstream response dropped");
            return;
        }
        if let Some(t) = self.request_timers.get(&pid) {
            let (method, took) = (t.method, t.sent.elapsed());
            self.count_answer(upstream, method, took, msg.is_error());
        }
        self.drop_request_timer(pid);
        let entry = self.pending.complete(pid).expect("checked above");
        match entry.origin {
            Origin::Client {
                client, id, method, ..
            } => {
                self.mrtr_finished(pid);
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
                let resubscribe = self.subs.is_resubscribing(&key);
                let failed = result.is_err();
                let effects = self
                    .subs
                    .upstream_result(&key, result, Instant::now().into_std());
                self.apply_sub_effects(effects);
                if resubscribe && failed {
                    // Its holders keep it; the server is asked again until it agrees
                    // (or the upstream restarts, which re-subscribes anyway).
                    self.timers.insert_at(
                        super::Timer::Resubscribe(key),
                        Instant::now() + super::RESUBSCRIBE_RETRY,
                    );
                }
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
            Origin::ListPart { agg, kind, cursor } => {
                let outcome = response_outcome(&msg);
                self.list_part_done(upstream, agg, kind, cursor, outcome);
            }
            Origin::CatalogFetch { kind, cursor, page } => {
                let outcome = response_outcome(&msg);
                self.catalog_page(upstream, kind, cursor, page, outcome);
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
    fn on_upstream_updated(&mut self, upstream: UpstreamId, mut msg: Message) {
        let Some(UriParams { uri }) = parse_params(msg.params()) else {
            tracing::debug!("resources/updated without a uri dropped");
            return;
        };
        let key = SubKey::new(upstream, &uri);
        // The fleet's followers hear of it too (an owner may hold a key for
        // them alone).
        self.fleet_publish(&key, &msg);
        // Invalidate before anyone hears of the change, so a re-read misses.
        self.cache.invalidate(&key);
        let mut holders: Vec<ClientId> = self.subs.holders(&key).collect();
        // The URI may be a sub-resource of one a client holds: its holders
        // hear of it too, and the parent's cached contents are stale.
        for parent in parent_uris(&uri) {
            let pkey = SubKey::new(upstream, parent);
            if self.subs.is_active(&pkey) {
                self.cache.invalidate(&pkey);
                holders.extend(self.subs.holders(&pkey));
            }
        }
        if holders.is_empty() {
            return;
        }
        holders.sort_unstable();
        holders.dedup();
        // Serialized once; `_meta` and unknown members travel untouched. A
        // namespaced upstream's URI is shown as the clients know it.
        let exposed = self.catalog.expose_uri(upstream, &uri);
        if exposed != uri {
            super::routing::set_param(&mut msg, &["uri"], &exposed);
        }
        self.fan_out_tagged(
            &holders,
            &msg,
            OutKind::Coalescible(CoalesceKey::Update(key)),
        );
    }

    fn on_upstream_notification(
        &mut self,
        upstream: UpstreamId,
        mut msg: Message,
        related: &Related,
    ) {
        // The one notification of a burst: handled without copying its method.
        if msg.method() == Some(methods::RESOURCES_UPDATED) {
            self.on_upstream_updated(upstream, msg);
            return;
        }
        let method = msg.method().unwrap_or_default().to_owned();
        match method.as_str() {
            m if methods::is_list_changed(m) => {
                let kinds = ListKind::changed_by(m);
                self.refresh_catalog(upstream, kinds);
                self.broadcast(
                    &msg,
                    OutKind::Coalescible(CoalesceKey::Method(method.as_str().into())),
                );
            }
            methods::LOG_MESSAGE => {
                let level: Option<String> = msg
                    .params()
                    .and_then(|p| serde_json::from_str::<serde_json::Value>(p.get()).ok())
                    .and_then(|p| p["level"].as_str().map(str::to_owned));
                let level = level.as_deref();
                match self.owner_of(upstream, related) {
                    Some((client, id)) => {
                        if self.wants_log(client, level) {
                            let out =
                                notification_out(msg.to_bytes(), OutKind::Notification, Some(id));
                            self.push(client, out);
                        }
                    }
                    None => {
                        let clients: Vec<ClientId> = self
                            .unrelated_receivers(upstream, true)
                            .into_iter()
                            .filter(|c| self.wants_log(*c, level))
                            .collect();
                        self.deliver_unrelated(upstream, &msg, &clients);
                    }
                }
            }
            methods::PROGRESS => {
                let Some(pid) = methods::progress_token_of_notification(msg.params()).map(ProxyId)
                else {
                    return;
                };
                let Some(Origin::Client {
                    client,
                    id,
                    progress: Some(token),
                    ..
                }) = self
                    .pending
                    .get(pid)
                    .filter(|e| e.upstream == upstream)
                    .map(|e| e.origin.clone())
                else {
                    return;
                };
                self.extend_request_timer(pid);
                let token: serde_json::Value =
                    serde_json::from_str(&token).unwrap_or(serde_json::Value::Null);
                rewrite_progress_token_notification(&mut msg, token);
                self.push(
                    client,
                    notification_out(msg.to_bytes(), OutKind::Notification, Some(id)),
                );
            }
            methods::CANCELLED => {
                // The upstream cancels a request it sent to a client.
                let Some(req) = parse_params::<methods::CancelledParams>(msg.params())
                    .and_then(|p| p.request_id)
                    .and_then(|r| RawId::parse(r.get()))
                else {
                    return;
                };
                if let Some(pid) = self.pending.find_client_bound(upstream, &req) {
                    // Only the client the request went to hears of its cancellation.
                    let bound = self
                        .pending
                        .complete_client_bound(pid)
                        .expect("found above");
                    let n = Message::notification(
                        methods::CANCELLED,
                        Some(&json!({"requestId": pid.0})),
                    );
                    self.push(
                        bound.client,
                        notification_out(n.to_bytes(), OutKind::Notification, None),
                    );
                }
            }
            methods::ELICITATION_COMPLETE => {
                let id = msg
                    .params()
                    .and_then(|p| serde_json::from_str::<serde_json::Value>(p.get()).ok())
                    .and_then(|p| p["elicitationId"].as_str().map(str::to_owned));
                let owner = id.and_then(|id| self.elicitations.remove(&(upstream, id)));
                match owner {
                    Some(client) => {
                        self.push(
                            client,
                            notification_out(msg.to_bytes(), OutKind::Notification, None),
                        );
                    }
                    None => self.on_other_notification(upstream, &msg, related),
                }
            }
            _ => self.on_other_notification(upstream, &msg, related),
        }
    }

    /// A notification mcpmux does not interpret: to the client whose request it
    /// belongs to, else by the server's `unrelated_messages` policy.
    fn on_other_notification(&mut self, upstream: UpstreamId, msg: &Message, related: &Related) {
        match self.owner_of(upstream, related) {
            Some((client, id)) => {
                self.push(
                    client,
                    notification_out(msg.to_bytes(), OutKind::Notification, Some(id)),
                );
            }
            None => {
                let clients = self.unrelated_receivers(upstream, false);
                self.deliver_unrelated(upstream, msg, &clients);
            }
        }
    }

    /// The client (and its request id) a message from `upstream` belongs to, if it
    /// can be known: by the request the transport says it came with, or, when the
    /// transport cannot tell, the only request in flight there (not counting mcpmux's
    /// log-level and catalog requests) when that one is a client's.
    pub(super) fn owner_of(
        &self,
        upstream: UpstreamId,
        related: &Related,
    ) -> Option<(ClientId, RawId)> {
        let pid = match related {
            Related::Request(raw) => ProxyId(raw.as_u64()?),
            Related::Nothing => return None,
            Related::Unknown => {
                // mcpmux's own bookkeeping requests (log level, catalog pages) answer
                // quickly and say nothing of any client: they do not make it ambiguous.
                let mut ids = self
                    .pending
                    .ids_on_upstream(upstream)
                    .into_iter()
                    .filter(|p| {
                        !matches!(
                            self.pending.get(*p).map(|e| &e.origin),
                            Some(Origin::Internal(_) | Origin::CatalogFetch { .. })
                        )
                    });
                match (ids.next(), ids.next()) {
                    (Some(only), None) => only,
                    _ => return None,
                }
            }
        };
        match self.pending.get(pid) {
            Some(e) if e.upstream == upstream => match &e.origin {
                Origin::Client { client, id, .. } => Some((*client, id.clone())),
                _ => None,
            },
            _ => None,
        }
    }

    /// Who gets a message of `upstream` that belongs to no request, by its policy.
    fn unrelated_receivers(&self, upstream: UpstreamId, is_log: bool) -> Vec<ClientId> {
        let policy = self.upstreams[upstream.0].unrelated;
        self.clients
            .iter()
            .filter(|(id, c)| {
                c.init.as_ref().is_some_and(|i| i.modern.is_none())
                    && match policy {
                        UnrelatedPolicy::None => false,
                        UnrelatedPolicy::LogLevel => is_log && self.log_levels.contains_key(id),
                        UnrelatedPolicy::All => true,
                    }
            })
            .map(|(id, _)| *id)
            .collect()
    }

    fn deliver_unrelated(&mut self, upstream: UpstreamId, msg: &Message, clients: &[ClientId]) {
        if clients.is_empty() {
            tracing::debug!(
                upstream = %self.upstreams[upstream.0].name,
                method = msg.method().unwrap_or_default(),
                "message that belongs to no client request not delivered (servers.NAME.unrelated_messages)"
            );
            return;
        }
        let out = notification_out(msg.to_bytes(), OutKind::Notification, None);
        self.fan_out(clients, &out);
    }

    /// A server→client request: answered locally (`ping`) or routed to the client whose
    /// request it belongs to, if that client declared the capability it needs; else
    /// refused with an error that says why.
    fn on_upstream_request(&mut self, upstream: UpstreamId, mut msg: Message, related: &Related) {
        let id = msg.id().cloned().expect("requests have ids");
        let method = msg.method().unwrap_or_default().to_owned();
        if method == methods::PING {
            self.send_to_upstream(upstream, &Message::response(&id, &json!({})));
            return;
        }
        let refuse = |hub: &mut Hub, why: String| {
            tracing::debug!(upstream = %hub.upstreams[upstream.0].name, %method, %why, "server request refused");
            let err = Message::error_response(Some(&id), code::METHOD_NOT_FOUND, &why, None);
            hub.send_to_upstream(upstream, &err);
        };
        let Some((client, client_request)) = self.owner_of(upstream, related) else {
            let why = match related {
                Related::Unknown => "mcpmux cannot tell which client this request belongs to: \
                     it did not come with a client request and several (or no) requests are in flight on this server",
                _ => "mcpmux cannot route this request: it belongs to no client request",
            };
            return refuse(self, format!("{why} ({method})"));
        };
        let params: serde_json::Value = msg
            .params()
            .and_then(|p| serde_json::from_str(p.get()).ok())
            .unwrap_or_default();
        let client_caps = self
            .clients
            .get(&client)
            .and_then(|c| c.init.as_ref())
            .map(|i| &i.capabilities);
        if let Some(why) = client_caps.and_then(|caps| missing_capability(&method, &params, caps)) {
            return refuse(self, why);
        }
        if self.is_modern(client) {
            // 2026-07-28 has no server→client requests: the client's request is
            // answered `input_required`, and its retry answers this one (MRTR).
            if let Err(why) = self.bridge_to_input_required(upstream, &msg, client, client_request)
            {
                refuse(self, format!("{why} ({method})"));
            }
            return;
        }
        if method == methods::ELICITATION_CREATE && params["mode"] == "url" {
            if let Some(eid) = params["elicitationId"].as_str() {
                self.elicitations.insert((upstream, eid.to_owned()), client);
            }
        }
        let pid = self.pending.register_client_bound(ClientBound {
            upstream,
            upstream_id: id,
            client,
        });
        msg.set_id(&RawId::from_u64(pid.0));
        self.push(
            client,
            notification_out(msg.to_bytes(), OutKind::Request, Some(client_request)),
        );
    }

    /// Tells every client that the lists an upstream contributes may have changed.
    fn broadcast_list_changed(&mut self, upstream: UpstreamId) {
        let caps = self.upstreams[upstream.0].last_caps.clone();
        for (cap, method) in [
            ("tools", methods::TOOLS_LIST_CHANGED),
            ("prompts", methods::PROMPTS_LIST_CHANGED),
            ("resources", methods::RESOURCES_LIST_CHANGED),
        ] {
            if caps[cap].is_object() {
                self.broadcast(
                    &Message::notification(method, None),
                    OutKind::Coalescible(CoalesceKey::Method(method.into())),
                );
            }
        }
    }

    /// Sends a `*/list_changed` to every initialized legacy client and to every
    /// listen stream that asked for it (tagged).
    pub(super) fn broadcast(&mut self, msg: &Message, kind: OutKind) {
        let method = msg.method().unwrap_or_default();
        let clients: Vec<ClientId> = self
            .clients
            .iter()
            .filter(|(_, c)| match c.init.as_ref().map(|i| i.modern.as_ref()) {
                None => false,
                Some(None) => true,
                Some(Some(m)) => m.listen.as_ref().is_some_and(|l| l.wants(method)),
            })
            .map(|(id, _)| *id)
            .collect();
        self.fan_out_tagged(&clients, msg, kind);
    }
}

impl Hub {
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
                *uri = serde_json::Value::String(self.catalog.expose_uri(upstream, own));
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
    let parse = |r: &serde_json::value::RawValue| serde_json::from_str(r.get()).unwrap_or_default();
    match (msg.result(), msg.error()) {
        (Some(r), _) => Ok(parse(r)),
        (None, Some(e)) => Err(parse(e)),
        (None, None) => {
            Err(json!({"code": code::INTERNAL_ERROR, "message": "empty upstream response"}))
        }
    }
}

/// Why the client may not receive a server→client request: it did not declare the
/// capability the request needs in `initialize` (for elicitation, the mode: an empty
/// `elicitation` capability means form mode only). `None` when it may; methods that
/// need no capability mcpmux knows of pass.
fn missing_capability(
    method: &str,
    params: &serde_json::Value,
    caps: &serde_json::Value,
) -> Option<String> {
    let cap = match method {
        methods::SAMPLING_CREATE => "sampling",
        methods::ROOTS_LIST => "roots",
        methods::ELICITATION_CREATE => "elicitation",
        _ => return None,
    };
    let declared = &caps[cap];
    if !declared.is_object() {
        return Some(format!(
            "the client this request belongs to did not declare the {cap} capability ({method})"
        ));
    }
    if method == methods::ELICITATION_CREATE {
        let mode = params["mode"].as_str().unwrap_or("form");
        let names_modes = declared.get("form").is_some() || declared.get("url").is_some();
        if declared.get(mode).is_none() && (names_modes || mode != "form") {
            return Some(format!(
                "the client this request belongs to did not declare elicitation.{mode} ({method})"
            ));
        }
    }
    None
}

/// The URIs `uri` is a sub-resource of, nearest first: every prefix that ends at a
/// `/` of its path, with and without that `/` (`file:///a/b/c` → `file:///a/b/`,
/// `file:///a/b`, `file:///a/`, `file:///a`, `file:///`). Nothing above the path
/// (the scheme and authority alone) is a parent.
fn parent_uris(uri: &str) -> impl Iterator<Item = &str> {
    let path_start = uri.find("://").map_or(0, |i| i + 3);
    let path_start = uri[path_start..]
        .find('/')
        .map_or(uri.len(), |i| path_start + i);
    uri[path_start..]
        .rmatch_indices('/')
        .map(move |(i, _)| path_start + i)
        .filter(move |&end| end + 1 < uri.len())
        .flat_map(move |end| {
            let with = &uri[..=end];
            let without = (end > path_start).then(|| &uri[..end]);
            [Some(with), without].into_iter().flatten()
        })
}

/// The outbox coalescing key of an update: one pending entry per (upstream, URI).
pub(super) fn update_key(key: &SubKey) -> OutKind {
    OutKind::Coalescible(CoalesceKey::Update(key.clone()))
}

/// Sets `params.progressToken` of a progress notification.
fn rewrite_progress_token_notification(msg: &mut Message, token: serde_json::Value) {
    if let Some(mut params) = msg
        .params()
        .and_then(|p| serde_json::from_str::<serde_json::Value>(p.get()).ok())
    {
        params["progressToken"] = token;
        msg.set_params(&params);
    }
}

#[cfg(test)]
mod tests {
    use super::parent_uris;

    #[test]
    fn parents_end_at_slashes_of_the_path() {
        let p: Vec<&str> = parent_uris("file:///a/b/c").collect();
        assert_eq!(
            p,
            [
                "file:///a/b/",
                "file:///a/b",
                "file:///a/",
                "file:///a",
                "file:///"
            ]
        );
        let p: Vec<&str> = parent_uris("test://static/1").collect();
        assert_eq!(p, ["test://static/"]);
        assert_eq!(parent_uris("test://static").count(), 0);
        assert_eq!(
            parent_uris("test://static/").count(),
            0,
            "a URI is not its own parent"
        );
        let p: Vec<&str> = parent_uris("db://h/t/").collect();
        assert_eq!(p, ["db://h/"]);
        assert_eq!(parent_uris("urn:x:y").count(), 0);
    }
}
