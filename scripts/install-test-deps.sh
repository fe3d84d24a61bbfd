#!/usr/bin/env bash
# Installs what the test suite needs beyond the Rust toolchain, idempotently:
# - a Python virtualenv at .venv with scripts/requirements-test.txt (kafka-python and the
#   codec packages as an independent implementation; confluent-kafka, aiokafka as clients);
# - kcat (Debian's package, librdkafka 2.0.2);
# - etcd (Debian's etcd-server, 3.4), which the cluster tests start on loopback ports;
# - iptables and iproute2, with which the fault harness partitions brokers in their own
#   network namespaces;
# - KafkaJS and its codec plugins under tests/conformance/node_modules;
# - a JDK and Maven, and Apache Kafka 4.4's jars in a cache outside the clone
#   (scripts/kafka.sh fetch), for the differential suite against Kafka itself.
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

debs=""
command -v kcat >/dev/null 2>&1 || debs="$debs kcat"
command -v etcd >/dev/null 2>&1 || debs="$debs etcd-server"
command -v iptables >/dev/null 2>&1 || debs="$debs iptables"
command -v ip >/dev/null 2>&1 || debs="$debs iproute2"
command -v javac >/dev/null 2>&1 || debs="$debs openjdk-17-jdk-headless"
command -v mvn >/dev/null 2>&1 || debs="$debs maven"
if [ -n "$debs" ]; then
  sudo=""
  [ "$(id -u)" = 0 ] || sudo=sudo
  # shellcheck disable=SC2086
  $sudo apt-get update -qq && $sudo apt-get install -y -qq $debs >/dev/null
fi

if command -v npm >/dev/null 2>&1; then
  node_stamp=tests/conformance/node_modules/.weir-stamp
  if ! cmp -s tests/conformance/package-lock.json "$node_stamp" 2>/dev/null; then
    (cd tests/conformance && npm ci --no-audit --no-fund --loglevel=error && npm rebuild lz4 --loglevel=error >/dev/null)
    cp tests/conformance/package-lock.json "$node_stamp"
  fi
else
  echo "install-test-deps: npm not found; the KafkaJS conformance tests will be skipped" >&2
fi

# Kafka's broker, tools and clients: fetched once into the cache, then reused.
./scripts/kafka.sh fetch >/dev/null
