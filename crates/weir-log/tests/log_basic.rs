//! PartitionLog behaviour a broker relies on: offsets, reads, rolls, lookups, truncation,
//! DeleteRecords, retention, and reopening after clean and unclean shutdowns.

mod common;

use common::*;
use weir_kafka::TopicPartition;
use weir_log::{AppendOrigin, LoadParams, LogConfig, PartitionLog};
use weir_record::Compression;

fn open(
    dir: &std::path::Path,
    config: std::sync::Arc<LogConfig>,
    clean: bool,
    rp: Option<i64>,
) -> PartitionLog {
    let params = LoadParams {
        recovery_point: rp,
        log_start_offset: None,
        had_clean_shutdown: clean,
        now_ms: NOW,
    };
    PartitionLog::open(dir, TopicPartition::new("t", 0), config, params)
        .unwrap()
        .0
}

#[test]
fn appends_assign_contiguous_offsets_across_rolls_and_read_back() {
    let dir = tempfile::tempdir().unwrap();
    let pdir = dir.path().join("t-0");
    let mut log = PartitionLog::create(
        &pdir,
        TopicPartition::new("t", 0),
        uuid::Uuid::new_v4(),
        small_config(),
        NOW,
    )
    .unwrap();
    let mut expected = Vec::new();
    for i in 0..60 {
        let codec = Compression::ALL[i % 5];
        let info = log
            .append_as_leader(
                simple_batch(codec, 7, &format!("b{i}"), NOW + i as i64 * 10),
                0,
                NOW,
                AppendOrigin::Client,
            )
            .unwrap();
        assert_eq!(info.first_offset, i as i64 * 7);
        assert_eq!(info.last_offset, i as i64 * 7 + 6);
        for j in 0..7 {
            expected.push((
                format!("k{j}").into_bytes(),
                format!("b{i}-{j}").into_bytes(),
            ));
        }
    }
    assert!(
        log.num_segments() > 3,
        "small segments roll: {}",
        log.num_segments()
    );
    assert_eq!(log.log_end_offset(), 420);
    let got = read_all(&log);
    assert_eq!(got.len(), 420);
    for (i, r) in got.iter().enumerate() {
        assert_eq!(r.offset, i as i64);
        assert_eq!(r.key.as_deref(), Some(expected[i].0.as_slice()));
        assert_eq!(r.value.as_deref(), Some(expected[i].1.as_slice()));
    }
    // Reading from the middle of a batch returns the batch that holds the offset.
    let data = log.read(100, 1, i64::MAX, true).unwrap();
    let recs = decode(&data.slice.unwrap().read_to_vec().unwrap());
    assert!(recs.first().unwrap().offset <= 100 && recs.last().unwrap().offset >= 100);
    // Out of range.
    assert!(log.read(421, 100, i64::MAX, true).is_err());
    assert!(log.read(420, 100, i64::MAX, true).unwrap().slice.is_none());

    // Clean restart: same records, nothing rescanned.
    log.close(NOW).unwrap();
    drop(log);
    let log = open(&pdir, small_config(), true, None);
    assert_eq!(log.log_end_offset(), 420);
    assert_eq!(read_all(&log), got);
}

