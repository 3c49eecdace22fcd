//! One POST per message the hub sends upstream, each in its own task so one slow call
//! never blocks another (the session bounds how many run at once).
//!
//! Forwards every message of the answer (JSON, a JSON batch, or SSE events as they
//! arrive) to the hub, tagged with the request whose stream carried it
//! ([`Related::Request`]): that is how a server→client request, a progress or a log
//! message finds the one client it belongs to. When the HTTP exchange fails for a
//! *request*, answers it with a synthesized JSON-RPC error so the client is never left
//! hanging; failures of notifications and responses are only logged.
//!
//! Status rules:
//! - 404 on a request carrying a session id: the session is gone (the spec's only
//!   signal for that), reported as [`Signal::Expired`] with the synthesized error
//!   attached so the actor can deliver it after `Down`.
//! - 400 with a session id: about *this* request (bad params, say) unless proven
//!   otherwise. The request gets the server's error; the session is asked to check
//!   itself with a ping ([`Signal::Suspect`]), because some servers (server-everything)
//!   answer a forgotten session with 400 instead of 404.
//!
//! Resumption (SEP-1699, 2025-11-25): when a POST's SSE stream ends before the answer
//! after the server gave an event id, the stream is resumed with `GET` +
//! `Last-Event-ID` after the server's `retry:` delay (default [`RESUME_DELAY`]), as often
//! as each resumption delivers something new, at most [`MAX_IDLE_RESUMES`] times in a row
//! without a new event.
//!
//! Never interprets a message beyond reading its id and kind.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use futures_util::StreamExt;
use tokio::sync::{mpsc, OwnedSemaphorePermit};

use super::handshake::error_chain;
use super::wire::{self, BodyKind, SessionCtx};
use crate::protocol::{methods, Kind, Message, RawId};
use crate::state::ids::UpstreamId;
use crate::upstream::{Related, UpstreamEvent, UpstreamLink};

/// Wait before resuming a POST stream the server closed early without a `retry:` hint.
pub const RESUME_DELAY: Duration = Duration::from_millis(1000);

/// Resumptions in a row that deliver no new event before the request is failed.
pub const MAX_IDLE_RESUMES: u32 = 5;

/// What a session's tasks tell the session loop.
#[derive(Debug)]
pub(super) enum Signal {
    /// The server answered a request of this session with 404: the session is gone.
    /// `orphan` answers the request that found out, if it was a request.
    Expired {
        reason: String,
        orphan: Option<Message>,
    },
    /// The server answered 400 on this session: maybe about one request, maybe about
    /// the session. The session checks with a ping.
    Suspect,
}

/// Everything one POST task needs.
pub(super) struct Post {
    pub ctx: Arc<SessionCtx>,
    pub hub: UpstreamLink,
    pub upstream: UpstreamId,
    pub signals: mpsc::Sender<Signal>,
}

/// What the session reads of a message before it POSTs it.
#[derive(Debug, Default)]
pub(super) struct Head {
    /// The id, for a request (which must get an answer).
    pub request_id: Option<RawId>,
    pub method: Option<String>,
    /// For `notifications/cancelled`: the request it cancels.
    pub cancels: Option<RawId>,
    /// For `resources/subscribe` and `resources/unsubscribe`: the URI.
    pub subscription_uri: Option<String>,
}

impl Head {
    /// Reads the message once (only its id, kind, and the params of the two kinds of
    /// message the session acts on).
    pub(super) fn of(bytes: &[u8]) -> Head {
        let Ok(m) = Message::parse(bytes) else {
            return Head::default();
        };
        let method = m.method().map(str::to_owned);
        match (m.kind(), m.method()) {
            (Kind::Request, Some(methods::SUBSCRIBE | methods::UNSUBSCRIBE)) => Head {
                request_id: m.id().cloned(),
                subscription_uri: methods::parse_params::<methods::UriParams>(m.params())
                    .map(|p| p.uri),
                method,
                cancels: None,
            },
            (Kind::Request, _) => Head {
                request_id: m.id().cloned(),
                method,
                ..Head::default()
            },
            (_, Some(methods::CANCELLED)) => Head {
                cancels: methods::parse_params::<methods::CancelledParams>(m.params())
                    .and_then(|p| p.request_id)
                    .and_then(|r| RawId::parse(r.get())),
                method,
                ..Head::default()
            },
            _ => Head {
                method,
                ..Head::default()
            },
        }
    }
}

