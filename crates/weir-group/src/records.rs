//! The bytes of `__consumer_offsets` records in Kafka's own schemas (OffsetCommitKey/Value,
//! GroupMetadataKey/Value). Owns encoding and decoding only; must not know about live groups
//! or logs, and must never panic on stored bytes.
//!
//! Every key and value starts with an `i16` schema version. Key versions 0 and 1 are offset
//! commits, 2 is group metadata; higher ones belong to newer group types and are skipped.
//! Values up to version 3 use Kafka's classic encoding (`i16` string lengths, `i32` byte
//! lengths, -1 for null); version 4 is "flexible" (unsigned-varint lengths plus one, tagged
//! fields). KIP-915 promises that later versions only add tagged fields, so they are read as 4.

use thiserror::Error;

/// Why stored bytes could not be read (or a value could not be written).
#[derive(Debug, Error, PartialEq, Eq)]
pub(crate) enum RecordError {
    #[error("record ends early")]
    Truncated,
    #[error("negative length {0} for a non-nullable field")]
    NegativeLength(i64),
    #[error("string is not UTF-8")]
    InvalidUtf8,
    #[error("string of {0} bytes does not fit an i16 length")]
    StringTooLong(usize),
    #[error("unknown {kind} version {version}")]
    UnknownVersion { kind: &'static str, version: i16 },
}

/// Key schema versions.
pub(crate) const OFFSET_KEY_VERSION: i16 = 1;
pub(crate) const GROUP_KEY_VERSION: i16 = 2;
/// Value versions Weir writes.
pub(crate) const OFFSET_VALUE_VERSION: i16 = 3;
pub(crate) const OFFSET_VALUE_VERSION_WITH_EXPIRY: i16 = 1;
pub(crate) const GROUP_VALUE_VERSION: i16 = 3;

/// A decoded record key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum RecordKey {
    Offset {
        group: String,
        topic: String,
        partition: i32,
    },
    Group {
        group: String,
    },
    /// A key version this coordinator does not handle (KIP-848 consumer groups, share groups...).
    Other(i16),
}

/// OffsetCommitValue.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct OffsetValue {
    pub offset: i64,
    /// -1 when unknown.
    pub leader_epoch: i32,
    pub metadata: String,
    pub commit_timestamp: i64,
    /// Only version 1 carries it: the expiry asked by an OffsetCommit v2–v4 retention time.
    pub expire_timestamp: Option<i64>,
}

/// GroupMetadataValue.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct GroupValue {
    pub protocol_type: String,
    pub generation: i32,
    pub protocol: Option<String>,
    pub leader: Option<String>,
    /// -1 when unknown (versions 0 and 1).
    pub current_state_timestamp: i64,
    pub members: Vec<MemberValue>,
}

/// GroupMetadataValue.MemberMetadata.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct MemberValue {
    pub member_id: String,
    pub group_instance_id: Option<String>,
    pub client_id: String,
    pub client_host: String,
    pub rebalance_timeout: i32,
    pub session_timeout: i32,
    pub subscription: Vec<u8>,
    pub assignment: Vec<u8>,
}

// ---------------------------------------------------------------------------------------------
// Writing (classic encoding only: Weir writes key v1/v2, offset value v3 (v1 with an expiry),
// group value v3).

struct Writer(Vec<u8>);

impl Writer {
    fn new() -> Self {
        Writer(Vec::with_capacity(64))
    }
    fn i16(&mut self, v: i16) {
        self.0.extend_from_slice(&v.to_be_bytes());
    }
    fn i32(&mut self, v: i32) {
        self.0.extend_from_slice(&v.to_be_bytes());
    }
    fn i64(&mut self, v: i64) {
        self.0.extend_from_slice(&v.to_be_bytes());
    }
    fn string(&mut self, s: &str) -> Result<(), RecordError> {
        let len = i16::try_from(s.len()).map_err(|_| RecordError::StringTooLong(s.len()))?;
        self.i16(len);
        self.0.extend_from_slice(s.as_bytes());
        Ok(())
    }
    fn nullable_string(&mut self, s: Option<&str>) -> Result<(), RecordError> {
        match s {
            Some(s) => self.string(s),
            None => {
                self.i16(-1);
                Ok(())
            }
        }
    }
    fn bytes(&mut self, b: &[u8]) -> Result<(), RecordError> {
        let len = i32::try_from(b.len()).map_err(|_| RecordError::StringTooLong(b.len()))?;
        self.i32(len);
        self.0.extend_from_slice(b);
        Ok(())
    }
}

/// Whether a string can be written with Kafka's classic `i16` length.
pub(crate) fn fits_string(s: &str) -> bool {
    s.len() <= i16::MAX as usize
}

