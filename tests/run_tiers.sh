#!/usr/bin/env bash
# `make test`'s pytest: the groups of tests/conftest.py in two lanes side by side, each group one
# pytest process: the netns testbed alone in one lane; the built-in cluster and then the rest in
# the other (one after the other: the built-in cluster's page-cache watcher reads this machine's
# memory, and the engines tier's imports beside it evicted enough cache for it to warn on a
# healthy boot). Each group's report, its 25 slowest tests included, is printed as its lane
# reaches it; the run fails if any group failed. Extra arguments go to every pytest.
set -uo pipefail
py=${1:?usage: run_tiers.sh PYTHON [pytest args...]}
shift
out=$(mktemp -d)
trap 'kill 0 2>/dev/null; rm -rf "$out"' INT TERM
start=$(date +%s)

run_group() {  # GROUP: its pytest, its report in $out/GROUP.log, its exit code in $out/GROUP.rc
  "$py" -m pytest -ra -q --durations=25 --tier-group "$1" "${@:2}" >"$out/$1.log" 2>&1
  echo $? >"$out/$1.rc"
  echo "$(( $(date +%s) - start ))" >"$out/$1.s"
}

run_group netns "$@" &
lane_netns=$!
( run_group builtin-cluster "$@"; run_group rest "$@" ) &
lane_local=$!
wait "$lane_netns" "$lane_local"

status=0
for group in builtin-cluster rest netns; do
  rc=$(cat "$out/$group.rc" 2>/dev/null || echo 1)
  # 5: the group selected no test (e.g. -k matched nothing there): not a failure.
  [ "$rc" -eq 5 ] && rc=0
  echo "=================== tier group $group: exit $rc (done $(cat "$out/$group.s" 2>/dev/null || echo '?') s after start) ==================="
  cat "$out/$group.log"
  [ "$rc" -ne 0 ] && status=1
done
echo "all groups done in $(( $(date +%s) - start )) s; exit $status"
rm -rf "$out"
exit "$status"
