//! Where tokens and client registrations live between runs: the OS keychain (the
//! `keyring` crate: macOS Keychain, Windows Credential Manager, Secret Service), or
//! one file per entry with mode 0600 (`[auth] store`, `store_dir`).
//!
//! Owns the backend choice ("auto" probes the keychain once and falls back to the file),
//! the entries' serialized form, and the per-login refresh lock that processes sharing
//! the store take turns through. Never logs an entry's content, and never hands a
//! secret to `Debug` (see [`Grant`]'s and [`Registration`]'s `Debug`).
//!
//! Entries: `grant/<server name>` (what a login yielded for one upstream) and
//! `client/<issuer>` (a dynamic registration, kept per authorization server).

use std::path::{Path, PathBuf};
use std::sync::OnceLock;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use super::OAuthError;
use crate::config::{AuthConfig, TokenStoreKind};

/// The keychain service name every entry is kept under.
pub const KEYRING_SERVICE: &str = "mcpmux";

/// A client registered with one authorization server.
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Registration {
    pub client_id: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub client_secret: Option<String>,
    /// `client_secret_basic`, `client_secret_post` or `none`.
    pub auth_method: String,
    /// The redirect URI registered with it (dynamic registrations only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub redirect_uri: Option<String>,
}

impl std::fmt::Debug for Registration {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Registration")
            .field("client_id", &self.client_id)
            .field(
                "client_secret",
                &self.client_secret.as_ref().map(|_| "<redacted>"),
            )
            .field("auth_method", &self.auth_method)
            .finish()
    }
}

/// What one login to one upstream yielded.
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Grant {
    /// The RFC 8707 resource the tokens are for (the server's canonical URL).
    pub resource: String,
    /// The authorization server that issued them.
    pub issuer: String,
    pub token_endpoint: String,
    pub client: Registration,
    pub access_token: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub refresh_token: Option<String>,
    /// Seconds since the Unix epoch.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expires_at: Option<u64>,
    /// When the access token was issued (seconds since the Unix epoch).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub issued_at: Option<u64>,
    /// The scopes granted (or, when the server did not say, asked for).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scope: Option<String>,
}

impl std::fmt::Debug for Grant {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Grant")
            .field("resource", &self.resource)
            .field("issuer", &self.issuer)
            .field("client", &self.client)
            .field(
                "refresh_token",
                &self.refresh_token.as_ref().map(|_| "<redacted>"),
            )
            .field("expires_at", &self.expires_at)
            .field("scope", &self.scope)
            .finish_non_exhaustive()
    }
}

/// How long a refresh or a login's save waits for another process's refresh of the
/// same login: one token request's bound and a little more for the store write.
pub const GRANT_LOCK_WAIT: Duration = Duration::from_secs(super::REQUEST_TIMEOUT.as_secs() + 5);

/// How often a wait for another process's lock of a login tries again.
const LOCK_POLL: Duration = Duration::from_millis(25);

/// A held login lock ([`TokenStore::lock_grant`]); closing the file releases it.
#[derive(Debug)]
pub struct GrantLock {
    _file: std::fs::File,
}

/// The token store of one mcpmux config.
#[derive(Debug)]
pub struct TokenStore {
    kind: TokenStoreKind,
    dir: PathBuf,
    /// "auto"'s verdict, found once: whether the keychain answers.
    keyring_works: OnceLock<bool>,
}

impl TokenStore {
    /// A file store of its own under the temporary directory, for tests: one per
    /// `tag`, process and test thread.
    #[cfg(test)]
    pub(crate) fn for_test(tag: &str) -> TokenStore {
        let dir = std::env::temp_dir().join(format!(
            "mcpmux-{tag}-{}-{:?}",
            std::process::id(),
            std::thread::current().id()
        ));
        TokenStore::new(&AuthConfig {
            store: TokenStoreKind::File,
            store_dir: Some(dir),
        })
        .expect("a store directory is given")
    }

