//! The messages that belong to one client's request (server→client requests, log
//! messages, notifications mcpmux does not interpret) delivered to that client alone
//! (docs/architecture.md, "Server messages and their clients").
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
//!
//! Owns the URL-mode elicitations routed to a client ([`Elicitations`]), so that the
//! server's `notifications/elicitation/complete` reaches the same client.
//!
//! Never: gives a client a message that belongs to another client's request.

use std::collections::HashMap;

use serde_json::json;

use super::effects::notification_out;
use super::Hub;
use crate::config::UnrelatedPolicy;
use crate::downstream::outbox::OutKind;
use crate::protocol::methods::{self};
use crate::protocol::{code, Message, RawId};
use crate::state::ids::{ClientId, ProxyId, UpstreamId};
use crate::state::pending::{ClientBound, Origin};
use crate::upstream::Related;

/// URL-mode elicitations routed to a client, by (upstream, `elicitationId`).
#[derive(Debug, Default)]
pub(super) struct Elicitations {
    owners: HashMap<(UpstreamId, String), ClientId>,
}

impl Elicitations {
    /// Elicitation `id` of `upstream` went to `client`.
    pub(super) fn record(&mut self, upstream: UpstreamId, id: &str, client: ClientId) {
        self.owners.insert((upstream, id.to_owned()), client);
    }

    /// The client elicitation `id` of `upstream` went to, once: it completed.
    pub(super) fn complete(&mut self, upstream: UpstreamId, id: String) -> Option<ClientId> {
        self.owners.remove(&(upstream, id))
    }

    /// The client left: nothing completes to it any more.
    pub(super) fn forget_client(&mut self, client: ClientId) {
        self.owners.retain(|_, c| *c != client);
    }
}

impl Hub {
    pub(super) fn on_other_notification(
        &mut self,
        upstream: UpstreamId,
        msg: &Message,
        related: &Related,
    ) {
        match self.owner_of(upstream, related) {
            Some((client, id, _)) => {
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
    ) -> Option<(ClientId, RawId, ProxyId)> {
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
                Origin::Client { client, id, .. } => Some((*client, id.clone(), pid)),
                _ => None,
            },
            _ => None,
        }
    }

    /// Who gets a message of `upstream` that belongs to no request, by its policy.
    pub(super) fn unrelated_receivers(&self, upstream: UpstreamId, is_log: bool) -> Vec<ClientId> {
        let policy = self.upstreams[upstream.0].unrelated;
        self.clients
            .iter()
            .filter(|(id, c)| {
                c.init.as_ref().is_some_and(|i| i.stateless.is_none())
                    && self.catalog.in_view(c.view, upstream)
                    && match policy {
                        UnrelatedPolicy::None => false,
                        UnrelatedPolicy::LogLevel => is_log && self.log_levels.get(**id).is_some(),
                        UnrelatedPolicy::All => true,
                    }
            })
            .map(|(id, _)| *id)
            .collect()
    }

    pub(super) fn deliver_unrelated(
        &mut self,
        upstream: UpstreamId,
        msg: &Message,
        clients: &[ClientId],
    ) {
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
    pub(super) fn on_upstream_request(
        &mut self,
        upstream: UpstreamId,
        mut msg: Message,
        related: &Related,
    ) {
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
        let Some((client, client_request, during)) = self.owner_of(upstream, related) else {
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
        if self.is_stateless(client) {
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
                self.elicitations.record(upstream, eid, client);
            }
        }
        let pid = self.pending.register_client_bound(ClientBound {
            upstream,
            upstream_id: id,
            client,
            // Only a request the transport tied to the client's request ends with it.
            during: matches!(related, Related::Request(_))
                .then(|| (during, client_request.clone())),
        });
        msg.set_id(&RawId::from_u64(pid.0));
        self.push(
            client,
            notification_out(msg.to_bytes(), OutKind::Request, Some(client_request)),
        );
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_elicitation_completes_once_to_its_client_and_not_after_it_left() {
        let mut e = Elicitations::default();
        e.record(UpstreamId(0), "e1", ClientId(1));
        e.record(UpstreamId(1), "e1", ClientId(2));
        e.record(UpstreamId(0), "e2", ClientId(2));
        assert_eq!(e.complete(UpstreamId(0), "e1".into()), Some(ClientId(1)));
        assert_eq!(e.complete(UpstreamId(0), "e1".into()), None, "once");
        e.forget_client(ClientId(2));
        assert_eq!(e.complete(UpstreamId(1), "e1".into()), None);
        assert_eq!(e.complete(UpstreamId(0), "e2".into()), None);
    }
}
