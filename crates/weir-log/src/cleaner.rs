//! Log compaction (Kafka's `LogCleaner`): keep at least the latest record of every key.
//! A pass builds a key → latest-offset map over the dirty part of a log within a fixed
//! memory budget, then rewrites groups of segments through `.cleaned` and `.swap` files so
//! that a crash at any point leaves a log that loads consistently; offsets never change.
//! Tombstones survive one pass with a delete horizon and go once it has passed.
//! Transactions as in Kafka's cleaner: a pass never reaches the last stable offset, the
//! records of aborted transactions neither win a key nor survive, and a marker whose
//! transaction has no batch left gets a delete horizon, then goes once it has passed.
//! The last batch of every producer the partition still knows stays (emptied if none of
//! its records do), or, if its epoch moved on in a marker since, that marker: so a rebuild
//! of producer state still knows its last sequence and epoch.
//! Choosing which log to clean and running passes on a thread is the manager's job; this
//! module cleans the log it is given.

use std::collections::HashMap;
use std::io;
use std::ops::ControlFlow;
use std::sync::{Mutex, MutexGuard};

use weir_kafka::limits::MAX_DECOMPRESSED_BATCH_BYTES;
use weir_record::{BatchBuilder, Compression, Header, LogEntry, Record, RecordBatch};

use crate::error::{LogError, Result};
use crate::file_cache::{SegmentFileCache, SharedFile};
use crate::log::PartitionLog;
use crate::segment::{walk_entries, LogSegment, CLEANED_SUFFIX};
use crate::txn_index::AbortedTxn;

/// Kafka's default `log.cleaner.dedupe.buffer.size` (128 MiB) and load factor.
pub const DEFAULT_DEDUPE_BUFFER_SIZE: usize = 128 * 1024 * 1024;
pub const DEDUPE_LOAD_FACTOR: f64 = 0.9;

const SLOT: usize = 24; // 16-byte key hash + 8-byte offset

/// A fixed-size open-addressing map from a 128-bit key hash to the latest offset (Kafka's
/// `SkimpyOffsetMap`). Keys that hash alike are treated as one key, as in Kafka.
pub struct OffsetMap {
    slots: Vec<u8>,
    capacity: usize,
    entries: usize,
    latest_offset: i64,
}

impl OffsetMap {
    /// A map using at most `memory` bytes.
    pub fn new(memory: usize) -> Self {
        let capacity = (memory / SLOT).max(1);
        OffsetMap {
            slots: vec![0u8; capacity * SLOT],
            capacity,
            entries: 0,
            latest_offset: -1,
        }
    }

    pub fn clear(&mut self) {
        self.slots.fill(0);
        self.entries = 0;
        self.latest_offset = -1;
    }

    /// Full at the load factor: no more keys may go in.
    pub fn is_full(&self) -> bool {
        self.entries as f64 >= self.capacity as f64 * DEDUPE_LOAD_FACTOR
    }

    pub fn len(&self) -> usize {
        self.entries
    }
    pub fn is_empty(&self) -> bool {
        self.entries == 0
    }

    /// The largest offset put in so far (-1 if none).
    pub fn latest_offset(&self) -> i64 {
        self.latest_offset
    }

    fn hash(key: &[u8]) -> [u8; 16] {
        let h = twox_hash::XxHash3_128::oneshot(key).to_le_bytes();
        // An all-zero hash would read as an empty slot.
        if h == [0u8; 16] {
            [1; 16]
        } else {
            h
        }
    }

    fn find(&self, hash: &[u8; 16]) -> (usize, bool) {
        let start = (u64::from_le_bytes(hash[..8].try_into().unwrap_or_default())
            % self.capacity as u64) as usize;
        let mut i = start;
        loop {
            let slot = &self.slots[i * SLOT..i * SLOT + 16];
            if slot == hash {
                return (i, true);
            }
            if slot == [0u8; 16] {
                return (i, false);
            }
            i = (i + 1) % self.capacity;
            debug_assert!(i != start, "the map is never completely full");
        }
    }

    /// Records `offset` as the latest for `key`. The caller checks `is_full` first.
    pub fn put(&mut self, key: &[u8], offset: i64) {
        let hash = Self::hash(key);
        let (i, found) = self.find(&hash);
        let slot = &mut self.slots[i * SLOT..(i + 1) * SLOT];
        if !found {
            slot[..16].copy_from_slice(&hash);
            self.entries += 1;
        }
        slot[16..].copy_from_slice(&offset.to_be_bytes());
        self.latest_offset = self.latest_offset.max(offset);
    }

