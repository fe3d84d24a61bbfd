//! Kafka's sparse segment indexes, memory-mapped: `.index` (relative offset i32, file
//! position i32) and `.timeindex` (timestamp i64, relative offset i32), big-endian.
//! A new index file is preallocated to `segment.index.bytes` (rounded down to whole
//! entries) and trimmed to its entries when its segment stops being active; an existing
//! file's length tells how many entries it holds. This module knows nothing of the log
//! file: it stores and searches entries, and says when an index cannot be trusted.
//! An index holds no descriptor: its mapping stays valid without one, and the file is
//! opened by path for a moment only for what a mapping cannot do (resize, fallocate,
//! fsync, reading past the mapping).
//!
//! Not done yet: mapping the indexes of old segments lazily, as Kafka does (KAFKA-7283,
//! `LazyIndex`). Every non-empty index is mapped when its segment loads, two mappings per
//! segment, so `vm.max_map_count` (65530 by default) bounds a broker to about 32,000
//! segments. Mapping on first lookup needs `entry` to read through `&self` and to survive
//! a mapping refused (ENOMEM, EMFILE), i.e. entries read by value with a fallback to
//! `pread`; that reaches every lookup and is left for a change of its own.

use std::fs::{File, OpenOptions};
use std::io;
use std::path::{Path, PathBuf};

use memmap2::MmapMut;

/// Kafka searches the most recent 8 KiB of entries first: lookups from consumers near the
/// tail stay within pages that are already in memory.
const WARM_BYTES: usize = 8192;

/// The file and mapping shared by both index kinds.
#[derive(Debug)]
struct IndexFile {
    path: PathBuf,
    mmap: Option<MmapMut>,
    entry_size: usize,
    entries: usize,
    /// Capacity in entries: the mapped length / entry size.
    max_entries: usize,
    /// The file was found with a length that is not a whole number of entries.
    partial_entry: bool,
    /// Bytes from the start known to have disk blocks (see `reserve`).
    allocated: usize,
    /// Tests: the file opens read-only, so that changing its length fails.
    #[cfg(test)]
    read_only: bool,
}

/// The unit in which index files get their disk blocks ahead of entries.
const PAGE: usize = 4096;

impl IndexFile {
    /// Opens or creates an index. A new file is preallocated to `max_index_size`; an
    /// existing one keeps its entries and, if `active`, is grown back to that size.
    fn open(path: &Path, max_index_size: u32, entry_size: usize, active: bool) -> io::Result<Self> {
        // The descriptor lives only as long as this call: the mapping does not need it.
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(path)?;
        let len = file.metadata()?.len() as usize;
        let new_file = len == 0;
        let entries = len / entry_size;
        let capacity = (max_index_size as usize / entry_size) * entry_size;
        let mut index = IndexFile {
            path: path.to_path_buf(),
            mmap: None,
            entry_size,
            entries: if new_file { 0 } else { entries },
            max_entries: 0,
            partial_entry: !len.is_multiple_of(entry_size),
            allocated: 0,
            #[cfg(test)]
            read_only: false,
        };
        // Pages holding entries have blocks; the one the next entry goes to may not.
        index.allocated = index.entries * entry_size / PAGE * PAGE;
        if new_file || active {
            let result = index.remap_at(&file, capacity.max(index.entries * entry_size));
            index.forget_if_unmapped();
            result?;
        } else {
            index.map(&file, len - len % entry_size)?;
        }
        Ok(index)
    }

    /// The file's length was not a whole number of entries when opened (a torn write).
    fn has_partial_entry(&self) -> bool {
        self.partial_entry
    }

    /// Opens the file for a moment, by path (see the module's note).
    fn open_file(&self) -> io::Result<File> {
        #[cfg(test)]
        if self.read_only {
            return File::open(&self.path);
        }
        OpenOptions::new().read(true).write(true).open(&self.path)
    }

