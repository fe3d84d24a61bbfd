#!/usr/bin/env python3
"""The workloads of BENCHMARKS.md, each measured beside this machine's physical ceiling in
the same run, round by round (the machine is shared and noisy: medians of the rounds).

  W1  100-byte records, no compression, acks=1, 1 and 8 partitions: `weir bench produce`
      (Weir's own producer); kcat -P -l FILE (librdkafka) with the broker's CPU share; the
      ceiling's minimal broker (16 KiB batches, 5 in flight).
  W2  ~1 KB JSON events (gen_events.py), lz4, acks=1; ceiling with lz4.
  W3  1 KiB records, acks=all, fsync before acknowledging (topic flush.messages=1),
      1 and 5 requests in flight, the producer's buffer.memory bounded to the window;
      ceiling with fdatasync per batch.
  W4  consume from the beginning of one partition, page cache warm: 100 B and 1 KiB.
  W5  end to end at half of W1's rate (acks=1), and at half of W3's (fsync).

  W6  1,000 partitions, 100 producers; then start-up after a clean shutdown and after
      kill -9 (recovering every unflushed active segment, W4's 1 GB ones among them).

Not measured yet: W4 with a cold page cache.

    bench_workloads.py WEIR CEILING [ROUNDS]
env: W1_RECORDS (3000000), W4_MB (1024 per record size), W5_SECONDS (10)
"""
import json
import os
import platform
import re
import socket
import statistics
import subprocess
import sys
import tempfile
import time

# As a script: WEIR CEILING; scripts that import this module set them.
WEIR = sys.argv[1] if len(sys.argv) > 1 else None
CEILING = sys.argv[2] if len(sys.argv) > 2 else None
ROUNDS = int(sys.argv[3]) if len(sys.argv) > 3 else 3
W1_RECORDS = int(os.environ.get("W1_RECORDS", "3000000"))
W4_MB = int(os.environ.get("W4_MB", "1024"))
W5_SECONDS = float(os.environ.get("W5_SECONDS", "10"))
HERE = os.path.dirname(os.path.abspath(__file__))
SHARED_BENCH = os.path.join(HERE, "..", "..", "shared", "bench")
TICK = os.sysconf("SC_CLK_TCK")


def log(*a):
    print(*a, file=sys.stderr, flush=True)


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def cpu_of(pid):
    with open("/proc/%d/stat" % pid) as f:
        rest = f.read().rsplit(")", 1)[1].split()
    return (int(rest[11]) + int(rest[12])) / TICK


def peak_rss_mb(pid):
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    return float("nan")


class Serve:
    def __init__(self, work):
        self.work = work
        self.port = free_port()
        self.bootstrap = "127.0.0.1:%d" % self.port
        self.starts = 0
        self.start()

    def start(self):
        """Starts weir serve; returns the seconds until it accepts clients (the listener is
        bound before the logs are loaded, so the log line says when it is ready, not a
        successful connect)."""
        self.starts += 1
        path = os.path.join(self.work, "serve-%d.log" % self.starts)
        self.log = open(path, "w")
        t0 = time.time()
        self.proc = subprocess.Popen(
            [WEIR, "serve", "--listen", self.bootstrap, "--data-dir",
             os.path.join(self.work, "data")],
            stdout=self.log, stderr=subprocess.STDOUT)
        while time.time() - t0 < 600:
            with open(path) as f:
                if "accepting Kafka clients" in f.read():
                    return time.time() - t0
            if self.proc.poll() is not None:
                sys.exit("weir serve exited: %s" % open(path).read()[-2000:])
            time.sleep(0.01)
        sys.exit("weir serve did not start")

    def kill9(self):
        self.proc.kill()
        self.proc.wait(30)

    def cpu(self):
        return cpu_of(self.proc.pid)

    def stop(self):
        """SIGTERM and wait; returns the seconds the clean shutdown took."""
        t0 = time.time()
        self.proc.terminate()
        self.proc.wait(900)
        return time.time() - t0


