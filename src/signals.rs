//! The process signals `serve` and `stdio` act on: SIGINT and SIGTERM (stop), SIGHUP
//! (reload, `serve` only). Owns the signal streams; listens from the moment they are
//! made, so a caller makes them before it announces it is ready (a script that signals
//! as soon as it reads the ready line must not meet the default action, which kills).
//!
//! Never decides what a signal means beyond "the first stop signal stops, a second one
//! while stopping ends the process at once" (docs/architecture.md, "Shutdown").

/// SIGINT and SIGTERM (Ctrl-C elsewhere).
pub struct StopSignals {
    #[cfg(unix)]
    int: Option<tokio::signal::unix::Signal>,
    #[cfg(unix)]
    term: Option<tokio::signal::unix::Signal>,
}

impl StopSignals {
    /// Starts listening now.
    pub fn new() -> Self {
        #[cfg(unix)]
        {
            use tokio::signal::unix::{signal, SignalKind};
            StopSignals {
                int: signal(SignalKind::interrupt()).ok(),
                term: signal(SignalKind::terminate()).ok(),
            }
        }
        #[cfg(not(unix))]
        StopSignals {}
    }

    /// Resolves at the next stop signal.
    pub async fn recv(&mut self) {
        #[cfg(unix)]
        {
            async fn next(s: &mut Option<tokio::signal::unix::Signal>) {
                match s {
                    Some(s) => {
                        s.recv().await;
                    }
                    None => std::future::pending().await,
                }
            }
            if self.int.is_none() && self.term.is_none() {
                let _ = tokio::signal::ctrl_c().await;
                return;
            }
            tokio::select! {
                () = next(&mut self.int) => {}
                () = next(&mut self.term) => {}
            }
        }
        #[cfg(not(unix))]
        {
            let _ = tokio::signal::ctrl_c().await;
        }
    }

    /// After the first stop signal: a second one ends the process at once (exit code
    /// 130), whatever the shutdown is still waiting for.
    pub fn second_one_exits(mut self) {
        tokio::spawn(async move {
            self.recv().await;
            tracing::warn!("a second stop signal: exiting now");
            // No destructor runs at exit: the servers' groups are told to stop here.
            crate::upstream::process_group::terminate_all();
            std::process::exit(130);
        });
    }
}

impl Default for StopSignals {
    fn default() -> Self {
        Self::new()
    }
}

/// SIGHUP, one message per signal (none where there is no SIGHUP).
pub fn hangups() -> tokio::sync::mpsc::Receiver<()> {
    let (tx, rx) = tokio::sync::mpsc::channel(1);
    #[cfg(unix)]
    {
        use tokio::signal::unix::{signal, SignalKind};
        match signal(SignalKind::hangup()) {
            Ok(mut s) => {
                tokio::spawn(async move {
                    while s.recv().await.is_some() {
                        if tx.send(()).await.is_err() {
                            return;
                        }
                    }
                });
            }
            Err(e) => tracing::warn!(error = %e, "cannot listen for SIGHUP; use mcpmux reload"),
        }
    }
    #[cfg(not(unix))]
    drop(tx);
    rx
}
