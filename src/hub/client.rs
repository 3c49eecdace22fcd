//! Client → hub: the handshake answered locally (it waits for the upstreams' first
//! start in the admission part, `admission.rs`), subscriptions through the registry
//! (the holders part, `holders.rs`), everything else forwarded to the upstream that owns
//! it with a proxy-allocated id.
//!
//! Owns no state of its own. Never waits on a client or an upstream.

use serde_json::json;
use tokio::time::Instant;

use super::{ClientInit, Hub, SubError, UpstreamStatus, Waiter};
use crate::downstream::outbox::{OutKind, Outbound};
use crate::protocol::methods::{self, parse_params, InitializeParams};
use crate::protocol::{code, negotiate_version, Kind, Message, RawId};
use crate::state::capabilities::{self, UpstreamOffer};
use crate::state::catalog::ListKind;
use crate::state::ids::{ClientId, ProxyId, SubKey, UpstreamId, ViewId};
use crate::state::pending::Origin;
use crate::state::subscriptions::SubEffect;

impl Hub {
    pub(super) fn on_client_message(&mut self, client: ClientId, msg: Message) {
        if !self.clients.contains_key(&client) {
            return; // Already gone; late message.
        }
        if let Some(why) = bad_params(&msg) {
            match msg.id().filter(|_| msg.kind() == Kind::Request) {
                Some(id) => {
                    let id = id.clone();
                    self.reply_error(client, &id, code::INVALID_PARAMS, why);
                }
                None => tracing::debug!(%client, why, "client message with bad params dropped"),
            }
            return;
        }
        match msg.kind() {
            Kind::Request => self.on_client_request(client, msg),
            Kind::Notification => self.on_client_notification(client, msg),
            Kind::Response => self.on_client_response(client, msg),
        }
    }

    fn on_client_request(&mut self, client: ClientId, msg: Message) {
        let id = msg.id().cloned().expect("requests have ids");
        self.trace_request(client, &id, &msg);
        // One admission for every kind of client. A stateless client's every request
        // stands for a handshake: like `initialize`, it waits for the upstreams' first
        // start (and starts the lazy ones), so it can be routed.
        let stateless = self.is_stateless(client);
        let method = msg.method().unwrap_or_default();
        let initialized = self.clients[&client].init.is_some();
        if method == methods::PING && !stateless {
            return self.reply(client, &id, json!({}));
        }
        if self.admission.draining() {
            return self.reply_error(
                client,
                &id,
                code::UPSTREAM_UNAVAILABLE,
                "mcpmux is shutting down",
            );
        }
        let handshake = stateless || (method == methods::INITIALIZE && !initialized);
        if handshake {
            self.start_lazy_upstreams();
            if self.any_upstream_starting() {
                self.admission.defer(client, msg);
                return;
            }
        }
        self.dispatch_request(client, id, msg);
    }

    /// A request admitted (and, for a handshake, with every upstream started): to the
    /// method's handler.
    fn dispatch_request(&mut self, client: ClientId, id: RawId, msg: Message) {
        if self.is_stateless(client) {
            return self.on_stateless_request(client, id, msg);
        }
        let method = msg.method().unwrap_or_default();
        let initialized = self.clients[&client].init.is_some();
        match method {
            methods::INITIALIZE if initialized => self.reply_error(
                client,
                &id,
                code::INVALID_REQUEST,
                "this session is already initialized",
            ),
            methods::INITIALIZE => self.answer_initialize(client, &msg),
            m if m.starts_with("notifications/") => self.reply_error(
                client,
                &id,
                code::INVALID_REQUEST,
                "notifications must not carry an id",
            ),
            methods::SERVER_DISCOVER => self.reply_error(
                client,
                &id,
                code::METHOD_NOT_FOUND,
                &crate::protocol::session_discover_refusal(),
            ),
            _ if !initialized => self.reply_error(
                client,
                &id,
                code::INVALID_REQUEST,
                "send initialize before any other request",
            ),
            methods::SUBSCRIBE => self.on_subscribe(client, id, &msg),
            methods::UNSUBSCRIBE => self.on_unsubscribe(client, id, &msg),
            methods::RESOURCES_READ => self.on_read(client, id, msg),
            methods::LOGGING_SET_LEVEL => self.on_set_level(client, id, &msg),
            m if ListKind::from_method(m).is_some() => {
                let kind = ListKind::from_method(m).expect("checked");
                self.on_list(client, id, &msg, kind);
            }
            _ => self.forward_request(client, id, msg),
        }
    }