def weir(*args, check=True):
    r = subprocess.run([WEIR, *args], capture_output=True, text=True)
    if check and r.returncode != 0:
        sys.exit("weir %s failed: %s" % (" ".join(args), r.stderr.strip()[-2000:]))
    return r


def bench(serve, *args):
    """`weir bench ... --json`, with the broker's CPU seconds over the run."""
    c0 = serve.cpu()
    r = weir("bench", *args, "--bootstrap", serve.bootstrap, "--json")
    v = json.loads(r.stdout.strip().splitlines()[-1])
    v["broker_cpu_seconds"] = serve.cpu() - c0
    return v


def create(serve, topic, partitions=1, *configs):
    args = ["topics", "create", "--bootstrap", serve.bootstrap, "--topic", topic,
            "--partitions", str(partitions)]
    for c in configs:
        args += ["--config", c]
    weir(*args)


def ceiling(rec, batch, inflight, secs=5, data=None, lz4=False, fsync=0, work="/tmp"):
    port = free_port()
    sink = os.path.join(work, "ceiling.log")
    server = subprocess.Popen([CEILING, "mb-server", "127.0.0.1:%d" % port, sink, str(fsync)],
                              stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    time.sleep(0.3)
    args = [CEILING, "mb-client", "127.0.0.1:%d" % port, str(rec), str(batch), str(inflight),
            str(secs)]
    if data or lz4:
        args += [data or "-", "lz4" if lz4 else "none"]
    out = subprocess.run(args, capture_output=True, text=True).stdout
    server.terminate()
    server.wait(10)
    os.unlink(sink)
    line = [l for l in out.splitlines() if l.startswith("RESULT mb")][-1]
    fields = dict(kv.split("=", 1) for kv in line.split()[2:])
    return {"records_per_sec": float(fields["recs/s"]),
            "p99_ms": float(fields["lat_p99_us"]) / 1000.0}


def kcat(serve, topic, path, n):
    """kcat -P -l FILE: wall-clock records/s, kcat's and the broker's CPU seconds."""
    c0 = serve.cpu()
    t0 = time.time()
    p = subprocess.Popen(["kcat", "-P", "-b", serve.bootstrap, "-t", topic, "-p", "0", "-l",
                          "-X", "acks=1", "-X", "linger.ms=5", "-X", "batch.size=16384", path],
                         stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    _, status, ru = os.wait4(p.pid, 0)
    dt = time.time() - t0
    if status != 0:
        sys.exit("kcat failed: %s" % p.stderr.read().decode()[-500:])
    return {"records_per_sec": n / dt, "seconds": dt,
            "kcat_cpu_seconds": ru.ru_utime + ru.ru_stime,
            "broker_cpu_seconds": serve.cpu() - c0}


def med(xs):
    return statistics.median(xs) if xs else float("nan")


def main():
    work = tempfile.mkdtemp(prefix="weir-workloads-")
    lines100 = os.path.join(work, "lines100.txt")
    with open(lines100, "w") as f:
        row = ("x" * 99) + "\n"
        f.write(row * W1_RECORDS)
    events = os.path.join(work, "events.json")
    subprocess.run([sys.executable, os.path.join(SHARED_BENCH, "gen_events.py"), events, "300"],
                   check=True, capture_output=True)
    n_events = sum(1 for _ in open(events, "rb"))
    serve = Serve(work)
    r = {k: [] for k in (
        "w1_1", "w1_8", "w1_kcat", "w1_ceiling", "w2", "w2_ceiling", "w3_1", "w3_5",
        "w3_1_ceiling", "w3_5_ceiling", "w4_100", "w4_1k", "w5", "w5_fsync")}
    broker_rss_w1 = None

    # W4's partitions are written once, then read in every round.
    w4 = {}
    for size in (100, 1024):
        topic = "w4-%d" % size
        n = W4_MB * 1024 * 1024 // size
        log("W4: writing %d records of %d B" % (n, size))
        bench(serve, "produce", "--topic", topic, "--records", str(n), "--record-size", str(size),
              "--acks", "1", "--partitions", "1", "--linger-ms", "10", "--batch-size", "65536")
        w4[size] = (topic, n)

    for rnd in range(1, ROUNDS + 1):
        log("round %d of %d" % (rnd, ROUNDS))
        for parts, key in ((1, "w1_1"), (8, "w1_8")):
            r[key].append(bench(serve, "produce", "--topic", "w1-%d-%d" % (parts, rnd),
                                "--records", str(W1_RECORDS), "--record-size", "100",
                                "--acks", "1", "--partitions", str(parts)))
        if broker_rss_w1 is None:
            broker_rss_w1 = peak_rss_mb(serve.proc.pid)
        create(serve, "w1k-%d" % rnd)
        r["w1_kcat"].append(kcat(serve, "w1k-%d" % rnd, lines100, W1_RECORDS))
        r["w1_ceiling"].append(ceiling(100, 16384, 5, work=work))

        r["w2"].append(bench(serve, "produce", "--topic", "w2-%d" % rnd, "--records",
                             str(n_events), "--payload-file", events, "--compression", "lz4",
                             "--acks", "1"))
        r["w2_ceiling"].append(ceiling(1024, 16384, 5, data=events, lz4=True, work=work))

        for inflight in (1, 5):
            topic = "w3-%d-%d" % (inflight, rnd)
            create(serve, topic, 1, "flush.messages=1")
            r["w3_%d" % inflight].append(bench(
                serve, "produce", "--topic", topic, "--records", "30000", "--record-size",
                "1024", "--acks", "all", "--property",
                "max.in.flight.requests.per.connection=%d" % inflight,
                # The producer's queue bounded to about the requests in flight, as the
                # ceiling's client keeps a fixed window: latency is then the broker's
                # (append, fsync, ack), not time spent waiting in a full buffer.memory.
                "--property", "buffer.memory=%d" % (16384 * (inflight + 1))))
            r["w3_%d_ceiling" % inflight].append(
                ceiling(1024, 16384, inflight, fsync=1, work=work))

        for size, key in ((100, "w4_100"), (1024, "w4_1k")):
            topic, n = w4[size]
            r[key].append(bench(serve, "consume", "--topic", topic, "--records", str(n)))

        rate = 0.5 * med([x["records_per_sec"] for x in r["w1_1"]])
        r["w5"].append(bench(serve, "e2e", "--topic", "w5-%d" % rnd, "--rate", "%.0f" % rate,
                             "--seconds", str(W5_SECONDS), "--acks", "1"))
        create(serve, "w5f-%d" % rnd, 1, "flush.messages=1")
        frate = 0.5 * med([x["records_per_sec"] for x in r["w3_5"]])
        r["w5_fsync"].append(bench(serve, "e2e", "--topic", "w5f-%d" % rnd, "--rate",
                                   "%.0f" % frate, "--seconds", str(W5_SECONDS), "--acks", "all",
                                   "--record-size", "1024"))
    # W6: many partitions and many producers against the 8-partition W1 figure.
    log("W6: 1,000 partitions, 100 producers")
    # Three runs into the same topic, the median reported as for the other workloads; the
    # first one also pays for creating the 1,000 partitions' files and is shown apart.
    r["w6"] = [bench(serve, "produce", "--topic", "w6", "--records", str(W1_RECORDS),
                     "--record-size", "100", "--acks", "1", "--partitions", "1000",
                     "--producers", "100") for _ in range(3)]
    broker_rss_w6 = peak_rss_mb(serve.proc.pid)
    # Disk use, not apparent size: index files are preallocated sparse.
    data_gb = int(subprocess.run(["du", "-sk", os.path.join(work, "data")], capture_output=True,
                                 text=True).stdout.split()[0]) / 1e6
    partitions = sum(1 for d in os.listdir(os.path.join(work, "data")) if "-" in d)
    # Start-up after a clean shutdown, then recovery after kill -9 (no flush since the
    # writes: with Kafka's defaults the recovery point moves only at a roll, so every
    # active segment is scanned, among them W4's 1 GB ones).
    first_stop = serve.stop()
    clean_start = serve.start()
    serve.kill9()
    crash_start = serve.start()
    recovery_log = open(os.path.join(work, "serve-%d.log" % serve.starts)).read()
    m = re.search(r"recovered_segments=(\d+)", recovery_log)
    recovered = int(m.group(1)) if m else -1
    last_stop = serve.stop()
    subprocess.run(["rm", "-rf", work])

    rate = lambda k: med([x["records_per_sec"] for x in r[k]])
    mbs = lambda k: med([x["mb_per_sec"] for x in r[k]])
    p99 = lambda k: med([x["latency_ms"]["p99"] if "latency_ms" in x else x["p99_ms"] for x in r[k]])
    p = lambda k, q: med([x["latency_ms"][q] for x in r[k]])
    share = lambda k: med([x["broker_cpu_seconds"] / x["seconds"] for x in r[k]])

    def yes(ok):
        return "yes" if ok else "**no**"

    out = []
    out.append("## Workloads: Weir beside the machine's ceiling (issue 6)")
    out.append("")
    out.append(
        "One release `weir serve`, %d rounds in one run (medians), each workload next to the "
        "ceiling's minimal broker (`../shared/bench/ceiling`: checks CRCs, walks records, "
        "appends with write(2), acks) measured in the same round. Weir's figures come from "
        "`weir bench` (Weir's own client) unless named otherwise; the client and the broker "
        "share the machine's 2 cores, as the ceiling's client and server do." % ROUNDS)
    out.append("")
    out.append("| workload | Weir | ceiling | Weir ÷ ceiling | goal | met |")
    out.append("|---|---:|---:|---:|---|---|")
    w1, w1c = rate("w1_1"), rate("w1_ceiling")
    out.append("| W1 100 B, acks=1, 1 partition | %.0f rec/s | %.0f rec/s | %.2f | ≥ 2.5M rec/s | %s |"
               % (w1, w1c, w1 / w1c, yes(w1 >= 2.5e6)))
    w18 = rate("w1_8")
    out.append("| W1 100 B, acks=1, 8 partitions | %.0f rec/s | %.0f rec/s | %.2f | ≥ 2.5M rec/s | %s |"
               % (w18, w1c, w18 / w1c, yes(w18 >= 2.5e6)))
    w2, w2c = rate("w2"), rate("w2_ceiling")
    out.append("| W2 ~1 KB JSON, lz4, acks=1 | %.0f rec/s | %.0f rec/s | %.2f | ≥ 0.60 of ceiling | %s |"
               % (w2, w2c, w2 / w2c, yes(w2 / w2c >= 0.6)))
    for k in (1, 5):
        w3, w3c = rate("w3_%d" % k), rate("w3_%d_ceiling" % k)
        # The ceiling's client times each request (a pre-built batch) from write to ack;
        # the comparable Weir figure is the Produce request round trip. The record
        # latency, which adds the wait for a batch to fill and for a free in-flight slot,
        # is shown beside it.
        a, b = med([x["request_latency_ms"]["p99"] for x in r["w3_%d" % k]]), p99("w3_%d_ceiling" % k)
        out.append("| W3 1 KiB, acks=all, fsync, %d in flight | %.0f rec/s, request p99 %.2f ms (record p99 %.2f ms) | %.0f rec/s, request p99 %.2f ms | %.2f (p99 %.1f×) | ≥ 0.70, p99 ≤ 1.5× | %s |"
                   % (k, w3, a, p99("w3_%d" % k), w3c, b, w3 / w3c, a / b if b else float("nan"),
                      yes(w3 / w3c >= 0.7 and a <= 1.5 * b)))
    out.append("| W4 consume 100 B, warm | %.0f rec/s (%.0f MB/s) | – | – | ≥ 1.5M rec/s | %s |"
               % (rate("w4_100"), mbs("w4_100"), yes(rate("w4_100") >= 1.5e6)))
    out.append("| W4 consume 1 KiB, warm | %.0f rec/s (%.0f MB/s) | – | – | ≥ 1 GB/s | %s |"
               % (rate("w4_1k"), mbs("w4_1k"), yes(mbs("w4_1k") >= 1000)))
    out.append("| W5 e2e at ½ W1, acks=1 | p50 %.2f / p99 %.2f / p99.9 %.2f ms | – | – | p99 < 1 ms | %s |"
               % (p("w5", "p50"), p("w5", "p99"), p("w5", "p999"), yes(p("w5", "p99") < 1)))
    out.append("| W5 e2e at ½ W3, fsync | p50 %.2f / p99 %.2f / p99.9 %.2f ms | – | – | p99 < 3 ms | %s |"
               % (p("w5_fsync", "p50"), p("w5_fsync", "p99"), p("w5_fsync", "p999"),
                  yes(p("w5_fsync", "p99") < 3)))
    out.append("| Broker peak RSS during W1 | %.1f MB | – | – | < 100 MB | %s |"
               % (broker_rss_w1, yes(broker_rss_w1 < 100)))
    w6 = rate("w6")
    w6_first = r["w6"][0]["records_per_sec"]
    out.append("| W6 1,000 partitions, 100 producers | %.0f rec/s, %.2f of W1 at 8 partitions (first run, into the new topic: %.0f rec/s, %.2f); broker peak RSS %.0f MB | – | – | ≥ 0.70 of 8 partitions | %s |"
               % (w6, w6 / w18, w6_first, w6_first / w18, broker_rss_w6, yes(w6 / w18 >= 0.7)))
    out.append("| Start-up after a clean shutdown (%d partitions, %.1f GB) | %.2f s | – | – | – | – |"
               % (partitions, data_gb, clean_start))
    out.append("| Start-up after kill -9 (%d segments recovered, W4's two 1 GB ones among them) | %.2f s | – | – | – | – |"
               % (recovered, crash_start))
    out.append("| Clean shutdown (SIGTERM) of that broker: after the run / after the recovery | %.2f s / %.2f s | – | – | – | – |"
               % (first_stop, last_stop))
    out.append("")
    kc = r["w1_kcat"]
    out.append(
        "W1 with kcat as the producer (`kcat -P -l` of a file of %d 100-byte lines, acks=1, "
        "linger.ms=5, batch.size=16384): %.0f rec/s; kcat used %.2f CPU-seconds per second "
        "of the run and the broker %.2f — %s. Weir's own producer in W1: broker %.2f "
        "CPU-s/s, client %.2f CPU-s/s."
        % (W1_RECORDS, rate("w1_kcat"), med([x["kcat_cpu_seconds"] / x["seconds"] for x in kc]),
           share("w1_kcat"),
           "the producer, not the broker, is the limit" if med([x["kcat_cpu_seconds"] for x in kc]) > med([x["broker_cpu_seconds"] for x in kc]) else "the broker is the busier side",
           share("w1_1"), med([x["cpu_seconds"] / x["seconds"] for x in r["w1_1"]])))
    out.append("")
    out.append(
        "Settings: W1 %d records per run, batch.size=16384, linger.ms=5; W2 %d events of "
        "gen_events.py (300 MB); W3 30,000 records per run, its p99 ratio between request "
        "round trips (`request_latency_ms` of `weir bench produce`, the ceiling's per-batch "
        "latency being the same measure); W4 %d MB per record size, one "
        "partition; W5 %.0f s per run. Not measured yet: W4 with a cold page cache (dropping the "
        "page cache needs root and disturbs the shared machine)." % (W1_RECORDS, n_events, W4_MB, W5_SECONDS))
    out.append("")
    out.append("Machine: %s, %d cores, %s. Reproduce: `./scripts/bench-workloads.sh`."
               % (platform.machine(), os.cpu_count(), platform.platform()))
    print("\n".join(out))


if __name__ == "__main__":
    main()