#[test]
fn timestamps_truncation_delete_records_and_retention() {
    let dir = tempfile::tempdir().unwrap();
    let pdir = dir.path().join("t-0");
    let mut log = PartitionLog::create(
        &pdir,
        TopicPartition::new("t", 0),
        uuid::Uuid::new_v4(),
        small_config(),
        NOW,
    )
    .unwrap();
    for i in 0..40 {
        log.append_as_leader(
            simple_batch(Compression::None, 5, "v", 1000 + i * 100),
            0,
            NOW,
            AppendOrigin::Client,
        )
        .unwrap();
    }
    // record i has timestamp 1000 + (i/5)*100 + i%5
    let hit = log.offset_for_timestamp(1502).unwrap().unwrap();
    assert_eq!((hit.offset, hit.timestamp), (27, 1502));
    let hit = log.offset_for_timestamp(1505).unwrap().unwrap();
    assert_eq!((hit.offset, hit.timestamp), (30, 1600));
    assert!(log.offset_for_timestamp(99_999).unwrap().is_none());
    let max = log.offset_for_timestamp(-3).unwrap().unwrap();
    assert_eq!((max.offset, max.timestamp), (199, 1000 + 39 * 100 + 4));
    assert_eq!(log.offset_for_timestamp(-2).unwrap().unwrap().offset, 0);
    assert_eq!(log.offset_for_timestamp(-1).unwrap().unwrap().offset, 200);

    log.truncate_to(123, NOW).unwrap();
    assert_eq!(
        log.log_end_offset(),
        120,
        "truncation drops the whole batch holding 123"
    );
    let got = read_all(&log);
    assert_eq!(got.len(), 120);
    assert!(log.offset_for_timestamp(1502).unwrap().is_some());
    assert!(
        log.offset_for_timestamp(3400).unwrap().is_none(),
        "truncated records are gone"
    );
    let info = log
        .append_as_leader(
            simple_batch(Compression::Lz4, 3, "new", 5000),
            0,
            NOW,
            AppendOrigin::Client,
        )
        .unwrap();
    assert_eq!(info.first_offset, 120);

    // DeleteRecords moves the log start; retention then removes whole segments below it.
    let segments_before = log.num_segments();
    assert_eq!(log.delete_records_before(61).unwrap(), 61);
    assert!(
        log.read(60, 100, i64::MAX, true).is_err(),
        "below the log start is out of range"
    );
    assert_eq!(read_all(&log).first().unwrap().offset, 61);
    let raw = log
        .read(61, 1, i64::MAX, true)
        .unwrap()
        .slice
        .unwrap()
        .read_to_vec()
        .unwrap();
    assert_eq!(
        decode(&raw)[0].offset,
        60,
        "the batch holding 61 starts at 60"
    );
    assert!(log.delete_old_segments(NOW).unwrap() > 0);
    assert!(log.num_segments() < segments_before);
    assert_eq!(log.log_start_offset(), 61);
    assert!(
        log.delete_records_before(1000).is_err(),
        "beyond the high watermark"
    );

    // Size retention keeps at most retention.bytes (whole segments, oldest first).
    let mut cfg = (**log.config()).clone();
    cfg.retention_bytes = 2000;
    log.update_config(std::sync::Arc::new(cfg));
    log.delete_old_segments(NOW).unwrap();
    assert!(
        log.size_in_bytes() <= 2000 + 1024,
        "size {}",
        log.size_in_bytes()
    );
    // Time retention by record timestamps: everything is older than a day after NOW.
    let mut cfg = (**log.config()).clone();
    cfg.retention_ms = 1000;
    log.update_config(std::sync::Arc::new(cfg));
    log.delete_old_segments(NOW).unwrap();
    assert_eq!(log.num_segments(), 1, "only a fresh active segment remains");
    assert_eq!(log.log_start_offset(), 123);
    assert_eq!(log.log_end_offset(), 123);
    assert!(read_all(&log).is_empty());
}

#[test]
fn unclean_restart_recovers_and_truncates_a_torn_tail() {
    let dir = tempfile::tempdir().unwrap();
    let pdir = dir.path().join("t-0");
    let mut log = PartitionLog::create(
        &pdir,
        TopicPartition::new("t", 0),
        uuid::Uuid::new_v4(),
        small_config(),
        NOW,
    )
    .unwrap();
    for i in 0..30 {
        log.append_as_leader(
            simple_batch(Compression::Snappy, 4, &format!("x{i}"), NOW),
            0,
            NOW,
            AppendOrigin::Client,
        )
        .unwrap();
    }
    let before = read_all(&log);
    let active = *log.segment_bases().last().unwrap();
    drop(log); // a crash: no close, no flush
               // A torn write: half a batch and some garbage at the end of the active segment.
    let seg = pdir.join(format!("{active:020}.log"));
    let half = simple_batch(Compression::None, 3, "torn", NOW);
    let mut f = std::fs::OpenOptions::new().append(true).open(&seg).unwrap();
    std::io::Write::write_all(&mut f, &half[..half.len() / 2]).unwrap();
    // And a lost index.
    std::fs::remove_file(pdir.join(format!("{active:020}.index"))).unwrap();
    let mut log = open(&pdir, small_config(), false, Some(0));
    assert_eq!(read_all(&log), before);
    assert_eq!(log.log_end_offset(), 120);
    let info = log
        .append_as_leader(
            simple_batch(Compression::None, 2, "after", NOW),
            0,
            NOW,
            AppendOrigin::Client,
        )
        .unwrap();
    assert_eq!(info.first_offset, 120);
}

