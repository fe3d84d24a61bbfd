//! The transaction coordinator (Kafka's `TransactionCoordinator`, `TransactionStateManager`
//! and `TransactionMarkerChannelManager` in one): the transactional ids of the
//! `__transaction_state` partitions this broker leads, the requests that move them
//! (InitProducerId, AddPartitionsToTxn, AddOffsetsToTxn through it, EndTxn), the markers
//! that close a transaction on its partitions, and the timers that abort what clients
//! abandoned and forget ids left idle.
//!
//! Every change follows one rule (see [`TxnMetadata`]): prepared under the lock, written to
//! `__transaction_state` through [`TxnHost::append`] with no lock held, applied once the write
//! is durable. A write that finds its partition unloaded, or loaded again at another
//! coordinator epoch, is not applied: that broker's answer is NOT_COORDINATOR.
//!
//! After a PrepareCommit or PrepareAbort is durable, a task writes the markers to every
//! partition of the transaction ([`TxnHost::write_markers`], retried while they fail for a
//! reason that passes) and then the CompleteCommit or CompleteAbort record. A coordinator
//! that takes a partition over (`load_partition`) starts that task for each id it finds
//! prepared, so a crash between the two leaves nothing half done.
//!
//! Locking: one `std::sync::Mutex` over every partition's ids, never held across an
//! `.await` nor while the host is called.

use std::collections::{BTreeSet, HashMap};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use futures_util::future::BoxFuture;
use kafka_protocol::ResponseError as E;
use tokio::sync::watch;
use weir_kafka::TopicPartition;

use crate::metadata::{self, TransitionError, TxnMetadata, TxnTransit};
use crate::records::{self, partition_for};
use crate::state::TxnState;

/// How long a marker write that failed for a passing reason waits before it is sent again
/// (Kafka retries at the inter-broker client's `retry.backoff.ms`, 100 ms).
const MARKER_RETRY_BACKOFF: Duration = Duration::from_millis(100);

/// Broker settings the coordinator follows, with Kafka's names and defaults.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TxnConfig {
    /// `transaction.state.log.num.partitions`.
    pub log_partitions: i32,
    /// `transaction.max.timeout.ms`: the longest `transaction.timeout.ms` a producer may ask.
    pub max_timeout_ms: i32,
    /// `transactional.id.expiration.ms`: how long an id with no transaction open is kept
    /// without a request.
    pub id_expiration_ms: i64,
    /// `transaction.abort.timed.out.transaction.cleanup.interval.ms`.
    pub abort_timed_out_interval_ms: u64,
    /// `transaction.remove.expired.transaction.cleanup.interval.ms`.
    pub remove_expired_interval_ms: u64,
}

impl Default for TxnConfig {
    fn default() -> Self {
        TxnConfig {
            log_partitions: 50,
            max_timeout_ms: 900_000,
            id_expiration_ms: 604_800_000,
            abort_timed_out_interval_ms: 10_000,
            remove_expired_interval_ms: 3_600_000,
        }
    }
}

/// The COMMIT or ABORT markers of one transaction, for its partitions.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Markers {
    pub producer_id: i64,
    pub producer_epoch: i16,
    pub commit: bool,
    pub coordinator_epoch: i32,
    pub partitions: Vec<TopicPartition>,
}

/// What the coordinator needs from the broker it runs in.
pub trait TxnHost: Send + Sync + 'static {
    /// Appends one record to partition `partition` of `__transaction_state` as its leader
    /// at `coordinator_epoch` (its leader epoch), resolving once the record is durable (the
    /// in-sync replicas hold it). `None` is a tombstone. A Kafka error code on failure.
    fn append(
        &self,
        partition: i32,
        coordinator_epoch: i32,
        key: Vec<u8>,
        value: Option<Vec<u8>>,
    ) -> BoxFuture<'static, Result<(), i16>>;

    /// Writes the markers to each partition's leader, here or on another broker; the
    /// outcome per partition, a Kafka error code (0: written). UNKNOWN_TOPIC_OR_PARTITION
    /// only for a partition that does not exist any more.
    fn write_markers(&self, markers: Markers) -> BoxFuture<'static, Vec<(TopicPartition, i16)>>;

    /// A producer id never handed out before.
    fn allocate_producer_id(&self) -> Result<i64, i16>;

    /// Wall-clock milliseconds.
    fn now_ms(&self) -> i64 {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_millis() as i64)
    }
}

/// One `__transaction_state` partition this broker coordinates.
enum Owned {
    /// Being read from its log; requests for its ids wait (COORDINATOR_LOAD_IN_PROGRESS).
    Loading { epoch: i32 },
    Loaded {
        epoch: i32,
        txns: HashMap<String, TxnMetadata>,
    },
}

impl Owned {
    fn epoch(&self) -> i32 {
        match self {
            Owned::Loading { epoch } | Owned::Loaded { epoch, .. } => *epoch,
        }
    }
}

/// A transaction as ListTransactions reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ListedTxn {
    pub transactional_id: String,
    pub producer_id: i64,
    pub state: TxnState,
    /// When its open transaction began, -1 when none.
    pub txn_start_ms: i64,
}

/// What ListTransactions asks for (empty sets: any).
#[derive(Debug, Clone, Default)]
pub struct ListFilter {
    pub states: Vec<String>,
    pub producer_ids: Vec<i64>,
    /// Only transactions open for at least this long (KIP-994); negative: any.
    pub min_duration_ms: i64,
}

/// The transaction coordinator of one broker.
pub struct TxnCoordinator {
    config: TxnConfig,
    host: Arc<dyn TxnHost>,
    owned: Mutex<HashMap<i32, Owned>>,
}

