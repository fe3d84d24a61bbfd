#!/usr/bin/env python3
"""The consume-transform-produce pipeline of the exactly-once crash test (exactly_once.py).

Reads the input topic with isolation.level=read_committed, writes one output record per
input record (value "out:<input value>", to the same partition number of the output
topic), and commits the input offsets in the same transaction (send_offsets_to_transaction),
through confluent-kafka (librdkafka). One transaction per poll of up to BATCH records.
Every ABORT_EVERY-th transaction, at random, is aborted on purpose after its outputs reached
the broker, and its inputs are read again: the log then holds aborted data that a
read_committed reader must not see.

It is killed with SIGKILL at random moments; a new one takes its place with the same
transactional.id, which fences what the killed one left open. It prints one line per ended
transaction ("commit N", "abort N why") so the test can count them, and exits 3 on an error
the producer cannot go on from.

    eos_pipeline.py BOOTSTRAP INPUT OUTPUT PARTITIONS SEED
"""
import faulthandler
import os
import random
import signal
import sys
import time

from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition

GROUP = "eos-pipeline"
TRANSACTIONAL_ID = "eos-pipeline"
BATCH = 200
ABORT_EVERY = 8  # on average: one transaction in eight is aborted on purpose
# How long one call may wait for a broker that is restarting before it is tried again.
CALL_TIMEOUT = 10


def say(line):
    print(line, flush=True)


def retrying(what, call):
    """Calls `call` until it succeeds or fails with an error that is not retriable.
    Returns None, or the KafkaError that says the transaction must be aborted."""
    while True:
        try:
            call()
            return None
        except KafkaException as e:
            err = e.args[0]
            if err.fatal():
                say("fatal %s: %s" % (what, err))
                sys.exit(3)
            if err.txn_requires_abort():
                return err
            if err.retriable() or err.code() in (KafkaError._TIMED_OUT, KafkaError._TRANSPORT):
                # Said so that a pipeline that stops moving shows where it is stuck.
                say("retry %s at %s: %s" % (what, time.strftime("%H:%M:%S"), err))
                time.sleep(0.1)
                continue
            say("fatal %s (not retriable): %s" % (what, err))
            sys.exit(3)


def main():
    # The test sends SIGUSR1 to a run that stops moving: its stack goes to the log.
    faulthandler.register(signal.SIGUSR1)
    bootstrap, input_topic, output_topic, partitions, seed = sys.argv[1:6]
    partitions = int(partitions)
    rng = random.Random(int(seed))
    # EOS_PIPELINE_DEBUG=eos (librdkafka's debug contexts) logs the producer's transaction
    # steps to the run's log.
    debug = {"debug": os.environ["EOS_PIPELINE_DEBUG"]} if os.environ.get("EOS_PIPELINE_DEBUG") else {}
    producer = Producer({
        **debug,
        "bootstrap.servers": bootstrap,
        "transactional.id": TRANSACTIONAL_ID,
        "transaction.timeout.ms": 30000,
        "message.timeout.ms": 25000,
        "linger.ms": 5,
        "reconnect.backoff.ms": 20,
        "reconnect.backoff.max.ms": 200,
        "retry.backoff.ms": 50,
        "log_level": 7 if debug else 2,
    })
    # First fence whatever the killed predecessor left open (its transaction is aborted
    # before this returns), and only then read the offsets it committed.
    if retrying("init_transactions", lambda: producer.init_transactions(CALL_TIMEOUT)):
        say("fatal init_transactions: abortable")
        sys.exit(3)
    consumer = Consumer({
        "bootstrap.servers": bootstrap,
        "group.id": GROUP,
        "isolation.level": "read_committed",
        "enable.auto.commit": False,
        "auto.offset.reset": "earliest",
        "reconnect.backoff.ms": 20,
        "reconnect.backoff.max.ms": 200,
        "log_level": 2,
    })
    # Assigned, not subscribed: a killed member would hold up a rebalance for its session
    # timeout. The offsets still go to the group, in the transaction.
    consumer.assign([TopicPartition(input_topic, p) for p in range(partitions)])
    say("started")
    while True:
        msgs = consumer.consume(num_messages=BATCH, timeout=0.2)
        msgs = [m for m in msgs if m.error() is None]
        if not msgs:
            continue
        producer.begin_transaction()
        first = {}
        last = {}
        for m in msgs:
            first.setdefault(m.partition(), m.offset())
            last[m.partition()] = m.offset()
            while True:
                try:
                    producer.produce(output_topic, value=b"out:" + m.value(),
                                     key=("%d:%d" % (m.partition(), m.offset())).encode(),
                                     partition=m.partition())
                    break
                except BufferError:
                    producer.poll(0.05)
        offsets = [TopicPartition(input_topic, p, o + 1) for p, o in sorted(last.items())]
        why = None
        if rng.randrange(ABORT_EVERY) == 0:
            # The outputs reach the log before the abort, so that there is aborted data.
            producer.flush(CALL_TIMEOUT)
            why = "on purpose"
        if why is None:
            err = retrying("send_offsets_to_transaction",
                           lambda: producer.send_offsets_to_transaction(
                               offsets, consumer.consumer_group_metadata(), CALL_TIMEOUT))
            if err is None:
                err = retrying("commit_transaction",
                               lambda: producer.commit_transaction(CALL_TIMEOUT))
            if err is None:
                say("commit %d" % len(msgs))
                continue
            why = str(err)
        if retrying("abort_transaction", lambda: producer.abort_transaction(CALL_TIMEOUT)):
            say("fatal abort_transaction: abortable")
            sys.exit(3)
        say("abort %d %s" % (len(msgs), why))
        # Read the aborted inputs again.
        for p, o in first.items():
            consumer.seek(TopicPartition(input_topic, p, o))


if __name__ == "__main__":
    main()
