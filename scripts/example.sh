#!/usr/bin/env bash
# Prepares what `make run` mounts, under RUN_DIR (default: .run):
#   RUN_DIR/config.toml  example/config.toml.in with its paths filled in
#   RUN_DIR/repo         a small git checkout: four commits on main, a branch
#                        "feature", a tag v0.1, a staged file, a modified file
#                        and an untracked one (made once; left as it is after)
#   RUN_DIR/mnt          the main mountpoint
#   RUN_DIR/agent        the agent's view (README "Set up")
#   RUN_DIR/state        state_dir
# Running it again changes nothing that exists. tests/example_test.go runs
# it the way the Makefile does.
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
run=${1:-$here/.run}
mkdir -p "$run/mnt" "$run/agent" "$run/state"
# The agent (uid 1001) walks into the view and reads the backing files:
# the folders on the way must be searchable by others.
chmod 0755 "$run" "$run/mnt" "$run/agent"

repo=$run/repo
if [ ! -d "$repo/.git" ]; then
  tmp=$run/repo.tmp
  rm -rf "$tmp"
  mkdir -p "$tmp"
  export GIT_CONFIG_GLOBAL=/dev/null GIT_CONFIG_NOSYSTEM=1
  export GIT_AUTHOR_NAME="Ada Example" GIT_AUTHOR_EMAIL=ada@example.com
  export GIT_COMMITTER_NAME="Ada Example" GIT_COMMITTER_EMAIL=ada@example.com
  g() { git -C "$tmp" -c init.defaultBranch=main -c commit.gpgsign=false "$@" >/dev/null; }
  at() { export GIT_AUTHOR_DATE="$1" GIT_COMMITTER_DATE="$1"; }
  g init -q
  mkdir -p "$tmp/src" "$tmp/docs" "$tmp/secrets"
  printf '# example repo\n\nA small checkout that make run mounts as the git source "repo".\n' > "$tmp/README.md"
  printf 'def greet(name):\n    return "hello " + name\n' > "$tmp/src/app.py"
  printf 'The design of the example: one module, one helper.\n' > "$tmp/docs/design.md"
  printf 'api_key = "not-a-real-key"\n' > "$tmp/secrets/api.txt"
  at "2026-01-05T10:00:00Z"; g add -A; g commit -q -m "first commit"
  printf 'def shout(s):\n    return s.upper()\n' > "$tmp/src/util.py"
  printf 'from util import shout\n\ndef greet(name):\n    return shout("hello " + name)\n' > "$tmp/src/app.py"
  at "2026-01-06T10:00:00Z"; g add -A; g commit -q -m "app: shout the greeting"
  g tag v0.1
  g checkout -q -b feature
  printf 'A feature that is not merged yet.\n' > "$tmp/docs/feature.md"
  at "2026-01-07T10:00:00Z"; g add -A; g commit -q -m "docs: describe the feature"
  g checkout -q main
  printf '# example repo\n\nA small checkout that make run mounts as the git source "repo".\nSearch finds the word neuralis here.\n' > "$tmp/README.md"
  at "2026-01-08T10:00:00Z"; g commit -q -am "README: say what search finds"
  # Work in progress: staged, modified, untracked, and a change under
  # secrets/ that the agent's .status does not show.
  printf 'def whisper(s):\n    return s.lower()\n' > "$tmp/src/quiet.py"
  g add src/quiet.py
  printf 'def shout(s):\n    return s.upper() + "!"\n' > "$tmp/src/util.py"
  printf 'notes nobody committed\n' > "$tmp/notes.txt"
  printf 'api_key = "rotated"\n' > "$tmp/secrets/api.txt"
  mv "$tmp" "$repo"
fi

sed "s|@EXAMPLE@|$here/example|g; s|@RUN@|$run|g" "$here/example/config.toml.in" > "$run/config.toml.new"
mv "$run/config.toml.new" "$run/config.toml"
