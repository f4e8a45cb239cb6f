#!/usr/bin/env bash
# `make test`'s pytest: the groups of tests/conftest.py in four lanes side by side, each group
# one pytest process: the netns tier on its first testbed; the netns tier on its second testbed;
# the built-in cluster and then the engines tier (one after the other: the engines tier's imports
# evict page cache the built-in cluster's nodes share with this machine); the rest (unit,
# transport, ansible: the CPU-bound part, while the other lanes mostly wait). Each group's report,
# its 25 slowest tests included, is printed once every lane is done; the run fails if any group
# failed. Extra arguments go to every pytest.
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
run_group netns-2 "$@" &
lane_netns_2=$!
( run_group builtin-cluster "$@"; run_group engines "$@" ) &
lane_local=$!
run_group rest "$@" &
lane_rest=$!
wait "$lane_netns" "$lane_netns_2" "$lane_local" "$lane_rest"

status=0
for group in builtin-cluster engines rest netns netns-2; do
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