    /// The latest offset of `key`, or -1.
    pub fn get(&self, key: &[u8]) -> i64 {
        let (i, found) = self.find(&Self::hash(key));
        if found {
            i64::from_be_bytes(
                self.slots[i * SLOT + 16..(i + 1) * SLOT]
                    .try_into()
                    .unwrap_or_default(),
            )
        } else {
            -1
        }
    }
}

/// Where a log stands for compaction.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Cleanability {
    pub first_dirty_offset: i64,
    pub first_uncleanable_offset: i64,
    pub clean_bytes: u64,
    pub dirty_bytes: u64,
    /// dirty / (clean + dirty).
    pub dirty_ratio: f64,
    /// Age of the oldest dirty record in ms (by record time), 0 if none.
    pub lag_ms: i64,
    /// `max.compaction.lag.ms` has passed for the oldest dirty record.
    pub must_clean_now: bool,
}

impl Cleanability {
    /// Worth a pass: over `min.cleanable.dirty.ratio`, or overdue.
    pub fn is_cleanable(&self, min_ratio: f64) -> bool {
        self.dirty_bytes > 0 && (self.dirty_ratio > min_ratio || self.must_clean_now)
    }
}

/// Measures a compacted log given its cleaner checkpoint (Kafka's cleanable range: from the
/// checkpoint, or the log start, to the active segment or the first segment still inside
/// `min.compaction.lag.ms`).
pub fn cleanability(log: &mut PartitionLog, checkpoint: Option<i64>, now_ms: i64) -> Cleanability {
    let start = log.log_start_offset();
    let leo = log.log_end_offset();
    let first_dirty = match checkpoint {
        Some(c) if c >= start && c <= leo => c,
        _ => start,
    };
    let config = log.config().clone();
    // Never into the active segment, past what the replicas all have, or into a
    // transaction whose outcome is not known yet (Kafka's cutoff).
    let mut first_uncleanable = log
        .active_base()
        .min(log.high_watermark())
        .min(log.last_stable_offset());
    let mut clean_bytes = 0;
    let mut dirty_bytes = 0;
    let mut oldest_dirty_ts: Option<i64> = None;
    let mut segments = log.segments_mut().iter_mut().peekable();
    while let Some((&base, seg)) = segments.next() {
        let next = segments.peek().map_or(leo, |(&b, _)| b);
        if base >= first_uncleanable {
            break;
        }
        let size = seg.size();
        if next <= first_dirty {
            clean_bytes += size;
            continue;
        }
        let max_ts = seg.largest_timestamp();
        if config.min_compaction_lag_ms > 0 && max_ts > now_ms - config.min_compaction_lag_ms {
            first_uncleanable = first_uncleanable.min(base);
            break;
        }
        if oldest_dirty_ts.is_none() {
            oldest_dirty_ts = Some(seg.max_timestamp_so_far().timestamp.max(0));
        }
        dirty_bytes += size;
    }
    let total = clean_bytes + dirty_bytes;
    let lag_ms = oldest_dirty_ts.map_or(0, |t| (now_ms - t).max(0));
    Cleanability {
        first_dirty_offset: first_dirty,
        first_uncleanable_offset: first_uncleanable.max(first_dirty),
        clean_bytes,
        dirty_bytes,
        dirty_ratio: if total == 0 {
            0.0
        } else {
            dirty_bytes as f64 / total as f64
        },
        lag_ms,
        must_clean_now: oldest_dirty_ts
            .is_some_and(|t| t > 0 && now_ms - t > config.max_compaction_lag_ms),
    }
}

/// What a pass did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CleanStats {
    /// The new cleaner checkpoint: everything below it is clean.
    pub end_offset: i64,
    pub bytes_read: u64,
    pub bytes_written: u64,
    pub records_read: u64,
    pub records_kept: u64,
    pub segments_cleaned: usize,
}

/// Test hook: where a pass stops, simulating a crash.
#[doc(hidden)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CrashPoint {
    /// After the `.cleaned` files are written and flushed.
    AfterCleaned,
    /// After the `.cleaned` files became `.swap`.
    AfterSwap,
    /// After the old segments became `.deleted`.
    AfterDeleted,
}

