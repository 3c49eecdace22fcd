//! The process group a stdio server leads (`process_group(0)` when it is spawned), told
//! to stop (SIGTERM) when its session ends, however it ends: a server that exits (at
//! stdin's EOF, or by crashing) leaves what it started (a wrapper's real server, a
//! helper) running otherwise. The group keeps its id while any member lives, so the
//! signal names no other group; with no member left it fails (ESRCH), ignored.
//!
//! The live groups are also listed process-wide, for the one exit that runs no
//! destructor ([`terminate_all`]: a second stop signal). Never signals anything but the
//! groups of servers mcpmux started.

#[cfg(unix)]
use std::sync::Mutex;

use tokio::process::Child;

/// The groups of the stdio servers running now.
#[cfg(unix)]
static LIVE: Mutex<Vec<i32>> = Mutex::new(Vec::new());

#[cfg(unix)]
fn live() -> std::sync::MutexGuard<'static, Vec<i32>> {
    LIVE.lock().unwrap_or_else(|p| p.into_inner())
}

/// A running server's group: SIGTERM when dropped.
pub(super) struct ProcessGroup(#[cfg(unix)] Option<i32>);

impl ProcessGroup {
    pub(super) fn of(child: &Child) -> ProcessGroup {
        #[cfg(unix)]
        {
            let pid = child.id().and_then(|p| i32::try_from(p).ok());
            if let Some(pid) = pid {
                live().push(pid);
            }
            ProcessGroup(pid)
        }
        #[cfg(not(unix))]
        {
            let _ = child;
            ProcessGroup()
        }
    }
}

impl Drop for ProcessGroup {
    fn drop(&mut self) {
        #[cfg(unix)]
        if let Some(pid) = self.0 {
            live().retain(|p| *p != pid);
            signal(pid);
        }
    }
}

#[cfg(unix)]
fn signal(pid: i32) {
    // SAFETY: kill(2) with a negative pid signals the group; no memory involved.
    unsafe {
        libc::kill(-pid, libc::SIGTERM);
    }
}

/// SIGTERM to the group of every stdio server running now: for an exit that skips the
/// orderly stop (a second stop signal), so the servers do not outlive mcpmux.
pub fn terminate_all() {
    #[cfg(unix)]
    for pid in live().drain(..) {
        signal(pid);
    }
}