/// OffsetCommitKey, version 1: group, topic, partition.
pub(crate) fn encode_offset_key(
    group: &str,
    topic: &str,
    partition: i32,
) -> Result<Vec<u8>, RecordError> {
    let mut w = Writer::new();
    w.i16(OFFSET_KEY_VERSION);
    w.string(group)?;
    w.string(topic)?;
    w.i32(partition);
    Ok(w.0)
}

/// GroupMetadataKey, version 2: group.
pub(crate) fn encode_group_key(group: &str) -> Result<Vec<u8>, RecordError> {
    let mut w = Writer::new();
    w.i16(GROUP_KEY_VERSION);
    w.string(group)?;
    Ok(w.0)
}

/// OffsetCommitValue: version 3 (offset, leader epoch, metadata, commit timestamp), or — as
/// Kafka does when the committer asked for a retention time — version 1 with the expiry.
pub(crate) fn encode_offset_value(v: &OffsetValue) -> Result<Vec<u8>, RecordError> {
    let mut w = Writer::new();
    match v.expire_timestamp {
        None => {
            w.i16(OFFSET_VALUE_VERSION);
            w.i64(v.offset);
            w.i32(v.leader_epoch);
            w.string(&v.metadata)?;
            w.i64(v.commit_timestamp);
        }
        Some(expire) => {
            w.i16(OFFSET_VALUE_VERSION_WITH_EXPIRY);
            w.i64(v.offset);
            w.string(&v.metadata)?;
            w.i64(v.commit_timestamp);
            w.i64(expire);
        }
    }
    Ok(w.0)
}

/// GroupMetadataValue, version 3.
pub(crate) fn encode_group_value(v: &GroupValue) -> Result<Vec<u8>, RecordError> {
    let mut w = Writer::new();
    w.i16(GROUP_VALUE_VERSION);
    w.string(&v.protocol_type)?;
    w.i32(v.generation);
    w.nullable_string(v.protocol.as_deref())?;
    w.nullable_string(v.leader.as_deref())?;
    w.i64(v.current_state_timestamp);
    let count = i32::try_from(v.members.len()).map_err(|_| RecordError::Truncated)?;
    w.i32(count);
    for m in &v.members {
        w.string(&m.member_id)?;
        w.nullable_string(m.group_instance_id.as_deref())?;
        w.string(&m.client_id)?;
        w.string(&m.client_host)?;
        w.i32(m.rebalance_timeout);
        w.i32(m.session_timeout);
        w.bytes(&m.subscription)?;
        w.bytes(&m.assignment)?;
    }
    Ok(w.0)
}

// ---------------------------------------------------------------------------------------------
// Reading.

struct Reader<'a> {
    buf: &'a [u8],
}

impl<'a> Reader<'a> {
    fn new(buf: &'a [u8]) -> Self {
        Reader { buf }
    }
    fn take(&mut self, n: usize) -> Result<&'a [u8], RecordError> {
        if self.buf.len() < n {
            return Err(RecordError::Truncated);
        }
        let (head, tail) = self.buf.split_at(n);
        self.buf = tail;
        Ok(head)
    }
    fn array<const N: usize>(&mut self) -> Result<[u8; N], RecordError> {
        let mut out = [0u8; N];
        out.copy_from_slice(self.take(N)?);
        Ok(out)
    }
    fn i16(&mut self) -> Result<i16, RecordError> {
        Ok(i16::from_be_bytes(self.array()?))
    }
    fn i32(&mut self) -> Result<i32, RecordError> {
        Ok(i32::from_be_bytes(self.array()?))
    }
    fn i64(&mut self) -> Result<i64, RecordError> {
        Ok(i64::from_be_bytes(self.array()?))
    }
    fn uvarint(&mut self) -> Result<u64, RecordError> {
        let mut value = 0u64;
        for shift in (0..64).step_by(7) {
            let [b] = self.array::<1>()?;
            value |= u64::from(b & 0x7f) << shift;
            if b & 0x80 == 0 {
                return Ok(value);
            }
        }
        Err(RecordError::Truncated)
    }
    fn utf8(&mut self, len: usize) -> Result<String, RecordError> {
        let raw = self.take(len)?;
        std::str::from_utf8(raw)
            .map(str::to_owned)
            .map_err(|_| RecordError::InvalidUtf8)
    }

    /// A length: classic (`i16`/`i32`, -1 for null) or compact (unsigned varint of length + 1,
    /// 0 for null). `None` is null.
    fn length(&mut self, flexible: bool, wide: bool) -> Result<Option<usize>, RecordError> {
        let len: i64 = if flexible {
            match self.uvarint()? {
                0 => -1,
                n => i64::try_from(n - 1).map_err(|_| RecordError::Truncated)?,
            }
        } else if wide {
            i64::from(self.i32()?)
        } else {
            i64::from(self.i16()?)
        };
        if len < 0 {
            return Ok(None);
        }
        let len = usize::try_from(len).map_err(|_| RecordError::Truncated)?;
        // Every element or byte takes at least one byte: a larger length is a lie, not a
        // reason to allocate.
        if len > self.buf.len() {
            return Err(RecordError::Truncated);
        }
        Ok(Some(len))
    }

    /// Classic (`i16` length) or compact nullable string.
    fn nullable_string(&mut self, flexible: bool) -> Result<Option<String>, RecordError> {
        match self.length(flexible, false)? {
            None => Ok(None),
            Some(len) => self.utf8(len).map(Some),
        }
    }
    fn string(&mut self, flexible: bool) -> Result<String, RecordError> {
        self.nullable_string(flexible)?
            .ok_or(RecordError::NegativeLength(-1))
    }
    fn bytes(&mut self, flexible: bool) -> Result<Vec<u8>, RecordError> {
        match self.length(flexible, true)? {
            None => Err(RecordError::NegativeLength(-1)),
            Some(len) => Ok(self.take(len)?.to_vec()),
        }
    }
    fn array_len(&mut self, flexible: bool) -> Result<usize, RecordError> {
        self.length(flexible, true)?
            .ok_or(RecordError::NegativeLength(-1))
    }
    /// Skips a flexible struct's tagged fields.
    fn tagged_fields(&mut self) -> Result<(), RecordError> {
        let count = self.uvarint()?;
        for _ in 0..count {
            let _tag = self.uvarint()?;
            let size = usize::try_from(self.uvarint()?).map_err(|_| RecordError::Truncated)?;
            self.take(size)?;
        }
        Ok(())
    }
}

