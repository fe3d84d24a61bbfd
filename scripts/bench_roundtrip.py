#!/usr/bin/env python3
"""One million 100-byte records through librdkafka (confluent-kafka) into a started
`weir serve` and back out, checking that nothing is lost or duplicated, with loopback TCP
throughput measured in the same run as the physical reference. Prints a markdown section
for BENCHMARKS.md (scripts/bench-roundtrip.sh puts it there).

    bench_roundtrip.py BOOTSTRAP [N]
"""
import os
import platform
import socket
import sys
import threading
import time
import uuid

from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

BOOTSTRAP = sys.argv[1]
N = int(sys.argv[2]) if len(sys.argv) > 2 else 1_000_000
SIZE = 100


def loopback_mb_per_s(total=1 << 30, chunk=1 << 20):
    """Bytes through one loopback TCP connection, sender and receiver in this process."""
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(1)
    port = srv.getsockname()[1]
    got = [0]

    def receive():
        conn, _ = srv.accept()
        buf = bytearray(chunk)
        while got[0] < total:
            n = conn.recv_into(buf)
            if not n:
                break
            got[0] += n
        conn.close()

    t = threading.Thread(target=receive)
    t.start()
    c = socket.create_connection(("127.0.0.1", port))
    data = b"x" * chunk
    start = time.perf_counter()
    for _ in range(total // chunk):
        c.sendall(data)
    c.close()
    t.join()
    return got[0] / (time.perf_counter() - start) / 1e6


def main():
    topic = "roundtrip-" + uuid.uuid4().hex[:8]
    admin = AdminClient({"bootstrap.servers": BOOTSTRAP})  # kept alive until the future resolves
    admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(15)
    p = Producer({
        "bootstrap.servers": BOOTSTRAP,
        "enable.idempotence": True,
        "linger.ms": 5,
        "batch.size": 1_000_000,
        "queue.buffering.max.messages": 2_000_000,
        "queue.buffering.max.kbytes": 1_048_576,
    })
    failed = []

    def on_delivery(err, msg):
        if err:
            failed.append(err)

    pad = b"." * (SIZE - 10)
    start = time.perf_counter()
    for i in range(N):
        p.produce(topic, value=b"%010d" % i + pad, on_delivery=on_delivery)
        if i % 10000 == 0:
            p.poll(0)
    left = p.flush(120)
    produce_s = time.perf_counter() - start
    if left or failed:
        sys.exit("FAIL: %d undelivered, %d failed (%s)" % (left, len(failed), failed[:3]))

    c = Consumer({"bootstrap.servers": BOOTSTRAP, "group.id": "roundtrip-" + uuid.uuid4().hex[:6],
                  "enable.auto.commit": False, "fetch.max.bytes": 52_428_800})
    c.assign([TopicPartition(topic, 0, 0)])
    seen = bytearray(N)
    count = dups = 0
    start = time.perf_counter()
    deadline = time.time() + 120
    while count < N and time.time() < deadline:
        for m in c.consume(100_000, 1.0):
            if m.error():
                continue
            i = int(m.value()[:10])
            if seen[i]:
                dups += 1
            seen[i] = 1
            count += 1
    consume_s = time.perf_counter() - start
    c.close()
    missing = N - sum(seen)
    if missing or dups:
        sys.exit("FAIL: %d missing, %d duplicated" % (missing, dups))
    loop = loopback_mb_per_s()
    mb = N * SIZE / 1e6
    cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), platform.processor())
    print("## Broker round trip through librdkafka (weir serve)\n")
    print("Command: `./scripts/bench-roundtrip.sh` · machine: %d vCPU, %s · confluent-kafka %s "
          "(librdkafka bundled), idempotent producer, linger.ms=5, one partition · %s\n"
          % (os.cpu_count(), cpu, __import__("confluent_kafka").__version__, time.strftime("%Y-%m-%d")))
    print("| %d records of %d B | records/s | MB/s | loopback TCP, same run |" % (N, SIZE))
    print("|---|---:|---:|---:|")
    print("| produce (acks=all, until every delivery report) | %s | %.0f | %.0f MB/s |" % (f"{N / produce_s:,.0f}", mb / produce_s, loop))
    print("| consume from the beginning | %s | %.0f | |" % (f"{N / consume_s:,.0f}", mb / consume_s))
    print("\nEvery record came back exactly once (%d checked, 0 missing, 0 duplicated). The client, "
          "the broker and the loopback test share the machine's 2 cores; this run measures the "
          "whole path, not Weir alone (see the speed section for that)." % N)


if __name__ == "__main__":
    main()
