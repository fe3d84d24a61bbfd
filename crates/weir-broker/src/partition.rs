//! One replica of a partition as this broker holds it: its log, the health of the
//! directory that holds it, its role (leader at an epoch, or follower), and the signal that
//! fetches waiting for new records sleep on. Appends go through [`Partition::append`],
//! which appends as the leader and then wakes those fetches, so no writer can forget the
//! second half, and none can append while another broker leads. Nothing here knows the
//! wire format.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, RwLock};

use bytes::Bytes;
use kafka_protocol::ResponseError as E;
use weir_kafka::{ApiError, TopicPartition};

use crate::replica_set::{ReplicaSet, StateStamp};
use weir_log::{
    AppendOrigin, DirHealth, FollowerAppend, LogAppendInfo, LogConfig, LogError, LogManager,
    PartitionLog, ProducedRecords, SharedLog,
};

/// The leader epoch of every partition of a single broker: it leads them all, forever.
pub const SINGLE_NODE_LEADER_EPOCH: i32 = 0;

/// A replica's part in its partition.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Role {
    /// Whether this replica leads the partition (takes appends, answers fetches).
    pub leader: bool,
    /// The partition's leader epoch as this broker last heard it.
    pub leader_epoch: i32,
}

impl Role {
    /// A single broker's role in every partition.
    pub const SINGLE_NODE: Role = Role {
        leader: true,
        leader_epoch: SINGLE_NODE_LEADER_EPOCH,
    };
}

/// One replica: its log, its role, and the signal fetches wait on.
#[derive(Debug)]
pub struct Partition {
    pub tp: TopicPartition,
    pub log: SharedLog,
    /// The health of the data directory holding the log.
    pub health: Arc<DirHealth>,
    /// Woken whenever the partition's high watermark moves, and when its role changes.
    pub appended: tokio::sync::Notify,
    /// Held for reading across an append, so that a change of role waits for appends
    /// made in the old one.
    role: RwLock<Role>,
    /// Whether other brokers hold replicas of it (then its high watermark is the ISR's).
    /// Once set it stays: a partition moved down to one replica keeps an ISR of one.
    replicated: AtomicBool,
    /// As its leader: the other replicas and how far each has fetched.
    followers: Mutex<ReplicaSet>,
}

/// What a follower removes from its log.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Truncation {
    /// Everything at and after this offset.
    To(i64),
    /// Everything; the log starts again at this offset.
    StartAt(i64),
}

/// A client's view of the leader epoch does not match this replica's.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EpochMismatch {
    /// The client's is older: it must refresh its metadata (FENCED_LEADER_EPOCH).
    Fenced,
    /// The client's is newer: this broker has not heard of it yet (UNKNOWN_LEADER_EPOCH).
    Unknown,
}

impl EpochMismatch {
    pub fn code(self) -> i16 {
        match self {
            EpochMismatch::Fenced => kafka_protocol::ResponseError::FencedLeaderEpoch.code(),
            EpochMismatch::Unknown => kafka_protocol::ResponseError::UnknownLeaderEpoch.code(),
        }
    }
}

impl Partition {
    /// The replica of `tp` in `role`, its log created if it has none yet.
    pub fn open(
        logs: &LogManager,
        tp: TopicPartition,
        topic_id: uuid::Uuid,
        config: Arc<LogConfig>,
        role: Role,
    ) -> Result<Partition, LogError> {
        Self::open_replica(logs, tp, topic_id, config, role, None)
    }

    /// The replica of `tp` this broker holds as one of `replicas` (its id `me`): one of
    /// several, its high watermark is the ISR's, from `replication-offset-checkpoint`
    /// at first.
    pub fn open_replica(
        logs: &LogManager,
        tp: TopicPartition,
        topic_id: uuid::Uuid,
        config: Arc<LogConfig>,
        role: Role,
        replicas: Option<(i32, &[i32])>,
    ) -> Result<Partition, LogError> {
        let log = logs.get_or_create_log(&tp, topic_id, config)?;
        let health = logs
            .health_of(&tp)
            .ok_or_else(|| LogError::Offline(format!("{tp} has no log")))?;
        let replicated = replicas.is_some_and(|(_, r)| r.len() > 1);
        if replicated {
            let checkpointed = logs.checkpointed_high_watermark(&tp);
            log.lock()
                .map_err(|_| LogError::Offline(format!("{tp}: a panic poisoned its log")))?
                .set_replicated(checkpointed);
        }
        Ok(Partition {
            tp,
            log,
            health,
            appended: tokio::sync::Notify::new(),
            role: RwLock::new(Role {
                leader: false,
                leader_epoch: -1,
            }),
            replicated: AtomicBool::new(replicated),
            followers: Mutex::new(ReplicaSet::new(replicas.map_or(-1, |(me, _)| me))),
        })
        .and_then(|p| {
            p.set_role(role)?;
            Ok(p)
        })
    }