/// What the cleaner needs of a segment, taken under the log's lock so the rest of the
/// pass can read the (immutable, inactive) segment files without it. The file is opened
/// through the log's cache when the pass reads it, one segment at a time, so a pass over
/// hundreds of segments holds one or two descriptors, not hundreds.
#[derive(Debug, Clone)]
struct SegmentSnapshot {
    base: i64,
    file: SharedFile,
    size: u64,
    next_offset: i64,
    offset_index_bytes: usize,
    time_index_bytes: usize,
    last_modified_ms: i64,
}

fn snapshot(log: &PartitionLog, below: i64) -> Result<Vec<SegmentSnapshot>> {
    let mut out = Vec::new();
    for (&base, seg) in log.segments().range(..below) {
        out.push(SegmentSnapshot {
            base,
            file: seg.shared_log_file(),
            size: seg.size(),
            next_offset: seg.read_next_offset()?,
            offset_index_bytes: seg.offset_index().size_in_bytes(),
            time_index_bytes: seg.time_index().size_in_bytes(),
            last_modified_ms: seg.last_modified_ms(),
        });
    }
    Ok(out)
}

/// The last entry of each producer the partition still knows (Kafka's
/// `lastRecordsOfActiveProducers`): by producer id, the last offset of its last data batch
/// (none when its epoch moved on in a marker since) and its epoch. The cleaner keeps that
/// batch, emptied if none of its records survive, or else that marker: they carry the
/// producer's last sequence and epoch, which a broker that rebuilds its producer state from
/// the log (after a crash without a snapshot, or on a new replica) needs to recognise
/// retries and fence zombies.
struct LastOfProducers(HashMap<i64, (Option<i64>, i16)>);

impl LastOfProducers {
    fn of(state: &crate::producer_state::ProducerStateManager) -> Self {
        LastOfProducers(
            state
                .producers()
                .values()
                .map(|e| {
                    let last = e.batches.back().map(|b| b.last_offset);
                    (e.producer_id, (last, e.producer_epoch))
                })
                .collect(),
        )
    }

    /// Whether `b` is its producer's last data batch, or (when there is none) a marker of
    /// its producer's current epoch.
    fn is_last(&self, b: &RecordBatch<'_>) -> bool {
        if b.producer_id() < 0 {
            return false;
        }
        self.0
            .get(&b.producer_id())
            .is_some_and(|&(last_data, epoch)| match last_data {
                Some(offset) => !b.is_control() && b.last_offset() == offset,
                None => b.is_control() && b.producer_epoch() == epoch,
            })
    }
}

/// The aborted transactions below the pass's bound, by producer: a transactional batch
/// belongs to one if its producer's transaction spans its offset (from the transaction's
/// first offset to its ABORT marker).
#[derive(Debug, Default)]
struct Aborted(HashMap<i64, Vec<AbortedTxn>>);

impl Aborted {
    fn new(txns: Vec<AbortedTxn>) -> Self {
        let mut by_producer: HashMap<i64, Vec<AbortedTxn>> = HashMap::new();
        for t in txns {
            by_producer.entry(t.producer_id).or_default().push(t);
        }
        for txns in by_producer.values_mut() {
            txns.sort_unstable_by_key(|t| t.first_offset);
        }
        Aborted(by_producer)
    }

    /// The aborted transaction of `producer_id` that spans `offset`.
    fn spanning(&self, producer_id: i64, offset: i64) -> Option<&AbortedTxn> {
        let txns = self.0.get(&producer_id)?;
        let i = txns.partition_point(|t| t.first_offset <= offset);
        (i > 0 && txns[i - 1].last_offset >= offset).then(|| &txns[i - 1])
    }

    fn contains(&self, entry: &LogEntry<'_>) -> bool {
        let LogEntry::V2(b) = entry else {
            return false;
        };
        b.is_transactional()
            && !b.is_control()
            && self.spanning(b.producer_id(), b.base_offset()).is_some()
    }
}

