//! The transactional half of Kafka's `TransactionManager`: a producer with a
//! `transactional.id` writes to many partitions, and commits a consumer group's offsets,
//! as one transaction that the coordinator commits or aborts whole (KIP-98, KIP-447).
//!
//! The state machine is the Java client's: `init_transactions` (InitProducerId with the
//! id: a new epoch that fences older producers of the same id, and aborts their open
//! transaction), then `begin_transaction`, records, `send_offsets_to_transaction`, and
//! `commit_transaction` or `abort_transaction`. A partition's first record of a
//! transaction waits in the accumulator until the sender has added the partition to the
//! transaction (AddPartitionsToTxn): the broker refuses transactional batches for a
//! partition the coordinator does not know is in the transaction.
//!
//! Errors come in Kafka's two kinds. An *abortable* error (a record or the offsets not
//! written) leaves the producer usable: the transaction must be aborted, then a new one
//! begun. A *fatal* error (fenced by a newer producer of the same id, not authorised, a
//! state the coordinator refuses) ends the producer: every later call returns it.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::future::Future;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use kafka_protocol::messages::add_partitions_to_txn_request::AddPartitionsToTxnTopic;
use kafka_protocol::messages::txn_offset_commit_request::{
    TxnOffsetCommitRequestPartition, TxnOffsetCommitRequestTopic,
};
use kafka_protocol::messages::{
    AddOffsetsToTxnRequest, AddPartitionsToTxnRequest, ApiKey, EndTxnRequest, GroupId,
    InitProducerIdRequest, ProducerId, TopicName, TransactionalId, TxnOffsetCommitRequest,
};
use kafka_protocol::protocol::StrBytes;
use kafka_protocol::ResponseError as E;
use tokio::sync::Notify;

use crate::cluster::CoordinatorKind;
use crate::consumer::OffsetAndMetadata;
use crate::error::{ClientError, Result};
use crate::producer::sender::{Sender, INIT_PRODUCER_ID_VERSIONS};
use weir_kafka::TopicPartition;

const ADD_PARTITIONS_VERSIONS: (i16, i16) = (0, 3);
const ADD_OFFSETS_VERSIONS: (i16, i16) = (0, 3);
const END_TXN_VERSIONS: (i16, i16) = (0, 3);
const TXN_OFFSET_COMMIT_VERSIONS: (i16, i16) = (0, 3);

/// How long to wait before asking again after CONCURRENT_TRANSACTIONS: the previous
/// transaction's markers are being written, which takes a round trip or two, so the
/// Java client's 20 ms beats a full `retry.backoff.ms`.
const CONCURRENT_TRANSACTIONS_BACKOFF: Duration = Duration::from_millis(20);

/// What a consumer's group says of it, for the offsets a transaction commits: the
/// coordinator takes them only from the group's current member (KIP-447), so a consumer
/// that lost its partitions in a rebalance cannot commit offsets for them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConsumerGroupMetadata {
    pub group_id: String,
    /// -1 with an empty `member_id`: a group without members (offsets only).
    pub generation_id: i32,
    pub member_id: String,
    pub group_instance_id: Option<String>,
}

impl ConsumerGroupMetadata {
    /// A group this producer commits offsets for without being a member of it.
    pub fn new(group_id: impl Into<String>) -> Self {
        ConsumerGroupMetadata {
            group_id: group_id.into(),
            generation_id: -1,
            member_id: String::new(),
            group_instance_id: None,
        }
    }
}

/// Where the producer is in its transactions (Kafka's `TransactionManager.State`).
#[derive(Debug, Clone)]
enum Phase {
    Uninitialized,
    Ready,
    InTransaction,
    Committing,
    Aborting,
    /// The transaction cannot commit; the error that made it so.
    Abortable(ClientError),
    /// The producer is done; the error that ended it.
    Fatal(ClientError),
}

struct State {
    phase: Phase,
    /// Partitions the coordinator has in this transaction: their batches may be sent.
    added: HashSet<TopicPartition>,
    /// Partitions with records waiting to be added.
    pending: HashSet<TopicPartition>,
    /// An AddPartitionsToTxn is being sent.
    adding: bool,
    /// The coordinator knows of this transaction (a partition or a group was added):
    /// only then does it need an EndTxn.
    open_on_coordinator: bool,
    /// The next abort must move to a new epoch (InitProducerId with this producer's id
    /// and epoch, KIP-360): a batch's sequence will never be written, or the broker
    /// forgot this producer.
    bump_on_abort: bool,
}