impl Post {
    /// POSTs `bytes` (read as `head`) and forwards the answer. Holds `_permit` until
    /// done.
    pub async fn run(self, bytes: Bytes, head: Head, _permit: OwnedSemaphorePermit) {
        let Head {
            request_id, method, ..
        } = head;
        let name = &self.ctx.endpoint.name;
        let repeatable =
            request_id.is_some() && method.as_deref().is_some_and(methods::safe_to_repeat);
        let req = self.ctx.post(bytes).repeatable(repeatable);
        let resp = match wire::send(&self.ctx.endpoint, req).await {
            Ok(r) => r,
            Err(e) => {
                let what = format!("HTTP request failed: {}", error_chain(&e));
                return self
                    .fail(request_id.as_ref(), method.as_deref(), &what)
                    .await;
            }
        };
        let status = resp.status();
        if self.ctx.is_suspect(status) {
            // Only 404 means the session is gone: fail this request with what the
            // server said, and let the session check itself.
            let _ = self.signals.try_send(Signal::Suspect);
            let what = error_body(resp, self.ctx.endpoint.max_message).await;
            return self
                .fail(request_id.as_ref(), method.as_deref(), &what)
                .await;
        }
        if self.ctx.is_expired(status) {
            let reason = format!("session expired (HTTP {})", status.as_u16());
            let orphan = request_id
                .as_ref()
                .map(|id| self.ctx.synthesized_error(id, &reason));
            tracing::info!(upstream = %name, ?method, %status, "upstream session expired");
            if let Err(mpsc::error::SendError(Signal::Expired {
                orphan: Some(orphan),
                ..
            })) = self.signals.send(Signal::Expired { reason, orphan }).await
            {
                // The session already ended; the hub failed the request on `Down`,
                // so this only finds nothing there.
                self.forward(orphan, Related::Nothing).await;
            }
            return;
        }
        if !status.is_success() {
            let what = format!("HTTP {status}");
            return self
                .fail(request_id.as_ref(), method.as_deref(), &what)
                .await;
        }
        match wire::body_kind(&resp) {
            BodyKind::Empty => {
                if request_id.is_some() {
                    let what = format!("HTTP {status} without a response");
                    self.fail(request_id.as_ref(), method.as_deref(), &what)
                        .await;
                }
            }
            BodyKind::Other(ct) => {
                let what = format!("HTTP {status} with content type `{ct}`");
                self.fail(request_id.as_ref(), method.as_deref(), &what)
                    .await;
            }
            BodyKind::Json => {
                let msgs = match wire::read_json(resp, self.ctx.endpoint.max_message, name).await {
                    Ok(msgs) => msgs,
                    Err(e) => return self.fail(request_id.as_ref(), method.as_deref(), &e).await,
                };
                let mut answered = false;
                for m in msgs {
                    answered |= is_answer(&m, request_id.as_ref());
                    if !self.forward(m, related(request_id.as_ref())).await {
                        return;
                    }
                }
                if request_id.is_some() && !answered {
                    let what = format!("HTTP {status} JSON body without the response");
                    self.fail(request_id.as_ref(), method.as_deref(), &what)
                        .await;
                }
            }
            BodyKind::Sse => self.stream(resp, request_id, method).await,
        }
    }

    /// Forwards each SSE event as it arrives, until the response to `request_id`
    /// (the server SHOULD end the stream there; we stop reading either way). A stream
    /// that ends early is resumed with `GET` + `Last-Event-ID` when the server gave an
    /// event id (SEP-1699).
    async fn stream(
        &self,
        resp: super::client::Response,
        request_id: Option<RawId>,
        method: Option<String>,
    ) {
        let name = &self.ctx.endpoint.name;
        let tag = related(request_id.as_ref());
        let mut events = wire::sse_events(resp, self.ctx.endpoint.max_message);
        let mut last_event_id: Option<String> = None;
        let mut retry: Option<Duration> = None;
        let mut idle_resumes = 0;
        // Why the last resumption could not be made, if it could not.
        let mut unresumed: Option<String> = None;
        let failure = loop {
            let mut failure = unresumed.take();
            let mut fresh = false;
            while let Some(ev) = events.next().await {
                let ev = match ev {
                    Ok(ev) => ev,
                    Err(e) => {
                        failure = Some(e);
                        break;
                    }
                };
                fresh = true;
                if !ev.id.is_empty() {
                    last_event_id = Some(ev.id.clone());
                }
                if ev.retry.is_some() {
                    retry = ev.retry;
                }
                let mut answered = false;
                for m in wire::parse_data(&ev.data, name) {
                    answered |= is_answer(&m, request_id.as_ref());
                    if !self.forward(m, tag.clone()).await {
                        return;
                    }
                }
                if answered {
                    return;
                }
            }
            idle_resumes = if fresh { 0 } else { idle_resumes + 1 };
            let Some(last) = last_event_id.as_deref().filter(|_| request_id.is_some()) else {
                break failure;
            };
            if idle_resumes >= MAX_IDLE_RESUMES {
                let last_error = failure.map_or(String::new(), |e| format!(" (last: {e})"));
                break Some(format!(
                    "{idle_resumes} resumptions in a row brought nothing new{last_error}"
                ));
            }
            tokio::time::sleep(retry.unwrap_or(RESUME_DELAY)).await;
            tracing::debug!(upstream = %name, ?method, last_event_id = last, "resuming a POST stream the server closed early");
            // A resumption that fails (the server is restarting, or still holds the
            // old connection: the TypeScript SDK answers 409 until it notices) counts
            // as one that brought nothing; the answer may still be replayed later.
            events = match self.resume(last).await {
                Ok(next) => next,
                Err(e) => {
                    unresumed = Some(e);
                    Box::pin(futures_util::stream::empty())
                }
            };
        };
        if request_id.is_some() {
            let what = match failure {
                Some(e) => format!("response stream failed before the answer: {e}"),
                None => "response stream ended before the answer".to_owned(),
            };
            self.fail(request_id.as_ref(), method.as_deref(), &what)
                .await;
        } else if let Some(e) = failure {
            tracing::debug!(upstream = %name, ?method, error = %e, "upstream stream failed");
        }
    }