/// What a rewriting pass has seen of the transactions it goes through (Kafka's
/// `CleanedTransactionMetadata`), kept from one group of segments to the next: whether a
/// batch of a producer's current transaction was still in the log. A marker whose
/// transaction had none left is no longer needed.
#[derive(Debug, Default)]
struct MarkerState {
    /// Producers whose committed transaction still had a batch.
    committed_with_batches: std::collections::HashSet<i64>,
    /// Producers whose aborted transaction still had a batch (dropped by this pass).
    aborted_with_batches: std::collections::HashSet<i64>,
}

/// What to do with a COMMIT or ABORT marker.
enum MarkerFate {
    /// Its transaction still has batches (or it is no marker): kept as it is. An ABORT
    /// keeps its `.txnindex` entry.
    Keep(Option<AbortedTxn>),
    /// Nothing of its transaction is left: it may go once its delete horizon has passed.
    Expendable,
}

impl MarkerState {
    fn on_data(&mut self, b: &RecordBatch<'_>, aborted: bool) {
        if b.is_transactional() {
            if aborted {
                self.aborted_with_batches.insert(b.producer_id());
            } else {
                self.committed_with_batches.insert(b.producer_id());
            }
        }
    }

    fn on_marker(&mut self, b: &RecordBatch<'_>, aborted: &Aborted) -> MarkerFate {
        let pid = b.producer_id();
        match end_txn_marker(b).map(|m| m.kind) {
            Some(weir_record::ControlRecordType::Abort) => {
                if self.aborted_with_batches.remove(&pid) {
                    MarkerFate::Keep(aborted.spanning(pid, b.base_offset()).copied())
                } else {
                    MarkerFate::Expendable
                }
            }
            Some(weir_record::ControlRecordType::Commit) => {
                if self.committed_with_batches.remove(&pid) {
                    MarkerFate::Keep(None)
                } else {
                    MarkerFate::Expendable
                }
            }
            _ => MarkerFate::Keep(None),
        }
    }
}

fn lock(log: &Mutex<PartitionLog>) -> Result<MutexGuard<'_, PartitionLog>> {
    log.lock()
        .map_err(|_| LogError::Offline("the log's lock was poisoned by a panic".into()))
}

/// One compaction pass over `log` from `first_dirty` to `first_uncleanable`, using `map`
/// (cleared first). The log's lock is held only to take a snapshot of the segments and to
/// swap each cleaned group in; reading and writing happen without it, so producers keep
/// appending to the active segment meanwhile. Returns the new checkpoint in the stats.
pub fn clean(
    log: &Mutex<PartitionLog>,
    map: &mut OffsetMap,
    first_dirty: i64,
    first_uncleanable: i64,
    now_ms: i64,
) -> Result<CleanStats> {
    clean_with_crash(log, map, first_dirty, first_uncleanable, now_ms, None)
}

