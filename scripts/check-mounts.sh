#!/usr/bin/env bash
# Fails when tests left a neuralisfs mount behind (gocryptfs test.bash does the same).
left=$(awk '$3 ~ /neuralisfs/ && $2 ~ /^\/tmp\// {print $2}' /proc/mounts)
if [ -n "$left" ]; then
  echo "check-mounts: neuralisfs mounts left behind:" $left >&2
  exit 1
fi