/// Kafka's translation of a failed `__transaction_state` append
/// (`TransactionStateManager.appendTransactionToLog`).
fn for_append(code: i16) -> i16 {
    match E::try_from_code(code) {
        Some(
            E::UnknownTopicOrPartition
            | E::NotEnoughReplicas
            | E::NotEnoughReplicasAfterAppend
            | E::RequestTimedOut,
        ) => E::CoordinatorNotAvailable.code(),
        Some(E::NotLeaderOrFollower | E::KafkaStorageError) => E::NotCoordinator.code(),
        Some(E::MessageTooLarge | E::RecordListTooLarge) => E::UnknownServerError.code(),
        _ => code,
    }
}

fn prepared(r: Result<TxnTransit, TransitionError>) -> Result<TxnTransit, i16> {
    r.map_err(|e| match e {
        TransitionError::Pending { .. } => E::ConcurrentTransactions.code(),
        TransitionError::Illegal { .. } => {
            tracing::error!("{e}");
            E::InvalidTxnState.code()
        }
    })
}

impl TxnCoordinator {
    pub fn new(config: TxnConfig, host: Arc<dyn TxnHost>) -> Arc<Self> {
        assert!(
            config.log_partitions > 0,
            "transaction.state.log.num.partitions must be positive"
        );
        Arc::new(TxnCoordinator {
            config,
            host,
            owned: Mutex::new(HashMap::new()),
        })
    }

    pub fn config(&self) -> &TxnConfig {
        &self.config
    }

    /// The `__transaction_state` partition of a transactional id.
    pub fn partition_for(&self, transactional_id: &str) -> i32 {
        partition_for(transactional_id, self.config.log_partitions)
    }

    fn lock(&self) -> MutexGuard<'_, HashMap<i32, Owned>> {
        self.owned.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Whether this broker coordinates `transactional_id`: its partition's epoch, or the
    /// error a request for it gets.
    pub fn coordinates(&self, transactional_id: &str) -> Result<i32, i16> {
        match self.lock().get(&self.partition_for(transactional_id)) {
            None => Err(E::NotCoordinator.code()),
            Some(Owned::Loading { .. }) => Err(E::CoordinatorLoadInProgress.code()),
            Some(Owned::Loaded { epoch, .. }) => Ok(*epoch),
        }
    }

    /// Runs `f` on the ids of `partition` if it is still loaded at `epoch`.
    fn with_txns<T>(
        &self,
        partition: i32,
        epoch: i32,
        f: impl FnOnce(&mut HashMap<String, TxnMetadata>) -> T,
    ) -> Option<T> {
        match self.lock().get_mut(&partition) {
            Some(Owned::Loaded { epoch: e, txns }) if *e == epoch => Some(f(txns)),
            _ => None,
        }
    }

    /// Runs `f` on `transactional_id`'s metadata where this broker coordinates it: the
    /// partition and epoch with `f`'s result, or the coordinator error.
    fn with_txn<T>(
        &self,
        transactional_id: &str,
        f: impl FnOnce(Option<&mut TxnMetadata>, &mut HashMap<String, TxnMetadata>) -> T,
    ) -> Result<(i32, i32, T), i16> {
        let partition = self.partition_for(transactional_id);
        let mut owned = self.lock();
        match owned.get_mut(&partition) {
            None => Err(E::NotCoordinator.code()),
            Some(Owned::Loading { .. }) => Err(E::CoordinatorLoadInProgress.code()),
            Some(Owned::Loaded { epoch, txns }) => {
                let epoch = *epoch;
                // Taken out while `f` runs so that it may also add to the map.
                let mut taken = txns.remove(transactional_id);
                let out = f(taken.as_mut(), txns);
                if let Some(m) = taken {
                    txns.insert(transactional_id.to_string(), m);
                }
                Ok((partition, epoch, out))
            }
        }
    }

    /// Writes a prepared transition and applies it once durable (or drops it if the write
    /// failed). NOT_COORDINATOR if the partition moved meanwhile.
    async fn write(
        &self,
        transactional_id: &str,
        partition: i32,
        epoch: i32,
        transit: TxnTransit,
    ) -> Result<(), i16> {
        let key = records::encode_key(transactional_id);
        let value = if transit.state == TxnState::Dead {
            Ok(None)
        } else {
            records::encode_value(&transit.log_value()).map(Some)
        };
        let written = match (key, value) {
            (Ok(key), Ok(value)) => self.host.append(partition, epoch, key, value).await,
            (Err(e), _) | (_, Err(e)) => {
                tracing::error!(transactional_id, "encoding its transaction record: {e}");
                Err(E::UnknownServerError.code())
            }
        };
        let applied = self.with_txns(partition, epoch, |txns| {
            let Some(m) = txns.get_mut(transactional_id) else {
                return Err(E::NotCoordinator.code());
            };
            if m.pending != Some(transit.state) {
                // The partition was loaded again meanwhile (at the same epoch): what it
                // read stands, this write's outcome is not ours to apply.
                return Err(E::NotCoordinator.code());
            }
            match written {
                Ok(()) => {
                    let dead = transit.state == TxnState::Dead;
                    m.complete(transit);
                    if dead {
                        txns.remove(transactional_id);
                    }
                    Ok(())
                }
                Err(code) => {
                    m.abandon();
                    Err(for_append(code))
                }
            }
        });
        match applied {
            Some(r) => {
                if let Err(code) = r {
                    tracing::warn!(
                        transactional_id,
                        code,
                        "writing its transaction state to __transaction_state-{partition} failed"
                    );
                }
                r
            }
            None => Err(E::NotCoordinator.code()),
        }
    }