    /// The store `[auth]` describes (nothing is touched until first use).
    ///
    /// # Errors
    /// No `store_dir` and no platform config directory (no `$HOME`).
    pub fn new(cfg: &AuthConfig) -> Result<TokenStore, OAuthError> {
        let dir = match &cfg.store_dir {
            Some(d) => d.clone(),
            None => default_dir().ok_or_else(|| {
                OAuthError::Store(
                    "no config directory ($XDG_CONFIG_HOME, $HOME or %APPDATA%): set [auth] store_dir"
                        .into(),
                )
            })?,
        };
        Ok(TokenStore {
            kind: cfg.store,
            dir,
            keyring_works: OnceLock::new(),
        })
    }

    /// What the store is, for messages: "the OS keychain" or the folder.
    pub async fn describe(&self) -> String {
        if self.use_keyring().await {
            "the OS keychain".into()
        } else {
            format!("{}", self.dir.display())
        }
    }

    pub async fn load_grant(&self, server: &str) -> Result<Option<Grant>, OAuthError> {
        self.load(&format!("grant/{server}")).await
    }

    pub async fn save_grant(&self, server: &str, grant: &Grant) -> Result<(), OAuthError> {
        self.save(&format!("grant/{server}"), grant).await
    }

    /// Forgets a server's tokens; `Ok(false)` when there were none.
    pub async fn forget_grant(&self, server: &str) -> Result<bool, OAuthError> {
        self.delete(&format!("grant/{server}")).await
    }

    /// Takes the lock of `server`'s login, shared by every process on this store (a lock
    /// file beside the entries, also when they live in the keychain), so that one
    /// refresh at a time spends a rotating refresh token. Waits at most `wait`;
    /// `None` when the lock could not be had (no such file can be made, or another
    /// process held it all that time): the caller goes on without it, as before
    /// there was one. Released when the guard drops (or the process ends).
    pub async fn lock_grant(&self, server: &str, wait: Duration) -> Option<GrantLock> {
        let path = self.path(&format!("lock/{server}")).with_extension("lock");
        let file = match open_lock_file(&self.dir, &path) {
            Ok(f) => f,
            Err(e) => {
                tracing::debug!(path = %path.display(), error = %e, "the login's lock file cannot be made; going on without the lock");
                return None;
            }
        };
        let deadline = tokio::time::Instant::now() + wait;
        loop {
            match file.try_lock() {
                Ok(()) => return Some(GrantLock { _file: file }),
                Err(std::fs::TryLockError::WouldBlock) => {}
                Err(std::fs::TryLockError::Error(e)) => {
                    tracing::debug!(path = %path.display(), error = %e, "the login's lock cannot be taken; going on without it");
                    return None;
                }
            }
            if tokio::time::Instant::now() >= deadline {
                tracing::warn!(upstream = %server, path = %path.display(), "another process held the login's lock for {wait:?}; going on without it");
                return None;
            }
            tokio::time::sleep(LOCK_POLL).await;
        }
    }

    pub async fn load_client(&self, issuer: &str) -> Result<Option<Registration>, OAuthError> {
        self.load(&format!("client/{issuer}")).await
    }

    pub async fn save_client(&self, issuer: &str, reg: &Registration) -> Result<(), OAuthError> {
        self.save(&format!("client/{issuer}"), reg).await
    }

    async fn use_keyring(&self) -> bool {
        match self.kind {
            TokenStoreKind::File => false,
            TokenStoreKind::Keyring => true,
            TokenStoreKind::Auto => {
                if let Some(v) = self.keyring_works.get() {
                    return *v;
                }
                let works = blocking(|| match keyring_entry("probe")?.get_password() {
                    Ok(_) | Err(keyring::Error::NoEntry) => Ok(true),
                    Err(e) => {
                        tracing::debug!(error = %e, "no OS keychain; OAuth tokens go to files");
                        Ok(false)
                    }
                })
                .await
                .unwrap_or(false);
                *self.keyring_works.get_or_init(|| works)
            }
        }
    }

