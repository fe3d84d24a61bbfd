#!/usr/bin/env python3
"""Exactly-once under kill -9: a consume-transform-produce pipeline through transactions.

The pipeline (eos_pipeline.py: confluent-kafka, read_committed, one transaction per batch,
input offsets committed in the transaction, some transactions aborted on purpose) turns
every record of an input topic into one record of an output topic. In every cycle this
test kills both the pipeline and the broker with SIGKILL, each at a random moment and in a
random order, and starts them again, while input keeps coming (idempotent, acks=all, at a
steady rate, riding over the restarts). Kills
land in the middle of transactions, of commits (PrepareCommit written, markers not yet),
of offset commits and of the coordinator's loading.

At the end it lets the pipeline catch up, and an independent reader (kafka-python, not
librdkafka) reads the output topic:
  - with isolation_level=read_committed: every acknowledged input record's output exactly
    once, and nothing else;
  - with read_uncommitted: more records than that, which shows that aborted data did reach
    the log (and that the first check could fail).

    exactly_once.py WEIR [--cycles N] [--seed S] [--rate R]

A pipeline run that ends on its own fails the test. One that says nothing for 45 s while its
input waits is killed with -9 and replaced, as a supervisor would: librdkafka can block in
send_offsets_to_transaction past its timeout (confluentinc/librdkafka#5456); a run stalled
anywhere else fails the test, as the broker may be what it waits on.

Prints a report line and exits 1 if any check fails.
"""
import argparse
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time

from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from kafka import KafkaConsumer
from kafka import TopicPartition as KPTopicPartition

from crash_suite import Broker, free_port

INPUT, OUTPUT = "eos-in", "eos-out"
PARTITIONS = 4
HERE = os.path.dirname(os.path.abspath(__file__))
# A pipeline run that says nothing for this long while input waits is stuck (its
# transaction timeout is 30 s: by then the coordinator has aborted what it held open).
WATCHDOG_S = 45


def stack_top(log):
    """The innermost line of eos_pipeline.py in the last stack faulthandler wrote to a
    run's log, as source text: the call the run was in."""
    with open(log) as f:
        lines = f.read().splitlines()
    starts = [i for i, l in enumerate(lines) if l.startswith(("Current thread", "Thread 0x"))]
    if not starts:
        return "no stack in the log"
    with open(os.path.join(HERE, "eos_pipeline.py")) as f:
        source = f.read().splitlines()
    for line in lines[starts[-1] + 1:]:
        m = re.match(r'\s+File ".*eos_pipeline.py", line (\d+) in (\S+)', line)
        if m:
            return "%s, line %s: %s" % (m.group(2), m.group(1),
                                        source[int(m.group(1)) - 1].strip())
    return "no frame of eos_pipeline.py in the stack"


