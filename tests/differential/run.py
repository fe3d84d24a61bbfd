"""The differential suite: the same scenarios against Apache Kafka 4.4 and against Weir, and
what Kafka's own Java client observes of each, compared. Kafka is right: every difference
fails the run unless COMPATIBILITY.md lists it, with its reason, in its table of kept
differences ("| `scenario` | `field` | … |", field `*` for the whole scenario). A listed
difference that no longer differs fails the run too, so the table stays true.

usage: run.py --weir BIN --lib KAFKA_LIB [--only PREFIX]... [--keep]
Prints one line per scenario (same / differs / known), then "N passed, N failed".
"""

import argparse
import concurrent.futures
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time

here = os.path.dirname(os.path.abspath(__file__))
root = os.path.dirname(os.path.dirname(here))
sys.path.insert(0, here)
from kafka_broker import KafkaCluster, free_port  # noqa: E402

# The same settings on both sides, where a test wants other than the default.
# Kafka's server.properties (kafka_broker.py) names its node: Weir's, though it needs none, too.
COMMON_OVERRIDES = {"group.initial.rebalance.delay.ms": "0", "node.id": "1"}
PROBE_TIMEOUT_S = 600
WEIR_START_TIMEOUT_S = 60


# The move from Kafka runs with ACLs on, on both sides (the probe is a super user).
AUTHORIZER = {
    "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
    "super.users": "User:ANONYMOUS",
    "allow.everyone.if.no.acl.found": "true",
}


class WeirBroker:
    def __init__(self, binary, work, data_dir=None, overrides=None):
        self.binary = binary
        self.work = work
        self.data_dir = data_dir or os.path.join(work, "data")
        self.overrides = {**COMMON_OVERRIDES, **(overrides or {})}
        self.proc = None
        self.port = free_port()

    @property
    def bootstrap(self):
        return f"127.0.0.1:{self.port}"

    def start(self):
        os.makedirs(self.work, exist_ok=True)
        args = [self.binary, "serve", "--listen", self.bootstrap, "--data-dir", self.data_dir]
        for k, v in self.overrides.items():
            args += ["--override", f"{k}={v}"]
        log = open(os.path.join(self.work, "serve.log"), "ab")
        self.proc = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT)
        deadline = time.time() + WEIR_START_TIMEOUT_S
        while time.time() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"weir serve exited with {self.proc.returncode}: see {self.work}/serve.log")
            with socket.socket() as s:
                if s.connect_ex(("127.0.0.1", self.port)) == 0:
                    return self
            time.sleep(0.1)
        raise RuntimeError("weir serve did not start listening")

    def stop(self):
        if self.proc and self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait(timeout=60)


def known_differences():
    """(scenario, field) -> reason, from COMPATIBILITY.md's table of kept differences."""
    known = {}
    path = os.path.join(root, "COMPATIBILITY.md")
    row = re.compile(r"^\|\s*`([^`]+)`\s*\|\s*`([^`]+)`\s*\|(.*)\|\s*$")
    with open(path) as f:
        for line in f:
            m = row.match(line.strip())
            if m:
                known[(m.group(1), m.group(2))] = m.group(3).split("|")[-1].strip()
    return known


def flatten(value, prefix=""):
    """Leaves of a JSON value by path ("a/b"), without the informational "~" keys."""
    if isinstance(value, dict):
        out = {}
        for k, v in value.items():
            if k.startswith("~"):
                continue
            out.update(flatten(v, f"{prefix}/{k}" if prefix else k))
        return out
    return {prefix: value}


def compile_probe(lib, out):
    os.makedirs(out, exist_ok=True)
    subprocess.run(["javac", "-nowarn", "-d", out, "-cp", os.path.join(lib, "*"),
                    os.path.join(here, "Probe.java")], check=True)


def run_probe(lib, classes, bootstrap, only, log, extra=()):
    args = ["java", "-Xmx512M", f"-Dlog4j2.configurationFile={lib}/log4j2-tools.properties",
            "-cp", f"{classes}:{lib}/*", "Probe", "--bootstrap", bootstrap, *extra]
    for o in only:
        args += ["--only", o]
    with open(log, "w") as err:
        out = subprocess.run(args, stdout=subprocess.PIPE, stderr=err, text=True,
                             timeout=PROBE_TIMEOUT_S, check=True).stdout
    lines = [json.loads(text) for text in out.splitlines() if text.strip()]
    return {line["scenario"]: line for line in lines}


