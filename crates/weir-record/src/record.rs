//! One record, as every format yields it: offset, timestamp, key, value and headers
//! borrowed from the batch's (possibly decompressed) bytes; the v2 record codec
//! (`DefaultRecord`); and control records (transaction markers and the like).

use crate::error::{RecordError, Result};
use crate::varint::{
    decode_varint, decode_varlong, encode_varint, encode_varlong, varint_size, varlong_size,
};

/// A record header: a key (UTF-8 in every client, but kept as bytes) and a nullable value.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Header<'a> {
    pub key: &'a [u8],
    pub value: Option<&'a [u8]>,
}

impl<'a> Header<'a> {
    pub fn new(key: &'a str, value: Option<&'a [u8]>) -> Self {
        Header {
            key: key.as_bytes(),
            value,
        }
    }
}

/// A record read from a batch or a legacy message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Record<'a> {
    /// Absolute offset.
    pub offset: i64,
    /// Milliseconds since the epoch; the batch's max timestamp under LogAppendTime; -1 for v0.
    pub timestamp: i64,
    pub key: Option<&'a [u8]>,
    pub value: Option<&'a [u8]>,
    pub headers: Headers<'a>,
}

/// The headers of one record, decoded lazily from bytes already validated.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Headers<'a> {
    raw: &'a [u8],
    count: u32,
}

impl<'a> Headers<'a> {
    pub fn len(&self) -> usize {
        self.count as usize
    }
    pub fn is_empty(&self) -> bool {
        self.count == 0
    }
    pub fn iter(&self) -> HeaderIter<'a> {
        HeaderIter {
            rest: self.raw,
            remaining: self.count,
        }
    }
}

impl<'a> IntoIterator for Headers<'a> {
    type Item = Header<'a>;
    type IntoIter = HeaderIter<'a>;
    fn into_iter(self) -> HeaderIter<'a> {
        self.iter()
    }
}

/// Iterator over validated headers.
pub struct HeaderIter<'a> {
    rest: &'a [u8],
    remaining: u32,
}

impl<'a> Iterator for HeaderIter<'a> {
    type Item = Header<'a>;
    fn next(&mut self) -> Option<Header<'a>> {
        if self.remaining == 0 {
            return None;
        }
        // The bytes were checked when the record was parsed; a failure here would be a bug
        // in this module, and is treated as the end of the headers rather than a panic.
        let (header, used) = parse_header(self.rest).ok()?;
        self.rest = &self.rest[used..];
        self.remaining -= 1;
        Some(header)
    }
}

/// A forward-only reader over one record's bytes. Each read checks the bounds once and
/// advances; this is the hottest loop of a fetch-side consumer and of batch validation.
struct Cursor<'a> {
    rest: &'a [u8],
}

impl<'a> Cursor<'a> {
    #[inline(always)]
    fn varint(&mut self) -> Result<i32> {
        let (v, n) = decode_varint(self.rest)?;
        self.rest = &self.rest[n..];
        Ok(v)
    }

    #[inline(always)]
    fn varlong(&mut self) -> Result<i64> {
        let (v, n) = decode_varlong(self.rest)?;
        self.rest = &self.rest[n..];
        Ok(v)
    }

    #[inline(always)]
    fn bytes(&mut self, n: usize) -> Result<&'a [u8]> {
        if n > self.rest.len() {
            return Err(RecordError::BadLength(
                "field runs past the end of its record",
            ));
        }
        let (head, tail) = self.rest.split_at(n);
        self.rest = tail;
        Ok(head)
    }

    #[inline(always)]
    fn nullable_bytes(&mut self) -> Result<Option<&'a [u8]>> {
        match self.varint()? {
            -1 => Ok(None),
            n if n < -1 => Err(RecordError::BadLength("negative byte length")),
            n => self.bytes(n as usize).map(Some),
        }
    }

    #[inline(always)]
    fn header(&mut self) -> Result<Header<'a>> {
        let key_len = self.varint()?;
        if key_len < 0 {
            return Err(RecordError::InvalidRecord("null header key"));
        }
        let key = self.bytes(key_len as usize)?;
        let value = self.nullable_bytes()?;
        Ok(Header { key, value })
    }
}

fn parse_header(buf: &[u8]) -> Result<(Header<'_>, usize)> {
    let mut c = Cursor { rest: buf };
    let h = c.header()?;
    Ok((h, buf.len() - c.rest.len()))
}

