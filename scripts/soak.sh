#!/usr/bin/env bash
# soak.sh: a long run of the daemon under a mixed load (issue 16).
#
# Eight processes mix reads, writes, renames, `git status`, `.status`
# reads, `.neuralis/search/` reads and `neuralisfs revert` on a generated
# git tree of SOAK_FILES files (default 50000) for SOAK_MINUTES (default
# 30). Every SOAK_EVERY seconds (default 60) it prints one line: the
# daemon's RSS, open descriptors, goroutines (go_goroutines from the
# metrics endpoint) and the operations and errors so far. At the end it
# prints a table per process and a table of the samples, and exits
# non-zero when any operation failed or a resource grew without bound.
#
# "Without bound" is judged on the samples after the first (the first
# index build and warm caches are done by then): the last sample may not
# exceed the largest of the first half of them by more than 25% of RSS or
# of its anonymous part, 32 descriptors or 64 goroutines. A leak grows steadily and fails this;
# the noise of a steady state does not.
#
# Needs root, /dev/fuse, git and python3. SOAK_DIR (default a new folder
# under /tmp) holds the tree, the state and the logs. SOAK_MAX_RECORDS sets
# the journal's record bound ([journal] max_records).
set -u
MINUTES=${SOAK_MINUTES:-30}
FILES=${SOAK_FILES:-50000}
EVERY=${SOAK_EVERY:-60}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
W=${SOAK_DIR:-$(mktemp -d /tmp/neuralisfs-soak-XXXXXX)}
mkdir -p "$W"
BIN=$W/neuralisfs
M=$W/mnt
PORT=$((20000 + $$ % 20000))
PIDS=()

