//! Kafka's `Sender`: the producer's I/O loop. It asks the accumulator which partitions are
//! ready, groups their first batches by leader up to `max.request.size`, keeps at most
//! `max.in.flight.requests.per.connection` requests per broker, and settles every record
//! from the answers: success, a retry at the head of its queue (retriable errors, within
//! `retries` and `delivery.timeout.ms`), a split (MESSAGE_TOO_LARGE), or a failure. With
//! idempotence it owns the producer id, epoch and per-partition sequence numbers.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use kafka_protocol::messages::produce_request::{PartitionProduceData, TopicProduceData};
use kafka_protocol::messages::produce_response::BatchIndexAndErrorMessage;
use kafka_protocol::messages::{
    ApiKey, InitProducerIdRequest, ProduceRequest, ProduceResponse, ProducerId, TopicName,
};
use kafka_protocol::protocol::StrBytes;
use kafka_protocol::ResponseError as E;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use crate::cluster::Cluster;
use crate::config::{Acks, ProducerConfig};
use crate::error::{ClientError, Result};
use crate::producer::accumulator::{Accumulator, ProducerBatch};
use crate::producer::transactions::{fatal_produce_error, Transactions};
use weir_kafka::TopicPartition;

const PRODUCE_VERSIONS: (i16, i16) = (3, 9);
pub(crate) const INIT_PRODUCER_ID_VERSIONS: (i16, i16) = (0, 4);

/// Producer id and sequences (the idempotent part of Kafka's `TransactionManager`).
#[derive(Debug, Default)]
struct Idempotence {
    producer_id: i64,
    epoch: i16,
    /// The sequence the next new batch of a partition gets.
    next_sequence: HashMap<TopicPartition, i32>,
    /// The sequence after the last one the broker acknowledged, per partition: a batch
    /// starting there that still gets OUT_OF_ORDER_SEQUENCE means the broker lost our
    /// state (Kafka's `isNextSequence` test).
    acked_through: HashMap<TopicPartition, i32>,
    /// A sequenced batch failed for good, or the broker forgot us: the sequences have a
    /// gap that only a new epoch closes (KIP-360).
    bump_required: bool,
}

pub(crate) struct Sender {
    pub cfg: ProducerConfig,
    pub cluster: Arc<Cluster>,
    pub acc: Arc<Accumulator>,
    idempotence: Mutex<Option<Idempotence>>,
    /// A `transactional.id` producer's transactions: its producer id comes from
    /// `init_transactions`, and a batch goes out only once its partition is in the
    /// transaction.
    pub(crate) txn: Option<Transactions>,
    in_flight: Mutex<HashMap<i32, Arc<Semaphore>>>,
    /// Requests sent and not answered (for flush and close).
    outstanding: Arc<std::sync::atomic::AtomicUsize>,
    /// Produce request round trips in microseconds, from writing the request to reading
    /// its answer (Kafka's `request-latency` producer metrics).
    pub request_latency: Mutex<hdrhistogram::Histogram<u64>>,
}

/// An empty latency histogram: microseconds up to an hour, 3 significant digits.
pub(crate) fn latency_histogram() -> hdrhistogram::Histogram<u64> {
    hdrhistogram::Histogram::new_with_bounds(1, 3_600_000_000, 3).expect("valid histogram bounds")
}

impl Sender {
    pub fn new(cfg: ProducerConfig, cluster: Arc<Cluster>, acc: Arc<Accumulator>) -> Arc<Self> {
        let txn = cfg
            .transactional_id
            .clone()
            .map(|id| Transactions::new(id, cfg.transaction_timeout));
        Arc::new(Sender {
            txn,
            cfg,
            cluster,
            acc,
            idempotence: Mutex::new(None),
            in_flight: Mutex::new(HashMap::new()),
            outstanding: Arc::new(std::sync::atomic::AtomicUsize::new(0)),
            request_latency: Mutex::new(latency_histogram()),
        })
    }

