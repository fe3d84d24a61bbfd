//! Kafka's `RecordAccumulator`: one queue of batches per partition. `append` adds a record
//! to the partition's last open batch, or to a new batch whose buffer comes from the
//! `BufferPool` (waiting for memory up to `max.block.ms`). The sender asks which batches are
//! ready — full, lingered long enough, flushed, or needed because memory is short — and
//! drains them per broker up to `max.request.size`. Failed batches come back at the head of
//! their queue, in sequence order, so order holds across retries.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};
use tokio::sync::{oneshot, Notify};
use weir_record::{
    BatchBuilder, Compression, CompressionConfig, CompressionRatioEstimator, Header,
    RECORD_BATCH_OVERHEAD,
};

use weir_kafka::TopicPartition;

use crate::error::{ClientError, Result};
use crate::producer::buffer_pool::BufferPool;
use crate::producer::record::{Callback, DeliveryListener, Notifier, RecordMetadata};

/// Gives a batch of `tp` holding `records` records its producer id, epoch and base
/// sequence, or `None` when the producer is not idempotent.
pub type AssignProducerFields<'a> =
    dyn FnMut(&TopicPartition, usize) -> Option<(i64, i16, i32)> + 'a;

/// One partition's batches, oldest first, behind a lock of their own: appending to one
/// partition never waits for the sender looking at another, and a producer that keeps the
/// queue's `Arc` (the producer's topic entry does) appends without any map lookup.
pub(crate) struct PartitionQueue {
    pub tp: TopicPartition,
    batches: Mutex<VecDeque<ProducerBatch>>,
}

impl PartitionQueue {
    fn lock(&self) -> std::sync::MutexGuard<'_, VecDeque<ProducerBatch>> {
        self.batches.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// Every partition's queue. Written only when a partition is first used; hashed with
/// foldhash rather than SipHash (the keys are our own topic names, not an attacker's).
type Queues = HashMap<TopicPartition, Arc<PartitionQueue>, foldhash::fast::RandomState>;

/// How a batch reports one record's outcome.
enum Completion {
    Future(oneshot::Sender<Result<RecordMetadata>>),
    Callback(Callback),
    /// `ProducerBatch::listeners[listener]`, with the record's token.
    Listener {
        listener: usize,
        token: u64,
    },
}

/// What the sender needs to know about one record once its batch is answered.
struct Thunk {
    timestamp: i64,
    key_size: i32,
    value_size: i32,
    completion: Completion,
}

/// A batch being filled, or closed and waiting to be sent (again).
pub(crate) struct ProducerBatch {
    pub tp: TopicPartition,
    builder: Option<BatchBuilder>,
    /// The closed batch's bytes, sent as they are on every attempt: each Produce request
    /// shares them (no copy), and they go back to the pool once the batch is done.
    pub bytes: Option<Bytes>,
    /// Bytes of pool memory this batch holds, returned when it is done.
    pooled: usize,
    thunks: Vec<Thunk>,
    /// The listeners the batch's records report to, each kept once however many records
    /// name it.
    listeners: Vec<Arc<dyn DeliveryListener>>,
    /// Whether every record reports to `listeners[0]`: then the batch's outcome goes to it
    /// in one call (`DeliveryListener::on_deliveries`).
    one_listener: bool,
    pub created: Instant,
    pub attempts: u32,
    /// Not to be sent before this (retry backoff).
    pub retry_at: Option<Instant>,
    /// Producer id, epoch and first sequence, set once and kept across retries.
    pub producer: Option<(i64, i16, i32)>,
    full: bool,
    uncompressed_size: usize,
}

impl ProducerBatch {
    pub fn record_count(&self) -> usize {
        self.thunks.len()
    }

    pub fn estimated_size(&self) -> usize {
        match (&self.bytes, &self.builder) {
            (Some(b), _) => b.len(),
            (None, Some(b)) => b.estimated_size_in_bytes(),
            _ => 0,
        }
    }

    fn is_full(&self) -> bool {
        self.full || self.builder.as_ref().is_some_and(|b| b.is_full())
    }

    /// Adds a record's report to the batch.
    fn push_thunk(&mut self, timestamp: i64, key_size: i32, value_size: i32, notifier: Notifier) {
        let completion = match notifier {
            Notifier::Future(tx) => Completion::Future(tx),
            Notifier::Callback(cb) => Completion::Callback(cb),
            Notifier::Listener(l, token) => {
                let same = |known: &Arc<dyn DeliveryListener>| {
                    std::ptr::addr_eq(Arc::as_ptr(known), Arc::as_ptr(l))
                };
                let listener = match self.listeners.iter().rposition(same) {
                    Some(i) => i,
                    None => {
                        self.listeners.push(l.clone());
                        self.listeners.len() - 1
                    }
                };
                Completion::Listener { listener, token }
            }
        };
        self.one_listener &= matches!(completion, Completion::Listener { listener: 0, .. });
        self.thunks.push(Thunk {
            timestamp,
            key_size,
            value_size,
            completion,
        });
    }

    /// Reports one record's outcome.
    fn report(listeners: &[Arc<dyn DeliveryListener>], c: Completion, r: Result<RecordMetadata>) {
        match c {
            Completion::Future(tx) => {
                let _ = tx.send(r);
            }
            Completion::Callback(cb) => cb(r),
            Completion::Listener { listener, token } => listeners[listener].on_delivery(token, r),
        }
    }