    // -----------------------------------------------------------------------------------
    // InitProducerId.

    /// InitProducerId with a transactional id (Kafka's `handleInitProducerId`): the id's
    /// producer id and a bumped epoch, which fences every producer of an older one. An open
    /// transaction of the old epoch is aborted first, and the answer is then
    /// CONCURRENT_TRANSACTIONS, which the client retries. `expected`: the producer id and
    /// epoch a client re-initialising after an error names (KIP-360).
    pub async fn init_producer_id(
        self: &Arc<Self>,
        transactional_id: &str,
        txn_timeout_ms: i32,
        expected: Option<(i64, i16)>,
    ) -> Result<(i64, i16), i16> {
        if txn_timeout_ms <= 0 || txn_timeout_ms > self.config.max_timeout_ms {
            return Err(E::InvalidTransactionTimeout.code());
        }
        let now = self.host.now_ms();
        // A producer id comes from the host (maybe from etcd): taken before the lock, for
        // an id seen for the first time or one whose epoch is exhausted.
        let fresh = match self.with_txn(transactional_id, |m, _| {
            m.is_none_or(|m| m.is_epoch_exhausted())
        })? {
            (_, _, true) => Some(self.host.allocate_producer_id()?),
            _ => None,
        };
        let (partition, epoch, step) = self.with_txn(transactional_id, |m, txns| {
            let m = match m {
                Some(m) => m,
                None => {
                    let pid = fresh.ok_or(E::ConcurrentTransactions.code())?;
                    txns.insert(
                        transactional_id.to_string(),
                        TxnMetadata::new(transactional_id, pid, txn_timeout_ms, now),
                    );
                    txns.get_mut(transactional_id).expect("just inserted")
                }
            };
            init_transit(m, txn_timeout_ms, expected, now, fresh)
        })?;
        match step? {
            Init::Bump(transit) => {
                let (pid, producer_epoch) = (transit.producer_id, transit.producer_epoch);
                self.write(transactional_id, partition, epoch, transit)
                    .await?;
                tracing::debug!(
                    transactional_id,
                    producer_id = pid,
                    producer_epoch,
                    "initialised"
                );
                Ok((pid, producer_epoch))
            }
            Init::Fence(transit) => {
                tracing::info!(
                    transactional_id,
                    producer_id = transit.producer_id,
                    "a new producer of this transactional id fences the old one: its open \
                     transaction is aborted at epoch {}",
                    transit.producer_epoch
                );
                self.write(transactional_id, partition, epoch, transit)
                    .await?;
                self.spawn_completion(transactional_id, partition, epoch);
                Err(E::ConcurrentTransactions.code())
            }
        }
    }

    // -----------------------------------------------------------------------------------
    // AddPartitionsToTxn, AddOffsetsToTxn.

    /// Adds partitions to the producer's transaction, opening one if none is (Kafka's
    /// `handleAddPartitionsToTransaction`). Partitions already in it are not written again.
    pub async fn add_partitions(
        &self,
        transactional_id: &str,
        producer_id: i64,
        producer_epoch: i16,
        partitions: &[TopicPartition],
    ) -> Result<(), i16> {
        let now = self.host.now_ms();
        let (partition, epoch, step) = self.with_txn(transactional_id, |m, _| {
            let m = check_producer(m, producer_id, producer_epoch)?;
            if m.pending.is_some()
                || matches!(m.state, TxnState::PrepareCommit | TxnState::PrepareAbort)
            {
                return Err(E::ConcurrentTransactions.code());
            }
            if m.state == TxnState::Ongoing && partitions.iter().all(|p| m.partitions.contains(p)) {
                return Ok(None);
            }
            let mut t = m.transit(TxnState::Ongoing);
            if m.state != TxnState::Ongoing {
                t.txn_start_ms = now;
            }
            t.txn_last_update_ms = now;
            t.partitions.extend(partitions.iter().cloned());
            prepared(m.prepare(t)).map(Some)
        })?;
        match step? {
            None => Ok(()),
            Some(t) => self.write(transactional_id, partition, epoch, t).await,
        }
    }

    /// KIP-890 part 1: whether each partition is in the producer's open transaction, asked
    /// by a partition leader before it takes the producer's first transactional batch
    /// there (AddPartitionsToTxn v4+ with VerifyOnly). NONE where it is, else
    /// TRANSACTION_ABORTABLE; an error for the whole transaction as AddPartitionsToTxn
    /// answers it.
    pub fn verify_partitions(
        &self,
        transactional_id: &str,
        producer_id: i64,
        producer_epoch: i16,
        partitions: &[TopicPartition],
    ) -> Result<Vec<(TopicPartition, i16)>, i16> {
        let (_, _, out) = self.with_txn(transactional_id, |m, _| {
            let m = check_producer(m, producer_id, producer_epoch)?;
            if m.pending.is_some() {
                return Err(E::ConcurrentTransactions.code());
            }
            Ok(partitions
                .iter()
                .map(|p| {
                    let ok = m.state == TxnState::Ongoing && m.partitions.contains(p);
                    let code = if ok {
                        0
                    } else {
                        E::TransactionAbortable.code()
                    };
                    (p.clone(), code)
                })
                .collect())
        })?;
        out
    }

    // -----------------------------------------------------------------------------------
    // EndTxn.

