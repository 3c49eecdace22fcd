//! The stateless (2026-07-28) session of an upstream (docs/architecture.md,
//! "Upstreams of both eras"). The hub speaks to every upstream as to a legacy session
//! (`resources/subscribe`, `logging/setLevel`, `ping`, server→client requests); this
//! state machine translates at the edge so the hub stays era-neutral:
//!
//! - every request gets the era's `_meta` envelope (`protocolVersion`,
//!   `clientCapabilities`, `clientInfo`, `logLevel`);
//! - `resources/subscribe`/`unsubscribe` change the one deduplicated upstream listen
//!   ([`listen`]); its tagged notifications reach the hub untagged;
//! - `logging/setLevel` and `ping` are answered here (the era has neither);
//! - `input_required` results of a legacy client's request are bridged ([`bridge`]).
//!
//! Pure state: one loop (`driver::run_stateless`) feeds it over either transport and
//! carries out its [`Action`]s. Never
//! does I/O, never blocks; the `_meta` it writes replaces only the era's own keys.

pub(crate) mod bridge;
mod envelope;
pub(crate) mod listen;

use std::collections::BTreeSet;
use std::time::Instant;

use serde_json::{json, Value};

use super::{RequestCtx, UpstreamCmd};
use crate::protocol::listen::ListenFilter;
use crate::protocol::stateless::{code as modern_code, meta, name_member, MODERN_VERSION};
use crate::protocol::{code, methods, Kind, Message, RawId};
use crate::upstream::Related;
use bridge::{BridgeAction, Bridges};
use envelope::{envelope_raw, envelope_text};
use listen::{Flags, ListenAction, Listens};

/// What the core wants done.
#[derive(Debug)]
pub(crate) enum Action {
    /// Send a message to the server. `listen` marks a `subscriptions/listen` (its
    /// HTTP stream stays open). `param_headers` are `Mcp-Param-*` for HTTP.
    Send {
        msg: Message,
        listen: bool,
        param_headers: Vec<(String, String)>,
    },
    /// Stop the request or listen with this id (HTTP: drop its stream; stdio:
    /// `notifications/cancelled`).
    Stop(RawId),
    /// Give the hub a message.
    Hub(Message, Related),
    /// The session must end and be set up again (the server changed its versions, or
    /// the held URIs' listen cannot be opened again).
    Restart(String),
}

/// The state of one stateless (2026-07-28) upstream session: its listens, its
/// bridged MRTR requests and the log level the hub set.
pub(crate) struct StatelessSession {
    name: String,
    /// `clientCapabilities` for mcpmux's own requests (what it routes).
    capabilities: Value,
    /// The level the hub last set (from its legacy clients).
    log_level: Option<String>,
    listens: Listens,
    bridges: Bridges,
}

impl StatelessSession {
    /// A core for a server whose `server/discover` offered `server_capabilities`.
    pub fn new(name: &str, capabilities: Value, server_capabilities: &Value) -> Self {
        StatelessSession {
            name: name.to_owned(),
            capabilities,
            log_level: None,
            listens: Listens::new(Flags::offered_by(server_capabilities)),
            bridges: Bridges::default(),
        }
    }

    /// Listens opened so far in this session.
    pub fn listens_opened(&self) -> u64 {
        self.listens.opened
    }

    /// What a session does first: open the listen for the list-changed flags.
    pub fn start(&mut self, now: Instant, out: &mut Vec<Action>) {
        let mut acts = Vec::new();
        self.listens.start(now, &mut acts);
        self.listen_actions(acts, out);
    }

    /// The earliest moment [`StatelessSession::on_timer`] has work.
    pub fn deadline(&self) -> Option<Instant> {
        self.listens.deadline()
    }

    pub fn on_timer(&mut self, now: Instant, out: &mut Vec<Action>) {
        let mut acts = Vec::new();
        self.listens.on_timer(now, &mut acts);
        self.listen_actions(acts, out);
    }

    /// A command from the hub.
    pub fn on_command(&mut self, cmd: UpstreamCmd, now: Instant, out: &mut Vec<Action>) {
        let (bytes, ctx) = match cmd {
            UpstreamCmd::Send(b) => (b, None),
            UpstreamCmd::Request(b, ctx) => (b, Some(ctx)),
        };
        let msg = match Message::parse(&bytes) {
            Ok(m) => m,
            Err(e) => {
                tracing::warn!(upstream = %self.name, error = %e, "unparseable message for a modern upstream dropped");
                return;
            }
        };
        match msg.kind() {
            Kind::Request => self.on_hub_request(msg, ctx.as_deref(), now, out),
            Kind::Notification => self.on_hub_notification(&msg, out),
            Kind::Response => {
                if let Some(acts) = self.bridges.on_answer(&msg) {
                    self.bridge_actions(acts, out);
                } else {
                    tracing::debug!(upstream = %self.name, id = ?msg.id(), "response for a modern upstream dropped (it sends no requests)");
                }
            }
        }
    }