    /// Completes every record: offsets from `base_offset` on (or -1 with acks=0).
    pub fn complete(self, base_offset: i64, log_append_time: i64, pool: &BufferPool) {
        // The records' metadata share a copy of the topic's name made for this batch: the
        // producer's threads keep counting references to the topic entry's own, and this
        // runs on the I/O thread, so sharing that one would bounce its counter between
        // cores for every record.
        let topic: Arc<str> = Arc::from(&*self.tp.topic);
        let partition = self.tp.partition;
        let outcome = |i: usize, t: &Thunk| {
            Ok(RecordMetadata {
                topic: topic.clone(),
                partition,
                offset: if base_offset >= 0 {
                    base_offset + i as i64
                } else {
                    -1
                },
                timestamp: if log_append_time >= 0 {
                    log_append_time
                } else {
                    t.timestamp
                },
                serialized_key_size: t.key_size,
                serialized_value_size: t.value_size,
            })
        };
        self.report_all(outcome, pool);
    }

    /// Fails every record with `error`.
    pub fn fail(self, error: ClientError, pool: &BufferPool) {
        self.fail_each(|_| error.clone(), pool);
    }

    /// Fails record `i` (its index in the batch) with `error_of(i)`.
    pub fn fail_each(self, error_of: impl Fn(usize) -> ClientError, pool: &BufferPool) {
        self.report_all(|i, _| Err(error_of(i)), pool);
    }

    /// Reports record `i`'s outcome, `outcome(i, its thunk)`, to whoever waits for it (in
    /// one call when all report to one listener), then gives the batch's memory back.
    fn report_all(
        self,
        outcome: impl Fn(usize, &Thunk) -> Result<RecordMetadata>,
        pool: &BufferPool,
    ) {
        match self.listeners.first() {
            Some(listener) if self.one_listener => {
                listener.on_deliveries(&mut self.thunks.iter().enumerate().map(|(i, t)| {
                    let Completion::Listener { token, .. } = t.completion else {
                        unreachable!("one_listener: every record reports to the listener");
                    };
                    (token, outcome(i, t))
                }));
            }
            _ => {
                for (i, t) in self.thunks.into_iter().enumerate() {
                    let r = outcome(i, &t);
                    Self::report(&self.listeners, t.completion, r);
                }
            }
        }
        Self::release(self.bytes, self.builder, self.pooled, pool);
    }

