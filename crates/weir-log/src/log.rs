//! `PartitionLog`: one partition's log (Kafka's `UnifiedLog` and `LocalLog` together):
//! segments by base offset with one active segment; append (validate, assign offsets,
//! roll, write), read, lookup by offset and timestamp, truncation, DeleteRecords,
//! retention, flushing, and loading from disk with crash recovery (Kafka's `LogLoader`).
//! It is synchronous and not thread-safe: the owner wraps it in a lock and does slow I/O
//! (reading fetched slices) outside it.

use std::collections::BTreeMap;
use std::fs;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

use bytes::Bytes;
use weir_kafka::TopicPartition;
use weir_record::{EndTransactionMarker, LogEntry};

use crate::checkpoint;
use crate::config::LogConfig;
use crate::epoch::LeaderEpochCache;
use crate::error::{LogError, Result};
use crate::file_cache::SegmentFileCache;
use crate::index::TimestampOffset;
use crate::metrics::{Histogram, LogMetrics};
use crate::producer_state::{ProducerStateManager, SequenceCheck};
use crate::segment::{
    file_name, parse_base_offset, walk_headers, FileSlice, LogSegment, RollParams, CLEANED_SUFFIX,
    DELETED_SUFFIX, INDEX_SUFFIX, LOG_SUFFIX, SWAP_SUFFIX, TIME_INDEX_SUFFIX,
};
use crate::txn_index::{AbortedTxn, TxnSearch, TXN_INDEX_SUFFIX};
use crate::validator::{AppendOrigin, ProducedRecords, ProducerBatchInfo, ValidatedBatch};

pub const PARTITION_METADATA_FILE: &str = "partition.metadata";

/// Special timestamps of ListOffsets.
pub const EARLIEST_TIMESTAMP: i64 = -2;
pub const LATEST_TIMESTAMP: i64 = -1;
pub const MAX_TIMESTAMP: i64 = -3;

/// What the log directory's checkpoints said about this partition, and how the broker
/// last stopped.
#[derive(Debug, Clone, Copy, Default)]
pub struct LoadParams {
    pub recovery_point: Option<i64>,
    pub log_start_offset: Option<i64>,
    pub had_clean_shutdown: bool,
    pub now_ms: i64,
}

/// What loading did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LoadReport {
    pub segments: usize,
    pub recovered_segments: usize,
    pub truncated_bytes: u64,
    pub deleted_segments: usize,
}

/// The result of an append.
#[derive(Debug, Clone, PartialEq)]
pub struct LogAppendInfo {
    pub first_offset: i64,
    pub last_offset: i64,
    pub max_timestamp: i64,
    pub offset_of_max_timestamp: i64,
    /// The append time under LogAppendTime, else -1.
    pub log_append_time: i64,
    pub log_start_offset: i64,
    pub record_count: usize,
    pub valid_bytes: usize,
    pub rebuilt: bool,
    pub producer: Option<ProducerBatchInfo>,
    /// The batch was a retry of one already in the log: nothing was written, and the
    /// offsets are those of the original.
    pub duplicate: bool,
}

/// What a fetch gets: a slice of one segment file (read it after releasing the log's
/// lock) and the partition's offsets at that moment.
#[derive(Debug, Clone)]
pub struct FetchData {
    pub slice: Option<FileSlice>,
    /// The base offset of the segment the slice is from.
    pub segment_base: i64,
    pub high_watermark: i64,
    pub log_start_offset: i64,
    pub log_end_offset: i64,
}

/// One partition's log.
#[derive(Debug)]
pub struct PartitionLog {
    dir: PathBuf,
    tp: TopicPartition,
    topic_id: Option<uuid::Uuid>,
    config: Arc<LogConfig>,
    segments: BTreeMap<i64, LogSegment>,
    log_end_offset: i64,
    log_start_offset: i64,
    recovery_point: i64,
    high_watermark: i64,
    epochs: LeaderEpochCache,
    unflushed_messages: i64,
    last_flush_ms: i64,
    flush_time: Histogram,
    /// Files renamed `.deleted`, to be removed once their time comes.
    pending_deletes: Vec<(PathBuf, i64)>,
    producers: ProducerStateManager,
    /// Files were created or renamed in the directory since its last fsync: until the
    /// next flush syncs it, a power loss could lose a segment whose bytes were synced.
    dir_dirty: bool,
    /// The open segment files this log shares with others (its manager's).
    files: Arc<SegmentFileCache>,
    /// Whether other brokers hold replicas of this partition: then the high watermark is
    /// the offset the in-sync replicas all have, and only the broker moves it
    /// (`advance_high_watermark`). Otherwise (one replica) every append moves it.
    replicated: bool,
}

/// What a follower appended: the offsets of the leader's batches it took.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FollowerAppend {
    pub first_offset: i64,
    pub last_offset: i64,
    pub batches: usize,
}

/// Why a partition log always has a segment (the last one is the active segment): loading
/// makes one in an empty directory, a roll adds the new segment before it removes an empty
/// one, truncation and retention keep or make one, and compaction replaces segments below it.
const HAS_A_SEGMENT: &str = "a partition log always holds a segment";

/// The files of the segment at `base`, with a temporary suffix (or ""); the `.txnindex`
/// may not exist.
pub(crate) fn segment_paths(dir: &Path, base: i64, suffix: &str) -> [PathBuf; 4] {
    [
        LOG_SUFFIX,
        INDEX_SUFFIX,
        TIME_INDEX_SUFFIX,
        TXN_INDEX_SUFFIX,
    ]
    .map(|s| dir.join(file_name(base, &format!("{s}{suffix}"))))
}

fn remove_if_exists(p: &Path) -> io::Result<()> {
    match fs::remove_file(p) {
        Err(e) if e.kind() != io::ErrorKind::NotFound => Err(e),
        _ => Ok(()),
    }
}

impl PartitionLog {
    /// Creates the directory of a new partition (with `partition.metadata`) and opens it,
    /// its segment files counted in the process's default cache of open files.
    pub fn create(
        dir: &Path,
        tp: TopicPartition,
        topic_id: uuid::Uuid,
        config: Arc<LogConfig>,
        now_ms: i64,
    ) -> Result<PartitionLog> {
        let files = SegmentFileCache::process_default();
        PartitionLog::create_in(dir, tp, topic_id, config, now_ms, files)
    }

    /// `create`, with the segment files counted in `files`. All or nothing: if any step
    /// fails (no descriptor left, a full or failing disk), the directory it made is
    /// removed again and no file of it stays open.
    pub fn create_in(
        dir: &Path,
        tp: TopicPartition,
        topic_id: uuid::Uuid,
        config: Arc<LogConfig>,
        now_ms: i64,
        files: &Arc<SegmentFileCache>,
    ) -> Result<PartitionLog> {
        let existed = fs::symlink_metadata(dir).is_ok();
        let created = (|| {
            fs::create_dir_all(dir)?;
            checkpoint::write_partition_metadata(&dir.join(PARTITION_METADATA_FILE), topic_id)?;
            // The partition's directory itself must survive a power loss.
            if let Some(parent) = dir.parent() {
                crate::durable::sync_dir(parent)?;
            }
            let params = LoadParams {
                had_clean_shutdown: true,
                now_ms,
                ..Default::default()
            };
            Ok(PartitionLog::open_in(dir, tp, config, params, files)?.0)
        })();
        // The half-made log, if any, was dropped with its files: its descriptors are free
        // for the removal.
        if created.is_err() && !existed {
            remove_partial_dir(dir, &[0]);
        }
        created
    }

