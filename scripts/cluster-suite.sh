#!/usr/bin/env bash
# A Weir cluster on loopback — one real etcd and three `weir serve` brokers — tested with
# real clients (tests/cluster/cluster_suite.py: every client × codec across the brokers,
# a group coordinated elsewhere, kill -9 of the controller and of a broker, a taken id).
# Needs ./scripts/install-test-deps.sh first (etcd-server, the clients).
# env: WEIR (the binary; default target/debug/weir), CLIENTS, CODECS, KEEP=1.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
export WEIR=${WEIR:-$root/target/debug/weir}
export PY=$root/.venv/bin/python
command -v etcd >/dev/null || { echo "etcd is not installed: run ./scripts/install-test-deps.sh"; exit 1; }
if [ -z "${CLIENTS:-}" ] && [ ! -d tests/conformance/node_modules/kafkajs ]; then
  echo "KafkaJS is not installed: run ./scripts/install-test-deps.sh"; exit 1
fi
exec "$PY" tests/cluster/cluster_suite.py