    async fn load<T: serde::de::DeserializeOwned>(
        &self,
        key: &str,
    ) -> Result<Option<T>, OAuthError> {
        let text = if self.use_keyring().await {
            let key = key.to_owned();
            blocking(move || match keyring_entry(&key)?.get_password() {
                Ok(t) => Ok(Some(t)),
                Err(keyring::Error::NoEntry) => Ok(None),
                Err(e) => Err(OAuthError::Store(format!("the OS keychain: {e}"))),
            })
            .await?
        } else {
            match std::fs::read_to_string(self.path(key)) {
                Ok(t) => Some(t),
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
                Err(e) => {
                    let p = self.path(key);
                    return Err(OAuthError::Store(format!(
                        "cannot read {}: {e}",
                        p.display()
                    )));
                }
            }
        };
        match text {
            None => Ok(None),
            Some(t) => serde_json::from_str(&t).map(Some).map_err(|e| {
                OAuthError::Store(format!("a stored entry ({key}) is not readable: {e}"))
            }),
        }
    }

    async fn save<T: Serialize>(&self, key: &str, value: &T) -> Result<(), OAuthError> {
        let text = serde_json::to_string(value).expect("plain data serializes");
        if self.use_keyring().await {
            let key = key.to_owned();
            return blocking(move || {
                keyring_entry(&key)?
                    .set_password(&text)
                    .map_err(|e| OAuthError::Store(format!("the OS keychain: {e}")))
            })
            .await;
        }
        write_private(&self.dir, &self.path(key), text.as_bytes()).map_err(|e| {
            OAuthError::Store(format!("cannot write {}: {e}", self.path(key).display()))
        })
    }

    async fn delete(&self, key: &str) -> Result<bool, OAuthError> {
        if self.use_keyring().await {
            let key = key.to_owned();
            return blocking(move || match keyring_entry(&key)?.delete_credential() {
                Ok(()) => Ok(true),
                Err(keyring::Error::NoEntry) => Ok(false),
                Err(e) => Err(OAuthError::Store(format!("the OS keychain: {e}"))),
            })
            .await;
        }
        match std::fs::remove_file(self.path(key)) {
            Ok(()) => Ok(true),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(false),
            Err(e) => Err(OAuthError::Store(format!(
                "cannot remove {}: {e}",
                self.path(key).display()
            ))),
        }
    }

    /// The file of one entry: a readable prefix and a hash of the whole key (so two
    /// keys that sanitize alike never share a file).
    pub fn path(&self, key: &str) -> PathBuf {
        let safe: String = key
            .chars()
            .take(48)
            .map(|c| {
                if c.is_ascii_alphanumeric() || c == '-' || c == '.' {
                    c
                } else {
                    '_'
                }
            })
            .collect();
        let hash = Sha256::digest(key.as_bytes());
        let hex: String = hash[..6].iter().map(|b| format!("{b:02x}")).collect();
        self.dir.join(format!("{safe}-{hex}.json"))
    }
}

fn keyring_entry(key: &str) -> Result<keyring::Entry, OAuthError> {
    keyring::Entry::new(KEYRING_SERVICE, key)
        .map_err(|e| OAuthError::Store(format!("the OS keychain: {e}")))
}

/// Runs a keychain call off the async workers (the backends block).
async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> Result<T, OAuthError> + Send + 'static,
) -> Result<T, OAuthError> {
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|e| OAuthError::Store(format!("the OS keychain call failed: {e}")))?
}

/// `mcpmux/oauth` under the platform's config directory.
fn default_dir() -> Option<PathBuf> {
    let env = |k: &str| {
        std::env::var_os(k)
            .filter(|v| !v.is_empty())
            .map(PathBuf::from)
    };
    let base = if cfg!(windows) {
        env("APPDATA")
    } else if cfg!(target_os = "macos") {
        env("HOME").map(|h| h.join("Library/Application Support"))
    } else {
        env("XDG_CONFIG_HOME").or_else(|| env("HOME").map(|h| h.join(".config")))
    }?;
    Some(base.join("mcpmux").join("oauth"))
}

/// Opens (creating) a lock file, readable by the owner only, in the store's folder.
fn open_lock_file(dir: &Path, path: &Path) -> std::io::Result<std::fs::File> {
    private_dir(dir)?;
    let mut opts = std::fs::OpenOptions::new();
    opts.read(true).write(true).create(true).truncate(false);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        opts.mode(0o600);
    }
    opts.open(path)
}

