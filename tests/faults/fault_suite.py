#!/usr/bin/env python3
"""The fault harness: a replicated Weir cluster under random faults, then a check that
nothing acknowledged was lost, duplicated or moved.

The cluster: three etcd nodes (Debian's etcd-server) and three `weir serve` brokers, each
broker in its own network namespace on a bridge (10.77.0.0/24) with its data directory
on its own small tmpfs, so that a fault can cut its network (iptables inside its
namespace) or fill its disk. One topic of 6 partitions, three replicas each,
min.insync.replicas=2.

The load, all along: two idempotent acks=all producers (confluent-kafka), each value
unique ("P<producer>-<seq>"), every acknowledgement recorded with its partition and
offset; a consumer group of two members committing what it read, every successful commit
recorded.

Each cycle injects one fault chosen at random, holds it a few seconds, heals it, and waits
until every partition has a leader and three in-sync replicas again:
  kill-leader, kill-follower, kill-controller   kill -9 of that broker, restarted after
  kill-etcd                                     kill -9 of one etcd node, restarted after
  isolate-leader, isolate-controller            every packet in or out of the broker dropped
  split                                         a broker cut off from the other two (but not
                                                from etcd or the clients)
  disk-full                                     a follower's data disk filled up
  pause                                         SIGSTOP of a broker for longer than its etcd
                                                session, then SIGCONT (a zombie leader)

Then the checker, with an independent reader (kafka-python, not the producers' librdkafka):
every acknowledged record is at its offset, exactly once, in each producer's order; each
partition's replicas hold the same bytes; the group's committed offsets are at least the
last ones it was told were committed. The report gives faults injected (by kind), records
acknowledged, checked, lost, duplicated and moved.

Needs root (namespaces, iptables, tmpfs) and ./scripts/install-test-deps.sh.
usage: fault_suite.py WEIR --cycles N [--seed S] [--report FILE]
"""
import argparse
import collections
import json
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time

from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

NET = "10.77.0"
BRIDGE = "weirfault0"
BROKERS = (1, 2, 3)
ETCDS = (1, 2, 3)
TOPIC = "faults"
PARTITIONS = 6
SESSION_MS = 3000
LAG_MS = 4000
DISK_MIB = 256
PORT = 9092
FAULTS = ["kill-leader", "kill-follower", "kill-controller", "kill-etcd", "isolate-leader",
          "isolate-controller", "split", "disk-full", "pause"]


def sh(*cmd, check=True):
    r = subprocess.run(cmd, capture_output=True, text=True)
    if check and r.returncode != 0:
        raise RuntimeError("%s: %s" % (" ".join(cmd), r.stderr.strip()))
    return r


def ns(b):
    return "weirfault-b%d" % b


def addr(b):
    return "%s.%d:%d" % (NET, 10 + b, PORT)


def wait(what, timeout, f, step=0.1):
    start = time.time()
    while True:
        try:
            if f():
                return time.time() - start
        except Exception:
            pass
        if time.time() - start > timeout:
            raise TimeoutError("%s: not within %d s" % (what, timeout))
        time.sleep(step)


