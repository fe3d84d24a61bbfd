#!/usr/bin/env python3
"""Replication measured (issue 16), three brokers on one etcd, all in one run:

  throughput: `weir bench produce` into 8 partitions, RF=3 with acks=all
              (min.insync.replicas=2) beside RF=1 with acks=1, on the same three brokers in
              the same round, for 100 B and 1 KiB records; ratios per round, and the
              produce request p99 (send to acknowledgement of each Produce);
  rejoin:     one broker killed, REJOIN_MB of 1 KiB records written to an RF=3 topic while
              it is down, then the time from its restart until it is back in the ISR of
              every partition.

  failover:   the leader of a partition of three replicas killed with -9, until another
              broker names a new one, N runs at etcd.session.timeout.ms 2000 and 3000.

    bench_replication.py WEIR     env: ROUNDS (3) SMALL (2000000) LARGE (400000) REJOIN_MB (1024)
                                       N (10)
Prints the BENCHMARKS.md section on stdout.
"""
import json
import os
import statistics
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
from bench_cluster import metadata, start_cluster, stop_cluster  # noqa: E402

WEIR = sys.argv[1]
cs.WEIR = bw.WEIR = WEIR
ROUNDS = int(os.environ.get("ROUNDS", "3"))
SIZES = {100: int(os.environ.get("SMALL", "2000000")), 1024: int(os.environ.get("LARGE", "400000"))}
REJOIN_MB = int(os.environ.get("REJOIN_MB", "1024"))
N = int(os.environ.get("N", "10"))
FAILOVER_SESSIONS = [2000, 3000]
med = statistics.median


def produce(boot, topic, records, size, acks):
    r = bw.weir("bench", "produce", "--bootstrap", boot, "--topic", topic, "--records", str(records),
                "--record-size", str(size), "--acks", acks, "--partitions", "8", "--json")
    return json.loads(r.stdout.strip().splitlines()[-1])


def create(boot, topic, rf):
    bw.weir("topics", "create", "--bootstrap", boot, "--topic", topic, "--partitions", "8",
            "--replication-factor", str(rf), "--config", "min.insync.replicas=%d" % min(rf, 2))


def leader_of(addr, topic):
    """Partition 0's leader as broker `addr` itself says (-1: none, or no answer)."""
    try:
        return metadata(addr, [topic])[1].get(topic, [-1])[0]
    except (OSError, IndexError, ValueError):
        return -1


def isr_sizes(addr, topic):
    out = bw.weir("topics", "describe", "--bootstrap", addr, "--topic", topic, "--json")
    d = json.loads(out.stdout)
    return [len(p["isr"]) for p in d[0]["partitions"]]


