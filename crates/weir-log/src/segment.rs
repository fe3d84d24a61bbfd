//! One segment of a partition log (Kafka's `LogSegment`): the `.log` file of whole
//! batches starting at `base_offset`, its sparse `.index` and `.timeindex`, and its
//! aborted-transaction index `.txnindex` (only once it has an entry). It appends
//! batches it is given (already validated and offset-assigned), finds where an offset or a
//! timestamp lives, hands out file slices for fetches, and recovers itself after a crash
//! by re-reading and re-indexing every batch. It does not decide when to roll, delete or
//! flush; the partition log does.

use std::fs::File;
use std::io;
use std::ops::ControlFlow;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use weir_kafka::limits::MAX_DECOMPRESSED_BATCH_BYTES;
use weir_record::{LogEntry, LOG_OVERHEAD};

use crate::config::LogConfig;
use crate::file_cache::{CachedFile, SegmentFileCache, SharedFile};
use crate::index::{OffsetIndex, TimeIndex, TimestampOffset};
use crate::txn_index::{AbortedTxn, TransactionIndex, TxnSearch, TXN_INDEX_SUFFIX};

pub const LOG_SUFFIX: &str = ".log";
pub const INDEX_SUFFIX: &str = ".index";
pub const TIME_INDEX_SUFFIX: &str = ".timeindex";
pub const DELETED_SUFFIX: &str = ".deleted";
pub const CLEANED_SUFFIX: &str = ".cleaned";
pub const SWAP_SUFFIX: &str = ".swap";

/// `<20-digit zero-padded offset><suffix>`, Kafka's file naming.
pub fn file_name(offset: i64, suffix: &str) -> String {
    format!("{offset:020}{suffix}")
}

/// The base offset a segment file name encodes, if it is one.
pub fn parse_base_offset(name: &str) -> Option<i64> {
    let digits = name.get(..20)?;
    if !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    digits.parse().ok()
}

/// A range of a segment file, read (or sent) after the log's lock is released. The file
/// handle keeps the bytes readable even if the segment is deleted meanwhile, or its file
/// closed by the cache of open files (the descriptor lives until the slice is dropped).
#[derive(Debug, Clone)]
pub struct FileSlice {
    file: Arc<File>,
    pub position: u64,
    pub len: usize,
}

impl FileSlice {
    pub fn new(file: Arc<File>, position: u64, len: usize) -> FileSlice {
        FileSlice {
            file,
            position,
            len,
        }
    }
    pub fn file(&self) -> &Arc<File> {
        &self.file
    }
    /// Reads the slice. A segment truncated meanwhile yields fewer bytes, never an error.
    pub fn read_to_vec(&self) -> io::Result<Vec<u8>> {
        let mut buf = vec![0u8; self.len];
        let mut done = 0;
        while done < self.len {
            match self
                .file
                .read_at(&mut buf[done..], self.position + done as u64)
            {
                Ok(0) => break,
                Ok(n) => done += n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        buf.truncate(done);
        Ok(buf)
    }
}

/// What the header of one entry in a segment file says, read without its payload.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EntryHeader {
    pub position: u64,
    /// The offset field: a v2 batch's base offset, a legacy message's (last) offset.
    pub offset_field: i64,
    pub last_offset: i64,
    pub size: u32,
    pub magic: i8,
    /// v2: the batch's max timestamp; v1: the message timestamp; v0: -1.
    pub max_timestamp: i64,
    /// v2 batches with a producer id: its idempotence fields.
    pub producer: Option<ProducerFields>,
}

/// The producer fields of a v2 batch header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProducerFields {
    pub producer_id: i64,
    pub producer_epoch: i16,
    pub base_sequence: i32,
    pub last_offset_delta: i32,
    pub transactional: bool,
    pub control: bool,
}

/// How a walk over a segment file ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WalkEnd {
    /// Reached the end of the requested range on an entry boundary.
    End,
    /// The callback stopped early.
    Stopped,
    /// The entry at this position is cut short, or its header makes no sense.
    Damaged(u64),
}

fn min_entry_size(magic: i8) -> Option<u64> {
    match magic {
        0 => Some(26),
        1 => Some(34),
        2 => Some(61),
        _ => None,
    }
}