    /// Commits or aborts the producer's transaction (Kafka's `handleEndTransaction`, before
    /// KIP-890 part 2): answered once PrepareCommit or PrepareAbort is durable; the markers
    /// and the completion follow on their own.
    pub async fn end_txn(
        self: &Arc<Self>,
        transactional_id: &str,
        producer_id: i64,
        producer_epoch: i16,
        commit: bool,
    ) -> Result<(), i16> {
        let now = self.host.now_ms();
        let (partition, epoch, step) = self.with_txn(transactional_id, |m, _| {
            let m = check_producer(m, producer_id, producer_epoch)?;
            if m.pending.is_some() {
                return Err(E::ConcurrentTransactions.code());
            }
            use TxnState::*;
            match (m.state, commit) {
                (Ongoing, _) => {
                    let mut t = m.transit(if commit { PrepareCommit } else { PrepareAbort });
                    t.txn_last_update_ms = now;
                    prepared(m.prepare(t)).map(Some)
                }
                // A retry of an end that went through.
                (CompleteCommit, true) | (CompleteAbort, false) => Ok(None),
                // The same end, still writing its markers.
                (PrepareCommit, true) | (PrepareAbort, false) => {
                    Err(E::ConcurrentTransactions.code())
                }
                _ => Err(E::InvalidTxnState.code()),
            }
        })?;
        let Some(t) = step? else { return Ok(()) };
        self.write(transactional_id, partition, epoch, t).await?;
        self.spawn_completion(transactional_id, partition, epoch);
        Ok(())
    }

    // -----------------------------------------------------------------------------------
    // Markers and completion.

    fn spawn_completion(self: &Arc<Self>, transactional_id: &str, partition: i32, epoch: i32) {
        let me = self.clone();
        let id = transactional_id.to_string();
        tokio::spawn(async move { me.complete(&id, partition, epoch).await });
    }

    /// Writes the markers of `transactional_id`'s prepared end to every partition of its
    /// transaction, then its CompleteCommit or CompleteAbort record. Gives up when this
    /// broker stops coordinating the id at `epoch` (the next coordinator finishes it).
    async fn complete(&self, transactional_id: &str, partition: i32, epoch: i32) {
        let found = self.with_txns(partition, epoch, |txns| {
            let m = txns.get(transactional_id)?;
            let commit = match m.state {
                TxnState::PrepareCommit => true,
                TxnState::PrepareAbort => false,
                _ => return None,
            };
            Some(Markers {
                producer_id: m.producer_id,
                producer_epoch: m.producer_epoch,
                commit,
                coordinator_epoch: epoch,
                partitions: m.partitions.iter().cloned().collect(),
            })
        });
        let Some(Some(mut markers)) = found else {
            return;
        };
        let commit = markers.commit;
        let mut warned: BTreeSet<i16> = BTreeSet::new();
        while !markers.partitions.is_empty() {
            let results = self.host.write_markers(markers.clone()).await;
            let mut retry = Vec::new();
            for (tp, code) in results {
                match E::try_from_code(code) {
                    None if code == 0 => {}
                    Some(E::UnknownTopicOrPartition) => {
                        tracing::info!(transactional_id, "{tp} is gone: no marker is written there")
                    }
                    Some(E::UnsupportedForMessageFormat | E::UnsupportedVersion) => {
                        tracing::warn!(transactional_id, "{tp} takes no markers ({code})")
                    }
                    Some(E::InvalidProducerEpoch | E::TransactionCoordinatorFenced) => {
                        // As Kafka: a newer producer epoch or coordinator has written there
                        // since; this end stays prepared until a coordinator reloads it.
                        tracing::error!(
                            transactional_id,
                            code,
                            "{tp} refused the marker of producer {} epoch {}: the \
                             transaction stays prepared",
                            markers.producer_id,
                            markers.producer_epoch
                        );
                        return;
                    }
                    Some(
                        E::NotLeaderOrFollower
                        | E::NotEnoughReplicas
                        | E::NotEnoughReplicasAfterAppend
                        | E::RequestTimedOut
                        | E::NetworkException
                        | E::CoordinatorLoadInProgress
                        | E::KafkaStorageError
                        | E::CoordinatorNotAvailable,
                    ) => retry.push(tp),
                    _ => {
                        // Not a passing failure: said once, and tried again, since the
                        // transaction cannot complete without this marker.
                        if warned.insert(code) {
                            tracing::warn!(
                                transactional_id,
                                code,
                                "{tp} refused the marker of producer {}; it is sent again \
                                 until taken",
                                markers.producer_id
                            );
                        }
                        retry.push(tp)
                    }
                }
            }
            markers.partitions = retry;
            if markers.partitions.is_empty() {
                break;
            }
            tokio::time::sleep(MARKER_RETRY_BACKOFF).await;
            if self.with_txns(partition, epoch, |_| ()).is_none() {
                return;
            }
        }
        loop {
            let now = self.host.now_ms();
            let step = self.with_txns(partition, epoch, |txns| {
                let m = txns.get_mut(transactional_id)?;
                let expected = if commit {
                    TxnState::PrepareCommit
                } else {
                    TxnState::PrepareAbort
                };
                if m.pending.is_none() && m.state != expected {
                    // Completed already (by a task of an earlier load).
                    return None;
                }
                let mut t = m.transit(if commit {
                    TxnState::CompleteCommit
                } else {
                    TxnState::CompleteAbort
                });
                t.partitions.clear();
                t.txn_last_update_ms = now;
                Some(prepared(m.prepare(t)))
            });
            let t = match step {
                Some(Some(Ok(t))) => t,
                Some(Some(Err(_))) => {
                    tokio::time::sleep(MARKER_RETRY_BACKOFF).await;
                    continue;
                }
                _ => return,
            };
            match self.write(transactional_id, partition, epoch, t).await {
                Ok(()) => return,
                Err(code) if code == E::NotCoordinator.code() => return,
                Err(_) => tokio::time::sleep(MARKER_RETRY_BACKOFF).await,
            }
        }
    }

    // -----------------------------------------------------------------------------------
    // Loading.

