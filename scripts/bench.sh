#!/usr/bin/env bash
# Whole-process benchmark: the same workloads on the native backing folder,
# on a neuralisfs mount of it with the defaults (no rules; the index and
# the journal on, so the first index build of the tree runs during the
# first workloads), on a view of the same daemon, on a mount with the index
# and the journal off, on a mount with 1,000 rules, on go-fuse's loopback
# example (built from the module proxy) and on a bindfs mount when bindfs
# is installed. Prints seconds per workload and the ratio to native (lower
# is better; 1.00 = as fast as the disk), then the FUSE requests by opcode
# of cold and warm `git status`, `ls -lR` and `find` (scripts/opcounts.sh).
# Needs root (drop_caches, mounting). Sized to finish in a few minutes
# on 2 cores: BENCH_MB (sequential file size) and BENCH_TREE (source tree to
# copy, default the Go toolchain's src/) change the load.
# BENCH_ONLY=journal (or mount, index, git; comma-separated) runs only those;
# BENCH_ROUNDS (default 1) repeats the main table's workloads in rotated
# column order and shows the medians.
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=$PWD/bin/neuralisfs
MB=${BENCH_MB:-256}
TREE=${BENCH_TREE:-$(go env GOROOT)/src}
SMALL=${BENCH_SMALL:-10000}
# BENCH_ONLY picks sections (comma-separated: mount,index,git,journal,held,uring).
ONLY=${BENCH_ONLY:-mount,index,git,journal,held,uring}
want() { [[ ",$ONLY," == *",$1,"* ]]; }
WORK=$(mktemp -d /tmp/neuralisfs-bench.XXXXXX)
PIDS=()
cleanup() {
  # Every mount under $WORK (the journal section's too), deepest first.
  for m in $(awk -v w="$WORK/" 'index($2, w) == 1 {print $2}' /proc/mounts | sort -r); do
    "$BIN" unmount "$m" >/dev/null 2>&1 || umount -l "$m" 2>/dev/null || true
  done
  for p in "${PIDS[@]}"; do wait "$p" 2>/dev/null || true; done
  rm -rf "$WORK"
}
trap cleanup EXIT

[ "$(id -u)" -eq 0 ] || { echo "bench: run as root (it drops caches and mounts)" >&2; exit 1; }
# bc does the arithmetic; bindfs is the peer column (skipped if it cannot be had).
missing=()
command -v bc >/dev/null 2>&1 || missing+=(bc)
command -v bindfs >/dev/null 2>&1 || missing+=(bindfs)
if [ ${#missing[@]} -gt 0 ]; then
  echo "bench: installing ${missing[*]}" >&2
  (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}") >/dev/null 2>&1 || true
fi
command -v bc >/dev/null 2>&1 || { echo "bench: needs bc" >&2; exit 1; }
[ -x "$BIN" ] || { echo "bench: build first (make build)" >&2; exit 1; }

# A KVM guest whose idle vCPUs halt at once pays a hypervisor wake-up on
# most FUSE round trips, which moves every ratio (README "Benchmarks"; the
# doctor's halt polling check): say which kind of machine this run is.
if [ "$(cat /sys/devices/system/cpu/cpuidle/current_driver 2>/dev/null)" = haltpoll ]; then
  echo "bench: cpuidle haltpoll, guest_halt_poll_ns = $(cat /sys/module/haltpoll/parameters/guest_halt_poll_ns 2>/dev/null || echo '?')" >&2
fi

drop() { sync; echo 3 > /proc/sys/vm/drop_caches; }
# median N... prints the median of its arguments (the lower of the middle two).
median() { printf '%s\n' "$@" | sort -g | awk '{v[NR]=$1} END {print v[int((NR+1)/2)]}'; }
now() { date +%s.%N; }
if want mount || want index; then
mkdir -p "$WORK/backing" "$WORK/state"
echo "bench: preparing a copy of $TREE ($(find "$TREE" -type f | wc -l) files) as a git checkout..." >&2
tar cf "$WORK/tree.tar" -C "$(dirname "$TREE")" "$(basename "$TREE")"
mkdir -p "$WORK/backing/repo"
tar xf "$WORK/tree.tar" -C "$WORK/backing/repo"
( cd "$WORK/backing/repo" && git init -q && git add -A && \
  GIT_AUTHOR_NAME=b GIT_AUTHOR_EMAIL=b@x GIT_COMMITTER_NAME=b GIT_COMMITTER_EMAIL=b@x git -c gc.autoDetach=false commit -q -m tree ) >/dev/null
echo "x" >> "$WORK/backing/repo/$(basename "$TREE")/go/doc.go" 2>/dev/null || true
fi

mount_nfs() { # name config-extra [index-and-journal] → mountpoint
  local name=$1 extra=$2 mp="$WORK/mnt-$1" top
  mkdir -p "$mp"
  case ${3:-noindex} in
    defaults) top="" ;; # the index and the journal on
    off) top=$'[index]\nenabled = false\n[journal]\nenabled = false' ;;
    *) top=$'[index]\nenabled = false' ;;
  esac
  cat > "$WORK/$name.toml" <<EOF
state_dir = "$WORK/state-$name"
$top
[[source]]
slug = "b"
kind = "local"
path = "$WORK/backing"
$extra
EOF
  "$BIN" mount -c "$WORK/$name.toml" "$mp" > "$WORK/$name.out" 2> "$WORK/$name.err" &
  PIDS+=($!)
  for _ in $(seq 1 100); do grep -q "mounted at" "$WORK/$name.out" 2>/dev/null && break; sleep 0.1; done
  grep -q "mounted at" "$WORK/$name.out" || { echo "bench: mount failed: $(cat "$WORK/$name.err")" >&2; exit 1; }
  echo "$mp/b"
}