/// Walks entry headers from `from` to `end`, reading in chunks and skipping payloads.
pub fn walk_headers(
    file: &File,
    from: u64,
    end: u64,
    mut f: impl FnMut(EntryHeader) -> ControlFlow<()>,
) -> io::Result<WalkEnd> {
    const CHUNK: usize = 16 * 1024;
    let mut buf = vec![0u8; CHUNK];
    let mut buf_start = u64::MAX; // file position of buf[0]
    let mut buf_len = 0usize;
    let mut pos = from;
    while pos < end {
        // Need up to 61 header bytes at `pos` within the buffer.
        let want = (end - pos).min(61) as usize;
        if pos < buf_start || pos + want as u64 > buf_start + buf_len as u64 {
            let n = ((end - pos) as usize).min(CHUNK);
            read_fully_at(file, &mut buf[..n], pos)?;
            buf_start = pos;
            buf_len = n;
        }
        let h = &buf[(pos - buf_start) as usize..(pos - buf_start) as usize + want];
        if h.len() < 17 {
            return Ok(WalkEnd::Damaged(pos));
        }
        let offset = i64::from_be_bytes(h[0..8].try_into().unwrap_or_default());
        let length = i32::from_be_bytes(h[8..12].try_into().unwrap_or_default());
        let magic = h[16] as i8;
        let Some(min) = min_entry_size(magic) else {
            return Ok(WalkEnd::Damaged(pos));
        };
        let size = LOG_OVERHEAD as u64 + length.max(0) as u64;
        if length < 0 || size < min || pos + size > end || (h.len() as u64) < min.min(61) {
            return Ok(WalkEnd::Damaged(pos));
        }
        let mut producer = None;
        let (last_offset, max_timestamp) = match magic {
            2 => {
                let delta = i32::from_be_bytes(h[23..27].try_into().unwrap_or_default());
                let ts = i64::from_be_bytes(h[35..43].try_into().unwrap_or_default());
                let pid = i64::from_be_bytes(h[43..51].try_into().unwrap_or_default());
                if pid >= 0 {
                    let attrs = u16::from_be_bytes([h[21], h[22]]);
                    producer = Some(ProducerFields {
                        producer_id: pid,
                        producer_epoch: i16::from_be_bytes([h[51], h[52]]),
                        base_sequence: i32::from_be_bytes(h[53..57].try_into().unwrap_or_default()),
                        last_offset_delta: delta,
                        transactional: attrs & 0x10 != 0,
                        control: attrs & 0x20 != 0,
                    });
                }
                (offset.wrapping_add(delta as i64), ts)
            }
            1 => (
                offset,
                i64::from_be_bytes(h[18..26].try_into().unwrap_or_default()),
            ),
            _ => (offset, -1),
        };
        let header = EntryHeader {
            position: pos,
            offset_field: offset,
            last_offset,
            size: size as u32,
            magic,
            max_timestamp,
            producer,
        };
        if f(header).is_break() {
            return Ok(WalkEnd::Stopped);
        }
        pos += size;
    }
    Ok(WalkEnd::End)
}

/// Walks whole entries from `from` to `end` (for recovery and compaction), reading in
/// large chunks; an entry larger than the chunk gets a buffer of its own size.
pub fn walk_entries(
    file: &File,
    from: u64,
    end: u64,
    mut f: impl FnMut(u64, LogEntry<'_>) -> io::Result<ControlFlow<()>>,
) -> io::Result<WalkEnd> {
    const CHUNK: usize = 1 << 20;
    let mut buf: Vec<u8> = Vec::new();
    let mut buf_start = from;
    let mut pos = from;
    loop {
        if pos >= end {
            return Ok(WalkEnd::End);
        }
        let in_buf = (pos - buf_start) as usize;
        let avail = buf.len().saturating_sub(in_buf);
        // Make sure the whole entry at `pos` is in the buffer.
        let need = if avail >= LOG_OVERHEAD {
            let b = &buf[in_buf..];
            let length = i32::from_be_bytes(b[8..12].try_into().unwrap_or_default());
            if length < 0 || pos + LOG_OVERHEAD as u64 + length as u64 > end {
                return Ok(WalkEnd::Damaged(pos));
            }
            LOG_OVERHEAD + length as usize
        } else {
            LOG_OVERHEAD
        };
        if avail < need {
            let n = ((end - pos) as usize).min(CHUNK.max(need));
            if n < need {
                return Ok(WalkEnd::Damaged(pos));
            }
            buf.resize(n, 0);
            read_fully_at(file, &mut buf, pos)?;
            buf_start = pos;
            continue;
        }
        let bytes = &buf[in_buf..in_buf + need];
        let entry = match LogEntry::parse(bytes) {
            Ok(e) => e,
            Err(_) => return Ok(WalkEnd::Damaged(pos)),
        };
        if f(pos, entry)?.is_break() {
            return Ok(WalkEnd::Stopped);
        }
        pos += need as u64;
    }
}

/// As `walk_entries`, over a read-only mapping of the file: recovery reads whole segments
/// and a mapping saves copying every byte through a buffer. Only for files nobody can
/// shrink meanwhile (the log being loaded is not yet visible to anyone else).
fn walk_entries_mapped(
    file: &File,
    end: u64,
    mut f: impl FnMut(u64, LogEntry<'_>) -> io::Result<ControlFlow<()>>,
) -> io::Result<WalkEnd> {
    if end == 0 {
        return Ok(WalkEnd::End);
    }
    // SAFETY: the mapping is read-only and the file is not truncated while it lives: the
    // caller is loading the log, before any other thread can reach it.
    let map = unsafe { memmap2::MmapOptions::new().len(end as usize).map(file)? };
    let _ = map.advise(memmap2::Advice::Sequential);
    for item in weir_record::LogEntries::new(&map) {
        match item {
            Ok((pos, entry)) => {
                if f(pos as u64, entry)?.is_break() {
                    return Ok(WalkEnd::Stopped);
                }
            }
            Err(e) => return Ok(WalkEnd::Damaged(e.position as u64)),
        }
    }
    Ok(WalkEnd::End)
}

fn read_fully_at(file: &File, buf: &mut [u8], pos: u64) -> io::Result<()> {
    file.read_exact_at(buf, pos)
}

/// pwritev(2) of every piece at `offset`, continuing after a short write. Written by hand
/// because std's `FileExt` has no positioned vectored write; the unsafe is one libc call on
/// a descriptor and slices this function holds borrowed for the call.
fn write_all_vectored_at(file: &File, pieces: &[&[u8]], mut offset: u64) -> io::Result<()> {
    let mut slices: Vec<io::IoSlice<'_>> = pieces
        .iter()
        .filter(|p| !p.is_empty())
        .map(|p| io::IoSlice::new(p))
        .collect();
    let mut left = &mut slices[..];
    while !left.is_empty() {
        let at = libc::off_t::try_from(offset)
            .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "file offset too large"))?;
        let count = left.len().min(libc::c_int::MAX as usize) as libc::c_int;
        // SAFETY: `IoSlice` is ABI-compatible with `iovec` on Unix (std documents it), the
        // slices outlive the call, and the descriptor is the open file `file`.
        let n = unsafe {
            libc::pwritev(
                std::os::fd::AsRawFd::as_raw_fd(file),
                left.as_ptr().cast::<libc::iovec>(),
                count,
                at,
            )
        };
        if n < 0 {
            let e = io::Error::last_os_error();
            if e.kind() == io::ErrorKind::Interrupted {
                continue;
            }
            return Err(e);
        }
        if n == 0 {
            return Err(io::ErrorKind::WriteZero.into());
        }
        offset += n as u64;
        io::IoSlice::advance_slices(&mut left, n as usize);
    }
    Ok(())
}

