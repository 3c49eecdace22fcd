//! In-process tests of the Streamable HTTP upstream actor against a scripted fake
//! server (`fake`) on `127.0.0.1:0`, driven only through the actor contract: commands
//! on its channel, events out of a channel-backed `UpstreamLink`. No
//! sleeps: everything is awaited on channels, with a generous timeout so a bug fails
//! instead of hanging.
//!
//! `flows` covers the happy paths and per-request failures, `lifecycle` the session:
//! expiry, restart, marking down and shutdown.

mod fake;
mod flows;
mod lifecycle;

use std::collections::BTreeMap;
use std::time::Duration;

use bytes::Bytes;
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use super::HttpUpstream;
use crate::config::{RestartConfig, ServerConfig, UpstreamProtocol};
use crate::protocol::Message;
use crate::state::ids::UpstreamId;
use crate::upstream::{InitInfo, UpstreamCmd, UpstreamEvent, UpstreamLink, QUEUE_CAPACITY};
use fake::{Fake, Script, Seen};

/// How long any one expected event may take before the test fails.
const WAIT: Duration = Duration::from_secs(10);

/// The configured extra header every request must carry.
const CONFIGURED: (&str, &str) = ("X-Api-Key", "secret-1");

struct Harness {
    fake: Fake,
    seen: mpsc::UnboundedReceiver<Seen>,
    hub: mpsc::Receiver<(UpstreamId, UpstreamEvent)>,
    cmds: mpsc::Sender<UpstreamCmd>,
    shutdown: CancellationToken,
    task: JoinHandle<()>,
}

fn restart() -> RestartConfig {
    RestartConfig {
        initial_backoff_ms: 1,
        max_backoff_ms: 5,
        max_failures: 8,
        init_timeout_ms: 5_000,
    }
}

impl Harness {
    async fn start(script: Script) -> Harness {
        Self::start_with(script, restart()).await
    }

    async fn start_with(script: Script, restart: RestartConfig) -> Harness {
        let (fake, seen) = Fake::start(script).await;
        Self::start_at(fake, seen, restart)
    }

    /// With `protocol = "auto"` (the default): the dual-era probe comes first.
    async fn start_auto(script: Script) -> Harness {
        let (fake, seen) = Fake::start(script).await;
        Self::start_protocol(fake, seen, restart(), UpstreamProtocol::Auto)
    }

    fn start_at(
        fake: Fake,
        seen: mpsc::UnboundedReceiver<Seen>,
        restart: RestartConfig,
    ) -> Harness {
        Self::start_protocol(fake, seen, restart, UpstreamProtocol::Legacy)
    }

    fn start_protocol(
        fake: Fake,
        seen: mpsc::UnboundedReceiver<Seen>,
        restart: RestartConfig,
        protocol: UpstreamProtocol,
    ) -> Harness {
        Self::start_full(fake, seen, restart, protocol, None)
    }

    /// A legacy-era session that logs in through `auth`.
    fn start_authed(
        fake: Fake,
        seen: mpsc::UnboundedReceiver<Seen>,
        auth: std::sync::Arc<crate::oauth::UpstreamAuth>,
    ) -> Harness {
        Self::start_full(fake, seen, restart(), UpstreamProtocol::Legacy, Some(auth))
    }

    fn start_full(
        fake: Fake,
        seen: mpsc::UnboundedReceiver<Seen>,
        restart: RestartConfig,
        protocol: UpstreamProtocol,
        auth: Option<std::sync::Arc<crate::oauth::UpstreamAuth>>,
    ) -> Harness {
        let (hub_tx, hub) = mpsc::channel(64);
        let (cmds, rx) = mpsc::channel(QUEUE_CAPACITY);
        let shutdown = CancellationToken::new();
        let config = ServerConfig {
            name: "remote".into(),
            url: Some(fake.url.clone()),
            headers: BTreeMap::from([(CONFIGURED.0.to_owned(), CONFIGURED.1.to_owned())]),
            protocol,
            ..ServerConfig::default()
        };
        let actor = HttpUpstream {
            id: UpstreamId(0),
            auth,
            config,
            restart,
            max_message: 1 << 20,
            hub: UpstreamLink::new(hub_tx),
            shutdown: shutdown.clone(),
        };
        let task = tokio::spawn(actor.run(rx));
        Harness {
            fake,
            seen,
            hub,
            cmds,
            shutdown,
            task,
        }
    }

    async fn event(&mut self) -> UpstreamEvent {
        let ev = tokio::time::timeout(WAIT, self.hub.recv())
            .await
            .expect("timed out waiting for an upstream event")
            .expect("the actor's hub handle was dropped");
        let (upstream, event) = ev;
        assert_eq!(upstream, UpstreamId(0));
        event
    }

    async fn ready(&mut self) -> InitInfo {
        match self.event().await {
            UpstreamEvent::Ready(info) => info,
            other => panic!("expected Ready, got {other:?}"),
        }
    }

    async fn message(&mut self) -> Message {
        match self.event().await {
            UpstreamEvent::Message(m, _) => m,
            other => panic!("expected a message, got {other:?}"),
        }
    }

    async fn down(&mut self) -> (String, bool) {
        match self.event().await {
            UpstreamEvent::Down { reason, retrying } => (reason, retrying),
            other => panic!("expected Down, got {other:?}"),
        }
    }

    /// The next request the fake saw that matches `want`; earlier ones are returned
    /// too so callers can assert on what came before.
    async fn seen_until(&mut self, want: impl Fn(&Seen) -> bool) -> Vec<Seen> {
        let mut out = Vec::new();
        loop {
            let s = tokio::time::timeout(WAIT, self.seen.recv())
                .await
                .expect("timed out waiting for a request at the fake server")
                .expect("the fake server stopped");
            let hit = want(&s);
            out.push(s);
            if hit {
                return out;
            }
        }
    }

    /// Waits for the fake to see a GET stream request.
    async fn get_opened(&mut self) -> Seen {
        self.seen_until(|s| s.method == axum::http::Method::GET)
            .await
            .pop()
            .unwrap()
    }

    fn send(&self, json: &str) {
        self.cmds
            .try_send(UpstreamCmd::Send(Bytes::from(json.to_owned())))
            .expect("queue has room");
    }
}

/// The `result.echo` of an echo answer.
fn echo_of(m: &Message) -> serde_json::Value {
    let result: serde_json::Value =
        serde_json::from_str(m.result().expect("a result").get()).unwrap();
    result["echo"].clone()
}

/// The `error.message` of an error response.
fn error_text(m: &Message) -> String {
    let err: serde_json::Value = serde_json::from_str(m.error().expect("an error").get()).unwrap();
    err["message"].as_str().unwrap_or_default().to_owned()
}
