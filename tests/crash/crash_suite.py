#!/usr/bin/env python3
"""Crash consistency of `weir serve` under load: nothing acknowledged is lost.

A loop that starts the broker, drives it with idempotent acks=all producers (librdkafka,
through confluent-kafka) on several partitions, compressed and not, and kills the broker
with SIGKILL at a random moment of each cycle, while records are in flight and segments
roll (small segment.bytes). One topic is compacted and one has a small retention.bytes,
and the cleaner and retention run every few hundred milliseconds, so that kills land in
the middle of compactions and of segment deletions too. The producers keep running
across the kill and retry, as an application's would. Consumer-group offsets are
committed in every cycle.

At the end an independent reader (kafka-python, not librdkafka) reads every partition
from the beginning and checks that each acknowledged record is there exactly once, at
the offset its acknowledgement named, in the order it was produced within its partition;
that no unacknowledged record appears twice; and that the group's last committed offsets
survived every kill. In the compacted topic, the last acknowledged record of each key
must be there at its offset, unless a later record of that key is; in the retention
topic, every acknowledged record from the log start offset on.

Modes: `page-cache` (the default broker settings: what survives a process crash) and
`fsync` (topics with flush.messages=1: acknowledged only once on disk). A process kill
cannot tell them apart; both must lose nothing here. (Power loss is a different test.)

    crash_suite.py WEIR [--cycles N] [--mode page-cache|fsync] [--seed S] [--rate R]

Prints a report line and exits 1 if any check fails.
"""
import argparse
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time

from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from kafka import KafkaConsumer
from kafka import TopicPartition as KPTopicPartition

PARTITIONS = 4
# (topic, producer compression, kind, topic configs)
TOPICS = [
    ("crash-plain", "none", "plain", {}),
    ("crash-lz4", "lz4", "plain", {}),
    ("crash-zstd", "zstd", "plain", {}),
    # A few keys, small segments (but above a batch that built up while the broker was
    # down) and an eager cleaner: compactions run all the time.
    ("crash-compact", "lz4", "compact", {
        "cleanup.policy": "compact", "segment.bytes": "131072",
        "min.cleanable.dirty.ratio": "0.01", "min.compaction.lag.ms": "0"}),
    # Segments deleted all the time.
    ("crash-retention", "none", "retention", {
        "segment.bytes": "131072", "retention.bytes": "393216"}),
]
KINDS = {t: kind for t, _, kind, _ in TOPICS}
COMPACT_KEYS = 50
GROUP = "crash-group"


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


class Broker:
    """`weir serve` on one port and data directory, started and killed again and again.
    `overrides` are broker settings beyond the suite's own (KEY=VALUE)."""

    def __init__(self, weir, work, port, overrides=()):
        self.weir, self.work, self.port = weir, work, port
        self.overrides = [arg for kv in overrides for arg in ("--override", kv)]
        self.data = os.path.join(work, "data")
        self.proc = None
        self.runs = 0

    def start(self, timeout=60):
        self.runs += 1
        log = open(os.path.join(self.work, "serve-%d.log" % self.runs), "w")
        self.proc = subprocess.Popen(
            [self.weir, "serve", "--listen", "127.0.0.1:%d" % self.port, "--data-dir", self.data,
             # Small segments, so that kills land in the middle of rolls too.
             "--override", "log.segment.bytes=262144",
             "--override", "offsets.topic.num.partitions=4",
             "--override", "log.cleaner.backoff.ms=100",
             "--override", "log.retention.check.interval.ms=200",
             "--override", "log.segment.delete.delay.ms=0",
             "--override", "group.initial.rebalance.delay.ms=0"] + self.overrides,
            stdout=log, stderr=subprocess.STDOUT)
        deadline = time.time() + timeout
        path = log.name
        while time.time() < deadline:
            with open(path) as f:
                if "accepting Kafka clients" in f.read():
                    return
            if self.proc.poll() is not None:
                raise SystemExit("weir serve exited with %s; see %s" % (self.proc.returncode, path))
            time.sleep(0.02)
        raise SystemExit("weir serve did not become ready in %d s; see %s" % (timeout, path))

    def kill9(self):
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait()

    def stop(self):
        self.proc.terminate()
        if self.proc.wait(60) != 0:
            raise SystemExit("weir serve exited with %s on SIGTERM" % self.proc.returncode)


class Ledger:
    """What the producers were told: acknowledged records and failed ones."""

    def __init__(self):
        self.acked = {}  # value -> (topic, partition, offset, key)
        self.failed = {}  # value -> error
        self.sent = 0

    def callback(self, err, msg):
        value = msg.value().decode()
        if err is not None:
            self.failed[value] = str(err)
        else:
            self.acked[value] = (msg.topic(), msg.partition(), msg.offset(), msg.key().decode())


