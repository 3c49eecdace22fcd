#!/usr/bin/env bash
# CPU per forwarded `tools/call` that `mcpmux stdio` adds, from `perf stat` task-clock
# (a figure that moves less with the host than latency does; BENCHMARKS.md).
#
#   cargo build --release --bins --examples
#   bash benches/stdio_cpu.sh [TARGET_PROFILE_DIR]     # default target/release
#
# `loadgen drive` makes N sequential calls through one stdio program under `perf stat`
# (children included). Two call counts cancel start-up and shutdown; the same runs
# straight to `scripted-upstream` cancel the upstream's and the client's share, so what
# is left is mcpmux's own. Needs `perf` (Debian: linux-perf) with software events.
set -euo pipefail
dir=${1:-${CARGO_TARGET_DIR:-target}/release}
loadgen="$dir/examples/loadgen"
[ -x "$loadgen" ] || { echo "stdio_cpu.sh: $loadgen not found: cargo build --release --bins --examples" >&2; exit 1; }
command -v perf >/dev/null || { echo "stdio_cpu.sh: perf not found (apt-get install linux-perf)" >&2; exit 1; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
small=2000
large=22000
for n in $small $large; do
  "$loadgen" drive --calls "$n" perf stat -x, -o "$tmp/mux$n" -e task-clock,context-switches \
    -- "$dir/mcpmux" stdio --config '{config}' >/dev/null 2>>"$tmp/log" || { cat "$tmp/log" >&2; exit 1; }
  "$loadgen" drive --calls "$n" perf stat -x, -o "$tmp/direct$n" -e task-clock,context-switches \
    -- "$dir/scripted-upstream" >/dev/null 2>>"$tmp/log" || { cat "$tmp/log" >&2; exit 1; }
done
# perf stat -x, writes: value,unit,event,...
val() { awk -F, -v k="$2" '$3 == k { print $1 }' "$tmp/$1"; }
awk -v n=$((large - small)) \
  -v m1="$(val mux$small task-clock)" -v m2="$(val mux$large task-clock)" \
  -v d1="$(val direct$small task-clock)" -v d2="$(val direct$large task-clock)" \
  -v c1="$(val mux$small context-switches)" -v c2="$(val mux$large context-switches)" \
  -v e1="$(val direct$small context-switches)" -v e2="$(val direct$large context-switches)" \
  'BEGIN {
     printf "mcpmux stdio adds %.1f us of CPU and %.2f context switches per call\n",
       ((m2 - m1) - (d2 - d1)) / n * 1000, ((c2 - c1) - (e2 - e1)) / n
   }'
