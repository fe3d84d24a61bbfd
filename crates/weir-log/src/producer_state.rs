//! Idempotent-producer state of one partition (Kafka's `ProducerStateManager`): for each
//! producer id, its epoch and the metadata of its last five batches, so that a retried
//! batch is answered with its original offsets instead of being written twice, and a gap
//! in sequence numbers is refused. The state is saved in `<offset>.snapshot` files (Kafka's
//! format) at each roll and at shutdown, and rebuilt after a crash from the latest snapshot
//! plus the batches after it. It reads no log files itself; the partition log feeds it.
//!
//! It also follows the producers' transactions on this partition (Kafka's `ongoingTxns`
//! and `unreplicatedTxns`): a transactional batch opens one at its first offset, the
//! producer's COMMIT or ABORT marker closes it, and until that marker is below the high
//! watermark the transaction still holds the last stable offset back. An ABORT marker
//! gives the entry the segment's `.txnindex` keeps (`CompletedTxn::aborted`).

use std::collections::{BTreeMap, BTreeSet, HashMap, VecDeque};
use std::fs;
use std::io;
use std::path::{Path, PathBuf};

use weir_record::{ControlRecordType, EndTransactionMarker};

use crate::checkpoint::write_atomically;
use crate::error::{LogError, Result};
use crate::segment::{file_name, parse_base_offset, ProducerFields};
use crate::txn_index::AbortedTxn;
use crate::validator::ProducerBatchInfo;

pub const SNAPSHOT_SUFFIX: &str = ".snapshot";
/// Batches remembered per producer: clients keep at most five requests in flight.
pub const NUM_BATCHES_TO_RETAIN: usize = 5;
const SNAPSHOT_VERSION: i16 = 1;
const ENTRY_SIZE: usize = 46;

/// One remembered batch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BatchMetadata {
    pub last_seq: i32,
    pub last_offset: i64,
    pub offset_delta: i32,
    pub timestamp: i64,
}

impl BatchMetadata {
    pub fn first_seq(&self) -> i32 {
        decrement_sequence(self.last_seq, self.offset_delta)
    }
    pub fn first_offset(&self) -> i64 {
        self.last_offset - self.offset_delta as i64
    }
}

/// Sequence arithmetic wraps from i32::MAX to 0, as Kafka's.
fn decrement_sequence(seq: i32, by: i32) -> i32 {
    if seq < by {
        (i32::MAX as i64 - (by as i64 - seq as i64) + 1) as i32
    } else {
        seq - by
    }
}

/// Whether `next_seq` skips past the sequence after `last_seq` (forward, by less than half
/// the sequence space: sequences wrap at `i32::MAX`).
fn ahead(last_seq: i32, next_seq: i32) -> bool {
    let space = i32::MAX as i64 + 1;
    let distance = (next_seq as i64 - last_seq as i64).rem_euclid(space);
    distance > 1 && distance < space / 2
}

fn in_sequence(last_seq: i32, next_seq: i32) -> bool {
    next_seq as i64 == last_seq as i64 + 1 || (next_seq == 0 && last_seq == i32::MAX)
}

/// What the partition knows of one producer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProducerStateEntry {
    pub producer_id: i64,
    pub producer_epoch: i16,
    pub batches: VecDeque<BatchMetadata>,
    pub coordinator_epoch: i32,
    pub current_txn_first_offset: i64,
    pub last_timestamp: i64,
}

impl ProducerStateEntry {
    fn new(producer_id: i64, producer_epoch: i16) -> Self {
        ProducerStateEntry {
            producer_id,
            producer_epoch,
            batches: VecDeque::new(),
            coordinator_epoch: -1,
            current_txn_first_offset: -1,
            last_timestamp: -1,
        }
    }

    pub fn last_seq(&self) -> Option<i32> {
        self.batches.back().map(|b| b.last_seq)
    }