    /// The producer id and epoch batches are stamped with, once known.
    pub(crate) fn producer_id_and_epoch(&self) -> Option<(i64, i16)> {
        self.idempotence
            .lock()
            .ok()
            .and_then(|i| i.as_ref().map(|i| (i.producer_id, i.epoch)))
    }

    /// Takes a new producer id or epoch: every partition's sequences start again at 0,
    /// and queued batches are restamped when drained.
    pub(crate) fn set_producer(&self, producer_id: i64, epoch: i16) {
        self.acc.clear_producer_state();
        if let Ok(mut i) = self.idempotence.lock() {
            *i = Some(Idempotence {
                producer_id,
                epoch,
                next_sequence: HashMap::new(),
                acked_through: HashMap::new(),
                bump_required: false,
            });
        }
    }

    async fn init_producer_id(&self) -> Result<()> {
        // A transactional producer's id comes from init_transactions.
        if self.txn.is_some()
            || !self.cfg.enable_idempotence
            || self
                .idempotence
                .lock()
                .map(|i| i.is_some())
                .unwrap_or(false)
        {
            return Ok(());
        }
        let (producer_id, epoch) = self.request_producer_id(-1, -1).await?;
        if let Ok(mut i) = self.idempotence.lock() {
            *i = Some(Idempotence {
                producer_id,
                epoch,
                next_sequence: HashMap::new(),
                acked_through: HashMap::new(),
                bump_required: false,
            });
        }
        tracing::debug!(producer_id, epoch, "idempotent producer initialised");
        Ok(())
    }

    /// InitProducerId: a new producer id for (-1, -1), or the next epoch of a known one
    /// (brokers from v3 on; older ones give a new id, which does as well).
    async fn request_producer_id(&self, producer_id: i64, epoch: i16) -> Result<(i64, i16)> {
        let conn = self.cluster.any().await?;
        let v = conn.version_for(ApiKey::InitProducerId, INIT_PRODUCER_ID_VERSIONS)?;
        let mut req = InitProducerIdRequest::default();
        // The generated default is an empty string; a null id is what says "idempotent only".
        req.transactional_id = None;
        req.transaction_timeout_ms = 60_000;
        let bump = v >= 3 && producer_id >= 0;
        req.producer_id = ProducerId(if bump { producer_id } else { -1 });
        req.producer_epoch = if bump { epoch } else { -1 };
        let resp = conn.request(&req, v).await?;
        if resp.error_code != 0 {
            return Err(ClientError::kafka(
                resp.error_code,
                Some("InitProducerId".into()),
            ));
        }
        Ok((resp.producer_id.0, resp.producer_epoch))
    }

    /// Whether `batch` starts at the sequence after the last one acknowledged.
    fn is_next_sequence(&self, batch: &ProducerBatch) -> bool {
        let Some((pid, epoch, seq)) = batch.producer else {
            return false;
        };
        self.idempotence
            .lock()
            .ok()
            .and_then(|i| {
                i.as_ref().map(|i| {
                    i.producer_id == pid
                        && i.epoch == epoch
                        && i.acked_through.get(&batch.tp).copied().unwrap_or(0) == seq
                })
            })
            .unwrap_or(false)
    }

    fn bump_required(&self) -> bool {
        self.idempotence
            .lock()
            .map(|i| i.as_ref().is_some_and(|i| i.bump_required))
            .unwrap_or(false)
    }

    fn require_bump(&self) {
        // In a transaction, the abort bumps the epoch (through the coordinator).
        if let Some(t) = &self.txn {
            t.require_bump();
            return;
        }
        if let Ok(mut i) = self.idempotence.lock() {
            if let Some(i) = i.as_mut() {
                i.bump_required = true;
            }
        }
    }

