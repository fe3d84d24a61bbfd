//! Property tests for v2 batches: whatever records go into `BatchBuilder`, in any codec,
//! come back out of `RecordBatch` exactly; any single flipped byte under the CRC is caught;
//! and no byte sequence makes the decoders panic.

use proptest::prelude::*;
use weir_record::{
    BatchBuilder, Compression, DetachedBatchHeader, Header, LogEntries, RecordBatch,
    RecordBatchMut, TimestampType,
};

/// How far a batch may inflate in these tests.
const LIMIT: usize = 64 * 1024 * 1024;

#[derive(Debug, Clone)]
struct TestRecord {
    timestamp: i64,
    key: Option<Vec<u8>>,
    value: Option<Vec<u8>>,
    headers: Vec<(String, Option<Vec<u8>>)>,
}

/// Byte strings in every size class a varint length cares about: empty, one-byte lengths,
/// two-byte lengths, and a few KiB.
fn bytes_any() -> impl Strategy<Value = Option<Vec<u8>>> {
    prop_oneof![
        Just(None),
        Just(Some(Vec::new())),
        proptest::collection::vec(any::<u8>(), 1..64).prop_map(Some),
        proptest::collection::vec(any::<u8>(), 64..300).prop_map(Some),
        proptest::collection::vec(any::<u8>(), 8000..9000).prop_map(Some),
    ]
}

fn record() -> impl Strategy<Value = TestRecord> {
    (
        prop_oneof![Just(-1i64), 0i64..2_000_000_000_000],
        bytes_any(),
        bytes_any(),
        proptest::collection::vec(("[a-z\u{e9}\u{4e2d}]{0,12}", bytes_any()), 0..4),
    )
        .prop_map(|(timestamp, key, value, headers)| TestRecord {
            timestamp,
            key,
            value,
            headers,
        })
}

fn codec() -> impl Strategy<Value = Compression> {
    (0u8..5).prop_map(|c| Compression::from_id(c).unwrap())
}