rules1000() {
  echo '[[principal]]'; echo 'name = "agent"'; echo 'uids = [1001]'; echo 'roles = ["agent"]'
  for i in $(seq 1 1000); do
    case $((i % 4)) in
      0) printf '[[rule]]\nuri = "b://area%d/**"\nwho = ["role:agent"]\ndeny = ["read", "write"]\n' "$i" ;;
      1) printf '[[rule]]\nuri = "b://**/*.secret%d"\nwho = ["agent"]\ndeny = ["read"]\n' "$i" ;;
      2) printf '[[rule]]\nuri = "b://docs%d/*.md"\nwho = ["*"]\nallow = ["read"]\n' "$i" ;;
      3) printf '[[rule]]\nuri = "b://tmp%d/**"\nwho = ["role:agent"]\nallow = ["write"]\n' "$i" ;;
    esac
  done
}

# go-fuse's own loopback example, built in a module of its own (not in the
# repository's go.mod), at the go-fuse version the repository uses.
LOOPBACK=
if want mount; then
  fv=$(go list -m -f '{{.Version}}' github.com/hanwen/go-fuse/v2 2>/dev/null || true)
  lb=$(mktemp -d); LOOPBACK="$WORK/loopback"
  ( cd "$lb" && go mod init benchloopback >/dev/null 2>&1 && go get "github.com/hanwen/go-fuse/v2/example/loopback@${fv:-latest}" >/dev/null 2>&1 && \
    go build -o "$LOOPBACK" github.com/hanwen/go-fuse/v2/example/loopback ) || { echo "bench: could not build go-fuse's loopback example; no loopback column" >&2; LOOPBACK=; }
  rm -rf "$lb"
fi

if want mount; then
declare -A TARGET
TARGET[native]="$WORK/backing"
# One daemon with the defaults serves both the main mount and a view of
# the principal "bench" (root): one first index build runs during the
# workloads of both columns.
mkdir -p "$WORK/view"
mkdir -p "$WORK/viewro"
TARGET[neuralisfs]=$(mount_nfs plain "$(printf '[[principal]]\nname = "bench"\nuids = [0]\n[[view]]\nprincipal = "bench"\nmountpoint = "%s"\n[[view]]\nprincipal = "bench"\nmountpoint = "%s"\nread_only = true\n' "$WORK/view" "$WORK/viewro")" defaults)
TARGET[view]="$WORK/view/b"
# The same view mounted read-only (read_only = true): the read workloads
# only.
TARGET[viewro]="$WORK/viewro/b"
READ_ONLY=" viewro "
TARGET[noindex]=$(mount_nfs off "" off)
TARGET[rules1000]=$(mount_nfs rules "$(rules1000)")
NAMES=(native neuralisfs view viewro noindex rules1000)
if [ -n "$LOOPBACK" ]; then
  mkdir -p "$WORK/mnt-loopback"
  "$LOOPBACK" "$WORK/mnt-loopback" "$WORK/backing" > "$WORK/loopback.out" 2>&1 &
  PIDS+=($!)
  for _ in $(seq 1 100); do grep -q "Mounted!" "$WORK/loopback.out" 2>/dev/null && break; sleep 0.1; done
  grep -q "Mounted!" "$WORK/loopback.out" && { TARGET[loopback]="$WORK/mnt-loopback"; NAMES+=(loopback); }
fi
if command -v bindfs >/dev/null 2>&1; then
  mkdir -p "$WORK/mnt-bindfs"
  bindfs --no-allow-other "$WORK/backing" "$WORK/mnt-bindfs" 2>/dev/null && { TARGET[bindfs]="$WORK/mnt-bindfs"; NAMES+=(bindfs); }
fi

declare -A T

# time_it workload target command...: runs the command with $D set to the
# target folder and records the seconds it took.
time_it() {
  local w=$1 n=$2; shift 2
  local D=${TARGET[$n]} s e
  export D
  s=$(now); bash -c "$*" >/dev/null 2>&1 || echo "bench: $w on $n failed" >&2; e=$(now)
  T[$w,$n]="${T[$w,$n]:-} $(echo "$e - $s" | bc -l)"
}