    fn map(&mut self, file: &File, len: usize) -> io::Result<()> {
        self.mmap = None;
        if len > 0 {
            // SAFETY: the file is ours (the log directory is locked against other
            // processes), and we only change its length after dropping this mapping. The
            // mapping outlives `file`: a mapping keeps its file, not its descriptor.
            let mmap = unsafe { memmap2::MmapOptions::new().len(len).map_mut(file)? };
            // Entries are appended a few bytes at a time and looked up by binary search:
            // read-ahead only fills (and zeroes) pages of a preallocated, mostly empty file.
            // Without this, the first append to each of 1,000 partitions' indexes faulted in
            // a large folio per file, and that page zeroing dominated the broker's CPU.
            #[cfg(unix)]
            let _ = mmap.advise(memmap2::Advice::Random);
            self.mmap = Some(mmap);
        }
        self.max_entries = len / self.entry_size;
        Ok(())
    }

    /// Sets the file length (whole entries), keeping as many entries as fit. A file that
    /// cannot be opened leaves the index as it was.
    fn resize(&mut self, len: usize) -> io::Result<()> {
        let file = self.open_file()?;
        let result = self.remap_at(&file, len);
        self.forget_if_unmapped();
        result
    }

    fn remap_at(&mut self, file: &File, len: usize) -> io::Result<()> {
        let len = len - len % self.entry_size;
        if let Some(m) = &self.mmap {
            m.flush()?;
        }
        self.mmap = None;
        file.set_len(len as u64)?;
        self.allocated = self.allocated.min(len);
        self.map(file, len)?;
        self.entries = self.entries.min(self.max_entries);
        Ok(())
    }

    fn entry(&self, n: usize) -> &[u8] {
        debug_assert!(n < self.entries);
        let m = self
            .mmap
            .as_ref()
            .expect("an index with entries is mapped (see forget_if_unmapped)");
        &m[n * self.entry_size..(n + 1) * self.entry_size]
    }

    /// The last entry, read from the file rather than through the mapping. For the sanity
    /// checks of an index found after a crash: at its preallocated length, its last
    /// "entry" lies in a hole, and on tmpfs a fault on a hole takes a page, which a full
    /// disk answers with SIGBUS. A read of a hole takes nothing. `None` if unreadable.
    fn last_entry_from_file(&self) -> Option<Vec<u8>> {
        self.entry_from_file(self.entries.checked_sub(1)?)
    }

    /// Entry `n`, read from the file (see `last_entry_from_file`).
    fn entry_from_file(&self, n: usize) -> Option<Vec<u8>> {
        use std::os::unix::fs::FileExt;
        let mut e = vec![0u8; self.entry_size];
        File::open(&self.path)
            .ok()?
            .read_exact_at(&mut e, (n * self.entry_size) as u64)
            .ok()?;
        Some(e)
    }

    fn push(&mut self, bytes: &[u8]) -> io::Result<()> {
        debug_assert!(self.entries < self.max_entries);
        let at = self.entries * self.entry_size;
        self.reserve(at + self.entry_size)?;
        let m = self
            .mmap
            .as_mut()
            .expect("an index with room is mapped (see forget_if_unmapped)");
        m[at..at + self.entry_size].copy_from_slice(bytes);
        self.entries += 1;
        Ok(())
    }

    /// Gives the file disk blocks up to `end` (whole pages) before entries are stored there
    /// through the mapping. Index files are preallocated sparse, as Kafka's are, so that a
    /// thousand partitions do not take 20 GB of disk for indexes; but a store into a hole of
    /// a mapped file on a full disk kills the process with SIGBUS. Reserving the blocks
    /// first turns a full disk into an error for this one append instead. One system call
    /// per page of entries.
    fn reserve(&mut self, end: usize) -> io::Result<()> {
        if end <= self.allocated {
            return Ok(());
        }
        let from = self.allocated;
        let to = end
            .next_multiple_of(PAGE)
            .min(self.max_entries * self.entry_size)
            .max(end);
        let file = self.open_file()?;
        #[cfg(target_os = "linux")]
        {
            use std::os::fd::AsRawFd;
            // SAFETY: fallocate on a descriptor `file` owns for this call; no memory is passed.
            let r = unsafe {
                libc::fallocate(
                    file.as_raw_fd(),
                    0,
                    from as libc::off_t,
                    (to - from) as libc::off_t,
                )
            };
            if r == 0 {
                self.allocated = to;
                return Ok(());
            }
            let e = io::Error::last_os_error();
            if !matches!(
                e.raw_os_error(),
                Some(libc::EOPNOTSUPP) | Some(libc::ENOSYS)
            ) {
                return Err(e);
            }
        }
        // Without fallocate: write the zeros the region holds (past the last entry, so no
        // entry is overwritten), which allocates the blocks or fails with the disk full.
        use std::os::unix::fs::FileExt;
        let data_end = (self.entries * self.entry_size).max(from);
        file.write_all_at(&vec![0u8; to - data_end], data_end as u64)?;
        self.allocated = to;
        Ok(())
    }

