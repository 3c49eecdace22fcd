//! Running a server with two faces (docs/architecture.md, "Servers with two faces"):
//! an `initialize` session and a 2026-07-28 session side by side, each an ordinary
//! session of this actor behind its own channels, with the [`Router`] between them and
//! the hub.
//!
//! Owns the two sessions for as long as both live: when one ends, the other is stopped
//! (its own shutdown path: queued commands sent, the session deleted) and the pair ends
//! with the first one's reason, so the actor's one restart loop sets both up again.
//! Never reads the network itself.

use tokio::sync::mpsc;

use super::faces::{Face, Router};
use super::wire::Endpoint;
use super::{HttpUpstream, SessionEnd};
use crate::config::UpstreamProtocol;
use crate::upstream::{InitInfo, UpstreamCmd, UpstreamLink};

/// Commands queued per face (as the hub's own queue to an upstream).
const FACE_QUEUE: usize = 256;

impl HttpUpstream {
    /// This actor with `protocol` pinned, reporting to `hub` and stopping with `stop`.
    fn face(
        &self,
        protocol: UpstreamProtocol,
        hub: UpstreamLink,
        stop: tokio_util::sync::CancellationToken,
    ) -> HttpUpstream {
        let mut config = self.config.clone();
        config.protocol = protocol;
        HttpUpstream {
            id: self.id,
            auth: self.auth.clone(),
            config,
            restart: self.restart.clone(),
            max_message: self.max_message,
            hub,
            shutdown: stop,
        }
    }

    /// Runs both faces until one ends, shutdown, or the hub going away.
    pub(super) async fn two_face_session(
        &self,
        endpoint: &Endpoint,
        legacy_info: &InitInfo,
        rx: &mut mpsc::Receiver<UpstreamCmd>,
    ) -> SessionEnd {
        let stop = self.shutdown.child_token();
        let (legacy_events, mut legacy_rx) = mpsc::channel(FACE_QUEUE);
        let (modern_events, mut modern_rx) = mpsc::channel(FACE_QUEUE);
        let (legacy_cmds, mut legacy_cmd_rx) = mpsc::channel(FACE_QUEUE);
        let (modern_cmds, mut modern_cmd_rx) = mpsc::channel(FACE_QUEUE);
        let legacy = self.face(
            UpstreamProtocol::Legacy,
            UpstreamLink::new(legacy_events),
            stop.clone(),
        );
        let modern = self.face(
            UpstreamProtocol::Modern,
            UpstreamLink::new(modern_events),
            stop.clone(),
        );
        let mut legacy_run = Box::pin(legacy.session(endpoint, &mut legacy_cmd_rx));
        let mut modern_run = Box::pin(modern.session(endpoint, &mut modern_cmd_rx));
        let mut router = Router::new(&legacy_info.capabilities);
        let mut first: Option<SessionEnd> = None;
        let (mut legacy_done, mut modern_done) = (false, false);
        let mut stopping = false;
        while !(legacy_done && modern_done) {
            tokio::select! {
                biased;
                _ = self.shutdown.cancelled(), if !stopping => {
                    // Hand the faces what the hub queued last (its final unsubscribes)
                    // before they see the shutdown and flush their own queues.
                    while let Ok(cmd) = rx.try_recv() {
                        for (face, cmd) in router.on_command(cmd) {
                            let queue = if face == Face::Legacy { &legacy_cmds } else { &modern_cmds };
                            let _ = queue.try_send(cmd);
                        }
                    }
                    stopping = true;
                }
                end = &mut legacy_run, if !legacy_done => {
                    legacy_done = true;
                    stop.cancel();
                    first.get_or_insert(end);
                }
                end = &mut modern_run, if !modern_done => {
                    modern_done = true;
                    stop.cancel();
                    first.get_or_insert(end);
                }
                Some((_, ev)) = legacy_rx.recv() => {
                    if let Some(ev) = router.on_event(Face::Legacy, ev) {
                        if self.hub.send(self.id, ev).await.is_err() {
                            stop.cancel();
                            first.get_or_insert(SessionEnd::Shutdown);
                        }
                    }
                }
                Some((_, ev)) = modern_rx.recv() => {
                    if let Some(ev) = router.on_event(Face::Modern, ev) {
                        if self.hub.send(self.id, ev).await.is_err() {
                            stop.cancel();
                            first.get_or_insert(SessionEnd::Shutdown);
                        }
                    }
                }
                // A command goes to each face at most once: taken only when both
                // queues have room, so the hub's queue stays the bound.
                cmd = rx.recv(), if !stopping && first.is_none()
                    && legacy_cmds.capacity() > 0 && modern_cmds.capacity() > 0 => match cmd {
                    Some(cmd) => {
                        for (face, cmd) in router.on_command(cmd) {
                            let queue = if face == Face::Legacy { &legacy_cmds } else { &modern_cmds };
                            let _ = queue.try_send(cmd);
                        }
                    }
                    None => {
                        stop.cancel();
                        first.get_or_insert(SessionEnd::Shutdown);
                        stopping = true;
                    }
                },
            }
        }
        if self.shutdown.is_cancelled() {
            return SessionEnd::Shutdown;
        }
        first.unwrap_or(SessionEnd::Shutdown)
    }
}
