//! One POST per message the hub sends upstream, each in its own task so one slow call
//! never blocks another (the session bounds how many run at once).
//!
//! Forwards every message of the answer (JSON, a JSON batch, or SSE events as they
//! arrive) to the hub. When the HTTP exchange fails for a *request*, answers it with a
//! synthesized JSON-RPC error so the client is never left hanging; failures of
//! notifications and responses are only logged. A 404 (or 400) on a request carrying a
//! session id is reported to the session as [`Signal::Expired`] instead, with the
//! synthesized error attached so the actor can deliver it after `Down`.
//! Never interprets a message beyond reading its id and kind.

use std::sync::Arc;

use bytes::Bytes;
use futures_util::StreamExt;
use tokio::sync::{mpsc, OwnedSemaphorePermit};

use super::handshake::error_chain;
use super::wire::{self, BodyKind, SessionCtx};
use crate::hub::HubHandle;
use crate::protocol::{Kind, Message, RawId};
use crate::state::ids::UpstreamId;
use crate::upstream::UpstreamEvent;

/// What a session's tasks tell the session loop.
#[derive(Debug)]
pub(super) enum Signal {
    /// The server answered a request of this session with 404 (or 400): the session is
    /// gone. `orphan` answers the request that found out, if it was a request.
    Expired {
        reason: String,
        orphan: Option<Message>,
    },
}

/// Everything one POST task needs.
pub(super) struct Post {
    pub ctx: Arc<SessionCtx>,
    pub hub: HubHandle,
    pub upstream: UpstreamId,
    pub signals: mpsc::Sender<Signal>,
}

impl Post {
    /// POSTs `bytes` and forwards the answer. Holds `_permit` until done.
    pub async fn run(self, bytes: Bytes, _permit: OwnedSemaphorePermit) {
        // Only the id and kind matter here: a request must get an answer.
        let (request_id, method) = match Message::parse(&bytes) {
            Ok(m) if m.kind() == Kind::Request => (m.id().cloned(), m.method().map(str::to_owned)),
            Ok(m) => (None, m.method().map(str::to_owned)),
            Err(_) => (None, None),
        };
        let name = &self.ctx.endpoint.name;
        let resp = match self.ctx.post(bytes).send().await {
            Ok(r) => r,
            Err(e) => {
                let what = format!("HTTP request failed: {}", error_chain(&e));
                return self
                    .fail(request_id.as_ref(), method.as_deref(), &what)
                    .await;
            }
        };
        let status = resp.status();
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
                self.forward(orphan).await;
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
                    if !self.forward(m).await {
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
    /// (the server SHOULD end the stream there; we stop reading either way).
    async fn stream(
        &self,
        resp: reqwest::Response,
        request_id: Option<RawId>,
        method: Option<String>,
    ) {
        let name = &self.ctx.endpoint.name;
        let mut events = wire::sse_events(resp, self.ctx.endpoint.max_message);
        let mut answered = false;
        let mut failure = None;
        while let Some(ev) = events.next().await {
            let ev = match ev {
                Ok(ev) => ev,
                Err(e) => {
                    failure = Some(e);
                    break;
                }
            };
            for m in wire::parse_data(&ev.data, name) {
                answered |= is_answer(&m, request_id.as_ref());
                if !self.forward(m).await {
                    return;
                }
            }
            if answered {
                return;
            }
        }
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

    /// Answers a failed request with a synthesized error; logs other failures.
    async fn fail(&self, request_id: Option<&RawId>, method: Option<&str>, what: &str) {
        let name = &self.ctx.endpoint.name;
        match request_id {
            Some(id) => {
                tracing::warn!(upstream = %name, ?method, error = %what, "upstream request failed; answering it with an error");
                self.forward(self.ctx.synthesized_error(id, what)).await;
            }
            None => {
                tracing::warn!(upstream = %name, ?method, error = %what, "upstream message not delivered");
            }
        }
    }

    /// `false` when the hub has stopped.
    async fn forward(&self, m: Message) -> bool {
        self.hub
            .upstream_event(self.upstream, UpstreamEvent::Message(m))
            .await
            .is_ok()
    }
}

/// Whether `m` answers the request `request_id` (never for a notification's POST).
fn is_answer(m: &Message, request_id: Option<&RawId>) -> bool {
    request_id.is_some() && m.kind() == Kind::Response && m.id() == request_id
}