    /// Loads a partition from its directory, cleaning up what an interrupted compaction or
    /// deletion left, and recovering after an unclean shutdown from the recovery point on.
    /// Its segment files are counted in the process's default cache of open files.
    pub fn open(
        dir: &Path,
        tp: TopicPartition,
        config: Arc<LogConfig>,
        params: LoadParams,
    ) -> Result<(PartitionLog, LoadReport)> {
        PartitionLog::open_in(dir, tp, config, params, SegmentFileCache::process_default())
    }

    /// `open`, with the segment files counted in `files`: a segment's `.log` file is
    /// opened only while loading needs it (recovery reads it), and closed by the cache
    /// when others need the room.
    pub fn open_in(
        dir: &Path,
        tp: TopicPartition,
        config: Arc<LogConfig>,
        params: LoadParams,
        files: &Arc<SegmentFileCache>,
    ) -> Result<(PartitionLog, LoadReport)> {
        let now = params.now_ms;
        let mut report = LoadReport::default();
        let topic_id = checkpoint::read_partition_metadata(&dir.join(PARTITION_METADATA_FILE))?;

        // 1. Leftovers of deletion, compaction and checkpoint writes.
        let mut swaps = Vec::new();
        let mut min_cleaned = i64::MAX;
        for entry in fs::read_dir(dir)? {
            let entry = entry?;
            let name = entry.file_name().to_string_lossy().into_owned();
            let path = entry.path();
            if name.ends_with(DELETED_SUFFIX) || name.ends_with(".tmp") {
                remove_if_exists(&path)?;
            } else if name.ends_with(CLEANED_SUFFIX) {
                if let Some(b) = parse_base_offset(&name) {
                    min_cleaned = min_cleaned.min(b);
                }
                remove_if_exists(&path)?;
            } else if name.ends_with(SWAP_SUFFIX) {
                swaps.push((name, path));
            }
        }
        let mut rebuild_indexes = std::collections::BTreeSet::new();
        for (name, path) in &swaps {
            let Some(base) = parse_base_offset(name) else {
                continue;
            };
            if base >= min_cleaned || !name.ends_with(&format!("{LOG_SUFFIX}{SWAP_SUFFIX}")) {
                // An unfinished split, or an index swap: indexes are rebuilt instead.
                remove_if_exists(path)?;
            }
        }
        for (name, path) in &swaps {
            let Some(base) = parse_base_offset(name) else {
                continue;
            };
            if base >= min_cleaned
                || !name.ends_with(&format!("{LOG_SUFFIX}{SWAP_SUFFIX}"))
                || !path.exists()
            {
                continue;
            }
            // The swap replaces every normal segment in [base, its next offset).
            let file = fs::File::open(path)?;
            let len = file.metadata()?.len();
            let mut next = base;
            walk_headers(&file, 0, len, |h| {
                next = h.last_offset + 1;
                std::ops::ControlFlow::Continue(())
            })?;
            for other in list_log_bases(dir)? {
                if other >= base && other < next {
                    for p in segment_paths(dir, other, "") {
                        remove_if_exists(&p)?;
                    }
                }
            }
            for p in &segment_paths(dir, base, "")[1..] {
                remove_if_exists(p)?;
            }
            fs::rename(path, dir.join(file_name(base, LOG_SUFFIX)))?;
            rebuild_indexes.insert(base);
        }

        // 2. Segments, and indexes without a segment.
        let bases = list_log_bases(dir)?;
        for entry in fs::read_dir(dir)? {
            let name = entry?.file_name().to_string_lossy().into_owned();
            if name.ends_with(INDEX_SUFFIX)
                || name.ends_with(TIME_INDEX_SUFFIX)
                || name.ends_with(TXN_INDEX_SUFFIX)
            {
                if let Some(b) = parse_base_offset(&name) {
                    if !bases.contains(&b) {
                        remove_if_exists(&dir.join(&name))?;
                    }
                }
            }
        }
        let mut segments = BTreeMap::new();
        let last_base = bases.last().copied();
        for &base in &bases {
            let [_, idx, tidx, _] = segment_paths(dir, base, "");
            if !idx.exists() || !tidx.exists() {
                rebuild_indexes.insert(base);
            }
            let active = Some(base) == last_base;
            let seg = LogSegment::open(dir, base, &config, active, "", now, files)?;
            if let Err(e) = seg.sanity_check() {
                tracing::warn!(partition = %tp, "{e}; rebuilding the index");
                rebuild_indexes.insert(base);
            }
            segments.insert(base, seg);
        }
        report.segments = segments.len();

        // 3. Recovery.
        let mut epochs = LeaderEpochCache::load(dir)?;
        let recover_from = if params.had_clean_shutdown {
            i64::MAX
        } else {
            let rp = params.recovery_point.unwrap_or(0);
            // The segment holding the recovery point, and everything after it.
            segments
                .range(..=rp)
                .next_back()
                .map_or(i64::MIN, |(b, _)| *b)
        };
        let mut recovered_next_offset = None;
        let mut first_recovered: Option<i64> = None;
        let mut delete_after: Option<i64> = None;
        for (&base, seg) in segments.iter_mut() {
            if delete_after.is_some() {
                break;
            }
            if base < recover_from && !rebuild_indexes.contains(&base) {
                continue;
            }
            if base >= recover_from {
                epochs.truncate_from_end(base);
            }
            let result = seg.recover(|entry| {
                if let LogEntry::V2(b) = entry {
                    if base >= recover_from {
                        epochs.assign(b.partition_leader_epoch(), b.base_offset());
                    }
                }
            })?;
            first_recovered.get_or_insert(base);
            report.recovered_segments += 1;
            report.truncated_bytes += result.truncated_bytes;
            recovered_next_offset = Some(result.next_offset);
            if result.truncated_bytes > 0 {
                tracing::warn!(
                    partition = %tp,
                    segment = base,
                    bytes = result.truncated_bytes,
                    "truncated a torn or corrupt tail during recovery"
                );
                delete_after = Some(base);
            }
        }
        if let Some(base) = delete_after {
            let later: Vec<i64> = segments.range(base + 1..).map(|(b, _)| *b).collect();
            for b in later {
                if let Some(seg) = segments.remove(&b) {
                    for p in seg.paths() {
                        remove_if_exists(&p)?;
                    }
                    report.deleted_segments += 1;
                }
            }
        }

        // 4. Offsets.
        let first_base = match segments.keys().next() {
            Some(&base) => base,
            None => {
                let base = params.log_start_offset.unwrap_or(0).max(0);
                segments.insert(
                    base,
                    LogSegment::open(dir, base, &config, true, "", now, files)?,
                );
                base
            }
        };
        let (&last_base, active) = segments.iter_mut().next_back().expect(HAS_A_SEGMENT);
        active.on_become_active()?;
        let log_end_offset = match recovered_next_offset {
            Some(n)
                if delete_after == Some(last_base)
                    || rebuild_indexes.contains(&last_base)
                    || last_base >= recover_from =>
            {
                n.max(last_base)
            }
            _ => active.read_next_offset()?,
        };
        let log_start_offset = params
            .log_start_offset
            .unwrap_or(first_base)
            .max(first_base)
            .min(log_end_offset);
        let recovery_point = if params.had_clean_shutdown {
            log_end_offset
        } else {
            params.recovery_point.unwrap_or(0).min(log_end_offset)
        };
        // Segments wholly below the one holding the recovery point (all of them after a
        // clean shutdown) were flushed before the stop, and recovery left them alone:
        // closing their files needs no fsync. The others' state is unknown until synced.
        for (base, seg) in &segments {
            if *base < recover_from && !rebuild_indexes.contains(base) {
                seg.mark_log_durable();
            }
        }
        epochs.truncate_from_end(log_end_offset);
        epochs.truncate_from_start(log_start_offset);
        epochs.flush()?;
        // Recovery emptied the `.txnindex` of every segment it went over: the producer state
        // is replayed from a snapshot before the first of them (later snapshots go), so
        // that the replay finds every transaction those segments' ABORT markers close.
        let replay_from = first_recovered.map_or(log_end_offset, |b| b.min(log_end_offset));
        let mut producers = ProducerStateManager::load(dir, log_start_offset, replay_from)?;
        rebuild_producer_state(&mut segments, &mut producers, log_end_offset)?;
        // Whatever the checkpoints said, the clamps above put the offsets in order; the high
        // watermark starts at the log end offset.
        assert!(
            log_start_offset <= log_end_offset && recovery_point <= log_end_offset,
            "{tp}: log start offset {log_start_offset}, recovery point {recovery_point}, \
             log end offset {log_end_offset}"
        );
        Ok((
            PartitionLog {
                dir: dir.to_path_buf(),
                tp,
                topic_id,
                config,
                segments,
                log_end_offset,
                log_start_offset,
                recovery_point,
                high_watermark: log_end_offset,
                epochs,
                unflushed_messages: 0,
                last_flush_ms: now,
                flush_time: Histogram::default(),
                pending_deletes: Vec::new(),
                producers,
                // Loading may have made, renamed or removed files.
                dir_dirty: true,
                files: files.clone(),
                replicated: false,
            },
            report,
        ))
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }
    pub fn topic_partition(&self) -> &TopicPartition {
        &self.tp
    }
    pub fn topic_id(&self) -> Option<uuid::Uuid> {
        self.topic_id
    }
    pub fn config(&self) -> &Arc<LogConfig> {
        &self.config
    }
    /// New topic configuration; takes effect for the next append, roll and retention pass.
    pub fn update_config(&mut self, config: Arc<LogConfig>) {
        self.config = config;
    }
    pub fn log_end_offset(&self) -> i64 {
        self.log_end_offset
    }
    pub fn log_start_offset(&self) -> i64 {
        self.log_start_offset
    }
    pub fn high_watermark(&self) -> i64 {
        self.high_watermark
    }
    pub fn recovery_point(&self) -> i64 {
        self.recovery_point
    }
    pub fn leader_epochs(&self) -> &LeaderEpochCache {
        &self.epochs
    }
    pub fn num_segments(&self) -> usize {
        self.segments.len()
    }
    pub fn size_in_bytes(&self) -> u64 {
        self.segments.values().map(|s| s.size()).sum()
    }
    pub fn segment_bases(&self) -> Vec<i64> {
        self.segments.keys().copied().collect()
    }
    pub(crate) fn segments(&self) -> &BTreeMap<i64, LogSegment> {
        &self.segments
    }
    pub(crate) fn segments_mut(&mut self) -> &mut BTreeMap<i64, LogSegment> {
        &mut self.segments
    }
    fn active(&mut self) -> &mut LogSegment {
        self.segments.values_mut().next_back().expect(HAS_A_SEGMENT)
    }
    /// The base offset of the active (last) segment.
    pub(crate) fn active_base(&self) -> i64 {
        *self.segments.keys().next_back().expect(HAS_A_SEGMENT)
    }
    fn first_base(&self) -> i64 {
        *self.segments.keys().next().expect(HAS_A_SEGMENT)
    }