/// Reads a record key.
pub(crate) fn decode_key(bytes: &[u8]) -> Result<RecordKey, RecordError> {
    let mut r = Reader::new(bytes);
    let version = r.i16()?;
    match version {
        0 | 1 => Ok(RecordKey::Offset {
            group: r.string(false)?,
            topic: r.string(false)?,
            partition: r.i32()?,
        }),
        2 => Ok(RecordKey::Group {
            group: r.string(false)?,
        }),
        other => Ok(RecordKey::Other(other)),
    }
}

/// Reads an OffsetCommitValue of any version Kafka writes (0–4; later ones read as 4).
pub(crate) fn decode_offset_value(bytes: &[u8]) -> Result<OffsetValue, RecordError> {
    let mut r = Reader::new(bytes);
    let version = r.i16()?;
    if version < 0 {
        return Err(RecordError::UnknownVersion {
            kind: "OffsetCommitValue",
            version,
        });
    }
    let flexible = version >= 4;
    let offset = r.i64()?;
    let leader_epoch = if version >= 3 { r.i32()? } else { -1 };
    let metadata = r.nullable_string(flexible)?.unwrap_or_default();
    let commit_timestamp = r.i64()?;
    let expire_timestamp = if version == 1 {
        Some(r.i64()?).filter(|t| *t != -1)
    } else {
        None
    };
    if flexible {
        r.tagged_fields()?;
    }
    Ok(OffsetValue {
        offset,
        leader_epoch,
        metadata,
        commit_timestamp,
        expire_timestamp,
    })
}

/// Reads a GroupMetadataValue of any version Kafka writes (0–4; later ones read as 4).
pub(crate) fn decode_group_value(bytes: &[u8]) -> Result<GroupValue, RecordError> {
    let mut r = Reader::new(bytes);
    let version = r.i16()?;
    if version < 0 {
        return Err(RecordError::UnknownVersion {
            kind: "GroupMetadataValue",
            version,
        });
    }
    let flexible = version >= 4;
    let protocol_type = r.string(flexible)?;
    let generation = r.i32()?;
    let protocol = r.nullable_string(flexible)?;
    let leader = r.nullable_string(flexible)?;
    let current_state_timestamp = if version >= 2 { r.i64()? } else { -1 };
    let count = r.array_len(flexible)?;
    let mut members = Vec::with_capacity(count);
    for _ in 0..count {
        let member_id = r.string(flexible)?;
        let group_instance_id = if version >= 3 {
            r.nullable_string(flexible)?
        } else {
            None
        };
        let client_id = r.string(flexible)?;
        let client_host = r.string(flexible)?;
        let rebalance_timeout = if version >= 1 { Some(r.i32()?) } else { None };
        let session_timeout = r.i32()?;
        let subscription = r.bytes(flexible)?;
        let assignment = r.bytes(flexible)?;
        if flexible {
            r.tagged_fields()?;
        }
        members.push(MemberValue {
            member_id,
            group_instance_id,
            client_id,
            client_host,
            // Version 0 had no rebalance timeout; Kafka uses the session timeout.
            rebalance_timeout: rebalance_timeout.unwrap_or(session_timeout),
            session_timeout,
            subscription,
            assignment,
        });
    }
    if flexible {
        r.tagged_fields()?;
    }
    Ok(GroupValue {
        protocol_type,
        generation,
        protocol,
        leader,
        current_state_timestamp,
        members,
    })
}
