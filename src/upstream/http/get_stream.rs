//! The session's one GET SSE stream, for messages the server sends on its own
//! (notifications such as `resources/updated`, server→client requests).
//!
//! Exactly one is open per session at any time: it is opened after `Ready`, reopened
//! with `Last-Event-ID` when it drops (after the server's `retry:` hint when it had
//! opened, else with backoff; without the id once the server refuses it with 400, 410
//! or 422),
//! and never again once the server answers 405 (it offers none). A 404 means the
//! session is gone: reported as [`Signal::Expired`]; a 400 makes the session check
//! itself ([`Signal::Suspect`]). The task lives exactly as long as its session (the session
//! aborts it). Never interprets a message; forwards every one to the hub as
//! [`Related::Unknown`]: servers send requests and logs that belong to a client's call
//! here too (the TypeScript SDK v1's `server.request()` without a related request id), so
//! the GET stream says nothing either way, as stdio says nothing.

use std::sync::Arc;
use std::time::Duration;

use futures_util::StreamExt;
use hyper::StatusCode;
use tokio::sync::mpsc;

use super::handshake::error_chain;
use super::post::Signal;
use super::wire::{self, BodyKind, SessionCtx};
use crate::config::RestartConfig;
use crate::state::ids::UpstreamId;
use crate::upstream::{backoff, Related, UpstreamEvent, UpstreamLink};

/// Everything the GET stream task needs.
pub(super) struct GetStream {
    pub ctx: Arc<SessionCtx>,
    pub hub: UpstreamLink,
    pub upstream: UpstreamId,
    pub restart: RestartConfig,
    pub signals: mpsc::Sender<Signal>,
}

impl GetStream {
    pub async fn run(self) {
        let name = &self.ctx.endpoint.name;
        let mut last_event_id: Option<String> = None;
        // Attempts since a stream last opened.
        let mut failures: u32 = 0;
        let mut retry_hint: Option<Duration> = None;
        loop {
            // Whether this attempt opened a stream: only then is the server's `retry:`
            // the wait (a refused or failed attempt backs off), and only then do the
            // failures start over (a stream a proxy closes on a timer, with only
            // keep-alive comments on it, is no failure of the server's).
            let mut opened = false;
            match wire::send(&self.ctx.endpoint, self.ctx.get(last_event_id.as_deref())).await {
                Err(e) => {
                    tracing::debug!(upstream = %name, error = %error_chain(&e), "GET stream failed to connect");
                }
                Ok(resp) => {
                    let status = resp.status();
                    if status == StatusCode::METHOD_NOT_ALLOWED {
                        tracing::debug!(upstream = %name, "server offers no GET stream (405)");
                        return;
                    }
                    if self.ctx.is_suspect(status) {
                        // Maybe the session is gone (some servers say 400): let the
                        // session check, and keep trying meanwhile.
                        let _ = self.signals.try_send(Signal::Suspect);
                    }
                    if self.ctx.is_expired(status) {
                        let reason = format!("session expired (HTTP {})", status.as_u16());
                        let _ = self
                            .signals
                            .send(Signal::Expired {
                                reason,
                                orphan: None,
                            })
                            .await;
                        return;
                    }
                    let kind = wire::body_kind(&resp);
                    if !status.is_success() || kind != BodyKind::Sse {
                        tracing::warn!(upstream = %name, %status, ?kind, "GET stream refused");
                        // The server does not know where to resume from (its event
                        // store forgot the id): the next GET asks for none. (A 409 or
                        // 429 is about the moment, not the id: the TypeScript SDK says
                        // 409 while it still holds the old stream.)
                        let forgotten = matches!(status.as_u16(), 400 | 410 | 422);
                        if forgotten && last_event_id.take().is_some() {
                            tracing::debug!(upstream = %name, "reconnecting without Last-Event-ID");
                        }
                    } else {
                        opened = true;
                        failures = 0;
                        tracing::debug!(upstream = %name, resume = ?last_event_id, "GET stream open");
                        let mut events = wire::sse_events(resp, self.ctx.endpoint.max_message);
                        while let Some(ev) = events.next().await {
                            let ev = match ev {
                                Ok(ev) => ev,
                                Err(e) => {
                                    tracing::debug!(upstream = %name, error = %e, "GET stream broke");
                                    break;
                                }
                            };
                            if !ev.id.is_empty() {
                                last_event_id = Some(ev.id.clone());
                            }
                            if ev.retry.is_some() {
                                retry_hint = ev.retry;
                            }
                            for m in wire::parse_data(&ev.data, name) {
                                if self
                                    .hub
                                    .send(
                                        self.upstream,
                                        UpstreamEvent::Message(m, Related::Unknown),
                                    )
                                    .await
                                    .is_err()
                                {
                                    return;
                                }
                            }
                        }
                        tracing::debug!(upstream = %name, "GET stream ended; reconnecting");
                    }
                }
            }
            failures = failures.saturating_add(1);
            let delay = retry_hint
                .filter(|_| opened)
                .unwrap_or_else(|| backoff(&self.restart, failures));
            tokio::time::sleep(delay).await;
        }
    }
}
