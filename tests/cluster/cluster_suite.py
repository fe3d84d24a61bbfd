#!/usr/bin/env python3
"""A Weir cluster on loopback, tested as its users would: one real etcd (Debian's
etcd-server) and three `weir serve` brokers with `etcd.connect`, then

  matrix:      every client (kcat, confluent-kafka, kafka-python, aiokafka, kafkajs) × codec
               produces to and consumes from topics whose partitions spread over all three
               brokers, bootstrapped from one of them;
  weir:        Weir's own client (weir produce/consume) against the cluster;
  spread:      a 6-partition topic is led by every broker; Metadata from every broker lists
               the three with the same controller; `weir cluster describe` says so;
  coordinator: a consumer group whose coordinator is another broker than the one the
               client bootstraps from commits and resumes;
  transactions: tests/conformance/transactions.py against the three (commit, abort,
               consume-transform-produce, fencing, timeout abort; librdkafka,
               kafka-python, aiokafka), markers crossing brokers;
  controller:  `kill -9` of the controller: another broker controls within the lease time;
  broker:      `kill -9` of a broker: only its partitions lose their leader (the others take
               records all along), and they come back, with their records, when it restarts;
  replicated:  for every client and Weir's, a topic of three replicas
               (min.insync.replicas=2): the client produces (idempotent, acks=all) and
               consumes in a group while the leader of one partition is killed with -9;
               it finishes on the new leaders by itself with every record, and the time
               the partition was without a leader is reported; the broker comes back
               into the ISR;
  taken id:    a broker started with the id of a live one is refused, saying so.

env: WEIR (target/debug/weir), CLIENTS, CODECS (none zstd), KEEP=1 keeps the logs.
Prints one line per check; exits 1 if any failed.
"""
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import uuid

from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
WEIR = os.environ.get("WEIR", os.path.join(ROOT, "target", "debug", "weir"))
PY = os.environ.get("PY", os.path.join(ROOT, ".venv", "bin", "python"))
CLIENTS = os.environ.get("CLIENTS", "kcat confluent kafkapy aiokafka kafkajs").split()
CODECS = os.environ.get("CODECS", "none zstd")
SESSION_MS = 3000
failures = []


def check(ok, what):
    print(("ok   " if ok else "FAIL ") + what, flush=True)
    if not ok:
        failures.append(what)
    return ok


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def wait(what, timeout, f, step=0.05):
    start = time.time()
    while True:
        try:
            v = f()
            if v:
                return time.time() - start
        except Exception:
            pass
        if time.time() - start > timeout:
            raise TimeoutError("%s: not within %ss" % (what, timeout))
        time.sleep(step)


class Etcd:
    def __init__(self, work):
        self.client = "127.0.0.1:%d" % free_port()
        self.peer = "http://127.0.0.1:%d" % free_port()
        self.dir = os.path.join(work, "etcd")
        self.log = open(os.path.join(work, "etcd.log"), "ab")
        self.start()

    def start(self):
        self.proc = subprocess.Popen(
            ["etcd", "--name", "weir-cluster-test", "--data-dir", self.dir,
             "--listen-client-urls", "http://" + self.client,
             "--advertise-client-urls", "http://" + self.client,
             "--listen-peer-urls", self.peer, "--initial-advertise-peer-urls", self.peer,
             "--initial-cluster", "weir-cluster-test=" + self.peer],
            stdout=self.log, stderr=self.log)
        wait("etcd listening", 20, lambda: socket.create_connection(
            ("127.0.0.1", int(self.client.split(":")[1])), 0.2))

    def stop(self):
        self.proc.kill()
        self.proc.wait()


