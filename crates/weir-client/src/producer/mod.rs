//! The producer, as Kafka's Java client builds it: `send` picks a partition (explicit, a
//! custom `Partitioner`, murmur2 of the key, or sticky), waits for metadata and memory up to
//! `max.block.ms` (the backpressure users see), and appends to the accumulator; the sender,
//! on the producer's own I/O thread (`io_thread`), batches, sends, retries and reports each
//! record through a future, a callback or a listener. Idempotence is on by default; with a
//! `transactional.id`, records and a consumer group's offsets commit or abort together
//! (`transactions`).

pub mod accumulator;
pub mod buffer_pool;
mod clock;
mod io_thread;
pub mod record;
pub mod sender;
pub mod transactions;

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::oneshot;
use weir_record::Header;

use crate::cluster::Cluster;
use crate::config::ProducerConfig;
use crate::error::{ClientError, Result};
use crate::partitioner::{BuiltInPartitioner, DefaultPartitioner, Partitioner, StickyPartition};
use accumulator::{Accumulator, AccumulatorConfig, PartitionQueue};
use buffer_pool::BufferPool;
use record::Notifier;
pub use record::{DeliveryFuture, DeliveryListener, ProducerRecord, RecordMetadata};
use sender::Sender;
pub use transactions::ConsumerGroupMetadata;
use weir_kafka::{ErrorCode, TopicPartition};

/// A Kafka producer. Cheap to clone; every clone feeds the same batches.
#[derive(Clone)]
pub struct Producer {
    inner: Arc<Inner>,
}

/// A topic as the producer uses it, kept until the metadata changes: its name shared by
/// every batch, its partitions as of metadata generation `generation`, each partition's
/// queue in the accumulator, and the sticky partitioner's choice. A record finds all it
/// needs here, with no lookup and no lock of its own.
struct TopicEntry {
    name: Arc<str>,
    info: crate::cluster::TopicInfo,
    generation: u64,
    queues: Vec<Arc<PartitionQueue>>,
    sticky: StickyPartition,
}

/// The topic entries, by name, and the one the last send used: a producer sending to one
/// topic finds its entry by comparing the record's name with that one's — by pointer first,
/// when the application reuses its `Arc<str>` — with no hashing.
#[derive(Default)]
struct TopicCache {
    last: Option<Arc<TopicEntry>>,
    by_name: HashMap<String, Arc<TopicEntry>, foldhash::fast::RandomState>,
}

struct Inner {
    cfg: ProducerConfig,
    cluster: Arc<Cluster>,
    acc: Arc<Accumulator>,
    sender: Arc<Sender>,
    partitioner: Box<dyn Partitioner>,
    sticky: BuiltInPartitioner,
    /// Where records without a timestamp get theirs.
    clock: clock::RecordClock,
    /// What each record needs of its topic, kept until the metadata changes.
    topics: std::sync::Mutex<TopicCache>,
    sender_task: std::sync::Mutex<Option<tokio::task::JoinHandle<()>>>,
    /// Where the sender and the connections run; it stops when the producer is dropped.
    _io: io_thread::IoThread,
}

impl Producer {
    /// A producer with Kafka's settings (`bootstrap.servers` at least).
    pub fn new(cfg: ProducerConfig) -> Result<Producer> {
        let partitioner = Box::new(DefaultPartitioner {
            ignore_keys: cfg.partitioner_ignore_keys,
        });
        Self::with_partitioner(cfg, partitioner)
    }

    /// A producer from key=value settings, e.g. `[("bootstrap.servers", "localhost:9092")]`.
    pub fn from_properties<K: Into<String>, V: Into<String>>(
        pairs: impl IntoIterator<Item = (K, V)>,
    ) -> Result<Producer> {
        Self::new(ProducerConfig::from_properties(pairs)?)
    }

    /// A producer with a custom partitioner (records it returns `None` for go sticky).
    pub fn with_partitioner(
        cfg: ProducerConfig,
        partitioner: Box<dyn Partitioner>,
    ) -> Result<Producer> {
        let io = io_thread::IoThread::start()?;
        let cluster = Cluster::with_io(cfg.cluster.clone(), Some(io.handle().clone()))?;
        let pool = Arc::new(BufferPool::new(
            cfg.buffer_memory,
            cfg.batch_size.max(weir_record::RECORD_BATCH_OVERHEAD),
        ));
        let acc = Arc::new(Accumulator::new(
            AccumulatorConfig {
                batch_size: cfg.batch_size.max(weir_record::RECORD_BATCH_OVERHEAD),
                linger: cfg.linger,
                compression: cfg.compression,
                delivery_timeout: cfg.delivery_timeout,
                retry_backoff: cfg.retry_backoff,
                retry_backoff_max: cfg.retry_backoff_max,
                transactional: cfg.transactional_id.is_some(),
            },
            pool,
        ));
        let sender = Sender::new(cfg.clone(), cluster.clone(), acc.clone());
        let task = io.handle().spawn(sender.clone().run());
        Ok(Producer {
            inner: Arc::new(Inner {
                sticky: BuiltInPartitioner::new(cfg.batch_size.max(1), cfg.partitioner_adaptive),
                clock: clock::RecordClock::new(),
                topics: std::sync::Mutex::new(TopicCache::default()),
                cfg,
                cluster,
                acc,
                sender,
                partitioner,
                sender_task: std::sync::Mutex::new(Some(task)),
                _io: io,
            }),
        })
    }