    /// The order of the partition's offsets, which every change to them keeps (Kafka's
    /// too): log start offset ≤ high watermark ≤ log end offset, and recovery point ≤ log
    /// end offset. Loading establishes it by clamping what the checkpoints say.
    fn offsets_in_order(&self) -> bool {
        self.log_start_offset <= self.high_watermark
            && self.high_watermark <= self.log_end_offset
            && self.recovery_point <= self.log_end_offset
    }

    /// The offsets of `offsets_in_order`, for an assertion's message.
    fn offsets_for_message(&self) -> String {
        format!(
            "{}: log start offset {}, high watermark {}, log end offset {}, recovery point {}",
            self.tp,
            self.log_start_offset,
            self.high_watermark,
            self.log_end_offset,
            self.recovery_point
        )
    }

    /// Appends a produce request's records for this partition as its leader: analyzed,
    /// validated against the log's config, then appended (`append_validated`). The
    /// broker analyzes and validates before taking the log's lock; this does all three.
    pub fn append_as_leader(
        &mut self,
        records: impl Into<Bytes>,
        leader_epoch: i32,
        now_ms: i64,
        origin: AppendOrigin,
    ) -> Result<LogAppendInfo> {
        let validated = ProducedRecords::analyze(records.into(), &self.config, origin)?
            .validate(&self.config, now_ms)?;
        self.append_validated(validated, leader_epoch, now_ms)
    }

    /// Appends a validated batch as the partition's leader: it gets the next offsets and
    /// `leader_epoch`; an idempotent producer's retry of a batch already in the log is
    /// answered with the original's offsets and not written again.
    pub fn append_validated(
        &mut self,
        mut batch: ValidatedBatch,
        leader_epoch: i32,
        now_ms: i64,
    ) -> Result<LogAppendInfo> {
        let first_offset = self.log_end_offset;
        batch.assign(first_offset, leader_epoch);
        let last_offset = first_offset + batch.record_count() as i64 - 1;
        debug_assert!(
            last_offset >= first_offset,
            "a validated batch holds records"
        );
        let producer = batch.producer();
        if let Some(p) = &producer {
            debug_assert_eq!((p.first_offset, p.last_offset), (first_offset, last_offset));
            if let SequenceCheck::Duplicate {
                first_offset,
                last_offset,
                timestamp,
            } = self.producers.check(p)?
            {
                return Ok(LogAppendInfo {
                    first_offset,
                    last_offset,
                    max_timestamp: timestamp,
                    offset_of_max_timestamp: last_offset,
                    log_append_time: if batch.log_append_time() >= 0 {
                        timestamp
                    } else {
                        -1
                    },
                    log_start_offset: self.log_start_offset,
                    record_count: 0,
                    valid_bytes: 0,
                    rebuilt: false,
                    producer,
                    duplicate: true,
                });
            }
        }
        let size = batch.size();
        if size as u64 > self.config.segment_bytes {
            return Err(LogError::RecordListTooLarge {
                size,
                limit: self.config.segment_bytes as usize,
            });
        }
        self.maybe_roll(
            size as u64,
            batch.max_timestamp(),
            first_offset,
            last_offset,
            now_ms,
        )?;
        self.active().append_pieces(
            last_offset,
            batch.max_timestamp(),
            last_offset,
            &batch.pieces(),
        )?;
        self.log_end_offset = last_offset + 1;
        if !self.replicated {
            self.high_watermark = self.log_end_offset;
        }
        if let Some(p) = &producer {
            self.producers.update(p);
        }
        self.producers.advance_to(self.log_end_offset);
        if !self.replicated {
            self.producers.on_high_watermark(self.high_watermark);
        }
        if self.epochs.assign(leader_epoch, first_offset) {
            self.epochs.flush()?;
        }
        self.unflushed_messages += batch.record_count() as i64;
        if self.unflushed_messages >= self.config.flush_messages {
            self.flush(now_ms)?;
        }
        debug_assert!(self.offsets_in_order(), "{}", self.offsets_for_message());
        Ok(LogAppendInfo {
            first_offset,
            last_offset,
            max_timestamp: batch.max_timestamp(),
            offset_of_max_timestamp: last_offset,
            log_append_time: batch.log_append_time(),
            log_start_offset: self.log_start_offset,
            record_count: batch.record_count(),
            valid_bytes: size,
            rebuilt: batch.rebuilt(),
            producer,
            duplicate: false,
        })
    }

