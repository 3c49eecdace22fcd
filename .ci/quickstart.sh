#!/usr/bin/env bash
# Runs the README's quick start as written, from a clean clone in a temporary folder:
# `cargo run --release -- serve --config config.example.toml` must become ready (print
# `mcpmux listening on http://127.0.0.1:7878/mcp`), and the official TypeScript SDK
# client must list the example upstream's tools (`echo` among them) through it.
#
#   bash .ci/quickstart.sh
#
# The clone is of this checkout's HEAD (committed state). Its release build shares this
# checkout's target directory ($CARGO_TARGET_DIR if set, else ./target), so CI builds the
# dependencies once. The example config's port 7878 is fixed: the script fails at once,
# saying so, when something already listens there. The example upstream comes from the
# npm registry through `npx`. Bounds: $QUICKSTART_READY_SECS (default 900) for build and
# start, 120 s for the tools to be listed. Exit 0 on success; otherwise non-zero with the
# reason and the tail of mcpmux's output on stderr. The daemon (its whole process group:
# cargo, mcpmux, the npx upstream) is stopped in every case.
set -euo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
ready_secs="${QUICKSTART_READY_SECS:-900}"
url="http://127.0.0.1:7878/mcp"
ready_line="mcpmux listening on $url"

log() { echo "quickstart.sh: $*" >&2; }
fail() { log "FAILED: $*"; exit 1; }

if (exec 3<>/dev/tcp/127.0.0.1/7878) 2>/dev/null; then
  fail "port 7878 is busy (the example config listens on 127.0.0.1:7878): stop whatever listens there and run again"
fi

# The SDK client, pinned by tests/interop/package-lock.json (no browser needed here).
bash "$repo/tests/interop/setup.sh" --no-browser

work="$(mktemp -d "${TMPDIR:-/tmp}/mcpmux-quickstart.XXXXXX")"
pgid=""
stop_daemon() {
  [ -n "$pgid" ] || return 0
  kill -TERM -- "-$pgid" 2>/dev/null || return 0
  for _ in $(seq 1 100); do
    kill -0 -- "-$pgid" 2>/dev/null || { pgid=""; return 0; }
    sleep 0.1
  done
  kill -KILL -- "-$pgid" 2>/dev/null || true
  pgid=""
}
cleanup() {
  stop_daemon
  rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

git clone --quiet "$repo" "$work/mcpmux"
cd "$work/mcpmux"
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$repo/target}"
log "in $work/mcpmux (target dir $CARGO_TARGET_DIR): cargo run --release -- serve --config config.example.toml"
start=$SECONDS
# Its own session and process group, so stopping it stops cargo, mcpmux and the upstream.
setsid cargo run --release -- serve --config config.example.toml \
  >"$work/stdout" 2>"$work/stderr" </dev/null &
pgid=$!

show_output() {
  log "--- mcpmux stdout ---"; tail -n 20 "$work/stdout" >&2 || true
  log "--- mcpmux stderr (tail) ---"; tail -n 40 "$work/stderr" >&2 || true
}
until grep -qxF "$ready_line" "$work/stdout"; do
  if ! kill -0 "$pgid" 2>/dev/null; then
    show_output
    if grep -q "cannot listen on" "$work/stderr"; then
      fail "mcpmux could not listen on 127.0.0.1:7878 (port busy?)"
    fi
    fail "the serve command exited before it was ready"
  fi
  if [ $((SECONDS - start)) -ge "$ready_secs" ]; then
    show_output
    fail "not ready within ${ready_secs} s (no line \"$ready_line\")"
  fi
  sleep 1
done
ready=$((SECONDS - start))
log "ready after ${ready} s (build and start): $ready_line"

if ! listed="$(node "$repo/tests/interop/list_tools.mjs" "$url" --expect echo --timeout-ms 120000)"; then
  show_output
  fail "the TypeScript SDK client did not list the tool echo through mcpmux"
fi
log "the TypeScript SDK client listed through mcpmux: $listed"
stop_daemon
log "OK: ready after ${ready} s, tools listed after $((SECONDS - start)) s"
