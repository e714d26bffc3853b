#!/usr/bin/env bash
# FUSE requests by opcode per workload: deterministic where timings on a
# shared machine are not. Mounts TREE (a git checkout) afresh for each
# workload with the daemon's opcode trace on (-debug), runs the workload
# twice — cold (a fresh mount: the kernel has nothing cached) and warm (the
# same again) — and counts the requests between markers (a LOOKUP of a name
# that exists nowhere).
#
#   scripts/opcounts.sh TARGET TREE [WORKLOAD...]
#
# TARGET: main (no rules), view (a [[view]] of principal agent, uid 1001,
# the workloads run as that uid), viewro (the same view with read_only =
# true; the write workloads then fail), rules (the main mount with a rule for
# the agent only), loopback (go-fuse's example, LOOPBACK=path to its
# binary), bindfs (when installed). The index is off unless INDEX=1.
# WORKLOADs: git-status, ls-lR, find, read-all (default: these four), and
# ls-l (one folder, the tree's top), grep (grep -r), create (1,000 files
# of 5 bytes in 10 new folders; warm: 1,000 more beside them), untar (the
# tree without .git into a new folder; warm: again into another), rm-rf
# (of a copy of the tree made in the backing folder before the mount; warm:
# of a second copy after `ls -lR` of it), writes (1,000 write(2)s of 10
# bytes to one new file). The write workloads remove what
# they made from TREE at the end. WARM=N runs the warm workload N times
# (warm, warm2, ...; the write workloads once). Needs root. Prints one
# line per workload and temperature: the total and the counts of each
# opcode.
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=${BIN:-$PWD/bin/neuralisfs}
target=$1 tree=$2; shift 2
[ $# -gt 0 ] || set -- git-status ls-lR find read-all
[ "$(id -u)" -eq 0 ] || { echo "opcounts: run as root" >&2; exit 1; }
[ -d "$tree/.git" ] || { echo "opcounts: $tree is not a git checkout" >&2; exit 1; }
W=$(mktemp -d /tmp/neuralisfs-opcounts.XXXXXX)
chmod 755 "$W" # the view's principal walks to its mountpoint
PID=
stop() {
  for m in $(awk -v w="$W/" 'index($2, w) == 1 {print $2}' /proc/mounts | sort -r); do
    umount "$m" 2>/dev/null || umount -l "$m" 2>/dev/null || true
  done
  if [ -n "$PID" ]; then wait "$PID" 2>/dev/null || true; fi
  PID=
}
scratch() { rm -rf "$tree"/.oc-*; }
trap 'stop; scratch; [ -n "${KEEP:-}" ] || rm -rf "$W"' EXIT
case " $* " in *" untar "*|*" rm-rf "*) tar cf "$W/tree.tar" --exclude=./.git -C "$tree" . ;; esac
# git refreshes the index's stat data at its first status after a change;
# do it here, so that git-status counts the same on every target.
git -c safe.directory='*' -C "$tree" status --porcelain > /dev/null

