//! The bytes of `__transaction_state` records in Kafka's own schemas (TransactionLogKey and
//! TransactionLogValue), so that Kafka's tools read Weir's log and Weir reads Kafka's. Owns
//! encoding and decoding only, and never panics on stored bytes.
//!
//! - Key, version 0: the transactional id (i16 length + UTF-8).
//! - Value, version 0 (classic encoding): producer id i64, producer epoch i16, transaction
//!   timeout i32, state i8, the partitions (nullable i32-counted array of topic + i32
//!   partition array), last update and start timestamps i64.
//! - Value, version 1 (flexible: unsigned-varint lengths plus one, tagged fields): the
//!   same fields, with tags 0 previous producer id, 1 next producer id and 2 client
//!   transaction version at the end. Kafka writes it only once the `transaction.version`
//!   feature is at least 1; Weir writes version 0 and reads both.
//! - A null value (tombstone) deletes the transactional id.
//!
//! Hand-written rather than generated: kafka-protocol carries the API messages, not these
//! record schemas, and the two fit in the reader and writer below.

use std::collections::BTreeMap;

use thiserror::Error;

use crate::state::TxnState;

/// Why stored bytes could not be read (or a value could not be written).
#[derive(Debug, Error, PartialEq, Eq)]
pub enum RecordError {
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
    #[error("unknown transaction state {0}")]
    UnknownState(i8),
    #[error("{0} bytes left over after the record")]
    TrailingBytes(usize),
}

pub const KEY_VERSION: i16 = 0;
/// The value version Weir writes.
pub const VALUE_VERSION: i16 = 0;

/// TransactionLogValue: what the coordinator knows of one transactional id.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TxnLogValue {
    pub producer_id: i64,
    pub producer_epoch: i16,
    pub transaction_timeout_ms: i32,
    pub state: TxnState,
    /// Topic -> partitions in the transaction. `None` is written as a null array (Kafka
    /// writes null for Empty, and an empty array for the Complete states).
    pub partitions: Option<BTreeMap<String, Vec<i32>>>,
    pub last_update_timestamp_ms: i64,
    pub start_timestamp_ms: i64,
    /// Version 1 only (tagged fields); -1, -1 and 0 when absent.
    pub previous_producer_id: i64,
    pub next_producer_id: i64,
    pub client_transaction_version: i16,
}

/// The key of a transactional id's record.
pub fn encode_key(transactional_id: &str) -> Result<Vec<u8>, RecordError> {
    let mut w = Writer(Vec::with_capacity(4 + transactional_id.len()));
    w.i16(KEY_VERSION);
    w.string(transactional_id)?;
    Ok(w.0)
}

/// The transactional id of a record key.
pub fn decode_key(bytes: &[u8]) -> Result<String, RecordError> {
    let mut r = Reader(bytes);
    let version = r.i16()?;
    if version != KEY_VERSION {
        return Err(RecordError::UnknownVersion {
            kind: "TransactionLogKey",
            version,
        });
    }
    let id = r.string()?;
    r.finish()?;
    Ok(id)
}

/// A value in version 0, as Weir writes it.
pub fn encode_value(v: &TxnLogValue) -> Result<Vec<u8>, RecordError> {
    let mut w = Writer(Vec::with_capacity(64));
    w.i16(VALUE_VERSION);
    w.i64(v.producer_id);
    w.i16(v.producer_epoch);
    w.i32(v.transaction_timeout_ms);
    w.0.push(v.state.id() as u8);
    match &v.partitions {
        None => w.i32(-1),
        Some(topics) => {
            w.i32(topics.len() as i32);
            for (topic, partitions) in topics {
                w.string(topic)?;
                w.i32(partitions.len() as i32);
                for p in partitions {
                    w.i32(*p);
                }
            }
        }
    }
    w.i64(v.last_update_timestamp_ms);
    w.i64(v.start_timestamp_ms);
    Ok(w.0)
}