/// A transactional producer's state, kept by its sender.
pub(crate) struct Transactions {
    pub id: String,
    timeout_ms: i32,
    state: Mutex<State>,
    /// Woken whenever `adding` goes false.
    added: Notify,
}

/// How a request to a coordinator failed for good.
enum Failed {
    /// Not answered in time (the last error inside): the phase stays, the call may be
    /// made again.
    Timeout(ClientError),
    Abortable(ClientError),
    Fatal(ClientError),
}

/// What one attempt of a request to a coordinator came to.
enum Attempt<T> {
    Done(T),
    /// Retry after `backoff`.
    Retry(ClientError, Duration),
    /// Find the coordinator again, then retry.
    Refind(ClientError),
    Abortable(ClientError),
    Fatal(ClientError),
}

impl<T> Attempt<T> {
    /// How bad a failed attempt is, to answer a request by its worst partition.
    fn severity(&self) -> u8 {
        match self {
            Attempt::Done(_) => 0,
            Attempt::Retry(..) | Attempt::Refind(_) => 1,
            Attempt::Abortable(_) => 2,
            Attempt::Fatal(_) => 3,
        }
    }

    /// Keeps the worse of `self` and `other`.
    fn worst(worst: Option<Self>, other: Self) -> Option<Self> {
        match worst {
            Some(w) if w.severity() >= other.severity() => Some(w),
            _ => Some(other),
        }
    }
}

/// Kafka's handling of an error code from a transaction or group coordinator (the
/// handlers of the Java client's `TransactionManager`). `backoff` is the usual retry wait.
fn judge<T>(code: i16, what: &str, backoff: Duration) -> std::result::Result<(), Attempt<T>> {
    if code == 0 {
        return Ok(());
    }
    let error = ClientError::kafka(code, Some(what.to_string()));
    let Some(kind) = E::try_from_code(code) else {
        return Err(Attempt::Fatal(error));
    };
    Err(match kind {
        E::NotCoordinator | E::CoordinatorNotAvailable | E::RequestTimedOut => {
            Attempt::Refind(error)
        }
        E::ConcurrentTransactions => Attempt::Retry(error, CONCURRENT_TRANSACTIONS_BACKOFF),
        E::CoordinatorLoadInProgress | E::UnknownTopicOrPartition => Attempt::Retry(error, backoff),
        // The records or offsets of this transaction cannot be written, or the broker
        // lost this producer's state: abort, and begin again.
        E::TopicAuthorizationFailed
        | E::GroupAuthorizationFailed
        | E::UnknownProducerId
        | E::InvalidProducerIdMapping
        | E::UnknownMemberId
        | E::IllegalGeneration
        | E::FencedInstanceId
        | E::InvalidCommitOffsetSize => Attempt::Abortable(error),
        // PRODUCER_FENCED, INVALID_PRODUCER_EPOCH, TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
        // INVALID_TXN_STATE, UNSUPPORTED_VERSION and whatever else: the Java client
        // treats an error it does not expect here as fatal.
        _ => Attempt::Fatal(error),
    })
}