    /// Moves to a new epoch once nothing is in flight, and restarts every partition's
    /// sequences at 0: queued batches are restamped when drained. A bump the broker
    /// refuses (an epoch it fenced) falls back to a new producer id.
    async fn bump_epoch(&self) -> Result<()> {
        let Some((pid, epoch)) = self
            .idempotence
            .lock()
            .ok()
            .and_then(|i| i.as_ref().map(|i| (i.producer_id, i.epoch)))
        else {
            return Ok(());
        };
        let (new_pid, new_epoch) = match self.request_producer_id(pid, epoch).await {
            Ok(ids) => ids,
            Err(e) if !e.is_retriable() => self.request_producer_id(-1, -1).await?,
            Err(e) => return Err(e),
        };
        self.set_producer(new_pid, new_epoch);
        tracing::info!(
            producer_id = new_pid,
            epoch = new_epoch,
            "bumped the producer epoch to close a sequence gap"
        );
        Ok(())
    }

    fn semaphore(&self, node: i32) -> Arc<Semaphore> {
        let mut m = self.in_flight.lock().unwrap_or_else(|e| e.into_inner());
        m.entry(node)
            .or_insert_with(|| Arc::new(Semaphore::new(self.cfg.max_in_flight)))
            .clone()
    }

    pub fn outstanding(&self) -> usize {
        self.outstanding.load(std::sync::atomic::Ordering::SeqCst)
    }

    /// The I/O loop; returns once the producer is closing and everything is settled.
    pub async fn run(self: Arc<Self>) {
        let mut metadata_due = false;
        loop {
            if let Err(e) = self.init_producer_id().await {
                tracing::warn!("InitProducerId failed ({e}); retrying");
                if self.acc.is_closing() && self.acc.incomplete() == 0 {
                    return;
                }
                tokio::time::sleep(self.cfg.retry_backoff.max(Duration::from_millis(50))).await;
                continue;
            }
            if self.bump_required() {
                // Only once every request in flight is answered: their batches may come
                // back to be restamped.
                if self.outstanding() > 0 {
                    let _ = tokio::time::timeout(
                        Duration::from_millis(20),
                        self.acc.wake_sender.notified(),
                    )
                    .await;
                    continue;
                }
                if let Err(e) = self.bump_epoch().await {
                    tracing::warn!("bumping the producer epoch failed ({e}); retrying");
                    tokio::time::sleep(self.cfg.retry_backoff.max(Duration::from_millis(50))).await;
                    continue;
                }
            }
            let now = Instant::now();
            let expired = self.acc.expire(now);
            if expired.sequenced {
                self.require_bump();
            }
            if let Some(t) = &self.txn {
                if expired.batches > 0 {
                    let e = ClientError::Timeout {
                        what: format!("{} batch(es) of the transaction expired", expired.batches),
                        ms: self.cfg.delivery_timeout.as_millis() as u64,
                    };
                    self.txn_failed(e, false);
                }
                // Records that came in after the transaction failed fail too.
                self.fail_undrainable();
                if t.start_adding() {
                    tokio::spawn(self.clone().add_partitions());
                }
            }
            if metadata_due {
                let _ = self.cluster.refresh(None, false).await;
                metadata_due = false;
            }
            let ready = self.acc.ready(now);
            // Group ready partitions by leader.
            let meta = self.cluster.metadata();
            let mut by_node: BTreeMap<i32, Vec<TopicPartition>> = BTreeMap::new();
            for tp in ready.partitions {
                let leader = meta
                    .topics
                    .get(&*tp.topic)
                    .and_then(|t| t.partitions.get(tp.partition as usize))
                    .map_or(-1, |p| p.leader);
                if leader < 0 {
                    metadata_due = true;
                    continue;
                }
                by_node.entry(leader).or_default().push(tp);
            }
            let mut sent_any = false;
            for (node, partitions) in by_node {
                let sem = self.semaphore(node);
                let Ok(permit) = sem.clone().try_acquire_owned() else {
                    continue;
                };
                let batches = self.drain(&partitions);
                if batches.is_empty() {
                    continue;
                }
                sent_any = true;
                let me = self.clone();
                self.outstanding
                    .fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                tokio::spawn(me.send_batches(node, batches, permit));
            }
            if self.acc.is_closing() && self.acc.incomplete() == 0 && self.outstanding() == 0 {
                return;
            }
            if sent_any {
                tokio::task::yield_now().await;
                continue;
            }
            let wait = match ready.next_check {
                Some(at) => at.saturating_duration_since(Instant::now()),
                None => Duration::from_millis(100),
            };
            let wait = if metadata_due {
                wait.min(self.cfg.retry_backoff)
            } else {
                wait
            };
            let _ = tokio::time::timeout(
                wait.max(Duration::from_micros(200)),
                self.acc.wake_sender.notified(),
            )
            .await;
        }
    }

