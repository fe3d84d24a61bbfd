#!/usr/bin/env bash
# Installs what the test suite needs beyond the Rust toolchain, idempotently:
# a Python virtualenv at .venv with the packages in scripts/requirements-test.txt.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
if [ ! -x .venv/bin/python ]; then
  python3 -m venv .venv
fi
stamp=.venv/.requirements-test.stamp
if ! cmp -s scripts/requirements-test.txt "$stamp" 2>/dev/null; then
  .venv/bin/pip install --quiet --disable-pip-version-check -r scripts/requirements-test.txt
  cp scripts/requirements-test.txt "$stamp"
fi
