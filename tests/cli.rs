//! The `mcpmux check` command: resolved config on success, a non-zero exit naming the
//! key and line on error; `-c` is `--config`.

use crate::common;

use common::*;
use std::process::Command;

#[test]
fn check_prints_the_resolved_config_with_secrets_redacted() {
    let cfg = temp_config(
        "[servers.remote]\nurl = \"http://127.0.0.1:9/mcp\"\nheaders = { Authorization = \"Bearer hunter2\" }\n",
    );
    let out = Command::new(mcpmux_bin())
        .args(["check", "--config", cfg.to_str().unwrap()])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(text.contains("[servers.remote]"), "{text}");
    assert!(
        text.contains("max_message_bytes = 4194304"),
        "defaults are filled in: {text}"
    );
    assert!(
        !text.contains("hunter2"),
        "header values are redacted: {text}"
    );
}

#[test]
fn check_fails_naming_the_unknown_key_and_its_line() {
    let cfg = temp_config(
        "[listen]\npath = \"/mcp\"\nbogus_key = 1\n\n[servers.a]\ncommand = \"true\"\n",
    );
    let out = Command::new(mcpmux_bin())
        .args(["check", "--config", cfg.to_str().unwrap()])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8(out.stderr).unwrap();
    assert!(err.contains("bogus_key") && err.contains(":3"), "{err}");
}

#[test]
fn check_fails_on_a_missing_file() {
    let out = Command::new(mcpmux_bin())
        .args(["check", "--config", "/nonexistent/mcpmux.toml"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("/nonexistent/mcpmux.toml"));
}

#[test]
fn c_is_short_for_config() {
    let cfg = temp_config("[servers.a]\ncommand = \"true\"\n");
    let out = Command::new(mcpmux_bin())
        .args(["check", "-c", cfg.to_str().unwrap()])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(String::from_utf8_lossy(&out.stdout).contains("[servers.a]"));
}

/// A profile whose token variable is unset is refused by `check`, as `serve` refuses it.
#[test]
fn check_fails_on_a_profile_token_variable_that_is_not_set() {
    let var = "MCPMUX_TEST_PROFILE_TOKEN_NEVER_SET";
    let cfg = temp_config(&format!(
        "[servers.a]\ncommand = \"true\"\n\n[profiles.p]\nservers = [\"a\"]\nauth_token_env = \"{var}\"\n"
    ));
    let out = Command::new(mcpmux_bin())
        .args(["check", "--config", cfg.to_str().unwrap()])
        .env_remove(var)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains(var), "{err}");
}

/// A stdout that cannot be written is an error message and exit code 1, not a panic.
#[cfg(target_os = "linux")]
#[test]
fn check_reports_a_stdout_it_cannot_write() {
    let cfg = temp_config("[servers.a]\ncommand = \"true\"\n");
    let full = std::fs::OpenOptions::new()
        .write(true)
        .open("/dev/full")
        .unwrap();
    let out = Command::new(mcpmux_bin())
        .args(["check", "-c", cfg.to_str().unwrap()])
        .stdout(full)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("cannot write to stdout"), "{err}");
}
