//! The one deduplicated upstream `subscriptions/listen` of a 2026-07-28 server
//! (docs/architecture.md, "Upstreams of both eras"): the union of URIs the hub holds
//! on that server, plus the list-changed flags the server offers, kept in **one**
//! listen stream that is replaced make-before-break whenever the union changes.
//!
//! Strategy: at most one listen is *active* (acknowledged) and at most one is
//! *opening* (sent, not yet acknowledged). A change of the union opens a new listen
//! with the whole new union; only when the server acknowledges it is the old one
//! closed, so every URI held before and after the change is covered by an
//! acknowledged listen at every moment (an update in the overlap may arrive twice;
//! none is lost). Changes made while a listen is opening wait for its acknowledgement
//! and are then applied together, so a burst of subscribes costs one more listen, not
//! one each.
//!
//! Owns: the wanted union, the two streams, the hub's subscribe requests waiting for
//! an acknowledgement. Pure state: no I/O, no clock of its own (callers pass `now`).
//! Never answers a subscribe before a listen that covers its URI is acknowledged.

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::protocol::listen::ListenFilter;
use crate::protocol::RawId;

/// How long a listen may go unacknowledged before it is given up (and retried).
pub const ACK_TIMEOUT: Duration = Duration::from_secs(10);

/// Listens in a row that end or time out before their acknowledgement before the
/// subscribes waiting on them are failed.
pub const MAX_ATTEMPTS: u32 = 3;

/// The list-changed notifications a listen asks for.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Flags {
    pub tools: bool,
    pub prompts: bool,
    pub resources: bool,
}

impl Flags {
    /// The flags a server's capabilities offer (`*.listChanged`).
    pub fn offered_by(capabilities: &Value) -> Flags {
        let on = |k: &str| capabilities[k]["listChanged"].as_bool().unwrap_or(false);
        Flags {
            tools: on("tools"),
            prompts: on("prompts"),
            resources: on("resources"),
        }
    }

    fn any(self) -> bool {
        self.tools || self.prompts || self.resources
    }
}

/// One listen stream mcpmux opened upstream.
#[derive(Debug, Clone)]
struct Stream {
    id: RawId,
    uris: BTreeSet<String>,
    flags: Flags,
    sent: Instant,
}

/// What the listen manager wants done.
#[derive(Debug, Clone, PartialEq)]
pub enum ListenAction {
    /// Send `subscriptions/listen` with this id and filter.
    Open { id: RawId, filter: Value },
    /// Stop the listen with this id.
    Close(RawId),
    /// Answer the hub's subscribe request `id`: `Ok` once acknowledged, or why not.
    Answer {
        id: RawId,
        outcome: Result<(), String>,
    },
    /// The URIs may have changed while no listen covered them (a listen was lost and
    /// reopened): tell their holders, as after a restart.
    MayHaveChanged(Vec<String>),
    /// URIs the hub holds lost their listen and it cannot be opened again: the
    /// session must start over (the hub then subscribes them anew and tells their
    /// holders, as after any restart).
    Restart(String),
}

/// The listen state of one modern upstream session.
#[derive(Debug)]
pub struct Listens {
    flags: Flags,
    wanted: BTreeSet<String>,
    active: Option<Stream>,
    opening: Option<Stream>,
    /// Replaced listens kept open until the active one covers every wanted URI they
    /// cover (so a URI re-added during a replacement never goes uncovered).
    retiring: Vec<Stream>,
    /// The hub's subscribe requests waiting for an acknowledged listen with their URI.
    waiters: Vec<(RawId, String)>,
    /// URIs whose coverage lapsed (active listen lost): told "may have changed" on
    /// the next acknowledgement.
    lapsed: BTreeSet<String>,
    next: u64,
    attempts: u32,
    /// Listens opened so far (for logs and tests).
    pub opened: u64,
}

impl Listens {
    pub fn new(flags: Flags) -> Self {
        Listens {
            flags,
            wanted: BTreeSet::new(),
            active: None,
            opening: None,
            retiring: Vec::new(),
            waiters: Vec::new(),
            lapsed: BTreeSet::new(),
            next: 0,
            attempts: 0,
            opened: 0,
        }
    }

