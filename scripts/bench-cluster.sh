#!/usr/bin/env bash
# A three-broker cluster on this machine: W1 against it beside one broker and the
# ceiling, time from CreateTopics to a topic every broker serves, and controller failover
# after kill -9; puts the section into BENCHMARKS.md.
# env: ROUNDS (3), W1_RECORDS (2000000), N (10), SESSION_MS (3000).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
ceiling_src=$root/../shared/bench/ceiling
[ -f "$ceiling_src/Cargo.toml" ] || { echo "no ceiling tool at $ceiling_src"; exit 1; }
command -v etcd >/dev/null || { echo "etcd is not installed: run ./scripts/install-test-deps.sh"; exit 1; }
cargo build --release -p weir --quiet
cargo build --release --quiet --manifest-path "$ceiling_src/Cargo.toml" --target-dir /tmp/weir-ceiling-target
.venv/bin/python scripts/bench_cluster.py target/release/weir /tmp/weir-ceiling-target/release/ceiling \
  | python3 scripts/bench_section.py cluster BENCHMARKS.md
