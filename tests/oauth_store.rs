//! The OAuth token store (docs/architecture.md, "OAuth toward upstreams"): the OS keychain
//! through the `keyring` crate, here a Secret Service (gnome-keyring in a private D-Bus
//! session, `dbus-run-session`), and the 0600 file that "auto" falls back to where there
//! is none (no session bus). Each test runs its body in a child of this test binary, in
//! the environment it needs. `tests/oauth_e2e.rs` covers the file store under a running
//! daemon (mode, and no token in any log line).
#![cfg(target_os = "linux")]

use std::path::{Path, PathBuf};
use std::process::Command;

use mcpmux::config::{AuthConfig, TokenStoreKind};
use mcpmux::oauth::{Grant, Registration, TokenStore};

/// Set in the child that runs a test's body.
const CHILD: &str = "MCPMUX_STORE_TEST_CHILD";

fn grant(n: u32) -> Grant {
    Grant {
        resource: "https://mcp.example/mcp".into(),
        issuer: "https://as.example".into(),
        token_endpoint: "https://as.example/token".into(),
        client: Registration {
            client_id: "client-1".into(),
            client_secret: None,
            auth_method: "none".into(),
            redirect_uri: Some("http://127.0.0.1:1234/callback".into()),
        },
        access_token: format!("access-{n}-{}", std::process::id()),
        refresh_token: Some(format!("refresh-{n}")),
        expires_at: Some(2_000_000_000),
        issued_at: Some(1_999_999_000),
        scope: Some("mcp:read".into()),
    }
}

fn temp_dir(stem: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("mcpmux-{stem}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    d
}

fn store(kind: TokenStoreKind, dir: &Path) -> TokenStore {
    TokenStore::new(&AuthConfig {
        store: kind,
        store_dir: Some(dir.to_owned()),
    })
    .expect("a store")
}

/// Saves, reads back, overwrites (a rotation), forgets; per-issuer registrations too.
async fn round_trip(s: &TokenStore, server: &str) {
    assert_eq!(s.load_grant(server).await.unwrap(), None);
    s.save_grant(server, &grant(1)).await.unwrap();
    assert_eq!(s.load_grant(server).await.unwrap(), Some(grant(1)));
    s.save_grant(server, &grant(2)).await.unwrap();
    assert_eq!(s.load_grant(server).await.unwrap(), Some(grant(2)));
    let reg = grant(0).client;
    s.save_client("https://as.example", &reg).await.unwrap();
    assert_eq!(
        s.load_client("https://as.example").await.unwrap(),
        Some(reg)
    );
    assert!(s.forget_grant(server).await.unwrap());
    assert_eq!(s.load_grant(server).await.unwrap(), None);
    assert!(!s.forget_grant(server).await.unwrap());
}

/// Runs `test` of this binary in a child through `wrap` (a shell command line ending in
/// `"$@"`), with `env_remove` unset and `env_set` set; returns its combined output,
/// failing on its failure.
fn in_child(test: &str, wrap: &str, env_remove: &[&str], env_set: &[(&str, &Path)]) -> String {
    let exe = std::env::current_exe().expect("the test binary");
    // libtest names a test by its path below the crate root: `oauth_store::<test>`.
    let module = module_path!().split_once("::").map_or("", |(_, m)| m);
    let test = format!("{module}::{test}");
    let mut cmd = Command::new("sh");
    cmd.arg("-c")
        .arg(wrap)
        .arg("sh")
        .arg(exe)
        .args(["--exact", &test, "--nocapture", "--test-threads=1"])
        .env(CHILD, "1");
    for k in env_remove {
        cmd.env_remove(k);
    }
    for (k, v) in env_set {
        cmd.env(k, v);
    }
    let out = cmd.output().expect("run the child");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        out.status.success(),
        "the child failed ({}):\n{text}",
        out.status
    );
    assert!(text.contains("1 passed"), "the child ran no test:\n{text}");
    text
}

#[tokio::test]
async fn keyring_store_in_a_secret_service_session_round_trips_and_auto_prefers_it() {
    if std::env::var_os(CHILD).is_some() {
        let dir = temp_dir("keyring-store");
        let s = store(TokenStoreKind::Keyring, &dir);
        assert_eq!(s.describe().await, "the OS keychain");
        round_trip(&s, &format!("kr-{}", std::process::id())).await;
        // "auto" finds the keychain: nothing goes to a file.
        let auto = store(TokenStoreKind::Auto, &dir);
        round_trip(&auto, &format!("auto-{}", std::process::id())).await;
        assert!(!dir.exists(), "auto wrote files beside a working keychain");
        println!("keyring round trip ok");
        return;
    }
    let missing: Vec<&str> = ["dbus-run-session", "gnome-keyring-daemon"]
        .into_iter()
        .filter(|p| {
            !Command::new("sh")
                .args(["-c", &format!("command -v {p}")])
                .status()
                .is_ok_and(|s| s.success())
        })
        .collect();
    if !missing.is_empty() {
        // CI installs both (.ci/run); elsewhere they are optional.
        assert!(
            std::env::var_os("CI").is_none(),
            "{missing:?} not installed (apt-get install dbus gnome-keyring)"
        );
        eprintln!("skipped: {missing:?} not installed (apt-get install dbus gnome-keyring)");
        return;
    }
    // A private session bus, and a fresh keyring folder (XDG_DATA_HOME): the daemon
    // creates the login keyring with this password and leaves it unlocked.
    let data = temp_dir("keyring-data");
    std::fs::create_dir_all(&data).unwrap();
    let wrap = "exec dbus-run-session -- sh -c 'echo -n mcpmux-test | gnome-keyring-daemon --unlock --components=secrets >/dev/null && exec \"$@\"' sh \"$@\"";
    let out = in_child(
        "keyring_store_in_a_secret_service_session_round_trips_and_auto_prefers_it",
        wrap,
        &[],
        &[("XDG_DATA_HOME", &data)],
    );
    let _ = std::fs::remove_dir_all(&data);
    assert!(out.contains("keyring round trip ok"), "{out}");
}

#[tokio::test]
async fn auto_store_without_a_keychain_falls_back_to_0600_files() {
    if std::env::var_os(CHILD).is_some() {
        use std::os::unix::fs::PermissionsExt;
        let dir = temp_dir("file-store");
        let s = store(TokenStoreKind::Auto, &dir);
        assert_eq!(s.describe().await, dir.display().to_string());
        s.save_grant("up", &grant(7)).await.unwrap();
        let files: Vec<_> = std::fs::read_dir(&dir)
            .unwrap()
            .map(|e| e.unwrap().path())
            .collect();
        assert_eq!(files.len(), 1, "{files:?}");
        let mode = std::fs::metadata(&files[0]).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600, "the token file's mode");
        let dir_mode = std::fs::metadata(&dir).unwrap().permissions().mode() & 0o777;
        assert_eq!(dir_mode, 0o700, "the store folder's mode");
        let name = files[0].file_name().unwrap().to_string_lossy().into_owned();
        assert!(!name.contains(&grant(7).access_token), "{name}");
        s.forget_grant("up").await.unwrap();
        round_trip(&s, "up").await;
        std::fs::remove_dir_all(&dir).unwrap();
        println!("file fallback ok");
        return;
    }
    let out = in_child(
        "auto_store_without_a_keychain_falls_back_to_0600_files",
        "exec \"$@\"",
        &[
            "DBUS_SESSION_BUS_ADDRESS",
            "DBUS_SYSTEM_BUS_ADDRESS",
            "XDG_RUNTIME_DIR",
        ],
        &[],
    );
    assert!(out.contains("file fallback ok"), "{out}");
}