    fn any_upstream_starting(&self) -> bool {
        self.upstreams
            .iter()
            .enumerate()
            .any(|(i, u)| match u.status {
                UpstreamStatus::Starting => true,
                UpstreamStatus::Ready(_) => {
                    !u.catalog_synced && self.pending.catalog_in_flight(UpstreamId(i))
                }
                UpstreamStatus::Down { .. }
                | UpstreamStatus::NeedsLogin { .. }
                | UpstreamStatus::Idle
                | UpstreamStatus::Removed => false,
            })
    }

    /// The first client wakes every `lazy = true` upstream; its handshake then waits
    /// for them like for any upstream's first start.
    fn start_lazy_upstreams(&mut self) {
        for slot in &mut self.upstreams {
            if matches!(slot.status, UpstreamStatus::Idle) {
                tracing::info!(upstream = %slot.name, "starting lazy upstream for the first client");
                slot.handle.start();
                slot.status = UpstreamStatus::Starting;
            }
        }
    }

    /// Answers the handshakes (and stateless requests) that waited for the upstreams'
    /// first start.
    pub(super) fn answer_deferred_inits(&mut self) {
        if self.any_upstream_starting() {
            return;
        }
        for (client, msg) in self.admission.take_waiting() {
            if !self.clients.contains_key(&client) {
                continue;
            }
            let id = msg.id().cloned().expect("requests have ids");
            self.dispatch_request(client, id, msg);
        }
    }

