#!/usr/bin/env bash
# librdkafka's own integration tests against a started `weir serve`. The tests come from
# Debian's librdkafka source package (`apt-get source librdkafka`, for the suites this
# machine's apt already uses), fetched at test time into a cache outside the repository and
# built there; nothing of librdkafka is in this repository. Each test of the allow-list
# (tests/librdkafka/allowlist) runs as its own test-runner process with a timeout, so a
# hang costs only that test; the tests left out are in tests/librdkafka/excluded, each with
# its reason. Prints a table (test, scenario, result, seconds); exits non-zero unless every
# test it ran passed.
#
#   ./scripts/librdkafka-suite.sh             the quick subset (the lines marked quick)
#   ./scripts/librdkafka-suite.sh --all       the whole allow-list
#   ./scripts/librdkafka-suite.sh NAME...     these tests, listed or not: 0011_produce_batch,
#                                             or NAME/SUB for the sub-tests whose names hold SUB
#
# env: WEIR (the binary; default target/debug/weir, built if absent); WEIR_LIBRDKAFKA_CACHE
# (default /var/cache/weir-librdkafka as root, else ~/.cache/weir-librdkafka); TEST_TIMEOUT
# (seconds per test where the allow-list gives none; default 300); RUNNER_ARGS (more
# test-runner flags, e.g. -P: every client with enable.idempotence=true; not -Q, librdkafka's
# quick mode, which skips most sub-tests); TEST_KAFKA_VERSION (the broker version the tests
# assume; default 3.1.0); TEST_DEBUG (librdkafka debug contexts, e.g. cgrp,protocol); KEEP=1
# keeps the logs of a passing run. The first run needs root or sudo, for apt-get.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
WEIR=${WEIR:-$root/target/debug/weir}
if [ "$(id -u)" = 0 ]; then
  cache=${WEIR_LIBRDKAFKA_CACHE:-/var/cache/weir-librdkafka}
else
  cache=${WEIR_LIBRDKAFKA_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/weir-librdkafka}
fi
allowlist=$root/tests/librdkafka/allowlist
excluded=$root/tests/librdkafka/excluded
default_timeout=${TEST_TIMEOUT:-300}
runner_args=${RUNNER_ARGS:-}
export TEST_KAFKA_VERSION=${TEST_KAFKA_VERSION:-3.1.0}

mode=quick
names=()
for arg in "$@"; do
  case $arg in
    --all) mode=all ;;
    -h | --help) awk 'NR > 1 && !/^#/ { exit } NR > 1 { sub(/^# ?/, ""); print }' "$0"; exit 0 ;;
    -*) echo "unknown option $arg (see --help)" >&2; exit 2 ;;
    *) mode=named; names+=("$arg") ;;
  esac
done

step() { printf '==> %s\n' "$*"; }
as_root() { if [ "$(id -u)" = 0 ]; then "$@"; else sudo "$@"; fi; }

# --- librdkafka's source, from Debian ---------------------------------------------------

