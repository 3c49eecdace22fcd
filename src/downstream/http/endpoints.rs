//! The profile endpoints on the listener (docs/architecture.md, "Profiles"): each
//! `[profiles.NAME]` path with the view its clients see and its own bearer token.
//! Replaced whole on a reload; the default endpoint (`[listen].path`) is not here.
//!
//! Never: holds a client or a session (sessions remember their view themselves), or
//! shows a token in `Debug`.

use std::collections::HashMap;
use std::sync::{Arc, RwLock};

use crate::state::ids::ViewId;

/// One profile's endpoint.
#[derive(Clone, PartialEq, Eq)]
pub struct ProfileEndpoint {
    pub name: String,
    pub view: ViewId,
    /// The profile's own token; `None`: the listener's (`[listen].auth_token_env`).
    pub token: Option<String>,
}

impl std::fmt::Debug for ProfileEndpoint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ProfileEndpoint")
            .field("name", &self.name)
            .field("view", &self.view)
            .field("token", &self.token.as_ref().map(|_| "<redacted>"))
            .finish()
    }
}

/// Path → profile endpoint, shared by the server and the wiring that reloads it.
#[derive(Debug, Clone, Default)]
pub struct ProfileEndpoints(Arc<RwLock<HashMap<String, ProfileEndpoint>>>);

impl ProfileEndpoints {
    pub fn new(endpoints: impl IntoIterator<Item = (String, ProfileEndpoint)>) -> Self {
        let e = ProfileEndpoints::default();
        e.replace(endpoints);
        e
    }

    /// Serves these endpoints from now on (a reload).
    pub fn replace(&self, endpoints: impl IntoIterator<Item = (String, ProfileEndpoint)>) {
        let map = endpoints.into_iter().collect();
        *self.0.write().unwrap_or_else(|p| p.into_inner()) = map;
    }

    /// The endpoint at `path`, if a profile is served there.
    pub fn get(&self, path: &str) -> Option<ProfileEndpoint> {
        self.0
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .get(path)
            .cloned()
    }
}
