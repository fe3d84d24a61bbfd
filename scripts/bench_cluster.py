#!/usr/bin/env python3
"""A three-broker cluster on one machine, measured (issue 15), all in one run:

  W1:        `weir bench produce` of 100-byte records, acks=1, into 8 partitions, against
             one `weir serve` and against three brokers on etcd (RF 1, the partitions
             spread over them), each round beside the ceiling's minimal broker;
  create:    from CreateTopics (6 partitions) to every broker's own Metadata naming a live
             leader for every partition, over N topics;
  failover:  `kill -9` of the controller until another broker's Metadata names a new one,
             over N runs, at etcd.session.timeout.ms=SESSION_MS.

    bench_cluster.py WEIR CEILING     env: ROUNDS (3) W1_RECORDS (2000000) N (10) SESSION_MS (3000)
Prints the BENCHMARKS.md section on stdout.
"""
import os
import socket
import statistics
import struct
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(ROOT, "tests", "cluster"))
import bench_workloads as bw  # noqa: E402
import cluster_suite as cs  # noqa: E402

ROUNDS = int(os.environ.get("ROUNDS", "3"))
RECORDS = int(os.environ.get("W1_RECORDS", "2000000"))
N = int(os.environ.get("N", "10"))
cs.SESSION_MS = int(os.environ.get("SESSION_MS", "3000"))
med = statistics.median


def metadata(addr, topics):
    """Metadata v1 from exactly this broker: (controller, {topic: [leader per partition]})."""
    host, port = addr.rsplit(":", 1)
    body = struct.pack(">i", len(topics))
    for t in topics:
        body += struct.pack(">h", len(t)) + t.encode()
    cid = b"bench-cluster"
    req = struct.pack(">hhih", 3, 1, 1, len(cid)) + cid + body
    with socket.create_connection((host, int(port)), 2) as s:
        s.sendall(struct.pack(">i", len(req)) + req)
        size = struct.unpack(">i", recv(s, 4))[0]
        buf = recv(s, size)
    r = Reader(buf)
    r.i32()  # correlation id
    for _ in range(r.i32()):  # brokers
        r.i32(); r.string(); r.i32(); r.nullable_string()
    controller = r.i32()
    out = {}
    for _ in range(r.i32()):
        r.i16()
        name = r.string()
        r.i8()
        leaders = []
        for _ in range(r.i32()):
            r.i16(); r.i32()
            leaders.append(r.i32())
            for _ in range(r.i32()):
                r.i32()
            for _ in range(r.i32()):
                r.i32()
        out[name] = leaders
    return controller, out


def recv(s, n):
    b = b""
    while len(b) < n:
        chunk = s.recv(n - len(b))
        if not chunk:
            raise EOFError
        b += chunk
    return b


class Reader:
    def __init__(self, b):
        self.b, self.o = b, 0

    def take(self, fmt):
        v = struct.unpack_from(fmt, self.b, self.o)[0]
        self.o += struct.calcsize(fmt)
        return v

    def i8(self):
        return self.take(">b")

    def i16(self):
        return self.take(">h")

    def i32(self):
        return self.take(">i")

    def string(self):
        n = self.i16()
        s = self.b[self.o:self.o + n].decode()
        self.o += n
        return s

    def nullable_string(self):
        n = self.i16()
        if n < 0:
            return None
        s = self.b[self.o:self.o + n].decode()
        self.o += n
        return s


def cpu(proc):
    return bw.cpu_of(proc.pid)


def start_cluster(work):
    etcd = cs.Etcd(work)
    brokers = {i: cs.Broker(work, etcd, i) for i in (1, 2, 3)}
    for b in brokers.values():
        b.start(wait_listening=False)
    for b in brokers.values():
        cs.wait("listening", 30, b.listening)
    cs.wait("three brokers", 20, lambda: all(
        metadata(b.addr, [])[0] >= 0 for b in brokers.values()))
    return etcd, brokers


def stop_cluster(etcd, brokers):
    for b in brokers.values():
        if b.proc.poll() is None:
            b.proc.kill()
            b.proc.wait()
    etcd.stop()


def w1_cluster(brokers, topic):
    boot = brokers[1].addr
    c0 = sum(cpu(b.proc) for b in brokers.values())
    r = bw.weir("bench", "produce", "--bootstrap", boot, "--topic", topic, "--records", str(RECORDS),
                "--record-size", "100", "--acks", "1", "--partitions", "8", "--json")
    import json
    v = json.loads(r.stdout.strip().splitlines()[-1])
    v["broker_cpu_seconds"] = sum(cpu(b.proc) for b in brokers.values()) - c0
    return v