    fn release(
        bytes: Option<Bytes>,
        builder: Option<BatchBuilder>,
        pooled: usize,
        pool: &BufferPool,
    ) {
        drop(builder);
        // The pool's own buffer (uncompressed batches are built in place) goes back to be
        // reused, once no request shares it any more.
        match bytes.map(Bytes::try_into_mut) {
            Some(Ok(b)) if b.capacity() == pooled => pool.deallocate(Vec::from(b)),
            _ => pool.deallocate_bytes(pooled),
        }
    }
}

/// Settings the accumulator needs.
#[derive(Debug, Clone)]
pub struct AccumulatorConfig {
    pub batch_size: usize,
    pub linger: Duration,
    pub compression: CompressionConfig,
    pub delivery_timeout: Duration,
    pub retry_backoff: Duration,
    pub retry_backoff_max: Duration,
    /// Batches carry the transactional bit (a `transactional.id` producer's).
    pub transactional: bool,
}

/// What `expire` removed: how many batches, and whether any had a sequence number (a
/// gap the idempotent producer must close).
#[derive(Debug, Default, PartialEq, Eq)]
pub(crate) struct Expired {
    pub batches: usize,
    pub sequenced: bool,
}

/// What `ready` found.
#[derive(Debug, Default)]
pub(crate) struct ReadyCheck {
    pub partitions: Vec<TopicPartition>,
    /// When to look again if nothing else happens.
    pub next_check: Option<Instant>,
}

/// Batches per partition.
pub(crate) struct Accumulator {
    cfg: AccumulatorConfig,
    pub pool: Arc<BufferPool>,
    queues: RwLock<Queues>,
    estimators: Mutex<HashMap<(Arc<str>, Compression), CompressionRatioEstimator>>,
    flushing: AtomicUsize,
    closing: AtomicBool,
    /// Records appended and not yet completed.
    incomplete: AtomicUsize,
    /// Wakes the sender (a batch filled, a flush, a close).
    pub wake_sender: Notify,
    /// Wakes flushes (a batch completed).
    pub batch_done: Notify,
    /// Batches queued per partition of each topic, as the sender's last `ready` pass saw
    /// them: what the adaptive partitioner weighs when it switches partitions. Kafka's
    /// accumulator keeps the same figures (`updatePartitionLoadStats`) from the same pass,
    /// so that switching costs no walk over every partition's queue.
    load_stats: Mutex<Arc<LoadStats>>,
}

/// Per topic, the number of batches queued for each partition (by index).
type LoadStats = Vec<(Arc<str>, Vec<usize>)>;

/// One topic's row of the load figures.
pub(crate) struct QueueLoad {
    stats: Arc<LoadStats>,
    row: Option<usize>,
}

impl QueueLoad {
    /// Batches queued for `partition` (0 if none were, or the topic is new).
    pub fn queued(&self, partition: usize) -> usize {
        self.row
            .and_then(|r| self.stats[r].1.get(partition).copied())
            .unwrap_or(0)
    }
}

/// The largest a batch of one record can be (Kafka's `estimateSizeInBytesUpperBound`).
fn one_record_batch_size(
    key: Option<&[u8]>,
    value: Option<&[u8]>,
    headers: &[Header<'_>],
) -> usize {
    RECORD_BATCH_OVERHEAD
        + weir_record::record::record_size(i32::MAX, i64::MAX, key, value, headers)
}

impl Accumulator {
    pub fn new(cfg: AccumulatorConfig, pool: Arc<BufferPool>) -> Self {
        Accumulator {
            cfg,
            pool,
            queues: RwLock::new(Queues::default()),
            estimators: Mutex::new(HashMap::new()),
            flushing: AtomicUsize::new(0),
            closing: AtomicBool::new(false),
            incomplete: AtomicUsize::new(0),
            wake_sender: Notify::new(),
            batch_done: Notify::new(),
            load_stats: Mutex::new(Arc::default()),
        }
    }

    fn queues(&self) -> std::sync::RwLockReadGuard<'_, Queues> {
        self.queues.read().unwrap_or_else(|e| e.into_inner())
    }

    /// The queue of `tp`, made on first use.
    pub fn queue(&self, tp: &TopicPartition) -> Arc<PartitionQueue> {
        if let Some(q) = self.queues().get(tp) {
            return q.clone();
        }
        let mut all = self.queues.write().unwrap_or_else(|e| e.into_inner());
        all.entry(tp.clone())
            .or_insert_with(|| {
                Arc::new(PartitionQueue {
                    tp: tp.clone(),
                    batches: Mutex::new(VecDeque::new()),
                })
            })
            .clone()
    }

    /// Batches waiting per partition of `topic` (for the adaptive partitioner), as of the
    /// sender's last pass over the queues.
    pub fn queue_load(&self, topic: &str) -> QueueLoad {
        let stats = self
            .load_stats
            .lock()
            .map(|s| s.clone())
            .unwrap_or_default();
        let row = stats.iter().position(|(t, _)| &**t == topic);
        QueueLoad { stats, row }
    }

    fn try_append(
        dq: &mut VecDeque<ProducerBatch>,
        timestamp: i64,
        key: Option<&[u8]>,
        value: Option<&[u8]>,
        headers: &[Header<'_>],
    ) -> Option<(bool, usize)> {
        let batch = dq.back_mut()?;
        let builder = batch.builder.as_mut()?;
        if !builder.has_room_for(timestamp, key, value, headers) {
            batch.full = true;
            return None;
        }
        let before = builder.uncompressed_records_size();
        builder.append(timestamp, key, value, headers).ok()?;
        let appended = builder.uncompressed_records_size() - before;
        batch.uncompressed_size += appended;
        Some((builder.is_full() || dq.len() > 1, appended))
    }

    /// Appends one record to `queue`. Returns whether its batch is now full (or a new batch
    /// was made) and the bytes it took, for the sticky partitioner.
    #[allow(clippy::too_many_arguments)]
    pub async fn append(
        &self,
        queue: &PartitionQueue,
        timestamp: i64,
        key: Option<&[u8]>,
        value: Option<&[u8]>,
        headers: &[Header<'_>],
        notifier: Notifier<'_>,
        max_block: Duration,
    ) -> Result<(bool, usize)> {
        if self.closing.load(Ordering::SeqCst) {
            return Err(ClientError::Closed);
        }
        let key_size = key.map_or(-1, |k| k.len() as i32);
        let value_size = value.map_or(-1, |v| v.len() as i32);
        {
            let mut dq = queue.lock();
            if let Some((full, n)) = Self::try_append(&mut dq, timestamp, key, value, headers) {
                let batch = dq
                    .back_mut()
                    .expect("try_append appended to the last batch");
                batch.push_thunk(timestamp, key_size, value_size, notifier);
                drop(dq);
                self.incomplete.fetch_add(1, Ordering::SeqCst);
                if full {
                    self.wake_sender.notify_one();
                }
                return Ok((full, n));
            }
        }
        // A new batch: memory first, outside the lock (this is where send blocks).
        let size = self
            .cfg
            .batch_size
            .max(one_record_batch_size(key, value, headers));
        let buf = self.pool.allocate(size, max_block).await?;
        let mut dq = queue.lock();
        if let Some((full, n)) = Self::try_append(&mut dq, timestamp, key, value, headers) {
            // Someone else made a batch meanwhile.
            let batch = dq
                .back_mut()
                .expect("try_append appended to the last batch");
            batch.push_thunk(timestamp, key_size, value_size, notifier);
            drop(dq);
            self.pool.deallocate(buf);
            self.incomplete.fetch_add(1, Ordering::SeqCst);
            return Ok((full, n));
        }
        let ratio = self
            .estimators
            .lock()
            .ok()
            .and_then(|e| {
                e.get(&(queue.tp.topic.clone(), self.cfg.compression.codec))
                    .map(|r| r.estimate())
            })
            .unwrap_or(1.0);
        let capacity = buf.capacity();
        let mut builder = BatchBuilder::with_buffer(buf, self.cfg.compression, 0, capacity)
            .estimated_compression_ratio(ratio);
        builder
            .append(timestamp, key, value, headers)
            .map_err(|e| ClientError::Config(format!("the record cannot be encoded: {e}")))?;
        let appended = builder.uncompressed_records_size();
        // Room for as many records as fit if they are like this one, so that filling the
        // batch does not regrow the list (records of 100 bytes: ~150 in 16 KiB).
        let thunks = Vec::with_capacity((capacity / appended.max(1)).clamp(1, 4096));
        let mut batch = ProducerBatch {
            tp: queue.tp.clone(),
            builder: Some(builder),
            bytes: None,
            pooled: capacity,
            thunks,
            listeners: Vec::new(),
            one_listener: true,
            created: Instant::now(),
            attempts: 0,
            retry_at: None,
            producer: None,
            full: false,
            uncompressed_size: appended,
        };
        batch.push_thunk(timestamp, key_size, value_size, notifier);
        dq.push_back(batch);
        drop(dq);
        self.incomplete.fetch_add(1, Ordering::SeqCst);
        self.wake_sender.notify_one();
        Ok((true, appended))
    }

    /// Partitions whose first batch may be sent now: full, lingered, flushing, closing, or
    /// memory is short.
    pub fn ready(&self, now: Instant) -> ReadyCheck {
        let forced = self.flushing.load(Ordering::SeqCst) > 0
            || self.closing.load(Ordering::SeqCst)
            || self.pool.queued() > 0;
        let q = self.queues();
        let mut out = ReadyCheck::default();
        let mut stats: LoadStats = Vec::new();
        // Partitions of one topic share its name's Arc, so rows are found by the Arc's
        // address; names are compared only the first time an address is seen.
        let mut rows: HashMap<*const u8, usize, foldhash::fast::RandomState> = HashMap::default();
        for (tp, queue) in q.iter() {
            let dq = queue.lock();
            let row = *rows.entry(tp.topic.as_ptr()).or_insert_with(|| {
                match stats.iter().position(|(t, _)| *t == tp.topic) {
                    Some(i) => i,
                    None => {
                        stats.push((tp.topic.clone(), Vec::new()));
                        stats.len() - 1
                    }
                }
            });
            let queued = &mut stats[row].1;
            let p = tp.partition.max(0) as usize;
            if queued.len() <= p {
                queued.resize(p + 1, 0);
            }
            queued[p] += dq.len();
            let Some(first) = dq.front() else { continue };
            if let Some(at) = first.retry_at {
                if at > now {
                    out.next_check = Some(out.next_check.map_or(at, |n| n.min(at)));
                    continue;
                }
            }
            let linger_done = first.created + self.cfg.linger;
            if forced
                || first.bytes.is_some()
                || dq.len() > 1
                || first.is_full()
                || linger_done <= now
            {
                out.partitions.push(tp.clone());
            } else {
                out.next_check = Some(out.next_check.map_or(linger_done, |n| n.min(linger_done)));
            }
        }
        drop(q);
        if let Ok(mut s) = self.load_stats.lock() {
            *s = Arc::new(stats);
        }
        out
    }

    /// Takes the first batch of `tp` if it fits in `budget` bytes (the first batch of a
    /// request always fits), closing it. `producer` assigns the producer fields (idempotence)
    /// to a batch that has none yet.
    pub fn take(
        &self,
        tp: &TopicPartition,
        budget: usize,
        first_in_request: bool,
        producer: &mut AssignProducerFields<'_>,
    ) -> Option<ProducerBatch> {
        let queue = self.queues().get(tp)?.clone();
        let mut dq = queue.lock();
        let size = dq.front()?.estimated_size();
        if !first_in_request && size > budget {
            return None;
        }
        let mut batch = dq.pop_front()?;
        drop(dq);
        let records = batch.record_count();
        if let (Some(bytes), None) = (batch.bytes.as_mut(), batch.producer) {
            // Built before an epoch bump cleared its producer state: new id, epoch and
            // sequence, written into the header (the CRC with them). No request holds
            // the bytes now (the batch is back in its queue), so this does not copy.
            if let Some((pid, epoch, seq)) = producer(tp, records) {
                let mut owned = BytesMut::from(std::mem::take(bytes));
                if let Ok(mut m) = weir_record::RecordBatchMut::parse(&mut owned) {
                    m.set_producer_state(pid, epoch, seq);
                    batch.producer = Some((pid, epoch, seq));
                }
                *bytes = owned.freeze();
            }
        }
        if batch.bytes.is_none() {
            if let Some(mut builder) = batch.builder.take() {
                // A split piece already carries its sequence; a fresh batch gets the next.
                let fields = match batch.producer {
                    Some(kept) => Some(kept),
                    None => producer(tp, batch.record_count()),
                };
                if let Some((pid, epoch, seq)) = fields {
                    builder.set_producer_state(pid, epoch, seq);
                    builder.set_transactional(self.cfg.transactional);
                    batch.producer = Some((pid, epoch, seq));
                }
                let codec = builder.compression();
                match builder.build() {
                    Ok(built) => {
                        if codec != Compression::None {
                            if let Ok(mut e) = self.estimators.lock() {
                                e.entry((tp.topic.clone(), codec))
                                    .or_default()
                                    .update(built.compression_ratio);
                            }
                        }
                        batch.bytes = Some(Bytes::from(built.bytes));
                    }
                    Err(e) => {
                        let n = batch.record_count();
                        batch.fail(
                            ClientError::Config(format!("building a batch: {e}")),
                            &self.pool,
                        );
                        self.done(n);
                        return None;
                    }
                }
            }
        }
        Some(batch)
    }

    /// Puts a batch that must be retried back in its queue, in producer-sequence order
    /// ahead of batches not yet sent, and holds it back for the retry backoff.
    pub fn reenqueue(&self, mut batch: ProducerBatch, now: Instant) {
        batch.attempts += 1;
        let exp = self.cfg.retry_backoff.as_millis() as u64
            * (1u64 << batch.attempts.min(10).saturating_sub(1));
        let backoff = Duration::from_millis(
            exp.min(self.cfg.retry_backoff_max.as_millis() as u64)
                .max(1),
        );
        // ±20% jitter, as Kafka's ExponentialBackoff.
        let jitter = 0.8 + fastrand::f64() * 0.4;
        batch.retry_at = Some(now + backoff.mul_f64(jitter));
        let queue = self.queue(&batch.tp);
        let mut dq = queue.lock();
        let seq = batch.producer.map(|p| p.2);
        let pos = dq
            .iter()
            .position(|b| match (seq, b.producer) {
                (Some(s), Some(other)) => other.2 > s,
                _ => true,
            })
            .unwrap_or(dq.len());
        dq.insert(pos, batch);
        drop(dq);
        self.wake_sender.notify_one();
    }

    /// Fails and removes batches older than `delivery.timeout.ms` that are still queued.
    pub fn expire(&self, now: Instant) -> Expired {
        let mut expired = Vec::new();
        {
            for queue in self.queues().values() {
                let mut dq = queue.lock();
                let overdue =
                    |b: &ProducerBatch| now.duration_since(b.created) >= self.cfg.delivery_timeout;
                while let Some(b) = dq.pop_front() {
                    if !overdue(&b) {
                        dq.push_front(b);
                        break;
                    }
                    expired.push(b);
                }
            }
        }
        let out = Expired {
            batches: expired.len(),
            sequenced: expired.iter().any(|b| b.producer.is_some()),
        };
        for b in expired {
            let ms = self.cfg.delivery_timeout.as_millis() as u64;
            let msg = format!(
                "{} record(s) for {}-{} expired",
                b.record_count(),
                b.tp.topic,
                b.tp.partition
            );
            self.done(b.record_count());
            b.fail(ClientError::Timeout { what: msg, ms }, &self.pool);
        }
        out
    }

    /// Forgets the producer id, epoch and sequence of every queued batch, after an epoch
    /// bump: each gets new ones (its header rewritten) when it is next drained.
    pub fn clear_producer_state(&self) {
        for queue in self.queues().values() {
            for b in queue.lock().iter_mut() {
                b.producer = None;
            }
        }
    }

    /// Notes that `records` records were completed (acked or failed).
    pub fn done(&self, records: usize) {
        self.incomplete.fetch_sub(records, Ordering::SeqCst);
        self.batch_done.notify_waiters();
    }

    pub fn incomplete(&self) -> usize {
        self.incomplete.load(Ordering::SeqCst)
    }

    pub fn begin_flush(&self) {
        self.flushing.fetch_add(1, Ordering::SeqCst);
        self.wake_sender.notify_one();
    }

    pub fn end_flush(&self) {
        self.flushing.fetch_sub(1, Ordering::SeqCst);
    }

    pub fn begin_close(&self) {
        self.closing.store(true, Ordering::SeqCst);
        self.wake_sender.notify_one();
    }

    pub fn is_closing(&self) -> bool {
        self.closing.load(Ordering::SeqCst)
    }

    /// Fails everything still queued (a forced close, an aborted transaction). Returns
    /// whether a failed batch had a sequence (a gap only a new epoch closes).
    pub fn abort_all(&self, error: ClientError) -> bool {
        let all: Vec<ProducerBatch> = self
            .queues()
            .values()
            .flat_map(|queue| std::mem::take(&mut *queue.lock()))
            .collect();
        let sequenced = all.iter().any(|b| b.producer.is_some());
        for b in all {
            self.done(b.record_count());
            b.fail(error.clone(), &self.pool);
        }
        sequenced
    }

    /// Splits a batch the broker refused as too large into smaller batches (one record
    /// each if it comes to that) and queues them in its place. The pieces keep
    /// the original's producer id and epoch and number their sequences on from its base
    /// sequence, so batches sent after it stay valid (as Kafka's `ProducerBatch.split`).
    /// A batch that cannot be split comes back to be failed.
    pub fn split_and_reenqueue(&self, batch: ProducerBatch) -> Result<usize, Box<ProducerBatch>> {
        let records = match batch
            .bytes
            .as_ref()
            .map(|b| weir_record::RecordBatch::parse(b))
        {
            Some(Ok(parsed)) => {
                match parsed.records(weir_kafka::limits::MAX_DECOMPRESSED_BATCH_BYTES) {
                    Ok(r) => r,
                    Err(_) => return Err(Box::new(batch)),
                }
            }
            _ => return Err(Box::new(batch)),
        };
        let owned: Vec<_> = match records.iter().collect::<std::result::Result<Vec<_>, _>>() {
            Ok(v) if v.len() == batch.thunks.len() => v,
            _ => return Err(Box::new(batch)),
        };
        // Pieces of at most half the refused batch (and never above batch.size): Kafka
        // splits to batch.size alone, which loops forever when the topic's
        // max.message.bytes is below batch.size (KAFKA-8350); halving always makes
        // progress, down to the one record that cannot fit.
        let refused = batch.bytes.as_ref().map_or(0, Bytes::len);
        let target = self.cfg.batch_size.min((refused / 2).max(1));
        let mut pieces: Vec<ProducerBatch> = Vec::new();
        let mut thunks = batch.thunks.into_iter();
        let mut next_sequence = batch.producer.map(|p| p.2);
        for r in &owned {
            let headers: Vec<Header<'_>> = r.headers.iter().collect();
            let needs_new = match pieces.last_mut().and_then(|p| p.builder.as_mut()) {
                Some(b) => !b.has_room_for(r.timestamp, r.key, r.value, &headers),
                None => true,
            };
            if needs_new {
                pieces.push(ProducerBatch {
                    tp: batch.tp.clone(),
                    builder: Some(BatchBuilder::new(self.cfg.compression, 0, target)),
                    bytes: None,
                    pooled: 0,
                    thunks: Vec::new(),
                    listeners: batch.listeners.clone(),
                    one_listener: batch.one_listener,
                    created: batch.created,
                    attempts: batch.attempts,
                    retry_at: None,
                    producer: batch
                        .producer
                        .zip(next_sequence)
                        .map(|((id, epoch, _), seq)| (id, epoch, seq)),
                    full: false,
                    uncompressed_size: 0,
                });
            }
            let piece = pieces
                .last_mut()
                .expect("a piece was pushed above when there was none");
            if let Some(b) = piece.builder.as_mut() {
                let _ = b.append(r.timestamp, r.key, r.value, &headers);
            }
            piece.thunks.extend(thunks.next());
            next_sequence = next_sequence.map(|s| s.wrapping_add(1) & i32::MAX);
        }
        let n = pieces.len();
        // The original's pool memory goes back; the pieces are small and unpooled.
        self.pool.deallocate_bytes(batch.pooled);
        drop(batch.builder);
        let queue = self.queue(&batch.tp);
        let mut dq = queue.lock();
        // Ahead of everything not yet sent, in sequence order among retried batches.
        let first_seq = pieces.first().and_then(|p| p.producer).map(|p| p.2);
        let pos = dq
            .iter()
            .position(|b| match (first_seq, b.producer) {
                (Some(s), Some(other)) => other.2 > s,
                _ => true,
            })
            .unwrap_or(dq.len());
        for (i, p) in pieces.into_iter().enumerate() {
            dq.insert(pos + i, p);
        }
        drop(dq);
        self.wake_sender.notify_one();
        Ok(n)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn acc(batch_size: usize, memory: usize, linger_ms: u64) -> Accumulator {
        Accumulator::new(
            AccumulatorConfig {
                batch_size,
                linger: Duration::from_millis(linger_ms),
                compression: CompressionConfig::new(Compression::None),
                delivery_timeout: Duration::from_millis(1000),
                retry_backoff: Duration::from_millis(100),
                retry_backoff_max: Duration::from_millis(1000),
                transactional: false,
            },
            Arc::new(BufferPool::new(memory, batch_size)),
        )
    }

    fn tp(p: i32) -> TopicPartition {
        TopicPartition {
            topic: "t".into(),
            partition: p,
        }
    }

    fn notifier() -> (
        Notifier<'static>,
        tokio::sync::oneshot::Receiver<Result<RecordMetadata>>,
    ) {
        let (tx, rx) = tokio::sync::oneshot::channel();
        (Notifier::Future(tx), rx)
    }

    async fn add(
        a: &Accumulator,
        p: i32,
        value: &[u8],
    ) -> tokio::sync::oneshot::Receiver<Result<RecordMetadata>> {
        let (n, rx) = notifier();
        a.append(
            &a.queue(&tp(p)),
            1000,
            None,
            Some(value),
            &[],
            n,
            Duration::from_millis(10),
        )
        .await
        .unwrap();
        rx
    }

    fn no_producer(_: &TopicPartition, _: usize) -> Option<(i64, i16, i32)> {
        None
    }

    #[tokio::test]
    async fn a_refused_batch_splits_into_pieces_that_keep_its_sequences() {
        // Three 200-byte records fit one 1024-byte batch; a broker that refuses it gets
        // them back in pieces that carry sequences 7, 8, 9 — the numbers the broker waits
        // for — ahead of the batch queued after them.
        let a = acc(1024, 1 << 20, 0);
        let mut rxs = Vec::new();
        for _ in 0..3 {
            rxs.push(add(&a, 0, &[b'v'; 200]).await);
        }
        let mut next = 7;
        let mut assign = |_: &TopicPartition, n: usize| {
            let first = next;
            next += n as i32;
            Some((42i64, 3i16, first))
        };
        let big = a.take(&tp(0), usize::MAX, true, &mut assign).unwrap();
        assert_eq!(big.producer, Some((42, 3, 7)));
        rxs.push(add(&a, 0, b"later").await);
        // Pieces of at most 300 bytes: one record each.
        let small = Accumulator {
            cfg: AccumulatorConfig {
                batch_size: 300,
                ..a.cfg.clone()
            },
            ..a
        };
        assert_eq!(small.split_and_reenqueue(big).ok(), Some(3));
        let mut seqs = Vec::new();
        while let Some(b) = small.take(&tp(0), usize::MAX, true, &mut assign) {
            assert_eq!(b.record_count(), 1);
            seqs.push(b.producer.unwrap());
        }
        assert_eq!(seqs, vec![(42, 3, 7), (42, 3, 8), (42, 3, 9), (42, 3, 10)]);
        // A batch whose bytes cannot be read comes back to be failed, not dropped.
        small
            .append(
                &small.queue(&tp(1)),
                1,
                None,
                Some(b"x"),
                &[],
                notifier().0,
                Duration::from_millis(10),
            )
            .await
            .unwrap();
        let mut unsent = small.queue(&tp(1)).lock().pop_front().unwrap();
        unsent.bytes = Some(Bytes::from_static(&[1, 2, 3]));
        assert!(small.split_and_reenqueue(unsent).is_err());
    }

    #[tokio::test]
    async fn queue_sizes_are_what_the_last_ready_pass_counted() {
        // 300-byte records in 512-byte batches: one record per batch.
        let a = acc(512, 1 << 20, 60_000);
        for p in [0, 0, 0, 2] {
            add(&a, p, &[b'v'; 300]).await;
        }
        let sizes = |topic: &str, n: usize| {
            let load = a.queue_load(topic);
            (0..n).map(|p| load.queued(p)).collect::<Vec<_>>()
        };
        assert_eq!(sizes("t", 4), vec![0; 4], "no pass yet");
        a.ready(Instant::now());
        // Every `tp(p)` names the topic with an Arc of its own: rows merge by name.
        assert_eq!(sizes("t", 4), vec![3, 0, 1, 0]);
        assert_eq!(sizes("other", 3), vec![0; 3]);
        a.take(&tp(0), usize::MAX, true, &mut no_producer).unwrap();
        a.ready(Instant::now());
        assert_eq!(sizes("t", 4), vec![2, 0, 1, 0]);
    }

    /// Keeps every report it gets, and how many calls brought them.
    #[derive(Default)]
    struct Reports {
        calls: std::sync::Mutex<Vec<Vec<(u64, i64)>>>,
    }

    impl DeliveryListener for Reports {
        fn on_delivery(&self, token: u64, result: Result<RecordMetadata>) {
            let offset = result.map_or(-2, |m| m.offset);
            self.calls.lock().unwrap().push(vec![(token, offset)]);
        }

        fn on_deliveries(&self, outcomes: &mut dyn Iterator<Item = (u64, Result<RecordMetadata>)>) {
            let all = outcomes
                .map(|(t, r)| (t, r.map_or(-2, |m| m.offset)))
                .collect();
            self.calls.lock().unwrap().push(all);
        }
    }

    async fn append(a: &Accumulator, p: i32, notifier: Notifier<'_>) {
        let queue = a.queue(&tp(p));
        let wait = Duration::from_millis(10);
        let appended = a.append(&queue, 1, None, Some(b"v"), &[], notifier, wait);
        appended.await.unwrap();
    }

    #[tokio::test]
    async fn a_batch_reports_to_its_one_listener_in_one_call_and_to_many_record_by_record() {
        let a = acc(1024, 1 << 20, 0);
        let pool = BufferPool::new(1 << 20, 1024);
        let (one, other) = (Arc::new(Reports::default()), Arc::new(Reports::default()));
        let (one_l, other_l): (Arc<dyn DeliveryListener>, Arc<dyn DeliveryListener>) =
            (one.clone(), other.clone());
        // Partition 0: three records for one listener. Partition 1: one listener, then
        // another, then a future.
        for token in 10..13 {
            append(&a, 0, Notifier::Listener(&one_l, token)).await;
        }
        append(&a, 1, Notifier::Listener(&one_l, 20)).await;
        append(&a, 1, Notifier::Listener(&other_l, 21)).await;
        let (future, rx) = notifier();
        append(&a, 1, future).await;
        a.take(&tp(0), usize::MAX, true, &mut no_producer)
            .unwrap()
            .complete(100, -1, &pool);
        assert_eq!(
            *one.calls.lock().unwrap(),
            vec![vec![(10, 100), (11, 101), (12, 102)]]
        );
        a.take(&tp(1), usize::MAX, true, &mut no_producer)
            .unwrap()
            .fail(ClientError::Closed, &pool);
        assert_eq!(one.calls.lock().unwrap()[1], vec![(20, -2)]);
        assert_eq!(*other.calls.lock().unwrap(), vec![vec![(21, -2)]]);
        assert!(rx.await.unwrap().is_err());
    }

    #[tokio::test]
    async fn a_batch_is_ready_after_linger_ms() {
        let a = acc(1024, 1 << 20, 50);
        add(&a, 0, b"x").await;
        let now = Instant::now();
        assert!(a.ready(now).partitions.is_empty(), "still lingering");
        let check = a.ready(now);
        assert!(check
            .next_check
            .is_some_and(|t| t <= now + Duration::from_millis(50)));
        assert_eq!(
            a.ready(now + Duration::from_millis(51)).partitions,
            vec![tp(0)]
        );
    }

    #[tokio::test]
    async fn a_full_batch_is_ready_at_once_and_the_next_record_starts_another() {
        let a = acc(256, 1 << 20, 60_000);
        let mut receivers = Vec::new();
        for _ in 0..10 {
            receivers.push(add(&a, 0, &[7u8; 50]).await);
        }
        assert_eq!(
            a.ready(Instant::now()).partitions,
            vec![tp(0)],
            "full despite linger"
        );
        let first = a.take(&tp(0), usize::MAX, true, &mut no_producer).unwrap();
        assert!(
            first.bytes.as_ref().unwrap().len() <= 256,
            "within batch.size"
        );
        assert!(first.record_count() >= 3 && first.record_count() < 10);
        let rest = 10 - first.record_count();
        first.complete(100, -1, &a.pool);
        a.done(10 - rest);
        let m = receivers.remove(0).await.unwrap().unwrap();
        assert_eq!((m.partition, m.offset), (0, 100));
    }

    #[tokio::test]
    async fn memory_exhausted_blocks_append_until_a_batch_completes() {
        let a = Arc::new(acc(128, 256, 0));
        add(&a, 0, &[1u8; 30]).await;
        add(&a, 1, &[1u8; 30]).await;
        assert_eq!(a.pool.available_memory(), 0);
        let (n, _rx) = notifier();
        let err = a
            .append(
                &a.queue(&tp(2)),
                0,
                None,
                Some(&[1u8; 30]),
                &[],
                n,
                Duration::from_millis(20),
            )
            .await
            .unwrap_err();
        assert!(matches!(err, ClientError::BufferExhausted { .. }), "{err}");
        // A waiter blocks; completing a batch frees memory and wakes it.
        let waiter = {
            let a = a.clone();
            tokio::spawn(async move {
                let (n, _rx) = notifier();
                a.append(
                    &a.queue(&tp(2)),
                    0,
                    None,
                    Some(&[1u8; 30]),
                    &[],
                    n,
                    Duration::from_secs(5),
                )
                .await
            })
        };
        tokio::time::sleep(Duration::from_millis(20)).await;
        assert_eq!(a.pool.queued(), 1);
        assert!(
            !a.ready(Instant::now()).partitions.is_empty(),
            "waiters make batches ready"
        );
        let b = a.take(&tp(0), usize::MAX, true, &mut no_producer).unwrap();
        b.complete(0, -1, &a.pool);
        waiter.await.unwrap().unwrap();
    }

    #[tokio::test]
    async fn a_retried_batch_goes_back_to_the_head_and_waits_out_its_backoff() {
        let a = acc(128, 1 << 20, 0);
        for _ in 0..6 {
            add(&a, 0, &[9u8; 40]).await;
        }
        let mut seq = 0;
        let mut assign = |_: &TopicPartition, n: usize| {
            let s = seq;
            seq += n as i32;
            Some((1, 0, s))
        };
        let first = a.take(&tp(0), usize::MAX, true, &mut assign).unwrap();
        let second = a.take(&tp(0), usize::MAX, true, &mut assign).unwrap();
        let (s1, s2) = (first.producer.unwrap().2, second.producer.unwrap().2);
        assert!(s1 < s2);
        let now = Instant::now();
        a.reenqueue(second, now);
        a.reenqueue(first, now);
        assert!(a.ready(now).partitions.is_empty(), "backing off");
        let later = now + Duration::from_millis(200);
        assert_eq!(a.ready(later).partitions, vec![tp(0)]);
        let again = a.take(&tp(0), usize::MAX, true, &mut assign).unwrap();
        assert_eq!(
            again.producer.unwrap().2,
            s1,
            "sequence order restored at the head"
        );
        assert_eq!(again.attempts, 1);
    }

    #[tokio::test]
    async fn queued_batches_expire_after_delivery_timeout() {
        let a = acc(1024, 1 << 20, 60_000);
        let rx = add(&a, 0, b"late").await;
        assert_eq!(a.expire(Instant::now()).batches, 0);
        let gone = a.expire(Instant::now() + Duration::from_millis(1001));
        assert_eq!((gone.batches, gone.sequenced), (1, false));
        assert!(matches!(
            rx.await.unwrap(),
            Err(ClientError::Timeout { .. })
        ));
        assert_eq!(a.incomplete(), 0);
        assert_eq!(a.pool.available_memory(), 1 << 20);
    }

    #[tokio::test]
    async fn a_record_larger_than_batch_size_gets_a_batch_of_its_own() {
        let a = acc(128, 1 << 20, 60_000);
        add(&a, 0, b"small").await;
        add(&a, 0, &[5u8; 1000]).await;
        let small = a.take(&tp(0), usize::MAX, true, &mut no_producer).unwrap();
        let big = a.take(&tp(0), usize::MAX, true, &mut no_producer).unwrap();
        assert_eq!((small.record_count(), big.record_count()), (1, 1));
        assert!(big.bytes.as_ref().unwrap().len() > 1000);
    }
}