/// The `.log` file of a segment, opened through the shared cache of open files when used
/// (so a segment holds no descriptor while it is idle). `size` counts whole entries.
#[derive(Debug)]
struct SegmentFile {
    path: PathBuf,
    handle: CachedFile,
    size: u64,
}

impl SegmentFile {
    /// An existing file is only looked at (its size); a missing one is created, and kept
    /// open for the appends that follow.
    fn open(path: &Path, files: &Arc<SegmentFileCache>) -> io::Result<Self> {
        let (handle, size) = match std::fs::metadata(path) {
            Ok(m) => (CachedFile::lazy(files, path, true), m.len()),
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                (CachedFile::open_now(files, path, true)?, 0)
            }
            Err(e) => return Err(e),
        };
        Ok(SegmentFile {
            path: path.to_path_buf(),
            handle,
            size,
        })
    }

    /// Appends `pieces`, in order, with one positioned vectored write (as many as the
    /// kernel needs): a batch kept as its producer sent it goes as its fixed-up header and
    /// its records, straight from the request's buffer to the page cache.
    fn append(&mut self, pieces: &[&[u8]]) -> io::Result<()> {
        let len: usize = pieces.iter().map(|p| p.len()).sum();
        let at = self.size;
        self.handle.with(true, |file| {
            if let Err(e) = write_all_vectored_at(file, pieces, at) {
                // Leave no half-written tail behind the bytes we count as written.
                let _ = file.set_len(at);
                return Err(e);
            }
            Ok(())
        })?;
        self.size += len as u64;
        Ok(())
    }

    fn truncate_to(&mut self, size: u64) -> io::Result<()> {
        self.handle.with(true, |file| file.set_len(size))?;
        self.size = size;
        Ok(())
    }

    /// Runs `op` on the open file, for reading.
    fn read<R>(&self, op: impl FnOnce(&File) -> io::Result<R>) -> io::Result<R> {
        self.handle.with(false, op)
    }
}

/// Inputs of the roll decision (Kafka's `RollParams`).
#[derive(Debug, Clone, Copy)]
pub struct RollParams {
    pub max_segment_bytes: u64,
    pub max_segment_ms: i64,
    pub max_timestamp_in_messages: i64,
    pub max_offset_in_messages: i64,
    pub messages_size: u64,
    pub now_ms: i64,
}

/// What recovering a segment found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RecoveryResult {
    /// Bytes cut off the end (a torn or corrupt tail); 0 if the segment was whole.
    pub truncated_bytes: u64,
    /// The offset after the last valid entry, or the base offset if none.
    pub next_offset: i64,
}