# A deb-src entry beside each deb entry apt already has (same URIs, suites, components),
# in a file of its own, unless the machine has deb-src entries already.
ensure_deb_src() {
  local ours=/etc/apt/sources.list.d/weir-librdkafka-deb-src.sources
  if grep -rqsE '^(deb-src|Types:.*deb-src)' /etc/apt/sources.list /etc/apt/sources.list.d/ \
    --exclude='weir-librdkafka-deb-src.*'; then
    return 0
  fi
  local want
  want=$(
    echo "# Written by weir's scripts/librdkafka-suite.sh: deb-src beside the deb entries."
    for f in /etc/apt/sources.list.d/*.sources; do
      [ -e "$f" ] && [ "$f" != "$ours" ] || continue
      # deb822 stanzas: keep those of type deb, as deb-src.
      awk 'BEGIN { RS = ""; ORS = "\n\n" }
           /(^|\n)Types:[^\n]*(^| )deb( |\n|$)/ {
             sub(/Types:[^\n]*/, "Types: deb-src"); print }' "$f"
    done
  )
  local list
  list=$(grep -hsE '^deb ' /etc/apt/sources.list /etc/apt/sources.list.d/*.list | sed 's/^deb /deb-src /' || true)
  if [ -n "$list" ]; then
    printf '%s\n' "$list" | as_root tee /etc/apt/sources.list.d/weir-librdkafka-deb-src.list >/dev/null
  fi
  if ! printf '%s\n' "$want" | cmp -s - "$ours"; then
    printf '%s\n' "$want" | as_root tee "$ours" >/dev/null
  fi
  as_root apt-get update -qq
}

apt_install() {
  local missing=()
  for p in "$@"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
  done
  if [ ${#missing[@]} -gt 0 ]; then
    step "apt-get install ${missing[*]}"
    as_root apt-get install -y -qq "${missing[@]}" >/dev/null ||
      { as_root apt-get update -qq && as_root apt-get install -y -qq "${missing[@]}" >/dev/null; }
  fi
}

# The source package, unpacked (with Debian's patches) into $cache/src, once.
fetch_source() {
  [ -f "$cache/src/tests/test.c" ] && return 0
  apt_install dpkg-dev
  ensure_deb_src
  step "apt-get source librdkafka into $cache"
  mkdir -p "$cache"
  local tmp dir
  tmp=$(mktemp -d "$cache/.fetch.XXXXXX")
  (cd "$tmp" && apt-get source -qq librdkafka 2>&1 | grep -v 'unsandboxed as root' || true)
  dir=$(find "$tmp" -mindepth 1 -maxdepth 1 -type d -name 'librdkafka-*' | head -1)
  [ -n "$dir" ] && [ -f "$dir/tests/test.c" ] || { echo "apt-get source librdkafka gave no tests/"; exit 1; }
  rm -rf "$cache/src"
  mv "$dir" "$cache/src"
  rm -rf "$tmp"
}

version() { sed -n '1s/^[^(]*(\([^)]*\)).*/\1/p' "$cache/src/debian/changelog"; }

# Only what the tests use: the C and C++ libraries (zlib, zstd; lz4 and snappy are
# built in) and the test runner (RapidJSON, headers only, for the tests that read the
# statistics JSON); no SSL, SASL/GSSAPI or HTTP, no examples.
build_deps="build-essential pkg-config python3 zlib1g-dev libzstd-dev rapidjson-dev"
configure_args="--no-download --disable-ssl --disable-gssapi --disable-curl --disable-lz4-ext --enable-zlib --enable-zstd --disable-syslog"
build_runner() {
  local src=$cache/src stamp=$cache/src/.weir-build
  if [ -x "$src/tests/test-runner" ] && [ "$(cat "$stamp" 2>/dev/null)" = "$build_deps $configure_args" ]; then
    return 0
  fi
  apt_install $build_deps
  step "building librdkafka $(version) and its test runner"
  local t0=$SECONDS log=$cache/build.log
  # Built before with other settings: from scratch.
  [ ! -f "$src/Makefile.config" ] || (cd "$src" && make clean && make -C tests clean) >/dev/null 2>&1 || true
  # One build at a time on a small machine (the lock cargo takes here too).
  if ! (cd "$src" && rm -f "$stamp" &&
    flock -o /tmp/weir-cargo.lock sh -c "nice -n 10 ./configure $configure_args &&
      nice -n 10 make -j2 libs && nice -n 10 make -C tests -j2 test-runner") >"$log" 2>&1; then
    tail -30 "$log"; echo "building librdkafka failed (log: $log)"; exit 1
  fi
  echo "$build_deps $configure_args" >"$stamp"
  echo "built in $((SECONDS - t0)) s"
}

fetch_source
build_runner
runner=$cache/src/tests/test-runner
export LD_LIBRARY_PATH=$cache/src/src:$cache/src/src-cpp

# --- which tests ------------------------------------------------------------------------

# allow-list lines: NAME [quick] [scenario=S] [timeout=SECONDS] [subtests=A,B,...]
# [args=FLAG,...] (# starts a comment). With subtests, each of A, B ... runs as a process
# of its own (SUBTESTS=A: only the test's sub-tests whose names contain A), shown as
# NAME/A. args: more test-runner flags (-k: a test librdkafka marks a known issue).
declare -A test_of sub_of scenario_of timeout_of quick_of args_of listed
ids=()
add_run() { # id test sub scenario timeout quick args
  ids+=("$1"); test_of[$1]=$2; sub_of[$1]=$3; scenario_of[$1]=$4; timeout_of[$1]=$5; quick_of[$1]=$6
  args_of[$1]=${7:-}
}
while read -r name rest; do
  name=${name%%#*}
  [ -n "$name" ] || continue
  rest=${rest%%#*}
  listed[$name]=1
  scenario=default timeout=$default_timeout quick=0 subs= args=
  for word in $rest; do
    case $word in
      quick) quick=1 ;;
      args=*) args=${word#args=}; args=${args//,/ } ;;
      scenario=*) scenario=${word#scenario=} ;;
      timeout=*) timeout=${word#timeout=} ;;
      subtests=*) subs=${word#subtests=} ;;
      *) echo "allowlist: unknown word '$word' for $name" >&2; exit 2 ;;
    esac
  done
  if [ -z "$subs" ]; then
    add_run "$name" "$name" "" "$scenario" "$timeout" "$quick" "$args"
  else
    for sub in ${subs//,/ }; do
      add_run "$name/$sub" "$name" "$sub" "$scenario" "$timeout" "$quick" "$args"
    done
  fi
done <"$allowlist"

# Every test of the suite is allow-listed or excluded with a reason; say so when the
# source package brings one that is neither (a new Debian version).
declare -A excl
while read -r name _; do
  case $name in '' | '#'*) continue ;; esac
  excl[$name]=1
done <"$excluded"
for t in $(grep -oE '^ *_TEST\([0-9]{4}_[A-Za-z0-9_]+' "$cache/src/tests/test.c" | sed 's/.*(//'); do
  if [ -z "${listed[$t]:-}" ] && [ -z "${excl[$t]:-}" ]; then
    echo "WARNING: $t is in librdkafka's test.c but neither allow-listed nor excluded" >&2
  fi
done

# A test's scenario as librdkafka's test.c declares it (for tests not allow-listed).
declared_scenario() {
  python3 - "$cache/src/tests/test.c" "$1" <<'PY'
import re, sys
src = open(sys.argv[1]).read()
m = re.search(r"_TEST\(%s,(.*?)\)\s*,\s*(?:_TEST|/\*|#|\{NULL)" % re.escape(sys.argv[2]), src, re.S)
if not m:
    sys.exit("%s is not a test of librdkafka's test.c" % sys.argv[2])
sc = re.search(r'\.scenario\s*=\s*"([^",]*)', m.group(1))
print(sc.group(1) if sc else "default")
PY
}

run=()
case $mode in
  quick) for id in "${ids[@]}"; do [ "${quick_of[$id]}" = 1 ] && run+=("$id"); done ;;
  all) run=("${ids[@]}") ;;
  named) for n in "${names[@]}"; do
      if [ -n "${test_of[$n]:-}" ]; then
        run+=("$n")
      elif [ -n "${listed[$n]:-}" ]; then # NAME allow-listed by its sub-tests
        for id in "${ids[@]}"; do [ "${test_of[$id]}" = "$n" ] && run+=("$id"); done
      else
        t=${n%%/*} sub=
        [ "$t" = "$n" ] || sub=${n#*/}
        add_run "$n" "$t" "$sub" "$(declared_scenario "$t")" "$default_timeout" 0
        run+=("$n")
      fi
    done ;;