#[doc(hidden)]
pub fn clean_with_crash(
    log: &Mutex<PartitionLog>,
    map: &mut OffsetMap,
    first_dirty: i64,
    first_uncleanable: i64,
    now_ms: i64,
    crash: Option<CrashPoint>,
) -> Result<CleanStats> {
    map.clear();
    let mut stats = CleanStats::default();
    let (segments, config, dir, files, aborted, last_of_producers) = {
        let log = lock(log)?;
        let active = log.active_base();
        // The bound comes from `cleanability`, which kept it below the last stable offset;
        // a transaction opened since cannot reach below it.
        let bound = first_uncleanable.min(active);
        (
            snapshot(&log, bound)?,
            log.config().clone(),
            log.dir().to_path_buf(),
            log.files().clone(),
            Aborted::new(log.collect_aborted_transactions(log.log_start_offset(), bound)),
            LastOfProducers::of(log.producer_state()),
        )
    };
    // 1. The offset map over the dirty range, stopping when it is full.
    let mut end_offset = first_dirty;
    for seg in segments.iter().filter(|s| s.next_offset > first_dirty) {
        let mut full = false;
        let Some(file) = open_snapshot(seg)? else {
            // Retention or truncation took it meanwhile: the map ends before it.
            break;
        };
        walk_entries(&file, 0, seg.size, |_, entry| {
            let (first, last) = entry_offsets(&entry);
            if last < first_dirty {
                return Ok(ControlFlow::Continue(()));
            }
            if first >= first_uncleanable {
                return Ok(ControlFlow::Break(()));
            }
            if is_control(&entry) || aborted.contains(&entry) {
                // An aborted transaction's records do not count as a key's latest.
                end_offset = last + 1;
                return Ok(ControlFlow::Continue(()));
            }
            let records = entry
                .records(MAX_DECOMPRESSED_BATCH_BYTES)
                .map_err(io::Error::other)?;
            // A batch goes in whole or not at all, so the map's range ends on a batch.
            let keyed = records
                .iter()
                .filter(|r| r.as_ref().is_ok_and(|r| r.key.is_some()))
                .count();
            if map.len() + keyed > (map.capacity as f64 * DEDUPE_LOAD_FACTOR) as usize {
                full = true;
                return Ok(ControlFlow::Break(()));
            }
            for r in records.iter() {
                let r = r.map_err(io::Error::other)?;
                if let Some(k) = r.key {
                    if r.offset >= first_dirty {
                        map.put(k, r.offset);
                    }
                }
            }
            end_offset = last + 1;
            Ok(ControlFlow::Continue(()))
        })?;
        if full {
            break;
        }
    }
    if end_offset <= first_dirty {
        if map.is_empty()
            && segments
                .iter()
                .any(|s| s.next_offset > first_dirty && s.size > 0)
        {
            return Err(LogError::Io(io::Error::other(
                "log.cleaner.dedupe.buffer.size is too small to hold one batch's keys",
            )));
        }
        stats.end_offset = first_dirty;
        return Ok(stats);
    }
    stats.end_offset = end_offset;

    // 2. Group segments from the log start up to the end offset and rewrite each group.
    let mut groups: Vec<Vec<&SegmentSnapshot>> = Vec::new();
    for seg in segments.iter().filter(|s| s.base < end_offset) {
        if let Some(group) = groups.last_mut() {
            let size: u64 = group.iter().map(|s| s.size).sum();
            let idx: usize = group.iter().map(|s| s.offset_index_bytes).sum();
            let tidx: usize = group.iter().map(|s| s.time_index_bytes).sum();
            if size + seg.size <= config.segment_bytes
                && idx + seg.offset_index_bytes <= config.segment_index_bytes as usize
                && tidx + seg.time_index_bytes <= config.segment_index_bytes as usize
                && seg.next_offset - group[0].base <= i32::MAX as i64
            {
                group.push(seg);
                continue;
            }
        }
        groups.push(vec![seg]);
    }
    let mut markers = MarkerState::default();
    for group in groups {
        let cleaned = clean_group(
            &dir,
            &files,
            map,
            &aborted,
            &last_of_producers,
            &mut markers,
            &group,
            end_offset,
            now_ms,
            &config,
            &mut stats,
        )?;
        let Some(cleaned) = cleaned else {
            // A segment of the group went meanwhile: the pass ends short of its goal.
            stats.end_offset = group[0].base.max(first_dirty);
            break;
        };
        if crash == Some(CrashPoint::AfterCleaned) {
            break;
        }
        let mut log = lock(log)?;
        // Retention or truncation may have removed or changed segments meanwhile; then this
        // group's work is dropped and the pass ends short of its goal.
        let unchanged = group.iter().all(|s| {
            log.segments()
                .get(&s.base)
                .is_some_and(|seg| seg.size() == s.size)
        });
        if !unchanged {
            for p in cleaned.paths() {
                let _ = std::fs::remove_file(p);
            }
            stats.end_offset = group[0].base.max(first_dirty);
            break;
        }
        let bases: Vec<i64> = group.iter().map(|s| s.base).collect();
        log.replace_segments(cleaned, &bases, now_ms, crash)?;
        if crash.is_some() {
            break;
        }
    }
    Ok(stats)
}

fn entry_offsets(entry: &LogEntry<'_>) -> (i64, i64) {
    match entry {
        LogEntry::V2(b) => (b.base_offset(), b.last_offset()),
        LogEntry::Legacy(m) => (m.offset(), m.offset()),
    }
}

fn is_control(entry: &LogEntry<'_>) -> bool {
    matches!(entry, LogEntry::V2(b) if b.is_control())
}