impl Transactions {
    pub fn new(id: String, timeout: Duration) -> Self {
        Transactions {
            id,
            // The config checks it fits.
            timeout_ms: timeout.as_millis().min(i32::MAX as u128) as i32,
            state: Mutex::new(State {
                phase: Phase::Uninitialized,
                added: HashSet::new(),
                pending: HashSet::new(),
                adding: false,
                open_on_coordinator: false,
                bump_on_abort: false,
            }),
            added: Notify::new(),
        }
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The error a call gets in a failed phase.
    fn failure(phase: &Phase) -> Option<ClientError> {
        match phase {
            Phase::Abortable(e) => Some(ClientError::TransactionAbortable(Box::new(e.clone()))),
            Phase::Fatal(e) => Some(ClientError::TransactionFatal(Box::new(e.clone()))),
            _ => None,
        }
    }

    /// Whether a record may be sent now: only inside a transaction.
    pub fn check_send(&self) -> Result<()> {
        let s = self.lock();
        match &s.phase {
            Phase::InTransaction => Ok(()),
            p => Err(Self::failure(p).unwrap_or_else(|| {
                ClientError::IllegalState(format!(
                    "a transactional producer sends only between begin_transaction and \
                     commit_transaction or abort_transaction (it is {p:?})"
                ))
            })),
        }
    }

    /// Notes that `tp` has a record in this transaction; returns whether the sender must
    /// add it.
    pub fn note_partition(&self, tp: &TopicPartition) -> bool {
        let mut s = self.lock();
        if s.added.contains(tp) || s.pending.contains(tp) {
            return false;
        }
        s.pending.insert(tp.clone());
        true
    }

    /// Moves partitions the coordinator took from pending to added.
    fn mark_added(&self, partitions: Vec<TopicPartition>) {
        if partitions.is_empty() {
            return;
        }
        let mut s = self.lock();
        for tp in partitions {
            s.pending.remove(&tp);
            s.added.insert(tp);
        }
        s.open_on_coordinator = true;
    }

    /// Whether the sender may send `tp`'s batches now.
    pub fn may_send(&self, tp: &TopicPartition) -> bool {
        let s = self.lock();
        matches!(s.phase, Phase::InTransaction | Phase::Committing) && s.added.contains(tp)
    }

    /// The error queued batches are to fail with, when the transaction can no longer
    /// commit them.
    pub fn undrainable(&self) -> Option<ClientError> {
        Self::failure(&self.lock().phase)
    }

    /// Starts an AddPartitionsToTxn if partitions wait and none is being sent.
    pub fn start_adding(&self) -> bool {
        let mut s = self.lock();
        if s.adding
            || s.pending.is_empty()
            || !matches!(s.phase, Phase::InTransaction | Phase::Committing)
        {
            return false;
        }
        s.adding = true;
        true
    }

    /// A sequence will never be written: the next abort bumps the epoch.
    pub fn require_bump(&self) {
        self.lock().bump_on_abort = true;
    }

    /// Moves to an abortable or fatal phase for `e` (a fatal one is never left). Returns
    /// whether the phase changed.
    pub fn fail(&self, e: ClientError, fatal: bool) -> bool {
        let mut s = self.lock();
        match (&s.phase, fatal) {
            (Phase::Fatal(_), _) => false,
            (Phase::Abortable(_), false) => false,
            // Nothing to make abortable, or an abort already under way.
            (Phase::Uninitialized | Phase::Ready | Phase::Aborting, false) => false,
            _ => {
                s.phase = if fatal {
                    Phase::Fatal(e)
                } else {
                    Phase::Abortable(e)
                };
                true
            }
        }
    }
}

/// Whether a Produce error ends a transactional producer (fenced, or not authorised for
/// its id), rather than only its transaction.
pub(crate) fn fatal_produce_error(e: &ClientError) -> bool {
    matches!(
        e.code().and_then(E::try_from_code),
        Some(
            E::ProducerFenced
                | E::InvalidProducerEpoch
                | E::TransactionalIdAuthorizationFailed
                | E::ClusterAuthorizationFailed
        )
    )
}

/// One TxnOffsetCommit: done, or the worst of its partitions' errors. On a retriable one
/// the whole request goes again: a transaction keeps one offset per partition, the last.
async fn txn_offset_commit(
    conn: Arc<crate::conn::BrokerConnection>,
    req: &TxnOffsetCommitRequest,
    group: &ConsumerGroupMetadata,
    backoff: Duration,
) -> Attempt<()> {
    let v = match conn.version_for(ApiKey::TxnOffsetCommit, TXN_OFFSET_COMMIT_VERSIONS) {
        Ok(v) => v,
        Err(e) => return Attempt::Fatal(e),
    };
    if v < 3 && group.generation_id >= 0 {
        // Without the member's generation, the coordinator cannot refuse a consumer
        // that lost its partitions in a rebalance: not safe, so not sent.
        return Attempt::Fatal(ClientError::kafka(
            E::UnsupportedVersion.code(),
            Some(
                "the broker's TxnOffsetCommit predates group metadata (KIP-447: version 3)".into(),
            ),
        ));
    }
    let resp = match conn.request(req, v).await {
        Ok(r) => r,
        Err(e) => return Attempt::Refind(e),
    };
    let mut worst = None;
    for topic in &resp.topics {
        for p in &topic.partitions {
            let what = || {
                format!(
                    "committing the offset of {}-{}",
                    topic.name.as_str(),
                    p.partition_index
                )
            };
            if p.error_code != 0 {
                if let Err(a) = judge(p.error_code, &what(), backoff) {
                    worst = Attempt::worst(worst, a);
                }
            }
        }
    }
    worst.unwrap_or(Attempt::Done(()))
}

/// One AddPartitionsToTxn: the partitions the coordinator took, and the worst error of
/// the others (OPERATION_NOT_ATTEMPTED, a partition held back because another failed,
/// is no error of its own: it is asked again).
async fn add_partitions_once(
    conn: Arc<crate::conn::BrokerConnection>,
    req: &AddPartitionsToTxnRequest,
    backoff: Duration,
) -> (Vec<TopicPartition>, Option<Attempt<Vec<TopicPartition>>>) {
    let v = match conn.version_for(ApiKey::AddPartitionsToTxn, ADD_PARTITIONS_VERSIONS) {
        Ok(v) => v,
        Err(e) => return (Vec::new(), Some(Attempt::Fatal(e))),
    };
    let resp = match conn.request(req, v).await {
        Ok(r) => r,
        Err(e) => return (Vec::new(), Some(Attempt::Refind(e))),
    };
    let mut added = Vec::new();
    let mut worst = None;
    for topic in &resp.results_by_topic_v3_and_below {
        for p in &topic.results_by_partition {
            let tp = TopicPartition::new(topic.name.as_str(), p.partition_index);
            let code = p.partition_error_code;
            if code == E::OperationNotAttempted.code() {
                continue;
            }
            if code == 0 {
                added.push(tp);
                continue;
            }
            let what = format!("adding {}-{} to the transaction", tp.topic, tp.partition);
            if let Err(a) = judge(code, &what, backoff) {
                worst = Attempt::worst(worst, a);
            }
        }
    }
    (added, worst)
}

/// Whether the broker answered that it does not know this producer (its state was lost,
/// or expired): only a new epoch gets it going again.
fn lost_producer(e: &ClientError) -> bool {
    matches!(
        e.code().and_then(E::try_from_code),
        Some(E::UnknownProducerId | E::InvalidProducerIdMapping)
    )
}

impl Sender {
    fn txn(&self) -> Result<&Transactions> {
        self.txn
            .as_ref()
            .ok_or_else(|| ClientError::IllegalState("the producer has no transactional.id".into()))
    }