/// A value of version 0 or 1; later versions are read as 1 (KIP-915: they only add tagged
/// fields).
pub fn decode_value(bytes: &[u8]) -> Result<TxnLogValue, RecordError> {
    let mut r = Reader(bytes);
    let version = r.i16()?;
    if version < 0 {
        return Err(RecordError::UnknownVersion {
            kind: "TransactionLogValue",
            version,
        });
    }
    let flexible = version >= 1;
    let producer_id = r.i64()?;
    let producer_epoch = r.i16()?;
    let transaction_timeout_ms = r.i32()?;
    let state_id = r.i8()?;
    let state = TxnState::from_id(state_id).ok_or(RecordError::UnknownState(state_id))?;
    let count = if flexible {
        r.uvarint()? as i64 - 1
    } else {
        r.i32()? as i64
    };
    let partitions = if count < 0 {
        None
    } else {
        let mut topics = BTreeMap::new();
        for _ in 0..count {
            let topic = if flexible {
                r.compact_string()?
            } else {
                r.string()?
            };
            let n = if flexible {
                r.uvarint()? as i64 - 1
            } else {
                r.i32()? as i64
            };
            if n < 0 {
                return Err(RecordError::NegativeLength(n));
            }
            let mut ps = Vec::with_capacity((n as usize).min(r.0.len() / 4));
            for _ in 0..n {
                ps.push(r.i32()?);
            }
            if flexible {
                r.skip_tagged_fields(|_, _| Ok(()))?;
            }
            topics.insert(topic, ps);
        }
        Some(topics)
    };
    let last_update_timestamp_ms = r.i64()?;
    let start_timestamp_ms = r.i64()?;
    let mut v = TxnLogValue {
        producer_id,
        producer_epoch,
        transaction_timeout_ms,
        state,
        partitions,
        last_update_timestamp_ms,
        start_timestamp_ms,
        previous_producer_id: -1,
        next_producer_id: -1,
        client_transaction_version: 0,
    };
    if flexible {
        r.skip_tagged_fields(|tag, field| {
            let mut f = Reader(field);
            match tag {
                0 => v.previous_producer_id = f.i64()?,
                1 => v.next_producer_id = f.i64()?,
                2 => v.client_transaction_version = f.i16()?,
                _ => {}
            }
            Ok(())
        })?;
    }
    r.finish()?;
    Ok(v)
}

/// The partition of `__transaction_state` that holds `transactional_id` (Kafka's
/// `partitionFor`: the absolute value of Java's `String.hashCode`, with `i32::MIN` as 0,
/// modulo the partition count).
pub fn partition_for(transactional_id: &str, partitions: i32) -> i32 {
    assert!(partitions > 0, "__transaction_state has partitions");
    let mut h: i32 = 0;
    for unit in transactional_id.encode_utf16() {
        h = h.wrapping_mul(31).wrapping_add(unit as i32);
    }
    let abs = if h == i32::MIN { 0 } else { h.abs() };
    abs % partitions
}

struct Writer(Vec<u8>);

impl Writer {
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
}

