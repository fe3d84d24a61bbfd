#!/usr/bin/env python3
"""Transactions (KIP-98 exactly-once) with real clients against the broker at $BOOTSTRAP:
confluent-kafka (librdkafka), kafka-python and aiokafka.

  usage: .venv/bin/python tests/conformance/transactions.py [function_name]

With no argument every scenario runs in order; with a function name (e.g.
`confluent_zombie_fencing`) only that one. Prints one `ok   <name>   <secs> s` line per
scenario and `PASS transactions` at the end; exits 1 with a `FAIL ...` line on the first
failure, or when a scenario has not finished within its time limit (a watchdog thread ends
the process, so a client call that never returns cannot hang the run).

scripts/conformance.sh starts the broker with
    --override transaction.abort.timed.out.transaction.cleanup.interval.ms=1000
so that the coordinator looks for timed-out transactions every second:
`confluent_abandoned_transaction_times_out` gives a 3 s transaction 25 s to be aborted
(Kafka's default interval is 10 s). transaction.max.timeout.ms must be at least 60000
(the clients' default transaction.timeout.ms; Kafka's default is 900000).

Every scenario uses fresh topics, transactional ids and groups, so the script can run
again against the same broker.
"""
import asyncio
import os
import sys
import threading
import time
import traceback
import uuid

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import scenarios  # noqa: E402  (importing it does not run its main)
from scenarios import B, COMMON, create, fail, scenario  # noqa: E402

from confluent_kafka import (  # noqa: E402
    OFFSET_BEGINNING, Consumer, ConsumerGroupTopicPartitions, KafkaError, KafkaException,
    Producer, TopicPartition)
from confluent_kafka.admin import AdminClient  # noqa: E402

# librdkafka normalises INVALID_PRODUCER_EPOCH and PRODUCER_FENCED to _FENCED
# (rd_kafka_txn_normalize_err, rd_kafka_idemp_check_error).
FENCED = {KafkaError._FENCED, KafkaError.PRODUCER_FENCED, KafkaError.INVALID_PRODUCER_EPOCH}


def uid(prefix):
    return "%s-%s" % (prefix, uuid.uuid4().hex[:8])


def summary(values):
    """Counts per value prefix (the letters before the digits), for failure messages."""
    counts = {}
    for v in values:
        head = v.decode(errors="replace").rstrip("0123456789-")
        counts[head] = counts.get(head, 0) + 1
    dupes = len(values) - len(set(values))
    return "%d records %s, %d duplicates" % (len(values), dict(sorted(counts.items())), dupes)


def is_fenced(err):
    return err.code() in FENCED or (err.fatal() and "fenc" in err.str().lower())


# ---------------------------------------------------------------- confluent-kafka helpers

def txn_producer(tid, extra=None):
    p = Producer({**COMMON, "transactional.id": tid, "linger.ms": 5, **(extra or {})})
    p.init_transactions(30)
    return p


def send_all(p, topic, values, partitions, what):
    """Produces values (key = value) round-robin over the partitions and waits for delivery."""
    errors = []
    for i, v in enumerate(values):
        p.produce(topic, key=v, value=v, partition=i % partitions,
                  on_delivery=lambda e, m: errors.append(e) if e else None)
    left = p.flush(30)
    if left or errors:
        fail("%s: %d records undelivered, errors %s" % (what, left, errors[:3]))


def reader(isolation):
    return Consumer({**COMMON, "group.id": uid("txn-reader"), "isolation.level": isolation,
                     "enable.auto.commit": False, "enable.partition.eof": True,
                     "auto.offset.reset": "earliest"})


def ends(c, topic, partitions):
    """End offsets by ListOffsets(LATEST) at the consumer's isolation level: the LSO for
    read_committed, the high watermark for read_uncommitted."""
    return [c.get_watermark_offsets(TopicPartition(topic, p), timeout=10, cached=False)[1]
            for p in range(partitions)]