fn build(codec: Compression, base: i64, records: &[TestRecord]) -> Vec<u8> {
    let mut b = BatchBuilder::new(codec, base, usize::MAX).producer(77, 2, 40);
    for r in records {
        let headers: Vec<Header> = r
            .headers
            .iter()
            .map(|(k, v)| Header::new(k, v.as_deref()))
            .collect();
        b.append(r.timestamp, r.key.as_deref(), r.value.as_deref(), &headers)
            .unwrap();
    }
    b.build().unwrap().bytes
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(96))]

    #[test]
    fn batches_round_trip(codec in codec(), base in 0i64..1 << 40,
                          records in proptest::collection::vec(record(), 1..20)) {
        let bytes = build(codec, base, &records);
        let batch = RecordBatch::parse(&bytes).unwrap();
        prop_assert!(batch.is_crc_valid());
        prop_assert_eq!(batch.size_in_bytes(), bytes.len());
        prop_assert_eq!(batch.compression().unwrap(), codec);
        prop_assert_eq!(batch.base_offset(), base);
        prop_assert_eq!(batch.last_offset(), base + records.len() as i64 - 1);
        prop_assert_eq!(batch.records_count() as usize, records.len());
        prop_assert_eq!((batch.producer_id(), batch.producer_epoch(), batch.base_sequence()), (77, 2, 40));
        let max_ts = records.iter().map(|r| r.timestamp).max().unwrap();
        prop_assert_eq!(batch.max_timestamp(), max_ts);
        prop_assert_eq!(batch.base_timestamp(), records[0].timestamp);
        let decoded = batch.records(LIMIT).unwrap();
        let mut n = 0;
        for (i, (got, want)) in decoded.iter().zip(&records).enumerate() {
            let got = got.unwrap();
            prop_assert_eq!(got.offset, base + i as i64);
            prop_assert_eq!(got.timestamp, want.timestamp);
            prop_assert_eq!(got.key, want.key.as_deref());
            prop_assert_eq!(got.value, want.value.as_deref());
            let headers: Vec<(Vec<u8>, Option<Vec<u8>>)> = got.headers.iter()
                .map(|h| (h.key.to_vec(), h.value.map(|v| v.to_vec()))).collect();
            let want_headers: Vec<(Vec<u8>, Option<Vec<u8>>)> = want.headers.iter()
                .map(|(k, v)| (k.as_bytes().to_vec(), v.clone())).collect();
            prop_assert_eq!(headers, want_headers);
            n += 1;
        }
        prop_assert_eq!(n, records.len());
        batch.validate_records(LIMIT).unwrap();
    }

    #[test]
    fn a_detached_header_fixes_up_exactly_as_the_batch_in_place_does(codec in codec(),
            records in proptest::collection::vec(record(), 1..8), base in 0i64..1 << 40,
            epoch in 0i32..1000, log_append in any::<bool>(), ts in 0i64..2_000_000_000_000) {
        let mut whole = build(codec, 0, &records);
        let (ts_type, max_ts) = if log_append {
            (TimestampType::LogAppendTime, ts)
        } else {
            (TimestampType::CreateTime, records.iter().map(|r| r.timestamp).max().unwrap())
        };
        let mut header = DetachedBatchHeader::new(&RecordBatch::parse(&whole).unwrap());
        header.set_base_offset(base);
        header.set_partition_leader_epoch(epoch);
        header.set_max_timestamp(ts_type, max_ts, &whole[61..]);
        let mut spliced = header.as_bytes().to_vec();
        spliced.extend_from_slice(&whole[61..]);
        {
            let mut m = RecordBatchMut::parse(&mut whole).unwrap();
            m.set_base_offset(base);
            m.set_partition_leader_epoch(epoch);
            m.set_max_timestamp(ts_type, max_ts);
        }
        prop_assert_eq!(&spliced, &whole);
        prop_assert!(RecordBatch::parse(&spliced).unwrap().is_crc_valid());
    }

    #[test]
    fn any_flipped_byte_under_the_crc_is_detected(codec in codec(),
            records in proptest::collection::vec(record(), 1..5),
            pick in any::<proptest::sample::Index>(), bit in 0u8..8) {
        let mut bytes = build(codec, 0, &records);
        // The CRC covers everything from the attributes (byte 21) to the end.
        let at = 21 + pick.index(bytes.len() - 21);
        bytes[at] ^= 1 << bit;
        let mut entries = LogEntries::new(&bytes);
        match entries.next() {
            Some(Ok((_, entry))) => {
                prop_assert!(!entry.is_crc_valid());
                // Decoding the damaged records may fail, but must not panic.
                if let Ok(records) = entry.records(1 << 20) {
                    for r in records.iter() { let _ = r; }
                }
            }
            Some(Err(_)) => {} // a header field became invalid: also caught
            None => prop_assert!(false, "the entry vanished"),
        }
    }

    #[test]
    fn random_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..400)) {
        weir_record::fuzzing::exercise_decoder(&bytes, 1 << 16);
    }

    #[test]
    fn mutated_valid_batches_never_panic(codec in codec(),
            records in proptest::collection::vec(record(), 1..4),
            edits in proptest::collection::vec((any::<proptest::sample::Index>(), any::<u8>()), 1..6),
            cut in any::<proptest::sample::Index>()) {
        let mut bytes = build(codec, 5, &records);
        for (i, v) in edits {
            let at = i.index(bytes.len());
            bytes[at] = v;
        }
        bytes.truncate(cut.index(bytes.len() + 1));
        weir_record::fuzzing::exercise_decoder(&bytes, 1 << 20);
    }

    #[test]
    fn has_room_for_keeps_uncompressed_batches_within_the_limit(
            limit in 200usize..5000, records in proptest::collection::vec(record(), 1..40)) {
        let mut b = BatchBuilder::new(Compression::None, 0, limit);
        let mut appended = 0;
        for r in &records {
            let headers: Vec<Header> = r.headers.iter().map(|(k, v)| Header::new(k, v.as_deref())).collect();
            if !b.has_room_for(r.timestamp, r.key.as_deref(), r.value.as_deref(), &headers) {
                break;
            }
            b.append(r.timestamp, r.key.as_deref(), r.value.as_deref(), &headers).unwrap();
            appended += 1;
        }
        prop_assert!(appended >= 1, "the first record always fits");
        let size = b.build().unwrap().bytes.len();
        prop_assert!(appended == 1 || size <= limit, "{} records, {} bytes, limit {}", appended, size, limit);
    }
}