/// The same walk as `Cursor`, with `Option` instead of `Result`: small return values keep
/// the per-record loop in registers. On `None` the caller re-parses with `Cursor` to learn
/// the precise error; that happens only for malformed input.
struct FastCursor<'a> {
    rest: &'a [u8],
}

impl<'a> FastCursor<'a> {
    #[inline(always)]
    fn raw(&mut self, max_bytes: usize) -> Option<u64> {
        let mut z = 0u64;
        let mut i = 0;
        loop {
            let b = *self.rest.get(i)?;
            z |= ((b & 0x7f) as u64) << (7 * i);
            i += 1;
            if b < 0x80 {
                self.rest = &self.rest[i..];
                return Some(z);
            }
            if i == max_bytes {
                return None;
            }
        }
    }

    #[inline(always)]
    fn varint(&mut self) -> Option<i32> {
        // As Kafka: up to 5 bytes, bits past the 32nd dropped.
        let z = self.raw(5)? as u32;
        Some(((z >> 1) as i32) ^ -((z & 1) as i32))
    }

    #[inline(always)]
    fn varlong(&mut self) -> Option<i64> {
        let z = self.raw(10)?;
        Some(((z >> 1) as i64) ^ -((z & 1) as i64))
    }

    #[inline(always)]
    fn bytes(&mut self, n: usize) -> Option<&'a [u8]> {
        if n > self.rest.len() {
            return None;
        }
        let (head, tail) = self.rest.split_at(n);
        self.rest = tail;
        Some(head)
    }

    #[inline(always)]
    fn nullable_bytes(&mut self) -> Option<Option<&'a [u8]>> {
        match self.varint()? {
            -1 => Some(None),
            n if n < -1 => None,
            n => self.bytes(n as usize).map(Some),
        }
    }
}

#[inline(always)]
fn parse_record_fast(
    buf: &[u8],
    base_offset: i64,
    base_timestamp: i64,
    log_append_time: Option<i64>,
) -> Option<(Record<'_>, usize)> {
    let mut outer = FastCursor { rest: buf };
    let length = outer.varint()?;
    if length < 0 {
        return None;
    }
    let prefix = buf.len() - outer.rest.len();
    let mut c = FastCursor {
        rest: outer.bytes(length as usize)?,
    };
    c.bytes(1)?; // attributes: unused by Kafka today
    let ts_delta = c.varlong()?;
    let offset_delta = c.varint()?;
    let key = c.nullable_bytes()?;
    let value = c.nullable_bytes()?;
    let header_count = c.varint()?;
    if header_count < 0 {
        return None;
    }
    let headers_raw = c.rest;
    for _ in 0..header_count {
        let key_len = c.varint()?;
        if key_len < 0 {
            return None;
        }
        c.bytes(key_len as usize)?;
        c.nullable_bytes()?;
    }
    if !c.rest.is_empty() {
        return None;
    }
    let timestamp = match log_append_time {
        Some(t) => t,
        None => base_timestamp.wrapping_add(ts_delta),
    };
    Some((
        Record {
            offset: base_offset.wrapping_add(offset_delta as i64),
            timestamp,
            key,
            value,
            headers: Headers {
                raw: headers_raw,
                count: header_count as u32,
            },
        },
        prefix + length as usize,
    ))
}

/// Parses one v2 record from the front of `buf`; returns it and the bytes it used.
#[inline]
pub(crate) fn parse_record(
    buf: &[u8],
    base_offset: i64,
    base_timestamp: i64,
    log_append_time: Option<i64>,
) -> Result<(Record<'_>, usize)> {
    match parse_record_fast(buf, base_offset, base_timestamp, log_append_time) {
        Some(parsed) => Ok(parsed),
        None => Err(record_error(buf)),
    }
}