    /// This replica becomes its partition's leader at `epoch`: the epoch starts at the log
    /// end (Kafka's `makeLeader`), recorded in `leader-epoch-checkpoint` at once, so that
    /// OffsetForLeaderEpoch can answer for it before anything is appended. An epoch
    /// already known changes nothing.
    pub fn assign_leader_epoch(&mut self, epoch: i32) -> Result<()> {
        if self.epochs.assign(epoch, self.log_end_offset) {
            self.epochs.flush()?;
        }
        Ok(())
    }

    /// Appends entries whose offsets are already assigned (the compaction copy, tests of
    /// recovery). They must start at or after the log end offset.
    pub fn append_raw(&mut self, records: &[u8], now_ms: i64) -> Result<()> {
        let mut first = None;
        let mut last = self.log_end_offset - 1;
        let mut max_ts = (-1i64, last);
        for item in weir_record::LogEntries::new(records) {
            let (_, e) = item.map_err(|e| LogError::CorruptRecord(e.error.to_string()))?;
            let (b, l, ts) = match &e {
                LogEntry::V2(b) => (b.base_offset(), b.last_offset(), b.max_timestamp()),
                LogEntry::Legacy(m) => (m.offset(), m.offset(), m.timestamp()),
            };
            if b <= last {
                return Err(LogError::InvalidRecord(format!(
                    "offset {b} is not above the log's last offset {last}"
                )));
            }
            if l < b {
                return Err(LogError::InvalidRecord(format!(
                    "the entry at offset {b} ends below it, at {l}"
                )));
            }
            first.get_or_insert(b);
            last = l;
            if ts > max_ts.0 {
                max_ts = (ts, l);
            }
        }
        let Some(first) = first else { return Ok(()) };
        self.maybe_roll(records.len() as u64, max_ts.0, first, last, now_ms)?;
        self.active().append(last, max_ts.0, max_ts.1, records)?;
        debug_assert!(last >= self.log_end_offset, "offsets only increase");
        self.log_end_offset = last + 1;
        if !self.replicated {
            self.high_watermark = self.log_end_offset;
        }
        debug_assert!(self.offsets_in_order(), "{}", self.offsets_for_message());
        Ok(())
    }

    /// Makes the log a replica of a partition other brokers hold too: from now on only
    /// `advance_high_watermark` (and truncation) moves its high watermark. `checkpointed`
    /// is the high watermark `replication-offset-checkpoint` kept for it (none: the log
    /// start, so nothing is shown to consumers before the replicas agree on it).
    pub fn set_replicated(&mut self, checkpointed: Option<i64>) {
        if self.replicated {
            return;
        }
        self.replicated = true;
        self.high_watermark = checkpointed
            .unwrap_or(self.log_start_offset)
            .clamp(self.log_start_offset, self.log_end_offset);
        debug_assert!(self.offsets_in_order(), "{}", self.offsets_for_message());
    }

    pub fn is_replicated(&self) -> bool {
        self.replicated
    }

    /// Moves the high watermark up to `offset` (never past the log end, never back);
    /// whether it moved.
    pub fn advance_high_watermark(&mut self, offset: i64) -> bool {
        let to = offset.min(self.log_end_offset);
        if to <= self.high_watermark {
            return false;
        }
        self.high_watermark = to;
        self.producers.on_high_watermark(to);
        true
    }

    /// The last stable offset (Kafka's): the high watermark, held back to the first
    /// offset of the oldest transaction still open or whose marker is not yet below it.
    /// read_committed fetches stop here.
    pub fn last_stable_offset(&self) -> i64 {
        let lso = self
            .producers
            .first_unstable_offset(self.high_watermark)
            .map_or(self.high_watermark, |first| first.min(self.high_watermark))
            .max(self.log_start_offset);
        debug_assert!(lso <= self.high_watermark.max(self.log_start_offset));
        lso
    }

    /// The aborted transactions that overlap `[fetch_offset, upper_bound)`, for a
    /// read_committed fetch (Kafka's `collectAbortedTransactions`): from the segment holding
    /// `fetch_offset` on, until an entry's last stable offset passes the bound.
    pub fn collect_aborted_transactions(
        &self,
        fetch_offset: i64,
        upper_bound: i64,
    ) -> Vec<AbortedTxn> {
        let from = self
            .segments
            .range(..=fetch_offset)
            .next_back()
            .map_or(i64::MIN, |(b, _)| *b);
        // An ABORT marker's entry lives in the marker's segment, which may start past the
        // bound while its transaction began below it: every later segment is searched
        // until an entry's stable offset passes the bound (Kafka's search).
        let mut out = TxnSearch::default();
        for seg in self.segments.range(from..).map(|(_, s)| s) {
            seg.collect_aborted_txns(fetch_offset, upper_bound, &mut out);
            if out.complete {
                break;
            }
        }
        out.aborted
    }

    /// The aborted transactions a read_committed consumer needs with `data`, read from
    /// `fetch_offset` (Kafka's `addAbortedTransactions`): those that overlap the fetched
    /// bytes, bounded by the first indexed offset past them (or the next segment, or the
    /// log end).
    pub fn aborted_transactions_in(&self, fetch_offset: i64, data: &FetchData) -> Vec<AbortedTxn> {
        let Some(slice) = data.slice.as_ref().filter(|s| s.len > 0) else {
            return Vec::new();
        };
        let Some(seg) = self.segments.get(&data.segment_base) else {
            return Vec::new();
        };
        let upper = seg
            .offset_index()
            .fetch_upper_bound_offset(slice.position + slice.len as u64)
            .or_else(|| {
                self.segments
                    .range(data.segment_base + 1..)
                    .next()
                    .map(|(b, _)| *b)
            })
            .unwrap_or(self.log_end_offset);
        self.collect_aborted_transactions(fetch_offset, upper)
    }

    /// Appends a transaction's COMMIT or ABORT marker as the partition's leader (the
    /// transaction coordinator's WriteTxnMarkers): a control batch of one record, at the
    /// next offset and `leader_epoch`. The producer's open transaction on this partition
    /// closes; an aborted one goes to the active segment's `.txnindex`. Refused from an
    /// older producer epoch or an older coordinator than the last marker's.
    pub fn append_end_txn_marker(
        &mut self,
        producer_id: i64,
        producer_epoch: i16,
        marker: EndTransactionMarker,
        leader_epoch: i32,
        now_ms: i64,
    ) -> Result<LogAppendInfo> {
        self.producers
            .check_marker(producer_id, producer_epoch, &marker)?;
        let offset = self.log_end_offset;
        let mut b = weir_record::BatchBuilder::new(weir_record::Compression::None, offset, 128)
            .producer(producer_id, producer_epoch, -1)
            .transactional(true)
            .control(true)
            .partition_leader_epoch(leader_epoch);
        b.append_end_txn_marker(now_ms, marker)
            .map_err(|e| LogError::CorruptRecord(e.to_string()))?;
        let bytes = b
            .build()
            .map_err(|e| LogError::CorruptRecord(e.to_string()))?
            .bytes;
        let size = bytes.len();
        self.maybe_roll(size as u64, now_ms, offset, offset, now_ms)?;
        self.active().append(offset, now_ms, offset, &bytes)?;
        self.log_end_offset = offset + 1;
        if !self.replicated {
            self.high_watermark = self.log_end_offset;
        }
        if let Some(done) =
            self.producers
                .complete_txn(producer_id, producer_epoch, &marker, offset, now_ms)
        {
            if let Some(txn) = done.aborted() {
                self.active().append_aborted_txn(txn)?;
            }
        }
        if !self.replicated {
            self.producers.on_high_watermark(self.high_watermark);
        }
        if self.epochs.assign(leader_epoch, offset) {
            self.epochs.flush()?;
        }
        self.unflushed_messages += 1;
        if self.unflushed_messages >= self.config.flush_messages {
            self.flush(now_ms)?;
        }
        debug_assert!(self.offsets_in_order(), "{}", self.offsets_for_message());
        Ok(LogAppendInfo {
            first_offset: offset,
            last_offset: offset,
            max_timestamp: now_ms,
            offset_of_max_timestamp: offset,
            log_append_time: -1,
            log_start_offset: self.log_start_offset,
            record_count: 1,
            valid_bytes: size,
            rebuilt: false,
            producer: None,
            duplicate: false,
        })
    }

