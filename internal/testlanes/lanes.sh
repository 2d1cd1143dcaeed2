#!/usr/bin/env bash
# make test's scheduler: runs go test on each package in two lanes, one per
# core, each lane one test binary at a time.
#
#   lanes.sh FIRST -- QUEUE
#
# FIRST is a list of jobs the first lane runs in order before anything else
# (the packages that must never run beside each other: they load DynamoDB
# Local hardest); QUEUE is a list of jobs both lanes take from, in order,
# each lane taking the next one as soon as it is free (put the longest
# first). A job is a package path, optionally followed by '@' and extra go
# test flags with ',' for spaces ("./internal/e2e@-parallel,4,-v").
# GO_TEST_FLAGS are given to every job. Each job's output is printed whole
# when it ends, with how long it took; the script exits non-zero when any
# job failed, after every job has run.
set -uo pipefail

first=()
queue=()
seen_sep=0
for a in "$@"; do
  if [ "$a" = "--" ]; then seen_sep=1; continue; fi
  if [ "$seen_sep" = 0 ]; then first+=("$a"); else queue+=("$a"); fi
done

dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
echo 0 > "$dir/next"
: > "$dir/failed"
go=${GO:-go}
read -r -a flags <<< "${GO_TEST_FLAGS:-}"

# run_job runs one job and prints its output when it ends.
run_job() {
  local job=$1 pkg extra=() start rc log
  pkg=${job%%@*}
  if [ "$pkg" != "$job" ]; then IFS=',' read -r -a extra <<< "${job#*@}"; fi
  log=$(mktemp "$dir/log.XXXXXX")
  start=$(date +%s)
  "$go" test "${flags[@]}" "${extra[@]}" "$pkg" > "$log" 2>&1
  rc=$?
  {
    flock 9
    cat "$log"
    echo "lanes: $pkg in $(( $(date +%s) - start )) s (exit $rc)"
    if [ $rc -ne 0 ]; then echo "$pkg" >> "$dir/failed"; fi
  } 9>> "$dir/print.lock"
  rm -f "$log"
}

# take prints the next job of the queue and advances it; it fails when the
# queue is empty.
take() {
  local i
  {
    flock 8
    i=$(cat "$dir/next")
    if [ "$i" -ge "${#queue[@]}" ]; then return 1; fi
    echo $(( i + 1 )) > "$dir/next"
  } 8>> "$dir/queue.lock"
  echo "${queue[$i]}"
}

lane() {
  local job
  for job in "$@"; do run_job "$job"; done
  while job=$(take); do run_job "$job"; done
}

start=$(date +%s)
lane "${first[@]}" &
one=$!
lane &
two=$!
wait "$one" "$two"
echo "lanes: both in $(( $(date +%s) - start )) s"
if [ -s "$dir/failed" ]; then
  echo "lanes: FAILED: $(tr '\n' ' ' < "$dir/failed")"
  exit 1
fi