def wait_stable(topic, partitions, want=None, timeout=20, what=""):
    """Waits until every transaction on the topic is complete: the read_committed end offset
    (LSO) of each partition equals its high watermark (and the high watermarks equal `want`,
    when given). Returns the high watermarks."""
    rc, ru = reader("read_committed"), reader("read_uncommitted")
    deadline = time.time() + timeout
    try:
        while True:
            lso, hw = ends(rc, topic, partitions), ends(ru, topic, partitions)
            if lso == hw and (want is None or hw == want):
                return hw
            if time.time() > deadline:
                fail("%s%s: after %d s the read_committed end offsets (LSO) are %s and the high "
                     "watermarks %s%s" % (what, topic, timeout, lso, hw,
                                          "" if want is None else " (want %s)" % want))
            time.sleep(0.2)
    finally:
        rc.close()
        ru.close()


def drain(topic, partitions, isolation, timeout=30):
    """Every record value of the topic at that isolation level, read from offset 0 to the
    end (partition EOF on every partition). Call after wait_stable."""
    c = reader(isolation)
    c.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    out, eof = [], set()
    deadline = time.time() + timeout
    try:
        while eof != set(range(partitions)):
            if time.time() > deadline:
                fail("%s %s: no end of partition after %d s (EOF on %s, %s read)"
                     % (isolation, topic, timeout, sorted(eof), summary(out)))
            for m in c.consume(500, 0.5):
                if m.error():
                    if m.error().code() != KafkaError._PARTITION_EOF:
                        fail("%s %s: consume error %s" % (isolation, topic, m.error()))
                    eof.add(m.partition())
                    continue
                eof.discard(m.partition())
                out.append(m.value())
    finally:
        c.close()
    return out


def group_offsets(admin, group, topic, partitions, require_stable):
    """OffsetFetch through the AdminClient: partition -> committed offset (None if none)."""
    req = ConsumerGroupTopicPartitions(group, [TopicPartition(topic, p) for p in range(partitions)])
    res = admin.list_consumer_group_offsets([req], require_stable=require_stable,
                                            request_timeout=15)[group].result()
    out = {}
    for tp in res.topic_partitions:
        if tp.error:
            fail("OffsetFetch of group %s (require_stable=%s): %s [%d] gave %s"
                 % (group, require_stable, tp.topic, tp.partition, tp.error))
        out[tp.partition] = tp.offset if tp.offset >= 0 else None
    return out


# ---------------------------------------------------------------- scenarios

def confluent_commit_abort():
    """librdkafka: a committed transaction of 90 records over 3 partitions, an aborted one of
    60, and a committed one of 30. While the first is open the LSO stays at its first record;
    afterwards each partition holds its records plus one control batch per transaction, the
    LSO reaches the high watermark, read_committed sees exactly the committed 120 and
    read_uncommitted all 180."""
    topic = uid("txn-ca")
    create(topic, 3)
    p = txn_producer(uid("txn-ca"))
    first = [b"c%d" % i for i in range(90)]
    aborted = [b"a%d" % i for i in range(60)]
    last = [b"d%d" % i for i in range(30)]

    p.begin_transaction()
    send_all(p, topic, first, 3, "first transaction")
    rc, ru = reader("read_committed"), reader("read_uncommitted")
    lso, hw = ends(rc, topic, 3), ends(ru, topic, 3)
    rc.close()
    ru.close()
    if lso != [0, 0, 0] or hw != [30, 30, 30]:
        fail("with a transaction open on a new topic, read_committed end offsets are %s "
             "(want [0, 0, 0]: the LSO holds at the transaction's first offset) and the high "
             "watermarks %s (want 30 each)" % (lso, hw))
    p.commit_transaction(30)

    p.begin_transaction()
    send_all(p, topic, aborted, 3, "aborted transaction")
    p.abort_transaction(30)

    p.begin_transaction()
    send_all(p, topic, last, 3, "last transaction")
    p.commit_transaction(30)

    # Per partition: 30 records, COMMIT, 20, ABORT, 10, COMMIT.
    wait_stable(topic, 3, want=[63, 63, 63], what="after commit, abort, commit: ")
    got = drain(topic, 3, "read_committed")
    if sorted(got) != sorted(first + last):
        fail("read_committed read %s; want the 120 committed records once each" % summary(got))
    everything = drain(topic, 3, "read_uncommitted")
    if sorted(everything) != sorted(first + aborted + last):
        fail("read_uncommitted read %s; want all 180 records (the aborted ones included) and "
             "no control records" % summary(everything))