/// Writes the surviving records of `group` into a new `.cleaned` segment.
#[allow(clippy::too_many_arguments)]
fn clean_group(
    dir: &std::path::Path,
    files: &std::sync::Arc<SegmentFileCache>,
    map: &OffsetMap,
    aborted: &Aborted,
    last_of_producers: &LastOfProducers,
    markers: &mut MarkerState,
    group: &[&SegmentSnapshot],
    end_offset: i64,
    now_ms: i64,
    config: &crate::config::LogConfig,
    stats: &mut CleanStats,
) -> Result<Option<LogSegment>> {
    let first = group[0].base;
    // Leftovers of an earlier failed attempt.
    let remove_cleaned = || {
        for p in crate::log::segment_paths(dir, first, CLEANED_SUFFIX) {
            let _ = std::fs::remove_file(p);
        }
    };
    remove_cleaned();
    let mut cleaned = LogSegment::open(dir, first, config, true, CLEANED_SUFFIX, now_ms, files)?;
    // Legacy (v0/v1) tombstones go by the age of the segment holding them.
    let legacy_horizon = now_ms - config.delete_retention_ms;
    for seg in group {
        let retain_legacy_deletes = seg.last_modified_ms > legacy_horizon;
        let mut out: Vec<u8> = Vec::new();
        let mut out_last = -1i64;
        let mut out_max_ts = (-1i64, -1i64);
        let Some(file) = open_snapshot(seg)? else {
            drop(cleaned);
            remove_cleaned();
            return Ok(None);
        };
        let mut keep_aborted: Vec<AbortedTxn> = Vec::new();
        walk_entries(&file, 0, seg.size, |_, entry| {
            stats.bytes_read += entry.size_in_bytes() as u64;
            let (_, last) = entry_offsets(&entry);
            let is_aborted = aborted.contains(&entry);
            let kept = match &entry {
                LogEntry::V2(b) if b.is_control() => {
                    let fate = markers.on_marker(b, aborted);
                    if let MarkerFate::Keep(Some(txn)) = &fate {
                        keep_aborted.push(*txn);
                    }
                    let last_of_producer = last_of_producers.is_last(b);
                    filter_marker(b, fate, last_of_producer, end_offset, now_ms, config)
                }
                _ => {
                    if let LogEntry::V2(b) = &entry {
                        markers.on_data(b, is_aborted);
                    }
                    let last_of_producer =
                        matches!(&entry, LogEntry::V2(b) if last_of_producers.is_last(b));
                    filter_entry(
                        &entry,
                        map,
                        is_aborted,
                        last_of_producer,
                        end_offset,
                        now_ms,
                        config,
                        retain_legacy_deletes,
                        stats,
                    )?
                }
            };
            if let Some(kept) = kept {
                let bytes: &[u8] = match &kept {
                    Kept::Whole => entry.as_bytes(),
                    Kept::Rebuilt(b) => b,
                };
                let ts = match LogEntry::parse(bytes) {
                    Ok(LogEntry::V2(b)) => b.max_timestamp(),
                    Ok(LogEntry::Legacy(m)) => m.timestamp(),
                    Err(_) => -1,
                };
                if ts > out_max_ts.0 {
                    out_max_ts = (ts, last);
                }
                out.extend_from_slice(bytes);
                out_last = last;
            }
            // Keep memory bounded: write out every few MiB.
            if out.len() > 4 << 20 {
                cleaned.append(out_last, out_max_ts.0, out_max_ts.1, &out)?;
                stats.bytes_written += out.len() as u64;
                out.clear();
                out_max_ts = (-1, -1);
            }
            Ok(ControlFlow::Continue(()))
        })?;
        if !out.is_empty() {
            cleaned.append(out_last, out_max_ts.0, out_max_ts.1, &out)?;
            stats.bytes_written += out.len() as u64;
        }
        // The ABORT markers kept for their transactions' batches keep their entries.
        for txn in keep_aborted {
            cleaned.append_aborted_txn(txn)?;
        }
        stats.segments_cleaned += 1;
    }
    cleaned.on_become_inactive()?;
    cleaned.flush()?;
    cleaned.set_last_modified(group.last().map_or(now_ms, |s| s.last_modified_ms))?;
    Ok(Some(cleaned))
}

/// The file of a segment in the pass's snapshot, or `None` if the segment has left the log
/// since (its file is closed for good, or gone from the disk).
fn open_snapshot(seg: &SegmentSnapshot) -> Result<Option<std::sync::Arc<std::fs::File>>> {
    match seg.file.open() {
        Ok(f) => Ok(Some(f)),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(e.into()),
    }
}

enum Kept {
    Whole,
    Rebuilt(Vec<u8>),
}