# What Kafka's kafka-dump-log prints for every entry of a file it reads well; anything else
# it prints is a complaint (a mismatch, a gap, an index entry the log lacks, an exception).
DUMP_ROUTINE = re.compile(
    r"^(Dumping |\| offset: |baseOffset: |offset: \d+ position: |timestamp: -?\d+ offset: |"
    r"Log starting offset: |producerId: |version: \d+ producerId: |\s*$)")
DUMP_KINDS = (".log", ".index", ".timeindex", ".txnindex", ".snapshot")


def dump_complaints(lib, data_dir, log):
    """Kafka's own kafka-dump-log --deep-iteration over every log, index and snapshot file of
    the partitions under data_dir (with Kafka's decoders for its two internal topics): its
    complaints, per partition, with the directory left out."""
    groups = {}
    for part in sorted(os.listdir(data_dir)):
        d = os.path.join(data_dir, part)
        # Kafka's metadata log is not a partition's; a directory renamed for deletion (or
        # as a stray, or a future replica) is not read by a broker, nor here.
        if (not os.path.isdir(d) or part.startswith("__cluster_metadata")
                or part.endswith(("-delete", "-stray", "-future"))):
            continue
        decoder = ("--offsets-decoder" if part.startswith("__consumer_offsets-") else
                   "--transaction-log-decoder" if part.startswith("__transaction_state-") else "")
        files = [os.path.join(d, f) for f in sorted(os.listdir(d)) if f.endswith(DUMP_KINDS)]
        groups.setdefault(decoder, []).extend(files)
    complaints = {}
    sections = {}
    with open(log, "a") as out:
        for decoder, files in groups.items():
            if not files:
                continue
            args = ["java", "-Xmx512M", f"-Dlog4j2.configurationFile={lib}/log4j2-tools.properties",
                    "-cp", f"{lib}/*", "org.apache.kafka.tools.DumpLogSegments", "--deep-iteration",
                    "--files", ",".join(files)] + ([decoder] if decoder else [])
            text = subprocess.run(args, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                  timeout=PROBE_TIMEOUT_S).stdout
            out.write(text)
            current = None
            for line in text.splitlines():
                if line.startswith("Dumping "):
                    current = os.path.relpath(line[len("Dumping "):].strip(), data_dir)
                    sections[current] = []
                elif current is not None:
                    sections[current].append(line)
                if DUMP_ROUTINE.match(line):
                    continue
                line = line.replace(data_dir + os.sep, "")
                part = line.split(os.sep)[0].split()[-1].lstrip(":") if os.sep in line else "(all)"
                complaints.setdefault(part, []).append(line.strip())
    return {part: sorted(set(lines)) for part, lines in complaints.items()}, sections


KAFKA_PAIR = re.compile(r"(\w+): (\S+)")


def kafka_facts(lines):
    """The facts of one file as kafka-dump-log printed them: its batches, index entries,
    aborted transactions and producer snapshots, one string each."""
    facts = []
    for line in lines:
        kv = dict(KAFKA_PAIR.findall(line))
        if line.startswith("baseOffset: "):
            ts_type = "LogAppendTime" if "LogAppendTime" in kv else "CreateTime"
            facts.append("batch {baseOffset}-{lastOffset} count {count} at {position} size {size} v{magic} "
                         "{compresscodec} valid {isvalid} txn {isTransactional} control {isControl} "
                         "pid {producerId} epoch {producerEpoch} seq {baseSequence} leader epoch "
                         "{partitionLeaderEpoch} ".format(**kv) + f"{ts_type} {kv[ts_type]}")
        elif re.match(r"^offset: \d+ position: ", line):
            facts.append("index {offset} {position}".format(**kv))
        elif re.match(r"^timestamp: -?\d+ offset: ", line):
            facts.append("timeindex {timestamp} {offset}".format(**kv))
        elif line.startswith("version: ") and "firstOffset" in kv:
            facts.append("aborted {producerId} {firstOffset}-{lastOffset} lso {lastStableOffset}".format(**kv))
        elif line.startswith("producerId: ") and "coordinatorEpoch" in kv:
            first = re.search(r"currentTxnFirstOffset: (OptionalLong\.empty|OptionalLong\[(-?\d+)\])", line)
            kv["txn"] = first.group(2) if first and first.group(2) else "-1"
            facts.append("producer {producerId} epoch {producerEpoch} coordinator {coordinatorEpoch} txn {txn} "
                         "seq {lastSequence} offset {lastOffset} delta {offsetDelta} at {timestamp}".format(**kv))
    return facts


