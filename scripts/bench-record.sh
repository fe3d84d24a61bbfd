#!/usr/bin/env bash
# Runs the record-format benchmarks (crates/weir-record/benches/record.rs) and rewrites the
# "Record formats" section of BENCHMARKS.md from criterion's results, with the command and
# the machine. Every figure in the table comes from the same run.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
rm -rf target/criterion/batch-*
cargo bench -p weir-record --bench record -- --noplot "$@"
python3 scripts/bench_record_table.py target/criterion BENCHMARKS.md