class Pipeline:
    def __init__(self, work, bootstrap, seed):
        self.work, self.bootstrap, self.seed = work, bootstrap, seed
        self.proc = None
        self.runs = 0
        # Runs that ended on their own before they were killed: (run, exit code).
        self.ended = []
        # Runs that stopped moving and were killed by the watchdog: (run, where).
        self.stalled = []

    def start(self):
        self.runs += 1
        out = open(os.path.join(self.work, "pipeline-%d.log" % self.runs), "w")
        # faulthandler: a run that crashes in librdkafka leaves a traceback in its log.
        self.proc = subprocess.Popen(
            [sys.executable, "-X", "faulthandler", os.path.join(HERE, "eos_pipeline.py"),
             self.bootstrap, INPUT,
             OUTPUT, str(PARTITIONS), str(self.seed + self.runs)],
            stdout=out, stderr=subprocess.STDOUT)

    def kill9(self):
        if self.proc.poll() is None:
            self.proc.kill()
        else:
            self.ended.append((self.runs, self.proc.returncode))
        self.proc.wait()

    def log_path(self, run=None):
        return os.path.join(self.work, "pipeline-%d.log" % (run or self.runs))

    def restart_if_stalled(self, quiet_for):
        """The watchdog an application would have: a run whose log has said nothing for
        `quiet_for` seconds while its input is not all committed is killed with -9 (as every
        cycle does anyway) and replaced. Its Python stack goes to its log first, and the
        call it was stuck in to the report. librdkafka can block in
        send_offsets_to_transaction past its timeout when its group coordinator connection
        went down (confluentinc/librdkafka#5456, #5511); nothing a broker answers can
        unblock it, as it sends nothing."""
        if self.proc.poll() is not None:
            return
        if time.time() - os.path.getmtime(self.log_path()) < quiet_for:
            return
        self.proc.send_signal(signal.SIGUSR1)
        time.sleep(1)
        self.stalled.append((self.runs, stack_top(self.log_path())))
        print("  run %d stalled in: %s" % self.stalled[-1], flush=True)
        self.kill9()
        self.start()

    def restart_if_ended(self):
        """Starts a new run if the current one ended on its own (as a supervisor would)."""
        if self.proc.poll() is not None:
            self.ended.append((self.runs, self.proc.returncode))
            self.start()

    def tally(self):
        """Over every run: transactions committed, aborted on purpose, aborted on an
        error, runs that stopped on a fatal error, and the first fatal error's line."""
        commits = purposeful = on_error = fatals = 0
        first_fatal = None
        for run in range(1, self.runs + 1):
            with open(os.path.join(self.work, "pipeline-%d.log" % run)) as f:
                for line in f:
                    if line.startswith("commit "):
                        commits += 1
                    elif line.startswith("abort "):
                        if line.rstrip().endswith("on purpose"):
                            purposeful += 1
                        else:
                            on_error += 1
                    elif line.startswith("fatal") or line.startswith("Traceback"):
                        fatals += 1
                        first_fatal = first_fatal or "run %d: %s" % (run, line.strip())
        return commits, purposeful, on_error, fatals, first_fatal


class Inputs(threading.Thread):
    """Writes input records 0, 1, 2 ... at a steady rate (idempotent, acks=all) until told
    to stop, riding over the broker's restarts as an application's producer would; keeps
    what was acknowledged and what failed."""

    def __init__(self, bootstrap, rate):
        super().__init__(daemon=True)
        self.rate = rate
        self.acked, self.failed = set(), []
        self.sent = 0
        self.stopping = threading.Event()
        self.producer = Producer({
            "bootstrap.servers": bootstrap, "enable.idempotence": True, "linger.ms": 5,
            # Long enough to ride out every restart: inputs fail only if something is wrong.
            "message.timeout.ms": 120000, "reconnect.backoff.ms": 20,
            "reconnect.backoff.max.ms": 200, "retry.backoff.ms": 50, "log_level": 2})

    def delivered(self, err, msg):
        if err is None:
            self.acked.add(int(msg.value()))
        else:
            self.failed.append(str(err))

    def run(self):
        per_tick = max(1, self.rate // 100)
        while not self.stopping.is_set():
            tick = time.time()
            for _ in range(per_tick):
                try:
                    self.producer.produce(INPUT, value=b"%d" % self.sent,
                                          partition=self.sent % PARTITIONS,
                                          on_delivery=self.delivered)
                except BufferError:
                    break
                self.sent += 1
            self.producer.poll(0)
            time.sleep(max(0.0, 0.01 - (time.time() - tick)))

    def finish(self):
        """Stops writing and waits for every acknowledgement; the records left over."""
        self.stopping.set()
        self.join()
        return self.producer.flush(180)


def group_caught_up(bootstrap, timeout, pipeline):
    """Waits until the pipeline's group has committed the end of every input partition,
    restarting the pipeline if a run ends on its own meanwhile."""
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "eos-pipeline",
                  "enable.auto.commit": False, "log_level": 2})
    deadline = time.time() + timeout
    try:
        ends = {p: c.get_watermark_offsets(TopicPartition(INPUT, p), timeout=30)[1]
                for p in range(PARTITIONS)}
        while time.time() < deadline:
            got = c.committed([TopicPartition(INPUT, p) for p in range(PARTITIONS)], timeout=30)
            if all(tp.offset >= ends[tp.partition] for tp in got):
                return True
            pipeline.restart_if_ended()
            pipeline.restart_if_stalled(WATCHDOG_S)
            time.sleep(0.5)
        return False
    finally:
        c.close()