def make_producer(bootstrap, compression):
    return Producer({
        # Batches stay well under the small segments of some topics, even when records
        # pile up while the broker is down (a batch over segment.bytes is refused).
        "batch.size": 32768,
        "bootstrap.servers": bootstrap,
        "enable.idempotence": True,
        "acks": "all",
        "compression.type": compression,
        "linger.ms": 5,
        # Long enough to ride out every restart: records fail only if something is wrong.
        "message.timeout.ms": 120000,
        "reconnect.backoff.ms": 20,
        "reconnect.backoff.max.ms": 200,
        "retry.backoff.ms": 50,
        "socket.connection.setup.timeout.ms": 5000,
        # The broker is killed on purpose: its "connection refused" is expected noise.
        "log_level": 2,
    })


def commit_offsets(bootstrap, ledger, committed):
    """Commits, for every partition of the first topic, the offset after its highest
    acknowledged record; remembers what the broker confirmed."""
    topic = TOPICS[0][0]
    high = {}
    for t, p, off, _ in ledger.acked.values():
        if t == topic:
            high[p] = max(high.get(p, -1), off)
    if not high:
        return
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": GROUP,
                  "enable.auto.commit": False, "socket.timeout.ms": 3000, "log_level": 2})
    try:
        offsets = [TopicPartition(topic, p, o + 1) for p, o in sorted(high.items())]
        result = c.commit(offsets=offsets, asynchronous=False)
        for tp in result:
            if tp.error is None:
                committed[tp.partition] = tp.offset
    except KafkaException:
        pass  # the broker may be going down; only confirmed commits count
    finally:
        c.close()


def read_committed_offsets(bootstrap):
    topic = TOPICS[0][0]
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": GROUP, "enable.auto.commit": False,
                  "log_level": 2})
    try:
        got = c.committed([TopicPartition(topic, p) for p in range(PARTITIONS)], timeout=30)
        return {tp.partition: tp.offset for tp in got}
    finally:
        c.close()