def confluent_consume_transform_produce():
    """librdkafka consume-transform-produce: a read_committed group member reads 90 input
    records; each transaction writes their transforms and the member's positions
    (send_offsets_to_transaction with its group metadata: TxnOffsetCommit with generation
    and member id, KIP-447) and commits. The second transaction is aborted after its offsets
    were sent: until then OffsetFetch returns the offsets of the last commit, after the abort
    too, and the member seeks back and redoes the work. In the end read_committed sees each
    transform once, and the group's committed offsets (OffsetFetch with require_stable, as
    librdkafka's committed() and the AdminClient send) are the input's end offsets."""
    src, dst = uid("txn-in"), uid("txn-out")
    group, tid = uid("txn-ctp"), uid("txn-ctp")
    create(src, 3)
    create(dst, 3)
    for part in range(3):
        scenarios.produce(src, 30, partition=part, value_prefix="in%d-" % part)
    inputs = sorted(b"in%d-%d" % (part, i) for part in range(3) for i in range(30))
    src_ends = wait_stable(src, 3, want=[30, 30, 30], what="the input topic ")

    c = Consumer({**COMMON, "group.id": group, "isolation.level": "read_committed",
                  "enable.auto.commit": False, "auto.offset.reset": "earliest",
                  "session.timeout.ms": 10000})
    c.subscribe([src])
    prod = txn_producer(tid)
    admin = AdminClient(COMMON)
    done, committed, aborted_outputs, txn = [], {}, 0, 0
    errors = []
    deadline = time.time() + 60
    while len(done) < len(inputs):
        if time.time() > deadline:
            fail("consume-transform-produce: %d of %d inputs done after 60 s (%d transactions)"
                 % (len(done), len(inputs), txn))
        msgs = []
        for m in c.consume(30, 1.0):
            if m.error():
                fail("consume-transform-produce: consume error %s" % m.error())
            msgs.append(m)
        if not msgs:
            continue
        prod.begin_transaction()
        for m in msgs:
            prod.produce(dst, key=m.value(), value=b"T(" + m.value() + b")",
                         partition=m.partition(),
                         on_delivery=lambda e, _m: errors.append(e) if e else None)
        positions = c.position(c.assignment())
        prod.send_offsets_to_transaction(positions, c.consumer_group_metadata(), 30)
        if txn == 1:
            if prod.flush(30) or errors:
                fail("consume-transform-produce: delivery failed: %s" % errors[:3])
            pending = group_offsets(admin, group, src, 3, require_stable=False)
            want = {part: committed.get(part) for part in range(3)}
            if pending != want:
                fail("consume-transform-produce: with offsets %s sent in an open transaction, "
                     "OffsetFetch gave %s; want the last committed %s (pending transactional "
                     "offsets stay invisible)"
                     % ({tp.partition: tp.offset for tp in positions}, pending, want))
            prod.abort_transaction(30)
            aborted_outputs += len(msgs)
            back = c.committed(c.assignment(), 10)
            now = {tp.partition: (tp.offset if tp.offset >= 0 else None) for tp in back}
            if now != want:
                fail("consume-transform-produce: after the abort the group's offsets are %s; "
                     "want %s (an abort discards the transaction's offsets)" % (now, want))
            for tp in back:
                c.seek(TopicPartition(src, tp.partition,
                                      tp.offset if tp.offset >= 0 else OFFSET_BEGINNING))
        else:
            prod.commit_transaction(30)
            if errors:
                fail("consume-transform-produce: delivery failed: %s" % errors[:3])
            done.extend(m.value() for m in msgs)
            committed.update({tp.partition: tp.offset for tp in positions if tp.offset >= 0})
        txn += 1
    c.close()
    if sorted(done) != inputs:
        fail("consume-transform-produce: the committed transactions handled %s" % summary(done))

    wait_stable(dst, 3, what="the output topic ")
    out = drain(dst, 3, "read_committed")
    want = sorted(b"T(" + v + b")" for v in inputs)
    if sorted(out) != want:
        missing = len(set(want) - set(out))
        fail("consume-transform-produce: read_committed output has %d records, %d distinct, "
             "%d transforms missing; want each of the 90 once" % (len(out), len(set(out)), missing))
    raw = drain(dst, 3, "read_uncommitted")
    if aborted_outputs == 0 or len(raw) != len(inputs) + aborted_outputs:
        fail("consume-transform-produce: read_uncommitted output has %d records; want %d "
             "(the %d of the aborted transaction are in the log)"
             % (len(raw), len(inputs) + aborted_outputs, aborted_outputs))

    want_offsets = {part: src_ends[part] for part in range(3)}
    fresh = Consumer({**COMMON, "group.id": group, "isolation.level": "read_committed",
                      "enable.auto.commit": False})
    got = {tp.partition: tp.offset for tp in
           fresh.committed([TopicPartition(src, part) for part in range(3)], 10)}
    fresh.close()
    if got != want_offsets:
        fail("consume-transform-produce: a fresh consumer's committed() gives %s; want the "
             "input's end offsets %s" % (got, want_offsets))
    stable = group_offsets(admin, group, src, 3, require_stable=True)
    if stable != want_offsets:
        fail("consume-transform-produce: OffsetFetch(require_stable) gives %s; want %s"
             % (stable, want_offsets))


