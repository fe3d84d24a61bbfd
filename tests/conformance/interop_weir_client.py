#!/usr/bin/env python3
"""Weir's own client against other implementations, both ways, every codec.

1. `weir produce` writes keyed records; librdkafka (confluent-kafka) and kafka-python
   read them back: every record once, in order per partition, bytes intact — and each
   key on the partition librdkafka's murmur2_random and kafka-python's Java-compatible
   murmur2 choose for it.
2. librdkafka and kafka-python produce records with headers; `weir consume` prints them:
   every record once, in offset order per partition, keys/values/headers intact.

env: BOOTSTRAP (127.0.0.1:9092) WEIR (target/debug/weir) N (2000) CODECS (all five)
"""
import json
import os
import subprocess
import sys
import uuid

from confluent_kafka import Consumer, Producer, TopicPartition
from kafka import KafkaConsumer, KafkaProducer
from kafka.partitioner.default import murmur2

B = os.environ.get("BOOTSTRAP", "127.0.0.1:9092")
ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
WEIR = os.environ.get("WEIR", os.path.join(ROOT, "target", "debug", "weir"))
N = int(os.environ.get("N", "2000"))
CODECS = os.environ.get("CODECS", "none gzip snappy lz4 zstd").split()
PARTS = 3
RUN = uuid.uuid4().hex[:6]
failures = []


def check(ok, what):
    if ok:
        print("ok   " + what)
    else:
        print("FAIL " + what)
        failures.append(what)


def weir(*args, stdin=None, timeout=120):
    return subprocess.run([WEIR, *args], input=stdin, capture_output=True, timeout=timeout)


def create(topic):
    r = weir("topics", "create", "--bootstrap", B, "--topic", topic, "--partitions", str(PARTS))
    if r.returncode != 0:
        sys.exit("creating %s: %s" % (topic, r.stderr.decode()))


def java_partition(key):
    # kafka-python's copy of the Java client's murmur2, positive-masked, as Kafka does.
    return (murmur2(key) & 0x7FFFFFFF) % PARTS


def read_confluent(topic, expect):
    c = Consumer({"bootstrap.servers": B, "group.id": "interop-" + uuid.uuid4().hex[:6],
                  "auto.offset.reset": "earliest", "enable.auto.commit": False})
    c.assign([TopicPartition(topic, p, 0) for p in range(PARTS)])
    got = []
    idle = 0
    while len(got) < expect and idle < 40:
        msgs = c.consume(500, 0.25)
        idle = 0 if msgs else idle + 1
        for m in msgs:
            if m.error():
                raise RuntimeError(m.error())
            got.append((m.partition(), m.offset(), m.key(), m.value(), m.headers() or []))
    c.close()
    return got


def read_kafka_python(topic, expect):
    c = KafkaConsumer(bootstrap_servers=B, auto_offset_reset="earliest", enable_auto_commit=False,
                      consumer_timeout_ms=10000)
    from kafka import TopicPartition as KTP
    c.assign([KTP(topic, p) for p in range(PARTS)])
    c.seek_to_beginning()
    got = []
    for m in c:
        got.append((m.partition, m.offset, m.key, m.value, [(k, v) for k, v in m.headers]))
        if len(got) >= expect:
            break
    c.close()
    return got