def main():
    runs = {"single": [], "cluster": [], "ceiling": []}
    for rnd in range(1, ROUNDS + 1):
        bw.log("W1 round %d of %d" % (rnd, ROUNDS))
        work = tempfile.mkdtemp(prefix="weir-bench-single-")
        serve = bw.Serve(work)
        runs["single"].append(bw.bench(serve, "produce", "--topic", "w1", "--records", str(RECORDS),
                                       "--record-size", "100", "--acks", "1", "--partitions", "8"))
        serve.stop()
        subprocess.run(["rm", "-rf", work])
        work = tempfile.mkdtemp(prefix="weir-bench-cluster-")
        etcd, brokers = start_cluster(work)
        runs["cluster"].append(w1_cluster(brokers, "w1"))
        stop_cluster(etcd, brokers)
        subprocess.run(["rm", "-rf", work])
        runs["ceiling"].append(bw.ceiling(100, 16384, 5))

    bw.log("create → usable on every broker, %d topics" % N)
    work = tempfile.mkdtemp(prefix="weir-bench-cluster-")
    etcd, brokers = start_cluster(work)
    addrs = [b.addr for b in brokers.values()]
    answered, usable = [], []
    for i in range(N):
        topic = "usable-%d" % i
        t0 = time.time()
        r = bw.weir("topics", "create", "--bootstrap", addrs[i % 3], "--topic", topic, "--partitions", "6")
        answered.append(time.time() - t0)
        if r.returncode != 0:
            sys.exit("create: %s" % r.stderr)
        while True:
            views = [metadata(a, [topic])[1].get(topic, []) for a in addrs]
            if all(len(v) == 6 and all(l >= 0 for l in v) for v in views):
                break
            if time.time() - t0 > 30:
                sys.exit("topic %s not usable on every broker within 30 s" % topic)
            time.sleep(0.002)
        usable.append(time.time() - t0)

    bw.log("controller failover after kill -9, %d runs" % N)
    failovers = []
    for i in range(N):
        controller = next(metadata(a, [])[0] for a in addrs)
        victim = brokers[controller]
        others = [b.addr for k, b in brokers.items() if k != controller]
        victim.kill()
        t0 = time.time()
        while True:
            try:
                now = metadata(others[i % 2], [])[0]
            except OSError:
                now = -1
            if now not in (-1, controller):
                break
            if time.time() - t0 > cs.SESSION_MS / 1000 * 5:
                sys.exit("no new controller within %d ms" % (cs.SESSION_MS * 5))
            time.sleep(0.01)
        failovers.append(time.time() - t0)
        victim.start()
        cs.wait("back", 30, lambda: all(metadata(a, [])[0] >= 0 for a in addrs))
    stop_cluster(etcd, brokers)
    subprocess.run(["rm", "-rf", work])

    ceil = [c["records_per_sec"] for c in runs["ceiling"]]
    out = ["## A cluster of three brokers on one machine (issue 15)", ""]
    out.append("Command: `./scripts/bench-cluster.sh` · machine: %s, %d cores, one etcd "
               "3.4 and every broker on it · %s" % (bw.platform.machine(), os.cpu_count(),
                                                   time.strftime("%Y-%m-%d")))
    out.append("")
    out.append("W1: `weir bench produce` of %d records of 100 B, acks=1, 8 partitions, %d rounds; "
               "each round runs one broker, then three on etcd (RF 1, the partitions spread), "
               "then the ceiling's minimal broker. Ratios are to the ceiling of the same round; "
               "broker CPU is that of every broker process." % (RECORDS, ROUNDS))
    out.append("")
    out.append("| brokers | records/s | ÷ ceiling (each round) | client CPU/record | broker CPU/record |")
    out.append("|---|---:|---:|---:|---:|")
    for label, name in (("single", "1 (no etcd)"), ("cluster", "3 on etcd")):
        vs = runs[label]
        ratios = [v["records_per_sec"] / c for v, c in zip(vs, ceil)]
        out.append("| %s | %.0f | %.2f (%s) | %.0f ns | %.0f ns |" % (
            name, med(v["records_per_sec"] for v in vs), med(ratios),
            " ".join("%.2f" % r for r in ratios),
            med(v["cpu_seconds"] * 1e9 / RECORDS for v in vs),
            med(v["broker_cpu_seconds"] * 1e9 / RECORDS for v in vs)))
    out.append("")
    out.append("Ceiling: median %.0f rec/s (%s)." % (med(ceil), ", ".join("%.0f" % c for c in ceil)))
    out.append("")
    ms = lambda xs: "p50 %.0f ms, max %.0f ms" % (med(xs) * 1000, max(xs) * 1000)  # noqa: E731
    out.append("| what | %d runs |" % N)
    out.append("|---|---|")
    out.append("| CreateTopics (6 partitions) answered | %s |" % ms(answered))
    out.append("| … until every broker's own Metadata names a live leader for every partition | %s |" % ms(usable))
    out.append("| `kill -9` of the controller until another broker's Metadata names a new one "
               "(etcd.session.timeout.ms=%d) | %s |" % (cs.SESSION_MS, ms(failovers)))
    out.append("")
    out.append("A failover waits for the dead controller's lease to lapse in etcd, so it takes "
               "about `etcd.session.timeout.ms` (default 18000, Kafka's ZooKeeper session); a "
               "broker stopped with SIGTERM revokes its lease and is replaced at once.")
    print("\n".join(out))


if __name__ == "__main__":
    # Run as a script; bench_replication.py imports the cluster helpers alone.
    cs.WEIR = bw.WEIR = sys.argv[1]
    bw.CEILING = sys.argv[2]
    main()
