#!/usr/bin/env bash
# Starts a release `weir serve` on a scratch directory, runs scripts/bench_producer.py
# (Weir's producer against librdkafka's, same records, same settings, one run), and puts
# the result in BENCHMARKS.md. env: N (records, default 1000000), ROUNDS (3), CODEC (none).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
./scripts/install-test-deps.sh
cargo build --release -p weir --quiet
work=$(mktemp -d /tmp/weir-bench-producer.XXXXXX)
port=$(.venv/bin/python -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
target/release/weir serve --listen "127.0.0.1:$port" --data-dir "$work/data" >"$work/serve.log" 2>&1 &
pid=$!
trap 'kill $pid 2>/dev/null; wait $pid 2>/dev/null; rm -rf "$work"' EXIT
sleep 1
.venv/bin/python scripts/bench_producer.py "127.0.0.1:$port" target/release/weir "${N:-1000000}" "${ROUNDS:-3}" \
  | python3 scripts/bench_section.py producer BENCHMARKS.md