    /// Records a transaction's failure: queued records fail with it at once (they can no
    /// longer commit), and a sequence they leave unwritten calls for a new epoch.
    pub(crate) fn txn_failed(&self, e: ClientError, fatal: bool) {
        let Some(t) = &self.txn else { return };
        if t.fail(e, fatal) {
            self.fail_undrainable();
        }
    }

    /// Fails the batches still queued when the transaction cannot commit them.
    pub(crate) fn fail_undrainable(&self) {
        let Some(t) = &self.txn else { return };
        if let Some(e) = t.undrainable() {
            if self.acc.abort_all(e) {
                t.require_bump();
            }
        }
    }

    /// Sends a request to a coordinator until it is answered for good or `deadline`
    /// passes. `attempt` makes one try on the connection it is given.
    async fn with_coordinator<T, F, Fut>(
        &self,
        kind: CoordinatorKind,
        key: &str,
        what: &str,
        deadline: Instant,
        mut attempt: F,
    ) -> std::result::Result<T, Failed>
    where
        F: FnMut(Arc<crate::conn::BrokerConnection>) -> Fut,
        Fut: Future<Output = Attempt<T>>,
    {
        let backoff = self.cfg.retry_backoff.max(Duration::from_millis(10));
        loop {
            let outcome = match self.cluster.coordinator_of(kind, key).await {
                Ok(conn) => attempt(conn).await,
                Err(e) if e.is_retriable() || e.needs_metadata_refresh() => Attempt::Refind(e),
                Err(e) => Attempt::Fatal(e),
            };
            let (last, wait) = match outcome {
                Attempt::Done(t) => return Ok(t),
                Attempt::Abortable(e) => return Err(Failed::Abortable(e)),
                Attempt::Fatal(e) => return Err(Failed::Fatal(e)),
                Attempt::Retry(e, wait) => (e, wait),
                Attempt::Refind(e) => {
                    self.cluster.forget_coordinator_of(kind, key);
                    (e, backoff)
                }
            };
            if Instant::now() + wait >= deadline {
                return Err(Failed::Timeout(ClientError::Timeout {
                    what: format!("{what} (last: {last})"),
                    ms: self.cfg.max_block.as_millis() as u64,
                }));
            }
            tokio::time::sleep(wait).await;
        }
    }