def confluent_zombie_fencing():
    """librdkafka zombie fencing: producer A (transactional id T) has an open transaction with
    records in the log; producer B with the same T calls init_transactions, which must abort
    A's transaction (InitProducerId on an Ongoing transaction: fence with epoch + 1, abort,
    CONCURRENT_TRANSACTIONS until done). A's next produce and commit then fail with a fatal
    fencing error (the partition refuses A's epoch with INVALID_PRODUCER_EPOCH; EndTxn v0-1
    gets INVALID_PRODUCER_EPOCH). A's records never show under read_committed; B commits."""
    topic, tid = uid("txn-zombie"), uid("txn-zombie")
    create(topic, 1)
    a = txn_producer(tid)
    a.begin_transaction()
    zombie = [b"zombie%d" % i for i in range(10)]
    send_all(a, topic, zombie, 1, "producer A")

    b = txn_producer(tid)  # init_transactions(30): fences A and aborts its transaction

    late_errors, err = [], None
    try:
        a.produce(topic, value=b"zombie-late", partition=0,
                  on_delivery=lambda e, m: late_errors.append(e))
        a.flush(10)
        a.commit_transaction(10)
    except (KafkaException, SystemError) as e:
        # A fatal error raised from within flush()'s delivery callback comes out of the
        # C binding as a SystemError caused by the KafkaException.
        if isinstance(e, SystemError) and isinstance(e.__cause__, KafkaException):
            e = e.__cause__
        if not isinstance(e, KafkaException):
            raise
        err = e.args[0]
    if err is None:
        fail("fencing: producer A committed after B's init_transactions with the same "
             "transactional.id (late delivery: %s)" % late_errors)
    if not is_fenced(err):
        fail("fencing: producer A's commit failed with %r (code %s, fatal %s); want a fatal "
             "_FENCED / PRODUCER_FENCED / INVALID_PRODUCER_EPOCH (late delivery: %s)"
             % (err.str(), err.name(), err.fatal(), late_errors))

    mine = [b"b%d" % i for i in range(10)]
    b.begin_transaction()
    send_all(b, topic, mine, 1, "producer B")
    b.commit_transaction(30)

    wait_stable(topic, 1, what="after the fence: ")
    got = drain(topic, 1, "read_committed")
    if sorted(got) != sorted(mine):
        fail("fencing: read_committed read %s; want only B's 10 records" % summary(got))
    raw = drain(topic, 1, "read_uncommitted")
    if not set(zombie) <= set(raw):
        fail("fencing: read_uncommitted read %s; A's 10 records should be in the log (aborted)"
             % summary(raw))


