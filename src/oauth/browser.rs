//! Opening the authorization URL: `$BROWSER` when set (the command, with the URL as
//! its last argument, or in place of `%s`), else the platform's opener (`open` on
//! macOS, the URL handler on Windows, `xdg-open` elsewhere).
//!
//! Never waits for the browser to close: the child is reaped in the background.

/// Opens `url`.
///
/// # Errors
/// The command could not be started.
pub fn open(url: &str) -> Result<(), String> {
    // `$BROWSER` may list several commands separated by `:`; the first that names one
    // is used (an empty entry, as in `:firefox`, is skipped).
    let browser = std::env::var("BROWSER").ok().and_then(|b| {
        b.split(':')
            .map(|c| c.split_whitespace().map(str::to_owned).collect::<Vec<_>>())
            .find(|words| !words.is_empty())
    });
    let mut cmd = match browser {
        Some(mut words) => {
            let program = words.remove(0);
            let mut c = tokio::process::Command::new(program);
            if words.iter().any(|w| w.contains("%s")) {
                c.args(words.iter().map(|w| w.replace("%s", url)));
            } else {
                c.args(&words).arg(url);
            }
            c
        }
        None if cfg!(target_os = "macos") => {
            let mut c = tokio::process::Command::new("open");
            c.arg(url);
            c
        }
        None if cfg!(windows) => {
            // Not `cmd /C start`: cmd would split the URL at its `&`s.
            let mut c = tokio::process::Command::new("rundll32.exe");
            c.arg("url.dll,FileProtocolHandler").arg(url);
            c
        }
        None => {
            let mut c = tokio::process::Command::new("xdg-open");
            c.arg(url);
            c
        }
    };
    cmd.stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null());
    let mut child = cmd.spawn().map_err(|e| {
        format!("cannot start the browser ({e}); use --no-browser and open the URL yourself")
    })?;
    tokio::spawn(async move {
        let _ = child.wait().await;
    });
    Ok(())
}
