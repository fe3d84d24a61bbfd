#!/usr/bin/env bash
# W1 (100 B, acks=1, 1 and 8 partitions) with Weir's own producer beside the ceiling's
# minimal broker, and beside an older build when BASE names its binary; puts the section
# into BENCHMARKS.md. env: ROUNDS (5), W1_RECORDS (3000000), BASE, BASE_NAME (what BASE is).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
ceiling_src=$root/../shared/bench/ceiling
[ -f "$ceiling_src/Cargo.toml" ] || { echo "no ceiling tool at $ceiling_src"; exit 1; }
cargo build --release -p weir --quiet
cargo build --release --quiet --manifest-path "$ceiling_src/Cargo.toml" --target-dir /tmp/weir-ceiling-target
python3 scripts/bench_w1.py target/release/weir /tmp/weir-ceiling-target/release/ceiling "${ROUNDS:-5}" ${BASE:-} \
  | python3 scripts/bench_section.py w1 BENCHMARKS.md