/// Decides what of one entry survives compaction. A producer's last batch
/// (`last_of_producer`) stays, emptied if none of its records do.
#[allow(clippy::too_many_arguments)]
fn filter_entry(
    entry: &LogEntry<'_>,
    map: &OffsetMap,
    aborted: bool,
    last_of_producer: bool,
    end_offset: i64,
    now_ms: i64,
    config: &crate::config::LogConfig,
    retain_legacy_deletes: bool,
    stats: &mut CleanStats,
) -> io::Result<Option<Kept>> {
    let (_, last) = entry_offsets(entry);
    if let (true, LogEntry::V2(b)) = (aborted, entry) {
        // An aborted transaction's records go whole, whatever their keys.
        stats.records_read += b.records_count().max(0) as u64;
        // The last batch of the pass stays, empty, so the log's offsets stay known.
        let stays = last_of_producer || last + 1 == end_offset;
        return Ok(stays.then(|| Kept::Rebuilt(empty_like(b))));
    }
    let records = entry
        .records(MAX_DECOMPRESSED_BATCH_BYTES)
        .map_err(io::Error::other)?;
    let batch = match entry {
        LogEntry::V2(b) => Some(*b),
        LogEntry::Legacy(_) => None,
    };
    let horizon = batch.and_then(|b| b.delete_horizon_ms());
    let retain_deletes = match batch {
        Some(_) => horizon.is_none_or(|h| now_ms < h),
        None => retain_legacy_deletes,
    };
    let mut kept: Vec<Record<'_>> = Vec::new();
    let mut total = 0;
    let mut tombstones = false;
    for r in records.iter() {
        let r = r.map_err(io::Error::other)?;
        total += 1;
        stats.records_read += 1;
        let Some(key) = r.key else { continue }; // keyless records cannot be compacted; dropped as in Kafka
        let latest = map.get(key);
        let is_latest = latest < 0 || r.offset >= latest;
        let keep = is_latest && (r.value.is_some() || retain_deletes);
        if keep {
            tombstones |= r.value.is_none();
            kept.push(r);
        }
    }
    stats.records_kept += kept.len() as u64;
    let next_offset = last + 1;
    let needs_horizon = batch.is_some() && tombstones && horizon.is_none();
    if kept.len() == total && !needs_horizon {
        return Ok(Some(Kept::Whole));
    }
    let Some(b) = batch else {
        // Legacy entries are rewritten as v2 batches with the surviving records.
        if kept.is_empty() {
            return Ok(None);
        }
        let mut builder = BatchBuilder::new(
            entry.compression().unwrap_or(Compression::None),
            kept[0].offset,
            usize::MAX,
        );
        for r in &kept {
            builder
                .append_with_offset(r.offset, r.timestamp, r.key, r.value, &[])
                .map_err(io::Error::other)?;
        }
        return Ok(Some(Kept::Rebuilt(
            builder.build().map_err(io::Error::other)?.bytes,
        )));
    };
    if kept.is_empty() {
        // The last batch of the pass stays, empty, so the log's offsets stay known.
        if last_of_producer || next_offset == end_offset {
            return Ok(Some(Kept::Rebuilt(empty_like(&b))));
        }
        return Ok(None);
    }
    let mut builder = BatchBuilder::new(
        b.compression().unwrap_or(Compression::None),
        b.base_offset(),
        usize::MAX,
    )
    .producer(b.producer_id(), b.producer_epoch(), b.base_sequence())
    .transactional(b.is_transactional())
    .partition_leader_epoch(b.partition_leader_epoch());
    if let Some(h) = horizon {
        builder = builder.delete_horizon(h);
    } else if tombstones {
        builder = builder.delete_horizon(now_ms.saturating_add(config.delete_retention_ms));
    }
    if b.timestamp_type() == weir_record::TimestampType::LogAppendTime {
        builder = builder.log_append_time(b.max_timestamp());
    }
    let mut headers: Vec<Header<'_>> = Vec::new();
    for r in &kept {
        headers.clear();
        headers.extend(r.headers.iter());
        builder
            .append_with_offset(r.offset, r.timestamp, r.key, r.value, &headers)
            .map_err(io::Error::other)?;
    }
    builder.override_last_offset(b.last_offset());
    Ok(Some(Kept::Rebuilt(
        builder.build().map_err(io::Error::other)?.bytes,
    )))
}