class Broker:
    def __init__(self, work, etcd, node_id, port=None):
        self.node_id = node_id
        self.port = port or free_port()
        self.addr = "127.0.0.1:%d" % self.port
        self.data = os.path.join(work, "broker-%d" % node_id)
        self.log_path = os.path.join(work, "broker-%d-%d.log" % (node_id, self.port))
        self.etcd = etcd
        self.proc = None

    def start(self, wait_listening=True):
        log = open(self.log_path, "ab")
        self.proc = subprocess.Popen(
            [WEIR, "serve", "--listen", self.addr, "--data-dir", self.data,
             "--override", "node.id=%d" % self.node_id,
             "--override", "etcd.connect=%s/weir-test" % self.etcd.client,
             "--override", "etcd.session.timeout.ms=%d" % SESSION_MS,
             "--override", "num.partitions=3",
             "--override", "offsets.topic.num.partitions=6",
             "--override", "transaction.state.log.num.partitions=6",
             "--override", "transaction.abort.timed.out.transaction.cleanup.interval.ms=1000",
             "--override", "group.initial.rebalance.delay.ms=300"],
            stdout=log, stderr=log)
        if wait_listening:
            wait("broker %d listening" % self.node_id, 30, self.listening)
        return self

    def listening(self):
        if self.proc.poll() is not None:
            raise RuntimeError("broker %d exited:\n%s" % (self.node_id, self.tail()))
        with socket.create_connection(("127.0.0.1", self.port), 0.2):
            return True

    def kill(self):
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait()

    def term(self):
        self.proc.send_signal(signal.SIGTERM)
        return self.proc.wait(30)

    def tail(self, n=30):
        with open(self.log_path, errors="replace") as f:
            return "".join(f.readlines()[-n:])


def metadata(addr, topic=None):
    a = AdminClient({"bootstrap.servers": addr})
    return a.list_topics(topic=topic, timeout=10)


def weir(*args, timeout=120, stdin=None):
    return subprocess.run([WEIR, *args], capture_output=True, timeout=timeout, input=stdin)


def leaders(addr, topic):
    md = metadata(addr, topic)
    return {p.id: p.leader for p in md.topics[topic].partitions.values()}


def all_led(addr, topic, partitions):
    """Every partition known and led; an answer from a broker that has not yet learned of
    the topic is empty, not "all led"."""
    ls = leaders(addr, topic)
    return len(ls) == partitions and all(l >= 0 for l in ls.values())


def produce(addr, topic, n, partition=None, timeout=30):
    """n records, acks=all; returns how many were acknowledged."""
    p = Producer({"bootstrap.servers": addr, "acks": "all", "linger.ms": 5,
                  "message.timeout.ms": int(timeout * 1000)})
    acked = []
    for i in range(n):
        kw = {"partition": partition} if partition is not None else {}
        p.produce(topic, value=b"v%d" % i,
                  on_delivery=lambda e, m: acked.append(m) if e is None else None, **kw)
        p.poll(0)
    p.flush(timeout)
    return len(acked)


def count(addr, topic, partitions, timeout=20):
    c = Consumer({"bootstrap.servers": addr, "group.id": "count-" + uuid.uuid4().hex[:6],
                  "enable.auto.commit": False})
    c.assign([TopicPartition(topic, p, 0) for p in partitions])
    got, idle = 0, 0
    deadline = time.time() + timeout
    while idle < 8 and time.time() < deadline:
        msgs = c.consume(1000, 0.25)
        idle = 0 if msgs else idle + 1
        got += sum(1 for m in msgs if not m.error())
    c.close()
    return got


def main():
    work = tempfile.mkdtemp(prefix="weir-cluster-")
    etcd = Etcd(work)
    brokers = {i: Broker(work, etcd, i) for i in (1, 2, 3)}
    ok = False
    try:
        for b in brokers.values():
            b.start(wait_listening=False)
        for b in brokers.values():
            wait("broker %d listening" % b.node_id, 30, b.listening)
        boot = brokers[1].addr
        everyone = ",".join(b.addr for b in brokers.values())
        wait("three brokers in the metadata", 20, lambda: len(metadata(boot).brokers) == 3)
        run_matrix(boot)
        run_weir_client(boot)
        spread(brokers)
        coordinator(brokers)
        transactions(boot)
        controller_failover(brokers, everyone)
        broker_loss(brokers, everyone)
        replicated_failover(brokers, everyone)
        shared_state(brokers)
        controlled_shutdown(brokers, everyone)
        etcd_outage(etcd, brokers, everyone)
        taken_id(work, etcd, brokers)
        ok = not failures
    finally:
        for b in brokers.values():
            if b.proc and b.proc.poll() is None:
                b.proc.kill()
                b.proc.wait()
        etcd.stop()
        if ok and not os.environ.get("KEEP"):
            shutil.rmtree(work, ignore_errors=True)
        else:
            print("logs kept in " + work)
            for b in brokers.values():
                print("--- broker %d (last lines)\n%s" % (b.node_id, b.tail(15)))
    if failures:
        print("cluster suite: %d failed" % len(failures))
        sys.exit(1)
    print("cluster suite: all passed")