    pub fn config(&self) -> &ProducerConfig {
        &self.inner.cfg
    }

    /// The round trips of the Produce requests answered so far, in microseconds, from
    /// writing a request to reading its answer: the broker's share of a record's latency,
    /// without the time the record waited in its batch (Kafka's `request-latency-avg` and
    /// `-max` metrics, as a whole distribution). acks=0 requests have no answer to time.
    pub fn request_latency(&self) -> hdrhistogram::Histogram<u64> {
        self.inner
            .sender
            .request_latency
            .lock()
            .map(|h| h.clone())
            .unwrap_or_else(|_| sender::latency_histogram())
    }

    /// Sends a record: returns once it is in a batch (after waiting for metadata and memory
    /// up to `max.block.ms`), with a future that resolves when the broker acknowledged it.
    pub async fn send(&self, record: ProducerRecord) -> Result<DeliveryFuture> {
        let (tx, rx) = oneshot::channel();
        self.enqueue(record, Notifier::Future(tx)).await?;
        Ok(DeliveryFuture { rx })
    }

    /// Sends a record and waits for its acknowledgement.
    pub async fn send_and_wait(&self, record: ProducerRecord) -> Result<RecordMetadata> {
        self.send(record).await?.await
    }

    /// Sends a record; `callback` runs (on the producer's I/O thread) with the outcome.
    pub async fn send_with_callback(
        &self,
        record: ProducerRecord,
        callback: impl FnOnce(Result<RecordMetadata>) + Send + 'static,
    ) -> Result<()> {
        self.enqueue(record, Notifier::Callback(Box::new(callback)))
            .await
    }

    /// Sends a record; `listener` is told of its outcome with `token` (see
    /// [`DeliveryListener`]): the form for high rates, as it allocates nothing per record.
    pub async fn send_with_listener(
        &self,
        record: ProducerRecord,
        listener: &Arc<dyn DeliveryListener>,
        token: u64,
    ) -> Result<()> {
        self.enqueue(record, Notifier::Listener(listener, token))
            .await
    }

