#!/usr/bin/env bash
# `make test`'s pytest: the three groups of tests/conftest.py (netns, builtin-cluster, rest) side
# by side, each one pytest process; each group's report, its 25 slowest tests included, is
# printed whole when it ends (in the order they end), and the run fails if any group failed.
# Extra arguments go to every pytest (e.g. `-x`, `-k name`).
set -uo pipefail
py=${1:?usage: run_tiers.sh PYTHON [pytest args...]}
shift
out=$(mktemp -d)
trap 'kill 0 2>/dev/null; rm -rf "$out"' INT TERM
start=$(date +%s)
declare -A group_of
for group in netns builtin-cluster rest; do
  "$py" -m pytest -ra -q --durations=25 --tier-group "$group" "$@" >"$out/$group.log" 2>&1 &
  group_of[$!]=$group
done
status=0
for _ in 1 2 3; do
  wait -n -p pid
  rc=$?
  group=${group_of[$pid]}
  # 5: the group selected no test (e.g. -k matched nothing there): not a failure.
  [ "$rc" -eq 5 ] && rc=0
  echo "=================== tier group $group: exit $rc ($(( $(date +%s) - start )) s since start) ==================="
  cat "$out/$group.log"
  [ "$rc" -ne 0 ] && status=1
done
echo "all groups done in $(( $(date +%s) - start )) s; exit $status"
rm -rf "$out"
exit "$status"
