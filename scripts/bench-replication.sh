#!/usr/bin/env bash
# Replication on three brokers of this machine: RF=3 acks=all beside RF=1 acks=1 (100 B
# and 1 KiB records), and the time a broker that missed REJOIN_MB of writes takes to
# rejoin the ISR; puts the section into BENCHMARKS.md.
# env: ROUNDS (3), SMALL (2000000), LARGE (400000), REJOIN_MB (1024).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
command -v etcd >/dev/null || { echo "etcd is not installed: run ./scripts/install-test-deps.sh"; exit 1; }
cargo build --release -p weir --quiet
.venv/bin/python scripts/bench_replication.py target/release/weir \
  | python3 scripts/bench_section.py replication BENCHMARKS.md
