#!/usr/bin/env bash
# Real Kafka clients against a real `weir serve`: starts the broker on a scratch data
# directory and a free port, runs every client × codec smoke test, the scenario tests and
# the interop of Weir's own client (weir produce/consume) with librdkafka and kafka-python,
# then stops the broker with SIGTERM, restarts it on the same data, and checks that
# everything written is still there. Needs ./scripts/install-test-deps.sh first.
# env: WEIR (the binary; default target/debug/weir), CLIENTS, CODECS, N.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
WEIR=${WEIR:-$root/target/debug/weir}
# The scenarios use `weir configs` where the clients cannot name every broker.
export WEIR
PY=$root/.venv/bin/python
work=$(mktemp -d /tmp/weir-conformance.XXXXXX)
data=$work/data
export LOGS=$work/logs
free_port() { "$PY" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
port=$(free_port)
metrics_port=$(free_port)
export BOOTSTRAP=127.0.0.1:$port
pid=

start_broker() {
  "$WEIR" serve --listen "$BOOTSTRAP" --data-dir "$data" --metrics "127.0.0.1:$metrics_port" \
    --override group.initial.rebalance.delay.ms=300 \
    --override offsets.topic.num.partitions=8 \
    --override transaction.abort.timed.out.transaction.cleanup.interval.ms=1000 >>"$work/serve.log" 2>&1 &
  pid=$!
  for _ in $(seq 1 100); do
    if "$PY" -c "import socket,sys; s=socket.socket(); sys.exit(s.connect_ex(('127.0.0.1', $port)))"; then
      return 0
    fi
    kill -0 "$pid" 2>/dev/null || { echo "weir serve exited:"; tail -20 "$work/serve.log"; return 1; }
    sleep 0.1
  done
  echo "weir serve did not start listening"; return 1
}

stop_broker() {
  kill -TERM "$pid"
  local t0=$SECONDS
  wait "$pid" || { echo "weir serve exited with an error on SIGTERM"; tail -20 "$work/serve.log"; return 1; }
  echo "broker stopped cleanly in $((SECONDS - t0)) s"
}

cleanup() {
  [ -n "$pid" ] && kill -9 "$pid" 2>/dev/null || true
  if [ "${status:-1}" -ne 0 ]; then
    echo "--- broker log (last 40 lines) ---"; tail -40 "$work/serve.log" || true
    echo "--- logs kept in $work"
  else
    rm -rf "$work"
  fi
}
trap cleanup EXIT

clients=${CLIENTS:-"kcat confluent kafkapy aiokafka kafkajs"}
if [ -z "${CLIENTS:-}" ] && [ ! -d tests/conformance/node_modules/kafkajs ]; then
  if [ "${WEIR_SKIP_KAFKAJS:-}" = 1 ]; then
    clients="kcat confluent kafkapy aiokafka"
  else
    echo "KafkaJS is not installed: run ./scripts/install-test-deps.sh (or set WEIR_SKIP_KAFKAJS=1)"; exit 1
  fi
fi

start_broker
echo "== client × codec matrix against $BOOTSTRAP"
tests/conformance/run-all.sh $clients
echo "== scenarios"
"$PY" tests/conformance/scenarios.py before-restart
echo "== transactions: confluent-kafka, kafka-python, aiokafka, KafkaJS"
"$PY" tests/conformance/transactions.py
if [[ " $clients " == *" kafkajs "* ]]; then node tests/conformance/transactions-kafkajs.js; fi
echo "== weir produce/consume against librdkafka and kafka-python, both ways"
WEIR="$WEIR" "$PY" tests/conformance/interop_weir_client.py
echo "== Prometheus metrics"
sleep 6 # the log gauges are refreshed every 5 s
"$PY" - "$metrics_port" <<'PY'
import sys, urllib.request
text = urllib.request.urlopen("http://127.0.0.1:%s/metrics" % sys.argv[1], timeout=10).read().decode()
for want in ['weir_requests_total{api="Produce"}', 'weir_request_latency_seconds_bucket{api="Fetch"',
             'weir_bytes_in_total', 'weir_connections', 'weir_log_size_bytes{topic="persist-topic",partition="0"}',
             'weir_log_segments', 'weir_log_cleaner_dirty_bytes']:
    if want not in text:
        sys.exit("FAIL metrics: %s is missing" % want)
print("ok   metrics endpoint serves request, byte, connection and log metrics")
PY
stop_broker
start_broker
echo "== after a clean restart"
"$PY" tests/conformance/scenarios.py after-restart
stop_broker
grep -q "clean_shutdown=true" "$work/serve.log" || { echo "the restart did not see a clean shutdown"; exit 1; }
status=0
echo "conformance: all passed"