    /// Appends the leader's batches as a follower: they keep their offsets, their leader
    /// epochs (which start epochs in the leader-epoch cache as on the leader) and their
    /// producers' sequences, and go to the segment as they came. Every batch must be
    /// RecordBatch v2 with a valid CRC, at or past the log end, offsets increasing. The
    /// high watermark is not moved here (the leader says where it is).
    pub fn append_as_follower(&mut self, records: &[u8], now_ms: i64) -> Result<FollowerAppend> {
        let mut first = None;
        let mut last = self.log_end_offset - 1;
        let mut max_ts = (-1i64, last);
        let mut epochs = Vec::new();
        let mut producers = Vec::new();
        let mut batches = 0;
        let mut count = 0i64;
        for item in weir_record::LogEntries::new(records) {
            let (_, e) = item.map_err(|e| LogError::CorruptRecord(e.error.to_string()))?;
            let LogEntry::V2(b) = &e else {
                return Err(LogError::InvalidRecord(
                    "a leader sends RecordBatch v2 only".into(),
                ));
            };
            b.validate_crc()
                .map_err(|e| LogError::CorruptRecord(format!("from the leader: {e}")))?;
            if b.base_offset() <= last {
                return Err(LogError::InvalidRecord(format!(
                    "the leader's batch at offset {} is not above this replica's last \
                     offset {last}",
                    b.base_offset()
                )));
            }
            first.get_or_insert(b.base_offset());
            last = b.last_offset();
            if b.max_timestamp() > max_ts.0 {
                max_ts = (b.max_timestamp(), last);
            }
            epochs.push((b.partition_leader_epoch(), b.base_offset()));
            if b.has_producer_id() {
                let marker = if b.is_control() {
                    end_txn_marker(b.as_bytes())
                } else {
                    None
                };
                producers.push((
                    b.base_offset(),
                    b.max_timestamp(),
                    crate::segment::ProducerFields {
                        producer_id: b.producer_id(),
                        producer_epoch: b.producer_epoch(),
                        base_sequence: b.base_sequence(),
                        last_offset_delta: b.last_offset_delta(),
                        transactional: b.is_transactional(),
                        control: b.is_control(),
                    },
                    marker,
                ));
            }
            batches += 1;
            count += b.records_count() as i64;
        }
        let Some(first) = first else {
            return Ok(FollowerAppend {
                first_offset: self.log_end_offset,
                last_offset: self.log_end_offset - 1,
                batches: 0,
            });
        };
        self.maybe_roll(records.len() as u64, max_ts.0, first, last, now_ms)?;
        self.active().append(last, max_ts.0, max_ts.1, records)?;
        self.log_end_offset = last + 1;
        let mut epochs_changed = false;
        for (epoch, start) in epochs {
            epochs_changed |= self.epochs.assign(epoch, start);
        }
        if epochs_changed {
            self.epochs.flush()?;
        }
        for (base, ts, p, marker) in &producers {
            if let Some(done) = self.producers.replay(*base, *ts, p, marker.as_ref()) {
                if let Some(txn) = done.aborted() {
                    self.active().append_aborted_txn(txn)?;
                }
            }
        }
        self.producers.advance_to(self.log_end_offset);
        self.unflushed_messages += count;
        if self.unflushed_messages >= self.config.flush_messages {
            self.flush(now_ms)?;
        }
        debug_assert!(self.offsets_in_order(), "{}", self.offsets_for_message());
        Ok(FollowerAppend {
            first_offset: first,
            last_offset: last,
            batches,
        })
    }

    fn maybe_roll(
        &mut self,
        size: u64,
        max_ts: i64,
        first_offset: i64,
        last_offset: i64,
        now_ms: i64,
    ) -> Result<()> {
        let params = RollParams {
            max_segment_bytes: self.config.segment_bytes,
            max_segment_ms: self.config.effective_segment_ms(),
            max_timestamp_in_messages: max_ts,
            max_offset_in_messages: last_offset,
            messages_size: size,
            now_ms,
        };
        if self.active().should_roll(&params) {
            self.roll(Some(first_offset), now_ms)?;
        }
        Ok(())
    }

    /// Starts a new active segment at max(`expected_next_offset`, log end offset).
    pub fn roll(&mut self, expected_next_offset: Option<i64>, now_ms: i64) -> Result<()> {
        let new_base = expected_next_offset.unwrap_or(0).max(self.log_end_offset);
        let active_base = self.active_base();
        if active_base == new_base {
            if self.active().is_empty() {
                return Ok(()); // already an empty segment there
            }
            return Err(LogError::Io(io::Error::other(format!(
                "cannot roll {}: segment {new_base} already exists",
                self.tp
            ))));
        }
        // An empty active segment is replaced rather than kept behind the new one.
        let replace_empty = self.active().is_empty();
        if new_base < active_base && !replace_empty {
            // As Kafka's LocalLog.roll. Only a log end offset read from a batch header that
            // lies (a clean-shutdown segment damaged on disk) gets here.
            return Err(LogError::Io(io::Error::other(format!(
                "cannot roll {}: new segment {new_base} would lie below the active segment \
                 {active_base}",
                self.tp
            ))));
        }
        if !replace_empty {
            let everything_flushed = self.recovery_point >= self.log_end_offset;
            let old = self.active();
            old.on_become_inactive()?;
            if everything_flushed {
                // Its log is durable and the recovery point moves past it with the roll, so
                // recovery will not rebuild its indexes: they must be durable now (a later
                // flush starts at the new segment).
                old.flush_indexes()?;
            }
        }
        // If the new segment cannot be made (a full disk), the old one stays active, its
        // indexes full, so the next append tries the roll again.
        let seg = LogSegment::open(
            &self.dir,
            new_base,
            &self.config,
            true,
            "",
            now_ms,
            &self.files,
        )?;
        let replaced = if replace_empty {
            self.segments.remove(&active_base)
        } else {
            None
        };
        self.segments.insert(new_base, seg);
        self.dir_dirty = true;
        if let Some(old) = replaced {
            for p in old.paths() {
                if let Err(e) = remove_if_exists(&p) {
                    // Left behind, it loads as an empty segment; nothing refers to it.
                    tracing::warn!(
                        "{}: cannot remove the empty segment {}: {e}",
                        self.tp,
                        p.display()
                    );
                }
            }
        }
        // Segments' base offsets increase: the new segment comes after every other.
        assert_eq!(
            self.active_base(),
            new_base,
            "{}: the new segment is the active one",
            self.tp
        );
        // As Kafka: a producer snapshot at every roll bounds the replay after a crash.
        self.producers.advance_to(self.log_end_offset);
        self.producers.take_snapshot(new_base)?;
        Ok(())
    }

    /// Durably writes every segment up to the log end offset and moves the recovery point
    /// there.
    pub fn flush(&mut self, now_ms: i64) -> Result<()> {
        self.flush_up_to(self.log_end_offset, now_ms)
    }

