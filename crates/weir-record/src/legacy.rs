//! The legacy message formats, magic 0 and 1 (`LegacyRecord`, `AbstractLegacyRecordBatch`):
//! a view of one message, the records of a compressed wrapper with Kafka's offset rules,
//! and conversion of a legacy message set into one v2 batch. Weir only reads these (old
//! segments, old clients' data); it writes v2.
//!
//! Entry layout: offset i64, size i32, crc u32 (CRC-32 from magic to the end), magic i8,
//! attributes i8, timestamp i64 (v1 only), key (i32 length + bytes), value (likewise).

use std::borrow::Cow;

use crate::batch::{read_i32, read_i64, read_u32, TimestampType, LOG_OVERHEAD, NO_TIMESTAMP};
use crate::builder::BatchBuilder;
use crate::compression::{self, Compression, CompressionConfig};
use crate::crc::crc32;
use crate::error::{need, RecordError, Result};
use crate::record::{Headers, Record};

const CRC_AT: usize = 12;
const MAGIC_AT: usize = 16;
const ATTRIBUTES_AT: usize = 17;
const TIMESTAMP_AT: usize = 18;
/// Smallest `size` field: crc, magic, attributes, key length, value length (+ timestamp in v1).
pub const V0_MIN_SIZE: usize = 14;
pub const V1_MIN_SIZE: usize = 22;

/// One legacy message (possibly a compressed wrapper) borrowed from a buffer.
#[derive(Clone, Copy)]
pub struct LegacyMessage<'a> {
    buf: &'a [u8],
    key_at: usize,
    value_at: usize,
}

impl std::fmt::Debug for LegacyMessage<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LegacyMessage")
            .field("offset", &self.offset())
            .field("magic", &self.magic())
            .field("size", &self.size_in_bytes())
            .finish()
    }
}

impl<'a> LegacyMessage<'a> {
    /// Reads the message at the start of `buf`, checking its size and field lengths (not
    /// its CRC: see `validate_crc`). Bytes after it are ignored.
    pub fn parse(buf: &'a [u8]) -> Result<Self> {
        need(buf, MAGIC_AT + 1)?;
        let magic = buf[MAGIC_AT] as i8;
        let min = match magic {
            0 => V0_MIN_SIZE,
            1 => V1_MIN_SIZE,
            other => return Err(RecordError::BadMagic(other)),
        };
        let size = read_i32(buf, 8);
        if size < min as i32 {
            return Err(RecordError::BadLength(
                "message size below the minimum for its magic",
            ));
        }
        let total = LOG_OVERHEAD + size as usize;
        need(buf, total)?;
        let buf = &buf[..total];
        let key_at = if magic == 0 {
            TIMESTAMP_AT
        } else {
            TIMESTAMP_AT + 8
        };
        let key_len = read_i32(buf, key_at);
        let value_at = match key_len {
            -1 => key_at + 4,
            n if n < -1 => return Err(RecordError::BadLength("negative key length")),
            n => key_at + 4 + n as usize,
        };
        if value_at + 4 > total {
            return Err(RecordError::BadLength(
                "key runs past the end of the message",
            ));
        }
        let value_len = read_i32(buf, value_at);
        let end = match value_len {
            -1 => value_at + 4,
            n if n < -1 => return Err(RecordError::BadLength("negative value length")),
            n => value_at + 4 + n as usize,
        };
        if end != total {
            return Err(RecordError::BadLength(
                "message size does not match its fields",
            ));
        }
        Ok(LegacyMessage {
            buf,
            key_at,
            value_at,
        })
    }

