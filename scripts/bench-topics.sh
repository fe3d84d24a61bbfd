#!/usr/bin/env bash
# What creating a topic costs when 100 topics exist, and when 10,000 do: starts a release
# `weir serve` on a scratch directory, creates N (10,000) one-partition topics one request
# at a time with scripts/bench_topics.py, and puts the result in BENCHMARKS.md.
# Each partition holds three files open, so 10,000 topics need about 65,536 open files: the
# script raises the broker's limit with prlimit where it may, else creates what fits.
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
asked=${N:-10000}
n=$asked
# 65,536 open files if this shell may raise its limit that far (root with CAP_SYS_RESOURCE);
# otherwise the hard limit there is, and only as many topics as it holds (three files per
# partition, after 100 connections and the broker's reserve), which the section says.
if prlimit --nofile=65536:65536 true 2>/dev/null; then
  nofile=65536
else
  nofile=$(ulimit -Hn)
  fits=$(( ((nofile - 172) / 3 - 60) / 500 * 500 ))
  [ "$n" -gt "$fits" ] && n=$fits
fi
# The controller mutation quota is lifted: this measures the broker, not the quota.
prlimit --nofile="$nofile:$nofile" "$WEIR" serve --listen "127.0.0.1:$port" \
  --data-dir "$work/data" --override controller.mutation.rate=1000000 \
  --override max.connections=100 >"$work/serve.log" 2>&1 &
pid=$!
trap 'kill $pid 2>/dev/null; wait $pid 2>/dev/null; rm -rf "$work"' EXIT
for _ in $(seq 1 100); do
  .venv/bin/python -c "import socket,sys; s=socket.socket(); sys.exit(s.connect_ex(('127.0.0.1', $port)))" && break
  sleep 0.1
done
BUILD=$build ASKED=$asked NOFILE=$nofile .venv/bin/python scripts/bench_topics.py "127.0.0.1:$port" \
  "$work/data" "$n" \
  | python3 scripts/bench_section.py topics BENCHMARKS.md