def run_matrix(boot):
    env = dict(os.environ, BOOTSTRAP=boot, CODECS=CODECS, N="500",
               LOGS=os.path.join(tempfile.gettempdir(), "weir-cluster-matrix"))
    r = subprocess.run([os.path.join(ROOT, "tests", "conformance", "run-all.sh"), *CLIENTS],
                       env=env, capture_output=True, text=True, timeout=900)
    for line in r.stdout.splitlines():
        if line.startswith(("PASS", "FAIL")):
            check(line.startswith("PASS"), "matrix: " + line[5:])
    check(r.returncode == 0, "matrix: every client × codec against three brokers")


def run_weir_client(boot):
    env = dict(os.environ, BOOTSTRAP=boot, WEIR=WEIR, N="600", CODECS="none lz4")
    r = subprocess.run([PY, os.path.join(ROOT, "tests", "conformance", "interop_weir_client.py")],
                       env=env, capture_output=True, text=True, timeout=600)
    check(r.returncode == 0, "weir produce/consume against the cluster, with librdkafka and "
          "kafka-python reading and writing" + ("" if r.returncode == 0 else ":\n" + r.stdout[-2000:]))


def spread(brokers):
    boot = brokers[1].addr
    r = weir("topics", "create", "--bootstrap", boot, "--topic", "spread", "--partitions", "6")
    check(r.returncode == 0, "weir topics create: 6 partitions" + r.stderr.decode()[-300:])
    led = leaders(boot, "spread")
    check(set(led.values()) == {1, 2, 3}, "the partitions of a new topic are led by every broker: %s" % led)
    views = [metadata(b.addr) for b in brokers.values()]
    check(all(sorted(v.brokers) == [1, 2, 3] for v in views), "Metadata from every broker lists all three")
    check(len({v.controller_id for v in views}) == 1 and views[0].controller_id in (1, 2, 3),
          "every broker names the same controller (%s)" % [v.controller_id for v in views])
    for p in range(6):
        n = produce(brokers[(p % 3) + 1].addr, "spread", 50, partition=p)
        check(n == 50, "partition %d takes records, bootstrapped from broker %d" % (p, (p % 3) + 1))
    got = count(brokers[3].addr, "spread", range(6))
    check(got == 300, "every record reads back through another broker (%d of 300)" % got)
    d = weir("cluster", "describe", "--bootstrap", boot, "--json")
    try:
        desc = json.loads(d.stdout)
        check(sorted(b["id"] for b in desc["brokers"]) == [1, 2, 3] and desc["controller"] in (1, 2, 3),
              "weir cluster describe: three brokers and the controller")
    except ValueError:
        check(False, "weir cluster describe --json: %s %s" % (d.stdout[-300:], d.stderr[-300:]))


def group_elsewhere(brokers, boot_id):
    """A group id whose coordinator is not broker `boot_id`."""
    a = AdminClient({"bootstrap.servers": brokers[boot_id].addr})
    for i in range(200):
        g = "elsewhere-%d" % i
        try:
            c = a.describe_consumer_groups([g])[g].result(10)
            if c.coordinator.id != boot_id:
                return g, c.coordinator.id
        except KafkaException:
            continue
    raise RuntimeError("no group id found whose coordinator is another broker")