    pub fn role(&self) -> Role {
        *self.role.read().unwrap_or_else(|e| e.into_inner())
    }

    pub fn is_leader(&self) -> bool {
        self.role().leader
    }

    /// Takes on `role`, once appends in the old one are done. Becoming leader at a new
    /// epoch records where that epoch starts (the log end), as Kafka's `makeLeader` does,
    /// so that OffsetForLeaderEpoch answers for it before anything is appended. Wakes
    /// waiting fetches, which then see the new role.
    pub fn set_role(&self, role: Role) -> Result<(), LogError> {
        let mut current = self.role.write().unwrap_or_else(|e| e.into_inner());
        if *current == role {
            return Ok(());
        }
        debug_assert!(
            role.leader_epoch >= current.leader_epoch,
            "{}: leader epochs only move on ({} after {})",
            self.tp,
            role.leader_epoch,
            current.leader_epoch
        );
        if role.leader {
            self.observe(
                self.lock_log()
                    .and_then(|mut log| log.assign_leader_epoch(role.leader_epoch)),
            )?;
        }
        *current = role;
        drop(current);
        self.appended.notify_waiters();
        Ok(())
    }

    /// Whether a client's `current_leader_epoch` (-1: it does not say) matches.
    pub fn check_epoch(&self, client_epoch: i32) -> Result<(), EpochMismatch> {
        let ours = self.role().leader_epoch;
        if client_epoch < 0 || client_epoch == ours {
            Ok(())
        } else if client_epoch < ours {
            Err(EpochMismatch::Fenced)
        } else {
            Err(EpochMismatch::Unknown)
        }
    }

    /// Appends records as the partition's leader, then wakes every fetch waiting on this
    /// partition. The records are validated against the topic's `config` before the log's
    /// lock is taken; under it they only get their offsets and go to the segment. The
    /// append may take milliseconds (it fsyncs when the topic says so, or inflates a
    /// compressed batch to validate it, as `records.inflates()` tells): async callers run
    /// it off the runtime's workers.
    pub fn append(
        &self,
        records: ProducedRecords,
        config: &LogConfig,
    ) -> Result<LogAppendInfo, LogError> {
        let now = weir_log::now_ms();
        let batch = records.validate(config, now)?;
        let role = self.role.read().unwrap_or_else(|e| e.into_inner());
        if !role.leader {
            return Err(LogError::NotLeader(format!(
                "this broker is not the leader of {}",
                self.tp
            )));
        }
        let info = self.observe(
            self.lock_log()
                .and_then(|mut log| log.append_validated(batch, role.leader_epoch, now)),
        )?;
        drop(role);
        // With only this replica in sync, the high watermark follows the append.
        self.advance_high_watermark();
        self.appended.notify_waiters();
        Ok(info)
    }

    /// Appends a transaction's COMMIT or ABORT marker as the partition's leader
    /// (WriteTxnMarkers), then wakes waiting fetches.
    pub fn append_end_txn_marker(
        &self,
        producer_id: i64,
        producer_epoch: i16,
        marker: weir_record::EndTransactionMarker,
    ) -> Result<LogAppendInfo, LogError> {
        let role = self.role.read().unwrap_or_else(|e| e.into_inner());
        if !role.leader {
            return Err(LogError::NotLeader(format!(
                "this broker is not the leader of {}",
                self.tp
            )));
        }
        let info = self.observe(self.lock_log().and_then(|mut log| {
            log.append_end_txn_marker(
                producer_id,
                producer_epoch,
                marker,
                role.leader_epoch,
                weir_log::now_ms(),
            )
        }))?;
        drop(role);
        self.advance_high_watermark();
        self.appended.notify_waiters();
        Ok(info)
    }

