#!/usr/bin/env bash
# The BENCHMARKS.md workloads (W1-W5): builds release Weir and the ceiling tool from
# ../shared/bench/ceiling (outside the project tree), runs scripts/bench_workloads.py and
# puts its section into BENCHMARKS.md. env: ROUNDS (3), W1_RECORDS, W4_MB, W5_SECONDS.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
ceiling_src=$root/../shared/bench/ceiling
[ -f "$ceiling_src/Cargo.toml" ] || { echo "no ceiling tool at $ceiling_src"; exit 1; }
command -v kcat >/dev/null || { echo "kcat is missing: run ./scripts/install-test-deps.sh"; exit 1; }
cargo build --release -p weir --quiet
cargo build --release --quiet --manifest-path "$ceiling_src/Cargo.toml" --target-dir /tmp/weir-ceiling-target
python3 scripts/bench_workloads.py target/release/weir /tmp/weir-ceiling-target/release/ceiling "${ROUNDS:-3}" \
  | python3 scripts/bench_section.py workloads BENCHMARKS.md