    /// This broker now leads `partition` of `__transaction_state` at `epoch`: its ids are
    /// being read, and requests for them wait.
    pub fn begin_loading(&self, partition: i32, epoch: i32) {
        self.lock().insert(partition, Owned::Loading { epoch });
    }

    /// The records of `partition` are read: its ids are served from now on, and every end
    /// that was prepared is finished. Ignored if the partition moved on meanwhile.
    pub fn finish_loading<'a>(
        self: &Arc<Self>,
        partition: i32,
        epoch: i32,
        stored: impl IntoIterator<Item = metadata::StoredRecord<'a>>,
    ) -> Result<usize, String> {
        let txns = metadata::load(stored).map_err(|(offset, e)| {
            format!("__transaction_state-{partition} at offset {offset}: {e}")
        })?;
        let prepared: Vec<String> = txns
            .iter()
            .filter(|(_, m)| matches!(m.state, TxnState::PrepareCommit | TxnState::PrepareAbort))
            .map(|(id, _)| id.clone())
            .collect();
        let n = txns.len();
        {
            let mut owned = self.lock();
            match owned.get(&partition) {
                Some(o) if o.epoch() == epoch => {}
                _ => return Ok(0),
            }
            owned.insert(
                partition,
                Owned::Loaded {
                    epoch,
                    txns: txns.into_iter().collect(),
                },
            );
        }
        for id in prepared {
            tracing::info!(
                transactional_id = %id,
                "finishing the end of its transaction prepared before this broker took over"
            );
            self.spawn_completion(&id, partition, epoch);
        }
        Ok(n)
    }

    /// This broker no longer leads `partition`: its ids are dropped (their markers in
    /// flight give up at their next step).
    pub fn unload_partition(&self, partition: i32) {
        self.lock().remove(&partition);
    }

    /// The partitions this broker coordinates, with their epochs.
    pub fn owned_partitions(&self) -> Vec<(i32, i32)> {
        self.lock().iter().map(|(p, o)| (*p, o.epoch())).collect()
    }

    // -----------------------------------------------------------------------------------
    // Timers.

    /// Aborts every open transaction that outlived its timeout: its epoch is bumped (so
    /// the producer that left it is fenced) and it ends as an abort.
    pub async fn abort_timed_out(self: &Arc<Self>) {
        let now = self.host.now_ms();
        let mut fences = Vec::new();
        {
            let mut owned = self.lock();
            for (partition, o) in owned.iter_mut() {
                let Owned::Loaded { epoch, txns } = o else {
                    continue;
                };
                for (id, m) in txns.iter_mut() {
                    if !m.has_timed_out(now) {
                        continue;
                    }
                    if let Ok(t) = fence_transit(m, now) {
                        fences.push((id.clone(), *partition, *epoch, t));
                    }
                }
            }
        }
        let writes = fences
            .into_iter()
            .map(|(id, partition, epoch, t)| async move {
                tracing::info!(
                    transactional_id = %id,
                    producer_id = t.producer_id,
                    "aborting its transaction, open for longer than its timeout"
                );
                if self.write(&id, partition, epoch, t).await.is_ok() {
                    self.spawn_completion(&id, partition, epoch);
                }
            });
        futures_util::future::join_all(writes).await;
    }

    /// Forgets every id with no transaction open that no request has touched for
    /// `transactional.id.expiration.ms`: a tombstone goes to `__transaction_state`.
    pub async fn remove_expired(&self) {
        let now = self.host.now_ms();
        let mut expired = Vec::new();
        {
            let mut owned = self.lock();
            for (partition, o) in owned.iter_mut() {
                let Owned::Loaded { epoch, txns } = o else {
                    continue;
                };
                for (id, m) in txns.iter_mut() {
                    let idle = matches!(
                        m.state,
                        TxnState::Empty | TxnState::CompleteCommit | TxnState::CompleteAbort
                    ) && m.txn_last_update_ms + self.config.id_expiration_ms <= now;
                    if !idle {
                        continue;
                    }
                    if let Ok(t) = m.prepare(m.transit(TxnState::Dead)) {
                        expired.push((id.clone(), *partition, *epoch, t));
                    }
                }
            }
        }
        let writes = expired
            .into_iter()
            .map(|(id, partition, epoch, t)| async move {
                if self.write(&id, partition, epoch, t).await.is_ok() {
                    tracing::info!(
                        transactional_id = %id,
                        "expired: idle for longer than transactional.id.expiration.ms"
                    );
                }
            });
        futures_util::future::join_all(writes).await;
    }

    /// The coordinator's background work until `shutdown`: the two timers.
    pub async fn run(self: Arc<Self>, mut shutdown: watch::Receiver<bool>) {
        let mut abort = tokio::time::interval(Duration::from_millis(
            self.config.abort_timed_out_interval_ms.max(1),
        ));
        let mut expire = tokio::time::interval(Duration::from_millis(
            self.config.remove_expired_interval_ms.max(1),
        ));
        abort.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        expire.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                _ = abort.tick() => self.abort_timed_out().await,
                _ = expire.tick() => self.remove_expired().await,
                _ = shutdown.changed() => return,
            }
        }
    }

    // -----------------------------------------------------------------------------------
    // ListTransactions, DescribeTransactions.

    /// The transactions of every partition this broker has loaded that match `filter`;
    /// also the partitions still loading (ListTransactions answers
    /// COORDINATOR_LOAD_IN_PROGRESS while any is).
    pub fn list(&self, filter: &ListFilter) -> (Vec<ListedTxn>, bool) {
        let now = self.host.now_ms();
        let owned = self.lock();
        let loading = owned.values().any(|o| matches!(o, Owned::Loading { .. }));
        let mut out = Vec::new();
        for o in owned.values() {
            let Owned::Loaded { txns, .. } = o else {
                continue;
            };
            for (id, m) in txns {
                if !filter.states.is_empty() && !filter.states.iter().any(|s| s == m.state.name()) {
                    continue;
                }
                if !filter.producer_ids.is_empty() && !filter.producer_ids.contains(&m.producer_id)
                {
                    continue;
                }
                if filter.min_duration_ms >= 0
                    && (m.state != TxnState::Ongoing
                        || now - m.txn_start_ms < filter.min_duration_ms)
                {
                    continue;
                }
                out.push(ListedTxn {
                    transactional_id: id.clone(),
                    producer_id: m.producer_id,
                    state: m.state,
                    txn_start_ms: m.txn_start_ms,
                });
            }
        }
        out.sort_by(|a, b| a.transactional_id.cmp(&b.transactional_id));
        (out, loading)
    }

    /// One id's state, or the error DescribeTransactions answers for it
    /// (TRANSACTIONAL_ID_NOT_FOUND when this coordinator does not know it).
    pub fn describe(&self, transactional_id: &str) -> Result<TxnMetadata, i16> {
        let (_, _, m) = self.with_txn(transactional_id, |m, _| m.cloned())?;
        m.ok_or(E::TransactionalIdNotFound.code())
    }
}