    pub fn is_replicated(&self) -> bool {
        self.replicated.load(Ordering::Acquire)
    }

    fn lock_followers(&self) -> MutexGuard<'_, ReplicaSet> {
        self.followers.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The metadata's view of this partition, applied: its replicas and (`stamp`) its
    /// leadership as it stands in etcd. Call after `set_role`; `became_leader` says this
    /// broker has just started leading it. The high watermark may move (the ISR shrank).
    pub fn update_replicas(
        &self,
        replicas: &[i32],
        stamp: Option<StateStamp>,
        became_leader: bool,
    ) {
        if replicas.len() > 1 && !self.is_replicated() {
            // Moved from one replica to several: from now on the ISR moves the high
            // watermark, starting where it is.
            if let Ok(mut log) = self.lock_log() {
                let hw = log.high_watermark();
                log.set_replicated(Some(hw));
                self.replicated.store(true, Ordering::Release);
            }
        }
        let start = became_leader.then(|| {
            let leo = self.lock_log().map_or(0, |l| l.log_end_offset());
            (weir_log::now_ms(), leo)
        });
        self.lock_followers().update(replicas, stamp, start);
        if self.advance_high_watermark() {
            self.appended.notify_waiters();
        }
    }

    /// The ISR's high watermark, applied to the log if it moved (the leader of a
    /// replicated partition only; other logs move it on every append). Whether it moved.
    pub fn advance_high_watermark(&self) -> bool {
        if !self.is_replicated() || !self.is_leader() {
            return false;
        }
        let Ok(mut log) = self.lock_log() else {
            return false;
        };
        let Some(hw) = self.lock_followers().high_watermark(log.log_end_offset()) else {
            return false;
        };
        log.advance_high_watermark(hw)
    }

    /// A fetch from follower `id` at `fetch_offset`: its progress, and the high watermark
    /// that moves with it. Returns the ISR to propose if the follower should join it.
    pub fn on_follower_fetch(&self, id: i32, fetch_offset: i64) -> Option<Vec<i32>> {
        let leo = self.lock_log().ok()?.log_end_offset();
        self.lock_followers()
            .on_fetch(id, fetch_offset, leo, weir_log::now_ms());
        if self.advance_high_watermark() {
            self.appended.notify_waiters();
        }
        let hw = self.lock_log().ok()?.high_watermark();
        self.lock_followers().to_expand(id, hw)
    }

    /// The ISR without the followers behind for longer than `lag_ms`, if any are.
    pub fn lagging(&self, lag_ms: i64) -> Option<Vec<i32>> {
        if !self.is_replicated() || !self.is_leader() {
            return None;
        }
        let leo = self.lock_log().ok()?.log_end_offset();
        self.lock_followers()
            .to_shrink(leo, weir_log::now_ms(), lag_ms)
    }

    /// Notes an ISR change written to the metadata and not yet seen back; `None` if
    /// another is pending. The state it is made over.
    pub fn begin_isr_change(&self, isr: &[i32]) -> Option<StateStamp> {
        let mut f = self.lock_followers();
        if f.pending.is_some() {
            return None;
        }
        let stamp = f.stamp.clone()?;
        f.pending = Some(isr.to_vec());
        Some(stamp)
    }

    /// The ISR change did not land: another may be tried.
    pub fn end_isr_change(&self) {
        self.lock_followers().pending = None;
    }

    /// Whether broker `id` holds a replica of this partition (other than this one).
    pub fn has_follower(&self, id: i32) -> bool {
        self.lock_followers().is_follower(id)
    }

    /// The ISR as this leader sees it.
    pub fn isr(&self) -> Vec<i32> {
        self.lock_followers().isr.clone()
    }

    /// Appends the leader's batches as its follower at `leader_epoch` (the fetch that
    /// brought them was made in it), then takes the leader's high watermark, bounded by
    /// this log's end. Refused if this replica's role moved on meanwhile: the records
    /// belong to a leadership that is over.
    pub fn append_as_follower(
        &self,
        leader_epoch: i32,
        records: &[u8],
        leader_high_watermark: i64,
    ) -> Result<FollowerAppend, LogError> {
        let role = self.role.read().unwrap_or_else(|e| e.into_inner());
        if role.leader || role.leader_epoch != leader_epoch {
            return Err(LogError::NotLeader(format!(
                "{}: no longer a follower at leader epoch {leader_epoch}",
                self.tp
            )));
        }
        let appended = self.observe(self.lock_log().and_then(|mut log| {
            let a = log.append_as_follower(records, weir_log::now_ms())?;
            log.advance_high_watermark(leader_high_watermark);
            Ok(a)
        }))?;
        drop(role);
        self.appended.notify_waiters();
        Ok(appended)
    }