    /// Reopens a POST's stream after `last_event_id` (SEP-1699: always with GET).
    async fn resume(&self, last_event_id: &str) -> Result<wire::Events, String> {
        let resp = wire::send(&self.ctx.endpoint, self.ctx.get(Some(last_event_id)))
            .await
            .map_err(|e| format!("resuming the stream failed: {}", error_chain(&e)))?;
        let status = resp.status();
        if self.ctx.is_expired(status) {
            let _ = self.signals.try_send(Signal::Suspect);
        }
        match wire::body_kind(&resp) {
            BodyKind::Sse if status.is_success() => {
                Ok(wire::sse_events(resp, self.ctx.endpoint.max_message))
            }
            kind => Err(format!(
                "resuming the stream got HTTP {status} ({kind:?}) instead of an event stream"
            )),
        }
    }

    /// Answers a failed request with a synthesized error; logs other failures.
    async fn fail(&self, request_id: Option<&RawId>, method: Option<&str>, what: &str) {
        let name = &self.ctx.endpoint.name;
        match request_id {
            Some(id) => {
                tracing::warn!(upstream = %name, ?method, error = %what, "upstream request failed; answering it with an error");
                self.forward(self.ctx.synthesized_error(id, what), Related::Nothing)
                    .await;
            }
            None => {
                tracing::warn!(upstream = %name, ?method, error = %what, "upstream message not delivered");
            }
        }
    }

    /// `false` when the hub has stopped.
    async fn forward(&self, m: Message, related: Related) -> bool {
        self.hub
            .send(self.upstream, UpstreamEvent::Message(m, related))
            .await
            .is_ok()
    }
}

/// What the messages on the answer to `request_id` belong to.
fn related(request_id: Option<&RawId>) -> Related {
    request_id.map_or(Related::Nothing, |id| Related::Request(id.clone()))
}

/// The error a 400 answer carries: the JSON-RPC error's message when the body is one
/// (its `id` is usually null, so it is read as plain JSON), else the status. Bounded
/// like every body.
async fn error_body(resp: super::client::Response, max: usize) -> String {
    let status = resp.status();
    let detail = wire::read_bounded(resp, max)
        .await
        .ok()
        .and_then(|b| serde_json::from_slice::<serde_json::Value>(&b).ok())
        .and_then(|v| v["error"]["message"].as_str().map(str::to_owned));
    match detail {
        Some(d) => format!("HTTP {status}: {d}"),
        None => format!("HTTP {status}"),
    }
}

/// Whether `m` answers the request `request_id` (never for a notification's POST).
fn is_answer(m: &Message, request_id: Option<&RawId>) -> bool {
    request_id.is_some() && m.kind() == Kind::Response && m.id() == request_id
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_head_reads_ids_cancellations_and_subscription_uris() {
        let sub =
            br#"{"jsonrpc":"2.0","id":1,"method":"resources/subscribe","params":{"uri":"a://x"}}"#;
        let h = Head::of(sub);
        assert_eq!(h.subscription_uri.as_deref(), Some("a://x"));
        assert_eq!(h.request_id, RawId::parse("1"));
        let unsub = br#"{"jsonrpc":"2.0","id":2,"method":"resources/unsubscribe","params":{"uri":"a://x"}}"#;
        assert_eq!(Head::of(unsub).subscription_uri.as_deref(), Some("a://x"));
        let call =
            br#"{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"subscribe\""}}"#;
        let h = Head::of(call);
        assert_eq!(h.subscription_uri, None);
        assert_eq!(h.method.as_deref(), Some("tools/call"));
        let cancel =
            br#"{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":3}}"#;
        let h = Head::of(cancel);
        assert_eq!((h.request_id, h.cancels), (None, RawId::parse("3")));
        assert_eq!(Head::of(b"not json").method, None);
    }
}
