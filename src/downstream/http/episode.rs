//! Rate-limited logging of a recurring condition ("the connection limit is reached",
//! "accept is failing") as episodes: one warning when an episode starts, one summary
//! when it ends, nothing per occurrence in between.
//!
//! Owns: deciding whether an occurrence starts an episode, whether that episode is
//! worth a warning (not when one was warned about less than `quiet` ago, so a condition
//! that flaps cannot flood the log), and what its summary says.
//! Never: logs, sleeps or reads the clock itself: callers pass `now` and log what the
//! returned values say, so the rules are unit-tested without time passing.

use std::time::{Duration, Instant};

/// One recurring condition's episodes.
#[derive(Debug)]
pub(super) struct Episodes {
    quiet: Duration,
    current: Option<Current>,
    last_warned: Option<Instant>,
}

#[derive(Debug)]
struct Current {
    since: Instant,
    occurrences: u64,
    warned: bool,
}

/// What [`Episodes::end`] reports about the episode that ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Ended {
    pub lasted: Duration,
    /// Occurrences during the episode, the first included.
    pub occurrences: u64,
    /// Whether its start was warned about (log the end at the same level, else quieter).
    pub warned: bool,
}

impl Episodes {
    /// Episodes of one condition; at most one warning per `quiet`.
    pub(super) fn new(quiet: Duration) -> Self {
        Episodes {
            quiet,
            current: None,
            last_warned: None,
        }
    }

    /// Records one occurrence of the condition. True when it starts an episode that
    /// should be warned about: the caller logs one warning.
    pub(super) fn occurred(&mut self, now: Instant) -> bool {
        if let Some(current) = &mut self.current {
            current.occurrences += 1;
            return false;
        }
        let warn = self
            .last_warned
            .is_none_or(|at| now.saturating_duration_since(at) >= self.quiet);
        if warn {
            self.last_warned = Some(now);
        }
        self.current = Some(Current {
            since: now,
            occurrences: 1,
            warned: warn,
        });
        warn
    }

    /// The condition is over: ends the current episode, if there is one.
    pub(super) fn end(&mut self, now: Instant) -> Option<Ended> {
        self.current.take().map(|c| Ended {
            lasted: now.saturating_duration_since(c.since),
            occurrences: c.occurrences,
            warned: c.warned,
        })
    }

    /// True while an episode is going on.
    pub(super) fn ongoing(&self) -> bool {
        self.current.is_some()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const QUIET: Duration = Duration::from_secs(60);

    #[test]
    fn one_warning_per_episode_and_a_summary_at_its_end() {
        let t0 = Instant::now();
        let mut e = Episodes::new(QUIET);
        assert_eq!(e.end(t0), None, "no episode, nothing to end");
        assert!(
            e.occurred(t0),
            "the first occurrence starts a warned episode"
        );
        for i in 1..1000 {
            assert!(
                !e.occurred(t0 + Duration::from_millis(i)),
                "no warning per occurrence"
            );
        }
        assert!(e.ongoing());
        let ended = e.end(t0 + Duration::from_secs(5)).expect("an episode");
        assert_eq!(
            ended,
            Ended {
                lasted: Duration::from_secs(5),
                occurrences: 1000,
                warned: true
            }
        );
        assert!(!e.ongoing());
        assert_eq!(e.end(t0 + Duration::from_secs(6)), None);
    }

    #[test]
    fn an_episode_soon_after_a_warned_one_is_not_warned() {
        let t0 = Instant::now();
        let mut e = Episodes::new(QUIET);
        assert!(e.occurred(t0));
        e.end(t0 + Duration::from_secs(1));
        // Flapping: short episodes in quick succession give no new warning...
        for s in 2..59 {
            let at = t0 + Duration::from_secs(s);
            assert!(!e.occurred(at), "warned again {s} s after the last warning");
            let ended = e.end(at).expect("an episode");
            assert!(!ended.warned);
        }
        // ...until `quiet` has passed since the last warning.
        assert!(e.occurred(t0 + QUIET));
        assert!(e.end(t0 + QUIET).expect("an episode").warned);
    }
}