/// One segment: a `.log` file and its two indexes.
#[derive(Debug)]
pub struct LogSegment {
    base_offset: i64,
    log: SegmentFile,
    offset_index: OffsetIndex,
    time_index: TimeIndex,
    txn_index: TransactionIndex,
    /// Why the `.txnindex` found on disk could not be read (the segment is then recovered).
    txn_index_unreadable: Option<String>,
    index_interval_bytes: u32,
    max_index_size: u32,
    bytes_since_last_index_entry: u64,
    max_timestamp_so_far: Option<TimestampOffset>,
    rolling_based_timestamp: Option<i64>,
    created_ms: i64,
    roll_jitter_ms: i64,
}

impl LogSegment {
    /// Opens (creating if missing) the segment at `base_offset` in `dir`; `suffix` is ""
    /// or a temporary suffix (`.cleaned`) added after each file's own.
    /// Its `.log` file is opened through `files` when first used.
    pub fn open(
        dir: &Path,
        base_offset: i64,
        config: &LogConfig,
        active: bool,
        suffix: &str,
        now_ms: i64,
        files: &Arc<SegmentFileCache>,
    ) -> io::Result<Self> {
        let log = SegmentFile::open(
            &dir.join(file_name(base_offset, &format!("{LOG_SUFFIX}{suffix}"))),
            files,
        )?;
        let offset_index = OffsetIndex::open(
            &dir.join(file_name(base_offset, &format!("{INDEX_SUFFIX}{suffix}"))),
            base_offset,
            config.segment_index_bytes,
            active,
        )?;
        let time_index = TimeIndex::open(
            &dir.join(file_name(
                base_offset,
                &format!("{TIME_INDEX_SUFFIX}{suffix}"),
            )),
            base_offset,
            config.segment_index_bytes,
            active,
        )?;
        let txn_path = dir.join(file_name(
            base_offset,
            &format!("{TXN_INDEX_SUFFIX}{suffix}"),
        ));
        let (txn_index, txn_index_unreadable) = match TransactionIndex::open(&txn_path, base_offset)
        {
            Ok(t) => (t, None),
            // Rebuilt from the log by recovery, as a damaged offset index is.
            Err(e) if e.kind() == io::ErrorKind::InvalidData => (
                TransactionIndex::empty(&txn_path, base_offset),
                Some(e.to_string()),
            ),
            Err(e) => return Err(e),
        };
        let jitter_bound = config.segment_jitter_bound_ms();
        let roll_jitter_ms = if jitter_bound > 0 {
            fastrand::i64(0..jitter_bound)
        } else {
            0
        };
        let created_ms = if log.size == 0 {
            now_ms
        } else {
            file_mtime_ms(&log.path).unwrap_or(now_ms)
        };
        Ok(LogSegment {
            base_offset,
            log,
            offset_index,
            time_index,
            txn_index,
            txn_index_unreadable,
            index_interval_bytes: config.index_interval_bytes,
            max_index_size: config.segment_index_bytes,
            bytes_since_last_index_entry: 0,
            max_timestamp_so_far: None,
            rolling_based_timestamp: None,
            created_ms,
            roll_jitter_ms,
        })
    }

    pub fn base_offset(&self) -> i64 {
        self.base_offset
    }
    /// Bytes of whole batches in the `.log` file.
    pub fn size(&self) -> u64 {
        self.log.size
    }
    pub fn is_empty(&self) -> bool {
        self.log.size == 0
    }
    pub fn log_path(&self) -> &Path {
        &self.log.path
    }
    /// The `.log` file, opened through the cache if it is closed; the handle stays valid
    /// after the cache closes its own.
    pub fn log_file(&self) -> io::Result<Arc<File>> {
        self.log.handle.share()
    }
    /// A handle for reading the `.log` file without the segment (compaction).
    pub(crate) fn shared_log_file(&self) -> SharedFile {
        self.log.handle.shared()
    }
    /// Whether the `.log` file is open right now.
    pub fn is_log_file_open(&self) -> bool {
        self.log.handle.is_open()
    }
    /// Everything in the `.log` file is known to be durable (loaded below the recovery
    /// point): closing it needs no fsync.
    pub(crate) fn mark_log_durable(&self) {
        self.log.handle.mark_durable()
    }
    /// Closes the `.log` file for good without an fsync (the log is being deleted).
    pub(crate) fn retire_log_file(&self) {
        self.log.handle.retire()
    }
    pub fn offset_index(&self) -> &OffsetIndex {
        &self.offset_index
    }
    pub fn time_index(&self) -> &TimeIndex {
        &self.time_index
    }
    pub fn txn_index(&self) -> &TransactionIndex {
        &self.txn_index
    }

    /// Records a transaction an ABORT marker in this segment closed, unless the index has
    /// it already (a replay after a load goes over markers it may hold).
    pub fn append_aborted_txn(&mut self, txn: AbortedTxn) -> io::Result<()> {
        if self
            .txn_index
            .entries()
            .last()
            .is_some_and(|last| last.last_offset >= txn.last_offset)
        {
            return Ok(());
        }
        self.txn_index.append(txn)
    }