/// Walks `count` records of an uncompressed records section without building them,
/// checking each record's structure and that every offset delta lies in
/// `0..=max_offset_delta`; returns the largest timestamp delta. This is the whole-batch
/// check a broker or a careful reader makes, kept apart from iteration so it stays tight.
pub(crate) fn walk_records(mut buf: &[u8], count: i32, max_offset_delta: i32) -> Result<i64> {
    let mut max_ts_delta = i64::MIN;
    for _ in 0..count {
        let mut outer = FastCursor { rest: buf };
        let step = (|| {
            let length = outer.varint()?;
            if length < 0 {
                return None;
            }
            let mut c = FastCursor {
                rest: outer.bytes(length as usize)?,
            };
            c.bytes(1)?;
            let ts_delta = c.varlong()?;
            let offset_delta = c.varint()?;
            if !(0..=max_offset_delta).contains(&offset_delta) {
                return Some(Err(RecordError::InvalidRecord(
                    "record offset outside the batch's offset range",
                )));
            }
            c.nullable_bytes()?;
            c.nullable_bytes()?;
            let header_count = c.varint()?;
            if header_count < 0 {
                return None;
            }
            for _ in 0..header_count {
                let key_len = c.varint()?;
                if key_len < 0 {
                    return None;
                }
                c.bytes(key_len as usize)?;
                c.nullable_bytes()?;
            }
            c.rest.is_empty().then_some(Ok(ts_delta))
        })();
        match step {
            Some(Ok(ts_delta)) => {
                max_ts_delta = max_ts_delta.max(ts_delta);
                buf = outer.rest;
            }
            Some(Err(e)) => return Err(e),
            None => return Err(record_error(buf)),
        }
    }
    if !buf.is_empty() {
        return Err(RecordError::BadLength(
            "bytes remain after the batch's declared record count",
        ));
    }
    Ok(max_ts_delta)
}

/// Why `buf` does not start with a valid record (the fast path already said it doesn't).
#[cold]
#[inline(never)]
fn record_error(buf: &[u8]) -> RecordError {
    let check = || -> Result<()> {
        let (length, n) = decode_varint(buf)?;
        if length < 0 {
            return Err(RecordError::BadLength("negative record length"));
        }
        let body_end = n + length as usize;
        if body_end > buf.len() {
            return Err(RecordError::Truncated {
                needed: body_end,
                available: buf.len(),
            });
        }
        let mut c = Cursor {
            rest: &buf[n..body_end],
        };
        c.bytes(1)?;
        c.varlong()?;
        c.varint()?;
        c.nullable_bytes()?;
        c.nullable_bytes()?;
        let header_count = c.varint()?;
        if header_count < 0 {
            return Err(RecordError::BadLength("negative header count"));
        }
        for _ in 0..header_count {
            c.header()?;
        }
        if !c.rest.is_empty() {
            return Err(RecordError::BadLength(
                "record length does not match its fields",
            ));
        }
        Ok(())
    };
    check()
        .err()
        .unwrap_or(RecordError::InvalidRecord("malformed record"))
}

