#!/usr/bin/env bash
# Installs what neuralisfs needs from Debian when it is missing:
# fuse3 (fusermount3 for non-root mounts), git (tests compare against it),
# bubblewrap (the agent sandbox in tests), acl (setfacl/getfacl: tests compare
# ACL behaviour with a plain folder), e2fsprogs (chattr/lsattr: tests of the
# inode-flag ioctls); and, where they can be had, groff,
# zsh, fish and systemd (the man page, completion and unit tests, which
# skip without them). Go modules come from the module
# proxy through `go build`. Needs root for apt-get; without root it only
# reports what is missing.
set -euo pipefail
need=()
command -v fusermount3 >/dev/null 2>&1 || need+=(fuse3)
command -v git >/dev/null 2>&1 || need+=(git)
command -v bwrap >/dev/null 2>&1 || need+=(bubblewrap)
command -v python3 >/dev/null 2>&1 || need+=(python3)
command -v setfacl >/dev/null 2>&1 || need+=(acl)
command -v chattr >/dev/null 2>&1 || need+=(e2fsprogs)
want=()
command -v groff >/dev/null 2>&1 || want+=(groff-base)
command -v zsh >/dev/null 2>&1 || want+=(zsh)
command -v fish >/dev/null 2>&1 || want+=(fish)
command -v systemd-analyze >/dev/null 2>&1 || want+=(systemd)
if [ ${#need[@]} -eq 0 ] && [ ${#want[@]} -eq 0 ]; then
  exit 0
fi
if [ "$(id -u)" -ne 0 ]; then
  echo "deps: missing Debian packages: ${need[*]} ${want[*]} (run as root, or apt-get install them)" >&2
  exit 0
fi
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq >/dev/null
if [ ${#need[@]} -gt 0 ]; then
  echo "deps: installing ${need[*]}" >&2
  apt-get install -y -qq "${need[@]}" >/dev/null
fi
# The optional ones: a failure leaves their tests skipping, nothing more.
if [ ${#want[@]} -gt 0 ]; then
  echo "deps: installing ${want[*]} (optional)" >&2
  apt-get install -y -qq "${want[@]}" >/dev/null 2>&1 || echo "deps: could not install ${want[*]}; the tests that need them skip" >&2
fi