    /// What every ready upstream of `view` offers, for the capabilities mcpmux
    /// declares to its clients.
    pub(super) fn ready_offers(&self, view: ViewId) -> Vec<UpstreamOffer<'_>> {
        self.upstreams
            .iter()
            .enumerate()
            .filter(|(i, _)| self.catalog.in_view(view, UpstreamId(*i)))
            .filter_map(|(_, u)| match &u.status {
                UpstreamStatus::Ready(info) => Some(UpstreamOffer {
                    capabilities: &info.capabilities,
                    force_subscribe: u.force_subscribe,
                }),
                _ => None,
            })
            .collect()
    }

    /// The `instructions` of the ready upstreams of `view`, joined by blank lines.
    pub(super) fn ready_instructions(&self, view: ViewId) -> Option<String> {
        let all: Vec<&str> = self
            .upstreams
            .iter()
            .enumerate()
            .filter(|(i, _)| self.catalog.in_view(view, UpstreamId(*i)))
            .filter_map(|(_, u)| match &u.status {
                UpstreamStatus::Ready(i) => i.instructions.as_deref(),
                _ => None,
            })
            .collect();
        (!all.is_empty()).then(|| all.join("\n\n"))
    }

    fn answer_initialize(&mut self, client: ClientId, msg: &Message) {
        let id = msg.id().cloned().expect("requests have ids");
        let Some(params) = parse_params::<InitializeParams>(msg.params()) else {
            return self.reply_error(
                client,
                &id,
                code::INVALID_PARAMS,
                "initialize needs params.protocolVersion (string) and params.capabilities",
            );
        };
        let view = self.view_of(client);
        let caps = capabilities::merged_capabilities(self.ready_offers(view));
        let declared_subscribe = capabilities::declares_subscribe(&caps);
        let mut result = json!({
            "protocolVersion": negotiate_version(&params.protocol_version),
            "capabilities": caps,
            "serverInfo": {"name": "mcpmux", "version": env!("CARGO_PKG_VERSION")},
        });
        if let Some(text) = self.ready_instructions(view) {
            result["instructions"] = json!(text);
        }
        if let Some(c) = self.clients.get_mut(&client) {
            c.init = Some(ClientInit {
                declared_subscribe,
                capabilities: params.capabilities,
                stateless: None,
                version: result["protocolVersion"].as_str().map(str::to_owned),
            });
        }
        self.reply(client, &id, result);
    }

    fn on_subscribe(&mut self, client: ClientId, id: RawId, msg: &Message) {
        let Some(uri) = self.uri_param_or_reply(client, &id, msg) else {
            return;
        };
        let init = self.clients[&client]
            .init
            .as_ref()
            .expect("checked by caller");
        if let Some(why) = capabilities::subscribe_refusal(
            init.declared_subscribe,
            &init.capabilities,
            self.settings.client_capability,
        ) {
            return self.reply_error(client, &id, code::METHOD_NOT_FOUND, &why);
        }
        let Some(key) = self.uri_key_or_reply(client, &id, &uri) else {
            return;
        };
        let upstream = key.upstream;
        let slot = &self.upstreams[upstream.0];
        let subscribable = match &slot.status {
            UpstreamStatus::Ready(info) => UpstreamOffer {
                capabilities: &info.capabilities,
                force_subscribe: slot.force_subscribe,
            }
            .subscribable(),
            _ if self.holders.registry.is_active(&key) => true,
            _ => {
                let why = self.unavailable(upstream);
                return self.reply_error(client, &id, code::UPSTREAM_UNAVAILABLE, &why);
            }
        };
        if !subscribable {
            let why = format!(
                "upstream {0} does not declare resources.subscribe (set servers.{0}.force_subscribe = true to send it anyway)",
                slot.name
            );
            return self.reply_error(client, &id, code::METHOD_NOT_FOUND, &why);
        }
        if !self.holders.registry.holds(client, &key)
            && self.holders.registry.count_for(client) >= self.settings.max_subscriptions_per_client
        {
            let why = format!(
                "too many subscriptions for this client (limits.max_subscriptions_per_client = {})",
                self.settings.max_subscriptions_per_client
            );
            return self.reply_error(client, &id, code::LIMIT_EXCEEDED, &why);
        }
        let effects =
            self.holders
                .registry
                .subscribe(client, key, (client, id), Instant::now().into_std());
        self.count_client_subscribe(&effects);
        self.apply_sub_effects(effects);
    }

    /// Counts a client's subscription, and whether it was saved an upstream one.
    pub(super) fn count_client_subscribe(&mut self, effects: &[SubEffect<Waiter, SubError>]) {
        self.counters.client_subscribes += 1;
        if !effects
            .iter()
            .any(|e| matches!(e, SubEffect::UpstreamSubscribe(_)))
        {
            self.counters.subscribes_saved += 1;
        }
    }

    fn on_unsubscribe(&mut self, client: ClientId, id: RawId, msg: &Message) {
        let Some(uri) = self.uri_param_or_reply(client, &id, msg) else {
            return;
        };
        // What the client holds under this URI, as it was routed when it subscribed:
        // routing now may differ (the upstream is down and out of the catalog, the
        // resource left its list, a reload changed the view).
        let mut keys: Vec<SubKey> = self
            .holders
            .registry
            .keys_for(client)
            .filter(|k| self.catalog.expose_uri(k.upstream, &k.uri) == *uri)
            .cloned()
            .collect();
        if keys.is_empty() {
            if let Some((upstream, upstream_uri)) = self.route_uri(self.view_of(client), &uri) {
                keys.push(SubKey::new(upstream, &upstream_uri));
            }
        }
        for key in keys {
            let effects =
                self.holders
                    .registry
                    .unsubscribe(client, &key, Instant::now().into_std());
            self.apply_sub_effects(effects);
        }
        self.reply(client, &id, json!({}));
    }

    /// Forwards a request to its upstream under a proxy id; the answer is mapped back.
    pub(super) fn forward_request(&mut self, client: ClientId, id: RawId, mut msg: Message) {
        let upstream = match self.route_request(self.view_of(client), &mut msg) {
            Ok(u) => u,
            Err((code, why)) => return self.reply_error(client, &id, code, &why),
        };
        if self.upstream_ready(upstream).is_none() {
            let why = self.unavailable(upstream);
            return self.reply_error(client, &id, code::UPSTREAM_UNAVAILABLE, &why);
        }
        if self.refused_at_limit(client, &id) {
            return;
        }
        let progress = methods::progress_token(msg.params());
        let origin = Origin::Client {
            client,
            id: id.clone(),
            method: msg.method().unwrap_or_default().into(),
            progress: progress.as_deref().map(Into::into),
        };
        let Ok(pid) = self.pending.register(upstream, origin) else {
            return self.reply_error(
                client,
                &id,
                code::INVALID_REQUEST,
                "a request with this id is already in flight",
            );
        };
        msg.set_id(&RawId::from_u64(pid.0));
        if progress.is_some() {
            rewrite_progress_token(&mut msg, json!(pid.0));
        }
        self.dispatch_upstream(upstream, pid, &msg);
    }

    fn on_client_notification(&mut self, client: ClientId, msg: Message) {
        match msg.method().unwrap_or_default() {
            methods::INITIALIZED => {}
            methods::CANCELLED => {
                let Some(p) = parse_params::<methods::CancelledParams>(msg.params()) else {
                    return;
                };
                let Some(raw) = p.request_id else { return };
                let Some(req) = RawId::parse(raw.get()) else {
                    return;
                };
                self.reads.forget(client, Some(&req));
                // A list being assembled is not answered either (its parts, still on
                // their way, fill the catalog as usual).
                self.lists.cancel(client, &req);
                // Nor is a subscribe waiting for the upstream, and its client will not
                // hold the key for it.
                self.holders
                    .registry
                    .cancel_waiter(client, |(c, i)| *c == client && *i == req);
                self.trace_cancelled(client, &req);
                if let Some(pid) = self.pending.find_client_request(client, &req) {
                    if let Some(entry) = self.pending.complete(pid) {
                        self.drop_request_timer(pid);
                        self.send_cancelled(entry.upstream, pid, "cancelled by the client");
                    }
                }
                // No response will come: whatever waits for one (an HTTP POST) ends.
                self.push(
                    client,
                    Outbound::new(bytes::Bytes::new(), OutKind::Release, Some(req)),
                );
            }
            methods::ROOTS_LIST_CHANGED => {
                // Roots are per session: every upstream mcpmux declared roots to
                // hears that they may have changed, and asks again.
                for u in self.view_members(self.view_of(client)) {
                    if self.upstreams[u.0].declares_roots && self.upstream_ready(u).is_some() {
                        self.send_to_upstream(u, &msg);
                    }
                }
            }
            other => tracing::debug!(%client, method = other, "client notification not forwarded"),
        }
    }

    /// A client answered a server→client request: map the id back and forward it.
    fn on_client_response(&mut self, client: ClientId, mut msg: Message) {
        let Some(pid) = msg.id().and_then(RawId::as_u64).map(ProxyId) else {
            tracing::debug!(%client, "response to an unknown request id dropped");
            return;
        };
        if self.pending.client_bound(pid).map(|b| b.client) != Some(client) {
            // Unknown, already answered, or another client's request: ignore it.
            tracing::debug!(%client, "response to an unknown request id dropped");
            return;
        }
        if let Some(bound) = self.pending.complete_client_bound(pid) {
            msg.set_id(&bound.upstream_id);
            self.send_to_upstream(bound.upstream, &msg);
        }
    }

    /// Queues a success response for a client.
    pub(super) fn reply(&mut self, client: ClientId, id: &RawId, result: serde_json::Value) {
        let m = Message::response(id, &result);
        self.push_response(client, id, m);
    }

    pub(super) fn reply_error(&mut self, client: ClientId, id: &RawId, code: i64, message: &str) {
        let m = Message::error_response(Some(id), code, message, None);
        self.push_response(client, id, m);
    }

    /// Queues a response for a client; a stateless client's keeps the message, which
    /// its edge reads to shape it.
    pub(super) fn push_response(&mut self, client: ClientId, id: &RawId, m: Message) {
        if !self.is_stateless(client) {
            return self.push_response_bytes(client, id.clone(), m.to_bytes());
        }
        let hints = self.response_hints(client, id);
        let out = Outbound::parsed_response(m, id.clone(), hints);
        self.trace_response(client, id, &out.bytes);
        self.push(client, out);
    }

    /// Queues an already-serialized response to the client's request `id` (with the
    /// cache hints of its result for a stateless client, whose edge shapes it).
    pub(super) fn push_response_bytes(&mut self, client: ClientId, id: RawId, bytes: bytes::Bytes) {
        let hints = self.response_hints(client, &id);
        self.trace_response(client, &id, &bytes);
        self.push(client, Outbound::response(bytes, id, hints));
    }
}

/// Why a client message's `params` cannot be forwarded: MCP params are an object, and
/// one that nests deeper than the JSON parser's limit (128) could not be read by
/// mcpmux or most servers, whose error would then carry no id to map back.
fn bad_params(msg: &Message) -> Option<&'static str> {
    let params = msg.params()?.get();
    if !params.trim_start().starts_with('{') {
        return Some("params must be an object");
    }
    crate::protocol::nests_deeper_than(params, crate::protocol::MAX_NESTING)
        .then_some("params nest too deeply (more than 128 levels)")
}

/// Sets `params._meta.progressToken`.
pub(super) fn rewrite_progress_token(msg: &mut Message, token: serde_json::Value) {
    let Some(mut params) = msg
        .params()
        .and_then(|p| serde_json::from_str::<serde_json::Value>(p.get()).ok())
    else {
        return;
    };
    if let Some(meta) = params.get_mut("_meta").and_then(|m| m.as_object_mut()) {
        meta.insert("progressToken".into(), token);
        msg.set_params(&params);
    }
}