    /// Drops every entry by cutting the file to nothing and back to its length: the kernel
    /// discards the pages, and the file reads as zeros. (Zeroing them through the mapping
    /// instead dirtied the whole preallocated file — 10 MB per index after an unclean
    /// shutdown — and then wrote it all back to disk.)
    fn clear(&mut self) -> io::Result<()> {
        let result = self.clear_and_remap();
        self.forget_if_unmapped();
        result
    }

    fn clear_and_remap(&mut self) -> io::Result<()> {
        let file = self.open_file()?;
        let len = file.metadata()?.len();
        self.mmap = None;
        file.set_len(0)?;
        file.set_len(len)?;
        self.allocated = 0;
        self.map(&file, len as usize - len as usize % self.entry_size)?;
        self.entries = 0;
        self.partial_entry = false;
        Ok(())
    }

    /// Keeps `entry` and `push` from ever meeting an index without a mapping. A resize or
    /// clear that fails after dropping the mapping (a file that cannot change length, an
    /// mmap refused) leaves none: the index then forgets its entries and its room. Lookups
    /// fall back to the segment's start and scan (slower, still right), appends fail as if
    /// the index were full (the segment rolls), and its disk blocks count as unallocated.
    /// Without a mapping all three are already 0 after a success.
    fn forget_if_unmapped(&mut self) {
        if self.mmap.is_none() {
            self.entries = 0;
            self.max_entries = 0;
            self.allocated = 0;
        }
    }

    /// Drops entries from `n` on, zeroing them so the file shows no stale entries.
    fn truncate_entries(&mut self, n: usize) {
        if n >= self.entries {
            return;
        }
        if let Some(m) = self.mmap.as_mut() {
            m[n * self.entry_size..self.entries * self.entry_size].fill(0);
        }
        self.entries = n;
    }

    fn flush(&self) -> io::Result<()> {
        if let Some(m) = &self.mmap {
            m.flush()?;
        }
        // Also makes a length changed by a resize durable, which msync does not.
        crate::durable::sync_all(&File::open(&self.path)?, &self.path)
    }

    fn size_in_bytes(&self) -> usize {
        self.entries * self.entry_size
    }

    fn rename(&mut self, to: &Path) -> io::Result<()> {
        std::fs::rename(&self.path, to)?;
        self.path = to.to_path_buf();
        Ok(())
    }

    /// Binary search for the last entry whose key is ≤ `target` (keys must increase);
    /// the warm tail of the index is searched first.
    fn largest_lower_bound(&self, target: i64, key: impl Fn(&[u8]) -> i64) -> Option<usize> {
        if self.entries == 0 || key(self.entry(0)) > target {
            return None;
        }
        let warm_entries = (WARM_BYTES / self.entry_size).max(1);
        let first_warm = self.entries.saturating_sub(warm_entries);
        let (mut lo, mut hi) = if key(self.entry(first_warm)) <= target {
            (first_warm, self.entries - 1)
        } else {
            (0, first_warm)
        };
        // Invariant: key(lo) <= target; the answer is in [lo, hi].
        while lo < hi {
            let mid = lo + (hi - lo).div_ceil(2);
            if key(self.entry(mid)) <= target {
                lo = mid;
            } else {
                hi = mid - 1;
            }
        }
        Some(lo)
    }
}

/// Why an existing index file cannot be trusted; the segment is then recovered.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("corrupt index {path}: {reason}")]
pub struct CorruptIndex {
    pub path: String,
    pub reason: String,
}

fn rel(base: i64, offset: i64) -> i32 {
    debug_assert!((0..=i32::MAX as i64).contains(&(offset - base)));
    (offset - base) as i32
}

/// The `.index` file of a segment: offset → file position.
#[derive(Debug)]
pub struct OffsetIndex {
    inner: IndexFile,
    base_offset: i64,
}

/// An offset and the position of the batch that holds it (or precedes it).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OffsetPosition {
    pub offset: i64,
    pub position: u32,
}

