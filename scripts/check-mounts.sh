#!/usr/bin/env bash
# Fails when tests left a neuralisfs mount behind (gocryptfs test.bash does
# the same). Only the tests' own temporary folders (t.TempDir: /tmp/Test…,
# /tmp/Benchmark…) are checked, so a daemon someone runs by hand (make run,
# make bench) on the same machine does not fail the tests.
left=$(awk '$3 ~ /neuralisfs/ && $2 ~ /^\/tmp\/(Test|Benchmark|Fuzz)/ {print $2}' /proc/mounts)
if [ -n "$left" ]; then
  echo "check-mounts: neuralisfs mounts left behind:" $left >&2
  exit 1
fi
