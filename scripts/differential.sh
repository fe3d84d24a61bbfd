#!/usr/bin/env bash
# Apache Kafka 4.4 beside Weir (tests/differential): the same scenarios against a one-node
# Kafka (KRaft) and a `weir serve`, observed through Kafka's own Java client, compared. Fails
# on any difference that COMPATIBILITY.md does not list. Kafka's jars come from Maven Central
# into a cache outside the clone (scripts/kafka.sh); needs Java 17+ and Maven.
#
#   ./scripts/differential.sh                 every scenario
#   ./scripts/differential.sh PREFIX...       the scenarios whose names start so (groups/, topics/…)
#
# env: WEIR (the binary; default target/debug/weir), KEEP=1 keeps the brokers' files.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
WEIR=${WEIR:-$root/target/debug/weir}
PY=$root/.venv/bin/python
[ -x "$PY" ] || PY=python3
command -v javac >/dev/null || { echo "javac is not installed: run ./scripts/install-test-deps.sh"; exit 1; }
lib=$(./scripts/kafka.sh fetch)
args=(--weir "$WEIR" --lib "$lib")
for p in "$@"; do args+=(--only "$p"); done
[ "${KEEP:-}" = 1 ] && args+=(--keep)
exec "$PY" tests/differential/run.py "${args[@]}"
