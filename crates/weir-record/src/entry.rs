//! Walking a buffer of log entries of any magic, as they sit in a segment file or a
//! produce request: each entry is offset (8) + length (4) + body, and the magic byte is at
//! position 16 in every format. The walk stops at the first entry that is cut short or
//! whose header cannot be trusted, and says which, so that recovery can truncate there and
//! tools can report a torn tail.

use crate::batch::{read_i32, read_i64, RecordBatch, Records, LOG_OVERHEAD};
use crate::compression::Compression;
use crate::error::{RecordError, Result};
use crate::legacy::{LegacyMessage, LegacyRecords};
use crate::record::Record;

/// One entry of a log: a v2 batch, or a legacy message (possibly a compressed wrapper).
#[derive(Debug, Clone, Copy)]
pub enum LogEntry<'a> {
    V2(RecordBatch<'a>),
    Legacy(LegacyMessage<'a>),
}

impl<'a> LogEntry<'a> {
    /// Reads the entry at the start of `buf` (header checks only, no CRC check).
    pub fn parse(buf: &'a [u8]) -> Result<Self> {
        if buf.len() < LOG_OVERHEAD + 5 {
            return Err(RecordError::Truncated {
                needed: LOG_OVERHEAD + 5,
                available: buf.len(),
            });
        }
        match buf[16] as i8 {
            2 => RecordBatch::parse(buf).map(LogEntry::V2),
            0 | 1 => LegacyMessage::parse(buf).map(LogEntry::Legacy),
            other => Err(RecordError::BadMagic(other)),
        }
    }
    pub fn as_bytes(&self) -> &'a [u8] {
        match self {
            LogEntry::V2(b) => b.as_bytes(),
            LogEntry::Legacy(m) => m.as_bytes(),
        }
    }
    pub fn size_in_bytes(&self) -> usize {
        self.as_bytes().len()
    }
    pub fn magic(&self) -> i8 {
        match self {
            LogEntry::V2(b) => b.magic(),
            LogEntry::Legacy(m) => m.magic(),
        }
    }
    /// The last offset the entry covers (a legacy wrapper's offset field).
    pub fn last_offset(&self) -> i64 {
        match self {
            LogEntry::V2(b) => b.last_offset(),
            LogEntry::Legacy(m) => m.offset(),
        }
    }
    pub fn is_crc_valid(&self) -> bool {
        match self {
            LogEntry::V2(b) => b.is_crc_valid(),
            LogEntry::Legacy(m) => m.is_crc_valid(),
        }
    }
    pub fn validate_crc(&self) -> Result<()> {
        match self {
            LogEntry::V2(b) => b.validate_crc(),
            LogEntry::Legacy(m) => m.validate_crc(),
        }
    }
    pub fn compression(&self) -> Result<Compression> {
        match self {
            LogEntry::V2(b) => b.compression(),
            LogEntry::Legacy(m) => m.compression(),
        }
    }
    /// The entry's records, decompressed (within `max_decompressed` bytes) if needed.
    pub fn records(&self, max_decompressed: usize) -> Result<EntryRecords<'a>> {
        match self {
            LogEntry::V2(b) => b.records(max_decompressed).map(EntryRecords::V2),
            LogEntry::Legacy(m) => m.records(max_decompressed).map(EntryRecords::Legacy),
        }
    }
}

/// The records of a `LogEntry`.
pub enum EntryRecords<'a> {
    V2(Records<'a>),
    Legacy(LegacyRecords<'a>),
}

impl EntryRecords<'_> {
    /// Every record in order; a malformed v2 record ends the walk with its error.
    pub fn iter(&self) -> Box<dyn Iterator<Item = Result<Record<'_>>> + '_> {
        match self {
            EntryRecords::V2(r) => Box::new(r.iter()),
            EntryRecords::Legacy(r) => Box::new(r.iter().map(Ok)),
        }
    }
}

/// Why a walk over entries stopped before the end of the buffer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EntryError {
    /// Byte position of the entry that could not be read.
    pub position: usize,
    /// Bytes left from that position to the end of the buffer.
    pub remaining: usize,
    pub error: RecordError,
}

impl EntryError {
    /// True when the buffer simply ends inside an entry (a torn write), as opposed to an
    /// entry header that is itself invalid.
    pub fn is_torn_tail(&self) -> bool {
        matches!(self.error, RecordError::Truncated { .. })
    }
}

/// Iterates the entries of a buffer, with the byte position of each; yields at most one
/// error, then stops.
pub struct LogEntries<'a> {
    buf: &'a [u8],
    pos: usize,
    done: bool,
}

impl<'a> LogEntries<'a> {
    pub fn new(buf: &'a [u8]) -> Self {
        LogEntries {
            buf,
            pos: 0,
            done: false,
        }
    }
    /// Bytes consumed by the entries returned so far.
    pub fn position(&self) -> usize {
        self.pos
    }
}

impl<'a> Iterator for LogEntries<'a> {
    type Item = std::result::Result<(usize, LogEntry<'a>), EntryError>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.done || self.pos >= self.buf.len() {
            return None;
        }
        let rest = &self.buf[self.pos..];
        match LogEntry::parse(rest) {
            Ok(entry) => {
                let at = self.pos;
                self.pos += entry.size_in_bytes();
                Some(Ok((at, entry)))
            }
            Err(error) => {
                self.done = true;
                Some(Err(EntryError {
                    position: self.pos,
                    remaining: rest.len(),
                    error,
                }))
            }
        }
    }
}

/// The base offset and total size declared by the entry header at the start of `buf`,
/// without any other check (what a reader needs to skip ahead).
pub fn peek_offset_and_size(buf: &[u8]) -> Option<(i64, usize)> {
    if buf.len() < LOG_OVERHEAD {
        return None;
    }
    let len = read_i32(buf, 8);
    (len >= 0).then(|| (read_i64(buf, 0), LOG_OVERHEAD + len as usize))
}
