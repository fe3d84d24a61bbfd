// Transactions with KafkaJS 2.2.4 against the broker at $BOOTSTRAP (localhost:9092).
// KafkaJS sends InitProducerId v1 (to the transaction coordinator it finds with
// FindCoordinator key type 1), AddPartitionsToTxn v1, AddOffsetsToTxn v1, TxnOffsetCommit v1
// (no generation / member id), EndTxn v1, OffsetFetch v4 (no require_stable) and knows no
// PRODUCER_FENCED (90): fencing must reach it as INVALID_PRODUCER_EPOCH (47).
//
// A transactional producer ({transactionalId, idempotent: true, maxInFlightRequests: 1})
// runs three transactions on a 2-partition output topic, each with sendOffsets for a group
// on a source topic: commit (20 records, offsets 10/10), abort (10 records, offsets 15/15),
// commit (20 records, offsets 20/20). A consumer with readUncommitted: false then sees the
// 40 committed records once each and none of the aborted; one with readUncommitted: true
// sees all 50 (the aborted records are in the log); admin.fetchOffsets gives 10/10 after
// the first commit and 20/20 at the end, never the aborted 15.
// Prints `PASS kafkajs transactions`, or `FAIL ...` and exits 1. Run from anywhere; kafkajs
// is resolved from this directory's node_modules.
process.env.KAFKAJS_NO_PARTITIONER_WARNING = '1';
const req = (m) => require(require.resolve(m, { paths: [__dirname, process.cwd()] }));
const { Kafka, logLevel } = req('kafkajs');

const B = process.env.BOOTSTRAP || 'localhost:9092';
const RUN = Math.random().toString(16).slice(2, 10);
const OUT = `txn-kafkajs-out-${RUN}`;
const SRC = `txn-kafkajs-src-${RUN}`;
const GROUP = `txn-kafkajs-${RUN}`;
const TXN_ID = `txn-kafkajs-${RUN}`;
const LIMIT_MS = 120000;

class Failure extends Error {}
const fail = (msg) => { throw new Failure(msg); };
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

const watchdog = setTimeout(() => {
  console.log(`FAIL kafkajs transactions: not finished after ${LIMIT_MS / 1000} s`);
  process.exit(1);
}, LIMIT_MS);

const messages = (prefix, n) => [...Array(n).keys()].map((i) => ({
  key: `${prefix}${i}`, value: `${prefix}${i}`, partition: i % 2,
}));
const offsets = (o) => [{ topic: SRC, partitions: [{ partition: 0, offset: String(o) }, { partition: 1, offset: String(o) }] }];

function summary(values) {
  const counts = {};
  for (const v of values) { const k = v.replace(/[0-9]+$/, ''); counts[k] = (counts[k] || 0) + 1; }
  return `${values.length} records ${JSON.stringify(counts)}, ${values.length - new Set(values).size} duplicates`;
}

(async () => {
  const kafka = new Kafka({ clientId: 'txn-kafkajs', brokers: B.split(','), logLevel: logLevel.WARN });
  const admin = kafka.admin();
  await admin.connect();
  await admin.createTopics({
    waitForLeaders: true,
    topics: [{ topic: OUT, numPartitions: 2, replicationFactor: 1 },
      { topic: SRC, numPartitions: 2, replicationFactor: 1 }],
  });

  // The group's offsets, as admin.fetchOffsets (OffsetFetch v4, no require_stable) gives them.
  const groupOffsets = async () => {
    const res = await admin.fetchOffsets({ groupId: GROUP, topics: [SRC] });
    const t = res.find((x) => x.topic === SRC);
    return [0, 1].map((p) => {
      const e = t && t.partitions.find((x) => x.partition === p);
      return e ? String(e.offset) : 'none';
    });
  };
  const seenOffsets = [];
  // Without require_stable the commit shows once the COMMIT marker reached
  // __consumer_offsets, which can be just after EndTxn returned: wait for it a little.
  const waitOffsets = async (want, what) => {
    const deadline = Date.now() + 10000;
    let got;
    for (;;) {
      got = await groupOffsets();
      seenOffsets.push(...got);
      if (got.every((o) => o === String(want))) return;
      if (Date.now() > deadline) fail(`${what}: the group's offsets are ${got}, want ${want} on both partitions`);
      await sleep(200);
    }
  };

  const producer = kafka.producer({ transactionalId: TXN_ID, idempotent: true, maxInFlightRequests: 1 });
  await producer.connect();

  const committed = [];
  let txn = await producer.transaction();
  await txn.send({ topic: OUT, messages: messages('c', 20) });
  await txn.sendOffsets({ consumerGroupId: GROUP, topics: offsets(10) });
  await txn.commit();
  committed.push(...messages('c', 20).map((m) => m.value));
  await waitOffsets(10, 'after the first commit');

  txn = await producer.transaction();
  await txn.send({ topic: OUT, messages: messages('a', 10) });
  await txn.sendOffsets({ consumerGroupId: GROUP, topics: offsets(15) });
  await txn.abort();

  txn = await producer.transaction();
  await txn.send({ topic: OUT, messages: messages('d', 20) });
  await txn.sendOffsets({ consumerGroupId: GROUP, topics: offsets(20) });
  await txn.commit();
  committed.push(...messages('d', 20).map((m) => m.value));
  await producer.disconnect();

  await waitOffsets(20, 'at the end');
  if (seenOffsets.includes('15')) fail(`fetchOffsets once gave 15, the offset of the aborted transaction (${seenOffsets})`);

  // Reads the output topic from the beginning with a fresh group until `want` records came,
  // then 1.5 s more to catch extras.
  const read = async (readUncommitted, want) => {
    const consumer = kafka.consumer({ groupId: `txn-kafkajs-read-${Math.random().toString(16).slice(2, 10)}`, readUncommitted, maxWaitTimeInMs: 500 });
    await consumer.connect();
    await consumer.subscribe({ topic: OUT, fromBeginning: true });
    const got = [];
    await new Promise((resolve) => {
      const t = setTimeout(resolve, 40000);
      consumer.run({
        autoCommit: false,
        eachMessage: async ({ message }) => {
          got.push(message.value.toString());
          if (got.length === want) { clearTimeout(t); setTimeout(resolve, 1500); }
        },
      });
    });
    await consumer.disconnect();
    return got;
  };

  const seen = await read(false, committed.length);
  if (JSON.stringify([...seen].sort()) !== JSON.stringify([...committed].sort())) {
    fail(`readUncommitted: false read ${summary(seen)}; want the 40 committed (c, d) once each`);
  }
  const raw = await read(true, committed.length + 10);
  const want = [...committed, ...messages('a', 10).map((m) => m.value)];
  if (JSON.stringify([...raw].sort()) !== JSON.stringify(want.sort())) {
    fail(`readUncommitted: true read ${summary(raw)}; want all 50, the 10 aborted (a) included`);
  }
  await admin.disconnect();
  clearTimeout(watchdog);
  console.log('PASS kafkajs transactions');
  process.exit(0);
})().catch((e) => {
  console.log(`FAIL kafkajs transactions: ${e instanceof Failure ? e.message : (e && e.stack) || e}`);
  process.exit(1);
});