    /// Takes the first batch of each partition for one request, up to `max.request.size`.
    fn drain(&self, partitions: &[TopicPartition]) -> Vec<ProducerBatch> {
        let mut out = Vec::new();
        let mut size = 0usize;
        // Rotate the starting partition so that no partition starves.
        let start = fastrand::usize(..partitions.len().max(1));
        let mut ids = self.idempotence.lock().unwrap_or_else(|e| e.into_inner());
        for i in 0..partitions.len() {
            let tp = &partitions[(start + i) % partitions.len()];
            if self.txn.as_ref().is_some_and(|t| !t.may_send(tp)) {
                // Not in the transaction yet: it waits for AddPartitionsToTxn.
                continue;
            }
            let budget = self.cfg.max_request_size.saturating_sub(size);
            let mut assign = |tp: &TopicPartition, records: usize| -> Option<(i64, i16, i32)> {
                let id = ids.as_mut()?;
                let seq = id.next_sequence.entry(tp.clone()).or_insert(0);
                let first = *seq;
                *seq = ((*seq as i64 + records as i64) % (i32::MAX as i64 + 1)) as i32;
                Some((id.producer_id, id.epoch, first))
            };
            if let Some(b) = self.acc.take(tp, budget, out.is_empty(), &mut assign) {
                size += b.estimated_size();
                out.push(b);
            }
        }
        out
    }

    /// Sends one request. Its answer settles the batches on the task that reads the
    /// connection (`answered`), so no other task has to be woken for it.
    async fn send_batches(
        self: Arc<Self>,
        node: i32,
        batches: Vec<ProducerBatch>,
        permit: OwnedSemaphorePermit,
    ) {
        let request = self.build_request(&batches);
        let sent = Instant::now();
        let connected = self
            .cluster
            .node(node)
            .await
            .and_then(|conn| Ok((conn.version_for(ApiKey::Produce, PRODUCE_VERSIONS)?, conn)));
        let (v, conn) = match connected {
            Ok(c) => c,
            Err(e) => return self.answered(batches, permit, sent, Err(e)),
        };
        if self.cfg.acks == Acks::None {
            let written = conn.send_oneway(&request, v).await.map(|()| None);
            return self.answered(batches, permit, sent, written);
        }
        let me = self.clone();
        conn.request_with_callback(&request, v, move |answer| {
            me.answered(batches, permit, sent, answer.map(Some))
        })
        .await;
    }