class Network:
    """A bridge in the root namespace (etcd and the clients are there, at .1) and one
    namespace per broker."""

    def up(self):
        self.down()
        sh("ip", "link", "add", BRIDGE, "type", "bridge")
        sh("ip", "addr", "add", NET + ".1/24", "dev", BRIDGE)
        sh("ip", "link", "set", BRIDGE, "up")
        for b in BROKERS:
            sh("ip", "netns", "add", ns(b))
            sh("ip", "link", "add", "weirfv%d" % b, "type", "veth", "peer", "name", "eth0",
               "netns", ns(b))
            sh("ip", "link", "set", "weirfv%d" % b, "master", BRIDGE, "up")
            sh("ip", "netns", "exec", ns(b), "ip", "addr", "add", "%s.%d/24" % (NET, 10 + b),
               "dev", "eth0")
            sh("ip", "netns", "exec", ns(b), "ip", "link", "set", "eth0", "up")
            sh("ip", "netns", "exec", ns(b), "ip", "link", "set", "lo", "up")

    def down(self):
        for b in BROKERS:
            sh("ip", "netns", "del", ns(b), check=False)
            sh("ip", "link", "del", "weirfv%d" % b, check=False)
        sh("ip", "link", "del", BRIDGE, check=False)

    def drop_all(self, b):
        for chain in ("INPUT", "OUTPUT"):
            sh("ip", "netns", "exec", ns(b), "iptables", "-A", chain, "-i" if chain == "INPUT"
               else "-o", "eth0", "-j", "DROP")

    def drop_between(self, b, others):
        for o in others:
            ip = "%s.%d" % (NET, 10 + o)
            sh("ip", "netns", "exec", ns(b), "iptables", "-A", "INPUT", "-s", ip, "-j", "DROP")
            sh("ip", "netns", "exec", ns(b), "iptables", "-A", "OUTPUT", "-d", ip, "-j", "DROP")

    def heal(self, b):
        sh("ip", "netns", "exec", ns(b), "iptables", "-F")


class Etcd:
    def __init__(self, work, i):
        self.i = i
        self.client = "%s.1:%d" % (NET, 23790 + i)
        self.peer = "http://%s.1:%d" % (NET, 23800 + i)
        self.dir = os.path.join(work, "etcd-%d" % i)
        self.log = open(os.path.join(work, "etcd-%d.log" % i), "ab")
        self.proc = None

    def start(self):
        cluster = ",".join("e%d=http://%s.1:%d" % (j, NET, 23800 + j) for j in ETCDS)
        self.proc = subprocess.Popen(
            ["etcd", "--name", "e%d" % self.i, "--data-dir", self.dir,
             "--listen-client-urls", "http://" + self.client,
             "--advertise-client-urls", "http://" + self.client,
             "--listen-peer-urls", self.peer, "--initial-advertise-peer-urls", self.peer,
             "--initial-cluster", cluster, "--initial-cluster-state", "new",
             "--initial-cluster-token", "weir-faults"],
            stdout=self.log, stderr=self.log)

    def kill(self):
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait()


class Broker:
    def __init__(self, work, weir, b):
        self.b = b
        self.weir = weir
        self.mount = os.path.join(work, "disk-%d" % b)
        self.data = os.path.join(self.mount, "data")
        self.log_path = os.path.join(work, "broker-%d.log" % b)
        self.proc = None
        os.makedirs(self.mount, exist_ok=True)
        sh("mount", "-t", "tmpfs", "-o", "size=%dm" % DISK_MIB, "tmpfs", self.mount)

    def start(self):
        log = open(self.log_path, "ab")
        etcd = ",".join("%s.1:%d" % (NET, 23790 + i) for i in ETCDS)
        self.proc = subprocess.Popen(
            ["ip", "netns", "exec", ns(self.b), self.weir, "serve", "--listen", addr(self.b),
             "--data-dir", self.data,
             "--override", "node.id=%d" % self.b,
             "--override", "etcd.connect=%s/faults" % etcd,
             "--override", "etcd.session.timeout.ms=%d" % SESSION_MS,
             "--override", "replica.lag.time.max.ms=%d" % LAG_MS,
             "--override", "log.segment.bytes=1048576",
             "--override", "offsets.topic.num.partitions=3",
             "--override", "group.initial.rebalance.delay.ms=200"],
            stdout=log, stderr=log)

    def alive(self):
        return self.proc is not None and self.proc.poll() is None

    def kill(self):
        if self.alive():
            self.proc.send_signal(signal.SIGKILL)
        if self.proc:
            self.proc.wait()

    def signal(self, sig):
        if self.alive():
            self.proc.send_signal(sig)

    def umount(self):
        sh("umount", "-l", self.mount, check=False)


def admin():
    return AdminClient({"bootstrap.servers": ",".join(addr(b) for b in BROKERS),
                        "socket.timeout.ms": 3000})


