//! `[profiles.NAME]` (docs/architecture.md, "Profiles"): a named view of some servers,
//! served at its own path, and the checks of every view key (a profile's and a
//! server's filters and renames).
//!
//! Plain data read by serde, and its rules; never reads the environment itself (the
//! profile's token is read through a lookup closure).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::problem::{invalid, KeyPath, Problem};
use super::{Config, ConfigError, ServerConfig};
use crate::state::views::{check_glob, NameFilter, ServerView};

/// `[profiles.NAME]`: the servers its clients see, and how.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize, Default)]
#[serde(deny_unknown_fields)]
pub struct ProfileConfig {
    /// Set from the table key after loading.
    #[serde(skip)]
    pub name: String,
    /// Names of `[servers.NAME]` tables.
    pub servers: Vec<String>,
    /// Its endpoint on the `[listen]` address; default `/mcp/NAME`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub path: Option<String>,
    /// The variable holding this profile's own bearer token (its clients present
    /// that one, and no other).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub auth_token_env: Option<String>,
    /// Globs on tool names as this profile's clients see them (after prefix and
    /// rename).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tools_allow: Vec<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tools_deny: Vec<String>,
}

impl ProfileConfig {
    /// The endpoint path its clients use.
    pub fn path(&self) -> String {
        self.path
            .clone()
            .unwrap_or_else(|| format!("/mcp/{}", self.name))
    }

    /// The tool filter (the globs were checked when the config was loaded).
    pub fn tool_filter(&self) -> NameFilter {
        NameFilter::new(&self.tools_allow, &self.tools_deny).unwrap_or_default()
    }

    /// The profile's own bearer token, when it has one.
    ///
    /// # Errors
    /// [`ConfigError::AuthToken`] if the variable is unset or empty.
    pub fn auth_token_with(
        &self,
        env: impl Fn(&str) -> Option<String>,
    ) -> Result<Option<String>, ConfigError> {
        super::token_from(self.auth_token_env.as_deref(), env)
    }
}

impl ServerConfig {
    /// What this server shows of itself in every view (the globs were checked when the
    /// config was loaded).
    pub fn view(&self) -> ServerView {
        let f =
            |allow: &[String], deny: &[String]| NameFilter::new(allow, deny).unwrap_or_default();
        ServerView::new(
            f(&self.tools_allow, &self.tools_deny),
            f(&self.prompts_allow, &self.prompts_deny),
            f(&self.resources_allow, &self.resources_deny),
            self.tool_rename.clone(),
            self.tool_descriptions.clone(),
        )
    }

    /// Whether `other` differs from this server in its view keys only (filters,
    /// renames, descriptions): then a reload keeps its session.
    pub fn same_session(&self, other: &ServerConfig) -> bool {
        let bare = |s: &ServerConfig| ServerConfig {
            tools_allow: vec![],
            tools_deny: vec![],
            prompts_allow: vec![],
            prompts_deny: vec![],
            resources_allow: vec![],
            resources_deny: vec![],
            tool_rename: BTreeMap::new(),
            tool_descriptions: BTreeMap::new(),
            ..s.clone()
        };
        bare(self) == bare(other)
    }
}

/// Paths the operator's view uses on the same listener (and `/login/NAME`, below).
const RESERVED_PATHS: [&str; 6] = [
    "/",
    "/metrics",
    "/status",
    "/status/events",
    "/reload",
    crate::oauth::callback::DAEMON_CALLBACK_PATH,
];

/// Checks every view key: globs, renames, profiles' servers and paths.
pub(super) fn check_views(cfg: &mut Config) -> Result<(), Problem> {
    for server in &cfg.servers.0 {
        let at = KeyPath::server(&server.name);
        for (key, globs) in [
            ("tools_allow", &server.tools_allow),
            ("tools_deny", &server.tools_deny),
            ("prompts_allow", &server.prompts_allow),
            ("prompts_deny", &server.prompts_deny),
            ("resources_allow", &server.resources_allow),
            ("resources_deny", &server.resources_deny),
        ] {
            check_globs(&at.child(key), globs)?;
        }
        check_renames(&at, server)?;
    }
    let mut paths: BTreeMap<String, String> = BTreeMap::new();
    paths.insert(cfg.listen.path.clone(), "listen.path".to_owned());
    for (name, profile) in &mut cfg.profiles {
        profile.name.clone_from(name);
        let at = KeyPath::new(&["profiles", name.as_str()]);
        if name.is_empty()
            || !name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
        {
            return Err(invalid(
                &at,
                format!("profile name {name:?} must be letters, digits, `-` and `_`"),
            ));
        }
        if profile.servers.is_empty() {
            let at = at.child("servers");
            return Err(invalid(&at, format!("{at} names no server")));
        }
        for (i, s) in profile.servers.iter().enumerate() {
            if !cfg.servers.0.iter().any(|c| &c.name == s) {
                let at = at.child("servers").at(i);
                return Err(invalid(
                    &at,
                    format!("{at} names {s:?}, which is no [servers.NAME] table"),
                ));
            }
        }
        check_globs(&at.child("tools_allow"), &profile.tools_allow)?;
        check_globs(&at.child("tools_deny"), &profile.tools_deny)?;
        if let Some(var) = &profile.auth_token_env {
            if var.is_empty() || var.contains(['=', '\0', '$', '{', '}']) {
                let at = at.child("auth_token_env");
                return Err(invalid(
                    &at,
                    format!("{at} must be the name of an environment variable; got {var:?}"),
                ));
            }
        }
        let path = profile.path();
        let at = at.child("path");
        if !path.starts_with('/') {
            return Err(invalid(
                &at,
                format!("{at} must start with `/` (got {path:?})"),
            ));
        }
        if RESERVED_PATHS.contains(&path.as_str()) || path.starts_with("/login/") {
            return Err(invalid(
                &at,
                format!("{at} = {path:?} is a path of the operator's view"),
            ));
        }
        if let Some(other) = paths.insert(path.clone(), at.to_string()) {
            return Err(invalid(
                &at,
                format!("{at} = {path:?} is already the path of {other}"),
            ));
        }
    }
    Ok(())
}

fn check_globs(at: &KeyPath, globs: &[String]) -> Result<(), Problem> {
    for (i, g) in globs.iter().enumerate() {
        if let Err(e) = check_glob(g) {
            let at = at.at(i);
            return Err(invalid(&at, format!("{at}: {e}")));
        }
    }
    Ok(())
}

/// Renames: non-empty names, and no two tools renamed to one name.
fn check_renames(at: &KeyPath, server: &ServerConfig) -> Result<(), Problem> {
    let mut seen: BTreeMap<&str, &str> = BTreeMap::new();
    for (own, shown) in &server.tool_rename {
        let at = at.child("tool_rename").child(own);
        if shown.is_empty() || own.is_empty() {
            return Err(invalid(
                &at,
                format!("{at} must rename to a non-empty name"),
            ));
        }
        if let Some(first) = seen.insert(shown, own) {
            return Err(invalid(
                &at,
                format!("{at} = {shown:?} collides with the rename of {first:?} to the same name"),
            ));
        }
    }
    Ok(())
}