    /// Settles one request's batches from its answer (`None` for acks=0). `permit` is the
    /// request's place among the node's requests in flight: given back as soon as the
    /// answer is in when every batch succeeded, so the next request goes out while these
    /// records are being completed; otherwise only once retries are queued, so that
    /// nothing overtakes them.
    fn answered(
        &self,
        batches: Vec<ProducerBatch>,
        permit: OwnedSemaphorePermit,
        sent: Instant,
        result: Result<Option<ProduceResponse>>,
    ) {
        let now = Instant::now();
        let all_succeeded = match &result {
            Ok(Some(resp)) => {
                let answers = || resp.responses.iter().flat_map(|t| &t.partition_responses);
                answers().count() == batches.len()
                    && answers().all(|p| {
                        p.error_code == 0 || p.error_code == E::DuplicateSequenceNumber.code()
                    })
            }
            Ok(None) => true,
            Err(_) => false,
        };
        let mut permit = Some(permit);
        if all_succeeded {
            drop(permit.take());
            self.acc.wake_sender.notify_one();
        }
        if matches!(result, Ok(Some(_))) {
            if let Ok(mut h) = self.request_latency.lock() {
                h.saturating_record((now - sent).as_micros().max(1) as u64);
            }
        }
        match result {
            Err(e) => {
                // The whole request failed (connection, timeout): every batch may retry.
                for b in batches {
                    self.settle(b, Err(e.clone()), now);
                }
            }
            Ok(None) => {
                // acks=0: done as soon as it is written.
                for b in batches {
                    self.settle(b, Ok((-1, -1)), now);
                }
            }
            Ok(Some(resp)) => {
                // (topic, partition) -> (error, base offset, log append time, message,
                // the records the batch was refused for)
                type Answer = (
                    i16,
                    i64,
                    i64,
                    Option<String>,
                    Vec<BatchIndexAndErrorMessage>,
                );
                let mut answers: HashMap<(String, i32), Answer> = HashMap::new();
                for t in &resp.responses {
                    for p in &t.partition_responses {
                        answers.insert(
                            (t.name.to_string(), p.index),
                            (
                                p.error_code,
                                p.base_offset,
                                p.log_append_time_ms,
                                p.error_message.as_ref().map(|m| m.to_string()),
                                p.record_errors.clone(),
                            ),
                        );
                    }
                }
                for b in batches {
                    match answers.remove(&(b.tp.topic.to_string(), b.tp.partition)) {
                        Some((0, base, append_time, _, _)) => {
                            self.settle(b, Ok((base, append_time)), now)
                        }
                        Some((code, base, append_time, _, _))
                            if code == E::DuplicateSequenceNumber.code() =>
                        {
                            self.settle(b, Ok((base, append_time)), now)
                        }
                        Some((_, _, _, msg, rejected)) if !rejected.is_empty() => {
                            self.fail_rejected(b, msg, &rejected)
                        }
                        Some((code, _, _, msg, _)) => {
                            self.settle(b, Err(ClientError::kafka(code, msg)), now)
                        }
                        None => self.settle(
                            b,
                            Err(ClientError::Protocol(
                                "the response left out a partition".into(),
                            )),
                            now,
                        ),
                    }
                }
            }
        }
        // Retries are queued: the request's place in flight can go.
        drop(permit);
        self.outstanding
            .fetch_sub(1, std::sync::atomic::Ordering::SeqCst);
        self.acc.wake_sender.notify_one();
    }

    /// The Produce request for `batches` (their bytes, as built).
    fn build_request(&self, batches: &[ProducerBatch]) -> ProduceRequest {
        let mut topics: BTreeMap<String, Vec<PartitionProduceData>> = BTreeMap::new();
        for b in batches {
            let mut pd = PartitionProduceData::default();
            pd.index = b.tp.partition;
            // Shared with the batch, not copied: the frame encoding is the one copy.
            pd.records = b.bytes.clone();
            topics.entry(b.tp.topic.to_string()).or_default().push(pd);
        }
        let mut req = ProduceRequest::default();
        req.transactional_id = self.txn.as_ref().map(|t| {
            kafka_protocol::messages::TransactionalId(StrBytes::from_string(t.id.clone()))
        });
        req.acks = self.cfg.acks.wire();
        req.timeout_ms = self
            .cfg
            .cluster
            .request_timeout
            .as_millis()
            .min(i32::MAX as u128) as i32;
        req.topic_data = topics
            .into_iter()
            .map(|(name, parts)| {
                let mut t = TopicProduceData::default();
                t.name = TopicName(StrBytes::from_string(name));
                t.partition_data = parts;
                t
            })
            .collect();
        req
    }

