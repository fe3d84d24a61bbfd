#!/usr/bin/env bash
# The one gate: everything CI runs. Installs what the tests need (./scripts/install-test-deps.sh),
# then formatting, lints with warnings denied, every test, and a build check of the fuzz targets.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"

step() { printf '\n==> %s\n' "$*"; }

step "installing test dependencies"
./scripts/install-test-deps.sh
export WEIR_PYTHON="$root/.venv/bin/python"
# Tests that mount a small tmpfs (a disk that fills up) need root; here they must run.
export WEIR_REQUIRE_ROOT_TESTS=1

step "cargo fmt --check"
cargo fmt --all --check

step "cargo clippy (warnings are errors)"
cargo clippy --workspace --all-targets --locked -- -D warnings

step "cargo test"
cargo test --workspace --locked

step "real Kafka clients against weir serve (tests/conformance)"
# The whole workspace, as `cargo test` built it: `-p weir` alone resolves other features
# and builds a second copy of the dependencies.
cargo build --workspace --locked --quiet
./scripts/conformance.sh

step "Apache Kafka 4.4 beside Weir, through Kafka's Java client (tests/differential)"
./scripts/differential.sh

step "librdkafka's own integration tests against weir serve (tests/librdkafka, quick subset)"
# Fetches and builds Debian's librdkafka source once, in a cache outside the clone; the
# whole allow-list is `./scripts/librdkafka-suite.sh --all`, on demand.
./scripts/librdkafka-suite.sh

step "a cluster of three brokers on etcd, with real clients (tests/cluster)"
./scripts/cluster-suite.sh

step "replication under random faults: three brokers in network namespaces (tests/faults, short form)"
./scripts/fault-suite.sh

step "crash consistency: kill -9 under load (tests/crash, short form)"
./scripts/crash-suite.sh

step "fuzz targets build"
cargo check --manifest-path fuzz/Cargo.toml --target-dir target/fuzz-check --quiet

step "all checks passed"
