//! One partition as the broker serves it: its log, the health of the directory that holds
//! it, and the signal that fetches waiting for new records sleep on. Appends go through
//! [`Partition::append`], which appends and then wakes those fetches, so no writer can
//! forget the second half. Nothing here knows the wire format.

use std::sync::{Arc, MutexGuard};

use bytes::Bytes;
use weir_kafka::TopicPartition;
use weir_log::{
    AppendOrigin, DirHealth, LogAppendInfo, LogConfig, LogError, LogManager, PartitionLog,
    ProducedRecords, SharedLog,
};

/// The leader epoch of every partition: one node leads forever.
pub const LEADER_EPOCH: i32 = 0;

/// One partition: its log and the signal fetches wait on.
#[derive(Debug)]
pub struct Partition {
    pub tp: TopicPartition,
    pub log: SharedLog,
    /// The health of the data directory holding the log.
    pub health: Arc<DirHealth>,
    /// Woken whenever the partition's high watermark moves.
    pub appended: tokio::sync::Notify,
}

impl Partition {
    /// The partition of `tp`, its log created if it has none yet.
    pub fn open(
        logs: &LogManager,
        tp: TopicPartition,
        topic_id: uuid::Uuid,
        config: Arc<LogConfig>,
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
        })
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
        let info = self.observe(
            self.lock_log()
                .and_then(|mut log| log.append_validated(batch, LEADER_EPOCH, now)),
        )?;
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