# BENCH_ROUNDS (default 1) runs each workload that many times on every
# column, the columns in a different order each round (round r starts at
# the r-th column), and shows the median: on this VM the same workload's
# time can move 2-3x within minutes, and a fixed order puts the same
# columns where the defaults column's first index build keeps the CPUs
# busy (which shortens FUSE round trips here: see README "Benchmarks").
BROUNDS=${BENCH_ROUNDS:-1}
WORKLOADS=()
workload() { # name, prepare (untimed, on the backing folder $B), command (timed, on $D)[, "writes"]
  local w=$1 prep=$2 cmd=$3 writes=${4:-} r i n k=${#NAMES[@]}
  WORKLOADS+=("$w")
  for r in $(seq 0 $((BROUNDS - 1))); do
    for i in $(seq 0 $((k - 1))); do
      n=${NAMES[$(((i + r) % k))]}
      [ -n "$writes" ] && [[ "$READ_ONLY" == *" $n "* ]] && continue
      B="$WORK/backing" D=${TARGET[$n]} bash -c "$prep" >/dev/null 2>&1 || true
      sleep 0.2 # let the watcher tell the mounts about the preparation
      time_it "$w" "$n" "$cmd"
    done
  done
  for n in "${NAMES[@]}"; do
    [ -n "${T[$w,$n]:-}" ] && T[$w,$n]=$(median ${T[$w,$n]})
  done
  return 0
}

# Workloads that create files start in an empty folder, and the one the
# previous column filled is moved aside ($WORK/trash, the same file
# system), not deleted: ext4 will not hand out an inode number freed in
# the last few seconds (recently_deleted() in ext4's ialloc.c) and scans
# past every one, so a create right after an rm -rf of 10,000 files ran
# 8-10x slower on the bare disk too, and every column but the first
# (native, into a folder nothing had been deleted from) paid for it.
mkdir -p "$WORK/trash"
aside() { echo "mv \$B/$1 $WORK/trash/$1.\$\$ 2>/dev/null; mkdir \$B/$1"; }
echo "bench: running workloads on: ${NAMES[*]}" >&2
workload "seq write ${MB} MiB (fsync)" 'rm -f $B/big' "dd if=/dev/zero of=\$D/big bs=1M count=$MB conv=fsync status=none" writes
workload "seq read cold" 'sync; echo 3 > /proc/sys/vm/drop_caches' 'cat $D/big > /dev/null'
workload "seq read warm" 'cat $D/big > /dev/null' 'cat $D/big > /dev/null'
workload "4k random reads (10k)" 'true' "python3 -c '
import os, random
fd = os.open(os.environ[\"D\"] + \"/big\", os.O_RDONLY); size = os.fstat(fd).st_size; r = random.Random(1)
for _ in range(10000): os.pread(fd, 4096, r.randrange(0, size - 4096) & ~4095)'"
# A log's appends: many small write(2)s to one open file, each of which
# cost a GETXATTR security.capability round trip before the daemon took
# on FUSE_HANDLE_KILLPRIV_V2 (README "No round trip per write").
workload "20k writes of 10 bytes" 'rm -f $B/log' "python3 -c '
import os
fd = os.open(os.environ[\"D\"] + \"/log\", os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
for _ in range(20000): os.write(fd, b\"0123456789\")
os.close(fd)'" writes
workload "create ${SMALL} small files" "$(aside small)" "cd \$D/small && python3 -c '
for i in range($SMALL):
    d = \"d%02d\" % (i % 50)
    if i < 50: __import__(\"os\").mkdir(d)
    open(\"%s/f%05d\" % (d, i), \"w\").write(\"small file %d\\n\" % i)'" writes
workload "find tree" 'true' 'find $D/repo | wc -l'
workload "find tree, warm" 'find $D/repo >/dev/null' 'find $D/repo | wc -l'
workload "ls -lR tree" 'true' 'ls -lR $D/repo | wc -l'
workload "read every small file" 'true' 'find $D/repo -type f -print0 | xargs -0 cat | wc -c'
workload "grep -r tree" 'true' 'grep -r "func main" $D/repo | wc -l'
# The same after two more: a file read again unchanged is served from the
# kernel's page cache from its second read on, and costs OPEN and RELEASE
# alone from its third (its second open stores the pages without a READ:
# fs/pagecache.go).
workload "grep -r tree, warm" 'grep -r "func main" $D/repo >/dev/null; grep -r "func main" $D/repo >/dev/null' 'grep -r "func main" $D/repo | wc -l'
workload "untar tree" "$(aside untar)" "tar xf $WORK/tree.tar -C \$D/untar" writes
workload "git status" 'git -c safe.directory="*" -C $D/repo status --porcelain >/dev/null' 'git -c safe.directory="*" -C $D/repo status --porcelain | wc -l'
workload "rm -rf tree" "$(aside untar); tar xf $WORK/tree.tar -C \$B/untar; sync" 'rm -rf $D/untar' writes

printf '%-28s' "workload"
for n in "${NAMES[@]}"; do printf '%14s' "$n"; done
for n in "${NAMES[@]:1}"; do printf ' %11s' "$n/nat"; done
echo
for w in "${WORKLOADS[@]}"; do
  printf '%-28s' "$w"
  for n in "${NAMES[@]}"; do if [ -n "${T[$w,$n]:-}" ]; then printf '%13.3fs' "${T[$w,$n]}"; else printf '%14s' -; fi; done
  for n in "${NAMES[@]:1}"; do if [ -n "${T[$w,$n]:-}" ]; then printf '%12.2f' "$(echo "${T[$w,$n]} / ${T[$w,native]}" | bc -l)"; else printf '%12s' -; fi; done
  echo
done
# The same daemons stay up until the end; the request counts below mount
# the checkout afresh for each workload (cold: nothing cached; warm: the
# same again), with go-fuse's opcode trace on.
echo "FUSE requests by opcode (scripts/opcounts.sh on $(basename "$TREE") as a git checkout; main = no rules, view = a view as uid 1001, viewro = that view read-only, rules = one rule for that uid only):"
for n in main view viewro rules ${LOOPBACK:+loopback} $(command -v bindfs >/dev/null 2>&1 && echo bindfs); do
  BIN="$BIN" LOOPBACK="$LOOPBACK" ./scripts/opcounts.sh "$n" "$WORK/backing/repo" git-status ls-lR find || echo "bench: request counts on $n failed" >&2
  WARM=3 BIN="$BIN" LOOPBACK="$LOOPBACK" ./scripts/opcounts.sh "$n" "$WORK/backing/repo" grep || echo "bench: request counts on $n failed" >&2
done

fi

if want index; then
# ---------------------------------------------------------------- index
# Two trees: the copy of $TREE above (first build, freshness under a burst
# of writes), then a tree of at least BENCH_INDEX_FILES (50,000) admitted
# files made of hard-linked copies of it (the issue's scale: first build,
# search beside grep -rl, restart with nothing changed). Sized to take about
# a minute and a half on 2 cores; BENCH_INDEX_REPS (reads per search query,
# default 30), BENCH_INDEX_GREPS (grep runs, 1) and BENCH_INDEX_RESTARTS
# (1) buy precision with time. Wall-clock numbers on a shared machine are
# noisy: the daemon's CPU seconds are printed beside them.
echo >&2; echo "bench: index section..." >&2
IXSTART=$(now)
IDX="$WORK/idx"; mkdir -p "$IDX"
TCK=$(getconf CLK_TCK)
REPS=${BENCH_INDEX_REPS:-30}
GREPS=${BENCH_INDEX_GREPS:-1}
RESTARTS=${BENCH_INDEX_RESTARTS:-1}
cpu_of() { awk -v t="$TCK" '{printf "%.2f", ($14 + $15) / t}' "/proc/$1/stat" 2>/dev/null || echo 0; }
ix_phase() { printf 'bench: index: %s (%.0fs into the section)\n' "$1" "$(echo "$(now) - $IXSTART" | bc -l)" >&2; }
# ix_start NAME: starts a daemon on the config $IDX/NAME.toml (source slug NAME)
# at $WORK/mnt-NAME and waits until its first reconcile logs "indexed". Sets
# IXPID, IXT (seconds since the start), IXCPU (the daemon's CPU seconds) and
# IXLINE (the log line).
ix_start() {
  local n=$1 s
  mkdir -p "$WORK/mnt-$n"
  rm -f "$IDX/$n.out" "$IDX/$n.err" # a restart must not find the last run's log line
  s=$(now)
  "$BIN" mount -c "$IDX/$n.toml" "$WORK/mnt-$n" > "$IDX/$n.out" 2> "$IDX/$n.err" &
  IXPID=$!; PIDS+=($IXPID)
  while ! grep -q "msg=indexed source=$n" "$IDX/$n.err" 2>/dev/null; do
    kill -0 "$IXPID" 2>/dev/null || { echo "bench: the index daemon exited: $(tail -3 "$IDX/$n.err")" >&2; exit 1; }
    [ "$(echo "$(now) - $s > 900" | bc -l)" = 1 ] && { echo "bench: no index after 900s" >&2; exit 1; }
    sleep 0.02
  done
  IXT=$(echo "$(now) - $s" | bc -l); IXCPU=$(cpu_of "$IXPID")
  IXLINE=$(grep "msg=indexed source=$n" "$IDX/$n.err" | head -1)
}
ix_stop() { # NAME: unmounts and waits for the daemon to exit (it closes the index)
  "$BIN" unmount "$WORK/mnt-$1" >/dev/null 2>&1 || umount -l "$WORK/mnt-$1" 2>/dev/null || true
  wait "$IXPID" 2>/dev/null || true
}
# ix_settle MAX: waits (at most MAX seconds) until the daemon uses less than
# 5% of a core over a second: the merges after a build are done. Prints the
# seconds waited.
ix_settle() {
  local s a b
  s=$(now); a=$(cpu_of "$IXPID")
  for _ in $(seq 1 "$1"); do
    sleep 1; b=$(cpu_of "$IXPID")
    [ "$(echo "$b - $a < 0.05" | bc -l)" = 1 ] && break
    a=$b
  done
  echo "$(now) - $s" | bc -l
}
ix_bytes() { "$BIN" status -c "$IDX/$1.toml" --json | python3 -c 'import json,sys; d=json.load(sys.stdin); print(sum((s.get("Index") or {}).get("bytes",0) for s in d["sources"]))'; }
ix_field() { echo "$IXLINE" | sed -n "s/.* $1=\([^ ]*\).*/\1/p"; }
# Search latency through <mnt>/.neuralis/search (the path agents use):
# lat.py MNT N NAME=QUERY... prints "NAME median-ms p99-ms hits" per query.
cat > "$IDX/lat.py" <<'PY'
import os, sys, time, urllib.parse, statistics
mnt, n = sys.argv[1], int(sys.argv[2])
for arg in sys.argv[3:]:
    name, q = arg.split("=", 1)
    p = os.path.join(mnt, ".neuralis", "search", urllib.parse.quote(q, safe=""))
    out = open(p).read()
    last = out.rstrip("\n").rsplit("\n", 1)[-1]
    if last.startswith("# ") and " of " in last:  # "# 20 of at least 1000 matching files shown"
        hits = last[2:].split(" of ", 1)[1].split(" matching")[0]
    else:
        hits = str(len({l.split("://", 1)[1].split(":", 1)[0] for l in out.splitlines() if "://" in l}))
    ts = []
    for _ in range(n):
        s = time.perf_counter(); open(p).read(); ts.append(time.perf_counter() - s)
    ts.sort()
    print(name, "%.2f" % (statistics.median(ts) * 1000), "%.2f" % (ts[max(0, int(len(ts) * 0.99) - 1)] * 1000), hits.replace(" ", "_"))
PY
grep_ms() { # TREE RUNS → median, min and max of RUNS `grep -rl goroutine` in ms
  python3 - "$1" "$2" <<'PY'
import subprocess, sys, time, statistics
ts = []
for _ in range(int(sys.argv[2])):
    s = time.perf_counter(); subprocess.run(["grep", "-rl", "goroutine", sys.argv[1]], stdout=subprocess.DEVNULL); ts.append((time.perf_counter() - s) * 1000)
print("%.1f %.1f %.1f" % (statistics.median(ts), min(ts), max(ts)))
PY
}
print_lat() { # LABEL-SUFFIX < lat.py's lines; sets TERM_MS
  TERM_MS=1
  while read -r name med p99 hits; do
    printf '%-40s median %7.2f ms, p99 %7.2f ms (%s hits, %s reads)\n' "search $name$1" "$med" "$p99" "${hits//_/ }" "$REPS"
    if [ "$name" = term ]; then TERM_MS=$med; fi
  done
}

cat > "$IDX/tree.toml" <<TOML
state_dir = "$IDX/state-tree"
[[source]]
slug = "tree"
kind = "local"
path = "$WORK/backing/repo"
TOML
ix_start tree
files=$(ix_field reindexed)
bytes=$(ix_bytes tree)
printf '%-40s %8.2fs  %8.0f files/s  %6.1f MB/s (%s files, %.1f MB; daemon cpu %.1fs, %.1f MB/cpu-s)\n' "first index build" "$IXT" "$(echo "$files / $IXT" | bc -l)" "$(echo "$bytes / 1000000 / $IXT" | bc -l)" "$files" "$(echo "$bytes / 1000000" | bc -l)" "$IXCPU" "$(echo "$bytes / 1000000 / $IXCPU" | bc -l)"
# freshness under a burst of 1,000 writes through the mount
python3 - "$WORK/mnt-tree/tree" <<'PY'
import os, sys
d = os.path.join(sys.argv[1], "burst"); os.makedirs(d, exist_ok=True)
for i in range(1000):
    with open(os.path.join(d, "f%04d.txt" % i), "w") as f:
        f.write("burst token burstword%04d\n" % i)
PY
sleep 2
"$BIN" status -c "$IDX/tree.toml" --json | python3 -c '
import json, sys
d = json.load(sys.stdin)
for s in d["sources"]:
    ix = s.get("Index") or {}
    print("%-40s median %6.1f ms, worst of last 100 %6.1f ms (close → searchable)" % ("freshness, burst of 1,000 writes", ix.get("freshness_median", 0)/1e6, ix.get("freshness_worst", 0)/1e6))'
# The daemon closes (merges, persists) while the copies below are made.
"$BIN" unmount "$WORK/mnt-tree" >/dev/null 2>&1 || umount -l "$WORK/mnt-tree" 2>/dev/null || true
ix_phase "first build and freshness done"

# At least BENCH_INDEX_FILES admitted files: hard-linked copies of the tree
# above (same text, distinct paths; links cost no disk and no copy time, the
# copies share one page cache, and nothing writes to them), g1/ g2/ … each a
# copy of $(basename "$TREE")/.
nfiles=${BENCH_INDEX_FILES:-50000}
copies=$(( (nfiles + files - 1) / files ))
BIG="$WORK/big"; mkdir -p "$BIG"
for i in $(seq 1 "$copies"); do cp -al "$WORK/backing/repo/$(basename "$TREE")" "$BIG/g$i"; done
wait "$IXPID" 2>/dev/null || true
ix_phase "$copies hard-linked copies of $TREE for $nfiles files"
cat > "$IDX/big.toml" <<TOML
state_dir = "$IDX/state-big"
[[source]]
slug = "big"
kind = "local"
path = "$BIG"
TOML
ix_start big
bfiles=$(ix_field reindexed)
bbytes=$(ix_bytes big)
printf '%-40s %s files, %.1f MB: %d hard-linked copies of %s\n' "index tree, 50k" "$bfiles" "$(echo "$bbytes / 1000000" | bc -l)" "$copies" "$TREE"
printf '%-40s %8.2fs  %8.0f files/s  %6.1f MB/s (daemon cpu %.1fs, %.1f MB/cpu-s)\n' "first index build, 50k" "$IXT" "$(echo "$bfiles / $IXT" | bc -l)" "$(echo "$bbytes / 1000000 / $IXT" | bc -l)" "$IXCPU" "$(echo "$bbytes / 1000000 / $IXCPU" | bc -l)"
ix_phase "50k first build done"
# Searches are timed once the merges after the build are done (at most 60 s).
c0=$IXCPU; settle=$(ix_settle 60)
printf '%-40s %8.1fs  (daemon cpu %.1fs more)\n' "merges after the build, 50k" "$settle" "$(echo "$(cpu_of "$IXPID") - $c0" | bc -l)"
print_lat ", 50k" < <(python3 "$IDX/lat.py" "$WORK/mnt-big" "$REPS" term=goroutine 'phrase="func main"' 'path-filtered=+goroutine +path:g1/net/**')
read -r g glo ghi <<< "$(grep_ms "$BIG" "$GREPS")"
printf '%-40s %7.1f ms (median of %s, %.0f–%.0f; %.0fx the term search'"'"'s median)\n' "grep -rl goroutine (50k tree)" "$g" "$GREPS" "$glo" "$ghi" "$(echo "$g / $TERM_MS" | bc -l)"
ix_phase "50k searches and grep done"
# Restart with nothing changed: stop, start, until the reconcile is done.
RT=(); RC=(); RCPU=()
for _ in $(seq 1 "$RESTARTS"); do
  ix_stop big
  ix_start big
  RT+=("$IXT"); RC+=("$(ix_field took)"); RCPU+=("$IXCPU")
  [ "$(ix_field reindexed)" = 0 ] || echo "bench: restart re-indexed $(ix_field reindexed) files" >&2
done
ix_stop big
printf '%-40s %8.2fs  (median of %s, %.2f–%.2fs; reconcile took %s; daemon cpu %.2fs)\n' "restart, nothing changed, 50k" "$(median "${RT[@]}")" "$RESTARTS" "$(printf '%s\n' "${RT[@]}" | sort -g | head -1)" "$(printf '%s\n' "${RT[@]}" | sort -g | tail -1)" "$(echo "${RC[*]}" | tr ' ' '/')" "$(median "${RCPU[@]}")"
rm -rf "$BIG"
ix_phase "done"

fi

if want git; then
# ---------------------------------------------------------------- git
echo >&2; echo "bench: git section (checkout of ${BENCH_GIT_FILES:-50000} files)..." >&2
GR="$WORK/gitbig"; mkdir -p "$GR/repo" "$GR/mnt"
python3 - "$GR/repo" "${BENCH_GIT_FILES:-50000}" <<'PY'
import os, sys
root, n = sys.argv[1], int(sys.argv[2])
for i in range(n):
    d = os.path.join(root, "d%03d" % (i % 500), "e%02d" % (i % 7))
    if i < 3500: os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, "f%06d.txt" % i), "w") as f: f.write("line %d\n" % i)
PY
( cd "$GR/repo" && git init -q && git add -A && GIT_AUTHOR_NAME=b GIT_AUTHOR_EMAIL=b@x GIT_COMMITTER_NAME=b GIT_COMMITTER_EMAIL=b@x git -c gc.autoDetach=false commit -q -m big && \
  echo change >> d001/e01/f000001.txt 2>/dev/null; echo new > d002/untracked.txt ) >/dev/null 2>&1
cat > "$GR/c.toml" <<TOML
state_dir = "$GR/state"
[index]
enabled = false
[[source]]
slug = "g"
kind = "git"
path = "$GR/repo"
TOML
"$BIN" mount -c "$GR/c.toml" "$GR/mnt" > "$GR/out" 2> "$GR/err" &
PIDS+=($!)
for _ in $(seq 1 100); do grep -q "mounted at" "$GR/out" 2>/dev/null && break; sleep 0.1; done
sync; echo 3 > /proc/sys/vm/drop_caches
s=$(now); git -C "$GR/repo" status --porcelain >/dev/null; gn=$(echo "$(now) - $s" | bc -l)
s=$(now); git -C "$GR/repo" status --porcelain >/dev/null; gw=$(echo "$(now) - $s" | bc -l)
sync; echo 3 > /proc/sys/vm/drop_caches # cold for .status too, as for git above
s=$(now); cat "$GR/mnt/g/.status" >/dev/null; sc=$(echo "$(now) - $s" | bc -l)
# warm: the mean of 200 reads from one process (a cat would time its own start)
sw=$(python3 -c 'import sys, time
t = time.perf_counter()
for _ in range(200): open(sys.argv[1]).read()
print((time.perf_counter() - t) / 200)' "$GR/mnt/g/.status")
s=$(now); git -C "$GR/repo/d002/e03" status --porcelain -- . >/dev/null; gd=$(echo "$(now) - $s" | bc -l)
s=$(now); cat "$GR/mnt/g/d002/e03/.status" >/dev/null; sd=$(echo "$(now) - $s" | bc -l)
printf '%-40s %9.4fs  (git status --porcelain, native: %.4fs; ratio %.2f)\n' ".status root, cold (caches dropped)" "$sc" "$gn" "$(echo "$sc / $gn" | bc -l)"
printf '%-40s %9.4fs  (mean of 200 reads; git warm: %.4fs)\n' ".status root, warm (nothing changed)" "$sw" "$gw"
printf '%-40s %9.4fs  (git -C subfolder status -- .: %.4fs)\n' ".status deep subfolder" "$sd" "$gd"
"$BIN" unmount "$GR/mnt" >/dev/null

fi

if want journal; then
# ---------------------------------------------------------------- journal
echo >&2; echo "bench: journal section..." >&2
JR="$WORK/journal"; mkdir -p "$JR/back" "$JR/mnt-on" "$JR/mnt-off"
for mode in on off; do
  enabled=true; [ $mode = off ] && enabled=false
  cat > "$JR/$mode.toml" <<TOML
state_dir = "$JR/state-$mode"
[index]
enabled = false
[journal]
enabled = $enabled
[[source]]
slug = "j"
kind = "local"
path = "$JR/back"
TOML
  "$BIN" mount -c "$JR/$mode.toml" "$JR/mnt-$mode" > "$JR/$mode.out" 2> "$JR/$mode.err" &
  PIDS+=($!)
  for _ in $(seq 1 100); do grep -q "mounted at" "$JR/$mode.out" 2>/dev/null && break; sleep 0.1; done
done
jw() { # mode workload round → seconds
  local mode=$1 w=$2 r=$3 D="$JR/mnt-$1/j" s
  s=$(now)
  case $w in
    create) python3 -c "
import os
d='$D/c-$mode-$r'; os.makedirs(d, exist_ok=True)
for i in range(1000): open('%s/f%04d' % (d, i), 'w').write(('c $mode $r %04d ' % i * 400)[:4096])" ;;
    overwrite) python3 -c "
d='$D/c-$mode-$r'
for i in range(1000): open('%s/f%04d' % (d, i), 'w').write(('o $mode $r %04d ' % i * 400)[:4096])" ;;
    big) dd if=/dev/zero of="$D/big-$mode" bs=1M count=64 conv=fsync status=none; dd if=/dev/zero of="$D/big-$mode" bs=1M count=64 conv=fsync,notrunc status=none ;;
    rm) rm -rf "$D/c-$mode-$r" ;;
  esac
  echo "$(now) - $s" | bc -l
}
# The journal publishes in the background (and frees an unlinked file's
# inode there): before each timing both daemons are left to finish what
# earlier workloads started, so neither mode's leftover work lands in the
# other's (or the next workload's) time. What is timed is what the writer
# waits for, with the publisher competing for the CPU while it runs.
settle() { sync; sleep 0.5; }
# Seven rounds, on and off alternating which goes first. A round's on and
# off run back to back, so the ratio of the two is measured under the same
# load on this (noisy, shared) machine: the figure is the median of the
# seven per-round ratios (the times are medians too, for scale).
ROUNDS=7
declare -A JT JR_RATIO
for r in $(seq 1 $ROUNDS); do
  order="on off"; [ $((r % 2)) = 0 ] && order="off on"
  for w in create overwrite big rm; do
    declare -A T=()
    for mode in $order; do settle; T[$mode]=$(jw $mode $w $r); JT[$w,$mode]="${JT[$w,$mode]:-} ${T[$mode]}"; done
    JR_RATIO[$w]="${JR_RATIO[$w]:-} $(echo "${T[on]} / ${T[off]}" | bc -l)"
  done
done
printf '%-52s %10s %10s %8s\n' "journal workload (median of $ROUNDS)" "on" "off" "on/off"
for w in create overwrite big rm; do
  on=$(median ${JT[$w,on]}); off=$(median ${JT[$w,off]})
  printf '%-52s %9.3fs %9.3fs %8.2f\n' "$w" "$on" "$off" "$(median ${JR_RATIO[$w]})"
done
echo "(on/off: the median of the per-round ratios, each round running on and off back to back)"
echo "(create, overwrite, rm: 1000 files of 4 KiB, all different; big: 64 MiB written twice, fsynced)"
# The same overwrite measured finer: one process overwrites 1000 files on
# each mount in 100-file chunks, alternating mounts chunk by chunk (on
# first in even chunks, off first in odd ones), so the VM's drift falls
# on both alike; each file's open+write+close is timed. The publisher's
# background work can land in either mount's chunks here, so this is
# mostly the cost on the change's own path.
settle
python3 - "$JR/mnt-on/j" "$JR/mnt-off/j" <<'PY'
import os, statistics, sys, time
mounts = {"on": sys.argv[1] + "/iv", "off": sys.argv[2] + "/iv"}
for d in mounts.values():
    os.makedirs(d, exist_ok=True)
    for i in range(1000):
        open("%s/f%04d" % (d, i), "w").write(("i %04d " % i * 400)[:4096])
os.sync(); time.sleep(0.5)
lat = {m: [] for m in mounts}
for r in range(6):
    for c in range(10):
        for m in (("on", "off") if (r * 10 + c) % 2 == 0 else ("off", "on")):
            for i in range(c * 100, c * 100 + 100):
                t = time.perf_counter()
                with open("%s/f%04d" % (mounts[m], i), "w") as f:
                    f.write(("o %d %04d " % (r, i) * 400)[:4096])
                lat[m].append(time.perf_counter() - t)
mean = {m: statistics.mean(v) for m, v in lat.items()}
p50 = {m: statistics.median(v) for m, v in lat.items()}
print("%-40s %7.0f µs %7.0f µs %8.2f (mean per file; medians %.0f / %.0f µs: %.2f)" % (
    "overwrite, interleaved (6 × 1000 files)", mean["on"] * 1e6, mean["off"] * 1e6,
    mean["on"] / mean["off"], p50["on"] * 1e6, p50["off"] * 1e6, p50["on"] / p50["off"]))
PY
head -c 1048576 /dev/urandom > "$JR/mnt-on/j/onemeg"; head -c 1048576 /dev/zero > "$JR/mnt-on/j/onemeg"
s=$(now); "$BIN" revert -c "$JR/on.toml" j://onemeg >/dev/null; r=$(echo "$(now) - $s" | bc -l)
printf '%-40s %9.3fs (whole CLI round trip, process start included)\n' "revert of a 1 MiB file" "$r"
# The same revert asked over the control socket, as the CLI does, without
# starting a process: what the daemon takes.
head -c 1048576 /dev/urandom > "$JR/mnt-on/j/onemeg"
python3 - "$JR/state-on/control.sock" <<'PY'
import json, socket, sys, time
s = socket.socket(socket.AF_UNIX); s.connect(sys.argv[1])
t = time.perf_counter()
s.sendall(json.dumps({"op": "revert", "uri": "j://onemeg"}).encode() + b"\n")
resp = b""
while not resp.endswith(b"\n"):
    chunk = s.recv(65536)
    if not chunk: break
    resp += chunk
dt = time.perf_counter() - t
err = json.loads(resp).get("error")
print("%-40s %9.3fs (over the control socket%s)" % ("revert of a 1 MiB file", dt, "; error: " + err if err else ""))
PY
"$BIN" unmount "$JR/mnt-on" >/dev/null; "$BIN" unmount "$JR/mnt-off" >/dev/null
fi
if want held; then
# ---------------------------------------------------------------- held
echo >&2; echo "bench: held writes section..." >&2
BIN="$BIN" ./scripts/bench-held.sh
fi
if want uring; then
# ---------------------------------------------------------------- uring
# FUSE over io_uring against /dev/fuse (issue 20): two daemons over the
# same backing folder, index and journal off, one [mount] io_uring = "on"
# and one "off", so only the transport differs. The kernel's switch
# (/sys/module/fuse/parameters/enable_uring) is turned on for this section
# only and put back as it was by the trap, even on failure; it stays on
# while the io_uring mount serves (the kernel checks it on every ring
# command). Each workload runs on both mounts in turn, alternating which
# goes first, BENCH_URING_ROUNDS (3) times; the best of each is shown.
US=/sys/module/fuse/parameters/enable_uring
if [ ! -w "$US" ]; then
  echo "bench: $US missing or not writable: no io_uring section" >&2
else
UR="$WORK/uring"; mkdir -p "$UR/backing"
URING_WAS=$(cat "$US")
uring_restore() {
  local m
  for m in "$UR/mnt-on" "$UR/mnt-off" "$UR/mnt-hpon" "$UR/mnt-hpoff"; do
    if mountpoint -q "$m" 2>/dev/null; then "$BIN" unmount "$m" >/dev/null 2>&1 || umount -l "$m" 2>/dev/null || true; fi
  done
  echo "$URING_WAS" > "$US" 2>/dev/null || true
}
trap 'uring_restore; cleanup' EXIT
USMALL=${BENCH_URING_FILES:-5000}; UMB=${BENCH_URING_MB:-64}; ROUNDS=${BENCH_URING_ROUNDS:-3}
echo >&2; echo "bench: io_uring section: $USMALL small files in 350 folders, a $UMB MiB file..." >&2
python3 - "$UR/backing/tree" "$USMALL" <<'PY'
import os, sys
root, n = sys.argv[1], int(sys.argv[2])
for i in range(n):
    d = os.path.join(root, "d%02d" % (i % 50), "s%d" % (i % 7))
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, "f%05d.txt" % i), "w") as f: f.write(("small file %d\n" % i) * 8)
PY
dd if=/dev/urandom of="$UR/backing/big" bs=1M count="$UMB" status=none
# The tree as a git checkout, for git status.
git -C "$UR/backing/tree" init -q && git -C "$UR/backing/tree" add -A &&
  git -C "$UR/backing/tree" -c user.name=bench -c user.email=bench@localhost commit -qm tree &&
  git -C "$UR/backing/tree" gc -q --prune=now # one pack: the other workloads see a few more files, not 5,000 objects
uring_mount() { # on|off
  printf 'state_dir = "%s"\n[index]\nenabled = false\n[journal]\nenabled = false\n[mount]\nio_uring = "%s"\n[[source]]\nslug = "b"\nkind = "local"\npath = "%s"\n' \
    "$UR/state-$1" "$1" "$UR/backing" > "$UR/$1.toml"
  mkdir -p "$UR/mnt-$1"
  "$BIN" mount -c "$UR/$1.toml" "$UR/mnt-$1" > "$UR/$1.out" 2> "$UR/$1.err" &
  PIDS+=($!)
  for _ in $(seq 1 100); do grep -q "mounted at" "$UR/$1.out" 2>/dev/null && break; sleep 0.1; done
  grep -q "mounted at" "$UR/$1.out" || { echo "bench: io_uring=$1 mount failed: $(cat "$UR/$1.err")" >&2; exit 1; }
}
echo Y > "$US"
uring_mount on; uring_mount off
# PASSTHROUGH_HP=path: libfuse's passthrough_hp example (built apart; the
# project ships no libfuse) over the same backing folder, once with
# io_uring (FUSE_URING_ENABLE=1) and once over /dev/fuse, in the same
# rounds: its gain is then measured beside ours, on the same machine at
# the same minute, and its times give a scale for ours. FUSE_INIT_STATUS
# makes it log whether its ring started ("io_uring=on"), printed below.
UT_TARGETS=(on off)
declare -A UDIR=([on]="$UR/mnt-on/b" [off]="$UR/mnt-off/b")
if [ -n "${PASSTHROUGH_HP:-}" ]; then
  for t in hpon hpoff; do
    mkdir -p "$UR/mnt-$t"
    FUSE_INIT_STATUS=1 FUSE_URING_ENABLE=$([ $t = hpon ] && echo 1 || echo 0) "$PASSTHROUGH_HP" --foreground "$UR/backing" "$UR/mnt-$t" > "$UR/$t.out" 2>&1 &
    PIDS+=($!)
    for _ in $(seq 1 100); do mountpoint -q "$UR/mnt-$t" && break; sleep 0.1; done
    mountpoint -q "$UR/mnt-$t" || { echo "bench: passthrough_hp ($t) mount failed: $(cat "$UR/$t.out")" >&2; exit 1; }
    UT_TARGETS+=("$t"); UDIR[$t]="$UR/mnt-$t"
  done
fi
declare -A UT
UW=()
# uwork name prepare command: prepare (untimed) and command (timed) run
# with $D = the mount's source folder; the best of $ROUNDS per target,
# which take turns in a rotated order.
uwork() {
  local w=$1 prep=$2 cmd=$3 r t s e k n=${#UT_TARGETS[@]}
  UW+=("$w")
  for r in $(seq 1 "$ROUNDS"); do
    for k in $(seq 0 $((n - 1))); do
      t=${UT_TARGETS[$(((k + r) % n))]}
      D="${UDIR[$t]}" bash -c "$prep" >/dev/null 2>&1 || true
      s=$(now); D="${UDIR[$t]}" bash -c "$cmd" >/dev/null 2>&1 || echo "bench: $w on $t failed" >&2; e=$(now)
      e=$(echo "$e - $s" | bc -l)
      if [ -z "${UT[$w,$t]:-}" ] || [ "$(echo "$e < ${UT[$w,$t]}" | bc -l)" -eq 1 ]; then UT[$w,$t]=$e; fi
    done
  done
}
STATS="python3 -c 'import os
for dp, dn, fn in os.walk(os.environ[\"D\"] + \"/tree\"):
    for f in fn: os.lstat(os.path.join(dp, f))'"
MKSMALL="mkdir \$D/new && cd \$D/new && python3 -c '
for i in range(2000): open(\"f%04d\" % i, \"w\").write(\"x\\n\")'"
uwork "stat $USMALL files cold" 'sync; echo 3 > /proc/sys/vm/drop_caches' "$STATS"
uwork "stat $USMALL files warm" "$STATS" "$STATS"
uwork "find cold" 'sync; echo 3 > /proc/sys/vm/drop_caches' 'find $D/tree | wc -l'
uwork "ls -lR warm" 'ls -lR $D/tree' 'ls -lR $D/tree | wc -l'
uwork "read $USMALL small files cold" 'sync; echo 3 > /proc/sys/vm/drop_caches' 'find $D/tree -type f -print0 | xargs -0 cat | wc -c'
uwork "grep -r cold" 'sync; echo 3 > /proc/sys/vm/drop_caches' 'grep -r "small file 4999" $D/tree | wc -l'
uwork "grep -r warm" 'grep -r "small file 4999" $D/tree' 'grep -r "small file 4999" $D/tree | wc -l'
GST='git -c safe.directory="*" -C $D/tree status --porcelain | wc -l'
uwork "git status cold" 'sync; echo 3 > /proc/sys/vm/drop_caches' "$GST"
uwork "git status warm" "$GST" "$GST"
uwork "create 2000 small files" 'mv $D/new $D/.old-new.$$ 2>/dev/null; true' "$MKSMALL"
uwork "rm -rf 2000 small files" "rm -rf \$D/new; $MKSMALL" 'rm -rf $D/new'
uwork "seq write $UMB MiB (fsync)" 'rm -f $D/w' "dd if=/dev/zero of=\$D/w bs=1M count=$UMB conv=fsync status=none"
uwork "seq read $UMB MiB cold" 'sync; echo 3 > /proc/sys/vm/drop_caches' 'cat $D/big > /dev/null'
uwork "4k random reads (5k) cold" 'sync; echo 3 > /proc/sys/vm/drop_caches' "python3 -c '
import os, random
fd = os.open(os.environ[\"D\"] + \"/big\", os.O_RDONLY); size = os.fstat(fd).st_size; r = random.Random(1)
for _ in range(5000): os.pread(fd, 4096, r.randrange(0, size - 4096) & ~4095)'"
transport=$(cat "$UR/mnt-on/.neuralis/sources" 2>/dev/null | head -1 || true)
hpsays=$(grep -o "io_uring=[a-z_:]*" "$UR/hpon.out" 2>/dev/null | head -1 || true)
rm -rf "$UR/mnt-on/b/w" "$UR/mnt-on/b/new"
uring_restore
trap cleanup EXIT
echo "FUSE over io_uring against /dev/fuse (best of $ROUNDS; below 1: io_uring is faster; the switch is back to $URING_WAS)"
echo "io_uring mount says: $transport"
if [ -z "${PASSTHROUGH_HP:-}" ]; then
  printf '%-30s %12s %12s %17s\n' workload io_uring devfuse io_uring/devfuse
  for w in "${UW[@]}"; do
    printf '%-30s %11.3fs %11.3fs %17.2f\n' "$w" "${UT[$w,on]}" "${UT[$w,off]}" "$(echo "${UT[$w,on]} / ${UT[$w,off]}" | bc -l)"
  done
else
  # Gains as issue 20 states them: how many times faster io_uring was.
  echo "passthrough_hp ($PASSTHROUGH_HP) says: ${hpsays:-nothing about io_uring}"
  printf '%-30s %10s %10s %7s %10s %10s %7s %9s\n' workload io_uring devfuse gain hp-uring hp-devfuse hp-gain ours/hp
  for w in "${UW[@]}"; do
    printf '%-30s %9.3fs %9.3fs %7.2f %9.3fs %9.3fs %7.2f %9.2f\n' "$w" "${UT[$w,on]}" "${UT[$w,off]}" \
      "$(echo "${UT[$w,off]} / ${UT[$w,on]}" | bc -l)" "${UT[$w,hpon]}" "${UT[$w,hpoff]}" \
      "$(echo "${UT[$w,hpoff]} / ${UT[$w,hpon]}" | bc -l)" "$(echo "${UT[$w,on]} / ${UT[$w,hpon]}" | bc -l)"
  done
fi
fi
fi