def coordinator(brokers):
    topic = "coord-" + uuid.uuid4().hex[:6]
    boot = brokers[1].addr
    admin = AdminClient({"bootstrap.servers": boot})
    admin.create_topics([NewTopic(topic, 3, 1)])[topic].result(15)
    check(produce(boot, topic, 90) == 90, "records for the group")
    group, coord = group_elsewhere(brokers, 1)
    c = Consumer({"bootstrap.servers": boot, "group.id": group, "auto.offset.reset": "earliest",
                  "enable.auto.commit": False})
    c.subscribe([topic])
    got, deadline = 0, time.time() + 30
    while got < 60 and time.time() < deadline:
        for m in c.consume(60 - got, 1.0):
            if not m.error():
                got += 1
    c.commit(asynchronous=False)
    c.close()
    c = Consumer({"bootstrap.servers": boot, "group.id": group, "auto.offset.reset": "earliest",
                  "enable.auto.commit": False})
    c.subscribe([topic])
    rest, idle = 0, 0
    while idle < 8:
        msgs = c.consume(100, 0.5)
        idle = 0 if msgs else idle + 1
        rest += sum(1 for m in msgs if not m.error())
    c.close()
    check(got == 60 and rest == 30,
          "a group coordinated by broker %d (not the bootstrap broker) commits and resumes: "
          "%d then %d of 90" % (coord, got, rest))


def transactions(boot):
    """The real-client transaction scenarios of tests/conformance/transactions.py, against
    three brokers: each transaction's coordinator, partitions and group coordinator are
    spread over them, so markers go to other brokers by WriteTxnMarkers."""
    env = dict(os.environ, BOOTSTRAP=boot)
    r = subprocess.run([PY, os.path.join(ROOT, "tests", "conformance", "transactions.py")],
                       env=env, capture_output=True, text=True, timeout=900)
    for line in r.stdout.splitlines():
        if line.startswith(("ok ", "FAIL")):
            check(line.startswith("ok"), "transactions: " + line[5:].strip())
    check(r.returncode == 0, "transactions across three brokers" +
          ("" if r.returncode == 0 else ":\n" + (r.stdout + r.stderr)[-2000:]))


def controller_failover(brokers, everyone):
    times = []
    for round_ in range(2):
        before = metadata(everyone).controller_id
        victim = brokers[before]
        victim.kill()
        took = wait("another controller", SESSION_MS / 1000 * 4,
                    lambda: metadata(everyone).controller_id not in (-1, before))
        times.append(took)
        victim.start()
        wait("broker %d back" % before, 20, lambda: len(metadata(everyone).brokers) == 3)
    check(max(times) < SESSION_MS / 1000 + 4,
          "kill -9 of the controller: another broker controls within the lease time "
          "(%s s, lease %d ms)" % (", ".join("%.1f" % t for t in times), SESSION_MS))


def broker_loss(brokers, everyone):
    topic = "loss-" + uuid.uuid4().hex[:6]
    a = AdminClient({"bootstrap.servers": everyone})
    a.create_topics([NewTopic(topic, 6, 1)])[topic].result(15)
    # One answer that has every partition led: a second Metadata call may reach a broker
    # that has not yet applied the topic and answers without it.
    seen = {}
    wait("led", 10, lambda: seen.update(led=leaders(everyone, topic)) or
         (len(seen["led"]) == 6 and all(l >= 0 for l in seen["led"].values())))
    before = seen["led"]
    check(produce(everyone, topic, 600) == 600, "600 records before the loss")
    victim_id = before[0]
    victim = brokers[victim_id]
    mine = sorted(p for p, l in before.items() if l == victim_id)
    others = sorted(p for p, l in before.items() if l != victim_id)
    victim.kill()
    wait("its partitions lose their leader", SESSION_MS / 1000 * 4, lambda: all(
        leaders(brokers[next(i for i in brokers if i != victim_id)].addr, topic)[p] == -1 for p in mine))
    alive = ",".join(b.addr for i, b in brokers.items() if i != victim_id)
    now = leaders(alive, topic)
    check(all(now[p] == before[p] for p in others),
          "kill -9 of broker %d: the other partitions keep their leaders" % victim_id)
    n = sum(produce(alive, topic, 20, partition=p, timeout=10) for p in others)
    check(n == 20 * len(others), "the other partitions take records while it is down (%d)" % n)
    victim.start()
    try:
        took = wait("its partitions back", 30, lambda: leaders(everyone, topic) == before)
        check(True, "it leads its partitions again once restarted (%.1f s)" % took)
    except TimeoutError:
        check(False, "it leads its partitions again once restarted: %s, was %s"
              % (leaders(everyone, topic), before))
    got = count(everyone, topic, range(6))
    check(got == 600 + n, "every acknowledged record is there (%d of %d)" % (got, 600 + n))