def weir_to_others(codec):
    topic = "interop-weir-%s-%s" % (codec, RUN)
    create(topic)
    lines = []
    sent = []
    for i in range(N):
        key = ("key-%d" % (i % 97)).encode()
        value = ("%s|%d|héllo wörld %s" % (codec, i, "x" * (i % 50))).encode()
        lines.append(key + b"\t" + value)
        sent.append((key, value))
    r = weir("produce", "--bootstrap", B, "--topic", topic, "--compression", codec,
             "--key-separator", "\t", stdin=b"\n".join(lines) + b"\n")
    check(r.returncode == 0, "weir produce %s: exit 0 (%s)" % (codec, r.stderr.decode().strip()))

    for name, reader in (("librdkafka", read_confluent), ("kafka-python", read_kafka_python)):
        got = reader(topic, N)
        check(len(got) == N, "%s reads all %d records weir produced with %s (got %d)"
              % (name, N, codec, len(got)))
        pairs = sorted((k, v) for _, _, k, v, _ in got)
        check(pairs == sorted(sent), "%s: keys and values intact (%s)" % (name, codec))
        by_part = {}
        for p, off, k, v, _ in got:
            by_part.setdefault(p, []).append((off, v))
        in_order = True
        for p, recs in by_part.items():
            offs = [o for o, _ in recs]
            if offs != list(range(len(recs))):
                in_order = False
            # Values of one key carry increasing indexes: order within the partition kept.
            idx = [int(v.split(b"|")[1]) for _, v in recs]
            if idx != sorted(idx):
                in_order = False
        check(in_order, "%s: offsets dense and send order kept per partition (%s)" % (name, codec))
        wrong = [(k, p) for p, _, k, _, _ in got if java_partition(k) != p]
        check(not wrong, "%s: every key on the Java client's murmur2 partition (%s)%s"
              % (name, codec, "" if not wrong else " e.g. %r" % (wrong[:3],)))

    # The same keys through librdkafka's murmur2_random land where weir put them.
    twin = topic + "-librdkafka"
    create(twin)
    p = Producer({"bootstrap.servers": B, "partitioner": "murmur2_random"})
    placed = {}

    def note(err, msg):
        if err is None:
            placed[msg.key()] = msg.partition()

    for i in range(97):
        p.produce(twin, key=("key-%d" % i).encode(), value=b"v", on_delivery=note)
    p.flush(30)
    weir_placed = {k: part for part, _, k, _, _ in read_confluent(topic, N)}
    check(len(placed) == 97 and all(weir_placed.get(k) == part for k, part in placed.items()),
          "librdkafka's murmur2_random puts every key where weir's partitioner did (%s)" % codec)


def others_to_weir(codec):
    topic = "interop-to-weir-%s-%s" % (codec, RUN)
    create(topic)
    sent = []
    # librdkafka first, then kafka-python, into the same topic.
    p = Producer({"bootstrap.servers": B, "compression.type": codec, "enable.idempotence": True,
                  "linger.ms": 5})
    for i in range(N):
        key = ("k%d" % (i % 13)).encode()
        value = ("rd|%d|%s" % (i, codec)).encode()
        headers = [("src", b"librdkafka"), ("i", str(i).encode())]
        p.produce(topic, key=key, value=value, headers=headers)
        sent.append((key, value, headers))
        if i % 1000 == 0:
            p.poll(0)
    check(p.flush(30) == 0, "librdkafka produced %d records (%s)" % (N, codec))
    kp = KafkaProducer(bootstrap_servers=B, compression_type=None if codec == "none" else codec,
                       acks="all")
    for i in range(N):
        # Null keys and null values, but never both (kafka-python refuses that).
        key = None if i % 5 == 0 and i % 7 != 0 else ("k%d" % (i % 13)).encode()
        value = None if i % 7 == 0 else bytes([0xff, 0xfe]) + str(i).encode()
        headers = [("src", b"kafka-python"), ("bin", bytes([0, 0xff]))]
        kp.send(topic, key=key, value=value, headers=headers, partition=i % PARTS)
        sent.append((key, value, headers))
    kp.flush(30)
    kp.close()

    r = weir("consume", "--bootstrap", B, "--topic", topic, "--from-beginning",
             "--max-messages", str(2 * N), "--timeout-ms", "15000")
    check(r.returncode == 0, "weir consume exits 0 (%s): %s" % (codec, r.stderr.decode().strip()[:200]))
    rows = [json.loads(line) for line in r.stdout.decode().splitlines() if line.strip()]
    check(len(rows) == 2 * N, "weir consume prints all %d records (%s; got %d)" % (2 * N, codec, len(rows)))

    def unjson(v):
        if v is None:
            return None
        if isinstance(v, dict):
            import base64
            return base64.b64decode(v["base64"])
        return v.encode()

    got = sorted(
        (repr(unjson(row["key"])), repr(unjson(row["value"])),
         repr([(h[0], unjson(h[1])) for h in row["headers"]]))
        for row in rows)
    want = sorted((repr(k), repr(v), repr([(h, hv) for h, hv in hs])) for k, v, hs in sent)
    check(got == want, "keys, values (null, binary) and headers intact through weir consume (%s)" % codec)
    ordered = True
    last = {}
    for row in rows:
        if row["topic"] != topic or row["offset"] <= last.get(row["partition"], -1):
            ordered = False
        last[row["partition"]] = row["offset"]
        if not all(k in row for k in ("timestamp", "key", "value", "headers")):
            ordered = False
    check(ordered, "weir consume prints each partition in offset order with every field (%s)" % codec)


for codec in CODECS:
    weir_to_others(codec)
    others_to_weir(codec)

if failures:
    print("FAIL interop: %d checks failed" % len(failures))
    sys.exit(1)
print("PASS interop: weir's client and librdkafka/kafka-python agree in every codec")