    fn add_batch(&mut self, epoch: i16, meta: BatchMetadata) {
        if epoch != self.producer_epoch {
            self.batches.clear();
            self.producer_epoch = epoch;
        }
        self.batches.push_back(meta);
        while self.batches.len() > NUM_BATCHES_TO_RETAIN {
            self.batches.pop_front();
        }
        self.last_timestamp = self.last_timestamp.max(meta.timestamp);
    }
}

/// The outcome of checking a batch against the producer's state.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SequenceCheck {
    /// Append it.
    Append,
    /// Already appended: answer with these offsets and timestamp, write nothing.
    Duplicate {
        first_offset: i64,
        last_offset: i64,
        timestamp: i64,
    },
}

/// A transaction that a marker closed on this partition (Kafka's `CompletedTxn`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CompletedTxn {
    pub producer_id: i64,
    pub first_offset: i64,
    /// The marker's offset.
    pub last_offset: i64,
    pub is_aborted: bool,
    /// The last stable offset as the marker closed it: the first offset of the oldest
    /// transaction of another producer still open, or the marker's offset + 1.
    pub last_stable_offset: i64,
}

impl CompletedTxn {
    /// The `.txnindex` entry of an aborted transaction.
    pub fn aborted(&self) -> Option<AbortedTxn> {
        self.is_aborted.then_some(AbortedTxn {
            producer_id: self.producer_id,
            first_offset: self.first_offset,
            last_offset: self.last_offset,
            last_stable_offset: self.last_stable_offset,
        })
    }
}

/// All producers of one partition, and the snapshot files that hold them.
#[derive(Debug)]
pub struct ProducerStateManager {
    dir: PathBuf,
    producers: HashMap<i64, ProducerStateEntry>,
    /// The offset up to which the state reflects the log.
    map_end_offset: i64,
    snapshots: BTreeSet<i64>,
    /// Open transactions: first offset -> producer id.
    ongoing: BTreeMap<i64, i64>,
    /// Closed transactions whose marker is not yet below the high watermark: first offset
    /// -> the marker's offset.
    unreplicated: BTreeMap<i64, i64>,
}

impl ProducerStateManager {
    /// Loads the latest readable snapshot at or below `log_end_offset` (later ones are stale
    /// after a truncation and deleted); the caller then replays the log from
    /// `map_end_offset()` on.
    pub fn load(dir: &Path, log_start_offset: i64, log_end_offset: i64) -> Result<Self> {
        let mut snapshots = BTreeSet::new();
        for entry in fs::read_dir(dir)? {
            let name = entry?.file_name().to_string_lossy().into_owned();
            if let Some(off) = name
                .strip_suffix(SNAPSHOT_SUFFIX)
                .and_then(parse_base_offset)
            {
                if name.len() == 20 + SNAPSHOT_SUFFIX.len() {
                    snapshots.insert(off);
                }
            }
        }
        let mut mgr = ProducerStateManager {
            dir: dir.to_path_buf(),
            producers: HashMap::new(),
            map_end_offset: log_start_offset,
            snapshots,
            ongoing: BTreeMap::new(),
            unreplicated: BTreeMap::new(),
        };
        for stale in mgr
            .snapshots
            .range(log_end_offset + 1..)
            .copied()
            .collect::<Vec<_>>()
        {
            mgr.delete_snapshot(stale)?;
        }
        while let Some(&latest) = mgr.snapshots.iter().next_back() {
            match read_snapshot(&mgr.snapshot_path(latest)) {
                Ok(entries) => {
                    mgr.producers = entries.into_iter().map(|e| (e.producer_id, e)).collect();
                    mgr.map_end_offset = latest.max(log_start_offset);
                    for e in mgr.producers.values() {
                        if e.current_txn_first_offset >= 0 {
                            mgr.ongoing
                                .insert(e.current_txn_first_offset, e.producer_id);
                        }
                    }
                    break;
                }
                Err(e) => {
                    tracing::warn!(
                        "{}: {e}; ignoring this producer snapshot",
                        mgr.snapshot_path(latest).display()
                    );
                    mgr.delete_snapshot(latest)?;
                }
            }
        }
        Ok(mgr)
    }