AS=() # how the workloads run
start() { # mounts tree; sets D (the tree's folder on the mount)
  mkdir -p "$W/mnt" "$W/view"
  : > "$W/log"; : > "$W/out"
  local ready="mounted at"
  case $target in
    loopback)
      "${LOOPBACK:?set LOOPBACK to go-fuse loopback binary}" -debug "$W/mnt" "$tree" > "$W/out" 2> "$W/log" &
      PID=$!; ready="Mounted!"; D=$W/mnt ;;
    bindfs)
      bindfs -f -d --no-allow-other "$tree" "$W/mnt" > "$W/out" 2> "$W/log" &
      PID=$!; ready="INIT:"; D=$W/mnt ;;
    main|rules|view|viewro)
      {
        echo "state_dir = \"$W/state\""
        echo "[index]"; if [ -n "${INDEX:-}" ]; then echo "enabled = true"; else echo "enabled = false"; fi
        echo '[[principal]]'; echo 'name = "agent"'; echo 'uids = [1001]'; echo 'gids = [1001]'
        echo '[[source]]'; echo 'slug = "t"'; echo 'kind = "local"'; echo "path = \"$tree\""
        if [ "$target" = rules ]; then
          printf '[[rule]]\nuri = "t://**/*.secret"\nwho = ["agent"]\ndeny = ["read"]\n'
        fi
        if [ "$target" = view ] || [ "$target" = viewro ]; then
          printf '[[view]]\nprincipal = "agent"\nmountpoint = "%s"\n' "$W/view"
          if [ "$target" = viewro ]; then echo 'read_only = true'; fi
        fi
      } > "$W/c.toml"
      "$BIN" mount -debug -c "$W/c.toml" "$W/mnt" > "$W/out" 2> "$W/log" &
      PID=$!; D=$W/mnt/t
      case $target in view|viewro) D=$W/view/t ;; esac ;;
    *) echo "opcounts: unknown target $target" >&2; exit 1 ;;
  esac
  for _ in $(seq 1 200); do grep -q "$ready" "$W/out" "$W/log" 2>/dev/null && break; sleep 0.05; done
  grep -q "$ready" "$W/out" "$W/log" || { echo "opcounts: mount failed: $(tail -3 "$W/log")" >&2; exit 1; }
  if [ "$target" = view ] || [ "$target" = viewro ]; then
    for _ in $(seq 1 100); do grep -q " $W/view " /proc/mounts && break; sleep 0.05; done
    AS=(setpriv --reuid=1001 --regid=1001 --clear-groups)
  else
    AS=()
  fi
}
mark() { (cd / && "${AS[@]}" stat "$D/.opcount-$1") >/dev/null 2>&1 || true; }
run() { # workload
  local g=(git -c safe.directory='*' -C "$D" status --porcelain)
  case $1 in
    git-status) (cd / && "${AS[@]}" "${g[@]}") ;;
    ls-lR) (cd / && "${AS[@]}" ls -lR "$D") ;;
    find) (cd / && "${AS[@]}" find "$D") ;;
    read-all) (cd / && "${AS[@]}" find "$D" -path "$D/.git" -prune -o -type f -exec cat {} +) ;;
    ls-l) (cd / && "${AS[@]}" ls -l "$D") ;;
    grep) (cd / && "${AS[@]}" grep -r --exclude-dir=.git -c "func main" "$D") ;;
    create) (cd / && "${AS[@]}" /usr/bin/python3 -c '
import os, sys
top = sys.argv[1]
os.makedirs(top, exist_ok=True)
for i in range(1000):
    d = os.path.join(top, "d%d" % (i % 10))
    if i < 10: os.mkdir(d)
    with open(os.path.join(d, "f%04d" % i), "w") as f: f.write("file\n")' "$D/.oc-create-$2") ;;
    untar) (cd / && "${AS[@]}" mkdir "$D/.oc-untar-$2" && "${AS[@]}" tar xf "$W/tree.tar" -C "$D/.oc-untar-$2") ;;
    writes) (cd / && "${AS[@]}" /usr/bin/python3 -c '
import os, sys
fd = os.open(sys.argv[1], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
for _ in range(1000): os.write(fd, b"0123456789")
os.close(fd)' "$D/.oc-writes-$2") ;;
    rm-rf) (cd / && "${AS[@]}" rm -rf "$D/.oc-rm-$2") ;;
  esac > /dev/null 2>&1 || echo "opcounts: $1 failed on $target" >&2
}
for w in "$@"; do
  scratch
  if [ "$w" = rm-rf ]; then # two copies, made before the mount
    for c in cold warm; do mkdir "$tree/.oc-rm-$c" && tar xf "$W/tree.tar" -C "$tree/.oc-rm-$c"; done
    [ "$target" = view ] && chown -R 1001:1001 "$tree"/.oc-rm-*
  fi
  [ "$target" = view ] && case $w in create|untar|rm-rf|writes) chmod 1777 "$tree" ;; esac
  start
  mark "cold-$w"; run "$w" cold; mark end
  [ "$w" = rm-rf ] && (cd / && "${AS[@]}" ls -lR "$D/.oc-rm-warm" > /dev/null 2>&1)
  mark "warm-$w"; run "$w" warm; mark end
  case $w in create | untar | rm-rf | writes) ;; *)
    for ((k = 2; k <= ${WARM:-1}; k++)); do mark "warm$k-$w"; run "$w" warm; mark end; done ;;
  esac
  sleep 0.5 # the trace is written behind the requests
  stop
  [ "$target" = view ] && chmod 755 "$tree"
  # go-fuse's trace: "rx 12: LOOKUP n1 [\"name\"] ..."
  python3 - "$target" "$W/log" <<'PY'
import re, sys
target, log = sys.argv[1], sys.argv[2]
sec, order, counts = None, [], {}
last = None # bindfs (libfuse) names the path on the line after the opcode
for line in open(log, errors="replace"):
    m = re.search(r"\brx \d+: ([A-Z_0-9]+)", line) or re.search(r"opcode: ([A-Z_0-9]+) \(", line)
    if m:
        last = (sec, m.group(1))
        if sec:
            counts[sec][m.group(1)] = counts[sec].get(m.group(1), 0) + 1
    k = re.search(r"\.opcount-([A-Za-z0-9_-]+)", line)
    if not k or not last:
        continue
    if last[0]: # the marker's own LOOKUP is no part of the workload
        counts[last[0]][last[1]] -= 1
    last = None
    sec = None if k.group(1) == "end" else k.group(1)
    if sec:
        order.append(sec); counts[sec] = {}
for sec in order:
    c = {k: v for k, v in counts[sec].items() if v}
    print("%-9s %-18s %7d requests: %s" % (target, sec, sum(c.values()), " ".join("%s=%d" % kv for kv in sorted(c.items()))))
PY
done