def weir_facts(weir, path):
    """The same facts of one file as `weir dump-log` prints them."""
    out = subprocess.run([weir, "dump-log", path], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                         text=True, timeout=PROBE_TIMEOUT_S).stdout
    facts = []
    for line in out.splitlines():
        try:
            e = json.loads(line)
        except ValueError:
            facts.append("not JSON: " + line)
            continue
        kind = e.get("kind")
        if kind == "batch":
            b = lambda v: str(v).lower()  # noqa: E731
            facts.append(f"batch {e['base_offset']}-{e['last_offset']} count {e['count']} at {e['position']} "
                         f"size {e['size']} v{e['magic']} {e['compression']} valid {b(e['crc_valid'])} "
                         f"txn {b(e.get('transactional', False))} control {b(e.get('control', False))} "
                         f"pid {e.get('producer_id', -1)} epoch {e.get('producer_epoch', -1)} "
                         f"seq {e.get('base_sequence', -1)} leader epoch {e.get('partition_leader_epoch', -1)} "
                         f"{e.get('timestamp_type', 'CreateTime')} {e.get('max_timestamp', -1)}")
        elif kind == "index":
            facts.append(f"index {e['offset']} {e['position']}")
        elif kind == "timeindex":
            facts.append(f"timeindex {e['timestamp']} {e['offset']}")
        elif kind == "aborted_txn":
            facts.append(f"aborted {e['producer_id']} {e['first_offset']}-{e['last_offset']} "
                         f"lso {e['last_stable_offset']}")
        elif kind == "producer_snapshot":
            facts.append(f"producer {e['producer_id']} epoch {e['producer_epoch']} coordinator "
                         f"{e['coordinator_epoch']} txn {e['current_txn_first_offset']} seq {e['last_sequence']} "
                         f"offset {e['last_offset']} delta {e['offset_delta']} at {e['timestamp']}")
        elif kind in ("corrupt", "error"):
            facts.append(f"{kind}: {e}")
    return facts


def compare(of_kafka, of_weir, known):
    """Prints a line per scenario; returns (passed, failed)."""
    passed = failed = 0
    for name in sorted(set(of_kafka) | set(of_weir)):
        k = flatten(of_kafka.get(name, {}).get("observed", {"missing": True}))
        w = flatten(of_weir.get(name, {}).get("observed", {"missing": True}))
        differing = sorted(p for p in set(k) | set(w) if k.get(p, "<absent>") != w.get(p, "<absent>"))
        whole = (name, "*") in known
        unexplained = [p for p in differing if not whole and (name, p) not in known]
        stale = [f for (s, f) in known if s == name and f != "*" and f not in differing]
        if whole and not differing:
            stale.append("*")
        if unexplained or stale:
            failed += 1
            print(f"FAIL {name}")
            for p in unexplained:
                print(f"     {p}: Kafka {json.dumps(k.get(p, '<absent>'))}, Weir {json.dumps(w.get(p, '<absent>'))}")
            for p in stale:
                print(f"     {p}: listed in COMPATIBILITY.md as a difference, but Weir now answers as Kafka")
            for side, run in (("Kafka", of_kafka), ("Weir", of_weir)):
                print(f"     {side} said: {json.dumps(run.get(name, {}).get('observed'))}")
        else:
            passed += 1
            note = f"known: {', '.join(differing)}" if differing else f"{len(k)} fields"
            print(f"{'known' if differing else 'same '} {name} ({note})")
    return passed, failed


