#!/usr/bin/env python3
"""What creating a topic costs as topics accumulate: creates N topics of one partition,
one CreateTopics request each (kafka-python's admin client), against a started
`weir serve`, and times every request. Prints a markdown section for BENCHMARKS.md
(scripts/bench-topics.sh puts it there) comparing the 100th topic with the N-th, beside
two references measured in the same run on the same file system: one fdatasync of a
small append (what a journal line costs), and rewriting and fsyncing a topics file as
large as N topics make it (what every creation cost when the whole file was rewritten).

    bench_topics.py BOOTSTRAP DATA_DIR [N]
"""
import datetime
import json
import os
import platform
import statistics
import sys
import time

from kafka.admin import KafkaAdminClient, NewTopic

BOOTSTRAP, DATA = sys.argv[1], sys.argv[2]
N = int(sys.argv[3]) if len(sys.argv) > 3 else 10_000
WINDOW = 50  # requests around each mark


def fdatasync_ms(path, rounds=200):
    """One 100-byte append and fdatasync, as a journal line is written."""
    times = []
    with open(path, "ab") as f:
        for _ in range(rounds):
            t = time.perf_counter()
            f.write(b"x" * 99 + b"\n")
            f.flush()
            os.fdatasync(f.fileno())
            times.append((time.perf_counter() - t) * 1e3)
    os.remove(path)
    return statistics.median(times)


def rewrite_ms(path, topics, rounds=20):
    """The whole topics file rewritten atomically (write, fsync, rename, fsync the
    directory), as each creation did before the journal."""
    body = {"version": 1, "topics": {
        f"bench-{i}": {"id": "AAAAAAAAAAAAAAAAAAAAAA", "partitions": 1, "configs": {}}
        for i in range(topics)}}
    data = json.dumps(body, indent=2).encode()
    times = []
    for _ in range(rounds):
        t = time.perf_counter()
        tmp = path + ".tmp"
        with open(tmp, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.rename(tmp, path)
        d = os.open(os.path.dirname(path), os.O_RDONLY)
        os.fsync(d)
        os.close(d)
        times.append((time.perf_counter() - t) * 1e3)
    os.remove(path)
    return statistics.median(times), len(data)


def cpu():
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown CPU"


def main():
    admin = KafkaAdminClient(bootstrap_servers=BOOTSTRAP, request_timeout_ms=60_000)
    latencies = []
    started = time.perf_counter()
    for i in range(1, N + 1):
        t = time.perf_counter()
        admin.create_topics([NewTopic(f"bench-{i}", 1, 1)])
        latencies.append((time.perf_counter() - t) * 1e3)
        if i % 1000 == 0:
            print(f"{i} topics, {time.perf_counter() - started:.0f} s", file=sys.stderr)
    admin.close()

    def around(k):
        lo = max(0, k - WINDOW // 2)
        w = sorted(latencies[lo:lo + WINDOW])
        return statistics.median(w), w[int(len(w) * 0.9)]

    first = around(100)
    last = around(N - WINDOW // 2)
    sync = fdatasync_ms(os.path.join(DATA, "bench-fdatasync"))
    rewrite, size = rewrite_ms(os.path.join(DATA, "bench-rewrite.json"), N)
    ncpu = os.cpu_count()
    pid = os.environ.get("BROKER_PID")
    files = ""
    if pid:
        held = len(os.listdir(f"/proc/{pid}/fd"))
        limit = next(l.split()[3] for l in open(f"/proc/{pid}/limits")
                     if l.startswith("Max open files"))
        files = (f"\n\nAfter the {N:,}th topic the broker held {held:,} open files, under a "
                 f"limit of {int(limit):,}\n(`prlimit --nofile`): a partition's segment files "
                 f"are opened through the log manager's\nbounded cache, not held by the "
                 f"partition.")
    fs = "unknown"
    try:
        best = ""
        for line in open("/proc/mounts"):
            dev, mnt, kind = line.split()[:3]
            if os.path.abspath(DATA).startswith(mnt) and len(mnt) > len(best):
                best, fs = mnt, kind
    except OSError:
        pass
    print(f"""## Creating topics: the 100th against the {N:,}th (weir serve)

Command: `./scripts/bench-topics.sh` · machine: {ncpu} vCPU, {cpu()}, {fs} on a virtual disk · \
{os.environ.get("BUILD", "release build")} · {datetime.date.today()}

{N:,} topics of one partition, created one CreateTopics request at a time with
kafka-python {__import__("kafka").__version__}'s admin client, each request timed from the
client. Medians and 90th percentiles of the {WINDOW} requests around each mark:

| creating | median | p90 |
|---|---:|---:|
| the 100th topic | {first[0]:.2f} ms | {first[1]:.2f} ms |
| the {N:,}th topic | {last[0]:.2f} ms | {last[1]:.2f} ms |

The {N:,}th costs {last[0] / first[0]:.2f}× the 100th; all {N:,} creations took
{sum(latencies) / 1e3:.0f} s. References, same run, same file system: one fdatasync of a
100-byte append (a journal line) {sync:.2f} ms; rewriting the whole topics file as
{N:,} topics make it ({size / 1024:.0f} KiB: write, fsync, rename, fsync the directory),
what every creation cost before the journal, {rewrite:.2f} ms.{files}""")


main()
