//! Carrying out decisions: pushing to outboxes, sending upstream, arming timers (the
//! deadlines part, `deadlines.rs`), and the subscription registry's effects (the
//! registry is the holders part's, `holders.rs`). Owns the turn ([`Turn`]). Everything
//! here is non-blocking.

use std::sync::Arc;

use serde_json::json;
use tokio::time::Instant;

use super::deadlines::RequestTimer;
use super::{Hub, SubError, Timer, Waiter};
use crate::downstream::outbox::{CloseReason, OutKind, Outbound, Outbox, Pushed, Run};
use crate::protocol::methods;
use crate::protocol::{code, Message, RawId};
use crate::state::ids::{ClientId, ProxyId, SubKey, UpstreamId};
use crate::state::pending::Origin;
use crate::state::subscriptions::SubEffect;
use crate::upstream::RequestCtx;

impl Hub {
    /// Queues a message for a client without waiting. A client whose outbox refuses
    /// it is disconnected after the current event. Its writer is woken at the end of
    /// the hub's turn ([`Hub::wake_writers`]), once for everything the turn queued.
    pub(super) fn push(&mut self, client: ClientId, out: Outbound) {
        // Whatever a fan-out holds back goes first: each client's messages stay in the
        // order the hub decided them.
        self.queue_fan_out();
        let Some(c) = self.clients.get(&client) else {
            return;
        };
        self.turn.push(client, &c.outbox, out);
    }

    /// Wakes every writer the turn queued something for (after queueing what a
    /// fan-out still holds back). Runs at the end of each turn of the hub's loop,
    /// before it waits again.
    pub(super) fn wake_writers(&mut self) {
        self.queue_fan_out();
        for outbox in self.turn.wake_due.drain(..) {
            outbox.wake();
        }
        self.turn.pushes = 0;
    }

    /// Sends a request upstream under `pid` with a deadline. On failure to queue, the
    /// request fails at once.
    pub(super) fn dispatch_upstream(&mut self, upstream: UpstreamId, pid: ProxyId, msg: &Message) {
        // With tracing on, the request carries its CLIENT span's context.
        let traced = self.trace_upstream(upstream, pid, msg);
        let msg = traced.as_ref().unwrap_or(msg);
        let sent = match self.request_ctx(upstream, pid, msg) {
            Some(ctx) => self.send_request_with(upstream, msg, ctx),
            None => self.send_to_upstream(upstream, msg),
        };
        if sent {
            let method = super::metrics::method_label(msg.method().unwrap_or_default());
            self.count_request(upstream, method);
            self.deadlines.arm(
                pid,
                method,
                Instant::now(),
                self.settings.request_timeout,
                self.settings.request_max_total,
            );
        } else {
            let why = format!(
                "upstream {} is not accepting requests",
                self.upstreams[upstream.0].name
            );
            self.fail_request(pid, code::UPSTREAM_UNAVAILABLE, &why);
        }
    }

    /// Queues a client's request for a 2026-07-28 upstream with its envelope facts.
    fn send_request_with(&mut self, upstream: UpstreamId, msg: &Message, ctx: RequestCtx) -> bool {
        let Some(slot) = self.upstreams.get(upstream.0) else {
            return false;
        };
        let ok = slot.handle.try_send_request(msg.to_bytes(), ctx);
        if ok {
            if let Some(m) = msg.method() {
                self.count_sent(m);
            }
        } else {
            tracing::warn!(upstream = %slot.name, "upstream queue full or closed; message not sent");
        }
        ok
    }

    /// Writes one message to an upstream's queue. `false` if it could not be queued.
    pub(super) fn send_to_upstream(&mut self, upstream: UpstreamId, msg: &Message) -> bool {
        let Some(slot) = self.upstreams.get(upstream.0) else {
            return false;
        };
        let ok = slot.handle.try_send(msg.to_bytes());
        if ok {
            if let (Some(m), crate::protocol::Kind::Request) = (msg.method(), msg.kind()) {
                self.count_sent(m);
            }
        } else {
            tracing::warn!(upstream = %slot.name, "upstream queue full or closed; message not sent");
        }
        ok
    }