    fn on_hub_request(
        &mut self,
        mut msg: Message,
        ctx: Option<&RequestCtx>,
        now: Instant,
        out: &mut Vec<Action>,
    ) {
        let id = msg.id().cloned().expect("requests have ids");
        let method = msg.method().unwrap_or_default().to_owned();
        match method.as_str() {
            methods::SUBSCRIBE | methods::UNSUBSCRIBE => {
                let Some(p) = methods::parse_params::<methods::UriParams>(msg.params()) else {
                    let bad = Message::error_response(
                        Some(&id),
                        code::INVALID_PARAMS,
                        "params.uri is required",
                        None,
                    );
                    out.push(Action::Hub(bad, Related::Nothing));
                    return;
                };
                let mut acts = Vec::new();
                if method == methods::SUBSCRIBE {
                    self.listens.subscribe(id, p.uri, now, &mut acts);
                } else {
                    self.listens.unsubscribe(&p.uri, now, &mut acts);
                    out.push(Action::Hub(
                        Message::response(&id, &json!({})),
                        Related::Nothing,
                    ));
                }
                self.listen_actions(acts, out);
            }
            methods::LOGGING_SET_LEVEL => {
                let level: Value = msg
                    .params()
                    .and_then(|p| serde_json::from_str(p.get()).ok())
                    .unwrap_or_default();
                self.log_level = level["level"].as_str().map(str::to_owned);
                out.push(Action::Hub(
                    Message::response(&id, &json!({})),
                    Related::Nothing,
                ));
            }
            methods::PING => out.push(Action::Hub(
                Message::response(&id, &json!({})),
                Related::Nothing,
            )),
            _ => {
                self.envelope(&mut msg, ctx);
                let bridge = ctx.is_some_and(|c| c.bridge_input)
                    && matches!(
                        method.as_str(),
                        methods::TOOLS_CALL | methods::RESOURCES_READ | "prompts/get"
                    );
                if bridge {
                    let params = msg
                        .params()
                        .and_then(|p| serde_json::from_str(p.get()).ok())
                        .unwrap_or_else(|| json!({}));
                    self.bridges.track(&id, &method, params);
                }
                out.push(Action::Send {
                    msg,
                    listen: false,
                    param_headers: ctx.map(|c| c.param_headers.clone()).unwrap_or_default(),
                });
            }
        }
    }

    fn on_hub_notification(&mut self, msg: &Message, out: &mut Vec<Action>) {
        if msg.method() != Some(methods::CANCELLED) {
            // `notifications/initialized`, `roots/list_changed`: the era has none.
            return;
        }
        let Some(target) = methods::parse_params::<methods::CancelledParams>(msg.params())
            .and_then(|p| p.request_id)
            .and_then(|r| RawId::parse(r.get()))
        else {
            return;
        };
        let wire = self.bridges.cancel(&target).unwrap_or(target);
        out.push(Action::Stop(wire));
    }

    /// Writes the era's `_meta` into a request. Only the top level of its params and of
    /// their `_meta` is read: the arguments pass on as the client wrote them.
    fn envelope(&self, msg: &mut Message, ctx: Option<&RequestCtx>) {
        let caps = ctx.map_or(&self.capabilities, |c| &c.client_capabilities);
        // A client's request carries that client's level only (none: no logs for it);
        // mcpmux's own requests carry the level the legacy clients set.
        let level = match ctx {
            Some(c) => c.log_level.as_deref(),
            None => self.log_level.as_deref(),
        };
        let member = msg.method().and_then(name_member);
        let (params, name) = envelope_text(msg.params().map(|p| p.get()), caps, level, member);
        msg.set_params_text(params);
        if let Some(name) = name {
            // What the request's `Mcp-Name` header will say, read on the way.
            msg.mcp_name_with(|_| name);
        }
    }

    /// A message from the server (`related` as the transport knows it).
    pub fn on_message(
        &mut self,
        mut msg: Message,
        related: Related,
        now: Instant,
        out: &mut Vec<Action>,
    ) {
        match msg.kind() {
            Kind::Response => {
                let id = msg.id().cloned();
                if let Some(id) = id.as_ref().filter(|i| Listens::is_listen(i)) {
                    let mut acts = Vec::new();
                    self.listens.on_ended(id, now, &mut acts);
                    self.listen_actions(acts, out);
                    return;
                }
                if let Some(why) = version_refused(&msg) {
                    out.push(Action::Restart(why));
                }
                if let Some(acts) = self.bridges.on_response(&msg) {
                    self.bridge_actions(acts, out);
                    return;
                }
                out.push(Action::Hub(msg, related));
            }
            Kind::Notification => {
                let method = msg.method().unwrap_or_default();
                if method == methods::SUBSCRIPTIONS_ACKNOWLEDGED {
                    return self.on_ack(&msg, now, out);
                }
                if method == methods::CANCELLED {
                    let target = methods::parse_params::<methods::CancelledParams>(msg.params())
                        .and_then(|p| p.request_id)
                        .and_then(|r| RawId::parse(r.get()));
                    if let Some(id) = target.filter(Listens::is_listen) {
                        let mut acts = Vec::new();
                        self.listens.on_ended(&id, now, &mut acts);
                        self.listen_actions(acts, out);
                        return;
                    }
                }
                if untag(&mut msg) {
                    out.push(Action::Hub(msg, Related::Nothing));
                } else {
                    let related = match related {
                        Related::Request(wire) => match self.bridges.hub_id_of(&wire) {
                            Some(hub_id) => Related::Request(hub_id.clone()),
                            None => Related::Request(wire),
                        },
                        other => other,
                    };
                    out.push(Action::Hub(msg, related));
                }
            }
            Kind::Request => {
                tracing::warn!(upstream = %self.name, method = ?msg.method(), "a 2026-07-28 server sent a request (the era has none); dropped");
            }
        }
    }