/// What InitProducerId does for an id: bump its epoch (or take a new producer id), or
/// first abort its open transaction.
enum Init {
    Bump(TxnTransit),
    Fence(TxnTransit),
}

/// Kafka's producer id and epoch checks of AddPartitionsToTxn and EndTxn.
fn check_producer(
    m: Option<&mut TxnMetadata>,
    producer_id: i64,
    producer_epoch: i16,
) -> Result<&mut TxnMetadata, i16> {
    let m = m.ok_or(E::InvalidProducerIdMapping.code())?;
    if m.producer_id != producer_id {
        return Err(E::InvalidProducerIdMapping.code());
    }
    if m.producer_epoch != producer_epoch {
        return Err(E::ProducerFenced.code());
    }
    Ok(m)
}

/// The fence of an open transaction (Kafka's `prepareFenceProducerEpoch` followed by the
/// abort it leads to): PrepareAbort at the next epoch, prepared.
fn fence_transit(m: &mut TxnMetadata, now: i64) -> Result<TxnTransit, i16> {
    if m.pending.is_some() {
        return Err(E::ConcurrentTransactions.code());
    }
    let mut t = m.transit(TxnState::PrepareAbort);
    // At i16::MAX the epoch cannot move; the id then takes a new producer id at its next
    // InitProducerId (its epoch is exhausted).
    t.producer_epoch = m.producer_epoch.saturating_add(1);
    t.txn_last_update_ms = now;
    prepared(m.prepare(t))
}