def confluent_abandoned_transaction_times_out():
    """The coordinator aborts a transaction its producer abandoned: a librdkafka producer with
    transaction.timeout.ms=3000 produces 20 records in a transaction and then goes quiet (no
    call at all, the producer stays alive). The LSO holds at the transaction's start, then
    within 25 s moves past the records and the ABORT marker (needs the broker's
    transaction.abort.timed.out.transaction.cleanup.interval.ms to be small, see the
    docstring of this file). The records are invisible to read_committed and visible to
    read_uncommitted. The coordinator bumped the epoch when it aborted, so the abandoned
    producer's late commit is fenced; a new producer with the same id commits."""
    topic, tid = uid("txn-timeout"), uid("txn-timeout")
    create(topic, 1)
    p = txn_producer(tid, {"transaction.timeout.ms": 3000})
    p.begin_transaction()
    abandoned = [b"abandoned%d" % i for i in range(20)]
    send_all(p, topic, abandoned, 1, "abandoned transaction")
    t0 = time.time()
    rc, ru = reader("read_committed"), reader("read_uncommitted")
    try:
        lso, hw = ends(rc, topic, 1), ends(ru, topic, 1)
        if lso != [0] or hw != [20]:
            fail("abandoned transaction: right after its records the LSO is %s (want [0]) and "
                 "the high watermark %s (want [20])" % (lso, hw))
        while True:
            lso, hw = ends(rc, topic, 1), ends(ru, topic, 1)
            if lso == hw == [21]:
                break
            if time.time() - t0 > 25:
                fail("abandoned transaction: %.0f s after it went quiet (timeout 3 s) the LSO is "
                     "%s and the high watermark %s; want both [21] (20 records and the ABORT "
                     "marker the coordinator writes)" % (time.time() - t0, lso, hw))
            time.sleep(0.25)
    finally:
        rc.close()
        ru.close()

    got = drain(topic, 1, "read_committed")
    if got:
        fail("abandoned transaction: read_committed read %s; want none" % summary(got))
    raw = drain(topic, 1, "read_uncommitted")
    if sorted(raw) != sorted(abandoned):
        fail("abandoned transaction: read_uncommitted read %s; want the 20" % summary(raw))

    err = None
    try:
        p.commit_transaction(10)
    except KafkaException as e:
        err = e.args[0]
    if err is None or not is_fenced(err):
        fail("abandoned transaction: committing it after the coordinator aborted it gave %s; "
             "want a fatal fencing error (the abort bumps the producer epoch)"
             % (err and "%s (%s, fatal %s)" % (err.str(), err.name(), err.fatal())))
    del p

    q = txn_producer(tid)
    fresh = [b"after%d" % i for i in range(5)]
    q.begin_transaction()
    send_all(q, topic, fresh, 1, "the producer after the timeout")
    q.commit_transaction(30)
    wait_stable(topic, 1, want=[27], what="after the timed-out transaction: ")
    got = drain(topic, 1, "read_committed")
    if sorted(got) != sorted(fresh):
        fail("abandoned transaction: after a new producer's commit read_committed read %s; "
             "want its 5" % summary(got))