/// Size of a record's body (everything after its length varint).
pub fn record_body_size(
    offset_delta: i32,
    timestamp_delta: i64,
    key: Option<&[u8]>,
    value: Option<&[u8]>,
    headers: &[Header<'_>],
) -> usize {
    fn bytes_size(b: Option<&[u8]>) -> usize {
        match b {
            None => 1,
            Some(b) => varint_size(b.len() as i32) + b.len(),
        }
    }
    let mut size = 1 + varlong_size(timestamp_delta) + varint_size(offset_delta);
    size += bytes_size(key) + bytes_size(value);
    size += varint_size(headers.len() as i32);
    for h in headers {
        size += varint_size(h.key.len() as i32) + h.key.len() + bytes_size(h.value);
    }
    size
}

/// Size of a whole record including its length prefix.
pub fn record_size(
    offset_delta: i32,
    timestamp_delta: i64,
    key: Option<&[u8]>,
    value: Option<&[u8]>,
    headers: &[Header<'_>],
) -> usize {
    let body = record_body_size(offset_delta, timestamp_delta, key, value, headers);
    varint_size(body as i32) + body
}

/// Appends a v2 record; returns its total size.
pub fn write_record(
    out: &mut Vec<u8>,
    offset_delta: i32,
    timestamp_delta: i64,
    key: Option<&[u8]>,
    value: Option<&[u8]>,
    headers: &[Header<'_>],
) -> usize {
    fn put_bytes(out: &mut Vec<u8>, b: Option<&[u8]>) {
        match b {
            None => encode_varint(-1, out),
            Some(b) => {
                encode_varint(b.len() as i32, out);
                out.extend_from_slice(b);
            }
        }
    }
    let body = record_body_size(offset_delta, timestamp_delta, key, value, headers);
    let start = out.len();
    out.reserve(body + 5);
    encode_varint(body as i32, out);
    out.push(0); // attributes
    encode_varlong(timestamp_delta, out);
    encode_varint(offset_delta, out);
    put_bytes(out, key);
    put_bytes(out, value);
    encode_varint(headers.len() as i32, out);
    for h in headers {
        encode_varint(h.key.len() as i32, out);
        out.extend_from_slice(h.key);
        put_bytes(out, h.value);
    }
    out.len() - start
}

/// The kinds of control record (`ControlRecordType`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ControlRecordType {
    Abort,
    Commit,
    LeaderChange,
    SnapshotHeader,
    SnapshotFooter,
    KraftVoters,
    KraftVersion,
    Unknown(i16),
}

impl ControlRecordType {
    pub fn from_code(code: i16) -> Self {
        match code {
            0 => ControlRecordType::Abort,
            1 => ControlRecordType::Commit,
            2 => ControlRecordType::LeaderChange,
            3 => ControlRecordType::SnapshotHeader,
            4 => ControlRecordType::SnapshotFooter,
            5 => ControlRecordType::KraftVoters,
            6 => ControlRecordType::KraftVersion,
            other => ControlRecordType::Unknown(other),
        }
    }
    pub fn code(self) -> i16 {
        match self {
            ControlRecordType::Abort => 0,
            ControlRecordType::Commit => 1,
            ControlRecordType::LeaderChange => 2,
            ControlRecordType::SnapshotHeader => 3,
            ControlRecordType::SnapshotFooter => 4,
            ControlRecordType::KraftVoters => 5,
            ControlRecordType::KraftVersion => 6,
            ControlRecordType::Unknown(c) => c,
        }
    }
    pub fn name(self) -> &'static str {
        match self {
            ControlRecordType::Abort => "ABORT",
            ControlRecordType::Commit => "COMMIT",
            ControlRecordType::LeaderChange => "LEADER_CHANGE",
            ControlRecordType::SnapshotHeader => "SNAPSHOT_HEADER",
            ControlRecordType::SnapshotFooter => "SNAPSHOT_FOOTER",
            ControlRecordType::KraftVoters => "KRAFT_VOTERS",
            ControlRecordType::KraftVersion => "KRAFT_VERSION",
            ControlRecordType::Unknown(_) => "UNKNOWN",
        }
    }

    /// Reads the type from a control record's key: i16 version (≥ 0), i16 type.
    pub fn parse_key(key: Option<&[u8]>) -> Result<Self> {
        let key = key.ok_or(RecordError::InvalidRecord("control record without a key"))?;
        if key.len() < 4 {
            return Err(RecordError::Truncated {
                needed: 4,
                available: key.len(),
            });
        }
        let version = i16::from_be_bytes([key[0], key[1]]);
        if version < 0 {
            return Err(RecordError::InvalidRecord(
                "negative control record key version",
            ));
        }
        Ok(ControlRecordType::from_code(i16::from_be_bytes([
            key[2], key[3],
        ])))
    }

    /// The key of a control record of this type (version 0).
    pub fn key_bytes(self) -> [u8; 4] {
        let c = self.code().to_be_bytes();
        [0, 0, c[0], c[1]]
    }
}

/// The value of a COMMIT or ABORT marker (`EndTransactionMarker`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EndTransactionMarker {
    pub kind: ControlRecordType,
    pub coordinator_epoch: i32,
}

impl EndTransactionMarker {
    /// Reads a marker from a control record's key and value.
    pub fn parse(key: Option<&[u8]>, value: Option<&[u8]>) -> Result<Self> {
        let kind = ControlRecordType::parse_key(key)?;
        if !matches!(kind, ControlRecordType::Abort | ControlRecordType::Commit) {
            return Err(RecordError::InvalidRecord("not a transaction marker"));
        }
        let value = value.ok_or(RecordError::InvalidRecord(
            "transaction marker without a value",
        ))?;
        if value.len() < 6 {
            return Err(RecordError::Truncated {
                needed: 6,
                available: value.len(),
            });
        }
        let version = i16::from_be_bytes([value[0], value[1]]);
        if version < 0 {
            return Err(RecordError::InvalidRecord(
                "negative transaction marker version",
            ));
        }
        Ok(EndTransactionMarker {
            kind,
            coordinator_epoch: i32::from_be_bytes([value[2], value[3], value[4], value[5]]),
        })
    }

    /// The value bytes of this marker (version 0).
    pub fn value_bytes(&self) -> [u8; 6] {
        let e = self.coordinator_epoch.to_be_bytes();
        [0, 0, e[0], e[1], e[2], e[3]]
    }
}