/// Kafka's InitProducerId rules for an id with no transition in flight
/// (`handleInitProducerId`, `prepareIncrementProducerEpoch`, `prepareProducerIdRotation`).
fn init_transit(
    m: &mut TxnMetadata,
    txn_timeout_ms: i32,
    expected: Option<(i64, i16)>,
    now: i64,
    fresh_producer_id: Option<i64>,
) -> Result<Init, i16> {
    if m.pending.is_some() {
        return Err(E::ConcurrentTransactions.code());
    }
    if let Some((pid, epoch)) = expected {
        // A client naming its producer is fenced unless the id was just made, the producer
        // id is the current one, or it is the one before a rotation it did not hear of.
        let valid = m.producer_epoch < 0
            || pid == m.producer_id
            || (pid == m.previous_producer_id && epoch >= metadata::MAX_PRODUCER_EPOCH);
        if !valid {
            return Err(E::ProducerFenced.code());
        }
    }
    match m.state {
        TxnState::PrepareCommit | TxnState::PrepareAbort => Err(E::ConcurrentTransactions.code()),
        TxnState::Ongoing => fence_transit(m, now).map(Init::Fence),
        TxnState::Empty | TxnState::CompleteCommit | TxnState::CompleteAbort => {
            let mut t = m.transit(TxnState::Empty);
            t.txn_timeout_ms = txn_timeout_ms;
            t.partitions = BTreeSet::new();
            t.txn_start_ms = -1;
            t.txn_last_update_ms = now;
            if m.is_epoch_exhausted() && expected.is_none_or(|(_, e)| e == m.producer_epoch) {
                t.previous_producer_id = m.producer_id;
                // Allocated before the lock was taken; a rotation found without one (the
                // epoch ran out meanwhile) is retried by the client.
                t.producer_id = fresh_producer_id.ok_or(E::ConcurrentTransactions.code())?;
                t.producer_epoch = 0;
                t.last_producer_epoch = if expected.is_some() {
                    m.producer_epoch
                } else {
                    -1
                };
            } else {
                let bumped = m.producer_epoch + 1;
                match expected {
                    None => {
                        t.producer_epoch = bumped;
                        t.last_producer_epoch = -1;
                    }
                    Some((_, e)) if m.producer_epoch < 0 || e == m.producer_epoch => {
                        t.producer_epoch = bumped;
                        t.last_producer_epoch = m.producer_epoch;
                    }
                    // A retry of the bump this id already made: the same answer.
                    Some((_, e)) if e == m.last_producer_epoch => {}
                    Some(_) => return Err(E::ProducerFenced.code()),
                }
            }
            prepared(m.prepare(t)).map(Init::Bump)
        }
        TxnState::Dead | TxnState::PrepareEpochFence => Err(E::ConcurrentTransactions.code()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicI64, Ordering};

    /// One record appended: partition, key, value.
    type Appended = (i32, Vec<u8>, Option<Vec<u8>>);

    /// A host that keeps `__transaction_state` in memory and takes every marker, or
    /// refuses appends while `fail_appends` is set.
    #[derive(Default)]
    struct Memory {
        log: Mutex<Vec<Appended>>,
        markers: Mutex<Vec<Markers>>,
        next_pid: AtomicI64,
        now: AtomicI64,
        fail_appends: std::sync::atomic::AtomicBool,
    }

    impl TxnHost for Memory {
        fn append(
            &self,
            partition: i32,
            _epoch: i32,
            key: Vec<u8>,
            value: Option<Vec<u8>>,
        ) -> BoxFuture<'static, Result<(), i16>> {
            let r = if self.fail_appends.load(Ordering::SeqCst) {
                Err(E::NotEnoughReplicas.code())
            } else {
                self.log.lock().unwrap().push((partition, key, value));
                Ok(())
            };
            Box::pin(async move { r })
        }
        fn write_markers(&self, m: Markers) -> BoxFuture<'static, Vec<(TopicPartition, i16)>> {
            let out = m.partitions.iter().map(|p| (p.clone(), 0)).collect();
            self.markers.lock().unwrap().push(m);
            Box::pin(async move { out })
        }
        fn allocate_producer_id(&self) -> Result<i64, i16> {
            Ok(1000 + self.next_pid.fetch_add(1, Ordering::SeqCst))
        }
        fn now_ms(&self) -> i64 {
            self.now.load(Ordering::SeqCst)
        }
    }

    fn coordinator() -> (Arc<TxnCoordinator>, Arc<Memory>) {
        let host = Arc::new(Memory::default());
        host.now.store(1_000, Ordering::SeqCst);
        let config = TxnConfig {
            log_partitions: 1,
            ..TxnConfig::default()
        };
        let c = TxnCoordinator::new(config, host.clone());
        c.begin_loading(0, 7);
        c.finish_loading(0, 7, Vec::new()).unwrap();
        (c, host)
    }

    async fn settle() {
        for _ in 0..20 {
            tokio::task::yield_now().await;
        }
    }

    fn tp(p: i32) -> TopicPartition {
        TopicPartition::new("t", p)
    }

    #[tokio::test]
    async fn a_transaction_commits_with_markers_on_each_partition_then_completes() {
        let (c, host) = coordinator();
        let (pid, epoch) = c.init_producer_id("tx", 60_000, None).await.unwrap();
        assert_eq!((pid, epoch), (1000, 0));
        c.add_partitions("tx", pid, epoch, &[tp(0), tp(1)])
            .await
            .unwrap();
        // Already in the transaction: nothing more is written.
        let written = host.log.lock().unwrap().len();
        c.add_partitions("tx", pid, epoch, &[tp(1)]).await.unwrap();
        assert_eq!(host.log.lock().unwrap().len(), written);
        assert_eq!(
            c.verify_partitions("tx", pid, epoch, &[tp(0), tp(2)]),
            Ok(vec![(tp(0), 0), (tp(2), E::TransactionAbortable.code())])
        );
        c.end_txn("tx", pid, epoch, true).await.unwrap();
        settle().await;
        let markers = host.markers.lock().unwrap().clone();
        assert_eq!(
            markers,
            vec![Markers {
                producer_id: pid,
                producer_epoch: 0,
                commit: true,
                coordinator_epoch: 7,
                partitions: vec![tp(0), tp(1)],
            }]
        );
        let m = c.describe("tx").unwrap();
        assert_eq!((m.state, m.partitions.len()), (TxnState::CompleteCommit, 0));
        // A retried commit is answered as done; an abort now is not a move.
        assert_eq!(c.end_txn("tx", pid, epoch, true).await, Ok(()));
        assert_eq!(
            c.end_txn("tx", pid, epoch, false).await,
            Err(E::InvalidTxnState.code())
        );
        // The records say the same: the log, loaded, gives the same state.
        let log = host.log.lock().unwrap().clone();
        let states: Vec<TxnState> = log
            .iter()
            .map(|(_, _, v)| records::decode_value(v.as_ref().unwrap()).unwrap().state)
            .collect();
        use TxnState::*;
        assert_eq!(
            states,
            [Empty, Ongoing, PrepareCommit, CompleteCommit],
            "one record per transition"
        );
    }

    #[tokio::test]
    async fn a_new_producer_fences_the_old_and_aborts_its_open_transaction() {
        let (c, host) = coordinator();
        let (pid, e0) = c.init_producer_id("tx", 60_000, None).await.unwrap();
        c.add_partitions("tx", pid, e0, &[tp(0)]).await.unwrap();
        // The new producer's first try aborts the open transaction at epoch 1.
        assert_eq!(
            c.init_producer_id("tx", 60_000, None).await,
            Err(E::ConcurrentTransactions.code())
        );
        settle().await;
        let m = host.markers.lock().unwrap()[0].clone();
        assert_eq!((m.commit, m.producer_epoch), (false, 1));
        // Its retry gets epoch 2; the old producer is fenced everywhere.
        assert_eq!(c.init_producer_id("tx", 60_000, None).await, Ok((pid, 2)));
        assert_eq!(
            c.add_partitions("tx", pid, e0, &[tp(0)]).await,
            Err(E::ProducerFenced.code())
        );
        assert_eq!(
            c.end_txn("tx", pid, e0, true).await,
            Err(E::ProducerFenced.code())
        );
        assert_eq!(
            c.end_txn("tx", pid + 1, 2, true).await,
            Err(E::InvalidProducerIdMapping.code())
        );
        // KIP-360: the current producer may bump itself; a retry gets the same answer.
        assert_eq!(
            c.init_producer_id("tx", 60_000, Some((pid, 2))).await,
            Ok((pid, 3))
        );
        assert_eq!(
            c.init_producer_id("tx", 60_000, Some((pid, 2))).await,
            Ok((pid, 3))
        );
        assert_eq!(
            c.init_producer_id("tx", 60_000, Some((pid, 1))).await,
            Err(E::ProducerFenced.code())
        );
        assert_eq!(
            c.init_producer_id("tx", 0, None).await,
            Err(E::InvalidTransactionTimeout.code())
        );
    }

    #[tokio::test]
    async fn an_exhausted_epoch_takes_a_new_producer_id() {
        let (c, _) = coordinator();
        let (pid, _) = c.init_producer_id("tx", 60_000, None).await.unwrap();
        c.lock()
            .get_mut(&0)
            .map(|o| match o {
                Owned::Loaded { txns, .. } => {
                    txns.get_mut("tx").unwrap().producer_epoch = metadata::MAX_PRODUCER_EPOCH
                }
                Owned::Loading { .. } => unreachable!(),
            })
            .unwrap();
        let (next, epoch) = c.init_producer_id("tx", 60_000, None).await.unwrap();
        assert_ne!(next, pid);
        assert_eq!(epoch, 0);
        assert_eq!(c.describe("tx").unwrap().previous_producer_id, pid);
    }

    #[tokio::test]
    async fn a_failed_write_changes_nothing() {
        let (c, host) = coordinator();
        let (pid, epoch) = c.init_producer_id("tx", 60_000, None).await.unwrap();
        host.fail_appends.store(true, Ordering::SeqCst);
        assert_eq!(
            c.add_partitions("tx", pid, epoch, &[tp(0)]).await,
            Err(E::CoordinatorNotAvailable.code())
        );
        assert_eq!(c.describe("tx").unwrap().state, TxnState::Empty);
        host.fail_appends.store(false, Ordering::SeqCst);
        c.add_partitions("tx", pid, epoch, &[tp(0)]).await.unwrap();
        assert_eq!(c.describe("tx").unwrap().state, TxnState::Ongoing);
    }

    #[tokio::test]
    async fn a_timed_out_transaction_is_aborted_at_a_new_epoch() {
        let (c, host) = coordinator();
        let (pid, epoch) = c.init_producer_id("tx", 5_000, None).await.unwrap();
        c.add_partitions("tx", pid, epoch, &[tp(0)]).await.unwrap();
        host.now.store(1_000 + 4_999, Ordering::SeqCst);
        c.abort_timed_out().await;
        assert_eq!(c.describe("tx").unwrap().state, TxnState::Ongoing);
        host.now.store(1_000 + 5_000, Ordering::SeqCst);
        c.abort_timed_out().await;
        settle().await;
        let m = c.describe("tx").unwrap();
        assert_eq!((m.state, m.producer_epoch), (TxnState::CompleteAbort, 1));
        assert_eq!(
            c.end_txn("tx", pid, epoch, true).await,
            Err(E::ProducerFenced.code())
        );
    }

    #[tokio::test]
    async fn a_coordinator_that_takes_over_finishes_a_prepared_end() {
        let (c, host) = coordinator();
        let (pid, epoch) = c.init_producer_id("tx", 60_000, None).await.unwrap();
        c.add_partitions("tx", pid, epoch, &[tp(0), tp(3)])
            .await
            .unwrap();
        c.end_txn("tx", pid, epoch, false).await.unwrap();
        // The broker died before the task ran: only the log is left, up to PrepareAbort.
        let log: Vec<_> = host.log.lock().unwrap().clone();
        assert_eq!(log.len(), 3);
        let next_host = Arc::new(Memory::default());
        let next = TxnCoordinator::new(
            TxnConfig {
                log_partitions: 1,
                ..TxnConfig::default()
            },
            next_host.clone(),
        );
        assert_eq!(
            next.coordinates("tx"),
            Err(E::NotCoordinator.code()),
            "not before it leads"
        );
        next.begin_loading(0, 8);
        assert_eq!(
            next.end_txn("tx", pid, epoch, false).await,
            Err(E::CoordinatorLoadInProgress.code())
        );
        let stored: Vec<metadata::StoredRecord<'_>> = log
            .iter()
            .enumerate()
            .map(|(i, (_, k, v))| (i as i64, k.as_slice(), v.as_deref()))
            .collect();
        assert_eq!(next.finish_loading(0, 8, stored), Ok(1));
        settle().await;
        let m = next_host.markers.lock().unwrap()[0].clone();
        assert_eq!(
            (m.commit, m.coordinator_epoch, m.partitions.len()),
            (false, 8, 2)
        );
        assert_eq!(next.describe("tx").unwrap().state, TxnState::CompleteAbort);
        let (listed, loading) = next.list(&ListFilter {
            min_duration_ms: -1,
            ..ListFilter::default()
        });
        assert!(!loading);
        assert_eq!(listed.len(), 1);
        next.unload_partition(0);
        assert_eq!(next.describe("tx"), Err(E::NotCoordinator.code()));
    }

    #[tokio::test]
    async fn idle_ids_expire_with_a_tombstone() {
        let (c, host) = coordinator();
        c.init_producer_id("tx", 60_000, None).await.unwrap();
        host.now
            .store(1_000 + c.config.id_expiration_ms, Ordering::SeqCst);
        c.remove_expired().await;
        assert_eq!(c.describe("tx"), Err(E::TransactionalIdNotFound.code()));
        assert_eq!(host.log.lock().unwrap().last().unwrap().2, None);
    }
}