    /// A request's final failure, as the caller gets it, with the phase moved on: a
    /// timeout leaves the phase as it was, so the same call may be made again.
    fn settle_failure(&self, failed: Failed) -> ClientError {
        match failed {
            Failed::Abortable(e) => {
                self.txn_failed(e.clone(), false);
                ClientError::TransactionAbortable(Box::new(e))
            }
            Failed::Fatal(e) => {
                self.txn_failed(e.clone(), true);
                ClientError::TransactionFatal(Box::new(e))
            }
            Failed::Timeout(e) => e,
        }
    }

    /// One InitProducerId for the transactional id: a fresh epoch for (-1, -1), or the
    /// bump of the producer's own id and epoch (KIP-360, brokers from v3 on).
    async fn txn_init_producer_id(
        &self,
        current: Option<(i64, i16)>,
        deadline: Instant,
    ) -> Result<(i64, i16)> {
        let t = self.txn()?;
        let backoff = self.cfg.retry_backoff;
        let got = self
            .with_coordinator(
                CoordinatorKind::Transaction,
                &t.id,
                "InitProducerId",
                deadline,
                |conn| async move {
                    let v =
                        match conn.version_for(ApiKey::InitProducerId, INIT_PRODUCER_ID_VERSIONS) {
                            Ok(v) => v,
                            Err(e) => return Attempt::Fatal(e),
                        };
                    let mut req = InitProducerIdRequest::default();
                    req.transactional_id =
                        Some(TransactionalId(StrBytes::from_string(t.id.clone())));
                    req.transaction_timeout_ms = t.timeout_ms;
                    let (pid, epoch) = match current {
                        Some(ids) if v >= 3 => ids,
                        _ => (-1, -1),
                    };
                    req.producer_id = ProducerId(pid);
                    req.producer_epoch = epoch;
                    match conn.request(&req, v).await {
                        Ok(resp) => match judge(resp.error_code, "InitProducerId", backoff) {
                            Ok(()) => Attempt::Done((resp.producer_id.0, resp.producer_epoch)),
                            Err(a) => a,
                        },
                        Err(e) => Attempt::Refind(e),
                    }
                },
            )
            .await;
        got.map_err(|failed| self.settle_failure(failed))
    }

    /// `init_transactions`: the producer id and epoch of the transactional id, fencing
    /// every older producer of it and finishing the transaction it left open.
    pub(crate) async fn init_transactions(&self, deadline: Instant) -> Result<()> {
        let t = self.txn()?;
        {
            let s = t.lock();
            match &s.phase {
                Phase::Uninitialized => {}
                p => {
                    return Err(Transactions::failure(p).unwrap_or_else(|| {
                        ClientError::IllegalState("init_transactions was called already".into())
                    }))
                }
            }
        }
        let (pid, epoch) = self.txn_init_producer_id(None, deadline).await?;
        self.set_producer(pid, epoch);
        t.lock().phase = Phase::Ready;
        tracing::debug!(
            transactional_id = %t.id,
            producer_id = pid,
            epoch,
            "transactional producer initialised"
        );
        Ok(())
    }

    pub(crate) fn begin_transaction(&self) -> Result<()> {
        let t = self.txn()?;
        let mut s = t.lock();
        match &s.phase {
            Phase::Ready => {
                s.phase = Phase::InTransaction;
                s.added.clear();
                s.pending.clear();
                s.open_on_coordinator = false;
                Ok(())
            }
            p => Err(Transactions::failure(p).unwrap_or_else(|| {
                ClientError::IllegalState(match p {
                    Phase::Uninitialized => "init_transactions must come first".into(),
                    p => format!("a transaction is already open ({p:?})"),
                })
            })),
        }
    }