    /// Durably writes the segments holding offsets below `offset` from the recovery point.
    pub fn flush_up_to(&mut self, offset: i64, now_ms: i64) -> Result<()> {
        if offset <= self.recovery_point && self.unflushed_messages == 0 {
            return Ok(());
        }
        let start = Instant::now();
        let from = self
            .segments
            .range(..=self.recovery_point)
            .next_back()
            .map_or(i64::MIN, |(b, _)| *b);
        let active = self.active_base();
        for (base, seg) in self.segments.range(from..offset.max(from + 1)) {
            if *base == active {
                seg.flush_log()?;
            } else {
                seg.flush()?;
            }
        }
        // As Kafka's LocalLog.flush: new segments' names are durable only with their
        // directory.
        if self.dir_dirty {
            crate::durable::sync_dir(&self.dir)?;
            self.dir_dirty = false;
        }
        self.flush_time.record(start.elapsed().as_micros() as u64);
        if offset > self.recovery_point {
            self.recovery_point = offset.min(self.log_end_offset);
        }
        if offset >= self.log_end_offset {
            self.unflushed_messages = 0;
        }
        self.last_flush_ms = now_ms;
        debug_assert!(self.offsets_in_order(), "{}", self.offsets_for_message());
        Ok(())
    }

    /// Flushes if `flush.ms` has passed since the last flush, or if rolled segments are
    /// still unflushed (Kafka flushes a rolled segment in the background).
    pub fn maybe_flush_on_schedule(&mut self, now_ms: i64) -> Result<bool> {
        let active = self.active_base();
        if self.recovery_point < active {
            self.flush_up_to(active, now_ms)?;
        }
        if self.unflushed_messages > 0 && now_ms - self.last_flush_ms >= self.config.flush_ms {
            self.flush(now_ms)?;
            return Ok(true);
        }
        Ok(false)
    }

    /// Reads from `offset`: a slice of the segment holding it, at most `max_bytes` (the
    /// whole first batch when `min_one_message`), not past `max_offset` (exclusive: the
    /// high watermark for consumers). Out of range below the log start or above the end.
    pub fn read(
        &self,
        offset: i64,
        max_bytes: usize,
        max_offset: i64,
        min_one_message: bool,
    ) -> Result<FetchData> {
        let out_of_range = || LogError::OffsetOutOfRange {
            offset,
            log_start_offset: self.log_start_offset,
            log_end_offset: self.log_end_offset,
        };
        if offset < self.log_start_offset || offset > self.log_end_offset {
            return Err(out_of_range());
        }
        // The offsets a fetch answers with are in order.
        debug_assert!(self.offsets_in_order(), "{}", self.offsets_for_message());
        let mut data = FetchData {
            slice: None,
            segment_base: -1,
            high_watermark: self.high_watermark,
            log_start_offset: self.log_start_offset,
            log_end_offset: self.log_end_offset,
        };
        let max_offset = max_offset.min(self.log_end_offset);
        if offset >= max_offset {
            return Ok(data);
        }
        let from = self
            .segments
            .range(..=offset)
            .next_back()
            .map_or(i64::MIN, |(b, _)| *b);
        let bound_base = self
            .segments
            .range(..=max_offset)
            .next_back()
            .map(|(b, _)| *b);
        for (&base, seg) in self.segments.range(from..) {
            if base >= max_offset {
                break;
            }
            let max_position = if max_offset >= self.log_end_offset || Some(base) != bound_base {
                seg.size()
            } else {
                seg.position_of(max_offset)?
            };
            if let Some(slice) = seg.read(offset, max_bytes, max_position, min_one_message)? {
                data.slice = Some(slice);
                data.segment_base = base;
                return Ok(data);
            }
        }
        Ok(data)
    }

    /// ListOffsets for a consumer, as Kafka answers it: only offsets below `fetchable`
    /// (the high watermark, or the last stable offset for read_committed) are found, and
    /// -1 (latest) is `fetchable` itself.
    pub fn offset_for_timestamp_below(
        &mut self,
        timestamp: i64,
        fetchable: i64,
    ) -> Result<Option<TimestampOffset>> {
        match timestamp {
            LATEST_TIMESTAMP => Ok(Some(TimestampOffset {
                timestamp: -1,
                offset: fetchable,
            })),
            EARLIEST_TIMESTAMP => self.offset_for_timestamp(timestamp),
            _ => Ok(self
                .offset_for_timestamp(timestamp)?
                .filter(|found| found.offset < fetchable)),
        }
    }

    /// ListOffsets: the first offset whose record timestamp is ≥ `timestamp`, with that
    /// timestamp; -2 gives the log start, -1 the log end, -3 the record with the largest
    /// timestamp. `None` when no record is that recent.
    pub fn offset_for_timestamp(&mut self, timestamp: i64) -> Result<Option<TimestampOffset>> {
        match timestamp {
            EARLIEST_TIMESTAMP => {
                return Ok(Some(TimestampOffset {
                    timestamp: -1,
                    offset: self.log_start_offset,
                }))
            }
            LATEST_TIMESTAMP => {
                return Ok(Some(TimestampOffset {
                    timestamp: -1,
                    offset: self.log_end_offset,
                }))
            }
            MAX_TIMESTAMP => return self.max_timestamp_record(),
            _ => {}
        }
        let start = self.log_start_offset;
        for seg in self.segments.values_mut() {
            if seg.max_timestamp_so_far().timestamp < timestamp {
                continue;
            }
            if let Some(found) = seg.find_offset_by_timestamp(timestamp, start)? {
                return Ok(Some(found));
            }
        }
        Ok(None)
    }

    fn max_timestamp_record(&mut self) -> Result<Option<TimestampOffset>> {
        let mut best: Option<(i64, &LogSegment)> = None; // (timestamp, its segment)
        let start = self.log_start_offset;
        for seg in self.segments.values_mut() {
            let m = seg.max_timestamp_so_far();
            if m.timestamp >= 0 && m.offset >= start && best.is_none_or(|(t, _)| m.timestamp > t) {
                best = Some((m.timestamp, seg));
            }
        }
        let Some((ts, seg)) = best else {
            return Ok(None);
        };
        Ok(seg.find_offset_by_timestamp(ts, start)?)
    }

    /// Removes everything at or after `offset` (a no-op at or past the log end). The batch
    /// holding `offset` is removed whole, so the log end offset becomes that batch's base
    /// (offsets stay contiguous; Kafka truncates at batch boundaries in practice).
    pub fn truncate_to(&mut self, offset: i64, now_ms: i64) -> Result<()> {
        if offset >= self.log_end_offset {
            // Nothing to remove, but an epoch may start at the log end with no batch of
            // its own (this replica led at it, then lost the leadership before appending):
            // it goes, or a follower would keep naming an epoch its leader never had.
            // Kafka's `truncateTo` does the same.
            if self.epochs.truncate_from_end(self.log_end_offset) {
                self.epochs.flush()?;
            }
            return Ok(());
        }
        if offset < self.first_base() {
            return self.truncate_fully_and_start_at(offset.max(0), now_ms);
        }
        let later: Vec<i64> = self.segments.range(offset + 1..).map(|(b, _)| *b).collect();
        let keep_base = self.segments.range(..=offset).next_back().map(|(b, _)| *b);
        for b in later {
            if Some(b) == keep_base {
                continue;
            }
            if let Some(seg) = self.segments.remove(&b) {
                for p in seg.paths() {
                    remove_if_exists(&p)?;
                }
            }
        }
        let seg = self.active();
        seg.truncate_to(offset)?;
        seg.on_become_active()?;
        // The batch holding `offset` goes whole, so the log now ends where it began.
        let offset = seg.read_next_offset()?;
        self.log_end_offset = offset;
        self.high_watermark = self.high_watermark.min(offset);
        self.recovery_point = self.recovery_point.min(offset);
        self.log_start_offset = self.log_start_offset.min(offset);
        if self.epochs.truncate_from_end(offset) {
            self.epochs.flush()?;
        }
        // Every offset was lowered to the new end at most, so their order holds.
        assert!(self.offsets_in_order(), "{}", self.offsets_for_message());
        self.producers = ProducerStateManager::load(&self.dir, self.log_start_offset, offset)?;
        rebuild_producer_state(&mut self.segments, &mut self.producers, offset)?;
        Ok(())
    }