def metadata_of(b, topic=True):
    """Broker `b`'s own view (Metadata v1, asked of it alone, by hand, so that no client
    picks another broker to ask): (brokers, controller, {partition: (leader, replicas,
    isr)}) of the topic (of no topic, with `topic=False`)."""
    import struct
    name = TOPIC.encode()
    client = b"fault-suite"
    body = struct.pack(">hhih", 3, 1, 1, len(client)) + client
    body += struct.pack(">ih", 1, len(name)) + name if topic else struct.pack(">i", 0)
    with socket.create_connection(addr(b).rsplit(":", 1), 2) as s:
        s.settimeout(2)
        s.sendall(struct.pack(">i", len(body)) + body)
        buf = b""
        while len(buf) < 4 or len(buf) < 4 + struct.unpack(">i", buf[:4])[0]:
            chunk = s.recv(65536)
            if not chunk:
                raise ConnectionError("closed")
            buf += chunk
    pos = [8]  # size, correlation id

    def take(fmt):
        v = struct.unpack_from(fmt, buf, pos[0])
        pos[0] += struct.calcsize(fmt)
        return v if len(v) > 1 else v[0]

    def string():
        n = take(">h")
        if n < 0:
            return None
        v = buf[pos[0]:pos[0] + n].decode()
        pos[0] += n
        return v

    brokers = []
    for _ in range(take(">i")):
        brokers.append(take(">i"))
        string()
        take(">i")
        string()
    controller = take(">i")
    parts = {}
    for _ in range(take(">i")):
        terr = take(">h")
        string()
        take(">b")
        for _ in range(take(">i")):
            take(">h")
            pid, leader = take(">ii")
            replicas = [take(">i") for _ in range(take(">i"))]
            isr = [take(">i") for _ in range(take(">i"))]
            parts[pid] = (leader, replicas, isr)
        if terr:
            raise RuntimeError("topic error %d" % terr)
    return sorted(brokers), controller, parts


def healthy():
    """Every broker answers, and all three say the same: three brokers, and every
    partition led with three in-sync replicas (a broker that was cut off serves its last
    metadata until it hears from etcd again, so one view is not enough)."""
    views = [metadata_of(b) for b in BROKERS]
    first = views[0]
    return all(v[0] == list(BROKERS) and len(v[2]) == PARTITIONS
               and all(l in BROKERS and len(isr) == 3 for l, _, isr in v[2].values())
               and {p: x[0] for p, x in v[2].items()} == {p: x[0] for p, x in first[2].items()}
               and v[1] == first[1]
               for v in views)


def topic_state():
    """The view of the first broker that answers: (controller, partitions)."""
    for b in BROKERS:
        try:
            _, controller, parts = metadata_of(b)
            return controller, parts
        except (OSError, RuntimeError, ValueError):
            continue
    raise RuntimeError("no broker answers Metadata")


