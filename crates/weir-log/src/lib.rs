//! # weir-log
//!
//! Kafka's partition log on disk, file for file: a data directory holds one directory per
//! partition (`<topic>-<partition>`) of segments — `<base offset>.log` with its sparse
//! `.index` and `.timeindex`, and the `.txnindex` of aborted transactions — plus Kafka's
//! checkpoint files, so Kafka's tools can read Weir's data and Weir can read a Kafka
//! broker's.
//!
//! - [`LogSegment`]: one `.log` file and its indexes.
//! - [`txn_index`]: the aborted-transaction index (`.txnindex`) of a segment.
//! - [`PartitionLog`]: a partition's segments: append (with Kafka's produce validation),
//!   read, lookups, truncation, retention, flushing, and crash recovery on load.
//! - [`LogManager`]: the data directories, checkpoints, the lock and the clean-shutdown
//!   marker, parallel loading, and the background work (retention, flushing, compaction).
//! - [`LogConfig`]: Kafka's topic-level settings with Kafka's defaults.
//! - [`SegmentFileCache`]: the bounded set of open `.log` files every log of a manager
//!   shares, so that idle partitions hold no descriptor.
//!
//! Everything here is synchronous `std::fs` plus `mmap` for indexes; callers that are
//! async wrap it. Nothing here speaks the network.

pub mod checkpoint;
pub mod cleaner;
pub mod config;
pub mod durable;
pub mod epoch;
pub mod error;
pub mod file_cache;
pub mod index;
pub mod kraft;
pub mod log;
pub mod manager;
pub mod metrics;
pub mod producer_state;
pub mod segment;
pub mod txn_index;
pub mod validator;

pub use config::{CleanupPolicy, ConfigError, LogConfig, TopicCompression};
pub use error::{LogError, RejectedRecord, Result};
pub use file_cache::{SegmentFileCache, DEFAULT_MAX_OPEN_SEGMENT_FILES};
pub use log::{FetchData, FollowerAppend, LoadParams, LoadReport, LogAppendInfo, PartitionLog};
pub use manager::{
    is_disk_failure, lock_data_dir, DataDirLock, DirHealth, LogManager, LogManagerConfig,
    SharedLog, StartupReport,
};
pub use segment::{FileSlice, LogSegment};
pub use validator::{AppendOrigin, ProducedRecords, ValidatedBatch};

/// Milliseconds since the Unix epoch, from the system clock.
pub fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
}