#[test]
fn in_place_fixups_keep_the_batch_valid() {
    let records = vec![
        TestRecord {
            timestamp: 1000,
            key: Some(b"k".to_vec()),
            value: None,
            headers: vec![]
        };
        3
    ];
    let mut bytes = build(Compression::Lz4, 0, &records);
    let crc_before = RecordBatch::parse(&bytes).unwrap().crc();
    {
        let mut m = RecordBatchMut::parse(&mut bytes).unwrap();
        m.set_last_offset(1002);
        m.set_partition_leader_epoch(7);
    }
    let b = RecordBatch::parse(&bytes).unwrap();
    assert_eq!(
        (b.base_offset(), b.last_offset(), b.partition_leader_epoch()),
        (1000, 1002, 7)
    );
    assert_eq!(b.crc(), crc_before, "offsets and epoch are outside the CRC");
    assert!(b.is_crc_valid());
    {
        let mut m = RecordBatchMut::parse(&mut bytes).unwrap();
        m.set_max_timestamp(TimestampType::LogAppendTime, 5555);
    }
    let b = RecordBatch::parse(&bytes).unwrap();
    assert!(b.is_crc_valid());
    assert_eq!(b.timestamp_type(), TimestampType::LogAppendTime);
    let recs = b.records(LIMIT).unwrap();
    let ts: Vec<i64> = recs.iter().map(|r| r.unwrap().timestamp).collect();
    assert_eq!(
        ts,
        vec![5555; 3],
        "LogAppendTime gives every record the append time"
    );
    {
        let mut m = RecordBatchMut::parse(&mut bytes).unwrap();
        m.set_producer_state(77, 4, 1_000);
    }
    let b = RecordBatch::parse(&bytes).unwrap();
    assert!(b.is_crc_valid(), "the producer fields are inside the CRC");
    assert_eq!(
        (b.producer_id(), b.producer_epoch(), b.base_sequence()),
        (77, 4, 1_000)
    );
    assert_eq!(b.records(LIMIT).unwrap().iter().count(), 3);
}

#[test]
fn decompression_bomb_is_refused() {
    // 64 MiB of zeros compresses to a few KiB; a reader with a 1 MiB budget must refuse it.
    let value = vec![0u8; 64 << 20];
    for codec in [
        Compression::Gzip,
        Compression::Lz4,
        Compression::Zstd,
        Compression::Snappy,
    ] {
        let mut b = BatchBuilder::new(codec, 0, usize::MAX);
        b.append(0, None, Some(&value), &[]).unwrap();
        let bytes = b.build().unwrap().bytes;
        assert!(
            bytes.len() < 4 << 20,
            "{codec} compressed to {}",
            bytes.len()
        );
        let batch = RecordBatch::parse(&bytes).unwrap();
        let err = batch.records(1 << 20).err().expect("bomb refused");
        assert!(
            matches!(err, weir_record::RecordError::TooLarge { .. }),
            "{codec}: {err}"
        );
    }
}

#[test]
fn batch_size_estimate_follows_kafka_for_compressed_batches() {
    // With an estimated ratio of 0.5, 1000 bytes of records are estimated at
    // 61 + 1000 * 0.5 * 1.05 = 586 bytes.
    let mut b = BatchBuilder::new(Compression::Gzip, 0, 10_000).estimated_compression_ratio(0.5);
    let value = vec![b'x'; 991]; // body 998 bytes + a 2-byte length: exactly 1000
    b.append(0, None, Some(&value), &[]).unwrap();
    assert_eq!(b.uncompressed_records_size(), 1000);
    assert_eq!(b.estimated_size_in_bytes(), 61 + 525);
}