    fn snapshot_path(&self, offset: i64) -> PathBuf {
        self.dir.join(file_name(offset, SNAPSHOT_SUFFIX))
    }

    fn delete_snapshot(&mut self, offset: i64) -> io::Result<()> {
        self.snapshots.remove(&offset);
        match fs::remove_file(self.snapshot_path(offset)) {
            Err(e) if e.kind() != io::ErrorKind::NotFound => Err(e),
            _ => Ok(()),
        }
    }

    pub fn map_end_offset(&self) -> i64 {
        self.map_end_offset
    }
    pub fn producers(&self) -> &HashMap<i64, ProducerStateEntry> {
        &self.producers
    }
    pub fn snapshot_offsets(&self) -> Vec<i64> {
        self.snapshots.iter().copied().collect()
    }

    /// Kafka's checks for an appended batch: a fenced epoch, a new epoch not starting at 0,
    /// a duplicate of a recent batch, or a gap in the sequence.
    pub fn check(&self, batch: &ProducerBatchInfo) -> Result<SequenceCheck> {
        let Some(entry) = self.producers.get(&batch.producer_id) else {
            // Unknown producer (new, or its state expired): any sequence is accepted, as Kafka.
            return Ok(SequenceCheck::Append);
        };
        if batch.producer_epoch < entry.producer_epoch {
            return Err(LogError::InvalidProducerEpoch(format!(
                "producer {} has epoch {}, the partition has seen epoch {}",
                batch.producer_id, batch.producer_epoch, entry.producer_epoch
            )));
        }
        if !batch.transactional && entry.current_txn_first_offset >= 0 {
            return Err(LogError::InvalidTxnState(format!(
                "producer {} has a transaction open on this partition since offset {} and \
                 sent a batch outside it",
                batch.producer_id, entry.current_txn_first_offset
            )));
        }
        if !batch.from_client {
            return Ok(SequenceCheck::Append);
        }
        if batch.producer_epoch > entry.producer_epoch {
            if batch.first_sequence != 0 && entry.producer_epoch >= 0 {
                return Err(LogError::OutOfOrderSequence(format!(
                    "producer {} started epoch {} at sequence {}, not 0",
                    batch.producer_id, batch.producer_epoch, batch.first_sequence
                )));
            }
            return Ok(SequenceCheck::Append);
        }
        if let Some(dup) = entry
            .batches
            .iter()
            .find(|b| b.first_seq() == batch.first_sequence && b.last_seq == batch.last_sequence)
        {
            return Ok(SequenceCheck::Duplicate {
                first_offset: dup.first_offset(),
                last_offset: dup.last_offset,
                timestamp: dup.timestamp,
            });
        }
        match entry.last_seq() {
            Some(last) if ahead(last, batch.first_sequence) => {
                Err(LogError::SequenceAhead(format!(
                    "producer {} sent sequence {} while this partition's last is {}: the \
                     batches between have not arrived yet; send them first",
                    batch.producer_id, batch.first_sequence, last
                )))
            }
            Some(last) if !in_sequence(last, batch.first_sequence) => {
                Err(LogError::OutOfOrderSequence(format!(
                    "producer {} sent sequence {} after {}",
                    batch.producer_id, batch.first_sequence, last
                )))
            }
            _ => Ok(SequenceCheck::Append),
        }
    }

    /// Kafka's checks for a COMMIT or ABORT marker: not from an older producer epoch, nor
    /// from an older coordinator than the last marker's.
    pub fn check_marker(
        &self,
        producer_id: i64,
        producer_epoch: i16,
        marker: &EndTransactionMarker,
    ) -> Result<()> {
        let Some(entry) = self.producers.get(&producer_id) else {
            return Ok(());
        };
        if producer_epoch < entry.producer_epoch {
            return Err(LogError::InvalidProducerEpoch(format!(
                "a {} marker of producer {producer_id} at epoch {producer_epoch}; the partition \
                 has seen epoch {}",
                marker.kind.name(),
                entry.producer_epoch
            )));
        }
        if marker.coordinator_epoch < entry.coordinator_epoch {
            return Err(LogError::TransactionCoordinatorFenced(format!(
                "a {} marker of producer {producer_id} from coordinator epoch {}; the last came \
                 from epoch {}",
                marker.kind.name(),
                marker.coordinator_epoch,
                entry.coordinator_epoch
            )));
        }
        Ok(())
    }