struct Reader<'a>(&'a [u8]);

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8], RecordError> {
        if self.0.len() < n {
            return Err(RecordError::Truncated);
        }
        let (head, rest) = self.0.split_at(n);
        self.0 = rest;
        Ok(head)
    }
    fn i8(&mut self) -> Result<i8, RecordError> {
        Ok(self.take(1)?[0] as i8)
    }
    fn i16(&mut self) -> Result<i16, RecordError> {
        let b = self.take(2)?;
        Ok(i16::from_be_bytes([b[0], b[1]]))
    }
    fn i32(&mut self) -> Result<i32, RecordError> {
        let b = self.take(4)?;
        Ok(i32::from_be_bytes([b[0], b[1], b[2], b[3]]))
    }
    fn i64(&mut self) -> Result<i64, RecordError> {
        let mut a = [0u8; 8];
        a.copy_from_slice(self.take(8)?);
        Ok(i64::from_be_bytes(a))
    }
    fn utf8(bytes: &[u8]) -> Result<String, RecordError> {
        std::str::from_utf8(bytes)
            .map(str::to_owned)
            .map_err(|_| RecordError::InvalidUtf8)
    }
    fn string(&mut self) -> Result<String, RecordError> {
        let len = self.i16()?;
        if len < 0 {
            return Err(RecordError::NegativeLength(len as i64));
        }
        Self::utf8(self.take(len as usize)?)
    }
    fn uvarint(&mut self) -> Result<u32, RecordError> {
        let mut value: u32 = 0;
        for i in 0..5 {
            let b = self.take(1)?[0];
            value |= ((b & 0x7f) as u32) << (7 * i);
            if b & 0x80 == 0 {
                return Ok(value);
            }
        }
        Err(RecordError::Truncated)
    }
    fn compact_string(&mut self) -> Result<String, RecordError> {
        let len = self.uvarint()? as i64 - 1;
        if len < 0 {
            return Err(RecordError::NegativeLength(len));
        }
        Self::utf8(self.take(len as usize)?)
    }
    /// A tagged-field section: each field's tag and bytes go to `f`.
    fn skip_tagged_fields(
        &mut self,
        mut f: impl FnMut(u32, &[u8]) -> Result<(), RecordError>,
    ) -> Result<(), RecordError> {
        let n = self.uvarint()?;
        for _ in 0..n {
            let tag = self.uvarint()?;
            let size = self.uvarint()? as usize;
            f(tag, self.take(size)?)?;
        }
        Ok(())
    }
    fn finish(&self) -> Result<(), RecordError> {
        match self.0.len() {
            0 => Ok(()),
            n => Err(RecordError::TrailingBytes(n)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ongoing() -> TxnLogValue {
        TxnLogValue {
            producer_id: 4001,
            producer_epoch: 3,
            transaction_timeout_ms: 60_000,
            state: TxnState::Ongoing,
            partitions: Some(BTreeMap::from([
                ("orders".to_string(), vec![0, 2]),
                ("__consumer_offsets".to_string(), vec![17]),
            ])),
            last_update_timestamp_ms: 1_700_000_000_500,
            start_timestamp_ms: 1_700_000_000_000,
            previous_producer_id: -1,
            next_producer_id: -1,
            client_transaction_version: 0,
        }
    }

    #[test]
    fn version_0_is_kafkas_layout_byte_for_byte() {
        let key = encode_key("tx-1").unwrap();
        assert_eq!(key, [0, 0, 0, 4, b't', b'x', b'-', b'1']);
        assert_eq!(decode_key(&key).unwrap(), "tx-1");

        let v = ongoing();
        let bytes = encode_value(&v).unwrap();
        let mut want = Vec::new();
        want.extend_from_slice(&0i16.to_be_bytes());
        want.extend_from_slice(&4001i64.to_be_bytes());
        want.extend_from_slice(&3i16.to_be_bytes());
        want.extend_from_slice(&60_000i32.to_be_bytes());
        want.push(1); // Ongoing
        want.extend_from_slice(&2i32.to_be_bytes());
        for (topic, ps) in [("__consumer_offsets", vec![17i32]), ("orders", vec![0, 2])] {
            want.extend_from_slice(&(topic.len() as i16).to_be_bytes());
            want.extend_from_slice(topic.as_bytes());
            want.extend_from_slice(&(ps.len() as i32).to_be_bytes());
            for p in ps {
                want.extend_from_slice(&p.to_be_bytes());
            }
        }
        want.extend_from_slice(&1_700_000_000_500i64.to_be_bytes());
        want.extend_from_slice(&1_700_000_000_000i64.to_be_bytes());
        assert_eq!(bytes, want);
        assert_eq!(decode_value(&bytes).unwrap(), v);

        // Empty holds a null partition array.
        let empty = TxnLogValue {
            state: TxnState::Empty,
            partitions: None,
            ..ongoing()
        };
        let bytes = encode_value(&empty).unwrap();
        assert_eq!(&bytes[17..21], &(-1i32).to_be_bytes());
        assert_eq!(decode_value(&bytes).unwrap(), empty);
    }

    #[test]
    fn version_1_is_read_with_its_tagged_fields() {
        // TransactionLogValue v1 as Kafka writes it with transaction.version >= 1.
        let mut b = Vec::new();
        b.extend_from_slice(&1i16.to_be_bytes());
        b.extend_from_slice(&4001i64.to_be_bytes());
        b.extend_from_slice(&3i16.to_be_bytes());
        b.extend_from_slice(&60_000i32.to_be_bytes());
        b.push(2); // PrepareCommit
        b.push(2); // one topic (compact: count + 1)
        b.push(7); // "orders" (compact: length + 1)
        b.extend_from_slice(b"orders");
        b.push(3); // two partitions
        b.extend_from_slice(&0i32.to_be_bytes());
        b.extend_from_slice(&2i32.to_be_bytes());
        b.push(0); // the topic's tagged fields: none
        b.extend_from_slice(&1_700_000_000_500i64.to_be_bytes());
        b.extend_from_slice(&1_700_000_000_000i64.to_be_bytes());
        b.push(3); // three tagged fields
        b.extend_from_slice(&[0, 8]);
        b.extend_from_slice(&4000i64.to_be_bytes());
        b.extend_from_slice(&[1, 8]);
        b.extend_from_slice(&4002i64.to_be_bytes());
        b.extend_from_slice(&[2, 2]);
        b.extend_from_slice(&2i16.to_be_bytes());
        let v = decode_value(&b).unwrap();
        assert_eq!(v.state, TxnState::PrepareCommit);
        assert_eq!(
            v.partitions,
            Some(BTreeMap::from([("orders".to_string(), vec![0, 2])]))
        );
        assert_eq!(
            (
                v.previous_producer_id,
                v.next_producer_id,
                v.client_transaction_version
            ),
            (4000, 4002, 2)
        );
        // Damaged bytes are errors, never panics.
        for cut in 0..b.len() {
            assert!(decode_value(&b[..cut]).is_err(), "cut at {cut}");
        }
        let mut unknown = b.clone();
        unknown[16] = 9;
        assert_eq!(decode_value(&unknown), Err(RecordError::UnknownState(9)));
    }

    #[test]
    fn partitions_follow_javas_string_hash() {
        // Java: "tx-1".hashCode() == 3_572_520; "hello".hashCode() == 99_162_322.
        assert_eq!(partition_for("tx-1", 50), 3_572_520 % 50);
        assert_eq!(partition_for("hello", 50), 99_162_322 % 50);
        assert_eq!(partition_for("", 50), 0);
        // A negative hash: "polygenelubricants".hashCode() == i32::MIN, which Kafka's
        // Utils.abs maps to 0.
        assert_eq!(partition_for("polygenelubricants", 50), 0);
        // Beyond the BMP, Java hashes UTF-16 code units: "😀" is 0xD83D 0xDE00.
        let h = (0xD83Di32 * 31 + 0xDE00) % 50;
        assert_eq!(partition_for("😀", 50), h);
    }
}