class Load:
    """The producers and the group, on threads, until stopped."""

    def __init__(self):
        self.stop = threading.Event()
        self.acked = []           # (producer, seq, partition, offset)
        self.failed = collections.Counter()
        self.commits = {}         # partition -> highest offset the group was told it committed
        self.lock = threading.Lock()
        self.threads = [threading.Thread(target=self.produce, args=(i,), daemon=True)
                        for i in (1, 2)]
        self.threads += [threading.Thread(target=self.consume, args=(i,), daemon=True)
                         for i in (1, 2)]

    def start(self):
        for t in self.threads:
            t.start()

    def finish(self):
        self.stop.set()
        for t in self.threads:
            t.join(120)

    def produce(self, n):
        boot = ",".join(addr(b) for b in BROKERS)
        seq = 0
        while not self.stop.is_set():
            p = Producer({"bootstrap.servers": boot, "acks": "all", "enable.idempotence": True,
                          "linger.ms": 5, "message.timeout.ms": 120000,
                          "client.id": "fault-producer-%d" % n,
                          **({"debug": os.environ["FAULT_DEBUG"]}
                             if os.environ.get("FAULT_DEBUG") else {})})
            fatal = []

            def dr(err, msg, n=n):
                if err is None:
                    s = int(msg.value().decode().split("-")[1])
                    with self.lock:
                        self.acked.append((n, s, msg.partition(), msg.offset()))
                else:
                    with self.lock:
                        self.failed[err.name()] += 1
                    if err.fatal():
                        fatal.append(err)

            while not self.stop.is_set() and not fatal:
                try:
                    p.produce(TOPIC, key=str(seq).encode(), value=("P%d-%d" % (n, seq)).encode(),
                              on_delivery=dr)
                    seq += 1
                except BufferError:
                    p.poll(0.1)
                    continue
                except KafkaException as e:
                    fatal.append(e)
                    break
                p.poll(0.002)
            p.flush(150)

    def consume(self, n):
        c = Consumer({"bootstrap.servers": ",".join(addr(b) for b in BROKERS),
                      "group.id": "faults-g", "auto.offset.reset": "earliest",
                      "enable.auto.commit": False, "client.id": "fault-consumer-%d" % n,
                      "session.timeout.ms": 10000})
        c.subscribe([TOPIC])
        last = time.time()
        while not self.stop.is_set():
            c.consume(500, 0.5)
            if time.time() - last >= 1.0:
                last = time.time()
                try:
                    done = c.commit(asynchronous=False)
                except KafkaException:
                    continue
                with self.lock:
                    for tp in done or []:
                        if tp.error is None and tp.offset >= 0:
                            self.commits[tp.partition] = max(self.commits.get(tp.partition, -1),
                                                             tp.offset)
        c.close()


class Faults:
    def __init__(self, net, brokers, etcds, rng):
        self.net, self.brokers, self.etcds, self.rng = net, brokers, etcds, rng

    def leader_and_follower(self):
        _, parts = topic_state()
        leader, replicas, _ = parts[self.rng.randrange(PARTITIONS)]
        return leader, self.rng.choice([r for r in replicas if r != leader])

    def controller(self):
        return topic_state()[0]

    def inject(self, kind):
        """Injects `kind`; returns what it did and how to heal it."""
        if kind in ("kill-leader", "kill-follower", "kill-controller"):
            leader, follower = self.leader_and_follower()
            b = {"kill-leader": leader, "kill-follower": follower,
                 "kill-controller": self.controller()}[kind]
            self.brokers[b].kill()
            return "broker %d" % b, lambda: self.brokers[b].start()
        if kind == "kill-etcd":
            e = self.etcds[self.rng.choice(ETCDS)]
            e.kill()
            return "etcd %d" % e.i, e.start
        if kind in ("isolate-leader", "isolate-controller"):
            b = self.leader_and_follower()[0] if kind == "isolate-leader" else self.controller()
            self.net.drop_all(b)
            return "broker %d" % b, lambda: self.net.heal(b)
        if kind == "split":
            b = self.rng.choice(BROKERS)
            self.net.drop_between(b, [o for o in BROKERS if o != b])
            return "broker %d from the others" % b, lambda: self.net.heal(b)
        if kind == "disk-full":
            b = self.leader_and_follower()[1]
            ballast = os.path.join(self.brokers[b].mount, "ballast")
            subprocess.run(["dd", "if=/dev/zero", "of=" + ballast, "bs=1M",
                            "count=%d" % DISK_MIB], capture_output=True)
            return "broker %d's disk" % b, lambda: os.remove(ballast)
        if kind == "pause":
            b = self.rng.choice(BROKERS)
            self.brokers[b].signal(signal.SIGSTOP)
            return "broker %d" % b, lambda: self.brokers[b].signal(signal.SIGCONT)
        raise ValueError(kind)


def read_everything():
    """Every record of the topic, by partition and offset, read with kafka-python."""
    from kafka import KafkaConsumer
    from kafka import TopicPartition as KTP
    c = KafkaConsumer(bootstrap_servers=[addr(b) for b in BROKERS], enable_auto_commit=False,
                      consumer_timeout_ms=5000, max_partition_fetch_bytes=1 << 20)
    tps = [KTP(TOPIC, p) for p in range(PARTITIONS)]
    c.assign(tps)
    c.seek_to_beginning()
    ends = c.end_offsets(tps)
    log = {}
    deadline = time.time() + 300
    while any(c.position(tp) < ends[tp] for tp in tps) and time.time() < deadline:
        for tp, msgs in c.poll(2000, max_records=5000).items():
            for m in msgs:
                log[(tp.partition, m.offset)] = m.value.decode()
    c.close()
    return log, {tp.partition: ends[tp] for tp in tps}