    /// Records an appended COMMIT or ABORT marker at `offset`: the producer's open
    /// transaction on this partition, if it has one, is closed and returned. Control
    /// records of other kinds are not markers and change nothing.
    pub fn complete_txn(
        &mut self,
        producer_id: i64,
        producer_epoch: i16,
        marker: &EndTransactionMarker,
        offset: i64,
        timestamp: i64,
    ) -> Option<CompletedTxn> {
        self.map_end_offset = self.map_end_offset.max(offset + 1);
        if !matches!(
            marker.kind,
            ControlRecordType::Abort | ControlRecordType::Commit
        ) {
            return None;
        }
        let entry = self
            .producers
            .entry(producer_id)
            .or_insert_with(|| ProducerStateEntry::new(producer_id, producer_epoch));
        if producer_epoch > entry.producer_epoch {
            // A marker may carry a newer epoch (a fenced transaction's abort, KIP-890).
            entry.producer_epoch = producer_epoch;
            entry.batches.clear();
        }
        entry.coordinator_epoch = marker.coordinator_epoch;
        entry.last_timestamp = entry.last_timestamp.max(timestamp);
        let first_offset = std::mem::replace(&mut entry.current_txn_first_offset, -1);
        if first_offset < 0 {
            return None;
        }
        let removed = self.ongoing.remove(&first_offset);
        debug_assert_eq!(removed, Some(producer_id), "the open transaction's owner");
        let last_stable_offset = self.ongoing.keys().next().copied().unwrap_or(offset + 1);
        self.unreplicated.insert(first_offset, offset);
        Some(CompletedTxn {
            producer_id,
            first_offset,
            last_offset: offset,
            is_aborted: marker.kind == ControlRecordType::Abort,
            last_stable_offset,
        })
    }