    async fn enqueue(&self, record: ProducerRecord, notifier: Notifier<'_>) -> Result<()> {
        let inner = &self.inner;
        let txn = inner.sender.txn.as_ref();
        if let Some(t) = txn {
            t.check_send()?;
        }
        let headers: Vec<Header<'_>> = record
            .headers
            .iter()
            .map(|(k, v)| Header::new(k, v.as_deref()))
            .collect();
        let key = record.key.as_deref();
        let value = record.value.as_deref();
        // An upper bound first (the varints of a record take at most 36 bytes, 10 per
        // header): the exact size is computed only for a record near a limit.
        let bound = weir_record::RECORD_BATCH_OVERHEAD
            + 36
            + key.map_or(0, <[u8]>::len)
            + value.map_or(0, <[u8]>::len)
            + headers
                .iter()
                .map(|h| 10 + h.key.len() + h.value.map_or(0, <[u8]>::len))
                .sum::<usize>();
        let size = if bound <= inner.cfg.max_request_size.min(inner.cfg.buffer_memory) {
            bound
        } else {
            weir_record::RECORD_BATCH_OVERHEAD
                + weir_record::record::record_size(i32::MAX, i64::MAX, key, value, &headers)
        };
        if size > inner.cfg.max_request_size {
            return Err(ClientError::RecordTooLarge {
                size,
                limit: inner.cfg.max_request_size,
                setting: "max.request.size",
            });
        }
        if size > inner.cfg.buffer_memory {
            return Err(ClientError::RecordTooLarge {
                size,
                limit: inner.cfg.buffer_memory,
                setting: "buffer.memory",
            });
        }
        // The clock is read only when send has to wait (for metadata here, for memory in
        // the accumulator): at a million sends a second, clock reads show in profiles.
        let (entry, waited_since) = match self.cached_topic(&record.topic) {
            Some(e) => (e, None),
            None => {
                let start = Instant::now();
                let e = self
                    .topic_entry(&record.topic, start + inner.cfg.max_block)
                    .await?;
                (e, Some(start))
            }
        };
        let partitions = &entry.info.partitions;
        let n = partitions.len();
        let available = |p: usize| partitions.get(p).is_some_and(|x| x.leader >= 0);
        // Batches queued per partition with a leader: asked for only when the sticky
        // partitioner switches.
        let sticky_load = || {
            let load = inner.acc.queue_load(&entry.name);
            move |p: usize| available(p).then(|| load.queued(p))
        };
        let mut sticky = false;
        let partition = match record.partition {
            Some(p) if p >= 0 && (p as usize) < n => p as usize,
            Some(p) => {
                return Err(ClientError::Config(format!(
                    "partition {p} does not exist: topic {} has {n} partitions",
                    record.topic
                )))
            }
            None => match inner.partitioner.partition(&record.topic, key, value, n) {
                Some(p) => p % n.max(1),
                None => {
                    sticky = true;
                    inner
                        .sticky
                        .partition(&entry.sticky, n, available, sticky_load)
                }
            },
        };
        // Every choice above is below `n`, and the entry has a queue for each of its `n`
        // partitions.
        let queue = &entry.queues[partition];
        let timestamp = record.timestamp.unwrap_or_else(|| inner.clock.now_ms());
        let remaining = match waited_since {
            Some(start) => inner.cfg.max_block.saturating_sub(start.elapsed()),
            None => inner.cfg.max_block,
        };
        let (full, appended) = inner
            .acc
            .append(queue, timestamp, key, value, &headers, notifier, remaining)
            .await?;
        if sticky {
            inner
                .sticky
                .update(&entry.sticky, partition, appended, full, n, sticky_load);
        }
        if txn.is_some_and(|t| t.note_partition(&queue.tp)) {
            // The sender adds it to the transaction before sending its batch.
            inner.acc.wake_sender.notify_one();
        }
        Ok(())
    }

    // ---- transactions ----

    /// Readies a producer with a `transactional.id` (Kafka's `initTransactions`): gets
    /// its producer id and a new epoch from the id's coordinator, which fences every
    /// older producer with the same id and finishes the transaction it left open. Once,
    /// before the first transaction; waits up to `max.block.ms` (a timeout may be retried).
    pub async fn init_transactions(&self) -> Result<()> {
        let deadline = Instant::now() + self.inner.cfg.max_block;
        self.inner.sender.init_transactions(deadline).await
    }

    /// Begins a transaction: the records sent from now on, and the offsets given to
    /// `send_offsets_to_transaction`, commit or abort together.
    pub fn begin_transaction(&self) -> Result<()> {
        self.inner.sender.begin_transaction()
    }

    /// Commits a consumer group's offsets (each the *next* offset to read) with this
    /// transaction: the group sees them only if it commits (KIP-447: `group` is the
    /// consumer's `Consumer::group_metadata`, so a consumer fenced by a rebalance cannot
    /// commit). Waits up to `max.block.ms`.
    pub async fn send_offsets_to_transaction(
        &self,
        offsets: &HashMap<TopicPartition, crate::consumer::OffsetAndMetadata>,
        group: &ConsumerGroupMetadata,
    ) -> Result<()> {
        let deadline = Instant::now() + self.inner.cfg.max_block;
        self.inner
            .sender
            .send_offsets(offsets, group, deadline)
            .await
    }

    /// Commits the transaction once every record of it is acknowledged. An abortable
    /// error (`ClientError::TransactionAbortable`: a record or the offsets were not
    /// written) leaves it to `abort_transaction`; a timeout (`max.block.ms`) may be
    /// retried with another `commit_transaction`.
    pub async fn commit_transaction(&self) -> Result<()> {
        let deadline = Instant::now() + self.inner.cfg.max_block;
        self.inner.sender.end_transaction(true, deadline).await
    }

    /// Aborts the transaction: records not yet sent fail with
    /// `ClientError::TransactionAborted`, and read_committed consumers never see those
    /// that were. Waits up to `max.block.ms`.
    pub async fn abort_transaction(&self) -> Result<()> {
        let deadline = Instant::now() + self.inner.cfg.max_block;
        self.inner.sender.end_transaction(false, deadline).await
    }

    /// The topic's cached entry if the metadata has not changed since it was made.
    fn cached_topic(&self, topic: &Arc<str>) -> Option<Arc<TopicEntry>> {
        let inner = &self.inner;
        let generation = inner.cluster.generation();
        let mut cache = inner.topics.lock().ok()?;
        let cached = match &cache.last {
            Some(e) if Arc::ptr_eq(&e.name, topic) || *e.name == **topic => e.clone(),
            _ => {
                let e = cache.by_name.get(&**topic).cloned()?;
                cache.last = Some(e.clone());
                e
            }
        };
        (cached.generation == generation).then_some(cached)
    }

