#!/usr/bin/env python3
"""Weir's producer against librdkafka's, producing the same records to the same started
`weir serve` with the same settings, interleaved round by round in one run.

Contenders, each a separate process reading the same file of 100-byte lines on stdin:
  weir produce             Weir's producer (weir-client)
  kcat -P                  librdkafka's producer (kcat is a thin C shell around it)
  confluent-kafka          librdkafka through Python, the way most teams call it

Each run goes to a fresh 3-partition topic; afterwards the topic must hold exactly N
records. Reported: median records/s over the rounds (whole process: start, connect,
produce, final flush) and the largest peak RSS (from wait4). Prints a markdown section for
BENCHMARKS.md (scripts/bench-producer.sh puts it there).

    bench_producer.py BOOTSTRAP WEIR_BINARY [N] [ROUNDS]
"""
import base64
import os
import platform
import random
import statistics
import subprocess
import sys
import tempfile
import time
import uuid

from confluent_kafka import Consumer, TopicPartition, libversion

BOOTSTRAP, WEIR = sys.argv[1], sys.argv[2]
N = int(sys.argv[3]) if len(sys.argv) > 3 else 1_000_000
ROUNDS = int(sys.argv[4]) if len(sys.argv) > 4 else 3
SIZE = 100
PARTITIONS = 3

# The same settings for everyone: Kafka's producer defaults where both have them, and
# librdkafka's memory bound set to Kafka's buffer.memory (its own default is 1 GiB).
SETTINGS = {
    "acks": "all",
    "enable.idempotence": "true",
    "linger.ms": "5",
    "batch.size": "16384",
    "compression.type": os.environ.get("CODEC", "none"),
}
LIBRDKAFKA_ONLY = {"queue.buffering.max.kbytes": "32768"}

CONFLUENT_SCRIPT = r"""
import sys
from confluent_kafka import Producer
conf = dict(a.split("=", 1) for a in sys.argv[2:])
p = Producer(conf)
topic = sys.argv[1]
produce, poll = p.produce, p.poll
for line in sys.stdin.buffer:
    while True:
        try:
            produce(topic, line[:-1])
            break
        except BufferError:
            poll(0.01)
    poll(0)
left = p.flush(60)
sys.exit(1 if left else 0)
"""


def contenders(topic):
    kcat = ["kcat", "-P", "-q", "-b", BOOTSTRAP, "-t", topic]
    for k, v in {**SETTINGS, **LIBRDKAFKA_ONLY}.items():
        kcat += ["-X", "%s=%s" % (k, v)]
    weir = [WEIR, "produce", "--bootstrap", BOOTSTRAP, "--topic", topic]
    for k, v in SETTINGS.items():
        weir += ["--property", "%s=%s" % (k, v)]
    confluent = [sys.executable, "-c", CONFLUENT_SCRIPT, topic, "bootstrap.servers=" + BOOTSTRAP]
    confluent += ["%s=%s" % kv for kv in {**SETTINGS, **LIBRDKAFKA_ONLY}.items()]
    return {"weir produce": weir, "kcat -P (librdkafka)": kcat, "confluent-kafka (librdkafka)": confluent}


def run(cmd, path):
    with open(path, "rb") as stdin:
        start = time.perf_counter()
        proc = subprocess.Popen(cmd, stdin=stdin, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        err = proc.stderr.read()
        _, status, usage = os.wait4(proc.pid, 0)
        wall = time.perf_counter() - start
    if os.waitstatus_to_exitcode(status) != 0:
        sys.exit("%s failed: %s" % (cmd[0], err.decode()[-500:]))
    return wall, usage.ru_maxrss / 1024.0  # KiB -> MiB


def create(topic):
    subprocess.run([WEIR, "topics", "create", "--bootstrap", BOOTSTRAP, "--topic", topic,
                    "--partitions", str(PARTITIONS)], check=True, capture_output=True)


def count(topic):
    c = Consumer({"bootstrap.servers": BOOTSTRAP, "group.id": "bench-count"})
    total = 0
    for p in range(PARTITIONS):
        lo, hi = c.get_watermark_offsets(TopicPartition(topic, p), timeout=10)
        total += hi - lo
    c.close()
    return total


def main():
    rng = random.Random(7)
    with tempfile.NamedTemporaryFile("wb", delete=False, suffix=".lines") as f:
        for _ in range(N):
            # Printable, not very compressible, no newlines.
            f.write(base64.b64encode(rng.randbytes(75))[:SIZE] + b"\n")
        path = f.name
    results = {}
    try:
        for r in range(ROUNDS):
            for name, _ in contenders("x").items():
                topic = "bench-producer-%s" % uuid.uuid4().hex[:8]
                create(topic)
                wall, rss = run(contenders(topic)[name], path)
                got = count(topic)
                if got != N:
                    sys.exit("%s: the topic holds %d records, not %d" % (name, got, N))
                results.setdefault(name, []).append((N / wall, rss))
                print("round %d %-30s %10.0f rec/s  peak %6.1f MiB" % (r + 1, name, N / wall, rss),
                      file=sys.stderr)
    finally:
        os.unlink(path)

    weir_rate = statistics.median(x[0] for x in results["weir produce"])
    weir_rss = max(x[1] for x in results["weir produce"])
    print("## Producer: Weir against librdkafka\n")
    print("%d records of %d bytes from a file on stdin into a 3-partition topic of one release "
          "`weir serve`, %d rounds interleaved in one run; every topic checked to hold exactly "
          "%d records. Settings for all: %s; librdkafka's queue bounded like buffer.memory "
          "(queue.buffering.max.kbytes=32768). Rates are whole-process (start to exit after "
          "the last acknowledgement), median of the rounds; peak RSS is the largest seen.\n"
          % (N, SIZE, ROUNDS, N, ", ".join("%s=%s" % kv for kv in SETTINGS.items())))
    print("| producer | records/s (median) | peak RSS | Weir's rate ÷ this | this peak ÷ Weir's |")
    print("|---|---:|---:|---:|---:|")
    for name, xs in results.items():
        rate = statistics.median(x[0] for x in xs)
        rss = max(x[1] for x in xs)
        print("| %s | %.0f | %.1f MiB | %.2f | %.2f |" % (name, rate, rss, weir_rate / rate, rss / weir_rss))
    print("\nMachine: %s, %d cores, Python %s, librdkafka %s (confluent-kafka), kcat's own "
          "librdkafka build. Reproduce: `./scripts/bench-producer.sh`.\n"
          % (platform.machine(), os.cpu_count(), platform.python_version(), libversion()[0]))


main()