/// Creates the store's folder (0700 on Unix) if it is not there.
fn private_dir(dir: &Path) -> std::io::Result<()> {
    let mut builder = std::fs::DirBuilder::new();
    builder.recursive(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::DirBuilderExt;
        builder.mode(0o700);
    }
    builder.create(dir)
}

/// Writes `bytes` to `path` atomically, readable by the owner only (0600 in a 0700
/// folder on Unix): a temporary file created with that mode, then renamed.
fn write_private(dir: &Path, path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    use std::io::Write;
    private_dir(dir)?;
    let tmp = path.with_extension(format!("tmp{}", std::process::id()));
    let mut opts = std::fs::OpenOptions::new();
    opts.write(true).create(true).truncate(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        opts.mode(0o600);
    }
    let mut f = opts.open(&tmp)?;
    f.write_all(bytes)?;
    f.sync_all()?;
    drop(f);
    std::fs::rename(&tmp, path)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn grant() -> Grant {
        Grant {
            resource: "https://x/mcp".into(),
            issuer: "https://as".into(),
            token_endpoint: "https://as/token".into(),
            client: Registration {
                client_id: "c".into(),
                client_secret: Some("s3cret".into()),
                auth_method: "client_secret_basic".into(),
                redirect_uri: None,
            },
            access_token: "acc-token-xyz".into(),
            refresh_token: Some("ref-token-xyz".into()),
            expires_at: Some(1),
            issued_at: None,
            scope: None,
        }
    }

    #[tokio::test]
    async fn file_store_round_trips_with_mode_0600() {
        let dir = std::env::temp_dir().join(format!("mcpmux-store-test-{}", std::process::id()));
        let store = TokenStore::new(&AuthConfig {
            store: TokenStoreKind::File,
            store_dir: Some(dir.clone()),
        })
        .unwrap();
        assert_eq!(store.load_grant("a").await.unwrap(), None);
        store.save_grant("a", &grant()).await.unwrap();
        assert_eq!(store.load_grant("a").await.unwrap(), Some(grant()));
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let mode = std::fs::metadata(store.path("grant/a"))
                .unwrap()
                .permissions()
                .mode();
            assert_eq!(mode & 0o777, 0o600);
        }
        assert!(store.forget_grant("a").await.unwrap());
        assert!(!store.forget_grant("a").await.unwrap());
        let _ = std::fs::remove_dir_all(dir);
    }

    /// A lock held elsewhere (another open file: another process) is waited for, at
    /// most the wait given, then given up (the caller goes on without it); released,
    /// it is free again.
    #[tokio::test]
    async fn a_held_login_lock_is_waited_for_then_given_up() {
        let store = TokenStore::for_test("lock");
        let held = store.lock_grant("up", Duration::ZERO).await;
        assert!(held.is_some(), "a free lock is taken at once");
        let started = tokio::time::Instant::now();
        let second = store.lock_grant("up", Duration::from_millis(100)).await;
        assert!(second.is_none(), "the lock is held elsewhere");
        assert!(started.elapsed() >= Duration::from_millis(100));
        assert!(
            store.lock_grant("other", Duration::ZERO).await.is_some(),
            "each login has its own lock"
        );
        drop(held);
        assert!(
            store.lock_grant("up", Duration::ZERO).await.is_some(),
            "a released lock is free again"
        );
    }

    #[test]
    fn debug_never_shows_secrets() {
        let text = format!("{:?}", grant());
        assert!(!text.contains("acc-token-xyz") && !text.contains("ref-token-xyz"));
        assert!(!text.contains("s3cret"));
    }

    #[test]
    fn keys_that_sanitize_alike_get_different_files() {
        let store = TokenStore::new(&AuthConfig {
            store: TokenStoreKind::File,
            store_dir: Some("/tmp/x".into()),
        })
        .unwrap();
        assert_ne!(
            store.path("client/https://a/b"),
            store.path("client/https://a_b")
        );
    }
}