    /// Adds the aborted transactions that overlap `[fetch_offset, upper_bound)`.
    pub fn collect_aborted_txns(&self, fetch_offset: i64, upper_bound: i64, out: &mut TxnSearch) {
        self.txn_index
            .collect_aborted(fetch_offset, upper_bound, out);
    }
    pub fn index_size_in_bytes(&self) -> u64 {
        (self.offset_index.size_in_bytes() + self.time_index.size_in_bytes()) as u64
    }
    pub fn created_ms(&self) -> i64 {
        self.created_ms
    }
    /// Checks both indexes of a segment that was already on disk: Kafka's checks, and that
    /// the last offset-index entry points inside the `.log` file.
    pub fn sanity_check(&self) -> Result<(), crate::index::CorruptIndex> {
        self.offset_index.sanity_check()?;
        self.time_index.sanity_check()?;
        if let Some(reason) = &self.txn_index_unreadable {
            return Err(crate::index::CorruptIndex {
                path: self.txn_index.path().display().to_string(),
                reason: reason.clone(),
            });
        }
        if let Err(reason) = self.txn_index.sanity_check() {
            return Err(crate::index::CorruptIndex {
                path: self.txn_index.path().display().to_string(),
                reason,
            });
        }
        let n = self.offset_index.entries();
        if n > 0 {
            let last = self.offset_index.entry(n - 1);
            if last.position as u64 >= self.log.size.max(1) {
                return Err(crate::index::CorruptIndex {
                    path: self.offset_index.path().display().to_string(),
                    reason: format!(
                        "last entry points at {} in a {}-byte log",
                        last.position, self.log.size
                    ),
                });
            }
        }
        Ok(())
    }

    /// The largest record timestamp so far and the offset of the batch that holds it;
    /// loaded lazily from the time index's last entry, as Kafka does.
    pub fn max_timestamp_so_far(&mut self) -> TimestampOffset {
        *self
            .max_timestamp_so_far
            .get_or_insert_with(|| self.time_index.last_entry())
    }

    /// The segment's largest record timestamp, or its file's mtime if no record has one
    /// (retention's clock).
    pub fn largest_timestamp(&mut self) -> i64 {
        let ts = self.max_timestamp_so_far().timestamp;
        if ts >= 0 {
            ts
        } else {
            file_mtime_ms(&self.log.path).unwrap_or(0)
        }
    }

    /// Appends batches whose offsets were assigned: `largest_offset` is the last offset,
    /// `offset_of_max_timestamp` the last offset of the batch with the largest timestamp.
    pub fn append(
        &mut self,
        largest_offset: i64,
        largest_timestamp: i64,
        offset_of_max_timestamp: i64,
        records: &[u8],
    ) -> io::Result<()> {
        self.append_pieces(
            largest_offset,
            largest_timestamp,
            offset_of_max_timestamp,
            &[records],
        )
    }

    /// `append` of one batch given in pieces that follow each other in the file.
    pub fn append_pieces(
        &mut self,
        largest_offset: i64,
        largest_timestamp: i64,
        offset_of_max_timestamp: i64,
        pieces: &[&[u8]],
    ) -> io::Result<()> {
        let len: usize = pieces.iter().map(|p| p.len()).sum();
        if len == 0 {
            return Ok(());
        }
        let relative = largest_offset - self.base_offset;
        if !(0..=i32::MAX as i64).contains(&relative) {
            return Err(io::Error::other(format!(
                "offset {largest_offset} cannot be stored relative to segment base {}",
                self.base_offset
            )));
        }
        let position = self.log.size;
        self.log.append(pieces)?;
        let max_so_far = self.max_timestamp_so_far();
        let max_now = if largest_timestamp > max_so_far.timestamp {
            TimestampOffset {
                timestamp: largest_timestamp,
                offset: offset_of_max_timestamp,
            }
        } else {
            max_so_far
        };
        if self.bytes_since_last_index_entry > self.index_interval_bytes as u64 {
            // Time-index timestamps never fall (Kafka refuses an entry below the last one):
            // the max timestamp so far starts at the index's last entry and only grows.
            debug_assert!(
                max_now.timestamp >= self.time_index.last_entry().timestamp,
                "segment {}: max timestamp {} below the time index's last entry {:?}",
                self.base_offset,
                max_now.timestamp,
                self.time_index.last_entry()
            );
            // An index that cannot take its entry (a full disk) fails the whole append:
            // the records come off the log again, so the segment holds only what was
            // acknowledged.
            let offset_entries = self.offset_index.entries();
            let indexed = self
                .offset_index
                .append(largest_offset, position as u32)
                .and_then(|()| {
                    self.time_index
                        .maybe_append(max_now.timestamp, max_now.offset, false)
                });
            if let Err(e) = indexed {
                self.offset_index.truncate_to_entries(offset_entries);
                let _ = self.log.truncate_to(position);
                return Err(e);
            }
            self.bytes_since_last_index_entry = 0;
        }
        if position == 0 {
            self.rolling_based_timestamp = Some(largest_timestamp);
        }
        self.max_timestamp_so_far = Some(max_now);
        self.bytes_since_last_index_entry += len as u64;
        Ok(())
    }