    /// Deletes every segment and starts empty at `offset`.
    pub fn truncate_fully_and_start_at(&mut self, offset: i64, now_ms: i64) -> Result<()> {
        for (_, seg) in std::mem::take(&mut self.segments) {
            for p in seg.paths() {
                remove_if_exists(&p)?;
            }
        }
        self.dir_dirty = true;
        self.segments.insert(
            offset,
            LogSegment::open(
                &self.dir,
                offset,
                &self.config,
                true,
                "",
                now_ms,
                &self.files,
            )?,
        );
        self.log_end_offset = offset;
        self.log_start_offset = offset;
        self.high_watermark = offset;
        self.recovery_point = offset;
        assert!(self.offsets_in_order(), "{}", self.offsets_for_message());
        self.epochs.truncate_from_end(0);
        self.epochs.flush()?;
        self.producers.truncate_fully(offset)?;
        Ok(())
    }

    /// DeleteRecords: moves the log start offset up to `offset` (at most the high
    /// watermark). Segments wholly below it go at the next retention pass.
    pub fn delete_records_before(&mut self, offset: i64) -> Result<i64> {
        if offset > self.high_watermark || offset < 0 {
            return Err(LogError::OffsetOutOfRange {
                offset,
                log_start_offset: self.log_start_offset,
                log_end_offset: self.high_watermark,
            });
        }
        if offset > self.log_start_offset {
            self.log_start_offset = offset;
            assert!(self.offsets_in_order(), "{}", self.offsets_for_message());
            if self.epochs.truncate_from_start(offset) {
                self.epochs.flush()?;
            }
        }
        Ok(self.log_start_offset)
    }

    /// One retention pass: segments past `retention.ms` (by their largest record
    /// timestamp) or beyond `retention.bytes` (with the delete policy), and segments wholly
    /// below the log start offset. Returns how many segments were removed.
    pub fn delete_old_segments(&mut self, now_ms: i64) -> Result<usize> {
        let config = self.config.clone();
        let log_start_offset = self.log_start_offset;
        let mut deleted = self.delete_segments_while(now_ms, |_, next| {
            next.is_some_and(|n| n <= log_start_offset)
        })?;
        if config.cleanup_policy.deletes() {
            if config.retention_bytes >= 0 {
                let mut diff = self.size_in_bytes() as i64 - config.retention_bytes;
                if diff > 0 {
                    deleted += self.delete_segments_while(now_ms, |seg, _| {
                        let size = seg.size() as i64;
                        if diff - size >= 0 {
                            diff -= size;
                            true
                        } else {
                            false
                        }
                    })?;
                }
            }
            if config.retention_ms >= 0 {
                deleted += self.delete_segments_while(now_ms, |seg, _| {
                    now_ms - seg.largest_timestamp() > config.retention_ms
                })?;
            }
        }
        Ok(deleted)
    }

    /// Deletes segments from the oldest while `pred` (given the segment and the next one's
    /// base) holds and everything in them is below the high watermark. The last (empty)
    /// segment is never deleted; if every segment goes, a new one is rolled first.
    fn delete_segments_while(
        &mut self,
        now_ms: i64,
        mut pred: impl FnMut(&mut LogSegment, Option<i64>) -> bool,
    ) -> Result<usize> {
        let mut doomed = Vec::new();
        let (high_watermark, log_end_offset) = (self.high_watermark, self.log_end_offset);
        let mut segments = self.segments.iter_mut().peekable();
        while let Some((&base, seg)) = segments.next() {
            let next = segments.peek().map(|(&b, _)| b);
            let upper = next.unwrap_or(log_end_offset);
            let last_and_empty = next.is_none() && seg.is_empty();
            if high_watermark >= upper && !last_and_empty && pred(seg, next) {
                doomed.push(base);
            } else {
                break;
            }
        }
        if doomed.is_empty() {
            return Ok(0);
        }
        if doomed.len() == self.segments.len() {
            self.roll(None, now_ms)?;
        }
        let delay = self.config.file_delete_delay_ms;
        for base in &doomed {
            // The roll above replaces only an empty last segment, and that one is never doomed.
            let mut seg = self
                .segments
                .remove(base)
                .expect("a doomed segment is still in the log");
            seg.change_suffix("", DELETED_SUFFIX)?;
            for p in seg.paths() {
                self.pending_deletes.push((p, now_ms + delay));
            }
        }
        let first = self.first_base();
        if first > self.log_start_offset {
            self.log_start_offset = first;
            // Only segments wholly below the high watermark went.
            assert!(self.offsets_in_order(), "{}", self.offsets_for_message());
            if self.epochs.truncate_from_start(first) {
                self.epochs.flush()?;
            }
        }
        self.producers.delete_snapshots_before(first)?;
        tracing::info!(partition = %self.tp, segments = doomed.len(), log_start_offset = self.log_start_offset, "deleted old segments");
        Ok(doomed.len())
    }

    /// Removes `.deleted` files whose delay has passed.
    pub fn remove_due_files(&mut self, now_ms: i64) -> Result<usize> {
        let mut removed = 0;
        let mut keep = Vec::new();
        for (p, due) in std::mem::take(&mut self.pending_deletes) {
            if due <= now_ms {
                remove_if_exists(&p)?;
                removed += 1;
            } else {
                keep.push((p, due));
            }
        }
        self.pending_deletes = keep;
        Ok(removed)
    }

    /// Before a clean shutdown: final time-index entry, indexes trimmed, everything flushed.
    pub fn close(&mut self, now_ms: i64) -> Result<()> {
        self.flush(now_ms)?;
        self.producers.advance_to(self.log_end_offset);
        self.producers.take_snapshot(self.log_end_offset)?;
        self.active().on_become_inactive()?;
        self.active().flush()?;
        self.epochs.flush()?;
        let due: Vec<PathBuf> = self.pending_deletes.drain(..).map(|(p, _)| p).collect();
        for p in due {
            remove_if_exists(&p)?;
        }
        Ok(())
    }

    /// Removes the partition directory's contents (DeleteTopics): the caller has renamed
    /// the directory out of the way first.
    pub fn delete_all_files(self) -> Result<()> {
        fs::remove_dir_all(&self.dir)?;
        Ok(())
    }

    /// How many of its segments' `.log` files are open right now.
    pub fn open_segment_files(&self) -> usize {
        self.segments
            .values()
            .filter(|s| s.is_log_file_open())
            .count()
    }

    /// The cache of open files its segments use.
    pub(crate) fn files(&self) -> &Arc<SegmentFileCache> {
        &self.files
    }

    /// Closes every segment file for good, without an fsync (the log is being deleted):
    /// later reads and writes fail, while slices already handed out stay readable.
    pub(crate) fn retire_files(&self) {
        for seg in self.segments.values() {
            seg.retire_log_file();
        }
    }

    /// Renames the directory (e.g. to `<topic>-<p>.<uuid>-delete`) and keeps working from
    /// there.
    pub fn rename_dir(&mut self, to: &Path) -> Result<()> {
        fs::rename(&self.dir, to)?;
        self.dir = to.to_path_buf();
        Ok(())
    }

