#!/usr/bin/env bash
# What creating a topic costs when 100 topics exist, and when 10,000 do: starts a release
# `weir serve` on a scratch directory, creates N (10,000) one-partition topics one request
# at a time with scripts/bench_topics.py, and puts the result in BENCHMARKS.md.
# A partition holds no open file of its own (segment files are opened through the log
# manager's bounded cache), so the broker runs under the common limit of 1,024 open files.
# env: WEIR (the binary; default: built here), N.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
./scripts/install-test-deps.sh
build="release build"
if [ -z "${WEIR:-}" ]; then
  cargo build --release -p weir --quiet
  WEIR=${CARGO_TARGET_DIR:-target}/release/weir
else
  build="binary $WEIR"
fi
work=$(mktemp -d /tmp/weir-bench-topics.XXXXXX)
port=$(.venv/bin/python -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
n=${N:-10000}
# The controller mutation quota is lifted: this measures the broker, not the quota.
prlimit --nofile=1024:1024 "$WEIR" serve --listen "127.0.0.1:$port" \
  --data-dir "$work/data" --override controller.mutation.rate=1000000 \
  --override max.connections=100 >"$work/serve.log" 2>&1 &
pid=$!
trap 'kill $pid 2>/dev/null; wait $pid 2>/dev/null; rm -rf "$work"' EXIT
for _ in $(seq 1 100); do
  .venv/bin/python -c "import socket,sys; s=socket.socket(); sys.exit(s.connect_ex(('127.0.0.1', $port)))" && break
  sleep 0.1
done
BUILD=$build BROKER_PID=$pid .venv/bin/python scripts/bench_topics.py "127.0.0.1:$port" \
  "$work/data" "$n" \
  | python3 scripts/bench_section.py topics BENCHMARKS.md