    /// As a follower at `leader_epoch`: removes what this log holds past the leader's
    /// (`to`, where their logs diverge), or everything if the leader no longer has the
    /// records this log ends with (`start_at`: the leader's log start).
    pub fn truncate_as_follower(&self, leader_epoch: i32, to: Truncation) -> Result<(), LogError> {
        let role = self.role.read().unwrap_or_else(|e| e.into_inner());
        if role.leader || role.leader_epoch != leader_epoch {
            return Err(LogError::NotLeader(format!(
                "{}: no longer a follower at leader epoch {leader_epoch}",
                self.tp
            )));
        }
        let now = weir_log::now_ms();
        self.observe(self.lock_log().and_then(|mut log| match to {
            Truncation::To(offset) => log.truncate_to(offset, now),
            Truncation::StartAt(offset) => log.truncate_fully_and_start_at(offset, now),
        }))
    }

    /// Waits until the in-sync replicas all hold the records before `end` (acks=all),
    /// or `deadline`. Errors as Kafka answers: the leadership moved
    /// (NOT_LEADER_OR_FOLLOWER), the ISR shrank below `min_insync` meanwhile
    /// (NOT_ENOUGH_REPLICAS_AFTER_APPEND), or time ran out (REQUEST_TIMED_OUT).
    pub async fn wait_replicated(
        &self,
        end: i64,
        min_insync: usize,
        deadline: tokio::time::Instant,
    ) -> Result<(), ApiError> {
        let epoch = self.role().leader_epoch;
        loop {
            let notified = self.appended.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            let role = self.role();
            if !role.leader || role.leader_epoch != epoch {
                return Err(ApiError::new(
                    E::NotLeaderOrFollower,
                    format!(
                        "{}: the leadership moved before the ISR had the records",
                        self.tp
                    ),
                ));
            }
            let hw = self
                .lock_log()
                .map_err(|e| ApiError::new(e.error_code(), e.to_string()))?
                .high_watermark();
            if hw >= end {
                let in_sync = self.isr().len();
                if in_sync < min_insync {
                    return Err(ApiError::new(
                        E::NotEnoughReplicasAfterAppend,
                        format!(
                            "{}: written, but only {in_sync} in-sync replicas hold it \
                             (min.insync.replicas={min_insync})",
                            self.tp
                        ),
                    ));
                }
                return Ok(());
            }
            tokio::select! {
                _ = &mut notified => {}
                _ = tokio::time::sleep_until(deadline) => {
                    return Err(ApiError::new(
                        E::RequestTimedOut,
                        format!(
                            "{}: the in-sync replicas did not all have the records within \
                             the request's timeout",
                            self.tp
                        ),
                    ));
                }
            }
        }
    }

    /// `append` of records the broker itself writes (`origin`), analyzed first.
    pub fn append_bytes(
        &self,
        records: Bytes,
        origin: AppendOrigin,
        config: &LogConfig,
    ) -> Result<LogAppendInfo, LogError> {
        self.append(ProducedRecords::analyze(records, config, origin)?, config)
    }

    /// The log, locked; KAFKA_STORAGE_ERROR while its directory is offline.
    pub fn lock_log(&self) -> Result<MutexGuard<'_, PartitionLog>, LogError> {
        if self.health.is_offline() {
            return Err(self.health.offline_error());
        }
        self.log
            .lock()
            .map_err(|_| LogError::Offline(format!("{}: a panic poisoned its log", self.tp)))
    }

    /// Passes on a result of the log, taking the directory offline if its error says the
    /// disk failed.
    pub fn observe<T>(&self, result: Result<T, LogError>) -> Result<T, LogError> {
        if let Err(e) = &result {
            self.health.observe(e);
        }
        result
    }

    pub fn is_offline(&self) -> bool {
        self.health.is_offline()
    }
}