    /// The HTTP stream of listen `id` ended without its result (transport loss).
    pub fn on_listen_lost(&mut self, id: &RawId, now: Instant, out: &mut Vec<Action>) {
        let mut acts = Vec::new();
        self.listens.on_ended(id, now, &mut acts);
        self.listen_actions(acts, out);
    }

    fn on_ack(&mut self, msg: &Message, now: Instant, out: &mut Vec<Action>) {
        let params: Value = msg
            .params()
            .and_then(|p| serde_json::from_str(p.get()).ok())
            .unwrap_or_default();
        let Some(id) = params["_meta"]
            .get(meta::SUBSCRIPTION_ID)
            .and_then(|v| RawId::parse(&v.to_string()))
        else {
            return;
        };
        let honoured: BTreeSet<String> = ListenFilter::parse(&params["notifications"])
            .uris
            .unwrap_or_default()
            .into_iter()
            .collect();
        let mut acts = Vec::new();
        self.listens.on_ack(&id, &honoured, now, &mut acts);
        self.listen_actions(acts, out);
    }

    fn listen_actions(&self, acts: Vec<ListenAction>, out: &mut Vec<Action>) {
        for a in acts {
            match a {
                ListenAction::Open { id, filter } => {
                    let asked = json!({ "notifications": filter }).to_string();
                    let mut msg = Message::request(&id, methods::SUBSCRIPTIONS_LISTEN, None);
                    msg.set_member(
                        "params",
                        envelope_raw(Some(&asked), &self.capabilities, None),
                    );
                    tracing::debug!(upstream = %self.name, listen = %id, "opening the upstream listen");
                    out.push(Action::Send {
                        msg,
                        listen: true,
                        param_headers: Vec::new(),
                    });
                }
                ListenAction::Close(id) => out.push(Action::Stop(id)),
                ListenAction::Answer { id, outcome } => {
                    let m = match outcome {
                        Ok(()) => Message::response(&id, &json!({})),
                        Err(why) => {
                            Message::error_response(Some(&id), code::INVALID_PARAMS, &why, None)
                        }
                    };
                    out.push(Action::Hub(m, Related::Nothing));
                }
                ListenAction::Restart(why) => out.push(Action::Restart(why)),
                ListenAction::MayHaveChanged(uris) => {
                    for uri in uris {
                        let n = Message::notification(
                            methods::RESOURCES_UPDATED,
                            Some(&json!({ "uri": uri })),
                        );
                        out.push(Action::Hub(n, Related::Nothing));
                    }
                }
            }
        }
    }

    fn bridge_actions(&self, acts: Vec<BridgeAction>, out: &mut Vec<Action>) {
        for a in acts {
            match a {
                BridgeAction::Hub { msg, for_request } => {
                    let related = for_request.map_or(Related::Nothing, Related::Request);
                    out.push(Action::Hub(msg, related));
                }
                BridgeAction::Retry(msg) => out.push(Action::Send {
                    msg,
                    listen: false,
                    param_headers: Vec::new(),
                }),
            }
        }
    }
}

/// The params of a `server/discover` probe (or any request mcpmux makes itself).
pub(crate) fn discover_params(capabilities: &Value) -> Value {
    serde_json::from_str(envelope_raw(None, capabilities, None).get()).expect("JSON text")
}

/// Removes `_meta[subscriptionId]` from a notification (mcpmux's own listen's tag,
/// which no client must see). `true` when it was tagged.
fn untag(msg: &mut Message) -> bool {
    let Some(raw) = msg.params() else {
        return false;
    };
    if !raw.get().contains(meta::SUBSCRIPTION_ID) {
        return false;
    }
    let Ok(mut params) = serde_json::from_str::<Value>(raw.get()) else {
        return false;
    };
    let Some(m) = params.get_mut("_meta").and_then(Value::as_object_mut) else {
        return false;
    };
    if m.remove(meta::SUBSCRIPTION_ID).is_none() {
        return false;
    }
    if m.is_empty() {
        params.as_object_mut().expect("has _meta").remove("_meta");
    }
    msg.set_params(&params);
    true
}

/// The text of a -32022 answer: the server no longer takes mcpmux's version.
fn version_refused(msg: &Message) -> Option<String> {
    let err: Value = serde_json::from_str(msg.error()?.get()).ok()?;
    (err["code"] == json!(modern_code::UNSUPPORTED_VERSION)).then(|| {
        format!(
            "the server no longer supports {MODERN_VERSION} (it supports {})",
            err["data"]["supported"]
        )
    })
}

#[cfg(test)]
mod tests;