def main():
    runs = {(size, rf): [] for size in SIZES for rf in (1, 3)}
    for rnd in range(1, ROUNDS + 1):
        work = tempfile.mkdtemp(prefix="weir-bench-repl-")
        etcd, brokers = start_cluster(work)
        boot = brokers[1].addr
        for size, records in SIZES.items():
            for rf, acks in ((1, "1"), (3, "all")):
                bw.log("round %d: %d B, RF=%d acks=%s" % (rnd, size, rf, acks))
                topic = "r%d-%d-%d" % (rnd, size, rf)
                create(boot, topic, rf)
                runs[(size, rf)].append(produce(boot, topic, records, size, acks))
        stop_cluster(etcd, brokers)
        subprocess.run(["rm", "-rf", work])

    bw.log("rejoin after %d MB written while a follower was down" % REJOIN_MB)
    work = tempfile.mkdtemp(prefix="weir-bench-repl-")
    etcd, brokers = start_cluster(work)
    boot = brokers[1].addr
    create(boot, "rejoin", 3)
    victim = brokers[3]
    victim.kill()
    alive = brokers[1].addr
    cs.wait("broker 3 out of every ISR", 60, lambda: all(n == 2 for n in isr_sizes(alive, "rejoin")))
    written = produce(alive, "rejoin", REJOIN_MB * 1024, 1024, "all")
    t0 = time.time()
    victim.start()
    cs.wait("back in every ISR", 600, lambda: all(n == 3 for n in isr_sizes(alive, "rejoin")),
            step=0.05)
    rejoin = time.time() - t0
    stop_cluster(etcd, brokers)
    subprocess.run(["rm", "-rf", work])

    failover = {}
    for session_ms in FAILOVER_SESSIONS:
        bw.log("a partition's leader killed, etcd.session.timeout.ms=%d, %d runs" % (session_ms, N))
        cs.SESSION_MS = session_ms
        work = tempfile.mkdtemp(prefix="weir-bench-repl-")
        etcd, brokers = start_cluster(work)
        create(brokers[1].addr, "failover", 3)
        times = []
        for i in range(N):
            leader = leader_of(brokers[1 + i % 3].addr, "failover")
            while leader < 0:
                time.sleep(0.05)
                leader = leader_of(brokers[1 + i % 3].addr, "failover")
            victim = brokers[leader]
            other = next(b.addr for k, b in brokers.items() if k != leader)
            victim.kill()
            t0 = time.time()
            while leader_of(other, "failover") in (-1, leader):
                if time.time() - t0 > session_ms / 1000 * 5:
                    sys.exit("no new leader within %d ms" % (session_ms * 5))
                time.sleep(0.01)
            times.append(time.time() - t0)
            victim.start()
            cs.wait("back in the ISR", 60,
                    lambda: all(n == 3 for n in isr_sizes(brokers[1].addr, "failover")))
        stop_cluster(etcd, brokers)
        subprocess.run(["rm", "-rf", work])
        failover[session_ms] = times

    out = ["## Replication: RF=3 acks=all beside RF=1 acks=1 (issue 16)", ""]
    out.append("Command: `./scripts/bench-replication.sh` · machine: %s, %d cores, one etcd 3.4, "
               "three brokers and the client on it · %s" % (bw.platform.machine(), os.cpu_count(),
                                                         time.strftime("%Y-%m-%d")))
    out.append("")
    out.append("`weir bench produce` into 8 partitions on the same three brokers, %d rounds; each "
               "round writes RF=1 with acks=1, then RF=3 with acks=all (min.insync.replicas=2), "
               "for each record size. The ratio is RF=3's records/s over RF=1's in the same "
               "round; p99 is that of the Produce requests, send to acknowledgement." % ROUNDS)
    out.append("")
    out.append("| record | records | RF=1 acks=1 rec/s | RF=3 acks=all rec/s | RF=3 ÷ RF=1 (each round) "
               "| produce p99 RF=1 | produce p99 RF=3 |")
    out.append("|---|---:|---:|---:|---:|---:|---:|")
    for size, records in SIZES.items():
        one, three = runs[(size, 1)], runs[(size, 3)]
        ratios = [b["records_per_sec"] / a["records_per_sec"] for a, b in zip(one, three)]
        out.append("| %s | %d | %.0f | %.0f | %.2f (%s) | %.1f ms | %.1f ms |" % (
            "100 B" if size == 100 else "1 KiB", records,
            med(v["records_per_sec"] for v in one), med(v["records_per_sec"] for v in three),
            med(ratios), " ".join("%.2f" % r for r in ratios),
            med(v["request_latency_ms"]["p99"] for v in one),
            med(v["request_latency_ms"]["p99"] for v in three)))
    out.append("")
    out.append("Rejoin: broker 3 killed; %d MB of 1 KiB records (RF=3, acks=all, %.0f rec/s with "
               "two replicas in sync) written while it was down; from its restart until it is "
               "in the ISR of all 8 partitions again: **%.1f s** (it fetched what it missed from "
               "its log end on, not a full copy)." % (REJOIN_MB, written["records_per_sec"], rejoin))
    out.append("")
    out.append("Failover: the leader of partition 0 (RF=3) killed with -9, until another broker's "
               "own Metadata names a new leader, %d runs per setting:" % N)
    out.append("")
    out.append("| etcd.session.timeout.ms | without a leader |")
    out.append("|---:|---|")
    for session_ms, xs in failover.items():
        out.append("| %d | p50 %.1f s, max %.1f s |" % (session_ms, med(xs), max(xs)))
    print("\n".join(out))


if __name__ == "__main__":
    main()
