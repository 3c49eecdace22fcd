#!/usr/bin/env bash
# Checks the code's shape (docs/architecture.md, "Shape"), from the repository root:
#   1. no file under src/downstream/, src/upstream/ or src/observe/ names `crate::hub`
#      (edges and the operator's view never import the hub);
#   2. no non-test file under src/ is over 600 lines;
#   3. the protocol era stays at the edges: a non-test file under src/hub/ or src/state/
#      names an era (`modern`, `legacy`, `Era`, a protocol version such as 2026-07-28;
#      comments do not count) at most as often as .ci/era-allow.txt lets it, each entry
#      with its reason. The list only shrinks: a file not in it may name no era;
#   4. no files of one module folder sit in a circle (a names b through `super::`, and b,
#      directly or through others, names a): .ci/file_cycles.py.
# Exit 0 when all hold; otherwise 1, naming each breach.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
fail=0
breach() { echo "structure.sh: $*" >&2; fail=1; }

# Files that are tests: *tests*.rs and anything under a tests/ folder.
is_test() { case "$1" in *tests*.rs|*/tests/*) return 0 ;; *) return 1 ;; esac; }

# 1. Edges never import the hub.
while IFS= read -r hit; do
  breach "an edge imports the hub: $hit"
done < <(grep -rn --include='*.rs' -E 'crate::hub\b' src/downstream src/upstream src/observe || true)

# 2. No non-test source file over 600 lines.
while IFS= read -r f; do
  is_test "$f" && continue
  n=$(wc -l < "$f")
  if [ "$n" -gt 600 ]; then breach "$f has $n lines (at most 600)"; fi
done < <(find src -name '*.rs' | sort)

# 3. Era names in the hub and the state, within the allow-list.
allow=.ci/era-allow.txt
era_count() {
  grep -v -E '^\s*//' "$1" | grep -c -i -E 'modern|legacy|\bEra\b|20[0-9]{2}-[0-9]{2}-[0-9]{2}' || true
}
while IFS= read -r f; do
  is_test "$f" && continue
  n=$(era_count "$f")
  [ "$n" -eq 0 ] && continue
  budget=$(awk -v f="$f" '$1 == f { print $2 }' "$allow")
  if [ -z "$budget" ]; then
    breach "$f names a protocol era $n time(s) and is not in $allow (move the era to an edge, or add the file with its reason)"
  elif [ "$n" -gt "$budget" ]; then
    breach "$f names a protocol era $n times, more than the $budget $allow allows"
  fi
done < <(find src/hub src/state -name '*.rs' | sort)
# Every entry must still be needed (the list only shrinks).
while read -r f budget _; do
  case "$f" in ''|'#'*) continue ;; esac
  if [ ! -f "$f" ]; then breach "$allow lists $f, which does not exist"; continue; fi
  n=$(era_count "$f")
  if [ "$n" -lt "$budget" ]; then breach "$allow allows $f $budget era names, it has $n now: lower it"; fi
done < "$allow"

# 4. No circles among sibling files.
if ! circles=$(python3 .ci/file_cycles.py src); then
  while IFS= read -r line; do breach "${line#file_cycles.py: }"; done <<< "$circles"
fi

if [ "$fail" -ne 0 ]; then exit 1; fi
echo "structure.sh: edges free of the hub, files within 600 lines, era names within $allow, no file circles"