def committed_offsets():
    c = Consumer({"bootstrap.servers": ",".join(addr(b) for b in BROKERS), "group.id": "faults-g"})
    got = c.committed([TopicPartition(TOPIC, p) for p in range(PARTITIONS)], 30)
    c.close()
    return {tp.partition: tp.offset for tp in got}


def replica_bytes(broker, p):
    d = os.path.join(broker.data, "%s-%d" % (TOPIC, p))
    files = sorted(f for f in os.listdir(d) if f.endswith(".log"))
    return b"".join(open(os.path.join(d, f), "rb").read() for f in files)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("weir")
    ap.add_argument("--cycles", type=int, default=len(FAULTS))
    ap.add_argument("--seed", type=int, default=None)
    ap.add_argument("--hold", type=float, default=5.0, help="seconds each fault lasts")
    ap.add_argument("--report")
    args = ap.parse_args()
    if os.geteuid() != 0:
        print("fault suite: needs root (network namespaces, iptables, tmpfs)")
        sys.exit(1 if os.environ.get("WEIR_REQUIRE_ROOT_TESTS") else 0)
    seed = args.seed if args.seed is not None else random.randrange(1 << 30)
    rng = random.Random(seed)
    work = tempfile.mkdtemp(prefix="weir-faults-")
    net = Network()
    brokers, etcds, load = {}, {}, None
    report = {"seed": seed, "cycles": args.cycles, "faults": collections.Counter()}
    problems = []
    started = time.time()
    try:
        net.up()
        etcds = {i: Etcd(work, i) for i in ETCDS}
        for e in etcds.values():
            e.start()
        brokers = {b: Broker(work, args.weir, b) for b in BROKERS}
        for b in brokers.values():
            b.start()
        # librdkafka's admin client asks one broker who the controller is and, told "none
        # yet", waits for a change that may never come: every broker must know it first.
        def agreed():
            views = [metadata_of(b, topic=False)[:2] for b in BROKERS]
            return all(v == views[0] and v[0] == list(BROKERS) and v[1] in BROKERS
                       for v in views)
        wait("three brokers, each naming the same controller", 60, agreed)
        a = admin()
        a.create_topics([NewTopic(TOPIC, PARTITIONS, 3,
                                  config={"min.insync.replicas": "2"})])[TOPIC].result(30)
        wait("the topic in sync", 60, healthy)
        load = Load()
        load.start()
        time.sleep(2)
        faults = Faults(net, brokers, etcds, rng)
        # Every kind once in each round of len(FAULTS) cycles, in a random order.
        plan = []
        while len(plan) < args.cycles:
            kinds = FAULTS[:]
            rng.shuffle(kinds)
            plan += kinds
        for i, kind in enumerate(plan[:args.cycles]):
            what, heal = faults.inject(kind)
            report["faults"][kind] += 1
            hold = args.hold * rng.uniform(0.6, 1.4)
            if kind == "pause":
                hold = max(hold, SESSION_MS / 1000 + 2)
            time.sleep(hold)
            heal()
            try:
                took = wait("recovery", 90, healthy, step=0.25)
                print("cycle %d: %s (%s) for %.1f s; healthy again %.1f s after healing; %d acked"
                      % (i + 1, kind, what, hold, took, len(load.acked)), flush=True)
            except TimeoutError:
                problems.append("cycle %d: %s (%s): the cluster did not recover within 90 s"
                                % (i + 1, kind, what))
                print(problems[-1], flush=True)
                break
        load.finish()
        # Settled: every replica has what its leader has.
        wait("settled", 60, healthy)
        time.sleep(3)
        log, ends = read_everything()
        acked = load.acked
        lost = moved = 0
        samples = []
        values = collections.Counter(log.values())
        # librdkafka acknowledges some records without an offset (a retry the broker
        # answered as a duplicate of what it holds): those must be in the log somewhere.
        no_offset = [(n, s) for (n, s, p, off) in acked if off is None or off < 0]
        for n, s in no_offset:
            if values["P%d-%d" % (n, s)] == 0:
                lost += 1
                samples.append("P%d-%d acknowledged (without an offset) is not in the log" % (n, s))
        for (n, s, p, off) in acked:
            if off is None or off < 0:
                continue
            v = log.get((p, off))
            if v is None:
                lost += 1
            elif v != "P%d-%d" % (n, s):
                moved += 1
            if v != "P%d-%d" % (n, s) and len(samples) < 10:
                samples.append("P%d-%d acknowledged at %d/%d, which holds %s" % (n, s, p, off, v))
        duplicated = sum(c - 1 for c in values.values() if c > 1)
        where = collections.defaultdict(list)
        for k, v in log.items():
            if values[v] > 1:
                where[v].append(k)
        samples += ["%s twice, at %s" % (v, sorted(ks)) for v, ks in list(where.items())[:10]]
        out_of_order = 0
        for p in range(PARTITIONS):
            last = {}
            for off in sorted(o for (q, o) in log if q == p):
                n, s = log[(p, off)].split("-")
                if s and int(s) <= last.get(n, -1):
                    out_of_order += 1
                last[n] = int(s)
        differ = []
        for p in range(PARTITIONS):
            copies = {b: replica_bytes(brokers[b], p) for b in BROKERS}
            if len(set(copies.values())) != 1:
                differ.append("%d (%s)" % (p, ", ".join("broker %d: %d bytes" % (b, len(c))
                                                        for b, c in copies.items())))
        committed = committed_offsets()
        group_lost = [p for p, off in load.commits.items() if committed.get(p, -1) < off]
        report.update({
            "records_acknowledged": len(acked), "records_checked": len(log),
            "acknowledged_without_offset": len(no_offset),
            "lost": lost, "moved": moved, "duplicated": duplicated,
            "out_of_order": out_of_order, "replicas_differ": differ,
            "group_offsets_lost": group_lost, "produce_errors": dict(load.failed),
            "samples": samples,
            "seconds": round(time.time() - started),
        })
        if lost or moved or duplicated or out_of_order:
            with open(os.path.join(work, "acked.json"), "w") as f:
                json.dump(acked, f)
            problems.append("%d lost, %d moved, %d duplicated, %d out of order"
                            % (lost, moved, duplicated, out_of_order))
        if differ:
            problems.append("replicas differ: partitions " + "; ".join(differ))
        if group_lost:
            problems.append("committed group offsets went back for partitions %s" % group_lost)
        if len(acked) < 1000:
            problems.append("only %d records acknowledged: the load did not run" % len(acked))
    except Exception as e:
        problems.append("harness: %r" % e)
    finally:
        if load is not None:
            load.stop.set()
        for b in brokers.values():
            b.signal(signal.SIGCONT)
            b.kill()
        for e in etcds.values():
            if e.proc and e.proc.poll() is None:
                e.kill()
        for b in brokers.values():
            if problems:
                try:
                    shutil.copy(b.log_path, work)
                except OSError:
                    pass
            if not (problems and os.environ.get("KEEP")):
                b.umount()
        net.down()
    report["faults"] = dict(report["faults"])
    report["problems"] = problems
    print(json.dumps(report, indent=1))
    if args.report:
        with open(args.report, "w") as f:
            json.dump(report, f, indent=1)
    if problems:
        print("fault suite: FAILED (logs in %s)" % work)
        sys.exit(1)
    shutil.rmtree(work, ignore_errors=True)
    print("fault suite: %d faults, %d acknowledged records, 0 lost, 0 duplicated, 0 moved; "
          "replicas identical; committed offsets kept (seed %d)"
          % (args.cycles, report["records_acknowledged"], seed))


if __name__ == "__main__":
    main()