    /// Counts an upstream request by method label: a method outside the known set counts
    /// as `other`, so client-chosen method names cannot grow the map.
    fn count_sent(&mut self, method: &str) {
        *self
            .counters
            .sent
            .entry(super::metrics::method_label(method))
            .or_default() += 1;
    }

    pub(super) fn send_cancelled(&mut self, upstream: UpstreamId, pid: ProxyId, reason: &str) {
        if self.upstream_ready(upstream).is_none() {
            return;
        }
        let n = Message::notification(
            methods::CANCELLED,
            Some(&json!({"requestId": pid.0, "reason": reason})),
        );
        self.send_to_upstream(upstream, &n);
    }

    /// Request `pid` ended, however (answered, failed, timed out, cancelled, its client
    /// gone): its timer, trace and MRTR round count go, and so do the server→client
    /// requests sent during it.
    pub(super) fn drop_request_timer(&mut self, pid: ProxyId) {
        self.trace_upstream_done(pid, None);
        self.deadlines.disarm(pid);
        self.mrtr_finished(pid);
        self.end_requests_during(pid);
    }

    /// A client request ended while requests the server sent during it (sampling,
    /// elicitation) are still open: nobody is waiting for them any more, so the client
    /// hears they are cancelled, and the server gets an error for any it still awaits
    /// (docs/architecture.md, "Server-to-client requests").
    fn end_requests_during(&mut self, pid: ProxyId) {
        let ended = self
            .pending
            .drop_client_bound(|b| b.during.as_ref().is_some_and(|(p, _)| *p == pid));
        for (client_pid, bound) in ended {
            let related = bound.during.map(|(_, id)| id);
            let n = Message::notification(
                methods::CANCELLED,
                Some(
                    &json!({"requestId": client_pid.0, "reason": "the request it belongs to ended"}),
                ),
            );
            // On the client request's own stream, where the server request went (and
            // ahead of its answer: this runs before the answer is queued).
            self.push(
                bound.client,
                notification_out(n.to_bytes(), OutKind::Notification, related),
            );
            // A session that is gone waits for nothing (and its queue may feed the
            // next session, where the id could be another request's).
            if self.upstream_ready(bound.upstream).is_some() {
                let err = Message::error_response(
                    Some(&bound.upstream_id),
                    code::INTERNAL_ERROR,
                    "the client request this request belongs to ended before the client answered",
                    None,
                );
                self.send_to_upstream(bound.upstream, &err);
            }
        }
    }

    /// Progress on a request: its timeout starts again, but never runs past the
    /// request's total limit (`limits.request_max_total_ms`).
    pub(super) fn extend_request_timer(&mut self, pid: ProxyId) {
        self.deadlines
            .extend(pid, Instant::now(), self.settings.request_timeout);
    }

    /// Completes a pending request with an error of the proxy's own.
    pub(super) fn fail_request(&mut self, pid: ProxyId, code: i64, message: &str) {
        self.trace_upstream_done(pid, Some(code));
        self.drop_request_timer(pid);
        let Some(entry) = self.pending.complete(pid) else {
            return;
        };
        match entry.origin {
            Origin::Client { client, id, .. } => self.reply_error(client, &id, code, message),
            Origin::Subscribe(key) => {
                self.subscribe_settled(key, Err(json!({"code": code, "message": message})));
            }
            Origin::Read { key, generation } => {
                let err = json!({"code": code, "message": message}).to_string();
                self.finish_read(&key, generation, Err(&err));
            }
            Origin::ListPart {
                agg,
                kind,
                cursor,
                epoch,
            } => {
                let err = json!({"code": code, "message": message});
                self.list_part_done(entry.upstream, agg, (kind, epoch), cursor, Err(err));
            }
            Origin::CatalogFetch { .. } => self.catalog_settled(entry.upstream),
            Origin::Held { .. } => self.drop_held_for(pid),
            Origin::Unsubscribe(_) | Origin::Internal(_) => {}
        }
    }