    /// The idempotent producers this partition knows.
    pub fn producer_state(&self) -> &ProducerStateManager {
        &self.producers
    }

    /// Forgets producers idle for longer than `expiration_ms` (`producer.id.expiration.ms`).
    pub fn remove_expired_producers(&mut self, now_ms: i64, expiration_ms: i64) -> usize {
        self.producers.remove_expired(now_ms, expiration_ms)
    }

    /// A metrics snapshot (the cleaner fields are filled by the cleaner manager).
    pub fn metrics(&self) -> LogMetrics {
        LogMetrics {
            size_bytes: self.size_in_bytes(),
            num_segments: self.segments.len(),
            index_bytes: self
                .segments
                .values()
                .map(|s| s.index_size_in_bytes())
                .sum(),
            log_start_offset: self.log_start_offset,
            log_end_offset: self.log_end_offset,
            high_watermark: self.high_watermark,
            recovery_point: self.recovery_point,
            cleaner_dirty_bytes: 0,
            cleaner_lag_ms: 0,
            flush_time: self.flush_time.clone(),
        }
    }

    /// Replaces the segments `old` (consecutive bases) with `new`, written with the
    /// `.cleaned` suffix, the way compaction does: `.cleaned` → `.swap`, old files →
    /// `.deleted`, `.swap` → final names. A crash at any step recovers on load.
    pub(crate) fn replace_segments(
        &mut self,
        mut new: LogSegment,
        old: &[i64],
        now_ms: i64,
        crash: Option<crate::cleaner::CrashPoint>,
    ) -> Result<()> {
        use crate::cleaner::CrashPoint;
        assert_eq!(
            old.first(),
            Some(&new.base_offset()),
            "{}: a cleaned segment takes the place of the first one it replaces",
            self.tp
        );
        // The cleaned segment's `.txnindex` holds the entries of the ABORT markers it kept
        // for batches that were still there (the cleaner wrote them).
        new.flush_indexes()?;
        // Each step's renames reach the disk before the next begins, so that a power loss
        // leaves one of the states recovery knows (as a process crash would), not a mix.
        new.change_suffix(CLEANED_SUFFIX, SWAP_SUFFIX)?;
        crate::durable::sync_dir(&self.dir)?;
        if crash == Some(CrashPoint::AfterSwap) {
            return Ok(());
        }
        let delay = self.config.file_delete_delay_ms;
        for base in old {
            if let Some(mut seg) = self.segments.remove(base) {
                seg.change_suffix("", DELETED_SUFFIX)?;
                for p in seg.paths() {
                    self.pending_deletes.push((p, now_ms + delay));
                }
            }
        }
        crate::durable::sync_dir(&self.dir)?;
        if crash == Some(CrashPoint::AfterDeleted) {
            return Ok(());
        }
        new.change_suffix(SWAP_SUFFIX, "")?;
        crate::durable::sync_dir(&self.dir)?;
        self.segments.insert(new.base_offset(), new);
        Ok(())
    }
}

/// Replays the producer fields of every batch from the state's end offset to the log end
/// (batch headers only, and the record of each transaction marker), after a load or a
/// truncation. Each aborted transaction a marker closes goes to its segment's
/// `.txnindex`, unless the index has it already.
fn rebuild_producer_state(
    segments: &mut BTreeMap<i64, LogSegment>,
    producers: &mut ProducerStateManager,
    log_end_offset: i64,
) -> Result<()> {
    let from = producers.map_end_offset();
    if from >= log_end_offset {
        return Ok(());
    }
    let first = segments
        .range(..=from)
        .next_back()
        .map_or(i64::MIN, |(b, _)| *b);
    for (_, seg) in segments.range_mut(first..) {
        let start = seg.offset_index().lookup(from).position as u64;
        let file = seg.log_file()?;
        let mut aborted = Vec::new();
        let mut failed = None;
        walk_headers(&file, start, seg.size(), |h| {
            if h.last_offset < from {
                return std::ops::ControlFlow::Continue(());
            }
            let Some(p) = &h.producer else {
                return std::ops::ControlFlow::Continue(());
            };
            let marker = if p.control {
                match read_end_txn_marker(&file, &h) {
                    Ok(m) => m,
                    Err(e) => {
                        failed = Some(e);
                        return std::ops::ControlFlow::Break(());
                    }
                }
            } else {
                None
            };
            if let Some(done) =
                producers.replay(h.offset_field, h.max_timestamp, p, marker.as_ref())
            {
                aborted.extend(done.aborted());
            }
            std::ops::ControlFlow::Continue(())
        })?;
        if let Some(e) = failed {
            return Err(e.into());
        }
        for txn in aborted {
            seg.append_aborted_txn(txn)?;
        }
    }
    producers.advance_to(log_end_offset);
    Ok(())
}

/// The COMMIT or ABORT marker of the control batch whose header is `h` (None for control
/// records of other kinds, which close no transaction).
fn read_end_txn_marker(
    file: &fs::File,
    h: &crate::segment::EntryHeader,
) -> io::Result<Option<EndTransactionMarker>> {
    use std::os::unix::fs::FileExt;
    let mut buf = vec![0u8; h.size as usize];
    file.read_exact_at(&mut buf, h.position)?;
    Ok(end_txn_marker(&buf))
}

/// The COMMIT or ABORT marker a control batch's (first and only) record holds.
fn end_txn_marker(batch: &[u8]) -> Option<EndTransactionMarker> {
    let b = weir_record::RecordBatch::parse(batch).ok()?;
    let records = b
        .records(weir_kafka::limits::MAX_DECOMPRESSED_BATCH_BYTES)
        .ok()?;
    let r = records.iter().next()?.ok()?;
    EndTransactionMarker::parse(r.key, r.value).ok()
}

/// Removes the directory of a partition whose creation failed. Its own descriptors are
/// closed by now; if the process is still out of them (`remove_dir_all` needs one to list
/// the directory), the files creation makes are unlinked by name, which needs none.
pub(crate) fn remove_partial_dir(dir: &Path, segment_bases: &[i64]) {
    if let Err(e) = fs::remove_dir_all(dir) {
        if e.kind() == io::ErrorKind::NotFound {
            return;
        }
        let mut names: Vec<PathBuf> = [PARTITION_METADATA_FILE, crate::epoch::CHECKPOINT_FILE]
            .iter()
            .flat_map(|n| [dir.join(n), dir.join(format!("{n}.tmp"))])
            .collect();
        for base in segment_bases {
            names.extend(segment_paths(dir, *base, ""));
        }
        for p in &names {
            let _ = remove_if_exists(p);
        }
        if let Err(e2) = fs::remove_dir(dir) {
            tracing::error!(
                "cannot remove {} after its creation failed: {e}; {e2}",
                dir.display()
            );
            return;
        }
    }
    // So that a power loss does not bring the directory back. Best effort: without it the
    // directory may come back after a power loss, empty or partly made.
    if let Some(parent) = dir.parent() {
        if let Err(e) = crate::durable::sync_dir(parent) {
            tracing::warn!("fsync of {} failed: {e}", parent.display());
        }
    }
}

/// The base offsets of the `.log` files in `dir`, ascending.
fn list_log_bases(dir: &Path) -> io::Result<Vec<i64>> {
    let mut bases = Vec::new();
    for entry in fs::read_dir(dir)? {
        let name = entry?.file_name().to_string_lossy().into_owned();
        if name.len() == 20 + LOG_SUFFIX.len() && name.ends_with(LOG_SUFFIX) {
            if let Some(b) = parse_base_offset(&name) {
                bases.push(b);
            }
        }
    }
    bases.sort_unstable();
    Ok(bases)
}
