#!/usr/bin/env bash
# Whole-process benchmark: the same workloads on the native backing folder,
# on a neuralisfs mount of it (no rules), on a neuralisfs mount with 1,000
# rules, and on a bindfs mount when bindfs is installed. Prints seconds per
# workload and the ratio to native (lower is better; 1.00 = as fast as the
# disk). Needs root (drop_caches, mounting). Sized to finish in a few minutes
# on 2 cores: BENCH_MB (sequential file size) and BENCH_TREE (source tree to
# copy, default the Go toolchain's src/) change the load.
# BENCH_ONLY=journal (or mount, index, git; comma-separated) runs only those.
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=$PWD/bin/neuralisfs
MB=${BENCH_MB:-256}
TREE=${BENCH_TREE:-$(go env GOROOT)/src}
SMALL=${BENCH_SMALL:-10000}
# BENCH_ONLY picks sections (comma-separated: mount,index,git,journal).
ONLY=${BENCH_ONLY:-mount,index,git,journal}
want() { [[ ",$ONLY," == *",$1,"* ]]; }
WORK=$(mktemp -d /tmp/neuralisfs-bench.XXXXXX)
PIDS=()
cleanup() {
  for m in "$WORK"/mnt-*; do
    mountpoint -q "$m" 2>/dev/null && { "$BIN" unmount "$m" >/dev/null 2>&1 || umount -l "$m" 2>/dev/null || true; }
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

drop() { sync; echo 3 > /proc/sys/vm/drop_caches; }
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

mount_nfs() { # name config-extra → mountpoint
  local name=$1 extra=$2 mp="$WORK/mnt-$1"
  mkdir -p "$mp"
  cat > "$WORK/$name.toml" <<EOF
state_dir = "$WORK/state-$name"
[index]
enabled = false
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

if want mount; then
declare -A TARGET
TARGET[native]="$WORK/backing"
TARGET[neuralisfs]=$(mount_nfs plain "")
TARGET[rules1000]=$(mount_nfs rules "$(rules1000)")
NAMES=(native neuralisfs rules1000)
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
  T[$w,$n]=$(echo "$e - $s" | bc -l)
}

WORKLOADS=()
workload() { # name, prepare (untimed, on the backing folder $B), command (timed, on $D)
  local w=$1 prep=$2 cmd=$3
  WORKLOADS+=("$w")
  for n in "${NAMES[@]}"; do
    B="$WORK/backing" D=${TARGET[$n]} bash -c "$prep" >/dev/null 2>&1 || true
    sleep 0.2 # let the watcher tell the mounts about the preparation
    time_it "$w" "$n" "$cmd"
  done
}

echo "bench: running workloads on: ${NAMES[*]}" >&2
workload "seq write ${MB} MiB (fsync)" 'rm -f $B/big' "dd if=/dev/zero of=\$D/big bs=1M count=$MB conv=fsync status=none"
workload "seq read cold" 'sync; echo 3 > /proc/sys/vm/drop_caches' 'cat $D/big > /dev/null'
workload "seq read warm" 'cat $D/big > /dev/null' 'cat $D/big > /dev/null'
workload "4k random reads (10k)" 'true' "python3 -c '
import os, random
fd = os.open(os.environ[\"D\"] + \"/big\", os.O_RDONLY); size = os.fstat(fd).st_size; r = random.Random(1)
for _ in range(10000): os.pread(fd, 4096, r.randrange(0, size - 4096) & ~4095)'"
workload "create ${SMALL} small files" 'rm -rf $B/small; mkdir $B/small' "cd \$D/small && python3 -c '
for i in range($SMALL):
    d = \"d%02d\" % (i % 50)
    if i < 50: __import__(\"os\").mkdir(d)
    open(\"%s/f%05d\" % (d, i), \"w\").write(\"small file %d\\n\" % i)'"
workload "find tree" 'true' 'find $D/repo | wc -l'
workload "ls -lR tree" 'true' 'ls -lR $D/repo | wc -l'
workload "read every small file" 'true' 'find $D/repo -type f -print0 | xargs -0 cat | wc -c'
workload "grep -r tree" 'true' 'grep -r "func main" $D/repo | wc -l'
workload "untar tree" 'rm -rf $B/untar; mkdir $B/untar' "tar xf $WORK/tree.tar -C \$D/untar"
workload "git status" 'git -c safe.directory="*" -C $D/repo status --porcelain >/dev/null' 'git -c safe.directory="*" -C $D/repo status --porcelain | wc -l'
workload "rm -rf tree" "rm -rf \$B/untar; mkdir \$B/untar; tar xf $WORK/tree.tar -C \$B/untar; sync" 'rm -rf $D/untar'

printf '%-28s' "workload"
for n in "${NAMES[@]}"; do printf '%14s' "$n"; done
for n in "${NAMES[@]:1}"; do printf '%12s' "$n/nat"; done
echo
for w in "${WORKLOADS[@]}"; do
  printf '%-28s' "$w"
  for n in "${NAMES[@]}"; do printf '%13.3fs' "${T[$w,$n]}"; done
  for n in "${NAMES[@]:1}"; do printf '%12.2f' "$(echo "${T[$w,$n]} / ${T[$w,native]}" | bc -l)"; done
  echo
done

fi

if want index; then
# ---------------------------------------------------------------- index
echo >&2; echo "bench: index section..." >&2
IDX="$WORK/idx"; mkdir -p "$IDX/mnt"
cat > "$IDX/c.toml" <<TOML
state_dir = "$IDX/state"
[[source]]
slug = "tree"
kind = "local"
path = "$WORK/backing/repo"
TOML
s=$(now)
"$BIN" mount -c "$IDX/c.toml" "$IDX/mnt" > "$IDX/out" 2> "$IDX/err" &
PIDS+=($!)
for _ in $(seq 1 1200); do grep -q "msg=indexed source=tree" "$IDX/err" 2>/dev/null && break; sleep 0.1; done
e=$(now)
line=$(grep "msg=indexed source=tree" "$IDX/err" | head -1)
files=$(echo "$line" | sed -n 's/.*reindexed=\([0-9]*\).*/\1/p')
bytes=$("$BIN" status -c "$IDX/c.toml" --json | python3 -c 'import json,sys; d=json.load(sys.stdin); print(sum((s.get("Index") or {}).get("bytes",0) for s in d["sources"]))')
build=$(echo "$e - $s" | bc -l)
printf '%-40s %8.2fs  %8.0f files/s  %6.1f MB/s (%s files, %.1f MB)\n' "first index build" "$build" "$(echo "$files / $build" | bc -l)" "$(echo "$bytes / 1000000 / $build" | bc -l)" "$files" "$(echo "$bytes / 1000000" | bc -l)"
# freshness under a burst of 1,000 writes through the mount
python3 - "$IDX/mnt/tree" <<'PY'
import os, sys
d = os.path.join(sys.argv[1], "burst"); os.makedirs(d, exist_ok=True)
for i in range(1000):
    with open(os.path.join(d, "f%04d.txt" % i), "w") as f:
        f.write("burst token burstword%04d\n" % i)
PY
sleep 2
"$BIN" status -c "$IDX/c.toml" --json | python3 -c '
import json, sys
d = json.load(sys.stdin)
for s in d["sources"]:
    ix = s.get("Index") or {}
    print("%-40s median %6.1f ms, worst of last 100 %6.1f ms (close → searchable)" % ("freshness, burst of 1,000 writes", ix.get("freshness_median", 0)/1e6, ix.get("freshness_worst", 0)/1e6))'
# search latency through .neuralis/search, beside grep -r (and rg) on the same tree
python3 - "$IDX/mnt" "$WORK/backing/repo" <<'PY'
import os, sys, time, subprocess, urllib.parse, statistics
mnt, tree = sys.argv[1], sys.argv[2]
def lat(q, n=30):
    p = os.path.join(mnt, ".neuralis", "search", urllib.parse.quote(q, safe=""))
    ts = []
    for _ in range(n):
        s = time.perf_counter(); open(p).read(); ts.append(time.perf_counter() - s)
    ts.sort()
    return statistics.median(ts) * 1000, ts[int(len(ts) * 0.99) - 1] * 1000
med = {}
for name, q in (("term", "goroutine"), ("phrase", '"func main"'), ("path-filtered", "+goroutine +path:src/net/**")):
    m, p99 = lat(q)
    med[name] = m
    print("%-40s median %7.2f ms, p99 %7.2f ms" % ("search " + name, m, p99))
gs = []
for _ in range(3):
    s = time.perf_counter(); subprocess.run(["grep", "-rl", "goroutine", tree], stdout=subprocess.DEVNULL); gs.append((time.perf_counter() - s) * 1000)
g = statistics.median(gs)
print("%-40s %7.1f ms (median of 3; %.0fx the term search's median)" % ("grep -rl goroutine (native tree)", g, g / med["term"]))
try:
    s = time.perf_counter(); subprocess.run(["rg", "-l", "goroutine", tree], stdout=subprocess.DEVNULL); print("%-40s %7.1f ms" % ("rg -l goroutine (native tree)", (time.perf_counter() - s) * 1000))
except FileNotFoundError:
    pass
PY
"$BIN" unmount "$IDX/mnt" >/dev/null

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
for i in range(1000): open('%s/f%04d' % (d, i), 'w').write('x' * 4096)" ;;
    overwrite) python3 -c "
d='$D/c-$mode-$r'
for i in range(1000): open('%s/f%04d' % (d, i), 'w').write('y' * 4096)" ;;
    big) dd if=/dev/zero of="$D/big-$mode" bs=1M count=64 conv=fsync status=none; dd if=/dev/zero of="$D/big-$mode" bs=1M count=64 conv=fsync,notrunc status=none ;;
    rm) rm -rf "$D/c-$mode-$r" ;;
  esac
  echo "$(now) - $s" | bc -l
}
median3() { printf '%s\n' "$@" | sort -g | sed -n 2p; }
# Three rounds, on and off alternating which goes first; medians.
declare -A JT
for r in 1 2 3; do
  order="on off"; [ $((r % 2)) = 0 ] && order="off on"
  for w in create overwrite big rm; do
    for mode in $order; do JT[$w,$mode]="${JT[$w,$mode]:-} $(jw $mode $w $r)"; done
  done
done
printf '%-40s %10s %10s %8s\n' "journal workload (median of 3)" "on" "off" "on/off"
for w in create overwrite big rm; do
  on=$(median3 ${JT[$w,on]}); off=$(median3 ${JT[$w,off]})
  printf '%-40s %9.3fs %9.3fs %8.2f\n' "$w (1000 × 4 KiB; big: 64 MiB twice)" "$on" "$off" "$(echo "$on / $off" | bc -l)"
done
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