esac

# --- the brokers: one per scenario, as librdkafka's scenarios/*.json ask -----------------

if [ ! -x "$WEIR" ]; then
  step "cargo build -p weir"
  flock -o /tmp/weir-cargo.lock cargo build --locked -p weir --quiet
fi
WEIR=$(cd "$(dirname "$WEIR")" && pwd)/$(basename "$WEIR") # the tests run elsewhere

work=$(mktemp -d /tmp/weir-librdkafka.XXXXXX)
declare -A pid_of port_of
status=1
cleanup() {
  for s in "${!pid_of[@]}"; do kill -TERM "${pid_of[$s]}" 2>/dev/null || true; done
  for s in "${!pid_of[@]}"; do wait "${pid_of[$s]}" 2>/dev/null || true; done
  if [ "$status" -ne 0 ] || [ "${KEEP:-}" = 1 ]; then
    echo "logs kept in $work"
  else
    rm -rf "$work"
  fi
}
trap cleanup EXIT

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }

# As librdkafka's trivup clusters: default auto-creates topics with 4 partitions,
# noautocreate does not; both have an ACL authorizer that allows what no ACL denies.
start_broker() {
  local s=$1 port auto=true
  [ "$s" = noautocreate ] && auto=false
  port=$(free_port)
  mkdir -p "$work/$s"
  "$WEIR" serve --listen "127.0.0.1:$port" --data-dir "$work/$s/data" \
    --override num.partitions=4 --override auto.create.topics.enable=$auto \
    --override authorizer.class.name=org.apache.kafka.metadata.authorizer.StandardAuthorizer \
    --override allow.everyone.if.no.acl.found=true >"$work/$s/serve.log" 2>&1 &
  pid_of[$s]=$!
  port_of[$s]=$port
  for _ in $(seq 1 100); do
    if python3 -c "import socket,sys; s=socket.socket(); sys.exit(s.connect_ex(('127.0.0.1', $port)))"; then
      printf 'bootstrap.servers=127.0.0.1:%s\n' "$port" >"$work/$s/test.conf"
      return 0
    fi
    kill -0 "${pid_of[$s]}" 2>/dev/null || { echo "weir serve exited:"; tail -20 "$work/$s/serve.log"; exit 1; }
    sleep 0.1
  done
  echo "weir serve ($s) did not start listening"; exit 1
}

# --- run: one process per test ----------------------------------------------------------