WEIR_CLIENT_SCRIPT = r"""
set -eu
# Weir's own client through the kill: an idempotent acks=all producer, then a group.
seq 0 $((N - 1)) | sed "s/^/weir-$RUN-/" | "$WEIR" produce --bootstrap "$BOOTSTRAP" \
  --topic "$TOPIC" --acks all --property enable.idempotence=true
got=$("$WEIR" consume --bootstrap "$BOOTSTRAP" --topic "$TOPIC" --group "g-$RUN" \
  --from-beginning --max-messages "$N" --timeout-ms 30000 | grep -o "\"value\":\"weir-$RUN-[0-9]*\"" \
  | sort -u | wc -l)
[ "$got" -eq "$N" ] && echo "PASS weir n=$N" || echo "FAIL weir: $got of $N"
"""


def client_command(cl):
    if cl == "weir":
        return ["bash", "-c", WEIR_CLIENT_SCRIPT]
    here = os.path.join(ROOT, "tests", "conformance")
    return {"kcat": [os.path.join(here, "smoke-kcat.sh")],
            "confluent": [PY, os.path.join(here, "smoke_confluent.py")],
            "kafkapy": [PY, os.path.join(here, "smoke_kafka_python.py")],
            "aiokafka": [PY, os.path.join(here, "smoke_aiokafka.py")],
            "kafkajs": ["node", os.path.join(here, "smoke-kafkajs.js")]}[cl]


def partitions_of(addr, topic):
    md = metadata(addr, topic)
    return md.topics[topic].partitions


def all_in_sync(addr, topic, partitions, replicas):
    """Every partition of the topic is known, led and fully replicated. The broker that
    answers may not have learned of a topic created a moment ago (metadata reaches each
    broker through its etcd watch), so an empty answer is not "all in sync"."""
    ps = partitions_of(addr, topic)
    return len(ps) == partitions and all(len(p.isrs) == replicas and p.leader >= 0
                                         for p in ps.values())