impl OffsetIndex {
    pub const ENTRY_SIZE: usize = 8;

    pub fn open(
        path: &Path,
        base_offset: i64,
        max_index_size: u32,
        active: bool,
    ) -> io::Result<Self> {
        Ok(OffsetIndex {
            inner: IndexFile::open(path, max_index_size, Self::ENTRY_SIZE, active)?,
            base_offset,
        })
    }

    fn read(&self, n: usize) -> OffsetPosition {
        let e = self.inner.entry(n);
        OffsetPosition {
            offset: self.base_offset + i32::from_be_bytes([e[0], e[1], e[2], e[3]]) as i64,
            position: u32::from_be_bytes([e[4], e[5], e[6], e[7]]),
        }
    }

    pub fn entries(&self) -> usize {
        self.inner.entries
    }
    pub fn entry(&self, n: usize) -> OffsetPosition {
        self.read(n)
    }
    pub fn is_full(&self) -> bool {
        self.inner.entries >= self.inner.max_entries
    }
    pub fn last_offset(&self) -> i64 {
        if self.inner.entries == 0 {
            self.base_offset
        } else {
            self.read(self.inner.entries - 1).offset
        }
    }
    pub fn size_in_bytes(&self) -> usize {
        self.inner.size_in_bytes()
    }
    pub fn path(&self) -> &Path {
        &self.inner.path
    }

    /// Adds an entry; offsets must strictly increase.
    pub fn append(&mut self, offset: i64, position: u32) -> io::Result<()> {
        if self.is_full() {
            return Err(io::Error::other(format!(
                "offset index {} is full ({} entries)",
                self.inner.path.display(),
                self.inner.entries
            )));
        }
        if self.inner.entries > 0 && offset <= self.last_offset() {
            return Err(io::Error::other(format!(
                "offset index {}: offset {offset} is not above the last entry {}",
                self.inner.path.display(),
                self.last_offset()
            )));
        }
        let mut e = [0u8; 8];
        e[..4].copy_from_slice(&rel(self.base_offset, offset).to_be_bytes());
        e[4..].copy_from_slice(&position.to_be_bytes());
        self.inner.push(&e)
    }

    /// The last entry at or below `target`, or (base offset, 0).
    /// The offset of the first entry at or after `position` (Kafka's
    /// `fetchUpperBoundOffset`): no batch of a fetch that ends before `position` reaches it.
    /// `None` when no entry is that far into the segment.
    pub fn fetch_upper_bound_offset(&self, position: u64) -> Option<i64> {
        let n = self.entries();
        let (mut lo, mut hi) = (0, n);
        while lo < hi {
            let mid = lo + (hi - lo) / 2;
            if (self.entry(mid).position as u64) < position {
                lo = mid + 1;
            } else {
                hi = mid;
            }
        }
        (lo < n).then(|| self.entry(lo).offset)
    }

    pub fn lookup(&self, target: i64) -> OffsetPosition {
        let base = self.base_offset;
        match self.inner.largest_lower_bound(target, |e| {
            base + i32::from_be_bytes([e[0], e[1], e[2], e[3]]) as i64
        }) {
            Some(n) => self.read(n),
            None => OffsetPosition {
                offset: base,
                position: 0,
            },
        }
    }

    /// Keeps the first `n` entries only.
    pub fn truncate_to_entries(&mut self, n: usize) {
        self.inner.truncate_entries(n);
    }

    /// Removes every entry for an offset ≥ `offset`.
    pub fn truncate_to(&mut self, offset: i64) {
        let keep = match self.inner.largest_lower_bound(offset, |e| {
            self.base_offset + i32::from_be_bytes([e[0], e[1], e[2], e[3]]) as i64
        }) {
            None => 0,
            Some(n) if self.read(n).offset == offset => n,
            Some(n) => n + 1,
        };
        self.inner.truncate_entries(keep);
    }

    /// Removes every entry (before a rebuild).
    pub fn reset(&mut self) -> io::Result<()> {
        self.inner.clear()
    }

