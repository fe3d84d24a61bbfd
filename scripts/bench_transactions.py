#!/usr/bin/env python3
"""Transactional produce beside idempotent produce, in the same run, through librdkafka
(confluent-kafka) against the broker at argv[1]: 100-byte records for SECONDS each, into a
topic of 1 and of 8 partitions. The transactional producer commits every 100 ms; the
idempotent one only flushes at the end. Rounds interleave the two, so a noisy machine
weighs on both alike. Reports records/s (acknowledged, committed), the ratio, and the
latency of commit_transaction (p50/p99). Then reads each transactional topic back under
read_committed and checks it holds exactly what was committed.

Then the same comparison with Weir's own producer (`weir bench produce`, with and without
`--transaction-duration-ms 100`), which is not held back by a Python loop: WEIR_RECORDS
records per run (default 10,000,000), checked back with `weir bench consume` under
read_committed (all of them, and not one more), each topic deleted once checked.

  usage: bench_transactions.py HOST:PORT [SECONDS] [ROUNDS]
  env: WEIR (the weir binary, default target/release/weir), WEIR_RECORDS
Prints a markdown section (for scripts/bench_section.py).
"""
import json
import os
import statistics
import subprocess
import sys
import time
import uuid

from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

BOOT = sys.argv[1]
SECONDS = float(sys.argv[2]) if len(sys.argv) > 2 else 10.0
ROUNDS = int(sys.argv[3]) if len(sys.argv) > 3 else 3
COMMIT_EVERY_S = 0.1
VALUE = b"x" * 100
COMMON = {"bootstrap.servers": BOOT, "linger.ms": 5, "acks": "all"}


ADMIN = AdminClient({"bootstrap.servers": BOOT})


def create(partitions):
    name = "bench-txn-%d-%s" % (partitions, uuid.uuid4().hex[:6])
    ADMIN.create_topics([NewTopic(name, partitions, 1)])[name].result(15)
    return name


def run_idempotent(topic, partitions):
    # No per-record delivery callback, as for the transactional producer: each would cost
    # the Python loop more than the broker; the records are counted back instead.
    p = Producer({**COMMON, "enable.idempotence": True})
    n = 0
    t0 = time.time()
    while time.time() - t0 < SECONDS:
        try:
            p.produce(topic, VALUE, partition=n % partitions)
            n += 1
        except BufferError:
            p.poll(0.01)
        if n % 1000 == 0:
            p.poll(0)
    left = p.flush(60)
    elapsed = time.time() - t0
    assert left == 0, "idempotent produce: %d records not acknowledged" % left
    return n / elapsed, n


def run_transactional(topic, partitions):
    p = Producer({**COMMON, "transactional.id": "bench-" + uuid.uuid4().hex[:8]})
    p.init_transactions(30)
    commits, n = [], 0
    t0 = time.time()
    p.begin_transaction()
    last_commit = t0
    while time.time() - t0 < SECONDS:
        try:
            p.produce(topic, VALUE, partition=n % partitions)
            n += 1
        except BufferError:
            p.poll(0.01)
        if n % 1000 == 0:
            p.poll(0)
        now = time.time()
        if now - last_commit >= COMMIT_EVERY_S:
            c0 = time.time()
            p.commit_transaction(60)
            commits.append(time.time() - c0)
            p.begin_transaction()
            last_commit = time.time()
    c0 = time.time()
    p.commit_transaction(60)
    commits.append(time.time() - c0)
    elapsed = time.time() - t0
    return n / elapsed, n, commits


def committed_count(topic, partitions, isolation="read_committed"):
    c = Consumer({"bootstrap.servers": BOOT, "group.id": "bench-" + uuid.uuid4().hex[:6],
                  "isolation.level": isolation, "auto.offset.reset": "earliest",
                  "enable.partition.eof": True})
    c.assign([TopicPartition(topic, i, 0) for i in range(partitions)])
    n, eof = 0, set()
    deadline = time.time() + 120
    while len(eof) < partitions and time.time() < deadline:
        for m in c.consume(10000, 1.0):
            if m.error():
                eof.add(m.partition())
            else:
                n += 1
    c.close()
    return n


WEIR = os.environ.get("WEIR", "target/release/weir")
WEIR_RECORDS = int(os.environ.get("WEIR_RECORDS", "10000000"))


def weir(*args, check=True):
    r = subprocess.run([WEIR, *args], capture_output=True, text=True)
    if check and r.returncode != 0:
        sys.exit("weir %s failed (%d): %s" % (" ".join(args), r.returncode, r.stderr))
    return r


