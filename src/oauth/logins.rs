//! [`Logins`]: the OAuth clients of a running daemon's upstreams, by server name, so
//! that the status page's link (`POST /login/NAME` on the daemon's listener) can ask
//! one that needs a login to open the browser now; and the daemon's `/oauth/callback`
//! route their logins are redirected to.
//!
//! Owns only the map; never a token. The lock is a std mutex held for a map lookup or
//! insert, never across an await.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use super::callback::DaemonCallback;
use super::UpstreamAuth;

/// What `POST /login/NAME` found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LoginAsked {
    /// The upstream was waiting; it opens the browser now.
    Started,
    /// The upstream is not waiting for a login (it is up, or still trying a refresh).
    NotWaiting,
    /// No HTTP upstream of that name logs in with OAuth.
    Unknown,
}

/// The daemon's upstream OAuth clients, by server name (a reload replaces entries),
/// and its listener as their redirect target.
#[derive(Debug, Default)]
pub struct Logins {
    by_name: Mutex<HashMap<String, Arc<UpstreamAuth>>>,
    callback: Arc<DaemonCallback>,
}

impl Logins {
    /// The daemon's `/oauth/callback` route.
    pub fn callback(&self) -> &Arc<DaemonCallback> {
        &self.callback
    }

    pub fn register(&self, name: &str, auth: Arc<UpstreamAuth>) {
        self.lock().insert(name.to_owned(), auth);
    }

    /// Asks upstream `name` to log in now.
    pub fn ask(&self, name: &str) -> LoginAsked {
        let Some(auth) = self.lock().get(name).cloned() else {
            return LoginAsked::Unknown;
        };
        if auth.request_login() {
            LoginAsked::Started
        } else {
            LoginAsked::NotWaiting
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Arc<UpstreamAuth>>> {
        self.by_name
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}