# Runs one allow-list entry (a test, or a test's sub-tests) in its scenario; prints
# "result seconds", result one of pass, fail, timeout (the test hung: the runner's own
# timeout or ours), crash (the runner died of a signal), skip (the runner skipped it).
run_one() {
  local id=$1 name=${test_of[$1]} sub=${sub_of[$1]} s=${scenario_of[$1]} t=${timeout_of[$1]}
  kill -0 "${pid_of[$s]}" 2>/dev/null || { echo "broker-down 0"; return; }
  local dir=$work/tests/${id//\//:}
  mkdir -p "$dir"
  local t0=$EPOCHREALTIME rc=0
  # TESTS takes a test's number: -L leaves out those of the number that need no broker,
  # and the scenario those of another scenario. KAFKA_PATH: the tests' calls of Kafka's
  # bin/kafka-topics.sh and kafka-acls.sh go to tests/librdkafka/bin (`weir topics`, `weir acls`).
  (cd "$dir" && env -u CI -u SUBTESTS ${sub:+SUBTESTS="$sub"} TESTS="${name%%_*}" TEST_SCENARIO="$s" \
    RDKAFKA_TEST_CONF="$work/$s/test.conf" KAFKA_PATH="$root/tests/librdkafka" \
    BROKERS="127.0.0.1:${port_of[$s]}" WEIR="$WEIR" \
    timeout -k 10 "$t" "$runner" -L -p1 ${args_of[$id]} $runner_args) >"$dir/log" 2>&1 || rc=$?
  local secs result line
  secs=$(awk -v a="$t0" -v b="$EPOCHREALTIME" 'BEGIN { printf "%.1f", b - a }')
  sed 's/\x1b\[[0-9;]*m//g; s/\x1b(B//g' "$dir/log" >"$dir/log.txt"
  echo "(test-runner exit status $rc)" >>"$dir/log.txt"
  line=$(grep -E "^\| $name +\|" "$dir/log.txt" | tail -1 || true)
  if [ "$rc" = 124 ] || [ "$rc" = 137 ] || grep -q "timed out (timeout set to" "$dir/log.txt"; then
    result=timeout
  elif [[ $line == *PASSED* ]] && [ "$rc" = 0 ]; then
    result=pass
    # A filter that matches no sub-test would pass without testing anything.
    if [ -n "$sub" ] && ! grep -qE "\] \[ [^]]*$sub[^]]*: PASS" "$dir/log.txt"; then
      result=fail
      echo "no sub-test of $name matched '$sub'" >>"$dir/log.txt"
    fi
  elif [[ $line == *SKIPPED* ]]; then
    result=skip
  elif [ "$rc" -gt 128 ] && ! grep -q "TEST FAILURE" "$dir/log.txt"; then
    result=crash # killed by a signal before its summary (SIGABRT of a failed assert is 134)
  else
    result=fail
  fi
  echo "$result $secs"
}

# Each test runs in a directory of its own under $work/tests; 0053 reads
# ../src/statistics_schema.json from there, as from librdkafka's tests/.
mkdir -p "$work/tests"
ln -s "$cache/src/src" "$work/tests/src"

step "librdkafka $(version) tests against $WEIR ($mode: ${#run[@]} tests, runner flags: -L -p1 $runner_args)"
t_all=$SECONDS
for name in "${run[@]}"; do
  s=${scenario_of[$name]}
  [ -n "${pid_of[$s]:-}" ] || start_broker "$s"
done
failed=()
results=()
for name in "${run[@]}"; do
  read -r result secs < <(run_one "$name")
  results+=("$(printf '%-56s %-13s %-8s %7s' "$name" "${scenario_of[$name]}" "$result" "$secs")")
  printf '%-56s %-13s %-8s %7s\n' "$name" "${scenario_of[$name]}" "$result" "$secs"
  [ "$result" = pass ] || failed+=("$name")
done

echo
printf '%-56s %-13s %-8s %7s\n' test scenario result seconds
printf '%s\n' "${results[@]}"
echo "${#run[@]} tests in $((SECONDS - t_all)) s: $((${#run[@]} - ${#failed[@]})) passed, ${#failed[@]} did not"
for name in "${failed[@]}"; do
  echo "--- $name (last 25 lines of $work/tests/${name//\//:}/log.txt)"
  tail -25 "$work/tests/${name//\//:}/log.txt"
done
for s in "${!pid_of[@]}"; do
  if ! kill -0 "${pid_of[$s]}" 2>/dev/null; then
    echo "--- weir serve ($s) exited during the run (last 25 lines of $work/$s/serve.log)"
    tail -25 "$work/$s/serve.log"
    failed+=("weir serve ($s)")
  fi
done
if [ ${#failed[@]} -eq 0 ]; then status=0; fi
exit "$status"
