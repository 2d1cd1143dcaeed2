#!/usr/bin/env bash
# Runs gremlins over some files of one package: gremlins v0.5.0 has no file
# filter, but with --diff REF it mutates only the lines that
# `git diff --merge-base REF` shows as added. This script commits the
# working tree (what git does not ignore) on top of a commit in which the
# chosen files are empty, checks that out in a scratch worktree, and runs
# gremlins there against the empty-file commit, with git's diff.relative so
# that the file names match gremlins' own. Mutants in the other files of the
# package are reported SKIPPED. The repository is left as it was.
#
# usage: internal/mutants/files.sh GREMLINS PKGDIR REPORT.json FILE.go... [-- GREMLINS-FLAGS...]
# e.g.:  GOFLAGS=-short internal/mutants/files.sh .cache/gremlins/v0.5.0/gremlins pkg/dynamo .cache/mutation/dynamo-keys.json keys.go -- --workers 1
set -euo pipefail
[ $# -ge 4 ] || { sed -n '2,12p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2; }
gremlins=$(realpath "$1") pkg=$2 report=$(realpath -m "$3")
shift 3
files=()
while [ $# -gt 0 ] && [ "$1" != "--" ]; do files+=("$1"); shift; done
[ $# -gt 0 ] && shift # the flags for gremlins follow "--"
cd "$(git rev-parse --show-toplevel)"
for f in "${files[@]}"; do
  [ -f "$pkg/$f" ] || { echo "files.sh: no file $pkg/$f" >&2; exit 2; }
done

index=$(mktemp) scratch=$(mktemp -d)
trap 'git worktree remove --force "$scratch" >/dev/null 2>&1 || true; rm -rf "$index" "$scratch"' EXIT
export GIT_INDEX_FILE=$index
git read-tree HEAD
git add -A .
tree=$(git write-tree)
empty=$(git hash-object -w /dev/null)
for f in "${files[@]}"; do git update-index --cacheinfo "100644,$empty,$pkg/$f"; done
base=$(git commit-tree "$(git write-tree)" -p HEAD -m "mutation base: ${files[*]} empty")
head=$(git commit-tree "$tree" -p "$base" -m "mutation head")
unset GIT_INDEX_FILE
git worktree add --quiet --detach "$scratch" "$head"

cd "$scratch/$pkg"
GIT_CONFIG_COUNT=1 GIT_CONFIG_KEY_0=diff.relative GIT_CONFIG_VALUE_0=true \
  "$gremlins" unleash --diff "$base" -o "$report" "$@"