    /// The sender's part: adds the partitions that have records waiting, until none
    /// waits or the transaction fails. Runs as a task of its own on the I/O thread.
    pub(crate) async fn add_partitions(self: Arc<Self>) {
        let Some(t) = &self.txn else { return };
        let backoff = self.cfg.retry_backoff.max(Duration::from_millis(10));
        loop {
            let partitions: Vec<TopicPartition> = {
                let mut s = t.lock();
                let going = matches!(s.phase, Phase::InTransaction | Phase::Committing);
                if !going || s.pending.is_empty() {
                    s.adding = false;
                    drop(s);
                    t.added.notify_waiters();
                    self.acc.wake_sender.notify_one();
                    return;
                }
                s.pending.iter().cloned().collect()
            };
            let Some((pid, epoch)) = self.producer_id_and_epoch() else {
                // init_transactions sets it before any transaction begins.
                self.txn_failed(
                    ClientError::IllegalState("no producer id for the transaction".into()),
                    true,
                );
                continue;
            };
            let mut topics: BTreeMap<&str, Vec<i32>> = BTreeMap::new();
            for tp in &partitions {
                topics.entry(&tp.topic).or_default().push(tp.partition);
            }
            let mut req = AddPartitionsToTxnRequest::default();
            req.v3_and_below_transactional_id =
                TransactionalId(StrBytes::from_string(t.id.clone()));
            req.v3_and_below_producer_id = ProducerId(pid);
            req.v3_and_below_producer_epoch = epoch;
            req.v3_and_below_topics = topics
                .into_iter()
                .map(|(name, partitions)| {
                    let mut topic = AddPartitionsToTxnTopic::default();
                    topic.name = TopicName(StrBytes::from_string(name.to_string()));
                    topic.partitions = partitions;
                    topic
                })
                .collect();
            let req = &req;
            // Retried here only until the next pass of this loop, which also takes in
            // partitions noted meanwhile; the records' delivery.timeout.ms bounds it all.
            let deadline = Instant::now() + self.cfg.delivery_timeout;
            let answer = self
                .with_coordinator(
                    CoordinatorKind::Transaction,
                    &t.id,
                    "AddPartitionsToTxn",
                    deadline,
                    |conn| async move {
                        let (added, failed) = add_partitions_once(conn, req, backoff).await;
                        match failed {
                            None => Attempt::Done(added),
                            Some(bad) => {
                                // Kept: the coordinator has them in the transaction.
                                t.mark_added(added);
                                bad
                            }
                        }
                    },
                )
                .await;
            match answer {
                Ok(added) => {
                    t.mark_added(added);
                    self.acc.wake_sender.notify_one();
                }
                Err(Failed::Timeout(_)) => tokio::time::sleep(backoff).await,
                Err(failed) => {
                    if matches!(&failed, Failed::Abortable(e) if lost_producer(e)) {
                        t.require_bump();
                    }
                    let e = self.settle_failure(failed);
                    tracing::warn!(
                        transactional_id = %t.id,
                        "adding partitions to the transaction failed: {e}"
                    );
                }
            }
        }
    }

    /// Waits until no AddPartitionsToTxn is being sent, or `deadline`.
    async fn adds_settled(&self, t: &Transactions, deadline: Instant) -> Result<()> {
        loop {
            let notified = t.added.notified();
            if !t.lock().adding {
                return Ok(());
            }
            if tokio::time::timeout_at(deadline.into(), notified)
                .await
                .is_err()
            {
                return Err(ClientError::Timeout {
                    what: "adding partitions to the transaction".into(),
                    ms: self.cfg.max_block.as_millis() as u64,
                });
            }
        }
    }