def stuck(weir, bootstrap, pipeline):
    """Says where a pipeline that stopped moving is: its Python stack (in its log), and
    what the broker says of its transaction and its group."""
    if pipeline.proc.poll() is None:
        pipeline.proc.send_signal(signal.SIGUSR1)
        time.sleep(1)
    print("  the last pipeline run (%d) is stuck; its log ends:" % pipeline.runs)
    with open(os.path.join(pipeline.work, "pipeline-%d.log" % pipeline.runs)) as f:
        for line in f.readlines()[-25:]:
            print("    " + line.rstrip())
    for args in (["transactions", "describe", "--transactional-id", "eos-pipeline"],
                 ["groups", "describe", "--group", "eos-pipeline"]):
        out = subprocess.run([weir] + args + ["--bootstrap", bootstrap],
                             capture_output=True, text=True, timeout=60)
        print("  weir %s:\n%s%s" % (" ".join(args), out.stdout, out.stderr))


def read_output(bootstrap, isolation):
    """The output topic's values, read from the beginning by kafka-python."""
    consumer = KafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False,
                             isolation_level=isolation, auto_offset_reset="earliest",
                             consumer_timeout_ms=2000)
    tps = [KPTopicPartition(OUTPUT, p) for p in range(PARTITIONS)]
    consumer.assign(tps)
    consumer.seek_to_beginning(*tps)
    # For read_committed the end offsets are the last stable offsets.
    ends = consumer.end_offsets(tps)
    values = []
    deadline = time.time() + 300
    while time.time() < deadline:
        if all(consumer.position(tp) >= ends[tp] for tp in tps):
            break
        for records in consumer.poll(timeout_ms=500, max_records=100000).values():
            values.extend(r.value.decode() for r in records)
    consumer.close()
    return values


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("weir")
    ap.add_argument("--cycles", type=int, default=10)
    ap.add_argument("--seed", type=int, default=None)
    ap.add_argument("--rate", type=int, default=2000, help="input records per second")
    ap.add_argument("--keep", action="store_true", help="keep the data directory and logs")
    a = ap.parse_args()
    seed = a.seed if a.seed is not None else random.randrange(1 << 32)
    rng = random.Random(seed)
    work = tempfile.mkdtemp(prefix="weir-eos-")
    port = free_port()
    bootstrap = "127.0.0.1:%d" % port
    broker = Broker(os.path.abspath(a.weir), work, port, overrides=[
        "transaction.state.log.num.partitions=4",
        "transaction.state.log.segment.bytes=262144",
        "transaction.abort.timed.out.transaction.cleanup.interval.ms=1000"])
    pipeline = Pipeline(work, bootstrap, seed)
    print("exactly-once crash test: %d cycles, seed %d, work %s" % (a.cycles, seed, work),
          flush=True)
    try:
        broker.start()
        admin = AdminClient({"bootstrap.servers": bootstrap, "log_level": 2})
        for f in admin.create_topics([NewTopic(t, PARTITIONS, 1)
                                      for t in (INPUT, OUTPUT)]).values():
            f.result(30)
        run(a, seed, rng, work, bootstrap, broker, pipeline)
    finally:
        for proc in (pipeline.proc, broker.proc):
            if proc is not None and proc.poll() is None:
                proc.kill()
                proc.wait()


