#!/usr/bin/env bash
# The fault harness (tests/faults/fault_suite.py): three brokers, each in its own network
# namespace, and three etcd nodes, under idempotent acks=all producers and a consumer
# group, with random faults (kill -9 of a leader, a follower, the controller or an etcd
# node; a leader or the controller cut off; a broker split from the others; a full disk;
# a paused process). Then an independent reader checks that no acknowledged record was
# lost, duplicated or moved, that replicas are identical, and that committed offsets
# survived. The test command runs a short form (one fault of each kind); a soak is
#   CYCLES=100 ./scripts/fault-suite.sh
# env: WEIR (the binary; default target/debug/weir), CYCLES (9), SEED, HOLD (5 s), REPORT.
# Needs root and ./scripts/install-test-deps.sh first.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
WEIR=${WEIR:-$root/target/debug/weir}
command -v etcd >/dev/null || { echo "etcd is not installed: run ./scripts/install-test-deps.sh"; exit 1; }
command -v iptables >/dev/null || { echo "iptables is not installed: run ./scripts/install-test-deps.sh"; exit 1; }
exec "$root/.venv/bin/python" "$root/tests/faults/fault_suite.py" "$WEIR" \
  --cycles "${CYCLES:-9}" --hold "${HOLD:-5}" ${SEED:+--seed "$SEED"} ${REPORT:+--report "$REPORT"}