    /// Kafka's sanity check for an index that was already on disk.
    pub fn sanity_check(&self) -> Result<(), CorruptIndex> {
        let corrupt = |reason: String| CorruptIndex {
            path: self.inner.path.display().to_string(),
            reason,
        };
        if self.inner.has_partial_entry() {
            return Err(corrupt("length is not a multiple of 8".into()));
        }
        if let Some(e) = self.inner.last_entry_from_file() {
            let last = self.base_offset + i32::from_be_bytes([e[0], e[1], e[2], e[3]]) as i64;
            if last < self.base_offset {
                return Err(corrupt(format!(
                    "last offset {last} is below the base offset"
                )));
            }
        } else if self.inner.entries > 0 {
            return Err(corrupt("its last entry cannot be read".into()));
        }
        Ok(())
    }

    /// Shrinks the file to its entries (a segment that is no longer active).
    pub fn trim_to_valid_size(&mut self) -> io::Result<()> {
        let n = self.inner.size_in_bytes();
        self.inner.resize(n)
    }
    /// Grows the file back to its preallocated size (a segment that is active again).
    pub fn resize(&mut self, max_index_size: u32) -> io::Result<()> {
        self.inner.resize(max_index_size as usize)
    }
    pub fn flush(&self) -> io::Result<()> {
        self.inner.flush()
    }
    pub fn rename(&mut self, to: &Path) -> io::Result<()> {
        self.inner.rename(to)
    }
}

/// The `.timeindex` file of a segment: timestamp → offset.
#[derive(Debug)]
pub struct TimeIndex {
    inner: IndexFile,
    base_offset: i64,
}

/// A timestamp and an offset at or after which records carry it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TimestampOffset {
    pub timestamp: i64,
    pub offset: i64,
}

impl TimeIndex {
    pub const ENTRY_SIZE: usize = 12;

    pub fn open(
        path: &Path,
        base_offset: i64,
        max_index_size: u32,
        active: bool,
    ) -> io::Result<Self> {
        Ok(TimeIndex {
            inner: IndexFile::open(path, max_index_size, Self::ENTRY_SIZE, active)?,
            base_offset,
        })
    }

    fn read(&self, n: usize) -> TimestampOffset {
        decode_time_entry(self.base_offset, self.inner.entry(n))
    }

    pub fn entries(&self) -> usize {
        self.inner.entries
    }
    pub fn entry(&self, n: usize) -> TimestampOffset {
        self.read(n)
    }
    /// Full one slot early, keeping room for the entry written when the segment closes.
    pub fn is_full(&self) -> bool {
        self.inner.entries + 1 >= self.inner.max_entries
    }
    pub fn size_in_bytes(&self) -> usize {
        self.inner.size_in_bytes()
    }
    pub fn path(&self) -> &Path {
        &self.inner.path
    }

    /// The last entry, or (-1, base offset) when empty.
    pub fn last_entry(&self) -> TimestampOffset {
        if self.inner.entries == 0 {
            TimestampOffset {
                timestamp: -1,
                offset: self.base_offset,
            }
        } else {
            self.read(self.inner.entries - 1)
        }
    }

    /// Appends (timestamp, offset) if the timestamp is above the last entry's. Offsets may
    /// not go backwards; timestamps below the last entry are ignored.
    pub fn maybe_append(
        &mut self,
        timestamp: i64,
        offset: i64,
        skip_full_check: bool,
    ) -> io::Result<()> {
        if !skip_full_check && self.is_full() {
            return Err(io::Error::other(format!(
                "time index {} is full",
                self.inner.path.display()
            )));
        }
        if self.inner.entries >= self.inner.max_entries {
            return Ok(()); // no slot at all: the closing entry is skipped rather than lost data
        }
        if self.inner.entries > 0 {
            let last = self.last_entry();
            if offset < last.offset {
                return Err(io::Error::other(format!(
                    "time index {}: offset {offset} is below the last entry's {}",
                    self.inner.path.display(),
                    last.offset
                )));
            }
        }
        // As Kafka's: an empty index's last entry is (-1, base offset), so a segment without
        // a timestamp (no records) gets no entry when it closes.
        if timestamp <= self.last_entry().timestamp {
            return Ok(());
        }
        let mut e = [0u8; 12];
        e[..8].copy_from_slice(&timestamp.to_be_bytes());
        e[8..].copy_from_slice(&rel(self.base_offset, offset).to_be_bytes());
        self.inner.push(&e)
    }