    /// `send_offsets_to_transaction`: the group's offsets, committed with this
    /// transaction (AddOffsetsToTxn to the transaction's coordinator, then TxnOffsetCommit
    /// to the group's).
    pub(crate) async fn send_offsets(
        &self,
        offsets: &HashMap<TopicPartition, OffsetAndMetadata>,
        group: &ConsumerGroupMetadata,
        deadline: Instant,
    ) -> Result<()> {
        let t = self.txn()?;
        t.check_send()?;
        if offsets.is_empty() {
            return Ok(());
        }
        let (pid, epoch) = self
            .producer_id_and_epoch()
            .ok_or_else(|| ClientError::IllegalState("init_transactions must come first".into()))?;
        let backoff = self.cfg.retry_backoff;
        let added = self
            .with_coordinator(
                CoordinatorKind::Transaction,
                &t.id,
                "AddOffsetsToTxn",
                deadline,
                |conn| async move {
                    let v = match conn.version_for(ApiKey::AddOffsetsToTxn, ADD_OFFSETS_VERSIONS) {
                        Ok(v) => v,
                        Err(e) => return Attempt::Fatal(e),
                    };
                    let mut req = AddOffsetsToTxnRequest::default();
                    req.transactional_id = TransactionalId(StrBytes::from_string(t.id.clone()));
                    req.producer_id = ProducerId(pid);
                    req.producer_epoch = epoch;
                    req.group_id = GroupId(StrBytes::from_string(group.group_id.clone()));
                    match conn.request(&req, v).await {
                        Ok(resp) => match judge(resp.error_code, "AddOffsetsToTxn", backoff) {
                            Ok(()) => Attempt::Done(()),
                            Err(a) => a,
                        },
                        Err(e) => Attempt::Refind(e),
                    }
                },
            )
            .await;
        added.map_err(|failed| self.settle_failure(failed))?;
        t.lock().open_on_coordinator = true;

        let mut by_topic: BTreeMap<&str, Vec<TxnOffsetCommitRequestPartition>> = BTreeMap::new();
        for (tp, o) in offsets {
            let mut p = TxnOffsetCommitRequestPartition::default();
            p.partition_index = tp.partition;
            p.committed_offset = o.offset;
            p.committed_leader_epoch = o.leader_epoch.unwrap_or(-1);
            p.committed_metadata = Some(StrBytes::from_string(o.metadata.clone()));
            by_topic.entry(&tp.topic).or_default().push(p);
        }
        let mut req = TxnOffsetCommitRequest::default();
        req.transactional_id = TransactionalId(StrBytes::from_string(t.id.clone()));
        req.group_id = GroupId(StrBytes::from_string(group.group_id.clone()));
        req.producer_id = ProducerId(pid);
        req.producer_epoch = epoch;
        req.generation_id = group.generation_id;
        req.member_id = StrBytes::from_string(group.member_id.clone());
        req.group_instance_id = group.group_instance_id.clone().map(StrBytes::from_string);
        req.topics = by_topic
            .into_iter()
            .map(|(name, partitions)| {
                let mut topic = TxnOffsetCommitRequestTopic::default();
                topic.name = TopicName(StrBytes::from_string(name.to_string()));
                topic.partitions = partitions;
                topic
            })
            .collect();
        let req = &req;
        let committed = self
            .with_coordinator(
                CoordinatorKind::Group,
                &group.group_id,
                "TxnOffsetCommit",
                deadline,
                |conn| txn_offset_commit(conn, req, group, backoff),
            )
            .await;
        committed.map_err(|failed| self.settle_failure(failed))
    }