def weir_bench(partitions, transactional):
    """One `weir bench produce` run into a new topic; its JSON line, after checking that the
    topic holds every record under read_committed and not one more."""
    topic = "bench-weir-%d-%s" % (partitions, uuid.uuid4().hex[:6])
    extra = ["--transaction-duration-ms", "100"] if transactional else []
    out = weir("bench", "produce", "--bootstrap", BOOT, "--topic", topic,
               "--records", str(WEIR_RECORDS), "--record-size", "100",
               "--partitions", str(partitions), "--json", *extra)
    v = json.loads(out.stdout.strip().splitlines()[-1])
    assert v["records"] == WEIR_RECORDS, v
    rc = ["--property", "isolation.level=read_committed"]
    weir("bench", "consume", "--bootstrap", BOOT, "--topic", topic,
         "--records", str(WEIR_RECORDS), *rc)
    more = weir("bench", "consume", "--bootstrap", BOOT, "--topic", topic,
                "--records", str(WEIR_RECORDS + 1), "--timeout-ms", "2000", *rc, check=False)
    assert more.returncode == 1 and "only %d of" % WEIR_RECORDS in more.stderr, more.stderr
    weir("topics", "delete", "--bootstrap", BOOT, "--topic", topic)
    return v


def pct(xs, q):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))]


rows = []
for partitions in (1, 8):
    ratios, idem_rates, txn_rates, commits = [], [], [], []
    for _ in range(ROUNDS):
        topic = create(partitions)
        idem, sent = run_idempotent(topic, partitions)
        got = committed_count(topic, partitions, "read_uncommitted")
        assert got == sent, "read %d of %d idempotent records" % (got, sent)
        topic = create(partitions)
        txn, sent, c = run_transactional(topic, partitions)
        got = committed_count(topic, partitions)
        assert got == sent, "read_committed read %d of %d committed records" % (got, sent)
        ratios.append(txn / idem)
        idem_rates.append(idem)
        txn_rates.append(txn)
        commits.extend(c)
    rows.append((partitions, statistics.median(idem_rates), statistics.median(txn_rates),
                 ratios, pct(commits, 0.5) * 1000, pct(commits, 0.99) * 1000, len(commits)))

def print_table(results):
    print("| partitions | idempotent rec/s | transactional rec/s | ratio (each round) | "
          "commit_transaction p50 | p99 | commits |")
    print("|---:|---:|---:|---|---:|---:|---:|")
    for partitions, idem, txn, ratios, p50, p99, n in results:
        print("| %d | %d | %d | %.2f (%s) | %.1f ms | %.1f ms | %d |" % (
            partitions, idem, txn, statistics.median(ratios),
            " ".join("%.2f" % r for r in ratios), p50, p99, n))


own = []
for partitions in (1, 8):
    ratios, idem_rates, txn_rates, p50s, p99s, commits = [], [], [], [], [], 0
    for _ in range(ROUNDS):
        idem = weir_bench(partitions, False)
        txn = weir_bench(partitions, True)
        ratios.append(txn["records_per_sec"] / idem["records_per_sec"])
        idem_rates.append(idem["records_per_sec"])
        txn_rates.append(txn["records_per_sec"])
        p50s.append(txn["commit_latency_ms"]["p50"])
        p99s.append(txn["commit_latency_ms"]["p99"])
        commits += txn["transactions"]
    own.append((partitions, statistics.median(idem_rates), statistics.median(txn_rates),
                ratios, statistics.median(p50s), max(p99s), commits))

print("## Transactions: transactional beside idempotent produce (issue 14)\n")
print("Command: `./scripts/bench-transactions.sh` · confluent-kafka (librdkafka), 100 B "
      "records, acks=all, linger.ms=5, one release `weir serve` · %d rounds of %g s per "
      "producer, interleaved · %s\n" % (ROUNDS, SECONDS, time.strftime("%Y-%m-%d")))
print("The transactional producer commits every 100 ms; every topic is read back (the "
      "transactional ones under read_committed) and holds exactly the records sent. Neither "
      "producer has a per-record delivery callback.\n")
print_table(rows)

print("\n### Weir's own producer (`weir bench produce`)\n")
print("%d records of 100 B per run, acks=all, linger.ms=5, `--transaction-duration-ms 100` "
      "for the transactional runs, %d rounds interleaved, into the same `weir serve`; each "
      "topic read back under read_committed holds every record and not one more. "
      "commit_transaction p50 is the median of the rounds' medians, p99 the worst round's.\n"
      % (WEIR_RECORDS, ROUNDS))
print_table(own)