def kafka_python_transactions():
    """kafka-python 3.0.12 (KafkaProducer has init/begin/commit/abort_transaction and
    send_offsets_to_transaction): commit 40 records over 2 partitions, abort 20, commit 10
    with offsets for a group given by name (TxnOffsetCommit v3, generation -1, no member:
    the group has no members, so the broker accepts it). KafkaConsumer with
    isolation_level='read_committed' reads exactly the 50 committed; its end_offsets
    (ListOffsets, read_committed) is the LSO; committed() (OffsetFetch v8 with
    require_stable, as kafka-python sends for read_committed) gives the sent offsets."""
    from kafka import KafkaConsumer, KafkaProducer, OffsetAndMetadata
    from kafka import TopicPartition as KTP
    topic, group, tid = uid("txn-kp"), uid("txn-kp"), uid("txn-kp")
    create(topic, 2)
    p = KafkaProducer(bootstrap_servers=B, transactional_id=tid, linger_ms=5,
                      max_block_ms=30000)
    p.init_transactions()

    def send(values):
        futures = [p.send(topic, value=v, key=v, partition=i % 2) for i, v in enumerate(values)]
        p.flush(timeout=30)
        for f in futures:
            f.get(timeout=10)

    first = [b"kc%d" % i for i in range(40)]
    aborted = [b"ka%d" % i for i in range(20)]
    last = [b"kd%d" % i for i in range(10)]
    p.begin_transaction()
    send(first)
    p.commit_transaction()
    p.begin_transaction()
    send(aborted)
    p.abort_transaction()
    p.begin_transaction()
    send(last)
    p.send_offsets_to_transaction({KTP(topic, 0): OffsetAndMetadata(7, "", -1),
                                   KTP(topic, 1): OffsetAndMetadata(3, "", -1)}, group)
    p.commit_transaction()
    p.close(timeout=10)

    # Per partition: 20, COMMIT, 10, ABORT, 5, COMMIT.
    hw = wait_stable(topic, 2, want=[38, 38], what="kafka-python: ")
    tps = [KTP(topic, 0), KTP(topic, 1)]

    def read(isolation, want, settle=1.5, timeout=30):
        c = KafkaConsumer(bootstrap_servers=B, isolation_level=isolation,
                          enable_auto_commit=False, auto_offset_reset="earliest")
        try:
            if isolation == "read_committed":
                end = c.end_offsets(tps, timeout_ms=10000)
                if [end[tp] for tp in tps] != hw:
                    fail("kafka-python: end_offsets (read_committed) gives %s; want %s"
                         % ([end[tp] for tp in tps], hw))
            c.assign(tps)
            got, quiet_until = [], None
            deadline = time.time() + timeout
            while time.time() < deadline:
                for records in c.poll(timeout_ms=300).values():
                    got.extend(r.value for r in records)
                if len(got) >= want:
                    quiet_until = quiet_until or time.time() + settle
                    if time.time() >= quiet_until:
                        break
            return got
        finally:
            c.close()

    got = read("read_committed", 50)
    if sorted(got) != sorted(first + last):
        fail("kafka-python: read_committed read %s; want the 50 committed" % summary(got))
    raw = read("read_uncommitted", 70)
    if sorted(raw) != sorted(first + aborted + last):
        fail("kafka-python: read_uncommitted read %s; want all 70" % summary(raw))

    c = KafkaConsumer(bootstrap_servers=B, group_id=group, isolation_level="read_committed",
                      enable_auto_commit=False)
    try:
        offsets = [c.committed(tp, timeout_ms=10000) for tp in tps]
    finally:
        c.close()
    if offsets != [7, 3]:
        fail("kafka-python: the group's committed offsets are %s; want [7, 3] as sent in the "
             "transaction" % offsets)