def run(a, seed, rng, work, bootstrap, broker, pipeline):
    failures = []
    inputs = Inputs(bootstrap, a.rate)
    inputs.start()
    pipeline.start()
    for cycle in range(1, a.cycles + 1):
        # Input keeps coming all along; both die at random moments of the cycle, in a random order; the pipeline comes
        # back at once, the broker after a moment without it.
        kills = [("pipeline", rng.uniform(0.2, 2.0)), ("broker", rng.uniform(0.2, 2.0))]
        kills.sort(key=lambda k: k[1])
        began = time.time()
        for who, at in kills:
            time.sleep(max(0.0, at - (time.time() - began)))
            if who == "pipeline":
                pipeline.kill9()
                pipeline.start()
            else:
                broker.kill9()
                time.sleep(rng.uniform(0.0, 0.3))
                broker.start()
        pipeline.restart_if_ended()  # the tally and the report say why it ended
        if cycle % 10 == 0 or cycle == a.cycles:
            print("  cycle %d: %d inputs sent so far" % (cycle, inputs.sent), flush=True)

    left = inputs.finish()
    if left or inputs.failed:
        failures.append("input records failed: %d undelivered after 180 s, %d failed, e.g. %s"
                        % (left, len(inputs.failed), inputs.failed[:3]))
    if not group_caught_up(bootstrap, 180, pipeline):
        failures.append("the pipeline did not commit the end of its input in 180 s")
        stuck(a.weir, bootstrap, pipeline)
    pipeline.kill9()
    # One more broker kill after the last commit, then read what it recovered.
    broker.kill9()
    broker.start()
    committed = read_output(bootstrap, "read_committed")
    uncommitted = read_output(bootstrap, "read_uncommitted")
    broker.stop()

    seen = {}
    strangers = 0
    for v in committed:
        if not v.startswith("out:") or not v[4:].isdigit() or int(v[4:]) not in inputs.acked:
            strangers += 1
            continue
        seen[int(v[4:])] = seen.get(int(v[4:]), 0) + 1
    missing = sorted(n for n in inputs.acked if n not in seen)
    duplicated = [n for n, c in seen.items() if c > 1]
    commits, purposeful, on_error, fatals, first_fatal = pipeline.tally()
    print("exactly-once (seed %d): %d cycles, each with kill -9 of the broker and of the "
          "pipeline; %d inputs, %d pipeline runs, %d transactions committed, %d aborted "
          "(%d on purpose, %d on an error), %d fatal pipeline stops, %d stalled runs killed "
          "by the watchdog; read_committed: %d outputs checked, %d missing, %d duplicated, "
          "%d not from an input; read_uncommitted: %d records (%d of them aborted data)"
          % (seed, a.cycles, len(inputs.acked), pipeline.runs, commits, purposeful + on_error,
             purposeful, on_error, fatals, len(pipeline.stalled), len(committed),
             len(missing), len(duplicated), strangers, len(uncommitted),
             len(uncommitted) - len(committed)), flush=True)

    if missing:
        failures.append("%d inputs have no output, e.g. %s" % (len(missing), missing[:5]))
    if duplicated:
        failures.append("%d inputs have more than one output, e.g. %s"
                        % (len(duplicated), duplicated[:5]))
    if strangers:
        failures.append("%d outputs come from no input" % strangers)
    if len(uncommitted) <= len(committed):
        failures.append("read_uncommitted shows no aborted data: the check above proves nothing")
    if fatals:
        failures.append("%d pipeline runs stopped on a fatal error; first: %s"
                        % (fatals, first_fatal))
    # Only librdkafka's own hang is excused: a run stuck anywhere else (consume, commit,
    # init) may be waiting on the broker, and that is what this test is for.
    unexcused = [(run, where) for run, where in pipeline.stalled
                 if "send_offsets_to_transaction" not in where]
    if unexcused:
        failures.append("%d pipeline runs stalled outside send_offsets_to_transaction: %s"
                        % (len(unexcused), unexcused[:3]))
    crashed = [(run, code) for run, code in pipeline.ended if code != 3]
    if crashed:
        failures.append("%d pipeline runs ended on their own, not on a fatal Kafka error "
                        "(run, exit code): %s" % (len(crashed), crashed[:5]))
    if failures:
        for f in failures:
            print("FAIL " + f)
        print("logs kept in " + work)
        sys.exit(1)
    if a.keep:
        print("logs kept in " + work)
    else:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