/// Recovery rebuilds indexes at their full size; a segment that is not the active one must
/// leave it trimmed to its entries (as a roll does), or the next start reads the zeroed
/// tail as entries, finds the time index out of order, and rebuilds it again every time.
#[test]
fn recovered_segments_leave_trimmed_indexes_that_the_next_start_trusts() {
    let dir = tempfile::tempdir().unwrap();
    let pdir = dir.path().join("t-0");
    let mut log = PartitionLog::create(
        &pdir,
        TopicPartition::new("t", 0),
        uuid::Uuid::new_v4(),
        small_config(),
        NOW,
    )
    .unwrap();
    for i in 0..40 {
        log.append_as_leader(
            simple_batch(Compression::None, 4, &format!("x{i}"), NOW + i),
            0,
            NOW,
            AppendOrigin::Client,
        )
        .unwrap();
    }
    let bases = log.segment_bases();
    assert!(bases.len() >= 4, "several rolled segments: {bases:?}");
    drop(log); // a crash
    let params = |rp: i64| LoadParams {
        recovery_point: Some(rp),
        log_start_offset: None,
        had_clean_shutdown: false,
        now_ms: NOW,
    };
    let cfg = small_config();
    let (log, report) =
        PartitionLog::open(&pdir, TopicPartition::new("t", 0), cfg.clone(), params(0)).unwrap();
    assert_eq!(
        report.recovered_segments,
        bases.len(),
        "all recovered from 0"
    );
    let end = log.log_end_offset();
    let before = read_all(&log);
    drop(log);
    for base in &bases[..bases.len() - 1] {
        for (suffix, entry) in [("index", 8u64), ("timeindex", 12)] {
            let len = std::fs::metadata(pdir.join(format!("{base:020}.{suffix}")))
                .unwrap()
                .len();
            assert!(
                len.is_multiple_of(entry) && len < cfg.segment_index_bytes as u64 - entry,
                "{base:020}.{suffix} is {len} bytes: not trimmed to its entries"
            );
        }
    }
    // Crash again with everything below the active segment flushed: only it is recovered.
    let (log, report) =
        PartitionLog::open(&pdir, TopicPartition::new("t", 0), cfg, params(end)).unwrap();
    assert_eq!(
        report.recovered_segments, 1,
        "the inactive segments' indexes were trusted"
    );
    assert_eq!(read_all(&log), before);
}

fn idempotent_batch(pid: i64, epoch: i16, seq: i32, n: usize, tag: &str) -> Vec<u8> {
    let mut b =
        weir_record::BatchBuilder::new(Compression::Lz4, 0, usize::MAX).producer(pid, epoch, seq);
    for i in 0..n {
        b.append(
            NOW + i as i64,
            Some(b"k"),
            Some(format!("{tag}-{i}").as_bytes()),
            &[],
        )
        .unwrap();
    }
    b.build().unwrap().bytes
}

#[test]
fn idempotent_retries_are_answered_with_their_original_offsets_across_restarts() {
    let dir = tempfile::tempdir().unwrap();
    let pdir = dir.path().join("t-0");
    let mut log = PartitionLog::create(
        &pdir,
        TopicPartition::new("t", 0),
        uuid::Uuid::new_v4(),
        small_config(),
        NOW,
    )
    .unwrap();
    let a = log
        .append_as_leader(
            idempotent_batch(42, 0, 0, 3, "a"),
            0,
            NOW,
            AppendOrigin::Client,
        )
        .unwrap();
    let b = log
        .append_as_leader(
            idempotent_batch(42, 0, 3, 2, "b"),
            0,
            NOW,
            AppendOrigin::Client,
        )
        .unwrap();
    assert_eq!(
        (a.first_offset, a.last_offset, b.first_offset, b.last_offset),
        (0, 2, 3, 4)
    );
    let retry = log
        .append_as_leader(
            idempotent_batch(42, 0, 0, 3, "a"),
            0,
            NOW,
            AppendOrigin::Client,
        )
        .unwrap();
    assert!(retry.duplicate);
    assert_eq!((retry.first_offset, retry.last_offset), (0, 2));
    assert_eq!(log.log_end_offset(), 5, "a duplicate writes nothing");
    let gap = log
        .append_as_leader(
            idempotent_batch(42, 0, 9, 1, "gap"),
            0,
            NOW,
            AppendOrigin::Client,
        )
        .unwrap_err();
    assert_eq!(
        gap.kafka_error_code(),
        19,
        "NOT_ENOUGH_REPLICAS, retriable: the batches before it are to come"
    );
    let fenced = log
        .append_as_leader(
            idempotent_batch(42, -1, 5, 1, "old"),
            0,
            NOW,
            AppendOrigin::Client,
        )
        .unwrap_err();
    assert_eq!(fenced.kafka_error_code(), 47, "INVALID_PRODUCER_EPOCH");
    for i in 0..20 {
        log.append_as_leader(
            simple_batch(Compression::None, 5, &format!("fill{i}"), NOW),
            0,
            NOW,
            AppendOrigin::Client,
        )
        .unwrap();
    }
    let c = log
        .append_as_leader(
            idempotent_batch(42, 0, 5, 4, "c"),
            0,
            NOW,
            AppendOrigin::Client,
        )
        .unwrap();
    // Clean restart: state from the shutdown snapshot.
    log.close(NOW).unwrap();
    drop(log);
    let mut log = open(&pdir, small_config(), true, None);
    let retry = log
        .append_as_leader(
            idempotent_batch(42, 0, 5, 4, "c"),
            0,
            NOW,
            AppendOrigin::Client,
        )
        .unwrap();
    assert!(retry.duplicate);
    assert_eq!(retry.first_offset, c.first_offset);
    // Crash: state rebuilt from the last roll's snapshot plus the batches after it.
    let d = log
        .append_as_leader(
            idempotent_batch(42, 0, 9, 2, "d"),
            0,
            NOW,
            AppendOrigin::Client,
        )
        .unwrap();
    let rp = log.recovery_point();
    drop(log);
    let _ = std::fs::remove_file(pdir.join(format!("{:020}.snapshot", d.last_offset + 1)));
    let mut log = open(&pdir, small_config(), false, Some(rp));
    let retry = log
        .append_as_leader(
            idempotent_batch(42, 0, 9, 2, "d"),
            0,
            NOW,
            AppendOrigin::Client,
        )
        .unwrap();
    assert!(retry.duplicate);
    assert_eq!(
        (retry.first_offset, retry.last_offset),
        (d.first_offset, d.last_offset)
    );
    let next = log
        .append_as_leader(
            idempotent_batch(42, 0, 11, 1, "e"),
            0,
            NOW,
            AppendOrigin::Client,
        )
        .unwrap();
    assert!(!next.duplicate);
    assert_eq!(next.first_offset, d.last_offset + 1);
}

