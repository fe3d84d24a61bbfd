#!/usr/bin/env bash
# Apache Kafka 4.4.0 on demand, as the reference that runs beside Weir in the tests. The jars
# (broker, tools, Java client, Streams, Connect: tests/differential/pom.xml names them) come
# from Maven Central into a cache outside the clone, once; nothing of Kafka is committed.
#
#   ./scripts/kafka.sh fetch                the jars into the cache; prints their directory
#   ./scripts/kafka.sh tool CLASS ARGS...   one of Kafka's tools, e.g.
#                                           org.apache.kafka.tools.TopicCommand --bootstrap-server …
#                                           (warnings to stderr only, so stdout stays parseable)
#   ./scripts/kafka.sh start DIR [NODES]    a KRaft cluster of NODES (default 1) combined
#                                           broker+controller nodes on free loopback ports,
#                                           its files in DIR; prints the bootstrap servers
#   ./scripts/kafka.sh stop DIR             stops the cluster started in DIR (SIGTERM)
#
# env: WEIR_KAFKA_CACHE (default /var/cache/weir-kafka as root, else ~/.cache/weir-kafka);
# JAVA (default java). The first fetch needs Maven (mvn) and Maven Central.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
pom=$root/tests/differential/pom.xml
if [ "$(id -u)" = 0 ]; then
  cache=${WEIR_KAFKA_CACHE:-/var/cache/weir-kafka}
else
  cache=${WEIR_KAFKA_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/weir-kafka}
fi
JAVA=${JAVA:-java}
# One directory of jars per pom: a changed pom fetches a new set beside the old.
lib=$cache/lib-$(sha256sum "$pom" | cut -c1-12)

fetch() {
  [ -f "$lib/.complete" ] && return 0
  command -v mvn >/dev/null || { echo "kafka.sh: mvn is not installed (apt-get install maven)" >&2; return 1; }
  mkdir -p "$cache"
  local tmp
  tmp=$(mktemp -d "$cache/.fetch.XXXXXX")
  echo "kafka.sh: fetching Apache Kafka's jars from Maven Central into $lib" >&2
  if ! (cd "$root/tests/differential" && mvn -B -q -Dmaven.repo.local="$cache/m2" \
    org.apache.maven.plugins:maven-dependency-plugin:3.6.1:copy-dependencies \
    -DincludeScope=runtime -DoutputDirectory="$tmp" >"$cache/fetch.log" 2>&1); then
    tail -20 "$cache/fetch.log" >&2
    rm -rf "$tmp"
    return 1
  fi
  # Every org.apache.kafka jar must be of one version, or the broker fails in odd ways.
  local versions
  versions=$(find "$tmp" -name 'kafka*-[0-9]*.jar' -o -name 'connect-*-[0-9]*.jar' |
    sed -E 's/.*-([0-9]+\.[0-9]+\.[0-9]+)\.jar$/\1/' | sort -u)
  if [ "$(echo "$versions" | wc -l)" -ne 1 ]; then
    echo "kafka.sh: Kafka's jars are of several versions: $versions" >&2
    rm -rf "$tmp"
    return 1
  fi
  cat >"$tmp/log4j2-tools.properties" <<'EOF'
# Kafka's tools and test programs: warnings and worse to stderr, nothing on stdout.
status = error
appender.err.type = Console
appender.err.name = STDERR
appender.err.target = SYSTEM_ERR
appender.err.layout.type = PatternLayout
appender.err.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = warn
rootLogger.appenderRef.err.ref = STDERR
EOF
  cat >"$tmp/log4j2-broker.properties" <<'EOF'
# The reference broker: INFO to the file named by -Dkafka.logs.dir, as Kafka's own config.
status = error
appender.file.type = File
appender.file.name = FILE
appender.file.fileName = ${sys:kafka.logs.dir}/server.log
appender.file.layout.type = PatternLayout
appender.file.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = info
rootLogger.appenderRef.file.ref = FILE
EOF
  rm -rf "$lib"
  mv "$tmp" "$lib"
  touch "$lib/.complete"
}

tool() {
  fetch
  exec "$JAVA" -Xmx512M -Dlog4j2.configurationFile="$lib/log4j2-tools.properties" \
    -cp "$lib/*" "$@"
}

cmd=${1:-}
shift || true
case $cmd in
  fetch) fetch && echo "$lib" ;;
  tool) tool "$@" ;;
  start | stop)
    fetch
    exec "${PY:-python3}" "$root/tests/differential/kafka_broker.py" "$cmd" --lib "$lib" "$@"
    ;;
  -h | --help | "") awk 'NR > 1 && !/^#/ { exit } NR > 1 { sub(/^# ?/, ""); print }' "$0" ;;
  *) echo "kafka.sh: unknown command $cmd (see --help)" >&2; exit 2 ;;
esac