    /// The topic's cached entry, remade when the metadata has changed since.
    async fn topic_entry(&self, topic: &Arc<str>, deadline: Instant) -> Result<Arc<TopicEntry>> {
        if let Some(e) = self.cached_topic(topic) {
            return Ok(e);
        }
        let inner = &self.inner;
        let generation = inner.cluster.generation();
        let info = self.wait_for_topic(topic, deadline).await?;
        // The caller's own `Arc`, so that its next sends find the entry by pointer.
        let name = topic.clone();
        let queues = (0..info.partitions.len())
            .map(|p| {
                inner
                    .acc
                    .queue(&TopicPartition::new(name.clone(), p as i32))
            })
            .collect();
        let entry = Arc::new(TopicEntry {
            name,
            info,
            generation,
            queues,
            sticky: StickyPartition::default(),
        });
        if let Ok(mut t) = inner.topics.lock() {
            t.by_name.insert(topic.to_string(), entry.clone());
            t.last = Some(entry.clone());
        }
        Ok(entry)
    }

    /// The topic's partitions, refreshing metadata (and creating the topic if the broker
    /// allows it) until `deadline`.
    async fn wait_for_topic(
        &self,
        topic: &str,
        deadline: Instant,
    ) -> Result<crate::cluster::TopicInfo> {
        let inner = &self.inner;
        let mut last_error = None;
        loop {
            match inner
                .cluster
                .topic(topic, inner.cfg.allow_auto_create_topics)
                .await
            {
                Ok(t) if !t.partitions.is_empty() => return Ok(t),
                Ok(_) => {}
                Err(e)
                    if e.is_retriable()
                        || e.code() == Some(ErrorCode::UnknownTopicOrPartition.code()) =>
                {
                    last_error = Some(e)
                }
                Err(e) => return Err(e),
            }
            if Instant::now() >= deadline {
                let ms = inner.cfg.max_block.as_millis() as u64;
                return Err(match last_error {
                    Some(ClientError::Connection { broker, reason }) => ClientError::Connection {
                        broker,
                        reason: format!(
                            "{reason} (no broker reachable within max.block.ms = {ms} ms)"
                        ),
                    },
                    Some(e) => ClientError::Timeout {
                        what: format!("metadata for topic '{topic}' ({e})"),
                        ms,
                    },
                    None => ClientError::Timeout {
                        what: format!("metadata for topic '{topic}'"),
                        ms,
                    },
                });
            }
            // Refresh again after the backoff; a topic just created may need a moment.
            let _ = inner
                .cluster
                .refresh(
                    Some(&[topic.to_string()]),
                    inner.cfg.allow_auto_create_topics,
                )
                .await;
            tokio::time::sleep(
                inner
                    .cfg
                    .cluster
                    .retry_backoff
                    .max(Duration::from_millis(10)),
            )
            .await;
        }
    }

    /// Sends everything buffered now (ignoring `linger.ms`) and waits until every record sent
    /// so far is acknowledged or failed.
    pub async fn flush(&self) -> Result<()> {
        let acc = &self.inner.acc;
        acc.begin_flush();
        while acc.incomplete() > 0 {
            let done = acc.batch_done.notified();
            if acc.incomplete() == 0 {
                break;
            }
            acc.wake_sender.notify_one();
            let _ = tokio::time::timeout(Duration::from_millis(50), done).await;
        }
        acc.end_flush();
        Ok(())
    }

    /// Sends what is buffered and stops, waiting up to `timeout`; records not acknowledged
    /// by then fail with a timeout.
    pub async fn close(&self, timeout: Duration) -> Result<()> {
        let inner = &self.inner;
        inner.acc.begin_close();
        let task = inner.sender_task.lock().ok().and_then(|mut t| t.take());
        if let Some(mut task) = task {
            match tokio::time::timeout(timeout, &mut task).await {
                Ok(_) => {}
                Err(_) => {
                    task.abort();
                    inner.acc.abort_all(ClientError::Timeout {
                        what: "closing the producer".into(),
                        ms: timeout.as_millis() as u64,
                    });
                }
            }
        }
        let _ = &inner.sender;
        Ok(())
    }
}

impl Drop for Inner {
    fn drop(&mut self) {
        if let Ok(mut t) = self.sender_task.lock() {
            if let Some(task) = t.take() {
                task.abort();
            }
        }
    }
}