    /// Request `pid` ran out of time (`timer`: its deadline timer, already taken out).
    pub(super) fn request_timed_out(&mut self, pid: ProxyId, timer: Option<RequestTimer>) {
        let limit_reached = timer
            .as_ref()
            .is_some_and(|t| t.limit_reached(Instant::now()));
        let Some(entry) = self.pending.get(pid) else {
            return;
        };
        let upstream = entry.upstream;
        let subscribing = match &entry.origin {
            Origin::Subscribe(key) => Some(key.clone()),
            _ => None,
        };
        let name = &self.upstreams[upstream.0].name;
        let why = if limit_reached {
            let ms = self.settings.request_max_total.as_millis();
            format!("upstream {name} did not answer within {ms} ms in all, progress notwithstanding (limits.request_max_total_ms)")
        } else {
            let ms = self.settings.request_timeout.as_millis();
            format!("upstream {name} did not answer within {ms} ms (limits.request_timeout_ms)")
        };
        if let Some(t) = timer {
            self.count_answer(upstream, t.method, t.sent.elapsed(), true);
        }
        self.fail_request(pid, code::REQUEST_TIMEOUT, &why);
        self.send_cancelled(upstream, pid, "timed out in mcpmux");
        if let Some(key) = subscribing {
            self.undo_late_subscribe(key);
        }
    }

    /// A first `resources/subscribe` of `key` timed out, and its waiters were told it
    /// failed. The server may still apply it (a cancellation is only advice), and its
    /// late answer would find nothing waiting: nothing would ever unsubscribe it. So,
    /// unless the key is wanted again already, it is unsubscribed now; on a server that
    /// never applied it, that unsubscribe is a harmless no-op. (A timed-out
    /// *re*-subscribe is retried instead: its holders still want it.)
    fn undo_late_subscribe(&mut self, key: SubKey) {
        if self.holders.registry.is_known_at(&key) || self.fleet_role(&key).is_some() {
            return;
        }
        self.reads.cache.invalidate(&key);
        self.send_sub_request(key, false);
    }

    /// Carries out the registry's effects, including those that follow from a send
    /// failing at once.
    pub(super) fn apply_sub_effects(&mut self, effects: Vec<SubEffect<Waiter, SubError>>) {
        for e in effects {
            match e {
                SubEffect::UpstreamSubscribe(key) if self.fleet_shared(&key) => {
                    if self.fleet_subscribes_itself(&key)
                        && self.holders.registry.is_resubscribing(&key)
                    {
                        // This instance holds the key's upstream subscription (for the
                        // fleet, or for itself): its upstream session restarted, and
                        // taking it again is this instance's to do.
                        self.send_sub_request(key, true);
                    } else {
                        self.fleet_want(key);
                    }
                }
                SubEffect::UpstreamSubscribe(key) => self.send_sub_request(key, true),
                SubEffect::UpstreamUnsubscribe(key) => {
                    // No longer watched: nothing would tell us of a change.
                    self.reads.cache.invalidate(&key);
                    if self.fleet_role(&key).is_some() {
                        self.fleet_release(key);
                    } else {
                        self.send_sub_request(key, false);
                    }
                }
                SubEffect::Forgotten(key) => self.fleet_forget(key),
                SubEffect::Reply {
                    waiter: (client, id),
                    result,
                } if self.listens.contains(client) => {
                    // A listen's subscribe: the waiter id is the URI's index.
                    let index = id.as_u64().unwrap_or(u64::MAX) as usize;
                    self.listen_settled(client, index, result.is_ok());
                }
                SubEffect::Reply {
                    waiter: (client, id),
                    result,
                } => match result {
                    Ok(()) => self.reply(client, &id, json!({})),
                    Err(err) => {
                        let m = error_with_object(&id, &err);
                        self.push_response(client, &id, m);
                    }
                },
                SubEffect::SetLingerTimer { key, at } => {
                    self.deadlines
                        .set(Timer::Linger(key), Instant::from_std(at));
                }
            }
        }
    }