def move_from_kafka(args, classes, work, killed):
    """Kafka seeded with topics, records, a transaction, offsets, ACLs, users and quotas, then
    stopped (or killed with -9); Weir started on the data directory it left. What the moved/
    scenarios see of each, named "moved (stopped)/…" or "moved (killed)/…"."""
    how = "killed" if killed else "stopped"
    base = os.path.join(work, f"move-{how}")
    kafka = KafkaCluster(args.lib, os.path.join(base, "kafka"), 1, overrides={**COMMON_OVERRIDES, **AUTHORIZER})
    weir = None
    try:
        kafka.start()
        seeded = run_probe(args.lib, classes, kafka.bootstrap, ["seed/"], os.path.join(base, "seed.log"))
        for name, line in seeded.items():
            if line["observed"] != {"seeded": True}:
                raise RuntimeError(f"{name} failed on Kafka: {line['observed']}")
        of_kafka = run_probe(args.lib, classes, kafka.bootstrap, ["moved/"], os.path.join(base, "probe-kafka.log"))
        if killed:
            kafka.kill(1)
        kafka.stop()
        weir = WeirBroker(os.path.abspath(args.weir), os.path.join(base, "weir"),
                          data_dir=os.path.join(base, "kafka", "node-1", "data"), overrides=AUTHORIZER)
        weir.start()
        of_weir = run_probe(args.lib, classes, weir.bootstrap, ["moved/"], os.path.join(base, "probe-weir.log"))
    finally:
        kafka.stop()
        if weir:
            weir.stop()

    def renamed(run):
        return {n.replace("moved/", f"moved ({how})/", 1): v for n, v in run.items()}
    return renamed(of_kafka), renamed(of_weir)


def make_keystores(d):
    """A CA and four server certificates for the tls/ scenarios, as PEM keystores (key,
    certificate, CA) named first, renewed (the same subject and name), stranger (another
    subject) and bare (the same subject, no alternative name); one file that is no keystore."""
    os.makedirs(d, exist_ok=True)

    def openssl(*a):
        subprocess.run(["openssl", *a], cwd=d, check=True, stdout=subprocess.DEVNULL,
                       stderr=subprocess.DEVNULL)
    ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]
    openssl("req", "-x509", *ec, "-keyout", "ca.key", "-out", "ca.pem", "-days", "2",
            "-subj", "/CN=weir differential CA")
    with open(os.path.join(d, "named.ext"), "w") as f:
        f.write("subjectAltName=DNS:localhost\n")
    with open(os.path.join(d, "bare.ext"), "w") as f:
        f.write("extendedKeyUsage=serverAuth\n")
    for who, subject, ext in (("first", "/CN=localhost", "named.ext"), ("renewed", "/CN=localhost", "named.ext"),
                              ("stranger", "/CN=stranger", "named.ext"), ("bare", "/CN=localhost", "bare.ext")):
        openssl("req", *ec, "-keyout", f"{who}.ec", "-out", f"{who}.csr", "-subj", subject)
        openssl("pkcs8", "-topk8", "-nocrypt", "-in", f"{who}.ec", "-out", f"{who}.key")
        openssl("x509", "-req", "-in", f"{who}.csr", "-CA", "ca.pem", "-CAkey", "ca.key",
                "-CAcreateserial", "-out", f"{who}.crt", "-days", "2", "-extfile", ext)
        with open(os.path.join(d, f"{who}.pem"), "wb") as out:
            for part in (f"{who}.key", f"{who}.crt", "ca.pem"):
                with open(os.path.join(d, part), "rb") as f:
                    out.write(f.read())
    with open(os.path.join(d, "not-a-keystore.pem"), "w") as f:
        f.write("hello\n")


