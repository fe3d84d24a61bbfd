#!/usr/bin/env bash
# The crash-consistency suite (tests/crash/crash_suite.py): kill -9 of a loaded `weir serve`
# at random moments, then an independent reader checks that every acknowledged record is
# there exactly once, at its offset, in order, and that committed group offsets survived.
# Runs both flush modes. The test command runs a short form; a soak is
#   CYCLES=200 ./scripts/crash-suite.sh
# Then the exactly-once test (tests/crash/exactly_once.py: kill -9 of the broker and of a
# consume-transform-produce pipeline through transactions); its soak is
#   CYCLES=0 EOS_CYCLES=100 ./scripts/crash-suite.sh
# env: WEIR (the binary; default target/debug/weir), CYCLES (8 per mode; 0 skips them),
# MODES, EOS_CYCLES (10; 0 skips it), SEED. Needs ./scripts/install-test-deps.sh first.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
WEIR=${WEIR:-$root/target/debug/weir}
PY=$root/.venv/bin/python
for v in "${CYCLES:-8}" "${EOS_CYCLES:-10}"; do
  case $v in ''|*[!0-9]*) echo "crash-suite: CYCLES and EOS_CYCLES must be numbers, not '$v'" >&2; exit 2;; esac
done
if [ "${CYCLES:-8}" -gt 0 ]; then
  for mode in ${MODES:-page-cache fsync}; do
    "$PY" "$root/tests/crash/crash_suite.py" "$WEIR" --mode "$mode" --cycles "${CYCLES:-8}" \
      ${SEED:+--seed "$SEED"}
  done
fi
if [ "${EOS_CYCLES:-10}" -gt 0 ]; then
  "$PY" "$root/tests/crash/exactly_once.py" "$WEIR" --cycles "${EOS_CYCLES:-10}" ${SEED:+--seed "$SEED"}
fi