    /// Decides what becomes of one batch after an answer (or a failed request).
    /// A batch the broker refused for some of its records (KIP-467), which it named: those
    /// fail with INVALID_RECORD and the broker's reason, the others with
    /// `InvalidDifferentRecord`, as Kafka's and librdkafka's producers report them. Not
    /// retried: the same records would be refused again.
    fn fail_rejected(
        &self,
        batch: ProducerBatch,
        reason: Option<String>,
        rejected: &[BatchIndexAndErrorMessage],
    ) {
        let named: HashMap<i32, Option<String>> = rejected
            .iter()
            .map(|r| {
                let why = r.batch_index_error_message.as_ref().map(|m| m.to_string());
                (r.batch_index, why)
            })
            .collect();
        let reason = reason.unwrap_or_else(|| format!("{} record(s) refused", named.len()));
        if batch.producer.is_some() {
            // Its sequences will never be written: the batches after it need a new epoch.
            self.require_bump();
        }
        self.txn_failed(
            ClientError::kafka(E::InvalidRecord.code(), Some(reason.clone())),
            false,
        );
        let records = batch.record_count();
        batch.fail_each(
            |i| match i32::try_from(i).ok().and_then(|i| named.get(&i)) {
                Some(why) => ClientError::kafka(E::InvalidRecord.code(), why.clone()),
                None => ClientError::InvalidDifferentRecord {
                    reason: reason.clone(),
                },
            },
            &self.acc.pool,
        );
        self.acc.done(records);
    }

    fn settle(&self, batch: ProducerBatch, outcome: Result<(i64, i64)>, now: Instant) {
        let records = batch.record_count();
        match outcome {
            Ok((base, append_time)) => {
                if let Some((_, _, seq)) = batch.producer {
                    if let Ok(mut i) = self.idempotence.lock() {
                        if let Some(i) = i.as_mut() {
                            let next =
                                ((seq as i64 + records as i64) % (i32::MAX as i64 + 1)) as i32;
                            i.acked_through.insert(batch.tp.clone(), next);
                        }
                    }
                }
                batch.complete(base, append_time, &self.acc.pool);
                self.acc.done(records);
            }
            Err(e) => {
                if e.needs_metadata_refresh() {
                    let cluster = self.cluster.clone();
                    tokio::spawn(async move {
                        let _ = cluster.refresh(None, false).await;
                    });
                }
                let expired = now.duration_since(batch.created) >= self.cfg.delivery_timeout;
                let batch =
                    if e.code() == Some(E::MessageTooLarge.code()) && records > 1 && !expired {
                        match self.acc.split_and_reenqueue(batch) {
                            Ok(n) => {
                                tracing::debug!(
                                    pieces = n,
                                    "a batch was too large for the broker: split"
                                );
                                return;
                            }
                            Err(unsplittable) => *unsplittable,
                        }
                    } else {
                        batch
                    };
                // An out-of-order sequence is expected while an earlier batch of the same
                // partition is being retried: this one goes back behind it. If it is the
                // very sequence the broker should want next, the broker has lost our state
                // (as with UNKNOWN_PRODUCER_ID): a new epoch restarts the sequences.
                let out_of_order = e.code() == Some(E::OutOfOrderSequenceNumber.code());
                let unknown_producer = e.code() == Some(E::UnknownProducerId.code());
                let lost_state =
                    unknown_producer || (out_of_order && self.is_next_sequence(&batch));
                if lost_state {
                    self.require_bump();
                }
                // A transaction cannot go on past lost producer state: the abort bumps
                // the epoch, and the next transaction starts the sequences again.
                let retriable = (e.is_retriable() || out_of_order || unknown_producer)
                    && !(lost_state && self.txn.is_some());
                if retriable && batch.attempts < self.cfg.retries && !expired {
                    self.acc.reenqueue(batch, now);
                } else {
                    // A sequenced batch that will never be written leaves a gap that the
                    // batches after it cannot cross without a new epoch.
                    if batch.producer.is_some() {
                        self.require_bump();
                    }
                    let fatal = fatal_produce_error(&e);
                    self.txn_failed(e.clone(), fatal);
                    batch.fail(e, &self.acc.pool);
                    self.acc.done(records);
                }
            }
        }
    }
}
