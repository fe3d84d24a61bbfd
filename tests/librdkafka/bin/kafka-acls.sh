#!/usr/bin/env bash
# Stands in for Kafka's bin/kafka-acls.sh, which librdkafka's tests run (KAFKA_PATH) to add
# ACLs: the same flags, carried out by `weir acls` through the same Admin API (CreateAcls,
# DescribeAcls, DeleteAcls). Kafka's operation names (All, Describe, DescribeConfigs) become
# Weir's (all, describe, describe-configs). WEIR names the binary.
set -euo pipefail
action=
args=()
while [ $# -gt 0 ]; do
  case $1 in
    --bootstrap-server) args+=(--bootstrap "$2"); shift 2 ;;
    --add | --remove | --list) action=${1#--}; shift ;;
    --operation)
      args+=(--operation "$(printf '%s' "$2" | sed -E 's/([a-z])([A-Z])/\1-\2/g' | tr 'A-Z' 'a-z')")
      shift 2 ;;
    --force) shift ;;
    *) args+=("$1"); shift ;;
  esac
done
[ -n "$action" ] || { echo "kafka-acls.sh (weir): no --add/--remove/--list" >&2; exit 2; }
exec "${WEIR:?WEIR names the weir binary}" acls "$action" "${args[@]}"