/// What survives of a control batch: a marker still needed stays; one whose transaction is
/// gone gets a delete horizon (`delete.retention.ms` from now, so that consumers reading
/// behind still see it), and goes in a pass after the horizon. The last batch of a pass
/// stays, so the log's offsets stay known. A marker that is its producer's last entry
/// (`last_of_producer`) gets its horizon too, but stays after it, for the epoch it
/// carries: a rebuild of producer state reads the epoch from its record, so it is not
/// emptied as a data batch is.
fn filter_marker(
    b: &RecordBatch<'_>,
    fate: MarkerFate,
    last_of_producer: bool,
    end_offset: i64,
    now_ms: i64,
    config: &crate::config::LogConfig,
) -> Option<Kept> {
    if matches!(fate, MarkerFate::Keep(_)) || b.last_offset() + 1 == end_offset {
        return Some(Kept::Whole);
    }
    match b.delete_horizon_ms() {
        Some(h) if now_ms >= h => last_of_producer.then_some(Kept::Whole),
        Some(_) => Some(Kept::Whole),
        None => Some(
            match with_delete_horizon(b, now_ms.saturating_add(config.delete_retention_ms)) {
                Some(bytes) => Kept::Rebuilt(bytes),
                // A control batch that is not one marker record is kept as it came.
                None => Kept::Whole,
            },
        ),
    }
}

/// The COMMIT or ABORT marker (and its record's timestamp) of a control batch.
fn end_txn_marker_at(b: &RecordBatch<'_>) -> Option<(weir_record::EndTransactionMarker, i64)> {
    let records = b.records(MAX_DECOMPRESSED_BATCH_BYTES).ok()?;
    let r = records.iter().next()?.ok()?;
    let marker = weir_record::EndTransactionMarker::parse(r.key, r.value).ok()?;
    Some((marker, r.timestamp))
}

fn end_txn_marker(b: &RecordBatch<'_>) -> Option<weir_record::EndTransactionMarker> {
    end_txn_marker_at(b).map(|(m, _)| m)
}

/// The control batch `b` again, with a delete horizon.
fn with_delete_horizon(b: &RecordBatch<'_>, horizon_ms: i64) -> Option<Vec<u8>> {
    let (marker, timestamp) = end_txn_marker_at(b)?;
    let mut builder = BatchBuilder::new(Compression::None, b.base_offset(), usize::MAX)
        .producer(b.producer_id(), b.producer_epoch(), b.base_sequence())
        .transactional(true)
        .control(true)
        .partition_leader_epoch(b.partition_leader_epoch())
        .delete_horizon(horizon_ms);
    builder.append_end_txn_marker(timestamp, marker).ok()?;
    builder.override_last_offset(b.last_offset());
    Some(builder.build().ok()?.bytes)
}

/// A header-only batch with `b`'s offsets and producer fields (Kafka's `writeEmptyHeader`).
fn empty_like(b: &RecordBatch<'_>) -> Vec<u8> {
    weir_record::BatchHeader {
        base_offset: b.base_offset(),
        partition_leader_epoch: b.partition_leader_epoch(),
        attributes: weir_record::Attributes::new(
            Compression::None,
            b.timestamp_type(),
            b.is_transactional(),
            false,
            false,
        ),
        last_offset_delta: b.last_offset_delta(),
        base_timestamp: b.base_timestamp(),
        max_timestamp: b.max_timestamp(),
        producer_id: b.producer_id(),
        producer_epoch: b.producer_epoch(),
        base_sequence: b.base_sequence(),
        records_count: 0,
    }
    .empty_batch()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn offset_map_keeps_the_latest_offset_per_key() {
        let mut m = OffsetMap::new(24 * 100);
        for i in 0..80i64 {
            m.put(format!("key-{}", i % 20).as_bytes(), i);
        }
        assert_eq!(m.len(), 20);
        assert_eq!(m.get(b"key-3"), 63);
        assert_eq!(m.get(b"absent"), -1);
        assert_eq!(m.latest_offset(), 79);
        assert!(!m.is_full());
        for i in 20..90 {
            m.put(format!("key-{i}").as_bytes(), i);
        }
        assert!(m.is_full(), "90 of 100 slots is the load factor");
    }
}
