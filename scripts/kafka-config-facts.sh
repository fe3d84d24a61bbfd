#!/usr/bin/env bash
# Regenerates crates/weir-broker/src/kafka_broker_configs.tsv (every broker config key of the
# Kafka version tests/differential/pom.xml names, with its type, update mode and default) and
# kafka_group_configs.tsv (every group config key, with its type, default and broker synonym)
# from Kafka's own definitions: run after moving the pom to a new Kafka version.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
lib=$("$root/scripts/kafka.sh" fetch)
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
javac -nowarn -d "$out" -cp "$lib/*" "$root/tests/differential/KafkaConfigFacts.java"
java -Dlog4j2.configurationFile="$lib/log4j2-tools.properties" -cp "$out:$lib/*" KafkaConfigFacts \
  >"$root/crates/weir-broker/src/kafka_broker_configs.tsv"
java -Dlog4j2.configurationFile="$lib/log4j2-tools.properties" -cp "$out:$lib/*" KafkaConfigFacts groups \
  >"$root/crates/weir-broker/src/kafka_group_configs.tsv"
for t in broker group; do
  f=crates/weir-broker/src/kafka_${t}_configs.tsv
  echo "wrote $f ($(grep -vc '^#' "$root/$f") keys)"
done
