#!/usr/bin/env bash
# Runs each client's smoke script for each codec against $BOOTSTRAP. One PASS/FAIL line per
# run, then "P passed, F failed"; exit 1 if any failed. Logs go to $LOGS (default ./logs).
# usage: run-all.sh [client ...]   clients: kcat confluent kafkapy aiokafka kafkajs
set -u
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
export BOOTSTRAP=${BOOTSTRAP:-localhost:9092} N=${N:-1000} KAFKAJS_NO_PARTITIONER_WARNING=1
CODECS=${CODECS:-"none gzip snappy lz4 zstd"}
CLIENTS=${*:-"kcat confluent kafkapy aiokafka kafkajs"}
PY=${PY:-$root/.venv/bin/python}
LOGS=${LOGS:-$here/logs}
pass=0; fail=0; mkdir -p "$LOGS"
for cl in $CLIENTS; do
  for codec in $CODECS; do
    case $cl in
      kcat)      cmd=("$here/smoke-kcat.sh") ;;
      confluent) cmd=("$PY" "$here/smoke_confluent.py") ;;
      kafkapy)   cmd=("$PY" "$here/smoke_kafka_python.py") ;;
      aiokafka)  cmd=("$PY" "$here/smoke_aiokafka.py") ;;
      kafkajs)   cmd=(node "$here/smoke-kafkajs.js") ;;
      *) echo "unknown client $cl"; fail=$((fail+1)); continue ;;
    esac
    log=$LOGS/$cl-$codec.log
    if CODEC=$codec timeout 180 "${cmd[@]}" >"$log" 2>&1 && grep -q '^PASS' "$log"; then
      pass=$((pass+1)); echo "PASS $cl $codec"
    else
      fail=$((fail+1)); echo "FAIL $cl $codec ($log: $(grep -m1 -E 'FAIL|Error|error' "$log" | cut -c1-160))"
    fi
  done
done
echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