    /// Whether `id` is one of mcpmux's listens (active, opening, or closed earlier:
    /// every listen id has the same prefix).
    pub fn is_listen(id: &RawId) -> bool {
        id.as_json().starts_with("\"mcpmux-listen-")
    }

    /// Opens the listen for the list-changed flags at the start of a session (the
    /// catalog must hear of changes before any client subscribes).
    pub fn start(&mut self, now: Instant, out: &mut Vec<ListenAction>) {
        self.reconcile(now, out);
    }

    /// The hub asks to hold `uri` (its request `id` is answered once covered).
    pub fn subscribe(&mut self, id: RawId, uri: String, now: Instant, out: &mut Vec<ListenAction>) {
        let covered = self.active.as_ref().is_some_and(|s| s.uris.contains(&uri));
        self.wanted.insert(uri.clone());
        if covered {
            out.push(ListenAction::Answer {
                id,
                outcome: Ok(()),
            });
        } else {
            self.waiters.push((id, uri));
        }
        self.reconcile(now, out);
    }

    /// The hub no longer holds `uri`.
    pub fn unsubscribe(&mut self, uri: &str, now: Instant, out: &mut Vec<ListenAction>) {
        if self.wanted.remove(uri) {
            self.reconcile(now, out);
        }
    }

    /// The server acknowledged listen `id` with the honoured `resourceSubscriptions`.
    pub fn on_ack(
        &mut self,
        id: &RawId,
        honoured: &BTreeSet<String>,
        now: Instant,
        out: &mut Vec<ListenAction>,
    ) {
        if self.opening.as_ref().is_none_or(|s| &s.id != id) {
            return;
        }
        let mut stream = self.opening.take().expect("checked");
        self.attempts = 0;
        // URIs the server would not take are not held by this listen.
        let refused: Vec<String> = stream.uris.difference(honoured).cloned().collect();
        for uri in &refused {
            stream.uris.remove(uri);
            self.wanted.remove(uri);
        }
        let waiters = std::mem::take(&mut self.waiters);
        for (wid, uri) in waiters {
            if stream.uris.contains(&uri) {
                out.push(ListenAction::Answer {
                    id: wid,
                    outcome: Ok(()),
                });
            } else if refused.contains(&uri) {
                let why = format!("the server did not acknowledge a subscription to {uri}");
                out.push(ListenAction::Answer {
                    id: wid,
                    outcome: Err(why),
                });
            } else {
                self.waiters.push((wid, uri));
            }
        }
        let lapsed: Vec<String> = std::mem::take(&mut self.lapsed)
            .into_iter()
            .filter(|u| stream.uris.contains(u))
            .collect();
        if let Some(old) = self.active.replace(stream) {
            self.retiring.push(old);
        }
        if !lapsed.is_empty() {
            out.push(ListenAction::MayHaveChanged(lapsed));
        }
        self.reconcile(now, out);
    }

    /// Closes every replaced listen whose wanted URIs the active listen covers.
    fn close_retired(&mut self, out: &mut Vec<ListenAction>) {
        let active = self.active.as_ref().map(|s| &s.uris);
        let wanted = &self.wanted;
        self.retiring.retain(|old| {
            let needed = old
                .uris
                .iter()
                .any(|u| wanted.contains(u) && active.is_none_or(|a| !a.contains(u)));
            if !needed {
                out.push(ListenAction::Close(old.id.clone()));
            }
            needed
        });
    }

    /// Listen `id` ended: the server's graceful result, its `notifications/cancelled`,
    /// or (`HTTP`) its stream ended. An active listen is reopened with the current
    /// union; an opening one is retried.
    pub fn on_ended(&mut self, id: &RawId, now: Instant, out: &mut Vec<ListenAction>) {
        if self.active.as_ref().is_some_and(|s| &s.id == id) {
            let lost = self.active.take().expect("checked");
            tracing::info!(listen = %id, uris = lost.uris.len(), "upstream listen ended; reopening it");
            self.lapsed.extend(lost.uris);
            self.reconcile(now, out);
        } else if self.opening.as_ref().is_some_and(|s| &s.id == id) {
            self.opening = None;
            self.failed_attempt(now, out);
        } else if let Some(i) = self.retiring.iter().position(|s| &s.id == id) {
            let lost = self.retiring.remove(i);
            let uncovered = lost.uris.iter().filter(|u| {
                self.wanted.contains(*u)
                    && self.active.as_ref().is_none_or(|a| !a.uris.contains(*u))
            });
            self.lapsed.extend(uncovered.cloned());
        }
    }