    /// Commits (`commit = true`, once every record is acknowledged) or aborts the
    /// transaction: EndTxn, or for an abort that needs a new epoch, InitProducerId with
    /// the producer's own id and epoch, which aborts it at the coordinator.
    pub(crate) async fn end_transaction(&self, commit: bool, deadline: Instant) -> Result<()> {
        let t = self.txn()?;
        {
            let mut s = t.lock();
            let next = match (&s.phase, commit) {
                (Phase::InTransaction | Phase::Committing, true) => Phase::Committing,
                (Phase::InTransaction | Phase::Aborting | Phase::Abortable(_), false) => {
                    Phase::Aborting
                }
                (p @ (Phase::Abortable(_) | Phase::Fatal(_)), _) => {
                    let e = Transactions::failure(p).expect("a failed phase has an error");
                    return Err(e);
                }
                (p, _) => {
                    return Err(ClientError::IllegalState(format!(
                        "no transaction to {} ({p:?})",
                        if commit { "commit" } else { "abort" }
                    )))
                }
            };
            s.phase = next;
        }
        if !commit {
            // Records not sent yet are not sent at all.
            if self
                .acc
                .abort_all(ClientError::TransactionAborted(t.id.clone()))
            {
                t.require_bump();
            }
        }
        self.acc.wake_sender.notify_one();
        self.wait_for_records(deadline).await?;
        self.adds_settled(t, deadline).await?;
        if commit {
            // A record that failed made the transaction abortable.
            if let Some(e) = t.undrainable() {
                return Err(e);
            }
        }
        let (open, bump) = {
            let s = t.lock();
            (s.open_on_coordinator, s.bump_on_abort)
        };
        // An abort that needs a new epoch ends the transaction first: InitProducerId
        // for an open transaction would only fence it.
        if open {
            let (pid, epoch) = self.producer_id_and_epoch().ok_or_else(|| {
                ClientError::IllegalState("init_transactions must come first".into())
            })?;
            let backoff = self.cfg.retry_backoff;
            let what = if commit {
                "EndTxn (commit)"
            } else {
                "EndTxn (abort)"
            };
            let ended = self
                .with_coordinator(
                    CoordinatorKind::Transaction,
                    &t.id,
                    what,
                    deadline,
                    |conn| async move {
                        let v = match conn.version_for(ApiKey::EndTxn, END_TXN_VERSIONS) {
                            Ok(v) => v,
                            Err(e) => return Attempt::Fatal(e),
                        };
                        let mut req = EndTxnRequest::default();
                        req.transactional_id = TransactionalId(StrBytes::from_string(t.id.clone()));
                        req.producer_id = ProducerId(pid);
                        req.producer_epoch = epoch;
                        req.committed = commit;
                        match conn.request(&req, v).await {
                            Ok(resp) => match judge(resp.error_code, what, backoff) {
                                Ok(()) => Attempt::Done(()),
                                Err(a) => a,
                            },
                            Err(e) => Attempt::Refind(e),
                        }
                    },
                )
                .await;
            match ended {
                Ok(()) => {}
                // The coordinator lost the producer: an abort gets there by a new epoch.
                Err(Failed::Abortable(e)) if !commit && lost_producer(&e) => {
                    return self.abort_with_new_epoch(t, deadline).await;
                }
                Err(failed) => {
                    let e = self.settle_failure(failed);
                    return Err(e);
                }
            }
        }
        if !commit && bump {
            return self.abort_with_new_epoch(t, deadline).await;
        }
        let mut s = t.lock();
        s.phase = Phase::Ready;
        s.added.clear();
        s.pending.clear();
        s.open_on_coordinator = false;
        Ok(())
    }

    /// Finishes an abort with InitProducerId of the producer's own id and epoch (KIP-360):
    /// the coordinator answers CONCURRENT_TRANSACTIONS until the abort's markers are
    /// written, then the next epoch, under which every partition's sequences start again
    /// at 0 (closing the gap a lost batch left).
    async fn abort_with_new_epoch(&self, t: &Transactions, deadline: Instant) -> Result<()> {
        let current = self.producer_id_and_epoch();
        let (pid, epoch) = self.txn_init_producer_id(current, deadline).await?;
        self.set_producer(pid, epoch);
        let mut s = t.lock();
        s.phase = Phase::Ready;
        s.added.clear();
        s.pending.clear();
        s.open_on_coordinator = false;
        s.bump_on_abort = false;
        tracing::info!(
            transactional_id = %t.id,
            producer_id = pid,
            epoch,
            "aborted with a new epoch"
        );
        Ok(())
    }

    /// Waits until every record sent so far is acknowledged or failed, or `deadline`.
    pub(crate) async fn wait_for_records(&self, deadline: Instant) -> Result<()> {
        let acc = &self.acc;
        acc.begin_flush();
        let outcome = loop {
            if acc.incomplete() == 0 {
                break Ok(());
            }
            let done = acc.batch_done.notified();
            if acc.incomplete() == 0 {
                break Ok(());
            }
            if Instant::now() >= deadline {
                break Err(ClientError::Timeout {
                    what: format!("{} record(s) still unacknowledged", acc.incomplete()),
                    ms: self.cfg.max_block.as_millis() as u64,
                });
            }
            acc.wake_sender.notify_one();
            let _ = tokio::time::timeout(Duration::from_millis(50), done).await;
        };
        acc.end_flush();
        outcome
    }
}
