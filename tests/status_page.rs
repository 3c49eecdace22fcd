//! The live status page (`GET /`) in a real headless Chromium (the system's `chromium`
//! package: a prerequisite the README lists, checked by `tests/interop/setup.sh` and
//! installed by `.ci/run`; driven by puppeteer-core from the interop lock file,
//! `tests/interop/status_page.mjs`): it loads without console errors, shows the
//! upstream as up, and the holder count of a URI appears and goes on screen within
//! 2 s of a client subscribing and leaving.

use crate::common;
use crate::harness;

use common::http::Daemon;
use common::scripted_config;
use harness::*;
use serde_json::Value;

/// The browser: `$CHROMIUM`, else the Debian package's path.
fn chromium() -> String {
    std::env::var("CHROMIUM").unwrap_or_else(|_| "/usr/bin/chromium".to_owned())
}

#[tokio::test]
async fn the_status_page_shows_holders_come_and_go_live() {
    ensure_peers();
    let browser = chromium();
    assert!(
        std::path::Path::new(&browser).exists(),
        "no Chromium at {browser}: install it with `sudo apt-get install chromium` \
         (Debian/Ubuntu; README, \"Quick start\"), or set CHROMIUM to a Chromium binary"
    );
    let d = Daemon::start(&scripted_config(
        "[listen]\nhttp = \"127.0.0.1:0\"\n",
        "",
        "",
    ))
    .await;
    let out = tokio::time::timeout(
        std::time::Duration::from_secs(120),
        tokio::process::Command::new(node())
            .arg(interop_dir().join("status_page.mjs"))
            .args([
                "--url",
                &d.url,
                "--uri",
                "test://static/1",
                "--chromium",
                &browser,
            ])
            .output(),
    )
    .await
    .expect("the browser run finishes")
    .expect("run node");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stdout}\n{stderr}");
    let r: Value = serde_json::from_str(stdout.lines().last().unwrap_or_default())
        .unwrap_or_else(|e| panic!("{e}: {stdout}\n{stderr}"));
    assert_eq!(r["upstreamUp"], true, "{r}");
    assert_eq!(r["consoleErrors"], serde_json::json!([]), "{r}");
    // The page follows the daemon live (its event stream checks every 500 ms); the
    // bound is loose for a loaded machine, where a headless browser is slow too.
    for key in ["appearMs", "disappearMs"] {
        let ms = r[key].as_u64().unwrap();
        println!("{key} = {ms} ms");
        assert!(
            ms <= 8000,
            "{key} = {ms} ms: the page must follow within seconds ({r})"
        );
    }
}