    /// The header of the first entry whose last offset is ≥ `offset`, searching from the
    /// index's best guess (and never before `starting_position`).
    pub fn translate_offset(
        &self,
        offset: i64,
        starting_position: u64,
    ) -> io::Result<Option<EntryHeader>> {
        self.log
            .read(|file| self.translate_offset_in(file, offset, starting_position))
    }

    /// `translate_offset` in the `.log` file the caller has open.
    fn translate_offset_in(
        &self,
        file: &File,
        offset: i64,
        starting_position: u64,
    ) -> io::Result<Option<EntryHeader>> {
        let from = (self.offset_index.lookup(offset).position as u64).max(starting_position);
        let mut found = None;
        walk_headers(file, from, self.log.size, |h| {
            if h.last_offset >= offset {
                found = Some(h);
                ControlFlow::Break(())
            } else {
                ControlFlow::Continue(())
            }
        })?;
        Ok(found)
    }

    /// The bytes to send for a fetch from `start_offset`: from the entry holding it, at
    /// most `max_size` bytes and not past `max_position`, but the whole first entry when
    /// `min_one_message`. `None` if the offset is beyond this segment. As in Kafka, the
    /// end is not cut at an entry boundary; readers drop a partial last entry.
    pub fn read(
        &self,
        start_offset: i64,
        max_size: usize,
        max_position: u64,
        min_one_message: bool,
    ) -> io::Result<Option<FileSlice>> {
        let max_position = max_position.min(self.log.size);
        // One handle for the lookup and the slice.
        let file = self.log.handle.share()?;
        let Some(first) = self.translate_offset_in(&file, start_offset, 0)? else {
            return Ok(None);
        };
        let slice = |len| FileSlice {
            file,
            position: first.position,
            len,
        };
        if first.position >= max_position {
            return Ok(Some(slice(0)));
        }
        let max_size = if min_one_message {
            max_size.max(first.size as usize)
        } else {
            max_size
        };
        let len = ((max_position - first.position) as usize).min(max_size);
        Ok(Some(slice(len)))
    }

    /// A slice of the `.log` file. It keeps its own handle on the file, so it stays
    /// readable after the cache closes the segment's.
    pub fn slice(&self, position: u64, len: usize) -> io::Result<FileSlice> {
        Ok(FileSlice {
            file: self.log.handle.share()?,
            position,
            len,
        })
    }

    /// The position of the first entry whose last offset is ≥ `offset`, or the size.
    pub fn position_of(&self, offset: i64) -> io::Result<u64> {
        Ok(self
            .translate_offset(offset, 0)?
            .map_or(self.log.size, |h| h.position))
    }

    /// The offset after the last entry, found from the last index entry on.
    pub fn read_next_offset(&self) -> io::Result<i64> {
        let from = self.offset_index.lookup(i64::MAX).position as u64;
        let mut next = self.base_offset;
        self.log.read(|file| {
            walk_headers(file, from, self.log.size, |h| {
                next = h.last_offset + 1;
                ControlFlow::Continue(())
            })
        })?;
        Ok(next)
    }

