//! mcpmux's own stdin and stdout as async byte streams, for `mcpmux stdio` and
//! `mcpmux connect`.
//!
//! Hosts start a stdio server with pipes on fd 0 and 1. On unix those pipes are read
//! and written here through tokio's reactor (`tokio::net::unix::pipe`), so a line in
//! or out costs no hand-off to the blocking thread pool: `tokio::io::stdin()` and
//! `stdout()` run every read and write on a blocking thread and wake the runtime
//! afterwards, two thread hops per request (docs/architecture.md, "Stdio mode and
//! mcpmux connect"). Anything else (a file, a terminal, a TCP socket), every
//! platform but unix, and a stdout that shares its open file with stderr fall back to
//! `tokio::io`'s blocking-pool streams. A Unix domain socket on fd 0 or 1 (Node.js
//! hosts spawn their children with socketpairs) goes into the reactor the same way.
//!
//! Must never make stderr non-blocking: the logs are written to it synchronously, and
//! a non-blocking stderr would drop log lines with `EAGAIN`. Putting a pipe in tokio's
//! reactor sets `O_NONBLOCK` on its open file, which every descriptor of that file
//! shares; so stdin and stdout go async only when fd 2 is another file.

use std::pin::Pin;

use tokio::io::{AsyncRead, AsyncWrite};

/// A boxed reader of mcpmux's stdin.
pub type Input = Pin<Box<dyn AsyncRead + Send>>;
/// A boxed writer of mcpmux's stdout.
pub type Output = Pin<Box<dyn AsyncWrite + Send>>;

/// mcpmux's stdin: an async pipe when it is one, else tokio's blocking-pool reader.
/// Call from inside the runtime.
#[must_use]
pub fn stdin() -> Input {
    #[cfg(unix)]
    if let Some(r) = unix::pipe_stdin() {
        return r;
    }
    Box::pin(tokio::io::stdin())
}

/// mcpmux's stdout: an async pipe when it is one that stderr does not share, else
/// tokio's blocking-pool writer. Call from inside the runtime.
#[must_use]
pub fn stdout() -> Output {
    #[cfg(unix)]
    if let Some(w) = unix::pipe_stdout() {
        return w;
    }
    Box::pin(tokio::io::stdout())
}

#[cfg(unix)]
mod unix {
    use std::fs::File;
    use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
    use std::os::unix::fs::{FileTypeExt, MetadataExt};
    use std::pin::Pin;

    use tokio::io::{AsyncRead, AsyncWrite};
    use tokio::net::unix::pipe;

    /// What a standard descriptor is: a duplicate of it, its kind and its file's
    /// (device, inode).
    struct Std {
        fd: OwnedFd,
        socket: bool,
        fifo: bool,
        id: (u64, u64),
    }

    fn inspect(fd: BorrowedFd<'_>) -> Option<Std> {
        let file = File::from(fd.try_clone_to_owned().ok()?);
        let meta = file.metadata().ok()?;
        let kind = meta.file_type();
        Some(Std {
            socket: kind.is_socket(),
            fifo: kind.is_fifo(),
            id: (meta.dev(), meta.ino()),
            fd: OwnedFd::from(file),
        })
    }

    /// A Unix domain socket (Node.js and Electron hosts give their children
    /// socketpairs as stdio) in the reactor; `None` for any other socket.
    fn unix_socket(fd: OwnedFd) -> Option<tokio::net::UnixStream> {
        let s = std::os::unix::net::UnixStream::from(fd);
        s.local_addr().ok()?;
        s.set_nonblocking(true).ok()?;
        tokio::net::UnixStream::from_std(s).ok()
    }

    pub(super) fn pipe_stdin() -> Option<Pin<Box<dyn AsyncRead + Send>>> {
        let s = inspect(std::io::stdin().as_fd())?;
        // One socket on fds 0, 1 and 2 (a systemd socket unit's default): making it
        // non-blocking would make the log writes fail with EAGAIN.
        if inspect(std::io::stderr().as_fd()).map(|e| e.id) == Some(s.id) {
            return None;
        }
        if s.fifo {
            return Some(Box::pin(pipe::Receiver::from_owned_fd(s.fd).ok()?));
        }
        if s.socket {
            return Some(Box::pin(unix_socket(s.fd)?));
        }
        None
    }

    pub(super) fn pipe_stdout() -> Option<Pin<Box<dyn AsyncWrite + Send>>> {
        let s = inspect(std::io::stdout().as_fd())?;
        // The same file as stderr (`2>&1`): making it non-blocking would make the
        // log writes fail with EAGAIN under pressure.
        if inspect(std::io::stderr().as_fd()).map(|e| e.id) == Some(s.id) {
            return None;
        }
        if s.fifo {
            return Some(Box::pin(pipe::Sender::from_owned_fd(s.fd).ok()?));
        }
        if s.socket {
            return Some(Box::pin(unix_socket(s.fd)?));
        }
        None
    }
}