def replicated_failover(brokers, everyone):
    """Each client against a topic of three replicas while the leader of its partition 0
    is killed with -9 (then restarted once the client is done)."""
    leaderless = []
    for i, cl in enumerate(CLIENTS + ["weir"]):
        topic = "rf3-%s-%s" % (cl, uuid.uuid4().hex[:6])
        a = AdminClient({"bootstrap.servers": everyone})
        a.create_topics([NewTopic(topic, 3, 3, config={"min.insync.replicas": "2"})])[topic].result(15)
        wait("in sync", 20, lambda: all_in_sync(everyone, topic, 3, 3))
        # `everyone` may be answered by another broker than the wait's, one that has not
        # seen the topic through its etcd watch yet: ask until partition 0's leader is known.
        victim_id, deadline = -1, time.time() + 20
        while victim_id < 0 and time.time() < deadline:
            p0 = partitions_of(everyone, topic).get(0)
            victim_id = p0.leader if p0 is not None else -1
            if victim_id < 0:
                time.sleep(0.05)
        victim = brokers[victim_id]
        alive = ",".join(b.addr for j, b in brokers.items() if j != victim_id)
        env = dict(os.environ, BOOTSTRAP=everyone, TOPIC=topic, N="4000", CODEC="none",
                   TIMEOUT="90", KAFKAJS_NO_PARTITIONER_WARNING="1", WEIR=WEIR,
                   RUN=uuid.uuid4().hex[:8],
                   # KafkaJS drops a partition whose leader moved, within one send, to a
                   # broker that had answered (see smoke-kafkajs.js): one message a send.
                   PER_SEND="1")
        if cl == "kafkajs":
            env["N"] = "1500"
        log_path = os.path.join(tempfile.gettempdir(), "weir-cluster-rf3-%s.log" % cl)
        with open(log_path, "w") as log:
            client = subprocess.Popen(client_command(cl), env=env, stdout=log, stderr=log)
            time.sleep(0.5)
            killed = time.time()
            victim.kill()
            # How long partition 0 had no live leader, as a surviving broker tells it.
            while True:
                try:
                    p0 = partitions_of(alive, topic)[0]
                    if p0.leader not in (-1, victim_id):
                        break
                except KafkaException:
                    pass
                if time.time() - killed > 30:
                    break
                time.sleep(0.05)
            leaderless.append(time.time() - killed)
            try:
                rc = client.wait(150)
            except subprocess.TimeoutExpired:
                client.kill()
                rc = -1
        out = open(log_path).read()
        passed = rc == 0 and "PASS" in out
        check(passed, "replicated: %s produces and consumes through the kill -9 of broker %d "
              "(leader of partition 0) with every record%s"
              % (cl, victim_id, "" if passed else ":\n" + out[-1500:]))
        victim.start()
        try:
            took = wait("back in the ISR", 60, lambda: all_in_sync(everyone, topic, 3, 3))
            check(True, "replicated: broker %d back in every ISR of %s (%.1f s after its restart)"
                  % (victim_id, topic, took))
        except TimeoutError:
            check(False, "replicated: broker %d back in every ISR: %s" % (
                victim_id, {k: v.isrs for k, v in partitions_of(everyone, topic).items()}))
    if leaderless:
        xs = sorted(leaderless)
        check(xs[-1] < SESSION_MS / 1000 + 4,
              "replicated: a partition without a leader after kill -9: p50 %.1f s, max %.1f s "
              "(%d kills, etcd.session.timeout.ms=%d)"
              % (xs[len(xs) // 2], xs[-1], len(xs), SESSION_MS))


def shared_state(brokers):
    """Dynamic broker configs, group configs, quotas and SCRAM users changed through one
    broker are what the others enforce."""
    b1, b3 = brokers[1].addr, brokers[3].addr
    r = weir("configs", "alter", "--bootstrap", b1, "--broker-defaults",
             "--add-config", "log.retention.ms=3600000")
    check(r.returncode == 0, "weir configs alter --broker-defaults through broker 1 " + r.stderr.decode()[-200:])

    def seen_by_3():
        d = weir("configs", "describe", "--bootstrap", b3, "--broker", "3", "--json")
        return any(c.get("name") == "log.retention.ms" and c.get("value") == "3600000"
                   for c in json.loads(d.stdout))
    try:
        wait("broker 3 applies it", 10, seen_by_3)
        check(True, "broker 3 applies a broker default set through broker 1")
    except TimeoutError:
        check(False, "broker 3 applies a broker default set through broker 1")
    r = weir("configs", "alter", "--bootstrap", b1, "--group", "shared-g",
             "--add-config", "consumer.session.timeout.ms=50000")
    check(r.returncode == 0, "weir configs alter --group through broker 1 " + r.stderr.decode()[-200:])

    def group_seen_by_3():
        d = weir("configs", "describe", "--bootstrap", b3, "--group", "shared-g", "--json")
        return any(c.get("name") == "consumer.session.timeout.ms" and c.get("value") == "50000"
                   and c.get("source") == "DYNAMIC_GROUP_CONFIG" for c in json.loads(d.stdout or b"[]"))
    try:
        wait("broker 3 describes it", 10, group_seen_by_3)
        check(True, "broker 3 describes a group config set through broker 1")
    except TimeoutError:
        check(False, "broker 3 describes a group config set through broker 1")
    r = weir("quotas", "alter", "--bootstrap", b1, "--client-id", "shared-q",
             "--add-config", "producer_byte_rate=1048576")
    check(r.returncode == 0, "weir quotas alter through broker 1 " + r.stderr.decode()[-200:])
    d = weir("quotas", "describe", "--bootstrap", b3, "--json")
    check(b"shared-q" in d.stdout, "the quota is there through broker 3")
    from confluent_kafka.admin import UserScramCredentialUpsertion, ScramCredentialInfo, ScramMechanism
    a1 = AdminClient({"bootstrap.servers": b1})
    up = UserScramCredentialUpsertion("alice", ScramCredentialInfo(ScramMechanism.SCRAM_SHA_256, 4096),
                                      b"alice-secret")
    a1.alter_user_scram_credentials([up])["alice"].result(15)
    a3 = AdminClient({"bootstrap.servers": b3})
    described = a3.describe_user_scram_credentials(["alice"])["alice"].result(15)
    check(len(described.scram_credential_infos) == 1,
          "a SCRAM user added through broker 1 is described by the cluster")


def controlled_shutdown(brokers, everyone):
    """SIGTERM: the broker leaves at once (its lease revoked), so what it led is offline
    without waiting for the session to lapse, and it leads again after a restart."""
    victim = brokers[3]
    before = leaders(everyone, "spread")
    mine = [p for p, l in before.items() if l == 3]
    t0 = time.time()
    code = victim.term()
    stopped = time.time() - t0
    alive = ",".join(b.addr for i, b in brokers.items() if i != 3)
    took = wait("its partitions offline", 10, lambda: all(
        leaders(alive, "spread")[p] == -1 for p in mine))
    check(code == 0 and took < SESSION_MS / 1000,
          "SIGTERM: broker 3 stops cleanly (%.1f s) and the others see it gone at once "
          "(%.1f s, before its %d ms session would lapse)" % (stopped, took, SESSION_MS))
    victim.start()
    wait("back", 20, lambda: leaders(everyone, "spread") == before)
    check(count(everyone, "spread", range(6)) == 300, "its records are all there after the restart")


def etcd_outage(etcd, brokers, everyone):
    """etcd away: brokers serve what they lead with the metadata they have, refuse topic
    changes saying why, and catch up once it is back."""
    etcd.stop()
    time.sleep(1)
    n = produce(everyone, "spread", 120)
    check(n == 120, "while etcd is away, every partition still takes records (%d of 120)" % n)
    r = weir("topics", "create", "--bootstrap", brokers[1].addr, "--topic", "during-outage",
             "--partitions", "1", timeout=60)
    check(r.returncode != 0 and b"etcd" in r.stderr,
          "while etcd is away, creating a topic is refused, naming etcd: %s" % r.stderr.decode().strip()[-200:])
    etcd.start()
    ok = False
    for _ in range(40):
        r = weir("topics", "create", "--bootstrap", brokers[1].addr, "--topic", "after-outage",
                 "--partitions", "3", "--if-not-exists")
        if r.returncode == 0:
            ok = True
            break
        time.sleep(0.5)
    check(ok, "once etcd is back, topics are created again")
    wait("led", 20, lambda: all_led(everyone, "after-outage", 3))
    check(count(everyone, "spread", range(6)) == 420, "nothing acknowledged during the outage is lost")


def taken_id(work, etcd, brokers):
    imposter = Broker(work, etcd, 2)
    imposter.data = os.path.join(work, "imposter")
    imposter.start(wait_listening=False)
    try:
        code = imposter.proc.wait(30)
    except subprocess.TimeoutExpired:
        code = None
    text = open(imposter.log_path, errors="replace").read()
    check(code not in (None, 0) and "node.id 2 is taken" in text,
          "a broker started with a live broker's id is refused: %s" % text.strip().splitlines()[-1:])


if __name__ == "__main__":
    main()
