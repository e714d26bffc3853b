#!/usr/bin/env bash
# Installs what neuralisfs needs from Debian when it is missing:
# fuse3 (fusermount3 for non-root mounts), git (tests compare against it),
# bubblewrap (the agent sandbox in tests), acl (setfacl/getfacl: tests compare
# ACL behaviour with a plain folder). Go modules come from the module
# proxy through `go build`. Needs root for apt-get; without root it only
# reports what is missing.
set -euo pipefail
need=()
command -v fusermount3 >/dev/null 2>&1 || need+=(fuse3)
command -v git >/dev/null 2>&1 || need+=(git)
command -v bwrap >/dev/null 2>&1 || need+=(bubblewrap)
command -v python3 >/dev/null 2>&1 || need+=(python3)
command -v setfacl >/dev/null 2>&1 || need+=(acl)
if [ ${#need[@]} -eq 0 ]; then
  exit 0
fi
if [ "$(id -u)" -ne 0 ]; then
  echo "deps: missing Debian packages: ${need[*]} (run as root, or apt-get install them)" >&2
  exit 0
fi
echo "deps: installing ${need[*]}" >&2
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq >/dev/null
apt-get install -y -qq "${need[@]}" >/dev/null