    pub(super) fn send_sub_request(&mut self, key: SubKey, subscribe: bool) {
        let upstream = key.upstream;
        let (method, origin) = if subscribe {
            (methods::SUBSCRIBE, Origin::Subscribe(key.clone()))
        } else {
            (methods::UNSUBSCRIBE, Origin::Unsubscribe(key.clone()))
        };
        if self.upstream_ready(upstream).is_none() {
            if subscribe {
                let err = json!({"code": code::UPSTREAM_UNAVAILABLE,
                    "message": self.unavailable(upstream)});
                let effects = self.holders.registry.upstream_result(
                    &key,
                    Err(err),
                    Instant::now().into_std(),
                );
                self.apply_sub_effects(effects);
            }
            return; // An unsubscribe on a dead session has nothing to undo.
        }
        let pid = self
            .pending
            .register(upstream, origin)
            .expect("internal ids are unique");
        let msg = Message::request(
            &RawId::from_u64(pid.0),
            method,
            Some(&json!({"uri": &*key.uri})),
        );
        if subscribe {
            self.counters.upstream_subscribes += 1;
        }
        self.dispatch_upstream(upstream, pid, &msg);
    }

    /// Pushes one serialized notification to many clients (serialized once).
    pub(super) fn fan_out(&mut self, clients: &[ClientId], out: &Outbound) {
        self.counters.fanout_deliveries += clients.len() as u64;
        for c in clients {
            self.push(*c, out.clone());
        }
    }
}

/// An error response whose `error` member is the given JSON-RPC error object.
pub(super) fn error_with_object(id: &RawId, err: &serde_json::Value) -> Message {
    let code = err["code"].as_i64().unwrap_or(code::INTERNAL_ERROR);
    let message = err["message"].as_str().unwrap_or("upstream error");
    Message::error_response(Some(id), code, message, err.get("data").cloned())
}

/// Builds the outbound form of a notification.
pub(super) fn notification_out(
    bytes: bytes::Bytes,
    kind: OutKind,
    related: Option<RawId>,
) -> Outbound {
    Outbound::new(bytes, kind, related)
}

/// What the current turn of the hub's loop queued to clients: the writers to wake at
/// its end and the clients whose outbox refused a message. Kept apart from the client
/// table so a fan-out can push while it reads the table.
#[derive(Debug, Default)]
pub(super) struct Turn {
    pub(super) wake_due: Vec<Arc<Outbox>>,
    pub(super) refused: Vec<(ClientId, CloseReason)>,
    /// The turn's work so far, against [`super::TURN_PUSHES`]: one per message queued
    /// to one client; a held fan-out one per holder plus one per copy of each update.
    pub(super) pushes: usize,
}

impl Turn {
    /// Queues `outs` (emptied) to one client under one lock of its outbox.
    pub(super) fn push_all(
        &mut self,
        client: ClientId,
        outbox: &Arc<Outbox>,
        outs: &mut Vec<Outbound>,
    ) {
        let (closed, wake) = outbox.push_all_deferred(outs);
        if wake {
            self.wake_due.push(outbox.clone());
        }
        if let Some(reason) = closed {
            self.refused.push((client, reason));
        }
    }

    /// Queues a run shared with other clients to one client.
    pub(super) fn push_run(&mut self, client: ClientId, outbox: &Arc<Outbox>, run: Run) {
        let (closed, wake) = outbox.push_run_deferred(run);
        if wake {
            self.wake_due.push(outbox.clone());
        }
        if let Some(reason) = closed {
            self.refused.push((client, reason));
        }
    }

    pub(super) fn push(&mut self, client: ClientId, outbox: &Arc<Outbox>, out: Outbound) {
        let (pushed, wake) = outbox.push_deferred(out);
        if wake {
            self.wake_due.push(outbox.clone());
        }
        self.pushes += 1;
        if let Pushed::Closed(reason) = pushed {
            self.refused.push((client, reason));
        }
    }
}