    pub fn as_bytes(&self) -> &'a [u8] {
        self.buf
    }
    pub fn size_in_bytes(&self) -> usize {
        self.buf.len()
    }
    /// The offset field: for a compressed wrapper, the offset of its last inner record.
    pub fn offset(&self) -> i64 {
        read_i64(self.buf, 0)
    }
    pub fn crc(&self) -> u32 {
        read_u32(self.buf, CRC_AT)
    }
    pub fn compute_crc(&self) -> u32 {
        crc32(&self.buf[MAGIC_AT..])
    }
    pub fn is_crc_valid(&self) -> bool {
        self.crc() == self.compute_crc()
    }
    pub fn validate_crc(&self) -> Result<()> {
        let (stored, computed) = (self.crc(), self.compute_crc());
        if stored == computed {
            Ok(())
        } else {
            Err(RecordError::CrcMismatch { stored, computed })
        }
    }
    pub fn magic(&self) -> i8 {
        self.buf[MAGIC_AT] as i8
    }
    pub fn attributes(&self) -> u8 {
        self.buf[ATTRIBUTES_AT]
    }
    /// The codec of a wrapper. zstd (4) needs magic 2, so it is an error here, as in Kafka.
    pub fn compression(&self) -> Result<Compression> {
        match self.attributes() & 0x07 {
            4 => Err(RecordError::InvalidRecord("zstd requires magic 2")),
            id => Compression::from_id(id),
        }
    }
    pub fn timestamp_type(&self) -> TimestampType {
        if self.magic() == 0 {
            TimestampType::NoTimestamp
        } else if self.attributes() & 0x08 != 0 {
            TimestampType::LogAppendTime
        } else {
            TimestampType::CreateTime
        }
    }
    /// The timestamp field (v1), or -1 for v0.
    pub fn timestamp(&self) -> i64 {
        if self.magic() == 0 {
            NO_TIMESTAMP
        } else {
            read_i64(self.buf, TIMESTAMP_AT)
        }
    }
    pub fn key(&self) -> Option<&'a [u8]> {
        bytes_at(self.buf, self.key_at)
    }
    pub fn value(&self) -> Option<&'a [u8]> {
        bytes_at(self.buf, self.value_at)
    }

    /// The records this entry holds: itself when uncompressed, else the inner messages of
    /// the wrapper with absolute offsets (v1: relative to the wrapper's offset; v0: as
    /// stored) and, under LogAppendTime, the wrapper's timestamp.
    pub fn records(&self, max_decompressed: usize) -> Result<LegacyRecords<'a>> {
        let codec = self.compression()?;
        if codec == Compression::None {
            return Ok(LegacyRecords {
                data: Cow::Borrowed(self.buf),
                entries: vec![InnerEntry {
                    at: 0,
                    offset: self.offset(),
                    timestamp: self.timestamp(),
                }],
            });
        }
        let value = self.value().ok_or(RecordError::InvalidRecord(
            "compressed wrapper without a value",
        ))?;
        let mut data = Vec::new();
        if self.magic() == 0 {
            compression::decompress_legacy_v0(codec, value, max_decompressed, &mut data)?;
        } else {
            compression::decompress_into(codec, value, max_decompressed, &mut data)?;
        }
        let mut entries = Vec::new();
        let mut at = 0;
        while at < data.len() {
            let inner = LegacyMessage::parse(&data[at..])?;
            if inner.magic() != self.magic() {
                return Err(RecordError::InvalidRecord(
                    "inner message magic differs from its wrapper's",
                ));
            }
            if inner.attributes() & 0x07 != 0 {
                return Err(RecordError::InvalidRecord("nested compressed message"));
            }
            entries.push(InnerEntry {
                at,
                offset: inner.offset(),
                timestamp: inner.timestamp(),
            });
            at += inner.size_in_bytes();
        }
        if self.magic() == 1 {
            let wrapper_offset = self.offset();
            let last_inner = entries.last().map_or(0, |e| e.offset);
            // A wrapper offset of 0 is a producer's: inner offsets are then used as they are.
            if wrapper_offset != 0 {
                let base = wrapper_offset
                    .checked_sub(last_inner)
                    .filter(|b| *b >= 0)
                    .ok_or(RecordError::InvalidRecord(
                        "wrapper offset below its last inner relative offset",
                    ))?;
                for e in &mut entries {
                    e.offset = base.wrapping_add(e.offset);
                }
            }
            if self.timestamp_type() == TimestampType::LogAppendTime {
                let ts = self.timestamp();
                for e in &mut entries {
                    e.timestamp = ts;
                }
            }
        }
        Ok(LegacyRecords {
            data: Cow::Owned(data),
            entries,
        })
    }
}

fn bytes_at(buf: &[u8], at: usize) -> Option<&[u8]> {
    // Lengths were checked in `parse`.
    let len = read_i32(buf, at);
    (len >= 0).then(|| &buf[at + 4..at + 4 + len as usize])
}

#[derive(Debug, Clone, Copy)]
struct InnerEntry {
    at: usize,
    offset: i64,
    timestamp: i64,
}

/// The records of one legacy entry, already parsed and validated.
pub struct LegacyRecords<'a> {
    data: Cow<'a, [u8]>,
    entries: Vec<InnerEntry>,
}

impl LegacyRecords<'_> {
    pub fn len(&self) -> usize {
        self.entries.len()
    }
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }
    pub fn iter(&self) -> impl Iterator<Item = Record<'_>> + '_ {
        self.entries.iter().filter_map(move |e| {
            // Every entry parsed cleanly when `LegacyRecords` was made.
            let m = LegacyMessage::parse(&self.data[e.at..]).ok()?;
            Some(Record {
                offset: e.offset,
                timestamp: e.timestamp,
                key: m.key(),
                value: m.value(),
                headers: Headers::default(),
            })
        })
    }
}

/// Converts a legacy message set (one or more entries, any codec) into one v2 batch with
/// the same offsets, timestamps, keys and values, compressed with `compression`.
pub fn convert_to_v2(
    message_set: &[u8],
    compression: impl Into<CompressionConfig>,
    max_decompressed: usize,
) -> Result<Vec<u8>> {
    let compression = compression.into();
    let mut builder: Option<BatchBuilder> = None;
    let mut at = 0;
    while at < message_set.len() {
        let message = LegacyMessage::parse(&message_set[at..])?;
        message.validate_crc()?;
        let records = message.records(max_decompressed)?;
        for r in records.iter() {
            let b =
                builder.get_or_insert_with(|| BatchBuilder::new(compression, r.offset, usize::MAX));
            b.append_with_offset(r.offset, r.timestamp, r.key, r.value, &[])?;
        }
        at += message.size_in_bytes();
    }
    match builder {
        Some(b) => Ok(b.build()?.bytes),
        None => Ok(Vec::new()),
    }
}