#[test]
fn append_raw_refuses_an_entry_that_ends_below_its_base_offset() {
    let dir = tempfile::tempdir().unwrap();
    let mut log = PartitionLog::create(
        &dir.path().join("t-0"),
        TopicPartition::new("t", 0),
        uuid::Uuid::new_v4(),
        small_config(),
        NOW,
    )
    .unwrap();
    // Already-numbered entries may start past the log end offset (compaction leaves gaps).
    let mut good = simple_batch(Compression::None, 3, "a", NOW);
    good[..8].copy_from_slice(&10i64.to_be_bytes());
    log.append_raw(&good, NOW).unwrap();
    assert_eq!(log.log_end_offset(), 13);
    // A v2 batch at 20 whose last offset delta says it ends at 15 would move the log end
    // offset backwards; it is refused whole.
    let mut bad = simple_batch(Compression::None, 3, "b", NOW);
    bad[..8].copy_from_slice(&20i64.to_be_bytes());
    bad[23..27].copy_from_slice(&(-5i32).to_be_bytes());
    let e = log.append_raw(&bad, NOW).unwrap_err();
    assert!(e.to_string().contains("ends below it"), "{e}");
    assert_eq!(log.log_end_offset(), 13, "nothing was appended");
    let offsets: Vec<i64> = read_all(&log).iter().map(|r| r.offset).collect();
    assert_eq!(offsets, [10, 11, 12]);
}

#[test]
fn a_roll_never_puts_a_segment_below_the_active_one() {
    let dir = tempfile::tempdir().unwrap();
    let pdir = dir.path().join("t-0");
    let mut log = PartitionLog::create(
        &pdir,
        TopicPartition::new("t", 0),
        uuid::Uuid::new_v4(),
        small_config(),
        NOW,
    )
    .unwrap();
    log.append_as_leader(
        simple_batch(Compression::None, 3, "a", NOW),
        0,
        NOW,
        AppendOrigin::Client,
    )
    .unwrap();
    log.close(NOW).unwrap();
    drop(log);
    // A segment at 100 whose batch header, damaged on disk, says offset 5. After a clean
    // shutdown nothing re-reads it whole, so the log end offset comes out as 8.
    let mut lying = simple_batch(Compression::None, 3, "b", NOW);
    lying[..8].copy_from_slice(&5i64.to_be_bytes());
    std::fs::write(pdir.join("00000000000000000100.log"), &lying).unwrap();
    std::fs::write(pdir.join("00000000000000000100.index"), b"").unwrap();
    std::fs::write(pdir.join("00000000000000000100.timeindex"), b"").unwrap();
    let mut log = open(&pdir, small_config(), true, None);
    assert_eq!(log.log_end_offset(), 8);
    // As in Kafka, the roll is refused, and appends fail rather than land below segment 100.
    assert!(log.roll(None, NOW).is_err());
    assert_eq!(log.segment_bases(), [0, 100]);
    assert!(log
        .append_as_leader(
            simple_batch(Compression::None, 1, "c", NOW),
            0,
            NOW,
            AppendOrigin::Client,
        )
        .is_err());
    assert_eq!(log.log_end_offset(), 8);
}