cleanup() {
  for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null; done
  [ -n "${DPID:-}" ] && { "$BIN" unmount "$M" >/dev/null 2>&1 || umount -l "$M" 2>/dev/null; wait "$DPID" 2>/dev/null; }
  mountpoint -q "$M" 2>/dev/null && umount -l "$M"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

echo "soak: $MINUTES min, $FILES files, in $W" >&2
(cd "$ROOT" && go build -o "$BIN" ./cmd/neuralisfs) || exit 1

# The tree: folders of 100 text files, each with a common word and a
# word of its folder, committed to git.
rm -rf "$W/repo" "$W/state" "$M"
mkdir -p "$W/repo" "$M"
python3 - "$W/repo" "$FILES" <<'PY'
import os, sys
root, n = sys.argv[1], int(sys.argv[2])
for i in range(n):
    d = os.path.join(root, "d%03d" % (i // 100))
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, "f%05d.txt" % i), "w") as f:
        f.write("soakword folder%03d file%05d\n" % (i // 100, i) + "line of generated text\n" * (i % 40 + 1))
PY
mkdir -p "$W/repo/soak-w" "$W/repo/soak-mv" "$W/repo/soak-rv"
git -C "$W/repo" init -q && git -C "$W/repo" add -A && git -C "$W/repo" -c user.name=soak -c user.email=soak@example.com commit -qm seed || exit 1

cat > "$W/config.toml" <<TOML
state_dir = "$W/state"

[[source]]
slug = "repo"
kind = "git"
path = "$W/repo"

[metrics]
listen = "127.0.0.1:$PORT"
TOML
# SOAK_MAX_RECORDS sets [journal] max_records (default 100000), so a short
# soak reaches the journal's record bound and shows memory level off.
[ -n "${SOAK_MAX_RECORDS:-}" ] && printf '\n[journal]\nmax_records = %d\n' "$SOAK_MAX_RECORDS" >> "$W/config.toml"

# The daemon writes a heap profile when it stops ($W/heap.pprof; go tool
# pprof -sample_index=inuse_space $W/neuralisfs $W/heap.pprof).
"$BIN" mount -memprofile "$W/heap.pprof" -c "$W/config.toml" "$M" > "$W/daemon.out" 2> "$W/daemon.err" &
DPID=$!
until grep -q "msg=indexed source=repo" "$W/daemon.err" 2>/dev/null; do
  kill -0 "$DPID" 2>/dev/null || { echo "soak: the daemon exited:" >&2; tail -5 "$W/daemon.err" >&2; exit 1; }
  sleep 0.2
done
echo "soak: mounted and indexed: $(grep -o 'walked=[0-9]* reindexed=[0-9]* .*took=[^ ]*' "$W/daemon.err" | head -1)" >&2

END=$(( $(date +%s) + MINUTES * 60 ))
R=$M/repo
mkdir -p "$W/counts"
: > "$W/errors.log"

# worker NAME BODY: runs BODY (a shell snippet; $i counts) until END,
# counting successes and failures; a failure's output goes to errors.log.
worker() {
  local name=$1 body=$2
  (
    ok=0 err=0 i=0
    while [ "$(date +%s)" -lt "$END" ]; do
      i=$((i + 1))
      if out=$(i=$i M=$M R=$R W=$W BIN=$BIN FILES=$FILES bash -c "$body" 2>&1); then
        ok=$((ok + 1))
      else
        err=$((err + 1))
        printf '%s [%s #%d] %s\n' "$(date +%T)" "$name" "$i" "$(echo "$out" | head -3 | tr '\n' ' ')" >> "$W/errors.log"
      fi
      echo "$ok $err" > "$W/counts/$name.tmp" && mv "$W/counts/$name.tmp" "$W/counts/$name"
    done
  ) &
  PIDS+=($!)
}

rnd='n=$(( (RANDOM * 32768 + RANDOM) % FILES )); f=$(printf "d%03d/f%05d.txt" $((n / 100)) $n)'
worker read   "$rnd"'; grep -q soakword "$R/$f"'
worker write  'f=$R/soak-w/w$((i % 200)).txt; echo "soakword written $i" > "$f" && grep -q "written $i" "$f"'
worker rename 'echo "soakword moving $i" > "$R/soak-mv/a$((i % 50))" && mv "$R/soak-mv/a$((i % 50))" "$R/soak-mv/b$((i % 50))" && mv "$R/soak-mv/b$((i % 50))" "$R/soak-mv/c$((i % 50))" && rm "$R/soak-mv/c$((i % 50))"'
worker git    'git -C "$R" status --porcelain > /dev/null'
worker status "$rnd"'; d=$(dirname "$f"); head -c 1000000 "$R/$d/.status" | grep -q "^##" && cat "$R/.status" > /dev/null'
worker search 'q=folder$(printf %03d $((RANDOM % (FILES / 100 + 1)))); cat "$M/.neuralis/search/soakword" | grep -q repo:// && cat "$M/.neuralis/search/$q" > /dev/null'
worker revert 'f=soak-rv/r$((i % 20)).txt; echo "soakword first $i" > "$R/$f" && echo "second $i" > "$R/$f" && "$BIN" revert -c "$W/config.toml" "repo://$f" > /dev/null && grep -qx "soakword first $i" "$R/$f"'
worker mixed  "$rnd"'; cat "$R/$f" > /dev/null && cp "$R/$f" "$R/soak-w/copy$((i % 100)).txt" && ls "$R/$(dirname "$f")" > /dev/null && rm "$R/soak-w/copy$((i % 100)).txt"'

# metrics prints go_goroutines and the Go heap in use (MiB) from the
# daemon's metrics endpoint ("? ?" when it does not answer).
metrics() {
  python3 -c '
import sys, urllib.request
m = {}
for line in urllib.request.urlopen("http://127.0.0.1:'"$PORT"'/metrics", timeout=10).read().decode().splitlines():
    if line and not line.startswith("#"):
        k, v = line.rsplit(" ", 1)
        m[k] = float(v)
print(int(m["go_goroutines"]), int(m["go_memstats_heap_inuse_bytes"] / 1048576))
' 2>/dev/null || echo "? ?"
}
totals() { cat "$W"/counts/* 2>/dev/null | awk '{o += $1; e += $2} END {printf "%d %d", o, e}'; }

: > "$W/samples"
# rss_kib is VmRSS: anon_kib (the heap and stacks) plus file_kib (mostly
# the index's mapped segments, pages the kernel may drop) and shmem.
printf '%-8s %10s %6s %10s %10s %8s %10s %10s %8s\n' minute rss_kib fds goroutines ops errors anon_kib file_kib heap_mib
start=$(date +%s)
while [ "$(date +%s)" -lt "$END" ]; do
  sleep "$EVERY" & wait $! # a signal ends the wait at once (trap)
  kill -0 "$DPID" 2>/dev/null || { echo "soak: the daemon died" >&2; break; }
  rss=$(awk '/VmRSS/ {print $2}' "/proc/$DPID/status")
  anon=$(awk '/RssAnon/ {print $2}' "/proc/$DPID/status")
  file=$(awk '/RssFile/ {print $2}' "/proc/$DPID/status")
  fds=$(ls "/proc/$DPID/fd" | wc -l)
  read -r gor heap <<< "$(metrics)"
  read -r ops errs <<< "$(totals)"
  min=$(( ($(date +%s) - start + 30) / 60 ))
  printf '%-8s %10s %6s %10s %10s %8s %10s %10s %8s\n' "$min" "$rss" "$fds" "$gor" "$ops" "$errs" "$anon" "$file" "$heap" | tee -a "$W/samples"
done
for p in "${PIDS[@]}"; do wait "$p" 2>/dev/null; done
PIDS=()

echo
echo "per process:"
printf '  %-8s %10s %8s\n' process ops errors
for f in "$W"/counts/*; do
  read -r o e < "$f"
  printf '  %-8s %10s %8s\n' "$(basename "$f")" "$o" "$e"
done
read -r ops errs <<< "$(totals)"
fail=0
if [ "$errs" != 0 ]; then
  echo "soak: $errs operations failed (first ones, from $W/errors.log):"
  head -10 "$W/errors.log"
  fail=1
fi
kill -0 "$DPID" 2>/dev/null || { echo "soak: the daemon did not survive"; fail=1; }
# Growth: the last sample against the largest of the first half.
verdict=$(awk '
  { rss[NR] = $2; fds[NR] = $3; gor[NR] = $4; anon[NR] = $7 }
  END {
    if (NR < 2) { print "too few samples to judge growth"; exit }
    h = int((NR + 1) / 2); mr = mf = mg = ma = 0
    for (i = 1; i <= h; i++) { if (rss[i] > mr) mr = rss[i]; if (anon[i] > ma) ma = anon[i]; if (fds[i] > mf) mf = fds[i]; if (gor[i] != "?" && gor[i] > mg) mg = gor[i] }
    bad = ""
    if (rss[NR] > mr * 1.25) bad = bad sprintf(" rss %d KiB > 1.25 x %d", rss[NR], mr)
    if (anon[NR] > ma * 1.25) bad = bad sprintf(" anon %d KiB > 1.25 x %d", anon[NR], ma)
    if (fds[NR] > mf + 32) bad = bad sprintf(" fds %d > %d + 32", fds[NR], mf)
    if (gor[NR] != "?" && gor[NR] > mg + 64) bad = bad sprintf(" goroutines %d > %d + 64", gor[NR], mg)
    print (bad == "" ? "bounded" : "grew:" bad)
  }' "$W/samples")
echo "growth: $verdict"
case $verdict in grew*) fail=1 ;; esac
echo "soak: $ops operations, $errs errors, $(wc -l < "$W/samples") samples; $( [ $fail = 0 ] && echo PASS || echo FAIL)"
exit $fail
