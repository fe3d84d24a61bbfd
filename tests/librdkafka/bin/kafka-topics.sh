#!/usr/bin/env bash
# Stands in for Kafka's bin/kafka-topics.sh, which librdkafka's tests run (KAFKA_PATH) to
# create, grow and delete topics: the same flags, carried out by `weir topics` through the
# same Admin APIs (CreateTopics, CreatePartitions, DeleteTopics). WEIR names the binary.
set -euo pipefail
action=
args=()
while [ $# -gt 0 ]; do
  case $1 in
    --bootstrap-server) args+=(--bootstrap "$2"); shift 2 ;;
    --create | --alter | --delete | --describe | --list) action=${1#--}; shift ;;
    *) args+=("$1"); shift ;;
  esac
done
[ -n "$action" ] || { echo "kafka-topics.sh (weir): no --create/--alter/--delete/--describe/--list" >&2; exit 2; }
exec "${WEIR:?WEIR names the weir binary}" topics "$action" "${args[@]}"
