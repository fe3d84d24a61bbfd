// Smoke test with KafkaJS 2.2.4 (pure JS; gzip built in, snappy/lz4/zstd via codec plugins).
// env: BOOTSTRAP (localhost:9092) N (1000) CODEC (none|gzip|snappy|lz4|zstd)
//      PARTITIONS (3) TOPIC (smoke-kafkajs-<codec>) TIMEOUT (60 s) PER_SEND (100 messages)
// run from clients/node (where kafkajs + codec packages are installed).
const path = require('path');
const req = (m) => require(require.resolve(m, { paths: [__dirname, process.cwd()] }));
const { Kafka, CompressionTypes, CompressionCodecs, logLevel } = req('kafkajs');

const B = process.env.BOOTSTRAP || 'localhost:9092';
const N = parseInt(process.env.N || '1000', 10);
const CODEC = process.env.CODEC || 'none';
const PARTS = parseInt(process.env.PARTITIONS || '3', 10);
const TOPIC = process.env.TOPIC || `smoke-kafkajs-${CODEC}`;
const TIMEOUT = 1000 * parseFloat(process.env.TIMEOUT || '60');
// KafkaJS 2.2.4 keeps, across the retries of one send(), the answers of the brokers that
// answered; a partition whose leader moved to one of them during the send is never sent
// again, and the send resolves without it. Sends through a leader change use one
// message per send (PER_SEND=1), so that each goes to one partition.
const PER_SEND = parseInt(process.env.PER_SEND || '100', 10);
const RUN = Math.random().toString(16).slice(2, 10);  // values are `${RUN}-${i}`
const GROUP = `smoke-kafkajs-${Math.random().toString(16).slice(2, 10)}`;

// Codec plugins (KafkaJS only ships GZIP).
if (CODEC === 'snappy') CompressionCodecs[CompressionTypes.Snappy] = req('kafkajs-snappy');
if (CODEC === 'lz4') { const LZ4 = req('kafkajs-lz4'); CompressionCodecs[CompressionTypes.LZ4] = new LZ4().codec; }
if (CODEC === 'zstd') {
  // @kafkajs/zstd needs a native build that fails on Node 20; a 6-line codec over @mongodb-js/zstd instead.
  const zstd = req('@mongodb-js/zstd');
  CompressionCodecs[CompressionTypes.ZSTD] = () => ({
    compress: async (encoder) => zstd.compress(encoder.buffer),
    decompress: async (buf) => zstd.decompress(buf),
  });
}
const codecType = { none: CompressionTypes.None, gzip: CompressionTypes.GZIP, snappy: CompressionTypes.Snappy,
  lz4: CompressionTypes.LZ4, zstd: CompressionTypes.ZSTD }[CODEC];

(async () => {
  const kafka = new Kafka({ clientId: 'smoke-kafkajs', brokers: B.split(','), logLevel: logLevel.WARN });
  const admin = kafka.admin();
  await admin.connect();
  try {
    const created = await admin.createTopics({ topics: [{ topic: TOPIC, numPartitions: PARTS, replicationFactor: 1 }] });
    console.log(created ? 'created' : 'topic exists', TOPIC);
  } catch (e) { console.log('createTopics:', e.message, '(continuing)'); }

  const producer = kafka.producer({ idempotent: true, maxInFlightRequests: 1 });
  await producer.connect();
  const msgs = [...Array(N).keys()].map((i) => ({ key: String(i), value: `${RUN}-${i}` }));
  for (let i = 0; i < N; i += PER_SEND) {
    await producer.send({ topic: TOPIC, acks: -1, compression: codecType, messages: msgs.slice(i, i + PER_SEND) });
  }
  await producer.disconnect();
  console.log('produced', N);

  const consumer = kafka.consumer({ groupId: GROUP });
  await consumer.connect();
  await consumer.subscribe({ topic: TOPIC, fromBeginning: true });
  const seen = new Set();
  await new Promise((resolve) => {
    const t = setTimeout(resolve, TIMEOUT);
    consumer.run({ eachMessage: async ({ message }) => {   // autoCommit on: commits after each batch
      const v = message.value.toString(); if (v.startsWith(RUN)) seen.add(v);
      if (seen.size >= N) { clearTimeout(t); resolve(); }
    } });
  });
  await consumer.commitOffsets([]).catch(() => {});
  await consumer.disconnect();  // final auto-commit happens on stop
  const offs = await admin.fetchOffsets({ groupId: GROUP, topics: [TOPIC] });
  const total = offs[0].partitions.reduce((s, p) => s + Math.max(0, parseInt(p.offset, 10)), 0);
  await admin.disconnect();
  let missing = 0; for (let i = 0; i < N; i++) if (!seen.has(`${RUN}-${i}`)) missing++;
  console.log('consumed', seen.size, 'missing', missing, 'committed-sum', total);
  if (missing || total < N) { console.log(`FAIL kafkajs codec=${CODEC}`); process.exit(1); }
  console.log(`PASS kafkajs codec=${CODEC} n=${N}`);
})().catch((e) => { console.error('FAIL', e); process.exit(1); });
