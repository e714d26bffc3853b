#!/usr/bin/env bash
# The held-writes section of make bench (scripts/bench.sh runs it when
# BENCH_ONLY includes "held"; it also runs on its own as root): write
# workloads as the agent (uid 1001) in its view, held for review against
# the same written directly, and reading unchanged files in a view whose
# principal holds changes against one that holds none. Ratios are the
# median of per-round ratios (each round runs both back to back), lower is
# better.
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=${BIN:-$PWD/bin/neuralisfs}
TREE=${BENCH_HELD_TREE:-$(go env GOROOT)/src/net}
ROUNDS=${BENCH_HELD_ROUNDS:-5}
[ "$(id -u)" -eq 0 ] || { echo "bench-held: run as root" >&2; exit 1; }
[ -x "$BIN" ] || { echo "bench-held: build first (make build)" >&2; exit 1; }
W=$(mktemp -d /tmp/neuralisfs-bench-held.XXXXXX)
chmod 0755 "$W"
cleanup() {
  for m in "$W/view" "$W/mnt"; do umount -l "$m" 2>/dev/null || true; done
  [ -n "${PID:-}" ] && wait "$PID" 2>/dev/null || true
  rm -rf "$W"
}
trap cleanup EXIT
mkdir -p "$W/h" "$W/p" "$W/mnt" "$W/view"
tar cf "$W/tree.tar" -C "$(dirname "$TREE")" "$(basename "$TREE")"
# The read workload's tree, in both sources.
for s in h p; do tar xf "$W/tree.tar" -C "$W/$s"; mv "$W/$s/$(basename "$TREE")" "$W/$s/ro"; done
chown -R 1001:1001 "$W/h" "$W/p" && chmod 0755 "$W/h" "$W/p"
cp "$W/tree.tar" "$W/h/" && cp "$W/tree.tar" "$W/p/" && chown 1001 "$W/h/tree.tar" "$W/p/tree.tar"
cat > "$W/config.toml" <<TOML
state_dir = "$W/state"
[index]
enabled = false
[[source]]
slug = "h"
kind = "local"
path = "$W/h"
[[source]]
slug = "p"
kind = "local"
path = "$W/p"
[[principal]]
name = "agent"
uids = [1001]
[[rule]]
uri = "h://**"
who = ["agent"]
review = ["write"]
[[view]]
principal = "agent"
mountpoint = "$W/view"
TOML
"$BIN" mount -c "$W/config.toml" "$W/mnt" > "$W/out" 2> "$W/err" &
PID=$!
for _ in $(seq 1 100); do [ "$(grep -c 'mounted at' "$W/out" 2>/dev/null)" -ge 2 ] && break; sleep 0.1; done
now() { date +%s.%N; }
as_agent() { setpriv --reuid 1001 --regid 1001 --clear-groups "$@"; }
work() { # source workload round → seconds
  local D="$W/view/$1" w=$2 r=$3 s
  s=$(now)
  case $w in
    create) as_agent /usr/bin/python3 -c "
import os
d='$D/c$r'; os.makedirs(d)
for i in range(1000): open('%s/f%04d' % (d, i), 'w').write(('c $r %04d ' % i * 400)[:4096])" ;;
    overwrite) as_agent /usr/bin/python3 -c "
d='$D/c$r'
for i in range(1000): open('%s/f%04d' % (d, i), 'w').write(('o $r %04d ' % i * 400)[:4096])" ;;
    untar) as_agent sh -c "mkdir '$D/u$r' && tar xf '$D/tree.tar' -C '$D/u$r'" ;;
    rm) as_agent rm -rf "$D/c$r" "$D/u$r" ;;
    read) as_agent sh -c "cd '$D/ro' && for k in 1 2 3 4 5; do find . -type f -exec cat {} + > /dev/null; done" ;;
  esac
  echo "$(now) - $s" | bc -l
}
median() { printf '%s\n' "$@" | sort -g | awk '{v[NR]=$1} END {print v[int((NR+1)/2)]}'; }
declare -A T RATIO
for r in $(seq 1 "$ROUNDS"); do
  order="h p"; [ $((r % 2)) = 0 ] && order="p h"
  for w in create overwrite untar rm; do
    declare -A one=()
    for s in $order; do sync; one[$s]=$(work "$s" "$w" "$r"); T[$w,$s]="${T[$w,$s]:-} ${one[$s]}"; done
    RATIO[$w]="${RATIO[$w]:-} $(echo "${one[h]} / ${one[p]}" | bc -l)"
  done
done
# Reads of unchanged files: the agent holds changes in h (everything the
# write rounds left, plus edits beside the read tree), none in p.
as_agent sh -c "for i in 1 2 3 4 5 6 7 8 9 10; do echo held > '$W/view/h/ro/held-\$i'; done"
as_agent sh -c "cd '$W/view/h/ro' && find . -type f -name '*.go' | head -20 | while read f; do echo '// held' >> \"\$f\"; done"
as_agent sh -c "cd '$W/view/p/ro' && find . -type f -name '*.go' | head -20 | while read f; do echo '// direct' >> \"\$f\"; done; for i in 1 2 3 4 5 6 7 8 9 10; do echo direct > held-\$i; done"
for s in h p; do work "$s" read 0 >/dev/null; done # warm both
for r in $(seq 1 "$ROUNDS"); do
  order="h p"; [ $((r % 2)) = 0 ] && order="p h"
  declare -A one=()
  for s in $order; do one[$s]=$(work "$s" read "$r"); T[read,$s]="${T[read,$s]:-} ${one[$s]}"; done
  RATIO[read]="${RATIO[read]:-} $(echo "${one[h]} / ${one[p]}" | bc -l)"
done
files=$(find "$W/p/ro" -type f | wc -l)
printf '%-52s %10s %10s %8s\n' "held writes, in a view (median of $ROUNDS)" "held" "direct" "held/dir"
for w in create overwrite untar rm read; do
  printf '%-52s %9.3fs %9.3fs %8.2f\n' "$w" "$(median ${T[$w,h]})" "$(median ${T[$w,p]})" "$(median ${RATIO[$w]})"
done
echo "(create, overwrite: 1000 files of 4 KiB; untar: $(tar tf "$W/tree.tar" | wc -l) entries of $(basename "$TREE"); rm: rm -rf of both;"
echo " read: every one of $files unchanged files five times, warm, in a view whose principal holds changes (h) or none (p))"
"$BIN" unmount "$W/mnt" >/dev/null 2>&1 || true