    /// The last entry whose timestamp is ≤ `target`, or (-1, base offset).
    pub fn lookup(&self, target: i64) -> TimestampOffset {
        match self.inner.largest_lower_bound(target, |e| {
            let mut ts = [0u8; 8];
            ts.copy_from_slice(&e[..8]);
            i64::from_be_bytes(ts)
        }) {
            Some(n) => self.read(n),
            None => TimestampOffset {
                timestamp: -1,
                offset: self.base_offset,
            },
        }
    }

    /// Removes every entry for an offset ≥ `offset`.
    pub fn truncate_to(&mut self, offset: i64) {
        // Offsets are non-decreasing, so a linear search from the end is short in practice
        // (truncation removes the tail); a binary search keyed on offsets keeps it bounded.
        let base = self.base_offset;
        let keep = match self.inner.largest_lower_bound(offset, |e| {
            base + i32::from_be_bytes([e[8], e[9], e[10], e[11]]) as i64
        }) {
            None => 0,
            Some(n) if self.read(n).offset == offset => {
                // Entries may share an offset; drop every one equal to it.
                let mut k = n;
                while k > 0 && self.read(k - 1).offset == offset {
                    k -= 1;
                }
                k
            }
            Some(n) => n + 1,
        };
        self.inner.truncate_entries(keep);
    }

    /// Removes every entry (before a rebuild).
    pub fn reset(&mut self) -> io::Result<()> {
        self.inner.clear()
    }

    pub fn sanity_check(&self) -> Result<(), CorruptIndex> {
        let corrupt = |reason: String| CorruptIndex {
            path: self.inner.path.display().to_string(),
            reason,
        };
        if self.inner.has_partial_entry() {
            return Err(corrupt("length is not a multiple of 12".into()));
        }
        if self.inner.entries > 0 {
            let read = |e: Option<Vec<u8>>| {
                e.map(|e| decode_time_entry(self.base_offset, &e))
                    .ok_or_else(|| corrupt("its entries cannot be read".into()))
            };
            let first = read(self.inner.entry_from_file(0))?;
            let last = read(self.inner.last_entry_from_file())?;
            if last.timestamp < first.timestamp {
                return Err(corrupt("last timestamp is below the first".into()));
            }
            if last.offset < self.base_offset {
                return Err(corrupt("last offset is below the base offset".into()));
            }
        }
        Ok(())
    }

    pub fn trim_to_valid_size(&mut self) -> io::Result<()> {
        let n = self.inner.size_in_bytes();
        self.inner.resize(n)
    }
    pub fn resize(&mut self, max_index_size: u32) -> io::Result<()> {
        self.inner.resize(max_index_size as usize)
    }
    pub fn flush(&self) -> io::Result<()> {
        self.inner.flush()
    }
    pub fn rename(&mut self, to: &Path) -> io::Result<()> {
        self.inner.rename(to)
    }
}

