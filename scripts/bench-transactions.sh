#!/usr/bin/env bash
# Starts a release `weir serve` on a scratch directory, runs scripts/bench_transactions.py
# (transactional produce beside idempotent produce through librdkafka, committing every
# 100 ms, 1 and 8 partitions), then the same with `weir bench produce`, and puts the result
# in BENCHMARKS.md.
# env: SECONDS_EACH (per librdkafka producer and round, default 10), ROUNDS (default 3),
# WEIR_RECORDS (per `weir bench` run, default 10000000).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
./scripts/install-test-deps.sh
cargo build --release -p weir --locked --quiet
work=$(mktemp -d /tmp/weir-bench-txn.XXXXXX)
port=$(.venv/bin/python -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
target/release/weir serve --listen "127.0.0.1:$port" --data-dir "$work/data" >"$work/serve.log" 2>&1 &
pid=$!
trap 'kill $pid 2>/dev/null; wait $pid 2>/dev/null; rm -rf "$work"' EXIT
sleep 1
WEIR=target/release/weir .venv/bin/python scripts/bench_transactions.py "127.0.0.1:$port" "${SECONDS_EACH:-10}" "${ROUNDS:-3}" |
  python3 scripts/bench_section.py transactions BENCHMARKS.md