    /// Rebuilds the indexes from the `.log` file, checking every entry (header, size, CRC,
    /// offsets that increase and fit the segment), and cuts the file at the first entry
    /// that fails. `on_entry` sees each valid entry (for the leader-epoch cache). The
    /// `.txnindex` is emptied: its entries come back from the producer-state replay that
    /// follows recovery, which alone knows where each aborted transaction began.
    pub fn recover(
        &mut self,
        mut on_entry: impl FnMut(&LogEntry<'_>),
    ) -> io::Result<RecoveryResult> {
        self.offset_index.reset()?;
        self.time_index.reset()?;
        self.txn_index.reset()?;
        self.txn_index_unreadable = None;
        self.offset_index.resize(self.max_index_size)?;
        self.time_index.resize(self.max_index_size)?;
        let mut valid_bytes: u64 = 0;
        let mut last_index_entry: u64 = 0;
        let mut max_ts = TimestampOffset {
            timestamp: -1,
            offset: self.base_offset,
        };
        let mut last_offset: Option<i64> = None;
        let base = self.base_offset;
        let interval = self.index_interval_bytes as u64;
        let offset_index = &mut self.offset_index;
        let time_index = &mut self.time_index;
        let file = self.log.handle.share()?;
        let file_len = file.metadata()?.len();
        walk_entries_mapped(&file, file_len, |pos, entry| {
            if entry.validate_crc().is_err() {
                return Ok(ControlFlow::Break(()));
            }
            let (first, last) = match &entry {
                LogEntry::V2(b) => {
                    if b.last_offset_delta() < 0
                        || b.records_count() > b.last_offset_delta().saturating_add(1)
                    {
                        return Ok(ControlFlow::Break(()));
                    }
                    (b.base_offset(), b.last_offset())
                }
                LogEntry::Legacy(m) => (m.offset(), m.offset()),
            };
            let in_range = first >= base && last - base <= i32::MAX as i64 && last >= first;
            let increasing = last_offset.is_none_or(|prev| first > prev);
            if !in_range || !increasing {
                return Ok(ControlFlow::Break(()));
            }
            let entry_max_ts = match &entry {
                LogEntry::V2(b) => b.max_timestamp(),
                LogEntry::Legacy(m) => m.timestamp(),
            };
            if entry_max_ts > max_ts.timestamp {
                max_ts = TimestampOffset {
                    timestamp: entry_max_ts,
                    offset: last,
                };
            }
            // Recovery sees every batch while the write path indexed whole appends (several
            // batches each), so a rebuild can want more entries than the segment had room
            // for when it rolled. The indexes are sparse: past a full one, lookups scan on.
            if valid_bytes - last_index_entry > interval
                && !offset_index.is_full()
                && !time_index.is_full()
            {
                // The indexes were reset above, so every entry is this walk's own: offsets
                // strictly increase (`increasing`) and `max_ts` never falls.
                debug_assert!(
                    (offset_index.entries() == 0 || last > offset_index.last_offset())
                        && max_ts.timestamp >= time_index.last_entry().timestamp,
                    "segment {base}: index entry ({last}, {max_ts:?}) out of order"
                );
                offset_index.append(last, valid_bytes as u32)?;
                time_index.maybe_append(max_ts.timestamp, max_ts.offset, false)?;
                last_index_entry = valid_bytes;
            }
            valid_bytes = pos + entry.size_in_bytes() as u64;
            last_offset = Some(last);
            on_entry(&entry);
            Ok(ControlFlow::Continue(()))
        })?;
        let truncated = file_len - valid_bytes;
        if truncated > 0 {
            self.log.truncate_to(valid_bytes)?;
        } else {
            self.log.size = valid_bytes;
        }
        self.time_index
            .maybe_append(max_ts.timestamp, max_ts.offset, true)?;
        // Trimmed to their entries, as a roll leaves them: a file at full size would be
        // read at the next start as that many entries, its zeroed tail among them. The
        // log makes the active segment's indexes whole again once loading is done.
        self.offset_index.trim_to_valid_size()?;
        self.time_index.trim_to_valid_size()?;
        self.max_timestamp_so_far = Some(max_ts);
        self.bytes_since_last_index_entry = valid_bytes - last_index_entry;
        Ok(RecoveryResult {
            truncated_bytes: truncated,
            next_offset: last_offset.map_or(self.base_offset, |o| o + 1),
        })
    }

    /// Removes every entry at or after the one holding `offset`; returns the bytes removed.
    pub fn truncate_to(&mut self, offset: i64) -> io::Result<u64> {
        let Some(h) = self.translate_offset(offset, 0)? else {
            return Ok(0);
        };
        let removed = self.log.size - h.position;
        self.offset_index.truncate_to(offset);
        self.time_index.truncate_to(offset);
        // The batch holding `offset` goes whole: so do the markers from its start on.
        self.txn_index.truncate_to(h.offset_field)?;
        self.log.truncate_to(h.position)?;
        // The max timestamp must be found again from what remains.
        let mut max_ts = self.time_index.last_entry();
        let from = self.offset_index.lookup(i64::MAX).position as u64;
        self.log.read(|file| {
            walk_headers(file, from, self.log.size, |e| {
                if e.max_timestamp > max_ts.timestamp {
                    max_ts = TimestampOffset {
                        timestamp: e.max_timestamp,
                        offset: e.last_offset,
                    };
                }
                ControlFlow::Continue(())
            })
        })?;
        self.max_timestamp_so_far = Some(max_ts);
        self.bytes_since_last_index_entry = self.log.size - from.min(self.log.size);
        if self.log.size == 0 {
            self.rolling_based_timestamp = None;
        }
        Ok(removed)
    }

    /// Kafka's roll check: size, age (by record time, or wall time if none), a full index,
    /// or an offset that would not fit the 32-bit relative offsets.
    pub fn should_roll(&mut self, p: &RollParams) -> bool {
        let waited = match self.rolling_based_timestamp {
            Some(t) if t >= 0 => p.max_timestamp_in_messages - t,
            _ => p.now_ms - self.created_ms,
        };
        let reached_roll_ms = waited > p.max_segment_ms - self.roll_jitter_ms;
        let size = self.log.size;
        size > p.max_segment_bytes.saturating_sub(p.messages_size)
            || (size > 0 && reached_roll_ms)
            || self.offset_index.is_full()
            || self.time_index.is_full()
            || p.max_offset_in_messages - self.base_offset > i32::MAX as i64
    }

    /// The segment stops being the active one: a closing time-index entry, and both
    /// indexes trimmed to their entries.
    pub fn on_become_inactive(&mut self) -> io::Result<()> {
        let m = self.max_timestamp_so_far();
        self.time_index.maybe_append(m.timestamp, m.offset, true)?;
        self.offset_index.trim_to_valid_size()?;
        self.time_index.trim_to_valid_size()
    }

    /// The segment is the active one again (after truncation): indexes regrown.
    pub fn on_become_active(&mut self) -> io::Result<()> {
        self.offset_index.resize(self.max_index_size)?;
        self.time_index.resize(self.max_index_size)
    }

    /// Durably writes the `.log` file (and the indexes). A `.log` file with nothing
    /// written since its last fsync is not synced again (nor opened for it).
    pub fn flush(&self) -> io::Result<()> {
        self.log.handle.sync()?;
        self.flush_indexes()
    }

    /// Durably writes the `.log` file only. Enough for the active segment: after an unclean
    /// shutdown, recovery rebuilds the indexes of the segment holding the recovery point and
    /// of every later one, so syncing them too would only double the disk writes of an
    /// fsync-per-batch topic.
    pub fn flush_log(&self) -> io::Result<()> {
        self.log.handle.sync()
    }

    /// Durably writes the offset, time and transaction indexes.
    pub fn flush_indexes(&self) -> io::Result<()> {
        self.offset_index.flush()?;
        self.time_index.flush()?;
        self.txn_index.flush()
    }

    /// The first record at or after `starting_offset` whose timestamp is ≥ `timestamp`.
    pub fn find_offset_by_timestamp(
        &self,
        timestamp: i64,
        starting_offset: i64,
    ) -> io::Result<Option<TimestampOffset>> {
        let ts_entry = self.time_index.lookup(timestamp);
        let from = self
            .offset_index
            .lookup(ts_entry.offset.max(starting_offset))
            .position as u64;
        let mut found = None;
        let file = self.log.handle.share()?;
        walk_entries(&file, from, self.log.size, |_, entry| {
            let max_ts = match &entry {
                LogEntry::V2(b) => b.max_timestamp(),
                LogEntry::Legacy(m) => m.timestamp(),
            };
            if max_ts < timestamp {
                return Ok(ControlFlow::Continue(()));
            }
            // A damaged batch in a log we wrote ourselves is skipped, not fatal.
            let Ok(records) = entry.records(MAX_DECOMPRESSED_BATCH_BYTES) else {
                return Ok(ControlFlow::Continue(()));
            };
            for r in records.iter().flatten() {
                if r.timestamp >= timestamp && r.offset >= starting_offset {
                    found = Some(TimestampOffset {
                        timestamp: r.timestamp,
                        offset: r.offset,
                    });
                    return Ok(ControlFlow::Break(()));
                }
            }
            Ok(ControlFlow::Continue(()))
        })?;
        Ok(found)
    }

    /// Renames the files from `old_suffix` to `new_suffix` (e.g. "" to ".deleted").
    pub fn change_suffix(&mut self, old_suffix: &str, new_suffix: &str) -> io::Result<()> {
        let rename = |p: &Path| -> PathBuf {
            let name = p.file_name().and_then(|n| n.to_str()).unwrap_or_default();
            let stem = name.strip_suffix(old_suffix).unwrap_or(name);
            p.with_file_name(format!("{stem}{new_suffix}"))
        };
        let to = rename(&self.log.path);
        self.log.handle.rename(&to)?;
        self.log.path = to;
        let to = rename(self.offset_index.path());
        self.offset_index.rename(&to)?;
        let to = rename(self.time_index.path());
        self.time_index.rename(&to)?;
        let to = rename(self.txn_index.path());
        self.txn_index.rename_to(&to)
    }

    /// The paths of the segment's files (the `.txnindex` may not exist).
    pub fn paths(&self) -> [PathBuf; 4] {
        [
            self.log.path.clone(),
            self.offset_index.path().to_path_buf(),
            self.time_index.path().to_path_buf(),
            self.txn_index.path().to_path_buf(),
        ]
    }

    /// Sets the `.log` file's modification time (compaction keeps the original's).
    pub fn set_last_modified(&self, ms: i64) -> io::Result<()> {
        let t = std::time::UNIX_EPOCH + std::time::Duration::from_millis(ms.max(0) as u64);
        self.log.read(|file| file.set_modified(t))
    }

    pub fn last_modified_ms(&self) -> i64 {
        file_mtime_ms(&self.log.path).unwrap_or(0)
    }
}

pub(crate) fn file_mtime_ms(path: &Path) -> Option<i64> {
    let t = std::fs::metadata(path).ok()?.modified().ok()?;
    Some(t.duration_since(std::time::UNIX_EPOCH).ok()?.as_millis() as i64)
}