def read_everything(bootstrap):
    """Every record of every crash topic, read by kafka-python:
    {(topic, partition): [(offset, value, key)]}, and the log start offsets."""
    # Retention keeps running while this reads: a segment deleted under the reader moves
    # it to the new log start (earliest), and the log starts are taken once it is done.
    consumer = KafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False,
                             auto_offset_reset="earliest",
                             consumer_timeout_ms=2000, max_partition_fetch_bytes=4 << 20)
    tps = [KPTopicPartition(t, p) for t, _, _, _ in TOPICS for p in range(PARTITIONS)]
    consumer.assign(tps)
    consumer.seek_to_beginning(*tps)
    ends = consumer.end_offsets(tps)
    out = {(tp.topic, tp.partition): [] for tp in tps}
    deadline = time.time() + 300
    while time.time() < deadline:
        if all(consumer.position(tp) >= ends[tp] for tp in tps):
            break
        for tp, records in consumer.poll(timeout_ms=500, max_records=100000).items():
            out[(tp.topic, tp.partition)].extend(
                (r.offset, r.value.decode(), r.key.decode()) for r in records)
    starts = consumer.beginning_offsets(tps)
    consumer.close()
    return out, {(tp.topic, tp.partition): off for tp, off in starts.items()}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("weir")
    ap.add_argument("--cycles", type=int, default=10)
    ap.add_argument("--mode", choices=["page-cache", "fsync"], default="page-cache")
    ap.add_argument("--seed", type=int, default=None)
    ap.add_argument("--rate", type=int, default=20000, help="records per second in all")
    ap.add_argument("--keep", action="store_true", help="keep the data directory and logs")
    a = ap.parse_args()
    seed = a.seed if a.seed is not None else random.randrange(1 << 32)
    rng = random.Random(seed)
    work = tempfile.mkdtemp(prefix="weir-crash-")
    port = free_port()
    bootstrap = "127.0.0.1:%d" % port
    broker = Broker(os.path.abspath(a.weir), work, port)
    print("crash suite: mode %s, %d cycles, seed %d, work %s" % (a.mode, a.cycles, seed, work),
          flush=True)

    broker.start()
    admin = AdminClient({"bootstrap.servers": bootstrap, "log_level": 2})
    flush = {"flush.messages": "1"} if a.mode == "fsync" else {}
    futures = admin.create_topics([NewTopic(t, PARTITIONS, 1, config=dict(flush, **extra))
                                   for t, _, _, extra in TOPICS])
    for f in futures.values():
        f.result(30)

    ledger = Ledger()
    producers = [(t, make_producer(bootstrap, codec)) for t, codec, _, _ in TOPICS]
    seq = 0
    committed = {}
    checked_commits = 0
    failures = []

    def produce_for(seconds):
        nonlocal seq
        end = time.time() + seconds
        per_tick = max(1, a.rate // 100)
        while time.time() < end:
            tick = time.time()
            for _ in range(per_tick):
                topic, producer = producers[seq % len(producers)]
                value = "%d" % seq
                key = value
                if KINDS[topic] == "compact":
                    key = "k%d" % (seq % COMPACT_KEYS)
                elif KINDS[topic] == "retention":
                    key = value + "-" + "r" * 200  # bulk, so that segments roll and go
                try:
                    producer.produce(topic, value=value.encode(), key=key.encode(),
                                     partition=(seq // len(producers)) % PARTITIONS,
                                     on_delivery=ledger.callback)
                except BufferError:
                    producer.poll(0.05)
                    continue
                seq += 1
                ledger.sent += 1
            for _, producer in producers:
                producer.poll(0)
            time.sleep(max(0.0, 0.01 - (time.time() - tick)))

    for cycle in range(1, a.cycles + 1):
        produce_for(rng.uniform(0.2, 1.0))
        commit_offsets(bootstrap, ledger, committed)
        # The kill lands while records are still flowing.
        produce_for(rng.uniform(0.0, 0.3))
        broker.kill9()
        produce_for(rng.uniform(0.0, 0.2))  # clients see the broker gone
        broker.start()
        if committed:
            got = read_committed_offsets(bootstrap)
            for p, off in committed.items():
                checked_commits += 1
                if got.get(p) != off:
                    failures.append("cycle %d: group offset of partition %d is %s, %d was committed"
                                    % (cycle, p, got.get(p), off))
        if cycle % 10 == 0 or cycle == a.cycles:
            print("  cycle %d: %d sent, %d acknowledged so far" % (cycle, ledger.sent, len(ledger.acked)),
                  flush=True)

    for _, producer in producers:
        left = producer.flush(180)
        if left:
            failures.append("%d records still undelivered after 180 s" % left)
    # One more kill after the last acknowledgement, then read what the broker recovered.
    broker.kill9()
    broker.start()
    records, starts = read_everything(bootstrap)
    broker.stop()

    found = {}
    duplicates = 0
    order_breaks = 0
    for (topic, partition), recs in records.items():
        last = -1
        for offset, value, key in recs:
            if value in found:
                duplicates += 1
                if duplicates <= 5:
                    failures.append("record %s appears twice: %s and %s" % (value, found[value], (topic, partition, offset)))
            found[value] = (topic, partition, offset, key)
            n = int(value)
            if n < last:
                order_breaks += 1
                if order_breaks <= 5:
                    failures.append("%s-%d: record %d after record %d" % (topic, partition, n, last))
            last = max(last, n)
    # The records each check expects: every acknowledged one in the plain topics; those
    # at or past the log start in the retention topic; in the compacted topic, the last
    # acknowledged record of each key, unless a later record of that key is in the log.
    last_of_key = {}
    for value, (topic, partition, offset, key) in found.items():
        if KINDS[topic] == "compact":
            k = (topic, partition, key)
            last_of_key[k] = max(last_of_key.get(k, -1), offset)
    expected = {}
    for value, where in ledger.acked.items():
        topic, partition, offset, key = where
        kind = KINDS[topic]
        if kind == "retention" and offset < starts[(topic, partition)]:
            continue
        if kind == "compact" and last_of_key.get((topic, partition, key), -1) > offset:
            continue
        expected[value] = where
    missing = moved = 0
    for value, where in expected.items():
        got = found.get(value)
        if got is None:
            missing += 1
            if missing <= 5:
                failures.append("acknowledged record %s at %s is gone" % (value, where))
        elif got != where:
            moved += 1
            if moved <= 5:
                failures.append("acknowledged record %s was at %s, is now at %s" % (value, where, got))
    compacted_away = sum(1 for v, w in ledger.acked.items()
                         if KINDS[w[0]] == "compact" and v not in expected)
    deleted = sum(1 for v, w in ledger.acked.items()
                  if KINDS[w[0]] == "retention" and v not in expected)
    print("crash suite (%s, seed %d): %d cycles with kill -9, %d records sent, %d acknowledged, "
          "%d failed to the producer, %d checked and %d found at their offsets (%d compacted "
          "away by later records of their key, %d deleted by retention); %d missing, "
          "%d moved, %d duplicated, %d out of order; %d group-offset checks"
          % (a.mode, seed, a.cycles, ledger.sent, len(ledger.acked), len(ledger.failed),
             len(expected), len(expected) - missing - moved, compacted_away, deleted, missing,
             moved, duplicates, order_breaks, checked_commits), flush=True)
    if ledger.failed:
        sample = list(ledger.failed.items())[:3]
        failures.append("%d records failed to the producer, e.g. %s" % (len(ledger.failed), sample))
    if failures:
        for f in failures[:20]:
            print("FAIL " + f)
        print("logs kept in " + work)
        sys.exit(1)
    if a.keep:
        print("logs kept in " + work)
    else:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
