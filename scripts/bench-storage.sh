#!/usr/bin/env bash
# Runs the storage-engine benchmarks (crates/weir-log/benches/storage.rs) and rewrites the
# "Storage engine" section of BENCHMARKS.md. Needs ~12 GB free where WEIR_BENCH_DIR points
# (default: the system temp dir); WEIR_BENCH_SCALE=0.1 makes a quick, smaller run.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
cargo bench -p weir-log --bench storage 2>/dev/stderr | sed -n '/^## Storage engine/,$p' | python3 scripts/bench_section.py storage BENCHMARKS.md