/// A time index entry: an 8-byte timestamp and a 4-byte offset relative to the segment.
fn decode_time_entry(base_offset: i64, e: &[u8]) -> TimestampOffset {
    let mut ts = [0u8; 8];
    ts.copy_from_slice(&e[..8]);
    TimestampOffset {
        timestamp: i64::from_be_bytes(ts),
        offset: base_offset + i32::from_be_bytes([e[8], e[9], e[10], e[11]]) as i64,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn offset_index_lookup_truncate_and_reopen() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("00000000000000000100.index");
        let mut idx = OffsetIndex::open(&path, 100, 1024, true).unwrap();
        assert_eq!(
            std::fs::metadata(&path).unwrap().len(),
            1024,
            "preallocated"
        );
        for i in 0..50 {
            idx.append(100 + i * 10 + 5, (i * 4096) as u32).unwrap();
        }
        assert!(idx.append(500, 1).is_err(), "offsets must increase");
        assert_eq!(
            idx.lookup(99),
            OffsetPosition {
                offset: 100,
                position: 0
            }
        );
        assert_eq!(
            idx.lookup(105),
            OffsetPosition {
                offset: 105,
                position: 0
            }
        );
        assert_eq!(
            idx.lookup(114),
            OffsetPosition {
                offset: 105,
                position: 0
            }
        );
        assert_eq!(
            idx.lookup(115),
            OffsetPosition {
                offset: 115,
                position: 4096
            }
        );
        assert_eq!(idx.lookup(10_000).offset, 100 + 49 * 10 + 5);
        idx.truncate_to(115);
        assert_eq!(idx.entries(), 1);
        idx.append(200, 9000).unwrap();
        idx.trim_to_valid_size().unwrap();
        assert_eq!(std::fs::metadata(&path).unwrap().len(), 16);
        drop(idx);
        let idx = OffsetIndex::open(&path, 100, 1024, false).unwrap();
        assert_eq!(idx.entries(), 2);
        idx.sanity_check().unwrap();
        assert_eq!(
            idx.lookup(250),
            OffsetPosition {
                offset: 200,
                position: 9000
            }
        );
    }

    #[test]
    fn offset_index_fills_up() {
        let dir = tempfile::tempdir().unwrap();
        let mut idx = OffsetIndex::open(&dir.path().join("0.index"), 0, 20, true).unwrap();
        idx.append(1, 1).unwrap();
        idx.append(2, 2).unwrap();
        assert!(idx.is_full(), "20 bytes hold two 8-byte entries");
        assert!(idx.append(3, 3).is_err());
    }

    #[test]
    fn time_index_appends_only_rising_timestamps() {
        let dir = tempfile::tempdir().unwrap();
        let mut idx = TimeIndex::open(&dir.path().join("0.timeindex"), 0, 120, true).unwrap();
        // As Kafka: no timestamp (a segment without records closing) makes no entry.
        idx.maybe_append(-1, 0, true).unwrap();
        assert_eq!(idx.entries(), 0);
        idx.maybe_append(1000, 5, false).unwrap();
        idx.maybe_append(1000, 7, false).unwrap(); // same timestamp: ignored
        idx.maybe_append(900, 8, false).unwrap(); // lower timestamp: ignored
        idx.maybe_append(2000, 9, false).unwrap();
        assert_eq!(idx.entries(), 2);
        assert!(
            idx.maybe_append(3000, 4, false).is_err(),
            "offsets cannot go back"
        );
        assert_eq!(
            idx.lookup(999),
            TimestampOffset {
                timestamp: -1,
                offset: 0
            }
        );
        assert_eq!(
            idx.lookup(1500),
            TimestampOffset {
                timestamp: 1000,
                offset: 5
            }
        );
        assert_eq!(
            idx.lookup(2000),
            TimestampOffset {
                timestamp: 2000,
                offset: 9
            }
        );
        idx.truncate_to(9);
        assert_eq!(
            idx.last_entry(),
            TimestampOffset {
                timestamp: 1000,
                offset: 5
            }
        );
    }

    #[test]
    fn time_index_is_full_one_slot_early() {
        let dir = tempfile::tempdir().unwrap();
        let mut idx = TimeIndex::open(&dir.path().join("0.timeindex"), 0, 36, true).unwrap();
        idx.maybe_append(1, 1, false).unwrap();
        idx.maybe_append(2, 2, false).unwrap();
        assert!(idx.is_full());
        idx.maybe_append(3, 3, true).unwrap();
        assert_eq!(idx.entries(), 3);
    }

    #[test]
    fn an_index_a_failed_resize_left_unmapped_forgets_its_entries() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("0.index");
        let mut idx = OffsetIndex::open(&path, 0, 1024, true).unwrap();
        idx.append(5, 100).unwrap();
        idx.append(9, 200).unwrap();
        // A descriptor that cannot change the file's length: the resize fails after the
        // mapping is dropped.
        idx.inner.read_only = true;
        assert!(idx.trim_to_valid_size().is_err());
        // Answers without reading through a mapping it no longer has.
        assert_eq!(idx.entries(), 0);
        assert_eq!(
            idx.lookup(10),
            OffsetPosition {
                offset: 0,
                position: 0
            }
        );
        assert_eq!(idx.last_offset(), 0);
        assert!(idx.is_full());
        assert!(idx.append(10, 300).is_err());
        // Once the file can change length again, the index works again (empty).
        idx.inner.read_only = false;
        idx.resize(1024).unwrap();
        idx.append(10, 300).unwrap();
        assert_eq!(idx.lookup(10).position, 300);
    }

    #[test]
    fn partial_entry_fails_the_sanity_check() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("0.index");
        std::fs::write(&path, [0u8; 13]).unwrap();
        let idx = OffsetIndex::open(&path, 0, 1024, false).unwrap();
        assert!(idx.sanity_check().is_err());
    }
}
