#!/usr/bin/env bash
# What ACLs and quotas cost: `weir bench produce` and `weir bench consume` against release
# brokers side by side, rounds interleaved in one run:
#   plain  – no authorizer, no quotas
#   acl    – the StandardAuthorizer with ALLOW-all ACLs on topics, groups and the cluster,
#            and default client quotas far above any rate, so every request pays for the
#            ACL checks and the quota accounting without being throttled
#   base   – (with BASE=path/to/an/older/weir) that binary, broker and client, as before
# Prints one line per run and the median and range per broker. env: RECORDS (3000000),
# ROUNDS (6), BASE.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
cargo build --release -p weir --quiet
W=$root/target/release/weir
N=${RECORDS:-3000000}
work=$(mktemp -d /tmp/weir-bench-security.XXXXXX)
port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
pids=()
trap 'kill "${pids[@]}" 2>/dev/null; wait 2>/dev/null; rm -rf "$work"' EXIT
configs=()
start() { # name binary extra-args...
  local name=$1 bin=$2 p; shift 2; p=$(port)
  "$bin" serve --data-dir "$work/$name" --listen "127.0.0.1:$p" "$@" >"$work/$name.log" 2>&1 &
  pids+=($!); configs+=("$name:$p:$bin")
}
mkdir -p "$work/acl"
$W acls add --data-dir "$work/acl" --cluster --allow-principal 'User:*' --operation all 2>/dev/null
$W acls add --data-dir "$work/acl" --topic '*' --allow-principal 'User:*' --operation all 2>/dev/null
$W acls add --data-dir "$work/acl" --group '*' --allow-principal 'User:*' --operation all 2>/dev/null
if [ -n "${BASE:-}" ]; then start base "$BASE"; fi
start plain "$W"
start acl "$W" --override authorizer.class.name=org.apache.kafka.metadata.authorizer.StandardAuthorizer
sleep 2
acl_port=$(printf '%s\n' "${configs[@]}" | awk -F: '$1=="acl"{print $2}')
$W quotas alter --bootstrap "127.0.0.1:$acl_port" --client-id-default \
  --add-config producer_byte_rate=1000000000000 --add-config consumer_byte_rate=1000000000000 2>/dev/null
for round in $(seq 1 "${ROUNDS:-6}"); do
  for cfg in "${configs[@]}"; do
    IFS=: read -r name p bin <<<"$cfg"
    pr=$("$bin" bench produce --bootstrap "127.0.0.1:$p" --topic "t$round" --records "$N" --acks 1 --json | tail -1)
    co=$("$bin" bench consume --bootstrap "127.0.0.1:$p" --topic "t$round" --records "$N" --json | tail -1)
    echo "$name produce $pr"
    echo "$name consume $co"
  done
done | tee "$work/runs" | cut -c1-120
python3 - "$work/runs" <<'PY'
import json, statistics, sys, collections
runs = collections.defaultdict(list)
for line in open(sys.argv[1]):
    name, what, result = line.split(" ", 2)
    runs[(name, what)].append(json.loads(result)["records_per_sec"])
for (name, what), v in sorted(runs.items()):
    print(f"{name:6} {what:8} median {statistics.median(v)/1e6:.2f}M rec/s, "
          f"range {min(v)/1e6:.2f}-{max(v)/1e6:.2f}M over {len(v)} runs")
PY
