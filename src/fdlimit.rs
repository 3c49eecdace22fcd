//! The process's open-file limit (`RLIMIT_NOFILE`): raised at startup, and the share of
//! it downstream connections may use.
//!
//! Owns: raising the soft limit to the hard one ([`raise_nofile_limit`], unix only;
//! elsewhere there is no such limit and it does nothing), reading the soft limit, and
//! the connection budget derived from it ([`connection_budget`]).
//! Never: lowers a limit, touches the hard limit, or fails startup: a limit that cannot
//! be read or raised is logged and left as it is.

/// Raises the soft open-file limit to the hard limit (on macOS to
/// `kern.maxfilesperproc` when that is lower) and logs the limits before and after at
/// debug level. Returns the soft limit now in force; `None` where the platform has no
/// such limit or it cannot be read.
pub fn raise_nofile_limit() -> Option<u64> {
    #[cfg(unix)]
    {
        let before = rlimit::Resource::NOFILE.get();
        match rlimit::increase_nofile_limit(u64::MAX) {
            Ok(soft) => {
                tracing::debug!(before = ?before.ok(), soft, "open-file limit (soft, hard)");
                Some(soft)
            }
            Err(error) => {
                tracing::warn!(%error, before = ?before.as_ref().ok(), "cannot raise the open-file limit");
                before.ok().map(|(soft, _)| soft)
            }
        }
    }
    #[cfg(not(unix))]
    {
        None
    }
}

/// The soft open-file limit in force; `None` where the platform has no such limit or it
/// cannot be read.
pub fn nofile_limit() -> Option<u64> {
    #[cfg(unix)]
    {
        rlimit::Resource::NOFILE.get().ok().map(|(soft, _)| soft)
    }
    #[cfg(not(unix))]
    {
        None
    }
}

/// How many downstream connections may be open at once under an open-file limit of
/// `limit`: three quarters of it. The other quarter (at least 64 descriptors, when the
/// limit allows, and never more than half) stays free for everything else: the
/// listener, the runtime, upstream pipes and sockets, upstream restarts. Never 0.
pub fn connection_budget(limit: u64) -> usize {
    let reserve = (limit / 4).max(64).min(limit / 2);
    usize::try_from(limit - reserve)
        .unwrap_or(usize::MAX)
        .max(1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_budget_leaves_a_quarter_of_the_limit_and_at_least_64_descriptors() {
        assert_eq!(connection_budget(1024), 768);
        assert_eq!(connection_budget(20_000), 15_000);
        assert_eq!(connection_budget(256), 192, "the 64 floor");
        assert_eq!(connection_budget(200), 136, "the 64 floor");
        assert_eq!(
            connection_budget(100),
            50,
            "never more than half is reserved"
        );
        assert_eq!(connection_budget(1), 1, "never 0");
        assert_eq!(connection_budget(0), 1, "never 0");
        assert!(connection_budget(u64::MAX) > 1_000_000, "RLIM_INFINITY");
    }

    #[cfg(unix)]
    #[test]
    fn raising_returns_the_soft_limit_in_force() {
        let soft = raise_nofile_limit().expect("unix has RLIMIT_NOFILE");
        assert_eq!(nofile_limit(), Some(soft));
        let (_, hard) = rlimit::Resource::NOFILE.get().expect("readable");
        assert!(soft <= hard);
    }
}