    /// The first offset of the oldest transaction that is open, or closed by a marker not
    /// yet below the high watermark `hw`: the last stable offset cannot pass it.
    pub fn first_unstable_offset(&self, hw: i64) -> Option<i64> {
        let ongoing = self.ongoing.keys().next().copied();
        let unreplicated = self
            .unreplicated
            .iter()
            .find(|(_, marker)| **marker >= hw)
            .map(|(first, _)| *first);
        match (ongoing, unreplicated) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// The high watermark moved to `hw`: closed transactions whose marker is below it no
    /// longer hold the last stable offset back, and are forgotten.
    pub fn on_high_watermark(&mut self, hw: i64) {
        self.unreplicated.retain(|_, marker| *marker >= hw);
    }

    /// The open transactions, by first offset (producer id for each).
    pub fn ongoing_txns(&self) -> &BTreeMap<i64, i64> {
        &self.ongoing
    }

    /// Records an appended batch.
    pub fn update(&mut self, batch: &ProducerBatchInfo) {
        let entry = self
            .producers
            .entry(batch.producer_id)
            .or_insert_with(|| ProducerStateEntry::new(batch.producer_id, batch.producer_epoch));
        if batch.transactional && !batch.control && entry.current_txn_first_offset < 0 {
            entry.current_txn_first_offset = batch.first_offset;
            self.ongoing.insert(batch.first_offset, batch.producer_id);
        }
        entry.add_batch(
            batch.producer_epoch,
            BatchMetadata {
                last_seq: batch.last_sequence,
                last_offset: batch.last_offset,
                offset_delta: (batch.last_offset - batch.first_offset) as i32,
                timestamp: batch.max_timestamp,
            },
        );
        self.map_end_offset = self.map_end_offset.max(batch.last_offset + 1);
    }

    /// Replays a batch found in the log (recovery, or a follower's copy of the leader's),
    /// without checks; `marker` is a control batch's COMMIT or ABORT marker. Returns the
    /// transaction a marker closed.
    pub fn replay(
        &mut self,
        base_offset: i64,
        max_timestamp: i64,
        p: &ProducerFields,
        marker: Option<&EndTransactionMarker>,
    ) -> Option<CompletedTxn> {
        if p.control {
            // Transaction markers carry no sequence.
            let m = marker?;
            return self.complete_txn(
                p.producer_id,
                p.producer_epoch,
                m,
                base_offset,
                max_timestamp,
            );
        }
        let last_seq = if p.base_sequence < 0 {
            p.base_sequence
        } else {
            ((p.base_sequence as i64 + p.last_offset_delta as i64) % (i32::MAX as i64 + 1)) as i32
        };
        self.update(&ProducerBatchInfo {
            producer_id: p.producer_id,
            producer_epoch: p.producer_epoch,
            first_sequence: p.base_sequence,
            last_sequence: last_seq,
            first_offset: base_offset,
            last_offset: base_offset + p.last_offset_delta as i64,
            max_timestamp,
            transactional: p.transactional,
            control: p.control,
            from_client: false,
        });
        None
    }

    /// Notes that the log now reaches `offset` (batches without producers move it too).
    pub fn advance_to(&mut self, offset: i64) {
        self.map_end_offset = self.map_end_offset.max(offset);
    }

    /// Writes `<offset>.snapshot` with the current state (at a roll or a clean shutdown),
    /// unless the log has not moved past the newest snapshot (or, with none, past 0), as
    /// Kafka skips it: an empty partition has no snapshot, as in Kafka's directories.
    pub fn take_snapshot(&mut self, offset: i64) -> Result<()> {
        if offset <= self.snapshots.iter().next_back().copied().unwrap_or(0) {
            return Ok(());
        }
        let mut body = Vec::with_capacity(4 + self.producers.len() * ENTRY_SIZE);
        let mut entries: Vec<&ProducerStateEntry> = self
            .producers
            .values()
            // A producer known only by a marker keeps its coordinator epoch.
            .filter(|e| !e.batches.is_empty() || e.coordinator_epoch >= 0)
            .collect();
        entries.sort_by_key(|e| e.producer_id);
        body.extend_from_slice(&(entries.len() as i32).to_be_bytes());
        for e in entries {
            let last = e.batches.back().copied().unwrap_or(BatchMetadata {
                last_seq: -1,
                last_offset: -1,
                offset_delta: 0,
                timestamp: -1,
            });
            body.extend_from_slice(&e.producer_id.to_be_bytes());
            body.extend_from_slice(&e.producer_epoch.to_be_bytes());
            body.extend_from_slice(&last.last_seq.to_be_bytes());
            body.extend_from_slice(&last.last_offset.to_be_bytes());
            body.extend_from_slice(&last.offset_delta.to_be_bytes());
            // The producer's last write (Kafka's `lastTimestamp`), which expiry goes by; a
            // producer known only by a marker has no batch to take it from.
            body.extend_from_slice(&e.last_timestamp.to_be_bytes());
            body.extend_from_slice(&e.coordinator_epoch.to_be_bytes());
            body.extend_from_slice(&e.current_txn_first_offset.to_be_bytes());
        }
        let mut file = Vec::with_capacity(6 + body.len());
        file.extend_from_slice(&SNAPSHOT_VERSION.to_be_bytes());
        file.extend_from_slice(&crc32c::crc32c(&body).to_be_bytes());
        file.extend_from_slice(&body);
        write_atomically(&self.snapshot_path(offset), &file)?;
        self.snapshots.insert(offset);
        Ok(())
    }

    /// Drops producers whose last write is older than `expiration_ms`
    /// (`producer.id.expiration.ms`).
    pub fn remove_expired(&mut self, now_ms: i64, expiration_ms: i64) -> usize {
        let before = self.producers.len();
        self.producers.retain(|_, e| {
            e.current_txn_first_offset >= 0 || now_ms - e.last_timestamp <= expiration_ms
        });
        before - self.producers.len()
    }

    /// Deletes snapshots below `offset` (the log start moved past them), keeping the newest.
    pub fn delete_snapshots_before(&mut self, offset: i64) -> Result<()> {
        let newest = self.snapshots.iter().next_back().copied();
        for s in self.snapshots.range(..offset).copied().collect::<Vec<_>>() {
            if Some(s) != newest {
                self.delete_snapshot(s)?;
            }
        }
        Ok(())
    }

    /// Forgets everything and deletes every snapshot (the log was emptied).
    pub fn truncate_fully(&mut self, offset: i64) -> Result<()> {
        for s in self.snapshots.clone() {
            self.delete_snapshot(s)?;
        }
        self.producers.clear();
        self.ongoing.clear();
        self.unreplicated.clear();
        self.map_end_offset = offset;
        Ok(())
    }
}

/// Reads a `.snapshot` file (for tools; the manager uses it at load).
pub fn read_snapshot(path: &Path) -> io::Result<Vec<ProducerStateEntry>> {
    let bad = |m: &str| io::Error::new(io::ErrorKind::InvalidData, m.to_string());
    let data = fs::read(path)?;
    if data.len() < 10 {
        return Err(bad("snapshot too short"));
    }
    let version = i16::from_be_bytes([data[0], data[1]]);
    if version != SNAPSHOT_VERSION {
        return Err(bad(&format!("unsupported snapshot version {version}")));
    }
    let crc = u32::from_be_bytes([data[2], data[3], data[4], data[5]]);
    if crc != crc32c::crc32c(&data[6..]) {
        return Err(bad("snapshot CRC mismatch"));
    }
    let count = i32::from_be_bytes([data[6], data[7], data[8], data[9]]);
    let entries = &data[10..];
    if count < 0 || entries.len() != count as usize * ENTRY_SIZE {
        return Err(bad("snapshot size does not match its entry count"));
    }
    let mut out = Vec::with_capacity(count as usize);
    for e in entries.chunks_exact(ENTRY_SIZE) {
        let i64_at = |at: usize| i64::from_be_bytes(e[at..at + 8].try_into().unwrap_or_default());
        let i32_at = |at: usize| i32::from_be_bytes(e[at..at + 4].try_into().unwrap_or_default());
        let mut entry = ProducerStateEntry::new(i64_at(0), i16::from_be_bytes([e[8], e[9]]));
        let meta = BatchMetadata {
            last_seq: i32_at(10),
            last_offset: i64_at(14),
            offset_delta: i32_at(22),
            timestamp: i64_at(26),
        };
        entry.coordinator_epoch = i32_at(34);
        entry.current_txn_first_offset = i64_at(38);
        if meta.last_offset >= 0 {
            entry.batches.push_back(meta);
        }
        entry.last_timestamp = meta.timestamp;
        out.push(entry);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn batch(pid: i64, epoch: i16, first_seq: i32, n: i32, first_offset: i64) -> ProducerBatchInfo {
        ProducerBatchInfo {
            producer_id: pid,
            producer_epoch: epoch,
            first_sequence: first_seq,
            last_sequence: first_seq + n - 1,
            first_offset,
            last_offset: first_offset + n as i64 - 1,
            max_timestamp: 1000 + first_offset,
            transactional: false,
            control: false,
            from_client: true,
        }
    }

    fn marker(kind: ControlRecordType, coordinator_epoch: i32) -> EndTransactionMarker {
        EndTransactionMarker {
            kind,
            coordinator_epoch,
        }
    }

    #[test]
    fn transactions_open_close_and_hold_the_stable_offset_back() {
        use ControlRecordType::{Abort, Commit};
        let dir = tempfile::tempdir().unwrap();
        let mut m = ProducerStateManager::load(dir.path(), 0, 0).unwrap();
        let tx = |pid, seq, first, n| ProducerBatchInfo {
            transactional: true,
            ..batch(pid, 0, seq, n, first)
        };
        m.update(&tx(1, 0, 0, 5)); // 0..=4
        m.update(&tx(2, 0, 5, 3)); // 5..=7
        m.update(&tx(1, 5, 8, 2)); // 8..=9, the same transaction
        assert_eq!(m.ongoing_txns(), &BTreeMap::from([(0, 1), (5, 2)]));
        assert_eq!(m.first_unstable_offset(10), Some(0));
        assert!(matches!(
            m.check(&batch(1, 0, 7, 1, 10)),
            Err(LogError::InvalidTxnState(_))
        ));

        // pid 1 aborts at 10 while pid 2's transaction from 5 is open.
        let done = m.complete_txn(1, 0, &marker(Abort, 3), 10, 2000).unwrap();
        assert_eq!(
            done,
            CompletedTxn {
                producer_id: 1,
                first_offset: 0,
                last_offset: 10,
                is_aborted: true,
                last_stable_offset: 5,
            }
        );
        assert_eq!(done.aborted().unwrap().last_stable_offset, 5);
        // Until the marker is below the high watermark, the transaction holds the LSO.
        assert_eq!(m.first_unstable_offset(10), Some(0));
        m.on_high_watermark(11);
        assert_eq!(m.first_unstable_offset(11), Some(5));
        // A marker for a producer with nothing open closes nothing.
        assert_eq!(m.complete_txn(1, 0, &marker(Commit, 3), 11, 2001), None);
        // An older coordinator is fenced; an older producer epoch is refused.
        assert!(matches!(
            m.check_marker(1, 0, &marker(Commit, 2)),
            Err(LogError::TransactionCoordinatorFenced(_))
        ));
        m.update(&batch(1, 1, 0, 1, 12));
        assert!(matches!(
            m.check_marker(1, 0, &marker(Commit, 3)),
            Err(LogError::InvalidProducerEpoch(_))
        ));
        assert!(m.check_marker(1, 1, &marker(Commit, 3)).is_ok());

        // pid 2 commits: nothing for the aborted index, and the log is stable once replicated.
        let done = m.complete_txn(2, 0, &marker(Commit, 3), 13, 2002).unwrap();
        assert_eq!((done.is_aborted, done.last_stable_offset), (false, 14));
        assert_eq!(done.aborted(), None);
        assert_eq!(m.first_unstable_offset(11), Some(5));
        m.on_high_watermark(14);
        assert_eq!(m.first_unstable_offset(14), None);

        // An open transaction and a coordinator epoch survive a snapshot.
        m.update(&tx(3, 0, 14, 2));
        m.take_snapshot(16).unwrap();
        // Nothing new since the newest snapshot: none is written, as in Kafka.
        m.take_snapshot(16).unwrap();
        m.take_snapshot(12).unwrap();
        assert_eq!(m.snapshot_offsets(), vec![16]);
        let loaded = ProducerStateManager::load(dir.path(), 0, 16).unwrap();
        assert_eq!(loaded.ongoing_txns(), &BTreeMap::from([(14, 3)]));
        assert_eq!(loaded.first_unstable_offset(16), Some(14));
        assert_eq!(loaded.producers()[&2].coordinator_epoch, 3);
        assert!(matches!(
            loaded.check_marker(2, 0, &marker(Abort, 1)),
            Err(LogError::TransactionCoordinatorFenced(_))
        ));
    }

    #[test]
    fn duplicates_gaps_and_epochs() {
        let dir = tempfile::tempdir().unwrap();
        let mut m = ProducerStateManager::load(dir.path(), 0, 0).unwrap();
        assert_eq!(
            m.check(&batch(7, 0, 0, 5, 0)).unwrap(),
            SequenceCheck::Append
        );
        m.update(&batch(7, 0, 0, 5, 0));
        m.update(&batch(7, 0, 5, 5, 10));
        // A retry of either recent batch is a duplicate with its original offsets.
        assert_eq!(
            m.check(&batch(7, 0, 0, 5, 99)).unwrap(),
            SequenceCheck::Duplicate {
                first_offset: 0,
                last_offset: 4,
                timestamp: 1000
            }
        );
        assert_eq!(
            m.check(&batch(7, 0, 5, 5, 99)).unwrap(),
            SequenceCheck::Duplicate {
                first_offset: 10,
                last_offset: 14,
                timestamp: 1010
            }
        );
        assert_eq!(
            m.check(&batch(7, 0, 10, 1, 99)).unwrap(),
            SequenceCheck::Append
        );
        assert!(matches!(
            m.check(&batch(7, 0, 12, 1, 99)),
            Err(LogError::SequenceAhead(_))
        ));
        assert!(matches!(
            m.check(&batch(7, 0, 2, 1, 99)),
            Err(LogError::OutOfOrderSequence(_))
        ));
        assert!(ahead(i32::MAX - 1, 3), "across the wrap");
        assert!(!ahead(i32::MAX, 0) && !ahead(5, 6) && !ahead(5, 4));
        assert!(matches!(
            m.check(&batch(7, -1, 10, 1, 99)),
            Err(LogError::InvalidProducerEpoch(_))
        ));
        assert!(matches!(
            m.check(&batch(7, 1, 3, 1, 99)),
            Err(LogError::OutOfOrderSequence(_))
        ));
        assert_eq!(
            m.check(&batch(7, 1, 0, 1, 99)).unwrap(),
            SequenceCheck::Append
        );
        // Unknown producers may start anywhere.
        assert_eq!(
            m.check(&batch(8, 3, 400, 1, 99)).unwrap(),
            SequenceCheck::Append
        );
        // Only the last five batches are remembered.
        for i in 2..8 {
            m.update(&batch(7, 0, i * 5, 5, i as i64 * 10));
        }
        assert_eq!(
            m.check(&batch(7, 0, 5, 5, 0))
                .unwrap_err()
                .kafka_error_code(),
            45
        );
    }

    #[test]
    fn sequences_wrap_at_int_max() {
        assert!(in_sequence(i32::MAX, 0));
        assert_eq!(decrement_sequence(2, 5), i32::MAX - 2);
        let b = BatchMetadata {
            last_seq: 1,
            last_offset: 10,
            offset_delta: 3,
            timestamp: 0,
        };
        assert_eq!(b.first_seq(), i32::MAX - 1);
    }

    #[test]
    fn snapshots_round_trip_and_stale_ones_go() {
        let dir = tempfile::tempdir().unwrap();
        let mut m = ProducerStateManager::load(dir.path(), 0, 0).unwrap();
        m.update(&batch(7, 2, 0, 5, 0));
        m.update(&batch(9, 0, 100, 3, 5));
        m.take_snapshot(8).unwrap();
        m.update(&batch(7, 2, 5, 1, 8));
        m.take_snapshot(9).unwrap();
        assert!(dir.path().join("00000000000000000008.snapshot").exists());
        // The log was truncated to 8: snapshot 9 is stale.
        let m2 = ProducerStateManager::load(dir.path(), 0, 8).unwrap();
        assert_eq!(m2.map_end_offset(), 8);
        assert!(!dir.path().join("00000000000000000009.snapshot").exists());
        assert_eq!(m2.producers()[&7].producer_epoch, 2);
        assert_eq!(m2.producers()[&7].last_seq(), Some(4));
        assert_eq!(m2.producers()[&9].last_seq(), Some(102));
        // A damaged snapshot is ignored, not fatal.
        std::fs::write(
            dir.path().join("00000000000000000008.snapshot"),
            b"garbage!!!!!",
        )
        .unwrap();
        let m3 = ProducerStateManager::load(dir.path(), 0, 8).unwrap();
        assert!(m3.producers().is_empty());
    }
}
