//! The leader-epoch cache (Kafka's `LeaderEpochFileCache`): which offset each leader epoch
//! started at, persisted in `leader-epoch-checkpoint`. It answers OffsetForLeaderEpoch
//! (where did epoch N end?) and is trimmed with the log at both ends.

use std::io;
use std::path::PathBuf;

use crate::checkpoint;

pub const UNDEFINED_EPOCH: i32 = -1;
pub const UNDEFINED_EPOCH_OFFSET: i64 = -1;
pub const CHECKPOINT_FILE: &str = "leader-epoch-checkpoint";

/// (epoch, start offset) pairs, epochs and offsets both increasing.
#[derive(Debug)]
pub struct LeaderEpochCache {
    path: PathBuf,
    entries: Vec<(i32, i64)>,
}

impl LeaderEpochCache {
    /// Loads the checkpoint in `dir` (empty if there is none).
    pub fn load(dir: &std::path::Path) -> io::Result<Self> {
        let path = dir.join(CHECKPOINT_FILE);
        let mut entries = checkpoint::read_epochs(&path)?;
        // Keep only a strictly increasing chain; anything else is damage we can rebuild.
        entries.dedup_by(|b, a| b.0 <= a.0 || b.1 < a.1);
        Ok(LeaderEpochCache { path, entries })
    }

    /// An empty cache that writes to `dir` (used while rebuilding during recovery).
    pub fn empty(dir: &std::path::Path) -> Self {
        LeaderEpochCache {
            path: dir.join(CHECKPOINT_FILE),
            entries: Vec::new(),
        }
    }

    pub fn entries(&self) -> &[(i32, i64)] {
        &self.entries
    }

    pub fn latest_epoch(&self) -> Option<i32> {
        self.entries.last().map(|e| e.0)
    }

    /// Records that `epoch` starts at `start_offset` (no-op for an epoch already known or
    /// a negative one). Later entries that conflict are dropped. Returns whether it changed.
    pub fn assign(&mut self, epoch: i32, start_offset: i64) -> bool {
        if epoch < 0 {
            return false;
        }
        if let Some(&(last_epoch, _)) = self.entries.last() {
            if epoch <= last_epoch {
                return false;
            }
        }
        self.entries.retain(|&(_, o)| o < start_offset);
        self.entries.push((epoch, start_offset));
        true
    }

    /// Removes entries starting at or after `end_offset` (log truncated from the end).
    pub fn truncate_from_end(&mut self, end_offset: i64) -> bool {
        let before = self.entries.len();
        self.entries.retain(|&(_, o)| o < end_offset);
        before != self.entries.len()
    }

    /// Drops entries wholly below `start_offset`; the entry covering it now starts there.
    pub fn truncate_from_start(&mut self, start_offset: i64) -> bool {
        let covering = self.entries.iter().rposition(|&(_, o)| o <= start_offset);
        match covering {
            Some(i) if i > 0 || self.entries[0].1 < start_offset => {
                self.entries.drain(..i);
                self.entries[0].1 = start_offset;
                true
            }
            _ => false,
        }
    }

    /// OffsetForLeaderEpoch: the largest epoch ≤ `requested` and the offset where it ended
    /// (the next epoch's start, or the log end for the latest). Unknown: (-1, -1).
    pub fn end_offset_for(&self, requested: i32, log_end_offset: i64) -> (i32, i64) {
        match self.entries.iter().rposition(|&(e, _)| e <= requested) {
            None => (UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET),
            Some(i) => {
                let end = self.entries.get(i + 1).map_or(log_end_offset, |&(_, o)| o);
                (self.entries[i].0, end)
            }
        }
    }

    /// Writes the checkpoint file.
    pub fn flush(&self) -> io::Result<()> {
        checkpoint::write_epochs(&self.path, &self.entries)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn assign_truncate_and_end_offsets() {
        let dir = tempfile::tempdir().unwrap();
        let mut c = LeaderEpochCache::load(dir.path()).unwrap();
        assert!(c.assign(0, 0));
        assert!(!c.assign(0, 10));
        assert!(c.assign(2, 100));
        assert!(c.assign(5, 300));
        assert_eq!(c.end_offset_for(0, 500), (0, 100));
        assert_eq!(c.end_offset_for(3, 500), (2, 300));
        assert_eq!(c.end_offset_for(5, 500), (5, 500));
        assert_eq!(c.end_offset_for(9, 500), (5, 500));
        c.flush().unwrap();
        let c2 = LeaderEpochCache::load(dir.path()).unwrap();
        assert_eq!(c2.entries(), c.entries());
        c.truncate_from_end(300);
        assert_eq!(c.entries(), &[(0, 0), (2, 100)]);
        c.truncate_from_start(150);
        assert_eq!(c.entries(), &[(2, 150)]);
    }
}
