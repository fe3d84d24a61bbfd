//! One replica of a partition as this broker holds it: its log, the health of the
//! directory that holds it, its role (leader at an epoch, or follower), and the signal that
//! fetches waiting for new records sleep on. Appends go through [`Partition::append`],
//! which appends as the leader and then wakes those fetches, so no writer can forget the
//! second half, and none can append while another broker leads. Nothing here knows the
//! wire format.

use std::sync::{Arc, MutexGuard, RwLock};

use bytes::Bytes;
use weir_kafka::TopicPartition;
use weir_log::{
    AppendOrigin, DirHealth, LogAppendInfo, LogConfig, LogError, LogManager, PartitionLog,
    ProducedRecords, SharedLog,
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
        let log = logs.get_or_create_log(&tp, topic_id, config)?;
        let health = logs
            .health_of(&tp)
            .ok_or_else(|| LogError::Offline(format!("{tp} has no log")))?;
        Ok(Partition {
            tp,
            log,
            health,
            appended: tokio::sync::Notify::new(),
            role: RwLock::new(Role {
                leader: false,
                leader_epoch: -1,
            }),
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
        self.appended.notify_waiters();
        Ok(info)
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