def aiokafka_transactions():
    """aiokafka 0.14 (every transaction API at v0 only: InitProducerId, AddPartitionsToTxn,
    AddOffsetsToTxn, EndTxn, TxnOffsetCommit): `async with producer.transaction()` commits
    40 records over 2 partitions, one aborted by an exception inside the block (20 records),
    then 10 more with send_offsets_to_transaction for a group. AIOKafkaConsumer with
    isolation_level="read_committed" reads exactly the 50 committed; the group's committed
    offsets (OffsetFetch v1-3, no require_stable) become the sent ones."""
    import aiokafka
    from aiokafka import TopicPartition as ATP
    topic, group, tid = uid("txn-aio"), uid("txn-aio"), uid("txn-aio")
    create(topic, 2)
    first = [b"ac%d" % i for i in range(40)]
    aborted = [b"aa%d" % i for i in range(20)]
    last = [b"ad%d" % i for i in range(10)]
    tps = [ATP(topic, 0), ATP(topic, 1)]

    class Abort(Exception):
        pass

    async def produce():
        p = aiokafka.AIOKafkaProducer(bootstrap_servers=B, transactional_id=tid, linger_ms=5)
        await p.start()
        try:
            async def send(values):
                futures = [await p.send(topic, value=v, key=v, partition=i % 2)
                           for i, v in enumerate(values)]
                await asyncio.gather(*futures)

            async with p.transaction():
                await send(first)
            try:
                async with p.transaction():
                    await send(aborted)
                    raise Abort()
            except Abort:
                pass
            async with p.transaction():
                await send(last)
                await p.send_offsets_to_transaction({tps[0]: 7, tps[1]: 3}, group)
        finally:
            await p.stop()

    async def read(isolation, want, settle=1.5, timeout=30):
        c = aiokafka.AIOKafkaConsumer(bootstrap_servers=B, isolation_level=isolation,
                                      enable_auto_commit=False, auto_offset_reset="earliest")
        await c.start()
        try:
            c.assign(tps)
            await c.seek_to_beginning(*tps)
            got, quiet_until = [], None
            deadline = time.time() + timeout
            while time.time() < deadline:
                for records in (await c.getmany(timeout_ms=300)).values():
                    got.extend(r.value for r in records)
                if len(got) >= want:
                    quiet_until = quiet_until or time.time() + settle
                    if time.time() >= quiet_until:
                        break
            return got
        finally:
            await c.stop()

    async def committed_offsets():
        c = aiokafka.AIOKafkaConsumer(bootstrap_servers=B, group_id=group,
                                      enable_auto_commit=False)
        await c.start()
        try:
            # OffsetFetch v1-3 has no require_stable: the commit shows once the COMMIT
            # marker reached __consumer_offsets, which may be just after EndTxn returned.
            deadline = time.time() + 10
            while True:
                got = [await c.committed(tp) for tp in tps]
                if got == [7, 3] or time.time() > deadline:
                    return got
                if any(o not in (None, 7, 3) for o in got):
                    return got
                await asyncio.sleep(0.2)
        finally:
            await c.stop()

    asyncio.run(asyncio.wait_for(produce(), 60))
    wait_stable(topic, 2, want=[38, 38], what="aiokafka: ")
    got = asyncio.run(asyncio.wait_for(read("read_committed", 50), 60))
    if sorted(got) != sorted(first + last):
        fail("aiokafka: read_committed read %s; want the 50 committed" % summary(got))
    raw = asyncio.run(asyncio.wait_for(read("read_uncommitted", 70), 60))
    if sorted(raw) != sorted(first + aborted + last):
        fail("aiokafka: read_uncommitted read %s; want all 70" % summary(raw))
    offsets = asyncio.run(asyncio.wait_for(committed_offsets(), 30))
    if offsets != [7, 3]:
        fail("aiokafka: the group's committed offsets are %s; want [7, 3] as sent in the "
             "transaction" % offsets)


SCENARIOS = [
    ("confluent: commit, abort, LSO", confluent_commit_abort, 90),
    ("confluent: consume-transform-produce", confluent_consume_transform_produce, 150),
    ("confluent: zombie producer fenced", confluent_zombie_fencing, 90),
    ("confluent: abandoned transaction aborted", confluent_abandoned_transaction_times_out, 120),
    ("kafka-python: commit, abort, offsets", kafka_python_transactions, 120),
    ("aiokafka: commit, abort, offsets", aiokafka_transactions, 120),
]


def run(name, fn, limit):
    """Runs one scenario under a watchdog: on failure, an exception or the time limit the
    process ends at once with exit status 1 (client threads cannot hold it up)."""
    def expired():
        print("FAIL %s: not finished after %d s" % (name, limit), flush=True)
        os._exit(1)

    watchdog = threading.Timer(limit, expired)
    watchdog.daemon = True
    watchdog.start()
    try:
        scenario(name)(fn)
        sys.stdout.flush()
    except SystemExit as e:  # fail()
        sys.stdout.flush()
        os._exit(e.code if isinstance(e.code, int) else 1)
    except Exception as e:
        traceback.print_exc()
        print("FAIL %s: %s: %s" % (name, type(e).__name__, e), flush=True)
        os._exit(1)
    finally:
        watchdog.cancel()


if __name__ == "__main__":
    chosen = SCENARIOS
    if len(sys.argv) > 1:
        chosen = [s for s in SCENARIOS if s[1].__name__ == sys.argv[1]]
        if not chosen:
            fail("unknown scenario %s; one of %s"
                 % (sys.argv[1], ", ".join(s[1].__name__ for s in SCENARIOS)))
    for name, fn, limit in chosen:
        run(name, fn, limit)
    print("PASS transactions", flush=True)
    # Skip interpreter teardown: destroying librdkafka handles (one of them fenced) can take
    # a while and says nothing about the broker.
    os._exit(0)