def tls_reload(args, classes, work):
    """Kafka and Weir, each with an SSL listener whose keystore is set again while it runs
    (tls/ scenarios). Each side has its own copy of the files, as the scenario rewrites one."""
    base = os.path.join(work, "tls")
    make_keystores(os.path.join(base, "certs"))
    runs = []
    kafka = weir = None
    try:
        for side in ("kafka", "weir"):
            d = os.path.join(base, f"{side}-certs")
            shutil.copytree(os.path.join(base, "certs"), d)
            ssl_port = free_port()
            keystore = {"listener.name.ssl.ssl.keystore.type": "PEM",
                        "listener.name.ssl.ssl.keystore.location": os.path.join(d, "first.pem")}
            if side == "kafka":
                kafka = KafkaCluster(args.lib, os.path.join(base, "kafka"), 1,
                                     overrides={**COMMON_OVERRIDES, **keystore}, ssl_port=ssl_port)
                broker = kafka
            else:
                weir = WeirBroker(os.path.abspath(args.weir), os.path.join(base, "weir"))
                weir.overrides.update(keystore)
                weir.overrides["listeners"] = f"PLAINTEXT://{weir.bootstrap},SSL://127.0.0.1:{ssl_port}"
                weir.overrides["listener.security.protocol.map"] = "PLAINTEXT:PLAINTEXT,SSL:SSL"
                broker = weir
            broker.start()
            runs.append(run_probe(args.lib, classes, broker.bootstrap, ["tls/"],
                                  os.path.join(base, f"probe-{side}.log"),
                                  ["--tls", d, "--ssl", f"127.0.0.1:{ssl_port}"]))
            broker.stop()
    finally:
        for b in (kafka, weir):
            if b:
                b.stop()
    return runs[0], runs[1]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--weir", required=True)
    ap.add_argument("--lib", required=True, help="the directory of Kafka's jars (scripts/kafka.sh fetch)")
    ap.add_argument("--only", action="append", default=[], help="scenarios whose names start so")
    ap.add_argument("--keep", action="store_true", help="keep the brokers' files")
    args = ap.parse_args()

    work = tempfile.mkdtemp(prefix="weir-differential.")
    classes = os.path.join(work, "classes")
    compile_probe(args.lib, classes)
    kafka = KafkaCluster(args.lib, os.path.join(work, "kafka"), 1, overrides=COMMON_OVERRIDES)
    weir = WeirBroker(os.path.abspath(args.weir), os.path.join(work, "weir"))
    # The move from Kafka and the tls/ scenarios start brokers of their own.
    named = lambda *prefixes: not args.only or any(o.startswith(prefixes) for o in args.only)
    main_run = not args.only or any(not o.startswith(("seed/", "moved/", "tls/")) for o in args.only)
    of_kafka, of_weir = {}, {}
    try:
        with concurrent.futures.ThreadPoolExecutor(2) as pool:
            if not main_run:
                raise StopIteration
            started = [pool.submit(kafka.start), pool.submit(weir.start)]
            for f in started:
                f.result()
            runs = [pool.submit(run_probe, args.lib, classes, b.bootstrap, args.only,
                                os.path.join(work, f"probe-{n}.log"))
                    for n, b in (("kafka", kafka), ("weir", weir))]
            of_kafka, of_weir = (f.result() for f in runs)
    except StopIteration:
        pass
    finally:
        kafka.stop()
        weir.stop()

    # Kafka's kafka-dump-log reads the files both brokers left for the same scenarios, and
    # must find nothing in Weir's that it does not find in its own.
    if main_run and named("dump-log/"):
        name = "dump-log/kafka-reads-the-files"
        of_kafka[name] = {"observed": dump_complaints(
            args.lib, os.path.join(kafka.work, "node-1", "data"), os.path.join(work, "dump-kafka.log"))[0]}
        complaints, sections = dump_complaints(args.lib, weir.data_dir, os.path.join(work, "dump-weir.log"))
        of_weir[name] = {"observed": complaints}
        # And `weir dump-log` prints of Weir's files the facts Kafka's tool prints of them.
        name = "dump-log/weir-dump-log-agrees"
        of_kafka[name] = {"observed": {f: kafka_facts(lines) for f, lines in sections.items()}}
        of_weir[name] = {"observed": {f: weir_facts(os.path.abspath(args.weir), os.path.join(weir.data_dir, f))
                                      for f in sections}}
    known = known_differences()
    passed, failed = compare(of_kafka, of_weir, known)
    if named("tls/"):
        k, w = tls_reload(args, classes, work)
        p, f = compare(k, w, known)
        passed += p
        failed += f
    if named("seed/", "moved/"):
        for how in ("stopped", "killed"):
            k, w = move_from_kafka(args, classes, work, killed=how == "killed")
            p, f = compare(k, w, known)
            passed += p
            failed += f
    print(f"{passed} passed, {failed} failed")
    if args.keep or failed:
        print(f"the brokers' files and the probes' logs: {work}")
    else:
        shutil.rmtree(work, ignore_errors=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