    /// The earliest moment [`Listens::on_timer`] has something to do.
    pub fn deadline(&self) -> Option<Instant> {
        self.opening.as_ref().map(|s| s.sent + ACK_TIMEOUT)
    }

    /// Gives up on an opening listen whose acknowledgement is overdue.
    pub fn on_timer(&mut self, now: Instant, out: &mut Vec<ListenAction>) {
        if let Some(s) = self
            .opening
            .as_ref()
            .filter(|s| now >= s.sent + ACK_TIMEOUT)
        {
            tracing::warn!(listen = %s.id, "upstream listen not acknowledged in time");
            let s = self.opening.take().expect("checked");
            out.push(ListenAction::Close(s.id));
            self.failed_attempt(now, out);
        }
    }

    /// The URIs currently wanted (the union).
    #[cfg(test)]
    pub fn wanted(&self) -> &BTreeSet<String> {
        &self.wanted
    }

    fn failed_attempt(&mut self, now: Instant, out: &mut Vec<ListenAction>) {
        self.attempts += 1;
        if self.attempts >= MAX_ATTEMPTS {
            self.attempts = 0;
            let covered: BTreeSet<String> = self
                .active
                .as_ref()
                .map(|s| s.uris.clone())
                .unwrap_or_default();
            for (wid, uri) in std::mem::take(&mut self.waiters) {
                if !covered.contains(&uri) {
                    self.wanted.remove(&uri);
                }
                let why = format!(
                    "the server did not acknowledge a listen for {uri} ({MAX_ATTEMPTS} attempts)"
                );
                out.push(ListenAction::Answer {
                    id: wid,
                    outcome: Err(why),
                });
            }
            // What the hub holds (confirmed earlier) and no listen covers now: it
            // cannot be dropped here, as the hub counts on its updates.
            let held = self.wanted.iter().filter(|u| !covered.contains(*u)).count();
            if held > 0 {
                out.push(ListenAction::Restart(format!(
                    "the listen for {held} held URIs was lost and the server did not \
                     acknowledge a new one ({MAX_ATTEMPTS} attempts)"
                )));
                return;
            }
            self.wanted.retain(|u| covered.contains(u));
            return;
        }
        self.reconcile(now, out);
    }

    /// Brings the streams in line with the wanted union.
    fn reconcile(&mut self, now: Instant, out: &mut Vec<ListenAction>) {
        self.open_if_needed(now, out);
        self.close_retired(out);
    }

    /// Opens a listen for the wanted union unless the active one already is it (or one
    /// is opening: the union is applied after its acknowledgement).
    fn open_if_needed(&mut self, now: Instant, out: &mut Vec<ListenAction>) {
        if self.opening.is_some() {
            return;
        }
        let want_flags = self.flags;
        let same = self
            .active
            .as_ref()
            .is_some_and(|s| s.uris == self.wanted && s.flags == want_flags);
        if same {
            return;
        }
        if self.wanted.is_empty() && !want_flags.any() {
            if let Some(old) = self.active.take() {
                out.push(ListenAction::Close(old.id));
            }
            for old in self.retiring.drain(..) {
                out.push(ListenAction::Close(old.id));
            }
            return;
        }
        self.next += 1;
        self.opened += 1;
        let id = RawId::parse(&format!("\"mcpmux-listen-{}\"", self.next)).expect("valid id");
        let filter = ListenFilter {
            tools: want_flags.tools,
            prompts: want_flags.prompts,
            resources: want_flags.resources,
            uris: (!self.wanted.is_empty()).then(|| self.wanted.iter().cloned().collect()),
        };
        self.opening = Some(Stream {
            id: id.clone(),
            uris: self.wanted.clone(),
            flags: want_flags,
            sent: now,
        });
        out.push(ListenAction::Open {
            id,
            filter: filter.to_value(),
        });
    }
}

#[cfg(test)]
mod tests;
